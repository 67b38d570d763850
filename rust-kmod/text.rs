// SPDX-License-Identifier: GPL-2.0

//! Growable text for file contents and trace output.

use core::fmt::Write;
use kernel::alloc::KVec;
use kernel::prelude::*;

/// Text that grows as it is written; `fmt::Write` fails when out of memory.
pub(crate) struct Text(pub(crate) KVec<u8>);

impl Text {
    pub(crate) fn new() -> Self {
        Text(KVec::new())
    }

    /// Appends raw bytes.
    pub(crate) fn push_bytes(&mut self, b: &[u8]) -> core::fmt::Result {
        self.0
            .extend_from_slice(b, GFP_KERNEL)
            .map_err(|_| core::fmt::Error)
    }
}

impl Write for Text {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        self.push_bytes(s.as_bytes())
    }
}
