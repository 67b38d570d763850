// SPDX-License-Identifier: GPL-2.0

//! `cargo xtask setup`: install whatever build dependency is missing.
//! Cheap when everything is present (one dpkg-query, one rustc, one bindgen
//! call), so every other command runs it first.

use std::path::Path;

use crate::util::{bail, echo, note, Result};

/// Debian packages needed to build the kernel/module and run the guest.
pub const APT_PACKAGES: &[&str] = &[
    "linux-source-6.12",
    "clang",
    "lld",
    "llvm",
    "libclang-dev",
    "qemu-system-x86",
    "busybox-static",
    // the debian profile's build root
    "debootstrap",
    "flex",
    "bison",
    "bc",
    "libelf-dev",
    "libssl-dev",
    "cpio",
    "make",
    "xz-utils",
    "gzip",
    "binutils",
    // pahole 1.30 for the kernels' BTF (CONFIG_DEBUG_INFO_BTF) comes from Debian 13
    // (xtask/src/pahole.rs): fetched with curl, checked with gpgv and Debian's keyring
    "curl",
    "gpgv",
    "debian-archive-keyring",
    // mkfs.ext4, for the guests' scratch disk (an ext4 file system on virtio-blk)
    "e2fsprogs",
    // static test workloads (selftests/workloads/*.c)
    "gcc",
    "libc6-dev",
];

pub const BINDGEN_VERSION: &str = "0.73.0";

pub fn cmd() -> Result<i32> {
    ensure()?;
    Ok(0)
}

/// Install what is missing; quiet (one line) when nothing is.
pub fn ensure() -> Result<()> {
    let mut did = false;

    let missing = missing_apt_packages()?;
    if !missing.is_empty() {
        did = true;
        note(format!("missing Debian packages: {}", missing.join(" ")));
        // `env VAR=...` so the variable survives sudo.
        let sudo: &[&str] = if is_root() {
            &["env"]
        } else {
            &["sudo", "env"]
        };
        let apt = |args: &[&str]| {
            let argv = [sudo, args].concat();
            duct::cmd(argv[0], &argv[1..]).before_spawn(echo)
        };
        apt(&["apt-get", "update"]).run()?;
        let install = [
            "DEBIAN_FRONTEND=noninteractive",
            "apt-get",
            "install",
            "-y",
            "--no-install-recommends",
        ];
        apt(&[&install[..], &missing].concat()).run()?;
        let still = missing_apt_packages()?;
        if !still.is_empty() {
            bail!(
                "packages still missing after apt-get install: {}",
                still.join(" ")
            );
        }
    }

    // rust-src: the kernel builds `core`/`alloc` from source.
    let sysroot = duct::cmd!("rustc", "--print", "sysroot").read()?;
    if !Path::new(sysroot.trim())
        .join("lib/rustlib/src/rust/library")
        .is_dir()
    {
        did = true;
        duct::cmd!("rustup", "component", "add", "rust-src")
            .before_spawn(echo)
            .run()?;
    }

    // bindgen (found through $CARGO_HOME/bin, which main() puts on PATH).
    let bindgen_ok = duct::cmd!("bindgen", "--version")
        .stdout_null()
        .stderr_null()
        .run()
        .is_ok();
    if !bindgen_ok {
        did = true;
        duct::cmd!(
            "cargo",
            "install",
            "bindgen-cli",
            "--version",
            BINDGEN_VERSION,
            "--locked"
        )
        .before_spawn(echo)
        .run()?;
    }

    did |= crate::pahole::ensure()?;

    if did {
        note("setup: done");
    } else {
        note("setup: all dependencies present");
    }
    Ok(())
}

pub fn is_root() -> bool {
    duct::cmd!("id", "-u")
        .read()
        .is_ok_and(|uid| uid.trim() == "0")
}

fn missing_apt_packages() -> Result<Vec<&'static str>> {
    let out = duct::cmd(
        "dpkg-query",
        ["-W", "-f=${Package} ${Status}\\n"]
            .iter()
            .chain(APT_PACKAGES),
    )
    .stderr_null()
    .unchecked()
    .read()
    .map_err(|e| format!("dpkg-query: {e} (this tooling expects Debian/Ubuntu)"))?;
    let installed: Vec<&str> = out
        .lines()
        .filter(|l| l.ends_with(" install ok installed"))
        .filter_map(|l| l.split_whitespace().next())
        .map(|p| p.split(':').next().unwrap_or(p)) // strip :amd64
        .collect();
    Ok(APT_PACKAGES
        .iter()
        .copied()
        .filter(|p| !installed.contains(p))
        .collect())
}
