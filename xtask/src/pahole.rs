// SPDX-License-Identifier: GPL-2.0

//! pahole 1.30 for the test kernels' BTF, set up by `cargo xtask setup`.
//!
//! Debian 12's pahole (1.24) writes BTF from the source's prototypes even where the
//! compiler changed a function's arguments: clang drops unused arguments of static
//! functions (LLVM's dead-argument elimination) without renaming them, so the default
//! kernel's BTF said `slab_alloc_node(s, lru, gfpflags, node, addr, orig_size)` for a
//! function that takes `(s, gfpflags, node, orig_size)`, and `args` showed every argument
//! after the first one shifted. pahole 1.25 and later leave such functions out of BTF
//! (the kernel's Makefile.btf asks for `consistent_func`), so fctrace shows `(?)` for
//! them instead of wrong values.
//!
//! Debian 13's pahole needs a newer C library than Debian 12's: its package and the
//! libraries it needs are unpacked, with Debian 13's own dynamic loader, into
//! `~/.cache/fctrace/pahole-1.30/root`, and `~/.cache/fctrace/pahole-1.30/pahole` runs
//! it with them (nothing is installed into the system). The packages are the ones
//! Debian's signed release file names: `InRelease` is checked with `gpgv` and the
//! Debian archive keyring, the package index against its SHA256 there, each package
//! against its SHA256 in the index.

use std::fs;
use std::path::{Path, PathBuf};

use crate::util::{bail, echo, note, Result};

/// The pahole version the kernels are built with (also part of their cache key).
pub const VERSION: &str = "1.30";
const MIRROR: &str = "http://deb.debian.org/debian";
const SUITE: &str = "trixie";
const KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";
const INDEX: &str = "main/binary-amd64/Packages.xz";
/// pahole and what it loads (the closure of its Depends in Debian 13).
const PACKAGES: &[&str] = &[
    "pahole",
    "libbpf1",
    "libdw1t64",
    "libelf1t64",
    "libc6",
    "libgcc-s1",
    "zlib1g",
    "libzstd1",
    "liblzma5",
    "libbz2-1.0",
];

fn dir() -> PathBuf {
    crate::util::cache_root().join(format!("pahole-{VERSION}"))
}

/// The program to give the kernel's build as `PAHOLE`.
pub fn path() -> PathBuf {
    dir().join("pahole")
}

/// Sets pahole up unless it runs already; says whether it did.
pub fn ensure() -> Result<bool> {
    if works(&path()) {
        return Ok(false);
    }
    note(format!(
        "setting up pahole {VERSION} (Debian {SUITE}'s) in {}",
        dir().display()
    ));
    install()?;
    if !works(&path()) {
        bail!("{} does not run after its setup", path().display());
    }
    Ok(true)
}

fn works(p: &Path) -> bool {
    duct::cmd!(p, "--version")
        .stderr_null()
        .read()
        .is_ok_and(|v| v.trim() == format!("v{VERSION}"))
}

fn install() -> Result<()> {
    let tmp = crate::util::cache_root().join(format!("pahole-{VERSION}.tmp"));
    let _ = fs::remove_dir_all(&tmp);
    fs::create_dir_all(&tmp)?;
    let base = format!("{MIRROR}/dists/{SUITE}");
    let inrelease = tmp.join("InRelease");
    fetch(&format!("{base}/InRelease"), &inrelease)?;
    let release = tmp.join("Release");
    duct::cmd!(
        "gpgv",
        "--keyring",
        KEYRING,
        "--output",
        &release,
        &inrelease
    )
    .before_spawn(echo)
    .stderr_capture()
    .run()
    .map_err(|e| format!("gpgv: {SUITE}'s InRelease does not verify: {e}"))?;
    let release = fs::read_to_string(&release)?;
    let want = release_sha256(&release, INDEX)
        .ok_or_else(|| format!("{SUITE}'s Release names no SHA256 for {INDEX}"))?;
    let index_xz = tmp.join("Packages.xz");
    fetch(&format!("{base}/{INDEX}"), &index_xz)?;
    check_sha256(&index_xz, &want)?;
    let index = duct::cmd!("xz", "-dc", &index_xz).read()?;
    let root = tmp.join("root");
    for name in PACKAGES {
        let p =
            find_package(&index, name).ok_or_else(|| format!("{SUITE} has no package {name}"))?;
        if *name == "pahole" && !p.version.starts_with(&format!("{VERSION}-")) {
            bail!(
                "{SUITE}'s pahole is {}, not {VERSION}: update xtask/src/pahole.rs",
                p.version
            );
        }
        let deb = tmp.join(format!("{name}.deb"));
        fetch(&format!("{MIRROR}/{}", p.filename), &deb)?;
        check_sha256(&deb, &p.sha256)?;
        duct::cmd!("dpkg-deb", "-x", &deb, &root)
            .before_spawn(echo)
            .run()?;
        fs::remove_file(&deb)?;
    }
    let ld = root.join("usr/lib64/ld-linux-x86-64.so.2");
    let libs = root.join("usr/lib/x86_64-linux-gnu");
    let bin = root.join("usr/bin/pahole");
    for p in [&ld, &libs, &bin] {
        if !p.exists() {
            bail!("{} is missing after unpacking", p.display());
        }
    }
    let final_root = dir().join("root");
    let wrapper = format!(
        "#!/bin/sh\n\
         # pahole {VERSION} of Debian {SUITE} with its own libraries and loader (cargo xtask setup)\n\
         exec '{}' --library-path '{}' '{}' \"$@\"\n",
        final_root.join("usr/lib64/ld-linux-x86-64.so.2").display(),
        final_root.join("usr/lib/x86_64-linux-gnu").display(),
        final_root.join("usr/bin/pahole").display(),
    );
    let w = tmp.join("pahole");
    fs::write(&w, wrapper)?;
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(&w, fs::Permissions::from_mode(0o755))?;
    for f in ["InRelease", "Release", "Packages.xz"] {
        fs::remove_file(tmp.join(f))?;
    }
    let _ = fs::remove_dir_all(dir());
    fs::rename(&tmp, dir())?;
    Ok(())
}

fn fetch(url: &str, to: &Path) -> Result<()> {
    duct::cmd!("curl", "-fsSL", "--retry", "3", "-o", to, url)
        .before_spawn(echo)
        .run()
        .map_err(|e| format!("downloading {url}: {e}"))?;
    Ok(())
}

fn check_sha256(file: &Path, want: &str) -> Result<()> {
    let out = duct::cmd!("sha256sum", file).read()?;
    let got = out.split_whitespace().next().unwrap_or("");
    if got != want {
        bail!("{}: sha256 {got}, expected {want}", file.display());
    }
    Ok(())
}

/// The SHA256 the release file gives for `path` (its `SHA256:` section).
fn release_sha256(release: &str, path: &str) -> Option<String> {
    let mut in_sha = false;
    for line in release.lines() {
        if !line.starts_with(' ') {
            in_sha = line.trim_end() == "SHA256:";
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        if in_sha && f.len() == 3 && f[2] == path {
            return Some(f[0].to_string());
        }
    }
    None
}

struct Package {
    version: String,
    filename: String,
    sha256: String,
}

/// Package `name`'s stanza in a Packages index.
fn find_package(index: &str, name: &str) -> Option<Package> {
    index.split("\n\n").find_map(|stanza| {
        let field = |k: &str| {
            stanza
                .lines()
                .find_map(|l| l.strip_prefix(k)?.strip_prefix(": "))
                .map(str::to_string)
        };
        (field("Package")?.as_str() == name).then_some(())?;
        Some(Package {
            version: field("Version")?,
            filename: field("Filename")?,
            sha256: field("SHA256")?,
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_and_index_fields() {
        let release = "Origin: Debian\nMD5Sum:\n 0123 10 main/binary-amd64/Packages.xz\nSHA256:\n aaaa 5 main/binary-all/Packages.xz\n bbbb 9 main/binary-amd64/Packages.xz\n";
        assert_eq!(release_sha256(release, INDEX).as_deref(), Some("bbbb"));
        assert_eq!(release_sha256(release, "main/x"), None);
        let index = "Package: pahole-dbg\nVersion: 1\nFilename: a\nSHA256: 1\n\nPackage: pahole\nVersion: 1.30-1\nFilename: pool/main/d/dwarves/pahole_1.30-1_amd64.deb\nSHA256: cc\n";
        let p = find_package(index, "pahole").unwrap();
        assert_eq!(p.version, "1.30-1");
        assert_eq!(p.filename, "pool/main/d/dwarves/pahole_1.30-1_amd64.deb");
        assert_eq!(p.sha256, "cc");
        assert!(find_package(index, "libc6").is_none());
    }
}
