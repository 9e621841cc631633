//! Toolyard's built-in connectors: tools a server offers without any third-party MCP server.
//!
//! Each connector is a [`toolyard::Controller`] behind its own cargo feature, so the core
//! build never pays for a connector it does not serve, and each is enabled from the config
//! file's `[connectors.*]` sections ([`ConnectorsConfig`]):
//!
//! - `filesystem` (`[connectors.filesystem]`): the reference filesystem server's tools under
//!   the same names and arguments, confined to the operator's roots by directory
//!   capabilities (every open is relative to a root handle and cannot resolve outside it), plus
//!   line windows, byte caps, `grep`, `delete_path` and a read-only mode.
//! - `sqlite` / `postgres` (`[connectors.sql]`): schema browsing and queries whose read-only
//!   guarantee comes from the database (a read-only open and an authorizer, a read-only
//!   transaction over the extended protocol), never from parsing SQL.
//! - `fetch` (`[connectors.fetch]`): the reference fetch server's `fetch` tool behind an SSRF
//!   guard that judges addresses after DNS resolution and on every redirect hop, with
//!   robots.txt honoured and byte and time limits.
//! - `search` (`[connectors.search]`): `web_search` over SearXNG, Brave or Tavily, each in its
//!   real wire format, with structured results and `Retry-After` handling.
//!
//! - `github`, `slack`, `gdrive` (`[connectors.github]`, `[connectors.slack]`,
//!   `[connectors.gdrive]`): the SaaS connectors, name-compatible with the servers people use
//!   (github-mcp-server, korotovsky's slack-mcp-server, Google's hosted Drive server), on the
//!   tree's reqwest through one API client (`http`) with deadlines, body caps and
//!   `Retry-After`; credentials only by reference (`${VAR}`, `file:`), never printed.
//!
//! The names and argument shapes follow the reference servers so that clients and prompts
//! written for them keep working; the security model is this crate's own.

#[cfg(any(
    feature = "sqlite",
    feature = "postgres",
    feature = "github",
    feature = "slack",
    feature = "gdrive"
))]
#[cfg_attr(
    not(all(
        any(feature = "sqlite", feature = "postgres"),
        any(feature = "github", feature = "gdrive"),
        feature = "slack"
    )),
    allow(dead_code, reason = "each connector uses part of it")
)]
mod actor;
mod config;
mod error;
#[cfg(feature = "fetch")]
pub mod fetch;
#[cfg(feature = "filesystem")]
pub mod filesystem;
#[cfg(feature = "gdrive")]
pub mod gdrive;
#[cfg(feature = "github")]
pub mod github;
#[cfg(any(feature = "github", feature = "slack", feature = "gdrive"))]
mod http;
#[cfg(feature = "search")]
pub mod search;
mod secret;
#[cfg(feature = "slack")]
pub mod slack;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub mod sql;
#[cfg(any(
    feature = "filesystem",
    feature = "sqlite",
    feature = "postgres",
    feature = "fetch",
    feature = "search",
    feature = "github",
    feature = "slack",
    feature = "gdrive"
))]
mod tool;
#[cfg(any(
    feature = "fetch",
    feature = "search",
    feature = "github",
    feature = "slack",
    feature = "gdrive"
))]
mod trace;
#[cfg(any(feature = "filesystem", feature = "sqlite", feature = "postgres"))]
mod uri;

pub use config::{
    ConnectorsConfig, ConnectorsSection, FetchConfig, FilesystemConfig, GdriveConfig, GithubConfig,
    SearchConfig, SlackConfig, SqlConfig, Watchers, Watching,
};
pub use error::ConnectorError;
pub use secret::{Secret, SecretSource};
