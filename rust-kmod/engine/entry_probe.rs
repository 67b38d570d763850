// SPDX-License-Identifier: GPL-2.0

//! Entry probes: calls seen at the entry of a callee that has no entry hook, through a
//! kprobe on its first instruction.
//!
//! Two kinds of callee get one:
//!
//! - Callees of static call sites. kprobes will not place a probe on a static call site
//!   (`static_call_text_reserved()`): `static_call_update()` rewrites those instructions
//!   at run time. On a kernel with `PREEMPT_DYNAMIC` they are everywhere:
//!   `might_resched()` (in every `might_sleep()`, every sleeping allocation) and
//!   `cond_resched()` are static calls of `__cond_resched()` in voluntary preemption
//!   mode. A static call of a callee with an ftrace site needs nothing here: the callee
//!   gets an entry hook (`entry.rs`) and the site no probe. When arming a function finds
//!   a direct call or tail call that kprobes refuses into a callee without one, that
//!   callee gets an entry probe. The target is read from the live code when the caller
//!   is armed; a static call updated later to a callee without a hook is not seen.
//! - Direct callees without an ftrace site (`notrace` code such as the `vsnprintf()`
//!   family, assembly such as `rep_movs_alternative()`), where kprobes can optimize a
//!   probe on their entry into a jump (see [`entry_optimizable`]): instead of a
//!   breakpoint on every call site of theirs in an armed function, which every task
//!   running that code would trap on, every caller pays a jump into kprobes' detour and
//!   one check (is the current task traced?), as for an entry hook through ftrace.
//!
//! The handler draws the call as the entry hooks do (`Tracer::on_entry`). A callee not
//! armed yet is armed before it runs where the probe is still a breakpoint (the task is
//! sent to the arming trampoline, which returns to the probed instruction); from an
//! optimized probe's detour, which cannot send the task anywhere, the call shows as `not
//! followed: static call` (or `not followed: entry probe`) and the callee is armed for
//! its next call. (Arming a function that waited arms its first direct callees too, see
//! `wait/`, so that is rare.)

use super::arming::{call_range, never_probed, MAX_FUNC_SIZE};
use super::entry::{Entered, Via};
use super::site::EntryKind;
use super::step::from_detour;
use super::tree::current_ids;
use super::{read_kernel, tracer, Tracer, TracerInner};
use crate::decode::{self, Flow};
use crate::kprobe::{Handler, Probe};
use crate::ksym::addr_of;
use crate::ksym::SymBuf;
use crate::presite;
use crate::record::Reason;
use crate::sys;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use kernel::alloc::KVVec;
use kernel::c_str;
use kernel::ffi::c_int;
use kernel::prelude::*;

/// The most callees with an entry probe at once.
pub(crate) const MAX_STATIC_HOOKS: usize = 4096;

/// The bytes of a callee's entry kept (`endbr64` and the most a probe's jump covers).
const SAVED_BYTES: usize = 24;

/// An entry probe on a callee (see the module documentation).
pub(crate) struct StaticHook {
    kind: EntryKind,
    /// The first bytes of the callee as they were before the probe went on, from its
    /// start: arming the callee decodes them instead of the probe's breakpoint or jump.
    saved: [u8; SAVED_BYTES],
    /// The callee's start.
    func: u64,
    /// Where a call of it may point: its start, or (call-depth tracking) its padding,
    /// whose accounting thunk falls through into it; `pfx..=func`.
    pfx: u64,
    /// Some refused site jumps to it (a tail call).
    tail: AtomicBool,
}

impl Handler for StaticHook {
    // Every task that calls the function comes to the probe: most leave at once.
    const TRACED_ONLY: bool = true;

    fn pre(p: &Probe<StaticHook>, regs: &mut sys::PtRegs) -> c_int {
        tracer().map_or(0, |tr| tr.on_static_entry(p, regs))
    }
}

/// The addresses return hooks put in place of a return address: function_graph's
/// `return_to_handler` (at [`ReturnHooks::GRAPH`]), rethook's (kretprobes', fprobe's)
/// trampoline.
pub(crate) struct ReturnHooks([AtomicU64; 2]);

impl ReturnHooks {
    /// Where function_graph's is.
    const GRAPH: usize = 0;
    /// Where rethook's is.
    const RETHOOK: usize = 1;

    pub(crate) fn new() -> Self {
        ReturnHooks([const { AtomicU64::new(0) }; 2])
    }

    /// Looks them up (0 for one this kernel does not have). Sleeps.
    pub(crate) fn resolve(&self) {
        // (In the order of the addresses: `GRAPH` first.)
        let names = [
            c_str!("return_to_handler"),
            c_str!("arch_rethook_trampoline"),
        ];
        for (a, name) in self.0.iter().zip(names) {
            a.store(addr_of(name), Ordering::Relaxed);
        }
    }

    /// function_graph's `return_to_handler` (0 if this kernel has none).
    pub(crate) fn graph_handler(&self) -> u64 {
        self.0[Self::GRAPH].load(Ordering::Relaxed)
    }

    /// rethook's `arch_rethook_trampoline` (0 if this kernel has none).
    pub(crate) fn rethook(&self) -> u64 {
        self.0[Self::RETHOOK].load(Ordering::Relaxed)
    }

    pub(crate) fn contains(&self, ret: u64) -> bool {
        self.0.iter().any(|a| a.load(Ordering::Relaxed) == ret)
    }
}

impl Tracer {
    /// Hooks the entry of `callee`, called (or, `tail`, jumped to) from a site kprobes
    /// refused. Callees that fctrace never arms (denied, thunks, its own code) get none.
    /// With the mutex held; sleeps.
    pub(crate) fn add_static_hook(
        &self,
        inner: &mut TracerInner,
        callee: u64,
        tail: bool,
        sym: &mut SymBuf,
    ) {
        if !self.add_entry_probe(inner, callee, tail, sym, EntryKind::StaticCall) {
            self.stats
                .static_hooks_missing
                .fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Gives `callee`, called (or, `tail`, jumped to) directly from an armed function, an
    /// entry probe of `kind`; returns whether it has one. A `Notrace` callee gets one only
    /// where kprobes can optimize it ([`entry_optimizable`]); a `StaticCall` callee
    /// always, optimizable where it can be. Callees that fctrace never arms (denied,
    /// thunks, its own code) get none. With the mutex held; sleeps.
    pub(crate) fn add_entry_probe(
        &self,
        inner: &mut TracerInner,
        callee: u64,
        tail: bool,
        sym: &mut SymBuf,
        kind: EntryKind,
    ) -> bool {
        if let Some(h) = inner.static_hooks.iter().find(|h| h.data.func == callee) {
            if tail {
                h.data.tail.store(true, Ordering::Relaxed);
            }
            return h.is_registered();
        }
        if self.going.contains(callee) {
            return false;
        }
        let size = match sym.lookup(callee) {
            // Not `__schedule()` nor a preemption thunk: every context switch of every
            // task would run the probe (the scheduler is followed through its callers'
            // sites and the preemption path, see `preempt.rs`). arm64: of either kind
            // (`preempt_schedule()`, which kprobes refuses, calls `__schedule()`).
            Some(info)
                if info.offset == 0
                    && !never_probed(inner, callee, info.name.as_bytes())
                    && !((kind == EntryKind::Notrace || cfg!(target_arch = "aarch64"))
                        && (info.name == "__schedule" || self.preempt.is_thunk(callee))) =>
            {
                info.size
            }
            _ => return false,
        };
        let mut saved = [0u8; SAVED_BYTES];
        if !read_kernel(callee, &mut saved[..(size as usize).min(SAVED_BYTES)]) {
            return false;
        }
        let optimizable = entry_optimizable(inner, callee, size);
        if (kind == EntryKind::Notrace && !optimizable)
            || inner.static_hooks.len() >= MAX_STATIC_HOOKS
        {
            return false;
        }
        let hook = StaticHook {
            kind,
            saved,
            func: callee,
            pfx: *call_range(callee, sym).start(),
            tail: AtomicBool::new(tail),
        };
        let probe = Probe::at(callee, hook);
        let probe = if optimizable {
            probe.optimizable()
        } else {
            probe
        };
        let Ok(mut b) = KBox::pin(probe, GFP_KERNEL) else {
            return false;
        };
        let registered = b.as_mut().register().is_ok();
        if b.is_blocked() {
            self.schedule_optimize();
        }
        if registered {
            let n = match kind {
                EntryKind::StaticCall => &self.stats.static_hooks,
                EntryKind::Notrace => &self.stats.entry_probes,
            };
            n.fetch_add(1, Ordering::Relaxed);
        }
        // Kept even when registration fails: the callee is not tried again. Without room
        // (dropping the probe unregisters it), it is tried again next time.
        inner.static_hooks.push(b, GFP_KERNEL).is_ok() && registered
    }

    /// The entry of a callee with an entry probe: see `entry.rs`.
    fn on_static_entry(&self, p: &Probe<StaticHook>, regs: &mut sys::PtRegs) -> c_int {
        if !self.active.load(Ordering::Relaxed) || !self.current_traced(current_ids().1) {
            return 0;
        }
        // Through ftrace (a callee with an ftrace site after all) or the detour of an
        // optimized probe, preemption was disabled once; else this is a breakpoint trap.
        let via = p.is_ftrace_based() || from_detour(regs);
        let e = Entered {
            func: p.data.func,
            pfx: p.data.pfx,
            tail_ok: p.data.tail.load(Ordering::Relaxed),
            via: Via::Kprobe {
                addr: p.addr(),
                trapped: !via,
                reason: match p.data.kind {
                    EntryKind::StaticCall => Reason::StaticCall,
                    EntryKind::Notrace => Reason::EntryProbe,
                },
            },
        };
        self.on_entry(&e, regs, u32::from(via))
    }
}

impl TracerInner {
    /// In `code`, the live code of the function at `start`: puts back the bytes that an
    /// entry probe of ours replaced (with a breakpoint, or the jump of an optimized one).
    pub(crate) fn restore_entry_probe_bytes(&self, start: u64, code: &mut [u8]) {
        if let Some(h) = self
            .static_hooks
            .iter()
            .find(|h| h.data.func == start && h.is_registered())
        {
            let n = code.len().min(SAVED_BYTES);
            if let (Some(dst), Some(src)) = (code.get_mut(..n), h.data.saved.get(..n)) {
                dst.copy_from_slice(src);
            }
        }
    }
}

/// Whether kprobes can optimize a probe on the entry of the function `func` of `size`
/// bytes into a jump: its first instructions (after `endbr64`, where kprobes puts an
/// entry probe) make a run of at least 5 bytes kprobes can copy, nothing in the function
/// jumps into that run after its start, and the function has no exception table entry
/// (`can_optimize()` in Linux 6.12; see `extable.rs`). Sleeps (allocates).
pub(crate) fn entry_optimizable(inner: &TracerInner, func: u64, size: u64) -> bool {
    if size == 0 || size > MAX_FUNC_SIZE || inner.extable.any_in(func, func + size) {
        return false;
    }
    let Ok(mut code) = KVVec::from_elem(0u8, size as usize, GFP_KERNEL) else {
        return false;
    };
    if !read_kernel(func, &mut code) {
        return false;
    }
    // Past `endbr64`, sealed or not, as kprobes puts it.
    let p = crate::fentry::fentry_offset(&code) as u64;
    // The run the jump covers.
    let mut covered = 0u64;
    while covered < u64::from(presite::JUMP_LEN) {
        let Some(rest) = code.get((p + covered) as usize..) else {
            return false;
        };
        if !presite::steppable(rest) {
            return false;
        }
        match decode::decode(rest, func + p + covered) {
            Ok(i) if i.flow == Flow::Next => covered += u64::from(i.len),
            _ => return false,
        }
    }
    let (lo, hi) = (func + p, func + p + covered);
    let mut into = false;
    let scanned = decode::scan(&code, func, |_, i| {
        if let Flow::Jmp(t) | Flow::Jcc(t, _) = i.flow {
            into |= t > lo && t <= hi;
        }
    });
    scanned.is_ok() && !into
}
