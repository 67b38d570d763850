// SPDX-License-Identifier: GPL-2.0

//! Waiting, in the traced task and in the work item: the trampoline handshake
//! (`trampoline.rs`), arming ahead (`ahead.rs`), the closure armed for a waiting task
//! (`closure.rs`), the lossless throttle (`throttle.rs`) and the work item (`work.rs`).
//! This file holds their shared state, [`Waits`], and their limits.

mod ahead;
mod closure;
#[cfg(target_arch = "aarch64")]
pub(crate) mod resume;
mod throttle;
mod trampoline;
mod work;

use super::table::{FuncState, HOOK_ENTRY, HOOK_PROBE};
use super::tree::TaskData;
use super::{
    clock_ns, kernel_text, read_word, this_cpu, tracer, Guard, Tracer, TracerInner, DEFER_SYNC,
    MAX_TASKS,
};
use crate::emulate;
use crate::ksym::SymBuf;
use crate::parse::OptionName;
use crate::sys;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use kernel::alloc::KVec;
use kernel::prelude::*;

/// Functions waiting to be armed ahead.
const WANTED: usize = 256;
/// Functions waiting to be armed ahead that no call in atomic context asked for
/// (`Tracer::want_later`).
const LATER: usize = 64;
/// Ops tables waiting to be read for arming ahead (`Tracer::want_table`).
const TABLES: usize = 16;
/// The largest object read as an ops table (`struct sched_class` is 232 bytes, `struct
/// file_operations` 272).
const TABLE_MAX: u64 = 1024;
/// Whether an entry hook can send a task to wait ([`Tracer::redirect_entry`]): on x86-64,
/// and on arm64 where ftrace can go on to a direct trampoline
/// (`CONFIG_DYNAMIC_FTRACE_WITH_DIRECT_CALLS`: `fctrace_entry_trampoline` is one).
pub(crate) const CAN_REDIRECT_ENTRY: bool = cfg!(target_arch = "x86_64")
    || cfg!(all(
        target_arch = "aarch64",
        CONFIG_DYNAMIC_FTRACE_WITH_DIRECT_CALLS
    ));

/// The most functions one round of arming ahead adds (a callee closure is cut there).
const AHEAD_BUDGET: usize = 256;
/// How often a round of arming ahead tries the mutex while a control-file write has it.
const AHEAD_POLL_MS: u32 = 10;
/// The round that arms what tracing's start queued (the exit path, the fork hook, the
/// scheduler and its classes: `Tracer::activate`) goes on past `AHEAD_BUDGET`, up to
/// this many functions, while it has taken less than `START_NS`: the first run makes its
/// calls there in atomic context, and cut at `AHEAD_BUDGET` the closure left `fork()`'s
/// first run 10 functions `not followed: atomic` (2 to 4 with 1024; the default kernel's
/// whole closure, 682 functions, took 1.5 s). The time bound keeps the debug kernel,
/// which arms a function in tens of milliseconds, near `AHEAD_BUDGET`.
const START_BUDGET: usize = 1024;
const START_NS: u64 = 3_000_000_000;
/// How many levels of direct callees are armed ahead below a function first called in
/// atomic context. Deeper calls are learned the same way on later runs.
const AHEAD_DEPTH: u8 = 4;
/// Levels of callees of a function armed for a waiting task that are armed before the
/// task goes on, the most functions armed so, and the most time it may take
/// (`Tracer::arm_sync_closure`). (`trace/atomic_edge.tc`'s chain is as deep: its last
/// function must sit at the edge.)
const SYNC_DEPTH: u8 = 4;
const SYNC_BUDGET: usize = 128;
const SYNC_NS: u64 = 1_000_000_000;
/// The longest a request is served (`Tracer::serve_requests`): the closure above, then
/// the callees with an entry probe of the functions it armed, until this much time after
/// the request was taken. What is left is armed where a task reaches it. (Without the
/// bound, on the debug kernel under emulation, those of `handle_pte_fault()`'s closure
/// took 11 s, and the task's wait for it timed out at `arm_wait_ms`.)
const SERVE_NS: u64 = 2_000_000_000;
/// A traced task that enters an armed function with fewer levels armed below it than this
/// (`FuncTable::below`), where it may sleep, waits once for a closure below it.
pub(super) const MIN_BELOW: u8 = 2;
/// The most functions that closure looks at (armed ones included).
const SYNC_WALK: usize = 1024;
/// The most direct callees of such a function queued for arming ahead when that stops.
const WANT_CALLEES: usize = 48;
/// The most callees with an entry probe armed with a function a task waited for (see
/// [`Tracer::arm_probe_closure`]).
const PROBE_CLOSURE: usize = 64;
/// The most functions one round of arming ahead looks at (armed ones included).
const AHEAD_WALK: usize = 4096;
/// Arming ahead gives the callees of this many functions their entry hooks at once.
const AHEAD_BATCH: usize = 32;

/// The work item's queues.
pub(crate) struct Waits {
    /// Tasks sent to the trampoline that have not left `fctrace_arm_pending` yet.
    inflight: AtomicUsize,
    /// Functions traced tasks wait in the trampoline for the work item to arm (0 = free
    /// slot). A task claims a slot, the work item clears it when done.
    requests: [AtomicU64; MAX_TASKS],
    /// Functions called in atomic context before they were armed, for the work item to
    /// arm ahead (0 = free slot). Written by handlers, drained by the work item.
    wanted: [AtomicU64; WANTED],
    wanted_next: AtomicUsize,
    /// What else is to be armed ahead (0 = free slot), taken after `wanted`: armed
    /// functions entered in atomic context with fewer than `MIN_BELOW` levels armed below
    /// them, the callees of closures cut at their limit. A queue of their own: they once
    /// filled the free places of `wanted`, and the calls not followed in atomic context
    /// overwrote each other there (`atomic_warmup.tc` in CI: 25 of 59).
    later: [AtomicU64; LATER],
    /// Slots of ops tables a function not armed yet was called through in atomic context
    /// (0 = free): the table's other methods are armed ahead too. Written by handlers,
    /// drained by the work item.
    tables: [AtomicU64; TABLES],
    /// The work item is arming what it took from `wanted` (counted as pending).
    ahead_busy: AtomicBool,
    /// The work item is arming what a task waits for, with its closure (counted as
    /// pending too: the task may have stopped waiting, and then it is arming ahead).
    serving: AtomicBool,
    /// What is queued in `wanted` was queued by tracing's start: the next round may arm
    /// up to `START_BUDGET` functions.
    start_round: AtomicBool,
    /// Until when (`clock_ns()`) a traced task that waits for arming also waits for the
    /// start round to end (0: it has ended). See `Tracer::wait_armed`.
    start_until: AtomicU64,
    /// `lossless`: the readers' progress count ([`reader_progress`]) when a task last gave
    /// up waiting for them; while it is unchanged, no task waits. `u64::MAX`: none.
    stalled_at: AtomicU64,
    /// arm64: where each task a breakpoint sent to the trampoline goes on.
    #[cfg(target_arch = "aarch64")]
    pub(crate) resumes: resume::Resumes,
}

impl Waits {
    pub(crate) fn new() -> Self {
        Waits {
            inflight: AtomicUsize::new(0),
            requests: [const { AtomicU64::new(0) }; MAX_TASKS],
            wanted: [const { AtomicU64::new(0) }; WANTED],
            wanted_next: AtomicUsize::new(0),
            later: [const { AtomicU64::new(0) }; LATER],
            tables: [const { AtomicU64::new(0) }; TABLES],
            ahead_busy: AtomicBool::new(false),
            serving: AtomicBool::new(false),
            start_round: AtomicBool::new(false),
            start_until: AtomicU64::new(0),
            stalled_at: AtomicU64::new(u64::MAX),
            #[cfg(target_arch = "aarch64")]
            resumes: resume::Resumes::new(),
        }
    }

    /// No task is in the trampoline.
    pub(crate) fn none_inflight(&self) -> bool {
        self.inflight.load(Ordering::Acquire) == 0
    }

    /// Tasks in the trampoline now (sent there and not out of `fctrace_arm_pending` yet).
    pub(crate) fn inflight(&self) -> usize {
        self.inflight.load(Ordering::Relaxed)
    }

    /// Drops what is queued for arming ahead (tracing stopped).
    pub(crate) fn clear_wanted(&self) {
        for w in Iterator::chain(self.wanted.iter(), self.later.iter()) {
            w.store(0, Ordering::Relaxed);
        }
        for w in self.tables.iter() {
            w.store(0, Ordering::Relaxed);
        }
        self.start_round.store(false, Ordering::Relaxed);
        self.start_until.store(0, Ordering::Release);
    }

    /// Tracing starts: the next round of arming ahead is the start round, and until it
    /// ends (at most `START_NS` and a second from now) a task that waits for arming waits
    /// for it too.
    pub(crate) fn start(&self) {
        self.start_round.store(true, Ordering::Release);
        let until = clock_ns().saturating_add(START_NS + 1_000_000_000);
        self.start_until.store(until, Ordering::Release);
    }
}

/// Wakes the tasks waiting in the trampoline (they check their requests).
pub(crate) fn wake_armed() {
    sys::arm_wake();
}

impl Tracer {
    /// Whether a task can be sent to wait ([`Tracer::redirect`]) from a hook of this kind:
    /// an entry hook (`entry`: [`CAN_REDIRECT_ENTRY`]) or a breakpoint (always on x86-64;
    /// on arm64 while the resume probe is registered, `resume.rs`).
    pub(crate) fn can_redirect(&self, entry: bool) -> bool {
        if entry {
            return CAN_REDIRECT_ENTRY;
        }
        #[cfg(target_arch = "aarch64")]
        return self.waits.resumes.ready();
        #[cfg(not(target_arch = "aarch64"))]
        return true;
    }
}
