//! When a failed chat-completions request is worth repeating, and how long to wait first.
//! Rate limits (429) and server errors (5xx, 408) are transient; the server's `Retry-After`
//! (seconds or an HTTP date; OpenAI's `retry-after-ms` too) wins over our own backoff, and a
//! wait longer than the configured maximum is not waited for at all: the error goes back to
//! the caller with the server's number in it.

use reqwest::header::HeaderMap;
use std::time::{Duration, SystemTime};

/// True for the statuses a repeat may cure.
pub(crate) fn retryable(status: u16) -> bool {
    matches!(status, 408 | 409 | 429) || (500..=599).contains(&status)
}

/// The wait the server asked for, if it did.
pub(crate) fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let text = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    if let Some(ms) = text("retry-after-ms").and_then(|v| v.parse::<f64>().ok()) {
        if let Ok(d) = Duration::try_from_secs_f64(ms / 1000.0) {
            return Some(d);
        }
    }
    let value = text("retry-after")?;
    if let Ok(secs) = value.parse::<f64>() {
        // Negative, NaN or beyond `Duration`: not a wait we can honour.
        return Duration::try_from_secs_f64(secs).ok();
    }
    let at = httpdate::parse_http_date(value).ok()?;
    Some(
        at.duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
}

/// Exponential backoff for attempt `n` (0-based), capped, with up to a quarter of jitter so
/// clients that failed together do not return together.
pub(crate) fn backoff(initial: Duration, max: Duration, n: u32) -> Duration {
    let base = initial.saturating_mul(1u32 << n.min(16)).min(max);
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let jitter = (base / 4000) * (nanos % 1000);
    base.saturating_add(jitter)
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn retry_after_is_read_as_seconds_milliseconds_or_a_date() {
        let mut h = HeaderMap::new();
        h.insert("retry-after", HeaderValue::from_static("2"));
        assert_eq!(retry_after(&h), Some(Duration::from_secs(2)));
        h.insert("retry-after-ms", HeaderValue::from_static("150"));
        assert_eq!(retry_after(&h), Some(Duration::from_millis(150)));
        let mut h = HeaderMap::new();
        h.insert(
            "retry-after",
            HeaderValue::from_static("Wed, 21 Oct 2015 07:28:00 GMT"),
        );
        assert_eq!(retry_after(&h), Some(Duration::ZERO));
        h.insert("retry-after", HeaderValue::from_static("soon"));
        assert_eq!(retry_after(&h), None);
        h.insert("retry-after", HeaderValue::from_static("1e300"));
        assert_eq!(retry_after(&h), None);
        h.insert("retry-after", HeaderValue::from_static("-3"));
        assert_eq!(retry_after(&h), None);
    }

    #[test]
    fn backoff_grows_and_stays_under_its_cap() {
        let a = backoff(Duration::from_millis(100), Duration::from_secs(1), 0);
        let c = backoff(Duration::from_millis(100), Duration::from_secs(1), 10);
        assert!(a >= Duration::from_millis(100) && a <= Duration::from_millis(125));
        assert!(c >= Duration::from_secs(1) && c <= Duration::from_millis(1250));
        assert!(backoff(Duration::MAX, Duration::MAX, 3) == Duration::MAX);
    }
}
