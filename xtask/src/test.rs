// SPDX-License-Identifier: GPL-2.0

//! `cargo xtask test [PATTERN] [--debug] [--jobs N] [--timeout SECS] [--test-timeout SECS]
//! [--budget SECS] [--model N | --cpu MODEL [--append ARGS]] [--smp N] [--mem MB]`:
//! 0. the check of `cargo xtask fmt --check` (stops here if formatting would change
//!    anything);
//! 1. `cargo test --workspace` on the host (env `FCTRACE_VMLINUX=<KDIR>/vmlinux`, and
//!    `FCTRACE_A64_IMAGE`: Debian's arm64 kernel image, fetched once, and
//!    `FCTRACE_A64_SITES` and `FCTRACE_A64_SYMS`: its ftrace sites and text symbols,
//!    listed once by booting it, `arm64.rs`);
//! 2. boot the guest with `/selftests/fctracetest [PATTERN]` as the script; with
//!    `--jobs N`, N guests side by side, guest i running every Nth test from the i-th
//!    (`fctrace.shard=i/N` on its command line; consoles in `console-i.log`);
//! 3. parse the KTAP output, print a summary and a last line
//!    `fctrace: N passed, N failed, N skipped`.
//!
//! Fails if formatting is off, a host test failed, a selftest failed, the runner did not
//! finish, or the console shows a kernel problem report.
//!
//! `--budget SECS` bounds the whole command (CI runs the debug kernel's tests in what is
//! left of its time): a guest still running when the budget ends is stopped, the tests
//! it had not reported are counted as skipped and named in the summary, and what did
//! run is judged as usual. A guest that printed nothing for longer than a test may run
//! had frozen: its missing tests fail.

use std::io::Write;
use std::time::Duration;

use crate::util::{echo, note, out_dir, repo_root, secs, Result};
use crate::vm::{self, VmOpts};

/// `cargo xtask test`.
#[derive(clap::Args)]
pub struct TestArgs {
    /// Run only the selftests matching PATTERN: glob fragments of their paths, separated by
    /// commas, any of which may match (selftests/fctracetest PATTERN)
    pub pattern: Option<String>,
    /// Test on the debug kernel (lockdep, KASAN, kmemleak, ...)
    #[arg(long)]
    pub debug: bool,
    /// Share the selftests among N guests side by side (1 to 8)
    #[arg(long, value_name = "N", default_value_t = 1)]
    pub jobs: u32,
    /// Each test's timeout (at least 10) [default: 120; 1200 with --debug; 600 with
    /// `--profile debian`]
    #[arg(long, value_name = "SECS")]
    pub test_timeout: Option<u32>,
    /// Stop after SECS in all (at least 60); tests not reached by then count as skipped
    #[arg(long, value_name = "SECS", value_parser = secs)]
    pub budget: Option<Duration>,
    /// Distro and debian profiles: run on model N (1 to 6) of the CPU matrix only, with its kernel
    /// command line and its mitigation checks
    #[arg(long, value_name = "N", conflicts_with = "cpu")]
    pub model: Option<usize>,
    #[command(flatten)]
    pub vm: VmOpts,
    /// Model `i` of `m` in a budgeted matrix run: its guests start at test `(i-1)*n/m` of
    /// their lists and wrap around (`FCTRACE_ROTATE` for `fctracetest`), so that the
    /// models, each cut short by its share of the budget, cover the suite together.
    #[arg(skip)]
    pub rotate: Option<(usize, usize)>,
    /// Run the suite as kselftest installed it, in `/kselftest` of the initramfs
    /// (`run_kselftest.sh`, whose KTAP nests fctracetest's): `cargo xtask deb --check`.
    #[arg(skip)]
    pub kselftest: bool,
}

/// A CPU model of the distro profile's matrix and what it makes the kernel choose.
pub struct CpuCase {
    /// QEMU's `-cpu` model.
    pub cpu: &'static str,
    /// More kernel command line.
    pub append: &'static str,
    /// Threads per core (`--threads`): 2 where the kernel's choice depends on SMT being
    /// possible.
    pub threads: u32,
    /// Lines the guest console must show: the kernel's `active return thunk: ...` and the
    /// guest's `vulnerability <file>: <contents>` lines (printed before the selftests),
    /// which say the mitigation really is active.
    pub expect: &'static [&'static str],
}

/// A CPU model as on the command line: `-cpu EPYC-Rome --threads 2 spec_rstack_overflow=off`.
fn model_name(cpu: &str, threads: u32, append: &str) -> String {
    let mut s = format!("-cpu {cpu}");
    if threads > 1 {
        s.push_str(&format!(" --threads {threads}"));
    }
    if !append.trim().is_empty() {
        s.push(' ');
        s.push_str(append.trim());
    }
    s
}

impl std::fmt::Display for CpuCase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&model_name(self.cpu, self.threads, self.append))
    }
}

/// The distro profile's CPU matrix (Documentation/fctrace/testing.rst, "CPU models").
/// TCG emulates none of IBRS, eIBRS or IBPB, so every model gets retpolines for
/// indirect branches; what differs is the return thunk, call-depth tracking and ITS.
pub const MATRIX: &[CpuCase] = &[
    CpuCase {
        cpu: "max",
        append: "",
        threads: 1,
        expect: &[
            "vulnerability spectre_v2: Mitigation: Retpolines",
            "vulnerability retbleed: Not affected",
        ],
    },
    CpuCase {
        cpu: "EPYC-Rome",
        append: "",
        // 7.x: a Zen 2 without SMT is not affected by SRSO ("Mitigation: SMT disabled")
        // and keeps retbleed_return_thunk, which is model 3's.
        threads: 2,
        expect: &[
            "active return thunk: srso_return_thunk",
            "vulnerability spec_rstack_overflow: Vulnerable: Safe RET",
        ],
    },
    CpuCase {
        cpu: "EPYC-Rome",
        append: "spec_rstack_overflow=off",
        threads: 1,
        expect: &[
            "active return thunk: retbleed_return_thunk",
            "vulnerability retbleed: Mitigation: untrained return thunk",
        ],
    },
    CpuCase {
        cpu: "EPYC-Milan",
        append: "",
        threads: 1,
        expect: &["active return thunk: srso_alias_return_thunk"],
    },
    CpuCase {
        cpu: "Skylake-Client",
        append: "retbleed=stuff",
        threads: 1,
        expect: &[
            "active return thunk: call_depth_return_thunk",
            "vulnerability retbleed: Mitigation: Stuffing",
        ],
    },
    CpuCase {
        cpu: "Skylake-Server",
        append: "",
        threads: 1,
        expect: &[
            "active return thunk: its_return_thunk",
            "vulnerability indirect_target_selection: Mitigation: Aligned branch/return thunks",
        ],
    },
];

/// Prints the mitigation state before the selftests (see [`CpuCase::expect`]).
const PRINT_VULNERABILITIES: &str = "for f in /sys/devices/system/cpu/vulnerabilities/*; do echo \"vulnerability ${f##*/}: $(cat \"$f\")\"; done\n";

/// The model of the matrix that `-cpu cpu` with kernel command line `append` and
/// `threads` threads per core is, if any.
pub fn matrix_case(cpu: &str, append: &str, threads: u32) -> Option<&'static CpuCase> {
    MATRIX
        .iter()
        .find(|c| c.cpu == cpu && c.append == append.trim() && c.threads == threads)
}

pub fn cmd(args: TestArgs) -> Result<i32> {
    // (The CPU matrix is x86-64's: the arm64 guest is `-cpu max`.)
    let distro =
        (crate::kernel::is_distro() || crate::kernel::is_debian()) && !crate::kernel::is_arm64();
    if let Some(m) = args.model {
        if !distro || args.debug {
            return Err("--model: only with --profile distro or debian (and not --debug)".into());
        }
        let Some(case) = m.checked_sub(1).and_then(|i| MATRIX.get(i)) else {
            return Err(format!("--model: 1 to {}", MATRIX.len()).into());
        };
        note(format!("CPU matrix model {m}/{}: {case}", MATRIX.len()));
        let a = args.clone_for(case);
        return cmd_one(a, true, case.expect);
    }
    if let Some(cpu) = args.vm.cpu.as_deref().filter(|_| distro && !args.debug) {
        // A model of the matrix: check what it must make the kernel choose.
        let expect =
            matrix_case(cpu, &args.vm.append, args.vm.threads).map_or(&[][..], |c| c.expect);
        return cmd_one(args, true, expect);
    }
    if !distro || args.vm.cpu.is_some() || args.debug {
        // (arm64: the host tests are the same as the default profile's, and CI runs
        // those just before.)
        return cmd_one(args, !crate::kernel::is_arm64(), &[]);
    }
    // The distro profile on each CPU model of the matrix; a budget is shared out among
    // the models not run yet.
    let started = std::time::Instant::now();
    let mut results = Vec::new();
    for (i, case) in MATRIX.iter().enumerate() {
        let mut a = args.clone_for(case);
        if let Some(b) = args.budget {
            a.rotate = Some((i + 1, MATRIX.len()));
            let left = b.saturating_sub(started.elapsed());
            a.budget = Some((left / (MATRIX.len() - i) as u32).max(Duration::from_secs(60)));
        }
        note(format!("CPU matrix {}/{}: {case}", i + 1, MATRIX.len()));
        let status = cmd_one(a, i == 0, case.expect)?;
        results.push((case, status));
    }
    println!();
    println!(
        "==================== fctrace CPU matrix ({} profile)",
        if crate::kernel::is_debian() {
            "debian"
        } else {
            "distro"
        }
    );
    for (case, status) in &results {
        println!("{:<4} {case}", if *status == 0 { "ok" } else { "FAIL" });
    }
    Ok(if results.iter().all(|(_, s)| *s == 0) {
        0
    } else {
        1
    })
}

impl TestArgs {
    fn clone_for(&self, case: &CpuCase) -> TestArgs {
        TestArgs {
            pattern: self.pattern.clone(),
            debug: self.debug,
            jobs: self.jobs,
            test_timeout: self.test_timeout,
            budget: self.budget,
            model: None,
            rotate: None,
            kselftest: self.kselftest,
            vm: VmOpts {
                timeout: self.vm.timeout,
                smp: self.vm.smp,
                threads: case.threads,
                mem: self.vm.mem,
                cpu: Some(case.cpu.to_string()),
                append: if self.vm.append.is_empty() {
                    case.append.to_string()
                } else {
                    format!("{} {}", case.append, self.vm.append)
                },
            },
        }
    }
}

/// One run of the selftests (on one CPU model); `host`: also the format check and the
/// host tests; `expect`: lines the console must show (see [`CpuCase::expect`]).
fn cmd_one(args: TestArgs, host: bool, expect: &[&str]) -> Result<i32> {
    let TestArgs {
        pattern,
        debug,
        jobs,
        test_timeout,
        budget,
        vm: mut opts,
        rotate,
        model: _,
        kselftest,
    } = args;
    let host = host && !kselftest;
    crate::kernel::set_debug(debug);
    if !(1..=8).contains(&jobs) {
        return Err("--jobs: 1 to 8 guests".into());
    }
    let started = std::time::Instant::now();
    if budget.is_some_and(|b| b.as_secs() < 60) {
        return Err("--budget: at least 60 seconds".into());
    }
    // The debug kernel (KASAN + lockdep, emulated) runs the same tests about
    // 8x slower: scale the per-test and whole-run timeouts unless given.
    // `--test-timeout`: each test's own (e.g. shorter, to see a hang's SysRq dump sooner).
    // Debian's kernel registers a kprobe about 4.7 ms apart under TCG
    // (`jump_label_text_reserved()` walks its many jump entries for each): a test
    // that arms what an exec reaches (`lifecycle/exec_thread`) takes about 3 minutes.
    let per_test = test_timeout.unwrap_or(if debug {
        1200
    } else if crate::kernel::is_debian() {
        600
    } else {
        120
    });
    if per_test < 10 {
        return Err("--test-timeout: at least 10 seconds".into());
    }
    // Tells the oracle tests to run fctrace alone (see selftests/test.d/functions).
    let mut debug_env = if debug {
        "export FCTRACE_DEBUG_KERNEL=1\n".to_string()
    } else {
        String::new()
    };
    if let Some((i, m)) = rotate {
        debug_env.push_str(&format!("export FCTRACE_ROTATE={i}/{m}\n"));
    }
    if debug && opts.timeout == Duration::from_secs(vm::DEFAULT_TIMEOUT) {
        opts.timeout = Duration::from_secs(vm::DEFAULT_TIMEOUT * 8);
    }
    // The distro kernel's tests arm more (every mitigation, a bigger kernel): half the
    // suite in one guest can take more than the default 1200 s.
    if (crate::kernel::is_distro() || crate::kernel::is_debian())
        && !debug
        && opts.timeout == Duration::from_secs(vm::DEFAULT_TIMEOUT)
    {
        opts.timeout = Duration::from_secs(vm::DEFAULT_TIMEOUT * 3);
    }

    if host {
        crate::fmt::check()?;
    }
    crate::setup::ensure()?;
    let kdir = crate::kernel::kdir()?;

    // 1. host tests; the A64 decoder's take every word of Debian's arm64 kernel image,
    // and its ftrace sites.
    let a64 = if host {
        Some((crate::arm64::ensure_image()?, crate::arm64::ensure_lists()?))
    } else {
        None
    };
    let host_ok = !host || {
        note("host tests: cargo test --workspace");
        let mut cmd = duct::cmd!("cargo", "test", "--workspace").dir(repo_root());
        // Debian's tree has the headers' vmlinux, which holds only the BTF: the
        // decoder's tests then take every lab kernel's vmlinux, as without the variable.
        if !crate::kernel::is_debian() {
            cmd = cmd.env("FCTRACE_VMLINUX", kdir.join("vmlinux"));
        }
        if let Some((img, (sites, syms))) = &a64 {
            cmd = cmd
                .env("FCTRACE_A64_IMAGE", img)
                .env("FCTRACE_A64_SITES", sites)
                .env("FCTRACE_A64_SYMS", syms);
        }
        cmd.before_spawn(echo).run().is_ok()
    };
    if !host_ok {
        note("host tests FAILED (continuing with the selftests)");
    }

    // 2. selftests in the guest
    let mut script = tempfile::Builder::new()
        .prefix("fctrace-test-")
        .suffix(".sh")
        .tempfile()?;
    let arg = match &pattern {
        Some(p) => format!(" '{}'", p.replace('\'', r"'\''")),
        None => String::new(),
    };
    let run = if kselftest {
        // kselftest's runner calls /usr/bin/timeout --foreground where that exists:
        // BusyBox's has no such option (coreutils' has).
        format!(
            "cd {KSELFTEST_DIR} || exit 1\nrm -f /usr/bin/timeout\nexport FCTRACE_TESTS={}\n{SHARD_FROM_CMDLINE}exec ./run_kselftest.sh\n",
            arg.trim_start()
        )
    } else {
        format!("cd /selftests || exit 1\n{SHARD_FROM_CMDLINE}exec sh ./fctracetest{arg}\n")
    };
    write!(
        script,
        "#!/bin/sh\n{PRINT_VULNERABILITIES}export FCTRACE_TEST_TIMEOUT={per_test}\n{debug_env}{run}"
    )?;
    script.flush()?;
    let (kdir, initrd) = vm::prepare(true, Some(script.path()))?;
    // What is left of the budget bounds the guests (at least a minute, to boot and report).
    let cut_at = budget.map(|b| {
        b.saturating_sub(started.elapsed())
            .max(Duration::from_secs(60))
    });
    if let Some(left) = cut_at.filter(|&left| left < opts.timeout) {
        note(format!(
            "budget: the guests get the {} s left of it",
            left.as_secs()
        ));
        opts.timeout = left;
    }
    let budget_bound = cut_at.is_some_and(|left| left <= opts.timeout);
    let runs: Vec<vm::VmRun> = if jobs == 1 {
        vec![vm::run_script(&kdir, &initrd, &opts)?]
    } else {
        let (kdir, initrd, opts) = (&kdir, &initrd, &opts);
        std::thread::scope(|sc| {
            let handles: Vec<_> = (1..=jobs)
                .map(|i| {
                    sc.spawn(move || {
                        let log = out_dir().join(format!("console-{i}.log"));
                        // (the error as text: a boxed error cannot leave the thread)
                        vm::run_script_with(
                            kdir,
                            initrd,
                            opts,
                            &format!("fctrace.shard={i}/{jobs}"),
                            &log,
                        )
                        .map_err(|e| e.to_string())
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err("a guest thread panicked".to_string()))
                })
                .collect::<std::result::Result<Vec<_>, String>>()
        })?
    };
    let reports: Vec<_> = runs
        .iter()
        .flat_map(|r| r.reports.iter().cloned())
        .collect();
    let problems = vm::print_reports(&kdir, &reports);

    // 3. summary
    // A guest stopped by the budget (not by a hang: its own timeout was the budget's rest)
    // is judged on what it reported; its tests not reported are skipped, not failed. A
    // guest silent for longer than a test may run had frozen: the runner kills a test at
    // its timeout and reports it, so that guest's missing tests fail.
    let frozen_after = Duration::from_secs(u64::from(longest_test_timeout(per_test, debug)) + 60);
    let frozen: Vec<bool> = runs
        .iter()
        .map(|r| r.timed_out && r.exit.is_none() && r.silent > frozen_after)
        .collect();
    let cut: Vec<bool> = runs
        .iter()
        .zip(&frozen)
        .map(|(r, &f)| budget_bound && r.timed_out && r.exit.is_none() && !f)
        .collect();
    let ktaps: Vec<Ktap> = runs
        .iter()
        .zip(&cut)
        .map(|(r, &c)| {
            let mut k = if kselftest {
                parse_ktap(&kselftest_inner(&r.console))
            } else {
                parse_ktap(&r.console)
            };
            k.cut = c;
            k
        })
        .collect();
    // Each guest printed its totals, or the budget stopped it (checked per guest: after the
    // merge, a cut guest would hide a finished one's missing totals).
    let finished = ktaps.iter().all(Ktap::finished);
    let k = Ktap::merge(ktaps);
    let s = k.summary();
    let exited_ok = runs.iter().zip(&cut).all(|(r, &c)| c || r.exit == Some(0));
    let exited = runs.iter().zip(&cut).all(|(r, &c)| c || r.exit.is_some());
    println!();
    println!("==================== fctrace test summary");
    if host {
        println!(
            "host tests (cargo test --workspace): {}",
            if host_ok { "ok" } else { "FAILED" }
        );
    }
    // The CPU model made the kernel choose what the matrix says (checked on every guest).
    let mut cpu_ok = true;
    for e in expect {
        for (i, r) in runs.iter().enumerate() {
            if !r.console.lines().any(|l| l.contains(e)) {
                println!("CPU model: guest {} never printed '{e}'", i + 1);
                cpu_ok = false;
            }
        }
    }
    let model = (opts.cpu.as_deref()).map(|cpu| model_name(cpu, opts.threads, &opts.append));
    if let Some(m) = model.as_ref().filter(|_| expect.is_empty()) {
        println!("CPU model: {m}: not a model of the matrix, mitigations not checked");
    } else if let Some(m) = &model {
        println!(
            "CPU model: {m}: {}",
            if cpu_ok {
                "the expected mitigations are active"
            } else {
                "NOT the expected mitigations"
            }
        );
    }
    for (num, name) in &k.failed_names {
        println!("FAILED selftest {num}: {name}");
    }
    if let Some(p) = k.plan.filter(|_| !k.cut) {
        if k.results < p {
            println!(
                "selftests: {} of {p} planned tests did not report",
                p - k.results
            );
        }
    }
    for (i, r) in runs.iter().enumerate().filter(|&(i, _)| cut[i]) {
        let guest = if jobs == 1 {
            String::new()
        } else {
            format!(" (guest {})", i + 1)
        };
        let not_run = if kselftest {
            not_reported(&kselftest_inner(&r.console))
        } else {
            not_reported(&r.console)
        };
        println!(
            "selftests{guest}: the budget ran out ({} s in all): {} tests not run (the first was running), counted as skipped: {}",
            budget.map_or(0, |b| b.as_secs()),
            not_run.len(),
            if not_run.is_empty() { "(the guest had not listed its tests yet)".to_string() } else { not_run.join(" ") }
        );
    }
    for (i, r) in runs.iter().enumerate().filter(|&(i, _)| frozen[i]) {
        let guest = if jobs == 1 {
            String::new()
        } else {
            format!(" (guest {})", i + 1)
        };
        println!(
            "selftests{guest}: the guest printed nothing in its last {} s, longer than any test may run and a minute: it froze in {}",
            r.silent.as_secs(),
            not_reported(&r.console).first().map_or("(unknown)", String::as_str)
        );
    }
    if !k.started {
        println!("selftests: the runner produced no KTAP output");
    } else if !finished || !exited {
        println!("selftests: the runner did not finish");
    } else if !exited_ok && s.failed == 0 {
        let st: Vec<_> = runs.iter().map(|r| r.exit).collect();
        println!("selftests: runner exited with status {st:?}");
    }
    if problems {
        println!(
            "kernel problems in the guest console: {} (see above)",
            vm::problem_count(&reports)
        );
    }
    if jobs == 1 {
        println!("console log: {}", out_dir().join("console.log").display());
    } else {
        for i in 1..=jobs {
            println!(
                "console log: {}",
                out_dir().join(format!("console-{i}.log")).display()
            );
        }
    }
    // On arm64 the x86-64 tests skip, and the arm64 ones run: a run in which none
    // passed showed nothing of arm64.
    let none_ran = crate::kernel::is_arm64() && s.passed == 0;
    if none_ran {
        println!("selftests: no test passed on arm64 (the trace/arch_*.tc tests skipped?)");
    }
    println!(
        "fctrace: {} passed, {} failed, {} skipped",
        s.passed, s.failed, s.skipped
    );

    let ok = host_ok
        && cpu_ok
        && s.failed == 0
        && k.started
        && finished
        && exited_ok
        && !problems
        && !none_ran;
    Ok(if ok { 0 } else { 1 })
}

#[derive(Debug, Default, PartialEq, Eq)]
pub struct Summary {
    pub passed: usize,
    pub failed: usize,
    pub skipped: usize,
}

#[derive(Debug, Default)]
pub struct Ktap {
    pub started: bool,
    pub plan: Option<usize>,
    /// Number of result lines seen.
    pub results: usize,
    pub parsed: Summary,
    pub totals: Option<Summary>,
    pub totals_seen: bool,
    pub failed_names: Vec<(usize, String)>,
    /// Stopped by `--budget`: tests planned but not reported are skipped, not failed.
    /// After [`Ktap::merge`]: some part was.
    pub cut: bool,
}

/// Where `cargo xtask deb --check` puts kselftest's installation in the initramfs.
pub const KSELFTEST_DIR: &str = "/kselftest";

/// fctracetest's own KTAP out of `run_kselftest.sh`'s console: the runner prints it
/// nested, each line behind `# `, under its own plan and one result line for the whole
/// target (`ok 1 selftests: fctrace: fctracetest-ktap`). The runner's own lines are left
/// out (a run that stopped early lacks fctracetest's totals); kernel messages stay.
pub fn kselftest_inner(console: &str) -> String {
    let mut out = String::new();
    for l in console.lines() {
        if let Some(inner) = l.strip_prefix("# ") {
            out.push_str(inner);
        } else if l.starts_with("ok ")
            || l.starts_with("not ok ")
            || l.starts_with("TAP version")
            || l.starts_with("1..")
        {
            continue;
        } else {
            out.push_str(l);
        }
        out.push('\n');
    }
    out
}

/// The guest script's way to its shard: `fctrace.shard=i/N` on the kernel command line
/// becomes `FCTRACE_SHARD` for `fctracetest`.
const SHARD_FROM_CMDLINE: &str =
    "FCTRACE_SHARD=$(tr ' ' '\\n' < /proc/cmdline | sed -n 's/^fctrace\\.shard=//p')\nexport FCTRACE_SHARD\n";

impl Ktap {
    /// The results of guests that ran parts of one test list, as one run: counts add up,
    /// it started and finished only if every part did.
    pub fn merge(parts: Vec<Ktap>) -> Ktap {
        let mut parts = parts.into_iter();
        let Some(mut k) = parts.next() else {
            return Ktap::default();
        };
        let mut sum = k.summary();
        for p in parts {
            let ps = p.summary();
            sum.passed += ps.passed;
            sum.failed += ps.failed;
            sum.skipped += ps.skipped;
            k.started &= p.started;
            k.totals_seen &= p.totals_seen;
            k.cut |= p.cut;
            k.plan = match (k.plan, p.plan) {
                (Some(a), Some(b)) => Some(a + b),
                _ => None,
            };
            k.results += p.results;
            k.parsed.passed += p.parsed.passed;
            k.parsed.failed += p.parsed.failed;
            k.parsed.skipped += p.parsed.skipped;
            k.failed_names.extend(p.failed_names);
        }
        // Each part's own count (its totals line, or its results with the missing ones
        // failed or, cut by the budget, skipped), added up.
        k.totals = Some(sum);
        k
    }

    /// The runner got to its totals line, or the budget stopped it (one guest's output).
    pub fn finished(&self) -> bool {
        self.totals_seen || self.cut
    }

    /// Counts: the runner's `# Totals:` line when present (robust against
    /// kernel messages that garble a result line); otherwise the parsed
    /// result lines, with planned-but-missing tests counted as failed (as
    /// skipped when the budget stopped the run).
    pub fn summary(&self) -> Summary {
        if let Some(t) = &self.totals {
            return Summary { ..*t };
        }
        let missing = self
            .plan
            .map(|p| p.saturating_sub(self.results))
            .unwrap_or(0);
        let (failed, skipped) = if self.cut { (0, missing) } else { (missing, 0) };
        Summary {
            passed: self.parsed.passed,
            failed: self.parsed.failed + failed,
            skipped: self.parsed.skipped + skipped,
        }
    }
}

/// The longest any selftest may run in the guest: `per_test`, or a longer `# timeout:`
/// line of a test (on the debug kernel, `# debug-timeout:` lines too), as `fctracetest`
/// gives them.
fn longest_test_timeout(per_test: u32, debug: bool) -> u32 {
    fn walk(dir: &std::path::Path, out: &mut Vec<String>) {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return;
        };
        for p in rd.filter_map(|e| e.ok().map(|e| e.path())) {
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|e| e == "tc") {
                out.extend(std::fs::read_to_string(&p).ok());
            }
        }
    }
    let mut tests = Vec::new();
    walk(&repo_root().join("selftests/test.d"), &mut tests);
    tests
        .iter()
        .map(|t| test_timeout_of(t, per_test, debug))
        .max()
        .unwrap_or(per_test)
}

/// The timeout `fctracetest` gives the test whose text is `text`: `per_test`, or its
/// `# timeout:` if longer, and on the debug kernel its `# debug-timeout:` if longer still.
fn test_timeout_of(text: &str, per_test: u32, debug: bool) -> u32 {
    let declared = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key)?.trim().parse::<u32>().ok())
            .unwrap_or(0)
    };
    let t = per_test.max(declared("# timeout:"));
    if debug {
        t.max(declared("# debug-timeout:"))
    } else {
        t
    }
}

/// The tests of the console's last run that `fctracetest` planned (its `# planned:` line)
/// but did not report a result for, in order.
pub fn not_reported(console: &str) -> Vec<String> {
    let run = console
        .rfind("KTAP version 1")
        .map_or(console, |i| &console[i..]);
    let mut planned: Vec<String> = Vec::new();
    let mut reported: Vec<&str> = Vec::new();
    for line in run.lines().map(|l| l.trim_end_matches('\r')) {
        if let Some(list) = line.strip_prefix("# planned:") {
            planned = list.split_whitespace().map(str::to_string).collect();
        } else if let Some(rest) = line
            .strip_prefix("ok ")
            .or_else(|| line.strip_prefix("not ok "))
        {
            // "<n> <test>: <description>" or "<n> <test> # SKIP ..."
            if let Some(name) = rest.split_once(' ').map(|(_, r)| r) {
                let end = name.find([':', ' ']).unwrap_or(name.len());
                reported.push(&name[..end]);
            }
        }
    }
    planned.retain(|t| !reported.contains(&t.as_str()));
    planned
}

/// Parse the top-level KTAP output of `fctracetest` from the console.
pub fn parse_ktap(console: &str) -> Ktap {
    let mut k = Ktap::default();
    for line in console.lines() {
        let line = line.trim_end_matches('\r');
        if line.trim() == "KTAP version 1" {
            // A new run restarts parsing (only one is expected).
            k = Ktap {
                started: true,
                ..Ktap::default()
            };
            continue;
        }
        if !k.started {
            continue;
        }
        if let Some(n) = line.strip_prefix("1..") {
            if let Ok(n) = n.trim().parse() {
                k.plan = Some(n);
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("# Totals:") {
            k.totals_seen = true;
            let get = |key: &str| -> Option<usize> {
                let i = rest.find(key)? + key.len();
                rest[i..]
                    .chars()
                    .take_while(|c| c.is_ascii_digit())
                    .collect::<String>()
                    .parse()
                    .ok()
            };
            if let (Some(p), Some(f), Some(s)) = (get("pass:"), get("fail:"), get("skip:")) {
                k.totals = Some(Summary {
                    passed: p,
                    failed: f,
                    skipped: s,
                });
            }
            continue;
        }
        let (ok, rest) = if let Some(r) = line.strip_prefix("ok ") {
            (true, r)
        } else if let Some(r) = line.strip_prefix("not ok ") {
            (false, r)
        } else {
            continue;
        };
        let (num, name) = rest.split_once(' ').unwrap_or((rest, ""));
        let Ok(num) = num.parse::<usize>() else {
            continue;
        };
        k.results += 1;
        let skip = name.contains("# SKIP");
        if skip {
            k.parsed.skipped += 1;
        } else if ok {
            k.parsed.passed += 1;
        } else {
            k.parsed.failed += 1;
            k.failed_names.push((num, name.trim().to_string()));
        }
    }
    k
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_timeouts_as_fctracetest_gives_them() {
        let t = "#!/bin/sh\n# description: x\n# timeout: 300\n# debug-timeout: 2400\n";
        assert_eq!(test_timeout_of(t, 120, false), 300);
        assert_eq!(test_timeout_of(t, 600, false), 600);
        assert_eq!(test_timeout_of(t, 1200, true), 2400);
        assert_eq!(test_timeout_of("# description: y\n", 120, true), 120);
        // The selftests declare longer ones than the lab kernel's default.
        assert!(longest_test_timeout(120, false) >= 300);
        assert!(longest_test_timeout(1200, true) >= 2400);
    }

    const RUN: &str = "\
[    1.0] boot
KTAP version 1
1..4
ok 1 control/set_pid.tc: set_pid accepts PIDs and rejects junk
# FAIL: expected Invalid argument
# + echo x
not ok 2 control/filter.tc: filter rejects junk
ok 3 trace/fork.tc: follows forks # SKIP
ok 4 trace/basic.tc: basic
# Totals: pass:2 fail:1 skip:1
FCTRACE-EXIT: 1
";

    #[test]
    fn parses_run() {
        let k = parse_ktap(RUN);
        assert!(k.started && k.totals_seen);
        assert_eq!(k.plan, Some(4));
        assert_eq!(k.results, 4);
        assert_eq!(
            k.parsed,
            Summary {
                passed: 2,
                failed: 1,
                skipped: 1
            }
        );
        assert_eq!(
            k.summary(),
            Summary {
                passed: 2,
                failed: 1,
                skipped: 1
            }
        );
        assert_eq!(
            k.failed_names,
            vec![(2, "control/filter.tc: filter rejects junk".to_string())]
        );
    }

    #[test]
    fn unfinished_run_counts_missing_as_failed() {
        let k = parse_ktap("KTAP version 1\n1..3\nok 1 a: a\n[ 5.0] Kernel panic\n");
        assert!(!k.totals_seen);
        assert_eq!(
            k.summary(),
            Summary {
                passed: 1,
                failed: 2,
                skipped: 0
            }
        );
    }

    #[test]
    fn totals_win_over_garbled_lines() {
        let k = parse_ktap("KTAP version 1\n1..2\nok 1 a: a\nok[  1.000000] x\n 2 b: b\n# Totals: pass:2 fail:0 skip:0\n");
        assert_eq!(
            k.summary(),
            Summary {
                passed: 2,
                failed: 0,
                skipped: 0
            }
        );
    }

    #[test]
    fn shards_merge() {
        let a = parse_ktap(
            "KTAP version 1\n1..2\nok 1 a: a\nnot ok 2 c: c\n# Totals: pass:1 fail:1 skip:0\n",
        );
        let b = parse_ktap(
            "KTAP version 1\n1..1\nok 1 b: b # SKIP x\n# Totals: pass:0 fail:0 skip:1\n",
        );
        let k = Ktap::merge(vec![a, b]);
        assert!(k.started && k.totals_seen);
        assert_eq!(k.plan, Some(3));
        assert_eq!(
            k.summary(),
            Summary {
                passed: 1,
                failed: 1,
                skipped: 1
            }
        );
        assert_eq!(k.failed_names.len(), 1);
        // a shard that did not finish makes the whole run unfinished
        let c = parse_ktap("KTAP version 1\n1..2\nok 1 d: d\n");
        let k = Ktap::merge(vec![
            parse_ktap("KTAP version 1\n1..1\nok 1 a: a\n# Totals: pass:1 fail:0 skip:0\n"),
            c,
        ]);
        assert!(!k.totals_seen);
        assert_eq!(
            k.summary(),
            Summary {
                passed: 2,
                failed: 1,
                skipped: 0
            }
        );
    }

    #[test]
    fn budget_cut_counts_missing_as_skipped() {
        let console = "KTAP version 1\n1..4\n# planned: a.tc b.tc c/d.tc kmemleak\nok 1 a.tc: a\n\
                       not ok 2 b.tc: b\n# time: 3s c/d.tc\n";
        let mut k = parse_ktap(console);
        k.cut = true;
        assert_eq!(
            k.summary(),
            Summary {
                passed: 1,
                failed: 1,
                skipped: 2
            }
        );
        assert_eq!(not_reported(console), vec!["c/d.tc", "kmemleak"]);
        // a cut guest has finished as far as it could; one that stopped without totals has not
        assert!(k.finished() && !parse_ktap("KTAP version 1\n1..1\nok 1 e.tc\n").finished());
        // a finished guest beside a cut one: only the cut one's missing tests are skipped
        let done = parse_ktap("KTAP version 1\n1..1\nok 1 e.tc\n# Totals: pass:1 fail:0 skip:0\n");
        let m = Ktap::merge(vec![done, k]);
        assert!(m.cut && !m.totals_seen);
        assert_eq!(
            m.summary(),
            Summary {
                passed: 2,
                failed: 1,
                skipped: 2
            }
        );
        // not cut, the same output counts the missing ones as failed
        assert_eq!(
            parse_ktap(console).summary(),
            Summary {
                passed: 1,
                failed: 3,
                skipped: 0
            }
        );
    }

    #[test]
    fn not_reported_reads_the_last_run() {
        let console =
            "KTAP version 1\n# planned: x.tc\nKTAP version 1\n1..2\n# planned: a.tc b.tc\n\
                       ok 1 a.tc # SKIP no ftrace\n";
        assert_eq!(not_reported(console), vec!["b.tc"]);
        assert!(not_reported("no run\n").is_empty());
    }

    #[test]
    fn matrix_rows_by_cpu_append_and_threads() {
        // (MATRIX is a `const`: rows are told apart by their checked lines, not addresses.)
        let row = |cpu, append, threads| {
            matrix_case(cpu, append, threads)
                .map(|c| MATRIX.iter().position(|m| m.expect == c.expect))
        };
        assert_eq!(row("EPYC-Rome", "", 2), Some(Some(1)));
        assert_eq!(
            row("EPYC-Rome", " spec_rstack_overflow=off ", 1),
            Some(Some(2))
        );
        // Without SMT a 7.x kernel makes another choice than row 2 checks for.
        assert_eq!(row("EPYC-Rome", "", 1), None);
        assert_eq!(row("max", "", 1), Some(Some(0)));
        // Each row is a distinct (cpu, append, threads).
        for (i, c) in MATRIX.iter().enumerate() {
            assert_eq!(row(c.cpu, c.append, c.threads), Some(Some(i)));
        }
    }

    #[test]
    fn kselftest_nesting() {
        let console = "TAP version 13\n1..1\n# timeout set to 0\n# selftests: fctrace: fctracetest-ktap\n\
                       # KTAP version 1\n# 1..2\n# # planned: a.tc b.tc\n[    1.000] a kernel line\n\
                       # ok 1 a.tc: A\n# not ok 2 b.tc: B\n# # Totals: pass:1 fail:1 skip:0\n\
                       not ok 1 selftests: fctrace: fctracetest-ktap # exit=1\n";
        let k = parse_ktap(&kselftest_inner(console));
        assert!(k.finished());
        assert_eq!(k.results, 2);
        assert_eq!(k.failed_names, vec![(2, "b.tc: B".to_string())]);
        assert!(kselftest_inner(console).contains("[    1.000] a kernel line"));
    }

    #[test]
    fn no_ktap() {
        let k = parse_ktap("ok 1 not ktap yet\n");
        assert!(!k.started);
        assert_eq!(k.summary(), Summary::default());
    }
}
