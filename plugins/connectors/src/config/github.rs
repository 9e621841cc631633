//! `[connectors.github]`: the GitHub connector's settings.
//!
//! Credentials are either a token (`token = "${GITHUB_TOKEN}"`, a PAT or any bearer token)
//! or a GitHub App (`app_id`, `installation_id`, `private_key = "file:/path/key.pem"`), never
//! both; each secret is a [`SecretSource`], so the file names where the value lives and
//! printing the config prints no value.

use crate::SecretSource;
use serde::Deserialize;

/// `[connectors.github]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GithubConfig {
    /// The REST API's base URL: `https://api.github.com` (default) or, for GitHub
    /// Enterprise Server, `https://HOST/api/v3`.
    #[serde(default)]
    pub base_url: Option<String>,
    /// The GraphQL endpoint; default `{base_url}/graphql`, or `https://HOST/api/graphql`
    /// when `base_url` ends in `/api/v3`.
    #[serde(default)]
    pub graphql_url: Option<String>,
    /// Leave out every tool that writes (also set by `[connectors] read_only`).
    #[serde(default)]
    pub read_only: bool,
    /// A personal access token (or any bearer token): `"${GITHUB_TOKEN}"` or `"file:..."`.
    #[serde(default)]
    pub token: Option<SecretSource>,
    /// A GitHub App's id (with `installation_id` and `private_key`, instead of `token`).
    #[serde(default)]
    pub app_id: Option<u64>,
    /// The App installation whose token the connector uses.
    #[serde(default)]
    pub installation_id: Option<u64>,
    /// The App's RSA private key in PEM, usually `"file:/path/key.pem"`.
    #[serde(default)]
    pub private_key: Option<SecretSource>,
    /// Which repositories the tools may touch, as `owner/name` globs (`org/*`, `me/one`);
    /// an entry starting with `!` denies (`!org/secret`), and a deny wins over any allow.
    /// Empty: every repository the credentials reach.
    #[serde(default)]
    pub repos: Vec<String>,
    /// The longest one request may take, in milliseconds; default 15,000.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// A rate limit whose `Retry-After` is at most this long (ms) is waited out; default
    /// 5,000. Longer ones are reported to the caller.
    #[serde(default = "default_max_retry_wait_ms")]
    pub max_retry_wait_ms: u64,
    /// The most bytes of one response read; default 8 MiB.
    #[serde(default = "default_max_body_bytes")]
    pub max_body_bytes: usize,
    /// How many GET responses are kept for conditional requests (`If-None-Match`);
    /// default 256, 0 turns the cache off.
    #[serde(default = "default_etag_cache_entries")]
    pub etag_cache_entries: usize,
}

impl GithubConfig {
    /// Settings with a token from `token` and every default.
    pub fn with_token(token: SecretSource) -> Self {
        GithubConfig {
            base_url: None,
            graphql_url: None,
            read_only: false,
            token: Some(token),
            app_id: None,
            installation_id: None,
            private_key: None,
            repos: Vec::new(),
            timeout_ms: default_timeout_ms(),
            max_retry_wait_ms: default_max_retry_wait_ms(),
            max_body_bytes: default_max_body_bytes(),
            etag_cache_entries: default_etag_cache_entries(),
        }
    }
}

fn default_timeout_ms() -> u64 {
    15_000
}
fn default_max_retry_wait_ms() -> u64 {
    5_000
}
fn default_max_body_bytes() -> usize {
    8 * 1024 * 1024
}
fn default_etag_cache_entries() -> usize {
    256
}
