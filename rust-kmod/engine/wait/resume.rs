// SPDX-License-Identifier: GPL-2.0

//! arm64: where a task that a breakpoint sent to wait for arming goes on.
//!
//! x86-64's breakpoint handler pushes the probed instruction's address below the
//! interrupted stack pointer, and the trampoline returns there. arm64's cannot: the
//! exception return puts the stack pointer back where the breakpoint found it, and at a
//! call site or a function's entry any register may still be needed (a caller may keep a
//! value in x16 across a call of a function it knows does not change it), so none can
//! carry the address either. So the handler ([`Tracer::redirect`]) keeps the address for
//! the task here and sends it to `fctrace_bp_trampoline` with every register as it was.
//! The trampoline saves what C may change, waits, puts every register back and runs into
//! `fctrace_bp_resume`, a `NOP` that carries the resume probe, registered from the start
//! of tracing until no task can be on its way there: its handler takes the address back
//! and sends the task there, with every register as the breakpoint found it. The probed
//! instruction then runs again, and its probe finds the callee armed.
//!
//! A task without a kept address at the resume probe (none is, or kprobes was disabled
//! while it waited and it ran past the probe) has nowhere to go: as a return fctrace
//! cannot account for, it warns once and dies as after an oops.

use crate::engine::MAX_TASKS;
use crate::engine::{tracer, Tracer};
use crate::kprobe::{Handler, Probe};
use crate::sys::{self, Regs};
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use kernel::ffi::c_int;
use kernel::prelude::*;

/// Where one task goes on.
struct Place {
    /// The task ([`sys::current_task`]); 0: free. Not its thread ID: an exec from another
    /// thread of its process, while it waits, gives it that thread's ID (`de_thread()`
    /// swaps them with the leader's), and the exec'ing thread the leader's.
    task: AtomicU64,
    /// The probed instruction the task goes back to.
    addr: AtomicU64,
}

/// The places, one per traced thread at most (a task waits in one trampoline at a time).
pub(crate) struct Resumes {
    /// The resume probe is registered: breakpoints may send tasks to the trampoline.
    ready: AtomicBool,
    places: [Place; MAX_TASKS],
}

impl Resumes {
    pub(crate) fn new() -> Self {
        Resumes {
            ready: AtomicBool::new(false),
            places: [const {
                Place {
                    task: AtomicU64::new(0),
                    addr: AtomicU64::new(0),
                }
            }; MAX_TASKS],
        }
    }

    /// Whether breakpoints may send tasks to the trampoline.
    pub(crate) fn ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// No task has a place kept: none is between the breakpoint that sent it to the
    /// trampoline and the resume probe.
    pub(crate) fn idle(&self) -> bool {
        self.places
            .iter()
            .all(|p| p.task.load(Ordering::Acquire) == 0)
    }

    /// Keeps `addr` for `task`, which the caller is (its place, if it has one already).
    /// Returns false when every place is taken.
    pub(crate) fn claim(&self, task: u64, addr: u64) -> bool {
        if task == 0 {
            return false;
        }
        if let Some(p) = self.find(task) {
            p.addr.store(addr, Ordering::Release);
            return true;
        }
        for p in &self.places {
            if p.task
                .compare_exchange(0, task, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                p.addr.store(addr, Ordering::Release);
                return true;
            }
        }
        false
    }

    /// The place kept for `task`, which the caller is.
    fn find(&self, task: u64) -> Option<&Place> {
        (task != 0)
            .then(|| {
                self.places
                    .iter()
                    .find(|p| p.task.load(Ordering::Acquire) == task)
            })
            .flatten()
    }

    /// Takes back the address kept for `task`, which the caller is.
    fn take(&self, task: u64) -> Option<u64> {
        let p = self.find(task)?;
        let addr = p.addr.swap(0, Ordering::AcqRel);
        p.task.store(0, Ordering::Release);
        (addr != 0).then_some(addr)
    }
}

/// The resume probe's data: the probe on `fctrace_bp_resume`.
pub(crate) struct Resume;

impl Handler for Resume {
    // Every task that reaches it was sent by fctrace, traced or not any more.
    fn pre(_: &Probe<Resume>, regs: &mut sys::PtRegs) -> c_int {
        let to = tracer().and_then(|tr| tr.waits.resumes.take(sys::current_task()));
        // (Nowhere to go: the trampoline's lost path warns and kills the task.)
        regs.set_pc(to.unwrap_or_else(sys::bp_lost_addr));
        1
    }
}

/// The resume probe, registered: while it lives, breakpoints may send tasks to the
/// trampoline (`Resumes::ready` is set after the probe is registered, and cleared before
/// it is unregistered). It lives in `TracerInner::resume`, from the start of tracing
/// until, once tracing stopped, no task has a place kept (`unpin_when_returned`, and the
/// module's exit, which waits for them).
pub(crate) struct ResumeHook(Pin<KBox<Probe<Resume>>>);

impl ResumeHook {
    /// Registers the probe on `fctrace_bp_resume`, for the published tracer `tr`. Not
    /// while the dead end is unknown: a task the probe finds with nowhere to go dies
    /// there.
    pub(crate) fn register(tr: &Tracer) -> Option<Self> {
        if !sys::dead_end_known() {
            return None;
        }
        let mut probe = KBox::pin(Probe::at(sys::bp_resume_addr(), Resume), GFP_KERNEL).ok()?;
        probe.as_mut().register().ok()?;
        tr.waits.resumes.ready.store(true, Ordering::Release);
        Some(ResumeHook(probe))
    }
}

impl Drop for ResumeHook {
    /// Called once no breakpoint can send a task to the trampoline (every other probe
    /// is unregistered) and no task has a place kept ([`Resumes::idle`]): the probe goes
    /// after (the field is dropped after this).
    fn drop(&mut self) {
        if let Some(tr) = tracer() {
            tr.waits.resumes.ready.store(false, Ordering::Release);
        }
    }
}

/// Called by `fctrace_bp_trampoline` (see `trampoline_arm64.S`) for its frame record:
/// where the task goes on (0: nowhere known, the record ends the unwind there).
#[no_mangle]
pub(crate) extern "C" fn fctrace_bp_resume_addr() -> u64 {
    tracer()
        .and_then(|tr| tr.waits.resumes.find(sys::current_task()))
        .map_or(0, |p| p.addr.load(Ordering::Acquire))
}

/// Called on `fctrace_bp_lost_site` (see `trampoline_arm64.S`), where a task that ran
/// past the resume probe dies: gives its place back, if it had one, so that the module can
/// let go of itself.
#[no_mangle]
pub(crate) extern "C" fn fctrace_bp_forget() {
    if let Some(tr) = tracer() {
        let _ = tr.waits.resumes.take(sys::current_task());
    }
}

/// Called by `fctrace_bp_trampoline`: waits for the callee to be armed (or the reader,
/// with `lossless`), as `fctrace_arm_pending` does on x86-64.
#[no_mangle]
pub(crate) extern "C" fn fctrace_arm_pending_bp() {
    if let Some(tr) = tracer() {
        tr.arm_pending(None);
    }
}
