// SPDX-License-Identifier: GPL-2.0

//! The closure armed for a waiting task: the work item serves a task's request with the
//! callees a few levels below it, so that the task's next calls need no wait.

use super::*;

impl Tracer {
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
                let wait_ns =
                    u64::from(self.settings.arm_wait_ms.load(Ordering::Relaxed)) * 1_000_000;
                let (deadline, floor) = (clock_ns() + SYNC_NS, t0 + wait_ns / 2);
                self.arm_sync_closure(inner, t, &mut closure, deadline, floor);
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
    /// slow kernel, the debug one, arms fewer). The first `MIN_BELOW` levels, which the
    /// task is told it has (`FuncTable::below`), are armed until `floor` if that is
    /// later: half the task's wait (`arm_wait_ms`), so that it does not time out. Cut at
    /// `deadline` there, a function the task then entered in atomic context had its own
    /// callees not armed (`lru_add_drain()`'s closure, on the debug kernel, armed
    /// `lru_add_drain_cpu()` and not `folio_batch_move_lru()`: all four drains of
    /// `trace/fn_pointers.tc` not followed). Then the direct callees of `func` still
    /// not armed are queued for arming ahead (no more: each queued function is armed
    /// ahead with its own callees, four levels deep). `closure` gets what it armed. With
    /// the mutex held.
    pub(super) fn arm_sync_closure(
        &self,
        inner: &mut TracerInner,
        func: u64,
        closure: &mut KVec<u64>,
        deadline: u64,
        floor: u64,
    ) {
        let mut todo: KVec<(u64, u8)> = KVec::new();
        if todo.push((func, 0), GFP_KERNEL).is_err() {
            return;
        }
        let mut next = 0;
        let limits = (deadline, floor.max(deadline));
        let cut = self.walk_sync_closure(inner, func, closure, limits, &mut todo, &mut next);
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

    /// [`Tracer::arm_sync_closure`]'s walk, from `todo[*next]` on: `limits` are the time
    /// bounds of the levels below `MIN_BELOW` and of those above. Returns the level where
    /// it stopped (`SYNC_DEPTH` if it did not).
    pub(super) fn walk_sync_closure(
        &self,
        inner: &mut TracerInner,
        func: u64,
        closure: &mut KVec<u64>,
        limits: (u64, u64),
        todo: &mut KVec<(u64, u8)>,
        next: &mut usize,
    ) -> u8 {
        let mut prehooked = None;
        while let Some(&(f, level)) = todo.get(*next) {
            *next += 1;
            if level >= SYNC_DEPTH {
                continue;
            }
            // (This level's functions arm callees at `level + 1`.)
            let deadline = if level < MIN_BELOW {
                limits.1
            } else {
                limits.0
            };
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
    pub(super) fn level_batch(
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
    pub(super) fn want_callees(&self, inner: &mut TracerInner, func: u64) {
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

    /// Arms the callees with an entry probe (`entry_probe.rs`) of `func` (armed, or not:
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
    pub(in crate::engine) fn arm_probe_closure(
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
}
