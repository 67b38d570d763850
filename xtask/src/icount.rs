// SPDX-License-Identifier: GPL-2.0

//! `cargo xtask icount`: what a traced read costs, in guest instructions, counted
//! exactly by a QEMU plugin (`scripts/icount/icount.c`) instead of timed: the figures do
//! not move with the host's load, and say which functions the instructions are spent in.
//!
//! The guest (`scripts/guest/icount.sh`) runs windows of preads of `/proc/version`: with
//! no tracer, traced by fctrace, untraced while fctrace traces another process, and the
//! same two with function_graph. The plugin counts per instruction address while a
//! window is open (the reader calls `sync()` before and after its loop: the plugin
//! toggles on `ksys_sync()`); the host names the addresses from `System.map` and the
//! module's symbols, and prints instructions per read, the ratios to no tracer, the cost
//! per call shown, and where a traced read's instructions go.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::bench::fields;
use crate::util::{bail, note, out_dir, repo_root, Result};
use crate::vm::{self, VmOpts};

/// `cargo xtask icount`.
#[derive(clap::Args)]
pub struct IcountArgs {
    /// Reads per window
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub reads: u32,
    /// Functions listed for the traced windows
    #[arg(long, value_name = "N", default_value_t = 25)]
    pub top: usize,
    #[command(flatten)]
    pub vm: VmOpts,
}

/// A window of the guest run (`ICOUNT window=K label=L ops=N`).
#[derive(Debug, Clone, PartialEq)]
pub struct Window {
    pub index: usize,
    pub label: String,
    pub ops: u64,
}

pub fn parse_windows(console: &str) -> Vec<Window> {
    console
        .lines()
        .filter_map(|l| fields(l, "ICOUNT"))
        .filter_map(|m| {
            Some(Window {
                index: m.get("window")?.parse().ok()?,
                label: m.get("label")?.clone(),
                ops: m.get("ops")?.parse().ok()?,
            })
        })
        .collect()
}

/// The functions fctrace's entry hooks sit on (`ICOUNTHOOK name`).
pub fn parse_hooks(console: &str) -> std::collections::HashSet<String> {
    console
        .lines()
        .filter_map(|l| l.trim().strip_prefix("ICOUNTHOOK "))
        .map(|n| n.trim().to_string())
        .collect()
}

/// Of `funcs` (a window's functions), those in `hooks`, entered at least once in
/// `ops` operations: how many entries per operation in all, and the most entered.
pub fn hooked_entries(
    funcs: &[FuncCost],
    hooks: &std::collections::HashSet<String>,
    ops: u64,
) -> (f64, Vec<(String, f64)>) {
    let mut v: Vec<(String, f64)> = funcs
        .iter()
        .filter(|f| f.entries > 0 && hooks.contains(&f.name))
        .map(|f| (f.name.clone(), f.entries as f64 / ops.max(1) as f64))
        .collect();
    v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    (v.iter().map(|x| x.1).sum(), v)
}

/// How kprobes placed a probe (`/sys/kernel/debug/kprobes/list`'s flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ProbeKind {
    /// A breakpoint: every task that runs the address traps.
    Breakpoint,
    /// Optimized into a jump to a detour.
    Optimized,
    /// On an ftrace site, through kprobes' ftrace handler.
    Ftrace,
}

/// The kprobes registered when fctrace's windows ended (`ICOUNTKP` and a line of
/// kprobes' debugfs list: `addr  k  sym+0xoff  [FLAGS]`), disabled and gone ones left
/// out, one per address.
pub fn parse_kprobes(console: &str) -> Vec<(u64, String, ProbeKind)> {
    let mut v: Vec<(u64, String, ProbeKind)> = console
        .lines()
        .filter_map(|l| l.trim().strip_prefix("ICOUNTKP "))
        .filter(|l| !l.contains("[GONE]") && !l.contains("[DISABLED]"))
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let addr = u64::from_str_radix(f.next()?, 16).ok()?;
            let _type = f.next()?;
            let at = f.next()?.to_string();
            let kind = if l.contains("[OPTIMIZED]") {
                ProbeKind::Optimized
            } else if l.contains("[FTRACE]") {
                ProbeKind::Ftrace
            } else {
                ProbeKind::Breakpoint
            };
            Some((addr, at, kind))
        })
        .collect();
    v.sort();
    v.dedup_by_key(|p| p.0);
    v
}

/// Of `probes`, those a window ran (the int3 or the jump at the probe's address is an
/// instruction the plugin counts): per kind, hits per operation in all, and the probes
/// hit, most hit first.
pub fn probe_hits(
    counts: &[(u64, u64)],
    probes: &[(u64, String, ProbeKind)],
    ops: u64,
) -> Vec<(ProbeKind, f64, Vec<(String, f64)>)> {
    let at: HashMap<u64, u64> = counts.iter().copied().collect();
    let mut by: BTreeMap<ProbeKind, Vec<(String, f64)>> = BTreeMap::new();
    for (a, name, kind) in probes {
        if let Some(&c) = at.get(a) {
            by.entry(*kind)
                .or_default()
                .push((name.clone(), c as f64 / ops.max(1) as f64));
        }
    }
    by.into_iter()
        .map(|(k, mut v)| {
            v.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            (k, v.iter().map(|x| x.1).sum(), v)
        })
        .collect()
}

/// Calls shown per read, per tracer (`ICOUNTC label=L calls=X`).
pub fn parse_calls(console: &str) -> BTreeMap<String, f64> {
    console
        .lines()
        .filter_map(|l| fields(l, "ICOUNTC"))
        .filter_map(|m| Some((m.get("label")?.clone(), m.get("calls")?.parse().ok()?)))
        .collect()
}

/// Text symbols: `System.map` lines, and the module's from the guest's `/proc/kallsyms`
/// (`ICOUNTSYM addr t name [fctrace]`, named `fctrace:NAME`).
pub fn symbols(system_map: &str, console: &str) -> Vec<(u64, String)> {
    let mut syms = Vec::new();
    for l in system_map.lines() {
        let mut f = l.split_whitespace();
        if let (Some(a), Some(t), Some(n)) = (f.next(), f.next(), f.next()) {
            if matches!(t, "t" | "T" | "w" | "W") {
                if let Ok(a) = u64::from_str_radix(a, 16) {
                    syms.push((a, n.to_string()));
                }
            }
        }
    }
    for l in console.lines() {
        let Some(rest) = l.trim_start().strip_prefix("ICOUNTSYM ") else {
            continue;
        };
        let mut f = rest.split_whitespace();
        if let (Some(a), Some(t), Some(n)) = (f.next(), f.next(), f.next()) {
            if matches!(t, "t" | "T") {
                if let Ok(a) = u64::from_str_radix(a, 16) {
                    syms.push((a, format!("fctrace:{n}")));
                }
            }
        }
    }
    syms.sort();
    syms
}

/// The function `addr` is in: `<user>`, a symbol, or `<no symbol>` (ftrace's and kprobes'
/// trampolines and detours: executable memory past the module's text).
pub fn name_of(syms: &[(u64, String)], addr: u64) -> String {
    if addr < 0xffff_8000_0000_0000 {
        return "<user>".into();
    }
    let i = syms.partition_point(|(a, _)| *a <= addr);
    match i.checked_sub(1).and_then(|i| syms.get(i)) {
        // A symbol more than 1 MiB below: not in it.
        Some((a, n)) if addr - a < 1 << 20 && n != "fctrace:cleanup_module" => n.clone(),
        _ => "<no symbol: trampolines, detours>".into(),
    }
}

/// The plugin's output: per window, instruction counts per address.
pub fn parse_counts(out: &str) -> Vec<Vec<(u64, u64)>> {
    let mut w: Vec<Vec<(u64, u64)>> = Vec::new();
    for l in out.lines() {
        if l.starts_with("# window") {
            w.push(Vec::new());
            continue;
        }
        let mut f = l.split_whitespace();
        if let (Some(a), Some(c), Some(cur)) = (f.next(), f.next(), w.last_mut()) {
            if let (Ok(a), Ok(c)) = (u64::from_str_radix(a, 16), c.parse()) {
                cur.push((a, c));
            }
        }
    }
    w
}

/// One function's share of a window: instructions, and how often its first instruction
/// ran (its calls, where the address is its symbol).
#[derive(Debug, Clone, PartialEq)]
pub struct FuncCost {
    pub name: String,
    pub instructions: u64,
    pub entries: u64,
}

pub fn by_function(counts: &[(u64, u64)], syms: &[(u64, String)]) -> Vec<FuncCost> {
    let starts: std::collections::HashSet<u64> = syms.iter().map(|(a, _)| *a).collect();
    let mut m: HashMap<String, (u64, u64)> = HashMap::new();
    for &(a, c) in counts {
        let e = m.entry(name_of(syms, a)).or_default();
        e.0 += c;
        if starts.contains(&a) {
            e.1 += c;
        }
    }
    let mut v: Vec<FuncCost> = m
        .into_iter()
        .map(|(name, (instructions, entries))| FuncCost {
            name,
            instructions,
            entries,
        })
        .collect();
    v.sort_by(|a, b| {
        b.instructions
            .cmp(&a.instructions)
            .then(a.name.cmp(&b.name))
    });
    v
}

fn build_plugin() -> Result<PathBuf> {
    let src = repo_root().join("scripts/icount/icount.c");
    let so = out_dir().join("icount.so");
    std::fs::create_dir_all(out_dir())?;
    let fresh =
        (|| Some(so.metadata().ok()?.modified().ok()? > src.metadata().ok()?.modified().ok()?))();
    if fresh != Some(true) {
        duct::cmd!("cc", "-O2", "-Wall", "-shared", "-fPIC", "-o", &so, &src)
            .before_spawn(|c| {
                note(format!("$ {c:?}"));
                Ok(())
            })
            .run()
            .map_err(|e| format!("building the QEMU plugin: {e}"))?;
    }
    Ok(so)
}

fn symbol(map: &str, name: &str) -> Option<u64> {
    map.lines().find_map(|l| {
        let mut f = l.split_whitespace();
        let (a, _, n) = (f.next()?, f.next()?, f.next()?);
        (n == name)
            .then(|| u64::from_str_radix(a, 16).ok())
            .flatten()
    })
}

/// The report: per window, instructions per read and the ratio to no tracer, with the
/// cost per call shown for the traced windows; then where a traced read's instructions
/// go.
pub fn report(
    windows: &[Window],
    totals: &[u64],
    calls: &BTreeMap<String, f64>,
    top: &[(String, Vec<FuncCost>, u64)],
    ntop: usize,
) -> String {
    let mut t = String::new();
    let per = |w: &Window| totals.get(w.index).map(|&n| n as f64 / w.ops.max(1) as f64);
    // A window's base: the untraced window of the same operation (`-stat` windows:
    // `none-stat`).
    let base_of = |w: &Window| {
        let none = if w.label.ends_with("-stat") {
            "none-stat"
        } else {
            "none"
        };
        windows.iter().find(|b| b.label == none).and_then(per)
    };
    let _ = writeln!(
        t,
        "{:<20} {:>12} {:>8} {:>11} {:>15}",
        "window", "instr/op", "ratio", "calls/read", "instr/call shown"
    );
    for w in windows {
        let Some(p) = per(w) else { continue };
        let base = base_of(w);
        let ratio = base.map_or(String::new(), |b| format!("{:.2}", p / b));
        let tracer = w.label.split('-').next().unwrap_or("");
        let c = calls.get(tracer).filter(|_| w.label.ends_with("-traced"));
        let (cs, pc) = match (c, base) {
            (Some(&c), Some(b)) if c > 0.0 => (format!("{c:.1}"), format!("{:.0}", (p - b) / c)),
            _ => (String::new(), String::new()),
        };
        let _ = writeln!(
            t,
            "{:<20} {:>12.0} {:>8} {:>11} {:>15}",
            w.label, p, ratio, cs, pc
        );
    }
    for (label, funcs, ops) in top {
        let total: u64 = funcs.iter().map(|f| f.instructions).sum();
        let op = if label.ends_with("-stat") {
            "stat()"
        } else {
            "read"
        };
        let _ = writeln!(t, "\n{label}: where a {op}'s instructions go (top {ntop})");
        for f in funcs.iter().take(ntop) {
            let per_read = f.instructions as f64 / (*ops).max(1) as f64;
            let entries = f.entries as f64 / (*ops).max(1) as f64;
            let per_call = if f.entries > 0 {
                format!("{:>6.0}/call", f.instructions as f64 / f.entries as f64)
            } else {
                String::new()
            };
            let _ = writeln!(
                t,
                "  {:>9.0} {:>5.1}% {:>6.1} calls {:>11}  {}",
                per_read,
                100.0 * f.instructions as f64 / total.max(1) as f64,
                entries,
                per_call,
                f.name
            );
        }
    }
    t
}

fn json(windows: &[Window], totals: &[u64], calls: &BTreeMap<String, f64>) -> String {
    let rows: Vec<String> = windows
        .iter()
        .filter_map(|w| {
            let n = totals.get(w.index)?;
            Some(format!(
                "    {{\"window\": \"{}\", \"reads\": {}, \"instructions\": {}, \"per_read\": {:.1}}}",
                w.label,
                w.ops,
                n,
                *n as f64 / w.ops.max(1) as f64
            ))
        })
        .collect();
    let calls: Vec<String> = calls
        .iter()
        .map(|(k, v)| format!("    \"{k}\": {v:.2}"))
        .collect();
    format!(
        "{{\n  \"workload\": \"pread of /proc/version, traced from vfs_read (the -stat windows: another task's stat() of a tmpfs file, per call); guest instructions counted by a QEMU plugin\",\n  \"windows\": [\n{}\n  ],\n  \"calls_per_read\": {{\n{}\n  }}\n}}\n",
        rows.join(",\n"),
        calls.join(",\n")
    )
}

pub fn cmd(args: IcountArgs) -> Result<i32> {
    let IcountArgs {
        reads,
        top,
        vm: opts,
    } = args;
    let plugin = build_plugin()?;
    let dir = tempfile::tempdir()?;
    let wrapper = dir.path().join("icount-run.sh");
    std::fs::write(
        &wrapper,
        format!("#!/bin/sh\nN={reads} exec sh /scripts/icount.sh\n"),
    )?;
    let (kdir, initrd) = vm::prepare(true, Some(&wrapper))?;
    let map = std::fs::read_to_string(kdir.join("System.map"))?;
    let Some(toggle) = symbol(&map, "ksys_sync") else {
        bail!("no ksys_sync in {}", kdir.join("System.map").display());
    };
    let out = out_dir().join("icount.out");
    let _ = std::fs::remove_file(&out);
    let mut qemu_args = format!(
        "-plugin {},toggle={toggle:x},out={}",
        plugin.display(),
        out.display()
    );
    if let Ok(extra) = std::env::var("FCTRACE_QEMU_ARGS") {
        qemu_args = format!("{extra} {qemu_args}");
    }
    // vm.rs passes FCTRACE_QEMU_ARGS to QEMU; xtask runs one guest at a time here.
    std::env::set_var("FCTRACE_QEMU_ARGS", qemu_args);
    let run = vm::run_script(&kdir, &initrd, &opts)?;
    let status = vm::finish(&kdir, &run);
    if status != 0 {
        bail!("icount guest run failed (status {status})");
    }
    let windows = parse_windows(&run.console);
    let counts = parse_counts(&read(&out)?);
    if windows.is_empty() || counts.len() < windows.len() {
        bail!(
            "{} windows on the console, {} counted by the plugin",
            windows.len(),
            counts.len()
        );
    }
    let syms = symbols(&map, &run.console);
    let totals: Vec<u64> = counts
        .iter()
        .map(|w| w.iter().map(|(_, c)| c).sum())
        .collect();
    let calls = parse_calls(&run.console);
    let tops: Vec<(String, Vec<FuncCost>, u64)> = windows
        .iter()
        .filter(|w| !w.label.starts_with("none"))
        .filter_map(|w| {
            Some((
                w.label.clone(),
                by_function(counts.get(w.index)?, &syms),
                w.ops,
            ))
        })
        .collect();
    println!(
        "\n==================== guest instructions per read of /proc/version (per stat() in the -stat windows; QEMU plugin, exact)"
    );
    print!("{}", report(&windows, &totals, &calls, &tops, top));
    // What other tasks pay fctrace for: its entry hooks on the functions they enter.
    let hooks = parse_hooks(&run.console);
    println!("\nfctrace's entry hooks: {} functions", hooks.len());
    for (label, funcs, ops) in tops.iter().filter(|t| t.0.starts_with("fctrace-other")) {
        let (n, v) = hooked_entries(funcs, &hooks, *ops);
        let list: Vec<String> = v
            .iter()
            .take(top)
            .map(|(f, e)| format!("{f} {e:.1}"))
            .collect();
        println!("{label}: {n:.1} hooked entries per op: {}", list.join(", "));
    }
    // And the kprobes they ran into: breakpoints trap, optimized probes jump to a detour.
    let probes = parse_kprobes(&run.console);
    println!(
        "\nkprobes registered: {} ({} breakpoints, {} optimized, {} on ftrace sites)",
        probes.len(),
        probes
            .iter()
            .filter(|p| p.2 == ProbeKind::Breakpoint)
            .count(),
        probes
            .iter()
            .filter(|p| p.2 == ProbeKind::Optimized)
            .count(),
        probes.iter().filter(|p| p.2 == ProbeKind::Ftrace).count()
    );
    for w in windows.iter().filter(|w| w.label.starts_with("fctrace-")) {
        let Some(c) = counts.get(w.index) else {
            continue;
        };
        for (kind, n, v) in probe_hits(c, &probes, w.ops) {
            let list: Vec<String> = v
                .iter()
                .take(top)
                .map(|(f, e)| format!("{f} {e:.2}"))
                .collect();
            println!(
                "{}: {n:.2} {} per op: {}",
                w.label,
                match kind {
                    ProbeKind::Breakpoint => "breakpoint hits",
                    ProbeKind::Optimized => "optimized probe entries",
                    ProbeKind::Ftrace => "ftrace-site kprobe entries",
                },
                list.join(", ")
            );
        }
    }
    let j = repo_root().join("target/fctrace/icount.json");
    std::fs::write(&j, json(&windows, &totals, &calls))?;
    note(format!("wrote {}", j.display()));
    Ok(0)
}

fn read(p: &Path) -> Result<String> {
    std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_calls_and_symbols() {
        let console = "\
[    1.0] noise
ICOUNT window=0 label=none ops=1000
ICOUNT window=1 label=fctrace-traced ops=1000
ICOUNTC label=fctrace calls=37
ICOUNTSYM ffffffffa0001000 t on_entry\t[fctrace]
ICOUNTSYM ffffffffa0002000 t cleanup_module\t[fctrace]
";
        let w = parse_windows(console);
        assert_eq!(w.len(), 2);
        assert_eq!(
            (w[1].index, w[1].label.as_str(), w[1].ops),
            (1, "fctrace-traced", 1000)
        );
        assert_eq!(parse_calls(console).get("fctrace"), Some(&37.0));
        let map =
            "ffffffff81000000 T _stext\nffffffff81000100 t vfs_read\nffffffff81000200 D data\n";
        let syms = symbols(map, console);
        assert_eq!(name_of(&syms, 0xffff_ffff_8100_0104), "vfs_read");
        assert_eq!(name_of(&syms, 0xffff_ffff_a000_1010), "fctrace:on_entry");
        assert_eq!(name_of(&syms, 0x4000), "<user>");
        assert!(name_of(&syms, 0xffff_ffff_a000_5000).starts_with("<no symbol"));
        assert_eq!(symbol(map, "vfs_read"), Some(0xffff_ffff_8100_0100));
    }

    #[test]
    fn counts_per_window_and_function() {
        let out = "# window 0\nffffffff81000100 10\nffffffff81000104 10\n# window 1\nffffffff81000100 3\n";
        let c = parse_counts(out);
        assert_eq!(c.len(), 2);
        let syms = vec![(0xffff_ffff_8100_0100, "vfs_read".to_string())];
        let f = by_function(&c[0], &syms);
        assert_eq!(
            f[0],
            FuncCost {
                name: "vfs_read".into(),
                instructions: 20,
                entries: 10
            }
        );
        let windows = vec![
            Window {
                index: 0,
                label: "none".into(),
                ops: 10,
            },
            Window {
                index: 1,
                label: "fctrace-traced".into(),
                ops: 1,
            },
        ];
        let mut calls = BTreeMap::new();
        calls.insert("fctrace".to_string(), 2.0);
        let r = report(
            &windows,
            &[20, 4],
            &calls,
            &[("fctrace-traced".into(), f, 10)],
            5,
        );
        // 2 per read untraced, 4 traced: ratio 2.00, one instruction per call shown.
        assert!(r.contains("fctrace-traced"), "{r}");
        assert!(r.contains("2.00"), "{r}");
        assert!(
            r.lines()
                .any(|l| l.starts_with("fctrace-traced") && l.trim_end().ends_with(" 1")),
            "{r}"
        );
        assert!(json(&windows, &[20, 4], &calls).contains("\"per_read\": 4.0"));
    }
    #[test]
    fn stat_windows_and_hooked_entries() {
        let windows = vec![
            Window {
                index: 0,
                label: "none".into(),
                ops: 1,
            },
            Window {
                index: 1,
                label: "none-stat".into(),
                ops: 1,
            },
            Window {
                index: 2,
                label: "fctrace-other-stat".into(),
                ops: 1,
            },
        ];
        // The stat window's ratio is to none-stat (300 / 200), not to none (300 / 100).
        let r = report(&windows, &[100, 200, 300], &BTreeMap::new(), &[], 5);
        assert!(
            r.lines()
                .any(|l| l.starts_with("fctrace-other-stat") && l.contains(" 1.50 ")),
            "{r}"
        );
        let console = "ICOUNTHOOK dput\r\nICOUNTHOOK __rcu_read_lock\nICOUNTSYM x\n";
        let hooks = parse_hooks(console);
        assert_eq!(hooks.len(), 2);
        let funcs = vec![
            FuncCost {
                name: "__rcu_read_lock".into(),
                instructions: 60,
                entries: 30,
            },
            FuncCost {
                name: "dput".into(),
                instructions: 200,
                entries: 20,
            },
            FuncCost {
                name: "link_path_walk".into(),
                instructions: 900,
                entries: 10,
            },
        ];
        let (n, v) = hooked_entries(&funcs, &hooks, 10);
        assert_eq!(n, 5.0);
        assert_eq!(v[0], ("__rcu_read_lock".to_string(), 3.0));
        assert_eq!(v[1], ("dput".to_string(), 2.0));
    }

    #[test]
    fn kprobes_and_their_hits() {
        let console = "\
ICOUNTKP ffffffff8122e62e  k  seq_read_iter+0x32e    [OPTIMIZED]
ICOUNTKP ffffffff8122e634  k  seq_read_iter+0x334    \r
ICOUNTKP ffffffff8122e634  k  seq_read_iter+0x334    \r
ICOUNTKP ffffffff81200000  k  vfs_read+0x4    [FTRACE]
ICOUNTKP ffffffff81300000  k  gone+0x0    [GONE]
";
        let p = parse_kprobes(console);
        assert_eq!(p.len(), 3, "{p:?}");
        assert_eq!(
            p[2],
            (
                0xffff_ffff_8122_e634,
                "seq_read_iter+0x334".into(),
                ProbeKind::Breakpoint
            )
        );
        let counts = vec![
            (0xffff_ffff_8122_e62e, 20),
            (0xffff_ffff_8122_e634, 10),
            (0xffff_ffff_8100_0000, 99),
        ];
        let h = probe_hits(&counts, &p, 10);
        assert_eq!(h.len(), 2);
        assert_eq!(h[0].0, ProbeKind::Breakpoint);
        assert_eq!(h[0].1, 1.0);
        assert_eq!(
            h[1],
            (
                ProbeKind::Optimized,
                2.0,
                vec![("seq_read_iter+0x32e".to_string(), 2.0)]
            )
        );
    }
}
