// SPDX-License-Identifier: GPL-2.0
//! x86-64 instruction length and control-flow decoder for fctrace, and the
//! AArch64 one ([`a64`]).
//!
//! `#![no_std]`, no dependencies, no allocation, never panics. All the code
//! lives in the single file `src/decode.rs` so that the kernel module can
//! include the very same source with
//! `#[path = "../crates/fctrace-decode/src/decode.rs"] pub mod decode;`
//! (`pub`, or `#[allow(dead_code, unreachable_pub)] mod decode;`, so that the
//! kernel's `-Wunreachable_pub` and dead-code lints stay quiet).
//!
//! [`decode`] decodes one instruction (length, [`Flow`], `endbr64`, nop;
//! a conditional jump's [`Cond`], which [`Cond::holds`] evaluates on RFLAGS);
//! [`scan`] sweeps a whole function body. [`thunks`] says what a branch to a
//! mitigation thunk (return, retpoline, ITS, call-depth accounting) really does;
//! the module includes it the same way (`src/thunks.rs`), and [`presite`], which
//! chooses where a call site can be watched without a breakpoint on it, and
//! [`emulate`], which computes an indirect call's target there, and [`fentry`], which
//! finds a function's ftrace site. [`a64`] says what an A64 instruction word
//! does to control flow and where an arm64 function's ftrace site is; the
//! module includes it the same way (`src/a64.rs`).
#![no_std]
// The decoder must not be able to panic (it runs in the kernel, on live text).
#![deny(
    missing_docs,
    clippy::arithmetic_side_effects,
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::unreachable,
    clippy::float_arithmetic
)]

pub mod a64;
mod decode;
pub use decode::*;
pub mod emulate;
pub mod fentry;
pub mod presite;
pub mod thunks;
