// SPDX-License-Identifier: GPL-2.0

//! Recovery from a *late* int3: one executed at an address whose breakpoint another CPU
//! has just removed (a probe being unregistered, or ftrace patching a call site).
//!
//! On hardware `text_poke_sync()` rules this out, but an emulator can still run a stale
//! copy of the patched code (seen under QEMU's multi-threaded TCG), and the kernel then
//! dies with "Oops: int3". When the byte under the trap is no longer `0xcc`, nobody owns
//! the breakpoint any more: run the restored instruction again, as kprobes used to do,
//! but only at an address where fctrace itself removed a breakpoint or patched an ftrace
//! site in the last two seconds ([`RecentText`]); any other int3 is the kernel's to report.
//!
//! The same die notifier hands single-step traps (`DIE_DEBUG`) to the engine: the trap
//! flag fctrace sets to step a traced task from a pre-site to its call site
//! (`engine/step.rs`).
//!
//! Both are x86-64's. arm64 patches its text under `stop_machine()` (kprobes) or with a
//! single aligned word (ftrace), so no stale breakpoint runs there, and fctrace does not
//! single-step on arm64: its [`Guard`] registers nothing.

use crate::recent::RecentText;
use crate::sys;
use core::sync::atomic::AtomicU64;
use kernel::prelude::*;
#[cfg(target_arch = "x86_64")]
use {
    crate::sys::Regs,
    core::sync::atomic::Ordering,
    kernel::ffi::{c_int, c_ulong, c_void},
};

#[cfg(target_arch = "x86_64")]
const INT3: u8 = 0xcc;
#[cfg(target_arch = "x86_64")]
const NOTIFY_DONE: c_int = 0;
#[cfg(target_arch = "x86_64")]
const NOTIFY_STOP: c_int = 0x8001; // NOTIFY_OK | NOTIFY_STOP_MASK

/// Late int3s recovered, for `stats`.
pub(crate) static RECOVERED: AtomicU64 = AtomicU64::new(0);

/// Where fctrace removed breakpoints or patched ftrace sites lately.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
static RECENT: RecentText = RecentText::new();

/// fctrace is about to remove, or removed, a breakpoint at `addr`, or patches the ftrace
/// site there: a late int3 may follow. Called before the change (a CPU may run a stale
/// copy while it is under way) and after it (the window starts again). Any context.
pub(crate) fn text_changed(addr: u64) {
    RECENT.note(addr, sys::clock_ns());
}

/// What the trap notifier asks of its user (the engine), which it knows nothing else of.
#[cfg(target_arch = "x86_64")]
pub(crate) trait TrapClient: 'static {
    /// A single-step trap (`DIE_DEBUG`) with the interrupted registers and the trap's
    /// copy of DR6: whether it was the client's (then the kernel ignores it).
    fn on_debug(regs: &mut sys::PtRegs, dr6: *mut c_ulong) -> bool;
    /// The same, for a trap that every other die notifier left alone (the last one in
    /// the chain): whether the client takes it.
    fn on_debug_last(regs: &mut sys::PtRegs, dr6: *mut c_ulong) -> bool;
}

/// Registered die notifiers that recover late int3s and hand single steps to `C`;
/// unregistered on drop.
#[cfg(target_arch = "x86_64")]
pub(crate) struct Guard {
    _notifier: sys::Notifier,
    _last: sys::Notifier,
}

/// arm64: nothing to recover, no single step (see above).
#[cfg(not(target_arch = "x86_64"))]
pub(crate) struct Guard;

#[cfg(not(target_arch = "x86_64"))]
impl Guard {
    pub(crate) fn new() -> Result<Self> {
        Ok(Guard)
    }
}

#[cfg(target_arch = "x86_64")]
impl Guard {
    pub(crate) fn new<C: TrapClient>() -> Result<Self> {
        // Run after kprobes', kgdb's and mmiotrace's own handlers had their chance
        // (priority -1).
        // SAFETY: `die_handler` may run in any trap from now on: it reads `die_args` as the
        // chain passes it, and the module outlives the guard.
        let notifier = unsafe { sys::Notifier::register(sys::Chain::Die, die_handler::<C>, -1) }?;
        // And after every other notifier, for the traps nobody else claimed.
        // SAFETY: as above, for `last_handler`.
        let last =
            unsafe { sys::Notifier::register(sys::Chain::Die, last_handler::<C>, c_int::MIN) }?;
        Ok(Guard {
            _notifier: notifier,
            _last: last,
        })
    }
}

#[cfg(target_arch = "x86_64")]
/// The last die notifier: a single step that no other notifier claimed.
///
/// # Safety
///
/// Called only by the kernel's die notifier chain, with `data` a `struct die_args`.
unsafe extern "C" fn last_handler<C: TrapClient>(
    _nb: *mut sys::NotifierBlock,
    val: c_ulong,
    data: *mut c_void,
) -> c_int {
    if data.is_null() || val != sys::DIE_DEBUG {
        return NOTIFY_DONE;
    }
    // SAFETY: by this function's contract, for DIE_DEBUG.
    unsafe { on_debug_args(data, C::on_debug_last) }
}

#[cfg(target_arch = "x86_64")]
/// Hands a DIE_DEBUG trap's registers and DR6 copy to `f`: `NOTIFY_STOP` if it took the
/// trap.
///
/// # Safety
///
/// `data` is a DIE_DEBUG trap's `struct die_args`, as the die notifier chain passes it.
unsafe fn on_debug_args(data: *mut c_void, f: fn(&mut sys::PtRegs, *mut c_ulong) -> bool) -> c_int {
    // SAFETY: for DIE_DEBUG `data` is the trap's `struct die_args` (the caller's
    // contract): `regs` are the interrupted registers, ours to change for the return from
    // the trap, and `err` points to the trap's copy of DR6.
    let (regs, dr6) = unsafe {
        let args = &*data.cast::<sys::DieArgs>();
        (args.regs.as_mut(), args.err as *mut c_ulong)
    };
    let ours = match regs {
        Some(regs) if !dr6.is_null() => f(regs, dr6),
        _ => false,
    };
    if ours {
        NOTIFY_STOP
    } else {
        NOTIFY_DONE
    }
}

#[cfg(target_arch = "x86_64")]
/// Decides what to do with an int3 nobody claimed: re-run the instruction at `addr` if
/// the breakpoint byte there is gone.
fn recover(regs: &mut sys::PtRegs) -> bool {
    // Kernel mode only: CS's privilege bits are zero.
    // SAFETY: reading a plain integer field of a union of integers.
    let cs = unsafe { regs.__bindgen_anon_1.cs } as u64;
    if cs & 3 != 0 {
        return false;
    }
    let addr = regs.pc().wrapping_sub(1);
    // Only where fctrace changed the text lately: otherwise the kernel reports the int3 as
    // it would without fctrace.
    if !RECENT.contains(addr, sys::clock_ns()) {
        return false;
    }
    let mut before = [INT3; 2];
    if !sys::read_kernel(addr.wrapping_sub(1), &mut before)
        || !crate::decode::late_int3_rewind(before)
    {
        return false;
    }
    regs.ip = addr as _;
    RECOVERED.fetch_add(1, Ordering::Relaxed);
    true
}

#[cfg(target_arch = "x86_64")]
/// # Safety
///
/// Called only by the kernel's die notifier chain, with `data` a `struct die_args`.
unsafe extern "C" fn die_handler<C: TrapClient>(
    _nb: *mut sys::NotifierBlock,
    val: c_ulong,
    data: *mut c_void,
) -> c_int {
    if data.is_null() {
        return NOTIFY_DONE;
    }
    if val == sys::DIE_DEBUG {
        // SAFETY: by this function's contract, for DIE_DEBUG.
        return unsafe { on_debug_args(data, C::on_debug) };
    }
    if val != sys::DIE_INT3 {
        return NOTIFY_DONE;
    }
    // SAFETY: for DIE_INT3 `data` is the trap's `struct die_args`, whose `regs` are the
    // interrupted registers, ours to change for the return from the trap.
    let regs = unsafe { (*data.cast::<sys::DieArgs>()).regs.as_mut() };
    match regs.map(recover) {
        Some(true) => NOTIFY_STOP,
        _ => NOTIFY_DONE,
    }
}
