// SPDX-License-Identifier: GPL-2.0

//! `cargo xtask initramfs`: build `target/fctrace/initramfs.cpio.gz`.
//!
//! Contents:
//! - `/bin/busybox` (host's busybox-static) plus a symlink per applet
//! - `/init` = `scripts/guest/init`, `/scripts/*` = `scripts/guest/*`
//! - `/usr/sbin/fctrace` = `scripts/fctrace` (the command)
//! - `/lib/modules/fctrace.ko` (when built)
//! - `/selftests` = `selftests/`
//! - `/bin/<name>` for every `selftests/workloads/<name>.c`, built static for the guest's
//!   target with the compiler the `cc` crate picks for it (`gcc -static -O2 -pthread`
//!   here) into `target/fctrace/workloads/<name>`
//! - `/kselftest`: kselftest's installation of the selftests, for `cargo xtask deb
//!   --check`
//! - `/run-script`: the script given to `vm --script` (if any); the kernel
//!   command line then names it with `fctrace.script=/run-script`.
//!
//! The cpio archive (newc format) is written by this file directly, so no
//! root privileges are needed for `/dev/console`.

use std::collections::BTreeMap;
use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::util::{bail, echo, note, out_dir, repo_root, Result};

pub const BUSYBOX: &str = "/bin/busybox";
/// Where `vm --script FILE` puts FILE inside the guest.
pub const GUEST_SCRIPT: &str = "/run-script";
/// The guest's target, for the programs built for it.
fn guest_target() -> &'static str {
    if crate::kernel::is_arm64() {
        "aarch64-unknown-linux-gnu"
    } else {
        "x86_64-unknown-linux-gnu"
    }
}

/// A directory the initramfs carries at `/kselftest` (kselftest's installation of the
/// selftests, for `cargo xtask deb --check`).
static KSELFTEST: std::sync::Mutex<Option<PathBuf>> = std::sync::Mutex::new(None);

pub fn set_kselftest(dir: &Path) {
    *KSELFTEST.lock().unwrap_or_else(|e| e.into_inner()) = Some(dir.to_path_buf());
}

pub fn cmd() -> Result<i32> {
    crate::setup::ensure()?;
    let ko = crate::module::ko_path();
    let ko = ko.exists().then_some(ko);
    let path = build(ko.as_deref(), None)?;
    println!("{}", path.display());
    Ok(0)
}

pub fn initramfs_path() -> PathBuf {
    out_dir().join("initramfs.cpio.gz")
}

/// Build the initramfs with the given module (if any) and guest script (if any).
pub fn build(ko: Option<&Path>, script: Option<&Path>) -> Result<PathBuf> {
    let root = repo_root();
    let out = out_dir();
    fs::create_dir_all(&out)?;
    let mut cpio = Cpio::default();

    for d in [
        "bin",
        "sbin",
        "usr/bin",
        "usr/sbin",
        "dev",
        "proc",
        "sys",
        "tmp",
        "run",
        "root",
        "etc",
        "mnt",
        "lib/modules",
    ] {
        cpio.dir(d);
    }
    cpio.add("dev/console", Entry::CharDev { major: 5, minor: 1 });
    cpio.add("dev/null", Entry::CharDev { major: 1, minor: 3 });
    cpio.add(
        "dev/ttyS0",
        Entry::CharDev {
            major: 4,
            minor: 64,
        },
    );
    // The arm64 machine's serial port (PL011).
    cpio.add(
        "dev/ttyAMA0",
        Entry::CharDev {
            major: 204,
            minor: 64,
        },
    );
    cpio.file(
        "etc/passwd",
        b"root:x:0:0:root:/root:/bin/sh\n".to_vec(),
        0o644,
    );
    cpio.file("etc/group", b"root:x:0:\n".to_vec(), 0o644);

    // busybox and its applets (the guest's own build of it for arm64: the host's list
    // of applets names the links, and the guest's busybox runs those it has)
    let busybox = if crate::kernel::is_arm64() {
        crate::debian::busybox()
    } else {
        PathBuf::from(BUSYBOX)
    };
    cpio.file(
        "bin/busybox",
        fs::read(&busybox).map_err(|e| format!("{}: {e}", busybox.display()))?,
        0o755,
    );
    let list = duct::cmd!(BUSYBOX, "--list-full")
        .read()
        .map_err(|e| format!("{BUSYBOX} --list-full failed: {e}"))?;
    for applet in list.lines() {
        let applet = applet.trim().trim_start_matches('/');
        if applet.is_empty() || applet == "bin/busybox" || !applet.contains('/') {
            continue; // e.g. "linuxrc"
        }
        cpio.add(applet, Entry::Symlink("/bin/busybox".into()));
    }

    // init and guest scripts
    let guest = root.join("scripts/guest");
    let init = guest.join("init");
    cpio.file(
        "init",
        fs::read(&init).map_err(|e| format!("{}: {e}", init.display()))?,
        0o755,
    );
    cpio.tree("scripts", &guest)?;
    // The fctrace command, where the package installs it.
    cpio.file(
        "usr/sbin/fctrace",
        fs::read(root.join("scripts/fctrace"))?,
        0o755,
    );

    match ko {
        Some(ko) => {
            cpio.file("lib/modules/fctrace.ko", fs::read(ko)?, 0o644);
            note(format!("initramfs: including {}", ko.display()));
        }
        None => note("initramfs: no fctrace.ko (module not built); insmod will fail in the guest"),
    }

    // selftests and static workloads
    let selftests = root.join("selftests");
    if selftests.is_dir() {
        cpio.tree("selftests", &selftests)?;
    }
    if crate::kernel::is_debian() {
        // The selftests' module built for Debian's kernel, and its drivers.
        for (path, data) in crate::debian::initramfs_files()? {
            cpio.file(&path, data, 0o644);
        }
    }
    for (name, bin) in build_workloads(&selftests.join("workloads"))? {
        cpio.file(&format!("bin/{name}"), fs::read(bin)?, 0o755);
    }

    if let Some(dir) = KSELFTEST
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_deref()
    {
        cpio.tree(crate::test::KSELFTEST_DIR.trim_start_matches('/'), dir)?;
    }

    if let Some(script) = script {
        let data = fs::read(script).map_err(|e| format!("{}: {e}", script.display()))?;
        cpio.file(GUEST_SCRIPT.trim_start_matches('/'), data, 0o755);
    }

    let path = initramfs_path();
    let raw = out.join("initramfs.cpio");
    fs::write(&raw, cpio.finish())?;
    duct::cmd!("gzip", "-n", "-f", "-6", &raw).run()?;
    note(format!(
        "initramfs: {} ({} entries)",
        path.display(),
        cpio.entries.len()
    ));
    Ok(path)
}

/// Build every `dir/*.c` with [`build_workload`]; returns (name, binary) pairs.
fn build_workloads(dir: &Path) -> Result<Vec<(String, PathBuf)>> {
    let Ok(rd) = fs::read_dir(dir) else {
        return Ok(Vec::new());
    };
    let mut sources: Vec<PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "c"))
        .collect();
    sources.sort();
    let bindir = out_dir().join(if crate::kernel::is_arm64() {
        "workloads-arm64"
    } else {
        "workloads"
    });
    if !sources.is_empty() {
        fs::create_dir_all(&bindir)?;
    }
    sources
        .iter()
        .map(|src| {
            let name = src.file_stem().unwrap().to_string_lossy().into_owned();
            Ok((name, build_workload(src, &bindir)?))
        })
        .collect()
}

/// Compile the C program `src` into a static `bindir/<name>` for the guest (unless the
/// binary is newer than the source). `cc::Build` picks and sets up the compiler for
/// [`guest_target`] (`$CC`, else `cc` on the host's own, a cross gcc on others), which
/// also links, with `-static`.
pub fn build_workload(src: &Path, bindir: &Path) -> Result<PathBuf> {
    let bin = bindir.join(src.file_stem().ok_or("no file name")?);
    let mtime = |p: &Path| fs::metadata(p).and_then(|m| m.modified()).ok();
    if mtime(&bin).is_some() && mtime(&bin) >= mtime(src) {
        return Ok(bin);
    }
    let compiler = cc::Build::new()
        .target(guest_target())
        .host(&format!("{}-unknown-linux-gnu", std::env::consts::ARCH))
        .opt_level(2)
        .out_dir(bindir)
        .cargo_metadata(false)
        // cc's defaults add -fPIC (not wanted in a static binary), -Wall and -Wextra (the
        // workloads are kept clean for -Wall only).
        .pic(false)
        .extra_warnings(false)
        .debug(false)
        .flag("-pthread")
        .try_get_compiler()?;
    // cc hands over a std `Command` (the compiler with its environment): run that.
    let mut c = compiler.to_command();
    c.arg("-static").arg("-o").arg(&bin).arg(src);
    echo(&mut c)?;
    let status = c
        .status()
        .map_err(|e| format!("{}: {e}", compiler.path().display()))?;
    if !status.success() {
        bail!("compiling {} failed ({status})", src.display());
    }
    Ok(bin)
}

/// A newc cpio archive (uncompressed) of `files` (path, data, mode) and a
/// `/dev/console`, for guests that need nothing more (`arm64.rs`).
pub fn archive(files: Vec<(String, Vec<u8>, u32)>) -> Vec<u8> {
    let mut cpio = Cpio::default();
    cpio.add("dev/console", Entry::CharDev { major: 5, minor: 1 });
    for (path, data, mode) in files {
        cpio.file(&path, data, mode);
    }
    cpio.finish()
}

enum Entry {
    Dir,
    File { data: Vec<u8>, mode: u32 },
    Symlink(String),
    CharDev { major: u32, minor: u32 },
}

/// An in-memory newc cpio archive; parent directories are added implicitly.
#[derive(Default)]
struct Cpio {
    entries: BTreeMap<String, Entry>,
}

impl Cpio {
    fn add(&mut self, path: &str, e: Entry) {
        let path = path.trim_matches('/');
        let mut parent = Path::new(path).parent();
        while let Some(p) = parent {
            let s = p.to_string_lossy();
            if s.is_empty() {
                break;
            }
            self.entries.entry(s.into_owned()).or_insert(Entry::Dir);
            parent = p.parent();
        }
        self.entries.insert(path.to_string(), e);
    }
    fn dir(&mut self, path: &str) {
        self.add(path, Entry::Dir);
    }
    fn file(&mut self, path: &str, data: Vec<u8>, mode: u32) {
        self.add(path, Entry::File { data, mode });
    }
    /// Copy a host directory tree (regular files keep their permission bits).
    fn tree(&mut self, dest: &str, src: &Path) -> Result<()> {
        self.dir(dest);
        let mut entries: Vec<_> = fs::read_dir(src)?.filter_map(|e| e.ok()).collect();
        entries.sort_by_key(|e| e.file_name());
        for e in entries {
            let name = e.file_name().to_string_lossy().into_owned();
            let d = format!("{dest}/{name}");
            let meta = fs::metadata(e.path())?; // follows symlinks
            if meta.is_dir() {
                self.tree(&d, &e.path())?;
            } else if meta.is_file() {
                self.file(&d, fs::read(e.path())?, meta.permissions().mode() & 0o777);
            }
        }
        Ok(())
    }

    fn finish(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for (ino, (name, e)) in (1..).zip(self.entries.iter()) {
            let (mode, data, rmaj, rmin): (u32, &[u8], u32, u32) = match e {
                Entry::Dir => (0o040755, &[], 0, 0),
                Entry::File { data, mode } => (0o100000 | mode, data, 0, 0),
                Entry::Symlink(t) => (0o120777, t.as_bytes(), 0, 0),
                Entry::CharDev { major, minor } => (0o020600, &[], *major, *minor),
            };
            let nlink = if matches!(e, Entry::Dir) { 2 } else { 1 };
            write_entry(&mut out, ino, mode, nlink, name, data, rmaj, rmin);
        }
        write_entry(&mut out, 0, 0, 1, "TRAILER!!!", &[], 0, 0);
        out
    }
}

#[allow(clippy::too_many_arguments)]
fn write_entry(
    out: &mut Vec<u8>,
    ino: u32,
    mode: u32,
    nlink: u32,
    name: &str,
    data: &[u8],
    rmaj: u32,
    rmin: u32,
) {
    let fields = [
        ino,
        mode,
        0,
        0,
        nlink,
        0,
        data.len() as u32,
        0,
        0,
        rmaj,
        rmin,
        name.len() as u32 + 1,
        0,
    ];
    let _ = write!(out, "070701");
    for f in fields {
        let _ = write!(out, "{f:08x}");
    }
    out.extend_from_slice(name.as_bytes());
    out.push(0);
    pad4(out);
    out.extend_from_slice(data);
    pad4(out);
}

fn pad4(out: &mut Vec<u8>) {
    while !out.len().is_multiple_of(4) {
        out.push(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builds_a_static_workload() {
        let src = repo_root().join("selftests/workloads/fct_cat.c");
        let has_cc = std::process::Command::new("gcc")
            .arg("--version")
            .output()
            .is_ok();
        if !has_cc || !src.exists() {
            eprintln!("skipped: needs gcc and {}", src.display());
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let bin = build_workload(&src, dir.path()).unwrap();
        assert_eq!(bin, dir.path().join("fct_cat"));
        let elf = fs::read(&bin).unwrap();
        assert!(elf.starts_with(b"\x7fELF"));
        // e_type ET_EXEC: linked statically (a dynamic executable would be PIE, ET_DYN)
        assert_eq!(u16::from_le_bytes([elf[16], elf[17]]), 2);
        // up to date now: not built again
        let built = fs::metadata(&bin).unwrap().modified().unwrap();
        build_workload(&src, dir.path()).unwrap();
        assert_eq!(fs::metadata(&bin).unwrap().modified().unwrap(), built);
    }

    #[test]
    fn cpio_layout() {
        let mut c = Cpio::default();
        c.file("a/b/c", b"hi".to_vec(), 0o755);
        c.add("a/l", Entry::Symlink("/x".into()));
        let out = c.finish();
        assert!(out.starts_with(b"070701"));
        assert_eq!(out.len() % 4, 0);
        // parents were added implicitly, in order
        let names: Vec<_> = c.entries.keys().cloned().collect();
        assert_eq!(names, ["a", "a/b", "a/b/c", "a/l"]);
        assert!(out.windows(10).any(|w| w == b"TRAILER!!!"));
    }
}
