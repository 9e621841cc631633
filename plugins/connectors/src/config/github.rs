//! `[connectors.github]`: the GitHub connector's settings.

use serde::Deserialize;

/// `[connectors.github]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GithubConfig {
    /// The API's base URL.
    #[serde(default)]
    pub base_url: Option<String>,
    /// Leave out every tool that writes (also set by `[connectors] read_only`).
    #[serde(default)]
    pub read_only: bool,
}
