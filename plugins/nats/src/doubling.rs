//! Counting what is dropped under a flood, and saying so in the log at each doubling.
//!
//! Anything on the bus may send junk as fast as the broker carries it: a warning per message
//! would turn a flood on the bus into a flood in the log (and its disk). A [`Doubling`]
//! counter says when to log: the 1st, 2nd, 4th, 8th... time, each line carrying the count,
//! so the first one is never missed and a million take twenty lines.

use std::sync::atomic::{AtomicU64, Ordering};

/// A count of something dropped, logged at each doubling.
#[derive(Debug, Default)]
pub(crate) struct Doubling(AtomicU64);

impl Doubling {
    /// Counts one more; the count when it is a power of two (log it then), else `None`.
    pub(crate) fn count(&self) -> Option<u64> {
        let n = self.0.fetch_add(1, Ordering::Relaxed) + 1;
        n.is_power_of_two().then_some(n)
    }

    /// The count so far.
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_count_is_told_at_each_doubling_only() {
        let d = Doubling::default();
        let told: Vec<u64> = (0..1000).filter_map(|_| d.count()).collect();
        assert_eq!(told, vec![1, 2, 4, 8, 16, 32, 64, 128, 256, 512]);
        assert_eq!(d.get(), 1000);
    }
}
