// SPDX-License-Identifier: GPL-2.0

//! Tidy check of the dependency direction among `rust-kmod/`'s modules, run by `cargo test`
//! (like rust-analyzer's `xtask/src/tidy.rs`, it fails on drift with the whole list).
//!
//! Every top-level module of the kernel crate has a layer in [`LAYERS`]; a file may import
//! a module of its own layer or of a lower one, never of a higher one, nor a pair listed in
//! [`FORBIDDEN`]; the import graph among top-level modules has no cycle. A `rust-kmod/*.rs`
//! file (or directory) or a `mod` of the crate root that [`LAYERS`] does not list fails the
//! test too, so that a new or renamed file is placed in a layer deliberately.
//!
//! An import of module `M` is any path that names it, in a `use` or in code: `crate::M`,
//! `use crate::{.., M::{..}, ..}`, `super::M` (in a top-level file `super` is the crate
//! root), `$crate::M`, and a bare `M::` in the file that declares `mod M`. Comments, string
//! and character literals are removed first, so a mention there does not count, nor do
//! `pub(in crate::M)` visibilities or `#[cfg(test)]` modules and `use`s (never built into
//! the kernel module). A path to an item of the crate root (`crate::Item`) imports the
//! crate root.
//!
//! The files under `rust-kmod/engine/` are all the `engine` module here. Among themselves
//! they import one way too: `engine_files_have_no_import_cycle` fails on any cycle among
//! them (and prints it), `engine/mod.rs` left out: it holds the `Tracer`, whose `impl`
//! blocks the other files are, so each of them imports it, and it names their types.
//!
//! The checker is pure functions over `(file name, contents)` pairs, file names relative to
//! `rust-kmod/` (`kprobe.rs`, `engine/step.rs`); the modules the crate root pulls in with
//! `#[path]` are given as `<module>.rs`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt::Write as _;
use std::fs;

use crate::util::repo_root;

/// The layer of each top-level module of the kernel crate (`rust-kmod/<name>.rs`,
/// `rust-kmod/<name>/`, a `#[path]` module or an inline `mod` of the crate root): a module
/// may import modules of its own layer or lower ones only. Entries for files that do not
/// exist (yet) are allowed; a file that is not listed fails the test.
pub(crate) const LAYERS: &[(&str, u8)] = &[
    // 6: the crate root (`module!`, the `mod` list).
    (ROOT, 6),
    // 5: the control file system.
    ("fs", 5),
    // 4: the control files and the trace reader, under fs.
    ("control", 4),
    ("reader", 4),
    // 3: the tracer (every file under engine/, the `args` option's BTF included).
    ("engine", 3),
    // 2: the kernel mechanisms the engine drives; they know nothing of it (a trait or a
    //    callback stands for it).
    ("buffer", 2), // ring buffer and staging
    ("entry_ops", 2),
    ("error_log", 2),
    ("kprobe", 2),
    ("ksym", 2),
    ("trap_notifier", 2),
    // 1: the seam to the kernel's API and the C helpers, plain text output, and the
    //    host-shared no_std crates (one node, `crates`: see [`SHARED`]).
    ("sys", 1),
    ("text", 1),
    (CRATES, 1),
    // 0: the generated bindings (inline `mod bindings` of the crate root).
    ("bindings", 0),
];

/// The node of the host-shared crates' modules in the import graph.
const CRATES: &str = "crates";

/// The modules the crate root pulls in with `#[path]` from `crates/`: host crates
/// (fctrace-core, fctrace-decode) whose modules may use each other as any crate's do, so
/// the graph has one node for them all.
const SHARED: &[&str] = &[
    "a64", "args", "batch", "btf", "decode", "emulate", "errno", "fentry", "format", "going",
    "parse", "presite", "recent", "record", "retstack", "shadow", "sort", "thunks",
];

/// A top-level module's node in the import graph.
fn node(m: &str) -> String {
    if SHARED.contains(&m) {
        CRATES.to_string()
    } else {
        m.to_string()
    }
}

/// Imports forbidden even where [`LAYERS`] would allow them (importer, imported).
pub(crate) const FORBIDDEN: &[(&str, &str)] = &[("control", "reader"), ("reader", "control")];

/// The crate root's module name (its file is `rust-kmod/fctrace_main.rs`).
const ROOT: &str = "fctrace_main";

/// The directory whose files are one module for the top-level check but whose own import
/// graph [`engine_cycles`] prints.
const ENGINE: &str = "engine";

/// Files of `rust-kmod/` that are not modules (`include!`d).
const NOT_MODULES: &[&str] = &["bindings_generated.rs"];

fn layer(module: &str) -> Option<u8> {
    let module = node(module);
    let module = module.as_str();
    LAYERS.iter().find(|(m, _)| *m == module).map(|&(_, l)| l)
}

// ---------------------------------------------------------------------------------------
// Lexing.

/// `src` with comments (line, doc, nested block), string literals (`"…"`, `b"…"`, `c"…"`,
/// raw `r#"…"#`, `br"…"`) and character literals (`'x'`, `b'\n'`) replaced by spaces; line
/// breaks are kept, so line numbers stay. Lifetimes (`'a`) are kept.
pub(crate) fn strip_comments_and_strings(src: &str) -> String {
    let c: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    // Blanks `c[from..to]`, keeping line breaks.
    let blank = |out: &mut String, from: usize, to: usize| {
        for &ch in &c[from..to.min(c.len())] {
            out.push(if ch == '\n' { '\n' } else { ' ' });
        }
    };
    let at = |i: usize| c.get(i).copied().unwrap_or('\0');
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_';
    let mut i = 0;
    while i < c.len() {
        let start = i;
        let word_start = i == 0 || !ident(c[i - 1]);
        // A string literal's prefix: b, c, r, br, cr (then `#`s for raw strings).
        let (prefix, raw) = match (at(i), at(i + 1)) {
            ('b' | 'c', 'r') if word_start => (2, true),
            ('r', _) if word_start => (1, true),
            ('b' | 'c', _) if word_start => (1, false),
            _ => (0, false),
        };
        if at(i) == '/' && at(i + 1) == '/' {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if at(i) == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < c.len() {
                if at(i) == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if at(i) == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if raw && {
            let mut j = i + prefix;
            while at(j) == '#' {
                j += 1;
            }
            at(j) == '"'
        } {
            let mut j = i + prefix;
            let mut hashes = 0;
            while at(j) == '#' {
                hashes += 1;
                j += 1;
            }
            j += 1; // the opening quote
            loop {
                if j >= c.len() {
                    break;
                }
                if c[j] == '"' && (1..=hashes).all(|k| at(j + k) == '#') {
                    j += 1 + hashes;
                    break;
                }
                j += 1;
            }
            i = j;
        } else if at(i) == '"' || (prefix == 1 && !raw && at(i + 1) == '"') {
            let mut j = if at(i) == '"' { i + 1 } else { i + 2 };
            while j < c.len() && c[j] != '"' {
                j += if c[j] == '\\' { 2 } else { 1 };
            }
            i = j + 1;
        } else if at(i) == '\'' || (at(i) == 'b' && word_start && at(i + 1) == '\'') {
            let q = if at(i) == '\'' { i } else { i + 1 };
            if at(q + 1) == '\\' {
                // An escape: up to the closing quote.
                let mut j = q + 3;
                while j < c.len() && c[j] != '\'' && c[j] != '\n' {
                    j += 1;
                }
                i = j + 1;
            } else if at(q + 2) == '\'' {
                i = q + 3;
            } else {
                // A lifetime or a label.
                out.push('\'');
                i = q + 1;
                if q != start {
                    // `b'` that was no byte literal: keep the `b`.
                    out.pop();
                    out.push('b');
                    out.push('\'');
                }
                continue;
            }
        } else {
            out.push(c[i]);
            i += 1;
            continue;
        }
        blank(&mut out, start, i);
    }
    out
}

/// A token of stripped source: an identifier (or keyword, number, `$crate`), `::`, or one
/// other character; with its line (from 1).
#[derive(Clone, Copy, Debug)]
struct Tok<'a> {
    text: &'a str,
    line: usize,
}

impl Tok<'_> {
    fn is_ident(&self) -> bool {
        let t = self.text.strip_prefix('$').unwrap_or(self.text);
        t.starts_with(|c: char| c.is_alphanumeric() || c == '_')
    }
}

fn tokenize(stripped: &str) -> Vec<Tok<'_>> {
    let mut toks = Vec::new();
    let mut line = 1;
    let mut it = stripped.char_indices().peekable();
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    while let Some((i, c)) = it.next() {
        if c == '\n' {
            line += 1;
        } else if c.is_whitespace() {
        } else if ident(c) || (c == '$' && it.peek().is_some_and(|&(_, n)| ident(n))) {
            let mut end = i + c.len_utf8();
            while let Some(&(j, n)) = it.peek() {
                if !ident(n) {
                    break;
                }
                end = j + n.len_utf8();
                it.next();
            }
            toks.push(Tok {
                text: &stripped[i..end],
                line,
            });
        } else if c == ':' && it.peek().is_some_and(|&(_, n)| n == ':') {
            it.next();
            toks.push(Tok { text: "::", line });
        } else {
            toks.push(Tok {
                text: &stripped[i..i + c.len_utf8()],
                line,
            });
        }
    }
    toks
}

// ---------------------------------------------------------------------------------------
// Paths.

/// The module path of a file of the crate (relative to `rust-kmod/`): `fctrace_main.rs`: the
/// root (empty); `kprobe.rs`: `[kprobe]`; `engine/mod.rs`: `[engine]`; `engine/wait/q.rs`:
/// `[engine, wait, q]`.
pub(crate) fn module_path(file: &str) -> Vec<String> {
    let file = file.strip_suffix(".rs").unwrap_or(file);
    if file == ROOT {
        return Vec::new();
    }
    let mut path: Vec<String> = file.split('/').map(str::to_string).collect();
    if path.last().is_some_and(|l| l == "mod") {
        path.pop();
    }
    path
}

/// One path a file names, as written (`[crate, engine, Tracer]`, `[super, x]`), at `line`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RawPath {
    pub(crate) segments: Vec<String>,
    pub(crate) line: usize,
}

/// Parses a path (tree) from `toks[*pos]`, below `prefix`, into `out`: `a::b`, `a::{b, c::d}`,
/// `a::*`, `a::{self as x}`; a path in code ends at its first non-identifier (`::<`, `(`).
fn parse_tree(toks: &[Tok], pos: &mut usize, mut prefix: Vec<String>, out: &mut Vec<RawPath>) {
    let line = toks.get(*pos).map_or(0, |t| t.line);
    while let Some(t) = toks.get(*pos) {
        match t.text {
            "{" => {
                *pos += 1;
                while let Some(t) = toks.get(*pos) {
                    match t.text {
                        "}" => {
                            *pos += 1;
                            break;
                        }
                        "," => *pos += 1,
                        _ => {
                            let before = *pos;
                            parse_tree(toks, pos, prefix.clone(), out);
                            if *pos == before {
                                // Not a path: skip the token rather than loop.
                                *pos += 1;
                            }
                        }
                    }
                }
                return;
            }
            "*" => {
                *pos += 1;
                break;
            }
            _ if t.is_ident() => {
                prefix.push(t.text.to_string());
                *pos += 1;
                let continues = toks.get(*pos).is_some_and(|t| t.text == "::")
                    && toks
                        .get(*pos + 1)
                        .is_some_and(|n| n.is_ident() || n.text == "{" || n.text == "*");
                if continues {
                    *pos += 1;
                    continue;
                }
                if toks.get(*pos).is_some_and(|t| t.text == "as") {
                    *pos += 2;
                }
                if prefix.last().is_some_and(|s| s == "self") && prefix.len() > 1 {
                    prefix.pop();
                }
                break;
            }
            _ => return,
        }
    }
    if !prefix.is_empty() {
        out.push(RawPath {
            segments: prefix,
            line,
        });
    }
}

/// The item that follows `toks[i]` (after its attributes and visibility), when it is one
/// that `#[cfg(test)]` makes skippable: `mod x { … }`, `mod x;` or `use …;`. Returns the
/// index past it.
fn skip_item(toks: &[Tok], mut i: usize) -> Option<usize> {
    let text = |i: usize| toks.get(i).map_or("", |t| t.text);
    // Further attributes.
    while text(i) == "#" && text(i + 1) == "[" {
        i = past_group(toks, i + 1)?;
    }
    if text(i) == "pub" {
        i += 1;
        if text(i) == "(" {
            i = past_group(toks, i)?;
        }
    }
    match text(i) {
        "use" => (i..toks.len()).find(|&j| text(j) == ";").map(|j| j + 1),
        "mod" if text(i + 2) == ";" => Some(i + 3),
        "mod" if text(i + 2) == "{" => past_group(toks, i + 2),
        _ => None,
    }
}

/// The index past the group that opens at `toks[i]` (`(`, `[` or `{`).
fn past_group(toks: &[Tok], i: usize) -> Option<usize> {
    let mut depth = 0i32;
    for (j, t) in toks.iter().enumerate().skip(i) {
        match t.text {
            "(" | "[" | "{" => depth += 1,
            ")" | "]" | "}" => {
                depth -= 1;
                if depth == 0 {
                    return Some(j + 1);
                }
            }
            _ => {}
        }
    }
    None
}

/// Every path to a module or item of the crate that `src` (the file `file`) names, resolved
/// to an absolute path from the crate root (`crate::`, `$crate::`, `super::`, `self::`, and
/// bare paths through the modules the file declares).
pub(crate) fn imports(file: &str, src: &str) -> Vec<RawPath> {
    let stripped = strip_comments_and_strings(src);
    let toks = tokenize(&stripped);
    let text = |i: usize| toks.get(i).map_or("", |t| t.text);
    let here = module_path(file);

    // The modules this file declares at its top level (`mod x;`, `mod x { … }`).
    let mut children = BTreeSet::new();
    let mut depth = 0;
    for (i, t) in toks.iter().enumerate() {
        match t.text {
            "{" => depth += 1,
            "}" => depth -= 1,
            "mod" if depth == 0 && toks.get(i + 1).is_some_and(|n| n.is_ident()) => {
                children.insert(text(i + 1).to_string());
            }
            _ => {}
        }
    }

    let mut out = Vec::new();
    // Inline modules the scan is in: (name, brace depth outside it).
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < toks.len() {
        let t = toks[i];
        // `#[cfg(test)]`: never in the kernel module.
        if ["#", "[", "cfg", "(", "test", ")", "]"]
            .iter()
            .enumerate()
            .all(|(k, s)| text(i + k) == *s)
        {
            if let Some(next) = skip_item(&toks, i + 7) {
                i = next;
                continue;
            }
        }
        match t.text {
            "{" => {
                if text(i.wrapping_sub(2)) == "mod" && i >= 2 {
                    inline.push((text(i - 1).to_string(), depth));
                }
                depth += 1;
                i += 1;
                continue;
            }
            "}" => {
                depth = depth.saturating_sub(1);
                if inline.last().is_some_and(|&(_, d)| d == depth) {
                    inline.pop();
                }
                i += 1;
                continue;
            }
            _ => {}
        }
        let prev = if i == 0 { "" } else { text(i - 1) };
        let starts = match t.text {
            "crate" | "$crate" | "super" | "self" => true,
            name => inline.is_empty() && children.contains(name),
        };
        // `pub(in crate::x)`: a visibility.
        let visibility = prev == "in" && i >= 3 && text(i - 2) == "(" && text(i - 3) == "pub";
        if !starts || text(i + 1) != "::" || prev == "::" || prev == "." || visibility {
            i += 1;
            continue;
        }
        let mut raw = Vec::new();
        parse_tree(&toks, &mut i, Vec::new(), &mut raw);
        // Where the path starts from: the file's module and the inline modules around.
        let mut scope = here.clone();
        scope.extend(inline.iter().map(|(n, _)| n.clone()));
        for p in raw {
            let mut segs = p.segments.into_iter().peekable();
            let mut abs = match segs.peek().map(String::as_str) {
                Some("crate" | "$crate") => {
                    segs.next();
                    Vec::new()
                }
                Some("self" | "super") => scope.clone(),
                _ => scope.clone(), // a bare path through a declared module
            };
            while let Some(s) = segs.peek() {
                match s.as_str() {
                    "self" => {}
                    "super" => {
                        abs.pop();
                    }
                    _ => break,
                }
                segs.next();
            }
            abs.extend(segs);
            out.push(RawPath {
                segments: abs,
                line: p.line,
            });
        }
    }
    out
}

// ---------------------------------------------------------------------------------------
// Graphs.

/// A dependency graph: node -> node -> the lines (of the importing files) that import it.
type Graph = BTreeMap<String, BTreeMap<String, Vec<(String, usize)>>>;

/// The strongly connected components of more than one node (Tarjan), each sorted.
fn cycles(graph: &Graph) -> Vec<Vec<String>> {
    struct State<'g> {
        graph: &'g Graph,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'g>(s: &mut State<'g>, v: &'g str) {
        let graph = s.graph;
        let n = s.index.len();
        s.index.insert(v, n);
        s.low.insert(v, n);
        s.stack.push(v);
        s.on_stack.insert(v);
        for w in graph.get(v).into_iter().flat_map(|e| e.keys()) {
            let w = w.as_str();
            if !s.index.contains_key(w) {
                visit(s, w);
                let lw = s.low[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(lw);
            } else if s.on_stack.contains(w) {
                let iw = s.index[w];
                let lv = s.low.get_mut(v).unwrap();
                *lv = (*lv).min(iw);
            }
        }
        if s.low[v] == s.index[v] {
            let mut scc = Vec::new();
            loop {
                let w = s.stack.pop().unwrap();
                s.on_stack.remove(w);
                scc.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if scc.len() > 1 {
                scc.sort();
                s.out.push(scc);
            }
        }
    }
    let mut s = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in graph.keys() {
        if !s.index.contains_key(v.as_str()) {
            visit(&mut s, v);
        }
    }
    s.out.sort();
    s.out
}

/// A shortest cycle through `from` within `scc`: `[from, …, from]`.
fn shortest_cycle(graph: &Graph, scc: &[String], from: &str) -> Vec<String> {
    let mut prev: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = VecDeque::from([from]);
    while let Some(v) = queue.pop_front() {
        for w in graph.get(v).into_iter().flat_map(|e| e.keys()) {
            if !scc.contains(w) {
                continue;
            }
            if w == from {
                let mut path = vec![from.to_string()];
                let mut at = v;
                while at != from {
                    path.push(at.to_string());
                    at = prev[at];
                }
                path.push(from.to_string());
                path.reverse();
                return path;
            }
            if !prev.contains_key(w.as_str()) {
                prev.insert(w, v);
                queue.push_back(w);
            }
        }
    }
    unreachable!("{from} is in a strongly connected component")
}

/// A cycle for the report: its shortest cycle through its first node, then (if it has more
/// nodes) every node with the nodes of the component it imports, and where.
fn describe_cycle(graph: &Graph, scc: &[String], out: &mut String) {
    let _ = write!(out, "{}", shortest_cycle(graph, scc, &scc[0]).join(" -> "));
    let _ = writeln!(out, " ({} modules: {})", scc.len(), scc.join(", "));
    for v in scc {
        let edges: Vec<String> = graph[v]
            .iter()
            .filter(|(w, _)| scc.contains(w))
            .map(|(w, at)| {
                let (f, l) = &at[0];
                format!("{w} ({f}:{l})")
            })
            .collect();
        let _ = writeln!(out, "      {v} -> {}", edges.join(", "));
    }
}

// ---------------------------------------------------------------------------------------
// The check.

/// The top-level module a file belongs to.
fn top_module(file: &str) -> String {
    module_path(file)
        .into_iter()
        .next()
        .unwrap_or_else(|| ROOT.to_string())
}

/// An import of a higher layer or a forbidden one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Violation {
    pub(crate) file: String,
    pub(crate) line: usize,
    pub(crate) module: String,
    pub(crate) from_layer: u8,
    pub(crate) to_layer: u8,
    /// Listed in [`FORBIDDEN`].
    pub(crate) forbidden: bool,
    /// How many more imports of `module` in `file`.
    pub(crate) more: usize,
}

/// What [`check`] found.
#[derive(Debug, Default)]
pub(crate) struct Report {
    /// Files, or modules declared by the crate root, that [`LAYERS`] does not list.
    pub(crate) unlisted: Vec<String>,
    pub(crate) violations: Vec<Violation>,
    /// Import cycles among top-level modules (each sorted).
    pub(crate) cycles: Vec<Vec<String>>,
    graph: Graph,
}

impl Report {
    pub(crate) fn is_ok(&self) -> bool {
        self.unlisted.is_empty() && self.violations.is_empty() && self.cycles.is_empty()
    }
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if !self.unlisted.is_empty() {
            writeln!(f, "not in LAYERS (xtask/src/layers.rs): give them a layer:")?;
            for u in &self.unlisted {
                writeln!(f, "  {u}")?;
            }
        }
        if !self.violations.is_empty() {
            writeln!(f, "imports of a higher layer or a FORBIDDEN pair:")?;
            for v in &self.violations {
                write!(
                    f,
                    "  {}:{} -> {} (layer {} -> layer {})",
                    v.file, v.line, v.module, v.from_layer, v.to_layer
                )?;
                if v.forbidden {
                    write!(f, " [forbidden pair]")?;
                }
                if v.more > 0 {
                    write!(f, " (and {} more)", v.more)?;
                }
                writeln!(f)?;
            }
        }
        if !self.cycles.is_empty() {
            writeln!(f, "import cycles among top-level modules:")?;
            for scc in &self.cycles {
                let mut s = String::new();
                describe_cycle(&self.graph, scc, &mut s);
                write!(f, "  {s}")?;
            }
        }
        Ok(())
    }
}

/// Adds `from -> to` (imported at `file:line`) to `graph`; a self-import adds nothing.
fn add_edge(graph: &mut Graph, from: &str, to: String, file: &str, line: usize) {
    if to != from {
        graph
            .entry(from.to_string())
            .or_default()
            .entry(to)
            .or_default()
            .push((file.to_string(), line));
    }
}

/// The import graph among the top-level modules of `files` (self-imports left out).
fn module_graph(files: &[(&str, &str)]) -> Graph {
    let known: BTreeSet<String> = LAYERS
        .iter()
        .map(|(m, _)| m.to_string())
        .chain(files.iter().map(|(f, _)| top_module(f)))
        .chain(root_mods(files))
        .collect();
    let mut graph = Graph::new();
    for (file, src) in files {
        let from = node(&top_module(file));
        graph.entry(from.clone()).or_default();
        for p in imports(file, src) {
            let to = match p.segments.first() {
                Some(m) if known.contains(m) && m != ROOT => node(m),
                // `crate::Item`: an item of the crate root.
                _ => ROOT.to_string(),
            };
            add_edge(&mut graph, &from, to, file, p.line);
        }
    }
    graph
}

/// The modules the crate root (`fctrace_main.rs`) declares.
fn root_mods(files: &[(&str, &str)]) -> Vec<String> {
    let Some((_, src)) = files.iter().find(|(f, _)| module_path(f).is_empty()) else {
        return Vec::new();
    };
    let stripped = strip_comments_and_strings(src);
    let toks = tokenize(&stripped);
    let mut depth = 0;
    let mut out = Vec::new();
    for (i, t) in toks.iter().enumerate() {
        match t.text {
            "{" => depth += 1,
            "}" => depth -= 1,
            "mod" if depth == 0 => {
                if let Some(n) = toks.get(i + 1).filter(|n| n.is_ident()) {
                    out.push(n.text.to_string());
                }
            }
            _ => {}
        }
    }
    out
}

/// Checks `files` ((name relative to `rust-kmod/`, contents)) against [`LAYERS`] and
/// [`FORBIDDEN`], and for cycles.
pub(crate) fn check(files: &[(&str, &str)]) -> Report {
    let mut unlisted = BTreeSet::new();
    for (file, _) in files {
        let m = top_module(file);
        if layer(&m).is_none() {
            let dir = file.contains('/');
            unlisted.insert(if dir {
                format!("{m}/ ({file})")
            } else {
                file.to_string()
            });
        }
    }
    for m in root_mods(files) {
        if layer(&m).is_none() {
            unlisted.insert(format!("mod {m} (declared by {ROOT}.rs)"));
        }
    }
    let graph = module_graph(files);
    let mut violations = Vec::new();
    for (from, edges) in &graph {
        let Some(lf) = layer(from) else { continue };
        for (to, at) in edges {
            let Some(lt) = layer(to) else { continue };
            let forbidden = FORBIDDEN.contains(&(from.as_str(), to.as_str()));
            if lt <= lf && !forbidden {
                continue;
            }
            // One entry per importing file.
            let mut by_file: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
            for (f, l) in at {
                by_file.entry(f).or_default().push(*l);
            }
            for (f, lines) in by_file {
                violations.push(Violation {
                    file: f.to_string(),
                    line: lines[0],
                    module: to.clone(),
                    from_layer: lf,
                    to_layer: lt,
                    forbidden,
                    more: lines.len() - 1,
                });
            }
        }
    }
    violations.sort_by(|a, b| (&a.file, a.line).cmp(&(&b.file, b.line)));
    Report {
        unlisted: unlisted.into_iter().collect(),
        violations,
        cycles: cycles(&graph),
        graph,
    }
}

/// The import graph among the files under `engine/`: a node per file, named by its path
/// under `engine/` without `.rs` (`mod` for `engine/mod.rs`, whose items and re-exports
/// most files use).
fn engine_graph(files: &[(&str, &str)]) -> Graph {
    let prefix = format!("{ENGINE}/");
    let engine: Vec<(&str, Vec<String>)> = files
        .iter()
        .filter(|(f, _)| f.starts_with(&prefix))
        .map(|(f, _)| (*f, module_path(f)))
        .collect();
    let name = |f: &str| {
        f.strip_prefix(&prefix)
            .unwrap()
            .strip_suffix(".rs")
            .unwrap()
            .to_string()
    };
    let mut graph = Graph::new();
    for (file, src) in files.iter().filter(|(f, _)| f.starts_with(&prefix)) {
        let from = name(file);
        graph.entry(from.clone()).or_default();
        for p in imports(file, src) {
            // The file of the longest module path that `p` starts with.
            let Some((to, _)) = engine
                .iter()
                .filter(|(_, m)| p.segments.starts_with(m))
                .max_by_key(|(_, m)| m.len())
            else {
                continue;
            };
            let to = name(to);
            add_edge(&mut graph, &from, to, file, p.line);
        }
    }
    graph
}

/// The cycles among the files under `engine/` (see [`engine_graph`]), with `engine/mod.rs`
/// or (`without_mod`) without it; and their description.
pub(crate) fn engine_cycles(
    files: &[(&str, &str)],
    without_mod: bool,
) -> (Vec<Vec<String>>, String) {
    let mut graph = engine_graph(files);
    if without_mod {
        graph.remove("mod");
        for edges in graph.values_mut() {
            edges.remove("mod");
        }
    }
    let sccs = cycles(&graph);
    let mut text = String::new();
    for scc in &sccs {
        text.push_str("  ");
        describe_cycle(&graph, scc, &mut text);
    }
    (sccs, text)
}

// ---------------------------------------------------------------------------------------
// The real tree.

/// Every module file of the kernel crate: `rust-kmod/**/*.rs` (but `include!`d files) and
/// the crate root's `#[path]` modules (as `<module>.rs`): (name, contents).
fn kmod_files() -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = crate::tidy::kmod_sources()
        .into_iter()
        .filter_map(|(p, text)| {
            let name = p.strip_prefix("rust-kmod").ok()?.to_str()?.to_string();
            (!NOT_MODULES.contains(&name.as_str())).then_some((name, text))
        })
        .collect();
    let kmod = repo_root().join("rust-kmod");
    let root = &out
        .iter()
        .find(|(f, _)| module_path(f).is_empty())
        .unwrap_or_else(|| panic!("no rust-kmod/{ROOT}.rs"))
        .1;
    // `#[path = "…"]` then `mod name;` (read before stripping: the path is a string).
    let mut extra = Vec::new();
    // (Only at the start of a line, so that a comment's mention does not count.)
    let starts = root
        .match_indices("\n#[path")
        .map(|(i, _)| i + 1)
        .chain(root.starts_with("#[path").then_some(0));
    for i in starts {
        let rest = &root[i..];
        let q = rest.find('"').unwrap() + 1;
        let path = &rest[q..q + rest[q..].find('"').unwrap()];
        let after = &rest[rest.find(']').unwrap() + 1..];
        let m = after.find("mod ").unwrap() + 4;
        let name: String = after[m..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let text = fs::read_to_string(kmod.join(path))
            .unwrap_or_else(|e| panic!("#[path = {path:?}] mod {name}: {e}"));
        extra.push((format!("{name}.rs"), text));
    }
    out.extend(extra);
    out
}

fn as_refs(files: &[(String, String)]) -> Vec<(&str, &str)> {
    files
        .iter()
        .map(|(f, s)| (f.as_str(), s.as_str()))
        .collect()
}

#[test]
fn layers_point_one_way() {
    let files = kmod_files();
    let report = check(&as_refs(&files));
    assert!(
        report.is_ok(),
        "rust-kmod/'s modules do not follow LAYERS (xtask/src/layers.rs; file names \
         relative to rust-kmod/, #[path] modules as <module>.rs):\n{report}"
    );
}

#[test]
fn engine_files_have_no_import_cycle() {
    // engine/mod.rs is left out: it holds the Tracer, which the other files extend with
    // `impl Tracer` blocks (so each imports it), and it names their types in its fields.
    let files = kmod_files();
    let (sccs, cycles) = engine_cycles(&as_refs(&files), true);
    assert!(
        sccs.is_empty(),
        "files of rust-kmod/engine/ import each other in a cycle (engine/mod.rs left \
         out):\n{cycles}"
    );
}

#[test]
fn layers_check_fails_on_reversed_import() {
    let root = "mod bindings { }\nmod kprobe;\nmod engine;\nmod ksym;\nmod control;\nmod reader;\n";
    let kprobe = "use crate::bindings;\n\
                  // use crate::engine::Tracer; in a comment\n\
                  /* crate::engine::tracer() */\n\
                  const S: &str = \"crate::engine::x\";\n\
                  use crate::engine::Tracer;\n\
                  fn f() { crate::engine::tracer(); }\n";
    let ksym = "/// See [`crate::engine::Tracer`].\nuse crate::kprobe::Probe;\n\
                const R: &str = r#\"crate::fs::\"#;\n";
    let engine = "use super::kprobe::Probe;\nmod step;\n";
    let step = "use super::Tracer;\nuse crate::engine::step as s;\n";
    let files = [
        ("fctrace_main.rs", root),
        ("kprobe.rs", kprobe),
        ("ksym.rs", ksym),
        ("engine/mod.rs", engine),
        ("engine/step.rs", step),
    ];
    let report = check(&files);
    assert!(!report.is_ok());
    // The real import, once, at its first line; nothing from comments or strings.
    assert_eq!(
        report.violations,
        [Violation {
            file: "kprobe.rs".into(),
            line: 5,
            module: "engine".into(),
            from_layer: 2,
            to_layer: 3,
            forbidden: false,
            more: 1,
        }],
        "{report}"
    );
    // kprobe -> engine -> kprobe.
    assert_eq!(report.cycles, [["engine", "kprobe"]], "{report}");
    assert!(report.unlisted.is_empty(), "{report}");
    let text = report.to_string();
    assert!(
        text.contains("kprobe.rs:5 -> engine (layer 2 -> layer 3)"),
        "{text}"
    );
    assert!(
        text.contains("engine -> kprobe -> engine") || text.contains("kprobe -> engine -> kprobe"),
        "{text}"
    );

    // Peers may import each other (but not in a cycle); a FORBIDDEN pair fails even when
    // the layers allow it; an unlisted file and an unlisted `mod` fail.
    let files = [
        ("fctrace_main.rs", "mod kprobe;\nmod ksym;\nmod shiny;\n"),
        ("kprobe.rs", "use crate::{ksym::{self, Sym}, sys};\n"),
        ("ksym.rs", "fn f() { crate::kprobe::g(); }\n"),
        ("fs.rs", "use crate::control;\n"),
        (
            "newthing.rs",
            "use crate::fs::X;\nfn f() { crate::Fctrace::g(); }\n",
        ),
    ];
    let report = check(&files);
    assert!(report.violations.is_empty(), "{report}");
    assert_eq!(report.cycles, [["kprobe", "ksym"]], "{report}");
    assert_eq!(
        report.unlisted,
        ["mod shiny (declared by fctrace_main.rs)", "newthing.rs"]
    );
    assert!(
        report.to_string().contains("kprobe -> ksym -> kprobe"),
        "{report}"
    );
    let files = [
        ("reader.rs", "use super::control::Thing;\n"),
        ("control.rs", ""),
    ];
    let report = check(&files);
    assert_eq!(report.violations.len(), 1, "{report}");
    assert!(report.violations[0].module == "control" && report.violations[0].forbidden);
    // A lower layer importing the crate root (`super::Item` in a top-level file).
    let report = check(&[("kprobe.rs", "use super::Fctrace;\n")]);
    assert_eq!(report.violations[0].module, ROOT, "{report}");
    assert_eq!(report.violations[0].to_layer, 6);

    // The engine-internal graph: step -> mod (super::X) -> step (bare child path).
    let files = [
        (
            "engine/mod.rs",
            "mod step;\nmod tree;\npub(crate) use step::on_debug;\n",
        ),
        ("engine/step.rs", "use super::{clock_ns, tree::Node};\n"),
        (
            "engine/tree.rs",
            "// super::step::x\nuse crate::kprobe::Probe;\n",
        ),
    ];
    let (sccs, text) = engine_cycles(&files, false);
    assert_eq!(sccs, [["mod", "step"]], "{text}");
    assert!(text.contains("mod -> step -> mod"), "{text}");
    assert!(engine_cycles(&files, true).0.is_empty());

    // Two engine files importing each other are a cycle without engine/mod.rs too, as
    // `engine_files_have_no_import_cycle` checks.
    let files = [
        ("engine/mod.rs", "mod site;\nmod step;\n"),
        ("engine/step.rs", "use super::site::Step;\n"),
        ("engine/site.rs", "use super::step::on_debug;\n"),
    ];
    let (sccs, text) = engine_cycles(&files, true);
    assert_eq!(sccs, [["site", "step"]], "{text}");
}

#[test]
fn strip_comments_and_strings_keeps_code_only() {
    let src = concat!(
        "use a; // crate::x\n",
        "/* crate::y /* nested crate::z */ crate::w */ let s = \"crate::v \\\" crate::u\";\n",
        "let b = b\"crate::t\"; let r = r#\"crate::s \" still\"#; let c = '\"';\n",
        "let e = '\\''; let q = b'\\\\'; fn f<'a>(x: &'a str) {} // crate::r\n",
        "/// crate::doc\n//! crate::inner\nlet raw = br##\"crate::p \"# \"##; let k = c\"crate::o\";\n",
        "let r#type = 1; 'outer: loop {}\n",
    );
    let out = strip_comments_and_strings(src);
    assert!(!out.contains("crate"), "{out}");
    assert_eq!(out.lines().count(), src.lines().count());
    assert!(out.contains("use a;"));
    assert!(out.contains("let s ="));
    assert!(out.contains("fn f<'a>(x: &'a str) {}"), "{out}");
    assert!(out.contains("let c =  "));
    assert!(out.contains("let r#type = 1; 'outer: loop {}"), "{out}");
    // Multi-line strings and comments keep their line breaks.
    let out = strip_comments_and_strings("a /* x\ny */ b \"p\nq\" c\n");
    assert_eq!(
        out.lines().map(str::trim).collect::<Vec<_>>(),
        ["a", "b", "c"]
    );
}

#[test]
fn import_paths_are_extracted() {
    let paths = |file: &str, src: &str| -> Vec<String> {
        imports(file, src)
            .into_iter()
            .map(|p| format!("{}:{}", p.line, p.segments.join("::")))
            .collect()
    };
    assert_eq!(
        paths("kprobe.rs", "use crate::{a::{b, c}, d};"),
        ["1:a::b", "1:a::c", "1:d"]
    );
    assert_eq!(
        paths(
            "x.rs",
            "use crate::{\n  a::{self, b::{c as d, *}},\n  e,\n};\nuse crate::f::*;"
        ),
        ["2:a", "2:a::b::c", "2:a::b", "3:e", "5:f"]
    );
    assert_eq!(
        paths(
            "x.rs",
            "fn f() -> crate::a::B { crate::c::d::<u8>(x); let v = <crate::e::F as T>::g; }"
        ),
        ["1:a::B", "1:c::d", "1:e::F"]
    );
    // `super` is the parent module; `self` the file's own.
    assert_eq!(
        paths("x.rs", "use super::bindings; use self::y::Z;"),
        ["1:bindings", "1:x::y::Z"]
    );
    assert_eq!(
        paths(
            "engine/step.rs",
            "use super::{self, tree::Node}; super::super::kprobe::f(); super::clock_ns();"
        ),
        [
            "1:engine",
            "1:engine::tree::Node",
            "1:kprobe::f",
            "1:engine::clock_ns"
        ]
    );
    // Bare paths through the file's own modules; not through others or after `.`/`::`.
    assert_eq!(
        paths(
            "engine/mod.rs",
            "mod step;\npub(crate) use step::on_debug;\nfn f() { step::g(); kernel::step::h(); x.step::<u8>(); table::t(); }"
        ),
        ["2:engine::step::on_debug", "3:engine::step::g"]
    );
    // `$crate` in macros; not visibilities, `Self::`, strings or comments.
    assert_eq!(
        paths(
            "x.rs",
            "macro_rules! m { () => { $crate::a::b!() } }\npub(crate) fn f() {}\npub(in crate::c) fn g() {}\npub(super) fn h() { Self::i(); \"crate::j\"; } // crate::k"
        ),
        ["1:a::b"]
    );
    // Inline modules change what `super` is; `#[cfg(test)]` modules and uses are skipped.
    assert_eq!(
        paths(
            "x.rs",
            "mod inner {\n use super::y;\n}\n#[cfg(test)]\nmod tests {\n use crate::z;\n}\n#[cfg(test)]\nuse crate::w;\nuse crate::v;"
        ),
        ["2:x::y", "10:v"]
    );
    assert_eq!(module_path("fctrace_main.rs"), Vec::<String>::new());
    assert_eq!(module_path("engine/mod.rs"), ["engine"]);
    assert_eq!(module_path("engine/wait/mod.rs"), ["engine", "wait"]);
    assert_eq!(
        module_path("engine/wait/queue.rs"),
        ["engine", "wait", "queue"]
    );
}
