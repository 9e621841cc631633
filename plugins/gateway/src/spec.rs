//! What a source is, once its configuration and manifest are resolved: how to reach it, how
//! its processes live, how its names appear in the gateway. Every other part of the host
//! (pools, supervision, the gateway) works from a [`SourceSpec`] and never re-reads files.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;
use toolyard_client::ProtocolChoice;

/// A resolved source.
#[derive(Debug, Clone)]
pub struct SourceSpec {
    /// Unique name; the default namespace of its tools (`<name>__<tool>`).
    pub name: String,
    /// Version and description from the manifest, for listings.
    pub version: Option<String>,
    /// What the source does.
    pub description: Option<String>,
    /// How to reach it.
    pub launch: Launch,
    /// How its processes live (remote sources are always one shared connection).
    pub lifecycle: Lifecycle,
    /// Deadline of every upstream call (default 30 s).
    pub call_timeout: Duration,
    /// How long a connection may take to start and hand-shake (default 30 s).
    pub startup_timeout: Duration,
    /// The protocol generation to speak (default: probe).
    pub protocol: ProtocolChoice,
    /// Supervision: restart backoff and the circuit breaker.
    pub supervision: Supervision,
    /// What the gateway does when this source is unhealthy.
    pub failure_mode: FailureMode,
    /// How the source's names appear in the gateway.
    pub naming: Naming,
    /// The principals its tools, prompts, resources and templates are for (`None`:
    /// everyone): to any other caller they are names the gateway does not have.
    pub audience: Option<Vec<String>>,
}

impl SourceSpec {
    /// A hash of everything that defines the source, secrets included (never shown), to
    /// tell whether a reloaded configuration changed it.
    pub fn fingerprint(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        format!("{self:?}").hash(&mut h);
        match &self.launch {
            Launch::Process(p) => p.env.iter().for_each(|v| v.value.hash(&mut h)),
            Launch::Remote(r) => r.headers.iter().for_each(|(_, v)| v.hash(&mut h)),
        }
        h.finish()
    }
}

/// How to reach a source.
#[derive(Debug, Clone)]
pub enum Launch {
    /// A local process speaking stdio.
    Process(ProcessSpec),
    /// A remote server.
    Remote(RemoteSpec),
}

/// A local process. Its environment is `env`, plus what the stdio transport passes on of
/// ours: `PATH`, `HOME`, the proxy and TLS trust-store variables (unless
/// `inherit_env_defaults` is off) and the names in `inherit_env`; `env` wins over them.
#[derive(Clone)]
pub struct ProcessSpec {
    /// The program (`npx`, `uvx`, `python`, `node`, `docker` or a path).
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Environment variables; secret ones are never printed.
    pub env: Vec<EnvVar>,
    /// Our environment variables passed on as well (their values are ours, never shown).
    pub inherit_env: Vec<String>,
    /// Whether the proxy and TLS trust-store variables are passed on
    /// (`StdioTransport::DEFAULT_INHERITED_ENV`).
    pub inherit_env_defaults: bool,
    /// Working directory (a plugin's directory).
    pub cwd: Option<PathBuf>,
}

impl fmt::Debug for ProcessSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProcessSpec")
            .field("command", &self.command)
            .field("args", &self.args)
            .field("env", &self.env)
            .field("inherit_env", &self.inherit_env)
            .field("inherit_env_defaults", &self.inherit_env_defaults)
            .field("cwd", &self.cwd)
            .finish()
    }
}

/// One environment variable of a process.
#[derive(Clone)]
pub struct EnvVar {
    /// The name.
    pub name: String,
    /// The value.
    pub value: String,
    /// Never shown in logs, errors or listings.
    pub secret: bool,
}

impl fmt::Debug for EnvVar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = if self.secret { "<secret>" } else { &self.value };
        write!(f, "{}={}", self.name, shown)
    }
}

/// A remote server.
#[derive(Clone)]
pub struct RemoteSpec {
    /// The endpoint.
    pub url: String,
    /// Streamable HTTP, the 2024-11-05 HTTP+SSE transport, or whichever the server speaks.
    pub transport: RemoteTransport,
    /// Extra headers (auth tokens): values are treated as secrets.
    pub headers: Vec<(String, String)>,
}

impl fmt::Debug for RemoteSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let headers: Vec<String> = self
            .headers
            .iter()
            .map(|(k, _)| format!("{k}: <secret>"))
            .collect();
        f.debug_struct("RemoteSpec")
            .field("url", &self.url)
            .field("transport", &self.transport)
            .field("headers", &headers)
            .finish()
    }
}

/// The wire of a remote source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RemoteTransport {
    /// Streamable HTTP, falling back to HTTP+SSE (2024-11-05) when the server refuses the
    /// POST and a GET of the URL opens an SSE stream
    /// (`toolyard_client::StreamableHttpTransport::auto`).
    Auto,
    /// Streamable HTTP only.
    StreamableHttp,
    /// HTTP+SSE (2024-11-05) only.
    Sse,
}

/// How a source's processes live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lifecycle {
    /// A process per call, terminated after it.
    Transient,
    /// One process kept alive and shared by every call.
    Singleton,
    /// Up to `size` warm processes, each serving at most `max_concurrency` calls at once;
    /// processes idle longer than `idle` are stopped (the pool keeps `min_idle` warm).
    Pooled {
        /// Most processes.
        size: usize,
        /// Processes kept warm even when idle.
        min_idle: usize,
        /// Concurrent calls per process.
        max_concurrency: usize,
        /// Idle time before a process is stopped.
        idle: Duration,
    },
}

/// Restart backoff and the circuit breaker of a source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Supervision {
    /// First wait before restarting a crashed process; doubles per crash in a row.
    pub backoff_initial: Duration,
    /// Longest wait.
    pub backoff_max: Duration,
    /// Crashes within `window` that open the circuit (the source turns unhealthy).
    pub max_crashes: u32,
    /// The window.
    pub window: Duration,
    /// How often an unhealthy source is probed (a successful probe closes the circuit).
    pub probe_interval: Duration,
}

impl Default for Supervision {
    fn default() -> Self {
        Supervision {
            backoff_initial: Duration::from_millis(200),
            backoff_max: Duration::from_secs(30),
            max_crashes: 5,
            window: Duration::from_secs(60),
            probe_interval: Duration::from_secs(10),
        }
    }
}

/// What the gateway does with an unhealthy source's listings.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FailureMode {
    /// Leave the source out of listings (its tools fail fast if called).
    #[default]
    Skip,
    /// Fail the whole listing with an error naming the source.
    Fail,
}

/// How a source's names appear in the gateway.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Naming {
    /// Prefix of every tool and prompt name (default: the source name).
    pub prefix: String,
    /// Between prefix and name (default `__`).
    pub separator: String,
    /// Upstream tool name -> exposed name, overriding the prefix.
    pub aliases: Vec<(String, String)>,
}

impl Naming {
    /// The default naming of a source: `<source>__<name>`.
    pub fn for_source(source: &str) -> Self {
        Naming {
            prefix: source.to_owned(),
            separator: "__".to_owned(),
            aliases: Vec::new(),
        }
    }

    /// The exposed name of an upstream tool or prompt.
    pub fn expose(&self, upstream: &str) -> String {
        match self.aliases.iter().find(|(from, _)| from == upstream) {
            Some((_, to)) => to.clone(),
            None => format!("{}{}{}", self.prefix, self.separator, upstream),
        }
    }

    /// The upstream name of an exposed one, if it belongs to this source.
    pub fn upstream<'a>(&'a self, exposed: &'a str) -> Option<&'a str> {
        if let Some((from, _)) = self.aliases.iter().find(|(_, to)| to == exposed) {
            return Some(from);
        }
        exposed
            .strip_prefix(self.prefix.as_str())?
            .strip_prefix(self.separator.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_prefix_and_aliases() {
        let mut n = Naming::for_source("time");
        n.aliases.push(("get_current_time".into(), "now".into()));
        assert_eq!(n.expose("convert_time"), "time__convert_time");
        assert_eq!(n.upstream("time__convert_time"), Some("convert_time"));
        assert_eq!(n.expose("get_current_time"), "now");
        assert_eq!(n.upstream("now"), Some("get_current_time"));
        assert_eq!(n.upstream("git__status"), None);
    }

    #[test]
    fn secret_values_never_print() {
        let v = EnvVar {
            name: "TOKEN".into(),
            value: "hunter2".into(),
            secret: true,
        };
        assert_eq!(format!("{v:?}"), "TOKEN=<secret>");
    }
}
