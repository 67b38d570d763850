// SPDX-License-Identifier: GPL-2.0

//! The kernel's own ring buffer (`kernel/trace/ring_buffer.c`): per CPU, lockless
//! writers, safe from any context including NMI, in overwrite mode like ftrace's.

use crate::bindings;
use crate::record::{Record, RECORD_SIZE, RECORD_WORDS};
use kernel::ffi::c_int;
use kernel::prelude::*;

/// `RING_BUFFER_ALL_CPUS`.
const ALL_CPUS: c_int = -1;

/// An event read from the buffer.
pub(crate) struct Event {
    pub(crate) rec: Record,
    pub(crate) cpu: u32,
    pub(crate) lost: u64,
}

/// A `struct trace_buffer`, freed on drop.
pub(crate) struct Buffer {
    rb: *mut bindings::trace_buffer,
}

// SAFETY: the ring buffer API is safe to call concurrently from any CPU and context.
unsafe impl Send for Buffer {}
// SAFETY: as above.
unsafe impl Sync for Buffer {}

fn cpus() -> u32 {
    // SAFETY: `nr_cpu_ids` is set at boot and read-only afterwards.
    unsafe { bindings::nr_cpu_ids }
}

impl Buffer {
    pub(crate) fn new(bytes_per_cpu: u64) -> Result<Self> {
        // SAFETY: trivial C wrapper of `ring_buffer_alloc()`.
        let rb = unsafe { bindings::fctrace_rb_alloc(bytes_per_cpu as _) };
        if rb.is_null() {
            return Err(ENOMEM);
        }
        Ok(Buffer { rb })
    }

    /// Writes a record and wakes readers; false if the buffer refused it. Safe from any
    /// context.
    pub(crate) fn write(&self, r: &Record) -> bool {
        // Reserved and filled in place, one 64-bit store per word: a copy of the whole
        // record would be a call of `memcpy()` (a `rep movsb` on CPUs with fast short
        // copies) for every record.
        let words: [u64; RECORD_WORDS] = r.words();
        // SAFETY: `rb` is live; reserving is allowed in any context (the ring buffer's
        // own recursion protection refuses a nested write it cannot take).
        let ev = unsafe { bindings::ring_buffer_lock_reserve(self.rb, RECORD_SIZE as _) };
        if ev.is_null() {
            return false;
        }
        // SAFETY: `ev` is the event just reserved on this CPU: its data holds `RECORD_SIZE`
        // bytes, aligned to 4 only (hence the unaligned stores), and it is committed next,
        // as every successful reserve must be, before anything else is written here.
        unsafe {
            let data = bindings::ring_buffer_event_data(ev).cast::<u64>();
            for (i, w) in words.iter().enumerate() {
                // (Read volatile: LLVM would merge plain copies back into a `memcpy()`.)
                core::ptr::write_unaligned(data.add(i), core::ptr::read_volatile(w));
            }
            bindings::ring_buffer_unlock_commit(self.rb);
        }
        // SAFETY: NMI-safe C helper (queues an irq_work when a reader sleeps).
        unsafe { bindings::fctrace_wake_readers() };
        true
    }

    pub(crate) fn resize(&self, bytes_per_cpu: u64) -> Result {
        // SAFETY: `rb` is live; resizing may sleep, callers are in process context.
        kernel::error::to_result(unsafe {
            bindings::ring_buffer_resize(self.rb, bytes_per_cpu as _, ALL_CPUS)
        })
    }

    pub(crate) fn reset(&self) {
        // SAFETY: `rb` is live; process context.
        unsafe { bindings::ring_buffer_reset(self.rb) };
    }

    pub(crate) fn overruns(&self) -> u64 {
        // SAFETY: `rb` is live.
        unsafe { bindings::ring_buffer_overruns(self.rb) as u64 }
    }

    /// Events overwritten on `cpu` before a reader got them.
    pub(crate) fn overrun_cpu(&self, cpu: u32) -> u64 {
        // SAFETY: `rb` is live.
        unsafe { bindings::ring_buffer_overrun_cpu(self.rb, cpu as c_int) as u64 }
    }

    /// Number of possible CPUs (the buffer has one sub-buffer each).
    pub(crate) fn cpus(&self) -> u32 {
        cpus()
    }

    pub(crate) fn entries(&self) -> u64 {
        // SAFETY: `rb` is live.
        unsafe { bindings::ring_buffer_entries(self.rb) as u64 }
    }

    /// How full `cpu`'s sub-buffer is with unread events, in per mille (an estimate:
    /// events are records plus a small header, pages have headers too).
    pub(crate) fn fill_permille(&self, cpu: u32) -> u64 {
        // SAFETY: `rb` is live; `cpu` is checked by the ring buffer.
        let n = unsafe { bindings::ring_buffer_entries_cpu(self.rb, cpu as c_int) } as u64;
        let size = self.size_per_cpu().max(1);
        n * (crate::record::RECORD_SIZE as u64 + 8) * 1000 / size
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

    fn event(ev: *mut bindings::ring_buffer_event, cpu: u32, lost: u64) -> Option<Event> {
        if ev.is_null() {
            return None;
        }
        // SAFETY: `ev` is an event the ring buffer just returned; its data is valid for
        // its length until the next read on this CPU, and we copy it out now.
        let rec = unsafe {
            let len = bindings::ring_buffer_event_length(ev) as usize;
            let data = bindings::ring_buffer_event_data(ev) as *const u8;
            Record::from_bytes(core::slice::from_raw_parts(data, len.min(RECORD_SIZE)))
        }?;
        Some(Event { rec, cpu, lost })
    }

    /// The oldest event over all CPUs: its CPU and timestamp, without consuming it.
    pub(crate) fn peek_oldest(&self) -> Option<(u32, u64)> {
        let mut best: Option<(u32, u64)> = None;
        for cpu in 0..cpus() {
            let (mut ts, mut lost) = (0u64, 0 as _);
            // SAFETY: `rb` is live; peeking takes the per-CPU reader lock internally.
            let ev =
                unsafe { bindings::ring_buffer_peek(self.rb, cpu as c_int, &mut ts, &mut lost) };
            if !ev.is_null() && best.map_or(true, |(_, b)| ts < b) {
                best = Some((cpu, ts));
            }
        }
        best
    }

    /// Consumes the next event of `cpu`.
    pub(crate) fn consume(&self, cpu: u32) -> Option<Event> {
        let (mut ts, mut lost) = (0u64, 0 as _);
        // SAFETY: `rb` is live; consuming takes the per-CPU reader lock, so concurrent
        // readers never get the same event.
        let ev =
            unsafe { bindings::ring_buffer_consume(self.rb, cpu as c_int, &mut ts, &mut lost) };
        Self::event(ev, cpu, lost as u64)
    }

    /// Consumes the oldest event over all CPUs.
    pub(crate) fn consume_oldest(&self) -> Option<Event> {
        let (cpu, _) = self.peek_oldest()?;
        self.consume(cpu)
    }

    /// Sleeps until new data arrives or a signal; `Err(EINTR)`/`ERESTARTSYS` on signal.
    pub(crate) fn wait(&self) -> Result {
        // SAFETY: `rb` is live; we are a reader in process context.
        kernel::error::to_result(unsafe { bindings::fctrace_wait_readable(self.rb) })
    }

    /// For `poll()`: registers on the wait queue and says whether data is there.
    pub(crate) fn poll_wait(
        &self,
        file: *mut bindings::file,
        pt: *mut bindings::poll_table_struct,
    ) -> u32 {
        // SAFETY: `file` and `pt` come from the VFS poll call; `rb` is live.
        unsafe { bindings::fctrace_poll_wait(file, pt, self.rb) }
    }

    /// A non-consuming iterator per CPU, for `trace`: the events written up to now.
    /// Writers go on meanwhile (their new events are not part of it); resizing waits for
    /// the iterators to finish.
    pub(crate) fn snapshot(&self) -> Result<Snapshot<'_>> {
        // SAFETY: `rb` is live.
        let limit = unsafe { bindings::ring_buffer_time_stamp(self.rb) };
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
                if let Err(e) = iters.push((cpu, it), GFP_KERNEL) {
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
        // SAFETY: trivial C helper: flushes a pending wake-up before the buffer goes.
        unsafe { bindings::fctrace_wake_sync() };
        // SAFETY: no writer or reader is left: probes are unregistered and files closed
        // before the state that owns the buffer is dropped.
        unsafe { bindings::ring_buffer_free(self.rb) };
    }
}

/// Iterators over every CPU's events, oldest first, up to the time it was made (so that
/// reading a buffer that is being filled faster than it is read still ends).
pub(crate) struct Snapshot<'a> {
    _buf: &'a Buffer,
    iters: KVec<(u32, *mut bindings::ring_buffer_iter)>,
    limit: u64,
}

impl Snapshot<'_> {
    fn peek_oldest(&self) -> Option<(usize, u64)> {
        let mut best: Option<(usize, u64)> = None;
        for (i, &(_, it)) in self.iters.iter().enumerate() {
            let mut ts = 0u64;
            // SAFETY: `it` is a live iterator of ours.
            let ev = unsafe { bindings::ring_buffer_iter_peek(it, &mut ts) };
            if !ev.is_null() && ts <= self.limit && best.map_or(true, |(_, b)| ts < b) {
                best = Some((i, ts));
            }
        }
        best
    }

    /// The next event without moving past it.
    pub(crate) fn peek(&self) -> Option<Event> {
        let (i, _) = self.peek_oldest()?;
        let (cpu, it) = *self.iters.get(i)?;
        let mut ts = 0u64;
        // SAFETY: `it` is a live iterator of ours.
        let ev = unsafe { bindings::ring_buffer_iter_peek(it, &mut ts) };
        // SAFETY: `it` is live.
        let dropped = unsafe { bindings::ring_buffer_iter_dropped(it) };
        Buffer::event(ev, cpu, u64::from(dropped))
    }

    /// The next event, moving past it.
    pub(crate) fn next(&mut self) -> Option<Event> {
        let (i, _) = self.peek_oldest()?;
        let e = self.peek();
        if let Some(&(_, it)) = self.iters.get(i) {
            // SAFETY: `it` is live and has an event (peeked above).
            unsafe { bindings::ring_buffer_iter_advance(it) };
        }
        e
    }
}

impl Drop for Snapshot<'_> {
    fn drop(&mut self) {
        for &(_, it) in self.iters.iter() {
            // SAFETY: each iterator was started by us and is finished once.
            unsafe { bindings::ring_buffer_read_finish(it) };
        }
    }
}
