//! Why telemetry could not be set up.

/// Telemetry could not be installed.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The OTLP exporter refused its configuration (an endpoint that is not a URL, ...).
    #[error("OTLP exporter: {0}")]
    Exporter(String),
    /// `OTEL_EXPORTER_OTLP_PROTOCOL` (or the config's `protocol`) names a protocol we do
    /// not speak.
    #[error("OTLP protocol {0:?}: use http/protobuf or grpc")]
    Protocol(String),
    /// gRPC was asked for by a build without it.
    #[error("OTLP over gRPC: this build has no gRPC exporter (crate feature `grpc`; the toolyard binary's `otel-grpc`)")]
    NoGrpc,
    /// There is no Tokio runtime to send exports from.
    #[error("telemetry needs a Tokio runtime")]
    NoRuntime,
}
