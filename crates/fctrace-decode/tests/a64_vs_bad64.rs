// SPDX-License-Identifier: GPL-2.0
//! Cross-checks the A64 decoder (`fctrace_decode::a64`) against bad64, Binary
//! Ninja's AArch64 disassembler, which is generated from Arm's
//! machine-readable specification: over the whole branch and exception
//! space (every value of the opcode bits, with the register fields at their
//! edge values), over every hint, over four million words spread across the
//! whole 32-bit space, and over every word of Debian's arm64 kernel image.
//!
//! The image is `FCTRACE_A64_IMAGE`, else
//! `${XDG_CACHE_HOME:-$HOME/.cache}/fctrace/debian-arm64/vmlinuz-*`, which
//! `cargo xtask test` fetches (signed by Debian's archive key) before the host
//! tests; without one, that test prints `SKIP` and passes.

use fctrace_decode::a64::{self, Flow, Insn, Op, Pac, Test};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// What bad64 says, in our terms.
enum Want {
    /// This instruction exactly.
    Exact(Insn),
    /// A FEAT_CMPBR compare-and-branch: bad64 decodes it but cannot format its
    /// operands (`ErrorOperands`); the target is checked from the encoding.
    Compare(u64),
    /// Not allocated.
    Invalid,
}

/// A general purpose register's number (`None` for the others).
fn reg(r: bad64::Reg) -> Option<a64::Reg> {
    match r.name() {
        "xzr" | "wzr" | "sp" | "wsp" => Some(31),
        "fp" => Some(29),
        "lr" => Some(30),
        n if n.starts_with('x') || n.starts_with('w') => n[1..].parse().ok(),
        _ => None,
    }
}

fn label(i: &bad64::Instruction) -> u64 {
    for o in i.operands() {
        if let bad64::Operand::Label(bad64::Imm::Unsigned(a)) = o {
            return *a;
        }
    }
    panic!("no label in {i}")
}

/// The first two general purpose registers among the operands (0xff: none).
fn regs(i: &bad64::Instruction) -> [a64::Reg; 2] {
    let mut r = [0xff; 2];
    let mut n = 0;
    for o in i.operands() {
        if let bad64::Operand::Reg { reg: g, .. } = o {
            if let (Some(g), Some(slot)) = (reg(*g), r.get_mut(n)) {
                *slot = g;
                n += 1;
            }
        }
    }
    r
}

/// The unsigned immediate among the operands (a bit number, BRK's comment).
fn imm(i: &bad64::Instruction) -> u64 {
    i.operands()
        .iter()
        .find_map(|o| match o {
            bad64::Operand::Imm32 {
                imm: bad64::Imm::Unsigned(v),
                ..
            }
            | bad64::Operand::Imm64 {
                imm: bad64::Imm::Unsigned(v),
                ..
            } => Some(*v),
            _ => None,
        })
        .unwrap_or_else(|| panic!("no immediate in {i}"))
}

fn has_label(i: &bad64::Instruction) -> bool {
    i.operands()
        .iter()
        .any(|o| matches!(o, bad64::Operand::Label(_)))
}

const CONDS: [&str; 16] = [
    "eq", "ne", "cs", "cc", "mi", "pl", "vs", "vc", "hi", "ls", "ge", "lt", "gt", "le", "al", "nv",
];

fn is_cmpbr(w: u32) -> bool {
    w & 0x7f00_c000 == 0x7400_0000
        || w & 0x7f00_4000 == 0x7500_0000
        || w & 0xff00_8000 == 0x7400_8000
}

fn want(w: u32, pc: u64) -> Want {
    use bad64::Op as B;
    let i = match bad64::decode(w, pc) {
        Ok(i) => i,
        Err(_) if is_cmpbr(w) && (w >> 21) & 6 != 4 => {
            let imm9 = ((w >> 5) & 0x1ff) as i64;
            let off = ((imm9 << 55) >> 55) * 4;
            return Want::Compare(pc.wrapping_add(off as u64));
        }
        Err(_) => return Want::Invalid,
    };
    let op = i.op();
    let r = regs(&i);
    let flow = |flow| {
        Want::Exact(Insn {
            flow,
            op: Op::Other,
        })
    };
    let with = |op| {
        Want::Exact(Insn {
            flow: Flow::Next,
            op,
        })
    };
    let name = op.mnem();
    if let Some(c) = name.strip_prefix("b.") {
        let c = match c {
            "hs" => "cs",
            "lo" => "cc",
            c => c,
        };
        let cond = CONDS
            .iter()
            .position(|x| *x == c)
            .unwrap_or_else(|| panic!("condition {name}")) as u8;
        let consistent = w & 0x10 != 0;
        return flow(Flow::Branch(label(&i), Test::Cond { cond, consistent }));
    }
    if name.starts_with("cb") && !matches!(op, B::CBZ | B::CBNZ) {
        return Want::Compare(label(&i));
    }
    match op {
        B::B => flow(Flow::Jmp(label(&i))),
        B::BL => flow(Flow::Call(label(&i))),
        B::BR => flow(Flow::JmpReg(r[0], Pac::None)),
        B::BLR => flow(Flow::CallReg(r[0], Pac::None)),
        B::BRAAZ => flow(Flow::JmpReg(r[0], Pac::A(None))),
        B::BRABZ => flow(Flow::JmpReg(r[0], Pac::B(None))),
        B::BLRAAZ => flow(Flow::CallReg(r[0], Pac::A(None))),
        B::BLRABZ => flow(Flow::CallReg(r[0], Pac::B(None))),
        B::BRAA => flow(Flow::JmpReg(r[0], Pac::A(Some(r[1])))),
        B::BRAB => flow(Flow::JmpReg(r[0], Pac::B(Some(r[1])))),
        B::BLRAA => flow(Flow::CallReg(r[0], Pac::A(Some(r[1])))),
        B::BLRAB => flow(Flow::CallReg(r[0], Pac::B(Some(r[1])))),
        B::RET => flow(Flow::Ret(if r[0] == 0xff { 30 } else { r[0] }, Pac::None)),
        B::RETAA => flow(Flow::Ret(30, Pac::A(Some(31)))),
        B::RETAB => flow(Flow::Ret(30, Pac::B(Some(31)))),
        B::RETAASPPC | B::RETAASPPCR => flow(Flow::Ret(30, Pac::ASpPc)),
        B::RETABSPPC | B::RETABSPPCR => flow(Flow::Ret(30, Pac::BSpPc)),
        B::ERET | B::ERETAA | B::ERETAB | B::DRPS => flow(Flow::ExceptionRet),
        B::CBZ | B::CBNZ => {
            let wide = i
                .operands()
                .iter()
                .any(|o| matches!(o, bad64::Operand::Reg { reg, .. } if reg.size() == 8));
            let nonzero = op == B::CBNZ;
            let t = Test::Zero {
                reg: r[0],
                wide,
                nonzero,
            };
            flow(Flow::Branch(label(&i), t))
        }
        B::TBZ | B::TBNZ => {
            let bit = imm(&i) as u8;
            let nonzero = op == B::TBNZ;
            let t = Test::Bit {
                reg: r[0],
                bit,
                nonzero,
            };
            flow(Flow::Branch(label(&i), t))
        }
        B::BRK => flow(Flow::Brk(imm(&i) as u16)),
        B::UDF => flow(Flow::Undefined),
        B::NOP => with(Op::Nop),
        B::BTI => {
            let t = i
                .operands()
                .iter()
                .find_map(|o| match o {
                    bad64::Operand::Name(n) => {
                        let end = n.iter().position(|b| *b == 0).unwrap_or(n.len());
                        Some(String::from_utf8_lossy(&n[..end]).into_owned())
                    }
                    _ => None,
                })
                .unwrap_or_default();
            with(Op::Bti(match t.as_str() {
                "" => 0,
                "c" => 1,
                "j" => 2,
                "jc" => 3,
                _ => panic!("BTI {t}"),
            }))
        }
        B::PACIASP | B::PACIAZ | B::PACIBSP | B::PACIBZ | B::PACIA1716 | B::PACIB1716 => {
            with(Op::PacSign)
        }
        B::AUTIASP | B::AUTIAZ | B::AUTIBSP | B::AUTIBZ | B::AUTIA1716 | B::AUTIB1716 => {
            with(Op::PacAuth)
        }
        B::XPACLRI => with(Op::StripLr),
        // (The SVE ADR of vectors has no label.)
        B::ADR if has_label(&i) => with(Op::Adr(r[0], label(&i))),
        B::ADRP => with(Op::Adrp(r[0], label(&i))),
        B::LDR | B::LDRSW | B::PRFM if has_label(&i) => with(Op::Literal(label(&i))),
        _ => with(Op::Other),
    }
}

/// Words whose allocation the decoder judges: the branch and exception
/// part of the control group (not the system instructions), and the
/// reserved group.
fn judged(w: u32) -> bool {
    let top = (w >> 25) & 0xf;
    (top & 0b1110 == 0b1010 && w >> 24 != 0xd5) || (w >> 31 == 0 && top == 0)
}

/// `Err` with a description when the decoder and bad64 disagree on `w`.
fn check(w: u32, pc: u64) -> Result<Insn, String> {
    let ours = a64::decode(w, pc);
    let ok = match want(w, pc) {
        Want::Exact(i) => ours == i,
        Want::Compare(t) => matches!(ours.flow, Flow::Branch(x, Test::Compare { .. }) if x == t),
        Want::Invalid => {
            ours.flow == Flow::Undefined
                || (!judged(w)
                    && ours
                        == Insn {
                            flow: Flow::Next,
                            op: Op::Other,
                        })
        }
    };
    if ok {
        return Ok(ours);
    }
    let theirs = match bad64::decode(w, pc) {
        Ok(i) => format!("{i} ({:?} {:?})", i.op(), i.operands()),
        Err(e) => format!("{e:?}"),
    };
    Err(format!("{w:08x} at {pc:#x}: ours {ours:?}, bad64 {theirs}"))
}

/// Checks every word `words` yields; fails listing the first mismatches.
fn check_all(what: &str, words: impl Iterator<Item = (u32, u64)>) -> BTreeMap<&'static str, u64> {
    let mut bad = Vec::new();
    let mut n = 0u64;
    let mut kinds = BTreeMap::new();
    for (w, pc) in words {
        n += 1;
        match check(w, pc) {
            Ok(i) => *kinds.entry(kind(&i)).or_insert(0u64) += 1,
            Err(e) => bad.push(e),
        }
    }
    assert!(
        bad.is_empty(),
        "{what}: {} of {n} words differ from bad64, first ones:\n{}",
        bad.len(),
        bad[..bad.len().min(20)].join("\n")
    );
    eprintln!("{what}: {n} words agree with bad64: {kinds:?}");
    kinds
}

fn kind(i: &Insn) -> &'static str {
    match (i.op, i.flow) {
        (Op::Nop, _) => "Nop",
        (Op::Bti(_), _) => "Bti",
        (Op::PacSign, _) => "PacSign",
        (Op::PacAuth, _) => "PacAuth",
        (Op::StripLr, _) => "StripLr",
        (Op::Adr(..), _) => "Adr",
        (Op::Adrp(..), _) => "Adrp",
        (Op::Literal(_), _) => "Literal",
        (Op::Other, Flow::Next) => "Next",
        (Op::Other, Flow::Call(_)) => "Call",
        (Op::Other, Flow::CallReg(..)) => "CallReg",
        (Op::Other, Flow::Jmp(_)) => "Jmp",
        (Op::Other, Flow::JmpReg(..)) => "JmpReg",
        (Op::Other, Flow::Branch(..)) => "Branch",
        (Op::Other, Flow::Ret(..)) => "Ret",
        (Op::Other, Flow::ExceptionRet) => "ExceptionRet",
        (Op::Other, Flow::Brk(_)) => "Brk",
        (Op::Other, Flow::Undefined) => "Undefined",
    }
}

/// Register fields at their edges, and some others, for the low ten bits.
const LOWS: [u32; 8] = [0x000, 0x3ff, 0x3e0, 0x01f, 0x3fe, 0x11e, 0x0e9, 0x2a5];

#[test]
fn branch_and_exception_space() {
    // Bits 28:26 = 101; every value of bits 31:29 and 25:10.
    let words = (0u32..8).flat_map(|hi| {
        (0u32..1 << 16).flat_map(move |mid| {
            LOWS.iter().map(move |lo| {
                let w = hi << 29 | 0b101 << 26 | mid << 10 | lo;
                (w, 0xffff_8000_8010_0000u64 + u64::from(mid) * 4)
            })
        })
    });
    let kinds = check_all("branch space", words);
    for k in [
        "Call",
        "CallReg",
        "Jmp",
        "JmpReg",
        "Branch",
        "Ret",
        "ExceptionRet",
        "Brk",
        "Undefined",
    ] {
        assert!(
            kinds.get(k).copied().unwrap_or(0) > 0,
            "no {k} in the sweep"
        );
    }
}

#[test]
fn every_hint() {
    let words = (0u32..128).map(|imm| (0xd503_201f | imm << 5, 0x1000));
    let kinds = check_all("hints", words);
    assert_eq!(kinds.get("Nop"), Some(&1));
    assert_eq!(kinds.get("Bti"), Some(&4));
    assert_eq!(kinds.get("PacSign"), Some(&6));
    assert_eq!(kinds.get("PacAuth"), Some(&6));
}

#[test]
fn words_across_the_space() {
    // Four million words spread over all 2^32 (Weyl sequence), at varying addresses.
    let words = (0u64..1 << 22).map(|i| {
        let w = (i.wrapping_mul(0x9e37_79b9) as u32) ^ (i as u32 >> 3);
        (
            w,
            0xffff_8000_8000_0000u64.wrapping_add(i.wrapping_mul(0x1_0004)),
        )
    });
    let kinds = check_all("spread", words);
    for k in ["Adr", "Adrp", "Literal", "Undefined", "Call", "Jmp"] {
        assert!(
            kinds.get(k).copied().unwrap_or(0) > 0,
            "no {k} in the sample"
        );
    }
}

#[test]
fn handmade() {
    let pc = 0xffff_8000_8010_0000u64;
    let d = |w| a64::decode(w, pc);
    // bl .+0x40; bl .-4
    assert_eq!(d(0x9400_0010).flow, Flow::Call(pc + 0x40));
    assert_eq!(d(0x97ff_ffff).flow, Flow::Call(pc - 4));
    // blr x8; blraa x8, x17; br x16; ret; retaa
    assert_eq!(d(0xd63f_0100).flow, Flow::CallReg(8, Pac::None));
    assert_eq!(d(0xd73f_0911).flow, Flow::CallReg(8, Pac::A(Some(17))));
    assert_eq!(d(0xd61f_0200).flow, Flow::JmpReg(16, Pac::None));
    assert_eq!(d(0xd65f_03c0).flow, Flow::Ret(30, Pac::None));
    assert_eq!(d(0xd65f_0bff).flow, Flow::Ret(30, Pac::A(Some(31))));
    // b.ne .+8 and bc.ne .+8
    let cond = |consistent| {
        Flow::Branch(
            pc + 8,
            Test::Cond {
                cond: 1,
                consistent,
            },
        )
    };
    assert_eq!(d(0x5400_0041).flow, cond(false));
    assert_eq!(d(0x5400_0051).flow, cond(true));
    // cbgt x1, x2, .+8; cblt x1, #5, .+8 (cc 1); cbbeq w1, w2, .-4 (cc 6)
    let cmp = |t, cc, bits, with| {
        Flow::Branch(
            t,
            Test::Compare {
                reg: 1,
                cc,
                bits,
                with,
            },
        )
    };
    assert_eq!(
        d(0xf402_0041).flow,
        cmp(pc + 8, 0, 64, a64::Operand::Reg(2))
    );
    assert_eq!(
        d(0xf522_8041).flow,
        cmp(pc + 8, 1, 64, a64::Operand::Imm(5))
    );
    assert_eq!(d(0x74c2_bfe1).flow, cmp(pc - 4, 6, 8, a64::Operand::Reg(2)));
    // brk #0x800 (BUG()), udf #0
    assert_eq!(d(0xd421_0000).flow, Flow::Brk(0x800));
    // brk #0x004 (KPROBES_BRK_IMM): the word a kprobe writes
    assert_eq!(d(a64::KPROBE_BRK).flow, Flow::Brk(0x004));
    assert_eq!(d(0x0000_0000).flow, Flow::Undefined);
    // paciasp, autiasp, bti c, nop; adrp x0, page; ldr x0, literal
    assert_eq!(d(0xd503_233f).op, Op::PacSign);
    assert_eq!(d(0xd503_23bf).op, Op::PacAuth);
    assert_eq!(d(0xd503_245f).op, Op::Bti(1));
    assert_eq!(d(a64::NOP).op, Op::Nop);
    assert_eq!(d(0xb000_0000).op, Op::Adrp(0, pc + 0x1000));
    assert_eq!(d(0x5800_0040).op, Op::Literal(pc + 8));
    assert_eq!(
        d(a64::MOV_X9_LR),
        Insn {
            flow: Flow::Next,
            op: Op::Other
        }
    );
}

#[test]
fn ftrace_sites() {
    let f = 0xffff_8000_8020_0000u64;
    let bl = 0x9400_0000 | 0x10; // bl .+0x40
    let bti_c = 0xd503_245f;
    let paciasp = 0xd503_233f;
    // Before ftrace initialises the site, and after (patched, enabled).
    assert_eq!(
        a64::ftrace_site([a64::NOP, a64::NOP, paciasp], f),
        Some(f + 4)
    );
    assert_eq!(
        a64::ftrace_site([a64::MOV_X9_LR, a64::NOP, paciasp], f),
        Some(f + 4)
    );
    assert_eq!(
        a64::ftrace_site([a64::MOV_X9_LR, bl, paciasp], f),
        Some(f + 4)
    );
    // With BTI.
    assert_eq!(
        a64::ftrace_site([bti_c, a64::NOP, a64::NOP], f),
        Some(f + 8)
    );
    assert_eq!(
        a64::ftrace_site([bti_c, a64::MOV_X9_LR, bl], f),
        Some(f + 8)
    );
    // Not a site: a function without one, or a branch where the BL goes.
    assert_eq!(
        a64::ftrace_site([paciasp, 0xa9bf_7bfd, 0x9100_03fd], f),
        None
    );
    assert_eq!(a64::ftrace_site([a64::NOP, 0x1400_0010, 0], f), None);
    assert_eq!(a64::ftrace_site([bti_c, paciasp, a64::NOP], f), None);
    // A kprobe's BRK on the first word: the site's first word, or BTI C.
    let brk = a64::KPROBE_BRK;
    assert_eq!(a64::ftrace_site([brk, a64::NOP, paciasp], f), Some(f + 4));
    assert_eq!(a64::ftrace_site([brk, bl, paciasp], f), Some(f + 4));
    assert_eq!(a64::ftrace_site([brk, a64::MOV_X9_LR, bl], f), Some(f + 8));
    assert_eq!(
        a64::ftrace_site([brk, a64::MOV_X9_LR, a64::NOP], f),
        Some(f + 8)
    );
    // (Either: a site after BTI C, or a body that starts with NOP.)
    assert_eq!(a64::ftrace_site([brk, a64::NOP, a64::NOP], f), None);
    // A probed function without a site.
    assert_eq!(a64::ftrace_site([brk, 0xa9bf_7bfd, 0x9100_03fd], f), None);
}

fn image() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("FCTRACE_A64_IMAGE") {
        return Some(p.into());
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    let dir = std::fs::read_dir(cache.join("fctrace/debian-arm64")).ok()?;
    dir.filter_map(|e| e.ok().map(|e| e.path())).find(|p| {
        p.file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz-"))
    })
}

/// Where the arm64 kernel image is linked (`KIMAGE_VADDR`, without KASLR).
const KIMAGE_VADDR: u64 = 0xffff_8000_8000_0000;

/// A hex address of a symbol list.
fn hex(s: &str) -> u64 {
    u64::from_str_radix(s, 16).expect("a hex address")
}

/// Debian's arm64 image, its ftrace sites (`FCTRACE_A64_SITES`) and its text
/// symbols (`FCTRACE_A64_SYMS`), as `cargo xtask test` lists them; without
/// them, `None` (the test prints `SKIP` and passes).
fn image_sites_and_symbols() -> Option<(Vec<u8>, String, String)> {
    let found = (
        image(),
        std::env::var_os("FCTRACE_A64_SITES"),
        std::env::var_os("FCTRACE_A64_SYMS"),
    );
    let (Some(img), Some(sites), Some(syms)) = found else {
        eprintln!("SKIP: no arm64 image, FCTRACE_A64_SITES or FCTRACE_A64_SYMS");
        return None;
    };
    let data = std::fs::read(&img).unwrap_or_else(|e| panic!("{}: {e}", img.display()));
    let read =
        |p: &std::ffi::OsStr| std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{p:?}: {e}"));
    Some((data, read(&sites), read(&syms)))
}

#[test]
fn every_word_of_debians_arm64_image() {
    let Some(path) = image() else {
        eprintln!("SKIP: no arm64 image (set FCTRACE_A64_IMAGE)");
        return;
    };
    let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    // The arm64 boot image: "ARM\x64" at offset 56 of its header.
    assert_eq!(
        &data[56..60],
        b"ARM\x64",
        "{} is not an arm64 Image",
        path.display()
    );
    const KIMAGE_VADDR: u64 = 0xffff_8000_8000_0000;
    let words = data.chunks_exact(4).enumerate().map(|(i, c)| {
        let w = u32::from_le_bytes(c.try_into().expect("4 bytes"));
        (w, KIMAGE_VADDR + i as u64 * 4)
    });
    let kinds = check_all(&path.display().to_string(), words);
    // A kernel built with pointer authentication and BTI-less ftrace sites:
    // hundreds of thousands of calls, tens of thousands of signed returns.
    for (k, at_least) in [
        ("Call", 200_000),
        ("CallReg", 5_000),
        ("Ret", 20_000),
        ("PacSign", 20_000),
        ("Nop", 50_000),
    ] {
        let n = kinds.get(k).copied().unwrap_or(0);
        assert!(n >= at_least, "only {n} {k} in {}", path.display());
    }
}

/// Every ftrace site of Debian's arm64 kernel, as the running kernel has them
/// (`FCTRACE_A64_SITES`: `FUNCTION SITE NAME`, from its kallsyms and
/// `available_filter_functions_addrs`, which `cargo xtask test` lists by
/// booting the image without KASLR): `a64::ftrace_site()` on the image's
/// words at each function finds that site.
#[test]
fn ftrace_site_of_every_traceable_function() {
    let (Some(img), Some(sites)) = (image(), std::env::var_os("FCTRACE_A64_SITES")) else {
        eprintln!("SKIP: no arm64 image or no FCTRACE_A64_SITES");
        return;
    };
    let data = std::fs::read(&img).unwrap_or_else(|e| panic!("{}: {e}", img.display()));
    let text = std::fs::read_to_string(&sites).unwrap_or_else(|e| panic!("{sites:?}: {e}"));
    const KIMAGE_VADDR: u64 = 0xffff_8000_8000_0000;
    let word = |a: u64| {
        let off = usize::try_from(a - KIMAGE_VADDR).expect("an offset");
        u32::from_le_bytes(data[off..off + 4].try_into().expect("4 bytes"))
    };
    let (mut n, mut after_bti, mut wrong) = (0, 0, Vec::new());
    let mut unknown_probed = 0usize;
    for l in text.lines() {
        let f: Vec<&str> = l.split(' ').collect();
        let hex = |s: &str| u64::from_str_radix(s, 16).expect("a hex address");
        let (func, site, name) = (hex(f[0]), hex(f[1]), f[2]);
        let entry = [word(func), word(func + 4), word(func + 8)];
        let got = a64::ftrace_site(entry, func);
        if got != Some(site) {
            wrong.push(format!(
                "{name} at {func:#x}: site {site:#x}, decoder {got:x?}"
            ));
        }
        // With a kprobe on the function (its BRK on the first word): the same
        // site, or none where the words after it do not tell.
        let probed = a64::ftrace_site([a64::KPROBE_BRK, entry[1], entry[2]], func);
        match probed {
            None => unknown_probed += 1,
            Some(s) if s == site => {}
            Some(s) => wrong.push(format!(
                "{name} at {func:#x} with a kprobe: site {site:#x}, decoder {s:#x}"
            )),
        }
        after_bti += usize::from(site == func + 8);
        n += 1;
    }
    assert!(
        wrong.is_empty(),
        "{} of {n} functions:\n{}",
        wrong.len(),
        wrong[..wrong.len().min(20)].join("\n")
    );
    // Tens of thousands of traceable functions; this kernel has no BTI.
    assert!(n >= 20_000, "only {n} ftrace sites in {sites:?}");
    assert_eq!(after_bti, 0, "sites after a BTI C in a kernel without BTI");
    // A kprobe on a function hides its ftrace site only where the body
    // starts with NOP (an alternative's place).
    assert!(
        unknown_probed * 100 <= n,
        "{unknown_probed} of {n} sites not found under a kprobe"
    );
    eprintln!("{n} ftrace sites agree; {unknown_probed} not found under a kprobe");
}

/// Every traceable function of Debian's arm64 kernel (`FCTRACE_A64_SITES`),
/// up to its end (`a64::function_end()`, before the next text symbol of
/// `FCTRACE_A64_SYMS`: `ADDRESS NAME`, from the running kernel's kallsyms,
/// weak functions included): the call sites `a64::call_site()` finds in
/// each. Every direct call and tail call must go to a function's entry (a
/// symbol's start).
///
/// A function that ends with a call of a function that never returns is
/// followed by unnamed code up to the next symbol (the alternatives'
/// replacement sequences): `function_end()` needs to know those callees.
/// Functions that never return, which GCC makes the last call of a function.
use a64::NORETURN;

#[test]
fn call_sites_of_every_traceable_function() {
    let Some((data, sites, syms)) = image_sites_and_symbols() else {
        return;
    };
    let end_of_image = KIMAGE_VADDR + data.len() as u64;
    let mut starts: Vec<u64> = syms
        .lines()
        .map(|l| hex(l.split_once(' ').expect("ADDRESS NAME").0))
        .filter(|a| (KIMAGE_VADDR..end_of_image).contains(a))
        .collect();
    starts.sort();
    starts.dedup();
    // The functions that never return which a function may end with a call of.
    let noreturn: std::collections::HashSet<u64> = syms
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter(|(_, name)| NORETURN.contains(name))
        .map(|(a, _)| hex(a))
        .collect();
    let word = |a: u64| {
        let off = usize::try_from(a - KIMAGE_VADDR).expect("an offset");
        u32::from_le_bytes(data[off..off + 4].try_into().expect("4 bytes"))
    };
    let entry = |t: u64| starts.binary_search(&t).is_ok();
    let mut n = std::collections::BTreeMap::<&str, usize>::new();
    let mut wrong = Vec::new();
    for l in sites.lines() {
        let f: Vec<&str> = l.split(' ').collect();
        let (start, name) = (hex(f[0]), f[2]);
        let i = starts.partition_point(|&a| a <= start);
        let Some(&bound) = starts.get(i) else {
            continue;
        };
        let end = a64::function_end(start, bound, |a| Some(word(a)), |t| noreturn.contains(&t));
        *n.entry("functions").or_default() += 1;
        // With a kprobe on the function (its BRK on the first word, a kprobe event or
        // fctrace's own hooks on do_exit() and wake_up_new_task()): the same end.
        let probed = |a: u64| Some(if a == start { a64::KPROBE_BRK } else { word(a) });
        let end_probed = a64::function_end(start, bound, probed, |t| noreturn.contains(&t));
        if end_probed != end {
            wrong.push(format!(
                "{name}: ends at +{:#x}, with a kprobe at +{:#x}",
                end - start,
                end_probed - start
            ));
        }
        let inside = |t: u64| (start..end).contains(&t);
        for pc in (start..end).step_by(4) {
            let insn = a64::decode(word(pc), pc);
            // A detour through a linker's veneer (erratum 843419) is no site.
            if let a64::Flow::Jmp(t) = insn.flow {
                if !inside(t) && a64::is_veneer_detour(pc, t, |a| Some(word(a))) {
                    *n.entry("veneer detour").or_default() += 1;
                    continue;
                }
            }
            let Some(site) = a64::call_site(insn, inside) else {
                continue;
            };
            // The module refuses a function with a branch through an authenticated
            // pointer (engine/arming/arm64.rs): the kernel signs return addresses only.
            if let a64::Site::Call(a64::Target::Reg(_, pac))
            | a64::Site::Tail(a64::Target::Reg(_, pac))
            | a64::Site::JumpReg(_, pac) = site
            {
                if pac != a64::Pac::None {
                    wrong.push(format!("{name}+{:#x}: an authenticated branch", pc - start));
                }
            }
            let (kind, to) = match site {
                a64::Site::Call(a64::Target::Direct(t)) => ("call", Some(t)),
                a64::Site::Call(a64::Target::Reg(..)) => ("indirect call", None),
                a64::Site::Tail(a64::Target::Direct(t)) => ("tail call", Some(t)),
                a64::Site::Tail(a64::Target::Reg(..)) => ("indirect tail call", None),
                a64::Site::TailIf(t, test) => {
                    // The handler evaluates the test on the task's registers.
                    if test.holds(0, |_| 0).is_none() {
                        wrong.push(format!("{name}+{:#x}: a test not evaluated", pc - start));
                    }
                    ("conditional tail call", Some(t))
                }
                a64::Site::JumpReg(..) => ("branch through a register", None),
            };
            *n.entry(kind).or_default() += 1;
            if let Some(t) = to {
                if !entry(t) {
                    wrong.push(format!("{name}+{:#x}: {kind} to {t:#x}", pc - start));
                }
            }
        }
    }
    eprintln!("{n:?}");
    assert!(
        wrong.is_empty(),
        "{} branches out of a function to no function's entry:\n{}",
        wrong.len(),
        wrong[..wrong.len().min(40)].join("\n")
    );
    assert!(n["functions"] >= 40_000, "only {n:?}");
    assert!(n["call"] >= 200_000, "only {n:?}");
    assert_eq!(n.get("indirect tail call"), None, "a BR is a JumpReg");
}

/// `a64::trivial_leaf()` on hand-made functions.
#[test]
fn trivial_leaves_by_hand() {
    let (ret, nop, paciasp, autiasp) = (0xd65f_03c0, a64::NOP, 0xd503_233f, 0xd503_23bf);
    let mrs_tpidr_el1 = 0xd538_d080; // MRS X0, TPIDR_EL1
    let ldr = 0xf940_0000; // LDR X0, [X0]
    let add = 0x9100_0400; // ADD X0, X0, #1
    let bl = 0x9400_0010;
    let b = 0x1400_0002;
    let cbz = 0xb400_0040;
    let svc = 0xd400_0001;
    let hvc = 0xd400_0002;
    let brk = 0xd420_0080;
    let ret_x1 = 0xd65f_0020;
    let retaa = 0xd65f_0bff;
    for (words, want, what) in [
        (
            &[mrs_tpidr_el1, ret][..],
            true,
            "__kern_my_cpu_offset: MRS, RET",
        ),
        (&[ret], true, "RET alone"),
        (&[ldr, add, nop, ret], true, "four words"),
        (&[paciasp, ldr, autiasp, ret], true, "signed return"),
        (&[ldr, retaa], true, "RETAA"),
        (&[ldr, add, nop, nop, ret], false, "five words"),
        (&[ldr, bl, ret], false, "a call"),
        (&[b, ret], false, "a jump"),
        (&[cbz, ret], false, "a conditional branch"),
        (&[svc, ret], false, "a system call"),
        (&[hvc, ret], false, "a hypervisor call"),
        (&[brk, ret], false, "a breakpoint"),
        (&[ldr, ret_x1], false, "a return to X1"),
        (&[ldr, add], false, "no return"),
        (&[], false, "no words"),
    ] {
        assert_eq!(a64::trivial_leaf(words), want, "{what}: {words:08x?}");
    }
}

/// Debian's arm64 kernel (`FCTRACE_A64_SITES`, `FCTRACE_A64_SYMS`, as for
/// `call_sites_of_every_traceable_function`): its functions without an ftrace
/// site that `a64::trivial_leaf()` calls trivial, the outlined per-CPU offset
/// among them, and none of the functions its kfree() path calls that do work.
#[test]
fn trivial_leaves_of_debians_arm64_kernel() {
    let Some((data, sites, syms)) = image_sites_and_symbols() else {
        return;
    };
    let end_of_image = KIMAGE_VADDR + data.len() as u64;
    let traceable: std::collections::HashSet<u64> = sites
        .lines()
        .map(|l| hex(l.split(' ').next().expect("FUNCTION SITE NAME")))
        .collect();
    let mut by_name = std::collections::HashMap::new();
    let mut trivial = Vec::new();
    for (a, name) in syms.lines().filter_map(|l| l.split_once(' ')) {
        let a = hex(a);
        if !(KIMAGE_VADDR..end_of_image - 16).contains(&a) {
            continue;
        }
        let off = usize::try_from(a - KIMAGE_VADDR).expect("an offset");
        let words: Vec<u32> = data[off..off + 16]
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes")))
            .collect();
        let t = a64::trivial_leaf(&words);
        by_name.insert(name, t);
        if t && !traceable.contains(&a) {
            trivial.push(name);
        }
    }
    let untraceable = by_name.len().saturating_sub(traceable.len());
    eprintln!(
        "{} of about {} functions without an ftrace site are trivial leaves, e.g. {:?}",
        trivial.len(),
        untraceable,
        &trivial[..trivial.len().min(8)]
    );
    assert_eq!(by_name.get("__kern_my_cpu_offset"), Some(&true));
    // Functions that do work, which fctrace keeps probing.
    for name in [
        "__memcpy",
        "__memset",
        "strncpy_from_user",
        "__arch_copy_to_user",
    ] {
        assert_eq!(by_name.get(name), Some(&false), "{name}");
    }
    assert!(
        (300..5_000).contains(&trivial.len()),
        "{} trivial leaves",
        trivial.len()
    );
}

/// `a64::function_end()` and `a64::call_site()` on hand-made functions.
#[test]
fn function_end_and_call_sites_by_hand() {
    const F: u64 = 0xffff_8000_8001_0000;
    let (ret, nop, paciasp, autiasp) = (0xd65f_03c0, a64::NOP, 0xd503_233f, 0xd503_23bf);
    // BL/B with a word offset; CBZ X0 with a word offset.
    let bl = |from: u64, to: u64| {
        0x9400_0000 | (((to.wrapping_sub(from) as i64 >> 2) as u32) & 0x03ff_ffff)
    };
    let b = |from: u64, to: u64| {
        0x1400_0000 | (((to.wrapping_sub(from) as i64 >> 2) as u32) & 0x03ff_ffff)
    };
    let cbz = |from: u64, to: u64| 0xb400_0000 | ((((to - from) >> 2) as u32 & 0x7ffff) << 5);
    let end = |words: &[u32], noreturn: u64| {
        let bound = F + 4 * words.len() as u64;
        let w = |a: u64| words.get((a.checked_sub(F)? / 4) as usize).copied();
        a64::function_end(F, bound, w, |t| t == noreturn)
    };
    let other = F - 0x1000;
    // Ends after its return; the rest up to the bound is not its own.
    let f = [
        paciasp,
        bl(F + 4, other),
        autiasp,
        ret,
        b(F + 16, other),
        nop,
    ];
    assert_eq!(end(&f, 0), F + 16);
    // A branch past the return keeps it going, to the next return.
    let f = [
        cbz(F, F + 12),
        ret,
        nop,
        bl(F + 12, other),
        ret,
        b(F + 20, other),
    ];
    assert_eq!(end(&f, 0), F + 20);
    // A call that does not return ends it; a B right after a BL is no tail call.
    let f = [paciasp, bl(F + 4, other), nop, b(F + 12, other)];
    assert_eq!(end(&f, other), F + 8);
    // (Not knowing the callee, the B looks like a tail call.)
    assert_eq!(end(&f, 0), F + 16);
    let f = [paciasp, bl(F + 4, other), b(F + 8, other), nop];
    assert_eq!(end(&f, 0), F + 8);
    // A tail call ends it (after the epilogue), and is one.
    let f = [paciasp, bl(F + 4, other), autiasp, b(F + 12, other), nop];
    assert_eq!(end(&f, 0), F + 16);
    let inside = |t: u64| (F..F + 16).contains(&t);
    let site = |w: u32, pc: u64| a64::call_site(a64::decode(w, pc), inside);
    use a64::{Site, Target};
    assert_eq!(site(f[1], F + 4), Some(Site::Call(Target::Direct(other))));
    assert_eq!(site(f[3], F + 12), Some(Site::Tail(Target::Direct(other))));
    assert_eq!(site(b(F + 12, F), F + 12), None);
    assert_eq!(site(ret, F), None);
    assert!(matches!(site(cbz(F, F + 0x100), F), Some(Site::TailIf(t, _)) if t == F + 0x100));
    // BLR X8, BR X16.
    assert_eq!(
        site(0xd63f_0100, F),
        Some(Site::Call(Target::Reg(8, a64::Pac::None)))
    );
    assert_eq!(
        site(0xd61f_0200, F),
        Some(Site::JumpReg(16, a64::Pac::None))
    );
}

/// `a64::Test::holds()`: the condition codes after `CMP a, b` say what the
/// signed and unsigned comparisons of `a` and `b` say; `CBZ`, `CBNZ`, `TBZ`,
/// `TBNZ` test the register (its low half for a `W` register), and register
/// 31 is the zero register.
#[test]
fn branch_conditions() {
    // The flags of `SUBS XZR, a, b` (`CMP a, b`), in PSTATE's bits.
    let cmp = |a: u64, b: u64| {
        let (r, borrow) = a.overflowing_sub(b);
        let n = r >> 63;
        let z = u64::from(r == 0);
        let c = u64::from(!borrow);
        let v = u64::from((a as i64).overflowing_sub(b as i64).1);
        n << 31 | z << 30 | c << 29 | v << 28
    };
    let cond = |c: u8, flags: u64| {
        a64::Test::Cond {
            cond: c,
            consistent: false,
        }
        .holds(flags, |_| 0)
        .expect("a condition code is evaluated")
    };
    let values = [
        0u64,
        1,
        2,
        0x7fff_ffff_ffff_ffff,
        0x8000_0000_0000_0000,
        u64::MAX,
        u64::MAX - 1,
        0xffff_8000_8000_0000,
    ];
    for &a in &values {
        for &b in &values {
            let f = cmp(a, b);
            let (sa, sb) = (a as i64, b as i64);
            let want = [
                a == b,                          // EQ
                a != b,                          // NE
                a >= b,                          // CS (HS)
                a < b,                           // CC (LO)
                (a.wrapping_sub(b) as i64) < 0,  // MI
                (a.wrapping_sub(b) as i64) >= 0, // PL
                sa.overflowing_sub(sb).1,        // VS
                !sa.overflowing_sub(sb).1,       // VC
                a > b,                           // HI
                a <= b,                          // LS
                sa >= sb,                        // GE
                sa < sb,                         // LT
                sa > sb,                         // GT
                sa <= sb,                        // LE
                true,                            // AL
                true,                            // NV
            ];
            for (c, &w) in want.iter().enumerate() {
                assert_eq!(cond(c as u8, f), w, "cond {c} after CMP {a:#x}, {b:#x}");
            }
        }
    }
    let x = |n: u8| move |r: a64::Reg| if r == n { 0x1_0000_0000 } else { 0xdead };
    // CBZ W3 / CBZ X3 / CBNZ X3, decoded, with X3 = 1 << 32.
    let test = |w: u32| match a64::decode(w, 0x1000).flow {
        a64::Flow::Branch(_, t) => t,
        f => panic!("{w:#x}: {f:?}"),
    };
    let (cbz_w3, cbz_x3, cbnz_x3) = (0x3400_0083, 0xb400_0083, 0xb500_0083);
    assert_eq!(test(cbz_w3).holds(0, x(3)), Some(true));
    assert_eq!(test(cbz_x3).holds(0, x(3)), Some(false));
    assert_eq!(test(cbnz_x3).holds(0, x(3)), Some(true));
    // CBZ XZR is always taken, whatever `reg` would say of 31.
    assert_eq!(test(0xb400_009f).holds(0, |_| 1), Some(true));
    // TBZ X3, #32 / TBNZ X3, #32 / TBNZ W3, #0.
    let (tbz_32, tbnz_32, tbnz_0) = (0xb600_0083, 0xb700_0083, 0x3700_0083);
    assert_eq!(test(tbz_32).holds(0, x(3)), Some(false));
    assert_eq!(test(tbnz_32).holds(0, x(3)), Some(true));
    assert_eq!(test(tbnz_0).holds(0, x(3)), Some(false));
    // B.NE with Z set; B.EQ likewise.
    assert_eq!(test(0x5400_0081).holds(1 << 30, |_| 0), Some(false));
    assert_eq!(test(0x5400_0080).holds(1 << 30, |_| 0), Some(true));
}

#[test]
fn loaded_addresses() {
    use a64::Loaded::{Address, Word};
    let f = 0xffff_8000_8043_c258u64;
    let mut got = Vec::new();
    // folio_add_lru() on Debian's arm64 7.3.4: lru_add() for
    // folio_batch_move_lru(), and a per-CPU variable, the two interleaved.
    let words = [
        0xf0ff_ffe2,
        0xf001_2e20,
        0x912d_e042,
        0x911e_c000,
        0x97ff_fa80,
    ];
    a64::loaded_addresses(&words, f, |a| got.push(a));
    assert_eq!(
        got,
        [
            Address(0xffff_8000_8043_bb78),
            Address(0xffff_8000_82a0_37b0)
        ]
    );
    // One ADRP, two ADDs from it; the page forgotten once its register is
    // written (here by a load into it) and at a call for X0 to X18; a load
    // from the page.
    got.clear();
    let words = [
        0x9000_0013, // adrp x19, .
        0x9000_0001, // adrp x1, .
        0x9100_4260, // add x0, x19, #0x10
        0x9100_8262, // add x2, x19, #0x20
        0x9400_0000, // bl .
        0x9100_c023, // add x3, x1, #0x30 (x1 gone with the call)
        0x9100_c263, // add x3, x19, #0x30 (x19 kept)
        0xf940_0273, // ldr x19, [x19]
        0x9100_4264, // add x4, x19, #0x10 (x19 written)
        0x1000_0085, // adr x5, .+0x10
        0xf900_0273, // str x19, [x19] (a store writes no register)
    ];
    let p = f & !0xfff;
    a64::loaded_addresses(&words, p, |a| got.push(a));
    assert_eq!(
        got,
        [
            Address(p + 0x10),
            Address(p + 0x20),
            Address(p + 0x30),
            Word(p),
            Address(p + 9 * 4 + 0x10)
        ]
    );
    // ADD with its immediate shifted by 12; a store does not forget the page.
    got.clear();
    let words = [0x9000_0001, 0xf900_0021, 0x9140_0422]; // str x1, [x1]
    a64::loaded_addresses(&words, p, |a| got.push(a));
    assert_eq!(got, [Address(p + 0x1000)]);
}

/// On Debian's arm64 image: the functions whose address `folio_add_lru()` and
/// `lru_add_drain_cpu()` load include `lru_add()` (`trace/fn_pointers.tc`), and
/// over every traceable function, the loaded addresses that are function
/// starts are counted.
#[test]
fn loaded_addresses_of_debians_arm64_image() {
    let Some((data, sites, syms)) = image_sites_and_symbols() else {
        return;
    };
    const KIMAGE_VADDR: u64 = 0xffff_8000_8000_0000;
    let mut starts = std::collections::HashMap::new();
    let mut text: Vec<u64> = Vec::new();
    for l in syms.lines() {
        let mut it = l.split(' ');
        let (Some(a), Some(n)) = (it.next(), it.next()) else {
            continue;
        };
        let a = u64::from_str_radix(a, 16).expect("a hex address");
        starts.insert(a, n.to_string());
        text.push(a);
    }
    text.sort_unstable();
    let words_of = |func: u64| -> Vec<u32> {
        let i = text.partition_point(|&a| a <= func);
        let end = text.get(i).copied().unwrap_or(func + 4).min(func + 0x4000);
        let off = usize::try_from(func - KIMAGE_VADDR).expect("an offset");
        let len = usize::try_from(end - func).expect("a size") & !3;
        data[off..off + len]
            .chunks_exact(4)
            .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
            .collect()
    };
    let by_name = |name: &str| -> u64 {
        *starts
            .iter()
            .find(|(_, n)| n.as_str() == name)
            .unwrap_or_else(|| panic!("no {name}"))
            .0
    };
    let lru_add = by_name("lru_add");
    for caller in ["folio_add_lru", "lru_add_drain_cpu"] {
        let f = by_name(caller);
        let mut got = Vec::new();
        a64::loaded_addresses(&words_of(f), f, |a| got.push(a));
        assert!(
            got.contains(&a64::Loaded::Address(lru_add)),
            "{caller} does not load lru_add: {got:?}"
        );
    }
    let (mut funcs, mut loads, mut loading) = (0usize, 0usize, 0usize);
    let (mut blrs, mut slots, mut deeper) = (0usize, 0usize, 0usize);
    let mut globals = 0usize;
    for l in sites.lines() {
        let func = u64::from_str_radix(l.split(' ').next().expect("a field"), 16).expect("hex");
        let words = words_of(func);
        let mut n = 0;
        a64::loaded_addresses(&words, func, |a| match a {
            a64::Loaded::Address(a) => n += usize::from(starts.contains_key(&a)),
            a64::Loaded::Word(_) => globals += 1,
        });
        funcs += 1;
        loads += n;
        loading += usize::from(n > 0);
        // And where each call through a register got its target (call_slot).
        for (i, &w) in words.iter().enumerate() {
            if let a64::Flow::CallReg(r, a64::Pac::None) = a64::decode(w, 0).flow {
                blrs += 1;
                if let Some(s) = a64::call_slot(&words, i, r) {
                    slots += 1;
                    deeper += usize::from(s.then.is_some());
                }
            }
        }
    }
    eprintln!("{loads} loads of function starts in {loading} of {funcs} traceable functions");
    eprintln!("{globals} loads of words at constant addresses");
    eprintln!("{slots} of {blrs} calls through a register: slot found ({deeper} one load further)");
    assert!(
        loading > 100,
        "only {loading} functions load a function's address"
    );
    assert!(
        slots * 2 > blrs,
        "slots found for only {slots} of {blrs} BLRs"
    );
}

#[test]
fn call_slots() {
    // vfs_read() on Debian's arm64 7.3.4: `file->f_op->read(file, ...)`, with
    // `file` in x20: the slot is f_op (x20 + 8) plus 24, though x2, which held
    // f_op, is an argument at the call.
    let words = [
        0x9340_7c16, // sxtw x22, w0
        0x3500_04e0, // cbnz w0, ...
        0xf940_0682, // ldr x2, [x20, #8]
        0xb274_4be0, // mov x0, #0x7ffff000
        0xeb00_027f, // cmp x19, x0
        0x9a80_9273, // csel x19, x19, x0, ls
        0xf940_0c44, // ldr x4, [x2, #24]
        0xb400_07e4, // cbz x4, ...
        0xaa17_03e3, // mov x3, x23
        0xaa13_03e2, // mov x2, x19
        0xaa15_03e1, // mov x1, x21
        0xaa14_03e0, // mov x0, x20
        0xd63f_0080, // blr x4
    ];
    let slot = a64::Slot {
        base: 20,
        disp: 8,
        then: Some(24),
    };
    assert_eq!(a64::call_slot(&words, 12, 4), Some(slot));
    // The same with f_op kept in x2: one load.
    let kept = [0xf940_0c44, 0xaa13_03e3, 0xd63f_0080];
    let slot = a64::Slot {
        base: 2,
        disp: 24,
        then: None,
    };
    assert_eq!(a64::call_slot(&kept, 2, 4), Some(slot));
    // Through a MOV copy.
    let copied = [0xf940_0c44, 0xaa04_03e5, 0xd63f_00a0]; // mov x5, x4; blr x5
    assert_eq!(a64::call_slot(&copied, 2, 5), Some(slot));
    // A stack slot, a base loaded from the stack, a call or an unconditional
    // branch in between, a target computed: none.
    let stack = [0xf940_0fe4, 0xd63f_0080]; // ldr x4, [sp, #24]
    assert_eq!(a64::call_slot(&stack, 1, 4), None);
    let base_from_stack = [0xf940_07e2, 0xf940_0c42, 0xd63f_0040]; // ldr x2, [sp, #8]; ldr x2, [x2, #24]
    assert_eq!(a64::call_slot(&base_from_stack, 2, 2), None);
    let call = [0xf940_0c44, 0x9400_0000, 0xd63f_0080];
    assert_eq!(a64::call_slot(&call, 2, 4), None);
    let jump = [0xf940_0c44, 0x1400_0002, 0xd63f_0080];
    assert_eq!(a64::call_slot(&jump, 2, 4), None);
    let computed = [0xf940_0c44, 0x9100_2084, 0xd63f_0080]; // add x4, x4, #8
    assert_eq!(a64::call_slot(&computed, 2, 4), None);
    // A load with write-back of the base: the base is not what it was.
    let back = [0xf840_8c44, 0xd63f_0080]; // ldr x4, [x2, #8]!
    assert_eq!(a64::call_slot(&back, 1, 4), None);
    // A pair load writing the base after the load: followed one level, and
    // not found (the pair's source is the stack).
    let pair = [0xf940_0c44, 0xa940_0be1, 0xd63f_0080]; // ldp x1, x2, [sp]
    assert_eq!(a64::call_slot(&pair, 2, 4), None);
}

/// A detour through a linker's veneer (Cortex-A53 erratum 843419): the
/// function goes on after the `B` to it, which is no tail call; a veneer that
/// returns elsewhere, or one that is not a single instruction and a `B`, is.
#[test]
fn veneer_detours() {
    const F: u64 = 0xffff_8000_810f_7f48;
    const V: u64 = 0xffff_8000_810f_9400;
    let b = |from: u64, to: u64| {
        0x1400_0000 | (((to.wrapping_sub(from) as i64 >> 2) as u32) & 0x03ff_ffff)
    };
    let (ret, paciasp, autiasp) = (0xd65f_03c0, 0xd503_233f, 0xd503_23bf);
    let ldr = 0xb945_b301; // ldr w1, [x24, #1456], as in tcp_get_metrics()'s veneer
    let func = [paciasp, b(F + 4, V), autiasp, ret];
    let word = |veneer: [u32; 2]| {
        move |a: u64| match a {
            a if (F..F + 16).contains(&a) => Some(func[((a - F) / 4) as usize]),
            a if (V..V + 8).contains(&a) => Some(veneer[((a - V) / 4) as usize]),
            _ => None,
        }
    };
    let back = [ldr, b(V + 4, F + 8)];
    assert!(a64::is_veneer_detour(F + 4, V, word(back)));
    assert_eq!(a64::function_end(F, F + 16, word(back), |_| false), F + 16);
    // Back somewhere else, or two instructions, or a trap: a tail call.
    let elsewhere = [ldr, b(V + 4, F + 12)];
    assert!(!a64::is_veneer_detour(F + 4, V, word(elsewhere)));
    assert_eq!(
        a64::function_end(F, F + 16, word(elsewhere), |_| false),
        F + 8
    );
    let jump = [b(V, F), b(V + 4, F + 8)];
    assert!(!a64::is_veneer_detour(F + 4, V, word(jump)));
    let trap = [0xd420_0080, b(V + 4, F + 8)];
    assert!(!a64::is_veneer_detour(F + 4, V, word(trap)));
}

/// A module's PLT entry as the kernel writes it (`get_plt_entry()`:
/// `aarch64_insn_gen_adr()`, `aarch64_insn_gen_add_sub_imm()`,
/// `aarch64_insn_gen_branch_reg()`), for a call at `pc` of `dst`.
fn plt_entry(pc: u64, dst: u64, reg: u32) -> [u32; 3] {
    let off = ((dst & !0xfff).wrapping_sub(pc & !0xfff) as i64) >> 12;
    let (lo, hi) = ((off & 3) as u32, ((off >> 2) & 0x7ffff) as u32);
    let adrp = 0x9000_0000 | lo << 29 | hi << 5 | reg;
    let add = 0x9100_0000 | ((dst & 0xfff) as u32) << 10 | reg << 5 | reg;
    let br = 0xd61f_0000 | reg << 5;
    [adrp, add, br]
}

/// `a64::plt_target()`: entries made as the kernel makes them, for a
/// module 1 to 2 GiB away from the kernel (Debian's modules are out of a
/// `BL`'s reach of it), both ways, and what bad64 says the words are.
#[test]
fn plt_targets() {
    let kernel = 0xffff_8000_8040_1234u64; // file_write_and_wait_range(), say
    for (pc, dst) in [
        (0xffff_8000_0312_3f00u64, kernel),
        (0xffff_8000_7fff_fff4, kernel & !0xfff),
        (kernel + (1 << 30), kernel),
        (0xffff_8000_0000_0000, 0xffff_8000_ffff_fffc),
    ] {
        let e = plt_entry(pc, dst, 16);
        let text: Vec<String> = e
            .iter()
            .enumerate()
            .map(|(i, &w)| {
                let insn = bad64::decode(w, pc + 4 * i as u64).expect("a valid instruction");
                format!("{insn}")
            })
            .collect();
        assert_eq!(text[0], format!("adrp x16, {:#x}", dst & !0xfff), "{e:x?}");
        assert_eq!(
            text[1],
            format!("add x16, x16, #{:#x}", dst & 0xfff),
            "{e:x?}"
        );
        assert_eq!(text[2], "br x16");
        assert_eq!(a64::plt_target(e, pc), Some(dst), "{pc:#x} -> {dst:#x}");
    }
    let pc = 0xffff_8000_0312_3f00u64;
    let e = plt_entry(pc, kernel, 16);
    // Another register, another branch, a shifted ADD, another base: no PLT entry.
    assert_eq!(a64::plt_target(plt_entry(pc, kernel, 17), pc), None);
    assert_eq!(a64::plt_target([e[0], e[1], 0xd63f_0200], pc), None); // blr x16
    assert_eq!(a64::plt_target([e[0], e[1] | 1 << 22, e[2]], pc), None);
    assert_eq!(a64::plt_target([e[0], e[1] ^ (1 << 5), e[2]], pc), None); // add x16, x17
    assert_eq!(a64::plt_target([0xd503_201f, e[1], e[2]], pc), None); // nop
}
