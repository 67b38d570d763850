// SPDX-License-Identifier: GPL-2.0
//! Branch thunks: what a direct call or jump of the running kernel really does.
//!
//! At boot a kernel built with mitigations rewrites its branches for the CPU it runs on:
//! returns become jumps to the return thunk it chose (`__x86_return_thunk`,
//! `retbleed_return_thunk`, `srso_return_thunk`, `srso_alias_return_thunk`,
//! `call_depth_return_thunk`, `its_return_thunk`), calls through a register become
//! calls into a thunk array (`__x86_indirect_thunk_array`, call-depth tracking's
//! `__x86_indirect_call_thunk_array`/`__x86_indirect_jump_thunk_array`) or into an ITS
//! thunk (`jmp *%reg` in the upper half of a cache line, static or allocated at run
//! time, without a symbol), and with call-depth tracking direct calls go to an
//! accounting thunk written into the callee's padding (`__pfx_` symbol), which falls
//! through into the callee.
//!
//! [`Thunks::classify`] says what a call or jump to a fixed address is, from the thunk
//! addresses the running kernel has (found from its symbols and from the module's own
//! patched return, see `rust-kmod/engine/arming/thunks.rs`) and from the live code at the
//! target ([`Text`]): never from names alone. Shared by the kernel module (which arms
//! what this says is a function, and never a thunk) and the host tests, which run it on
//! every `.return_sites` and `.call_sites` entry of a built kernel.

use crate::decode::{decode, Flow, Reg};

/// The most return thunks one kernel has.
pub const MAX_RETURN_THUNKS: usize = 8;
/// The most thunk arrays (slot per register) one kernel has.
pub const MAX_THUNK_ARRAYS: usize = 4;
/// The longest padding before a function (`CONFIG_FUNCTION_PADDING_BYTES` is 16; 64
/// with `CONFIG_FUNCTION_ALIGNMENT_64B`).
pub const MAX_PADDING: u64 = 64;
/// The padding call-depth tracking writes its accounting thunk into
/// (`CONFIG_FUNCTION_PADDING_BYTES`), also before assembly functions, whose padding has no
/// `__pfx_` symbol (`preempt_schedule_thunk`, `memmove`).
pub const CALL_PADDING: u64 = 16;

/// What [`Text::symbol`] knows about the symbol containing an address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SymInfo {
    /// The address's offset into the symbol.
    pub offset: u64,
    /// The symbol's size.
    pub size: u64,
    /// The symbol is a function's padding (`__pfx_<function>`).
    pub padding: bool,
}

/// The running kernel's text, as the classification needs it.
pub trait Text {
    /// The symbol that contains `addr`, if any.
    fn symbol(&mut self, addr: u64) -> Option<SymInfo>;
    /// Fills `buf` with the live bytes at `addr`; false if they cannot be read.
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool;
}

/// A call or a jump.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Branch {
    /// `call rel32` (possibly prefixed: GCC's `cs call`).
    Call,
    /// `jmp rel32`/`jmp rel8`, or a conditional jump, out of the function.
    Jump,
}

/// What a call or jump to a fixed address does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Class {
    /// A return: a jump to a return thunk (or to a bare `ret`).
    Return,
    /// A call or jump through register `r` (a retpoline, call-depth or ITS thunk).
    Reg(Reg),
    /// A call or jump to the function at this address (for a call into a call-depth
    /// accounting thunk, the function it falls through into).
    Direct(u64),
}

/// The thunks of one running kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Thunks {
    /// Return thunk entry addresses (0: empty slot).
    returns: [u64; MAX_RETURN_THUNKS],
    /// Thunk arrays: (start, slot size), one slot per register in encoding order
    /// (0: empty).
    arrays: [(u64, u64); MAX_THUNK_ARRAYS],
}

impl Default for Thunks {
    fn default() -> Self {
        Self::new()
    }
}

impl Thunks {
    /// No thunks known.
    pub const fn new() -> Self {
        Thunks {
            returns: [0; MAX_RETURN_THUNKS],
            arrays: [(0, 0); MAX_THUNK_ARRAYS],
        }
    }

    /// Adds a return thunk at `addr` (0 or a full table: ignored; returns whether it
    /// is known now).
    pub fn add_return(&mut self, addr: u64) -> bool {
        if addr == 0 || self.is_return(addr) {
            return addr != 0;
        }
        match self.returns.iter_mut().find(|r| **r == 0) {
            Some(r) => {
                *r = addr;
                true
            }
            None => false,
        }
    }

    /// Adds a thunk array at `start` with slots of `slot` bytes (either 0: ignored).
    pub fn add_array(&mut self, start: u64, slot: u64) -> bool {
        if start == 0 || slot == 0 {
            return false;
        }
        match self.arrays.iter_mut().find(|a| a.0 == 0) {
            Some(a) => {
                *a = (start, slot);
                true
            }
            None => false,
        }
    }

    /// Whether `addr` is the entry of a known return thunk.
    pub fn is_return(&self, addr: u64) -> bool {
        addr != 0 && self.returns.contains(&addr)
    }

    /// The register a branch to `t` goes through, if `t` is the start of a slot of a
    /// known thunk array.
    pub fn register_of(&self, t: u64) -> Option<Reg> {
        self.arrays.iter().find_map(|&(start, slot)| {
            if start == 0 || slot == 0 {
                return None;
            }
            let off = t.checked_sub(start)?;
            let reg = off.checked_div(slot)?;
            (off.checked_rem(slot)? == 0 && reg < 16).then_some(reg as Reg)
        })
    }

    /// Whether `t` is a known thunk (return or indirect): never a function to arm.
    pub fn is_thunk(&self, t: u64) -> bool {
        self.is_return(t) || self.register_of(t).is_some()
    }

    /// What a `b` to `t` does, on the kernel whose live code `text` reads.
    ///
    /// - A jump to a known return thunk, or to code that starts with `ret`, is a return.
    /// - A branch into a slot of a known thunk array, or to code that starts with
    ///   `jmp *%reg` (an ITS thunk, which may have no symbol), goes through that register.
    /// - A call into a function's padding (`__pfx_f`, or the last [`CALL_PADDING`] bytes
    ///   before `f` where it has no such symbol) whose code falls through into `f` with no
    ///   branch (call-depth tracking's accounting thunk) is a call of `f`.
    /// - Anything else is a direct branch to `t`.
    pub fn classify(&self, text: &mut impl Text, b: Branch, t: u64) -> Class {
        if b == Branch::Jump && self.is_return(t) {
            return Class::Return;
        }
        if let Some(r) = self.register_of(t) {
            return Class::Reg(r);
        }
        let mut code = [0u8; 16];
        if text.read(t, &mut code) {
            if let Ok(insn) = decode(&code, t) {
                match insn.flow {
                    Flow::JmpReg(r) => return Class::Reg(r),
                    Flow::Ret if b == Branch::Jump => return Class::Return,
                    _ => {}
                }
            }
        }
        if b == Branch::Call {
            if let Some(f) = padding_callee(text, t) {
                return Class::Direct(f);
            }
        }
        Class::Direct(t)
    }
}

/// The function a call to `t` reaches when `t` is inside its padding (its `__pfx_`
/// symbol, or the last [`CALL_PADDING`] bytes of the symbol before it) and the code from
/// `t` runs into it without a branch.
fn padding_callee(text: &mut impl Text, t: u64) -> Option<u64> {
    let sym = text.symbol(t)?;
    if sym.offset >= sym.size {
        return None;
    }
    let f = t.checked_sub(sym.offset)?.checked_add(sym.size)?;
    let ok = if sym.padding {
        sym.size <= MAX_PADDING
    } else {
        // (Not a call of a symbol's start: a short function that runs into the next.)
        sym.offset != 0 && f.wrapping_sub(t) <= CALL_PADDING
    };
    if !ok || !matches!(text.symbol(f), Some(s) if s.offset == 0 && !s.padding) {
        return None;
    }
    let len = f.checked_sub(t)? as usize;
    let mut code = [0u8; MAX_PADDING as usize];
    let code = code.get_mut(..len)?;
    if !text.read(t, code) {
        return None;
    }
    let mut off = 0usize;
    while off < len {
        let insn = decode(code.get(off..)?, t.wrapping_add(off as u64)).ok()?;
        if insn.flow != Flow::Next {
            return None;
        }
        off = off.checked_add(usize::from(insn.len))?;
    }
    (off == len).then_some(f)
}

/// Where the straight run of instructions (no branch) that ends exactly at `f` starts in
/// `before`, the bytes just before `f`: the lowest such address, `None` when the byte
/// before `f` ends no such run. Where calls of an assembly function may point with
/// call-depth tracking (its padding has no `__pfx_` symbol to say where it starts).
pub fn straight_start(before: &[u8], f: u64) -> Option<u64> {
    let len = before.len();
    (0..len).find_map(|k| {
        let mut off = k;
        while off < len {
            let insn = decode(
                before.get(off..)?,
                f.wrapping_sub(len.wrapping_sub(off) as u64),
            )
            .ok()?;
            if insn.flow != Flow::Next {
                return None;
            }
            off = off.checked_add(usize::from(insn.len))?;
        }
        (off == len).then(|| f.wrapping_sub(len.wrapping_sub(k) as u64))
    })
}

#[cfg(test)]
#[allow(
    clippy::arithmetic_side_effects,
    clippy::indexing_slicing,
    clippy::unwrap_used,
    clippy::panic
)]
mod tests {
    use super::*;
    extern crate std;
    use std::collections::BTreeMap;
    use std::vec::Vec;

    /// Text from a map of (start, bytes) chunks and (start, size, padding) symbols.
    #[derive(Default)]
    struct Fake {
        code: BTreeMap<u64, Vec<u8>>,
        syms: Vec<(u64, u64, bool)>,
    }

    impl Text for Fake {
        fn symbol(&mut self, addr: u64) -> Option<SymInfo> {
            self.syms
                .iter()
                .find(|&&(s, n, _)| addr >= s && addr < s + n)
                .map(|&(s, n, p)| SymInfo {
                    offset: addr - s,
                    size: n,
                    padding: p,
                })
        }
        fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool {
            let Some((&s, c)) = self.code.range(..=addr).next_back() else {
                return false;
            };
            let off = (addr - s) as usize;
            match c.get(off..off + buf.len()) {
                Some(b) => {
                    buf.copy_from_slice(b);
                    true
                }
                None => false,
            }
        }
    }

    const F: u64 = 0xffff_ffff_8100_1000;

    fn padded(template: &[u8]) -> Fake {
        // 16 bytes of padding (`__pfx_f`), then f: endbr64; nop5; ret.
        let mut c = template.to_vec();
        c.resize(16, 0x90);
        c.extend_from_slice(&[0xf3, 0x0f, 0x1e, 0xfa, 0x0f, 0x1f, 0x44, 0, 0, 0xc3]);
        c.extend_from_slice(&[0xcc; 32]);
        let mut t = Fake::default();
        t.code.insert(F - 16, c);
        t.syms.push((F - 16, 16, true));
        t.syms.push((F, 10, false));
        t
    }

    #[test]
    fn call_into_accounting_thunk_is_a_call_of_the_function() {
        // sarq $5, %gs:__x86_call_depth(%rip), then nops into f (as callthunks.c writes).
        let mut t = padded(&[0x65, 0x48, 0xc1, 0x3d, 0x10, 0x20, 0x30, 0x00, 0x05]);
        let th = Thunks::new();
        assert_eq!(th.classify(&mut t, Branch::Call, F - 16), Class::Direct(F));
        assert_eq!(th.classify(&mut t, Branch::Call, F - 7), Class::Direct(F));
        assert_eq!(th.classify(&mut t, Branch::Call, F), Class::Direct(F));
        // A jump into padding is not rewritten by the kernel: left as it is.
        assert_eq!(
            th.classify(&mut t, Branch::Jump, F - 16),
            Class::Direct(F - 16)
        );
    }

    #[test]
    fn padding_with_a_branch_is_not_a_fall_through() {
        let mut t = padded(&[0xeb, 0x0e]);
        let th = Thunks::new();
        assert_eq!(
            th.classify(&mut t, Branch::Call, F - 16),
            Class::Direct(F - 16)
        );
    }

    #[test]
    fn padding_without_a_symbol_is_followed_through_its_last_bytes_only() {
        // Debian's 7.3.4 (model 5, retbleed=stuff), live: the 16 bytes before
        // preempt_schedule_thunk (assembly: no `__pfx_` symbol; they end the symbol
        // before) and its first instructions. Its callers point at F - 9.
        let mut c = [0x90u8; 7].to_vec();
        c.extend_from_slice(&[0x65, 0x48, 0xc1, 0x3d, 0x30, 0x8b, 0xca, 0x02, 0x05]);
        c.extend_from_slice(&[0x55, 0x48, 0x89, 0xe5, 0x57, 0x56, 0x52, 0x51]);
        let mut t = Fake::default();
        t.code.insert(F - 48, [0x90u8; 32].to_vec());
        t.code.insert(F - 16, c.clone());
        t.syms.push((F - 0x400, 0x400, false));
        t.syms.push((F, 0x30, false));
        let th = Thunks::new();
        assert_eq!(th.classify(&mut t, Branch::Call, F - 9), Class::Direct(F));
        assert_eq!(th.classify(&mut t, Branch::Call, F - 16), Class::Direct(F));
        // Further back is the function before, not padding.
        assert_eq!(
            th.classify(&mut t, Branch::Call, F - 17),
            Class::Direct(F - 17)
        );
        // The function before ends in a branch: not a fall-through.
        t.code.insert(F - 16, [&[0xc3u8][..], &c[1..]].concat());
        assert_eq!(
            th.classify(&mut t, Branch::Call, F - 16),
            Class::Direct(F - 16)
        );
        assert_eq!(th.classify(&mut t, Branch::Call, F - 9), Class::Direct(F));
    }

    #[test]
    fn known_return_thunks_and_bare_rets_are_returns() {
        const R: u64 = 0xffff_ffff_8200_0000;
        let mut t = Fake::default();
        // srso_return_thunk-like: call srso_safe_ret; ud2.
        t.code
            .insert(R, [0xe8, 0, 0, 0, 0, 0x0f, 0x0b, 0xcc].repeat(4));
        // its_return_thunk-like: ret; int3.
        t.code.insert(R + 0x100, [0xc3, 0xcc].repeat(16));
        let mut th = Thunks::new();
        assert!(th.add_return(R));
        assert!(!th.add_return(0));
        assert_eq!(th.classify(&mut t, Branch::Jump, R), Class::Return);
        assert_eq!(th.classify(&mut t, Branch::Jump, R + 0x100), Class::Return);
        // Calls are never returns.
        assert_eq!(
            th.classify(&mut t, Branch::Call, R + 0x100),
            Class::Direct(R + 0x100)
        );
        assert!(th.is_thunk(R));
        // The table is bounded.
        for i in 1..MAX_RETURN_THUNKS as u64 {
            assert!(th.add_return(R + 0x1000 * i));
        }
        assert!(!th.add_return(R + 0x10_0000));
        assert!(th.add_return(R), "a known thunk stays known");
    }

    #[test]
    fn thunk_array_slots_and_its_thunks_are_registers() {
        const A: u64 = 0xffff_ffff_8210_0000;
        let mut t = Fake::default();
        let mut th = Thunks::new();
        assert!(th.add_array(A, 32));
        assert!(!th.add_array(A, 0));
        assert_eq!(th.classify(&mut t, Branch::Call, A), Class::Reg(0));
        assert_eq!(
            th.classify(&mut t, Branch::Call, A + 11 * 32),
            Class::Reg(11)
        );
        assert_eq!(
            th.classify(&mut t, Branch::Jump, A + 15 * 32),
            Class::Reg(15)
        );
        // Not a slot start, or past the last register.
        assert_eq!(
            th.classify(&mut t, Branch::Call, A + 33),
            Class::Direct(A + 33)
        );
        assert_eq!(
            th.classify(&mut t, Branch::Call, A + 16 * 32),
            Class::Direct(A + 16 * 32)
        );
        // An ITS thunk allocated at run time, no symbol: jmp *%r11; int3.
        const D: u64 = 0xffff_ffff_c000_0020;
        t.code.insert(D, [0x41, 0xff, 0xe3, 0xcc].repeat(4));
        assert_eq!(th.classify(&mut t, Branch::Call, D), Class::Reg(11));
        assert_eq!(th.classify(&mut t, Branch::Jump, D), Class::Reg(11));
    }

    #[test]
    fn unreadable_targets_are_direct() {
        let mut t = Fake::default();
        let th = Thunks::new();
        assert_eq!(
            th.classify(&mut t, Branch::Call, 0x1234),
            Class::Direct(0x1234)
        );
        assert_eq!(
            th.classify(&mut t, Branch::Jump, 0x1234),
            Class::Direct(0x1234)
        );
    }

    #[test]
    fn straight_runs_into_a_function() {
        // Debian's 7.3.4, model 5: nops and the accounting thunk before
        // preempt_schedule_thunk.
        let mut b = [0x90u8; 7].to_vec();
        b.extend_from_slice(&[0x65, 0x48, 0xc1, 0x3d, 0x30, 0x8b, 0xca, 0x02, 0x05]);
        assert_eq!(straight_start(&b, F), Some(F - 16));
        // A function's last `ret` three bytes before: the run starts after it.
        let mut r = [0x90u8; 16];
        r[12] = 0xc3;
        assert_eq!(straight_start(&r, F), Some(F - 3));
        // int3 padding: no run.
        assert_eq!(straight_start(&[0xcc; 16], F), None);
    }
}
