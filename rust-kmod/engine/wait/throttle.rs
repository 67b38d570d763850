// SPDX-License-Identifier: GPL-2.0

//! The `lossless` throttle: a task waits in the trampoline for the reader instead of losing
//! events.

use super::*;

/// `lossless`: the longest a traced task waits for readers that take nothing.
const LOSSLESS_STALL_MS: u32 = 1000;

/// How often readers took events (it changes with every `trace_pipe` read that drained
/// the buffer, and when a reader closes).
fn reader_progress() -> u64 {
    u64::from(sys::throttle_progress())
}

impl Tracer {
    /// `lossless`: sends the task to the trampoline to wait for the reader, then to make
    /// the call at `addr` again (which may still need an arming redirect then).
    /// Only where a breakpoint can send a task there ([`Tracer::can_redirect`]); returns
    /// whether it did (see [`Tracer::redirect`]; `at_entry` as there).
    pub(crate) fn redirect_throttle(
        &self,
        d: &mut TaskData,
        addr: u64,
        at_entry: bool,
    ) -> Option<super::trampoline::Redirect> {
        d.wait.throttle = true;
        d.wait.last_throttle = addr;
        let last = d.wait.last_redirect;
        let sent = self.redirect(d, addr, 0, at_entry);
        d.wait.last_redirect = last;
        if sent.is_none() {
            d.wait.throttle = false;
        }
        sent
    }

    /// `lossless`: whether a traced task about to add events should first wait for the
    /// reader (the buffer of its CPU is more than half full and someone reads).
    pub(crate) fn should_throttle(&self) -> bool {
        self.settings.option(OptionName::Lossless)
            && self.readers.load(Ordering::Relaxed) != 0
            && self.buf.fill_permille(this_cpu()) > 500
            && self.waits.stalled_at.load(Ordering::Relaxed) != reader_progress()
    }

    /// `lossless`, in the trampoline (the task may sleep): waits until every sub-buffer is
    /// at most a quarter full, the reader goes away, tracing stops, or a signal comes; or
    /// until the readers have taken nothing for [`LOSSLESS_STALL_MS`] (a reader stopped
    /// with SIGSTOP, say: the task may hold `mmap_lock` or an inode's lock). Then no task
    /// waits again until a reader takes something: events are lost, and counted, instead.
    pub(super) fn throttle_wait(&self) {
        self.stats.lossless_waits.fetch_add(1, Ordering::Relaxed);
        let mut seen = reader_progress();
        let mut quiet_ms = 0;
        while self.active.load(Ordering::Acquire)
            && self.settings.option(OptionName::Lossless)
            && self.readers.load(Ordering::Relaxed) > 0
            && self.buf.max_fill_permille() > 250
        {
            // Sleeping is allowed in the trampoline (sleepable context, no locks).
            if sys::throttle_sleep(100) {
                break;
            }
            let now = reader_progress();
            if now != seen {
                seen = now;
                quiet_ms = 0;
                continue;
            }
            quiet_ms += 100;
            if quiet_ms >= LOSSLESS_STALL_MS {
                self.waits.stalled_at.store(now, Ordering::Relaxed);
                self.stats.lossless_timeouts.fetch_add(1, Ordering::Relaxed);
                break;
            }
        }
    }
}
