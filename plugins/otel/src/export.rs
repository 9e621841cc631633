//! OTLP export over HTTP/protobuf (or gRPC, feature `grpc`: `OTEL_EXPORTER_OTLP_PROTOCOL`),
//! configured the standard way (`OTEL_EXPORTER_OTLP_ENDPOINT`,
//! `OTEL_EXPORTER_OTLP_LOGS_ENDPOINT`, `OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`,
//! `OTEL_TRACES_SAMPLER`/`_ARG`, `OTEL_METRIC_EXPORT_INTERVAL`, `OTEL_BLRP_*`,
//! `OTEL_TRACES_EXPORTER=none`, `OTEL_METRICS_EXPORTER=none`, `OTEL_LOGS_EXPORTER=none`,
//! `OTEL_SDK_DISABLED`) or by [`TelemetrySettings`].
//!
//! Spans over HTTP go through our own export ([`crate::otlp`]: each span written as protobuf
//! where it ends, by a span processor of ours, ~3 500 instructions per span against
//! opentelemetry-otlp's ~15 500, and no trip through the SDK's batch queue); metrics and log
//! records through opentelemetry-otlp's.
//!
//! Over gRPC the exporter is opentelemetry-otlp's tonic client, built on the runtime that
//! installs telemetry (its channel's worker task runs there). Over HTTP the exporter sends
//! with the workspace's reqwest, not the one `opentelemetry-otlp` would
//! bring (a second reqwest and a blocking client): the span processor, the SDK's log batch
//! processor and its periodic reader run on threads of their own and block on the export future, so the request is
//! spawned onto the Tokio runtime that installed telemetry and the thread waits for its
//! `JoinHandle`, which needs no runtime to be awaited. A dead endpoint costs the export
//! thread a timeout, never a request: spans and log records wait in the batch processors'
//! bounded queues (dropped when they are full; a log line never waits for the collector).
//! The request carries the export thread's OpenTelemetry context onto the runtime, so the
//! SDK's "telemetry suppressed" mark follows it: what the HTTP stack logs while sending
//! logs is not exported again.

use crate::direct::DirectSpans;
use crate::error::TelemetryError;
use crate::logs::LogExport;
use crate::otlp::{EncodingSpanProcessor, HttpSpanSender, Limits};
use crate::spans::{Counted, CountedExporter, SpanCounts};
use crate::{ClientObserver, HttpClientObserver, ObservabilityLayer};
#[cfg(feature = "prometheus")]
use axum::response::IntoResponse;
use bytes::Bytes;
use opentelemetry::context::FutureExt as _;
use opentelemetry::KeyValue;
use opentelemetry_http::{HttpClient, HttpError};
use opentelemetry_otlp::{
    LogExporter, MetricExporter, SpanExporter, WithExportConfig, WithHttpConfig,
};
use opentelemetry_sdk::logs::{BatchLogProcessor, SdkLoggerProvider};
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{BatchSpanProcessor, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use std::sync::Arc;
use std::time::Duration;

/// The OTLP transport (`OTEL_EXPORTER_OTLP_PROTOCOL`, `[telemetry] protocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
pub enum OtlpProtocol {
    /// `http/protobuf`, sent with the workspace's reqwest (the default).
    #[serde(rename = "http/protobuf")]
    HttpProtobuf,
    /// `grpc`: needs the crate feature `grpc` (the binary's `otel-grpc`).
    #[serde(rename = "grpc")]
    Grpc,
}

impl std::str::FromStr for OtlpProtocol {
    type Err = TelemetryError;

    fn from_str(s: &str) -> Result<Self, TelemetryError> {
        match s.trim() {
            "http/protobuf" => Ok(OtlpProtocol::HttpProtobuf),
            "grpc" => Ok(OtlpProtocol::Grpc),
            other => Err(TelemetryError::Protocol(other.to_owned())),
        }
    }
}

impl OtlpProtocol {
    /// `settings` first, then `OTEL_EXPORTER_OTLP_PROTOCOL`, then HTTP/protobuf; a
    /// protocol this build cannot speak is an error, not a silent fallback.
    fn chosen(settings: Option<OtlpProtocol>) -> Result<OtlpProtocol, TelemetryError> {
        let protocol = match settings {
            Some(p) => p,
            None => match std::env::var("OTEL_EXPORTER_OTLP_PROTOCOL") {
                Ok(v) if !v.trim().is_empty() => v.parse()?,
                _ => OtlpProtocol::HttpProtobuf,
            },
        };
        if protocol == OtlpProtocol::Grpc && !cfg!(feature = "grpc") {
            return Err(TelemetryError::NoGrpc);
        }
        Ok(protocol)
    }
}

/// One signal's exporter over `protocol`, its endpoint `base` (plus `path` over HTTP) when
/// set, else the standard variables'. The three exporters' builders share no trait for
/// `with_http` / `with_tonic` / `build`, so this is written once as a macro.
macro_rules! otlp_exporter {
    ($exporter:ident, $protocol:expr, $client:expr, $base:expr, $path:literal) => {
        match $protocol {
            OtlpProtocol::HttpProtobuf => {
                let mut builder = $exporter::builder()
                    .with_http()
                    .with_shared_http_client($client);
                if let Some(base) = $base {
                    builder =
                        builder.with_endpoint(format!("{}{}", base.trim_end_matches('/'), $path));
                }
                builder.build()
            }
            #[cfg(feature = "grpc")]
            OtlpProtocol::Grpc => {
                let mut builder = $exporter::builder().with_tonic();
                if let Some(base) = $base {
                    builder = builder.with_endpoint(base.clone());
                }
                builder.build()
            }
            #[cfg(not(feature = "grpc"))]
            OtlpProtocol::Grpc => return Err(TelemetryError::NoGrpc),
        }
        .map_err(|e| TelemetryError::Exporter(e.to_string()))?
    };
}

/// How long stopping waits for the last exports.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);

/// How telemetry is set up; every unset field falls back to the standard `OTEL_*` variable.
#[derive(Debug, Clone, Default)]
pub struct TelemetrySettings {
    /// The OTLP base endpoint (over HTTP `/v1/traces`, `/v1/metrics` and `/v1/logs` are
    /// appended; over gRPC it is the collector's address as it is); else
    /// `OTEL_EXPORTER_OTLP_ENDPOINT`. With neither, nothing is exported.
    pub endpoint: Option<String>,
    /// How to send; else `OTEL_EXPORTER_OTLP_PROTOCOL`, else HTTP/protobuf.
    pub protocol: Option<OtlpProtocol>,
    /// `service.name` when neither `OTEL_SERVICE_NAME` nor `OTEL_RESOURCE_ATTRIBUTES` names
    /// one (default `toolyard`).
    pub service_name: Option<String>,
    /// Leave traces out (metrics only).
    pub no_traces: bool,
    /// Leave metrics out (traces only).
    pub no_metrics: bool,
    /// Leave log records out (`OTEL_LOGS_EXPORTER=none` does too).
    pub no_logs: bool,
    /// The subscriber's layer that exports `tracing` events as log records: connected to
    /// the logger provider when logs are exported. Without it no logs are exported (the
    /// subscriber is the embedder's to build).
    pub logs: Option<LogExport>,
    /// Also keep the metrics for a Prometheus scrape ([`Telemetry::metrics_router`]); works
    /// without an OTLP endpoint too.
    #[cfg(feature = "prometheus")]
    pub prometheus: bool,
    /// Tool arguments and results on spans (off by default).
    pub capture: crate::CaptureSettings,
}

/// Installed telemetry: the providers, set as the global ones (so
/// [`ObservabilityLayer::global`] and [`ClientObserver::global`] use them). Call
/// [`shutdown`](Self::shutdown) before exit to flush.
#[derive(Debug)]
pub struct Telemetry {
    span_counts: Arc<SpanCounts>,
    capture: crate::CaptureSettings,
    tracer: Option<SdkTracerProvider>,
    /// The server's spans written into our OTLP/HTTP processor's queue (`crate::direct`).
    direct: Option<Arc<DirectSpans>>,
    meter: Option<SdkMeterProvider>,
    logger: Option<SdkLoggerProvider>,
    #[cfg(feature = "prometheus")]
    registry: Option<prometheus::Registry>,
}

impl Telemetry {
    /// Installs export as `settings` and the environment say; `Ok(None)` when there is
    /// nowhere to export to or `OTEL_SDK_DISABLED=true`. Also makes every client built from
    /// now on observed ([`toolyard_client::set_default_observer`]).
    pub fn install(settings: &TelemetrySettings) -> Result<Option<Telemetry>, TelemetryError> {
        if std::env::var("OTEL_SDK_DISABLED").is_ok_and(|v| v.eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        let env_endpoint = [
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT",
        ]
        .iter()
        .any(|v| std::env::var(v).is_ok_and(|e| !e.is_empty()));
        #[cfg(feature = "prometheus")]
        let prometheus = settings.prometheus;
        #[cfg(not(feature = "prometheus"))]
        let prometheus = false;
        let otlp = settings.endpoint.is_some() || env_endpoint;
        if !otlp && !prometheus {
            return Ok(None);
        }
        let protocol = OtlpProtocol::chosen(settings.protocol)?;
        // Durations are read from `Moment`s, whose clock calibrates on its first reading:
        // here, not in the first request a client or a server observes.
        toolyard::Moment::now();
        let runtime =
            tokio::runtime::Handle::try_current().map_err(|_| TelemetryError::NoRuntime)?;
        let reqwest_client = Arc::new(ReqwestOnTokio::new(runtime)?);
        let client: Arc<dyn HttpClient> = reqwest_client.clone();
        let resource = resource(settings);
        // The standard per-signal switches: `none` leaves a signal out.
        let off =
            |var: &str| std::env::var(var).is_ok_and(|v| v.trim().eq_ignore_ascii_case("none"));
        let no_traces = !otlp || settings.no_traces || off("OTEL_TRACES_EXPORTER");
        let no_metrics = settings.no_metrics || off("OTEL_METRICS_EXPORTER");
        let logs = settings
            .logs
            .as_ref()
            .filter(|_| otlp && !settings.no_logs && !off("OTEL_LOGS_EXPORTER"));
        if no_traces && no_metrics && logs.is_none() && !prometheus {
            return Ok(None);
        }
        let span_counts = Arc::new(SpanCounts::default());
        let mut direct = None;
        let tracer = if no_traces {
            None
        } else if protocol == OtlpProtocol::HttpProtobuf {
            // Our own span export over HTTP (see `otlp`): each span written as protobuf
            // where it ends, the batches sent by a thread of its own.
            let sender = HttpSpanSender::new(reqwest_client, settings.endpoint.as_deref())?;
            let processor =
                EncodingSpanProcessor::new(sender, Limits::from_env(), span_counts.clone())
                    .map_err(|e| {
                        TelemetryError::Exporter(format!("starting the span export thread: {e}"))
                    })?;
            // The provider takes the SDK's default configuration, as `DirectSpans` does.
            direct = Some(Arc::new(DirectSpans::new(processor.sink())));
            Some(
                SdkTracerProvider::builder()
                    .with_span_processor(processor)
                    .with_resource(resource.clone())
                    .build(),
            )
        } else {
            let exporter = otlp_exporter!(
                SpanExporter,
                protocol,
                client.clone(),
                settings.endpoint.as_ref(),
                "/v1/traces"
            );
            Some(traced(exporter, &span_counts, &resource))
        };
        let logger = match logs {
            None => None,
            Some(layer) => {
                // The per-signal variable is the more specific setting: it wins over the
                // base endpoint of the flag or the file (the exporter reads it itself).
                let logs_env =
                    std::env::var("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT").is_ok_and(|e| !e.is_empty());
                let base = settings.endpoint.as_ref().filter(|_| !logs_env);
                let exporter =
                    otlp_exporter!(LogExporter, protocol, client.clone(), base, "/v1/logs");
                // A bounded queue (`OTEL_BLRP_MAX_QUEUE_SIZE`, 2048): a full one drops the
                // record, so a dead collector never holds up a line being logged.
                let provider = SdkLoggerProvider::builder()
                    .with_log_processor(BatchLogProcessor::builder(exporter).build())
                    .with_resource(resource.clone())
                    .build();
                if !layer.connect(&provider) {
                    tracing::warn!("telemetry: the log layer already exports elsewhere; logs are not exported here");
                }
                Some(provider)
            }
        };
        let mut meters = SdkMeterProvider::builder().with_resource(resource);
        let mut any_reader = false;
        if otlp && !no_metrics {
            let exporter = otlp_exporter!(
                MetricExporter,
                protocol,
                client,
                settings.endpoint.as_ref(),
                "/v1/metrics"
            );
            meters = meters.with_reader(PeriodicReader::builder(exporter).build());
            any_reader = true;
        }
        #[cfg(feature = "prometheus")]
        let registry = if prometheus {
            let registry = prometheus::Registry::new();
            let reader = opentelemetry_prometheus::exporter()
                .with_registry(registry.clone())
                .build()
                .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
            meters = meters.with_reader(reader);
            any_reader = true;
            Some(registry)
        } else {
            None
        };
        let meter = any_reader.then(|| meters.build());
        if let (Some(m), Some(_)) = (&meter, &tracer) {
            // What became of the spans, for an operator: `ended − exported − failed` is queued
            // or dropped.
            let counts = span_counts.clone();
            let _ = opentelemetry::metrics::MeterProvider::meter(m, crate::SCOPE)
                .u64_observable_counter("toolyard.telemetry.spans")
                .with_description("Spans ended, exported, and whose export failed")
                .with_callback(move |observer| {
                    for (outcome, n) in [
                        ("ended", &counts.ended),
                        ("exported", &counts.exported),
                        ("failed", &counts.failed),
                    ] {
                        observer.observe(
                            n.load(std::sync::atomic::Ordering::Relaxed),
                            &[KeyValue::new("outcome", outcome)],
                        );
                    }
                })
                .build();
        }
        if let Some(t) = &tracer {
            opentelemetry::global::set_tracer_provider(t.clone());
        }
        if let Some(m) = &meter {
            opentelemetry::global::set_meter_provider(m.clone());
        }
        // Metrics only: no span is built per outgoing request either.
        let observer = if tracer.is_none() {
            ClientObserver::global().without_spans()
        } else {
            ClientObserver::global()
        };
        toolyard_client::set_default_observer(Arc::new(observer));
        let http_calls = if tracer.is_none() {
            HttpClientObserver::global().without_spans()
        } else {
            HttpClientObserver::global()
        };
        toolyard::set_http_call_observer(Arc::new(http_calls));
        Ok(Some(Telemetry {
            span_counts,
            capture: settings.capture.clone(),
            tracer,
            direct,
            meter,
            logger,
            #[cfg(feature = "prometheus")]
            registry,
        }))
    }

    /// The server layer over the installed providers.
    pub fn layer(&self) -> ObservabilityLayer {
        let layer = ObservabilityLayer::global().with_capture(&self.capture);
        // Metrics only: no span is built per request.
        match (&self.tracer, &self.direct) {
            (None, _) => layer.without_spans(),
            (Some(_), Some(direct)) => layer.with_direct_spans(direct.clone()),
            (Some(_), None) => layer,
        }
    }

    /// `GET /metrics` in the Prometheus text format, when [`TelemetrySettings::prometheus`]
    /// was set: a router to merge into the HTTP server's.
    #[cfg(feature = "prometheus")]
    pub fn metrics_router(&self) -> Option<axum::Router> {
        let registry = self.registry.clone()?;
        Some(axum::Router::new().route(
            "/metrics",
            axum::routing::get(move || {
                let registry = registry.clone();
                async move {
                    let mut text = String::new();
                    let encoded =
                        prometheus::TextEncoder::new().encode_utf8(&registry.gather(), &mut text);
                    match encoded {
                        Ok(()) => (
                            [(
                                http::header::CONTENT_TYPE,
                                "text/plain; version=0.0.4; charset=utf-8",
                            )],
                            text,
                        )
                            .into_response(),
                        Err(e) => {
                            (http::StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response()
                        }
                    }
                }
            }),
        ))
    }

    /// Flushes what is queued and stops the exporters (blocking work, moved off the
    /// runtime's threads), giving up after [`SHUTDOWN_GRACE`]: an unreachable collector
    /// must not hold up a process that is stopping.
    pub async fn shutdown(self) {
        let Telemetry {
            tracer,
            meter,
            logger,
            span_counts,
            ..
        } = self;
        // Shutting down flushes what is queued. Each signal on its own thread: a collector
        // slow to take the logs does not cost the spans their flush.
        let mut flushes = Vec::new();
        if let Some(l) = logger {
            flushes.push(tokio::task::spawn_blocking(move || drop(l.shutdown())));
        }
        if let Some(t) = tracer {
            flushes.push(tokio::task::spawn_blocking(move || drop(t.shutdown())));
        }
        if let Some(m) = meter {
            flushes.push(tokio::task::spawn_blocking(move || drop(m.shutdown())));
        }
        let flush = async {
            for f in flushes {
                let _ = f.await;
            }
        };
        if tokio::time::timeout(SHUTDOWN_GRACE, flush).await.is_err() {
            tracing::warn!(
                "telemetry: the collector did not take the last exports in time; dropped"
            );
        }
        // Flushed: what is still unaccounted for was dropped (a full queue).
        let dropped = span_counts.unaccounted();
        if dropped > 0 {
            tracing::warn!(
                dropped,
                ended = span_counts.ended.load(std::sync::atomic::Ordering::Relaxed),
                failed = span_counts
                    .failed
                    .load(std::sync::atomic::Ordering::Relaxed),
                "telemetry: spans were dropped (the export queue was full) or never exported"
            );
        }
    }
}

/// The tracer provider over `exporter` (gRPC) behind the SDK's batch processor, its spans
/// counted on both sides of the batch queue (`spans`): a full queue drops spans.
fn traced<E: opentelemetry_sdk::trace::SpanExporter + 'static>(
    exporter: E,
    counts: &Arc<SpanCounts>,
    resource: &Resource,
) -> SdkTracerProvider {
    let exporter = CountedExporter {
        inner: exporter,
        counts: counts.clone(),
    };
    SdkTracerProvider::builder()
        .with_span_processor(Counted {
            inner: BatchSpanProcessor::builder(exporter).build(),
            counts: counts.clone(),
        })
        .with_resource(resource.clone())
        .build()
}

fn resource(settings: &TelemetrySettings) -> Resource {
    let named_by_env = std::env::var("OTEL_SERVICE_NAME").is_ok_and(|v| !v.is_empty())
        || std::env::var("OTEL_RESOURCE_ATTRIBUTES").is_ok_and(|v| v.contains("service.name="));
    let mut builder = Resource::builder()
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")));
    if !named_by_env {
        builder = builder.with_service_name(
            settings
                .service_name
                .clone()
                .unwrap_or_else(|| "toolyard".to_owned()),
        );
    }
    builder.build()
}

/// The workspace's reqwest as the exporters' HTTP client (see the module docs).
#[derive(Debug)]
pub(crate) struct ReqwestOnTokio {
    client: reqwest::Client,
    runtime: tokio::runtime::Handle,
}

impl ReqwestOnTokio {
    /// A client whose requests run on `runtime`, each bounded by 10 s unless told otherwise.
    pub(crate) fn new(runtime: tokio::runtime::Handle) -> Result<ReqwestOnTokio, TelemetryError> {
        Ok(ReqwestOnTokio {
            client: reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .build()
                .map_err(|e| TelemetryError::Exporter(e.to_string()))?,
            runtime,
        })
    }

    /// Sends `request` on the runtime and waits for the answer from any thread; `timeout`
    /// bounds this request (else the client's 10 s).
    pub(crate) async fn send(
        &self,
        request: http::Request<Bytes>,
        timeout: Option<Duration>,
    ) -> Result<http::Response<Bytes>, HttpError> {
        let client = self.client.clone();
        let sent = self.runtime.spawn(
            async move {
                let (parts, body) = request.into_parts();
                let mut builder = client
                    .request(parts.method, parts.uri.to_string())
                    .headers(parts.headers)
                    .body(body);
                if let Some(t) = timeout {
                    builder = builder.timeout(t);
                }
                let response = builder.send().await?;
                let status = response.status();
                let headers = response.headers().clone();
                let body = response.bytes().await?;
                let mut answer = http::Response::new(body);
                *answer.status_mut() = status;
                *answer.headers_mut() = headers;
                Ok::<_, HttpError>(answer)
            }
            .with_current_context(),
        );
        sent.await?
    }
}

#[async_trait::async_trait]
impl HttpClient for ReqwestOnTokio {
    async fn send_bytes(
        &self,
        request: http::Request<Bytes>,
    ) -> Result<http::Response<Bytes>, HttpError> {
        self.send(request, None).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_protocol_is_http_protobuf_or_grpc_and_grpc_needs_the_feature() {
        assert!(matches!(
            "http/json".parse::<OtlpProtocol>(),
            Err(TelemetryError::Protocol(p)) if p == "http/json"
        ));
        assert_eq!(
            " grpc".parse::<OtlpProtocol>().ok(),
            Some(OtlpProtocol::Grpc)
        );
        assert_eq!(
            OtlpProtocol::chosen(Some(OtlpProtocol::HttpProtobuf)).ok(),
            Some(OtlpProtocol::HttpProtobuf)
        );
        let grpc = OtlpProtocol::chosen(Some(OtlpProtocol::Grpc));
        if cfg!(feature = "grpc") {
            assert_eq!(grpc.ok(), Some(OtlpProtocol::Grpc));
        } else {
            assert!(
                matches!(&grpc, Err(TelemetryError::NoGrpc)),
                "a build without gRPC says so: {grpc:?}"
            );
        }
    }
}
