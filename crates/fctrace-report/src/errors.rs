// SPDX-License-Identifier: GPL-2.0 OR MIT

//! Where an error came from (`fctrace-report errors`), as retsnoop answers it: each call
//! at the top of a tree (a system call, or a call of the start function) that returned a
//! negative errno, the deepest call below it where that value first appeared, and the
//! path from the top to it; the same path with the same value is counted once.
//!
//! The path follows the value down: below a call that returned `E`, the last of its
//! calls that returned `E` too (a function usually returns the error of the last call it
//! made); where none did, the value first appeared there. If that call has a call that
//! returned another errno, the error was probably converted from it, and that call is
//! named too.
//!
//! Return values as printed: a typed one (`-2 (ENOENT)`, with the `args` option), a raw
//! one (`-2`, `retval` alone), or a raw 32-bit one (`0xfffffffe`: a function returning
//! `int` leaves the upper half of `%rax` zero), each in the kernel's errno range
//! (`-4095..-1`). A raw value is a guess: a function that returns -1 for something other
//! than an error looks the same.

#[path = "../../fctrace-core/src/errno.rs"]
mod errno;

use crate::table::time;
use crate::tree::{NodeId, NodeKind, Trace};
use serde::Serialize;
use std::collections::{BTreeSet, HashMap};
use std::io::{self, Write};

/// The errno a return value as printed stands for (negative), if any.
pub fn errno_of(ret: &str) -> Option<i64> {
    let num = ret.split_whitespace().next()?;
    if let Some(hex) = num.strip_prefix("0x") {
        // A 32-bit `int` in a 64-bit register, zero-extended.
        let v = u64::from_str_radix(hex, 16).ok()?;
        return (0xffff_f001..=0xffff_ffff)
            .contains(&v)
            .then(|| v as i64 - 0x1_0000_0000);
    }
    let v: i64 = num.parse().ok()?;
    (-4095..0).contains(&v).then_some(v)
}

/// `-2 (ENOENT)`, or `-2` for a number the kernel has no name for.
pub fn errno_text(e: i64) -> String {
    match errno::errno_name(e.unsigned_abs()) {
        Some(n) if !n.is_empty() => format!("{} ({})", e, n),
        _ => e.to_string(),
    }
}

/// One call of the path from the top call to where the error first appeared.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Step {
    /// The function (`name`, or `name [module]`).
    pub function: String,
    /// Its return value as printed.
    pub ret: String,
}

/// An error path and how often it was taken.
#[derive(Clone, Debug, Serialize)]
pub struct ErrorPath {
    /// The errno (negative).
    pub errno: i64,
    /// The errno as `-2 (ENOENT)`.
    pub error: String,
    /// From the top call (first) to the call where the value first appeared (last).
    pub path: Vec<Step>,
    /// The origin's own call that returned another errno, if any (the error was
    /// probably converted from it): that call, and its errno.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub converted_from: Option<(String, String)>,
    /// How many top calls took this path with this value.
    pub count: u64,
    /// The threads (`COMM-TID`) that did.
    pub tasks: BTreeSet<String>,
    /// The line of the first such top call.
    pub first_line: usize,
    /// The longest of those top calls, in nanoseconds (if they have durations).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_ns: Option<u64>,
}

/// What the trace held.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Errors {
    /// Top calls (calls of the trees' first level).
    pub top_calls: u64,
    /// Of those, calls that returned an errno.
    pub failed: u64,
    /// Top calls without a return value (the `retval` option off, or their return not
    /// seen): nothing can be said of them.
    pub without_value: u64,
    /// The distinct paths, most taken first (then in order of first appearance).
    pub paths: Vec<ErrorPath>,
}

fn errno_of_node(trace: &Trace, id: NodeId) -> Option<i64> {
    trace.nodes.get(id)?.ret().and_then(errno_of)
}

/// The path from `top` (which returned `e`) down to where `e` first appeared, and the
/// origin's call that returned another errno, if any.
fn follow(trace: &Trace, top: NodeId, e: i64) -> (Vec<NodeId>, Option<(NodeId, i64)>) {
    let mut path = vec![top];
    let mut at = top;
    // Children have larger ids than their parents: the walk ends.
    loop {
        let Some(n) = trace.nodes.get(at) else { break };
        let next = n
            .children
            .iter()
            .rev()
            .copied()
            .find(|&c| errno_of_node(trace, c) == Some(e));
        match next {
            Some(c) if c > at => {
                path.push(c);
                at = c;
            }
            _ => break,
        }
    }
    let other = trace.nodes.get(at).and_then(|n| {
        n.children
            .iter()
            .rev()
            .find_map(|&c| errno_of_node(trace, c).map(|x| (c, x)))
    });
    (path, other)
}

/// The calls at the top of the trees: each thread's first level (an interrupt's tree
/// counts its own first level).
fn tops(trace: &Trace) -> Vec<NodeId> {
    let mut out = Vec::new();
    for t in &trace.threads {
        for &r in &t.roots {
            match trace.nodes.get(r) {
                Some(n) if n.kind == NodeKind::Interrupt => out.extend(
                    n.children
                        .iter()
                        .filter(|&&c| trace.nodes.get(c).is_some_and(|x| x.is_call())),
                ),
                Some(n) if n.is_call() => out.push(r),
                _ => {}
            }
        }
    }
    out.sort_unstable();
    out
}

/// The error paths of `trace`.
pub fn compute(trace: &Trace) -> Errors {
    let mut out = Errors::default();
    let mut index: HashMap<(i64, Vec<String>), usize> = HashMap::new();
    for top in tops(trace) {
        let Some(n) = trace.nodes.get(top) else {
            continue;
        };
        out.top_calls += 1;
        let Some(ret) = n.ret() else {
            out.without_value += 1;
            continue;
        };
        let Some(e) = errno_of(ret) else {
            continue;
        };
        out.failed += 1;
        let (ids, other) = follow(trace, top, e);
        let path: Vec<Step> = ids
            .iter()
            .filter_map(|&id| trace.nodes.get(id))
            .map(|x| Step {
                function: x.label(),
                ret: x.ret().unwrap_or_default().to_string(),
            })
            .collect();
        let converted_from = other.and_then(|(c, x)| {
            let c = trace.nodes.get(c)?;
            Some((c.label(), errno_text(x)))
        });
        let key = (e, path.iter().map(|s| s.function.clone()).collect());
        let task = trace
            .thread_of(top)
            .map(|t| t.task.to_string())
            .unwrap_or_default();
        let i = *index.entry(key).or_insert_with(|| {
            out.paths.push(ErrorPath {
                errno: e,
                error: errno_text(e),
                path,
                converted_from,
                count: 0,
                tasks: BTreeSet::new(),
                first_line: n.line_no,
                max_ns: None,
            });
            out.paths.len() - 1
        });
        if let Some(p) = out.paths.get_mut(i) {
            p.count += 1;
            p.tasks.insert(task);
            if let Some(d) = n.duration_ns {
                p.max_ns = Some(p.max_ns.map_or(d, |m| m.max(d)));
            }
        }
    }
    // Most taken first; a stable sort keeps the order of first appearance among equals.
    out.paths.sort_by(|a, b| b.count.cmp(&a.count));
    out
}

/// Writes the paths as text, at most `limit` of them.
pub fn write_text(w: &mut (impl Write + ?Sized), e: &Errors, limit: usize) -> io::Result<()> {
    writeln!(
        w,
        "# {} call{} at the top of a tree, {} returned an error ({} distinct path{})",
        e.top_calls,
        if e.top_calls == 1 { "" } else { "s" },
        e.failed,
        e.paths.len(),
        if e.paths.len() == 1 { "" } else { "s" }
    )?;
    if e.without_value > 0 {
        writeln!(
            w,
            "# {} top call{} without a return value (set `retval` in options to see them)",
            e.without_value,
            if e.without_value == 1 { "" } else { "s" }
        )?;
    }
    for p in e.paths.iter().take(limit) {
        let (Some(top), Some(origin)) = (p.path.first(), p.path.last()) else {
            continue;
        };
        writeln!(w)?;
        let tasks: Vec<&str> = p.tasks.iter().map(String::as_str).collect();
        write!(w, "{} = {}", top.function, p.error)?;
        if p.path.len() > 1 {
            write!(w, ", first returned by {}", origin.function)?;
        }
        write!(
            w,
            "  [{} time{}, {}, first at line {}",
            p.count,
            if p.count == 1 { "" } else { "s" },
            tasks.join(" "),
            p.first_line
        )?;
        if let Some(ns) = p.max_ns {
            write!(w, ", longest {}", time(ns).trim())?;
        }
        writeln!(w, "]")?;
        let width = p
            .path
            .iter()
            .enumerate()
            .map(|(i, s)| 2 * i + s.function.len())
            .max()
            .unwrap_or(0);
        for (i, s) in p.path.iter().enumerate() {
            let f = format!("{:indent$}{}", "", s.function, indent = 2 * i);
            write!(w, "    {:<width$}  ret={}", f, s.ret, width = width)?;
            if i + 1 == p.path.len() && p.path.len() > 1 {
                write!(w, "  <- first returned here")?;
            }
            writeln!(w)?;
        }
        if let Some((f, x)) = &p.converted_from {
            writeln!(w, "    (converted from {}'s {}?)", f, x)?;
        }
    }
    if e.paths.len() > limit {
        writeln!(
            w,
            "\n# {} more path(s) not shown (-n)",
            e.paths.len() - limit
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{load_str, LoadOptions};

    /// One line of a trace: CPU 0, task `t-7`, `depth` levels in, `text`.
    fn line(depth: usize, dur: &str, text: &str) -> String {
        format!(
            " 0)             t-7 | {:>15} |  {:indent$}{}\n",
            dur,
            "",
            text,
            indent = 2 * depth
        )
    }

    /// Three system calls: two fail the same way (`-2` from `c`, under `b`, the last of
    /// `a`'s calls to fail), one fails with `-22` that `a` converted from `d`'s `-2`,
    /// one succeeds; then a top call without a value.
    fn trace() -> String {
        let mut t = String::new();
        for _ in 0..2 {
            t += &line(0, "", "a() {");
            t += &line(1, "1.000 us", "x(); /* ret=-2 */");
            t += &line(1, "", "b() {");
            t += &line(2, "1.000 us", "c(); /* ret=-2 */");
            t += &line(1, "5.000 us", "} /* b ret=-2 */");
            t += &line(0, "9.000 us", "} /* a ret=-2 */");
        }
        t += &line(0, "", "a() {");
        t += &line(1, "1.000 us", "d(); /* ret=0xfffffffe */");
        t += &line(0, "3.000 us", "} /* a ret=-22 */");
        t += &line(0, "2.000 us", "a(); /* ret=0x0 */");
        t += &line(0, "2.000 us", "e();");
        t
    }

    #[test]
    fn paths_followed_counted_and_converted() {
        let (tr, _) = load_str(&trace(), LoadOptions::default()).unwrap();
        let e = compute(&tr);
        assert_eq!((e.top_calls, e.failed, e.without_value), (5, 3, 1));
        assert_eq!(e.paths.len(), 2);
        let p = &e.paths[0];
        assert_eq!(p.count, 2);
        assert_eq!(p.error, "-2 (ENOENT)");
        let fs: Vec<&str> = p.path.iter().map(|s| s.function.as_str()).collect();
        assert_eq!(fs, ["a", "b", "c"]);
        assert_eq!(p.converted_from, None);
        assert_eq!(p.max_ns, Some(9000));
        assert_eq!(p.first_line, 1);
        let q = &e.paths[1];
        assert_eq!((q.count, q.errno), (1, -22));
        assert_eq!(q.path.len(), 1);
        assert_eq!(
            q.converted_from,
            Some(("d".to_string(), "-2 (ENOENT)".to_string()))
        );
        let mut out = Vec::new();
        write_text(&mut out, &e, 20).unwrap();
        let out = String::from_utf8(out).unwrap();
        assert!(out.contains("a = -2 (ENOENT), first returned by c  [2 times, t-7, first at line 1, longest 9.000 us]"), "{}", out);
        assert!(out.contains("<- first returned here"), "{}", out);
        assert!(out.contains("(converted from d's -2 (ENOENT)?)"), "{}", out);
        assert!(out.contains("1 top call without a return value"), "{}", out);
        let mut one = Vec::new();
        write_text(&mut one, &e, 1).unwrap();
        assert!(String::from_utf8(one)
            .unwrap()
            .contains("1 more path(s) not shown"));
    }

    #[test]
    fn errno_values_as_printed() {
        assert_eq!(errno_of("-2 (ENOENT)"), Some(-2));
        assert_eq!(errno_of("-2"), Some(-2));
        assert_eq!(errno_of("0xfffffffe"), Some(-2));
        assert_eq!(errno_of("0xfffff001"), Some(-4095));
        assert_eq!(errno_of("0xfffff000"), None);
        assert_eq!(errno_of("0x0"), None);
        assert_eq!(errno_of("0"), None);
        assert_eq!(errno_of("-4096"), None);
        assert_eq!(errno_of("0xffff888001234500"), None);
        assert_eq!(errno_of("ptr:5d1c2e07"), None);
        assert_eq!(errno_of("true"), None);
        assert_eq!(errno_text(-2), "-2 (ENOENT)");
        assert_eq!(errno_text(-512), "-512 (ERESTARTSYS)");
        assert_eq!(errno_text(-41), "-41");
    }
}
