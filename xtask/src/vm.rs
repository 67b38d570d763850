// SPDX-License-Identifier: GPL-2.0

//! `cargo xtask vm [--script FILE] [--debug] [--timeout SECS] [--smp N] [--mem MB]`:
//! boot the test kernel with the initramfs in QEMU (TCG; KVM guests hang on
//! the build machines).
//!
//! With `--script FILE`, FILE is put into the initramfs as `/run-script` and
//! the kernel command line gets `fctrace.script=/run-script`; the guest init
//! runs it with `sh`, prints `FCTRACE-EXIT: <status>` and powers off. The
//! console is streamed live and saved to `target/fctrace/console.log`, then
//! scanned for kernel problem reports (see `scan.rs`). QEMU runs through duct; the
//! console is read from its stdout pipe while a watchdog thread kills it at the timeout.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::Duration;

use crate::scan::{self, Report};
use crate::util::{bail, echo, note, out_dir, secs, Result};

pub const DEFAULT_TIMEOUT: u64 = 1200;
pub const EXIT_MARKER: &str = "FCTRACE-EXIT: ";
/// The emulator of the guest's architecture.
fn qemu_binary() -> &'static str {
    if crate::kernel::is_arm64() {
        "qemu-system-aarch64"
    } else {
        "qemu-system-x86_64"
    }
}

/// The guest's size and time limit (`vm`, `test`, `demo`, `bench`).
#[derive(clap::Args)]
pub struct VmOpts {
    /// Time limit for the whole guest run
    #[arg(long, value_name = "SECS", default_value = "1200", value_parser = secs)]
    pub timeout: Duration,
    /// Virtual CPUs
    #[arg(long, value_name = "N", default_value_t = 2)]
    pub smp: u32,
    /// Threads per core (SMT): the `--smp` CPUs as cores of one socket with N threads
    /// each (a kernel decides some mitigations by whether SMT is possible)
    #[arg(long, value_name = "N", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=4))]
    pub threads: u32,
    /// Guest memory
    #[arg(long, value_name = "MB", default_value_t = 1024)]
    pub mem: u32,
    /// QEMU CPU model (`-cpu`): the CPU whose bugs decide the kernel's mitigations
    /// [default: max; `test --profile distro`: each model of its CPU matrix]
    #[arg(long, value_name = "MODEL")]
    pub cpu: Option<String>,
    /// More kernel command line (e.g. `retbleed=stuff`)
    #[arg(long, value_name = "ARGS", default_value = "")]
    pub append: String,
}

/// `cargo xtask vm`.
#[derive(clap::Args)]
pub struct VmArgs {
    /// Run FILE in the guest (with `sh`), stream the console and exit with its status
    #[arg(long, value_name = "FILE")]
    pub script: Option<PathBuf>,
    /// Boot the debug kernel (lockdep, KASAN, kmemleak, ...)
    #[arg(long)]
    pub debug: bool,
    #[command(flatten)]
    pub opts: VmOpts,
}

pub struct VmRun {
    /// The guest script's exit status (`None`: the marker never appeared).
    pub exit: Option<i32>,
    pub timed_out: bool,
    /// How long the guest had printed nothing when it ended (a frozen guest is silent).
    pub silent: Duration,
    pub console: String,
    pub reports: Vec<Report>,
}

pub fn cmd(args: VmArgs) -> Result<i32> {
    crate::kernel::set_debug(args.debug);
    if let Some(s) = &args.script {
        if !s.is_file() {
            bail!("--script {}: no such file", s.display());
        }
    }
    let script = args.script.map(std::path::absolute).transpose()?;
    let (kdir, initrd) = prepare(false, script.as_deref())?;
    match script {
        None => interactive(&kdir, &initrd, &args.opts),
        Some(_) => {
            let run = run_script(&kdir, &initrd, &args.opts)?;
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

fn qemu(
    kdir: &Path,
    initrd: &Path,
    opts: &VmOpts,
    append: &str,
    interactive: bool,
) -> duct::Expression {
    // Single-threaded TCG by default: with thread=multi, QEMU 7.2 lets a vCPU run stale
    // translated code after another vCPU patched it, so a removed kprobe's int3 can still
    // execute long after text_poke_sync() ("Oops: int3" on an address whose byte is back).
    // Real hardware serialises that. FCTRACE_TCG_THREAD=multi brings back the faster mode.
    let thread = std::env::var("FCTRACE_TCG_THREAD").unwrap_or_else(|_| "single".into());
    let (accel, smp, mem) = (
        format!("tcg,thread={thread}"),
        if opts.threads > 1 {
            format!("{},threads={}", opts.smp, opts.threads)
        } else {
            opts.smp.to_string()
        },
        opts.mem.to_string(),
    );
    let append = if opts.append.is_empty() {
        append.to_string()
    } else {
        format!("{append} {}", opts.append)
    };
    let append = append.as_str();
    // On arm64, QEMU's own pointer-authentication algorithm (`pauth-impdef`): the
    // architected QARMA is many times slower to emulate, and the kernel signs and
    // authenticates the return address of most functions either way.
    let cpu = match (opts.cpu.as_deref(), crate::kernel::is_arm64()) {
        (Some(c), _) => c,
        (None, true) => "max,pauth-impdef=on",
        (None, false) => "max",
    };
    let mut args: Vec<OsString> = if crate::kernel::is_arm64() {
        vec!["-M".into(), "virt".into()]
    } else {
        Vec::new()
    };
    args.extend(
        [
            "-accel", &accel, "-cpu", cpu, "-smp", &smp, "-m", &mem, "-kernel",
        ]
        .map(OsString::from),
    );
    args.extend([
        crate::kernel::image(kdir).into(),
        "-initrd".into(),
        initrd.into(),
    ]);
    args.extend(["-append", append, "-display", "none", "-no-reboot"].map(Into::into));
    // The scratch disk (`/dev/vda` where the kernel has virtio-blk); every guest writes to
    // its own temporary overlay (`snapshot=on`), so guests side by side share the image.
    if let Some(disk) = scratch_disk() {
        let mut drive = OsString::from("file=");
        drive.push(disk);
        drive.push(",if=virtio,format=raw,snapshot=on");
        args.extend(["-drive".into(), drive]);
    }
    let serial: &[&str] = if interactive {
        &["-serial", "mon:stdio"]
    } else {
        &["-serial", "stdio", "-monitor", "none"]
    };
    args.extend(serial.iter().map(Into::into));
    // More QEMU options for experiments, e.g. FCTRACE_QEMU_ARGS="-icount shift=0": with a
    // clock that counts instructions, the guest's timings no longer vary with the host's
    // load (profiling the handlers; not for the tests, whose timeouts are real time).
    if let Ok(extra) = std::env::var("FCTRACE_QEMU_ARGS") {
        args.extend(extra.split_whitespace().map(OsString::from));
    }
    duct::cmd(qemu_binary(), args).before_spawn(echo)
}

/// Size of the scratch disk.
const SCRATCH_MB: u64 = 64;

/// `target/fctrace/scratch-ext4.img`: an empty ext4 file system for the guests (tests
/// mount `/dev/vda`), made once with `mkfs.ext4`. `None` (with a note) if it cannot be
/// made: the guest then has no disk and the tests that need one are unsupported.
/// Guests started side by side (`test --jobs`) ask at once: one makes it while the
/// others wait, and an xtask beside this one makes its own copy under another
/// temporary name (the last rename wins; both are empty file systems).
fn scratch_disk() -> Option<PathBuf> {
    static MAKING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _making = MAKING.lock().unwrap_or_else(|e| e.into_inner());
    let img = out_dir().join("scratch-ext4.img");
    if img.is_file() {
        return Some(img);
    }
    let tmp = out_dir().join(format!("scratch-ext4.img.{}.tmp", std::process::id()));
    let made = (|| -> Result<()> {
        std::fs::create_dir_all(out_dir())?;
        std::fs::File::create(&tmp)?.set_len(SCRATCH_MB << 20)?;
        duct::cmd!("mkfs.ext4", "-q", "-F", "-L", "fctrace", &tmp)
            .before_spawn(echo)
            .run()?;
        std::fs::rename(&tmp, &img)?;
        Ok(())
    })();
    match made {
        Ok(()) => Some(img),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            note(format!("WARNING: no scratch disk for the guest: {e}"));
            None
        }
    }
}

const BASE_APPEND: &str = "panic=-1 printk.time=1";

/// The kernel's command line for every guest: the serial console of the machine, then
/// [`BASE_APPEND`].
fn base_append() -> String {
    let console = if crate::kernel::is_arm64() {
        "ttyAMA0"
    } else {
        "ttyS0"
    };
    format!("console={console} {BASE_APPEND}")
}

fn interactive(kdir: &Path, initrd: &Path, opts: &VmOpts) -> Result<i32> {
    if !std::io::stdin().is_terminal() {
        bail!("`vm` without --script needs a terminal on stdin (use --script FILE)");
    }
    note("interactive guest: exit the shell to power off (or Ctrl-A X to kill QEMU)");
    // `-serial mon:stdio`: Ctrl-A X quits QEMU, Ctrl-A C toggles the monitor.
    let out = qemu(kdir, initrd, opts, &base_append(), true)
        .unchecked()
        .run()
        .map_err(|e| format!("{}: {e}", qemu_binary()))?;
    Ok(out.status.code().unwrap_or(1))
}

/// Boot with the script baked into `initrd` (see [`prepare`]) and collect
/// its status and the console.
pub fn run_script(kdir: &Path, initrd: &Path, opts: &VmOpts) -> Result<VmRun> {
    run_script_with(kdir, initrd, opts, "", &out_dir().join("console.log"))
}

/// [`run_script`] with more kernel command line (`extra`, read by the guest script from
/// `/proc/cmdline`) and the console saved to `log`: for guests that run side by side.
pub fn run_script_with(
    kdir: &Path,
    initrd: &Path,
    opts: &VmOpts,
    extra: &str,
    log: &Path,
) -> Result<VmRun> {
    let mut append = format!(
        "{} fctrace.script={}",
        base_append(),
        crate::initramfs::GUEST_SCRIPT
    );
    if !extra.is_empty() {
        append.push(' ');
        append.push_str(extra);
    }
    let (console, timed_out, silent) =
        run_streaming(qemu(kdir, initrd, opts, &append, false), opts.timeout, log)?;
    note(format!("console saved to {}", log.display()));
    Ok(VmRun {
        exit: parse_exit(&console),
        timed_out,
        silent,
        reports: scan::scan(&console),
        console,
    })
}

/// Run `qemu` with stdin closed, echoing its stdout live, line by line, to our stdout and
/// into the file `log`, and kill it after `timeout`. Returns the output (`\r` removed),
/// whether the timeout killed it, and how long it had been silent at the end.
fn run_streaming(
    qemu: duct::Expression,
    timeout: Duration,
    log: &Path,
) -> Result<(String, bool, Duration)> {
    let mut log_file = std::fs::File::create(log).map_err(|e| format!("{}: {e}", log.display()))?;
    let child = &qemu
        .stdin_null()
        .unchecked()
        .reader()
        .map_err(|e| format!("cannot run {}: {e}", qemu_binary()))?;
    let (done, finished) = mpsc::channel::<()>();
    let mut output = String::new();
    let mut last_line = std::time::Instant::now();
    // A watchdog thread kills QEMU at the deadline, which ends the read below with EOF.
    let timed_out = std::thread::scope(|s| {
        let watchdog = s.spawn(move || {
            let expired = finished.recv_timeout(timeout) == Err(mpsc::RecvTimeoutError::Timeout);
            if expired {
                note(format!(
                    "timeout after {} s: killing {:?}",
                    timeout.as_secs(),
                    qemu_binary()
                ));
                let _ = child.kill();
            }
            expired
        });
        let mut r = BufReader::new(child);
        let mut stdout = std::io::stdout();
        let mut buf = Vec::new();
        // Until EOF (QEMU exited and was reaped) or a read error.
        while let Ok(1..) = r.read_until(b'\n', &mut buf) {
            let line: String = String::from_utf8_lossy(&buf)
                .chars()
                .filter(|&c| c != '\r')
                .collect();
            let _ = stdout.write_all(line.as_bytes());
            let _ = stdout.flush();
            let _ = log_file.write_all(line.as_bytes());
            output.push_str(&line);
            last_line = std::time::Instant::now();
            buf.clear();
        }
        // After a read error QEMU may still run (after EOF this is a no-op).
        let _ = child.kill();
        drop(done);
        watchdog.join().expect("watchdog thread")
    });
    if !output.ends_with('\n') && !output.is_empty() {
        println!();
    }
    Ok((output, timed_out, last_line.elapsed()))
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
        let kind = if r.requested {
            "SysRq backtrace"
        } else {
            "kernel report"
        };
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
    let out = duct::cmd!("bash", script, vmlinux, kdir, crate::module::module_dir())
        .env("LLVM", "1")
        .stdin_bytes(raw)
        .stdout_capture()
        .stderr_capture()
        .unchecked()
        .before_spawn(echo)
        .run()
        .ok()?;
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

    #[test]
    fn streams_and_times_out() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("console.log");
        let sh = |script: &str| duct::cmd!("sh", "-c", script);
        let (out, timed_out, _) =
            run_streaming(sh("printf 'a\\r\\nb'"), Duration::from_secs(60), &log).unwrap();
        assert_eq!((out.as_str(), timed_out), ("a\nb", false));
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "a\nb");
        let start = std::time::Instant::now();
        let (out, timed_out, silent) =
            run_streaming(sh("echo x; exec sleep 30"), Duration::from_secs(1), &log).unwrap();
        assert_eq!((out.as_str(), timed_out), ("x\n", true));
        assert!(silent >= Duration::from_millis(900), "{silent:?}");
        assert!(start.elapsed() < Duration::from_secs(10));
    }
}
