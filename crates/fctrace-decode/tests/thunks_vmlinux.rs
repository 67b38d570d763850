// SPDX-License-Identifier: GPL-2.0
//! Runs [`Thunks::classify`] on every branch site a built kernel patches at boot, on the
//! real bytes of its vmlinux, the way the engine will see them after the patching.
//!
//! The [`Thunks`] are built from the ELF symbols exactly as `find_thunks()` in
//! `rust-kmod/engine/arming/thunks.rs` does (return thunks by name, thunk arrays from the
//! symbols of their first two slots), and the [`Text`] reads the file's sections, with an
//! overlay of bytes patched the way `arch/x86/kernel/alternative.c` and `callthunks.c`
//! (Linux 6.12) patch them:
//!
//! - `.return_sites`: each entry is `jmp __x86_return_thunk`, a return; so is the site
//!   rewritten by `apply_returns()` into `jmp <thunk>` for every return thunk the kernel
//!   has, and the site rewritten into a bare `ret; int3`.
//! - `.retpoline_sites`: each entry is a call, jump or conditional jump into
//!   `__x86_indirect_thunk_array`, a branch through the slot's register; so is the site
//!   rewritten by `patch_retpoline()` to call-depth tracking's call/jump thunk arrays, to
//!   the static ITS thunk of that register, or to an ITS thunk allocated at run time
//!   (`jmp *%reg; int3` in module space, no symbol).
//! - `.call_sites`: each entry is a direct call, of the function it calls; after
//!   call-depth tracking (`callthunks_patch_builtin_calls()`: the accounting template
//!   copied, relocated, into the callee's padding and the call moved there), still a
//!   call of that function. So are the calls alternatives put in (a replacement that
//!   starts with a call, or a paravirt `call *pv_ops.x(%rip)` made a direct call of its
//!   static value), each taken as applied, then patched (`patch_alt_call_sites()`).
//!   Sites and callees `patch_call()` leaves alone are counted. A callee with nop
//!   padding but no `__pfx_` symbol (an asm `SYM_CODE_START` entry) is a known limit of
//!   `classify()`: listed, not failed (at most a few).
//!
//! Every vmlinux under `${XDG_CACHE_HOME:-$HOME/.cache}/fctrace/build-*/` is checked,
//! or only `FCTRACE_VMLINUX`; the checks a vmlinux has no section for (a kernel built
//! without return thunks or call-depth tracking) are skipped, with a message. Without
//! any vmlinux the test prints `SKIP: ...` and passes.

mod common;

use fctrace_decode::thunks::{Branch, Class, SymInfo, Text, Thunks};
use fctrace_decode::{decode, Flow, Insn, Reg};
use object::{Object, ObjectSection, ObjectSymbol, SectionFlags, SymbolKind};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

/// Registers in encoding order: the slots of a thunk array.
const REGS: [&str; 16] = [
    "rax", "rcx", "rdx", "rbx", "rsp", "rbp", "rsi", "rdi", "r8", "r9", "r10", "r11", "r12", "r13",
    "r14", "r15",
];

/// The return thunks `find_thunks()` looks up by name.
const RETURN_THUNKS: [&str; 6] = [
    "__x86_return_thunk",
    "retbleed_return_thunk",
    "srso_return_thunk",
    "srso_alias_return_thunk",
    "call_depth_return_thunk",
    "its_return_thunk",
];

/// The thunk arrays `find_thunks()` looks up: the array and its first two slots.
const ARRAYS: [&str; 4] = [
    "__x86_indirect_thunk",
    "__x86_indirect_call_thunk",
    "__x86_indirect_jump_thunk",
    "__x86_indirect_its_thunk",
];

/// Where the test puts ITS thunks "allocated at run time": module space, outside vmlinux.
const ITS_PAGE: u64 = 0xffff_ffff_c000_0000;

/// `tramp_ud` of `arch/x86/kernel/static_call.c`: what follows the `jmp` of a static
/// call trampoline (`ud1 %esp, %ecx`, an `int3`).
const TRAMP_UD: [u8; 3] = [0x0f, 0xb9, 0xcc];

/// `KEXEC_CONTROL_CODE_MAX_SIZE` (x86-64): `skip_addr()` skips calls into this much of
/// `relocate_kernel`.
const KEXEC_CONTROL_CODE_MAX_SIZE: u64 = 2048;

/// A sized code symbol.
struct Sym<'a> {
    name: &'a str,
    addr: u64,
    size: u64,
}

impl Sym<'_> {
    fn end(&self) -> u64 {
        self.addr.saturating_add(self.size)
    }
}

/// A vmlinux: its loaded sections' bytes and its symbols.
struct Image<'a> {
    /// Allocated sections with bytes in the file, by address: (address, bytes).
    sections: BTreeMap<u64, &'a [u8]>,
    /// FUNC and sized NOTYPE symbols of executable sections, by address (then size).
    syms: Vec<Sym<'a>>,
    /// The largest end of `syms[..=i]`: where a backward search for a containing symbol
    /// can stop.
    max_end: Vec<u64>,
    /// Every named symbol's address (the first one of a name).
    by_name: HashMap<&'a str, u64>,
    /// The names of the symbols at an address.
    names: HashMap<u64, Vec<&'a str>>,
}

impl<'a> Image<'a> {
    fn new(elf: &object::File<'a>) -> Self {
        let mut sections = BTreeMap::new();
        let mut exec = Vec::new();
        for sec in elf.sections() {
            let SectionFlags::Elf { sh_flags } = sec.flags() else {
                continue;
            };
            if sh_flags & u64::from(object::elf::SHF_ALLOC) == 0 || sec.address() == 0 {
                continue;
            }
            if sh_flags & u64::from(object::elf::SHF_EXECINSTR) != 0 {
                exec.push(sec.index());
            }
            // NOBITS sections have no bytes in the file: not readable.
            if let Ok(d) = sec.data() {
                if !d.is_empty() {
                    sections.insert(sec.address(), d);
                }
            }
        }
        let mut syms = Vec::new();
        let mut by_name = HashMap::new();
        let mut names: HashMap<u64, Vec<&str>> = HashMap::new();
        for sym in elf.symbols() {
            let Ok(name) = sym.name() else { continue };
            if name.is_empty() || matches!(sym.kind(), SymbolKind::File | SymbolKind::Section) {
                continue;
            }
            by_name.entry(name).or_insert(sym.address());
            names.entry(sym.address()).or_default().push(name);
            let code = match sym.kind() {
                SymbolKind::Text => true,
                SymbolKind::Unknown => sym.section_index().is_some_and(|i| exec.contains(&i)),
                _ => false,
            };
            if code && sym.size() != 0 {
                syms.push(Sym {
                    name,
                    addr: sym.address(),
                    size: sym.size(),
                });
            }
        }
        syms.sort_by_key(|s| (s.addr, s.size));
        syms.dedup_by_key(|s| (s.addr, s.size));
        let max_end = syms
            .iter()
            .scan(0u64, |m, s| {
                *m = (*m).max(s.end());
                Some(*m)
            })
            .collect();
        Image {
            sections,
            syms,
            max_end,
            by_name,
            names,
        }
    }

    /// The innermost symbol containing `addr` (the latest to start, then the smallest).
    fn symbol_at(&self, addr: u64) -> Option<&Sym<'a>> {
        let mut i = self.syms.partition_point(|s| s.addr <= addr);
        let mut best: Option<&Sym> = None;
        while i > 0 && self.max_end[i - 1] > addr {
            i -= 1;
            let s = &self.syms[i];
            if addr < s.end() && best.is_none_or(|b| s.addr > b.addr) {
                best = Some(s);
            }
        }
        best
    }

    /// The file's byte at `addr`, if a loaded section has it.
    fn byte(&self, addr: u64) -> Option<u8> {
        let (&start, data) = self.sections.range(..=addr).next_back()?;
        data.get(usize::try_from(addr - start).ok()?).copied()
    }

    /// The file's bytes at `addr`.
    fn bytes(&self, addr: u64, len: usize) -> Option<&'a [u8]> {
        let (&start, data) = self.sections.range(..=addr).next_back()?;
        let off = usize::try_from(addr - start).ok()?;
        data.get(off..off.checked_add(len)?)
    }

    fn addr(&self, name: &str) -> Option<u64> {
        self.by_name.get(name).copied().filter(|&a| a != 0)
    }

    /// The 32-bit self-relative entries of a sites section: the site addresses (`None`:
    /// no such section, or an empty one).
    fn sites(elf: &object::File, name: &str) -> Option<Vec<u64>> {
        let sec = elf.section_by_name(name)?;
        let data = sec.data().ok()?;
        if data.is_empty() {
            return None;
        }
        assert_eq!(data.len() % 4, 0, "{name}: not an array of s32");
        Some(
            data.chunks_exact(4)
                .enumerate()
                .map(|(i, c)| {
                    let rel = i32::from_le_bytes(c.try_into().expect("4 bytes"));
                    (sec.address() + 4 * i as u64).wrapping_add_signed(i64::from(rel))
                })
                .collect(),
        )
    }
}

/// The kernel's text as the engine sees it: the file's bytes under an overlay of
/// patched bytes, and the ELF symbols.
struct View<'i, 'a> {
    img: &'i Image<'a>,
    overlay: HashMap<u64, u8>,
}

impl View<'_, '_> {
    fn write(&mut self, addr: u64, bytes: &[u8]) {
        for (i, &b) in bytes.iter().enumerate() {
            self.overlay.insert(addr + i as u64, b);
        }
    }

    fn unwrite(&mut self, addr: u64, len: usize) {
        for i in 0..len as u64 {
            self.overlay.remove(&(addr + i));
        }
    }

    /// The live instruction at `addr` and its bytes.
    fn insn(&mut self, addr: u64) -> Option<(Insn, [u8; 16])> {
        let mut code = [0u8; 16];
        // The last instruction of a section may be followed by less than 16 bytes.
        let n = (1..=16).rev().find(|&n| self.read(addr, &mut code[..n]))?;
        Some((decode(&code[..n], addr).ok()?, code))
    }
}

impl Text for View<'_, '_> {
    fn symbol(&mut self, addr: u64) -> Option<SymInfo> {
        self.img.symbol_at(addr).map(|s| SymInfo {
            offset: addr - s.addr,
            size: s.size,
            padding: s.name.starts_with("__pfx_"),
        })
    }

    fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool {
        for (i, b) in buf.iter_mut().enumerate() {
            let a = addr.wrapping_add(i as u64);
            match self.overlay.get(&a).copied().or_else(|| self.img.byte(a)) {
                Some(v) => *b = v,
                None => return false,
            }
        }
        true
    }
}

/// `e9 rel32` (or `e8 rel32`) at `site` to `target`.
fn rel32_insn(op: u8, site: u64, target: u64) -> [u8; 5] {
    let rel = i32::try_from(target.wrapping_sub(site + 5) as i64).expect("rel32 in range");
    let mut b = [op; 5];
    b[1..].copy_from_slice(&rel.to_le_bytes());
    b
}

/// The instruction of `len` bytes at `site` with its rel32 (its last 4 bytes) now
/// reaching `target`: what `__emit_trampoline()` writes (same prefix and opcode).
fn retarget(code: &[u8], len: usize, site: u64, target: u64) -> Vec<u8> {
    let end = site + len as u64;
    let rel = i32::try_from(target.wrapping_sub(end) as i64).expect("rel32 in range");
    let mut b = code[..len].to_vec();
    b[len - 4..].copy_from_slice(&rel.to_le_bytes());
    b
}

/// The thunks of a kernel.
struct Found {
    th: Thunks,
    /// The return thunks present: (name, address).
    returns: Vec<(&'static str, u64)>,
    /// The thunk arrays present, by prefix: (start, slot size).
    arrays: BTreeMap<&'static str, (u64, u64)>,
}

/// The thunks of a kernel, built from its symbols as `find_thunks()` does (without the
/// module's own patched return, which only a running kernel has).
fn find_thunks(img: &Image) -> Found {
    let mut th = Thunks::new();
    let mut returns = Vec::new();
    for name in RETURN_THUNKS {
        if let Some(a) = img.addr(name) {
            assert!(th.add_return(a), "{name}: return thunk table full");
            returns.push((name, a));
        }
    }
    let mut arrays = BTreeMap::new();
    for prefix in ARRAYS {
        let a = img.addr(&format!("{prefix}_array"));
        let r0 = img.addr(&format!("{prefix}_rax"));
        let r1 = img.addr(&format!("{prefix}_rcx"));
        if let (Some(a), Some(r0), Some(r1)) = (a, r0, r1) {
            if r0 == a && r1 > r0 {
                assert!(th.add_array(a, r1 - r0), "{prefix}: thunk array table full");
                arrays.insert(prefix, (a, r1 - r0));
            }
        }
    }
    Found {
        th,
        returns,
        arrays,
    }
}

/// What went wrong with one vmlinux; the counts are printed as they come.
#[derive(Default)]
struct Report {
    failures: Vec<String>,
}

impl Report {
    fn fail(&mut self, msg: String) {
        self.failures.push(msg);
    }

    fn count(&self, msg: String) {
        println!("  {msg}");
    }
}

/// A [`Class`], with its address in hex.
fn class(c: Class) -> String {
    match c {
        Class::Direct(f) => format!("Direct({f:#x})"),
        c => format!("{c:?}"),
    }
}

fn describe(v: &mut View, addr: u64) -> String {
    let mut code = [0u8; 16];
    let n = (1..=16)
        .rev()
        .find(|&n| v.read(addr, &mut code[..n]))
        .unwrap_or(0);
    let sym = v
        .img
        .symbol_at(addr)
        .map(|s| format!("{}+{:#x}", s.name, addr - s.addr))
        .unwrap_or_else(|| "?".into());
    format!(
        "{addr:#x} ({sym}) [{}] `{}`",
        common::hex(&code[..n.min(8)]),
        common::disasm(&code[..n], addr)
    )
}

/// `.return_sites`: `jmp __x86_return_thunk` in the image, then as `apply_returns()`
/// leaves it for each return thunk, and as a bare `ret`.
fn check_returns(
    elf: &object::File,
    img: &Image,
    th: &Thunks,
    returns: &[(&str, u64)],
    r: &mut Report,
) {
    let Some(sites) = Image::sites(elf, ".return_sites") else {
        println!("  no .return_sites (no return thunks): return checks skipped");
        return;
    };
    let rt = img
        .addr("__x86_return_thunk")
        .expect(".return_sites without __x86_return_thunk");
    let mut v = View {
        img,
        overlay: HashMap::new(),
    };
    let (mut jmps, mut unpatched, mut tramps) = (0usize, 0usize, 0usize);
    let (mut variants, mut rets) = (0usize, 0usize);
    for &site in &sites {
        let Some((insn, code)) = v.insn(site) else {
            r.fail(format!(
                "return site {}: undecodable",
                describe(&mut v, site)
            ));
            continue;
        };
        if !matches!(insn.flow, Flow::Jmp(t) | Flow::Jcc(t, _) if t == rt) {
            r.fail(format!(
                "return site {}: not a jump to __x86_return_thunk",
                describe(&mut v, site)
            ));
            continue;
        }
        let c = th.classify(&mut v, Branch::Jump, rt);
        if c != Class::Return {
            r.fail(format!(
                "return site {}: {}, not Return",
                describe(&mut v, site),
                class(c)
            ));
        }
        // `apply_returns()` rewrites `jmp rel32` (`e9`) only; anything else it leaves
        // as it is, with a warning ("missing return thunk"): still a jump to
        // `__x86_return_thunk` at run time, checked above.
        if code[0] != 0xe9 {
            unpatched += 1;
            continue;
        }
        jmps += 1;
        // A static call trampoline (`__static_call_fixup()`) is rewritten by
        // `__static_call_transform(RET)`: the same bytes as `patch_return()`'s.
        if img.bytes(site + 5, 3) == Some(&TRAMP_UD[..]) {
            tramps += 1;
        }
        let len = usize::from(insn.len);
        // `patch_return()`: `jmp x86_return_thunk`, int3 to the end of the instruction.
        for &(name, t) in returns {
            let mut b = rel32_insn(0xe9, site, t).to_vec();
            b.resize(len, 0xcc);
            v.write(site, &b);
            match v.insn(site) {
                Some((i, _)) if i.flow == Flow::Jmp(t) => {
                    let c = th.classify(&mut v, Branch::Jump, t);
                    if c != Class::Return {
                        r.fail(format!(
                            "return site {} patched to {name}: {cs}, not Return",
                            describe(&mut v, site),
                            cs = class(c)
                        ));
                    }
                    variants += 1;
                }
                other => r.fail(format!(
                    "return site {site:#x} patched to {name}: decodes as {other:?}"
                )),
            }
        }
        // ... or `ret; int3...` where the CPU needs no return thunk.
        let mut b = vec![0xc3];
        b.resize(len, 0xcc);
        v.write(site, &b);
        match v.insn(site) {
            Some((i, _)) if i.flow == Flow::Ret => rets += 1,
            other => r.fail(format!("return site {site:#x} patched to ret: {other:?}")),
        }
        v.unwrite(site, len);
    }
    r.count(format!(
        ".return_sites: {} entries are Returns: {jmps} `jmp __x86_return_thunk` ({tramps} of them static call trampolines), {unpatched} other jumps to it (left alone by apply_returns()); {variants} checks patched to the {} return thunks ({}); {rets} patched to `ret`",
        sites.len(),
        returns.len(),
        returns.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
    ));
    assert!(sites.len() > 1000, "only {} return sites", sites.len());
}

/// `.retpoline_sites`: branches into `__x86_indirect_thunk_array`, then as
/// `patch_retpoline()` rewrites them for call-depth tracking and ITS.
fn check_retpolines(
    elf: &object::File,
    img: &Image,
    th: &Thunks,
    arrays: &BTreeMap<&str, (u64, u64)>,
    r: &mut Report,
) {
    let Some(sites) = Image::sites(elf, ".retpoline_sites") else {
        println!("  no .retpoline_sites (no retpolines): retpoline checks skipped");
        return;
    };
    let &(arr, slot) = arrays
        .get("__x86_indirect_thunk")
        .expect(".retpoline_sites without __x86_indirect_thunk_array");
    let mut v = View {
        img,
        overlay: HashMap::new(),
    };
    // ITS thunks allocated at run time by `its_allocate_thunk()`: `jmp *%reg; int3` in
    // the upper half of a cache line, in a page of int3 outside vmlinux, no symbol.
    let its_dynamic = arrays.contains_key("__x86_indirect_its_thunk");
    if its_dynamic {
        v.write(ITS_PAGE, &[0xcc; 4096]);
        for reg in 0..16u8 {
            let mut b = Vec::new();
            if reg >= 8 {
                b.push(0x41);
            }
            b.extend_from_slice(&[0xff, 0xe0 + (reg & 7), 0xcc]);
            v.write(ITS_PAGE + 32 + 64 * u64::from(reg), &b);
        }
    }
    let mut kinds: BTreeMap<&str, usize> = BTreeMap::new();
    let mut per_variant: BTreeMap<&str, usize> = BTreeMap::new();
    for &site in &sites {
        let Some((insn, code)) = v.insn(site) else {
            r.fail(format!(
                "retpoline site {}: undecodable",
                describe(&mut v, site)
            ));
            continue;
        };
        let (b, t, kind) = match insn.flow {
            Flow::Call(t) => (Branch::Call, t, "call"),
            Flow::Jmp(t) => (Branch::Jump, t, "jmp"),
            Flow::Jcc(t, Some(_)) => (Branch::Jump, t, "jcc"),
            _ => {
                r.fail(format!(
                    "retpoline site {}: not a call/jmp/jcc",
                    describe(&mut v, site)
                ));
                continue;
            }
        };
        let len = usize::from(insn.len);
        // `apply_retpolines()` takes `e8`/`e9`/`0f 8x` with a rel32 only (after a `cs`).
        let rel32 = len >= 5 && matches!(code[len - 5], 0xe8 | 0xe9 | 0x80..=0x8f);
        let off = t.wrapping_sub(arr);
        let reg = off / slot;
        if !rel32 || off % slot != 0 || reg >= 16 {
            r.fail(format!(
                "retpoline site {}: not a rel32 branch to a slot of __x86_indirect_thunk_array",
                describe(&mut v, site)
            ));
            continue;
        }
        *kinds.entry(kind).or_default() += 1;
        let reg = reg as Reg;
        let want = format!("__x86_indirect_thunk_{}", REGS[usize::from(reg)]);
        let names = img.names.get(&t).map(Vec::as_slice).unwrap_or_default();
        if names.iter().any(|n| n.starts_with("__x86_indirect_thunk_"))
            && !names.contains(&want.as_str())
        {
            r.fail(format!(
                "retpoline site {site:#x}: slot {reg} of __x86_indirect_thunk_array is named {names:?}"
            ));
        }
        let c = th.classify(&mut v, b, t);
        if c != Class::Reg(reg) {
            r.fail(format!(
                "retpoline site {}: {cs}, expected Reg({reg})",
                describe(&mut v, site),
                cs = class(c)
            ));
        }
        // What `patch_retpoline()` makes of it: with call-depth tracking the call (jump)
        // thunk of the register; with ITS, an ITS thunk (`emit_its_trampoline()`).
        let depth = if b == Branch::Call {
            ("call-depth", "__x86_indirect_call_thunk")
        } else {
            ("call-depth", "__x86_indirect_jump_thunk")
        };
        let mut variants: Vec<(&str, u64)> = Vec::new();
        for (variant, prefix) in [depth, ("its", "__x86_indirect_its_thunk")] {
            if let Some(&(a, s)) = arrays.get(prefix) {
                let target = a + u64::from(reg) * s;
                let want = format!("{prefix}_{}", REGS[usize::from(reg)]);
                if img.addr(&want) != Some(target) {
                    r.fail(format!("{want} is not slot {reg} of {prefix}_array"));
                }
                variants.push((variant, target));
            }
        }
        if its_dynamic {
            variants.push(("its-dynamic", ITS_PAGE + 32 + 64 * u64::from(reg)));
        }
        for (variant, target) in variants {
            v.write(site, &retarget(&code, len, site, target));
            let flow = v.insn(site).map(|(i, _)| i.flow);
            let ok = matches!(
                (b, flow),
                (Branch::Call, Some(Flow::Call(x))) | (Branch::Jump, Some(Flow::Jmp(x) | Flow::Jcc(x, _)))
                    if x == target
            );
            if !ok {
                r.fail(format!(
                    "retpoline site {site:#x} patched for {variant}: decodes as {flow:?}"
                ));
            }
            let c = th.classify(&mut v, b, target);
            if c != Class::Reg(reg) {
                r.fail(format!(
                    "retpoline site {} patched for {variant} ({target:#x}): {cs}, expected Reg({reg})",
                    describe(&mut v, site),
                    cs = class(c)
                ));
            }
            *per_variant.entry(variant).or_default() += 1;
            v.unwrite(site, len);
        }
    }
    r.count(format!(
        ".retpoline_sites: {} entries ({kinds:?}) are Reg(slot); patched variants checked: {per_variant:?}",
        sites.len()
    ));
    assert!(sites.len() > 100, "only {} retpoline sites", sites.len());
}

/// The template of `callthunks.c` as `patch_dest()` writes it at `pad`:
/// `text_poke_apply_relocation()` moves the rip-relative operands (those reaching out of
/// the template) by `template - pad`.
fn relocated_template(tmpl: &[u8], tmpl_addr: u64, pad: u64) -> Vec<u8> {
    use iced_x86::{Decoder, DecoderOptions};
    let mut buf = tmpl.to_vec();
    let mut d = Decoder::with_ip(64, tmpl, tmpl_addr, DecoderOptions::NONE);
    let mut off = 0usize;
    while d.can_decode() {
        let i = d.decode();
        assert!(!i.is_invalid(), "undecodable call thunk template");
        let co = d.get_constant_offsets(&i);
        if i.is_ip_rel_memory_operand() && co.has_displacement() {
            let target = i.ip_rel_memory_address();
            if target < tmpl_addr || target > tmpl_addr + tmpl.len() as u64 {
                assert_eq!(co.displacement_size(), 4, "rip-relative disp32");
                let at = off + co.displacement_offset();
                let disp = i32::from_le_bytes(buf[at..at + 4].try_into().expect("4 bytes"));
                let disp = i64::from(disp) + tmpl_addr.wrapping_sub(pad) as i64;
                let disp = i32::try_from(disp).expect("relocated disp32 in range");
                buf[at..at + 4].copy_from_slice(&disp.to_le_bytes());
            }
        }
        off += i.len();
    }
    // Moved, the template still reaches what it reached (the per-CPU call depth).
    let mut moved = Decoder::with_ip(64, &buf, pad, DecoderOptions::NONE);
    let mut orig = Decoder::with_ip(64, tmpl, tmpl_addr, DecoderOptions::NONE);
    while orig.can_decode() {
        let (o, m) = (orig.decode(), moved.decode());
        assert!(
            o.len() == m.len()
                && (!o.is_ip_rel_memory_operand()
                    || o.ip_rel_memory_address() == m.ip_rel_memory_address()),
            "template relocated to {pad:#x} reaches elsewhere"
        );
    }
    buf
}

/// Call-depth tracking as `callthunks_patch_builtin_calls()` sets it up.
struct CallDepth<'a> {
    /// `skl_call_thunk_template` and its bytes (up to `skl_call_thunk_tail`).
    tmpl: u64,
    template: &'a [u8],
    /// `_text`, `_etext`: the core kernel text.
    core: std::ops::Range<u64>,
    /// What `skip_addr()` skips: (range, name).
    skip: Vec<(std::ops::Range<u64>, &'static str)>,
}

impl<'a> CallDepth<'a> {
    fn new(img: &Image<'a>, config: &Config) -> Option<Self> {
        let tmpl = img.addr("skl_call_thunk_template")?;
        let tail = img.addr("skl_call_thunk_tail")?;
        let tsize = usize::try_from(tail - tmpl).expect("template size");
        assert!(tsize > 0 && tsize < 255, "template of {tsize} bytes");
        let template = img
            .bytes(tmpl, tsize)
            .expect("skl_call_thunk_template in the file");
        let (Some(text), Some(etext)) = (img.addr("_text"), img.addr("_etext")) else {
            panic!("no _text/_etext");
        };
        let mut names = vec![
            "error_entry",
            "paranoid_entry",
            "xen_error_entry",
            "__switch_to_asm",
            "ret_from_fork",
        ];
        if config.on("CONFIG_HOTPLUG_CPU") && config.on("CONFIG_AMD_MEM_ENCRYPT") {
            names.push("soft_restart_cpu");
        }
        if config.on("CONFIG_FUNCTION_TRACER") {
            names.push("__fentry__");
        }
        let mut skip: Vec<_> = names
            .into_iter()
            .filter_map(|n| img.addr(n).map(|a| (a..a + 1, n)))
            .collect();
        if config.on("CONFIG_KEXEC_CORE") {
            if let Some(a) = img.addr("relocate_kernel") {
                skip.push((a..a + KEXEC_CONTROL_CODE_MAX_SIZE, "relocate_kernel"));
            }
        }
        Some(CallDepth {
            tmpl,
            template,
            core: text..etext,
            skip,
        })
    }

    /// `patch_call()` of the call at `site` (now `e8 rel32` to `f` in `v`): the address
    /// of the accounting thunk it calls from now on (written into `v`, with the call), or
    /// why it is left alone.
    fn patch_call(&self, v: &mut View, site: u64, f: u64) -> Result<u64, String> {
        if !self.core.contains(&site) {
            return Err("site outside core text".into());
        }
        // `call_get_dest()`: the live instruction must be a call (not patched out),
        // whose destination `skip_addr()` does not skip.
        let mut op = [0u8];
        if !v.read(site, &mut op) || op[0] != 0xe8 {
            return Err("not `e8 rel32`".into());
        }
        if let Some((_, n)) = self.skip.iter().find(|(r, _)| r.contains(&f)) {
            return Err(format!("skip_addr(): {n}"));
        }
        if !self.core.contains(&f) {
            return Err("callee outside core text".into());
        }
        // `patch_dest()`: the relocated template at `f - tsize`, unless it is there
        // already; the padding must be nops.
        let pad = f - self.template.len() as u64;
        let buf = relocated_template(self.template, self.tmpl, pad);
        let mut live = vec![0u8; buf.len()];
        if !v.read(pad, &mut live) {
            return Err("unreadable padding".into());
        }
        if live != buf {
            if live.iter().any(|&b| b != 0x90) {
                let sym = v.img.symbol_at(f).map_or("?", |s| s.name).to_string();
                return Err(format!("padding not nops ({sym})"));
            }
            v.write(pad, &buf);
        }
        v.write(site, &rel32_insn(0xe8, site, pad));
        Ok(pad)
    }
}

/// A call patched by call-depth tracking, to check once all the text is patched.
struct Patched {
    site: u64,
    callee: u64,
    pad: u64,
    what: &'static str,
}

/// Checks a call patched into an accounting thunk (`Err`: a known limitation).
fn check_patched(v: &mut View, th: &Thunks, p: &Patched, r: &mut Report) -> Result<(), String> {
    match v.insn(p.site) {
        Some((i, _)) if i.flow == Flow::Call(p.pad) => {}
        other => r.fail(format!(
            "{} {:#x} patched to {:#x}: decodes as {other:?}",
            p.what, p.site, p.pad
        )),
    }
    let c = th.classify(v, Branch::Call, p.pad);
    if c == Class::Direct(p.callee) {
        return Ok(());
    }
    let desc = format!(
        "{} {} patched to the accounting thunk {:#x} of {:#x} ({}): {cs}, expected Direct({:#x})",
        p.what,
        describe(v, p.site),
        p.pad,
        p.callee,
        v.img.symbol_at(p.callee).map_or("?", |s| s.name),
        p.callee,
        cs = class(c)
    );
    // A callee with nop padding but no `__pfx_` symbol (objtool makes them for FUNC
    // symbols only; `SYM_CODE_START` asm entries such as rewind_stack_and_make_dead get
    // the padding from `__FUNC_ALIGN` but no symbol): `classify()` cannot know the call
    // runs into the function, and says it is a call of the thunk's address. Known,
    // reported, not a failure; anything else is.
    let no_pfx = v
        .img
        .symbol_at(p.pad)
        .is_none_or(|s| !s.name.starts_with("__pfx_"));
    if no_pfx && c == Class::Direct(p.pad) {
        return Err(desc);
    }
    r.fail(desc);
    Ok(())
}

/// `.call_sites`: direct calls, then call-depth tracking as `callthunks.c` sets it up,
/// for them and for the calls alternatives put in (`patch_alt_call_sites()`).
fn check_calls(elf: &object::File, img: &Image, th: &Thunks, config: &Config, r: &mut Report) {
    let Some(sites) = Image::sites(elf, ".call_sites") else {
        println!("  no .call_sites (no call-depth tracking): call checks skipped");
        return;
    };
    let mut v = View {
        img,
        overlay: HashMap::new(),
    };
    // Unpatched.
    let mut calls: Vec<(u64, u64)> = Vec::new();
    let mut thunk_callees = 0usize;
    for &site in &sites {
        match v.insn(site) {
            Some((i, _)) => match i.flow {
                Flow::Call(f) if th.is_thunk(f) => thunk_callees += 1,
                Flow::Call(f) => {
                    let c = th.classify(&mut v, Branch::Call, f);
                    if c != Class::Direct(f) {
                        r.fail(format!(
                            "call site {}: {cs}, expected Direct({f:#x})",
                            describe(&mut v, site),
                            cs = class(c)
                        ));
                    }
                    calls.push((site, f));
                }
                _ => r.fail(format!("call site {}: not a call", describe(&mut v, site))),
            },
            None => r.fail(format!("call site {}: undecodable", describe(&mut v, site))),
        }
    }
    let alts = alternatives(elf);
    // Original code of alternatives: start -> end (entries of one site share a start).
    let mut alt_code: BTreeMap<u64, u64> = BTreeMap::new();
    for a in &alts {
        let end = alt_code.entry(a.instr).or_default();
        *end = (*end).max(a.instr + u64::from(a.instrlen));
    }
    let in_alt = sites
        .iter()
        .filter(|&&s| {
            alt_code
                .range(..=s)
                .next_back()
                .is_some_and(|(_, &e)| s < e)
        })
        .count();
    r.count(format!(
        ".call_sites: {} entries, {} direct calls are Direct(callee), {thunk_callees} calls of a thunk (not checked); {in_alt} in an alternative's original code (checked as in the file)",
        sites.len(),
        calls.len()
    ));
    assert!(sites.len() > 1000, "only {} call sites", sites.len());

    let Some(cd) = CallDepth::new(img, config) else {
        println!("  no skl_call_thunk_template: call-depth tracking not checked");
        return;
    };
    let mut left: BTreeMap<String, usize> = BTreeMap::new();
    let mut patched = Vec::new();
    for &(site, f) in &calls {
        match cd.patch_call(&mut v, site, f) {
            Ok(pad) => patched.push(Patched {
                site,
                callee: f,
                pad,
                what: "call site",
            }),
            Err(why) => *left.entry(why).or_default() += 1,
        }
    }
    // The engine sees the text once all of it is patched.
    let mut known = Vec::new();
    for p in &patched {
        if let Err(k) = check_patched(&mut v, th, p, r) {
            known.push(k);
        }
    }
    let callees: std::collections::HashSet<u64> = patched.iter().map(|p| p.callee).collect();
    r.count(format!(
        "call-depth tracking ({}-byte template `{}`): {} calls into the accounting thunks of {} functions are Direct(function); left alone by patch_call(): {left:?}",
        cd.template.len(),
        common::disasm(cd.template, cd.tmpl),
        patched.len(),
        callees.len()
    ));
    assert!(patched.len() > 1000, "only {} call thunks", patched.len());

    // `patch_alt_call_sites()`: a call an alternative puts at its site (the replacement
    // starts with `call`, relocated; or ALT_FLAG_DIRECT_CALL: the paravirt `call
    // *pv_ops.x(%rip)` becomes a direct call of its static pv_ops value), patched in
    // turn. Each alternative is taken as applied alone, on the text patched above.
    let mut alt_left: BTreeMap<String, usize> = BTreeMap::new();
    let (mut alt_direct, mut alt_calls, mut alt_unpatched) = (0usize, 0usize, 0usize);
    for a in &alts {
        let Some(f) = alt_call(img, a) else { continue };
        let len = usize::from(a.instrlen.max(5));
        let mut b = rel32_insn(0xe8, a.instr, f).to_vec();
        b.resize(len, 0x90);
        let saved: Vec<Option<u8>> = (0..len as u64)
            .map(|i| v.overlay.get(&(a.instr + i)).copied())
            .collect();
        v.write(a.instr, &b);
        if a.flags & ALT_FLAG_DIRECT_CALL != 0 {
            alt_direct += 1;
        }
        alt_calls += 1;
        if !th.is_thunk(f) {
            let c = th.classify(&mut v, Branch::Call, f);
            if c != Class::Direct(f) {
                r.fail(format!(
                    "alternative call at {}: {cs}, expected Direct({f:#x})",
                    describe(&mut v, a.instr),
                    cs = class(c)
                ));
            }
            alt_unpatched += 1;
        }
        match cd.patch_call(&mut v, a.instr, f) {
            Ok(pad) => {
                let p = Patched {
                    site: a.instr,
                    callee: f,
                    pad,
                    what: "alternative call",
                };
                if let Err(k) = check_patched(&mut v, th, &p, r) {
                    known.push(k);
                }
                patched.push(p);
            }
            Err(why) => *alt_left.entry(why).or_default() += 1,
        }
        for (i, old) in saved.into_iter().enumerate() {
            let at = a.instr + i as u64;
            match old {
                Some(x) => v.overlay.insert(at, x),
                None => v.overlay.remove(&at),
            };
        }
    }
    r.count(format!(
        "alternatives: {} entries, {alt_calls} put a call ({alt_direct} paravirt direct calls), {alt_unpatched} are Direct(callee); {} patched into accounting thunks are Direct(function); left alone: {alt_left:?}",
        alts.len(),
        patched.iter().filter(|p| p.what == "alternative call").count()
    ));
    if !known.is_empty() {
        println!(
            "  KNOWN LIMITATION: {} calls into the accounting thunk of a function without a __pfx_ symbol classify as Direct(thunk):",
            known.len()
        );
        for k in &known {
            println!("    {k}");
        }
    }
    assert!(
        known.len() <= 10,
        "{} calls of unnamed padding",
        known.len()
    );
}

/// `ALT_FLAG_DIRECT_CALL` (`arch/x86/include/asm/alternative.h`).
const ALT_FLAG_DIRECT_CALL: u16 = 1 << 1;

/// An entry of `.altinstructions` (`struct alt_instr`, packed).
struct Alt {
    instr: u64,
    repl: u64,
    flags: u16,
    instrlen: u8,
    replen: u8,
}

/// `.altinstructions`, empty without one.
fn alternatives(elf: &object::File) -> Vec<Alt> {
    let Some(sec) = elf.section_by_name(".altinstructions") else {
        return Vec::new();
    };
    let data = sec.data().unwrap_or_default();
    assert_eq!(data.len() % 14, 0, ".altinstructions: not 14-byte entries");
    data.chunks_exact(14)
        .enumerate()
        .map(|(i, e)| {
            let at = sec.address() + 14 * i as u64;
            let s32 = |o: usize| i64::from(i32::from_le_bytes(e[o..o + 4].try_into().expect("4")));
            Alt {
                instr: at.wrapping_add_signed(s32(0)),
                repl: (at + 4).wrapping_add_signed(s32(4)),
                flags: u16::from_le_bytes([e[10], e[11]]),
                instrlen: e[12],
                replen: e[13],
            }
        })
        .collect()
}

/// The callee of the call an alternative puts at its site when applied, if it does:
/// `apply_alternatives()` with `alt_replace_call()` and `text_poke_apply_relocation()`.
fn alt_call(img: &Image, a: &Alt) -> Option<u64> {
    let repl = img.bytes(a.repl, usize::from(a.replen))?;
    if repl.len() < 5 || repl[0] != 0xe8 {
        return None;
    }
    if a.flags & ALT_FLAG_DIRECT_CALL != 0 {
        // `call *disp32(%rip)`: the target is read from `next instruction + disp`.
        let orig = img.bytes(a.instr, 6)?;
        assert!(
            a.instrlen == 6 && orig[..2] == [0xff, 0x15],
            "ALT_FLAG_DIRECT_CALL at {:#x} for a non-`call *disp(%rip)`",
            a.instr
        );
        let disp = i32::from_le_bytes(orig[2..6].try_into().expect("4 bytes"));
        let slot = (a.instr + 6).wrapping_add_signed(i64::from(disp));
        let target = u64::from_le_bytes(img.bytes(slot, 8)?.try_into().expect("8 bytes"));
        let target = if target == 0 {
            img.addr("BUG_func")?
        } else {
            target
        };
        // A call of nop_func is patched out entirely.
        return (Some(target) != img.addr("nop_func")).then_some(target);
    }
    let rel = i32::from_le_bytes(repl[1..5].try_into().expect("4 bytes"));
    let t = (a.repl + 5).wrapping_add_signed(i64::from(rel));
    // A target inside the replacement moves with it (`need_reloc()`).
    Some(if (a.repl..=a.repl + u64::from(a.replen)).contains(&t) {
        a.instr + (t - a.repl)
    } else {
        t
    })
}

/// The kernel configuration next to a vmlinux, if any.
struct Config(Option<String>);

impl Config {
    fn read(vmlinux: &Path) -> Self {
        Config(
            vmlinux
                .parent()
                .and_then(|d| std::fs::read_to_string(d.join(".config")).ok()),
        )
    }

    /// Whether `opt` is `y` (assumed so without a `.config`: the conservative choice for
    /// `skip_addr()`, which then skips more).
    fn on(&self, opt: &str) -> bool {
        self.0
            .as_ref()
            .is_none_or(|c| c.lines().any(|l| l.strip_prefix(opt) == Some("=y")))
    }
}

#[test]
fn thunk_classification_of_every_patched_site() {
    let paths = common::find_vmlinuxes();
    if paths.is_empty() {
        println!("SKIP: no vmlinux (set FCTRACE_VMLINUX)");
        return;
    }
    let mut failures = Vec::new();
    for path in &paths {
        println!("vmlinux: {}", path.display());
        let data = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let elf = object::File::parse(&*data).expect("parse vmlinux ELF");
        let img = Image::new(&elf);
        assert!(img.syms.len() > 5000, "{}: too few symbols", path.display());
        let Found {
            th,
            returns,
            arrays,
        } = find_thunks(&img);
        println!(
            "  thunks: returns {:?}; arrays {:?}",
            returns
                .iter()
                .map(|(n, a)| format!("{n}={a:#x}"))
                .collect::<Vec<_>>(),
            arrays
                .iter()
                .map(|(n, (a, s))| format!("{n}_array={a:#x}/{s}"))
                .collect::<Vec<_>>()
        );
        let config = Config::read(path);
        let mut r = Report::default();
        check_returns(&elf, &img, &th, &returns, &mut r);
        check_retpolines(&elf, &img, &th, &arrays, &mut r);
        check_calls(&elf, &img, &th, &config, &mut r);
        for f in r.failures.iter().take(50) {
            println!("  FAIL {f}");
        }
        println!("  {} failures", r.failures.len());
        failures.extend(
            r.failures
                .into_iter()
                .map(|f| format!("{}: {f}", path.display())),
        );
    }
    assert!(
        failures.is_empty(),
        "{} failures, first: {}",
        failures.len(),
        failures[0]
    );
}
