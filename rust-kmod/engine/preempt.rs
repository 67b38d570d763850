// SPDX-License-Identifier: GPL-2.0

//! Preemption at `preempt_enable()`.
//!
//! The call goes to `preempt_schedule_thunk` (or its `_notrace` twin), which kprobes
//! refuses, and from there through `preempt_schedule()` (also refused) and
//! `preempt_schedule_common()` (or `preempt_schedule_notrace()`) to `__schedule()`. A call
//! to a thunk opens a frame (closed, without a value, when the task is seen above it
//! again), and the [`Hook::Preempt`] probes on the `call __schedule` instructions of those
//! two open a frame for the scheduler inside it, so the calls the scheduler makes for the
//! task are followed as for `schedule()`. Only preemptions hit them, not every context
//! switch.
//!
//! Where the compiler inlined `preempt_schedule_common()` (GCC does, in Debian's kernels),
//! the `call __schedule` is in `preempt_schedule()` itself, which kprobes refuses; and with
//! `PREEMPT_DYNAMIC` the call of a thunk is a static call, which kprobes will not probe.
//! The frames missing then are opened from inside, at the first of the scheduler's calls
//! fctrace sees for the task ([`Tracer::open_preempted`]), from the callers the ORC
//! unwinder finds above it; their returns are hooked there, and the scheduler's time
//! starts at that call.

use super::arming::call_range;
use super::handlers::Hook;
use super::table::FuncState;
use super::tree::{Cur, TaskData};
use super::{call_target, read_kernel, Tracer};
#[cfg(target_arch = "aarch64")]
use crate::a64;
#[cfg(target_arch = "x86_64")]
use crate::decode::{self, Flow};
use crate::kprobe::Probe;
use crate::ksym::{addr_of, SymBuf};
use crate::record::Reason;
use crate::shadow::MAX_FRAMES;
use crate::sys::{self, Regs};
use core::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use kernel::c_str;
use kernel::ffi::c_int;
use kernel::str::CStr;

/// The most `call __schedule` instructions hooked.
pub(crate) const MAX_PREEMPT_HOOKS: usize = 4;

/// What a preemption calls from the function preempted: the thunks, or on arm64
/// (`__preempt_schedule()`) the functions themselves.
#[cfg(target_arch = "x86_64")]
const THUNKS: [&CStr; 2] = [
    c_str!("preempt_schedule_thunk"),
    c_str!("preempt_schedule_notrace_thunk"),
];
#[cfg(target_arch = "aarch64")]
const THUNKS: [&CStr; 2] = [
    c_str!("preempt_schedule"),
    c_str!("preempt_schedule_notrace"),
];

/// The length of a call instruction.
const CALL_LEN: u64 = if cfg!(target_arch = "x86_64") { 5 } else { 4 };

/// The most `call __schedule` instructions on the preemption path.
const MAX_SCHED_RETS: usize = 4;

/// What was found of the preemption path when tracing started (0 = not found).
pub(crate) struct Preempt {
    /// `preempt_schedule_thunk` and `preempt_schedule_notrace_thunk`, and their ends.
    thunks: [AtomicU64; 2],
    thunk_ends: [AtomicU64; 2],
    /// Where calls of each thunk point (its padding, with call-depth tracking).
    thunk_pfx: [AtomicU64; 2],
    /// `__schedule()`; 0 when the hooks are not in place (thunks are plain leaves then).
    sched: AtomicU64,
    /// Where the [`Hook::Preempt`] int3 probes are, and the byte each replaced: arming a
    /// function that contains one (`__cond_resched()` calls `preempt_schedule_common()`)
    /// decodes its code with that byte put back.
    hooks: [AtomicU64; MAX_PREEMPT_HOOKS],
    hook_bytes: [AtomicU8; MAX_PREEMPT_HOOKS],
    /// The return addresses of the `call __schedule` instructions of the preemption
    /// path, hooked or not (`preempt_schedule()`'s, where `preempt_schedule_common()`
    /// was inlined): how [`Tracer::open_preempted`] finds the scheduler's entry.
    sched_rets: [AtomicU64; MAX_SCHED_RETS],
}

impl Preempt {
    pub(crate) fn new() -> Self {
        Preempt {
            thunks: [const { AtomicU64::new(0) }; 2],
            thunk_ends: [const { AtomicU64::new(0) }; 2],
            thunk_pfx: [const { AtomicU64::new(0) }; 2],
            sched: AtomicU64::new(0),
            hooks: [const { AtomicU64::new(0) }; MAX_PREEMPT_HOOKS],
            hook_bytes: [const { AtomicU8::new(0) }; MAX_PREEMPT_HOOKS],
            sched_rets: [const { AtomicU64::new(0) }; MAX_SCHED_RETS],
        }
    }

    /// Whether `f` is `__schedule()` (known only while the hooks are in place).
    pub(crate) fn is_schedule(&self, f: u64) -> bool {
        f != 0 && self.sched.load(Ordering::Relaxed) == f
    }

    /// `__schedule()`, while the hooks are in place (else 0).
    pub(crate) fn sched(&self) -> u64 {
        self.sched.load(Ordering::Relaxed)
    }

    /// Whether a call to `target` calls a preemption thunk (its start, or with
    /// call-depth tracking its padding).
    pub(crate) fn calls_thunk(&self, target: u64) -> bool {
        self.sched.load(Ordering::Relaxed) != 0
            && self.thunks.iter().zip(self.thunk_pfx.iter()).any(|(t, p)| {
                let t = t.load(Ordering::Relaxed);
                t != 0 && target >= p.load(Ordering::Relaxed) && target <= t
            })
    }

    /// The preemption thunk `addr` is in (0: none).
    pub(crate) fn thunk_of(&self, addr: u64) -> u64 {
        self.thunks
            .iter()
            .zip(self.thunk_ends.iter())
            .map(|(t, e)| (t.load(Ordering::Relaxed), e.load(Ordering::Relaxed)))
            .find(|&(t, e)| t != 0 && addr > t && addr < e)
            .map_or(0, |(t, _)| t)
    }

    /// Whether `f` is a preemption thunk whose frame the scheduler's hooks fill.
    pub(crate) fn is_thunk(&self, f: u64) -> bool {
        f != 0
            && self.sched.load(Ordering::Relaxed) != 0
            && self.thunks.iter().any(|t| t.load(Ordering::Relaxed) == f)
    }

    /// The hooks could not all be placed: thunks are plain unprobeable leaves.
    pub(crate) fn disable(&self) {
        self.sched.store(0, Ordering::Relaxed);
    }

    /// Puts back, in `code` (a copy of the function at `start`), the bytes our hooks
    /// replaced with int3.
    pub(crate) fn restore_hook_bytes(&self, start: u64, code: &mut [u8]) {
        for (h, byte) in self.hooks.iter().zip(self.hook_bytes.iter()) {
            let at = h.load(Ordering::Relaxed);
            if at < start {
                continue;
            }
            if let Some(b) = code.get_mut((at - start) as usize) {
                if *b == 0xcc {
                    *b = byte.load(Ordering::Relaxed);
                }
            }
        }
    }

    /// Looks up the preemption path; returns where the [`Hook::Preempt`] probes go (0 =
    /// none), all 0 (and no thunk is treated specially) if a part is missing, e.g. on a
    /// kernel without `CONFIG_PREEMPTION`.
    pub(crate) fn resolve(&self) -> [u64; MAX_PREEMPT_HOOKS] {
        let none = [0u64; MAX_PREEMPT_HOOKS];
        self.sched.store(0, Ordering::Relaxed);
        for h in self.hooks.iter().chain(self.sched_rets.iter()) {
            h.store(0, Ordering::Relaxed);
        }
        let thunks = THUNKS.map(addr_of);
        let sched = addr_of(c_str!("__schedule"));
        if thunks[0] == 0 || sched == 0 {
            return none;
        }
        let Ok(mut sym) = SymBuf::new() else {
            return none;
        };
        // With call-depth tracking, calls of `__schedule()` point at its padding.
        let sched_calls = call_range(sched, &mut sym);
        // The `call __schedule` instructions of the two functions the thunks end up in:
        // `preempt_schedule_common()`'s, or where it was inlined, `preempt_schedule()`'s
        // (not hooked: kprobes refuses that function).
        let common = c_str!("preempt_schedule_common");
        let inlined = addr_of(common) == 0;
        // arm64: the thunk is `preempt_schedule()` itself, which must make the call.
        if cfg!(target_arch = "aarch64") && !inlined {
            return none;
        }
        let first = if inlined {
            c_str!("preempt_schedule")
        } else {
            common
        };
        let mut at = none;
        let mut n = 0;
        let mut rets = [0u64; MAX_SCHED_RETS];
        let mut r = 0;
        for (i, f) in [first, c_str!("preempt_schedule_notrace")]
            .into_iter()
            .enumerate()
        {
            let start = addr_of(f);
            let size = sym.lookup(start).map_or(0, |i| i.size);
            if start == 0 || size == 0 {
                return none;
            }
            let Some(calls) = calls_to(start, size, sched_calls.clone()) else {
                return none;
            };
            for c in calls.into_iter().flatten() {
                let Some(ret) = rets.get_mut(r) else {
                    return none;
                };
                *ret = c.wrapping_add(CALL_LEN);
                r += 1;
                // arm64: no hooks (see the module documentation).
                if (i == 0 && inlined) || cfg!(target_arch = "aarch64") {
                    continue;
                }
                let Some(slot) = at.get_mut(n) else {
                    return none;
                };
                *slot = c;
                n += 1;
            }
        }
        if n == 0 && cfg!(target_arch = "x86_64") {
            return none;
        }
        let mut bytes = [0u8; MAX_PREEMPT_HOOKS];
        for (b, &a) in bytes.iter_mut().zip(at.iter()).take(n) {
            let mut one = [0u8];
            if !read_kernel(a, &mut one) || one[0] == 0xcc {
                return none;
            }
            *b = one[0];
        }
        for i in 0..n {
            self.hooks[i].store(at[i], Ordering::Relaxed);
            self.hook_bytes[i].store(bytes[i], Ordering::Relaxed);
        }
        for (r, a) in self.sched_rets.iter().zip(rets) {
            r.store(a, Ordering::Relaxed);
        }
        for (i, a) in thunks.into_iter().enumerate() {
            let size = sym.lookup(a).map_or(0, |i| i.size);
            let pfx = if a == 0 {
                0
            } else {
                *call_range(a, &mut sym).start()
            };
            for (arr, v) in [
                (&self.thunks, a),
                (&self.thunk_ends, a.wrapping_add(size)),
                (&self.thunk_pfx, pfx),
            ] {
                if let Some(x) = arr.get(i) {
                    x.store(v, Ordering::Relaxed);
                }
            }
        }
        self.sched.store(sched, Ordering::Relaxed);
        at
    }
}

/// The calls into `target` (an address range) of the function at `start` (`size`
/// bytes, at most 512; at most two calls; `None` if its code cannot be read or
/// decoded).
fn calls_to(
    start: u64,
    size: u64,
    target: core::ops::RangeInclusive<u64>,
) -> Option<[Option<u64>; 2]> {
    let mut code = [0u8; 512];
    let code = code.get_mut(..usize::try_from(size).ok()?)?;
    if !read_kernel(start, code) {
        return None;
    }
    let mut out = [None; 2];
    let mut n = 0;
    let mut call = |off: u32| {
        if let Some(o) = out.get_mut(n) {
            *o = Some(start + u64::from(off));
        }
        n += 1;
    };
    #[cfg(target_arch = "x86_64")]
    decode::scan(code, start, |off, insn| {
        if insn.len == 5 && matches!(insn.flow, Flow::Call(t) if target.contains(&t)) {
            call(off);
        }
    })
    .ok()?;
    #[cfg(target_arch = "aarch64")]
    for (i, w) in code.chunks_exact(4).enumerate() {
        let off = (i * 4) as u32;
        let w = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
        if matches!(a64::decode(w, start + u64::from(off)).flow,
                    a64::Flow::Call(t) if target.contains(&t))
        {
            call(off);
        }
    }
    (n <= out.len()).then_some(out)
}

impl Tracer {
    /// A `call __schedule` of the preemption path: if the traced task is inside a
    /// preemption thunk (its innermost frame), the scheduler runs for it there: open its
    /// frame, so its call sites count. Other tasks are ignored. (An interrupt's return
    /// preempts through `preempt_schedule_irq()`, which has no hook.)
    pub(crate) fn on_preempt(&self, p: &Probe<Hook>, regs: &mut sys::PtRegs) -> c_int {
        let Some(cur) = self.current(regs, p.is_ftrace_based()) else {
            return 0;
        };
        let Some(slot) = self.slot(cur.pid) else {
            return 0;
        };
        // SAFETY: we are `cur.pid`'s own handler.
        let Some(mut d) = (unsafe { self.data(slot) }) else {
            return 0;
        };
        let depth = d.stack.depth();
        let max = self.settings.max_depth.load(Ordering::Relaxed) as usize;
        if d.wait.guard || depth == 0 || depth >= MAX_FRAMES || (max != 0 && depth >= max) {
            return 0;
        }
        // `__schedule()`'s entry stack pointer: the call pushes the return address.
        let sp = regs.sp().wrapping_sub(8);
        if d.stack.suppresses(sp) {
            return 0;
        }
        let Some(top) = d.stack.top() else { return 0 };
        if !self.preempt.is_thunk(top.func) || sp >= top.entry_sp {
            return 0;
        }
        let func = self.preempt.sched.load(Ordering::Relaxed);
        let site = p.addr();
        d.wait.last_redirect = 0;
        let rec = self.recorder(&cur);
        match self.table.lookup(func) {
            FuncState::Armed => {
                if d.stack.open(&rec, func, site, 0, sp, false) {
                    // The probe sits on a 5-byte `call rel32` (`calls_to`): the handler
                    // makes the call, with the return hooked.
                    self.hooked_call(regs, site + 5, func);
                    return 1;
                }
            }
            // Not armed (yet, or any more): the scheduler runs with preemption off, so it
            // is armed ahead, like any callee first called in atomic context.
            FuncState::Unknown => {
                d.stack
                    .leaf(&rec, Reason::Atomic, 0, func, site, sp + 8, false);
                self.want(func);
            }
            _ => {}
        }
        0
    }

    /// A call in `__schedule()` seen for the traced task while its innermost frame is not
    /// the scheduler's (`ip`, `sp`, `bp`: the registers in `__schedule()` at that call):
    /// the scheduler was entered through `preempt_schedule()` where no hook saw it (see
    /// the module documentation). Opens the frames that are missing, from the callers the
    /// ORC unwinder finds above the scheduler: the first must be a `call __schedule` of
    /// the preemption path (its return address's stack word is the scheduler's entry),
    /// the second a preemption thunk, and the third the innermost frame's function, right
    /// after a call of that thunk: the thunk's frame, if not open yet (a static call of
    /// the thunk, which kprobes refuses to probe), is the word that holds that return
    /// address. Their returns are hooked there, the thunk's first (the outer one: the
    /// return stack keeps a task's words in stack order). Whether it opened the
    /// scheduler's frame; the caller then draws the call in it.
    pub(crate) fn open_preempted(
        &self,
        cur: &Cur,
        d: &mut TaskData,
        ip: u64,
        sp: u64,
        bp: u64,
    ) -> bool {
        let sched = self.preempt.sched();
        let Some(&top) = d.stack.top() else {
            return false;
        };
        if sched == 0 || top.func == sched || sp >= top.entry_sp {
            return false;
        }
        #[cfg(target_arch = "aarch64")]
        return self.open_preempted_a64(cur, d, ip, sp, bp, top.func, top.entry_sp);
        let thunk_open = self.preempt.is_thunk(top.func);
        let depth = d.stack.depth() + if thunk_open { 1 } else { 2 };
        let max = self.settings.max_depth.load(Ordering::Relaxed) as usize;
        if depth > MAX_FRAMES || (max != 0 && depth > max) {
            return false;
        }
        let mut callers = [(0u64, 0u64); 3];
        if sys::unwind_callers(ip, sp, bp, &mut callers) < 3 {
            return false;
        }
        let [(ret, sched_sp), (in_thunk, _), (back, thunk_sp)] = callers;
        let site = back.wrapping_sub(5);
        let chain = self
            .preempt
            .sched_rets
            .iter()
            .any(|r| r.load(Ordering::Relaxed) == ret)
            && self.preempt.thunk_of(in_thunk) != 0
            && sched_sp < thunk_sp
            && if thunk_open {
                thunk_sp == top.entry_sp
            } else {
                thunk_sp < top.entry_sp
                    && self.table.contains(top.func, site)
                    && call_target(site).is_some_and(|t| self.preempt.calls_thunk(t))
            };
        if !chain {
            return false;
        }
        if !self.sched_armed(sched) {
            return false;
        }
        // The call's registers are not the scheduler's entry's: no arguments.
        let rec = self.recorder(cur);
        if !thunk_open {
            let thunk = self.preempt.thunk_of(in_thunk);
            if !d.stack.open(&rec, thunk, site, 0, thunk_sp, true) {
                return false;
            }
            self.hook_stack_return(thunk_sp);
        }
        if !d
            .stack
            .open(&rec, sched, ret.wrapping_sub(5), 0, sched_sp, false)
        {
            return false;
        }
        self.hook_stack_return(sched_sp);
        true
    }
    /// Whether the scheduler (`sched`) is armed, so that its frame may open under a
    /// preemption; one not known yet is wanted for arming.
    fn sched_armed(&self, sched: u64) -> bool {
        match self.table.lookup(sched) {
            FuncState::Armed => true,
            FuncState::Unknown => {
                self.want(sched);
                false
            }
            _ => false,
        }
    }

    /// arm64's [`Tracer::open_preempted`]. The thunk is `preempt_schedule()` (or its
    /// `_notrace` twin) itself, called with `BL`: its frame is open already, its call
    /// site's probe opened it (a function kprobes refuses has no call sites of its own to
    /// probe). The frame records give the scheduler's return into it, which must be a
    /// call of `__schedule()` of the preemption path, and the thunk's record, where its
    /// prologue (`stp x29, x30, [sp, #-n]!; mov x29, sp`) left its stack pointer for the
    /// call. The scheduler's frame opens there without its return hooked: `__schedule()`
    /// saved its return address signed, and fctrace never writes a signed return address
    /// on a stack. It closes with the thunk's hooked return, or when the task is seen
    /// above it; a second run of the scheduler in the same preemption (the thunk loops
    /// while a reschedule is still due) adds to the first.
    #[cfg(target_arch = "aarch64")]
    #[allow(clippy::too_many_arguments)]
    fn open_preempted_a64(
        &self,
        cur: &Cur,
        d: &mut TaskData,
        ip: u64,
        sp: u64,
        fp: u64,
        top_func: u64,
        top_sp: u64,
    ) -> bool {
        let sched = self.preempt.sched();
        let depth = d.stack.depth() + 1;
        let max = self.settings.max_depth.load(Ordering::Relaxed) as usize;
        if !self.preempt.is_thunk(top_func) || depth > MAX_FRAMES || (max != 0 && depth > max) {
            return false;
        }
        let mut callers = [(0u64, 0u64); 3];
        if sys::unwind_callers(ip, sp, fp, &mut callers) < 2 {
            return false;
        }
        let [(ret, sched_rec), (_, thunk_rec), _] = callers;
        // (The frame's key, as for a call: the word below the stack pointer at the call.)
        let sched_sp = thunk_rec.wrapping_sub(8);
        let chain = self
            .preempt
            .sched_rets
            .iter()
            .any(|r| r.load(Ordering::Relaxed) == ret)
            && sp <= sched_rec
            && sched_rec < thunk_rec
            && sched_sp < top_sp;
        if !chain {
            return false;
        }
        if !self.sched_armed(sched) {
            return false;
        }
        let rec = self.recorder(cur);
        d.stack
            .open(&rec, sched, ret.wrapping_sub(CALL_LEN), 0, sched_sp, false)
    }
}
