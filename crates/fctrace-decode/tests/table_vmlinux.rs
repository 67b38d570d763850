// SPDX-License-Identifier: GPL-2.0
//! [`table_neighbours`] on the real ops tables of each built kernel, read from its vmlinux
//! (whose data holds the link-time addresses of the functions it points to).
//!
//! From the slot of one method, as a traced call through the table would load it, and
//! the table's bounds (the ELF symbol's, as kallsyms gives them to the module), the scan
//! must find the table's other methods and nothing of the tables beside it (the
//! scheduling classes lie next to each other with nothing between them):
//!
//! - `fair_sched_class` from `enqueue_task_fair` (`fork()`'s wake-up of the child): the
//!   methods the warm runs of the benchmark showed `not followed: atomic`
//!   (`put_prev_task_fair`, `set_next_task_fair`, `task_dead_fair`) among them;
//! - `proc_misc_dentry_ops` from `proc_misc_d_delete` (`dput()`): `proc_misc_d_revalidate`.
//!
//! And [`Program::static_target`] on every indirect call and jump of each kernel: the
//! target read from the file's data when it depends on no register (a global function
//! pointer, `smp_ops.send_reschedule`): what the module adds to a function's callees when
//! it arms it. Most such targets must be function starts, and `resched_curr()`'s call of
//! `native_smp_send_reschedule()` must be among them.
//!
//! And [`Program::site_slot`] on the same sites: where it says the target is read from
//! (an address on the registers at the site) must be the address of the load that gave
//! the target, on made-up registers and memory.
//!
//! Every vmlinux under `${XDG_CACHE_HOME:-$HOME/.cache}/fctrace/build-*/` is checked, or
//! only `FCTRACE_VMLINUX`. Without any vmlinux the test prints `SKIP: ...` and passes.

mod common;

use fctrace_decode::emulate::{compile, table_neighbours, Machine, Reg, TABLE_WORDS};
use fctrace_decode::presite::straight_run;
use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};
use std::collections::{HashMap, HashSet};

/// The word at `addr` in any section of the file with data.
fn word(elf: &object::File, addr: u64) -> Option<u64> {
    for sec in elf.sections() {
        let (a, n) = (sec.address(), sec.size());
        if addr >= a && addr + 8 <= a + n {
            let d = sec.data().ok()?;
            let off = (addr - a) as usize;
            let b = d.get(off..off + 8)?;
            return Some(u64::from_le_bytes(b.try_into().ok()?));
        }
    }
    None
}

/// A data object's address and size.
fn object(elf: &object::File, name: &str) -> Option<(u64, u64)> {
    elf.symbols()
        .find(|s| s.name() == Ok(name) && s.kind() == SymbolKind::Data)
        .map(|s| (s.address(), s.size()))
}

#[test]
fn neighbours_in_real_tables() {
    let paths = common::find_vmlinuxes();
    if paths.is_empty() {
        println!("SKIP: no vmlinux built");
        return;
    }
    for path in paths {
        let data = std::fs::read(&path).expect("read vmlinux");
        let elf = object::File::parse(&*data).expect("parse vmlinux");
        let funcs = common::code_functions(&elf, &path);
        let starts: HashMap<u64, &str> = funcs.funcs.iter().map(|f| (f.addr, f.name)).collect();
        let is_func = |v: u64| starts.contains_key(&v);
        // (table, the method called through it, methods the scan must find)
        let cases: [(&str, &str, &[&str]); 2] = [
            (
                "fair_sched_class",
                "enqueue_task_fair",
                &[
                    "put_prev_task_fair",
                    "set_next_task_fair",
                    "task_dead_fair",
                    "dequeue_task_fair",
                    "task_fork_fair",
                ],
            ),
            (
                "proc_misc_dentry_ops",
                "proc_misc_d_delete",
                &["proc_misc_d_revalidate"],
            ),
        ];
        for (table, called, expect) in cases {
            let Some((base, size)) = object(&elf, table) else {
                println!("{}: no {table}, skipped", path.display());
                continue;
            };
            let called_at = funcs.by_name[called];
            let slot = (base..base + size)
                .step_by(8)
                .find(|&a| word(&elf, a) == Some(called_at))
                .unwrap_or_else(|| panic!("{table} holds no pointer to {called}"));
            let mut out = [0u64; 2 * TABLE_WORDS as usize];
            let n = table_neighbours(
                slot,
                base..base + size,
                |a| word(&elf, a),
                is_func,
                &mut out,
            );
            let found: HashSet<u64> = out[..n].iter().copied().collect();
            let methods: HashSet<u64> = (base..base + size)
                .step_by(8)
                .filter_map(|a| word(&elf, a))
                .filter(|&v| v != called_at && is_func(v))
                .collect();
            let outside: Vec<&str> = found.difference(&methods).map(|v| starts[v]).collect();
            let missed: Vec<&str> = methods.difference(&found).map(|v| starts[v]).collect();
            println!(
                "{}: {table} from {called}: {n} found, {} methods in it, missed {missed:?}, \
                 outside it {outside:?}",
                path.display(),
                methods.len()
            );
            for name in expect {
                let f = funcs.by_name[name];
                assert!(found.contains(&f), "{table}: {name} not found");
            }
            assert!(missed.is_empty(), "{table}: methods not found: {missed:?}");
            assert!(outside.is_empty(), "{table}: found outside it: {outside:?}");
        }
    }
}

/// The vmlinux's data as a [`Machine`] without registers.
struct FileMemory<'a>(&'a object::File<'a>);

impl Machine for FileMemory<'_> {
    fn reg(&self, _: Reg) -> u64 {
        0
    }
    fn load(&self, addr: u64, size: u8) -> Option<u64> {
        let w = word(self.0, addr)?;
        Some(if size >= 8 {
            w
        } else {
            w & ((1u64 << (size * 8)) - 1)
        })
    }
    fn gs_base(&self) -> Option<u64> {
        None
    }
}

/// Made-up registers and memory, derived from a seed: every word differs.
struct RandomMachine(u64);

impl Machine for RandomMachine {
    fn reg(&self, r: Reg) -> u64 {
        (self.0 ^ (u64::from(r) << 40)).wrapping_mul(0x9e37_79b9_7f4a_7c15) & !7
    }
    fn load(&self, addr: u64, size: u8) -> Option<u64> {
        let w = (addr ^ self.0)
            .wrapping_mul(0xbf58_476d_1ce4_e5b9)
            .rotate_left(29);
        Some(if size >= 8 {
            w
        } else {
            w & ((1u64 << (size * 8)) - 1)
        })
    }
    fn gs_base(&self) -> Option<u64> {
        Some(0xffff_8880_0000_0000)
    }
}

#[test]
fn static_targets_of_real_kernels() {
    let paths = common::find_vmlinuxes();
    if paths.is_empty() {
        println!("SKIP: no vmlinux built");
        return;
    }
    for path in paths {
        let data = std::fs::read(&path).expect("read vmlinux");
        let elf = object::File::parse(&*data).expect("parse vmlinux");
        let cf = common::code_functions(&elf, &path);
        let starts: HashMap<u64, &str> = cf.funcs.iter().map(|f| (f.addr, f.name)).collect();
        let thunk_reg = common::thunk_registers(&cf.by_name);
        let mem = FileMemory(&elf);
        let (mut sites, mut fixed, mut funcs) = (0u64, 0u64, 0u64);
        let (mut slots, mut checked) = (0u64, 0u64);
        let mut others: Vec<String> = Vec::new();
        let mut resched = false;
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
                sites += 1;
                // As the module does: the longest straight run before the site that
                // compiles (the site alone at the least).
                let Some(first) = straight_run(&steps, k, 0, |o| targets.contains(&o)) else {
                    continue;
                };
                let prog = steps
                    .iter()
                    .filter(|s| s.off >= first && s.off < off)
                    .map(|s| s.off)
                    .chain([off])
                    .find_map(|p| {
                        compile(
                            &f.bytes[p as usize..off as usize],
                            f.addr + u64::from(p),
                            fin,
                        )
                    });
                // Where the target is read from, at the site: the same address as the
                // load that gave the target, on made-up registers and memory.
                if let Some(a) = prog.and_then(|p| p.site_slot()) {
                    slots += 1;
                    let p = prog.unwrap();
                    let rm = RandomMachine(f.addr ^ u64::from(off));
                    let end = p.run(&rm);
                    let at = a.at(|r| end.reg(r), |x| rm.load(x, 8));
                    if let (Some(at), Some((_, loaded))) = (at, p.target_slot(&rm)) {
                        checked += 1;
                        assert_eq!(at, loaded, "{}+{off:#x}: site slot", f.name);
                    }
                }
                let Some(t) = prog.and_then(|p| p.static_target(&mem)).filter(|&t| t != 0) else {
                    continue;
                };
                fixed += 1;
                match starts.get(&t) {
                    Some(name) => {
                        funcs += 1;
                        resched |=
                            f.name == "resched_curr" && *name == "native_smp_send_reschedule";
                    }
                    None if others.len() < 8 => others.push(format!("{}+{off:#x}: {t:#x}", f.name)),
                    None => {}
                }
            }
        }
        println!(
            "{}: {sites} indirect sites, {fixed} with a target from fixed memory, {funcs} of \
             them function starts; others (first 8): {others:?}; {slots} with a slot known \
             at the site ({checked} checked against the load's address)",
            path.display()
        );
        assert!(checked > 0, "no site slot checked");
        assert!(fixed > 0, "no static target");
        assert!(
            funcs * 10 >= fixed * 9,
            "fewer than 90% of the static targets are functions"
        );
        if cf.by_name.contains_key("native_smp_send_reschedule") {
            assert!(
                resched,
                "resched_curr()'s call of native_smp_send_reschedule() not found"
            );
        }
    }
}
