// SPDX-License-Identifier: GPL-2.0

//! fctrace: shows every kernel function call a chosen task makes.
//!
//! Probes sit only on the call and return instructions of the functions the traced task
//! is executing, found by decoding their live machine code; they are added as the task
//! enters a function. Controlled through a small file system mounted on
//! `/sys/kernel/fctrace` (see Documentation/fctrace.rst).

#![recursion_limit = "256"]

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
#[path = "../crates/fctrace-decode/src/fentry.rs"]
mod fentry;
#[allow(dead_code, unreachable_pub)]
#[path = "../crates/fctrace-core/src/format.rs"]
mod format;
#[allow(dead_code, unreachable_pub)]
#[path = "../crates/fctrace-core/src/parse.rs"]
mod parse;
#[allow(dead_code, unreachable_pub)]
#[path = "../crates/fctrace-decode/src/presite.rs"]
mod presite;
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
#[path = "../crates/fctrace-decode/src/thunks.rs"]
mod thunks;

// Dependencies point one way: fs -> {control, reader} -> engine -> {kprobe, buffer, ksym,
// error_log, text, and the crates above}.
mod buffer;
mod control;
mod engine;
mod error_log;
mod fs;
mod ftrace;
mod kprobe;
mod ksym;
mod late_int3;
mod reader;
mod text;
mod typed;

module! {
    type: Fctrace,
    name: "fctrace",
    author: "fctrace developers",
    description: "Dynamic call-site tracer: every kernel function call of chosen tasks",
    license: "GPL",
}

// Fields drop in order: the file system goes first, then the tracer (all probes removed),
// and the late-int3 guard last, once no breakpoint of ours can be left.
struct Fctrace {
    _fs: fs::Registration,
    _tracer: engine::TracerHandle,
    _late_int3: late_int3::Guard,
    _modules: typed::ModuleWatch,
}

impl kernel::Module for Fctrace {
    fn init(_module: &'static ThisModule) -> Result<Self> {
        let late_int3 = late_int3::Guard::new()?;
        let modules = typed::ModuleWatch::new()?;
        let tracer = engine::TracerHandle::new()?;
        let fs = fs::Registration::new()?;
        pr_info!("loaded; mount with: mount -t fctrace nodev /sys/kernel/fctrace\n");
        Ok(Fctrace {
            _fs: fs,
            _tracer: tracer,
            _late_int3: late_int3,
            _modules: modules,
        })
    }
}
