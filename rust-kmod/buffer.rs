// SPDX-License-Identifier: GPL-2.0

//! The kernel's own ring buffer (`kernel/trace/ring_buffer.c`): per CPU, lockless
//! writers, safe from any context including NMI, in overwrite mode like ftrace's.
//!
//! Records go in batches (`crates/fctrace-core/src/batch.rs`): a handler stores its record
//! in its CPU's staging area, with interrupts off; a full area becomes one ring-buffer
//! event. A reader merges the CPUs' records by time stamp up to a limit below which no
//! record can still be staged (the oldest staged record, or now), and has the CPUs flush
//! their areas (an IPI to those that have records staged) only when that limit holds
//! everything back: a task that made a few calls and went to sleep.

use crate::args::ArgArea;
use crate::batch::{self, Cursor, BATCH_RECORDS};
use crate::bindings;
use crate::record::{Kind, Record, RECORD_WORDS};
use crate::sys::{self, clock_ns as now, nr_cpu_ids as cpus, this_cpu};
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use kernel::alloc::KVVec;
use kernel::ffi::{c_int, c_void};
use kernel::prelude::*;

/// `RING_BUFFER_ALL_CPUS`.
const ALL_CPUS: c_int = -1;

/// How long a reader lets young staged records wait for more before it has them
/// flushed (ms): at most this many IPIs per second and reader, and the latency of a
/// trickle of records.
const STAGE_WAIT_MS: u64 = 10;

const STAGE_WORDS: usize = BATCH_RECORDS * RECORD_WORDS;

/// One CPU's staging area.
///
/// # Invariants
///
/// `words` and the counters other than through atomics are only written on this CPU
/// with interrupts off, by the one who set `busy` (a writer, or the flush IPI).
struct Stage {
    busy: AtomicBool,
    /// Records staged.
    n: AtomicU32,
    /// Records of this CPU the ring buffer took (the next batch's sequence number).
    seq: AtomicU64,
    /// Records the ring buffer refused (full, recording off).
    failed: AtomicU64,
    /// Time stamp of the first record staged.
    first_ts: AtomicU64,
    words: UnsafeCell<[u64; STAGE_WORDS]>,
}

impl Stage {
    fn new() -> Self {
        Stage {
            busy: AtomicBool::new(false),
            n: AtomicU32::new(0),
            seq: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            first_ts: AtomicU64::new(0),
            words: UnsafeCell::new([0; STAGE_WORDS]),
        }
    }
}

/// What a reader keeps beside its cursors (the `args` option's pending argument
/// records), forgotten when the buffer is reset.
pub(crate) trait ReaderExtra {
    fn clear(&mut self);
}

/// The reading state shared by `trace_pipe` readers: per CPU, the batch being read and
/// what was lost, and the readers' `P` (under the tracer's `reading` mutex).
pub(crate) struct ReadState<P> {
    cursors: KVec<Cursor>,
    /// Kept for the readers (argument records waiting for their calls' records).
    pub(crate) pending: P,
    /// CPUs whose ring buffer was found empty in this round.
    dry: KVec<bool>,
}

impl<P> ReadState<P> {
    pub(crate) fn new(pending: P) -> Result<Self> {
        let n = cpus() as usize;
        let mut cursors = KVec::with_capacity(n, GFP_KERNEL)?;
        let mut dry = KVec::with_capacity(n, GFP_KERNEL)?;
        for _ in 0..n {
            cursors.push(Cursor::new(Some(0)), GFP_KERNEL)?;
            dry.push(false, GFP_KERNEL)?;
        }
        Ok(ReadState {
            cursors,
            dry,
            pending,
        })
    }

    fn pending(&self) -> usize {
        self.cursors.iter().map(|c| c.pending()).sum()
    }
}

/// A record read from the buffer.
pub(crate) struct Event {
    pub(crate) rec: Record,
    pub(crate) cpu: u32,
    /// Records of this CPU lost just before this one.
    pub(crate) lost: u64,
    /// An argument record's area (its slots follow it in the same batch), a late one's
    /// too.
    pub(crate) area: Option<ArgArea>,
}

/// The event for record `rec` taken from `c`: an argument record takes its slots too.
fn event(rec: Record, cpu: u32, lost: u64, c: &mut Cursor) -> Event {
    let area = (rec.kind == Kind::Args as u8 || rec.kind == Kind::LateArgs as u8).then(|| {
        let mut slots = [Record::ZERO; crate::args::AREA_SLOTS];
        let mut n = 0;
        for s in slots.iter_mut().take(usize::from(rec.reason)) {
            match c.take() {
                Some((_, r)) => {
                    *s = r;
                    n += 1;
                }
                None => break,
            }
        }
        ArgArea::from_slots(slots.get(..n).unwrap_or(&[]))
    });
    Event {
        rec,
        cpu,
        lost,
        area,
    }
}

/// A `struct trace_buffer` and the CPUs' staging areas; freed on drop.
pub(crate) struct Buffer {
    rb: *mut bindings::trace_buffer,
    stages: KVVec<Stage>,
    /// Records `trace_pipe` readers took from the ring buffer and have not shown yet.
    pending: AtomicUsize,
}

// SAFETY: the ring buffer API is safe to call concurrently from any CPU and context; a
// stage is only written on its own CPU (see `Stage`), and read elsewhere by atomics.
unsafe impl Send for Buffer {}
// SAFETY: as above.
unsafe impl Sync for Buffer {}

/// The sequence number of a batch event's first record.
///
/// # Safety
///
/// `ev` is an event of ours that the ring buffer just returned.
unsafe fn event_seq(ev: *mut bindings::ring_buffer_event) -> Option<u64> {
    // SAFETY: by the caller's contract; every event of ours starts with the header.
    let bytes = unsafe { event_bytes(ev) };
    let w = bytes.get(..8)?;
    let mut a = [0u8; 8];
    a.copy_from_slice(w);
    Some(u64::from_ne_bytes(a))
}

/// The data of an event.
///
/// # Safety
///
/// `ev` is a live event the ring buffer just returned; the slice is used before the next
/// read on its CPU.
unsafe fn event_bytes<'a>(ev: *mut bindings::ring_buffer_event) -> &'a [u8] {
    // SAFETY: by the caller's contract.
    unsafe {
        let len = bindings::ring_buffer_event_length(ev) as usize;
        let data = bindings::ring_buffer_event_data(ev) as *const u8;
        core::slice::from_raw_parts(data, len)
    }
}

/// IPI callback: flushes the staging area of the CPU it runs on.
///
/// # Safety
///
/// `info` is a live `Buffer`; called with interrupts off (an IPI, or
/// `on_each_cpu_cond()`'s local call).
unsafe extern "C" fn flush_here(info: *mut c_void) {
    // SAFETY: by the caller's contract.
    let buf = unsafe { &*info.cast::<Buffer>() };
    buf.flush_local();
}

/// IPI condition: whether `cpu` has records staged.
///
/// # Safety
///
/// `info` is a live `Buffer`.
unsafe extern "C" fn has_staged(cpu: c_int, info: *mut c_void) -> bool {
    // SAFETY: by the caller's contract.
    let buf = unsafe { &*info.cast::<Buffer>() };
    buf.stages
        .get(cpu as usize)
        .is_some_and(|st| st.n.load(Ordering::Acquire) != 0)
}

/// Wait condition of readers: records to read.
///
/// # Safety
///
/// `arg` is a live `Buffer`.
unsafe extern "C" fn ready(arg: *mut c_void) -> bool {
    // SAFETY: by the caller's contract.
    let buf = unsafe { &*arg.cast::<Buffer>() };
    buf.has_records()
}

impl Buffer {
    pub(crate) fn new(bytes_per_cpu: u64) -> Result<Self> {
        let n = cpus() as usize;
        let mut stages = KVVec::with_capacity(n, GFP_KERNEL)?;
        for _ in 0..n {
            stages.push(Stage::new(), GFP_KERNEL)?;
        }
        // SAFETY: trivial C wrapper of `ring_buffer_alloc()`.
        let rb = unsafe { bindings::fctrace_rb_alloc(bytes_per_cpu as _) };
        if rb.is_null() {
            return Err(ENOMEM);
        }
        Ok(Buffer {
            rb,
            stages,
            pending: AtomicUsize::new(0),
        })
    }

    fn arg(&self) -> *mut c_void {
        (self as *const Buffer).cast_mut().cast()
    }

    /// Stages a record on this CPU (a full staging area goes into the ring buffer), with
    /// its `cpu` set to it. Safe from any context; interrupts are off meanwhile.
    pub(crate) fn write(&self, r: &mut Record) {
        self.write_with(r, &[]);
    }

    /// Stages record `r` followed by the slots `more` (an argument record's area), all in
    /// one batch.
    pub(crate) fn write_with(&self, r: &mut Record, more: &[Record]) {
        let irqs_off = sys::IrqsOff::new();
        let cpu = this_cpu();
        r.cpu = cpu;
        let count = 1 + more.len();
        if let Some(st) = self.stages.get(cpu as usize) {
            if st.busy.load(Ordering::Relaxed) || count > BATCH_RECORDS {
                // Only a breakpoint inside this very function could nest here.
                st.failed.fetch_add(count as u64, Ordering::Relaxed);
            } else {
                st.busy.store(true, Ordering::Relaxed);
                if st.n.load(Ordering::Relaxed) as usize + count > BATCH_RECORDS {
                    // The slots go in the same batch as their record.
                    self.flush_stage(st, cpu);
                }
                let n = st.n.load(Ordering::Relaxed) as usize;
                // SAFETY: `busy` is ours, on this CPU with interrupts off (the `Stage`
                // invariant): nobody else touches the words.
                let area = unsafe { &mut *st.words.get() };
                let recs = Iterator::chain(core::iter::once(&*r), more.iter());
                for (k, rec) in recs.enumerate() {
                    let words: [u64; RECORD_WORDS] = rec.words();
                    let at = (n + k) * RECORD_WORDS;
                    if let Some(dst) = area.get_mut(at..at + RECORD_WORDS) {
                        for (d, w) in dst.iter_mut().zip(words.iter()) {
                            // (Read volatile: LLVM would merge the copy into a `memcpy()`
                            // call.)
                            // SAFETY: `w` is a valid reference.
                            *d = unsafe { core::ptr::read_volatile(w) };
                        }
                    }
                }
                if n == 0 {
                    st.first_ts.store(r.ts, Ordering::Relaxed);
                }
                st.n.store((n + count) as u32, Ordering::Release);
                if n + count == BATCH_RECORDS {
                    self.flush_stage(st, cpu);
                } else if n == 0 {
                    sys::wake_readers();
                }
                st.busy.store(false, Ordering::Relaxed);
            }
        }
        drop(irqs_off);
    }

    /// Writes `st`'s records into the ring buffer as one event. On `cpu`, with interrupts
    /// off and `st.busy` held.
    fn flush_stage(&self, st: &Stage, cpu: u32) {
        let n = st.n.load(Ordering::Relaxed) as usize;
        if n == 0 {
            return;
        }
        let seq = st.seq.load(Ordering::Relaxed);
        // SAFETY: `rb` is live; reserving is allowed in any context.
        let ev = unsafe { bindings::ring_buffer_lock_reserve(self.rb, batch::batch_size(n) as _) };
        if ev.is_null() {
            st.failed.fetch_add(n as u64, Ordering::Relaxed);
        } else {
            // SAFETY: `busy` is held on this CPU (the `Stage` invariant).
            let area = unsafe { &*st.words.get() };
            let hdr = batch::header(seq, n as u32, cpu);
            // SAFETY: `ev` was just reserved on this CPU with `batch_size(n)` bytes of
            // data (aligned to 4 only, hence unaligned stores), and is committed next, as
            // every successful reserve must be.
            unsafe {
                let data = bindings::ring_buffer_event_data(ev).cast::<u64>();
                for (i, w) in hdr.iter().enumerate() {
                    core::ptr::write_unaligned(data.add(i), *w);
                }
                core::ptr::copy_nonoverlapping(
                    area.as_ptr().cast::<u8>(),
                    data.add(hdr.len()).cast::<u8>(),
                    n * RECORD_WORDS * 8,
                );
                bindings::ring_buffer_unlock_commit(self.rb);
            }
            st.seq.store(seq + n as u64, Ordering::Relaxed);
        }
        st.n.store(0, Ordering::Release);
    }

    /// Writes this CPU's staged records into the ring buffer. With interrupts off.
    pub(crate) fn flush_local(&self) {
        let cpu = this_cpu();
        if let Some(st) = self.stages.get(cpu as usize) {
            // A writer this interrupted (it cannot: writers keep interrupts off) keeps it.
            if !st.busy.load(Ordering::Relaxed) {
                st.busy.store(true, Ordering::Relaxed);
                self.flush_stage(st, cpu);
                st.busy.store(false, Ordering::Relaxed);
            }
        }
    }

    /// Has every CPU with records staged write them into the ring buffer; waits for it.
    /// Process context.
    pub(crate) fn flush_all(&self) {
        // SAFETY: the callbacks take `self`, which lives for the call.
        unsafe { sys::flush_cpus(has_staged, flush_here, self.arg()) };
    }

    fn staged(&self) -> usize {
        self.stages
            .iter()
            .map(|st| st.n.load(Ordering::Acquire) as usize)
            .sum()
    }

    /// Records in the ring buffer, staged, or taken by a reader and not shown yet.
    fn has_records(&self) -> bool {
        // SAFETY: `rb` is live.
        !unsafe { bindings::ring_buffer_empty(self.rb) }
            || self.staged() != 0
            || self.pending.load(Ordering::Relaxed) != 0
    }

    /// The time below which every record is in the ring buffer: now, or the oldest staged
    /// record's stamp. (A record stamped just before an IPI flush and staged after it
    /// can come later: only ever before its own task's next record.)
    fn limit(&self) -> u64 {
        let t = now();
        self.stages
            .iter()
            .filter(|st| st.n.load(Ordering::Acquire) != 0)
            .map(|st| st.first_ts.load(Ordering::Relaxed))
            .fold(t, u64::min)
    }

    pub(crate) fn resize(&self, bytes_per_cpu: u64) -> Result {
        self.flush_all();
        // SAFETY: `rb` is live; resizing may sleep, callers are in process context.
        kernel::error::to_result(unsafe {
            bindings::ring_buffer_resize(self.rb, bytes_per_cpu as _, ALL_CPUS)
        })
    }

    /// Empties the buffer: staged records, the ring buffer, what readers hold.
    pub(crate) fn reset<P: ReaderExtra>(&self, rs: &mut ReadState<P>) {
        self.flush_all();
        // SAFETY: `rb` is live; process context.
        unsafe { bindings::ring_buffer_reset(self.rb) };
        for (st, c) in self.stages.iter().zip(rs.cursors.iter_mut()) {
            c.reset(Some(st.seq.load(Ordering::Relaxed)));
        }
        self.pending.store(0, Ordering::Relaxed);
        rs.pending.clear();
    }

    /// The oldest batch's sequence number on `cpu`, without consuming it.
    fn oldest_seq(&self, cpu: u32) -> Option<u64> {
        let (mut ts, mut lost) = (0u64, 0 as _);
        // SAFETY: `rb` is live; peeking takes the per-CPU reader lock internally.
        let ev = unsafe { bindings::ring_buffer_peek(self.rb, cpu as c_int, &mut ts, &mut lost) };
        if ev.is_null() {
            return None;
        }
        // SAFETY: `ev` was just returned; we read its header now.
        unsafe { event_seq(ev) }
    }

    /// Counters for `stats` (after a flush, so that nothing is left staged): records
    /// written, lost (overwritten, or refused by the ring buffer), and still to be read.
    pub(crate) fn counts<P>(&self, rs: &ReadState<P>) -> (u64, u64, u64) {
        self.flush_all();
        let (mut written, mut lost, mut left) = (0, 0, 0);
        for (cpu, (st, c)) in self.stages.iter().zip(rs.cursors.iter()).enumerate() {
            let seq = st.seq.load(Ordering::Relaxed);
            written += seq;
            lost += st.failed.load(Ordering::Relaxed) + c.lost();
            if let Some(oldest) = self.oldest_seq(cpu as u32) {
                lost += c.gap(oldest);
                left += seq.saturating_sub(oldest.max(c.expected().unwrap_or(0)));
            }
            left += c.pending() as u64;
            left += u64::from(st.n.load(Ordering::Relaxed));
        }
        (written, lost, left)
    }

    /// Per CPU, records lost since the last reset (for the head of `trace`).
    pub(crate) fn lost_per_cpu<P>(&self, rs: &ReadState<P>, out: &mut KVec<u64>) -> Result {
        for (cpu, c) in rs.cursors.iter().enumerate() {
            let gap = self.oldest_seq(cpu as u32).map_or(0, |s| c.gap(s));
            out.push(c.lost() + gap, GFP_KERNEL)?;
        }
        Ok(())
    }

    /// Number of possible CPUs (the buffer has one sub-buffer each).
    pub(crate) fn cpus(&self) -> u32 {
        cpus()
    }

    /// How full `cpu`'s sub-buffer is with unread events, in per mille.
    pub(crate) fn fill_permille(&self, cpu: u32) -> u64 {
        // SAFETY: `rb` is live; `cpu` is checked by the ring buffer.
        let bytes = unsafe { bindings::ring_buffer_bytes_cpu(self.rb, cpu as c_int) } as u64;
        bytes * 1000 / self.size_per_cpu().max(1)
    }

    /// The fullest sub-buffer's [`Buffer::fill_permille`].
    pub(crate) fn max_fill_permille(&self) -> u64 {
        (0..self.cpus())
            .map(|c| self.fill_permille(c))
            .max()
            .unwrap_or(0)
    }

    pub(crate) fn size_per_cpu(&self) -> u64 {
        // SAFETY: `rb` is live; CPU 0 always exists.
        unsafe { bindings::ring_buffer_size(self.rb, 0) as u64 }
    }

    /// Loads `cpu`'s next batch from the ring buffer into `c` (consuming it); false if
    /// there is none.
    fn consume_into(&self, cpu: u32, c: &mut Cursor) -> bool {
        // Bounded: a batch that does not parse (never written by us) is skipped.
        for _ in 0..8 {
            let (mut ts, mut lost) = (0u64, 0 as _);
            // SAFETY: `rb` is live; consuming takes the per-CPU reader lock, so
            // concurrent readers never get the same event.
            let ev =
                unsafe { bindings::ring_buffer_consume(self.rb, cpu as c_int, &mut ts, &mut lost) };
            if ev.is_null() {
                return false;
            }
            // SAFETY: `ev` was just returned; `load` copies its records out now.
            if c.load(unsafe { event_bytes(ev) }) {
                return true;
            }
        }
        false
    }

    /// The next record for `trace_pipe`, oldest first over all CPUs, stamped before
    /// `limit`.
    fn next_pipe<P>(&self, rs: &mut ReadState<P>, limit: u64) -> Option<Event> {
        for (cpu, (c, dry)) in rs.cursors.iter_mut().zip(rs.dry.iter_mut()).enumerate() {
            if c.pending() == 0 && !*dry && !self.consume_into(cpu as u32, c) {
                *dry = true;
            }
        }
        let i = batch::oldest(rs.cursors.iter(), limit)?;
        let c = rs.cursors.get_mut(i)?;
        let (lost, rec) = c.take()?;
        Some(event(rec, i as u32, lost, c))
    }

    /// Consumes records, oldest first, passing each to `f` until it returns false or none
    /// is left. Staged records are flushed when they hold everything back, after giving
    /// them up to [`STAGE_WAIT_MS`] to fill up. Process context; sleeps.
    pub(crate) fn consume<P>(
        &self,
        rs: &mut ReadState<P>,
        mut f: impl FnMut(&Event) -> bool,
    ) -> Result {
        let mut limit = self.limit();
        let mut flushed = false;
        let mut any = false;
        rs.dry.iter_mut().for_each(|d| *d = false);
        loop {
            if let Some(ev) = self.next_pipe(rs, limit) {
                any = true;
                if !f(&ev) {
                    break;
                }
                continue;
            }
            if any || flushed || self.staged() == 0 {
                break;
            }
            // Nothing to show but staged records hold the limit back: a task that
            // stopped making calls. Let young ones fill up a little, then flush them.
            let oldest = limit;
            let age_ms = now().saturating_sub(oldest) / 1_000_000;
            if age_ms < STAGE_WAIT_MS {
                sys::reader_nap((STAGE_WAIT_MS - age_ms) as u32)?;
            }
            self.flush_all();
            limit = self.limit();
            flushed = true;
            rs.dry.iter_mut().for_each(|d| *d = false);
        }
        self.pending.store(rs.pending(), Ordering::Relaxed);
        Ok(())
    }

    /// Sleeps until there are records or a signal; `Err(EINTR)`/`ERESTARTSYS` on signal.
    pub(crate) fn wait(&self) -> Result {
        // SAFETY: `ready` takes `self`, which lives for the call.
        unsafe { sys::wait_ready(ready, self.arg()) }
    }

    /// For `poll()`: registers on the wait queue and says whether there are records.
    pub(crate) fn poll_wait(&self, file: *mut sys::File, pt: *mut sys::PollTable) -> u32 {
        // SAFETY: `file` and `pt` come from the VFS poll call; `ready` takes `self`.
        unsafe { sys::poll_ready(file, pt, ready, self.arg()) }
    }

    /// A non-consuming iterator per CPU, for `trace`: the records written up to now (staged
    /// ones flushed first). Writers go on meanwhile (their new records are not part of it);
    /// resizing waits for the iterators to finish.
    pub(crate) fn snapshot(&self) -> Result<Snapshot<'_>> {
        self.flush_all();
        let limit = self.limit();
        let mut iters = KVec::new();
        for cpu in 0..cpus() {
            // SAFETY: `rb` is live; process context (may sleep).
            let it = unsafe {
                bindings::ring_buffer_read_start(
                    self.rb,
                    cpu as c_int,
                    kernel::bindings::GFP_KERNEL,
                )
            };
            if !it.is_null() {
                if let Err(e) = iters.push((cpu, it, Cursor::new(None)), GFP_KERNEL) {
                    // SAFETY: `it` was just started and is not in `iters`.
                    unsafe { bindings::ring_buffer_read_finish(it) };
                    return Err(e.into());
                }
            }
        }
        Ok(Snapshot {
            _buf: self,
            iters,
            limit,
        })
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        sys::wake_sync();
        // SAFETY: no writer or reader is left: probes are unregistered and files closed
        // before the state that owns the buffer is dropped.
        unsafe { bindings::ring_buffer_free(self.rb) };
    }
}

/// Iterators over every CPU's records, oldest first, up to the time it was made (so that
/// reading a buffer that is being filled faster than it is read still ends).
pub(crate) struct Snapshot<'a> {
    _buf: &'a Buffer,
    iters: KVec<(u32, *mut bindings::ring_buffer_iter, Cursor)>,
    limit: u64,
}

impl Snapshot<'_> {
    /// The next record, moving past it.
    pub(crate) fn next(&mut self) -> Option<Event> {
        for (_, it, c) in self.iters.iter_mut() {
            // Bounded: a batch that does not parse (never written by us) is skipped.
            for _ in 0..8 {
                if c.pending() != 0 {
                    break;
                }
                let mut ts = 0u64;
                // SAFETY: `it` is a live iterator of ours.
                let ev = unsafe { bindings::ring_buffer_iter_peek(*it, &mut ts) };
                if ev.is_null() {
                    break;
                }
                // SAFETY: `ev` was just returned; `load` copies its records out now.
                let ok = c.load(unsafe { event_bytes(ev) });
                // SAFETY: `it` is live and has an event (peeked above).
                unsafe { bindings::ring_buffer_iter_advance(*it) };
                if ok {
                    break;
                }
            }
        }
        let i = batch::oldest(self.iters.iter().map(|(_, _, c)| c), self.limit)?;
        let (cpu, _, c) = self.iters.get_mut(i)?;
        let (lost, rec) = c.take()?;
        Some(event(rec, *cpu, lost, c))
    }
}

impl Drop for Snapshot<'_> {
    fn drop(&mut self) {
        for &(_, it, _) in self.iters.iter() {
            // SAFETY: each iterator was started by us and is finished once.
            unsafe { bindings::ring_buffer_read_finish(it) };
        }
    }
}
