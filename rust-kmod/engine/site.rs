// SPDX-License-Identifier: GPL-2.0

//! What the engine knows of a call site and of a traced task's pending call: the types
//! the probe handlers, the arming code and the per-task state share. Nothing here
//! imports another file of the engine, so that they all can import it.

use crate::decode;
use crate::emulate;

/// How the traced task reaches the callee of a call site.
#[derive(Clone, Copy)]
pub(crate) enum Target {
    /// `call rel32` (or `jmp rel32`): a fixed address.
    Direct(u64),
    /// Through a register (`call *%r11`, or a thunk: `call __x86_indirect_thunk_r11`).
    Reg(u8),
    /// Through memory (`call *0x10(%rax)`).
    Mem(decode::Mem),
}

/// What a probed instruction is.
#[derive(Clone, Copy)]
pub(crate) enum SiteKind {
    /// A call.
    Call(Target),
    /// A jump out of the function: a tail call.
    Tail(Target),
    /// A conditional jump out of the function: a tail call when condition `cc` holds (to a
    /// retpoline thunk, `jne __x86_indirect_thunk_r11`, it is an indirect one).
    TailIf(Target, Cond),
}

/// The condition of a conditional tail call, as the architecture's decoder gives it: x86's
/// condition code on `EFLAGS`; arm64's test of the flags (`B.cond`) or of a register
/// (`CBZ`, `TBZ`).
#[cfg(target_arch = "x86_64")]
pub(crate) type Cond = decode::Cond;
#[cfg(target_arch = "aarch64")]
pub(crate) type Cond = crate::a64::Test;

impl SiteKind {
    /// The callee of a direct call or tail call.
    pub(crate) fn direct_callee(self) -> Option<u64> {
        match self {
            SiteKind::Call(Target::Direct(c))
            | SiteKind::Tail(Target::Direct(c))
            | SiteKind::TailIf(Target::Direct(c), _) => Some(c),
            _ => None,
        }
    }

    /// The call or jump through a register or memory, as a pre-site program ends with it
    /// (`crate::emulate`); `None` for a direct one (or through `fs`). `next_ip`: where
    /// the instruction ends.
    pub(crate) fn indirect_final(self, next_ip: u64) -> Option<emulate::Final> {
        let t = match self {
            SiteKind::Call(t) | SiteKind::Tail(t) | SiteKind::TailIf(t, _) => t,
        };
        match t {
            Target::Direct(_) => None,
            Target::Reg(r) => Some(emulate::Final::Reg(r)),
            Target::Mem(m) => emulate::Addr::from_mem(&m, next_ip).map(emulate::Final::Mem),
        }
    }
}

/// What the handler of a call-site probe knows.
#[derive(Clone, Copy)]
pub(crate) struct SiteData {
    /// The function the site is in, and its end.
    pub(crate) func: u64,
    pub(crate) func_end: u64,
    /// The function's cold part (GCC's `f.cold`, which its jumps enter and leave as its
    /// own code): start and end, equal when it has none.
    pub(crate) cold: u64,
    pub(crate) cold_end: u64,
    /// The instruction's address and length.
    pub(crate) addr: u64,
    pub(crate) len: u8,
    pub(crate) kind: SiteKind,
    /// The probe is not on the site but on its pre-site, this address (see `step.rs`); 0
    /// when it is on the site.
    pub(crate) pre: u64,
    /// For an indirect site with a pre-site: how the instructions from the pre-site to
    /// the site compute the target, where they can be followed (`crate::emulate`). For a
    /// leaf site (`leaf`): how they change the stack pointer.
    pub(crate) prog: Option<emulate::Program>,
    /// A direct call (or jump) of a function fctrace never follows (`never_probed()`:
    /// `memcpy()` and the rest of the deny list), watched from its pre-site: the handler
    /// draws the leaf there, without a step (see `step.rs`).
    pub(crate) leaf: bool,
    /// A direct call of a function without an entry hook watched from its pre-site and
    /// its post-site, this address (the return address; see `step.rs`): the traced
    /// task's frame for the callee opens at the one and closes at the other. 0 otherwise.
    pub(crate) post: u64,
    /// This probe is that post-site (a copy of the site's data, at `post`).
    pub(crate) at_post: bool,
    /// For an indirect site: where its target is read from, as an address on the
    /// registers at the site (`emulate::Program::site_slot`), when the instructions before
    /// it tell: the slot of the ops table the call goes through (see `wait/`).
    pub(crate) slot: Option<emulate::SiteSlot>,
}

impl SiteData {
    /// Whether `addr` is in the code of the site's function (its cold part included): a
    /// jump there is no tail call.
    pub(crate) fn in_func(&self, addr: u64) -> bool {
        (addr >= self.func && addr < self.func_end) || (addr >= self.cold && addr < self.cold_end)
    }
}

/// Why a callee has an entry probe.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum EntryKind {
    /// kprobes refused a direct call site of it (a static call).
    StaticCall,
    /// It has no ftrace site.
    Notrace,
}

/// A traced task single-stepping from a pre-site to its call site.
#[derive(Clone, Copy)]
pub(crate) struct Step {
    /// The call site.
    pub(crate) site: SiteData,
    /// Steps left before giving up.
    pub(crate) left: u8,
    /// The thread whose stepping mark this step holds (`step.rs`; 0: none yet, a step
    /// that goes on from the arming trampoline takes one as the task leaves it).
    pub(crate) marked: u32,
}

/// An indirect call or jump the traced task is about to make, whose target a pre-site
/// computed: the target's entry hook draws it (`entry.rs`).
#[derive(Clone, Copy)]
pub(crate) struct Expect {
    /// The call site.
    pub(crate) site: u64,
    /// The return address the call pushes (the end of the site's instruction).
    pub(crate) ret: u64,
    /// The callee.
    pub(crate) target: u64,
    /// A jump (a tail call), not a call.
    pub(crate) tail: bool,
}

/// The key of the return of a function entered with stack pointer `sp`: x86-64, the word
/// there (its return address); arm64, the word below it.
pub(crate) fn entry_retp(sp: u64) -> u64 {
    if cfg!(target_arch = "aarch64") {
        sp.wrapping_sub(8)
    } else {
        sp
    }
}

/// The key of the return of the callee of a call (`tail`: a jump) made with stack
/// pointer `sp`: x86-64's call pushes its return address below `sp`, and a tail-called
/// function returns through the word at `sp`; arm64's `BL` and `B` leave the stack
/// pointer as it is, so the callee is entered with `sp`.
pub(crate) fn callee_retp(sp: u64, tail: bool) -> u64 {
    if tail && cfg!(target_arch = "x86_64") {
        sp
    } else {
        sp.wrapping_sub(8)
    }
}
