// SPDX-License-Identifier: GPL-2.0
//! [`loaded_address`] on every instruction of each built kernel, against iced-x86: it
//! must give the constant of every `mov $imm32, %r64` (sign-extended) and every `lea
//! disp(%rip), %r64`, and nothing for any other instruction. The module adds the
//! function starts these load to a function's callees for arming ahead
//! (`Func::fixed_callees`), so that a function passed as a pointer and called with a lock
//! held is armed before the first call: `folio_add_lru()` must load `lru_add()` (the
//! `mmap()` workload's first run missed it, `not followed: atomic`, under
//! `folio_batch_move_lru()`'s lock).
//!
//! It prints how many function starts each kernel's code loads so, and from how many
//! functions. Every vmlinux under `${XDG_CACHE_HOME:-$HOME/.cache}/fctrace/build-*/` is
//! checked, or only `FCTRACE_VMLINUX`. Without any vmlinux the test prints `SKIP: ...`
//! and passes.

mod common;

use fctrace_decode::{loaded_address, scan};
use iced_x86::{Code, OpKind, Register};
use std::collections::HashSet;
use std::path::Path;

#[test]
fn loaded_addresses_on_every_vmlinux() {
    common::each_vmlinux(check);
}

/// What iced says the instruction loads as a constant address, in the two forms.
fn iced_loaded(i: &iced_x86::Instruction) -> Option<u64> {
    match i.code() {
        Code::Mov_rm64_imm32 if i.op0_kind() == OpKind::Register => {
            Some(i.immediate32() as i32 as i64 as u64)
        }
        Code::Lea_r64_m if i.memory_base() == Register::RIP => Some(i.memory_displacement64()),
        _ => None,
    }
}

fn check(path: &Path) {
    let data = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let elf = object::File::parse(&*data).expect("parse vmlinux ELF");
    let cf = common::code_functions(&elf, path);
    let starts: HashSet<u64> = cf.funcs.iter().map(|f| f.addr).collect();
    let mut failures: Vec<String> = Vec::new();
    let (mut loads, mut to_funcs) = (0u64, 0u64);
    let mut loaders = 0u64;
    let lru_add = cf.by_name.get("lru_add").copied();
    let mut folio_add_lru_loads_lru_add = false;
    for f in &cf.funcs {
        let mut any = false;
        let _ = scan(f.bytes, f.addr, |off, _| {
            let rest = &f.bytes[off as usize..];
            let ip = f.addr + u64::from(off);
            let ours = loaded_address(rest, ip);
            let theirs = iced_loaded(&common::iced_at(f.bytes, f.addr, off));
            if ours != theirs && failures.len() < 20 {
                failures.push(format!(
                    "{}+{off:#x} `{}`: {ours:x?}, iced {theirs:x?}",
                    f.name,
                    common::disasm(rest, ip)
                ));
            }
            if let Some(t) = ours {
                loads += 1;
                if starts.contains(&t) {
                    to_funcs += 1;
                    any = true;
                    if f.name == "folio_add_lru" && Some(t) == lru_add {
                        folio_add_lru_loads_lru_add = true;
                    }
                }
            }
        });
        loaders += u64::from(any);
    }
    println!(
        "{}: {loads} constant address loads, {to_funcs} of a function start, in {loaders} \
         functions",
        path.display()
    );
    assert!(
        failures.is_empty(),
        "{}: loaded_address differs from iced:\n{}",
        path.display(),
        failures.join("\n")
    );
    assert!(
        lru_add.is_some() && folio_add_lru_loads_lru_add,
        "{}: folio_add_lru() does not load lru_add()'s address",
        path.display()
    );
    assert!(
        to_funcs > 100,
        "{}: too few function addresses loaded",
        path.display()
    );
}
