//! The Slack connector: korotovsky's slack-mcp-server tool names and arguments
//! (`conversations_history`, `conversations_replies`, `conversations_add_message`,
//! `conversations_search_messages`, `channels_list`, `reactions_add`, `reactions_remove`,
//! `users_search`) and its `slack://{workspace}/channels|users` CSV directories, over the
//! Slack Web API, with what the anchor and the archived reference server lack or get wrong:
//!
//! - nothing is read at start-up: `#channel` and `@user` names are resolved on first use by
//!   paging until found, and cached with a TTL (`resolve`);
//! - posting and reactions only in the channels the operator names, checked before anything
//!   is written; link unfurling off unless every link's host is allow-listed (`policy`);
//! - Slack's tier limits kept client-side per method, with the 2025 non-Marketplace history
//!   budget as a preset, plus `Retry-After` on 429s (`limits`, `client`);
//! - Slack's `ok: false` codes as tool errors that say what to do; the token never printed.
//!
//! Files: `client` (the Web API and its envelope), `limits` (budgets), `resolve` (names),
//! `policy` (gates, unfurling, mrkdwn), `messages` and `directory` (the tools' work), `csv`
//! (the anchor's answer format), `tools` (the tool list).

mod client;
mod csv;
mod directory;
mod limits;
mod messages;
mod policy;
mod resolve;
mod tools;

use crate::http::{Api, ApiSettings};
use crate::{ConnectorError, SlackConfig};
use client::Client;
use limits::{HistoryBudget, Limiter, Rate};
use policy::Gate;
use resolve::Names;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use toolyard::{Controller, ResourceDef, TemplateDef, ToolDef};

/// The default Web API address.
const DEFAULT_BASE_URL: &str = "https://slack.com/api";

/// What the tools share.
pub(crate) struct Inner {
    client: Client,
    names: Names,
    post: Gate,
    react: Gate,
    unfurl_hosts: Vec<String>,
    history: HistoryBudget,
    read_only: bool,
    search_offered: bool,
    workspace: Option<String>,
    max_pages: u32,
    directory_max_rows: usize,
}

/// The Slack connector.
#[derive(Clone)]
pub struct Slack {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Slack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The client prints its token as <secret>; nothing else here is secret.
        f.debug_struct("Slack")
            .field("client", &self.inner.client)
            .field("workspace", &self.inner.workspace)
            .field("read_only", &self.inner.read_only)
            .finish_non_exhaustive()
    }
}

fn bad(message: impl Into<String>) -> ConnectorError {
    ConnectorError::Config {
        connector: "slack",
        message: message.into(),
    }
}

impl Slack {
    /// How many times the connector's state actor (its rate buckets) was rebuilt after a
    /// failure.
    pub fn state_restarts(&self) -> u64 {
        self.inner.client.state().restarts()
    }

    /// Publishes the restarts of the connector's state actor to `lifecycle`
    /// (`ComponentDown`, then `ComponentUp`, kind `connector`, name `slack`).
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

    /// A connector with the settings of `config`. Reads the token now (a clear error when it
    /// is missing) but sends nothing: the first request is the first tool call's.
    pub fn new(config: &SlackConfig) -> Result<Slack, ConnectorError> {
        let token = config
            .token
            .resolve()
            .map_err(|e| bad(format!("`token`: {e}")))?;
        let base = config
            .base_url
            .clone()
            .unwrap_or_else(|| DEFAULT_BASE_URL.to_owned());
        if !(base.starts_with("https://") || base.starts_with("http://")) {
            return Err(bad(format!("`base_url` {base:?} is not an http(s) URL")));
        }
        let history = HistoryBudget::parse(&config.history_budget).map_err(bad)?;
        let mut overrides = HashMap::new();
        for (method, rate) in &config.rate_limits {
            let rate =
                Rate::parse(rate).map_err(|e| bad(format!("rate_limits.\"{method}\": {e}")))?;
            overrides.insert(method.clone(), rate);
        }
        let post =
            Gate::new(&config.post_channels).map_err(|e| bad(format!("post_channels: {e}")))?;
        let react =
            Gate::new(&config.react_channels).map_err(|e| bad(format!("react_channels: {e}")))?;
        let max_wait = Duration::from_millis(config.max_retry_wait_ms);
        let api = Api::new(ApiSettings {
            service: "Slack",
            timeout: Duration::from_millis(config.timeout_ms.max(1)),
            max_body: config.max_response_bytes.max(1024),
            max_retry_wait: max_wait,
        })?;
        // Bot tokens cannot search (`not_allowed_token_type`): the tool is left out for them.
        let search_offered = !token.expose().starts_with("xoxb-");
        let client = Client::new(
            api,
            &base,
            token,
            move || Limiter::new(history, overrides.clone()),
            max_wait,
        );
        let workspace = config
            .workspace
            .as_deref()
            .map(str::trim)
            .filter(|w| !w.is_empty())
            .map(str::to_owned);
        let slack = Slack {
            inner: Arc::new(Inner {
                client,
                names: Names::new(
                    Duration::from_secs(config.name_cache_ttl_secs),
                    config.lookup_max_pages,
                ),
                post,
                react,
                unfurl_hosts: config.unfurl_hosts.clone(),
                history,
                read_only: config.read_only,
                search_offered,
                workspace,
                max_pages: config.lookup_max_pages.max(1),
                directory_max_rows: config.directory_max_rows.max(1),
            }),
        };
        tools::definitions(&slack.inner)?;
        directory::templates(&slack.inner)?;
        Ok(slack)
    }
}

impl Controller for Slack {
    fn tools(self: &Arc<Self>) -> Vec<ToolDef> {
        // Checked in `new`; an error here would be a bug, logged rather than a panic.
        tools::definitions(&self.inner).unwrap_or_else(|e| {
            tracing::error!(error = %e, "slack connector: a tool definition was refused");
            Vec::new()
        })
    }

    fn resources(self: &Arc<Self>) -> Vec<ResourceDef> {
        match &self.inner.workspace {
            Some(ws) => directory::resources(&self.inner, ws),
            None => Vec::new(),
        }
    }

    fn templates(self: &Arc<Self>) -> Vec<TemplateDef> {
        if self.inner.workspace.is_some() {
            return Vec::new();
        }
        directory::templates(&self.inner).unwrap_or_else(|e| {
            tracing::error!(error = %e, "slack connector: a slack:// template was refused");
            Vec::new()
        })
    }
}
