// SPDX-License-Identifier: GPL-2.0

//! `cargo xtask setup`: install whatever build dependency is missing.
//! Cheap when everything is present (one dpkg-query, one rustc, one bindgen
//! call), so every other command runs it first.

use std::path::Path;

use crate::util::{bail, echo, note, Result};

/// Debian packages every profile needs: the guest and what goes into it, and the debian
/// profile's build root.
const GUEST_PACKAGES: &[&str] = &[
    "qemu-system-x86",
    "busybox-static",
    "cpio",
    "gzip",
    // the debian profile's build root, and its modules (`.ko.xz`)
    "debootstrap",
    "xz-utils",
    // mkfs.ext4, for the guests' scratch disk (an ext4 file system on virtio-blk)
    "e2fsprogs",
    // static test workloads (selftests/workloads/*.c)
    "gcc",
    "libc6-dev",
    // the debian-arm64 profile's guest, and its workloads built for it
    "qemu-system-arm",
    "gcc-aarch64-linux-gnu",
    "libc6-dev-arm64-cross",
];

/// What building the default and distro profiles' own 6.12 kernels adds.
const KERNEL_PACKAGES: &[&str] = &[
    "linux-source-6.12",
    "clang",
    "lld",
    "llvm",
    "libclang-dev",
    "flex",
    "bison",
    "bc",
    "libelf-dev",
    "libssl-dev",
    "make",
    "binutils",
    // pahole 1.30 for the kernels' BTF (CONFIG_DEBUG_INFO_BTF) comes from Debian 13
    // (xtask/src/pahole.rs): fetched with curl, checked with gpgv and Debian's keyring
    "curl",
    "gpgv",
    "debian-archive-keyring",
];

pub const BINDGEN_VERSION: &str = "0.73.0";

pub fn cmd() -> Result<i32> {
    ensure()?;
    Ok(0)
}

/// Install what is missing; quiet (one line) when nothing is. The debian profile builds
/// its module in its own root with the kernel's toolchain (xtask/src/debian.rs), so it
/// needs only [`GUEST_PACKAGES`] of the host; the others need a kernel build's tools too.
pub fn ensure() -> Result<()> {
    let mut did = false;
    let own_kernel = !crate::kernel::is_debian();
    let packages: Vec<&str> = if own_kernel {
        [GUEST_PACKAGES, KERNEL_PACKAGES].concat()
    } else {
        GUEST_PACKAGES.to_vec()
    };

    let missing = missing_apt_packages(&packages)?;
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
        let still = missing_apt_packages(&packages)?;
        if !still.is_empty() {
            bail!(
                "packages still missing after apt-get install: {}",
                still.join(" ")
            );
        }
    }

    if own_kernel {
        did |= ensure_kernel_toolchain()?;
    }
    if did {
        note("setup: done");
    } else {
        note("setup: all dependencies present");
    }
    Ok(())
}

/// rust-src, bindgen and pahole for building the kernel and the module on the host;
/// whether anything was installed.
fn ensure_kernel_toolchain() -> Result<bool> {
    let mut did = false;
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
    Ok(did)
}

pub fn is_root() -> bool {
    duct::cmd!("id", "-u")
        .read()
        .is_ok_and(|uid| uid.trim() == "0")
}

fn missing_apt_packages<'a>(packages: &[&'a str]) -> Result<Vec<&'a str>> {
    let out = duct::cmd(
        "dpkg-query",
        ["-W", "-f=${Package} ${Status}\\n"].iter().chain(packages),
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
    Ok(packages
        .iter()
        .copied()
        .filter(|p| !installed.contains(p))
        .collect())
}
