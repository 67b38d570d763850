// SPDX-License-Identifier: GPL-2.0

//! Waiting, in the traced task and in the work item: the trampoline handshake (a task
//! sent to `fctrace_trampoline` waits there for the work item to arm its callee), arming
//! ahead (callees first called in atomic context, armed for the next run), and lossless
//! throttling (a task waits for the reader instead of losing events).

use super::table::{FuncState, HOOK_ENTRY, HOOK_PROBE};
use super::tree::{current_ids, task_running, Cur, TaskData};
use super::{clock_ns, kernel_text, read_word, this_cpu, tracer, Tracer, TracerInner, MAX_TASKS};
use crate::bindings;
use crate::emulate;
use crate::kprobe;
use crate::ksym::SymBuf;
use crate::parse::OptionName;
use crate::record::Reason;
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
/// The most functions one round of arming ahead adds (a callee closure is cut there).
const AHEAD_BUDGET: usize = 256;
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
/// (`Tracer::arm_sync_closure`).
const SYNC_DEPTH: u8 = 3;
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

impl Tracer {
    /// Whether the task may wait in the trampoline for a callee to be armed: it can sleep,
    /// no wait timed out in this trace, and `arm_wait_ms` is not 0.
    pub(crate) fn may_wait(&self, cur: &Cur, d: &TaskData) -> bool {
        cur.sleepable && !d.wait.nowait && self.settings.arm_wait_ms.load(Ordering::Relaxed) != 0
    }

    /// Why a call to an unarmed function is a leaf: the task could not wait (atomic
    /// context), or it was not to wait (`nowait`, `arm_wait_ms` 0), or it waited but
    /// arming failed.
    pub(crate) fn unarmed_reason(&self, cur: &Cur, d: &TaskData) -> Reason {
        if !cur.sleepable {
            Reason::Atomic
        } else if !self.may_wait(cur, d) {
            Reason::ArmTimeout
        } else {
            Reason::ArmFailed
        }
    }

    /// Sends the task to the trampoline to arm `target`, then to run the instruction at
    /// `addr` again: pushes `addr` as a return address (the int3 entry leaves a gap below
    /// the interrupted stack for exactly this) and resumes at the trampoline.
    pub(crate) fn redirect(
        &self,
        d: &mut TaskData,
        regs: &mut bindings::pt_regs,
        addr: u64,
        target: u64,
    ) {
        self.note_redirect(d, addr, target);
        self.waits.inflight.fetch_add(1, Ordering::AcqRel);
        // SAFETY: a C accessor of a constant address.
        let trampoline = unsafe { bindings::fctrace_trampoline_addr() } as u64;
        // Our redirecting probes are breakpoints (or the single step of `step.rs`).
        kprobe::emulate_call(regs, addr, trampoline);
    }

    /// A redirect to a trampoline from `key` (a call site, or an ftrace site) to arm
    /// `target`: the task does not wait again when it comes back to `key`.
    fn note_redirect(&self, d: &mut TaskData, key: u64, target: u64) {
        d.wait.last_redirect = key;
        d.wait.pending = target;
        self.stats.redirects.fetch_add(1, Ordering::Relaxed);
    }

    /// From the entry hook at ftrace site `ip` (see `entry.rs`): sends the task to
    /// `fctrace_entry_trampoline` to arm `func`, then to run the ftrace site again. ftrace's
    /// trampoline returns to `regs.ip`, and restores `%rax` (which carries no argument into
    /// a function) from `regs.ax`: the entry trampoline pushes it as its return address.
    pub(crate) fn redirect_entry(
        &self,
        d: &mut TaskData,
        regs: &mut bindings::pt_regs,
        ip: u64,
        func: u64,
    ) {
        // Counted into `inflight` by the trampoline (`fctrace_arm_pending_entry`).
        self.note_redirect(d, ip, func);
        // SAFETY: a C accessor of a constant address.
        regs.ip = unsafe { bindings::fctrace_entry_trampoline_addr() } as _;
        regs.ax = ip as _;
    }

    /// Tasks in the trampoline now (`stats`: `trampoline_tasks`).
    pub(crate) fn trampoline_tasks(&self) -> usize {
        self.waits.inflight()
    }

    /// `lossless`: sends the task to the trampoline to wait for the reader, then to make
    /// the call at `addr` again (which may still need an arming redirect then).
    pub(crate) fn redirect_throttle(
        &self,
        d: &mut TaskData,
        regs: &mut bindings::pt_regs,
        addr: u64,
    ) {
        d.wait.throttle = true;
        d.wait.last_throttle = addr;
        let last = d.wait.last_redirect;
        self.redirect(d, regs, addr, 0);
        d.wait.last_redirect = last;
    }

    /// `lossless`: whether a traced task about to add events should first wait for the
    /// reader (the buffer of its CPU is more than half full and someone reads).
    pub(crate) fn should_throttle(&self) -> bool {
        self.settings.option(OptionName::Lossless)
            && self.readers.load(Ordering::Relaxed) != 0
            && self.buf.fill_permille(this_cpu()) > 500
            && self.waits.stalled_at.load(Ordering::Relaxed) != reader_progress()
    }

    /// `lossless`, in the trampoline (the task may sleep): waits until every sub-buffer is
    /// at most a quarter full, the reader goes away, tracing stops, or a signal comes; or
    /// until the readers have taken nothing for [`LOSSLESS_STALL_MS`] (a reader stopped
    /// with SIGSTOP, say: the task may hold `mmap_lock` or an inode's lock). Then no task
    /// waits again until a reader takes something: events are lost, and counted, instead.
    fn throttle_wait(&self) {
        self.stats.lossless_waits.fetch_add(1, Ordering::Relaxed);
        let mut seen = reader_progress();
        let mut quiet_ms = 0;
        while self.active.load(Ordering::Acquire)
            && self.settings.option(OptionName::Lossless)
            && self.readers.load(Ordering::Relaxed) > 0
            && self.buf.max_fill_permille() > 250
        {
            // SAFETY: sleeping is allowed in the trampoline (sleepable context, no locks).
            if unsafe { bindings::fctrace_throttle_sleep(100) } != 0 {
                break;
            }
            let now = reader_progress();
            if now != seen {
                seen = now;
                quiet_ms = 0;
                continue;
            }
            quiet_ms += 100;
            if quiet_ms >= LOSSLESS_STALL_MS {
                self.waits.stalled_at.store(now, Ordering::Relaxed);
                self.stats.lossless_timeouts.fetch_add(1, Ordering::Relaxed);
                break;
            }
        }
    }

    /// Queues the work item (from any context: through an irq_work).
    pub(crate) fn kick_work(&self) {
        // SAFETY: an NMI-safe C helper (raises an irq_work that queues the work item).
        unsafe { bindings::fctrace_schedule_sync() };
    }

    /// Asks the work item to arm `target` (and its direct callees) ahead, so that the next
    /// time it is called in atomic context it is followed. Safe in any context.
    pub(crate) fn want(&self, target: u64) {
        let w = &self.waits;
        let put = put_once(&w.wanted, target);
        if put == Put::Present {
            return;
        }
        self.stats.ahead_queued.fetch_add(1, Ordering::Relaxed);
        // A free slot if there is one; else the next one round the queue.
        if put == Put::Full {
            let i = w.wanted_next.fetch_add(1, Ordering::Relaxed) % WANTED;
            if w.wanted[i].swap(target, Ordering::AcqRel) != 0 {
                // The queue is full: the function that was there is not armed ahead this
                // time (the next call in atomic context queues it again).
                self.stats.ahead_overwritten.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.kick_work();
    }

    /// Queues what tracing's start arms ahead (`session.rs`) into a free slot of the
    /// queue the calls made in atomic context use; false when there is none.
    pub(crate) fn want_start(&self, target: u64) -> bool {
        let put = put_once(&self.waits.wanted, target);
        if put == Put::New {
            self.kick_work();
        }
        put != Put::Full
    }

    /// Queues `target` for arming ahead, after the calls made in atomic context, into a
    /// free slot of a queue of its own (`Waits::later`); false when it is full (it is
    /// queued again the next time). Safe in any context: an armed function a task entered
    /// in atomic context with fewer than `MIN_BELOW` levels armed below it (`entry.rs`),
    /// the callees of a closure cut at its limit.
    pub(crate) fn want_later(&self, target: u64) -> bool {
        let put = put_once(&self.waits.later, target);
        if put == Put::New {
            self.stats.ahead_later.fetch_add(1, Ordering::Relaxed);
            self.kick_work();
        }
        put != Put::Full
    }

    /// Asks the work item to arm ahead the other methods of the ops table whose slot
    /// `slot` a function not armed yet was just loaded from, to be called in atomic
    /// context (`step.rs`): the scheduling class's `put_prev_task_fair()` after its
    /// `enqueue_task_fair()`, a `dentry_operations`' `d_revalidate` after its `d_delete`.
    /// When tracing starts, the scheduling classes are queued so, by their start
    /// (`activate`). A table queued already, or a full queue, is left alone. Safe in any
    /// context.
    pub(crate) fn want_table(&self, slot: u64) {
        let w = &self.waits;
        if slot == 0 || w.tables.iter().any(|x| x.load(Ordering::Relaxed) == slot) {
            return;
        }
        let queued = w.tables.iter().any(|x| {
            x.compare_exchange(0, slot, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        });
        if queued {
            self.kick_work();
        }
    }

    /// Functions and ops tables queued for arming ahead and not armed yet, plus one while
    /// the work item is arming a batch it took from the queue, and one while it arms what
    /// a task waited for (for `stats`: 0 means arming ahead is done; on a slow kernel a
    /// batch takes seconds, and the closure of one function, `handle_pte_fault()` on the
    /// debug kernel, close to a minute).
    pub(crate) fn ahead_pending(&self) -> usize {
        let w = &self.waits;
        let queued = |q: &[AtomicU64]| q.iter().filter(|x| x.load(Ordering::Relaxed) != 0).count();
        queued(&w.wanted)
            + queued(&w.later)
            + queued(&w.tables)
            + usize::from(w.ahead_busy.load(Ordering::Acquire))
            + usize::from(w.serving.load(Ordering::Acquire))
    }

    /// Adds to `todo` (at level 1: their callees are a closure's) the methods not armed
    /// yet of the ops tables queued by [`Tracer::want_table`]: the words of the table's
    /// object (its bounds from kallsyms, which knows data objects with
    /// `CONFIG_KALLSYMS_ALL`; without, no table is read) that are function starts in the
    /// kernel's text. In the work item.
    fn table_methods(&self, todo: &mut KVec<(u64, u8)>) {
        let Ok(mut sym) = SymBuf::new() else {
            return;
        };
        let (text, etext) = kernel_text();
        for w in &self.waits.tables {
            let slot = w.swap(0, Ordering::AcqRel);
            if slot == 0 || (text..etext).contains(&slot) {
                continue;
            }
            let Some((offset, size)) = sym.lookup(slot).map(|o| (o.offset, o.size)) else {
                continue;
            };
            if size == 0 || size > TABLE_MAX || offset >= size {
                continue;
            }
            let start = slot - offset;
            let table = start..start + size;
            self.stats.ahead_tables.fetch_add(1, Ordering::Relaxed);
            let mut is_func = |f: u64| {
                (text..etext).contains(&f)
                    && sym
                        .lookup(f)
                        .is_some_and(|s| s.offset == 0 && s.module.is_none())
            };
            // The slot's own word too: a table queued by its start (the scheduling
            // classes when tracing starts) has a method there.
            let own = read_word(slot).filter(|&f| f != 0 && is_func(f));
            let mut found = [0u64; 2 * emulate::TABLE_WORDS as usize];
            let n = emulate::table_neighbours(slot, table, read_word, &mut is_func, &mut found);
            for &f in Iterator::chain(own.iter(), found.iter().take(n)) {
                if self.table.lookup(f) != FuncState::Unknown || todo.iter().any(|&(c, _)| c == f) {
                    continue;
                }
                if todo.push((f, 1), GFP_KERNEL).is_err() {
                    return;
                }
                self.stats.ahead_methods.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Arms what handlers queued, with the closure of its direct callees (the calls it
    /// makes will run in the same atomic context), up to `AHEAD_BUDGET` functions of that
    /// closure. Every queued function is armed (or found refused): the budget and the
    /// walk's limit (`AHEAD_WALK`) cut only the closure below them. (They once cut the
    /// queue too: a queue filled with the callees of closures that stopped at their time
    /// limit (`want_callees`) made the walk reach its limit before the calls queued from
    /// atomic context were armed, and those were dropped, unfollowed again on the next
    /// run.)
    /// Called in the work item, without the mutex: it takes the mutex for one function at
    /// a time, so that readers of `stats` and writers of control files wait for one
    /// function's arming, not for a whole batch (minutes on the debug kernel under
    /// emulation).
    fn arm_ahead(&self) {
        let mut todo: KVec<(u64, u8)> = KVec::new();
        // Calls not followed in atomic context first, then the functions at closures'
        // edges and the callees of cut closures (`Waits::later`; armed functions there:
        // the walk goes on through them).
        for w in Iterator::chain(self.waits.wanted.iter(), self.waits.later.iter()) {
            let t = w.swap(0, Ordering::AcqRel);
            if t != 0 && todo.iter().any(|&(c, _)| c == t) {
                continue;
            }
            if t != 0 && todo.push((t, 0), GFP_KERNEL).is_err() {
                // No memory for the list: leave it queued for the next round.
                w.store(t, Ordering::Release);
            }
        }
        self.table_methods(&mut todo);
        let mut armed = 0usize;
        let start = self.waits.start_round.swap(false, Ordering::AcqRel);
        let (budget, t0) = if start {
            self.stats.start_ns.store(0, Ordering::Relaxed);
            (START_BUDGET, clock_ns())
        } else {
            (AHEAD_BUDGET, 0)
        };
        // The start round's closure past `AHEAD_BUDGET`, while it has time.
        let over = |armed: usize| {
            armed >= budget || (armed >= AHEAD_BUDGET && clock_ns().saturating_sub(t0) >= START_NS)
        };
        // Breadth first: the nearest callees are the likeliest to run next; the queued
        // functions (level 0) come before any callee.
        let mut next = 0;
        let mut cut = false;
        while let Some(&(t, level)) = todo.get(next) {
            let mut inner = self.lock();
            // Tasks waiting in the trampoline go first.
            self.serve_requests(&mut inner);
            // Stop as soon as no traced process is left (its exit queued this work item
            // again, which then ends tracing): on a slow kernel a batch takes seconds.
            if !self.active.load(Ordering::Acquire) || !self.any_traced() {
                cut = true;
                break;
            }
            if level > 0 && over(armed) {
                cut = true;
                break;
            }
            // Every `AHEAD_BATCH` functions, the callees of the next ones get their entry
            // hooks in one ftrace update (`Tracer::prehook`).
            if next % AHEAD_BATCH == 0 {
                let mut batch = [0u64; AHEAD_BATCH];
                for (b, &(f, l)) in batch.iter_mut().zip(todo.iter().skip(next)) {
                    if l == 0 || !over(armed) {
                        *b = f;
                    }
                }
                self.prehook(&mut inner, &batch);
            }
            next += 1;
            let f = match self.table.lookup(t) {
                FuncState::Unknown => {
                    if self.arm(&mut inner, t) != FuncState::Armed {
                        continue;
                    }
                    armed += 1;
                    self.stats.armed_ahead.fetch_add(1, Ordering::Relaxed);
                    // The function just armed is the last one.
                    inner.funcs.last()
                }
                // Armed already (through the trampoline, or at the depth limit of an
                // earlier round): its callees are not, necessarily, and run in the same
                // atomic context; walk on through it.
                FuncState::Armed if level < AHEAD_DEPTH => {
                    self.armed_func(&mut inner, t).map(|f| &*f)
                }
                _ => continue,
            };
            if level >= AHEAD_DEPTH || todo.len() >= AHEAD_WALK {
                continue;
            }
            let Some(f) = f else { continue };
            for callee in f.direct_callees() {
                let st = self.table.lookup(callee);
                let known = !matches!(st, FuncState::Unknown | FuncState::Armed);
                if known || todo.iter().any(|&(c, _)| c == callee) {
                    continue;
                }
                // At the walk's limit, the closure stops growing; what is in it goes on.
                if todo.len() >= AHEAD_WALK || todo.push((callee, level + 1), GFP_KERNEL).is_err() {
                    break;
                }
            }
        }
        // A walk that went to its depth: the queued functions armed before (queued where a
        // task entered them in atomic context near a closure's edge, see `entry.rs`) have
        // the levels below them armed, and are not queued again.
        if !cut && todo.len() < AHEAD_WALK && AHEAD_DEPTH >= MIN_BELOW {
            let inner = self.lock();
            for &(t, level) in todo.iter() {
                if level == 0 && self.table.lookup(t) == FuncState::Armed {
                    self.table.set_below(t, MIN_BELOW, true);
                }
            }
            drop(inner);
        }
        if start {
            self.stats
                .start_armed
                .store(armed as u64, Ordering::Relaxed);
            self.stats
                .start_ns
                .store(clock_ns().saturating_sub(t0).max(1), Ordering::Relaxed);
            // The tasks that waited for the start round go on.
            self.waits.start_until.store(0, Ordering::Release);
            wake_armed();
        }
    }

    /// Called by the trampoline, in the traced task, which may sleep here.
    /// EFLAGS.AC (user access open) or DF in the trampoline: the task must not sleep
    /// there, the handlers never send one (`fctrace_task_context`). Counted, so that tests
    /// see a breach.
    fn check_flags(&self, flags: u64) {
        const X86_EFLAGS_AC: u64 = 1 << 18;
        const X86_EFLAGS_DF: u64 = 1 << 10;
        if flags & (X86_EFLAGS_AC | X86_EFLAGS_DF) != 0 {
            self.stats.unsafe_flags.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// In the trampoline: waits for the pending callee to be armed (or the reader, with
    /// `lossless`). Returns whether a pre-site's single step goes on from the call site
    /// the trampoline returns to (`to_site`: `fctrace_trampoline`; see `step.rs`).
    fn arm_pending(&self, to_site: bool) -> bool {
        let (pid, _) = current_ids();
        let mut resume = false;
        if let Some(slot) = self.slot(pid) {
            let (target, throttle) = {
                // SAFETY: we are thread `pid`; the reference ends with this block.
                let d = unsafe { self.data(slot) };
                d.wait.guard = true;
                (d.wait.pending, core::mem::take(&mut d.wait.throttle))
            };
            let t0 = clock_ns();
            if target != 0 && !self.wait_armed(target) {
                // SAFETY: we are thread `pid`; the reference ends with this statement.
                unsafe { self.data(slot) }.wait.nowait = true;
            }
            if throttle {
                self.throttle_wait();
            }
            // SAFETY: we are thread `pid`; the reference ends with this block.
            let d = unsafe { self.data(slot) };
            d.wait.guard = false;
            d.wait.pending = 0;
            // Time spent arming is fctrace's, not the traced functions': leave it out of
            // the durations of the frames that are open.
            d.stack.exclude_time(clock_ns().saturating_sub(t0));
            resume = self.resume_after_wait(d, to_site);
        }
        self.waits.inflight.fetch_sub(1, Ordering::AcqRel);
        resume
    }

    /// In the trampoline: has the work item arm `target` and waits until it is done, tracing
    /// stops, a fatal signal comes, or `arm_wait_ms` pass (false: timed out).
    ///
    /// The task does not arm itself: arming takes `kprobe_mutex`, `cpu_hotplug_lock`,
    /// `text_mutex` and allocates, and the task may hold any sleeping lock (`mmap_lock` in
    /// a page fault, `pcpu_alloc_mutex` in `fork()`, ...) that something holding those
    /// waits for. Waiting with a timeout cannot deadlock: at worst the call goes
    /// unfollowed (`not followed: arming timed out`) and is armed later.
    fn wait_armed(&self, target: u64) -> bool {
        let Some(req) = self.waits.requests.iter().find(|r| {
            r.compare_exchange(0, target, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        }) else {
            // Not reached: one request per thread in a trace, and `MAX_TASKS` slots.
            return true;
        };
        self.kick_work();
        let wait_ns = u64::from(self.settings.arm_wait_ms.load(Ordering::Relaxed)) * 1_000_000;
        let deadline = clock_ns() + wait_ns;
        // A task in a wait loop's state (`fctrace_task_context()`) polls for the work item
        // instead of sleeping, which would lose its state (`fctrace_arm_sleep()`).
        let polls = !task_running();
        let done = loop {
            // Read before the checks: a bump after them ends the sleep at once.
            // SAFETY: a C accessor.
            let seq = unsafe { bindings::fctrace_arm_seq() };
            if !self.active.load(Ordering::Acquire) {
                break true;
            }
            let served = req.load(Ordering::Acquire) != target;
            let now = clock_ns();
            // Served, the task also waits for the start round, if it is still arming
            // (the exit path, the scheduler and its classes, called in atomic context
            // where the task cannot wait: without, a workload started at once, as the
            // oracle tests' cold runs are, ran ahead of it and showed them `not
            // followed: atomic`). Once per session at most, for `START_NS` and a second.
            // (Not a task that polls, in a wait loop's state: it would spin that long.)
            let until = if polls {
                0
            } else {
                self.waits.start_until.load(Ordering::Acquire)
            };
            if served && now >= until {
                break true;
            }
            if now >= deadline {
                // Served: armed; only the start round is not done.
                break served;
            }
            let end = if served {
                deadline.min(until)
            } else {
                deadline
            };
            let ms = ((end - now) / 1_000_000).max(1) as u32;
            // SAFETY: the task may sleep here (the trampoline, sleepable context), or poll
            // (the helper polls when the task's state is not TASK_RUNNING).
            if unsafe { bindings::fctrace_arm_sleep(seq, ms) } < 0 {
                break true;
            }
        };
        // Withdraw the request if the work item has not taken it (it clears only the
        // value it read, so a request made meanwhile by another thread stays).
        let _ = req.compare_exchange(target, 0, Ordering::AcqRel, Ordering::Relaxed);
        done
    }

    /// In the work item: arms what tasks in the trampoline wait for, and wakes them.
    pub(crate) fn serve_requests(&self, inner: &mut TracerInner) {
        for req in &self.waits.requests {
            let t = req.load(Ordering::Acquire);
            if t == 0 {
                continue;
            }
            self.waits.serving.store(true, Ordering::Release);
            let armed = self.active.load(Ordering::Acquire)
                && match self.table.lookup(t) {
                    FuncState::Unknown => self.arm(inner, t) == FuncState::Armed,
                    // Armed with few levels below it armed: the task waits for more.
                    FuncState::Armed => self.table.below(t) < MIN_BELOW,
                    _ => false,
                };
            // What it calls may run in atomic context (after it takes a lock), where the
            // task cannot wait: its callees are armed before the task goes on, and theirs
            // (`arm_sync_closure`), its callees with an entry probe (and theirs) first:
            // once kprobes has optimized such a probe, no task can wait there.
            if armed {
                let t0 = clock_ns();
                self.arm_probe_closure(inner, t, t0 + SERVE_NS);
                let mut closure: KVec<u64> = KVec::new();
                self.arm_sync_closure(inner, t, &mut closure, clock_ns() + SYNC_NS);
                // And those of each function the closure armed (it is as if the task had
                // waited there: its own library closure, the `vsnprintf()` family of
                // `seq_vprintf()`, not a share of one budget), while there is time; the
                // rest are armed where a task reaches them (not queued for arming
                // ahead, which would arm four levels below each).
                for &f in closure.iter() {
                    if !self.arm_probe_closure(inner, f, t0 + SERVE_NS) {
                        break;
                    }
                }
            }
            let _ = req.compare_exchange(t, 0, Ordering::AcqRel, Ordering::Relaxed);
            self.waits.serving.store(false, Ordering::Release);
            wake_armed();
        }
    }

    /// Arms the callees of `func` (armed), breadth first: those not armed yet, and
    /// through the armed ones too, down to `SYNC_DEPTH` levels below it, until
    /// `SYNC_BUDGET` functions are armed or `deadline` (on `clock_ns()`) has passed (a
    /// slow kernel, the debug one, arms fewer). Then the direct callees of `func` still
    /// not armed are queued for arming ahead (no more: each queued function is armed
    /// ahead with its own callees, four levels deep). `closure` gets what it armed. With
    /// the mutex held.
    fn arm_sync_closure(
        &self,
        inner: &mut TracerInner,
        func: u64,
        closure: &mut KVec<u64>,
        deadline: u64,
    ) {
        let mut todo: KVec<(u64, u8)> = KVec::new();
        if todo.push((func, 0), GFP_KERNEL).is_err() {
            return;
        }
        let mut next = 0;
        let cut = self.walk_sync_closure(inner, func, closure, deadline, &mut todo, &mut next);
        // Breadth first: every function walked above the level where the walk stopped has
        // all its callees down to that level armed.
        for &(f, level) in todo.iter().take(next) {
            if level < cut {
                self.table.set_below(f, cut - level, true);
            }
        }
        // A task waits at most once for a closure below a function: one cut short (its
        // budget, its time: the debug kernel arms slowly) goes on where the task enters the
        // functions at its edge, not here again.
        self.table.set_below(func, MIN_BELOW, true);
    }

    /// [`Tracer::arm_sync_closure`]'s walk, from `todo[*next]` on. Returns the level where
    /// it stopped (`SYNC_DEPTH` if it did not).
    fn walk_sync_closure(
        &self,
        inner: &mut TracerInner,
        func: u64,
        closure: &mut KVec<u64>,
        deadline: u64,
        todo: &mut KVec<(u64, u8)>,
        next: &mut usize,
    ) -> u8 {
        let mut prehooked = None;
        while let Some(&(f, level)) = todo.get(*next) {
            *next += 1;
            if level >= SYNC_DEPTH {
                continue;
            }
            // At the first function of a level (breadth first: the level's functions follow
            // each other in `todo`, all armed by now), the callees about to be armed of
            // all of them get their own callees' entry hooks in one ftrace update
            // (`Tracer::prehook`), as many as the budget lets arm: arming each then finds
            // its callees hooked. (With one update per function walked, the bench's arming
            // run made 0.26 updates per armed function late; with one per level, 0.20.)
            if prehooked != Some(level) {
                prehooked = Some(level);
                if clock_ns() < deadline {
                    let room = SYNC_BUDGET.saturating_sub(closure.len());
                    let batch = self.level_batch(inner, todo, *next - 1, room);
                    self.prehook(inner, &batch);
                }
            }
            let mut callees: KVec<u64> = KVec::new();
            if let Some(af) = self.armed_func(inner, f) {
                // Callees with an entry probe first: once kprobes has optimized the
                // probe, no task can wait there.
                for probe_first in [true, false] {
                    for c in af.direct_callees() {
                        let probed = self.hooks.bits(c) & HOOK_PROBE != 0;
                        if probed == probe_first
                            && !callees.contains(&c)
                            && callees.push(c, GFP_KERNEL).is_err()
                        {
                            return level;
                        }
                    }
                }
            }
            for c in callees {
                if todo.iter().any(|&(x, _)| x == c) {
                    continue;
                }
                match self.table.lookup(c) {
                    FuncState::Unknown => {}
                    FuncState::Armed => {
                        if todo.len() >= SYNC_WALK || todo.push((c, level + 1), GFP_KERNEL).is_err()
                        {
                            return level;
                        }
                        continue;
                    }
                    _ => continue,
                }
                if closure.len() >= SYNC_BUDGET
                    || clock_ns() >= deadline
                    || !self.active.load(Ordering::Acquire)
                {
                    self.want_callees(inner, func);
                    return level;
                }
                if self.arm(inner, c) == FuncState::Armed {
                    self.stats.armed_ahead.fetch_add(1, Ordering::Relaxed);
                    if todo.push((c, level + 1), GFP_KERNEL).is_err()
                        || closure.push(c, GFP_KERNEL).is_err()
                    {
                        return level;
                    }
                }
            }
        }
        SYNC_DEPTH
    }

    /// The direct callees not armed yet of the functions of `todo[from]`'s level, from
    /// there on (armed), at most `room`: those [`Tracer::walk_sync_closure`] is about to
    /// arm at the next level.
    fn level_batch(
        &self,
        inner: &mut TracerInner,
        todo: &[(u64, u8)],
        from: usize,
        room: usize,
    ) -> KVec<u64> {
        let mut batch: KVec<u64> = KVec::new();
        let Some(&(_, level)) = todo.get(from) else {
            return batch;
        };
        for &(f, _) in todo.iter().skip(from).take_while(|&&(_, l)| l == level) {
            let Some(af) = self.armed_func(inner, f) else {
                continue;
            };
            for c in af.direct_callees() {
                if batch.len() >= room {
                    return batch;
                }
                if self.table.lookup(c) == FuncState::Unknown
                    && !batch.contains(&c)
                    && !todo.iter().any(|&(x, _)| x == c)
                    && batch.push(c, GFP_KERNEL).is_err()
                {
                    return batch;
                }
            }
        }
        batch
    }

    /// Queues the direct callees of `func` not armed yet for arming ahead, up to
    /// `WANT_CALLEES`, after the calls made in atomic context (`Tracer::want_later`).
    fn want_callees(&self, inner: &mut TracerInner, func: u64) {
        let Some(f) = self.armed_func(inner, func) else {
            return;
        };
        let mut n = 0;
        for c in f.direct_callees() {
            if n == WANT_CALLEES {
                break;
            }
            if self.table.lookup(c) == FuncState::Unknown {
                if !self.want_later(c) {
                    break;
                }
                n += 1;
            }
        }
    }

    /// Arms the callees with an entry probe (`static_call.rs`) of `func` (armed, or not:
    /// then it has none), of those, and so on, up to `PROBE_CLOSURE` functions: once
    /// kprobes has optimized an
    /// entry probe no task can wait there, so a callee not armed by its first call would
    /// be a leaf then (`not followed: entry probe`). They are library code (the
    /// `vsnprintf()` family, string routines): a small closure. Direct callees reached
    /// through a call-site probe that are leaves themselves ([`Tracer::is_leaf_function`]:
    /// arming them registers nothing) are armed too: a task may not be able to wait for
    /// them where they are called (`rep_movs_alternative()`, called with user access
    /// open), and the first run then follows them. Stops at `deadline` (on `clock_ns()`):
    /// returns false if it did. With the mutex held.
    pub(super) fn arm_probe_closure(
        &self,
        inner: &mut TracerInner,
        func: u64,
        deadline: u64,
    ) -> bool {
        let mut todo: KVec<u64> = KVec::new();
        if todo.push(func, GFP_KERNEL).is_err() {
            return true;
        }
        let mut next = 0;
        let mut added = 0;
        while let Some(&f) = todo.get(next) {
            next += 1;
            let mut callees: KVec<u64> = KVec::new();
            if let Some(af) = self.armed_func(inner, f) {
                for c in af.direct_callees() {
                    if self.hooks.bits(c) & (HOOK_PROBE | HOOK_ENTRY) != HOOK_ENTRY
                        && self.table.lookup(c) == FuncState::Unknown
                        && !callees.contains(&c)
                        && callees.push(c, GFP_KERNEL).is_err()
                    {
                        break;
                    }
                }
            }
            for c in callees {
                // (Decoded after the borrow of `inner` above ends.) Reached through call
                // sites: only leaves.
                if self.hooks.bits(c) & HOOK_PROBE == 0 && !self.is_leaf_function(inner, c) {
                    continue;
                }
                if added >= PROBE_CLOSURE || !self.active.load(Ordering::Acquire) {
                    return true;
                }
                if clock_ns() >= deadline {
                    return false;
                }
                if self.table.lookup(c) == FuncState::Unknown
                    && self.arm(inner, c) == FuncState::Armed
                {
                    added += 1;
                    self.stats.armed_ahead.fetch_add(1, Ordering::Relaxed);
                    if todo.push(c, GFP_KERNEL).is_err() {
                        return true;
                    }
                }
            }
        }
        true
    }

    /// The work item: tracing ends when no traced process is left; otherwise tasks in the
    /// trampoline are served and functions first called in atomic context armed ahead.
    fn sync_work(&self) {
        self.log_privileged_exec();
        // Arming time does not count toward `disarm_after` (see `IdleClock`).
        let idle = self.table.idle_clock();
        idle.begin();
        self.sync_pass();
        idle.end();
    }

    /// The work of [`Tracer::sync_work`].
    fn sync_pass(&self) {
        let mut inner = self.lock();
        if !self.active.load(Ordering::Acquire) {
            return;
        }
        self.serve_requests(&mut inner);
        if !self.any_traced() {
            self.deactivate(&mut inner);
            return;
        }
        self.waits.ahead_busy.store(true, Ordering::Release);
        drop(inner);
        self.arm_ahead();
        self.waits.ahead_busy.store(false, Ordering::Release);
        let mut inner = self.lock();
        if self.active.load(Ordering::Acquire) && !self.any_traced() {
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
            // SAFETY: sleeping in module exit is allowed.
            unsafe { bindings::msleep(10) };
        }
        // Only now can nothing queue the work items any more (a task in the trampoline
        // queues one for its request): cancel them, waiting for a running one to finish.
        // SAFETY: a C wrapper, process context.
        unsafe { bindings::fctrace_cancel_sync() };
        // SAFETY: waits for an RCU-tasks grace period; callable from process context.
        unsafe { bindings::synchronize_rcu_tasks() };
    }
}

/// `lossless`: the longest a traced task waits for readers that take nothing.
const LOSSLESS_STALL_MS: u32 = 1000;

/// How often readers took events (it changes with every `trace_pipe` read that drained
/// the buffer, and when a reader closes).
fn reader_progress() -> u64 {
    // SAFETY: a C helper reading an atomic counter; any context.
    u64::from(unsafe { bindings::fctrace_throttle_progress() })
}

/// Wakes the tasks waiting in the trampoline (they check their requests).
pub(crate) fn wake_armed() {
    // SAFETY: a C wrapper of wake_up_all, process context.
    unsafe { bindings::fctrace_arm_wake() };
}

/// Called by `fctrace_trampoline` (see trampoline.S) with the flags of the probed
/// instruction, and where the trampoline keeps them for its return.
#[no_mangle]
pub(crate) extern "C" fn fctrace_arm_pending(flags: u64, kept: *mut u64) {
    if let Some(tr) = tracer() {
        tr.check_flags(flags);
        if tr.arm_pending(true) && !kept.is_null() {
            // A pre-site's single step goes on from the call site (see `step.rs`).
            const X86_EFLAGS_TF: u64 = 1 << 8;
            // SAFETY: `kept` points to the flags word the trampoline pushed on our own
            // stack, which it pops when we return.
            unsafe { *kept |= X86_EFLAGS_TF };
        }
    }
}

/// Called by `fctrace_entry_trampoline` (see trampoline.S), sent there by an entry hook,
/// with the flags of the function's entry. The task counts itself in (the entry hook does
/// not: should the redirect not happen, nothing is left counted). Before this module is
/// freed, ftrace's unregistration waits
/// for every task to pass a voluntary context switch, which a task on its way here
/// does only in the wait, after this count.
#[no_mangle]
pub(crate) extern "C" fn fctrace_arm_pending_entry(flags: u64) {
    if let Some(tr) = tracer() {
        tr.waits.inflight.fetch_add(1, Ordering::AcqRel);
        tr.check_flags(flags);
        tr.arm_pending(false);
    }
}

/// Called from the module's work item (see [`Tracer::sync_work`]).
#[no_mangle]
pub(crate) extern "C" fn fctrace_sync_work() {
    if let Some(tr) = tracer() {
        tr.sync_work();
    }
}

/// What [`put_once`] did.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Put {
    /// `target` was queued already.
    Present,
    /// Put into a free slot.
    New,
    /// Not queued: no free slot.
    Full,
}

/// Puts `target` into a free slot (0) of the queue `q`, unless it is there already.
fn put_once(q: &[AtomicU64], target: u64) -> Put {
    if q.iter().any(|x| x.load(Ordering::Relaxed) == target) {
        return Put::Present;
    }
    let free = q.iter().any(|x| {
        x.compare_exchange(0, target, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
    });
    if free {
        Put::New
    } else {
        Put::Full
    }
}
