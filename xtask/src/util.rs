//! Small helpers shared by the commands: paths, logging, argument parsing and
//! running a child process with live output and a timeout.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

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

/// Print how a std `Command` is being run, like xshell does for its commands.
pub fn echo_cmd(cmd: &Command) {
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

/// A shell rooted at the repository.
pub fn shell() -> Result<xshell::Shell> {
    let sh = xshell::Shell::new()?;
    sh.change_dir(repo_root());
    Ok(sh)
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

/// Minimal hand-rolled argument parser: flags (`--x`), options (`--x V` or
/// `--x=V`) and positionals.
pub struct Args {
    args: Vec<String>,
}

impl Args {
    pub fn new(args: Vec<OsString>) -> Result<Args> {
        let args = args
            .into_iter()
            .map(|a| {
                a.into_string()
                    .map_err(|a| format!("argument is not UTF-8: {a:?}"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Args { args })
    }

    pub fn flag(&mut self, name: &str) -> bool {
        let before = self.args.len();
        self.args.retain(|a| a != name);
        before != self.args.len()
    }

    pub fn opt(&mut self, name: &str) -> Result<Option<String>> {
        let prefix = format!("{name}=");
        let mut i = 0;
        let mut found = None;
        while i < self.args.len() {
            if self.args[i] == name {
                if i + 1 >= self.args.len() {
                    bail!("{name} needs a value");
                }
                found = Some(self.args.remove(i + 1));
                self.args.remove(i);
            } else if let Some(v) = self.args[i].strip_prefix(&prefix) {
                found = Some(v.to_string());
                self.args.remove(i);
            } else {
                i += 1;
            }
        }
        Ok(found)
    }

    pub fn opt_num<T: std::str::FromStr>(&mut self, name: &str) -> Result<Option<T>> {
        match self.opt(name)? {
            None => Ok(None),
            Some(v) => match v.parse() {
                Ok(n) => Ok(Some(n)),
                Err(_) => bail!("{name}: not a number: {v}"),
            },
        }
    }

    /// The remaining positional arguments; errors on unknown `--options`.
    pub fn finish(self) -> Result<Vec<String>> {
        if let Some(a) = self.args.iter().find(|a| a.starts_with('-')) {
            bail!("unknown option: {a}");
        }
        Ok(self.args)
    }
}

/// Result of [`run_streaming`].
pub struct Streamed {
    /// `None` if the process was killed because of the timeout.
    pub status: Option<ExitStatus>,
    /// Everything the process wrote to stdout (`\r` removed).
    pub output: String,
}

/// Run `cmd` with stdin closed, echoing its stdout live to our stdout and
/// into `log` (if any), and kill it after `timeout`.
pub fn run_streaming(mut cmd: Command, timeout: Duration, log: Option<&Path>) -> Result<Streamed> {
    echo_cmd(&cmd);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot run {:?}: {e}", cmd.get_program()))?;
    let stdout = child.stdout.take().unwrap();
    let mut log_file = match log {
        Some(p) => Some(std::fs::File::create(p).map_err(|e| format!("{}: {e}", p.display()))?),
        None => None,
    };
    let (tx, rx) = mpsc::channel::<String>();
    let reader = std::thread::spawn(move || {
        let mut r = BufReader::new(stdout);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match r.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let line: String = String::from_utf8_lossy(&buf)
                        .chars()
                        .filter(|&c| c != '\r')
                        .collect();
                    if tx.send(line).is_err() {
                        break;
                    }
                }
            }
        }
        // Drain anything left so the child never blocks on a full pipe.
        let _ = r.read_to_end(&mut Vec::new());
    });

    let deadline = Instant::now() + timeout;
    let mut output = String::new();
    let mut stdout_lock = std::io::stdout();
    let mut emit = |line: String, output: &mut String| {
        let _ = stdout_lock.write_all(line.as_bytes());
        let _ = stdout_lock.flush();
        if let Some(f) = log_file.as_mut() {
            let _ = f.write_all(line.as_bytes());
        }
        output.push_str(&line);
    };
    let status = loop {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(line) => emit(line, &mut output),
            Err(mpsc::RecvTimeoutError::Disconnected) => break child.wait().ok(),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        if Instant::now() >= deadline {
            note(format!(
                "timeout after {} s: killing {:?}",
                timeout.as_secs(),
                cmd.get_program()
            ));
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
    };
    let _ = reader.join();
    while let Ok(line) = rx.try_recv() {
        emit(line, &mut output);
    }
    if !output.ends_with('\n') && !output.is_empty() {
        println!();
    }
    Ok(Streamed { status, output })
}
