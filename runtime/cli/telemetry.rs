//! OpenTelemetry for the binary's commands (feature `otel`): installed when an OTLP endpoint
//! is given (`--otel-endpoint` or the standard `OTEL_EXPORTER_OTLP_ENDPOINT`), otherwise
//! nothing is set up and nothing is paid. See `toolyard-otel`.
//!
//! Also the commands' log output ([`init_logging`]): the text on stderr and, once telemetry
//! is installed, the same lines as OTLP log records, behind one filter.

use std::sync::Arc;
use toolyard::ServerBuilder;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::Layer;

/// The subscriber's log-export layer, connected by [`TelemetryArgs::install`]. The subscriber
/// is set before the runtime telemetry needs exists, so the two meet here.
#[cfg(feature = "otel")]
static LOG_EXPORT: std::sync::OnceLock<toolyard_otel::LogExport> = std::sync::OnceLock::new();

/// Sets the process's `tracing` subscriber: lines on stderr, filtered by `filter` (tracing
/// syntax; a bare level needs no directive parser, which would also cost memory at
/// start-up). The OTLP log export sits behind the same filter, so only what is printed is
/// exported.
pub(crate) fn init_logging(filter: &str) {
    match filter.parse::<tracing_subscriber::filter::LevelFilter>() {
        Ok(level) => init_with(level),
        Err(_) => init_with(tracing_subscriber::EnvFilter::new(filter)),
    }
}

fn init_with<F>(filter: F)
where
    F: Layer<tracing_subscriber::Registry> + Send + Sync + 'static,
{
    // The text layer writes the request's trace context itself (`RequestText`), and the
    // log export reads it too: handlers need no `mcp{traceparent}` span.
    toolyard::set_log_span(false);
    let text = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .event_format(RequestText(tracing_subscriber::fmt::format()));
    let logs = tracing_subscriber::registry().with(filter).with(text);
    #[cfg(feature = "otel")]
    let logs = logs.with(
        LOG_EXPORT
            .get_or_init(toolyard_otel::LogExport::new)
            .clone(),
    );
    logs.init();
}

/// The text layer's lines: tracing-subscriber's own format, with the running request's
/// `mcp{traceparent=...}:` where a span's text goes. The context is read from the handler's
/// task-local ([`toolyard::request_traceparent`]) when a line is written, so the handler
/// needs no `tracing` span (turned off in [`init_with`]): opening and closing one in the
/// registry and every layer cost ~3 000 instructions per traced request, logged or not.
struct RequestText<F>(F);

impl<S, N, F> tracing_subscriber::fmt::FormatEvent<S, N> for RequestText<F>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
    F: tracing_subscriber::fmt::FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let Some(tp) = toolyard::request_traceparent() else {
            return self.0.format_event(ctx, writer, event);
        };
        let mut line = String::new();
        self.0.format_event(
            ctx,
            tracing_subscriber::fmt::format::Writer::new(&mut line),
            event,
        )?;
        // Right after the level (`2026-11-27T15:20:00.123456Z  WARN `), where the format
        // writes the spans a line was logged in.
        let level = event.metadata().level().as_str();
        let at = line
            .find(level)
            .map_or(0, |i| i + level.len() + 1)
            .min(line.len());
        line.insert_str(at, &format!("mcp{{traceparent={tp}}}: "));
        writer.write_str(&line)
    }
}

/// Telemetry flags shared by `serve`, `worker` and `client`.
#[derive(clap::Args, Debug, Clone, Default)]
pub(crate) struct TelemetryArgs {
    /// Export traces, metrics and logs over OTLP/HTTP to this base URL (e.g.
    /// http://127.0.0.1:4318); the standard OTEL_* variables work too.
    #[arg(long, value_name = "URL")]
    otel_endpoint: Option<String>,
}

/// Installed telemetry (or nothing).
pub(crate) struct Installed(#[cfg(feature = "otel")] Option<toolyard_otel::Telemetry>);

impl TelemetryArgs {
    /// Installs telemetry for a process named `service` (inside the Tokio runtime);
    /// `prometheus` keeps the metrics for a `/metrics` scrape as well.
    pub(crate) fn install(
        &self,
        service: &str,
        prometheus: bool,
        file: &crate::config_file::TelemetryFile,
    ) -> anyhow::Result<Installed> {
        #[cfg(feature = "otel")]
        {
            // The file's `[telemetry]`, then the flags over it.
            let mut settings = file.telemetry.settings(service);
            if let Some(endpoint) = &self.otel_endpoint {
                settings.endpoint = Some(endpoint.clone());
            }
            settings.prometheus |= prometheus;
            settings.logs = LOG_EXPORT.get().cloned();
            Ok(Installed(toolyard_otel::Telemetry::install(&settings)?))
        }
        #[cfg(not(feature = "otel"))]
        {
            if self.otel_endpoint.is_some() {
                anyhow::bail!("--otel-endpoint needs a toolyard built with the `otel` feature");
            }
            if prometheus {
                anyhow::bail!("--prometheus needs a toolyard built with the `otel` feature");
            }
            let _ = (service, file);
            Ok(Installed())
        }
    }
}

impl Installed {
    /// Whether anything was installed (an endpoint or a scrape was asked for).
    #[cfg_attr(not(feature = "agent"), allow(dead_code))]
    pub(crate) fn is_active(&self) -> bool {
        #[cfg(feature = "otel")]
        return self.0.is_some();
        #[cfg(not(feature = "otel"))]
        false
    }

    /// Adds the server layer (outermost: call before any other `layer`).
    pub(crate) fn layer(&self, builder: ServerBuilder) -> ServerBuilder {
        #[cfg(feature = "otel")]
        if let Some(t) = &self.0 {
            return builder.layer(Arc::new(t.layer()));
        }
        let _ = Arc::<()>::default;
        builder
    }

    /// `GET /metrics` (Prometheus text format), when asked for.
    pub(crate) fn metrics_router(&self) -> Option<axum::Router> {
        #[cfg(feature = "otel")]
        if let Some(t) = &self.0 {
            return t.metrics_router();
        }
        None
    }

    /// Flushes what is queued.
    pub(crate) async fn shutdown(self) {
        #[cfg(feature = "otel")]
        if let Some(t) = self.0 {
            t.shutdown().await;
        }
    }
}
