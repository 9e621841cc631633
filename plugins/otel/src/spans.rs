//! Counting what happens to spans, so an operator sees the ones that never reached the
//! collector: a batch processor drops spans when its bounded queue is full (a slow or dead
//! collector must never slow requests down). Over OTLP/HTTP our own processor
//! (`otlp::EncodingSpanProcessor`) counts them itself; over gRPC the SDK's batch processor
//! only logs that it dropped some, so [`Counted`] wraps it (by value: no span is copied) and
//! counts the spans ended, and [`CountedExporter`] wraps the exporter and counts those
//! exported and those whose export failed. They are published as the counter `toolyard.telemetry.spans` (attribute
//! `outcome`: `ended`, `exported`, `failed`); `ended − exported − failed` is what is queued
//! or was dropped, and at shutdown, once the queue is flushed, what was dropped (logged).

use opentelemetry::Context;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use opentelemetry_sdk::Resource;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The span counts.
#[derive(Debug, Default)]
pub(crate) struct SpanCounts {
    pub(crate) ended: AtomicU64,
    pub(crate) exported: AtomicU64,
    pub(crate) failed: AtomicU64,
}

impl SpanCounts {
    /// Ended spans neither exported nor failed: queued now, or dropped.
    pub(crate) fn unaccounted(&self) -> u64 {
        let ended = self.ended.load(Ordering::Relaxed);
        ended.saturating_sub(
            self.exported.load(Ordering::Relaxed) + self.failed.load(Ordering::Relaxed),
        )
    }
}

/// A span processor counting the spans that end, then handing them on.
#[derive(Debug)]
pub(crate) struct Counted<P> {
    pub(crate) inner: P,
    pub(crate) counts: Arc<SpanCounts>,
}

impl<P: SpanProcessor> SpanProcessor for Counted<P> {
    fn on_start(&self, span: &mut Span, cx: &Context) {
        self.inner.on_start(span, cx);
    }

    fn on_end(&self, span: SpanData) {
        self.counts.ended.fetch_add(1, Ordering::Relaxed);
        self.inner.on_end(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

/// An exporter counting the spans it exported and those whose export failed.
#[derive(Debug)]
pub(crate) struct CountedExporter<E> {
    pub(crate) inner: E,
    pub(crate) counts: Arc<SpanCounts>,
}

impl<E: SpanExporter> SpanExporter for CountedExporter<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let n = batch.len() as u64;
        let result = self.inner.export(batch).await;
        let counter = if result.is_ok() {
            &self.counts.exported
        } else {
            &self.counts.failed
        };
        counter.fetch_add(n, Ordering::Relaxed);
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::trace::{Tracer, TracerProvider};
    use opentelemetry_sdk::trace::{BatchSpanProcessor, InMemorySpanExporter, SdkTracerProvider};

    #[test]
    fn ended_and_exported_spans_are_counted_and_nothing_is_unaccounted_after_shutdown() {
        let counts = Arc::new(SpanCounts::default());
        let exporter = CountedExporter {
            inner: InMemorySpanExporter::default(),
            counts: counts.clone(),
        };
        let provider = SdkTracerProvider::builder()
            .with_span_processor(Counted {
                inner: BatchSpanProcessor::builder(exporter).build(),
                counts: counts.clone(),
            })
            .build();
        let tracer = provider.tracer("t");
        for _ in 0..5 {
            tracer.in_span("s", |_| {});
        }
        provider.shutdown().unwrap();
        assert_eq!(counts.ended.load(Ordering::Relaxed), 5);
        assert_eq!(counts.exported.load(Ordering::Relaxed), 5);
        assert_eq!(counts.unaccounted(), 0);
    }
}
