// SPDX-License-Identifier: GPL-2.0

//! The `debian` profile: Debian's own kernel, as Debian ships it.
//!
//! Debian's `linux-headers-*` packages carry no Rust metadata (`rust/*.rmeta`,
//! `libmacros.so`), and the kernel's rustc (trixie's 1.85.1, which needs glibc 2.39) does
//! not run on older hosts; so the module is built in a trixie root made with
//! `debootstrap`, with the kernel's own rustc, bindgen and GCC, against a tree of
//! `linux-source-X.Y` configured with the image's own `.config` (`modules_prepare`
//! builds the kernel crate; the headers' `Module.symvers` names the symbols). The guest
//! boots the image package's `vmlinuz`, unmodified, and loads the drivers the tests need
//! from its `linux-modules` package.
//!
//! Layout (R = `${XDG_CACHE_HOME:-$HOME/.cache}/fctrace`, K = the key of [`PINNED`]):
//! - `R/debian-trixie-K/`: the root; `.fctrace-root` once its packages are installed
//! - `…/usr/src/linux-source-X.Y`: the source; `…/build/<abi>`: the configured tree
//!   (`.fctrace-built` once prepared), with the headers' `Module.symvers` and their
//!   `vmlinux` (only the kernel's `.BTF`: the base of the modules' BTF)
//! - `…/kernel/<abi>/`: the image and modules packages, unpacked (`usr/lib/modules/<abi>/`
//!   has the `vmlinuz`)
//! - `…/src/fctrace/`: the module's sources, copied in for each build (only changed files
//!   are written, so that Kbuild rebuilds only what changed)
//!
//! Every package is pinned ([`PINNED`]); the toolchain is checked against the kernel's
//! configuration (`CONFIG_RUSTC_VERSION_TEXT` and the rest) before anything is built.

use std::fs;
use std::path::{Path, PathBuf};

use crate::util::{bail, cache_root, echo, note, repo_root, Result};

/// The amd64 kernel's ABI name (the release), and the version of the kernel's packages.
pub const ABI: &str = "7.3.4+deb13-amd64";
pub const KERNEL_VERSION: &str = "7.3.4-1~bpo13+1";
/// The source package's series (`linux-source-7.3`).
pub const SERIES: &str = "7.3";
const MIRROR: &str = "http://deb.debian.org/debian";
const SOURCES: &str = "deb http://deb.debian.org/debian trixie main\n\
                       deb http://deb.debian.org/debian trixie-updates main\n\
                       deb http://deb.debian.org/debian trixie-backports main\n";

/// The packages installed in the root, with the versions the kernel was built with where
/// it matters (its rustc, bindgen and GCC; the kernel's own packages).
const PINNED: &[(&str, &str)] = &[
    ("rustc", "1.85.1+dfsg1-1+deb13u1"),
    ("rust-src", "1.85.1+dfsg1-1+deb13u1"),
    ("bindgen", "0.71.1-6"),
    ("gcc-14", "14.2.0-19"),
    ("linux-source-7.3", KERNEL_VERSION),
    ("linux-headers-7.3.4+deb13-amd64", KERNEL_VERSION),
];
/// Unpinned build tools.
const TOOLS: &[&str] = &[
    "gcc",
    "make",
    "bc",
    "flex",
    "bison",
    "libelf-dev",
    "libssl-dev",
    "python3",
    "dwarves",
    "xz-utils",
    "kmod",
    "cpio",
    "rustfmt",
    "rsync",
];
/// The packages unpacked (not installed: their scripts would make an initramfs) for the
/// guest: the kernel image and its modules.
const GUEST_PACKAGES: &[&str] = &[
    "linux-binary-7.3.4+deb13-amd64",
    "linux-modules-7.3.4+deb13-amd64",
];
/// The drivers the selftests need that Debian builds as modules: the scratch disk and
/// its file system. Their dependencies come along (`modules.dep`).
const GUEST_MODULES: &[&str] = &["virtio_blk", "ext4"];

/// One of Debian's kernels of the release above, and how modules are built for it.
pub struct Target {
    /// Debian's name of the architecture.
    pub arch: &'static str,
    /// The kernel's ABI name (its release).
    pub abi: &'static str,
    /// `make`'s variables for it: none for the host's own, `ARCH` and `CROSS_COMPILE`
    /// for another.
    make_vars: &'static str,
    /// The compiler `CONFIG_CC_VERSION_TEXT` names, as the root has it.
    gcc: &'static str,
}

/// Debian's amd64 kernel (`--profile debian`): its root is the one described above.
pub const AMD64: Target = Target {
    arch: "amd64",
    abi: ABI,
    make_vars: "",
    gcc: "x86_64-linux-gnu-gcc-14",
};

/// Debian's arm64 kernel (`--profile debian-arm64`), the same release, built in a root
/// of its own by the cross compiler of the same GCC. Its foreign packages are
/// downloaded for `arm64` and unpacked, not installed: the kernel's image and modules,
/// its headers (only their `.config`, `Module.symvers` and `vmlinux` are used) and the
/// guest's busybox.
pub const ARM64: Target = Target {
    arch: "arm64",
    abi: crate::arm64::ABI,
    make_vars: "ARCH=arm64 CROSS_COMPILE=aarch64-linux-gnu-",
    gcc: "aarch64-linux-gnu-gcc-14",
};

/// The pinned and unpinned packages the arm64 root installs besides [`PINNED`]'s
/// toolchain and source (instead of the amd64 headers): the cross compiler.
const ARM64_PINNED: &[(&str, &str)] = &[("gcc-14-aarch64-linux-gnu", "14.2.0-19cross1")];
const ARM64_TOOLS: &[&str] = &["gcc-aarch64-linux-gnu"];
/// The arm64 packages unpacked for the guest and the build, besides the kernel's.
const ARM64_GUEST: &[&str] = &["busybox-static"];

/// The target of this run's profile.
pub fn target() -> &'static Target {
    if crate::kernel::is_arm64() {
        &ARM64
    } else {
        &AMD64
    }
}

const ROOT_STAMP: &str = ".fctrace-root";
const TREE_STAMP: &str = ".fctrace-built";

/// The root's directory: its name carries the key of what goes into it (the arm64 root
/// is another directory).
pub fn root() -> PathBuf {
    let mut spec = format!("{MIRROR}\n{SOURCES}");
    let t = target();
    for (p, v) in pinned(t) {
        spec.push_str(&format!("{p}={v}\n"));
    }
    for p in tools(t) {
        spec.push_str(&format!("{p}\n"));
    }
    for p in guest_packages(t) {
        spec.push_str(&format!("{p}\n"));
    }
    if t.arch != AMD64.arch {
        spec.push_str(&format!("arch {} {}\n", t.arch, t.abi));
    }
    cache_root().join(format!("debian-trixie-{}", short_hash(spec.as_bytes())))
}

/// The packages pinned in `t`'s root: the toolchain and the source, with the amd64
/// headers in amd64's or the cross compiler in arm64's.
fn pinned(t: &Target) -> Vec<(&'static str, &'static str)> {
    let mut p: Vec<_> = PINNED.to_vec();
    if t.arch != AMD64.arch {
        p.retain(|(name, _)| !name.starts_with("linux-headers-"));
        p.extend(ARM64_PINNED);
    }
    p
}

fn tools(t: &Target) -> Vec<&'static str> {
    let mut v = TOOLS.to_vec();
    if t.arch != AMD64.arch {
        v.extend(ARM64_TOOLS);
    }
    v
}

/// The packages unpacked, not installed, in `t`'s root: for amd64 the kernel's image
/// and modules; for arm64 those, its headers and busybox.
fn guest_packages(t: &Target) -> Vec<String> {
    if t.arch == AMD64.arch {
        return GUEST_PACKAGES.iter().map(|p| p.to_string()).collect();
    }
    let mut v: Vec<String> = ["binary", "modules", "headers"]
        .iter()
        .map(|p| format!("linux-{p}-{}", t.abi))
        .collect();
    v.extend(ARM64_GUEST.iter().map(|p| p.to_string()));
    v
}

/// The configured kernel tree (a host path inside the root).
pub fn kdir() -> Result<PathBuf> {
    ensure_root()?;
    ensure_tree()
}

/// Debian's kernel image, as its package has it.
pub fn image() -> PathBuf {
    modules_dir().join("vmlinuz")
}

/// The unpacked modules package (`modules.dep` made by `depmod`).
fn modules_dir() -> PathBuf {
    let abi = target().abi;
    root().join(format!("kernel/{abi}/usr/lib/modules/{abi}"))
}

/// The kernel's headers inside the root: installed for the host's architecture, only
/// unpacked for another.
fn headers() -> String {
    let abi = target().abi;
    if target().arch == AMD64.arch {
        format!("/usr/src/linux-headers-{abi}")
    } else {
        format!("/kernel/{abi}/usr/src/linux-headers-{abi}")
    }
}

/// Where the arm64 root unpacked busybox for the guest.
pub fn busybox() -> PathBuf {
    root().join(format!("kernel/{}/usr/bin/busybox", target().abi))
}

/// The kernel's configuration (the image's own, as the headers package has it).
fn config() -> PathBuf {
    root().join(format!("{}/.config", &headers()[1..]))
}

/// 12 hex digits of FNV-1a over `data`: stable across runs and hosts.
fn short_hash(data: &[u8]) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in data {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}")[..12].to_string()
}

/// Runs `script` with `sh -e` in the root, with `/proc` mounted for it alone (a private
/// mount namespace) and apt non-interactive.
fn in_root(script: &str) -> duct::Expression {
    in_dir(&root(), script)
}

/// [`in_root`] in another root.
pub fn in_dir(root: &Path, script: &str) -> duct::Expression {
    let wrapper = format!(
        "mount -t proc proc '{}/proc' && exec chroot '{}' /usr/bin/env -i \
         PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
         DEBIAN_FRONTEND=noninteractive sh -ec \"$1\"",
        root.display(),
        root.display()
    );
    duct::cmd!(
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "--fork",
        "sh",
        "-ec",
        wrapper,
        "sh",
        script
    )
    .before_spawn(echo)
}

/// A minimal trixie root in `dir` (`debootstrap --variant=minbase`).
pub fn debootstrap(dir: &Path) -> Result<()> {
    duct::cmd!("debootstrap", "--variant=minbase", "trixie", dir, MIRROR)
        .before_spawn(echo)
        .stdout_null()
        .run()
        .map_err(|e| format!("debootstrap trixie: {e}"))?;
    Ok(())
}

/// The root's apt sources ([`SOURCES`]) and the host's resolver.
pub fn apt_sources(root: &Path) -> Result<()> {
    fs::write(root.join("etc/apt/sources.list"), SOURCES)?;
    let _ = fs::copy("/etc/resolv.conf", root.join("etc/resolv.conf"));
    Ok(())
}

fn ensure_root() -> Result<()> {
    let root = root();
    if root.join(ROOT_STAMP).exists() {
        return Ok(());
    }
    if !crate::setup::is_root() {
        bail!("the debian profile makes a Debian root with debootstrap and chroot: run as root");
    }
    fs::create_dir_all(cache_root())?;
    let lock = fs::File::create(root.with_extension("lock"))?;
    if lock.try_lock().is_err() {
        note("another xtask is making the Debian root; waiting for it");
        lock.lock()?;
        if root.join(ROOT_STAMP).exists() {
            return Ok(());
        }
    }
    if !root.join("usr/bin/apt-get").exists() {
        let tmp = root.with_extension("tmp");
        if tmp.exists() {
            fs::remove_dir_all(&tmp)?;
        }
        note(format!("debootstrap trixie into {}", root.display()));
        debootstrap(&tmp)?;
        if root.exists() {
            fs::remove_dir_all(&root)?;
        }
        fs::rename(&tmp, &root)?;
    }
    apt_sources(&root)?;
    let t = target();
    let abi = t.abi;
    let pinned: Vec<String> = pinned(t).iter().map(|(p, v)| format!("{p}={v}")).collect();
    // The kernel's packages at its version; another architecture's by their `:arch`.
    let guest: Vec<String> = guest_packages(t)
        .iter()
        .map(|p| {
            let arch = if t.arch == AMD64.arch {
                String::new()
            } else {
                format!(":{}", t.arch)
            };
            if p.starts_with("linux-") {
                format!("{p}{arch}={KERNEL_VERSION}")
            } else {
                format!("{p}{arch}")
            }
        })
        .collect();
    let foreign = if t.arch == AMD64.arch {
        String::new()
    } else {
        format!("dpkg --add-architecture {}\n", t.arch)
    };
    let script = format!(
        "{foreign}apt-get update -q\n\
         apt-get install -y -q --no-install-recommends {} {}\n\
         mkdir -p /kernel/debs /kernel/{abi}\n\
         cd /kernel/debs && apt-get download {}\n\
         for d in /kernel/debs/*.deb; do dpkg-deb -x \"$d\" /kernel/{abi}; done\n\
         depmod -b /kernel/{abi}/usr {abi}\n",
        tools(t).join(" "),
        pinned.join(" "),
        guest.join(" ")
    );
    in_root(&script).run().map_err(|e| {
        format!(
            "installing the pinned packages in the Debian root failed ({e}); if the archive \
             no longer has these versions, update PINNED in xtask/src/debian.rs"
        )
    })?;
    if !image().exists() {
        bail!(
            "{} is missing after unpacking the image package",
            image().display()
        );
    }
    fs::write(root.join(ROOT_STAMP), "")?;
    Ok(())
}

/// `CONFIG_NAME="value"` of the kernel's configuration.
fn config_text(config: &str, name: &str) -> Option<String> {
    config.lines().find_map(|l| {
        l.strip_prefix(name)?
            .strip_prefix("=\"")?
            .strip_suffix('"')
            .map(str::to_string)
    })
}

/// The toolchain in the root must be the kernel's: Rust metadata from another rustc
/// cannot be loaded, and bindgen's and GCC's output must match what the kernel was
/// built with.
fn check_toolchain() -> Result<()> {
    let config = fs::read_to_string(config())?;
    for (name, cmd) in [
        ("CONFIG_RUSTC_VERSION_TEXT", "rustc --version"),
        (
            "CONFIG_BINDGEN_VERSION_TEXT",
            "bindgen --version 2>/dev/null | head -n1",
        ),
        (
            "CONFIG_CC_VERSION_TEXT",
            &format!("{} --version | head -n1", target().gcc),
        ),
    ] {
        let want = config_text(&config, name).ok_or(format!("{name} not in the config"))?;
        let have = in_root(cmd).read()?;
        if have.trim() != want {
            bail!(
                "the Debian root's toolchain is not the kernel's: {name} is {want:?}, \
                 `{cmd}` says {:?}",
                have.trim()
            );
        }
    }
    Ok(())
}

fn ensure_tree() -> Result<PathBuf> {
    let (abi, vars, headers) = (target().abi, target().make_vars, headers());
    let kdir = root().join(format!("build/{abi}"));
    if kdir.join(TREE_STAMP).exists() {
        return Ok(kdir);
    }
    check_toolchain()?;
    fs::create_dir_all(&kdir)?;
    fs::copy(config(), kdir.join(".config"))?;
    let script = format!(
        "cd /usr/src\n\
         [ -f linux-source-{SERIES}/Makefile ] || tar xf linux-source-{SERIES}.tar.xz\n\
         cd linux-source-{SERIES}\n\
         make O=/build/{abi} KERNELRELEASE={abi} {vars} olddefconfig >/dev/null\n\
         make O=/build/{abi} KERNELRELEASE={abi} {vars} -j{} modules_prepare\n\
         cp {headers}/Module.symvers /build/{abi}/\n\
         cp {headers}/vmlinux /build/{abi}/\n",
        crate::util::nproc()
    );
    note(format!(
        "preparing {abi}'s tree (the kernel crate) in the Debian root"
    ));
    in_root(&script)
        .stdout_null()
        .run()
        .map_err(|e| format!("modules_prepare for {abi}: {e}"))?;
    fs::write(kdir.join(TREE_STAMP), "")?;
    Ok(kdir)
}

/// Copies the files of `src` (a directory tree) that are sources, not build products,
/// to `dst`, writing only those that differ, so that their times tell Kbuild what changed;
/// removes from `dst` what `src` no longer has (build products kept).
pub(crate) fn sync_sources(src: &Path, dst: &Path) -> Result<()> {
    fs::create_dir_all(dst)?;
    for e in fs::read_dir(src)? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        let (from, to) = (e.path(), dst.join(&name));
        if e.file_type()?.is_dir() {
            if name != "target" && !name.starts_with('.') {
                sync_sources(&from, &to)?;
            }
            continue;
        }
        if is_build_product(&name) {
            continue;
        }
        let data = fs::read(&from)?;
        if fs::read(&to).ok().as_deref() != Some(&data[..]) {
            fs::write(&to, &data)?;
            fs::set_permissions(&to, e.metadata()?.permissions())?;
        }
    }
    // What the source no longer has goes (a selftest removed from the tree would still
    // be installed and run), build products and skipped directories aside.
    for e in fs::read_dir(dst)? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        if src.join(&name).symlink_metadata().is_ok() || name.starts_with('.') {
            continue;
        }
        if e.file_type()?.is_dir() {
            if name != "target" {
                fs::remove_dir_all(e.path())?;
            }
        } else if !is_build_product(&name) {
            fs::remove_file(e.path())?;
        }
    }
    Ok(())
}

/// A file the build makes in a source directory (kept when the sources are synced).
fn is_build_product(name: &str) -> bool {
    name.starts_with('.')
        || [
            ".o", ".ko", ".mod", ".mod.c", ".order", ".symvers", ".a", ".d",
        ]
        .iter()
        .any(|s| name.ends_with(s))
        || name == "bindings_generated.rs"
}

/// Builds `fctrace.ko` and the selftests' module for Debian's kernel in the root;
/// returns their host paths.
pub fn build_modules() -> Result<(PathBuf, PathBuf)> {
    kdir()?;
    let (abi, vars) = (target().abi, target().make_vars);
    let src = root().join("src/fctrace");
    for d in ["rust-kmod", "crates", "selftests/modules"] {
        sync_sources(&repo_root().join(d), &src.join(d))?;
    }
    let mut log = String::new();
    for m in ["rust-kmod", "selftests/modules"] {
        let out = in_root(&format!(
            "make -C /build/{abi} KERNELRELEASE={abi} {vars} MODULE_PAHOLE_FLAGS= \
             M=/src/fctrace/{m} modules 2>&1"
        ))
        .unchecked()
        .stdout_capture()
        .run()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        print!("{text}");
        if !out.status.success() {
            bail!("module build for {abi} failed ({})", out.status);
        }
        log.push_str(&text);
    }
    let warnings = log.lines().filter(|l| l.starts_with("warning:")).count();
    if warnings > 0 {
        bail!("module build for {abi} produced {warnings} Rust warning(s) (see above)");
    }
    Ok((
        src.join("rust-kmod/fctrace.ko"),
        src.join("selftests/modules/fct_testmod.ko"),
    ))
}

/// kselftest's installation of the selftests for Debian's kernel, made in the root as a
/// user makes it in a kernel tree (the selftests copied into the source's
/// `tools/testing/selftests/fctrace`, `make ... TARGETS=fctrace install`, the selftests'
/// module against the configured tree); returns its host path.
pub fn kselftest_install() -> Result<PathBuf> {
    kdir()?;
    let (abi, vars) = (target().abi, target().make_vars);
    let selftests = format!("/usr/src/linux-source-{SERIES}/tools/testing/selftests");
    sync_sources(
        &repo_root().join("selftests"),
        &root().join(format!("{}/fctrace", &selftests[1..])),
    )?;
    let script = format!(
        "rm -rf /src/kselftest\n\
         make -C {selftests} TARGETS=fctrace KDIR=/build/{abi} KERNELRELEASE={abi} {vars} \
         MODULE_PAHOLE_FLAGS= INSTALL_PATH=/src/kselftest install >/dev/null\n"
    );
    note("kselftest: make TARGETS=fctrace install, in the Debian root");
    in_root(&script)
        .run()
        .map_err(|e| format!("kselftest install: {e}"))?;
    Ok(root().join("src/kselftest"))
}

/// What the initramfs needs for Debian's kernel besides the module: the selftests'
/// module built for it (by [`build_modules`], before), and [`GUEST_MODULES`] with their
/// dependencies, uncompressed, in load order, listed in `lib/modules/preload` (the
/// guest's init loads them).
pub fn initramfs_files() -> Result<Vec<(String, Vec<u8>)>> {
    let testmod = root().join("src/fctrace/selftests/modules/fct_testmod.ko");
    let mut files = vec![(
        "selftests/modules/fct_testmod.ko".to_string(),
        fs::read(&testmod).map_err(|e| format!("{}: {e}", testmod.display()))?,
    )];
    let mods = modules_dir();
    let dep = fs::read_to_string(mods.join("modules.dep"))?;
    let mut order: Vec<String> = Vec::new();
    for m in GUEST_MODULES {
        load_order(&dep, m, &mut order)?;
    }
    let mut preload = String::new();
    for path in &order {
        let data = fs::read(mods.join(path))?;
        let ko = if path.ends_with(".xz") {
            xz_decompress(&data, path)?
        } else {
            data
        };
        let name = Path::new(path.trim_end_matches(".xz"))
            .file_name()
            .unwrap()
            .to_string_lossy()
            .into_owned();
        preload.push_str(&format!("{name}\n"));
        files.push((format!("lib/modules/{name}"), ko));
    }
    files.push(("lib/modules/preload".to_string(), preload.into_bytes()));
    Ok(files)
}

/// Adds module `name`'s path and those of its dependencies to `order`, dependencies
/// first, each once.
fn load_order(dep: &str, name: &str, order: &mut Vec<String>) -> Result<()> {
    let file = |p: &str| {
        let base = Path::new(p)
            .file_name()
            .unwrap_or_default()
            .to_string_lossy();
        base.split('.').next().unwrap_or("").replace('-', "_")
    };
    let line = dep
        .lines()
        .find(|l| l.split(':').next().is_some_and(|p| file(p) == name))
        .ok_or(format!(
            "module {name} is not in {}'s modules.dep",
            target().abi
        ))?;
    let (path, deps) = line.split_once(':').unwrap();
    // modules.dep lists the dependencies so that the last is loaded first.
    for d in deps.split_whitespace().rev() {
        if !order.iter().any(|o| o == d) {
            load_order(dep, &file(d), order)?;
        }
    }
    if !order.iter().any(|o| o == path) {
        order.push(path.to_string());
    }
    Ok(())
}

pub(crate) fn xz_decompress(data: &[u8], what: &str) -> Result<Vec<u8>> {
    let o = duct::cmd!("xz", "-dc")
        .stdin_bytes(data)
        .stdout_capture()
        .run()
        .map_err(|e| format!("xz -d {what}: {e}"))?;
    Ok(o.stdout)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dependencies_load_first_and_once() {
        let dep = "kernel/fs/ext4/ext4.ko.xz: kernel/lib/crc/crc16.ko.xz kernel/fs/mbcache.ko.xz kernel/fs/jbd2/jbd2.ko.xz\n\
                   kernel/fs/jbd2/jbd2.ko.xz:\n\
                   kernel/fs/mbcache.ko.xz:\n\
                   kernel/lib/crc/crc16.ko.xz:\n\
                   kernel/drivers/block/virtio_blk.ko.xz:\n";
        let mut order = Vec::new();
        load_order(dep, "virtio_blk", &mut order).unwrap();
        load_order(dep, "ext4", &mut order).unwrap();
        load_order(dep, "jbd2", &mut order).unwrap();
        assert_eq!(
            order,
            [
                "kernel/drivers/block/virtio_blk.ko.xz",
                "kernel/fs/jbd2/jbd2.ko.xz",
                "kernel/fs/mbcache.ko.xz",
                "kernel/lib/crc/crc16.ko.xz",
                "kernel/fs/ext4/ext4.ko.xz",
            ]
        );
        assert!(load_order(dep, "btrfs", &mut order).is_err());
    }

    #[test]
    fn config_text_reads_quoted_values() {
        let c = "CONFIG_X=y\nCONFIG_RUSTC_VERSION_TEXT=\"rustc 1.85.1 (4eb161250 built from source)\"\n";
        assert_eq!(
            config_text(c, "CONFIG_RUSTC_VERSION_TEXT").as_deref(),
            Some("rustc 1.85.1 (4eb161250 built from source)")
        );
        assert_eq!(config_text(c, "CONFIG_X"), None);
    }
}
