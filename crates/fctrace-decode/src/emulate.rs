// SPDX-License-Identifier: GPL-2.0
//! The target of an indirect call, computed at its pre-site.
//!
//! A pre-site probe ([`crate::presite`]) runs a few instructions before an indirect call
//! or jump. Those instructions usually compute the target (`mov 0x10(%rax),%r11` before
//! `call __x86_indirect_thunk_r11`), so the registers at the pre-site do not say where
//! the call goes. [`compile`] turns the run into a small [`Program`] of the effects that
//! matter: register moves, loads, address arithmetic, immediates; [`Program::target`]
//! evaluates it on the registers of the pre-site (a [`Machine`]: the probe's saved
//! registers and a fault-tolerant memory read) and gives the address the call will jump
//! to, without running the task a single instruction. The module then lets the task run
//! on when that target has an entry hook (which sees the call), and single-steps it to
//! the call site only when not.
//!
//! The program is exact or absent, never a guess: an instruction outside the short list
//! below makes [`compile`] give up (the site is then always stepped), a register whose
//! value is not computed (an 8- or 16-bit write, a flags-dependent `cmov`, a multiply)
//! is *unknown* and a target that depends on one is `None`, and a load that may read
//! what a store earlier in the run wrote is not computed either (the program does not
//! write memory: it keeps the stores' addresses, and a load overlapping one, or any load
//! after a store to an address not computed, gives `None`). Understood: `mov`, `movzx`, `movsx`, `movsxd`, `lea`, `add`, `sub`,
//! `and`, `or`, `xor`, `inc`, `dec`, `shl`, `shr`, `sar` by a constant, `cmp`, `test`,
//! `nop`, `prefetch`, stores, and `gs`-relative loads (per-CPU data). The host tests
//! check it on every pre-site of the built kernels against an evaluator written on
//! iced-x86's decoder (`tests/emulate_vmlinux.rs`).
//!
//! Shared by the kernel module (`rust-kmod/engine/step.rs`) and the host tests.

use crate::decode::{Mem, Seg};
use core::cell::Cell;

/// The most operations in a program: two for each instruction of a pre-site run (see
/// [`crate::presite`]; a `pop` is a load and a move of the stack pointer).
pub const MAX_OPS: usize = crate::presite::MAX_INSNS * 2;

/// A general-purpose register number in x86 encoding order (0 = `rax` .. 15 = `r15`).
pub type Reg = u8;

/// The register state and memory a program is evaluated on.
pub trait Machine {
    /// The 64-bit value of register `r` (0..=15).
    fn reg(&self, r: Reg) -> u64;
    /// The `size`-byte (1, 2, 4 or 8) little-endian value at `addr`, zero-extended, or
    /// `None` if it cannot be read.
    fn load(&self, addr: u64, size: u8) -> Option<u64>;
    /// The base of the `gs` segment (the CPU's per-CPU area), if known.
    fn gs_base(&self) -> Option<u64>;
}

/// A memory address `[base + index * scale + disp]`, `gs`-relative if `gs`. A
/// rip-relative operand is compiled into an absolute `disp` without base.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Addr {
    /// Base register.
    pub base: Option<Reg>,
    /// Index register and its scale (1, 2, 4 or 8).
    pub index: Option<(Reg, u8)>,
    /// Displacement (or the absolute address).
    pub disp: u64,
    /// Relative to the `gs` segment's base.
    pub gs: bool,
}

impl Addr {
    /// The address of a decoded memory operand of an instruction that ends at
    /// `next_ip`; `None` for an `fs`-relative one.
    pub fn from_mem(m: &Mem, next_ip: u64) -> Option<Addr> {
        let gs = match m.segment {
            Some(Seg::Fs) => return None,
            Some(Seg::Gs) => true,
            Some(Seg::Other) | None => false,
        };
        let disp = m.disp as i64 as u64;
        Some(Addr {
            base: m.base,
            index: m.index.map(|i| (i, m.scale)),
            disp: if m.rip_relative {
                next_ip.wrapping_add(disp)
            } else {
                disp
            },
            gs,
        })
    }
}

/// A two-operand arithmetic or logic operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Alu {
    /// `add`
    Add,
    /// `sub`
    Sub,
    /// `and`
    And,
    /// `or`
    Or,
    /// `xor`
    Xor,
    /// `shl` (`sal`)
    Shl,
    /// `shr`
    Shr,
    /// `sar`
    Sar,
}

/// The second operand of an [`Alu`] operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Src {
    /// A register.
    Reg(Reg),
    /// A constant (sign-extended to 64 bits as the instruction does).
    Imm(u64),
}

/// One effect on a register. `wide`: the destination is written as 64 bits; else as 32
/// bits, zero-extended (x86-64's rule for 32-bit destinations).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// `dst = src`, the low `bits` (8, 16, 32 or 64) of it, zero- or sign-extended.
    Mov {
        /// Destination.
        dst: Reg,
        /// Source.
        src: Reg,
        /// Bits of `src` taken.
        bits: u8,
        /// Sign-extended (else zero-extended).
        signed: bool,
        /// 64-bit destination.
        wide: bool,
    },
    /// `dst = [addr]`, `size` bytes, zero- or sign-extended.
    Load {
        /// Destination.
        dst: Reg,
        /// Where.
        addr: Addr,
        /// Bytes read (1, 2, 4 or 8).
        size: u8,
        /// Sign-extended (else zero-extended).
        signed: bool,
        /// 64-bit destination.
        wide: bool,
    },
    /// `dst = addr` (`lea`).
    Lea {
        /// Destination.
        dst: Reg,
        /// The address computed (never `gs`-relative).
        addr: Addr,
        /// 64-bit destination.
        wide: bool,
    },
    /// `dst = dst op src`.
    Alu {
        /// Destination and first operand.
        dst: Reg,
        /// The operation.
        op: Alu,
        /// Second operand (a shift count is an [`Src::Imm`]).
        src: Src,
        /// 64-bit operation.
        wide: bool,
    },
    /// `dst = imm` (already extended to 64 bits as the instruction does).
    Imm {
        /// Destination.
        dst: Reg,
        /// The value.
        val: u64,
    },
    /// `dst` is written with a value not computed: it is unknown from here on.
    Clobber(Reg),
    /// Memory at `addr` is written (at most [`STORE_SIZE`] bytes): a later load that
    /// overlaps it, or any load when `addr` is unknown, is not computed.
    Store(Addr),
}

/// The most bytes one store of a program writes (no instruction it understands writes
/// more than a general-purpose register).
pub const STORE_SIZE: u64 = 8;

/// Where the call or jump at the end of the run goes: a register's value, or the word
/// at an address (`call *0x10(%rax)`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Final {
    /// Through a register (`call *%rax`, or a retpoline thunk of that register).
    Reg(Reg),
    /// Through memory.
    Mem(Addr),
}

/// The effects of a pre-site run on the registers, and the target they lead to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Program {
    ops: [Op; MAX_OPS],
    n: u8,
    fin: Final,
}

impl Program {
    /// The operations, in order.
    pub fn ops(&self) -> &[Op] {
        self.ops.get(..usize::from(self.n)).unwrap_or(&[])
    }

    /// What the call goes through.
    pub fn final_target(&self) -> Final {
        self.fin
    }

    /// The address the call will go to when the run starts with machine state `m`, or
    /// `None` when it depends on a value the program does not compute or a read fails.
    pub fn target<M: Machine>(&self, m: &M) -> Option<u64> {
        self.run(m).target
    }

    /// The registers at the end of the run (at the call site) when it starts with
    /// machine state `m`, and the target. A register is known when the run leaves it
    /// alone or computes it from known values (and loads that do not fail); the others
    /// are unknown, as is a target that depends on one.
    pub fn run<M: Machine>(&self, m: &M) -> End {
        self.run_from(m, 0xffff)
    }

    /// The target when it depends on no register nor per-CPU value, only on constants and
    /// memory at fixed addresses: a call through a global function pointer (`call
    /// *smp_ops+0x28(%rip)`, `mov apic(%rip),%rax; call *0x30(%rax)`), whose target can
    /// be read before any task makes the call (when its function is armed). `None` when
    /// it needs a register, `gs`, or a read that fails. `m`'s registers are not read.
    pub fn static_target<M: Machine>(&self, m: &M) -> Option<u64> {
        self.run_from(&Fixed(m), 0).target
    }

    /// Where the call's target is read from, as found at the call site from the
    /// registers there ([`SiteSlot::at`]): the call's own memory operand (`call
    /// *0x10(%rax)`), or, for a call through a register, the address of the run's last
    /// write of it when that is an 8-byte load (`mov 0x48(%rbx),%rax; mov %r12,%rdi;
    /// call *%rax`), or of the register it was copied from (`mov %rdx,%rax`), and no
    /// later operation writes a register the address is made of. A load whose base the
    /// run wrote after it, or that wrote its own (`p->sched_class->select_task_rq`:
    /// `mov 0x90(%rbx),%rax; mov 0x48(%rax),%rax`), is followed one level further: its
    /// base was loaded from an address the site's registers give. Then the slot of the
    /// ops table the call goes through can be found at the site, even when the load lies
    /// before the pre-site's run ([`Program::target_slot`] sees only that run's loads).
    /// `None` otherwise (and for `gs`-relative addresses).
    pub fn site_slot(&self) -> Option<SiteSlot> {
        let r = match self.fin {
            Final::Mem(a) => {
                return (!a.gs).then_some(SiteSlot {
                    addr: a,
                    then: None,
                })
            }
            Final::Reg(r) => r,
        };
        let ops = self.ops();
        let bit = |x: Reg| 1u16 << (x & 15);
        let parts = |a: &Addr| a.base.map_or(0, bit) | a.index.map_or(0, |(i, _)| bit(i));
        // The last 8-byte load into `r` (through 64-bit copies) before `ops[..end]`, with
        // the registers written from it on.
        let last_load = |mut r: Reg, end: usize, mut written: u16| -> Option<(usize, Addr, u16)> {
            let mut i = end;
            loop {
                i = i.checked_sub(1)?;
                let op = *ops.get(i)?;
                let dst = match op {
                    Op::Mov { dst, .. }
                    | Op::Load { dst, .. }
                    | Op::Lea { dst, .. }
                    | Op::Alu { dst, .. }
                    | Op::Imm { dst, .. }
                    | Op::Clobber(dst) => dst,
                    Op::Store(_) => continue,
                };
                written |= bit(dst);
                if dst == r {
                    match op {
                        Op::Load { addr, size: 8, .. } if !addr.gs => {
                            return Some((i, addr, written))
                        }
                        Op::Mov { src, bits: 64, .. } => r = src,
                        _ => return None,
                    }
                }
            }
        };
        let (i, addr, written) = last_load(r, ops.len(), 0)?;
        if parts(&addr) & written == 0 {
            return Some(SiteSlot { addr, then: None });
        }
        // One level more: `addr` is `base + disp`, the base loaded before.
        let base = addr.base.filter(|_| addr.index.is_none())?;
        let (_, first, written) = last_load(base, i, written)?;
        (parts(&first) & written == 0).then_some(SiteSlot {
            addr: first,
            then: Some(addr.disp),
        })
    }

    /// [`Program::run`] with only the registers of `known` (a bit per register) known at
    /// the start.
    fn run_from<M: Machine>(&self, m: &M, known: u16) -> End {
        let mut regs = [0u64; 16];
        if known != 0 {
            for (r, v) in (0u8..).zip(regs.iter_mut()) {
                *v = m.reg(r);
            }
        }
        let mut known: u16 = known;
        let get = |regs: &[u64; 16], known: u16, r: Reg| -> Option<u64> {
            if known & (1u16 << (r & 15)) == 0 {
                return None;
            }
            regs.get(usize::from(r)).copied()
        };
        let addr = |regs: &[u64; 16], known: u16, a: &Addr| -> Option<u64> {
            let mut v = a.disp;
            if let Some(b) = a.base {
                v = v.wrapping_add(get(regs, known, b)?);
            }
            if let Some((i, s)) = a.index {
                v = v.wrapping_add(get(regs, known, i)?.wrapping_mul(u64::from(s)));
            }
            if a.gs {
                v = v.wrapping_add(m.gs_base()?);
            }
            Some(v)
        };
        let width = |v: u64, wide: bool| if wide { v } else { v & 0xffff_ffff };
        // What the run wrote before: a load that may read it is not computed.
        let mut stores = [0u64; MAX_OPS];
        let mut ns = 0usize;
        let mut store_unknown = false;
        let clear = |stores: &[u64], unknown: bool, a: u64, size: u8| -> Option<u64> {
            let end = a.checked_add(u64::from(size))?;
            let hit = stores
                .iter()
                .any(|&s| s < end && a < s.saturating_add(STORE_SIZE));
            (!unknown && !hit).then_some(a)
        };
        for op in self.ops() {
            let done = stores.get(..ns).unwrap_or(&[]);
            // The destination and its value (`None`: not computed, unknown from here).
            let (dst, val) = match *op {
                Op::Mov {
                    dst,
                    src,
                    bits,
                    signed,
                    wide,
                } => (
                    dst,
                    get(&regs, known, src).map(|v| width(extend(v, bits, signed), wide)),
                ),
                Op::Load {
                    dst,
                    addr: a,
                    size,
                    signed,
                    wide,
                } => (
                    dst,
                    addr(&regs, known, &a)
                        .and_then(|at| clear(done, store_unknown, at, size))
                        .and_then(|at| m.load(at, size))
                        .map(|v| width(extend(v, size.wrapping_mul(8), signed), wide)),
                ),
                Op::Lea { dst, addr: a, wide } => {
                    (dst, addr(&regs, known, &a).map(|v| width(v, wide)))
                }
                Op::Alu { dst, op, src, wide } => {
                    let b = match src {
                        Src::Reg(r) => get(&regs, known, r),
                        Src::Imm(i) => Some(i),
                    };
                    let a = get(&regs, known, dst);
                    (dst, a.zip(b).map(|(a, b)| alu(op, a, b, wide)))
                }
                Op::Imm { dst, val } => (dst, Some(val)),
                Op::Clobber(r) => (r, None),
                Op::Store(a) => {
                    match (addr(&regs, known, &a), stores.get_mut(ns)) {
                        (Some(at), Some(slot)) => {
                            *slot = at;
                            ns = ns.saturating_add(1);
                        }
                        _ => store_unknown = true,
                    }
                    continue;
                }
            };
            match val {
                Some(v) => {
                    if let Some(slot) = regs.get_mut(usize::from(dst)) {
                        *slot = v;
                    }
                    known |= 1u16 << (dst & 15);
                }
                None => known &= !(1u16 << (dst & 15)),
            }
        }
        let done = stores.get(..ns).unwrap_or(&[]);
        let target = match self.fin {
            Final::Reg(r) => get(&regs, known, r),
            Final::Mem(a) => addr(&regs, known, &a)
                .and_then(|at| clear(done, store_unknown, at, 8))
                .and_then(|at| m.load(at, 8)),
        };
        End {
            regs,
            known,
            target,
        }
    }
}

impl Program {
    /// Where the call's target was read from: the address of the last 8-byte load of the
    /// run (the call's own memory operand, `call *0x10(%rax)`, included) that gave the
    /// target, when the run starts with machine state `m`, with the target. That is the
    /// slot of the ops table the call goes through (`p->sched_class->enqueue_task`);
    /// [`table_neighbours`] finds the table's other methods around it. `None` when the
    /// target is not known, or not a value loaded by the run (a register's value at the
    /// pre-site).
    pub fn target_slot<M: Machine>(&self, m: &M) -> Option<(u64, u64)> {
        let target = self.run(m).target?;
        // Run again, keeping the loads that give the target: the same run on the same
        // state (a handler's registers, memory that does not change under it).
        let rec = Recorder {
            m,
            want: target,
            slot: Cell::new(None),
        };
        (self.run(&rec).target == Some(target))
            .then(|| rec.slot.get())
            .flatten()
            .map(|slot| (target, slot))
    }
}

/// A [`Machine`] without per-CPU data ([`Program::static_target`]).
struct Fixed<'a, M: Machine>(&'a M);

impl<M: Machine> Machine for Fixed<'_, M> {
    fn reg(&self, _: Reg) -> u64 {
        0
    }

    fn load(&self, addr: u64, size: u8) -> Option<u64> {
        self.0.load(addr, size)
    }

    fn gs_base(&self) -> Option<u64> {
        None
    }
}

/// A [`Machine`] that keeps the address of the last 8-byte load made through it that gave
/// `want`.
struct Recorder<'a, M: Machine> {
    m: &'a M,
    want: u64,
    slot: Cell<Option<u64>>,
}

impl<M: Machine> Machine for Recorder<'_, M> {
    fn reg(&self, r: Reg) -> u64 {
        self.m.reg(r)
    }

    fn load(&self, addr: u64, size: u8) -> Option<u64> {
        let v = self.m.load(addr, size)?;
        if size == 8 && v == self.want {
            self.slot.set(Some(addr));
        }
        Some(v)
    }

    fn gs_base(&self) -> Option<u64> {
        self.m.gs_base()
    }
}

/// How far [`table_neighbours`] looks on each side of a slot, in words.
pub const TABLE_WORDS: u64 = 48;

/// The other methods of the ops table that holds a function pointer at `slot`: the words
/// of `table` (the object around the slot, as kallsyms knows it: `fair_sched_class`,
/// `proc_misc_dentry_ops`), at most [`TABLE_WORDS`] on each side of the slot, that
/// `is_func` says are function starts, the nearest first, alternating sides. Other words
/// (methods left out, a table's other fields: `owner`, a flag, a name) are passed over.
/// Tables lie next to each other in memory (the scheduling classes do, with nothing
/// between them), so the object's bounds are what keeps the scan to one. Fills `out`
/// and returns how many it holds (0 if `slot` is not in `table`).
pub fn table_neighbours(
    slot: u64,
    table: core::ops::Range<u64>,
    mut read: impl FnMut(u64) -> Option<u64>,
    mut is_func: impl FnMut(u64) -> bool,
    out: &mut [u64],
) -> usize {
    if !table.contains(&slot) {
        return 0;
    }
    let mut n = 0usize;
    for i in 1..=TABLE_WORDS {
        let off = i.wrapping_mul(8);
        let up = slot
            .checked_add(off)
            .filter(|a| a.checked_add(8).is_some_and(|e| e <= table.end));
        let down = slot.checked_sub(off).filter(|a| *a >= table.start);
        if up.is_none() && down.is_none() {
            break;
        }
        for at in [up, down].into_iter().flatten() {
            let Some(f) = read(at).filter(|&f| f != 0 && is_func(f)) else {
                continue;
            };
            if out.get(..n).is_some_and(|o| o.contains(&f)) {
                continue;
            }
            match out.get_mut(n) {
                Some(o) => {
                    *o = f;
                    n = n.saturating_add(1);
                }
                None => return n,
            }
        }
    }
    n
}

/// Where an indirect call's target is read from, as found at the call site
/// ([`Program::site_slot`]): `addr` on the site's registers, then, if `then`, the word
/// there plus `then` (a table reached through a pointer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SiteSlot {
    /// The address, on the registers at the site.
    pub addr: Addr,
    /// The displacement added to the word at `addr`, if the slot is one load further.
    pub then: Option<u64>,
}

impl SiteSlot {
    /// The slot's address, from the value of each register at the site (`reg`) and
    /// memory (`load`, 8-byte words). `None` if a read fails.
    pub fn at(
        &self,
        reg: impl Fn(Reg) -> Option<u64>,
        load: impl Fn(u64) -> Option<u64>,
    ) -> Option<u64> {
        let mut v = self.addr.disp;
        if let Some(b) = self.addr.base {
            v = v.wrapping_add(reg(b)?);
        }
        if let Some((i, sc)) = self.addr.index {
            v = v.wrapping_add(reg(i)?.wrapping_mul(u64::from(sc)));
        }
        match self.then {
            Some(d) => Some(load(v)?.wrapping_add(d)),
            None => Some(v),
        }
    }
}

/// The state at the end of a pre-site run ([`Program::run`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct End {
    regs: [u64; 16],
    known: u16,
    /// Where the call goes, if known.
    pub target: Option<u64>,
}

impl End {
    /// Register `r`'s value at the call site, if known.
    pub fn reg(&self, r: Reg) -> Option<u64> {
        if self.known & (1u16 << (r & 15)) == 0 {
            return None;
        }
        self.regs.get(usize::from(r)).copied()
    }
}

/// The low `bits` of `v`, zero- or sign-extended to 64 bits.
fn extend(v: u64, bits: u8, signed: bool) -> u64 {
    if bits >= 64 || bits == 0 {
        return v;
    }
    let shift = u32::from(64u8.saturating_sub(bits));
    if signed {
        (((v << shift) as i64) >> shift) as u64
    } else {
        (v << shift) >> shift
    }
}

/// `a op b` as an operation of 64 (`wide`) or 32 bits (zero-extended).
fn alu(op: Alu, a: u64, b: u64, wide: bool) -> u64 {
    let (mask, cnt_mask) = if wide {
        (u64::MAX, 63u64)
    } else {
        (0xffff_ffffu64, 31u64)
    };
    let a = a & mask;
    let cnt = (b & cnt_mask) as u32;
    let r = match op {
        Alu::Add => a.wrapping_add(b),
        Alu::Sub => a.wrapping_sub(b),
        Alu::And => a & b,
        Alu::Or => a | b,
        Alu::Xor => a ^ b,
        Alu::Shl => a.wrapping_shl(cnt),
        Alu::Shr => a.wrapping_shr(cnt),
        Alu::Sar => {
            if wide {
                ((a as i64).wrapping_shr(cnt)) as u64
            } else {
                ((a as u32 as i32).wrapping_shr(cnt)) as u32 as u64
            }
        }
    };
    r & mask
}

/// A parsed ModRM operand.
enum Rm {
    Reg(Reg),
    Mem(Addr),
}

/// Reads instructions of a run.
struct Cur<'a> {
    b: &'a [u8],
    pos: usize,
}

impl Cur<'_> {
    fn byte(&mut self) -> Option<u8> {
        let v = *self.b.get(self.pos)?;
        self.pos = self.pos.checked_add(1)?;
        Some(v)
    }

    fn imm(&mut self, size: u8) -> Option<u64> {
        let mut v = 0u64;
        for i in 0..size {
            v |= u64::from(self.byte()?) << (u32::from(i) * 8);
        }
        Some(extend(v, size.wrapping_mul(8), true))
    }

    /// A ModRM operand (and its SIB and displacement): the reg field (with `REX.R`) and
    /// the r/m operand. `None` for an encoding not handled (32-bit addressing).
    fn modrm(&mut self, rex: u8, gs: bool) -> Option<(Reg, Rm, u8)> {
        let m = self.byte()?;
        let md = m >> 6;
        let reg = ((m >> 3) & 7) | ((rex & 4) << 1);
        let rm = m & 7;
        if md == 3 {
            return Some((reg, Rm::Reg(rm | ((rex & 1) << 3)), md));
        }
        let mut a = Addr {
            base: None,
            index: None,
            disp: 0,
            gs,
        };
        let mut rip = false;
        if rm == 4 {
            let sib = self.byte()?;
            let scale = 1u8 << (sib >> 6);
            let index = ((sib >> 3) & 7) | ((rex & 2) << 2);
            let base = sib & 7;
            if index != 4 {
                a.index = Some((index, scale));
            }
            if base == 5 && md == 0 {
                a.disp = self.imm(4)?;
            } else {
                a.base = Some(base | ((rex & 1) << 3));
            }
        } else if rm == 5 && md == 0 {
            rip = true;
            a.disp = self.imm(4)?;
        } else {
            a.base = Some(rm | ((rex & 1) << 3));
        }
        match md {
            1 => a.disp = a.disp.wrapping_add(self.imm(1)?),
            2 => a.disp = a.disp.wrapping_add(self.imm(4)?),
            _ => {}
        }
        // A rip-relative displacement is resolved by the caller, which knows where the
        // instruction ends (the immediate comes after the displacement).
        if rip {
            a.base = Some(RIP);
        }
        Some((reg, Rm::Mem(a), md))
    }
}

/// The stack pointer's register number.
const RSP: Reg = 4;

/// A placeholder base for rip-relative addressing until the instruction's end is known.
const RIP: Reg = 16;

/// What one instruction does, as [`compile`] sees it.
enum Effect {
    /// Nothing to a general-purpose register or memory.
    None,
    /// An operation on a register.
    Op(Op),
    /// A read of memory into a register (a [`Op::Load`]).
    Load(Op),
    /// A write to memory at this address (nothing to registers).
    Store(Addr),
    /// `pop reg`: a load from the stack, then the stack pointer moves up.
    Pop(Reg),
    /// `push`: a store to the stack, which moves down.
    Push,
}

/// The effect of the instruction at the start of `bytes` (at address `ip`), with its
/// length; `None` when it is not understood.
fn effect(bytes: &[u8], ip: u64) -> Option<(Effect, usize)> {
    let mut c = Cur { b: bytes, pos: 0 };
    let mut opsize = false;
    let mut gs = false;
    let mut rex = 0u8;
    let op = loop {
        let b = c.byte()?;
        match b {
            0x66 => opsize = true,
            0x2e | 0x3e | 0x26 | 0x36 => {}
            0x65 => gs = true,
            // fs, address size, lock, rep: not handled.
            0x64 | 0x67 | 0xf0 | 0xf2 | 0xf3 => return None,
            0x40..=0x4f => {
                rex = b;
                let op = c.byte()?;
                if (0x40..=0x4f).contains(&op) {
                    return None;
                }
                break op;
            }
            _ => break b,
        }
        if c.pos > 14 {
            return None;
        }
    };
    let w = rex & 8 != 0;
    // The operand size of a non-byte instruction: 8, 4 or 2.
    let osize: u8 = if w {
        8
    } else if opsize {
        2
    } else {
        4
    };
    let wide = osize == 8;
    // A byte register without REX: 4..=7 are ah, ch, dh, bh (bits 8..15 of 0..=3).
    let byte_reg = |r: Reg| {
        if rex == 0 && (4..8).contains(&r) {
            r & 3
        } else {
            r
        }
    };
    let fix = |a: Addr, end: usize| -> Addr {
        if a.base == Some(RIP) {
            Addr {
                base: None,
                disp: ip.wrapping_add(end as u64).wrapping_add(a.disp),
                ..a
            }
        } else {
            a
        }
    };
    // A register write of `osize`: 8 and 4 are computed, 2 (and bytes) clobber.
    let eff = match op {
        // mov r/m, r; mov r, r/m (and byte forms).
        0x88..=0x8b => {
            let (reg, rm, _) = c.modrm(rex, gs)?;
            let byte = op & 1 == 0;
            let to_rm = op & 2 == 0;
            match (rm, to_rm) {
                (Rm::Mem(a), true) => Effect::Store(fix(a, c.pos)),
                (Rm::Mem(a), false) => {
                    if byte || osize == 2 {
                        Effect::Op(Op::Clobber(if byte { byte_reg(reg) } else { reg }))
                    } else {
                        Effect::Load(Op::Load {
                            dst: reg,
                            addr: fix(a, c.pos),
                            size: osize,
                            signed: false,
                            wide,
                        })
                    }
                }
                (Rm::Reg(r), _) => {
                    let (dst, src) = if to_rm { (r, reg) } else { (reg, r) };
                    if byte || osize == 2 {
                        Effect::Op(Op::Clobber(if byte { byte_reg(dst) } else { dst }))
                    } else {
                        Effect::Op(Op::Mov {
                            dst,
                            src,
                            bits: osize.wrapping_mul(8),
                            signed: false,
                            wide,
                        })
                    }
                }
            }
        }
        0x8d => {
            let (reg, rm, _) = c.modrm(rex, false)?;
            let Rm::Mem(a) = rm else { return None };
            if gs {
                return None;
            }
            if osize == 2 {
                Effect::Op(Op::Clobber(reg))
            } else {
                Effect::Op(Op::Lea {
                    dst: reg,
                    addr: fix(a, c.pos),
                    wide,
                })
            }
        }
        // mov r, imm
        0xb8..=0xbf => {
            let dst = (op & 7) | ((rex & 1) << 3);
            match osize {
                8 => Effect::Op(Op::Imm {
                    dst,
                    val: c.imm(8)?,
                }),
                4 => Effect::Op(Op::Imm {
                    dst,
                    val: c.imm(4)? & 0xffff_ffff,
                }),
                _ => {
                    c.imm(2)?;
                    Effect::Op(Op::Clobber(dst))
                }
            }
        }
        0xb0..=0xb7 => {
            c.imm(1)?;
            let r = (op & 7) | ((rex & 1) << 3);
            Effect::Op(Op::Clobber(byte_reg(r)))
        }
        // mov r/m, imm
        0xc6 | 0xc7 => {
            let (reg, rm, _) = c.modrm(rex, gs)?;
            if reg & 7 != 0 {
                return None;
            }
            let byte = op == 0xc6;
            let isz = if byte {
                1
            } else if osize == 2 {
                2
            } else {
                4
            };
            let imm = c.imm(isz)?;
            match rm {
                Rm::Mem(a) => Effect::Store(fix(a, c.pos)),
                Rm::Reg(r) if byte || osize == 2 => {
                    Effect::Op(Op::Clobber(if byte { byte_reg(r) } else { r }))
                }
                Rm::Reg(r) => Effect::Op(Op::Imm {
                    dst: r,
                    val: if wide { imm } else { imm & 0xffff_ffff },
                }),
            }
        }
        // The ALU group: add, or, adc, sbb, and, sub, xor, cmp.
        0x00..=0x3f if op & 7 <= 5 => {
            let kind = (op >> 3) & 7;
            let form = op & 7;
            let alu_op = match kind {
                0 => Some(Alu::Add),
                1 => Some(Alu::Or),
                4 => Some(Alu::And),
                5 => Some(Alu::Sub),
                6 => Some(Alu::Xor),
                // adc, sbb: need the carry flag; cmp: no write.
                _ => None,
            };
            let cmp = kind == 7;
            match form {
                4 => {
                    c.imm(1)?;
                    if cmp {
                        Effect::None
                    } else {
                        Effect::Op(Op::Clobber(0))
                    }
                }
                5 => {
                    let imm = c.imm(if osize == 2 { 2 } else { 4 })?;
                    match (cmp, alu_op) {
                        (true, _) => Effect::None,
                        (false, Some(o)) if osize != 2 => Effect::Op(Op::Alu {
                            dst: 0,
                            op: o,
                            src: Src::Imm(imm),
                            wide,
                        }),
                        _ => Effect::Op(Op::Clobber(0)),
                    }
                }
                _ => {
                    let (reg, rm, _) = c.modrm(rex, gs)?;
                    let byte = form & 1 == 0;
                    let to_rm = form & 2 == 0;
                    match (rm, to_rm) {
                        _ if cmp => Effect::None,
                        (Rm::Mem(a), true) => Effect::Store(fix(a, c.pos)),
                        // An operand from memory: the result is not computed.
                        (Rm::Mem(_), false) => {
                            Effect::Op(Op::Clobber(if byte { byte_reg(reg) } else { reg }))
                        }
                        (Rm::Reg(r), _) => {
                            let (dst, src) = if to_rm { (r, reg) } else { (reg, r) };
                            match alu_op {
                                // `xor %eax,%eax` and `sub`: zero whatever the value was.
                                Some(o) if !byte && osize != 2 => Effect::Op(Op::Alu {
                                    dst,
                                    op: o,
                                    src: Src::Reg(src),
                                    wide,
                                }),
                                _ => {
                                    Effect::Op(Op::Clobber(if byte { byte_reg(dst) } else { dst }))
                                }
                            }
                        }
                    }
                }
            }
        }
        // ALU with an immediate: 80 (byte), 81 (imm32/16), 83 (imm8 sign-extended).
        0x80 | 0x81 | 0x83 => {
            let (reg, rm, _) = c.modrm(rex, gs)?;
            let isz = match op {
                0x81 if osize == 2 => 2,
                0x81 => 4,
                _ => 1,
            };
            let imm = c.imm(isz)?;
            let kind = reg & 7;
            let alu_op = match kind {
                0 => Some(Alu::Add),
                1 => Some(Alu::Or),
                4 => Some(Alu::And),
                5 => Some(Alu::Sub),
                6 => Some(Alu::Xor),
                _ => None,
            };
            match rm {
                _ if kind == 7 => Effect::None,
                Rm::Mem(a) => Effect::Store(fix(a, c.pos)),
                Rm::Reg(r) => match alu_op {
                    Some(o) if op != 0x80 && osize != 2 => Effect::Op(Op::Alu {
                        dst: r,
                        op: o,
                        src: Src::Imm(imm),
                        wide,
                    }),
                    _ => Effect::Op(Op::Clobber(if op == 0x80 { byte_reg(r) } else { r })),
                },
            }
        }
        // Shifts and rotates: c0/c1 by imm8, d0/d1 by 1, d2/d3 by cl.
        0xc0 | 0xc1 | 0xd0 | 0xd1 | 0xd2 | 0xd3 => {
            let (reg, rm, _) = c.modrm(rex, gs)?;
            let count = match op {
                0xc0 | 0xc1 => Some(c.imm(1)? & 0xff),
                0xd0 | 0xd1 => Some(1),
                _ => None,
            };
            let byte = op & 1 == 0;
            let shift = match reg & 7 {
                4 | 6 => Some(Alu::Shl),
                5 => Some(Alu::Shr),
                7 => Some(Alu::Sar),
                _ => None,
            };
            match rm {
                Rm::Mem(a) => Effect::Store(fix(a, c.pos)),
                Rm::Reg(r) => match (shift, count) {
                    (Some(s), Some(n)) if !byte && osize != 2 => Effect::Op(Op::Alu {
                        dst: r,
                        op: s,
                        src: Src::Imm(n),
                        wide,
                    }),
                    _ => Effect::Op(Op::Clobber(if byte { byte_reg(r) } else { r })),
                },
            }
        }
        // test r/m, r
        0x84 | 0x85 => {
            c.modrm(rex, gs)?;
            Effect::None
        }
        0xa8 => {
            c.imm(1)?;
            Effect::None
        }
        0xa9 => {
            c.imm(if osize == 2 { 2 } else { 4 })?;
            Effect::None
        }
        // test r/m, imm (f6/f7 /0); not, neg (/2, /3).
        0xf6 | 0xf7 => {
            let (reg, rm, _) = c.modrm(rex, gs)?;
            let byte = op == 0xf6;
            match reg & 7 {
                0 => {
                    c.imm(if byte {
                        1
                    } else if osize == 2 {
                        2
                    } else {
                        4
                    })?;
                    Effect::None
                }
                2 | 3 => match rm {
                    Rm::Mem(a) => Effect::Store(fix(a, c.pos)),
                    Rm::Reg(r) => Effect::Op(Op::Clobber(if byte { byte_reg(r) } else { r })),
                },
                _ => return None,
            }
        }
        // inc, dec.
        0xfe | 0xff => {
            let (reg, rm, _) = c.modrm(rex, gs)?;
            let byte = op == 0xfe;
            let o = match reg & 7 {
                0 => Alu::Add,
                1 => Alu::Sub,
                _ => return None,
            };
            match rm {
                Rm::Mem(a) => Effect::Store(fix(a, c.pos)),
                Rm::Reg(r) if byte || osize == 2 => {
                    Effect::Op(Op::Clobber(if byte { byte_reg(r) } else { r }))
                }
                Rm::Reg(r) => Effect::Op(Op::Alu {
                    dst: r,
                    op: o,
                    src: Src::Imm(1),
                    wide,
                }),
            }
        }
        // movsxd
        0x63 => {
            let (reg, rm, _) = c.modrm(rex, gs)?;
            if !wide {
                return None;
            }
            match rm {
                Rm::Reg(r) => Effect::Op(Op::Mov {
                    dst: reg,
                    src: r,
                    bits: 32,
                    signed: true,
                    wide: true,
                }),
                Rm::Mem(a) => Effect::Load(Op::Load {
                    dst: reg,
                    addr: fix(a, c.pos),
                    size: 4,
                    signed: true,
                    wide: true,
                }),
            }
        }
        // imul r, r/m, imm
        0x69 | 0x6b => {
            let (reg, _, _) = c.modrm(rex, gs)?;
            c.imm(if op == 0x6b {
                1
            } else if osize == 2 {
                2
            } else {
                4
            })?;
            Effect::Op(Op::Clobber(reg))
        }
        // cdqe/cwde, cqo/cdq
        0x98 => Effect::Op(Op::Clobber(0)),
        0x99 => Effect::Op(Op::Clobber(2)),
        0x90 if rex & 1 == 0 => Effect::None,
        0x58..=0x5f if !opsize => Effect::Pop((op & 7) | ((rex & 1) << 3)),
        0x50..=0x57 if !opsize => Effect::Push,
        0x0f => {
            let op2 = c.byte()?;
            match op2 {
                // nop r/m, prefetch
                0x1f | 0x18 | 0x0d => {
                    c.modrm(rex, gs)?;
                    Effect::None
                }
                // cmovcc
                0x40..=0x4f => {
                    let (reg, _, _) = c.modrm(rex, gs)?;
                    Effect::Op(Op::Clobber(reg))
                }
                // setcc
                0x90..=0x9f => {
                    let (_, rm, _) = c.modrm(rex, gs)?;
                    match rm {
                        Rm::Mem(a) => Effect::Store(fix(a, c.pos)),
                        Rm::Reg(r) => Effect::Op(Op::Clobber(byte_reg(r))),
                    }
                }
                0xaf => {
                    let (reg, _, _) = c.modrm(rex, gs)?;
                    Effect::Op(Op::Clobber(reg))
                }
                // movzx, movsx
                0xb6 | 0xb7 | 0xbe | 0xbf => {
                    let (reg, rm, _) = c.modrm(rex, gs)?;
                    let bits: u8 = if op2 & 1 == 0 { 8 } else { 16 };
                    let signed = op2 >= 0xbe;
                    if osize == 2 {
                        Effect::Op(Op::Clobber(reg))
                    } else {
                        match rm {
                            // A high byte register (ah..bh) as the source: not handled.
                            Rm::Reg(r) if bits == 8 && rex == 0 && (4..8).contains(&r) => {
                                return None
                            }
                            Rm::Reg(r) => Effect::Op(Op::Mov {
                                dst: reg,
                                src: r,
                                bits,
                                signed,
                                wide,
                            }),
                            Rm::Mem(a) => Effect::Load(Op::Load {
                                dst: reg,
                                addr: fix(a, c.pos),
                                size: bits / 8,
                                signed,
                                wide,
                            }),
                        }
                    }
                }
                _ => return None,
            }
        }
        _ => return None,
    };
    Some((eff, c.pos))
}

/// The program of the run `run` (the bytes from the pre-site to the call site, at
/// address `ip`) ending in a call or jump through `fin`. `None` when an instruction is
/// not understood (see the module documentation), or when the run ends off an
/// instruction boundary.
pub fn compile(run: &[u8], ip: u64, fin: Final) -> Option<Program> {
    let mut ops = [Op::Clobber(0); MAX_OPS];
    let mut n = 0usize;
    let mut off = 0usize;
    let rsp_move = |op: Alu| Op::Alu {
        dst: RSP,
        op,
        src: Src::Imm(8),
        wide: true,
    };
    while off < run.len() {
        let (eff, len) = effect(run.get(off..)?, ip.wrapping_add(off as u64))?;
        off = off.checked_add(len)?;
        let op = match eff {
            Effect::None => continue,
            Effect::Store(a) => Op::Store(a),
            Effect::Push => {
                *ops.get_mut(n)? = Op::Store(Addr {
                    base: Some(RSP),
                    index: None,
                    disp: 8u64.wrapping_neg(),
                    gs: false,
                });
                n = n.checked_add(1)?;
                rsp_move(Alu::Sub)
            }
            Effect::Load(op) => op,
            Effect::Pop(r) => {
                *ops.get_mut(n)? = Op::Load {
                    dst: r,
                    addr: Addr {
                        base: Some(RSP),
                        index: None,
                        disp: 0,
                        gs: false,
                    },
                    size: 8,
                    signed: false,
                    wide: true,
                };
                n = n.checked_add(1)?;
                // (`pop %rsp` loads the stack pointer: no move after it.)
                if r == RSP {
                    continue;
                }
                rsp_move(Alu::Add)
            }
            Effect::Op(op) => op,
        };
        let dst = match op {
            Op::Mov { dst, .. }
            | Op::Load { dst, .. }
            | Op::Lea { dst, .. }
            | Op::Alu { dst, .. }
            | Op::Imm { dst, .. }
            | Op::Clobber(dst) => dst,
            Op::Store(_) => 0,
        };
        if dst > 15 {
            return None;
        }
        *ops.get_mut(n)? = op;
        n = n.checked_add(1)?;
    }
    if off != run.len() {
        return None;
    }
    Some(Program {
        ops,
        n: n as u8,
        fin,
    })
}

#[cfg(test)]
#[allow(
    clippy::arithmetic_side_effects,
    clippy::indexing_slicing,
    clippy::unwrap_used
)]
mod tests {
    use super::*;

    struct M {
        regs: [u64; 16],
    }

    impl Machine for M {
        fn reg(&self, r: Reg) -> u64 {
            self.regs[usize::from(r)]
        }
        fn load(&self, addr: u64, size: u8) -> Option<u64> {
            // Memory holds its own address, shifted, for every byte read.
            let v = addr.wrapping_mul(0x9e37_79b9_7f4a_7c15);
            Some(if size == 8 {
                v
            } else {
                v & ((1u64 << (size * 8)) - 1)
            })
        }
        fn gs_base(&self) -> Option<u64> {
            Some(0x1000_0000)
        }
    }

    fn machine() -> M {
        let mut regs = [0u64; 16];
        for (i, r) in regs.iter_mut().enumerate() {
            *r = 0x1111 * (i as u64 + 1);
        }
        M { regs }
    }

    fn mem(m: &M, a: u64) -> u64 {
        m.load(a, 8).unwrap()
    }

    #[test]
    fn load_then_thunk() {
        // mov 0x10(%rax),%r11 ; (call __x86_indirect_thunk_r11)
        let p = compile(&[0x4c, 0x8b, 0x58, 0x10], 0x1000, Final::Reg(11)).unwrap();
        let m = machine();
        assert_eq!(p.target(&m), Some(mem(&m, 0x1111 + 0x10)));
    }

    #[test]
    fn mov_then_call_mem() {
        // mov %rdi,%rbx ; mov %rsi,%rax ; (call *0x8(%rbx))
        let p = compile(
            &[0x48, 0x89, 0xfb, 0x48, 0x89, 0xf0],
            0,
            Final::Mem(Addr {
                base: Some(3),
                index: None,
                disp: 8,
                gs: false,
            }),
        )
        .unwrap();
        let m = machine();
        assert_eq!(p.target(&m), Some(mem(&m, 0x8888 + 8)));
    }

    #[test]
    fn rip_relative_and_32_bit() {
        // mov 0x100(%rip),%rax at 0x2000 (7 bytes) ; mov %eax,%ecx
        let p = compile(
            &[0x48, 0x8b, 0x05, 0x00, 0x01, 0x00, 0x00, 0x89, 0xc1],
            0x2000,
            Final::Reg(1),
        )
        .unwrap();
        let m = machine();
        assert_eq!(p.target(&m), Some(mem(&m, 0x2007 + 0x100) & 0xffff_ffff));
    }

    #[test]
    fn target_slot_of_loads() {
        let m = machine();
        // mov 0x10(%rax),%r11 ; (call __x86_indirect_thunk_r11): the slot is 0x10(%rax).
        let p = compile(&[0x4c, 0x8b, 0x58, 0x10], 0x1000, Final::Reg(11)).unwrap();
        let t = mem(&m, 0x1111 + 0x10);
        assert_eq!(p.target_slot(&m), Some((t, 0x1111 + 0x10)));
        // mov %rdi,%rbx ; (call *0x8(%rbx)): the call's own operand.
        let p = compile(
            &[0x48, 0x89, 0xfb],
            0,
            Final::Mem(Addr {
                base: Some(3),
                index: None,
                disp: 8,
                gs: false,
            }),
        )
        .unwrap();
        assert_eq!(p.target_slot(&m), Some((mem(&m, 0x8888 + 8), 0x8888 + 8)));
        // mov 0x38(%rdi),%rax ; mov 0x10(%rax),%rax: the last load, not the object's.
        let p = compile(
            &[0x48, 0x8b, 0x47, 0x38, 0x48, 0x8b, 0x40, 0x10],
            0,
            Final::Reg(0),
        )
        .unwrap();
        let obj = mem(&m, 0x8888 + 0x38);
        let slot = obj.wrapping_add(0x10);
        assert_eq!(p.target_slot(&m), Some((mem(&m, slot), slot)));
        // lea 0x10(%rax),%r11: computed, not loaded.
        let p = compile(&[0x4c, 0x8d, 0x58, 0x10], 0, Final::Reg(11)).unwrap();
        assert_eq!(p.target(&m), Some(0x1111 + 0x10));
        assert_eq!(p.target_slot(&m), None);
        // A 4-byte load whose value is the target is no slot of a table of pointers.
        // mov 0x10(%rax),%r11d
        let p = compile(&[0x44, 0x8b, 0x58, 0x10], 0, Final::Reg(11)).unwrap();
        assert!(p.target(&m).is_some());
        assert_eq!(p.target_slot(&m), None);
    }

    #[test]
    fn static_targets_need_no_register() {
        let m = machine();
        // jmp *0x100(%rip) at 0x2000 (6 bytes), no run: a global's value.
        let g = Final::Mem(Addr {
            base: None,
            index: None,
            disp: 0x2106,
            gs: false,
        });
        let p = compile(&[], 0x2000, g).unwrap();
        assert_eq!(p.static_target(&m), Some(mem(&m, 0x2106)));
        // mov 0x100(%rip),%rax at 0x2000 ; (call *0x30(%rax)): through a global pointer.
        let p = compile(
            &[0x48, 0x8b, 0x05, 0x00, 0x01, 0x00, 0x00],
            0x2000,
            Final::Mem(Addr {
                base: Some(0),
                index: None,
                disp: 0x30,
                gs: false,
            }),
        )
        .unwrap();
        let ops = mem(&m, 0x2107);
        assert_eq!(p.static_target(&m), Some(mem(&m, ops.wrapping_add(0x30))));
        // mov 0x10(%rax),%r11: needs %rax.
        let p = compile(&[0x4c, 0x8b, 0x58, 0x10], 0, Final::Reg(11)).unwrap();
        assert!(p.target(&m).is_some());
        assert_eq!(p.static_target(&m), None);
        // mov %gs:0x20,%rax ; (call *%rax): per-CPU.
        let run = [0x65, 0x48, 0x8b, 0x04, 0x25, 0x20, 0x00, 0x00, 0x00];
        let p = compile(&run, 0, Final::Reg(0)).unwrap();
        assert!(p.target(&m).is_some());
        assert_eq!(p.static_target(&m), None);
        // mov $imm,%rax ; (call *%rax) (a constant): known too.
        let p = compile(
            &[0x48, 0xc7, 0xc0, 0x00, 0x10, 0x00, 0x00],
            0,
            Final::Reg(0),
        )
        .unwrap();
        assert_eq!(p.static_target(&m), Some(0x1000));
    }

    #[test]
    fn site_slots() {
        let m = machine();
        let at = |p: &Program| {
            let end = p.run(&m);
            p.site_slot()?.at(|r| end.reg(r), |a| m.load(a, 8))
        };
        // mov 0x48(%rbx),%rax ; mov %r12,%rdi ; (call *%rax): at the site, 0x48(%rbx).
        let p = compile(
            &[0x48, 0x8b, 0x43, 0x48, 0x4c, 0x89, 0xe7],
            0,
            Final::Reg(0),
        )
        .unwrap();
        assert_eq!(at(&p), Some(0x4444 + 0x48));
        assert_eq!(p.target_slot(&m).map(|(_, s)| s), Some(0x4444 + 0x48));
        // mov 0x48(%rbx),%rdx ; mov %rdx,%rax ; (call *%rax): through the copy.
        let p = compile(
            &[0x48, 0x8b, 0x53, 0x48, 0x48, 0x89, 0xd0],
            0,
            Final::Reg(0),
        )
        .unwrap();
        assert_eq!(at(&p), Some(0x4444 + 0x48));
        // mov 0x90(%rbx),%rax ; mov 0x48(%rax),%rax ; (call *%rax): one level further,
        // the word at 0x90(%rbx) plus 0x48.
        let p = compile(
            &[
                0x48, 0x8b, 0x83, 0x90, 0x00, 0x00, 0x00, 0x48, 0x8b, 0x40, 0x48,
            ],
            0,
            Final::Reg(0),
        )
        .unwrap();
        let class = mem(&m, 0x4444 + 0x90);
        assert_eq!(at(&p), Some(class.wrapping_add(0x48)));
        assert_eq!(at(&p), p.target_slot(&m).map(|(_, s)| s));
        // mov 0x48(%rbx),%rax ; mov %r12,%rbx: the base is written after the load (and
        // not loaded before it).
        let p = compile(
            &[0x48, 0x8b, 0x43, 0x48, 0x4c, 0x89, 0xe3],
            0,
            Final::Reg(0),
        )
        .unwrap();
        assert_eq!(p.site_slot(), None);
        // mov 0x10(%rax),%rax alone: its base, written by itself, was not loaded here.
        let p = compile(&[0x48, 0x8b, 0x40, 0x10], 0, Final::Reg(0)).unwrap();
        assert_eq!(p.site_slot(), None);
        // A 4-byte load, a computed value, no write at all: none.
        for run in [&[0x8b, 0x43, 0x48][..], &[0x48, 0x8d, 0x43, 0x48], &[]] {
            let p = compile(run, 0, Final::Reg(0)).unwrap();
            assert_eq!(p.site_slot(), None);
        }
        // call *0x8(%rbx): the operand itself.
        let a = Addr {
            base: Some(3),
            index: None,
            disp: 8,
            gs: false,
        };
        let p = compile(&[], 0, Final::Mem(a)).unwrap();
        assert_eq!(
            p.site_slot(),
            Some(SiteSlot {
                addr: a,
                then: None
            })
        );
    }

    /// A `struct sched_class` as it lies in memory: a flag word (`uclamp_enabled`), the
    /// methods with holes and a data field, then the next table.
    const BASE: u64 = 0xffff_ffff_8200_0000;
    const TABLE: [u64; 13] = [
        0xf000, // the table before
        1,      // uclamp_enabled
        0xf100, 0xf200, 0, 0xf300, /* slot */ 0xf400, 0xf500, 0xbeef, 0, 0xf600,
        0xf700, // the table after
        0xf800,
    ];

    fn table_word(a: u64) -> Option<u64> {
        let i = usize::try_from(a.checked_sub(BASE)? / 8).ok()?;
        a.is_multiple_of(8).then_some(())?;
        TABLE.get(i).copied()
    }

    fn is_func(v: u64) -> bool {
        (0xf000..0x10000).contains(&v) && v.is_multiple_of(0x100)
    }

    #[test]
    fn neighbours_of_a_table() {
        let slot = BASE + 6 * 8;
        let table = BASE + 8..BASE + 11 * 8;
        let mut out = [0u64; 16];
        let n = table_neighbours(slot, table.clone(), table_word, is_func, &mut out);
        // Nearest first, alternating sides; past the data field, not past the table.
        assert_eq!(&out[..n], &[0xf500, 0xf300, 0xf200, 0xf600, 0xf100]);
        // A smaller buffer keeps the nearest.
        let mut two = [0u64; 2];
        assert_eq!(
            table_neighbours(slot, table.clone(), table_word, is_func, &mut two),
            2
        );
        assert_eq!(two, [0xf500, 0xf300]);
        // Unreadable memory is passed over; a slot outside the table finds nothing.
        assert_eq!(
            table_neighbours(slot, table.clone(), |_| None, is_func, &mut out),
            0
        );
        assert_eq!(
            table_neighbours(BASE, table, table_word, is_func, &mut out),
            0
        );
        // The whole memory as one table: both neighbours too.
        let n = table_neighbours(slot, BASE..BASE + 13 * 8, table_word, is_func, &mut out);
        assert_eq!(n, 8);
        assert!(out[..n].contains(&0xf000) && out[..n].contains(&0xf800));
    }

    #[test]
    fn neighbours_stop_at_the_limit_and_repeat_once() {
        // A huge object of function pointers: at most TABLE_WORDS on each side; one
        // function in two slots is listed once.
        let read = |a: u64| Some(0xf000 + (a / 8) % 40 * 0x100);
        let mut out = [0u64; 128];
        let n = table_neighbours(0x10_0000, 0..u64::MAX, read, |_| true, &mut out);
        // 40 distinct values, the slot's own among them (it lies in other slots too).
        assert_eq!(n, 40);
        let seen = &out[..n];
        for (i, f) in seen.iter().enumerate() {
            assert!(!seen[..i].contains(f), "{f:#x} twice");
        }
        let n = table_neighbours(0x10_0000, 0..u64::MAX, Some, |_| true, &mut out);
        assert_eq!(n as u64, 2 * TABLE_WORDS);
    }

    #[test]
    fn gs_sib_lea_alu_shift() {
        // mov %gs:0x20,%rax ; lea 0x8(%rax,%rcx,8),%rdx ; shl $0x2,%rdx ; add $0x10,%rdx
        let run = [
            0x65, 0x48, 0x8b, 0x04, 0x25, 0x20, 0x00, 0x00, 0x00, 0x48, 0x8d, 0x54, 0xc8, 0x08,
            0x48, 0xc1, 0xe2, 0x02, 0x48, 0x83, 0xc2, 0x10,
        ];
        let p = compile(&run, 0, Final::Reg(2)).unwrap();
        let m = machine();
        let rax = mem(&m, 0x1000_0020);
        assert_eq!(
            p.target(&m),
            Some(((rax + 0x2222 * 8 + 8) << 2).wrapping_add(0x10))
        );
    }

    #[test]
    fn unknown_and_refused() {
        // cmovne %rdi,%r11 makes r11 unknown; the target depends on it.
        let p = compile(&[0x4c, 0x0f, 0x45, 0xdf, 0x90], 0, Final::Reg(11)).unwrap();
        assert_eq!(p.target(&machine()), None);
        // ... but not a target through another register.
        let p = compile(&[0x4c, 0x0f, 0x45, 0xdf, 0x90], 0, Final::Reg(0)).unwrap();
        assert_eq!(p.target(&machine()), Some(0x1111));
        // A store, then a load: computed where they do not overlap.
        // mov %rax,(%rdi) ; mov (%rsi),%rax
        let p = compile(&[0x48, 0x89, 0x07, 0x48, 0x8b, 0x06], 0, Final::Reg(0)).unwrap();
        let mut m = machine();
        assert_eq!(p.target(&m), Some(mem(&m, 0x7777)));
        m.regs[6] = 0x8888 + 4;
        assert_eq!(p.target(&m), None);
        m.regs[6] = 0x8888 - 4;
        assert_eq!(p.target(&m), None);
        m.regs[6] = 0x8888 + 8;
        assert_eq!(p.target(&m), Some(mem(&m, 0x8888 + 8)));
        // movq $0x1,0x20(%rsi) ; mov 0x28(%rax),%r11 (vfs_read's call of ->read)
        let run = [
            0x48, 0xc7, 0x46, 0x20, 0x01, 0x00, 0x00, 0x00, 0x4c, 0x8b, 0x58, 0x28,
        ];
        let p = compile(&run, 0, Final::Reg(11)).unwrap();
        let m = machine();
        assert_eq!(p.target(&m), Some(mem(&m, 0x1111 + 0x28)));
        // A store, then a call through the same memory.
        let p = compile(
            &[0x48, 0x89, 0x07, 0x90],
            0,
            Final::Mem(Addr {
                base: Some(7),
                index: None,
                disp: 0,
                gs: false,
            }),
        )
        .unwrap();
        assert_eq!(p.target(&machine()), None);
        // A load, then a store: fine.
        assert!(compile(&[0x48, 0x8b, 0x06, 0x48, 0x89, 0x07], 0, Final::Reg(0)).is_some());
        // pop %rbx ; pop %rbp ; (jmp *%rax): loads from the stack.
        let p = compile(&[0x5b, 0x5d, 0x90, 0x90, 0x90], 0, Final::Reg(5)).unwrap();
        let m = machine();
        assert_eq!(p.target(&m), Some(mem(&m, 0x5555 + 8)));
        // push, then pop: the load reads what the store wrote; a truncated instruction.
        let p = compile(&[0x50, 0x5b, 0x48, 0x89, 0xc0], 0, Final::Reg(3)).unwrap();
        assert_eq!(p.target(&machine()), None);
        assert!(compile(&[0x48, 0x8b], 0, Final::Reg(0)).is_none());
        // xor %r11d,%r11d zeroes.
        let p = compile(&[0x45, 0x31, 0xdb, 0x90], 0, Final::Reg(11)).unwrap();
        assert_eq!(p.target(&machine()), Some(0));
        // A byte write to %r11b: unknown.
        let p = compile(&[0x41, 0xb3, 0x01, 0x90], 0, Final::Reg(11)).unwrap();
        assert_eq!(p.target(&machine()), None);
        // movslq 0x4(%rdi),%rax: sign-extended.
        let p = compile(&[0x48, 0x63, 0x47, 0x04], 0, Final::Reg(0)).unwrap();
        let m = machine();
        let v = m.load(0x8888 + 4, 4).unwrap();
        assert_eq!(p.target(&m), Some(v as u32 as i32 as i64 as u64));
    }
}
