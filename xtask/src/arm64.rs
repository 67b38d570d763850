// SPDX-License-Identifier: GPL-2.0

//! Debian's arm64 kernel, the same release as the amd64 one of `--profile debian`, for
//! the A64 decoder's host test (`crates/fctrace-decode/tests/a64_vs_bad64.rs`): its
//! image, every word of which is checked against the bad64 disassembler, and its ftrace
//! sites, as the running kernel lists them, each checked against
//! `a64::ftrace_site()`, and its text symbols, which bound the functions whose call sites
//! `a64::call_site()` finds. The image is unpacked from its package (`linux-binary-*`,
//! checked against Debian's signed index, `archive.rs`) into
//! `~/.cache/fctrace/debian-arm64/vmlinuz-<ABI>`, the sites listed once by booting it
//! (`ftrace-sites-<ABI>.txt` there). (`--profile debian-arm64`, the whole kernel and
//! the module's build for it, is `debian.rs`'s.)

use std::fs;
use std::path::PathBuf;

use crate::archive;
use crate::util::{bail, echo, note, Result};

/// The kernel's ABI name.
pub const ABI: &str = "7.3.4+deb13-arm64";
const SUITE: &str = "trixie-backports";
const INDEX: &str = "main/binary-arm64/Packages.xz";

fn dir() -> PathBuf {
    crate::util::cache_root().join("debian-arm64")
}

/// Where the image is, once [`ensure_image`] has fetched it.
pub fn image() -> PathBuf {
    dir().join(format!("vmlinuz-{ABI}"))
}

/// Fetches Debian's arm64 kernel image unless it is there; returns its path.
pub fn ensure_image() -> Result<PathBuf> {
    let img = image();
    if img.exists() {
        return Ok(img);
    }
    note(format!("fetching Debian's arm64 kernel image {ABI}"));
    let tmp = crate::util::cache_root().join("debian-arm64.tmp");
    let _ = fs::remove_dir_all(&tmp);
    fs::create_dir_all(&tmp)?;
    let index = archive::signed_index(SUITE, INDEX, &tmp)?;
    let name = format!("linux-binary-{ABI}");
    let p = archive::find_package(&index, &name)
        .ok_or_else(|| format!("{SUITE} has no package {name}"))?;
    if p.version != crate::debian::KERNEL_VERSION {
        bail!(
            "{SUITE}'s {name} is {}, not {}: update xtask/src/debian.rs",
            p.version,
            crate::debian::KERNEL_VERSION
        );
    }
    let deb = archive::fetch_package(&p, &tmp.join("linux-binary.deb"))?;
    let root = tmp.join("root");
    duct::cmd!("dpkg-deb", "-x", &deb, &root)
        .before_spawn(echo)
        .run()?;
    fs::create_dir_all(dir())?;
    fs::rename(root.join(format!("usr/lib/modules/{ABI}/vmlinuz")), &img)?;
    fs::remove_dir_all(&tmp)?;
    Ok(img)
}

/// The guest's script for [`ensure_lists`]: every function ftrace has a site for, as
/// `FUNCTION-ADDRESS SITE-ADDRESS NAME` (kallsyms' address of the name, ftrace's record
/// of it), for names kallsyms has once; then every text symbol (weak ones too: `W`), as
/// `ADDRESS NAME`; each
/// list between markers, with its count.
const SITES_INIT: &str = r#"#!/bin/busybox sh
B=/bin/busybox
$B mkdir -p /proc /sys /tmp
$B mount -t proc proc /proc
$B mount -t sysfs sysfs /sys
$B mount -t tracefs nodev /sys/kernel/tracing
echo 0 > /proc/sys/kernel/kptr_restrict
$B awk '$3 == "_text" { print "FCTRACE-TEXT " $1 }' /proc/kallsyms
$B awk 'NR == FNR { if (($2 == "t" || $2 == "T") && NF == 3) { n[$3]++; a[$3] = $1 }; next }
    NF == 2 && n[$2] == 1 { print a[$2], $1, $2 }' \
    /proc/kallsyms /sys/kernel/tracing/available_filter_functions_addrs > /tmp/sites
echo FCTRACE-SITES-BEGIN
$B cat /tmp/sites
echo "FCTRACE-SITES-END $($B wc -l < /tmp/sites)"
$B awk '$2 ~ /^[tTwW]$/ && NF == 3 { print $1, $3 }' /proc/kallsyms > /tmp/syms
echo FCTRACE-SYMS-BEGIN
$B cat /tmp/syms
echo "FCTRACE-SYMS-END $($B wc -l < /tmp/syms)"
$B poweroff -f
"#;

/// The kernel's ftrace sites and text symbols, as the running kernel has them: boots the
/// image (without KASLR, so that the addresses are the image's) under
/// `qemu-system-aarch64` with a busybox and [`SITES_INIT`], once; returns the two files
/// (`FUNCTION SITE NAME` lines, and `ADDRESS NAME` lines; hex addresses). The A64
/// decoder's host tests check `a64::ftrace_site()` on each site, and `a64::call_site()`
/// over every function the symbols bound.
pub fn ensure_lists() -> Result<(PathBuf, PathBuf)> {
    let sites = dir().join(format!("ftrace-sites-{ABI}.txt"));
    let syms = dir().join(format!("functions-{ABI}.txt"));
    if sites.exists() && syms.exists() {
        return Ok((sites, syms));
    }
    let img = ensure_image()?;
    note(format!(
        "listing {ABI}'s ftrace sites and text symbols in an arm64 guest"
    ));
    let tmp = crate::util::cache_root().join("debian-arm64-sites.tmp");
    let _ = fs::remove_dir_all(&tmp);
    fs::create_dir_all(&tmp)?;
    // Debian's arm64 busybox, from trixie (the guest's only program).
    let index = archive::signed_index("trixie", INDEX, &tmp)?;
    let p = archive::find_package(&index, "busybox-static")
        .ok_or("trixie has no arm64 busybox-static")?;
    let deb = archive::fetch_package(&p, &tmp.join("busybox.deb"))?;
    let root = tmp.join("root");
    duct::cmd!("dpkg-deb", "-x", &deb, &root)
        .before_spawn(echo)
        .run()?;
    let cpio = crate::initramfs::archive(vec![
        (
            "bin/busybox".into(),
            fs::read(root.join("usr/bin/busybox"))?,
            0o755,
        ),
        ("init".into(), SITES_INIT.as_bytes().to_vec(), 0o755),
    ]);
    let initrd = tmp.join("initrd.cpio");
    fs::write(&initrd, cpio)?;
    // (`timeout`: a guest that hangs must not hold the tests up; it takes seconds.)
    let console = duct::cmd!(
        "timeout",
        "300",
        "qemu-system-aarch64",
        "-M",
        "virt",
        "-accel",
        "tcg",
        "-cpu",
        "max,pauth-impdef=on",
        "-m",
        "1024",
        "-kernel",
        &img,
        "-initrd",
        &initrd,
        "-append",
        "console=ttyAMA0 nokaslr loglevel=1 panic=-1 rdinit=/init",
        "-display",
        "none",
        "-no-reboot",
        "-serial",
        "stdio",
        "-monitor",
        "none"
    )
    .before_spawn(echo)
    .stdin_null()
    .stdout_capture()
    .run()
    .map_err(|e| format!("qemu-system-aarch64 for the ftrace sites: {e}"))?;
    let text = String::from_utf8_lossy(&console.stdout).replace('\r', "");
    check_text(&text)?;
    let listed = parse_list(&text, "SITES", 3)?;
    let symbols = parse_list(&text, "SYMS", 2)?;
    // Whole or not at all: a list cut short would be taken as the kernel's.
    for (list, out) in [(listed, &sites), (symbols, &syms)] {
        let part = tmp.join("list");
        fs::write(&part, list)?;
        fs::rename(&part, out)?;
    }
    fs::remove_dir_all(&tmp)?;
    Ok((sites, syms))
}

/// Checks that the guest's kernel ran where the image is linked: `_text` at
/// `KIMAGE_VADDR`.
fn check_text(console: &str) -> Result<()> {
    const KIMAGE_VADDR: &str = "ffff800080000000";
    let text = console
        .lines()
        .find_map(|l| l.strip_prefix("FCTRACE-TEXT "))
        .ok_or("the arm64 guest printed no _text")?;
    if text.trim() != KIMAGE_VADDR {
        bail!("the arm64 guest's _text is {text}, not {KIMAGE_VADDR} (KASLR on?)");
    }
    Ok(())
}

/// The list `what` (`SITES`, `SYMS`) between the guest's markers, checked: as many
/// well-formed lines as the guest counted, each of `fields` fields, all but the last
/// 16-digit hex addresses.
fn parse_list(console: &str, what: &str, fields: usize) -> Result<String> {
    let body = console
        .split_once(&format!("FCTRACE-{what}-BEGIN\n"))
        .map(|(_, b)| b)
        .ok_or_else(|| format!("the arm64 guest printed no {what} list"))?;
    let (body, end) = body
        .split_once(&format!("FCTRACE-{what}-END "))
        .ok_or_else(|| format!("the arm64 guest's {what} list did not end"))?;
    let want: usize = end
        .lines()
        .next()
        .and_then(|n| n.trim().parse().ok())
        .ok_or_else(|| format!("the arm64 guest's {what} list has no count"))?;
    let ok = |l: &str| {
        let f: Vec<&str> = l.split(' ').collect();
        f.len() == fields
            && f[..fields - 1]
                .iter()
                .all(|a| a.len() == 16 && u64::from_str_radix(a, 16).is_ok())
            && !f[fields - 1].is_empty()
    };
    let lines: Vec<&str> = body.lines().filter(|l| ok(l)).collect();
    if lines.len() != want || want == 0 {
        bail!(
            "the arm64 guest listed {want} lines of {what}, {} arrived whole",
            lines.len()
        );
    }
    Ok(lines.join("\n") + "\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_parse() {
        let c = "[ 1.0] boot\nFCTRACE-TEXT ffff800080000000\nFCTRACE-SITES-BEGIN\n\
                 ffff800080010000 ffff800080010004 do_one\n\
                 ffff800080010100 ffff800080010108 do_two\n\
                 FCTRACE-SITES-END 2\nFCTRACE-SYMS-BEGIN\n\
                 ffff800080010000 do_one\nffff800080010100 do_two\n\
                 FCTRACE-SYMS-END 2\n";
        assert!(check_text(c).is_ok());
        assert_eq!(
            parse_list(c, "SITES", 3).unwrap(),
            "ffff800080010000 ffff800080010004 do_one\nffff800080010100 ffff800080010108 do_two\n"
        );
        assert_eq!(
            parse_list(c, "SYMS", 2).unwrap(),
            "ffff800080010000 do_one\nffff800080010100 do_two\n"
        );
        // A line cut by the console, a missing end, another _text: refused.
        assert!(parse_list(&c.replace("ffff800080010108 ", "ffff80008001"), "SITES", 3).is_err());
        assert!(parse_list(
            &c.replace("ffff800080010100 do_two", "ffff80008001"),
            "SYMS",
            2
        )
        .is_err());
        assert!(parse_list(&c.replace("FCTRACE-SITES-END 2\n", ""), "SITES", 3).is_err());
        assert!(parse_list(&c.replace("FCTRACE-SYMS-END 2\n", ""), "SYMS", 2).is_err());
        assert!(check_text(&c.replace("TEXT ffff800080000000", "TEXT ffff800081000000")).is_err());
    }
}
