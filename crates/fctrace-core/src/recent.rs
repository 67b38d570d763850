// SPDX-License-Identifier: GPL-2.0

//! The kernel text addresses fctrace changed lately: where it removed a breakpoint or
//! patched an ftrace site. A *late* int3 (one a CPU executes from a stale copy of code
//! another CPU just patched, seen under QEMU's multi-threaded TCG) is fctrace's to
//! recover only at such an address; any other unclaimed int3 is reported by the kernel as
//! it would be without fctrace.
//!
//! Two generations of a bit set, indexed by a hash of the address: [`RecentText::note`]
//! sets the address's bit in the current one, and starts a new generation (clearing the
//! older one) once the current one is [`RecentText::WINDOW_NS`] old, so an address noted
//! is remembered for at least that long, and at most twice as long.
//! [`RecentText::contains`] answers with no false negative within the window. Addresses
//! share bits: with n addresses noted in the window, about n in 2^18 other addresses are
//! taken as changed too (a tracing stop that removes thousands of probes widens it for two
//! seconds), which only lets an unrelated int3 at such an address be retried rather than
//! reported. Lock-free; no allocation; any context, NMI included.

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

const BITS_LOG2: u32 = 18;
const WORDS: usize = (1 << BITS_LOG2) / 64;

/// The addresses fctrace changed in the last [`RecentText::WINDOW_NS`] (or a little more).
pub struct RecentText {
    gens: [[AtomicU64; WORDS]; 2],
    /// The current generation (0 or 1).
    cur: AtomicUsize,
    /// When the current generation began; 0: nothing was ever noted.
    since: AtomicU64,
    /// When an address was last noted; 0: never.
    last: AtomicU64,
}

impl RecentText {
    /// How long an address noted is remembered, at least: 2 s, far longer than any CPU
    /// runs a stale copy of code.
    pub const WINDOW_NS: u64 = 2_000_000_000;

    /// Nothing noted.
    pub const fn new() -> Self {
        RecentText {
            gens: [const { [const { AtomicU64::new(0) }; WORDS] }; 2],
            cur: AtomicUsize::new(0),
            since: AtomicU64::new(0),
            last: AtomicU64::new(0),
        }
    }

    fn bit(addr: u64) -> (usize, u64) {
        let h = (addr.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> (64 - BITS_LOG2)) as usize;
        (h / 64, 1 << (h % 64))
    }

    /// The text at `addr` changed at time `now` (ns, any monotonic clock).
    pub fn note(&self, addr: u64, now: u64) {
        let now = now.max(1);
        let since = self.since.load(Ordering::Acquire);
        if since == 0 {
            let _ = self
                .since
                .compare_exchange(0, now, Ordering::AcqRel, Ordering::Relaxed);
        } else if now.saturating_sub(since) >= Self::WINDOW_NS
            && self
                .since
                .compare_exchange(since, now, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            // This caller starts the new generation: the older one (noted before
            // `since`, at least a window ago) is cleared and becomes the current one.
            let next = 1 - self.cur.load(Ordering::Acquire).min(1);
            if let Some(g) = self.gens.get(next) {
                for w in g.iter() {
                    w.store(0, Ordering::Relaxed);
                }
            }
            self.cur.store(next, Ordering::Release);
        }
        let (w, m) = Self::bit(addr);
        if let Some(word) = self
            .gens
            .get(self.cur.load(Ordering::Acquire).min(1))
            .and_then(|g| g.get(w))
        {
            word.fetch_or(m, Ordering::AcqRel);
        }
        self.last.store(now, Ordering::Release);
    }

    /// Whether the text at `addr` may have changed within the window before `now`.
    pub fn contains(&self, addr: u64, now: u64) -> bool {
        let last = self.last.load(Ordering::Acquire);
        if last == 0 || now.saturating_sub(last) >= Self::WINDOW_NS {
            return false;
        }
        let (w, m) = Self::bit(addr);
        self.gens
            .iter()
            .any(|g| g.get(w).is_some_and(|x| x.load(Ordering::Acquire) & m != 0))
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::boxed::Box;

    const S: u64 = 1_000_000_000;

    fn fresh() -> Box<RecentText> {
        Box::new(RecentText::new())
    }

    #[test]
    fn nothing_noted_contains_nothing() {
        let r = fresh();
        assert!(!r.contains(0xffff_ffff_8100_0000, 5 * S));
    }

    #[test]
    fn a_noted_address_is_remembered_for_the_window() {
        let r = fresh();
        let a = 0xffff_ffff_8123_4567;
        r.note(a, 10 * S);
        assert!(r.contains(a, 10 * S));
        assert!(r.contains(a, 10 * S + RecentText::WINDOW_NS - 1));
        // Past the window with nothing noted since: nothing is taken as changed.
        assert!(!r.contains(a, 10 * S + RecentText::WINDOW_NS));
    }

    #[test]
    fn other_addresses_are_not_taken_for_changed() {
        let r = fresh();
        r.note(0xffff_ffff_8123_4567, S);
        // Neighbours of a probed instruction, and other functions' sites.
        for a in [
            0xffff_ffff_8123_4566u64,
            0xffff_ffff_8123_4568,
            0xffff_ffff_8123_4570,
            0xffff_ffff_8155_0000,
            0xffff_ffff_c08e_0007,
        ] {
            assert!(!r.contains(a, S), "{a:#x}");
        }
    }

    #[test]
    fn a_new_generation_keeps_the_last_windows_addresses() {
        let r = fresh();
        let (old, mid, new) = (
            0xffff_ffff_8100_1000u64,
            0xffff_ffff_8100_2000,
            0xffff_ffff_8100_3000,
        );
        r.note(old, S);
        // A window later: a new generation starts; `old` is still there (in the older
        // generation) while notes go on.
        r.note(mid, S + RecentText::WINDOW_NS);
        assert!(r.contains(old, S + RecentText::WINDOW_NS));
        assert!(r.contains(mid, S + RecentText::WINDOW_NS));
        // Another window on: the generation that held `old` is cleared.
        r.note(new, S + 2 * RecentText::WINDOW_NS);
        assert!(!r.contains(old, S + 2 * RecentText::WINDOW_NS));
        assert!(r.contains(mid, S + 2 * RecentText::WINDOW_NS));
        assert!(r.contains(new, S + 2 * RecentText::WINDOW_NS));
    }

    #[test]
    fn many_addresses_noted_at_once_are_all_remembered() {
        // A tracing stop removes every probe in one batch (max_probes: up to 1000000).
        let r = fresh();
        let base = 0xffff_ffff_8100_0000u64;
        for i in 0..60_000u64 {
            r.note(base + i * 37, S);
        }
        assert!((0..60_000u64).all(|i| r.contains(base + i * 37, S + 1)));
    }
}
