// SPDX-License-Identifier: GPL-2.0

//! Reading a function's live code on arm64 (`crate::a64`): where it ends, its ftrace site
//! and its call sites, for the arming code that `build.rs` and `mod.rs` share with
//! x86-64. Every site is probed where it is (no pre-sites, post-sites or cold parts yet).
//!
//! A64 instructions are words, so there is no length to find, but kallsyms gives no
//! function's end: a function ends where [`a64::function_end`] says (the last function of
//! a section is bounded by the next symbol, past code that belongs to no function).

use crate::a64;
use crate::emulate::{Addr, SiteSlot};
use crate::engine::policy::is_instrumentation;
use crate::engine::read_kernel;
use crate::engine::site::{SiteKind, Target};
use crate::ksym::SymBuf;
use crate::record::Reason;
use core::cell::RefCell;
use kernel::prelude::*;

/// The bytes of an A64 instruction.
pub(crate) const INSN_LEN: u8 = 4;

/// The word at `addr` in `code`, the bytes at `start`.
fn word(code: &[u8], start: u64, addr: u64) -> Option<u32> {
    let off = usize::try_from(addr.checked_sub(start)?).ok()?;
    let b = code.get(off..off.checked_add(4)?)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// Whether `t` is the start of a function that never returns ([`a64::NORETURN`]).
fn is_noreturn(sym: &mut SymBuf, t: u64) -> bool {
    sym.lookup(t)
        .is_some_and(|i| i.offset == 0 && a64::NORETURN.iter().any(|&n| n == i.name))
}

/// The call sites of the function at `start` whose live code (at most `size` bytes, up
/// to the next symbol) is `code`: `f(offset, kind)` for each, in order. Returns the
/// function's end and where its body starts (after the ftrace site), or `Unprobeable`
/// for code fctrace cannot follow: someone else's probe, a branch through an
/// authenticated pointer, a test it does not evaluate.
pub(super) fn scan_sites(
    code: &[u8],
    start: u64,
    size: u64,
    sym: &mut SymBuf,
    mut f: impl FnMut(u32, SiteKind),
) -> core::result::Result<(u64, u64), Reason> {
    let size = size.saturating_sub(ops_literal_before(start.saturating_add(size)));
    let bound = start.saturating_add(size.min(code.len() as u64));
    let sym = RefCell::new(sym);
    // (Outside the function: the live words of a veneer it may detour through.)
    let word_at = |a: u64| {
        word(code, start, a).or_else(|| {
            let mut b = [0u8; 4];
            read_kernel(a, &mut b).then(|| u32::from_le_bytes(b))
        })
    };
    let end = a64::function_end(start, bound, &word_at, |t| {
        is_noreturn(&mut **sym.borrow_mut(), t)
    });
    let sym = sym.into_inner();
    let body = site_of(code, start).map_or(start, |s| s + u64::from(INSN_LEN));
    let inside = |t: u64| (start..end).contains(&t);
    let mut pc = body;
    while pc < end {
        let Some(w) = word(code, start, pc) else {
            return Err(Reason::Unprobeable);
        };
        // A kprobe's `BRK` (`a64::KPROBE_BRK`): fctrace did not put it there, so
        // someone else probes the function, whose words cannot be trusted. (The
        // kernel's own `BRK`s, `BUG()`'s among them, are code.)
        if w == a64::KPROBE_BRK {
            return Err(Reason::Unprobeable);
        }
        let insn = a64::decode(w, pc);
        // A detour through a linker's veneer (erratum 843419) is part of the function.
        if let a64::Flow::Jmp(t) = insn.flow {
            if !inside(t) && a64::is_veneer_detour(pc, t, &word_at) {
                pc += u64::from(INSN_LEN);
                continue;
            }
        }
        let kind = match a64::call_site(insn, inside) {
            None => None,
            Some(a64::Site::Call(a64::Target::Direct(t))) => {
                direct(t, sym).map(|t| SiteKind::Call(Target::Direct(t)))
            }
            Some(a64::Site::Tail(a64::Target::Direct(t))) => {
                direct(t, sym).map(|t| SiteKind::Tail(Target::Direct(t)))
            }
            Some(a64::Site::TailIf(t, test)) => {
                // (Any registers: only whether the test is evaluated at all.)
                if test.holds(0, |_| 0).is_none() {
                    return Err(Reason::Unprobeable);
                }
                direct(t, sym).map(|t| SiteKind::TailIf(Target::Direct(t), test))
            }
            // The kernel signs return addresses only: a branch through an authenticated
            // pointer is not followed (its register holds a signed value).
            Some(a64::Site::Call(a64::Target::Reg(r, a64::Pac::None))) => {
                Some(SiteKind::Call(Target::Reg(r)))
            }
            // A `BR` out of the function is a tail call, inside it a jump table: the
            // handler tells them apart by the target (`SiteData::in_func`).
            Some(a64::Site::JumpReg(r, a64::Pac::None))
            | Some(a64::Site::Tail(a64::Target::Reg(r, a64::Pac::None))) => {
                Some(SiteKind::Tail(Target::Reg(r)))
            }
            Some(_) => return Err(Reason::Unprobeable),
        };
        if let Some(kind) = kind {
            f((pc - start) as u32, kind);
        }
        pc += u64::from(INSN_LEN);
    }
    Ok((end, body))
}

/// Whether the function at `start` (its live code `code`, at most `size` bytes) has no
/// call site: [`Tracer::is_leaf_function`].
pub(super) fn is_leaf(code: &[u8], start: u64, size: u64, sym: &mut SymBuf) -> bool {
    let mut sites = 0usize;
    scan_sites(code, start, size, sym, |_, _| sites += 1).is_ok() && sites == 0
}

/// The words of the function at `start` whose live code up to `end` is `code` (empty
/// without memory).
pub(super) fn words(code: &[u8], start: u64, end: u64) -> KVec<u32> {
    let len = usize::try_from(end.saturating_sub(start)).map_or(0, |n| n.min(code.len()) / 4);
    let mut words: KVec<u32> = KVec::new();
    if words.reserve(len, GFP_KERNEL).is_err() {
        return words;
    }
    for b in code.chunks_exact(4).take(len) {
        // Room was reserved: this does not allocate.
        let _ = words.push(u32::from_le_bytes([b[0], b[1], b[2], b[3]]), GFP_KERNEL);
    }
    words
}

/// What the function at `start`, whose [`words`] are `words`, loads from constants
/// ([`a64::loaded_addresses`]): the addresses, and the words at the addresses it loads
/// from (global function pointers, read now, as x86-64's arming reads `call
/// *smp_ops+0x28(%rip)`). `finish_func()` keeps those that are function starts in the
/// kernel's text. At most [`MAX_LOADED`]; none without memory.
pub(super) fn loaded_addresses(words: &[u32], start: u64) -> KVec<u64> {
    let mut out: KVec<u64> = KVec::new();
    if out.reserve(MAX_LOADED, GFP_KERNEL).is_err() {
        return out;
    }
    a64::loaded_addresses(words, start, |l| {
        let a = match l {
            a64::Loaded::Address(a) => a,
            a64::Loaded::Word(at) => {
                let mut b = [0u8; 8];
                if !read_kernel(at, &mut b) {
                    return;
                }
                u64::from_le_bytes(b)
            }
        };
        if out.len() < MAX_LOADED && !out.contains(&a) {
            let _ = out.push(a, GFP_KERNEL);
        }
    });
    out
}

/// The most addresses [`loaded_addresses`] gives for one function.
const MAX_LOADED: usize = 64;

/// Where the target of the call through register `r` at offset `off` of a function,
/// whose [`words`] are `words`, was loaded from ([`a64::call_slot`]), as the handler
/// reads it on the registers at the site: the slot of the ops table a method is called
/// from, whose other methods are armed ahead when the call is met in atomic context
/// (`Tracer::want_table`).
pub(super) fn call_slot(words: &[u32], off: u32, r: u8) -> Option<SiteSlot> {
    let s = a64::call_slot(words, (off / 4) as usize, r)?;
    Some(SiteSlot {
        addr: Addr {
            base: Some(s.base),
            index: None,
            disp: s.disp,
            gs: false,
        },
        then: s.then,
    })
}

/// Where a direct call or jump to `t` goes: past a module's PLT entry
/// ([`a64::plt_target`]) to the function it reaches, else `t`. The call is then
/// the function's (its entry hook, its probe), and a handler that makes it goes
/// there straight: the entry only loads `X16`, which a call may change anyway.
fn through_plt(t: u64, sym: &mut SymBuf) -> u64 {
    if sym.lookup(t).is_some_and(|i| i.offset == 0) {
        return t;
    }
    crate::engine::plt_at(t).unwrap_or(t)
}

/// A direct call or branch to `t`: the callee, or `None` for a call of instrumentation
/// (not probed, not shown), as on x86-64.
fn direct(t: u64, sym: &mut SymBuf) -> Option<u64> {
    let t = through_plt(t, sym);
    match sym.lookup(t) {
        Some(i) if i.offset == 0 && is_instrumentation(i.name.as_bytes()) => None,
        _ => Some(t),
    }
}

/// Whether a direct call of `callee` is left unprobed: a trivial leaf
/// ([`a64::trivial_leaf`]: at most four instructions that run straight into a return)
/// without an ftrace site. GCC outlines such helpers from every per-CPU access and
/// preemption count update (`__kern_my_cpu_offset()`, reading `TPIDR_EL1`): probed at
/// their call sites, they were a breakpoint trap for every task that ran an armed
/// function's call of them (kfree() and kmem_cache_free() make several), for a line with
/// nothing below it. function_graph cannot see them either; `stats` counts the calls left
/// so (`trivial_calls_unprobed`).
pub(super) fn trivial_callee(callee: u64, sym: &mut SymBuf) -> bool {
    let Some(info) = sym.lookup(callee) else {
        return false;
    };
    if info.offset != 0 || info.size == 0 || ftrace_site(callee).is_some() {
        return false;
    }
    let mut code = [0u8; 4 * a64::TRIVIAL_LEAF_WORDS];
    let len = (info.size as usize).min(code.len()) & !3;
    if !read_kernel(callee, &mut code[..len]) {
        return false;
    }
    let mut words = [0u32; a64::TRIVIAL_LEAF_WORDS];
    for (w, b) in words.iter_mut().zip(code[..len].chunks_exact(4)) {
        *w = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
    a64::trivial_leaf(&words[..len / 4])
}

/// The bytes before the function at `next` that belong to no function's code. With
/// `DYNAMIC_FTRACE_WITH_CALL_OPS` (Debian's arm64 kernels) the 8 bytes before a function
/// with an ftrace site hold the address of the `ftrace_ops` its site calls, which ftrace
/// rewrites as tracers come and go. Scanned as the end of the function before, a pointer
/// there that read as a branch was probed: the kprobe's `BRK` went into the pointer, and
/// the next call of the function took `ftrace_caller()` to `0x..._d4200080` (an oops
/// under `tomoyo_encode2()`).
fn ops_literal_before(next: u64) -> u64 {
    if cfg!(CONFIG_DYNAMIC_FTRACE_WITH_CALL_OPS) && ftrace_site(next).is_some() {
        8
    } else {
        0
    }
}

/// The ftrace site of the function whose first words are `code` (at `start`): the address
/// ftrace records for it (after `BTI C` and the `NOP` that becomes `MOV X9, X30`).
fn site_of(code: &[u8], start: u64) -> Option<u64> {
    let w = |i: u64| word(code, start, start + 4 * i);
    a64::ftrace_site([w(0)?, w(1)?, w(2)?], start)
}

/// The ftrace site of the function at `func`, if it has one.
pub(super) fn ftrace_site(func: u64) -> Option<u64> {
    let mut code = [0u8; 12];
    read_kernel(func, &mut code)
        .then(|| site_of(&code, func))
        .flatten()
}

/// The first instruction of the function at `func` after its ftrace site (or its first,
/// without one).
pub(super) fn body_start(func: u64) -> Option<u64> {
    let mut code = [0u8; 12];
    if !read_kernel(func, &mut code) {
        return None;
    }
    Some(site_of(&code, func).map_or(func, |s| s + u64::from(INSN_LEN)))
}

/// The one call through a register of the function at `start`, whose live code is `code`
/// (at most `size` bytes): its address and register, `None` unless there is exactly one.
/// `invoke_syscall()` calls the system call so (`__invoke_syscall()`, inlined).
pub(super) fn only_register_call(
    code: &[u8],
    start: u64,
    size: u64,
    sym: &mut SymBuf,
) -> Option<(u64, u8)> {
    let (mut found, mut n) = (None, 0usize);
    scan_sites(code, start, size, sym, |off, kind| {
        if let SiteKind::Call(Target::Reg(r)) = kind {
            found = Some((start + u64::from(off), r));
            n += 1;
        }
    })
    .ok()?;
    found.filter(|_| n == 1)
}
