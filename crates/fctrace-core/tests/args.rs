// SPDX-License-Identifier: GPL-2.0

//! The `args` option's formatting on the distro kernel's real BTF (the fixture of
//! `tests/btf.rs`): what a reader writes for calls and returns of real functions.

use fctrace_core::args::{
    self, ArgArea, ValueOpts, SPEC_KNOWN, STR_CUT, STR_UNREADABLE, STR_WHOLE,
};
use fctrace_core::btf::{Btf, Class, Raw};
use std::io::Read;

fn vmlinux_btf() -> Vec<u8> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/distro-6.12.117.btf.xz"
    );
    let mut xz = Vec::new();
    std::fs::File::open(path)
        .unwrap()
        .read_to_end(&mut xz)
        .unwrap();
    let mut out = Vec::new();
    lzma_rs::xz_decompress(&mut &xz[..], &mut out).unwrap();
    out
}

fn with_vmlinux(f: impl FnOnce(&Btf<'_>)) {
    let data = vmlinux_btf();
    let raw = Raw::parse(&data).unwrap();
    let mut offs = vec![0u32; raw.count().unwrap()];
    raw.index(&mut offs).unwrap();
    f(&Btf::new(raw, &offs, None));
}

const RAW: ValueOpts = ValueOpts { ptr_hash: None };

fn call(btf: &Btf<'_>, name: &str, a: &ArgArea, opts: ValueOpts) -> String {
    let f = btf.find_func(name).unwrap_or_else(|| panic!("no {name}"));
    let mut s = String::new();
    args::write_args(&mut s, btf, &f, a, opts).unwrap();
    format!("{name}{s}")
}

fn ret(btf: &Btf<'_>, name: &str, v: u64) -> String {
    let f = btf.find_func(name).unwrap();
    let mut s = String::new();
    if args::returns_value(btf, &f) {
        args::write_ret(&mut s, btf, &f, v, RAW).unwrap();
    }
    s
}

fn area(regs: &[u64]) -> ArgArea {
    let mut a = ArgArea::EMPTY;
    a.regs[..regs.len()].copy_from_slice(regs);
    a.nregs = regs.len() as u8;
    a
}

fn with_string(mut a: ArgArea, reg: u8, s: &[u8], state: u8) -> ArgArea {
    a.str_reg[0] = reg;
    a.str_len[0] = s.len() as u8;
    a.str_state[0] = state;
    a.strs[0][..s.len()].copy_from_slice(s);
    a
}

#[test]
fn specs_of_real_functions() {
    with_vmlinux(|btf| {
        let spec = |n: &str| args::spec(btf, &btf.find_func(n).unwrap());
        // long do_sys_openat2(int dfd, const char *filename, struct open_how *how)
        let s = spec("do_sys_openat2");
        assert_eq!(s & SPEC_KNOWN, SPEC_KNOWN);
        assert_eq!(args::spec_regs(s), 3);
        assert_eq!(args::spec_strings(s), 0b10);
        // ssize_t vfs_read(struct file *, char *buf, size_t, loff_t *): a buffer, not a string
        let s = spec("vfs_read");
        assert_eq!((args::spec_regs(s), args::spec_strings(s)), (4, 0));
        // void schedule(void)
        assert_eq!(args::spec_regs(spec("schedule")), 0);
        // Only strings by name are copied, never a buffer or key material: ksys_write(
        // unsigned int fd, const char *buf, size_t count) carries a write()'s user data
        // (a const char *, not named as a string); crypto_skcipher_setkey(struct
        // crypto_skcipher *, const u8 *key, unsigned int) and crypto_aead_setkey() a key
        // (bytes, not char).
        let class = |f: &str, reg: usize| {
            let p = btf.find_func(f).unwrap();
            let proto = btf.get(p.type_id()).unwrap();
            btf.class(proto.params().nth(reg).unwrap().type_id).unwrap()
        };
        assert_eq!(class("ksys_write", 1), Class::Ptr { string: true });
        for f in ["crypto_skcipher_setkey", "crypto_aead_setkey"] {
            assert_eq!(class(f, 1), Class::Ptr { string: false }, "{f}");
        }
        for f in ["ksys_write", "crypto_skcipher_setkey", "crypto_aead_setkey"] {
            assert_eq!(args::spec_strings(spec(f)), 0, "{f}: a string copied");
        }
        // long strncpy_from_user(char *dst, const char *src, long count): a string
        assert_eq!(args::spec_strings(spec("strncpy_from_user")), 0b10);
        // kern_path(const char *name, unsigned int flags, struct path *path): a string
        assert_eq!(args::spec_strings(spec("kern_path")), 0b1);
    });
}

#[test]
fn calls_with_arguments() {
    with_vmlinux(|btf| {
        let a = with_string(
            area(&[(-100i64) as u64, 0x7ffd_0000_1000, 0xffff_c900_0047_bd58]),
            1,
            b"/tmp/x",
            0,
        );
        assert_eq!(
            call(btf, "do_sys_openat2", &a, RAW),
            "do_sys_openat2(dfd=-100, filename=\"/tmp/x\", how=0xffffc9000047bd58)"
        );
        let a = area(&[
            0xffff_8880_03a1_c000,
            0x7ffc_1a2b_3c40,
            4096,
            0xffff_c900_0047_bf08,
        ]);
        assert_eq!(
            call(btf, "vfs_read", &a, RAW),
            "vfs_read(file=0xffff888003a1c000, buf=0x7ffc1a2b3c40, count=4096, pos=0xffffc9000047bf08)"
        );
        // A reader who may not see kernel addresses: hashed; user addresses stay.
        let hashed = call(
            btf,
            "vfs_read",
            &a,
            ValueOpts {
                ptr_hash: Some(|v| (v >> 12) as u32),
            },
        );
        assert!(hashed.starts_with("vfs_read(file=ptr:"), "{hashed}");
        assert!(hashed.contains("buf=0x7ffc1a2b3c40"), "{hashed}");
        assert!(!hashed.contains("ffff8880"), "{hashed}");
    });
}

#[test]
fn strings_cut_and_unreadable() {
    with_vmlinux(|btf| {
        let long = [b'a'; 80];
        let a = with_string(area(&[0, 0x7ffd_0000_1000, 0]), 1, &long, STR_CUT);
        let s = call(btf, "do_sys_openat2", &a, RAW);
        assert!(
            s.contains(&format!("filename=\"{}\"...", "a".repeat(80))),
            "{s}"
        );
        let a = with_string(area(&[0, 0x10, 0]), 1, b"", STR_UNREADABLE);
        let s = call(btf, "do_sys_openat2", &a, RAW);
        assert!(s.contains("filename=0x10 (unreadable)"), "{s}");
        // A NULL string pointer is a pointer.
        let a = area(&[0, 0, 0]);
        assert!(call(btf, "do_sys_openat2", &a, RAW).contains("filename=0x0"));
    });
}

#[test]
fn strings_read_at_the_return() {
    with_vmlinux(|btf| {
        // The first openat() of a freshly executed program: its path, a literal in a
        // page of the binary not faulted in yet, unreadable at the call.
        let early = with_string(area(&[0xffff_ff9c, 0x5b_050f, 0]), 1, b"", STR_UNREADABLE);
        let late = with_string(ArgArea::EMPTY, 1, b"/etc/passwd", STR_WHOLE);
        // A call drawn as one line (nothing recorded inside it): the string in its place.
        let s = call(btf, "do_sys_openat2", &early.with_late(&late), RAW);
        assert!(
            s.starts_with(
                "do_sys_openat2(dfd=-100, filename=\"/etc/passwd\" (read at return), how="
            ),
            "{s}"
        );
        // A call drawn as call and return: on the closing line, by its name.
        let f = btf.find_func("do_sys_openat2").unwrap();
        let mut out = String::new();
        args::write_late(&mut out, btf, &f, &late).unwrap();
        assert_eq!(out, "filename=\"/etc/passwd\" (read at return)");
        // Still unreadable at the return: nothing to add.
        let none = with_string(ArgArea::EMPTY, 1, b"", STR_UNREADABLE);
        let mut out = String::new();
        args::write_late(&mut out, btf, &f, &none).unwrap();
        assert_eq!(out, "");
        let s = call(btf, "do_sys_openat2", &early.with_late(&none), RAW);
        assert!(s.contains("filename=0x5b050f (unreadable)"), "{s}");
    });
}

#[test]
fn booleans_enums_flags_and_missing_registers() {
    with_vmlinux(|btf| {
        // void *__kmalloc_noprof(size_t size, gfp_t flags)
        let s = call(btf, "__kmalloc_noprof", &area(&[64, 0xcc0]), RAW);
        assert_eq!(s, "__kmalloc_noprof(size=64, flags=0xcc0)");
        // Registers not stored: `?`.
        let s = call(btf, "__kmalloc_noprof", &area(&[64]), RAW);
        assert_eq!(s, "__kmalloc_noprof(size=64, flags=?)");
        // bool try_to_freeze_unsafe... : a bool parameter by name
        let f = btf.find_func("lru_add_drain_all").unwrap();
        let mut out = String::new();
        args::write_args(&mut out, btf, &f, &area(&[]), RAW).unwrap();
        assert_eq!(out, "()");
    });
}

#[test]
fn anonymous_structures_by_their_typedef() {
    with_vmlinux(|btf| {
        // vfsuid_t make_vfsuid(struct mnt_idmap *, struct user_namespace *, kuid_t kuid):
        // kuid_t and vfsuid_t are typedefs of anonymous structures, passed in registers.
        let s = call(btf, "make_vfsuid", &area(&[0x10, 0x20, 1000]), RAW);
        assert_eq!(
            s,
            "make_vfsuid(idmap=0x10, fs_userns=0x20, kuid=(kuid_t)[0x3e8])"
        );
        assert_eq!(ret(btf, "make_vfsuid", 1000), "ret=(vfsuid_t)[0x3e8]");
    });
}

#[test]
fn typed_returns() {
    with_vmlinux(|btf| {
        // int: errno by name
        assert_eq!(ret(btf, "do_mkdirat", (-2i64) as u64), "ret=-2 (ENOENT)");
        assert_eq!(ret(btf, "do_mkdirat", 0), "ret=0");
        // long
        assert_eq!(ret(btf, "do_sys_openat2", 3), "ret=3");
        // void: nothing (the selftest looks for __fput_sync, which close() calls)
        assert_eq!(ret(btf, "schedule", 0x1234), "");
        assert_eq!(ret(btf, "__fput_sync", 0x1234), "");
        assert_eq!(
            call(btf, "__fput_sync", &area(&[0xffff_8880_0000_1000]), RAW),
            "__fput_sync(file=0xffff888000001000)"
        );
        // a pointer, an error pointer
        assert_eq!(
            ret(btf, "__kmalloc_noprof", 0xffff_8880_0123_4500),
            "ret=0xffff888001234500"
        );
        assert_eq!(ret(btf, "getname", (-12i64) as u64), "ret=-12 (ENOMEM)");
        // bool
        let b = ret(btf, "capable", 1);
        assert_eq!(b, "ret=true");
        // an int cut to its size: 0xffffffff is -1 for an int
        assert_eq!(ret(btf, "do_mkdirat", 0xffff_ffff), "ret=-1 (EPERM)");
    });
}

/// A reader who may not see kernel addresses sees none, whatever their C type: an
/// `unsigned long` that holds one (`get_zeroed_page()`'s return, `free_pages()`'s
/// argument), a `long` return, a structure passed by value. Numbers stay numbers: small
/// negatives, sizes, errnos.
#[test]
fn kernel_addresses_hidden_whatever_their_type() {
    with_vmlinux(|btf| {
        let hash = ValueOpts {
            ptr_hash: Some(|v| (v >> 12) as u32),
        };
        let typed_ret = |name: &str, v: u64, opts: ValueOpts| {
            let f = btf.find_func(name).unwrap();
            let mut s = String::new();
            args::write_ret(&mut s, btf, &f, v, opts).unwrap();
            s
        };
        const A: u64 = 0xffff_8880_04a0_c000;
        // unsigned long get_zeroed_page_noprof(gfp_t gfp_mask)
        assert_eq!(
            typed_ret("get_zeroed_page_noprof", A, RAW),
            format!("ret={}", A)
        );
        let h = typed_ret("get_zeroed_page_noprof", A, hash);
        assert!(h.starts_with("ret=ptr:"), "{h}");
        // void free_pages(unsigned long addr, unsigned int order)
        let c = call(btf, "free_pages", &area(&[A, 2]), hash);
        assert!(c.starts_with("free_pages(addr=ptr:"), "{c}");
        assert!(c.ends_with(", order=2)"), "{c}");
        assert!(
            !c.contains("ffff8880") && !c.contains(&A.to_string()),
            "{c}"
        );
        // long: an errno, a small negative number and a size stay as they are
        assert_eq!(
            typed_ret("ksys_write", (-9i64) as u64, hash),
            "ret=-9 (EBADF)"
        );
        assert_eq!(
            typed_ret("ksys_write", (-5000i64) as u64, hash),
            "ret=-5000"
        );
        assert_eq!(typed_ret("ksys_write", 4096, hash), "ret=4096");
        let h = typed_ret("ksys_write", A, hash);
        assert!(h.starts_with("ret=ptr:"), "{h}");
        // 5-level paging (x86-64 `-cpu max`): the direct map lies at 0xff11... and
        // up, randomized; a struct file of Debian's 7.3.4 there
        const A5: u64 = 0xff26_e1e3_02b8_73c0;
        let h = typed_ret("get_zeroed_page_noprof", A5, hash);
        assert!(h.starts_with("ret=ptr:"), "{h}");
        let c = call(btf, "free_pages", &area(&[A5, 2]), hash);
        assert!(
            c.starts_with("free_pages(addr=ptr:") && !c.contains(&A5.to_string()),
            "{c}"
        );
        // A structure by value: kuid_t make_kuid(struct user_namespace *, uid_t) returns
        // one register; a struct holding an address is hashed word by word.
        let f = btf.find_func("make_kuid").unwrap();
        let mut s = String::new();
        args::write_ret(&mut s, btf, &f, A, hash).unwrap();
        assert!(s.contains("[ptr:"), "{s}");
        assert!(!s.contains("ffff8880"), "{s}");
    });
}
