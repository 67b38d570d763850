// SPDX-License-Identifier: GPL-2.0 OR MIT

//! What two runs did differently: the functions and call paths found in one trace and
//! not the other, the biggest changes in calls and time, and the calls whose error
//! returns or whose reasons for not being followed differ (the support case: a run
//! that works, A, and one that fails, B).

use crate::graph::{self, Graph, GraphId};
use crate::stats::{self, reasons_text, FuncStats};
use crate::table::{time, Align, Table};
use crate::tree::{Summary, Trace};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::io::{self, Write};

/// One trace of a diff.
#[derive(Clone, Debug, Serialize)]
pub struct Side {
    /// Where it came from.
    pub source: String,
    /// Its counts.
    pub summary: Summary,
    /// The time of its top-level calls together.
    pub total_ns: u64,
}

/// A function found in one trace only.
#[derive(Clone, Debug, Serialize)]
pub struct OnlyFunction {
    /// The function.
    pub function: String,
    /// Its calls.
    pub calls: u64,
    /// Their total time.
    pub total_ns: u64,
}

/// A call path found in one trace only (the outermost such: its parent path is in both).
#[derive(Clone, Debug, Serialize)]
pub struct OnlyPath {
    /// The functions from the root down.
    pub path: Vec<String>,
    /// Calls along it.
    pub calls: u64,
    /// Their total time.
    pub total_ns: u64,
    /// How many more paths below it are missing from the other trace too.
    pub paths_below: usize,
}

/// A change in the number of calls.
#[derive(Clone, Debug, Serialize)]
pub struct CallChange {
    /// The function, or a path joined with ` > `.
    pub what: String,
    /// Calls in A.
    pub a: u64,
    /// Calls in B.
    pub b: u64,
    /// B minus A.
    pub delta: i64,
}

/// A change in total time.
#[derive(Clone, Debug, Serialize)]
pub struct TimeChange {
    /// The function.
    pub function: String,
    /// Total in A.
    pub a_ns: u64,
    /// Total in B.
    pub b_ns: u64,
    /// B minus A.
    pub delta_ns: i64,
}

/// A function whose counted outcomes (error returns, reasons not followed) differ.
#[derive(Clone, Debug, Serialize)]
pub struct OutcomeChange {
    /// The function.
    pub function: String,
    /// In A: outcome and count.
    pub a: BTreeMap<String, u64>,
    /// In B.
    pub b: BTreeMap<String, u64>,
}

/// The differences between two traces.
#[derive(Clone, Debug, Serialize)]
pub struct Diff {
    /// The first trace (the run that works).
    pub a: Side,
    /// The second trace (the run that fails).
    pub b: Side,
    /// Functions called in A and never in B.
    pub functions_only_in_a: Vec<OnlyFunction>,
    /// Functions called in B and never in A.
    pub functions_only_in_b: Vec<OnlyFunction>,
    /// Call paths of A missing from B.
    pub paths_only_in_a: Vec<OnlyPath>,
    /// Call paths of B missing from A.
    pub paths_only_in_b: Vec<OnlyPath>,
    /// Error returns that differ, by function.
    pub error_returns: Vec<OutcomeChange>,
    /// Reasons for not following that differ, by function.
    pub not_followed: Vec<OutcomeChange>,
    /// Changes in calls of functions called in both, biggest first.
    pub call_changes: Vec<CallChange>,
    /// Changes in calls along paths taken in both, biggest first.
    pub path_call_changes: Vec<CallChange>,
    /// Changes in total time of functions called in both, biggest first.
    pub time_changes: Vec<TimeChange>,
}

fn delta(a: u64, b: u64) -> i64 {
    let d = i128::from(b) - i128::from(a);
    i64::try_from(d).unwrap_or(if d < 0 { i64::MIN } else { i64::MAX })
}

/// The paths of `x` missing from `y`: the outermost ones, in depth-first order.
fn only_paths(x: &Graph, y: &Graph) -> Vec<OnlyPath> {
    let mut out = Vec::new();
    // (node of x, matching node of y)
    let mut stack: Vec<(GraphId, GraphId)> = vec![(0, 0)];
    while let Some((gx, gy)) = stack.pop() {
        let Some(nx) = x.nodes.get(gx) else {
            continue;
        };
        for &c in nx.children.iter().rev() {
            let Some(cn) = x.nodes.get(c) else {
                continue;
            };
            match y.child(gy, &cn.function) {
                Some(cy) => stack.push((c, cy)),
                None => out.push((c, cn)),
            }
        }
    }
    // The stack visits children in reverse; put the result in depth-first order.
    let order: HashMap<GraphId, usize> = x
        .preorder()
        .into_iter()
        .enumerate()
        .map(|(i, g)| (g, i))
        .collect();
    out.sort_by_key(|(g, _)| order.get(g).copied().unwrap_or(usize::MAX));
    out.into_iter()
        .map(|(g, n)| OnlyPath {
            path: x.path(g).into_iter().map(str::to_string).collect(),
            calls: n.calls,
            total_ns: n.total_ns,
            paths_below: subtree_size(x, g).saturating_sub(1),
        })
        .collect()
}

fn subtree_size(g: &Graph, root: GraphId) -> usize {
    let mut n = 0;
    let mut stack = vec![root];
    while let Some(id) = stack.pop() {
        n += 1;
        if let Some(node) = g.nodes.get(id) {
            stack.extend(node.children.iter());
        }
    }
    n
}

/// Call changes along the paths found in both graphs.
fn path_changes(a: &Graph, b: &Graph) -> Vec<CallChange> {
    let mut out = Vec::new();
    let mut stack: Vec<(GraphId, GraphId)> = vec![(0, 0)];
    while let Some((ga, gb)) = stack.pop() {
        let (Some(na), Some(nb)) = (a.nodes.get(ga), b.nodes.get(gb)) else {
            continue;
        };
        if ga != 0 && !na.synthetic && na.calls != nb.calls {
            out.push(CallChange {
                what: a.path(ga).join(" > "),
                a: na.calls,
                b: nb.calls,
                delta: delta(na.calls, nb.calls),
            });
        }
        for &c in &na.children {
            if let Some(cb) = a.nodes.get(c).and_then(|cn| b.child(gb, &cn.function)) {
                stack.push((c, cb));
            }
        }
    }
    out.sort_by(|x, y| {
        y.delta
            .unsigned_abs()
            .cmp(&x.delta.unsigned_abs())
            .then_with(|| x.what.cmp(&y.what))
    });
    out
}

fn only_functions(x: &[FuncStats], y: &HashMap<&str, &FuncStats>) -> Vec<OnlyFunction> {
    let mut v: Vec<OnlyFunction> = x
        .iter()
        .filter(|s| !y.contains_key(s.function.as_str()))
        .map(|s| OnlyFunction {
            function: s.function.clone(),
            calls: s.calls,
            total_ns: s.total_ns,
        })
        .collect();
    v.sort_by(|p, q| {
        q.total_ns
            .cmp(&p.total_ns)
            .then_with(|| q.calls.cmp(&p.calls))
            .then_with(|| p.function.cmp(&q.function))
    });
    v
}

/// Error returns counted by errno, however they were printed.
fn by_errno(returns: &BTreeMap<String, u64>) -> BTreeMap<i64, u64> {
    let mut m = BTreeMap::new();
    for (ret, n) in returns {
        if let Some(e) = stats::errno_of(ret) {
            let c: &mut u64 = m.entry(e).or_default();
            *c = c.saturating_add(*n);
        }
    }
    m
}

/// Compares traces `a` and `b` (named `source_a`, `source_b`).
pub fn diff(a: &Trace, source_a: &str, b: &Trace, source_b: &str) -> Diff {
    let sa = stats::compute(a);
    let sb = stats::compute(b);
    let ia: HashMap<&str, &FuncStats> = sa.iter().map(|s| (s.function.as_str(), s)).collect();
    let ib: HashMap<&str, &FuncStats> = sb.iter().map(|s| (s.function.as_str(), s)).collect();
    let ga = graph::whole(a, false);
    let gb = graph::whole(b, false);
    let mut call_changes = Vec::new();
    let mut time_changes = Vec::new();
    let mut error_returns = Vec::new();
    let mut not_followed = Vec::new();
    for s in &sa {
        let Some(t) = ib.get(s.function.as_str()) else {
            continue;
        };
        if s.calls != t.calls {
            call_changes.push(CallChange {
                what: s.function.clone(),
                a: s.calls,
                b: t.calls,
                delta: delta(s.calls, t.calls),
            });
        }
        if s.total_ns != t.total_ns {
            time_changes.push(TimeChange {
                function: s.function.clone(),
                a_ns: s.total_ns,
                b_ns: t.total_ns,
                delta_ns: delta(s.total_ns, t.total_ns),
            });
        }
    }
    // Outcomes: over the functions of both traces, A's order first.
    let empty = FuncStats::default();
    let mut seen = std::collections::HashSet::new();
    for s in sa.iter().chain(sb.iter()) {
        if !seen.insert(s.function.as_str()) {
            continue;
        }
        let x = ia.get(s.function.as_str()).copied().unwrap_or(&empty);
        let y = ib.get(s.function.as_str()).copied().unwrap_or(&empty);
        // By errno: a typed return (`-25 (ENOTTY)`) is the same as a raw one (`-25`).
        if by_errno(&x.error_returns) != by_errno(&y.error_returns) {
            error_returns.push(OutcomeChange {
                function: s.function.clone(),
                a: x.error_returns.clone(),
                b: y.error_returns.clone(),
            });
        }
        // Only where the function was called in both: else it is in the only-in lists.
        if x.calls > 0 && y.calls > 0 && x.not_followed_reasons != y.not_followed_reasons {
            not_followed.push(OutcomeChange {
                function: s.function.clone(),
                a: x.not_followed_reasons.clone(),
                b: y.not_followed_reasons.clone(),
            });
        }
    }
    call_changes.sort_by(|x, y| {
        y.delta
            .unsigned_abs()
            .cmp(&x.delta.unsigned_abs())
            .then_with(|| x.what.cmp(&y.what))
    });
    time_changes.sort_by(|x, y| {
        y.delta_ns
            .unsigned_abs()
            .cmp(&x.delta_ns.unsigned_abs())
            .then_with(|| x.function.cmp(&y.function))
    });
    let side = |t: &Trace, g: &Graph, source: &str| Side {
        source: source.to_string(),
        summary: t.summary.clone(),
        total_ns: g.nodes.first().map_or(0, |r| r.total_ns),
    };
    Diff {
        a: side(a, &ga, source_a),
        b: side(b, &gb, source_b),
        functions_only_in_a: only_functions(&sa, &ib),
        functions_only_in_b: only_functions(&sb, &ia),
        paths_only_in_a: only_paths(&ga, &gb),
        paths_only_in_b: only_paths(&gb, &ga),
        error_returns,
        not_followed,
        call_changes,
        path_call_changes: path_changes(&ga, &gb),
        time_changes,
    }
}

fn signed(d: i64) -> String {
    if d > 0 {
        format!("+{}", d)
    } else {
        d.to_string()
    }
}

fn signed_time(d: i64) -> String {
    let t = time(d.unsigned_abs());
    if d >= 0 {
        format!("+{}", t)
    } else {
        format!("-{}", t)
    }
}

fn outcome_text(m: &BTreeMap<String, u64>) -> String {
    if m.is_empty() {
        "-".to_string()
    } else {
        reasons_text(m)
    }
}

/// Writes a section title and `table`, or `(none)`, and how many rows were cut.
fn section(w: &mut dyn Write, title: &str, total: usize, table: &Table) -> io::Result<()> {
    writeln!(w)?;
    writeln!(w, "== {} ({})", title, total)?;
    if table.is_empty() {
        writeln!(w, "   (none)")?;
        return Ok(());
    }
    table.write(w)
}

fn more(w: &mut dyn Write, total: usize, limit: usize) -> io::Result<()> {
    if total > limit {
        writeln!(w, "   ... and {} more (--limit)", total - limit)?;
    }
    Ok(())
}

/// Writes the diff as text; each list is cut at `limit` entries.
pub fn write_diff(w: &mut dyn Write, d: &Diff, limit: usize) -> io::Result<()> {
    writeln!(
        w,
        "# A: {}: {}, {} in top-level calls",
        d.a.source,
        describe(&d.a.summary),
        time(d.a.total_ns)
    )?;
    writeln!(
        w,
        "# B: {}: {}, {} in top-level calls",
        d.b.source,
        describe(&d.b.summary),
        time(d.b.total_ns)
    )?;

    for (title, list) in [
        ("Functions called only in A", &d.functions_only_in_a),
        ("Functions called only in B", &d.functions_only_in_b),
    ] {
        let mut t = Table::new(&[
            ("CALLS", Align::Right),
            ("TOTAL TIME", Align::Right),
            ("FUNCTION", Align::Left),
        ]);
        for f in list.iter().take(limit) {
            t.row(vec![
                f.calls.to_string(),
                time(f.total_ns),
                f.function.clone(),
            ]);
        }
        section(w, title, list.len(), &t)?;
        more(w, list.len(), limit)?;
    }
    for (title, list) in [
        ("Call paths only in A (outermost)", &d.paths_only_in_a),
        ("Call paths only in B (outermost)", &d.paths_only_in_b),
    ] {
        let mut t = Table::new(&[
            ("CALLS", Align::Right),
            ("TOTAL TIME", Align::Right),
            ("BELOW", Align::Right),
            ("PATH", Align::Left),
        ]);
        for p in list.iter().take(limit) {
            t.row(vec![
                p.calls.to_string(),
                time(p.total_ns),
                p.paths_below.to_string(),
                p.path.join(" > "),
            ]);
        }
        section(w, title, list.len(), &t)?;
        more(w, list.len(), limit)?;
    }
    for (title, list) in [
        ("Error returns that differ", &d.error_returns),
        ("Reasons not followed that differ", &d.not_followed),
    ] {
        let mut t = Table::new(&[
            ("FUNCTION", Align::Left),
            ("A", Align::Left),
            ("B", Align::Left),
        ]);
        for c in list.iter().take(limit) {
            t.row(vec![
                c.function.clone(),
                outcome_text(&c.a),
                outcome_text(&c.b),
            ]);
        }
        section(w, title, list.len(), &t)?;
        more(w, list.len(), limit)?;
    }
    for (title, list) in [
        (
            "Biggest changes in calls (functions in both)",
            &d.call_changes,
        ),
        (
            "Biggest changes in calls (paths in both)",
            &d.path_call_changes,
        ),
    ] {
        let mut t = Table::new(&[
            ("A", Align::Right),
            ("B", Align::Right),
            ("DELTA", Align::Right),
            ("FUNCTION", Align::Left),
        ]);
        for c in list.iter().take(limit) {
            t.row(vec![
                c.a.to_string(),
                c.b.to_string(),
                signed(c.delta),
                c.what.clone(),
            ]);
        }
        section(w, title, list.len(), &t)?;
        more(w, list.len(), limit)?;
    }
    let mut t = Table::new(&[
        ("A", Align::Right),
        ("B", Align::Right),
        ("DELTA", Align::Right),
        ("FUNCTION", Align::Left),
    ]);
    for c in d.time_changes.iter().take(limit) {
        t.row(vec![
            time(c.a_ns),
            time(c.b_ns),
            signed_time(c.delta_ns),
            c.function.clone(),
        ]);
    }
    section(
        w,
        "Biggest changes in total time (functions in both)",
        d.time_changes.len(),
        &t,
    )?;
    more(w, d.time_changes.len(), limit)
}

fn describe(s: &Summary) -> String {
    format!(
        "{} task{}, {} calls",
        s.tasks,
        crate::tree::plural(s.tasks as u64),
        s.calls
    )
}
