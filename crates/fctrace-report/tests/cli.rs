// SPDX-License-Identifier: GPL-2.0 OR MIT

//! The `fctrace-report` program: each command on the fixtures, standard input, errors.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

fn data(name: &str) -> String {
    format!("{}/tests/data/{}", env!("CARGO_MANIFEST_DIR"), name)
}

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_fctrace-report"))
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().unwrap()
}

fn ok(args: &[&str]) -> String {
    let out = run(args);
    assert!(
        out.status.success(),
        "{:?}: {}",
        args,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A file in a directory of this test's own (`test`: the test's name).
fn temp(test: &str, name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("fctrace-report-{}-{}", test, std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
fn stats_table_sort_and_json() {
    let real = data("openat-args.trace");
    let out = ok(&["stats", &real]);
    let mut lines = out.lines();
    assert!(lines
        .next()
        .unwrap()
        .contains("175 lines, 1 task, 117 calls (2 not followed)"));
    assert!(lines.next().unwrap().starts_with("#"));
    assert!(lines.next().unwrap().ends_with("do_sys_openat2"));
    let out = ok(&["stats", &real, "--sort", "calls", "-n", "1"]);
    assert_eq!(out.lines().count(), 3);
    assert!(out.lines().nth(2).unwrap().ends_with("make_vfsuid"));
    let out = ok(&["stats", &real, "--sort", "name", "--reverse"]);
    assert!(
        out.lines().nth(2).unwrap().ends_with("walk_component"),
        "{}",
        out
    );
    let out = ok(&["stats", &real, "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["summary"]["calls"], 117);
    let fs = v["functions"].as_array().unwrap();
    assert_eq!(fs[0]["function"], "do_sys_openat2");
    assert_eq!(fs[0]["total_ns"], 8_545_827);
    let memset = fs.iter().find(|f| f["function"] == "memset").unwrap();
    assert_eq!(memset["not_followed_reasons"]["unprobeable"], 2);
}

#[test]
fn standard_input() {
    let text = std::fs::read(data("openat-args.trace")).unwrap();
    for args in [
        vec!["stats"],
        vec!["graph", "-", "getname"],
        vec!["folded", "-"],
    ] {
        let mut child = bin()
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(&text).unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{:?}", args);
        assert!(String::from_utf8(out.stdout).unwrap().contains("getname"));
    }
}

#[test]
fn graph_whole_focused_and_json() {
    let real = data("openat-args.trace");
    let out = ok(&["graph", &real]);
    assert!(out.contains("# Call graph (103 distinct paths, 117 calls)"));
    assert!(out.contains("|  `- getname_flags"));
    let out = ok(&["graph", &real, "walk_component", "--depth", "2"]);
    assert!(out.contains("# Backtraces of walk_component (1 distinct)"));
    assert!(out.contains("      2  do_sys_openat2 > do_filp_open > path_openat > link_path_walk > walk_component"), "{}", out);
    assert!(out.contains("+- lookup_fast"));
    let out = ok(&["graph", &real, "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let nodes = v["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 103);
    assert_eq!(
        nodes
            .iter()
            .map(|n| n["calls"].as_u64().unwrap())
            .sum::<u64>(),
        117
    );
    assert_eq!(nodes[0]["function"], "do_sys_openat2");
    assert_eq!(nodes[1]["parent"], nodes[0]["id"]);
    let out = ok(&["graph", &data("handmade-multi.trace"), "--tasks"]);
    assert!(out.contains("kworker/0:1-x-31"));
    let out = run(&["graph", &real, "no_such_function"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no call of no_such_function"));
}

#[test]
fn folded_flamegraph_and_chrome_files() {
    let real = data("openat-args.trace");
    let out = ok(&["folded", &real]);
    assert!(out.lines().any(|l| l == "do_sys_openat2;getname 55152"));
    let f = temp("files", "calls.folded");
    ok(&["folded", &real, "--calls", "-o", f.to_str().unwrap()]);
    let folded = std::fs::read_to_string(&f).unwrap();
    let calls: u64 = folded
        .lines()
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
        .sum();
    assert_eq!(calls, 117);
    let svg = temp("files", "out.svg");
    ok(&[
        "flamegraph",
        &real,
        "-o",
        svg.to_str().unwrap(),
        "--title",
        "open",
    ]);
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(
        text.contains("<svg")
            && text.contains(">open<")
            && text.contains("do_sys_openat2 (8,545,827 ns, 100.00%)")
    );
    let svg2 = temp("files", "calls.svg");
    ok(&[
        "flamegraph",
        &data("handmade-multi.trace"),
        "--calls",
        "--tasks",
        "-o",
        svg2.to_str().unwrap(),
    ]);
    assert!(std::fs::read_to_string(&svg2)
        .unwrap()
        .contains("kworker/0:1-x-31 (7 calls"));
    let json = temp("files", "out.json");
    ok(&["chrome", &real, "-o", json.to_str().unwrap()]);
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["traceEvents"].as_array().unwrap().len(), 2 + 117);
    assert_eq!(v["displayTimeUnit"], "ns");
    let out = ok(&["chrome", &real, "-o", "-"]);
    assert!(out.starts_with("{\"traceEvents\":["));
    std::fs::remove_dir_all(f.parent().unwrap()).unwrap();
}

#[test]
fn errors_text_and_json() {
    let out = ok(&["errors", &data("openat-enoent.handmade.trace")]);
    assert!(
        out.contains(
            "do_sys_openat2 = -2 (ENOENT), first returned by step_into  [1 time, fct_cat-71"
        ),
        "{}",
        out
    );
    assert!(
        out.contains("          step_into  ret=-2 (ENOENT)  <- first returned here"),
        "{}",
        out
    );
    let out = ok(&["errors", &data("openat-args.trace")]);
    assert!(
        out.contains("1 call at the top of a tree, 0 returned an error"),
        "{}",
        out
    );
    let out = ok(&["errors", "--json", &data("openat-enoent.handmade.trace")]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let p = &v["errors"]["paths"][0];
    assert_eq!(p["errno"], -2);
    assert_eq!(p["path"].as_array().unwrap().len(), 4);
    assert_eq!(p["path"][3]["function"], "step_into");
}

#[test]
fn errors_of_a_real_failing_command() {
    // openat() of a missing file, typed (args) and raw (retval alone): the same path.
    for (f, ret) in [
        ("enoent-args.trace", "ret=-2 (ENOENT)"),
        ("enoent-raw.trace", "ret=-2"),
    ] {
        let out = ok(&["errors", &data(f)]);
        assert!(
            out.contains("7 calls at the top of a tree, 1 returned an error (1 distinct path)"),
            "{}: {}",
            f,
            out
        );
        assert!(
            out.contains("__x64_sys_openat = -2 (ENOENT), first returned by link_path_walk"),
            "{}: {}",
            f,
            out
        );
        for func in ["do_sys_openat2", "do_filp_open", "path_openat"] {
            assert!(
                out.lines()
                    .any(|l| l.trim_start().starts_with(func) && l.ends_with(ret)),
                "{}: {} {}: {}",
                f,
                func,
                ret,
                out
            );
        }
    }
}

#[test]
fn follow_text_and_json() {
    let real = data("openat-args.trace");
    let out = ok(&["follow", "notes.txt", &real]);
    assert!(
        out.contains("# 5 calls carry notes.txt (1 task)"),
        "{}",
        out
    );
    assert!(
        out.contains(
            "fct_cat-69  do_sys_openat2 > getname > getname_flags > strncpy_from_user: \
             src=\"/tmp/fct/notes.txt\""
        ),
        "{}",
        out
    );
    let out = ok(&["follow", "0xffff888002777f28", &real]);
    assert!(out.contains("# 2 calls carry"), "{}", out);
    let out = ok(&["follow", "--json", "0xffff888002777f28", &real]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["calls"].as_array().unwrap().len(), 2);
    assert_eq!(v["calls"][1]["path"][1], "build_open_flags");
    assert_eq!(v["calls"][1]["places"][0]["name"], "how");
}

#[test]
fn selections_task_subtree_threshold() {
    let real = data("openat-args.trace");
    let out = ok(&[
        "stats",
        "--subtree",
        "path_openat",
        "--min-us",
        "100",
        &real,
    ]);
    assert!(out.contains("1 task, 13 calls (0 not followed)"), "{}", out);
    assert!(
        out.lines().nth(2).unwrap().ends_with("path_openat"),
        "{}",
        out
    );
    assert!(!out.contains("getname"), "{}", out);
    let out = ok(&["graph", "--task", "69", &real]);
    assert!(out.contains("117 calls"), "{}", out);
    let out = run(&["stats", "--task", "fct_cat-1", &real]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing left"));
    let out = run(&["stats", "--min-us", "-1", &real]);
    assert!(!out.status.success());
}

#[test]
fn diff_text_and_json() {
    let a = data("openat-args.trace");
    let b = data("openat-enoent.handmade.trace");
    let out = ok(&["diff", &a, &b]);
    assert!(out.contains("== Functions called only in B (10)"));
    assert!(out.contains("do_sys_openat2 > do_filp_open > path_openat > lookup_slow"));
    assert!(out.contains("== Error returns that differ (4)"));
    let out = ok(&["diff", &a, &b, "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["functions_only_in_a"].as_array().unwrap().len(), 16);
    assert_eq!(v["error_returns"][0]["b"]["-2 (ENOENT)"], 1);
}

#[test]
fn unparseable_lines_strict_and_lenient() {
    let text = std::fs::read_to_string(data("openat-args.trace")).unwrap();
    let mut lines: Vec<&str> = text.lines().collect();
    lines.insert(
        6,
        " 1)         fct_cat-69 |                 |    getname(filename=\"/tmp {",
    );
    lines.insert(9, "some noise");
    let bad = temp("bad", "bad.trace");
    std::fs::write(&bad, lines.join("\n")).unwrap();
    let out = run(&["stats", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("cannot parse line 7: unbalanced parentheses or quotes"),
        "{}",
        err
    );
    assert!(err.contains("getname(filename=\"/tmp {"), "{}", err);
    assert!(err.contains("--lenient"), "{}", err);
    assert!(!err.contains("panicked"));
    let out = run(&["--lenient", "stats", bad.to_str().unwrap()]);
    assert!(out.status.success());
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.contains("skipped 2 unparseable line(s) (first: line 7"),
        "{}",
        err
    );
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(
        stdout.contains("117 calls (2 not followed), 2 unparseable lines skipped"),
        "{}",
        stdout
    );
    let out = run(&["stats", "--lenient", "-v", bad.to_str().unwrap()]);
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("skipped line 10: "), "{}", err);
    std::fs::remove_dir_all(bad.parent().unwrap()).unwrap();
    let out = run(&["stats", "/nonexistent/trace"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("reading /nonexistent/trace"));
    // Nothing to draw is an error, not an empty picture.
    let empty = temp("empty", "empty.trace");
    std::fs::write(&empty, "# tracer: fctrace\n").unwrap();
    let out = run(&["flamegraph", empty.to_str().unwrap(), "-o", "-"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing to draw"));
    std::fs::remove_dir_all(empty.parent().unwrap()).unwrap();
}

#[test]
fn a_reader_that_goes_away_is_not_an_error() {
    let mut child = bin()
        .args(["graph", &data("openat-args.trace")])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
}
