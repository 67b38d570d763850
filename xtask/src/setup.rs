//! `cargo xtask setup`: install whatever build dependency is missing.
//! Cheap when everything is present (one dpkg-query, one rustc, one bindgen
//! call), so every other command runs it first.

use std::path::Path;
use std::process::Command;

use xshell::cmd;

use crate::util::{bail, note, shell, Args, Result};

/// Debian packages needed to build the kernel/module and run the guest.
pub const APT_PACKAGES: &[&str] = &[
    "linux-source-6.12",
    "clang",
    "lld",
    "llvm",
    "libclang-dev",
    "qemu-system-x86",
    "busybox-static",
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
    // static test workloads (selftests/workloads/*.c)
    "gcc",
    "libc6-dev",
];

pub const BINDGEN_VERSION: &str = "0.73.0";

pub fn cmd(args: Args) -> Result<i32> {
    args.finish()?;
    ensure()?;
    Ok(0)
}

/// Install what is missing; quiet (one line) when nothing is.
pub fn ensure() -> Result<()> {
    let sh = shell()?;
    let mut did = false;

    let missing = missing_apt_packages()?;
    if !missing.is_empty() {
        did = true;
        note(format!("missing Debian packages: {}", missing.join(" ")));
        let root = is_root();
        // `env VAR=...` so the variable survives sudo.
        let (prog, pre): (&str, &[&str]) = if root {
            ("env", &[])
        } else {
            ("sudo", &["env"])
        };
        cmd!(sh, "{prog} {pre...} apt-get update").run()?;
        cmd!(sh, "{prog} {pre...} DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends {missing...}")
            .run()?;
        let still = missing_apt_packages()?;
        if !still.is_empty() {
            bail!(
                "packages still missing after apt-get install: {}",
                still.join(" ")
            );
        }
    }

    // rust-src: the kernel builds `core`/`alloc` from source.
    let sysroot = cmd!(sh, "rustc --print sysroot").quiet().read()?;
    if !Path::new(sysroot.trim())
        .join("lib/rustlib/src/rust/library")
        .is_dir()
    {
        did = true;
        cmd!(sh, "rustup component add rust-src").run()?;
    }

    // bindgen (found through $CARGO_HOME/bin, which main() puts on PATH).
    let bindgen_ok = Command::new("bindgen")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !bindgen_ok {
        did = true;
        let v = BINDGEN_VERSION;
        cmd!(sh, "cargo install bindgen-cli --version {v} --locked").run()?;
    }

    if did {
        note("setup: done");
    } else {
        note("setup: all dependencies present");
    }
    Ok(())
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

fn missing_apt_packages() -> Result<Vec<String>> {
    let out = Command::new("dpkg-query")
        .arg("-W")
        .arg("-f=${Package} ${Status}\\n")
        .args(APT_PACKAGES)
        .output()
        .map_err(|e| format!("dpkg-query: {e} (this tooling expects Debian/Ubuntu)"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let installed: Vec<&str> = stdout
        .lines()
        .filter(|l| l.ends_with(" install ok installed"))
        .filter_map(|l| l.split_whitespace().next())
        .map(|p| p.split(':').next().unwrap_or(p)) // strip :amd64
        .collect();
    Ok(APT_PACKAGES
        .iter()
        .filter(|p| !installed.contains(p))
        .map(|p| p.to_string())
        .collect())
}
