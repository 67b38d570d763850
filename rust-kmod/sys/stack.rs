// SPDX-License-Identifier: GPL-2.0

//! Stacks and kernel memory. Any context.

use core::sync::atomic::{AtomicU64, Ordering};
use kernel::ffi::{c_ulong, c_void};

use crate::bindings;

/// The key of the stack the word at `addr` is on: the current task's (its `task_struct`'s
/// address) for its own stack, this CPU's hard-interrupt stack's top for that one, 0 for
/// any other stack.
pub(crate) fn stack_key(addr: u64) -> u64 {
    // SAFETY: compares addresses only.
    unsafe { bindings::fctrace_stack_key(addr as _) as u64 }
}

/// Tells [`stack_key`] where the per-CPU pointer to the hard-interrupt stack is, from
/// kallsyms ([`HARDIRQ_STACK_PTR`]); before, no address is on an interrupt stack. Any
/// context; call before tracing starts.
pub(crate) fn set_hardirq_stack_ptr(addr: u64) {
    // SAFETY: stores the address; it is read as a per-CPU variable's address only when
    // not 0, and it comes from kallsyms' lookup of that variable.
    unsafe { bindings::fctrace_set_hardirq_stack_ptr(addr as _) }
}

/// The word at `addr` and its stack's key, if `addr` is an aligned word of one of the
/// stacks [`stack_key`] knows.
pub(crate) fn stack_word(addr: u64) -> Option<(u64, u64)> {
    let mut v: c_ulong = 0;
    // SAFETY: the helper reads `addr` only where it is a word of a mapped stack, and
    // writes the local `v`.
    let key = unsafe { bindings::fctrace_stack_word(addr as _, &mut v) } as u64;
    (key != 0).then_some((key, v as u64))
}

/// The callers of the frame at `ip` (`sp`, `bp`: its registers) on the current task's
/// stack, as the ORC unwinder finds them: `(return address, the stack word holding it)`
/// for each, innermost first, into `out`; how many (0 without `CONFIG_UNWINDER_ORC`).
/// arm64: from the frame records, `bp` the frame pointer: `(return address, stripped of
/// its pointer authentication code, the record)`.
pub(crate) fn unwind_callers(ip: u64, sp: u64, bp: u64, out: &mut [(u64, u64); 3]) -> usize {
    let (mut rets, mut slots) = ([0 as c_ulong; 3], [0 as c_ulong; 3]);
    // SAFETY: the arrays have room for the 3 entries asked for; the unwinder reads only
    // the current task's stacks, checking each address against them.
    let n = unsafe {
        bindings::fctrace_unwind_callers(
            ip as _,
            sp as _,
            bp as _,
            rets.as_mut_ptr(),
            slots.as_mut_ptr(),
            3,
        )
    };
    let n = (n.max(0) as usize).min(3);
    for (o, (r, s)) in out.iter_mut().zip(rets.iter().zip(slots.iter())).take(n) {
        *o = (*r as u64, *s as u64);
    }
    n
}

/// Replaces `old` with `new` in the word at `addr`; whether it did.
///
/// # Safety
///
/// `addr` is an aligned word of a live kernel stack that stays mapped for the call.
pub(crate) unsafe fn cmpxchg_word(addr: u64, old: u64, new: u64) -> bool {
    // SAFETY: the caller guarantees an aligned word that stays mapped. This is the C
    // helper's `try_cmpxchg()` it replaces: one locked cmpxchg. The stack's own task reads
    // and writes the word with plain instructions (`call`, `ret`), which the kernel's
    // memory model, not Rust's, orders against it, as it did for the C helper.
    let w = unsafe { AtomicU64::from_ptr(addr as *mut u64) };
    w.compare_exchange(old, new, Ordering::SeqCst, Ordering::SeqCst)
        .is_ok()
}

/// Copies kernel memory at `addr` into `buf` without faulting; false if unreadable.
pub(crate) fn read_kernel(addr: u64, buf: &mut [u8]) -> bool {
    // SAFETY: `copy_from_kernel_nofault` checks the source and never faults; the
    // destination is `buf`, writable for its length.
    unsafe {
        bindings::copy_from_kernel_nofault(buf.as_mut_ptr().cast(), addr as *const _, buf.len())
            == 0
    }
}

/// Copies the string at `src` (user memory below `TASK_SIZE_MAX`, else kernel memory) into
/// `buf` without faulting; the second page is read only if the first holds no NUL. The
/// bytes copied, or `None` when nothing could be read.
pub(crate) fn copy_str(buf: &mut [u8], src: u64) -> Option<usize> {
    // SAFETY: `buf` has `buf.len()` writable bytes; the helper reads `src` with the
    // no-fault routines.
    let got =
        unsafe { bindings::fctrace_copy_str(buf.as_mut_ptr().cast(), src as _, buf.len() as _) };
    (got > 0).then(|| (got as usize).min(buf.len()))
}

/// The `struct task_struct *` in a probed function's argument `task`: its thread group.
///
/// # Safety
///
/// `task` points to a live `task_struct`.
pub(crate) unsafe fn task_tgid(task: u64) -> u32 {
    // SAFETY: the caller guarantees a live `task_struct`; one field is read.
    unsafe { bindings::fctrace_task_tgid(task as *const c_void) as u32 }
}

/// Calls `f` with the function_graph shadow stack of the current task (its words in use)
/// and the offset of a return address's slot in an entry; `None` when it has none. Only
/// from a handler running in the current task.
pub(crate) fn with_graph_ret_stack<R>(f: impl FnOnce(&[u64], usize) -> R) -> Option<R> {
    let (mut top, mut off) = (0, 0);
    // SAFETY: reads the current task's own fields; writes two locals.
    let rs = unsafe { bindings::fctrace_graph_ret_stack(&mut top, &mut off) };
    if rs.is_null() || top < 0 || off < 0 {
        return None;
    }
    // SAFETY: `rs` is the current task's function_graph shadow stack, a page allocated
    // while the task lives, and `top` (at most a page of words, checked by the helper)
    // words of it are in use. Only the task changes them (an interrupt on its CPU pushes
    // above `top` and pops before returning), and the caller is the task itself: the
    // slice lives only for the call of `f`, within the task's life.
    let words = unsafe { core::slice::from_raw_parts(rs.cast::<u64>(), top as usize) };
    Some(f(words, off as usize))
}

/// The return address a rethook (a kretprobe, an fprobe's exit) saved for the current
/// task's frame whose return address sits at `retp`, where it put its trampoline `tramp`.
pub(crate) fn rethook_saved_ret(retp: u64, tramp: u64) -> Option<u64> {
    // SAFETY: walks the current task's own rethook list (at most 64 nodes), which only the
    // task changes; callers run in the task, in a handler of one of its functions.
    let r = unsafe { bindings::fctrace_rethook_saved_ret(retp as _, tramp as _) };
    (r != 0).then_some(r as u64)
}

/// Whether `addr` is in fctrace's own module.
pub(crate) fn addr_in_self(addr: u64) -> bool {
    // SAFETY: `within_module()` on our own module, which is live while this code runs.
    unsafe { bindings::fctrace_addr_in_self(addr as _) }
}
