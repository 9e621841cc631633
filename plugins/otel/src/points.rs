//! `mcp.server.operation.duration` and `mcp.client.operation.duration` points recorded
//! through instruments bound once per attribute set.
//!
//! Why: recording with an attribute slice makes the SDK hash, look up and compare the whole
//! `KeyValue` set on every call, and building that slice allocates a `Vec` and clones its
//! strings; together that was most of what metrics cost a stdio call (benches/README.md).
//! A server sees a handful of distinct sets (method × tool × revision × transport ×
//! outcome), so each is bound once ([`BoundHistogram`]) and found again by a hash of the few
//! values it is made of, borrowed from the request: no allocation, no attribute hashing per
//! call. Past [`MAX_BOUND`] sets (a client minting method names) points go the unbound
//! way, where the SDK's own cardinality limit folds them into its overflow series.

use crate::semconv::{self, caller_fault, target_attribute};
use opentelemetry::metrics::{BoundHistogram, Histogram};
use opentelemetry::KeyValue;
use rustc_hash::{FxBuildHasher, FxHasher};
use std::cell::RefCell;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;
use toolyard::proto::ProtocolVersion;
use toolyard::{Outcome, RequestInfo};
use toolyard_client::RequestOutcome;

/// How many attribute sets are bound at most (the SDK's default cardinality limit).
pub(crate) const MAX_BOUND: usize = 2000;

/// `network.transport` and `network.protocol.name` of a request's peer.
type Network = (&'static str, Option<&'static str>);

fn network_of(info: &RequestInfo) -> Option<Network> {
    info.peer.as_ref().map(|p| (p.transport, p.protocol))
}

/// What a point's attributes are made of, borrowed from the request.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Key<'a> {
    method: &'a str,
    version: Option<&'static str>,
    transport: Option<Network>,
    /// The tool or prompt name; `None` for methods without one and for resource URIs
    /// (unbounded, kept off the series); [`semconv::OTHER`] for a refused call.
    target: Option<&'a str>,
    error: Option<Error<'a>>,
}

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Error<'a> {
    Tool,
    Code(i32),
    Cancelled,
    /// A client request without an answer (`timeout`, `transport`, ...).
    Failed(&'a str),
}

/// [`Key`] with its strings owned, as the cache keeps it.
struct OwnedKey {
    method: Box<str>,
    version: Option<&'static str>,
    transport: Option<Network>,
    target: Option<Box<str>>,
    error: Option<OwnedError>,
}

enum OwnedError {
    Tool,
    Code(i32),
    Cancelled,
    Failed(Box<str>),
}

impl OwnedKey {
    fn matches(&self, k: &Key<'_>) -> bool {
        &*self.method == k.method
            && self.version == k.version
            && self.transport == k.transport
            && self.target.as_deref() == k.target
            && match (&self.error, &k.error) {
                (None, None) => true,
                (Some(OwnedError::Tool), Some(Error::Tool))
                | (Some(OwnedError::Cancelled), Some(Error::Cancelled)) => true,
                (Some(OwnedError::Code(a)), Some(Error::Code(b))) => a == b,
                (Some(OwnedError::Failed(a)), Some(Error::Failed(b))) => &**a == *b,
                _ => false,
            }
    }
}

impl<'a> Key<'a> {
    fn of(info: &'a RequestInfo, outcome: &Outcome) -> Self {
        let method: &str = &info.method;
        let refused = matches!(outcome, Outcome::Error(code) if caller_fault(*code));
        let target = match (target_attribute(method), info.target.as_deref()) {
            (Some(key), Some(t)) if key != semconv::MCP_RESOURCE_URI => {
                // A refused call's name is whatever the caller typed: keep it off the series.
                Some(if refused { semconv::OTHER } else { t })
            }
            _ => None,
        };
        Key {
            method,
            version: info.protocol_version.as_ref().map(|v| v.as_str()),
            transport: network_of(info),
            target,
            error: match outcome {
                Outcome::Ok | Outcome::InputRequired => None,
                Outcome::ToolError => Some(Error::Tool),
                Outcome::Error(code) => Some(Error::Code(*code)),
                Outcome::Cancelled => Some(Error::Cancelled),
            },
        }
    }

    fn hash(&self) -> u64 {
        let mut h = FxHasher::default();
        self.method.hash(&mut h);
        self.version.hash(&mut h);
        self.transport.hash(&mut h);
        self.target.hash(&mut h);
        self.error.hash(&mut h);
        h.finish()
    }

    /// A client request's key: its method, the tool a `tools/call` names, its outcome.
    fn client(method: &'a str, tool: Option<&'a str>, outcome: &RequestOutcome<'a>) -> Self {
        Key {
            method,
            version: None,
            transport: None,
            target: tool.filter(|_| method == "tools/call"),
            error: match *outcome {
                RequestOutcome::Ok => None,
                RequestOutcome::ToolError => Some(Error::Tool),
                RequestOutcome::Rpc(code) => Some(Error::Code(code)),
                RequestOutcome::Failed(kind) => Some(Error::Failed(kind)),
            },
        }
    }

    fn owned(&self) -> OwnedKey {
        OwnedKey {
            method: self.method.into(),
            version: self.version,
            transport: self.transport,
            target: self.target.map(Into::into),
            error: self.error.map(|e| match e {
                Error::Tool => OwnedError::Tool,
                Error::Code(c) => OwnedError::Code(c),
                Error::Cancelled => OwnedError::Cancelled,
                Error::Failed(kind) => OwnedError::Failed(kind.into()),
            }),
        }
    }

    /// The point's attributes, as the conventions name them. A client's point carries the
    /// method, the tool and the outcome only.
    fn attributes(&self, side: Side) -> Vec<KeyValue> {
        let mut point = vec![KeyValue::new(
            semconv::MCP_METHOD_NAME,
            self.method.to_owned(),
        )];
        if let Some(v) = self.version {
            point.push(KeyValue::new(semconv::MCP_PROTOCOL_VERSION, v));
        }
        if let Some((transport, protocol)) = self.transport {
            point.push(KeyValue::new(semconv::NETWORK_TRANSPORT, transport));
            if let Some(p) = protocol {
                point.push(KeyValue::new(semconv::NETWORK_PROTOCOL_NAME, p));
            }
        }
        if let (Some(key), Some(t)) = (target_attribute(self.method), self.target) {
            point.push(KeyValue::new(key, t.to_owned()));
        }
        if self.method == "tools/call" && side == Side::Server {
            point.push(KeyValue::new(
                semconv::GEN_AI_OPERATION_NAME,
                "execute_tool",
            ));
        }
        match self.error {
            None => {}
            Some(Error::Tool) => {
                point.push(KeyValue::new(semconv::ERROR_TYPE, semconv::TOOL_ERROR))
            }
            Some(Error::Cancelled) => point.push(KeyValue::new(semconv::ERROR_TYPE, "cancelled")),
            Some(Error::Code(code)) => {
                let code = code.to_string();
                point.push(KeyValue::new(semconv::ERROR_TYPE, code.clone()));
                point.push(KeyValue::new(semconv::RPC_RESPONSE_STATUS_CODE, code));
            }
            Some(Error::Failed(kind)) => {
                point.push(KeyValue::new(semconv::ERROR_TYPE, kind.to_owned()));
            }
        }
        point
    }
}

/// Which duration a [`DurationPoints`] records.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    Server,
    Client,
}

/// A duration histogram and its bound attribute sets.
pub(crate) struct DurationPoints {
    histogram: Histogram<f64>,
    side: Side,
    bound: RwLock<Bound>,
    /// Tells this instance's entries in [`RECENT`] from another's.
    id: u64,
}

/// The sets this thread recorded last, found by the identity of the request's shared
/// names (the connection hands the same `Arc<str>` for a method or tool seen again): a
/// request like the one before costs a few pointer comparisons instead of a hash, a lock
/// and string comparisons (benches/README.md: most of what metrics cost a stdio call).
/// A miss goes the [`Bound`] way and takes the oldest slot.
struct Recent {
    slots: [Option<RecentSet>; RECENT_SLOTS],
    next: usize,
}

const RECENT_SLOTS: usize = 4;

struct RecentSet {
    points: u64,
    method: Arc<str>,
    target: RecentTarget,
    version: Option<ProtocolVersion>,
    transport: Option<Network>,
    outcome: Outcome,
    histogram: BoundHistogram<f64>,
}

/// What a remembered set says of the request's target.
enum RecentTarget {
    /// The request named none.
    Absent,
    /// The set is the same whatever the request names (its method's target is a resource
    /// URI, kept off the series, or not a target at all).
    Any,
    /// This name, the one the connection shares.
    Is(Arc<str>),
}

impl RecentSet {
    fn is_for(&self, points: u64, info: &RequestInfo, outcome: &Outcome) -> bool {
        self.points == points
            && Arc::ptr_eq(&self.method, &info.method)
            && match (&self.target, &info.target) {
                (RecentTarget::Any, _) | (RecentTarget::Absent, None) => true,
                (RecentTarget::Is(a), Some(b)) => Arc::ptr_eq(a, b),
                _ => false,
            }
            && self.version == info.protocol_version
            && self.transport == network_of(info)
            && self.outcome == *outcome
    }
}

thread_local! {
    static RECENT: RefCell<Recent> = const {
        RefCell::new(Recent {
            slots: [const { None }; RECENT_SLOTS],
            next: 0,
        })
    };
}

fn next_id() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// The bound sets, keyed by [`Key::hash`]; a bucket holds the (rare) sets whose hashes
/// collide.
#[derive(Default)]
struct Bound {
    buckets: HashMap<u64, Bucket, NoRehash>,
    /// Sets in all buckets (at most [`MAX_BOUND`]).
    sets: usize,
}

type Bucket = Vec<(OwnedKey, BoundHistogram<f64>)>;

impl Bound {
    fn find(&self, hash: u64, key: &Key<'_>) -> Option<&BoundHistogram<f64>> {
        self.buckets
            .get(&hash)
            .and_then(|b| b.iter().find(|(k, _)| k.matches(key)))
            .map(|(_, h)| h)
    }
}

/// The map's keys are already hashes.
#[derive(Clone, Copy, Default)]
struct NoRehash;

impl BuildHasher for NoRehash {
    type Hasher = FxHasher;
    fn build_hasher(&self) -> FxHasher {
        FxBuildHasher.build_hasher()
    }
}

impl DurationPoints {
    pub(crate) fn new(histogram: Histogram<f64>, side: Side) -> Self {
        DurationPoints {
            histogram,
            side,
            bound: RwLock::default(),
            id: next_id(),
        }
    }

    /// Records how long the request took, under its method, target, revision, transport
    /// and outcome.
    pub(crate) fn record(&self, info: &RequestInfo, outcome: &Outcome) {
        self.record_elapsed(info, outcome, info.started.elapsed());
    }

    /// [`record`](Self::record) with the request's time since `info.started` read by the
    /// caller (who needs it too).
    pub(crate) fn record_elapsed(&self, info: &RequestInfo, outcome: &Outcome, elapsed: Duration) {
        let seconds = elapsed.as_secs_f64();
        let recorded = RECENT.with(|recent| {
            let recent = recent.borrow();
            let set = recent
                .slots
                .iter()
                .flatten()
                .find(|s| s.is_for(self.id, info, outcome));
            set.map(|s| s.histogram.record(seconds)).is_some()
        });
        if recorded {
            return;
        }
        let key = Key::of(info, outcome);
        self.record_key(seconds, &key, |histogram| {
            let set = RecentSet {
                points: self.id,
                method: info.method.clone(),
                target: match (key.target, &info.target) {
                    (_, None) => RecentTarget::Absent,
                    (Some(_), Some(t)) => RecentTarget::Is(t.clone()),
                    (None, Some(_)) => RecentTarget::Any,
                },
                version: info.protocol_version,
                transport: network_of(info),
                outcome: outcome.clone(),
                histogram: histogram.clone(),
            };
            RECENT.with(|recent| {
                let mut recent = recent.borrow_mut();
                let slot = recent.next;
                recent.slots[slot] = Some(set);
                recent.next = (slot + 1) % RECENT_SLOTS;
            });
        });
    }

    /// Records how long a client request took, under its method, tool and outcome.
    pub(crate) fn record_client(
        &self,
        seconds: f64,
        method: &str,
        tool: Option<&str>,
        outcome: &RequestOutcome<'_>,
    ) {
        self.record_key(seconds, &Key::client(method, tool, outcome), |_| {});
    }

    /// Records under `key`, and hands `bound_to` the set's bound instrument when it has one
    /// (the server keeps it in [`RECENT`]; the client does not, so it pays no clone).
    fn record_key(&self, seconds: f64, key: &Key<'_>, bound_to: impl FnOnce(&BoundHistogram<f64>)) {
        let hash = key.hash();
        if let Ok(bound) = self.bound.read() {
            if let Some(h) = bound.find(hash, key) {
                h.record(seconds);
                bound_to(h);
                return;
            }
            if bound.sets >= MAX_BOUND {
                // Full: unbound, without taking the write lock (a client minting names
                // must not serialise every request behind it).
                drop(bound);
                self.histogram.record(seconds, &key.attributes(self.side));
                return;
            }
        }
        let attributes = key.attributes(self.side);
        let Ok(mut bound) = self.bound.write() else {
            self.histogram.record(seconds, &attributes);
            return;
        };
        // Bound meanwhile by another request?
        if let Some(h) = bound.find(hash, key) {
            h.record(seconds);
            bound_to(h);
        } else if bound.sets < MAX_BOUND {
            let h = self.histogram.bind(&attributes);
            h.record(seconds);
            bound_to(&h);
            bound
                .buckets
                .entry(hash)
                .or_default()
                .push((key.owned(), h));
            bound.sets += 1;
        } else {
            self.histogram.record(seconds, &attributes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use opentelemetry::metrics::MeterProvider;
    use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData, ResourceMetrics};
    use opentelemetry_sdk::metrics::{InMemoryMetricExporter, PeriodicReader, SdkMeterProvider};
    use toolyard::proto::RequestId;
    use toolyard::Moment;

    fn info(method: &str, target: Option<&str>) -> RequestInfo {
        RequestInfo {
            method: method.into(),
            target: target.map(Into::into),
            id: RequestId::Number(1),
            protocol_version: None,
            session_id: None,
            principal: None,
            peer: None,
            traceparent: None,
            tracestate: None,
            transport_trace: None,
            arguments: None,
            started: Moment::now(),
        }
    }

    /// (attributes as sorted `key=value` text, count) of every point exported.
    fn points(exporter: &InMemoryMetricExporter) -> Vec<(Vec<String>, u64)> {
        let metrics: Vec<ResourceMetrics> = exporter.get_finished_metrics().unwrap_or_default();
        let mut out = Vec::new();
        for rm in &metrics {
            for sm in rm.scope_metrics() {
                for m in sm.metrics() {
                    if let AggregatedMetrics::F64(MetricData::Histogram(h)) = m.data() {
                        for p in h.data_points() {
                            let mut attrs: Vec<String> = p
                                .attributes()
                                .map(|kv| format!("{}={}", kv.key, kv.value))
                                .collect();
                            attrs.sort();
                            out.push((attrs, p.count()));
                        }
                    }
                }
            }
        }
        out.sort();
        out
    }

    /// Server duration points over an in-memory exporter.
    fn server_points() -> (InMemoryMetricExporter, SdkMeterProvider, DurationPoints) {
        let exporter = InMemoryMetricExporter::default();
        let provider = SdkMeterProvider::builder()
            .with_reader(PeriodicReader::builder(exporter.clone()).build())
            .build();
        let meter = provider.meter("test");
        let points = DurationPoints::new(
            semconv::duration_histogram(&meter, semconv::SERVER_DURATION, "test"),
            Side::Server,
        );
        (exporter, provider, points)
    }

    #[test]
    fn each_attribute_set_is_one_series_and_a_refused_name_is_other() {
        let (exporter, provider, points) = server_points();
        let echo = info("tools/call", Some("echo"));
        for _ in 0..3 {
            points.record(&echo, &Outcome::Ok);
        }
        points.record(&echo, &Outcome::ToolError);
        points.record(&info("tools/call", Some("nope-1")), &Outcome::Error(-32602));
        points.record(&info("tools/call", Some("nope-2")), &Outcome::Error(-32602));
        points.record(&info("resources/read", Some("file:///a")), &Outcome::Ok);
        assert!(provider.force_flush().is_ok());
        let op = "gen_ai.operation.name=execute_tool".to_owned();
        assert_eq!(
            points_of(&exporter),
            vec![
                (
                    vec![
                        "error.type=-32602".to_owned(),
                        op.clone(),
                        "gen_ai.tool.name=_OTHER".to_owned(),
                        "mcp.method.name=tools/call".to_owned(),
                        "rpc.response.status_code=-32602".to_owned(),
                    ],
                    2
                ),
                (
                    vec![
                        "error.type=tool_error".to_owned(),
                        op.clone(),
                        "gen_ai.tool.name=echo".to_owned(),
                        "mcp.method.name=tools/call".to_owned(),
                    ],
                    1
                ),
                (
                    vec![
                        op,
                        "gen_ai.tool.name=echo".to_owned(),
                        "mcp.method.name=tools/call".to_owned(),
                    ],
                    3
                ),
                (vec!["mcp.method.name=resources/read".to_owned()], 1),
            ]
        );
    }

    #[test]
    fn a_request_like_one_before_goes_to_its_own_set_and_instruments_do_not_mix() {
        let (exporter, provider, points) = server_points();
        let (other_exporter, other_provider, other_points) = server_points();
        // The same shared names again, as a connection hands them.
        let echo = info("tools/call", Some("echo"));
        let refused = info("tools/call", Some("nope"));
        let read_a = info("resources/read", Some("file:///a"));
        let mut read_b = info("resources/read", Some("file:///b"));
        read_b.method = read_a.method.clone();
        let mut unnamed = info("prompts/get", None);
        let named = RequestInfo {
            target: Some("p".into()),
            ..unnamed.clone()
        };
        unnamed.started = named.started;
        for _ in 0..2 {
            points.record(&echo, &Outcome::Ok);
            points.record(&refused, &Outcome::Error(-32602));
            points.record(&read_a, &Outcome::Ok);
            points.record(&read_b, &Outcome::Ok);
            points.record(&unnamed, &Outcome::Ok);
            points.record(&named, &Outcome::Ok);
            other_points.record(&echo, &Outcome::Ok);
        }
        points.record(&refused, &Outcome::Ok);
        assert!(provider.force_flush().is_ok());
        assert!(other_provider.force_flush().is_ok());
        let op = "gen_ai.operation.name=execute_tool".to_owned();
        let method = |m: &str| format!("mcp.method.name={m}");
        assert_eq!(
            points_of(&exporter),
            vec![
                (
                    vec![
                        "error.type=-32602".to_owned(),
                        op.clone(),
                        "gen_ai.tool.name=_OTHER".to_owned(),
                        method("tools/call"),
                        "rpc.response.status_code=-32602".to_owned(),
                    ],
                    2
                ),
                (
                    vec![
                        op.clone(),
                        "gen_ai.tool.name=echo".to_owned(),
                        method("tools/call"),
                    ],
                    2
                ),
                (
                    vec![
                        op.clone(),
                        "gen_ai.tool.name=nope".to_owned(),
                        method("tools/call"),
                    ],
                    1
                ),
                (
                    vec!["gen_ai.prompt.name=p".to_owned(), method("prompts/get")],
                    2
                ),
                (vec![method("prompts/get")], 2),
                (vec![method("resources/read")], 4),
            ]
        );
        assert_eq!(
            points_of(&other_exporter),
            vec![(
                vec![op, "gen_ai.tool.name=echo".to_owned(), method("tools/call")],
                2
            )]
        );
    }

    #[test]
    fn past_the_bound_limit_points_are_still_recorded() {
        let (exporter, provider, points) = server_points();
        for i in 0..MAX_BOUND + 10 {
            points.record(&info(&format!("x/{i}"), None), &Outcome::Error(-32601));
        }
        let (bound, buckets) = points
            .bound
            .read()
            .map(|b| {
                (
                    b.buckets.values().map(Vec::len).sum::<usize>(),
                    b.buckets.len(),
                )
            })
            .unwrap_or((0, 0));
        assert_eq!(bound, MAX_BOUND);
        assert!(
            buckets <= MAX_BOUND,
            "no bucket kept for a set past the limit"
        );
        assert!(provider.force_flush().is_ok());
        let total: u64 = points_of(&exporter).iter().map(|(_, n)| n).sum();
        assert_eq!(total, (MAX_BOUND + 10) as u64);
    }

    fn points_of(exporter: &InMemoryMetricExporter) -> Vec<(Vec<String>, u64)> {
        // The last export holds the cumulative state.
        let all = points(exporter);
        let mut last: HashMap<Vec<String>, u64> = HashMap::new();
        for (k, n) in all {
            let e = last.entry(k).or_insert(0);
            *e = (*e).max(n);
        }
        let mut v: Vec<_> = last.into_iter().collect();
        v.sort();
        v
    }
}
