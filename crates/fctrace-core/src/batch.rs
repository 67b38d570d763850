// SPDX-License-Identifier: GPL-2.0

//! Records travel through the ring buffer in batches.
//!
//! A handler stores its record in its CPU's staging area (a plain array, interrupts off);
//! a full area, or one a reader asks for, goes into the ring buffer as one event: a
//! header and up to [`BATCH_RECORDS`] records. One reservation, one commit and one clock
//! read of the ring buffer per batch instead of per record.
//!
//! The header carries the CPU's sequence number of the batch's first record (records
//! handed to the ring buffer on that CPU before it), so a reader counts exactly how many
//! records were overwritten between two batches it got, or before the oldest one still
//! in the buffer ([`Cursor`]). Readers merge the CPUs' records by their time stamps
//! ([`oldest`]), only up to a limit below which every record is known to be in the ring
//! buffer already (see `buffer.rs`).

use crate::record::{Record, RECORD_SIZE, RECORD_WORDS};

/// Records per batch: two batches fill a ring-buffer page of 4 KiB (4,080 bytes of
/// data, less an event header and a time extension each).
pub const BATCH_RECORDS: usize = 26;
/// Words of the header: the first record's sequence number; the count and the CPU.
pub const HEADER_WORDS: usize = 2;
/// Bytes of the header.
pub const HEADER_SIZE: usize = HEADER_WORDS * 8;
/// Words of a full batch.
pub const BATCH_WORDS: usize = HEADER_WORDS + BATCH_RECORDS * RECORD_WORDS;

const _: () = assert!(HEADER_SIZE + BATCH_RECORDS * RECORD_SIZE <= 2000);

/// The header of a batch of `n` records from `cpu`, the first of which is the CPU's
/// record number `seq`.
pub fn header(seq: u64, n: u32, cpu: u32) -> [u64; HEADER_WORDS] {
    [seq, u64::from(n) | u64::from(cpu) << 32]
}

/// The event size of a batch of `n` records.
pub fn batch_size(n: usize) -> usize {
    HEADER_SIZE + n * RECORD_SIZE
}

fn word(b: &[u8], i: usize) -> Option<u64> {
    let w = b.get(i * 8..i * 8 + 8)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(w);
    Some(u64::from_ne_bytes(a))
}

/// Where the next record of each CPU comes from: the batch being read, and the sequence
/// numbers that say what was lost before it.
pub struct Cursor {
    recs: [Record; BATCH_RECORDS],
    len: usize,
    pos: usize,
    /// Records lost just before the next one (a `LOST` line to print first).
    lost_before: u64,
    /// The sequence number the next batch should start with; `None`: take the first one
    /// as it comes.
    expected: Option<u64>,
    /// Records lost in all (gaps seen).
    lost: u64,
}

impl Cursor {
    /// A cursor expecting record `expected` next (`None`: whatever comes first).
    pub const fn new(expected: Option<u64>) -> Cursor {
        Cursor {
            recs: [Record::ZERO; BATCH_RECORDS],
            len: 0,
            pos: 0,
            lost_before: 0,
            expected,
            lost: 0,
        }
    }

    /// Forgets the batch being read and the losses; expects record `expected` next.
    pub fn reset(&mut self, expected: Option<u64>) {
        self.len = 0;
        self.pos = 0;
        self.lost_before = 0;
        self.expected = expected;
        self.lost = 0;
    }

    /// Records of the current batch not taken yet.
    pub fn pending(&self) -> usize {
        self.len - self.pos
    }

    /// Records lost (seen as gaps in the sequence numbers) since the last reset.
    pub fn lost(&self) -> u64 {
        self.lost
    }

    /// The sequence number the next batch should start with.
    pub fn expected(&self) -> Option<u64> {
        self.expected
    }

    /// Records lost before a batch whose first record is `seq`, if it came next.
    pub fn gap(&self, seq: u64) -> u64 {
        self.expected.map_or(0, |e| seq.saturating_sub(e))
    }

    /// Takes the bytes of a ring-buffer event as the next batch (the current one must be
    /// used up). False, and nothing changed, for bytes that are not a batch.
    pub fn load(&mut self, b: &[u8]) -> bool {
        let (Some(seq), Some(w1)) = (word(b, 0), word(b, 1)) else {
            return false;
        };
        let n = (w1 & 0xffff_ffff) as usize;
        if n > BATCH_RECORDS || b.len() < batch_size(n) {
            return false;
        }
        for (i, r) in self.recs.iter_mut().take(n).enumerate() {
            let at = HEADER_SIZE + i * RECORD_SIZE;
            match b.get(at..at + RECORD_SIZE).and_then(Record::from_bytes) {
                Some(rec) => *r = rec,
                None => return false,
            }
        }
        let gap = self.gap(seq);
        self.lost_before += gap;
        self.lost += gap;
        let next = seq + n as u64;
        self.expected = Some(self.expected.map_or(next, |e| e.max(next)));
        self.len = n;
        self.pos = 0;
        true
    }

    /// The next record's time stamp, if the batch has one left.
    pub fn head_ts(&self) -> Option<u64> {
        self.recs
            .get(self.pos)
            .filter(|_| self.pos < self.len)
            .map(|r| r.ts)
    }

    /// The next record, and how many records were lost just before it.
    pub fn take(&mut self) -> Option<(u64, Record)> {
        if self.pos >= self.len {
            return None;
        }
        let r = *self.recs.get(self.pos)?;
        self.pos += 1;
        let lost = core::mem::take(&mut self.lost_before);
        Some((lost, r))
    }
}

/// Of the cursors' next records, the index of the oldest one stamped before `limit`.
pub fn oldest<'a>(cursors: impl Iterator<Item = &'a Cursor>, limit: u64) -> Option<usize> {
    let mut best: Option<(usize, u64)> = None;
    for (i, c) in cursors.enumerate() {
        if let Some(ts) = c.head_ts().filter(|&ts| ts < limit) {
            if best.map_or(true, |(_, b)| ts < b) {
                best = Some((i, ts));
            }
        }
    }
    best.map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::vec::Vec;

    fn batch(seq: u64, cpu: u32, ts: &[u64]) -> Vec<u8> {
        let mut b = Vec::new();
        for w in header(seq, ts.len() as u32, cpu) {
            b.extend_from_slice(&w.to_ne_bytes());
        }
        for &t in ts {
            let mut r = Record::ZERO;
            r.ts = t;
            r.cpu = cpu;
            b.extend_from_slice(r.as_bytes());
        }
        b
    }

    #[test]
    fn two_batches_fit_a_page() {
        // 4,080 data bytes per 4 KiB page; each event has a 4-byte header, a length word
        // (it is over 112 bytes) and may have a 16-byte absolute time stamp before it.
        assert!(2 * (batch_size(BATCH_RECORDS) + 8 + 16) <= 4080);
        assert_eq!(BATCH_WORDS * 8, batch_size(BATCH_RECORDS));
    }

    #[test]
    fn gaps_in_sequence_numbers_are_lost_records() {
        let mut c = Cursor::new(Some(0));
        assert!(c.load(&batch(0, 1, &[5, 6])));
        assert_eq!(c.take().unwrap().0, 0);
        assert_eq!(c.take().unwrap().1.ts, 6);
        assert!(c.take().is_none());
        // Records 2..10 were overwritten.
        assert_eq!(c.gap(10), 8);
        assert!(c.load(&batch(10, 1, &[20])));
        let (lost, r) = c.take().unwrap();
        assert_eq!((lost, r.ts), (8, 20));
        assert_eq!(c.lost(), 8);
        assert_eq!(c.expected(), Some(11));
        // A batch from before a reset (older than expected) loses nothing.
        assert!(c.load(&batch(3, 1, &[21])));
        assert_eq!(c.take().unwrap().0, 0);
        assert_eq!(c.expected(), Some(11));
    }

    #[test]
    fn first_batch_without_expectation_loses_nothing() {
        let mut c = Cursor::new(None);
        assert!(c.load(&batch(100, 0, &[1])));
        assert_eq!(c.take().unwrap().0, 0);
        assert_eq!(c.expected(), Some(101));
        c.reset(Some(7));
        assert_eq!((c.pending(), c.lost(), c.expected()), (0, 0, Some(7)));
    }

    #[test]
    fn malformed_batches_are_refused() {
        let mut c = Cursor::new(Some(0));
        let b = batch(0, 0, &[1, 2, 3]);
        assert!(!c.load(&b[..b.len() - 1]));
        assert!(!c.load(&b[..8]));
        let mut big = b.clone();
        big[8..12].copy_from_slice(&(BATCH_RECORDS as u32 + 1).to_ne_bytes());
        assert!(!c.load(&big));
        assert_eq!(c.pending(), 0);
        assert_eq!(c.expected(), Some(0));
    }

    #[test]
    fn merge_takes_the_oldest_below_the_limit() {
        let mut a = Cursor::new(None);
        let mut b = Cursor::new(None);
        a.load(&batch(0, 0, &[10, 30]));
        b.load(&batch(0, 1, &[20, 40]));
        let mut cs = [a, b];
        let mut order = Vec::new();
        while let Some(i) = oldest(cs.iter(), 35) {
            order.push(cs[i].take().unwrap().1.ts);
        }
        // 40 waits: a record stamped before it may still be staged on another CPU.
        assert_eq!(order, [10, 20, 30]);
        assert_eq!(oldest(cs.iter(), 41), Some(1));
    }
}
