//! The wall-clock time of a monotonic reading ([`Moment`]), for the direct spans' end times.
//!
//! Why: a traced request already reads the monotonic clock once at its end (its duration);
//! reading the wall clock too was one more `clock_gettime` per span (~25-35 ns on the VMs we
//! measure on, ~1% of a traced stdio call). Here each thread keeps an anchor, a pair of
//! readings of both clocks, and a monotonic reading becomes wall-clock time by its distance
//! from the anchor. The anchor is read again when it is [`REANCHOR`] old, so a step of the
//! wall clock (an administrator, an NTP step) shows within that time, and the drift of a
//! slewed wall clock (at most 500 ppm under Linux's NTP discipline) stays under 50 µs.

use std::cell::Cell;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use toolyard::Moment;

/// How old an anchor gets before it is read again.
const REANCHOR: Duration = Duration::from_millis(100);

thread_local! {
    /// This thread's anchor: a monotonic reading and the wall-clock time read with it, in
    /// nanoseconds since the Unix epoch.
    static ANCHOR: Cell<Option<(Moment, u64)>> = const { Cell::new(None) };
}

/// Nanoseconds since the Unix epoch at the monotonic reading `now`, a reading just taken.
pub(crate) fn unix_nanos_at(now: Moment) -> u64 {
    ANCHOR.with(|anchor| {
        if let Some((at, wall)) = anchor.get() {
            match now.checked_duration_since(at) {
                Some(since) if since < REANCHOR => return wall.saturating_add(nanos_of(since)),
                Some(_) => {}
                None => return before_anchor(now, at, wall),
            }
        }
        let (at, wall) = (Moment::now(), unix_nanos(SystemTime::now()));
        anchor.set(Some((at, wall)));
        before_anchor(now, at, wall)
    })
}

/// The wall-clock time of `now`, read before the anchor `(at, wall)` was: that much before
/// the anchor's.
fn before_anchor(now: Moment, at: Moment, wall: u64) -> u64 {
    wall.saturating_sub(nanos_of(at.saturating_duration_since(now)))
}

/// Nanoseconds since the Unix epoch, as OTLP has times.
pub(crate) fn unix_nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, nanos_of)
}

fn nanos_of(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wall_now() -> u64 {
        unix_nanos(SystemTime::now())
    }

    #[test]
    fn a_reading_becomes_the_wall_clock_time_it_was_taken_at() {
        for _ in 0..3 {
            let before = wall_now();
            let at = unix_nanos_at(Moment::now());
            let after = wall_now();
            // Within the readings around it, give or take the anchor's drift bound.
            let slack = 50_000;
            assert!(
                before - slack <= at && at <= after + slack,
                "{before} {at} {after}"
            );
        }
    }

    #[test]
    fn the_anchor_is_read_again_once_it_is_old() {
        let first = unix_nanos_at(Moment::now());
        let (anchored, _) = ANCHOR.with(Cell::get).expect("an anchor");
        std::thread::sleep(REANCHOR + Duration::from_millis(5));
        let later = unix_nanos_at(Moment::now());
        let (reanchored, _) = ANCHOR.with(Cell::get).expect("an anchor");
        assert!(reanchored > anchored);
        assert!(later >= first + nanos_of(REANCHOR));
    }

    #[test]
    fn a_reading_older_than_the_anchor_lies_before_it() {
        let old = Moment::now();
        std::thread::sleep(Duration::from_millis(2));
        // Anchors now, after `old`.
        ANCHOR.with(|a| a.set(None));
        let at_old = unix_nanos_at(old);
        let (_, anchor_wall) = ANCHOR.with(Cell::get).expect("an anchor");
        // Two milliseconds, give or take the counter's calibration.
        assert!(at_old + 1_900_000 <= anchor_wall, "{at_old} {anchor_wall}");
        assert_eq!(unix_nanos_at(old), at_old, "read against the same anchor");
    }
}
