//! The serde types of the gateway's sections of the config file (`[gateway]`,
//! `[[sources]]`) and their setting enums, with `Debug`s that hide secret values: what the
//! file says, before any resolution.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

use super::error::SourceError;
use super::expand::{expand, process_env, ExpandError, Vars};
use super::resolve::resolve_all;
use crate::spec::{FailureMode, SourceSpec};

/// What listings do when a source is unhealthy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FailureModeSetting {
    /// Leave it out.
    #[default]
    Skip,
    /// Fail the listing.
    Fail,
}

impl From<FailureModeSetting> for FailureMode {
    fn from(s: FailureModeSetting) -> Self {
        match s {
            FailureModeSetting::Skip => FailureMode::Skip,
            FailureModeSetting::Fail => FailureMode::Fail,
        }
    }
}

/// `lifecycle = "transient" | "singleton" | "pooled"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LifecycleSetting {
    /// A process per call.
    Transient,
    /// One shared process.
    Singleton,
    /// A pool of processes.
    Pooled,
}

/// `transport = "auto" | "http" | "sse"` of a `url` source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TransportSetting {
    /// Streamable HTTP, falling back to HTTP+SSE when the server refuses the POST and a GET
    /// of the URL opens an SSE stream (the default).
    #[default]
    Auto,
    /// Streamable HTTP only.
    #[serde(alias = "streamable-http")]
    Http,
    /// HTTP+SSE (2024-11-05) only.
    Sse,
}

fn default_separator() -> String {
    "__".to_owned()
}

/// The gateway's sections of the config file: `[gateway]` and `[[sources]]`. The file's other
/// sections belong to other crates (the binary composes them), so unknown top-level keys are
/// left alone here; unknown keys inside these sections are refused.
#[derive(Debug, Default, Clone, Deserialize)]
pub struct GatewayConfig {
    /// `[gateway]`.
    #[serde(default)]
    pub gateway: GatewaySection,
    /// `[[sources]]`.
    #[serde(default)]
    pub sources: Vec<SourceConfig>,
}

impl GatewayConfig {
    /// The top-level keys this crate owns.
    pub const SECTIONS: [&'static str; 2] = ["gateway", "sources"];

    /// Parses the gateway's sections of a whole config file's TOML text.
    pub fn parse(text: &str) -> Result<GatewayConfig, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    /// Reads and parses the gateway's sections of a config file.
    pub fn load(path: &Path) -> Result<GatewayConfig, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read config file {}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("invalid config file {}: {e}", path.display()))
    }

    /// Resolves `[[sources]]` (plugin manifests, `${VAR}`, commands on `PATH`) into specs;
    /// `base_dir` is the config file's directory, against which `plugin`, `cwd` and relative
    /// commands are resolved. Every problem is reported at once.
    pub fn resolve_sources(&self, base_dir: &Path) -> Result<Vec<SourceSpec>, SourceError> {
        resolve_all(&self.sources, base_dir, &self.gateway)
    }
}

/// `[gateway] admin_token` is unusable (an unset variable is not an error: it turns the admin
/// API off).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdminTokenError {
    /// A `${` without its `}`.
    #[error("[gateway] admin_token has an unterminated `${{`")]
    Unterminated,
    /// The token is empty: every request would be let in with an empty bearer token.
    #[error("[gateway] admin_token is empty (leave it out to turn the admin API off)")]
    Empty,
}

/// `[gateway]`.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GatewaySection {
    /// Between a source's prefix and an upstream name (default `__`).
    #[serde(default = "default_separator")]
    pub separator: String,
    /// The token of the admin API; may be `${VAR}`. Secret: never printed.
    #[serde(default)]
    pub admin_token: Option<String>,
    /// Default for sources without their own (default `skip`).
    #[serde(default)]
    pub failure_mode: FailureModeSetting,
}

impl Default for GatewaySection {
    fn default() -> Self {
        GatewaySection {
            separator: default_separator(),
            admin_token: None,
            failure_mode: FailureModeSetting::Skip,
        }
    }
}

impl fmt::Debug for GatewaySection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GatewaySection")
            .field("separator", &self.separator)
            .field(
                "admin_token",
                &self.admin_token.as_ref().map(|_| "<secret>"),
            )
            .field("failure_mode", &self.failure_mode)
            .finish()
    }
}

impl GatewaySection {
    /// The admin token with `${VAR}` expanded from our environment.
    /// The admin token with `${VAR}` expanded from our environment. A variable that is not
    /// set leaves the admin API off (with a warning naming it), so a config file that enables
    /// the API from the environment still starts where the variable is not set.
    pub fn admin_token(&self) -> Result<Option<String>, AdminTokenError> {
        self.admin_token_with(&process_env)
    }

    /// The admin token with `${VAR}` expanded from `vars` (see [`GatewaySection::admin_token`]).
    pub fn admin_token_with(&self, vars: Vars<'_>) -> Result<Option<String>, AdminTokenError> {
        let Some(token) = &self.admin_token else {
            return Ok(None);
        };
        match expand(token, vars) {
            Ok(t) if t.is_empty() => Err(AdminTokenError::Empty),
            Ok(t) => Ok(Some(t)),
            Err(ExpandError::Unset(var)) => {
                tracing::warn!(
                    variable = %var,
                    "[gateway] admin_token uses ${{{var}}}, which is not set: the admin API is off"
                );
                Ok(None)
            }
            Err(ExpandError::Unterminated) => Err(AdminTokenError::Unterminated),
        }
    }
}

/// `[[sources]]`: one upstream MCP server.
#[derive(Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceConfig {
    /// Unique name; the default prefix of its tools.
    pub name: String,
    /// A plugin directory (relative to the config file's directory).
    #[serde(default)]
    pub plugin: Option<PathBuf>,
    /// A program to run (on `PATH`, or a path relative to the config file's directory).
    #[serde(default)]
    pub command: Option<String>,
    /// Its arguments.
    #[serde(default)]
    pub args: Option<Vec<String>>,
    /// A remote server.
    #[serde(default)]
    pub url: Option<String>,
    /// Its transport (default `auto`: Streamable HTTP, or HTTP+SSE when the POST is
    /// refused; `http` or `sse` pins one).
    #[serde(default)]
    pub transport: Option<TransportSetting>,
    /// Extra headers of a remote (values may use `${VAR}`; always secret).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Environment variables of a process (values may use `${VAR}`).
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Names in `env` whose values are secret (besides those the manifest marks secret).
    #[serde(default)]
    pub secret_env: Vec<String>,
    /// More of the gateway's environment variables a process gets (besides `PATH`, `HOME`
    /// and, unless `inherit_env_defaults = false`, the proxy and TLS trust-store ones).
    #[serde(default)]
    pub inherit_env: Vec<String>,
    /// Whether a process gets the gateway's proxy and TLS trust-store variables (default
    /// `true`; `StdioTransport::DEFAULT_INHERITED_ENV` lists them).
    #[serde(default)]
    pub inherit_env_defaults: Option<bool>,
    /// Working directory of a process (relative to the config file's directory; default:
    /// the plugin directory, or ours).
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// `transient`, `singleton` (default) or `pooled`.
    #[serde(default)]
    pub lifecycle: Option<LifecycleSetting>,
    /// Pooled: most processes (default 4).
    #[serde(default)]
    pub pool_size: Option<usize>,
    /// Pooled: processes kept warm (default 1).
    #[serde(default)]
    pub min_idle: Option<usize>,
    /// Pooled: concurrent calls per process (default 8).
    #[serde(default)]
    pub max_concurrency: Option<usize>,
    /// Pooled: idle seconds before a process stops (default 300).
    #[serde(default)]
    pub idle_secs: Option<u64>,
    /// Deadline of each call (default 30000).
    #[serde(default)]
    pub timeout_ms: Option<u64>,
    /// Deadline of start and handshake (default 30000).
    #[serde(default)]
    pub startup_timeout_ms: Option<u64>,
    /// A protocol revision to pin (default: probe).
    #[serde(default)]
    pub protocol: Option<String>,
    /// `skip` or `fail` (default: the gateway's).
    #[serde(default)]
    pub failure_mode: Option<FailureModeSetting>,
    /// Prefix of its names (default: the name).
    #[serde(default)]
    pub prefix: Option<String>,
    /// Upstream name -> exposed name.
    #[serde(default)]
    pub aliases: BTreeMap<String, String>,
    /// Only these principals see and use what the source offers (default: everyone).
    #[serde(default)]
    pub audience: Option<Vec<String>>,
    /// Crashes within the window that open the circuit (default 5).
    #[serde(default)]
    pub max_crashes: Option<u32>,
    /// The window (default 60).
    #[serde(default)]
    pub crash_window_secs: Option<u64>,
    /// First restart backoff (default 200).
    #[serde(default)]
    pub backoff_ms: Option<u64>,
    /// Probe interval of an unhealthy source (default 10).
    #[serde(default)]
    pub probe_secs: Option<u64>,
}

/// Formats a map's keys with every value hidden.
struct Hidden<'a>(&'a BTreeMap<String, String>);

impl fmt::Debug for Hidden<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.keys().map(|k| (k, format_args!("<hidden>"))))
            .finish()
    }
}

impl fmt::Debug for SourceConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SourceConfig")
            .field("name", &self.name)
            .field("plugin", &self.plugin)
            .field("command", &self.command)
            .field("args", &self.args)
            .field("url", &self.url)
            .field("transport", &self.transport)
            .field("headers", &Hidden(&self.headers))
            .field("env", &Hidden(&self.env))
            .field("secret_env", &self.secret_env)
            .field("inherit_env", &self.inherit_env)
            .field("inherit_env_defaults", &self.inherit_env_defaults)
            .field("cwd", &self.cwd)
            .field("lifecycle", &self.lifecycle)
            .field("pool_size", &self.pool_size)
            .field("min_idle", &self.min_idle)
            .field("max_concurrency", &self.max_concurrency)
            .field("idle_secs", &self.idle_secs)
            .field("timeout_ms", &self.timeout_ms)
            .field("startup_timeout_ms", &self.startup_timeout_ms)
            .field("protocol", &self.protocol)
            .field("failure_mode", &self.failure_mode)
            .field("prefix", &self.prefix)
            .field("aliases", &self.aliases)
            .field("audience", &self.audience)
            .field("max_crashes", &self.max_crashes)
            .field("crash_window_secs", &self.crash_window_secs)
            .field("backoff_ms", &self.backoff_ms)
            .field("probe_secs", &self.probe_secs)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_keys_and_values_are_rejected() {
        assert!(
            toml::from_str::<SourceConfig>("name = \"x\"\ncomand = \"npx\"")
                .unwrap_err()
                .to_string()
                .contains("comand")
        );
        assert!(toml::from_str::<SourceConfig>("name = \"x\"\nlifecycle = \"forever\"").is_err());
        assert!(toml::from_str::<GatewaySection>("failure_mode = \"explode\"").is_err());
        assert!(toml::from_str::<SourceConfig>("command = \"npx\"")
            .unwrap_err()
            .to_string()
            .contains("name"));
    }

    #[test]
    fn gateway_and_sources_parse_and_reject_unknown_keys() {
        let c = GatewayConfig::parse(
            r#"
            [server]
            name = "not ours"
            [gateway]
            separator = "."
            [[sources]]
            name = "time"
            command = "uvx"
            args = ["mcp-server-time"]
            "#,
        )
        .unwrap();
        assert_eq!(c.gateway.separator, ".");
        assert_eq!(c.sources[0].command.as_deref(), Some("uvx"));
        assert_eq!(GatewayConfig::parse("").unwrap().gateway.separator, "__");
        let err = GatewayConfig::parse("[gateway]\nseperator = \".\"\n").unwrap_err();
        assert!(err.contains("seperator"), "{err}");
        let err =
            GatewayConfig::parse("[[sources]]\nname = \"x\"\ncomand = \"npx\"\n").unwrap_err();
        assert!(err.contains("comand"), "{err}");
    }
}
