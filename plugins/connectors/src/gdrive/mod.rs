//! The Google Drive connector: the tool names of Google's hosted Drive MCP server
//! (`search_files`, `list_recent_files`, `get_file_metadata`, `read_file_content`,
//! `download_file_content`) over Drive v3, and files as `gdrive:///{id}` resources with
//! change notifications.
//!
//! - `auth`: access tokens from a refresh token, a service account (JWT bearer, with
//!   domain-wide delegation) or a static token; cached, renewed once on a `401`.
//! - `client`: Drive v3 requests with the shared-drive flags on every call, Google's error
//!   bodies in words, shortcuts followed one hop.
//! - `query`: free text or a raw Drive `q` expression, quoted so text cannot break out.
//! - `content`: exports (Docs → Markdown, Sheets → CSV, Slides → text), `Range` windows of
//!   text files, capped downloads.
//! - `tools`: the tools. `changes`: the `changes.list` poller behind resource updates.

mod auth;
mod changes;
mod client;
mod content;
mod query;
mod tools;

pub use changes::ChangeWatch;
pub use client::{File, Owner, ShortcutDetails};
pub use content::FileContent;

use crate::http::{Api, ApiSettings};
use crate::{ConnectorError, GdriveConfig, SecretSource};
use auth::{Auth, Credential, ServiceAccount};
use client::Drive;
use std::sync::Arc;
use std::time::Duration;
use toolyard::proto::ResourceTemplate;
use toolyard::{
    Controller, DefinitionError, HandlerError, ResourceFn, Server, TemplateDef, ToolDef,
};

/// Drive's API address.
const DEFAULT_BASE_URL: &str = "https://www.googleapis.com";
/// Google's OAuth token endpoint.
const DEFAULT_TOKEN_URL: &str = "https://oauth2.googleapis.com/token";
/// The URI of a file is this and its id.
const URI_PREFIX: &str = "gdrive:///";
/// `read_file_content`'s window when the caller names none.
const DEFAULT_MAX_LENGTH: u64 = 100_000;

/// A file's resource URI.
fn uri(id: &str) -> String {
    format!("{URI_PREFIX}{id}")
}

/// What the tools share.
struct Inner {
    drive: Drive,
    max_bytes: u64,
    page_size: u32,
    poll_interval: Duration,
}

/// The Google Drive connector.
#[derive(Clone)]
pub struct Gdrive {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Gdrive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The credential is a secret: only its kind is printed.
        f.debug_struct("Gdrive")
            .field("base_url", &self.inner.drive.base())
            .field("credential", &self.inner.drive.credential_kind())
            .finish_non_exhaustive()
    }
}

fn bad(message: impl Into<String>) -> ConnectorError {
    ConnectorError::Config {
        connector: "gdrive",
        message: message.into(),
    }
}

/// Reads a secret now; the error names the setting and the source, never a value.
fn resolve(field: &str, source: &SecretSource) -> Result<crate::Secret, ConnectorError> {
    source.resolve().map_err(|e| bad(format!("`{field}`: {e}")))
}

/// The one credential the config names.
fn credential(config: &GdriveConfig) -> Result<Credential, ConnectorError> {
    let given = [
        config.access_token.is_some(),
        config.refresh_token.is_some(),
        config.service_account_key.is_some(),
    ];
    match given.iter().filter(|g| **g).count() {
        0 => {
            return Err(bad(
                "no credential: set one of `refresh_token` (with `client_id` and `client_secret`), `service_account_key` or `access_token`",
            ))
        }
        1 => {}
        _ => {
            return Err(bad(
                "more than one credential: set only one of `refresh_token`, `service_account_key` and `access_token`",
            ))
        }
    }
    if config.subject.is_some() && config.service_account_key.is_none() {
        return Err(bad(
            "`subject` (domain-wide delegation) needs `service_account_key`",
        ));
    }
    if config.refresh_token.is_none()
        && (config.client_id.is_some() || config.client_secret.is_some())
    {
        return Err(bad(
            "`client_id` and `client_secret` go with `refresh_token`, which is not set",
        ));
    }
    if let Some(token) = &config.access_token {
        return Ok(Credential::Static(resolve("access_token", token)?));
    }
    if let Some(refresh) = &config.refresh_token {
        let (Some(client_id), Some(secret)) = (&config.client_id, &config.client_secret) else {
            return Err(bad("`refresh_token` needs `client_id` and `client_secret`"));
        };
        return Ok(Credential::Refresh {
            client_id: client_id.clone(),
            client_secret: resolve("client_secret", secret)?,
            refresh_token: resolve("refresh_token", refresh)?,
        });
    }
    let Some(key) = &config.service_account_key else {
        return Err(bad("no credential"));
    };
    let text = resolve("service_account_key", key)?;
    let account =
        ServiceAccount::from_json(text.expose(), config.subject.clone(), auth::SCOPE_READONLY)
            .map_err(|e| bad(format!("`service_account_key`: {e}")))?;
    Ok(Credential::ServiceAccount(account))
}

impl Gdrive {
    /// A connector with the settings of `config`; its credential is read now.
    pub fn new(config: &GdriveConfig) -> Result<Self, ConnectorError> {
        let credential = credential(config)?;
        let base = config
            .base_url
            .as_deref()
            .unwrap_or(DEFAULT_BASE_URL)
            .trim_end_matches('/')
            .to_owned();
        let token_url = config
            .token_url
            .clone()
            .unwrap_or_else(|| DEFAULT_TOKEN_URL.to_owned());
        if config.max_bytes == 0 {
            return Err(bad("`max_bytes` must be more than 0"));
        }
        let timeout = Duration::from_millis(config.timeout_ms.max(1));
        let max_retry_wait = Duration::from_millis(config.max_retry_wait_ms);
        let api = Api::new(ApiSettings {
            service: "Google Drive",
            timeout,
            max_body: usize::try_from(config.max_bytes).unwrap_or(usize::MAX),
            max_retry_wait,
        })?;
        let token_api = Api::new(ApiSettings {
            service: "Google's token endpoint",
            timeout,
            max_body: 64 * 1024,
            max_retry_wait,
        })?;
        let auth = Auth::new(credential, token_url, token_api);
        let gdrive = Gdrive {
            inner: Arc::new(Inner {
                drive: Drive::new(api, base, auth),
                max_bytes: config.max_bytes,
                page_size: config.page_size.clamp(1, 100),
                poll_interval: Duration::from_millis(config.poll_interval_ms),
            }),
        };
        tools::definitions(&gdrive.inner)?;
        gdrive.template()?;
        Ok(gdrive)
    }

    /// How many times the connector's state actor (its access token) was rebuilt after a
    /// failure.
    pub fn state_restarts(&self) -> u64 {
        self.inner.drive.state().restarts()
    }

    /// Publishes the restarts of the connector's state actor to `lifecycle`
    /// (`ComponentDown`, then `ComponentUp`, kind `connector`, name `gdrive`).
    /// [`Watchers::start`](crate::Watchers::start) does this for a connector installed
    /// from the config file.
    pub fn attach_lifecycle(&self, lifecycle: Arc<toolyard::Lifecycle>) {
        self.inner.drive.state().observer().attach(lifecycle);
    }

    pub(crate) fn attach_lifecycle_observer(&self) -> crate::actor::Observer {
        self.inner.drive.state().observer()
    }

    /// Test hook: the next job of the connector's state actor panics, as a bug would.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    pub fn panic_next_state_job(&self) {
        self.inner.drive.state().panic_next();
    }

    /// Starts sending `notifications/resources/updated` to `server`'s subscribers of
    /// `gdrive:///{id}` resources, from a poll of Drive's `changes.list` every
    /// `poll_interval_ms` (only while something is subscribed). `None` when polling is off
    /// (`poll_interval_ms = 0`). Keep the [`ChangeWatch`]: dropping it stops the poller, as
    /// does the server stopping.
    pub fn watch(&self, server: &Server) -> Option<ChangeWatch> {
        if self.inner.poll_interval.is_zero() {
            return None;
        }
        Some(changes::start(
            self.inner.clone(),
            server,
            self.inner.poll_interval,
        ))
    }

    /// The `gdrive:///{id}` template.
    fn template(&self) -> Result<TemplateDef, DefinitionError> {
        let inner = self.inner.clone();
        let reader: ResourceFn = Arc::new(move |_ctx, request| {
            let inner = inner.clone();
            Box::pin(async move {
                let id = request
                    .vars
                    .get("id")
                    .cloned()
                    .ok_or_else(|| HandlerError::failed("not a gdrive:/// URI"))?;
                content::resource(&inner, &request.uri, &id)
                    .await
                    .map(Into::into)
            })
        });
        TemplateDef::new(
            ResourceTemplate {
                uri_template: "gdrive:///{id}".to_owned(),
                name: "gdrive-file".to_owned(),
                title: Some("A Google Drive file".to_owned()),
                description: Some(
                    "A Google Drive file by id: Docs as Markdown, Sheets as CSV, Slides as text, text files as text, other files as base64. Subscribe for change notifications."
                        .to_owned(),
                ),
                mime_type: None,
                annotations: None,
                icons: None,
                meta: None,
            },
            reader,
        )
    }
}

impl Controller for Gdrive {
    fn tools(self: &Arc<Self>) -> Vec<ToolDef> {
        // Checked in `new`; an error here would be a bug, logged rather than a panic.
        tools::definitions(&self.inner).unwrap_or_else(|e| {
            tracing::error!(error = %e, "gdrive connector: a tool definition was refused");
            Vec::new()
        })
    }

    fn templates(self: &Arc<Self>) -> Vec<TemplateDef> {
        match self.template() {
            Ok(t) => vec![t],
            Err(e) => {
                tracing::error!(error = %e, "gdrive connector: the resource template was refused");
                Vec::new()
            }
        }
    }
}
