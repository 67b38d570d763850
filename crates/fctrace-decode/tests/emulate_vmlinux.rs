// SPDX-License-Identifier: GPL-2.0
//! Pre-site programs ([`fctrace_decode::emulate`]) on the real code of each built test
//! kernel: for every indirect call and jump with a pre-site, the run before it is
//! compiled and evaluated on random register states and a made-up memory, and the
//! target is compared with an evaluator written on iced-x86's decoder and its
//! instruction-info tables (which registers an instruction writes, whether it writes
//! memory). A program must never give a target the reference does not, nor a different
//! one (in particular, none from memory the run wrote before reading it).
//!
//! It prints how many indirect sites get a program and how many of those give a target,
//! and asserts that most do (else the traced task single-steps most indirect calls).
//! Without a vmlinux the test prints `SKIP: ...` and passes.

mod common;

use fctrace_decode::emulate::{compile, Final, Machine, Reg};
use fctrace_decode::presite::pre_site;
use iced_x86::{Instruction, InstructionInfoFactory, Mnemonic, OpAccess, OpKind, Register};
use std::collections::HashMap;
use std::path::Path;

const GS_BASE: u64 = 0xffff_8880_1f00_0000;

/// A made-up memory: every address holds a value derived from it.
fn mem_value(addr: u64, size: u8) -> u64 {
    let v = addr.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(17) ^ 0x5555_0000_aaaa;
    if size >= 8 {
        v
    } else {
        v & ((1u64 << (size * 8)) - 1)
    }
}

struct M {
    regs: [u64; 16],
}

impl Machine for M {
    fn reg(&self, r: Reg) -> u64 {
        self.regs[usize::from(r)]
    }
    fn load(&self, addr: u64, size: u8) -> Option<u64> {
        Some(mem_value(addr, size))
    }
    fn gs_base(&self) -> Option<u64> {
        Some(GS_BASE)
    }
}

/// x86 encoding number of a 64/32/16/8-bit general-purpose register, and its width in
/// bytes.
fn gpr(r: Register) -> Option<(u8, u8)> {
    if !r.is_gpr() {
        return None;
    }
    let full = r.full_register();
    let n = (full as u32 - Register::RAX as u32) as u8;
    Some((n, r.size() as u8))
}

/// The reference: runs `insns` with iced's view of them, on `m`'s registers and a
/// memory that holds [`mem_value`] except where the run wrote (unknown there). Returns
/// the target (None: unknown).
/// The registers at the end of the run as the reference computes them (`None`: not
/// computed), and the target; `None` when it cannot follow the run at all.
type RefEnd = ([Option<u64>; 16], Option<u64>);

fn reference(insns: &[Instruction], fin: &Instruction, m: &M) -> Option<RefEnd> {
    let mut regs: [Option<u64>; 16] = m.regs.map(Some);
    // Ranges the run wrote; `None` once a write's address was not known.
    let mut written: Option<Vec<(u64, u64)>> = Some(Vec::new());
    let mut info = InstructionInfoFactory::new();
    let addr_of = |regs: &[Option<u64>; 16], i: &Instruction| -> Option<u64> {
        let mut a = if i.is_ip_rel_memory_operand() {
            i.ip_rel_memory_address()
        } else {
            i.memory_displacement64()
        };
        if i.memory_base() != Register::None && !i.is_ip_rel_memory_operand() {
            a = a.wrapping_add(regs[gpr(i.memory_base())?.0 as usize]?);
        }
        if i.memory_index() != Register::None {
            a = a.wrapping_add(
                regs[gpr(i.memory_index())?.0 as usize]?
                    .wrapping_mul(u64::from(i.memory_index_scale())),
            );
        }
        if i.memory_segment() == Register::GS {
            a = a.wrapping_add(GS_BASE);
        }
        Some(a)
    };
    // A read of `size` bytes at `a`, unless the run wrote some of them.
    let read = |written: &Option<Vec<(u64, u64)>>, a: u64, size: u8| -> Option<u64> {
        let w = written.as_ref()?;
        let end = a + u64::from(size);
        if w.iter().any(|&(s, e)| s < end && a < e) {
            return None;
        }
        Some(mem_value(a, size))
    };
    for i in insns {
        let inf = info.info(i);
        // push / pop: the stack.
        match i.mnemonic() {
            Mnemonic::Push => {
                let sp = regs[4];
                match (sp, written.as_mut()) {
                    (Some(sp), Some(w)) => w.push((sp - 8, sp)),
                    _ => written = None,
                }
                regs[4] = sp.map(|v| v - 8);
                continue;
            }
            Mnemonic::Pop if i.op0_kind() == OpKind::Register => {
                let (n, sz) = gpr(i.op0_register())?;
                assert_eq!(sz, 8);
                let sp = regs[4];
                regs[n as usize] = sp.and_then(|sp| read(&written, sp, 8));
                if n != 4 {
                    regs[4] = sp.map(|v| v + 8);
                }
                continue;
            }
            _ => {}
        }
        // Writes to memory: through the instruction's memory operand.
        let writes_mem = inf.used_memory().iter().any(|u| {
            matches!(
                u.access(),
                OpAccess::Write
                    | OpAccess::ReadWrite
                    | OpAccess::CondWrite
                    | OpAccess::ReadCondWrite
            )
        });
        if writes_mem {
            let at = (0..i.op_count())
                .any(|k| i.op_kind(k) == OpKind::Memory)
                .then(|| addr_of(&regs, i))
                .flatten();
            match (at, written.as_mut()) {
                (Some(a), Some(w)) => w.push((a, a + i.memory_size().size() as u64)),
                _ => written = None,
            }
        }
        // The destination register's new value, when the reference computes it.
        let dst = (i.op_count() > 0 && i.op0_kind() == OpKind::Register)
            .then(|| gpr(i.op0_register()))
            .flatten();
        let src_val = |regs: &[Option<u64>; 16], k: u32| -> Option<u64> {
            match i.op_kind(k) {
                OpKind::Register => {
                    let (n, sz) = gpr(i.op_register(k))?;
                    if sz == 1
                        && i.op_register(k) as u32 >= Register::AH as u32
                        && i.op_register(k) as u32 <= Register::BH as u32
                    {
                        return None;
                    }
                    let v = regs[n as usize]?;
                    Some(if sz == 8 {
                        v
                    } else {
                        v & ((1u64 << (sz as u32 * 8)) - 1)
                    })
                }
                OpKind::Memory => {
                    let size = i.memory_size().size() as u8;
                    read(&written, addr_of(regs, i)?, size)
                }
                OpKind::Immediate8
                | OpKind::Immediate8to32
                | OpKind::Immediate8to64
                | OpKind::Immediate16
                | OpKind::Immediate32
                | OpKind::Immediate32to64
                | OpKind::Immediate64 => Some(i.immediate(k)),
                _ => None,
            }
        };
        let computed: Option<Option<u64>> = match (i.mnemonic(), dst) {
            (Mnemonic::Cmp | Mnemonic::Test | Mnemonic::Nop, _) => Some(None),
            (_, Some((_, sz))) if sz < 4 => None,
            (Mnemonic::Mov, Some(_)) => Some(src_val(&regs, 1)),
            (Mnemonic::Lea, Some(_)) => Some(addr_of(&regs, i).map(|a| {
                if i.memory_segment() == Register::GS {
                    a.wrapping_sub(GS_BASE)
                } else {
                    a
                }
            })),
            (Mnemonic::Movzx, Some(_)) => Some(src_val(&regs, 1)),
            (Mnemonic::Movsx | Mnemonic::Movsxd, Some(_)) => {
                let bits = match i.op_kind(1) {
                    OpKind::Register => i.op_register(1).size() as u32 * 8,
                    _ => i.memory_size().size() as u32 * 8,
                };
                Some(src_val(&regs, 1).map(|v| (((v << (64 - bits)) as i64) >> (64 - bits)) as u64))
            }
            (
                Mnemonic::Add | Mnemonic::Sub | Mnemonic::And | Mnemonic::Or | Mnemonic::Xor,
                Some((n, _)),
            ) if i.op_kind(1) != OpKind::Memory => Some((|| {
                let a = regs[n as usize]?;
                let b = src_val(&regs, 1)?;
                Some(match i.mnemonic() {
                    Mnemonic::Add => a.wrapping_add(b),
                    Mnemonic::Sub => a.wrapping_sub(b),
                    Mnemonic::And => a & b,
                    Mnemonic::Or => a | b,
                    _ => a ^ b,
                })
            })()),
            (Mnemonic::Inc | Mnemonic::Dec, Some((n, _))) => Some(regs[n as usize].map(|a| {
                if i.mnemonic() == Mnemonic::Inc {
                    a.wrapping_add(1)
                } else {
                    a.wrapping_sub(1)
                }
            })),
            (Mnemonic::Shl | Mnemonic::Shr | Mnemonic::Sar, Some((n, sz)))
                if i.op_kind(1) != OpKind::Register =>
            {
                Some((|| {
                    let a = regs[n as usize]?;
                    let c = (src_val(&regs, 1)? & if sz == 8 { 63 } else { 31 }) as u32;
                    Some(match i.mnemonic() {
                        Mnemonic::Shl => a.wrapping_shl(c),
                        Mnemonic::Shr => {
                            if sz == 8 {
                                a.wrapping_shr(c)
                            } else {
                                (a & 0xffff_ffff).wrapping_shr(c)
                            }
                        }
                        _ => {
                            if sz == 8 {
                                (a as i64).wrapping_shr(c) as u64
                            } else {
                                (a as u32 as i32).wrapping_shr(c) as u32 as u64
                            }
                        }
                    })
                })())
            }
            _ => None,
        };
        match (computed, dst) {
            (Some(None), _)
                if matches!(i.mnemonic(), Mnemonic::Cmp | Mnemonic::Test | Mnemonic::Nop) => {}
            (Some(v), Some((n, sz))) => {
                regs[n as usize] = v.map(|v| if sz == 8 { v } else { v & 0xffff_ffff });
            }
            _ => {
                // Not computed: every general-purpose register it writes is unknown.
                for u in inf.used_registers() {
                    if matches!(
                        u.access(),
                        OpAccess::Write
                            | OpAccess::ReadWrite
                            | OpAccess::CondWrite
                            | OpAccess::ReadCondWrite
                    ) {
                        if let Some((n, _)) = gpr(u.register()) {
                            regs[n as usize] = None;
                        }
                    }
                }
            }
        }
    }
    // The call or jump.
    let target = match fin.op0_kind() {
        OpKind::Register => gpr(fin.op0_register()).and_then(|(n, _)| regs[n as usize]),
        OpKind::Memory => addr_of(&regs, fin).and_then(|a| read(&written, a, 8)),
        _ => None,
    };
    Some((regs, target))
}

#[test]
fn programs_on_every_vmlinux() {
    common::each_vmlinux(check);
}

fn check(path: &Path) {
    let data = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let elf = object::File::parse(&*data).expect("parse vmlinux ELF");
    let cf = common::code_functions(&elf, path);
    let thunk_reg = common::thunk_registers(&cf.by_name);
    assert!(!thunk_reg.is_empty(), "no retpoline thunk symbols");
    let (mut sites, mut compiled, mut known, mut evals) = (0u64, 0u64, 0u64, 0u64);
    let mut refused_ops: HashMap<String, u64> = HashMap::new();
    let mut failures: Vec<String> = Vec::new();
    let mut seed = 0x1234_5678_9abc_def0u64;
    let mut rnd = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for f in &cf.funcs {
        let Some(common::PreSiteView {
            insns,
            targets,
            steps,
        }) = common::presite_view(f)
        else {
            continue;
        };
        for (k, &(off, i)) in insns.iter().enumerate() {
            let next_ip = f.addr + u64::from(off) + u64::from(i.len);
            let Some(fin) = common::indirect_final(i.flow, next_ip, &thunk_reg) else {
                continue;
            };
            let Some(p) = pre_site(&steps, k, 0, |o| targets.contains(&o)) else {
                continue;
            };
            sites += 1;
            let run = &f.bytes[p as usize..off as usize];
            let run_ip = f.addr + u64::from(p);
            let mut iced_run = Vec::new();
            let mut at = p;
            while at < off {
                let ins = common::iced_at(f.bytes, f.addr, at);
                at += ins.len() as u32;
                iced_run.push(ins);
            }
            // The final instruction as iced sees it: through a thunk, a register.
            let fin_ins = match fin {
                Final::Reg(r) => {
                    // call *%reg
                    let bytes: Vec<u8> = if r < 8 {
                        vec![0xff, 0xd0 + r]
                    } else {
                        vec![0x41, 0xff, 0xd0 + (r - 8)]
                    };
                    common::iced_at(&bytes, 0, 0)
                }
                Final::Mem(_) => common::iced_at(f.bytes, f.addr, off),
            };
            let prog = compile(run, run_ip, fin);
            let Some(prog) = prog else {
                for ins in &iced_run {
                    *refused_ops
                        .entry(format!("{:?}", ins.mnemonic()))
                        .or_default() += 1;
                }
                // The reference may refuse too; nothing to compare.
                continue;
            };
            compiled += 1;
            let mut any_known = false;
            for k in 0..4 {
                let mut regs = [0u64; 16];
                for r in regs.iter_mut() {
                    *r = rnd();
                }
                // Once with every register equal: stores and loads through different
                // registers then meet (a program must see that the store comes first).
                if k == 3 {
                    regs = [regs[0] & !0xfff; 16];
                }
                let m = M { regs };
                let end = prog.run(&m);
                let got = end.target;
                assert_eq!(got, prog.target(&m));
                evals += 1;
                let want_end = reference(&iced_run, &fin_ins, &m);
                let want = want_end.and_then(|(_, t)| t);
                // Every register the program computes at the call site (the call's
                // arguments, for the `args` option) is what the reference computes.
                if let Some((want_regs, _)) = want_end {
                    for (r, w) in (0u8..).zip(want_regs.iter()) {
                        if let (Some(g), Some(w)) = (end.reg(r), *w) {
                            if g != w {
                                failures.push(format!(
                                    "{}+{p:#x}: register {r} at the site {g:#x}, iced says \
                                     {w:#x}: {}",
                                    f.name,
                                    common::disasm(run, run_ip)
                                ));
                            }
                        }
                    }
                }
                if got.is_some() && got != want {
                    failures.push(format!(
                        "{}+{p:#x}: target {got:x?}, iced says {want:x?}: {} ({:?})",
                        f.name,
                        common::disasm(run, run_ip),
                        prog.ops()
                    ));
                }
                any_known |= got.is_some();
            }
            if any_known {
                known += 1;
            }
        }
    }
    println!("vmlinux: {}", path.display());
    println!(
        "indirect sites with a pre-site: {sites}; with a program: {compiled} ({:.1}%); \
         a target computed: {known} ({:.1}%); {evals} evaluations compared with iced-x86",
        compiled as f64 * 100.0 / sites.max(1) as f64,
        known as f64 * 100.0 / sites.max(1) as f64
    );
    let mut refused: Vec<_> = refused_ops.into_iter().collect();
    refused.sort_by_key(|r| std::cmp::Reverse(r.1));
    println!(
        "instructions in runs without a program: {:?}",
        &refused[..refused.len().min(12)]
    );
    for m in failures.iter().take(40) {
        println!("FAIL {m}");
    }
    assert!(failures.is_empty(), "{} bad programs", failures.len());
    assert!(
        sites > 1000,
        "suspiciously few indirect sites with a pre-site: {sites}"
    );
    assert!(
        known * 10 > sites * 8,
        "only {known} of {sites} indirect sites have a target computed at the pre-site"
    );
}
