// SPDX-License-Identifier: GPL-2.0 OR MIT

//! The line parser: the text of fctrace's `trace` and `trace_pipe` files into events.
//!
//! A line is `CPU) COMM-TID | DURATION | FUNCTION`, a `CPU:N [LOST M EVENTS]` marker,
//! a header line (`#...`, only in `trace`) or empty. See the crate's README for the
//! grammar of the FUNCTION column.

use serde::Serialize;
use std::fmt;

/// A line that could not be parsed: where, what it was, and why.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ParseError {
    /// 1-based line number in the input.
    pub line_no: usize,
    /// The line as read (without its line end).
    pub line: String,
    /// What was wrong with it.
    pub reason: String,
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}: {:?}", self.line_no, self.reason, self.line)
    }
}

impl std::error::Error for ParseError {}

/// The thread a line belongs to: its command name and thread id.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub struct Task {
    /// The command name (`comm`), which may contain `-` and spaces.
    pub comm: String,
    /// The thread id (the number after the last `-`).
    pub tid: u32,
}

impl fmt::Display for Task {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.comm, self.tid)
    }
}

/// A call's arguments, as the `args` option shows them.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", content = "list", rename_all = "snake_case")]
pub enum Args {
    /// `()`: no arguments, or none recorded (the `args` option off).
    #[default]
    None,
    /// `(?)`: not known (no BTF for the function, or its argument record was lost).
    Unknown,
    /// `(raw: 0x1, 0x2)`: the argument registers, without types.
    Raw(Vec<String>),
    /// `(a=1, b="x")`: named arguments in order, as printed; `...` (more arguments
    /// than shown) as a last entry with name `...` and an empty value.
    Named(Vec<(String, String)>),
}

impl Args {
    /// The arguments as (name, value) pairs: raw registers are named `arg0`, `arg1`...
    pub fn pairs(&self) -> Vec<(String, String)> {
        match self {
            Args::None | Args::Unknown => Vec::new(),
            Args::Raw(v) => v
                .iter()
                .enumerate()
                .map(|(i, x)| (format!("arg{}", i), x.clone()))
                .collect(),
            Args::Named(v) => v.clone(),
        }
    }
}

/// The notes of a line's comment (`/* tail call, ret=0 */`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Notes {
    /// `tail call`: reached by a jump, not a call.
    #[serde(skip_serializing_if = "is_false")]
    pub tail_call: bool,
    /// `indirect`: called through a function pointer.
    #[serde(skip_serializing_if = "is_false")]
    pub indirect: bool,
    /// `page fault`: the work of a page fault taken inside the caller.
    #[serde(skip_serializing_if = "is_false")]
    pub page_fault: bool,
    /// `not followed: REASON`: the reason.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub not_followed: Option<String>,
    /// `task exited` (closing lines).
    #[serde(skip_serializing_if = "is_false")]
    pub task_exited: bool,
    /// `return not seen` (closing lines).
    #[serde(skip_serializing_if = "is_false")]
    pub return_not_seen: bool,
    /// `ret=VALUE`: the value as printed (`0x1d`, `-2 (ENOENT)`, `true`...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ret: Option<String>,
    /// `<-caller+0x1c`: where the call was made (`callsite` option), without the `<-`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub callsite: Option<String>,
    /// `ERROR`: the return value is a negative errno (`errors` option).
    #[serde(skip_serializing_if = "is_false")]
    pub error: bool,
    /// `name="..." (read at return)` (closing lines, `args`): the call's strings that
    /// could not be read when it was made, read when it returned: name and value as
    /// printed, without the mark.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub read_at_return: Vec<(String, String)>,
    /// Notes this parser does not know, kept as they are.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub other: Vec<String>,
}

fn is_false(b: &bool) -> bool {
    !*b
}

impl Notes {
    /// Whether there is no note at all.
    pub fn is_empty(&self) -> bool {
        *self == Notes::default()
    }

    /// The notes other than `ret=` and `not followed:` as text (`tail call, indirect`).
    pub fn flags_text(&self) -> String {
        let mut v: Vec<&str> = Vec::new();
        if self.tail_call {
            v.push("tail call");
        }
        if self.indirect {
            v.push("indirect");
        }
        if self.page_fault {
            v.push("page fault");
        }
        if self.task_exited {
            v.push("task exited");
        }
        if self.return_not_seen {
            v.push("return not seen");
        }
        v.extend(self.other.iter().map(String::as_str));
        v.join(", ")
    }
}

/// A call on an opening (`f(...) {`) or one-line (`f(...);`) line.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Call {
    /// The function's name (with compiler suffixes such as `.isra.0` as printed).
    pub name: String,
    /// The module the function belongs to (`f(...) [ext4] {`), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub module: Option<String>,
    /// The arguments.
    pub args: Args,
    /// The notes of the line's comment.
    pub notes: Notes,
}

/// What the FUNCTION column of a task's line holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Body {
    /// `f(...) {`: a call that opens a frame.
    Open(Call),
    /// `f(...);`: a call with nothing recorded inside it.
    Leaf(Call),
    /// `}` or `} /* f notes */`: the innermost open frame returns.
    Close {
        /// The function named in the comment, if there is one.
        name: Option<String>,
        /// The comment's notes.
        notes: Notes,
    },
    /// `==========> irq`: an interrupt's tree begins (`irq`, `softirq`...).
    IrqEnter {
        /// What kind of interrupt.
        what: String,
    },
    /// `<========== irq`: the interrupt's tree ends.
    IrqExit {
        /// What kind of interrupt.
        what: String,
    },
}

/// A line of a task: `[TIME |] CPU) COMM-TID | DURATION | FUNCTION`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TaskLine {
    /// The event's time (`abstime` option), in nanoseconds (to the microsecond).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ts_ns: Option<u64>,
    /// The CPU the event was recorded on.
    pub cpu: u32,
    /// The thread.
    pub task: Task,
    /// The duration in nanoseconds, if the line has one.
    pub duration_ns: Option<u64>,
    /// The nesting depth given by the indentation (0: two spaces).
    pub depth: usize,
    /// What the line says.
    pub body: Body,
}

/// One parsed line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// A task's line.
    Task(Box<TaskLine>),
    /// `CPU:N [LOST M EVENTS]`.
    Lost {
        /// The CPU whose buffer lost events.
        cpu: u32,
        /// How many.
        count: u64,
    },
}

/// Parses one line (without its line end). `Ok(None)`: a line with nothing to say (a
/// header line starting with `#`, or an empty one).
pub fn parse_line(line: &str, line_no: usize) -> Result<Option<Event>, ParseError> {
    let err = |reason: &str| ParseError {
        line_no,
        line: line.to_string(),
        reason: reason.to_string(),
    };
    let trimmed = line.trim();
    if trimmed.is_empty() || trimmed.starts_with('#') {
        return Ok(None);
    }
    if let Some(rest) = trimmed.strip_prefix("CPU:") {
        return parse_lost(rest)
            .map(Some)
            .ok_or_else(|| err("expected a lost-events marker `CPU:N [LOST M EVENTS]`"));
    }
    parse_task_line(line)
        .map(|t| Some(Event::Task(Box::new(t))))
        .map_err(|reason| err(&reason))
}

/// `N [LOST M EVENTS]` (after `CPU:`).
fn parse_lost(rest: &str) -> Option<Event> {
    let (cpu, rest) = rest.split_once(' ')?;
    let count = rest
        .trim()
        .strip_prefix("[LOST ")?
        .strip_suffix(" EVENTS]")?;
    Some(Event::Lost {
        cpu: cpu.parse().ok()?,
        count: count.trim().parse().ok()?,
    })
}

/// A task's line. The `|` separating the columns are found by trying each `|` as the end
/// of the task column, in order, until the 17 characters after it make a duration column
/// followed by a `|` (a command name may contain `|`; the function column's arguments
/// may too, but they come after the first two separators).
fn parse_task_line(line: &str) -> Result<TaskLine, String> {
    let (ts_ns, line) = strip_abstime(line);
    let mut first_error = None;
    for (p1, _) in line.match_indices('|') {
        let (Some(head), Some(after)) = (line.get(..p1), line.get(p1 + 1..)) else {
            continue;
        };
        let Some(p2) = after.find('|') else {
            break;
        };
        let (Some(dur), Some(func)) = (after.get(..p2), after.get(p2 + 1..)) else {
            continue;
        };
        let attempt = parse_head(head).and_then(|(cpu, task)| {
            let duration_ns = parse_duration(dur)?;
            Ok((cpu, task, duration_ns))
        });
        match attempt {
            Ok((cpu, task, duration_ns)) => {
                let (depth, body) = parse_function(func)?;
                return Ok(TaskLine {
                    ts_ns,
                    cpu,
                    task,
                    duration_ns,
                    depth,
                    body,
                });
            }
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    Err(first_error.unwrap_or_else(|| {
        "not a trace line: expected `CPU) TASK-TID | DURATION | FUNCTION`".into()
    }))
}

/// The time column of the `abstime` option (`  12345.678901 | `): the time in
/// nanoseconds and the rest of the line; else the line as it is.
fn strip_abstime(line: &str) -> (Option<u64>, &str) {
    let Some((head, rest)) = line.split_once('|') else {
        return (None, line);
    };
    let Some((s, us)) = head.trim().split_once('.') else {
        return (None, line);
    };
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|c| c.is_ascii_digit());
    if !digits(s) || us.len() != 6 || !digits(us) {
        return (None, line);
    }
    let ts = s
        .parse::<u64>()
        .ok()
        .and_then(|s| s.checked_mul(1_000_000_000))
        .zip(us.parse::<u64>().ok())
        .and_then(|(a, b)| a.checked_add(b * 1000));
    match ts {
        Some(t) => (Some(t), rest),
        None => (None, line),
    }
}

/// ` 1)         fct_cat-69 ` into the CPU and the task.
fn parse_head(head: &str) -> Result<(u32, Task), String> {
    let head = head.trim_start();
    let (cpu, task) = head
        .split_once(')')
        .ok_or("expected `CPU)` at the start of the line")?;
    let cpu = cpu
        .parse::<u32>()
        .map_err(|_| format!("bad CPU number {:?}", cpu))?;
    let task = task.trim();
    let (comm, tid) = task
        .rsplit_once('-')
        .ok_or_else(|| format!("expected COMM-TID, got {:?}", task))?;
    let tid = tid
        .parse::<u32>()
        .map_err(|_| format!("bad thread id in {:?}", task))?;
    Ok((
        cpu,
        Task {
            comm: comm.trim_start().to_string(),
            tid,
        },
    ))
}

/// The duration column: empty, or `[mark] N.NNN us` (mark one of ` +!#*@$`), into
/// nanoseconds.
pub fn parse_duration(field: &str) -> Result<Option<u64>, String> {
    let t = field.trim();
    if t.is_empty() {
        return Ok(None);
    }
    let bad = || format!("bad duration {:?}", field.trim());
    let t = t
        .trim_start_matches(['+', '!', '#', '*', '@', '$'])
        .trim_start();
    let num = t.strip_suffix("us").ok_or_else(bad)?.trim_end();
    let (int, frac) = num.split_once('.').unwrap_or((num, ""));
    if int.is_empty()
        || !int.bytes().all(|c| c.is_ascii_digit())
        || !frac.bytes().all(|c| c.is_ascii_digit())
        || frac.len() > 9
    {
        return Err(bad());
    }
    let whole: u64 = int.parse().map_err(|_| bad())?;
    // Nanoseconds: the first three decimals (a finer fraction is cut).
    let mut ns_part = 0u64;
    for i in 0..3 {
        let digit = frac.as_bytes().get(i).map_or(0, |c| u64::from(c - b'0'));
        ns_part = ns_part * 10 + digit;
    }
    whole
        .checked_mul(1000)
        .and_then(|w| w.checked_add(ns_part))
        .map(Some)
        .ok_or_else(bad)
}

/// The function column: indentation and body.
fn parse_function(func: &str) -> Result<(usize, Body), String> {
    let body = func.trim_start_matches(' ');
    let indent = func.len() - body.len();
    if indent < 2 || !indent.is_multiple_of(2) {
        return Err(format!(
            "bad indentation ({} spaces; expected 2 and 2 more per level)",
            indent
        ));
    }
    let depth = (indent - 2) / 2;
    let body = body.trim_end();
    if body.is_empty() {
        return Err("empty function column".into());
    }
    // An interrupt marker's context (`irq` when the marker names none).
    let context = |what: &str| {
        let what = what.trim();
        if what.is_empty() { "irq" } else { what }.to_string()
    };
    if let Some(what) = body.strip_prefix("==========>") {
        return Ok((
            depth,
            Body::IrqEnter {
                what: context(what),
            },
        ));
    }
    if let Some(what) = body.strip_prefix("<==========") {
        return Ok((
            depth,
            Body::IrqExit {
                what: context(what),
            },
        ));
    }
    if let Some(rest) = body.strip_prefix('}') {
        let rest = rest.trim();
        if rest.is_empty() {
            return Ok((
                depth,
                Body::Close {
                    name: None,
                    notes: Notes::default(),
                },
            ));
        }
        let comment = parse_comment(rest)?;
        // A closing line's comment names the function first: `/* f ret=0 */`.
        let (name, notes) = match comment.split_once(' ') {
            Some((name, notes)) => (name, parse_notes(notes)),
            None => (comment, Notes::default()),
        };
        return Ok((
            depth,
            Body::Close {
                name: (!name.is_empty()).then(|| name.to_string()),
                notes,
            },
        ));
    }
    parse_call(body).map(|(open, call)| {
        (
            depth,
            if open {
                Body::Open(call)
            } else {
                Body::Leaf(call)
            },
        )
    })
}

/// `name(ARGS) [module] {` or `...;`, with an optional comment. Returns whether it opens
/// a frame.
fn parse_call(body: &str) -> Result<(bool, Call), String> {
    let open_paren = body
        .find('(')
        .ok_or("expected `name(...) {`, `name(...);` or `}`")?;
    let name = body.get(..open_paren).unwrap_or("");
    if name.is_empty() || name.contains(char::is_whitespace) {
        return Err(format!("bad function name {:?}", name));
    }
    let after_name = body.get(open_paren..).unwrap_or("");
    let close =
        matching_paren(after_name).ok_or("unbalanced parentheses or quotes in the arguments")?;
    let inner = after_name.get(1..close).unwrap_or("");
    let mut rest = after_name.get(close + 1..).unwrap_or("").trim_start();
    let mut module = None;
    if let Some(m) = rest.strip_prefix('[') {
        let (m, r) = m.split_once(']').ok_or("unterminated `[module]`")?;
        module = Some(m.to_string());
        rest = r.trim_start();
    }
    let open = if let Some(r) = rest.strip_prefix('{') {
        rest = r;
        true
    } else if let Some(r) = rest.strip_prefix(';') {
        rest = r;
        false
    } else {
        return Err("expected ` {` or `;` after the call".into());
    };
    let rest = rest.trim();
    let notes = if rest.is_empty() {
        Notes::default()
    } else {
        parse_notes(parse_comment(rest)?)
    };
    Ok((
        open,
        Call {
            name: name.to_string(),
            module,
            args: parse_args(inner),
            notes,
        },
    ))
}

/// `/* text */` into `text`.
fn parse_comment(s: &str) -> Result<&str, String> {
    s.strip_prefix("/*")
        .and_then(|c| c.strip_suffix("*/"))
        .map(str::trim)
        .ok_or_else(|| format!("expected a comment `/* ... */`, got {:?}", s))
}

/// The characters of `s` (with their byte indices) outside double-quoted strings (C
/// escapes honoured inside them); the quotes themselves are left out too.
fn outside_strings(s: &str) -> impl Iterator<Item = (usize, char)> + '_ {
    let (mut in_str, mut escaped) = (false, false);
    s.char_indices().filter(move |&(_, c)| {
        if in_str {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_str = false;
            }
            return false;
        }
        if c == '"' {
            in_str = true;
            return false;
        }
        true
    })
}

/// The index of the `)` matching the `(` at the start of `s`, outside quoted strings.
fn matching_paren(s: &str) -> Option<usize> {
    let mut depth = 0usize;
    for (i, c) in outside_strings(s) {
        match c {
            '(' => depth += 1,
            ')' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// Splits `s` at the commas outside quotes, parentheses and brackets; trims each part.
fn split_top_level(s: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in outside_strings(s) {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                parts.push(s.get(start..i).unwrap_or("").trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(s.get(start..).unwrap_or("").trim());
    parts
}

/// What is between a call's parentheses.
fn parse_args(inner: &str) -> Args {
    let t = inner.trim();
    if t.is_empty() {
        return Args::None;
    }
    if t == "?" {
        return Args::Unknown;
    }
    if let Some(raw) = t.strip_prefix("raw:") {
        return Args::Raw(
            split_top_level(raw)
                .into_iter()
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect(),
        );
    }
    Args::Named(
        split_top_level(t)
            .into_iter()
            .map(|part| match part.split_once('=') {
                Some((n, v)) => (n.trim().to_string(), v.trim().to_string()),
                None => (part.to_string(), String::new()),
            })
            .collect(),
    )
}

/// The comma-separated notes of a comment. `ret=` is the last note: its value is the
/// rest of the comment, commas and all.
fn parse_notes(text: &str) -> Notes {
    let mut notes = Notes::default();
    let mut rest = text.trim();
    while !rest.is_empty() {
        if let Some(v) = rest.strip_prefix("ret=") {
            // The value comes after the other notes; `ERROR` (`errors` option) and the
            // strings read at the return follow it.
            let mut parts = split_top_level(v).into_iter();
            notes.ret = parts.next().map(str::to_string);
            for p in parts {
                late_or_other(&mut notes, p);
            }
            break;
        }
        if read_at_return(rest).is_some() {
            // Strings read at the return with no value before them (a `void` function).
            for p in split_top_level(rest) {
                late_or_other(&mut notes, p);
            }
            break;
        }
        let (note, r) = match rest.split_once(',') {
            Some((n, r)) => (n.trim(), r.trim_start()),
            None => (rest, ""),
        };
        rest = r;
        match note {
            "tail call" => notes.tail_call = true,
            "indirect" => notes.indirect = true,
            "page fault" => notes.page_fault = true,
            "task exited" => notes.task_exited = true,
            "return not seen" => notes.return_not_seen = true,
            "ERROR" => notes.error = true,
            "" => {}
            n if n.starts_with("<-") => {
                notes.callsite = n.get(2..).map(str::to_string);
            }
            n => match n.strip_prefix("not followed:") {
                Some(reason) => notes.not_followed = Some(reason.trim().to_string()),
                None => notes.other.push(n.to_string()),
            },
        }
    }
    notes
}

/// `name="..." (read at return)`: the name and the value without the mark.
fn read_at_return(note: &str) -> Option<(&str, &str)> {
    let first = split_top_level(note).into_iter().next()?;
    let (name, value) = first.split_once('=')?;
    let value = value.strip_suffix(READ_AT_RETURN)?;
    (!name.contains(char::is_whitespace) && value.starts_with('"')).then_some((name, value))
}

/// The mark of a string read at the call's return.
pub const READ_AT_RETURN: &str = " (read at return)";

/// A note after `ret=`: `ERROR`, a string read at the return, or one not known.
fn late_or_other(notes: &mut Notes, p: &str) {
    if p == "ERROR" {
        notes.error = true;
    } else if let Some((n, v)) = read_at_return(p) {
        notes.read_at_return.push((n.to_string(), v.to_string()));
    } else if !p.is_empty() {
        notes.other.push(p.to_string());
    }
}

/// What parsing a whole input gave.
#[derive(Clone, Debug, Default)]
pub struct Parsed {
    /// The events, each with its 1-based line number.
    pub events: Vec<(usize, Event)>,
    /// Lines read.
    pub lines: usize,
    /// Lines skipped because they could not be parsed (with `lenient`).
    pub skipped: Vec<ParseError>,
}

/// Parses a whole input. Without `lenient`, the first line that cannot be parsed is the
/// error; with it, such lines are skipped and listed in [`Parsed::skipped`].
pub fn parse_text(text: &str, lenient: bool) -> Result<Parsed, ParseError> {
    let mut events = Vec::new();
    let (lines, skipped) = for_each_event(text, lenient, |line_no, e| events.push((line_no, e)))?;
    Ok(Parsed {
        events,
        lines,
        skipped,
    })
}

/// Parses a whole input and hands each event to `f` with its line number, without
/// keeping them. Returns the number of lines and the lines skipped (`lenient`), or
/// the first line that could not be parsed.
pub fn for_each_event(
    text: &str,
    lenient: bool,
    mut f: impl FnMut(usize, Event),
) -> Result<(usize, Vec<ParseError>), ParseError> {
    let mut lines = 0;
    let mut skipped = Vec::new();
    if text.is_empty() {
        return Ok((0, skipped));
    }
    // The piece after a last line end is not a line.
    let body = text.strip_suffix('\n').unwrap_or(text);
    for (i, line) in body.split('\n').enumerate() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        let line_no = i + 1;
        lines = line_no;
        match parse_line(line, line_no) {
            Ok(Some(e)) => f(line_no, e),
            Ok(None) => {}
            Err(e) if lenient => skipped.push(e),
            Err(e) => return Err(e),
        }
    }
    Ok((lines, skipped))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(line: &str) -> TaskLine {
        match parse_line(line, 1) {
            Ok(Some(Event::Task(t))) => *t,
            other => panic!("{:?}", other),
        }
    }

    #[test]
    fn open_with_args() {
        let t = task(" 1)         fct_cat-69 |                 |  do_sys_openat2(dfd=-100, filename=\"/tmp/fct/notes.txt\", how=0xffff888002777f28) {");
        assert_eq!(t.cpu, 1);
        assert_eq!(t.task.comm, "fct_cat");
        assert_eq!(t.task.tid, 69);
        assert_eq!(t.depth, 0);
        assert_eq!(t.duration_ns, None);
        let Body::Open(c) = t.body else { panic!() };
        assert_eq!(c.name, "do_sys_openat2");
        assert_eq!(
            c.args,
            Args::Named(vec![
                ("dfd".into(), "-100".into()),
                ("filename".into(), "\"/tmp/fct/notes.txt\"".into()),
                ("how".into(), "0xffff888002777f28".into()),
            ])
        );
    }

    #[test]
    fn leaf_with_duration_and_notes() {
        let t = task(" 1)         fct_cat-69 | +     31.637 us  |    build_open_flags(how=0xffff888002777f28, op=0xffff888002777ee8); /* tail call, ret=0 */");
        assert_eq!(t.duration_ns, Some(31_637));
        assert_eq!(t.depth, 1);
        let Body::Leaf(c) = t.body else { panic!() };
        assert!(c.notes.tail_call);
        assert_eq!(c.notes.ret.as_deref(), Some("0"));
    }

    #[test]
    fn pipes_and_dashes_in_names_and_strings() {
        let t = task(" 3)    my-a|b wo-rk-123 | #   5290.635 us  |      write(buf=\"a|b) {\\\"\", n=3) [fct_testmod] { /* indirect */");
        assert_eq!(t.task.comm, "my-a|b wo-rk");
        assert_eq!(t.task.tid, 123);
        assert_eq!(t.duration_ns, Some(5_290_635));
        assert_eq!(t.depth, 2);
        let Body::Open(c) = t.body else { panic!() };
        assert_eq!(c.module.as_deref(), Some("fct_testmod"));
        assert!(c.notes.indirect);
        assert_eq!(
            c.args,
            Args::Named(vec![
                ("buf".into(), "\"a|b) {\\\"\"".into()),
                ("n".into(), "3".into())
            ])
        );
    }

    #[test]
    fn closes() {
        let t =
            task(" 1)         fct_cat-69 | #   5345.787 us  |    } /* getname ret=-2 (ENOENT) */");
        assert_eq!(
            t.body,
            Body::Close {
                name: Some("getname".into()),
                notes: Notes {
                    ret: Some("-2 (ENOENT)".into()),
                    ..Notes::default()
                }
            }
        );
        // A string read at the return (`args`), after the value and `ERROR`; one with a
        // comma and the mark's own words inside it.
        let t = task(concat!(
            " 0)         fct_ops-81 |   174.905 us  |  } /* do_sys_openat2 ret=-2 (ENOENT), ",
            "ERROR, filename=\"/tmp/a, b (read at return)\" (read at return) */"
        ));
        let Body::Close { notes, .. } = t.body else {
            panic!()
        };
        assert_eq!(notes.ret.as_deref(), Some("-2 (ENOENT)"));
        assert!(notes.error);
        assert_eq!(
            notes.read_at_return,
            [(
                "filename".to_string(),
                "\"/tmp/a, b (read at return)\"".to_string()
            )]
        );
        assert!(notes.other.is_empty());
        // A void function's: no value before it.
        let t = task(" 0)  t-7 |   1.000 us  |  } /* f name=\"x\" (read at return) */");
        let Body::Close { notes, .. } = t.body else {
            panic!()
        };
        assert_eq!(notes.ret, None);
        assert_eq!(notes.read_at_return.len(), 1);
        let t = task(" 1)         fct_cat-69 | !    139.810 us  |          }");
        assert_eq!(t.depth, 4);
        assert_eq!(t.duration_ns, Some(139_810));
        let t = task(" 0)         fct_cat-69 |                 |  } /* do_exit task exited */");
        let Body::Close { notes, .. } = t.body else {
            panic!()
        };
        assert!(notes.task_exited);
    }

    #[test]
    fn not_followed_raw_unknown_and_irq() {
        let t = task(" 0)         fct_cat-67 |                 |          memset(?); /* not followed: unprobeable */");
        let Body::Leaf(c) = t.body else { panic!() };
        assert_eq!(c.args, Args::Unknown);
        assert_eq!(c.notes.not_followed.as_deref(), Some("unprobeable"));
        let t = task(" 0)         fct_cat-67 |                 |    f(raw: 0x1, 0x2);");
        let Body::Leaf(c) = t.body else { panic!() };
        assert_eq!(c.args, Args::Raw(vec!["0x1".into(), "0x2".into()]));
        let t = task(" 1)       fct_bench-57 |                 |  ==========> irq");
        assert_eq!(t.body, Body::IrqEnter { what: "irq".into() });
        let t = task(" 1)       fct_bench-57 |                 |  <========== softirq");
        assert_eq!(
            t.body,
            Body::IrqExit {
                what: "softirq".into()
            }
        );
    }

    #[test]
    fn lost_and_headers() {
        assert_eq!(
            parse_line("CPU:1 [LOST 12 EVENTS]", 3),
            Ok(Some(Event::Lost { cpu: 1, count: 12 }))
        );
        assert_eq!(parse_line("# tracer: fctrace", 1), Ok(None));
        assert_eq!(parse_line("", 1), Ok(None));
    }

    #[test]
    fn whole_inputs() {
        let line = " 1) cat-1 |        1.000 us  |  f();";
        for (text, lines, events) in [
            ("", 0, 0),
            ("\n", 1, 0),
            (line, 1, 1),
            (&format!("{}\r\n", line), 1, 1),
            (&format!("# tracer: fctrace\n{}\n\n{}", line, line), 4, 2),
        ] {
            let p = parse_text(text, false).unwrap();
            assert_eq!((p.lines, p.events.len()), (lines, events), "{:?}", text);
        }
        let text = format!("{}\nnoise\n{}\nmore noise\n", line, line);
        let e = parse_text(&text, false).unwrap_err();
        assert_eq!((e.line_no, e.line.as_str()), (2, "noise"));
        let p = parse_text(&text, true).unwrap();
        assert_eq!(p.events.len(), 2);
        let skipped: Vec<usize> = p.skipped.iter().map(|e| e.line_no).collect();
        assert_eq!(skipped, [2, 4]);
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("                 "), Ok(None));
        assert_eq!(
            parse_duration(" $ 1234567.891 us  "),
            Ok(Some(1_234_567_891))
        );
        assert_eq!(parse_duration("        0.870 us  "), Ok(Some(870)));
        assert!(parse_duration(" + 12.3.4 us ").is_err());
        assert!(parse_duration(" + 99999999999999999999.000 us ").is_err());
        assert!(parse_duration(" + 12 ms ").is_err());
    }

    #[test]
    fn errors_name_the_line() {
        let e = parse_line(" 1)  cat-1 |  |  foo bar", 7).unwrap_err();
        assert_eq!(e.line_no, 7);
        assert_eq!(e.line, " 1)  cat-1 |  |  foo bar");
        for bad in [
            "garbage",
            "CPU:x [LOST 1 EVENTS]",
            " 1) cat |   |  f();",
            " 1) cat-1 |   | f();",
            " 1) cat-1 |   |  f(a=\"x);",
            " 1) cat-1 |   |  f() [mod {",
            " 1) cat-1 |   |  f() /* x */",
            " 1) cat-1 |   |  } /* unterminated",
            " x) cat-1 |   |  f();",
            "\u{1F600}|\u{1F600}|\u{1F600}",
        ] {
            assert!(parse_line(bad, 1).is_err(), "{}", bad);
        }
    }
}
