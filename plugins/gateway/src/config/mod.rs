//! Sources from configuration: the `[gateway]` section and `[[sources]]` entries of the
//! `toolyard serve` file, resolved (with their plugin manifests) into
//! [`SourceSpec`](crate::SourceSpec)s.
//!
//! ```toml
//! [gateway]
//! separator = "__"                   # <prefix><separator><tool>
//! admin_token = "${TOOLYARD_ADMIN}"  # secret; `${VAR}` takes it from our environment
//! failure_mode = "skip"              # or "fail": what listings do when a source is down
//!
//! [[sources]]
//! name = "github"
//! plugin = "plugins/github"          # a directory with plugin.json or server.json
//! env = { GITHUB_PERSONAL_ACCESS_TOKEN = "${GITHUB_TOKEN}" }
//! lifecycle = "pooled"               # "transient" | "singleton" (default) | "pooled"
//! pool_size = 4
//!
//! [[sources]]
//! name = "time"
//! command = "uvx"
//! args = ["mcp-server-time"]
//! lifecycle = "transient"
//! inherit_env = ["UV_INDEX_URL"]     # more of our variables, besides PATH, HOME and the
//!                                    # proxy / TLS trust-store ones (`inherit_env_defaults`)
//!
//! [[sources]]
//! name = "hosted"
//! url = "https://mcp.example.com/mcp"
//! # transport = "auto" (default): Streamable HTTP, or HTTP+SSE when the POST is refused
//! # and a GET of the URL opens an SSE stream; "http" or "sse" pins one.
//! headers = { Authorization = "Bearer ${HOSTED_TOKEN}" }
//! ```
//!
//! Resolution happens at registration and fails with an error naming the source and the
//! problem: exactly one of `plugin`, `command`, `url`; a command that is neither on `PATH`
//! nor an existing file; a `${VAR}` that is unset; a variable the manifest requires without
//! a value. `${VAR}` is expanded in `env` values, `headers` values and `admin_token`
//! (write `$${` for a literal `${`). Variables the manifest marks secret, and those listed
//! in `secret_env`, become [`EnvVar`](crate::EnvVar)s with `secret: true`; values of
//! headers are always treated as secrets. No value from `env`, `headers` or `admin_token`
//! ever appears in a `Debug` output or an error.
//!
//! The parts: [`sections`] (the serde types), [`expand`] (`${VAR}`), [`locate`] (commands
//! on `PATH`), [`resolve`] (configuration into specs), [`error`] ([`SourceError`]).

mod error;
mod expand;
mod locate;
mod resolve;
mod sections;
#[cfg(test)]
mod testing;

pub use error::SourceError;
pub use expand::Vars;
pub use locate::locate_command;
pub use resolve::{resolve_all, resolve_source, resolve_source_with};
pub use sections::{
    AdminTokenError, FailureModeSetting, GatewayConfig, GatewaySection, LifecycleSetting,
    SourceConfig, TransportSetting,
};
