//! `cargo xtask vm [--script FILE] [--timeout SECS] [--smp N] [--mem MB]`:
//! boot the test kernel with the initramfs in QEMU (TCG; KVM guests hang on
//! the build machines).
//!
//! With `--script FILE`, FILE is put into the initramfs as `/run-script` and
//! the kernel command line gets `fctrace.script=/run-script`; the guest init
//! runs it with `sh`, prints `FCTRACE-EXIT: <status>` and powers off. The
//! console is streamed live and saved to `target/fctrace/console.log`, then
//! scanned for kernel problem reports (see `scan.rs`).

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::scan::{self, Report};
use crate::util::{bail, echo_cmd, note, out_dir, run_streaming, Args, Result};

pub const DEFAULT_TIMEOUT: u64 = 1200;
pub const EXIT_MARKER: &str = "FCTRACE-EXIT: ";

pub struct VmOpts {
    pub smp: u32,
    pub mem: u32,
    pub timeout: Duration,
}

impl Default for VmOpts {
    fn default() -> Self {
        VmOpts {
            smp: 2,
            mem: 1024,
            timeout: Duration::from_secs(DEFAULT_TIMEOUT),
        }
    }
}

impl VmOpts {
    /// Parse `--timeout/--smp/--mem` from `args`.
    pub fn from_args(args: &mut Args) -> Result<VmOpts> {
        let d = VmOpts::default();
        Ok(VmOpts {
            smp: args.opt_num("--smp")?.unwrap_or(d.smp),
            mem: args.opt_num("--mem")?.unwrap_or(d.mem),
            timeout: args
                .opt_num("--timeout")?
                .map(Duration::from_secs)
                .unwrap_or(d.timeout),
        })
    }
}

pub struct VmRun {
    /// The guest script's exit status (`None`: the marker never appeared).
    pub exit: Option<i32>,
    pub timed_out: bool,
    pub console: String,
    pub reports: Vec<Report>,
}

pub fn cmd(mut args: Args) -> Result<i32> {
    crate::kernel::set_debug(args.flag("--debug"));
    let script = args.opt("--script")?.map(PathBuf::from);
    let opts = VmOpts::from_args(&mut args)?;
    args.finish()?;
    if let Some(s) = &script {
        if !s.is_file() {
            bail!("--script {}: no such file", s.display());
        }
    }
    let script = script.map(std::path::absolute).transpose()?;
    let (kdir, initrd) = prepare(false, script.as_deref())?;
    match script {
        None => interactive(&kdir, &initrd, &opts),
        Some(_) => {
            let run = run_script(&kdir, &initrd, &opts)?;
            Ok(finish(&kdir, &run))
        }
    }
}

/// Setup, kernel, module, initramfs. With `require_module`, a module build
/// failure is an error; otherwise the guest boots without the module.
pub fn prepare(require_module: bool, script: Option<&Path>) -> Result<(PathBuf, PathBuf)> {
    crate::setup::ensure()?;
    let kdir = crate::kernel::kdir()?;
    let ko = match crate::module::build(&kdir) {
        Ok(ko) => Some(ko),
        Err(e) if !require_module => {
            note(format!("WARNING: {e}; booting without fctrace.ko"));
            None
        }
        Err(e) => return Err(e),
    };
    let initrd = crate::initramfs::build(ko.as_deref(), script)?;
    Ok((kdir, initrd))
}

fn qemu(kdir: &Path, initrd: &Path, opts: &VmOpts, append: &str, interactive: bool) -> Command {
    let mut c = Command::new("qemu-system-x86_64");
    // Single-threaded TCG by default: with thread=multi, QEMU 7.2 lets a vCPU run stale
    // translated code after another vCPU patched it, so a removed kprobe's int3 can still
    // execute long after text_poke_sync() ("Oops: int3" on an address whose byte is back).
    // Real hardware serialises that. FCTRACE_TCG_THREAD=multi brings back the faster mode.
    let thread = std::env::var("FCTRACE_TCG_THREAD").unwrap_or_else(|_| "single".into());
    c.args(["-accel", &format!("tcg,thread={thread}"), "-cpu", "max"])
        .args(["-smp", &opts.smp.to_string(), "-m", &opts.mem.to_string()])
        .arg("-kernel")
        .arg(kdir.join("arch/x86/boot/bzImage"))
        .arg("-initrd")
        .arg(initrd)
        .args(["-append", append])
        .args(["-display", "none", "-no-reboot"]);
    if interactive {
        c.args(["-serial", "mon:stdio"]);
    } else {
        c.args(["-serial", "stdio", "-monitor", "none"]);
    }
    c
}

const BASE_APPEND: &str = "console=ttyS0 panic=-1 printk.time=1";

fn interactive(kdir: &Path, initrd: &Path, opts: &VmOpts) -> Result<i32> {
    if !std::io::stdin().is_terminal() {
        bail!("`vm` without --script needs a terminal on stdin (use --script FILE)");
    }
    // `-serial mon:stdio`: Ctrl-A X quits QEMU, Ctrl-A C toggles the monitor.
    let mut c = qemu(kdir, initrd, opts, BASE_APPEND, true);
    note("interactive guest: exit the shell to power off (or Ctrl-A X to kill QEMU)");
    echo_cmd(&c);
    let st = c.status().map_err(|e| format!("qemu-system-x86_64: {e}"))?;
    Ok(st.code().unwrap_or(1))
}

/// Boot with the script baked into `initrd` (see [`prepare`]) and collect
/// its status and the console.
pub fn run_script(kdir: &Path, initrd: &Path, opts: &VmOpts) -> Result<VmRun> {
    run_script_with(kdir, initrd, opts, "", &out_dir().join("console.log"))
}

/// [`run_script`] with more kernel command line (`extra`, read by the guest script from
/// `/proc/cmdline`) and the console saved to `log`: for guests that run side by side.
pub fn run_script_with(kdir: &Path, initrd: &Path, opts: &VmOpts, extra: &str, log: &Path) -> Result<VmRun> {
    let mut append = format!(
        "{BASE_APPEND} fctrace.script={}",
        crate::initramfs::GUEST_SCRIPT
    );
    if !extra.is_empty() {
        append.push(' ');
        append.push_str(extra);
    }
    let c = qemu(kdir, initrd, opts, &append, false);
    let log = log.to_path_buf();
    let s = run_streaming(c, opts.timeout, Some(&log))?;
    let exit = parse_exit(&s.output);
    let reports = scan::scan(&s.output);
    note(format!("console saved to {}", log.display()));
    Ok(VmRun {
        exit,
        timed_out: s.status.is_none(),
        console: s.output,
        reports,
    })
}

/// Print the outcome of a script run; returns the exit code for the command.
pub fn finish(kdir: &Path, run: &VmRun) -> i32 {
    let problems = print_reports(kdir, &run.reports);
    match run.exit {
        None => {
            if run.timed_out {
                note("guest timed out before the script finished");
            } else {
                note("guest stopped before the script finished (no FCTRACE-EXIT marker)");
            }
            1
        }
        Some(code) => {
            note(format!("guest script exited with status {code}"));
            if problems && code == 0 {
                1
            } else {
                code
            }
        }
    }
}

/// The status from the last `FCTRACE-EXIT: <n>` marker on the console.
pub fn parse_exit(console: &str) -> Option<i32> {
    console
        .lines()
        .rev()
        .filter_map(|l| l.find(EXIT_MARKER).map(|i| &l[i + EXIT_MARKER.len()..]))
        .filter_map(|rest| {
            let n: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
            n.parse().ok()
        })
        .next()
}

/// Print each report, decoded with `scripts/decode_stacktrace.sh` when that
/// works. Returns whether there was any kernel problem (backtraces asked for
/// with SysRq are printed, but are not problems).
pub fn print_reports(kdir: &Path, reports: &[Report]) -> bool {
    if reports.is_empty() {
        return false;
    }
    let problems = problem_count(reports);
    eprintln!();
    if problems > 0 {
        eprintln!("xtask: KERNEL PROBLEM(S) IN THE GUEST CONSOLE: {problems}");
    }
    if problems < reports.len() {
        eprintln!(
            "xtask: backtraces from a SysRq dump (asked for before a test timed out): {}",
            reports.len() - problems
        );
    }
    for (n, r) in reports.iter().enumerate() {
        let kind = if r.requested { "SysRq backtrace" } else { "kernel report" };
        eprintln!(
            "==================== {kind} {} of {}: {}",
            n + 1,
            reports.len(),
            r.title
        );
        let raw = r.lines.join("\n") + "\n";
        match decode(kdir, &raw) {
            Some(decoded) => eprint!("{decoded}"),
            None => eprint!("{raw}"),
        }
    }
    eprintln!("==================== end of kernel reports");
    problems > 0
}

/// The reports that are kernel problems (not backtraces asked for with SysRq).
pub fn problem_count(reports: &[Report]) -> usize {
    reports.iter().filter(|r| !r.requested).count()
}

fn decode(kdir: &Path, raw: &str) -> Option<String> {
    // O= build dirs keep the scripts in the source tree (`<KDIR>/source`).
    let script = [
        "scripts/decode_stacktrace.sh",
        "source/scripts/decode_stacktrace.sh",
    ]
    .iter()
    .map(|p| kdir.join(p))
    .find(|p| p.exists())?;
    let vmlinux = kdir.join("vmlinux");
    if !vmlinux.exists() {
        return None;
    }
    let mut f = tempfile::NamedTempFile::new().ok()?;
    std::io::Write::write_all(&mut f, raw.as_bytes()).ok()?;
    let mut c = Command::new("bash");
    c.arg(&script)
        .arg(&vmlinux)
        .arg(kdir)
        .arg(crate::module::module_dir())
        .env("LLVM", "1")
        .stdin(std::fs::File::open(f.path()).ok()?);
    echo_cmd(&c);
    let out = c.output().ok()?;
    let s = String::from_utf8_lossy(&out.stdout).into_owned();
    (out.status.success() && !s.trim().is_empty()).then_some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_marker() {
        assert_eq!(parse_exit("a\nFCTRACE-EXIT: 3\n[ 1.0] reboot\n"), Some(3));
        assert_eq!(
            parse_exit("x FCTRACE-EXIT: 0\nFCTRACE-EXIT: 12\n"),
            Some(12)
        );
        assert_eq!(parse_exit("echo FCTRACE-EXIT: $status\n"), None);
        assert_eq!(parse_exit("nothing\n"), None);
    }
}
