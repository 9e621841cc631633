//! `[connectors.slack]`: the Slack connector's settings.

use serde::Deserialize;

/// `[connectors.slack]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlackConfig {
    /// The API's base URL.
    #[serde(default)]
    pub base_url: Option<String>,
    /// Leave out every tool that writes (also set by `[connectors] read_only`).
    #[serde(default)]
    pub read_only: bool,
}
