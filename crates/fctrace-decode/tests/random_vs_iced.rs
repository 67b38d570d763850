// SPDX-License-Identifier: GPL-2.0
//! Differential test on pseudo-random byte strings shaped like instructions
//! (legacy prefixes, REX, 0f/0f38/0f3a maps, VEX, EVEX, XOP, group opcodes):
//! whenever iced-x86 decodes an instruction, ours must agree on length and
//! control flow; and every proper prefix of a valid instruction is Truncated.
//! Where iced says invalid we may be more lenient (we only need lengths of
//! real code), but never panic; those cases are counted and printed.

mod common;

use fctrace_decode::{decode, DecodeError};

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn byte(&mut self) -> u8 {
        (self.next() >> 32) as u8
    }
    fn below(&mut self, n: u64) -> u64 {
        (self.next() >> 33) % n
    }
}

const LEGACY: [u8; 11] = [
    0x66, 0x67, 0xf0, 0xf2, 0xf3, 0x2e, 0x3e, 0x26, 0x36, 0x64, 0x65,
];

fn gen(r: &mut Rng, buf: &mut [u8; 20]) {
    for b in buf.iter_mut() {
        *b = r.byte();
    }
    let mut i = 0;
    // Legacy prefixes (mostly none or one).
    let npfx = [0, 0, 0, 1, 1, 2, 3][r.below(7) as usize];
    for _ in 0..npfx {
        buf[i] = LEGACY[r.below(LEGACY.len() as u64) as usize];
        i += 1;
    }
    if r.below(3) == 0 {
        buf[i] = 0x40 | r.byte() & 0xf;
        i += 1;
    }
    match r.below(10) {
        0..=2 => {} // random one-byte opcode
        3 | 4 => buf[i] = 0x0f,
        5 => {
            buf[i] = 0x0f;
            buf[i + 1] = [0x38, 0x3a][r.below(2) as usize];
        }
        6 => {
            // VEX3 with a plausible map.
            buf[i] = 0xc4;
            buf[i + 1] = (buf[i + 1] & 0xe0) | [1, 2, 3, 0, 4][r.below(5) as usize];
        }
        7 => buf[i] = 0xc5,
        8 => {
            // EVEX with a plausible P0/P1.
            buf[i] = 0x62;
            buf[i + 1] = (buf[i + 1] & 0xf0) | [1, 2, 3, 5, 6, 4][r.below(6) as usize];
            buf[i + 2] |= 0x04;
        }
        _ => {
            // Groups, branches, XOP, moffs, imm64.
            buf[i] = [
                0xff, 0xfe, 0xf6, 0xf7, 0xc6, 0xc7, 0x8f, 0xa0, 0xa1, 0xa2, 0xa3, 0xb8, 0xbf, 0xc8,
                0xe8, 0xe9, 0xeb, 0x0f,
            ][r.below(18) as usize];
            if buf[i] == 0x8f && r.below(2) == 0 {
                buf[i + 1] = (buf[i + 1] & 0xe0) | [8, 9, 10][r.below(3) as usize];
            }
            if buf[i] == 0x0f {
                buf[i + 1] = [
                    0x01, 0x05, 0x07, 0x0b, 0x0f, 0x1e, 0x1f, 0x20, 0x22, 0x78, 0x80, 0x8f, 0xb8,
                    0xb9, 0xba, 0xff, 0xae, 0xc7,
                ][r.below(18) as usize];
                if buf[i + 1] == 0x1e && r.below(2) == 0 {
                    buf[i + 2] = 0xfa;
                }
            }
        }
    }
}

#[test]
fn random_instructions_match_iced() {
    let mut r = Rng(0x9e37_79b9_7f4a_7c15 ^ 3);
    let n = 1_000_000;
    let (mut valid, mut lenient, mut both_invalid) = (0u64, 0u64, 0u64);
    let mut lenient_examples = Vec::new();
    let mut mismatches = Vec::new();
    let mut buf = [0u8; 20];
    for _ in 0..n {
        gen(&mut r, &mut buf);
        let ip = r.next() & !0xfff;
        let theirs = common::iced_decode(&buf, ip).map(common::canon);
        let ours = decode(&buf, ip).map(common::canon);
        match theirs {
            Ok(t) => {
                valid += 1;
                if ours != Ok(t) {
                    if mismatches.len() < 40 {
                        mismatches.push(format!(
                            "[{}] `{}`\n    iced: {t:?}\n    ours: {ours:?}",
                            common::hex(&buf[..15]),
                            common::disasm(&buf, ip)
                        ));
                    }
                    continue;
                }
                for k in 0..t.len as usize {
                    assert_eq!(
                        decode(&buf[..k], ip),
                        Err(DecodeError::Truncated),
                        "[{}] cut at {k}",
                        common::hex(&buf[..15])
                    );
                }
            }
            Err(_) => match ours {
                Ok(_) => {
                    lenient += 1;
                    if lenient_examples.len() < 15 {
                        lenient_examples.push(common::hex(&buf[..8]));
                    }
                }
                Err(_) => both_invalid += 1,
            },
        }
    }
    for m in &mismatches {
        println!("MISMATCH {m}");
    }
    println!("lenient examples (iced: invalid, ours: decoded): {lenient_examples:?}");
    println!(
        "random: {n} byte strings, {valid} valid per iced (all agree: {}), {both_invalid} invalid for both, {lenient} decoded only by us",
        mismatches.is_empty()
    );
    assert!(mismatches.is_empty());
}
