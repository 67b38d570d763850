// SPDX-License-Identifier: GPL-2.0

//! `cargo xtask deb`: the Debian package `fctrace-dkms`, written to
//! `target/fctrace/fctrace-dkms_<version>_all.deb` with `dpkg-deb`.
//!
//! It holds:
//! - `/usr/src/fctrace-<version>/`: the module's sources (`rust-kmod/`, and the `src/` of
//!   the crates it includes), `dkms.conf`, `dkms-build` (DKMS's `MAKE` step: it builds
//!   the kernel crate's Rust metadata from `linux-source-X.Y` once per kernel, cached
//!   in `/var/cache/fctrace`) and `kernel-check.sh` (whether a kernel can have the
//!   module, and if not, why, in one line);
//! - `/usr/sbin/fctrace` (`scripts/fctrace`) and its manual page `fctrace(8)`;
//! - maintainer scripts from `scripts/package/`: the preinst refuses, before anything
//!   is installed, where no installed kernel can have the module; the postinst builds
//!   it with DKMS for each kernel that can, and says in one line why not for the others.
//!
//! What the build needs comes in as dependencies: the kernel's rustc and bindgen and a
//! kernel source as `Pre-Depends` (the preinst checks them), DKMS and the kernel's
//! build tools as `Depends`.

use std::fs;
use std::path::{Path, PathBuf};

use crate::util::{bail, echo, note, out_dir, repo_root, Result};

const PACKAGE: &str = "fctrace-dkms";

/// The package's control file, but for `Version` and `Installed-Size` (added after
/// `Package`).
const CONTROL: &str = "\
Package: fctrace-dkms
Architecture: all
Section: kernel
Priority: optional
Maintainer: fctrace developers <fctrace@localhost>
Pre-Depends: rustc, bindgen, linux-source-7.3 | linux-source-7.2
Depends: dkms (>= 3), rust-src, gcc, make, bc, flex, bison, libelf-dev, libssl-dev,
 xz-utils, dwarves, python3, kmod
Description: kernel function call tracer for one task (DKMS module)
 fctrace shows every kernel function call a chosen task makes, as an indented
 call tree in the format of ftrace's function_graph tracer, driven with echo
 and cat, or with the fctrace command: fctrace -- CMD.
 .
 This package builds the fctrace module with DKMS for each installed kernel
 built with Rust (Debian's 7.x kernels), with that kernel's own rustc and
 source, and installs the fctrace command and its manual page.
";

/// The package's version: the workspace's.
pub fn version() -> Result<String> {
    let toml = fs::read_to_string(repo_root().join("Cargo.toml"))?;
    toml.lines()
        .find_map(|l| {
            l.strip_prefix("version = \"")
                .and_then(|v| v.strip_suffix('"'))
        })
        .map(str::to_string)
        .ok_or_else(|| "no version in Cargo.toml".into())
}

/// Where `cargo xtask deb` writes the package.
pub fn deb_path() -> Result<PathBuf> {
    Ok(out_dir().join(format!("{PACKAGE}_{}_all.deb", version()?)))
}

/// Replaces `@VERSION@` and `@KERNEL_CHECK@` in a file of `scripts/package`.
fn script(name: &str, version: &str) -> Result<String> {
    let dir = repo_root().join("scripts/package");
    let text = fs::read_to_string(dir.join(name))?;
    let check = fs::read_to_string(dir.join("kernel-check.sh"))?;
    Ok(text
        .replace("@VERSION@", version)
        .replace("@KERNEL_CHECK@", check.trim_end()))
}

fn write(path: &Path, data: impl AsRef<[u8]>, mode: u32) -> Result<()> {
    use std::os::unix::fs::PermissionsExt;
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir)?;
    }
    fs::write(path, data)?;
    fs::set_permissions(path, fs::Permissions::from_mode(mode))?;
    Ok(())
}

/// Total size of the files under `dir`, in KiB, for `Installed-Size`.
fn size_kib(dir: &Path) -> Result<u64> {
    let mut total = 0;
    for e in fs::read_dir(dir)? {
        let e = e?;
        if e.file_type()?.is_dir() {
            total += size_kib(&e.path())? * 1024;
        } else {
            total += e.metadata()?.len();
        }
    }
    Ok(total.div_ceil(1024))
}

/// Builds the package; returns its path.
pub fn build() -> Result<PathBuf> {
    let version = version()?;
    let repo = repo_root();
    let stage = out_dir().join(format!("deb/{PACKAGE}"));
    if stage.exists() {
        fs::remove_dir_all(&stage)?;
    }
    let src = stage.join(format!("usr/src/fctrace-{version}"));
    crate::debian::sync_sources(&repo.join("rust-kmod"), &src.join("rust-kmod"))?;
    for c in ["fctrace-core", "fctrace-decode"] {
        let from = repo.join(format!("crates/{c}/src"));
        crate::debian::sync_sources(&from, &src.join(format!("crates/{c}/src")))?;
    }
    for (name, mode) in [
        ("dkms.conf", 0o644),
        ("dkms-build", 0o755),
        ("kernel-check.sh", 0o644),
    ] {
        write(&src.join(name), script(name, &version)?, mode)?;
    }
    write(
        &stage.join("usr/sbin/fctrace"),
        fs::read(repo.join("scripts/fctrace"))?,
        0o755,
    )?;
    let man = stage.join("usr/share/man/man8/fctrace.8");
    write(
        &man,
        fs::read(repo.join("Documentation/fctrace/fctrace.8"))?,
        0o644,
    )?;
    duct::cmd!("gzip", "-9n", &man).before_spawn(echo).run()?;
    write(
        &stage.join(format!("usr/share/doc/{PACKAGE}/copyright")),
        "fctrace\n\nCopyright: the fctrace developers\nLicense: GPL-2.0\n \
         On Debian systems, the complete text of the GNU General Public License\n \
         version 2 can be found in /usr/share/common-licenses/GPL-2.\n",
        0o644,
    )?;
    let installed = size_kib(&stage)?;
    let debian = stage.join("DEBIAN");
    write(
        &debian.join("control"),
        CONTROL.replacen(
            "Architecture: all\n",
            &format!("Version: {version}\nArchitecture: all\nInstalled-Size: {installed}\n"),
            1,
        ),
        0o644,
    )?;
    for s in ["preinst", "postinst", "prerm", "postrm"] {
        write(&debian.join(s), script(s, &version)?, 0o755)?;
    }
    let deb = deb_path()?;
    duct::cmd!(
        "dpkg-deb",
        "--root-owner-group",
        "-Zxz",
        "--build",
        &stage,
        &deb
    )
    .before_spawn(echo)
    .stdout_null()
    .run()
    .map_err(|e| format!("dpkg-deb: {e}"))?;
    if !deb.exists() {
        bail!("dpkg-deb wrote no {}", deb.display());
    }
    note(format!("{} ({} KiB installed)", deb.display(), installed));
    Ok(deb)
}

/// `cargo xtask deb --check`: the package as a user meets it, on Debian's own kernel.
#[derive(clap::Args)]
pub struct DebArgs {
    /// Also check the package: install it into a fresh trixie root (first where only a
    /// kernel without Rust has headers: refused in one line, nothing left; then with
    /// Debian's 7.3 kernel's headers: DKMS builds the module by itself), then run the
    /// selftests, installed by kselftest, with that module on Debian's kernel in the
    /// guest (`run_kselftest.sh`). With `--profile debian-arm64`: the package's DKMS build
    /// step for Debian's arm64 kernel, cross-compiling in the arm64 root, then the
    /// selftests with that module on the arm64 kernel
    #[arg(long)]
    pub check: bool,
    /// With --check: run the selftests in N guests side by side
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub jobs: u32,
    /// With --check: only the selftests matching PATTERN (fctracetest's); the package
    /// checks all run
    #[arg(long, value_name = "PATTERN")]
    pub tests: Option<String>,
    /// With --check: the model of the CPU matrix the selftests run on (1 to 6)
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub model: usize,
    /// With --check: stop after SECS in all, the package check included (selftests not
    /// reached are skipped)
    #[arg(long, value_name = "SECS", value_parser = crate::util::secs)]
    pub budget: Option<std::time::Duration>,
    #[command(flatten)]
    pub vm: crate::vm::VmOpts,
}

/// The shell helpers both package checks use ([`run_check`] puts them first): `say`
/// reports a step, `bad` ends the check with `deb-check: FAILED: ..`.
const CHECK_HELPERS: &str = r#"
say() { echo "deb-check: $*"; }
bad() { echo "deb-check: FAILED: $*"; exit 1; }
"#;

/// What the package check runs in the fresh root. `@..@` are filled in by
/// [`check_script`]; each expectation that fails ends it with `bad`.
const CHECK_SCRIPT: &str = r#"
deb=/tmp/@DEB@
apt-get update -q >/dev/null
apt-get install -y -q --no-install-recommends linux-headers-amd64 man-db >/dev/null
k0=$(ls /lib/modules)
say "trixie's own kernel: $k0"

# 1. Only a kernel without Rust: refused in one line; the package not installed.
if apt-get install -y -q --no-install-recommends "$deb" >/tmp/norust.log 2>&1; then
    cat /tmp/norust.log
    bad "installed where no kernel has Rust"
fi
grep '^fctrace-dkms' /tmp/norust.log >/tmp/lines || true
[ "$(wc -l </tmp/lines)" = 1 ] || { cat /tmp/norust.log; bad "not one line of refusal"; }
grep -q "$k0 has no CONFIG_RUST" /tmp/lines || bad "the refusal does not say why: $(cat /tmp/lines)"
say "no Rust: $(cat /tmp/lines)"
case $(dpkg-query -W -f '${Status}' fctrace-dkms 2>/dev/null) in
*" installed" | *half* | *unpacked*) bad "the refused package is in dpkg's database" ;;
esac
for f in /usr/src/fctrace-@VERSION@ /var/lib/dkms/fctrace /usr/sbin/fctrace /var/cache/fctrace; do
    [ ! -e "$f" ] || bad "the refused install left $f"
done

# 2. Debian's 7.3 kernel's headers: the package builds the module by itself.
apt-get install -y -q --no-install-recommends linux-headers-@ABI@=@KVER@ >/dev/null
t0=$(date +%s)
apt-get install -y -q --no-install-recommends "$deb" >/tmp/install.log 2>&1 ||
    { cat /tmp/install.log; bad "apt install failed"; }
say "apt install took $(($(date +%s) - t0)) s"
grep '^fctrace-dkms' /tmp/install.log | sed 's/^/deb-check:   /'
grep -q "^fctrace-dkms: not built for $k0: $k0 has no CONFIG_RUST" /tmp/install.log ||
    bad "no line for $k0"
grep -q "^fctrace-dkms: fctrace.ko installed for @ABI@" /tmp/install.log || bad "no line for @ABI@"
ko=$(ls /lib/modules/@ABI@/updates/dkms/fctrace.ko*) || bad "no fctrace.ko for @ABI@"
modinfo -F vermagic "$ko" | grep -q '^@ABI@ ' || bad "$ko: vermagic $(modinfo -F vermagic "$ko")"
dkms status fctrace | grep -q "@ABI@.*installed" || bad "dkms status: $(dkms status fctrace)"
mkdir -p /tmp/out
cp "$ko" /tmp/out/
say "built: $ko"
command -v fctrace >/dev/null || bad "no fctrace command"
man -P cat fctrace 2>/dev/null >/tmp/man.txt
grep -q "fctrace - trace the kernel function calls" /tmp/man.txt || bad "man fctrace: $(head -3 /tmp/man.txt)"
say "man fctrace: $(sed -n 4p /tmp/man.txt | sed 's/^ *//')"

# 3. What a build lacks is said in one line: the kernel's source, its rustc.
. /usr/src/fctrace-@VERSION@/kernel-check.sh
mv /usr/src/linux-source-@SERIES@.tar.xz /tmp/
if r=$(fctrace_check @ABI@); then bad "no source, yet buildable"; fi
echo "$r" | grep -q "install linux-source-@SERIES@" || bad "no source: $r"
# DKMS skips such a kernel (77), as it skips one without Rust: a failed build would
# fail the kernel's own installation through DKMS's hooks.
st=0
dkms build -m fctrace -v @VERSION@ -k @ABI@ --force >/tmp/nosrc.log 2>&1 || st=$?
[ $st = 77 ] || bad "dkms build without the source: status $st: $(tail -3 /tmp/nosrc.log)"
say "no source: $r"
mv /tmp/linux-source-@SERIES@.tar.xz /usr/src/
rustc=$(command -v rustc)
mv "$rustc" /tmp/rustc.away
if r=$(fctrace_check @ABI@); then bad "no rustc, yet buildable"; fi
echo "$r" | grep -q "rustc here is missing" || bad "no rustc: $r"
say "no rustc: $r"
mv /tmp/rustc.away "$rustc"

# 4. The cache keeps what an installed kernel needs: removing the package (as DKMS's
# remove, POST_REMOVE, and each build) drops the tree of a kernel whose headers are gone
# and a source no longer installed.
mkdir -p /var/cache/fctrace/6.99.0-gone /var/cache/fctrace/linux-source-@SERIES@-0.old
apt-get remove -y -q fctrace-dkms >/tmp/remove.log 2>&1 || { cat /tmp/remove.log; bad "apt remove failed"; }
for f in /var/cache/fctrace/6.99.0-gone /var/cache/fctrace/linux-source-@SERIES@-0.old; do
    [ ! -e "$f" ] || bad "remove left the stale $f in the cache"
done
[ -f /var/cache/fctrace/@ABI@/.fctrace-prepared ] || bad "remove pruned @ABI@'s tree, whose headers are installed"
say "removed: stale cache entries pruned, @ABI@'s tree kept"

# 5. Purged, nothing is left.
apt-get purge -y -q fctrace-dkms >/dev/null
for f in /lib/modules/@ABI@/updates/dkms/fctrace.ko* /usr/src/fctrace-@VERSION@ /var/cache/fctrace /usr/sbin/fctrace /var/lib/dkms/fctrace; do
    [ ! -e "$f" ] || bad "purge left $f"
done
say "purged: nothing left"
"#;

/// What the arm64 check runs in the arm64 root, where Debian's arm64 kernel's headers
/// are unpacked: the package unpacked as dpkg unpacks it, the kernel checked as its
/// maintainer scripts check one, DKMS's architecture test, and its `MAKE` step
/// (`dkms-build`) as DKMS runs it on an arm64 machine, but cross-compiling (`ARCH` and
/// `CROSS_COMPILE` reach its `make`s through the environment). `@..@` as in
/// [`CHECK_SCRIPT`].
const ARM64_CHECK_SCRIPT: &str = r#"
k=@ABI@
w=/tmp/fctrace-pkgcheck
rm -rf $w
mkdir -p $w/out
dpkg-deb -x /tmp/@DEB@ $w/pkg
src=$w/pkg/usr/src/fctrace-@VERSION@
arch=$(sed -n 's/^BUILD_EXCLUSIVE_ARCH="\(.*\)"$/\1/p' $src/dkms.conf)
echo aarch64 | grep -Eq "$arch" || bad "dkms.conf builds only for $arch"
# DKMS finds a kernel's headers at /lib/modules/K/build.
mkdir -p /lib/modules/$k
ln -sfn /kernel/$k/usr/src/linux-headers-$k /lib/modules/$k/build
. $src/kernel-check.sh
why=$(fctrace_check $k) || bad "fctrace_check $k: $why"
say "kernel check: $k can have the module"
# DKMS builds in a copy of the source.
cp -a $src $w/build
cd $w/build
t0=$(date +%s)
ARCH=arm64 CROSS_COMPILE=aarch64-linux-gnu- sh ./dkms-build $k >$w/build.log 2>&1 ||
    { tail -n 40 $w/build.log; bad "dkms-build $k failed"; }
grep '^fctrace:' $w/build.log | sed 's/^/deb-check:   /' || true
say "dkms-build $k took $(($(date +%s) - t0)) s"
ko=rust-kmod/fctrace.ko
[ -f $ko ] || bad "dkms-build made no $ko"
readelf -h $ko | grep -q 'Machine: *AArch64' || bad "$ko is not for arm64: $(readelf -h $ko | grep Machine)"
modinfo -F vermagic $ko | grep -q "^$k " || bad "$ko: vermagic $(modinfo -F vermagic $ko)"
cp $ko $w/out/
say "built: $ko, vermagic $(modinfo -F vermagic $ko)"
"#;

/// `deb --check` with `--profile debian-arm64`: the package built, as DKMS builds it,
/// for Debian's arm64 kernel ([`ARM64_CHECK_SCRIPT`]), then the selftests with that
/// module on the kernel under QEMU. (The amd64 check's install, refusal and removal
/// steps do not depend on the architecture.)
fn check_arm64(deb: &Path, args: DebArgs) -> Result<i32> {
    crate::setup::ensure()?;
    crate::debian::kdir()?;
    let version = version()?;
    let name = deb.file_name().ok_or("no file name")?.to_string_lossy();
    let root = crate::debian::root();
    fs::copy(deb, root.join(format!("tmp/{name}")))?;
    let script = ARM64_CHECK_SCRIPT
        .replace("@DEB@", &name)
        .replace("@VERSION@", &version)
        .replace("@ABI@", crate::debian::target().abi);
    let started = std::time::Instant::now();
    if !run_check(&root, &script, "for arm64", started)? {
        return Ok(1);
    }
    let ko = out_dir().join("fctrace-dkms.ko");
    fs::copy(root.join("tmp/fctrace-pkgcheck/out/fctrace.ko"), &ko)?;
    selftests_with(&ko, args, started)
}

/// [`CHECK_SCRIPT`] for this package and Debian's kernel.
fn check_script(deb: &str, version: &str) -> String {
    use crate::debian::{ABI, KERNEL_VERSION, SERIES};
    CHECK_SCRIPT
        .replace("@DEB@", deb)
        .replace("@VERSION@", version)
        .replace("@ABI@", ABI)
        .replace("@KVER@", KERNEL_VERSION)
        .replace("@SERIES@", SERIES)
}

/// A fresh trixie root for the package check (made again on every check).
fn fresh_root() -> Result<PathBuf> {
    let root = crate::util::cache_root().join("debian-pkgcheck");
    if root.exists() {
        fs::remove_dir_all(&root)?;
    }
    note(format!("debootstrap trixie into {}", root.display()));
    crate::debian::debootstrap(&root)?;
    crate::debian::apt_sources(&root)?;
    Ok(root)
}

/// `cargo xtask deb [--check]`.
pub fn cmd(args: DebArgs) -> Result<i32> {
    let deb = build()?;
    println!("{}", deb.display());
    if !args.check {
        return Ok(0);
    }
    if !crate::setup::is_root() {
        bail!("deb --check makes Debian roots with debootstrap and chroot: run as root");
    }
    if crate::kernel::is_arm64() {
        return check_arm64(&deb, args);
    }
    crate::kernel::set_profile(crate::kernel::Profile::Debian);
    crate::setup::ensure()?;
    let version = version()?;
    let name = deb.file_name().ok_or("no file name")?.to_string_lossy();
    let root = fresh_root()?;
    fs::copy(&deb, root.join(format!("tmp/{name}")))?;
    let started = std::time::Instant::now();
    if !run_check(
        &root,
        &check_script(&name, &version),
        "in the fresh root",
        started,
    )? {
        return Ok(1);
    }
    let built = fs::read_dir(root.join("tmp/out"))?
        .next()
        .ok_or("the check copied no module out")??
        .path();
    let ko = out_dir().join("fctrace-dkms.ko");
    let data = fs::read(&built)?;
    if built.extension().is_some_and(|e| e == "xz") {
        fs::write(&ko, crate::debian::xz_decompress(&data, "fctrace.ko.xz")?)?;
    } else {
        fs::write(&ko, data)?;
    }
    selftests_with(&ko, args, started)
}

/// Runs the package check `script` in `root`; says whether it passed (`what`: where, for
/// the note), and how long since `started`.
fn run_check(root: &Path, script: &str, what: &str, started: std::time::Instant) -> Result<bool> {
    let ok = crate::debian::in_dir(root, &format!("{CHECK_HELPERS}{script}"))
        .unchecked()
        .run()?
        .status
        .success();
    note(format!(
        "package check {what}: {} ({} s)",
        if ok { "passed" } else { "FAILED" },
        started.elapsed().as_secs()
    ));
    Ok(ok)
}

/// The selftests with the package's module `ko` on Debian's kernel (the check began at
/// `started`: its budget counts from there): on amd64 as kselftest installs them; on
/// arm64 as the profile runs them (the arm64 root has no C library for the workloads
/// that kselftest's make would build; the profile builds them on the host).
fn selftests_with(ko: &Path, args: DebArgs, started: std::time::Instant) -> Result<i32> {
    crate::module::set_prebuilt(ko);
    let kselftest = !crate::kernel::is_arm64();
    if kselftest {
        crate::initramfs::set_kselftest(&crate::debian::kselftest_install()?);
    }
    note(format!(
        "the selftests{}, with {} (DKMS's) on Debian's kernel",
        if kselftest {
            ", as kselftest installed them"
        } else {
            ""
        },
        ko.display()
    ));
    crate::test::cmd(crate::test::TestArgs {
        pattern: args.tests,
        debug: false,
        jobs: args.jobs,
        test_timeout: None,
        budget: args.budget.map(|b| {
            b.saturating_sub(started.elapsed())
                .max(std::time::Duration::from_secs(60))
        }),
        // (The CPU matrix is x86-64's.)
        model: (!crate::kernel::is_arm64()).then_some(args.model),
        vm: args.vm,
        rotate: None,
        kselftest,
    })
}
