// SPDX-License-Identifier: GPL-2.0 OR MIT

//! Reports on the text traces fctrace writes (`cat trace`, `cat trace_pipe`):
//! per-function statistics ([`stats`]), the merged call graph ([`graph`]), folded stacks
//! and flamegraphs ([`folded`]), Chrome trace-event JSON ([`chrome`]), the
//! differences between two runs ([`diff`]), where errors came from ([`errors`]) and
//! where a value went ([`follow`]). [`parse`] turns lines into events and
//! [`tree`] events into per-thread call trees, which the reports read.
//!
//! Nothing here panics on bad input: a line that cannot be parsed is an error naming
//! it (or is skipped and counted, leniently), and a tree that does not fit together
//! (lost events, a `}` with no open frame) is mended and counted.

pub mod chrome;
pub mod diff;
pub mod errors;
pub mod folded;
pub mod follow;
pub mod graph;
pub mod parse;
pub mod select;
pub mod stats;
pub mod table;
pub mod tree;

pub use parse::ParseError;
pub use tree::{BuildOptions, Trace};

/// How to read a trace.
#[derive(Clone, Copy, Debug, Default)]
pub struct LoadOptions {
    /// Skip and count the lines that cannot be parsed instead of failing on the first.
    pub lenient: bool,
    /// How to build the trees.
    pub build: BuildOptions,
}

/// Parses `text` and builds its call trees.
pub fn load_str(text: &str, opts: LoadOptions) -> Result<(Trace, Vec<ParseError>), ParseError> {
    let mut b = tree::Builder::new(opts.build);
    let (lines, skipped) = parse::for_each_event(text, opts.lenient, |n, e| b.push(n, e))?;
    Ok((b.finish(lines, skipped.len()), skipped))
}

/// Parses bytes read from a file or a pipe (invalid UTF-8 is replaced, not an error).
pub fn load_bytes(bytes: &[u8], opts: LoadOptions) -> Result<(Trace, Vec<ParseError>), ParseError> {
    load_str(&String::from_utf8_lossy(bytes), opts)
}
