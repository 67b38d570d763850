// SPDX-License-Identifier: GPL-2.0

//! The trampoline handshake: a traced task that reaches a callee not armed yet is sent to
//! `fctrace_trampoline` (or, from an entry hook, `fctrace_entry_trampoline`) and waits
//! there, where it may sleep, for the work item to arm the callee.

use crate::engine::tree::{current_ids, task_running, Cur, TaskData};
use crate::engine::{clock_ns, tracer, Tracer};
#[cfg(target_arch = "x86_64")]
use crate::kprobe;
use crate::record::Reason;
use crate::sys;
use core::sync::atomic::Ordering;

/// Where [`Tracer::redirect`] sends a task.
#[must_use]
pub(crate) struct Redirect {
    /// The probed instruction, run again after the wait.
    addr: u64,
    /// The trampoline.
    to: u64,
}

impl Redirect {
    /// Sends the task: its breakpoint's handler then returns non-zero.
    pub(crate) fn apply(self, regs: &mut sys::PtRegs) {
        // x86-64: our redirecting probes are breakpoints (or the single step of `step.rs`).
        #[cfg(target_arch = "x86_64")]
        kprobe::emulate_call(regs, self.addr, self.to);
        // arm64: `addr` is kept for the task (`resume.rs`).
        #[cfg(target_arch = "aarch64")]
        {
            let _ = self.addr;
            sys::Regs::set_pc(regs, self.to);
        }
    }
}

impl Tracer {
    /// Whether the task may wait in the trampoline for a callee to be armed, sent there by
    /// an entry hook (`entry`) or a breakpoint: the architecture can send it from there,
    /// it can sleep, no wait timed out in this trace, and `arm_wait_ms` is not 0.
    pub(crate) fn may_wait(&self, cur: &Cur, d: &TaskData, entry: bool) -> bool {
        self.can_redirect(entry)
            && cur.sleepable
            && !d.wait.nowait
            && self.settings.arm_wait_ms.load(Ordering::Relaxed) != 0
    }

    /// Why a call to an unarmed function is a leaf: the task could not wait (atomic
    /// context), or it was not to wait (`nowait`, `arm_wait_ms` 0), or it waited but
    /// arming failed.
    pub(crate) fn unarmed_reason(&self, cur: &Cur, d: &TaskData, entry: bool) -> Reason {
        if !cur.sleepable {
            Reason::Atomic
        } else if !self.can_redirect(entry) {
            Reason::NotArmedYet
        } else if !self.may_wait(cur, d, entry) {
            Reason::ArmTimeout
        } else {
            Reason::ArmFailed
        }
    }

    /// Sends the task to the trampoline to arm `target`, then to run the instruction at
    /// `addr` again: what to do to its registers ([`Redirect::apply`]), or `None` if it
    /// cannot (the caller draws the call as not followed). `at_entry`: the task is at a
    /// function's entry or a tail call, where the function has no frame of its own (for
    /// the unwinder, on arm64).
    ///
    /// x86-64: `addr` is pushed as a return address (the int3 entry leaves a gap below the
    /// interrupted stack for exactly this) and the task resumes at `fctrace_trampoline`.
    ///
    /// arm64: the exception return puts the stack pointer back where the breakpoint found
    /// it, and every register may be live at `addr`, so nothing can carry `addr`: it is
    /// kept for the task in [`resume::Resumes`](super::resume::Resumes), and the task
    /// resumes at `fctrace_bp_trampoline` with every register as it was. The trampoline
    /// waits, puts every register back and stops on the resume probe, whose handler sends
    /// the task to `addr` (`resume.rs`). Not while that probe is not registered, nor when
    /// every place is taken.
    pub(crate) fn redirect(
        &self,
        d: &mut TaskData,
        addr: u64,
        target: u64,
        at_entry: bool,
    ) -> Option<Redirect> {
        #[cfg(target_arch = "aarch64")]
        let to = {
            if !self.waits.resumes.ready() || !self.waits.resumes.claim(sys::current_task(), addr) {
                return None;
            }
            sys::bp_trampoline_addr(at_entry)
        };
        #[cfg(target_arch = "x86_64")]
        let to = {
            let _ = at_entry;
            sys::trampoline_addr()
        };
        self.note_redirect(d, addr, target);
        self.waits.inflight.fetch_add(1, Ordering::AcqRel);
        Some(Redirect { addr, to })
    }

    /// Sends the task to the trampoline to arm `target`: [`Tracer::redirect`]. When it
    /// cannot (arm64: no place left to keep `addr`, which one per traced thread rules
    /// out), `target` is wanted for arming ahead instead and the caller draws the call as
    /// not followed ([`Reason::ArmFailed`]).
    pub(crate) fn wait_for(
        &self,
        d: &mut TaskData,
        addr: u64,
        target: u64,
        at_entry: bool,
    ) -> Option<Redirect> {
        let r = self.redirect(d, addr, target, at_entry);
        if r.is_none() {
            d.wait.last_redirect = 0;
            self.want(target);
        }
        r
    }

    /// A redirect to a trampoline from `key` (a call site, or an ftrace site) to arm
    /// `target`: the task does not wait again when it comes back to `key`.
    pub(super) fn note_redirect(&self, d: &mut TaskData, key: u64, target: u64) {
        d.wait.last_redirect = key;
        d.wait.pending = target;
        self.stats.redirects.fetch_add(1, Ordering::Relaxed);
    }

    /// From the entry hook at ftrace site `ip` (see `entry.rs`): sends the task to
    /// `fctrace_entry_trampoline` to arm `func`, then to run the ftrace site again.
    /// x86-64: ftrace's trampoline returns to `regs.ip`, and restores `%rax` (which carries
    /// no argument into a function) from `regs.ax`: the entry trampoline pushes it as its
    /// return address. arm64: `regs` is a copy; the callback (`c/entry_ops.c`) sees the
    /// instruction pointer changed and has ftrace go on to the entry trampoline as to a
    /// direct trampoline, which gets the address after the ftrace site's `BL` in x30.
    /// Returns whether it did (never where [`super::CAN_REDIRECT_ENTRY`] is false).
    pub(crate) fn redirect_entry(
        &self,
        d: &mut TaskData,
        regs: &mut sys::PtRegs,
        ip: u64,
        func: u64,
    ) -> bool {
        if !super::CAN_REDIRECT_ENTRY {
            let _ = (d, regs, ip, func);
            return false;
        }
        // Counted into `inflight` by the trampoline (`fctrace_arm_pending_entry`).
        self.note_redirect(d, ip, func);
        sys::Regs::set_pc(regs, sys::entry_trampoline_addr());
        #[cfg(target_arch = "x86_64")]
        {
            regs.ax = ip as _;
        }
        true
    }

    /// Tasks in the trampoline now (`stats`: `trampoline_tasks`).
    pub(crate) fn trampoline_tasks(&self) -> usize {
        self.waits.inflight()
    }

    /// Called by the trampoline, in the traced task, which may sleep here.
    /// EFLAGS.AC (user access open) or DF in the trampoline: the task must not sleep
    /// there, the handlers never send one (`fctrace_task_context`). Counted, so that tests
    /// see a breach.
    pub(super) fn check_flags(&self, flags: u64) {
        const X86_EFLAGS_AC: u64 = 1 << 18;
        const X86_EFLAGS_DF: u64 = 1 << 10;
        if flags & (X86_EFLAGS_AC | X86_EFLAGS_DF) != 0 {
            self.stats.unsafe_flags.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// In the trampoline: waits for the pending callee to be armed (or the reader, with
    /// `lossless`). Returns whether a pre-site's single step goes on from the call site
    /// the trampoline returns to (`to_site`: where `fctrace_trampoline` returns to; `None`
    /// for the entry trampoline; see `step.rs`).
    pub(super) fn arm_pending(&self, to_site: Option<u64>) -> bool {
        let (pid, _) = current_ids();
        let mut resume = false;
        // The trampoline runs at the top of the task's kernel code, in no handler: its
        // tree is never busy here (`data` gives `None` only to a nested handler).
        if let Some(slot) = self.slot(pid) {
            // SAFETY: we are thread `pid`; the reference ends with this statement.
            let (target, throttle) = match unsafe { self.data(slot) } {
                Some(mut d) => {
                    d.wait.guard = true;
                    (d.wait.pending, core::mem::take(&mut d.wait.throttle))
                }
                None => (0, false),
            };
            let t0 = clock_ns();
            if target != 0 && !self.wait_armed(target) {
                // SAFETY: as above.
                if let Some(mut d) = unsafe { self.data(slot) } {
                    d.wait.nowait = true;
                }
            }
            if throttle {
                self.throttle_wait();
            }
            // SAFETY: as above.
            if let Some(mut d) = unsafe { self.data(slot) } {
                d.wait.guard = false;
                d.wait.pending = 0;
                // Time spent arming is fctrace's, not the traced functions': leave it out
                // of the durations of the frames that are open.
                d.stack.exclude_time(clock_ns().saturating_sub(t0));
                resume = self.resume_after_wait(&mut d, to_site);
            }
        }
        self.waits.inflight.fetch_sub(1, Ordering::AcqRel);
        resume
    }

    /// In the trampoline: has the work item arm `target` and waits until it is done, tracing
    /// stops, a fatal signal comes, or `arm_wait_ms` pass (false: timed out).
    ///
    /// The task does not arm itself: arming takes `kprobe_mutex`, `cpu_hotplug_lock`,
    /// `text_mutex` and allocates, and the task may hold any sleeping lock (`mmap_lock` in
    /// a page fault, `pcpu_alloc_mutex` in `fork()`, ...) that something holding those
    /// waits for. Waiting with a timeout cannot deadlock: at worst the call goes
    /// unfollowed (`not followed: arming timed out`) and is armed later.
    pub(super) fn wait_armed(&self, target: u64) -> bool {
        let Some(req) = self.waits.requests.iter().find(|r| {
            r.compare_exchange(0, target, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        }) else {
            // Not reached: one request per thread in a trace, and `MAX_TASKS` slots.
            return true;
        };
        self.kick_work();
        let wait_ns = u64::from(self.settings.arm_wait_ms.load(Ordering::Relaxed)) * 1_000_000;
        let deadline = clock_ns() + wait_ns;
        // A task in a wait loop's state (`fctrace_task_context()`) polls for the work item
        // instead of sleeping, which would lose its state (`fctrace_arm_sleep()`).
        let polls = !task_running();
        if polls {
            self.stats.arm_polls.fetch_add(1, Ordering::Relaxed);
        }
        let done = loop {
            // Read before the checks: a bump after them ends the sleep at once.
            let seq = sys::arm_seq();
            if !self.active.load(Ordering::Acquire) {
                break true;
            }
            let served = req.load(Ordering::Acquire) != target;
            let now = clock_ns();
            // Served, the task also waits for the start round, if it is still arming
            // (the exit path, the scheduler and its classes, called in atomic context
            // where the task cannot wait: without, a workload started at once, as the
            // oracle tests' cold runs are, ran ahead of it and showed them `not
            // followed: atomic`). Once per session at most, for `START_NS` and a second.
            // (Not a task that polls, in a wait loop's state: it would spin that long.)
            let until = if polls {
                0
            } else {
                self.waits.start_until.load(Ordering::Acquire)
            };
            if served && now >= until {
                break true;
            }
            if now >= deadline {
                // Served: armed; only the start round is not done.
                break served;
            }
            let end = if served {
                deadline.min(until)
            } else {
                deadline
            };
            let ms = ((end - now) / 1_000_000).max(1) as u32;
            // The task may sleep here (the trampoline, sleepable context), or poll (the
            // helper polls when the task's state is not TASK_RUNNING).
            if sys::arm_sleep(seq, ms) == sys::Woken::Fatal {
                break true;
            }
        };
        // Withdraw the request if the work item has not taken it (it clears only the
        // value it read, so a request made meanwhile by another thread stays).
        let _ = req.compare_exchange(target, 0, Ordering::AcqRel, Ordering::Relaxed);
        done
    }
}

/// Called by `fctrace_trampoline` (see trampoline.S) with the flags of the probed
/// instruction, and where the trampoline keeps them for its return.
#[no_mangle]
pub(crate) extern "C" fn fctrace_arm_pending(flags: u64, kept: *mut u64) {
    if let Some(tr) = tracer() {
        tr.check_flags(flags);
        // SAFETY: `kept` points to the flags word of the interrupt frame the trampoline
        // pushed on our own stack (FRAME_FLAGS in trampoline.S); G, where the task goes
        // on, is its word 32 bytes above.
        let to = (!kept.is_null()).then(|| unsafe { kept.add(4).read() });
        if tr.arm_pending(to) && !kept.is_null() {
            // A pre-site's single step goes on from the call site (see `step.rs`).
            const X86_EFLAGS_TF: u64 = 1 << 8;
            // SAFETY: `kept` points to the flags word the trampoline pushed on our own
            // stack, which it pops when we return.
            unsafe { *kept |= X86_EFLAGS_TF };
        }
    }
}

/// Called by `fctrace_entry_trampoline` (see trampoline.S), sent there by an entry hook,
/// with the flags of the function's entry. The task counts itself in (the entry hook does
/// not: should the redirect not happen, nothing is left counted). Before this module is
/// freed, ftrace's unregistration waits
/// for every task to pass a voluntary context switch, which a task on its way here
/// does only in the wait, after this count.
#[no_mangle]
pub(crate) extern "C" fn fctrace_arm_pending_entry(flags: u64) {
    if let Some(tr) = tracer() {
        tr.waits.inflight.fetch_add(1, Ordering::AcqRel);
        tr.check_flags(flags);
        tr.arm_pending(None);
    }
}
