// SPDX-License-Identifier: GPL-2.0

//! Arming ahead: callees first called in atomic context (and the other methods of the ops
//! tables they were called through) are queued by handlers and armed by the work item for
//! the next run.

use super::*;

impl Tracer {
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

    /// Module text [`start`, `end`) goes away: the functions there queued for arming ahead
    /// are dropped (whatever is loaded there next is not armed for them).
    pub(crate) fn drop_queued_in(&self, start: u64, end: u64) {
        let w = &self.waits;
        for q in Iterator::chain(w.wanted.iter(), w.later.iter()) {
            let t = q.load(Ordering::Acquire);
            if (start..end).contains(&t) {
                let _ = q.compare_exchange(t, 0, Ordering::AcqRel, Ordering::Relaxed);
            }
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
    pub(super) fn table_methods(&self, todo: &mut KVec<(u64, u8)>) {
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

    /// The mutex for one function of [`Tracer::arm_ahead`]'s pass, which took its
    /// functions from the queues: a control-file write may hold the mutex for seconds
    /// (arming again from scratch) with others queued behind it, and the pass waits for
    /// it polling in `TASK_IDLE` (no worker waits uninterruptibly behind writers), until
    /// the session it works for ends (`None`).
    fn lock_ahead(&self, session: u32) -> Option<Guard<'_>> {
        loop {
            if let Some(g) = self.try_lock() {
                return Some(g);
            }
            if !self.active.load(Ordering::Acquire) || self.gen() != session {
                return None;
            }
            sys::sleep_idle(AHEAD_POLL_MS);
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
    pub(super) fn arm_ahead(&self) {
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
        let session = self.gen();
        // Breadth first: the nearest callees are the likeliest to run next; the queued
        // functions (level 0) come before any callee.
        let mut next = 0;
        let mut cut = false;
        while let Some(&(t, level)) = todo.get(next) {
            let Some(mut inner) = self.lock_ahead(session) else {
                // The session ended while it waited: as below.
                cut = true;
                break;
            };
            // Tasks waiting in the trampoline go first.
            self.serve_requests(&mut inner);
            // Stop as soon as no traced process is left (its exit queued this work item
            // again, which then ends tracing): on a slow kernel a batch takes seconds.
            if !self.active.load(Ordering::Acquire) || !self.tracing_wanted() {
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
            // (Not done when a writer has the mutex: they are queued again, no more.)
            if let Some(inner) = self.try_lock() {
                for &(t, level) in todo.iter() {
                    if level == 0 && self.table.lookup(t) == FuncState::Armed {
                        self.table.set_below(t, MIN_BELOW, true);
                    }
                }
                drop(inner);
            }
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
