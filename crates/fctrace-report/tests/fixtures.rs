// SPDX-License-Identifier: GPL-2.0 OR MIT

//! The reports on the fixtures of tests/data: the real traces openat-args.trace and
//! pingpong-*.trace, and the handmade ones (see tests/data/README).

mod common;

use common::{
    all_fixtures, base_name, calls_in_text, check_folded, fixture, folded_value, load, load_with,
};
use fctrace_report::folded::{self, FlameOptions, Weight};
use fctrace_report::parse::Args;
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
    assert_eq!(s.recovered_calls, 0);
    assert_eq!(s.unknown_frames, 0);
    assert_eq!(s.close_name_mismatches, 0);
    assert_eq!(s.overrun_frames, 0);
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
/// calls counted from the text without the parser (its opening and one-line calls),
/// plus the calls rebuilt from a `}` whose opening was lost (which lines those are is
/// checked by hand in the tests of each real trace).
#[test]
fn graph_call_counts_equal_the_traces() {
    for name in all_fixtures() {
        let text = fixture(&name);
        for by_task in [false, true] {
            let t = load(&name);
            let mut expected = calls_in_text(&text);
            for n in t.nodes.iter().filter(|n| n.is_call() && n.opening_lost) {
                // A rebuilt call has no line of its own: its `}` names it.
                assert!(n.end == End::Returned && n.duration_ns.is_some());
                *expected.entry(n.name.clone()).or_insert(0) += 1;
            }
            let g = graph::whole(&t, by_task);
            let mut got: BTreeMap<String, u64> = BTreeMap::new();
            for n in &g.nodes {
                if !n.synthetic {
                    *got.entry(base_name(&n.function).to_string()).or_insert(0) += n.calls;
                }
            }
            assert_eq!(got, expected, "{}", name);
            assert_eq!(
                g.total_calls(),
                t.summary.calls + t.summary.recovered_calls,
                "{}",
                name
            );
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
        check_folded(&name, &t);
        // The fixtures' durations are consistent once their trees are rebuilt (in
        // pingpong-lost.trace, before, the `}` of another call closed a frame: its
        // children added up to more than that `}`'s duration).
        assert_eq!(t.summary.overrun_frames, 0, "{}: {:?}", name, t.anomalies);
        let g = graph::whole(&t, false);
        let sum: u64 = folded::folded_lines(&g, Weight::Time)
            .iter()
            .map(|l| folded_value(l))
            .sum();
        assert_eq!(sum, g.nodes[0].total_ns, "{}", name);
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
        &"kworker/0:1-x-31;process_one_work;fct_work_fn [fct_testmod];msleep 1496000".to_string()
    ));
    assert!(lines.contains(
        &"kworker/0:1-x-31;process_one_work;fct_work_fn [fct_testmod];msleep;schedule_timeout 4000"
            .to_string()
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
    // (start, end, node, index): the slices come thread by thread, each thread's
    // nodes depth-first (checked by name and line), so the n-th is the n-th node.
    let order: Vec<usize> = t
        .threads
        .iter()
        .flat_map(|th| t.preorder(&th.roots))
        .collect();
    let mut next = order.iter();
    let mut by_tid: BTreeMap<u64, Vec<(u64, u64, usize, usize)>> = BTreeMap::new();
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
                let id = *next.next().expect("a node for each slice");
                let n = &t.nodes[id];
                assert_eq!(line as usize, n.line_no);
                let label = if n.kind == NodeKind::Interrupt {
                    n.name.clone()
                } else {
                    n.label()
                };
                assert_eq!(e["name"].as_str().unwrap(), label);
                by_tid.entry(tid).or_default().push((ts, ts + dur, id, i));
            }
            other => panic!("phase {}", other),
        }
    }
    let slices: usize = by_tid.values().map(Vec::len).sum();
    assert_eq!(slices, t.nodes.len());
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
        let mut stack: Vec<(u64, u64, usize, usize)> = Vec::new();
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
                    t.nodes[top.2].line_no,
                    t.nodes[s.2].line_no
                );
                stack.pop();
            }
            assert_eq!(
                stack.last().map(|p| p.2),
                t.nodes[s.2].parent,
                "{}: the slice of line {} is not inside its caller's",
                name,
                t.nodes[s.2].line_no
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
    assert_eq!(s.recovered_calls, 1);
    assert_eq!(s.unknown_frames, 0);
    assert_eq!(s.unmatched_interrupt_exits, 1);
    assert_eq!(s.incomplete_frames, 3);
    assert_eq!(s.close_name_mismatches, 0);
    assert_eq!(s.overrun_frames, 0);
    assert_eq!(t.anomalies.len(), 6, "{:#?}", t.anomalies);
    assert!(
        t.anomalies[1].starts_with("line 20: `}` of kworker/0:1-x-31 at depth 3"),
        "{}",
        t.anomalies[1]
    );
    assert!(
        t.anomalies[2].ends_with("rebuilt as a call of schedule_timeout"),
        "{}",
        t.anomalies[2]
    );
    let by_tid = |tid: u32| t.threads.iter().find(|th| th.task.tid == tid).unwrap();
    // The kworker: the `}` at depth 3 after the lost events (its call's opening lost)
    // is rebuilt as a call of the function it names, inside msleep, with its duration;
    // the frame whose `}` was lost is closed by its caller's.
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
    let msleep = &t.nodes[work.children[0]];
    assert_eq!(
        (msleep.name.as_str(), msleep.total_ns),
        ("msleep", 1_500_000)
    );
    assert_eq!(msleep.children.len(), 1);
    let st = &t.nodes[msleep.children[0]];
    assert_eq!(
        (
            st.name.as_str(),
            st.kind,
            st.end,
            st.duration_ns,
            st.line_no
        ),
        (
            "schedule_timeout",
            NodeKind::Call,
            End::Returned,
            Some(4_000),
            20
        )
    );
    assert!(st.opening_lost && st.children.is_empty());
    assert_eq!(st.ret(), Some("0"));
    assert_eq!(msleep.self_ns, 1_500_000 - 4_000);
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
    // 25 calls of the text and schedule_timeout rebuilt from its `}`, less the four in
    // interrupts.
    assert_eq!(t.nodes.len(), 25 + 1 - 4);
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

// The real traces of two processes playing ping-pong over pipes (tests/data/README):
// lost events, an exec, a fork, two threads interleaved on two CPUs.

const COLD: &str = "pingpong-cold.trace";
const ARGS: &str = "pingpong-args.trace";
const LOST: &str = "pingpong-lost.trace";

/// A task line of a trace, read without the parser (the real traces have no `|` in
/// their command names).
#[derive(Debug)]
struct TextLine<'a> {
    no: usize,
    cpu: u32,
    comm: &'a str,
    tid: u32,
    /// The duration column's digits: `+     95.173 us` is 95173 ns.
    dur: Option<u64>,
    depth: usize,
    /// The function column without its indentation.
    func: &'a str,
}

impl TextLine<'_> {
    /// The function a `}` line names in its comment (`} /* f ret=0x1 */`).
    fn closes(&self) -> Option<&str> {
        let c = self.func.strip_prefix("} /* ")?;
        Some(c.split([' ', '*']).next().unwrap())
    }
}

fn text_lines(text: &str) -> Vec<TextLine<'_>> {
    let mut v = Vec::new();
    for (i, l) in text.lines().enumerate() {
        if l.starts_with('#') || l.starts_with("CPU:") || l.trim().is_empty() {
            continue;
        }
        let mut cols = l.splitn(3, '|');
        let (head, dur, func) = (
            cols.next().unwrap(),
            cols.next().unwrap(),
            cols.next().unwrap(),
        );
        let (cpu, task) = head.split_once(')').unwrap();
        let (comm, tid) = task.trim().rsplit_once('-').unwrap();
        let digits: String = dur.chars().filter(char::is_ascii_digit).collect();
        let body = func.trim_start_matches(' ');
        v.push(TextLine {
            no: i + 1,
            cpu: cpu.trim().parse().unwrap(),
            comm,
            tid: tid.parse().unwrap(),
            dur: (!digits.is_empty()).then(|| digits.parse().unwrap()),
            depth: (func.len() - body.len() - 2) / 2,
            func: body,
        });
    }
    v
}

/// The `CPU:N [LOST M EVENTS]` lines of a text: how many, and the events they count.
fn lost_in_text(text: &str) -> (u64, u64) {
    let counts: Vec<u64> = text
        .lines()
        .filter_map(|l| l.strip_prefix("CPU:"))
        .map(|l| {
            let n = l.split("[LOST ").nth(1).unwrap();
            n.split(' ').next().unwrap().parse::<u64>().unwrap()
        })
        .collect();
    (counts.len() as u64, counts.iter().sum())
}

/// The calls not followed in a text, by reason (`/* not followed: atomic */`).
fn not_followed_in_text(text: &str) -> BTreeMap<String, u64> {
    let mut m = BTreeMap::new();
    for l in text.lines() {
        if let Some(r) = l.split("not followed: ").nth(1) {
            let reason = r.split([',', '*']).next().unwrap().trim();
            *m.entry(reason.to_string()).or_insert(0) += 1;
        }
    }
    m
}

/// What a real pingpong trace holds, counted by hand (and from its text, below).
struct Pingpong {
    name: &'static str,
    lines: usize,
    /// The threads in order of appearance: id, first and last command name.
    tasks: [(u32, &'static str, &'static str); 2],
    lost: (u64, u64),
    calls: u64,
    not_followed: [(&'static str, u64); 2],
    /// The `}` lines whose call's opening was lost: line number and function.
    rebuilt: &'static [(usize, &'static str)],
    /// The `}` that names another function than the frame open at its depth (the
    /// frame's own `}` lost), and that frame.
    mismatch: (usize, &'static str),
    /// `}` lines with no comment (a typed function returning nothing).
    bare_closes: usize,
}

const PINGPONGS: [Pingpong; 3] = [
    Pingpong {
        name: COLD,
        lines: 13426,
        tasks: [
            (60, "sh", "fct_pingpong"),
            (70, "fct_pingpong", "fct_pingpong"),
        ],
        lost: (1, 884),
        calls: 9748,
        not_followed: [("atomic", 62), ("unprobeable", 200)],
        // The execve() of fct_pingpong, from inside the read of the script's first
        // page: its opening lines were overwritten in CPU 0's buffer.
        rebuilt: &[
            (29, "_copy_to_iter"),
            (31, "copy_page_to_iter"),
            (49, "shmem_file_read_iter"),
            (50, "__kernel_read"),
            (51, "kernel_read"),
            (5612, "bprm_execve"),
            (5635, "do_execveat_common"),
            (5636, "__x64_sys_execve"),
        ],
        mismatch: (5636, "__x64_sys_rt_sigreturn"),
        bare_closes: 0,
    },
    Pingpong {
        name: ARGS,
        lines: 5756,
        tasks: [
            (77, "sh", "fct_pingpong"),
            (84, "fct_pingpong", "fct_pingpong"),
        ],
        lost: (1, 21143),
        calls: 3946,
        not_followed: [("atomic", 51), ("unprobeable", 69)],
        // The clone() of the child, from inside copy_page_range.
        rebuilt: &[
            (36, "copy_page_range"),
            (50, "copy_mm"),
            (139, "copy_process"),
            (220, "kernel_clone"),
            (221, "__x64_sys_clone"),
        ],
        mismatch: (221, "__x64_sys_rt_sigreturn"),
        bare_closes: 629,
    },
    Pingpong {
        name: LOST,
        lines: 244,
        tasks: [
            (88, "sh", "fct_pingpong"),
            (95, "fct_pingpong", "fct_pingpong"),
        ],
        lost: (1, 13936),
        calls: 159,
        not_followed: [("atomic", 1), ("unprobeable", 2)],
        // The parent's read() that its first line on CPU 0 closes, and the child's
        // whole read() (it slept in it, in schedule(), while the buffer wrapped).
        rebuilt: &[
            (28, "__x64_sys_read"),
            (102, "__schedule"),
            (103, "schedule"),
            (138, "pipe_read"),
            (139, "vfs_read"),
            (140, "ksys_read"),
            (141, "__x64_sys_read"),
        ],
        mismatch: (28, "__x64_sys_rt_sigreturn"),
        bare_closes: 0,
    },
];

#[test]
fn pingpong_traces_hold_what_their_text_holds() {
    for p in &PINGPONGS {
        let text = fixture(p.name);
        let lines = text_lines(&text);
        let t = load(p.name);
        let s = &t.summary;
        let name = p.name;
        assert_eq!(
            (s.lines, text.lines().count()),
            (p.lines, p.lines),
            "{}",
            name
        );
        // Two threads: the shell that became fct_pingpong by exec, and its child.
        assert_eq!(s.tasks, 2, "{}", name);
        let mut tids: Vec<u32> = Vec::new();
        for l in &lines {
            if !tids.contains(&l.tid) {
                tids.push(l.tid);
            }
        }
        assert_eq!(tids, p.tasks.map(|x| x.0), "{}", name);
        for (th, &(tid, first, last)) in t.threads.iter().zip(&p.tasks) {
            let mine: Vec<&TextLine> = lines.iter().filter(|l| l.tid == tid).collect();
            assert_eq!((mine[0].comm, mine.last().unwrap().comm), (first, last));
            assert_eq!(
                (th.task.tid, th.task.comm.as_str()),
                (tid, last),
                "{}",
                name
            );
            let cpus: std::collections::BTreeSet<u32> = mine.iter().map(|l| l.cpu).collect();
            assert_eq!(th.cpus, cpus, "{}", name);
        }
        // One LOST line at the top, for CPU 0's events overwritten before the snapshot.
        assert_eq!(lost_in_text(&text), p.lost, "{}", name);
        assert_eq!((s.lost_markers, s.lost_events), p.lost, "{}", name);
        assert_eq!(
            calls_in_text(&text).values().sum::<u64>(),
            p.calls,
            "{}",
            name
        );
        assert_eq!(s.calls, p.calls, "{}", name);
        // Not followed, by reason: in the text, the summary and the statistics.
        let expected: BTreeMap<String, u64> = p
            .not_followed
            .iter()
            .map(|&(r, n)| (r.to_string(), n))
            .collect();
        assert_eq!(not_followed_in_text(&text), expected, "{}", name);
        assert_eq!(s.not_followed, expected.values().sum::<u64>(), "{}", name);
        let mut by_reason: BTreeMap<String, u64> = BTreeMap::new();
        for f in stats::compute(&t) {
            for (r, n) in f.not_followed_reasons {
                *by_reason.entry(r).or_insert(0) += n;
            }
        }
        assert_eq!(by_reason, expected, "{}", name);
        // The calls rebuilt from their `}`: each is that line's function, at its depth,
        // with its duration.
        let mut rebuilt: Vec<&fctrace_report::tree::Node> =
            t.nodes.iter().filter(|n| n.opening_lost).collect();
        rebuilt.sort_by_key(|n| n.line_no);
        let got: Vec<(usize, &str)> = rebuilt
            .iter()
            .map(|n| (n.line_no, n.name.as_str()))
            .collect();
        assert_eq!(got, p.rebuilt, "{}", name);
        for n in &rebuilt {
            let l = lines.iter().find(|l| l.no == n.line_no).unwrap();
            assert_eq!(l.closes(), Some(n.name.as_str()), "{}", name);
            assert_eq!((l.depth, l.dur), (n.depth, n.duration_ns), "{}", name);
            assert_eq!((n.kind, n.end), (NodeKind::Call, End::Returned));
        }
        assert_eq!(s.recovered_calls, p.rebuilt.len() as u64, "{}", name);
        // The exec'ing thread's first frame, a signal return on CPU 1, lost its `}`
        // with the events of CPU 0 where the thread went on: a `}` of another function
        // came at its depth. It is the one frame never closed.
        assert_eq!(
            (s.close_name_mismatches, s.incomplete_frames),
            (1, 1),
            "{}",
            name
        );
        let open: Vec<&fctrace_report::tree::Node> = t
            .nodes
            .iter()
            .filter(|n| n.end == End::Incomplete)
            .collect();
        assert_eq!(
            (open[0].name.as_str(), open[0].line_no, open[0].cpu),
            (p.mismatch.1, 6, 1),
            "{}",
            name
        );
        assert!(open[0].lost_inside && !open[0].opening_lost);
        assert!(
            t.anomalies.iter().any(|a| a.starts_with(&format!(
                "line {}: `}}` names {} but the open frame at its depth is {}",
                p.mismatch.0,
                rebuilt.last().unwrap().name,
                p.mismatch.1
            ))),
            "{}: {:#?}",
            name,
            t.anomalies
        );
        // Nothing left unknown, no durations that do not add up.
        assert_eq!((s.unknown_frames, s.overrun_frames), (0, 0), "{}", name);
        let bare = lines.iter().filter(|l| l.func == "}").count();
        assert_eq!(bare, p.bare_closes, "{}", name);
        assert_eq!(
            s.closes as usize,
            lines.iter().filter(|l| l.func.starts_with('}')).count()
        );
    }
}

/// Every `}` of a trace whose closing lines all name their function gives its duration
/// to a call of that function (its own frame's, or one rebuilt from it): per function,
/// the calls with a duration and their durations added up are the text's `}` lines and
/// one-line calls naming it.
#[test]
fn pingpong_closing_lines_time_the_function_they_name() {
    for name in [COLD, LOST] {
        let text = fixture(name);
        let mut expected: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        for l in text_lines(&text) {
            let f = match l.closes() {
                Some(f) => f,
                None if !l.func.starts_with('}') => l.func.split('(').next().unwrap(),
                None => panic!("{}: line {} names no function", name, l.no),
            };
            if let Some(d) = l.dur {
                let e = expected.entry(f.to_string()).or_insert((0, 0));
                *e = (e.0 + 1, e.1 + d);
            }
        }
        let t = load(name);
        let mut got: BTreeMap<String, (u64, u64)> = BTreeMap::new();
        for n in t.nodes.iter().filter(|n| n.is_call()) {
            if let Some(d) = n.duration_ns {
                let e = got.entry(n.name.clone()).or_insert((0, 0));
                *e = (e.0 + 1, e.1 + d);
            }
        }
        assert_eq!(got, expected, "{}", name);
        // And the statistics: the timed calls and their average.
        for f in stats::compute(&t) {
            let (calls, sum) = expected.get(&f.function).copied().unwrap_or((0, 0));
            assert_eq!(f.timed, calls, "{} {}", name, f.function);
            assert_eq!(f.avg_ns, sum.checked_div(calls), "{} {}", name, f.function);
        }
    }
}

#[test]
fn pingpong_lost_by_hand() {
    let t = load(LOST);
    let st = stats::compute(&t);
    // Three write()s: the parent's at lines 29-196 and 232-244, the child's at 142-177.
    let w = stat(&st, "__x64_sys_write");
    assert_eq!((w.calls, w.timed, w.opening_lost), (3, 3, 0));
    assert_eq!(w.total_ns, 555_143 + 83_094 + 344_326);
    assert_eq!((w.min_ns, w.max_ns), (Some(83_094), Some(555_143)));
    assert_eq!(w.avg_ns, Some((555_143 + 83_094 + 344_326) / 3));
    // Three read()s, two of them rebuilt from their `}` (lines 28 and 141), the third
    // opened at line 197 and closed at 227.
    let r = stat(&st, "__x64_sys_read");
    assert_eq!((r.calls, r.timed, r.opening_lost), (3, 3, 2));
    assert_eq!(r.total_ns, 95_173 + 658_597 + 77_597);
    // The signal return: its `}` lost, as long as its calls (lines 7-27).
    let sig = stat(&st, "__x64_sys_rt_sigreturn");
    assert_eq!((sig.calls, sig.timed, sig.incomplete), (1, 0, 1));
    assert_eq!(sig.total_ns, 21_883 + 1_862 + 117_947 + 144_516 + 168_803);
    assert_eq!(sig.self_ns, 0);
    // The parent.
    let by_tid = |tid: u32| t.threads.iter().find(|th| th.task.tid == tid).unwrap();
    let p = by_tid(88);
    let roots: Vec<(&str, Option<u64>)> = p
        .roots
        .iter()
        .map(|&r| (t.nodes[r].name.as_str(), t.nodes[r].duration_ns))
        .collect();
    assert_eq!(
        roots,
        [
            ("__x64_sys_rt_sigreturn", None),
            ("__x64_sys_read", Some(95_173)),
            ("__x64_sys_write", Some(555_143)),
            ("__x64_sys_read", Some(77_597)),
            ("__x64_sys_ioctl", Some(146_189)),
            ("__x64_sys_write", Some(344_326)),
        ]
    );
    let sig = &t.nodes[p.roots[0]];
    assert_eq!(sig.children.len(), 6);
    // The read rebuilt from line 28 has nothing inside: its calls were lost.
    let read = &t.nodes[p.roots[1]];
    assert!(read.opening_lost && read.lost_inside && read.children.is_empty());
    assert_eq!((read.self_ns, read.ret()), (95_173, Some("0x1")));
    // The first write slept in __schedule (preempted at the wakeup), while the child ran.
    let sched = [
        "ksys_write",
        "vfs_write",
        "pipe_write",
        "__wake_up_sync_key",
    ]
    .iter()
    .fold(p.roots[2], |id, f| {
        *t.nodes[id]
            .children
            .iter()
            .find(|&&c| t.nodes[c].name == *f)
            .unwrap()
    });
    assert_eq!(t.nodes[sched].duration_ns, Some(485_718));
    // The child: its read() rebuilt whole from the `}` lines 102-141, around the calls
    // it made after waking up in schedule().
    let c = by_tid(95);
    assert_eq!(c.roots.len(), 2);
    let chain: Vec<(&str, Option<u64>)> = t
        .preorder(&c.roots[..1])
        .into_iter()
        .take(7)
        .map(|id| (t.nodes[id].name.as_str(), t.nodes[id].duration_ns))
        .collect();
    assert_eq!(
        chain,
        [
            ("__x64_sys_read", Some(658_597)),
            ("ksys_read", Some(652_398)),
            ("vfs_read", Some(645_026)),
            ("pipe_read", Some(633_820)),
            ("schedule", Some(531_606)),
            ("__schedule", Some(514_351)),
            ("finish_task_switch", Some(4_196)),
        ]
    );
    let pipe_read = t.preorder(&c.roots[..1])[3];
    let kids: Vec<&str> = t.nodes[pipe_read]
        .children
        .iter()
        .map(|&k| t.nodes[k].name.as_str())
        .collect();
    assert_eq!(
        kids,
        [
            "schedule",
            "prepare_to_wait_event",
            "finish_wait",
            "mutex_lock",
            "copy_page_to_iter",
            "anon_pipe_buf_release",
            "mutex_unlock",
            "kill_fasync",
            "touch_atime"
        ]
    );
    assert_eq!(
        t.nodes[pipe_read].self_ns,
        633_820 - (531_606 + 8_613 + 4_857 + 971 + 13_089 + 1_092 + 941 + 931 + 33_080)
    );
    // The graph's total: the top-level calls of both threads, the signal return counted
    // as its calls; the folded stacks add up to it.
    let parent = 455_011 + 95_173 + 555_143 + 77_597 + 146_189 + 344_326;
    let child = 658_597 + 83_094;
    let g = graph::whole(&t, true);
    assert_eq!(g.nodes[0].total_ns, parent + child);
    assert_eq!(
        g.nodes[g.child(0, "fct_pingpong-88").unwrap()].total_ns,
        parent
    );
    assert_eq!(
        g.nodes[g.child(0, "fct_pingpong-95").unwrap()].total_ns,
        child
    );
    let g = graph::whole(&t, false);
    let lines = folded::folded_lines(&g, Weight::Time);
    assert_eq!(
        lines.iter().map(|l| folded_value(l)).sum::<u64>(),
        parent + child
    );
    // The reads' self times: the rebuilt one of the parent has no calls inside.
    let read_self = 95_173 + (77_597 - 66_931) + (658_597 - 652_398);
    assert!(lines.contains(&format!("__x64_sys_read {}", read_self)));
    assert!(lines.contains(
        &"__x64_sys_read;ksys_read;vfs_read;pipe_read;schedule;__schedule 510155".to_string()
    ));
    // Nothing of the parent's write hangs under the signal return any more.
    assert!(lines
        .iter()
        .filter(|l| l.starts_with("__x64_sys_rt_sigreturn;"))
        .all(|l| [
            ";__get_user_nocheck_8 ",
            ";set_current_blocked",
            ";restore_altstack",
            ";_copy_from_user"
        ]
        .iter()
        .any(|f| l.contains(f))));
    let sig_graph = g.child(0, "__x64_sys_rt_sigreturn").unwrap();
    assert_eq!(
        (
            g.nodes[sig_graph].incomplete,
            g.nodes[sig_graph].lost_inside
        ),
        (1, 1)
    );
    let read_graph = g.child(0, "__x64_sys_read").unwrap();
    assert_eq!(
        (g.nodes[read_graph].calls, g.nodes[read_graph].opening_lost),
        (3, 2)
    );
    let mut out = Vec::new();
    graph::write_graph(&mut out, &g, Some(1)).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains(
        "  831.367 us  112.038 us      3  __x64_sys_read  [events lost inside: 1]  [opening lost: 2]  ..."
    ), "{}", text);
    // Chrome: the rebuilt read of the child starts its track, as long as its `}` says.
    let doc = chrome::document(&t, LOST);
    let first = doc
        .trace_events
        .iter()
        .find(|e| e.ph == "X" && e.tid == 95)
        .unwrap();
    assert_eq!(
        (first.name.as_str(), first.ts, first.dur),
        ("__x64_sys_read", Some(0.0), Some(658.597))
    );
    assert_eq!(first.args["fctrace"]["opening lost"], true);
    assert_eq!(first.args["fctrace"]["line"], 141);
    assert_eq!(first.args["return"], "0x1");
    // The parent's rebuilt read comes after the signal return's calls.
    let second = doc
        .trace_events
        .iter()
        .filter(|e| e.ph == "X" && e.tid == 88 && e.name == "__x64_sys_read")
        .map(|e| (e.ts, e.dur))
        .next()
        .unwrap();
    // (+ 1 ns: the not-followed memset() inside the signal return is 1 ns long.)
    assert_eq!(second, (Some(455.012), Some(95.173)));
}

#[test]
fn pingpong_cold_exec_rebuilt() {
    let text = fixture(COLD);
    let lines = text_lines(&text);
    let dur_at = |no: usize| lines.iter().find(|l| l.no == no).unwrap().dur.unwrap();
    let t = load(COLD);
    let th = t.threads.iter().find(|th| th.task.tid == 60).unwrap();
    // The signal return the shell was in on CPU 1 (lines 6-27), then the execve() its
    // `}` at line 5636 closes, then fct_pingpong's own system calls.
    let sig = &t.nodes[th.roots[0]];
    assert_eq!(
        (sig.name.as_str(), sig.end),
        ("__x64_sys_rt_sigreturn", End::Incomplete)
    );
    assert_eq!(sig.children.len(), 6);
    assert_eq!(sig.total_ns, 292_447 + 3_365 + 547_098 + 653_858 + 19_710);
    let exec = &t.nodes[th.roots[1]];
    assert_eq!(
        (
            exec.name.as_str(),
            exec.line_no,
            exec.duration_ns,
            exec.ret()
        ),
        ("__x64_sys_execve", 5636, Some(57_224_206), Some("0x0"))
    );
    assert!(exec.opening_lost);
    // Its calls: rebuilt from the `}` lines down to the first line on CPU 0 (line 28,
    // a memcpy at depth 8).
    let mut path = Vec::new();
    let mut id = th.roots[1];
    loop {
        let n = &t.nodes[id];
        path.push((n.name.as_str(), n.line_no, n.duration_ns));
        match n.children.first() {
            Some(&c) => id = c,
            None => break,
        }
    }
    let expected: Vec<(&str, usize, Option<u64>)> = [
        ("__x64_sys_execve", 5636),
        ("do_execveat_common", 5635),
        ("bprm_execve", 5612),
        ("kernel_read", 51),
        ("__kernel_read", 50),
        ("shmem_file_read_iter", 49),
        ("copy_page_to_iter", 31),
        ("_copy_to_iter", 29),
    ]
    .iter()
    .map(|&(f, no)| (f, no, Some(dur_at(no))))
    .chain([("memcpy", 28, None)])
    .collect();
    assert_eq!(path, expected);
    let roots_in_text = lines
        .iter()
        .filter(|l| l.tid == 60 && l.depth == 0 && !l.func.starts_with('}'))
        .count();
    // The top-level calls of the text, the signal return among them, and the execve.
    assert_eq!(th.roots.len(), roots_in_text + 1);
    // The child: its first line is a system call at depth 0 after the fork.
    let child = t.threads.iter().find(|th| th.task.tid == 70).unwrap();
    let child_roots = lines
        .iter()
        .filter(|l| l.tid == 70 && l.depth == 0 && !l.func.starts_with('}'))
        .count();
    assert_eq!(child.roots.len(), child_roots);
    assert!(child
        .roots
        .iter()
        .all(|&r| !t.nodes[r].opening_lost && t.nodes[r].end != End::Incomplete));
    let st = stats::compute(&t);
    let exec = stat(&st, "__x64_sys_execve");
    assert_eq!(
        (exec.calls, exec.opening_lost, exec.total_ns),
        (1, 1, 57_224_206)
    );
    let elf = lines.iter().find(|l| l.no == 5608).unwrap();
    assert_eq!(elf.closes(), Some("load_elf_binary"));
    assert_eq!(stat(&st, "load_elf_binary").total_ns, 45_449_037);
    assert_eq!(elf.dur, Some(45_449_037));
    let g = graph::whole(&t, false);
    let calls = folded::folded_lines(&g, Weight::Calls);
    assert!(calls.contains(
        &"__x64_sys_execve;do_execveat_common;bprm_execve;kernel_read;__kernel_read;shmem_file_read_iter;copy_page_to_iter;_copy_to_iter;memcpy 1"
            .to_string()
    ));
    // The signal return holds its own calls only.
    let under_sig: Vec<&str> = g.nodes[g.child(0, "__x64_sys_rt_sigreturn").unwrap()]
        .children
        .iter()
        .map(|&c| g.nodes[c].function.as_str())
        .collect();
    assert_eq!(
        under_sig,
        [
            "__get_user_nocheck_8",
            "set_current_blocked",
            "restore_altstack",
            "memset",
            "_copy_from_user"
        ]
    );
}

#[test]
fn pingpong_args_clone_rebuilt_with_arguments() {
    let text = fixture(ARGS);
    let lines = text_lines(&text);
    let t = load(ARGS);
    let parent = t.threads.iter().find(|th| th.task.tid == 77).unwrap();
    // The clone() rebuilt from its `}` (line 221) returns the child's thread id.
    let clone = &t.nodes[parent.roots[1]];
    assert_eq!(
        (clone.name.as_str(), clone.duration_ns, clone.ret()),
        ("__x64_sys_clone", Some(15_071_626), Some("84"))
    );
    assert_eq!(t.threads[1].task.tid, 84);
    let chain: Vec<(&str, Option<u64>)> = t
        .preorder(&parent.roots[1..2])
        .into_iter()
        .take(5)
        .map(|id| (t.nodes[id].name.as_str(), t.nodes[id].duration_ns))
        .collect();
    assert_eq!(
        chain,
        [
            ("__x64_sys_clone", Some(15_071_626)),
            ("kernel_clone", Some(11_136_648)),
            ("copy_process", Some(9_044_353)),
            ("copy_mm", Some(5_697_008)),
            ("copy_page_range", Some(191_407)),
        ]
    );
    // Arguments without BTF records (lost with the events): `(?)`.
    let cpr = t.preorder(&parent.roots[1..2])[4];
    let first = &t.nodes[t.nodes[cpr].children[0]];
    assert_eq!(
        (first.name.as_str(), &first.args, first.line_no),
        ("__pte_offset_map_lock", &Args::Unknown, 9)
    );
    // The 629 `}` without a comment (typed functions returning nothing) close the
    // frames opened at their depth: none rebuilt, none unknown.
    let bare: Vec<&fctrace_report::tree::Node> = t
        .nodes
        .iter()
        .filter(|n| n.close_notes.as_ref().is_some_and(|c| c.is_empty()))
        .collect();
    assert_eq!(bare.len(), 629);
    assert!(bare
        .iter()
        .all(|n| !n.opening_lost && n.kind == NodeKind::Call));
    // The child's first call (line 188) comes while its parent is still in clone()
    // (until line 221); then its first read, and the parent's writes, by argument.
    let child = &t.threads[1];
    let robust = &t.nodes[child.roots[0]];
    assert_eq!(
        (robust.name.as_str(), robust.line_no, robust.duration_ns),
        ("__x64_sys_set_robust_list", 188, Some(30_946))
    );
    let read = &t.nodes[child.roots[1]];
    assert_eq!(read.line_no, 222);
    assert_eq!(
        read.args,
        Args::Named(vec![("regs".into(), "0xffff888003217f58".into())])
    );
    let writes: Vec<&fctrace_report::tree::Node> = t
        .nodes
        .iter()
        .filter(|n| n.name == "ksys_write" && n.thread == 0)
        .collect();
    // 20 one-byte writes into the pipe to the child, then the result to standard
    // output (line 5745).
    let in_text = lines
        .iter()
        .filter(|l| {
            l.tid == 77
                && l.func
                    .starts_with("ksys_write(fd=4, buf=\"x\\x03\", count=1)")
        })
        .count();
    assert_eq!((writes.len(), in_text), (21, 20));
    let last = writes.last().unwrap();
    assert_eq!(last.line_no, 5745);
    assert_eq!(
        last.args,
        Args::Named(vec![
            ("fd".into(), "1".into()),
            ("buf".into(), "\"ns 164331187\\nops 20\\n\"".into()),
            ("count".into(), "20".into()),
        ])
    );
    assert_eq!(
        writes[0].args,
        Args::Named(vec![
            ("fd".into(), "4".into()),
            ("buf".into(), "\"x\\x03\"".into()),
            ("count".into(), "1".into()),
        ])
    );
    // write(): every call, and its time from the `}` lines naming it.
    let st = stats::compute(&t);
    let w = stat(&st, "__x64_sys_write");
    let opened = lines
        .iter()
        .filter(|l| l.func.starts_with("__x64_sys_write("))
        .count() as u64;
    let closes: Vec<u64> = lines
        .iter()
        .filter(|l| l.closes() == Some("__x64_sys_write"))
        .map(|l| l.dur.unwrap())
        .collect();
    assert_eq!((w.calls, w.timed), (opened, closes.len() as u64));
    assert_eq!(w.total_ns, closes.iter().sum::<u64>());
    assert_eq!(w.calls, 41);
    // Typed returns: errno names.
    assert_eq!(
        stat(&st, "__x64_sys_ioctl")
            .error_returns
            .get("-25 (ENOTTY)"),
        Some(&1)
    );
}

#[test]
fn pingpong_diff_cold_against_args() {
    let a = load(COLD);
    let b = load(ARGS);
    let d = diff::diff(&a, COLD, &b, ARGS);
    // The exec is in the cold run only: the other lost it with the events before it.
    assert_eq!(d.functions_only_in_a[0].function, "__x64_sys_execve");
    let only_a: Vec<&str> = d
        .functions_only_in_a
        .iter()
        .map(|f| f.function.as_str())
        .collect();
    for f in ["load_elf_binary", "begin_new_exec", "bprm_execve"] {
        assert!(only_a.contains(&f), "{}", f);
    }
    let exec = d
        .paths_only_in_a
        .iter()
        .find(|p| p.path == ["__x64_sys_execve"])
        .unwrap();
    assert_eq!((exec.calls, exec.total_ns), (1, 57_224_206));
    assert!(!d
        .paths_only_in_b
        .iter()
        .any(|p| p.path[0] == "__x64_sys_execve"));
    // ioctl() failed with ENOTTY in both: printed raw in one (-25), typed in the other
    // (-25 (ENOTTY)), it is no difference.
    let sa = stats::compute(&a);
    let sb = stats::compute(&b);
    assert_eq!(
        stat(&sa, "__x64_sys_ioctl").error_returns.get("-25"),
        Some(&1)
    );
    assert_eq!(
        stat(&sb, "__x64_sys_ioctl")
            .error_returns
            .get("-25 (ENOTTY)"),
        Some(&1)
    );
    assert!(!d
        .error_returns
        .iter()
        .any(|c| c.function == "__x64_sys_ioctl"));
    // 20 round trips each: the reads and writes of the pipes.
    for f in ["__x64_sys_read", "__x64_sys_write"] {
        assert!(!d.call_changes.iter().any(|c| c.what == f), "{}", f);
    }
}

/// The reports say the same of every fixture: the calls and self times of the
/// statistics, the graph, the folded stacks; each function's total in the statistics
/// and in its focused graph; and the Chrome slices as long as the calls' durations.
#[test]
fn reports_agree_on_every_fixture() {
    for name in all_fixtures() {
        let t = load(&name);
        let st = stats::compute(&t);
        let g = graph::whole(&t, false);
        let calls: u64 = st.iter().map(|f| f.calls).sum();
        assert_eq!(calls, g.total_calls(), "{}", name);
        assert_eq!(
            calls,
            t.summary.calls + t.summary.recovered_calls,
            "{}",
            name
        );
        let self_stats: u64 = st.iter().map(|f| f.self_ns).sum();
        let self_graph: u64 = g.nodes.iter().map(|n| n.self_ns).sum();
        let folded_sum: u64 = folded::folded_lines(&g, Weight::Time)
            .iter()
            .map(|l| folded_value(l))
            .sum();
        // (Interrupt and `[unknown]` nodes are no functions but have self times too.)
        let self_other: u64 = t
            .nodes
            .iter()
            .filter(|n| !n.is_call())
            .map(|n| n.self_ns)
            .sum();
        assert_eq!(self_stats + self_other, self_graph, "{}", name);
        assert_eq!(folded_sum, self_graph, "{}", name);
        assert_eq!(
            folded_sum,
            g.nodes[0].total_ns + t.summary.overrun_ns,
            "{}",
            name
        );
        for f in &st {
            let (fg, _) = graph::focused(&t, &f.function).unwrap();
            assert_eq!(fg.nodes[0].total_ns, f.total_ns, "{} {}", name, f.function);
        }
        // Chrome: a call with a duration is a slice that long, unless the calls inside
        // are longer (a not-followed call inside is 1 ns long).
        let doc = chrome::document(&t, &name);
        let slices = doc.trace_events.iter().filter(|e| e.ph == "X");
        let order = t.threads.iter().flat_map(|th| t.preorder(&th.roots));
        let mut longer = 0;
        for (e, id) in slices.zip(order) {
            let n = &t.nodes[id];
            let dur = (e.dur.unwrap() * 1000.0).round() as u64;
            assert!(dur >= n.total_ns.max(1), "{} line {}", name, n.line_no);
            if n.duration_ns.is_some() && dur != n.total_ns {
                longer += 1;
            }
        }
        assert_eq!(longer, 0, "{}", name);
    }
}

/// Loads a handmade text.
fn load_text(text: &str) -> fctrace_report::Trace {
    let (t, skipped) = fctrace_report::load_str(text, LoadOptions::default()).unwrap();
    assert!(skipped.is_empty());
    for (id, n) in t.nodes.iter().enumerate() {
        for &c in &n.children {
            assert!(c > id && t.nodes[c].parent == Some(id), "{}", text);
        }
    }
    check_folded(text, &t);
    t
}

/// (label, duration, total, self, end, opening lost) of each node, depth-first.
fn shape(t: &fctrace_report::Trace) -> Vec<(String, Option<u64>, u64, u64, End, bool)> {
    let roots: Vec<usize> = t.threads.iter().flat_map(|th| th.roots.clone()).collect();
    t.preorder(&roots)
        .into_iter()
        .map(|id| {
            let n = &t.nodes[id];
            (
                n.label(),
                n.duration_ns,
                n.total_ns,
                n.self_ns,
                n.end,
                n.opening_lost,
            )
        })
        .collect()
}

fn s(x: &str) -> String {
    x.to_string()
}

#[test]
fn lost_lines_rebuilt_from_what_is_left() {
    use End::*;
    // A `}` naming another function, nothing known lost before it: the open frame keeps
    // its calls, the `}`'s call is rebuilt empty after it.
    let t = load_text(
        " 0) t-1 |                 |  a() {\n 0) t-1 |        1.000 us  |    b();\n 0) t-1 |       10.000 us  |  } /* c ret=0 */\n",
    );
    assert_eq!(
        shape(&t),
        [
            (s("a"), None, 1_000, 0, Incomplete, false),
            (s("b"), Some(1_000), 1_000, 1_000, Leaf, false),
            (s("c"), Some(10_000), 10_000, 10_000, Returned, true),
        ]
    );
    assert_eq!(
        (t.summary.close_name_mismatches, t.summary.recovered_calls),
        (1, 1)
    );
    // Events lost on the thread's CPU inside `a`: the calls after go to the rebuilt one
    // (made after them: the nodes are put back in order).
    let t = load_text(
        " 1) t-1 |                 |  a() {\n 1) t-1 |        1.000 us  |    b();\nCPU:1 [LOST 5 EVENTS]\n 1) t-1 |        2.000 us  |    d();\n 1) t-1 |       10.000 us  |  } /* c ret=0 */\n",
    );
    let expected = [
        (s("a"), None, 1_000, 0, Incomplete, false),
        (s("b"), Some(1_000), 1_000, 1_000, Leaf, false),
        (s("c"), Some(10_000), 10_000, 8_000, Returned, true),
        (s("d"), Some(2_000), 2_000, 2_000, Leaf, false),
    ];
    assert_eq!(shape(&t), expected);
    assert!(t
        .nodes
        .iter()
        .filter(|n| n.name != "b")
        .all(|n| n.lost_inside || n.name == "d"));
    // The same when the thread comes to a CPU that lost events since its last line
    // (another thread's line between changes nothing).
    let t = load_text(
        " 1) t-1 |                 |  a() {\n 1) t-1 |        1.000 us  |    b();\nCPU:0 [LOST 5 EVENTS]\n 1) u-2 |        1.000 us  |  x();\n 0) t-1 |        2.000 us  |    d();\n 0) t-1 |       10.000 us  |  } /* c ret=0 */\n",
    );
    let mine: Vec<_> = shape(&t).into_iter().filter(|x| x.0 != "x").collect();
    assert_eq!(mine, expected);
    // A thread that stays on its CPU while another CPU loses events lost nothing.
    let t = load_text(
        " 1) t-1 |                 |  a() {\nCPU:0 [LOST 5 EVENTS]\n 1) t-1 |        2.000 us  |    d();\n 1) t-1 |       10.000 us  |  } /* a ret=0 */\n",
    );
    assert!(!t.nodes[0].lost_inside);
    assert_eq!(t.nodes[0].end, Returned);
    // A trace that starts inside calls: `[unknown]` callers put in for a deeper line,
    // named by the `}` that closes them if it names its function; a bare `}` leaves the
    // frame unknown, with its duration.
    let t = load_text(
        " 0) t-1 |        3.000 us  |      g();\n 0) t-1 |        5.000 us  |    }\n 0) t-1 |        9.000 us  |  } /* h ret=0 */\n",
    );
    assert_eq!(
        shape(&t),
        [
            (s("h"), Some(9_000), 9_000, 4_000, Returned, true),
            (s("[unknown]"), Some(5_000), 5_000, 2_000, Returned, true),
            (s("g"), Some(3_000), 3_000, 3_000, Leaf, false),
        ]
    );
    assert_eq!(
        (t.summary.recovered_calls, t.summary.unknown_frames),
        (1, 1)
    );
    let st = stats::compute(&t);
    let names: Vec<&str> = st.iter().map(|f| f.function.as_str()).collect();
    assert_eq!(names, ["h", "g"]);
    assert_eq!(stat(&st, "h").opening_lost, 1);
    let g = graph::whole(&t, false);
    assert_eq!(
        folded::folded_lines(&g, Weight::Time),
        ["h 4000", "h;[unknown] 2000", "h;[unknown];g 3000"]
    );
    // The `[unknown]` frame has no calls but a time of its own.
    let mut out = Vec::new();
    graph::write_graph(&mut out, &g, None).unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.contains("    5.000 us   2.000 us      -  `- [unknown]\n"),
        "{}",
        text
    );
    // Never closed, unknown callers stay `[unknown]` and incomplete.
    let t = load_text(" 0) t-1 |        3.000 us  |    g();\n");
    assert_eq!(
        shape(&t),
        [
            (s("[unknown]"), None, 3_000, 0, Incomplete, true),
            (s("g"), Some(3_000), 3_000, 3_000, Leaf, false),
        ]
    );
    assert!(stats::compute(&t).iter().all(|f| f.function == "g"));
}

/// Durations that do not add up (the calls inside a frame longer than it): nothing is
/// made up, and every report says so.
#[test]
fn inconsistent_durations_are_said() {
    let t = load_text(
        " 0) t-1 |                 |  f() {\n 0) t-1 |        5.000 us  |    g();\n 0) t-1 |        4.000 us  |  } /* f ret=0 */\n",
    );
    let f = &t.nodes[0];
    assert_eq!((f.total_ns, f.self_ns, f.overrun_ns), (4_000, 0, 1_000));
    assert_eq!((t.summary.overrun_frames, t.summary.overrun_ns), (1, 1_000));
    assert!(t
        .describe()
        .ends_with("1 frame shorter than the calls inside (by 1.000 us in all)"));
    assert_eq!(
        t.anomalies,
        ["line 1: the calls inside f add up to 1.000 us more than its duration, 4.000 us: its self time counts 0"]
    );
    let st = stats::compute(&t);
    let sf = stat(&st, "f");
    assert_eq!((sf.total_ns, sf.self_ns, sf.overrun), (4_000, 0, 1));
    let mut out = Vec::new();
    stats::write_table(&mut out, &st).unwrap();
    assert!(String::from_utf8(out)
        .unwrap()
        .contains("  f  [shorter than the calls inside: 1]\n"));
    let g = graph::whole(&t, false);
    assert_eq!(g.nodes[0].total_ns, 4_000);
    let mut out = Vec::new();
    graph::write_graph(&mut out, &g, None).unwrap();
    assert!(String::from_utf8(out)
        .unwrap()
        .contains("    4.000 us   0.000 us      1  f  [calls inside longer by 1.000 us]\n"));
    // The folded stacks: the root's 4 us and the 1 us over.
    assert_eq!(folded::folded_lines(&g, Weight::Time), ["f;g 5000"]);
    // Chrome: the slice holds its calls, and says by how much it is longer.
    let doc = chrome::document(&t, "x");
    let e = doc.trace_events.iter().find(|e| e.name == "f").unwrap();
    assert_eq!(e.dur, Some(5.0));
    assert_eq!(e.args["fctrace"]["duration ns"], 4_000);
    assert_eq!(e.args["fctrace"]["calls inside longer by ns"], 1_000);
}
