// SPDX-License-Identifier: GPL-2.0
//! Pre-sites ([`fctrace_decode::presite`]) on the real code of each built test kernel:
//! every call site of every function gets one where it can, and each chosen run is
//! checked with iced-x86: straight-line instructions that neither branch, nor touch the
//! flags register as a whole or the interrupt flag, nor repeat, nothing in the function
//! jumping into it, at least 5 bytes before the call site. [`steppable`] itself is
//! checked on every instruction of the kernel: iced must agree that it does not branch
//! and is none of the instructions the single-step cannot pass.
//!
//! It prints how many call sites of each kind have a pre-site, and asserts that most
//! do (a kernel whose calls mostly keep breakpoints would make fctrace costly for tasks
//! that are not traced). Without a vmlinux the test prints `SKIP: ...` and passes.

mod common;

use fctrace_decode::fentry::{entry_site, fentry_offset, EntrySite};
use fctrace_decode::presite::{next_pre_site, post_site, pre_site, JUMP_LEN, MIN_INSNS};
use fctrace_decode::Flow;
use iced_x86::{FlowControl, Instruction, Mnemonic, OpKind};
use std::collections::BTreeMap;
use std::path::Path;

#[test]
fn pre_sites_on_every_vmlinux() {
    common::each_vmlinux(check);
}

/// Where a function's body starts: after `endbr64` (or its sealed form) and the
/// 5-byte ftrace site (a nop, or `call __fentry__` in a GCC-built image), as the
/// arming code in the module sees it ([`fctrace_decode::fentry`]).
fn body_start(code: &[u8], addr: u64, fentry: Option<u64>) -> u32 {
    match entry_site(code, addr) {
        EntrySite::Nop(off) => u32::from(off) + 5,
        EntrySite::Call(off, t) if Some(t) == fentry => u32::from(off) + 5,
        _ => fentry_offset(code) as u32,
    }
}

/// Why iced says a stepped instruction must not be in a run, if it does.
fn not_steppable(i: &Instruction) -> Option<&'static str> {
    if i.flow_control() != FlowControl::Next {
        return Some("branches or traps");
    }
    if matches!(
        i.mnemonic(),
        Mnemonic::Pushf
            | Mnemonic::Pushfq
            | Mnemonic::Popf
            | Mnemonic::Popfq
            | Mnemonic::Sti
            | Mnemonic::Cli
            | Mnemonic::Hlt
            | Mnemonic::In
            | Mnemonic::Out
            | Mnemonic::Insb
            | Mnemonic::Insw
            | Mnemonic::Insd
            | Mnemonic::Outsb
            | Mnemonic::Outsw
            | Mnemonic::Outsd
    ) {
        return Some("flags, interrupts or I/O");
    }
    if (i.has_rep_prefix() || i.has_repne_prefix()) && i.is_string_instruction() {
        return Some("a repeated string instruction");
    }
    if i.mnemonic() == Mnemonic::Mov
        && i.op0_kind() == OpKind::Register
        && (i.op0_register().is_segment_register()
            || i.op0_register().is_cr()
            || i.op0_register().is_dr())
    {
        return Some("a move to a segment, control or debug register");
    }
    None
}

fn check(path: &Path) {
    let data = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let elf = object::File::parse(&*data).expect("parse vmlinux ELF");
    let cf = common::code_functions(&elf, path);
    // kind -> (sites, with a pre-site)
    let mut kinds: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    let mut run_len: BTreeMap<usize, u64> = BTreeMap::new();
    let mut stepped = 0u64;
    // direct calls with a pre-site and a post-site: whether the post-site is clear of
    // the next site's pre-site run
    let mut post_sites: BTreeMap<bool, u64> = BTreeMap::new();
    let mut failures: Vec<String> = Vec::new();
    // Calls and jumps through a register go through the retpoline thunks: a branch into
    // one of the thunk arrays is an indirect one.
    let thunk_arrays: Vec<u64> = [
        "__x86_indirect_thunk_array",
        "__x86_indirect_call_thunk_array",
        "__x86_indirect_jump_thunk_array",
    ]
    .iter()
    .filter_map(|n| cf.by_name.get(n).copied())
    .collect();
    let via_thunk = |t: u64| thunk_arrays.iter().any(|&a| t >= a && t < a + 16 * 64);
    let fentry = cf.by_name.get("__fentry__").copied();
    for f in &cf.funcs {
        let Some(common::PreSiteView {
            insns,
            targets,
            steps,
        }) = common::presite_view(f)
        else {
            continue;
        };
        let end = f.addr + f.bytes.len() as u64;
        let inside = |t: u64| t >= f.addr && t < end;
        // steppable() against iced, on every instruction.
        for s in &steps {
            if !s.steppable {
                continue;
            }
            let ins = common::iced_at(f.bytes, f.addr, s.off);
            if let Some(why) = not_steppable(&ins) {
                failures.push(format!(
                    "{}+{:#x}: `{ins}` is steppable, but iced says {why}",
                    f.name, s.off
                ));
            }
            stepped += 1;
        }
        let min_off = body_start(f.bytes, f.addr, fentry);
        for (k, &(off, i)) in insns.iter().enumerate() {
            let kind = match i.flow {
                Flow::Call(t) if via_thunk(t) => "indirect call",
                Flow::Call(_) => "call",
                Flow::CallReg(_) | Flow::CallMem(_) => "indirect call",
                Flow::JmpReg(_) | Flow::JmpMem(_) => "indirect jump",
                Flow::Jmp(t) | Flow::Jcc(t, _) if via_thunk(t) => "indirect jump",
                Flow::Jmp(t) | Flow::Jcc(t, _) if !inside(t) => "jump out",
                _ => continue,
            };
            if off < min_off {
                continue;
            }
            let e = kinds.entry(kind).or_default();
            e.0 += 1;
            let Some(p) = pre_site(&steps, k, min_off, |o| targets.contains(&o)) else {
                continue;
            };
            e.1 += 1;
            // A direct call's post-site (the arming code gives one to calls of functions
            // without an entry hook): a run from the return address, checked with iced,
            // that overlaps no pre-site run of the next site.
            if kind == "call" {
                if let Some((q, qe)) = post_site(&steps, k, |o| targets.contains(&o)) {
                    let mut at = q;
                    while at < qe {
                        let ins = common::iced_at(f.bytes, f.addr, at);
                        if let Some(why) = not_steppable(&ins) {
                            failures.push(format!(
                                "{}+{at:#x}: `{ins}` in a post-site run: {why}",
                                f.name
                            ));
                        }
                        if at != q && targets.contains(&at) {
                            failures.push(format!(
                                "{}+{at:#x}: a jump lands inside the post-site run",
                                f.name
                            ));
                        }
                        at += ins.len() as u32;
                    }
                    if q != off + u32::from(i.len) || at != qe || qe - q < JUMP_LEN {
                        failures.push(format!(
                            "{}+{off:#x}: a bad post-site run {q:#x}..{qe:#x}",
                            f.name
                        ));
                    }
                    let clear = next_pre_site(&steps, k, min_off, |o| targets.contains(&o))
                        .is_none_or(|n| n == q || n >= qe);
                    *post_sites.entry(clear).or_default() += 1;
                }
            }
            // The run, as iced decodes it.
            let mut at = p;
            let mut n = 0;
            while at < off {
                let ins = common::iced_at(f.bytes, f.addr, at);
                if let Some(why) = not_steppable(&ins) {
                    failures.push(format!("{}+{at:#x}: `{ins}` in a run: {why}", f.name));
                }
                if at != p && targets.contains(&at) {
                    failures.push(format!("{}+{at:#x}: a jump lands inside the run", f.name));
                }
                at += ins.len() as u32;
                n += 1;
            }
            if at != off || off - p < JUMP_LEN || n < MIN_INSNS || targets.contains(&off) {
                failures.push(format!(
                    "{}+{off:#x}: a bad run from {p:#x} ({n} instructions)",
                    f.name
                ));
            }
            *run_len.entry(n).or_default() += 1;
        }
    }
    println!("vmlinux: {}", path.display());
    println!("{stepped} steppable instructions checked against iced-x86");
    for (k, (n, pre)) in &kinds {
        println!(
            "{k}: {n} sites, {pre} with a pre-site ({:.1}%)",
            *pre as f64 * 100.0 / (*n).max(1) as f64
        );
    }
    println!("instructions per run: {run_len:?}");
    let (clear, overlap) = (
        post_sites.get(&true).copied().unwrap_or(0),
        post_sites.get(&false).copied().unwrap_or(0),
    );
    let (calls, calls_pre) = kinds.get("call").copied().unwrap_or_default();
    println!(
        "call: {calls} sites, {calls_pre} with a pre-site, {clear} of them with a post-site \
         ({overlap} more whose post-site overlaps the next pre-site)"
    );
    for m in failures.iter().take(40) {
        println!("FAIL {m}");
    }
    assert!(failures.is_empty(), "{} bad pre-sites", failures.len());
    let (n, pre) = kinds.get("indirect call").copied().unwrap_or_default();
    assert!(n > 1000, "suspiciously few indirect calls: {n}");
    assert!(
        pre * 2 > n,
        "only {pre} of {n} indirect calls have a pre-site"
    );
    assert!(
        clear * 3 > calls_pre,
        "only {clear} of {calls_pre} direct calls with a pre-site have a post-site"
    );
}
