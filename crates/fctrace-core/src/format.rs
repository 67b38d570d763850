// SPDX-License-Identifier: GPL-2.0

//! Turns records into the text of `trace` and `trace_pipe`, in the style of ftrace's
//! function_graph tracer:
//!
//! ```text
//!  1)             cat-83 |                 |  vfs_read() {
//!  1)             cat-83 |        0.870 us  |    rw_verify_area();
//!  1)             cat-83 | +     12.345 us  |  } /* vfs_read ret=0x1d */
//! ```

use crate::record::{
    Kind, Reason, Record, F_DURATION, F_FAULT, F_INDIRECT, F_IRQ, F_RETVAL, F_SOFTIRQ, F_TAIL,
};
use core::fmt::{self, Write};

/// How records are shown.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Show return values on closing lines.
    pub retval: bool,
    /// Show durations.
    pub duration: bool,
    /// For a reader who may not see kernel addresses (`kptr_restrict`): the hash that
    /// stands for one, shown as `ptr:` and 8 hex digits (equal addresses, equal hashes).
    pub ptr_hash: Option<fn(u64) -> u32>,
    /// Show where each call was made (`<-caller+0x1c`), as function_graph's
    /// `funcgraph-retaddr` does (`callsite` option).
    pub callsite: bool,
    /// Show each line's time stamp first (`abstime` option), as function_graph's
    /// `funcgraph-abstime` does.
    pub abstime: bool,
    /// Mark returns of a negative errno with `ERROR`, for `grep` (`errors` option).
    pub errors: bool,
}

impl Options {
    /// Return values and durations shown, nothing else.
    pub const PLAIN: Options = Options {
        retval: true,
        duration: true,
        ptr_hash: None,
        callsite: false,
        abstime: false,
        errors: false,
    };
}

/// Where a call was made, as the reader names it (`caller+0x1c`, `caller+0x1c [mod]`,
/// or a hashed address): a few bytes kept without allocating.
pub struct SiteText {
    buf: [u8; 160],
    len: usize,
}

impl SiteText {
    pub const fn new() -> Self {
        SiteText {
            buf: [0; 160],
            len: 0,
        }
    }

    /// What was written (cut at a character boundary if it did not fit).
    pub fn as_str(&self) -> &str {
        let b = self.buf.get(..self.len).unwrap_or(&[]);
        match core::str::from_utf8(b) {
            Ok(s) => s,
            Err(e) => core::str::from_utf8(b.get(..e.valid_up_to()).unwrap_or(&[])).unwrap_or(""),
        }
    }
}

impl Default for SiteText {
    fn default() -> Self {
        Self::new()
    }
}

impl Write for SiteText {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        for &c in s.as_bytes() {
            if let Some(slot) = self.buf.get_mut(self.len) {
                *slot = c;
                self.len += 1;
            }
        }
        Ok(())
    }
}

/// The note that names a call's site: `<-caller+0x1c`.
struct Site<'a>(&'a str);

impl fmt::Display for Site<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<-{}", self.0)
    }
}

/// Whether `v` is an address in the kernel's half of the address space (and not a
/// negative errno).
pub fn is_kernel_addr(v: u64) -> bool {
    v >> 63 == 1 && !(-4095..0).contains(&(v as i64))
}

/// The name of a callee without a symbol for a reader who may not see addresses:
/// `ptr:` and the address's hash, made without allocating.
pub struct HashedName([u8; 12]);

impl HashedName {
    pub const fn new() -> Self {
        HashedName(*b"ptr:00000000")
    }

    /// Fills in `hash` and returns the name.
    pub fn set(&mut self, hash: u32) -> &str {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        for i in 0..8 {
            self.0[4 + i] = HEX[((hash >> (28 - 4 * i)) & 0xf) as usize];
        }
        core::str::from_utf8(&self.0).unwrap_or("ptr:?")
    }
}

impl Default for HashedName {
    fn default() -> Self {
        Self::new()
    }
}

/// The header printed at the top of `trace`.
pub const HEADER: &str = "# tracer: fctrace\n\
#\n\
# CPU  TASK-PID            DURATION                  FUNCTION CALLS\n\
# |     |   |               |   |                     |   |   |   |\n";

/// The header with the `abstime` column.
pub const HEADER_ABSTIME: &str = "# tracer: fctrace\n\
#\n\
#     TIME        CPU  TASK-PID            DURATION                  FUNCTION CALLS\n\
#      |          |     |   |               |   |                     |   |   |   |\n";

/// The header for `opts`.
pub fn header(opts: Options) -> &'static str {
    if opts.abstime {
        HEADER_ABSTIME
    } else {
        HEADER
    }
}

/// Width of the task column (`comm-pid`).
const TASK_WIDTH: usize = 18;

/// The mark ftrace puts before long durations.
pub fn duration_mark(ns: u64) -> char {
    match ns {
        n if n > 1_000_000_000 => '$',
        n if n > 100_000_000 => '@',
        n if n > 10_000_000 => '*',
        n if n > 1_000_000 => '#',
        n if n > 100_000 => '!',
        n if n > 10_000 => '+',
        _ => ' ',
    }
}

struct Task<'a>(&'a Record);

impl fmt::Display for Task<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Right-align `comm-pid` without allocating: count digits first.
        let mut digits = 1;
        let mut p = self.0.pid / 10;
        while p > 0 {
            digits += 1;
            p /= 10;
        }
        let comm = self.0.comm_str();
        let len = comm.len() + 1 + digits;
        for _ in len..TASK_WIDTH {
            f.write_char(' ')?;
        }
        write!(f, "{}-{}", comm, self.0.pid)
    }
}

fn write_prefix(w: &mut impl Write, r: &Record, dur: Option<u64>, abstime: bool) -> fmt::Result {
    if abstime {
        // Seconds and microseconds of the kernel's clock, as function_graph prints them.
        write!(
            w,
            "{:>6}.{:06} | ",
            r.ts / 1_000_000_000,
            r.ts % 1_000_000_000 / 1000
        )?;
    }
    write!(w, "{:>2}) {} |", r.cpu, Task(r))?;
    match dur {
        Some(ns) => write!(
            w,
            " {} {:>6}.{:03} us  |",
            duration_mark(ns),
            ns / 1000,
            ns % 1000
        ),
        None => w.write_str("                 |"),
    }?;
    for _ in 0..=r.depth {
        w.write_str("  ")?;
    }
    Ok(())
}

fn write_comment(
    w: &mut impl Write,
    head: Option<&str>,
    parts: &[&dyn fmt::Display],
) -> fmt::Result {
    if parts.is_empty() && head.is_none() {
        return Ok(());
    }
    w.write_str(" /* ")?;
    if let Some(h) = head {
        w.write_str(h)?;
        if !parts.is_empty() {
            w.write_char(' ')?;
        }
    }
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            w.write_str(", ")?;
        }
        write!(w, "{}", p)?;
    }
    w.write_str(" */")
}

struct Retval(u64, Option<fn(u64) -> u32>);

impl fmt::Display for Retval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_raw_ret(f, self.0, self.1)
    }
}

/// The errno a raw return value `v` stands for, as funcgraph-retval reads one: a negative
/// value in the errno range, of 64 bits or of 32 (a function returning `int` leaves the
/// upper half of `%rax` zero: `0xfffffffe` is -2).
pub fn raw_errno(v: u64) -> Option<i64> {
    let s = if v >> 32 == 0 && v & (1 << 31) != 0 {
        v as u32 as i32 as i64
    } else {
        v as i64
    };
    (-4095..0).contains(&s).then_some(s)
}

/// `ret=` and the raw value `v` (`rax`): errnos as such ([`raw_errno`]), like
/// funcgraph-retval, kernel addresses hashed with `ptr_hash`, the rest in hex.
pub fn write_raw_ret(w: &mut impl Write, v: u64, ptr_hash: Option<fn(u64) -> u32>) -> fmt::Result {
    if let Some(s) = raw_errno(v) {
        write!(w, "ret={}", s)
    } else if let Some(h) = ptr_hash.filter(|_| is_kernel_addr(v)) {
        write!(w, "ret=ptr:{:08x}", h(v))
    } else {
        write!(w, "ret={:#x}", v)
    }
}

/// The interrupt context an event belongs to (`irq`, `softirq`), if any.
pub fn irq_context(r: &Record) -> Option<&'static str> {
    if r.flags & F_IRQ != 0 {
        Some("irq")
    } else if r.flags & F_SOFTIRQ != 0 {
        Some("softirq")
    } else {
        None
    }
}

/// Writes the marker line that opens (`enter`) or closes an interrupt's tree, like
/// function_graph's `funcgraph-irqs`: `==========> irq` / `<========== irq`.
fn write_irq_marker(
    w: &mut impl Write,
    r: &Record,
    what: &str,
    enter: bool,
    abstime: bool,
) -> fmt::Result {
    write_prefix(w, r, None, abstime)?;
    if enter {
        writeln!(w, "==========> {}", what)
    } else {
        writeln!(w, "<========== {}", what)
    }
}

/// The notes of a call's flags, in the order they are written (a call has its site
/// first, at most these three, then a reason, a value and `ERROR`; a closing line adds
/// the strings read at the return: `notes` in [`write_record_with`] has room for eight).
static FLAG_NOTES: [(u8, &str); 3] = [
    (F_TAIL, "tail call"),
    (F_INDIRECT, "indirect"),
    (F_FAULT, "page fault"),
];

/// Writes one line for `r`. `name` is the symbol of `r.func`. A [`Kind::Whole`] record (a
/// call and its return) is one leaf line `name();` with the return's duration and value.
pub fn write_record(w: &mut impl Write, r: &Record, name: &str, opts: Options) -> fmt::Result {
    write_record_with(w, r, name, opts, None, None)
}

/// What the `args` option adds to a line: the call's arguments, written after the
/// name (`(dfd=-100, ...)`), and a typed return value in place of the raw one.
pub trait Typed {
    /// Writes `(...)`.
    fn write_args(&self, w: &mut dyn Write) -> fmt::Result;
    /// Whether the function returns a value (not `void`).
    fn has_ret(&self) -> bool;
    /// Writes `ret=` and the value `v`.
    fn write_ret(&self, w: &mut dyn Write, v: u64) -> fmt::Result;
    /// Whether `v`, returned, is a negative errno (as its type says).
    fn is_error(&self, v: u64) -> bool;
    /// Whether a closing line has strings read at the return to show (the call's were
    /// not readable when it was made).
    fn has_late(&self) -> bool {
        false
    }
    /// Writes them: `filename="..." (read at return)`.
    fn write_late(&self, _w: &mut dyn Write) -> fmt::Result {
        Ok(())
    }
}

struct Late<'a>(&'a dyn Typed);

impl fmt::Display for Late<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.write_late(f)
    }
}

/// Whether a raw return value is a negative errno, an error pointer included
/// ([`raw_errno`]).
pub fn raw_is_error(v: u64) -> bool {
    raw_errno(v).is_some()
}

struct TypedRet<'a>(&'a dyn Typed, u64);

impl fmt::Display for TypedRet<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.write_ret(f, self.1)
    }
}

/// [`write_record`], with what `typed` knows of the function (`args` option), and the
/// name of the call's site (`callsite` option; none known for the start function's own
/// call).
pub fn write_record_with(
    w: &mut impl Write,
    r: &Record,
    name: &str,
    opts: Options,
    typed: Option<&dyn Typed>,
    site: Option<&str>,
) -> fmt::Result {
    let kind = Kind::from_u8(r.kind);
    if matches!(kind, Some(Kind::Args | Kind::LateArgs)) {
        // Not a line: the reader keeps it for its call's (or closing) record.
        return Ok(());
    }
    let reason = Reason::from_u8(r.reason);
    let mut notes: [&dyn fmt::Display; 8] = [&""; 8];
    let mut n = 0;
    let site_note;
    if let Some(s) = site.filter(|_| opts.callsite && kind != Some(Kind::Ret)) {
        site_note = Site(s);
        notes[n] = &site_note;
        n += 1;
    }
    let retval;
    let closing = matches!(kind, Some(Kind::Ret | Kind::Whole)).then_some(r);
    let dur = closing
        .filter(|c| opts.duration && c.flags & F_DURATION != 0)
        .map(|c| c.dur);
    if kind != Some(Kind::Ret) {
        for (bit, text) in FLAG_NOTES.iter() {
            if r.flags & bit != 0 && n < notes.len() {
                notes[n] = text;
                n += 1;
            }
        }
    }
    let reason_text = reason.text();
    if reason != Reason::None && n < notes.len() {
        notes[n] = &reason_text;
        n += 1;
    }
    let typed_ret;
    if let Some(c) = closing.filter(|c| opts.retval && c.flags & F_RETVAL != 0) {
        let error = if let Some(t) = typed {
            // Typed: nothing for a `void` function.
            if t.has_ret() && n < notes.len() {
                typed_ret = TypedRet(t, c.retval);
                notes[n] = &typed_ret;
                n += 1;
            }
            t.has_ret() && t.is_error(c.retval)
        } else {
            retval = Retval(c.retval, opts.ptr_hash);
            if n < notes.len() {
                notes[n] = &retval;
                n += 1;
            }
            raw_is_error(c.retval)
        };
        if error && opts.errors && n < notes.len() {
            notes[n] = &"ERROR";
            n += 1;
        }
    }
    let late;
    if let Some(t) = typed.filter(|t| kind == Some(Kind::Ret) && t.has_late()) {
        late = Late(t);
        if n < notes.len() {
            notes[n] = &late;
            n += 1;
        }
    }
    // An interrupt's tree (its entry function at depth 0) is set off by marker lines.
    let irq = irq_context(r).filter(|_| r.depth == 0);
    if let Some(what) = irq.filter(|_| kind != Some(Kind::Ret)) {
        write_irq_marker(w, r, what, true, opts.abstime)?;
    }
    write_prefix(w, r, dur, opts.abstime)?;
    let mut head = None;
    match kind {
        Some(Kind::Call) => {
            write_name(w, name, typed)?;
            w.write_str(" {")?
        }
        Some(Kind::Leaf | Kind::Whole) => {
            write_name(w, name, typed)?;
            w.write_char(';')?
        }
        Some(Kind::Ret) => {
            w.write_str("}")?;
            if n > 0 {
                // Name the function being closed so the note can be read on its own.
                head = Some(crate::args::split_module(name).0);
            }
        }
        Some(Kind::Args | Kind::LateArgs) | None => write!(w, "?? kind {}", r.kind)?,
    }
    write_comment(w, head, notes.get(..n).unwrap_or(&[]))?;
    w.write_char('\n')?;
    let closes = kind != Some(Kind::Call);
    if let Some(what) = irq.filter(|_| closes) {
        write_irq_marker(w, r, what, false, opts.abstime)?;
    }
    Ok(())
}

/// Writes `name(...)`: with the arguments `typed` has, else `()`.
fn write_name(w: &mut impl Write, name: &str, typed: Option<&dyn Typed>) -> fmt::Result {
    // A module's function (`name [module]`, as kallsyms names it): the module after the
    // arguments, so that the call reads as one: `ext4_sync_file(...) [ext4] {`.
    let (func, module) = crate::args::split_module(name);
    w.write_str(func)?;
    match typed {
        Some(t) => {
            let mut adapter = Adapter(w);
            t.write_args(&mut adapter)?
        }
        None => w.write_str("()")?,
    }
    match module {
        Some(m) => write!(w, " [{}]", m),
        None => Ok(()),
    }
}

/// A `dyn Write` over any writer.
struct Adapter<'a, W: Write>(&'a mut W);

impl<W: Write> Write for Adapter<'_, W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        self.0.write_str(s)
    }
}

/// Writes the marker for events the ring buffer lost on `cpu`.
pub fn write_lost(w: &mut impl Write, cpu: u32, count: u64) -> fmt::Result {
    writeln!(w, "CPU:{} [LOST {} EVENTS]", cpu, count)
}

#[cfg(test)]
mod tests {
    extern crate std;
    use super::*;
    use std::string::String;

    fn rec(kind: Kind, depth: u8) -> Record {
        let mut r = Record::ZERO;
        r.kind = kind as u8;
        r.depth = depth;
        r.pid = 83;
        r.tgid = 83;
        r.cpu = 1;
        r.func = 0x1000;
        r.comm[..3].copy_from_slice(b"cat");
        r
    }

    const ALL: Options = Options::PLAIN;

    #[test]
    fn call_ret_and_leaf_lines() {
        let mut s = String::new();
        let call = rec(Kind::Call, 0);
        write_record(&mut s, &call, "vfs_read", ALL).unwrap();
        let mut ret = rec(Kind::Ret, 0);
        ret.flags = F_DURATION | F_RETVAL;
        ret.dur = 12_345;
        ret.retval = 0x1d;
        write_record(&mut s, &ret, "vfs_read", ALL).unwrap();
        let mut leaf = rec(Kind::Whole, 1);
        leaf.flags = F_DURATION;
        leaf.dur = 870;
        write_record(&mut s, &leaf, "rw_verify_area", ALL).unwrap();
        leaf.kind = Kind::Leaf as u8;
        leaf.reason = Reason::Atomic as u8;
        leaf.flags = F_INDIRECT;
        write_record(&mut s, &leaf, "_raw_spin_lock", ALL).unwrap();
        let mut whole = rec(Kind::Whole, 1);
        whole.flags = F_TAIL | F_DURATION | F_RETVAL;
        whole.dur = 1_250;
        whole.retval = (-2i64) as u64;
        write_record(&mut s, &whole, "lookup_fast", ALL).unwrap();
        let expected = concat!(
            " 1)             cat-83 |                 |  vfs_read() {\n",
            " 1)             cat-83 | +     12.345 us  |  } /* vfs_read ret=0x1d */\n",
            " 1)             cat-83 |        0.870 us  |    rw_verify_area();\n",
            " 1)             cat-83 |                 |    _raw_spin_lock(); /* indirect, not followed: atomic */\n",
            " 1)             cat-83 |        1.250 us  |    lookup_fast(); /* tail call, ret=-2 */\n",
        );
        assert_eq!(s, expected);
    }

    #[test]
    fn module_function_lines() {
        let mut s = String::new();
        write_record(&mut s, &rec(Kind::Call, 0), "ext4_sync_file [ext4]", ALL).unwrap();
        let mut ret = rec(Kind::Ret, 0);
        ret.flags = F_RETVAL;
        ret.retval = 0;
        write_record(&mut s, &ret, "ext4_sync_file [ext4]", ALL).unwrap();
        let mut leaf = rec(Kind::Leaf, 1);
        leaf.flags = F_INDIRECT;
        write_record(&mut s, &leaf, "fct_testmod_write [fct_testmod]", ALL).unwrap();
        let expected = concat!(
            " 1)             cat-83 |                 |  ext4_sync_file() [ext4] {\n",
            " 1)             cat-83 |                 |  } /* ext4_sync_file ret=0x0 */\n",
            " 1)             cat-83 |                 |    fct_testmod_write() [fct_testmod]; /* indirect */\n",
        );
        assert_eq!(s, expected);
    }

    #[test]
    fn page_fault_lines() {
        let mut s = String::new();
        let mut call = rec(Kind::Call, 2);
        call.flags = F_FAULT;
        write_record(&mut s, &call, "handle_mm_fault", ALL).unwrap();
        let mut ret = rec(Kind::Ret, 2);
        ret.flags = F_DURATION | F_RETVAL;
        ret.dur = 40_000;
        ret.retval = 0;
        write_record(&mut s, &ret, "handle_mm_fault", ALL).unwrap();
        let mut whole = rec(Kind::Whole, 2);
        whole.flags = F_FAULT | F_DURATION | F_RETVAL;
        whole.dur = 900;
        whole.retval = 0x400;
        write_record(&mut s, &whole, "handle_mm_fault", ALL).unwrap();
        let expected = concat!(
            " 1)             cat-83 |                 |      handle_mm_fault() { /* page fault */\n",
            " 1)             cat-83 | +     40.000 us  |      } /* handle_mm_fault ret=0x0 */\n",
            " 1)             cat-83 |        0.900 us  |      handle_mm_fault(); /* page fault, ret=0x400 */\n",
        );
        assert_eq!(s, expected);
    }

    #[test]
    fn errno_return_values_and_durations_off() {
        let mut s = String::new();
        let mut ret = rec(Kind::Ret, 2);
        ret.flags = F_DURATION | F_RETVAL;
        ret.retval = (-22i64) as u64;
        ret.dur = 5;
        write_record(
            &mut s,
            &ret,
            "f",
            Options {
                duration: false,
                ..Options::PLAIN
            },
        )
        .unwrap();
        assert_eq!(
            s,
            " 1)             cat-83 |                 |      } /* f ret=-22 */\n"
        );
    }

    #[test]
    fn marks_and_lost() {
        assert_eq!(duration_mark(10), ' ');
        assert_eq!(duration_mark(10_001), '+');
        assert_eq!(duration_mark(2_000_000), '#');
        assert_eq!(duration_mark(2_000_000_000), '$');
        let mut s = String::new();
        write_lost(&mut s, 3, 42).unwrap();
        assert_eq!(s, "CPU:3 [LOST 42 EVENTS]\n");
    }

    #[test]
    fn interrupt_trees_are_marked() {
        let mut s = String::new();
        let mut call = rec(Kind::Call, 0);
        call.flags = F_IRQ;
        write_record(&mut s, &call, "__sysvec_apic_timer_interrupt", ALL).unwrap();
        let mut inner = rec(Kind::Leaf, 1);
        inner.flags = F_IRQ;
        inner.reason = Reason::Atomic as u8;
        write_record(&mut s, &inner, "hrtimer_interrupt", ALL).unwrap();
        let mut ret = rec(Kind::Ret, 0);
        ret.flags = F_IRQ | F_DURATION;
        ret.dur = 2_000;
        write_record(&mut s, &ret, "__sysvec_apic_timer_interrupt", ALL).unwrap();
        let mut soft = rec(Kind::Whole, 0);
        soft.flags = F_SOFTIRQ | F_DURATION;
        soft.dur = 1_000;
        write_record(&mut s, &soft, "handle_softirqs", ALL).unwrap();
        let expected = concat!(
            " 1)             cat-83 |                 |  ==========> irq\n",
            " 1)             cat-83 |                 |  __sysvec_apic_timer_interrupt() {\n",
            " 1)             cat-83 |                 |    hrtimer_interrupt(); /* not followed: atomic */\n",
            " 1)             cat-83 |        2.000 us  |  }\n",
            " 1)             cat-83 |                 |  <========== irq\n",
            " 1)             cat-83 |                 |  ==========> softirq\n",
            " 1)             cat-83 |        1.000 us  |  handle_softirqs();\n",
            " 1)             cat-83 |                 |  <========== softirq\n",
        );
        assert_eq!(s, expected);
    }

    struct FakeTyped(bool);

    impl Typed for FakeTyped {
        fn write_args(&self, w: &mut dyn Write) -> fmt::Result {
            w.write_str("(n=1)")
        }
        fn has_ret(&self) -> bool {
            self.0
        }
        fn write_ret(&self, w: &mut dyn Write, v: u64) -> fmt::Result {
            write!(w, "ret=typed {}", v)
        }
        fn is_error(&self, v: u64) -> bool {
            v == 7
        }
    }

    #[test]
    fn typed_lines() {
        let mut s = String::new();
        let call = rec(Kind::Call, 0);
        write_record_with(&mut s, &call, "f", ALL, Some(&FakeTyped(true)), None).unwrap();
        let mut ret = rec(Kind::Ret, 0);
        ret.flags = F_RETVAL;
        ret.retval = 7;
        write_record_with(&mut s, &ret, "f", ALL, Some(&FakeTyped(true)), None).unwrap();
        let mut whole = rec(Kind::Whole, 1);
        whole.flags = F_RETVAL;
        write_record_with(&mut s, &whole, "g", ALL, Some(&FakeTyped(false)), None).unwrap();
        let mut args = rec(Kind::Args, 1);
        args.reason = 1;
        write_record_with(&mut s, &args, "g", ALL, Some(&FakeTyped(false)), None).unwrap();
        let expected = concat!(
            " 1)             cat-83 |                 |  f(n=1) {\n",
            " 1)             cat-83 |                 |  } /* f ret=typed 7 */\n",
            " 1)             cat-83 |                 |    g(n=1);\n",
        );
        assert_eq!(s, expected);
    }

    #[test]
    fn callsite_abstime_and_errors() {
        let opts = Options {
            callsite: true,
            abstime: true,
            errors: true,
            ..ALL
        };
        let mut s = String::new();
        let mut call = rec(Kind::Call, 0);
        call.ts = 12_345_678_901_234;
        call.flags = F_INDIRECT;
        write_record_with(
            &mut s,
            &call,
            "vfs_read",
            opts,
            None,
            Some("ksys_read+0x6b"),
        )
        .unwrap();
        let mut leaf = rec(Kind::Whole, 1);
        leaf.ts = 12_345_678_902_000;
        leaf.flags = F_DURATION | F_RETVAL;
        leaf.dur = 870;
        leaf.retval = (-2i64) as u64;
        write_record_with(
            &mut s,
            &leaf,
            "rw_verify_area",
            opts,
            None,
            Some("vfs_read+0x4c"),
        )
        .unwrap();
        let mut ret = rec(Kind::Ret, 0);
        ret.ts = 12_345_679_000_000;
        ret.flags = F_DURATION | F_RETVAL;
        ret.dur = 98_766;
        ret.retval = (-2i64) as u64;
        write_record_with(&mut s, &ret, "vfs_read", opts, None, Some("ksys_read+0x6b")).unwrap();
        // Typed: the type decides (7 is an error for FakeTyped).
        let mut typed = rec(Kind::Ret, 0);
        typed.ts = ret.ts;
        typed.flags = F_RETVAL;
        typed.retval = 7;
        write_record_with(&mut s, &typed, "f", opts, Some(&FakeTyped(true)), None).unwrap();
        let expected = concat!(
            " 12345.678901 |  1)             cat-83 |                 |  vfs_read() { /* <-ksys_read+0x6b, indirect */\n",
            " 12345.678902 |  1)             cat-83 |        0.870 us  |    rw_verify_area(); /* <-vfs_read+0x4c, ret=-2, ERROR */\n",
            " 12345.679000 |  1)             cat-83 | +     98.766 us  |  } /* vfs_read ret=-2, ERROR */\n",
            " 12345.679000 |  1)             cat-83 |                 |  } /* f ret=typed 7, ERROR */\n",
        );
        assert_eq!(s, expected);
        // Without the options: none of it.
        let mut plain = String::new();
        write_record_with(
            &mut plain,
            &leaf,
            "rw_verify_area",
            ALL,
            None,
            Some("vfs_read+0x4c"),
        )
        .unwrap();
        assert_eq!(
            plain,
            " 1)             cat-83 |        0.870 us  |    rw_verify_area(); /* ret=-2 */\n"
        );
        assert!(header(opts).contains("TIME"));
        assert_eq!(header(ALL), HEADER);
        let mut t = SiteText::new();
        for _ in 0..100 {
            t.write_str("ab").unwrap();
        }
        assert_eq!(t.as_str().len(), 160);
    }

    fn fake_hash(v: u64) -> u32 {
        (v >> 8) as u32 ^ 0x5a5a_5a5a
    }

    #[test]
    fn hidden_kernel_pointers_are_hashed() {
        let mut r = rec(Kind::Ret, 1);
        r.flags = F_RETVAL;
        r.retval = 0xffff_8880_0123_4500;
        let opts = Options {
            ptr_hash: Some(fake_hash),
            ..ALL
        };
        let mut s = String::new();
        write_record(&mut s, &r, "kmalloc", opts).unwrap();
        let want = std::format!("ret=ptr:{:08x}", fake_hash(0xffff_8880_0123_4500));
        assert!(s.contains(&want), "{}", s);
        assert!(!s.contains("ffff8880"), "{}", s);
        // Errnos and small values are not addresses: shown as they are.
        for (v, text) in [
            ((-2i64) as u64, "ret=-2"),
            (0xffff_fffe, "ret=-2"),
            (0x8000_0000, "ret=0x80000000"),
            (0x1d, "ret=0x1d"),
        ] {
            r.retval = v;
            let mut s = String::new();
            write_record(&mut s, &r, "f", opts).unwrap();
            assert!(s.contains(text), "{}", s);
        }
        // A reader who may see addresses sees the value.
        r.retval = 0xffff_8880_0123_4500;
        let mut s = String::new();
        write_record(&mut s, &r, "kmalloc", ALL).unwrap();
        assert!(s.contains("ret=0xffff888001234500"), "{}", s);
    }

    #[test]
    fn hashed_names() {
        let mut n = HashedName::new();
        assert_eq!(n.set(0x0123_abcd), "ptr:0123abcd");
        assert_eq!(n.set(0xffff_ffff), "ptr:ffffffff");
        assert!(is_kernel_addr(0xffff_ffff_8100_0000));
        assert!(!is_kernel_addr(0x7fff_ffff_f000));
        assert!(!is_kernel_addr((-12i64) as u64));
    }
}
