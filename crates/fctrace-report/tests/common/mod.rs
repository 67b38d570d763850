// SPDX-License-Identifier: GPL-2.0 OR MIT

//! Helpers shared by the integration tests.

#![allow(dead_code)]

use fctrace_report::{BuildOptions, LoadOptions, Trace};
use std::collections::BTreeMap;

/// The text of fixture `name` (tests/data).
pub fn fixture(name: &str) -> String {
    let path = format!("{}/tests/data/{}", env!("CARGO_MANIFEST_DIR"), name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {}", path, e))
}

/// Every fixture in tests/data (the `.trace` files).
pub fn all_fixtures() -> Vec<String> {
    let dir = format!("{}/tests/data", env!("CARGO_MANIFEST_DIR"));
    let mut v: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".trace"))
        .collect();
    v.sort();
    v
}

/// Loads fixture `name` strictly.
pub fn load(name: &str) -> Trace {
    load_with(name, BuildOptions::default())
}

/// Loads fixture `name` strictly with `build` options.
pub fn load_with(name: &str, build: BuildOptions) -> Trace {
    let (t, skipped) = fctrace_report::load_str(
        &fixture(name),
        LoadOptions {
            lenient: false,
            build,
        },
    )
    .unwrap_or_else(|e| panic!("{}: {}", name, e));
    assert!(skipped.is_empty());
    t
}

/// Calls per function name counted straight from the text, without the parser: the
/// third `|`-separated column of each task line, its first word up to `(`, for lines
/// that are not closes or interrupt markers.
pub fn calls_in_text(text: &str) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for line in text.lines() {
        let t = line.trim_start();
        if t.starts_with('#') || t.starts_with("CPU:") || t.is_empty() {
            continue;
        }
        let func = line.splitn(3, '|').nth(2).unwrap().trim_start();
        if func.starts_with('}')
            || func.starts_with("==========>")
            || func.starts_with("<==========")
        {
            continue;
        }
        let name = func.split('(').next().unwrap();
        *m.entry(name.to_string()).or_insert(0) += 1;
    }
    m
}

/// A label without its module: `f [mod]` is `f`.
pub fn base_name(label: &str) -> &str {
    label.split(" [").next().unwrap()
}
