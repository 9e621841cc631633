//! OpenTelemetry for Toolyard, following the MCP semantic conventions.
//!
//! - [`ObservabilityLayer`]: one [`Layer`](toolyard::Layer) at the server's middleware seam,
//!   so every transport and every method gets a SERVER span `{mcp.method.name} {target}`
//!   and a `mcp.server.operation.duration` point. The span's parent is the W3C context the
//!   request carried in `params._meta` (SEP-414); the handler runs under the span, so what
//!   it calls out to (the gateway's upstream calls, NATS forwarding) continues the trace.
//! - [`ClientObserver`]: a [`RequestObserver`](toolyard_client::RequestObserver) for every
//!   outgoing request, with a CLIENT span and `mcp.client.operation.duration`; it writes its
//!   own span context into the request's `_meta` (and HTTP headers), replacing the caller's.
//! - [`HttpClientObserver`]: the core's [`HttpCallObserver`](toolyard::HttpCallObserver) for
//!   the HTTP calls a handler makes (the built-in connectors'): an HTTP CLIENT span under the
//!   request's server span, whose context the call carries, and `http.client.request.duration`.
//! - [`ObservableToolHandler`], [`ObservableResourceHandler`], [`ObservablePromptHandler`]:
//!   for embedders who wrap their own handlers (an `execute_tool {name}` INTERNAL span, per
//!   the GenAI conventions).
//! - [`CaptureSettings`]: opt-in `gen_ai.tool.call.arguments` / `.result` on the server
//!   span, redacted (credential keys, the config file's secrets) and capped.
//! - [`Telemetry`]: installs OTLP/HTTP export configured by the standard `OTEL_*` variables,
//!   sending with the workspace's own HTTP client; OTLP/gRPC too with the feature `grpc`.
//! - [`LogExport`]: a `tracing_subscriber` layer that exports `tracing` events as OTLP log
//!   records (through `opentelemetry-appender-tracing`), each joined to the trace of the
//!   request it was logged in.
//!
//! Nothing here is on the hot path unless installed: a server without the layer skips the
//! seam entirely (`Layers::is_empty`), a client without an observer skips the observer.

mod capture;
mod client;
mod config;
mod direct;
mod error;
mod export;
mod handlers;
mod http_client;
mod logs;
mod otlp;
mod points;
mod propagation;
mod semconv;
mod server;
mod spans;
mod wall_clock;

pub use capture::CaptureSettings;
pub use client::ClientObserver;
pub use config::{CaptureSection, TelemetryConfig, TelemetrySection};
pub use error::TelemetryError;
pub use export::{OtlpProtocol, Telemetry, TelemetrySettings, SHUTDOWN_GRACE};
pub use handlers::{ObservablePromptHandler, ObservableResourceHandler, ObservableToolHandler};
pub use http_client::HttpClientObserver;
pub use logs::LogExport;
pub use propagation::{parent_context, traceparent_of};
pub use server::ObservabilityLayer;

/// The OpenTelemetry API this crate is built on, for embedders who add spans of their own
/// (the `toolyard agent` command's GenAI spans) on the same providers without a second
/// copy of the dependency to keep in step.
pub use opentelemetry;

/// The instrumentation scope every span and metric of Toolyard carries.
pub const SCOPE: &str = "toolyard";
