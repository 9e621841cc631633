//! `[connectors.gdrive]`: the Google Drive connector's settings.
//!
//! Exactly one kind of credential: a user's OAuth refresh token (with the OAuth client's id
//! and secret), a service account's JSON key file (optionally impersonating `subject` by
//! domain-wide delegation), or a static access token. Every credential is a
//! [`SecretSource`] (`"${VAR}"` or `"file:/path"`), so this struct prints no secret.

use crate::SecretSource;
use serde::Deserialize;

/// `[connectors.gdrive]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GdriveConfig {
    /// The API's base URL; default `https://www.googleapis.com`.
    #[serde(default)]
    pub base_url: Option<String>,
    /// The OAuth token endpoint; default `https://oauth2.googleapis.com/token`.
    #[serde(default)]
    pub token_url: Option<String>,
    /// Leave out every tool that writes (also set by `[connectors] read_only`). Every tool
    /// of this connector reads today, so this changes nothing yet.
    #[serde(default)]
    pub read_only: bool,
    /// A static OAuth access token (it expires: for short runs and tests).
    #[serde(default)]
    pub access_token: Option<SecretSource>,
    /// A user's OAuth refresh token (needs `client_id` and `client_secret`).
    #[serde(default)]
    pub refresh_token: Option<SecretSource>,
    /// The OAuth client's id (not a secret).
    #[serde(default)]
    pub client_id: Option<String>,
    /// The OAuth client's secret.
    #[serde(default)]
    pub client_secret: Option<SecretSource>,
    /// A service account's JSON key (`"file:/path/key.json"`).
    #[serde(default)]
    pub service_account_key: Option<SecretSource>,
    /// The user a service account acts as (domain-wide delegation).
    #[serde(default)]
    pub subject: Option<String>,
    /// The longest one request may take, in milliseconds; default 30,000.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// A `Retry-After` at most this long (ms) is waited out; default 5,000.
    #[serde(default = "default_max_retry_wait_ms")]
    pub max_retry_wait_ms: u64,
    /// The most bytes read from Drive in one request (an export, a download, a listing);
    /// default 10 MiB.
    #[serde(default = "default_max_bytes")]
    pub max_bytes: u64,
    /// Results per page of `search_files` and `list_recent_files` when the caller does not
    /// say (1-100); default 20.
    #[serde(default = "default_page_size")]
    pub page_size: u32,
    /// How often `changes.list` is polled for subscribed `gdrive:///` resources, in
    /// milliseconds; 0 turns polling off; default 60,000.
    #[serde(default = "default_poll_interval_ms")]
    pub poll_interval_ms: u64,
}

impl GdriveConfig {
    /// Settings with every default and no credential (set one before use).
    pub fn new() -> Self {
        GdriveConfig {
            base_url: None,
            token_url: None,
            read_only: false,
            access_token: None,
            refresh_token: None,
            client_id: None,
            client_secret: None,
            service_account_key: None,
            subject: None,
            timeout_ms: default_timeout_ms(),
            max_retry_wait_ms: default_max_retry_wait_ms(),
            max_bytes: default_max_bytes(),
            page_size: default_page_size(),
            poll_interval_ms: default_poll_interval_ms(),
        }
    }
}

impl Default for GdriveConfig {
    fn default() -> Self {
        GdriveConfig::new()
    }
}

fn default_timeout_ms() -> u64 {
    30_000
}
fn default_max_retry_wait_ms() -> u64 {
    5_000
}
fn default_max_bytes() -> u64 {
    10 * 1024 * 1024
}
fn default_page_size() -> u32 {
    20
}
fn default_poll_interval_ms() -> u64 {
    60_000
}
