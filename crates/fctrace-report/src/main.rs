// SPDX-License-Identifier: GPL-2.0 OR MIT

//! `fctrace-report`: reports on the text traces fctrace writes. See README.md.

use anyhow::{anyhow, bail, Context, Result};
use clap::{Args as ClapArgs, Parser, Subcommand};
use fctrace_report::folded::{FlameOptions, Weight};
use fctrace_report::stats::SortKey;
use fctrace_report::tree::BuildOptions;
use fctrace_report::{
    chrome, diff, errors, folded, follow, graph, select, stats, LoadOptions, Trace,
};
use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Reports on fctrace's text traces (what `cat trace` or `cat trace_pipe` printed).
#[derive(Parser)]
#[command(name = "fctrace-report", version, about)]
struct Cli {
    #[command(flatten)]
    load: LoadArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(ClapArgs)]
struct LoadArgs {
    /// Skip the lines that cannot be parsed (and count them) instead of stopping at the
    /// first.
    #[arg(long, global = true)]
    lenient: bool,
    /// Merge functions whose names differ only by compiler suffixes (`.isra.0`,
    /// `.constprop.0`, `.part.0`, `.cold`...).
    #[arg(long, global = true)]
    merge_suffixes: bool,
    /// Leave interrupt trees (`==========> irq` ... `<========== irq`) out.
    #[arg(long, global = true)]
    no_irqs: bool,
    /// Only this task: `COMM-TID`, a thread id, or a command name (all its threads).
    #[arg(long, global = true, value_name = "TASK")]
    task: Option<String>,
    /// Only the trees below the outermost calls of this function (`name`, or
    /// `name [module]`), each call a tree of its own.
    #[arg(long, global = true, value_name = "FUNCTION")]
    subtree: Option<String>,
    /// Only calls that took at least this many microseconds (as ftrace's
    /// `tracing_thresh`): a shorter call goes with the calls it made.
    #[arg(long, global = true, value_name = "US")]
    min_us: Option<f64>,
    /// Also print the anomalies met (frames rebuilt from a `}` whose opening was lost,
    /// frames never closed, durations that do not add up, skipped lines) on standard
    /// error, with line numbers.
    #[arg(short, long, global = true)]
    verbose: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Per-function statistics: calls, total and self time, average, min, max, and the
    /// calls not followed and why (like `uftrace report`).
    Stats {
        /// The trace (`-` or nothing: standard input).
        #[arg(default_value = "-")]
        trace: PathBuf,
        /// What to sort by (largest first; `name`: alphabetically).
        #[arg(short, long, value_enum, default_value = "total")]
        sort: SortKey,
        /// Reverse the order.
        #[arg(short, long)]
        reverse: bool,
        /// Show only the first N functions.
        #[arg(short = 'n', long)]
        limit: Option<usize>,
        /// Write JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// The call graph merged over all calls: each distinct call path once, with its
    /// calls and times (like `uftrace graph`). With FUNCTION: the paths that reached it
    /// and the graph of its calls.
    Graph {
        /// The trace (`-`: standard input).
        #[arg(default_value = "-")]
        trace: PathBuf,
        /// Show the graph below this function (its name, or `name [module]`).
        function: Option<String>,
        /// Show this many levels at most.
        #[arg(short, long)]
        depth: Option<usize>,
        /// Keep the threads apart: a first level for each `COMM-TID`.
        #[arg(long)]
        tasks: bool,
        /// Write JSON (a flat list of nodes with their parents) instead of a tree.
        #[arg(long)]
        json: bool,
    },
    /// Folded stacks (`a;b;c VALUE`), the input of flamegraph tools.
    Folded {
        /// The trace (`-` or nothing: standard input).
        #[arg(default_value = "-")]
        trace: PathBuf,
        #[command(flatten)]
        stacks: StackArgs,
        /// Write to this file instead of standard output.
        #[arg(short, long)]
        output: Option<PathBuf>,
    },
    /// An SVG flamegraph (by time, or by calls with `--calls`).
    Flamegraph {
        /// The trace (`-` or nothing: standard input).
        #[arg(default_value = "-")]
        trace: PathBuf,
        #[command(flatten)]
        stacks: StackArgs,
        /// The SVG file to write (`-`: standard output).
        #[arg(short, long)]
        output: PathBuf,
        /// The title.
        #[arg(long)]
        title: Option<String>,
        /// Image width in pixels.
        #[arg(long)]
        width: Option<usize>,
        /// Leave out frames narrower than this percentage of the width.
        #[arg(long, default_value_t = 0.01)]
        min_width: f64,
    },
    /// Chrome trace-event JSON for Perfetto's UI or chrome://tracing: one track per
    /// thread, nested slices, arguments and return values as slice arguments. The
    /// text trace has no time stamps: each thread's calls are laid out from 0, one
    /// after the other (durations are real, gaps unknown).
    Chrome {
        /// The trace (`-` or nothing: standard input).
        #[arg(default_value = "-")]
        trace: PathBuf,
        /// The JSON file to write (`-`: standard output).
        #[arg(short, long)]
        output: PathBuf,
    },
    /// Where errors came from: each call at the top of a tree (a system call, a call of
    /// the start function) that returned a negative errno, the deepest call below it where
    /// that value first appeared, and the path to it, counted when it repeats (like
    /// retsnoop). Needs `retval`; with `args` the values are typed.
    Errors {
        /// The trace (`-` or nothing: standard input).
        #[arg(default_value = "-")]
        trace: PathBuf,
        /// Show at most N paths (the most taken first).
        #[arg(short = 'n', long, default_value_t = 20)]
        limit: usize,
        /// Write JSON (all paths) instead of text.
        #[arg(long)]
        json: bool,
    },
    /// Where a value went: every call whose arguments or return value carry VALUE (a
    /// number or pointer, a hashed pointer `ptr:...`, or a string an argument contains),
    /// in the order of the trace, with the path to each.
    Follow {
        /// The value: `0xffff888002777f28`, `4096`, `ptr:5d1c2e07`, `/tmp/x`.
        value: String,
        /// The trace (`-` or nothing: standard input).
        #[arg(default_value = "-")]
        trace: PathBuf,
        /// Also the values inside the object of this many bytes at VALUE (a number),
        /// shown with their offset.
        #[arg(long, default_value_t = 0)]
        size: u64,
        /// Write JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// What two runs did differently: functions and call paths in one and not the
    /// other, error returns and reasons not followed that differ, and the biggest
    /// changes in calls and time (A: the run that works, B: the one that fails).
    Diff {
        /// The first trace.
        a: PathBuf,
        /// The second trace.
        b: PathBuf,
        /// Show at most N entries per list.
        #[arg(short = 'n', long, default_value_t = 20)]
        limit: usize,
        /// Write JSON (all entries) instead of text.
        #[arg(long)]
        json: bool,
    },
}

#[derive(ClapArgs)]
struct StackArgs {
    /// Weigh the stacks by calls instead of time.
    #[arg(long)]
    calls: bool,
    /// Keep the threads apart: the first frame of each stack is `COMM-TID`.
    #[arg(long)]
    tasks: bool,
}

impl StackArgs {
    fn weight(&self) -> Weight {
        if self.calls {
            Weight::Calls
        } else {
            Weight::Time
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(&cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // A reader that went away (`| head`) is not an error.
            let broken_pipe = |c: &(dyn std::error::Error + 'static)| {
                c.downcast_ref::<io::Error>()
                    .map(io::Error::kind)
                    .or_else(|| {
                        c.downcast_ref::<serde_json::Error>()
                            .and_then(serde_json::Error::io_error_kind)
                    })
                    == Some(io::ErrorKind::BrokenPipe)
            };
            if e.chain().any(broken_pipe) {
                return ExitCode::SUCCESS;
            }
            let _ = writeln!(io::stderr(), "fctrace-report: error: {:#}", e);
            ExitCode::FAILURE
        }
    }
}

fn name(path: &Path) -> String {
    if path.as_os_str() == "-" {
        "<stdin>".to_string()
    } else {
        path.display().to_string()
    }
}

fn load(path: &Path, args: &LoadArgs) -> Result<Trace> {
    let mut bytes = Vec::new();
    if path.as_os_str() == "-" {
        io::stdin()
            .lock()
            .read_to_end(&mut bytes)
            .context("reading standard input")?;
    } else {
        File::open(path)
            .and_then(|mut f| f.read_to_end(&mut bytes))
            .with_context(|| format!("reading {}", path.display()))?;
    }
    let opts = LoadOptions {
        lenient: args.lenient,
        build: BuildOptions {
            merge_suffixes: args.merge_suffixes,
            no_irqs: args.no_irqs,
        },
    };
    let (whole, skipped) = fctrace_report::load_bytes(&bytes, opts).map_err(|e| {
        anyhow!(
            "{}: cannot parse line {}: {}\n  {}\n(use --lenient to skip such lines)",
            name(path),
            e.line_no,
            e.reason,
            e.line
        )
    })?;
    if args.min_us.is_some_and(|us| !(us >= 0.0 && us.is_finite())) {
        bail!("--min-us: a number of microseconds, 0 or more");
    }
    let sel = select::Selection {
        task: args.task.clone(),
        subtree: args.subtree.clone(),
        min_ns: args.min_us.map(|us| (us * 1000.0).round() as u64),
    };
    let trace = select::select(&whole, &sel);
    let mut err = io::stderr().lock();
    if !sel.is_all() && trace.summary.calls == 0 {
        writeln!(
            err,
            "fctrace-report: {}: nothing left after --task/--subtree/--min-us",
            name(path)
        )?;
    }
    if !skipped.is_empty() {
        let first = skipped
            .first()
            .map(|e| format!(" (first: line {}: {})", e.line_no, e.reason))
            .unwrap_or_default();
        writeln!(
            err,
            "fctrace-report: {}: skipped {} unparseable line(s){}",
            name(path),
            skipped.len(),
            first
        )?;
    }
    let sm = &trace.summary;
    if sm.overrun_frames > 0 && !args.verbose {
        // Said even without -v: the times do not add up there.
        writeln!(
            err,
            "fctrace-report: {}: inconsistent durations: in {} frame(s), the calls inside \
             add up to more than the frame's own duration ({} in all; events lost or \
             matched wrongly): their self time counts 0, and the folded stacks add up to \
             that much more than the top-level calls (-v: where)",
            name(path),
            sm.overrun_frames,
            fctrace_report::table::time(sm.overrun_ns).trim()
        )?;
    }
    if args.verbose {
        writeln!(err, "fctrace-report: {}: {}", name(path), trace.describe())?;
        for e in &skipped {
            writeln!(
                err,
                "  skipped line {}: {}: {}",
                e.line_no, e.reason, e.line
            )?;
        }
        for a in &trace.anomalies {
            writeln!(err, "  {}", a)?;
        }
    }
    Ok(trace)
}

/// Standard output, or the file `path` (`-`: standard output).
fn output(path: Option<&Path>) -> Result<Box<dyn Write>> {
    Ok(match path {
        Some(p) if p.as_os_str() != "-" => Box::new(BufWriter::new(
            File::create(p).with_context(|| format!("creating {}", p.display()))?,
        )),
        _ => Box::new(BufWriter::new(io::stdout().lock())),
    })
}

/// Writes a report of `t` (read from `path`) on standard output: `doc` as JSON, or, with
/// none, the `# SOURCE: counts` line and what `text` writes.
fn report(
    path: &Path,
    t: &Trace,
    doc: Option<serde_json::Value>,
    text: impl FnOnce(&mut dyn Write) -> Result<()>,
) -> Result<()> {
    let mut w = output(None)?;
    match doc {
        Some(v) => {
            serde_json::to_writer_pretty(&mut w, &v)?;
            writeln!(w)?;
        }
        None => {
            writeln!(w, "# {}: {}", name(path), t.describe())?;
            text(&mut w)?;
        }
    }
    w.flush()?;
    Ok(())
}

fn run(cli: &Cli) -> Result<()> {
    let la = &cli.load;
    match &cli.command {
        Command::Stats {
            trace,
            sort,
            reverse,
            limit,
            json,
        } => {
            let t = load(trace, la)?;
            let mut s = stats::compute(&t);
            stats::sort(&mut s, *sort, *reverse);
            if let Some(n) = limit {
                s.truncate(*n);
            }
            let doc = json.then(|| {
                serde_json::json!({
                    "source": name(trace),
                    "summary": t.summary,
                    "functions": s,
                })
            });
            report(trace, &t, doc, |w| Ok(stats::write_table(w, &s)?))?;
        }
        Command::Graph {
            trace,
            function,
            depth,
            tasks,
            json,
        } => {
            let t = load(trace, la)?;
            let mut w = output(None)?;
            let (g, bt) = match function {
                Some(f) => {
                    let (g, bt) = graph::focused(&t, f)
                        .ok_or_else(|| anyhow!("{}: no call of {} in the trace", name(trace), f))?;
                    (g, Some(bt))
                }
                None => (graph::whole(&t, *tasks), None),
            };
            if *json {
                let nodes: Vec<_> = g
                    .preorder()
                    .into_iter()
                    .filter_map(|id| g.nodes.get(id))
                    .filter(|n| depth.is_none_or(|d| n.depth <= d))
                    .collect();
                serde_json::to_writer_pretty(
                    &mut w,
                    &serde_json::json!({
                        "source": name(trace),
                        "summary": t.summary,
                        "function": function,
                        "backtraces": bt,
                        "total_ns": g.nodes.first().map_or(0, |r| r.total_ns),
                        "nodes": nodes,
                    }),
                )?;
                writeln!(w)?;
            } else {
                writeln!(w, "# {}: {}", name(trace), t.describe())?;
                if let (Some(f), Some(bt)) = (function, &bt) {
                    writeln!(w, "#")?;
                    writeln!(w, "# Backtraces of {} ({} distinct)", f, bt.len())?;
                    graph::write_backtraces(&mut w, bt)?;
                    writeln!(w, "#")?;
                    writeln!(w, "# Call graph of {}", f)?;
                } else {
                    writeln!(
                        w,
                        "# Call graph ({} distinct paths, {} calls)",
                        g.nodes.len().saturating_sub(1),
                        g.total_calls()
                    )?;
                }
                graph::write_graph(&mut w, &g, *depth)?;
            }
            w.flush()?;
        }
        Command::Folded {
            trace,
            stacks,
            output: out,
        } => {
            let t = load(trace, la)?;
            let g = graph::whole(&t, stacks.tasks);
            let lines = folded::folded_lines(&g, stacks.weight());
            let mut w = output(out.as_deref())?;
            folded::write_folded(&mut w, &lines)?;
            w.flush()?;
        }
        Command::Flamegraph {
            trace,
            stacks,
            output: out,
            title,
            width,
            min_width,
        } => {
            let t = load(trace, la)?;
            let g = graph::whole(&t, stacks.tasks);
            let lines = folded::folded_lines(&g, stacks.weight());
            if lines.is_empty() {
                bail!(
                    "{}: nothing to draw: no call has {}",
                    name(trace),
                    if stacks.calls {
                        "been made"
                    } else {
                        "a duration (try --calls)"
                    }
                );
            }
            let by = if stacks.calls { "calls" } else { "time" };
            let fo = FlameOptions {
                title: title
                    .clone()
                    .unwrap_or_else(|| format!("fctrace: {}", name(trace))),
                subtitle: Some(format!("by {}: {}", by, t.describe())),
                weight: stacks.weight(),
                min_width: *min_width,
                width: *width,
            };
            let mut w = output(Some(out))?;
            folded::write_flamegraph(&mut w, &lines, &fo)?;
            w.flush()?;
        }
        Command::Chrome { trace, output: out } => {
            let t = load(trace, la)?;
            let mut w = output(Some(out))?;
            chrome::write_json(&mut w, &t, &name(trace))?;
            w.flush()?;
        }
        Command::Errors { trace, limit, json } => {
            let t = load(trace, la)?;
            let e = errors::compute(&t);
            let doc = json.then(|| {
                serde_json::json!({
                    "source": name(trace),
                    "summary": t.summary,
                    "errors": e,
                })
            });
            report(trace, &t, doc, |w| Ok(errors::write_text(w, &e, *limit)?))?;
        }
        Command::Follow {
            value,
            trace,
            size,
            json,
        } => {
            let t = load(trace, la)?;
            let hits = follow::find(&t, &follow::Needle::parse(value, *size));
            let doc = json.then(|| {
                serde_json::json!({
                    "source": name(trace),
                    "value": value,
                    "size": size,
                    "calls": hits,
                })
            });
            report(trace, &t, doc, |w| Ok(follow::write_text(w, value, &hits)?))?;
        }
        Command::Diff { a, b, limit, json } => {
            let ta = load(a, la)?;
            let tb = load(b, la)?;
            let d = diff::diff(&ta, &name(a), &tb, &name(b));
            let mut w = output(None)?;
            if *json {
                serde_json::to_writer_pretty(&mut w, &d)?;
                writeln!(w)?;
            } else {
                diff::write_diff(&mut w, &d, *limit)?;
            }
            w.flush()?;
        }
    }
    Ok(())
}
