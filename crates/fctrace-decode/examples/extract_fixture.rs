// SPDX-License-Identifier: GPL-2.0
//! Extracts the bytes of functions from a vmlinux into the fixture format of
//! `tests/fixtures/functions.txt` (one function a line: `name address hexbytes`).
//!
//! ```text
//! cargo run -p fctrace-decode --example extract_fixture -- VMLINUX [--max N] NAME... > tests/fixtures/functions.txt
//! ```
//! Also emits `sym NAME ADDRESS` lines for the symbols named with `--sym NAME`
//! (call targets the fixture test checks). `--dis` prints our decoding instead.

use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};

fn main() {
    let mut args = std::env::args().skip(1);
    let path = args
        .next()
        .expect("usage: extract_fixture VMLINUX [--max N] [--dis] [--sym NAME] NAME...");
    let data = std::fs::read(&path).expect("read vmlinux");
    let elf = object::File::parse(&*data).expect("parse ELF");
    let mut max = usize::MAX;
    let mut dis = false;
    let args: Vec<String> = args.collect();
    let mut i = 0;
    while i < args.len() {
        match args[i].as_str() {
            "--max" => {
                max = args[i + 1].parse().expect("--max N");
                i += 1;
            }
            "--dis" => dis = true,
            "--sym" => {
                let name = &args[i + 1];
                let sym = elf
                    .symbols()
                    .find(|s| s.name() == Ok(name.as_str()))
                    .unwrap_or_else(|| panic!("no symbol {name}"));
                println!("sym {name} {:#x}", sym.address());
                i += 1;
            }
            name => {
                let sym = elf
                    .symbols()
                    .find(|s| {
                        s.name() == Ok(name)
                            && matches!(s.kind(), SymbolKind::Text | SymbolKind::Unknown)
                            && s.size() > 0
                    })
                    .unwrap_or_else(|| panic!("no function {name}"));
                let sec = elf.section_by_index(sym.section_index().unwrap()).unwrap();
                let off = (sym.address() - sec.address()) as usize;
                let len = (sym.size() as usize).min(max);
                let bytes = &sec.data().unwrap()[off..off + len];
                if dis {
                    println!("{name}:");
                    let r = fctrace_decode::scan(bytes, sym.address(), |o, insn| {
                        let b = &bytes[o as usize..o as usize + insn.len as usize];
                        let hex: Vec<String> = b.iter().map(|x| format!("{x:02x}")).collect();
                        println!("  +{o:#06x} {:<45} {:?}", hex.join(" "), insn);
                    });
                    if let Err(e) = r {
                        println!("  error {e:?}");
                    }
                } else {
                    let hex: String = bytes.iter().map(|x| format!("{x:02x}")).collect();
                    println!("{name} {:#x} {hex}", sym.address());
                }
            }
        }
        i += 1;
    }
}
