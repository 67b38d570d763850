// SPDX-License-Identifier: GPL-2.0

//! Arming a function: decoding its live code, classifying its call, jump and return
//! sites, and registering a probe on each. Runs in the work item (or a control-file
//! write), with the tracer's mutex held; never in a probe handler. Placing the probes of
//! one function is `build.rs`; finding the running kernel's branch thunks `thunks.rs`.

#[cfg(target_arch = "aarch64")]
mod arm64;
mod build;
mod thunks;

pub(crate) use thunks::find_thunks;

use super::policy::{is_denied, is_instrumentation};
use super::site::{EntryKind, SiteData, SiteKind, Target};
use super::table::{
    EntryId, FuncState, BELOW_ALL, HOOK_ENTRY, HOOK_LIVE, HOOK_NONE, HOOK_PROBE, HOOK_TAIL,
};
use super::{kernel_text, load_kernel, read_kernel, timed, Tracer, TracerInner};
use crate::decode::{self, Flow};
use crate::emulate;
use crate::fentry::{self, fentry_offset};
use crate::kprobe::{Probe, ProbeSet};
use crate::ksym::SymBuf;
use crate::parse::{self, FilterVerdict, OptionName};
use crate::presite;
use crate::record::Reason;
use crate::thunks::{Branch, Class, SymInfo, Text, Thunks, CALL_PADDING};
use core::sync::atomic::Ordering;
use kernel::alloc::{KVVec, KVec};
use kernel::prelude::*;

/// The stack pointer's register number.
const RSP: u8 = 4;

/// The largest function fctrace decodes.
pub(crate) const MAX_FUNC_SIZE: u64 = 256 * 1024;

/// The largest function [`Tracer::is_leaf_function`] looks at (its code is copied to the
/// stack): user-copy and string routines are a few hundred bytes.
const LEAF_AHEAD_MAX: u64 = 512;

/// An armed function: its probes.
pub(crate) struct Func {
    pub(crate) sites: ProbeSet<SiteData>,
    /// Its entry in the function table.
    pub(crate) entry: EntryId,
    /// Never disarmed lazily: the start function and interrupt entry functions, whose
    /// entry hooks open trees.
    pub(crate) pinned: bool,
    /// The end of its code.
    pub(crate) end: u64,
    /// Its cold part (`f.cold`): start and end, `(0, 0)` when it has none.
    pub(crate) cold: (u64, u64),
    /// Its direct callees with an entry hook (their call sites carry no probe).
    pub(crate) hooked_callees: KVec<u64>,
    /// The targets of its calls through global function pointers, read when it was armed
    /// (`smp_ops.send_reschedule`, `x86_platform`'s methods; see `straight_program`), and
    /// the functions whose address it loads into a register (`decode::loaded_address`:
    /// function pointers it passes on, `lru_add()` in `folio_add_lru()`): armed with it
    /// (`Tracer::arm_as`), and counted among its direct callees for arming ahead. The
    /// calls themselves stay indirect (their sites' handlers see the target each call
    /// goes to).
    pub(crate) fixed_callees: KVec<u64>,
}

impl Func {
    /// Its direct callees: those of its probed sites, and those with an entry hook.
    pub(crate) fn direct_callees(&self) -> impl Iterator<Item = u64> + '_ {
        let probed = self
            .sites
            .iter()
            .filter(|s| !s.data.at_post)
            .filter_map(|s| s.data.kind.direct_callee());
        let fixed = self.fixed_callees.iter().copied();
        Iterator::chain(
            Iterator::chain(probed, self.hooked_callees.iter().copied()),
            fixed,
        )
    }
}

impl Tracer {
    /// Arms `target`, or records why it is not followed. Returns its new state.
    pub(crate) fn arm(&self, inner: &mut TracerInner, target: u64) -> FuncState {
        self.arm_as(inner, target, false)
    }

    /// Arms `target`; a `root` (the start function, an interrupt entry) is armed whatever
    /// the filter says, and pinned. The functions whose address it loads or reads from a
    /// global pointer (`Func::fixed_callees`) are armed with it, before a task can run
    /// its code traced: it may call them through a pointer it passes on where the task
    /// cannot wait (`lru_add_drain_cpu()` passes `lru_add()` to
    /// `folio_batch_move_lru()`, which calls it with the LRU lock held). Queued for
    /// arming ahead instead, the first calls raced that round and were not followed
    /// (`trace/fn_pointers.tc` on the debug kernel). Theirs are not armed so in turn:
    /// one level, a bounded cost (`lru_add_drain_cpu()` loads six).
    pub(crate) fn arm_as(&self, inner: &mut TracerInner, target: u64, root: bool) -> FuncState {
        let state = self.arm_one(inner, target, root);
        if state != FuncState::Armed {
            return state;
        }
        let mut fixed: KVec<u64> = KVec::new();
        if let Some(f) = self.armed_func(inner, target) {
            for &c in f.fixed_callees.iter() {
                if fixed.push(c, GFP_KERNEL).is_err() {
                    break;
                }
            }
        }
        // Their entry hooks, and their callees', in one update of the ftrace filter (one
        // each costs 0.3 s on the debug kernel).
        self.prehook(inner, &fixed);
        for c in fixed {
            if self.table.lookup(c) == FuncState::Unknown
                && self.arm_one(inner, c, false) == FuncState::Armed
            {
                self.stats.armed_ahead.fetch_add(1, Ordering::Relaxed);
            }
        }
        state
    }

    /// Arms `target` alone (see [`Tracer::arm_as`]).
    fn arm_one(&self, inner: &mut TracerInner, target: u64, root: bool) -> FuncState {
        let state = match self.try_arm(inner, target, root) {
            Ok(s) => s,
            Err(r) => {
                self.stats.funcs_refused.fetch_add(1, Ordering::Relaxed);
                FuncState::Leaf(r)
            }
        };
        let Some(entry) = self.table.insert(target, state) else {
            return FuncState::Leaf(Reason::ArmFailed);
        };
        if self.settings.option(OptionName::Args) {
            if let Ok(mut sym) = SymBuf::new() {
                let spec = self.arg_spec(target, &mut sym);
                self.table.set_args(entry, spec);
            }
        }
        if state == FuncState::Armed {
            // `try_arm` pushed the function last; it has its entry now.
            if let Some(f) = inner.funcs.last_mut() {
                f.entry = entry;
                f.pinned = root;
                self.table.set_end(entry, f.end);
                self.table
                    .set_cold(entry, f.cold.0, (f.cold.1 - f.cold.0) as u32);
                self.table.touch(entry);
            }
            // Nothing below it is known to be armed (unless it calls nothing directly): a
            // traced task entering it where it may sleep waits for a closure below it
            // (`entry.rs`), unless one comes first.
            if let Some(f) = inner.funcs.last() {
                let below = if f.direct_callees().next().is_none() {
                    BELOW_ALL
                } else {
                    0
                };
                self.table.set_below(target, below, false);
            }
            // A function reached through a function pointer has no entry hook yet (direct
            // callees of armed functions have), unless its callees needed an update
            // (`build_func` adds it to that one): with one, a pre-site that computes the
            // target of an indirect call lets the traced task run on (see `step.rs`).
            // Without, the call is drawn at its call site (the task steps there), as for
            // a function with no ftrace site. So the hook waits: for the next update that
            // arming makes anyway, or for arming to be quiet (`release_blockers`). An
            // update costs about the same for one hook as for ten (8 to 13 ms under
            // emulation), and late in a wide workload most functions armed are methods
            // reached through ops tables whose callees are hooked already: one update
            // each, the most of arming's time there.
            if !root && self.hooks.bits(target) & (HOOK_ENTRY | HOOK_NONE) == 0 {
                if inner.deferred_hooks.push(target, GFP_KERNEL).is_ok() {
                    self.stats
                        .entry_hooks_deferred
                        .fetch_add(1, Ordering::Relaxed);
                    self.schedule_optimize();
                } else if let Ok(mut sym) = SymBuf::new() {
                    self.hook_callees(inner, &[(target, false)], &mut sym);
                }
            }
        }
        state
    }

    fn try_arm(
        &self,
        inner: &mut TracerInner,
        target: u64,
        root: bool,
    ) -> core::result::Result<FuncState, Reason> {
        let mut sym = SymBuf::new().map_err(|_| Reason::ArmFailed)?;
        let info = sym.lookup(target).ok_or(Reason::NotFunction)?;
        if info.offset != 0 {
            return Err(Reason::NotFunction);
        }
        if self.table.nearly_full() {
            return Err(Reason::ArmFailed);
        }
        let verdict = if root {
            FilterVerdict::Follow
        } else {
            parse::filter_verdict(inner.filter_patterns(), info.name.as_bytes())
        };
        match verdict {
            FilterVerdict::Hide => return Ok(FuncState::Hidden),
            FilterVerdict::Leaf => return Err(Reason::Filtered),
            FilterVerdict::Follow => {}
        }
        if never_probed(inner, target, info.name.as_bytes()) || self.going.contains(target) {
            return Err(Reason::Unprobeable);
        }
        let size = info.size;
        if size == 0 || size > MAX_FUNC_SIZE {
            return Err(Reason::Unprobeable);
        }
        let func = self.build_func(inner, target, size, &mut sym, !root)?;
        self.stats
            .probes_armed
            .fetch_add(func.sites.registered() as u64, Ordering::Relaxed);
        inner
            .funcs
            .push(func, GFP_KERNEL)
            .map_err(|_| Reason::ArmFailed)?;
        Ok(FuncState::Armed)
    }

    /// Whether the function at `c` (its start) would get no probe when armed: its live
    /// code makes no call and no jump out of itself that fctrace draws (returns through a
    /// return thunk and calls of instrumentation do not count). Arming such a leaf ahead
    /// costs a decode, no registration. Only functions of at most [`LEAF_AHEAD_MAX`]
    /// bytes are looked at.
    pub(super) fn is_leaf_function(&self, inner: &TracerInner, c: u64) -> bool {
        let Ok(mut sym) = SymBuf::new() else {
            return false;
        };
        let Some(size) = armable_size(inner, &mut sym, c, LEAF_AHEAD_MAX) else {
            return false;
        };
        let mut code = [0u8; LEAF_AHEAD_MAX as usize];
        let Some(code) = code.get_mut(..size as usize) else {
            return false;
        };
        if !read_kernel(c, code) {
            return false;
        }
        #[cfg(target_arch = "aarch64")]
        return arm64::is_leaf(code, c, size, &mut sym);
        // The same reading of the code as `build_func()`'s.
        let mut padding = Padding::default();
        let mut leaf = true;
        let res = decode::scan(code, c, |off, insn| {
            let foreign = padding.foreign_int3(insn.flow, code, off);
            leaf &= !foreign
                && branch_site(
                    insn.flow,
                    |t| (c..c + size).contains(&t),
                    &mut sym,
                    &inner.thunks,
                )
                .is_none();
        });
        res.is_ok() && leaf
    }

    /// Gives the functions `funcs` that are about to be armed (those not armed yet, not
    /// known otherwise), and their direct callees, their entry hooks in one update of the ftrace
    /// filter, before they are armed one by one: arming each then finds its callees
    /// hooked and updates nothing. An update costs what ftrace's filter and records cost
    /// to walk (with one update per function, most of arming's time, and more as the
    /// filter grows), so a
    /// closure of 128 functions armed level by level costs a few updates instead of 128.
    /// A callee hooked for a function whose arming then stops (its budget, its time) only
    /// costs other tasks a call into ftrace: its entry hook draws nothing until a caller
    /// is armed. With the mutex held.
    pub(super) fn prehook(&self, inner: &mut TracerInner, funcs: &[u64]) {
        let Ok(mut sym) = SymBuf::new() else { return };
        let mut callees: KVec<(u64, bool)> = KVec::new();
        for &f in funcs {
            if self.table.lookup(f) != FuncState::Unknown {
                continue;
            }
            // The function itself too, if reached through a pointer (`arm_as` hooks it).
            if self.hooks.bits(f) & (HOOK_ENTRY | HOOK_NONE) == 0
                && callees.push((f, false), GFP_KERNEL).is_err()
            {
                break;
            }
            self.scan_callees(inner, f, &mut sym, &mut callees);
        }
        if !callees.is_empty() {
            self.hook_callees(inner, &callees, &mut sym);
        }
    }

    /// Adds the direct callees (and whether each is tail-called) of the function at `f`
    /// to `out`, read from its code as `build_func()` reads it (nothing if it is not a
    /// function fctrace arms, or its code cannot be read or decoded).
    fn scan_callees(
        &self,
        inner: &TracerInner,
        f: u64,
        sym: &mut SymBuf,
        out: &mut KVec<(u64, bool)>,
    ) {
        let Some(size) = armable_size(inner, sym, f, MAX_FUNC_SIZE) else {
            return;
        };
        let Ok(mut code) = KVVec::from_elem(0u8, size as usize, GFP_KERNEL) else {
            return;
        };
        if !read_kernel(f, &mut code) {
            return;
        }
        self.preempt.restore_hook_bytes(f, &mut code);
        inner.restore_entry_probe_bytes(f, &mut code);
        #[cfg(target_arch = "aarch64")]
        {
            let mut found: KVec<(u64, bool)> = KVec::new();
            let mut bad = false;
            let res = arm64::scan_sites(&code, f, size, sym, |_, kind| {
                if let Some(c) = kind.direct_callee() {
                    let tail = !matches!(kind, SiteKind::Call(_));
                    bad |= found.push((c, tail), GFP_KERNEL).is_err();
                }
            });
            if res.is_ok() && !bad {
                for c in found {
                    if !out.contains(&c) && out.push(c, GFP_KERNEL).is_err() {
                        return;
                    }
                }
            }
            return;
        }
        let site = site_offset(&code, f, sym);
        let mut padding = Padding::default();
        let mut found: KVec<(u64, bool)> = KVec::new();
        let mut bad = false;
        let res = decode::scan(&code, f, |off, insn| {
            let foreign = padding.foreign_int3(insn.flow, &code, off);
            // The ftrace site (a call while ftrace uses it) is no callee; an ordinary call
            // there is.
            if Some(off) == site {
                return;
            }
            bad |= foreign;
            let Some(kind) = branch_site(
                insn.flow,
                |t| (f..f + size).contains(&t),
                sym,
                &inner.thunks,
            ) else {
                return;
            };
            if let Some(c) = kind.direct_callee() {
                let tail = !matches!(kind, SiteKind::Call(_));
                bad |= found.push((c, tail), GFP_KERNEL).is_err();
            }
        });
        if res.is_err() || bad {
            return;
        }
        for c in found {
            if !out.contains(&c) && out.push(c, GFP_KERNEL).is_err() {
                return;
            }
        }
    }

    /// Gives the direct callees `callees` (with whether they are tail-called) of a
    /// function being armed an entry hook where they have an ftrace site and may be
    /// followed, all in one update of the ftrace filter. Those that cannot have one are
    /// marked so (their call sites get probes).
    fn hook_callees(&self, inner: &mut TracerInner, callees: &[(u64, bool)], sym: &mut SymBuf) {
        let hooks = &self.hooks;
        // Where this makes an update, the entry hooks deferred so far go with it.
        let deferred = if self.any_unhooked(callees) {
            core::mem::take(&mut inner.deferred_hooks)
        } else {
            KVec::new()
        };
        let mut new: KVec<(u64, u64)> = KVec::new();
        let mut ips: KVec<u64> = KVec::new();
        let all = Iterator::chain(
            callees.iter().copied(),
            deferred.iter().map(|&f| (f, false)),
        );
        for (c, tail) in all {
            let tail_bit = if tail { HOOK_TAIL } else { 0 };
            let h = hooks.bits(c);
            if h & (HOOK_ENTRY | HOOK_NONE) != 0 {
                if h & HOOK_ENTRY != 0 && tail {
                    hooks.add(c, HOOK_TAIL, 0);
                }
                continue;
            }
            let eligible = !self.going.contains(c)
                && sym
                    .lookup(c)
                    .is_some_and(|i| i.offset == 0 && !never_probed(inner, c, i.name.as_bytes()));
            let site = if eligible { ftrace_site(c, sym) } else { None };
            let Some(ip) = site else {
                // No ftrace site: an entry probe where kprobes can optimize one (see
                // `entry_probe.rs`); else its call sites are probed.
                let probed = self.add_entry_probe(inner, c, tail, sym, EntryKind::Notrace)
                    && hooks.add(
                        c,
                        HOOK_ENTRY | HOOK_PROBE | HOOK_LIVE | tail_bit,
                        *call_range(c, sym).start(),
                    );
                if !probed {
                    hooks.add(c, HOOK_NONE, 0);
                }
                continue;
            };
            if new.reserve(1, GFP_KERNEL).is_err() || ips.reserve(1, GFP_KERNEL).is_err() {
                continue;
            }
            // Published before the hook goes live (no callback runs before that). A full
            // table: the callee keeps probes on its call sites.
            if !hooks.add(c, HOOK_ENTRY | tail_bit, *call_range(c, sym).start()) {
                continue;
            }
            // Room was reserved: these do not allocate.
            let _ = ips.push(ip, GFP_KERNEL);
            let _ = new.push((ip, c), GFP_KERNEL);
        }
        if new.is_empty() {
            return;
        }
        let mut update = |ips: &[u64]| {
            let t0 = super::clock_ns();
            self.stats.registrations.fetch_add(1, Ordering::Relaxed);
            self.stats.entry_updates.fetch_add(1, Ordering::Relaxed);
            let res = inner.entry.add(ips);
            let ns = super::clock_ns().saturating_sub(t0);
            self.stats.register_ns.fetch_add(ns, Ordering::Relaxed);
            self.stats.entry_update_ns.fetch_add(ns, Ordering::Relaxed);
            self.stats
                .entry_update_max_ns
                .fetch_max(ns, Ordering::Relaxed);
            if matches!(res, Ok(true)) {
                self.stats.entry_ops.fetch_add(1, Ordering::Relaxed);
                self.stats.entry_ops_ns.fetch_add(ns, Ordering::Relaxed);
            }
            res.is_ok()
        };
        // A batch ftrace refuses (one of it is not an ftrace site after all, or another
        // ops has exclusive use of it) is split in halves until the refused are alone.
        fentry::apply_halving(
            ips.len(),
            |r| ips.get(r).is_some_and(&mut update),
            |r, hooked| {
                for &(_, c) in new.get(r).unwrap_or(&[]) {
                    if hooked {
                        hooks.add(c, HOOK_LIVE, 0);
                        self.stats.entry_hooks.fetch_add(1, Ordering::Relaxed);
                    } else {
                        hooks.set(c, HOOK_NONE);
                        self.stats
                            .entry_hooks_refused
                            .fetch_add(1, Ordering::Relaxed);
                    }
                }
            },
        );
    }

    /// Whether any of `callees` has no entry hook yet and was not found unhookable: giving
    /// them hooks makes an ftrace update.
    fn any_unhooked(&self, callees: &[(u64, bool)]) -> bool {
        callees
            .iter()
            .any(|&(c, _)| self.hooks.bits(c) & (HOOK_ENTRY | HOOK_NONE) == 0)
    }

    /// Gives the functions whose entry hook was deferred (see `arm_as`) their hooks, in
    /// one update. With the mutex held.
    pub(super) fn flush_deferred_hooks(&self, inner: &mut TracerInner) {
        let deferred = core::mem::take(&mut inner.deferred_hooks);
        if deferred.is_empty() || !self.active.load(Ordering::Acquire) {
            return;
        }
        let mut list: KVec<(u64, bool)> = KVec::new();
        if list.reserve(deferred.len(), GFP_KERNEL).is_err() {
            return;
        }
        for &f in deferred.iter() {
            // Room was reserved: this does not allocate.
            let _ = list.push((f, false), GFP_KERNEL);
        }
        if let Ok(mut sym) = SymBuf::new() {
            self.hook_callees(inner, &list, &mut sym);
        }
    }

    /// Makes room for `n` more probes under `max_probes`, disarming the least recently
    /// entered idle functions if needed.
    fn make_room(&self, inner: &mut TracerInner, n: u64) -> core::result::Result<(), Reason> {
        let max = self.settings.max_probes.load(Ordering::Relaxed);
        let after = self.stats.probes_armed.load(Ordering::Relaxed) + n;
        if after > max {
            self.reap(inner, 0, after - max);
            if self.stats.probes_armed.load(Ordering::Relaxed) + n > max {
                return Err(Reason::ArmFailed);
            }
        }
        Ok(())
    }

    /// The armed function starting at `func`.
    pub(crate) fn armed_func<'a>(
        &self,
        inner: &'a mut TracerInner,
        func: u64,
    ) -> Option<&'a mut Func> {
        let e = self.table.find(func)?;
        inner.funcs.iter_mut().find(|f| f.entry == e)
    }
}

/// The size of the function that starts at `f`, if fctrace may arm it and it has at most
/// `max` bytes.
fn armable_size(inner: &TracerInner, sym: &mut SymBuf, f: u64, max: u64) -> Option<u64> {
    let info = sym.lookup(f)?;
    (info.offset == 0
        && info.size > 0
        && info.size <= max
        && !never_probed(inner, f, info.name.as_bytes()))
    .then_some(info.size)
}

/// Whether the function `name` at `addr` is never probed: fctrace's own code, the deny
/// list, a branch thunk, a cold part.
pub(crate) fn never_probed(inner: &TracerInner, addr: u64, name: &[u8]) -> bool {
    let in_self = crate::sys::addr_in_self(addr);
    // A cold part (`f.cold`) is part of its function, armed with it, never on its own.
    in_self || is_denied(name) || inner.thunks.is_thunk(addr) || parse::is_cold_name(name)
}

/// The first instruction of a function after `endbr64` and the ftrace site: a probe there
/// is an int3 probe (not ftrace-based) at the function's entry stack pointer.
pub(crate) fn body_start(func: u64, sym: &mut SymBuf) -> Option<u64> {
    #[cfg(target_arch = "aarch64")]
    return arm64::body_start(func);
    let mut code = [0u8; 16];
    if !read_kernel(func, &mut code) {
        return None;
    }
    let off = match site_offset(&code, func, sym) {
        Some(site) => site + 5,
        None => fentry_offset(&code) as u32,
    };
    Some(func + u64::from(off))
}

/// arm64's root in all-system-calls mode: the one call through a register of `func`
/// (`invoke_syscall()`), its address and register. `None` if it has not exactly one, is
/// not a function fctrace arms, or its code cannot be read.
#[cfg(target_arch = "aarch64")]
pub(crate) fn register_call_site(
    inner: &TracerInner,
    func: u64,
    sym: &mut SymBuf,
) -> Option<(u64, u8)> {
    let size = armable_size(inner, sym, func, MAX_FUNC_SIZE)?;
    let mut code = KVVec::from_elem(0u8, size as usize, GFP_KERNEL).ok()?;
    if !read_kernel(func, &mut code) {
        return None;
    }
    arm64::only_register_call(&code, func, size, sym)
}

/// Where calls of `func` may point: with call-depth tracking (`retbleed=stuff`) the
/// kernel points direct calls, static calls among them, at the callee's padding
/// (`__pfx_<func>`), where its accounting thunk falls through into it.
pub(crate) fn call_range(func: u64, sym: &mut SymBuf) -> core::ops::RangeInclusive<u64> {
    // (arm64's calls point at the function: the words before it are data, the ftrace
    // ops pointer of `DYNAMIC_FTRACE_WITH_CALL_OPS`.)
    #[cfg(target_arch = "aarch64")]
    return func..=func;
    if let Some(i) = sym.lookup(func.wrapping_sub(1)) {
        if i.name.starts_with("__pfx_") && i.offset < 64 {
            return func.wrapping_sub(1 + i.offset)..=func;
        }
    }
    // An assembly function's padding has no symbol (`preempt_schedule_thunk`, `memmove`):
    // its last bytes, as far as they run straight into the function.
    let mut before = [0u8; CALL_PADDING as usize];
    let start = read_kernel(func.wrapping_sub(CALL_PADDING), &mut before)
        .then(|| crate::thunks::straight_start(&before, func))
        .flatten();
    start.unwrap_or(func)..=func
}

/// The ftrace site of the function at `func`: its first instruction after `endbr64`, a
/// 5-byte nop, or a call into an ftrace caller while ftrace uses it (not an ordinary call:
/// see `crates/fctrace-decode/src/fentry.rs`). `None` when it has none.
fn ftrace_site(func: u64, sym: &mut SymBuf) -> Option<u64> {
    #[cfg(target_arch = "aarch64")]
    return arm64::ftrace_site(func);
    let mut code = [0u8; 9];
    if !read_kernel(func, &mut code) {
        return None;
    }
    Some(func + u64::from(site_offset(&code, func, sym)?))
}

/// The offset of the ftrace site in `code`, the first bytes of the function at `func`
/// (see `crates/fctrace-decode/src/fentry.rs`).
fn site_offset(code: &[u8], func: u64, sym: &mut SymBuf) -> Option<u32> {
    fentry::ftrace_site_offset(code, func, |t| sym.lookup(t).map(|i| (i.name, i.offset)))
        .map(u32::from)
}

/// A run of int3 up to the end of the function is padding.
fn is_padding(code: &[u8], off: u32) -> bool {
    code.get(off as usize..)
        .is_some_and(|rest| rest.iter().all(|&b| b == 0xcc))
}

/// Tells padding from someone else's breakpoints, instruction by instruction in the
/// order of a linear sweep: nothing falls through into the int3 after an unconditional
/// jump or a return, so a run of them there is padding (the kernel fills what
/// alternatives patching freed after a shortened jump with int3), as is a run up to the
/// end of the function.
#[derive(Default)]
struct Padding {
    after_terminal: bool,
}

impl Padding {
    /// Whether the instruction (`flow`, at `off` in `code`) is a breakpoint that is not
    /// padding.
    fn foreign_int3(&mut self, flow: Flow, code: &[u8], off: u32) -> bool {
        let before = self.after_terminal;
        self.after_terminal = matches!(
            flow,
            Flow::Ret | Flow::Jmp(_) | Flow::JmpReg(_) | Flow::JmpMem(_) | Flow::Ud
        ) || (before && matches!(flow, Flow::Int3));
        matches!(flow, Flow::Int3) && !before && !is_padding(code, off)
    }
}

/// The call site an instruction of the function spanning `func` is, by its control flow:
/// a call, or a jump out of the function (a tail call), to a function or through a
/// register or memory; none for returns (through a return thunk too), calls of
/// instrumentation, and branches inside the function.
fn branch_site(
    flow: Flow,
    inside: impl Fn(u64) -> bool,
    sym: &mut SymBuf,
    thunks: &Thunks,
) -> Option<SiteKind> {
    let outside = |t: u64| !inside(t);
    match flow {
        Flow::Call(t) => {
            classify_direct(t, Branch::Call, sym, thunks).and_then(|c| site_kind(c, SiteKind::Call))
        }
        Flow::CallReg(r) => Some(SiteKind::Call(Target::Reg(r))),
        Flow::CallMem(m) => Some(SiteKind::Call(Target::Mem(m))),
        Flow::Jmp(t) if outside(t) => {
            classify_direct(t, Branch::Jump, sym, thunks).and_then(|c| site_kind(c, SiteKind::Tail))
        }
        Flow::JmpReg(r) => Some(SiteKind::Tail(Target::Reg(r))),
        Flow::JmpMem(m) => Some(SiteKind::Tail(Target::Mem(m))),
        // (arm64's conditions are its own: `arm64.rs`.)
        #[cfg(target_arch = "x86_64")]
        Flow::Jcc(t, Some(cc)) if outside(t) => classify_direct(t, Branch::Jump, sym, thunks)
            .and_then(|c| site_kind(c, |t| SiteKind::TailIf(t, cc))),
        _ => None,
    }
}

/// The running kernel's text for [`Thunks::classify`]: symbols from `sprint_symbol()`,
/// bytes read without faulting.
struct LiveText<'a>(&'a mut SymBuf);

impl Text for LiveText<'_> {
    fn symbol(&mut self, addr: u64) -> Option<SymInfo> {
        self.0.lookup(addr).map(|i| SymInfo {
            offset: i.offset,
            size: i.size,
            padding: i.name.starts_with("__pfx_"),
        })
    }

    fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool {
        read_kernel(addr, buf)
    }
}

/// What a call or jump (`b`) to the fixed address `t` is: a return, a branch through a
/// register (a thunk), a call to instrumentation (`None`: not probed, not shown), or a
/// direct branch to a function.
fn classify_direct(t: u64, b: Branch, sym: &mut SymBuf, thunks: &Thunks) -> Option<Class> {
    let class = thunks.classify(&mut LiveText(sym), b, t);
    if let Class::Direct(f) = class {
        if let Some(info) = sym.lookup(f) {
            if info.offset == 0 && is_instrumentation(info.name.as_bytes()) {
                return None;
            }
        }
    }
    Some(class)
}

/// The call-site kind for a branch of class `c`: `site` for a branch to a function or
/// through a register; none for a return (returns are hooked, see `returns.rs`).
fn site_kind(c: Class, site: impl FnOnce(Target) -> SiteKind) -> Option<SiteKind> {
    match c {
        Class::Return => None,
        Class::Reg(r) => Some(site(Target::Reg(r))),
        Class::Direct(f) => Some(site(Target::Direct(f))),
    }
}
