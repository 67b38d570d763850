// SPDX-License-Identifier: GPL-2.0 OR MIT

//! Folded stacks (`a;b;c 123`, one line per distinct call path) and flamegraphs made
//! from them with the `inferno` crate.
//!
//! By time, a path's value is the self time of its calls in nanoseconds, so a frame's
//! width in the flamegraph is the total time of its calls along that path. By calls,
//! a path's value is the number of calls along it, so a frame's width is the number of
//! calls at and below it.

use crate::graph::Graph;
use std::io::{self, Write};

/// What a stack's value counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Weight {
    /// Self time in nanoseconds.
    Time,
    /// Calls.
    Calls,
}

/// The folded stacks of graph `g` (made with [`crate::graph::whole`]), sorted; paths
/// whose value is 0 are left out.
pub fn folded_lines(g: &Graph, weight: Weight) -> Vec<String> {
    let mut lines: Vec<String> = g
        .preorder()
        .into_iter()
        .filter_map(|id| {
            let n = g.nodes.get(id)?;
            let value = match weight {
                Weight::Time => n.self_ns,
                Weight::Calls => n.calls,
            };
            (value > 0).then(|| format!("{} {}", g.path(id).join(";"), value))
        })
        .collect();
    lines.sort();
    lines
}

/// Writes folded stacks.
pub fn write_folded(w: &mut dyn Write, lines: &[String]) -> io::Result<()> {
    for l in lines {
        writeln!(w, "{}", l)?;
    }
    Ok(())
}

/// Settings of a flamegraph.
#[derive(Clone, Debug)]
pub struct FlameOptions {
    /// The title.
    pub title: String,
    /// A subtitle, if any.
    pub subtitle: Option<String>,
    /// What the values count.
    pub weight: Weight,
    /// Frames narrower than this (percent of the width) are left out.
    pub min_width: f64,
    /// Image width in pixels (default 1200).
    pub width: Option<usize>,
}

/// Writes an SVG flamegraph of folded stacks `lines`.
pub fn write_flamegraph(w: &mut dyn Write, lines: &[String], fo: &FlameOptions) -> io::Result<()> {
    let mut opt = inferno::flamegraph::Options::default();
    opt.title.clone_from(&fo.title);
    opt.subtitle.clone_from(&fo.subtitle);
    opt.count_name = match fo.weight {
        Weight::Time => "ns".to_string(),
        Weight::Calls => "calls".to_string(),
    };
    opt.name_type = "Function:".to_string();
    opt.min_width = fo.min_width;
    opt.image_width = fo.width;
    // Colors from the function names: the same function, the same color in every graph.
    opt.hash = true;
    opt.deterministic = true;
    inferno::flamegraph::from_lines(&mut opt, lines.iter().map(String::as_str), w)
}
