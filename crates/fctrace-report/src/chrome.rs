// SPDX-License-Identifier: GPL-2.0 OR MIT

//! Chrome trace-event JSON (the format of `chrome://tracing`, which Perfetto's UI also
//! opens): one track per thread, each call a complete (`"ph":"X"`) slice with `ts` and
//! `dur` in microseconds, nested as the calls were.
//!
//! A trace taken with the `abstime` option has time stamps: each call starts at its
//! own, counted from the first line's, so that gaps between calls and several threads
//! side by side show as they were. Without them the times are laid out, per
//! thread, from 0: a call starts where its parent starts plus the durations of its
//! earlier siblings, and a thread's top-level calls follow each other. The times
//! between calls (the parent's own work, the gaps between top-level calls) are unknown
//! and shown at the end of the parent, or not at all; only the durations are real. A
//! slice is as long as the call's duration, or as its children together if they are
//! longer (a frame never closed has no duration of its own; where a frame's duration is
//! shorter than its children's, the trace is inconsistent and the slice's `fctrace`
//! arguments give the duration and the excess); a call without a duration (not
//! followed) is 1 ns long, so that it nests where it belongs. A frame whose opening
//! line was lost is a slice too: named by its `}` (`opening lost`), or `[unknown]`.
//!
//! One `pid` (1) stands for the trace, one `tid` for each thread (named `COMM-TID` by a
//! `thread_name` metadata event). A slice's `args` hold the call's arguments by name,
//! its return value as `return`, and fctrace's notes under `fctrace` (cpu, line,
//! module, notes, `not followed`, `incomplete`).

use crate::parse::Args;
use crate::tree::{End, NodeKind, Trace};
use serde::Serialize;
use serde_json::{json, Map, Value};
use std::io::{self, Write};

/// One trace event.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TraceEvent {
    /// Slice or metadata name.
    pub name: String,
    /// Category.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cat: Option<String>,
    /// Phase: `X` (complete) or `M` (metadata).
    pub ph: String,
    /// Start, microseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ts: Option<f64>,
    /// Duration, microseconds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dur: Option<f64>,
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Arguments.
    #[serde(skip_serializing_if = "Map::is_empty")]
    pub args: Map<String, Value>,
}

/// The whole JSON document.
#[derive(Clone, Debug, Serialize)]
pub struct Document {
    /// The events.
    #[serde(rename = "traceEvents")]
    pub trace_events: Vec<TraceEvent>,
    /// Shown with nanosecond precision.
    #[serde(rename = "displayTimeUnit")]
    pub display_time_unit: String,
    /// Where it came from.
    #[serde(rename = "otherData")]
    pub other_data: Map<String, Value>,
}

/// The pid used for every event.
pub const PID: u32 = 1;

fn us(ns: u64) -> f64 {
    ns as f64 / 1000.0
}

/// The trace-event document of `trace`; `source` names the input.
pub fn document(trace: &Trace, source: &str) -> Document {
    let mut trace_events = Vec::new();
    let _ = for_each_event(trace, source, |e| {
        trace_events.push(e);
        Ok(())
    });
    Document {
        trace_events,
        display_time_unit: "ns".into(),
        other_data: other_data(trace, source),
    }
}

/// Writes the document of `trace` as JSON, one event at a time (as [`document`] and
/// `serde_json` would, without holding all events).
pub fn write_json(w: &mut dyn Write, trace: &Trace, source: &str) -> io::Result<()> {
    w.write_all(b"{\"traceEvents\":[")?;
    let mut first = true;
    for_each_event(trace, source, |e| {
        if !first {
            w.write_all(b",")?;
        }
        first = false;
        serde_json::to_writer(&mut *w, &e).map_err(io::Error::from)
    })?;
    w.write_all(b"],\"displayTimeUnit\":\"ns\",\"otherData\":")?;
    serde_json::to_writer(&mut *w, &other_data(trace, source)).map_err(io::Error::from)?;
    w.write_all(b"}\n")
}

/// Hands each event of `trace` to `f`, metadata first.
fn for_each_event(
    trace: &Trace,
    source: &str,
    mut f: impl FnMut(TraceEvent) -> io::Result<()>,
) -> io::Result<()> {
    let nodes = &trace.nodes;
    // Slice lengths, children before parents: at least the children's together.
    let mut len = vec![0u64; nodes.len()];
    for id in (0..nodes.len()).rev() {
        let Some(n) = nodes.get(id) else {
            continue;
        };
        let children: u64 = n
            .children
            .iter()
            .filter_map(|&c| len.get(c))
            .fold(0u64, |a, &b| a.saturating_add(b));
        let own = match n.kind {
            NodeKind::Call | NodeKind::Unknown => n.duration_ns.unwrap_or(0),
            NodeKind::Interrupt => 0,
        };
        if let Some(l) = len.get_mut(id) {
            // At least 1 ns: a slice of 0 at a sibling's end or start would seem to be
            // inside that sibling.
            *l = own.max(children).max(1);
        }
    }
    // Starts, parents before children: a node's own time stamp, from the first one
    // (`abstime`), or laid out after its earlier siblings.
    let base = nodes.iter().filter_map(|n| n.start_ns).min();
    let mut start = vec![0u64; nodes.len()];
    let mut cursor = vec![0u64; nodes.len()];
    let mut thread_cursor = vec![0u64; trace.threads.len()];
    for (id, n) in nodes.iter().enumerate() {
        let slot = match n.parent {
            Some(p) => cursor.get_mut(p),
            None => thread_cursor.get_mut(n.thread),
        };
        let l = len.get(id).copied().unwrap_or(0);
        let s = match (n.start_ns.zip(base), slot) {
            (Some((t, b)), slot) => {
                let s = t.saturating_sub(b);
                if let Some(c) = slot {
                    *c = (*c).max(s.saturating_add(l));
                }
                s
            }
            (None, Some(c)) => {
                let s = *c;
                *c = c.saturating_add(l);
                s
            }
            (None, None) => 0,
        };
        if let Some(x) = start.get_mut(id) {
            *x = s;
        }
        if let Some(x) = cursor.get_mut(id) {
            *x = s;
        }
    }
    f(TraceEvent {
        name: "process_name".into(),
        cat: None,
        ph: "M".into(),
        ts: None,
        dur: None,
        pid: PID,
        tid: 0,
        args: obj(json!({ "name": format!("fctrace: {}", source) })),
    })?;
    for t in &trace.threads {
        f(TraceEvent {
            name: "thread_name".into(),
            cat: None,
            ph: "M".into(),
            ts: None,
            dur: None,
            pid: PID,
            tid: t.task.tid,
            args: obj(json!({ "name": t.task.to_string() })),
        })?;
    }
    for t in &trace.threads {
        for id in trace.preorder(&t.roots) {
            let Some(n) = nodes.get(id) else {
                continue;
            };
            let mut args = Map::new();
            if let Args::Unknown = n.args {
                args.insert("arguments".into(), Value::String("?".into()));
            }
            for (i, (k, v)) in n.args.pairs().into_iter().enumerate() {
                // Unnamed (`?`) or repeated names stay apart.
                let k = if args.contains_key(&k) || k == "return" || k == "fctrace" {
                    format!("{}#{}", k, i)
                } else {
                    k
                };
                args.insert(k, Value::String(v));
            }
            if let Some(r) = n.ret() {
                args.insert("return".into(), Value::String(r.to_string()));
            }
            let mut meta = Map::new();
            meta.insert("cpu".into(), json!(n.cpu));
            meta.insert("line".into(), json!(n.line_no));
            if let Some(m) = &n.module {
                meta.insert("module".into(), json!(m));
            }
            let mut notes = n.notes.flags_text();
            if let Some(c) = &n.close_notes {
                let more = c.flags_text();
                if !more.is_empty() {
                    if !notes.is_empty() {
                        notes += ", ";
                    }
                    notes += &more;
                }
            }
            if !notes.is_empty() {
                meta.insert("notes".into(), json!(notes));
            }
            if let Some(r) = n.not_followed() {
                meta.insert("not followed".into(), json!(r));
            }
            match n.end {
                End::Incomplete => {
                    meta.insert("incomplete".into(), json!(true));
                }
                _ if n.kind == NodeKind::Call && n.duration_ns.is_none() => {
                    meta.insert("duration".into(), json!("unknown"));
                }
                _ => {}
            }
            if n.lost_inside {
                meta.insert("events lost inside".into(), json!(true));
            }
            if n.opening_lost {
                meta.insert("opening lost".into(), json!(true));
            }
            if n.overrun_ns > 0 {
                // The slice is as long as its children, longer than the call's duration.
                meta.insert("duration ns".into(), json!(n.total_ns));
                meta.insert("calls inside longer by ns".into(), json!(n.overrun_ns));
            }
            args.insert("fctrace".into(), Value::Object(meta));
            f(TraceEvent {
                name: match n.kind {
                    NodeKind::Call | NodeKind::Unknown => n.label(),
                    NodeKind::Interrupt => n.name.clone(),
                },
                cat: Some(
                    match n.kind {
                        NodeKind::Call => "call",
                        NodeKind::Interrupt => "interrupt",
                        NodeKind::Unknown => "unknown",
                    }
                    .into(),
                ),
                ph: "X".into(),
                ts: Some(us(start.get(id).copied().unwrap_or(0))),
                dur: Some(us(len.get(id).copied().unwrap_or(0))),
                pid: PID,
                tid: t.task.tid,
                args,
            })?;
        }
    }
    Ok(())
}

/// Where the document came from, and how its times were made.
fn other_data(trace: &Trace, source: &str) -> Map<String, Value> {
    let mut other = Map::new();
    other.insert("source".into(), json!(source));
    other.insert("tracer".into(), json!("fctrace"));
    other.insert(
        "timing".into(),
        json!("relative: durations are the trace's; each thread is laid out from 0, a call starting after its earlier siblings (gaps unknown)"),
    );
    other.insert("summary".into(), json!(trace.describe()));
    other
}

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{load_str, LoadOptions};

    #[test]
    fn abstime_lays_calls_on_the_timeline() {
        let t = "\
#     TIME        CPU  TASK-PID            DURATION                  FUNCTION CALLS
   100.000010 |  0)             t-7 |                 |  a() { /* <-x+0x1c */
   100.000012 |  0)             t-7 |        1.000 us  |    b(); /* <-a+0x5, ret=-2, ERROR */
   100.000020 |  0)             t-7 |       12.000 us  |  } /* a ret=-2, ERROR */
   100.000050 |  1)             u-9 |        2.000 us  |  c(); /* ret=0x0 */
   100.000100 |  0)             t-7 |        3.000 us  |  a(); /* ret=0x0 */
";
        let (tr, _) = load_str(t, LoadOptions::default()).unwrap();
        let a = &tr.nodes[0];
        assert_eq!(a.start_ns, Some(100_000_010_000));
        assert_eq!(a.notes.callsite.as_deref(), Some("x+0x1c"));
        assert_eq!(a.ret(), Some("-2"));
        assert!(a.close_notes.as_ref().is_some_and(|n| n.error));
        let b = &tr.nodes[1];
        assert_eq!(b.notes.callsite.as_deref(), Some("a+0x5"));
        assert!(b.notes.error);
        let d = document(&tr, "t");
        let slices: Vec<(&str, u32, f64)> = d
            .trace_events
            .iter()
            .filter(|e| e.ph == "X")
            .map(|e| (e.name.as_str(), e.tid, e.ts.unwrap_or(-1.0)))
            .collect();
        // From the first line's time: b 2 us after a, u-9's c at 40 us, a again at 90.
        assert_eq!(
            slices,
            [("a", 7, 0.0), ("b", 7, 2.0), ("a", 7, 90.0), ("c", 9, 40.0)]
        );
    }
}
