// SPDX-License-Identifier: GPL-2.0

//! `cargo xtask fmt [--check]`: rustfmt over
//! - the workspace crates and xtask: `cargo fmt --all`;
//! - the kernel module: `rustfmt --edition 2021 --config-path rustfmt.toml
//!   rust-kmod/fctrace_main.rs` (rustfmt follows `mod` declarations, `#[path]` ones
//!   included, so this formats every module file).
//!
//! Both use `rustfmt.toml`, which mirrors the kernel's `.rustfmt.toml`. With `--check`,
//! nothing is written: the files that would change are listed and the command fails.

use std::collections::BTreeSet;
use std::ffi::OsStr;

use crate::util::{bail, echo, repo_root, Result};

/// `cargo xtask fmt`.
#[derive(clap::Args)]
pub struct FmtArgs {
    /// Change nothing; list the files that would change and fail if there are any
    #[arg(long)]
    pub check: bool,
}

pub fn cmd(args: FmtArgs) -> Result<i32> {
    if args.check {
        check()?;
    } else {
        for c in commands(false) {
            c.run()?;
        }
    }
    Ok(0)
}

/// The two rustfmt runs; with `check`, `--check -l`: write nothing, name the files that
/// would change (instead of showing diffs) and exit non-zero if there are any.
fn commands(check: bool) -> [duct::Expression; 2] {
    let root = repo_root();
    let flags: &[&str] = if check { &["--check", "-l"] } else { &[] };
    let sep: &[&str] = if check { &["--"] } else { &[] };
    let cargo_fmt = duct::cmd("cargo", [&["fmt", "--all"][..], sep, flags].concat());
    let config = root.join("rustfmt.toml");
    let kmod_args = ["--edition", "2021", "--config-path"]
        .map(OsStr::new)
        .into_iter()
        .chain([config.as_os_str()])
        .chain(flags.iter().map(OsStr::new))
        .chain([OsStr::new("rust-kmod/fctrace_main.rs")]);
    let kmod = duct::cmd("rustfmt", kmod_args);
    [cargo_fmt, kmod].map(|c| c.dir(&root).before_spawn(echo))
}

/// Fails, listing the files, when formatting would change any file.
pub fn check() -> Result<()> {
    let root = repo_root().canonicalize()?;
    let mut files = BTreeSet::new();
    let mut failed = false;
    for c in commands(true) {
        let out = c.stdout_capture().unchecked().run()?;
        failed |= !out.status.success();
        // Absolute from cargo fmt, relative (`rust-kmod/../crates/...`) from rustfmt.
        for f in String::from_utf8_lossy(&out.stdout).lines() {
            let f = root.join(f).canonicalize()?;
            files.insert(f.strip_prefix(&root).unwrap_or(&f).to_path_buf());
        }
    }
    if files.is_empty() && failed {
        bail!("rustfmt failed (see above)");
    }
    for f in &files {
        eprintln!("would reformat: {}", f.display());
    }
    if !files.is_empty() {
        bail!(
            "formatting would change {} file(s) (listed above): run `cargo xtask fmt`",
            files.len()
        );
    }
    Ok(())
}
