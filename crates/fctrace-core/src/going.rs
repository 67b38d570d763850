// SPDX-License-Identifier: GPL-2.0

//! Module text that is going away: a module's text from the moment the module notifier
//! says it goes, its init text from the moment the module is live, until a module that
//! comes is loaded over it. Arming must not touch such code: its probes, ftrace filter
//! entries and function-table entries would outlive it and meet whatever is loaded there
//! next. The kernel's own test for it (`__module_text_address()` and the module's state)
//! is not exported to modules, so fctrace keeps the ranges from its module notifier.
//!
//! The notifiers of different modules may run at once (the chain is only read-locked),
//! so writers and readers are lock-free: a slot is freed only if it still holds what was
//! read ([`GoingText::coming`]), and a reader retries a slot changed under it. A few
//! ranges are kept, the oldest replaced first: by the time a range is replaced the
//! module it belonged to is long freed, and arming no longer races with its unload.

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// Ranges kept.
pub const GOING_RANGES: usize = 8;

/// The module text ranges going away.
pub struct GoingText {
    /// `[start, end)` each; `end` 0: a free slot.
    ranges: [[AtomicU64; 2]; GOING_RANGES],
    next: AtomicUsize,
}

impl Default for GoingText {
    fn default() -> Self {
        Self::new()
    }
}

impl GoingText {
    /// No range.
    pub const fn new() -> Self {
        GoingText {
            ranges: [const { [AtomicU64::new(0), AtomicU64::new(0)] }; GOING_RANGES],
            next: AtomicUsize::new(0),
        }
    }

    /// Text [`start`, `end`) goes away.
    pub fn add(&self, start: u64, end: u64) {
        if start >= end {
            return;
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed) % GOING_RANGES;
        let [s, e] = &self.ranges[i];
        // A reader may meet the slot half written: free first, then the new range.
        e.store(0, Ordering::SeqCst);
        s.store(start, Ordering::SeqCst);
        e.store(end, Ordering::SeqCst);
    }

    /// A module comes at [`start`, `end`): ranges there are live code again.
    pub fn coming(&self, start: u64, end: u64) {
        for [s, e] in &self.ranges {
            let (rs, re) = (s.load(Ordering::SeqCst), e.load(Ordering::SeqCst));
            if re != 0 && rs < end && start < re {
                // Not if another writer took the slot meanwhile.
                let _ = e.compare_exchange(re, 0, Ordering::SeqCst, Ordering::SeqCst);
            }
        }
    }

    /// Whether `addr` is in text going away.
    pub fn contains(&self, addr: u64) -> bool {
        self.ranges.iter().any(|[s, e]| {
            // A slot rewritten between the loads is read again (a writer frees it
            // first, so a stable `end` brackets a matching `start`); after a few tries it
            // counts as going: arming leaves that function for later.
            for _ in 0..4 {
                let end = e.load(Ordering::SeqCst);
                let start = s.load(Ordering::SeqCst);
                if e.load(Ordering::SeqCst) == end {
                    return end != 0 && (start..end).contains(&addr);
                }
            }
            true
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_going_range_holds_until_a_module_comes_over_it() {
        let g = GoingText::new();
        assert!(!g.contains(0xffff_ffff_c000_1000));
        g.add(0xffff_ffff_c000_0000, 0xffff_ffff_c000_4000);
        assert!(g.contains(0xffff_ffff_c000_0000));
        assert!(g.contains(0xffff_ffff_c000_3fff));
        assert!(!g.contains(0xffff_ffff_c000_4000));
        // A module elsewhere leaves it; one loaded over part of it ends it.
        g.coming(0xffff_ffff_c001_0000, 0xffff_ffff_c001_2000);
        assert!(g.contains(0xffff_ffff_c000_1000));
        g.coming(0xffff_ffff_c000_3000, 0xffff_ffff_c000_5000);
        assert!(!g.contains(0xffff_ffff_c000_1000));
        // An empty range is no range.
        g.add(5, 5);
        assert!(!g.contains(5));
    }

    #[test]
    fn the_oldest_range_goes_first() {
        let g = GoingText::new();
        for i in 0..GOING_RANGES as u64 + 1 {
            g.add(i * 0x1000, i * 0x1000 + 0x100);
        }
        assert!(!g.contains(0x10));
        for i in 1..GOING_RANGES as u64 + 1 {
            assert!(g.contains(i * 0x1000 + 0x10), "range {i}");
        }
    }
}
