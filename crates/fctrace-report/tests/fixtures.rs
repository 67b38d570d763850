// SPDX-License-Identifier: GPL-2.0 OR MIT

//! The reports on the fixtures of tests/data: the real trace openat-args.trace and the
//! handmade ones (see tests/data/README).

mod common;

use common::{all_fixtures, base_name, calls_in_text, fixture, load, load_with};
use fctrace_report::folded::{self, FlameOptions, Weight};
use fctrace_report::stats::{self, SortKey};
use fctrace_report::tree::{End, NodeKind};
use fctrace_report::{chrome, diff, graph, BuildOptions, LoadOptions};
use std::collections::{BTreeMap, HashMap};

const REAL: &str = "openat-args.trace";
const MULTI: &str = "handmade-multi.trace";
const ENOENT: &str = "openat-enoent.handmade.trace";

fn stat<'a>(s: &'a [stats::FuncStats], f: &str) -> &'a stats::FuncStats {
    s.iter()
        .find(|x| x.function == f)
        .unwrap_or_else(|| panic!("no {}", f))
}

#[test]
fn real_trace_parses_into_one_complete_tree() {
    let t = load(REAL);
    let s = &t.summary;
    assert_eq!(s.lines, 175);
    assert_eq!(s.tasks, 1);
    assert_eq!(s.calls, 117);
    assert_eq!(s.not_followed, 2);
    assert_eq!(s.incomplete_frames, 0);
    assert_eq!(s.unmatched_closes, 0);
    assert_eq!(s.close_name_mismatches, 0);
    assert_eq!(s.lost_markers, 0);
    assert!(t.anomalies.is_empty(), "{:?}", t.anomalies);
    let th = &t.threads[0];
    assert_eq!(th.task.comm, "fct_cat");
    assert_eq!(th.task.tid, 69);
    assert_eq!(th.roots.len(), 1);
    let root = &t.nodes[th.roots[0]];
    assert_eq!(root.name, "do_sys_openat2");
    assert_eq!(root.duration_ns, Some(8_545_827));
    assert_eq!(root.ret(), Some("3"));
    assert_eq!(root.end, End::Returned);
    let kids: Vec<&str> = root
        .children
        .iter()
        .map(|&c| t.nodes[c].name.as_str())
        .collect();
    assert_eq!(
        kids,
        [
            "build_open_flags",
            "getname",
            "get_unused_fd_flags",
            "do_filp_open",
            "fd_install",
            "putname"
        ]
    );
    // Every closing line's comment names the frame it closes.
    for n in &t.nodes {
        if n.end == End::Returned {
            assert!(n.duration_ns.is_some(), "{}", n.name);
        }
    }
}

#[test]
fn real_trace_stats() {
    let t = load(REAL);
    let s = stats::compute(&t);
    let top = stat(&s, "do_sys_openat2");
    assert_eq!((top.calls, top.total_ns), (1, 8_545_827));
    // Self: minus the six children's durations.
    let children = 31_637 + 5_345_787 + 283_645 + 2_207_091 + 44_657 + 198_318;
    assert_eq!(top.self_ns, 8_545_827 - children);
    let z = stat(&s, "_find_next_zero_bit");
    assert_eq!(z.calls, 2);
    assert_eq!(z.total_ns, 21_672 + 2_955);
    assert_eq!(
        (z.min_ns, z.max_ns, z.avg_ns),
        (Some(2_955), Some(21_672), Some(12_313))
    );
    let m = stat(&s, "memset");
    assert_eq!((m.calls, m.not_followed, m.timed, m.total_ns), (2, 2, 0, 0));
    assert_eq!(m.not_followed_reasons.get("unprobeable"), Some(&2));
    assert_eq!(m.avg_ns, None);
    assert_eq!(stat(&s, "inode_permission").calls, 4);
    assert_eq!(stat(&s, "make_vfsuid").calls, 5);
    // Calls of all functions: the trace's calls.
    assert_eq!(s.iter().map(|x| x.calls).sum::<u64>(), 117);
    // Sorted by total: the start function first; by calls: make_vfsuid (5) first.
    let mut by_total = s.clone();
    stats::sort(&mut by_total, SortKey::Total, false);
    assert_eq!(by_total[0].function, "do_sys_openat2");
    let mut by_calls = s.clone();
    stats::sort(&mut by_calls, SortKey::Calls, false);
    assert_eq!(by_calls[0].function, "make_vfsuid");
    stats::sort(&mut by_calls, SortKey::Calls, true);
    assert_eq!(by_calls.last().unwrap().function, "make_vfsuid");
    let mut by_name = s.clone();
    stats::sort(&mut by_name, SortKey::Name, false);
    assert!(by_name.windows(2).all(|w| w[0].function <= w[1].function));
    let mut out = Vec::new();
    stats::write_table(&mut out, &by_total).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(text.lines().nth(1).unwrap().contains("8.545 ms"));
    assert!(text.contains("memset  [not followed: unprobeable:2]"));
}

/// The round trip: the merged graph's calls, per function and in all, are the trace's
/// calls counted from the text without the parser.
#[test]
fn graph_call_counts_equal_the_traces() {
    for name in all_fixtures() {
        let text = fixture(&name);
        let expected = calls_in_text(&text);
        for by_task in [false, true] {
            let t = load(&name);
            let g = graph::whole(&t, by_task);
            let mut got: BTreeMap<String, u64> = BTreeMap::new();
            for n in &g.nodes {
                if !n.synthetic {
                    *got.entry(base_name(&n.function).to_string()).or_insert(0) += n.calls;
                }
            }
            assert_eq!(got, expected, "{}", name);
            assert_eq!(g.total_calls(), t.summary.calls, "{}", name);
            // Each distinct path is one node: no two children of a node share a name.
            for n in &g.nodes {
                let mut names: Vec<&str> = n
                    .children
                    .iter()
                    .map(|&c| g.nodes[c].function.as_str())
                    .collect();
                let before = names.len();
                names.sort();
                names.dedup();
                assert_eq!(names.len(), before);
            }
        }
    }
}

#[test]
fn real_trace_graph() {
    let t = load(REAL);
    let g = graph::whole(&t, false);
    assert_eq!(g.nodes[0].total_ns, 8_545_827);
    let root = g.child(0, "do_sys_openat2").unwrap();
    let dfo = g.child(root, "do_filp_open").unwrap();
    let po = g.child(dfo, "path_openat").unwrap();
    let lpw = g.child(po, "link_path_walk").unwrap();
    let ip = g.child(lpw, "inode_permission").unwrap();
    // link_path_walk checked three directories: three calls merged on one path.
    assert_eq!(g.nodes[ip].calls, 3);
    assert_eq!(g.nodes[ip].total_ns, 35_182 + 11_317 + 9_704);
    assert_eq!(
        g.path(ip),
        [
            "do_sys_openat2",
            "do_filp_open",
            "path_openat",
            "link_path_walk",
            "inode_permission"
        ]
    );
    let mut out = Vec::new();
    graph::write_graph(&mut out, &g, None).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert_eq!(text.lines().count(), g.nodes.len());
    assert!(text.contains("      1  do_sys_openat2\n"));
    assert!(text.contains("+- getname\n"));
    assert!(text.contains("|  `- getname_flags\n"));
    // With a depth limit, the cut nodes say so.
    let mut out = Vec::new();
    graph::write_graph(&mut out, &g, Some(1)).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert_eq!(text.lines().count(), 2, "{}", text);
    assert!(text.contains("do_sys_openat2  ..."));
}

#[test]
fn focused_graph_and_backtraces() {
    let t = load(REAL);
    let (g, bt) = graph::focused(&t, "inode_permission").unwrap();
    assert_eq!(bt.len(), 2);
    assert_eq!(bt[0].calls, 3);
    assert_eq!(bt[0].path.last().unwrap(), "inode_permission");
    assert_eq!(bt[1].path[3], "may_open");
    let ip = g.child(0, "inode_permission").unwrap();
    assert_eq!(g.nodes[ip].calls, 4);
    let gp = g.child(ip, "generic_permission").unwrap();
    assert_eq!(g.nodes[g.child(gp, "make_vfsuid").unwrap()].calls, 4);
    assert!(graph::focused(&t, "no_such_function").is_none());
    // A module function is found by its name or its label.
    let m = load(MULTI);
    assert!(graph::focused(&m, "fct_work_fn").is_some());
    assert!(graph::focused(&m, "fct_work_fn [fct_testmod]").is_some());
}

#[test]
fn folded_values_add_up_to_the_graph() {
    for name in all_fixtures() {
        let t = load(&name);
        let g = graph::whole(&t, false);
        let time = folded::folded_lines(&g, Weight::Time);
        let sum: u64 = time
            .iter()
            .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
            .sum();
        assert_eq!(sum, g.nodes[0].total_ns, "{}", name);
        let calls = folded::folded_lines(&g, Weight::Calls);
        let sum: u64 = calls
            .iter()
            .map(|l| l.rsplit_once(' ').unwrap().1.parse::<u64>().unwrap())
            .sum();
        assert_eq!(sum, t.summary.calls, "{}", name);
        let mut sorted = time.clone();
        sorted.sort();
        assert_eq!(sorted, time);
    }
    let g = graph::whole(&load(REAL), false);
    let lines = folded::folded_lines(&g, Weight::Time);
    assert!(lines.contains(&"do_sys_openat2;build_open_flags 31637".to_string()));
    assert!(lines.contains(&"do_sys_openat2 434692".to_string()));
    // Not-followed calls have no time: no line by time, a line by calls.
    assert!(!lines.iter().any(|l| l.contains("memset")));
    let lines = folded::folded_lines(&g, Weight::Calls);
    assert!(lines.contains(&"do_sys_openat2;do_filp_open;memset 1".to_string()));
    let g = graph::whole(&load(MULTI), true);
    let lines = folded::folded_lines(&g, Weight::Time);
    assert!(lines.contains(
        &"kworker/0:1-x-31;process_one_work;fct_work_fn [fct_testmod];msleep 1500000".to_string()
    ));
    assert!(lines.contains(
        &"fct-a b-100;__x64_sys_read;ksys_read;vfs_read;[irq];__sysvec_apic_timer_interrupt 7000"
            .to_string()
    ));
}

/// A frame of an SVG flamegraph: its path from the bottom and its width in samples.
#[derive(Debug)]
struct Frame {
    name: String,
    x: u64,
    w: u64,
    y: f64,
}

fn svg_frames(svg: &str) -> Vec<Frame> {
    const FG: &str = "http://github.com/jonhoo/inferno";
    let doc = roxmltree::Document::parse_with_options(
        svg,
        roxmltree::ParsingOptions {
            allow_dtd: true,
            ..Default::default()
        },
    )
    .expect("the SVG is well-formed XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let mut frames = Vec::new();
    for g in doc.descendants().filter(|n| n.has_tag_name("g")) {
        let title = g.children().find(|c| c.has_tag_name("title"));
        let rect = g.children().find(|c| c.has_tag_name("rect"));
        let (Some(title), Some(rect)) = (title, rect) else {
            continue;
        };
        let text = title.text().unwrap();
        let name = text.rsplit_once(" (").unwrap().0.to_string();
        frames.push(Frame {
            name,
            x: rect.attribute((FG, "x")).unwrap().parse().unwrap(),
            w: rect.attribute((FG, "w")).unwrap().parse().unwrap(),
            y: rect.attribute("y").unwrap().parse().unwrap(),
        });
    }
    frames
}

/// Checks the flamegraph of `lines` structurally: one frame per distinct prefix of the
/// stacks, as wide as the values below it, each inside its parent.
fn check_svg(svg: &str, lines: &[String]) {
    let frames = svg_frames(svg);
    let mut expected: HashMap<Vec<String>, u64> = HashMap::new();
    let mut all = 0;
    for l in lines {
        let (stack, v) = l.rsplit_once(' ').unwrap();
        let v: u64 = v.parse().unwrap();
        all += v;
        let parts: Vec<String> = stack.split(';').map(str::to_string).collect();
        for i in 1..=parts.len() {
            *expected.entry(parts[..i].to_vec()).or_insert(0) += v;
        }
    }
    // The bottom frame, `all`, spans everything.
    let bottom = frames
        .iter()
        .find(|f| f.name == "all")
        .expect("an `all` frame");
    assert_eq!((bottom.x, bottom.w), (0, all));
    // Each frame's path: the frames below it that contain it.
    let mut got: HashMap<Vec<String>, u64> = HashMap::new();
    for f in frames.iter().filter(|f| f.name != "all") {
        let mut path = vec![f.name.clone()];
        let mut cur = f;
        while let Some(p) = frames.iter().find(|p| {
            p.y > cur.y
                && (p.y - cur.y - 16.0).abs() < 0.5
                && p.x <= cur.x
                && cur.x + cur.w <= p.x + p.w
        }) {
            if p.name == "all" {
                break;
            }
            path.insert(0, p.name.clone());
            cur = p;
        }
        assert!(
            got.insert(path.clone(), f.w).is_none(),
            "two frames for {:?}",
            path
        );
    }
    assert_eq!(got, expected);
}

#[test]
fn flamegraph_frames_and_widths() {
    for name in all_fixtures() {
        let t = load(&name);
        for (weight, by_task) in [
            (Weight::Time, false),
            (Weight::Calls, false),
            (Weight::Time, true),
        ] {
            let g = graph::whole(&t, by_task);
            let lines = folded::folded_lines(&g, weight);
            let mut out = Vec::new();
            folded::write_flamegraph(
                &mut out,
                &lines,
                &FlameOptions {
                    title: "test".into(),
                    subtitle: None,
                    weight,
                    min_width: 0.0,
                    width: None,
                },
            )
            .unwrap();
            check_svg(&String::from_utf8(out).unwrap(), &lines);
        }
    }
    // The real trace by time: the start function is the whole width.
    let g = graph::whole(&load(REAL), false);
    let lines = folded::folded_lines(&g, Weight::Time);
    let mut out = Vec::new();
    let fo = FlameOptions {
        title: "t".into(),
        subtitle: None,
        weight: Weight::Time,
        min_width: 0.0,
        width: None,
    };
    folded::write_flamegraph(&mut out, &lines, &fo).unwrap();
    let frames = svg_frames(&String::from_utf8(out).unwrap());
    let top = frames.iter().find(|f| f.name == "do_sys_openat2").unwrap();
    assert_eq!(top.w, 8_545_827);
    assert_eq!(
        frames.iter().find(|f| f.name == "getname").unwrap().w,
        5_345_787
    );
}

/// The Chrome JSON: every slice complete (`X`, ts and dur), on its thread's track,
/// named by a thread_name event, and nested: the slices that contain a slice (by ts and
/// dur) are exactly its callers, its parent the innermost.
fn check_chrome(name: &str, build: BuildOptions) {
    let t = load_with(name, build);
    let doc = chrome::document(&t, name);
    let v: serde_json::Value = serde_json::from_str(&serde_json::to_string(&doc).unwrap()).unwrap();
    let events = v["traceEvents"].as_array().unwrap();
    let mut named: HashMap<u64, String> = HashMap::new();
    let mut by_tid: BTreeMap<u64, Vec<(u64, u64, u64, usize)>> = BTreeMap::new();
    for (i, e) in events.iter().enumerate() {
        let pid = e["pid"].as_u64().unwrap();
        assert_eq!(pid, 1);
        let tid = e["tid"].as_u64().unwrap();
        match e["ph"].as_str().unwrap() {
            "M" => {
                if e["name"] == "thread_name" {
                    named.insert(tid, e["args"]["name"].as_str().unwrap().to_string());
                }
            }
            "X" => {
                assert!(e["name"].as_str().is_some_and(|n| !n.is_empty()));
                let ts = (e["ts"].as_f64().unwrap() * 1000.0).round() as u64;
                let dur = (e["dur"].as_f64().unwrap() * 1000.0).round() as u64;
                assert!(dur >= 1);
                let line = e["args"]["fctrace"]["line"].as_u64().unwrap();
                by_tid.entry(tid).or_default().push((ts, ts + dur, line, i));
            }
            other => panic!("phase {}", other),
        }
    }
    let slices: usize = by_tid.values().map(Vec::len).sum();
    assert_eq!(slices, t.nodes.len());
    // The parent of each node, by line number.
    let line_of: HashMap<usize, usize> = t
        .nodes
        .iter()
        .map(|n| (n.line_no, n.parent.map_or(0, |p| t.nodes[p].line_no)))
        .collect();
    for th in &t.threads {
        assert_eq!(
            named.get(&u64::from(th.task.tid)),
            Some(&th.task.to_string())
        );
    }
    for (tid, mut list) in by_tid {
        assert!(named.contains_key(&tid));
        // By start, the longer first; the file's order breaks ties.
        list.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)).then(a.3.cmp(&b.3)));
        let mut stack: Vec<(u64, u64, u64, usize)> = Vec::new();
        for s in list {
            while let Some(top) = stack.last() {
                if top.0 <= s.0 && s.1 <= top.1 {
                    break;
                }
                // Not inside: the top must have ended before this starts.
                assert!(
                    top.1 <= s.0,
                    "{}: slices of lines {} and {} overlap",
                    name,
                    top.2,
                    s.2
                );
                stack.pop();
            }
            let parent_line = stack.last().map_or(0, |p| p.2);
            assert_eq!(
                parent_line as usize,
                line_of[&(s.2 as usize)],
                "{}: the slice of line {} is not inside its caller's",
                name,
                s.2
            );
            stack.push(s);
        }
    }
}

#[test]
fn chrome_json_nests_per_thread() {
    for name in all_fixtures() {
        check_chrome(&name, BuildOptions::default());
        check_chrome(
            &name,
            BuildOptions {
                merge_suffixes: true,
                no_irqs: true,
            },
        );
    }
}

#[test]
fn chrome_json_streamed_equals_the_document() {
    for name in all_fixtures() {
        let t = load(&name);
        let mut out = Vec::new();
        chrome::write_json(&mut out, &t, &name).unwrap();
        let streamed: serde_json::Value = serde_json::from_slice(&out).unwrap();
        let whole = serde_json::to_value(chrome::document(&t, &name)).unwrap();
        assert_eq!(streamed, whole, "{}", name);
    }
}

#[test]
fn chrome_json_carries_arguments_and_returns() {
    let t = load(REAL);
    let doc = chrome::document(&t, REAL);
    let open = doc
        .trace_events
        .iter()
        .find(|e| e.name == "do_sys_openat2")
        .unwrap();
    assert_eq!(open.ts, Some(0.0));
    assert_eq!(open.dur, Some(8545.827));
    assert_eq!(open.tid, 69);
    assert_eq!(open.args["dfd"], "-100");
    assert_eq!(open.args["filename"], "\"/tmp/fct/notes.txt\"");
    assert_eq!(open.args["return"], "3");
    // Arguments in their order.
    let keys: Vec<&String> = open.args.keys().collect();
    assert_eq!(keys[..3], ["dfd", "filename", "how"]);
    let gn = doc
        .trace_events
        .iter()
        .find(|e| e.name == "getname")
        .unwrap();
    assert_eq!(gn.ts, Some(31.637));
    let gnf = doc
        .trace_events
        .iter()
        .find(|e| e.name == "getname_flags")
        .unwrap();
    assert_eq!(gnf.args["fctrace"]["notes"], "tail call");
    let ms = doc
        .trace_events
        .iter()
        .find(|e| e.name == "memset")
        .unwrap();
    assert_eq!(ms.args["fctrace"]["not followed"], "unprobeable");
    assert_eq!(ms.args["arguments"], "?");
    let m = load(MULTI);
    let doc = chrome::document(&m, MULTI);
    let w = doc
        .trace_events
        .iter()
        .find(|e| e.name == "fct_testmod_read [fct_testmod]")
        .unwrap();
    assert_eq!(w.args["ubuf"], "\"a|b\\\"c\"");
    assert_eq!(w.args["fctrace"]["module"], "fct_testmod");
    assert_eq!(w.args["fctrace"]["notes"], "indirect, return not seen");
    let pwq = doc
        .trace_events
        .iter()
        .find(|e| e.name == "pwq_dec_nr_in_flight")
        .unwrap();
    assert_eq!(pwq.args["fctrace"]["incomplete"], true);
    let irq = doc.trace_events.iter().find(|e| e.name == "irq").unwrap();
    assert_eq!(irq.cat.as_deref(), Some("interrupt"));
    let names: Vec<&str> = doc
        .trace_events
        .iter()
        .filter(|e| e.name == "thread_name")
        .map(|e| e.args["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["fct-a b-101", "fct-a b-100", "kworker/0:1-x-31"]);
}

#[test]
fn handmade_lost_events_interleaving_and_interrupts() {
    let t = load(MULTI);
    let s = &t.summary;
    assert_eq!(s.tasks, 3);
    assert_eq!(s.calls, 25);
    assert_eq!(s.not_followed, 2);
    assert_eq!(s.interrupts, 2);
    assert_eq!((s.lost_markers, s.lost_events), (2, 10));
    assert_eq!(s.unmatched_closes, 1);
    assert_eq!(s.unmatched_interrupt_exits, 1);
    assert_eq!(s.incomplete_frames, 3);
    assert_eq!(s.close_name_mismatches, 0);
    assert_eq!(t.anomalies.len(), 5);
    assert!(
        t.anomalies[1].starts_with("line 20: `}` of kworker/0:1-x-31 at depth 3"),
        "{}",
        t.anomalies[1]
    );
    let by_tid = |tid: u32| t.threads.iter().find(|th| th.task.tid == tid).unwrap();
    // The kworker: the `}` at depth 3 after the lost events is dropped; the frame whose
    // `}` was lost is closed by its caller's.
    let k = by_tid(31);
    assert_eq!(k.task.comm, "kworker/0:1-x");
    assert_eq!(k.roots.len(), 1);
    let pow = &t.nodes[k.roots[0]];
    assert_eq!(
        (pow.name.as_str(), pow.total_ns, pow.self_ns),
        ("process_one_work", 1_700_000, 99_000)
    );
    assert!(pow.lost_inside);
    let kids: Vec<(&str, End)> = pow
        .children
        .iter()
        .map(|&c| (t.nodes[c].name.as_str(), t.nodes[c].end))
        .collect();
    assert_eq!(
        kids,
        [
            ("_raw_spin_lock_irq", End::Leaf),
            ("fct_work_fn", End::Returned),
            ("pwq_dec_nr_in_flight", End::Incomplete)
        ]
    );
    let work = &t.nodes[pow.children[1]];
    assert_eq!(work.module.as_deref(), Some("fct_testmod"));
    assert!(work.notes.indirect);
    assert_eq!(work.children.len(), 2);
    // The reader: an interrupt's tree under the frame it came in.
    let a = by_tid(100);
    assert_eq!(a.task.comm, "fct-a b");
    let roots: Vec<String> = a.roots.iter().map(|&r| t.nodes[r].label()).collect();
    assert_eq!(roots, ["__x64_sys_read", "[softirq]", "__x64_sys_close"]);
    let g = graph::whole(&t, false);
    let vfs = ["__x64_sys_read", "ksys_read", "vfs_read"]
        .iter()
        .fold(0, |g0, f| g.child(g0, f).unwrap());
    let irq = g.child(vfs, "[irq]").unwrap();
    assert!(g.nodes[irq].synthetic);
    assert_eq!(g.nodes[irq].total_ns, 10_000);
    assert_eq!(g.nodes[vfs].self_ns, 60_000 - 2_000 - 10_000 - 40_000);
    // Frames still open at the end: incomplete, as long as their children.
    let close = &t.nodes[*a.roots.last().unwrap()];
    assert_eq!(
        (close.end, close.duration_ns, close.total_ns, close.self_ns),
        (End::Incomplete, None, 1_500, 0)
    );
    // The exiting thread.
    let e = by_tid(101);
    let exit = &t.nodes[e.roots[0]];
    assert!(exit.close_notes.as_ref().unwrap().task_exited);
    let st = stats::compute(&t);
    assert_eq!(stat(&st, "pwq_dec_nr_in_flight").incomplete, 1);
    assert_eq!(
        stat(&st, "irq_exit_rcu").not_followed_reasons.get("atomic"),
        Some(&1)
    );
    assert_eq!(
        stat(&st, "shmem_get_folio_gfp.constprop.0")
            .error_returns
            .get("-2 (ENOENT)"),
        Some(&1)
    );
    assert!(st.iter().all(|x| !x.function.starts_with('[')));
}

#[test]
fn merge_suffixes_and_no_irqs() {
    let t = load_with(
        MULTI,
        BuildOptions {
            merge_suffixes: true,
            no_irqs: false,
        },
    );
    let st = stats::compute(&t);
    let sh = stat(&st, "shmem_get_folio_gfp");
    assert_eq!((sh.calls, sh.total_ns), (2, 11_000));
    let t = load_with(
        MULTI,
        BuildOptions {
            merge_suffixes: false,
            no_irqs: true,
        },
    );
    assert!(t.nodes.iter().all(|n| n.kind == NodeKind::Call));
    let names: Vec<&str> = t.nodes.iter().map(|n| n.name.as_str()).collect();
    for gone in [
        "__sysvec_apic_timer_interrupt",
        "hrtimer_interrupt",
        "irq_exit_rcu",
        "handle_softirqs",
    ] {
        assert!(!names.contains(&gone));
    }
    assert_eq!(t.nodes.len(), 25 - 4);
    // Parents and children still agree after the interrupts are taken out.
    for (id, n) in t.nodes.iter().enumerate() {
        for &c in &n.children {
            assert_eq!(t.nodes[c].parent, Some(id));
            assert!(c > id);
        }
    }
    let vfs = t.nodes.iter().find(|n| n.name == "vfs_read").unwrap();
    assert_eq!(vfs.self_ns, 60_000 - 2_000 - 40_000);
}

#[test]
fn diff_of_a_working_and_a_failing_open() {
    let a = load(REAL);
    let b = load(ENOENT);
    let d = diff::diff(&a, REAL, &b, ENOENT);
    let only_a: Vec<&str> = d
        .functions_only_in_a
        .iter()
        .map(|f| f.function.as_str())
        .collect();
    let only_b: Vec<&str> = d
        .functions_only_in_b
        .iter()
        .map(|f| f.function.as_str())
        .collect();
    for f in [
        "vfs_open",
        "do_dentry_open",
        "may_open",
        "fd_install",
        "complete_walk",
    ] {
        assert!(only_a.contains(&f), "{}", f);
    }
    for f in [
        "lookup_slow",
        "d_alloc_parallel",
        "simple_lookup",
        "put_unused_fd",
        "fput",
    ] {
        assert!(only_b.contains(&f), "{}", f);
    }
    assert_eq!(only_a[0], "vfs_open");
    let slow = d
        .paths_only_in_b
        .iter()
        .find(|p| p.path.last().unwrap() == "lookup_slow")
        .unwrap();
    assert_eq!(
        slow.path,
        [
            "do_sys_openat2",
            "do_filp_open",
            "path_openat",
            "lookup_slow"
        ]
    );
    assert_eq!(slow.paths_below, 8);
    // try_to_unlazy moved: under complete_walk in A, right under path_openat in B.
    assert!(d
        .paths_only_in_b
        .iter()
        .any(|p| p.path.last().unwrap() == "try_to_unlazy"));
    assert!(d
        .paths_only_in_a
        .iter()
        .any(|p| p.path.last().unwrap() == "complete_walk"));
    let errs: Vec<&str> = d
        .error_returns
        .iter()
        .map(|c| c.function.as_str())
        .collect();
    assert_eq!(
        errs,
        ["do_sys_openat2", "do_filp_open", "path_openat", "step_into"]
    );
    assert_eq!(d.error_returns[0].b.get("-2 (ENOENT)"), Some(&1));
    assert!(d.error_returns[0].a.is_empty());
    let top = &d.time_changes[0];
    assert_eq!(top.function, "do_sys_openat2");
    assert_eq!(
        top.delta_ns,
        b.nodes[0].duration_ns.unwrap() as i64 - 8_545_827
    );
    assert!(d
        .call_changes
        .iter()
        .any(|c| c.what == "inode_permission" && c.delta == -1));
    let mut out = Vec::new();
    diff::write_diff(&mut out, &d, 3).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.contains("== Functions called only in A (16)"),
        "{}",
        text
    );
    assert!(text.contains("... and 13 more"), "{}", text);
    assert!(
        text.contains("do_sys_openat2  -  -2 (ENOENT):1"),
        "{}",
        text
    );
    // A trace against itself: nothing differs.
    let d = diff::diff(&a, REAL, &a, REAL);
    assert!(d.functions_only_in_a.is_empty() && d.functions_only_in_b.is_empty());
    assert!(d.paths_only_in_a.is_empty() && d.paths_only_in_b.is_empty());
    assert!(
        d.call_changes.is_empty() && d.time_changes.is_empty() && d.path_call_changes.is_empty()
    );
    assert!(d.error_returns.is_empty() && d.not_followed.is_empty());
}

#[test]
fn diff_not_followed_reasons_and_path_counts() {
    let a = fixture(MULTI);
    // B: irq_exit_rcu was followed, rw_verify_area not (filter), and one more
    // hrtimer_interrupt in the interrupt.
    let b = a
        .replace("irq_exit_rcu(); /* not followed: atomic */", "irq_exit_rcu();")
        .replace("rw_verify_area(?); /* ret=0 */", "rw_verify_area(?); /* not followed: filter */")
        .replace(
            " 0)        fct-a b-100 |        3.000 us  |    hrtimer_interrupt(dev=0xffff88803e81c2c0); /* indirect */\n",
            " 0)        fct-a b-100 |        3.000 us  |    hrtimer_interrupt(dev=0xffff88803e81c2c0); /* indirect */\n 0)        fct-a b-100 |        3.000 us  |    hrtimer_interrupt(dev=0xffff88803e81c2c0); /* indirect */\n",
        );
    let opts = LoadOptions::default();
    let (ta, _) = fctrace_report::load_str(&a, opts).unwrap();
    let (tb, _) = fctrace_report::load_str(&b, opts).unwrap();
    let d = diff::diff(&ta, "a", &tb, "b");
    let nf: Vec<&str> = d.not_followed.iter().map(|c| c.function.as_str()).collect();
    assert_eq!(nf, ["rw_verify_area", "irq_exit_rcu"]);
    assert_eq!(d.path_call_changes.len(), 1);
    assert_eq!(d.path_call_changes[0].what, "__x64_sys_read > ksys_read > vfs_read > [irq] > __sysvec_apic_timer_interrupt > hrtimer_interrupt");
    assert_eq!((d.path_call_changes[0].a, d.path_call_changes[0].b), (1, 2));
}
