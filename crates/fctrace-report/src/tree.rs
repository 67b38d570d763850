// SPDX-License-Identifier: GPL-2.0 OR MIT

//! Per-thread call trees built from the parsed events.
//!
//! The nodes of all threads live in one arena ([`Trace::nodes`]); a node's children have
//! larger ids than the node, so a pass over the ids in reverse order visits children
//! before their parents (every computation here is a loop, none recurses: a deep or
//! malicious trace cannot overflow the stack).
//!
//! Matching is by structure and checked against the indentation: a call at depth `d`
//! first closes, as *incomplete*, the open frames at depth `d` or deeper (their returns
//! were lost); a `}` at depth `d` closes the frames deeper than `d` as incomplete, then
//! the frame at depth `d`; a `}` with no frame at its depth is counted as unmatched and
//! dropped. Frames still open at the end of the input are closed as incomplete. A
//! `CPU:N [LOST M EVENTS]` line marks the frames open in the threads last seen on CPU `N`
//! as having lost events inside them. Interrupt trees (between `==========> irq` and
//! `<========== irq`) are a nested context of the thread: they are laid under a
//! synthetic node named by the interrupt's kind (`[irq]`), placed where the interrupt
//! came (under the frame open at that moment).

use crate::parse::{Args, Body, Call, Event, Notes, Parsed, Task};
use serde::Serialize;
use std::collections::{BTreeSet, HashMap};

/// Index of a node in [`Trace::nodes`].
pub type NodeId = usize;

/// What a node stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeKind {
    /// A function call.
    Call,
    /// An interrupt's tree (synthetic: not a call).
    Interrupt,
}

/// How a node ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum End {
    /// A frame `f() {` closed by its `}`.
    Returned,
    /// A one-line call `f();` that was followed.
    Leaf,
    /// A one-line call `f(); /* not followed: REASON */`.
    NotFollowed,
    /// A frame whose `}` never came (end of input, lost events, or an interrupt's end).
    Incomplete,
    /// An interrupt node.
    Interrupt,
}

/// A call (or interrupt) in a thread's tree.
#[derive(Clone, Debug, Serialize)]
pub struct Node {
    /// Call or interrupt.
    pub kind: NodeKind,
    /// The function's name (or the interrupt's kind: `irq`, `softirq`).
    pub name: String,
    /// The function's module, if any.
    pub module: Option<String>,
    /// The call's arguments.
    pub args: Args,
    /// The notes of the opening (or one-line) line.
    pub notes: Notes,
    /// The notes of the closing line, if the frame was closed by one.
    pub close_notes: Option<Notes>,
    /// The duration the trace gives, in nanoseconds.
    pub duration_ns: Option<u64>,
    /// How the node ended.
    pub end: End,
    /// Whether events were lost (on its thread's CPU) while this frame was open.
    pub lost_inside: bool,
    /// The parent node, if any (else a root of its thread).
    pub parent: Option<NodeId>,
    /// The children, in order.
    pub children: Vec<NodeId>,
    /// Index of the thread in [`Trace::threads`].
    pub thread: usize,
    /// The CPU of the opening line.
    pub cpu: u32,
    /// The depth given by the opening line's indentation.
    pub depth: usize,
    /// The opening line's number.
    pub line_no: usize,
    /// Total time: the duration; without one (a frame never closed, a call not
    /// followed), or for an interrupt node, the children's totals together (0 for a
    /// leaf): the call's own time then counts 0.
    pub total_ns: u64,
    /// Self time: total minus the children's totals (0 if they exceed it).
    pub self_ns: u64,
}

impl Node {
    /// A node with nothing known yet but where it is.
    fn new(
        kind: NodeKind,
        name: String,
        thread: usize,
        cpu: u32,
        depth: usize,
        line_no: usize,
    ) -> Node {
        Node {
            kind,
            name,
            module: None,
            args: Args::None,
            notes: Notes::default(),
            close_notes: None,
            duration_ns: None,
            end: End::Interrupt,
            lost_inside: false,
            parent: None,
            children: Vec::new(),
            thread,
            cpu,
            depth,
            line_no,
            total_ns: 0,
            self_ns: 0,
        }
    }

    /// The name that identifies the function in reports: `name`, `name [module]`, or
    /// `[irq]` for an interrupt node.
    pub fn label(&self) -> String {
        match (&self.kind, &self.module) {
            (NodeKind::Interrupt, _) => format!("[{}]", self.name),
            (NodeKind::Call, Some(m)) => format!("{} [{}]", self.name, m),
            (NodeKind::Call, None) => self.name.clone(),
        }
    }

    /// Whether this node is a call (not a synthetic interrupt node).
    pub fn is_call(&self) -> bool {
        self.kind == NodeKind::Call
    }

    /// The return value, as printed (closing line, or one-line call).
    pub fn ret(&self) -> Option<&str> {
        self.close_notes
            .as_ref()
            .and_then(|n| n.ret.as_deref())
            .or(self.notes.ret.as_deref())
    }

    /// Why the call was not followed, if it was not.
    pub fn not_followed(&self) -> Option<&str> {
        self.notes.not_followed.as_deref()
    }
}

/// A thread of the trace.
#[derive(Clone, Debug, Serialize)]
pub struct Thread {
    /// Its command name (the last one seen) and thread id.
    pub task: Task,
    /// Its top-level nodes, in order.
    pub roots: Vec<NodeId>,
    /// The CPUs its lines were recorded on.
    pub cpus: BTreeSet<u32>,
}

/// Counts of what the input held and of what did not fit together.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Summary {
    /// Lines read.
    pub lines: usize,
    /// Lines skipped as unparseable (`--lenient`).
    pub skipped_lines: usize,
    /// Threads.
    pub tasks: usize,
    /// Calls: opening lines plus one-line calls.
    pub calls: u64,
    /// One-line calls that were not followed.
    pub not_followed: u64,
    /// Closing lines.
    pub closes: u64,
    /// `LOST` lines.
    pub lost_markers: u64,
    /// Events those lines say were lost.
    pub lost_events: u64,
    /// `}` lines with no open frame at their depth (dropped).
    pub unmatched_closes: u64,
    /// Frames never closed by a `}` (closed at a shallower line or at the end).
    pub incomplete_frames: u64,
    /// `}` lines whose comment names another function than the frame they close.
    pub close_name_mismatches: u64,
    /// Interrupt trees.
    pub interrupts: u64,
    /// `<==========` lines with no interrupt open.
    pub unmatched_interrupt_exits: u64,
}

/// The call trees of a whole trace.
#[derive(Clone, Debug, Default)]
pub struct Trace {
    /// All nodes of all threads.
    pub nodes: Vec<Node>,
    /// The threads, in order of first appearance.
    pub threads: Vec<Thread>,
    /// Counts.
    pub summary: Summary,
    /// The first anomalies met (unmatched closes, incomplete frames...), with line
    /// numbers: at most [`MAX_ANOMALIES`].
    pub anomalies: Vec<String>,
}

/// How many anomalies [`Trace::anomalies`] keeps.
pub const MAX_ANOMALIES: usize = 50;

/// Options for building the trees.
#[derive(Clone, Copy, Debug, Default)]
pub struct BuildOptions {
    /// Cut compiler suffixes (`.isra.0`, `.constprop.0`, `.part.0`, `.cold`...) from
    /// function names, so that variants of one function count as one.
    pub merge_suffixes: bool,
    /// Leave interrupt trees out.
    pub no_irqs: bool,
}

/// `name` without its compiler suffixes: everything from the first `.` on.
pub fn strip_suffixes(name: &str) -> &str {
    match name.find('.') {
        Some(i) if i > 0 => name.get(..i).unwrap_or(name),
        _ => name,
    }
}

/// One context of a thread: its own, or an interrupt's.
#[derive(Default)]
struct Ctx {
    /// Open frames, outermost first.
    stack: Vec<NodeId>,
    /// The interrupt node this context hangs from.
    irq: Option<NodeId>,
}

struct ThreadState {
    /// The thread's own context first, then the interrupts nested in it.
    contexts: Vec<Ctx>,
    last_cpu: u32,
}

/// Builds the trees event by event (see [`build`]).
pub struct Builder {
    trace: Trace,
    states: Vec<ThreadState>,
    by_tid: HashMap<u32, usize>,
    opts: BuildOptions,
}

impl Builder {
    fn anomaly(&mut self, text: String) {
        if self.trace.anomalies.len() < MAX_ANOMALIES {
            self.trace.anomalies.push(text);
        }
    }

    fn thread(&mut self, task: &Task, cpu: u32) -> usize {
        let ti = match self.by_tid.get(&task.tid) {
            Some(&ti) => ti,
            None => {
                let ti = self.trace.threads.len();
                self.trace.threads.push(Thread {
                    task: task.clone(),
                    roots: Vec::new(),
                    cpus: BTreeSet::new(),
                });
                self.states.push(ThreadState {
                    contexts: vec![Ctx::default()],
                    last_cpu: cpu,
                });
                self.by_tid.insert(task.tid, ti);
                ti
            }
        };
        if let Some(t) = self.trace.threads.get_mut(ti) {
            if t.task.comm != task.comm {
                // A new name (exec): the thread is shown by its last one.
                t.task.comm.clone_from(&task.comm);
            }
            t.cpus.insert(cpu);
        }
        if let Some(s) = self.states.get_mut(ti) {
            s.last_cpu = cpu;
        }
        ti
    }

    /// The innermost context of thread `ti`.
    fn ctx(&mut self, ti: usize) -> Option<&mut Ctx> {
        self.states.get_mut(ti).and_then(|s| s.contexts.last_mut())
    }

    /// Closes `id` as incomplete.
    fn close_incomplete(&mut self, id: NodeId, why: &str, line_no: usize) {
        self.trace.summary.incomplete_frames += 1;
        let mut text = None;
        if let Some(n) = self.trace.nodes.get_mut(id) {
            n.end = End::Incomplete;
            text = Some(format!(
                "line {}: frame {} (opened at line {}) {}",
                line_no,
                n.label(),
                n.line_no,
                why
            ));
        }
        if let Some(t) = text {
            self.anomaly(t);
        }
    }

    /// Pops the frames of the innermost context of `ti` whose depth is at least `min`
    /// (`inclusive`) or above it, closing them as incomplete.
    fn pop_deeper(&mut self, ti: usize, depth: usize, inclusive: bool, line_no: usize) {
        loop {
            let Some(ctx) = self.ctx(ti) else {
                return;
            };
            let Some(&top) = ctx.stack.last() else {
                return;
            };
            let top_depth = self.trace.nodes.get(top).map_or(0, |n| n.depth);
            let deeper = if inclusive {
                top_depth >= depth
            } else {
                top_depth > depth
            };
            if !deeper {
                return;
            }
            if let Some(ctx) = self.ctx(ti) {
                ctx.stack.pop();
            }
            self.close_incomplete(top, "has no `}`: its return was not in the trace", line_no);
        }
    }

    /// Adds a node under the innermost open frame (or interrupt) of `ti`.
    fn add_node(&mut self, ti: usize, mut node: Node) -> NodeId {
        let id = self.trace.nodes.len();
        let parent = self.ctx(ti).and_then(|c| c.stack.last().copied().or(c.irq));
        node.parent = parent;
        match parent.and_then(|p| self.trace.nodes.get_mut(p)) {
            Some(p) => p.children.push(id),
            None => {
                if let Some(t) = self.trace.threads.get_mut(ti) {
                    t.roots.push(id);
                }
            }
        }
        self.trace.nodes.push(node);
        id
    }

    /// Adds the event of line `line_no`.
    pub fn push(&mut self, line_no: usize, ev: Event) {
        let t = match ev {
            Event::Lost { cpu, count } => {
                self.lost(cpu, count);
                return;
            }
            Event::Task(t) => *t,
        };
        let ti = self.thread(&t.task, t.cpu);
        match t.body {
            Body::Open(call) => self.call(ti, line_no, t.cpu, t.depth, None, call, true),
            Body::Leaf(call) => self.call(ti, line_no, t.cpu, t.depth, t.duration_ns, call, false),
            Body::Close { name, notes } => {
                self.close(ti, line_no, &t.task, t.depth, t.duration_ns, name, notes)
            }
            Body::IrqEnter { what } => {
                self.trace.summary.interrupts += 1;
                let node = Node::new(NodeKind::Interrupt, what, ti, t.cpu, t.depth, line_no);
                let id = self.add_node(ti, node);
                if let Some(s) = self.states.get_mut(ti) {
                    s.contexts.push(Ctx {
                        stack: Vec::new(),
                        irq: Some(id),
                    });
                }
            }
            Body::IrqExit { .. } => {
                let nested = self.states.get(ti).is_some_and(|s| s.contexts.len() > 1);
                if !nested {
                    self.trace.summary.unmatched_interrupt_exits += 1;
                    self.anomaly(format!(
                        "line {}: interrupt end of {} with no interrupt open (ignored)",
                        line_no, t.task
                    ));
                    return;
                }
                self.pop_deeper(ti, 0, true, line_no);
                if let Some(s) = self.states.get_mut(ti) {
                    s.contexts.pop();
                }
            }
        }
    }

    /// `CPU:N [LOST M EVENTS]`.
    fn lost(&mut self, cpu: u32, count: u64) {
        self.trace.summary.lost_markers += 1;
        self.trace.summary.lost_events = self.trace.summary.lost_events.saturating_add(count);
        for s in self.states.iter().filter(|s| s.last_cpu == cpu) {
            for id in s.contexts.iter().flat_map(|c| c.stack.iter()) {
                if let Some(n) = self.trace.nodes.get_mut(*id) {
                    n.lost_inside = true;
                }
            }
        }
    }

    /// A call that opens a frame (`open`) or a one-line call.
    #[allow(clippy::too_many_arguments)]
    fn call(
        &mut self,
        ti: usize,
        line_no: usize,
        cpu: u32,
        depth: usize,
        duration_ns: Option<u64>,
        call: Call,
        open: bool,
    ) {
        self.trace.summary.calls += 1;
        self.pop_deeper(ti, depth, true, line_no);
        let name = if self.opts.merge_suffixes {
            strip_suffixes(&call.name).to_string()
        } else {
            call.name
        };
        let mut node = Node::new(NodeKind::Call, name, ti, cpu, depth, line_no);
        node.end = if open {
            // Closed by its `}`, or found incomplete.
            End::Incomplete
        } else if call.notes.not_followed.is_some() {
            self.trace.summary.not_followed += 1;
            End::NotFollowed
        } else {
            End::Leaf
        };
        node.duration_ns = duration_ns;
        node.module = call.module;
        node.args = call.args;
        node.notes = call.notes;
        let id = self.add_node(ti, node);
        if open {
            if let Some(c) = self.ctx(ti) {
                c.stack.push(id);
            }
        }
    }

    /// A closing line.
    #[allow(clippy::too_many_arguments)]
    fn close(
        &mut self,
        ti: usize,
        line_no: usize,
        task: &Task,
        depth: usize,
        duration_ns: Option<u64>,
        name: Option<String>,
        notes: Notes,
    ) {
        self.trace.summary.closes += 1;
        self.pop_deeper(ti, depth, false, line_no);
        let top = self.ctx(ti).and_then(|c| c.stack.last().copied());
        let matched = top.filter(|&id| self.trace.nodes.get(id).is_some_and(|n| n.depth == depth));
        let Some(id) = matched else {
            self.trace.summary.unmatched_closes += 1;
            self.anomaly(format!(
                "line {}: `}}` of {} at depth {} with no open frame there{} (dropped)",
                line_no,
                task,
                depth,
                name.as_ref()
                    .map(|n| format!(" ({})", n))
                    .unwrap_or_default()
            ));
            return;
        };
        if let Some(c) = self.ctx(ti) {
            c.stack.pop();
        }
        let merge = self.opts.merge_suffixes;
        let mut mismatch = None;
        if let Some(n) = self.trace.nodes.get_mut(id) {
            n.duration_ns = duration_ns;
            n.close_notes = Some(notes);
            n.end = End::Returned;
            if let Some(name) = name {
                let base = if merge { strip_suffixes(&name) } else { &name };
                if base != n.name {
                    mismatch = Some(format!(
                        "line {}: `}}` names {} but closes {} (opened at line {})",
                        line_no, name, n.name, n.line_no
                    ));
                }
            }
        }
        if let Some(m) = mismatch {
            self.trace.summary.close_name_mismatches += 1;
            self.anomaly(m);
        }
    }

    /// The trees: `lines` lines read, `skipped` of them skipped as unparseable.
    pub fn finish(mut self, lines: usize, skipped: usize) -> Trace {
        self.trace.summary.lines = lines;
        self.trace.summary.skipped_lines = skipped;
        // Frames still open at the end of the input.
        for ti in 0..self.states.len() {
            while let Some(s) = self.states.get_mut(ti) {
                let Some(ctx) = s.contexts.last_mut() else {
                    break;
                };
                match ctx.stack.pop() {
                    Some(id) => {
                        self.close_incomplete(id, "still open at the end of the trace", lines)
                    }
                    None => {
                        if s.contexts.len() <= 1 {
                            break;
                        }
                        s.contexts.pop();
                    }
                }
            }
        }
        let mut trace = self.trace;
        trace.summary.tasks = trace.threads.len();
        if self.opts.no_irqs {
            trace = without_interrupts(trace);
        }
        compute_times(&mut trace.nodes);
        trace
    }
}

/// Totals and self times, children before parents (children have larger ids).
fn compute_times(nodes: &mut [Node]) {
    for id in (0..nodes.len()).rev() {
        let Some(n) = nodes.get(id) else {
            continue;
        };
        let children_total = n
            .children
            .iter()
            .filter_map(|&c| nodes.get(c))
            .fold(0u64, |acc, c| acc.saturating_add(c.total_ns));
        // A frame with no duration (never closed, or durations off) took at least what
        // its children took: its own time counts 0.
        let total = match n.kind {
            NodeKind::Call => n.duration_ns.unwrap_or(children_total),
            NodeKind::Interrupt => children_total,
        };
        if let Some(n) = nodes.get_mut(id) {
            n.total_ns = total;
            n.self_ns = total.saturating_sub(children_total);
        }
    }
}

/// The trace without its interrupt nodes and everything under them.
fn without_interrupts(mut trace: Trace) -> Trace {
    let mut map: Vec<Option<NodeId>> = Vec::with_capacity(trace.nodes.len());
    let mut kept = Vec::new();
    for n in std::mem::take(&mut trace.nodes) {
        let parent_kept = match n.parent {
            Some(p) => map.get(p).copied().flatten().map(Some),
            None => Some(None),
        };
        match parent_kept {
            Some(new_parent) if n.is_call() => {
                map.push(Some(kept.len()));
                let mut n = n;
                n.parent = new_parent;
                kept.push(n);
            }
            _ => map.push(None),
        }
    }
    for n in kept.iter_mut() {
        n.children = n
            .children
            .iter()
            .filter_map(|&c| map.get(c).copied().flatten())
            .collect();
    }
    for t in trace.threads.iter_mut() {
        t.roots = t
            .roots
            .iter()
            .filter_map(|&c| map.get(c).copied().flatten())
            .collect();
    }
    trace.nodes = kept;
    trace
}

impl Builder {
    /// A builder with no event yet.
    pub fn new(opts: BuildOptions) -> Builder {
        Builder {
            trace: Trace::default(),
            states: Vec::new(),
            by_tid: HashMap::new(),
            opts,
        }
    }
}

/// Builds the call trees of a parsed input.
pub fn build(parsed: &Parsed, opts: BuildOptions) -> Trace {
    let mut b = Builder::new(opts);
    for (line_no, ev) in &parsed.events {
        b.push(*line_no, ev.clone());
    }
    b.finish(parsed.lines, parsed.skipped.len())
}

impl Trace {
    /// The label of every node, computed once.
    pub fn labels(&self) -> Vec<String> {
        self.nodes.iter().map(Node::label).collect()
    }

    /// The thread of node `id`.
    pub fn thread_of(&self, id: NodeId) -> Option<&Thread> {
        self.nodes.get(id).and_then(|n| self.threads.get(n.thread))
    }

    /// The nodes under `roots` (included) in depth-first order, each before its children.
    pub fn preorder(&self, roots: &[NodeId]) -> Vec<NodeId> {
        let mut out = Vec::new();
        let mut stack: Vec<NodeId> = roots.iter().rev().copied().collect();
        while let Some(id) = stack.pop() {
            out.push(id);
            if let Some(n) = self.nodes.get(id) {
                stack.extend(n.children.iter().rev());
            }
        }
        out
    }

    /// A one-line description of the counts: `1 task, 170 calls (...)`.
    pub fn describe(&self) -> String {
        let s = &self.summary;
        let mut text = format!(
            "{} line{}, {} task{}, {} call{} ({} not followed)",
            s.lines,
            plural(s.lines as u64),
            s.tasks,
            plural(s.tasks as u64),
            s.calls,
            plural(s.calls),
            s.not_followed
        );
        if s.interrupts > 0 {
            text += &format!(", {} interrupt{}", s.interrupts, plural(s.interrupts));
        }
        if s.lost_markers > 0 {
            text += &format!(
                ", {} event{} lost ({} LOST line{})",
                s.lost_events,
                plural(s.lost_events),
                s.lost_markers,
                plural(s.lost_markers)
            );
        }
        if s.incomplete_frames > 0 {
            text += &format!(
                ", {} incomplete frame{}",
                s.incomplete_frames,
                plural(s.incomplete_frames)
            );
        }
        if s.unmatched_closes > 0 {
            text += &format!(", {} unmatched `}}`", s.unmatched_closes);
        }
        if s.unmatched_interrupt_exits > 0 {
            text += &format!(
                ", {} unmatched interrupt end{}",
                s.unmatched_interrupt_exits,
                plural(s.unmatched_interrupt_exits)
            );
        }
        if s.close_name_mismatches > 0 {
            text += &format!(", {} `}}` naming another function", s.close_name_mismatches);
        }
        if s.skipped_lines > 0 {
            text += &format!(
                ", {} unparseable line{} skipped",
                s.skipped_lines,
                plural(s.skipped_lines as u64)
            );
        }
        text
    }
}

/// `s` unless `n` is 1.
pub fn plural(n: u64) -> &'static str {
    if n == 1 {
        ""
    } else {
        "s"
    }
}
