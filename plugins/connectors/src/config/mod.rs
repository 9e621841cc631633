//! The `[connectors]` sections of the config file. This crate owns them (the binary composes
//! the file from every crate's sections), refuses unknown keys inside them, and turns them
//! into tools on a [`ServerBuilder`].

mod gdrive;
mod github;
mod slack;

pub use gdrive::GdriveConfig;
pub use github::GithubConfig;
pub use slack::SlackConfig;

use crate::ConnectorError;
use serde::Deserialize;
use std::path::PathBuf;
use toolyard::{Audience, ServerBuilder};

/// This crate's part of a config file: the `[connectors]` table.
#[derive(Debug, Default, Clone, Deserialize)]
pub struct ConnectorsConfig {
    /// `[connectors]`.
    #[serde(default)]
    pub connectors: ConnectorsSection,
}

/// The connectors by their sections' names.
const CONNECTORS: [&str; 7] = [
    "filesystem",
    "sql",
    "fetch",
    "search",
    "github",
    "slack",
    "gdrive",
];

/// `[connectors]`: one optional table per connector.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConnectorsSection {
    /// One switch for every connector: the filesystem's write tools and SQL's `execute` are
    /// left out whatever their own sections say.
    #[serde(default)]
    pub read_only: bool,
    /// Per connector (by its section's name), the principals its tools, resources and
    /// prompts are for; a connector not named here is everyone's
    /// (`audience = { sql = ["dba@example.com"] }`).
    #[serde(default)]
    pub audience: std::collections::BTreeMap<String, Vec<String>>,
    /// `[connectors.filesystem]`.
    #[serde(default)]
    pub filesystem: Option<FilesystemConfig>,
    /// `[connectors.sql]`.
    #[serde(default)]
    pub sql: Option<SqlConfig>,
    /// `[connectors.fetch]`.
    #[serde(default)]
    pub fetch: Option<FetchConfig>,
    /// `[connectors.search]`.
    #[serde(default)]
    pub search: Option<SearchConfig>,
    /// `[connectors.github]`.
    #[serde(default)]
    pub github: Option<GithubConfig>,
    /// `[connectors.slack]`.
    #[serde(default)]
    pub slack: Option<SlackConfig>,
    /// `[connectors.gdrive]`.
    #[serde(default)]
    pub gdrive: Option<GdriveConfig>,
}

/// `[connectors.search]`.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchConfig {
    /// `searxng` (default), `brave` or `tavily`.
    #[serde(default = "default_provider")]
    pub provider: String,
    /// The provider's address (needed for SearXNG; Brave and Tavily default to theirs).
    #[serde(default)]
    pub base_url: Option<String>,
    /// The API key (Brave, Tavily), or `${VAR}` to read it from the environment. Secret:
    /// never printed.
    #[serde(default)]
    pub api_key: Option<String>,
    /// Results per page when the caller does not say (1-20); default 10.
    #[serde(default = "default_max_results")]
    pub max_results: u32,
    /// The longest one provider request may take, in milliseconds; default 10,000.
    #[serde(default = "default_search_timeout_ms")]
    pub timeout_ms: u64,
    /// A `429` whose `Retry-After` is at most this long (ms) is waited out once; default 5,000.
    #[serde(default = "default_max_retry_wait_ms")]
    pub max_retry_wait_ms: u64,
}

impl std::fmt::Debug for SearchConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SearchConfig")
            .field("provider", &self.provider)
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<secret>"))
            .finish_non_exhaustive()
    }
}

impl SearchConfig {
    /// Settings for `provider` at `base_url`, with every default.
    pub fn new(provider: &str, base_url: Option<String>) -> Self {
        SearchConfig {
            provider: provider.to_owned(),
            base_url,
            api_key: None,
            max_results: default_max_results(),
            timeout_ms: default_search_timeout_ms(),
            max_retry_wait_ms: default_max_retry_wait_ms(),
        }
    }
}

fn default_provider() -> String {
    "searxng".to_owned()
}
fn default_max_results() -> u32 {
    10
}
fn default_search_timeout_ms() -> u64 {
    10_000
}
fn default_max_retry_wait_ms() -> u64 {
    5_000
}

/// `[connectors.fetch]`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FetchConfig {
    /// Hosts (names or IP literals, as written in URLs) that may be fetched although they
    /// are not public addresses, on any port: the internal hosts the operator does want.
    #[serde(default)]
    pub allow_hosts: Vec<String>,
    /// The User-Agent header (default `ToolyardFetch/<version> (...)`).
    #[serde(default)]
    pub user_agent: Option<String>,
    /// Fetch pages whatever their robots.txt says.
    #[serde(default)]
    pub ignore_robots_txt: bool,
    /// The most bytes of a response read; default 5 MiB.
    #[serde(default = "default_fetch_max_bytes")]
    pub max_bytes: u64,
    /// The longest one fetch may take (robots.txt, redirects and body), in milliseconds;
    /// default 30,000.
    #[serde(default = "default_fetch_timeout_ms")]
    pub timeout_ms: u64,
    /// Redirects followed at most; default 5.
    #[serde(default = "default_max_redirects")]
    pub max_redirects: usize,
}

impl FetchConfig {
    /// Settings with every default (no host allowed beyond public addresses).
    pub fn new() -> Self {
        FetchConfig {
            allow_hosts: Vec::new(),
            user_agent: None,
            ignore_robots_txt: false,
            max_bytes: default_fetch_max_bytes(),
            timeout_ms: default_fetch_timeout_ms(),
            max_redirects: default_max_redirects(),
        }
    }
}

fn default_fetch_max_bytes() -> u64 {
    5 * 1024 * 1024
}
fn default_fetch_timeout_ms() -> u64 {
    30_000
}
fn default_max_redirects() -> usize {
    5
}

/// `[connectors.filesystem]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FilesystemConfig {
    /// The directories the tools may reach (the operator's; clients cannot widen them).
    pub roots: Vec<PathBuf>,
    /// Leave out every tool that writes (`write_file`, `edit_file`, `create_directory`,
    /// `move_file`, `delete_path`).
    #[serde(default)]
    pub read_only: bool,
    /// Ask the user (elicitation) before `write_file`, `edit_file`, `move_file` and
    /// `delete_path` run; clients that cannot be asked cannot use them.
    #[serde(default)]
    pub confirm_destructive: bool,
    /// The most bytes one read returns (text and media); default 10 MiB.
    #[serde(default = "default_max_read_bytes")]
    pub max_read_bytes: u64,
    /// How deep `directory_tree`, `search_files` and `grep` descend; default 32.
    #[serde(default = "default_max_depth")]
    pub max_depth: usize,
    /// How many entries one walk visits at most; default 10,000.
    #[serde(default = "default_max_entries")]
    pub max_entries: usize,
    /// How long one walk may take, in milliseconds; default 10,000.
    #[serde(default = "default_walk_timeout_ms")]
    pub walk_timeout_ms: u64,
    /// How often subscribed `file://` resources are checked for changes, in milliseconds;
    /// default 500, 0 for no change notifications.
    #[serde(default = "default_watch_interval_ms")]
    pub watch_interval_ms: u64,
}

impl FilesystemConfig {
    /// Settings with these roots and every default.
    pub fn new(roots: Vec<PathBuf>) -> Self {
        FilesystemConfig {
            roots,
            read_only: false,
            confirm_destructive: false,
            max_read_bytes: default_max_read_bytes(),
            max_depth: default_max_depth(),
            max_entries: default_max_entries(),
            walk_timeout_ms: default_walk_timeout_ms(),
            watch_interval_ms: default_watch_interval_ms(),
        }
    }
}

fn default_max_read_bytes() -> u64 {
    10 * 1024 * 1024
}
fn default_max_depth() -> usize {
    32
}
fn default_max_entries() -> usize {
    10_000
}
fn default_walk_timeout_ms() -> u64 {
    10_000
}
fn default_watch_interval_ms() -> u64 {
    500
}

/// `[connectors.sql]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SqlConfig {
    /// `sqlite:PATH`, `sqlite::memory:` or `postgres://user@host/db`. Secret: may carry a
    /// password, so it is never printed.
    pub url: String,
    /// Offer `execute`, which may write; without it the database refuses every write.
    #[serde(default)]
    pub allow_writes: bool,
    /// Ask the user (elicitation) before each `execute`.
    #[serde(default)]
    pub confirm_destructive: bool,
    /// The most rows a `query` returns (callers may ask for fewer); default 1,000.
    #[serde(default = "default_max_rows")]
    pub max_rows: u64,
    /// The longest a statement may run, in milliseconds (callers may ask for less); default
    /// 5,000.
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// The most connections open at once (PostgreSQL, and SQLite file reads); a call waits
    /// up to its time limit for one to come free. Default 4.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
}

impl SqlConfig {
    /// Settings for this URL with every default (read-only).
    pub fn new(url: impl Into<String>) -> Self {
        SqlConfig {
            url: url.into(),
            allow_writes: false,
            confirm_destructive: false,
            max_rows: default_max_rows(),
            timeout_ms: default_timeout_ms(),
            max_connections: default_max_connections(),
        }
    }
}

fn default_max_connections() -> usize {
    4
}

fn default_max_rows() -> u64 {
    1000
}
fn default_timeout_ms() -> u64 {
    5000
}

impl ConnectorsConfig {
    /// The top-level keys this crate owns.
    pub const SECTIONS: [&'static str; 1] = ["connectors"];

    /// Parses this crate's sections of a whole config file's TOML text (other top-level
    /// keys belong to other crates and are left alone).
    ///
    /// An error names the line and the problem but never quotes the line: it may hold a
    /// credential written where a `${VAR}` belongs (and refused for that very reason).
    pub fn parse(text: &str) -> Result<ConnectorsConfig, String> {
        toml::from_str(text).map_err(|e: toml::de::Error| {
            let line = e
                .span()
                .map(|span| text[..span.start.min(text.len())].matches('\n').count() + 1);
            match line {
                Some(line) => format!("line {line}: {}", e.message()),
                None => e.message().to_owned(),
            }
        })
    }

    /// No connector is configured.
    pub fn is_empty(&self) -> bool {
        self.connectors.filesystem.is_none()
            && self.connectors.sql.is_none()
            && self.connectors.fetch.is_none()
            && self.connectors.search.is_none()
            && self.connectors.github.is_none()
            && self.connectors.slack.is_none()
            && self.connectors.gdrive.is_none()
    }

    /// Adds the configured connectors' tools to `builder`. Connectors that watch for changes
    /// (Drive's `changes.list` poller) need the running server: use
    /// [`install_watched`](Self::install_watched) for them to run.
    pub fn install(&self, builder: ServerBuilder) -> Result<ServerBuilder, ConnectorError> {
        self.install_watched(builder).map(|(builder, _)| builder)
    }

    /// Like [`install`](Self::install), also giving what starts the connectors' change
    /// watchers once the server runs ([`Watchers::start`]).
    pub fn install_watched(
        &self,
        builder: ServerBuilder,
    ) -> Result<(ServerBuilder, Watchers), ConnectorError> {
        #[cfg_attr(
            not(any(feature = "gdrive", feature = "filesystem")),
            allow(unused_mut)
        )]
        let mut watchers = Watchers::default();
        let mut builder = builder;
        let read_only = self.connectors.read_only;
        let audience = &self.connectors.audience;
        if let Some(unknown) = audience.keys().find(|k| !CONNECTORS.contains(&k.as_str())) {
            return Err(ConnectorError::Config {
                connector: "audience",
                message: format!(
                    "`{unknown}` is no connector (one of {})",
                    CONNECTORS.join(", ")
                ),
            });
        }
        // `[connectors] audience = { NAME = [principals] }`: that connector's tools,
        // resources and prompts are for those principals alone.
        let audience_of = |name: &str| {
            let principals = audience.get(name)?;
            Some(Audience::principals(principals.iter().cloned()))
        };
        if let Some(fs) = &self.connectors.filesystem {
            let mut fs = fs.clone();
            fs.read_only |= read_only;
            #[cfg(feature = "filesystem")]
            {
                let connector = crate::filesystem::Filesystem::new(&fs)?;
                watchers.filesystem = Some(connector.clone());
                builder = builder.controller_for_audience(connector, audience_of("filesystem"));
            }
            #[cfg(not(feature = "filesystem"))]
            {
                builder = install_filesystem(builder, audience_of("filesystem"), &fs)?;
            }
        }
        if let Some(sql) = &self.connectors.sql {
            let mut sql = sql.clone();
            sql.allow_writes &= !read_only;
            builder = install_sql(builder, audience_of("sql"), &sql, &mut watchers)?;
        }
        if let Some(fetch) = &self.connectors.fetch {
            builder = install_fetch(builder, audience_of("fetch"), fetch)?;
        }
        if let Some(search) = &self.connectors.search {
            builder = install_search(
                builder,
                audience_of("search"),
                search,
                self.connectors.fetch.as_ref(),
            )?;
        }
        if let Some(github) = &self.connectors.github {
            builder = install_github(
                builder,
                audience_of("github"),
                github,
                read_only,
                &mut watchers,
            )?;
        }
        if let Some(slack) = &self.connectors.slack {
            builder = install_slack(
                builder,
                audience_of("slack"),
                slack,
                read_only,
                &mut watchers,
            )?;
        }
        if let Some(gdrive) = &self.connectors.gdrive {
            #[cfg(feature = "gdrive")]
            {
                let mut config = gdrive.clone();
                config.read_only |= read_only;
                let connector = crate::gdrive::Gdrive::new(&config)?;
                watchers
                    .observers
                    .push(connector.attach_lifecycle_observer());
                watchers.gdrive = Some(connector.clone());
                builder = builder.controller_for_audience(connector, audience_of("gdrive"));
            }
            #[cfg(not(feature = "gdrive"))]
            {
                builder = install_gdrive(builder, audience_of("gdrive"), gdrive, read_only)?;
            }
        }
        Ok((builder, watchers))
    }
}

/// What starts the connectors' change watchers on a running server.
#[derive(Debug, Default)]
pub struct Watchers {
    #[cfg(feature = "gdrive")]
    gdrive: Option<crate::gdrive::Gdrive>,
    #[cfg(feature = "filesystem")]
    filesystem: Option<crate::filesystem::Filesystem>,
    /// The connectors' state actors, whose restarts go to the server's lifecycle.
    #[cfg(any(
        feature = "sqlite",
        feature = "postgres",
        feature = "github",
        feature = "slack",
        feature = "gdrive"
    ))]
    observers: Vec<crate::actor::Observer>,
}

/// The running watchers; dropping this stops them (as does the server stopping).
#[derive(Debug, Default)]
pub struct Watching {
    #[cfg(feature = "gdrive")]
    _gdrive: Option<crate::gdrive::ChangeWatch>,
    #[cfg(feature = "filesystem")]
    _filesystem: Option<crate::filesystem::FileWatch>,
}

impl Watchers {
    /// Starts the watchers for `server`'s subscribers, and publishes the restarts of the
    /// connectors' state actors to its lifecycle (`ComponentDown`/`ComponentUp`, kind
    /// `connector`).
    pub fn start(&self, server: &toolyard::Server) -> Watching {
        let _ = server;
        #[cfg(any(
            feature = "sqlite",
            feature = "postgres",
            feature = "github",
            feature = "slack",
            feature = "gdrive"
        ))]
        for observer in &self.observers {
            observer.attach(server.lifecycle().clone());
        }
        Watching {
            #[cfg(feature = "gdrive")]
            _gdrive: self.gdrive.as_ref().and_then(|g| g.watch(server)),
            #[cfg(feature = "filesystem")]
            _filesystem: self.filesystem.as_ref().and_then(|f| f.watch(server)),
        }
    }
}

#[cfg(not(feature = "filesystem"))]
fn install_filesystem(
    _builder: ServerBuilder,
    _audience: Option<Audience>,
    _config: &FilesystemConfig,
) -> Result<ServerBuilder, ConnectorError> {
    Err(ConnectorError::NotBuilt {
        connector: "filesystem",
        feature: "filesystem",
    })
}

#[cfg(any(feature = "sqlite", feature = "postgres"))]
fn install_sql(
    builder: ServerBuilder,
    audience: Option<Audience>,
    config: &SqlConfig,
    watchers: &mut Watchers,
) -> Result<ServerBuilder, ConnectorError> {
    let connector = crate::sql::Sql::new(config)?;
    watchers.observers.push(connector.observer());
    Ok(builder.controller_for_audience(connector, audience))
}

#[cfg(not(any(feature = "sqlite", feature = "postgres")))]
fn install_sql(
    _builder: ServerBuilder,
    _audience: Option<Audience>,
    _config: &SqlConfig,
    _watchers: &mut Watchers,
) -> Result<ServerBuilder, ConnectorError> {
    Err(ConnectorError::NotBuilt {
        connector: "sql",
        feature: "sqlite` or `postgres",
    })
}

#[cfg(feature = "fetch")]
fn install_fetch(
    builder: ServerBuilder,
    audience: Option<Audience>,
    config: &FetchConfig,
) -> Result<ServerBuilder, ConnectorError> {
    let connector = crate::fetch::Fetch::new(config)?;
    Ok(builder.controller_for_audience(connector, audience))
}

#[cfg(not(feature = "fetch"))]
fn install_fetch(
    _builder: ServerBuilder,
    _audience: Option<Audience>,
    _config: &FetchConfig,
) -> Result<ServerBuilder, ConnectorError> {
    Err(ConnectorError::NotBuilt {
        connector: "fetch",
        feature: "fetch",
    })
}

/// Result pages (`with_content`) are read with `[connectors.fetch]`'s settings when it is
/// there (its allow-list and limits), with the fetch defaults otherwise.
#[cfg(feature = "search")]
fn install_search(
    builder: ServerBuilder,
    audience: Option<Audience>,
    config: &SearchConfig,
    fetch: Option<&FetchConfig>,
) -> Result<ServerBuilder, ConnectorError> {
    let connector = match fetch {
        Some(fetch) => crate::search::Search::with_fetch(config, fetch)?,
        None => crate::search::Search::new(config)?,
    };
    Ok(builder.controller_for_audience(connector, audience))
}

#[cfg(not(feature = "search"))]
fn install_search(
    _builder: ServerBuilder,
    _audience: Option<Audience>,
    _config: &SearchConfig,
    _fetch: Option<&FetchConfig>,
) -> Result<ServerBuilder, ConnectorError> {
    Err(ConnectorError::NotBuilt {
        connector: "search",
        feature: "search",
    })
}

/// `read_only` is the `[connectors]`-wide switch: the connector leaves out its write tools.
#[cfg(feature = "github")]
fn install_github(
    builder: ServerBuilder,
    audience: Option<Audience>,
    config: &GithubConfig,
    read_only: bool,
    watchers: &mut Watchers,
) -> Result<ServerBuilder, ConnectorError> {
    let mut config = config.clone();
    config.read_only |= read_only;
    let connector = crate::github::Github::new(&config)?;
    watchers.observers.push(connector.observer());
    Ok(builder.controller_for_audience(connector, audience))
}

#[cfg(not(feature = "github"))]
fn install_github(
    _builder: ServerBuilder,
    _audience: Option<Audience>,
    _config: &GithubConfig,
    _read_only: bool,
    _watchers: &mut Watchers,
) -> Result<ServerBuilder, ConnectorError> {
    Err(ConnectorError::NotBuilt {
        connector: "github",
        feature: "github",
    })
}

/// `read_only` is the `[connectors]`-wide switch: the connector leaves out its write tools.
#[cfg(feature = "slack")]
fn install_slack(
    builder: ServerBuilder,
    audience: Option<Audience>,
    config: &SlackConfig,
    read_only: bool,
    watchers: &mut Watchers,
) -> Result<ServerBuilder, ConnectorError> {
    let mut config = config.clone();
    config.read_only |= read_only;
    let connector = crate::slack::Slack::new(&config)?;
    watchers.observers.push(connector.observer());
    Ok(builder.controller_for_audience(connector, audience))
}

#[cfg(not(feature = "slack"))]
fn install_slack(
    _builder: ServerBuilder,
    _audience: Option<Audience>,
    _config: &SlackConfig,
    _read_only: bool,
    _watchers: &mut Watchers,
) -> Result<ServerBuilder, ConnectorError> {
    Err(ConnectorError::NotBuilt {
        connector: "slack",
        feature: "slack",
    })
}

/// `read_only` is the `[connectors]`-wide switch: the connector leaves out its write tools.
#[cfg(not(feature = "gdrive"))]
fn install_gdrive(
    _builder: ServerBuilder,
    _audience: Option<Audience>,
    _config: &GdriveConfig,
    _read_only: bool,
) -> Result<ServerBuilder, ConnectorError> {
    Err(ConnectorError::NotBuilt {
        connector: "gdrive",
        feature: "gdrive",
    })
}
