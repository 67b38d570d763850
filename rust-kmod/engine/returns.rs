// SPDX-License-Identifier: GPL-2.0

//! Hooked returns: how fctrace sees a followed function return without a breakpoint on
//! its `ret`.
//!
//! When a traced task's call is followed, the return address on the stack is replaced with
//! `fctrace_return_site` (trampoline.S) and the real one kept in a [`RetStack`] of that
//! stack (`crates/fctrace-core/src/retstack.rs`): for a call site, the handler emulates the
//! call itself, pushing the trampoline's address; at an entry (the start function, a
//! system call, an interrupt entry, a static call's callee) it replaces the word on top of
//! the stack. The `ret` lands in the trampoline, which calls [`fctrace_return_handler`]:
//! it pops the real address, closes the frames returning now, and the trampoline goes on
//! there. A tail call leaves the word alone (it holds the trampoline's address already),
//! so a chain of tail calls returns through it once.
//!
//! One return stack per kernel stack that has replaced words: a task's own (keyed by its
//! `task_struct`), or a CPU's hard-interrupt stack (keyed by its top; softirqs run there
//! too, and interrupts nest on it in order). A stack's return stack is only changed by
//! code running on that stack, with interrupts off, except when tracing stops: then every
//! word still replaced is put back with a compare-and-exchange ([`Tracer::restore_returns`]),
//! the task may be running, and each return stack has a small lock for that.
//!
//! Lifetimes: a task that exits leaves its words behind; the `sched_process_exit`
//! tracepoint, hooked for as long as the module is loaded, drops its return stack before
//! its stack is freed (after `PF_EXITING` no word is replaced any more). A task that
//! returned through the trampoline just before tracing stopped may still be on its way
//! through it: the restored entries stay until an RCU-tasks grace period has passed (at the
//! next activation, and on unload).

use super::tree::Cur;
use super::{tracer, Tracer, MAX_TASKS};
use crate::kprobe;
use crate::parse::OptionName;
use crate::retstack::RetStack;
use crate::sys;
use crate::sys::Regs;
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use kernel::alloc::KVVec;
use kernel::prelude::*;

/// The return stack of one kernel stack.
///
/// # Invariants
///
/// `rets` is only accessed with `lock` held and interrupts off on this CPU ([`RetSlot::with`]).
/// `key` changes only under the lock.
struct RetSlot {
    /// The stack's key (`fctrace_stack_key()`), 0 = free.
    key: AtomicU64,
    lock: AtomicBool,
    rets: UnsafeCell<RetStack>,
}

// SAFETY: `rets` is only accessed under `lock` (see the invariant).
unsafe impl Sync for RetSlot {}

impl RetSlot {
    /// Runs `f` on the return stack with the lock held and interrupts off. The lock is held
    /// for a few loads and stores by anyone, so the spin is short.
    fn with<R>(&self, f: impl FnOnce(&mut RetStack) -> R) -> R {
        let irqs_off = sys::IrqsOff::new();
        while self
            .lock
            .compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            core::hint::spin_loop();
        }
        // SAFETY: the lock is held and interrupts are off: nobody else accesses `rets`.
        let r = f(unsafe { &mut *self.rets.get() });
        self.lock.store(false, Ordering::Release);
        drop(irqs_off);
        r
    }
}

/// What [`Returns::push_new`] did.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Pushed {
    Yes,
    Already,
    Full,
}

/// Every return stack.
pub(crate) struct Returns {
    slots: KVVec<RetSlot>,
    /// Some entries were restored and wait for a grace period to be dropped.
    restored: AtomicBool,
}

impl Returns {
    pub(crate) fn new() -> Result<Self> {
        let n = MAX_TASKS + sys::nr_cpu_ids() as usize;
        let mut slots = KVVec::with_capacity(n, GFP_KERNEL)?;
        for _ in 0..n {
            slots.push(
                RetSlot {
                    key: AtomicU64::new(0),
                    lock: AtomicBool::new(false),
                    rets: UnsafeCell::new(RetStack::EMPTY),
                },
                GFP_KERNEL,
            )?;
        }
        Ok(Returns {
            slots,
            restored: AtomicBool::new(false),
        })
    }

    /// Runs `f` on the return stack of stack `key`, if it has one (see [`RetSlot::with`]).
    fn with_key<R>(&self, key: u64, f: impl FnOnce(&RetSlot, &mut RetStack) -> R) -> Option<R> {
        // 0 is no stack (and the key of every free slot).
        if key == 0 {
            return None;
        }
        let mut f = Some(f);
        // From the key's home slot on, where it is usually found at once (see `push`).
        let home = self.home(key);
        let (low, high) = self.slots.split_at(home);
        for s in Iterator::chain(high.iter(), low) {
            if s.key.load(Ordering::Acquire) != key {
                continue;
            }
            // The key is checked again under the lock: activation may free the slot (and
            // another stack claim it) in between.
            let r = s.with(|r| {
                if s.key.load(Ordering::Relaxed) != key {
                    return None;
                }
                f.take().map(|f| f(s, r))
            });
            if r.is_some() {
                return r;
            }
        }
        None
    }

    /// Records that the word at `retp` of the stack `key` (holding `orig`) is replaced,
    /// for a call fctrace makes itself ([`Tracer::hooked_call`]): that call writes the
    /// word, below every live frame, so an entry found there (or below) is of a frame
    /// that is gone without its return being seen. It is replaced, never reused: its
    /// address would send the new call's return to the old one's caller. Called on that
    /// stack; `None` when there is no room (the word is then left alone), else whether
    /// such a stale entry was dropped.
    fn push_call(&self, key: u64, retp: u64, orig: u64) -> Option<bool> {
        let found = self.with_key(key, |_, r| {
            let stale = r.find(retp).is_some();
            r.push(retp, orig).then_some(stale)
        });
        match found {
            Some(r) => r,
            None => (self.push_new(key, retp, orig) != Pushed::Full).then_some(false),
        }
    }

    /// The slot where the search for `key` starts: a hash of it.
    fn home(&self, key: u64) -> usize {
        // Keys are `task_struct` addresses (or stack tops): drop the always-zero bits.
        ((key >> 6).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as usize % self.slots.len().max(1)
    }

    /// As [`Returns::push`], in one look-up, unless the word at `retp` is replaced already
    /// (`Pushed::Already`, nothing changed).
    fn push_new(&self, key: u64, retp: u64, orig: u64) -> Pushed {
        let found = self.with_key(key, |_, r| {
            if r.find(retp).is_some() {
                Pushed::Already
            } else if r.push(retp, orig) {
                Pushed::Yes
            } else {
                Pushed::Full
            }
        });
        if let Some(p) = found {
            return p;
        }
        // Only this stack's own code claims a slot for it, so it cannot be claimed twice.
        let home = self.home(key);
        let (low, high) = self.slots.split_at(home);
        for s in Iterator::chain(high.iter(), low) {
            if s.key.load(Ordering::Relaxed) != 0 {
                continue;
            }
            let claimed = s.with(|r| {
                if s.key.load(Ordering::Relaxed) != 0 {
                    return false;
                }
                r.clear();
                s.key.store(key, Ordering::Release);
                r.push(retp, orig)
            });
            if claimed {
                return Pushed::Yes;
            }
        }
        Pushed::Full
    }

    /// A `ret` through the word at `retp` of stack `key`: its real return address.
    fn pop(&self, key: u64, retp: u64) -> Option<u64> {
        self.with_key(key, |s, r| {
            let orig = r.pop(retp);
            if r.is_empty() {
                s.key.store(0, Ordering::Release);
            }
            orig
        })?
    }

    /// A `ret` through the trampoline at `retp` of stack `key` that no entry is for: the
    /// newest entry, popped, if it can be the one (see [`RetStack::pop_unexpected`]).
    fn pop_unexpected(&self, key: u64, retp: u64) -> Option<crate::retstack::Hooked> {
        self.with_key(key, |s, r| {
            let h = r.pop_unexpected(retp);
            if r.is_empty() {
                s.key.store(0, Ordering::Release);
            }
            h
        })?
    }

    /// The real return address of the word at `retp` of stack `key`, if it is replaced.
    pub(crate) fn saved(&self, key: u64, retp: u64) -> Option<u64> {
        self.with_key(key, |_, r| r.find(retp))?
    }

    /// A task exits: none of its replaced words will be returned through.
    fn forget(&self, key: u64) {
        self.with_key(key, |s, r| {
            r.clear();
            s.key.store(0, Ordering::Release);
        });
    }

    /// Prints the return stack of `key` (a return without an entry: the task dies).
    fn dump(&self, key: u64, retp: u64) {
        pr_emerg!("return at {:#x}, stack key {:#x}\n", retp, key);
        let found = self.with_key(key, |_, r| {
            for h in r.entries() {
                pr_emerg!(
                    "  retp {:#x} orig {:#x} restored {}\n",
                    h.retp,
                    h.orig,
                    h.restored
                );
            }
        });
        if found.is_none() {
            pr_emerg!("  no return stack for this key\n");
        }
    }

    /// Whether a replaced word may still be returned through.
    pub(crate) fn any_live(&self) -> bool {
        self.slots
            .iter()
            .filter(|s| s.key.load(Ordering::Acquire) != 0)
            .any(|s| s.with(|r| r.has_live()))
    }
}

use super::site::entry_retp;
use crate::sys::return_site_addr as return_site;
pub(crate) use crate::sys::stack_key;

/// Whether `word` is fctrace's return address (`fctrace_return_site`).
pub(crate) fn is_return_site(word: u64) -> bool {
    word == return_site()
}

/// At a function's entry (its ftrace site, or a probe on its first instruction), with
/// registers `regs`: the word that keys its return in the return stacks (`retp`), and the
/// return address. x86-64: the word on top of the stack, which holds the return address
/// (`None` where it cannot be read). arm64: the return address is in the link register;
/// the key is the word below the stack pointer, where x86-64's would be, so that the
/// return (`fctrace_return_handler(sp)`) finds it the same way.
pub(crate) fn entry_return_word(regs: &sys::PtRegs) -> Option<(u64, u64)> {
    let retp = entry_retp(regs.sp());
    #[cfg(target_arch = "x86_64")]
    return super::stack_word(retp).0.map(|w| (retp, w));
    #[cfg(target_arch = "aarch64")]
    return Some((retp, regs.gpr(LR)));
}

/// arm64's link register, `x30`.
#[cfg(target_arch = "aarch64")]
const LR: u8 = 30;

impl Tracer {
    /// Whether returns may be hooked now, by the current context: tracing is on and the
    /// task is not exiting (after `sched_process_exit` nothing would drop its words).
    fn may_hook(&self) -> bool {
        self.active.load(Ordering::Acquire) && !sys::current_exiting()
    }

    /// A frame opened at a function's entry, whose return is keyed by `retp` (see
    /// [`entry_return_word`]), with registers `regs`: replaces the return address with the
    /// trampoline's, unless it is hooked already (a tail call of a frame whose return is
    /// hooked). In a probe handler of the context that owns the stack. Returns whether the
    /// return is hooked (now or before).
    pub(crate) fn hook_return(&self, retp: u64, regs: &mut sys::PtRegs) -> bool {
        #[cfg(target_arch = "x86_64")]
        return {
            let _ = regs;
            self.hook_stack_word(retp)
        };
        #[cfg(target_arch = "aarch64")]
        return self.hook_link_register(retp, regs);
    }

    /// Hooks the return of the function entered with `regs`, whose tree just opened.
    pub(crate) fn hook_entry_return(&self, regs: &mut sys::PtRegs) {
        if let Some((retp, _)) = entry_return_word(regs) {
            self.hook_return(retp, regs);
        }
    }

    /// A frame found on the stack (not at its entry: the preemption hooks' unwinding),
    /// whose return address is the word at `retp`: [`Self::hook_return`] of that word.
    /// x86-64 only: arm64 has no preemption hooks, and its return addresses are saved
    /// signed.
    pub(crate) fn hook_stack_return(&self, retp: u64) -> bool {
        #[cfg(target_arch = "x86_64")]
        return self.hook_stack_word(retp);
        #[cfg(target_arch = "aarch64")]
        return {
            let _ = retp;
            false
        };
    }

    /// [`Self::hook_return`] on arm64: at the entry the return address is in the link
    /// register, which the function's prologue then saves (signed with the stack pointer
    /// where the kernel uses pointer authentication, or on the shadow call stack); the
    /// handler's caller writes `regs`' link register back (`c/entry_ops.c`). Such a saved
    /// address cannot be put back when tracing stops (`restore_returns`).
    #[cfg(target_arch = "aarch64")]
    fn hook_link_register(&self, retp: u64, regs: &mut sys::PtRegs) -> bool {
        match self.push_hooked(stack_key(retp), retp, regs.gpr(LR)) {
            Some(true) => {
                sys::set_lr(regs, return_site());
                true
            }
            Some(false) => true,
            None => false,
        }
    }

    /// The bookkeeping of a return being hooked: `orig`, the return address that `retp`
    /// keys on the stack `key`, goes into that stack's return stack. `Some(true)`: the
    /// caller replaces it with the trampoline's address now (counted); `Some(false)`: it
    /// is hooked already (a tail call of a frame whose return is hooked; or another
    /// tracer's return hook, function_graph's, entered before us at this tail-called
    /// function, replaced our address in turn: hooking it again would send that hook's
    /// saved copy of our address to us twice); `None`: not hooked.
    fn push_hooked(&self, key: u64, retp: u64, orig: u64) -> Option<bool> {
        if orig == return_site() {
            return Some(false);
        }
        if key == 0 || !self.may_hook() {
            return None;
        }
        match self.returns.push_new(key, retp, orig) {
            Pushed::Yes => {
                self.stats.returns_hooked.fetch_add(1, Ordering::Relaxed);
                Some(true)
            }
            Pushed::Already => Some(false),
            Pushed::Full => {
                self.stats.returns_unhooked.fetch_add(1, Ordering::Relaxed);
                None
            }
        }
    }

    /// [`Self::hook_return`] on x86-64: the return address is the word at `retp`.
    #[cfg(target_arch = "x86_64")]
    fn hook_stack_word(&self, retp: u64) -> bool {
        let (Some(orig), key) = super::stack_word(retp) else {
            return false;
        };
        match self.push_hooked(key, retp, orig) {
            Some(true) => {
                // SAFETY: `retp` is a word of the current context's own stack (its key
                // says so), the return address of the function being entered, which
                // nothing else writes.
                unsafe { core::ptr::write_volatile(retp as *mut u64, return_site()) };
                true
            }
            Some(false) => true,
            None => false,
        }
    }

    /// A breakpoint's handler makes the call of `target` itself, with return address
    /// `ret` replaced by the trampoline's (when there is room): the pre-handler then
    /// returns 1. (arm64: the `BL` leaves the stack pointer as it is, and the return is
    /// keyed by the word below it, as at an entry.)
    pub(crate) fn hooked_call(&self, regs: &mut sys::PtRegs, ret: u64, target: u64) {
        let retp = regs.sp().wrapping_sub(8);
        let key = stack_key(retp);
        let hooked = key != 0 && self.may_hook() && {
            let pushed = self.returns.push_call(key, retp, ret);
            if pushed == Some(true) {
                self.stats.returns_stale.fetch_add(1, Ordering::Relaxed);
            }
            let counter = if pushed.is_some() {
                &self.stats.returns_hooked
            } else {
                &self.stats.returns_unhooked
            };
            counter.fetch_add(1, Ordering::Relaxed);
            pushed.is_some()
        };
        kprobe::emulate_call(regs, if hooked { return_site() } else { ret }, target);
    }

    /// Tracing stopped (no handler runs any more, so no word is replaced from here on):
    /// puts back every replaced word still on a stack. A word that another tracer's return
    /// hook took over cannot be: it stays live (counted) and returns through the
    /// trampoline later.
    pub(crate) fn restore_returns(&self) {
        #[cfg(target_arch = "x86_64")]
        self.restore_stack_words();
        #[cfg(target_arch = "aarch64")]
        self.keep_link_registers();
    }

    /// [`Self::restore_returns`] on arm64: a hooked return address went into a register
    /// that the function then saved where fctrace cannot put it back (signed with the
    /// stack pointer, or on the shadow call stack): every return still to come through
    /// the trampoline stays live (counted), and the module holds itself until they came
    /// (`returns_pending`).
    #[cfg(target_arch = "aarch64")]
    fn keep_link_registers(&self) {
        let mut missed = 0usize;
        for s in self.returns.slots.iter() {
            if s.key.load(Ordering::Acquire) == 0 {
                continue;
            }
            s.with(|r| {
                if s.key.load(Ordering::Relaxed) != 0 {
                    missed += r.restore(|_, _| false);
                }
            });
        }
        self.stats
            .returns_not_restored
            .fetch_add(missed as u64, Ordering::Relaxed);
    }

    /// [`Self::restore_returns`] on x86-64.
    #[cfg(target_arch = "x86_64")]
    fn restore_stack_words(&self) {
        let frs = return_site();
        let mut missed = 0;
        let mut restored = false;
        for s in self.returns.slots.iter() {
            if s.key.load(Ordering::Acquire) == 0 {
                continue;
            }
            s.with(|r| {
                // Freed (and maybe claimed by another stack) since the check above.
                if s.key.load(Ordering::Relaxed) == 0 {
                    return;
                }
                missed += r.restore(|retp, orig| {
                    // SAFETY: `retp` is a word of a live stack: its task has not reached
                    // `sched_process_exit` (which drops the return stack under this lock),
                    // so its stack is not freed; `retp` is aligned (a return address's
                    // slot).
                    let put = unsafe { sys::cmpxchg_word(retp, frs, orig) };
                    // A word that holds neither our address nor another return hook's is
                    // no longer a return address (its frame is gone): nothing comes back
                    // through it.
                    put || !super::read_word(retp).is_some_and(|w| self.ret_hooks.contains(w))
                });
                restored |= r.has_restored();
            });
        }
        if restored {
            self.returns.restored.store(true, Ordering::Release);
        }
        self.stats
            .returns_not_restored
            .fetch_add(missed as u64, Ordering::Relaxed);
    }

    /// Drops restored entries once no task can still be on its way through the trampoline
    /// with one (after an RCU-tasks grace period). Process context; sleeps.
    pub(crate) fn drop_restored_returns(&self) {
        if !self.returns.restored.swap(false, Ordering::AcqRel) {
            return;
        }
        sys::synchronize_rcu_tasks();
        for s in self.returns.slots.iter() {
            if s.key.load(Ordering::Acquire) == 0 {
                continue;
            }
            s.with(|r| {
                if s.key.load(Ordering::Relaxed) == 0 {
                    return;
                }
                r.drop_restored();
                if r.is_empty() {
                    s.key.store(0, Ordering::Release);
                }
            });
        }
    }

    /// Module unload, after [`Tracer::restore_returns`] and an RCU-tasks grace period: waits
    /// until no word that could not be put back is still to be returned through (another
    /// tracer's return hook holds it; the task returns or exits), then for an RCU-tasks
    /// grace period. Sleeps in `TASK_IDLE`.
    pub(crate) fn wait_returns(&self) {
        let mut waited = 0u32;
        let mut any = false;
        while self.returns.any_live() {
            any = true;
            if waited % 100 == 0 {
                pr_warn!("waiting for traced tasks to return through fctrace_return\n");
            }
            // Not counted as a hung task, not cut short by signals.
            sys::sleep_idle(100);
            waited = waited.wrapping_add(1);
        }
        if any {
            // The last of them may still be on the trampoline's last instructions.
            sys::synchronize_rcu_tasks();
        }
    }

    /// A `ret` came through the trampoline where no word was replaced, and `h`, the newest
    /// entry of the stack, below it, is taken for it (the function returned with its stack
    /// pointer moved past its return address: a callee-pop `ret $n`). The task goes on to
    /// `h`'s address, its frame closes, and since the trace can no longer be sure of that
    /// stack, tracing stops (the work item). Interrupts off.
    fn return_unexpected(&self, h: crate::retstack::Hooked, rax: u64) {
        // (No printk here: interrupts are off, maybe under the scheduler's locks; the work
        // item writes the `error_log` line.)
        self.stats
            .returns_unexpected
            .fetch_add(1, Ordering::Relaxed);
        if self
            .unexpected_return
            .compare_exchange(0, h.orig, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            self.kick_work();
        }
        if let Some(_recursion) = sys::RecursionGuard::new() {
            self.on_return(h.retp, rax);
        }
    }

    /// The return of a frame whose word at `retp` was replaced, with value `rax`: closes
    /// the frames returning now in the tree of the context returning.
    fn on_return(&self, retp: u64, rax: u64) {
        if !self.active.load(Ordering::Acquire) {
            return;
        }
        let (pid, tgid) = super::tree::current_ids();
        if !self.current_traced(tgid) {
            return;
        }
        let irqs = self.settings.option(OptionName::Irqs);
        let Some(ctx) = sys::return_context(irqs) else {
            return;
        };
        let cur = Cur {
            pid,
            tgid,
            sleepable: false,
            ctx,
        };
        // SAFETY: the trampoline calls us with interrupts off, in `cur`'s context. (Nothing
        // this handler calls carries a probe of fctrace's: the ring buffer, the clock and
        // the C layer are on the deny list or not traceable.)
        let Some((slot, mut d)) = (unsafe { self.tree(&cur) }) else {
            return;
        };
        // The return leaves the stack pointer 8 above the word: past any call that was
        // not followed.
        let _ = d.stack.suppressed(retp + 8);
        d.wait.last_redirect = 0;
        d.wait.last_throttle = 0;
        let retval_on = self.settings.option(OptionName::Retval);
        let rec = self.recorder(&cur);
        d.stack.close_returning(&rec, retp, 0, rax, retval_on);
        self.release_if_done(slot, d);
    }
}

/// Called by `fctrace_return` (trampoline.S) with interrupts off: `sp` is the stack
/// pointer the `ret` left, `rax` the value returned. Returns where the `ret` was to go;
/// 0 when that is known nowhere (the trampoline then makes the task die, see
/// [`sys::return_lost`]). Never panics by itself.
#[no_mangle]
pub(crate) extern "C" fn fctrace_return_handler(sp: u64, rax: u64) -> u64 {
    let retp = sp.wrapping_sub(8);
    let key = stack_key(retp);
    let Some(tr) = tracer() else {
        sys::return_lost(retp);
        return 0;
    };
    if let Some(orig) = tr.returns.pop(key, retp) {
        if let Some(_recursion) = sys::RecursionGuard::new() {
            tr.on_return(retp, rax);
        }
        return orig;
    }
    if let Some(h) = tr.returns.pop_unexpected(key, retp) {
        tr.return_unexpected(h, rax);
        return h.orig;
    }
    tr.returns.dump(key, retp);
    sys::return_lost(retp);
    0
}

/// Called from the `sched_process_exit` tracepoint for the exiting `task` (current), of
/// thread group `tgid`; `group_dead`: no thread of it is left alive.
#[no_mangle]
pub(crate) extern "C" fn fctrace_task_exit(task: u64, tgid: u32, group_dead: bool) {
    // A step of ours the task never finished (it cannot step any more).
    super::step::stepping_end_all(super::tree::current_ids().0);
    if let Some(tr) = tracer() {
        tr.returns.forget(task);
        tr.task_exited(tgid, group_dead);
    }
}

/// Called from the `sched_process_exec` tracepoint in the task that completed an exec
/// (see [`Tracer::task_exec`]).
#[no_mangle]
pub(crate) extern "C" fn fctrace_task_exec(pid: u32, old_pid: u32, tgid: u32, secure: bool) {
    if let Some(tr) = tracer() {
        tr.task_exec(pid, old_pid, tgid, secure);
    }
}
