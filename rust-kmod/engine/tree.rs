// SPDX-License-Identifier: GPL-2.0

//! Call trees: which tree a probe hit belongs to (a traced thread's, or the interrupt
//! context's of a CPU where a traced task is current), and the records it adds.
//!
//! Each traced thread inside a trace has a slot with a [`ShadowStack`] of frames (its
//! rules are in `crates/fctrace-core/src/shadow.rs`) and its waiting state.

use super::site::{Expect, Step};
use super::{clock_ns, this_cpu, Tracer, MAX_TASKS};
use crate::parse::OptionName;
use crate::record::{Kind, Reason, Record, F_IRQ, F_SOFTIRQ};
use crate::shadow::{ArgsDone, ShadowStack, Sink};
use crate::sys;
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use kernel::alloc::KVVec;
use kernel::prelude::*;

/// The context a probe hit runs in, for a traced task that is current.
pub(crate) use crate::sys::RunCtx as Ctx;

/// The traced task a handler runs for.
pub(crate) struct Cur {
    pub(crate) pid: u32,
    pub(crate) tgid: u32,
    /// The task may wait for arming at the probed instruction: sleep, or, in a wait
    /// loop's state (not `TASK_RUNNING`), poll (see `fctrace_task_context()`).
    pub(crate) sleepable: bool,
    pub(crate) ctx: Ctx,
}

/// A thread's waiting state, beside its shadow stack.
pub(crate) struct WaitState {
    /// The task is in fctrace's own arming path (the trampoline).
    pub(crate) guard: bool,
    /// The function the task waits for in the trampoline (0: none).
    pub(crate) pending: u64,
    /// Sent to the trampoline to wait for the reader (`lossless`).
    pub(crate) throttle: bool,
    /// The call site the task last waited at (`lossless`): when the task makes the call
    /// again after waiting, it goes on.
    pub(crate) last_throttle: u64,
    /// The call site the task was last sent to the trampoline from: when it makes that
    /// call again, it does not wait again.
    pub(crate) last_redirect: u64,
    /// A wait for arming timed out in this trace (system call or start-function call):
    /// the task likely holds something arming needs, so until the trace ends its calls to
    /// unarmed functions are not waited for (shown as `arming timed out`, armed ahead).
    pub(crate) nowait: bool,
}

impl WaitState {
    pub(crate) const EMPTY: WaitState = WaitState {
        guard: false,
        pending: 0,
        throttle: false,
        last_throttle: 0,
        last_redirect: 0,
        nowait: false,
    };

    /// Forgets a state from before the last (de)activation (`nowait` is reset when a
    /// trace starts).
    pub(crate) fn reset(&mut self) {
        *self = WaitState {
            nowait: self.nowait,
            ..WaitState::EMPTY
        };
    }
}

/// One call tree: its frames and the waiting state of its thread.
pub(crate) struct TaskData {
    /// The tracer generation this data belongs to (older data is reset).
    gen: u32,
    pub(crate) stack: ShadowStack,
    pub(crate) wait: WaitState,
    /// A single step from a pre-site to its call site in progress (see `step.rs`).
    pub(crate) step: Option<Step>,
    /// An indirect call whose target the pre-site computed, for its entry hook to draw
    /// (see `step.rs`).
    pub(crate) expect: Option<Expect>,
}

impl TaskData {
    const EMPTY: TaskData = TaskData {
        gen: 0,
        stack: ShadowStack::EMPTY,
        wait: WaitState::EMPTY,
        step: None,
        expect: None,
    };
}

/// One traced thread inside a trace.
///
/// # Invariants
///
/// `data` is only accessed by the thread whose id is in `pid`, from its own context (its
/// probe handlers and entry and return hooks, or the trampoline); a slot is claimed and
/// released by that thread with atomic operations on `pid`. Those handlers can nest: one
/// runs with interrupts on (ftrace-based kprobes, an optimized probe's detour), or code
/// it calls (a string copy, a user copy) reaches another probe. So `data` is reached only
/// through a [`TreeRef`], which holds `busy`: a handler nested in one that holds it finds
/// the tree busy and leaves it alone (`stats`: `handlers_nested`).
pub(crate) struct TaskSlot {
    pid: AtomicU32,
    busy: AtomicBool,
    data: UnsafeCell<TaskData>,
}

// SAFETY: see the invariant: `data` is never shared between threads, and `busy` keeps
// the thread's own nested handlers out of it.
unsafe impl Sync for TaskSlot {}

/// The call tree of one interrupt context (hard or soft) of one CPU, while a traced task
/// is current there (`irqs` option).
///
/// # Invariants
///
/// `data` is only accessed on its CPU, in its context, through a [`TreeRef`] holding
/// `busy`. Hard interrupts do not nest, nor do softirqs, and each kind has its own slot;
/// a probe hit inside a handler of that context (which `busy` turns away) is the only
/// other way in.
struct IrqSlot {
    busy: AtomicBool,
    data: UnsafeCell<TaskData>,
}

// SAFETY: see the invariant: `data` is only used from one CPU, one context, one handler
// at a time.
unsafe impl Sync for IrqSlot {}

/// The one mutable reference to a call tree's data, held by one handler (or the
/// trampoline) of the tree's own thread or context: dropping it lets the next one in.
pub(crate) struct TreeRef<'a> {
    data: &'a mut TaskData,
    busy: &'a AtomicBool,
}

impl core::ops::Deref for TreeRef<'_> {
    type Target = TaskData;
    fn deref(&self) -> &TaskData {
        self.data
    }
}

impl core::ops::DerefMut for TreeRef<'_> {
    fn deref_mut(&mut self) -> &mut TaskData {
        self.data
    }
}

impl Drop for TreeRef<'_> {
    fn drop(&mut self) {
        self.busy.store(false, Ordering::Release);
    }
}

/// Every call tree: one slot per thread inside a trace, two per CPU for interrupts.
pub(crate) struct Trees {
    tasks: KVVec<TaskSlot>,
    /// Two per CPU: softirq, hard interrupt.
    irqs: KVVec<IrqSlot>,
    /// The index of the slot found last: looked at first (a hint, checked against the
    /// slot's thread id; one traced thread finds its slot at once).
    hint: AtomicUsize,
}

impl Trees {
    pub(crate) fn new() -> Result<Self> {
        let mut tasks = KVVec::with_capacity(MAX_TASKS, GFP_KERNEL)?;
        for _ in 0..MAX_TASKS {
            tasks.push(
                TaskSlot {
                    pid: AtomicU32::new(0),
                    busy: AtomicBool::new(false),
                    data: UnsafeCell::new(TaskData::EMPTY),
                },
                GFP_KERNEL,
            )?;
        }
        let cpus = sys::nr_cpu_ids() as usize;
        let mut irqs = KVVec::with_capacity(2 * cpus, GFP_KERNEL)?;
        for _ in 0..2 * cpus {
            irqs.push(
                IrqSlot {
                    busy: AtomicBool::new(false),
                    data: UnsafeCell::new(TaskData::EMPTY),
                },
                GFP_KERNEL,
            )?;
        }
        Ok(Trees {
            tasks,
            irqs,
            hint: AtomicUsize::new(0),
        })
    }

    /// Frees every thread slot (no thread can be using one: called at activation with
    /// no task in the trampoline).
    pub(crate) fn release_all(&self) {
        for s in self.tasks.iter() {
            s.pid.store(0, Ordering::Release);
        }
    }
}

/// Where a tree's records go: the ring buffer, stamped with the current task and CPU.
pub(crate) struct Recorder<'a> {
    pub(crate) tr: &'a Tracer,
    pub(crate) cur: &'a Cur,
    /// The registers at the call being drawn, where they hold its arguments (`args`).
    pub(crate) regs: Option<&'a sys::PtRegs>,
}

impl Recorder<'_> {
    /// Fills in the context fields of `r`.
    fn stamp(&self, r: &mut Record) {
        r.flags |= match self.cur.ctx {
            Ctx::Task => 0,
            Ctx::SoftIrq => F_SOFTIRQ,
            Ctx::HardIrq => F_IRQ,
        };
        r.pid = self.cur.pid;
        r.tgid = self.cur.tgid;
        sys::current_comm(&mut r.comm);
    }
}

impl Sink for Recorder<'_> {
    fn emit(&self, r: &mut Record) {
        self.stamp(r);
        self.tr.write(r);
    }

    fn args(&self, func: u64, depth: usize, ts: u64) -> ArgsDone {
        let Some(regs) = self.regs else {
            return ArgsDone::default();
        };
        if !self.tr.settings.option(OptionName::Args) {
            return ArgsDone::default();
        }
        let mut r = Record::ZERO;
        self.stamp(&mut r);
        self.tr.write_args(&mut r, regs, func, depth, ts)
    }

    fn late_args(&self, func: u64, depth: usize, ts: u64, reg: u8, ptr: u64) {
        let mut r = Record::ZERO;
        self.stamp(&mut r);
        self.tr.write_late_args(&mut r, func, depth, ts, reg, ptr)
    }

    fn now(&self) -> u64 {
        clock_ns()
    }

    fn enter(&self, func: u64, now: u64) -> u32 {
        self.tr.table.enter(func, now)
    }

    fn leave(&self, entry: u32) {
        self.tr.table.leave(entry)
    }

    fn count(&self, reason: Reason) {
        self.tr.count(reason)
    }
}

impl Recorder<'_> {
    /// Records a leaf at `depth` without touching a stack (a system call that is not
    /// followed: no tree is open).
    pub(crate) fn leaf_at(&self, depth: usize, reason: Reason, func: u64, site: u64) {
        let mut r = Record::ZERO;
        r.kind = Kind::Leaf as u8;
        r.depth = depth.min(255) as u8;
        r.reason = reason as u8;
        r.func = func;
        r.site = site;
        r.ts = self.now();
        self.emit(&mut r);
    }
}

impl Tracer {
    /// The current task, if it is traced and ran the probed instruction in task context.
    pub(crate) fn current(&self, regs: &sys::PtRegs, via_ftrace: bool) -> Option<Cur> {
        self.current_in(regs, u32::from(via_ftrace), false)
    }

    /// The current task, if it is traced, and the context of the probed instruction: the
    /// task's own, or (with `irqs`) an interrupt running while it is current. `via_ftrace`:
    /// 0 for an int3 handler, else the preemption levels the ftrace callback took.
    pub(crate) fn current_in(
        &self,
        regs: &sys::PtRegs,
        via_ftrace: u32,
        irqs: bool,
    ) -> Option<Cur> {
        if !self.active.load(Ordering::Acquire) {
            return None;
        }
        let (pid, tgid) = current_ids();
        if !self.current_traced(tgid) {
            return None;
        }
        let (ctx, sleepable) = sys::task_context(regs, via_ftrace, irqs)?;
        Some(Cur {
            pid,
            tgid,
            sleepable,
            ctx,
        })
    }

    /// The call tree `cur` adds to: its thread's (`Some(slot)`), or its CPU's interrupt
    /// context's (`None`). `None` when it has none, or a handler it runs inside holds it.
    ///
    /// # Safety
    ///
    /// Called from a handler running in `cur`'s context (its thread, or its interrupt
    /// context on this CPU, where it cannot migrate).
    pub(crate) unsafe fn tree(&self, cur: &Cur) -> Option<(Option<&TaskSlot>, TreeRef<'_>)> {
        match cur.ctx {
            Ctx::Task => {
                let slot = self.slot(cur.pid)?;
                // SAFETY: by the caller's contract we are `cur.pid`'s own handler.
                Some((Some(slot), unsafe { self.data(slot) }?))
            }
            Ctx::SoftIrq | Ctx::HardIrq => {
                let i = 2 * this_cpu() as usize + usize::from(cur.ctx == Ctx::HardIrq);
                let slot = self.trees.irqs.get(i)?;
                // SAFETY: by the caller's contract we run on this CPU in this context:
                // the `IrqSlot` invariant, with `busy` taken by `enter`.
                unsafe { self.enter(&slot.busy, &slot.data) }.map(|d| (None, d))
            }
        }
    }

    /// The slot of thread `pid`, if it has one.
    pub(crate) fn slot(&self, pid: u32) -> Option<&TaskSlot> {
        let (tasks, hint) = (&self.trees.tasks, &self.trees.hint);
        let h = hint.load(Ordering::Relaxed);
        if let Some(s) = tasks
            .get(h)
            .filter(|s| s.pid.load(Ordering::Relaxed) == pid)
        {
            return Some(s);
        }
        let i = tasks
            .iter()
            .position(|s| s.pid.load(Ordering::Relaxed) == pid)?;
        hint.store(i, Ordering::Relaxed);
        tasks.get(i)
    }

    /// The slot of thread `pid`, claimed if it has none (counted when all are taken).
    pub(crate) fn claim_slot(&self, pid: u32) -> Option<&TaskSlot> {
        if let Some(s) = self.slot(pid) {
            return Some(s);
        }
        let s = self.trees.tasks.iter().find(|s| {
            s.pid
                .compare_exchange(0, pid, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        });
        if s.is_none() {
            self.stats.task_overflow.fetch_add(1, Ordering::Relaxed);
        }
        s
    }

    /// The slot's data for its own thread, reset if it is from before the last
    /// (de)activation; `None` while a handler this one runs inside holds it.
    ///
    /// # Safety
    ///
    /// Called only by the thread `slot.pid` names.
    pub(crate) unsafe fn data<'a>(&self, slot: &'a TaskSlot) -> Option<TreeRef<'a>> {
        // SAFETY: the caller's contract and `busy`: the `TaskSlot` invariant.
        unsafe { self.enter(&slot.busy, &slot.data) }
    }

    /// Takes `busy` and gives the data of `cell`, fresh; `None` (counted) if it was
    /// taken: a handler nested in one that holds it.
    ///
    /// # Safety
    ///
    /// `busy` guards `cell`, and only the one thread or context owning it calls this
    /// (so the flag needs no atomic read-modify-write: what nests inside a holder runs to
    /// its end before the holder goes on).
    unsafe fn enter<'a>(
        &self,
        busy: &'a AtomicBool,
        cell: &'a UnsafeCell<TaskData>,
    ) -> Option<TreeRef<'a>> {
        if busy.load(Ordering::Acquire) {
            self.stats.handlers_nested.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        busy.store(true, Ordering::Release);
        // SAFETY: `busy` was clear and is ours now: no other reference to the data lives
        // (the caller's contract keeps other threads and contexts out).
        let d = unsafe { &mut *cell.get() };
        let gen = self.gen();
        if d.gen != gen {
            d.gen = gen;
            d.stack.reset();
            d.wait.reset();
            // A step of an earlier session: its trap, if it comes, is an orphan's
            // (`step::on_debug`), which ends its mark.
            d.step = None;
            d.expect = None;
        }
        Some(TreeRef { data: d, busy })
    }

    /// Frees `slot` once its tree is empty and its thread waits for nothing.
    /// The tree is let go first: a thread that claims the slot next finds it free.
    pub(crate) fn release_if_done(&self, slot: Option<&TaskSlot>, d: TreeRef<'_>) {
        let done = d.stack.depth() == 0 && d.wait.pending == 0;
        drop(d);
        if let Some(slot) = slot.filter(|_| done) {
            slot.pid.store(0, Ordering::Release);
        }
    }

    /// Frees `slot` (its thread exits).
    pub(crate) fn release(&self, slot: &TaskSlot) {
        slot.pid.store(0, Ordering::Release);
    }

    /// Gives `slot` to its thread's new ID `pid` (an exec from a thread other than the
    /// leader). Called by that thread.
    pub(crate) fn rename(&self, slot: &TaskSlot, pid: u32) {
        slot.pid.store(pid, Ordering::Release);
    }

    /// Writes a record to the buffer (its `cpu` set to this CPU's).
    fn write(&self, r: &mut Record) {
        self.buf.write(r);
    }
}

pub(crate) use crate::sys::{current_ids, task_running};

impl Tracer {
    /// Where `cur`'s records go.
    pub(crate) fn recorder<'a>(&'a self, cur: &'a Cur) -> Recorder<'a> {
        Recorder {
            tr: self,
            cur,
            regs: None,
        }
    }

    /// Where `cur`'s records go, for a call whose arguments are in `regs`.
    pub(crate) fn recorder_at<'a>(&'a self, cur: &'a Cur, regs: &'a sys::PtRegs) -> Recorder<'a> {
        Recorder {
            tr: self,
            cur,
            regs: Some(regs),
        }
    }
}
