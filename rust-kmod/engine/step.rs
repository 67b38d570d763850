// SPDX-License-Identifier: GPL-2.0

//! Pre-sites: indirect call sites watched without a breakpoint for other tasks.
//!
//! A breakpoint on a call site costs every task that runs it a trap, traced or not. An
//! indirect call (through a retpoline thunk or `call *%reg`) cannot carry an entry hook:
//! its target is known only when it runs. So where the instructions just before the site
//! allow it (`crates/fctrace-decode/src/presite.rs`: a straight run of at least 5 bytes
//! and 2 instructions that kprobes can copy and nothing jumps into), the probe goes on
//! the first instruction of that run instead, without a post-handler: kprobes then
//! optimizes it into a jump to a detour, and a task that is not traced pays a call into
//! the handler and one check, not a trap.
//!
//! For a traced task the handler sets the trap flag (`TF`) in the registers the detour
//! returns with. The task single-steps the rest of the run; each step is a debug trap
//! (`#DB`, `DIE_DEBUG`, seen through the module's die notifier in `trap_notifier.rs`) that
//! only goes on, until the task stands on the call site: there the flag is cleared and
//! the call-site handler (`handlers.rs`) runs with the registers the call is about to use,
//! exactly as a breakpoint on the site would have run it, and may make the call itself
//! or send the task to the arming trampoline. The trampoline returns to the call site,
//! not to the pre-site: so a task sent there from a pre-site has its step kept, and
//! `fctrace_trampoline` sets the trap flag again as it returns (`resume_after_wait`), so
//! that the handler sees the call once more, now with its target armed.
//!
//! Until kprobes has optimized the probe (in the background, once its blocker is gone:
//! see `kprobe.rs`; never in a function with a user access, whose exception table kprobes
//! will not jump over), it is a breakpoint: the handler runs in the trap, kprobes
//! single-steps the first instruction out of line and resumes after it, and the trap flag
//! set by the handler does the rest (which is why a run has at least two instructions:
//! the stop on the call site comes from the trap flag, never from kprobes' resume).
//! The number of steps is bounded ([`presite::MAX_STEPS`]); a task that does not reach
//! the site within it (never expected: nothing jumps into the run) stops stepping and
//! the call is not drawn (`stats`: `single_steps_lost`).
//!
//! Most of the time the task does not step at all. The instructions of the run are few
//! and simple (a load from an ops table into the register the call goes through), and
//! arming compiled them into a program (`crate::emulate`, host-tested against iced-x86)
//! that the handler evaluates on the registers of the pre-site: it knows the target
//! before the run executes. When that target is armed and its entry hook is in place
//! (an ftrace hook or an entry probe, `HOOK_LIVE`: every armed function reached through
//! a pointer gets one), the handler only leaves an [`Expect`] in the task's data and
//! the task runs on; the target's entry hook draws the call from it (`entry.rs`), as it
//! draws a direct call. Only a target not armed yet, or not computed, costs steps.
//!
//! A direct call of a function fctrace never follows (`memcpy()` and the rest of the
//! deny list: shown as a leaf `not followed: unprobeable`) gets a pre-site too where it
//! has one: its handler draws the leaf at once, with the stack pointer the call will
//! have (computed the same way), and no step.
//!
//! A direct call of any other function without an entry hook (no ftrace site:
//! `_copy_to_iter()`, called by `seq_read_iter()` on every read of a `/proc` file) gets
//! a pre-site and a *post-site*, an optimized probe on the instructions the call returns
//! to (`presite::post_site()`), where both exist and their runs do not overlap the next
//! site's. The pre-site's handler runs the call-site handler at once, with the stack
//! pointer the call will have, and opens the callee's frame without making the call;
//! the post-site's handler closes it with the value returned, when the stack pointer
//! is the one that call returns with. Every task pays two jumps to detours instead of a
//! breakpoint trap; the traced task steps to the site only when the call needs the
//! site's handler itself (the callee is not armed yet, or the lossless wait).
//!
//! All of this is x86-64's: on arm64 (no optimized kprobes) nothing here is built but
//! the per-task bookkeeping the rest of the engine shares.

#![cfg_attr(not(target_arch = "x86_64"), allow(dead_code, unused_imports))]

use super::handlers::{reg, SiteCall};
use super::site::{Expect, SiteData, SiteKind, Step};
use super::table::{FuncState, HOOK_LIVE};
use super::tree::{current_ids, TaskData};
use super::MAX_TASKS;
use super::{load_kernel, tracer, Tracer};
use crate::emulate;
use crate::parse::OptionName;
use crate::presite;
use crate::sys::{self, Regs};
use core::sync::atomic::{AtomicU32, Ordering};
use kernel::ffi::{c_int, c_ulong};

/// EFLAGS.TF: a debug trap after each instruction.
#[cfg(target_arch = "x86_64")]
const X86_EFLAGS_TF: u64 = 1 << 8;
/// DR6.BS: the debug trap is a single step.
#[cfg(target_arch = "x86_64")]
const DR_STEP: c_ulong = 1 << 14;
/// The length of a direct call (`e8 rel32`), the only kind of call with a post-site.
const CALL_LEN: u64 = 5;
/// Steps allowed from the arming trampoline back to the call site: its return
/// (`RET_UNCALLED` in `trampoline.S`: three instructions).
const RESUME_STEPS: u8 = 24;

/// The threads fctrace set the trap flag of and whose step has not ended: a kernel
/// single-step trap of such a thread that its step state does not claim (tracing
/// stopped while it stepped, and the state went with the trace) is fctrace's, and
/// ended; any other is left to its owner (a debugger, a test's notifier) or the kernel.
/// One place per step: a thread's own, and one for each interrupt that steps while the
/// thread is current (`irqs`), so that an interrupt's step ending does not end the mark
/// of the step it interrupted.
static STEPPING: [AtomicU32; MAX_TASKS] = [const { AtomicU32::new(0) }; MAX_TASKS];

/// Marks a step of thread `pid` by fctrace; false if every place is taken (then it does
/// not step).
fn stepping_add(pid: u32) -> bool {
    STEPPING.iter().any(|s| {
        s.compare_exchange(0, pid, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    })
}

/// A step of thread `pid` is over: whether it was marked.
pub(crate) fn stepping_end(pid: u32) -> bool {
    pid != 0
        && STEPPING.iter().any(|s| {
            s.load(Ordering::Relaxed) == pid
                && s.compare_exchange(pid, 0, Ordering::AcqRel, Ordering::Relaxed)
                    .is_ok()
        })
}

/// Ends the step of `d`, if any, and the mark it holds.
fn end_step(d: &mut TaskData) {
    if let Some(s) = d.step.take() {
        stepping_end(s.marked);
    }
}

/// Thread `pid` exits: none of its steps can go on. (Run at every task's exit: plain
/// loads first.)
pub(crate) fn stepping_end_all(pid: u32) {
    if pid == 0 {
        return;
    }
    for s in &STEPPING {
        if s.load(Ordering::Relaxed) == pid {
            let _ = s.compare_exchange(pid, 0, Ordering::AcqRel, Ordering::Relaxed);
        }
    }
}

/// The registers and memory a pre-site program runs on: the probe's saved registers.
#[cfg(target_arch = "x86_64")]
struct PreSiteRegs<'a>(&'a sys::PtRegs);

#[cfg(target_arch = "x86_64")]
impl emulate::Machine for PreSiteRegs<'_> {
    #[inline]
    fn reg(&self, r: emulate::Reg) -> u64 {
        reg(self.0, r)
    }

    fn load(&self, addr: u64, size: u8) -> Option<u64> {
        load_kernel(addr, size)
    }

    fn gs_base(&self) -> Option<u64> {
        // The handler runs with preemption off (the detour) or interrupts off (the trap),
        // so the CPU does not change.
        Some(sys::gs_base())
    }
}

/// The registers the direct call at the end of `site`'s pre-site run will have, from
/// the registers `regs` at the pre-site: the stack pointer (the program's target) and
/// the argument registers the run computes or leaves alone (the others keep their
/// pre-site values); and whether all six argument registers are known (the `args`
/// option draws the call's arguments only then). `None` if the stack pointer is not
/// known.
#[cfg(target_arch = "x86_64")]
fn at_call(site: &SiteData, regs: &sys::PtRegs) -> Option<(sys::PtRegs, bool)> {
    let end = site.prog.as_ref()?.run(&PreSiteRegs(regs));
    let sp = end.target?;
    let mut at = *regs;
    at.sp = sp as _;
    at.ip = site.addr as _;
    let mut all = true;
    // (x86 register numbers: rdi 7, rsi 6, rdx 2, rcx 1, r8, r9.)
    for (r, slot) in [
        (7, &mut at.di),
        (6, &mut at.si),
        (2, &mut at.dx),
        (1, &mut at.cx),
        (8, &mut at.r8),
        (9, &mut at.r9),
    ] {
        match end.reg(r) {
            Some(v) => *slot = v as _,
            None => all = false,
        }
    }
    Some((at, all))
}

/// Whether `regs` were saved by an optimized probe's detour rather than by a breakpoint
/// trap. The detour (`optprobe_template_func`, Linux 6.12) builds `pt_regs` on the probed
/// stack right below its stack pointer, so they end exactly where the stack pointer
/// was; a trap's frame lies below a gap (`asm_exc_int3`) or on another stack.
pub(super) fn from_detour(regs: &sys::PtRegs) -> bool {
    let end = (regs as *const sys::PtRegs as u64)
        .wrapping_add(core::mem::size_of::<sys::PtRegs>() as u64);
    end == regs.sp()
}

impl Tracer {
    /// The handler of a pre-site probe (`site.pre`): starts a traced task's single step to
    /// the call site. Runs in the detour (interrupts as they were, preemption disabled
    /// once by kprobes) or, until the probe is optimized, in its breakpoint trap. Never
    /// changes `regs.ip` (the detour ignores it).
    #[cfg(target_arch = "x86_64")]
    pub(super) fn on_pre_site(&self, site: &SiteData, regs: &mut sys::PtRegs) -> c_int {
        let irqs = self.settings.option(OptionName::Irqs);
        let via = u32::from(from_detour(regs));
        let Some(cur) = self.current_in(regs, via, irqs) else {
            return 0;
        };
        // SAFETY: a probe handler in `cur`'s context (interrupts off in the trap;
        // preemption off in the detour).
        let Some((_, mut d)) = (unsafe { self.tree(&cur) }) else {
            return 0;
        };
        // A post-site at this same address (the call just before returns here) runs
        // after this handler: kprobes runs the newer of two probes at one address first.
        // The frame of that call, which has just returned (entered 8 bytes below this
        // stack pointer, from the call that ends here), is closed here, with its value.
        let sp = regs.sp();
        if let Some(t) = d.stack.top() {
            if t.func != site.func
                && t.entry_sp.wrapping_add(8) == sp
                && t.site.wrapping_add(CALL_LEN) == site.pre
            {
                let retval_on = self.settings.option(OptionName::Retval);
                d.stack
                    .close_returning(&self.recorder(&cur), sp - 8, 0, regs.retval(), retval_on);
            }
        }
        // The same early checks as the call-site handler's: a task in the trampoline, or
        // with no open frame of this function, is not stepped.
        if d.wait.guard || !d.stack.top().is_some_and(|t| t.func == site.func) {
            return 0;
        }
        d.expect = None;
        // A call of a function never followed: its leaf is drawn now, with the stack
        // pointer the call will have (nothing in the run branches: the call follows).
        if site.leaf {
            let target = site.kind.direct_callee().unwrap_or(0);
            if let (Some((mut at_site, args_ok)), FuncState::Leaf(_)) =
                (at_call(site, regs), self.table.lookup(target))
            {
                // The call-site handler takes the tree.
                drop(d);
                // `early`: changes of the copy take no effect, so what needs the call made
                // at the site (the lossless wait) answers Step: the task steps there.
                // (Run as a call site's handler, the wait sent a copy of the registers to
                // the trampoline: the task never went, and stayed counted in it.)
                if let SiteCall::Done(_) = self.site_call(site, &mut at_site, via, true, args_ok) {
                    return 0;
                }
                // SAFETY: as above; the call-site handler's reference to the tree has ended.
                let Some((_, mut d)) = (unsafe { self.tree(&cur) }) else {
                    return 0;
                };
                return self.step_to_site(&mut d, site, regs, via);
            }
        }
        // A direct call watched from its pre-site and post-site: the call-site handler runs
        // now, with the stack pointer the call will have, and opens the callee's frame
        // (its post-site closes it); only what needs the call made at the site (arming
        // the callee, the lossless wait) makes the task step there.
        let mut d = if site.post != 0 {
            // The call-site handler takes the tree.
            drop(d);
            if let Some((mut at_site, args_ok)) = at_call(site, regs) {
                if let SiteCall::Done(_) = self.site_call(site, &mut at_site, via, true, args_ok) {
                    return 0;
                }
            }
            // SAFETY: as above; the call-site handler's reference to the tree has ended.
            let Some((_, d)) = (unsafe { self.tree(&cur) }) else {
                return 0;
            };
            d
        } else {
            d
        };
        // The target, computed before the run executes: an armed function whose entry hook
        // is in place draws the call itself.
        let prog = site.prog.as_ref().filter(|_| site.post == 0);
        if let Some((p, t)) = prog.and_then(|p| Some((p, p.target(&PreSiteRegs(regs))?))) {
            let tail = !matches!(site.kind, SiteKind::Call(_));
            // An indirect jump inside the function: a jump table.
            if tail && site.in_func(t) {
                return 0;
            }
            let state = self.table.lookup(t);
            if self.hooks.bits(t) & HOOK_LIVE != 0 && state == FuncState::Armed {
                d.expect = Some(Expect {
                    site: site.addr,
                    ret: site.addr + u64::from(site.len),
                    target: t,
                    tail,
                });
                self.stats.presite_computed.fetch_add(1, Ordering::Relaxed);
                return 0;
            }
            // A method of an ops table not armed yet, called where the task cannot wait
            // for it (the call site's handler queues it for arming ahead): the table's
            // other methods are likely next (a scheduling class's), and are armed
            // ahead with it.
            if state == FuncState::Unknown && !cur.sleepable {
                if let Some((_, slot)) = p.target_slot(&PreSiteRegs(regs)) {
                    self.want_table(slot);
                }
            }
        }
        self.step_to_site(&mut d, site, regs, via)
    }

    /// Has the task single-step from the pre-site to the call site (the trap flag in
    /// `regs`), where the step's trap runs the call-site handler.
    #[cfg(target_arch = "x86_64")]
    fn step_to_site(
        &self,
        d: &mut TaskData,
        site: &SiteData,
        regs: &mut sys::PtRegs,
        via: u32,
    ) -> c_int {
        // A step left over (its trap never came): it is over.
        if d.step.is_some() {
            end_step(d);
            self.stats.single_steps_lost.fetch_add(1, Ordering::Relaxed);
        }
        let pid = current_ids().0;
        if !stepping_add(pid) {
            self.stats.single_steps_lost.fetch_add(1, Ordering::Relaxed);
            return 0;
        }
        d.step = Some(Step {
            site: *site,
            left: presite::MAX_STEPS,
            marked: pid,
        });
        self.stats.single_steps.fetch_add(1, Ordering::Relaxed);
        if via == 0 {
            self.stats
                .single_steps_trapped
                .fetch_add(1, Ordering::Relaxed);
        }
        regs.flags |= X86_EFLAGS_TF as c_ulong;
        0
    }

    /// The handler of a post-site probe (`site.at_post`): the instruction a direct call
    /// watched from its pre-site returns to. A traced task whose frame for the callee
    /// was opened at this call (its entry stack pointer 8 below this one) closes it, with
    /// the value returned, as the return hook would have. Runs in the detour (or, until
    /// the probe is optimized, in its breakpoint trap).
    #[cfg(target_arch = "x86_64")]
    pub(super) fn on_post_site(&self, site: &SiteData, regs: &mut sys::PtRegs) -> c_int {
        let irqs = self.settings.option(OptionName::Irqs);
        let via = u32::from(from_detour(regs));
        let Some(cur) = self.current_in(regs, via, irqs) else {
            return 0;
        };
        // SAFETY: as in `on_pre_site()`.
        let Some((slot, mut d)) = (unsafe { self.tree(&cur) }) else {
            return 0;
        };
        if d.wait.guard {
            return 0;
        }
        let retp = regs.sp().wrapping_sub(8);
        let callee = site.kind.direct_callee().unwrap_or(0);
        // Past a call not followed (hidden by the filter), as after a hooked return.
        let _ = d.stack.suppressed(regs.sp());
        let ours = d
            .stack
            .frames()
            .iter()
            .rev()
            .take_while(|f| f.entry_sp <= retp)
            .any(|f| f.entry_sp == retp && f.func == callee && f.site == site.addr);
        if !ours {
            return 0;
        }
        let retval_on = self.settings.option(OptionName::Retval);
        let rec = self.recorder(&cur);
        d.stack
            .close_returning(&rec, retp, 0, regs.retval(), retval_on);
        self.release_if_done(slot, d);
        0
    }

    /// A single-step trap of the current task (`regs` its registers): goes on stepping,
    /// or runs the call-site handler once the task stands on the site. Returns whether
    /// the trap was fctrace's.
    #[cfg(target_arch = "x86_64")]
    fn on_step(&self, regs: &mut sys::PtRegs) -> bool {
        let irqs = self.settings.option(OptionName::Irqs);
        let Some(cur) = self.current_in(regs, sys::VIA_DIE, irqs) else {
            return false;
        };
        let site = {
            // SAFETY: the debug trap runs in `cur`'s context with interrupts off, like a
            // breakpoint's handler. `d` is dropped at the end of this block, before the
            // call-site handler takes the tree.
            let Some((_, mut d)) = (unsafe { self.tree(&cur) }) else {
                return false;
            };
            let Some(step) = d.step.as_mut() else {
                return false;
            };
            if regs.pc() != step.site.addr {
                if step.left > 0 {
                    step.left -= 1;
                    return true;
                }
                end_step(&mut d);
                regs.flags &= !(X86_EFLAGS_TF as c_ulong);
                self.stats.single_steps_lost.fetch_add(1, Ordering::Relaxed);
                return true;
            }
            let site = step.site;
            end_step(&mut d);
            site
        };
        regs.flags &= !(X86_EFLAGS_TF as c_ulong);
        self.on_site(&site, regs, sys::VIA_DIE);
        // Sent to the arming trampoline, which returns to the site: step again from
        // there (see `resume_after_wait`).
        if regs.pc() == sys::trampoline_addr() {
            // SAFETY: as above; the handler's reference to the tree has ended.
            if let Some((_, mut d)) = unsafe { self.tree(&cur) } {
                d.step = Some(Step {
                    site,
                    left: RESUME_STEPS,
                    marked: 0,
                });
            }
        }
        true
    }

    /// As the task leaves the arming trampoline for `to` (`fctrace_trampoline`; `None`:
    /// the entry trampoline): whether it came from a pre-site's single step that goes on
    /// from the call site at `to` (`fctrace_trampoline` then sets the trap flag in the
    /// flags it returns with). Any other step is over: a step left from before (its
    /// trap never came) would have the task step through whatever code `to` begins.
    pub(super) fn resume_after_wait(&self, d: &mut TaskData, to: Option<u64>) -> bool {
        let resume = to.is_some_and(|to| d.step.is_some_and(|s| s.site.addr == to))
            && self.active.load(Ordering::Acquire);
        let marked = match d.step.as_mut() {
            Some(s) if resume && s.marked == 0 => {
                let pid = current_ids().0;
                s.marked = if stepping_add(pid) { pid } else { 0 };
                s.marked != 0
            }
            Some(_) => resume,
            None => false,
        };
        if !marked {
            end_step(d);
        }
        marked
    }
}

/// Whether a debug trap with debug status `*dr6` is a single step of kernel code with the
/// trap flag set.
#[cfg(target_arch = "x86_64")]
fn kernel_step(regs: &sys::PtRegs, dr6: *mut c_ulong) -> bool {
    // SAFETY: for DIE_DEBUG the notifier's `err` is the trap's pointer to its DR6 copy,
    // valid for the trap's duration (checked for null by the caller).
    let status = unsafe { *dr6 };
    // SAFETY: reading a plain integer field of a union of integers.
    let cs = unsafe { regs.__bindgen_anon_1.cs } as u64;
    status & DR_STEP != 0 && cs & 3 == 0 && regs.flags as u64 & X86_EFLAGS_TF != 0
}

/// A debug trap (`DIE_DEBUG`) with debug status `*dr6`, from the module's die notifier:
/// handles fctrace's single steps. Returns whether the trap was fctrace's (the notifier
/// then stops the chain).
#[cfg(target_arch = "x86_64")]
pub(crate) fn on_debug(regs: &mut sys::PtRegs, dr6: *mut c_ulong) -> bool {
    if !kernel_step(regs, dr6) {
        return false;
    }
    let ours = tracer().is_some_and(|tr| tr.on_step(regs));
    let ours = ours || {
        // A step of ours whose task's state is gone (tracing stopped while it stepped):
        // end it.
        let pid = current_ids().0;
        let orphan = stepping_end(pid);
        if orphan {
            regs.flags &= !(X86_EFLAGS_TF as c_ulong);
            if let Some(tr) = tracer() {
                tr.stats.single_steps_lost.fetch_add(1, Ordering::Relaxed);
            }
        }
        orphan
    };
    if ours {
        // SAFETY: as above; notifiers clear the status bits they consumed.
        unsafe { *dr6 &= !DR_STEP };
    }
    ours
}

/// A kernel single-step trap that every die notifier left alone (fctrace's last one,
/// after all others): the kernel would warn and clear the trap flag. One was seen, just
/// after a pre-site's detour in a traced task on Debian's 7.3 kernel, with no step of
/// fctrace's to account for it; until that path is known, such a trap of a thread inside
/// a trace while tracing is on is taken as fctrace's: ended, counted
/// (`single_steps_unclaimed`) and named in `error_log`. Any other is the kernel's.
#[cfg(target_arch = "x86_64")]
pub(crate) fn on_debug_unclaimed(regs: &mut sys::PtRegs, dr6: *mut c_ulong) -> bool {
    if !kernel_step(regs, dr6) {
        return false;
    }
    let Some(tr) = tracer() else {
        return false;
    };
    let (pid, tgid) = current_ids();
    if !tr.active.load(Ordering::Acquire) || !tr.current_traced(tgid) || tr.slot(pid).is_none() {
        return false;
    }
    regs.flags &= !(X86_EFLAGS_TF as c_ulong);
    tr.stats
        .single_steps_unclaimed
        .fetch_add(1, Ordering::Relaxed);
    if tr
        .unclaimed_step
        .compare_exchange(0, regs.pc(), Ordering::AcqRel, Ordering::Relaxed)
        .is_ok()
    {
        tr.kick_work();
    }
    // SAFETY: as in `on_debug`; notifiers clear the status bits they consumed.
    unsafe { *dr6 &= !DR_STEP };
    true
}
