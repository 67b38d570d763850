// SPDX-License-Identifier: GPL-2.0

//! Parsers for what users write into the control files, and for kernel symbol strings.
//!
//! Each parser takes the raw bytes of one `write()` and either returns the complete new
//! value or an error: a control file never changes state on bad input.

/// Why a write was refused. The module maps each to an errno.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParseError {
    /// Not a valid value (`EINVAL`).
    Invalid,
    /// Out of the allowed range (`EINVAL`).
    Range,
    /// More items than the file can hold (`ENOSPC`).
    TooMany,
    /// Input longer than any valid value (`EINVAL`).
    TooLong,
}

/// Strips leading and trailing ASCII white space (including the newline `echo` adds).
pub fn trim(b: &[u8]) -> &[u8] {
    let start = b
        .iter()
        .position(|c| !c.is_ascii_whitespace())
        .unwrap_or(b.len());
    let end = b
        .iter()
        .rposition(|c| !c.is_ascii_whitespace())
        .map_or(start, |e| e + 1);
    b.get(start..end).unwrap_or(&[])
}

/// Parses a decimal unsigned integer (the whole input, white space trimmed).
pub fn parse_u64(b: &[u8]) -> Result<u64, ParseError> {
    let t = trim(b);
    if t.is_empty() {
        return Err(ParseError::Invalid);
    }
    if t.len() > 20 {
        return Err(ParseError::TooLong);
    }
    let mut v: u64 = 0;
    for &c in t {
        if !c.is_ascii_digit() {
            return Err(ParseError::Invalid);
        }
        v = v
            .checked_mul(10)
            .and_then(|v| v.checked_add(u64::from(c - b'0')))
            .ok_or(ParseError::Range)?;
    }
    Ok(v)
}

/// Parses a decimal integer in `min..=max`.
pub fn parse_range(b: &[u8], min: u64, max: u64) -> Result<u64, ParseError> {
    let v = parse_u64(b)?;
    if v < min || v > max {
        return Err(ParseError::Range);
    }
    Ok(v)
}

/// Parses `0` or `1`.
pub fn parse_bool(b: &[u8]) -> Result<bool, ParseError> {
    match trim(b) {
        b"0" => Ok(false),
        b"1" => Ok(true),
        _ => Err(ParseError::Invalid),
    }
}

/// The largest PID Linux can hand out (`PID_MAX_LIMIT` on 64-bit).
pub const PID_MAX_LIMIT: u64 = 4 * 1024 * 1024;

/// Parses a list of PIDs separated by white space or commas into `out`; returns how many.
/// An empty (or all-blank) input gives 0: the caller clears its list.
/// Duplicates are kept once.
pub fn parse_pids(b: &[u8], out: &mut [u32]) -> Result<usize, ParseError> {
    let mut n = 0;
    for tok in b.split(|c| c.is_ascii_whitespace() || *c == b',') {
        if tok.is_empty() {
            continue;
        }
        let v = parse_range(tok, 1, PID_MAX_LIMIT)?;
        let v = v as u32;
        if out.get(..n).unwrap_or(&[]).contains(&v) {
            continue;
        }
        let slot = out.get_mut(n).ok_or(ParseError::TooMany)?;
        *slot = v;
        n += 1;
    }
    Ok(n)
}

/// The longest function name fctrace accepts (the kernel's `KSYM_NAME_LEN`).
pub const KSYM_NAME_LEN: usize = 512;

/// A start function as written by the user.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Symbol<'a> {
    /// Empty write: trace from every system call's entry.
    None,
    /// A symbol name such as `vfs_read`.
    Name(&'a str),
    /// A hexadecimal address such as `0xffffffff81234560`.
    Addr(u64),
}

fn is_sym_char(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_' || c == b'.' || c == b'$'
}

/// Parses what was written to `start_function`: empty, a name, or `0x`-prefixed address.
pub fn parse_symbol(b: &[u8]) -> Result<Symbol<'_>, ParseError> {
    let t = trim(b);
    if t.is_empty() {
        return Ok(Symbol::None);
    }
    if t.len() >= KSYM_NAME_LEN {
        return Err(ParseError::TooLong);
    }
    if let Some(hex) = t.strip_prefix(b"0x") {
        if hex.is_empty() || hex.len() > 16 {
            return Err(ParseError::Invalid);
        }
        let mut v: u64 = 0;
        for &c in hex {
            let d = match c {
                b'0'..=b'9' => c - b'0',
                b'a'..=b'f' => c - b'a' + 10,
                b'A'..=b'F' => c - b'A' + 10,
                _ => return Err(ParseError::Invalid),
            };
            v = (v << 4) | u64::from(d);
        }
        return Ok(Symbol::Addr(v));
    }
    if t.first().is_some_and(|c| c.is_ascii_digit()) || !t.iter().all(|&c| is_sym_char(c)) {
        return Err(ParseError::Invalid);
    }
    core::str::from_utf8(t)
        .map(Symbol::Name)
        .map_err(|_| ParseError::Invalid)
}

/// What `sprint_symbol()` prints: `name+0xoff/0xsize [module]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SymbolInfo<'a> {
    /// Symbol name.
    pub name: &'a str,
    /// Offset of the address in the symbol.
    pub offset: u64,
    /// Size of the symbol.
    pub size: u64,
    /// Module name, if the symbol is in a module.
    pub module: Option<&'a str>,
}

fn parse_hex_prefixed(s: &str) -> Option<u64> {
    let h = s.strip_prefix("0x")?;
    u64::from_str_radix(h, 16).ok()
}

/// Parses the output of `sprint_symbol()`; `None` when the address had no symbol (the
/// kernel then prints the bare address) or the text is malformed.
pub fn parse_sprint_symbol(s: &str) -> Option<SymbolInfo<'_>> {
    let (main, module) = match s.split_once(' ') {
        Some((m, rest)) => {
            let rest = rest.trim();
            let module = rest.strip_prefix('[')?.split(']').next()?;
            // A build id may follow the module name: `[mod 0123abcd]`.
            let module = module.split(' ').next()?;
            (m, Some(module))
        }
        None => (s, None),
    };
    let (name, off_size) = main.rsplit_once('+')?;
    let (off, size) = off_size.split_once('/')?;
    if name.is_empty() {
        return None;
    }
    Some(SymbolInfo {
        name,
        offset: parse_hex_prefixed(off)?,
        size: parse_hex_prefixed(size)?,
        module,
    })
}

/// Whether the symbol `part` names the cold part of the function `func`, where GCC puts
/// its unlikely paths: `func.cold` or `func.cold.N` (`func` may be a clone itself,
/// `f.isra.0`).
pub fn is_cold_part(part: &[u8], func: &[u8]) -> bool {
    let Some(rest) = part
        .strip_prefix(func)
        .and_then(|r| r.strip_prefix(b".cold"))
    else {
        return false;
    };
    match rest.strip_prefix(b".") {
        None => rest.is_empty(),
        Some(n) => !n.is_empty() && n.iter().all(u8::is_ascii_digit),
    }
}

/// Whether the symbol `name` is a function's cold part (`f.cold`, `f.cold.N`).
pub fn is_cold_name(name: &[u8]) -> bool {
    let digits = name.iter().rev().take_while(|b| b.is_ascii_digit()).count();
    let rest = match name.len() - digits {
        // `f.cold.N`: the digits after a dot
        n if digits > 0 => name.get(..n).and_then(|r| r.strip_suffix(b".")),
        _ => Some(name),
    };
    rest.and_then(|r| r.strip_suffix(b".cold"))
        .is_some_and(|f| !f.is_empty())
}

/// Glob matching as in ftrace filters: `*` matches any run, `?` one character, everything
/// else itself.
pub fn glob_match(pat: &[u8], s: &[u8]) -> bool {
    let (mut p, mut i) = (0usize, 0usize);
    let (mut star, mut mark) = (usize::MAX, 0usize);
    while i < s.len() {
        match pat.get(p) {
            Some(b'*') => {
                star = p;
                mark = i;
                p += 1;
            }
            Some(&c) if c == b'?' || Some(&c) == s.get(i) => {
                p += 1;
                i += 1;
            }
            _ if star != usize::MAX => {
                p = star + 1;
                mark += 1;
                i = mark;
            }
            _ => return false,
        }
    }
    while pat.get(p) == Some(&b'*') {
        p += 1;
    }
    p == pat.len()
}

/// One line of the `filter` file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FilterPattern<'a> {
    /// `!pattern`: hide the function and its subtree.
    pub negate: bool,
    /// The glob.
    pub glob: &'a [u8],
}

/// Parses the patterns of one write to `filter`: one per line (white space also separates).
/// Calls `f` for each; returns how many. An empty write yields 0 patterns.
pub fn parse_filter<'a>(
    b: &'a [u8],
    mut f: impl FnMut(FilterPattern<'a>) -> Result<(), ParseError>,
) -> Result<usize, ParseError> {
    let mut n = 0;
    for tok in b.split(|c| c.is_ascii_whitespace()) {
        if tok.is_empty() {
            continue;
        }
        let (negate, glob) = match tok.strip_prefix(b"!") {
            Some(g) => (true, g),
            None => (false, tok),
        };
        if glob.is_empty() || glob.len() >= KSYM_NAME_LEN {
            return Err(ParseError::Invalid);
        }
        if !glob
            .iter()
            .all(|&c| is_sym_char(c) || c == b'*' || c == b'?')
        {
            return Err(ParseError::Invalid);
        }
        f(FilterPattern { negate, glob })?;
        n += 1;
    }
    Ok(n)
}

/// The two list files whose writes can carry a token over to the next write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListKind {
    /// `set_pid`: PIDs separated by white space or commas.
    Pids,
    /// `filter`: patterns separated by white space.
    Filter,
}

/// The longest token a list file holds between two writes: a `!` and a function name.
pub const CARRY_MAX: usize = KSYM_NAME_LEN;

fn is_separator(kind: ListKind, c: u8) -> bool {
    c.is_ascii_whitespace() || (kind == ListKind::Pids && c == b',')
}

/// Whether `tok` (not empty) can begin a valid token of `kind`: a write cut there may be
/// continued by the next. What no continuation can make valid is refused at once.
fn is_token_prefix(kind: ListKind, tok: &[u8]) -> bool {
    match kind {
        // 4194304 has seven digits.
        ListKind::Pids => tok.len() <= 7 && tok.iter().all(u8::is_ascii_digit),
        ListKind::Filter => {
            let glob = tok.strip_prefix(b"!").unwrap_or(tok);
            glob.len() < KSYM_NAME_LEN
                && glob
                    .iter()
                    .all(|&c| is_sym_char(c) || c == b'*' || c == b'?')
        }
    }
}

/// Splits the text of one write to a list file (what an earlier write of the same open
/// file held, then the new bytes) into what can be applied now and the token at its end
/// that the write cut short, as ftrace's parser does: `printf 12; printf '345\n'` into
/// `set_pid` is the PID 12345, not 12 and 345. Returns the length of the part to apply
/// now; the rest, a token without a separator after it, waits for the next write or the
/// file's release. A cut token that cannot begin a valid one is an error.
pub fn split_carry(kind: ListKind, text: &[u8]) -> Result<usize, ParseError> {
    let cut = text
        .iter()
        .rposition(|&c| is_separator(kind, c))
        .map_or(0, |i| i + 1);
    let rest = text.get(cut..).unwrap_or(&[]);
    if rest.is_empty() || is_token_prefix(kind, rest) {
        Ok(cut)
    } else if rest.len() >= CARRY_MAX {
        Err(ParseError::TooLong)
    } else {
        Err(ParseError::Invalid)
    }
}

/// What a filter says about one function.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FilterVerdict {
    /// Show and follow it.
    Follow,
    /// Show it as a leaf, do not follow (positive patterns exist and none matches).
    Leaf,
    /// Hide it and its subtree (a `!pattern` matches).
    Hide,
}

/// Applies filter patterns to a function name. `!patterns` win; then, if any positive
/// pattern exists, only matching functions are followed.
pub fn filter_verdict<'a>(
    patterns: impl Iterator<Item = FilterPattern<'a>> + Clone,
    name: &[u8],
) -> FilterVerdict {
    let mut any_positive = false;
    let mut positive_match = false;
    for p in patterns {
        if p.negate {
            if glob_match(p.glob, name) {
                return FilterVerdict::Hide;
            }
        } else {
            any_positive = true;
            positive_match |= glob_match(p.glob, name);
        }
    }
    if any_positive && !positive_match {
        FilterVerdict::Leaf
    } else {
        FilterVerdict::Follow
    }
}

/// Boolean options of the `options` file. The value is the option's index in
/// [`OPTIONS`] (and in the module's table of option values).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OptionName {
    /// `follow-forks`: trace children of traced processes too.
    FollowForks,
    /// `retval`: show return values on closing lines.
    Retval,
    /// `duration`: show durations.
    Duration,
    /// `irqs`: show interrupts and softirqs that run while a traced task is current,
    /// marked, instead of leaving them out.
    Irqs,
    /// `lossless`: while a reader has `trace_pipe` open, a traced task that would fill
    /// the buffer waits (where it may sleep) for the reader instead of losing events.
    Lossless,
    /// `args`: calls show their arguments, and return values their type, from the
    /// kernel's BTF.
    Args,
    /// `callsite`: calls show where they were made (`<-caller+0x1c`).
    Callsite,
    /// `abstime`: lines start with their time stamp.
    Abstime,
    /// `errors`: returns of a negative errno are marked `ERROR`.
    Errors,
    /// `kworkers`: every workqueue worker that calls the start function is traced from
    /// there, whichever one runs the work.
    Kworkers,
}

impl OptionName {
    /// How many options there are.
    pub const COUNT: usize = OPTIONS.len();
}

/// All options with their names and defaults, in the order the `options` file lists
/// them, which is the order of [`OptionName`].
pub const OPTIONS: [(OptionName, &str, bool); 10] = [
    (OptionName::FollowForks, "follow-forks", false),
    (OptionName::Retval, "retval", false),
    (OptionName::Duration, "duration", true),
    (OptionName::Irqs, "irqs", false),
    (OptionName::Lossless, "lossless", false),
    (OptionName::Args, "args", false),
    (OptionName::Callsite, "callsite", false),
    (OptionName::Abstime, "abstime", false),
    (OptionName::Errors, "errors", false),
    (OptionName::Kworkers, "kworkers", false),
];

/// Parses one write to `options`: `name` sets, `noname` clears. Exactly one option.
pub fn parse_option(b: &[u8]) -> Result<(OptionName, bool), ParseError> {
    let t = trim(b);
    let (value, name) = match t.strip_prefix(b"no") {
        Some(rest) => (false, rest),
        None => (true, t),
    };
    for (opt, n, _) in OPTIONS {
        if name == n.as_bytes() {
            return Ok((opt, value));
        }
    }
    Err(ParseError::Invalid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn carry_splits_at_the_last_separator() {
        assert_eq!(split_carry(ListKind::Pids, b"12"), Ok(0));
        assert_eq!(split_carry(ListKind::Pids, b"12345\n"), Ok(6));
        assert_eq!(split_carry(ListKind::Pids, b"1 2,3"), Ok(4));
        assert_eq!(split_carry(ListKind::Pids, b"1,"), Ok(2));
        assert_eq!(split_carry(ListKind::Pids, b""), Ok(0));
        assert_eq!(split_carry(ListKind::Pids, b"\n"), Ok(1));
        assert_eq!(split_carry(ListKind::Filter, b"vfs_* !ext4_"), Ok(6));
        assert_eq!(split_carry(ListKind::Filter, b"vfs_read\n"), Ok(9));
        // a comma is part of no PID, but not a separator of patterns
        assert_eq!(
            split_carry(ListKind::Filter, b"a,b"),
            Err(ParseError::Invalid)
        );
    }

    #[test]
    fn carry_refuses_what_no_continuation_makes_valid() {
        assert_eq!(
            split_carry(ListKind::Pids, b"1 x"),
            Err(ParseError::Invalid)
        );
        assert_eq!(split_carry(ListKind::Pids, b"-1"), Err(ParseError::Invalid));
        assert_eq!(
            split_carry(ListKind::Pids, b"12345678"),
            Err(ParseError::Invalid)
        );
        assert_eq!(
            split_carry(ListKind::Filter, b"vfs_read("),
            Err(ParseError::Invalid)
        );
        let long = [b'a'; CARRY_MAX];
        assert_eq!(
            split_carry(ListKind::Filter, &long),
            Err(ParseError::TooLong)
        );
        assert_eq!(split_carry(ListKind::Filter, &long[1..]), Ok(0));
    }

    #[test]
    fn carried_token_joins_the_next_write() {
        extern crate std;
        use std::{vec, vec::Vec};
        // printf 12; printf '345\n': one PID
        let mut held: Vec<u8> = Vec::new();
        let mut applied: Vec<Vec<u32>> = Vec::new();
        for w in [&b"12"[..], b"345\n"] {
            let mut text = held.clone();
            text.extend_from_slice(w);
            let cut = split_carry(ListKind::Pids, &text).unwrap();
            let mut pids = [0u32; 4];
            let n = parse_pids(&text[..cut], &mut pids).unwrap();
            if n > 0 {
                applied.push(pids[..n].to_vec());
            }
            held = text[cut..].to_vec();
        }
        assert_eq!(applied, vec![vec![12345]]);
        assert!(held.is_empty());
    }

    #[test]
    fn options_table_is_indexed_by_option() {
        for (i, (opt, _, _)) in OPTIONS.iter().enumerate() {
            assert_eq!(*opt as usize, i);
        }
    }

    #[test]
    fn numbers() {
        assert_eq!(parse_u64(b"42\n"), Ok(42));
        assert_eq!(parse_u64(b" 7 "), Ok(7));
        assert_eq!(parse_u64(b""), Err(ParseError::Invalid));
        assert_eq!(parse_u64(b"-1"), Err(ParseError::Invalid));
        assert_eq!(parse_u64(b"1x"), Err(ParseError::Invalid));
        assert_eq!(parse_u64(b"99999999999999999999"), Err(ParseError::Range));
        assert_eq!(
            parse_u64(b"999999999999999999999999"),
            Err(ParseError::TooLong)
        );
        assert_eq!(parse_range(b"65", 0, 64), Err(ParseError::Range));
        assert_eq!(parse_bool(b"1\n"), Ok(true));
        assert_eq!(parse_bool(b"2"), Err(ParseError::Invalid));
        assert_eq!(parse_bool(b"\x00\x01"), Err(ParseError::Invalid));
    }

    #[test]
    fn pids() {
        let mut out = [0u32; 4];
        assert_eq!(parse_pids(b"1 2,3\n", &mut out), Ok(3));
        assert_eq!(&out[..3], &[1, 2, 3]);
        assert_eq!(parse_pids(b"\n", &mut out), Ok(0));
        assert_eq!(parse_pids(b"", &mut out), Ok(0));
        assert_eq!(parse_pids(b"5 5 5", &mut out), Ok(1));
        assert_eq!(parse_pids(b"1 2 3 4 5", &mut out), Err(ParseError::TooMany));
        assert_eq!(parse_pids(b"0", &mut out), Err(ParseError::Range));
        assert_eq!(parse_pids(b"-3", &mut out), Err(ParseError::Invalid));
        assert_eq!(parse_pids(b"abc", &mut out), Err(ParseError::Invalid));
        assert_eq!(parse_pids(b"4194305", &mut out), Err(ParseError::Range));
    }

    #[test]
    fn symbols() {
        assert_eq!(parse_symbol(b"vfs_read\n"), Ok(Symbol::Name("vfs_read")));
        assert_eq!(parse_symbol(b"\n"), Ok(Symbol::None));
        assert_eq!(
            parse_symbol(b"0xffffffff81000000"),
            Ok(Symbol::Addr(0xffff_ffff_8100_0000))
        );
        assert_eq!(parse_symbol(b"0x"), Err(ParseError::Invalid));
        assert_eq!(parse_symbol(b"foo bar"), Err(ParseError::Invalid));
        assert_eq!(parse_symbol(b"9abc"), Err(ParseError::Invalid));
        assert_eq!(parse_symbol(b"\xff\xfe"), Err(ParseError::Invalid));
        assert_eq!(parse_symbol(&[b'a'; 600]), Err(ParseError::TooLong));
        assert_eq!(
            parse_symbol(b"__x64_sys_openat.cold"),
            Ok(Symbol::Name("__x64_sys_openat.cold"))
        );
    }

    #[test]
    fn sprint_symbol_output() {
        let i = parse_sprint_symbol("vfs_read+0x0/0x1a0").unwrap();
        assert_eq!(
            (i.name, i.offset, i.size, i.module),
            ("vfs_read", 0, 0x1a0, None)
        );
        let i = parse_sprint_symbol("fctrace_x+0x10/0x40 [fctrace]").unwrap();
        assert_eq!(
            (i.name, i.offset, i.module),
            ("fctrace_x", 0x10, Some("fctrace"))
        );
        assert!(parse_sprint_symbol("0xffffffff81000000").is_none());
        assert!(parse_sprint_symbol("+0x0/0x1").is_none());
    }

    #[test]
    fn globs() {
        assert!(glob_match(b"vfs_*", b"vfs_read"));
        assert!(glob_match(b"*read*", b"seq_read_iter"));
        assert!(glob_match(b"?fs_read", b"vfs_read"));
        assert!(!glob_match(b"vfs_*", b"ksys_read"));
        assert!(glob_match(b"*", b""));
        assert!(!glob_match(b"a", b""));
        assert!(glob_match(b"a*b*c", b"axxbyyc"));
        assert!(!glob_match(b"a*b*c", b"axxbyy"));
    }

    #[test]
    fn filters() {
        let mut pats = [FilterPattern {
            negate: false,
            glob: b"",
        }; 4];
        let mut n = 0;
        assert_eq!(
            parse_filter(b"vfs_*\n!*lock*\n", |p| {
                pats[n] = p;
                n += 1;
                Ok(())
            }),
            Ok(2)
        );
        let it = pats[..n].iter().copied();
        assert_eq!(
            filter_verdict(it.clone(), b"vfs_read"),
            FilterVerdict::Follow
        );
        assert_eq!(
            filter_verdict(it.clone(), b"vfs_lock_file"),
            FilterVerdict::Hide
        );
        assert_eq!(
            filter_verdict(it.clone(), b"rw_verify_area"),
            FilterVerdict::Leaf
        );
        let none = [].iter().copied();
        assert_eq!(filter_verdict(none, b"x"), FilterVerdict::Follow);
        assert_eq!(parse_filter(b"!\n", |_| Ok(())), Err(ParseError::Invalid));
        assert_eq!(parse_filter(b"a;b", |_| Ok(())), Err(ParseError::Invalid));
        assert_eq!(parse_filter(b"\n", |_| Ok(())), Ok(0));
    }

    #[test]
    fn options() {
        assert_eq!(parse_option(b"retval\n"), Ok((OptionName::Retval, true)));
        assert_eq!(parse_option(b"noretval"), Ok((OptionName::Retval, false)));
        assert_eq!(
            parse_option(b"follow-forks"),
            Ok((OptionName::FollowForks, true))
        );
        assert_eq!(parse_option(b"irqs"), Ok((OptionName::Irqs, true)));
        assert_eq!(parse_option(b"args\n"), Ok((OptionName::Args, true)));
        assert_eq!(parse_option(b"noargs"), Ok((OptionName::Args, false)));
        assert_eq!(
            parse_option(b"nolossless\n"),
            Ok((OptionName::Lossless, false))
        );
        assert_eq!(parse_option(b"irqs lossless"), Err(ParseError::Invalid));
        assert_eq!(parse_option(b"nosuch"), Err(ParseError::Invalid));
        assert_eq!(parse_option(b""), Err(ParseError::Invalid));
    }

    #[test]
    fn cold_parts() {
        // Names from Debian's 7.3.4 kallsyms.
        assert!(is_cold_part(
            b"flush_tlb_mm_range.cold",
            b"flush_tlb_mm_range"
        ));
        assert!(is_cold_part(
            b"__check_object_size.cold",
            b"__check_object_size"
        ));
        assert!(is_cold_part(b"f.isra.0.cold", b"f.isra.0"));
        assert!(is_cold_part(b"f.cold.12", b"f"));
        assert!(!is_cold_part(b"f.cold.", b"f"));
        assert!(!is_cold_part(b"f.cold.1x", b"f"));
        assert!(!is_cold_part(b"f.isra.0.cold", b"f"));
        assert!(!is_cold_part(b"fg.cold", b"f"));
        assert!(!is_cold_part(b"f.coldx", b"f"));
        assert!(!is_cold_part(b"f", b"f"));
        assert!(is_cold_name(b"flush_tlb_mm_range.cold"));
        assert!(is_cold_name(b"f.isra.0.cold.3"));
        assert!(!is_cold_name(b".cold"));
        assert!(!is_cold_name(b"cold_start"));
        assert!(!is_cold_name(b"f.cold.x"));
    }
}
