// SPDX-License-Identifier: GPL-2.0 OR MIT

//! The call graph merged over all calls, like `uftrace graph`: each distinct call path
//! (the functions from a root down to a call) is one node, with the number of calls
//! that took it and their times.

use crate::stats::reasons_text;
use crate::table::{time, Align, Table};
use crate::tree::{End, NodeId, NodeKind, Trace};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::io::{self, Write};

/// Index of a node in [`Graph::nodes`]; 0 is the root, which stands for no function.
pub type GraphId = usize;

/// One distinct call path.
#[derive(Clone, Debug, Default, Serialize)]
pub struct GraphNode {
    /// The node's index.
    pub id: GraphId,
    /// The parent's index (none for the root).
    pub parent: Option<GraphId>,
    /// Depth below the root (its children are at 1).
    pub depth: usize,
    /// The function (or `[irq]`, or a task's `COMM-TID` with `by_task`).
    pub function: String,
    /// Whether it stands for no function (the root, an interrupt, a task).
    pub synthetic: bool,
    /// Calls along this path.
    pub calls: u64,
    /// Their total time.
    pub total_ns: u64,
    /// Their self time.
    pub self_ns: u64,
    /// Calls not followed, by reason.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub not_followed: BTreeMap<String, u64>,
    /// Frames never closed.
    #[serde(skip_serializing_if = "is_zero")]
    pub incomplete: u64,
    /// Frames open while events of their thread may have been lost (their subtree may
    /// lack calls).
    #[serde(skip_serializing_if = "is_zero")]
    pub lost_inside: u64,
    /// Frames whose opening line was lost (rebuilt from their `}`, or `[unknown]`).
    #[serde(skip_serializing_if = "is_zero")]
    pub opening_lost: u64,
    /// How much the calls inside these frames add up to more than their durations
    /// (inconsistent durations; see [`crate::tree::Node::overrun_ns`]).
    #[serde(skip_serializing_if = "is_zero")]
    pub overrun_ns: u64,
    /// The children, in order of first appearance.
    #[serde(skip)]
    pub children: Vec<GraphId>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A merged call graph.
#[derive(Clone, Debug)]
pub struct Graph {
    /// The nodes; 0 is the root.
    pub nodes: Vec<GraphNode>,
    index: HashMap<(GraphId, String), GraphId>,
}

impl Default for Graph {
    fn default() -> Self {
        Graph::new()
    }
}

impl Graph {
    /// A graph with only its root.
    pub fn new() -> Graph {
        Graph {
            nodes: vec![GraphNode {
                synthetic: true,
                ..GraphNode::default()
            }],
            index: HashMap::new(),
        }
    }

    /// The child of `parent` for `function`, if any.
    pub fn child(&self, parent: GraphId, function: &str) -> Option<GraphId> {
        self.index.get(&(parent, function.to_string())).copied()
    }

    /// The child of `parent` for `function`, made if needed.
    fn child_or_new(&mut self, parent: GraphId, function: &str, synthetic: bool) -> GraphId {
        if let Some(g) = self.child(parent, function) {
            return g;
        }
        let id = self.nodes.len();
        let depth = self.nodes.get(parent).map_or(0, |p| p.depth + 1);
        self.nodes.push(GraphNode {
            id,
            parent: Some(parent),
            depth,
            function: function.to_string(),
            synthetic,
            ..GraphNode::default()
        });
        if let Some(p) = self.nodes.get_mut(parent) {
            p.children.push(id);
        }
        self.index.insert((parent, function.to_string()), id);
        id
    }

    /// Merges the tree under trace node `root` (included) into the graph under `under`.
    pub fn add_subtree(&mut self, trace: &Trace, labels: &[String], root: NodeId, under: GraphId) {
        let mut stack = vec![(root, under)];
        while let Some((id, gparent)) = stack.pop() {
            let (Some(n), Some(label)) = (trace.nodes.get(id), labels.get(id)) else {
                continue;
            };
            let g = self.child_or_new(gparent, label, n.kind != NodeKind::Call);
            if let Some(gn) = self.nodes.get_mut(g) {
                if n.kind == NodeKind::Call {
                    gn.calls += 1;
                }
                gn.total_ns = gn.total_ns.saturating_add(n.total_ns);
                gn.self_ns = gn.self_ns.saturating_add(n.self_ns);
                if let Some(r) = n.not_followed() {
                    *gn.not_followed.entry(r.to_string()).or_default() += 1;
                }
                if n.end == End::Incomplete {
                    gn.incomplete += 1;
                }
                if n.lost_inside {
                    gn.lost_inside += 1;
                }
                if n.opening_lost {
                    gn.opening_lost += 1;
                }
                gn.overrun_ns = gn.overrun_ns.saturating_add(n.overrun_ns);
            }
            stack.extend(n.children.iter().rev().map(|&c| (c, g)));
        }
    }

    /// Adds `ns` to the total of `g` and of its ancestors up to the root (for what the
    /// synthetic levels above the merged subtrees hold).
    fn add_total_up(&mut self, mut g: GraphId, ns: u64) {
        loop {
            let Some(n) = self.nodes.get_mut(g) else {
                return;
            };
            n.total_ns = n.total_ns.saturating_add(ns);
            match n.parent {
                Some(p) => g = p,
                None => return,
            }
        }
    }

    /// The functions from the root's child down to `g`.
    pub fn path(&self, mut g: GraphId) -> Vec<&str> {
        let mut v = Vec::new();
        while let Some(n) = self.nodes.get(g) {
            let Some(p) = n.parent else {
                break;
            };
            v.push(n.function.as_str());
            g = p;
        }
        v.reverse();
        v
    }

    /// The nodes in depth-first order (each before its children), the root left out.
    pub fn preorder(&self) -> Vec<GraphId> {
        let mut out = Vec::new();
        let mut stack: Vec<GraphId> = self
            .nodes
            .first()
            .map(|r| r.children.iter().rev().copied().collect())
            .unwrap_or_default();
        while let Some(g) = stack.pop() {
            out.push(g);
            if let Some(n) = self.nodes.get(g) {
                stack.extend(n.children.iter().rev());
            }
        }
        out
    }

    /// The sum of the calls of all nodes: the number of calls merged in.
    pub fn total_calls(&self) -> u64 {
        self.nodes.iter().map(|n| n.calls).sum()
    }
}

/// The graph of the whole trace: every thread's tree merged, the threads' trees side by
/// side (`by_task`: under a level for each thread, `COMM-TID`).
pub fn whole(trace: &Trace, by_task: bool) -> Graph {
    let labels = trace.labels();
    let mut g = Graph::new();
    for t in &trace.threads {
        let under = if by_task {
            g.child_or_new(0, &t.task.to_string(), true)
        } else {
            0
        };
        for &r in &t.roots {
            g.add_subtree(trace, &labels, r, under);
            let total = trace.nodes.get(r).map_or(0, |n| n.total_ns);
            g.add_total_up(under, total);
        }
    }
    g
}

/// A distinct way of reaching a function: the functions from a root to it.
#[derive(Clone, Debug, Serialize)]
pub struct Backtrace {
    /// The path, outermost first, the function last.
    pub path: Vec<String>,
    /// Calls of the function along it.
    pub calls: u64,
    /// Their total time.
    pub total_ns: u64,
}

/// The graph of `function`: all its calls (those not nested in another call of it)
/// merged as one root, and the distinct paths that reached it. `None` if the trace
/// never calls it. `function` matches a node's name or its label (`name [module]`).
pub fn focused(trace: &Trace, function: &str) -> Option<(Graph, Vec<Backtrace>)> {
    let labels = trace.labels();
    let matches = |id: NodeId| {
        trace.nodes.get(id).is_some_and(|n| {
            n.kind == NodeKind::Call
                && (n.name == function || labels.get(id).is_some_and(|l| l == function))
        })
    };
    let mut g = Graph::new();
    let mut traces: BTreeMap<Vec<String>, (u64, u64, usize)> = BTreeMap::new();
    let mut found = false;
    for t in &trace.threads {
        // Depth-first; below a match, no other match is taken as a root.
        let mut stack: Vec<(NodeId, bool)> = t.roots.iter().rev().map(|&r| (r, false)).collect();
        while let Some((id, inside)) = stack.pop() {
            let Some(n) = trace.nodes.get(id) else {
                continue;
            };
            if !inside && matches(id) {
                found = true;
                g.add_subtree(trace, &labels, id, 0);
                g.add_total_up(0, n.total_ns);
                let mut path = Vec::new();
                let mut cur = Some(id);
                while let Some(c) = cur {
                    path.push(labels.get(c).cloned().unwrap_or_default());
                    cur = trace.nodes.get(c).and_then(|x| x.parent);
                }
                path.reverse();
                let order = traces.len();
                let e = traces.entry(path).or_insert((0, 0, order));
                e.0 += 1;
                e.1 = e.1.saturating_add(n.total_ns);
                continue;
            }
            stack.extend(n.children.iter().rev().map(|&c| (c, inside)));
        }
    }
    if !found {
        return None;
    }
    let mut bt: Vec<(usize, Backtrace)> = traces
        .into_iter()
        .map(|(path, (calls, total_ns, order))| {
            (
                order,
                Backtrace {
                    path,
                    calls,
                    total_ns,
                },
            )
        })
        .collect();
    bt.sort_by_key(|(order, _)| *order);
    Some((g, bt.into_iter().map(|(_, b)| b).collect()))
}

/// Writes the graph as an indented tree with times and call counts: `max_depth` limits
/// how deep (1: the roots only).
pub fn write_graph(w: &mut dyn Write, g: &Graph, max_depth: Option<usize>) -> io::Result<()> {
    let mut t = Table::new(&[
        ("TOTAL TIME", Align::Right),
        ("SELF TIME", Align::Right),
        ("CALLS", Align::Right),
        ("FUNCTION", Align::Left),
    ]);
    // (node, prefix of its line, connector of its line)
    let mut stack: Vec<(GraphId, String, &str)> = Vec::new();
    let roots = g
        .nodes
        .first()
        .map(|r| r.children.clone())
        .unwrap_or_default();
    for &r in roots.iter().rev() {
        stack.push((r, String::new(), ""));
    }
    while let Some((id, prefix, connector)) = stack.pop() {
        let Some(n) = g.nodes.get(id) else {
            continue;
        };
        let mut function = format!("{}{}{}", prefix, connector, n.function);
        if !n.not_followed.is_empty() {
            function += &format!("  [not followed: {}]", reasons_text(&n.not_followed));
        }
        if n.incomplete > 0 {
            function += &format!("  [incomplete: {}]", n.incomplete);
        }
        if n.lost_inside > 0 {
            function += &format!("  [events lost inside: {}]", n.lost_inside);
        }
        if n.opening_lost > 0 && !n.synthetic {
            function += &format!("  [opening lost: {}]", n.opening_lost);
        }
        if n.overrun_ns > 0 {
            function += &format!(
                "  [calls inside longer by {}]",
                time(n.overrun_ns).trim_start()
            );
        }
        let deeper = max_depth.is_none_or(|m| n.depth < m);
        if !deeper && !n.children.is_empty() {
            function += "  ...";
        }
        // A synthetic level has no calls; only an `[unknown]` frame has a time of its own.
        let (self_time, calls) = if n.synthetic {
            let own = if n.self_ns > 0 {
                time(n.self_ns)
            } else {
                "-".to_string()
            };
            (own, "-".to_string())
        } else {
            (time(n.self_ns), n.calls.to_string())
        };
        t.row(vec![time(n.total_ns), self_time, calls, function]);
        if !deeper {
            continue;
        }
        // The children's lines continue this node's level: `|  ` if more siblings
        // follow it, blanks if it was the last.
        let child_prefix = match connector {
            "" => prefix.clone(),
            "`- " => format!("{}   ", prefix),
            _ => format!("{}|  ", prefix),
        };
        let count = n.children.len();
        for (i, &c) in n.children.iter().enumerate().rev() {
            let own = if i + 1 == count { "`- " } else { "+- " };
            stack.push((c, child_prefix.clone(), own));
        }
    }
    t.write(w)
}

/// Writes the backtraces of a focused graph.
pub fn write_backtraces(w: &mut dyn Write, bt: &[Backtrace]) -> io::Result<()> {
    let mut t = Table::new(&[
        ("TOTAL TIME", Align::Right),
        ("CALLS", Align::Right),
        ("PATH", Align::Left),
    ]);
    for b in bt {
        t.row(vec![
            time(b.total_ns),
            b.calls.to_string(),
            b.path.join(" > "),
        ]);
    }
    t.write(w)
}
