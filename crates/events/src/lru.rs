//! A small least-recently-used map with string keys, bounding the correlator's memory
//! (client-go uses `k8s.io/utils/lru`, 4096 entries by default).
//!
//! Entries carry a use stamp; a `BTreeMap` from stamp to key finds the oldest in
//! `O(log n)`. Reading with [`Lru::get`] counts as a use, as upstream's `Get` does.

use std::collections::{BTreeMap, HashMap};

#[derive(Debug)]
pub(crate) struct Lru<V> {
    capacity: usize,
    /// foldhash (seeded per process) rather than std's slower SipHash: these keys are hashed
    /// for every event recorded.
    entries: HashMap<String, (V, u64), foldhash::fast::RandomState>,
    by_age: BTreeMap<u64, String>,
    tick: u64,
}

impl<V> Lru<V> {
    /// A cache holding at most `capacity` entries (at least one).
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            entries: HashMap::default(),
            by_age: BTreeMap::new(),
            tick: 0,
        }
    }

    fn next_tick(&mut self) -> u64 {
        self.tick += 1;
        self.tick
    }

    /// The value under `key`, marking it most recently used.
    pub(crate) fn get(&mut self, key: &str) -> Option<&mut V> {
        let tick = self.next_tick();
        let (_, stamp) = self.entries.get_mut(key)?;
        let old = std::mem::replace(stamp, tick);
        if let Some(k) = self.by_age.remove(&old) {
            self.by_age.insert(tick, k);
        }
        self.entries.get_mut(key).map(|(v, _)| v)
    }

    /// Stores `value` under `key` as the most recently used entry, evicting the least
    /// recently used one when the cache is full.
    pub(crate) fn insert(&mut self, key: String, value: V) {
        let tick = self.next_tick();
        if let Some((_, old)) = self.entries.insert(key.clone(), (value, tick)) {
            self.by_age.remove(&old);
        }
        self.by_age.insert(tick, key);
        while self.entries.len() > self.capacity {
            let Some((_, oldest)) = self.by_age.pop_first() else {
                break;
            };
            self.entries.remove(&oldest);
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_the_least_recently_used_entry() {
        let mut lru = Lru::new(2);
        lru.insert("a".into(), 1);
        lru.insert("b".into(), 2);
        // Reading "a" makes "b" the oldest.
        assert_eq!(lru.get("a").copied(), Some(1));
        lru.insert("c".into(), 3);
        assert_eq!(lru.len(), 2);
        assert!(lru.get("b").is_none());
        assert_eq!(lru.get("a").copied(), Some(1));
        assert_eq!(lru.get("c").copied(), Some(3));
    }

    #[test]
    fn replacing_a_value_refreshes_it() {
        let mut lru = Lru::new(2);
        lru.insert("a".into(), 1);
        lru.insert("b".into(), 2);
        lru.insert("a".into(), 10);
        lru.insert("c".into(), 3);
        assert!(lru.get("b").is_none());
        assert_eq!(lru.get("a").copied(), Some(10));
        if let Some(v) = lru.get("c") {
            *v = 30;
        }
        assert_eq!(lru.get("c").copied(), Some(30));
    }

    #[test]
    fn zero_capacity_keeps_one_entry() {
        let mut lru = Lru::new(0);
        lru.insert("a".into(), 1);
        lru.insert("b".into(), 2);
        assert_eq!(lru.len(), 1);
        assert_eq!(lru.get("b").copied(), Some(2));
    }
}
