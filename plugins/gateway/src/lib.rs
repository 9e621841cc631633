//! The plugin host: third-party MCP servers (local processes described by a manifest or a
//! command, remote HTTP servers) as *sources*, each with a lifecycle (transient, singleton,
//! pooled), supervised (restart with backoff, a circuit breaker, health probes), discovered,
//! and re-exposed through a Toolyard server by the gateway.

#[cfg(feature = "admin")]
mod admin;
mod config;
mod error;
mod gateway;
mod manifest;
mod parked;
mod pool;
mod spec;

#[cfg(feature = "admin")]
pub use admin::admin_router;
pub use config::{
    locate_command, resolve_all, resolve_source, resolve_source_with, AdminTokenError,
    FailureModeSetting, GatewayConfig, GatewaySection, LifecycleSetting, SourceConfig, SourceError,
    TransportSetting, Vars,
};
pub use error::HostError;
pub use gateway::{
    expose_uri, not_relayed_capability, upstream_uri, ExecutionResult, Gateway, GatewayError,
    ListingGuard, SourceStatus,
};
pub use manifest::{
    Argument, CommandLine, Entry, EnvVarDef, HeaderDef, Manifest, ManifestDoc, ManifestError,
    Package, Remote, Runtime, TransportField, MANIFEST_FILES,
};
pub use pool::{ClientFactory, HealthState, Lease, SourceHealth, SourcePool};
pub use spec::{
    EnvVar, FailureMode, Launch, Lifecycle, Naming, ProcessSpec, RemoteSpec, RemoteTransport,
    SourceSpec, Supervision,
};
