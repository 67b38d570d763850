// SPDX-License-Identifier: GPL-2.0

//! `cargo xtask demo [--timeout SECS] [--smp N] [--mem MB]`: build everything
//! and boot the guest with `scripts/guest/demo.sh` as the script. The guest prints the
//! trace of its second part (every system call of a small `cat`) between two marker
//! lines; the demo cuts it out of the console into `target/fctrace/demo.trace` and makes
//! a flamegraph (`demo.svg`) and a Chrome trace-event file (`demo.json`, for Perfetto's
//! UI) of it with `fctrace-report`.

use std::path::Path;

use crate::kernel::Profile;
use crate::util::{bail, echo, note, out_dir, repo_root, Result};
use crate::vm::{self, VmOpts};

const BEGIN: &str = "FCTRACE-TRACE-BEGIN";
const END: &str = "FCTRACE-TRACE-END";

const PLACEHOLDER: &str = "#!/bin/sh
# Placeholder demo (created by `cargo xtask demo` because demo.sh was missing).
ls /sys/kernel/fctrace
";

/// The demo's kernel when `--profile` is not given: Debian's own (no kernel to build, so
/// the first trace comes sooner on a fresh machine, and on a kernel people install) where
/// the module can be built in its build root, which takes root (`debootstrap`, `chroot`);
/// else the default profile's.
pub fn default_profile() -> Profile {
    if crate::setup::is_root() {
        Profile::Debian
    } else {
        note("demo: not root, so not Debian's kernel (its build root needs debootstrap and chroot): building the default kernel");
        Profile::Default
    }
}

pub fn cmd(opts: VmOpts) -> Result<i32> {
    let demo = repo_root().join("scripts/guest/demo.sh");
    if !demo.exists() {
        note(format!(
            "{} is missing; creating a placeholder",
            demo.display()
        ));
        std::fs::write(&demo, PLACEHOLDER)?;
    }
    let (kdir, initrd) = vm::prepare(false, Some(&demo))?;
    let run = vm::run_script(&kdir, &initrd, &opts)?;
    let status = vm::finish(&kdir, &run);
    if status == 0 {
        reports(&run.console)?;
    }
    Ok(status)
}

/// The lines between the markers (the console's line ends are `\r\n`).
fn cut_trace(console: &str) -> Option<String> {
    let mut out = String::new();
    let mut inside = false;
    for line in console.lines() {
        let line = line.trim_end_matches('\r');
        match (inside, line) {
            (false, BEGIN) => inside = true,
            (true, END) => return Some(out),
            (true, l) => {
                out.push_str(l);
                out.push('\n');
            }
            _ => {}
        }
    }
    None
}

/// Writes the trace, its flamegraph and its Chrome trace-event file under
/// `target/fctrace/`, and says where.
fn reports(console: &str) -> Result<()> {
    let Some(trace) = cut_trace(console) else {
        bail!("the guest printed no trace between {BEGIN} and {END}");
    };
    let dir = out_dir();
    let file = dir.join("demo.trace");
    std::fs::write(&file, &trace)?;
    let svg = dir.join("demo.svg");
    let json = dir.join("demo.json");
    // --lenient: a kernel message printed on the console while the guest wrote the
    // trace would be a line of neither.
    report(&["--lenient", "flamegraph"], &file, &svg)?;
    report(&["--lenient", "chrome"], &file, &json)?;
    note(format!(
        "demo: the trace of part 2 is {}; its flamegraph {} (open it in a browser), \
         its Chrome trace-event file {} (open it in https://ui.perfetto.dev or \
         chrome://tracing); more: cargo run -p fctrace-report -- --help",
        file.display(),
        svg.display(),
        json.display()
    ));
    Ok(())
}

/// Runs `fctrace-report ARGS TRACE -o OUT`.
fn report(args: &[&str], trace: &Path, out: &Path) -> Result<()> {
    let mut c = std::process::Command::new("cargo");
    c.args(["run", "--quiet", "-p", "fctrace-report", "--"])
        .args(args)
        .arg(trace)
        .arg("-o")
        .arg(out)
        .current_dir(repo_root());
    echo(&mut c)?;
    let st = c.status()?;
    if !st.success() {
        bail!("fctrace-report {} failed ({st})", args.join(" "));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_trace_between_the_markers() {
        let console = "boot\r\nFCTRACE-TRACE-BEGIN\r\n# tracer: fctrace\r\n 0) a-1 |  |  f();\r\nFCTRACE-TRACE-END\r\nFCTRACE-EXIT: 0\r\n";
        assert_eq!(
            cut_trace(console).as_deref(),
            Some("# tracer: fctrace\n 0) a-1 |  |  f();\n")
        );
        assert_eq!(cut_trace("FCTRACE-TRACE-BEGIN\nx\n"), None);
    }
}
