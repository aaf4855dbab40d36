//! A random permutation of `0..n` in O(1) memory, for fio's random map (every block of a
//! region visited exactly once per pass) on regions of any size, TB-sized disks included.
//!
//! ```text
//! k    = bits needed for n - 1 (at least 1); mask = 2^k - 1
//! h(x) = 3 keyed rounds of  x = ((x ^ key_r) * odd_r) & mask;  x ^= x >> ceil(k/2)
//!        (xor with a key, multiplication by an odd number mod 2^k and a right xorshift
//!        are each bijections of 0..2^k, so h is one)
//! at(i) for i < n:  y = h(i); while y >= n { y = h(y) }; y      (cycle walking)
//! ```
//! Cycle walking restricts the bijection of `0..2^k` to a bijection of `0..n` (Black &
//! Rogaway, "Ciphers with arbitrary finite domains", 2002); since `2^k < 2n` a lookup takes
//! fewer than two rounds of `h` on average.

use crate::rng::Rng;

#[derive(Clone, Debug)]
pub(crate) struct Permutation {
    n: u64,
    mask: u64,
    shift: u32,
    keys: [u64; 3],
    mults: [u64; 3],
}

impl Permutation {
    /// A fresh permutation of `0..n` (n >= 1) drawn from `rng`.
    pub(crate) fn new(n: u64, rng: &mut Rng) -> Self {
        let n = n.max(1);
        let bits = (64 - (n - 1).leading_zeros()).max(1);
        let mask = if bits == 64 {
            u64::MAX
        } else {
            (1u64 << bits) - 1
        };
        let mut keys = [0u64; 3];
        let mut mults = [0u64; 3];
        for r in 0..3 {
            keys[r] = rng.next_u64() & mask;
            mults[r] = rng.next_u64() | 1;
        }
        Self {
            n,
            mask,
            shift: bits.div_ceil(2),
            keys,
            mults,
        }
    }

    #[inline]
    fn hash(&self, mut x: u64) -> u64 {
        for r in 0..3 {
            x = ((x ^ self.keys[r]).wrapping_mul(self.mults[r])) & self.mask;
            x ^= x >> self.shift;
        }
        x
    }

    /// The `i`-th element (i < n) of the permutation.
    #[inline]
    pub(crate) fn at(&self, i: u64) -> u64 {
        debug_assert!(i < self.n);
        let mut y = self.hash(i);
        while y >= self.n {
            y = self.hash(y);
        }
        y
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_index_appears_exactly_once_for_many_sizes() {
        let mut rng = Rng::new(5);
        for n in [1u64, 2, 3, 7, 8, 9, 100, 255, 256, 257, 1000, 4097] {
            let p = Permutation::new(n, &mut rng);
            let mut seen = vec![false; n as usize];
            for i in 0..n {
                let v = p.at(i) as usize;
                assert!(!seen[v], "n={n}: {v} twice");
                seen[v] = true;
            }
        }
    }

    #[test]
    fn huge_domains_stay_in_range() {
        let mut rng = Rng::new(6);
        for n in [u64::MAX, 1 << 63, (1 << 40) + 3] {
            let p = Permutation::new(n, &mut rng);
            for i in 0..1000 {
                assert!(p.at(i) < n);
            }
        }
    }

    #[test]
    fn consecutive_indices_do_not_give_consecutive_values() {
        let mut rng = Rng::new(7);
        let n = 100_000;
        let p = Permutation::new(n, &mut rng);
        let adjacent = (0..n - 1).filter(|&i| p.at(i + 1) == p.at(i) + 1).count();
        assert!(adjacent < 50, "{adjacent} sequential steps");
        let low_half = (0..1000).filter(|&i| p.at(i) < n / 2).count();
        assert!((400..600).contains(&low_half), "{low_half}");
    }
}
