// SPDX-License-Identifier: GPL-2.0
//! Cross-checking `fctrace_decode` against the iced-x86 decoder (shared by the
//! fixture test and the whole-vmlinux test).
#![allow(dead_code)]

use fctrace_decode::{decode, Cond, DecodeError, Flow, Insn, Mem, Reg, Seg};
use iced_x86::{
    Code, ConditionCode, Decoder, DecoderError, DecoderOptions, FlowControl, Instruction, Mnemonic,
    OpKind, Register,
};
use object::{Object, ObjectSection, ObjectSymbol, SectionFlags, SectionIndex, SymbolKind};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

/// Number (0..15) of a 64/32/16-bit general purpose register in iced.
fn gpr(r: Register) -> Reg {
    let full = r.full_register();
    assert!(full.is_gpr64(), "not a GPR: {r:?}");
    (full as u32 - Register::RAX as u32) as Reg
}

fn seg(r: Register) -> Option<Seg> {
    match r {
        Register::None => None,
        Register::FS => Some(Seg::Fs),
        Register::GS => Some(Seg::Gs),
        _ => Some(Seg::Other),
    }
}

fn mem(i: &Instruction) -> Mem {
    let rip = matches!(i.memory_base(), Register::RIP | Register::EIP);
    let base = if rip || i.memory_base() == Register::None {
        None
    } else {
        Some(gpr(i.memory_base()))
    };
    let index = if i.memory_index() == Register::None {
        None
    } else {
        Some(gpr(i.memory_index()))
    };
    let disp = if rip {
        // iced gives the absolute target for rip-relative operands.
        i.memory_displacement64().wrapping_sub(i.next_ip()) as i64 as i32
    } else {
        i.memory_displacement64() as i64 as i32
    };
    Mem {
        base,
        index,
        scale: i.memory_index_scale() as u8,
        disp,
        rip_relative: rip,
        segment: seg(i.segment_prefix()),
    }
}

/// What iced says the instruction is, expressed in our types.
pub fn iced_to_insn(i: &Instruction) -> Insn {
    let op0_reg = || i.op0_kind() == OpKind::Register;
    let flow = match i.flow_control() {
        FlowControl::Next | FlowControl::Interrupt => {
            if i.code() == Code::Int3 {
                Flow::Int3
            } else {
                Flow::Next
            }
        }
        // iced counts syscall/sysenter/vmcall/vmmcall/vmrun/... as calls; we
        // say Next (they go to another privilege level or the hypervisor and
        // come back to the next instruction).
        FlowControl::Call if i.op0_kind() != OpKind::NearBranch64 => Flow::Next,
        FlowControl::Call => Flow::Call(i.near_branch_target()),
        FlowControl::UnconditionalBranch => Flow::Jmp(i.near_branch_target()),
        FlowControl::ConditionalBranch => Flow::Jcc(i.near_branch_target(), jcc_cond(i)),
        FlowControl::IndirectCall if op0_reg() => Flow::CallReg(gpr(i.op0_register())),
        FlowControl::IndirectCall => Flow::CallMem(mem(i)),
        FlowControl::IndirectBranch if op0_reg() => Flow::JmpReg(gpr(i.op0_register())),
        FlowControl::IndirectBranch => Flow::JmpMem(mem(i)),
        FlowControl::Return => Flow::Ret,
        FlowControl::Exception => {
            assert!(
                matches!(i.mnemonic(), Mnemonic::Ud0 | Mnemonic::Ud1 | Mnemonic::Ud2),
                "{:?}",
                i.code()
            );
            Flow::Ud
        }
        FlowControl::XbeginXabortXend => {
            if i.mnemonic() == Mnemonic::Xbegin {
                Flow::Jcc(i.near_branch_target(), jcc_cond(i))
            } else {
                Flow::Next
            }
        }
    };
    Insn {
        len: i.len() as u8,
        flow,
        endbr64: i.code() == Code::Endbr64,
        nop: is_nop(i),
    }
}

/// Our condition code of a conditional branch: iced's `condition_code()` for a
/// `jcc`; `None` for `jrcxz`, the `loop`s (iced gives `loope`/`loopne` a code,
/// but they also count rcx down) and `xbegin`.
fn jcc_cond(i: &Instruction) -> Option<Cond> {
    let cc = i.condition_code();
    if !i.is_jcc_short_or_near() {
        return None;
    }
    assert_ne!(cc, ConditionCode::None, "{:?}", i.code());
    // iced numbers them 1 (o) ..= 16 (g), in encoding order.
    Some(Cond::new(cc as u8 - 1))
}

/// Our nop flag: iced's `nop` plus the `0f 1f /1../7` "reserved nops".
fn is_nop(i: &Instruction) -> bool {
    i.mnemonic() == Mnemonic::Nop
        || matches!(
            i.code(),
            Code::Reservednop_rm16_r16_0F1F
                | Code::Reservednop_rm32_r32_0F1F
                | Code::Reservednop_rm64_r64_0F1F
        )
}

/// Canonical form for comparison: the SIB scale means nothing without an index.
pub fn canon(mut insn: Insn) -> Insn {
    match &mut insn.flow {
        Flow::CallMem(m) | Flow::JmpMem(m) if m.index.is_none() => m.scale = 1,
        _ => {}
    }
    insn
}

/// iced's decoding of the first instruction of `bytes` at `ip`.
pub fn iced_decode(bytes: &[u8], ip: u64) -> Result<Insn, DecodeError> {
    let mut d = Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE);
    let i = d.decode();
    match d.last_error() {
        DecoderError::None => Ok(iced_to_insn(&i)),
        DecoderError::NoMoreBytes => Err(DecodeError::Truncated),
        _ => Err(DecodeError::Invalid),
    }
}

/// Disassembly of the first instruction of `bytes` (for messages).
pub fn disasm(bytes: &[u8], ip: u64) -> String {
    use iced_x86::Formatter;
    let mut d = Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE);
    let i = d.decode();
    let mut s = String::new();
    iced_x86::GasFormatter::new().format(&i, &mut s);
    s
}

pub fn hex(b: &[u8]) -> String {
    b.iter()
        .map(|x| format!("{x:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// Result of sweeping one function with both decoders in lockstep.
#[derive(Default, Debug)]
pub struct Sweep {
    /// Instructions on which both decoders agree.
    pub insns: u64,
    /// Our decodings, in order (offset, insn).
    pub decoded: Vec<(u32, Insn)>,
    /// First disagreement, as a human-readable report.
    pub mismatch: Option<String>,
    /// Both decoders stopped at the same offset with the same error.
    pub agreed_error: Option<(u32, DecodeError)>,
}

/// Sweeps `bytes` (function `name` at `ip`) with both decoders, comparing
/// instruction by instruction; stops at the first disagreement or error.
pub fn sweep(name: &str, bytes: &[u8], ip: u64) -> Sweep {
    let mut s = Sweep::default();
    let mut off = 0usize;
    let mut d = Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE);
    while off < bytes.len() {
        let at = ip + off as u64;
        d.set_position(off).unwrap();
        d.set_ip(at);
        let i = d.decode();
        let theirs = match d.last_error() {
            DecoderError::None => Ok(canon(iced_to_insn(&i))),
            DecoderError::NoMoreBytes => Err(DecodeError::Truncated),
            _ => Err(DecodeError::Invalid),
        };
        let ours = decode(&bytes[off..], at).map(canon);
        if ours != theirs {
            let end = (off + 15).min(bytes.len());
            s.mismatch = Some(format!(
                "{name}+{off:#x} ({at:#x}): bytes [{}]\n    iced:  {theirs:?}  `{}`\n    ours:  {ours:?}",
                hex(&bytes[off..end]),
                disasm(&bytes[off..], at)
            ));
            return s;
        }
        match ours {
            Ok(insn) => {
                s.insns += 1;
                s.decoded.push((off as u32, insn));
                off += insn.len as usize;
            }
            Err(e) => {
                s.agreed_error = Some((off as u32, e));
                return s;
            }
        }
    }
    // Our own scan() must produce exactly the same sequence.
    let mut via_scan = Vec::new();
    let r = fctrace_decode::scan(bytes, ip, |o, insn| via_scan.push((o, *insn)));
    assert!(r.is_ok(), "{name}: scan failed: {r:?}");
    let canon_scan: Vec<_> = via_scan.into_iter().map(|(o, i)| (o, canon(i))).collect();
    let canon_dec: Vec<_> = s.decoded.iter().map(|&(o, i)| (o, canon(i))).collect();
    assert_eq!(
        canon_scan, canon_dec,
        "{name}: scan() differs from decode()"
    );
    s
}

/// The vmlinux files to check: `FCTRACE_VMLINUX`, else every built one.
pub fn find_vmlinuxes() -> Vec<PathBuf> {
    if let Some(p) = std::env::var_os("FCTRACE_VMLINUX") {
        return vec![PathBuf::from(p)];
    }
    let Some(cache) = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
    else {
        return Vec::new();
    };
    let Ok(dir) = std::fs::read_dir(cache.join("fctrace")) else {
        return Vec::new();
    };
    let mut found: Vec<PathBuf> = dir
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("build-"))
        .map(|e| e.path().join("vmlinux"))
        .filter(|p| p.is_file())
        .collect();
    found.sort();
    found
}

/// Runs `check` on every vmlinux of [`find_vmlinuxes`]; without one, prints `SKIP: no
/// vmlinux (set FCTRACE_VMLINUX)` (the test then passes).
pub fn each_vmlinux(mut check: impl FnMut(&Path)) {
    let paths = find_vmlinuxes();
    if paths.is_empty() {
        println!("SKIP: no vmlinux (set FCTRACE_VMLINUX)");
    }
    for path in &paths {
        check(path);
    }
}

/// A code symbol of a vmlinux and its bytes.
pub struct Func<'a> {
    pub name: &'a str,
    pub addr: u64,
    pub bytes: &'a [u8],
}

/// The code symbols of a vmlinux ([`code_functions`]).
pub struct CodeFuncs<'a> {
    /// FUNC symbols with a size, plus the sized NOTYPE ones in executable sections
    /// (assembly code such as entry_SYSCALL_64, SYM_CODE_START), deduplicated by
    /// (address, size) (aliases), in address order.
    pub funcs: Vec<Func<'a>>,
    /// How many of them are FUNC symbols.
    pub nfunc: usize,
    /// The address of every code symbol by name (the first one of a name).
    pub by_name: HashMap<&'a str, u64>,
}

/// The code symbols of the vmlinux `elf` (read from `path`).
pub fn code_functions<'a>(elf: &object::File<'a>, path: &Path) -> CodeFuncs<'a> {
    let mut exec: HashMap<SectionIndex, (u64, &[u8])> = HashMap::new();
    for sec in elf.sections() {
        if let SectionFlags::Elf { sh_flags } = sec.flags() {
            if sh_flags & u64::from(object::elf::SHF_EXECINSTR) != 0 {
                if let Ok(d) = sec.data() {
                    if !d.is_empty() {
                        exec.insert(sec.index(), (sec.address(), d));
                    }
                }
            }
        }
    }
    assert!(
        !exec.is_empty(),
        "no executable section in {}",
        path.display()
    );
    let mut funcs: Vec<Func> = Vec::new();
    let mut seen = HashSet::new();
    let mut by_name: HashMap<&str, u64> = HashMap::new();
    let mut nfunc = 0usize;
    for sym in elf.symbols() {
        let Ok(name) = sym.name() else { continue };
        if sym.kind() == SymbolKind::Text || sym.kind() == SymbolKind::Unknown {
            by_name.entry(name).or_insert(sym.address());
        }
        if !matches!(sym.kind(), SymbolKind::Text | SymbolKind::Unknown) || sym.size() == 0 {
            continue;
        }
        let Some(idx) = sym.section_index() else {
            continue;
        };
        let Some(&(saddr, sdata)) = exec.get(&idx) else {
            continue;
        };
        let start = (sym.address() - saddr) as usize;
        let Some(bytes) = sdata.get(start..start + sym.size() as usize) else {
            panic!("{name}: symbol outside its section");
        };
        if seen.insert((sym.address(), sym.size())) {
            if sym.kind() == SymbolKind::Text {
                nfunc += 1;
            }
            funcs.push(Func {
                name,
                addr: sym.address(),
                bytes,
            });
        }
    }
    funcs.sort_by_key(|f| f.addr);
    CodeFuncs {
        funcs,
        nfunc,
        by_name,
    }
}

/// A function of a vmlinux as the pre-site tests see it ([`presite_view`]).
pub struct PreSiteView {
    /// Its instructions (offset, decoded), in order.
    pub insns: Vec<(u32, Insn)>,
    /// The offsets its own jumps land on.
    pub targets: HashSet<u32>,
    /// Its instructions as [`fctrace_decode::presite::pre_site`] takes them.
    pub steps: Vec<fctrace_decode::presite::Insn>,
}

/// Decodes `f` for the pre-site tests; `None` if it does not decode.
pub fn presite_view(f: &Func) -> Option<PreSiteView> {
    let mut insns: Vec<(u32, Insn)> = Vec::new();
    if fctrace_decode::scan(f.bytes, f.addr, |o, i| insns.push((o, *i))).is_err() {
        return None;
    }
    let end = f.addr + f.bytes.len() as u64;
    let targets: HashSet<u32> = insns
        .iter()
        .filter_map(|(_, i)| match i.flow {
            Flow::Jmp(t) | Flow::Jcc(t, _) if t >= f.addr && t < end => Some((t - f.addr) as u32),
            _ => None,
        })
        .collect();
    let steps = insns
        .iter()
        .map(|&(off, i)| fctrace_decode::presite::Insn {
            off,
            len: i.len,
            steppable: fctrace_decode::presite::steppable(&f.bytes[off as usize..]),
            site: fctrace_decode::presite::may_be_site(i.flow, f.addr, end),
        })
        .collect();
    Some(PreSiteView {
        insns,
        targets,
        steps,
    })
}

/// iced-x86's decoding of the instruction at offset `off` of `bytes` (at `addr`).
pub fn iced_at(bytes: &[u8], addr: u64, off: u32) -> Instruction {
    let mut d = Decoder::with_ip(
        64,
        &bytes[off as usize..],
        addr + u64::from(off),
        DecoderOptions::NONE,
    );
    d.decode()
}

/// The retpoline thunks of a vmlinux by address, and the register each goes through
/// (GCC and clang name them the same), from its code symbols' names.
pub fn thunk_registers(by_name: &HashMap<&str, u64>) -> HashMap<u64, u8> {
    let names = [
        "rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12",
        "r13", "r14", "r15",
    ];
    let mut thunk_reg = HashMap::new();
    for (n, name) in names.iter().enumerate() {
        for pfx in [
            "__x86_indirect_thunk_",
            "__x86_indirect_call_thunk_",
            "__x86_indirect_jump_thunk_",
        ] {
            if let Some(&a) = by_name.get(format!("{pfx}{name}").as_str()) {
                thunk_reg.insert(a, n as u8);
            }
        }
    }
    thunk_reg
}

/// What an indirect call or jump with control flow `flow` (ending at `next_ip`) goes
/// through, as a pre-site program ends with it: a register (directly or through a
/// retpoline thunk of `thunk_reg`) or memory. `None` for anything else.
pub fn indirect_final(
    flow: Flow,
    next_ip: u64,
    thunk_reg: &HashMap<u64, u8>,
) -> Option<fctrace_decode::emulate::Final> {
    use fctrace_decode::emulate::{Addr, Final};
    match flow {
        Flow::Call(t) | Flow::Jmp(t) | Flow::Jcc(t, _) => thunk_reg.get(&t).map(|&r| Final::Reg(r)),
        Flow::CallReg(r) | Flow::JmpReg(r) => Some(Final::Reg(r)),
        Flow::CallMem(m) | Flow::JmpMem(m) => Addr::from_mem(&m, next_ip).map(Final::Mem),
        _ => None,
    }
}
