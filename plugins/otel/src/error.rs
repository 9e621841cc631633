//! Why telemetry could not be set up.

/// Telemetry could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The OTLP exporter refused its configuration (an endpoint that is not a URL, ...).
    #[error("OTLP exporter: {0}")]
    Exporter(String),
    /// There is no Tokio runtime to send exports from.
    #[error("telemetry needs a Tokio runtime")]
    NoRuntime,
}
