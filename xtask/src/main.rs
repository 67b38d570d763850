// SPDX-License-Identifier: GPL-2.0

//! `cargo xtask`: build and test tooling for fctrace.
//!
//! The commands and their flags are declared once, below, with clap; each command's
//! module has its typed flags struct and a `cmd` function. Child processes run through
//! duct. Every command prints the commands it runs, never prompts and is idempotent.
//! Everything that loads the module runs inside a QEMU guest; nothing is ever loaded into
//! the host kernel.
//!
//! `cargo test -p xtask` also runs the tidy checks (`tidy.rs`): documentation, defaults
//! and SPDX lines that must agree with the sources.

mod archive;
mod arm64;
mod bench;
mod deb;
mod debian;
mod demo;
mod fmt;
mod icount;
mod initramfs;
mod kernel;
#[cfg(test)]
mod layers;
mod module;
mod pahole;
mod scan;
mod setup;
mod test;
#[cfg(test)]
mod tidy;
mod util;
mod vm;

use clap::{CommandFactory, Parser, Subcommand};

/// Build and test tooling for fctrace (every command prints the commands it runs)
#[derive(Parser)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    args_override_self = true
)]
struct Cli {
    /// Kernel profile: `default` (tinyconfig + scripts/kernel-fragment.config, LLVM=1),
    /// `distro` (also scripts/kernel-distro.config, built with GCC like a distribution's)
    /// or `debian` (Debian's own 7.3 kernel, unmodified) [default: `debian` for `demo`
    /// when run as root, `default` otherwise]
    #[arg(long, global = true, value_enum)]
    profile: Option<kernel::Profile>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Install missing build dependencies (apt packages, rust-src, bindgen-cli 0.73.0);
    /// a no-op when complete
    Setup,
    /// Configure and build the test kernel; prints its build directory
    ///
    /// The build directory is ${XDG_CACHE_HOME:-~/.cache}/fctrace/build-<version>-<key>.
    Kernel(kernel::KernelArgs),
    /// Build rust-kmod/fctrace.ko against the test kernel
    Module,
    /// Build target/fctrace/initramfs.cpio.gz
    Initramfs,
    /// Boot the test kernel in QEMU (TCG)
    ///
    /// An interactive shell without --script; with --script, run FILE in the guest,
    /// stream the console (also to target/fctrace/console.log) and exit with the
    /// script's exit status.
    Vm(vm::VmArgs),
    /// Host `cargo test --workspace`, then the selftests in the guest
    ///
    /// First checks formatting (as `cargo xtask fmt --check`), then runs the host tests,
    /// then selftests/fctracetest [PATTERN] in the guest; --debug on the debug kernel,
    /// --jobs N in N guests side by side, --budget: stop after SECS in all, tests not
    /// reached by then count as skipped (CI's debug run). With --debug, --timeout
    /// defaults to 8 times as long.
    Test(test::TestArgs),
    /// Boot the guest and run scripts/guest/demo.sh
    Demo(vm::VmOpts),
    /// Overhead of fctrace vs ftrace function_graph vs none (JSON in target/fctrace)
    Bench(bench::BenchArgs),
    /// Guest instructions per traced read, counted by a QEMU plugin, and where they go
    Icount(icount::IcountArgs),
    /// Build the Debian package fctrace-dkms (target/fctrace/fctrace-dkms_<version>_all.deb)
    ///
    /// DKMS builds the module with it for each installed kernel built with Rust; it also
    /// installs the fctrace command and its manual page.
    Deb(deb::DebArgs),
    /// Format the workspace crates, xtask and the kernel module with rustfmt
    Fmt(fmt::FmtArgs),
}

fn main() {
    util::ensure_cargo_bin_on_path();
    let cli = Cli::parse();
    kernel::set_profile(match (cli.profile, &cli.command) {
        (Some(p), _) => p,
        (None, Some(Command::Demo(_))) => demo::default_profile(),
        (None, _) => kernel::Profile::Default,
    });
    let result = match cli.command {
        None => Cli::command().print_help().map(|()| 0).map_err(Into::into),
        Some(Command::Setup) => setup::cmd(),
        Some(Command::Kernel(args)) => kernel::cmd(args),
        Some(Command::Module) => module::cmd(),
        Some(Command::Initramfs) => initramfs::cmd(),
        Some(Command::Vm(args)) => vm::cmd(args),
        Some(Command::Test(args)) => test::cmd(args),
        Some(Command::Demo(opts)) => demo::cmd(opts),
        Some(Command::Bench(args)) => bench::cmd(args),
        Some(Command::Icount(args)) => icount::cmd(args),
        Some(Command::Deb(args)) => deb::cmd(args),
        Some(Command::Fmt(args)) => fmt::cmd(args),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("xtask: error: {e}");
            std::process::exit(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli() {
        Cli::command().debug_assert();
        let Some(Command::Test(t)) = Cli::parse_from(["xtask", "test"]).command else {
            panic!("not `test`")
        };
        assert_eq!(t.vm.timeout.as_secs(), vm::DEFAULT_TIMEOUT);
        // the last of a repeated option wins
        let Some(Command::Bench(b)) =
            Cli::parse_from(["xtask", "bench", "--reps", "1", "--reps=2", "--smp", "4"]).command
        else {
            panic!("not `bench`")
        };
        assert_eq!((b.reps, b.vm.smp, b.vm.mem), (2, 4, 1024));
    }
}
