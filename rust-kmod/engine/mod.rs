// SPDX-License-Identifier: GPL-2.0

//! The dynamic call-site engine: the mechanism that follows a traced task through the
//! kernel. (What the control files show and accept is `control.rs`; turning its records
//! into text is `reader.rs`.)
//!
//! A function is *armed* when each call it makes is seen: its direct callees with an ftrace
//! site have an entry hook (fctrace's own `ftrace_ops`), its other call instructions and
//! tail jumps a kprobe; its returns are hooked on the traced task's stack. When a traced
//! task makes a call fctrace sees, the call is recorded and, if the callee is not armed
//! yet, the task is sent through `fctrace_trampoline`, where it waits (in its own,
//! sleepable, context) for the work item to arm the callee, and then makes the call (or
//! enters the callee) again. So the hooked code grows with what the task executes, and
//! nothing else is touched.
//!
//! The parts, one file each:
//!
//! - [`tree`]: which call tree a probe hit belongs to (a traced thread's, or an interrupt
//!   context's), and the records it adds; the shadow stack's rules themselves are in
//!   `crates/fctrace-core` (`shadow.rs`), host-tested.
//! - [`table`]: the function table, what fctrace knows about each function it met.
//! - [`handlers`]: the probe handlers (call sites, the start function, system calls,
//!   interrupts, preemption, exit and fork).
//! - [`arming`]: decoding a function and registering its probes.
//! - [`returns`]: hooked returns (the traced task's return addresses replaced with
//!   `fctrace_return`), so that no `ret` carries a probe.
//! - [`wait`]: the trampoline handshake, arming ahead, lossless throttling, work items.
//! - [`session`]: tracing on and off, lazy disarming.
//! - [`preempt`]: the preemption path's thunks and hooks.
//! - [`entry`]: calls seen at the callee's entry, through fctrace's own ftrace_ops.
//! - [`static_call`]: calls from sites kprobes refuses (static calls), seen at the
//!   callee's entry.
//! - [`policy`]: what is never armed (the deny list), instrumentation, interrupt roots.

mod args_option;
mod arming;
mod entry;
mod entry_probe;
mod extable;
mod handlers;
mod policy;
mod preempt;
mod returns;
mod session;
mod settings;
mod site;
mod stats;
mod step;
mod table;
mod tree;
mod wait;

pub(crate) use args_option::{BtfSlot, Pending, TypedRecord};
pub(crate) use arming::Func;
pub(crate) use handlers::Hook;
pub(crate) use settings::Settings;
pub(crate) use stats::Stats;

use crate::buffer::{Buffer, ReadState};
use crate::error_log::ErrorLog;
use crate::kprobe::Probe;
use crate::parse::{FilterPattern, OptionName, OPTIONS};
use crate::record::Reason;
use crate::sys::{self, read_kernel, this_cpu};
use crate::thunks::Thunks;
use core::pin::Pin;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use kernel::alloc::KVec;
use kernel::new_mutex;
use kernel::prelude::*;
use kernel::sync::Mutex;

pub(crate) use crate::shadow::MAX_FRAMES;
/// Threads that can be inside a trace at once.
pub(crate) const MAX_TASKS: usize = 64;
/// Processes `set_pid` can hold.
pub(crate) const MAX_PIDS: usize = 32;
/// The bit of thread group `tgid` in `Tracer::traced_mask`.
fn traced_bit(tgid: u32) -> u64 {
    1 << (tgid % 64)
}

/// Default and largest bound on the probes armed at once (`max_probes`).
pub(crate) const DEFAULT_MAX_PROBES: u64 = 60000;
pub(crate) const MAX_MAX_PROBES: u64 = 1_000_000;
/// Default `arm_wait_ms`: how long a task in the trampoline waits for the work item to
/// arm its callee.
pub(crate) const DEFAULT_ARM_WAIT_MS: u32 = 10_000;
/// Default `disarm_after`, seconds.
pub(crate) const DEFAULT_DISARM_AFTER_S: u32 = 30;
/// Default ring buffer size per CPU, in KiB.
pub(crate) const DEFAULT_BUFFER_KB: u64 = 1024;

/// How a control-file write waits for the tracer's mutex.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// A signal ends the wait (`ERESTARTSYS`): a `write()`.
    Interruptible,
    /// As long as it takes: what is applied at `close()`, which cannot be restarted.
    Uninterruptible,
}

/// The work items a holder of the tracer's mutex queues again when it releases it: they
/// found it taken (see [`Tracer::lock_or_defer`]).
pub(crate) const DEFER_SYNC: u32 = 1;
pub(crate) const DEFER_REAP: u32 = 2;
pub(crate) const DEFER_OPTIMIZE: u32 = 4;
/// In how long the deferred delayed work items run.
const DEFERRED_WORK_MS: u32 = 10;

/// The single instance, for the C callbacks.
static TRACER: AtomicPtr<Tracer> = AtomicPtr::new(core::ptr::null_mut());

/// The engine as the trap notifier's client ([`crate::trap_notifier::Guard`]): single
/// steps are the engine's own (x86-64's trap flag).
#[cfg(target_arch = "x86_64")]
pub(crate) struct Traps;

#[cfg(target_arch = "x86_64")]
impl crate::trap_notifier::TrapClient for Traps {
    fn on_debug(regs: &mut sys::PtRegs, dr6: *mut kernel::ffi::c_ulong) -> bool {
        step::on_debug(regs, dr6)
    }

    fn on_debug_last(regs: &mut sys::PtRegs, dr6: *mut kernel::ffi::c_ulong) -> bool {
        step::on_debug_unclaimed(regs, dr6)
    }
}

/// The tracer, if the module is loaded.
pub(crate) fn tracer() -> Option<&'static Tracer> {
    let p = TRACER.load(Ordering::Acquire);
    // SAFETY: `TRACER` is set to a pinned, heap-allocated `Tracer` by `TracerHandle::new`
    // and cleared in `TracerHandle::drop` only after every probe and file is gone and no
    // task can be in the trampoline; callers never keep the reference past their callback.
    unsafe { p.as_ref() }
}

/// While tracing is on, at least the bits of `Tracer::traced_mask` (else 0, or a few bits
/// left over: a superset is harmless, the handlers ask [`Tracer::current_traced`] next). Read by
/// every task that runs a hooked function or a probe, in C (`fctrace_probe_traced()`,
/// the ftrace callback): one load and one test, the whole cost of fctrace's hooks to
/// tasks it does not trace.
#[no_mangle]
#[allow(non_upper_case_globals)]
pub(crate) static fctrace_hot_mask: AtomicU64 = AtomicU64::new(0);

/// While tracing is on with the `kworkers` option: every workqueue worker passes the C
/// check too (`fctrace_hot()`), and the handlers ask [`Tracer::current_traced`] next.
#[no_mangle]
#[allow(non_upper_case_globals)]
pub(crate) static fctrace_hot_kworkers: AtomicBool = AtomicBool::new(false);

/// The CPU hotplug callback (c/hooks.c) of a CPU going down, on that CPU with interrupts
/// off: its staged records go into the ring buffer.
#[no_mangle]
pub(crate) extern "C" fn fctrace_flush_this_cpu() {
    if let Some(tr) = tracer() {
        tr.buf.flush_local();
    }
}

/// A module comes with text [`start`, `end`) (the module notifier, c/hooks.c): see
/// [`Tracer::module_text_coming`]. Process context; sleeps.
#[no_mangle]
pub(crate) extern "C" fn fctrace_module_text_coming(start: u64, end: u64) {
    if let Some(tr) = tracer() {
        tr.module_text_coming(start, end);
    }
}

/// Module text [`start`, `end`) goes away (the module notifier, c/hooks.c): see
/// [`Tracer::module_text_gone`]. Process context; sleeps.
#[no_mangle]
pub(crate) extern "C" fn fctrace_module_text_gone(start: u64, end: u64) {
    if let Some(tr) = tracer() {
        tr.module_text_gone(start, end);
    }
}

/// The scheduler clock in ns (`trace_clock_local()`, ftrace's default clock): the trace's
/// timestamps, durations and idle times. Any context, NMI included.
pub(crate) use crate::sys::clock_ns;

/// Runs `f` and adds the time it took to `ns`.
fn timed<R>(ns: &AtomicU64, f: impl FnOnce() -> R) -> R {
    let t0 = clock_ns();
    let r = f();
    ns.fetch_add(clock_ns().saturating_sub(t0), Ordering::Relaxed);
    r
}

/// A word of the current context's own stack (see `fctrace_stack_word()`), read directly;
/// any other address through the no-fault path. With the stack's key (0: not one).
fn stack_word(addr: u64) -> (Option<u64>, u64) {
    match sys::stack_word(addr) {
        Some((key, v)) => (Some(v), key),
        None => (read_word(addr), 0),
    }
}

/// The kernel image's text, `_stext.._etext` (0, 0 until the tracer is set up): always
/// mapped, read without the no-fault path.
static KERNEL_TEXT: [AtomicU64; 2] = [AtomicU64::new(0), AtomicU64::new(0)];

/// The kernel image's text, `_stext.._etext`.
fn kernel_text() -> (u64, u64) {
    (
        KERNEL_TEXT[0].load(Ordering::Relaxed),
        KERNEL_TEXT[1].load(Ordering::Relaxed),
    )
}

/// Reads code at `addr`: directly in the kernel image's text, else without faulting.
fn read_text(addr: u64, buf: &mut [u8]) -> bool {
    let (text, etext) = kernel_text();
    if addr >= text && addr.saturating_add(buf.len() as u64) <= etext {
        // SAFETY: the kernel image's text is mapped and readable for as long as the
        // kernel runs; `buf` is a distinct, writable buffer of that length.
        unsafe { core::ptr::copy_nonoverlapping(addr as *const u8, buf.as_mut_ptr(), buf.len()) };
        return true;
    }
    read_kernel(addr, buf)
}

/// arm64: the function the module PLT entry at `t` reaches, if one is there
/// ([`a64::plt_target`](crate::a64::plt_target)). Any context: no symbol lookup.
#[cfg(target_arch = "aarch64")]
pub(crate) fn plt_at(t: u64) -> Option<u64> {
    let mut b = [0u8; 12];
    if !read_kernel(t, &mut b) {
        return None;
    }
    let w = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    crate::a64::plt_target([w(0), w(4), w(8)], t)
}

/// Reads a kernel word that may not be mapped, without faulting.
fn read_word(addr: u64) -> Option<u64> {
    let mut v = [0u8; 8];
    read_kernel(addr, &mut v).then(|| u64::from_ne_bytes(v))
}

/// The target of the direct call at `site`, if a 5-byte call is what is there now.
fn call_target(site: u64) -> Option<u64> {
    let mut code = [0u8; 5];
    if !read_kernel(site, &mut code) {
        return None;
    }
    match crate::decode::decode(&code, site) {
        Ok(i) if i.len == 5 => match i.flow {
            crate::decode::Flow::Call(t) => Some(t),
            _ => None,
        },
        _ => None,
    }
}

/// Reads `size` bytes (at most 8) of kernel memory at `addr` as a little-endian value,
/// zero-extended, without faulting: the loads of an emulated program
/// (`emulate::Machine::load`).
fn load_kernel(addr: u64, size: u8) -> Option<u64> {
    let mut b = [0u8; 8];
    let n = usize::from(size).min(8);
    read_kernel(addr, &mut b[..n]).then(|| u64::from_le_bytes(b))
}

/// The fields of [`Tracer`] protected by its mutex: what decides what is armed, and the
/// armed probes.
pub(crate) struct TracerInner {
    /// `tracing_on`.
    pub(crate) tracing_on: bool,
    /// A write changed what reads of `tracing_on`, `start_function` or `filter` show: the
    /// guard publishes it (`Tracer::publish_shown`) before it releases the mutex.
    pub(crate) shown_dirty: bool,
    /// The module holds a reference to itself ([`sys::module_get`]): from activation
    /// until tracing stopped and no hooked return is left to come back through
    /// `fctrace_return` (another tracer's return hook may hold one after fctrace could
    /// not put it back). `rmmod` is refused meanwhile, rather than left waiting.
    pub(crate) pinned: bool,
    /// arm64: the resume probe (`wait/resume.rs`), registered when tracing starts and
    /// unregistered with the module's reference to itself, once no task has a place
    /// kept (none is between a breakpoint that sent it to wait and the probe). Without
    /// it no breakpoint sends a task to wait.
    #[cfg(target_arch = "aarch64")]
    pub(crate) resume: Option<wait::resume::ResumeHook>,
    /// Start function, `None` for every system call.
    pub(crate) start: Option<u64>,
    /// `filter`: (negated, glob) pairs.
    pub(crate) filters: KVec<(bool, KVec<u8>)>,
    /// Armed functions with their probes.
    funcs: KVec<Func>,
    /// Task-lifetime hooks and entry probes.
    hooks: KVec<Pin<KBox<Probe<Hook>>>>,
    /// Entry hooks through fctrace's own ftrace_ops (see `entry.rs`).
    pub(crate) entry: crate::entry_ops::EntryHooks,
    /// Entry probes on the callees of call sites kprobes refused (see `entry_probe.rs`).
    static_hooks: KVec<Pin<KBox<Probe<entry_probe::StaticHook>>>>,
    /// Armed functions reached through a pointer whose own entry hook waits for the next
    /// ftrace update, or for arming to be quiet (see `Tracer::arm_as`).
    deferred_hooks: KVec<u64>,
    /// The running kernel's branch thunks, found when tracing starts.
    pub(crate) thunks: Thunks,
    /// The kernel image's exception table, read when tracing first starts.
    pub(crate) extable: extable::Extable,
    /// The kernel image's static call sites (read like `extable`).
    pub(crate) static_calls: extable::Extable,
}

impl TracerInner {
    fn new() -> Self {
        TracerInner {
            tracing_on: true,
            shown_dirty: false,
            pinned: false,
            #[cfg(target_arch = "aarch64")]
            resume: None,
            start: None,
            filters: KVec::new(),
            funcs: KVec::new(),
            hooks: KVec::new(),
            entry: crate::entry_ops::EntryHooks::new(),
            static_hooks: KVec::new(),
            deferred_hooks: KVec::new(),
            thunks: Thunks::new(),
            extable: extable::Extable::unknown(),
            static_calls: extable::Extable::unknown(),
        }
    }

    pub(crate) fn filter_patterns(&self) -> impl Iterator<Item = FilterPattern<'_>> + Clone {
        self.filters.iter().map(|(negate, glob)| FilterPattern {
            negate: *negate,
            glob,
        })
    }
}

/// What reading `tracing_on`, `start_function` and `filter` shows: a copy of those
/// fields of [`TracerInner`], made by their writers while they hold its mutex (then
/// this one), so that a reader never waits for an arming pass that holds that mutex.
pub(crate) struct Shown {
    pub(crate) tracing_on: bool,
    pub(crate) start: Option<u64>,
    /// `filter`'s text, one pattern a line.
    pub(crate) filter: KVec<u8>,
}

/// Everything the engine has.
#[pin_data]
pub(crate) struct Tracer {
    /// Settings and armed probes; taken by control-file writes and by the arming path.
    inner: sys::TracerMutex<TracerInner>,
    /// Lines for `error_log`.
    #[pin]
    pub(crate) errors: Mutex<ErrorLog>,
    /// What reads of the settings under `inner` show (see [`Shown`]).
    #[pin]
    pub(crate) shown: Mutex<Shown>,
    /// Threads holding `inner` or waiting for it (see [`Tracer::module_text_gone`]).
    lockers: AtomicU32,
    /// The work items that found the mutex taken (`DEFER_*`): the holder queues them
    /// again when it releases it (see [`Tracer::lock_or_defer`]).
    deferred: AtomicU32,
    /// Module text going away, never armed (see `going.rs`).
    pub(crate) going: crate::going::GoingText,
    pub(crate) buf: Buffer,
    /// Where `trace_pipe` readers are in the buffer.
    #[pin]
    pub(crate) reading: Mutex<ReadState<Pending>>,
    pub(crate) settings: Settings,
    /// Traced processes (thread-group ids), 0 = free.
    pub(crate) traced: [AtomicU32; MAX_PIDS],
    /// A bit (`traced_bit`) for each thread group that is in `traced` or was since
    /// tracing last stopped with none: a task whose bit is clear is not traced. Set by
    /// [`Tracer::mark_traced`] before the thread group goes into `traced`.
    traced_mask: AtomicU64,
    /// When the oldest blocker not released yet was registered ([`clock_ns`]; 0: none),
    /// see `Tracer::schedule_optimize`.
    blockers_since: AtomicU64,
    /// A process that stopped being traced at a privileged exec, for the work item to
    /// name in `error_log` (the exec hook cannot take its mutex); 0: none.
    privileged_exec_pid: AtomicU32,
    /// Where the first single-step trap fctrace ended without a step of its own to account
    /// for it stopped (see `step::on_debug`), for the work item to name in `error_log`;
    /// 0: none since it last did.
    pub(crate) unclaimed_step: AtomicU64,
    /// A return came through the trampoline where no word was replaced: where it was sent
    /// (see [`Tracer::return_unexpected`]), for the work item to name in `error_log` as it
    /// stops tracing; 0: none.
    unexpected_return: AtomicU64,
    /// Probes are registered and tracing.
    pub(crate) active: AtomicBool,
    /// Open `trace_pipe` files.
    pub(crate) readers: AtomicUsize,
    /// Bumped at every (de)activation: per-thread state from before is stale.
    generation: AtomicU32,
    /// Where traces start: the start function, or in all-system-calls mode (0) the
    /// system call `syscall_from` leads to.
    root: AtomicU64,
    /// All-system-calls mode: where the root's handler finds the system call called.
    /// x86-64: the address of `sys_call_table`; arm64: the number of the register
    /// `invoke_syscall()` calls it through.
    syscall_from: AtomicU64,
    pub(crate) table: table::FuncTable,
    /// Direct callees of armed functions and their entry hooks (see `entry.rs`).
    hooks: table::HookTable,
    trees: tree::Trees,
    waits: wait::Waits,
    preempt: preempt::Preempt,
    /// Where return hooks (function_graph's, kretprobes') send returns.
    ret_hooks: entry_probe::ReturnHooks,
    /// The return addresses fctrace replaced, per stack.
    returns: returns::Returns,
    pub(crate) stats: Stats,
    /// The kernel's BTF (`args` option).
    pub(crate) btf: BtfSlot,
}

/// The tracer's mutex, held inside a `memalloc_nofs` scope.
///
/// A traced task waits in the trampoline for the work item that holds this mutex to arm
/// its callee, possibly from inside a file system (holding its locks) or in the middle of
/// an allocation; reclaim entering a file system from the work item could wait for those
/// locks until the task's wait times out. So nothing allocates with `__GFP_FS` while
/// holding it: every holder goes through this guard, which makes all allocations in its
/// scope `GFP_NOFS`.
///
/// On release it publishes the number of armed functions to `Stats::funcs_armed`, and
/// of pre-site probes kprobes has optimized to `Stats::presites_optimized`.
pub(crate) struct Guard<'a> {
    guard: core::mem::ManuallyDrop<sys::TracerMutexGuard<'a, TracerInner>>,
    nofs: core::mem::ManuallyDrop<sys::NoFs>,
    tr: &'a Tracer,
}

impl core::ops::Deref for Guard<'_> {
    type Target = TracerInner;
    fn deref(&self) -> &TracerInner {
        &self.guard
    }
}

impl core::ops::DerefMut for Guard<'_> {
    fn deref_mut(&mut self) -> &mut TracerInner {
        &mut self.guard
    }
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        let funcs = &self.guard.funcs;
        self.tr
            .stats
            .funcs_armed
            .store(funcs.len() as u64, Ordering::Relaxed);
        let (mut pre, mut optimized, mut blocked) = (0, 0, 0);
        let (mut post, mut post_optimized) = (0, 0);
        for p in funcs.iter().flat_map(|f| f.sites.iter()) {
            blocked += u64::from(p.is_blocked());
            if p.data.at_post && p.is_registered() {
                post += 1;
                post_optimized += u64::from(p.is_optimized());
            } else if p.data.pre != 0 && p.is_registered() {
                pre += 1;
                optimized += u64::from(p.is_optimized());
            }
        }
        self.tr.stats.postsites.store(post, Ordering::Relaxed);
        self.tr
            .stats
            .postsites_optimized
            .store(post_optimized, Ordering::Relaxed);
        blocked += self
            .guard
            .static_hooks
            .iter()
            .filter(|p| p.is_blocked())
            .count() as u64;
        self.tr
            .stats
            .probe_blockers
            .store(blocked, Ordering::Relaxed);
        self.tr.stats.presites.store(pre, Ordering::Relaxed);
        let entry_optimized = self
            .guard
            .static_hooks
            .iter()
            .filter(|p| p.is_registered() && p.is_optimized())
            .count();
        self.tr
            .stats
            .entry_probes_optimized
            .store(entry_optimized as u64, Ordering::Relaxed);
        self.tr
            .stats
            .presites_optimized
            .store(optimized, Ordering::Relaxed);
        if self.guard.shown_dirty {
            self.guard.shown_dirty = false;
            // Without memory for the copy, reads show the old filter until the next
            // write: said in `error_log`, and the write itself stands.
            if self.tr.publish_shown(&self.guard).is_err() {
                self.tr.log(format_args!(
                    "filter: no memory to copy the patterns for reading; reads show the old \
                     ones"
                ));
            }
        }
        // SAFETY: `guard` is dropped exactly once, here, and not used afterwards.
        unsafe { core::mem::ManuallyDrop::drop(&mut self.guard) };
        // SAFETY: `nofs` is dropped exactly once, here, after the mutex is released, and
        // not used afterwards.
        unsafe { core::mem::ManuallyDrop::drop(&mut self.nofs) };
        self.tr.lockers.fetch_sub(1, Ordering::SeqCst);
        // After the release and `lockers`' decrement (SeqCst): a work item that sets its
        // bit after this swap counts itself in `lockers` after that decrement, so its
        // second try sees the mutex released (or held by a later holder, whose release
        // comes here in turn). A failed try reads the mutex only: `lockers` orders it.
        let d = self.tr.deferred.swap(0, Ordering::SeqCst);
        if d & DEFER_SYNC != 0 {
            sys::schedule_sync();
        }
        if d & DEFER_REAP != 0 {
            sys::schedule_reap(DEFERRED_WORK_MS);
        }
        if d & DEFER_OPTIMIZE != 0 {
            sys::schedule_optimize(DEFERRED_WORK_MS, false);
        }
    }
}

impl Tracer {
    /// Takes the mutex (see [`Guard`]), waiting as long as it takes.
    pub(crate) fn lock(&self) -> Guard<'_> {
        let nofs = self.count_locker();
        self.guard(self.inner.lock(), nofs)
    }

    /// Takes the mutex for a control-file write: a signal ends the wait (`ERESTARTSYS`),
    /// as it ends other waits of a system call; nothing was changed then. (Each write
    /// that re-arms holds the mutex for a while: seconds on a slow kernel, and a write
    /// may queue behind several.)
    pub(crate) fn lock_interruptible(&self) -> Result<Guard<'_>> {
        let nofs = self.count_locker();
        match self.inner.lock_interruptible() {
            Ok(g) => Ok(self.guard(g, nofs)),
            Err(e) => {
                self.uncount_locker(nofs);
                Err(e)
            }
        }
    }

    /// Takes the mutex for a control-file write, as `wait` says.
    pub(crate) fn lock_for(&self, wait: Wait) -> Result<Guard<'_>> {
        match wait {
            Wait::Interruptible => self.lock_interruptible(),
            Wait::Uninterruptible => Ok(self.lock()),
        }
    }

    /// For a work item: takes the mutex if it is free; else sets `bit` (`DEFER_*`) for the
    /// holder to queue the work item again when it releases it, and returns `None`. Work
    /// items never wait behind control-file writes (seconds each on a slow kernel), and
    /// so never park a worker for that long.
    pub(crate) fn lock_or_defer(&self, bit: u32) -> Option<Guard<'_>> {
        if let Some(g) = self.try_lock() {
            return Some(g);
        }
        self.deferred.fetch_or(bit, Ordering::SeqCst);
        // The holder may have released the mutex before it saw the bit: try once more.
        // (Taken now, the bit stays: the work item runs once more, and finds nothing.)
        self.try_lock()
    }

    fn try_lock(&self) -> Option<Guard<'_>> {
        let nofs = self.count_locker();
        match self.inner.try_lock() {
            Some(g) => Some(self.guard(g, nofs)),
            None => {
                self.uncount_locker(nofs);
                None
            }
        }
    }

    /// Counted before the mutex is taken, with a full barrier: a module going away either
    /// sees this holder or is seen by what it arms (`module_text_gone`). The `NoFs` scope
    /// begins before the wait.
    fn count_locker(&self) -> sys::NoFs {
        self.lockers.fetch_add(1, Ordering::SeqCst);
        sys::NoFs::new()
    }

    /// The mutex was not taken after all.
    fn uncount_locker(&self, nofs: sys::NoFs) {
        drop(nofs);
        self.lockers.fetch_sub(1, Ordering::SeqCst);
    }

    fn guard<'a>(
        &'a self,
        g: sys::TracerMutexGuard<'a, TracerInner>,
        nofs: sys::NoFs,
    ) -> Guard<'a> {
        Guard {
            guard: core::mem::ManuallyDrop::new(g),
            nofs: core::mem::ManuallyDrop::new(nofs),
            tr: self,
        }
    }

    /// Copies the settings that reads show from `inner` (after a write to them). On
    /// failure (no memory for the filter's text) only the filter is left as it was.
    fn publish_shown(&self, inner: &TracerInner) -> Result {
        let filter = (|| -> Result<KVec<u8>> {
            let mut filter = KVec::new();
            for p in inner.filter_patterns() {
                if p.negate {
                    filter.push(b'!', GFP_KERNEL)?;
                }
                filter.extend_from_slice(p.glob, GFP_KERNEL)?;
                filter.push(b'\n', GFP_KERNEL)?;
            }
            Ok(filter)
        })();
        let mut shown = self.shown.lock();
        shown.tracing_on = inner.tracing_on;
        shown.start = inner.start;
        shown.filter = filter?;
        Ok(())
    }

    /// Adds a line to `error_log`.
    pub(crate) fn log(&self, args: core::fmt::Arguments<'_>) {
        self.errors.lock().add(args);
    }

    fn gen(&self) -> u32 {
        self.generation.load(Ordering::Acquire)
    }

    /// Whether thread group `tgid` is traced. Every hook asks this of every task that
    /// runs it: most tasks are answered by one bit of `traced_mask`.
    pub(crate) fn is_traced(&self, tgid: u32) -> bool {
        tgid != 0
            && self.traced_mask.load(Ordering::Acquire) & traced_bit(tgid) != 0
            && self
                .traced
                .iter()
                .any(|t| t.load(Ordering::Relaxed) == tgid)
    }

    /// Whether the current task, of thread group `tgid`, is traced: its thread group is,
    /// or it is a workqueue worker and the `kworkers` option is set; never while it runs
    /// one of fctrace's own work items (it would wait for arming, which only they do).
    pub(crate) fn current_traced(&self, tgid: u32) -> bool {
        (self.is_traced(tgid)
            || (self.settings.option(OptionName::Kworkers) && sys::current_is_kworker()))
            && !sys::current_is_own_worker()
    }

    /// Whether the current task is traced only as a worker (`kworkers`), not through
    /// `set_pid`: such a task is followed inside the start function's calls, nothing else
    /// it does (its forks, the interrupts it takes outside them).
    pub(crate) fn only_as_worker(&self, tgid: u32) -> bool {
        !self.is_traced(tgid)
    }

    /// Whether tracing has anyone to trace: a thread group in `set_pid`, or with the
    /// `kworkers` option the workqueue workers.
    pub(crate) fn tracing_wanted(&self) -> bool {
        self.any_traced() || self.settings.option(OptionName::Kworkers)
    }

    /// Before `tgid` is stored into `traced`: its bit in `traced_mask`.
    pub(crate) fn mark_traced(&self, tgid: u32) {
        self.traced_mask
            .fetch_or(traced_bit(tgid), Ordering::AcqRel);
        // (Set while tracing is off too: harmless, and never missing while it is on.)
        fctrace_hot_mask.fetch_or(traced_bit(tgid), Ordering::AcqRel);
    }

    /// Tracing starts or stops: `fctrace_hot_mask` follows (after `active` changed).
    pub(crate) fn update_hot_mask(&self) {
        let active = self.active.load(Ordering::Acquire);
        let m = if active {
            self.traced_mask.load(Ordering::Acquire)
        } else {
            0
        };
        fctrace_hot_mask.store(m, Ordering::Release);
        fctrace_hot_kworkers.store(
            active && self.settings.option(OptionName::Kworkers),
            Ordering::Release,
        );
    }

    /// Removes `tgid` from the traced processes; when none is left, the work item ends
    /// tracing. Any context. Whether it was traced.
    fn untrace(&self, tgid: u32) -> bool {
        let mut was = false;
        for t in &self.traced {
            was |= t
                .compare_exchange(tgid, 0, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok();
        }
        if was && self.active.load(Ordering::Acquire) && !self.tracing_wanted() {
            self.kick_work();
        }
        was
    }

    /// From the `sched_process_exit` tracepoint, for every task that exits (tracing or
    /// not, so that a PID reused later is never traced): after the last thread of a
    /// traced process is counted out (`group_dead`), the process is no longer traced.
    pub(crate) fn task_exited(&self, tgid: u32, group_dead: bool) {
        if group_dead && self.untrace(tgid) {
            self.stats.processes_exited.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// From the `sched_process_exec` tracepoint, in the task that completed an exec.
    /// A thread other than the leader that execs takes the leader's ID (`de_thread()`):
    /// its tree's slot follows it, and the leader's (it is gone) is freed. A process that
    /// executed a program that gains privileges (`secureexec`: set-user-ID, set-group-ID,
    /// file capabilities; AT_SECURE) stops being traced, as a ptrace tracer without
    /// CAP_SYS_PTRACE would lose it: what the privileged program does is not the tracer's
    /// to see unless it chooses that process again (writes its PID after the exec).
    pub(crate) fn task_exec(&self, pid: u32, old_pid: u32, tgid: u32, secure: bool) {
        if !self.is_traced(tgid) {
            return;
        }
        if pid != old_pid {
            if let Some(dead) = self.slot(pid) {
                self.release(dead);
            }
            if let Some(s) = self.slot(old_pid) {
                // Only this thread uses its slot, and this is that thread.
                self.rename(s, pid);
            }
        }
        if secure && self.untrace(tgid) {
            // After the exec this thread is the process's only one; its hooked returns
            // are restored without it (they need no slot).
            if let Some(s) = self.slot(pid) {
                self.release(s);
            }
            self.stats.privileged_execs.fetch_add(1, Ordering::Relaxed);
            self.privileged_exec_pid.store(tgid, Ordering::Release);
            self.kick_work();
        }
    }

    /// In the work item: names in `error_log` the process that stopped being traced at a
    /// privileged exec, if any.
    fn log_privileged_exec(&self) {
        let pid = self.privileged_exec_pid.swap(0, Ordering::AcqRel);
        if pid != 0 {
            self.log(format_args!(
                "set_pid: process {} executed a program that gains privileges \
                 (set-user-ID, set-group-ID or file capabilities): no longer traced",
                pid
            ));
        }
    }

    /// In the work item: names in `error_log` where a single-step trap that no step of
    /// fctrace's accounted for was ended, if one was.
    fn log_unclaimed_step(&self) {
        let at = self.unclaimed_step.swap(0, Ordering::AcqRel);
        if at != 0 {
            let mut sym = crate::ksym::SymBuf::new().ok();
            let name = sym.as_mut().map_or("?", |s| s.name(at));
            self.log(format_args!(
                "trace: a single-step trap of a traced task at {} that no step of \
                 fctrace's accounts for: ended (single_steps_unclaimed)",
                name
            ));
        }
    }

    /// In the work item, with the mutex held: after a return the trace could not account
    /// for ([`Tracer::return_unexpected`]), tracing stops (every probe removed,
    /// `tracing_on` 0) and `error_log` says why. Whether there was such a return.
    fn stop_if_inconsistent(&self, inner: &mut TracerInner) -> bool {
        let to = self.unexpected_return.swap(0, Ordering::AcqRel);
        if to == 0 {
            return false;
        }
        if self.active.load(Ordering::Acquire) {
            // The line first: whoever sees `tracing_on` 0 finds the reason.
            self.log_unexpected_return(to, "tracing stopped (tracing_on 0)");
            inner.tracing_on = false;
            self.stats.stopped_on_error.fetch_add(1, Ordering::Relaxed);
            self.deactivate(inner);
            inner.shown_dirty = true;
        } else {
            self.log_unexpected_return(to, "tracing had stopped");
        }
        true
    }

    /// The `error_log` line of a return that came back to `to` where no return address
    /// was replaced; `what`: what became of tracing.
    fn log_unexpected_return(&self, to: u64, what: &str) {
        let mut sym = crate::ksym::SymBuf::new().ok();
        let name = sym.as_mut().map_or("?", |s| s.name(to));
        self.log(format_args!(
            "trace: a function returned to {} with its stack pointer where no return \
             address was replaced (a callee-pop `ret $n`, or a return address moved): \
             sent to its caller, {}",
            name, what
        ));
    }

    /// Module text [`start`, `end`) goes away (the module notifier, process context): if
    /// fctrace armed or marked anything there, its probes (kprobes has marked them gone),
    /// its ftrace filter entries and its table entries would outlive the code and meet
    /// whatever is loaded there next. Everything is armed again from scratch, as after a
    /// change of `start_function`; if the start function itself is going, tracing stops.
    ///
    /// From now on arming leaves the range alone (`going`), and nothing queued there is
    /// armed ahead. A pass of arming that may have read the range as live before (one
    /// holding the mutex or waiting for it) is waited for: what it armed there is then
    /// in the tables. One that takes the mutex after `lockers` was read here finds the
    /// range in `going` (the full barriers of both sides order them).
    pub(crate) fn module_text_gone(&self, start: u64, end: u64) {
        self.going.add(start, end);
        self.forget_text(start, end, true);
    }

    /// A module comes with text [`start`, `end`) (the module notifier, process context):
    /// text that went away there is live code again. Whatever the tables still hold for
    /// the old text there (a function refused while it was going) goes, as in
    /// [`Tracer::module_text_gone`].
    pub(crate) fn module_text_coming(&self, start: u64, end: u64) {
        self.going.coming(start, end);
        self.forget_text(start, end, false);
    }

    /// What [`Tracer::module_text_gone`] (`going`) and [`Tracer::module_text_coming`] do
    /// once `going` is up to date.
    fn forget_text(&self, start: u64, end: u64, going: bool) {
        let inside = |a: u64| (start..end).contains(&a);
        self.drop_queued_in(start, end);
        core::sync::atomic::fence(Ordering::SeqCst);
        let busy = self.lockers.load(Ordering::SeqCst) != 0;
        let armed = || {
            let mut armed = self.hooks.any_in(start, end);
            self.table.for_each(|_, f| armed |= inside(f));
            self.active.load(Ordering::Acquire) && armed
        };
        // Without the tracer's mutex first (both tables are read lock-free, the start
        // function from what reads show): a module that comes or goes waits for no arming
        // pass unless fctrace has something of it or one runs.
        let start_inside = going && self.shown.lock().start.is_some_and(inside);
        if !busy && !armed() && !start_inside {
            return;
        }
        let mut inner = self.lock();
        // The start function's address would soon hold other code: it goes, with tracing,
        // whether tracing is on now or not.
        let start_gone = going && inner.start.is_some_and(inside);
        let active = self.active.load(Ordering::Acquire);
        if !start_gone && !armed() {
            return;
        }
        if start_gone {
            self.log(format_args!(
                "start_function: its module was unloaded: start_function cleared, tracing \
                 stopped (tracing_on 0)"
            ));
            inner.start = None;
            inner.tracing_on = false;
            // Workers and kernel threads are traced from a start function only.
            self.settings.set_option(OptionName::Kworkers, false);
            for t in &self.traced {
                let tgid = t.load(Ordering::Relaxed);
                if tgid != 0 && sys::tgid_is_kthread(tgid) {
                    let _ = t.compare_exchange(tgid, 0, Ordering::AcqRel, Ordering::Relaxed);
                }
            }
        }
        if active {
            self.stats.module_text_gone.fetch_add(1, Ordering::Relaxed);
            self.deactivate(&mut inner);
            if start_gone {
                self.stats.stopped_on_error.fetch_add(1, Ordering::Relaxed);
            } else if let Err(e) = self.activate(&mut inner) {
                self.log(format_args!(
                    "trace: module text went away; arming again failed ({:?}): tracing \
                     stopped (tracing_on 0)",
                    e
                ));
                inner.tracing_on = false;
                self.stats.stopped_on_error.fetch_add(1, Ordering::Relaxed);
            }
        }
        inner.shown_dirty = true;
    }

    pub(crate) fn any_traced(&self) -> bool {
        self.traced.iter().any(|t| t.load(Ordering::Relaxed) != 0)
    }

    fn count(&self, r: Reason) {
        if let Some(c) = self.stats.reasons.get(r as usize) {
            c.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The number of armed functions when the mutex was last released: what `stats`
    /// shows, without waiting for an arming pass that holds the mutex.
    pub(crate) fn armed_functions_published(&self) -> u64 {
        self.stats.funcs_armed.load(Ordering::Relaxed)
    }
}

/// Owns the [`Tracer`] and publishes it to the C callbacks.
pub(crate) struct TracerHandle {
    /// The exit and exec tracepoints and the CPU-down callback, whose callbacks find the
    /// tracer through `TRACER`; dropped (unregistered) in `drop` after tracing stopped and
    /// every hooked return came back. Declared first, so that it would go before the
    /// tracer in any case.
    hooks: Option<sys::Hooks>,
    tracer: Pin<KBox<Tracer>>,
}

impl TracerHandle {
    pub(crate) fn new() -> Result<Self> {
        let (text, etext) = (
            crate::ksym::addr_of(kernel::c_str!("_stext")),
            crate::ksym::addr_of(kernel::c_str!("_etext")),
        );
        if text != 0 && etext > text {
            KERNEL_TEXT[0].store(text, Ordering::Relaxed);
            KERNEL_TEXT[1].store(etext, Ordering::Relaxed);
        }
        // Where a task whose return has nowhere to go dies (`sys::return_lost`): x86-64
        // rewinds its stack first, as after an oops; arm64's `die()` makes the task dead on
        // the stack it is on.
        let dead_end = if cfg!(target_arch = "x86_64") {
            kernel::c_str!("rewind_stack_and_make_dead")
        } else {
            kernel::c_str!("make_task_dead")
        };
        let dead_end = crate::ksym::addr_of(dead_end);
        sys::set_dead_end(dead_end);
        let table = table::FuncTable::new()?;
        let hooks = table::HookTable::new()?;
        let trees = tree::Trees::new()?;
        let returns = returns::Returns::new()?;
        let buf = Buffer::new(DEFAULT_BUFFER_KB * 1024)?;
        let reading = ReadState::new(Pending::new()?)?;
        let inner = sys::TracerMutex::new(TracerInner::new())?;
        let tracer = KBox::pin_init(
            pin_init!(Tracer {
                inner,
                errors <- new_mutex!(ErrorLog::new()),
                shown <- new_mutex!(Shown {
                    tracing_on: true,
                    start: None,
                    filter: KVec::new(),
                }),
                buf,
                reading <- new_mutex!(reading),
                settings: Settings::new(),
                traced: [const { AtomicU32::new(0) }; MAX_PIDS],
                traced_mask: AtomicU64::new(0),
                blockers_since: AtomicU64::new(0),
                privileged_exec_pid: AtomicU32::new(0),
                unclaimed_step: AtomicU64::new(0),
                unexpected_return: AtomicU64::new(0),
                active: AtomicBool::new(false),
                readers: AtomicUsize::new(0),
                generation: AtomicU32::new(1),
                root: AtomicU64::new(0),
                syscall_from: AtomicU64::new(0),
                table,
                hooks,
                trees,
                waits: wait::Waits::new(),
                preempt: preempt::Preempt::new(),
                ret_hooks: entry_probe::ReturnHooks::new(),
                returns,
                stats: Stats::default(),
                btf: BtfSlot::new(),
                lockers: AtomicU32::new(0),
                deferred: AtomicU32::new(0),
                going: crate::going::GoingText::new(),
            }),
            GFP_KERNEL,
        )?;
        TRACER.store(&*tracer as *const Tracer as *mut Tracer, Ordering::Release);
        // A task that exits leaves its hooked returns behind: the tracepoint drops them
        // before its stack is freed, for as long as the module is loaded.
        // SAFETY: the callbacks (`fctrace_task_exit()`, `fctrace_task_exec()`,
        // `fctrace_flush_this_cpu()`) find the tracer through `TRACER`, set above and
        // cleared only after the hooks are dropped (in `drop`, or right here on failure).
        let hooks = match unsafe { sys::Hooks::register() } {
            Ok(h) => h,
            Err(e) => {
                TRACER.store(core::ptr::null_mut(), Ordering::Release);
                return Err(e);
            }
        };
        Ok(TracerHandle {
            hooks: Some(hooks),
            tracer,
        })
    }
}

impl Drop for TracerHandle {
    fn drop(&mut self) {
        let tr: &Tracer = &self.tracer;
        tr.deactivate(&mut tr.lock());
        tr.wait_idle();
        // No task is in the trampoline, nor can one be sent there. arm64: those that left
        // it go past the resume probe before it goes (the module no longer held itself
        // for them: `unpin_when_returned`).
        #[cfg(target_arch = "aarch64")]
        {
            while !tr.waits.resumes.idle() {
                sys::msleep(10);
            }
            drop(tr.lock().resume.take());
        }
        tr.wait_returns();
        // Unregisters the hooks, waiting for running callbacks.
        drop(self.hooks.take());
        TRACER.store(core::ptr::null_mut(), Ordering::Release);
    }
}
