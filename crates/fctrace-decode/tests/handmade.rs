// SPDX-License-Identifier: GPL-2.0
//! Hand-made instruction encodings, each with its disassembly. Every valid
//! case is also checked to decode identically with iced-x86.

mod common;

use fctrace_decode::{decode, scan, Cond, DecodeError, Flow, Insn, Mem, Seg};

const IP: u64 = 0xffff_ffff_8100_0000;

/// Decodes with us, checks iced agrees, returns our decoding.
#[track_caller]
fn dec(bytes: &[u8], ip: u64) -> Insn {
    let ours = decode(bytes, ip).unwrap_or_else(|e| panic!("[{}]: {e:?}", common::hex(bytes)));
    let iced = common::iced_decode(bytes, ip).unwrap();
    assert_eq!(
        common::canon(ours),
        iced,
        "[{}] `{}`",
        common::hex(bytes),
        common::disasm(bytes, ip)
    );
    assert_eq!(
        ours.len as usize,
        bytes.len(),
        "[{}] must be exactly one instruction",
        common::hex(bytes)
    );
    ours
}

#[track_caller]
fn flow(bytes: &[u8], ip: u64) -> Flow {
    dec(bytes, ip).flow
}

#[track_caller]
fn err(bytes: &[u8]) -> DecodeError {
    let e = decode(bytes, IP).expect_err(&common::hex(bytes));
    if bytes.len() >= 15 || e == DecodeError::Invalid {
        assert!(
            common::iced_decode(bytes, IP).is_err(),
            "iced decodes [{}]",
            common::hex(bytes)
        );
    }
    e
}

fn mem(base: Option<u8>, index: Option<u8>, scale: u8, disp: i32) -> Mem {
    Mem {
        base,
        index,
        scale,
        disp,
        rip_relative: false,
        segment: None,
    }
}

#[test]
fn endbr64() {
    // f3 0f 1e fa    endbr64
    let i = dec(&[0xf3, 0x0f, 0x1e, 0xfa], IP);
    assert_eq!(
        i,
        Insn {
            len: 4,
            flow: Flow::Next,
            endbr64: true,
            nop: false
        }
    );
    // f3 0f 1e fb    endbr32: not endbr64
    assert!(!dec(&[0xf3, 0x0f, 0x1e, 0xfb], IP).endbr64);
}

#[test]
fn direct_calls() {
    // e8 10 00 00 00    call IP+0x15
    assert_eq!(flow(&[0xe8, 0x10, 0, 0, 0], IP), Flow::Call(IP + 0x15));
    // e8 fb ff ff 00    call __x86_indirect_thunk_r11 (at 0xffffffff82000000)
    assert_eq!(
        flow(&[0xe8, 0xfb, 0xff, 0xff, 0x00], IP),
        Flow::Call(0xffff_ffff_8200_0000)
    );
    // e8 fb ef ff ff    call IP-0x1000 (backwards)
    assert_eq!(
        flow(&[0xe8, 0xfb, 0xef, 0xff, 0xff], IP),
        Flow::Call(IP - 0x1000)
    );
    // 2e e8 fa ff ff 00    cs call __x86_indirect_thunk_r11 (clang -mindirect-branch-cs-prefix)
    let i = dec(&[0x2e, 0xe8, 0xfa, 0xff, 0xff, 0x00], IP);
    assert_eq!((i.len, i.flow), (6, Flow::Call(0xffff_ffff_8200_0000)));
    // 66 e8 00 00 00 00    data16 call IP+6 (66 ignored: still rel32 in 64-bit mode, Intel)
    assert_eq!(dec(&[0x66, 0xe8, 0, 0, 0, 0], IP).flow, Flow::Call(IP + 6));
}

#[test]
fn indirect_calls() {
    // 41 ff d3    call *%r11
    assert_eq!(flow(&[0x41, 0xff, 0xd3], IP), Flow::CallReg(11));
    // ff d0       call *%rax
    assert_eq!(flow(&[0xff, 0xd0], IP), Flow::CallReg(0));
    // ff 50 10    call *0x10(%rax)
    assert_eq!(
        flow(&[0xff, 0x50, 0x10], IP),
        Flow::CallMem(mem(Some(0), None, 1, 0x10))
    );
    // 41 ff 54 24 f8    call *-0x8(%r12)   (SIB, base r12)
    assert_eq!(
        flow(&[0x41, 0xff, 0x54, 0x24, 0xf8], IP),
        Flow::CallMem(mem(Some(12), None, 1, -8))
    );
    // 42 ff 14 e5 00 10 00 81    call *-0x7effff000(,%r12,8)  (table, no base)
    assert_eq!(
        flow(&[0x42, 0xff, 0x14, 0xe5, 0x00, 0x10, 0x00, 0x81], IP),
        Flow::CallMem(mem(None, Some(12), 8, 0x8100_1000u32 as i32))
    );
    // ff 14 c3    call *(%rbx,%rax,8)
    assert_eq!(
        flow(&[0xff, 0x14, 0xc3], IP),
        Flow::CallMem(mem(Some(3), Some(0), 8, 0))
    );
    // 65 ff 14 25 34 12 00 00    call *%gs:0x1234
    let m = Mem {
        segment: Some(Seg::Gs),
        ..mem(None, None, 1, 0x1234)
    };
    assert_eq!(
        flow(&[0x65, 0xff, 0x14, 0x25, 0x34, 0x12, 0, 0], IP),
        Flow::CallMem(m)
    );
    // ff 15 00 01 00 00    call *0x100(%rip)
    let Flow::CallMem(m) = flow(&[0xff, 0x15, 0x00, 0x01, 0, 0], IP) else {
        panic!()
    };
    assert!(m.rip_relative && m.base.is_none() && m.disp == 0x100);
    assert_eq!(m.rip_target(IP + 6), Some(IP + 0x106));
    // ff 18       lcall *(%rax)   (far indirect call: CallMem)
    assert_eq!(
        flow(&[0xff, 0x18], IP),
        Flow::CallMem(mem(Some(0), None, 1, 0))
    );
}

#[test]
fn lfence_call_rax_retpoline_alternative() {
    // 0f ae e8    lfence
    // ff d0       call *%rax
    let code = [0x0f, 0xae, 0xe8, 0xff, 0xd0];
    let mut v = Vec::new();
    scan(&code, IP, |off, i| v.push((off, i.len, i.flow))).unwrap();
    assert_eq!(v, [(0, 3, Flow::Next), (3, 2, Flow::CallReg(0))]);
}

#[test]
fn returns() {
    // c3          ret
    assert_eq!(
        dec(&[0xc3], IP),
        Insn {
            len: 1,
            flow: Flow::Ret,
            endbr64: false,
            nop: false
        }
    );
    // c2 08 00    ret $8
    assert_eq!(dec(&[0xc2, 0x08, 0x00], IP).flow, Flow::Ret);
    // cb          lret;   48 cf   iretq;   48 0f 07   sysretq
    assert_eq!(flow(&[0xcb], IP), Flow::Ret);
    assert_eq!(flow(&[0x48, 0xcf], IP), Flow::Ret);
    assert_eq!(flow(&[0x48, 0x0f, 0x07], IP), Flow::Ret);
    // e9 8b 82 03 00    jmp __x86_return_thunk (IP+0x38290): a tail jump
    assert_eq!(
        flow(&[0xe9, 0x8b, 0x82, 0x03, 0x00], IP),
        Flow::Jmp(IP + 0x38290)
    );
}

#[test]
fn jumps() {
    // e9 00 01 00 00    jmp IP+0x105 (tail call)
    assert_eq!(flow(&[0xe9, 0x00, 0x01, 0, 0], IP), Flow::Jmp(IP + 0x105));
    // eb fe    jmp . ;   eb 80    jmp .-0x7e
    assert_eq!(flow(&[0xeb, 0xfe], IP), Flow::Jmp(IP));
    assert_eq!(flow(&[0xeb, 0x80], IP), Flow::Jmp(IP + 2 - 128));
    // ff e0    jmp *%rax;   41 ff e3    jmp *%r11
    assert_eq!(flow(&[0xff, 0xe0], IP), Flow::JmpReg(0));
    assert_eq!(flow(&[0x41, 0xff, 0xe3], IP), Flow::JmpReg(11));
    // ff 24 c5 00 10 00 81    jmp *-0x7effff000(,%rax,8)   (switch jump table)
    assert_eq!(
        flow(&[0xff, 0x24, 0xc5, 0x00, 0x10, 0x00, 0x81], IP),
        Flow::JmpMem(mem(None, Some(0), 8, 0x8100_1000u32 as i32))
    );
    // ff 28    ljmp *(%rax)
    assert_eq!(
        flow(&[0xff, 0x28], IP),
        Flow::JmpMem(mem(Some(0), None, 1, 0))
    );
    // 74 05    je IP+7;   0f 84 00 10 00 00    je IP+0x1006
    assert_eq!(flow(&[0x74, 0x05], IP), Flow::Jcc(IP + 7, Some(Cond::E)));
    assert_eq!(
        flow(&[0x0f, 0x84, 0x00, 0x10, 0, 0], IP),
        Flow::Jcc(IP + 0x1006, Some(Cond::E))
    );
    // e3 fe    jrcxz .;   e2 fc    loop .-2;   67 e3 00    jecxz IP+3
    assert_eq!(flow(&[0xe3, 0xfe], IP), Flow::Jcc(IP, None));
    assert_eq!(flow(&[0xe2, 0xfc], IP), Flow::Jcc(IP - 2, None));
    assert_eq!(flow(&[0x67, 0xe3, 0x00], IP), Flow::Jcc(IP + 3, None));
    // e1 00    loope IP+2;   e0 00    loopne IP+2: they test ZF, but also
    // count rcx down, so they carry no condition code.
    assert_eq!(flow(&[0xe1, 0x00], IP), Flow::Jcc(IP + 2, None));
    assert_eq!(flow(&[0xe0, 0x00], IP), Flow::Jcc(IP + 2, None));
    // c7 f8 00 01 00 00    xbegin IP+0x106 (abort path)
    assert_eq!(
        flow(&[0xc7, 0xf8, 0x00, 0x01, 0, 0], IP),
        Flow::Jcc(IP + 0x106, None)
    );
}

/// The condition code of every `jcc` form, whatever the prefixes.
#[test]
fn jcc_condition_codes() {
    for cc in 0..16u8 {
        // 70+cc 10    jcc rel8
        assert_eq!(
            flow(&[0x70 + cc, 0x10], IP),
            Flow::Jcc(IP + 0x12, Some(Cond::new(cc)))
        );
        // 0f 80+cc 00 00 00 00    jcc rel32
        assert_eq!(
            flow(&[0x0f, 0x80 + cc, 0, 0, 0, 0], IP),
            Flow::Jcc(IP + 6, Some(Cond::new(cc)))
        );
        assert_eq!(Cond::new(cc).code(), cc);
    }
    // 75 10    jne rel8
    assert_eq!(
        flow(&[0x75, 0x10], IP),
        Flow::Jcc(IP + 0x12, Some(Cond::NE))
    );
    // 3e 0f 85 00 00 00 00    ds jne (notrack-style branch hint)
    assert_eq!(
        flow(&[0x3e, 0x0f, 0x85, 0, 0, 0, 0], IP),
        Flow::Jcc(IP + 7, Some(Cond::NE))
    );
    // 2e 74 00    cs je (branch hint "not taken")
    assert_eq!(
        flow(&[0x2e, 0x74, 0x00], IP),
        Flow::Jcc(IP + 3, Some(Cond::E))
    );
    // 48 0f 8f 00 00 00 00    rex.w jg
    assert_eq!(
        flow(&[0x48, 0x0f, 0x8f, 0, 0, 0, 0], IP),
        Flow::Jcc(IP + 7, Some(Cond::G))
    );
    // Not conditional jumps: jmp, call, setcc/cmovcc (a condition, no jump).
    assert_eq!(flow(&[0xe9, 0, 0, 0, 0], IP), Flow::Jmp(IP + 5));
    assert_eq!(flow(&[0x0f, 0x95, 0xc0], IP), Flow::Next); // setne %al
    assert_eq!(flow(&[0x0f, 0x45, 0xc1], IP), Flow::Next); // cmovne %ecx,%eax
    assert_eq!(Cond::new(0x15), Cond::NE, "only the low 4 bits count");
}

/// Whether each condition holds for a given RFLAGS.
#[test]
fn conditions_evaluate_on_rflags() {
    const CF: u64 = 1;
    const PF: u64 = 1 << 2;
    const ZF: u64 = 1 << 6;
    const SF: u64 = 1 << 7;
    const OF: u64 = 1 << 11;
    assert!(Cond::E.holds(ZF));
    assert!(!Cond::NE.holds(ZF));
    assert!(Cond::NE.holds(0));
    assert!(Cond::B.holds(CF));
    assert!(!Cond::AE.holds(CF));
    assert!(Cond::A.holds(0));
    assert!(!Cond::A.holds(CF));
    assert!(!Cond::A.holds(ZF));
    assert!(Cond::BE.holds(ZF));
    assert!(Cond::L.holds(SF)); // sf != of
    assert!(Cond::L.holds(OF));
    assert!(!Cond::L.holds(SF | OF));
    assert!(Cond::GE.holds(SF | OF));
    assert!(Cond::LE.holds(ZF));
    assert!(Cond::LE.holds(SF));
    assert!(Cond::G.holds(0));
    assert!(!Cond::G.holds(SF));
    assert!(!Cond::G.holds(ZF | SF | OF));
    assert!(Cond::O.holds(OF) && !Cond::NO.holds(OF));
    assert!(Cond::S.holds(SF) && !Cond::NS.holds(SF));
    assert!(Cond::P.holds(PF) && !Cond::NP.holds(PF));
    // Unrelated flag bits (IF, the reserved bit 1) change nothing.
    assert!(Cond::NE.holds(0x202) && !Cond::E.holds(0x202));
    // Each odd code is the negation of the even one below it, for every
    // combination of the five status flags.
    for bits in 0..32u64 {
        let f: u64 = [CF, PF, ZF, SF, OF]
            .iter()
            .enumerate()
            .filter(|&(i, _)| bits & (1 << i) != 0)
            .map(|(_, &flag)| flag)
            .sum();
        for cc in (0..16u8).step_by(2) {
            assert_ne!(Cond::new(cc).holds(f), Cond::new(cc + 1).holds(f));
        }
    }
}

#[test]
fn nops() {
    // 0f 1f 44 00 00    nopl 0x0(%rax,%rax,1)   (ftrace fentry site after boot)
    assert_eq!(
        dec(&[0x0f, 0x1f, 0x44, 0, 0], IP),
        Insn {
            len: 5,
            flow: Flow::Next,
            endbr64: false,
            nop: true
        }
    );
    // 90    nop;   66 90    xchg %ax,%ax;   0f 1f 00    nopl (%rax)
    assert!(dec(&[0x90], IP).nop);
    assert!(dec(&[0x66, 0x90], IP).nop);
    assert!(dec(&[0x0f, 0x1f, 0x00], IP).nop);
    // 66 0f 1f 84 00 00 00 00 00    nopw 0x0(%rax,%rax,1)
    assert!(dec(&[0x66, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0], IP).nop);
    // 66 2e 0f 1f 84 00 00 00 00 00    cs nopw 0x0(%rax,%rax,1)
    assert!(dec(&[0x66, 0x2e, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0], IP).nop);
    // f3 90    pause;   41 90    xchg %eax,%r8d: not nops
    assert!(!dec(&[0xf3, 0x90], IP).nop);
    assert!(!dec(&[0x41, 0x90], IP).nop);
}

#[test]
fn traps() {
    // 0f 0b    ud2;   0f b9 40 0c    ud1 0xc(%rax),%eax;   0f ff c0    ud0 %eax,%eax
    assert_eq!(flow(&[0x0f, 0x0b], IP), Flow::Ud);
    assert_eq!(flow(&[0x0f, 0xb9, 0x40, 0x0c], IP), Flow::Ud);
    assert_eq!(flow(&[0x0f, 0xff, 0xc0], IP), Flow::Ud);
    // cc    int3;   cd 80    int $0x80 (Next)
    assert_eq!(
        dec(&[0xcc], IP),
        Insn {
            len: 1,
            flow: Flow::Int3,
            endbr64: false,
            nop: false
        }
    );
    assert_eq!(flow(&[0xcd, 0x80], IP), Flow::Next);
}

#[test]
fn vex_evex_xop() {
    // c5 f8 77    vzeroupper (no ModRM)
    assert_eq!(dec(&[0xc5, 0xf8, 0x77], IP).len, 3);
    // c5 fe 6f 07    vmovdqu (%rdi),%ymm0
    dec(&[0xc5, 0xfe, 0x6f, 0x07], IP);
    // c5 fd 70 c1 1b    vpshufd $0x1b,%ymm1,%ymm0
    dec(&[0xc5, 0xfd, 0x70, 0xc1, 0x1b], IP);
    // c4 e2 7d 58 c8    vpbroadcastd %xmm0,%ymm1
    dec(&[0xc4, 0xe2, 0x7d, 0x58, 0xc8], IP);
    // c4 e3 6d 0f d9 08    vpalignr $8,%ymm1,%ymm2,%ymm3
    dec(&[0xc4, 0xe3, 0x6d, 0x0f, 0xd9, 0x08], IP);
    // c4 42 fb f6 c1    mulx %r9,%rax,%r8   (BMI2)
    dec(&[0xc4, 0x42, 0xfb, 0xf6, 0xc1], IP);
    // c4 c1 79 7e 44 24 08    vmovd %xmm0,0x8(%r12)
    dec(&[0xc4, 0xc1, 0x79, 0x7e, 0x44, 0x24, 0x08], IP);
    // 62 f1 fe 48 6f 07    vmovdqu64 (%rdi),%zmm0
    dec(&[0x62, 0xf1, 0xfe, 0x48, 0x6f, 0x07], IP);
    // 62 f1 fe 48 6f 47 01    vmovdqu64 0x40(%rdi),%zmm0   (disp8*64)
    dec(&[0x62, 0xf1, 0xfe, 0x48, 0x6f, 0x47, 0x01], IP);
    // 62 f3 7d 48 25 c0 ff    vpternlogd $0xff,%zmm0,%zmm0,%zmm0
    dec(&[0x62, 0xf3, 0x7d, 0x48, 0x25, 0xc0, 0xff], IP);
    // 62 f5 7c 48 58 c1    vaddph %zmm1,%zmm0,%zmm0   (EVEX map 5)
    dec(&[0x62, 0xf5, 0x7c, 0x48, 0x58, 0xc1], IP);
    // 8f e9 78 e1 c1    vphsubbw %xmm1,%xmm0   (XOP map 9)
    dec(&[0x8f, 0xe9, 0x78, 0xe1, 0xc1], IP);
    // 8f e8 78 c0 c1 05    vprotb $5,%xmm1,%xmm0   (XOP map 8, imm8)
    dec(&[0x8f, 0xe8, 0x78, 0xc0, 0xc1, 0x05], IP);
    // 8f ea 78 10 c1 01 02 00 00    bextr $0x201,%ecx,%eax   (XOP map 10, imm32)
    dec(&[0x8f, 0xea, 0x78, 0x10, 0xc1, 0x01, 0x02, 0, 0], IP);
    // 8f 00    pop (%rax)
    dec(&[0x8f, 0x00], IP);
    // 66 c5 f8 77: VEX after a 66 prefix is #UD
    assert_eq!(err(&[0x66, 0xc5, 0xf8, 0x77]), DecodeError::Invalid);
}

#[test]
fn immediates_and_operand_sizes() {
    // 48 b8 88 77 66 55 44 33 22 11    movabs $0x1122334455667788,%rax
    dec(
        &[0x48, 0xb8, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11],
        IP,
    );
    // 49 bb ...    movabs $imm64,%r11
    dec(&[0x49, 0xbb, 1, 2, 3, 4, 5, 6, 7, 8], IP);
    // b8 01 00 00 00    mov $1,%eax;   66 b8 34 12    mov $0x1234,%ax
    dec(&[0xb8, 1, 0, 0, 0], IP);
    dec(&[0x66, 0xb8, 0x34, 0x12], IP);
    // 48 66 b8 34 12: REX followed by 66 is ignored -> mov $0x1234,%ax (5 bytes)
    dec(&[0x48, 0x66, 0xb8, 0x34, 0x12], IP);
    // 48 a1 88 77 66 55 44 33 22 11    movabs 0x1122334455667788,%rax
    dec(
        &[0x48, 0xa1, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11],
        IP,
    );
    // a2 + moffs64    movabs %al,0x...;   67 a1 + moffs32    mov 0x...(%eax-size),%eax
    dec(&[0xa2, 1, 2, 3, 4, 5, 6, 7, 8], IP);
    dec(&[0x67, 0xa1, 1, 2, 3, 4], IP);
    // f6 c1 01    test $1,%cl;   f6 d1    not %cl
    dec(&[0xf6, 0xc1, 0x01], IP);
    dec(&[0xf6, 0xd1], IP);
    // f7 c1 00 01 00 00    test $0x100,%ecx;   66 f7 c1 00 01    test $0x100,%cx;   48 f7 d8    neg %rax
    dec(&[0xf7, 0xc1, 0, 1, 0, 0], IP);
    dec(&[0x66, 0xf7, 0xc1, 0, 1], IP);
    dec(&[0x48, 0xf7, 0xd8], IP);
    // 48 c7 c0 f7 ff ff ff    mov $-9,%rax;   66 c7 00 34 12    movw $0x1234,(%rax)
    dec(&[0x48, 0xc7, 0xc0, 0xf7, 0xff, 0xff, 0xff], IP);
    dec(&[0x66, 0xc7, 0x00, 0x34, 0x12], IP);
    // 66 68 34 12    pushw $0x1234;   6a ff    push $-1;   68 .. ..    push $imm32
    dec(&[0x66, 0x68, 0x34, 0x12], IP);
    dec(&[0x6a, 0xff], IP);
    dec(&[0x68, 1, 2, 3, 4], IP);
    // c8 10 00 00    enter $0x10,$0
    dec(&[0xc8, 0x10, 0x00, 0x00], IP);
    // 0f 0f c1 b4    pfmul %mm1,%mm0   (3DNow!, suffix opcode as imm8)
    dec(&[0x0f, 0x0f, 0xc1, 0xb4], IP);
    // 0f ba e1 11    bt $0x11,%ecx;   0f a4 c2 05    shld $5,%eax,%edx
    dec(&[0x0f, 0xba, 0xe1, 0x11], IP);
    dec(&[0x0f, 0xa4, 0xc2, 0x05], IP);
    // 66 0f 3a 0f c1 08    palignr $8,%xmm1,%xmm0;   66 0f 38 00 c1    pshufb %xmm1,%xmm0
    dec(&[0x66, 0x0f, 0x3a, 0x0f, 0xc1, 0x08], IP);
    dec(&[0x66, 0x0f, 0x38, 0x00, 0xc1], IP);
    // 0f 20 d8    mov %cr3,%rax;   0f 22 05: mod bits ignored -> mov %rbp,%cr0, 3 bytes (no disp32)
    dec(&[0x0f, 0x20, 0xd8], IP);
    dec(&[0x0f, 0x22, 0x05], IP);
    // 65 48 8b 04 25 28 00 00 00    mov %gs:0x28,%rax   (SIB, no base, no index)
    dec(&[0x65, 0x48, 0x8b, 0x04, 0x25, 0x28, 0, 0, 0], IP);
    // 48 8b 05 00 00 00 00    mov 0x0(%rip),%rax
    dec(&[0x48, 0x8b, 0x05, 0, 0, 0, 0], IP);
    // 48 8b 84 24 00 01 00 00    mov 0x100(%rsp),%rax   (SIB + disp32)
    dec(&[0x48, 0x8b, 0x84, 0x24, 0, 1, 0, 0], IP);
    // 4c 8b 6d 00    mov 0x0(%rbp),%r13   (mod 1 with rm 5)
    dec(&[0x4c, 0x8b, 0x6d, 0x00], IP);
    // f0 48 0f b1 0e    lock cmpxchg %rcx,(%rsi)
    dec(&[0xf0, 0x48, 0x0f, 0xb1, 0x0e], IP);
    // f3 48 0f b8 c1    popcnt %rcx,%rax
    dec(&[0xf3, 0x48, 0x0f, 0xb8, 0xc1], IP);
    // 0f 01 f8    swapgs;   0f 01 ca    clac (Next);   f3 0f 01 ca    eretu (Ret)
    assert_eq!(flow(&[0x0f, 0x01, 0xf8], IP), Flow::Next);
    assert_eq!(flow(&[0x0f, 0x01, 0xca], IP), Flow::Next);
    assert_eq!(flow(&[0xf3, 0x0f, 0x01, 0xca], IP), Flow::Ret);
    // f2 0f 01 ca    erets;   f3 0f 01 ec    uiret;   0f aa    rsm
    assert_eq!(flow(&[0xf2, 0x0f, 0x01, 0xca], IP), Flow::Ret);
    assert_eq!(flow(&[0xf3, 0x0f, 0x01, 0xec], IP), Flow::Ret);
    assert_eq!(flow(&[0x0f, 0xaa], IP), Flow::Ret);
    // 14 bytes of prefixes + 1-byte opcode = 15: fine
    let mut long = [0x66u8; 15];
    long[14] = 0x90;
    assert_eq!(decode(&long, IP).unwrap().len, 15);
}

#[test]
fn truncated() {
    for b in [
        &[][..],
        &[0xe8, 0x00, 0x00],                // call rel32 cut
        &[0xf3, 0x0f, 0x1e],                // endbr64 cut
        &[0x66, 0x66],                      // prefixes only
        &[0x48],                            // REX only
        &[0x0f],                            // escape only
        &[0xc4, 0xe2],                      // VEX3 cut
        &[0x62, 0xf1, 0xfe, 0x48, 0x6f],    // EVEX without ModRM
        &[0xff, 0x14],                      // call *(SIB missing)
        &[0xff, 0x15, 0x00, 0x01, 0x00],    // call *disp32(%rip) cut
        &[0x48, 0xb8, 1, 2, 3, 4, 5, 6, 7], // movabs imm64 cut
        &[0x0f, 0x1f, 0x44, 0x00],          // nop5 cut
        &[0x8f],                            // pop/XOP cut
    ] {
        assert_eq!(
            decode(b, IP),
            Err(DecodeError::Truncated),
            "[{}]",
            common::hex(b)
        );
        assert_eq!(
            common::iced_decode(b, IP),
            Err(DecodeError::Truncated),
            "iced [{}]",
            common::hex(b)
        );
    }
    // scan reports where the sweep stopped.
    assert_eq!(
        scan(&[0x90, 0xc3, 0xe8, 0x00], IP, |_, _| {}),
        Err((2, DecodeError::Truncated))
    );
}

#[test]
fn invalid_in_64bit_mode() {
    // push/pop segment, daa/das/aaa/aas, pusha/popa, 82 alias, far call/jmp ptr, into, aam/aad, salc
    for op in [
        0x06u8, 0x07, 0x0e, 0x16, 0x17, 0x1e, 0x1f, 0x27, 0x2f, 0x37, 0x3f, 0x60, 0x61, 0x82, 0x9a,
        0xce, 0xd4, 0xd5, 0xd6, 0xea,
    ] {
        let b = [op, 0xc0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0];
        assert_eq!(err(&b), DecodeError::Invalid, "{op:02x}");
    }
    // ff f8 (ff /7), ff d8 (lcall with a register), fe d0 (fe /2): invalid
    for b in [[0xff, 0xf8], [0xff, 0xd8], [0xfe, 0xd0]] {
        assert_eq!(err(&b), DecodeError::Invalid);
    }
    // 0f 0a, 0f 04: undefined two-byte opcodes
    assert_eq!(err(&[0x0f, 0x0a]), DecodeError::Invalid);
    assert_eq!(err(&[0x0f, 0x04]), DecodeError::Invalid);
    // 15 prefixes then nop: longer than 15 bytes
    let mut long = [0x66u8; 16];
    long[15] = 0x90;
    assert_eq!(err(&long), DecodeError::Invalid);
    // scan stops at the invalid byte
    assert_eq!(
        scan(&[0x90, 0x06], IP, |_, _| {}),
        Err((1, DecodeError::Invalid))
    );
}

#[test]
fn scan_walks_a_function() {
    // f3 0f 1e fa          endbr64
    // 0f 1f 44 00 00       nopl 0x0(%rax,%rax,1)
    // 55                   push %rbp
    // e8 00 00 00 00       call next
    // 5d                   pop %rbp
    // e9 00 00 00 00       jmp next (tail call)
    let code = [
        0xf3, 0x0f, 0x1e, 0xfa, 0x0f, 0x1f, 0x44, 0, 0, 0x55, 0xe8, 0, 0, 0, 0, 0x5d, 0xe9, 0, 0,
        0, 0,
    ];
    let mut v = Vec::new();
    scan(&code, IP, |off, i| v.push((off, i.flow))).unwrap();
    assert_eq!(
        v,
        [
            (0, Flow::Next),
            (4, Flow::Next),
            (9, Flow::Next),
            (10, Flow::Call(IP + 15)),
            (15, Flow::Next),
            (16, Flow::Jmp(IP + 21))
        ]
    );
    assert_eq!(scan(&[], IP, |_, _| panic!()), Ok(()));
}

/// The instructions of a hand-made function body, for `pre_site`.
fn steps(code: &[u8]) -> Vec<fctrace_decode::presite::Insn> {
    let mut v = Vec::new();
    scan(code, IP, |off, i| {
        v.push(fctrace_decode::presite::Insn {
            off,
            len: i.len,
            steppable: fctrace_decode::presite::steppable(&code[off as usize..]),
            site: fctrace_decode::presite::may_be_site(i.flow, IP, IP + code.len() as u64),
        })
    })
    .unwrap();
    v
}

#[test]
fn steppable_instructions() {
    use fctrace_decode::presite::steppable;
    for ok in [
        &[0x48, 0x8b, 0x43, 0x28][..],               // mov 0x28(%rbx),%rax
        &[0x4c, 0x89, 0xe7],                         // mov %r12,%rdi
        &[0x0f, 0x1f, 0x44, 0x00, 0x00],             // nopl 0x0(%rax,%rax,1)
        &[0x31, 0xd2],                               // xor %edx,%edx
        &[0x65, 0x48, 0x8b, 0x04, 0x25, 0, 0, 0, 0], // mov %gs:0x0,%rax
        &[0x53],                                     // push %rbx
        &[0xff, 0xc0],                               // inc %eax
        &[0xf0, 0xff, 0x03],                         // lock incl (%rbx)
        &[0x48, 0x8d, 0x3d, 0, 0, 0, 0],             // lea 0x0(%rip),%rdi
    ] {
        assert!(steppable(ok), "[{}] should be steppable", common::hex(ok));
    }
    for no in [
        &[0xe8, 0, 0, 0, 0][..],   // call
        &[0xff, 0xd0],             // call *%rax
        &[0xff, 0xe0],             // jmp *%rax
        &[0x74, 0x02],             // je
        &[0x9c],                   // pushf
        &[0x9d],                   // popf
        &[0xfb],                   // sti
        &[0xfa],                   // cli
        &[0xc3],                   // ret
        &[0xcc],                   // int3
        &[0xf3, 0x48, 0xa5],       // rep movsq
        &[0x8e, 0xd0],             // mov %eax,%ss
        &[0x0f, 0x22, 0xd8],       // mov %rax,%cr3
        &[0x2e, 0xe8, 0, 0, 0, 0], // cs call
        &[0x67, 0x8b, 0x00],       // mov (%eax),%eax
        &[0xc5, 0xf8, 0x77],       // vzeroupper
        &[0x0f, 0x38, 0xf0, 0x07], // movbe (%rdi),%eax
    ] {
        assert!(
            !steppable(no),
            "[{}] must not be steppable",
            common::hex(no)
        );
    }
}

#[test]
fn straight_runs() {
    use fctrace_decode::presite::straight_run;
    // push %rbx; nopl 0x0(%rax,%rax,1); mov %r12,%rdi; mov 0x28(%rbx),%rax; call *%rax
    let code = [
        0x53, 0x0f, 0x1f, 0x44, 0x00, 0x00, 0x4c, 0x89, 0xe7, 0x48, 0x8b, 0x43, 0x28, 0xff, 0xd0,
    ];
    let s = steps(&code);
    // The longest run, not the shortest.
    assert_eq!(straight_run(&s, 4, 0, |_| false), Some(0));
    // Not before the ftrace site; not across a branch target.
    assert_eq!(straight_run(&s, 4, 1, |_| false), Some(1));
    assert_eq!(straight_run(&s, 4, 0, |o| o == 6), Some(6));
    // A branch to the site itself: the site alone.
    assert_eq!(straight_run(&s, 4, 0, |o| o == 13), Some(13));
    // Not across a call: call rel32; mov 0x28(%rbx),%rax; call *%rax
    let code = [0xe8, 0, 0, 0, 0, 0x48, 0x8b, 0x43, 0x28, 0xff, 0xd0];
    let s = steps(&code);
    assert_eq!(straight_run(&s, 2, 0, |_| false), Some(5));
}

#[test]
fn pre_site_runs() {
    use fctrace_decode::presite::pre_site;
    // mov %r12,%rdi; mov 0x28(%rbx),%rax; call *%rax
    let code = [0x4c, 0x89, 0xe7, 0x48, 0x8b, 0x43, 0x28, 0xff, 0xd0];
    let s = steps(&code);
    assert_eq!(pre_site(&s, 2, 0, |_| false), Some(0));
    // The function's ftrace site is not part of a run.
    assert_eq!(pre_site(&s, 2, 3, |_| false), None);
    // A jump to the second instruction, or to the call, leaves no run.
    assert_eq!(pre_site(&s, 2, 0, |o| o == 3), None);
    assert_eq!(pre_site(&s, 2, 0, |o| o == 7), None);
    // A jump to the run's first instruction is fine: it goes through the probe.
    assert_eq!(pre_site(&s, 2, 0, |o| o == 0), Some(0));

    // Two instructions are needed even when one has 5 bytes; the shortest run wins.
    // push %rbx; nopl 0x0(%rax,%rax,1); xor %edx,%edx; call rel32
    let code = [
        0x53, 0x0f, 0x1f, 0x44, 0x00, 0x00, 0x31, 0xd2, 0xe8, 0, 0, 0, 0,
    ];
    let s = steps(&code);
    assert_eq!(pre_site(&s, 3, 0, |_| false), Some(1));

    // pushf before the call: no run through it.
    // mov %rdi,%rbx; pushf; mov %rbx,%rdi; call rel32
    let code = [0x48, 0x89, 0xfb, 0x9c, 0x48, 0x89, 0xdf, 0xe8, 0, 0, 0, 0];
    let s = steps(&code);
    assert_eq!(pre_site(&s, 3, 0, |_| false), None);

    // A call right after a call: too short.
    let code = [0xe8, 0, 0, 0, 0, 0x31, 0xd2, 0xe8, 0, 0, 0, 0];
    let s = steps(&code);
    assert_eq!(pre_site(&s, 2, 0, |_| false), None);
    assert_eq!(pre_site(&s, 0, 0, |_| false), None);
}

#[test]
fn post_site_runs() {
    use fctrace_decode::presite::post_site;
    // call rel32; mov 0x8(%rsp),%r15; mov %rax,%rbx; ret
    let code = [
        0xe8, 0, 0, 0, 0, 0x4c, 0x8b, 0x7c, 0x24, 0x08, 0x48, 0x89, 0xc3, 0xc3,
    ];
    let s = steps(&code);
    // One 5-byte instruction is enough: the run is what the detour's jump covers.
    assert_eq!(post_site(&s, 0, |_| false), Some((5, 10)));
    // A branch to the return address goes through the probe; one past it cannot be.
    assert_eq!(post_site(&s, 0, |o| o == 5), Some((5, 10)));
    // call rel32; xor %eax,%eax; mov %rax,%rbx; pop %rbx; ret
    let code = [0xe8, 0, 0, 0, 0, 0x31, 0xc0, 0x48, 0x89, 0xc3, 0x5b, 0xc3];
    let s = steps(&code);
    assert_eq!(post_site(&s, 0, |_| false), Some((5, 10)));
    assert_eq!(post_site(&s, 0, |o| o == 7), None);
    // A return or a jump before 5 bytes: none.
    // call rel32; pop %rbx; ret
    let code = [0xe8, 0, 0, 0, 0, 0x5b, 0xc3];
    assert_eq!(post_site(&steps(&code), 0, |_| false), None);
    // call rel32; test %eax,%eax; jne +0; ...
    let code = [0xe8, 0, 0, 0, 0, 0x85, 0xc0, 0x75, 0x00, 0x90, 0x90, 0x90];
    assert_eq!(post_site(&steps(&code), 0, |_| false), None);
    // The next call's pre-site run: from the return address (shared with the post-site:
    // one probe address) or after the post-site's run; else the two would overlap.
    use fctrace_decode::presite::next_pre_site;
    // call rel32; mov 0x8(%rsp),%r15; mov %rax,%rdi; call *%rax
    let code = [
        0xe8, 0, 0, 0, 0, 0x4c, 0x8b, 0x7c, 0x24, 0x08, 0x48, 0x89, 0xc7, 0xff, 0xd0,
    ];
    let s = steps(&code);
    assert_eq!(post_site(&s, 0, |_| false), Some((5, 10)));
    assert_eq!(next_pre_site(&s, 0, 0, |_| false), Some(5));
    // call rel32; xor %eax,%eax; mov %rax,%rbx; mov %rax,%rdi; call *%rax
    let code = [
        0xe8, 0, 0, 0, 0, 0x31, 0xc0, 0x48, 0x89, 0xc3, 0x48, 0x89, 0xc7, 0xff, 0xd0,
    ];
    let s = steps(&code);
    assert_eq!(post_site(&s, 0, |_| false), Some((5, 10)));
    // The shortest run before `call *%rax` starts at 7, inside the post-site's run.
    assert_eq!(next_pre_site(&s, 0, 0, |_| false), Some(7));
    // The last instruction of the function: none.
    let code = [0x90, 0xe8, 0, 0, 0, 0];
    assert_eq!(post_site(&steps(&code), 1, |_| false), None);
    // A conditional jump is no site: it has no pre-site run, whatever the run before it
    // (seq_read_iter()'s call of _copy_to_iter() is followed by one).
    // call rel32; mov %rax,%r13; add %r13,0x10(%rbx); xor %r14d,%r14d; sub %r13,0x18(%rbx);
    // jne .+0
    let code = [
        0xe8, 0, 0, 0, 0, 0x49, 0x89, 0xc5, 0x4c, 0x01, 0x6b, 0x10, 0x45, 0x31, 0xf6, 0x4c, 0x29,
        0x6b, 0x18, 0x75, 0x00,
    ];
    let s = steps(&code);
    assert_eq!(post_site(&s, 0, |_| false), Some((5, 12)));
    assert_eq!(next_pre_site(&s, 0, 0, |_| false), None);
    // ... but a tail call (a jump out of the function) is one.
    let mut code = code.to_vec();
    code.truncate(19);
    code.extend_from_slice(&[0xe9, 0, 0, 0x10, 0]);
    let s = steps(&code);
    assert!(next_pre_site(&s, 0, 0, |_| false).is_some());
}

#[test]
fn late_int3() {
    use fctrace_decode::late_int3_rewind;
    // The breakpoint is gone: `push %rbp` (0x55) is back after a `ret` (0xc3).
    assert!(late_int3_rewind([0xc3, 0x55]));
    // Still there: someone else's breakpoint.
    assert!(!late_int3_rewind([0xc3, 0xcc]));
    assert!(!late_int3_rewind([0xcc, 0xcc]));
    // `int $3` (cd 03): its trap returns past both bytes; one back is inside it.
    assert!(!late_int3_rewind([0xcd, 0x03]));
    // Other `int n` and a restored `add` (03 /r) after anything else are rewound.
    assert!(late_int3_rewind([0xcd, 0x04]));
    assert!(late_int3_rewind([0x90, 0x03]));
}
