// SPDX-License-Identifier: GPL-2.0 OR MIT

//! The parser against fctrace's own formatter (fctrace-core's `format::write_record`),
//! and every report against damaged and pathological input: no panic, no stack
//! overflow.

mod common;

use common::{all_fixtures, check_folded, fixture};
use fctrace_core::format::{self, write_lost, write_raw_ret, write_record_with};
use fctrace_core::record::{
    Kind, Reason, Record, F_DURATION, F_FAULT, F_INDIRECT, F_IRQ, F_RETVAL, F_SOFTIRQ, F_TAIL,
};
use fctrace_report::folded::{self, FlameOptions, Weight};
use fctrace_report::tree::End;
use fctrace_report::{chrome, diff, graph, stats, BuildOptions, LoadOptions, Trace};

/// A small deterministic generator (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

const NAMES: [&str; 8] = [
    "vfs_read",
    "ext4_file_read_iter [ext4]",
    "copy_page_to_iter.isra.0",
    "_raw_spin_lock",
    "filemap_read",
    "ptr:0123abcd",
    "0x0",
    "__x64_sys_read",
];

const REASONS: [Reason; 6] = [
    Reason::Atomic,
    Reason::Unprobeable,
    Reason::Filtered,
    Reason::Depth,
    Reason::SharedSite,
    Reason::ArmTimeout,
];

/// A generated call: what the trees should hold.
#[derive(Debug)]
enum Gen {
    Call {
        name: &'static str,
        flags: u8,
        /// `Kind::Whole` (followed, nothing inside), `Kind::Leaf` (not followed) or
        /// `Kind::Call` (a frame).
        kind: Kind,
        reason: Reason,
        close_reason: Reason,
        dur: u64,
        retval: u64,
        children: Vec<Gen>,
    },
    /// An interrupt's tree (`irq` or `softirq`).
    Irq { soft: bool, tree: Box<Gen> },
}

fn gen_call(rng: &mut Rng, depth: u8, irq_flags: u8) -> Gen {
    let name = NAMES[rng.below(NAMES.len() as u64) as usize];
    let flags =
        [0, F_TAIL, F_INDIRECT, F_FAULT, F_TAIL | F_INDIRECT][rng.below(5) as usize] | irq_flags;
    let kind = match rng.below(10) {
        0..=3 if depth < 6 => Kind::Call,
        4 | 5 => Kind::Leaf,
        _ => Kind::Whole,
    };
    let mut children = Vec::new();
    if kind == Kind::Call {
        for _ in 0..rng.below(4) {
            if irq_flags == 0 && rng.chance(10) {
                let soft = rng.chance(50);
                let f = if soft { F_SOFTIRQ } else { F_IRQ };
                children.push(Gen::Irq {
                    soft,
                    tree: Box::new(gen_call(rng, 0, f)),
                });
            } else {
                children.push(gen_call(rng, depth + 1, irq_flags));
            }
        }
    }
    let retval = match rng.below(4) {
        0 => (-(rng.below(133) as i64) - 1) as u64,
        1 => 0xffff_8880_0000_0000 | rng.below(1 << 20) << 4,
        _ => rng.below(4096),
    };
    Gen::Call {
        name,
        flags,
        kind,
        reason: if kind == Kind::Leaf {
            REASONS[rng.below(REASONS.len() as u64) as usize]
        } else {
            Reason::None
        },
        close_reason: [
            Reason::None,
            Reason::None,
            Reason::None,
            Reason::Exit,
            Reason::Unwound,
        ][rng.below(5) as usize],
        dur: rng.below(5_000_000_000),
        retval,
        children,
    }
}

fn rec(kind: Kind, depth: u8, tid: u32, cpu: u32, comm: &str) -> Record {
    let mut r = Record::ZERO;
    r.kind = kind as u8;
    r.depth = depth;
    r.pid = tid;
    r.tgid = tid;
    r.cpu = cpu;
    let n = comm.len().min(15);
    r.comm[..n].copy_from_slice(&comm.as_bytes()[..n]);
    r
}

const OPTS: format::Options = format::Options::PLAIN;

/// Every option that changes the text: a time column, call sites, `ERROR` marks.
const OPTS_ALL: format::Options = format::Options {
    callsite: true,
    abstime: true,
    errors: true,
    ..format::Options::PLAIN
};

/// The expected preorder entry of a node: label, duration, return value, end.
type Expect = (String, Option<u64>, Option<String>, End);

fn label(name: &str) -> String {
    name.to_string()
}

fn ret_text(v: u64) -> String {
    let mut s = String::new();
    write_raw_ret(&mut s, v, None).unwrap();
    s.strip_prefix("ret=").unwrap().to_string()
}

/// Writes `g` at `depth` as fctrace does, and what the tree should hold, in preorder.
#[allow(clippy::too_many_arguments)]
fn emit(
    opts: format::Options,
    g: &Gen,
    depth: u8,
    tid: u32,
    cpu: u32,
    comm: &str,
    lines: &mut Vec<String>,
    exp: &mut Vec<Expect>,
) {
    match g {
        Gen::Irq { soft, tree } => {
            exp.push((
                if *soft { "[softirq]" } else { "[irq]" }.to_string(),
                None,
                None,
                End::Interrupt,
            ));
            emit(opts, tree, 0, tid, cpu, comm, lines, exp);
        }
        Gen::Call {
            name,
            flags,
            kind,
            reason,
            close_reason,
            dur,
            retval,
            children,
        } => {
            let mut s = String::new();
            let mut r = rec(*kind, depth, tid, cpu, comm);
            r.reason = *reason as u8;
            match kind {
                Kind::Whole => {
                    r.flags = flags | F_DURATION | F_RETVAL;
                    r.dur = *dur;
                    r.retval = *retval;
                    exp.push((label(name), Some(*dur), Some(ret_text(*retval)), End::Leaf));
                }
                Kind::Leaf => {
                    r.flags = *flags;
                    exp.push((label(name), None, None, End::NotFollowed));
                }
                _ => {
                    r.flags = *flags;
                    exp.push((
                        label(name),
                        Some(*dur),
                        Some(ret_text(*retval)),
                        End::Returned,
                    ));
                }
            }
            write_record_with(&mut s, &r, name, opts, None, Some("caller+0x10")).unwrap();
            lines.extend(s.lines().map(str::to_string));
            s.clear();
            if *kind == Kind::Call {
                for c in children {
                    emit(opts, c, depth + 1, tid, cpu, comm, lines, exp);
                }
                let mut ret = rec(Kind::Ret, depth, tid, cpu, comm);
                ret.flags = (flags & (F_IRQ | F_SOFTIRQ)) | F_DURATION | F_RETVAL;
                ret.reason = *close_reason as u8;
                ret.dur = *dur;
                ret.retval = *retval;
                write_record_with(&mut s, &ret, name, opts, None, None).unwrap();
            }
            lines.extend(s.lines().map(str::to_string));
        }
    }
}

/// The total time of generated call `g` (its duration; an interrupt's, its tree's; a
/// call not followed, 0), counting the frames whose children's totals exceed their
/// duration, and by how much, into `frames` and `ns`.
fn overruns(g: &Gen, frames: &mut u64, ns: &mut u64) -> u64 {
    match g {
        Gen::Irq { tree, .. } => overruns(tree, frames, ns),
        Gen::Call {
            kind,
            dur,
            children,
            ..
        } => {
            let inside: u64 = children.iter().map(|c| overruns(c, frames, ns)).sum();
            match kind {
                Kind::Leaf => 0,
                Kind::Call if inside > *dur => {
                    *frames += 1;
                    *ns += inside - dur;
                    *dur
                }
                _ => *dur,
            }
        }
    }
}

/// Labels as the trees show them: `ptr:0123abcd` and `0x0` are names too.
fn preorder(t: &Trace, tid: u32) -> Vec<Expect> {
    let th = t.threads.iter().find(|th| th.task.tid == tid).unwrap();
    t.preorder(&th.roots)
        .into_iter()
        .map(|id| {
            let n = &t.nodes[id];
            (n.label(), n.duration_ns, n.ret().map(str::to_string), n.end)
        })
        .collect()
}

#[test]
fn trees_of_fctraces_own_formatter() {
    let mut inconsistent = 0;
    for seed in 1..=40u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        // Every other seed with the options that change the text.
        let opts = if seed % 2 == 0 { OPTS_ALL } else { OPTS };
        let tasks = [
            (100u32, 0u32, "fct-a b"),
            (101, 1, "kworker/0:1-x"),
            (7, 3, "a|b"),
        ];
        let mut per_task: Vec<(u32, Vec<String>, Vec<Expect>)> = Vec::new();
        let mut generated = Vec::new();
        for &(tid, cpu, comm) in &tasks {
            let mut lines = Vec::new();
            let mut exp = Vec::new();
            let mut roots = Vec::new();
            for _ in 0..1 + rng.below(4) {
                let g = gen_call(&mut rng, 0, 0);
                emit(opts, &g, 0, tid, cpu, comm, &mut lines, &mut exp);
                roots.push(g);
            }
            per_task.push((tid, lines, exp));
            generated.push((tid, cpu, roots));
        }
        // Interleave the tasks' lines, each in order, with LOST lines between (no
        // event is really lost: the trees stay whole).
        let mut text = String::from(format::header(opts));
        let mut next = vec![0usize; per_task.len()];
        let mut lost = 0;
        loop {
            let open: Vec<usize> = (0..per_task.len())
                .filter(|&i| next[i] < per_task[i].1.len())
                .collect();
            if open.is_empty() {
                break;
            }
            let i = open[rng.below(open.len() as u64) as usize];
            text += &per_task[i].1[next[i]];
            text.push('\n');
            next[i] += 1;
            if rng.chance(3) {
                write_lost(&mut text, rng.below(4) as u32, 1 + rng.below(100)).unwrap();
                lost += 1;
            }
        }
        let (t, skipped) = fctrace_report::load_str(&text, LoadOptions::default())
            .unwrap_or_else(|e| panic!("seed {}: {}", seed, e));
        assert!(skipped.is_empty());
        assert_eq!(t.summary.lost_markers, lost);
        assert_eq!(
            t.summary.incomplete_frames, 0,
            "seed {}: {:?}",
            seed, t.anomalies
        );
        // Nothing was really lost: nothing to rebuild.
        assert_eq!(t.summary.recovered_calls, 0, "seed {}", seed);
        assert_eq!(t.summary.unknown_frames, 0, "seed {}", seed);
        assert_eq!(t.summary.close_name_mismatches, 0, "seed {}", seed);
        // The generated durations are random: where a frame's children add up to more
        // than it, the excess is its overrun.
        let (mut frames, mut ns) = (0, 0);
        for (_, _, roots) in &generated {
            for g in roots {
                overruns(g, &mut frames, &mut ns);
            }
        }
        assert_eq!(
            (t.summary.overrun_frames, t.summary.overrun_ns),
            (frames, ns),
            "seed {}",
            seed
        );
        // And the folded stacks add up to the graph's total plus that excess.
        check_folded(&format!("seed {}", seed), &t);
        inconsistent += u32::from(frames > 0);
        for (tid, _, exp) in &per_task {
            let got = preorder(&t, *tid);
            assert_eq!(&got, exp, "seed {} tid {}", seed, tid);
        }
        let comms: Vec<&str> = t.threads.iter().map(|th| th.task.comm.as_str()).collect();
        for (_, _, comm) in tasks {
            assert!(comms.contains(&comm));
        }
        // And the round trip of the call counts.
        let g = graph::whole(&t, false);
        assert_eq!(g.total_calls(), t.summary.calls);
        let expected_calls: usize = per_task
            .iter()
            .map(|p| p.2.iter().filter(|e| e.3 != End::Interrupt).count())
            .sum();
        assert_eq!(t.summary.calls as usize, expected_calls);
    }
    // The relationship was checked with durations that do not add up, too.
    assert!(inconsistent >= 10, "{}", inconsistent);
}

/// Runs every report on `t` (and a diff against `other`).
fn all_reports(t: &Trace, other: &Trace) {
    let s = stats::compute(t);
    let mut sink = Vec::new();
    stats::write_table(&mut sink, &s).unwrap();
    for by_task in [false, true] {
        let g = graph::whole(t, by_task);
        graph::write_graph(&mut sink, &g, None).unwrap();
        for w in [Weight::Time, Weight::Calls] {
            let lines = folded::folded_lines(&g, w);
            if !lines.is_empty() {
                folded::write_flamegraph(
                    &mut sink,
                    &lines,
                    &FlameOptions {
                        title: "t".into(),
                        subtitle: None,
                        weight: w,
                        min_width: 0.0,
                        width: None,
                    },
                )
                .unwrap();
            }
        }
    }
    if let Some(f) = s.first() {
        let name = f.function.clone();
        let (g, bt) = graph::focused(t, &name).unwrap();
        graph::write_graph(&mut sink, &g, Some(3)).unwrap();
        graph::write_backtraces(&mut sink, &bt).unwrap();
    }
    serde_json::to_writer(&mut sink, &chrome::document(t, "x")).unwrap();
    let d = diff::diff(t, "a", other, "b");
    diff::write_diff(&mut sink, &d, 5).unwrap();
    serde_json::to_writer(&mut sink, &d).unwrap();
}

const JUNK: [&str; 16] = [
    "|",
    "(",
    ")",
    "\"",
    "{",
    "}",
    ";",
    "/*",
    "*/",
    "\\",
    " ",
    "-",
    "é",
    "\u{1F600}",
    "CPU:",
    "==========>",
];

#[test]
fn damaged_traces_never_panic() {
    let mut rng = Rng(0x5eed);
    for name in all_fixtures() {
        let text = fixture(&name);
        let (orig, _) = fctrace_report::load_str(&text, LoadOptions::default()).unwrap();
        for _ in 0..60 {
            let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
            for _ in 0..1 + rng.below(12) {
                let i = rng.below(lines.len() as u64) as usize;
                let line = lines[i].clone();
                let chars: Vec<char> = line.chars().collect();
                let at = rng.below(chars.len() as u64 + 1) as usize;
                let mutated = match rng.below(7) {
                    0 => chars[..at].iter().collect(),
                    1 => {
                        let mut c = chars.clone();
                        if at < c.len() {
                            c.remove(at);
                        }
                        c.into_iter().collect()
                    }
                    2 => {
                        let j = JUNK[rng.below(JUNK.len() as u64) as usize];
                        let mut s: String = chars[..at].iter().collect();
                        s += j;
                        s.extend(&chars[at..]);
                        s
                    }
                    3 => {
                        lines.insert(i, line.clone());
                        line
                    }
                    4 => {
                        let j = rng.below(lines.len() as u64) as usize;
                        lines.swap(i, j);
                        lines[i].clone()
                    }
                    5 => line.replace("  ", "    "),
                    _ => String::new(),
                };
                lines[i] = mutated;
            }
            let damaged = lines.join("\n");
            for build in [
                BuildOptions::default(),
                BuildOptions {
                    merge_suffixes: true,
                    no_irqs: true,
                },
            ] {
                // Strictly: a result or an error naming a line of the input.
                match fctrace_report::load_str(
                    &damaged,
                    LoadOptions {
                        lenient: false,
                        build,
                    },
                ) {
                    Ok((t, _)) => all_reports(&t, &orig),
                    Err(e) => {
                        assert!(e.line_no >= 1 && e.line_no <= lines.len(), "{}", e);
                        assert_eq!(e.line, lines[e.line_no - 1]);
                    }
                }
                let (t, skipped) = fctrace_report::load_str(
                    &damaged,
                    LoadOptions {
                        lenient: true,
                        build,
                    },
                )
                .unwrap();
                assert_eq!(t.summary.skipped_lines, skipped.len());
                all_reports(&t, &orig);
                all_reports(&orig, &t);
            }
        }
    }
}

#[test]
fn lines_of_junk_never_panic() {
    let mut rng = Rng(42);
    let mut text = String::new();
    for _ in 0..3000 {
        let mut line = String::new();
        for _ in 0..rng.below(12) {
            line += JUNK[rng.below(JUNK.len() as u64) as usize];
            if rng.chance(30) {
                line += &rng.below(1 << 40).to_string();
            }
        }
        text += &line;
        text.push('\n');
    }
    let (t, _) = fctrace_report::load_str(
        &text,
        LoadOptions {
            lenient: true,
            ..Default::default()
        },
    )
    .unwrap();
    all_reports(&t, &t);
    assert!(fctrace_report::load_str(&text, LoadOptions::default()).is_err());
    // Bytes that are not UTF-8.
    let bytes: Vec<u8> = (0..4000).map(|_| rng.below(256) as u8).collect();
    let (t, _) = fctrace_report::load_bytes(
        &bytes,
        LoadOptions {
            lenient: true,
            ..Default::default()
        },
    )
    .unwrap();
    all_reports(&t, &t);
}

/// Thousands of nested frames, never closed, and as many unmatched closes: no report
/// recurses.
#[test]
fn deep_nesting_and_unmatched_closes() {
    const DEPTH: usize = 3000;
    let mut text = String::new();
    for d in 0..DEPTH {
        text += &format!(" 0) t-1 |                 |{}f() {{\n", "  ".repeat(d + 1));
    }
    text += " 0) t-1 |        1.000 us  |  g();\n";
    for d in 0..50 {
        text += &format!(" 0) t-1 |        1.000 us  |{}}}\n", "  ".repeat(d + 1));
    }
    let (t, _) = fctrace_report::load_str(&text, LoadOptions::default()).unwrap();
    // `g()` at depth 0 closed them all as incomplete; the closes had nothing to close:
    // each closes an `[unknown]` frame put in for it at its depth, under `[unknown]`
    // callers (the first at depth 0 alone, then each deeper one two more: its caller
    // and itself), and the callers stay open.
    assert_eq!(t.summary.unknown_frames, 1 + 2 * 49);
    assert_eq!(t.summary.incomplete_frames, DEPTH as u64 + 49);
    assert_eq!(t.summary.recovered_calls, 0);
    assert_eq!(t.summary.overrun_frames, 0);
    let deep = {
        let mut s = String::new();
        for d in 0..DEPTH {
            s += &format!(" 0) t-1 |                 |{}f() {{\n", "  ".repeat(d + 1));
        }
        s
    };
    let (t2, _) = fctrace_report::load_str(&deep, LoadOptions::default()).unwrap();
    assert_eq!(t2.summary.incomplete_frames, DEPTH as u64);
    let g = graph::whole(&t2, false);
    assert_eq!(g.nodes.len(), DEPTH + 1);
    // Run the reports on a thread of their own with a small stack: any recursion over
    // the depth would overflow it.
    std::thread::Builder::new()
        .stack_size(256 * 1024)
        .spawn(move || {
            all_reports(&t2, &t);
        })
        .unwrap()
        .join()
        .unwrap();
}
