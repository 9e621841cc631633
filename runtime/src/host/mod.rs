//! The plugin host: third-party MCP servers (local processes described by a manifest or a
//! command, remote HTTP servers) as *sources*, each with a lifecycle (transient, singleton,
//! pooled), supervised (restart with backoff, a circuit breaker, health probes), discovered,
//! and re-exposed through a Toolyard server by the gateway.

#[cfg(feature = "http")]
pub mod admin;
pub mod config;
pub mod error;
pub mod gateway;
pub mod manifest;
mod parked;
pub mod pool;
pub mod spec;

pub use config::{resolve_all, resolve_source, GatewaySection, SourceConfig, SourceError};
pub use error::HostError;
pub use manifest::{Manifest, ManifestError};
pub use pool::{ClientFactory, HealthState, Lease, SourceHealth, SourcePool};
pub use spec::{
    EnvVar, FailureMode, Launch, Lifecycle, Naming, ProcessSpec, RemoteSpec, RemoteTransport,
    SourceSpec, Supervision,
};
