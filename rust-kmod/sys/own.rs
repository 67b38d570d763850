// SPDX-License-Identifier: GPL-2.0

//! The module's own code and data, by address: the labels of `trampoline.S` and the
//! module's `struct module`. Only their addresses are taken, never what is there, which
//! needs no `unsafe` (rustc 1.82 and later). arm64 (`trampoline_arm64.S`) has the return
//! trampoline and the entry hooks' arming trampoline, not the breakpoints' (see
//! `engine/wait/mod.rs`).

use crate::bindings;

#[cfg(target_arch = "x86_64")]
extern "C" {
    static fctrace_trampoline: [u8; 0];
    static fctrace_ret_site: [u8; 0];
}

#[cfg(target_arch = "aarch64")]
extern "C" {
    static fctrace_bp_trampoline: [u8; 0];
    static fctrace_bp_entry_trampoline: [u8; 0];
    static fctrace_bp_resume: [u8; 0];
    static fctrace_bp_lost_site: [u8; 0];
}

extern "C" {
    // `trampoline.S`, `trampoline_arm64.S`.
    static fctrace_entry_trampoline: [u8; 0];
    static fctrace_return_site: [u8; 0];
}

extern "C" {
    // Defined by modpost's `.mod.c`: what `THIS_MODULE` is in C.
    static __this_module: [u8; 0];
}

/// The arming trampoline (`trampoline.S`), where a probe sends a task to wait.
#[cfg(target_arch = "x86_64")]
pub(crate) fn trampoline_addr() -> u64 {
    core::ptr::addr_of!(fctrace_trampoline) as u64
}

/// arm64: where a breakpoint sends a task that waits for arming: at a function's entry
/// or a tail call (`at_entry`: the function has no frame of its own), or at a call.
#[cfg(target_arch = "aarch64")]
pub(crate) fn bp_trampoline_addr(at_entry: bool) -> u64 {
    if at_entry {
        core::ptr::addr_of!(fctrace_bp_entry_trampoline) as u64
    } else {
        core::ptr::addr_of!(fctrace_bp_trampoline) as u64
    }
}

/// arm64: the instruction that carries the resume probe.
#[cfg(target_arch = "aarch64")]
pub(crate) fn bp_resume_addr() -> u64 {
    core::ptr::addr_of!(fctrace_bp_resume) as u64
}

/// arm64: where a task at the resume probe with nowhere to go is sent to die.
#[cfg(target_arch = "aarch64")]
pub(crate) fn bp_lost_addr() -> u64 {
    core::ptr::addr_of!(fctrace_bp_lost_site) as u64
}

/// Where an entry hook sends a task that waits for its function to be armed.
pub(crate) fn entry_trampoline_addr() -> u64 {
    core::ptr::addr_of!(fctrace_entry_trampoline) as u64
}

/// Where a followed function returns to instead of its caller (`fctrace_return_site`).
pub(crate) fn return_site_addr() -> u64 {
    core::ptr::addr_of!(fctrace_return_site) as u64
}

/// A bare RET of the module, patched at load like every return (see `trampoline.S`).
#[cfg(target_arch = "x86_64")]
pub(crate) fn ret_insn_addr() -> u64 {
    core::ptr::addr_of!(fctrace_ret_site) as u64
}

/// This module (`THIS_MODULE`), the owner of its file operations.
pub(crate) fn this_module() -> *mut bindings::module {
    core::ptr::addr_of!(__this_module)
        .cast::<bindings::module>()
        .cast_mut()
}
