//! A map with a fixed capacity: the runtime's caches (handled keys, kept outcomes, stream lookups)
//! must not grow with the traffic. The oldest entry goes first; what went is counted.

use std::borrow::Borrow;
use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

pub(crate) struct BoundedMap<K, V> {
    map: HashMap<K, V>,
    order: VecDeque<K>,
    capacity: usize,
    evicted: u64,
}

impl<K: Hash + Eq + Clone, V> BoundedMap<K, V> {
    pub(crate) fn new(capacity: usize) -> Self {
        BoundedMap {
            map: HashMap::new(),
            order: VecDeque::new(),
            capacity: capacity.max(1),
            evicted: 0,
        }
    }

    pub(crate) fn get<Q: Hash + Eq + ?Sized>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
    {
        self.map.get(key)
    }

    pub(crate) fn get_mut<Q: Hash + Eq + ?Sized>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
    {
        self.map.get_mut(key)
    }

    pub(crate) fn contains_key<Q: Hash + Eq + ?Sized>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
    {
        self.map.contains_key(key)
    }

    /// Inserts or replaces; a new key may push the oldest one out.
    pub(crate) fn insert(&mut self, key: K, value: V) {
        if self.map.insert(key.clone(), value).is_none() {
            self.order.push_back(key);
            while self.order.len() > self.capacity {
                if let Some(old) = self.order.pop_front() {
                    self.map.remove(&old);
                    self.evicted += 1;
                }
            }
        }
    }

    pub(crate) fn remove<Q: Hash + Eq + ?Sized>(&mut self, key: &Q)
    where
        K: Borrow<Q>,
    {
        if self.map.remove(key).is_some() {
            self.order.retain(|k| k.borrow() != key);
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    /// How many entries were pushed out by newer ones.
    pub(crate) fn evicted(&self) -> u64 {
        self.evicted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_goes_first_and_is_counted() {
        let mut m = BoundedMap::new(2);
        m.insert("a", 1);
        m.insert("b", 2);
        m.insert("a", 10); // a replacement keeps the size
        assert_eq!(m.len(), 2);
        m.insert("c", 3);
        assert!(!m.contains_key(&"a"));
        assert_eq!(m.get(&"b"), Some(&2));
        assert_eq!(m.get(&"c"), Some(&3));
        assert_eq!(m.evicted(), 1);
        m.remove(&"b");
        assert_eq!(m.len(), 1);
    }
}
