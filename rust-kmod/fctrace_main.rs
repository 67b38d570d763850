// SPDX-License-Identifier: GPL-2.0

//! fctrace: shows every kernel function call a chosen task makes.
//!
//! Probes sit only on the call and return instructions of the functions the traced task
//! is executing, found by decoding their live machine code; they are added as the task
//! enters a function. Controlled through a small file system mounted on
//! `/sys/kernel/fctrace` (see Documentation/fctrace/usage.rst; the design is in
//! Documentation/fctrace/design.rst).

#![recursion_limit = "256"]
// On arm64 the engine is built without x86-64's mechanisms (trampolines, single steps,
// pre-sites) and tracing is refused (engine/session.rs): what only those use is unused,
// and x86-64's reading of code is unreachable after arm64's (engine/arming/arm64.rs).
#![cfg_attr(
    not(target_arch = "x86_64"),
    allow(dead_code, unreachable_code, unused_variables)
)]

use kernel::prelude::*;

#[allow(
    non_camel_case_types,
    non_upper_case_globals,
    non_snake_case,
    dead_code,
    missing_docs,
    unreachable_pub,
    improper_ctypes,
    unsafe_op_in_unsafe_fn,
    clippy::all,
    clippy::undocumented_unsafe_blocks
)]
mod bindings {
    include!("bindings_generated.rs");
}

// The host-tested, no_std logic, compiled here from the same files.
#[cfg(target_arch = "aarch64")]
#[allow(dead_code, unreachable_pub)]
#[path = "../crates/fctrace-decode/src/a64.rs"]
mod a64;

#[allow(dead_code, unreachable_pub)]
#[path = "../crates/fctrace-core/src/args.rs"]
mod args;
#[allow(dead_code, unreachable_pub)]
#[path = "../crates/fctrace-core/src/batch.rs"]
mod batch;
#[allow(dead_code, unreachable_pub)]
#[path = "../crates/fctrace-core/src/btf.rs"]
mod btf;
#[allow(dead_code, unreachable_pub)]
#[path = "../crates/fctrace-decode/src/decode.rs"]
mod decode;
#[allow(dead_code, unreachable_pub)]
#[path = "../crates/fctrace-decode/src/emulate.rs"]
mod emulate;
#[allow(dead_code, unreachable_pub)]
#[path = "../crates/fctrace-core/src/errno.rs"]
mod errno;
#[allow(dead_code, unreachable_pub)]
#[path = "../crates/fctrace-decode/src/fentry.rs"]
mod fentry;
#[allow(dead_code, unreachable_pub)]
#[path = "../crates/fctrace-core/src/format.rs"]
mod format;
#[allow(dead_code, unreachable_pub)]
#[path = "../crates/fctrace-core/src/going.rs"]
mod going;
#[allow(dead_code, unreachable_pub)]
#[path = "../crates/fctrace-core/src/parse.rs"]
mod parse;
#[allow(dead_code, unreachable_pub)]
#[path = "../crates/fctrace-decode/src/presite.rs"]
mod presite;
#[allow(dead_code, unreachable_pub)]
#[path = "../crates/fctrace-core/src/recent.rs"]
mod recent;
#[allow(dead_code, unreachable_pub)]
#[path = "../crates/fctrace-core/src/record.rs"]
mod record;
#[allow(dead_code, unreachable_pub)]
#[path = "../crates/fctrace-core/src/retstack.rs"]
mod retstack;
#[allow(dead_code, unreachable_pub)]
#[path = "../crates/fctrace-core/src/shadow.rs"]
mod shadow;
#[allow(dead_code, unreachable_pub)]
#[path = "../crates/fctrace-core/src/sort.rs"]
mod sort;
#[allow(dead_code, unreachable_pub)]
#[path = "../crates/fctrace-decode/src/thunks.rs"]
mod thunks;

// Dependencies point one way (xtask/src/layers.rs checks it): the crate root -> fs ->
// {control, reader} -> engine -> {kprobe, entry_ops, buffer, trap_notifier, ksym, text,
// error_log, sys, and the crates above}; nothing below the engine imports it.
mod buffer;
mod control;
mod engine;
mod entry_ops;
mod error_log;
mod fs;
mod kprobe;
mod ksym;
mod reader;
mod sys;
mod text;
mod trap_notifier;

// The one key that differs between the series (see sys/series.rs): `author` in 6.12,
// `authors` in 7.x.
#[cfg(not(fctrace_kernel_7))]
module! {
    type: Fctrace,
    name: "fctrace",
    author: "fctrace developers",
    description: "Dynamic call-site tracer: every kernel function call of chosen tasks",
    license: "GPL",
}
#[cfg(fctrace_kernel_7)]
module! {
    type: Fctrace,
    name: "fctrace",
    authors: ["fctrace developers"],
    description: "Dynamic call-site tracer: every kernel function call of chosen tasks",
    license: "GPL",
}

// Fields drop in order: the file system goes first, then the tracer (all probes removed),
// and the trap notifier last, once no breakpoint of ours can be left.
struct Fctrace {
    _fs: fs::Registration,
    _tracer: engine::TracerHandle,
    _traps: trap_notifier::Guard,
    _modules: sys::ModuleWatch,
}

impl kernel::Module for Fctrace {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        #[cfg(target_arch = "x86_64")]
        let traps = trap_notifier::Guard::new::<engine::Traps>()?;
        #[cfg(not(target_arch = "x86_64"))]
        let traps = trap_notifier::Guard::new()?;
        let modules = sys::ModuleWatch::new()?;
        let tracer = engine::TracerHandle::new()?;
        let fs = fs::Registration::new()?;
        pr_info!("loaded; mount with: mount -t fctrace nodev /sys/kernel/fctrace\n");
        Ok(Fctrace {
            _fs: fs,
            _tracer: tracer,
            _traps: traps,
            _modules: modules,
        })
    }
}
