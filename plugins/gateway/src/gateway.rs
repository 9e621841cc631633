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

use super::error::HostError;
use super::parked::{Parkable, ParkingLot};
use super::pool::{ClientFactory, Lease, SourceHealth, SourcePool};
use super::spec::{FailureMode, SourceSpec};
use arc_swap::ArcSwap;
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};
use toolyard::{
    HandlerError, Layer, PromptDef, RequestContext, ResourceDef, Server, TemplateDef, ToolDef,
};
use toolyard_client::{
    elicit_handler, fixed_roots, sample_handler, ClientBuilder, ClientError, Notice, Questions,
    RequestOptions,
};
use toolyard_proto::{
    CallToolResult, ErrorObject, GetPromptResult, Implementation, Prompt, ReadResourceResult,
    Resource, ResourceContents, ResourceTemplate, Tool,
};

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

/// What one source exposes, by exposed name / URI.
#[derive(Debug, Default, Clone)]
struct Catalog {
    tools: Vec<String>,
    resources: Vec<String>,
    templates: Vec<String>,
    prompts: Vec<String>,
}

/// A question an upstream server asked while one of our calls to it was in flight
/// (elicitation, sampling, roots), on its way to the downstream caller of that call.
struct Question {
    method: &'static str,
    params: Value,
    answer: oneshot::Sender<Result<Value, ErrorObject>>,
}

/// An upstream call waiting for a modern caller's retry: the retry's `requestState`
/// carries the key.
struct Parked {
    call: tokio::task::JoinHandle<Result<CallToolResult, CallFailure>>,
    questions: mpsc::UnboundedReceiver<Question>,
    pending: Question,
    asked: u32,
}

impl Parkable for Parked {
    fn abort(&mut self) {
        self.call.abort();
    }
}

/// Why an upstream call produced no result: the source could not be reached (its error
/// already names it) or the call itself failed.
enum CallFailure {
    Host(HostError),
    Client(ClientError),
    /// The parked call's task was stopped (it expired, or the gateway is shutting down).
    Aborted,
}

/// How long a parked upstream call waits for the caller's retry.
const PARK_TTL: Duration = Duration::from_secs(600);
/// How often expired parked calls are looked for.
const PARK_SWEEP: Duration = Duration::from_secs(5);

#[derive(Serialize, serde::Deserialize)]
struct ParkKey {
    parked: String,
    asked: u32,
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
}

/// Sources whose failure mode is `fail` and which are unhealthy: listings fail while any
/// is. Built before the server (it is one of its layers) and shared with the gateway.
#[derive(Clone, Default)]
pub struct ListingGuard {
    failing: Arc<ArcSwap<Vec<String>>>,
}

impl std::fmt::Debug for ListingGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ListingGuard")
            .field("failing", &self.failing.load())
            .finish()
    }
}

impl Layer for ListingGuard {
    fn start(
        &self,
        info: &toolyard::RequestInfo,
    ) -> Result<Option<Box<dyn toolyard::Completion>>, ErrorObject> {
        let listing = matches!(
            &*info.method,
            "tools/list" | "resources/list" | "resources/templates/list" | "prompts/list"
        );
        if listing {
            let failing = self.failing.load();
            if !failing.is_empty() {
                return Err(ErrorObject::internal(format!(
                    "source(s) unavailable: {}",
                    failing.join(", ")
                ))
                .with_data(json!({ "unavailableSources": failing.as_slice() })));
            }
        }
        Ok(None)
    }
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
    /// go to the handlers each call brings ([`relay_to`]); the client's own handlers take
    /// only those no single call can be named for.
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

    /// Lists what the source offers and swaps it into the server's registry.
    async fn discover(&self, source: &Arc<Source>) -> Result<(), GatewayError> {
        let name = &source.spec.name;
        let lease = source.pool.lease().await?;
        let discovery_error = |error: ClientError| GatewayError::Discovery {
            name: name.clone(),
            error,
        };
        let caps = lease.session().map(|s| s.capabilities).unwrap_or_default();
        let tools = if caps.tools.is_some() {
            lease.list_all_tools().await.map_err(|e| {
                lease.report(&e);
                discovery_error(e)
            })?
        } else {
            Vec::new()
        };
        let (resources, templates) = if caps.resources.is_some() {
            let resources = lease.list_all_resources().await.map_err(discovery_error)?;
            let templates = match lease.list_all_resource_templates().await {
                Ok(t) => t,
                Err(ClientError::MethodNotFound(_)) => Vec::new(),
                Err(e) => return Err(discovery_error(e)),
            };
            (resources, templates)
        } else {
            (Vec::new(), Vec::new())
        };
        let prompts = if caps.prompts.is_some() {
            lease.list_all_prompts().await.map_err(discovery_error)?
        } else {
            Vec::new()
        };
        drop(lease);
        self.install(source, tools, resources, templates, prompts);
        Ok(())
    }

    /// Replaces the source's items in the server (removing what disappeared).
    fn install(
        &self,
        source: &Arc<Source>,
        tools: Vec<Tool>,
        resources: Vec<Resource>,
        templates: Vec<ResourceTemplate>,
        prompts: Vec<Prompt>,
    ) {
        let server = &self.inner.server;
        let naming = &source.spec.naming;
        let prefix = &source.spec.name;
        let mut catalog = Catalog::default();
        let mut tool_defs = Vec::new();
        for mut tool in tools {
            let upstream = tool.name.clone();
            tool.name = naming.expose(&upstream);
            catalog.tools.push(tool.name.clone());
            let retry = tool
                .annotations
                .as_ref()
                .is_some_and(|a| a.read_only_hint == Some(true) || a.idempotent_hint == Some(true));
            match ToolDef::new(tool, forward_tool(source, upstream, retry)) {
                Ok(def) => tool_defs.push(def.without_validation()),
                Err(e) => tracing::warn!(source = %prefix, error = %e, "upstream tool skipped"),
            }
        }
        let mut resource_defs = Vec::new();
        for mut resource in resources {
            let upstream = resource.uri.clone();
            resource.uri = expose_uri(prefix, &upstream);
            catalog.resources.push(resource.uri.clone());
            resource_defs.push(ResourceDef::new(resource, forward_read(source)));
        }
        let mut template_defs = Vec::new();
        for mut template in templates {
            template.uri_template = expose_uri(prefix, &template.uri_template);
            let exposed = template.uri_template.clone();
            match TemplateDef::new(template, forward_read(source)) {
                Ok(def) => {
                    catalog.templates.push(exposed);
                    template_defs.push(def);
                }
                Err(e) => tracing::warn!(source = %prefix, error = %e, "upstream template skipped"),
            }
        }
        let mut prompt_defs = Vec::new();
        for mut prompt in prompts {
            let upstream = prompt.name.clone();
            prompt.name = naming.expose(&upstream);
            catalog.prompts.push(prompt.name.clone());
            prompt_defs.push(PromptDef::new(prompt, forward_prompt(source, upstream)));
        }
        let old = std::mem::replace(&mut *lock(&source.catalog), catalog.clone());
        let gone = |old: &[String], new: &[String]| -> Vec<String> {
            old.iter().filter(|o| !new.contains(o)).cloned().collect()
        };
        let gone_tools = gone(&old.tools, &catalog.tools);
        if !gone_tools.is_empty() {
            server.remove_tools(gone_tools);
        }
        let mut gone_resources = gone(&old.resources, &catalog.resources);
        gone_resources.extend(gone(&old.templates, &catalog.templates));
        if !gone_resources.is_empty() {
            server.remove_resources(gone_resources);
        }
        let gone_prompts = gone(&old.prompts, &catalog.prompts);
        if !gone_prompts.is_empty() {
            server.remove_prompts(gone_prompts);
        }
        if !tool_defs.is_empty() {
            server.add_tools(tool_defs);
        }
        if !resource_defs.is_empty() {
            server.add_resources(resource_defs);
        }
        if !template_defs.is_empty() {
            server.add_templates(template_defs);
        }
        if !prompt_defs.is_empty() {
            server.add_prompts(prompt_defs);
        }
        source.listed.store(true, Ordering::Relaxed);
    }

    /// Takes a source's items out of the server (they stay in its catalog for a re-listing).
    fn unlist(&self, source: &Source) {
        let catalog = lock(&source.catalog).clone();
        let server = &self.inner.server;
        if !catalog.tools.is_empty() {
            server.remove_tools(catalog.tools);
        }
        let uris: Vec<String> = catalog
            .resources
            .into_iter()
            .chain(catalog.templates)
            .collect();
        if !uris.is_empty() {
            server.remove_resources(uris);
        }
        if !catalog.prompts.is_empty() {
            server.remove_prompts(catalog.prompts);
        }
        source.listed.store(false, Ordering::Relaxed);
    }

    fn update_guard(&self) {
        let failing: Vec<String> = lock(&self.inner.sources)
            .values()
            .filter(|s| {
                s.spec.failure_mode == FailureMode::Fail
                    && s.pool.health().state == super::pool::HealthState::Unhealthy
            })
            .map(|s| s.spec.name.clone())
            .collect();
        if **self.inner.guard.failing.load() != failing {
            self.inner.guard.failing.store(Arc::new(failing));
        }
    }

    /// Follows health: an unhealthy `skip` source leaves the listings and comes back (with
    /// a fresh discovery) once healthy; `fail` sources make listings fail meanwhile.
    fn watch_health(&self) {
        let weak = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(500));
            loop {
                tick.tick().await;
                let Some(inner) = weak.upgrade() else { return };
                let gateway = Gateway { inner };
                gateway.update_guard();
                let sources: Vec<Arc<Source>> =
                    lock(&gateway.inner.sources).values().cloned().collect();
                for source in sources {
                    let unhealthy =
                        source.pool.health().state == super::pool::HealthState::Unhealthy;
                    let listed = source.listed.load(Ordering::Relaxed);
                    if unhealthy && listed && source.spec.failure_mode == FailureMode::Skip {
                        tracing::warn!(source = %source.spec.name, "source unhealthy: its items leave the listings");
                        gateway.unlist(&source);
                    } else if !unhealthy && !listed {
                        let g = gateway.clone();
                        if !source.refresh_queued.swap(true, Ordering::AcqRel) {
                            tokio::spawn(async move {
                                if let Err(e) = g.discover(&source).await {
                                    tracing::debug!(source = %source.spec.name, error = %e, "source still unavailable");
                                }
                                source.refresh_queued.store(false, Ordering::Release);
                            });
                        }
                    }
                }
            }
        });
    }
}

/// Why `name` is not served, when it is one of `source`'s tools that left the listing (an
/// unhealthy `skip` source, or one not reachable yet): a clear error naming the source and
/// its last failure, instead of "Unknown tool".
fn explain_missing_tool(source: &Source, name: &str) -> Option<ErrorObject> {
    if source.listed.load(Ordering::Relaxed) {
        return None;
    }
    let naming = &source.spec.naming;
    let ours = lock(&source.catalog).tools.iter().any(|t| t == name)
        || naming.aliases.iter().any(|(_, exposed)| exposed == name)
        || name
            .strip_prefix(naming.prefix.as_str())
            .is_some_and(|rest| rest.starts_with(naming.separator.as_str()));
    if !ours {
        return None;
    }
    let health = source.pool.health();
    let why = match (&health.state, &health.last_error) {
        (super::pool::HealthState::Unhealthy, Some(e)) => {
            format!(
                "is unhealthy (circuit open after {} crashes; last: {e})",
                health.crashes_in_window
            )
        }
        (super::pool::HealthState::Unhealthy, None) => "is unhealthy (circuit open)".to_owned(),
        (_, Some(e)) => format!("is not available (last: {e})"),
        (_, None) => "is not available".to_owned(),
    };
    Some(ErrorObject::invalid_params(format!(
        "Tool `{name}` is unavailable: its source `{}` {why}; its tools return once a health \
         probe succeeds",
        source.spec.name
    )))
}

/// The answer to an upstream question no single downstream call can be named for: none
/// is in flight on that connection, or calls of more than one caller are (a legacy upstream
/// over stdio does not say which call a question belongs to, and guessing could show one
/// caller another's question).
fn unattributed() -> ErrorObject {
    ErrorObject::internal(
        "the gateway cannot tell which of its callers this request is for: no call is in \
         flight on this connection, or calls of several callers are (give the source \
         `lifecycle = \"pooled\"` with `max_concurrency = 1`, or `transient`, so that each \
         call has a connection of its own)",
    )
}

fn to_json<T: Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// The handlers that take an upstream's questions for one downstream call to that call's
/// loop (`drive` or `answering`), which puts them to the caller.
fn relay_to(ctx: &RequestContext, questions: mpsc::UnboundedSender<Question>) -> Questions {
    Questions::new(
        ctx.peer_id(),
        Arc::new(move |method: &str, params: Value| {
            let method = match method {
                "elicitation/create" => "elicitation/create",
                "sampling/createMessage" => "sampling/createMessage",
                _ => "roots/list",
            };
            let (answer, wait) = oneshot::channel();
            let sent = questions.send(Question {
                method,
                params,
                answer,
            });
            Box::pin(async move {
                let gone = || ErrorObject::internal("the gateway's caller is gone");
                sent.map_err(|_| gone())?;
                wait.await.map_err(|_| gone())?
            })
        }),
    )
}

/// Puts an upstream's question to our caller: a server-to-client request for a legacy
/// caller; for a modern one, the answer from this round's `inputResponses` or
/// `InputRequired` (the round ends and the caller retries).
async fn put_to_caller(
    ctx: &RequestContext,
    key: &str,
    question: &Question,
) -> Result<Value, toolyard::InputError> {
    use toolyard::InputError;
    let malformed = |e: serde_json::Error| InputError::Malformed(e.to_string());
    match question.method {
        "elicitation/create" => {
            let params = serde_json::from_value(question.params.clone()).map_err(malformed)?;
            ctx.elicit(key, params).await.map(|r| to_json(&r))
        }
        "sampling/createMessage" => {
            let params = serde_json::from_value(question.params.clone()).map_err(malformed)?;
            ctx.sample(key, params).await.map(|r| to_json(&r))
        }
        _ => ctx.list_roots().await.map(|r| to_json(&r)),
    }
}

fn relay_error(e: toolyard::InputError) -> ErrorObject {
    match e {
        toolyard::InputError::Client(e) => e,
        toolyard::InputError::InputRequired => ErrorObject::internal(
            "the gateway's caller speaks 2026-07-28 and cannot answer an upstream request mid-call",
        ),
        other => ErrorObject::internal(other.to_string()),
    }
}

/// `list_changed` from upstream: re-discover (coalesced); `resources/updated`: pass it on
/// with the exposed URI.
fn on_upstream_notice(gateway: &Weak<GatewayInner>, source: &Weak<Source>, notice: &Notice) {
    let (Some(inner), Some(source)) = (gateway.upgrade(), source.upgrade()) else {
        return;
    };
    match notice.method.as_str() {
        "notifications/tools/list_changed"
        | "notifications/resources/list_changed"
        | "notifications/prompts/list_changed" => {
            // A transient source's process lives for one call: what it lists is what every
            // fresh process lists (some announce a change right after they start), so its
            // notifications would only start another process for nothing.
            if source.spec.lifecycle == super::spec::Lifecycle::Transient {
                return;
            }
            if source.refresh_queued.swap(true, Ordering::AcqRel) {
                return;
            }
            let gateway = Gateway { inner };
            tokio::spawn(async move {
                // Let a burst of notifications settle into one listing.
                tokio::time::sleep(Duration::from_millis(50)).await;
                if let Err(e) = gateway.discover(&source).await {
                    tracing::warn!(source = %source.spec.name, error = %e, "refresh after list_changed failed");
                }
                source.refresh_queued.store(false, Ordering::Release);
            });
        }
        "notifications/resources/updated" => {
            if let Some(uri) = notice.params.get("uri").and_then(Value::as_str) {
                inner
                    .server
                    .notify_resource_updated(expose_uri(&source.spec.name, uri));
            }
        }
        _ => {}
    }
}

/// `<source>+<uri>`: a valid URI (the scheme gains a `+` part), reversible by splitting at
/// the first `+`.
pub fn expose_uri(source: &str, upstream: &str) -> String {
    format!("{source}+{upstream}")
}

/// The upstream URI of an exposed one.
pub fn upstream_uri<'a>(source: &str, exposed: &'a str) -> Option<&'a str> {
    exposed.strip_prefix(source)?.strip_prefix('+')
}

/// Whether a failed call may be sent again: only when it never reached a live server
/// connection (the process died or the connection broke), and only for tools declared
/// read-only or idempotent.
fn retryable(e: &ClientError) -> bool {
    matches!(e, ClientError::Transport(_) | ClientError::Closed)
}

fn host_failure(e: HostError) -> HandlerError {
    HandlerError::failed(e.to_string())
}

fn client_failure(source: &str, e: ClientError) -> HandlerError {
    match e {
        ClientError::Rpc(err) => HandlerError::Protocol(err),
        ClientError::MethodNotFound(m) => HandlerError::Protocol(ErrorObject::method_not_found(&m)),
        other => HandlerError::failed(format!("source `{source}`: {other}")),
    }
}

/// The options of an upstream request made for `ctx`: its questions go to `questions`;
/// its progress goes to the downstream caller when it asked for it (otherwise no callback
/// is set up).
fn upstream_options(
    ctx: &RequestContext,
    questions: mpsc::UnboundedSender<Question>,
) -> RequestOptions {
    let opts = RequestOptions::default().questions(relay_to(ctx, questions));
    if !ctx.wants_progress() {
        return opts;
    }
    let ctx = ctx.clone();
    opts.on_progress(move |p| {
        ctx.progress(p.progress, p.total, p.message.as_deref());
    })
}

fn forward_tool(source: &Arc<Source>, upstream: String, retry: bool) -> toolyard::ToolFn {
    let source = Arc::downgrade(source);
    let upstream: Arc<str> = upstream.into();
    Arc::new(move |ctx: RequestContext, args| {
        let source = source.upgrade();
        let upstream = upstream.clone();
        Box::pin(async move {
            let source = source.ok_or_else(|| HandlerError::failed("the source was removed"))?;
            let started = Instant::now();
            // A modern caller's retry: resume the parked upstream call.
            if let Some(key) = ctx.state::<ParkKey>() {
                let parked = source.parked.take(key.parked).await;
                let parked = parked.ok_or_else(|| {
                    HandlerError::failed(format!(
                        "source `{}`: the upstream call waiting for this answer expired",
                        source.spec.name
                    ))
                })?;
                let call: UpstreamCall = Box::pin(AbortOnDrop(parked.call));
                return drive(
                    &source,
                    &ctx,
                    call,
                    parked.questions,
                    Some(parked.pending),
                    parked.asked,
                    started,
                )
                .await;
            }
            let (questions_tx, questions) = mpsc::unbounded_channel();
            let call: UpstreamCall = Box::pin(call_upstream(
                source.clone(),
                upstream,
                args.into_value(),
                retry,
                upstream_options(&ctx, questions_tx),
            ));
            drive(&source, &ctx, call, questions, None, 0, started).await
        })
    })
}

/// An upstream `tools/call` under way: driven in place by the caller's handler, and moved
/// into a task of its own only when it is parked for a modern caller's retry.
type UpstreamCall = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<CallToolResult, CallFailure>> + Send>,
>;

/// The upstream call itself: a lease, the call, and one more try (on a fresh connection)
/// for read-only or idempotent tools whose call never reached a live server.
async fn call_upstream(
    source: Arc<Source>,
    upstream: Arc<str>,
    mut arguments: Value,
    retry: bool,
    opts: RequestOptions,
) -> Result<CallToolResult, CallFailure> {
    let attempts = if retry { 2 } else { 1 };
    let mut last = ClientError::Closed;
    for attempt in 1..=attempts {
        let lease: Lease = source.pool.lease().await.map_err(CallFailure::Host)?;
        // The last attempt takes the arguments; only a retry needs a copy.
        let args = if attempt < attempts {
            arguments.clone()
        } else {
            std::mem::take(&mut arguments)
        };
        match lease.call_tool_with(&upstream, args, &opts).await {
            Ok(result) => return Ok(result),
            Err(e) => {
                lease.report(&e);
                if !retryable(&e) {
                    return Err(CallFailure::Client(e));
                }
                last = e;
            }
        }
    }
    Err(CallFailure::Client(last))
}

/// A parked call's task, awaited again by the retry: dropping it (the retry gave up or was
/// cancelled) stops the upstream call.
struct AbortOnDrop(tokio::task::JoinHandle<Result<CallToolResult, CallFailure>>);

impl std::future::Future for AbortOnDrop {
    type Output = Result<CallToolResult, CallFailure>;
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        std::pin::Pin::new(&mut self.0)
            .poll(cx)
            .map(|joined| joined.unwrap_or(Err(CallFailure::Aborted)))
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Waits for an upstream call, putting the questions it asks to our caller. A modern
/// caller cannot answer mid-call: the call is parked (moved into a task of its own) and
/// the round ends with `InputRequired`; the caller's retry resumes it here. Dropping this
/// future (the caller cancelled) drops the call, which cancels it upstream.
async fn drive(
    source: &Arc<Source>,
    ctx: &RequestContext,
    mut call: UpstreamCall,
    mut questions: mpsc::UnboundedReceiver<Question>,
    mut pending: Option<Question>,
    mut asked: u32,
    started: Instant,
) -> Result<CallToolResult, HandlerError> {
    let name = &source.spec.name;
    loop {
        if let Some(question) = pending.take() {
            let key = format!("upstream-{asked}");
            match put_to_caller(ctx, &key, &question).await {
                Ok(answer) => {
                    let _ = question.answer.send(Ok(answer));
                    asked += 1;
                }
                Err(toolyard::InputError::InputRequired) => {
                    let parked_key = format!(
                        "{name}-{}",
                        source.next_park.fetch_add(1, Ordering::Relaxed)
                    );
                    ctx.set_state(&ParkKey {
                        parked: parked_key.clone(),
                        asked,
                    });
                    source.parked.park(
                        parked_key,
                        Parked {
                            call: tokio::spawn(call),
                            questions,
                            pending: question,
                            asked,
                        },
                    );
                    return Err(HandlerError::Input(toolyard::InputError::InputRequired));
                }
                Err(e) => {
                    let _ = question.answer.send(Err(relay_error(e)));
                }
            }
        }
        tokio::select! {
            done = &mut call => {
                return match done {
                    Ok(result) => Ok(annotate(result, name, started)),
                    Err(CallFailure::Host(e)) => Err(host_failure(e)),
                    Err(CallFailure::Client(e)) => Err(client_failure(name, e)),
                    Err(CallFailure::Aborted) => Err(HandlerError::failed(format!("source `{name}`: the call was aborted"))),
                };
            }
            Some(question) = questions.recv() => pending = Some(question),
            () = ctx.cancelled() => return Err(HandlerError::failed("cancelled")),
        }
    }
}

/// Adds where the result came from and how long it took to the result's `_meta`.
fn annotate(mut result: CallToolResult, source: &str, started: Instant) -> CallToolResult {
    // The upstream's `resultType` is its wire's; our server writes its own.
    result.result_type = None;
    let meta = result.meta.get_or_insert_with(Default::default);
    meta.insert(
        "io.toolyard/source".into(),
        json!({ "name": source, "elapsedMs": started.elapsed().as_secs_f64() * 1000.0 }),
    );
    result
}

fn forward_read(source: &Arc<Source>) -> toolyard::ResourceFn {
    let source = Arc::downgrade(source);
    Arc::new(move |ctx: RequestContext, request| {
        let source = source.upgrade();
        Box::pin(async move {
            let source = source.ok_or_else(|| HandlerError::failed("the source was removed"))?;
            let name = source.spec.name.clone();
            let upstream = upstream_uri(&name, &request.uri)
                .ok_or_else(|| {
                    HandlerError::failed(format!(
                        "`{}` is not a URI of source `{name}`",
                        request.uri
                    ))
                })?
                .to_owned();
            let lease = source.pool.lease().await.map_err(host_failure)?;
            let result: Result<ReadResourceResult, ClientError> = answering(&ctx, |opts| {
                let lease = &lease;
                async move { lease.read_resource_with(&upstream, &opts).await }
            })
            .await;
            match result {
                Ok(read) => Ok(read
                    .contents
                    .into_iter()
                    .map(|c| rename_contents(c, &name))
                    .collect()),
                Err(e) => {
                    lease.report(&e);
                    Err(client_failure(&name, e))
                }
            }
        })
    })
}

/// Runs an upstream request, putting the questions it asks to our caller (no parking: a
/// modern caller's questions are refused, since reads and prompts are not parked).
async fn answering<T, F>(
    ctx: &RequestContext,
    request: impl FnOnce(RequestOptions) -> F,
) -> Result<T, ClientError>
where
    F: std::future::Future<Output = Result<T, ClientError>>,
{
    let (tx, mut questions) = mpsc::unbounded_channel();
    let request = request(upstream_options(ctx, tx));
    tokio::pin!(request);
    let mut asked = 0u32;
    loop {
        tokio::select! {
            done = &mut request => return done,
            Some(q) = questions.recv() => {
                let answer = put_to_caller(ctx, &format!("upstream-{asked}"), &q).await.map_err(relay_error);
                asked += 1;
                let _ = q.answer.send(answer);
            }
        }
    }
}

fn rename_contents(mut c: ResourceContents, source: &str) -> ResourceContents {
    match &mut c {
        ResourceContents::Text(t) => t.uri = expose_uri(source, &t.uri),
        ResourceContents::Blob(b) => b.uri = expose_uri(source, &b.uri),
    }
    c
}

fn forward_prompt(source: &Arc<Source>, upstream: String) -> toolyard::PromptFn {
    let source = Arc::downgrade(source);
    Arc::new(move |ctx: RequestContext, args: HashMap<String, String>| {
        let source = source.upgrade();
        let upstream = upstream.clone();
        Box::pin(async move {
            let source = source.ok_or_else(|| HandlerError::failed("the source was removed"))?;
            let name = source.spec.name.clone();
            let lease = source.pool.lease().await.map_err(host_failure)?;
            let result: Result<GetPromptResult, ClientError> = answering(&ctx, |opts| {
                let lease = &lease;
                async move { lease.get_prompt_with(&upstream, json!(args), &opts).await }
            })
            .await;
            result
                .map(|mut prompt| {
                    prompt.result_type = None;
                    prompt
                })
                .map_err(|e| {
                    lease.report(&e);
                    client_failure(&name, e)
                })
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_round_trip() {
        let exposed = expose_uri("everything", "test://static/resource/1");
        assert_eq!(exposed, "everything+test://static/resource/1");
        assert_eq!(
            upstream_uri("everything", &exposed),
            Some("test://static/resource/1")
        );
        assert_eq!(upstream_uri("time", &exposed), None);
    }
}
