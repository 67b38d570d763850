// SPDX-License-Identifier: GPL-2.0
//! Pre-site probes: watching a call site without a breakpoint on it.
//!
//! A breakpoint on a call site costs every task that runs it a trap. kprobes can turn a
//! probe into a jump to a detour (an *optimized* probe: no trap) only where the 5-byte
//! jump covers instructions it can copy and run elsewhere (`can_boost()` in
//! `arch/x86/kernel/kprobes/core.c`), which a `call` never is. So fctrace puts the probe
//! on a short straight run of such instructions just before the call site (the
//! *pre-site*), and for the traced task only, the probe's handler sets the trap flag:
//! the task single-steps the rest of the run and its handler sees the call site with the
//! registers the call will run with, as a breakpoint there would have.
//!
//! [`pre_site`] chooses the run: every instruction in it can be copied by kprobes and
//! single-stepped ([`steppable`]), nothing jumps into it past its first instruction (nor
//! to the call site), it holds at least 5 bytes and 2 instructions (see [`MIN_INSNS`]),
//! and it is as short as that allows. Reaching its first instruction then means reaching
//! the call site a few instructions later. Shared by the kernel module
//! (`rust-kmod/engine/arming/build.rs`) and the host tests, which check it on every call site
//! of the built kernels against iced-x86.

use crate::decode::Flow;
/// The bytes kprobes' jump to the detour covers.
pub const JUMP_LEN: u32 = 5;
/// The fewest instructions in a run. With one, a probe kprobes did not optimize (yet)
/// single-steps the copied instruction and resumes at the call site itself, where the
/// trap flag's next stop comes after the call. With two or more the task always stops
/// at the call site.
pub const MIN_INSNS: usize = 2;
/// The most instructions in a run (each is a single-step trap for the traced task).
pub const MAX_INSNS: usize = 6;
/// The most single-step traps between the pre-site's handler and the call site: the run
/// plus the detour's jump back (or kprobes' own single-step of the first instruction).
pub const MAX_STEPS: u8 = (MAX_INSNS + 4) as u8;

/// Whether the two-byte opcode `0f op` is in kprobes' table.
fn twobyte_boostable(op: u8) -> bool {
    let word = TWOBYTE_ROWS.get(usize::from(op >> 4)).copied().unwrap_or(0);
    word & (1 << (op & 15)) != 0
}

/// kprobes' table of the two-byte opcodes (`0f xx`) it can copy
/// (`twobyte_is_boostable` in 6.12), as the kernel writes it: a row of 16 per high
/// nibble, bit n for column n.
const TWOBYTE_ROWS: [u16; 16] = [
    row([0, 0, 1, 1, 0, 0, 1, 0, 1, 1, 0, 0, 0, 0, 0, 0]), // 00
    row([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1]), // 10
    row([1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]), // 20
    row([0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]), // 30
    row([1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]), // 40
    row([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]), // 50
    row([1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 1]), // 60
    row([0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1]), // 70
    row([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]), // 80
    row([1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]), // 90
    row([1, 1, 0, 1, 1, 1, 0, 0, 1, 1, 0, 1, 1, 1, 0, 1]), // a0
    row([1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 1]), // b0
    row([1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1]), // c0
    row([0, 1, 1, 1, 0, 1, 0, 0, 1, 1, 0, 1, 1, 1, 0, 1]), // d0
    row([0, 1, 1, 0, 0, 1, 0, 0, 1, 1, 0, 1, 1, 1, 0, 1]), // e0
    row([0, 1, 1, 1, 0, 1, 0, 0, 1, 1, 1, 0, 1, 1, 1, 0]), // f0
];

/// A row of [`TWOBYTE_ROWS`]. Only evaluated at compile time (a bad index would fail the
/// build, not panic).
#[allow(clippy::indexing_slicing, clippy::arithmetic_side_effects)]
const fn row(bits: [u8; 16]) -> u16 {
    let mut r = 0u16;
    let mut i = 0;
    while i < 16 {
        if bits[i] != 0 {
            r |= 1 << i;
        }
        i += 1;
    }
    r
}

/// Whether the instruction at the start of `bytes` may be part of a pre-site run:
/// kprobes can copy it into a detour (its `can_boost()`, less the exception-table check,
/// which the kernel makes itself: it optimizes no probe in a function with a user
/// access), it does not branch, and single-stepping it with the trap flag stops right
/// after it. Left out beyond `can_boost()`: anything that reads or writes the flags
/// register as a whole or the interrupt flag (`pushf` would save the trap flag, `popf`
/// clear it, `sti`/`cli`), loads a segment register (`mov %ss` holds the trap back for
/// one instruction), port I/O, `rep` string instructions (one trap per iteration), and
/// moves to control or debug registers.
pub fn steppable(bytes: &[u8]) -> bool {
    let mut i = 0usize;
    let mut rep = false;
    let op = loop {
        let Some(&b) = bytes.get(i) else {
            return false;
        };
        match b {
            // kprobes copies neither an address-size nor a `cs` prefix.
            0x67 | 0x2e => return false,
            0xf2 | 0xf3 => rep = true,
            0x66 | 0xf0 | 0x26 | 0x36 | 0x3e | 0x64 | 0x65 | 0x40..=0x4f => {}
            _ => break b,
        }
        i = i.wrapping_add(1);
        if i >= 15 {
            return false;
        }
    };
    let next = bytes.get(i.wrapping_add(1)).copied();
    // The ModRM byte's reg field, for the opcodes whose group it selects.
    let modrm_reg = || next.map(|m| (m >> 3) & 7);
    match op {
        0x0f => match next {
            // Three-byte opcodes (0f 38, 0f 3a): kprobes copies none.
            Some(0x38 | 0x3a) | None => false,
            // Moves to control and debug registers.
            Some(0x22 | 0x23) => false,
            Some(op2) => twobyte_boostable(op2),
        },
        // VEX, EVEX (and `bound`), XOP or `pop r/m`.
        0xc4 | 0xc5 | 0x62 | 0x8f => false,
        // Conditional jumps, far call, int3/int/into, ESC, loops, call/jmp, hlt.
        0x70..=0x7f | 0x9a | 0xcc..=0xce | 0xd6 | 0xd8..=0xdf | 0xe0..=0xe3 => false,
        0xe8 | 0xe9 | 0xea | 0xeb | 0xf0..=0xf4 => false,
        // Returns, iret, pushf/popf, cli/sti, int1, mov to a segment register, port I/O.
        0xc2 | 0xc3 | 0xca | 0xcb | 0xcf | 0x9c | 0x9d | 0xfa | 0xfb => false,
        0x8e | 0x6c..=0x6f | 0xe4..=0xe7 | 0xec..=0xef => false,
        // String instructions with a repeat prefix.
        0xa4..=0xa7 | 0xaa..=0xaf if rep => false,
        0xc0 | 0xc1 | 0xd0..=0xd3 => modrm_reg().is_some_and(|r| r != 6),
        0xf6 | 0xf7 => modrm_reg().is_some_and(|r| r != 1),
        // inc/dec only (kprobes also copies an indirect jmp, which branches).
        0xfe | 0xff => modrm_reg().is_some_and(|r| r <= 1),
        _ => true,
    }
}

/// One instruction of a function, in the order of a linear sweep (see [`pre_site`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    /// Its offset in the function.
    pub off: u32,
    /// Its length.
    pub len: u8,
    /// [`steppable`] says yes.
    pub steppable: bool,
    /// It may be a call site fctrace probes ([`may_be_site`]): only such an instruction
    /// can have a pre-site run that a post-site's run must keep clear of.
    pub site: bool,
}

/// Whether an instruction of the function `start..end` with control flow `flow` may be a
/// call site fctrace probes: a call, or a jump that may leave the function (a tail call),
/// direct or indirect. Conditional jumps, jumps inside the function and returns are not.
pub fn may_be_site(flow: Flow, start: u64, end: u64) -> bool {
    match flow {
        Flow::Call(_) | Flow::CallReg(_) | Flow::CallMem(_) => true,
        Flow::JmpReg(_) | Flow::JmpMem(_) => true,
        Flow::Jmp(t) => t < start || t >= end,
        _ => false,
    }
}

/// The pre-site of the call site `insns[site]`: the offset of the first instruction of
/// the shortest run `insns[j..site]` that is at least [`JUMP_LEN`] bytes and
/// [`MIN_INSNS`] instructions long (at most [`MAX_INSNS`]), whose instructions are all
/// steppable and start at or after `min_off` (past the function's ftrace site), and such
/// that no branch of the function lands on any of `insns[j + 1..=site]`
/// (`is_target(off)`). `None` when there is none: the site keeps a breakpoint.
pub fn pre_site(
    insns: &[Insn],
    site: usize,
    min_off: u32,
    is_target: impl Fn(u32) -> bool,
) -> Option<u32> {
    let mut bytes = 0u32;
    let mut j = site;
    let mut n = 0usize;
    loop {
        // `insns[j]` (the site, then each instruction of the run after its first) must
        // be reached only through the run.
        let cur = insns.get(j)?;
        if is_target(cur.off) {
            return None;
        }
        j = j.checked_sub(1)?;
        let prev = insns.get(j)?;
        if !prev.steppable
            || prev.off < min_off
            || prev.off.checked_add(u32::from(prev.len))? != cur.off
        {
            return None;
        }
        bytes = bytes.saturating_add(u32::from(prev.len));
        n = n.saturating_add(1);
        if n > MAX_INSNS {
            return None;
        }
        if bytes >= JUMP_LEN && n >= MIN_INSNS {
            return Some(prev.off);
        }
    }
}

/// The longest straight run before the call site `insns[site]`, for computing its target
/// without running it (`emulate::Program::static_target`): the offset of the first
/// instruction of the longest `insns[j..site]` (at most [`MAX_INSNS`]) whose instructions
/// are [`steppable`] (none branches) and start at or after `min_off`, and such that no
/// branch of the function lands on any of `insns[j + 1..=site]`; the site's own offset
/// when there is none (the target then comes from the site's operand alone).
pub fn straight_run(
    insns: &[Insn],
    site: usize,
    min_off: u32,
    is_target: impl Fn(u32) -> bool,
) -> Option<u32> {
    let mut j = site;
    let mut first = insns.get(site)?.off;
    for _ in 0..MAX_INSNS {
        let Some(cur) = insns.get(j) else { break };
        if is_target(cur.off) {
            break;
        }
        let Some(prev) = j.checked_sub(1).and_then(|k| insns.get(k)) else {
            break;
        };
        if !prev.steppable
            || prev.off < min_off
            || prev.off.checked_add(u32::from(prev.len)) != Some(cur.off)
        {
            break;
        }
        j = j.saturating_sub(1);
        first = prev.off;
    }
    Some(first)
}

/// The post-site of the call site `insns[site]`: the offset of the instruction the call
/// returns to, when the run `insns[site + 1..j]` that starts there can carry an optimized
/// probe: at least [`JUMP_LEN`] bytes of [`steppable`] instructions (what kprobes can
/// copy into a detour; they do not branch, so the run ends inside the function), none
/// of them after the first a branch target of the function (`is_target(off)`; kprobes
/// would refuse to optimize it). Returns the run's first offset and its end.
///
/// A direct call of a function without an entry hook (no ftrace site: `_copy_to_iter()`)
/// is watched from its pre-site, where the traced task's frame for the callee opens, and
/// its post-site, where it closes as the call returns: two jumps to detours for every
/// task instead of a breakpoint trap on the call (see `rust-kmod/engine/step.rs`). The
/// first instruction may itself be a branch target: the handler closes the frame only
/// when the stack pointer is the one the call returned with.
pub fn post_site(
    insns: &[Insn],
    site: usize,
    is_target: impl Fn(u32) -> bool,
) -> Option<(u32, u32)> {
    let call = insns.get(site)?;
    let first = insns.get(site.checked_add(1)?)?;
    if call.off.checked_add(u32::from(call.len))? != first.off {
        return None;
    }
    let mut end = first.off;
    let mut j = site.checked_add(1)?;
    loop {
        let cur = insns.get(j)?;
        if cur.off != end || !cur.steppable || (j > site.saturating_add(1) && is_target(cur.off)) {
            return None;
        }
        end = end.checked_add(u32::from(cur.len))?;
        if end.checked_sub(first.off)? >= JUMP_LEN {
            return Some((first.off, end));
        }
        j = j.checked_add(1)?;
    }
}

/// The pre-site run that the next site after `insns[site]` would have: the first
/// instruction after it that is not [`steppable`] (a call, a jump, a return, or an
/// instruction no run crosses) ends the straight code after the call, and its
/// [`pre_site`] (with the same `min_off` and `is_target`) is returned. Conservative: that
/// instruction need not be a site (a call it is not probed at, say), but it may be one
/// ([`Insn::site`]). Used to keep a post-site's run from
/// overlapping a pre-site's run (kprobes optimizes neither of two overlapping probes);
/// the two may start at the same address.
pub fn next_pre_site(
    insns: &[Insn],
    site: usize,
    min_off: u32,
    is_target: impl Fn(u32) -> bool,
) -> Option<u32> {
    let mut k = site.checked_add(1)?;
    while insns.get(k)?.steppable {
        k = k.checked_add(1)?;
    }
    // A conditional jump, a jump inside the function or a return ends the straight code
    // but is no site: nothing is probed before it.
    if !insns.get(k)?.site {
        return None;
    }
    pre_site(insns, k, min_off, is_target)
}
