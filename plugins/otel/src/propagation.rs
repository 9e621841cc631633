//! W3C trace context (`traceparent`, `tracestate`) to and from an OpenTelemetry [`Context`].
//!
//! MCP carries it as plain strings in `params._meta` (SEP-414), and the server and client
//! seams hand it over as such strings, so the conversion is written once here, on the
//! standard propagator.

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{SpanContext, TraceContextExt};
use opentelemetry::Context;
use opentelemetry_sdk::propagation::TraceContextPropagator;

struct Pair<'a> {
    traceparent: Option<&'a str>,
    tracestate: Option<&'a str>,
}

impl Extractor for Pair<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        match key {
            "traceparent" => self.traceparent,
            "tracestate" => self.tracestate,
            _ => None,
        }
    }

    fn keys(&self) -> Vec<&str> {
        vec!["traceparent", "tracestate"]
    }
}

/// The remote parent a `traceparent` (and `tracestate`) names; an empty context when it is
/// absent or malformed (a new trace starts).
pub fn parent_context(traceparent: Option<&str>, tracestate: Option<&str>) -> Context {
    if traceparent.is_none() {
        return Context::new();
    }
    TraceContextPropagator::new().extract_with_context(
        &Context::new(),
        &Pair {
            traceparent,
            tracestate,
        },
    )
}

/// The `traceparent` and `tracestate` (`None` when empty) of the span in `cx`; `None` when
/// `cx` has no valid span.
pub fn traceparent_of(cx: &Context) -> Option<(String, Option<String>)> {
    let span = cx.span();
    trace_headers(span.span_context())
}

/// [`traceparent_of`] for a span context at hand (a span just started): no [`Context`] is
/// built for it.
pub(crate) fn trace_headers(sc: &SpanContext) -> Option<(String, Option<String>)> {
    span_ids(sc).map(|(ids, state)| (toolyard::Traceparent::of(&ids).as_str().to_owned(), state))
}

/// A span context as the server hands it to its handler: its ids, written as text only if
/// read (`toolyard::SpanIds`), and its trace state.
pub(crate) fn span_ids(sc: &SpanContext) -> Option<(toolyard::SpanIds, Option<String>)> {
    if !sc.is_valid() {
        return None;
    }
    // Most spans carry no state: not even an empty header is written for them.
    let state = (*sc.trace_state() != opentelemetry::trace::TraceState::NONE)
        .then(|| sc.trace_state().header())
        .filter(|s| !s.is_empty());
    let ids = toolyard::SpanIds {
        trace_id: sc.trace_id().to_bytes(),
        span_id: sc.span_id().to_bytes(),
        flags: sc.trace_flags().to_u8(),
    };
    Some((ids, state))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_traceparent_round_trips_through_a_context() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let cx = parent_context(Some(tp), Some("vendor=x"));
        let (parent, state) = traceparent_of(&cx).expect("a valid remote span");
        assert_eq!(parent, tp);
        assert_eq!(state.as_deref(), Some("vendor=x"));
    }

    #[test]
    fn an_unsampled_context_keeps_its_flags_in_the_text() {
        let tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00";
        let (parent, state) = traceparent_of(&parent_context(Some(tp), None)).expect("valid");
        assert_eq!(parent, tp);
        assert_eq!(state, None);
    }

    #[test]
    fn a_malformed_or_absent_traceparent_starts_a_new_trace() {
        assert!(traceparent_of(&parent_context(Some("garbage"), None)).is_none());
        assert!(traceparent_of(&parent_context(None, None)).is_none());
    }
}
