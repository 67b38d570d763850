// SPDX-License-Identifier: GPL-2.0

//! The BTF reader on the distro test kernel's BTF (tests/data/README: how the files were
//! made), against bpftool's decoding of the same bytes.

use fctrace_core::btf::{Btf, Class, Error, Kind, Raw};

fn vmlinux_btf() -> Vec<u8> {
    let xz = include_bytes!("data/distro-6.12.117.btf.xz");
    let mut out = Vec::new();
    lzma_rs::xz_decompress(&mut &xz[..], &mut out).expect("the fixture decompresses");
    out
}

fn index(raw: &Raw<'_>) -> Vec<u32> {
    let mut offs = vec![0u32; raw.count().expect("types walk")];
    raw.index(&mut offs).expect("index");
    offs
}

/// Runs `f` on the indexed vmlinux BTF of the fixture.
fn with_vmlinux(f: impl FnOnce(&Btf<'_>)) {
    let data = vmlinux_btf();
    let raw = Raw::parse(&data).unwrap();
    let offs = index(&raw);
    f(&Btf::new(raw, &offs, None));
}

fn sig(btf: &Btf<'_>, name: &str) -> String {
    let f = btf
        .find_func(name)
        .unwrap_or_else(|| panic!("no function {name}"));
    let mut s = String::new();
    btf.write_signature(&mut s, &f).unwrap();
    s
}

fn param_class(btf: &Btf<'_>, func: &str, i: usize) -> Class {
    let f = btf.find_func(func).unwrap();
    let proto = btf.get(f.type_id()).unwrap();
    let p = proto.params().nth(i).unwrap();
    btf.class(p.type_id).unwrap()
}

fn ret_class(btf: &Btf<'_>, func: &str) -> Class {
    let f = btf.find_func(func).unwrap();
    btf.class(btf.get(f.type_id()).unwrap().type_id()).unwrap()
}

/// Every function bpftool listed (every 80th by name and a few named ones) has the same
/// signature here, and the counts of types and functions agree.
#[test]
fn signatures_agree_with_bpftool() {
    with_vmlinux(|btf| {
        let expected = include_str!("data/distro-6.12.117-funcs.txt");
        let mut lines = expected.lines();
        let head = lines.next().unwrap();
        assert_eq!(
            head,
            format!("# types {} functions {}", btf.ids().len(), btf.func_count())
        );
        let mut fidx = vec![0u32; btf.func_count()];
        let n = btf.func_index(&mut fidx);
        assert_eq!(n, fidx.len());
        let mut checked = 0;
        for line in lines {
            let (id, want) = line.split_once(' ').unwrap();
            let f = btf.get(id.parse().unwrap()).unwrap();
            assert_eq!(f.kind, Kind::Func);
            let name = &want[..want.find('(').unwrap()];
            // by name: this function, or another of the same name
            let g = btf
                .find_func_in(&fidx, name)
                .unwrap_or_else(|| panic!("{name} not found"));
            assert_eq!(btf.type_name(&g), name);
            assert!(g.id <= f.id, "{name}: the index finds a later one first");
            let mut got = String::new();
            btf.write_signature(&mut got, &f).unwrap();
            assert_eq!(got, want);
            checked += 1;
        }
        assert!(checked > 400, "only {checked} functions checked");
    });
}

/// What `args` needs of the functions its tests and documentation use.
#[test]
fn classes_of_well_known_parameters() {
    with_vmlinux(|btf| {
        assert_eq!(
            sig(&btf, "vfs_read"),
            "vfs_read(struct file * file, char * buf, size_t count, loff_t * pos) -> ssize_t"
        );
        assert_eq!(
            param_class(&btf, "vfs_read", 0),
            Class::Ptr { string: false }
        );
        // a buffer the function fills (char *) is no string; a file name (const char *) is
        assert_eq!(
            param_class(&btf, "vfs_read", 1),
            Class::Ptr { string: false }
        );
        assert_eq!(
            param_class(&btf, "vfs_read", 2),
            Class::Int {
                size: 8,
                signed: false
            }
        );
        assert_eq!(
            ret_class(&btf, "vfs_read"),
            Class::Int {
                size: 8,
                signed: true
            }
        );
        // do_sys_openat2(int dfd, const char *filename, struct open_how *how)
        assert_eq!(
            param_class(&btf, "do_sys_openat2", 0),
            Class::Int {
                size: 4,
                signed: true
            }
        );
        assert_eq!(
            param_class(&btf, "do_sys_openat2", 1),
            Class::Ptr { string: true }
        );
        assert_eq!(
            ret_class(&btf, "filp_close"),
            Class::Int {
                size: 4,
                signed: true
            }
        );
        assert_eq!(ret_class(&btf, "fput"), Class::Void);
        // a bool and an enum
        let b = btf.find_func("capable").unwrap();
        assert_eq!(
            btf.class(btf.get(b.type_id()).unwrap().type_id()).unwrap(),
            Class::Bool
        );
        // enum pid_type: PIDTYPE_PID is 0, PIDTYPE_TGID 1
        let f = btf.find_func("pid_task").unwrap();
        let proto = btf.get(f.type_id()).unwrap();
        let p = proto.params().nth(1).unwrap();
        let Class::Enum { id, size, .. } = btf.class(p.type_id).unwrap() else {
            panic!("pid_task's type is not an enum");
        };
        assert_eq!(size, 4);
        assert_eq!(btf.enum_name(id, 0), Some("PIDTYPE_PID"));
        assert_eq!(btf.enum_name(id, 1), Some("PIDTYPE_TGID"));
        assert_eq!(btf.enum_name(id, 1000), None);
        // a variadic function
        assert!(
            sig(&btf, "_printk").ends_with(", ...) -> int"),
            "{}",
            sig(&btf, "_printk")
        );
    });
}

/// Bad bytes give errors, never a panic: every truncation of the data, and every byte
/// of the first types' records flipped.
#[test]
fn bad_bytes_are_errors() {
    let data = vmlinux_btf();
    assert_eq!(Raw::parse(&data[..10]).unwrap_err(), Error::Short);
    let mut bad = data.clone();
    bad[0] = 0;
    assert_eq!(Raw::parse(&bad).unwrap_err(), Error::Magic);
    // cut inside the type section: the walk says where
    let raw = Raw::parse(&data).unwrap();
    let n = raw.count().unwrap();
    assert!(n > 70000);
    for cut in [25usize, 100, 1000, 4096, 100_000] {
        let mut d = data.clone();
        // shrink type_len
        let type_len = u32::from_le_bytes(d[12..16].try_into().unwrap()) as usize;
        let new_len = cut.min(type_len) as u32;
        d[12..16].copy_from_slice(&new_len.to_le_bytes());
        let raw = Raw::parse(&d).unwrap();
        match raw.count() {
            Ok(k) => assert!(k < n),
            Err(Error::Truncated(_)) => {}
            Err(e) => panic!("cut at {cut}: {e:?}"),
        }
    }
    // an index of the wrong length
    let mut short = vec![0u32; n - 1];
    assert_eq!(raw.index(&mut short).unwrap_err(), Error::Index);
    // flipped bytes in the first records: lookups and names never panic
    for i in (0..512).step_by(4) {
        let mut d = data.clone();
        let hdr_len = u32::from_le_bytes(d[4..8].try_into().unwrap()) as usize;
        d[hdr_len + i] ^= 0xff;
        let Ok(raw) = Raw::parse(&d) else { continue };
        let Ok(count) = raw.count() else { continue };
        let mut offs = vec![0u32; count];
        raw.index(&mut offs).unwrap();
        let btf = Btf::new(raw, &offs, None);
        for id in 0..64 {
            if let Ok(t) = btf.get(id) {
                let _ = btf.type_name(&t);
                let _ = btf.class(id);
                let mut s = String::new();
                let _ = btf.write_type(&mut s, id);
            }
        }
    }
}

/// Split BTF (a module's on top of vmlinux's): ids and strings continue the base's.
#[test]
fn split_btf_continues_the_base() {
    let data = vmlinux_btf();
    let raw = Raw::parse(&data).unwrap();
    let offs = index(&raw);
    let base = Btf::new(raw, &offs, None);
    let file = base.find_func("vfs_read").unwrap();
    let base_types = offs.len() as u32;
    let base_strs = u32::from_le_bytes(data[20..24].try_into().unwrap());
    // A module's BTF: a pointer to vmlinux's `struct file`-taking prototype and a
    // function "fct_mod_read" with that prototype; its name is in the module's strings.
    let mut types = Vec::new();
    let ptr_id = base_types + 1;
    for w in [0u32, 2 << 24, file.type_id()] {
        types.extend_from_slice(&w.to_le_bytes());
    }
    for w in [base_strs + 1, 12 << 24, file.type_id()] {
        types.extend_from_slice(&w.to_le_bytes());
    }
    let strs = b"\0fct_mod_read\0";
    let mut d = Vec::new();
    d.extend_from_slice(&0xeb9fu16.to_le_bytes());
    d.extend_from_slice(&[1, 0]);
    for w in [
        24u32,
        0,
        types.len() as u32,
        types.len() as u32,
        strs.len() as u32,
    ] {
        d.extend_from_slice(&w.to_le_bytes());
    }
    d.extend_from_slice(&types);
    d.extend_from_slice(strs);
    let raw = Raw::parse(&d).unwrap();
    let moffs = index(&raw);
    let m = Btf::new(raw, &moffs, Some(&base));
    assert_eq!(m.ids(), ptr_id..ptr_id + 2);
    assert_eq!(m.get(ptr_id).unwrap().kind, Kind::Ptr);
    let f = m.find_func("fct_mod_read").unwrap();
    let mut s = String::new();
    m.write_signature(&mut s, &f).unwrap();
    assert_eq!(
        s,
        "fct_mod_read(struct file * file, char * buf, size_t count, loff_t * pos) -> ssize_t"
    );
    // vmlinux's types are reachable through the module's
    assert_eq!(m.get(file.id).unwrap().kind, Kind::Func);
}

/// A real module's split BTF (the selftests' fct_testmod.ko, built against the same
/// distro kernel): every function's signature agrees with bpftool's decoding of it on
/// that base, and the `args` option writes a call of it with its string and its enum.
#[test]
fn a_modules_split_btf() {
    let data = vmlinux_btf();
    let raw = Raw::parse(&data).unwrap();
    let offs = index(&raw);
    let base = Btf::new(raw, &offs, None);
    let mdata = include_bytes!("data/distro-6.12.117-fct_testmod.btf");
    let mraw = Raw::parse(mdata).unwrap();
    let moffs = index(&mraw);
    let m = Btf::new(mraw, &moffs, Some(&base));
    let expected = include_str!("data/distro-6.12.117-fct_testmod-funcs.txt");
    let mut lines = expected.lines();
    assert_eq!(
        lines.next().unwrap(),
        format!("# types {} functions {}", m.ids().len(), m.func_count())
    );
    let mut fidx = vec![0u32; m.func_count()];
    assert_eq!(m.func_index(&mut fidx), fidx.len());
    let mut checked = 0;
    for line in lines {
        let (id, want) = line.split_once(' ').unwrap();
        let name = &want[..want.find('(').unwrap()];
        let f = m.find_func_in(&fidx, name).unwrap();
        assert_eq!(f.id, id.parse::<u32>().unwrap());
        let mut got = String::new();
        m.write_signature(&mut got, &f).unwrap();
        assert_eq!(got, want);
        checked += 1;
    }
    assert_eq!(checked, 4);
    // Not in the module's BTF: vmlinux's functions are the base's.
    assert!(m.find_func_in(&fidx, "vfs_read").is_none());
    // int fct_testmod_lookup(const char *name, unsigned int len, enum fct_testmod_match how)
    let f = m.find_func_in(&fidx, "fct_testmod_lookup").unwrap();
    let spec = fctrace_core::args::spec(&m, &f);
    assert_eq!(fctrace_core::args::spec_regs(spec), 3);
    assert_eq!(fctrace_core::args::spec_strings(spec), 0b1);
    let mut a = fctrace_core::args::ArgArea::EMPTY;
    a.regs[..3].copy_from_slice(&[0xffff_c900_0001_0000, 7, 1]);
    a.nregs = 3;
    a.str_reg[0] = 0;
    a.str_len[0] = 7;
    a.strs[0][..7].copy_from_slice(b"fctrace");
    let mut s = String::new();
    fctrace_core::args::write_args(
        &mut s,
        &m,
        &f,
        &a,
        fctrace_core::args::ValueOpts { ptr_hash: None },
    )
    .unwrap();
    assert_eq!(s, "(name=\"fctrace\", len=7, how=FCT_TESTMOD_PREFIX)");
    let mut r = String::new();
    fctrace_core::args::write_ret(
        &mut r,
        &m,
        &f,
        (-2i64) as u64,
        fctrace_core::args::ValueOpts { ptr_hash: None },
    )
    .unwrap();
    assert_eq!(r, "ret=-2 (ENOENT)");
}
