// SPDX-License-Identifier: GPL-2.0

//! Kernel symbols: names of addresses (`sprint_symbol()`) and addresses of names
//! (through kprobes, since `kallsyms_lookup_name()` is not exported).

use crate::kprobe::{self, Probe};
use crate::parse::{self, SymbolInfo};
use crate::sys;
use kernel::prelude::*;

pub(crate) use crate::sys::KSYM_SYMBOL_LEN;

/// A buffer for symbol lookups, allocated once and reused: `sprint_symbol()` needs
/// `KSYM_SYMBOL_LEN` bytes, too many for the stack of the paths that look symbols up.
pub(crate) struct SymBuf(KBox<[u8; KSYM_SYMBOL_LEN]>);

impl SymBuf {
    pub(crate) fn new() -> Result<Self> {
        Ok(SymBuf(KBox::new([0; KSYM_SYMBOL_LEN], GFP_KERNEL)?))
    }

    /// `sprint_symbol(addr)` parsed: name, offset, size, module.
    pub(crate) fn lookup(&mut self, addr: u64) -> Option<SymbolInfo<'_>> {
        let n = sys::sprint_symbol(&mut self.0, addr, true);
        let text = self.0.get(..n)?;
        parse::parse_sprint_symbol(core::str::from_utf8(text).ok()?)
    }

    /// The name of `addr` without offset (`vfs_read`, `foo [mod]`), or its address.
    pub(crate) fn name(&mut self, addr: u64) -> &str {
        let n = sys::sprint_symbol(&mut self.0, addr, false);
        core::str::from_utf8(&self.0[..n]).unwrap_or("?")
    }
}

/// Looks up a function by name through kprobes: `(start address, probeable)`;
/// `ENOENT` if there is no such symbol.
pub(crate) fn resolve(name: &CStr) -> Result<(u64, bool)> {
    let (addr, ok) = kprobe::lookup(name);
    if addr == 0 {
        return Err(ENOENT);
    }
    // The kernel moves a function-entry probe past `endbr64`; report the symbol start.
    let mut buf = SymBuf::new()?;
    let info = buf.lookup(addr).ok_or(ENOENT)?;
    Ok((addr - info.offset, ok))
}

/// The start address of `name`, 0 if there is none.
pub(crate) fn addr_of(name: &CStr) -> u64 {
    resolve(name).map_or(0, |(a, _)| a)
}

/// Whether a probe can be placed at `addr` (registers one, disabled, and removes it
/// again).
pub(crate) fn probeable(addr: u64) -> bool {
    let mut p = core::pin::pin!(Probe::at(addr, ()).disabled());
    p.as_mut().register().is_ok()
}
