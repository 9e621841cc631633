//! The gateway: every source's tools, resources, templates and prompts re-exposed through
//! one Toolyard [`Server`], in both protocol generations, over whatever transport the server
//! is served on.
//!
//! - **Names** are namespaced per source (`<source>__<tool>`, separator and aliases
//!   configurable); resource URIs are rewritten reversibly as `<source>+<uri>` (a valid URI
//!   scheme), so a read can be routed back without a lookup table.
//! - **Discovery** runs when a source is added, on demand ([`Gateway::refresh`]) and when
//!   the upstream says its lists changed; what changed is swapped in the server's registry,
//!   which fires our own `list_changed`.
//! - **Calls** lease a connection from the source's pool, carry progress back to the
//!   caller and stop with the caller's cancellation. Only tools whose annotations say they
//!   are read-only or idempotent are retried after a transport failure.
//! - **Failure modes**: an unhealthy `skip` source drops out of listings until it recovers;
//!   an unhealthy `fail` source makes listings fail with an error naming it.
//! - **Upstream requests** (elicitation, sampling, roots) go to the downstream call they
//!   belong to (each upstream request brings its own question handlers; a legacy stdio
//!   upstream's unattributed question is answered only when one caller's calls are on that
//!   connection): for a legacy caller as server-to-client requests, for a modern caller as
//!   an `InputRequiredResult` with the upstream call parked until the retry.
//!
//! The parts: [`catalog`] (discovery, listings and health), [`forward`] (calls, reads and
//! prompts sent upstream), [`questions`] (upstream questions put to the caller), [`uri`]
//! (the `<source>+<uri>` namespacing).

mod catalog;
mod forward;
mod questions;
mod subscriptions;
mod uri;

use super::error::HostError;
use super::parked::ParkingLot;
use super::pool::{ClientFactory, SourceHealth, SourcePool};
use super::spec::{FailureMode, SourceSpec};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use toolyard::Server;
use toolyard_client::{
    elicit_handler, fixed_roots, sample_handler, ClientBuilder, ClientError, Notice,
};
use toolyard_proto::{CallToolResult, Implementation};

use catalog::{explain_missing_tool, on_upstream_notice, Catalog};
use forward::{Parked, PARK_SWEEP, PARK_TTL};
use questions::unattributed;

pub use catalog::ListingGuard;
pub use uri::{expose_uri, upstream_uri};

/// A source could not be added, removed or refreshed.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// A source with this name is already registered.
    #[error("a source named `{0}` is already registered")]
    Duplicate(String),
    /// No source has this name.
    #[error("no source named `{0}`")]
    Unknown(String),
    /// The source's actors could not be started.
    #[error("cannot start the source's actors: {0}")]
    Actor(String),
    /// The source's discovery failed (and its failure mode is `fail`).
    #[error(transparent)]
    Host(#[from] HostError),
    /// An upstream listing could not be read.
    #[error("source `{name}`: {error}")]
    Discovery {
        /// The source.
        name: String,
        /// Why.
        error: ClientError,
    },
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One registered source.
struct Source {
    spec: Arc<SourceSpec>,
    pool: SourcePool,
    catalog: Mutex<Catalog>,
    /// Numbers parked calls.
    next_park: AtomicU64,
    /// Upstream calls parked for a modern caller's retry, by key (an actor).
    parked: ParkingLot<Parked>,
    /// A refresh is queued (list_changed notifications are coalesced).
    refresh_queued: AtomicBool,
    /// Whether the source's items are in the server's registry right now.
    listed: AtomicBool,
    /// Upstream resource subscriptions made for downstream subscribers.
    subscriptions: Mutex<subscriptions::Upstream>,
    /// Serialises the syncs of `subscriptions`.
    subscriptions_sync: tokio::sync::Mutex<()>,
}

/// A source's state, for the admin API and `toolyard` listings (no secrets).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SourceStatus {
    /// The name.
    pub name: String,
    /// Version from the manifest.
    pub version: Option<String>,
    /// Description from the manifest.
    pub description: Option<String>,
    /// Health and restarts.
    pub health: SourceHealth,
    /// Exposed tool names.
    pub tools: Vec<String>,
    /// Exposed resource URIs.
    pub resources: Vec<String>,
    /// Exposed prompt names.
    pub prompts: Vec<String>,
    /// Whether its items are listed now.
    pub listed: bool,
}

/// The outcome of [`Gateway::execute`]: what the tool returned, or why it did not.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ExecutionResult {
    /// The call completed and the tool did not report an error.
    pub success: bool,
    /// The tool's content (empty when the call failed).
    pub content: Vec<toolyard_proto::ContentBlock>,
    /// The tool's structured content.
    pub structured_content: Option<Value>,
    /// The tool answered with `isError: true`.
    pub is_error: bool,
    /// The tool's error text, or why the call failed (no secrets).
    pub error: Option<String>,
    /// From the lease to the answer.
    #[serde(serialize_with = "millis")]
    pub elapsed: Duration,
    /// The source.
    pub source: String,
    /// The tool's upstream name.
    pub tool: String,
}

fn millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_f64(d.as_secs_f64() * 1000.0)
}

/// The gateway over a running server.
#[derive(Clone)]
pub struct Gateway {
    inner: Arc<GatewayInner>,
}

struct GatewayInner {
    server: Server,
    guard: ListingGuard,
    sources: Mutex<BTreeMap<String, Arc<Source>>>,
}

impl std::fmt::Debug for Gateway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gateway")
            .field(
                "sources",
                &lock(&self.inner.sources).keys().collect::<Vec<_>>(),
            )
            .finish()
    }
}

/// The `capabilities.experimental` entry a gateway adds to its server's answers, naming
/// what it does not relay from its sources (the README's "Through the gateway" table), so
/// a client learns it from the protocol and not by surprise.
pub fn not_relayed_capability() -> (&'static str, Value) {
    (
        "io.toolyard/gateway",
        serde_json::json!({
            "notRelayed": [
                {"what": "notifications/message", "why": "a source's log messages cannot be attributed to one caller over stdio; the gateway's own logging is served"},
                {"what": "logging/setLevel", "why": "sets the gateway's level, not the sources'"},
                {"what": "io.modelcontextprotocol/tasks", "why": "forwarded calls run synchronously upstream"},
                {"what": "resources/subscribe", "why": "not for transient sources (one process per call)"}
            ]
        }),
    )
}

impl Gateway {
    /// A gateway registering into `server`; `guard` must be one of the server's layers
    /// for `fail`-mode sources to fail listings.
    pub fn new(server: &Server, guard: ListingGuard) -> Self {
        let gateway = Gateway {
            inner: Arc::new(GatewayInner {
                server: server.clone(),
                guard,
                sources: Mutex::new(BTreeMap::new()),
            }),
        };
        let weak = Arc::downgrade(&gateway.inner);
        server.explain_unknown_tools(Box::new(move |name| {
            let inner = weak.upgrade()?;
            let sources = lock(&inner.sources);
            sources
                .values()
                .find_map(|source| explain_missing_tool(source, name))
        }));
        gateway.watch_health();
        gateway.relay_subscriptions();
        gateway
    }

    /// Registers a source and discovers what it offers. A source that cannot be reached is
    /// kept (its pool retries and probes) when its failure mode is `skip`; with `fail` the
    /// error is returned and nothing is registered.
    pub async fn add_source(&self, spec: SourceSpec) -> Result<(), GatewayError> {
        let name = spec.name.clone();
        if lock(&self.inner.sources).contains_key(&name) {
            return Err(GatewayError::Duplicate(name));
        }
        let spec = Arc::new(spec);
        let parked = ParkingLot::start(PARK_TTL, PARK_SWEEP)
            .await
            .map_err(|e| GatewayError::Actor(e.to_string()))?;
        let source = Arc::new_cyclic(|weak: &Weak<Source>| Source {
            pool: SourcePool::new(spec.clone(), self.factory(weak.clone())),
            spec: spec.clone(),
            catalog: Mutex::new(Catalog::default()),
            next_park: AtomicU64::new(0),
            parked,
            refresh_queued: AtomicBool::new(false),
            listed: AtomicBool::new(false),
            subscriptions: Mutex::default(),
            subscriptions_sync: tokio::sync::Mutex::new(()),
        });
        {
            let mut sources = lock(&self.inner.sources);
            if sources.contains_key(&name) {
                return Err(GatewayError::Duplicate(name));
            }
            sources.insert(name.clone(), source.clone());
        }
        match self.discover(&source).await {
            Ok(()) => Ok(()),
            Err(e) if spec.failure_mode == FailureMode::Skip => {
                self.publish_down(&source, "unavailable at start");
                tracing::warn!(source = %name, error = %e, "source unavailable; skipped until it recovers");
                Ok(())
            }
            Err(e) => {
                lock(&self.inner.sources).remove(&name);
                source.pool.shutdown().await;
                Err(e)
            }
        }
    }

    /// Unregisters a source: its items leave the server (firing `list_changed`) and its
    /// processes stop.
    pub async fn remove_source(&self, name: &str) -> Result<(), GatewayError> {
        let source = lock(&self.inner.sources)
            .remove(name)
            .ok_or_else(|| GatewayError::Unknown(name.to_owned()))?;
        self.unlist(&source);
        self.update_guard();
        source.parked.stop();
        source.pool.shutdown().await;
        Ok(())
    }

    /// Discovers a source's items again now.
    pub async fn refresh(&self, name: &str) -> Result<(), GatewayError> {
        let source = self
            .source(name)
            .ok_or_else(|| GatewayError::Unknown(name.to_owned()))?;
        self.discover(&source).await
    }

    /// Makes the registered sources match `specs` (a reloaded configuration): new ones are
    /// added, missing ones removed, changed ones replaced; unchanged ones keep running.
    /// Returns what failed, per source.
    pub async fn apply(&self, specs: Vec<SourceSpec>) -> Vec<GatewayError> {
        let mut errors = Vec::new();
        let wanted: Vec<String> = specs.iter().map(|s| s.name.clone()).collect();
        for name in self.names() {
            if !wanted.contains(&name) {
                if let Err(e) = self.remove_source(&name).await {
                    errors.push(e);
                }
            }
        }
        for spec in specs {
            let current = self.source(&spec.name).map(|s| s.spec.fingerprint());
            match current {
                Some(f) if f == spec.fingerprint() => continue,
                Some(_) => {
                    if let Err(e) = self.remove_source(&spec.name).await {
                        errors.push(e);
                        continue;
                    }
                }
                None => {}
            }
            if let Err(e) = self.add_source(spec).await {
                errors.push(e);
            }
        }
        errors
    }

    /// Calls `tool` (its upstream name) on `source` directly, for embedders that use the
    /// host without going through MCP: the outcome, whatever it is, comes back as an
    /// [`ExecutionResult`] rather than an error.
    pub async fn execute(&self, source: &str, tool: &str, arguments: Value) -> ExecutionResult {
        let started = Instant::now();
        let finish = |success: bool, result: Option<CallToolResult>, error: Option<String>| {
            let is_error = result.as_ref().is_some_and(CallToolResult::failed);
            ExecutionResult {
                success: success && !is_error,
                content: result
                    .as_ref()
                    .map(|r| r.content.clone())
                    .unwrap_or_default(),
                structured_content: result.and_then(|r| r.structured_content),
                is_error,
                error,
                elapsed: started.elapsed(),
                source: source.to_owned(),
                tool: tool.to_owned(),
            }
        };
        let Some(src) = self.source(source) else {
            return finish(false, None, Some(format!("no source named `{source}`")));
        };
        let lease = match src.pool.lease().await {
            Ok(lease) => lease,
            Err(e) => return finish(false, None, Some(e.to_string())),
        };
        match lease.call_tool(tool, arguments).await {
            Ok(result) => {
                let error = result.failed().then(|| {
                    result
                        .content
                        .iter()
                        .filter_map(|c| match c {
                            toolyard_proto::ContentBlock::Text(t) => Some(t.text.as_str()),
                            _ => None,
                        })
                        .collect::<Vec<_>>()
                        .join("\n")
                });
                finish(true, Some(result), error)
            }
            Err(e) => {
                lease.report(&e);
                finish(false, None, Some(e.to_string()))
            }
        }
    }

    /// The names of the registered sources.
    pub fn names(&self) -> Vec<String> {
        lock(&self.inner.sources).keys().cloned().collect()
    }

    /// Every source's state.
    pub fn status(&self) -> Vec<SourceStatus> {
        let sources: Vec<Arc<Source>> = lock(&self.inner.sources).values().cloned().collect();
        sources
            .iter()
            .map(|s| {
                let c = lock(&s.catalog).clone();
                SourceStatus {
                    name: s.spec.name.clone(),
                    version: s.spec.version.clone(),
                    description: s.spec.description.clone(),
                    health: s.pool.health(),
                    tools: c.tools,
                    resources: c.resources.into_iter().chain(c.templates).collect(),
                    prompts: c.prompts,
                    listed: s.listed.load(Ordering::Relaxed),
                }
            })
            .collect()
    }

    /// Stops every source.
    pub async fn shutdown(&self) {
        let sources: Vec<Arc<Source>> = std::mem::take(&mut *lock(&self.inner.sources))
            .into_values()
            .collect();
        for source in &sources {
            source.parked.stop();
        }
        futures_util::future::join_all(sources.iter().map(|s| s.pool.shutdown())).await;
    }

    fn source(&self, name: &str) -> Option<Arc<Source>> {
        lock(&self.inner.sources).get(name).cloned()
    }

    /// The client every connection of a source is built from: our identity, change
    /// notifications, and the capabilities to be asked questions. The questions themselves
    /// go to the handlers each call brings ([`questions::relay_to`]); the client's own
    /// handlers take only those no single call can be named for.
    fn factory(&self, source: Weak<Source>) -> ClientFactory {
        let gateway = Arc::downgrade(&self.inner);
        Arc::new(move || {
            let notice_source = source.clone();
            let notice_gateway = gateway.clone();
            ClientBuilder::new(Implementation::new(
                "toolyard-gateway",
                env!("CARGO_PKG_VERSION"),
            ))
            .on_elicit(elicit_handler(|_| async { Err(unattributed()) }))
            .on_sample(sample_handler(|_| async { Err(unattributed()) }))
            // Outside any single call (e.g. at start-up) the gateway has no roots.
            .on_roots(fixed_roots(Vec::new()))
            .on_notification(move |notice: &Notice| {
                on_upstream_notice(&notice_gateway, &notice_source, notice)
            })
        })
    }
}
