//! [`Moment`]: when a request was accepted, read from a clock cheap enough to read twice per
//! request.
//!
//! Why: with a layer installed every request reads the monotonic clock at its acceptance and
//! again at its end (its duration). Through the vDSO that is ~24 ns a read on the VMs we
//! measure on, ~2.5% of a served stdio call's CPU, most of what recording durations costs
//! (`perf`, benches/README.md, stop 44). `quanta` reads the CPU's time-stamp counter where it
//! is invariant and the kernel's clock source (~9 ns), and falls back to the monotonic clock
//! where it is not.

use std::time::Duration;

/// A reading of a monotonic clock (see the module documentation). Like
/// [`std::time::Instant`], only differences of two readings mean anything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Moment(quanta::Instant);

impl Moment {
    /// Now.
    pub fn now() -> Moment {
        Moment(quanta::Instant::now())
    }

    /// The time from this reading to now.
    pub fn elapsed(&self) -> Duration {
        Moment::now().saturating_duration_since(*self)
    }

    /// The time from `earlier` to this reading, zero if `earlier` is later.
    pub fn saturating_duration_since(&self, earlier: Moment) -> Duration {
        self.0.saturating_duration_since(earlier.0)
    }

    /// The time from `earlier` to this reading, `None` if `earlier` is later.
    pub fn checked_duration_since(&self, earlier: Moment) -> Option<Duration> {
        self.0.checked_duration_since(earlier.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_moment_measures_what_the_standard_clock_measures() {
        use std::time::Instant;
        // The standard clock read around each reading bounds what the moment may measure,
        // however the thread is scheduled in between.
        let before = Instant::now();
        let m = Moment::now();
        let after = Instant::now();
        std::thread::sleep(Duration::from_millis(20));
        let (end_before, measured, end_after) = (Instant::now(), m.elapsed(), Instant::now());
        let (least, most) = (end_before - after, end_after - before);
        // Give or take 1% for the calibration of the counter's frequency.
        assert!(
            measured >= least.mul_f64(0.99) && measured <= most.mul_f64(1.01),
            "{least:?} <= {measured:?} <= {most:?}"
        );
        assert!(measured >= Duration::from_millis(19), "{measured:?}");
    }

    #[test]
    fn an_earlier_reading_is_no_duration_since_a_later_one() {
        let a = Moment::now();
        std::thread::sleep(Duration::from_millis(1));
        let b = Moment::now();
        assert!(b > a);
        assert_eq!(a.saturating_duration_since(b), Duration::ZERO);
        assert_eq!(a.checked_duration_since(b), None);
        assert!(b.checked_duration_since(a) >= Some(Duration::from_millis(1)));
    }
}
