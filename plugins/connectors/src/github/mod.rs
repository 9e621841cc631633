//! The GitHub connector: a name-compatible subset of github-mcp-server's default toolsets
//! (context, repos, issues, pull requests, users: the same tool and argument names,
//! `method` multiplexing in `issue_read`/`pull_request_read`, the `fields` projection) and
//! `repo://` resources, over GitHub's REST API and, for `list_issues`, GraphQL.
//!
//! Beyond the anchor:
//!
//! - a repository allow/deny list (`repos = ["org/*", "!org/secret"]`) checked before any
//!   request and applied to search results (`repos`);
//! - untrusted text sanitised on the way to the model (`sanitize`);
//! - conditional requests with a bounded ETag cache (`cache`), the primary rate limit
//!   respected (no request sent until `x-ratelimit-reset` once it is used up), secondary
//!   limits' `Retry-After` waited out or reported (`client`);
//! - a PAT or a GitHub App installation token, refreshed before it expires (`auth`);
//! - read-only mode leaves every writing tool out.

mod auth;
mod cache;
mod client;
mod contents;
mod repos;
mod resources;
mod sanitize;
mod shape;
mod tools;

use crate::http::{Api, ApiSettings};
use crate::{ConnectorError, GithubConfig};
use auth::{App, Credentials};
use client::Client;
use repos::RepoFilter;
use std::sync::Arc;
use std::time::Duration;
use toolyard::{Controller, DefinitionError, TemplateDef, ToolDef};

/// GitHub's public API.
const DEFAULT_BASE_URL: &str = "https://api.github.com";

/// What the tools share.
#[derive(Debug)]
pub(crate) struct Inner {
    client: Client,
    repos: RepoFilter,
}

/// The GitHub connector.
#[derive(Debug, Clone)]
pub struct Github {
    inner: Arc<Inner>,
    read_only: bool,
}

fn bad(message: impl Into<String>) -> ConnectorError {
    ConnectorError::Config {
        connector: "github",
        message: message.into(),
    }
}

/// The GraphQL endpoint for a REST base URL: GitHub Enterprise Server serves REST at
/// `/api/v3` and GraphQL at `/api/graphql`; github.com (and a fake) at `{base}/graphql`.
fn graphql_url(base: &str) -> String {
    match base.strip_suffix("/api/v3") {
        Some(host) => format!("{host}/api/graphql"),
        None => format!("{base}/graphql"),
    }
}

impl Github {
    /// A connector with the settings of `config`: credentials resolved, the repository
    /// list parsed, every tool definition checked.
    pub fn new(config: &GithubConfig) -> Result<Self, ConnectorError> {
        let base = config
            .base_url
            .as_deref()
            .unwrap_or(DEFAULT_BASE_URL)
            .trim_end_matches('/')
            .to_owned();
        let parsed = reqwest::Url::parse(&base)
            .map_err(|_| bad("`base_url` is not a URL (e.g. https://HOST/api/v3)"))?;
        if !matches!(parsed.scheme(), "http" | "https") {
            return Err(bad("`base_url` must be http or https"));
        }
        let graphql = config
            .graphql_url
            .clone()
            .unwrap_or_else(|| graphql_url(&base));
        let credentials = match (
            &config.token,
            config.app_id,
            config.installation_id,
            &config.private_key,
        ) {
            (Some(token), None, None, None) => {
                Credentials::Token(token.resolve().map_err(|e| bad(format!("`token`: {e}")))?)
            }
            (None, Some(app_id), Some(installation_id), Some(key)) => {
                let pem = key.resolve().map_err(|e| bad(format!("`private_key`: {e}")))?;
                Credentials::App(App::new(app_id, installation_id, &pem).map_err(bad)?)
            }
            (Some(_), _, _, _) => {
                return Err(bad(
                    "give either `token` or a GitHub App (`app_id`, `installation_id`, `private_key`), not both",
                ))
            }
            (None, None, None, None) => {
                return Err(bad(
                    "credentials are needed: `token = \"${GITHUB_TOKEN}\"`, or `app_id`, `installation_id` and `private_key = \"file:/path/key.pem\"`",
                ))
            }
            _ => {
                return Err(bad(
                    "a GitHub App needs all of `app_id`, `installation_id` and `private_key`",
                ))
            }
        };
        let repos = RepoFilter::parse(&config.repos).map_err(|e| bad(format!("`repos`: {e}")))?;
        let api = Api::new(ApiSettings {
            service: "GitHub",
            timeout: Duration::from_millis(config.timeout_ms.max(1)),
            max_body: config.max_body_bytes.max(1024),
            max_retry_wait: Duration::from_millis(config.max_retry_wait_ms),
        })?;
        let github = Github {
            inner: Arc::new(Inner {
                client: Client::new(api, base, graphql, credentials, config.etag_cache_entries),
                repos,
            }),
            read_only: config.read_only,
        };
        github.definitions()?;
        resources::templates(&github.inner)?;
        Ok(github)
    }

    fn definitions(&self) -> Result<Vec<ToolDef>, DefinitionError> {
        tools::definitions(&self.inner, self.read_only)
    }

    /// How many times the connector's state actor (its installation token, ETag cache and
    /// rate-limit state) was rebuilt after a failure.
    pub fn state_restarts(&self) -> u64 {
        self.inner.client.state().restarts()
    }

    /// Publishes the restarts of the connector's state actor to `lifecycle`
    /// (`ComponentDown`, then `ComponentUp`, kind `connector`, name `github`).
    /// [`Watchers::start`](crate::Watchers::start) does this for a connector installed
    /// from the config file.
    pub fn attach_lifecycle(&self, lifecycle: Arc<toolyard::Lifecycle>) {
        self.inner.client.state().observer().attach(lifecycle);
    }

    pub(crate) fn observer(&self) -> crate::actor::Observer {
        self.inner.client.state().observer()
    }

    /// Test hook: the next job of the connector's state actor panics, as a bug would.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn panic_next_state_job(&self) {
        self.inner.client.state().panic_next();
    }
}

impl Controller for Github {
    fn tools(self: &Arc<Self>) -> Vec<ToolDef> {
        // Checked in `new`; an error here would be a bug, logged rather than a panic.
        self.definitions().unwrap_or_else(|e| {
            tracing::error!(error = %e, "github connector: a tool definition was refused");
            Vec::new()
        })
    }

    fn templates(self: &Arc<Self>) -> Vec<TemplateDef> {
        resources::templates(&self.inner).unwrap_or_else(|e| {
            tracing::error!(error = %e, "github connector: a repo:// template was refused");
            Vec::new()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enterprise_servers_serve_graphql_beside_api_v3() {
        assert_eq!(
            graphql_url("https://ghe.example/api/v3"),
            "https://ghe.example/api/graphql"
        );
        assert_eq!(
            graphql_url("https://api.github.com"),
            "https://api.github.com/graphql"
        );
    }
}
