//! Conditional requests: the last `ETag` and body of each GET URL, so the next GET sends
//! `If-None-Match` and a `304 Not Modified` (which GitHub does not count against the rate
//! limit) is answered from here. Bounded: the least recently used entry goes first.

//!
//! The cache is part of the GitHub connector's state and is only touched by its actor, so
//! it needs no lock.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// One cached answer.
#[derive(Debug, Clone)]
pub(crate) struct Cached {
    /// The `ETag` it came with.
    pub etag: String,
    /// Its body.
    pub body: Arc<[u8]>,
    /// Its `Link` header (pagination), if any.
    pub link: Option<String>,
}

#[derive(Debug, Default)]
struct Entries {
    map: HashMap<String, Cached>,
    /// Keys, least recently used first.
    order: VecDeque<String>,
}

/// A bounded map from request key (method, URL, `Accept`) to the last answer.
#[derive(Debug)]
pub(crate) struct EtagCache {
    capacity: usize,
    entries: Entries,
}

impl EtagCache {
    /// A cache of at most `capacity` answers (0: nothing is kept).
    pub(crate) fn new(capacity: usize) -> EtagCache {
        EtagCache {
            capacity,
            entries: Entries::default(),
        }
    }

    fn touch(order: &mut VecDeque<String>, key: &str) {
        if let Some(i) = order.iter().position(|k| k == key) {
            if let Some(k) = order.remove(i) {
                order.push_back(k);
            }
        }
    }

    /// The cached answer for `key`, marked as recently used.
    pub(crate) fn get(&mut self, key: &str) -> Option<Cached> {
        let entries = &mut self.entries;
        let found = entries.map.get(key).cloned()?;
        Self::touch(&mut entries.order, key);
        Some(found)
    }

    /// Keeps `value` for `key`, dropping the least recently used entry when full.
    pub(crate) fn put(&mut self, key: &str, value: Cached) {
        if self.capacity == 0 {
            return;
        }
        let entries = &mut self.entries;
        if entries.map.insert(key.to_owned(), value).is_some() {
            Self::touch(&mut entries.order, key);
            return;
        }
        entries.order.push_back(key.to_owned());
        while entries.order.len() > self.capacity {
            if let Some(old) = entries.order.pop_front() {
                entries.map.remove(&old);
            }
        }
    }

    /// How many answers are kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.map.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(tag: &str) -> Cached {
        Cached {
            etag: tag.to_owned(),
            body: Arc::from(tag.as_bytes()),
            link: None,
        }
    }

    #[test]
    fn the_least_recently_used_entry_is_dropped_first() {
        let mut cache = EtagCache::new(2);
        cache.put("a", entry("1"));
        cache.put("b", entry("2"));
        assert!(cache.get("a").is_some());
        cache.put("c", entry("3"));
        assert_eq!(cache.len(), 2);
        assert!(cache.get("b").is_none(), "b was used least recently");
        assert_eq!(cache.get("a").unwrap().etag, "1");
        assert_eq!(cache.get("c").unwrap().etag, "3");
    }

    #[test]
    fn a_new_answer_replaces_the_old_one_for_the_same_key() {
        let mut cache = EtagCache::new(2);
        cache.put("a", entry("1"));
        cache.put("a", entry("2"));
        assert_eq!(cache.len(), 1);
        assert_eq!(cache.get("a").unwrap().etag, "2");
    }

    #[test]
    fn capacity_zero_keeps_nothing() {
        let mut cache = EtagCache::new(0);
        cache.put("a", entry("1"));
        assert!(cache.get("a").is_none());
    }
}
