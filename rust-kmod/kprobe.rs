// SPDX-License-Identifier: GPL-2.0

//! A small safe wrapper over `struct kprobe`, in the style of `rust/kernel/miscdevice.rs`:
//! a [`Probe`] carries Rust data beside its kprobe, is registered explicitly, and is
//! unregistered when dropped (or, many at once, by [`unregister_all`]).

use crate::bindings;
use kernel::ffi::c_int;
use kernel::error::{to_result, Result};
use kernel::alloc::KVVec;
use kernel::prelude::*;
use kernel::types::Opaque;
use core::pin::Pin;

/// The C signature of a kprobe pre-handler.
pub(crate) type PreHandler =
    unsafe extern "C" fn(p: *mut bindings::kprobe, regs: *mut bindings::pt_regs) -> c_int;

/// A kprobe with data of type `D` stored beside it.
///
/// # Invariants
///
/// While `registered` is true the kernel holds a pointer to `kp`; registration takes a
/// pinned probe, so a registered probe is never moved (probes live pinned on the stack,
/// in a pinned box, or in a vector that is never grown once any of them is registered).
#[repr(C)]
pub(crate) struct Probe<D> {
    kp: Opaque<bindings::kprobe>,
    registered: bool,
    /// What the handler needs to know about this probe.
    pub(crate) data: D,
}

// SAFETY: a probe is plain data plus a kprobe whose kernel-side links are only touched by
// kprobes under its own locks; owning it from another thread is fine.
unsafe impl<D: Send> Send for Probe<D> {}

/// A pre-handler that does nothing, for probes registered only to check an address.
/// # Safety
///
/// Called only by the kernel, with pointers that are valid for the duration of the call.
pub(crate) unsafe extern "C" fn no_handler(
    _p: *mut bindings::kprobe,
    _regs: *mut bindings::pt_regs,
) -> c_int {
    0
}

/// A post-handler that does nothing. Its presence keeps kprobes from optimizing the probe
/// into a jump, which would not let our pre-handler change `regs->ip`.
/// # Safety
///
/// Called only by the kernel, with pointers that are valid for the duration of the call.
unsafe extern "C" fn noop_post(
    _p: *mut bindings::kprobe,
    _regs: *mut bindings::pt_regs,
    _flags: kernel::ffi::c_ulong,
) {
}

impl<D> Probe<D> {
    /// A probe at `addr` (not registered yet).
    pub(crate) fn at(addr: u64, pre: PreHandler, data: D) -> Self {
        let kp = bindings::kprobe {
            addr: addr as *mut _,
            pre_handler: Some(pre),
            post_handler: Some(noop_post),
            ..Default::default()
        };
        Probe { kp: Opaque::new(kp), registered: false, data }
    }

    /// A probe on the entry of the function named by `symbol` (a NUL-terminated name).
    pub(crate) fn on_symbol(symbol: &'static CStr, pre: PreHandler, data: D) -> Self {
        Self::on_symbol_raw(symbol, pre, data)
    }

    /// A probe on the entry of the function named by `symbol`, which the caller keeps
    /// alive: the probe only looks at the name while registering, and this constructor is
    /// for probes dropped before `symbol` is (see `control::resolve`).
    pub(crate) fn on_symbol_raw(symbol: &CStr, pre: PreHandler, data: D) -> Self {
        let kp = bindings::kprobe {
            symbol_name: symbol.as_char_ptr(),
            pre_handler: Some(pre),
            post_handler: Some(noop_post),
            ..Default::default()
        };
        Probe { kp: Opaque::new(kp), registered: false, data }
    }

    /// Registers the probe. May sleep. Pinned: the kernel keeps its address.
    pub(crate) fn register(self: Pin<&mut Self>) -> Result {
        // SAFETY: we do not move out of `self`; only fields are written.
        let this = unsafe { self.get_unchecked_mut() };
        if this.registered {
            return Ok(());
        }
        // SAFETY: `kp` is a valid, initialised kprobe, pinned, so it stays at this address
        // until it is unregistered by a `Batch` or by `drop`, both of which run in place.
        to_result(unsafe { bindings::register_kprobe(this.kp.get()) })?;
        this.registered = true;
        Ok(())
    }

    /// Whether the kernel has this probe.
    pub(crate) fn is_registered(&self) -> bool {
        self.registered
    }

    /// The probed address (resolved by the kernel for symbol probes once registered, or
    /// even when registration failed after the name was found).
    pub(crate) fn addr(&self) -> u64 {
        // SAFETY: reading a field of our own kprobe; the kernel writes `addr` only inside
        // `register_kprobe()`, which runs with `&mut self`.
        unsafe { (*self.kp.get()).addr as u64 }
    }

    /// Whether the kernel placed this probe through ftrace rather than int3.
    pub(crate) fn is_ftrace_based(p: *const bindings::kprobe) -> bool {
        // SAFETY: the caller passes the kprobe its handler was called with, which is live.
        let flags = unsafe { (*p).flags };
        // SAFETY: a trivial C accessor for a constant.
        u64::from(flags) & unsafe { bindings::fctrace_kprobe_flag_ftrace() } as u64 != 0
    }

    /// The probe that owns the kprobe a handler was called with.
    ///
    /// # Safety
    ///
    /// `p` must be the `kp` of a live `Probe<D>` (true for the handlers of this module,
    /// which are installed only on such probes).
    pub(crate) unsafe fn from_raw<'a>(p: *mut bindings::kprobe) -> &'a Probe<D> {
        // SAFETY: `Probe` is `repr(C)` with `kp` first, and `Opaque<T>` has the layout of
        // `T`, so the kprobe pointer is the probe's pointer; the caller guarantees it is live.
        unsafe { &*p.cast::<Probe<D>>() }
    }

    fn raw(&self) -> *mut bindings::kprobe {
        self.kp.get()
    }
}

impl<D> Drop for Probe<D> {
    fn drop(&mut self) {
        if self.registered {
            let mut one = [self.kp.get()];
            // SAFETY: the probe is registered (invariant), so unregistering it is valid.
            unsafe { bindings::unregister_kprobes(one.as_mut_ptr(), 1) };
            self.registered = false;
        }
    }
}

/// Probes being unregistered together: one `unregister_kprobes()` call, and so one RCU
/// grace period, for all of them, when the batch is dropped. After that no handler of
/// theirs runs any more.
pub(crate) struct Batch(KVVec<*mut bindings::kprobe>);

impl Batch {
    /// An empty batch.
    pub(crate) fn new() -> Self {
        Batch(KVVec::new())
    }

    /// Adds `p` (if registered). From here on the batch owns the unregistration.
    pub(crate) fn add<D>(&mut self, p: Pin<&mut Probe<D>>) {
        // SAFETY: only the `registered` flag is written; the probe is not moved.
        let p = unsafe { p.get_unchecked_mut() };
        if !p.registered {
            return;
        }
        if self.0.push(p.raw(), GFP_KERNEL).is_err() {
            // Out of memory for the list: unregister this one on its own.
            let mut one = [p.raw()];
            // SAFETY: `p` is registered (checked above).
            unsafe { bindings::unregister_kprobes(one.as_mut_ptr(), 1) };
        }
        p.registered = false;
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        if self.0.is_empty() {
            return;
        }
        // SAFETY: every pointer was a registered kprobe of ours when added, each listed
        // once, and none was unregistered since (its `registered` flag was cleared when it
        // was added here, so nothing else unregisters it). The probes outlive the batch:
        // callers drop the batch before the probes.
        unsafe { bindings::unregister_kprobes(self.0.as_mut_ptr(), self.0.len() as c_int) };
    }
}
