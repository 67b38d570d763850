// SPDX-License-Identifier: GPL-2.0

//! AArch64 (A64) control-flow decoder.
//!
//! Like `decode.rs`, this file is self-contained so that the kernel module can
//! include it with `#[path = "../crates/fctrace-decode/src/a64.rs"]`: it uses
//! nothing outside `core`, and never panics, allocates or uses floats.
//!
//! A64 instructions are 32-bit words, four-byte aligned, so there is no
//! length to find: what fctrace needs is what a word does to control flow
//! (calls, branches, returns, traps), the hints around a function's entry
//! (`NOP`, `BTI`, pointer authentication) and the PC-relative instructions a
//! kprobe has to simulate (`ADR`, `ADRP`, loads from a literal). The
//! branches, exception generating instructions and hints are decoded down to
//! whether the architecture allocates them; words of the other
//! groups, and the system instructions (`MSR`, `MRS`, `SYS`, barriers), are
//! [`Flow::Next`] and [`Op::Other`] unless they are one of the PC-relative
//! forms or `UDF`. The choices follow the Arm A64 encoding tables
//! up to FEAT_CMPBR and FEAT_PAuth_LR (2024), as the bad64 disassembler
//! (generated from Arm's machine-readable specification) does; the tests
//! cross-check against it over sweeps of the encoding space and over every
//! word of Debian's arm64 kernel image.

/// A general purpose register number, 0..=31. What 31 means depends on the
/// instruction: `XZR` for the branch target of `BR`/`BLR`, `SP` for the
/// modifier of `BRAA`/`BLRAA` and of the `RETAA` family.
pub type Reg = u8;

/// The link register, `X30`.
pub const LR: Reg = 30;

/// Register number 31: `SP` or `XZR`, by instruction.
pub const R31: Reg = 31;

/// The encoding of `NOP`.
pub const NOP: u32 = 0xd503_201f;

/// The encoding of `MOV X9, X30` (`ORR X9, XZR, X30`): what the kernel
/// patches the first instruction of a function's ftrace site to, so that the
/// `BL` after it keeps the caller's return address in `X9`.
pub const MOV_X9_LR: u32 = 0xaa1e_03e9;

/// The pointer authentication key of an authenticated branch or return, and
/// the modifier it is authenticated with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pac {
    /// Not authenticated (`BR`, `BLR`, `RET`).
    None,
    /// Instruction key A (`BRAA`, `BLRAAZ`, `RETAA`, ...), with the modifier
    /// register (31: `SP`), or `None` for a zero modifier (the `Z` forms).
    A(Option<Reg>),
    /// Instruction key B, likewise.
    B(Option<Reg>),
    /// Key A with `SP` and a PC-relative value as modifier (FEAT_PAuth_LR:
    /// `RETAASPPC`, `RETAASPPCR`).
    ASpPc,
    /// Key B with `SP` and a PC-relative value as modifier.
    BSpPc,
}

/// What a conditional branch tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Test {
    /// `B.cond` (`consistent`: `BC.cond`, FEAT_HBC): the condition code,
    /// 0..=15 (`EQ`, `NE`, `CS`, `CC`, `MI`, `PL`, `VS`, `VC`, `HI`, `LS`,
    /// `GE`, `LT`, `GT`, `LE`, `AL`, `NV`) on NZCV.
    Cond {
        /// The condition code.
        cond: u8,
        /// `BC.cond` rather than `B.cond`.
        consistent: bool,
    },
    /// `CBZ` / `CBNZ`: the register (`wide`: `X`, else `W`) compared with 0.
    Zero {
        /// The register tested.
        reg: Reg,
        /// 64-bit register.
        wide: bool,
        /// `CBNZ`: branch when not zero.
        nonzero: bool,
    },
    /// `TBZ` / `TBNZ`: one bit of a register.
    Bit {
        /// The register tested.
        reg: Reg,
        /// The bit number, 0..=63.
        bit: u8,
        /// `TBNZ`: branch when the bit is set.
        nonzero: bool,
    },
    /// `CB<cc>`, `CBB<cc>`, `CBH<cc>` (FEAT_CMPBR): a register compared with
    /// a register or an immediate.
    Compare {
        /// The first register.
        reg: Reg,
        /// The condition: the `cc` field, 0..=7.
        cc: u8,
        /// Operand size in bits: 8, 16, 32 or 64.
        bits: u8,
        /// The second operand.
        with: Operand,
    },
}

impl Test {
    /// Whether the branch is taken, with `nzcv` the condition flags as
    /// `PSTATE` holds them (N bit 31, Z 30, C 29, V 28) and `reg(n)` the
    /// value of `Xn` (register 31 reads as zero: `CBZ`/`TBZ` name `XZR`
    /// there). `None` for the compare-and-branch instructions of FEAT_CMPBR,
    /// which fctrace does not evaluate (no kernel built for Armv8 has them).
    pub fn holds(self, nzcv: u64, reg: impl Fn(Reg) -> u64) -> Option<bool> {
        let r = |n: Reg| if n == 31 { 0 } else { reg(n) };
        let flag = |bit: u32| nzcv >> bit & 1 == 1;
        let (n, z, c, v) = (flag(31), flag(30), flag(29), flag(28));
        Some(match self {
            Test::Cond { cond, .. } => {
                let base = match cond >> 1 {
                    0 => z,
                    1 => c,
                    2 => n,
                    3 => v,
                    4 => c && !z,
                    5 => n == v,
                    6 => n == v && !z,
                    _ => true,
                };
                // The odd codes negate, but for `NV` (15), which is "always" too.
                if cond & 1 == 1 && cond != 15 {
                    !base
                } else {
                    base
                }
            }
            Test::Zero { reg, wide, nonzero } => {
                let x = r(reg);
                let x = if wide { x } else { x & 0xffff_ffff };
                (x != 0) == nonzero
            }
            Test::Bit { reg, bit, nonzero } => (r(reg) >> (bit & 63) & 1 == 1) == nonzero,
            Test::Compare { .. } => return None,
        })
    }
}

/// The second operand of a compare-and-branch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operand {
    /// A register.
    Reg(Reg),
    /// An unsigned immediate, 0..=63.
    Imm(u8),
}

/// What an instruction does to control flow. Targets are absolute addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Falls through to the next instruction; also `SVC`, `HVC`, `SMC`,
    /// `HLT`, `DCPS1..3`, which come back to the next instruction.
    Next,
    /// `BL label`.
    Call(u64),
    /// `BLR Xn` and its authenticated forms (`BLRAA`, `BLRAAZ`, `BLRAB`,
    /// `BLRABZ`): the register holding the target.
    CallReg(Reg, Pac),
    /// `B label`.
    Jmp(u64),
    /// `BR Xn` and its authenticated forms.
    JmpReg(Reg, Pac),
    /// A conditional branch to the target.
    Branch(u64, Test),
    /// `RET Xn`, `RETAA`, `RETAB` and the FEAT_PAuth_LR returns: the
    /// register holding the return address.
    Ret(Reg, Pac),
    /// `ERET`, `ERETAA`, `ERETAB`, `DRPS`: an exception return.
    ExceptionRet,
    /// `BRK #imm`: the kernel's `BUG()`/`WARN()` (0x800), kprobes (0x004),
    /// KASAN, UBSAN and CFI checks.
    Brk(u16),
    /// `UDF #imm`, and every word of the branch and system group the
    /// architecture does not allocate: executing it traps.
    Undefined,
}

/// What else fctrace needs to know about an instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    /// Nothing below.
    Other,
    /// `NOP`.
    Nop,
    /// `BTI` with its targets: 0 none, 1 `c`, 2 `j`, 3 `jc`.
    Bti(u8),
    /// A hint that signs the link register (`PACIASP`, `PACIAZ`,
    /// `PACIBSP`, `PACIBZ`) or `X17` (`PACIA1716`, `PACIB1716`).
    PacSign,
    /// A hint that authenticates the link register or `X17` (`AUTIASP`, ...).
    PacAuth,
    /// `XPACLRI`: strips the pointer authentication code from the link
    /// register.
    StripLr,
    /// `ADR Xd, label`.
    Adr(Reg, u64),
    /// `ADRP Xd, label`: the 4 KiB page address.
    Adrp(Reg, u64),
    /// A load from a PC-relative literal (`LDR`, `LDRSW`, `PRFM`, and the
    /// SIMD `LDR`): the literal's address.
    Literal(u64),
}

/// One decoded instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    /// Effect on control flow.
    pub flow: Flow,
    /// What else it is.
    pub op: Op,
}

/// Bits `lo..lo+n` of `w` (`n` < 32).
const fn bits(w: u32, lo: u32, n: u32) -> u32 {
    w.wrapping_shr(lo) & 1u32.wrapping_shl(n).wrapping_sub(1)
}

/// `pc + (sign_extend(imm, n) << shift)`, wrapping: a PC-relative target.
const fn rel(pc: u64, imm: u32, n: u32, shift: u32) -> u64 {
    let up = 64u32.wrapping_sub(n);
    let v = ((imm as u64).wrapping_shl(up) as i64).wrapping_shr(up);
    pc.wrapping_add(v.wrapping_shl(shift) as u64)
}

const fn insn(flow: Flow) -> Insn {
    Insn {
        flow,
        op: Op::Other,
    }
}

const UNDEFINED: Insn = insn(Flow::Undefined);
const NEXT: Insn = insn(Flow::Next);

/// Decodes the instruction `word` at address `pc`.
pub fn decode(word: u32, pc: u64) -> Insn {
    let top = bits(word, 25, 4);
    if word >> 31 == 0 && top == 0 {
        // The reserved group: only UDF is allocated.
        return UNDEFINED;
    }
    if top & 0b1110 == 0b1010 {
        return control(word, pc);
    }
    if top & 0b1110 == 0b1000 && bits(word, 24, 2) == 0 {
        let imm = bits(word, 5, 19) << 2 | bits(word, 29, 2);
        let rd = bits(word, 0, 5) as Reg;
        let op = if word >> 31 == 0 {
            Op::Adr(rd, rel(pc, imm, 21, 0))
        } else {
            Op::Adrp(rd, rel(pc & !0xfff, imm, 21, 12))
        };
        return Insn {
            flow: Flow::Next,
            op,
        };
    }
    if word & 0x3b00_0000 == 0x1800_0000 {
        // Load register (literal); opc 11 with V 1 is unallocated.
        if word >> 30 == 3 && bits(word, 26, 1) == 1 {
            return NEXT;
        }
        return Insn {
            flow: Flow::Next,
            op: Op::Literal(rel(pc, bits(word, 5, 19), 19, 2)),
        };
    }
    NEXT
}

/// The "branches, exception generating and system instructions" group.
fn control(word: u32, pc: u64) -> Insn {
    let op0 = word >> 29;
    let op1 = bits(word, 12, 14);
    let op2 = bits(word, 0, 5);
    match op0 {
        // B, BL.
        0 | 4 => {
            let t = rel(pc, bits(word, 0, 26), 26, 2);
            insn(if op0 == 0 {
                Flow::Jmp(t)
            } else {
                Flow::Call(t)
            })
        }
        // CBZ, CBNZ; TBZ, TBNZ.
        1 | 5 => {
            let reg = bits(word, 0, 5) as Reg;
            let nonzero = bits(word, 24, 1) == 1;
            if op1 & 0x2000 == 0 {
                let t = rel(pc, bits(word, 5, 19), 19, 2);
                let wide = op0 == 5;
                insn(Flow::Branch(t, Test::Zero { reg, wide, nonzero }))
            } else {
                let t = rel(pc, bits(word, 5, 14), 14, 2);
                let bit = (bits(word, 31, 1) << 5 | bits(word, 19, 5)) as u8;
                insn(Flow::Branch(t, Test::Bit { reg, bit, nonzero }))
            }
        }
        2 => match op1 & 0x3000 {
            // B.cond, BC.cond.
            0 => {
                let t = rel(pc, bits(word, 5, 19), 19, 2);
                let cond = bits(word, 0, 4) as u8;
                let consistent = bits(word, 4, 1) == 1;
                insn(Flow::Branch(t, Test::Cond { cond, consistent }))
            }
            // RETAASPPC, RETABSPPC <label>.
            0x1000 if bits(word, 22, 2) == 0 && op2 == 0x1f => {
                let pac = if bits(word, 21, 1) == 0 {
                    Pac::ASpPc
                } else {
                    Pac::BSpPc
                };
                insn(Flow::Ret(LR, pac))
            }
            _ => UNDEFINED,
        },
        3 | 7 => compare_branch(word, pc, op0 == 7, op1),
        6 => system(word, op1, op2),
        _ => UNDEFINED,
    }
}

/// FEAT_CMPBR: `CB<cc>` (register, immediate), `CBB<cc>`, `CBH<cc>`.
fn compare_branch(word: u32, pc: u64, wide: bool, op1: u32) -> Insn {
    let cc = bits(word, 21, 3);
    if cc & 6 == 4 {
        return UNDEFINED;
    }
    let reg = bits(word, 0, 5) as Reg;
    let t = rel(pc, bits(word, 5, 9), 9, 2);
    let second = bits(word, 16, 5) as u8;
    let (bits_, with) = if !wide && op1 & 0x3008 == 8 {
        // CBB<cc>, CBH<cc>.
        let half = bits(word, 14, 1) == 1;
        (if half { 16 } else { 8 }, Operand::Reg(second))
    } else if op1 & 0x300c == 0 {
        (if wide { 64 } else { 32 }, Operand::Reg(second))
    } else if op1 & 0x3004 == 0x1000 {
        (
            if wide { 64 } else { 32 },
            Operand::Imm(bits(word, 15, 6) as u8),
        )
    } else {
        return UNDEFINED;
    };
    let cc = cc as u8;
    insn(Flow::Branch(
        t,
        Test::Compare {
            reg,
            cc,
            bits: bits_,
            with,
        },
    ))
}

/// The op0 = 110 part of the control group: exceptions, branches to a
/// register, hints, and the system instructions (barriers, `MSR`, `MRS`,
/// `SYS`, PSTATE), which are [`Flow::Next`] whether or not the architecture
/// allocates them: none of them changes control flow.
fn system(word: u32, op1: u32, op2: u32) -> Insn {
    if op1 & 0x3000 == 0 {
        return exception(word);
    }
    if op1 & 0x2000 == 0x2000 {
        return branch_reg(word);
    }
    if op1 == 0x1032 && op2 == 0x1f {
        return hint(bits(word, 5, 7));
    }
    NEXT
}

/// Exception generation: SVC, HVC, SMC, BRK, HLT, DCPS1..3.
fn exception(word: u32) -> Insn {
    let opc = bits(word, 21, 3);
    let ll = bits(word, 0, 2);
    if bits(word, 2, 3) != 0 {
        return UNDEFINED;
    }
    match (opc, ll) {
        (0, 1..=3) | (2, 0) | (5, 1..=3) => NEXT,
        (1, 0) => insn(Flow::Brk(bits(word, 5, 16) as u16)),
        _ => UNDEFINED,
    }
}

/// A hint, `HINT #imm` with `imm` = CRm:op2; unknown ones execute as `NOP`.
fn hint(imm: u32) -> Insn {
    let op = match imm {
        0 => Op::Nop,
        7 => Op::StripLr,
        8 | 10 | 24..=27 => Op::PacSign,
        12 | 14 | 28..=31 => Op::PacAuth,
        32..=39 if imm & 1 == 0 => Op::Bti(((imm >> 1) & 3) as u8),
        _ => Op::Other,
    };
    Insn {
        flow: Flow::Next,
        op,
    }
}

/// Unconditional branch (register): BR, BLR, RET, ERET, DRPS and their
/// pointer-authenticated forms.
fn branch_reg(word: u32) -> Insn {
    let opc = bits(word, 21, 4);
    let op3 = bits(word, 10, 6);
    let rn = bits(word, 5, 5) as Reg;
    let op4 = bits(word, 0, 5) as Reg;
    if bits(word, 16, 5) != 0x1f {
        return UNDEFINED;
    }
    // The key of an authenticated form: op3 = 00001x.
    let key = |modifier: Option<Reg>| {
        if op3 == 2 {
            Pac::A(modifier)
        } else {
            Pac::B(modifier)
        }
    };
    let auth = op3 & 0x3e == 2;
    match opc {
        // BR, BRAAZ, BRABZ; BLR, BLRAAZ, BLRABZ.
        0 | 1 => {
            let pac = if op3 == 0 && op4 == 0 {
                Pac::None
            } else if auth && op4 == 0x1f {
                key(None)
            } else {
                return UNDEFINED;
            };
            insn(if opc == 0 {
                Flow::JmpReg(rn, pac)
            } else {
                Flow::CallReg(rn, pac)
            })
        }
        // RET; RETAA, RETAB; RETAASPPCR, RETABSPPCR.
        2 => {
            if op3 == 0 && op4 == 0 {
                insn(Flow::Ret(rn, Pac::None))
            } else if auth && rn == 0x1f && op4 == 0x1f {
                insn(Flow::Ret(LR, key(Some(R31))))
            } else if auth && rn == 0x1f {
                let pac = if op3 == 2 { Pac::ASpPc } else { Pac::BSpPc };
                insn(Flow::Ret(LR, pac))
            } else {
                UNDEFINED
            }
        }
        // ERET, ERETAA, ERETAB; DRPS.
        4 | 5 => {
            let plain = op3 == 0 && rn == 0x1f && op4 == 0;
            let authed = opc == 4 && auth && rn == 0x1f && op4 == 0x1f;
            if plain || authed {
                insn(Flow::ExceptionRet)
            } else {
                UNDEFINED
            }
        }
        // BRAA, BRAB; BLRAA, BLRAB: the modifier in op4 (31: SP).
        8 | 9 if auth => {
            let pac = key(Some(op4));
            insn(if opc == 8 {
                Flow::JmpReg(rn, pac)
            } else {
                Flow::CallReg(rn, pac)
            })
        }
        _ => UNDEFINED,
    }
}

/// The encoding of `BRK #0x004` (`KPROBES_BRK_IMM`): the breakpoint a
/// kprobe puts on the instruction it probes.
pub const KPROBE_BRK: u32 = 0xd420_0080;

/// Where a function's ftrace site is, the address ftrace records for it
/// (`ftrace_call_adjust()`): the `NOP` that becomes `BL <trampoline>`.
///
/// `entry` holds the first three words at the function's symbol address
/// `addr`. The compiler's patchable entry is two `NOP`s (with
/// `CONFIG_DYNAMIC_FTRACE_WITH_CALL_OPS`, two more before the symbol hold
/// the ops pointer), after a `BTI C` when the kernel has BTI. The first
/// becomes `MOV X9, X30` once ftrace has initialised the site, the second a
/// `BL`. Returns `None` if the words are not such a site.
///
/// A kprobe on the function (a kprobe event, a kretprobe) puts its `BRK`
/// on the first word (arm64 has no `KPROBES_ON_FTRACE`), which hides what
/// was there: the site's first word, or `BTI C`. The words after it tell
/// which; where both fit (`NOP`, then `NOP` or `BL`), `None`.
pub fn ftrace_site(entry: [u32; 3], addr: u64) -> Option<u64> {
    let first = |w: u32| w == NOP || w == MOV_X9_LR;
    let second = |w: u32, at: u64| w == NOP || matches!(decode(w, at).flow, Flow::Call(_));
    let [a, b, c] = entry;
    if a == KPROBE_BRK {
        let plain = second(b, addr.wrapping_add(4));
        let after_bti = first(b) && second(c, addr.wrapping_add(8));
        return match (plain, after_bti) {
            (true, false) => Some(addr.wrapping_add(4)),
            (false, true) => Some(addr.wrapping_add(8)),
            _ => None,
        };
    }
    if first(a) && second(b, addr.wrapping_add(4)) {
        return Some(addr.wrapping_add(4));
    }
    if decode(a, addr).op == Op::Bti(1) && first(b) && second(c, addr.wrapping_add(8)) {
        return Some(addr.wrapping_add(8));
    }
    None
}

/// Where a call site sends the task: a fixed address, or the address in a
/// register (`BLR`, `BR` and their authenticated forms, with the key).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// `BL label`, `B label`: a fixed address.
    Direct(u64),
    /// `BLR Xn`, `BR Xn`: register `n` (31 is `XZR`), authenticated with
    /// the key of `Pac`.
    Reg(Reg, Pac),
}

/// What an instruction of a function is to the function's call sites.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Site {
    /// A call: `BL`, `BLR`.
    Call(Target),
    /// A branch out of the function: a tail call.
    Tail(Target),
    /// A conditional branch out of the function: a tail call when the test
    /// holds.
    TailIf(u64, Test),
    /// `BR Xn` (and its authenticated forms): a tail call when the target
    /// lies outside the function, else a jump inside it (GCC's jump tables
    /// on arm64 end with `BR`). Only the register's value tells, at the site.
    JumpReg(Reg, Pac),
}

/// The call site the instruction `insn` of a function is, by its control
/// flow; `inside(a)` tells whether address `a` belongs to the function (its
/// cold part included). `None` for the rest: returns, branches inside the
/// function, traps.
pub fn call_site(insn: Insn, inside: impl Fn(u64) -> bool) -> Option<Site> {
    match insn.flow {
        Flow::Call(t) => Some(Site::Call(Target::Direct(t))),
        Flow::CallReg(r, pac) => Some(Site::Call(Target::Reg(r, pac))),
        Flow::Jmp(t) if !inside(t) => Some(Site::Tail(Target::Direct(t))),
        Flow::Branch(t, test) if !inside(t) => Some(Site::TailIf(t, test)),
        Flow::JmpReg(r, pac) => Some(Site::JumpReg(r, pac)),
        _ => None,
    }
}

/// What [`loaded_addresses`] finds a function's code load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Loaded {
    /// A constant address, into a register.
    Address(u64),
    /// The 8-byte word at a constant address (a global function pointer,
    /// `LDR Xt, [Xn, #imm]` from an `ADRP`'s page).
    Word(u64),
}

/// What a function's code loads from constants, `f(..)` for each, in the
/// code's order: addresses (`ADR Xd, label`, and `ADRP Xn, page` with an
/// `ADD Xd, Xn, #imm` after it: the kernel's way to take a symbol's address;
/// GCC may put other instructions between them, and may use one `ADRP` for
/// several `ADD`s), and words at such addresses (`LDR Xt, [Xn, #imm]` from the
/// page). `words` are the function's words from `start`. The registers are
/// followed in the code's order, not along its branches: a register's page is
/// forgotten when an instruction may write the register, or at a call for
/// `X0` to `X18`, and at a branch target nothing is known of the path that
/// came there, so what is found may be something the code never loads. A
/// function whose address is loaded so is passed on as a function pointer
/// (`folio_add_lru()` gives `lru_add()` to `folio_batch_move_lru()`, which
/// calls it with a lock held); a word loaded so may be a global function
/// pointer the code calls.
pub fn loaded_addresses(words: &[u32], start: u64, mut f: impl FnMut(Loaded)) {
    let mut page: [Option<u64>; 32] = [None; 32];
    for (i, &w) in words.iter().enumerate() {
        let pc = start.wrapping_add(4 * i as u64);
        let insn = decode(w, pc);
        match insn.op {
            Op::Adrp(r, p) => {
                page[usize::from(r) & 31] = Some(p);
                continue;
            }
            Op::Adr(_, a) => f(Loaded::Address(a)),
            _ => {}
        }
        let rn = ((w >> 5) & 31) as usize;
        if let Some((_, n, imm)) = add_x_imm(w) {
            if let Some(p) = page[usize::from(n)] {
                f(Loaded::Address(p.wrapping_add(imm)));
            }
        }
        if let (Some((_, _, imm)), Some(p)) = (ldr_x(w), page[rn]) {
            f(Loaded::Word(p.wrapping_add(imm)));
        }
        if matches!(insn.flow, Flow::Call(_) | Flow::CallReg(..)) {
            page[..19].fill(None);
        }
        let wr = if insn.flow == Flow::Next {
            writes(w)
        } else {
            0
        };
        for (r, p) in page.iter_mut().enumerate() {
            if wr & (1 << r) != 0 {
                *p = None;
            }
        }
    }
}

/// `ADD Xd, Xn, #imm{, LSL #12}` (64-bit, immediate: sf 1, op 0, S 0, `100010`, sh,
/// imm12, Rn, Rd): `(d, n, imm)`, the shift applied.
fn add_x_imm(w: u32) -> Option<(Reg, Reg, u64)> {
    (w & 0xff80_0000 == 0x9100_0000).then(|| {
        let imm = u64::from((w >> 10) & 0xfff) << if w & (1 << 22) != 0 { 12 } else { 0 };
        ((w & 31) as Reg, ((w >> 5) & 31) as Reg, imm)
    })
}

/// Where a module's PLT entry at `at` (its three words `entry`) goes: the
/// kernel writes one for each call or tail call of a module that a `BL` or
/// `B` cannot reach (`get_plt_entry()`, arch/arm64/kernel/module-plts.c):
/// `ADRP X16, page; ADD X16, X16, #lo12; BR X16`. Debian's modules, loaded
/// where `RANDOMIZE_MODULE_REGION_FULL` puts them, call the kernel so
/// (`ext4_sync_file()`'s call of `file_write_and_wait_range()`). `None` if
/// the words are not such an entry.
pub fn plt_target(entry: [u32; 3], at: u64) -> Option<u64> {
    const X16: Reg = 16;
    let [adrp, add, br] = entry;
    let Op::Adrp(X16, page) = decode(adrp, at).op else {
        return None;
    };
    // ADD X16, X16, #imm12 (64-bit, no shift): sf 1, op 0, S 0, `100010`, sh 0.
    // (`get_plt_entry()` adds the low 12 bits, unshifted)
    let Some((X16, X16, lo12)) = add_x_imm(add).filter(|_| add & (1 << 22) == 0) else {
        return None;
    };
    let target = page.wrapping_add(lo12);
    match decode(br, at.wrapping_add(8)).flow {
        Flow::JmpReg(X16, Pac::None) => Some(target),
        _ => None,
    }
}

/// Where an indirect call's target was loaded from ([`call_slot`]): register
/// `base` at the call plus `disp`; then, if `then`, the word there plus `then`
/// (a table reached through a pointer: `p->sched_class->select_task_rq`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    /// The base register, as it is at the call.
    pub base: Reg,
    /// Added to it.
    pub disp: u64,
    /// The displacement into the word loaded from there, if one load further.
    pub then: Option<u64>,
}

/// `LDR Xt, [Xn, #imm]` (unsigned offset, 64-bit): `(t, n, imm)`.
fn ldr_x(w: u32) -> Option<(Reg, Reg, u64)> {
    (w & 0xffc0_0000 == 0xf940_0000).then(|| {
        let (t, n) = ((w & 31) as Reg, ((w >> 5) & 31) as Reg);
        (t, n, u64::from((w >> 10) & 0xfff) * 8)
    })
}

/// The registers (a bit each, `X0` to `X30`) the instruction `w`, which falls
/// through, may write: its destination field, and for loads and stores the
/// register each writes (none for a store but its base with write-back, two
/// for a pair). Where it cannot tell, more.
fn writes(w: u32) -> u32 {
    let bit = |r: u32| if r < 31 { 1u32 << r } else { 0 };
    let (rt, rn, rt2) = (w & 31, (w >> 5) & 31, (w >> 10) & 31);
    // The loads and stores: op0 `x1x0`.
    if w & 0x0a00_0000 != 0x0800_0000 {
        return bit(rt);
    }
    let class = (w >> 27) & 7;
    let simd = w & (1 << 26) != 0;
    let load = w & (1 << 22) != 0;
    match class {
        // Pairs: post-index, offset, pre-index (bits 24-23: 01, 10, 11).
        0b101 => {
            let back = matches!((w >> 23) & 3, 1 | 3);
            let regs = if load && !simd { bit(rt) | bit(rt2) } else { 0 };
            regs | if back { bit(rn) } else { 0 }
        }
        // Single registers: unsigned offset (bit 24), else by bits 11-10 (01
        // post-index, 11 pre-index write back; register offset has bit 21).
        0b111 => {
            let back = w & (1 << 24) == 0 && w & (1 << 21) == 0 && (w >> 10) & 1 == 1;
            let regs = if load && !simd { bit(rt) } else { 0 };
            regs | if back { bit(rn) } else { 0 }
        }
        // Literal loads, exclusives and atomics: `Rt` (and the status
        // register of a store-exclusive, in bits 16-20).
        _ => bit(rt) | bit((w >> 16) & 31),
    }
}

/// Where the target of the indirect call `BLR X{target}` at `words[site]` was
/// loaded from, by the instructions before it (at most 32, back to the last
/// call or unconditional branch): the last write of the register (through `MOV`
/// copies) is a 64-bit load `LDR Xt, [Xn, #imm]`, and `Xn` is not written
/// between it and the call: `Xn + imm` at the call. A load whose base is
/// written after it (or is the register it loads) is followed one level
/// further, if that base's own last write is such a load from a register
/// kept: the slot of the ops table the call goes through, found from the
/// registers at the call (the handler checks the word there is the target
/// before it trusts it). `None` otherwise, and for loads from the stack.
pub fn call_slot(words: &[u32], site: usize, target: Reg) -> Option<Slot> {
    let bit = |r: Reg| if r < 31 { 1u32 << r } else { 0 };
    let lo = site.saturating_sub(32);
    // The last write of `r` before `end` (with the registers written from it on):
    // a load's `(index, base, imm, written)`.
    let last_load = |mut r: Reg, end: usize, mut written: u32| {
        for i in (lo..end).rev() {
            let w = *words.get(i)?;
            // (A conditional branch writes no register; the path may have come in
            // through another branch, which the handler's check of the slot catches.)
            match decode(w, 0).flow {
                Flow::Branch(..) => continue,
                Flow::Next => {}
                _ => return None,
            }
            let wr = writes(w);
            if let Some((_, n, imm)) = ldr_x(w).filter(|&(t, ..)| t == r) {
                return Some((i, n, imm, written | wr));
            }
            // MOV Xd, Xm (ORR Xd, XZR, Xm).
            if w & 0xffe0_ffe0 == 0xaa00_03e0 && (w & 31) as Reg == r {
                written |= wr;
                r = ((w >> 16) & 31) as Reg;
                continue;
            }
            if wr & bit(r) != 0 {
                return None;
            }
            written |= wr;
        }
        None
    };
    let (i, base, disp, written) = last_load(target, site, 0)?;
    if base == 31 {
        return None;
    }
    if written & bit(base) == 0 {
        return Some(Slot {
            base,
            disp,
            then: None,
        });
    }
    let (_, base2, disp2, written2) = last_load(base, i, written)?;
    (base2 != 31 && written2 & bit(base2) == 0).then_some(Slot {
        base: base2,
        disp: disp2,
        then: Some(disp),
    })
}

/// The most instructions, its return included, of a function [`trivial_leaf`]
/// calls trivial.
pub const TRIVIAL_LEAF_WORDS: usize = 4;

/// Whether the function whose first words are `words` is a trivial leaf: at
/// most [`TRIVIAL_LEAF_WORDS`] instructions that run straight (no branch, no
/// call, no trap, no system or firmware call) into a return to the link
/// register. Outlined helpers such as `__kern_my_cpu_offset()` (`MRS`, `RET`),
/// which GCC builds without an ftrace site and calls from every per-CPU
/// access: fctrace on arm64 leaves their calls unprobed (a breakpoint trap for
/// every task that makes one, for a line with nothing below it), as
/// function_graph, which cannot see them, does.
pub fn trivial_leaf(words: &[u32]) -> bool {
    for (i, &w) in words.iter().take(TRIVIAL_LEAF_WORDS).enumerate() {
        let insn = decode(w, 4 * i as u64);
        match insn.flow {
            Flow::Ret(LR, _) => return true,
            // (exception generation, SVC to DCPS3, falls through too)
            Flow::Next if w & 0xff00_0000 != 0xd400_0000 => {}
            _ => return false,
        }
    }
    false
}

/// Whether the `B` at `pc` to `t` is a detour through a linker's veneer: the
/// code at `t` (`word(t)`, `word(t + 4)`) is one instruction that falls
/// through, then `B pc + 4`. GNU ld moves a load that follows an `ADRP` in
/// the last words of a page out of the function so (Cortex-A53 erratum
/// 843419, the `e843419@..` symbols), and jumps there and straight back: the
/// detour belongs to the function, it is no tail call.
pub fn is_veneer_detour(pc: u64, t: u64, word: impl Fn(u64) -> Option<u32>) -> bool {
    let (Some(a), Some(b)) = (word(t), word(t.wrapping_add(4))) else {
        return false;
    };
    decode(a, t).flow == Flow::Next
        && a & 0xff00_0000 != 0xd400_0000
        && decode(b, t.wrapping_add(4)).flow == Flow::Jmp(pc.wrapping_add(4))
}

/// Functions that never return, which a function may end with a call of (GCC
/// puts nothing after `BL __stack_chk_fail`): the names [`function_end`]'s
/// `noreturn` is asked about.
pub const NORETURN: &[&str] = &["__stack_chk_fail", "panic", "do_exit", "make_task_dead"];

/// Where the function at `start` ends, at most at `bound` (the next symbol):
/// after the first instruction that does not fall through (`RET`, `B`, a
/// trap, a `BL` of a function `noreturn(target)` says never returns, such
/// as `__stack_chk_fail()`) at or past the furthest address a branch before
/// it targets inside `start..bound`; or at a `B` out of the function right
/// after a `BL`, which cannot be a tail call (the link register holds the
/// `BL`'s return address, in this function). kallsyms bounds the last
/// function of a section by the next symbol, which may lie past code that
/// belongs to no function (the alternatives' replacement sequences follow
/// `.text` unnamed). `BR` does not end a function: the blocks of a jump
/// table follow it. Nor does a `B` through a linker's veneer that comes
/// straight back ([`is_veneer_detour`]), nor a kprobe's `BRK`
/// ([`KPROBE_BRK`]): it stands for the instruction it probes (on the first
/// word, where a kprobe on the function puts it, that is the ftrace site's
/// or a `BTI C`). `word(a)` reads the word at `a` (`None`: unreadable, the
/// function ends there).
pub fn function_end(
    start: u64,
    bound: u64,
    word: impl Fn(u64) -> Option<u32>,
    mut noreturn: impl FnMut(u64) -> bool,
) -> u64 {
    let mut reach = start;
    let mut pc = start;
    let mut after_call = false;
    while pc < bound {
        let Some(w) = word(pc) else {
            return pc;
        };
        let insn = decode(w, pc);
        let target = match insn.flow {
            Flow::Jmp(t) | Flow::Branch(t, _) => Some(t),
            _ => None,
        };
        let inside = target.is_some_and(|t| (start..bound).contains(&t));
        if let Some(t) = target.filter(|_| inside) {
            reach = reach.max(t);
        }
        let detour = matches!(insn.flow, Flow::Jmp(t) if !inside && is_veneer_detour(pc, t, &word));
        if after_call && pc >= reach && matches!(insn.flow, Flow::Jmp(_)) && !inside && !detour {
            return pc;
        }
        after_call = matches!(insn.flow, Flow::Call(_));
        let ends = match insn.flow {
            Flow::Jmp(_) => !detour,
            Flow::Brk(_) => w != KPROBE_BRK,
            Flow::Ret(..) | Flow::ExceptionRet | Flow::Undefined => true,
            Flow::Call(t) => noreturn(t),
            _ => false,
        };
        let Some(next) = pc.checked_add(4) else {
            return bound;
        };
        pc = next;
        if ends && pc > reach {
            return pc;
        }
    }
    bound
}
