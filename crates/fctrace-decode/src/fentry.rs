// SPDX-License-Identifier: GPL-2.0
//! A function's ftrace site (its `__fentry__` call), from the bytes at its start.
//!
//! Traced functions start with `call __fentry__` (after `endbr64` with IBT), which the
//! kernel turns into a 5-byte nop at boot and into a call to an ftrace caller while an
//! ftrace user hooks the function. A function ftrace cannot trace (`notrace`, `noinstr`,
//! KASAN's and lockdep's own code) has no such call, but its first instruction may still
//! be a 5-byte nop (a static branch) or a call (an inlined `rcu_read_unlock()` in
//! `pte_unmap()`, say). [`entry_site`] gives the candidate; a call is the ftrace site
//! only when its target is `__fentry__` or an ftrace caller ([`is_ftrace_caller`]), which
//! the module asks of the running kernel's symbols. A nop candidate can still be a static
//! branch: the module finds such functions when ftrace refuses them (see
//! `rust-kmod/engine/arming/mod.rs`, `hook_callees`).
//!
//! Shared by the kernel module (which hooks these sites) and the host tests, which check
//! it against every built kernel's `__mcount_loc` list.

use crate::decode::{decode, Flow};

/// What starts a function, where an ftrace site would be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EntrySite {
    /// No 5-byte nop and no direct call there: not an ftrace site.
    None,
    /// A 5-byte nop at this offset (0, or 4 after `endbr64`): an ftrace site not in use,
    /// or a static branch.
    Nop(u8),
    /// A direct call at this offset to `target`: an ftrace site in use when `target` is
    /// an ftrace caller, else an ordinary call.
    Call(u8, u64),
}

/// Where the ftrace site of a function starts: after its `endbr64`, which the kernel
/// seals in functions whose address is never taken: it turns it into a 4-byte nop found
/// only at former `endbr64` sites (`gen_endbr_poison()`: `66 0f 1f 00` in 6.12,
/// `0f 1f 40 d6`, `nopl -42(%rax)`, in 7.x), so all three forms count, as the kernel's
/// `is_endbr()` counts them.
pub fn fentry_offset(code: &[u8]) -> usize {
    match code.get(..4) {
        Some([0xf3, 0x0f, 0x1e, 0xfa])
        | Some([0x66, 0x0f, 0x1f, 0x00])
        | Some([0x0f, 0x1f, 0x40, 0xd6]) => 4,
        _ => 0,
    }
}

/// The ftrace site candidate of the function at `func`, whose first bytes are `code` (9
/// are enough).
pub fn entry_site(code: &[u8], func: u64) -> EntrySite {
    let off = fentry_offset(code) as u8;
    let Some(rest) = code.get(off as usize..) else {
        return EntrySite::None;
    };
    match decode(rest, func.wrapping_add(off as u64)) {
        Ok(i) if i.len == 5 && i.nop => EntrySite::Nop(off),
        Ok(i) if i.len == 5 => match i.flow {
            Flow::Call(target) => EntrySite::Call(off, target),
            _ => EntrySite::None,
        },
        _ => EntrySite::None,
    }
}

/// Whether a call from an ftrace site to the symbol `name` is ftrace's: `__fentry__`
/// (the image before boot), the callers of `arch/x86/kernel/ftrace_64.S`, an ops'
/// trampoline allocated at run time (`ftrace_trampoline`), or a BPF trampoline
/// (`bpf_trampoline_<key>`, direct calls).
pub fn is_ftrace_caller(name: &str) -> bool {
    matches!(
        name,
        "__fentry__" | "ftrace_caller" | "ftrace_regs_caller" | "ftrace_trampoline"
    ) || name.starts_with("bpf_trampoline_")
}

/// The ftrace site of a function: its offset, when [`entry_site`] found a nop there or a
/// call whose target is the start of an ftrace caller. `symbol_of` gives the name of the
/// symbol holding an address and the address's offset into it; `None` (no symbol) is
/// taken as a trampoline. A call into the middle of a symbol (a retpoline's `call 1f`) is
/// not a site.
pub fn ftrace_site_offset<'a>(
    code: &[u8],
    func: u64,
    symbol_of: impl FnOnce(u64) -> Option<(&'a str, u64)>,
) -> Option<u8> {
    match entry_site(code, func) {
        EntrySite::None => None,
        EntrySite::Nop(off) => Some(off),
        EntrySite::Call(off, target) => match symbol_of(target) {
            Some((name, offset)) if offset != 0 || !is_ftrace_caller(name) => None,
            _ => Some(off),
        },
    }
}

/// Applies a batch of `n` sites with `apply`, which takes a range of them and fails as a
/// whole when ftrace refuses one of it (`ftrace_set_filter_ips()`); a refused range is
/// split in halves, so `k` refused sites among `n` cost about `2·k·log2(n)` more calls,
/// not `n`. `done` hears every range in order, with whether it was applied; a refused
/// one is a single site. No allocation, no recursion.
pub fn apply_halving(
    n: usize,
    mut apply: impl FnMut(core::ops::Range<usize>) -> bool,
    mut done: impl FnMut(core::ops::Range<usize>, bool),
) {
    // Ranges still to try, the next on top: each is at most half of the one below it, so
    // 64 entries hold any `usize` range.
    let mut stack = [(0usize, 0usize); 65];
    let mut top = 0usize;
    if let (true, Some(first)) = (n > 0, stack.first_mut()) {
        *first = (0, n);
        top = 1;
    }
    while let Some(t) = top.checked_sub(1) {
        top = t;
        let Some(&(lo, hi)) = stack.get(t) else {
            break;
        };
        if apply(lo..hi) {
            done(lo..hi, true);
            continue;
        }
        let len = hi.saturating_sub(lo);
        if len <= 1 {
            done(lo..hi, false);
            continue;
        }
        let mid = lo.saturating_add(len / 2);
        // The right half first: the left one is on top, so ranges finish in order.
        match stack.get_mut(t..t.saturating_add(2)) {
            Some([a, b]) => {
                *a = (mid, hi);
                *b = (lo, mid);
                top = t.saturating_add(2);
            }
            _ => done(lo..hi, false),
        }
    }
}

#[cfg(test)]
#[allow(
    clippy::arithmetic_side_effects,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::unwrap_used
)]
mod tests {
    use super::*;

    /// The calls `apply_halving` makes when `refused` are refused, and what it reports.
    fn halving(n: usize, refused: &[usize]) -> (usize, [Option<bool>; 128]) {
        let mut calls = 0;
        let mut seen = [None; 128];
        let mut next = 0;
        apply_halving(
            n,
            |r| {
                calls += 1;
                !refused.iter().any(|x| r.contains(x))
            },
            |r, ok| {
                assert_eq!(r.start, next, "ranges out of order");
                next = r.end;
                assert!(ok || r.len() == 1);
                for i in r {
                    seen[i] = Some(ok);
                }
            },
        );
        assert_eq!(next, n);
        (calls, seen)
    }

    #[test]
    fn halving_isolates_the_refused() {
        for n in [1usize, 2, 3, 7, 76, 128] {
            assert_eq!(halving(n, &[]).0, 1);
            for refused in [&[0usize][..], &[n - 1], &[n / 2, n - 1], &[0, n / 3, n - 1]] {
                let (calls, seen) = halving(n, refused);
                for (i, s) in seen.iter().enumerate().take(n) {
                    assert_eq!(*s, Some(!refused.contains(&i)), "n {n} site {i}");
                }
                let log = usize::BITS - n.leading_zeros();
                assert!(
                    calls <= 1 + 2 * refused.len() * log as usize,
                    "n {n}: {calls}"
                );
            }
        }
        // handle_pte_fault() on the debug kernel: 29 to hook, one refused (29 more
        // updates when each was tried on its own).
        assert!(halving(29, &[17]).0 <= 11);
        assert_eq!(halving(0, &[]).0, 0);
    }

    const F: u64 = 0xffff_ffff_8100_0000;

    #[test]
    fn nop_after_endbr() {
        let code = [0xf3, 0x0f, 0x1e, 0xfa, 0x0f, 0x1f, 0x44, 0x00, 0x00];
        assert_eq!(entry_site(&code, F), EntrySite::Nop(4));
        let sealed = [0x66, 0x0f, 0x1f, 0x00, 0x0f, 0x1f, 0x44, 0x00, 0x00];
        assert_eq!(entry_site(&sealed, F), EntrySite::Nop(4));
        // Debian's 7.3.4: count_memcg_events(), sealed.
        let sealed_7 = [0x0f, 0x1f, 0x40, 0xd6, 0x0f, 0x1f, 0x44, 0x00, 0x00];
        assert_eq!(entry_site(&sealed_7, F), EntrySite::Nop(4));
        // A function that starts with a 4-byte nop of another form has no site there.
        let nop4 = [0x0f, 0x1f, 0x40, 0x00, 0x0f, 0x1f, 0x44, 0x00, 0x00];
        assert_eq!(entry_site(&nop4, F), EntrySite::None);
        assert_eq!(entry_site(&code[4..], F), EntrySite::Nop(0));
    }

    #[test]
    fn call_is_a_site_only_into_ftrace() {
        // call +0x10 at F: target F + 5 + 0x10.
        let code = [0xe8, 0x10, 0x00, 0x00, 0x00, 0x55, 0x48, 0x89, 0xe5];
        assert_eq!(entry_site(&code, F), EntrySite::Call(0, F + 0x15));
        let site = |sym: Option<(&'static str, u64)>| ftrace_site_offset(&code, F, |_| sym);
        assert_eq!(site(Some(("ftrace_caller", 0))), Some(0));
        assert_eq!(site(Some(("ftrace_trampoline", 0))), Some(0));
        assert_eq!(site(Some(("bpf_trampoline_6442450945", 0))), Some(0));
        assert_eq!(site(None), Some(0));
        // pte_unmap() on the debug kernel starts with a call into RCU.
        assert_eq!(site(Some(("__rcu_read_unlock", 0))), None);
        // A retpoline's `call 1f`.
        assert_eq!(site(Some(("__x86_indirect_thunk_array", 6))), None);
        assert_eq!(site(Some(("ftrace_caller", 0x20))), None);
    }

    #[test]
    fn other_starts_are_none() {
        // push %rbp; mov %rsp,%rbp
        assert_eq!(entry_site(&[0x55, 0x48, 0x89, 0xe5], F), EntrySite::None);
        // endbr64; jmp rel32 (5 bytes, not a call)
        let jmp = [0xf3, 0x0f, 0x1e, 0xfa, 0xe9, 0, 0, 0, 0];
        assert_eq!(entry_site(&jmp, F), EntrySite::None);
        // a 4-byte nop is not a site
        assert_eq!(
            entry_site(&[0x0f, 0x1f, 0x40, 0x00, 0xc3], F),
            EntrySite::None
        );
        assert_eq!(entry_site(&[0xf3, 0x0f], F), EntrySite::None);
    }
}
