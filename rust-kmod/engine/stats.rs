// SPDX-License-Identifier: GPL-2.0

//! The tracer's event counters, shown in `stats`.

use super::*;

/// Event counters shown in `stats`.
#[derive(Default)]
pub(crate) struct Stats {
    pub(crate) reasons: [AtomicU64; Reason::COUNT],
    pub(crate) task_overflow: AtomicU64,
    /// Probe hits in a handler's own path (code it called reached a probe) that found
    /// their tree held by that handler and were left out.
    pub(crate) handlers_nested: AtomicU64,
    /// Entries of the return stacks found where a call fctrace made wrote its return
    /// address: of frames gone without their return seen (dropped; should stay 0).
    pub(crate) returns_stale: AtomicU64,
    /// Returns that came through the trampoline where no word was replaced (a function
    /// that returned with its stack pointer moved, as a callee-pop `ret $n` does): sent
    /// to the newest entry's address, tracing stopped (`Tracer::return_unexpected`).
    pub(crate) returns_unexpected: AtomicU64,
    /// Traced processes that executed a program gaining privileges (set-user-ID,
    /// set-group-ID, file capabilities) and so stopped being traced.
    pub(crate) privileged_execs: AtomicU64,
    /// Traced processes whose last thread exited (removed from `set_pid`).
    pub(crate) processes_exited: AtomicU64,
    pub(crate) armed_ahead: AtomicU64,
    pub(crate) ahead_queued: AtomicU64,
    /// Queued calls a later one replaced in the queue before the work item took them.
    pub(crate) ahead_overwritten: AtomicU64,
    /// Functions queued for arming ahead after those (`Tracer::want_later`).
    pub(crate) ahead_later: AtomicU64,
    /// Ops tables read for the other methods of a function called through them in
    /// atomic context, and the methods found there not armed yet (`wait/`).
    pub(crate) ahead_tables: AtomicU64,
    pub(crate) ahead_methods: AtomicU64,
    /// The last start round of arming ahead (`wait/`): the functions it armed, and how
    /// long it took (ns; 0 while it runs).
    pub(crate) start_armed: AtomicU64,
    pub(crate) start_ns: AtomicU64,
    pub(crate) redirects: AtomicU64,
    /// Waits for arming made by polling: by a task in a wait loop's state (`wait/`).
    pub(crate) arm_polls: AtomicU64,
    /// Tasks that reached the trampoline with EFLAGS.AC or DF set (must stay 0).
    pub(crate) unsafe_flags: AtomicU64,
    /// Functions armed now: `inner.funcs.len()`, published by [`Guard`] as it releases the
    /// mutex, so that reading `stats` does not wait for an arming pass holding it.
    pub(crate) funcs_armed: AtomicU64,
    pub(crate) funcs_refused: AtomicU64,
    pub(crate) probes_armed: AtomicU64,
    pub(crate) sites_unprobeable: AtomicU64,
    /// arm64: direct calls of trivial leaves without an ftrace site left unprobed
    /// (`arming/arm64.rs`).
    pub(crate) trivial_calls: AtomicU64,
    /// Callees of refused call sites with an entry hook (see `entry_probe.rs`), and
    /// those that could not get one.
    pub(crate) static_hooks: AtomicU64,
    pub(crate) static_hooks_missing: AtomicU64,
    /// Direct callees without an ftrace site with an entry probe now (`entry_probe.rs`),
    /// and of all entry probes, those kprobes had optimized when the mutex was last
    /// released.
    pub(crate) entry_probes: AtomicU64,
    pub(crate) entry_probes_optimized: AtomicU64,
    /// Functions with an entry hook (see `entry.rs`), and those that could not get one
    /// (no ftrace site, or ftrace refused it): their call sites are probed instead.
    pub(crate) entry_hooks: AtomicU64,
    pub(crate) entry_hooks_refused: AtomicU64,
    /// Updates of the entry hooks' ftrace filter (`ftrace_set_filter_ips()`), and the time
    /// spent in them (ns; also counted in `registrations` and `register_ns`).
    pub(crate) entry_updates: AtomicU64,
    pub(crate) entry_update_ns: AtomicU64,
    /// The longest of those updates (ns).
    pub(crate) entry_update_max_ns: AtomicU64,
    /// Of those updates, the ones that registered an ops of entry hooks (its first
    /// batch, `c/entry_ops.c`), and their time (ns).
    pub(crate) entry_ops: AtomicU64,
    pub(crate) entry_ops_ns: AtomicU64,
    /// Functions reached through a pointer whose own entry hook waited for a later update
    /// (see `Tracer::arm_as`).
    pub(crate) entry_hooks_deferred: AtomicU64,
    /// `irqs` option: interrupt entry functions that could not be hooked.
    pub(crate) irq_roots_missing: AtomicU64,
    /// `lossless` option: times a traced task waited for the reader.
    pub(crate) lossless_waits: AtomicU64,
    /// `lossless`: waits given up because the readers took nothing for a second.
    pub(crate) lossless_timeouts: AtomicU64,
    /// Functions disarmed lazily (idle, or to make room under `max_probes`).
    pub(crate) funcs_disarmed: AtomicU64,
    /// Probe registrations tried, and the time spent in them (ns): what arming costs.
    pub(crate) registrations: AtomicU64,
    pub(crate) register_ns: AtomicU64,
    /// Probes unregistered while tracing (lazy disarming) and the time that took (ns).
    pub(crate) unregistrations: AtomicU64,
    pub(crate) unregister_ns: AtomicU64,
    /// Returns hooked (the return address replaced with `fctrace_return`), those that
    /// could not be (a return stack full, or all taken), and words that could not be put
    /// back when tracing stopped (another tracer's return hook had taken them over).
    pub(crate) returns_hooked: AtomicU64,
    pub(crate) returns_unhooked: AtomicU64,
    pub(crate) returns_not_restored: AtomicU64,
    /// 1 while tracing stopped and such a word's return is still to come: the module
    /// holds itself (`rmmod` is refused) until it came.
    pub(crate) returns_pending: AtomicU64,
    /// Times tracing stopped by itself (`tracing_on` reads 0): a change of
    /// `start_function` or `filter` could be armed neither with the new value nor again
    /// with the old one, or a return came that the trace could not account for.
    pub(crate) stopped_on_error: AtomicU64,
    /// Times module text that fctrace had armed or marked went away (a module unloaded,
    /// or its init text freed) while tracing: everything was armed again from scratch.
    pub(crate) module_text_gone: AtomicU64,
    /// Pre-site probes (indirect call sites watched from the instructions before them,
    /// see `step.rs`) registered, and those kprobes had optimized, when the mutex was
    /// last released; single steps from a pre-site to its call site, and steps that ended
    /// before reaching the site.
    pub(crate) presites: AtomicU64,
    pub(crate) presites_optimized: AtomicU64,
    /// Post-site probes (where a direct call watched from its pre-site returns, see
    /// `step.rs`) registered, and those kprobes had optimized, at the same moment.
    pub(crate) postsites: AtomicU64,
    pub(crate) postsites_optimized: AtomicU64,
    /// Page faults a traced task took in kernel mode inside a traced call (drawn, or
    /// left out with a hidden call), since load.
    pub(crate) page_faults: AtomicU64,
    /// 1 when `handle_mm_fault()` could not be armed and hooked at the last activation:
    /// page faults are not drawn.
    pub(crate) fault_hook_missing: AtomicU64,
    pub(crate) single_steps: AtomicU64,
    /// `args`: user strings unreadable at their call read again at its return, and
    /// those still unreadable then.
    pub(crate) strings_at_return: AtomicU64,
    pub(crate) strings_unread: AtomicU64,
    /// Single steps started from a pre-site probe's breakpoint (not optimized, or not yet).
    pub(crate) single_steps_trapped: AtomicU64,
    pub(crate) single_steps_lost: AtomicU64,
    /// Kernel single-step traps of a traced task that no notifier claimed and that no
    /// step of fctrace's accounts for: ended as fctrace's (see `step::on_debug`).
    pub(crate) single_steps_unclaimed: AtomicU64,
    /// Pre-site hits of the traced task whose target the pre-site computed and found
    /// hooked and armed: no single step, the target's entry hook drew the call.
    pub(crate) presite_computed: AtomicU64,
    /// Optimizable probes held as breakpoints by their blocker (arming is not quiet yet,
    /// see `kprobe.rs`), when the mutex was last released.
    pub(crate) probe_blockers: AtomicU64,
}
