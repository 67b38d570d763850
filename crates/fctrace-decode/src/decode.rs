// SPDX-License-Identifier: GPL-2.0

//! x86-64 instruction length and control-flow decoder.
//!
//! This file is self-contained on purpose: it is compiled both as the body of
//! the `fctrace-decode` crate and, inside the kernel module, through
//! `#[path = "../crates/fctrace-decode/src/decode.rs"] pub mod decode;`.
//! Therefore it declares no modules, carries no crate-level attributes, uses
//! nothing outside `core`, and never panics, allocates or uses floats.
//!
//! Decoding follows the Intel SDM for 64-bit mode, with the same choices as
//! the iced-x86 decoder with default options (which the tests cross-check
//! against): `66` is ignored by near `call`/`jmp`/`jcc` (always rel32), `c4`
//! and `c5` are always VEX, `62` always EVEX, `8f` with a non-zero ModRM.reg
//! is XOP. Lengths are exact for every valid instruction; for some invalid
//! encodings (e.g. a misplaced `lock`, undefined VEX opcodes) the decoder is
//! more lenient than the CPU and still returns a length.

/// General purpose register numbers in x86 encoding order: 0=rax 1=rcx 2=rdx
/// 3=rbx 4=rsp 5=rbp 6=rsi 7=rdi 8..15=r8..r15.
pub type Reg = u8;

/// A memory operand `seg:[base + index*scale + disp]` (or rip-relative:
/// `[rip_next + disp]`, where `rip_next` is the address of the next
/// instruction, see [`Mem::rip_target`]).
///
/// Register numbers do not say whether the address size is 64 or 32 bits
/// (a `67` prefix, never used for branches in kernel code).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mem {
    /// Base register, `None` when absent (SIB base 5 with mod 0, or rip-relative).
    pub base: Option<Reg>,
    /// Index register, `None` when absent (SIB index 4 without REX.X).
    pub index: Option<Reg>,
    /// Scale factor 1, 2, 4 or 8 taken from the SIB byte (1 when there is no
    /// SIB byte); only meaningful when `index` is `Some`.
    pub scale: u8,
    /// Sign-extended displacement (0 when the encoding has none).
    pub disp: i32,
    /// `true` for `[rip + disp]` addressing (`base` and `index` are `None`).
    pub rip_relative: bool,
    /// Segment override prefix, if any. In 64-bit mode `fs`/`gs` take
    /// precedence over `es`/`cs`/`ss`/`ds` overrides (which are reported as
    /// [`Seg::Other`] and have no effect on the address).
    pub segment: Option<Seg>,
}

impl Mem {
    /// The absolute address `next_ip + disp` of a rip-relative operand, where
    /// `next_ip` is the address just after the instruction (`ip + len`).
    /// Returns `None` if the operand is not rip-relative.
    pub fn rip_target(&self, next_ip: u64) -> Option<u64> {
        if self.rip_relative {
            Some(next_ip.wrapping_add(self.disp as i64 as u64))
        } else {
            None
        }
    }
}

/// A segment override prefix of a memory operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seg {
    /// `fs` (`64` prefix).
    Fs,
    /// `gs` (`65` prefix): per-CPU data in the kernel.
    Gs,
    /// `es`, `cs`, `ss` or `ds` (`26`, `2e`, `36`, `3e`): no effect in 64-bit mode.
    Other,
}

/// What an instruction does to control flow.
///
/// Targets are absolute addresses (`ip + len + rel`, wrapping).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Falls through to the next instruction: anything not listed below,
    /// including `int n`, `int1`, `syscall`, `sysenter`, `hlt`, `vmcall`,
    /// `vmmcall`, `vmrun`, `vmlaunch`/`vmresume`.
    Next,
    /// `call rel32`: absolute target.
    Call(u64),
    /// `call *%reg`.
    CallReg(Reg),
    /// `call *mem`; also the far indirect call `lcall *mem` (`ff /3`).
    CallMem(Mem),
    /// `jmp rel8` / `jmp rel32`: absolute target.
    Jmp(u64),
    /// `jmp *%reg`.
    JmpReg(Reg),
    /// `jmp *mem`; also the far indirect jump `ljmp *mem` (`ff /5`).
    JmpMem(Mem),
    /// Conditional jumps (`jcc rel8/rel32`, `jrcxz`, `loop`, `loope`,
    /// `loopne`) and `xbegin` (whose target is the abort path): absolute
    /// target, and the condition code of a `jcc` (`None` for `jrcxz`, the
    /// `loop`s and `xbegin`, which branch on something else than RFLAGS).
    Jcc(u64, Option<Cond>),
    /// Near `ret` and `ret imm16`; also the other returns: far `lret`,
    /// `iret`, `sysret`, `sysexit`, `uiret`, `eretu`, `erets`, `rsm`,
    /// and `skinit`: control does not come back to the next instruction.
    Ret,
    /// `int3` (`0xcc`).
    Int3,
    /// `ud2` / `ud1` / `ud0` (the kernel's `BUG()`/`WARN()` sites).
    Ud,
}

/// An x86 condition code: the low 4 bits of a `jcc` opcode (`70+cc`,
/// `0f 80+cc`), which say which RFLAGS state makes the jump taken.
///
/// Odd codes are the negation of the even code below them (`jne` = not `je`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cond(u8);

impl Cond {
    /// `jo`: OF.
    pub const O: Cond = Cond(0);
    /// `jno`: !OF.
    pub const NO: Cond = Cond(1);
    /// `jb` / `jc` / `jnae`: CF.
    pub const B: Cond = Cond(2);
    /// `jae` / `jnc` / `jnb`: !CF.
    pub const AE: Cond = Cond(3);
    /// `je` / `jz`: ZF.
    pub const E: Cond = Cond(4);
    /// `jne` / `jnz`: !ZF.
    pub const NE: Cond = Cond(5);
    /// `jbe` / `jna`: CF or ZF.
    pub const BE: Cond = Cond(6);
    /// `ja` / `jnbe`: !CF and !ZF.
    pub const A: Cond = Cond(7);
    /// `js`: SF.
    pub const S: Cond = Cond(8);
    /// `jns`: !SF.
    pub const NS: Cond = Cond(9);
    /// `jp` / `jpe`: PF.
    pub const P: Cond = Cond(10);
    /// `jnp` / `jpo`: !PF.
    pub const NP: Cond = Cond(11);
    /// `jl` / `jnge`: SF != OF.
    pub const L: Cond = Cond(12);
    /// `jge` / `jnl`: SF == OF.
    pub const GE: Cond = Cond(13);
    /// `jle` / `jng`: ZF or SF != OF.
    pub const LE: Cond = Cond(14);
    /// `jg` / `jnle`: !ZF and SF == OF.
    pub const G: Cond = Cond(15);

    /// The condition with code `code` (only its low 4 bits count).
    pub const fn new(code: u8) -> Cond {
        Cond(code & 0xf)
    }

    /// The 4-bit code, 0..=15.
    pub const fn code(self) -> u8 {
        self.0
    }

    /// Whether the condition holds (the jump is taken) for the RFLAGS value
    /// `rflags`.
    pub fn holds(self, rflags: u64) -> bool {
        let cf = rflags & (1 << 0) != 0;
        let pf = rflags & (1 << 2) != 0;
        let zf = rflags & (1 << 6) != 0;
        let sf = rflags & (1 << 7) != 0;
        let of = rflags & (1 << 11) != 0;
        let base = match (self.0 >> 1) & 7 {
            0 => of,             // jo / jno
            1 => cf,             // jb / jae
            2 => zf,             // je / jne
            3 => cf || zf,       // jbe / ja
            4 => sf,             // js / jns
            5 => pf,             // jp / jnp
            6 => sf != of,       // jl / jge
            _ => zf || sf != of, // jle / jg
        };
        base ^ (self.0 & 1 != 0)
    }
}

/// One decoded instruction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    /// Length in bytes, 1..=15.
    pub len: u8,
    /// Effect on control flow.
    pub flow: Flow,
    /// The instruction is `endbr64` (`f3 0f 1e fa`).
    pub endbr64: bool,
    /// The instruction is a nop: `90` (also `66 90`, i.e. `xchg ax,ax`, but
    /// not `pause` nor `xchg r8,rax`), or any multi-byte `0f 1f /r` nop
    /// (`/0` is the documented nop, `/1`..`/7` are "reserved nops" that
    /// execute as nops too).
    pub nop: bool,
}

/// Why an instruction could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// The bytes end before the instruction does.
    Truncated,
    /// Not a valid 64-bit mode instruction (or longer than 15 bytes).
    Invalid,
}

/// Maximum length of an x86 instruction.
pub const MAX_INSN_LEN: usize = 15;

struct Cursor<'a> {
    b: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn byte(&mut self) -> Result<u8, DecodeError> {
        if self.pos >= MAX_INSN_LEN {
            return Err(DecodeError::Invalid);
        }
        match self.b.get(self.pos) {
            Some(&v) => {
                self.pos = self.pos.wrapping_add(1);
                Ok(v)
            }
            None => Err(DecodeError::Truncated),
        }
    }

    /// Reads a little-endian signed value of `n` bytes (1, 2, 4 or 8).
    fn signed(&mut self, n: u8) -> Result<i64, DecodeError> {
        let mut v: u64 = 0;
        let mut i: u32 = 0;
        while i < n as u32 {
            v |= (self.byte()? as u64).wrapping_shl(i.wrapping_mul(8));
            i = i.wrapping_add(1);
        }
        let bits = (n as u32).wrapping_mul(8);
        if bits == 0 || bits >= 64 {
            return Ok(v as i64);
        }
        let shift = 64u32.wrapping_sub(bits);
        Ok((v.wrapping_shl(shift) as i64).wrapping_shr(shift))
    }

    fn skip(&mut self, n: u8) -> Result<(), DecodeError> {
        let mut i = 0;
        while i < n {
            self.byte()?;
            i = i.wrapping_add(1);
        }
        Ok(())
    }
}

/// Decoded ModRM (+SIB +displacement).
struct ModRm {
    md: u8,
    reg: u8,
    /// Full register number of the r/m operand when `md == 3`.
    rm_reg: Reg,
    mem: Mem,
}

#[derive(Clone, Copy)]
struct Prefixes {
    opsize: bool,
    addrsize: bool,
    lock: bool,
    /// Last of `f2`/`f3`, or 0.
    rep: u8,
    seg: Option<Seg>,
    /// Raw REX byte (0 when absent or cancelled by a following prefix).
    rex: u8,
}

impl Prefixes {
    fn w(&self) -> bool {
        self.rex & 8 != 0
    }
    /// Operand size is 16 bits (`66` without REX.W).
    fn osz16(&self) -> bool {
        self.opsize && !self.w()
    }
    /// Size of a `z` immediate (2 or 4 bytes).
    fn immz(&self) -> u8 {
        if self.osz16() {
            2
        } else {
            4
        }
    }
    /// Mandatory prefix of SSE-style opcodes: last `f2`/`f3`, else `66`, else 0.
    fn mandatory(&self) -> u8 {
        if self.rep != 0 {
            self.rep
        } else if self.opsize {
            0x66
        } else {
            0
        }
    }
    /// Any prefix that makes a VEX/EVEX/XOP encoding invalid.
    fn forbids_vex(&self) -> bool {
        self.opsize || self.lock || self.rep != 0 || self.rex != 0
    }
}

/// Parses ModRM, SIB and displacement. `rex` supplies the R/X/B extension
/// bits (bits 2/1/0 as in a REX byte). `force_reg` treats the operand as a
/// register whatever the mod field says (`mov` to/from control/debug registers).
fn modrm(c: &mut Cursor<'_>, p: &Prefixes, rex: u8, force_reg: bool) -> Result<ModRm, DecodeError> {
    let m = c.byte()?;
    let md = if force_reg { 3 } else { m >> 6 };
    let reg = (m >> 3) & 7;
    let rm = m & 7;
    let bx = if rex & 1 != 0 { 8 } else { 0 };
    let xx = if rex & 2 != 0 { 8 } else { 0 };
    let mut mem = Mem {
        base: None,
        index: None,
        scale: 1,
        disp: 0,
        rip_relative: false,
        segment: p.seg,
    };
    if md == 3 {
        return Ok(ModRm {
            md,
            reg,
            rm_reg: rm | bx,
            mem,
        });
    }
    let mut disp_len = match md {
        1 => 1,
        2 => 4,
        _ => 0,
    };
    if rm == 4 {
        let sib = c.byte()?;
        let ss = sib >> 6;
        let idx = ((sib >> 3) & 7) | xx;
        let base = sib & 7;
        mem.scale = 1u8.wrapping_shl(u32::from(ss & 3));
        if idx != 4 {
            mem.index = Some(idx);
        }
        if base == 5 && md == 0 {
            disp_len = 4;
        } else {
            mem.base = Some(base | bx);
        }
    } else if rm == 5 && md == 0 {
        mem.rip_relative = true;
        disp_len = 4;
    } else {
        mem.base = Some(rm | bx);
    }
    mem.disp = c.signed(disp_len)? as i32;
    Ok(ModRm {
        md,
        reg,
        rm_reg: rm | bx,
        mem,
    })
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum VexKind {
    Vex,
    Evex,
    Xop,
}

/// Immediate size for VEX/EVEX map 1 (`0f`) opcodes.
fn vex_map1_imm(op: u8) -> u8 {
    match op {
        0x70..=0x73 | 0xc2 | 0xc4..=0xc6 => 1,
        _ => 0,
    }
}

/// Decodes the body (opcode, ModRM, immediate) of a VEX-, EVEX- or
/// XOP-encoded instruction once the prefix bytes are consumed.
fn decode_vex_body(
    c: &mut Cursor<'_>,
    p: &Prefixes,
    rex: u8,
    map: u8,
    kind: VexKind,
) -> Result<(), DecodeError> {
    let op = c.byte()?;
    let vex = kind == VexKind::Vex;
    let imm = match (kind, map) {
        (VexKind::Vex | VexKind::Evex, 1) => {
            if vex && op == 0x77 {
                // vzeroupper / vzeroall: no ModRM.
                return Ok(());
            }
            vex_map1_imm(op)
        }
        (VexKind::Vex | VexKind::Evex, 2) => 0,
        (VexKind::Vex | VexKind::Evex, 3) => 1,
        // EVEX maps 5 and 6 (AVX512-FP16): ModRM, no immediate.
        (VexKind::Evex, 5 | 6) => 0,
        // XOP maps.
        (VexKind::Xop, 8) => 1,
        (VexKind::Xop, 9) => 0,
        (VexKind::Xop, 10) => 4,
        _ => return Err(DecodeError::Invalid),
    };
    modrm(c, p, rex, false)?;
    c.skip(imm)
}

/// Decodes the instruction at the start of `bytes`, which sits at address `ip`.
///
/// Only the bytes of this one instruction are read (at most 15). Returns
/// [`DecodeError::Truncated`] if `bytes` ends too early and
/// [`DecodeError::Invalid`] for encodings that do not exist in 64-bit mode.
pub fn decode(bytes: &[u8], ip: u64) -> Result<Insn, DecodeError> {
    let mut c = Cursor { b: bytes, pos: 0 };
    let mut p = Prefixes {
        opsize: false,
        addrsize: false,
        lock: false,
        rep: 0,
        seg: None,
        rex: 0,
    };
    let op = loop {
        let b = c.byte()?;
        match b {
            0x66 => p.opsize = true,
            0x67 => p.addrsize = true,
            0xf0 => p.lock = true,
            0xf2 | 0xf3 => p.rep = b,
            0x26 | 0x2e | 0x36 | 0x3e => {
                if !matches!(p.seg, Some(Seg::Fs) | Some(Seg::Gs)) {
                    p.seg = Some(Seg::Other);
                }
            }
            0x64 => p.seg = Some(Seg::Fs),
            0x65 => p.seg = Some(Seg::Gs),
            0x40..=0x4f => {
                p.rex = b;
                continue;
            }
            _ => break b,
        }
        // A legacy prefix after REX cancels the REX.
        p.rex = 0;
    };

    let rex = p.rex;
    let mut flow = Flow::Next;
    let mut endbr64 = false;
    let mut nop = false;
    // Relative branch: (size of rel, kind) where kind 0=call 1=jmp 2=jcc.
    let mut rel: Option<(u8, u8)> = None;
    // The condition code of a `jcc` (kind 2).
    let mut cond: Option<Cond> = None;

    match op {
        0x0f => {
            let op2 = c.byte()?;
            match op2 {
                0x00..=0x03
                | 0x0d
                | 0x10..=0x1d
                | 0x28..=0x2f
                | 0x40..=0x6f
                | 0x74..=0x76
                | 0x79
                | 0x7c..=0x7f
                | 0x90..=0x9f
                | 0xa3
                | 0xa5
                | 0xa6
                | 0xa7
                | 0xab
                | 0xad..=0xb7
                | 0xbb..=0xbf
                | 0xc0
                | 0xc1
                | 0xc3
                | 0xc7
                | 0xd0..=0xfe => {
                    let m = modrm(&mut c, &p, rex, false)?;
                    if op2 == 0x01 && m.md == 3 {
                        let rm = m.rm_reg & 7;
                        let mp = p.mandatory();
                        // f3 0f 01 ec uiret; f2/f3 0f 01 ca erets/eretu;
                        // 0f 01 de skinit (never comes back).
                        if (m.reg == 5 && rm == 4 && mp == 0xf3)
                            || (m.reg == 1 && rm == 2 && (mp == 0xf2 || mp == 0xf3))
                            || (m.reg == 3 && rm == 6)
                        {
                            flow = Flow::Ret;
                        }
                    }
                }
                0x1e => {
                    let m = modrm(&mut c, &p, rex, false)?;
                    // endbr64 = f3 0f 1e fa (REX bits are ignored, as by iced).
                    endbr64 = p.mandatory() == 0xf3 && m.md == 3 && m.reg == 7 && m.rm_reg & 7 == 2;
                }
                0x1f => {
                    modrm(&mut c, &p, rex, false)?;
                    nop = true;
                }
                0x0f => {
                    // 3DNow!: ModRM, then the opcode suffix as imm8.
                    modrm(&mut c, &p, rex, false)?;
                    c.skip(1)?;
                }
                0x20..=0x23 => {
                    modrm(&mut c, &p, rex, true)?;
                }
                0x70..=0x73 | 0xa4 | 0xac | 0xba | 0xc2 | 0xc4..=0xc6 => {
                    modrm(&mut c, &p, rex, false)?;
                    c.skip(1)?;
                }
                0x78 => {
                    modrm(&mut c, &p, rex, false)?;
                    // 66: extrq xmm, imm8, imm8; f2: insertq xmm, xmm, imm8, imm8.
                    if matches!(p.mandatory(), 0x66 | 0xf2) {
                        c.skip(2)?;
                    }
                }
                0xb8 => {
                    // popcnt needs f3; jmpe does not exist in 64-bit mode.
                    if p.mandatory() != 0xf3 {
                        return Err(DecodeError::Invalid);
                    }
                    modrm(&mut c, &p, rex, false)?;
                }
                0xb9 | 0xff => {
                    // ud1 / ud0.
                    modrm(&mut c, &p, rex, false)?;
                    flow = Flow::Ud;
                }
                0x0b => flow = Flow::Ud,
                // sysret / sysexit / rsm.
                0x07 | 0x35 | 0xaa => flow = Flow::Ret,
                0x05
                | 0x06
                | 0x08
                | 0x09
                | 0x0e
                | 0x30..=0x34
                | 0x37
                | 0x77
                | 0xa0..=0xa2
                | 0xa8
                | 0xa9
                | 0xc8..=0xcf => {}
                0x80..=0x8f => {
                    rel = Some((4, 2));
                    cond = Some(Cond::new(op2));
                }
                0x38 => {
                    c.byte()?;
                    modrm(&mut c, &p, rex, false)?;
                }
                0x3a => {
                    c.byte()?;
                    modrm(&mut c, &p, rex, false)?;
                    c.skip(1)?;
                }
                // 04 0a 0c 24..27 36 39 3b..3f 7a 7b
                _ => return Err(DecodeError::Invalid),
            }
        }
        0x00..=0x3f => match op & 7 {
            0..=3 => {
                modrm(&mut c, &p, rex, false)?;
            }
            4 => c.skip(1)?,
            5 => c.skip(p.immz())?,
            // 06 07 0e 16 17 1e 1f 27 2f 37 3f (prefixes were consumed above).
            _ => return Err(DecodeError::Invalid),
        },
        0x50..=0x5f
        | 0x6c..=0x6f
        | 0x91..=0x99
        | 0x9b..=0x9f
        | 0xa4..=0xa7
        | 0xaa..=0xaf
        | 0xc9
        | 0xd7
        | 0xec..=0xef
        | 0xf1
        | 0xf4
        | 0xf5
        | 0xf8..=0xfd => {}
        0x90 => nop = p.rep != 0xf3 && rex & 1 == 0,
        0x63 | 0x84..=0x8e | 0xd0..=0xd3 | 0xd8..=0xdf => {
            modrm(&mut c, &p, rex, false)?;
        }
        0x68 => c.skip(p.immz())?,
        0x69 => {
            modrm(&mut c, &p, rex, false)?;
            c.skip(p.immz())?;
        }
        0x6a | 0xa8 | 0xb0..=0xb7 | 0xcd | 0xe4..=0xe7 => c.skip(1)?,
        0x6b | 0x80 | 0x83 | 0xc0 | 0xc1 => {
            modrm(&mut c, &p, rex, false)?;
            c.skip(1)?;
        }
        0x70..=0x7f => {
            rel = Some((1, 2));
            cond = Some(Cond::new(op));
        }
        // loopne / loope / loop / jrcxz: no condition code.
        0xe0..=0xe3 => rel = Some((1, 2)),
        0x81 => {
            modrm(&mut c, &p, rex, false)?;
            c.skip(p.immz())?;
        }
        0x8f => {
            // pop r/m (reg 0) or XOP (map select >= 8 in the next byte).
            let nb = *c.b.get(c.pos).ok_or(DecodeError::Truncated)?;
            if (nb >> 3) & 7 == 0 {
                modrm(&mut c, &p, rex, false)?;
            } else if nb & 0x1f >= 8 {
                if p.forbids_vex() {
                    return Err(DecodeError::Invalid);
                }
                let b1 = c.byte()?;
                c.byte()?;
                decode_vex_body(&mut c, &p, (!b1 >> 5) & 7, b1 & 0x1f, VexKind::Xop)?;
            } else {
                return Err(DecodeError::Invalid);
            }
        }
        0xa0..=0xa3 => c.skip(if p.addrsize { 4 } else { 8 })?,
        0xa9 => c.skip(p.immz())?,
        0xb8..=0xbf => c.skip(if p.w() { 8 } else { p.immz() })?,
        0xc2 | 0xca => {
            c.skip(2)?;
            flow = Flow::Ret;
        }
        0xc3 | 0xcb | 0xcf => flow = Flow::Ret,
        0xc4 | 0xc5 | 0x62 => {
            if p.forbids_vex() {
                return Err(DecodeError::Invalid);
            }
            let b1 = c.byte()?;
            if op == 0xc5 {
                // c5 RvvvvLpp: map 0f.
                decode_vex_body(&mut c, &p, (!b1 >> 5) & 4, 1, VexKind::Vex)?;
            } else if op == 0xc4 {
                // c4 RXBmmmmm WvvvvLpp.
                c.byte()?;
                decode_vex_body(&mut c, &p, (!b1 >> 5) & 7, b1 & 0x1f, VexKind::Vex)?;
            } else {
                // 62 RXBR'0mmm Wvvvv1pp zLLbVaaa.
                let b2 = c.byte()?;
                c.byte()?;
                if b1 & 0x08 != 0 || b2 & 0x04 == 0 {
                    return Err(DecodeError::Invalid);
                }
                decode_vex_body(&mut c, &p, (!b1 >> 5) & 7, b1 & 7, VexKind::Evex)?;
            }
        }
        0xc6 | 0xc7 => {
            let m = modrm(&mut c, &p, rex, false)?;
            let imm = if op == 0xc6 { 1 } else { p.immz() };
            if m.reg == 0 {
                c.skip(imm)?;
            } else if m.md == 3 && m.reg == 7 && m.rm_reg & 7 == 0 {
                if op == 0xc6 {
                    // xabort imm8
                    c.skip(1)?;
                } else {
                    // xbegin rel16/32: the target is the abort handler.
                    rel = Some((imm, 2));
                }
            } else {
                return Err(DecodeError::Invalid);
            }
        }
        0xc8 => c.skip(3)?,
        0xcc => flow = Flow::Int3,
        0xe8 => rel = Some((4, 0)),
        0xe9 => rel = Some((4, 1)),
        0xeb => rel = Some((1, 1)),
        0xf6 | 0xf7 => {
            let m = modrm(&mut c, &p, rex, false)?;
            if m.reg < 2 {
                c.skip(if op == 0xf6 { 1 } else { p.immz() })?;
            }
        }
        0xfe => {
            let m = modrm(&mut c, &p, rex, false)?;
            if m.reg >= 2 {
                return Err(DecodeError::Invalid);
            }
        }
        0xff => {
            let m = modrm(&mut c, &p, rex, false)?;
            flow = match (m.reg, m.md == 3) {
                (0, _) | (1, _) | (6, _) => Flow::Next,
                (2, true) => Flow::CallReg(m.rm_reg),
                (2, false) | (3, false) => Flow::CallMem(m.mem),
                (4, true) => Flow::JmpReg(m.rm_reg),
                (4, false) | (5, false) => Flow::JmpMem(m.mem),
                _ => return Err(DecodeError::Invalid),
            };
        }
        // 60 61 82 9a ce d4 d5 d6 ea (and nothing else reaches here).
        _ => return Err(DecodeError::Invalid),
    }

    if let Some((size, kind)) = rel {
        let r = c.signed(size)?;
        let target = ip.wrapping_add(c.pos as u64).wrapping_add(r as u64);
        flow = match kind {
            0 => Flow::Call(target),
            1 => Flow::Jmp(target),
            _ => Flow::Jcc(target, cond),
        };
    }

    Ok(Insn {
        len: c.pos as u8,
        flow,
        endbr64,
        nop,
    })
}

/// Linear sweep over a whole function body `bytes` starting at address `ip`:
/// calls `f(offset, &insn)` for each instruction in order; stops at the end
/// of `bytes`. Returns `Err((offset, error))` at the first undecodable
/// instruction (an instruction running past the end of `bytes` is
/// [`DecodeError::Truncated`]).
pub fn scan<F: FnMut(u32, &Insn)>(
    bytes: &[u8],
    ip: u64,
    mut f: F,
) -> Result<(), (u32, DecodeError)> {
    let mut off: usize = 0;
    while let Some(rest) = bytes.get(off..) {
        if rest.is_empty() {
            break;
        }
        match decode(rest, ip.wrapping_add(off as u64)) {
            Ok(insn) => {
                f(off as u32, &insn);
                off = off.wrapping_add(insn.len as usize);
            }
            Err(e) => return Err((off as u32, e)),
        }
    }
    Ok(())
}

/// The constant address the instruction at the start of `bytes` (at `ip`) loads into a
/// 64-bit register, if it is one of the two forms the kernel's code model uses for that:
/// `mov $imm32, %r64` (`REX.W c7 /0`, register operand; the immediate is sign-extended,
/// so it reaches the top 2 GiB, where the kernel's text and data are linked) and `lea
/// disp32(%rip), %r64` (`REX.W 8d`, rip-relative). `None` for anything else (a store of
/// the constant to memory included). A function whose address is loaded so passes it as
/// a function pointer: `folio_add_lru()` gives `lru_add()` to `folio_batch_move_lru()`,
/// which calls it with a lock held (see the module's `Func::fixed_callees`).
pub fn loaded_address(bytes: &[u8], ip: u64) -> Option<u64> {
    let [rex, op, modrm, i0, i1, i2, i3, ..] = *bytes else {
        return None;
    };
    if rex & 0xf8 != 0x48 {
        return None;
    }
    let imm = i32::from_le_bytes([i0, i1, i2, i3]) as i64 as u64;
    match op {
        // mod 11, reg 0 (the `/0` of `c7`); REX.B only extends the register.
        0xc7 if modrm & 0xf8 == 0xc0 => Some(imm),
        // mod 00, r/m 101: [rip + disp32]; REX.R only extends the destination.
        0x8d if modrm & 0xc7 == 0x05 => Some(ip.wrapping_add(7).wrapping_add(imm)),
        _ => None,
    }
}

/// Whether a breakpoint trap nobody claimed is a *late* int3 to run again: one executed
/// at an address whose `0xcc` another CPU has just replaced by the instruction's first
/// byte again (`rust-kmod/trap_notifier.rs`). `before` are the two bytes before the trap's
/// return address. Not when the `0xcc` is still there (someone else's breakpoint), nor
/// when the two bytes are `cd 03`: that is `int $3`, a two-byte instruction whose trap
/// returns past both, and rewinding one byte would land inside it. (A restored `03`
/// opcode after an instruction ending in `cd` looks the same: not rewound either, the
/// kernel then reports the trap as it would without fctrace.)
pub fn late_int3_rewind(before: [u8; 2]) -> bool {
    !matches!(before, [_, 0xcc] | [0xcd, 0x03])
}
