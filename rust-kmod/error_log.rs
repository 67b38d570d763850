// SPDX-License-Identifier: GPL-2.0

//! The `error_log` file: the last few refused writes and failures, each with a reason.

use crate::text::Text;
use core::fmt::Write;
use kernel::alloc::KVec;

/// Lines kept in `error_log`.
const ERROR_LOG_LINES: usize = 16;

/// The last [`ERROR_LOG_LINES`] lines, in a ring: `next` is the oldest once it is full.
pub(crate) struct ErrorLog {
    lines: [KVec<u8>; ERROR_LOG_LINES],
    next: usize,
    /// Lines added since the module was loaded (clearing does not reset it).
    added: u64,
}

impl ErrorLog {
    pub(crate) fn new() -> Self {
        ErrorLog {
            lines: [const { KVec::new() }; ERROR_LOG_LINES],
            next: 0,
            added: 0,
        }
    }

    /// Lines added so far: a write that was refused and added none gets a line of its
    /// own (`control::write`).
    pub(crate) fn added(&self) -> u64 {
        self.added
    }

    /// Adds a line `[seconds] fctrace: <args>`, dropping the oldest beyond the limit.
    pub(crate) fn add(&mut self, args: core::fmt::Arguments<'_>) {
        let mut t = Text::new();
        let secs = crate::sys::real_seconds();
        if writeln!(t, "[{}] fctrace: {}", secs, args).is_err() {
            return;
        }
        self.lines[self.next] = t.0;
        self.next = (self.next + 1) % ERROR_LOG_LINES;
        self.added += 1;
    }

    pub(crate) fn clear(&mut self) {
        let added = self.added;
        *self = ErrorLog::new();
        self.added = added;
    }

    pub(crate) fn render(&self, t: &mut Text) -> core::fmt::Result {
        let (newer, older) = self.lines.split_at(self.next);
        Iterator::chain(older.iter(), newer).try_for_each(|l| t.push_bytes(l))
    }
}
