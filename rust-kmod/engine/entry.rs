// SPDX-License-Identifier: GPL-2.0

//! Entry hooks: calls seen at the callee's entry, through fctrace's own `ftrace_ops`
//! (`crate::entry_ops`), instead of a breakpoint on the call site.
//!
//! When arming a function finds a direct call (or tail call) of a function with an ftrace
//! site, that callee gets an entry hook and the call site no probe: every caller of the
//! callee then pays a call into ftrace's trampoline and one check (is the current task
//! traced?), not a trap; the traced task pays what function_graph costs it. Call sites
//! are still probed where the callee has no ftrace site (notrace code, assembly), for
//! indirect calls and for callees ftrace refuses.
//!
//! At the entry, the stack pointer points to the return address. The call is the traced
//! task's if that return address follows a `call` of this function (or of its padding,
//! with call-depth tracking) inside the function of the task's innermost frame; a tail
//! call if the function is tail-called somewhere and the return address is the innermost
//! frame's own (hooked) one. A call a site probe made already (its frame is open at this
//! stack pointer) is not drawn twice, and a site that carries a probe has a breakpoint,
//! not the `call` opcode, so calls its probe saw are not taken for direct calls.
//!
//! Another tracer's return hook may have replaced the return address already
//! (function_graph: its callback can run before ours; a kretprobe). function_graph's
//! saved address is found on its shadow stack; when none is found the call site cannot be
//! checked, and a call from the innermost frame is assumed (unless a call just drawn as a
//! leaf suppresses the frame below it: then nothing is drawn).
//!
//! A callee not armed yet is armed before it runs: its entry hook sends the task to
//! `fctrace_entry_trampoline`, which waits like the call-site trampoline and then runs the
//! ftrace site again. Where the task cannot wait (atomic context) the call is a leaf and
//! the callee is armed ahead.

use super::handlers::Callee;
use super::returns::{entry_return_word, is_return_site, stack_key};
use super::site::Expect;
use super::table::HOOK_TAIL;
use super::tree::{Recorder, TaskData};
use super::{read_text, tracer, Tracer, MAX_FRAMES};
use crate::parse::OptionName;
use crate::record::{Reason, F_INDIRECT, F_TAIL};
use crate::retstack;
use crate::sys::{self, Regs};
use core::sync::atomic::Ordering;
use kernel::ffi::c_int;

/// Whether the 5 bytes at `site` are a call (`e8 rel32`) into `target`, an address range.
/// A breakpoint in place of the opcode counts (someone else's kprobe, or `text_poke_bp()`
/// rewriting a static call): fctrace's own call-site probes never sit on a call of a
/// hooked function, and a breakpoint at an indirect call leaves no rel32 into `target`.
#[cfg(target_arch = "x86_64")]
fn is_call_to(site: u64, target: core::ops::RangeInclusive<u64>) -> bool {
    let mut b = [0u8; 5];
    if !read_text(site, &mut b) || !matches!(b[0], 0xe8 | 0xcc) {
        return false;
    }
    let rel = i32::from_le_bytes([b[1], b[2], b[3], b[4]]);
    target.contains(&site.wrapping_add(5).wrapping_add(rel as i64 as u64))
}

/// Whether the word at `site` is a `BL` into `target`, an address range, directly or
/// through a module's PLT entry ([`super::plt_at`]). (A breakpoint there replaced the
/// whole word: it does not count.)
#[cfg(target_arch = "aarch64")]
fn is_call_to(site: u64, target: core::ops::RangeInclusive<u64>) -> bool {
    let mut b = [0u8; 4];
    if !read_text(site, &mut b) {
        return false;
    }
    match crate::a64::decode(u32::from_le_bytes(b), site).flow {
        crate::a64::Flow::Call(t) => {
            target.contains(&t) || super::plt_at(t).is_some_and(|d| target.contains(&d))
        }
        _ => false,
    }
}

/// The length of a direct call: where one ends, its return address, it starts this far
/// before (x86-64's `call rel32`, arm64's `BL`).
const CALL_LEN: u64 = if cfg!(target_arch = "x86_64") { 5 } else { 4 };

/// A hooked function's entry: how it was reached.
pub(super) struct Entered {
    /// The function and where calls of it may point (`pfx..=func`).
    pub(super) func: u64,
    pub(super) pfx: u64,
    /// Some armed function tail-calls it.
    pub(super) tail_ok: bool,
    /// What kind of hook it is.
    pub(super) via: Via,
}

/// The hook a function was entered through.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Via {
    /// fctrace's ftrace callback at this ftrace site, its only user there: a task can be
    /// sent to wait for the function to be armed.
    Ftrace(u64),
    /// The same, called through ftrace's list function (another ftrace user hooks the
    /// function too, and may change the registers ftrace returns with): no task is sent
    /// to wait.
    Shared(u64),
    /// An entry probe at `addr` (`entry_probe.rs`). `trapped`: a breakpoint, which can
    /// send the task to the arming trampoline (to come back to `addr`); else the detour
    /// of an optimized probe (or ftrace), which cannot, and a callee not armed yet is a
    /// leaf for this `reason`.
    Kprobe {
        addr: u64,
        trapped: bool,
        reason: Reason,
    },
}

/// The C callback asks first: is the current task (thread group `tgid`) traced?
#[no_mangle]
pub(crate) extern "C" fn fctrace_entry_wanted(tgid: u32) -> bool {
    tracer().is_some_and(|tr| tr.active.load(Ordering::Relaxed) && tr.current_traced(tgid))
}

/// The C callback (c/entry_ops.c) of the ftrace site `ip`, with ftrace's registers (`flags`
/// filled in), under ftrace's recursion protection.
#[no_mangle]
pub(crate) extern "C" fn fctrace_entry_hook(
    ip: u64,
    regs: *mut sys::PtRegs,
    levels: u32,
    shared: bool,
) {
    let Some(tr) = tracer() else { return };
    // SAFETY: ftrace passes its saved registers of this entry, ours until we return.
    let Some(regs) = (unsafe { regs.as_mut() }) else {
        return;
    };
    let Some((func, hook, pfx)) = tr.hooks.hooked_at(ip) else {
        return;
    };
    let e = Entered {
        func,
        pfx,
        tail_ok: hook & HOOK_TAIL != 0,
        via: if shared {
            Via::Shared(ip)
        } else {
            Via::Ftrace(ip)
        },
    };
    tr.on_entry(&e, regs, levels);
}

impl Tracer {
    /// The return address of a frame entered at `entry_sp`, whose word there is `word`:
    /// `ours` when fctrace hooked that frame's return (the frame is live: this is a tail
    /// call from it, or the call its call-site probe drew), else the real return address
    /// behind any other tracer's return hooks.
    /// `other_key`: how those other hooks know the frame ([`other_hooks_key`]).
    fn entry_return(&self, entry_sp: u64, word: u64, other_key: u64) -> (Option<u64>, u64) {
        // Our own hooked word (function_graph may have replaced our address in turn): the
        // frame entered at this stack pointer, whose return fctrace hooked, is live. A
        // call-site probe made this call (that frame is this function's), or that frame's
        // function jumped here (a tail call). Never a new call: a call writes a fresh
        // return address.
        let ours = (is_return_site(word) || self.ret_hooks.contains(word))
            .then(|| self.returns.saved(stack_key(entry_sp), entry_sp))
            .flatten();
        // Another return hook's address: its callback or kprobe ran before this handler
        // (function_graph, a kretprobe, an fprobe's exit) and keeps the return address it
        // replaced, which may be a third hook's in turn (at most one of each kind here).
        let mut ret = word;
        if ours.is_none() {
            for _ in 0..3 {
                if !self.ret_hooks.contains(ret) {
                    break;
                }
                let saved = if ret == self.ret_hooks.rethook() {
                    sys::rethook_saved_ret(other_key, ret)
                } else {
                    graph_saved_ret(other_key, self.ret_hooks.graph_handler())
                };
                match saved {
                    Some(s) => ret = s,
                    None => break,
                }
            }
        }
        (ours, ret)
    }

    /// Where the call of `e.func` entered at `entry_sp` was made from, for the traced
    /// task's tree `d`: a call from the innermost frame's function (at its call site, or
    /// at the site a pre-site computed, `expect`) or a tail call from it. `(site, tail,
    /// the caller's stack pointer, indirect)`; `None` when it is none of fctrace's calls.
    /// `bp`: the caller's frame pointer register (for the unwinder, see `preempt.rs`).
    #[allow(clippy::too_many_arguments)]
    fn entry_site(
        &self,
        e: &Entered,
        d: &mut TaskData,
        rec: &Recorder<'_>,
        entry_sp: u64,
        ours: Option<u64>,
        ret: u64,
        expect: Option<Expect>,
        bp: u64,
    ) -> Option<(u64, bool, u64, bool)> {
        let call_site = ret.wrapping_sub(CALL_LEN);
        let hooked = ours.is_none() && self.ret_hooks.contains(ret);
        let expected = expect.filter(|x| ours.is_none() && !x.tail && x.ret == ret);
        let is_call = ours.is_none()
            && (hooked || expected.is_some() || is_call_to(call_site, e.pfx..=e.func));
        if is_call {
            // A call: the caller ran at the stack pointer above the return address.
            let sp = entry_sp + 8;
            // Unchecked, a call whose probe drew it as a leaf (suppressing what runs
            // below that call) would be drawn again here: such a call is left out.
            if hooked && d.stack.suppresses(entry_sp) {
                return None;
            }
            if d.stack.suppressed(sp) {
                return None;
            }
            d.stack.close_stale(rec, sp);
            let top = d.stack.top()?;
            if hooked {
                // (A call whose probe opened this frame already.)
                if top.func == e.func && top.entry_sp == entry_sp {
                    return None;
                }
                Some((top.func, false, sp, false))
            } else if let Some(x) = expected {
                if !self.table.contains(top.func, x.site) {
                    return None;
                }
                d.expect = None;
                Some((x.site, false, sp, true))
            } else if self.table.contains(top.func, call_site) {
                Some((call_site, false, sp, false))
            } else if self.table.contains(self.preempt.sched(), call_site)
                && self.open_preempted(rec.cur, d, call_site, sp, bp)
            {
                // The scheduler, entered through `preempt_schedule()` where no hook saw
                // it: its frame is opened now (`preempt.rs`).
                Some((call_site, false, sp, false))
            } else {
                None
            }
        } else if ours.is_some() || e.tail_ok {
            // A tail call: the innermost frame's function jumped here, leaving its own
            // return address on top. Which of its sites it jumped from is not known.
            if d.stack.suppressed(entry_sp) {
                return None;
            }
            d.stack.close_stale(rec, entry_sp);
            let top = d.stack.top()?;
            // (A call whose probe opened this frame already has the same stack pointer.)
            if top.entry_sp != entry_sp || top.func == e.func {
                return None;
            }
            // An indirect jump its pre-site computed: from that site.
            match expect.filter(|x| x.tail && self.table.contains(top.func, x.site)) {
                Some(x) => {
                    d.expect = None;
                    Some((x.site, true, entry_sp, true))
                }
                None => Some((top.func, true, entry_sp, false)),
            }
        } else {
            None
        }
    }

    /// The entry of a hooked function: if a traced task came here from a call fctrace
    /// follows, the call is drawn (see the module documentation).
    pub(super) fn on_entry(&self, e: &Entered, regs: &mut sys::PtRegs, via_ftrace: u32) -> c_int {
        let irqs = self.settings.option(OptionName::Irqs);
        let Some(cur) = self.current_in(regs, via_ftrace, irqs) else {
            return 0;
        };
        // SAFETY: a probe handler (ftrace's callback, or an entry probe), in `cur`'s
        // context, with preemption off.
        let Some((_, mut d)) = (unsafe { self.tree(&cur) }) else {
            return 0;
        };
        if d.wait.guard || d.stack.depth() == 0 {
            return 0;
        }
        // An indirect call a pre-site computed (`step.rs`): this entry may be that call. It
        // is taken only when it is (its target, and its return address or tail frame): the
        // task may enter other hooked functions before it makes the call, when it is
        // preempted between the pre-site and the call (the scheduler's functions, entered
        // with the task current and its frames unchanged). Left over, it is harmless: only
        // a call returning to that site can take it, and the pre-site replaces it.
        let expect = d.expect.filter(|x| x.target == e.func);
        let func = e.func;
        // At the entry, the stack pointer points to the return address (arm64: the link
        // register holds it, keyed by the word below the stack pointer).
        let Some((entry_sp, word)) = entry_return_word(regs) else {
            return 0;
        };
        let rec = self.recorder_at(&cur, regs);
        let (ours, ret) = self.entry_return(entry_sp, word, other_hooks_key(entry_sp, regs));
        let Some((site, tail, site_sp, indirect)) =
            self.entry_site(e, &mut d, &rec, entry_sp, ours, ret, expect, regs.fp())
        else {
            return 0;
        };
        let flags = if tail { F_TAIL } else { 0 } | if indirect { F_INDIRECT } else { 0 };
        let max = self.settings.max_depth.load(Ordering::Relaxed) as usize;
        let depth = d.stack.depth();
        if (max != 0 && depth >= max) || depth >= MAX_FRAMES {
            d.wait.last_redirect = 0;
            d.stack
                .leaf(&rec, Reason::Depth, flags, func, site, site_sp, tail);
            return 0;
        }
        // The key of a wait: the ftrace site or probed instruction (the task comes back
        // to it).
        let key = match e.via {
            Via::Ftrace(ip) | Via::Shared(ip) | Via::Kprobe { addr: ip, .. } => ip,
        };
        let by_entry = matches!(e.via, Via::Ftrace(_));
        let mut callee = self.classify_call(&cur, &d, func, key, tail, by_entry);
        // Armed near the edge of a closure, with few levels below it armed: where the task
        // may sleep, it waits once for a closure below it (what it calls may run in atomic
        // context, after it takes a lock, where it cannot wait: `copy_page_range()` calls
        // `copy_present_ptes()` with the page table lock held, which calls
        // `vm_normal_page()`).
        // Where it cannot wait (atomic context), the function is queued for arming ahead
        // (in a queue of its own: calls not followed keep theirs), which arms the
        // levels below it for the next run: its callees armed at a closure's edge, the
        // first run reached them where later runs called what it had not
        // (`pcpu_block_refresh_hint()` under the per-CPU allocator's lock in a second
        // `fork()`).
        if matches!(callee, Callee::Follow)
            && matches!(e.via, Via::Ftrace(_) | Via::Kprobe { trapped: true, .. })
            && self.table.below(func) < super::wait::MIN_BELOW
        {
            if self.may_wait(&cur, &d, by_entry) {
                if d.wait.last_redirect != key {
                    callee = Callee::Wait;
                }
            } else if !cur.sleepable || !self.can_redirect(by_entry) {
                self.want_later(func);
            }
        }
        if !matches!(callee, Callee::Wait) {
            d.wait.last_redirect = 0;
        }
        match callee {
            Callee::Follow | Callee::Thunk => {
                if d.stack.open(&rec, func, site, flags, entry_sp, false) && !tail {
                    self.hook_return(entry_sp, regs);
                }
            }
            Callee::Hide => d.stack.suppress(site_sp, tail),
            Callee::Leaf(r) | Callee::Unarmed(r) => {
                d.stack.leaf(&rec, r, flags, func, site, site_sp, tail)
            }
            Callee::Wait => match e.via {
                Via::Ftrace(ip) => {
                    // The task comes back to this entry: the call is still the expected one.
                    if indirect {
                        d.expect = expect;
                    }
                    self.redirect_entry(&mut d, regs, ip, func);
                }
                // A breakpoint: the trampoline returns to the probed instruction, the
                // pre-handler says it changed the instruction pointer.
                Via::Kprobe {
                    addr,
                    trapped: true,
                    ..
                } => {
                    if indirect {
                        d.expect = expect;
                    }
                    if let Some(r) = self.wait_for(&mut d, addr, func, true) {
                        r.apply(regs);
                        return 1;
                    }
                    d.stack
                        .leaf(&rec, Reason::ArmFailed, flags, func, site, site_sp, tail);
                }
                // The callee runs (or will, whatever fctrace asks) before it can be armed.
                Via::Shared(_) | Via::Kprobe { trapped: false, .. } => {
                    d.wait.last_redirect = 0;
                    self.want(func);
                    let r = match e.via {
                        Via::Kprobe { reason, .. } => reason,
                        _ => Reason::SharedSite,
                    };
                    d.stack.leaf(&rec, r, flags, func, site, site_sp, tail);
                }
            },
        }
        0
    }
}

/// How function_graph and rethooks (kretprobes, fprobes' exits) know the frame entered with
/// `regs`, whose return fctrace keys by `entry_sp`: on x86-64 by where its return address
/// sits, `entry_sp` itself; on arm64 by the frame pointer at the entry (arm64's
/// `ftrace_graph_func()` saves it as the entry's `retp`, and its rethooks keep `x29` as
/// their frame). Looked up by `entry_sp` there, no saved address was ever found: the call
/// could not be checked, and after a call drawn as a leaf its siblings were taken for
/// that call again, and left out.
fn other_hooks_key(entry_sp: u64, regs: &sys::PtRegs) -> u64 {
    if cfg!(target_arch = "aarch64") {
        regs.fp()
    } else {
        entry_sp
    }
}

/// The return address function_graph saved for the current task's frame whose return
/// address sits at `retp` (where it put its `handler`), from the task's function_graph
/// shadow stack (see [`retstack::graph_saved_ret`]).
fn graph_saved_ret(retp: u64, handler: u64) -> Option<u64> {
    sys::with_graph_ret_stack(|words, off| retstack::graph_saved_ret(words, off, retp, handler))?
}
