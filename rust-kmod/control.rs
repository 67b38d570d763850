// SPDX-License-Identifier: GPL-2.0

//! The control files: what each accepts, what it shows, and the settings behind them.
//!
//! A write is parsed completely before anything changes: bad input gets an errno and
//! leaves the state as it was.

use crate::bindings;
use crate::engine::{Func, Hook, State, MAX_FRAMES, MAX_PIDS};
use crate::kprobe::Probe;
use crate::parse::{self, FilterPattern, OptionName, ParseError, Symbol, SymbolInfo};
use crate::record::Reason;
use core::fmt::Write;
use core::pin::Pin;
use core::sync::atomic::Ordering;
use kernel::alloc::KVec;
use kernel::prelude::*;
use kernel::str::CString;

/// Size of a `sprint_symbol()` buffer (helpers.c asserts `KSYM_SYMBOL_LEN` fits).
pub(crate) const KSYM_SYMBOL_LEN: usize = 1024;
/// Default ring buffer size per CPU, in KiB.
pub(crate) const DEFAULT_BUFFER_KB: u64 = 1024;
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
/// Lines kept in `error_log`.
const ERROR_LOG_LINES: usize = 16;

/// Settings and armed probes, under `State::ctl`.
pub(crate) struct Control {
    pub(crate) tracing_on: bool,
    /// Start function, `None` for every system call.
    pub(crate) start: Option<u64>,
    filters: KVec<(bool, KVec<u8>)>,
    pub(crate) funcs: KVec<Func>,
    pub(crate) hooks: KVec<Pin<KBox<Probe<Hook>>>>,
}

impl Control {
    pub(crate) fn new() -> Self {
        Control { tracing_on: true, start: None, filters: KVec::new(), funcs: KVec::new(), hooks: KVec::new() }
    }

    pub(crate) fn filter_patterns(&self) -> impl Iterator<Item = FilterPattern<'_>> + Clone {
        self.filters.iter().map(|(negate, glob)| FilterPattern { negate: *negate, glob })
    }
}

/// Growable text for file contents; `fmt::Write` fails when out of memory.
pub(crate) struct Text(pub(crate) KVec<u8>);

impl Text {
    pub(crate) fn new() -> Self {
        Text(KVec::new())
    }
}

impl Write for Text {
    fn write_str(&mut self, s: &str) -> core::fmt::Result {
        self.0.extend_from_slice(s.as_bytes(), GFP_KERNEL).map_err(|_| core::fmt::Error)
    }
}

/// The `error_log` file: the last few refused writes and failures, with a reason.
pub(crate) struct ErrorLog {
    lines: KVec<KVec<u8>>,
}

impl ErrorLog {
    pub(crate) fn new() -> Self {
        ErrorLog { lines: KVec::new() }
    }

    pub(crate) fn add(&mut self, args: core::fmt::Arguments<'_>) {
        let mut t = Text::new();
        // SAFETY: trivial.
        let secs = unsafe { bindings::ktime_get_real_seconds() };
        if writeln!(t, "[{}] fctrace: {}", secs, args).is_err() {
            return;
        }
        if self.lines.len() >= ERROR_LOG_LINES {
            let mut rest = KVec::new();
            for l in self.lines.iter().skip(1) {
                let mut c = KVec::new();
                if c.extend_from_slice(l, GFP_KERNEL).is_err() || rest.push(c, GFP_KERNEL).is_err() {
                    return;
                }
            }
            self.lines = rest;
        }
        let _ = self.lines.push(t.0, GFP_KERNEL);
    }

    fn clear(&mut self) {
        self.lines = KVec::new();
    }

    fn render(&self, t: &mut Text) -> core::fmt::Result {
        for l in self.lines.iter() {
            t.0.extend_from_slice(l, GFP_KERNEL).map_err(|_| core::fmt::Error)?;
        }
        Ok(())
    }
}

/// `sprint_symbol(addr)` parsed, using `buf` as storage.
pub(crate) fn symbolize(addr: u64, buf: &mut KVec<u8>) -> Option<SymbolInfo<'_>> {
    *buf = KVec::with_capacity(KSYM_SYMBOL_LEN, GFP_KERNEL).ok()?;
    // SAFETY: `buf` has `KSYM_SYMBOL_LEN` (>= the kernel's KSYM_SYMBOL_LEN) bytes of
    // capacity for the NUL-terminated result.
    let n = unsafe { bindings::sprint_symbol(buf.as_mut_ptr(), addr as _) };
    let n = (n.max(0) as usize).min(KSYM_SYMBOL_LEN - 1);
    // SAFETY: `sprint_symbol` initialised `n` bytes.
    unsafe { buf.set_len(n) };
    parse::parse_sprint_symbol(core::str::from_utf8(buf).ok()?)
}

/// The name of `addr` without offset (`vfs_read`, `foo [mod]`), or its address.
pub(crate) fn symbol_name(addr: u64, buf: &mut [u8; KSYM_SYMBOL_LEN]) -> &str {
    // SAFETY: `buf` is large enough for the kernel's KSYM_SYMBOL_LEN.
    let n = unsafe { bindings::sprint_symbol_no_offset(buf.as_mut_ptr(), addr as _) };
    let n = (n.max(0) as usize).min(KSYM_SYMBOL_LEN - 1);
    core::str::from_utf8(&buf[..n]).unwrap_or("?")
}

/// Looks up a function by name through kprobes: `(start address, probeable)`;
/// `ENOENT` if there is no such symbol.
pub(crate) fn resolve(name: &CStr) -> Result<(u64, bool)> {
    let (ok, addr) = {
        let mut p = core::pin::pin!(Probe::on_symbol_raw(name, crate::kprobe::no_handler, ()));
        let ok = p.as_mut().register().is_ok();
        (ok, p.addr())
        // `p` is unregistered here, in place.
    };
    if addr == 0 {
        return Err(ENOENT);
    }
    // The kernel moves a function-entry probe past `endbr64`; report the symbol start.
    let mut buf = KVec::new();
    let info = symbolize(addr, &mut buf).ok_or(ENOENT)?;
    Ok((addr - info.offset, ok))
}

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
    (FileId::StartFunction, kernel::c_str!("start_function"), 0o600),
    (FileId::Filter, kernel::c_str!("filter"), 0o600),
    (FileId::MaxDepth, kernel::c_str!("max_depth"), 0o600),
    (FileId::TracingOn, kernel::c_str!("tracing_on"), 0o600),
    (FileId::MaxProbes, kernel::c_str!("max_probes"), 0o600),
    (FileId::DisarmAfter, kernel::c_str!("disarm_after"), 0o600),
    (FileId::ArmWaitMs, kernel::c_str!("arm_wait_ms"), 0o600),
    (FileId::BufferSizeKb, kernel::c_str!("buffer_size_kb"), 0o600),
    (FileId::Options, kernel::c_str!("options"), 0o600),
    (FileId::Stats, kernel::c_str!("stats"), 0o400),
    (FileId::ErrorLogFile, kernel::c_str!("error_log"), 0o600),
    (FileId::Trace, kernel::c_str!("trace"), 0o600),
    (FileId::TracePipe, kernel::c_str!("trace_pipe"), 0o400),
];

pub(crate) fn file_by_ino(ino: u64) -> Option<FileId> {
    FILES.get((ino as usize).checked_sub(2)?).map(|f| f.0)
}

const README: &str = "\
fctrace: every kernel function call of chosen tasks, by dynamic call-site probing.

  set_pid         PIDs to trace (all threads of each process). '>' replaces,
                  '>>' adds, an empty write clears (and removes every probe).
  start_function  Function where a trace begins (name or 0xaddress). Empty:
                  from every system call's entry.
  filter          Glob patterns, one per line. 'pattern': follow only matching
                  functions (others show as leaves); '!pattern': hide the function
                  and its subtree (not probed). '>>' adds, empty write clears.
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
  options         follow-forks, retval, duration, irqs, lossless: write NAME
                  or noNAME.
  trace_pipe      Consuming, blocking read of the trace.
  trace           Snapshot of the trace, not consumed. A write clears the buffer.
  stats           Counters: events, lost events, probes, calls not followed.
  error_log       Why the last writes failed. A write clears it.

Quick start:
  echo vfs_read > start_function
  echo $PID > set_pid
  cat trace_pipe
";

impl State {
    fn log(&self, args: core::fmt::Arguments<'_>) {
        self.errors.lock().add(args);
    }

    /// What reading `id` shows.
    pub(crate) fn render(&self, id: FileId, t: &mut Text) -> core::fmt::Result {
        match id {
            FileId::Readme => t.write_str(README),
            FileId::SetPid => {
                for p in self.traced.iter() {
                    let p = p.load(Ordering::Relaxed);
                    if p != 0 {
                        writeln!(t, "{}", p)?;
                    }
                }
                Ok(())
            }
            FileId::StartFunction => {
                let start = self.lock_ctl().start;
                match start {
                    None => t.write_str("# all system calls\n"),
                    Some(a) => {
                        let mut buf = [0u8; KSYM_SYMBOL_LEN];
                        writeln!(t, "{}", symbol_name(a, &mut buf))
                    }
                }
            }
            FileId::Filter => {
                let ctl = self.lock_ctl();
                for p in ctl.filter_patterns() {
                    if p.negate {
                        t.write_str("!")?;
                    }
                    t.write_str(core::str::from_utf8(p.glob).unwrap_or("?"))?;
                    t.write_str("\n")?;
                }
                Ok(())
            }
            FileId::MaxDepth => writeln!(t, "{}", self.max_depth.load(Ordering::Relaxed)),
            FileId::MaxProbes => writeln!(t, "{}", self.max_probes.load(Ordering::Relaxed)),
            FileId::DisarmAfter => writeln!(t, "{}", self.disarm_after_s.load(Ordering::Relaxed)),
            FileId::ArmWaitMs => writeln!(t, "{}", self.arm_wait_ms.load(Ordering::Relaxed)),
            FileId::TracingOn => writeln!(t, "{}", u8::from(self.lock_ctl().tracing_on)),
            FileId::BufferSizeKb => writeln!(t, "{}", self.buf.size_per_cpu() / 1024),
            FileId::Options => {
                for (opt, name) in parse::OPTIONS {
                    let on = self.option(opt).load(Ordering::Relaxed);
                    writeln!(t, "{}{}", if on { "" } else { "no" }, name)?;
                }
                Ok(())
            }
            FileId::Stats => self.render_stats(t),
            FileId::ErrorLogFile => self.errors.lock().render(t),
            FileId::Trace | FileId::TracePipe => Ok(()),
        }
    }

    fn option(&self, o: OptionName) -> &core::sync::atomic::AtomicBool {
        match o {
            OptionName::FollowForks => &self.opt_follow_forks,
            OptionName::Retval => &self.opt_retval,
            OptionName::Duration => &self.opt_duration,
            OptionName::Irqs => &self.opt_irqs,
            OptionName::Lossless => &self.opt_lossless,
        }
    }

    fn render_stats(&self, t: &mut Text) -> core::fmt::Result {
        let s = &self.stats;
        let armed = self.armed_functions_published();
        writeln!(t, "tracing: {}", u8::from(self.active.load(Ordering::Relaxed)))?;
        writeln!(t, "events_written: {}", s.written.load(Ordering::Relaxed))?;
        writeln!(t, "events_lost: {}", s.write_failed.load(Ordering::Relaxed) + self.buf.overruns())?;
        writeln!(t, "events_in_buffer: {}", self.buf.entries())?;
        writeln!(t, "readers: {}", self.readers.load(Ordering::Relaxed))?;
        writeln!(t, "functions_armed: {}", armed)?;
        writeln!(t, "functions_refused: {}", s.funcs_refused.load(Ordering::Relaxed))?;
        writeln!(t, "probes_armed: {}", s.probes_armed.load(Ordering::Relaxed))?;
        writeln!(t, "max_probes: {}", self.max_probes.load(Ordering::Relaxed))?;
        writeln!(t, "call_sites_unprobeable: {}", s.sites_unprobeable.load(Ordering::Relaxed))?;
        writeln!(t, "trampoline_entries: {}", s.redirects.load(Ordering::Relaxed))?;
        writeln!(t, "tasks_overflow: {}", s.task_overflow.load(Ordering::Relaxed))?;
        writeln!(t, "atomic_calls_queued: {}", s.ahead_queued.load(Ordering::Relaxed))?;
        writeln!(t, "atomic_arming_pending: {}", self.ahead_pending())?;
        writeln!(t, "functions_armed_ahead: {}", s.armed_ahead.load(Ordering::Relaxed))?;
        writeln!(t, "functions_disarmed: {}", s.funcs_disarmed.load(Ordering::Relaxed))?;
        writeln!(t, "probe_registrations: {}", s.registrations.load(Ordering::Relaxed))?;
        writeln!(t, "probe_registration_us: {}", s.register_ns.load(Ordering::Relaxed) / 1000)?;
        writeln!(t, "probe_unregistrations: {}", s.unregistrations.load(Ordering::Relaxed))?;
        writeln!(t, "probe_unregistration_us: {}", s.unregister_ns.load(Ordering::Relaxed) / 1000)?;
        writeln!(t, "late_int3_recovered: {}", crate::late_int3::RECOVERED.load(Ordering::Relaxed))?;
        writeln!(t, "irq_roots_missing: {}", s.irq_roots_missing.load(Ordering::Relaxed))?;
        writeln!(t, "lossless_waits: {}", s.lossless_waits.load(Ordering::Relaxed))?;
        for v in 1..Reason::COUNT as u8 {
            let r = Reason::from_u8(v);
            let n = s.reasons.get(v as usize).map_or(0, |c| c.load(Ordering::Relaxed));
            writeln!(t, "{}: {}", r.stat_name(), n)?;
        }
        Ok(())
    }

    /// Applies a write of `data` to `id`. `append`: the file was opened with O_APPEND.
    pub(crate) fn write_file(&self, id: FileId, data: &[u8], append: bool) -> Result {
        if data.len() > MAX_WRITE {
            return Err(EINVAL);
        }
        match id {
            FileId::SetPid => self.write_set_pid(data, append),
            FileId::StartFunction => self.write_start(data),
            FileId::Filter => self.write_filter(data, append),
            FileId::MaxDepth => {
                let v = parse::parse_range(data, 0, MAX_FRAMES as u64 - 1).map_err(errno)?;
                self.max_depth.store(v as u32, Ordering::Relaxed);
                Ok(())
            }
            FileId::MaxProbes => {
                let v = parse::parse_range(data, 16, crate::engine::MAX_MAX_PROBES).map_err(errno)?;
                self.max_probes.store(v, Ordering::Relaxed);
                Ok(())
            }
            FileId::DisarmAfter => {
                let v = parse::parse_range(data, 0, MAX_DISARM_AFTER_S).map_err(|e| {
                    self.log(format_args!("disarm_after: seconds from 0 (never) to {}", MAX_DISARM_AFTER_S));
                    errno(e)
                })?;
                self.disarm_after_s.store(v as u32, Ordering::Relaxed);
                self.schedule_reap();
                Ok(())
            }
            FileId::ArmWaitMs => {
                let v = parse::parse_range(data, 0, MAX_ARM_WAIT_MS).map_err(|e| {
                    self.log(format_args!("arm_wait_ms: milliseconds from 0 (never wait) to {}", MAX_ARM_WAIT_MS));
                    errno(e)
                })?;
                self.arm_wait_ms.store(v as u32, Ordering::Relaxed);
                Ok(())
            }
            FileId::TracingOn => {
                let on = parse::parse_bool(data).map_err(errno)?;
                let mut ctl = self.lock_ctl();
                let was = ctl.tracing_on;
                ctl.tracing_on = on;
                if on {
                    if let Err(e) = self.activate(&mut ctl) {
                        ctl.tracing_on = was;
                        drop(ctl);
                        self.log(format_args!("tracing_on: cannot arm the start function ({:?})", e));
                        return Err(e);
                    }
                } else {
                    self.deactivate(&mut ctl);
                }
                Ok(())
            }
            FileId::BufferSizeKb => {
                let kb = parse::parse_range(data, 1, MAX_BUFFER_KB).map_err(errno)?;
                self.buf.resize(kb * 1024).inspect_err(|_| {
                    self.log(format_args!("buffer_size_kb: cannot resize to {} KiB", kb));
                })
            }
            FileId::Options => {
                let (opt, on) = parse::parse_option(data).map_err(|e| {
                    self.log(format_args!("options: unknown option (known: follow-forks, retval, duration, irqs, lossless; 'no' clears)"));
                    errno(e)
                })?;
                self.option(opt).store(on, Ordering::Relaxed);
                if opt == OptionName::Irqs && on {
                    // Tracing may be on already: hook the interrupt entries now.
                    self.add_irq_roots(&mut self.lock_ctl());
                }
                Ok(())
            }
            FileId::ErrorLogFile => {
                self.errors.lock().clear();
                Ok(())
            }
            FileId::Trace => {
                self.buf.reset();
                Ok(())
            }
            FileId::Readme | FileId::Stats | FileId::TracePipe => Err(EPERM),
        }
    }

    fn write_set_pid(&self, data: &[u8], append: bool) -> Result {
        let mut pids = [0u32; MAX_PIDS];
        let n = parse::parse_pids(data, &mut pids).map_err(errno)?;
        let mut tgids = [0u32; MAX_PIDS];
        let mut m = 0;
        let mut ctl = self.lock_ctl();
        if append {
            for t in self.traced.iter() {
                let t = t.load(Ordering::Relaxed);
                if t != 0 && !tgids[..m].contains(&t) {
                    tgids[m] = t;
                    m += 1;
                }
            }
        }
        for &pid in &pids[..n] {
            // SAFETY: trivial C helper; looks the PID up under RCU.
            let tgid = unsafe { bindings::fctrace_pid_to_tgid(pid as i32) };
            if tgid < 0 {
                // ESRCH: no such task; EPERM: a kernel thread (it makes no system calls
                // and shares no process with anything fctrace could follow).
                return Err(Error::from_errno(tgid));
            }
            let tgid = tgid as u32;
            if !tgids[..m].contains(&tgid) {
                if m == MAX_PIDS {
                    return Err(ENOSPC);
                }
                tgids[m] = tgid;
                m += 1;
            }
        }
        let mut old = [0u32; MAX_PIDS];
        for (o, t) in old.iter_mut().zip(self.traced.iter()) {
            *o = t.load(Ordering::Relaxed);
        }
        for (i, t) in self.traced.iter().enumerate() {
            t.store(tgids[i], Ordering::Release);
        }
        if m == 0 {
            self.deactivate(&mut ctl);
            return Ok(());
        }
        if let Err(e) = self.activate(&mut ctl) {
            for (o, t) in old.iter().zip(self.traced.iter()) {
                t.store(*o, Ordering::Release);
            }
            drop(ctl);
            self.log(format_args!("set_pid: cannot arm the start function ({:?})", e));
            return Err(e);
        }
        Ok(())
    }

    fn write_start(&self, data: &[u8]) -> Result {
        let sym = parse::parse_symbol(data).map_err(errno)?;
        let start = match sym {
            Symbol::None => None,
            Symbol::Name(n) => {
                let c = CString::try_from_fmt(kernel::fmt!("{}", n))?;
                let (addr, ok) = resolve(&c)?;
                if !ok {
                    self.log(format_args!("start_function: '{}' cannot be probed (not kernel text, or blacklisted)", n));
                    return Err(EINVAL);
                }
                Some(addr)
            }
            Symbol::Addr(a) => {
                let mut buf = KVec::new();
                let Some(info) = symbolize(a, &mut buf) else {
                    self.log(format_args!("start_function: no symbol at {:#x}", a));
                    return Err(ENOENT);
                };
                if info.offset != 0 {
                    self.log(format_args!("start_function: {:#x} is not the start of a function ({}+{:#x})", a, info.name, info.offset));
                    return Err(EINVAL);
                }
                let mut p = core::pin::pin!(Probe::at(a, crate::kprobe::no_handler, ()));
                if p.as_mut().register().is_err() {
                    self.log(format_args!("start_function: '{}' cannot be probed", info.name));
                    return Err(EINVAL);
                }
                Some(a)
            }
        };
        let mut ctl = self.lock_ctl();
        self.change_armed(&mut ctl, |c| &mut c.start, start, "start_function")
    }

    /// Sets a setting that decides what is armed (`*field(ctl) = new`). While tracing,
    /// everything is armed again from scratch; if that fails, the old value comes back,
    /// tracing goes on as before, and the write fails.
    fn change_armed<T>(
        &self,
        ctl: &mut Control,
        field: impl Fn(&mut Control) -> &mut T,
        new: T,
        file: &str,
    ) -> Result {
        let old = core::mem::replace(field(ctl), new);
        if !self.active.load(Ordering::Acquire) {
            return Ok(());
        }
        self.deactivate(ctl);
        if let Err(e) = self.activate(ctl) {
            *field(ctl) = old;
            let _ = self.activate(ctl);
            self.log(format_args!("{}: cannot arm the start function with the new value ({:?})", file, e));
            return Err(e);
        }
        Ok(())
    }

    fn write_filter(&self, data: &[u8], append: bool) -> Result {
        let mut new: KVec<(bool, KVec<u8>)> = KVec::new();
        let mut ctl = self.lock_ctl();
        if append {
            for p in ctl.filter_patterns() {
                let mut g = KVec::new();
                g.extend_from_slice(p.glob, GFP_KERNEL)?;
                new.push((p.negate, g), GFP_KERNEL)?;
            }
        }
        let mut oom = false;
        parse::parse_filter(data, |p| {
            if new.len() >= MAX_FILTERS {
                return Err(ParseError::TooMany);
            }
            let mut g = KVec::new();
            if g.extend_from_slice(p.glob, GFP_KERNEL).is_err() || new.push((p.negate, g), GFP_KERNEL).is_err() {
                oom = true;
            }
            Ok(())
        })
        .map_err(errno)?;
        if oom {
            return Err(ENOMEM);
        }
        // Functions already armed were judged by the old filter: start over.
        self.change_armed(&mut ctl, |c| &mut c.filters, new, "filter")
    }
}
