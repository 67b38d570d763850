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

use crate::archive;
use crate::util::{bail, echo, note, Result};

/// The pahole version the kernels are built with (also part of their cache key).
pub const VERSION: &str = "1.30";
const SUITE: &str = "trixie";
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
    let index = archive::signed_index(SUITE, INDEX, &tmp)?;
    let root = tmp.join("root");
    for name in PACKAGES {
        let p = archive::find_package(&index, name)
            .ok_or_else(|| format!("{SUITE} has no package {name}"))?;
        if *name == "pahole" && !p.version.starts_with(&format!("{VERSION}-")) {
            bail!(
                "{SUITE}'s pahole is {}, not {VERSION}: update xtask/src/pahole.rs",
                p.version
            );
        }
        let deb = archive::fetch_package(&p, &tmp.join(format!("{name}.deb")))?;
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
    let _ = fs::remove_dir_all(dir());
    fs::rename(&tmp, dir())?;
    Ok(())
}
