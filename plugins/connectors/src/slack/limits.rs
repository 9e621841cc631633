//! Client-side budgets per Web API method: Slack limits each method by tier (Tier 1 about
//! 1 a minute, Tier 2 about 20, Tier 3 about 50, Tier 4 about 100; `chat.postMessage` about
//! 1 a second), and an app that exceeds them gets 429s for the whole workspace. A small token
//! bucket per method keeps this client inside them: a request waits for its token when the
//! wait is short, and is refused with the wait ("retry in N s") when it is not, before
//! anything is sent. `history_budget = "non_marketplace"` is the 2025 budget of
//! non-Marketplace apps: 1 request a minute and 15 messages a page for history and replies.
//!
//! The buckets are the Slack connector's state, owned by its actor under a supervisor: a
//! call takes its token through the actor and sleeps out any wait in its own task. Rebuilt
//! after a failure, the buckets start full again (at most one extra burst per method).

use std::collections::HashMap;
use std::time::{Duration, Instant};

/// A budget: `burst` requests at once, refilled at `per_sec`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Rate {
    pub(crate) per_sec: f64,
    pub(crate) burst: f64,
}

impl Rate {
    const fn per_minute(n: f64, burst: f64) -> Rate {
        Rate {
            per_sec: n / 60.0,
            burst,
        }
    }

    /// `"N/min"` or `"N/s"`, optionally followed by `burst B`.
    pub(crate) fn parse(text: &str) -> Result<Rate, String> {
        let bad = || {
            format!("`{text}` is not a rate: write \"N/min\" or \"N/s\", optionally followed by \"burst B\"")
        };
        let mut words = text.split_whitespace();
        let (n, unit) = words
            .next()
            .and_then(|w| w.split_once('/'))
            .ok_or_else(bad)?;
        let n: f64 = n.parse().map_err(|_| bad())?;
        let per_sec = match unit {
            "min" | "m" => n / 60.0,
            "s" | "sec" => n,
            _ => return Err(bad()),
        };
        let burst = match (words.next(), words.next(), words.next()) {
            (None, _, _) => 1.0,
            (Some("burst"), Some(b), None) => b.parse::<u32>().map_err(|_| bad())?.into(),
            _ => return Err(bad()),
        };
        if !(per_sec > 0.0 && per_sec.is_finite()) || burst < 1.0 {
            return Err(format!("`{text}`: the rate and the burst must be positive"));
        }
        Ok(Rate { per_sec, burst })
    }
}

/// Slack's published tier of each method this connector calls (bursts as korotovsky's
/// limiter uses them).
fn tier_of(method: &str) -> Rate {
    const TIER2: Rate = Rate::per_minute(20.0, 3.0);
    const TIER3: Rate = Rate::per_minute(50.0, 4.0);
    const TIER4: Rate = Rate::per_minute(100.0, 5.0);
    match method {
        "conversations.list" | "users.list" | "search.messages" | "reactions.remove" => TIER2,
        "conversations.history"
        | "conversations.replies"
        | "conversations.info"
        | "reactions.add" => TIER3,
        "chat.postMessage" => Rate::per_minute(60.0, 3.0),
        _ => TIER4,
    }
}

/// The budget for history and replies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HistoryBudget {
    /// Tier 3, about 50 a minute.
    Tier3,
    /// 1 a minute and 15 messages a page.
    NonMarketplace,
}

impl HistoryBudget {
    pub(crate) fn parse(text: &str) -> Result<HistoryBudget, String> {
        match text {
            "tier3" => Ok(HistoryBudget::Tier3),
            "non_marketplace" => Ok(HistoryBudget::NonMarketplace),
            other => Err(format!(
                "history_budget `{other}`: expected \"tier3\" or \"non_marketplace\""
            )),
        }
    }

    /// The most messages one history or replies page may ask for.
    pub(crate) fn page_cap(self) -> u32 {
        match self {
            HistoryBudget::Tier3 => 999,
            HistoryBudget::NonMarketplace => 15,
        }
    }
}

struct Bucket {
    rate: Rate,
    tokens: f64,
    at: Instant,
}

/// The buckets, one per method, made on first use.
pub(crate) struct Limiter {
    overrides: HashMap<String, Rate>,
    history: HistoryBudget,
    buckets: HashMap<String, Bucket>,
}

impl std::fmt::Debug for Limiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Limiter")
            .field("history", &self.history)
            .finish_non_exhaustive()
    }
}

impl Limiter {
    pub(crate) fn new(history: HistoryBudget, overrides: HashMap<String, Rate>) -> Limiter {
        Limiter {
            overrides,
            history,
            buckets: HashMap::new(),
        }
    }

    fn rate(&self, method: &str) -> Rate {
        if let Some(rate) = self.overrides.get(method) {
            return *rate;
        }
        match (self.history, method) {
            (HistoryBudget::NonMarketplace, "conversations.history" | "conversations.replies") => {
                Rate::per_minute(1.0, 1.0)
            }
            _ => tier_of(method),
        }
    }

    /// Takes a token for `method`: `Ok(wait)` is how long to sleep before sending (the token
    /// is reserved), `Err(wait)` says the wait is longer than `max_wait` (nothing reserved).
    pub(crate) fn acquire(
        &mut self,
        method: &str,
        max_wait: Duration,
    ) -> Result<Duration, Duration> {
        let now = Instant::now();
        let rate = self.rate(method);
        let bucket = self.buckets.entry(method.to_owned()).or_insert(Bucket {
            rate,
            tokens: rate.burst,
            at: now,
        });
        let elapsed = now.saturating_duration_since(bucket.at).as_secs_f64();
        bucket.tokens = (bucket.tokens + elapsed * bucket.rate.per_sec).min(bucket.rate.burst);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            return Ok(Duration::ZERO);
        }
        let wait = Duration::from_secs_f64((1.0 - bucket.tokens) / bucket.rate.per_sec);
        if wait > max_wait {
            return Err(wait);
        }
        // Reserved: the next caller waits behind this one.
        bucket.tokens -= 1.0;
        Ok(wait)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_per_minute_and_per_second_with_an_optional_burst() {
        assert_eq!(
            Rate::parse("60/min").unwrap(),
            Rate {
                per_sec: 1.0,
                burst: 1.0
            }
        );
        assert_eq!(
            Rate::parse("10/s burst 3").unwrap(),
            Rate {
                per_sec: 10.0,
                burst: 3.0
            }
        );
        for bad in ["", "10", "10/h", "0/s", "x/s", "1/s burst", "1/s burst 0"] {
            assert!(Rate::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_bucket_gives_its_burst_then_short_waits_then_refuses_long_ones() {
        let mut o = HashMap::new();
        o.insert("m".to_owned(), Rate::parse("10/s burst 2").unwrap());
        let mut l = Limiter::new(HistoryBudget::Tier3, o);
        let max = Duration::from_millis(150);
        assert_eq!(l.acquire("m", max), Ok(Duration::ZERO));
        assert_eq!(l.acquire("m", max), Ok(Duration::ZERO));
        let w = l.acquire("m", max).unwrap();
        assert!(
            w > Duration::from_millis(50) && w <= Duration::from_millis(100),
            "{w:?}"
        );
        // The third reserved its token: the fourth waits behind it, past the limit.
        let e = l.acquire("m", max).unwrap_err();
        assert!(e > Duration::from_millis(150), "{e:?}");
        // Another method has its own bucket.
        assert_eq!(l.acquire("users.info", max), Ok(Duration::ZERO));
    }

    #[test]
    fn the_non_marketplace_preset_allows_one_history_call_a_minute() {
        let mut l = Limiter::new(HistoryBudget::NonMarketplace, HashMap::new());
        let max = Duration::from_secs(5);
        assert_eq!(l.acquire("conversations.history", max), Ok(Duration::ZERO));
        let e = l.acquire("conversations.history", max).unwrap_err();
        assert!(e > Duration::from_secs(55), "{e:?}");
        assert_eq!(l.acquire("conversations.list", max), Ok(Duration::ZERO));
        assert_eq!(HistoryBudget::NonMarketplace.page_cap(), 15);
    }
}
