// SPDX-License-Identifier: GPL-2.0

//! The seam to the kernel's API: safe wrappers over the C helpers (`c/*.c`, declared in
//! `helpers.h`) and over the few kernel functions and variables fctrace calls directly.
//!
//! Each `unsafe` is justified once, here; the rest of the module calls these wrappers.
//! Only the wrappers that own a registration (the file system in `fs.rs`, kprobes in
//! `kprobe.rs`, the entry hooks' ftrace_ops in `entry_ops.rs`, the ring buffer in
//! `buffer.rs`) use the bindings themselves; notifier chains are registered here
//! ([`Notifier`]). What differs between kernel series belongs here.
//!
//! "Any context" means the wrapper may be called from a probe handler (interrupts or
//! preemption off, or int3's NMI-like context); "process context; may sleep" means only
//! from a task that may sleep, holding no spinlock.

use core::marker::PhantomData;
use core::sync::atomic::{AtomicBool, Ordering};
use kernel::ffi::{c_int, c_ulong, c_void};
use kernel::prelude::*;

use crate::bindings;

mod mutex;
mod notifier;
mod own;
mod regs;
mod series;
mod stack;

#[cfg(target_arch = "aarch64")]
pub(crate) use own::{bp_lost_addr, bp_resume_addr, bp_trampoline_addr};
pub(crate) use own::{entry_trampoline_addr, return_site_addr, this_module};
#[cfg(target_arch = "x86_64")]
pub(crate) use own::{ret_insn_addr, trampoline_addr};
#[cfg(target_arch = "aarch64")]
pub(crate) use regs::set_lr;
pub(crate) use regs::{Regs, PC_OFFSET};
pub(crate) use series::{truncate, user_slice, HARDIRQ_STACK_PTR};
pub(crate) use stack::*;

pub(crate) use mutex::{TracerMutex, TracerMutexGuard};
pub(crate) use notifier::{modules_gone, ModuleWatch};
#[cfg(target_arch = "x86_64")]
pub(crate) use notifier::{Chain, DieArgs, Notifier, NotifierBlock};
#[cfg(target_arch = "x86_64")]
pub(crate) use notifier::{DIE_DEBUG, DIE_INT3};

/// Makes a guard `!Send`: what it undoes on drop must be undone on the CPU or task that
/// did it.
type NotSend = PhantomData<*mut ()>;

/// The registers of a probed context (`struct pt_regs`).
pub(crate) type PtRegs = bindings::pt_regs;
/// A kernel `struct file`, as the VFS passes it.
pub(crate) type File = bindings::file;
/// A kernel `struct poll_table_struct`, as the VFS passes it.
pub(crate) type PollTable = bindings::poll_table_struct;

/// `via` for a handler called by the die notifier chain in a debug trap (see
/// [`task_context`]).
pub(crate) const VIA_DIE: u32 = bindings::FCTRACE_VIA_DIE;

/// What the probed instruction, or fctrace's return trampoline, is running in.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum RunCtx {
    /// The task itself, on its own stack.
    Task,
    /// A softirq, or other code off the task's stack.
    SoftIrq,
    /// A hardware interrupt handler.
    HardIrq,
}

fn run_ctx(c: c_int) -> Option<RunCtx> {
    match c as u32 {
        bindings::FCTRACE_CTX_TASK => Some(RunCtx::Task),
        bindings::FCTRACE_CTX_SOFTIRQ => Some(RunCtx::SoftIrq),
        bindings::FCTRACE_CTX_HARDIRQ => Some(RunCtx::HardIrq),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------
// The current task and CPU. Any context.

/// The current task's thread ID and thread group ID (global).
pub(crate) fn current_ids() -> (u32, u32) {
    let (mut pid, mut tgid) = (0u32, 0u32);
    // SAFETY: reads two fields of `current`, which always exists; writes two locals.
    unsafe { bindings::fctrace_current_ids(&mut pid, &mut tgid) };
    (pid, tgid)
}

/// The current task as a key (its `task_struct`'s address): unlike its thread ID, which
/// an exec from a thread swaps with the leader's (`de_thread()`), it stays the task's
/// until the task is gone. Never 0. (arm64's resume places.)
#[cfg(target_arch = "aarch64")]
pub(crate) fn current_task() -> u64 {
    // SAFETY: reads `current`, which always exists.
    unsafe { bindings::fctrace_current_task() as u64 }
}

/// The current task's `comm`, NUL-terminated within its 16 bytes.
pub(crate) fn current_comm(comm: &mut [u8; 16]) {
    // SAFETY: copies 16 bytes of `current->comm` into `comm`, which has 16 bytes.
    unsafe { bindings::fctrace_current_comm(comm.as_mut_ptr()) };
}

/// Whether the current task's state is `TASK_RUNNING`.
pub(crate) fn task_running() -> bool {
    // SAFETY: reads `current`'s state.
    unsafe { bindings::fctrace_task_running() }
}

/// Whether the current task is exiting (`PF_EXITING`).
pub(crate) fn current_exiting() -> bool {
    // SAFETY: reads `current`'s flags.
    unsafe { bindings::fctrace_current_exiting() }
}

/// Whether the current task may be traced: false for most tasks, cheaply (its thread
/// group's bit of the hot mask, a superset of the traced thread groups' while tracing is
/// on). The first question of the probe handlers every task runs (kprobes' detours of
/// entry probes and pre-sites), before anything else; a pass by a task it rules out is
/// counted (per CPU) in [`untraced_probe_hits`].
#[inline(always)]
pub(crate) fn probe_traced() -> bool {
    // SAFETY: reads `current`'s thread group and the module's own `fctrace_hot_mask`, and
    // increments this CPU's counter (`this_cpu_inc()`, safe in any context).
    unsafe { bindings::fctrace_probe_traced() }
}

/// The passes [`probe_traced`] ruled out so far, on all CPUs.
pub(crate) fn untraced_probe_hits() -> u64 {
    // SAFETY: sums the module's own per-CPU counters; no preconditions.
    unsafe { bindings::fctrace_untraced_probe_hits() as u64 }
}

/// ftrace's "local" clock in nanoseconds (`trace_clock_local()`).
pub(crate) fn clock_ns() -> u64 {
    // SAFETY: `trace_clock_local()` has no preconditions.
    unsafe { bindings::fctrace_clock() }
}

/// The CPU this runs on (`raw_smp_processor_id()`); stable only with preemption off.
pub(crate) fn this_cpu() -> u32 {
    // SAFETY: reads a per-CPU variable.
    unsafe { bindings::fctrace_cpu() }
}

/// The number of possible CPU IDs (`nr_cpu_ids`).
pub(crate) fn nr_cpu_ids() -> u32 {
    // SAFETY: `nr_cpu_ids` is set at boot and read-only afterwards.
    unsafe { bindings::nr_cpu_ids }
}

/// This CPU's gs base (its per-CPU offset). Call with preemption off, or the answer may
/// be another CPU's.
#[cfg(target_arch = "x86_64")]
pub(crate) fn gs_base() -> u64 {
    // SAFETY: reads a per-CPU variable.
    unsafe { bindings::fctrace_gs_base() as u64 }
}

/// Saves the interrupt state and disables interrupts on this CPU until the guard drops.
#[must_use]
pub(crate) struct IrqsOff(c_ulong, NotSend);

impl IrqsOff {
    pub(crate) fn new() -> Self {
        // SAFETY: `local_irq_save()`; restored by `drop` on this CPU (interrupts stay off,
        // so the task cannot migrate meanwhile).
        IrqsOff(unsafe { bindings::fctrace_irq_save() }, PhantomData)
    }
}

impl Drop for IrqsOff {
    fn drop(&mut self) {
        // SAFETY: restores what `new` saved, on the same CPU.
        unsafe { bindings::fctrace_irq_restore(self.0) };
    }
}

/// ftrace's recursion protection around the return handler, as ftrace callbacks have:
/// while it lives, no ftrace callback of this context level runs (function_graph does
/// not trace what the handler calls). It holds the bits it took, or none when a callback
/// of this level holds them already.
#[must_use]
pub(crate) struct RecursionGuard(Option<c_int>, NotSend);

impl RecursionGuard {
    /// The guard; `None` when the bits could neither be taken nor are held (RCU is not
    /// watching, with `CONFIG_FTRACE_VALIDATE_RCU_IS_WATCHING`).
    ///
    /// A return must close its frame even where the bits are held already: at the end
    /// of an interrupt's softirqs, whose level is that of the task the interrupt stopped
    /// inside one of fctrace's callbacks (`fctrace_recursion_held()`). The handler cannot
    /// nest in itself there: its tree is guarded by `busy` (`Tracer::tree`).
    pub(crate) fn new() -> Option<Self> {
        // SAFETY: `ftrace_test_recursion_trylock()`, for both bits; unlocked by `drop`.
        let bit = unsafe { bindings::fctrace_recursion_lock() };
        if bit >= 0 {
            return Some(RecursionGuard(Some(bit), PhantomData));
        }
        // SAFETY: reads the current task's recursion bits.
        if unsafe { bindings::fctrace_recursion_held() } {
            return Some(RecursionGuard(None, PhantomData));
        }
        None
    }
}

impl Drop for RecursionGuard {
    fn drop(&mut self) {
        if let Some(bit) = self.0 {
            // SAFETY: `bit` is what the lock in `new` returned, on this CPU (preemption
            // stays disabled while the bits are held).
            unsafe { bindings::fctrace_recursion_unlock(bit) };
        }
    }
}

/// The context the probed instruction ran in and whether a task context could sleep
/// there, for a probe handler. `via`: 0 for a handler entered through int3, [`VIA_DIE`]
/// for one called by the die notifier chain, else the number of times the ftrace callback
/// (or an optimized probe's detour) disabled preemption. `None`: NMI, or a context that is
/// neither the task nor an interrupt fctrace follows (interrupts only with `irqs`).
pub(crate) fn task_context(regs: &PtRegs, via: u32, irqs: bool) -> Option<(RunCtx, bool)> {
    let mut sleepable = false;
    // SAFETY: `regs` are live registers (a reference); the helper reads them, the
    // preempt count and `current`, and writes the local `sleepable`.
    let c = unsafe { bindings::fctrace_task_context(regs, via, irqs, &mut sleepable) };
    run_ctx(c).map(|c| (c, sleepable))
}

/// The context fctrace's return trampoline runs in (interrupts only with `irqs`).
pub(crate) fn return_context(irqs: bool) -> Option<RunCtx> {
    // SAFETY: reads the preempt count and the stack pointer.
    run_ctx(unsafe { bindings::fctrace_return_ctx(irqs) })
}

// ---------------------------------------------------------------------------------------
// The return trampoline.

/// The return handler found no address for a return that came through the trampoline:
/// warns, and returns if the task can be killed (the trampoline then sends it to the
/// dead end); panics where it cannot.
pub(crate) fn return_lost(retp: u64) {
    // SAFETY: a plain function; `retp` is only printed.
    unsafe { bindings::fctrace_return_lost(retp as _) }
}

/// Sets where a task whose return has nowhere to go is sent (`rewind_stack_and_make_dead`).
pub(crate) fn set_dead_end(addr: u64) {
    // SAFETY: stores one word that `fctrace_return` reads.
    unsafe { bindings::fctrace_set_dead_end(addr as _) }
}

/// Whether a task whose return has nowhere to go can be sent to die (the dead end is
/// known).
#[cfg_attr(not(target_arch = "aarch64"), allow(dead_code))]
pub(crate) fn dead_end_known() -> bool {
    // SAFETY: reads the one word `set_dead_end` stores.
    unsafe { bindings::fctrace_dead_end_known() }
}

// ---------------------------------------------------------------------------------------
// Tasks, permissions and security. Process context.

/// The thread group of thread `pid` in the caller's PID namespace, and whether it is a
/// kernel thread; `ESRCH` if there is none, or the group is dead or dying.
pub(crate) fn pid_to_tgid(pid: i32) -> Result<(u32, bool)> {
    let mut kthread = false;
    // SAFETY: looks the PID up under RCU; writes `kthread`, a local.
    let r = unsafe { bindings::fctrace_pid_to_tgid(pid, &mut kthread) };
    kernel::error::to_result(r.min(0)).map(|()| (r as u32, kthread))
}

/// Whether thread group `tgid` (global) is alive: not dead, not dying.
pub(crate) fn tgid_alive(tgid: u32) -> bool {
    // SAFETY: looks the task up under RCU.
    unsafe { bindings::fctrace_tgid_alive(tgid) }
}

/// Whether thread group `tgid` (global) is a kernel thread.
pub(crate) fn tgid_is_kthread(tgid: u32) -> bool {
    // SAFETY: looks the task up under RCU.
    unsafe { bindings::fctrace_tgid_is_kthread(tgid) }
}

/// Whether the current task is a workqueue worker (a kworker). Any context.
pub(crate) fn current_is_kworker() -> bool {
    // SAFETY: reads `current`'s flags.
    unsafe { bindings::fctrace_current_is_kworker() }
}

/// Whether the current task runs one of fctrace's own work items. Any context.
pub(crate) fn current_is_own_worker() -> bool {
    // SAFETY: reads four words of c/wait.c and compares them with `current`.
    unsafe { bindings::fctrace_current_is_own_worker() }
}

/// Global `tgid` as the current task's PID namespace numbers it, 0 if it cannot see it.
pub(crate) fn tgid_vnr(tgid: u32) -> u32 {
    // SAFETY: looks the task up under RCU.
    unsafe { bindings::fctrace_tgid_vnr(tgid) }
}

/// The scheduling class (`struct sched_class *`) of thread group `tgid`'s leader, 0 if
/// there is none.
pub(crate) fn tgid_sched_class(tgid: u32) -> u64 {
    // SAFETY: looks the task up under RCU and reads one pointer.
    unsafe { bindings::fctrace_tgid_sched_class(tgid) }
}

/// The idle scheduling class (the boot CPU's idle task's).
pub(crate) fn idle_sched_class() -> u64 {
    // SAFETY: reads one pointer of `init_task`.
    unsafe { bindings::fctrace_idle_sched_class() }
}

/// Whether the current task may open a file of fctracefs: to write, `CAP_SYS_ADMIN`; to
/// read, `CAP_PERFMON` (or `CAP_SYS_ADMIN`); to read a trace, also no lockdown.
pub(crate) fn may_open(read: bool, write: bool, trace: bool) -> Result {
    // SAFETY: capability and LSM checks of the current task.
    kernel::error::to_result(unsafe { bindings::fctrace_may_open(read, write, trace) })
}

/// `EPERM` when lockdown forbids kprobes (`LOCKDOWN_KPROBES`).
pub(crate) fn locked_down() -> Result {
    // SAFETY: an LSM check of the current task.
    kernel::error::to_result(unsafe { bindings::fctrace_locked_down() })
}

/// Whether the current task may see kernel addresses (`kptr_restrict`, as `%pK` decides).
pub(crate) fn may_see_addrs() -> bool {
    // SAFETY: capability checks of the current task.
    unsafe { bindings::fctrace_may_see_addrs() }
}

/// A kernel address hashed with a key made at the first call: what readers who may not
/// see addresses get instead.
pub(crate) fn ptr_hash(v: u64) -> u32 {
    // SAFETY: siphash with the helper's own key; `get_random_once()` may run at the first
    // call, which process context allows.
    unsafe { bindings::fctrace_ptr_hash(v) }
}

/// The wall clock in seconds.
pub(crate) fn real_seconds() -> i64 {
    // SAFETY: reads the wall clock; no preconditions.
    unsafe { bindings::ktime_get_real_seconds() }
}

/// A `memalloc_nofs_save()` scope: allocations made while it lives do not recurse into
/// file systems. Dropped in the task that made it.
#[must_use]
pub(crate) struct NoFs(u32, NotSend);

impl NoFs {
    pub(crate) fn new() -> Self {
        // SAFETY: `memalloc_nofs_save()`; restored by `drop`.
        NoFs(unsafe { bindings::fctrace_nofs_save() }, PhantomData)
    }
}

impl Drop for NoFs {
    fn drop(&mut self) {
        // SAFETY: restores what `new` saved.
        unsafe { bindings::fctrace_nofs_restore(self.0) };
    }
}

/// Size of a `sprint_symbol()` buffer (`c/helpers.c` asserts the kernel's
/// `KSYM_SYMBOL_LEN` fits).
pub(crate) const KSYM_SYMBOL_LEN: usize = 1024;

/// Formats `addr` as `sprint_symbol()` does into `buf`; the length written.
pub(crate) fn sprint_symbol(buf: &mut [u8; KSYM_SYMBOL_LEN], addr: u64, offset: bool) -> usize {
    // SAFETY: `buf` has `KSYM_SYMBOL_LEN` bytes, at least the kernel's KSYM_SYMBOL_LEN
    // (`c/helpers.c` asserts it), for the NUL-terminated result.
    let n = unsafe {
        if offset {
            bindings::sprint_symbol(buf.as_mut_ptr(), addr as _)
        } else {
            bindings::sprint_symbol_no_offset(buf.as_mut_ptr(), addr as _)
        }
    };
    (n.max(0) as usize).min(buf.len() - 1)
}

/// The size of `/sys/kernel/btf/<name>` (`vmlinux` or a module's), `None` if absent.
/// Process context; may sleep.
pub(crate) fn btf_size(name: &CStr) -> Option<usize> {
    // SAFETY: `name` is NUL-terminated.
    let n = unsafe { bindings::fctrace_btf_size(name.as_char_ptr()) };
    (n > 0).then_some(n as usize)
}

/// Reads `/sys/kernel/btf/<name>` into `buf`; the bytes read. Process context; may sleep.
pub(crate) fn btf_read(name: &CStr, buf: &mut [u8]) -> Result<usize> {
    // SAFETY: `buf` has `buf.len()` writable bytes; `name` is NUL-terminated.
    let n = unsafe {
        bindings::fctrace_btf_read(name.as_char_ptr(), buf.as_mut_ptr().cast(), buf.len() as _)
    };
    if n < 0 {
        return Err(Error::from_errno(n as c_int));
    }
    Ok(n as usize)
}

// ---------------------------------------------------------------------------------------
// Sleeping and grace periods. Process context; may sleep.

/// Sleeps `ms` milliseconds.
pub(crate) fn msleep(ms: u32) {
    // SAFETY: sleeping is allowed in process context.
    unsafe { bindings::msleep(ms) };
}

/// Sleeps `ms` milliseconds in `TASK_IDLE` (no hung-task report, no signal wakes it).
pub(crate) fn sleep_idle(ms: u32) {
    // SAFETY: sleeping is allowed in process context.
    unsafe { bindings::fctrace_sleep_idle(ms) };
}

/// Waits for an RCU Tasks grace period.
pub(crate) fn synchronize_rcu_tasks() {
    // SAFETY: sleeping is allowed in process context.
    unsafe { bindings::synchronize_rcu_tasks() };
}

/// Waits until every probe handler running now has returned.
pub(crate) fn synchronize_handlers() {
    // SAFETY: sleeping is allowed in process context.
    unsafe { bindings::fctrace_synchronize_handlers() };
}

// ---------------------------------------------------------------------------------------
// The work items (`c/wait.c`): the arming pass, lazy disarming, deferred optimization.

/// Queues the arming pass (`fctrace_sync_work()`). Any context, NMI-like included: raises
/// an irq_work that queues the work item.
pub(crate) fn schedule_sync() {
    // SAFETY: `irq_work_queue()` on a static irq_work; NMI-safe.
    unsafe { bindings::fctrace_schedule_sync() };
}

/// Runs the lazy disarming pass (`fctrace_reap_work()`) in `ms` milliseconds (no-op if
/// queued).
pub(crate) fn schedule_reap(ms: u32) {
    // SAFETY: `schedule_delayed_work()` on a static work item.
    unsafe { bindings::fctrace_schedule_reap(ms) };
}

/// Runs the lazy disarming pass in `ms` milliseconds, sooner than one queued for later
/// (tracing stopped: only the resume probe is waited for, arm64).
#[cfg(target_arch = "aarch64")]
pub(crate) fn reschedule_reap(ms: u32) {
    // SAFETY: `mod_delayed_work()` on a static work item.
    unsafe { bindings::fctrace_reschedule_reap(ms) };
}

/// Runs `fctrace_optimize_work()` in `ms` milliseconds; with `push_back`, that many after
/// the last call.
pub(crate) fn schedule_optimize(ms: u32, push_back: bool) {
    // SAFETY: `mod_delayed_work()`/`schedule_delayed_work()` on a static work item.
    unsafe { bindings::fctrace_schedule_optimize(ms, push_back) };
}

/// Takes a reference to this module: `rmmod` is refused ("in use") until
/// [`module_put`]. Any context.
pub(crate) fn module_get() {
    // SAFETY: `__module_get(THIS_MODULE)` from the module's own code, which runs, so the
    // module is live (not yet past its exit function's end).
    unsafe { bindings::fctrace_module_get() };
}

/// Drops the reference [`module_get`] took. Process context (the caller goes on running
/// module code: the exit function waits for it, see [`cancel_work`]).
pub(crate) fn module_put() {
    // SAFETY: pairs with one `module_get()`; the caller holds that reference.
    unsafe { bindings::fctrace_module_put() };
}

/// Cancels the work items for good (the module is being removed): nothing queues them
/// after this, a running one is waited for. Process context; may sleep.
pub(crate) fn cancel_work() {
    // SAFETY: `synchronize_rcu()` and `cancel_*work_sync()` on static work items, from
    // process context (the tracer's drop).
    unsafe { bindings::fctrace_cancel_sync() };
}

/// The arming sequence number a task in the trampoline reads before its checks.
pub(crate) fn arm_seq() -> u32 {
    // SAFETY: reads an atomic counter.
    unsafe { bindings::fctrace_arm_seq() }
}

/// How a wait for arming ended.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Woken {
    /// The work item bumped the sequence number.
    Bumped,
    /// The time ran out.
    Timeout,
    /// A fatal signal is pending.
    Fatal,
}

/// Sleeps until the arming sequence number moves past `seq`, `ms` milliseconds pass or a
/// fatal signal comes; a task whose state is not `TASK_RUNNING` polls instead. Only from
/// the arming trampoline (sleepable, no locks held).
pub(crate) fn arm_sleep(seq: u32, ms: u32) -> Woken {
    // SAFETY: the caller is a task in the trampoline, where it may sleep.
    match unsafe { bindings::fctrace_arm_sleep(seq, ms) } {
        r if r < 0 => Woken::Fatal,
        0 => Woken::Timeout,
        _ => Woken::Bumped,
    }
}

/// Wakes the tasks waiting for arming.
pub(crate) fn arm_wake() {
    // SAFETY: `wake_up_all()` on a static wait queue.
    unsafe { bindings::fctrace_arm_wake() };
}

/// `lossless`: waits until a reader takes records or `ms` pass; true if a signal is
/// pending. Only from the arming trampoline (sleepable, no locks held).
pub(crate) fn throttle_sleep(ms: u32) -> bool {
    // SAFETY: the caller is a task in the trampoline, where it may sleep.
    unsafe { bindings::fctrace_throttle_sleep(ms) != 0 }
}

/// A reader took records: wakes throttled tasks.
pub(crate) fn throttle_wake() {
    // SAFETY: `wake_up_all()` on a static wait queue.
    unsafe { bindings::fctrace_throttle_wake() };
}

/// How often readers took records. Any context.
pub(crate) fn throttle_progress() -> u32 {
    // SAFETY: reads an atomic counter.
    unsafe { bindings::fctrace_throttle_progress() }
}

// ---------------------------------------------------------------------------------------
// Readers of the trace (`c/wait.c`).

/// Records arrived: wakes `trace_pipe` readers. Any context, NMI-like included.
pub(crate) fn wake_readers() {
    // SAFETY: NMI-safe: queues an irq_work when a reader sleeps.
    unsafe { bindings::fctrace_wake_readers() };
}

/// Flushes a pending reader wake-up. Process context.
pub(crate) fn wake_sync() {
    // SAFETY: `irq_work_sync()` on a static irq_work.
    unsafe { bindings::fctrace_wake_sync() };
}

/// A `trace_pipe` reader waits `ms` milliseconds for staged records to fill up; `Err` on
/// a signal. Process context; may sleep.
pub(crate) fn reader_nap(ms: u32) -> Result {
    // SAFETY: sleeping is allowed in process context.
    kernel::error::to_result(unsafe { bindings::fctrace_reader_nap(ms) })
}

/// Something a reader waits for: `ready(arg)` says whether it is there.
pub(crate) type ReadyFn = unsafe extern "C" fn(arg: *mut c_void) -> bool;

/// Waits until `ready(arg)` or a signal. Process context; may sleep.
///
/// # Safety
///
/// `ready` may be called with `arg` from any context until this returns.
pub(crate) unsafe fn wait_ready(ready: ReadyFn, arg: *mut c_void) -> Result {
    // SAFETY: the caller guarantees `ready(arg)` is valid for the call.
    kernel::error::to_result(unsafe { bindings::fctrace_wait_ready(Some(ready), arg) })
}

/// For `poll()`: registers `file` on the readers' wait queue; the poll mask.
///
/// # Safety
///
/// `file` and `pt` come from the VFS's poll call; `ready(arg)` is valid for the call.
pub(crate) unsafe fn poll_ready(
    file: *mut File,
    pt: *mut PollTable,
    ready: ReadyFn,
    arg: *mut c_void,
) -> u32 {
    // SAFETY: as the caller guarantees.
    unsafe { bindings::fctrace_poll_ready(file, pt, Some(ready), arg) }
}

/// Runs `func(info)` with interrupts off on every CPU for which `cond(cpu, info)` holds;
/// waits for them. Process context; may sleep.
///
/// # Safety
///
/// `cond` and `func` may be called with `info` from any CPU until this returns.
pub(crate) unsafe fn flush_cpus(
    cond: unsafe extern "C" fn(cpu: c_int, info: *mut c_void) -> bool,
    func: unsafe extern "C" fn(info: *mut c_void),
    info: *mut c_void,
) {
    // SAFETY: as the caller guarantees.
    unsafe { bindings::fctrace_flush_cpus(Some(cond), Some(func), info) };
}

// ---------------------------------------------------------------------------------------
// Hooks that live as long as the tracer (`c/hooks.c`): the exit and exec tracepoints and
// the CPU hotplug callback. Process context.

/// Registers the exit and exec tracepoint probes and the CPU-down callback; they are
/// unregistered when the returned value drops. At most one lives at a time (`c/hooks.c`
/// keeps their state in statics).
pub(crate) struct Hooks(());

static HOOKS_LIVE: AtomicBool = AtomicBool::new(false);

impl Hooks {
    /// # Safety
    ///
    /// `fctrace_task_exit()`, `fctrace_task_exec()`, `fctrace_flush_this_cpu()` and
    /// `fctrace_module_text_gone()` may be called from the moment this starts until the
    /// value is dropped.
    pub(crate) unsafe fn register() -> Result<Self> {
        if HOOKS_LIVE.swap(true, Ordering::AcqRel) {
            return Err(EBUSY);
        }
        // SAFETY: registers this module's tracepoint probes; unregistered in `drop`, or
        // below on failure.
        if let Err(e) = kernel::error::to_result(unsafe { bindings::fctrace_exit_hook_register() })
        {
            HOOKS_LIVE.store(false, Ordering::Release);
            return Err(e);
        }
        // SAFETY: registers this module's CPU-down callback; unregistered in `drop`.
        if let Err(e) = kernel::error::to_result(unsafe { bindings::fctrace_cpu_down_register() }) {
            // SAFETY: registered just above.
            unsafe { bindings::fctrace_exit_hook_unregister() };
            HOOKS_LIVE.store(false, Ordering::Release);
            return Err(e);
        }
        // SAFETY: registers this module's module notifier; unregistered in `drop`.
        let r = unsafe { bindings::fctrace_module_hook_register() };
        if let Err(e) = kernel::error::to_result(r) {
            // SAFETY: both registered just above.
            unsafe {
                bindings::fctrace_cpu_down_unregister();
                bindings::fctrace_exit_hook_unregister();
            }
            HOOKS_LIVE.store(false, Ordering::Release);
            return Err(e);
        }
        Ok(Hooks(()))
    }
}

impl Drop for Hooks {
    fn drop(&mut self) {
        // SAFETY: registered in `register`; waits for a callback in progress (the
        // notifier chain's lock).
        unsafe { bindings::fctrace_module_hook_unregister() };
        // SAFETY: registered in `register`; waits for running probes of the tracepoints.
        unsafe { bindings::fctrace_exit_hook_unregister() };
        // SAFETY: registered in `register`; waits for a callback in progress.
        unsafe { bindings::fctrace_cpu_down_unregister() };
        HOOKS_LIVE.store(false, Ordering::Release);
    }
}

// ---------------------------------------------------------------------------------------
// The file system's mount point and owner.

/// Creates `/sys/kernel/fctrace`.
pub(crate) fn mountpoint_create() -> Result {
    // SAFETY: `sysfs_create_mount_point()`, process context.
    kernel::error::to_result(unsafe { bindings::fctrace_mountpoint_create() })
}

/// Removes `/sys/kernel/fctrace`, made by [`mountpoint_create`].
pub(crate) fn mountpoint_remove() {
    // SAFETY: `sysfs_remove_mount_point()`, process context; callers made it before.
    unsafe { bindings::fctrace_mountpoint_remove() };
}
