//! The span processor in front of our OTLP/HTTP export: each span is written as protobuf
//! where it ends, on the thread that ends it, into the batch being filled; a thread of its
//! own sends the batches.
//!
//! Why not the SDK's `BatchSpanProcessor` in front of a `SpanExporter`: it moves each
//! finished span (a ~400-byte `SpanData`) through a channel and into the exporter's `Vec`,
//! and its export thread frees what the request's thread allocated (the allocator's
//! cross-thread path), and the batch is encoded there. Here a span is read once, where it
//! ends, and freed there; what is kept per span is its encoding (~350 bytes), in buffers
//! that are reused batch after batch. `benches/callgrind.sh stdio-full` (stop 40): 23 063 →
//! 21 666 instructions per traced call (the export thread's 3 594 per span down to 286, the
//! request's thread doing the encoding: +1 907).
//!
//! The batch processor's contract stays: `OTEL_BSP_MAX_QUEUE_SIZE` spans wait at most
//! (more are dropped, and counted: a dead collector never slows a request),
//! `OTEL_BSP_MAX_EXPORT_BATCH_SIZE` spans make a batch that is sent at once,
//! `OTEL_BSP_SCHEDULE_DELAY` is the longest a span waits for its batch to be sent; a flush
//! or a shutdown sends everything queued before it, within its timeout.

use super::encode::{EncodedBatch, EncodedResource};
use super::traces::HttpSpanSender;
use crate::spans::SpanCounts;
use bytes::Bytes;
use opentelemetry::{Context, InstrumentationScope};
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{Span, SpanData, SpanProcessor};
use opentelemetry_sdk::Resource;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// The batch processor's limits, from the standard `OTEL_BSP_*` variables (the SDK's
/// defaults otherwise).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Spans waiting at most (ended, not yet being sent).
    pub(crate) max_queue: usize,
    /// Spans per request.
    pub(crate) max_batch: usize,
    /// The longest a span waits before its batch is sent.
    pub(crate) delay: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_queue: 2048,
            max_batch: 512,
            delay: Duration::from_millis(5000),
        }
    }
}

impl Limits {
    /// The defaults, overridden by `OTEL_BSP_MAX_QUEUE_SIZE`, `OTEL_BSP_MAX_EXPORT_BATCH_SIZE`
    /// and `OTEL_BSP_SCHEDULE_DELAY` (milliseconds); a value that is not a number is ignored,
    /// and a batch is never larger than the queue (as the SDK has it).
    pub(crate) fn from_env() -> Limits {
        Limits::from_vars(|name| std::env::var(name).ok())
    }

    fn from_vars(var: impl Fn(&str) -> Option<String>) -> Limits {
        let number = |name: &str| var(name).and_then(|v| v.trim().parse::<u64>().ok());
        let mut limits = Limits::default();
        if let Some(n) = number("OTEL_BSP_MAX_QUEUE_SIZE").filter(|n| *n > 0) {
            limits.max_queue = usize::try_from(n).unwrap_or(usize::MAX);
        }
        if let Some(n) = number("OTEL_BSP_MAX_EXPORT_BATCH_SIZE").filter(|n| *n > 0) {
            limits.max_batch = usize::try_from(n).unwrap_or(usize::MAX);
        }
        if let Some(ms) = number("OTEL_BSP_SCHEDULE_DELAY") {
            limits.delay = Duration::from_millis(ms);
        }
        limits.max_batch = limits.max_batch.min(limits.max_queue);
        limits
    }
}

/// Spans written as they end, sent in batches by a thread of its own (see the module docs).
#[derive(Debug)]
pub(crate) struct EncodingSpanProcessor {
    shared: Arc<Shared>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

#[derive(Debug)]
struct Shared {
    queue: Mutex<Queue>,
    /// Wakes the sending thread: a batch is full, a flush was asked for, or stopping.
    work: Condvar,
    /// Wakes those waiting for a flush: a batch was sent.
    sent: Condvar,
    limits: Limits,
    counts: Arc<SpanCounts>,
    /// Written once by `set_resource`, before the first span.
    resource: Mutex<Arc<EncodedResource>>,
}

#[derive(Debug, Default)]
struct Queue {
    /// The batch the spans that end are written into.
    filling: EncodedBatch,
    /// Batches waiting to be sent, oldest first.
    full: VecDeque<EncodedBatch>,
    /// Batches sent and emptied, their buffers kept for the next spans.
    spare: Vec<EncodedBatch>,
    /// Spans in `filling` and `full`.
    queued: usize,
    /// Batches moved to `full` so far, and batches whose sending has finished: a flush
    /// waits until the second reaches what the first was when it was asked.
    sealed: u64,
    done: u64,
    stopping: bool,
}

impl Queue {
    /// Closes the batch being filled (when it has spans): it is the next to go.
    fn seal(&mut self) {
        if self.filling.len() == 0 {
            return;
        }
        let fresh = self.spare.pop().unwrap_or_default();
        let batch = std::mem::replace(&mut self.filling, fresh);
        self.full.push_back(batch);
        self.sealed += 1;
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl EncodingSpanProcessor {
    /// Starts the sending thread.
    pub(crate) fn new(
        sender: HttpSpanSender,
        limits: Limits,
        counts: Arc<SpanCounts>,
    ) -> std::io::Result<EncodingSpanProcessor> {
        let shared = Arc::new(Shared {
            queue: Mutex::new(Queue::default()),
            work: Condvar::new(),
            sent: Condvar::new(),
            limits,
            counts,
            resource: Mutex::new(Arc::new(EncodedResource::default())),
        });
        let thread = {
            let shared = shared.clone();
            std::thread::Builder::new()
                .name("toolyard-otlp-spans".to_owned())
                .spawn(move || send_batches(&shared, &sender))?
        };
        Ok(EncodingSpanProcessor {
            shared,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// Seals what is queued and waits until it is sent (or failed), at most `timeout`.
    fn drain(&self, timeout: Duration, stop: bool) -> OTelSdkResult {
        let deadline = Instant::now() + timeout;
        let mut q = lock(&self.shared.queue);
        if stop {
            if q.stopping {
                return Err(OTelSdkError::AlreadyShutdown);
            }
            q.stopping = true;
        }
        q.seal();
        let target = q.sealed;
        self.shared.work.notify_one();
        while q.done < target {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(OTelSdkError::Timeout(timeout));
            }
            q = self
                .shared
                .sent
                .wait_timeout(q, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        Ok(())
    }
}

/// Where the server's direct span path (`crate::direct`) writes its spans: the processor's
/// own queue, under its limits and counts, sent by its thread, flushed and shut down with it.
#[derive(Debug, Clone)]
pub(crate) struct SpanSink(Arc<Shared>);

impl SpanSink {
    /// Copies a sampled span's body ([`SpanEncoder`](super::SpanEncoder)'s) into the batch
    /// being filled (dropped, and counted, when the queue is full or the pipeline is shut
    /// down).
    pub(crate) fn push(&self, scope: &InstrumentationScope, body: &[u8]) {
        self.0.enqueue(|batch| batch.push_encoded(scope, body));
    }
}

#[cfg(test)]
impl SpanSink {
    /// The batch being filled as the request that would send it, emptied (for tests that
    /// read what was written without sending it).
    pub(crate) fn take_request(&self) -> Vec<u8> {
        let resource = lock(&self.0.resource).clone();
        let mut q = lock(&self.0.queue);
        let body = q.filling.request(&resource);
        q.queued -= q.filling.len();
        q.filling.clear();
        body
    }
}

impl Shared {
    /// One ended span into the batch being filled, under the queue's limit.
    fn enqueue(&self, write: impl FnOnce(&mut EncodedBatch)) {
        self.counts.ended.fetch_add(1, Ordering::Relaxed);
        let mut q = lock(&self.queue);
        // Full, or stopped: dropped, and counted as such (ended, never exported or failed).
        if q.stopping || q.queued >= self.limits.max_queue {
            return;
        }
        write(&mut q.filling);
        q.queued += 1;
        if q.filling.len() >= self.limits.max_batch {
            q.seal();
            self.work.notify_one();
        }
    }
}

impl EncodingSpanProcessor {
    /// A handle that writes spans given by their parts into this processor's queue.
    pub(crate) fn sink(&self) -> SpanSink {
        SpanSink(self.shared.clone())
    }
}

impl Drop for EncodingSpanProcessor {
    /// Dropped without a shutdown: the thread sends what is queued and stops, unwaited for.
    fn drop(&mut self) {
        let mut q = lock(&self.shared.queue);
        q.stopping = true;
        q.seal();
        self.shared.work.notify_one();
    }
}

impl SpanProcessor for EncodingSpanProcessor {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        self.shared.enqueue(|batch| batch.push(&span));
        // The span is freed here, on the thread that made it (not under the queue's lock).
        drop(span);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.drain(Duration::from_secs(30), false)
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        let drained = self.drain(timeout, true);
        if drained.is_ok() {
            // The thread has sent the last batch and stops: nothing is left to wait for.
            if let Some(thread) = lock(&self.thread).take() {
                let _ = thread.join();
            }
        }
        drained
    }

    fn set_resource(&mut self, resource: &Resource) {
        *lock(&self.shared.resource) = Arc::new(EncodedResource::new(resource));
    }
}

/// The sending thread: each full batch as soon as there is one, the batch being filled when
/// its time has come; after a stop, what is left, then it returns.
fn send_batches(shared: &Shared, sender: &HttpSpanSender) {
    // What the HTTP stack logs or traces while sending is not exported again.
    let _suppressed = Context::enter_telemetry_suppressed_scope();
    let mut due = Instant::now() + shared.limits.delay;
    let mut failing = false;
    let mut q = lock(&shared.queue);
    loop {
        if let Some(mut batch) = q.full.pop_front() {
            q.queued -= batch.len();
            drop(q);
            let resource = lock(&shared.resource).clone();
            let body = Bytes::from(batch.request(&resource));
            let sent = futures_executor::block_on(sender.send(body));
            // A collector that goes away is said once, and so is its return.
            let counter = match &sent {
                Ok(()) => {
                    if std::mem::take(&mut failing) {
                        tracing::info!("telemetry: spans are exported again");
                    }
                    &shared.counts.exported
                }
                Err(e) => {
                    if std::mem::replace(&mut failing, true) {
                        tracing::debug!(error = %e, spans = batch.len(), "telemetry: span export failed");
                    } else {
                        tracing::warn!(error = %e, spans = batch.len(), "telemetry: span export failed");
                    }
                    &shared.counts.failed
                }
            };
            counter.fetch_add(batch.len() as u64, Ordering::Relaxed);
            batch.clear();
            q = lock(&shared.queue);
            // One spare is enough: the batch being filled takes it when it is sealed.
            if q.spare.is_empty() {
                q.spare.push(batch);
            }
            q.done += 1;
            shared.sent.notify_all();
            continue;
        }
        if q.stopping {
            return;
        }
        let now = Instant::now();
        if now >= due {
            q.seal();
            due = now + shared.limits.delay;
            continue;
        }
        q = shared
            .work
            .wait_timeout(q, due - now)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::ReqwestOnTokio;
    use opentelemetry::trace::{Span as _, Tracer as _, TracerProvider as _};
    use opentelemetry_sdk::trace::SdkTracerProvider;
    use toolyard_testkit::OtlpReceiver;

    /// The runtime the sends run on; the test's own thread stays free to block.
    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap()
    }

    fn processor(
        rt: &tokio::runtime::Runtime,
        base: &str,
        timeout: Duration,
        limits: Limits,
    ) -> (EncodingSpanProcessor, Arc<SpanCounts>) {
        let client = Arc::new(ReqwestOnTokio::new(rt.handle().clone()).unwrap());
        let sender = HttpSpanSender::new(client, Some(base))
            .unwrap()
            .with_timeout(timeout);
        let counts = Arc::new(SpanCounts::default());
        let processor = EncodingSpanProcessor::new(sender, limits, counts.clone()).unwrap();
        (processor, counts)
    }

    fn provider(processor: EncodingSpanProcessor) -> SdkTracerProvider {
        SdkTracerProvider::builder()
            .with_span_processor(processor)
            .with_resource(
                Resource::builder()
                    .with_service_name("processor-test")
                    .build(),
            )
            .build()
    }

    #[test]
    fn a_full_batch_is_sent_at_once_and_a_flush_sends_the_rest_in_order() {
        let rt = runtime();
        let receiver = OtlpReceiver::start();
        let limits = Limits {
            max_queue: 100,
            max_batch: 3,
            delay: Duration::from_secs(3600),
        };
        let (processor, counts) = processor(&rt, &receiver.url(), Duration::from_secs(10), limits);
        let provider = provider(processor);
        let tracer = provider.tracer("processor-test");
        for i in 0..7 {
            tracer.start(format!("span {i}")).end();
        }
        // Two batches of three went without waiting for the schedule.
        receiver.wait_for_spans(Duration::from_secs(20), |s| s.len() == 6);
        assert_eq!(receiver.trace_headers().len(), 2);
        provider.force_flush().unwrap();
        let spans = receiver.spans();
        let names: Vec<_> = spans.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(
            names,
            (0..7).map(|i| format!("span {i}")).collect::<Vec<_>>()
        );
        assert_eq!(receiver.trace_headers().len(), 3);
        assert!(spans.iter().all(|s| s.service == "processor-test"));
        assert_eq!(counts.ended.load(Ordering::Relaxed), 7);
        assert_eq!(counts.exported.load(Ordering::Relaxed), 7);
        assert_eq!(counts.unaccounted(), 0);
        provider.shutdown().unwrap();
        // Spans ended after the shutdown are not queued.
        tracer.start("late").end();
        assert_eq!(receiver.spans().len(), 7);
    }

    #[test]
    fn spans_ended_on_many_threads_at_once_all_arrive_once() {
        let rt = runtime();
        let receiver = OtlpReceiver::start();
        let limits = Limits {
            max_queue: 100_000,
            max_batch: 64,
            delay: Duration::from_millis(20),
        };
        let (processor, counts) = processor(&rt, &receiver.url(), Duration::from_secs(10), limits);
        let provider = provider(processor);
        std::thread::scope(|scope| {
            for t in 0..4 {
                let tracer = provider.tracer("processor-test");
                scope.spawn(move || {
                    for i in 0..500 {
                        tracer.start(format!("{t}/{i}")).end();
                    }
                });
            }
        });
        provider.force_flush().unwrap();
        let mut names: Vec<_> = receiver.spans().into_iter().map(|s| s.name).collect();
        assert_eq!(names.len(), 2000);
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 2000, "each span once");
        assert_eq!(counts.exported.load(Ordering::Relaxed), 2000);
        assert_eq!(counts.unaccounted(), 0);
        provider.shutdown().unwrap();
    }

    #[test]
    fn while_the_collector_hangs_the_queue_holds_its_limit_and_drops_the_rest() {
        let rt = runtime();
        // A collector that takes connections and never answers.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (accepted, connected) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for stream in listener.incoming() {
                held.push(stream);
                let _ = accepted.send(());
            }
        });
        let limits = Limits {
            max_queue: 4,
            max_batch: 2,
            delay: Duration::from_secs(3600),
        };
        let (processor, counts) = processor(&rt, &base, Duration::from_secs(30), limits);
        let shared = processor.shared.clone();
        let provider = provider(processor);
        let tracer = provider.tracer("processor-test");
        tracer.start("first").end();
        tracer.start("second").end();
        // The first batch is on its way, and stays there.
        connected.recv_timeout(Duration::from_secs(20)).unwrap();
        for i in 0..10 {
            tracer.start(format!("span {i}")).end();
        }
        assert_eq!(counts.ended.load(Ordering::Relaxed), 12);
        assert_eq!(
            lock(&shared.queue).queued,
            4,
            "the queue's limit, the rest dropped"
        );
        assert_eq!(counts.exported.load(Ordering::Relaxed), 0);
        // A shutdown gives up after its timeout rather than wait for the collector.
        assert!(provider
            .shutdown_with_timeout(Duration::from_millis(200))
            .is_err());
    }

    #[test]
    fn the_limits_come_from_the_standard_variables_and_a_batch_never_exceeds_the_queue() {
        let vars = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| (*v).to_owned())
            }
        };
        assert_eq!(Limits::from_vars(vars(&[])), Limits::default());
        assert_eq!(
            Limits::from_vars(vars(&[
                ("OTEL_BSP_MAX_QUEUE_SIZE", "100"),
                ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "512"),
                ("OTEL_BSP_SCHEDULE_DELAY", " 10 "),
            ])),
            Limits {
                max_queue: 100,
                max_batch: 100,
                delay: Duration::from_millis(10),
            }
        );
        assert_eq!(
            Limits::from_vars(vars(&[
                ("OTEL_BSP_MAX_QUEUE_SIZE", "0"),
                ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "many"),
            ])),
            Limits::default()
        );
    }
}
