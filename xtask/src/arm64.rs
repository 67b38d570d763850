// SPDX-License-Identifier: GPL-2.0

//! Debian's arm64 kernel, the same release as the amd64 one of `--profile debian`. So
//! far its image only: the A64 decoder's host test (`crates/fctrace-decode/tests/
//! a64_vs_bad64.rs`) checks every word of it against the bad64 disassembler. The image
//! is unpacked from its package (`linux-binary-*`, checked against Debian's signed
//! index, `archive.rs`) into `~/.cache/fctrace/debian-arm64/vmlinuz-<ABI>`.

use std::fs;
use std::path::PathBuf;

use crate::archive;
use crate::util::{bail, echo, note, Result};

/// The kernel's ABI name.
pub const ABI: &str = "7.3.4+deb13-arm64";
const SUITE: &str = "trixie-backports";
const INDEX: &str = "main/binary-arm64/Packages.xz";

fn dir() -> PathBuf {
    crate::util::cache_root().join("debian-arm64")
}

/// Where the image is, once [`ensure_image`] has fetched it.
pub fn image() -> PathBuf {
    dir().join(format!("vmlinuz-{ABI}"))
}

/// Fetches Debian's arm64 kernel image unless it is there; returns its path.
pub fn ensure_image() -> Result<PathBuf> {
    let img = image();
    if img.exists() {
        return Ok(img);
    }
    note(format!("fetching Debian's arm64 kernel image {ABI}"));
    let tmp = crate::util::cache_root().join("debian-arm64.tmp");
    let _ = fs::remove_dir_all(&tmp);
    fs::create_dir_all(&tmp)?;
    let index = archive::signed_index(SUITE, INDEX, &tmp)?;
    let name = format!("linux-binary-{ABI}");
    let p = archive::find_package(&index, &name)
        .ok_or_else(|| format!("{SUITE} has no package {name}"))?;
    if p.version != crate::debian::KERNEL_VERSION {
        bail!(
            "{SUITE}'s {name} is {}, not {}: update xtask/src/debian.rs",
            p.version,
            crate::debian::KERNEL_VERSION
        );
    }
    let deb = archive::fetch_package(&p, &tmp.join("linux-binary.deb"))?;
    let root = tmp.join("root");
    duct::cmd!("dpkg-deb", "-x", &deb, &root)
        .before_spawn(echo)
        .run()?;
    fs::create_dir_all(dir())?;
    fs::rename(root.join(format!("usr/lib/modules/{ABI}/vmlinuz")), &img)?;
    fs::remove_dir_all(&tmp)?;
    Ok(img)
}
