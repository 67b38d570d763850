// SPDX-License-Identifier: GPL-2.0
//! Real machine code from the test kernel (tests/fixtures/functions.txt, see
//! the README there): decoded by linear sweep, cross-checked against iced-x86
//! and checked for known facts. Runs without a vmlinux.

mod common;

use fctrace_decode::{DecodeError, Flow, Insn};
use std::collections::HashMap;

struct Fixture {
    funcs: Vec<(String, u64, Vec<u8>)>,
    syms: HashMap<String, u64>,
}

fn parse_hex(s: &str) -> Vec<u8> {
    assert!(s.len().is_multiple_of(2));
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn addr(s: &str) -> u64 {
    u64::from_str_radix(s.trim_start_matches("0x"), 16).unwrap()
}

fn load() -> Fixture {
    let text = include_str!("fixtures/functions.txt");
    let mut f = Fixture {
        funcs: Vec::new(),
        syms: HashMap::new(),
    };
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let w: Vec<&str> = line.split_whitespace().collect();
        match w.as_slice() {
            ["sym", name, a] => {
                f.syms.insert(name.to_string(), addr(a));
            }
            [name, a, hex] => {
                f.syms.insert(name.to_string(), addr(a));
                f.funcs.push((name.to_string(), addr(a), parse_hex(hex)));
            }
            _ => panic!("bad fixture line {line:?}"),
        }
    }
    f
}

/// Cut fixtures (the extract used --max): may end with a Truncated instruction.
const CUT: [&str; 2] = ["x64_sys_call", "__x86_indirect_thunk_array"];

#[test]
fn fixtures_decode_like_iced_and_show_kernel_facts() {
    let fx = load();
    let mut dec: HashMap<&str, Vec<(u32, Insn)>> = HashMap::new();
    let mut total = 0;
    for (name, ip, bytes) in &fx.funcs {
        let s = common::sweep(name, bytes, *ip);
        assert!(s.mismatch.is_none(), "{}", s.mismatch.unwrap());
        match s.agreed_error {
            None => {}
            Some((off, DecodeError::Truncated)) if CUT.contains(&name.as_str()) => {
                assert!(bytes.len() - off as usize <= 15);
            }
            Some(e) => panic!("{name}: {e:?}"),
        }
        // Instructions tile the function exactly (except for the cut ones).
        let end = s
            .decoded
            .last()
            .map(|(o, i)| *o as usize + i.len as usize)
            .unwrap();
        assert!(
            end == bytes.len() || CUT.contains(&name.as_str()),
            "{name}: ends at {end:#x} of {:#x}",
            bytes.len()
        );
        total += s.insns;
        dec.insert(name, s.decoded);
    }
    println!(
        "fixtures: {} functions, {total} instructions agree with iced-x86",
        fx.funcs.len()
    );
    let flows = |n: &str| dec[n].iter().map(|(_, i)| i.flow).collect::<Vec<_>>();
    let ip = |n: &str| fx.syms[n];
    let thunk = ip("__x86_indirect_thunk_r11");

    // Every (address-taken, IBT) function starts with endbr64 and the fentry
    // nop5 (except asm entry code and the thunks).
    for n in [
        "vfs_read",
        "rw_verify_area",
        "__traceiter_x86_fpu_dropped",
        "events_sysfs_show",
        "map_vdso_once",
        "x64_sys_call",
    ] {
        let d = &dec[n];
        assert!(d[0].1.endbr64 && d[0].1.len == 4, "{n}");
        assert!(d[1].1.nop && d[1].1.len == 5, "{n}: fentry site");
    }
    assert!(dec["entry_SYSCALL_64"][0].1.endbr64);

    // vfs_read calls rw_verify_area and returns.
    assert!(flows("vfs_read").contains(&Flow::Call(ip("rw_verify_area"))));
    assert!(flows("vfs_read").contains(&Flow::Ret));
    // rw_verify_area is a leaf with several returns.
    let rva = flows("rw_verify_area");
    assert!(rva.iter().filter(|f| **f == Flow::Ret).count() >= 3);
    assert!(!rva.iter().any(|f| matches!(f, Flow::Call(_))));

    // Retpoline: the indirect call of a tracepoint iterator is a direct call
    // to __x86_indirect_thunk_r11 (after `mov (%rbx),%r11`).
    let tr = flows("__traceiter_x86_fpu_dropped");
    assert_eq!(tr.iter().filter(|f| **f == Flow::Call(thunk)).count(), 1);
    assert_eq!(tr.last(), Some(&Flow::Ret));
    // ... and an indirect tail call is `jmp __x86_indirect_thunk_r11`.
    assert_eq!(flows("events_sysfs_show").last(), Some(&Flow::Jmp(thunk)));
    // clang 14 emits no return thunk: plain `ret`, never `jmp __x86_return_thunk`.
    let rt = ip("__x86_return_thunk");
    assert!(dec.values().flatten().all(|(_, i)| i.flow != Flow::Jmp(rt)));

    // BUG() sites are ud2.
    assert!(flows("map_vdso_once").contains(&Flow::Ud));

    // entry_SYSCALL_64: swapgs, mov %cr3,%rsp (0f 20 dc), ..., sysretq (48 0f 07), int3.
    let e = &dec["entry_SYSCALL_64"];
    assert_eq!(e[1].1.len, 3); // swapgs
    assert!(e.iter().any(|(_, i)| i.flow == Flow::Ret), "sysretq");
    assert_eq!(e.last().unwrap().1.flow, Flow::Int3);

    // x64_sys_call: a compare tree of conditional jumps, each with a
    // condition code (no jrcxz/loop in compiled C).
    let sys_jccs: Vec<_> = flows("x64_sys_call")
        .into_iter()
        .filter(|f| matches!(f, Flow::Jcc(..)))
        .collect();
    assert!(sys_jccs.len() >= 10);
    assert!(sys_jccs.iter().all(|f| matches!(f, Flow::Jcc(_, Some(_)))));

    // The retpoline thunk body: call 1f; int3; 1: mov %rax,(%rsp); ret.
    let t = &dec["__x86_indirect_thunk_array"];
    let base = ip("__x86_indirect_thunk_array");
    assert_eq!(t[0].1.flow, Flow::Call(base + 6));
    assert_eq!(t[1].1.flow, Flow::Int3);
    assert_eq!(t[3].1.flow, Flow::Ret);
    assert!(
        t[4].1.nop && t[4].1.len == 10,
        "cs nopw 0x0(%rax,%rax,1) padding"
    );
}
