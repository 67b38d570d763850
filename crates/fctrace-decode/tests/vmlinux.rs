// SPDX-License-Identifier: GPL-2.0
//! Decodes every function of each built test kernel's vmlinux (the default,
//! debug and distro profiles: clang and GCC code) by linear sweep and
//! cross-checks each instruction against iced-x86.
//!
//! The ELF comes from `FCTRACE_VMLINUX`, else every
//! `${XDG_CACHE_HOME:-$HOME/.cache}/fctrace/build-*/vmlinux`; without one the
//! test prints `SKIP: no vmlinux (set FCTRACE_VMLINUX)` and passes.

mod common;

use fctrace_decode::{Flow, Insn};
use object::{Object, ObjectSection};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::Path;

#[test]
fn every_vmlinux_function_matches_iced() {
    common::each_vmlinux(check_vmlinux);
}

fn check_vmlinux(path: &Path) {
    let data = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let elf = object::File::parse(&*data).expect("parse vmlinux ELF");

    let common::CodeFuncs {
        funcs,
        nfunc,
        by_name,
    } = common::code_functions(&elf, path);

    let mut insns = 0u64;
    let mut mismatches = Vec::new();
    let mut agreed: Vec<String> = Vec::new();
    let mut decoded: HashMap<&str, Vec<(u32, Insn)>> = HashMap::new();
    let mut flows: BTreeMap<&str, u64> = BTreeMap::new();
    for f in &funcs {
        let s = common::sweep(f.name, f.bytes, f.addr);
        insns += s.insns;
        if let Some(m) = s.mismatch {
            mismatches.push(m);
        }
        if let Some((off, e)) = s.agreed_error {
            agreed.push(format!(
                "{}+{off:#x} {e:?} [{}]",
                f.name,
                common::hex(
                    &f.bytes[off as usize..][..f.bytes.len().saturating_sub(off as usize).min(8)]
                )
            ));
        }
        for (_, i) in &s.decoded {
            let k = match i.flow {
                Flow::Next => "next",
                Flow::Call(_) => "call",
                Flow::CallReg(_) => "call *reg",
                Flow::CallMem(_) => "call *mem",
                Flow::Jmp(_) => "jmp",
                Flow::JmpReg(_) => "jmp *reg",
                Flow::JmpMem(_) => "jmp *mem",
                Flow::Jcc(_, Some(_)) => "jcc",
                Flow::Jcc(_, None) => "jrcxz/loop/xbegin",
                Flow::Ret => "ret",
                Flow::Int3 => "int3",
                Flow::Ud => "ud",
            };
            *flows.entry(k).or_default() += 1;
        }
        decoded.insert(f.name, s.decoded);
    }

    println!("vmlinux: {}", path.display());
    println!("flow kinds: {flows:?}");
    for a in &agreed {
        println!("both decoders stop (data in a code symbol): {a}");
    }
    for m in mismatches.iter().take(50) {
        println!("MISMATCH {m}");
    }
    println!(
        "checked {} functions ({} FUNC + {} sized NOTYPE code symbols), {} instructions against iced-x86: {} mismatches, {} functions ending in agreed undecodable bytes",
        funcs.len(),
        nfunc,
        funcs.len() - nfunc,
        insns,
        mismatches.len(),
        agreed.len()
    );
    assert!(
        mismatches.is_empty(),
        "{} mismatches against iced-x86",
        mismatches.len()
    );
    assert!(
        funcs.len() > 5_000 && insns > 300_000,
        "suspiciously small vmlinux"
    );
    // Kernel text is code: at most a handful of asm symbols may contain data.
    assert!(agreed.len() <= 20, "too many undecodable functions");

    // The facts below describe the default test kernel, built by clang (LLVM=1): plain
    // `ret`, `call __fentry__` turned into a nop by objtool, clang's inlining. A GCC-built
    // kernel (the distro profile) returns through `jmp __x86_return_thunk`, keeps `call
    // __fentry__` in its image and clones functions (`rw_verify_area.constprop.0`); its
    // decoding is checked above, its facts are not these.
    let built_by_gcc = elf
        .section_by_name(".comment")
        .and_then(|c| c.data().ok())
        .is_some_and(|c| c.windows(5).any(|w| w == b"GCC: "));
    if built_by_gcc {
        gcc_facts(&decoded, &by_name);
        return;
    }
    kernel_facts(&funcs, &decoded, &by_name);
}

/// What a GCC-built kernel with a distribution's mitigations (the distro profile) looks
/// like in the file, before boot-time patching: functions return through `jmp
/// __x86_return_thunk` (a plain `ret` is rare: code that must not use the thunk), and
/// `call __fentry__` stays in the image after `endbr64` until ftrace turns it into a nop.
fn gcc_facts(decoded: &HashMap<&str, Vec<(u32, Insn)>>, by_name: &HashMap<&str, u64>) {
    let get = |n: &str| decoded.get(n).unwrap_or_else(|| panic!("no function {n}"));
    let Some(&rt) = by_name.get("__x86_return_thunk") else {
        println!("a GCC-built kernel without return thunks: its facts are not checked");
        return;
    };
    let (mut thunk_rets, mut rets) = (0u64, 0u64);
    for (_, i) in decoded.values().flatten() {
        match i.flow {
            Flow::Jmp(t) if t == rt => thunk_rets += 1,
            Flow::Ret => rets += 1,
            _ => {}
        }
    }
    println!("GCC: {thunk_rets} `jmp __x86_return_thunk`, {rets} plain `ret`");
    assert!(
        thunk_rets > 10_000 && rets * 100 < thunk_rets,
        "a GCC-built kernel with MITIGATION_RETHUNK returns through the thunk"
    );
    let fentry = by_name["__fentry__"];
    let vfs_read = get("vfs_read");
    assert!(
        vfs_read[0].1.endbr64 && vfs_read[1].0 == 4 && vfs_read[1].1.flow == Flow::Call(fentry),
        "vfs_read: no `call __fentry__` after endbr64: {:?}",
        &vfs_read[..2]
    );
    assert!(
        vfs_read.iter().any(|(_, i)| i.flow == Flow::Jmp(rt)),
        "vfs_read does not return through __x86_return_thunk"
    );
}

fn kernel_facts(
    funcs: &[common::Func],
    decoded: &HashMap<&str, Vec<(u32, Insn)>>,
    by_name: &HashMap<&str, u64>,
) {
    let get = |n: &str| decoded.get(n).unwrap_or_else(|| panic!("no function {n}"));

    // vfs_read calls rw_verify_area directly and returns.
    let vfs_read = get("vfs_read");
    let rwv = by_name["rw_verify_area"];
    assert!(
        vfs_read.iter().any(|(_, i)| i.flow == Flow::Call(rwv)),
        "vfs_read does not call rw_verify_area"
    );
    assert!(
        vfs_read.iter().any(|(_, i)| i.flow == Flow::Ret),
        "vfs_read has no ret"
    );
    // Exported / address-taken functions start with endbr64 (CONFIG_X86_KERNEL_IBT=y).
    for n in [
        "vfs_read",
        "rw_verify_area",
        "x64_sys_call",
        "kmalloc_trace_noprof",
        "schedule",
    ] {
        if let Some(d) = decoded.get(n) {
            assert!(d[0].1.endbr64, "{n} does not start with endbr64");
        }
    }
    // The ftrace site follows endbr64 in traced functions: objtool --mcount
    // already turned `call __fentry__` into a 5-byte nop in the static image.
    let i1 = vfs_read[1].1;
    assert!(
        i1.nop && i1.len == 5 && vfs_read[1].0 == 4,
        "vfs_read: no nop5 fentry site after endbr64: {i1:?}"
    );

    let endbr = funcs
        .iter()
        .filter(|f| get(f.name).first().is_some_and(|(_, i)| i.endbr64))
        .count();
    println!("{endbr} of {} functions start with endbr64", funcs.len());

    // __pfx_ symbols (CONFIG_CALL_PADDING): 16 one-byte nops before each function.
    let pfx: Vec<_> = funcs
        .iter()
        .filter(|f| f.name.starts_with("__pfx_"))
        .collect();
    for f in &pfx {
        assert!(
            get(f.name).iter().all(|(_, i)| i.nop),
            "{} is not all nops",
            f.name
        );
    }
    println!("{} __pfx_ padding symbols, all nops", pfx.len());

    // Retpolines: register-indirect calls are `call __x86_indirect_thunk_<reg>`
    // in the static image (rewritten by alternatives at boot).
    let thunks: HashMap<u64, &str> = by_name
        .iter()
        .filter(|(n, _)| {
            n.starts_with("__x86_indirect_thunk_") || n.starts_with("__x86_indirect_call_thunk_")
        })
        .map(|(n, a)| (*a, *n))
        .collect();
    assert!(thunks.len() >= 15, "retpoline thunks missing: {thunks:?}");
    let (mut thunk_calls, mut thunk_jmps, mut indirect_calls) = (0u64, 0u64, 0u64);
    let mut per_thunk: BTreeMap<&str, u64> = BTreeMap::new();
    for d in decoded.values() {
        for (_, i) in d {
            match i.flow {
                Flow::Call(t) if thunks.contains_key(&t) => {
                    thunk_calls += 1;
                    *per_thunk.entry(thunks[&t]).or_default() += 1;
                }
                Flow::Jmp(t) if thunks.contains_key(&t) => thunk_jmps += 1,
                Flow::CallReg(_) | Flow::CallMem(_) => indirect_calls += 1,
                _ => {}
            }
        }
    }
    println!(
        "retpoline: {thunk_calls} calls and {thunk_jmps} tail-jumps to __x86_indirect_thunk_*; {indirect_calls} plain indirect calls"
    );
    println!("calls per thunk: {per_thunk:?}");
    assert!(thunk_calls > 1000, "expected many retpoline calls");
    assert!(
        per_thunk
            .get("__x86_indirect_thunk_r11")
            .copied()
            .unwrap_or(0)
            > 100
    );

    // clang 14: no return thunk, functions return with a plain ret.
    if let Some(&rt) = by_name.get("__x86_return_thunk") {
        let jmps = decoded
            .values()
            .flatten()
            .filter(|(_, i)| i.flow == Flow::Jmp(rt))
            .count();
        println!("jmp __x86_return_thunk: {jmps}");
    }

    // x64_sys_call dispatches to the syscall handlers through a compare tree
    // (-fno-jump-tables under retpoline) ending in direct (mostly conditional)
    // tail jumps to the handlers.
    let sys: HashSet<u64> = by_name
        .iter()
        .filter(|(n, _)| n.starts_with("__x64_sys_"))
        .map(|(_, a)| *a)
        .collect();
    let (mut calls, mut jmps) = (0, 0);
    for (_, i) in get("x64_sys_call") {
        match i.flow {
            Flow::Call(t) if sys.contains(&t) => calls += 1,
            Flow::Jmp(t) | Flow::Jcc(t, Some(_)) if sys.contains(&t) => jmps += 1,
            _ => {}
        }
    }
    println!("x64_sys_call: {calls} calls and {jmps} (conditional) tail jumps to __x64_sys_*");
    assert!(
        calls + jmps > 200,
        "x64_sys_call reaches only {} syscall handlers",
        calls + jmps
    );
}
