// SPDX-License-Identifier: GPL-2.0

//! fctrace's own `ftrace_ops`: entry hooks on exactly the functions the traced tasks can
//! reach (see `engine/entry.rs` for what the callback does). The ops live in c/entry_ops.c
//! (their callback must be C: it runs for every task that calls a hooked function, and
//! decides with one check that another task's call is none of fctrace's business), up to
//! 16 of them with about 1024 functions each (an update of an ops' filter copies its whole
//! hash).

use crate::bindings;
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::alloc::KVec;
use kernel::prelude::*;

/// Notes the call sites in ftrace's own trampolines (`ftrace_call` in `ftrace_caller`,
/// `ftrace_regs_call` in `ftrace_regs_caller`), which ftrace patches when the ops it
/// calls change (one ops, or the list of them): a late int3 there follows a registration
/// or unregistration of ours. Their addresses are looked up once (`u64::MAX`: absent).
fn note_ftrace_callers() {
    static SITES: [AtomicU64; 2] = [const { AtomicU64::new(0) }; 2];
    for (slot, name) in SITES.iter().zip([
        kernel::c_str!("ftrace_call"),
        kernel::c_str!("ftrace_regs_call"),
    ]) {
        let mut a = slot.load(Ordering::Relaxed);
        if a == 0 {
            a = match crate::ksym::addr_of(name) {
                0 => u64::MAX,
                found => found,
            };
            slot.store(a, Ordering::Relaxed);
        }
        if a != u64::MAX {
            crate::trap_notifier::text_changed(a);
        }
    }
}

/// The set of hooked ftrace sites. An ops is registered once it has a filter (an ops
/// without one would hook every function); all are unregistered when the set is cleared
/// or dropped.
pub(crate) struct EntryHooks {
    ips: KVec<u64>,
}

impl EntryHooks {
    pub(crate) const fn new() -> Self {
        EntryHooks { ips: KVec::new() }
    }

    /// Hooks the ftrace sites `ips`, in one update of one ops' filter (one text update for
    /// all). Fails as a whole (`EINVAL` when one of them is not an ftrace site, `EBUSY`
    /// when another ops' exclusive use of one refuses it). Returns whether this
    /// registered an ops (the first batch of each `FCTRACE_ENTRY_SHARD` hooks, see
    /// `c/entry_ops.c`). Sleeps.
    pub(crate) fn add(&mut self, ips: &[u64]) -> Result<bool> {
        if ips.is_empty() {
            return Ok(false);
        }
        self.ips.reserve(ips.len(), GFP_KERNEL)?;
        let note = || {
            ips.iter()
                .for_each(|&ip| crate::trap_notifier::text_changed(ip));
            note_ftrace_callers();
        };
        note();
        // SAFETY: a C wrapper; `ips` is valid for `ips.len()` words (`u64` is `unsigned
        // long` on 64-bit kernels), only read.
        let r = unsafe { bindings::fctrace_entry_hooks_add(ips.as_ptr().cast(), ips.len() as u32) };
        note();
        if r < 0 {
            return Err(Error::from_errno(r));
        }
        // Capacity was reserved: this does not allocate.
        let _ = self.ips.extend_from_slice(ips, GFP_KERNEL);
        Ok(r > 0)
    }

    /// Unhooks everything; when it returns, no callback runs any more. Sleeps.
    pub(crate) fn clear(&mut self) {
        let note = |ips: &[u64]| {
            ips.iter()
                .for_each(|&ip| crate::trap_notifier::text_changed(ip));
            note_ftrace_callers();
        };
        note(&self.ips);
        // SAFETY: a C wrapper; process context, no spinlock held (our callers hold only
        // the tracer's mutex).
        unsafe { bindings::fctrace_entry_hooks_clear() };
        note(&self.ips);
        self.ips = KVec::new();
    }
}

impl Drop for EntryHooks {
    fn drop(&mut self) {
        if !self.ips.is_empty() {
            self.clear();
        }
    }
}
