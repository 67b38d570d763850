// SPDX-License-Identifier: GPL-2.0

//! The probe handlers: call and jump sites of armed functions, the start function's entry,
//! the system-call dispatcher, interrupt entries, exit and fork. They run in int3 context
//! (interrupts off), in an ftrace callback or an optimized probe's detour (preemption off,
//! interrupts as they were): no sleeping, no allocation, no unbounded loop. Code they call
//! may hit another probe of fctrace's; the tree's [`TreeRef`](super::tree::TreeRef) keeps
//! such a nested handler out of the tree the outer one holds.
//! (The preemption hooks' handler is in `preempt.rs`; returns come through
//! `fctrace_return`, see `returns.rs`.)

use super::site::{callee_retp, entry_retp, Cond, SiteData, SiteKind, Target};
use super::table::FuncState;
use super::tree::{task_running, Ctx, Cur, Recorder, TaskData};
use super::{read_word, tracer, Tracer, MAX_FRAMES};
use crate::kprobe::{Handler, Probe};
use crate::parse::OptionName;
use crate::record::{Reason, F_FAULT, F_INDIRECT, F_TAIL};
use crate::sys::{self, Regs};
use core::sync::atomic::Ordering;
use kernel::ffi::c_int;

/// Bound for system call numbers read from `%esi` (the table has fewer entries).
const MAX_SYSCALLS: u64 = 1024;

/// Which task-lifetime or entry hook a probe is.
#[derive(Clone, Copy)]
pub(crate) enum Hook {
    /// The start function's entry.
    Root,
    /// `do_exit()`: a thread ends.
    Exit,
    /// `wake_up_new_task()`: a fork or clone.
    Fork,
    /// The body of `x64_sys_call(regs, nr)` (past its ftrace site, so an int3 probe):
    /// in all-system-calls mode, opens a trace at `sys_call_table[nr]`.
    Syscall,
    /// The entry of an interrupt handler (`irqs` option): opens an interrupt's tree when
    /// a traced task is current. With the function's start address.
    IrqRoot(Ctx, u64),
    /// A `call __schedule` of the preemption path (see `preempt.rs`).
    Preempt,
    /// `handle_mm_fault()`'s entry: a page fault the traced task takes in kernel mode
    /// inside a traced call is drawn there. With the function's start address.
    Fault(u64),
}

impl Handler for SiteData {
    // Every task that runs the site comes to the probe; the handlers below do nothing
    // for a task that is not traced.
    const TRACED_ONLY: bool = true;

    fn pre(p: &Probe<SiteData>, regs: &mut sys::PtRegs) -> c_int {
        let Some(tr) = tracer() else { return 0 };
        // Pre- and post-sites are x86-64's (`step.rs`).
        #[cfg(target_arch = "x86_64")]
        if p.data.at_post {
            return tr.on_post_site(&p.data, regs);
        } else if p.data.pre != 0 {
            return tr.on_pre_site(&p.data, regs);
        }
        tr.on_site(&p.data, regs, 0)
    }
}

impl Handler for Hook {
    fn pre(p: &Probe<Hook>, regs: &mut sys::PtRegs) -> c_int {
        let Some(tr) = tracer() else { return 0 };
        match p.data {
            Hook::Root => tr.on_root(p, regs),
            Hook::Exit => tr.on_exit(p, regs),
            Hook::Fork => tr.on_fork(p, regs),
            Hook::Syscall => tr.on_syscall(p, regs),
            Hook::IrqRoot(ctx, func) => tr.on_irq_root(p, regs, ctx, func),
            Hook::Preempt => tr.on_preempt(p, regs),
            Hook::Fault(func) => tr.on_fault(p, regs, func),
        }
    }
}

/// What the call-site handler did, run early from a pre-site (`Tracer::site_call`).
pub(super) enum SiteCall {
    /// Done: the kprobe handler's answer (1: the instruction pointer changed).
    Done(c_int),
    /// The call needs the handler at the site itself: the task single-steps there.
    Step,
}

/// What to do about a call whose target is known.
pub(super) enum Callee {
    /// Open the callee's frame (it is armed).
    Follow,
    /// Leave it and its subtree out (hidden by the filter).
    Hide,
    /// Open a preemption thunk's frame (see `preempt.rs`).
    Thunk,
    /// Show it as a leaf: the table says it is not followed, for this reason.
    Leaf(Reason),
    /// Show it as a leaf: it is not armed and the task cannot wait, for this reason (it
    /// is queued to be armed ahead).
    Unarmed(Reason),
    /// Send the task to the trampoline to wait for the callee to be armed.
    Wait,
}

/// General purpose register `r` of `regs`, as the decoder numbers it: one load (the
/// emulation of a pre-site reads every register for each call it computes).
#[inline]
pub(super) fn reg(regs: &sys::PtRegs, r: u8) -> u64 {
    regs.gpr(r)
}

/// Where a call or jump at `site` goes, with the registers it runs with; `None` when
/// read through memory that cannot be read (or a segment).
fn resolve_target(t: Target, regs: &sys::PtRegs, site: &SiteData) -> Option<u64> {
    match t {
        Target::Direct(a) => Some(a),
        Target::Reg(r) => Some(reg(regs, r)),
        Target::Mem(m) => {
            if m.segment.is_some() {
                return None;
            }
            let mut a = m.disp as i64 as u64;
            if m.rip_relative {
                a = a.wrapping_add(site.addr + u64::from(site.len));
            }
            if let Some(b) = m.base {
                a = a.wrapping_add(reg(regs, b));
            }
            if let Some(i) = m.index {
                a = a.wrapping_add(reg(regs, i).wrapping_mul(u64::from(m.scale)));
            }
            read_word(a)
        }
    }
}

/// Whether the condition of a conditional tail call holds on the task's registers at
/// the site.
#[cfg(target_arch = "x86_64")]
fn cond_holds(cc: Cond, regs: &sys::PtRegs) -> bool {
    cc.holds(regs.flags())
}

/// Whether the condition of a conditional tail call holds on the task's registers at
/// the site. (A test fctrace does not evaluate never reaches a site: `build_func`
/// refuses its function.)
#[cfg(target_arch = "aarch64")]
fn cond_holds(cc: Cond, regs: &sys::PtRegs) -> bool {
    cc.holds(regs.flags(), |r| reg(regs, r)).unwrap_or(false)
}

/// A tree opens at the entry of `func`, at stack pointer `sp` (the start function, an
/// interrupt handler): frames below `sp` are stale (their returns were missed, e.g. an
/// earlier interrupt's) and close; frames left at or above it mean the entry is nested
/// inside a tree already, which goes on. Returns whether the tree opened (its caller
/// then hooks the root's return: [`Tracer::hook_entry_return`]).
fn open_tree(rec: &Recorder<'_>, d: &mut TaskData, func: u64, sp: u64) -> bool {
    d.stack.close_stale(rec, sp);
    if d.stack.depth() > 0 {
        return false;
    }
    d.stack.end_suppression();
    d.wait.last_redirect = 0;
    d.stack.open(rec, func, 0, 0, sp, false)
}

impl Tracer {
    /// A tree opens at the entry of `func` (the start function, an interrupt handler),
    /// entered with `regs` ([`open_tree`]), and the function's return is hooked. Returns
    /// whether it opened.
    fn open_root(&self, cur: &Cur, d: &mut TaskData, func: u64, regs: &mut sys::PtRegs) -> bool {
        let opened = open_tree(&self.recorder_at(cur, regs), d, func, entry_retp(regs.sp()));
        if opened {
            self.hook_entry_return(regs);
        }
        opened
    }

    /// Decides what a call of `target` from `site` (a call site, or the system-call
    /// hook; with `entry`, the callee's entry hook) does, for the task `cur` with tree
    /// `d`. A callee not armed that the task cannot wait for is queued to be armed ahead.
    pub(super) fn classify_call(
        &self,
        cur: &Cur,
        d: &TaskData,
        target: u64,
        site: u64,
        tail: bool,
        entry: bool,
    ) -> Callee {
        match self.table.lookup(target) {
            FuncState::Armed => Callee::Follow,
            FuncState::Hidden => Callee::Hide,
            FuncState::Leaf(Reason::Unprobeable) if !tail && self.preempt.is_thunk(target) => {
                Callee::Thunk
            }
            FuncState::Leaf(r) => Callee::Leaf(r),
            FuncState::Unknown if self.may_wait(cur, d, entry) && d.wait.last_redirect != site => {
                Callee::Wait
            }
            FuncState::Unknown => {
                let reason = self.unarmed_reason(cur, d, entry);
                if reason != Reason::ArmFailed {
                    self.want(target);
                }
                Callee::Unarmed(reason)
            }
        }
    }

    /// The pre-handler of every call and jump site (for a site watched from its pre-site,
    /// run from the single-step trap on the site, see `step.rs`).
    /// `via` is 0 in a breakpoint's handler, `FCTRACE_VIA_DIE` from the single-step trap.
    pub(super) fn on_site(&self, site: &SiteData, regs: &mut sys::PtRegs, via: u32) -> c_int {
        match self.site_call(site, regs, via, false, true) {
            SiteCall::Done(r) => r,
            SiteCall::Step => 0,
        }
    }

    /// The call-site handler's work. `early`: called from the site's pre-site (`step.rs`)
    /// with the registers the call will have (`regs` a copy: no change of them takes
    /// effect), for a direct call watched from its pre-site and post-site: a call
    /// followed opens its frame without making the call (the post-site closes it), and
    /// what needs the call made here (the arming trampoline, the lossless wait) answers
    /// [`SiteCall::Step`]: the task steps to the site and comes back here. `args_ok`:
    /// the argument registers in `regs` are the call's (with `early`, the pre-site run may
    /// compute one the handler cannot know: the call is then drawn without arguments).
    pub(super) fn site_call(
        &self,
        site: &SiteData,
        regs: &mut sys::PtRegs,
        via: u32,
        early: bool,
        args_ok: bool,
    ) -> SiteCall {
        use SiteCall::Done;
        let irqs = self.settings.option(OptionName::Irqs);
        let Some(cur) = self.current_in(regs, via, irqs) else {
            return Done(0);
        };
        // SAFETY: a probe handler, in `cur`'s context (its thread, or its interrupt context
        // on this CPU, which it cannot leave with preemption off).
        let Some((slot, mut d)) = (unsafe { self.tree(&cur) }) else {
            return Done(0);
        };
        if d.wait.guard || d.stack.depth() == 0 {
            return Done(0);
        }
        let sp = regs.sp();
        if d.stack.suppressed(sp) {
            return Done(0);
        }
        let rec = if args_ok {
            self.recorder_at(&cur, regs)
        } else {
            self.recorder(&cur)
        };
        // Frames opened below this stack pointer have returned without fctrace seeing it
        // (their return could not be hooked, or they left through a path that does not
        // return): close them before drawing this call.
        d.stack.close_stale(&rec, sp);
        let Some(top) = d.stack.top().map(|t| t.func) else {
            self.release_if_done(slot, d);
            return Done(0);
        };
        // A call site counts only in the function the task is known to be in (its
        // innermost frame). Others run below it without a call fctrace saw: the scheduler
        // entered from an interrupt's return (preempt_schedule_irq() is called from
        // noinstr code), or a callee reached through a call site kprobes refused. Drawing
        // them as calls of the interrupted function would be wrong. (The scheduler entered
        // from a preemption thunk through a `preempt_schedule()` with no hook gets its
        // frame here: `preempt.rs`.)
        if top != site.func
            && !(self.preempt.is_schedule(site.func)
                && self.open_preempted(&cur, &mut d, site.addr, sp, regs.fp()))
        {
            return Done(0);
        }
        // lossless: the buffer is filling faster than the reader empties it; the task
        // waits in the trampoline, then makes this call again (and it is recorded).
        // (Not a task in a wait loop's state: the throttle's wait sleeps.)
        if self.can_redirect(false)
            && cur.sleepable
            && d.wait.last_throttle != site.addr
            && self.should_throttle()
            && task_running()
        {
            if early {
                return SiteCall::Step;
            }
            let at_entry = !matches!(site.kind, SiteKind::Call(_));
            if let Some(r) = self.redirect_throttle(&mut d, site.addr, at_entry) {
                r.apply(regs);
                return Done(1);
            }
        }
        let (target, tail, indirect) = match site.kind {
            SiteKind::Call(t) => (
                resolve_target(t, regs, site),
                false,
                !matches!(t, Target::Direct(_)),
            ),
            SiteKind::Tail(t) | SiteKind::TailIf(t, _) => {
                if let SiteKind::TailIf(_, cc) = site.kind {
                    if !cond_holds(cc, regs) {
                        return Done(0);
                    }
                }
                let a = resolve_target(t, regs, site);
                // An indirect jump inside the function is a jump table, not a tail call.
                if a.is_some_and(|a| site.in_func(a)) {
                    return Done(0);
                }
                (a, true, !matches!(t, Target::Direct(_)))
            }
        };
        let flags = if tail { F_TAIL } else { 0 } | if indirect { F_INDIRECT } else { 0 };
        let Some(target) = target else {
            d.wait.last_redirect = 0;
            d.stack
                .leaf(&rec, Reason::IndirectUnknown, flags, 0, site.addr, sp, tail);
            return Done(0);
        };
        let max = self.settings.max_depth.load(Ordering::Relaxed) as usize;
        let depth = d.stack.depth();
        if (max != 0 && depth >= max) || depth >= MAX_FRAMES {
            d.wait.last_redirect = 0;
            d.stack
                .leaf(&rec, Reason::Depth, flags, target, site.addr, sp, tail);
            return Done(0);
        }
        let callee = self.classify_call(&cur, &d, target, site.addr, tail, false);
        if !matches!(callee, Callee::Wait) {
            d.wait.last_redirect = 0;
        }
        let entry_sp = callee_retp(sp, tail);
        match callee {
            // A preemption thunk's frame holds what `Hook::Preempt` sees of the scheduler.
            Callee::Follow | Callee::Thunk => {
                let thunk = matches!(callee, Callee::Thunk);
                if d.stack
                    .open(&rec, target, site.addr, flags, entry_sp, thunk)
                    && !tail
                    && !early
                {
                    // The handler makes the call, with the return hooked. (A tail call's
                    // callee returns through the word its caller's return was hooked in.)
                    self.hooked_call(regs, site.addr + u64::from(site.len), target);
                    return Done(1);
                }
            }
            Callee::Hide => d.stack.suppress(sp, tail),
            Callee::Leaf(r) | Callee::Unarmed(r) => {
                d.stack.leaf(&rec, r, flags, target, site.addr, sp, tail);
                // A method of an ops table not armed yet, called where the task could
                // not wait for it: the table's other methods are armed ahead with it.
                if indirect
                    && !early
                    && matches!(
                        callee,
                        Callee::Unarmed(Reason::Atomic | Reason::NotArmedYet)
                    )
                {
                    let slot = site
                        .slot
                        .and_then(|a| a.at(|r| Some(reg(regs, r)), read_word));
                    if let Some(at) = slot {
                        if read_word(at) == Some(target) {
                            self.want_table(at);
                        }
                    }
                }
            }
            Callee::Wait if early => return SiteCall::Step,
            Callee::Wait => {
                if let Some(r) = self.wait_for(&mut d, site.addr, target, tail) {
                    r.apply(regs);
                    return Done(1);
                }
                d.stack
                    .leaf(&rec, Reason::ArmFailed, flags, target, site.addr, sp, tail);
            }
        }
        Done(0)
    }

    /// The pre-handler at the start function's entry: opens a trace.
    fn on_root(&self, p: &Probe<Hook>, regs: &mut sys::PtRegs) -> c_int {
        let Some(cur) = self.current(regs, p.is_ftrace_based()) else {
            return 0;
        };
        let Some(slot) = self.claim_slot(cur.pid) else {
            return 0;
        };
        // SAFETY: we are `cur.pid`'s own handler.
        let Some(mut d) = (unsafe { self.data(slot) }) else {
            return 0;
        };
        if d.wait.guard {
            return 0;
        }
        let func = self.root.load(Ordering::Relaxed);
        if self.open_root(&cur, &mut d, func, regs) {
            d.wait.nowait = false;
        }
        0
    }

    /// `handle_mm_fault(vma, address, flags, regs)` entered: when the page fault handler
    /// calls it (`regs` set) for a fault the traced task took in kernel mode (no
    /// `FAULT_FLAG_USER`: a user copy to a page not mapped yet, say) while a call of its
    /// tree was running, the fault's work is drawn under the innermost frame, marked
    /// `page fault`, as function_graph shows it (the exception entry and
    /// `do_user_addr_fault()` are `noinstr` and not traceable: the call comes from code
    /// fctrace does not follow, and no entry hook would draw it). Faults in user mode
    /// happen outside any traced call, and interrupts stay out (they are not faults).
    /// A call of `handle_mm_fault()` by armed code (`get_user_pages()`) is an ordinary
    /// call, drawn by its entry hook: `regs` is NULL there.
    fn on_fault(&self, p: &Probe<Hook>, regs: &mut sys::PtRegs, func: u64) -> c_int {
        const FAULT_FLAG_USER: u64 = 1 << 6;
        let (flags, fault_regs) = (regs.arg(2), regs.arg(3));
        if fault_regs == 0 || flags & FAULT_FLAG_USER != 0 {
            return 0;
        }
        let Some(cur) = self.current_in(regs, u32::from(p.is_ftrace_based()), false) else {
            return 0;
        };
        if cur.ctx != Ctx::Task {
            return 0;
        }
        // SAFETY: a probe handler in `cur`'s own context.
        let Some((_, mut d)) = (unsafe { self.tree(&cur) }) else {
            return 0;
        };
        if d.wait.guard || d.stack.depth() == 0 {
            return 0;
        }
        let entry_sp = entry_retp(regs.sp());
        let sp = entry_sp + 8;
        // A fault inside a call left out (hidden by the filter) is left out with it.
        if d.stack.suppresses(sp) {
            return 0;
        }
        // Where the task faulted: the faulting instruction, as the call's site.
        let ip_at = fault_regs + sys::PC_OFFSET;
        let site = read_word(ip_at).unwrap_or(0);
        let rec = self.recorder_at(&cur, regs);
        self.stats.page_faults.fetch_add(1, Ordering::Relaxed);
        let max = self.settings.max_depth.load(Ordering::Relaxed) as usize;
        let depth = d.stack.depth();
        if (max != 0 && depth >= max) || depth >= MAX_FRAMES {
            d.stack
                .leaf(&rec, Reason::Depth, F_FAULT, func, site, sp, false);
            return 0;
        }
        match self.classify_call(&cur, &d, func, func, false, false) {
            Callee::Follow | Callee::Thunk => {
                if d.stack.open(&rec, func, site, F_FAULT, entry_sp, false) {
                    self.hook_return(entry_sp, regs);
                }
            }
            Callee::Hide => d.stack.suppress(sp, false),
            Callee::Leaf(r) | Callee::Unarmed(r) => {
                d.stack.leaf(&rec, r, F_FAULT, func, site, sp, false)
            }
            // (Armed when tracing starts; this hook sends no task to wait.)
            Callee::Wait => {
                self.want(func);
                d.stack
                    .leaf(&rec, Reason::EntryProbe, F_FAULT, func, site, sp, false);
            }
        }
        0
    }

    /// The entry of an interrupt handler (`irqs` option), running while a traced task is
    /// current: opens the tree of this interrupt context, shown marked.
    fn on_irq_root(&self, p: &Probe<Hook>, regs: &mut sys::PtRegs, ctx: Ctx, func: u64) -> c_int {
        if !self.settings.option(OptionName::Irqs) {
            return 0;
        }
        let Some(cur) = self.current_in(regs, u32::from(p.is_ftrace_based()), true) else {
            return 0;
        };
        if cur.ctx != ctx {
            return 0;
        }
        // A worker traced only for its work (`kworkers`): its interrupts only inside it.
        if self.only_as_worker(cur.tgid) && self.slot(cur.pid).is_none() {
            return 0;
        }
        // SAFETY: interrupt entry functions are entered with interrupts off, in `ctx`, on
        // this CPU.
        let Some((_, mut d)) = (unsafe { self.tree(&cur) }) else {
            return 0;
        };
        self.open_root(&cur, &mut d, func, regs);
        0
    }

    /// All-system-calls mode: `x64_sys_call()` is about to dispatch system call `nr`
    /// (`%esi`) to `sys_call_table[nr]`, with a tail jump in all but a few cases, so that
    /// function runs at this stack pointer: it opens the trace at depth 0. Only this one
    /// probe is hit by other tasks' system calls.
    fn on_syscall(&self, p: &Probe<Hook>, regs: &mut sys::PtRegs) -> c_int {
        let Some(cur) = self.current(regs, false) else {
            return 0;
        };
        let Some(slot) = self.claim_slot(cur.pid) else {
            return 0;
        };
        // SAFETY: we are `cur.pid`'s own handler.
        let Some(mut d) = (unsafe { self.data(slot) }) else {
            return 0;
        };
        if d.wait.guard {
            return 0;
        }
        let rec = self.recorder_at(&cur, regs);
        // A new system call: whatever is still open belongs to one whose return was not
        // seen (it left through a path no probe covers).
        d.stack.close_returning(&rec, u64::MAX, 0, 0, false);
        let target = self.syscall_target(regs);
        let hook_addr = p.addr();
        // A new trace, unless the task is back from the trampoline for this call.
        if d.wait.last_redirect != hook_addr {
            d.wait.nowait = false;
        }
        let Some(target) = target else {
            d.wait.last_redirect = 0;
            self.release_if_done(Some(slot), d);
            return 0;
        };
        let callee = self.classify_call(&cur, &d, target, hook_addr, false, false);
        if !matches!(callee, Callee::Wait) {
            d.wait.last_redirect = 0;
        }
        match callee {
            Callee::Follow => {
                d.stack.end_suppression();
                // x86-64: x64_sys_call() tail-calls (or calls) the system call here, its
                // own return is the system call's. arm64: the probe is on the call
                // (`BLR`), which the handler makes with the return hooked.
                let entry_sp = if cfg!(target_arch = "x86_64") {
                    regs.sp()
                } else {
                    callee_retp(regs.sp(), false)
                };
                if d.stack.open(&rec, target, hook_addr, 0, entry_sp, false) {
                    #[cfg(target_arch = "x86_64")]
                    self.hook_return(entry_sp, regs);
                    #[cfg(target_arch = "aarch64")]
                    {
                        // (A `BLR` is one word.)
                        self.hooked_call(regs, hook_addr + 4, target);
                        return 1;
                    }
                }
                return 0;
            }
            Callee::Wait => {
                if let Some(r) = self.wait_for(&mut d, hook_addr, target, false) {
                    r.apply(regs);
                    return 1;
                }
                rec.leaf_at(0, Reason::ArmFailed, target, hook_addr);
            }
            Callee::Leaf(r) => rec.leaf_at(0, r, target, hook_addr),
            Callee::Unarmed(r) => {
                rec.leaf_at(0, r, target, hook_addr);
                self.count(r);
            }
            // A preemption thunk is never a system call; were it one, it is unprobeable.
            Callee::Thunk => rec.leaf_at(0, Reason::Unprobeable, target, hook_addr),
            Callee::Hide => {}
        }
        self.release_if_done(Some(slot), d);
        0
    }

    /// The system call the root's probe sees called: x86-64, from `sys_call_table` by the
    /// number `x64_sys_call()` got; arm64, in the register `invoke_syscall()` calls
    /// through (it checked the number against the table's size).
    fn syscall_target(&self, regs: &sys::PtRegs) -> Option<u64> {
        #[cfg(target_arch = "aarch64")]
        return Some(regs.gpr(self.syscall_from.load(Ordering::Relaxed) as u8));
        #[cfg(target_arch = "x86_64")]
        {
            let nr = regs.arg(1) & 0xffff_ffff;
            let table = self.syscall_from.load(Ordering::Relaxed);
            (nr < MAX_SYSCALLS)
                .then(|| read_word(table + 8 * nr))
                .flatten()
        }
    }

    /// `do_exit()` entry: close the thread's frames; forget the process when its last
    /// thread goes.
    fn on_exit(&self, p: &Probe<Hook>, regs: &mut sys::PtRegs) -> c_int {
        let Some(cur) = self.current(regs, p.is_ftrace_based()) else {
            return 0;
        };
        if let Some(slot) = self.slot(cur.pid) {
            // SAFETY: we are `cur.pid`'s own handler.
            let Some(mut d) = (unsafe { self.data(slot) }) else {
                return 0;
            };
            d.stack.close_exiting(&self.recorder(&cur));
            d.wait.pending = 0;
            drop(d);
            self.release(slot);
        }
        // The process leaves `set_pid` at the `sched_process_exit` tracepoint, once its
        // last thread is counted out (`Tracer::task_exited`), tracing or not.
        0
    }

    /// `wake_up_new_task(p)` entry: with follow-forks, a traced process's child is traced.
    fn on_fork(&self, p: &Probe<Hook>, regs: &mut sys::PtRegs) -> c_int {
        if !self.settings.option(OptionName::FollowForks) {
            return 0;
        }
        let Some(cur) = self.current(regs, p.is_ftrace_based()) else {
            return 0;
        };
        // A worker traced only for its work (`kworkers`) passes on nothing.
        if self.only_as_worker(cur.tgid) {
            return 0;
        }
        // SAFETY: `wake_up_new_task`'s first argument is a live `task_struct`.
        let child = unsafe { sys::task_tgid(regs.arg(0)) };
        if child == cur.tgid || self.is_traced(child) {
            return 0;
        }
        self.mark_traced(child);
        if !self.traced.iter().any(|t| {
            t.compare_exchange(0, child, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        }) {
            self.stats.task_overflow.fetch_add(1, Ordering::Relaxed);
        }
        0
    }
}
