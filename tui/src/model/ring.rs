//! A bounded queue that counts what falls off its front, with stable absolute indices.

use std::collections::VecDeque;

/// Keeps the newest `capacity` items. Each item has an absolute index (0 for the first ever
/// pushed) that stays valid while it is kept, so lists can refer to items across drops.
#[derive(Debug, Clone)]
pub(crate) struct Ring<T> {
    items: VecDeque<T>,
    capacity: usize,
    dropped: u64,
}

impl<T> Ring<T> {
    pub(crate) fn new(capacity: usize) -> Self {
        Ring {
            items: VecDeque::new(),
            capacity: capacity.max(1),
            dropped: 0,
        }
    }

    /// Adds an item; returns its absolute index.
    pub(crate) fn push(&mut self, item: T) -> u64 {
        if self.items.len() >= self.capacity {
            self.items.pop_front();
            self.dropped += 1;
        }
        self.items.push_back(item);
        self.dropped + self.items.len() as u64 - 1
    }

    /// The item the next push would drop, if the ring is full.
    pub(crate) fn next_dropped(&self) -> Option<&T> {
        if self.items.len() >= self.capacity {
            self.items.front()
        } else {
            None
        }
    }

    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// How many fell off the front.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped
    }

    /// The absolute index of the oldest item kept.
    pub(crate) fn first_abs(&self) -> u64 {
        self.dropped
    }

    /// One past the absolute index of the newest item.
    pub(crate) fn end_abs(&self) -> u64 {
        self.dropped + self.items.len() as u64
    }

    pub(crate) fn len(&self) -> usize {
        self.items.len()
    }

    pub(crate) fn get_abs(&self, abs: u64) -> Option<&T> {
        let pos = abs.checked_sub(self.dropped)?;
        self.items.get(usize::try_from(pos).ok()?)
    }

    pub(crate) fn get_abs_mut(&mut self, abs: u64) -> Option<&mut T> {
        let pos = abs.checked_sub(self.dropped)?;
        self.items.get_mut(usize::try_from(pos).ok()?)
    }

    pub(crate) fn iter(&self) -> impl DoubleEndedIterator<Item = &T> + ExactSizeIterator {
        self.items.iter()
    }

    /// The absolute index of the item whose key is `key`, when keys grow with the index.
    pub(crate) fn find_sorted<K: Ord>(&self, key: &K, key_of: impl Fn(&T) -> K) -> Option<u64> {
        self.items
            .binary_search_by(|t| key_of(t).cmp(key))
            .ok()
            .map(|pos| self.dropped + pos as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drops_the_oldest_and_counts() {
        let mut ring = Ring::new(3);
        for i in 0..5 {
            assert_eq!(ring.push(i), i);
        }
        assert_eq!(ring.len(), 3);
        assert_eq!(ring.dropped(), 2);
        assert_eq!(ring.get_abs(1), None);
        assert_eq!(ring.get_abs(2), Some(&2));
        assert_eq!(ring.get_abs(4), Some(&4));
        assert_eq!(ring.get_abs(5), None);
        assert_eq!(ring.find_sorted(&3, |t| *t), Some(3));
        assert_eq!((ring.first_abs(), ring.end_abs()), (2, 5));
    }
}
