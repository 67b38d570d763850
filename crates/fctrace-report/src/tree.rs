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
//! the frame at depth `d`. Where lines are missing (lost events, a trace that starts
//! inside calls), the tree is rebuilt from what is left:
//!
//! - A line deeper than the innermost open frame's children (a call at depth `d` with
//!   no open frame at `d - 1`; a `}` with no open frame at its depth): the frames in
//!   between were opened in lost lines. They are put in as `[unknown]` frames
//!   ([`NodeKind::Unknown`], [`Node::opening_lost`]); a later `}` at such a frame's
//!   depth closes it and, if it names its function (`} /* f ret=0 */`), makes it a call
//!   of that function with the `}`'s duration.
//! - A `}` naming another function than the open frame at its depth: that frame's `}`
//!   and the other call's opening were both lost. The open frame is closed as
//!   incomplete and the `}`'s call is rebuilt as its next sibling, taking the children
//!   that came after events were first known lost inside the open frame.
//! - A `CPU:N [LOST M EVENTS]` line marks the frames open in the threads last seen on
//!   CPU `N` as having lost events inside them, and so are the frames open in a thread
//!   whose next line comes on CPU `N` from another CPU while (or after) `N` lost events.
//!
//! Frames still open at the end of the input are closed as incomplete. Interrupt trees
//! (between `==========> irq` and `<========== irq`) are a nested context of the
//! thread: they are laid under a synthetic node named by the interrupt's kind (`[irq]`),
//! placed where the interrupt came (under the frame open at that moment).
//!
//! Times: a frame's total is its duration; where it has none (never closed, durations
//! off), its children's totals together. Its self time is the total minus the
//! children's, never below 0; where the children's add up to more than the duration
//! (the trace is inconsistent there), the excess is the frame's [`Node::overrun_ns`],
//! counted in [`Summary::overrun_frames`] and [`Summary::overrun_ns`].

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
    /// A frame whose opening line was lost and whose function no `}` named (synthetic:
    /// not a call); shown as `[unknown]`.
    Unknown,
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
    /// When it began (`abstime` option: its opening line's time), in nanoseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub start_ns: Option<u64>,
    /// How the node ended.
    pub end: End,
    /// Whether events of its thread may have been lost while this frame was open: a
    /// `LOST` line for the CPU the thread was on, the thread coming to a CPU that lost
    /// events, or lines missing inside it (a deeper line with no frame for it, a `}`
    /// that closed another frame).
    pub lost_inside: bool,
    /// Whether its opening line was lost: the frame stands for a `}` with no opening
    /// (named by the `}`'s comment, or `[unknown]`), or for the callers missing between
    /// an open frame and a deeper line (`[unknown]`, closed by a later `}` if any).
    pub opening_lost: bool,
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
    /// The opening line's number; for a frame whose opening was lost, its `}`'s (or,
    /// never closed, the number of the line that showed it missing).
    pub line_no: usize,
    /// Total time: the duration; without one (a frame never closed, a call not
    /// followed), or for an interrupt node, the children's totals together (0 for a
    /// leaf): the call's own time then counts 0.
    pub total_ns: u64,
    /// Self time: total minus the children's totals (0 if they exceed it).
    pub self_ns: u64,
    /// How much the children's totals exceed the duration (0 if they do not): the
    /// trace's durations are inconsistent there (lines lost or matched wrongly). Then
    /// `self_ns` is 0 and `total_ns` the duration.
    pub overrun_ns: u64,
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
            start_ns: None,
            end: End::Interrupt,
            lost_inside: false,
            opening_lost: false,
            parent: None,
            children: Vec::new(),
            thread,
            cpu,
            depth,
            line_no,
            total_ns: 0,
            self_ns: 0,
            overrun_ns: 0,
        }
    }

    /// The name that identifies the function in reports: `name`, `name [module]`,
    /// `[irq]` for an interrupt node, `[unknown]` for a frame of unknown function.
    pub fn label(&self) -> String {
        match (&self.kind, &self.module) {
            (NodeKind::Interrupt | NodeKind::Unknown, _) => format!("[{}]", self.name),
            (NodeKind::Call, Some(m)) => format!("{} [{}]", self.name, m),
            (NodeKind::Call, None) => self.name.clone(),
        }
    }

    /// Whether this node is a call (not a synthetic interrupt or unknown node).
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
    /// Calls whose opening line was lost, rebuilt from a `}` that names the function
    /// (counted as calls of it, besides [`Summary::calls`]).
    pub recovered_calls: u64,
    /// Frames whose opening line was lost and whose function no `}` named
    /// (`[unknown]`, not calls).
    pub unknown_frames: u64,
    /// Frames never closed by a `}` (closed at a shallower line or at the end).
    pub incomplete_frames: u64,
    /// `}` lines whose comment names another function than the open frame at their
    /// depth (that frame is closed as incomplete, the `}`'s call rebuilt).
    pub close_name_mismatches: u64,
    /// Frames whose children's totals add up to more than their own duration.
    pub overrun_frames: u64,
    /// By how much, in all: the folded stacks' values (self times) add up to the
    /// roots' totals plus this.
    pub overrun_ns: u64,
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

/// An open frame.
struct Open {
    id: NodeId,
    /// How many children the frame had when events were first known lost inside it:
    /// the children from there on may belong to another call (see [`Builder::close`]).
    lost_at: Option<usize>,
}

/// One context of a thread: its own, or an interrupt's.
#[derive(Default)]
struct Ctx {
    /// Open frames, outermost first.
    stack: Vec<Open>,
    /// The interrupt node this context hangs from.
    irq: Option<NodeId>,
}

struct ThreadState {
    /// The thread's own context first, then the interrupts nested in it.
    contexts: Vec<Ctx>,
    last_cpu: u32,
    /// The number of the thread's last line.
    last_line: usize,
}

/// What a CPU's last `LOST` line says about when its events were lost.
#[derive(Clone, Copy, Default)]
struct CpuLoss {
    /// A `LOST` line came and no line of the CPU since: its lost events go up to the
    /// CPU's next line.
    pending: bool,
    /// The line that ended the last loss (the CPU's first line after its `LOST` line).
    ended_at: usize,
}

/// The most `[unknown]` frames put in for one missing stretch of callers (fctrace's
/// depths fit in a byte; beyond, the last one takes the line's depth).
const MAX_GAP_FRAMES: usize = 256;

/// How many `[unknown]` frames may be put in up to line `n` in all: real traces need a
/// few per lost stretch; beyond, each missing stretch gets one (at the line's depth), so
/// that bad input cannot make the trees much larger than itself.
fn gap_budget(line_no: usize) -> usize {
    line_no.saturating_mul(16).saturating_add(4096)
}

/// Builds the trees event by event (see [`build`]).
pub struct Builder {
    trace: Trace,
    states: Vec<ThreadState>,
    by_tid: HashMap<u32, usize>,
    cpu_loss: HashMap<u32, CpuLoss>,
    /// `[unknown]` frames put in so far.
    gap_frames: usize,
    /// Children were moved to a node made after them (see [`Builder::close`]): the
    /// nodes are put back in order at the end.
    reorder: bool,
    opts: BuildOptions,
}

impl Builder {
    /// A builder with no event yet.
    pub fn new(opts: BuildOptions) -> Builder {
        Builder {
            trace: Trace::default(),
            states: Vec::new(),
            by_tid: HashMap::new(),
            cpu_loss: HashMap::new(),
            gap_frames: 0,
            reorder: false,
            opts,
        }
    }

    fn anomaly(&mut self, text: String) {
        if self.trace.anomalies.len() < MAX_ANOMALIES {
            self.trace.anomalies.push(text);
        }
    }

    /// The name a function goes by (without its suffixes with `merge_suffixes`).
    fn func_name(&self, name: String) -> String {
        if self.opts.merge_suffixes {
            strip_suffixes(&name).to_string()
        } else {
            name
        }
    }

    /// The thread of a line of `task` on `cpu` (line `line_no`), made if new. A thread
    /// that comes from another CPU to one that lost events since its last line may have
    /// lost events itself: its open frames are marked.
    fn thread(&mut self, task: &Task, cpu: u32, line_no: usize) -> usize {
        let loss = self.cpu_loss.get(&cpu).copied().unwrap_or_default();
        let ti = match self.by_tid.get(&task.tid) {
            Some(&ti) => {
                let moved_into_loss = self.states.get(ti).is_some_and(|s| {
                    s.last_cpu != cpu && (loss.pending || loss.ended_at > s.last_line)
                });
                if moved_into_loss {
                    self.mark_lost(ti);
                }
                ti
            }
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
                    last_line: line_no,
                });
                self.by_tid.insert(task.tid, ti);
                ti
            }
        };
        if loss.pending {
            // This line ends the CPU's lost stretch.
            self.cpu_loss.insert(
                cpu,
                CpuLoss {
                    pending: false,
                    ended_at: line_no,
                },
            );
        }
        if let Some(t) = self.trace.threads.get_mut(ti) {
            if t.task.comm != task.comm {
                // A new name (exec): the thread is shown by its last one.
                t.task.comm.clone_from(&task.comm);
            }
            t.cpus.insert(cpu);
        }
        if let Some(s) = self.states.get_mut(ti) {
            s.last_cpu = cpu;
            s.last_line = line_no;
        }
        ti
    }

    /// Marks the frames open in thread `ti` (all its contexts) as having lost events
    /// inside them, from their present children on.
    fn mark_lost(&mut self, ti: usize) {
        let Some(s) = self.states.get_mut(ti) else {
            return;
        };
        for open in s.contexts.iter_mut().flat_map(|c| c.stack.iter_mut()) {
            if let Some(n) = self.trace.nodes.get_mut(open.id) {
                n.lost_inside = true;
                open.lost_at.get_or_insert(n.children.len());
            }
        }
    }

    /// `COMM-TID` of thread `ti`.
    fn task_name(&self, ti: usize) -> String {
        self.trace
            .threads
            .get(ti)
            .map(|t| t.task.to_string())
            .unwrap_or_default()
    }

    /// The innermost context of thread `ti`.
    fn ctx(&mut self, ti: usize) -> Option<&mut Ctx> {
        self.states.get_mut(ti).and_then(|s| s.contexts.last_mut())
    }

    /// The innermost open frame of thread `ti`'s innermost context, and its depth.
    fn top(&self, ti: usize) -> Option<(NodeId, usize)> {
        let open = self.states.get(ti)?.contexts.last()?.stack.last()?;
        let depth = self.trace.nodes.get(open.id).map_or(0, |n| n.depth);
        Some((open.id, depth))
    }

    /// Closes `id` as incomplete.
    fn close_incomplete(&mut self, id: NodeId, why: &str, line_no: usize) {
        self.trace.summary.incomplete_frames += 1;
        let mut text = None;
        if let Some(n) = self.trace.nodes.get_mut(id) {
            n.end = End::Incomplete;
            text = Some(format!(
                "line {}: frame {} ({} line {}) {}",
                line_no,
                n.label(),
                if n.opening_lost {
                    "opening lost, first seen at"
                } else {
                    "opened at"
                },
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
        while let Some((top, top_depth)) = self.top(ti) {
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

    /// Makes the innermost open frame of `ti` be at depth `depth`, putting in
    /// `[unknown]` frames for the callers whose opening lines were lost (from the depth
    /// below the innermost open frame, or 0), if it is shallower. `what` names the line
    /// for the anomaly.
    fn fill_to(&mut self, ti: usize, depth: usize, cpu: u32, line_no: usize, what: &str) {
        let from = self.top(ti).map_or(0, |(_, d)| d + 1);
        if from > depth {
            return;
        }
        // Events were lost inside the frames open around the missing ones.
        self.mark_lost(ti);
        let allowed = gap_budget(line_no).saturating_sub(self.gap_frames).max(1);
        let count = (depth - from + 1).min(MAX_GAP_FRAMES).min(allowed);
        self.gap_frames = self.gap_frames.saturating_add(count);
        self.anomaly(format!(
            "line {}: {} has no open frame at depth {}: {} `[unknown]` frame{} put in \
             (opening lines lost)",
            line_no,
            what,
            from,
            count,
            plural(count as u64)
        ));
        for i in 0..count {
            let d = if i + 1 == count { depth } else { from + i };
            let mut node = Node::new(NodeKind::Unknown, "unknown".into(), ti, cpu, d, line_no);
            node.end = End::Incomplete;
            node.opening_lost = true;
            let id = self.add_node(ti, node);
            if let Some(c) = self.ctx(ti) {
                c.stack.push(Open { id, lost_at: None });
            }
        }
    }

    /// Adds a node under the innermost open frame (or interrupt) of `ti`.
    fn add_node(&mut self, ti: usize, mut node: Node) -> NodeId {
        let id = self.trace.nodes.len();
        let parent = self
            .ctx(ti)
            .and_then(|c| c.stack.last().map(|o| o.id).or(c.irq));
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
        let ti = self.thread(&t.task, t.cpu, line_no);
        let before = self.trace.nodes.len();
        let opens = matches!(
            t.body,
            Body::Open(_) | Body::Leaf(_) | Body::IrqEnter { .. }
        );
        let ts = t.ts_ns;
        match t.body {
            Body::Open(call) => self.call(ti, line_no, t.cpu, t.depth, None, call, true),
            Body::Leaf(call) => self.call(ti, line_no, t.cpu, t.depth, t.duration_ns, call, false),
            Body::Close { name, notes } => {
                self.close(ti, line_no, t.cpu, t.depth, t.duration_ns, name, notes)
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
        // The node the line opened (the last one added: `[unknown]` frames put in for
        // missing callers come before it) begins at the line's time.
        if opens && self.trace.nodes.len() > before {
            if let Some(n) = self.trace.nodes.last_mut() {
                n.start_ns = ts;
            }
        }
    }

    /// `CPU:N [LOST M EVENTS]`.
    fn lost(&mut self, cpu: u32, count: u64) {
        self.trace.summary.lost_markers += 1;
        self.trace.summary.lost_events = self.trace.summary.lost_events.saturating_add(count);
        self.cpu_loss.entry(cpu).or_default().pending = true;
        let on_cpu: Vec<usize> = (0..self.states.len())
            .filter(|&ti| self.states.get(ti).is_some_and(|s| s.last_cpu == cpu))
            .collect();
        for ti in on_cpu {
            self.mark_lost(ti);
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
        let name = self.func_name(call.name);
        if let Some(above) = depth.checked_sub(1) {
            let what = format!("{}() of {} at depth {}", name, self.task_name(ti), depth);
            self.fill_to(ti, above, cpu, line_no, &what);
        }
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
                c.stack.push(Open { id, lost_at: None });
            }
        }
    }

    /// A closing line: it closes the open frame at its depth (after closing the deeper
    /// ones as incomplete), an `[unknown]` one put in for it if there is none. If the
    /// `}` names another function than that frame's, the frame's own `}` and the named
    /// call's opening were lost: the frame is closed as incomplete, and the named call
    /// is rebuilt from the `}` as the frame's next sibling, with the frame's children
    /// from where events were first known lost inside it.
    #[allow(clippy::too_many_arguments)]
    fn close(
        &mut self,
        ti: usize,
        line_no: usize,
        cpu: u32,
        depth: usize,
        duration_ns: Option<u64>,
        name: Option<String>,
        notes: Notes,
    ) {
        self.trace.summary.closes += 1;
        self.pop_deeper(ti, depth, false, line_no);
        let what = format!(
            "`}}` of {} at depth {}{}",
            self.task_name(ti),
            depth,
            name.as_ref()
                .map(|n| format!(" ({})", n))
                .unwrap_or_default()
        );
        self.fill_to(ti, depth, cpu, line_no, &what);
        let Some(open) = self.ctx(ti).and_then(|c| c.stack.pop()) else {
            return;
        };
        let name = name.map(|n| self.func_name(n));
        let Some(n) = self.trace.nodes.get_mut(open.id) else {
            return;
        };
        let other = match (&n.kind, &name) {
            (NodeKind::Call, Some(name)) if *name != n.name => {
                Some((n.name.clone(), n.line_no, n.children.len()))
            }
            _ => None,
        };
        let Some((open_name, open_line, children)) = other else {
            // The frame's own `}`.
            n.duration_ns = duration_ns;
            n.close_notes = Some(notes);
            n.end = End::Returned;
            if !n.opening_lost {
                return;
            }
            // An `[unknown]` frame put in for this `}` or before: the `}` is its line.
            n.line_no = line_no;
            let what = match name {
                Some(name) => {
                    n.kind = NodeKind::Call;
                    n.name = name;
                    format!("rebuilt as a call of {}", n.name)
                }
                None => "its function is unknown".to_string(),
            };
            self.anomaly(format!(
                "line {}: `}}` at depth {} closes a frame whose opening was lost: {}",
                line_no, depth, what
            ));
            return;
        };
        // Another call's `}`.
        n.lost_inside = true;
        let name = name.unwrap_or_default();
        self.trace.summary.close_name_mismatches += 1;
        self.anomaly(format!(
            "line {}: `}}` names {} but the open frame at its depth is {} (opened at line {}): \
             both the `}}` of {} and the opening of {} were lost",
            line_no, name, open_name, open_line, open_name, name
        ));
        self.close_incomplete(
            open.id,
            "has no `}`: its return was not in the trace",
            line_no,
        );
        let mut node = Node::new(NodeKind::Call, name, ti, cpu, depth, line_no);
        node.opening_lost = true;
        node.lost_inside = true;
        node.duration_ns = duration_ns;
        node.close_notes = Some(notes);
        node.end = End::Returned;
        let id = self.add_node(ti, node);
        let from = open.lost_at.unwrap_or(children).min(children);
        let moved: Vec<NodeId> = self
            .trace
            .nodes
            .get_mut(open.id)
            .map(|n| n.children.split_off(from))
            .unwrap_or_default();
        if moved.is_empty() {
            return;
        }
        for &c in &moved {
            if let Some(c) = self.trace.nodes.get_mut(c) {
                c.parent = Some(id);
            }
        }
        if let Some(n) = self.trace.nodes.get_mut(id) {
            n.children = moved;
        }
        // Its children have smaller ids than it.
        self.reorder = true;
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
                    Some(open) => {
                        self.close_incomplete(open.id, "still open at the end of the trace", lines)
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
        for n in &trace.nodes {
            match n.kind {
                NodeKind::Call if n.opening_lost => trace.summary.recovered_calls += 1,
                NodeKind::Unknown => trace.summary.unknown_frames += 1,
                _ => {}
            }
        }
        if self.reorder {
            renumber(&mut trace);
        }
        if self.opts.no_irqs {
            trace = without_interrupts(trace);
        }
        compute_times(&mut trace.nodes);
        let mut overruns = Vec::new();
        for n in trace.nodes.iter().filter(|n| n.overrun_ns > 0) {
            trace.summary.overrun_frames += 1;
            trace.summary.overrun_ns = trace.summary.overrun_ns.saturating_add(n.overrun_ns);
            if overruns.len() < MAX_ANOMALIES {
                overruns.push(format!(
                    "line {}: the calls inside {} add up to {} more than its duration, {}: \
                     its self time counts 0",
                    n.line_no,
                    n.label(),
                    crate::table::time(n.overrun_ns),
                    crate::table::time(n.total_ns)
                ));
            }
        }
        for o in overruns {
            if trace.anomalies.len() < MAX_ANOMALIES {
                trace.anomalies.push(o);
            }
        }
        trace
    }
}

/// Puts the nodes back in an order where every node comes before its children and
/// siblings in their order: each node where the smallest id of its subtree was (its
/// own, unless children were moved under it), a parent before a child with the same.
fn renumber(trace: &mut Trace) {
    let len = trace.nodes.len();
    let mut pre = Vec::with_capacity(len);
    for t in &trace.threads {
        pre.extend(trace.preorder(&t.roots));
    }
    let mut key = vec![(usize::MAX, 0usize); len];
    for &id in &pre {
        let level = trace
            .nodes
            .get(id)
            .and_then(|n| n.parent)
            .and_then(|p| key.get(p))
            .map_or(0, |k| k.1 + 1);
        if let Some(k) = key.get_mut(id) {
            *k = (id, level);
        }
    }
    for &id in pre.iter().rev() {
        let min_child = trace
            .nodes
            .get(id)
            .map(|n| {
                n.children
                    .iter()
                    .filter_map(|&c| key.get(c).map(|k| k.0))
                    .min()
                    .unwrap_or(usize::MAX)
            })
            .unwrap_or(usize::MAX);
        if let Some(k) = key.get_mut(id) {
            k.0 = k.0.min(min_child);
        }
    }
    pre.sort_by_key(|&id| key.get(id).copied().unwrap_or((usize::MAX, 0)));
    let mut new_id = vec![usize::MAX; len];
    for (new, &old) in pre.iter().enumerate() {
        if let Some(x) = new_id.get_mut(old) {
            *x = new;
        }
    }
    let map = |id: NodeId| new_id.get(id).copied().unwrap_or(usize::MAX);
    let mut old: Vec<Option<Node>> = std::mem::take(&mut trace.nodes)
        .into_iter()
        .map(Some)
        .collect();
    for &id in &pre {
        if let Some(mut n) = old.get_mut(id).and_then(Option::take) {
            n.parent = n.parent.map(map);
            n.children = n.children.iter().map(|&c| map(c)).collect();
            trace.nodes.push(n);
        }
    }
    for t in trace.threads.iter_mut() {
        t.roots = t.roots.iter().map(|&r| map(r)).collect();
    }
}

/// Totals, self times and overruns, children before parents (children have larger ids).
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
            NodeKind::Call | NodeKind::Unknown => n.duration_ns.unwrap_or(children_total),
            NodeKind::Interrupt => children_total,
        };
        if let Some(n) = nodes.get_mut(id) {
            n.total_ns = total;
            n.self_ns = total.saturating_sub(children_total);
            n.overrun_ns = children_total.saturating_sub(total);
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
            Some(new_parent) if n.kind != NodeKind::Interrupt => {
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
        // What was mended: a count, and its noun before and after the plural's `s`.
        let mended: [(u64, &str, &str); 4] = [
            (s.incomplete_frames, "incomplete frame", ""),
            (
                s.recovered_calls,
                "call",
                " rebuilt from a `}` (opening lost)",
            ),
            (s.unknown_frames, "unknown frame", ""),
            (s.unmatched_interrupt_exits, "unmatched interrupt end", ""),
        ];
        for (n, noun, after) in mended {
            if n > 0 {
                text += &format!(", {n} {noun}{}{after}", plural(n));
            }
        }
        if s.close_name_mismatches > 0 {
            text += &format!(", {} `}}` naming another function", s.close_name_mismatches);
        }
        if s.overrun_frames > 0 {
            text += &format!(
                ", {} frame{} shorter than the calls inside (by {} in all)",
                s.overrun_frames,
                plural(s.overrun_frames),
                crate::table::time(s.overrun_ns).trim()
            );
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
