// SPDX-License-Identifier: GPL-2.0

//! The return stack of one kernel stack: the return addresses fctrace replaced with its
//! return trampoline (`fctrace_return`), and what they were.
//!
//! When a traced task calls a followed function, fctrace puts the address of its return
//! trampoline where the call's return address goes, and keeps the real one here, keyed by
//! the address of that stack word (`retp`). The function's `ret` then lands in the
//! trampoline, which pops the entry by the stack pointer it arrives with and goes on to
//! the real return address. That is how returns are seen without a breakpoint on any
//! `ret` (the same idea as function_graph's `return_to_handler`).
//!
//! A stack grows down, so the live entries' `retp` decrease from the oldest to the newest.
//! An entry whose word the stack has unwound past without returning through it is dead;
//! [`RetStack::push`] drops those (any entry at or below the new `retp`), and
//! [`RetStack::pop`] drops the ones above the entry it returns through.
//!
//! When tracing stops, the replaced words still on the stack are put back
//! ([`RetStack::restore`], with a compare-and-exchange on each: the task may be running);
//! the entries stay, marked restored, for a task that had already returned through one of
//! them and is on its way through the trampoline, until they can be dropped
//! ([`RetStack::drop_restored`]).
//!
//! Nothing here allocates or panics.

/// The most replaced return addresses one stack holds (one per open frame at most).
pub const MAX_RETS: usize = 128;

/// How far below a return's stack word a popped entry may lie ([`RetStack::pop_unexpected`]):
/// the most that `ret $imm16` takes off the stack past its return address, rounded down
/// to a multiple of 8.
pub const MAX_UNEXPECTED: u64 = 0xfff8;

/// One replaced return address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hooked {
    /// The address of the stack word that held the return address.
    pub retp: u64,
    /// The return address it held.
    pub orig: u64,
    /// The word was put back ([`RetStack::restore`]).
    pub restored: bool,
}

impl Hooked {
    const EMPTY: Hooked = Hooked {
        retp: 0,
        orig: 0,
        restored: false,
    };
}

/// The replaced return addresses of one stack, oldest first.
pub struct RetStack {
    n: usize,
    e: [Hooked; MAX_RETS],
}

impl RetStack {
    /// An empty stack.
    pub const EMPTY: RetStack = RetStack {
        n: 0,
        e: [Hooked::EMPTY; MAX_RETS],
    };

    /// The number of entries.
    pub fn len(&self) -> usize {
        self.n
    }

    /// Whether there is no entry.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }

    /// The entries, oldest first.
    pub fn entries(&self) -> &[Hooked] {
        self.e.get(..self.n).unwrap_or(&[])
    }

    /// Records that the word at `retp`, holding `orig`, is about to be replaced. Entries at
    /// or below `retp` are dead (the stack unwound past them) and go first. Returns false,
    /// changing nothing, when the stack is full: the caller must then leave the word alone.
    pub fn push(&mut self, retp: u64, orig: u64) -> bool {
        let mut n = self.n;
        while n > 0 && self.e.get(n - 1).is_some_and(|h| h.retp <= retp) {
            n -= 1;
        }
        let Some(slot) = self.e.get_mut(n) else {
            return false;
        };
        *slot = Hooked {
            retp,
            orig,
            restored: false,
        };
        self.n = n + 1;
        true
    }

    /// A `ret` through the word at `retp` arrived in the trampoline: pops its entry, and
    /// the dead ones above it, and returns the address it held. `None` (nothing changed)
    /// when no entry has this `retp`.
    pub fn pop(&mut self, retp: u64) -> Option<u64> {
        let i = self.entries().iter().rposition(|h| h.retp == retp)?;
        let orig = self.e.get(i)?.orig;
        self.n = i;
        Some(orig)
    }

    /// A `ret` came through the trampoline with its stack pointer 8 above `retp`, where no
    /// word was replaced: the function returned with its stack pointer elsewhere than a
    /// plain `ret` leaves it (a callee-pop `ret $n`, a `jmp` through a return address it
    /// popped and moved past). Returns are innermost first, so it came through the newest
    /// entry, if that one is live and below `retp` (the stack unwound past its word): pops
    /// and returns it. `None` (nothing changed) when the newest entry is restored or at or
    /// above `retp`: no entry can be the one.
    /// It must lie at most [`MAX_UNEXPECTED`] bytes below, a multiple of 8 (what `ret $n`
    /// pops past its return address, at most): farther, no entry can be it.
    pub fn pop_unexpected(&mut self, retp: u64) -> Option<Hooked> {
        let i = self.n.checked_sub(1)?;
        let h = *self.e.get(i)?;
        let d = retp.wrapping_sub(h.retp);
        if h.restored || h.retp >= retp || d > MAX_UNEXPECTED || d % 8 != 0 {
            return None;
        }
        self.n = i;
        Some(h)
    }

    /// The address the word at `retp` held, if it was replaced (and not restored).
    pub fn find(&self, retp: u64) -> Option<u64> {
        // From the newest: the `retp` increase, so the search ends at the first above it
        // (a new call's word, below every live entry, is answered at once).
        self.entries()
            .iter()
            .rev()
            .take_while(|h| h.retp <= retp)
            .find(|h| h.retp == retp && !h.restored)
            .map(|h| h.orig)
    }

    /// Puts the replaced words back: for each entry not restored yet,
    /// `put_back(retp, orig)` replaces the trampoline's address at `retp` with `orig` if it
    /// is still there (a compare-and-exchange) and says whether it was. Entries are kept,
    /// those put back marked restored (see the module documentation). Returns how many
    /// words could not be put back: another tracer's return hook replaced the trampoline's
    /// address in turn (and will return to it), so their entries stay live.
    pub fn restore(&mut self, mut put_back: impl FnMut(u64, u64) -> bool) -> usize {
        let n = self.n;
        let mut missed = 0;
        for h in self.e.iter_mut().take(n).filter(|h| !h.restored) {
            if put_back(h.retp, h.orig) {
                h.restored = true;
            } else {
                missed += 1;
            }
        }
        missed
    }

    /// Whether an entry was not put back by [`RetStack::restore`] (or was pushed since):
    /// a return may still come through the trampoline for it.
    pub fn has_live(&self) -> bool {
        self.entries().iter().any(|h| !h.restored)
    }

    /// Whether an entry is restored (and may be dropped once no return is in flight).
    pub fn has_restored(&self) -> bool {
        self.entries().iter().any(|h| h.restored)
    }

    /// Drops the restored entries (nothing can return through them any more).
    pub fn drop_restored(&mut self) {
        let n = self.n;
        let mut k = 0;
        for i in 0..n {
            if let Some(&h) = self.e.get(i) {
                if !h.restored {
                    if let Some(d) = self.e.get_mut(k) {
                        *d = h;
                    }
                    k += 1;
                }
            }
        }
        self.n = k;
    }

    /// Drops every entry (the stack's task exits: none of them returns).
    pub fn clear(&mut self) {
        self.n = 0;
    }
}

/// How many of the newest words of function_graph's shadow stack [`graph_saved_ret`]
/// looks at: the frame looked for was pushed last, at the entry of the function being
/// probed (a few entries of a few words each).
pub const GRAPH_WINDOW: usize = 64;

/// The return address function_graph saved for the frame whose return address sits at
/// `retp` (where it put its `handler`, `return_to_handler`), from the words of a task's
/// function_graph shadow stack (`current->ret_stack`, the words in use), in which each
/// `struct ftrace_ret_stack` holds the saved return address `retp_off` words before its
/// `retp`. `None` if no entry of the newest [`GRAPH_WINDOW`] words is that frame's.
///
/// The kernel's `ftrace_graph_ret_addr()` does this but is not exported. As there, an
/// entry that saved `handler` itself is passed over: a tail call (`pgd_free()` jumping to
/// `free_pages()`) leaves one return address on the stack and two entries with that
/// `retp`, the newer one holding `handler` (function_graph's entry of the jumped-to
/// function found its own handler there), the older one the real return address.
pub fn graph_saved_ret(words: &[u64], retp_off: usize, retp: u64, handler: u64) -> Option<u64> {
    let low = words.len().saturating_sub(GRAPH_WINDOW).max(retp_off);
    (low..words.len())
        .rev()
        .filter(|&i| words.get(i) == Some(&retp))
        .filter_map(|i| words.get(i.checked_sub(retp_off)?).copied())
        .find(|&saved| saved != handler)
}

#[cfg(test)]
mod tests {
    extern crate std;

    use super::*;
    use std::vec::Vec;

    fn retps(s: &RetStack) -> Vec<u64> {
        s.entries().iter().map(|h| h.retp).collect()
    }

    #[test]
    fn returns_pop_in_order_with_their_addresses() {
        let mut s = RetStack::EMPTY;
        assert!(s.push(0x1000, 0xa));
        assert!(s.push(0xf00, 0xb));
        assert!(s.push(0xe00, 0xc));
        assert_eq!(s.pop(0xe00), Some(0xc));
        assert_eq!(s.pop(0xf00), Some(0xb));
        assert_eq!(s.pop(0x1000), Some(0xa));
        assert!(s.is_empty());
    }

    #[test]
    fn an_unknown_return_changes_nothing() {
        let mut s = RetStack::EMPTY;
        s.push(0x1000, 0xa);
        s.push(0xf00, 0xb);
        assert_eq!(s.pop(0xf08), None);
        assert_eq!(retps(&s), [0x1000, 0xf00]);
    }

    #[test]
    fn an_unexpected_return_pops_the_newest_entry_below_it() {
        let mut s = RetStack::EMPTY;
        assert!(s.push(0x1000, 0xa));
        assert!(s.push(0xf00, 0xb));
        // `ret $8` from the frame whose word is at 0xf00: the trampoline sees 0xf08.
        assert_eq!(s.pop(0xf08), None);
        let h = s.pop_unexpected(0xf08).unwrap();
        assert_eq!((h.retp, h.orig), (0xf00, 0xb));
        assert_eq!(retps(&s), [0x1000]);
        // Above the newest entry only: an address below it matches nothing.
        assert_eq!(s.pop_unexpected(0x1000), None);
        assert_eq!(s.pop_unexpected(0xff8), None);
        assert_eq!(retps(&s), [0x1000]);
        // Farther below than `ret $n` can pop, or not a multiple of 8: not the one.
        let mut far = RetStack::EMPTY;
        assert!(far.push(0x20000, 0xc));
        assert_eq!(far.pop_unexpected(0x20000 + MAX_UNEXPECTED + 8), None);
        assert_eq!(far.pop_unexpected(0x20004), None);
        assert_eq!(
            far.pop_unexpected(0x20000 + MAX_UNEXPECTED).map(|h| h.orig),
            Some(0xc)
        );
        // A restored entry is never returned through.
        s.restore(|_, _| true);
        assert_eq!(s.pop_unexpected(0x1010), None);
        let mut empty = RetStack::EMPTY;
        assert!(empty.pop_unexpected(0x10).is_none());
    }

    #[test]
    fn a_return_through_an_outer_word_drops_the_dead_inner_entries() {
        let mut s = RetStack::EMPTY;
        s.push(0x1000, 0xa);
        s.push(0xf00, 0xb);
        s.push(0xe00, 0xc);
        // The frames at 0xe00 and 0xf00 were left without returning through their words.
        assert_eq!(s.pop(0x1000), Some(0xa));
        assert!(s.is_empty());
    }

    #[test]
    fn a_push_drops_entries_at_or_below_it() {
        let mut s = RetStack::EMPTY;
        s.push(0x1000, 0xa);
        s.push(0xf00, 0xb);
        s.push(0xe00, 0xc);
        // The stack unwound to above 0xf00 unseen; a new call's word at 0xf00 replaces both.
        assert!(s.push(0xf00, 0xd));
        assert_eq!(retps(&s), [0x1000, 0xf00]);
        assert_eq!(s.pop(0xf00), Some(0xd));
    }

    #[test]
    fn a_full_stack_refuses_and_keeps_its_entries() {
        let mut s = RetStack::EMPTY;
        for i in 0..MAX_RETS as u64 {
            assert!(s.push(0x10_0000 - 8 * i, i));
        }
        assert!(!s.push(0x1000, 0xff));
        assert_eq!(s.len(), MAX_RETS);
        assert_eq!(
            s.pop(0x10_0000 - 8 * (MAX_RETS as u64 - 1)),
            Some(MAX_RETS as u64 - 1)
        );
        assert!(s.push(0x1000, 0xff));
    }

    #[test]
    fn restore_puts_back_each_word_once_and_keeps_the_entries_for_returns_in_flight() {
        let mut s = RetStack::EMPTY;
        s.push(0x1000, 0xa);
        s.push(0xf00, 0xb);
        let mut put = Vec::new();
        let missed = s.restore(|retp, orig| {
            put.push((retp, orig));
            true
        });
        assert_eq!(missed, 0);
        assert_eq!(put, [(0x1000, 0xa), (0xf00, 0xb)]);
        assert_eq!(s.find(0x1000), None, "restored entries are not found");
        assert!(s.has_restored() && !s.has_live());
        // A task that had returned through 0xf00 before the restore still gets its address.
        assert_eq!(s.pop(0xf00), Some(0xb));
        // A second restore touches nothing.
        assert_eq!(s.restore(|_, _| panic!("restored twice")), 0);
        s.drop_restored();
        assert!(s.is_empty());
    }

    #[test]
    fn a_word_another_hook_took_over_stays_live_and_is_tried_again() {
        let mut s = RetStack::EMPTY;
        s.push(0x1000, 0xa);
        s.push(0xf00, 0xb);
        // function_graph replaced the trampoline's address at 0xf00 with its own.
        assert_eq!(s.restore(|retp, _| retp != 0xf00), 1);
        assert!(s.has_live());
        assert_eq!(s.find(0xf00), Some(0xb));
        s.drop_restored();
        assert_eq!(retps(&s), [0xf00]);
        let mut tried = Vec::new();
        assert_eq!(
            s.restore(|retp, _| {
                tried.push(retp);
                true
            }),
            0
        );
        assert_eq!(tried, [0xf00]);
        assert!(!s.has_live());
    }

    #[test]
    fn drop_restored_keeps_newer_entries() {
        let mut s = RetStack::EMPTY;
        s.push(0x1000, 0xa);
        s.restore(|_, _| true);
        s.push(0xf00, 0xb);
        s.drop_restored();
        assert_eq!(retps(&s), [0xf00]);
        assert_eq!(s.find(0xf00), Some(0xb));
        s.clear();
        assert!(s.is_empty());
    }

    /// One frame of function_graph's shadow stack as Linux 6.12 lays it out on x86-64:
    /// `struct ftrace_ret_stack { ret, func, retp }`, then the frame's offset word.
    fn graph_frame(words: &mut Vec<u64>, ret: u64, func: u64, retp: u64) {
        words.extend([ret, func, retp, 4]);
    }

    const HANDLER: u64 = 0xffff_ffff_8100_0000;

    #[test]
    fn graph_saved_ret_of_a_frame() {
        let mut w = Vec::new();
        graph_frame(&mut w, 0xa1, 0xf1, 0xc000);
        graph_frame(&mut w, 0xa2, 0xf2, 0xbf00);
        assert_eq!(graph_saved_ret(&w, 2, 0xbf00, HANDLER), Some(0xa2));
        assert_eq!(graph_saved_ret(&w, 2, 0xc000, HANDLER), Some(0xa1));
        assert_eq!(graph_saved_ret(&w, 2, 0xbe00, HANDLER), None);
        assert_eq!(graph_saved_ret(&[], 2, 0xbf00, HANDLER), None);
    }

    #[test]
    fn graph_saved_ret_passes_over_a_tail_call_entry() {
        // pgd_free() (entered with return address 0xa2 at 0xbf00) jumps to free_pages():
        // function_graph's entry of free_pages() found its handler at 0xbf00 and saved it.
        let mut w = Vec::new();
        graph_frame(&mut w, 0xa1, 0xf1, 0xc000);
        graph_frame(&mut w, 0xa2, 0xf2, 0xbf00);
        graph_frame(&mut w, HANDLER, 0xf3, 0xbf00);
        assert_eq!(graph_saved_ret(&w, 2, 0xbf00, HANDLER), Some(0xa2));
        // (Taking the newest entry, as the helper once did, gives the handler.)
        assert_eq!(w[w.len() - 2 - 2], HANDLER);
    }

    #[test]
    fn graph_saved_ret_looks_only_at_the_newest_words() {
        let mut w = Vec::new();
        graph_frame(&mut w, 0xa1, 0xf1, 0xc000);
        for k in 0..GRAPH_WINDOW as u64 / 4 {
            graph_frame(&mut w, 0xb0 + k, 0xf0, 0xb000 - 8 * k);
        }
        assert_eq!(graph_saved_ret(&w, 2, 0xc000, HANDLER), None);
        assert_eq!(graph_saved_ret(&w, 2, 0xb000, HANDLER), Some(0xb0));
        // The saved word of the oldest entry in reach is not before the slice's start.
        assert_eq!(graph_saved_ret(&[0xbf00, 0, 0], 2, 0xbf00, HANDLER), None);
    }
}
