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
//! So when arming a function finds a direct call or tail call that kprobes refuses, its
//! callee gets a [`StaticHook`]: a probe on the callee's entry (through ftrace where the
//! callee has an ftrace site, so other tasks pay a call, not a trap). For a traced task it
//! checks the return address on the stack: right after a `call` of this callee, inside the
//! function of the task's innermost frame, or (for a callee that is tail-called from such
//! a site) the innermost frame's own return address. A site kprobes did accept carries a
//! breakpoint, not the `call` opcode, so calls its probe saw are not seen twice. The call
//! is then drawn as if the site's probe had seen it, except that the task cannot wait
//! for an unarmed callee here: that call shows as `not followed: static call` and the
//! callee is armed ahead. The target is read from the live code when the caller is armed;
//! a static call updated later to a callee without a hook is not seen.
//!
//! Another tracer's return hook may have replaced the return address already (function_graph
//! running at the same time: its ftrace handler can run before kprobes'; a kretprobe).
//! function_graph's saved address is found on its shadow stack; when none is found the
//! call site cannot be checked, and a call from the innermost frame is assumed (unless a
//! call just drawn as a leaf suppresses the frame below it: then nothing is drawn).

use super::arming::{call_range, never_probed};
use super::handlers::Callee;
use super::returns::{return_site, stack_key};
use super::{read_kernel, read_word, tracer, Tracer, TracerInner, MAX_FRAMES};
use crate::bindings;
use crate::kprobe::{Handler, Probe};
use crate::ksym::addr_of;
use crate::ksym::SymBuf;
use crate::parse::OptionName;
use crate::record::{Reason, F_TAIL};
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

/// Whether the 5 bytes at `site` are a call (`e8 rel32`) into `target`, an address range.
fn is_call_to(site: u64, target: core::ops::RangeInclusive<u64>) -> bool {
    let mut b = [0u8; 5];
    if !read_kernel(site, &mut b) || b[0] != 0xe8 {
        return false;
    }
    let rel = i32::from_le_bytes([b[1], b[2], b[3], b[4]]);
    target.contains(&site.wrapping_add(5).wrapping_add(rel as i64 as u64))
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

    /// The entry of a callee of refused call sites: if a traced task came here from
    /// such a site in the function it is known to be in, the call is drawn (see the
    /// module documentation).
    fn on_static_entry(&self, p: &Probe<StaticHook>, regs: &mut bindings::pt_regs) -> c_int {
        let irqs = self.settings.option(OptionName::Irqs);
        let Some(cur) = self.current_in(regs, p.is_ftrace_based(), irqs) else {
            return 0;
        };
        // SAFETY: a probe handler, in `cur`'s context with interrupts off; `d` is dropped
        // before returning.
        let Some((_, d)) = (unsafe { self.tree(&cur) }) else {
            return 0;
        };
        if d.wait.guard || d.stack.depth() == 0 {
            return 0;
        }
        let func = p.data.func;
        // At the entry, the stack pointer points to the return address.
        let entry_sp = regs.sp as u64;
        let Some(mut ret) = read_word(entry_sp) else {
            return 0;
        };
        let rec = self.recorder(&cur);
        let ours = self.returns.saved(stack_key(entry_sp), entry_sp);
        if let Some(saved) = ours.filter(|_| ret == return_site() || self.ret_hooks.contains(ret)) {
            // Our own hooked word (function_graph may have replaced our address in turn):
            // the probe of a call site made this call (its frame is open), or the innermost
            // frame, whose return is hooked, jumped here.
            ret = saved;
        } else if self.ret_hooks.contains(ret) {
            // SAFETY: a C helper reading the current task's own function_graph stack.
            let saved = unsafe { bindings::fctrace_graph_ret_addr(entry_sp as _) } as u64;
            if saved != 0 && !self.ret_hooks.contains(saved) {
                ret = saved;
            }
        }
        let call_site = ret.wrapping_sub(5);
        let hooked = self.ret_hooks.contains(ret);
        let (site, tail, site_sp) = if hooked || is_call_to(call_site, p.data.pfx..=func) {
            // A call: the caller ran at the stack pointer above the return address.
            let sp = entry_sp + 8;
            // Unchecked, a call whose probe drew it as a leaf (suppressing what runs
            // below that call) would be drawn again here: such a call is left out.
            if hooked && d.stack.suppresses(entry_sp) {
                return 0;
            }
            if d.stack.suppressed(sp) {
                return 0;
            }
            d.stack.close_stale(&rec, sp);
            let Some(top) = d.stack.top() else { return 0 };
            if hooked {
                // (A call whose probe opened this frame already.)
                if top.func == func && top.entry_sp == entry_sp {
                    return 0;
                }
                (top.func, false, sp)
            } else if self.table.contains(top.func, call_site) {
                (call_site, false, sp)
            } else {
                return 0;
            }
        } else if p.data.tail.load(Ordering::Relaxed) {
            // A tail call: the innermost frame's function jumped here, leaving its own
            // return address on top. Which of its sites it jumped from is not known.
            if d.stack.suppressed(entry_sp) {
                return 0;
            }
            d.stack.close_stale(&rec, entry_sp);
            let Some(top) = d.stack.top() else { return 0 };
            // (A call whose probe opened this frame already has the same stack pointer.)
            if top.entry_sp != entry_sp || top.func == func {
                return 0;
            }
            (top.func, true, entry_sp)
        } else {
            return 0;
        };
        d.wait.last_redirect = 0;
        let flags = if tail { F_TAIL } else { 0 };
        let max = self.settings.max_depth.load(Ordering::Relaxed) as usize;
        let depth = d.stack.depth();
        if (max != 0 && depth >= max) || depth >= MAX_FRAMES {
            d.stack
                .leaf(&rec, Reason::Depth, flags, func, site, site_sp, tail);
            return 0;
        }
        match self.classify_call(&cur, d, func, site, tail) {
            Callee::Follow | Callee::Thunk => {
                if d.stack.open(&rec, func, site, flags, entry_sp, false) && !tail {
                    self.hook_return(entry_sp);
                }
            }
            Callee::Hide => d.stack.suppress(site_sp, tail),
            Callee::Leaf(r) | Callee::Unarmed(r) => {
                d.stack.leaf(&rec, r, flags, func, site, site_sp, tail)
            }
            // The callee runs already: it cannot be armed before it does.
            Callee::Wait => {
                self.want(func);
                d.stack
                    .leaf(&rec, Reason::StaticCall, flags, func, site, site_sp, tail);
            }
        }
        0
    }
}
