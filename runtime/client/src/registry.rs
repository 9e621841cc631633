//! Named client connections built from configuration: the gateway, the plugin host and
//! users' own services look servers up by name instead of threading handles around.
//!
//! ```toml
//! [[clients]]
//! name = "everything"
//! transport = "stdio"           # the default when `command` is given
//! command = "npx"
//! args = ["-y", "@modelcontextprotocol/server-everything"]
//! env = { LOG_LEVEL = "info" }
//! inherit_env = ["AWS_PROFILE"] # more of our variables (besides PATH, HOME, proxy and TLS ones)
//! timeout_ms = 30000
//!
//! [[clients]]
//! name = "remote"
//! # transport = "auto" (the default when `url` is given): Streamable HTTP, falling back to the
//! # 2024-11-05 HTTP+SSE transport when the POST is refused; "http" or "sse" pins one.
//! url = "https://example.com/mcp"
//! headers = { Authorization = "Bearer ..." }
//! ```

use super::stdio::StdioTransport;
use crate::{Client, ClientBuilder, ClientError, ProtocolChoice, Transport};
use serde::{Deserialize, Deserializer};
use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::time::Duration;
use toolyard_proto::{Implementation, ProtocolVersion};

/// How to reach one server. `transport` names the variant; without it, an entry with `url`
/// is [`Auto`](ClientEntry::Auto) and one with `command` is [`Stdio`](ClientEntry::Stdio).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(remote = "Self")]
#[serde(tag = "transport", rename_all = "lowercase", deny_unknown_fields)]
pub enum ClientEntry {
    /// Spawn a process and speak over its stdin/stdout.
    Stdio {
        /// The unique name of this connection.
        name: String,
        /// The program.
        command: String,
        /// Its arguments.
        #[serde(default)]
        args: Vec<String>,
        /// Environment variables. Of ours the child gets only `PATH`, `HOME`, the proxy and
        /// TLS trust-store variables ([`StdioTransport::DEFAULT_INHERITED_ENV`]) and what
        /// `inherit_env` names.
        #[serde(default)]
        env: BTreeMap<String, String>,
        /// More of our environment variables to pass on (those we have).
        #[serde(default)]
        inherit_env: Vec<String>,
        /// Whether the proxy and TLS trust-store variables are passed on (default `true`).
        #[serde(default = "yes")]
        inherit_env_defaults: bool,
        /// Working directory.
        #[serde(default)]
        cwd: Option<PathBuf>,
        /// Request timeout in milliseconds.
        #[serde(default)]
        timeout_ms: Option<u64>,
        /// Pin a protocol revision (`"2026-07-28"` or a legacy one) instead of probing.
        #[serde(default)]
        protocol: Option<String>,
    },
    /// Streamable HTTP, or the 2024-11-05 HTTP+SSE transport when the server refuses the
    /// POST and a GET of the URL opens an SSE stream
    /// (`StreamableHttpTransport::auto`, feature `http`). The default
    /// for an entry with `url`.
    Auto {
        /// The unique name of this connection.
        name: String,
        /// The MCP endpoint (`/mcp`) or the SSE endpoint (`/sse`).
        url: String,
        /// Extra headers (auth tokens).
        #[serde(default)]
        headers: BTreeMap<String, String>,
        /// Request timeout in milliseconds.
        #[serde(default)]
        timeout_ms: Option<u64>,
        /// Pin a protocol revision instead of probing.
        #[serde(default)]
        protocol: Option<String>,
    },
    /// Streamable HTTP only.
    Http {
        /// The unique name of this connection.
        name: String,
        /// The MCP endpoint.
        url: String,
        /// Extra headers (auth tokens).
        #[serde(default)]
        headers: BTreeMap<String, String>,
        /// Request timeout in milliseconds.
        #[serde(default)]
        timeout_ms: Option<u64>,
        /// Pin a protocol revision instead of probing.
        #[serde(default)]
        protocol: Option<String>,
    },
    /// The 2024-11-05 HTTP+SSE transport only.
    Sse {
        /// The unique name of this connection.
        name: String,
        /// The SSE endpoint (e.g. `http://host/sse`).
        url: String,
        /// Extra headers (auth tokens).
        #[serde(default)]
        headers: BTreeMap<String, String>,
        /// Request timeout in milliseconds.
        #[serde(default)]
        timeout_ms: Option<u64>,
    },
}

fn yes() -> bool {
    true
}

impl<'de> Deserialize<'de> for ClientEntry {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        let mut entry = serde_json::Map::deserialize(deserializer)?;
        if !entry.contains_key("transport") {
            let inferred = if entry.contains_key("url") {
                Some("auto")
            } else if entry.contains_key("command") {
                Some("stdio")
            } else {
                None
            };
            if let Some(t) = inferred {
                entry.insert("transport".into(), t.into());
            }
        }
        // The derived deserializer (`remote = "Self"`), on the entry with its tag.
        ClientEntry::deserialize(serde_json::Value::Object(entry)).map_err(D::Error::custom)
    }
}

impl ClientEntry {
    /// The connection's name.
    pub fn name(&self) -> &str {
        match self {
            ClientEntry::Stdio { name, .. }
            | ClientEntry::Auto { name, .. }
            | ClientEntry::Http { name, .. }
            | ClientEntry::Sse { name, .. } => name,
        }
    }

    fn timeout(&self) -> Option<Duration> {
        match self {
            ClientEntry::Stdio { timeout_ms, .. }
            | ClientEntry::Auto { timeout_ms, .. }
            | ClientEntry::Http { timeout_ms, .. }
            | ClientEntry::Sse { timeout_ms, .. } => timeout_ms.map(Duration::from_millis),
        }
    }

    fn protocol(&self) -> Result<ProtocolChoice, RegistryError> {
        let pinned = match self {
            ClientEntry::Stdio { protocol, .. }
            | ClientEntry::Auto { protocol, .. }
            | ClientEntry::Http { protocol, .. } => protocol,
            ClientEntry::Sse { .. } => {
                return Ok(ProtocolChoice::Legacy(ProtocolVersion::V2024_11_05))
            }
        };
        match pinned.as_deref() {
            None => Ok(ProtocolChoice::Auto),
            Some(v) => match ProtocolVersion::parse(v) {
                Some(ProtocolVersion::V2026_07_28) => Ok(ProtocolChoice::Modern),
                Some(legacy) => Ok(ProtocolChoice::Legacy(legacy)),
                None => Err(RegistryError::Config(format!(
                    "connection `{}`: unknown protocol version {v:?}",
                    self.name()
                ))),
            },
        }
    }

    /// The transport this connection describes.
    pub fn transport(&self) -> Result<Box<dyn Transport>, RegistryError> {
        match self {
            ClientEntry::Stdio {
                name,
                command,
                args,
                env,
                inherit_env,
                inherit_env_defaults,
                cwd,
                ..
            } => {
                let mut t = StdioTransport::new(command)
                    .args(args.clone())
                    .inherit_env_vars(inherit_env)
                    .inherit_env_defaults(*inherit_env_defaults)
                    .name(name.clone());
                for (k, v) in env {
                    t = t.env(k, v);
                }
                if let Some(dir) = cwd {
                    t = t.current_dir(dir);
                }
                Ok(Box::new(t))
            }
            #[cfg(feature = "http")]
            ClientEntry::Auto { url, headers, .. } | ClientEntry::Http { url, headers, .. } => {
                // One transport; `Auto` only adds the fallback to HTTP+SSE.
                let mut t = super::http::StreamableHttpTransport::new(url)
                    .sse_fallback(matches!(self, ClientEntry::Auto { .. }));
                for (k, v) in headers {
                    t = t.header(k, v);
                }
                Ok(Box::new(t))
            }
            #[cfg(feature = "http")]
            ClientEntry::Sse { url, headers, .. } => {
                let mut t = super::sse::SseTransport::new(url);
                for (k, v) in headers {
                    t = t.header(k, v);
                }
                Ok(Box::new(t))
            }
            #[cfg(not(feature = "http"))]
            other => Err(RegistryError::Config(format!(
                "connection `{}` needs HTTP, and this build has no `client-http` feature",
                other.name()
            ))),
        }
    }
}

/// The `[[clients]]` list of a configuration file.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ClientsConfig {
    /// The connections.
    #[serde(default)]
    pub clients: Vec<ClientEntry>,
}

/// The registry could not be built.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// The configuration is wrong (empty, duplicate names, bad values).
    #[error("client configuration: {0}")]
    Config(String),
    /// A connection could not be established.
    #[error("client `{name}`: {source}")]
    Connect {
        /// The connection.
        name: String,
        /// Why.
        source: ClientError,
    },
}

/// Named, connected clients.
#[derive(Debug, Clone, Default)]
pub struct ClientRegistry {
    clients: HashMap<String, Client>,
    order: Vec<String>,
}

impl ClientRegistry {
    /// Checks a configuration without connecting: at least one connection, unique names.
    pub fn validate(connections: &[ClientEntry]) -> Result<(), RegistryError> {
        if connections.is_empty() {
            return Err(RegistryError::Config(
                "no connections configured: add at least one [[clients]] entry".into(),
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for c in connections {
            if c.name().is_empty() {
                return Err(RegistryError::Config(
                    "a connection has an empty name".into(),
                ));
            }
            if !seen.insert(c.name()) {
                return Err(RegistryError::Config(format!(
                    "duplicate connection name `{}`",
                    c.name()
                )));
            }
            c.protocol()?;
        }
        Ok(())
    }

    /// Connects every configured server (concurrently); fails on the first that cannot be
    /// reached, closing the others.
    pub async fn connect(
        connections: &[ClientEntry],
        info: Implementation,
    ) -> Result<Self, RegistryError> {
        Self::validate(connections)?;
        let attempts = connections.iter().map(|c| {
            let info = info.clone();
            async move {
                let mut builder = ClientBuilder::new(info).protocol(c.protocol()?);
                if let Some(t) = c.timeout() {
                    builder = builder.request_timeout(t);
                }
                let client = builder
                    .connect_boxed(c.transport()?)
                    .await
                    .map_err(|source| RegistryError::Connect {
                        name: c.name().to_owned(),
                        source,
                    })?;
                Ok::<_, RegistryError>((c.name().to_owned(), client))
            }
        });
        let results = futures_util::future::join_all(attempts).await;
        let mut registry = ClientRegistry::default();
        let mut failure = None;
        for r in results {
            match r {
                Ok((name, client)) => registry.insert(name, client),
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
        }
        if let Some(e) = failure {
            registry.close().await;
            return Err(e);
        }
        Ok(registry)
    }

    fn insert(&mut self, name: String, client: Client) {
        self.order.push(name.clone());
        self.clients.insert(name, client);
    }

    /// The client named `name`.
    pub fn get(&self, name: &str) -> Option<&Client> {
        self.clients.get(name)
    }

    /// The names, in configuration order.
    pub fn names(&self) -> &[String] {
        &self.order
    }

    /// Closes every connection.
    pub async fn close(&self) {
        futures_util::future::join_all(self.clients.values().map(|c| c.close())).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(toml_text: &str) -> Vec<ClientEntry> {
        toml::from_str::<ClientsConfig>(toml_text).unwrap().clients
    }

    #[test]
    fn an_empty_list_is_a_configuration_error() {
        let e = ClientRegistry::validate(&[]).unwrap_err();
        assert!(e.to_string().contains("no connections configured"), "{e}");
    }

    #[test]
    fn duplicate_names_are_a_configuration_error() {
        let c = parse(
            r#"
            [[clients]]
            name = "a"
            transport = "stdio"
            command = "x"
            [[clients]]
            name = "a"
            transport = "http"
            url = "http://127.0.0.1:1/mcp"
            "#,
        );
        let e = ClientRegistry::validate(&c).unwrap_err();
        assert!(
            e.to_string().contains("duplicate connection name `a`"),
            "{e}"
        );
    }

    #[test]
    fn stdio_http_and_sse_entries_parse() {
        let c = parse(
            r#"
            [[clients]]
            name = "local"
            transport = "stdio"
            command = "toolyard"
            args = ["serve", "--stdio"]
            env = { A = "1" }
            timeout_ms = 500
            protocol = "2025-11-25"
            [[clients]]
            name = "remote"
            transport = "http"
            url = "http://127.0.0.1:1/mcp"
            headers = { Authorization = "Bearer t" }
            [[clients]]
            name = "old"
            transport = "sse"
            url = "http://127.0.0.1:1/sse"
            "#,
        );
        ClientRegistry::validate(&c).unwrap();
        assert_eq!(c[0].timeout(), Some(Duration::from_millis(500)));
        assert_eq!(
            c[0].protocol().unwrap(),
            ProtocolChoice::Legacy(ProtocolVersion::V2025_11_25)
        );
        assert_eq!(c[2].name(), "old");
    }

    #[test]
    fn without_transport_a_url_is_automatic_and_a_command_is_stdio() {
        let c = parse(
            r#"
            [[clients]]
            name = "remote"
            url = "http://127.0.0.1:1/sse"
            headers = { Authorization = "Bearer t" }
            protocol = "2024-11-05"
            [[clients]]
            name = "explicit"
            transport = "auto"
            url = "http://127.0.0.1:1/mcp"
            [[clients]]
            name = "local"
            command = "toolyard"
            inherit_env = ["AWS_PROFILE"]
            inherit_env_defaults = false
            "#,
        );
        ClientRegistry::validate(&c).unwrap();
        assert!(
            matches!(&c[0], ClientEntry::Auto { url, headers, .. }
                if url == "http://127.0.0.1:1/sse" && headers.len() == 1),
            "{:?}",
            c[0]
        );
        assert_eq!(
            c[0].protocol().unwrap(),
            ProtocolChoice::Legacy(ProtocolVersion::V2024_11_05)
        );
        assert!(matches!(&c[1], ClientEntry::Auto { .. }), "{:?}", c[1]);
        assert!(
            matches!(&c[2], ClientEntry::Stdio { inherit_env, inherit_env_defaults: false, .. }
                if inherit_env == &["AWS_PROFILE".to_owned()]),
            "{:?}",
            c[2]
        );
        // The defaults of a stdio entry: the proxy and TLS variables are passed.
        let c = parse("[[clients]]\nname = \"s\"\ntransport = \"stdio\"\ncommand = \"x\"");
        assert!(
            matches!(&c[0], ClientEntry::Stdio { inherit_env, inherit_env_defaults: true, .. }
                if inherit_env.is_empty()),
            "{:?}",
            c[0]
        );
        // Unknown keys and an entry with neither `url` nor `command` are still refused.
        for bad in [
            "[[clients]]\nname = \"x\"\nurl = \"http://h\"\ncomand = \"y\"",
            "[[clients]]\nname = \"x\"\ntransport = \"http\"\nurl = \"http://h\"\ninherit_env = []",
            "[[clients]]\nname = \"x\"",
            "[[clients]]\nname = \"x\"\ntransport = \"carrier-pigeon\"\nurl = \"http://h\"",
        ] {
            let e = toml::from_str::<ClientsConfig>(bad)
                .unwrap_err()
                .to_string();
            assert!(
                e.contains("comand")
                    || e.contains("inherit_env")
                    || e.contains("transport")
                    || e.contains("carrier-pigeon"),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn an_unknown_protocol_version_is_a_configuration_error() {
        let c = parse(
            r#"
            [[clients]]
            name = "x"
            transport = "stdio"
            command = "x"
            protocol = "1999-01-01"
            "#,
        );
        assert!(ClientRegistry::validate(&c).is_err());
    }
}
