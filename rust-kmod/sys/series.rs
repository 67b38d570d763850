// SPDX-License-Identifier: GPL-2.0

//! What differs between the kernel series fctrace builds for: 6.12 and 7.x. The series is
//! the kernel tree's own `VERSION`, which `Kbuild` passes as `--cfg fctrace_kernel_7` for
//! 7.x; nothing else in the module names a series (`module!`'s keys in the crate root
//! aside, which a macro cannot take from a function).

use kernel::alloc::{Allocator, Vec};
use kernel::prelude::*;
use kernel::uaccess::UserSlice;

/// The per-CPU variable that points to this CPU's hard-interrupt stack, which is not
/// exported and is looked up by name ([`super::set_hardirq_stack_ptr`]): 7.x's own
/// variable on x86-64; `None` on 6.12, whose `pcpu_hot` holding it is exported; arm64's
/// `irq_stack_ptr`.
#[cfg(all(fctrace_kernel_7, target_arch = "x86_64"))]
pub(crate) const HARDIRQ_STACK_PTR: Option<&CStr> = Some(kernel::c_str!("hardirq_stack_ptr"));
#[cfg(all(not(fctrace_kernel_7), target_arch = "x86_64"))]
pub(crate) const HARDIRQ_STACK_PTR: Option<&CStr> = None;
#[cfg(target_arch = "aarch64")]
pub(crate) const HARDIRQ_STACK_PTR: Option<&CStr> = Some(kernel::c_str!("irq_stack_ptr"));

/// The user memory at `addr`, `len` bytes long.
pub(crate) fn user_slice(addr: usize, len: usize) -> UserSlice {
    #[cfg(fctrace_kernel_7)]
    let ptr = kernel::uaccess::UserPtr::from_addr(addr);
    #[cfg(not(fctrace_kernel_7))]
    let ptr = addr;
    UserSlice::new(ptr, len)
}

/// Shortens `v` to `len` bytes (nothing when it is not longer).
pub(crate) fn truncate<A: Allocator>(v: &mut Vec<u8, A>, len: usize) {
    #[cfg(fctrace_kernel_7)]
    v.truncate(len);
    #[cfg(not(fctrace_kernel_7))]
    if len < v.len() {
        // SAFETY: `len` is less than the length, and bytes need no drop.
        unsafe { v.set_len(len) };
    }
}
