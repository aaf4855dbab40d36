//! A sorted set of small `Copy` keys as a two-level sorted vector: chunks of at most
//! [`CHUNK`] keys, each chunk's last key kept apart for the search (the layout of ext4's free
//! runs in `guest/ext4.rs`). Cheap for the few keys a scheduler's queue usually holds (one
//! chunk: a plain sorted vector, one binary search) and still bounded for deep queues (an
//! insertion or removal moves at most a chunk), where a B-tree walks and rebalances nodes.
//!
//! ```text
//! first_not(below): c = first chunk whose last key is not below; i = first such key of c
//! insert(k):        c = first chunk whose last key >= k (else the last); insert in order;
//!                   a chunk of more than CHUNK keys splits in halves
//! remove(p):        chunk.remove(i); drop the chunk if it emptied (a sole chunk stays, empty);
//!                   the next key's place
//! ```

/// Largest chunk: a fuller one splits in two.
pub const CHUNK: usize = 64;

/// Sorted keys (see the module documentation). Keys must be distinct.
#[derive(Clone, Debug)]
pub struct SortedChunks<T> {
    chunks: Vec<Vec<T>>,
    /// The last key of each chunk. Chunks are never empty, but for a sole chunk: a set that
    /// empties keeps its chunk (and its capacity, and a stale last key) to fill it again.
    lasts: Vec<T>,
}

impl<T> Default for SortedChunks<T> {
    fn default() -> Self {
        Self {
            chunks: Vec::new(),
            lasts: Vec::new(),
        }
    }
}

/// A place in [`SortedChunks`]: key `i` of chunk `c`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pos {
    c: usize,
    i: usize,
}

impl<T: Ord + Copy> SortedChunks<T> {
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.chunks.first().is_none_or(Vec::is_empty)
    }

    /// The first key for which `below` is false, the keys for which it holds coming first (a
    /// B-tree's `range(k..).next()` with `below = |e| e < k`).
    #[inline(always)]
    pub fn first_not(&self, below: impl Fn(&T) -> bool) -> Option<Pos> {
        if let [ch] = self.chunks.as_slice() {
            // One chunk (a short queue, or an emptied one): one search.
            let i = ch.partition_point(below);
            return (i < ch.len()).then_some(Pos { c: 0, i });
        }
        let c = self.lasts.partition_point(&below);
        let ch = self.chunks.get(c).filter(|ch| !ch.is_empty())?;
        Some(Pos {
            c,
            i: ch.partition_point(below),
        })
    }

    /// The place of key `k`, if it is in the set.
    #[inline]
    pub fn find(&self, k: &T) -> Option<Pos> {
        self.first_not(|e| e < k).filter(|&p| self.get(p) == *k)
    }

    #[inline]
    pub fn get(&self, p: Pos) -> T {
        self.chunks[p.c][p.i]
    }

    /// The key before `p` (before the end for None), if any.
    #[inline]
    pub fn before(&self, p: Option<Pos>) -> Option<Pos> {
        match p {
            Some(Pos { c, i }) if i > 0 => Some(Pos { c, i: i - 1 }),
            Some(Pos { c: 0, .. }) => None,
            Some(Pos { c, .. }) => Some(Pos {
                c: c - 1,
                i: self.chunks[c - 1].len() - 1,
            }),
            None => self
                .chunks
                .last()
                .filter(|ch| !ch.is_empty())
                .map(|ch| Pos {
                    c: self.chunks.len() - 1,
                    i: ch.len() - 1,
                }),
        }
    }

    /// Insert `k` in order.
    #[inline(always)]
    pub fn insert(&mut self, k: T) {
        if self.chunks.is_empty() {
            self.chunks.push(vec![k]);
            self.lasts.push(k);
            return;
        }
        let c = match self.chunks.len() {
            1 => 0,
            n => self.lasts.partition_point(|l| *l < k).min(n - 1),
        };
        let ch = &mut self.chunks[c];
        let i = ch.partition_point(|e| *e < k);
        ch.insert(i, k);
        if i + 1 == ch.len() {
            self.lasts[c] = k;
        }
        if ch.len() > CHUNK {
            let tail = ch.split_off(ch.len() / 2);
            self.lasts[c] = ch[ch.len() - 1];
            self.lasts.insert(c + 1, tail[tail.len() - 1]);
            self.chunks.insert(c + 1, tail);
        }
    }

    /// Remove the key at `p`: the key and the place of the one after it (a B-tree's
    /// `range(k..).next()` once `k` is removed).
    #[inline(always)]
    pub fn remove(&mut self, p: Pos) -> (T, Option<Pos>) {
        let Pos { c, i } = p;
        let ch = &mut self.chunks[c];
        let k = ch.remove(i);
        let next = if ch.is_empty() {
            if self.chunks.len() == 1 {
                return (k, None);
            }
            self.chunks.remove(c);
            self.lasts.remove(c);
            (c < self.chunks.len()).then_some(Pos { c, i: 0 })
        } else if i == ch.len() {
            self.lasts[c] = ch[i - 1];
            (c + 1 < self.chunks.len()).then_some(Pos { c: c + 1, i: 0 })
        } else {
            Some(p)
        };
        (k, next)
    }

    /// Every key in order.
    #[cfg(test)]
    pub fn iter(&self) -> impl Iterator<Item = T> + '_ {
        self.chunks.iter().flatten().copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    #[test]
    fn the_chunks_answer_every_look_up_as_an_ordered_set_does_through_splits_and_empty_chunks() {
        // Random insertions (dense keys and sparse ones, up to a few hundred keys: many
        // chunks), removals, and the look-ups against a BTreeSet after every step.
        let mut rng = crate::rng::Rng::new(29);
        for round in 0..60u64 {
            let span = 1 + rng.below(if round % 2 == 0 { 600 } else { 1 << 30 });
            let mut s = SortedChunks::default();
            let mut tree = BTreeSet::new();
            for _ in 0..1500 {
                let grow = rng.below(if round % 3 == 0 { 10 } else { 6 }) < 5;
                if tree.is_empty() || grow {
                    let k = rng.below(span);
                    if tree.insert(k) {
                        s.insert(k);
                    }
                } else {
                    let k = *tree
                        .iter()
                        .nth(rng.below(tree.len() as u64) as usize)
                        .unwrap();
                    let p = s.find(&k).expect("a key in the set is found");
                    let (got, next) = s.remove(p);
                    assert_eq!(got, k);
                    tree.remove(&k);
                    assert_eq!(next.map(|p| s.get(p)), tree.range(k..).next().copied());
                }
                let k = rng.below(span + 1);
                let at = s.first_not(|e| *e < k);
                assert_eq!(at.map(|p| s.get(p)), tree.range(k..).next().copied());
                let below = s.before(at).map(|p| s.get(p));
                assert_eq!(below, tree.range(..k).next_back().copied());
                assert_eq!(s.find(&k).is_some(), tree.contains(&k));
                assert_eq!(s.is_empty(), tree.is_empty());
                assert!(s.iter().eq(tree.iter().copied()));
            }
        }
    }
}
