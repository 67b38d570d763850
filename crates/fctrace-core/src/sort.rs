// SPDX-License-Identifier: GPL-2.0

//! An in-place heapsort, for the kernel module's few sorts.
//!
//! `core`'s sorts end in `panic_on_ord_violation()` when a comparison is not a total
//! order; objtool of the kernels fctrace builds for does not know that function never
//! returns and warns that the sort "falls through to next function". This sort never
//! panics (a comparison that is not a total order leaves some order), allocates nothing
//! and takes O(n log n) comparisons.

use core::cmp::Ordering;

/// Sorts `v` by `cmp`, not stable.
pub fn sort_by<T, F: FnMut(&T, &T) -> Ordering>(v: &mut [T], mut cmp: F) {
    let n = v.len();
    for start in (0..n / 2).rev() {
        sift_down(v, start, n, &mut cmp);
    }
    for end in (1..n).rev() {
        v.swap(0, end);
        sift_down(v, 0, end, &mut cmp);
    }
}

/// Sorts `v` in ascending order, not stable.
pub fn sort<T: Ord>(v: &mut [T]) {
    sort_by(v, T::cmp);
}

/// Moves `v[root]` down the heap `v[..end]` to its place.
fn sift_down<T, F: FnMut(&T, &T) -> Ordering>(
    v: &mut [T],
    mut root: usize,
    end: usize,
    cmp: &mut F,
) {
    loop {
        let mut child = 2 * root + 1;
        if child >= end {
            return;
        }
        if child + 1 < end && cmp(&v[child], &v[child + 1]) == Ordering::Less {
            child += 1;
        }
        if cmp(&v[root], &v[child]) != Ordering::Less {
            return;
        }
        v.swap(root, child);
        root = child;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorts_like_core() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        for len in 0..200 {
            let mut a = [0u64; 200];
            for x in a[..len].iter_mut() {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                *x = seed % 50;
            }
            let mut b = a;
            sort(&mut a[..len]);
            b[..len].sort_unstable();
            assert_eq!(a[..len], b[..len], "len {len}");
        }
    }

    #[test]
    fn sorts_by_a_key_and_survives_a_bad_order() {
        let mut v = [(3, 'c'), (1, 'a'), (2, 'b'), (1, 'z')];
        sort_by(&mut v, |x, y| x.0.cmp(&y.0).then(y.1.cmp(&x.1)));
        assert_eq!(v, [(1, 'z'), (1, 'a'), (2, 'b'), (3, 'c')]);
        // Not a total order: no panic, every element still there.
        let mut w = [5, 1, 4, 2, 3];
        let mut flip = false;
        sort_by(&mut w, |_, _| {
            flip = !flip;
            if flip {
                Ordering::Less
            } else {
                Ordering::Greater
            }
        });
        let mut s = w;
        s.sort_unstable();
        assert_eq!(s, [1, 2, 3, 4, 5]);
    }
}
