// SPDX-License-Identifier: GPL-2.0

//! The shadow stack of one call tree (a traced thread's, or an interrupt context's): the
//! frames fctrace opened and not closed yet, and the suppression of unfollowed subtrees.
//!
//! A frame is identified by the stack pointer at the callee's entry, `entry_sp`: the call
//! site's stack pointer minus 8 for a call (the pushed return address), the jump's stack
//! pointer for a tail call. A return executed at stack pointer `sp` closes every frame with
//! `entry_sp <= sp`: those with `entry_sp == sp` are returning now (a chain of tail calls
//! shares one `entry_sp` and closes together, each with the value), the deeper ones have
//! returned unseen (`return not seen`), except a frame that ended in an unfollowed tail
//! call, whose close without a value is expected. That keeps the tree consistent through
//! tail calls and missed returns without unwinding the stack.
//!
//! A call that is not followed (a leaf, or a hidden function) suppresses its subtree:
//! probes hit below the call site's stack pointer (below the jump's plus 8 for a tail call)
//! are ignored until the first hit at or above it.
//!
//! A frame's call record is written late: when the first record inside it is (its
//! callees', ancestors first), or, if it returns before any, not at all: its return is then
//! written as one [`Kind::Whole`] record, `func();` with the duration and value. Most calls
//! of a trace are such leaves, and each record costs the traced task a ring-buffer write,
//! as much as the rest of a hook: this halves the writes of the leaves. A frame whose call
//! is not written yet is *pending*; the pending frames are always the innermost ones.
//!
//! The owner plugs in the ring buffer, the clock, the function table and the statistics
//! through [`Sink`]. Nothing here allocates or panics.

use crate::record::{Kind, Reason, Record, F_ARGS, F_DURATION, F_RETVAL};

/// The most frames one stack holds (`max_depth` is at most this).
pub const MAX_FRAMES: usize = 128;

/// [`Frame::entry`] of a frame whose function has no function-table entry (or that is not
/// counted there: a preemption thunk's).
pub const NO_ENTRY: u32 = u32::MAX;

/// One open frame: a followed call whose return has not been seen yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Frame {
    /// The function called.
    pub func: u64,
    /// Its function-table entry (for its open-frame count), or [`NO_ENTRY`].
    pub entry: u32,
    /// The stack pointer at the function's entry.
    pub entry_sp: u64,
    /// When it was called (its call record's time, which also pairs it with its
    /// argument record).
    pub ts: u64,
    /// Time left out of its duration (fctrace arming while it was open).
    pub excluded: u64,
    /// The call site (or jump) and the record flags of its call (`F_TAIL`, `F_INDIRECT`),
    /// for its call record.
    pub site: u64,
    pub flags: u8,
    /// The frame ended in a tail call that was not followed (or is a preemption thunk's,
    /// whose return is not probed): it returns unseen, so its close is expected, not a
    /// missed return.
    pub ends_in_leaf: bool,
    /// A string argument that could not be read at the call (a user page not resident
    /// yet), to be read again when the call returns: its register and value (register
    /// [`NO_UNREAD`]: none).
    pub unread: (u8, u64),
}

/// [`Frame::unread`]'s register when no string is left to read.
pub const NO_UNREAD: u8 = 0xff;

/// What [`Sink::args`] did for a call.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ArgsDone {
    /// It wrote an argument record (the call's record carries `F_ARGS`).
    pub written: bool,
    /// A string argument it could not read: its register and value, read again at the
    /// return ([`Sink::late_args`]).
    pub unread: Option<(u8, u64)>,
}

impl Frame {
    /// An unused frame.
    pub const EMPTY: Frame = Frame {
        func: 0,
        entry: NO_ENTRY,
        entry_sp: 0,
        ts: 0,
        excluded: 0,
        site: 0,
        flags: 0,
        ends_in_leaf: false,
        unread: (NO_UNREAD, 0),
    };
}

/// What a stack needs from its owner (the kernel module: the ring buffer, the clock, the
/// function table's open-frame counts, the statistics).
pub trait Sink {
    /// Completes `r` with the context fields (`cpu`, `pid`, `tgid`, `comm`, and the
    /// interrupt-context bit ORed into `flags`) and writes it. The stack has stamped it
    /// (`ts`) already, with the time of the call (call records and whole leaves) or of the
    /// return or event, as read from [`Sink::now`]: a record costs no clock read of its own.
    fn emit(&self, r: &mut Record);
    /// The clock of the records' time stamps, in ns.
    fn now(&self) -> u64;
    /// A frame of `func` opens: its function-table entry (whose open-frame count it bumps),
    /// or [`NO_ENTRY`].
    /// `now` is the frame's time (from [`Sink::now`]).
    fn enter(&self, func: u64, now: u64) -> u32;
    /// A frame opened by [`Sink::enter`] closes (`entry` may be [`NO_ENTRY`]).
    fn leave(&self, entry: u32);
    /// A "not followed" or "return not seen" reason occurred (statistics).
    fn count(&self, reason: Reason);
    /// A call of `func` at `depth`, made at `ts`, is drawn (a frame opens, or a leaf):
    /// writes its argument record (`args` option) and says what it did.
    fn args(&self, _func: u64, _depth: usize, _ts: u64) -> ArgsDone {
        ArgsDone::default()
    }
    /// The frame of `func` at `depth`, one of whose string arguments (register `reg`,
    /// value `ptr`) could not be read at the call, returned: reads it again and writes it
    /// as a late argument record paired with the closing record stamped `ts`.
    fn late_args(&self, _func: u64, _depth: usize, _ts: u64, _reg: u8, _ptr: u64) {}
}

/// The frames of one call tree, innermost last, and its suppression.
pub struct ShadowStack {
    depth: usize,
    /// The frames whose call record is written: `frames[..written]`; the others are
    /// pending (see the module documentation).
    written: usize,
    frames: [Frame; MAX_FRAMES],
    /// While not 0, probes hit at a stack pointer below this are inside a call that is not
    /// followed, and are ignored.
    suppress_below: u64,
}

/// A record of `kind` at `depth` with the stack's fields; the sink adds the context.
fn record(kind: Kind, depth: usize, reason: Reason, flags: u8, func: u64, site: u64) -> Record {
    let mut r = Record::ZERO;
    r.kind = kind as u8;
    r.depth = u8::try_from(depth).unwrap_or(u8::MAX);
    r.reason = reason as u8;
    r.flags = flags;
    r.func = func;
    r.site = site;
    r
}

/// The return record of frame `f` (at `depth`) closing at `now`: stamped then, with the
/// frame's duration.
fn ret_record(f: &Frame, depth: usize, reason: Reason, flags: u8, site: u64, now: u64) -> Record {
    let mut r = record(Kind::Ret, depth, reason, flags, f.func, site);
    r.dur = now.saturating_sub(f.ts).saturating_sub(f.excluded);
    r.ts = now;
    r
}

impl ShadowStack {
    /// An empty stack, suppressing nothing.
    pub const EMPTY: ShadowStack = ShadowStack {
        depth: 0,
        written: 0,
        frames: [Frame::EMPTY; MAX_FRAMES],
        suppress_below: 0,
    };

    /// Forgets every frame and the suppression, without records and without
    /// [`Sink::leave`] (for a stack left from before tracing restarted, whose function
    /// table was cleared).
    pub fn reset(&mut self) {
        self.depth = 0;
        self.written = 0;
        self.suppress_below = 0;
    }

    /// The number of open frames: the depth of the next call.
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// Whether no frame is open.
    pub fn is_empty(&self) -> bool {
        self.depth == 0
    }

    /// The open frames, outermost first.
    pub fn frames(&self) -> &[Frame] {
        self.frames.get(..self.depth).unwrap_or(&[])
    }

    /// The innermost open frame: the function the task is known to be in.
    pub fn top(&self) -> Option<&Frame> {
        self.frames().last()
    }

    /// Whether a probe hit at `sp` is inside an unfollowed call, and so ignored; the first
    /// hit at or above the suppressed call's stack pointer ends the suppression.
    pub fn suppressed(&mut self, sp: u64) -> bool {
        if self.suppress_below != 0 {
            if sp < self.suppress_below {
                return true;
            }
            self.suppress_below = 0;
        }
        false
    }

    /// Whether a hit at `sp` would be ignored, without ending the suppression.
    pub fn suppresses(&self, sp: u64) -> bool {
        self.suppress_below != 0 && sp < self.suppress_below
    }

    /// Ends any suppression (a new tree starts).
    pub fn end_suppression(&mut self) {
        self.suppress_below = 0;
    }

    /// A call (or, `tail`, a jump) at stack pointer `sp` goes to a function that is not
    /// followed: ignores the probes it hits. Inside the callee the stack pointer stays
    /// below the call site's (a call pushes a return address); a tail-called function runs
    /// at the jump's stack pointer and returns 8 bytes above it, closing the frames of the
    /// tail chain (those entered at `sp`) with it, which are marked as ending in a leaf.
    pub fn suppress(&mut self, sp: u64, tail: bool) {
        self.suppress_below = if tail { sp.saturating_add(8) } else { sp };
        if tail {
            let depth = self.depth;
            for f in self.frames.iter_mut().take(depth).rev() {
                if f.entry_sp != sp {
                    break;
                }
                f.ends_in_leaf = true;
            }
        }
    }

    /// Records a call of `func` from `site` that is not followed (a leaf, for `reason`),
    /// counts `reason`, and suppresses the callee (see [`ShadowStack::suppress`]).
    #[allow(clippy::too_many_arguments)] // A record's fields plus where to suppress.
    pub fn leaf<S: Sink + ?Sized>(
        &mut self,
        sink: &S,
        reason: Reason,
        flags: u8,
        func: u64,
        site: u64,
        sp: u64,
        tail: bool,
    ) {
        self.flush(sink);
        let mut r = record(Kind::Leaf, self.depth, reason, flags, func, site);
        r.ts = sink.now();
        if func != 0 && sink.args(func, self.depth, r.ts).written {
            r.flags |= F_ARGS;
        }
        sink.emit(&mut r);
        sink.count(reason);
        self.suppress(sp, tail);
    }

    /// Writes the call records of the pending frames, outermost first.
    pub fn flush<S: Sink + ?Sized>(&mut self, sink: &S) {
        self.flush_to(sink, self.depth);
    }

    /// Writes the call records of the pending frames below depth `upto`.
    fn flush_to<S: Sink + ?Sized>(&mut self, sink: &S, upto: usize) {
        while self.written < upto.min(self.depth) {
            let i = self.written;
            let Some(f) = self.frames.get(i) else { return };
            let mut r = record(Kind::Call, i, Reason::None, f.flags, f.func, f.site);
            r.ts = f.ts;
            sink.emit(&mut r);
            self.written = i + 1;
        }
    }

    /// Opens the frame of a call of `func` from `site` (entered at `entry_sp`) at the
    /// current depth; its call record is written later (see the module documentation). A
    /// `thunk` frame (a preemption thunk) has no return probe: it is
    /// expected to close unseen, and is not counted as a frame of an armed function (no
    /// [`Sink::enter`]). Returns false, recording nothing, when the stack is full (callers
    /// check their depth limits first).
    pub fn open<S: Sink + ?Sized>(
        &mut self,
        sink: &S,
        func: u64,
        site: u64,
        flags: u8,
        entry_sp: u64,
        thunk: bool,
    ) -> bool {
        let depth = self.depth;
        let Some(slot) = self.frames.get_mut(depth) else {
            return false;
        };
        let ts = sink.now();
        let entry = if thunk {
            NO_ENTRY
        } else {
            sink.enter(func, ts)
        };
        let done = if thunk {
            ArgsDone::default()
        } else {
            sink.args(func, depth, ts)
        };
        let flags = if done.written { flags | F_ARGS } else { flags };
        *slot = Frame {
            func,
            entry,
            entry_sp,
            ts,
            excluded: 0,
            site,
            flags,
            ends_in_leaf: thunk,
            unread: done.unread.unwrap_or((NO_UNREAD, 0)),
        };
        self.depth = depth.saturating_add(1);
        true
    }

    /// Pops the innermost frame if `pred` accepts it.
    fn pop_if(&mut self, pred: impl FnOnce(&Frame) -> bool) -> Option<Frame> {
        let i = self.depth.checked_sub(1)?;
        let f = *self.frames.get(i)?;
        if !pred(&f) {
            return None;
        }
        self.depth = i;
        Some(f)
    }

    /// Closes frames from the top while `pred` accepts them: each leaves the function
    /// table, and its return record, `rec(frame, its depth)`, is written, with its reason
    /// counted unless it is [`Reason::None`]. A pending frame that returns as expected is
    /// written as one [`Kind::Whole`] record; one that did not (a return not seen) gets its
    /// call record first.
    fn close_while<S: Sink + ?Sized>(
        &mut self,
        sink: &S,
        pred: impl Fn(&Frame) -> bool,
        mut rec: impl FnMut(&Frame, usize) -> Record,
    ) {
        while let Some(f) = self.pop_if(&pred) {
            sink.leave(f.entry);
            let depth = self.depth;
            let mut r = rec(&f, depth);
            if self.written <= depth {
                self.flush_to(sink, depth);
                if r.reason == Reason::None as u8 {
                    // A leaf's line is stamped with its call's time.
                    r.kind = Kind::Whole as u8;
                    r.flags |= f.flags;
                    r.site = f.site;
                    r.ts = f.ts;
                } else {
                    let mut c = record(Kind::Call, depth, Reason::None, f.flags, f.func, f.site);
                    c.ts = f.ts;
                    sink.emit(&mut c);
                }
            }
            self.written = depth;
            if f.unread.0 != NO_UNREAD && r.reason == Reason::None as u8 {
                // It returned: the kernel has read the string by now, most likely.
                sink.late_args(f.func, depth, r.ts, f.unread.0, f.unread.1);
            }
            sink.emit(&mut r);
            let reason = Reason::from_u8(r.reason);
            if reason != Reason::None {
                sink.count(reason);
            }
        }
    }

    /// A return instruction at `site` executes at stack pointer `sp` with value `retval`
    /// (`rax`): closes every frame with `entry_sp <= sp`. Those with `entry_sp == sp` are
    /// the ones returning now and carry the value (`F_RETVAL`, when `retval_on`); frames
    /// that ended in an unfollowed tail call close as expected, without it; the others
    /// returned unseen ([`Reason::Unwound`], counted). Every closing record holds the
    /// duration (`F_DURATION`) and `retval` (flagged or not).
    ///
    /// With `sp` = `u64::MAX` (and `site` 0): closes every frame, none with a value (a new
    /// system call begins while the last one's frames are open).
    pub fn close_returning<S: Sink + ?Sized>(
        &mut self,
        sink: &S,
        sp: u64,
        site: u64,
        retval: u64,
        retval_on: bool,
    ) {
        let now = if self.depth > 0 { sink.now() } else { 0 };
        self.close_while(
            sink,
            |f| f.entry_sp <= sp,
            |f, depth| {
                let exact = f.entry_sp == sp;
                let reason = if exact || f.ends_in_leaf {
                    Reason::None
                } else {
                    Reason::Unwound
                };
                let mut flags = F_DURATION;
                // The value is known only when this return instruction is the frame's own.
                if reason == Reason::None && retval_on && exact {
                    flags |= F_RETVAL;
                }
                let mut r = ret_record(f, depth, reason, flags, site, now);
                r.retval = retval;
                r
            },
        );
    }

    /// The thread exits (`do_exit()`): closes every frame with [`Reason::Exit`] (counted),
    /// without a value.
    pub fn close_exiting<S: Sink + ?Sized>(&mut self, sink: &S) {
        let now = if self.depth > 0 { sink.now() } else { 0 };
        self.close_while(
            sink,
            |_| true,
            |f, depth| ret_record(f, depth, Reason::Exit, F_DURATION, 0, now),
        );
    }

    /// The task is seen at stack pointer `sp` (a call site, or an entry that opens a tree):
    /// closes the frames whose entry stack pointer is below `sp` (site 0, no value), as
    /// they have returned. Those that ended in an unfollowed tail call (and thunk frames)
    /// returned as expected; the others' returns were missed ([`Reason::Unwound`],
    /// counted).
    pub fn close_stale<S: Sink + ?Sized>(&mut self, sink: &S, sp: u64) {
        match self.top() {
            Some(f) if f.entry_sp < sp => {}
            _ => return,
        }
        let now = sink.now();
        self.close_while(
            sink,
            |f| f.entry_sp < sp,
            |f, depth| {
                let reason = if f.ends_in_leaf {
                    Reason::None
                } else {
                    Reason::Unwound
                };
                ret_record(f, depth, reason, F_DURATION, 0, now)
            },
        );
    }

    /// Leaves `ns` out of the durations of the open frames (time fctrace spent arming, not
    /// the traced functions'). Their calls' time stamps stay: a call record written later
    /// still pairs with its argument record, stamped at the call.
    pub fn exclude_time(&mut self, ns: u64) {
        let depth = self.depth;
        for f in self.frames.iter_mut().take(depth) {
            f.excluded = f.excluded.saturating_add(ns);
        }
    }
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use crate::record::{F_INDIRECT, F_IRQ, F_TAIL};
    use core::cell::{Cell, RefCell};
    use std::vec::Vec;

    /// Functions with a table entry are those below `NO_TABLE`; their entry is `func`.
    const NO_TABLE: u64 = 0x1000;
    const CALL: u8 = Kind::Call as u8;
    const RET: u8 = Kind::Ret as u8;
    const LEAF: u8 = Kind::Leaf as u8;
    const WHOLE: u8 = Kind::Whole as u8;

    /// A fake owner: collects records, counts and open-frame counts; the clock is set by
    /// the test.
    #[derive(Default)]
    struct Fake {
        records: RefCell<Vec<Record>>,
        clock: Cell<u64>,
        counted: RefCell<Vec<Reason>>,
        /// (entry, open frames) per table entry that was entered.
        open: RefCell<Vec<(u32, i64)>>,
        enters: Cell<u32>,
        leaves: Cell<u32>,
        /// ORed into every record's flags, like an interrupt context.
        ctx_flags: u8,
        /// Calls of this function have a string that could not be read (register 1).
        unread_func: u64,
        /// The late argument reads asked for: (func, depth, ts, reg, ptr), each also
        /// pushed to `records` as a record of kind 0 for the order.
        late: RefCell<Vec<(u64, usize, u64, u8, u64)>>,
    }

    impl Fake {
        fn at(&self, t: u64) -> &Self {
            self.clock.set(t);
            self
        }
        fn take(&self) -> Vec<Record> {
            core::mem::take(&mut *self.records.borrow_mut())
        }
        fn counted(&self) -> Vec<Reason> {
            core::mem::take(&mut *self.counted.borrow_mut())
        }
        fn open_count(&self, entry: u32) -> i64 {
            self.open
                .borrow()
                .iter()
                .find(|e| e.0 == entry)
                .map_or(0, |e| e.1)
        }
        fn all_closed(&self) -> bool {
            self.open.borrow().iter().all(|e| e.1 == 0)
        }
    }

    impl Sink for Fake {
        fn emit(&self, r: &mut Record) {
            r.pid = 7;
            r.flags |= self.ctx_flags;
            self.records.borrow_mut().push(*r);
        }
        fn now(&self) -> u64 {
            self.clock.get()
        }
        fn enter(&self, func: u64, _now: u64) -> u32 {
            self.enters.set(self.enters.get() + 1);
            if func >= NO_TABLE {
                return NO_ENTRY;
            }
            let entry = func as u32;
            let mut open = self.open.borrow_mut();
            match open.iter_mut().find(|e| e.0 == entry) {
                Some(e) => e.1 += 1,
                None => open.push((entry, 1)),
            }
            entry
        }
        fn leave(&self, entry: u32) {
            self.leaves.set(self.leaves.get() + 1);
            if entry == NO_ENTRY {
                return;
            }
            let mut open = self.open.borrow_mut();
            let e = open
                .iter_mut()
                .find(|e| e.0 == entry)
                .expect("leave without enter");
            e.1 -= 1;
            assert!(e.1 >= 0, "entry {entry} left more often than entered");
        }
        fn count(&self, reason: Reason) {
            self.counted.borrow_mut().push(reason);
        }
        fn args(&self, func: u64, _depth: usize, _ts: u64) -> ArgsDone {
            ArgsDone {
                written: func == self.unread_func,
                unread: (func == self.unread_func).then_some((1, 0x5b_050f)),
            }
        }
        fn late_args(&self, func: u64, depth: usize, ts: u64, reg: u8, ptr: u64) {
            self.late.borrow_mut().push((func, depth, ts, reg, ptr));
            self.records.borrow_mut().push(Record::ZERO);
        }
    }

    /// (kind, depth, reason, func) of each record.
    fn shape(rs: &[Record]) -> Vec<(u8, u8, Reason, u64)> {
        rs.iter()
            .map(|r| (r.kind, r.depth, Reason::from_u8(r.reason), r.func))
            .collect()
    }

    /// A stack with a root `0x10` entered at 0x1000 and calls of `funcs` from call sites
    /// at successively lower stack pointers (each callee entered 0x100 below its caller).
    fn nested(s: &Fake, funcs: &[u64]) -> ShadowStack {
        let mut st = ShadowStack::EMPTY;
        assert!(st.open(s, 0x10, 0, 0, 0x1000, false));
        let mut sp = 0x1000;
        for &f in funcs {
            sp -= 0x100;
            assert!(st.open(s, f, 0xa000 + f, 0, sp, false));
        }
        // Their call records written (as something recorded inside the innermost would).
        st.flush(s);
        s.take();
        st
    }

    fn entry_sps(st: &ShadowStack) -> Vec<u64> {
        st.frames().iter().map(|f| f.entry_sp).collect()
    }

    #[test]
    fn a_return_at_sp_closes_every_frame_with_entry_sp_at_or_below_sp() {
        let s = Fake::default();
        let mut st = nested(&s, &[0x20, 0x30, 0x40]); // entry_sp 0x1000 0xf00 0xe00 0xd00
                                                      // A return below every frame closes nothing.
        st.close_returning(&s, 0xc00, 0xb000, 1, true);
        assert_eq!(st.depth(), 4);
        assert!(s.take().is_empty());
        // A return at 0xe00 closes the frames entered at 0xd00 and 0xe00, innermost first.
        st.close_returning(&s, 0xe00, 0xb000, 1, true);
        assert_eq!(entry_sps(&st), [0x1000, 0xf00]);
        let rs = s.take();
        assert_eq!(rs.iter().map(|r| r.func).collect::<Vec<_>>(), [0x40, 0x30]);
        assert!(rs.iter().all(|r| r.kind == RET && r.site == 0xb000));
        // One between two frames closes those below it only.
        st.close_returning(&s, 0xf80, 0xb000, 1, true);
        assert_eq!(entry_sps(&st), [0x1000]);
        assert_eq!(s.take().len(), 1);
    }

    #[test]
    fn frames_returning_now_close_normally_with_the_value_only_when_retval_on() {
        for retval_on in [false, true] {
            let s = Fake::default();
            let mut st = nested(&s, &[0x20]);
            s.at(50);
            st.close_returning(&s, 0xf00, 0xb000, 0x1d, retval_on);
            let rs = s.take();
            assert_eq!(rs.len(), 1);
            let r = rs[0];
            assert_eq!(
                (r.kind, r.depth, Reason::from_u8(r.reason)),
                (RET, 1, Reason::None)
            );
            assert_eq!((r.func, r.site, r.retval), (0x20, 0xb000, 0x1d));
            let want = if retval_on {
                F_DURATION | F_RETVAL
            } else {
                F_DURATION
            };
            assert_eq!(r.flags, want);
            assert!(s.counted().is_empty(), "a normal return counts nothing");
            assert_eq!(st.depth(), 1);
        }
    }

    #[test]
    fn deeper_frames_close_as_return_not_seen_and_are_counted() {
        let s = Fake::default();
        let mut st = nested(&s, &[0x20, 0x30, 0x40]);
        st.close_returning(&s, 0xf00, 0xb000, 0x1d, true);
        let rs = s.take();
        assert_eq!(
            shape(&rs),
            [
                (RET, 3, Reason::Unwound, 0x40),
                (RET, 2, Reason::Unwound, 0x30),
                (RET, 1, Reason::None, 0x20)
            ]
        );
        // Only the frame whose own return this is carries the value.
        assert_eq!(
            rs.iter().map(|r| r.flags).collect::<Vec<_>>(),
            [F_DURATION, F_DURATION, F_DURATION | F_RETVAL]
        );
        assert_eq!(s.counted(), [Reason::Unwound, Reason::Unwound]);
    }

    #[test]
    fn a_new_system_call_closes_every_frame_as_return_not_seen() {
        // on_syscall: close_returning at u64::MAX, site 0.
        let s = Fake::default();
        let mut st = nested(&s, &[0x20]);
        st.close_returning(&s, u64::MAX, 0, 0, true);
        assert!(st.is_empty());
        let rs = s.take();
        assert_eq!(
            shape(&rs),
            [
                (RET, 1, Reason::Unwound, 0x20),
                (RET, 0, Reason::Unwound, 0x10)
            ]
        );
        assert!(rs.iter().all(|r| r.flags == F_DURATION && r.site == 0));
        assert_eq!(s.counted(), [Reason::Unwound, Reason::Unwound]);
        assert!(s.all_closed());
    }

    #[test]
    fn a_chain_of_tail_calls_closes_together_each_with_the_value() {
        let s = Fake::default();
        let mut st = nested(&s, &[0x20]); // 0x20 entered at 0xf00
                                          // 0x20 tail-calls 0x30, which tail-calls 0x40: all run at 0xf00.
        assert!(st.open(&s, 0x30, 0xa030, F_TAIL, 0xf00, false));
        assert!(st.open(&s, 0x40, 0xa040, F_TAIL | F_INDIRECT, 0xf00, false));
        st.flush(&s);
        s.take();
        st.close_returning(&s, 0xf00, 0xb000, 0x1d, true);
        let rs = s.take();
        assert_eq!(
            shape(&rs),
            [
                (RET, 3, Reason::None, 0x40),
                (RET, 2, Reason::None, 0x30),
                (RET, 1, Reason::None, 0x20)
            ]
        );
        assert!(rs
            .iter()
            .all(|r| r.flags == F_DURATION | F_RETVAL && r.retval == 0x1d));
        assert!(s.counted().is_empty());
        assert_eq!(st.depth(), 1);
    }

    #[test]
    fn a_frame_that_ended_in_an_unfollowed_tail_call_closes_without_value_nor_return_not_seen() {
        let s = Fake::default();
        let mut st = nested(&s, &[0x20]); // 0x20 entered at 0xf00
        assert!(st.open(&s, 0x30, 0xa030, F_TAIL, 0xf00, false));
        // 0x30 tail-calls an unfollowed function from 0xf00: the chain ends in a leaf.
        st.leaf(&s, Reason::Atomic, F_TAIL, 0x999, 0xa999, 0xf00, true);
        assert!(st.frames()[1..].iter().all(|f| f.ends_in_leaf));
        assert!(!st.frames()[0].ends_in_leaf);
        s.take();
        s.counted();
        // The leaf returns unseen, to 0x10, which returns at 0x1000.
        st.close_returning(&s, 0x1000, 0xb000, 0x1d, true);
        let rs = s.take();
        assert_eq!(
            shape(&rs),
            [
                (RET, 2, Reason::None, 0x30),
                (RET, 1, Reason::None, 0x20),
                (RET, 0, Reason::None, 0x10)
            ]
        );
        assert_eq!(
            rs.iter().map(|r| r.flags).collect::<Vec<_>>(),
            [F_DURATION, F_DURATION, F_DURATION | F_RETVAL]
        );
        assert!(s.counted().is_empty());
        // Same when a call site further up sees them stale.
        let mut st = nested(&s, &[0x20]);
        st.suppress(0xf00, true);
        st.close_stale(&s, 0x1000);
        let rs = s.take();
        assert_eq!(shape(&rs), [(RET, 1, Reason::None, 0x20)]);
        assert_eq!(rs[0].flags, F_DURATION);
        assert!(s.counted().is_empty());
    }

    #[test]
    fn an_unfollowed_tail_call_marks_only_the_frames_of_its_chain() {
        let s = Fake::default();
        let mut st = nested(&s, &[0x20, 0x30]); // 0x1000 0xf00 0xe00
        assert!(st.open(&s, 0x40, 0, F_TAIL, 0xe00, false));
        st.suppress(0xe00, true);
        let marked: Vec<bool> = st.frames().iter().map(|f| f.ends_in_leaf).collect();
        assert_eq!(marked, [false, false, true, true]);
        // An unfollowed call (not a jump) marks nothing.
        let mut st = nested(&s, &[0x20]);
        st.suppress(0xf00, false);
        assert!(st.frames().iter().all(|f| !f.ends_in_leaf));
    }

    #[test]
    fn a_leaf_suppresses_probes_below_the_call_sites_sp_until_the_first_hit_at_or_above_it() {
        let s = Fake::default();
        let mut st = nested(&s, &[0x20]);
        st.leaf(&s, Reason::Atomic, 0, 0x999, 0xa999, 0xe80, false);
        let rs = s.take();
        assert_eq!(shape(&rs), [(LEAF, 2, Reason::Atomic, 0x999)]);
        assert_eq!((rs[0].site, rs[0].flags), (0xa999, 0));
        assert_eq!(s.counted(), [Reason::Atomic]);
        assert!(st.suppresses(0xe00));
        assert!(!st.suppresses(0xe80));
        assert!(st.suppressed(0xd00));
        assert!(st.suppressed(0xe7f));
        assert!(
            st.suppressed(0xe00),
            "still suppressed until a hit at or above"
        );
        assert!(
            !st.suppressed(0xe80),
            "the first hit at the call site's sp ends it"
        );
        assert!(!st.suppressed(0xd00), "and then nothing is suppressed");
        assert!(!st.suppresses(0xd00));
        // `suppresses` only looks.
        st.leaf(&s, Reason::Depth, 0, 0x999, 0xa999, 0xe80, false);
        assert!(!st.suppresses(0xf00));
        assert!(st.suppresses(0xe00));
        assert!(st.suppressed(0xe00));
        // A hit above ends it too.
        assert!(!st.suppressed(0xf00));
        assert!(!st.suppressed(0xe00));
        assert_eq!(
            st.depth(),
            2,
            "leaves and suppression open and close no frame"
        );
    }

    #[test]
    fn a_tail_leaf_suppresses_probes_below_the_jumps_sp_plus_8() {
        let s = Fake::default();
        let mut st = nested(&s, &[0x20]); // 0x20 entered at 0xf00
        st.leaf(&s, Reason::Unprobeable, F_TAIL, 0x999, 0xa999, 0xf00, true);
        let rs = s.take();
        assert_eq!(shape(&rs), [(LEAF, 2, Reason::Unprobeable, 0x999)]);
        assert_eq!(rs[0].flags, F_TAIL);
        // The tail-called function runs at 0xf00 and returns at 0xf00 (its ret), which is
        // inside it: suppressed; the next hit at 0xf08 is its caller's caller.
        assert!(st.suppressed(0xf00));
        assert!(st.suppressed(0xf07));
        assert!(!st.suppressed(0xf08));
    }

    #[test]
    fn a_hidden_function_suppresses_likewise_without_a_leaf() {
        let s = Fake::default();
        let mut st = nested(&s, &[0x20]);
        st.suppress(0xe80, false);
        assert!(s.take().is_empty());
        assert!(s.counted().is_empty());
        assert!(st.suppressed(0xe00));
        assert!(!st.suppressed(0xe80));
        // Tail-called: below the jump's sp plus 8, and its chain ends in it.
        st.suppress(0xf00, true);
        assert!(s.take().is_empty());
        assert!(st.top().unwrap().ends_in_leaf);
        assert!(st.suppressed(0xf07));
        assert!(!st.suppressed(0xf08));
    }

    #[test]
    fn a_new_tree_ends_the_suppression() {
        let s = Fake::default();
        let mut st = nested(&s, &[0x20]);
        st.suppress(0xe80, false);
        st.end_suppression();
        assert!(!st.suppresses(0));
        assert!(!st.suppressed(0));
    }

    #[test]
    fn close_stale_on_a_call_site_above_the_top_frame_closes_the_stale_frames_without_value() {
        let s = Fake::default();
        let mut st = nested(&s, &[0x20, 0x30, 0x40]); // 0x1000 0xf00 0xe00 0xd00
                                                      // At or below the top frame's entry sp: nothing is stale.
        st.close_stale(&s, 0xd00);
        st.close_stale(&s, 0xc00);
        assert_eq!(st.depth(), 4);
        assert!(s.take().is_empty());
        // A call site of 0x30's body at 0xd80 (0x40 returned unseen).
        s.at(99);
        st.close_stale(&s, 0xd80);
        let rs = s.take();
        assert_eq!(shape(&rs), [(RET, 3, Reason::Unwound, 0x40)]);
        assert_eq!((rs[0].site, rs[0].flags, rs[0].retval), (0, F_DURATION, 0));
        assert_eq!(s.counted(), [Reason::Unwound]);
        // Frames entered exactly at sp are not stale (the entry of the frame's own
        // function, e.g. a start function called from a followed call site).
        st.close_stale(&s, 0xe00);
        assert_eq!(st.depth(), 3);
        // Far above: all frames below go.
        st.close_stale(&s, 0xfff);
        assert_eq!(
            shape(&s.take()),
            [
                (RET, 2, Reason::Unwound, 0x30),
                (RET, 1, Reason::Unwound, 0x20)
            ]
        );
        assert_eq!(entry_sps(&st), [0x1000]);
        assert!(s.counted().len() == 2);
    }

    #[test]
    fn thunk_frames_close_unseen_without_return_not_seen() {
        let s = Fake::default();
        let mut st = nested(&s, &[0x20]); // 0x20 entered at 0xf00
                                          // 0x20 calls a preemption thunk from 0xe88 (not counted in the table).
        let enters = s.enters.get();
        assert!(st.open(&s, 0x30, 0xa030, 0, 0xe80, true));
        st.flush(&s);
        assert_eq!(s.enters.get(), enters, "a thunk frame is not entered");
        assert_eq!(st.top().unwrap().entry, NO_ENTRY);
        assert!(st.top().unwrap().ends_in_leaf);
        // The scheduler's frame opens inside it, and returns (seen).
        assert!(st.open(&s, 0x40, 0xa040, 0, 0xe00, false));
        st.close_returning(&s, 0xe00, 0xb040, 0, true);
        s.take();
        // The thunk returns unseen; the task is next seen at a call site of 0x20.
        st.close_stale(&s, 0xe88);
        let rs = s.take();
        assert_eq!(shape(&rs), [(RET, 2, Reason::None, 0x30)]);
        assert_eq!(rs[0].flags, F_DURATION);
        assert!(s.counted().is_empty());
        // Or at a return further up.
        assert!(st.open(&s, 0x30, 0xa030, 0, 0xe80, true));
        st.flush(&s);
        s.take();
        st.close_returning(&s, 0xf00, 0xb020, 0x1d, true);
        let rs = s.take();
        assert_eq!(
            shape(&rs),
            [(RET, 2, Reason::None, 0x30), (RET, 1, Reason::None, 0x20)]
        );
        assert_eq!(rs[0].flags, F_DURATION, "no value for the thunk");
        assert!(s.counted().is_empty());
        assert_eq!(
            (s.open_count(0x20), s.open_count(0x30), s.open_count(0x40)),
            (0, 0, 0)
        );
        assert_eq!(s.open_count(0x10), 1);
        // 0x10 0x20 0x40 entered; 0x40 0x20 and the two thunks' NO_ENTRY left.
        assert_eq!((s.enters.get(), s.leaves.get()), (3, 4));
    }

    #[test]
    fn exit_closes_every_frame_with_reason_exit() {
        let s = Fake::default();
        let mut st = nested(&s, &[0x20, 0x30]);
        assert!(st.open(&s, 0x40, 0xa040, 0, 0xd00, true)); // a thunk too
        st.flush(&s);
        st.suppress(0xc00, false);
        s.take();
        s.at(1000);
        st.close_exiting(&s);
        assert!(st.is_empty());
        let rs = s.take();
        assert_eq!(
            shape(&rs),
            [
                (RET, 3, Reason::Exit, 0x40),
                (RET, 2, Reason::Exit, 0x30),
                (RET, 1, Reason::Exit, 0x20),
                (RET, 0, Reason::Exit, 0x10)
            ]
        );
        assert!(rs
            .iter()
            .all(|r| r.flags == F_DURATION && r.site == 0 && r.retval == 0 && r.dur == 1000));
        assert_eq!(s.counted(), [Reason::Exit; 4]);
        assert!(s.all_closed());
        // Nothing open: nothing happens.
        st.close_exiting(&s);
        assert!(s.take().is_empty());
    }

    #[test]
    fn durations_are_now_minus_the_call_time() {
        let s = Fake::default();
        let mut st = ShadowStack::EMPTY;
        s.at(100);
        assert!(st.open(&s, 0x10, 0, 0, 0x1000, false));
        s.at(250);
        assert!(st.open(&s, 0x20, 0xa020, 0, 0xf00, false));
        s.at(400);
        assert!(st.open(&s, 0x30, 0xa030, 0, 0xe00, false));
        assert_eq!(
            st.frames().iter().map(|f| f.ts).collect::<Vec<_>>(),
            [100, 250, 400]
        );
        st.flush(&s);
        s.take();
        s.at(1000);
        st.close_returning(&s, 0xf00, 0xb000, 0, false);
        assert_eq!(
            s.take()
                .iter()
                .map(|r| (r.func, r.dur, r.ts))
                .collect::<Vec<_>>(),
            [(0x30, 600, 1000), (0x20, 750, 1000)]
        );
        s.at(2000);
        st.close_stale(&s, 0x1008);
        assert_eq!(s.take()[0].dur, 1900);
        // A clock behind a frame's time gives 0, not a wrap.
        assert!(st.open(&s, 0x10, 0, 0, 0x1000, false));
        s.at(5);
        st.close_exiting(&s);
        assert_eq!(s.take()[1].dur, 0);
    }

    #[test]
    fn a_string_unread_at_the_call_is_read_again_just_before_its_return_record() {
        let s = Fake {
            unread_func: 0x20,
            ..Fake::default()
        };
        let mut st = ShadowStack::EMPTY;
        s.at(100);
        assert!(st.open(&s, 0x10, 0, 0, 0x1000, false));
        s.at(200);
        assert!(st.open(&s, 0x20, 0xa020, 0, 0xf00, false));
        assert_eq!(st.frames()[1].unread, (1, 0x5b_050f));
        assert_eq!(st.frames()[0].unread.0, NO_UNREAD);
        // Returns before anything inside it: one whole record, stamped with the call's
        // time, and the late read paired with it, just before it.
        s.at(300);
        st.close_returning(&s, 0xf00, 0xb000, 0, true);
        assert_eq!(*s.late.borrow(), [(0x20, 1, 200, 1, 0x5b_050f)]);
        let rs = s.take();
        assert_eq!(rs.len(), 3, "{rs:?}");
        assert_eq!((rs[0].kind, rs[0].func), (CALL, 0x10));
        assert_eq!((rs[1].kind, rs[2].kind, rs[2].ts), (0, WHOLE, 200));
        assert_ne!(rs[2].flags & F_ARGS, 0);
        // A frame written as call and return: paired with the return, at its time.
        s.late.borrow_mut().clear();
        s.at(400);
        assert!(st.open(&s, 0x20, 0xa020, 0, 0xf00, false));
        st.flush(&s);
        s.take();
        s.at(500);
        st.close_returning(&s, 0xf00, 0xb000, 0, true);
        assert_eq!(*s.late.borrow(), [(0x20, 1, 500, 1, 0x5b_050f)]);
        // A frame that did not return (its return not seen, the task exited) is not
        // read again: what it points to may be gone.
        s.late.borrow_mut().clear();
        assert!(st.open(&s, 0x20, 0xa020, 0, 0xf00, false));
        st.close_exiting(&s);
        assert!(st.open(&s, 0x20, 0xa020, 0, 0xf00, false));
        assert!(st.open(&s, 0x30, 0xa030, 0, 0xe00, false));
        st.close_returning(&s, 0xf08, 0xb000, 0, true);
        assert!(s.late.borrow().is_empty());
    }

    #[test]
    fn records_are_stamped_by_the_stack() {
        // Call records and whole leaves carry their call's time, even when written later;
        // returns and not-followed leaves the time they happen.
        let s = Fake::default();
        let mut st = ShadowStack::EMPTY;
        s.at(100);
        assert!(st.open(&s, 0x10, 0, 0, 0x1000, false));
        s.at(200);
        assert!(st.open(&s, 0x20, 0xa020, 0, 0xf00, false));
        s.at(300);
        assert!(st.open(&s, 0x30, 0xa030, 0, 0xe00, false));
        s.at(350);
        st.close_returning(&s, 0xe00, 0xb000, 0, false);
        s.at(500);
        st.leaf(&s, Reason::Unprobeable, 0, 0x40, 0xa040, 0xf08, false);
        s.at(600);
        st.close_returning(&s, 0xf00, 0xb000, 0, false);
        let recs = s.take();
        assert_eq!(
            recs.iter()
                .map(|r| (r.kind, r.func, r.ts))
                .collect::<Vec<_>>(),
            [
                (Kind::Call as u8, 0x10, 100),
                (Kind::Call as u8, 0x20, 200),
                (Kind::Whole as u8, 0x30, 300),
                (Kind::Leaf as u8, 0x40, 500),
                (Kind::Ret as u8, 0x20, 600),
            ]
        );
    }

    #[test]
    fn time_spent_arming_is_left_out_of_the_open_frames() {
        let s = Fake::default();
        let mut st = ShadowStack::EMPTY;
        s.at(100);
        assert!(st.open(&s, 0x10, 0, 0, 0x1000, false));
        st.exclude_time(30);
        s.at(200);
        st.close_exiting(&s);
        let recs = s.take();
        assert_eq!(recs[1].dur, 70);
        // The call record, written late, keeps the call's time (its argument record's).
        assert_eq!((recs[0].kind, recs[0].ts), (Kind::Call as u8, 100));
        // A whole record (a call that returned with nothing inside) likewise.
        s.at(300);
        assert!(st.open(&s, 0x10, 0, 0, 0x1000, false));
        st.exclude_time(40);
        s.at(400);
        st.close_returning(&s, 0x1000, 0xb000, 0, false);
        let recs = s.take();
        assert_eq!(
            (recs[0].kind, recs[0].ts, recs[0].dur),
            (Kind::Whole as u8, 300, 60)
        );
    }

    #[test]
    fn enter_and_leave_are_paired_for_every_frame() {
        let s = Fake::default();
        let mut st = ShadowStack::EMPTY;
        assert!(st.open(&s, 0x10, 0, 0, 0x1000, false));
        assert!(st.open(&s, 0x20, 0, 0, 0xf00, false));
        assert!(st.open(&s, 0x20, 0, F_TAIL, 0xf00, false)); // the same function twice
        assert!(st.open(&s, 0x2000, 0, 0, 0xe00, false)); // no table entry
        assert!(st.open(&s, 0x30, 0, 0, 0xd00, true)); // a thunk
        assert_eq!(
            st.frames().iter().map(|f| f.entry).collect::<Vec<_>>(),
            [0x10, 0x20, 0x20, NO_ENTRY, NO_ENTRY]
        );
        assert_eq!(s.open_count(0x20), 2);
        assert_eq!(s.open_count(0x30), 0);
        st.close_stale(&s, 0xe00); // the thunk
        st.close_returning(&s, 0xe00, 0, 0, true); // the unentered one
        assert_eq!(s.open_count(0x20), 2);
        st.close_returning(&s, 0xf00, 0, 0, true);
        assert_eq!(s.open_count(0x20), 0);
        assert_eq!(s.open_count(0x10), 1);
        st.close_exiting(&s);
        assert!(s.all_closed());
        assert_eq!((s.enters.get(), s.leaves.get()), (4, 5));
        // reset forgets frames without leaving them (the owner clears the table).
        assert!(st.open(&s, 0x10, 0, 0, 0x1000, false));
        st.reset();
        assert!(st.is_empty());
        assert_eq!(s.open_count(0x10), 1);
    }

    #[test]
    fn open_when_full_is_refused_without_panic() {
        let s = Fake::default();
        let mut st = ShadowStack::EMPTY;
        for i in 0..MAX_FRAMES as u64 {
            assert!(st.open(&s, 0x10 + i, 0, 0, 0x10_0000 - 16 * i, false));
        }
        assert_eq!(st.depth(), MAX_FRAMES);
        assert!(
            s.take().is_empty(),
            "call records wait for something inside"
        );
        st.flush(&s);
        assert_eq!(s.take().len(), MAX_FRAMES);
        let enters = s.enters.get();
        assert!(!st.open(&s, 0x999, 0, 0, 0x100, false));
        assert!(!st.open(&s, 0x999, 0, 0, 0x100, true));
        assert!(s.take().is_empty(), "no record for a refused frame");
        assert_eq!(s.enters.get(), enters);
        assert_eq!(st.depth(), MAX_FRAMES);
        // Leaves still work at full depth, and everything closes.
        st.leaf(&s, Reason::Depth, 0, 0x999, 0, 0x100, false);
        assert_eq!(s.take()[0].depth, MAX_FRAMES as u8);
        st.close_returning(&s, u64::MAX, 0, 0, false);
        assert!(st.is_empty());
        assert!(s.all_closed());
    }

    #[test]
    fn the_depth_recorded_is_the_frames_level() {
        let s = Fake {
            ctx_flags: F_IRQ,
            ..Fake::default()
        };
        let mut st = ShadowStack::EMPTY;
        assert!(st.open(&s, 0x10, 0, 0, 0x1000, false));
        assert!(st.open(&s, 0x20, 0, F_INDIRECT, 0xf00, false));
        st.leaf(&s, Reason::Filtered, 0, 0x30, 0, 0xe80, false);
        assert!(!st.suppressed(0xf00));
        assert!(st.open(&s, 0x40, 0, 0, 0xe00, false));
        st.close_returning(&s, 0xe00, 0, 0, false);
        st.close_returning(&s, 0xf00, 0, 0, false);
        st.close_returning(&s, 0x1000, 0, 0, false);
        let rs = s.take();
        assert_eq!(
            shape(&rs),
            [
                (CALL, 0, Reason::None, 0x10),
                (CALL, 1, Reason::None, 0x20),
                (LEAF, 2, Reason::Filtered, 0x30),
                (WHOLE, 2, Reason::None, 0x40),
                (RET, 1, Reason::None, 0x20),
                (RET, 0, Reason::None, 0x10)
            ]
        );
        // The call's own flags go through, with the sink's context flags added.
        assert_eq!(rs[1].flags, F_INDIRECT | F_IRQ);
        assert_eq!(rs[4].flags, F_DURATION | F_IRQ);
    }

    #[test]
    fn a_call_is_written_when_something_inside_it_is_or_with_its_return_as_one_record() {
        let s = Fake::default();
        let mut st = ShadowStack::EMPTY;
        s.at(100);
        assert!(st.open(&s, 0x10, 0, 0, 0x1000, false));
        s.at(200);
        assert!(st.open(&s, 0x20, 0xa020, F_INDIRECT, 0xf00, false));
        s.at(300);
        assert!(st.open(&s, 0x30, 0xa030, F_TAIL, 0xf00, false));
        assert!(s.take().is_empty(), "nothing written at the calls");
        // 0x30 (tail-called by 0x20) calls 0x40, which returns: one record, with its call's
        // flags and site, and its return's duration and value.
        s.at(400);
        assert!(st.open(&s, 0x40, 0xa040, F_INDIRECT, 0xe00, false));
        s.at(450);
        st.close_returning(&s, 0xe00, 0xb040, 7, true);
        let rs = s.take();
        assert_eq!(
            shape(&rs),
            [
                (CALL, 0, Reason::None, 0x10),
                (CALL, 1, Reason::None, 0x20),
                (CALL, 2, Reason::None, 0x30),
                (WHOLE, 3, Reason::None, 0x40)
            ]
        );
        assert_eq!((rs[1].site, rs[1].flags), (0xa020, F_INDIRECT));
        assert_eq!((rs[2].site, rs[2].flags), (0xa030, F_TAIL));
        let w = rs[3];
        assert_eq!(
            (w.site, w.flags),
            (0xa040, F_INDIRECT | F_DURATION | F_RETVAL)
        );
        assert_eq!((w.dur, w.retval), (50, 7));
        // The written frames then close with return records.
        s.at(500);
        st.close_returning(&s, 0xf00, 0xb020, 0, false);
        assert_eq!(
            shape(&s.take()),
            [(RET, 2, Reason::None, 0x30), (RET, 1, Reason::None, 0x20)]
        );
        // A leaf writes the pending calls above it first.
        assert!(st.open(&s, 0x50, 0xa050, 0, 0xf00, false));
        st.leaf(&s, Reason::Atomic, 0, 0x60, 0xa060, 0xe80, false);
        assert_eq!(
            shape(&s.take()),
            [
                (CALL, 1, Reason::None, 0x50),
                (LEAF, 2, Reason::Atomic, 0x60)
            ]
        );
        // A pending frame whose return was not seen: its call, then its return.
        assert!(st.open(&s, 0x70, 0xa070, 0, 0xe00, false));
        st.close_stale(&s, 0xe08);
        assert_eq!(
            shape(&s.take()),
            [
                (CALL, 2, Reason::None, 0x70),
                (RET, 2, Reason::Unwound, 0x70)
            ]
        );
        st.close_exiting(&s);
        assert_eq!(
            shape(&s.take()),
            [(RET, 1, Reason::Exit, 0x50), (RET, 0, Reason::Exit, 0x10)]
        );
        assert!(s.all_closed());
        assert!(rs.iter().all(|r| r.pid == 7));
    }
}
