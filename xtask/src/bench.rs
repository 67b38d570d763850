// SPDX-License-Identifier: GPL-2.0

//! `cargo xtask bench [--reps N] [--timeout SECS] [--smp N] [--mem MB]`: the overhead
//! benchmark. Boots the guest with `scripts/guest/bench.sh`, which runs a busy process
//! traced from `vfs_read` by fctrace, by fctrace with the scheduler hidden (filter
//! `!__schedule`; "lean": and `disarm_after` 1), by fctrace with the `args` option
//! ("args": arguments and typed returns from BTF), by ftrace's function_graph
//! (set_ftrace_pid), and by nothing, while
//! untraced processes do the same small reads (the traced code), then a pipe ping-pong
//! (other code, the same system call layer), then `stat()` calls (other code). Prints,
//! per tracer, the ratios traced/untraced of the other tasks' times and of the traced
//! process's time per read (mean, min, max over the repetitions), and from a separate run
//! of a few hundred traced reads the calls seen per read and the events lost, and writes
//! them as JSON to `target/fctrace/bench.json`. The guest is emulated: ratios are what
//! count.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::util::{bail, note, repo_root, Result};
use crate::vm::{self, VmOpts};

#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub mode: String,
    /// The other task running the traced code (same reads), total ns.
    pub other_ns: f64,
    /// The other tasks running other code (pipe ping-pong), total ns.
    pub pingpong_ns: f64,
    /// The other task making other system calls (stat), total ns.
    pub stat_ns: f64,
    /// The traced process, ns per read.
    pub traced_ns: f64,
    /// fctrace's probes the other tasks passed (each a trap where the probe is a
    /// breakpoint): per read, per ping-pong round trip, per `stat()`.
    pub untraced_hits: Option<[f64; 3]>,
}

/// The completeness run of one tracer: what its trace holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Complete {
    pub mode: String,
    /// Function entries the trace holds.
    pub calls: u64,
    /// Traced reads (trees) the trace holds.
    pub roots: u64,
    /// Events the tracer dropped in that run.
    pub lost: u64,
}

/// The `key=value` fields of a console line that starts with `tag` and a space (`BENCH`,
/// `ICOUNT`, ...).
pub(crate) fn fields(line: &str, tag: &str) -> Option<BTreeMap<String, String>> {
    let rest = line.trim_start().strip_prefix(tag)?.strip_prefix(' ')?;
    Some(
        rest.split_whitespace()
            .filter_map(|t| t.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
    )
}

/// Parses `BENCH mode=.. rep=.. other_ns=.. pingpong_ns=.. stat_ns=.. traced_ns=.. ops=..
/// untraced_hits=A/B/C` lines.
pub fn parse(console: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for line in console.lines() {
        let Some(kv) = fields(line, "BENCH") else {
            continue;
        };
        let num = |k: &str| kv.get(k).and_then(|v| v.parse::<f64>().ok());
        let (Some(mode), Some(o), Some(p), Some(st), Some(t)) = (
            kv.get("mode"),
            num("other_ns"),
            num("pingpong_ns"),
            num("stat_ns"),
            num("traced_ns"),
        ) else {
            continue;
        };
        out.push(Sample {
            mode: mode.clone(),
            other_ns: o,
            pingpong_ns: p,
            stat_ns: st,
            traced_ns: t,
            untraced_hits: kv.get("untraced_hits").and_then(|v| per_op(v)),
        });
    }
    out
}

/// `A/B/C`: three numbers.
fn per_op(v: &str) -> Option<[f64; 3]> {
    let mut it = v.split('/').map(|x| x.parse::<f64>().ok());
    let out = [it.next()??, it.next()??, it.next()??];
    it.next().is_none().then_some(out)
}

/// Parses `BENCHC mode=.. calls=.. roots=.. lost=..` lines.
pub fn parse_complete(console: &str) -> Vec<Complete> {
    let mut out = Vec::new();
    for line in console.lines() {
        let Some(kv) = fields(line, "BENCHC") else {
            continue;
        };
        let int = |k: &str| kv.get(k).and_then(|v| v.parse::<u64>().ok());
        let (Some(mode), Some(calls), Some(roots), Some(lost)) =
            (kv.get("mode"), int("calls"), int("roots"), int("lost"))
        else {
            continue;
        };
        out.push(Complete {
            mode: mode.clone(),
            calls,
            roots,
            lost,
        });
    }
    out
}

/// A cold first run (`BENCHCOLD`): fctrace's first run of a workload in a fresh session
/// against function_graph's run of it.
#[derive(Debug, Clone, PartialEq)]
pub struct Cold {
    pub name: String,
    /// Calls in the compared trees: fctrace's, function_graph's.
    pub fct: u64,
    pub ftrace: u64,
    /// Agreement (%) over the functions both show, as the oracle selftests compute it.
    pub agreement: f64,
    /// The same, of the two function_graph runs (before and after fctrace's): the noise.
    pub noise: Option<f64>,
    /// Functions fctrace's first run shows `not followed: atomic`, and its second (warm)
    /// run.
    pub atomic: Option<u64>,
    pub warm_atomic: Option<u64>,
}

/// Parses `BENCHCOLD name=.. fct=.. ftrace=.. agreement=.. ftrace_ftrace=.. atomic=..
/// warm_atomic=..`.
pub fn parse_cold(console: &str) -> Vec<Cold> {
    let mut out = Vec::new();
    for line in console.lines() {
        let Some(kv) = fields(line, "BENCHCOLD") else {
            continue;
        };
        let int = |k: &str| kv.get(k).and_then(|v| v.parse::<u64>().ok());
        let (Some(name), Some(fct), Some(ftrace), Some(agreement)) = (
            kv.get("name"),
            int("fct"),
            int("ftrace"),
            kv.get("agreement").and_then(|v| v.parse::<f64>().ok()),
        ) else {
            continue;
        };
        out.push(Cold {
            name: name.clone(),
            fct,
            ftrace,
            agreement,
            noise: kv.get("ftrace_ftrace").and_then(|v| v.parse::<f64>().ok()),
            atomic: int("atomic"),
            warm_atomic: int("warm_atomic"),
        });
    }
    out
}

/// One sample of the arming run (`BENCHARM`): functions armed, the time spent
/// registering (µs) so far, and of that the time in updates of the entry hooks' ftrace
/// filter (µs; 0 where the line does not say); the entry hooks, and the updates so far
/// (`None` where the line does not say).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ArmSample {
    pub t: u64,
    pub funcs: u64,
    pub reg_us: u64,
    pub upd_us: u64,
    pub hooks: u64,
    pub upds: Option<u64>,
}

/// What arming cost while the armed set grew from `from` to `to` functions
/// ([`arm_costs`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ArmCost {
    /// Registration time per function armed (ms).
    pub ms: f64,
    /// Of that, the time in ftrace filter updates (ms per function).
    pub upd_ms: f64,
    pub from: u64,
    pub to: u64,
    /// The filter updates in that stretch, and the entry hooks each added on average
    /// (where the samples say).
    pub updates: Option<u64>,
    pub hooks_per_update: Option<f64>,
}

pub fn parse_arm(console: &str) -> Vec<ArmSample> {
    let mut out = Vec::new();
    for line in console.lines() {
        let Some(kv) = fields(line, "BENCHARM") else {
            continue;
        };
        let int = |k: &str| kv.get(k).and_then(|v| v.parse::<u64>().ok());
        if let (Some(t), Some(funcs), Some(reg_us)) = (int("t"), int("funcs"), int("reg_us")) {
            out.push(ArmSample {
                t,
                funcs,
                reg_us,
                upd_us: int("upd_us").unwrap_or(0),
                hooks: int("hooks").unwrap_or(0),
                upds: int("upds"),
            });
        }
    }
    out
}

/// What arming cost while the armed set grew through `lo..hi`: between the last sample
/// at or below `lo` (or the start) and the first at or above `hi` (or the last).
pub fn arm_costs(s: &[ArmSample], lo: u64, hi: u64) -> Option<ArmCost> {
    let start = ArmSample {
        t: 0,
        funcs: 0,
        reg_us: 0,
        upd_us: 0,
        hooks: 0,
        upds: Some(0),
    };
    let a = *s.iter().rev().find(|x| x.funcs <= lo).unwrap_or(&start);
    let b = *s.iter().find(|x| x.funcs >= hi).or(s.last())?;
    let per = |x: u64, y: u64| (y - x.min(y)) as f64 / 1000.0 / (b.funcs - a.funcs) as f64;
    let updates = match (a.upds, b.upds) {
        (Some(x), Some(y)) => Some(y.saturating_sub(x)),
        _ => None,
    };
    (b.funcs > a.funcs).then(|| ArmCost {
        ms: per(a.reg_us, b.reg_us),
        upd_ms: per(a.upd_us, b.upd_us),
        from: a.funcs,
        to: b.funcs,
        updates,
        hooks_per_update: updates
            .filter(|&u| u > 0)
            .map(|u| b.hooks.saturating_sub(a.hooks) as f64 / u as f64),
    })
}

/// The cold-run and arming lines of the report.
pub fn cold_table(cold: &[Cold], arm: &[ArmSample]) -> String {
    let mut t = String::new();
    if !cold.is_empty() {
        let _ = writeln!(
            t,
            "cold first run (fctrace's first run in a fresh session / function_graph's runs before and after it, separately;\n \
             shown: the share of function_graph's calls the first run shows in order, over the functions function_graph\n \
             and fctrace's warm run both show; atomic: the functions it shows \"not followed: atomic\", in the first run / in\n \
             a second, warm run):"
        );
        for c in cold {
            let noise = c.noise.map_or(String::new(), |n| {
                format!(" (function_graph's two runs: {n:.2}%)")
            });
            let atomic = match (c.atomic, c.warm_atomic) {
                (Some(a), Some(w)) => format!(", atomic {a} / {w}"),
                _ => String::new(),
            };
            let _ = writeln!(
                t,
                "  {:<6} fctrace {:>5} calls, function_graph {:>5} calls, shown {:>6.2}%{}{}",
                c.name, c.fct, c.ftrace, c.agreement, noise, atomic
            );
        }
    }
    if let Some(last) = arm.last() {
        let _ = writeln!(
            t,
            "arming (all system calls of a shell and its children: ls -lR, cat of /proc and /sys files, ps, find, tmpfs...; {} s): {} functions armed",
            last.t, last.funcs
        );
        let top = last.funcs;
        for (lo, hi) in [(0, 100), (top.saturating_sub(top / 5).max(101), top)] {
            if let Some(c) = arm_costs(arm, lo, hi) {
                let per_update = match (c.updates, c.hooks_per_update) {
                    (Some(u), Some(h)) => format!(
                        "; {u} updates, {:.1} ms and {h:.1} entry hooks each",
                        c.upd_ms * (c.to - c.from) as f64 / u as f64
                    ),
                    _ => String::new(),
                };
                let _ = writeln!(
                    t,
                    "  {:>8.2} ms per function from {} to {} armed (ftrace filter updates {:.2} ms{per_update})",
                    c.ms, c.from, c.to, c.upd_ms
                );
            }
        }
    }
    t
}

/// One of the overhead goals fctrace is measured against, with this run's figure.
pub struct Goal {
    pub goal: &'static str,
    pub figure: String,
    /// `None`: this run did not measure it.
    pub met: Option<bool>,
}

/// The goals of the design (Documentation/fctrace/testing.rst, "Benchmarks") against this
/// run: other tasks' cost beside fctrace, the traced task's cost per call shown against
/// function_graph's, arming's cost per function late against early, the first run's share
/// of function_graph's calls, and no atomic leaf in a warm run.
pub fn goals(rows: &[Row], cold: &[Cold], arm: &[ArmSample]) -> Vec<Goal> {
    let row = |m: &str| rows.iter().find(|r| r.mode == m);
    let (fct, ftr) = (row("fctrace"), row("ftrace"));
    let mut g = Vec::new();
    let mut ratio_goal = |goal, of: fn(&Row) -> Ratio, max: Option<f64>| {
        let (figure, met) = match (fct, ftr) {
            (Some(f), Some(t)) => {
                let (v, b) = (of(f).mean, of(t).mean);
                let limit = max.unwrap_or(b);
                (format!("{v:.2} (function_graph {b:.2})"), Some(v <= limit))
            }
            (Some(f), None) => {
                let v = of(f).mean;
                (format!("{v:.2}"), max.map(|m| v <= m))
            }
            _ => ("-".into(), None),
        };
        g.push(Goal { goal, figure, met });
    };
    ratio_goal("other tasks, stat(): <= 1.05", |r| r.stat, Some(1.05));
    ratio_goal("other tasks, ping-pong: <= 1.3", |r| r.pingpong, Some(1.3));
    ratio_goal(
        "other tasks, same code: <= function_graph's",
        |r| r.other,
        None,
    );
    let per_call = match (
        fct.and_then(Row::added_per_call),
        ftr.and_then(Row::added_per_call),
    ) {
        (Some(f), Some(t)) if t > 0.0 => Goal {
            goal: "traced task, per call shown: <= 1.5 x function_graph's",
            figure: format!("{:.2} x ({f:.3} vs {t:.3})", f / t),
            met: Some(f <= 1.5 * t),
        },
        _ => Goal {
            goal: "traced task, per call shown: <= 1.5 x function_graph's",
            figure: "-".into(),
            met: None,
        },
    };
    g.push(per_call);
    let arming = arm.last().and_then(|last| {
        let top = last.funcs;
        let early = arm_costs(arm, 0, 100)?;
        let late = arm_costs(arm, top.saturating_sub(top / 5).max(101), top)?;
        (early.ms > 0.0).then(|| (late.ms / early.ms, late.to))
    });
    g.push(match arming {
        Some((x, n)) => Goal {
            goal: "arming, per function late: <= 2 x early",
            figure: format!("{x:.2} x (up to {n} functions)"),
            met: Some(x <= 2.0),
        },
        None => Goal {
            goal: "arming, per function late: <= 2 x early",
            figure: "-".into(),
            met: None,
        },
    });
    let full = cold.iter().filter(|c| c.agreement >= 97.0).count();
    g.push(Goal {
        goal: "first run: >= 97% of function_graph's calls",
        figure: format!("{full} of {} workloads", cold.len()),
        met: (!cold.is_empty()).then_some(full == cold.len()),
    });
    let warm: Vec<&Cold> = cold.iter().filter(|c| c.warm_atomic.is_some()).collect();
    let clean = warm.iter().filter(|c| c.warm_atomic == Some(0)).count();
    g.push(Goal {
        goal: "later runs: no atomic leaf",
        figure: format!("{clean} of {} warm runs", warm.len()),
        met: (!warm.is_empty()).then_some(clean == warm.len()),
    });
    g
}

pub fn goal_table(goals: &[Goal]) -> String {
    let mut t = String::from("goals:\n");
    for g in goals {
        let verdict = match g.met {
            Some(true) => "met",
            Some(false) => "NOT MET",
            None => "not measured",
        };
        let _ = writeln!(t, "  {:<56} {:<34} {verdict}", g.goal, g.figure);
    }
    t
}

/// Ratio statistics of `values` against the mean of `base`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Ratio {
    pub mean: f64,
    pub min: f64,
    pub max: f64,
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

pub fn ratio(values: &[f64], base: &[f64]) -> Option<Ratio> {
    let b = mean(base);
    if values.is_empty() || b <= 0.0 {
        return None;
    }
    let r: Vec<f64> = values.iter().map(|v| v / b).collect();
    Some(Ratio {
        mean: mean(&r),
        min: r.iter().cloned().fold(f64::INFINITY, f64::min),
        max: r.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
    })
}

pub struct Row {
    pub mode: String,
    pub reps: usize,
    /// Other task running the traced code.
    pub other: Ratio,
    /// Other tasks running other code.
    pub pingpong: Ratio,
    /// Other task making other system calls.
    pub stat: Ratio,
    pub traced: Ratio,
    /// Calls seen per traced read, and events lost (completeness run).
    pub complete: Option<(f64, u64)>,
    /// The other tasks' passes through fctrace's probes per operation (mean over the
    /// repetitions): same reads, ping-pong round trips, `stat()`s.
    pub untraced_hits: Option<[f64; 3]>,
}

impl Row {
    /// What the traced task pays per call its tracer shows: the traced read's added time
    /// (ratio - 1, in untraced reads) over the calls shown per read. The tracers show
    /// different calls (fctrace also those into code ftrace cannot trace), so this
    /// compares their cost per call.
    pub fn added_per_call(&self) -> Option<f64> {
        let (calls, _) = self.complete?;
        (calls > 0.0).then(|| (self.traced.mean - 1.0) / calls)
    }
}

/// One row per tracing mode, against the `none` runs.
pub fn summarize(samples: &[Sample], complete: &[Complete]) -> Result<Vec<Row>> {
    let of = |m: &str| {
        samples
            .iter()
            .filter(|s| s.mode == m)
            .cloned()
            .collect::<Vec<_>>()
    };
    let none = of("none");
    if none.is_empty() {
        bail!("no untraced (mode=none) runs in the benchmark output");
    }
    let col = |s: &[Sample], f: fn(&Sample) -> f64| s.iter().map(f).collect::<Vec<f64>>();
    let mut rows = Vec::new();
    for m in [
        "none",
        "fctrace",
        "fctrace-nosched",
        "fctrace-lean",
        "fctrace-args",
        "ftrace",
    ] {
        let s = of(m);
        if s.is_empty() {
            continue;
        }
        let r = |f: fn(&Sample) -> f64| ratio(&col(&s, f), &col(&none, f)).ok_or("empty");
        rows.push(Row {
            mode: m.to_string(),
            reps: s.len(),
            other: r(|x| x.other_ns)?,
            pingpong: r(|x| x.pingpong_ns)?,
            stat: r(|x| x.stat_ns)?,
            traced: r(|x| x.traced_ns)?,
            complete: complete
                .iter()
                .find(|c| c.mode == m && c.roots > 0)
                .map(|c| (c.calls as f64 / c.roots as f64, c.lost)),
            untraced_hits: mean_hits(&s),
        });
    }
    Ok(rows)
}

/// The mean of the samples' `untraced_hits`, if every sample has them.
fn mean_hits(s: &[Sample]) -> Option<[f64; 3]> {
    let h: Vec<[f64; 3]> = s.iter().map(|x| x.untraced_hits).collect::<Option<_>>()?;
    (!h.is_empty()).then(|| [0, 1, 2].map(|i| mean(&h.iter().map(|x| x[i]).collect::<Vec<_>>())))
}

pub fn table(rows: &[Row]) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "{:<15} {:>4}  {:>24}  {:>24}  {:>24}  {:>24}  {:>10}  {:>7}  {:>9}  {:>18}",
        "tracer",
        "reps",
        "other: same code",
        "other: pipe ping-pong",
        "other: stat()",
        "traced task",
        "calls/read",
        "lost",
        "per call",
        "other: probe hits"
    );
    let cell = |r: &Ratio| format!("{:.3} [{:.3}-{:.3}]", r.mean, r.min, r.max);
    for r in rows {
        let (calls, lost) = match r.complete {
            Some((c, l)) => (format!("{c:.1}"), l.to_string()),
            None => ("-".into(), "-".into()),
        };
        let per_call = r.added_per_call().map_or("-".into(), |p| format!("{p:.3}"));
        let hits = r
            .untraced_hits
            .map_or("-".into(), |[a, b, c]| format!("{a:.2}/{b:.2}/{c:.2}"));
        let _ = writeln!(
            t,
            "{:<15} {:>4}  {:>24}  {:>24}  {:>24}  {:>24}  {:>10}  {:>7}  {:>9}  {:>18}",
            r.mode,
            r.reps,
            cell(&r.other),
            cell(&r.pingpong),
            cell(&r.stat),
            cell(&r.traced),
            calls,
            lost,
            per_call,
            hits
        );
    }
    let _ = writeln!(
        t,
        "(times as multiples of the untraced run: mean [min-max] over the repetitions;"
    );
    let _ = writeln!(
        t,
        " calls/read and lost: a separate run of 300 traced reads; fctrace-nosched: the filter"
    );
    let _ = writeln!(
        t,
        " '!__schedule' hides the scheduler, which is then never armed; fctrace-lean: that and"
    );
    let _ = writeln!(
        t,
        " disarm_after 1; fctrace-args: fctrace with the args option (arguments and typed returns"
    );
    let _ = writeln!(
        t,
        " from BTF); per call: the traced task's added time per call shown, (traced task - 1) /"
    );
    let _ = writeln!(
        t,
        " calls/read, in untraced reads: fctrace also shows calls into code ftrace cannot trace;"
    );
    let _ = writeln!(
        t,
        " other: probe hits: fctrace's probes the other tasks passed per read, round trip and"
    );
    let _ = writeln!(
        t,
        " stat(), each a trap where the probe is a breakpoint: every one on arm64)"
    );
    t
}

pub fn json(rows: &[Row], cold: &[Cold], arm: &[ArmSample]) -> String {
    let ratio = |r: &Ratio| {
        format!(
            "{{\"mean\": {:.4}, \"min\": {:.4}, \"max\": {:.4}}}",
            r.mean, r.min, r.max
        )
    };
    let items: Vec<String> = rows
        .iter()
        .map(|r| {
            let (calls, lost) = match r.complete {
                Some((c, l)) => (format!("{c:.2}"), l.to_string()),
                None => ("null".into(), "null".into()),
            };
            format!(
                "    {{\"tracer\": \"{}\", \"reps\": {}, \"other_same_code_ratio\": {}, \"other_pingpong_ratio\": {}, \"other_stat_ratio\": {}, \"traced_task_ratio\": {}, \"calls_per_read\": {}, \"lost\": {}, \"traced_added_per_call\": {}, \"other_probe_hits_per_op\": {}}}",
                r.mode, r.reps, ratio(&r.other), ratio(&r.pingpong), ratio(&r.stat), ratio(&r.traced), calls, lost,
                r.added_per_call().map_or("null".into(), |p| format!("{p:.4}")),
                r.untraced_hits.map_or("null".into(), |[a, b, c]| format!(
                    "{{\"same\": {a:.3}, \"pingpong\": {b:.3}, \"stat\": {c:.3}}}"
                ))
            )
        })
        .collect();
    let cold: Vec<String> = cold
        .iter()
        .map(|c| {
            format!(
                "    {{\"workload\": \"{}\", \"fctrace_calls\": {}, \"function_graph_calls\": {}, \"agreement_pct\": {:.2}, \"function_graph_runs_pct\": {}, \"atomic_functions\": {}, \"warm_atomic_functions\": {}}}",
                c.name,
                c.fct,
                c.ftrace,
                c.agreement,
                c.noise.map_or("null".into(), |n| format!("{n:.2}")),
                c.atomic.map_or("null".into(), |n| n.to_string()),
                c.warm_atomic.map_or("null".into(), |n| n.to_string())
            )
        })
        .collect();
    let arm: Vec<String> = arm
        .iter()
        .map(|a| {
            format!(
                "    {{\"t_s\": {}, \"functions_armed\": {}, \"registration_us\": {}, \"ftrace_update_us\": {}, \"entry_hooks\": {}, \"ftrace_updates\": {}}}",
                a.t, a.funcs, a.reg_us, a.upd_us, a.hooks,
                a.upds.map_or("null".into(), |u| u.to_string())
            )
        })
        .collect();
    format!(
        "{{\n  \"workload\": \"traced: pread of /proc/version in a loop, traced from vfs_read; other tasks: the same preads, then a pipe ping-pong, then stat() calls\",\n  \"results\": [\n{}\n  ],\n  \"cold_first_run\": [\n{}\n  ],\n  \"arming\": [\n{}\n  ]\n}}\n",
        items.join(",\n"),
        cold.join(",\n"),
        arm.join(",\n")
    )
}

/// `cargo xtask bench`.
#[derive(clap::Args)]
pub struct BenchArgs {
    /// Repetitions of each measurement
    #[arg(long, value_name = "N", default_value_t = 3)]
    pub reps: u32,
    #[command(flatten)]
    pub vm: VmOpts,
}

pub fn cmd(args: BenchArgs) -> Result<i32> {
    let BenchArgs { reps, vm: opts } = args;
    // The guest script reads REPS from its first line; pass it through a wrapper script.
    let dir = tempfile::tempdir()?;
    let wrapper = dir.path().join("bench-run.sh");
    std::fs::write(
        &wrapper,
        format!("#!/bin/sh\nREPS={reps} exec sh /scripts/bench.sh\n"),
    )?;
    let (kdir, initrd) = vm::prepare(true, Some(&wrapper))?;
    let run = vm::run_script(&kdir, &initrd, &opts)?;
    let status = vm::finish(&kdir, &run);
    if status != 0 {
        bail!("benchmark guest run failed (status {status})");
    }
    let samples = parse(&run.console);
    let rows = summarize(&samples, &parse_complete(&run.console))?;
    let t = table(&rows);
    println!("\n==================== fctrace overhead benchmark (ratios: traced / untraced time)");
    print!("{t}");
    let (cold, arm) = (parse_cold(&run.console), parse_arm(&run.console));
    print!("{}", cold_table(&cold, &arm));
    print!("{}", goal_table(&goals(&rows, &cold, &arm)));
    let out = repo_root().join("target/fctrace/bench.json");
    std::fs::create_dir_all(out.parent().ok_or("no parent")?)?;
    std::fs::write(&out, json(&rows, &cold, &arm))?;
    note(format!("wrote {}", out.display()));
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUT: &str = "\
[    1.0] noise
BENCH mode=none rep=1 other_ns=1000 pingpong_ns=500 stat_ns=100 traced_ns=2000 ops=100
BENCH mode=none rep=2 other_ns=1000 pingpong_ns=500 stat_ns=100 traced_ns=2000 ops=100
BENCH mode=fctrace rep=1 other_ns=1010 pingpong_ns=500 stat_ns=100 traced_ns=8000 ops=10 untraced_hits=2.00/4.50/0.00
BENCH mode=fctrace rep=2 other_ns=1030 pingpong_ns=510 stat_ns=101 traced_ns=6000 ops=20 untraced_hits=3.00/5.50/0.10
BENCHC mode=fctrace calls=3000 roots=100 lost=0
BENCH mode=ftrace rep=1 other_ns=1500 pingpong_ns=750 stat_ns=200 traced_ns=4000 ops=10
BENCHC mode=ftrace calls=1300 roots=100 lost=2
BENCH done
";

    #[test]
    fn parses_cold_and_arming() {
        let out = "\
BENCHCOLD name=open fct=190 ftrace=166 agreement=98.50 ftrace_ftrace=99.10 atomic=3 warm_atomic=0
BENCHARM t=0 funcs=3 reg_us=0 regs=1 hooks=5 probes=2
BENCHARM t=2 funcs=120 reg_us=240000 regs=9 hooks=50 probes=20
BENCHARM t=4 funcs=1000 reg_us=1000000 regs=90 hooks=500 probes=200
BENCHARM t=6 funcs=1200 reg_us=1600000 regs=99 hooks=600 probes=220 upd_us=400000 upds=50
";
        let c = parse_cold(out);
        assert_eq!(c.len(), 1);
        assert_eq!((c[0].fct, c[0].ftrace), (190, 166));
        assert!((c[0].agreement - 98.5).abs() < 1e-9);
        assert_eq!(c[0].noise, Some(99.1));
        assert_eq!((c[0].atomic, c[0].warm_atomic), (Some(3), Some(0)));
        let a = parse_arm(out);
        assert_eq!(a.len(), 4);
        let k = arm_costs(&a, 0, 100).unwrap();
        assert_eq!((k.from, k.to), (0, 120));
        assert!((k.ms - 2.0).abs() < 1e-9);
        // The second sample does not count its updates.
        assert_eq!(k.updates, None);
        let k = arm_costs(&a, 1100, 1200).unwrap();
        assert_eq!((k.from, k.to), (1000, 1200));
        assert!((k.ms - 3.0).abs() < 1e-9);
        assert!(cold_table(&c, &a).contains("shown  98.50%"));
        assert!(cold_table(&c, &a).contains("atomic 3 / 0"));
        // 400 ms of updates over the last 200 functions: 2 ms each.
        assert!((k.upd_ms - 2.0).abs() < 1e-9);
        // The sample at 1000 functions does not count updates; from the start to the last
        // sample, which does: 600 hooks in 50 updates.
        assert_eq!(k.updates, None);
        let d = arm_costs(&[a[3]], 0, 1200).unwrap();
        assert_eq!(d.updates, Some(50));
        assert!((d.hooks_per_update.unwrap() - 12.0).abs() < 1e-9);
        // The table's last fifth: from 120 to 1200 functions, 400 ms of updates.
        assert!(cold_table(&c, &a).contains("(ftrace filter updates 0.37 ms)"));
    }

    #[test]
    fn parses_and_summarizes() {
        let s = parse(OUT);
        assert_eq!(s.len(), 5);
        let c = parse_complete(OUT);
        assert_eq!(c.len(), 2);
        let rows = summarize(&s, &c).unwrap();
        assert_eq!(rows.len(), 3);
        let f = &rows[1];
        assert_eq!(f.mode, "fctrace");
        assert!((f.other.mean - 1.02).abs() < 1e-9);
        assert!((f.other.min - 1.01).abs() < 1e-9 && (f.other.max - 1.03).abs() < 1e-9);
        assert!((f.pingpong.mean - 1.01).abs() < 1e-9);
        assert!((f.traced.mean - 3.5).abs() < 1e-9);
        assert_eq!(f.complete, Some((30.0, 0)));
        assert!((rows[2].pingpong.mean - 1.5).abs() < 1e-9);
        assert!((rows[2].stat.mean - 2.0).abs() < 1e-9 && (f.stat.max - 1.01).abs() < 1e-9);
        assert_eq!(rows[2].complete, Some((13.0, 2)));
        assert_eq!(rows[0].complete, None);
        let j = json(&rows, &[], &[]);
        assert!(j.contains("\"tracer\": \"ftrace\""));
        assert!(j.contains("\"other_pingpong_ratio\": {\"mean\": 1.5000"));
        assert!(j.contains("\"calls_per_read\": 13.00, \"lost\": 2"));
        // fctrace: traced 3.5 over 30 calls per read.
        assert!((f.added_per_call().unwrap() - 2.5 / 30.0).abs() < 1e-9);
        assert!(j.contains("\"traced_added_per_call\": 0.0833"));
        // The other tasks' probe hits: the mean of the two runs; none for ftrace.
        assert_eq!(f.untraced_hits, Some([2.5, 5.0, 0.05]));
        assert_eq!(rows[2].untraced_hits, None);
        assert!(j.contains("\"other_probe_hits_per_op\": {\"same\": 2.500, \"pingpong\": 5.000"));
        assert!(table(&rows).contains("2.50/5.00/0.05"));
        assert_eq!(per_op("1/2"), None);
        assert_eq!(per_op("1/2/x"), None);
        assert_eq!(rows[0].added_per_call(), None);
        let t = table(&rows);
        assert!(t.contains("fctrace") && t.contains("30.0"));
        // Goals: stat 1.005 <= 1.05, ping-pong 1.005 <= 1.3, same code 1.02 <= 1.5 (met);
        // per call 0.0833 against function_graph's 3.0 / 13 = 0.2308 (met); no cold run,
        // no arming samples: not measured.
        let g = goals(&rows, &[], &[]);
        let met: Vec<Option<bool>> = g.iter().map(|g| g.met).collect();
        assert_eq!(
            met,
            [
                Some(true),
                Some(true),
                Some(true),
                Some(true),
                None,
                None,
                None
            ]
        );
        let slow = [Row {
            stat: Ratio {
                mean: 1.2,
                min: 1.2,
                max: 1.2,
            },
            ..summarize(&s, &c).unwrap().remove(1)
        }];
        assert_eq!(goals(&slow, &[], &[])[0].met, Some(false));
        assert!(goal_table(&g).contains("not measured"));
    }

    #[test]
    fn no_baseline_is_an_error() {
        assert!(summarize(
            &parse("BENCH mode=fctrace rep=1 other_ns=1 pingpong_ns=1 stat_ns=1 traced_ns=1"),
            &[]
        )
        .is_err());
    }
}
