// SPDX-License-Identifier: GPL-2.0

//! Notifier chains fctrace joins: the die chain (the trap notifier) and the module chain
//! (module unloads, for the `args` option's module BTF).

use core::pin::Pin;
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::ffi::{c_int, c_ulong, c_void};
use kernel::prelude::*;
use kernel::types::Opaque;

use crate::bindings;

/// Module unloads seen so far (counted by [`ModuleWatch`]): a module's BTF read before
/// the last one may belong to a module of the same name that is gone.
static MODULES_GONE: AtomicU64 = AtomicU64::new(0);

/// How many modules have begun unloading since [`ModuleWatch`] was registered.
pub(crate) fn modules_gone() -> u64 {
    MODULES_GONE.load(Ordering::Acquire)
}

/// A kernel notifier chain fctrace joins.
#[derive(Clone, Copy)]
pub(crate) enum Chain {
    /// `register_die_notifier()`: traps (`int3`, debug) the kernel did not claim.
    Die,
    /// `register_module_notifier()`: modules coming and going.
    Module,
}

/// A notifier block, as a notifier callback receives it.
pub(crate) type NotifierBlock = bindings::notifier_block;
/// A notifier callback: the block, the event and its data; `NOTIFY_*`.
pub(crate) type NotifierFn =
    unsafe extern "C" fn(nb: *mut NotifierBlock, val: c_ulong, data: *mut c_void) -> c_int;

/// A callback registered on a notifier chain; unregistered on drop.
pub(crate) struct Notifier {
    nb: Pin<KBox<Opaque<NotifierBlock>>>,
    chain: Chain,
}

// SAFETY: the notifier only hands the block to the kernel, which serialises all access to
// it (the chain's own locking); Rust never touches it after `register`.
unsafe impl Send for Notifier {}
// SAFETY: as above, `&Notifier` gives no access to the block.
unsafe impl Sync for Notifier {}

impl Notifier {
    /// Registers `call` on `chain` with `priority` (higher runs earlier).
    ///
    /// # Safety
    ///
    /// `call` may be called, from the chain's context, from the moment this starts until
    /// the returned value is dropped.
    pub(crate) unsafe fn register(chain: Chain, call: NotifierFn, priority: c_int) -> Result<Self> {
        let nb = NotifierBlock {
            notifier_call: Some(call),
            priority,
            ..Default::default()
        };
        let nb = KBox::pin(Opaque::new(nb), GFP_KERNEL)?;
        // SAFETY: `nb` is pinned in a box that lives until `drop` unregisters it; the
        // caller guarantees `call` may run meanwhile.
        let r = unsafe {
            match chain {
                Chain::Die => bindings::register_die_notifier(nb.get()),
                Chain::Module => bindings::register_module_notifier(nb.get()),
            }
        };
        kernel::error::to_result(r)?;
        Ok(Notifier { nb, chain })
    }
}

impl Drop for Notifier {
    fn drop(&mut self) {
        // SAFETY: registered on this chain in `register`; unregistering waits for running
        // callbacks.
        unsafe {
            match self.chain {
                Chain::Die => bindings::unregister_die_notifier(self.nb.get()),
                Chain::Module => bindings::unregister_module_notifier(self.nb.get()),
            };
        }
    }
}

/// The arguments of a die notifier's event (`struct die_args`).
pub(crate) type DieArgs = bindings::die_args;
/// The die notifier's event of a single-step (debug) trap.
#[cfg(target_arch = "x86_64")]
pub(crate) const DIE_DEBUG: c_ulong = bindings::die_val_DIE_DEBUG as c_ulong;
/// The die notifier's event of a breakpoint (`int3`) trap.
#[cfg(target_arch = "x86_64")]
pub(crate) const DIE_INT3: c_ulong = bindings::die_val_DIE_INT3 as c_ulong;

/// A module notifier counting unloads (see [`modules_gone`]); unregistered on drop.
pub(crate) struct ModuleWatch {
    _notifier: Notifier,
}

impl ModuleWatch {
    pub(crate) fn new() -> Result<Self> {
        // SAFETY: `module_event` only counts, and lives as long as the module.
        let notifier = unsafe { Notifier::register(Chain::Module, module_event, 0) }?;
        Ok(ModuleWatch {
            _notifier: notifier,
        })
    }
}

/// The module notifier: counts modules going.
///
/// # Safety
///
/// Called only by the kernel's module notifier chain (it reads none of its pointers).
unsafe extern "C" fn module_event(
    _nb: *mut NotifierBlock,
    action: c_ulong,
    _data: *mut c_void,
) -> c_int {
    if action == bindings::module_state_MODULE_STATE_GOING as c_ulong {
        MODULES_GONE.fetch_add(1, Ordering::AcqRel);
    }
    0 // NOTIFY_DONE
}
