//! x86 condition codes: which conditional jumps are taken, for conditional tail calls
//! (`jne other_function`), which compilers emit and which a call-site tracer must follow.

/// The condition code (0..=15) of a `jcc` instruction: `70+cc rel8` or `0f 80+cc rel32`,
/// after any prefixes (branch hints `2e`/`3e`, `66`, `67`, REX). `None` for any other
/// instruction, including `jrcxz` and `loop`.
pub fn jcc_condition(insn: &[u8]) -> Option<u8> {
    let mut i = 0;
    while let Some(&b) = insn.get(i) {
        match b {
            0x2e | 0x3e | 0x66 | 0x67 | 0xf2 | 0xf3 | 0x40..=0x4f => i += 1,
            _ => break,
        }
    }
    match (insn.get(i), insn.get(i + 1)) {
        (Some(&b), _) if (0x70..=0x7f).contains(&b) => Some(b & 0xf),
        (Some(0x0f), Some(&b)) if (0x80..=0x8f).contains(&b) => Some(b & 0xf),
        _ => None,
    }
}

/// Whether condition `cc` holds for the RFLAGS value `flags`.
pub fn condition_holds(cc: u8, flags: u64) -> bool {
    let cf = flags & (1 << 0) != 0;
    let pf = flags & (1 << 2) != 0;
    let zf = flags & (1 << 6) != 0;
    let sf = flags & (1 << 7) != 0;
    let of = flags & (1 << 11) != 0;
    let base = match (cc >> 1) & 7 {
        0 => of,             // jo / jno
        1 => cf,             // jb / jae
        2 => zf,             // je / jne
        3 => cf || zf,       // jbe / ja
        4 => sf,             // js / jns
        5 => pf,             // jp / jnp
        6 => sf != of,       // jl / jge
        _ => zf || sf != of, // jle / jg
    };
    base ^ (cc & 1 != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ZF: u64 = 1 << 6;
    const CF: u64 = 1;
    const SF: u64 = 1 << 7;
    const OF: u64 = 1 << 11;

    #[test]
    fn decodes_condition_codes() {
        assert_eq!(jcc_condition(&[0x75, 0x10]), Some(5)); // jne rel8
        assert_eq!(jcc_condition(&[0x0f, 0x84, 0, 0, 0, 0]), Some(4)); // je rel32
        assert_eq!(jcc_condition(&[0x3e, 0x0f, 0x85, 0, 0, 0, 0]), Some(5)); // ds jne
        assert_eq!(jcc_condition(&[0xe3, 0x10]), None); // jrcxz
        assert_eq!(jcc_condition(&[0xe9, 0, 0, 0, 0]), None); // jmp
        assert_eq!(jcc_condition(&[]), None);
    }

    #[test]
    fn evaluates_conditions() {
        assert!(condition_holds(4, ZF)); // je
        assert!(!condition_holds(5, ZF)); // jne
        assert!(condition_holds(5, 0));
        assert!(condition_holds(2, CF)); // jb
        assert!(condition_holds(7, 0)); // ja
        assert!(!condition_holds(7, CF));
        assert!(condition_holds(0xc, SF)); // jl: sf != of
        assert!(!condition_holds(0xc, SF | OF));
        assert!(condition_holds(0xe, ZF)); // jle
        assert!(condition_holds(0xf, 0)); // jg
        assert!(!condition_holds(0xf, SF));
    }
}
