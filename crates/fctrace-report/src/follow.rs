// SPDX-License-Identifier: GPL-2.0 OR MIT

//! Following a value through a trace (`fctrace-report follow VALUE`): every call whose
//! arguments or return value carry it, in the order of the trace, with the path to each,
//! so that one sees where a user buffer, an object or a file name went.
//!
//! What carries a value:
//! - a number (`0xffff888002777f28`, `4096`, `-2`): an argument or return value equal to
//!   it, however printed (hex, decimal, typed `-2 (ENOENT)`, a structure's words
//!   `(struct x)[0x1:0x2]`); with a size (`--size N`), any value in `[VALUE, VALUE+N)`,
//!   shown with its offset (a member of the object);
//! - a hashed pointer (`ptr:5d1c2e07`, what a reader without the right to see addresses
//!   gets): the same hash;
//! - anything else, a string: a string argument that contains it, or one cut at its
//!   length limit (`"..."...`) whose text is the start of it.

use crate::tree::{NodeId, Trace};
use serde::Serialize;
use std::io::{self, Write};

/// What is followed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Needle {
    /// A number, and the size of the object it starts (0: the number alone).
    Number(u64, u64),
    /// A pointer's hash as printed (`ptr:5d1c2e07`).
    Hash(String),
    /// A string.
    Text(String),
}

impl Needle {
    /// `text` as given on the command line.
    pub fn parse(text: &str, size: u64) -> Needle {
        if let Some(v) = number(text) {
            return Needle::Number(v, size);
        }
        if text.starts_with("ptr:") {
            return Needle::Hash(text.to_string());
        }
        Needle::Text(text.to_string())
    }
}

/// A number as fctrace prints it, as a 64-bit word: `0x1f`, `31`, `-2`.
fn number(text: &str) -> Option<u64> {
    if let Some(hex) = text.strip_prefix("0x") {
        return u64::from_str_radix(hex, 16).ok();
    }
    if let Ok(v) = text.parse::<u64>() {
        return Some(v);
    }
    text.parse::<i64>().ok().map(|v| v as u64)
}

/// The content of a quoted string argument as printed (`"a\x7cb"...`): its bytes, and
/// whether it was cut. `None` if `value` is not a string.
pub fn unquote(value: &str) -> Option<(Vec<u8>, bool)> {
    let value = value
        .strip_suffix(crate::parse::READ_AT_RETURN)
        .unwrap_or(value);
    let rest = value.strip_prefix('"')?;
    let (body, cut) = if let Some(b) = rest.strip_suffix("\"...") {
        (b, true)
    } else {
        (rest.strip_suffix('"')?, false)
    };
    let mut out = Vec::with_capacity(body.len());
    let mut it = body.bytes();
    while let Some(c) = it.next() {
        if c != b'\\' {
            out.push(c);
            continue;
        }
        match it.next()? {
            b'n' => out.push(b'\n'),
            b't' => out.push(b'\t'),
            b'x' => {
                let hi = it.next()?;
                let lo = it.next()?;
                let h = std::str::from_utf8(&[hi, lo]).ok()?.to_string();
                out.push(u8::from_str_radix(&h, 16).ok()?);
            }
            other => out.push(other),
        }
    }
    Some((out, cut))
}

/// How a value printed as `value` carries `needle`: `Some(None)` exactly, `Some(Some(off))`
/// at offset `off` inside the object, `None` not at all.
fn carries(value: &str, needle: &Needle) -> Option<Option<u64>> {
    match needle {
        Needle::Number(v, size) => {
            let num = value.split_whitespace().next()?;
            // A structure passed in registers: `(struct x)[0x1:0x2]`, its words.
            let words: Vec<&str> = match value.find(")[") {
                Some(i) => value
                    .get(i + 2..)?
                    .trim_end_matches(']')
                    .split(':')
                    .collect(),
                None => vec![num],
            };
            words.iter().filter_map(|w| number(w)).find_map(|x| {
                if x == *v {
                    Some(None)
                } else {
                    let off = x.wrapping_sub(*v);
                    (off < *size).then_some(Some(off))
                }
            })
        }
        Needle::Hash(h) => (value == h).then_some(None),
        Needle::Text(t) => {
            let (s, cut) = unquote(value)?;
            let t = t.as_bytes();
            let inside = s.windows(t.len().max(1)).any(|w| w == t);
            let starts = cut && t.starts_with(&s);
            (inside || starts).then_some(None)
        }
    }
}

/// Where a value was met: an argument, or the return value.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Place {
    /// The argument's name (`arg0`... for raw registers), or `ret`.
    pub name: String,
    /// The value as printed.
    pub value: String,
    /// Its offset from the value followed, if inside the object (`--size`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub offset: Option<u64>,
}

/// A call that carries the value.
#[derive(Clone, Debug, Serialize)]
pub struct Hit {
    /// The line of the call (its opening line).
    pub line: usize,
    /// The thread (`COMM-TID`).
    pub task: String,
    /// The functions from the top of its tree to the call (the call last).
    pub path: Vec<String>,
    /// Where the value was.
    pub places: Vec<Place>,
}

/// Every call of `trace` that carries `needle`, in the order of the trace.
pub fn find(trace: &Trace, needle: &Needle) -> Vec<Hit> {
    let mut out = Vec::new();
    let mut ids: Vec<NodeId> = (0..trace.nodes.len()).collect();
    ids.sort_by_key(|&id| trace.nodes.get(id).map_or(0, |n| n.line_no));
    for id in ids {
        let Some(n) = trace.nodes.get(id) else {
            continue;
        };
        if !n.is_call() {
            continue;
        }
        let mut places: Vec<Place> = Vec::new();
        for (name, value) in n.args.pairs() {
            if let Some(offset) = carries(&value, needle) {
                places.push(Place {
                    name,
                    value,
                    offset,
                });
            }
        }
        // Strings read at the return (`args`): the call's, where it could not read them.
        let late = n.close_notes.iter().flat_map(|c| c.read_at_return.iter());
        for (name, value) in late {
            if places.iter().any(|p| &p.name == name) {
                continue;
            }
            if let Some(offset) = carries(value, needle) {
                places.push(Place {
                    name: name.clone(),
                    value: format!("{}{}", value, crate::parse::READ_AT_RETURN),
                    offset,
                });
            }
        }
        if let Some(r) = n.ret() {
            if let Some(offset) = carries(r, needle) {
                places.push(Place {
                    name: "ret".to_string(),
                    value: r.to_string(),
                    offset,
                });
            }
        }
        if places.is_empty() {
            continue;
        }
        let mut path = vec![n.label()];
        let mut at = id;
        // Parents have smaller ids: the walk ends.
        while let Some(p) = trace
            .nodes
            .get(at)
            .and_then(|x| x.parent)
            .filter(|&p| p < at)
        {
            if let Some(pn) = trace.nodes.get(p) {
                path.push(pn.label());
            }
            at = p;
        }
        path.reverse();
        out.push(Hit {
            line: n.line_no,
            task: trace
                .thread_of(id)
                .map(|t| t.task.to_string())
                .unwrap_or_default(),
            path,
            places,
        });
    }
    out
}

/// Writes the hits as text: one line per call, its path, and where the value was.
pub fn write_text(w: &mut (impl Write + ?Sized), what: &str, hits: &[Hit]) -> io::Result<()> {
    let mut tasks: Vec<&str> = hits.iter().map(|h| h.task.as_str()).collect();
    tasks.sort_unstable();
    tasks.dedup();
    writeln!(
        w,
        "# {} call{} carry {} ({} task{})",
        hits.len(),
        if hits.len() == 1 { "" } else { "s" },
        what,
        tasks.len(),
        if tasks.len() == 1 { "" } else { "s" }
    )?;
    for h in hits {
        let places: Vec<String> = h
            .places
            .iter()
            .map(|p| match p.offset {
                Some(off) => format!("{}={} (+{:#x})", p.name, p.value, off),
                None => format!("{}={}", p.name, p.value),
            })
            .collect();
        writeln!(
            w,
            "line {:<6} {}  {}: {}",
            h.line,
            h.task,
            h.path.join(" > "),
            places.join(", ")
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{load_str, LoadOptions};

    #[test]
    fn strings_unquoted() {
        assert_eq!(unquote("\"a\\x7cb\""), Some((b"a|b".to_vec(), false)));
        assert_eq!(unquote("\"/tmp/x\"..."), Some((b"/tmp/x".to_vec(), true)));
        assert_eq!(unquote("\"q\\\"\\\\\""), Some((b"q\"\\".to_vec(), false)));
        assert_eq!(unquote("0x1"), None);
        assert_eq!(unquote("\"bad\\x4\""), None);
    }

    #[test]
    fn values_carried() {
        let n = Needle::parse("0xffff888002777f28", 0);
        assert_eq!(carries("0xffff888002777f28", &n), Some(None));
        assert_eq!(carries("0xffff888002777f30", &n), None);
        let sized = Needle::parse("0xffff888002777f28", 0x40);
        assert_eq!(carries("0xffff888002777f30", &sized), Some(Some(8)));
        assert_eq!(carries("0xffff888002777f20", &sized), None);
        assert_eq!(
            carries("(struct x)[0x1:0xffff888002777f28]", &n),
            Some(None)
        );
        let four = Needle::parse("4096", 0);
        assert_eq!(carries("4096", &four), Some(None));
        assert_eq!(carries("0x1000", &four), Some(None));
        let e = Needle::parse("-2", 0);
        assert_eq!(carries("-2 (ENOENT)", &e), Some(None));
        let h = Needle::parse("ptr:5d1c2e07", 0);
        assert_eq!(carries("ptr:5d1c2e07", &h), Some(None));
        let s = Needle::parse("notes", 0);
        assert_eq!(carries("\"/tmp/fct/notes.txt\"", &s), Some(None));
        assert_eq!(carries("\"/tmp/fct/other.txt\"", &s), None);
        let long = Needle::parse("/tmp/fct/a-very-long-name", 0);
        assert_eq!(carries("\"/tmp/fct/a-ve\"...", &long), Some(None));
        assert_eq!(carries("\"/tmp/fct/a-ve\"", &long), None);
    }

    #[test]
    fn strings_read_at_the_return_are_followed() {
        let t = "\
 0)             t-7 |                 |  a(dfd=-100, filename=0x5b050f (unreadable)) {
 0)             t-7 |        1.000 us  |    b(name=\"/etc/x\" (read at return)); /* ret=0 */
 0)             t-7 |        9.000 us  |  } /* a ret=3, filename=\"/etc/x\" (read at return) */
";
        let (tr, _) = load_str(t, LoadOptions::default()).unwrap();
        let hits = find(&tr, &Needle::parse("/etc/x", 0));
        let got: Vec<(String, String)> = hits
            .iter()
            .map(|h| (h.path.join(">"), h.places[0].value.clone()))
            .collect();
        assert_eq!(
            got,
            [
                ("a".into(), "\"/etc/x\" (read at return)".into()),
                ("a>b".into(), "\"/etc/x\" (read at return)".into())
            ]
        );
        assert_eq!(hits[0].places[0].name, "filename");
        // The pointer itself is followed too.
        let hits = find(&tr, &Needle::parse("0x5b050f", 0));
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].places.len(), 1);
    }

    #[test]
    fn hits_in_order_with_paths() {
        let t = "\
 0)             t-7 |                 |  a(p=0x10, name=\"/tmp/x\") {
 0)             t-7 |        1.000 us  |    b(q=0x18); /* ret=0x0 */
 0)             t-7 |                 |    c(r=0x20) {
 0)             t-7 |        1.000 us  |      d(); /* ret=0x10 */
 0)             t-7 |        3.000 us  |    } /* c ret=0x0 */
 0)             t-7 |        9.000 us  |  } /* a ret=0 */
";
        let (tr, _) = load_str(t, LoadOptions::default()).unwrap();
        let hits = find(&tr, &Needle::parse("0x10", 0));
        let paths: Vec<String> = hits.iter().map(|h| h.path.join(">")).collect();
        assert_eq!(paths, ["a", "a>c>d"]);
        assert_eq!(hits[1].places[0].name, "ret");
        let hits = find(&tr, &Needle::parse("0x10", 0x10));
        assert_eq!(hits.len(), 3);
        assert_eq!(hits[1].places[0].offset, Some(8));
        let hits = find(&tr, &Needle::parse("/tmp", 0));
        assert_eq!(hits.len(), 1);
        let mut out = Vec::new();
        write_text(&mut out, "/tmp", &hits).unwrap();
        let out = String::from_utf8(out).unwrap();
        assert!(out.contains("# 1 call carry /tmp (1 task)"), "{}", out);
        assert!(
            out.contains("line 1      t-7  a: name=\"/tmp/x\""),
            "{}",
            out
        );
    }
}
