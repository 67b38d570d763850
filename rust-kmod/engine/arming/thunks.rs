// SPDX-License-Identifier: GPL-2.0

//! The running kernel's branch thunks (retpolines, return thunks, call-depth
//! accounting), found by decoding its text as [`Thunks::classify`] needs it.

use crate::thunks::Thunks;
#[cfg(target_arch = "x86_64")]
use {
    crate::decode::{self, Flow},
    crate::engine::read_kernel,
    crate::fentry::fentry_offset,
    crate::ksym::addr_of,
    kernel::c_str,
};

/// Finds the running kernel's branch thunks when tracing starts: the return thunk the
/// kernel patched the module's own return into (`fctrace_ret_site` in trampoline.S: the
/// live choice for this CPU), every return thunk 6.12 has by name, and the thunk arrays
/// with their slot size (from the symbols of their first two slots).
#[cfg(target_arch = "x86_64")]
pub(crate) fn find_thunks() -> Thunks {
    let mut th = Thunks::new();
    let site = crate::sys::ret_insn_addr();
    let mut code = [0u8; 16];
    if read_kernel(site, &mut code) {
        // After `endbr64`, if any.
        let off = fentry_offset(&code);
        if let Ok(i) = decode::decode(&code[off..], site + off as u64) {
            if let Flow::Jmp(t) = i.flow {
                th.add_return(t);
            }
        }
    }
    for name in [
        c_str!("__x86_return_thunk"),
        c_str!("retbleed_return_thunk"),
        c_str!("srso_return_thunk"),
        c_str!("srso_alias_return_thunk"),
        c_str!("call_depth_return_thunk"),
        c_str!("its_return_thunk"),
    ] {
        th.add_return(addr_of(name));
    }
    for (array, rax, rcx) in [
        (
            c_str!("__x86_indirect_thunk_array"),
            c_str!("__x86_indirect_thunk_rax"),
            c_str!("__x86_indirect_thunk_rcx"),
        ),
        (
            c_str!("__x86_indirect_call_thunk_array"),
            c_str!("__x86_indirect_call_thunk_rax"),
            c_str!("__x86_indirect_call_thunk_rcx"),
        ),
        (
            c_str!("__x86_indirect_jump_thunk_array"),
            c_str!("__x86_indirect_jump_thunk_rax"),
            c_str!("__x86_indirect_jump_thunk_rcx"),
        ),
        (
            c_str!("__x86_indirect_its_thunk_array"),
            c_str!("__x86_indirect_its_thunk_rax"),
            c_str!("__x86_indirect_its_thunk_rcx"),
        ),
    ] {
        let (a, r0, r1) = (addr_of(array), addr_of(rax), addr_of(rcx));
        if a != 0 && r0 == a && r1 > r0 {
            th.add_array(a, r1 - r0);
        }
    }
    th
}

/// arm64 has no branch thunks: its indirect calls and returns are plain `BLR` and `RET`.
#[cfg(not(target_arch = "x86_64"))]
pub(crate) fn find_thunks() -> Thunks {
    Thunks::new()
}
