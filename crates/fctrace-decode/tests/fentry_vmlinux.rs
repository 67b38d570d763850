// SPDX-License-Identifier: GPL-2.0
//! Ftrace sites ([`fctrace_decode::fentry`]) on the code of each built test kernel,
//! checked against the kernel's own list of them (`__mcount_loc`, which ftrace's
//! records are made from at boot):
//!
//! - every listed site at a function's start is found (a function fctrace could hook
//!   with ftrace is hooked);
//! - no function whose first instruction is an ordinary call is taken for one (ftrace
//!   would refuse it; `pte_unmap()` on the debug kernel starts with a call into RCU);
//! - 5-byte nops that are not listed sites (static branches, in `__jump_table`, and a
//!   few others, such as `__do_softirq()`'s on the debug kernel) start fewer than one
//!   function in a thousand: the module finds them when ftrace refuses them.
//!
//! Without a vmlinux the test prints `SKIP: ...` and passes.

mod common;

use fctrace_decode::fentry::{entry_site, ftrace_site_offset, EntrySite};
use object::{Object, ObjectSection, ObjectSymbol};
use std::collections::HashSet;
use std::path::Path;

#[test]
fn ftrace_sites_on_every_vmlinux() {
    common::each_vmlinux(check);
}

/// The bytes of the vmlinux `elf` at `addr..addr + len`, from the section holding them.
fn bytes_at<'a>(elf: &object::File<'a>, addr: u64, len: u64) -> &'a [u8] {
    for sec in elf.sections() {
        if sec.address() <= addr && addr + len <= sec.address() + sec.size() {
            let d = sec.data().expect("section data");
            let start = (addr - sec.address()) as usize;
            return &d[start..start + len as usize];
        }
    }
    panic!("{addr:#x}: in no section");
}

/// The table between two symbols (`__start_x`, `__stop_x`): its address and bytes.
fn table<'a>(elf: &object::File<'a>, start: &str, stop: &str) -> (u64, &'a [u8]) {
    let sym = |n: &str| {
        elf.symbols()
            .find(|s| s.name() == Ok(n))
            .unwrap_or_else(|| panic!("no symbol {n}"))
            .address()
    };
    let (a, b) = (sym(start), sym(stop));
    (a, bytes_at(elf, a, b - a))
}

fn check(path: &Path) {
    let data = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let elf = object::File::parse(&*data).expect("parse vmlinux ELF");
    let common::CodeFuncs { funcs, .. } = common::code_functions(&elf, path);
    // The symbol holding an address, and the offset into it (as `sprint_symbol()`).
    let symbol_of = |a: u64| {
        let i = funcs.partition_point(|f| f.addr <= a).checked_sub(1)?;
        let f = &funcs[i];
        (a < f.addr + f.bytes.len() as u64).then(|| (f.name, a - f.addr))
    };
    let mcount: HashSet<u64> = table(&elf, "__start_mcount_loc", "__stop_mcount_loc")
        .1
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect();
    // struct jump_entry { s32 code; s32 target; long key; }: `code` relative to itself.
    let (jt_start, jt) = table(&elf, "__start___jump_table", "__stop___jump_table");
    let jumps: HashSet<u64> = jt
        .chunks_exact(16)
        .enumerate()
        .map(|(i, c)| {
            let rel = i32::from_le_bytes(c[..4].try_into().unwrap()) as i64;
            (jt_start + 16 * i as u64).wrapping_add(rel as u64)
        })
        .collect();

    let (mut found, mut calls_refused, mut static_nops) = (0usize, 0usize, Vec::new());
    let (mut missed, mut other_nops) = (Vec::new(), Vec::new());
    let mut wrong = Vec::new();
    for f in &funcs {
        let code = &f.bytes[..f.bytes.len().min(9)];
        let site = ftrace_site_offset(code, f.addr, symbol_of);
        let listed = [0u64, 4]
            .into_iter()
            .find(|o| mcount.contains(&(f.addr + o)));
        match (site, listed) {
            (Some(o), Some(l)) if o as u64 == l => found += 1,
            (_, Some(_)) => missed.push(format!("{} {}", f.name, common::hex(code))),
            (Some(o), None) => match entry_site(code, f.addr) {
                EntrySite::Nop(_) if jumps.contains(&(f.addr + o as u64)) => {
                    static_nops.push(f.name)
                }
                EntrySite::Nop(_) => other_nops.push(f.name),
                _ => wrong.push(format!("{} {}", f.name, common::hex(code))),
            },
            (None, None) => {
                if matches!(entry_site(code, f.addr), EntrySite::Call(..)) {
                    calls_refused += 1;
                }
            }
        }
    }
    println!(
        "{}: {} listed ftrace sites, {found} found; {calls_refused} functions start with an \
         ordinary call (not sites); {} start with a static branch's nop (taken for sites, \
         ftrace refuses them): {:?}; {} with another nop not listed: {:?}",
        path.display(),
        mcount.len(),
        static_nops.len(),
        &static_nops[..static_nops.len().min(12)],
        other_nops.len(),
        &other_nops[..other_nops.len().min(12)]
    );
    assert!(missed.is_empty(), "listed sites not found: {missed:?}");
    assert!(wrong.is_empty(), "taken for sites, not listed: {wrong:?}");
    assert!(found > 10_000, "suspiciously few ftrace sites");
    assert!(
        (static_nops.len() + other_nops.len()) * 1000 < found,
        "nops taken for ftrace sites: {}",
        static_nops.len() + other_nops.len()
    );
}
