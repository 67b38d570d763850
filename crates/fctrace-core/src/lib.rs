// SPDX-License-Identifier: GPL-2.0

//! Logic shared by the fctrace kernel module and host tools.
//!
//! Every module here is a single self-contained file that the kernel module also compiles,
//! by `#[path]`, at its crate root under the same name, so `crate::record` means the same
//! thing in both builds. Nothing here allocates or panics on bad input.
#![no_std]

pub mod args;
pub mod batch;
pub mod btf;
pub mod errno;
pub mod format;
pub mod going;
pub mod parse;
pub mod recent;
pub mod record;
pub mod retstack;
pub mod shadow;
pub mod sort;
