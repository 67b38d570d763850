//! `cargo xtask`: build and test tooling for fctrace.
//!
//! Every command prints the commands it runs, never prompts and is
//! idempotent. Everything that loads the module runs inside a QEMU guest;
//! nothing is ever loaded into the host kernel.

mod bench;
mod demo;
mod initramfs;
mod kernel;
mod module;
mod scan;
mod setup;
mod test;
mod util;
mod vm;

use util::{Args, Result};

const HELP: &str = "\
cargo xtask <command> [options]

Commands:
  setup                 install missing build dependencies (apt packages,
                        rust-src, bindgen-cli 0.73.0); a no-op when complete
  kernel [--force]      configure and build the test kernel into
                        ${XDG_CACHE_HOME:-~/.cache}/fctrace/build-<version>-<key>;
                        prints the build directory. --force re-runs all steps
  module                build rust-kmod/fctrace.ko against that kernel
  initramfs             build target/fctrace/initramfs.cpio.gz
  vm [--script FILE] [--timeout SECS] [--smp N] [--mem MB]
                        boot the test kernel in QEMU (TCG). Interactive shell
                        without --script; with --script, run FILE in the guest,
                        stream the console (also target/fctrace/console.log)
                        and exit with the script's exit status
  test [PATTERN] [--debug] [--jobs N] [--timeout SECS] [--test-timeout SECS] [--budget SECS]
                        host `cargo test --workspace`, then the in-guest
                        selftests (selftests/fctracetest [PATTERN]); --debug on
                        the debug kernel, --jobs N in N guests side by side,
                        --budget: stop after SECS in all, tests not reached
                        by then count as skipped (CI's debug run)
  demo                  boot the guest and run scripts/guest/demo.sh
  bench [--reps N]      overhead of fctrace vs ftrace function_graph vs none (JSON in target/fctrace)
";

fn main() {
    util::ensure_cargo_bin_on_path();
    let mut argv = std::env::args_os().skip(1);
    let cmd = argv.next().map(|c| c.to_string_lossy().into_owned());
    let rest: Vec<_> = argv.collect();
    let result = match cmd.as_deref() {
        None | Some("help" | "-h" | "--help") => {
            print!("{HELP}");
            Ok(0)
        }
        Some(name) => Args::new(rest).and_then(|args| dispatch(name, args)),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("xtask: error: {e}");
            std::process::exit(1);
        }
    }
}

/// Runs one command; returns the process exit code.
fn dispatch(name: &str, args: Args) -> Result<i32> {
    match name {
        "setup" => setup::cmd(args),
        "kernel" => kernel::cmd(args),
        "module" => module::cmd(args),
        "initramfs" => initramfs::cmd(args),
        "vm" => vm::cmd(args),
        "test" => test::cmd(args),
        "demo" => demo::cmd(args),
        "bench" => bench::cmd(args),
        _ => Err(format!("unknown command `{name}`\n\n{HELP}").into()),
    }
}
