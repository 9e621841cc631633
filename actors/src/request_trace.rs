//! The trace context of the request whose handler is running, for the code the handler runs:
//! its log lines and its outbound calls join the request's trace.
//!
//! A handler whose request has a W3C trace context (a telemetry layer's server span, or what
//! the caller sent) runs with that context in a task-local: [`request_traceparent`] and
//! [`request_tracestate`] read it. A log layer (toolyard-otel's `LogExport`, the binary's
//! text log) takes the request's ids from there when a line is logged, which most requests
//! never do; a connector's HTTP client puts them on the requests it sends (through the
//! [`HttpCallObserver`](crate::HttpCallObserver) when one is set, which makes a CLIENT span of
//! the call). Setting the task-local costs one reference count and a pointer copy per poll.
//!
//! By default the handler also runs in the `tracing` span `mcp{traceparent=...}` (ERROR
//! level, so any filter that lets a line through keeps it), which any subscriber renders
//! without knowing about Toolyard. That span costs ~3 000 instructions per traced request
//! (opening and closing it in the `tracing` registry and every layer), whether the handler
//! logs or not. A process whose subscriber reads [`request_traceparent`] itself turns it off
//! with [`set_log_span`]`(false)`, as the `toolyard` binary does.

use crate::context::TraceContext;
use crate::middleware::SpanIds;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

tokio::task_local! {
    /// The request's trace context as it came, not yet checked: most requests never log
    /// nor call out, so the check is left to the readers (it was ~450 instructions of every
    /// traced request).
    static REQUEST_TRACE: Option<Arc<TraceContext>>;
}

static LOG_SPAN: AtomicBool = AtomicBool::new(true);

/// Whether handlers also run in the `tracing` span `mcp{traceparent}` (the default: `true`).
/// Process-wide, as the subscriber that would render the span is.
pub fn set_log_span(on: bool) {
    LOG_SPAN.store(on, Ordering::Relaxed);
}

/// The `traceparent` of the request whose handler is running on this task, if it has one.
pub fn request_traceparent() -> Option<Traceparent> {
    REQUEST_TRACE
        .try_with(|trace| trace.as_deref().and_then(|t| t.parent.as_ref()?.checked()))
        .ok()
        .flatten()
}

/// The W3C `tracestate` that goes with [`request_traceparent`], if the request has one
/// and its `traceparent` is well formed. As the caller sent it (or the telemetry layer's
/// span has it): a writer that puts it in a header checks it is a valid header value.
pub fn request_tracestate() -> Option<String> {
    REQUEST_TRACE
        .try_with(|trace| {
            let t = trace.as_deref()?;
            t.parent.as_ref()?.checked()?;
            t.tracestate.clone()
        })
        .ok()
        .flatten()
}

/// The W3C `baggage` of the request whose handler is running on this task, if it has one:
/// as the caller sent it, to be passed on unchanged (a writer that puts it in a header
/// checks it is a valid header value).
pub fn request_baggage() -> Option<String> {
    REQUEST_TRACE
        .try_with(|trace| trace.as_deref()?.baggage.clone())
        .ok()
        .flatten()
}

/// A W3C `traceparent` head, `vv-{32 hex}-{16 hex}-ff`: hex digits and dashes only, so its
/// text goes into a log line as it is (nothing in it needs escaping).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Traceparent([u8; 55]);

impl Traceparent {
    /// The head of a caller's `traceparent` (a later version may append `-...` fields,
    /// which are dropped), or `None` when it has not that shape: the text goes into log
    /// lines, so a caller's line breaks or escape codes never do.
    pub fn checked(tp: &str) -> Option<Traceparent> {
        Traceparent::checked_head(head_of(tp)?)
    }

    /// The head of a `traceparent`, once its bytes are known to have the right shape.
    fn checked_head(head: [u8; 55]) -> Option<Traceparent> {
        let shape = head.iter().enumerate().all(|(i, b)| match i {
            2 | 35 | 52 => *b == b'-',
            _ => b.is_ascii_hexdigit(),
        });
        shape.then_some(Traceparent(head))
    }

    /// A span's, written from its parts: `00-{trace id}-{span id}-{flags}` (one array, no
    /// `format!`: this runs for every traced request whose context is read).
    pub fn of(ids: &SpanIds) -> Traceparent {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut out = [0u8; 55];
        out[..2].copy_from_slice(b"00");
        let mut at = 2;
        for part in [&ids.trace_id[..], &ids.span_id[..], &[ids.flags][..]] {
            out[at] = b'-';
            at += 1;
            for b in part {
                out[at] = HEX[usize::from(b >> 4)];
                out[at + 1] = HEX[usize::from(b & 0xf)];
                at += 2;
            }
        }
        Traceparent(out)
    }

    /// The text, `00-{trace id}-{span id}-{flags}`.
    pub fn as_str(&self) -> &str {
        // Only ASCII hex digits and dashes were let in (`checked`).
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl std::fmt::Debug for Traceparent {
    // Written as one copy: the span's field and the log layers read it through `Debug`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::fmt::Display for Traceparent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The first 55 bytes of a `traceparent`, when it has that many and nothing but a further
/// `-...` field after them (a later version's); their shape is checked by the reader.
fn head_of(tp: &str) -> Option<[u8; 55]> {
    let bytes = tp.as_bytes();
    let ends = bytes.get(55).is_none_or(|&b| b == b'-');
    let mut head = [0; 55];
    head.copy_from_slice(bytes.get(..55)?);
    ends.then_some(head)
}

/// Runs `fut` with `trace` as the request's (see the module docs), in the
/// `mcp{traceparent}` span unless that is turned off.
pub(crate) fn with_request_trace<F: std::future::Future>(
    trace: Option<Arc<TraceContext>>,
    fut: F,
) -> impl std::future::Future<Output = F::Output> {
    use tracing::Instrument;
    let span = if LOG_SPAN.load(Ordering::Relaxed) {
        // The span's field goes into log lines as it is: checked now.
        match trace.as_deref().and_then(|t| t.parent.as_ref()?.checked()) {
            Some(tp) => tracing::error_span!(target: "toolyard", "mcp", traceparent = ?tp),
            None => tracing::Span::none(),
        }
    } else {
        tracing::Span::none()
    };
    REQUEST_TRACE.scope(trace, fut.instrument(span))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_well_formed_traceparent_head_is_a_request_traceparent() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        assert_eq!(
            Traceparent::checked(tp).map(|t| t.to_string()),
            Some(tp.into())
        );
        // A later version's extra fields are dropped; the head is kept.
        assert_eq!(
            Traceparent::checked(&format!("{tp}-what-comes-next")).map(|t| t.to_string()),
            Some(tp.into())
        );
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
            "00-4bf92f3577b34da6a3ce929d0e0e473\n-00f067aa0ba902b7-01",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-\u{1b}[",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902é-01",
        ] {
            assert_eq!(Traceparent::checked(bad), None, "{bad:?}");
        }
    }

    fn trace(traceparent: &str, tracestate: Option<&str>) -> Arc<TraceContext> {
        Arc::new(TraceContext {
            parent: Some(crate::context::Parent::Text(traceparent.into())),
            tracestate: tracestate.map(Into::into),
            baggage: Some("tenant=acme".into()),
        })
    }

    #[tokio::test]
    async fn the_handler_and_only_the_handler_sees_its_requests_trace_context() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let seen = with_request_trace(Some(trace(tp, Some("k=v"))), async {
            tokio::task::yield_now().await;
            (
                request_traceparent().map(|t| t.to_string()),
                request_tracestate(),
                request_baggage(),
            )
        })
        .await;
        assert_eq!(
            seen,
            (
                Some(tp.into()),
                Some("k=v".into()),
                Some("tenant=acme".into())
            )
        );
        assert_eq!(request_traceparent(), None, "outside the handler");
        assert_eq!(request_tracestate(), None, "outside the handler");
        assert_eq!(request_baggage(), None, "outside the handler");
        let none = with_request_trace(Some(trace("not a traceparent", Some("k=v"))), async {
            (request_traceparent(), request_tracestate())
        });
        assert_eq!(none.await, (None, None), "no state without its traceparent");
        // Baggage stands alone: it is passed on with or without a trace context.
        let alone = Arc::new(TraceContext {
            parent: None,
            tracestate: None,
            baggage: Some("k=v".into()),
        });
        let baggage = with_request_trace(Some(alone), async { request_baggage() });
        assert_eq!(baggage.await.as_deref(), Some("k=v"));
        // Of the right length but not of the right shape: refused when read.
        let bad = "00-4bf92f3577b34da6a3ce929d0e0e473\n-00f067aa0ba902b7-01";
        let refused = with_request_trace(Some(trace(bad, None)), async { request_traceparent() });
        assert_eq!(refused.await, None);
    }

    /// A layer's span is handed over in its parts and written as the same text when read.
    #[tokio::test]
    async fn a_layers_span_reads_as_its_traceparent() {
        let ids = SpanIds {
            trace_id: [
                0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce, 0x92, 0x9d, 0x0e, 0x0e,
                0x47, 0x36,
            ],
            span_id: [0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7],
            flags: 1,
        };
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let trace = Arc::new(TraceContext {
            parent: Some(crate::context::Parent::span(ids)),
            tracestate: Some("k=v".into()),
            baggage: None,
        });
        assert_eq!(trace.traceparent(), Some(tp));
        let seen = with_request_trace(Some(trace), async {
            (
                request_traceparent().map(|t| t.to_string()),
                request_tracestate(),
            )
        });
        assert_eq!(seen.await, (Some(tp.into()), Some("k=v".into())));
    }
}
