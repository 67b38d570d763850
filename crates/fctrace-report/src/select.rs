// SPDX-License-Identifier: GPL-2.0 OR MIT

//! The part of a trace a reader asks for, before any report: one task's trees
//! (`--task`), the subtrees of a function's calls (`--subtree`), only the calls that
//! took at least a given time (`--min-us`, as ftrace's `tracing_thresh`: a shorter
//! call goes with everything it called, which cannot have taken longer).

use crate::tree::{End, Node, NodeId, NodeKind, Thread, Trace};

/// What to keep; `None` keeps everything.
#[derive(Clone, Debug, Default)]
pub struct Selection {
    /// A task: `COMM-TID`, a thread id, or a command name (all its threads).
    pub task: Option<String>,
    /// A function (`name`, or `name [module]`): only the trees below its outermost calls,
    /// each call a root.
    pub subtree: Option<String>,
    /// Only calls whose total time is at least this many nanoseconds.
    pub min_ns: Option<u64>,
}

impl Selection {
    /// Whether it keeps everything.
    pub fn is_all(&self) -> bool {
        self.task.is_none() && self.subtree.is_none() && self.min_ns.is_none()
    }
}

fn task_matches(t: &Thread, want: &str) -> bool {
    t.task.to_string() == want || t.task.tid.to_string() == want || t.task.comm == want
}

/// The trace `trace` reduced to `sel`: the nodes kept, renumbered in the same order
/// (a node's children after it), each thread with the roots left to it; the counts of
/// calls, calls not followed, tasks and interrupts are those of what is kept, the others
/// (lines, lost events, what was mended) the whole input's.
pub fn select(trace: &Trace, sel: &Selection) -> Trace {
    if sel.is_all() {
        return trace.clone();
    }
    let mut out = Trace {
        nodes: Vec::new(),
        threads: Vec::new(),
        summary: trace.summary.clone(),
        anomalies: trace.anomalies.clone(),
    };
    let keep = |n: &Node| sel.min_ns.is_none_or(|m| n.total_ns >= m);
    for t in &trace.threads {
        if sel.task.as_deref().is_some_and(|w| !task_matches(t, w)) {
            continue;
        }
        // The roots: the thread's, or the outermost calls of the function below them.
        let mut roots: Vec<NodeId> = Vec::new();
        match &sel.subtree {
            None => roots.extend(&t.roots),
            Some(f) => {
                let mut stack: Vec<NodeId> = t.roots.iter().rev().copied().collect();
                while let Some(id) = stack.pop() {
                    let Some(n) = trace.nodes.get(id) else {
                        continue;
                    };
                    if n.is_call() && (n.name == *f || n.label() == *f) {
                        roots.push(id);
                    } else {
                        stack.extend(n.children.iter().rev().filter(|&&c| c > id));
                    }
                }
            }
        }
        let new_thread = out.threads.len();
        let mut new_roots = Vec::new();
        // Depth first, each node before its children: (old id, new parent).
        let mut stack: Vec<(NodeId, Option<NodeId>)> =
            roots.iter().rev().map(|&r| (r, None)).collect();
        while let Some((id, parent)) = stack.pop() {
            let Some(n) = trace.nodes.get(id) else {
                continue;
            };
            if !keep(n) {
                continue;
            }
            let new_id = out.nodes.len();
            let mut copy = n.clone();
            copy.parent = parent;
            copy.children = Vec::new();
            copy.thread = new_thread;
            out.nodes.push(copy);
            match parent.and_then(|p| out.nodes.get_mut(p)) {
                Some(p) => p.children.push(new_id),
                None => new_roots.push(new_id),
            }
            stack.extend(
                n.children
                    .iter()
                    .rev()
                    .filter(|&&c| c > id)
                    .map(|&c| (c, Some(new_id))),
            );
        }
        if !new_roots.is_empty() {
            out.threads.push(Thread {
                task: t.task.clone(),
                roots: new_roots,
                cpus: t.cpus.clone(),
            });
        }
    }
    let s = &mut out.summary;
    s.tasks = out.threads.len();
    s.calls = out.nodes.iter().filter(|n| n.is_call()).count() as u64;
    s.not_followed = out
        .nodes
        .iter()
        .filter(|n| n.end == End::NotFollowed)
        .count() as u64;
    s.interrupts = out
        .nodes
        .iter()
        .filter(|n| n.kind == NodeKind::Interrupt)
        .count() as u64;
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{load_str, LoadOptions};

    const T: &str = "\
 0)             t-7 |                 |  a() {
 0)             t-7 |        1.000 us  |    b(); /* ret=0x0 */
 0)             t-7 |                 |    c() {
 0)             t-7 |        5.000 us  |      d(); /* ret=0x10 */
 0)             t-7 |        8.000 us  |    } /* c ret=0x0 */
 0)             t-7 |       12.000 us  |  } /* a ret=0 */
 1)             u-9 |                 |  c() {
 1)             u-9 |        2.000 us  |    c(); /* ret=0x0 */
 1)             u-9 |        3.000 us  |  } /* c ret=0x0 */
";

    fn names(t: &Trace) -> Vec<String> {
        t.preorder(
            &t.threads
                .iter()
                .flat_map(|x| x.roots.clone())
                .collect::<Vec<_>>(),
        )
        .iter()
        .map(|&id| t.nodes[id].name.clone())
        .collect()
    }

    #[test]
    fn task_subtree_and_threshold() {
        let (tr, _) = load_str(T, LoadOptions::default()).unwrap();
        let all = select(&tr, &Selection::default());
        assert_eq!(names(&all), ["a", "b", "c", "d", "c", "c"]);
        let t7 = select(
            &tr,
            &Selection {
                task: Some("t-7".into()),
                ..Selection::default()
            },
        );
        assert_eq!(names(&t7), ["a", "b", "c", "d"]);
        assert_eq!((t7.summary.tasks, t7.summary.calls), (1, 4));
        let by_tid = select(
            &tr,
            &Selection {
                task: Some("9".into()),
                ..Selection::default()
            },
        );
        assert_eq!(names(&by_tid), ["c", "c"]);
        // The outermost calls of c only: u-9's inner c stays inside its caller.
        let c = select(
            &tr,
            &Selection {
                subtree: Some("c".into()),
                ..Selection::default()
            },
        );
        assert_eq!(names(&c), ["c", "d", "c", "c"]);
        assert_eq!(c.threads[0].roots.len(), 1);
        assert_eq!(c.nodes[c.threads[0].roots[0]].parent, None);
        let slow = select(
            &tr,
            &Selection {
                min_ns: Some(3000),
                ..Selection::default()
            },
        );
        assert_eq!(names(&slow), ["a", "c", "d", "c"]);
        // Children come after their parents, as in any trace.
        for (i, n) in slow.nodes.iter().enumerate() {
            assert!(n.children.iter().all(|&c| c > i));
        }
        let none = select(
            &tr,
            &Selection {
                task: Some("nobody".into()),
                ..Selection::default()
            },
        );
        assert_eq!((none.threads.len(), none.summary.calls), (0, 0));
    }
}
