// SPDX-License-Identifier: GPL-2.0 OR MIT

//! Per-function statistics, like `uftrace report`.

use crate::table::{opt_time, time, Align, Table};
use crate::tree::{End, NodeKind, Trace};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::io::{self, Write};

/// What the trace says about one function.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FuncStats {
    /// The function (`name` or `name [module]`).
    pub function: String,
    /// Calls (opening lines and one-line calls).
    pub calls: u64,
    /// Calls with a duration.
    pub timed: u64,
    /// Total time: the durations of its calls, without the calls nested in another
    /// call of the same function (recursion counted once).
    pub total_ns: u64,
    /// Self time: the durations minus what the children took.
    pub self_ns: u64,
    /// Average duration of the timed calls.
    pub avg_ns: Option<u64>,
    /// Shortest duration.
    pub min_ns: Option<u64>,
    /// Longest duration.
    pub max_ns: Option<u64>,
    /// Calls not followed.
    pub not_followed: u64,
    /// Why, with counts.
    pub not_followed_reasons: BTreeMap<String, u64>,
    /// Frames never closed (their time is unknown and counts 0).
    pub incomplete: u64,
    /// Calls whose opening line was lost, rebuilt from their `}` (counted in `calls`).
    pub opening_lost: u64,
    /// Calls whose children's times add up to more than their own duration (the trace
    /// is inconsistent there: their self time counts 0).
    pub overrun: u64,
    /// Returns of a negative errno (`-2 (ENOENT)`), with counts.
    pub error_returns: BTreeMap<String, u64>,
}

/// The errno of a return value as printed (`-2`, `-2 (ENOENT)`, `0xfffffffe`), if it is
/// one (see [`crate::errors::errno_of`]).
pub fn errno_of(ret: &str) -> Option<i64> {
    crate::errors::errno_of(ret)
}

/// The statistics of every function of the trace (interrupt nodes are not functions),
/// in order of first appearance.
pub fn compute(trace: &Trace) -> Vec<FuncStats> {
    let labels = trace.labels();
    let mut index: HashMap<&str, usize> = HashMap::new();
    let mut out: Vec<FuncStats> = Vec::new();
    let mut func_of: Vec<usize> = Vec::with_capacity(trace.nodes.len());
    let mut sums: Vec<u64> = Vec::new();
    for (n, label) in trace.nodes.iter().zip(&labels) {
        let fi = *index.entry(label.as_str()).or_insert_with(|| {
            out.push(FuncStats {
                function: label.clone(),
                ..FuncStats::default()
            });
            sums.push(0);
            out.len() - 1
        });
        func_of.push(fi);
        if n.kind != NodeKind::Call {
            continue;
        }
        let (Some(s), Some(sum)) = (out.get_mut(fi), sums.get_mut(fi)) else {
            continue;
        };
        s.calls += 1;
        s.self_ns = s.self_ns.saturating_add(n.self_ns);
        if let Some(d) = n.duration_ns {
            s.timed += 1;
            *sum = sum.saturating_add(d);
            s.min_ns = Some(s.min_ns.map_or(d, |m| m.min(d)));
            s.max_ns = Some(s.max_ns.map_or(d, |m| m.max(d)));
        }
        if let Some(r) = n.not_followed() {
            s.not_followed += 1;
            *s.not_followed_reasons.entry(r.to_string()).or_default() += 1;
        }
        if n.end == End::Incomplete {
            s.incomplete += 1;
        }
        if n.opening_lost {
            s.opening_lost += 1;
        }
        if n.overrun_ns > 0 {
            s.overrun += 1;
        }
        if let Some(ret) = n.ret().filter(|r| errno_of(r).is_some()) {
            *s.error_returns.entry(ret.to_string()).or_default() += 1;
        }
    }
    for (s, sum) in out.iter_mut().zip(&sums) {
        s.avg_ns = sum.checked_div(s.timed);
    }
    // Totals: depth-first, counting a call only if no call of the same function is
    // open around it.
    let mut on_path = vec![0u32; out.len()];
    let mut stack: Vec<(usize, bool)> = Vec::new();
    for t in &trace.threads {
        stack.extend(t.roots.iter().rev().map(|&r| (r, true)));
        while let Some((id, enter)) = stack.pop() {
            let (Some(n), Some(&fi)) = (trace.nodes.get(id), func_of.get(id)) else {
                continue;
            };
            let Some(count) = on_path.get_mut(fi) else {
                continue;
            };
            if !enter {
                *count = count.saturating_sub(1);
                continue;
            }
            if *count == 0 && n.kind == NodeKind::Call {
                if let Some(s) = out.get_mut(fi) {
                    s.total_ns = s.total_ns.saturating_add(n.total_ns);
                }
            }
            *count += 1;
            stack.push((id, false));
            stack.extend(n.children.iter().rev().map(|&c| (c, true)));
        }
    }
    out.retain(|s| s.calls > 0);
    out
}

/// What to sort the statistics by.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SortKey {
    /// Number of calls.
    Calls,
    /// Total time.
    Total,
    /// Self time.
    #[value(name = "self")]
    SelfTime,
    /// Average time.
    Avg,
    /// Shortest call.
    Min,
    /// Longest call.
    Max,
    /// Calls not followed.
    NotFollowed,
    /// Function name (ascending).
    Name,
}

/// Sorts `stats` by `key`: largest first (names: alphabetically), ties by name;
/// `reverse` turns the order around.
pub fn sort(stats: &mut [FuncStats], key: SortKey, reverse: bool) {
    stats.sort_by(|a, b| {
        let by = |f: fn(&FuncStats) -> u64| f(b).cmp(&f(a));
        let o = match key {
            SortKey::Calls => by(|s| s.calls),
            SortKey::Total => by(|s| s.total_ns),
            SortKey::SelfTime => by(|s| s.self_ns),
            SortKey::Avg => by(|s| s.avg_ns.unwrap_or(0)),
            SortKey::Min => by(|s| s.min_ns.unwrap_or(0)),
            SortKey::Max => by(|s| s.max_ns.unwrap_or(0)),
            SortKey::NotFollowed => by(|s| s.not_followed),
            SortKey::Name => a.function.cmp(&b.function),
        }
        .then_with(|| a.function.cmp(&b.function));
        if reverse {
            o.reverse()
        } else {
            o
        }
    });
}

/// `unprobeable:2, atomic:1`.
pub fn reasons_text(reasons: &BTreeMap<String, u64>) -> String {
    let mut v: Vec<(&String, &u64)> = reasons.iter().collect();
    v.sort_by(|a, b| b.1.cmp(a.1).then_with(|| a.0.cmp(b.0)));
    v.iter()
        .map(|(r, n)| format!("{}:{}", r, n))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Writes the statistics as an aligned table.
pub fn write_table(w: &mut dyn Write, stats: &[FuncStats]) -> io::Result<()> {
    let mut t = Table::new(&[
        ("TOTAL", Align::Right),
        ("SELF", Align::Right),
        ("CALLS", Align::Right),
        ("AVG", Align::Right),
        ("MIN", Align::Right),
        ("MAX", Align::Right),
        ("NOT-FOLLOWED", Align::Right),
        ("FUNCTION", Align::Left),
    ]);
    for s in stats {
        let mut function = s.function.clone();
        if !s.not_followed_reasons.is_empty() {
            function += &format!(
                "  [not followed: {}]",
                reasons_text(&s.not_followed_reasons)
            );
        }
        if s.incomplete > 0 {
            function += &format!("  [incomplete: {}]", s.incomplete);
        }
        if s.opening_lost > 0 {
            function += &format!("  [opening lost: {}]", s.opening_lost);
        }
        if s.overrun > 0 {
            function += &format!("  [shorter than the calls inside: {}]", s.overrun);
        }
        t.row(vec![
            time(s.total_ns),
            time(s.self_ns),
            s.calls.to_string(),
            opt_time(s.avg_ns),
            opt_time(s.min_ns),
            opt_time(s.max_ns),
            s.not_followed.to_string(),
            function,
        ]);
    }
    t.write(w)
}
