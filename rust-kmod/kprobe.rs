// SPDX-License-Identifier: GPL-2.0

//! A typed wrapper over `struct kprobe`, in the style of `rust/kernel/miscdevice.rs`.
//!
//! A [`Probe<D>`] carries data of type `D` beside its kprobe; `D` implements [`Handler`],
//! and the one `extern "C"` pre-handler, generic over `D`, checks that the kprobe it is
//! called with belongs to a `Probe<D>` before it hands it to `D::pre`. Probes are
//! registered explicitly and unregistered when dropped, or many at once by a [`Batch`].
//! Callers need no `unsafe`.
//!
//! An [`optimizable`](Probe::optimizable) probe is registered behind a *blocker*: a second
//! kprobe at the same address, registered first, whose handlers do nothing but whose
//! post-handler keeps kprobes from optimizing the address (kprobes aggregates the two).
//! The probe works at once, as a breakpoint; kprobes' optimizer, which holds
//! `kprobe_mutex` across an RCU-tasks grace period and so stalls every registration
//! meanwhile, is not woken. Releasing the blockers later ([`Batch::add_blocker`]), all in
//! one unregistration, makes kprobes optimize every released address in one pass
//! (unregistering a post-handler makes it try again: `__unregister_kprobe_top()`).

use crate::bindings;
use core::any::TypeId;
use core::pin::Pin;
use core::sync::atomic::{AtomicBool, Ordering};
use kernel::alloc::{KVVec, KVec};
use kernel::error::{to_result, Result};
use kernel::ffi::c_int;
use kernel::prelude::*;
use kernel::types::Opaque;

/// What runs when a probe of this data type is hit.
pub(crate) trait Handler: Sized + 'static {
    /// Runs before the probed instruction, in the context that hit it: an int3 trap
    /// (interrupts off), or, with preemption off and interrupts as they were, the ftrace
    /// trampoline for a probe on an ftrace site or an optimized probe's detour. Returns
    /// non-zero when it changed `regs.ip` (kprobes then resumes there).
    fn pre(probe: &Probe<Self>, regs: &mut bindings::pt_regs) -> c_int;

    /// The handler does nothing for a task that `sys::probe_traced()` rules out: the
    /// kprobes callback asks that first, before anything else (every task that runs
    /// the probed code comes there), and such a pass is counted.
    const TRACED_ONLY: bool = false;
}

/// Probes registered only to check an address or find a symbol do nothing.
impl Handler for () {
    fn pre(_: &Probe<()>, _: &mut bindings::pt_regs) -> c_int {
        0
    }
}

/// The part of a [`Probe`] whose layout does not depend on `D`.
#[repr(C)]
struct Header {
    kp: Opaque<bindings::kprobe>,
    /// `TypeId::of::<D>()`: what the pre-handler checks before it casts.
    ty: TypeId,
    /// The probed instruction is a direct call longer than 5 bytes (GCC's `cs call`), which
    /// kprobes would emulate wrongly (see [`Probe::register`]).
    long_call: bool,
    /// The blocker of an optimizable probe (see the module documentation): registered
    /// before it, at the same address, while `Probe::blocked` is set.
    blocker: Opaque<bindings::kprobe>,
    /// The probe is optimizable and registers a blocker first.
    deferred: bool,
}

/// A kprobe with data of type `D` stored beside it.
///
/// # Invariants
///
/// While `registered` is true the kernel holds a pointer to `hdr.kp`; registration takes
/// a pinned probe, so a registered probe is never moved. `hdr.ty` is `TypeId::of::<D>()`.
/// `registered` is atomic because handlers on other CPUs may hold `&Probe` while it is
/// cleared (by a [`Batch`], before the unregistration itself).
#[repr(C)]
pub(crate) struct Probe<D> {
    hdr: Header,
    registered: AtomicBool,
    /// The blocker is registered.
    blocked: AtomicBool,
    /// What the handler needs to know about this probe.
    pub(crate) data: D,
}

// SAFETY: a probe is plain data plus a kprobe whose kernel-side links are only touched by
// kprobes under its own locks; owning it from another thread is fine.
unsafe impl<D: Send> Send for Probe<D> {}
// SAFETY: `&Probe` gives access to `data` (shared), `registered` (atomic), and reads of
// the kprobe's address (written by the kernel only inside `register_kprobe()`, which takes
// `Pin<&mut Probe>`) and flags (read with `read_volatile`, as the kernel may set
// `KPROBE_FLAG_DISABLED`/`GONE` at any time).
unsafe impl<D: Sync> Sync for Probe<D> {}

/// The pre-handler of every `Probe<D>`.
///
/// # Safety
///
/// Called only by kprobes, with a kprobe registered by [`Probe::register`] (so live) and
/// the probed context's registers.
unsafe extern "C" fn pre_handler<D: Handler>(
    p: *mut bindings::kprobe,
    regs: *mut bindings::pt_regs,
) -> c_int {
    if D::TRACED_ONLY && !crate::sys::probe_traced() {
        return 0;
    }
    // SAFETY: `Probe` and `Header` are `repr(C)` with the kprobe first (and `Opaque<T>`
    // has the layout of `T`), so `p` points to the header of a live `Probe<_>`.
    let hdr = unsafe { &*p.cast::<Header>() };
    if hdr.ty != TypeId::of::<D>() {
        return 0;
    }
    // SAFETY: the header says the probe is a `Probe<D>` (type invariant); it is live
    // while registered, which it is while its handler runs.
    let probe = unsafe { &*p.cast::<Probe<D>>() };
    // SAFETY: kprobes passes the probed context's registers, ours to read and change for
    // the duration of the call.
    let regs = unsafe { &mut *regs };
    D::pre(probe, regs)
}

/// Resumes a trapped context at `target` as if the trapped instruction had called it with
/// return address `ret`. For pre-handlers of breakpoint probes (not ftrace-based ones),
/// which then return non-zero. arm64: as a `BL`, with `ret` in the link register.
#[cfg(target_arch = "aarch64")]
pub(crate) fn emulate_call(regs: &mut bindings::pt_regs, ret: u64, target: u64) {
    use crate::sys::Regs;
    // A `BL`: the return address goes in the link register.
    crate::sys::set_lr(regs, ret);
    regs.set_pc(target);
}

/// x86-64: pushes `ret` below the interrupted stack pointer.
#[cfg(target_arch = "x86_64")]
pub(crate) fn emulate_call(regs: &mut bindings::pt_regs, ret: u64, target: u64) {
    use crate::sys::Regs;
    let new_sp = regs.sp() - 8;
    // SAFETY: `new_sp` is the word just below the interrupted stack pointer, in the gap
    // `asm_exc_int3` leaves below the interrupted stack for emulating a push
    // (`int3_emulate_push()`); the kernel stack of the trapped context is writable.
    unsafe { *(new_sp as *mut u64) = ret };
    regs.set_sp(new_sp);
    regs.set_pc(target);
}

/// Whether the instruction at `addr` is a direct call longer than a plain 5-byte
/// `call rel32`. Never on arm64, whose instructions are all 4 bytes.
#[cfg(not(target_arch = "x86_64"))]
fn long_call_at(_addr: u64) -> bool {
    false
}

/// Whether the instruction at `addr` is a direct call longer than a plain 5-byte
/// `call rel32`.
#[cfg(target_arch = "x86_64")]
fn long_call_at(addr: u64) -> bool {
    let mut code = [0u8; 16];
    // SAFETY: `copy_from_kernel_nofault` never faults; the destination is a local buffer.
    let r = unsafe {
        bindings::copy_from_kernel_nofault(
            code.as_mut_ptr().cast(),
            addr as *const kernel::ffi::c_void,
            code.len(),
        )
    };
    r == 0
        && crate::decode::decode(&code, addr)
            .is_ok_and(|i| i.len > 5 && matches!(i.flow, crate::decode::Flow::Call(_)))
}

/// The pre-handler of a blocker: nothing.
///
/// # Safety
///
/// Called only by kprobes.
unsafe extern "C" fn noop_pre(_p: *mut bindings::kprobe, _regs: *mut bindings::pt_regs) -> c_int {
    0
}

/// A post-handler that does nothing. Its presence keeps kprobes from optimizing the probe
/// into a jump, which would not let our pre-handler change `regs->ip`. (Probes that need
/// not change it are made [`Probe::optimizable`].)
///
/// # Safety
///
/// Called only by kprobes.
unsafe extern "C" fn noop_post(
    _p: *mut bindings::kprobe,
    _regs: *mut bindings::pt_regs,
    _flags: kernel::ffi::c_ulong,
) {
}

impl<D: Handler> Probe<D> {
    fn new(kp: bindings::kprobe, data: D) -> Self {
        let kp = bindings::kprobe {
            pre_handler: Some(pre_handler::<D>),
            post_handler: Some(noop_post),
            ..kp
        };
        Probe {
            hdr: Header {
                long_call: !kp.addr.is_null() && long_call_at(kp.addr as u64),
                kp: Opaque::new(kp),
                ty: TypeId::of::<D>(),
                blocker: Opaque::new(bindings::kprobe::default()),
                deferred: false,
            },
            registered: AtomicBool::new(false),
            blocked: AtomicBool::new(false),
            data,
        }
    }

    /// The same probe, registered disabled (`KPROBE_FLAG_DISABLED`): kprobes resolves and
    /// checks it, and never writes its breakpoint.
    pub(crate) fn disabled(self) -> Self {
        self.set_disabled_flag();
        self
    }

    /// Sets `KPROBE_FLAG_DISABLED` on a probe not registered yet.
    fn set_disabled_flag(&self) {
        if self.is_registered() {
            return;
        }
        // SAFETY: the kprobe is ours and not registered, so nothing else accesses it.
        unsafe { (*self.hdr.kp.get()).flags |= bindings::KPROBE_FLAG_DISABLED };
    }

    /// The same probe without a post-handler, so that kprobes may optimize it into a jump
    /// to a detour (no trap) where the instructions it covers allow: its pre-handler must
    /// then not change `regs->ip` (kprobes ignores it), only the other registers, which
    /// the detour restores. It is registered behind a blocker (see the module
    /// documentation): a breakpoint until the blocker is released.
    pub(crate) fn optimizable(mut self) -> Self {
        // SAFETY: the kprobe is ours and not registered yet (we own `self`), so nothing
        // else accesses it.
        unsafe { (*self.hdr.kp.get()).post_handler = None };
        self.hdr.deferred = true;
        self
    }

    /// Registers the blocker of an optimizable probe at `addr` (best effort: without it
    /// the probe is optimized right away).
    fn register_blocker(&self, addr: *mut bindings::kprobe_opcode_t) {
        let b = self.hdr.blocker.get();
        // SAFETY: the blocker is ours and not registered (the probe is not), so nothing
        // else accesses it; it is pinned with the probe, so it stays at this address
        // until it is unregistered (`Batch` or `drop`, in place).
        let r = unsafe {
            *b = bindings::kprobe {
                addr: addr.cast(),
                pre_handler: Some(noop_pre),
                post_handler: Some(noop_post),
                ..Default::default()
            };
            bindings::register_kprobe(b)
        };
        if r == 0 {
            self.blocked.store(true, Ordering::Release);
        }
    }

    /// Unregisters the blocker alone (the probe failed to register).
    fn drop_blocker(&self) {
        if self.blocked.swap(false, Ordering::AcqRel) {
            let mut one = [self.hdr.blocker.get()];
            crate::trap_notifier::text_changed(self.addr());
            // SAFETY: the blocker was registered (its flag was set until the swap).
            unsafe { bindings::unregister_kprobes(one.as_mut_ptr(), 1) };
            crate::trap_notifier::text_changed(self.addr());
        }
    }

    /// A probe at `addr` (not registered yet).
    pub(crate) fn at(addr: u64, data: D) -> Self {
        Self::new(
            bindings::kprobe {
                addr: addr as *mut _,
                ..Default::default()
            },
            data,
        )
    }

    /// A probe on the entry of the function named `symbol`.
    pub(crate) fn on_symbol(symbol: &'static CStr, data: D) -> Self {
        Self::on_name(symbol, data)
    }

    /// A probe on the entry of `symbol`, whose name kprobes reads only while registering:
    /// private to [`lookup`], which drops it before the name.
    fn on_name(symbol: &CStr, data: D) -> Self {
        Self::new(
            bindings::kprobe {
                symbol_name: symbol.as_char_ptr(),
                ..Default::default()
            },
            data,
        )
    }

    /// Registers the probe. May sleep. Pinned: the kernel keeps its address.
    pub(crate) fn register(self: Pin<&mut Self>) -> Result {
        if self.is_registered() {
            return Ok(());
        }
        let kp = self.hdr.kp.get();
        // A `cs call` (6 bytes): kprobes emulates a direct call with `int3_emulate_call()`,
        // which pushes the address 5 bytes after it (Linux 6.12), so the callee would
        // return into the call's last byte: whenever our pre-handler returns 0, and also
        // when kprobes skips the pre-handler (the probe hit inside another probe's
        // handler, e.g. an interrupt during an ftrace-based probe's handler). So the
        // probe is registered disabled, given a correct emulation, and only then enabled.
        let long_call = self.hdr.long_call;
        if long_call {
            self.set_disabled_flag();
        }
        // An address given (not a symbol): the blocker goes first.
        // SAFETY: reading our own kprobe, not registered yet.
        let addr = unsafe { (*kp).addr };
        if self.hdr.deferred && !addr.is_null() {
            self.register_blocker(addr);
        }
        // SAFETY: `kp` is a valid, initialised kprobe, pinned, so it stays at this address
        // until it is unregistered by a `Batch` or by `drop`, both of which run in place.
        if let Err(e) = to_result(unsafe { bindings::register_kprobe(kp) }) {
            self.drop_blocker();
            return Err(e);
        }
        self.registered.store(true, Ordering::Release);
        // (x86-64's: `long_call_at()`.)
        #[cfg(target_arch = "x86_64")]
        if long_call {
            // SAFETY: `kp` is registered (disabled, so not hit yet); the C helper only
            // replaces its emulation routine, then enables it.
            let r = unsafe { bindings::fctrace_kprobe_fix_long_call(kp) };
            if r != 0 {
                // Dropping or a batch unregisters it; refuse the site.
                crate::trap_notifier::text_changed(self.addr());
                // SAFETY: registered just above.
                unsafe { bindings::unregister_kprobes([kp].as_mut_ptr(), 1) };
                crate::trap_notifier::text_changed(self.addr());
                self.registered.store(false, Ordering::Release);
                return Err(Error::from_errno(r));
            }
        }
        Ok(())
    }
}

impl<D> Probe<D> {
    /// Whether the kernel has this probe.
    pub(crate) fn is_registered(&self) -> bool {
        self.registered.load(Ordering::Acquire)
    }

    /// The probed address (resolved by the kernel for symbol probes once registered, or
    /// even when registration failed after the name was found).
    pub(crate) fn addr(&self) -> u64 {
        // SAFETY: reading a field of our own kprobe; the kernel writes `addr` only inside
        // `register_kprobe()`, which runs with `&mut self`.
        unsafe { (*self.hdr.kp.get()).addr as u64 }
    }

    /// Whether the kernel placed this probe through ftrace rather than int3.
    pub(crate) fn is_ftrace_based(&self) -> bool {
        // SAFETY: the kprobe is ours and live; the kernel may change other bits of `flags`
        // at any time (disarming), so the word is read once, volatile, like READ_ONCE().
        let flags = unsafe { core::ptr::addr_of!((*self.hdr.kp.get()).flags).read_volatile() };
        flags & bindings::KPROBE_FLAG_FTRACE != 0
    }

    /// Whether the probe's blocker is still registered (it is a breakpoint because of it).
    pub(crate) fn is_blocked(&self) -> bool {
        self.blocked.load(Ordering::Acquire)
    }

    /// Whether kprobes has optimized this probe into a jump (it does so in the background,
    /// some jiffies after registration, where it can). kprobes marks the aggregate probe
    /// it made, not ours, so the text tells: the jump to the detour (`e9`) in place of the
    /// breakpoint (an optimizable probe never sits on a jump of its own).
    pub(crate) fn is_optimized(&self) -> bool {
        if !self.is_registered() || self.is_ftrace_based() {
            return false;
        }
        let mut b = [0u8; 1];
        // SAFETY: `copy_from_kernel_nofault` never faults; the destination is a local.
        let r = unsafe {
            bindings::copy_from_kernel_nofault(
                b.as_mut_ptr().cast(),
                self.addr() as *const kernel::ffi::c_void,
                1,
            )
        };
        r == 0 && b[0] == 0xe9
    }

    fn raw(&self) -> *mut bindings::kprobe {
        self.hdr.kp.get()
    }
}

/// Looks up the function `name` through kprobes (`kallsyms_lookup_name()` is not
/// exported): the address a probe on its entry gets (past `endbr64`; 0 if there is no
/// such symbol), and whether such a probe can be registered. The probe is registered
/// disabled, so no breakpoint is ever written: the name may be a return thunk that every
/// return of the kernel runs through, whose breakpoint would recurse in its own handler.
pub(crate) fn lookup(name: &CStr) -> (u64, bool) {
    let mut p = core::pin::pin!(Probe::on_name(name, ()).disabled());
    let ok = p.as_mut().register().is_ok();
    (p.addr(), ok)
    // `p` is unregistered here, in place, before `name` can go.
}

impl<D> Drop for Probe<D> {
    fn drop(&mut self) {
        if self.is_registered() {
            // The probe first, then its blocker: the address is never left optimizable.
            let mut two = [self.raw(), self.hdr.blocker.get()];
            let n = if self.blocked.swap(false, Ordering::AcqRel) {
                2
            } else {
                1
            };
            crate::trap_notifier::text_changed(self.addr());
            // SAFETY: the probe is registered (invariant), and so is the blocker when its
            // flag was set; unregistering them is valid.
            unsafe { bindings::unregister_kprobes(two.as_mut_ptr(), n) };
            crate::trap_notifier::text_changed(self.addr());
            self.registered.store(false, Ordering::Release);
        }
    }
}

/// Probes in one allocation that is never grown, so they are registered in place.
///
/// # Invariants
///
/// The vector is not grown, shrunk or reallocated after [`ProbeSet::new`]; its elements
/// are dropped in place with it. So each element is pinned.
pub(crate) struct ProbeSet<D>(KVec<Probe<D>>);

impl<D: Handler> ProbeSet<D> {
    /// Takes ownership of `probes` (none registered yet).
    pub(crate) fn new(probes: KVec<Probe<D>>) -> Self {
        ProbeSet(probes)
    }

    /// Registers every probe, in order. After each, `go_on(data, registered)` says
    /// whether to go on; when it says no, this returns `false`, leaving the rest
    /// unregistered.
    pub(crate) fn register_all(&mut self, mut go_on: impl FnMut(&D, bool) -> bool) -> bool {
        for p in self.0.iter_mut() {
            // SAFETY: the elements never move (type invariant).
            let mut p = unsafe { Pin::new_unchecked(p) };
            let ok = p.as_mut().register().is_ok();
            if !go_on(&p.data, ok) {
                return false;
            }
        }
        true
    }
}

impl<D> ProbeSet<D> {
    pub(crate) fn iter(&self) -> core::slice::Iter<'_, Probe<D>> {
        self.0.iter()
    }

    /// How many of the probes are registered.
    pub(crate) fn registered(&self) -> usize {
        self.0.iter().filter(|p| p.is_registered()).count()
    }
}

/// Probes being unregistered together: one `unregister_kprobes()` call, and so one RCU
/// grace period, for all of them, when the batch is dropped. After that no handler of
/// theirs runs any more.
///
/// # Invariants
///
/// Every pointer is a kprobe that was registered when added, listed once, and whose
/// probe's `registered` (or, for a blocker, `blocked`) flag this batch cleared; the probes outlive the batch (borrowed
/// for `'a`, so neither dropped nor registered again meanwhile).
pub(crate) struct Batch<'a> {
    list: KVVec<*mut bindings::kprobe>,
    _probes: core::marker::PhantomData<&'a mut ()>,
}

impl<'a> Batch<'a> {
    /// An empty batch.
    pub(crate) fn new() -> Self {
        Batch {
            list: KVVec::new(),
            _probes: core::marker::PhantomData,
        }
    }

    /// Adds `p` (if registered), and its blocker after it. From here on the batch owns
    /// the unregistration.
    pub(crate) fn add<D>(&mut self, p: &'a Probe<D>) {
        if !p.registered.swap(false, Ordering::AcqRel) {
            return;
        }
        if self.list.push(p.raw(), GFP_KERNEL).is_err() {
            // Out of memory for the list: unregister this one on its own.
            let mut one = [p.raw()];
            crate::trap_notifier::text_changed(p.addr());
            // SAFETY: `p` was registered (its flag was set until the swap above, which
            // only this batch won).
            unsafe { bindings::unregister_kprobes(one.as_mut_ptr(), 1) };
            crate::trap_notifier::text_changed(p.addr());
        }
        self.add_blocker(p);
    }

    /// Adds `p`'s blocker (if registered): once it is gone, kprobes optimizes `p`.
    pub(crate) fn add_blocker<D>(&mut self, p: &'a Probe<D>) {
        if !p.blocked.swap(false, Ordering::AcqRel) {
            return;
        }
        let b = p.hdr.blocker.get();
        if self.list.push(b, GFP_KERNEL).is_err() {
            let mut one = [b];
            crate::trap_notifier::text_changed(p.addr());
            // SAFETY: the blocker was registered (its flag was set until the swap above,
            // which only this batch won).
            unsafe { bindings::unregister_kprobes(one.as_mut_ptr(), 1) };
            crate::trap_notifier::text_changed(p.addr());
        }
    }

    /// Adds every registered probe of `set`.
    pub(crate) fn add_set<D>(&mut self, set: &'a ProbeSet<D>) {
        for p in set.iter() {
            self.add(p);
        }
    }
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        if self.list.is_empty() {
            return;
        }
        let note = |list: &KVVec<*mut bindings::kprobe>| {
            for &kp in list.iter() {
                // SAFETY: by the type invariant each pointer is a kprobe of ours, alive
                // (the batch borrows the probes); `addr` was set when it was registered
                // and is not written again.
                crate::trap_notifier::text_changed(unsafe { (*kp).addr } as u64);
            }
        };
        note(&self.list);
        // SAFETY: by the type invariant, each pointer is a registered kprobe of ours,
        // listed once, that nothing else unregisters, and still alive (the batch borrows
        // the probes).
        unsafe { bindings::unregister_kprobes(self.list.as_mut_ptr(), self.list.len() as c_int) };
        note(&self.list);
    }
}
