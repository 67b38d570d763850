// SPDX-License-Identifier: GPL-2.0

//! A tracing session: turning tracing on (the start function or the system-call hook,
//! the task-lifetime hooks) and off (every probe removed), and lazy disarming of
//! functions no traced task has entered for a while.

use super::arming::find_thunks;
use super::extable::Extable;
use super::handlers::Hook;
use super::policy::IRQ_ROOTS;
use super::table::FuncState;
use super::tree::Ctx;
use super::wait::wake_armed;
use super::{clock_ns, timed, tracer, Tracer, TracerInner, DEFER_OPTIMIZE, DEFER_REAP};
use crate::kprobe::{Batch, Probe};
use crate::ksym::{addr_of, resolve, SymBuf};
use crate::parse::{self, FilterVerdict, OptionName};
use crate::sys;
use core::sync::atomic::Ordering;
use kernel::alloc::KVec;
use kernel::c_str;
use kernel::prelude::*;

/// How often idle functions are looked for: a quarter of `disarm_after`, between these
/// bounds (milliseconds).
const REAP_PERIOD_MIN_MS: u32 = 1000;
const REAP_PERIOD_MAX_MS: u32 = 10_000;
/// Arming is quiet this long before the blockers of optimizable probes are released
/// (see `kprobe.rs`)...
const OPTIMIZE_QUIET_MS: u32 = 250;
/// After blockers went: when the work item publishes what kprobes' optimizer did with
/// them (it waits a few jiffies before it runs).
const OPTIMIZE_PUBLISH_MS: u32 = 500;
/// ... or, while it goes on, this long after the oldest was registered.
const OPTIMIZE_MAX_DELAY_NS: u64 = 2_000_000_000;
/// After tracing stopped with hooked returns it could not put back (another tracer's
/// return hook holds them): how often the work item looks whether they came back.
const RETURNS_POLL_MS: u32 = 500;

/// How often, once tracing stopped, fctrace looks whether the tasks on their way to the
/// resume probe went past it, to unregister it (arm64).
#[cfg(target_arch = "aarch64")]
const RESUME_POLL_MS: u32 = 20;

impl Tracer {
    /// Registers the probes for tracing: the start function (armed), its entry probe and
    /// the exit, fork and preemption hooks. With the mutex held.
    pub(crate) fn activate(&self, inner: &mut TracerInner) -> Result {
        if self.active.load(Ordering::Acquire) || !inner.tracing_on || !self.tracing_wanted() {
            return Ok(());
        }
        // The root: the start function's entry (armed now), or in all-system-calls mode a
        // probe in the body of x64_sys_call (arm64: on invoke_syscall()'s call of the
        // system call), whose callee is armed when first called.
        let (root, hook_at) = match inner.start {
            // (arm64: a probe on the function's first word, before its ftrace site, which
            // a probe cannot share there: no `KPROBES_ON_FTRACE`)
            Some(a) => (Some(a), a),
            #[cfg(target_arch = "aarch64")]
            None => {
                let mut sym = SymBuf::new()?;
                let site = resolve(c_str!("invoke_syscall"))
                    .ok()
                    .and_then(|(f, _)| super::arming::register_call_site(inner, f, &mut sym));
                let Some((at, reg)) = site else {
                    self.log(format_args!(
                        "tracing: all system calls: no call of the system call found in \
                         invoke_syscall(); set start_function"
                    ));
                    return Err(Error::from_errno(-(crate::bindings::EOPNOTSUPP as i32)));
                };
                self.syscall_from.store(u64::from(reg), Ordering::Relaxed);
                (None, at)
            }
            #[cfg(target_arch = "x86_64")]
            None => {
                let (dispatch, _) = resolve(c_str!("x64_sys_call"))?;
                let (table, _) = resolve(c_str!("sys_call_table"))?;
                self.syscall_from.store(table, Ordering::Relaxed);
                let mut sym = SymBuf::new()?;
                (
                    None,
                    super::arming::body_start(dispatch, &mut sym).ok_or(EINVAL)?,
                )
            }
        };
        self.root.store(root.unwrap_or(0), Ordering::Relaxed);
        // Entries of returns put back when tracing last stopped go now.
        self.drop_restored_returns();
        inner.thunks = find_thunks();
        if let Some(name) = sys::HARDIRQ_STACK_PTR {
            sys::set_hardirq_stack_ptr(addr_of(name));
        }
        if !inner.static_calls.is_known() {
            inner.static_calls = Extable::load_static_calls();
        }
        if !inner.extable.is_known() {
            inner.extable = Extable::load();
        }
        self.ret_hooks.resolve();
        // No task may keep state from an earlier session.
        self.generation.fetch_add(1, Ordering::AcqRel);
        if self.waits.none_inflight() {
            self.trees.release_all();
        }
        if !inner.pinned {
            sys::module_get();
            inner.pinned = true;
        }
        // arm64: the resume probe, on fctrace's own text, before any probe that may send a
        // task to wait (`wait/resume.rs`); it stays until no task is on its way to it
        // once tracing stopped (`unpin_when_returned`).
        #[cfg(target_arch = "aarch64")]
        if inner.resume.is_none() {
            inner.resume = super::wait::resume::ResumeHook::register(self);
        }
        // (held now for this session: no longer for returns of the last one)
        self.stats.returns_pending.store(0, Ordering::Relaxed);
        self.active.store(true, Ordering::Release);
        self.update_hot_mask();
        if let Err(e) = self.add_hooks(inner, root, hook_at) {
            self.deactivate(inner);
            return Err(e);
        }
        if self.settings.option(OptionName::Irqs) {
            self.add_irq_roots(inner);
        }
        let missing = self.add_fault_hook(inner).is_none();
        self.stats
            .fault_hook_missing
            .store(u64::from(missing), Ordering::Relaxed);
        // The exit and fork hooks are kprobes at those functions' ftrace sites, so their
        // entry hooks share the site and never send a task to wait there (see `entry.rs`):
        // armed ahead, they are followed from the first call.
        self.waits.start();
        for f in [c_str!("do_exit"), c_str!("wake_up_new_task")] {
            if let Ok((a, _)) = resolve(f) {
                self.want_start(a);
            }
        }
        // The scheduler too: a traced task enters it with preemption off (from
        // `schedule()`, a preemption, `cond_resched()`), where it cannot wait for arming,
        // and it calls the methods of its scheduling class and of the idle class through
        // the classes. Armed ahead, with their callees, a first run that sleeps follows
        // what the scheduler does for it (without, those calls were "not followed: atomic"
        // on the first run, and armed for the next). Not when `filter` hides
        // `__schedule`: the classes' methods are the scheduler's, hidden with it.
        let sched_shown =
            parse::filter_verdict(inner.filter_patterns(), b"__schedule") == FilterVerdict::Follow;
        if let (true, Ok((a, _))) = (sched_shown, resolve(c_str!("__schedule"))) {
            self.want_start(a);
            for t in &self.traced {
                let tgid = t.load(Ordering::Relaxed);
                if tgid != 0 {
                    self.want_table(sched_class_of(tgid));
                }
            }
            self.want_table(idle_sched_class());
        }
        self.schedule_reap();
        Ok(())
    }

    fn add_hooks(&self, inner: &mut TracerInner, root: Option<u64>, hook_at: u64) -> Result {
        if let Some(root) = root {
            if self.arm_as(inner, root, true) != FuncState::Armed {
                return Err(EINVAL);
            }
            // No task waits for the start function: its callees with an entry probe are
            // armed with it (see `wait/`).
            self.arm_probe_closure(inner, root, u64::MAX);
        }
        let root_hook = if root.is_some() {
            Hook::Root
        } else {
            Hook::Syscall
        };
        // (arm64: none to place, `preempt_schedule()` makes the call; what `resolve()`
        // finds opens the scheduler's frame from inside, see `preempt.rs`)
        let sched_at = self.preempt.resolve();
        let mut hooks = KVec::new();
        hooks.push(Probe::at(hook_at, root_hook), GFP_KERNEL)?;
        hooks.push(Probe::on_symbol(c_str!("do_exit"), Hook::Exit), GFP_KERNEL)?;
        hooks.push(
            Probe::on_symbol(c_str!("wake_up_new_task"), Hook::Fork),
            GFP_KERNEL,
        )?;
        for at in sched_at.into_iter().filter(|&a| a != 0) {
            hooks.push(Probe::at(at, Hook::Preempt), GFP_KERNEL)?;
        }
        for p in hooks {
            let is_preempt = matches!(p.data, Hook::Preempt);
            let mut b = KBox::pin(p, GFP_KERNEL)?;
            if let Err(e) = b.as_mut().register() {
                if is_preempt {
                    // Optional: without all of them, preemption thunks are plain
                    // unprobeable leaves (the hooks that did register do nothing).
                    self.preempt.disable();
                    continue;
                }
                return Err(e);
            }
            inner.hooks.push(b, GFP_KERNEL)?;
        }
        Ok(())
    }

    /// `irqs` option: arms the interrupt entry functions and probes their entries. One
    /// that this kernel does not have, or that cannot be probed, is counted and skipped.
    pub(crate) fn add_irq_roots(&self, inner: &mut TracerInner) {
        let hooked = inner
            .hooks
            .iter()
            .any(|h| matches!(h.data, Hook::IrqRoot(..)));
        if !self.active.load(Ordering::Acquire) || hooked {
            return;
        }
        for &(name, ctx) in IRQ_ROOTS {
            if self.add_irq_root(inner, name, ctx).is_none() {
                self.stats.irq_roots_missing.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Arms one interrupt entry function (pinned: never disarmed lazily, its entry hook
    /// opens frames) and hooks its entry.
    fn add_irq_root(&self, inner: &mut TracerInner, name: &'static CStr, ctx: Ctx) -> Option<()> {
        let (func, _) = resolve(name).ok()?;
        if self.table.lookup(func) == FuncState::Armed {
            self.armed_func(inner, func)?.pinned = true;
        } else if self.arm_as(inner, func, true) != FuncState::Armed {
            return None;
        }
        let mut b = KBox::pin(Probe::on_symbol(name, Hook::IrqRoot(ctx, func)), GFP_KERNEL).ok()?;
        b.as_mut().register().ok()?;
        inner.hooks.push(b, GFP_KERNEL).ok()
    }

    /// Arms `handle_mm_fault()` (pinned) and hooks its entry, where page faults a traced
    /// task takes in kernel mode are drawn (`Hook::Fault`): armed before the first fault,
    /// the fault's work is followed from the first run.
    fn add_fault_hook(&self, inner: &mut TracerInner) -> Option<()> {
        let name = c_str!("handle_mm_fault");
        let (func, _) = resolve(name).ok()?;
        if self.table.lookup(func) == FuncState::Armed {
            self.armed_func(inner, func)?.pinned = true;
        } else if self.arm_as(inner, func, true) != FuncState::Armed {
            return None;
        }
        let mut b = KBox::pin(Probe::on_symbol(name, Hook::Fault(func)), GFP_KERNEL).ok()?;
        b.as_mut().register().ok()?;
        inner.hooks.push(b, GFP_KERNEL).ok()
    }

    /// Removes every probe. With the mutex held.
    pub(crate) fn deactivate(&self, inner: &mut TracerInner) {
        self.active.store(false, Ordering::Release);
        // A return the trace could not account for, whose work item has not run yet:
        // this session ends here (tracing stops, or starts again from scratch), so its
        // `error_log` line is written now, and the next session does not inherit it.
        let to = self.unexpected_return.swap(0, Ordering::AcqRel);
        if to != 0 {
            self.log_unexpected_return(to, "tracing stopped or armed again from scratch");
        }
        if !self.any_traced() {
            // (Thread groups go into `traced` with the mutex held, or from a traced
            // process's fork: none now.)
            self.traced_mask.store(0, Ordering::Release);
        }
        self.update_hot_mask();
        {
            let mut batch = Batch::new();
            for h in inner.hooks.iter() {
                batch.add(h);
            }
            for h in inner.static_hooks.iter() {
                batch.add(h);
            }
            for f in inner.funcs.iter() {
                batch.add_set(&f.sites);
            }
            // Dropping the batch unregisters all at once.
        }
        self.stats.probes_armed.store(0, Ordering::Relaxed);
        // After this, no handler runs.
        inner.entry.clear();
        self.stats.entry_hooks.store(0, Ordering::Relaxed);
        // So no return is hooked any more: put back those still on the stacks.
        self.restore_returns();
        inner.hooks = KVec::new();
        inner.static_hooks = KVec::new();
        inner.deferred_hooks = KVec::new();
        self.stats.static_hooks.store(0, Ordering::Relaxed);
        self.stats.entry_probes.store(0, Ordering::Relaxed);
        inner.funcs = KVec::new();
        self.table.clear();
        self.hooks.clear();
        self.waits.clear_wanted();
        self.generation.fetch_add(1, Ordering::AcqRel);
        // Tasks waiting in the trampoline see `active` false and go on.
        wake_armed();
        self.unpin_when_returned(inner);
    }

    /// Once tracing stopped: drops the module's reference to itself when no hooked return
    /// is left to come back through `fctrace_return`; else looks again in a while (the
    /// lazy-disarming work item, idle meanwhile). arm64: the resume probe goes once no
    /// task is on its way to it (sent to the trampoline before the other probes went),
    /// looked at again soon until then; those tasks do not hold the module (its exit
    /// waits for them, as for tasks in the trampoline). With the mutex held.
    pub(crate) fn unpin_when_returned(&self, inner: &mut TracerInner) {
        if self.active.load(Ordering::Acquire) {
            return;
        }
        #[cfg(target_arch = "aarch64")]
        if inner.resume.is_some() {
            if self.waits.resumes.idle() {
                inner.resume = None;
            } else {
                sys::reschedule_reap(RESUME_POLL_MS);
            }
        }
        if !inner.pinned {
            return;
        }
        if self.returns.any_live() {
            self.stats.returns_pending.store(1, Ordering::Relaxed);
            sys::schedule_reap(RETURNS_POLL_MS);
            return;
        }
        self.stats.returns_pending.store(0, Ordering::Relaxed);
        inner.pinned = false;
        sys::module_put();
    }

    /// Lazy disarming. Removes the probes of functions that no traced task or interrupt
    /// is inside (no open frame) and that were last entered before `older_than` (on
    /// `FuncTable::idle_clock`, ns); and, while fewer than `need` probes were freed, of
    /// the least recently entered other such functions (room under `max_probes`). The
    /// start function and interrupt entries stay. A disarmed function keeps its table entry with state `Unknown`, so
    /// its next call arms it again. With the mutex held; sleeps. Returns the number
    /// disarmed.
    pub(crate) fn reap(&self, inner: &mut TracerInner, older_than: u64, need: u64) -> usize {
        let mut cand: KVec<(u64, usize)> = KVec::new();
        for (i, f) in inner.funcs.iter().enumerate() {
            let idle = !f.pinned
                && !self.table.is_open(f.entry)
                && self.table.state_of(f.entry) == FuncState::Armed;
            if idle
                && cand
                    .push((self.table.last_entered(f.entry), i), GFP_KERNEL)
                    .is_err()
            {
                return 0;
            }
        }
        crate::sort::sort(&mut cand);
        let Ok(mut dead) = KVec::from_elem(false, inner.funcs.len(), GFP_KERNEL) else {
            return 0;
        };
        let mut chosen = 0usize;
        let mut freed = 0u64;
        for &(last, i) in cand.iter() {
            if last >= older_than && freed >= need {
                break;
            }
            let Some(f) = inner.funcs.get(i) else {
                continue;
            };
            freed += f.sites.registered() as u64;
            dead[i] = true;
            chosen += 1;
        }
        if chosen == 0 {
            return 0;
        }
        // New calls of these functions now go the arming path, which waits for the mutex.
        // Handlers that saw them armed have opened their frames once this returns.
        for (f, _) in inner.funcs.iter().zip(dead.iter()).filter(|(_, d)| **d) {
            self.table.set_state(f.entry, FuncState::Unknown);
        }
        sys::synchronize_handlers();
        for (f, d) in inner.funcs.iter().zip(dead.iter_mut()).filter(|(_, d)| **d) {
            if self.table.is_open(f.entry) {
                // A task got in meanwhile: keep it.
                self.table.set_state(f.entry, FuncState::Armed);
                *d = false;
            }
        }
        let old = core::mem::take(&mut inner.funcs);
        let (Ok(mut keep), Ok(mut gone)) = (
            KVec::with_capacity(old.len(), GFP_KERNEL),
            KVec::with_capacity(chosen, GFP_KERNEL),
        ) else {
            for (f, _) in old.iter().zip(dead.iter()).filter(|(_, d)| **d) {
                self.table.set_state(f.entry, FuncState::Armed);
            }
            inner.funcs = old;
            return 0;
        };
        for (f, d) in old.into_iter().zip(dead.iter()) {
            // Within capacity: these pushes do not fail (a failure would drop the function,
            // which unregisters its probes: still consistent).
            let _ = if *d {
                gone.push(f, GFP_KERNEL)
            } else {
                keep.push(f, GFP_KERNEL)
            };
        }
        inner.funcs = keep;
        let unregistered: u64 = gone.iter().map(|f| f.sites.registered() as u64).sum();
        timed(&self.stats.unregister_ns, || {
            let mut batch = Batch::new();
            for f in gone.iter() {
                batch.add_set(&f.sites);
            }
            // Dropping the batch unregisters them all at once.
        });
        self.stats
            .unregistrations
            .fetch_add(unregistered, Ordering::Relaxed);
        let _ = self
            .stats
            .probes_armed
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                Some(n.saturating_sub(unregistered))
            });
        self.stats
            .funcs_disarmed
            .fetch_add(gone.len() as u64, Ordering::Relaxed);
        gone.len()
    }

    /// The periodic lazy-disarming pass (a delayed work item, see
    /// [`Tracer::schedule_reap`]).
    fn reap_idle(&self) {
        let after = u64::from(self.settings.disarm_after_s.load(Ordering::Relaxed));
        let Some(mut inner) = self.lock_or_defer(DEFER_REAP) else {
            return;
        };
        if !self.active.load(Ordering::Acquire) {
            self.unpin_when_returned(&mut inner);
            return;
        }
        if after != 0 {
            let now = self.table.idle_clock().at(clock_ns());
            self.reap(&mut inner, now.saturating_sub(after * 1_000_000_000), 0);
        }
        self.schedule_reap();
    }

    /// Queues the next lazy-disarming pass, a quarter of `disarm_after` from now (within
    /// `REAP_PERIOD_MIN_MS..=REAP_PERIOD_MAX_MS`), unless `disarm_after` is 0 (writing it
    /// queues one) or tracing is off (activation queues one).
    pub(crate) fn schedule_reap(&self) {
        let after_ms = self
            .settings
            .disarm_after_s
            .load(Ordering::Relaxed)
            .saturating_mul(1000);
        if after_ms == 0 || !self.active.load(Ordering::Acquire) {
            return;
        }
        let period = (after_ms / 4).clamp(REAP_PERIOD_MIN_MS, REAP_PERIOD_MAX_MS);
        sys::schedule_reap(period);
    }
}

impl Tracer {
    /// Optimizable probes were just registered behind blockers (see `kprobe.rs`), or an
    /// entry hook was deferred (see `Tracer::arm_as`): release the blockers and give the
    /// deferred functions their hooks once arming has been quiet for
    /// `OPTIMIZE_QUIET_MS`, or at most `OPTIMIZE_MAX_DELAY_NS` after the oldest. kprobes' optimizer then runs once for all
    /// of them: it holds `kprobe_mutex` across an RCU-tasks grace period, and each of its
    /// runs during arming would stall every registration (a traced task waiting to go on)
    /// for as long.
    pub(crate) fn schedule_optimize(&self) {
        let now = clock_ns();
        let since =
            match self
                .blockers_since
                .compare_exchange(0, now, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => now,
                Err(s) => s,
            };
        let push_back = now.saturating_sub(since) < OPTIMIZE_MAX_DELAY_NS;
        sys::schedule_optimize(OPTIMIZE_QUIET_MS, push_back);
    }

    /// Gives the deferred entry hooks in one update, and releases every blocker in one
    /// unregistration: kprobes optimizes what it can.
    /// kprobes' optimizer runs a few jiffies later, after the lock's release published
    /// what is optimized (`stats`): when blockers went, the work item comes back once more
    /// to publish it (it finds no blocker then, and stops).
    fn release_blockers(&self) {
        let Some(mut inner) = self.lock_or_defer(DEFER_OPTIMIZE) else {
            return;
        };
        self.blockers_since.store(0, Ordering::Release);
        // The entry hooks deferred meanwhile (see `arm_as`) too, in one update.
        self.flush_deferred_hooks(&mut inner);
        let mut released = false;
        let mut batch = Batch::new();
        for p in inner.funcs.iter().flat_map(|f| f.sites.iter()) {
            released |= p.is_blocked();
            batch.add_blocker(p);
        }
        for p in inner.static_hooks.iter() {
            released |= p.is_blocked();
            batch.add_blocker(p);
        }
        drop(batch);
        drop(inner);
        if released {
            sys::schedule_optimize(OPTIMIZE_PUBLISH_MS, false);
        }
    }
}

/// Called from the module's delayed work item: the blockers of optimizable probes go.
#[no_mangle]
pub(crate) extern "C" fn fctrace_optimize_work() {
    if let Some(tr) = tracer() {
        tr.release_blockers();
    }
}

/// Called from the module's delayed work item: lazy disarming of idle functions.
#[no_mangle]
pub(crate) extern "C" fn fctrace_reap_work() {
    if let Some(tr) = tracer() {
        tr.reap_idle();
    }
}

use crate::sys::{idle_sched_class, tgid_sched_class as sched_class_of};
