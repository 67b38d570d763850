// SPDX-License-Identifier: GPL-2.0

//! The registers of a probed or trapped context (`struct pt_regs`) by what they mean, not
//! by their architecture's names: the one place that knows x86-64's and arm64's layouts.
//! Everything else reads `regs.sp()`, `regs.arg(1)`, and so on.
//!
//! The x86-64 mechanisms that have no arm64 counterpart yet (the trap flag, the register
//! numbers of the x86 decoder's operands) use `pt_regs`' x86 fields directly, in code
//! built for x86-64 only.

use super::PtRegs;

/// What the engine reads and writes in a `pt_regs`.
pub(crate) trait Regs {
    /// The instruction pointer (x86 `ip`, arm64 `pc`).
    fn pc(&self) -> u64;
    fn set_pc(&mut self, v: u64);
    /// The stack pointer.
    fn sp(&self) -> u64;
    fn set_sp(&mut self, v: u64);
    /// The frame pointer (x86 `bp`, arm64 `x29`).
    fn fp(&self) -> u64;
    /// The register a function returns its value in (x86 `ax`, arm64 `x0`).
    fn retval(&self) -> u64;
    /// Argument `n` (from 0) of a function entered with these registers, as the calling
    /// convention passes it in a register (x86 `di si dx cx r8 r9`, arm64 `x0` to `x7`);
    /// 0 past those.
    fn arg(&self, n: usize) -> u64;
    /// The condition flags (x86 `EFLAGS`, arm64 `PSTATE`).
    fn flags(&self) -> u64;
    /// General purpose register `r` as the architecture's instructions number it (x86:
    /// the low 4 bits, `ax cx dx bx sp bp si di r8`...; arm64: `x0` to `x30`, and 31 the
    /// stack pointer, as a base register is: a branch's register 31 is the zero
    /// register, which the caller must tell apart): one load.
    fn gpr(&self, r: u8) -> u64;
}

/// arm64: sets the link register (`x30`), where a `BL` leaves its return address.
#[cfg(target_arch = "aarch64")]
pub(crate) fn set_lr(regs: &mut PtRegs, v: u64) {
    // SAFETY: the union's members are integers of one layout (see `impl Regs` below).
    unsafe { regs.__bindgen_anon_1.__bindgen_anon_1.regs[30] = v };
}

/// Where the instruction pointer is in a `pt_regs` (read from another context's saved
/// registers).
#[cfg(target_arch = "x86_64")]
pub(crate) const PC_OFFSET: u64 = core::mem::offset_of!(PtRegs, ip) as u64;
#[cfg(target_arch = "aarch64")]
pub(crate) const PC_OFFSET: u64 = core::mem::offset_of!(PtRegs, __bindgen_anon_1) as u64 + 32 * 8;

/// How many arguments arm64's calling convention passes in registers.
#[cfg(target_arch = "aarch64")]
const ARG_REGS: usize = 8;

/// The offsets in `pt_regs` of the general purpose registers, in x86 encoding order.
#[cfg(target_arch = "x86_64")]
const REG_OFFSETS: [usize; 16] = {
    use core::mem::offset_of;
    type R = PtRegs;
    [
        offset_of!(R, ax),
        offset_of!(R, cx),
        offset_of!(R, dx),
        offset_of!(R, bx),
        offset_of!(R, sp),
        offset_of!(R, bp),
        offset_of!(R, si),
        offset_of!(R, di),
        offset_of!(R, r8),
        offset_of!(R, r9),
        offset_of!(R, r10),
        offset_of!(R, r11),
        offset_of!(R, r12),
        offset_of!(R, r13),
        offset_of!(R, r14),
        offset_of!(R, r15),
    ]
};

#[cfg(target_arch = "x86_64")]
impl Regs for PtRegs {
    #[inline]
    fn pc(&self) -> u64 {
        self.ip as u64
    }
    #[inline]
    fn set_pc(&mut self, v: u64) {
        self.ip = v as _;
    }
    #[inline]
    fn sp(&self) -> u64 {
        self.sp as u64
    }
    #[inline]
    fn set_sp(&mut self, v: u64) {
        self.sp = v as _;
    }
    #[inline]
    fn fp(&self) -> u64 {
        self.bp as u64
    }
    #[inline]
    fn retval(&self) -> u64 {
        self.ax as u64
    }
    #[inline]
    fn arg(&self, n: usize) -> u64 {
        (match n {
            0 => self.di,
            1 => self.si,
            2 => self.dx,
            3 => self.cx,
            4 => self.r8,
            5 => self.r9,
            _ => 0,
        }) as u64
    }
    #[inline]
    fn flags(&self) -> u64 {
        self.flags as u64
    }
    #[inline]
    fn gpr(&self, r: u8) -> u64 {
        let off = REG_OFFSETS[usize::from(r & 15)];
        // SAFETY: `off` is the offset of an `unsigned long` field of `*self` (the table
        // above), so the read is in bounds and aligned.
        unsafe { core::ptr::read((self as *const PtRegs).cast::<u8>().add(off).cast::<u64>()) }
    }
}

/// arm64's `pt_regs` opens with a union of `user_pt_regs` and the same fields unnamed
/// (`regs[31]`, `sp`, `pc`, `pstate`), all plain integers: every bit pattern is a value
/// of either member, so reading and writing the unnamed one is sound.
#[cfg(target_arch = "aarch64")]
impl Regs for PtRegs {
    #[inline]
    fn pc(&self) -> u64 {
        // SAFETY: a union of integers (see above).
        unsafe { self.__bindgen_anon_1.__bindgen_anon_1.pc }
    }
    #[inline]
    fn set_pc(&mut self, v: u64) {
        // (Writing a `Copy` field of a union needs no `unsafe`.)
        self.__bindgen_anon_1.__bindgen_anon_1.pc = v;
    }
    #[inline]
    fn sp(&self) -> u64 {
        // SAFETY: a union of integers (see above).
        unsafe { self.__bindgen_anon_1.__bindgen_anon_1.sp }
    }
    #[inline]
    fn set_sp(&mut self, v: u64) {
        self.__bindgen_anon_1.__bindgen_anon_1.sp = v;
    }
    #[inline]
    fn fp(&self) -> u64 {
        // SAFETY: a union of integers (see above).
        unsafe { self.__bindgen_anon_1.__bindgen_anon_1.regs[29] }
    }
    #[inline]
    fn retval(&self) -> u64 {
        self.arg(0)
    }
    #[inline]
    fn arg(&self, n: usize) -> u64 {
        if n >= ARG_REGS {
            return 0;
        }
        // SAFETY: a union of integers (see above); `n` < 8 < 31.
        unsafe { self.__bindgen_anon_1.__bindgen_anon_1.regs[n] }
    }
    #[inline]
    fn flags(&self) -> u64 {
        // SAFETY: a union of integers (see above).
        unsafe { self.__bindgen_anon_1.__bindgen_anon_1.pstate }
    }
    #[inline]
    fn gpr(&self, r: u8) -> u64 {
        let r = usize::from(r & 31);
        // SAFETY: a union of integers (see above); `r` < 31 indexes `regs`.
        unsafe {
            if r == 31 {
                self.__bindgen_anon_1.__bindgen_anon_1.sp
            } else {
                self.__bindgen_anon_1.__bindgen_anon_1.regs[r]
            }
        }
    }
}
