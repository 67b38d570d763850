// SPDX-License-Identifier: GPL-2.0

//! The dynamic call-site engine.
//!
//! A function is *armed* when a kprobe sits on each of its call instructions, tail jumps
//! and returns. When a traced task reaches an armed call site, the call is recorded and, if
//! the callee is not armed yet, the task is sent through `fctrace_trampoline`, where it
//! waits (in its own, sleepable, context) for the work item to arm the callee, and then
//! runs the call again. So the
//! probed code grows with what the task executes, and nothing else is touched.
//!
//! Each traced thread inside a trace has a slot with a shadow stack of frames. A frame is
//! identified by the stack pointer at the callee's entry (`entry_sp`): a return at stack
//! pointer `sp` closes every frame with `entry_sp <= sp`, which keeps the tree consistent
//! through tail calls (several frames share one `entry_sp`) and missed returns.

use crate::bindings;
use crate::buffer::Buffer;
use crate::control::{Control, ErrorLog};
use crate::decode::{self, Flow};
use crate::kprobe::{Batch, Probe};
use crate::parse::{self, FilterVerdict};
use crate::record::{Kind, Reason, Record, F_DURATION, F_INDIRECT, F_IRQ, F_RETVAL, F_SOFTIRQ, F_TAIL};
use core::cell::UnsafeCell;
use core::pin::Pin;
use kernel::ffi::c_int;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use kernel::alloc::{KVVec, KVec};
use kernel::prelude::*;
use kernel::sync::Mutex;
use kernel::{c_str, new_mutex};

/// The most frames one task's trace can hold; `max_depth` is at most this.
pub(crate) const MAX_FRAMES: usize = 128;
/// Threads that can be inside a trace at once.
pub(crate) const MAX_TASKS: usize = 64;
/// Processes `set_pid` can hold.
pub(crate) const MAX_PIDS: usize = 32;
/// Functions fctrace can know about at once (armed or refused).
const TABLE_CAP: usize = 16384;
/// Default and largest bound on the probes armed at once (`max_probes`).
pub(crate) const DEFAULT_MAX_PROBES: u64 = 60000;
pub(crate) const MAX_MAX_PROBES: u64 = 1_000_000;
/// Functions waiting to be armed ahead.
const WANTED: usize = 256;
/// The most functions one round of arming ahead adds (a callee closure is cut there).
const AHEAD_BUDGET: usize = 256;
/// How many levels of direct callees are armed ahead below a function first called in
/// atomic context. Deeper calls are learned the same way on later runs.
const AHEAD_DEPTH: u8 = 4;
/// The most functions one round of arming ahead looks at (armed ones included).
const AHEAD_WALK: usize = 4096;
/// Default `arm_wait_ms`: how long a task in the trampoline waits for the work item to
/// arm its callee.
const DEFAULT_ARM_WAIT_MS: u32 = 10_000;
/// The largest function fctrace decodes.
const MAX_FUNC_SIZE: u64 = 256 * 1024;
/// Default `disarm_after`, seconds.
pub(crate) const DEFAULT_DISARM_AFTER_S: u32 = 30;
/// How often idle functions are looked for: a quarter of `disarm_after`, between these
/// bounds (milliseconds).
const REAP_PERIOD_MIN_MS: u32 = 1000;
const REAP_PERIOD_MAX_MS: u32 = 10_000;

/// What the function table says about a function.
const ST_ARMED: u32 = 1;
const ST_HIDDEN: u32 = 2;
const ST_LEAF: u32 = 3; // with a `Reason` in bits 8..16

/// The single instance, for the C callbacks.
static STATE: AtomicPtr<State> = AtomicPtr::new(core::ptr::null_mut());

/// The module's state, if loaded.
pub(crate) fn state() -> Option<&'static State> {
    let p = STATE.load(Ordering::Acquire);
    // SAFETY: `STATE` is set to a pinned, heap-allocated `State` by `StateHandle::new` and
    // cleared in `StateHandle::drop` only after every probe and file is gone and no task
    // can be in the trampoline; callers never keep the reference past their callback.
    unsafe { p.as_ref() }
}

/// How the traced task reaches the callee of a call site.
#[derive(Clone, Copy)]
pub(crate) enum Target {
    /// `call rel32` (or `jmp rel32`): a fixed address.
    Direct(u64),
    /// Through a register (`call *%r11`, or a retpoline thunk `call __x86_indirect_thunk_r11`).
    Reg(u8),
    /// Through memory (`call *0x10(%rax)`).
    Mem(decode::Mem),
}

/// What a probed instruction is.
#[derive(Clone, Copy)]
pub(crate) enum SiteKind {
    /// A call.
    Call(Target),
    /// A jump out of the function: a tail call.
    Tail(Target),
    /// A conditional jump out of the function: a tail call when condition `cc` holds (to a
    /// retpoline thunk, `jne __x86_indirect_thunk_r11`, it is an indirect one).
    TailIf(Target, u8),
    /// A return (`ret`, or `jmp __x86_return_thunk`).
    Ret,
}

/// What the handler of a call-site probe knows.
pub(crate) struct SiteData {
    func: u64,
    func_end: u64,
    addr: u64,
    len: u8,
    kind: SiteKind,
}

type Site = Probe<SiteData>;

/// An armed function: its probes.
pub(crate) struct Func {
    sites: KVec<Site>,
    /// Its entry in the function table.
    entry: usize,
    /// Never disarmed lazily: the start function and interrupt entry functions, whose
    /// entry hooks open trees.
    pinned: bool,
}

/// Which task-lifetime hook a probe is.
#[derive(Clone, Copy)]
pub(crate) enum Hook {
    /// The start function's entry.
    Root,
    /// `do_exit()`: a thread ends.
    Exit,
    /// `wake_up_new_task()`: a fork or clone.
    Fork,
    /// The body of `x64_sys_call(regs, nr)` (past its ftrace site, so an int3 probe):
    /// in all-system-calls mode, opens a trace at `sys_call_table[nr]`.
    Syscall,
    /// The entry of an interrupt handler (`irqs` option): opens an interrupt's tree when
    /// a traced task is current. With the function's start address.
    IrqRoot(Ctx, u64),
    /// A `call __schedule` of the preemption path: a traced task preempted at a
    /// `preempt_enable()`, inside a preemption thunk (see [`PREEMPT_THUNKS`]), enters the
    /// scheduler.
    Preempt,
}

/// Preemption at `preempt_enable()`: the call goes to `preempt_schedule_thunk` (or its
/// `_notrace` twin), which kprobes refuses, and from there through `preempt_schedule()`
/// (also refused) and `preempt_schedule_common()` (or `preempt_schedule_notrace()`) to
/// `__schedule()`. A call to a thunk opens a frame (closed, without a value, when the
/// task is seen above it again), and the [`Hook::Preempt`] probes on the `call
/// __schedule` instructions of those two open a frame for the scheduler inside it, so the
/// calls the scheduler makes for the task are followed as for `schedule()`. Only
/// preemptions hit them, not every context switch. 0 = not found (no hook).
static PREEMPT_THUNKS: [AtomicU64; 2] = [const { AtomicU64::new(0) }; 2];
/// `__schedule()`.
static SCHED_ADDR: AtomicU64 = AtomicU64::new(0);
/// Where the [`Hook::Preempt`] int3 probes are (0 = none), and the byte each replaced:
/// arming a function that contains one (`__cond_resched()` calls
/// `preempt_schedule_common()`) decodes its code with that byte put back.
static PREEMPT_HOOKS: [AtomicU64; MAX_PREEMPT_HOOKS] = [const { AtomicU64::new(0) }; MAX_PREEMPT_HOOKS];
static PREEMPT_HOOK_BYTES: [AtomicU8; MAX_PREEMPT_HOOKS] = [const { AtomicU8::new(0) }; MAX_PREEMPT_HOOKS];
const MAX_PREEMPT_HOOKS: usize = 4;

fn is_preempt_thunk(f: u64) -> bool {
    f != 0 && PREEMPT_THUNKS.iter().any(|t| t.load(Ordering::Relaxed) == f)
}

/// The context a probe hit runs in, for a traced task that is current.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ctx {
    /// The task itself.
    Task,
    /// A softirq (or other code running for the task off its stack).
    SoftIrq,
    /// A hardware interrupt handler.
    HardIrq,
}

/// Interrupt entry functions probed with the `irqs` option: hardware interrupts (timer,
/// devices, IPIs, irq_work) and softirqs (also those run from `local_bh_enable()`).
const IRQ_ROOTS: &[(&CStr, Ctx)] = &[
    (c_str!("__sysvec_apic_timer_interrupt"), Ctx::HardIrq),
    (c_str!("__common_interrupt"), Ctx::HardIrq),
    (c_str!("__sysvec_irq_work"), Ctx::HardIrq),
    (c_str!("__sysvec_call_function_single"), Ctx::HardIrq),
    (c_str!("__sysvec_call_function"), Ctx::HardIrq),
    (c_str!("handle_softirqs"), Ctx::SoftIrq),
];

#[derive(Clone, Copy)]
struct Frame {
    func: u64,
    /// The function's index in the table (for its open-frame count), or `NO_ENTRY`.
    entry: u32,
    entry_sp: u64,
    ts: u64,
    /// The frame ended in a tail call that was not followed: it returns when that callee
    /// does, which no probe sees, so its close is expected, not a missed return.
    ends_in_leaf: bool,
}

const NO_FRAME: Frame = Frame { func: 0, entry: NO_ENTRY, entry_sp: 0, ts: 0, ends_in_leaf: false };

impl TaskData {
    const EMPTY: TaskData = TaskData {
        gen: 0,
        depth: 0,
        frames: [NO_FRAME; MAX_FRAMES],
        suppress_below: 0,
        guard: false,
        pending: 0,
        throttle: false,
        last_throttle: 0,
        last_redirect: 0,
        nowait: false,
    };
}

struct TaskData {
    gen: u32,
    depth: usize,
    frames: [Frame; MAX_FRAMES],
    /// While set, probes hit at a stack pointer below this are inside a call that is not
    /// followed, and are ignored.
    suppress_below: u64,
    /// The task is in fctrace's own arming path.
    guard: bool,
    pending: u64,
    /// Sent to the trampoline to wait for the reader (`lossless`).
    throttle: bool,
    /// The call site the task last waited at (`lossless`): when the task makes the call
    /// again after waiting, it goes on.
    last_throttle: u64,
    last_redirect: u64,
    /// A wait for arming timed out in this trace (system call or start-function call):
    /// the task likely holds something arming needs, so until the trace ends its calls to
    /// unarmed functions are not waited for (shown as `arming timed out`, armed ahead).
    nowait: bool,
}

/// One traced thread inside a trace.
///
/// # Invariants
///
/// `data` is only accessed by the thread whose id is in `pid`, from its own context (its
/// probe handlers, which run with interrupts off, or the trampoline); a slot is claimed and
/// released by that thread with atomic operations on `pid`.
struct TaskSlot {
    pid: AtomicU32,
    data: UnsafeCell<TaskData>,
}

// SAFETY: see the invariant: `data` is never shared between threads.
unsafe impl Sync for TaskSlot {}

/// The call tree of one interrupt context (hard or soft) of one CPU, while a traced task
/// is current there (`irqs` option).
///
/// # Invariants
///
/// `data` is only accessed on its CPU, by handlers running in its context with interrupts
/// off (int3 handlers, and the ftrace-based handlers of interrupt entry functions, which
/// are entered with interrupts off). Hard interrupts do not nest, nor do softirqs, and
/// each kind has its own slot, so no two accesses overlap.
struct IrqSlot {
    data: UnsafeCell<TaskData>,
}

// SAFETY: see the invariant: `data` is only used from one CPU, one context at a time.
unsafe impl Sync for IrqSlot {}

struct Entry {
    key: AtomicU64,
    val: AtomicU32,
    /// Frames of this function open now (in any task or interrupt tree).
    open: AtomicU32,
    /// When a traced task last entered it (or it was armed), [`clock_ns`].
    last: AtomicU64,
}

/// `Frame::entry` of a frame whose function has no table entry.
const NO_ENTRY: u32 = u32::MAX;

/// The scheduler clock in ns (`local_clock()`): the trace's timestamps, durations and
/// idle times. Any context, NMI included.
fn clock_ns() -> u64 {
    // SAFETY: a C wrapper of `local_clock()`, which has no preconditions.
    unsafe { bindings::fctrace_clock() }
}

/// Runs `f` and adds the time it took to `ns`.
fn timed<R>(ns: &AtomicU64, f: impl FnOnce() -> R) -> R {
    let t0 = clock_ns();
    let r = f();
    ns.fetch_add(clock_ns().saturating_sub(t0), Ordering::Relaxed);
    r
}

/// Event counters shown in `stats`.
pub(crate) struct Stats {
    pub(crate) written: AtomicU64,
    pub(crate) write_failed: AtomicU64,
    pub(crate) reasons: [AtomicU64; crate::record::Reason::COUNT],
    pub(crate) task_overflow: AtomicU64,
    pub(crate) armed_ahead: AtomicU64,
    pub(crate) ahead_queued: AtomicU64,
    pub(crate) redirects: AtomicU64,
    /// Functions armed now: `ctl.funcs.len()`, published by [`CtlGuard`] as it releases the
    /// mutex, so that reading `stats` does not wait for an arming pass holding it.
    pub(crate) funcs_armed: AtomicU64,
    pub(crate) funcs_refused: AtomicU64,
    pub(crate) probes_armed: AtomicU64,
    pub(crate) sites_unprobeable: AtomicU64,
    /// `irqs` option: interrupt entry functions that could not be hooked.
    pub(crate) irq_roots_missing: AtomicU64,
    /// `lossless` option: times a traced task waited for the reader.
    pub(crate) lossless_waits: AtomicU64,
    /// Functions disarmed lazily (idle, or to make room under `max_probes`).
    pub(crate) funcs_disarmed: AtomicU64,
    /// Probe registrations tried, and the time spent in them (ns): what arming costs.
    pub(crate) registrations: AtomicU64,
    pub(crate) register_ns: AtomicU64,
    /// Probes unregistered while tracing (lazy disarming) and the time that took (ns).
    pub(crate) unregistrations: AtomicU64,
    pub(crate) unregister_ns: AtomicU64,
}

/// Everything fctrace has.
#[pin_data]
pub(crate) struct State {
    /// Settings and armed probes; taken by control-file writes and by the arming path.
    #[pin]
    pub(crate) ctl: Mutex<Control>,
    /// Lines for `error_log`.
    #[pin]
    pub(crate) errors: Mutex<ErrorLog>,
    pub(crate) buf: Buffer,
    /// Traced processes (thread-group ids), 0 = free.
    pub(crate) traced: [AtomicU32; MAX_PIDS],
    /// Probes are registered and tracing.
    pub(crate) active: AtomicBool,
    pub(crate) max_depth: AtomicU32,
    /// Bound on `stats.probes_armed`: a function whose probes would exceed it is refused
    /// (shown as `not followed: arming failed`).
    pub(crate) max_probes: AtomicU64,
    /// Seconds after which an idle armed function is disarmed (0 = never).
    pub(crate) disarm_after_s: AtomicU32,
    /// Longest wait in the trampoline for a callee to be armed, ms (0 = never wait).
    pub(crate) arm_wait_ms: AtomicU32,
    pub(crate) opt_follow_forks: AtomicBool,
    pub(crate) opt_retval: AtomicBool,
    pub(crate) opt_duration: AtomicBool,
    /// Show interrupts that run while a traced task is current (takes effect when
    /// tracing starts).
    pub(crate) opt_irqs: AtomicBool,
    /// A traced task waits for the reader instead of losing events (see `throttle_wait`).
    pub(crate) opt_lossless: AtomicBool,
    /// Open `trace_pipe` files.
    pub(crate) readers: AtomicUsize,
    generation: AtomicU32,
    /// Tasks sent to the trampoline that have not left `fctrace_arm_pending` yet.
    inflight: AtomicUsize,
    table: KVVec<Entry>,
    /// Functions called in atomic context before they were armed, for the work item to
    /// arm ahead (0 = free slot). Written by handlers, drained by the work item.
    wanted: [AtomicU64; WANTED],
    wanted_next: AtomicUsize,
    /// The work item is arming what it took from `wanted` (counted as pending).
    ahead_busy: AtomicBool,
    /// Functions traced tasks wait in the trampoline for the work item to arm (0 = free
    /// slot). A task claims a slot, the work item clears it when done.
    requests: [AtomicU64; MAX_TASKS],
    /// Entries in use in `table` (written under `ctl`).
    table_used: AtomicUsize,
    tasks: KVVec<TaskSlot>,
    /// Two per CPU: hard interrupt, softirq.
    irq_slots: KVVec<IrqSlot>,
    pub(crate) stats: Stats,
}

/// Owns the [`State`] and publishes it to the C callbacks.
pub(crate) struct StateHandle(Pin<KBox<State>>);

impl StateHandle {
    pub(crate) fn new() -> Result<Self> {
        let mut table = KVVec::with_capacity(TABLE_CAP, GFP_KERNEL)?;
        for _ in 0..TABLE_CAP {
            table.push(
                Entry { key: AtomicU64::new(0), val: AtomicU32::new(0), open: AtomicU32::new(0), last: AtomicU64::new(0) },
                GFP_KERNEL,
            )?;
        }
        let mut tasks = KVVec::with_capacity(MAX_TASKS, GFP_KERNEL)?;
        for _ in 0..MAX_TASKS {
            tasks.push(TaskSlot { pid: AtomicU32::new(0), data: UnsafeCell::new(TaskData::EMPTY) }, GFP_KERNEL)?;
        }
        // SAFETY: reading a variable that is set once during boot.
        let cpus = unsafe { bindings::nr_cpu_ids } as usize;
        let mut irq_slots = KVVec::with_capacity(2 * cpus, GFP_KERNEL)?;
        for _ in 0..2 * cpus {
            irq_slots.push(IrqSlot { data: UnsafeCell::new(TaskData::EMPTY) }, GFP_KERNEL)?;
        }
        let buf = Buffer::new(crate::control::DEFAULT_BUFFER_KB * 1024)?;
        let state = KBox::pin_init(
            pin_init!(State {
                ctl <- new_mutex!(Control::new()),
                errors <- new_mutex!(ErrorLog::new()),
                buf,
                traced: [const { AtomicU32::new(0) }; MAX_PIDS],
                active: AtomicBool::new(false),
                max_depth: AtomicU32::new(0),
                max_probes: AtomicU64::new(DEFAULT_MAX_PROBES),
                disarm_after_s: AtomicU32::new(DEFAULT_DISARM_AFTER_S),
                arm_wait_ms: AtomicU32::new(DEFAULT_ARM_WAIT_MS),
                opt_follow_forks: AtomicBool::new(false),
                opt_retval: AtomicBool::new(false),
                opt_duration: AtomicBool::new(true),
                opt_irqs: AtomicBool::new(false),
                opt_lossless: AtomicBool::new(false),
                readers: AtomicUsize::new(0),
                generation: AtomicU32::new(1),
                inflight: AtomicUsize::new(0),
                table,
                wanted: [const { AtomicU64::new(0) }; WANTED],
                wanted_next: AtomicUsize::new(0),
                ahead_busy: AtomicBool::new(false),
                requests: [const { AtomicU64::new(0) }; MAX_TASKS],
                table_used: AtomicUsize::new(0),
                tasks,
                irq_slots,
                stats: Stats {
                    written: AtomicU64::new(0),
                    write_failed: AtomicU64::new(0),
                    reasons: [const { AtomicU64::new(0) }; crate::record::Reason::COUNT],
                    task_overflow: AtomicU64::new(0),
                    armed_ahead: AtomicU64::new(0),
                    ahead_queued: AtomicU64::new(0),
                    redirects: AtomicU64::new(0),
                    funcs_armed: AtomicU64::new(0),
                    funcs_refused: AtomicU64::new(0),
                    probes_armed: AtomicU64::new(0),
                    sites_unprobeable: AtomicU64::new(0),
                    irq_roots_missing: AtomicU64::new(0),
                    lossless_waits: AtomicU64::new(0),
                    funcs_disarmed: AtomicU64::new(0),
                    registrations: AtomicU64::new(0),
                    register_ns: AtomicU64::new(0),
                    unregistrations: AtomicU64::new(0),
                    unregister_ns: AtomicU64::new(0),
                },
            }),
            GFP_KERNEL,
        )?;
        STATE.store(&*state as *const State as *mut State, Ordering::Release);
        Ok(StateHandle(state))
    }
}

impl Drop for StateHandle {
    fn drop(&mut self) {
        let st: &State = &self.0;
        {
            let mut ctl = st.lock_ctl();
            st.deactivate(&mut ctl);
        }
        // No probe is registered any more, so no task enters the trampoline; wait for those
        // still in it to leave `fctrace_arm_pending` (waiting ones saw `active` false when
        // deactivate woke them), then for them to be off its last instructions (a task
        // preempted there has not passed a voluntary switch).
        while st.inflight.load(Ordering::Acquire) != 0 {
            // SAFETY: sleeping in module exit is allowed.
            unsafe { bindings::msleep(10) };
        }
        // Only now can nothing queue the work items any more (a task in the trampoline
        // queues one for its request): cancel them, waiting for a running one to finish.
        // SAFETY: trivial C wrapper, process context.
        unsafe { bindings::fctrace_cancel_sync() };
        // SAFETY: waits for an RCU-tasks grace period; callable from process context.
        unsafe { bindings::synchronize_rcu_tasks() };
        STATE.store(core::ptr::null_mut(), Ordering::Release);
    }
}

/// The control mutex held inside a `memalloc_nofs` scope.
///
/// A traced task waits in the trampoline for the work item that holds this mutex to arm
/// its callee, possibly from inside a file system (holding its locks) or in the middle of
/// an allocation; reclaim entering a file system from the work item could wait for those
/// locks until the task's wait times out. So nothing allocates with `__GFP_FS` while
/// holding it: every holder goes through this guard, which makes all allocations in its
/// scope `GFP_NOFS`.
///
/// On release it publishes the number of armed functions to `Stats::funcs_armed`.
pub(crate) struct CtlGuard<'a> {
    guard: core::mem::ManuallyDrop<kernel::sync::lock::Guard<'a, Control, kernel::sync::lock::mutex::MutexBackend>>,
    nofs: u32,
    funcs_armed: &'a AtomicU64,
}

impl core::ops::Deref for CtlGuard<'_> {
    type Target = Control;
    fn deref(&self) -> &Control {
        &self.guard
    }
}

impl core::ops::DerefMut for CtlGuard<'_> {
    fn deref_mut(&mut self) -> &mut Control {
        &mut self.guard
    }
}

impl Drop for CtlGuard<'_> {
    fn drop(&mut self) {
        self.funcs_armed.store(self.guard.funcs.len() as u64, Ordering::Relaxed);
        // SAFETY: `guard` is dropped exactly once, here, and not used afterwards.
        unsafe { core::mem::ManuallyDrop::drop(&mut self.guard) };
        // SAFETY: restores the scope saved in `State::lock_ctl`, after the mutex is released.
        unsafe { bindings::fctrace_nofs_restore(self.nofs) };
    }
}

fn reg(regs: &bindings::pt_regs, r: u8) -> u64 {
    (match r {
        0 => regs.ax,
        1 => regs.cx,
        2 => regs.dx,
        3 => regs.bx,
        4 => regs.sp,
        5 => regs.bp,
        6 => regs.si,
        7 => regs.di,
        8 => regs.r8,
        9 => regs.r9,
        10 => regs.r10,
        11 => regs.r11,
        12 => regs.r12,
        13 => regs.r13,
        14 => regs.r14,
        _ => regs.r15,
    }) as u64
}

/// Reads a kernel word that may not be mapped, without faulting.
fn read_word(addr: u64) -> Option<u64> {
    let mut v: u64 = 0;
    // SAFETY: `copy_from_kernel_nofault` checks the source and never faults; the
    // destination is a local of the right size.
    let r = unsafe {
        bindings::copy_from_kernel_nofault((&mut v as *mut u64).cast(), addr as *const _, 8)
    };
    (r == 0).then_some(v)
}

struct Cur {
    pid: u32,
    tgid: u32,
    sleepable: bool,
    ctx: Ctx,
}

impl State {
    /// Takes the control mutex (see [`CtlGuard`]).
    pub(crate) fn lock_ctl(&self) -> CtlGuard<'_> {
        // SAFETY: trivial C wrapper of memalloc_nofs_save(); restored by the guard's drop.
        let nofs = unsafe { bindings::fctrace_nofs_save() };
        CtlGuard { guard: core::mem::ManuallyDrop::new(self.ctl.lock()), nofs, funcs_armed: &self.stats.funcs_armed }
    }

    fn gen(&self) -> u32 {
        self.generation.load(Ordering::Acquire)
    }

    pub(crate) fn is_traced(&self, tgid: u32) -> bool {
        tgid != 0 && self.traced.iter().any(|t| t.load(Ordering::Relaxed) == tgid)
    }

    pub(crate) fn any_traced(&self) -> bool {
        self.traced.iter().any(|t| t.load(Ordering::Relaxed) != 0)
    }

    pub(crate) fn count(&self, r: Reason) {
        if let Some(c) = self.stats.reasons.get(r as usize) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The current task, if it is traced and ran the probed instruction in task context.
    fn current(&self, regs: &bindings::pt_regs, via_ftrace: bool) -> Option<Cur> {
        self.current_in(regs, via_ftrace, false)
    }

    /// The current task, if it is traced, and the context of the probed instruction: the
    /// task's own, or (with `irqs`) an interrupt running while it is current.
    fn current_in(&self, regs: &bindings::pt_regs, via_ftrace: bool, irqs: bool) -> Option<Cur> {
        if !self.active.load(Ordering::Acquire) {
            return None;
        }
        let (mut pid, mut tgid) = (0u32, 0u32);
        // SAFETY: trivial C accessor of `current`, which always exists.
        unsafe { bindings::fctrace_current_ids(&mut pid, &mut tgid) };
        if !self.is_traced(tgid) {
            return None;
        }
        let mut sleepable = false;
        // SAFETY: `regs` are the registers of the probed context, as the C helper expects.
        let ctx = match unsafe { bindings::fctrace_task_context(regs, via_ftrace, irqs, &mut sleepable) } as u32 {
            bindings::FCTRACE_CTX_TASK => Ctx::Task,
            bindings::FCTRACE_CTX_SOFTIRQ => Ctx::SoftIrq,
            bindings::FCTRACE_CTX_HARDIRQ => Ctx::HardIrq,
            _ => return None,
        };
        Some(Cur { pid, tgid, sleepable, ctx })
    }

    /// The call tree `cur` adds to: its thread's (`Some(slot)`), or its CPU's interrupt
    /// context's (`None`).
    ///
    /// # Safety
    ///
    /// Called from a handler running in `cur`'s context with interrupts off; the returned
    /// reference is dropped before the handler returns (see [`TaskSlot`] and [`IrqSlot`]).
    #[allow(clippy::mut_from_ref)] // The data is in an `UnsafeCell` owned by one context.
    unsafe fn tree(&self, cur: &Cur) -> Option<(Option<&TaskSlot>, &mut TaskData)> {
        match cur.ctx {
            Ctx::Task => {
                let slot = self.slot(cur.pid)?;
                // SAFETY: by the caller's contract we are `cur.pid`'s own handler.
                Some((Some(slot), unsafe { self.data(&slot.data) }))
            }
            Ctx::SoftIrq | Ctx::HardIrq => {
                // SAFETY: trivial C accessor.
                let cpu = unsafe { bindings::fctrace_cpu() } as usize;
                let i = 2 * cpu + usize::from(cur.ctx == Ctx::HardIrq);
                let slot = self.irq_slots.get(i)?;
                // SAFETY: by the caller's contract we run on this CPU in this context with
                // interrupts off: the `IrqSlot` invariant.
                Some((None, unsafe { self.data(&slot.data) }))
            }
        }
    }

    fn slot(&self, pid: u32) -> Option<&TaskSlot> {
        self.tasks.iter().find(|s| s.pid.load(Ordering::Relaxed) == pid)
    }

    fn claim_slot(&self, pid: u32) -> Option<&TaskSlot> {
        if let Some(s) = self.slot(pid) {
            return Some(s);
        }
        let s = self
            .tasks
            .iter()
            .find(|s| s.pid.compare_exchange(0, pid, Ordering::AcqRel, Ordering::Relaxed).is_ok());
        if s.is_none() {
            self.stats.task_overflow.fetch_add(1, Ordering::Relaxed);
        }
        s
    }

    /// The slot's data for its own thread, reset if it is from before the last
    /// (de)activation.
    ///
    /// # Safety
    ///
    /// Called only by the thread `slot.pid` names, and the returned reference is not held
    /// across anything that could let that thread run another handler (it is dropped
    /// before the handler returns).
    #[allow(clippy::mut_from_ref)] // The data is in an `UnsafeCell` owned by one thread.
    unsafe fn data<'a>(&self, cell: &'a UnsafeCell<TaskData>) -> &'a mut TaskData {
        // SAFETY: by the caller's contract and the `TaskSlot`/`IrqSlot` invariants, nobody
        // else accesses this data now.
        let d = unsafe { &mut *cell.get() };
        let gen = self.gen();
        if d.gen != gen {
            d.gen = gen;
            d.depth = 0;
            d.suppress_below = 0;
            d.guard = false;
            d.pending = 0;
            d.throttle = false;
            d.last_throttle = 0;
            d.last_redirect = 0;
        }
        d
    }

    #[allow(clippy::too_many_arguments)] // The fields of one record.
    fn emit(&self, cur: &Cur, kind: Kind, depth: usize, reason: Reason, flags: u8, func: u64, site: u64) -> Record {
        let mut r = Record::ZERO;
        r.kind = kind as u8;
        r.depth = depth.min(255) as u8;
        r.reason = reason as u8;
        r.flags = flags
            | match cur.ctx {
                Ctx::Task => 0,
                Ctx::SoftIrq => F_SOFTIRQ,
                Ctx::HardIrq => F_IRQ,
            };
        r.pid = cur.pid;
        r.tgid = cur.tgid;
        r.ts = clock_ns();
        // SAFETY: trivial C accessors.
        unsafe {
            r.cpu = bindings::fctrace_cpu();
            bindings::fctrace_current_comm(r.comm.as_mut_ptr());
        }
        r.func = func;
        r.site = site;
        r
    }

    fn write(&self, r: &Record) {
        if self.buf.write(r) {
            self.stats.written.fetch_add(1, Ordering::Relaxed);
        } else {
            self.stats.write_failed.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[allow(clippy::too_many_arguments)] // A record's fields plus where to suppress.
    fn leaf(&self, cur: &Cur, d: &mut TaskData, reason: Reason, flags: u8, func: u64, site: u64, sp: u64, tail: bool) {
        let r = self.emit(cur, Kind::Leaf, d.depth, reason, flags, func, site);
        self.write(&r);
        self.count(reason);
        self.suppress(d, sp, tail);
    }

    fn suppress(&self, d: &mut TaskData, sp: u64, tail: bool) {
        // Inside the callee the stack pointer stays below the call site's (a call pushes a
        // return address); a tail-called function runs at the jump's stack pointer and
        // returns 8 bytes above it, closing the frames of the tail chain with it.
        d.suppress_below = if tail { sp + 8 } else { sp };
        if tail {
            for f in d.frames.iter_mut().take(d.depth).rev() {
                if f.entry_sp != sp {
                    break;
                }
                f.ends_in_leaf = true;
            }
        }
    }

    /// Records a call of `func` from `site` and opens its frame (entered at `entry_sp`) at
    /// the current depth. A `thunk` frame (a preemption thunk) has no return probe: it is
    /// expected to close unseen, and is not counted as a frame of an armed function.
    #[allow(clippy::too_many_arguments)] // A frame's fields plus the record's.
    fn open_frame(&self, cur: &Cur, d: &mut TaskData, func: u64, site: u64, flags: u8, entry_sp: u64, thunk: bool) {
        let r = self.emit(cur, Kind::Call, d.depth, Reason::None, flags, func, site);
        let entry = if thunk { NO_ENTRY } else { self.enter(func) };
        d.frames[d.depth] = Frame { func, entry, entry_sp, ts: r.ts, ends_in_leaf: thunk };
        d.depth += 1;
        self.write(&r);
    }

    /// Closes every frame with `entry_sp <= sp`; `exact` frames (`entry_sp == sp`) are the
    /// ones returning now, the others returned unseen.
    fn close_frames(&self, cur: &Cur, d: &mut TaskData, sp: u64, site: u64, retval: u64, exiting: bool) {
        let now = if d.depth > 0 {
            clock_ns()
        } else {
            0
        };
        let retval_on = self.opt_retval.load(Ordering::Relaxed);
        while d.depth > 0 {
            let f = d.frames[d.depth - 1];
            if !exiting && f.entry_sp > sp {
                break;
            }
            d.depth -= 1;
            self.leave(f.entry);
            let reason = if exiting {
                Reason::Exit
            } else if f.entry_sp == sp || f.ends_in_leaf {
                Reason::None
            } else {
                Reason::Unwound
            };
            let mut flags = F_DURATION;
            // The value is known only when this return instruction is the frame's own.
            if reason == Reason::None && retval_on && f.entry_sp == sp {
                flags |= F_RETVAL;
            }
            let mut r = self.emit(cur, Kind::Ret, d.depth, reason, flags, f.func, site);
            r.dur = now.saturating_sub(f.ts);
            r.retval = retval;
            self.write(&r);
            if reason != Reason::None {
                self.count(reason);
            }
        }
    }

    /// Closes the frames whose entry stack pointer is below `sp`: the task is above them,
    /// so they have returned. Those that ended in an unfollowed tail call returned as
    /// expected; the others' returns were missed.
    fn close_stale(&self, cur: &Cur, d: &mut TaskData, sp: u64) {
        if d.depth == 0 || d.frames[d.depth - 1].entry_sp >= sp {
            return;
        }
        let now = clock_ns();
        while d.depth > 0 {
            let f = d.frames[d.depth - 1];
            if f.entry_sp >= sp {
                break;
            }
            d.depth -= 1;
            self.leave(f.entry);
            let reason = if f.ends_in_leaf { Reason::None } else { Reason::Unwound };
            let mut r = self.emit(cur, Kind::Ret, d.depth, reason, F_DURATION, f.func, 0);
            r.dur = now.saturating_sub(f.ts);
            self.write(&r);
            if reason != Reason::None {
                self.count(reason);
            }
        }
    }

    fn release_if_done(&self, slot: Option<&TaskSlot>, d: &TaskData) {
        if let Some(slot) = slot.filter(|_| d.depth == 0 && d.pending == 0) {
            slot.pid.store(0, Ordering::Release);
        }
    }

    fn lookup(&self, func: u64) -> u32 {
        self.find(func).map_or(0, |i| self.table[i].val.load(Ordering::Acquire))
    }

    /// The table index of `func`, if it has an entry.
    fn find(&self, func: u64) -> Option<usize> {
        let mut i = (func >> 4) as usize % TABLE_CAP;
        for _ in 0..TABLE_CAP {
            let k = self.table[i].key.load(Ordering::Acquire);
            if k == func {
                return Some(i);
            }
            if k == 0 {
                return None;
            }
            i = (i + 1) % TABLE_CAP;
        }
        None
    }

    /// A frame of `func` opens: counts it and notes the time (for lazy disarming).
    fn enter(&self, func: u64) -> u32 {
        let Some(i) = self.find(func) else { return NO_ENTRY };
        let e = &self.table[i];
        e.open.fetch_add(1, Ordering::AcqRel);
        e.last.store(clock_ns(), Ordering::Relaxed);
        i as u32
    }

    /// A frame opened by [`State::enter`] closes.
    fn leave(&self, entry: u32) {
        if let Some(e) = self.table.get(entry as usize) {
            // Never below zero (a table reset may have cleared the count meanwhile).
            let _ = e.open.fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| n.checked_sub(1));
        }
    }

    /// Records `func`'s state. Called with `ctl` held (single writer).
    fn insert(&self, func: u64, val: u32) -> bool {
        let mut i = (func >> 4) as usize % TABLE_CAP;
        for _ in 0..TABLE_CAP {
            let e = &self.table[i];
            let k = e.key.load(Ordering::Relaxed);
            if k == 0 || k == func {
                e.val.store(val, Ordering::Release);
                e.key.store(func, Ordering::Release);
                if k == 0 {
                    self.table_used.fetch_add(1, Ordering::Relaxed);
                }
                return true;
            }
            i = (i + 1) % TABLE_CAP;
        }
        false
    }

    fn resolve_target(&self, t: Target, regs: &bindings::pt_regs, site: &SiteData) -> Option<u64> {
        match t {
            Target::Direct(a) => Some(a),
            Target::Reg(r) => Some(reg(regs, r)),
            Target::Mem(m) => {
                if m.segment.is_some() {
                    return None;
                }
                let mut a = m.disp as i64 as u64;
                if m.rip_relative {
                    a = a.wrapping_add(site.addr + u64::from(site.len));
                }
                if let Some(b) = m.base {
                    a = a.wrapping_add(reg(regs, b));
                }
                if let Some(i) = m.index {
                    a = a.wrapping_add(reg(regs, i).wrapping_mul(u64::from(m.scale)));
                }
                read_word(a)
            }
        }
    }

    /// The pre-handler of every call, jump and return site.
    fn on_site(&self, site: &SiteData, regs: &mut bindings::pt_regs) -> c_int {
        let irqs = self.opt_irqs.load(Ordering::Relaxed);
        let Some(cur) = self.current_in(regs, false, irqs) else { return 0 };
        // SAFETY: an int3 handler, in `cur`'s context with interrupts off; `d` is dropped
        // before returning.
        let Some((slot, d)) = (unsafe { self.tree(&cur) }) else { return 0 };
        if d.guard || d.depth == 0 {
            return 0;
        }
        let sp = regs.sp as u64;
        if d.suppress_below != 0 {
            if sp < d.suppress_below {
                return 0;
            }
            d.suppress_below = 0;
        }
        if !matches!(site.kind, SiteKind::Ret) {
            // Frames opened below this stack pointer have returned without a probe
            // seeing it (they ended in a tail call that was not followed, or left
            // through a path no probe covers): close them before drawing this call.
            self.close_stale(&cur, d, sp);
            if d.depth == 0 {
                self.release_if_done(slot, d);
                return 0;
            }
            // A call site counts only in the function the task is known to be in (its
            // innermost frame). Others run below it without a call fctrace saw: the
            // scheduler entered from an interrupt's return (preempt_schedule_irq() is
            // called from noinstr code), or a callee reached through a call site kprobes
            // refused. Drawing them as calls of the interrupted function would be wrong.
            if d.frames[d.depth - 1].func != site.func {
                return 0;
            }
            // lossless: the buffer is filling faster than the reader empties it; the task
            // waits in the trampoline, then makes this call again (and it is recorded).
            if cur.sleepable && d.last_throttle != site.addr && self.should_throttle() {
                d.throttle = true;
                d.last_throttle = site.addr;
                // Not an arming redirect: the call may still need one when made again.
                let last = d.last_redirect;
                self.redirect(d, regs, site.addr, 0);
                d.last_redirect = last;
                return 1;
            }
        }
        let (target, tail, indirect) = match site.kind {
            SiteKind::Ret => {
                d.last_redirect = 0;
                d.last_throttle = 0;
                self.close_frames(&cur, d, sp, site.addr, regs.ax as u64, false);
                self.release_if_done(slot, d);
                return 0;
            }
            SiteKind::Call(t) => (self.resolve_target(t, regs, site), false, !matches!(t, Target::Direct(_))),
            SiteKind::Tail(t) | SiteKind::TailIf(t, _) => {
                if let SiteKind::TailIf(_, cc) = site.kind {
                    if !crate::cond::condition_holds(cc, regs.flags as u64) {
                        return 0;
                    }
                }
                let a = self.resolve_target(t, regs, site);
                // An indirect jump inside the function is a jump table, not a tail call.
                if let Some(a) = a {
                    if a >= site.func && a < site.func_end {
                        return 0;
                    }
                }
                (a, true, !matches!(t, Target::Direct(_)))
            }
        };
        let mut flags = 0;
        if tail {
            flags |= F_TAIL;
        }
        if indirect {
            flags |= F_INDIRECT;
        }
        let Some(target) = target else {
            d.last_redirect = 0;
            self.leaf(&cur, d, Reason::IndirectUnknown, flags, 0, site.addr, sp, tail);
            return 0;
        };
        let max = self.max_depth.load(Ordering::Relaxed) as usize;
        if (max != 0 && d.depth >= max) || d.depth >= MAX_FRAMES {
            d.last_redirect = 0;
            self.leaf(&cur, d, Reason::Depth, flags, target, site.addr, sp, tail);
            return 0;
        }
        let st = self.lookup(target);
        match st & 0xff {
            ST_ARMED => {
                d.last_redirect = 0;
                self.open_frame(&cur, d, target, site.addr, flags, if tail { sp } else { sp - 8 }, false);
                0
            }
            ST_HIDDEN => {
                d.last_redirect = 0;
                self.suppress(d, sp, tail);
                0
            }
            ST_LEAF
                if !tail
                    && (st >> 8) as u8 == Reason::Unprobeable as u8
                    && is_preempt_thunk(target)
                    && SCHED_ADDR.load(Ordering::Relaxed) != 0 =>
            {
                // A preemption point: its frame holds what `Hook::Preempt` sees of the
                // scheduler. The thunk's return is not probed, so the frame closes, as
                // expected, when the task is next seen above it.
                d.last_redirect = 0;
                self.open_frame(&cur, d, target, site.addr, flags, sp - 8, true);
                0
            }
            ST_LEAF => {
                d.last_redirect = 0;
                self.leaf(&cur, d, Reason::from_u8((st >> 8) as u8), flags, target, site.addr, sp, tail);
                0
            }
            _ if self.may_wait(&cur, d) && d.last_redirect != site.addr => {
                self.redirect(d, regs, site.addr, target);
                1
            }
            _ => {
                let reason = self.unarmed_reason(&cur, d);
                d.last_redirect = 0;
                self.leaf(&cur, d, reason, flags, target, site.addr, sp, tail);
                if reason != Reason::ArmFailed {
                    self.want(target);
                }
                0
            }
        }
    }

    /// `lossless`: whether a traced task about to add events should first wait for the
    /// reader (the buffer of its CPU is more than half full and someone reads).
    fn should_throttle(&self) -> bool {
        if !self.opt_lossless.load(Ordering::Relaxed) || self.readers.load(Ordering::Relaxed) == 0 {
            return false;
        }
        // SAFETY: trivial C accessor.
        let cpu = unsafe { bindings::fctrace_cpu() };
        self.buf.fill_permille(cpu) > 500
    }

    /// `lossless`, in the trampoline (the task may sleep): waits until every sub-buffer is
    /// at most a quarter full, the reader goes away, tracing stops, or a signal comes.
    fn throttle_wait(&self) {
        self.stats.lossless_waits.fetch_add(1, Ordering::Relaxed);
        while self.active.load(Ordering::Acquire)
            && self.opt_lossless.load(Ordering::Relaxed)
            && self.readers.load(Ordering::Relaxed) > 0
            && self.buf.max_fill_permille() > 250
        {
            // SAFETY: sleeping is allowed in the trampoline (sleepable context, no locks).
            if unsafe { bindings::fctrace_throttle_sleep(100) } != 0 {
                break;
            }
        }
    }

    /// Asks the work item to arm `target` (and its direct callees) ahead, so that the next
    /// time it is called in atomic context it is followed. Safe in any context.
    fn want(&self, target: u64) {
        if self.wanted.iter().any(|w| w.load(Ordering::Relaxed) == target) {
            return;
        }
        let i = self.wanted_next.fetch_add(1, Ordering::Relaxed) % WANTED;
        self.wanted[i].store(target, Ordering::Release);
        self.stats.ahead_queued.fetch_add(1, Ordering::Relaxed);
        // SAFETY: NMI-safe C helper (raises an irq_work that queues the work item).
        unsafe { bindings::fctrace_schedule_sync() };
    }

    /// Functions queued for arming ahead and not armed yet, plus one while the work item
    /// is arming a batch it took from the queue (for `stats`: 0 means arming ahead is
    /// done; on a slow kernel a batch takes seconds).
    pub(crate) fn ahead_pending(&self) -> usize {
        self.wanted.iter().filter(|w| w.load(Ordering::Relaxed) != 0).count()
            + usize::from(self.ahead_busy.load(Ordering::Acquire))
    }

    /// Arms what handlers queued, with the closure of its direct callees (the calls it
    /// makes will run in the same atomic context), up to `AHEAD_BUDGET` functions.
    /// Called in the work item, without `ctl`: it takes `ctl` for one function at a time,
    /// so that readers of `stats` and writers of control files wait for one function's
    /// arming, not for a whole batch (minutes on the debug kernel under emulation).
    fn arm_ahead(&self) {
        let mut todo: KVec<(u64, u8)> = KVec::new();
        for w in &self.wanted {
            let t = w.swap(0, Ordering::AcqRel);
            if t != 0 && todo.push((t, 0), GFP_KERNEL).is_err() {
                return;
            }
        }
        let mut armed = 0usize;
        // Breadth first: the nearest callees are the likeliest to run next.
        let mut next = 0;
        while let Some(&(t, level)) = todo.get(next) {
            next += 1;
            let mut guard = self.lock_ctl();
            let ctl = &mut *guard;
            // Tasks waiting in the trampoline go first.
            self.serve_requests(ctl);
            // Stop as soon as no traced process is left (its exit queued this work item
            // again, which then ends tracing): on a slow kernel a batch takes seconds.
            if armed >= AHEAD_BUDGET || !self.active.load(Ordering::Acquire) || !self.any_traced() {
                break;
            }
            let f = match self.lookup(t) & 0xff {
                0 => {
                    if self.arm(ctl, t) != ST_ARMED {
                        continue;
                    }
                    armed += 1;
                    self.stats.armed_ahead.fetch_add(1, Ordering::Relaxed);
                    // The function just armed is the last one in `ctl.funcs`.
                    ctl.funcs.last()
                }
                // Armed already (through the trampoline, or at the depth limit of an
                // earlier round): its callees are not, necessarily, and run in the same
                // atomic context; walk on through it.
                ST_ARMED if level < AHEAD_DEPTH => self.armed_func(ctl, t).map(|f| &*f),
                _ => continue,
            };
            if level >= AHEAD_DEPTH {
                continue;
            }
            let Some(f) = f else { continue };
            for s in f.sites.iter() {
                let callee = match s.data.kind {
                    SiteKind::Call(Target::Direct(c))
                    | SiteKind::Tail(Target::Direct(c))
                    | SiteKind::TailIf(Target::Direct(c), _) => c,
                    _ => continue,
                };
                let st = self.lookup(callee) & 0xff;
                if (st != 0 && st != ST_ARMED) || todo.iter().any(|&(c, _)| c == callee) {
                    continue;
                }
                if todo.len() >= AHEAD_WALK || todo.push((callee, level + 1), GFP_KERNEL).is_err() {
                    return;
                }
            }
        }
    }

    /// The pre-handler at the start function's entry: opens a trace.
    fn on_root(&self, p: *mut bindings::kprobe, regs: &mut bindings::pt_regs) -> c_int {
        let Some(cur) = self.current(regs, Probe::<Hook>::is_ftrace_based(p)) else { return 0 };
        let Some(slot) = self.claim_slot(cur.pid) else { return 0 };
        // SAFETY: we are `cur.pid`'s own handler; `d` is dropped before returning.
        let d = unsafe { self.data(&slot.data) };
        if d.guard {
            return 0;
        }
        let sp = regs.sp as u64;
        // Frames at or below this entry's stack pointer are stale (their returns were
        // missed); deeper ones mean we are nested inside a trace already.
        self.close_stale(&cur, d, sp);
        if d.depth > 0 {
            return 0;
        }
        let func = self.root_addr();
        d.suppress_below = 0;
        d.last_redirect = 0;
        d.nowait = false;
        self.open_frame(&cur, d, func, 0, 0, sp, false);
        0
    }

    /// The entry of an interrupt handler (`irqs` option), running while a traced task is
    /// current: opens the tree of this interrupt context, shown marked.
    fn on_irq_root(&self, p: *mut bindings::kprobe, regs: &mut bindings::pt_regs, ctx: Ctx, func: u64) -> c_int {
        if !self.opt_irqs.load(Ordering::Relaxed) {
            return 0;
        }
        let Some(cur) = self.current_in(regs, Probe::<Hook>::is_ftrace_based(p), true) else { return 0 };
        if cur.ctx != ctx {
            return 0;
        }
        // SAFETY: interrupt entry functions are entered with interrupts off, in `ctx`;
        // `d` is dropped before returning.
        let Some((_, d)) = (unsafe { self.tree(&cur) }) else { return 0 };
        let sp = regs.sp as u64;
        // Frames of an earlier interrupt whose return was missed are below this one.
        self.close_stale(&cur, d, sp);
        if d.depth > 0 {
            return 0;
        }
        d.suppress_below = 0;
        d.last_redirect = 0;
        self.open_frame(&cur, d, func, 0, 0, sp, false);
        0
    }

    fn root_addr(&self) -> u64 {
        ROOT_ADDR.load(Ordering::Relaxed)
    }

    /// All-system-calls mode: `x64_sys_call()` is about to dispatch system call `nr`
    /// (`%esi`) to `sys_call_table[nr]`, with a tail jump in all but a few cases, so that
    /// function runs at this stack pointer: it opens the trace at depth 0. Only this one
    /// probe is hit by other tasks' system calls.
    fn on_syscall(&self, p: *mut bindings::kprobe, regs: &mut bindings::pt_regs) -> c_int {
        let Some(cur) = self.current(regs, false) else { return 0 };
        let Some(slot) = self.claim_slot(cur.pid) else { return 0 };
        // SAFETY: we are `cur.pid`'s own handler; `d` is dropped before returning.
        let d = unsafe { self.data(&slot.data) };
        if d.guard {
            return 0;
        }
        // A new system call: whatever is still open belongs to one whose return was not
        // seen (it left through a path no probe covers).
        if d.depth > 0 {
            self.close_frames(&cur, d, u64::MAX, 0, 0, false);
        }
        let nr = (regs.si as u64) & 0xffff_ffff;
        let table = SYSCALL_TABLE.load(Ordering::Relaxed);
        let target = if nr < MAX_SYSCALLS { read_word(table + 8 * nr) } else { None };
        let sp = regs.sp as u64;
        // SAFETY: reading our own kprobe's address.
        let hook_addr = unsafe { (*p).addr } as u64;
        // A new trace, unless the task is back from the trampoline for this call.
        if d.last_redirect != hook_addr {
            d.nowait = false;
        }
        let Some(target) = target else {
            d.last_redirect = 0;
            self.release_if_done(Some(slot), d);
            return 0;
        };
        let st = self.lookup(target);
        match st & 0xff {
            ST_ARMED => {
                d.last_redirect = 0;
                d.suppress_below = 0;
                self.open_frame(&cur, d, target, hook_addr, 0, sp, false);
                0
            }
            ST_HIDDEN => {
                d.last_redirect = 0;
                self.release_if_done(Some(slot), d);
                0
            }
            ST_LEAF => {
                d.last_redirect = 0;
                let r = self.emit(&cur, Kind::Leaf, 0, Reason::from_u8((st >> 8) as u8), 0, target, hook_addr);
                self.write(&r);
                self.release_if_done(Some(slot), d);
                0
            }
            _ if self.may_wait(&cur, d) && d.last_redirect != hook_addr => {
                self.redirect(d, regs, hook_addr, target);
                1
            }
            _ => {
                let reason = self.unarmed_reason(&cur, d);
                d.last_redirect = 0;
                if reason != Reason::ArmFailed {
                    self.want(target);
                }
                let r = self.emit(&cur, Kind::Leaf, 0, reason, 0, target, hook_addr);
                self.write(&r);
                self.count(reason);
                self.release_if_done(Some(slot), d);
                0
            }
        }
    }

    /// A `call __schedule` of the preemption path: if the traced task is inside a
    /// preemption thunk (its innermost frame), the scheduler runs for it there: open its
    /// frame, so its call sites count. Other tasks are ignored. (An interrupt's return
    /// preempts through `preempt_schedule_irq()`, which has no hook.)
    fn on_preempt(&self, p: *mut bindings::kprobe, regs: &mut bindings::pt_regs) -> c_int {
        let Some(cur) = self.current(regs, Probe::<Hook>::is_ftrace_based(p)) else { return 0 };
        let Some(slot) = self.slot(cur.pid) else { return 0 };
        // SAFETY: we are `cur.pid`'s own handler; `d` is dropped before returning.
        let d = unsafe { self.data(&slot.data) };
        let max = self.max_depth.load(Ordering::Relaxed) as usize;
        if d.guard || d.depth == 0 || d.depth >= MAX_FRAMES || (max != 0 && d.depth >= max) {
            return 0;
        }
        // `__schedule()`'s entry stack pointer: the call pushes the return address.
        let sp = (regs.sp as u64).wrapping_sub(8);
        if d.suppress_below != 0 && sp < d.suppress_below {
            return 0;
        }
        let top = d.frames[d.depth - 1];
        if !is_preempt_thunk(top.func) || sp >= top.entry_sp {
            return 0;
        }
        let func = SCHED_ADDR.load(Ordering::Relaxed);
        if func == 0 {
            return 0;
        }
        // SAFETY: reading our own kprobe's address.
        let site = unsafe { (*p).addr } as u64;
        d.last_redirect = 0;
        match self.lookup(func) & 0xff {
            ST_ARMED => {
                self.open_frame(&cur, d, func, site, 0, sp, false);
            }
            // Not armed (yet, or any more): the scheduler runs with preemption off, so it
            // is armed ahead, like any callee first called in atomic context.
            0 => {
                self.leaf(&cur, d, Reason::Atomic, 0, func, site, sp + 8, false);
                self.want(func);
            }
            _ => {}
        }
        0
    }

    /// Whether the task may wait in the trampoline for a callee to be armed: it can sleep,
    /// no wait timed out in this trace, and `arm_wait_ms` is not 0.
    fn may_wait(&self, cur: &Cur, d: &TaskData) -> bool {
        cur.sleepable && !d.nowait && self.arm_wait_ms.load(Ordering::Relaxed) != 0
    }

    /// Why a call to an unarmed function is a leaf: the task could not wait (atomic
    /// context), or it was not to wait (`nowait`, `arm_wait_ms` 0), or it waited but
    /// arming failed.
    fn unarmed_reason(&self, cur: &Cur, d: &TaskData) -> Reason {
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
    fn redirect(&self, d: &mut TaskData, regs: &mut bindings::pt_regs, addr: u64, target: u64) {
        d.last_redirect = addr;
        d.pending = target;
        self.inflight.fetch_add(1, Ordering::AcqRel);
        self.stats.redirects.fetch_add(1, Ordering::Relaxed);
        let new_sp = regs.sp - 8;
        // SAFETY: `new_sp` is the word just below the interrupted stack pointer, in the gap
        // `asm_exc_int3` leaves for emulating a push (all our redirecting probes are int3
        // probes); the task's stack is writable.
        unsafe { *(new_sp as *mut u64) = addr };
        regs.sp = new_sp;
        // SAFETY: trivial C accessor of a constant address.
        regs.ip = unsafe { bindings::fctrace_trampoline_addr() } as _;
    }

    /// `do_exit()` entry: close the thread's frames; forget the process when its last
    /// thread goes.
    fn on_exit(&self, p: *mut bindings::kprobe, regs: &mut bindings::pt_regs) -> c_int {
        let Some(cur) = self.current(regs, Probe::<Hook>::is_ftrace_based(p)) else { return 0 };
        if let Some(slot) = self.slot(cur.pid) {
            // SAFETY: we are `cur.pid`'s own handler; `d` is dropped before returning.
            let d = unsafe { self.data(&slot.data) };
            self.close_frames(&cur, d, 0, 0, 0, true);
            d.pending = 0;
            slot.pid.store(0, Ordering::Release);
        }
        // SAFETY: trivial C accessor of `current`.
        if unsafe { bindings::fctrace_current_last_thread() } {
            for t in &self.traced {
                let _ = t.compare_exchange(cur.tgid, 0, Ordering::AcqRel, Ordering::Relaxed);
            }
            if !self.any_traced() {
                // SAFETY: trivial C wrapper around `schedule_work()`, callable from here.
                unsafe { bindings::fctrace_schedule_sync() };
            }
        }
        0
    }

    /// `wake_up_new_task(p)` entry: with follow-forks, a traced process's child is traced.
    fn on_fork(&self, p: *mut bindings::kprobe, regs: &mut bindings::pt_regs) -> c_int {
        if !self.opt_follow_forks.load(Ordering::Relaxed) {
            return 0;
        }
        let Some(cur) = self.current(regs, Probe::<Hook>::is_ftrace_based(p)) else { return 0 };
        // SAFETY: `wake_up_new_task`'s first argument is a live `task_struct`.
        let child = unsafe { bindings::fctrace_task_tgid(regs.di as *const _) } as u32;
        if child == cur.tgid || self.is_traced(child) {
            return 0;
        }
        if !self
            .traced
            .iter()
            .any(|t| t.compare_exchange(0, child, Ordering::AcqRel, Ordering::Relaxed).is_ok())
        {
            self.stats.task_overflow.fetch_add(1, Ordering::Relaxed);
        }
        0
    }

    /// Called by the trampoline, in the traced task, which may sleep here.
    fn arm_pending(&self) {
        let (mut pid, mut tgid) = (0u32, 0u32);
        // SAFETY: trivial C accessor of `current`.
        unsafe { bindings::fctrace_current_ids(&mut pid, &mut tgid) };
        if let Some(slot) = self.slot(pid) {
            let (target, throttle) = {
                // SAFETY: we are thread `pid`; the reference ends with this block.
                let d = unsafe { self.data(&slot.data) };
                d.guard = true;
                (d.pending, core::mem::take(&mut d.throttle))
            };
            let t0 = clock_ns();
            if target != 0 && !self.wait_armed(target) {
                // SAFETY: we are thread `pid`; the reference ends with this block.
                unsafe { self.data(&slot.data) }.nowait = true;
            }
            if throttle {
                self.throttle_wait();
            }
            // SAFETY: we are thread `pid`; the reference ends with this block.
            let d = unsafe { self.data(&slot.data) };
            d.guard = false;
            d.pending = 0;
            // Time spent arming is fctrace's, not the traced functions': leave it out of
            // the durations of the frames that are open.
            let spent = clock_ns().saturating_sub(t0);
            for f in d.frames.iter_mut().take(d.depth) {
                f.ts = f.ts.saturating_add(spent);
            }
        }
        self.inflight.fetch_sub(1, Ordering::AcqRel);
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
        let Some(req) = self
            .requests
            .iter()
            .find(|r| r.compare_exchange(0, target, Ordering::AcqRel, Ordering::Relaxed).is_ok())
        else {
            // Not reached: one request per thread in a trace, and `MAX_TASKS` slots.
            return true;
        };
        // SAFETY: NMI-safe C helper (raises an irq_work that queues the work item).
        unsafe { bindings::fctrace_schedule_sync() };
        let deadline =
            clock_ns() + u64::from(self.arm_wait_ms.load(Ordering::Relaxed)) * 1_000_000;
        let done = loop {
            // Read before the checks: a bump after them ends the sleep at once.
            // SAFETY: trivial C accessor.
            let seq = unsafe { bindings::fctrace_arm_seq() };
            if req.load(Ordering::Acquire) != target || !self.active.load(Ordering::Acquire) {
                break true;
            }
            let now = clock_ns();
            if now >= deadline {
                break false;
            }
            let ms = ((deadline - now) / 1_000_000).max(1) as u32;
            // SAFETY: the task may sleep here (the trampoline, sleepable context).
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
    fn serve_requests(&self, ctl: &mut Control) {
        for req in &self.requests {
            let t = req.load(Ordering::Acquire);
            if t == 0 {
                continue;
            }
            if self.active.load(Ordering::Acquire) && self.lookup(t) == 0 {
                self.arm(ctl, t);
            }
            let _ = req.compare_exchange(t, 0, Ordering::AcqRel, Ordering::Relaxed);
            // SAFETY: trivial C wrapper (wake_up_all), process context.
            unsafe { bindings::fctrace_arm_wake() };
        }
    }

    /// Arms `target`, or records why it is not followed. Returns the new table state.
    pub(crate) fn arm(&self, ctl: &mut Control, target: u64) -> u32 {
        self.arm_as(ctl, target, false)
    }

    /// Arms `target`; the start function (`root`) is armed whatever the filter says.
    fn arm_as(&self, ctl: &mut Control, target: u64, root: bool) -> u32 {
        let st = match self.try_arm(ctl, target, root) {
            Ok(s) => s,
            Err(r) => {
                self.stats.funcs_refused.fetch_add(1, Ordering::Relaxed);
                ST_LEAF | ((r as u32) << 8)
            }
        };
        if !self.insert(target, st) {
            return ST_LEAF | ((Reason::ArmFailed as u32) << 8);
        }
        if st == ST_ARMED {
            // `try_arm` pushed the function last; it has its entry now.
            let entry = self.find(target);
            if let (Some(f), Some(i)) = (ctl.funcs.last_mut(), entry) {
                f.entry = i;
                f.pinned = root;
                self.table[i].last.store(clock_ns(), Ordering::Relaxed);
            }
        }
        st
    }

    fn try_arm(&self, ctl: &mut Control, target: u64, root: bool) -> core::result::Result<u32, Reason> {
        let mut name = KVec::with_capacity(crate::control::KSYM_SYMBOL_LEN, GFP_KERNEL)
            .map_err(|_| Reason::ArmFailed)?;
        let info = crate::control::symbolize(target, &mut name).ok_or(Reason::NotFunction)?;
        if info.offset != 0 {
            return Err(Reason::NotFunction);
        }
        // Keep the table below 3/4 full, so every function tried gets an entry (and is
        // never armed twice).
        if self.table_used.load(Ordering::Relaxed) + 1 >= TABLE_CAP * 3 / 4 {
            return Err(Reason::ArmFailed);
        }
        let verdict = if root {
            FilterVerdict::Follow
        } else {
            parse::filter_verdict(ctl.filter_patterns(), info.name.as_bytes())
        };
        match verdict {
            FilterVerdict::Hide => return Ok(ST_HIDDEN),
            FilterVerdict::Leaf => return Err(Reason::Filtered),
            FilterVerdict::Follow => {}
        }
        // SAFETY: trivial C accessor.
        if unsafe { bindings::fctrace_addr_in_self(target as _) } || is_denied(info.name.as_bytes()) {
            return Err(Reason::Unprobeable);
        }
        if info.size == 0 || info.size > MAX_FUNC_SIZE {
            return Err(Reason::Unprobeable);
        }
        let func = self.build_func(ctl, target, info.size)?;
        let registered = func.sites.iter().filter(|s| s.is_registered()).count();
        self.stats.probes_armed.fetch_add(registered as u64, Ordering::Relaxed);
        ctl.funcs.push(func, GFP_KERNEL).map_err(|_| Reason::ArmFailed)?;
        Ok(ST_ARMED)
    }

    /// Decodes the live code of the function at `start` and registers its probes.
    fn build_func(&self, ctl: &mut Control, start: u64, size: u64) -> core::result::Result<Func, Reason> {
        let mut code = KVVec::from_elem(0u8, size as usize, GFP_KERNEL).map_err(|_| Reason::ArmFailed)?;
        let mut scratch = KVec::with_capacity(crate::control::KSYM_SYMBOL_LEN, GFP_KERNEL)
            .map_err(|_| Reason::ArmFailed)?;
        // SAFETY: `code` has `size` writable bytes; the source is checked, never faults.
        let r = unsafe {
            bindings::copy_from_kernel_nofault(code.as_mut_ptr().cast(), start as *const _, size as usize)
        };
        if r != 0 {
            return Err(Reason::Unprobeable);
        }
        let end = start + size;
        // Our own int3 hooks on the preemption path are not someone else's breakpoints.
        for (h, byte) in PREEMPT_HOOKS.iter().zip(PREEMPT_HOOK_BYTES.iter()) {
            let at = h.load(Ordering::Relaxed);
            if at != 0 && at >= start && at < end {
                if let Some(b) = code.get_mut((at - start) as usize) {
                    if *b == 0xcc {
                        *b = byte.load(Ordering::Relaxed);
                    }
                }
            }
        }
        // First pass: count sites; second: fill.
        let mut sites: KVec<Site> = KVec::new();
        for pass in 0..2 {
            let mut n = 0usize;
            let mut prev_terminal = false;
            let mut bad = false;
            let res = decode::scan(&code, start, |off, insn| {
                let addr = start + u64::from(off);
                let terminal_before = prev_terminal;
                // Nothing falls through into the int3 after an unconditional jump or a
                // return: a run of them is padding (the kernel fills what alternatives
                // patching freed after a shortened jump with int3).
                prev_terminal = matches!(insn.flow, Flow::Ret | Flow::Jmp(_) | Flow::JmpReg(_) | Flow::JmpMem(_) | Flow::Ud)
                    || (terminal_before && matches!(insn.flow, Flow::Int3));
                // The ftrace site: the 5-byte nop (or call, while ftrace uses it) that
                // opens the function, after `endbr64` if any.
                let fentry_off = fentry_offset(&code) as u32;
                if off == fentry_off && insn.len == 5 && (insn.nop || matches!(insn.flow, Flow::Call(_))) {
                    return;
                }
                let kind = match insn.flow {
                    Flow::Call(t) => classify_direct(t, &mut scratch).map(SiteKind::Call),
                    Flow::CallReg(r) => Some(SiteKind::Call(Target::Reg(r))),
                    Flow::CallMem(m) => Some(SiteKind::Call(Target::Mem(m))),
                    Flow::Jmp(t) if t < start || t >= end => {
                        if is_return_thunk(t, &mut scratch) {
                            Some(SiteKind::Ret)
                        } else {
                            classify_direct(t, &mut scratch).map(SiteKind::Tail)
                        }
                    }
                    Flow::JmpReg(r) => Some(SiteKind::Tail(Target::Reg(r))),
                    Flow::JmpMem(m) => Some(SiteKind::Tail(Target::Mem(m))),
                    Flow::Jcc(t) if t < start || t >= end => {
                        let bytes = code.get(off as usize..).unwrap_or(&[]);
                        let cc = crate::cond::jcc_condition(bytes);
                        cc.and_then(|cc| classify_direct(t, &mut scratch).map(|t| SiteKind::TailIf(t, cc)))
                    }
                    Flow::Ret => Some(SiteKind::Ret),
                    Flow::Int3 if !terminal_before && !insn_is_padding(&code, off) => {
                        // A breakpoint that is not padding: someone else probes this
                        // function; its bytes cannot be trusted.
                        bad = true;
                        None
                    }
                    _ => None,
                };
                let Some(kind) = kind else { return };
                n += 1;
                if pass == 1 {
                    let data = SiteData { func: start, func_end: end, addr, len: insn.len, kind };
                    // Capacity was reserved in pass 0, so this does not reallocate.
                    let _ = sites.push(Probe::at(addr, site_handler, data), GFP_KERNEL);
                }
            });
            if res.is_err() || bad {
                return Err(Reason::Unprobeable);
            }
            if pass == 0 {
                let max = self.max_probes.load(Ordering::Relaxed);
                let after = self.stats.probes_armed.load(Ordering::Relaxed) + n as u64;
                if after > max {
                    // Make room: disarm the least recently entered idle functions.
                    self.reap(ctl, 0, after - max);
                    if self.stats.probes_armed.load(Ordering::Relaxed) + n as u64 > max {
                        return Err(Reason::ArmFailed);
                    }
                }
                sites = KVec::with_capacity(n, GFP_KERNEL).map_err(|_| Reason::ArmFailed)?;
            }
        }
        // Register. A return that cannot be probed would leave frames open: refuse the
        // whole function then. A call site that cannot be probed is counted.
        let mut func = Func { sites, entry: 0, pinned: false };
        let mut ret_failed = false;
        timed(&self.stats.register_ns, || {
            for s in func.sites.iter_mut() {
                self.stats.registrations.fetch_add(1, Ordering::Relaxed);
                let is_ret = matches!(s.data.kind, SiteKind::Ret);
                // SAFETY: `func.sites` is never grown or reallocated from here on, and its
                // elements are only dropped in place (with the vector).
                let s = unsafe { Pin::new_unchecked(s) };
                if s.register().is_err() {
                    if is_ret {
                        ret_failed = true;
                        break;
                    }
                    self.stats.sites_unprobeable.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        if ret_failed || func.sites.iter().all(|s| !s.is_registered()) && !func.sites.is_empty() {
            let mut batch = Batch::new();
            for s in func.sites.iter_mut() {
                // SAFETY: as above, the sites are not moved.
                batch.add(unsafe { Pin::new_unchecked(s) });
            }
            drop(batch);
            return Err(Reason::Unprobeable);
        }
        Ok(func)
    }

    /// Registers the probes for tracing: the start function (armed), its entry probe and
    /// the exit and fork hooks. Called with `ctl` held.
    pub(crate) fn activate(&self, ctl: &mut Control) -> Result {
        if self.active.load(Ordering::Acquire) {
            return Ok(());
        }
        if !ctl.tracing_on || !self.any_traced() {
            return Ok(());
        }
        // The root: the start function's entry (armed now), or in all-system-calls mode a
        // probe in the body of x64_sys_call, whose callee is armed when first called.
        let (root, hook_at) = match ctl.start {
            Some(a) => (Some(a), a),
            None => {
                let (dispatch, _) = crate::control::resolve(c_str!("x64_sys_call"))?;
                let (table, _) = crate::control::resolve(c_str!("sys_call_table"))?;
                SYSCALL_TABLE.store(table, Ordering::Relaxed);
                (None, body_start(dispatch).ok_or(EINVAL)?)
            }
        };
        ROOT_ADDR.store(root.unwrap_or(0), Ordering::Relaxed);
        // No task may keep state from an earlier session.
        self.generation.fetch_add(1, Ordering::AcqRel);
        if self.inflight.load(Ordering::Acquire) == 0 {
            for s in self.tasks.iter() {
                s.pid.store(0, Ordering::Release);
            }
        }
        self.active.store(true, Ordering::Release);
        if let Some(root) = root {
            if self.arm_as(ctl, root, true) != ST_ARMED {
                self.deactivate(ctl);
                return Err(EINVAL);
            }
        }
        let root_hook = if root.is_some() { Hook::Root } else { Hook::Syscall };
        let sched_at = resolve_preemption();
        let hooks: [(Hook, Option<&'static CStr>, u64); 3 + MAX_PREEMPT_HOOKS] = [
            (root_hook, None, hook_at),
            (Hook::Exit, Some(c_str!("do_exit")), 0),
            (Hook::Fork, Some(c_str!("wake_up_new_task")), 0),
            (Hook::Preempt, None, sched_at[0]),
            (Hook::Preempt, None, sched_at[1]),
            (Hook::Preempt, None, sched_at[2]),
            (Hook::Preempt, None, sched_at[3]),
        ];
        for (hook, sym, at) in hooks {
            let p = match sym {
                Some(s) => Probe::on_symbol(s, hook_handler, hook),
                None if at != 0 => Probe::at(at, hook_handler, hook),
                None => continue,
            };
            let mut b = match KBox::pin(p, GFP_KERNEL) {
                Ok(b) => b,
                Err(e) => {
                    self.deactivate(ctl);
                    return Err(e.into());
                }
            };
            if let Err(e) = b.as_mut().register() {
                if matches!(hook, Hook::Preempt) {
                    // Optional: without all of them, preemption thunks are plain
                    // unprobeable leaves (the hooks that did register do nothing).
                    SCHED_ADDR.store(0, Ordering::Relaxed);
                    continue;
                }
                self.deactivate(ctl);
                return Err(e);
            }
            if ctl.hooks.push(b, GFP_KERNEL).is_err() {
                self.deactivate(ctl);
                return Err(ENOMEM);
            }
        }
        if self.opt_irqs.load(Ordering::Relaxed) {
            self.add_irq_roots(ctl);
        }
        self.schedule_reap();
        Ok(())
    }

    /// `irqs` option: arms the interrupt entry functions and probes their entries. One
    /// that this kernel does not have, or that cannot be probed, is counted and skipped.
    pub(crate) fn add_irq_roots(&self, ctl: &mut Control) {
        if !self.active.load(Ordering::Acquire) || ctl.hooks.iter().any(|h| matches!(h.data, Hook::IrqRoot(..))) {
            return;
        }
        for &(name, ctx) in IRQ_ROOTS {
            if self.add_irq_root(ctl, name, ctx).is_none() {
                self.stats.irq_roots_missing.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// The armed function starting at `func`, in `ctl.funcs`.
    fn armed_func<'a>(&self, ctl: &'a mut Control, func: u64) -> Option<&'a mut Func> {
        let e = self.find(func)?;
        ctl.funcs.iter_mut().find(|f| f.entry == e)
    }

    /// Arms one interrupt entry function (pinned: never disarmed lazily, its entry hook
    /// opens frames) and hooks its entry.
    fn add_irq_root(&self, ctl: &mut Control, name: &'static CStr, ctx: Ctx) -> Option<()> {
        let (func, _) = crate::control::resolve(name).ok()?;
        if self.lookup(func) == ST_ARMED {
            self.armed_func(ctl, func)?.pinned = true;
        } else if self.arm_as(ctl, func, true) != ST_ARMED {
            return None;
        }
        let mut b = KBox::pin(Probe::on_symbol(name, hook_handler, Hook::IrqRoot(ctx, func)), GFP_KERNEL).ok()?;
        b.as_mut().register().ok()?;
        ctl.hooks.push(b, GFP_KERNEL).ok()
    }

    /// Removes every probe. Called with `ctl` held.
    pub(crate) fn deactivate(&self, ctl: &mut Control) {
        self.active.store(false, Ordering::Release);
        {
            let mut batch = Batch::new();
            for h in ctl.hooks.iter_mut() {
                batch.add(h.as_mut());
            }
            for f in ctl.funcs.iter_mut() {
                for s in f.sites.iter_mut() {
                    // SAFETY: sites are never moved once their vector is filled.
                    batch.add(unsafe { Pin::new_unchecked(s) });
                }
            }
            // Dropping the batch unregisters all at once; after that no handler runs.
        }
        ctl.hooks = KVec::new();
        ctl.funcs = KVec::new();
        for e in self.table.iter() {
            e.key.store(0, Ordering::Relaxed);
            e.val.store(0, Ordering::Relaxed);
            e.open.store(0, Ordering::Relaxed);
            e.last.store(0, Ordering::Relaxed);
        }
        self.table_used.store(0, Ordering::Relaxed);
        for w in &self.wanted {
            w.store(0, Ordering::Relaxed);
        }
        self.stats.probes_armed.store(0, Ordering::Relaxed);
        self.generation.fetch_add(1, Ordering::AcqRel);
        // Tasks waiting in the trampoline see `active` false and go on.
        // SAFETY: trivial C wrapper (wake_up_all), process context.
        unsafe { bindings::fctrace_arm_wake() };
    }

    /// Lazy disarming. Removes the probes of functions that no traced task or interrupt
    /// is inside (no open frame) and that were last entered before `older_than` (clock
    /// ns); and, while fewer than `need` probes were freed, of the least recently entered
    /// other such functions (room under `max_probes`). The start function and interrupt
    /// entries stay. A disarmed function keeps its table entry with state 0, so its next
    /// call arms it again. Called with `ctl` held; sleeps. Returns the number disarmed.
    fn reap(&self, ctl: &mut Control, older_than: u64, need: u64) -> usize {
        let mut cand: KVec<(u64, usize)> = KVec::new();
        for (i, f) in ctl.funcs.iter().enumerate() {
            let Some(e) = self.table.get(f.entry) else { continue };
            if f.pinned || e.open.load(Ordering::Acquire) != 0 || e.val.load(Ordering::Acquire) != ST_ARMED {
                continue;
            }
            if cand.push((e.last.load(Ordering::Relaxed), i), GFP_KERNEL).is_err() {
                return 0;
            }
        }
        cand.sort_unstable();
        let Ok(mut dead) = KVec::from_elem(false, ctl.funcs.len(), GFP_KERNEL) else { return 0 };
        let mut chosen = 0usize;
        let mut freed = 0u64;
        for &(last, i) in cand.iter() {
            if last >= older_than && freed >= need {
                break;
            }
            let Some(f) = ctl.funcs.get(i) else { continue };
            freed += f.sites.iter().filter(|s| s.is_registered()).count() as u64;
            dead[i] = true;
            chosen += 1;
        }
        if chosen == 0 {
            return 0;
        }
        // New calls of these functions now go the arming path, which waits for `ctl`.
        // Handlers that saw them armed have opened their frames once this returns.
        for (f, _) in ctl.funcs.iter().zip(dead.iter()).filter(|(_, d)| **d) {
            self.table[f.entry].val.store(0, Ordering::Release);
        }
        // SAFETY: may sleep; we are in process context holding only `ctl`.
        unsafe { bindings::fctrace_synchronize_handlers() };
        for (f, d) in ctl.funcs.iter().zip(dead.iter_mut()).filter(|(_, d)| **d) {
            let e = &self.table[f.entry];
            if e.open.load(Ordering::Acquire) != 0 {
                // A task got in meanwhile: keep it.
                e.val.store(ST_ARMED, Ordering::Release);
                *d = false;
            }
        }
        let old = core::mem::take(&mut ctl.funcs);
        let (Ok(mut keep), Ok(mut gone)) = (KVec::with_capacity(old.len(), GFP_KERNEL), KVec::with_capacity(chosen, GFP_KERNEL))
        else {
            for (f, _) in old.iter().zip(dead.iter()).filter(|(_, d)| **d) {
                self.table[f.entry].val.store(ST_ARMED, Ordering::Release);
            }
            ctl.funcs = old;
            return 0;
        };
        for (f, d) in old.into_iter().zip(dead.iter()) {
            // Within capacity: these pushes do not fail (a failure would drop the function,
            // which unregisters its probes: still consistent).
            let _ = if *d { gone.push(f, GFP_KERNEL) } else { keep.push(f, GFP_KERNEL) };
        }
        ctl.funcs = keep;
        let mut unregistered = 0u64;
        timed(&self.stats.unregister_ns, || {
            let mut batch = Batch::new();
            for f in gone.iter_mut() {
                for s in f.sites.iter_mut() {
                    unregistered += u64::from(s.is_registered());
                    // SAFETY: sites are never moved once their vector is filled.
                    batch.add(unsafe { Pin::new_unchecked(s) });
                }
            }
            // Dropping the batch unregisters them all at once.
        });
        self.stats.unregistrations.fetch_add(unregistered, Ordering::Relaxed);
        let _ = self.stats.probes_armed.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| Some(n.saturating_sub(unregistered)));
        self.stats.funcs_disarmed.fetch_add(gone.len() as u64, Ordering::Relaxed);
        gone.len()
    }

    /// The periodic lazy-disarming pass (a delayed work item, every `REAP_PERIOD_MS`
    /// while tracing).
    fn reap_idle(&self) {
        let after = u64::from(self.disarm_after_s.load(Ordering::Relaxed));
        let mut ctl = self.lock_ctl();
        if !self.active.load(Ordering::Acquire) {
            return;
        }
        if after != 0 {
            let now = clock_ns();
            self.reap(&mut ctl, now.saturating_sub(after * 1_000_000_000), 0);
        }
        self.schedule_reap();
    }

    /// Queues the next lazy-disarming pass, unless `disarm_after` is 0 (writing it
    /// queues one) or tracing is off (activation queues one).
    pub(crate) fn schedule_reap(&self) {
        let after_ms = self.disarm_after_s.load(Ordering::Relaxed).saturating_mul(1000);
        if after_ms == 0 || !self.active.load(Ordering::Acquire) {
            return;
        }
        let period = (after_ms / 4).clamp(REAP_PERIOD_MIN_MS, REAP_PERIOD_MAX_MS);
        // SAFETY: trivial C wrapper around `schedule_delayed_work()` (a no-op if queued).
        unsafe { bindings::fctrace_schedule_reap(period) };
    }

    /// The number of armed functions when the control mutex was last released: what
    /// `stats` shows, without waiting for an arming pass that holds the mutex.
    pub(crate) fn armed_functions_published(&self) -> u64 {
        self.stats.funcs_armed.load(Ordering::Relaxed)
    }
}

static ROOT_ADDR: AtomicU64 = AtomicU64::new(0);
static SYSCALL_TABLE: AtomicU64 = AtomicU64::new(0);
/// Bound for system call numbers read from `%esi` (the table has fewer entries).
const MAX_SYSCALLS: u64 = 1024;

/// Looks up the preemption path (see [`PREEMPT_THUNKS`]); returns where the
/// [`Hook::Preempt`] probes go (0 = none), all 0 (and no thunk is treated specially) if a
/// part is missing, e.g. on a kernel without `CONFIG_PREEMPTION`.
fn resolve_preemption() -> [u64; MAX_PREEMPT_HOOKS] {
    let none = [0u64; MAX_PREEMPT_HOOKS];
    SCHED_ADDR.store(0, Ordering::Relaxed);
    for h in PREEMPT_HOOKS.iter() {
        h.store(0, Ordering::Relaxed);
    }
    let addr = |n: &CStr| crate::control::resolve(n).map(|(a, _)| a).unwrap_or(0);
    let thunks = [addr(c_str!("preempt_schedule_thunk")), addr(c_str!("preempt_schedule_notrace_thunk"))];
    let sched = addr(c_str!("__schedule"));
    if thunks[0] == 0 || sched == 0 {
        return none;
    }
    // The `call __schedule` instructions of the two functions the thunks end up in.
    let mut at = none;
    let mut n = 0;
    for f in [c_str!("preempt_schedule_common"), c_str!("preempt_schedule_notrace")] {
        let start = addr(f);
        let mut buf = KVec::new();
        let size = crate::control::symbolize(start, &mut buf).map_or(0, |i| i.size);
        if start == 0 || size == 0 {
            return none;
        }
        let Some(calls) = calls_to(start, size, sched) else { return none };
        for c in calls.into_iter().flatten() {
            let Some(slot) = at.get_mut(n) else { return none };
            *slot = c;
            n += 1;
        }
    }
    if n == 0 {
        return none;
    }
    let mut bytes = [0u8; MAX_PREEMPT_HOOKS];
    for (b, &a) in bytes.iter_mut().zip(at.iter()).take(n) {
        // SAFETY: the source is checked and never faults; `b` is a local byte.
        let r = unsafe { bindings::copy_from_kernel_nofault((b as *mut u8).cast(), a as *const _, 1) };
        if r != 0 || *b == 0xcc {
            return none;
        }
    }
    for i in 0..n {
        PREEMPT_HOOKS[i].store(at[i], Ordering::Relaxed);
        PREEMPT_HOOK_BYTES[i].store(bytes[i], Ordering::Relaxed);
    }
    for (t, a) in PREEMPT_THUNKS.iter().zip(thunks) {
        t.store(a, Ordering::Relaxed);
    }
    SCHED_ADDR.store(sched, Ordering::Relaxed);
    at
}

/// The `call target` instructions of the function at `start` (`size` bytes, at most
/// 512; at most two calls; `None` if its code cannot be read or decoded).
fn calls_to(start: u64, size: u64, target: u64) -> Option<[Option<u64>; 2]> {
    let mut code = [0u8; 512];
    let code = code.get_mut(..usize::try_from(size).ok()?)?;
    // SAFETY: the source is checked and never faults; `code` holds `size` bytes.
    let r = unsafe { bindings::copy_from_kernel_nofault(code.as_mut_ptr().cast(), start as *const _, code.len()) };
    if r != 0 {
        return None;
    }
    let mut out = [None; 2];
    let mut n = 0;
    decode::scan(code, start, |off, insn| {
        if insn.flow == Flow::Call(target) {
            if let Some(o) = out.get_mut(n) {
                *o = Some(start + u64::from(off));
            }
            n += 1;
        }
    })
    .ok()?;
    (n <= out.len()).then_some(out)
}

/// The first instruction of a function after `endbr64` and the ftrace site: a probe there
/// is an int3 probe (not ftrace-based) at the function's entry stack pointer.
fn body_start(func: u64) -> Option<u64> {
    let mut code = [0u8; 16];
    // SAFETY: the source is checked and never faults; `code` is a local of that size.
    let r = unsafe { bindings::copy_from_kernel_nofault(code.as_mut_ptr().cast(), func as *const _, 16) };
    if r != 0 {
        return None;
    }
    let mut off = fentry_offset(&code);
    let next = decode::decode(code.get(off..)?, func + off as u64).ok()?;
    if next.len == 5 && (next.nop || matches!(next.flow, Flow::Call(_))) {
        off += 5;
    }
    Some(func + off as u64)
}

/// Where the ftrace site of a function starts: after its `endbr64`, which the kernel
/// seals (turns into the 4-byte nop `66 0f 1f 00`) in functions whose address is never
/// taken, so both forms count.
fn fentry_offset(code: &[u8]) -> usize {
    match code.get(..4) {
        Some([0xf3, 0x0f, 0x1e, 0xfa]) | Some([0x66, 0x0f, 0x1f, 0x00]) => 4,
        _ => 0,
    }
}

fn insn_is_padding(code: &[u8], off: u32) -> bool {
    // A run of int3 up to the end of the function is padding.
    code.get(off as usize..).is_some_and(|rest| rest.iter().all(|&b| b == 0xcc))
}

/// Resolved once: retpoline thunks are register-indirect calls, the return thunk a return.
/// What a direct call or jump to `t` is: a retpoline thunk (really through a register),
/// a call to instrumentation (`None`: not probed, not shown), or a plain direct call.
fn classify_direct(t: u64, scratch: &mut KVec<u8>) -> Option<Target> {
    let Some(info) = crate::control::symbolize(t, scratch) else { return Some(Target::Direct(t)) };
    if info.offset == 0 && INSTRUMENTATION.iter().any(|p| parse::glob_match(p, info.name.as_bytes())) {
        return None;
    }
    Some(match thunk_register(info.name) {
        Some(r) => Target::Reg(r),
        None => Target::Direct(t),
    })
}

fn thunk_register(name: &str) -> Option<u8> {
    let reg = name.strip_prefix("__x86_indirect_thunk_")?;
    const NAMES: [&str; 16] =
        ["rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15"];
    NAMES.iter().position(|n| *n == reg).map(|i| i as u8)
}

fn is_return_thunk(t: u64, scratch: &mut KVec<u8>) -> bool {
    crate::control::symbolize(t, scratch).is_some_and(|i| i.name == "__x86_return_thunk")
}

/// Instrumentation that debug kernels call from every lock operation, memory access and
/// might-sleep point (KASAN, lockdep, DEBUG_PREEMPT, DEBUG_ATOMIC_SLEEP, KCOV): direct
/// calls to these are not probed and not shown. function_graph does not show them
/// either (they are `notrace`/`noinstr` or lockdep annotations); probing them would put
/// a breakpoint on every memory access of every armed function, for every task.
const INSTRUMENTATION: &[&[u8]] = &[
    b"__asan_*",
    b"__kasan_*",
    b"kasan_*",
    b"__sanitizer_*",
    b"__tsan_*",
    b"kcsan_*",
    b"lock_acquire*",
    b"lock_release",
    b"lock_acquired",
    b"lock_contended",
    b"lock_is_held_type",
    b"lock_sync",
    b"lock_set_class",
    b"lock_downgrade",
    b"lock_*pin_lock",
    b"debug_check_no_locks_*",
    b"lockdep_*",
    b"__lockdep_*",
    b"mark_lock*",
    b"fs_reclaim_acquire",
    b"fs_reclaim_release",
    b"__might_sleep",
    b"__might_resched",
    b"__might_fault",
    b"debug_smp_processor_id",
    b"__this_cpu_preempt_check",
    b"check_preemption_disabled",
    b"preempt_count_add",
    b"preempt_count_sub",
    b"trace_hardirqs_on*",
    b"trace_hardirqs_off*",
    b"rcu_read_lock_*held*",
    b"debug_lockdep_rcu_enabled",
    // lockdep's RCU checks (every rcu_read_lock(), every tracepoint site) and the
    // tracepoints of int3's own entry and exit call this: armed, every breakpoint trap
    // of every task took more traps, and the debug kernel all but stopped.
    b"rcu_is_watching",
    b"rcu_lockdep_current_cpu_online",
    b"__cant_sleep",
    b"__cant_migrate",
    // kmemleak's and KFENCE's allocation hooks (every slab allocation and free)
    b"kmemleak_*",
    b"__kmemleak_*",
    b"kfence_*",
    b"__kfence_*",
];

/// Functions fctrace never arms: its own probe path (the ring buffer, the clock, kprobes,
/// code patching) and code that runs with the locks arming needs.
const DENIED: &[&[u8]] = &[
    b"ring_buffer_*",
    b"rb_*",
    b"__rb_*",
    b"trace_clock*",
    b"*sched_clock*",
    b"local_clock*",
    b"*kprobe*",
    b"text_poke*",
    b"*jump_label*",
    b"*static_key*",
    b"*static_call*",
    b"ftrace_*",
    b"__x86_indirect_thunk*",
    b"__x86_return_thunk",
    b"irq_work_*",
    b"arch_irq_work_raise",
    b"copy_from_kernel_nofault*",
    b"memcpy",
    b"__memcpy",
    b"memset",
    b"__memset",
    b"stop_machine*",
    b"sprint_symbol*",
    b"kallsyms_*",
    b"*int3*",
    b"irqentry_*",
    b"synchronize_rcu*",
    // The stack unwinder and the stack depot. KASAN, kmemleak and lockdep unwind the stack
    // at every allocation and free they record (from instrumentation, never shown), but
    // arming ahead reached them through direct calls in armed code; armed, every
    // allocation of every task trapped in unwind_next_frame() at each stack frame, and the
    // debug kernel crawled. A traced call to them shows as a leaf.
    b"stack_trace_save*",
    b"arch_stack_walk*",
    b"__unwind_start",
    b"unwind_next_frame",
    b"unwind_get_return_address*",
    b"stack_depot_save*",
    b"__stack_depot_*",
    // The debug instrumentation is denied too (see `INSTRUMENTATION`, which `is_denied`
    // also checks): it runs from fctrace's own handlers, a reentrancy hazard when probed.
];

/// Exceptions to [`DENIED`]: function_graph's setup of a new task at fork, which only
/// allocates the child's return stack (while function_graph is on) and runs in no path of
/// fctrace's and with no lock arming needs; and lib/rbtree's red-black tree API, whose
/// names the ring buffer's `rb_*` pattern also matches. Neither the probe handlers nor
/// the ring buffer use rbtrees; arming (vmalloc) may, but a task's own hits while it arms
/// are ignored like any others.
const NOT_DENIED: &[&[u8]] = &[
    b"ftrace_graph_init_task",
    b"rb_insert_color",
    b"rb_erase",
    b"__rb_erase_color",
    b"__rb_insert_augmented",
    b"rb_first",
    b"rb_last",
    b"rb_next",
    b"rb_prev",
    b"rb_replace_node",
    b"rb_replace_node_rcu",
    b"rb_first_postorder",
    b"rb_next_postorder",
];

fn is_denied(name: &[u8]) -> bool {
    let any = |list: &[&[u8]]| list.iter().any(|p| parse::glob_match(p, name));
    !NOT_DENIED.contains(&name) && (any(DENIED) || any(INSTRUMENTATION))
}

/// # Safety
///
/// Called only by the kernel, with pointers that are valid for the duration of the call.
unsafe extern "C" fn site_handler(p: *mut bindings::kprobe, regs: *mut bindings::pt_regs) -> c_int {
    // SAFETY: this handler is installed only on `Probe<SiteData>`s, live while registered.
    let site = unsafe { Probe::<SiteData>::from_raw(p) };
    // SAFETY: kprobes passes the probed context's registers, ours to read and change.
    let regs = unsafe { &mut *regs };
    match state() {
        Some(st) => st.on_site(&site.data, regs),
        None => 0,
    }
}

/// # Safety
///
/// Called only by the kernel, with pointers that are valid for the duration of the call.
unsafe extern "C" fn hook_handler(p: *mut bindings::kprobe, regs: *mut bindings::pt_regs) -> c_int {
    // SAFETY: this handler is installed only on `Probe<Hook>`s, live while registered.
    let hook = unsafe { Probe::<Hook>::from_raw(p) }.data;
    // SAFETY: kprobes passes the probed context's registers.
    let regs = unsafe { &mut *regs };
    let Some(st) = state() else { return 0 };
    match hook {
        Hook::Root => st.on_root(p, regs),
        Hook::Exit => st.on_exit(p, regs),
        Hook::Fork => st.on_fork(p, regs),
        Hook::Syscall => st.on_syscall(p, regs),
        Hook::IrqRoot(ctx, func) => st.on_irq_root(p, regs, ctx, func),
        Hook::Preempt => st.on_preempt(p, regs),
    }
}

/// Called by `fctrace_trampoline` (see trampoline.S).
#[no_mangle]
pub(crate) extern "C" fn fctrace_arm_pending() {
    if let Some(st) = state() {
        st.arm_pending();
    }
}

/// Called from the module's work item: tracing ends when no traced process is left;
/// otherwise functions first called in atomic context are armed ahead.
#[no_mangle]
pub(crate) extern "C" fn fctrace_sync_work() {
    let Some(st) = state() else { return };
    let mut ctl = st.lock_ctl();
    if !st.active.load(Ordering::Acquire) {
        return;
    }
    st.serve_requests(&mut ctl);
    if !st.any_traced() {
        st.deactivate(&mut ctl);
        return;
    }
    st.ahead_busy.store(true, Ordering::Release);
    drop(ctl);
    st.arm_ahead();
    st.ahead_busy.store(false, Ordering::Release);
    let mut ctl = st.lock_ctl();
    if st.active.load(Ordering::Acquire) && !st.any_traced() {
        st.deactivate(&mut ctl);
    }
}

/// Called from the module's delayed work item: lazy disarming of idle functions.
#[no_mangle]
pub(crate) extern "C" fn fctrace_reap_work() {
    if let Some(st) = state() {
        st.reap_idle();
    }
}
