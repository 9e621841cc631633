//! `#channel` and `@user` names, resolved lazily: nothing is read at start-up (korotovsky's
//! start-up crawl of every user and channel met 429s, blocked `initialize`, and on large
//! workspaces tripped Slack's anti-scraping logout). A name is looked up when a call first
//! needs it, by paging `conversations.list` or `users.list` until it is found (at most
//! `lookup_max_pages` pages), and every name seen on the way is cached with a TTL, so the next
//! lookups are usually free.

use super::client::{next_cursor, Client, SlackError};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use toolyard::HandlerError;

/// The most entries one cache holds; past it, the cache starts over (names come back on
/// demand).
const MAX_ENTRIES: usize = 50_000;

/// Users looked up by `users.info` for one answer's author columns, at most.
const MAX_AUTHOR_LOOKUPS: usize = 10;

/// A map whose entries expire.
pub(crate) struct Cache<V> {
    ttl: Duration,
    map: Mutex<HashMap<String, (V, Instant)>>,
}

impl<V: Clone> Cache<V> {
    pub(crate) fn new(ttl: Duration) -> Self {
        Cache {
            ttl,
            map: Mutex::new(HashMap::new()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, (V, Instant)>> {
        self.map
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    pub(crate) fn get(&self, key: &str) -> Option<V> {
        let map = self.lock();
        let (v, at) = map.get(key)?;
        (at.elapsed() < self.ttl).then(|| v.clone())
    }

    pub(crate) fn put(&self, key: String, value: V) {
        let mut map = self.lock();
        if map.len() >= MAX_ENTRIES {
            map.clear();
        }
        map.insert(key, (value, Instant::now()));
    }
}

/// A user's names, for the author columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UserNames {
    pub(crate) name: String,
    pub(crate) real_name: String,
}

/// The caches.
pub(crate) struct Names {
    max_pages: u32,
    /// `general` → `C123`.
    channel_ids: Cache<String>,
    /// `C123` → `general`.
    channel_names: Cache<String>,
    /// `alice` (handle, or lower-cased display name) → `U123`.
    user_ids: Cache<String>,
    /// `U123` → names.
    users: Cache<UserNames>,
    /// `U123` → its DM's `D123`.
    dms: Cache<String>,
}

impl std::fmt::Debug for Names {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Names").finish_non_exhaustive()
    }
}

fn lookup_failed(e: &SlackError) -> HandlerError {
    HandlerError::failed(e.to_string())
}

/// Whether `s` looks like a Slack ID (`C0123ABC`, `U0123`, `D0123`, `G0123`, `W0123`).
pub(crate) fn looks_like_id(s: &str) -> bool {
    s.len() >= 2
        && s.len() <= 24
        && s.starts_with(|c: char| c.is_ascii_uppercase())
        && s.chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit())
}

impl Names {
    pub(crate) fn new(ttl: Duration, max_pages: u32) -> Names {
        Names {
            max_pages: max_pages.max(1),
            channel_ids: Cache::new(ttl),
            channel_names: Cache::new(ttl),
            user_ids: Cache::new(ttl),
            users: Cache::new(ttl),
            dms: Cache::new(ttl),
        }
    }

    /// Remembers the names in a `conversations.list` page.
    pub(crate) fn learn_channels(&self, channels: &[serde_json::Value]) {
        for c in channels {
            if let (Some(id), Some(name)) = (c["id"].as_str(), c["name"].as_str()) {
                self.channel_ids.put(name.to_owned(), id.to_owned());
                self.channel_names.put(id.to_owned(), name.to_owned());
            }
            if let (Some(id), Some(user)) = (c["id"].as_str(), c["user"].as_str()) {
                if c["is_im"] == true {
                    self.dms.put(user.to_owned(), id.to_owned());
                }
            }
        }
    }

    /// Remembers the names in a `users.list` page (or one `users.info` user).
    pub(crate) fn learn_users(&self, members: &[serde_json::Value]) {
        for u in members {
            let Some(id) = u["id"].as_str() else { continue };
            let name = u["name"].as_str().unwrap_or(id).to_owned();
            let real_name = u["real_name"]
                .as_str()
                .or_else(|| u["profile"]["real_name"].as_str())
                .unwrap_or("")
                .to_owned();
            self.user_ids.put(name.clone(), id.to_owned());
            if let Some(display) = u["profile"]["display_name"]
                .as_str()
                .filter(|d| !d.is_empty())
            {
                self.user_ids.put(display.to_lowercase(), id.to_owned());
            }
            self.users.put(id.to_owned(), UserNames { name, real_name });
        }
    }

    /// A user's names, if cached.
    pub(crate) fn user(&self, id: &str) -> Option<UserNames> {
        self.users.get(id)
    }

    /// The DM with a user, if cached.
    pub(crate) fn cached_dm(&self, user: &str) -> Option<String> {
        self.dms.get(user)
    }

    /// The ID `target` names: an ID as is, `#name` a channel, `@name` (or `@name_dm`) the DM
    /// with that user.
    pub(crate) async fn conversation(
        &self,
        client: &Client,
        target: &str,
    ) -> Result<String, HandlerError> {
        let target = target.trim();
        if let Some(name) = target.strip_prefix('#') {
            return self.channel_id(client, name).await;
        }
        if let Some(name) = target.strip_prefix('@') {
            // `@name_dm` is the anchor's spelling of the DM with `@name`.
            let user = match name.strip_suffix("_dm") {
                Some(short) => match self.user_id(client, short).await {
                    Ok(id) => id,
                    Err(e) => self.user_id(client, name).await.map_err(|_| e)?,
                },
                None => self.user_id(client, name).await?,
            };
            return self.dm_id(client, &user, target).await;
        }
        if looks_like_id(target) {
            return Ok(target.to_owned());
        }
        Err(HandlerError::invalid_arguments(format!(
            "channel_id `{target}` is neither an ID (C0123ABCD) nor a #channel or @user name"
        )))
    }

    /// `#name`'s ID, paging `conversations.list` until it is found.
    pub(crate) async fn channel_id(
        &self,
        client: &Client,
        name: &str,
    ) -> Result<String, HandlerError> {
        if let Some(id) = self.channel_ids.get(name) {
            return Ok(id);
        }
        let mut cursor: Option<String> = None;
        for _ in 0..self.max_pages {
            let mut params = vec![
                ("types", "public_channel,private_channel".to_owned()),
                ("exclude_archived", "true".to_owned()),
                ("limit", "200".to_owned()),
            ];
            if let Some(c) = &cursor {
                params.push(("cursor", c.clone()));
            }
            let page = client
                .read("conversations.list", &params)
                .await
                .map_err(|e| lookup_failed(&e))?;
            let channels = page["channels"].as_array().cloned().unwrap_or_default();
            self.learn_channels(&channels);
            if let Some(id) = self.channel_ids.get(name) {
                return Ok(id);
            }
            cursor = next_cursor(&page);
            if cursor.is_none() {
                return Err(HandlerError::failed(format!(
                    "no channel #{name} that this token can see (archived channels are looked up by ID only)"
                )));
            }
        }
        Err(HandlerError::failed(format!(
            "#{name} was not among the first {} pages of channels; give its ID (C…) instead",
            self.max_pages
        )))
    }

    /// `@name`'s user ID, paging `users.list` until it is found.
    pub(crate) async fn user_id(
        &self,
        client: &Client,
        name: &str,
    ) -> Result<String, HandlerError> {
        if looks_like_id(name) {
            return Ok(name.to_owned());
        }
        let found = |names: &Names| {
            names
                .user_ids
                .get(name)
                .or_else(|| names.user_ids.get(&name.to_lowercase()))
        };
        if let Some(id) = found(self) {
            return Ok(id);
        }
        let mut cursor: Option<String> = None;
        for _ in 0..self.max_pages {
            let mut params = vec![("limit", "200".to_owned())];
            if let Some(c) = &cursor {
                params.push(("cursor", c.clone()));
            }
            let page = client
                .read("users.list", &params)
                .await
                .map_err(|e| lookup_failed(&e))?;
            self.learn_users(page["members"].as_array().map_or(&[][..], Vec::as_slice));
            if let Some(id) = found(self) {
                return Ok(id);
            }
            cursor = next_cursor(&page);
            if cursor.is_none() {
                return Err(HandlerError::failed(format!(
                    "no user @{name} in this workspace"
                )));
            }
        }
        Err(HandlerError::failed(format!(
            "@{name} was not among the first {} pages of users; give the user's ID (U…) instead",
            self.max_pages
        )))
    }

    /// The DM with `user`, paging `conversations.list?types=im` until it is found.
    async fn dm_id(
        &self,
        client: &Client,
        user: &str,
        shown: &str,
    ) -> Result<String, HandlerError> {
        if let Some(id) = self.dms.get(user) {
            return Ok(id);
        }
        let mut cursor: Option<String> = None;
        for _ in 0..self.max_pages {
            let mut params = vec![("types", "im".to_owned()), ("limit", "200".to_owned())];
            if let Some(c) = &cursor {
                params.push(("cursor", c.clone()));
            }
            let page = client
                .read("conversations.list", &params)
                .await
                .map_err(|e| lookup_failed(&e))?;
            self.learn_channels(page["channels"].as_array().map_or(&[][..], Vec::as_slice));
            if let Some(id) = self.dms.get(user) {
                return Ok(id);
            }
            cursor = next_cursor(&page);
            if cursor.is_none() {
                break;
            }
        }
        Err(HandlerError::failed(format!(
            "this token has no direct-message conversation with {shown}"
        )))
    }

    /// `C123`'s name: cached, or `conversations.info`.
    pub(crate) async fn channel_name(
        &self,
        client: &Client,
        id: &str,
    ) -> Result<String, HandlerError> {
        if let Some(name) = self.channel_names.get(id) {
            return Ok(name);
        }
        let info = client
            .read("conversations.info", &[("channel", id.to_owned())])
            .await
            .map_err(|e| lookup_failed(&e))?;
        self.learn_channels(std::slice::from_ref(&info["channel"]));
        self.channel_names
            .get(id)
            .ok_or_else(|| HandlerError::failed(format!("channel {id} has no name (a DM?)")))
    }

    /// Looks up (`users.info`, a few at most) the authors in `ids` not yet cached; failures
    /// leave the ID in place of the name.
    pub(crate) async fn fill_users(&self, client: &Client, ids: impl IntoIterator<Item = String>) {
        let mut missing: Vec<String> = ids
            .into_iter()
            .filter(|id| looks_like_id(id) && self.users.get(id).is_none())
            .collect();
        missing.sort();
        missing.dedup();
        for id in missing.into_iter().take(MAX_AUTHOR_LOOKUPS) {
            match client.read("users.info", &[("user", id.clone())]).await {
                Ok(v) => self.learn_users(std::slice::from_ref(&v["user"])),
                Err(e) => {
                    tracing::debug!(error = %e, "slack: an author's name was not found");
                    if matches!(e, SlackError::Budget { .. }) {
                        return;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ids_are_told_from_names() {
        assert!(looks_like_id("C0123ABCD"));
        assert!(looks_like_id("U061F7AUR"));
        assert!(!looks_like_id("general"));
        assert!(!looks_like_id("#general"));
        assert!(!looks_like_id("C"));
    }

    #[test]
    fn cached_names_expire() {
        let c: Cache<String> = Cache::new(Duration::from_millis(30));
        c.put("general".into(), "C1".into());
        assert_eq!(c.get("general").as_deref(), Some("C1"));
        std::thread::sleep(Duration::from_millis(40));
        assert_eq!(c.get("general"), None);
    }

    #[test]
    fn pages_teach_channel_user_and_dm_names() {
        let n = Names::new(Duration::from_secs(60), 3);
        n.learn_channels(&[
            json!({"id": "C1", "name": "general"}),
            json!({"id": "D9", "is_im": true, "user": "U7"}),
        ]);
        n.learn_users(
            &[json!({"id": "U7", "name": "alice", "real_name": "Alice A",
            "profile": {"display_name": "Ally"}})],
        );
        assert_eq!(n.channel_ids.get("general").as_deref(), Some("C1"));
        assert_eq!(n.channel_names.get("C1").as_deref(), Some("general"));
        assert_eq!(n.user_ids.get("ally").as_deref(), Some("U7"));
        assert_eq!(n.dms.get("U7").as_deref(), Some("D9"));
        assert_eq!(n.user("U7").unwrap().real_name, "Alice A");
    }
}
