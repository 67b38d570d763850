// SPDX-License-Identifier: GPL-2.0

//! The kernel's exception table: which functions have an instruction that may fault on
//! purpose (a user access, a `*_nofault` read), so a fixup address of theirs.
//!
//! kprobes optimizes no probe in such a function (`can_optimize()`: the fixup code may
//! jump into the bytes the detour's jump covers), so a probe there stays a breakpoint.
//! fctrace asks before it places a probe it wants optimized: a pre-site (`step.rs`) in
//! such a function would cost the traced task a breakpoint and single steps instead of
//! one breakpoint, and an entry probe (`entry_probe.rs`) on such a callee a breakpoint
//! for every task that calls it.
//!
//! `search_exception_tables()` is not exported; the table of the kernel image is read
//! instead, from its symbols `__start___ex_table` and `__stop___ex_table` (found through
//! kprobes like every symbol fctrace looks up): entries of three `int`s, `insn` relative
//! to itself first (Linux 6.12, x86-64). Module functions are never asked about: they
//! count as having an entry, as does every function when the table cannot be read.
//!
//! The static call sites of the image are read the same way (`__start_static_call_sites`
//! and `__stop_static_call_sites`: entries of two `int`s, the call's address relative to
//! itself first): `static_call_update()` rewrites those calls at run time, so a call
//! site fctrace watches from a pre-site must not be one (its target, taken from the code
//! when the function was armed, may change).

use super::read_kernel;
use crate::ksym::addr_of;
use kernel::alloc::KVVec;
use kernel::c_str;
use kernel::prelude::*;

/// The most entries read (the default test kernel has about 950, a distribution's some
/// thousands).
const MAX_ENTRIES: u64 = 1 << 16;
/// Bytes per entry: `struct exception_table_entry { int insn, fixup, data; }`.
const ENTRY: u64 = 12;
/// Bytes per entry: `struct static_call_site { s32 addr, key; }`.
const STATIC_CALL_ENTRY: u64 = 8;

/// The kernel image's text (`_stext..=_etext`) and the addresses of its instructions
/// with an exception table entry, sorted; `None` when they could not be read.
pub(crate) struct Extable(Option<(u64, u64, KVVec<u64>)>);

impl Extable {
    /// Not read yet: every function counts as having an entry.
    pub(crate) const fn unknown() -> Self {
        Extable(None)
    }

    /// Whether the table was read.
    pub(crate) fn is_known(&self) -> bool {
        self.0.is_some()
    }

    /// Reads the kernel image's table. Sleeps (symbol look-ups, allocation).
    pub(crate) fn load() -> Self {
        Self::load_table(
            addr_of(c_str!("__start___ex_table")),
            addr_of(c_str!("__stop___ex_table")),
            ENTRY,
        )
    }

    /// Reads the kernel image's static call sites (the same shape: an address relative to
    /// itself first in each entry). Sleeps.
    pub(crate) fn load_static_calls() -> Self {
        Self::load_table(
            addr_of(c_str!("__start_static_call_sites")),
            addr_of(c_str!("__stop_static_call_sites")),
            STATIC_CALL_ENTRY,
        )
    }

    fn load_table(start: u64, stop: u64, entry: u64) -> Self {
        let (text, etext) = (addr_of(c_str!("_stext")), addr_of(c_str!("_etext")));
        if text == 0 || etext <= text || start == 0 || stop <= start || (stop - start) % entry != 0
        {
            return Extable(None);
        }
        let n = (stop - start) / entry;
        if n > MAX_ENTRIES {
            return Extable(None);
        }
        let Ok(mut v) = KVVec::with_capacity(n as usize, GFP_KERNEL) else {
            return Extable(None);
        };
        for i in 0..n {
            let at = start + i * entry;
            let mut rel = [0u8; 4];
            if !read_kernel(at, &mut rel) {
                return Extable(None);
            }
            let insn = at.wrapping_add(i32::from_le_bytes(rel) as i64 as u64);
            // Capacity was reserved: this does not allocate.
            let _ = v.push(insn, GFP_KERNEL);
        }
        crate::sort::sort(&mut v);
        Extable(Some((text, etext, v)))
    }

    /// Whether the code in `start..end` has an instruction with an entry (or may have:
    /// the table is not known, or the code is not the kernel image's text).
    pub(crate) fn any_in(&self, start: u64, end: u64) -> bool {
        let Some((text, etext, v)) = &self.0 else {
            return true;
        };
        if start < *text || end > *etext {
            return true;
        }
        let i = v.partition_point(|&a| a < start);
        v.get(i).is_some_and(|&a| a < end)
    }
}
