// SPDX-License-Identifier: GPL-2.0

//! Turning ring-buffer events into text: `trace_pipe` (consuming, blocking) and `trace`
//! (a snapshot).

use crate::buffer::{Buffer, Event, Snapshot};
use crate::control::{symbol_name, Text, KSYM_SYMBOL_LEN};
use crate::engine::State;
use crate::format::{self, Options};
use crate::record::Kind;
use core::sync::atomic::Ordering;
use kernel::prelude::*;

fn options(st: &State) -> Options {
    Options {
        retval: st.opt_retval.load(Ordering::Relaxed),
        duration: st.opt_duration.load(Ordering::Relaxed),
    }
}

/// Appends the line(s) for `ev`; `ret` is the matching return, already taken.
fn render(t: &mut Text, ev: &Event, ret: Option<&Event>, opts: Options, sym: &mut [u8; KSYM_SYMBOL_LEN]) -> core::fmt::Result {
    if ev.lost != 0 {
        format::write_lost(t, ev.cpu, ev.lost)?;
    }
    let name = symbol_name(ev.rec.func, sym);
    format::write_record(t, &ev.rec, name, ret.map(|r| &r.rec), opts)
}

/// Consumes events from `buf` into `t` until `t` holds at least `want` bytes or the
/// buffer is empty. A call whose return is already there is shown as one leaf line.
pub(crate) fn drain(st: &State, buf: &Buffer, t: &mut Text, want: usize) -> core::fmt::Result {
    let opts = options(st);
    let mut sym = KBox::new([0u8; KSYM_SYMBOL_LEN], GFP_KERNEL).map_err(|_| core::fmt::Error)?;
    while t.0.len() < want {
        let Some(ev) = buf.consume_oldest() else { break };
        let mut ret = None;
        let mut other = None;
        if ev.rec.kind == Kind::Call as u8 {
            if let Some((cpu, _)) = buf.peek_oldest() {
                // Peek at the next event; take it only if it closes this call. Another
                // reader may take it first: then whatever we got is shown on its own.
                if buf.peek(cpu).is_some_and(|next| format::is_matching_return(&ev.rec, &next.rec)) {
                    match buf.consume(cpu) {
                        Some(n) if format::is_matching_return(&ev.rec, &n.rec) => ret = Some(n),
                        n => other = n,
                    }
                }
            }
        }
        render(t, &ev, ret.as_ref(), opts, &mut sym)?;
        if let Some(o) = other {
            render(t, &o, None, opts, &mut sym)?;
        }
    }
    Ok(())
}

/// The whole buffer as text, not consumed.
pub(crate) fn snapshot_text(st: &State) -> Result<Text> {
    let opts = options(st);
    let mut t = Text::new();
    let mut sym = KBox::new([0u8; KSYM_SYMBOL_LEN], GFP_KERNEL)?;
    let mut snap: Snapshot<'_> = st.buf.snapshot()?;
    t.0.extend_from_slice(format::HEADER.as_bytes(), GFP_KERNEL)?;
    // Events overwritten before this snapshot: the trace below starts after them.
    for cpu in 0..st.buf.cpus() {
        let lost = st.buf.overrun_cpu(cpu);
        if lost != 0 {
            format::write_lost(&mut t, cpu, lost).map_err(|_| ENOMEM)?;
        }
    }
    while let Some(ev) = snap.next() {
        let mut ret = None;
        if ev.rec.kind == Kind::Call as u8 {
            if let Some(next) = snap.peek() {
                if format::is_matching_return(&ev.rec, &next.rec) {
                    ret = snap.next();
                }
            }
        }
        render(&mut t, &ev, ret.as_ref(), opts, &mut sym).map_err(|_| ENOMEM)?;
    }
    Ok(t)
}
