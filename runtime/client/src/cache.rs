//! The client's response cache: modern results that carry `ttlMs` are kept that long, keyed
//! by method and params, and dropped early when the server says what they describe changed
//! (`list_changed`, `resources/updated`).
//!
//! Both `cacheScope` values may be kept: this cache belongs to one client, which is the
//! "requesting client" a `private` result is for. A shared cache in front of several users
//! would have to skip `private` entries; this is not one.

use serde_json::value::RawValue;
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The biggest number of entries kept; beyond it, expired entries are swept and, if still
/// full, nothing new is cached.
const MAX_ENTRIES: usize = 1024;

#[derive(Default)]
pub(crate) struct ResponseCache {
    entries: HashMap<(String, String), (Instant, Box<RawValue>)>,
}

/// Methods whose results may be cached.
pub(crate) fn cacheable(method: &str) -> bool {
    matches!(
        method,
        "tools/list"
            | "resources/list"
            | "resources/templates/list"
            | "prompts/list"
            | "resources/read"
            | "server/discover"
    )
}

impl ResponseCache {
    pub(crate) fn get(&mut self, method: &str, key: &str) -> Option<Box<RawValue>> {
        let k = (method.to_owned(), key.to_owned());
        match self.entries.get(&k) {
            Some((until, v)) if *until > Instant::now() => Some(v.clone()),
            Some(_) => {
                self.entries.remove(&k);
                None
            }
            None => None,
        }
    }

    pub(crate) fn put(&mut self, method: &str, key: String, ttl: Duration, value: Box<RawValue>) {
        if ttl.is_zero() {
            return;
        }
        if self.entries.len() >= MAX_ENTRIES {
            let now = Instant::now();
            self.entries.retain(|_, (until, _)| *until > now);
            if self.entries.len() >= MAX_ENTRIES {
                return;
            }
        }
        self.entries
            .insert((method.to_owned(), key), (Instant::now() + ttl, value));
    }

    /// Drops what a change notification makes stale.
    pub(crate) fn invalidate(&mut self, notification: &str, params: &serde_json::Value) {
        match notification {
            "notifications/tools/list_changed" => self.drop_method("tools/list"),
            "notifications/prompts/list_changed" => self.drop_method("prompts/list"),
            "notifications/resources/list_changed" => {
                self.drop_method("resources/list");
                self.drop_method("resources/templates/list");
            }
            "notifications/resources/updated" => {
                let uri = params
                    .get("uri")
                    .and_then(|u| u.as_str())
                    .unwrap_or_default();
                self.entries
                    .retain(|(m, key), _| !(m == "resources/read" && key.contains(uri)));
            }
            _ => {}
        }
    }

    fn drop_method(&mut self, method: &str) {
        self.entries.retain(|(m, _), _| m != method);
    }

    pub(crate) fn clear(&mut self) {
        self.entries.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_owned()).unwrap()
    }

    #[test]
    fn entries_expire_after_their_ttl() {
        let mut c = ResponseCache::default();
        c.put(
            "tools/list",
            "{}".into(),
            Duration::from_millis(30),
            raw("{\"tools\":[]}"),
        );
        assert!(c.get("tools/list", "{}").is_some());
        std::thread::sleep(Duration::from_millis(40));
        assert!(c.get("tools/list", "{}").is_none());
    }

    #[test]
    fn list_changed_drops_only_that_listing() {
        let mut c = ResponseCache::default();
        c.put("tools/list", "{}".into(), Duration::from_secs(60), raw("1"));
        c.put(
            "prompts/list",
            "{}".into(),
            Duration::from_secs(60),
            raw("2"),
        );
        c.invalidate("notifications/tools/list_changed", &serde_json::Value::Null);
        assert!(c.get("tools/list", "{}").is_none());
        assert!(c.get("prompts/list", "{}").is_some());
    }

    #[test]
    fn resource_update_drops_that_resource() {
        let mut c = ResponseCache::default();
        c.put(
            "resources/read",
            r#"{"uri":"demo://a"}"#.into(),
            Duration::from_secs(60),
            raw("1"),
        );
        c.put(
            "resources/read",
            r#"{"uri":"demo://b"}"#.into(),
            Duration::from_secs(60),
            raw("2"),
        );
        c.invalidate(
            "notifications/resources/updated",
            &serde_json::json!({"uri": "demo://a"}),
        );
        assert!(c.get("resources/read", r#"{"uri":"demo://a"}"#).is_none());
        assert!(c.get("resources/read", r#"{"uri":"demo://b"}"#).is_some());
    }

    #[test]
    fn zero_ttl_is_not_cached() {
        let mut c = ResponseCache::default();
        c.put("tools/list", "{}".into(), Duration::ZERO, raw("1"));
        assert!(c.get("tools/list", "{}").is_none());
    }
}
