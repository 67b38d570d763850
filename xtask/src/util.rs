// SPDX-License-Identifier: GPL-2.0

//! Small helpers shared by the commands: paths, logging and showing the commands run.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

pub type Result<T, E = Box<dyn std::error::Error>> = std::result::Result<T, E>;

/// Bail out of a command with a formatted error message.
macro_rules! bail {
    ($($arg:tt)*) => { return Err(format!($($arg)*).into()) };
}
pub(crate) use bail;

/// Print a progress note (stderr, so it never mixes with guest output parsing).
pub fn note(msg: impl AsRef<str>) {
    eprintln!("xtask: {}", msg.as_ref());
}

/// Print how a command is being run (`$ prog args...`, on stderr). Every command xtask
/// runs for the user to see goes through here: as duct's `before_spawn` hook
/// (`duct::cmd!(..).before_spawn(echo)`), or called directly for a std `Command`.
pub fn echo(cmd: &mut Command) -> std::io::Result<()> {
    let mut s = String::from("$ ");
    s.push_str(&cmd.get_program().to_string_lossy());
    for a in cmd.get_args() {
        s.push(' ');
        let a = a.to_string_lossy();
        if a.contains(' ') || a.is_empty() {
            s.push_str(&format!("'{a}'"));
        } else {
            s.push_str(&a);
        }
    }
    eprintln!("{s}");
    Ok(())
}

/// Parse a number of seconds (for `--timeout SECS` and the like).
pub fn secs(s: &str) -> Result<Duration, std::num::ParseIntError> {
    s.parse().map(Duration::from_secs)
}

/// Root of the repository (the workspace directory that holds `xtask/`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// `${XDG_CACHE_HOME:-$HOME/.cache}/fctrace`: kernel sources and builds.
pub fn cache_root() -> PathBuf {
    let base = match std::env::var_os("XDG_CACHE_HOME") {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => home().join(".cache"),
    };
    base.join("fctrace")
}

pub fn home() -> PathBuf {
    PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into()))
}

/// `<repo>/target/fctrace`: generated artifacts (initramfs, console logs).
pub fn out_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"));
    let target = if target.is_relative() {
        repo_root().join(target)
    } else {
        target
    };
    target.join("fctrace")
}

/// Make sure `$CARGO_HOME/bin` (where `cargo install` puts bindgen) is on PATH
/// for us and for every child process (make needs to find `bindgen`).
pub fn ensure_cargo_bin_on_path() {
    let cargo_bin = std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| home().join(".cargo"))
        .join("bin");
    let path = std::env::var_os("PATH").unwrap_or_default();
    if !std::env::split_paths(&path).any(|p| p == cargo_bin) {
        let mut parts = vec![cargo_bin];
        parts.extend(std::env::split_paths(&path));
        let joined = std::env::join_paths(parts).expect("PATH entries");
        // SAFETY-equivalent: single threaded at this point (edition 2021: safe fn).
        std::env::set_var("PATH", joined);
    }
}

pub fn nproc() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}
