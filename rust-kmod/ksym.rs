// SPDX-License-Identifier: GPL-2.0

//! Kernel symbols: names of addresses (`sprint_symbol()`) and addresses of names
//! (through kprobes, since `kallsyms_lookup_name()` is not exported).

use crate::kprobe::{self, Probe};
use crate::parse::{self, SymbolInfo};
use crate::sys;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
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
    let mut buf = SymBuf::new()?;
    if let Some(hit) = RESOLVED.get(name, &mut buf) {
        return Ok(hit);
    }
    let (addr, ok) = kprobe::lookup(name);
    if addr == 0 {
        return Err(ENOENT);
    }
    // The kernel moves a function-entry probe past `endbr64`; report the symbol start.
    let info = buf.lookup(addr).ok_or(ENOENT)?;
    let start = addr - info.offset;
    // (A probe refused now may be taken later: only what was taken is kept.)
    if info.module.is_none() && ok {
        RESOLVED.put(name, start);
    }
    Ok((start, ok))
}

/// Places in [`RESOLVED`].
const RESOLVED_PLACES: usize = 64;

/// Kernel image symbols [`resolve`] found. A lookup through kprobes registers and
/// unregisters a probe, an RCU grace period or more each, and each start of tracing looks
/// up about twenty names (tens of seconds under emulation while another CPU-bound guest
/// runs); an image symbol never moves. Only symbols a probe could be put on are kept
/// (a data symbol, `sys_call_table`, is looked up each time). A place holds a hash of
/// the name asked for and the address; a hit is checked against the name kallsyms gives
/// the address too, so a place is only ever a hint.
struct Resolved {
    places: [[AtomicU64; 2]; RESOLVED_PLACES],
    next: AtomicUsize,
}

static RESOLVED: Resolved = Resolved {
    places: [const { [AtomicU64::new(0), AtomicU64::new(0)] }; RESOLVED_PLACES],
    next: AtomicUsize::new(0),
};

/// FNV-1a of `name`'s bytes (0 is never a name's).
fn name_hash(name: &CStr) -> u64 {
    // (`to_str()`: the one way to its bytes on both kernel series.)
    let bytes = name.to_str().map(str::as_bytes).unwrap_or(&[]);
    let h = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    h.max(1)
}

impl Resolved {
    fn get(&self, name: &CStr, buf: &mut SymBuf) -> Option<(u64, bool)> {
        let want = name.to_str().ok()?;
        let hash = name_hash(name);
        self.places.iter().find_map(|[h, a]| {
            if h.load(Ordering::Acquire) != hash {
                return None;
            }
            let addr = a.load(Ordering::Acquire);
            let info = (addr != 0).then(|| buf.lookup(addr)).flatten()?;
            (info.name == want && info.offset == 0 && info.module.is_none()).then_some((addr, true))
        })
    }

    fn put(&self, name: &CStr, addr: u64) {
        let hash = name_hash(name);
        if self
            .places
            .iter()
            .any(|[h, a]| h.load(Ordering::Acquire) == hash && a.load(Ordering::Acquire) == addr)
        {
            return;
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed) % RESOLVED_PLACES;
        if let Some([h, a]) = self.places.get(i) {
            // A reader between the stores finds a hash with another address: checked
            // against kallsyms, it is a miss or the right one.
            h.store(0, Ordering::Release);
            a.store(addr, Ordering::Release);
            h.store(hash, Ordering::Release);
        }
    }
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
