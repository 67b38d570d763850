// SPDX-License-Identifier: GPL-2.0

//! Calls from sites kprobes refuses: static calls.
//!
//! kprobes will not place a probe on a static call site (`static_call_text_reserved()`):
//! `static_call_update()` rewrites those instructions at run time. On a kernel with
//! `PREEMPT_DYNAMIC` they are everywhere: `might_resched()` (in every `might_sleep()`,
//! every sleeping allocation) and `cond_resched()` are static calls of `__cond_resched()`
//! in voluntary preemption mode. Such a call would never be seen, nor anything below it
//! (the scheduler, when it runs there).
//!
//! A static call of a callee with an ftrace site needs nothing here: the callee gets an
//! entry hook (`entry.rs`) and the site no probe. When arming a function finds a direct
//! call or tail call that kprobes refuses into a callee without one, that callee gets a
//! [`StaticHook`]: a kprobe on its entry, whose handler draws the call as the entry hooks
//! do (`Tracer::on_entry`), except that the task cannot wait for an unarmed callee here:
//! that call shows as `not followed: static call` and the callee is armed ahead. The
//! target is read from the live code when the caller is armed; a static call updated
//! later to a callee without a hook is not seen.

use super::arming::{call_range, never_probed};
use super::entry::{Entered, Via};
use super::{tracer, Tracer, TracerInner};
use crate::bindings;
use crate::kprobe::{Handler, Probe};
use crate::ksym::addr_of;
use crate::ksym::SymBuf;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use kernel::c_str;
use kernel::ffi::c_int;
use kernel::prelude::*;

/// The most callees hooked at once.
pub(crate) const MAX_STATIC_HOOKS: usize = 256;

/// An entry probe on the callee of refused call sites.
pub(crate) struct StaticHook {
    /// The callee's start.
    func: u64,
    /// Where a call of it may point: its start, or (call-depth tracking) its padding,
    /// whose accounting thunk falls through into it; `pfx..=func`.
    pfx: u64,
    /// Some refused site jumps to it (a tail call).
    tail: AtomicBool,
}

impl Handler for StaticHook {
    fn pre(p: &Probe<StaticHook>, regs: &mut bindings::pt_regs) -> c_int {
        tracer().map_or(0, |tr| tr.on_static_entry(p, regs))
    }
}

/// The addresses return hooks put in place of a return address: function_graph's
/// `return_to_handler`, rethook's (kretprobes', fprobe's) trampoline.
pub(crate) struct ReturnHooks([AtomicU64; 2]);

impl ReturnHooks {
    pub(crate) fn new() -> Self {
        ReturnHooks([const { AtomicU64::new(0) }; 2])
    }

    /// Looks them up (0 for one this kernel does not have). Sleeps.
    pub(crate) fn resolve(&self) {
        let names = [
            c_str!("return_to_handler"),
            c_str!("arch_rethook_trampoline"),
        ];
        for (a, name) in self.0.iter().zip(names) {
            a.store(addr_of(name), Ordering::Relaxed);
        }
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
        if let Some(h) = inner.static_hooks.iter().find(|h| h.data.func == callee) {
            if tail {
                h.data.tail.store(true, Ordering::Relaxed);
            }
            return;
        }
        let missing = || {
            self.stats
                .static_hooks_missing
                .fetch_add(1, Ordering::Relaxed);
        };
        match sym.lookup(callee) {
            Some(info)
                if info.offset == 0 && !never_probed(inner, callee, info.name.as_bytes()) => {}
            _ => return,
        }
        if inner.static_hooks.len() >= MAX_STATIC_HOOKS {
            missing();
            return;
        }
        let hook = StaticHook {
            func: callee,
            pfx: *call_range(callee, sym).start(),
            tail: AtomicBool::new(tail),
        };
        let Ok(mut b) = KBox::pin(Probe::at(callee, hook), GFP_KERNEL) else {
            missing();
            return;
        };
        // Kept even when registration fails: the callee is not tried again.
        if b.as_mut().register().is_ok() {
            self.stats.static_hooks.fetch_add(1, Ordering::Relaxed);
        } else {
            missing();
        }
        if inner.static_hooks.push(b, GFP_KERNEL).is_err() {
            // Dropping the probe unregisters it.
            missing();
        }
    }

    /// The entry of a callee of refused call sites: see `entry.rs`.
    fn on_static_entry(&self, p: &Probe<StaticHook>, regs: &mut bindings::pt_regs) -> c_int {
        let e = Entered {
            func: p.data.func,
            pfx: p.data.pfx,
            tail_ok: p.data.tail.load(Ordering::Relaxed),
            via: Via::Kprobe,
        };
        self.on_entry(&e, regs, u32::from(p.is_ftrace_based()))
    }
}
