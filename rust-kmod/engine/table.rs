// SPDX-License-Identifier: GPL-2.0

//! The function table: what fctrace knows about each function it met (armed, hidden, or
//! a leaf with its reason), an open-addressing hash table keyed by address.
//!
//! Handlers read it without locks (atomic loads); it is written only by the arming path
//! and control-file writes, which hold the tracer's mutex: a single writer.

use super::clock_ns;
use crate::record::Reason;
use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use kernel::alloc::KVVec;
use kernel::prelude::*;

/// Functions fctrace can know about at once (armed or refused).
const TABLE_CAP: usize = 16384;

/// What the table says about a function.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum FuncState {
    /// Not met yet, or disarmed: its next call arms it.
    Unknown,
    /// Its probes are registered: calls to it open frames.
    Armed,
    /// Hidden by a `!pattern` filter: its calls and subtree are not shown.
    Hidden,
    /// Calls to it are shown as leaves, with this reason.
    Leaf(Reason),
}

impl FuncState {
    fn encode(self) -> u32 {
        match self {
            FuncState::Unknown => 0,
            FuncState::Armed => 1,
            FuncState::Hidden => 2,
            FuncState::Leaf(r) => 3 | (r as u32) << 8,
        }
    }

    fn decode(v: u32) -> Self {
        match v & 0xff {
            1 => FuncState::Armed,
            2 => FuncState::Hidden,
            3 => FuncState::Leaf(Reason::from_u8((v >> 8) as u8)),
            _ => FuncState::Unknown,
        }
    }
}

/// Bits 16-19 of `Entry::state`, beside the [`FuncState`]: of an armed function, how many
/// levels of its direct callees are known to be armed below it (`Tracer::arm_sync_closure`
/// walked them; [`BELOW_ALL`]: it calls nothing directly). A traced task that enters a
/// function with fewer than `MIN_BELOW` (`wait/`) where it may sleep waits there once,
/// for a closure below it.
const BELOW_SHIFT: u32 = 16;
const BELOW_MASK: u32 = 0xf << BELOW_SHIFT;
pub(crate) const BELOW_ALL: u8 = 15;

/// The index of a function's entry in the table.
pub(crate) type EntryId = u32;
/// `Frame::entry` of a frame whose function has no table entry.
pub(crate) use crate::shadow::NO_ENTRY;

struct Entry {
    key: AtomicU64,
    /// A [`FuncState`], encoded.
    state: AtomicU32,
    /// Frames of this function open now (in any task or interrupt tree).
    open: AtomicU32,
    /// When a traced task last entered it (or it was armed), on the [`IdleClock`].
    last: AtomicU64,
    /// The end of its code (armed functions; 0 otherwise).
    end: AtomicU64,
    /// Its `args` spec (`crate::args::spec`; 0: not known).
    args: AtomicU32,
    /// Where its cold part (GCC's `f.cold`) starts, and its size (0: none known).
    cold: AtomicU64,
    cold_len: AtomicU32,
}

pub(crate) struct FuncTable {
    entries: KVVec<Entry>,
    /// Entries in use (written under the tracer's mutex).
    used: AtomicUsize,
    /// The clock `last` is on.
    idle: IdleClock,
}

/// The clock lazy disarming measures idleness on: [`clock_ns`] less the time the work
/// item spent arming. A traced task waiting for its callees to be armed is not idle: on
/// a slow kernel (the debug one registers a probe in about 75 ms) one `execve()` can take
/// longer to arm than `disarm_after`, and on the wall clock the functions it entered
/// first were disarmed before its next `execve()`, which armed them again, and so on.
/// Only the work item calls [`IdleClock::begin`] and [`IdleClock::end`] (it does not run
/// twice at once).
pub(crate) struct IdleClock {
    /// Time of finished arming passes, ns.
    excluded: AtomicU64,
    /// When the arming pass under way began (0: none).
    since: AtomicU64,
}

impl IdleClock {
    const fn new() -> Self {
        IdleClock {
            excluded: AtomicU64::new(0),
            since: AtomicU64::new(0),
        }
    }

    /// An arming pass begins.
    pub(crate) fn begin(&self) {
        self.since.store(clock_ns().max(1), Ordering::Release);
    }

    /// The arming pass ends.
    pub(crate) fn end(&self) {
        let s = self.since.swap(0, Ordering::AcqRel);
        if s != 0 {
            self.excluded
                .fetch_add(clock_ns().saturating_sub(s), Ordering::AcqRel);
        }
    }

    /// The clock at `now` ([`clock_ns`]). `excluded` is read first: a pass ending between
    /// the two loads is then not subtracted at all (functions look more recent, never
    /// older than they are).
    pub(crate) fn at(&self, now: u64) -> u64 {
        let ex = self.excluded.load(Ordering::Acquire);
        let s = self.since.load(Ordering::Acquire);
        let running = if s != 0 { now.saturating_sub(s) } else { 0 };
        now.saturating_sub(ex).saturating_sub(running)
    }
}

impl FuncTable {
    pub(crate) fn new() -> Result<Self> {
        let mut entries = KVVec::with_capacity(TABLE_CAP, GFP_KERNEL)?;
        for _ in 0..TABLE_CAP {
            entries.push(
                Entry {
                    key: AtomicU64::new(0),
                    state: AtomicU32::new(0),
                    open: AtomicU32::new(0),
                    last: AtomicU64::new(0),
                    end: AtomicU64::new(0),
                    args: AtomicU32::new(0),
                    cold: AtomicU64::new(0),
                    cold_len: AtomicU32::new(0),
                },
                GFP_KERNEL,
            )?;
        }
        Ok(FuncTable {
            idle: IdleClock::new(),
            entries,
            used: AtomicUsize::new(0),
        })
    }

    /// The entry of `func`, if it has one.
    pub(crate) fn find(&self, func: u64) -> Option<EntryId> {
        let mut i = (func >> 4) as usize % TABLE_CAP;
        for _ in 0..TABLE_CAP {
            let k = self.entries[i].key.load(Ordering::Acquire);
            if k == func {
                return Some(i as EntryId);
            }
            if k == 0 {
                return None;
            }
            i = (i + 1) % TABLE_CAP;
        }
        None
    }

    /// The `args` spec of `func` (0: not known). Any context.
    pub(crate) fn args_of(&self, func: u64) -> u32 {
        self.find(func)
            .and_then(|i| self.entry(i))
            .map_or(0, |e| e.args.load(Ordering::Relaxed))
    }

    /// Sets the `args` spec of `id`.
    pub(crate) fn set_args(&self, id: EntryId, spec: u32) {
        if let Some(e) = self.entry(id) {
            e.args.store(spec, Ordering::Relaxed);
        }
    }

    /// The functions with an entry, and their ids, through `f`.
    pub(crate) fn for_each(&self, mut f: impl FnMut(EntryId, u64)) {
        for (i, e) in self.entries.iter().enumerate() {
            let k = e.key.load(Ordering::Acquire);
            if k != 0 {
                f(i as EntryId, k);
            }
        }
    }

    fn entry(&self, id: EntryId) -> Option<&Entry> {
        self.entries.get(id as usize)
    }

    pub(crate) fn lookup(&self, func: u64) -> FuncState {
        self.find(func)
            .map_or(FuncState::Unknown, |i| self.state_of(i))
    }

    pub(crate) fn state_of(&self, id: EntryId) -> FuncState {
        self.entry(id).map_or(FuncState::Unknown, |e| {
            FuncState::decode(e.state.load(Ordering::Acquire))
        })
    }

    /// How many levels below `func` are armed (see [`BELOW_ALL`]; 0 when not known).
    pub(crate) fn below(&self, func: u64) -> u8 {
        self.find(func).and_then(|i| self.entry(i)).map_or(0, |e| {
            ((e.state.load(Ordering::Acquire) & BELOW_MASK) >> BELOW_SHIFT) as u8
        })
    }

    /// Sets how many levels below `func` (armed) are armed: exactly (`raise` false: it
    /// was just armed), or at least (`raise`: a closure walked them). With the mutex held
    /// (single writer).
    pub(crate) fn set_below(&self, func: u64, levels: u8, raise: bool) {
        let Some(e) = self.find(func).and_then(|i| self.entry(i)) else {
            return;
        };
        let v = e.state.load(Ordering::Acquire);
        let old = ((v & BELOW_MASK) >> BELOW_SHIFT) as u8;
        let new = if raise { old.max(levels) } else { levels }.min(BELOW_ALL);
        e.state.store(
            (v & !BELOW_MASK) | u32::from(new) << BELOW_SHIFT,
            Ordering::Release,
        );
    }

    /// Sets the state of an existing entry. With the mutex held.
    pub(crate) fn set_state(&self, id: EntryId, s: FuncState) {
        if let Some(e) = self.entry(id) {
            e.state.store(s.encode(), Ordering::Release);
        }
    }

    /// Notes where the code of an armed function ends. With the mutex held.
    pub(crate) fn set_end(&self, id: EntryId, end: u64) {
        if let Some(e) = self.entry(id) {
            e.end.store(end, Ordering::Release);
        }
    }

    /// Notes an armed function's cold part, `len` bytes at `start`. With the mutex held.
    pub(crate) fn set_cold(&self, id: EntryId, start: u64, len: u32) {
        if let Some(e) = self.entry(id) {
            e.cold_len.store(0, Ordering::Release);
            e.cold.store(start, Ordering::Release);
            e.cold_len.store(len, Ordering::Release);
        }
    }

    /// Whether `addr` lies in the code of `func`, an armed function, or in its cold part
    /// (false if its end is not known).
    pub(crate) fn contains(&self, func: u64, addr: u64) -> bool {
        let Some(e) = self.find(func).and_then(|i| self.entry(i)) else {
            return false;
        };
        if addr >= func && addr < e.end.load(Ordering::Acquire) {
            return true;
        }
        let len = u64::from(e.cold_len.load(Ordering::Acquire));
        let cold = e.cold.load(Ordering::Acquire);
        len != 0 && addr >= cold && addr - cold < len
    }

    /// Records `func`'s state; its entry, or `None` if the table is full. With the mutex
    /// held (single writer).
    pub(crate) fn insert(&self, func: u64, s: FuncState) -> Option<EntryId> {
        let mut i = (func >> 4) as usize % TABLE_CAP;
        for _ in 0..TABLE_CAP {
            let e = &self.entries[i];
            let k = e.key.load(Ordering::Relaxed);
            if k == 0 || k == func {
                e.state.store(s.encode(), Ordering::Release);
                e.key.store(func, Ordering::Release);
                if k == 0 {
                    self.used.fetch_add(1, Ordering::Relaxed);
                }
                return Some(i as EntryId);
            }
            i = (i + 1) % TABLE_CAP;
        }
        None
    }

    /// Whether one more entry would make the table more than 3/4 full: kept below that,
    /// every function tried gets an entry (and is never armed twice).
    pub(crate) fn nearly_full(&self) -> bool {
        self.used.load(Ordering::Relaxed) + 1 >= TABLE_CAP * 3 / 4
    }

    /// A frame of `func` opens: counts it and notes the time (for lazy disarming).
    pub(crate) fn enter(&self, func: u64, now: u64) -> EntryId {
        let Some(i) = self.find(func) else {
            return NO_ENTRY;
        };
        let e = &self.entries[i as usize];
        e.open.fetch_add(1, Ordering::AcqRel);
        e.last.store(self.idle.at(now), Ordering::Relaxed);
        i
    }

    /// A frame opened by [`FuncTable::enter`] closes.
    pub(crate) fn leave(&self, id: EntryId) {
        if let Some(e) = self.entry(id) {
            // Never below zero (a table reset may have cleared the count meanwhile).
            let _ = e
                .open
                .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| n.checked_sub(1));
        }
    }

    /// Notes that `id` was entered (or armed) now.
    pub(crate) fn touch(&self, id: EntryId) {
        if let Some(e) = self.entry(id) {
            e.last.store(self.idle.at(clock_ns()), Ordering::Relaxed);
        }
    }

    /// Whether a frame of `id` is open in any tree.
    pub(crate) fn is_open(&self, id: EntryId) -> bool {
        self.entry(id)
            .is_some_and(|e| e.open.load(Ordering::Acquire) != 0)
    }

    /// The clock [`FuncTable::last_entered`] is on.
    pub(crate) fn idle_clock(&self) -> &IdleClock {
        &self.idle
    }

    /// When `id` was last entered, on [`FuncTable::idle_clock`].
    pub(crate) fn last_entered(&self, id: EntryId) -> u64 {
        self.entry(id).map_or(0, |e| e.last.load(Ordering::Relaxed))
    }

    /// Forgets everything (tracing stopped).
    pub(crate) fn clear(&self) {
        for e in self.entries.iter() {
            e.key.store(0, Ordering::Relaxed);
            e.state.store(0, Ordering::Relaxed);
            e.open.store(0, Ordering::Relaxed);
            e.last.store(0, Ordering::Relaxed);
            e.end.store(0, Ordering::Relaxed);
            e.args.store(0, Ordering::Relaxed);
            e.cold.store(0, Ordering::Relaxed);
            e.cold_len.store(0, Ordering::Relaxed);
        }
        self.used.store(0, Ordering::Relaxed);
    }
}

/// The most functions with a `HOOK_*` mark (hooked or not hookable) in one session.
const HOOK_CAP: usize = 32768;

/// The function has an entry hook (see `entry.rs`).
pub(crate) const HOOK_ENTRY: u32 = 1;
/// Some armed function tail-calls it.
pub(crate) const HOOK_TAIL: u32 = 2;
/// It cannot have one (no ftrace site, or ftrace refused it): its call sites are probed.
pub(crate) const HOOK_NONE: u32 = 4;
/// Its entry hook is an entry probe (a kprobe, see `entry_probe.rs`), not ftrace's: a
/// task can be sent to wait there only while kprobes has not optimized it.
pub(crate) const HOOK_PROBE: u32 = 8;
/// Its entry hook is in place (ftrace's filter updated, or the entry probe registered):
/// a call of it is seen at its entry from now on (`HOOK_ENTRY` is set before that).
pub(crate) const HOOK_LIVE: u32 = 16;

/// One function's mark.
struct Hook {
    /// The function's start (0: free).
    key: AtomicU64,
    /// `HOOK_*` bits.
    bits: AtomicU32,
    /// Where calls of it may point (see `arming::call_range`): its padding's start, or
    /// its start.
    pfx: AtomicU64,
}

/// The direct callees of armed functions and their entry hooks, apart from the function
/// table (which holds what fctrace armed, refused or hid: a callee is only a candidate).
/// Open addressing like [`FuncTable`]: one writer (the mutex holder), lock-free readers
/// (the entry hook's handler); emptied when tracing stops.
pub(crate) struct HookTable {
    entries: KVVec<Hook>,
    used: AtomicUsize,
}

impl HookTable {
    pub(crate) fn new() -> Result<Self> {
        let mut entries = KVVec::with_capacity(HOOK_CAP, GFP_KERNEL)?;
        for _ in 0..HOOK_CAP {
            entries.push(
                Hook {
                    key: AtomicU64::new(0),
                    bits: AtomicU32::new(0),
                    pfx: AtomicU64::new(0),
                },
                GFP_KERNEL,
            )?;
        }
        Ok(HookTable {
            entries,
            used: AtomicUsize::new(0),
        })
    }

    fn find(&self, func: u64) -> Option<&Hook> {
        let mut i = (func >> 4) as usize % HOOK_CAP;
        for _ in 0..HOOK_CAP {
            let e = &self.entries[i];
            let k = e.key.load(Ordering::Acquire);
            if k == func {
                return Some(e);
            }
            if k == 0 {
                return None;
            }
            i = (i + 1) % HOOK_CAP;
        }
        None
    }

    /// The `HOOK_*` bits of `func` (0 when it has none).
    pub(crate) fn bits(&self, func: u64) -> u32 {
        self.find(func)
            .map_or(0, |e| e.bits.load(Ordering::Acquire))
    }

    /// Adds `bits` to `func`'s mark, making one (false when the table is 3/4 full: then
    /// the callee keeps probes on its call sites). With `HOOK_ENTRY`, `pfx` is where calls
    /// of it may point (published before the bit). With the mutex held (single writer).
    pub(crate) fn add(&self, func: u64, bits: u32, pfx: u64) -> bool {
        let e = match self.find(func) {
            Some(e) => e,
            None => {
                if self.used.load(Ordering::Relaxed) + 1 >= HOOK_CAP * 3 / 4 {
                    return false;
                }
                let mut i = (func >> 4) as usize % HOOK_CAP;
                while self.entries[i].key.load(Ordering::Relaxed) != 0 {
                    i = (i + 1) % HOOK_CAP;
                }
                let e = &self.entries[i];
                e.bits.store(0, Ordering::Relaxed);
                e.key.store(func, Ordering::Release);
                self.used.fetch_add(1, Ordering::Relaxed);
                e
            }
        };
        if bits & HOOK_ENTRY != 0 {
            e.pfx.store(pfx, Ordering::Relaxed);
        }
        e.bits.fetch_or(bits, Ordering::AcqRel);
        true
    }

    /// Sets `func`'s bits to `bits` (it has a mark).
    pub(crate) fn set(&self, func: u64, bits: u32) {
        if let Some(e) = self.find(func) {
            e.bits.store(bits, Ordering::Release);
        }
    }

    /// The hooked function whose ftrace site is `ip` (after `endbr64` or at the start),
    /// with its `HOOK_*` bits and the start of its call range.
    pub(crate) fn hooked_at(&self, ip: u64) -> Option<(u64, u32, u64)> {
        [ip.wrapping_sub(4), ip].into_iter().find_map(|f| {
            let e = self.find(f)?;
            let b = e.bits.load(Ordering::Acquire);
            (b & HOOK_ENTRY != 0).then(|| (f, b, e.pfx.load(Ordering::Relaxed)))
        })
    }

    /// Whether a function in [`start`, `end`) has a mark.
    pub(crate) fn any_in(&self, start: u64, end: u64) -> bool {
        self.entries
            .iter()
            .any(|e| (start..end).contains(&e.key.load(Ordering::Acquire)))
    }

    /// Forgets every mark (tracing stopped: no hook is registered).
    pub(crate) fn clear(&self) {
        for e in self.entries.iter() {
            e.key.store(0, Ordering::Relaxed);
            e.bits.store(0, Ordering::Relaxed);
            e.pfx.store(0, Ordering::Relaxed);
        }
        self.used.store(0, Ordering::Relaxed);
    }
}
