// SPDX-License-Identifier: GPL-2.0

//! Turning ring-buffer events into text: `trace_pipe` (consuming, blocking) and `trace`
//! (a snapshot, rendered as it is read).

use crate::buffer::{Buffer, Event, Snapshot};
use crate::engine::{Pending, Tracer, TypedRecord};
use crate::format::{self, Options, Typed};
use crate::ksym::SymBuf;
use crate::parse::OptionName;
use crate::sys;
use crate::text::Text;
use kernel::prelude::*;

/// The most text one `read()` of `trace` or `trace_pipe` makes (and keeps), whatever
/// the count asked for.
pub(crate) const READ_CHUNK: usize = 64 << 10;

/// `hide`: the reader may not see kernel addresses (see `control::hide_addrs`).
fn options(tr: &Tracer, hide: bool) -> Options {
    Options {
        retval: tr.settings.option(OptionName::Retval),
        duration: tr.settings.option(OptionName::Duration),
        ptr_hash: if hide { Some(sys::ptr_hash) } else { None },
        callsite: tr.settings.option(OptionName::Callsite),
        abstime: tr.settings.option(OptionName::Abstime),
        errors: tr.settings.option(OptionName::Errors),
    }
}

/// Names the call site `site` into `out`: `caller+0x1c` (`caller+0x1c [mod]`), or, with
/// no symbol there, its address (hashed for a reader who may not see addresses).
/// Nothing for 0 (a call whose site is not known).
fn site_name(sym: &mut SymBuf, site: u64, opts: Options, out: &mut format::SiteText) -> bool {
    use core::fmt::Write;
    if site == 0 {
        return false;
    }
    let r = match sym.lookup(site) {
        Some(s) => match s.module {
            Some(m) => write!(out, "{}+{:#x} [{}]", s.name, s.offset, m),
            None => write!(out, "{}+{:#x}", s.name, s.offset),
        },
        None => match opts.ptr_hash {
            Some(h) => write!(out, "ptr:{:08x}", h(site)),
            None => write!(out, "{:#x}", site),
        },
    };
    r.is_ok()
}

/// Appends the line(s) for `ev` (a lost-events marker first, if records were lost before
/// it). With `args` on, an argument record goes into `pending` until its call's record.
fn render(
    tr: &Tracer,
    t: &mut Text,
    ev: &Event,
    opts: Options,
    sym: &mut SymBuf,
    pending: &mut Pending,
) -> core::fmt::Result {
    if ev.lost != 0 {
        format::write_lost(t, ev.cpu, ev.lost)?;
    }
    if let Some(a) = ev.area.as_ref() {
        pending.put(&ev.rec, a);
        return Ok(());
    }
    // The site first: `name` borrows the symbol buffer.
    let mut site = format::SiteText::new();
    let has_site = opts.callsite
        && ev.rec.kind != crate::record::Kind::Ret as u8
        && site_name(sym, ev.rec.site, opts, &mut site);
    let name = sym.name(ev.rec.func);
    let mut hashed = format::HashedName::new();
    // A callee without a symbol is named by its address: hashed for such readers.
    let shown = match opts.ptr_hash {
        Some(h) if name.starts_with("0x") => hashed.set(h(ev.rec.func)),
        _ => name,
    };
    let typed = tr
        .settings
        .option(OptionName::Args)
        .then(|| TypedRecord::new(tr, &ev.rec, name, pending, opts.ptr_hash));
    let typed = typed.as_ref().map(|t| t as &dyn Typed);
    let site = has_site.then(|| site.as_str());
    format::write_record_with(t, &ev.rec, shown, opts, typed, site)
}

/// Consumes records into `t` until it holds at least `want` bytes or nothing is left to
/// read. Each record is one line: a call that returned before anything was recorded
/// inside it is one record already (`Kind::Whole`), and a call record is only written
/// when something inside it is, so a call and its return are never merged here (across
/// CPUs whose clocks differ slightly, the return could come out before what the call
/// did: merging would hide that).
pub(crate) fn drain(tr: &Tracer, t: &mut Text, want: usize, hide: bool) -> Result {
    let opts = options(tr, hide);
    let buf: &Buffer = &tr.buf;
    let mut sym = SymBuf::new()?;
    let mut rs = tr.reading.lock();
    let mut res = Ok(());
    let mut pending = core::mem::replace(&mut rs.pending, Pending::none());
    let r = buf.consume(&mut rs, |ev| {
        res = render(tr, t, ev, opts, &mut sym, &mut pending);
        res.is_ok() && t.0.len() < want
    });
    rs.pending = pending;
    r?;
    res.map_err(|_| ENOMEM)
}

/// An open `trace` file: the buffer's events as they were at open, not consumed, turned
/// into text a read at a time (a big buffer's whole text would be tens of megabytes).
pub(crate) struct TraceReader {
    snap: Snapshot<'static>,
    /// Text rendered; the first `off` bytes were handed out by the last call.
    text: Text,
    off: usize,
    /// The file position where the last read ended.
    pub(crate) pos: i64,
    sym: SymBuf,
    /// Kernel addresses are hashed for this reader.
    pub(crate) hide: bool,
    /// Argument records waiting for their calls' records.
    pending: Pending,
}

impl TraceReader {
    pub(crate) fn new(st: &'static Tracer, hide: bool) -> Result<Self> {
        let mut t = Text::new();
        t.0.extend_from_slice(format::header(options(st, hide)).as_bytes(), GFP_KERNEL)?;
        let snap = st.buf.snapshot()?;
        // Records lost before this snapshot: the trace below starts after them.
        let mut lost = KVec::new();
        st.buf.lost_per_cpu(&st.reading.lock(), &mut lost)?;
        for (cpu, &n) in lost.iter().enumerate() {
            if n != 0 {
                format::write_lost(&mut t, cpu as u32, n).map_err(|_| ENOMEM)?;
            }
        }
        Ok(TraceReader {
            snap,
            text: t,
            off: 0,
            pos: 0,
            sym: SymBuf::new()?,
            hide,
            pending: Pending::new()?,
        })
    }

    /// The next at most `count` bytes of text (empty at the end), rendering events as
    /// needed, one line each (see [`drain`]).
    pub(crate) fn next_chunk(&mut self, st: &Tracer, count: usize) -> Result<&[u8]> {
        if self.off > 0 {
            // Drop what was handed out: the text never holds much more than one read.
            let len = self.text.0.len();
            self.text.0.as_mut_slice().copy_within(self.off..len, 0);
            sys::truncate(&mut self.text.0, len - self.off);
            self.off = 0;
        }
        let opts = options(st, self.hide);
        while self.text.0.len() < count {
            let Some(ev) = self.snap.next() else { break };
            render(
                st,
                &mut self.text,
                &ev,
                opts,
                &mut self.sym,
                &mut self.pending,
            )
            .map_err(|_| ENOMEM)?;
        }
        let n = count.min(self.text.0.len());
        self.off = n;
        Ok(&self.text.0[..n])
    }
}
