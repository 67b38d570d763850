//! `cargo xtask bench [--reps N] [--timeout SECS] [--smp N] [--mem MB]`: the overhead
//! benchmark. Boots the guest with `scripts/guest/bench.sh`, which runs a busy process
//! traced from `vfs_read` by fctrace, by ftrace's function_graph (set_ftrace_pid), and by
//! nothing, while an untraced process does the same small reads. Prints, per tracer, the
//! ratios traced/untraced of the other task's time and of the traced process's own time
//! (mean, min, max over the repetitions), the events recorded and lost, and writes them as
//! JSON to `target/fctrace/bench.json`. The guest is emulated: ratios are what count.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use crate::util::{bail, note, repo_root, Args, Result};
use crate::vm::{self, VmOpts};

#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub mode: String,
    pub other_ns: f64,
    pub traced_ns: f64,
    pub events: u64,
    pub lost: u64,
}

/// Parses `BENCH mode=.. rep=.. other_ns=.. traced_ns=.. events=.. lost=..` lines.
pub fn parse(console: &str) -> Vec<Sample> {
    let mut out = Vec::new();
    for line in console.lines() {
        let Some(rest) = line.trim_start().strip_prefix("BENCH ") else { continue };
        let kv: BTreeMap<&str, &str> = rest.split_whitespace().filter_map(|t| t.split_once('=')).collect();
        let num = |k: &str| kv.get(k).and_then(|v| v.parse::<f64>().ok());
        let (Some(mode), Some(o), Some(t)) = (kv.get("mode"), num("other_ns"), num("traced_ns")) else {
            continue;
        };
        out.push(Sample {
            mode: mode.to_string(),
            other_ns: o,
            traced_ns: t,
            events: num("events").unwrap_or(0.0) as u64,
            lost: num("lost").unwrap_or(0.0) as u64,
        });
    }
    out
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
    pub other: Ratio,
    pub traced: Ratio,
    pub events: u64,
    pub lost: u64,
}

/// One row per tracing mode, against the `none` runs.
pub fn summarize(samples: &[Sample]) -> Result<Vec<Row>> {
    let of = |m: &str| samples.iter().filter(|s| s.mode == m).cloned().collect::<Vec<_>>();
    let none = of("none");
    if none.is_empty() {
        bail!("no untraced (mode=none) runs in the benchmark output");
    }
    let base_o: Vec<f64> = none.iter().map(|s| s.other_ns).collect();
    let base_t: Vec<f64> = none.iter().map(|s| s.traced_ns).collect();
    let mut rows = Vec::new();
    for m in ["none", "fctrace", "ftrace"] {
        let s = of(m);
        if s.is_empty() {
            continue;
        }
        let o: Vec<f64> = s.iter().map(|x| x.other_ns).collect();
        let t: Vec<f64> = s.iter().map(|x| x.traced_ns).collect();
        rows.push(Row {
            mode: m.to_string(),
            reps: s.len(),
            other: ratio(&o, &base_o).ok_or("empty")?,
            traced: ratio(&t, &base_t).ok_or("empty")?,
            events: s.iter().map(|x| x.events).sum::<u64>() / s.len() as u64,
            lost: s.iter().map(|x| x.lost).sum::<u64>() / s.len() as u64,
        });
    }
    Ok(rows)
}

pub fn table(rows: &[Row]) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "{:<8} {:>4}  {:>24}  {:>24}  {:>9}  {:>7}",
        "tracer", "reps", "other tasks (x untraced)", "traced task (x untraced)", "events", "lost"
    );
    for r in rows {
        let _ = writeln!(
            t,
            "{:<8} {:>4}  {:>8.3} [{:.3}-{:.3}]  {:>8.3} [{:.3}-{:.3}]  {:>9}  {:>7}",
            r.mode, r.reps, r.other.mean, r.other.min, r.other.max, r.traced.mean, r.traced.min, r.traced.max, r.events, r.lost
        );
    }
    t
}

pub fn json(rows: &[Row]) -> String {
    let ratio = |r: &Ratio| format!("{{\"mean\": {:.4}, \"min\": {:.4}, \"max\": {:.4}}}", r.mean, r.min, r.max);
    let items: Vec<String> = rows
        .iter()
        .map(|r| {
            format!(
                "    {{\"tracer\": \"{}\", \"reps\": {}, \"other_tasks_ratio\": {}, \"traced_task_ratio\": {}, \"events\": {}, \"lost\": {}}}",
                r.mode, r.reps, ratio(&r.other), ratio(&r.traced), r.events, r.lost
            )
        })
        .collect();
    format!("{{\n  \"workload\": \"pread of /proc/version, traced from vfs_read\",\n  \"results\": [\n{}\n  ]\n}}\n", items.join(",\n"))
}

pub fn cmd(mut args: Args) -> Result<i32> {
    let reps = args.opt("--reps")?.unwrap_or_else(|| "3".into());
    let opts = VmOpts::from_args(&mut args)?;
    args.finish()?;
    let reps: u32 = reps.parse().map_err(|_| format!("--reps {reps}: not a number"))?;
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
    let rows = summarize(&samples)?;
    let t = table(&rows);
    println!("\n==================== fctrace overhead benchmark (ratios: traced / untraced time)");
    print!("{t}");
    let out = repo_root().join("target/fctrace/bench.json");
    std::fs::create_dir_all(out.parent().ok_or("no parent")?)?;
    std::fs::write(&out, json(&rows))?;
    note(format!("wrote {}", out.display()));
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const OUT: &str = "\
[    1.0] noise
BENCH mode=none rep=1 other_ns=1000 traced_ns=2000 events=0 lost=0
BENCH mode=none rep=2 other_ns=1000 traced_ns=2000 events=0 lost=0
BENCH mode=fctrace rep=1 other_ns=1010 traced_ns=8000 events=300 lost=0
BENCH mode=fctrace rep=2 other_ns=1030 traced_ns=6000 events=300 lost=0
BENCH mode=ftrace rep=1 other_ns=1500 traced_ns=4000 events=280 lost=2
BENCH done
";

    #[test]
    fn parses_and_summarizes() {
        let s = parse(OUT);
        assert_eq!(s.len(), 5);
        let rows = summarize(&s).unwrap();
        assert_eq!(rows.len(), 3);
        let f = &rows[1];
        assert_eq!(f.mode, "fctrace");
        assert!((f.other.mean - 1.02).abs() < 1e-9);
        assert!((f.other.min - 1.01).abs() < 1e-9 && (f.other.max - 1.03).abs() < 1e-9);
        assert!((f.traced.mean - 3.5).abs() < 1e-9);
        assert_eq!(rows[2].lost, 2);
        let j = json(&rows);
        assert!(j.contains("\"tracer\": \"ftrace\""));
        assert!(table(&rows).contains("fctrace"));
    }

    #[test]
    fn no_baseline_is_an_error() {
        assert!(summarize(&parse("BENCH mode=fctrace rep=1 other_ns=1 traced_ns=1")).is_err());
    }
}
