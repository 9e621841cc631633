//! A real OTLP/HTTP receiver on loopback, for tests: `POST /v1/traces`, `/v1/metrics` and `/v1/logs`
//! bodies (protobuf, as an OpenTelemetry exporter sends them) are decoded with the
//! `opentelemetry-proto` types and kept for assertions. It runs on a thread of its own, so
//! synchronous tests (processes started with `std::process`) can use it too.

use axum::body::Bytes;
use axum::http::HeaderMap;
use axum::routing::post;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use prost::Message;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A span as received.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    /// The exporting process's `service.name`.
    pub service: String,
    /// Hex trace id.
    pub trace_id: String,
    /// Hex span id.
    pub span_id: String,
    /// Hex parent span id (empty for a root).
    pub parent_span_id: String,
    /// The span name.
    pub name: String,
    /// OTLP span kind (2 = server, 3 = client, 1 = internal).
    pub kind: i32,
    /// Attributes, values as text.
    pub attributes: BTreeMap<String, String>,
    /// OTLP status code (0 unset, 1 ok, 2 error).
    pub status: i32,
    /// The span's links, as (hex trace id, hex span id).
    pub links: Vec<(String, String)>,
}

/// A histogram or sum data point as received.
#[derive(Debug, Clone)]
pub struct ReceivedPoint {
    /// The metric name.
    pub metric: String,
    /// The metric's unit.
    pub unit: String,
    /// The point's attributes, values as text.
    pub attributes: BTreeMap<String, String>,
    /// Histogram count (0 for other kinds).
    pub count: u64,
}

/// A log record as received.
#[derive(Debug, Clone)]
pub struct ReceivedLog {
    /// The exporting process's `service.name`.
    pub service: String,
    /// Hex trace id (empty when the record has none).
    pub trace_id: String,
    /// Hex span id (empty when the record has none).
    pub span_id: String,
    /// The W3C trace flags.
    pub flags: u32,
    /// OTLP severity number (13 = WARN, 17 = ERROR).
    pub severity_number: i32,
    /// The severity as text (`WARN`).
    pub severity_text: String,
    /// The body, as text.
    pub body: String,
    /// The record's event name.
    pub event_name: String,
    /// Attributes, values as text.
    pub attributes: BTreeMap<String, String>,
}

#[derive(Default)]
struct Received {
    spans: Vec<ReceivedSpan>,
    points: Vec<ReceivedPoint>,
    logs: Vec<ReceivedLog>,
    /// Each `/v1/traces` request's headers, refused ones included.
    trace_headers: Vec<BTreeMap<String, String>>,
    /// Trace exports still to refuse with 503 (see [`OtlpReceiver::refuse_traces`]).
    refuse_traces: usize,
}

/// The receiver; stops when dropped.
pub struct OtlpReceiver {
    port: u16,
    received: Arc<Mutex<Received>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

/// The body as sent: a collector (rotel, the OpenTelemetry Collector) gzips its exports by
/// default (`Content-Encoding: gzip`, which OTLP/HTTP receivers must accept). A body that
/// does not inflate is kept as it came, to fail decoding with a message.
fn plain(headers: &HeaderMap, body: Bytes) -> Bytes {
    use std::io::Read as _;
    let gzip = headers
        .get("content-encoding")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"gzip"));
    if !gzip {
        return body;
    }
    let mut inflated = Vec::new();
    match flate2::read::GzDecoder::new(&body[..]).read_to_end(&mut inflated) {
        Ok(_) => inflated.into(),
        Err(_) => body,
    }
}

fn value_text(v: Option<&AnyValue>) -> String {
    match v {
        Some(AnyValue::StringValue(s)) => s.clone(),
        Some(AnyValue::IntValue(i)) => i.to_string(),
        Some(AnyValue::BoolValue(b)) => b.to_string(),
        Some(AnyValue::DoubleValue(d)) => d.to_string(),
        other => format!("{other:?}"),
    }
}

fn text(kv: &[KeyValue]) -> BTreeMap<String, String> {
    kv.iter()
        .map(|kv| {
            let v = value_text(kv.value.as_ref().and_then(|v| v.value.as_ref()));
            (kv.key.clone(), v)
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl OtlpReceiver {
    /// Starts a receiver on a free loopback port.
    pub fn start() -> OtlpReceiver {
        OtlpReceiver::start_on(0)
    }

    /// Starts a receiver on this loopback port (`0`: a free one), for a collector that comes
    /// up where an exporter already sends.
    pub fn start_on(port: u16) -> OtlpReceiver {
        let received = Arc::new(Mutex::new(Received::default()));
        let (port_tx, port_rx) = std::sync::mpsc::channel();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let store = received.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for the OTLP receiver");
            runtime.block_on(async move {
                let traces = store.clone();
                let logs = store.clone();
                let metrics = store;
                let app = axum::Router::new()
                    .route(
                        "/v1/traces",
                        post(move |headers: HeaderMap, body: Bytes| async move {
                            {
                                let mut r = traces.lock().unwrap();
                                r.trace_headers.push(
                                    headers
                                        .iter()
                                        .map(|(k, v)| {
                                            let v = String::from_utf8_lossy(v.as_bytes());
                                            (k.as_str().to_owned(), v.into_owned())
                                        })
                                        .collect(),
                                );
                                if r.refuse_traces > 0 {
                                    r.refuse_traces -= 1;
                                    return Err((
                                        axum::http::StatusCode::SERVICE_UNAVAILABLE,
                                        [("retry-after", "0")],
                                    ));
                                }
                            }
                            let body = plain(&headers, body);
                            let decoded = ExportTraceServiceRequest::decode(body);
                            if let Err(e) = &decoded {
                                eprintln!("OtlpReceiver: an undecodable trace export: {e}");
                            }
                            if let Ok(req) = decoded {
                                let mut r = traces.lock().unwrap();
                                for rs in req.resource_spans {
                                    let service = rs
                                        .resource
                                        .as_ref()
                                        .map(|r| text(&r.attributes))
                                        .and_then(|a| a.get("service.name").cloned())
                                        .unwrap_or_default();
                                    for ss in rs.scope_spans {
                                        for s in ss.spans {
                                            r.spans.push(ReceivedSpan {
                                                service: service.clone(),
                                                trace_id: hex(&s.trace_id),
                                                span_id: hex(&s.span_id),
                                                parent_span_id: hex(&s.parent_span_id),
                                                name: s.name,
                                                kind: s.kind,
                                                attributes: text(&s.attributes),
                                                status: s.status.map(|st| st.code).unwrap_or(0),
                                                links: s
                                                    .links
                                                    .iter()
                                                    .map(|l| (hex(&l.trace_id), hex(&l.span_id)))
                                                    .collect(),
                                            });
                                        }
                                    }
                                }
                            }
                            Ok("")
                        }),
                    )
                    .route(
                        "/v1/metrics",
                        post(move |headers: HeaderMap, body: Bytes| async move {
                            let body = plain(&headers, body);
                            if let Ok(req) = ExportMetricsServiceRequest::decode(body) {
                                let mut r = metrics.lock().unwrap();
                                for rm in req.resource_metrics {
                                    for sm in rm.scope_metrics {
                                        for m in sm.metrics {
                                            if let Some(Data::Histogram(h)) = &m.data {
                                                for p in &h.data_points {
                                                    r.points.push(ReceivedPoint {
                                                        metric: m.name.clone(),
                                                        unit: m.unit.clone(),
                                                        attributes: text(&p.attributes),
                                                        count: p.count,
                                                    });
                                                }
                                            }
                                        }
                                    }
                                }
                            }
                            ""
                        }),
                    )
                    .route(
                        "/v1/logs",
                        post(move |headers: HeaderMap, body: Bytes| async move {
                            let body = plain(&headers, body);
                            let decoded = ExportLogsServiceRequest::decode(body);
                            if let Err(e) = &decoded {
                                eprintln!("OtlpReceiver: an undecodable log export: {e}");
                            }
                            if let Ok(req) = decoded {
                                let mut r = logs.lock().unwrap();
                                for rl in req.resource_logs {
                                    let service = rl
                                        .resource
                                        .as_ref()
                                        .map(|r| text(&r.attributes))
                                        .and_then(|a| a.get("service.name").cloned())
                                        .unwrap_or_default();
                                    for sl in rl.scope_logs {
                                        for l in sl.log_records {
                                            r.logs.push(ReceivedLog {
                                                service: service.clone(),
                                                trace_id: hex(&l.trace_id),
                                                span_id: hex(&l.span_id),
                                                flags: l.flags,
                                                severity_number: l.severity_number,
                                                severity_text: l.severity_text,
                                                body: value_text(
                                                    l.body.as_ref().and_then(|b| b.value.as_ref()),
                                                ),
                                                event_name: l.event_name,
                                                attributes: text(&l.attributes),
                                            });
                                        }
                                    }
                                }
                            }
                            ""
                        }),
                    );
                let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
                    .await
                    .expect("bind the OTLP receiver");
                let _ = port_tx.send(listener.local_addr().expect("local addr").port());
                let _ = axum::serve(listener, app)
                    .with_graceful_shutdown(async {
                        let _ = stop_rx.await;
                    })
                    .await;
            });
        });
        let port = port_rx.recv().expect("the OTLP receiver started");
        OtlpReceiver {
            port,
            received,
            stop: Some(stop_tx),
        }
    }

    /// The base URL exporters are pointed at (`--otel-endpoint`, `OTEL_EXPORTER_OTLP_ENDPOINT`).
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.received.lock().unwrap().spans.clone()
    }

    /// Answers the next `n` trace exports `503 Service Unavailable` (`Retry-After: 0`), as a
    /// collector shedding load does: an exporter is expected to try again.
    pub fn refuse_traces(&self, n: usize) {
        self.received.lock().unwrap().refuse_traces = n;
    }

    /// The headers of every `/v1/traces` request so far, refused ones included.
    pub fn trace_headers(&self) -> Vec<BTreeMap<String, String>> {
        self.received.lock().unwrap().trace_headers.clone()
    }

    /// Every histogram point received so far.
    pub fn points(&self) -> Vec<ReceivedPoint> {
        self.received.lock().unwrap().points.clone()
    }

    /// Every log record received so far.
    pub fn logs(&self) -> Vec<ReceivedLog> {
        self.received.lock().unwrap().logs.clone()
    }

    /// Waits until `done` holds for the log records received (or panics after `within`).
    pub fn wait_for_logs(
        &self,
        within: Duration,
        done: impl Fn(&[ReceivedLog]) -> bool,
    ) -> Vec<ReceivedLog> {
        let deadline = Instant::now() + within;
        loop {
            let logs = self.logs();
            if done(&logs) {
                return logs;
            }
            assert!(
                Instant::now() < deadline,
                "the log records expected never arrived; received: {logs:#?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits until `done` holds for the spans received (or panics after `within`).
    pub fn wait_for_spans(
        &self,
        within: Duration,
        done: impl Fn(&[ReceivedSpan]) -> bool,
    ) -> Vec<ReceivedSpan> {
        let deadline = Instant::now() + within;
        loop {
            let spans = self.spans();
            if done(&spans) {
                return spans;
            }
            assert!(
                Instant::now() < deadline,
                "the spans expected never arrived; received: {spans:#?}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for OtlpReceiver {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}
