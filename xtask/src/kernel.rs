// SPDX-License-Identifier: GPL-2.0

//! `cargo xtask kernel [--force] [--debug]`: configure and build the test kernel.
//!
//! Layout (R = `${XDG_CACHE_HOME:-$HOME/.cache}/fctrace`):
//! - `R/src/linux-source-6.12`: unpacked `/usr/src/linux-source-6.12.tar.xz`
//! - `R/build-<version>-<key>`: out-of-tree build (`O=`), where key is the first
//!   12 hex digits of the sha256 of the config fragment(s) (concatenated) and the
//!   pahole version (`xtask/src/pahole.rs`, which makes the kernels' BTF)
//! - `R/build-…/.fctrace-built`: stamp written after a successful build.
//!
//! A flavour is a list of fragments applied on top of `tinyconfig`: the default
//! profile's is `scripts/kernel-fragment.config`, built with `LLVM=1`; the `distro`
//! profile adds `scripts/kernel-distro.config` and is built with GCC, like a
//! distribution's kernel; `--debug` adds `scripts/kernel-debug.config` to either. Each
//! flavour gets its own key.

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};

use crate::util::{bail, cache_root, echo, note, nproc, repo_root, Result};

const TARBALL: &str = "/usr/src/linux-source-6.12.tar.xz";
const SRC_NAME: &str = "linux-source-6.12";
const STAMP: &str = ".fctrace-built";
/// Fragment options the toolchain may legitimately be unable to enable.
const MAY_BE_MISSING: &[(&str, &str)] = &[(
    "CONFIG_MITIGATION_RETHUNK",
    "clang 14 lacks -mfunction-return=thunk-extern, so the kernel cannot enable it",
)];

/// `cargo xtask kernel`.
#[derive(clap::Args)]
pub struct KernelArgs {
    /// Re-run every step (configure and build from scratch)
    #[arg(long)]
    pub force: bool,
    /// Build the debug kernel (adds scripts/kernel-debug.config)
    #[arg(long)]
    pub debug: bool,
}

pub fn cmd(args: KernelArgs) -> Result<i32> {
    set_debug(args.debug);
    crate::setup::ensure()?;
    let kdir = if is_debian() {
        kdir()?
    } else {
        build(&default_fragments(), args.force)?
    };
    println!("{}", kdir.display());
    Ok(0)
}

/// Whether this run uses the debug flavour (`--debug`: lockdep, KASAN, ...).
static DEBUG: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// Whether this run uses the distro profile (`--profile distro`).
static DISTRO: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The kernel shapes the tests run on.
#[derive(clap::ValueEnum, Clone, Copy, Default, PartialEq, Eq, Debug)]
pub enum Profile {
    /// tinyconfig + scripts/kernel-fragment.config, built with LLVM=1 (clang, lld)
    #[default]
    Default,
    /// also scripts/kernel-distro.config (a distribution's code generation: return
    /// thunks, call-depth tracking, IBT, ...; networking, ext4, BTF), built with GCC
    Distro,
    /// Debian's own kernel (trixie-backports' 7.3), unmodified; the module is built in a
    /// trixie root with the kernel's own toolchain (xtask/src/debian.rs)
    Debian,
    /// Debian's own arm64 kernel of the same release, unmodified, under
    /// qemu-system-aarch64 (`-M virt -cpu max`); the module is cross-built in a trixie root
    #[value(name = "debian-arm64")]
    DebianArm64,
}

/// Whether this run's guest is arm64 (`--profile debian-arm64`).
static ARM64: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether this run's guest is arm64.
pub fn is_arm64() -> bool {
    ARM64.load(std::sync::atomic::Ordering::Relaxed)
}

/// Whether this run uses one of Debian's kernels (`--profile debian`, `debian-arm64`).
static DEBIAN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether this run uses the distro profile.
pub fn is_distro() -> bool {
    DISTRO.load(std::sync::atomic::Ordering::Relaxed)
}

/// Whether this run uses Debian's own kernel.
pub fn is_debian() -> bool {
    DEBIAN.load(std::sync::atomic::Ordering::Relaxed)
}

/// Selects the profile for the rest of this xtask run.
pub fn set_profile(p: Profile) {
    DISTRO.store(p == Profile::Distro, std::sync::atomic::Ordering::Relaxed);
    DEBIAN.store(
        matches!(p, Profile::Debian | Profile::DebianArm64),
        std::sync::atomic::Ordering::Relaxed,
    );
    ARM64.store(
        p == Profile::DebianArm64,
        std::sync::atomic::Ordering::Relaxed,
    );
}

/// The kernel image the guest boots.
pub fn image(kdir: &Path) -> PathBuf {
    if is_debian() {
        crate::debian::image()
    } else {
        kdir.join("arch/x86/boot/bzImage")
    }
}

/// The toolchain arguments of `make` for the selected profile: `LLVM=1` for the default
/// profile, none (GCC) for `distro`; the Rust code is built by rustc either way. Both
/// make their BTF with the pahole of `xtask/src/pahole.rs`.
pub fn toolchain_args() -> Vec<String> {
    let mut a = vec![format!("PAHOLE={}", crate::pahole::path().display())];
    if !DISTRO.load(std::sync::atomic::Ordering::Relaxed) {
        a.push("LLVM=1".into());
    }
    a
}

/// Selects the debug flavour for the rest of this xtask run.
pub fn set_debug(on: bool) {
    DEBUG.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// The fragments of the selected flavour: the base fragment, plus the debug one.
pub fn default_fragments() -> Vec<PathBuf> {
    let mut f = vec![repo_root().join("scripts/kernel-fragment.config")];
    if DISTRO.load(std::sync::atomic::Ordering::Relaxed) {
        f.push(repo_root().join("scripts/kernel-distro.config"));
    }
    if DEBUG.load(std::sync::atomic::Ordering::Relaxed) {
        f.push(repo_root().join("scripts/kernel-debug.config"));
    }
    f
}

/// Build (if needed) and return the kernel build directory (KDIR); for Debian's kernel,
/// its configured tree in the Debian root.
pub fn kdir() -> Result<PathBuf> {
    if is_debian() {
        if DEBUG.load(std::sync::atomic::Ordering::Relaxed) {
            bail!("--debug: Debian's kernel has no debug flavour (use the default profile)");
        }
        return crate::debian::kdir();
    }
    build(&default_fragments(), false)
}

/// Ensure the kernel for `fragments` is built; return its build directory.
pub fn build(fragments: &[PathBuf], force: bool) -> Result<PathBuf> {
    let src = ensure_source()?;
    let version = source_version(&src)?;
    let key = build_key(fragments)?;
    let out = cache_root().join(format!("build-{version}-{key}"));
    let stamp = out.join(STAMP);
    let bzimage = out.join("arch/x86/boot/bzImage");
    if !force && stamp.exists() && bzimage.exists() {
        note(format!("kernel {version} up to date: {}", out.display()));
        return Ok(out);
    }
    fs::create_dir_all(&out)?;

    // Serialize concurrent builds of the same directory (two cargo xtask runs).
    let lock = fs::File::create(cache_root().join(format!("build-{version}-{key}.lock")))?;
    if lock.try_lock().is_err() {
        note(format!(
            "another xtask is building {}; waiting for it",
            out.display()
        ));
        lock.lock()?;
    }
    if !force && stamp.exists() && bzimage.exists() {
        note(format!("kernel {version} up to date: {}", out.display()));
        return Ok(out);
    }
    let _ = fs::remove_file(&stamp);

    let o = format!("O={}", out.display());
    let tools = toolchain_args();
    let make_args: Vec<&str> = [o.as_str(), "ARCH=x86_64"]
        .into_iter()
        .chain(tools.iter().map(String::as_str))
        .collect();
    let make = |targets: &[&str]| {
        duct::cmd("make", make_args.iter().chain(targets))
            .dir(&src)
            .before_spawn(echo)
    };
    let config = out.join(".config");
    // An existing .config that already satisfies the fragments is reused
    // (resuming an interrupted build); otherwise (re)configure from scratch.
    if force || !config.exists() || !check_config(&config, fragments, false)? {
        make(&["tinyconfig"]).run()?;
        let mut merge: Vec<OsString> = vec![
            "-m".into(),
            "-O".into(),
            out.clone().into(),
            config.clone().into(),
        ];
        merge.extend(fragments.iter().map(Into::into));
        duct::cmd(src.join("scripts/kconfig/merge_config.sh"), merge)
            .dir(&src)
            .before_spawn(echo)
            .run()?;
        make(&["olddefconfig"]).run()?;
        if !check_config(&config, fragments, true)? {
            if !config_has(&config, "CONFIG_RUST", "y")? {
                note("CONFIG_RUST is not enabled; `make rustavailable` says:");
                let _ = make(&["rustavailable"]).run();
            }
            bail!(
                "kernel configuration {} lacks options requested by the fragment(s) (see above)",
                config.display()
            );
        }
    } else {
        note(format!("reusing configuration {}", config.display()));
    }

    let jobs = format!("-j{}", nproc() + 1);
    note(format!(
        "building kernel {version} in {} (several minutes)",
        out.display()
    ));
    make(&[&jobs, "bzImage", "modules"]).run()?;
    if !bzimage.exists() {
        bail!("make succeeded but {} is missing", bzimage.display());
    }
    fs::write(&stamp, format!("{version} {key}\n"))?;
    note(format!("kernel built: {}", out.display()));
    Ok(out)
}

/// Unpack the Debian kernel source into the cache if it is not there yet.
/// Unpacking goes to a temporary directory first, so a present directory is
/// always complete.
fn ensure_source() -> Result<PathBuf> {
    let src_root = cache_root().join("src");
    let src = src_root.join(SRC_NAME);
    if src.join("Makefile").exists() {
        return Ok(src);
    }
    if !Path::new(TARBALL).exists() {
        bail!(
            "{TARBALL} is missing (apt-get install linux-source-6.12; `cargo xtask setup` does it)"
        );
    }
    fs::create_dir_all(&src_root)?;
    let tmp = tempfile::Builder::new()
        .prefix(".unpack-")
        .tempdir_in(&src_root)?;
    let tmp_path = tmp.path().to_path_buf();
    note(format!("unpacking {TARBALL} into {}", src_root.display()));
    duct::cmd!("tar", "-C", &tmp_path, "-xf", TARBALL)
        .before_spawn(echo)
        .run()?;
    let unpacked = tmp_path.join(SRC_NAME);
    if !unpacked.join("Makefile").exists() {
        bail!("{TARBALL} did not contain {SRC_NAME}/Makefile");
    }
    if src.exists() {
        fs::remove_dir_all(&src)?; // incomplete leftover
    }
    fs::rename(&unpacked, &src)?;
    Ok(src)
}

/// VERSION.PATCHLEVEL.SUBLEVEL from the top-level Makefile.
pub fn source_version(src: &Path) -> Result<String> {
    let mk = fs::read_to_string(src.join("Makefile"))?;
    let get = |name: &str| -> Result<String> {
        for line in mk.lines().take(20) {
            if let Some((k, v)) = line.split_once('=') {
                if k.trim() == name {
                    return Ok(v.trim().to_string());
                }
            }
        }
        bail!("{name} not found in {}/Makefile", src.display())
    };
    Ok(format!(
        "{}.{}.{}",
        get("VERSION")?,
        get("PATCHLEVEL")?,
        get("SUBLEVEL")?
    ))
}

/// The build directory's key: [`key_of`] the fragments and the pahole version (the
/// kernels' BTF depends on it).
pub fn build_key(fragments: &[PathBuf]) -> Result<String> {
    key_of(
        fragments,
        format!("# pahole {}\n", crate::pahole::VERSION).as_bytes(),
    )
}

/// First 12 hex digits of sha256 over the fragments' concatenated contents and `extra`.
fn key_of(fragments: &[PathBuf], extra: &[u8]) -> Result<String> {
    let mut data = Vec::new();
    for f in fragments {
        data.extend(fs::read(f).map_err(|e| format!("{}: {e}", f.display()))?);
    }
    data.extend_from_slice(extra);
    let hex = duct::cmd!("sha256sum")
        .stdin_bytes(data)
        .read()
        .map_err(|e| format!("sha256sum: {e}"))?;
    let hex = hex.split_whitespace().next().unwrap_or("");
    if hex.len() < 12 {
        bail!("sha256sum failed");
    }
    Ok(hex[..12].to_string())
}

/// The options the fragments set to `y`: the last setting of each counts, as
/// `merge_config.sh` lets a later fragment override an earlier one (`CONFIG_X=n` or
/// `# CONFIG_X is not set`).
fn wanted_y(fragments: &[PathBuf]) -> Result<Vec<String>> {
    let mut last: Vec<(String, bool)> = Vec::new();
    for f in fragments {
        for line in fs::read_to_string(f)?.lines() {
            let line = line.trim();
            let setting = match line.strip_prefix("# ") {
                Some(rest) => rest.strip_suffix(" is not set").map(|n| (n, false)),
                None => line.split_once('=').map(|(n, v)| (n, v == "y")),
            };
            let Some((name, y)) = setting.filter(|(n, _)| n.starts_with("CONFIG_")) else {
                continue;
            };
            last.retain(|(n, _)| n != name);
            last.push((name.to_string(), y));
        }
    }
    Ok(last
        .into_iter()
        .filter(|(_, y)| *y)
        .map(|(n, _)| n)
        .collect())
}

fn config_has(config: &Path, name: &str, value: &str) -> Result<bool> {
    let want = format!("{name}={value}");
    Ok(fs::read_to_string(config)?.lines().any(|l| l == want))
}

/// Is every `=y` option of the fragments `=y` in `config`? With `report`,
/// print each missing one (and notes for tolerated ones).
fn check_config(config: &Path, fragments: &[PathBuf], report: bool) -> Result<bool> {
    let text = fs::read_to_string(config)?;
    let have: std::collections::HashSet<&str> = text.lines().collect();
    let mut ok = true;
    for name in wanted_y(fragments)? {
        if have.contains(format!("{name}=y").as_str()) {
            continue;
        }
        if let Some((_, why)) = MAY_BE_MISSING.iter().find(|(n, _)| *n == name) {
            if report {
                note(format!("note: {name} is not set: {why}"));
            }
            continue;
        }
        if report {
            note(format!(
                "error: fragment wants {name}=y, but .config does not have it"
            ));
        }
        ok = false;
    }
    Ok(ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_later_fragment_overrides_an_earlier_one() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        std::fs::write(&a, "CONFIG_A=y\nCONFIG_B=y\nCONFIG_C=y\n").unwrap();
        std::fs::write(&b, "# CONFIG_A is not set\nCONFIG_B=n\nCONFIG_D=y\n").unwrap();
        assert_eq!(wanted_y(&[a, b]).unwrap(), ["CONFIG_C", "CONFIG_D"]);
    }

    /// The module's Makefile refuses, in one line and before Kbuild runs, a kernel whose
    /// preempt_count() does not count spinlocks (the trampoline trusts it to decide whether
    /// a task may sleep).
    #[test]
    fn module_refuses_a_kernel_without_preempt_count() {
        let dir = tempfile::tempdir().unwrap();
        let make = |config: &str| {
            fs::write(dir.path().join(".config"), config).unwrap();
            std::process::Command::new("make")
                .arg("-s")
                .arg("-C")
                .arg(crate::util::repo_root().join("rust-kmod"))
                .arg(format!("KDIR={}", dir.path().display()))
                .output()
                .unwrap()
        };
        let out = make("CONFIG_RUST=y\nCONFIG_KPROBES=y\n");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success());
        assert!(
            err.contains("has no CONFIG_PREEMPT_COUNT=y"),
            "no reason given: {err}"
        );
        assert_eq!(err.lines().count(), 1, "not one line: {err}");
        // With it, the check passes (and Kbuild, missing here, is what fails).
        let out = make("CONFIG_RUST=y\nCONFIG_PREEMPT_COUNT=y\n");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!err.contains("PREEMPT_COUNT"), "{err}");
    }

    #[test]
    fn key_is_the_sha256_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        fs::write(&a, "ab").unwrap();
        fs::write(&b, "c").unwrap();
        // sha256("abc")
        assert_eq!(key_of(&[a, b], b"").unwrap(), "ba7816bf8f01");
    }
}
