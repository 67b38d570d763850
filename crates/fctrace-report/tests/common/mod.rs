// SPDX-License-Identifier: GPL-2.0 OR MIT

//! Helpers shared by the integration tests.

#![allow(dead_code)]

use fctrace_report::folded::{self, Weight};
use fctrace_report::graph;
use fctrace_report::tree::NodeKind;
use fctrace_report::{BuildOptions, LoadOptions, Trace};
use std::collections::{BTreeMap, HashMap};

/// The text of fixture `name` (tests/data).
pub fn fixture(name: &str) -> String {
    let path = format!("{}/tests/data/{}", env!("CARGO_MANIFEST_DIR"), name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {}", path, e))
}

/// Every fixture in tests/data (the `.trace` files).
pub fn all_fixtures() -> Vec<String> {
    let dir = format!("{}/tests/data", env!("CARGO_MANIFEST_DIR"));
    let mut v: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".trace"))
        .collect();
    v.sort();
    v
}

/// Loads fixture `name` strictly.
pub fn load(name: &str) -> Trace {
    load_with(name, BuildOptions::default())
}

/// Loads fixture `name` strictly with `build` options.
pub fn load_with(name: &str, build: BuildOptions) -> Trace {
    let (t, skipped) = fctrace_report::load_str(
        &fixture(name),
        LoadOptions {
            lenient: false,
            build,
        },
    )
    .unwrap_or_else(|e| panic!("{}: {}", name, e));
    assert!(skipped.is_empty());
    t
}

/// Calls per function name counted straight from the text, without the parser: the
/// third `|`-separated column of each task line, its first word up to `(`, for lines
/// that are not closes or interrupt markers.
pub fn calls_in_text(text: &str) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with('#') || t.starts_with("CPU:") || t.is_empty() {
            continue;
        }
        let func = line.splitn(3, '|').nth(2).unwrap().trim_start();
        if func.starts_with('}')
            || func.starts_with("==========>")
            || func.starts_with("<==========")
        {
            continue;
        }
        let name = func.split('(').next().unwrap();
        *m.entry(name.to_string()).or_insert(0) += 1;
    }
    m
}

/// A label without its module: `f [mod]` is `f`.
pub fn base_name(label: &str) -> &str {
    label.split(" [").next().unwrap()
}

/// The value of a folded line.
pub fn folded_value(line: &str) -> u64 {
    line.rsplit_once(' ').unwrap().1.parse().unwrap()
}

/// Checks the times of `t` and of its folded stacks against its graph. A frame's total
/// is its duration (the trace's, never more; with none, its children's totals
/// together) and its self time that minus its children's totals, never below 0: where
/// the children's totals exceed the duration (durations inconsistent: lines lost or
/// matched wrongly), the excess is the frame's overrun. So, per frame, self + children
/// = total + overrun; the folded values (self times) under a graph node add up to its
/// total plus the overruns below it; and all of them to the roots' totals plus the
/// trace's overrun: exactly. By calls, they add up to the calls of the text plus those
/// rebuilt from a `}`.
pub fn check_folded(name: &str, t: &Trace) {
    for n in &t.nodes {
        let children: u64 = n.children.iter().map(|&c| t.nodes[c].total_ns).sum();
        assert_eq!(n.self_ns + children, n.total_ns + n.overrun_ns, "{}", name);
        assert!(n.self_ns == 0 || n.overrun_ns == 0, "{}", name);
        match (n.kind, n.duration_ns) {
            (NodeKind::Interrupt, _) | (_, None) => {
                assert_eq!((n.total_ns, n.overrun_ns), (children, 0), "{}", name)
            }
            (_, Some(d)) => assert_eq!(n.total_ns, d, "{}", name),
        }
    }
    let overrun: u64 = t.nodes.iter().map(|n| n.overrun_ns).sum();
    assert_eq!(overrun, t.summary.overrun_ns, "{}", name);
    assert_eq!(
        t.nodes.iter().filter(|n| n.overrun_ns > 0).count() as u64,
        t.summary.overrun_frames
    );
    for by_task in [false, true] {
        let g = graph::whole(t, by_task);
        let time = folded::folded_lines(&g, Weight::Time);
        let sum: u64 = time.iter().map(|l| folded_value(l)).sum();
        assert_eq!(sum, g.nodes[0].total_ns + t.summary.overrun_ns, "{}", name);
        // Under each graph node: the values of the stacks through it.
        let mut under: HashMap<String, u64> = HashMap::new();
        for l in &time {
            let (stack, v) = l.rsplit_once(' ').unwrap();
            let parts: Vec<&str> = stack.split(';').collect();
            for i in 1..=parts.len() {
                *under.entry(parts[..i].join(";")).or_insert(0) += v.parse::<u64>().unwrap();
            }
        }
        let mut overrun_below = vec![0u64; g.nodes.len()];
        for id in g.preorder().into_iter().rev() {
            let n = &g.nodes[id];
            overrun_below[id] =
                n.overrun_ns + n.children.iter().map(|&c| overrun_below[c]).sum::<u64>();
            assert_eq!(
                under.get(&g.path(id).join(";")).copied().unwrap_or(0),
                n.total_ns + overrun_below[id],
                "{}: {:?}",
                name,
                g.path(id)
            );
        }
        let calls = folded::folded_lines(&g, Weight::Calls);
        let sum: u64 = calls.iter().map(|l| folded_value(l)).sum();
        assert_eq!(sum, t.summary.calls + t.summary.recovered_calls, "{}", name);
        let mut sorted = time.clone();
        sorted.sort();
        assert_eq!(sorted, time);
    }
}
