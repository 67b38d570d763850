// SPDX-License-Identifier: GPL-2.0

//! The control files: what each accepts, what it shows, and the settings behind them.
//!
//! A write is parsed completely before anything changes: bad input gets an errno, an
//! `error_log` line for what the errno cannot say, and leaves the state as it was.

use crate::engine::{Tracer, TracerInner, Wait, MAX_FRAMES, MAX_MAX_PROBES, MAX_PIDS};
use crate::ksym::{probeable, resolve, SymBuf};
use crate::parse::{self, ListKind, OptionName, ParseError, Symbol, OPTIONS};
use crate::record::Reason;
use crate::sys;
use crate::text::Text;
use core::fmt::Write;
use core::sync::atomic::Ordering;
use kernel::alloc::KVec;
use kernel::prelude::*;
use kernel::str::CString;

/// Largest ring buffer per CPU, in KiB.
const MAX_BUFFER_KB: u64 = 256 * 1024;
/// Longest write a control file takes.
const MAX_WRITE: usize = 16 * 1024;
/// Most filter patterns.
const MAX_FILTERS: usize = 64;
/// Largest `disarm_after` (a day).
const MAX_DISARM_AFTER_S: u64 = 86400;
/// Largest `arm_wait_ms` (a minute: well below the hung-task detector's 120 s).
const MAX_ARM_WAIT_MS: u64 = 60_000;

fn errno(e: ParseError) -> Error {
    match e {
        ParseError::TooMany => ENOSPC,
        _ => EINVAL,
    }
}

/// The files of the control surface, by inode number (as `simple_fill_super` numbers them).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum FileId {
    Readme,
    SetPid,
    StartFunction,
    Filter,
    MaxDepth,
    MaxProbes,
    DisarmAfter,
    ArmWaitMs,
    TracingOn,
    BufferSizeKb,
    Options,
    Stats,
    ErrorLogFile,
    Trace,
    TracePipe,
}

/// Every file: id, name, mode. Inode numbers are the index plus 2.
pub(crate) const FILES: [(FileId, &CStr, u16); 15] = [
    (FileId::Readme, kernel::c_str!("README"), 0o400),
    (FileId::SetPid, kernel::c_str!("set_pid"), 0o600),
    (
        FileId::StartFunction,
        kernel::c_str!("start_function"),
        0o600,
    ),
    (FileId::Filter, kernel::c_str!("filter"), 0o600),
    (FileId::MaxDepth, kernel::c_str!("max_depth"), 0o600),
    (FileId::TracingOn, kernel::c_str!("tracing_on"), 0o600),
    (FileId::MaxProbes, kernel::c_str!("max_probes"), 0o600),
    (FileId::DisarmAfter, kernel::c_str!("disarm_after"), 0o600),
    (FileId::ArmWaitMs, kernel::c_str!("arm_wait_ms"), 0o600),
    (
        FileId::BufferSizeKb,
        kernel::c_str!("buffer_size_kb"),
        0o600,
    ),
    (FileId::Options, kernel::c_str!("options"), 0o600),
    (FileId::Stats, kernel::c_str!("stats"), 0o400),
    (FileId::ErrorLogFile, kernel::c_str!("error_log"), 0o600),
    (FileId::Trace, kernel::c_str!("trace"), 0o600),
    (FileId::TracePipe, kernel::c_str!("trace_pipe"), 0o400),
];

pub(crate) fn file_by_ino(ino: u64) -> Option<FileId> {
    FILES.get((ino as usize).checked_sub(2)?).map(|f| f.0)
}

/// What a file operation knows about the open file it acts on.
pub(crate) struct OpenFile {
    pub(crate) id: FileId,
    /// Opened with `O_APPEND`.
    pub(crate) append: bool,
    /// Opened with `O_TRUNC` (`>` in a shell); only seen at open: the VFS clears it then.
    pub(crate) truncate: bool,
    /// Opened with `O_NONBLOCK`.
    pub(crate) nonblock: bool,
    /// Opened for reading.
    pub(crate) readable: bool,
    /// Opened for writing.
    pub(crate) writable: bool,
}

/// Whether the current task may open `file` as it asks: CAP_SYS_ADMIN to write any file,
/// CAP_PERFMON (or CAP_SYS_ADMIN) to read any but `README`, and no lockdown
/// (`LOCKDOWN_TRACEFS`) to read `trace` or `trace_pipe`. The mode bits (root only) come
/// first; this is for a root whose capabilities were dropped. Decided at open, like every
/// file's access: a file opened by a privileged task and passed on keeps its access.
pub(crate) fn may_open(file: &OpenFile) -> Result {
    let read = file.readable && file.id != FileId::Readme;
    let trace = matches!(file.id, FileId::Trace | FileId::TracePipe);
    sys::may_open(read, file.writable, trace)
}

/// Whether kernel addresses are hidden from the current task: it may not see them in
/// `/proc/kallsyms` (`kptr_restrict` 2; 1 or 0 without CAP_SYSLOG). Readers of a trace
/// opened by such a task see `ptr:` and a hash instead of a kernel address.
pub(crate) fn hide_addrs() -> bool {
    !sys::may_see_addrs()
}

/// The files whose writes replace or add to a list, and carry a token cut by the end of
/// a write over to the next (see `fs::ControlFile::write`).
pub(crate) fn list_kind(id: FileId) -> Option<ListKind> {
    match id {
        FileId::SetPid => Some(ListKind::Pids),
        FileId::Filter => Some(ListKind::Filter),
        _ => None,
    }
}

/// The name of `id` in the file system.
fn file_name(id: FileId) -> &'static str {
    FILES
        .iter()
        .find(|f| f.0 == id)
        .and_then(|f| f.1.to_str().ok())
        .unwrap_or("?")
}

/// What a refused write said, for `error_log`: at most 64 bytes, anything but printable
/// ASCII as `?`.
struct Quoted<'a>(&'a [u8]);

impl core::fmt::Display for Quoted<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let t = parse::trim(self.0);
        for &c in t.iter().take(64) {
            let c = if c == b' ' || c.is_ascii_graphic() {
                c
            } else {
                b'?'
            };
            f.write_char(char::from(c))?;
        }
        if t.len() > 64 {
            f.write_str("...")?;
        }
        Ok(())
    }
}

/// A list file's write ended in a token that no continuation can make valid: the whole
/// write is refused, with its `error_log` line.
pub(crate) fn refuse_cut(tr: &Tracer, id: FileId, token: &[u8], e: ParseError) -> Error {
    let what = if id == FileId::SetPid {
        "a PID (1 to 4194304)"
    } else {
        "a pattern (a function name with * and ?, or !name)"
    };
    tr.log(format_args!(
        "{}: '{}' is not {}",
        file_name(id),
        Quoted(token),
        what
    ));
    errno(e)
}

/// Under lockdown (`LOCKDOWN_KPROBES`: `lockdown=confidentiality`) nothing is armed:
/// EPERM and an `error_log` line for `file`.
fn refuse_if_locked_down(tr: &Tracer, file: &str) -> Result {
    let r = sys::locked_down();
    if r.is_err() {
        tr.log(format_args!(
            "{}: the kernel is locked down (confidentiality): fctrace cannot arm probes",
            file
        ));
    }
    r
}

const README: &str = "\
fctrace: every kernel function call of chosen tasks, by dynamic call-site probing.

  set_pid         PIDs to trace (all threads of each process). '>' replaces,
                  '>>' adds, later writes of one open add, an empty write
                  clears (and removes every probe). Live processes only; a
                  process leaves when it exits or executes a set-user-ID
                  program. A kernel thread needs a start function.
  start_function  Function where a trace begins (name or 0xaddress). Empty:
                  from every system call's entry.
  filter          Glob patterns, one per line. 'pattern': follow only matching
                  functions (others show as leaves); '!pattern': hide the function
                  and its subtree (not probed). '>>' and later writes of
                  one open add, empty write clears.
  max_depth       Deepest level shown (0 = no limit but the built-in 127).
  tracing_on      1/0: probes armed / all probes removed.
  max_probes      Most kprobes armed at once (16..1000000); functions that would
                  exceed it first disarm the least recently entered idle functions;
                  if none is idle, they show as leaves (not followed: arming failed).
  disarm_after    Seconds after which a function no traced task has entered (and
                  none is inside) is disarmed; it is armed again when called.
                  0 = never.
  arm_wait_ms     Longest wait of a traced task for a new callee to be armed
                  (0..60000 ms, default 10000); after a timeout, the rest of
                  the trace does not wait (not followed: arming timed out).
                  0 = never wait: first calls are armed ahead.
  buffer_size_kb  Ring buffer size per CPU, in KiB.
  options         follow-forks, retval, duration, irqs, lossless, args,
                  callsite, abstime, errors, kworkers: write NAME or noNAME.
  trace_pipe      Consuming, blocking read of the trace.
  trace           Snapshot of the trace, not consumed. A write clears the buffer.
  stats           Counters: events, lost events, probes, calls not followed.
  error_log       Why the last writes failed. A write clears it.

Writing needs CAP_SYS_ADMIN, reading (but README) CAP_PERFMON; under
lockdown=confidentiality nothing is armed and no trace shown. Kernel
addresses only for readers who may see them in /proc/kallsyms.

Quick start:
  echo vfs_read > start_function
  echo $PID > set_pid
  cat trace_pipe

A work function, whichever kworker runs it:
  echo my_work_fn > start_function
  echo kworkers > options

Where an error came from (on the host: fctrace-report errors trace.txt):
  echo retval > options; echo errors > options
  grep ERROR trace
";

/// What reading `id` shows.
pub(crate) fn render(tr: &Tracer, id: FileId, t: &mut Text) -> core::fmt::Result {
    let set = &tr.settings;
    match id {
        FileId::Readme => t.write_str(README),
        FileId::SetPid => {
            // As the reader's PID namespace numbers them (what it wrote); processes it
            // cannot see are not shown.
            for p in tr.traced.iter() {
                let p = p.load(Ordering::Relaxed);
                if p == 0 {
                    continue;
                }
                let nr = sys::tgid_vnr(p);
                if nr != 0 {
                    writeln!(t, "{}", nr)?;
                }
            }
            Ok(())
        }
        FileId::StartFunction => {
            let start = tr.shown.lock().start;
            match start {
                None => t.write_str("# all system calls\n"),
                Some(a) => {
                    let mut sym = SymBuf::new().map_err(|_| core::fmt::Error)?;
                    writeln!(t, "{}", sym.name(a))
                }
            }
        }
        FileId::Filter => t.push_bytes(&tr.shown.lock().filter),
        FileId::MaxDepth => writeln!(t, "{}", set.max_depth.load(Ordering::Relaxed)),
        FileId::MaxProbes => writeln!(t, "{}", set.max_probes.load(Ordering::Relaxed)),
        FileId::DisarmAfter => writeln!(t, "{}", set.disarm_after_s.load(Ordering::Relaxed)),
        FileId::ArmWaitMs => writeln!(t, "{}", set.arm_wait_ms.load(Ordering::Relaxed)),
        FileId::TracingOn => writeln!(t, "{}", u8::from(tr.shown.lock().tracing_on)),
        FileId::BufferSizeKb => writeln!(t, "{}", tr.buf.size_per_cpu() / 1024),
        FileId::Options => {
            for (opt, name, _) in OPTIONS {
                let no = if set.option(opt) { "" } else { "no" };
                writeln!(t, "{}{}", no, name)?;
            }
            Ok(())
        }
        FileId::Stats => render_stats(tr, t),
        FileId::ErrorLogFile => tr.errors.lock().render(t),
        FileId::Trace | FileId::TracePipe => Ok(()),
    }
}

fn render_stats(tr: &Tracer, t: &mut Text) -> core::fmt::Result {
    let s = &tr.stats;
    let n = |c: &core::sync::atomic::AtomicU64| c.load(Ordering::Relaxed);
    let (written, lost, left) = tr.buf.counts(&tr.reading.lock());
    writeln!(
        t,
        "tracing: {}",
        u8::from(tr.active.load(Ordering::Relaxed))
    )?;
    writeln!(t, "events_written: {}", written)?;
    writeln!(t, "events_lost: {}", lost)?;
    writeln!(t, "events_in_buffer: {}", left)?;
    writeln!(t, "readers: {}", tr.readers.load(Ordering::Relaxed))?;
    writeln!(t, "functions_armed: {}", tr.armed_functions_published())?;
    writeln!(t, "functions_refused: {}", n(&s.funcs_refused))?;
    writeln!(t, "probes_armed: {}", n(&s.probes_armed))?;
    writeln!(t, "max_probes: {}", n(&tr.settings.max_probes))?;
    writeln!(t, "call_sites_unprobeable: {}", n(&s.sites_unprobeable))?;
    writeln!(t, "trivial_calls_unprobed: {}", n(&s.trivial_calls))?;
    writeln!(t, "trampoline_entries: {}", n(&s.redirects))?;
    writeln!(t, "trampoline_unsafe_flags: {}", n(&s.unsafe_flags))?;
    writeln!(t, "trampoline_polls: {}", n(&s.arm_polls))?;
    writeln!(t, "trampoline_tasks: {}", tr.trampoline_tasks())?;
    writeln!(t, "tasks_overflow: {}", n(&s.task_overflow))?;
    writeln!(t, "handlers_nested: {}", n(&s.handlers_nested))?;
    writeln!(t, "processes_exited: {}", n(&s.processes_exited))?;
    writeln!(t, "privileged_execs_untraced: {}", n(&s.privileged_execs))?;
    writeln!(t, "atomic_calls_queued: {}", n(&s.ahead_queued))?;
    writeln!(t, "atomic_calls_overwritten: {}", n(&s.ahead_overwritten))?;
    writeln!(t, "ahead_queued_later: {}", n(&s.ahead_later))?;
    writeln!(t, "atomic_arming_pending: {}", tr.ahead_pending())?;
    writeln!(t, "atomic_tables_read: {}", n(&s.ahead_tables))?;
    writeln!(t, "atomic_table_methods: {}", n(&s.ahead_methods))?;
    writeln!(t, "start_round_armed: {}", n(&s.start_armed))?;
    writeln!(t, "start_round_ms: {}", n(&s.start_ns) / 1_000_000)?;
    writeln!(t, "functions_armed_ahead: {}", n(&s.armed_ahead))?;
    writeln!(t, "functions_disarmed: {}", n(&s.funcs_disarmed))?;
    writeln!(t, "probe_registrations: {}", n(&s.registrations))?;
    writeln!(t, "probe_registration_us: {}", n(&s.register_ns) / 1000)?;
    writeln!(t, "probe_unregistrations: {}", n(&s.unregistrations))?;
    writeln!(t, "probe_unregistration_us: {}", n(&s.unregister_ns) / 1000)?;
    writeln!(t, "returns_hooked: {}", n(&s.returns_hooked))?;
    writeln!(t, "returns_unhooked: {}", n(&s.returns_unhooked))?;
    writeln!(t, "returns_stale: {}", n(&s.returns_stale))?;
    writeln!(t, "returns_unexpected: {}", n(&s.returns_unexpected))?;
    writeln!(t, "returns_not_restored: {}", n(&s.returns_not_restored))?;
    writeln!(t, "returns_pending: {}", n(&s.returns_pending))?;
    writeln!(t, "tracing_stopped_on_error: {}", n(&s.stopped_on_error))?;
    writeln!(t, "rearmed_module_gone: {}", n(&s.module_text_gone))?;
    writeln!(t, "presite_probes: {}", n(&s.presites))?;
    writeln!(t, "presite_probes_optimized: {}", n(&s.presites_optimized))?;
    writeln!(t, "postsite_probes: {}", n(&s.postsites))?;
    writeln!(
        t,
        "postsite_probes_optimized: {}",
        n(&s.postsites_optimized)
    )?;
    writeln!(t, "page_faults: {}", n(&s.page_faults))?;
    writeln!(t, "fault_hook_missing: {}", n(&s.fault_hook_missing))?;
    writeln!(t, "strings_read_at_return: {}", n(&s.strings_at_return))?;
    writeln!(t, "strings_unreadable: {}", n(&s.strings_unread))?;
    writeln!(t, "single_steps: {}", n(&s.single_steps))?;
    writeln!(t, "single_steps_trapped: {}", n(&s.single_steps_trapped))?;
    writeln!(t, "single_steps_lost: {}", n(&s.single_steps_lost))?;
    writeln!(
        t,
        "single_steps_unclaimed: {}",
        n(&s.single_steps_unclaimed)
    )?;
    writeln!(t, "presite_computed: {}", n(&s.presite_computed))?;
    writeln!(t, "probe_blockers: {}", n(&s.probe_blockers))?;
    writeln!(
        t,
        "probe_hits_untraced: {}",
        crate::sys::untraced_probe_hits()
    )?;
    writeln!(
        t,
        "late_int3_recovered: {}",
        n(&crate::trap_notifier::RECOVERED)
    )?;
    writeln!(t, "entry_hooks: {}", n(&s.entry_hooks))?;
    writeln!(t, "entry_hooks_refused: {}", n(&s.entry_hooks_refused))?;
    writeln!(t, "entry_hook_updates: {}", n(&s.entry_updates))?;
    writeln!(t, "entry_hooks_deferred: {}", n(&s.entry_hooks_deferred))?;
    writeln!(t, "entry_hook_update_us: {}", n(&s.entry_update_ns) / 1000)?;
    writeln!(
        t,
        "entry_hook_update_max_us: {}",
        n(&s.entry_update_max_ns) / 1000
    )?;
    writeln!(t, "entry_hook_ops: {}", n(&s.entry_ops))?;
    writeln!(t, "entry_hook_ops_us: {}", n(&s.entry_ops_ns) / 1000)?;
    writeln!(t, "static_call_hooks: {}", n(&s.static_hooks))?;
    writeln!(t, "entry_probes: {}", n(&s.entry_probes))?;
    writeln!(
        t,
        "entry_probes_optimized: {}",
        n(&s.entry_probes_optimized)
    )?;
    writeln!(
        t,
        "static_call_hooks_missing: {}",
        n(&s.static_hooks_missing)
    )?;
    writeln!(t, "irq_roots_missing: {}", n(&s.irq_roots_missing))?;
    writeln!(t, "lossless_waits: {}", n(&s.lossless_waits))?;
    writeln!(t, "lossless_timeouts: {}", n(&s.lossless_timeouts))?;
    for v in 1..Reason::COUNT as u8 {
        let r = Reason::from_u8(v);
        let count = s.reasons.get(v as usize).map_or(0, n);
        writeln!(t, "{}: {}", r.stat_name(), count)?;
    }
    Ok(())
}

/// Applies a write of `data` to `id`. `append`: the write adds to a list file's list.
/// `wait`: how it waits for the tracer's mutex (a write at close, `Uninterruptible`,
/// cannot be restarted). A refused write that said nothing of its own in `error_log` gets
/// a line there (one a signal interrupted while it waited for the mutex was not refused:
/// it changed nothing, and is restarted or fails with `EINTR`).
pub(crate) fn write(tr: &Tracer, id: FileId, data: &[u8], append: bool, wait: Wait) -> Result {
    let logged = tr.errors.lock().added();
    let r = write_file(tr, id, data, append, wait);
    if let Err(e) = r {
        if e != ERESTARTSYS && tr.errors.lock().added() == logged {
            tr.log(format_args!(
                "{}: '{}' refused ({:?})",
                file_name(id),
                Quoted(data),
                e
            ));
        }
    }
    r
}

fn write_file(tr: &Tracer, id: FileId, data: &[u8], append: bool, wait: Wait) -> Result {
    if data.len() > MAX_WRITE {
        return Err(EINVAL);
    }
    let set = &tr.settings;
    match id {
        FileId::SetPid => write_set_pid(tr, data, append, wait),
        FileId::StartFunction => write_start(tr, data, wait),
        FileId::Filter => write_filter(tr, data, append, wait),
        FileId::MaxDepth => {
            let v = parse::parse_range(data, 0, MAX_FRAMES as u64 - 1).map_err(errno)?;
            set.max_depth.store(v as u32, Ordering::Relaxed);
            Ok(())
        }
        FileId::MaxProbes => {
            let v = parse::parse_range(data, 16, MAX_MAX_PROBES).map_err(errno)?;
            set.max_probes.store(v, Ordering::Relaxed);
            Ok(())
        }
        FileId::DisarmAfter => {
            let v = parse::parse_range(data, 0, MAX_DISARM_AFTER_S).map_err(|e| {
                tr.log(format_args!(
                    "disarm_after: seconds from 0 (never) to {}",
                    MAX_DISARM_AFTER_S
                ));
                errno(e)
            })?;
            set.disarm_after_s.store(v as u32, Ordering::Relaxed);
            tr.schedule_reap();
            Ok(())
        }
        FileId::ArmWaitMs => {
            let v = parse::parse_range(data, 0, MAX_ARM_WAIT_MS).map_err(|e| {
                tr.log(format_args!(
                    "arm_wait_ms: milliseconds from 0 (never wait) to {}",
                    MAX_ARM_WAIT_MS
                ));
                errno(e)
            })?;
            set.arm_wait_ms.store(v as u32, Ordering::Relaxed);
            Ok(())
        }
        FileId::TracingOn => {
            let on = parse::parse_bool(data).map_err(errno)?;
            if on {
                refuse_if_locked_down(tr, "tracing_on")?;
            }
            let mut inner = tr.lock_for(wait)?;
            // What reads show (they do not wait for the mutex): published as the mutex
            // is released, also after a failed write, which restored the old values.
            inner.shown_dirty = true;
            let was = inner.tracing_on;
            inner.tracing_on = on;
            if !on {
                tr.deactivate(&mut inner);
                return Ok(());
            }
            tr.activate(&mut inner).inspect_err(|e| {
                inner.tracing_on = was;
                drop(inner);
                tr.log(format_args!(
                    "tracing_on: cannot arm the start function ({:?})",
                    e
                ));
            })
        }
        FileId::BufferSizeKb => {
            let kb = parse::parse_range(data, 1, MAX_BUFFER_KB).map_err(errno)?;
            tr.buf.resize(kb * 1024).inspect_err(|_| {
                tr.log(format_args!("buffer_size_kb: cannot resize to {} KiB", kb));
            })
        }
        FileId::Options => {
            let (opt, on) = parse::parse_option(data).map_err(|e| {
                tr.log(format_args!(
                    "options: unknown option (known: follow-forks, retval, duration, irqs, \
                     lossless, args, callsite, abstime, errors, kworkers; 'no' clears)"
                ));
                errno(e)
            })?;
            if opt == OptionName::Irqs && on && tr.active.load(Ordering::Acquire) {
                refuse_if_locked_down(tr, "options")?;
            }
            if opt == OptionName::Kworkers {
                return write_kworkers(tr, on, wait);
            }
            // Arguments are the kernel's data (strings, values): not under lockdown,
            // tracing or not.
            if opt == OptionName::Args && on {
                sys::locked_down().inspect_err(|_| {
                    tr.log(format_args!(
                        "options: the kernel is locked down (confidentiality): args would \
                         copy the kernel's data into the trace"
                    ))
                })?;
            }
            if opt == OptionName::Args && on {
                tr.load_btf();
            }
            // Taken before the option changes: a signal that ends the wait leaves it as
            // it was.
            let mut held = if on && matches!(opt, OptionName::Irqs | OptionName::Args) {
                Some(tr.lock_for(wait)?)
            } else {
                None
            };
            set.set_option(opt, on);
            if let Some(inner) = held.as_mut() {
                if opt == OptionName::Irqs {
                    // Tracing may be on already: hook the interrupt entries now.
                    tr.add_irq_roots(inner);
                } else {
                    // The specs of the functions known so far.
                    tr.args_on(inner);
                }
            }
            Ok(())
        }
        FileId::ErrorLogFile => {
            tr.errors.lock().clear();
            Ok(())
        }
        FileId::Trace => {
            tr.buf.reset(&mut tr.reading.lock());
            Ok(())
        }
        FileId::Readme | FileId::Stats | FileId::TracePipe => Err(EPERM),
    }
}

/// `kworkers` or `nokworkers` written to `options`: with the mutex held throughout (a
/// start function cleared meanwhile would leave workers traced from all system calls),
/// tracing starts, or stops when nobody is left to trace; on failure nothing changed.
fn write_kworkers(tr: &Tracer, on: bool, wait: Wait) -> Result {
    let set = &tr.settings;
    if on {
        refuse_if_locked_down(tr, "options")?;
    }
    let mut inner = tr.lock_for(wait)?;
    let was = set.option(OptionName::Kworkers);
    if on == was {
        return Ok(());
    }
    if on && inner.start.is_none() {
        tr.log(format_args!(
            "options: kworkers traces workers from the start function: set start_function \
             first"
        ));
        return Err(EINVAL);
    }
    set.set_option(OptionName::Kworkers, on);
    if on {
        if tr.active.load(Ordering::Acquire) {
            tr.update_hot_mask();
        } else if let Err(e) = tr.activate(&mut inner) {
            set.set_option(OptionName::Kworkers, was);
            tr.update_hot_mask();
            drop(inner);
            tr.log(format_args!(
                "options: kworkers: cannot arm the start function ({:?})",
                e
            ));
            return Err(e);
        }
    } else if tr.active.load(Ordering::Acquire) {
        // Workers inside a trace keep their per-thread state until the next activation:
        // arm again from scratch (or stop, with nobody left), so that none is kept.
        tr.deactivate(&mut inner);
        if tr.tracing_wanted() {
            if let Err(e) = tr.activate(&mut inner) {
                inner.tracing_on = false;
                tr.stats.stopped_on_error.fetch_add(1, Ordering::Relaxed);
                tr.log(format_args!(
                    "options: nokworkers: cannot arm again for set_pid ({:?}): tracing \
                     stopped (tracing_on 0)",
                    e
                ));
                inner.shown_dirty = true;
            }
        }
    }
    Ok(())
}

fn write_set_pid(tr: &Tracer, data: &[u8], append: bool, wait: Wait) -> Result {
    let mut pids = [0u32; MAX_PIDS];
    let n = parse::parse_pids(data, &mut pids).map_err(errno)?;
    let mut tgids = [0u32; MAX_PIDS];
    let mut m = 0;
    let mut inner = tr.lock_for(wait)?;
    if append {
        for t in tr.traced.iter() {
            let t = t.load(Ordering::Relaxed);
            if t != 0 && !tgids[..m].contains(&t) {
                tgids[m] = t;
                m += 1;
            }
        }
    }
    if n > 0 {
        refuse_if_locked_down(tr, "set_pid")?;
    }
    for &pid in &pids[..n] {
        let tgid = match sys::pid_to_tgid(pid as i32) {
            Ok((_, true)) if inner.start.is_none() => {
                // A kernel thread makes no system calls: all-system-calls mode would
                // show nothing of it.
                tr.log(format_args!(
                    "set_pid: thread {} is a kernel thread, which makes no system calls: \
                     set start_function first",
                    pid
                ));
                return Err(EINVAL);
            }
            Ok((tgid, _)) => tgid,
            Err(e) => {
                // No such thread in the writer's PID namespace, or a process that is
                // exiting or has exited (a zombie).
                tr.log(format_args!("set_pid: no live process has thread {}", pid));
                return Err(e);
            }
        };
        if !tgids[..m].contains(&tgid) {
            if m == MAX_PIDS {
                return Err(ENOSPC);
            }
            tgids[m] = tgid;
            m += 1;
        }
    }
    let mut old = [0u32; MAX_PIDS];
    for (o, t) in old.iter_mut().zip(tr.traced.iter()) {
        *o = t.load(Ordering::Relaxed);
    }
    for (t, &new) in tr.traced.iter().zip(tgids.iter()) {
        if new != 0 {
            tr.mark_traced(new);
        }
        t.store(new, Ordering::Release);
    }
    // A process that died since it was looked up: its exit hook may have run before it
    // was stored (which it removes it from), so ask again now that it is.
    core::sync::atomic::fence(Ordering::SeqCst);
    for t in tr.traced.iter() {
        let tgid = t.load(Ordering::Relaxed);
        if tgid != 0 && !sys::tgid_alive(tgid) {
            let _ = t.compare_exchange(tgid, 0, Ordering::AcqRel, Ordering::Relaxed);
        }
    }
    let m = tr
        .traced
        .iter()
        .filter(|t| t.load(Ordering::Relaxed) != 0)
        .count();
    // (With the kworkers option, tracing goes on for the workers.)
    if m == 0 && !tr.tracing_wanted() {
        tr.deactivate(&mut inner);
        return Ok(());
    }
    tr.activate(&mut inner).inspect_err(|e| {
        for (o, t) in old.iter().zip(tr.traced.iter()) {
            if *o != 0 {
                tr.mark_traced(*o);
            }
            t.store(*o, Ordering::Release);
        }
        drop(inner);
        tr.log(format_args!(
            "set_pid: cannot arm the start function ({:?})",
            e
        ));
    })
}

fn write_start(tr: &Tracer, data: &[u8], wait: Wait) -> Result {
    let start = match parse::parse_symbol(data).map_err(errno)? {
        Symbol::None => None,
        Symbol::Name(n) => {
            let c = CString::try_from_fmt(format_args!("{}", n))?;
            let (addr, ok) = resolve(&c)?;
            if !ok {
                tr.log(format_args!(
                    "start_function: '{}' cannot be probed (not kernel text, or blacklisted)",
                    n
                ));
                return Err(EINVAL);
            }
            Some(addr)
        }
        Symbol::Addr(a) => {
            if hide_addrs() {
                // What the answer says of an address (a function's start, an offset into
                // one, no symbol) would tell the writer where the kernel is.
                tr.log(format_args!(
                    "start_function: an address is taken only from a task that may see \
                     kernel addresses (kptr_restrict); write the function's name"
                ));
                return Err(EPERM);
            }
            let mut sym = SymBuf::new()?;
            let Some(info) = sym.lookup(a) else {
                tr.log(format_args!("start_function: no symbol at {:#x}", a));
                return Err(ENOENT);
            };
            if info.offset != 0 {
                tr.log(format_args!(
                    "start_function: {:#x} is not the start of a function ({}+{:#x})",
                    a, info.name, info.offset
                ));
                return Err(EINVAL);
            }
            if !probeable(a) {
                tr.log(format_args!(
                    "start_function: '{}' cannot be probed",
                    info.name
                ));
                return Err(EINVAL);
            }
            Some(a)
        }
    };
    let mut inner = tr.lock_for(wait)?;
    inner.shown_dirty = true;
    if tr.active.load(Ordering::Acquire) {
        refuse_if_locked_down(tr, "start_function")?;
    }
    // Kernel threads and kworkers are traced from a start function only.
    if start.is_none() {
        let kthread = tr.traced.iter().find_map(|t| {
            let tgid = t.load(Ordering::Relaxed);
            (tgid != 0 && sys::tgid_is_kthread(tgid)).then_some(tgid)
        });
        if let Some(k) = kthread {
            tr.log(format_args!(
                "start_function: kernel thread {} is in set_pid, and makes no system \
                 calls: a start function is needed",
                sys::tgid_vnr(k)
            ));
            return Err(EINVAL);
        }
        if tr.settings.option(OptionName::Kworkers) {
            tr.log(format_args!(
                "start_function: the kworkers option traces workers from the start \
                 function: clear it first"
            ));
            return Err(EINVAL);
        }
    }
    change_armed(tr, &mut inner, |i| &mut i.start, start, "start_function")
}

/// Sets a setting that decides what is armed (`*field(inner) = new`). While tracing,
/// everything is armed again from scratch; if that fails, the old value comes back,
/// tracing goes on as before, and the write fails.
fn change_armed<T>(
    tr: &Tracer,
    inner: &mut TracerInner,
    field: impl Fn(&mut TracerInner) -> &mut T,
    new: T,
    file: &str,
) -> Result {
    let old = core::mem::replace(field(inner), new);
    if !tr.active.load(Ordering::Acquire) {
        return Ok(());
    }
    tr.deactivate(inner);
    if let Err(e) = tr.activate(inner) {
        *field(inner) = old;
        if let Err(e2) = tr.activate(inner) {
            // Not even the old value can be armed now (max_probes lowered meanwhile, no
            // memory): tracing has stopped, and says so, rather than read as on.
            inner.tracing_on = false;
            tr.stats.stopped_on_error.fetch_add(1, Ordering::Relaxed);
            tr.log(format_args!(
                "{}: cannot arm the start function with the new value ({:?}), nor again \
                 with the old one ({:?}): tracing stopped (tracing_on 0)",
                file, e, e2
            ));
        } else {
            tr.log(format_args!(
                "{}: cannot arm the start function with the new value ({:?})",
                file, e
            ));
        }
        return Err(e);
    }
    Ok(())
}

fn write_filter(tr: &Tracer, data: &[u8], append: bool, wait: Wait) -> Result {
    let copy = |glob: &[u8]| -> Result<KVec<u8>> {
        let mut g = KVec::new();
        g.extend_from_slice(glob, GFP_KERNEL)?;
        Ok(g)
    };
    let mut new: KVec<(bool, KVec<u8>)> = KVec::new();
    let mut inner = tr.lock_for(wait)?;
    inner.shown_dirty = true;
    if append {
        for p in inner.filter_patterns() {
            new.push((p.negate, copy(p.glob)?), GFP_KERNEL)?;
        }
    }
    let mut oom = false;
    parse::parse_filter(data, |p| {
        if new.len() >= MAX_FILTERS {
            return Err(ParseError::TooMany);
        }
        match copy(p.glob) {
            Ok(g) => oom |= new.push((p.negate, g), GFP_KERNEL).is_err(),
            Err(_) => oom = true,
        }
        Ok(())
    })
    .map_err(errno)?;
    if oom {
        return Err(ENOMEM);
    }
    if tr.active.load(Ordering::Acquire) {
        refuse_if_locked_down(tr, "filter")?;
    }
    // Functions already armed were judged by the old filter: start over.
    change_armed(tr, &mut inner, |i| &mut i.filters, new, "filter")
}
