//! `tracing` events as OTLP log records, joined to the request they were logged in.
//!
//! The conversion (severity, body, fields as attributes, target, event name) is the
//! OpenTelemetry project's own bridge, `opentelemetry-appender-tracing`. What this module adds:
//!
//! - a slot filled when telemetry is installed: a process sets its `tracing` subscriber up
//!   first thing (so start-up errors are logged), long before the Tokio runtime that
//!   [`Telemetry::install`](crate::Telemetry::install) needs exists. Until then, or when logs
//!   are not exported, the layer costs one atomic load per event that passed the filter.
//! - the request's trace context. A handler runs with its request's `traceparent` in a
//!   task-local ([`toolyard::request_traceparent`]; the actors crate does not depend on
//!   OpenTelemetry, so there is no OpenTelemetry context to read); when a line is logged,
//!   this layer reads it into a context and makes that the current OpenTelemetry context
//!   while the bridge emits, which is where the SDK takes a record's trace id and span id
//!   from. An OpenTelemetry context already current (an embedder's own span) wins: it is
//!   the nearer one.
//! - the export machinery's own events are never exported (`hyper`, `reqwest`, `h2`,
//!   `opentelemetry*`, and over gRPC `tonic`, `tower`): each exported line would send a request whose log lines would be
//!   exported in turn. They still reach the other layers (the text log).
//!
//! Only what the subscriber's filter lets through reaches the layer: put it behind the same
//! global filter as the text output.

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry::Context;
use opentelemetry_appender_tracing::layer::OpenTelemetryTracingBridge;
use opentelemetry_sdk::logs::{SdkLogger, SdkLoggerProvider};
use std::fmt;
use std::sync::{Arc, OnceLock};
use tracing::{Event, Subscriber};
use tracing_subscriber::layer::{Context as LayerContext, Layer};
use tracing_subscriber::registry::LookupSpan;

type Bridge = OpenTelemetryTracingBridge<SdkLoggerProvider, SdkLogger>;

/// A `tracing_subscriber` [`Layer`] that exports events as OTLP log records once telemetry
/// with logs is installed (pass a clone in [`TelemetrySettings::logs`](crate::TelemetrySettings::logs)),
/// each carrying the trace id and span id of the request it was logged in. Cheap to clone:
/// clones share the slot.
#[derive(Clone, Default)]
pub struct LogExport {
    slot: Arc<OnceLock<Bridge>>,
}

impl fmt::Debug for LogExport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LogExport")
            .field("exporting", &self.is_exporting())
            .finish()
    }
}

impl LogExport {
    /// An empty layer, exporting nothing until [`Telemetry::install`](crate::Telemetry::install)
    /// connects it.
    pub fn new() -> LogExport {
        LogExport::default()
    }

    /// A layer exporting to `provider` at once: for embedders (and tests) who build their
    /// own logger provider.
    pub fn with_provider(provider: &SdkLoggerProvider) -> LogExport {
        let export = LogExport::new();
        export.connect(provider);
        export
    }

    /// Whether records are being exported.
    pub fn is_exporting(&self) -> bool {
        self.slot.get().is_some()
    }

    /// Starts exporting to `provider`; `false` when this layer already exports (to the
    /// provider it was first connected to: a subscriber's layers are fixed once it is set).
    pub(crate) fn connect(&self, provider: &SdkLoggerProvider) -> bool {
        self.slot.set(Bridge::new(provider)).is_ok()
    }
}

impl<S> Layer<S> for LogExport
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_event(&self, event: &Event<'_>, ctx: LayerContext<'_, S>) {
        let Some(bridge) = self.slot.get() else {
            return;
        };
        if is_export_machinery(event.metadata().target()) {
            return;
        }
        // Read only now that a line is logged, which most requests never do.
        let request = if Context::map_current(|cx| cx.has_active_span()) {
            None
        } else {
            toolyard::request_traceparent().and_then(|tp| span_context(tp.as_str()))
        };
        let _joined = request.map(|sc| Context::current().with_remote_span_context(sc).attach());
        bridge.on_event(event, ctx);
    }
}

/// Targets whose events come from sending the exports themselves.
fn is_export_machinery(target: &str) -> bool {
    ["hyper", "h2", "reqwest", "opentelemetry", "tonic", "tower"]
        .iter()
        .any(|prefix| target.starts_with(prefix))
}

/// The context a W3C `traceparent` names, read at its fixed places (the actors crate keeps
/// only a checked, 55-byte head).
fn span_context(tp: &str) -> Option<SpanContext> {
    let dashes = [2, 35, 52]
        .iter()
        .all(|&i| tp.as_bytes().get(i) == Some(&b'-'));
    if !dashes || tp.len() != 55 {
        return None;
    }
    let trace_id = TraceId::from(hex_value(tp.get(3..35)?)?);
    let span_id = SpanId::from(u64::try_from(hex_value(tp.get(36..52)?)?).ok()?);
    let flags = if hex_value(tp.get(53..55)?)? & 1 == 1 {
        TraceFlags::SAMPLED
    } else {
        TraceFlags::default()
    };
    Some(SpanContext::new(
        trace_id,
        span_id,
        flags,
        true,
        TraceState::default(),
    ))
}

/// The value of up to 32 lowercase or uppercase hex digits. `from_str_radix`, which the
/// ids' own `from_hex` use, checks and multiplies per digit with overflow checks: it was
/// most of what reading a request's two ids cost.
fn hex_value(text: &str) -> Option<u128> {
    if text.is_empty() || text.len() > 32 {
        return None;
    }
    text.bytes().try_fold(0u128, |acc, b| {
        let digit = match b {
            b'0'..=b'9' => b - b'0',
            b'a'..=b'f' => b - b'a' + 10,
            b'A'..=b'F' => b - b'A' + 10,
            _ => return None,
        };
        Some(acc << 4 | u128::from(digit))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_spans_traceparent_names_its_context_and_sampled_flag() {
        let sc = span_context("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
            .expect("well formed");
        assert_eq!(
            sc.trace_id(),
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap()
        );
        assert_eq!(sc.span_id(), SpanId::from_hex("00f067aa0ba902b7").unwrap());
        assert!(sc.is_sampled() && sc.is_remote());
        let unsampled =
            span_context("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00").unwrap();
        assert!(!unsampled.is_sampled());
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e47zz-00f067aa0ba902b7-01",
        ] {
            assert!(span_context(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn hex_ids_read_as_the_sdks_own_parser_reads_them() {
        for text in [
            "4bf92f3577b34da6a3ce929d0e0e4736",
            "00F067AA0BA902B7",
            "0",
            "ffffffffffffffffffffffffffffffff",
        ] {
            assert_eq!(
                hex_value(text),
                u128::from_str_radix(text, 16).ok(),
                "{text}"
            );
        }
        for bad in ["", "xyz", "-1", "4bf92f3577b34da6a3ce929d0e0e47360"] {
            assert_eq!(hex_value(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn only_the_export_machinerys_own_targets_are_left_out() {
        for t in [
            "hyper_util::client",
            "h2::codec",
            "reqwest::connect",
            "opentelemetry_sdk",
            "tonic::transport",
            "tower::buffer::worker",
        ] {
            assert!(is_export_machinery(t), "{t}");
        }
        for t in ["toolyard", "toolyard_gateway::pool", "my_tool"] {
            assert!(!is_export_machinery(t), "{t}");
        }
    }
}
