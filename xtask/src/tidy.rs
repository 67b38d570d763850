// SPDX-License-Identifier: GPL-2.0

//! Tidy checks, run by `cargo test` (after rust-analyzer's `xtask/src/tidy.rs`): what the
//! documentation, the selftests and the file headers must agree on with the sources.
//! Each test fails with the whole list of what is wrong.
//!
//! The module's items are found by searching every `rust-kmod/**/*.rs`, never one file,
//! so they may move between files.

use std::fs;
use std::path::{Path, PathBuf};

use fctrace_core::record::Reason;

use crate::util::repo_root;

/// Every `rust-kmod/**/*.rs` (but the generated bindings): (path in the repository,
/// contents).
pub(crate) fn kmod_sources() -> Vec<(PathBuf, String)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(PathBuf, String)>) {
        let mut entries: Vec<_> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(root, &p, out);
            } else if p.extension().is_some_and(|e| e == "rs")
                && !p.ends_with("bindings_generated.rs")
            {
                let text = fs::read_to_string(&p).unwrap();
                out.push((p.strip_prefix(root).unwrap().to_path_buf(), text));
            }
        }
    }
    let root = repo_root();
    let mut out = Vec::new();
    walk(&root, &root.join("rust-kmod"), &mut out);
    out
}

/// The module's source text from the first match of any of `needles` on (and the file).
fn kmod_item<'a>(sources: &'a [(PathBuf, String)], needles: &[&str]) -> (&'a Path, &'a str) {
    sources
        .iter()
        .find_map(|(p, text)| {
            needles
                .iter()
                .find_map(|n| text.find(n))
                .map(|i| (p.as_path(), &text[i..]))
        })
        .unwrap_or_else(|| panic!("none of {needles:?} in rust-kmod/**/*.rs"))
}

/// The user guide, where every control file, option and `stats` key must be described.
const USER_GUIDE: &str = "Documentation/fctrace/usage.rst";

fn documentation() -> String {
    fs::read_to_string(repo_root().join(USER_GUIDE)).unwrap_or_else(|e| panic!("{USER_GUIDE}: {e}"))
}

/// The string literals that follow each `prefix` in `text`.
fn literals_after<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
    text.match_indices(prefix)
        .filter_map(|(i, _)| {
            let rest = &text[i + prefix.len()..];
            let rest = &rest[rest.find('"')? + 1..];
            Some(&rest[..rest.find('"')?])
        })
        .collect()
}

/// The body of the function starting at `text` (from its first `{` to the matching `}`;
/// braces in string literals do not count).
fn fn_body(text: &str) -> &str {
    let start = text.find('{').unwrap();
    let (mut depth, mut in_str, mut escaped) = (0, false, false);
    for (i, c) in text[start..].char_indices() {
        match c {
            _ if escaped => escaped = false,
            '\\' if in_str => escaped = true,
            '"' => in_str = !in_str,
            '{' if !in_str => depth += 1,
            '}' if !in_str => {
                depth -= 1;
                if depth == 0 {
                    return &text[start..start + i + 1];
                }
            }
            _ => {}
        }
    }
    panic!("unbalanced braces")
}

/// Fails with `what`, then one line per entry of `problems`, unless it is empty.
fn report(what: &str, problems: &[String]) {
    assert!(
        problems.is_empty(),
        "{what}:\n  {}\n",
        problems.join("\n  ")
    );
}

/// Names that the user guide ([`USER_GUIDE`]) does not describe: neither as ``NAME``
/// (double backticks) nor as the first word of a line (a definition-list term such as a
/// control file's or an option's, or a row of a table such as the `stats` keys').
fn undocumented<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let doc = documentation();
    let terms: std::collections::HashSet<&str> = doc
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    names
        .into_iter()
        .filter(|n| !doc.contains(&format!("``{n}``")) && !terms.contains(n))
        .map(str::to_string)
        .collect()
}

#[test]
fn control_files_are_documented() {
    let sources = kmod_sources();
    let (path, table) = kmod_item(&sources, &["const FILES", "static FILES"]);
    // The table's entries: from its `= [` to the closing `];`.
    let table = &table[table.find('=').unwrap()..];
    let table = &table[..table.find("];").unwrap()];
    let names = literals_after(table, "c_str!(");
    assert!(
        !names.is_empty(),
        "no c_str!(\"…\") in FILES in {}",
        path.display()
    );
    report(
        &format!(
            "control files (FILES in {}) not described in {USER_GUIDE}",
            path.display()
        ),
        &undocumented(names),
    );
}

#[test]
fn stats_are_documented() {
    let sources = kmod_sources();
    let (path, f) = kmod_item(&sources, &["fn render_stats"]);
    // `writeln!(t, "KEY: {}", ..)` lines; `"{}: {}"` (the per-reason ones) has no literal key.
    let mut keys: Vec<String> = literals_after(fn_body(f), "writeln!(")
        .into_iter()
        .filter_map(|l| l.split_once(": {").map(|(key, _)| key))
        .filter(|k| !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
        .map(str::to_string)
        .collect();
    assert!(
        !keys.is_empty(),
        "no `writeln!(t, \"KEY: {{}}\"` in render_stats in {}",
        path.display()
    );
    keys.extend((1..Reason::COUNT as u8).map(|v| Reason::from_u8(v).stat_name().to_string()));
    report(
        &format!(
            "stats keys (render_stats in {}, Reason::stat_name) not described in {USER_GUIDE}",
            path.display()
        ),
        &undocumented(keys.iter().map(String::as_str)),
    );
}

#[test]
fn options_are_documented() {
    let names: Vec<&str> = fctrace_core::parse::OPTIONS
        .iter()
        .map(|(_, name, _)| *name)
        .collect();
    assert!(!names.is_empty(), "fctrace_core::parse::OPTIONS is empty");
    report(
        &format!("options (fctrace_core::parse::OPTIONS) not described in {USER_GUIDE}"),
        &undocumented(names),
    );
}

/// The control files whose default is a constant of the module, and the constant.
/// (A `_fcreset FILE VALUE` for a file not listed here is not checked: e.g. `max_depth 0`,
/// the module starts it at a literal 0.)
const DEFAULTS: &[(&str, &str)] = &[
    ("max_probes", "DEFAULT_MAX_PROBES"),
    ("disarm_after", "DEFAULT_DISARM_AFTER_S"),
    ("arm_wait_ms", "DEFAULT_ARM_WAIT_MS"),
    ("buffer_size_kb", "DEFAULT_BUFFER_KB"),
];

/// The value of `const NAME: TYPE = VALUE;` in `text`. Supported VALUEs: integer literals,
/// decimal or `0x` hex, with `_` separators and an optional integer type suffix
/// (`10_000`, `0x400`, `30u32`), and products and sums of them (`256 * 1024`, `a * b + c`).
fn const_value(text: &str, name: &str) -> Option<Result<u64, String>> {
    let (i, _) = text.match_indices(&format!("const {name}:")).next()?;
    let rest = &text[i..];
    let value = rest[rest.find('=')? + 1..rest.find(';')?].trim();
    let literal = |s: &str| -> Option<u64> {
        let s = s.trim().replace('_', "");
        let s = s.find(['u', 'i']).map_or(&s[..], |suffix| &s[..suffix]);
        match s.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16).ok(),
            None => s.parse().ok(),
        }
    };
    let eval = || -> Option<u64> {
        value
            .split('+')
            .map(|term| term.split('*').map(literal).product::<Option<u64>>())
            .sum()
    };
    Some(eval().ok_or_else(|| format!("{name} = {value}: not an integer literal expression")))
}

#[test]
fn selftest_defaults_match_the_module() {
    let functions = fs::read_to_string(repo_root().join("selftests/test.d/functions")).unwrap();
    let body = &functions[functions
        .find("initialize_fctrace()")
        .expect("initialize_fctrace() in functions")..];
    let body = &body[..body.find("\n}").unwrap()];
    let sources = kmod_sources();
    let (mut problems, mut checked) = (Vec::new(), 0);
    for (file, constant) in DEFAULTS {
        let Some((path, value)) = sources
            .iter()
            .find_map(|(p, t)| Some((p, const_value(t, constant)?)))
        else {
            problems.push(format!(
                "{constant} (the default of {file}) not found in rust-kmod/**/*.rs"
            ));
            continue;
        };
        let value = match value {
            Ok(v) => v,
            Err(e) => {
                problems.push(format!("{}: {e}", path.display()));
                continue;
            }
        };
        let resets = body.lines().filter_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some("_fcreset") && w.next() == Some(*file))
                .then(|| w.next().unwrap_or(""))
        });
        for reset in resets {
            checked += 1;
            if reset.parse() != Ok(value) {
                problems.push(format!(
                    "`_fcreset {file} {reset}`, but {constant} = {value} ({})",
                    path.display()
                ));
            }
        }
    }
    assert!(
        checked > 0,
        "initialize_fctrace resets none of {DEFAULTS:?}"
    );
    report(
        "initialize_fctrace (selftests/test.d/functions) and the module's defaults differ",
        &problems,
    );
}

/// Whether `path` (relative to the repository) needs an SPDX line, given its contents.
fn needs_spdx(path: &str, text: &str) -> bool {
    let name = path.rsplit('/').next().unwrap();
    let generated = name == "bindings_generated.rs"
        || path.starts_with("target/")
        || path.contains("/target/")
        || (path.starts_with("crates/") && path.contains("/tests/fixtures/"));
    let by_name = ["rs", "c", "h", "S", "tc", "sh"]
        .iter()
        .any(|e| name.ends_with(&format!(".{e}")))
        || ["Kbuild", "Makefile", "Kconfig"].contains(&name);
    let script =
        (path.starts_with("selftests/") || path.starts_with("scripts/")) && text.starts_with("#!");
    !generated && (by_name || script)
}

/// The files under `dirs` that git tracks or would track (untracked files too, without
/// those it ignores: build output), as `git ls-files -z` lists them.
fn listed_files(dirs: &[&str]) -> String {
    duct::cmd(
        "git",
        [
            "ls-files",
            "-z",
            "--cached",
            "--others",
            "--exclude-standard",
            "--",
        ]
        .iter()
        .chain(dirs),
    )
    .dir(repo_root())
    .read()
    .expect("git ls-files")
}

#[test]
fn sources_have_spdx_lines() {
    let root = repo_root();
    let dirs = ["rust-kmod", "crates", "xtask", "selftests", "scripts"];
    let listing = listed_files(&dirs);
    let mut missing: Vec<String> = listing
        .split('\0')
        .filter(|p| !p.is_empty())
        .filter_map(|p| {
            let bytes = fs::read(root.join(p)).ok()?; // listed but deleted
            let text = String::from_utf8_lossy(&bytes);
            let ok = text
                .lines()
                .take(3)
                .any(|l| l.contains("SPDX-License-Identifier:"));
            (!ok && needs_spdx(p, &text)).then(|| p.to_string())
        })
        .collect();
    missing.sort();
    missing.dedup();
    report(
        "files without `SPDX-License-Identifier:` in their first 3 lines",
        &missing,
    );
}

/// The byte offset of the first date in `line`: a match of the regular expression
/// `20[0-9]{2}-[0-9]{2}-[0-9]{2}` (`d` below stands for a digit).
fn find_date(line: &str) -> Option<usize> {
    const SHAPE: &[u8] = b"20dd-dd-dd";
    let b = line.as_bytes();
    (0..b.len().saturating_sub(SHAPE.len() - 1)).find(|&i| {
        SHAPE.iter().zip(&b[i..]).all(|(&s, &c)| match s {
            b'd' => c.is_ascii_digit(),
            _ => c == s,
        })
    })
}

/// Lines that may carry a date: licence and copyright lines.
fn date_allowed(line: &str) -> bool {
    line.contains("SPDX-") || line.to_ascii_lowercase().contains("copyright")
}

/// No dates in the documentation, the sources and the scripts: what happened on a day
/// (a run, a measurement, a fix) belongs in the commit message, and the tree describes
/// what is true now. Licence and copyright lines are exempt.
#[test]
fn no_dates_in_the_tree() {
    let root = repo_root();
    let dirs = [
        "Documentation",
        "selftests",
        "rust-kmod",
        "crates",
        "xtask/src",
        "scripts",
        ".ci",
        "README.md",
        "Kconfig",
        "Makefile",
    ];
    let listing = listed_files(&dirs);
    let mut paths: Vec<&str> = listing
        .split('\0')
        .filter(|p| !p.is_empty())
        // Of the crates, only their sources (test data records where it came from).
        .filter(|p| match p.strip_prefix("crates/") {
            Some(rest) => rest.split('/').nth(1) == Some("src"),
            None => true,
        })
        .filter(|p| !p.contains("/target/") && !p.ends_with("bindings_generated.rs"))
        .collect();
    paths.sort();
    paths.dedup();
    let mut dated = Vec::new();
    for p in paths {
        let Ok(bytes) = fs::read(root.join(p)) else {
            continue; // listed but deleted
        };
        let Ok(text) = String::from_utf8(bytes) else {
            continue; // not text
        };
        if text.contains('\0') {
            continue;
        }
        for (n, line) in text.lines().enumerate() {
            if let Some(i) = find_date(line).filter(|_| !date_allowed(line)) {
                dated.push(format!("{p}:{}: {}", n + 1, &line[i..i + 10]));
            }
        }
    }
    report(
        "dates in the tree (say what is true now; a run's date and figures go in the \
         commit message)",
        &dated,
    );
}

#[test]
fn tidy_helpers() {
    // Dates are built at run time, so that this file holds none.
    let date = format!("{}-11-23", 2000 + 26);
    assert_eq!(find_date(&format!("on {date}, a run")), Some(3));
    assert_eq!(find_date(&date), Some(0));
    assert_eq!(find_date(&date[..9]), None);
    assert_eq!(find_date("1999-11-23 20x6-11-23 2026-1-23"), None);
    assert_eq!(find_date("version 6.12.117, commit e00d85c"), None);
    assert!(date_allowed(&format!("// Copyright (C) {date} Someone")));
    assert!(date_allowed("// SPDX-License-Identifier: GPL-2.0"));
    assert!(!date_allowed(&format!("# measured {date}")));
    assert_eq!(const_value("const A: u32 = 10_000;", "A"), Some(Ok(10_000)));
    assert_eq!(
        const_value("pub(crate) const B: u64 = 256 * 1024 + 0x10;", "B"),
        Some(Ok(262_160))
    );
    assert_eq!(const_value("const C: u32 = 30u32;", "C"), Some(Ok(30)));
    assert!(const_value("const D: u32 = X * 2;", "D").unwrap().is_err());
    assert_eq!(const_value("const E: u32 = 1;", "F"), None);
    assert_eq!(
        fn_body("fn f() { let s = \"}\"; if x { y } } fn g() {}"),
        "{ let s = \"}\"; if x { y } }"
    );
    assert_eq!(
        literals_after("c_str!(\"a\"), kernel::c_str!(\"b\")", "c_str!("),
        ["a", "b"]
    );
    assert!(needs_spdx("scripts/guest/init", "#!/bin/sh\n"));
    assert!(!needs_spdx(
        "scripts/kernel-fragment.config",
        "CONFIG_X=y\n"
    ));
    assert!(!needs_spdx("rust-kmod/bindings_generated.rs", ""));
    assert!(!needs_spdx(
        "crates/fctrace-decode/tests/fixtures/functions.rs",
        ""
    ));
}
