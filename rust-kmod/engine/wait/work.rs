// SPDX-License-Identifier: GPL-2.0

//! The work item: one pass serves the waiting tasks' requests, then arms ahead; and the wait
//! for it to be idle at unload.

use super::*;

impl Tracer {
    /// Queues the work item (from any context: through an irq_work).
    pub(crate) fn kick_work(&self) {
        sys::schedule_sync();
    }

    /// The work item: tracing ends when no traced process is left; otherwise tasks in the
    /// trampoline are served and functions first called in atomic context armed ahead.
    pub(super) fn sync_work(&self) {
        self.log_privileged_exec();
        self.log_unclaimed_step();
        // Arming time does not count toward `disarm_after` (see `IdleClock`).
        let idle = self.table.idle_clock();
        idle.begin();
        self.sync_pass();
        idle.end();
    }

    /// The work of [`Tracer::sync_work`].
    pub(super) fn sync_pass(&self) {
        let Some(mut inner) = self.lock_or_defer(DEFER_SYNC) else {
            return;
        };
        if self.stop_if_inconsistent(&mut inner) || !self.active.load(Ordering::Acquire) {
            return;
        }
        self.serve_requests(&mut inner);
        if !self.tracing_wanted() {
            self.deactivate(&mut inner);
            return;
        }
        self.waits.ahead_busy.store(true, Ordering::Release);
        drop(inner);
        self.arm_ahead();
        self.waits.ahead_busy.store(false, Ordering::Release);
        let Some(mut inner) = self.lock_or_defer(DEFER_SYNC) else {
            return;
        };
        if self.active.load(Ordering::Acquire) && !self.tracing_wanted() {
            self.deactivate(&mut inner);
        }
    }

    /// Module unload, after tracing stopped: waits until no task is in the trampoline and
    /// no work item can run.
    pub(crate) fn wait_idle(&self) {
        // No probe is registered any more, so no task enters the trampoline; wait for those
        // still in it to leave `fctrace_arm_pending` (waiting ones saw `active` false when
        // deactivate woke them), then for them to be off its last instructions (a task
        // preempted there has not passed a voluntary switch).
        while !self.waits.none_inflight() {
            sys::msleep(10);
        }
        // Only now can no task in the trampoline queue the work items for its request:
        // cancel them for good, waiting for a running one to finish. The exec and exit
        // hooks stay registered until every hooked return came back; a traced process
        // that executes a set-user-ID program meanwhile no longer queues them.
        sys::cancel_work();
        sys::synchronize_rcu_tasks();
    }
}

/// Called from the module's work item (see [`Tracer::sync_work`]).
#[no_mangle]
pub(crate) extern "C" fn fctrace_sync_work() {
    if let Some(tr) = tracer() {
        tr.sync_work();
    }
}
