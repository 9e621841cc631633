//! `[connectors.slack]`: the Slack connector's settings. The token is a reference
//! (`"${SLACK_BOT_TOKEN}"` or `"file:/path"`), never the value; posting and reactions are off
//! unless channels are named; link unfurling is off unless every link's host is listed.

use crate::SecretSource;
use serde::Deserialize;
use std::collections::BTreeMap;

/// `[connectors.slack]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlackConfig {
    /// The token: a bot (`xoxb-`) or user (`xoxp-`) token, as `"${VAR}"` or `"file:/path"`.
    /// Sent as `Authorization: Bearer`; never printed.
    pub token: SecretSource,
    /// The Web API's base URL; default `https://slack.com/api` (GovSlack:
    /// `https://slack-gov.com/api`).
    #[serde(default)]
    pub base_url: Option<String>,
    /// Leave out every tool that writes (also set by `[connectors] read_only`).
    #[serde(default)]
    pub read_only: bool,
    /// The workspace's name (`acme` for acme.slack.com): lists the `slack://acme/channels`
    /// and `slack://acme/users` resources. Without it only the templates are listed, and any
    /// workspace name reads this token's workspace.
    #[serde(default)]
    pub workspace: Option<String>,
    /// Where `conversations_add_message` may post: IDs (`C0123`, `D0456`), `#channel` or
    /// `@user` (their DM) names, or `"*"` for anywhere. Empty or absent: the tool is not
    /// offered.
    #[serde(default)]
    pub post_channels: Vec<String>,
    /// Where `reactions_add` and `reactions_remove` may react, as `post_channels`. Empty or
    /// absent: the tools are not offered.
    #[serde(default)]
    pub react_channels: Vec<String>,
    /// Hosts whose links Slack may unfurl in posted messages (`example.com` also covers its
    /// subdomains). A message is posted with `unfurl_links` and `unfurl_media` false unless
    /// every link in it is on this list.
    #[serde(default)]
    pub unfurl_hosts: Vec<String>,
    /// The budget of `conversations.history` and `conversations.replies`: `"tier3"` (about
    /// 50 a minute: internal, Marketplace and older apps; the default) or
    /// `"non_marketplace"` (1 a minute and 15 messages a page: commercially distributed
    /// non-Marketplace apps created since 2025-05-29).
    #[serde(default = "default_history_budget")]
    pub history_budget: String,
    /// Per-method overrides of the client-side budgets, by Web API method name, as
    /// `"N/min"` or `"N/s"`, optionally with a burst: `rate_limits = { "users.list" =
    /// "20/min burst 3" }`.
    #[serde(default)]
    pub rate_limits: BTreeMap<String, String>,
    /// The longest one request may take, in milliseconds; default 10,000.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// A wait (Slack's `Retry-After`, or this client's own method budget) at most this long
    /// is waited out; a longer one is reported as a tool error. Milliseconds; default 5,000.
    #[serde(default = "default_max_retry_wait_ms")]
    pub max_retry_wait_ms: u64,
    /// The most bytes of one answer read; default 8 MiB.
    #[serde(default = "default_max_response_bytes")]
    pub max_response_bytes: usize,
    /// How long a `#channel` or `@user` name found stays cached, in seconds; default 900.
    #[serde(default = "default_name_cache_ttl_secs")]
    pub name_cache_ttl_secs: u64,
    /// How many pages (of 200) a name lookup or `users_search` reads at most; default 25.
    #[serde(default = "default_lookup_max_pages")]
    pub lookup_max_pages: u32,
    /// The most rows the `slack://` directory resources hold; default 5,000.
    #[serde(default = "default_directory_max_rows")]
    pub directory_max_rows: usize,
}

impl SlackConfig {
    /// Settings with this token and every default (read tools only).
    pub fn new(token: SecretSource) -> Self {
        SlackConfig {
            token,
            base_url: None,
            read_only: false,
            workspace: None,
            post_channels: Vec::new(),
            react_channels: Vec::new(),
            unfurl_hosts: Vec::new(),
            history_budget: default_history_budget(),
            rate_limits: BTreeMap::new(),
            timeout_ms: default_timeout_ms(),
            max_retry_wait_ms: default_max_retry_wait_ms(),
            max_response_bytes: default_max_response_bytes(),
            name_cache_ttl_secs: default_name_cache_ttl_secs(),
            lookup_max_pages: default_lookup_max_pages(),
            directory_max_rows: default_directory_max_rows(),
        }
    }
}

fn default_history_budget() -> String {
    "tier3".to_owned()
}
fn default_timeout_ms() -> u64 {
    10_000
}
fn default_max_retry_wait_ms() -> u64 {
    5_000
}
fn default_max_response_bytes() -> usize {
    8 * 1024 * 1024
}
fn default_name_cache_ttl_secs() -> u64 {
    900
}
fn default_lookup_max_pages() -> u32 {
    25
}
fn default_directory_max_rows() -> usize {
    5_000
}
