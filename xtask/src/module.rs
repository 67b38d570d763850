// SPDX-License-Identifier: GPL-2.0

//! `cargo xtask module`: build `rust-kmod/fctrace.ko` against the test kernel
//! by invoking Kbuild directly (`make -C <KDIR> LLVM=1 M=<repo>/rust-kmod`), and the
//! selftests' module `selftests/modules/fct_testmod.ko` the same way.

use std::path::{Path, PathBuf};

use crate::util::{bail, echo, note, repo_root, Result};

pub fn cmd() -> Result<i32> {
    crate::setup::ensure()?;
    let kdir = crate::kernel::kdir()?;
    let ko = build(&kdir)?;
    println!("{}", ko.display());
    Ok(0)
}

pub fn module_dir() -> PathBuf {
    repo_root().join("rust-kmod")
}

/// Where the built module appears.
pub fn ko_path() -> PathBuf {
    module_dir().join("fctrace.ko")
}

/// The selftests' module (traced into by the selftests), built next to its source; the
/// initramfs carries `selftests/` whole, so the guest has it at
/// `/selftests/modules/fct_testmod.ko`.
pub fn testmod_path() -> PathBuf {
    repo_root().join("selftests/modules/fct_testmod.ko")
}

/// A `fctrace.ko` built elsewhere that the guest takes instead of the one built here
/// (the one DKMS built from the package, for `cargo xtask deb --check`).
static PREBUILT: std::sync::Mutex<Option<PathBuf>> = std::sync::Mutex::new(None);

pub fn set_prebuilt(ko: &Path) {
    *PREBUILT.lock().unwrap_or_else(|e| e.into_inner()) = Some(ko.to_path_buf());
}

/// Build the module and the selftests' module; returns the path of `fctrace.ko` (or of
/// the prebuilt one, see [`set_prebuilt`]).
pub fn build(kdir: &Path) -> Result<PathBuf> {
    let prebuilt = PREBUILT.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if crate::kernel::is_debian() {
        let built = crate::debian::build_modules()?.0;
        return Ok(prebuilt.unwrap_or(built));
    }
    if let Some(ko) = prebuilt {
        kbuild(kdir, &testmod_path())?;
        return Ok(ko);
    }
    let ko = kbuild(kdir, &ko_path())?;
    kbuild(kdir, &testmod_path())?;
    Ok(ko)
}

/// A module directory's record of the kernel tree it was last built against.
const BUILT_FOR: &str = ".fctrace-built-for";

/// Removes what Kbuild built in `dir` for another kernel tree than `kdir`. Kbuild names
/// the kernel's headers by paths relative to its tree, so two kernels built by one
/// toolchain (the default and debug kernels, both clang) give the same command lines: it
/// would keep the objects and the bindings made for the other kernel, whose structures
/// differ (lockdep's, KASAN's), and load them into this one.
fn clean_if_other_kernel(kdir: &Path, dir: &Path) -> Result<()> {
    let want = kdir.to_string_lossy();
    let stamp = dir.join(BUILT_FOR);
    let built_for = std::fs::read_to_string(&stamp).ok();
    if built_for.as_deref() == Some(&*want) {
        return Ok(());
    }
    note(format!(
        "{}: last built for {}, now for {want}: cleaning first",
        dir.display(),
        built_for.as_deref().unwrap_or("an unknown kernel")
    ));
    let mut args: Vec<std::ffi::OsString> = vec!["-C".into(), kdir.into()];
    args.extend(crate::kernel::toolchain_args().into_iter().map(Into::into));
    args.extend([
        "ARCH=x86_64".into(),
        format!("M={}", dir.display()).into(),
        "clean".into(),
    ]);
    duct::cmd("make", args)
        .stdout_null()
        .before_spawn(echo)
        .run()
        .map_err(|e| format!("make clean in {}: {e}", dir.display()))?;
    // Not among what Kbuild's clean removes.
    for f in ["bindings_generated.rs", BUILT_FOR] {
        let _ = std::fs::remove_file(dir.join(f));
    }
    Ok(())
}

/// Build the module `ko` with Kbuild from the sources in its directory.
fn kbuild(kdir: &Path, ko: &Path) -> Result<PathBuf> {
    let dir = ko.parent().ok_or("no module directory")?;
    if !dir.join("Kbuild").exists() && !dir.join("Makefile").exists() {
        bail!(
            "{} has neither Kbuild nor Makefile: module source not present yet",
            dir.display()
        );
    }
    clean_if_other_kernel(kdir, dir)?;
    let m = format!("M={}", dir.display());
    let ko = ko.to_path_buf();
    let before = std::fs::metadata(&ko).and_then(|m| m.modified()).ok();
    // CLIPPY=1: Kbuild compiles the Rust code with clippy-driver and the kernel's lint
    // set (SAFETY comments on every unsafe block, ...); any Rust warning fails the build.
    let mut args: Vec<std::ffi::OsString> = vec!["-C".into(), kdir.into()];
    args.extend(crate::kernel::toolchain_args().into_iter().map(Into::into));
    // No "distilled base" for the modules' BTF (see rust-kmod/Makefile): split on the
    // test kernel's own BTF.
    args.extend([
        "ARCH=x86_64".into(),
        "CLIPPY=1".into(),
        "MODULE_PAHOLE_FLAGS=".into(),
        m.into(),
    ]);
    let out = duct::cmd("make", args)
        .stdout_capture()
        .stderr_capture()
        .unchecked()
        .before_spawn(echo)
        .run()
        .map_err(|e| format!("module build failed to start: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    print!("{stdout}");
    eprint!("{stderr}");
    if !out.status.success() {
        bail!("module build failed ({})", out.status);
    }
    let warnings = stderr
        .lines()
        .chain(stdout.lines())
        .filter(|l| l.starts_with("warning:"))
        .count();
    if warnings > 0 {
        bail!("module build produced {warnings} Rust warning(s) (see above); fix them");
    }
    if !ko.exists() {
        bail!("make succeeded but {} was not produced", ko.display());
    }
    std::fs::write(dir.join(BUILT_FOR), kdir.to_string_lossy().as_bytes())?;
    let after = std::fs::metadata(&ko).and_then(|m| m.modified()).ok();
    note(format!(
        "module {}: {}",
        if before == after {
            "up to date"
        } else {
            "built"
        },
        ko.display()
    ));
    Ok(ko)
}
