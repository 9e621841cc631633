//! The gateway side: the workers' tools, resources, resource templates and prompts,
//! discovered from the catalog bucket and exposed through a Toolyard [`Server`], over every
//! transport and both generations. Tools and prompts are exposed as `{server}__{name}`
//! (configurable, including no prefix); resources and templates by their URIs as they are
//! (URIs are global: when two workers offer one, the first keeps it and the clash is logged).
//! A call, a read or a get publishes a 2026-07-28 request to the worker subject with a reply
//! inbox and reads the frames: progress and log messages go to the caller as they come, the
//! `end` frame is the answer. Workers appearing, changing what they offer and going away
//! change the server's registries, which notify the `list_changed`s.

use crate::catalog::{self, CatalogEntry};
use crate::error::NatsError;
use crate::jobs::Handoff;
use crate::replies::{Replies, ReplyStream};
use crate::scope::Scope;
use crate::wire::{self, Frame};
use async_nats::jetstream::kv::{Entry, Operation};
use async_nats::{Client, HeaderMap, HeaderValue, StatusCode, Subject};
use futures_util::StreamExt;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use toolyard::{
    CompletionTarget, Completions, ForwardFn, HandlerError, PromptDef, RawArgs, RawResult,
    RequestContext, ResourceDef, ResourceRequest, Server, TemplateDef, ToolDef, UriTemplate,
};
use toolyard_client::{OutgoingRequest, RequestOutcome};
use toolyard_proto::jsonrpc::{needs_escape, write_str};
use toolyard_proto::{
    CompleteResult, ErrorObject, GetPromptResult, InputRequest, InputRequiredResult,
    InputResponses, LoggingLevel, Prompt, ReadResourceResult, Resource, ResourceTemplate, Tool,
};

/// How the gateway side exposes and calls the workers' tools.
#[derive(Debug, Clone)]
pub struct RemoteConfig {
    /// The subject prefix (default `mcp.v1`).
    pub prefix: String,
    /// Between a worker's server name and a tool's or prompt's name (default `__`); `None`
    /// exposes them under their own names.
    pub separator: Option<String>,
    /// A call fails with -32010 when no frame (not even a keepalive) came for this long.
    /// Sooner when the worker is gone: a silent call asks `{reply}.ctl` whether anything
    /// still listens (after 2 s of silence once a frame came, from 5 s after it was sent
    /// before one did).
    pub inactivity: Duration,
    /// The budget a call announces to the worker (`Mcp-Timeout-Ms`), and within which a call
    /// a busy worker refused (-32015) is sent again.
    pub call_timeout: Duration,
    /// Replicas of the catalog bucket when this gateway is the one to create it (default 1).
    pub catalog_replicas: usize,
    /// Runs the workers' tools as durable jobs when a call runs as a task (`jobs`): off by
    /// default, since it needs the server's task store to be a
    /// [`NatsTaskStore`](crate::NatsTaskStore) on this bus (`toolyard serve --nats` sets both).
    pub durable_tasks: bool,
    /// The tenant and user this gateway's requests carry in their subjects (default: `_`,
    /// unattributed). It exposes only the pools that take them ([`Scope::serves`]): the
    /// pool of every caller, its tenant's, its user's.
    pub caller: Scope,
    /// Sends each caller's principal (what the server's transport authenticated) with its
    /// requests, for the worker's tool (default on): the subject's user token is made from
    /// it ([`principal_token`](crate::principal_token)) and `Mcp-Principal` carries it
    /// (`crate::principal`). Not when `caller` names a user: those requests are that
    /// user's.
    pub forward_principal: bool,
    /// Also exposes the user pools of this gateway's tenant (default off): each caller's
    /// calls of such a server go to its own pool, the one whose user token is its
    /// principal's token, as the subject says (each user's own workers, e.g. their desktop's
    /// tools, behind one gateway). Needs `caller` to name a tenant and no user, and
    /// `forward_principal`. A caller without a principal, or without a pool of its own, is
    /// told no worker serves it (-32011).
    pub user_pools: bool,
}

impl Default for RemoteConfig {
    fn default() -> RemoteConfig {
        RemoteConfig {
            prefix: wire::DEFAULT_PREFIX.to_owned(),
            separator: Some("__".to_owned()),
            inactivity: Duration::from_secs(60),
            call_timeout: Duration::from_secs(300),
            catalog_replicas: 1,
            durable_tasks: false,
            caller: Scope::every(),
            forward_principal: true,
            user_pools: false,
        }
    }
}

impl RemoteConfig {
    /// Whether this gateway exposes the pool of `scope`: one that takes its calls, or (with
    /// `user_pools`) a user pool of its tenant.
    fn takes(&self, scope: &Scope) -> bool {
        scope.serves(&self.caller)
            || (self.user_pools && scope.user.is_some() && scope.tenant == self.caller.tenant)
    }

    /// `user_pools` needs a tenant, no user, and principals sent.
    pub(crate) fn check(&self) -> Result<(), NatsError> {
        self.caller.check()?;
        if self.user_pools
            && (self.caller.tenant.is_none()
                || self.caller.user.is_some()
                || !self.forward_principal)
        {
            return Err(NatsError::Config(
                "user_pools needs the gateway's tenant, no user of its own, and forward_principal: each call goes to the pool of its caller's principal".to_owned(),
            ));
        }
        Ok(())
    }

    /// Whether this gateway sends its callers' principals at all (`principal_sent`).
    fn principal_sent_at_all(&self) -> bool {
        self.forward_principal && self.caller.user.is_none()
    }

    /// The principal sent with a request made for `ctx` (see `forward_principal`).
    fn principal_sent<'c>(&self, ctx: &'c RequestContext) -> Option<&'c str> {
        if self.principal_sent_at_all() {
            ctx.principal()
        } else {
            None
        }
    }

    fn expose(&self, server: &str, name: &str) -> String {
        match &self.separator {
            Some(sep) => format!("{server}{sep}{name}"),
            None => name.to_owned(),
        }
    }
}

/// The workers' tools, resources and prompts in a server, kept in step with the catalog;
/// dropped, it stops following the catalog (they stay until [`RemoteTools::shutdown`]).
#[derive(Debug)]
pub struct RemoteTools {
    inner: Arc<Inner>,
    watcher: tokio::task::JoinHandle<()>,
    connection: tokio::task::JoinHandle<()>,
    /// Removes what async-nats cannot read from the buckets the watch connection reads,
    /// each time that connection changes (`unreadable`).
    scrubber: tokio::task::JoinHandle<()>,
}

#[derive(Debug)]
struct Inner {
    server: Server,
    /// The connection the calls travel on.
    client: Client,
    /// The connection the catalog is followed on: the calls' own, or one of its own
    /// ([`RemoteTools::start_with_watch`]).
    watch: Client,
    config: RemoteConfig,
    state: Mutex<State>,
    /// The one reply subscription every call is answered on (`replies`). A call in flight
    /// when the bus connection is lost ends there at once with -32010 (its frames may have
    /// been dropped while the connection was down; N5, N9), instead of at its inactivity
    /// deadline (`connection::watch_connection`).
    replies: Replies,
    /// Where task-augmented calls go, with `durable_tasks` (set before the first catalog
    /// entry is applied, so no worker's tool is exposed before it is).
    jobs: std::sync::OnceLock<crate::jobs::Submitter>,
    /// Whether the catalog has been loaded (`follow_catalog`).
    catalog: Mutex<CatalogState>,
    /// Woken when the catalog is first loaded, or an attempt to load it fails.
    catalog_changed: tokio::sync::Notify,
    /// Catalog entries not taken (anything on the bus can write the bucket), logged at each
    /// doubling.
    ignored: crate::doubling::Doubling,
    /// Whether the gateways' shared state key was asked for (once: `attach` runs again after
    /// each loss of the watch).
    state_key_asked: std::sync::atomic::AtomicBool,
    /// Follows that key, when this gateway uses it (aborted with the `RemoteTools`).
    state_key: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

/// Where following the catalog is; `start` and `follow_catalog` agree under its lock on
/// whether the `nats`/`catalog` component was reported down, so an "up" never comes before
/// its "down".
#[derive(Debug, Default)]
struct CatalogState {
    loaded: bool,
    /// Reported down to the lifecycle (`start` gave up waiting), so its load reports it up.
    reported_down: bool,
    /// Why the last attempt to load it failed.
    failure: Option<String>,
}

#[derive(Debug, Default)]
struct State {
    /// Catalog entries by key, with their revisions.
    entries: HashMap<String, (u64, CatalogEntry)>,
    /// What is installed in the server.
    installed: Installed,
    /// Worker names with at least one instance in the catalog.
    servers: BTreeSet<String>,
    /// The clashes logged already (kind, exposed name or URI, the server left out), so a
    /// clash is logged when it starts, not at every heartbeat.
    clashes: BTreeSet<(&'static str, String, String)>,
    /// The overlapping pools logged already (server, the two scopes), likewise.
    overlaps: BTreeSet<(String, Scope, Scope)>,
}

/// Exposed name (or URI) -> (worker server, the item as the worker lists it: one, or one
/// per group of users its users' pools offer different definitions to).
type Installs<T> = BTreeMap<String, (String, Vec<T>)>;

#[derive(Debug, Default)]
struct Installed {
    /// Each tool, how its task-augmented calls run, and whom it is for.
    tools: Installs<(Tool, TaskRun, Tokens)>,
    resources: Installs<(Resource, Tokens)>,
    templates: Installs<(ResourceTemplate, Tokens)>,
    prompts: Installs<(Prompt, Tokens)>,
}

impl RemoteTools {
    /// Starts following the catalog and exposing the workers' tools through `server`.
    ///
    /// Returns once the catalog is loaded, so the first listing has the workers' tools, or
    /// when it cannot be: a first attempt failed (JetStream has no quorum; within about 8 s),
    /// or 3 s passed without a connection to the NATS server (not reachable yet). It is then
    /// loaded in the background as soon as it can be, the tools
    /// appearing with `list_changed`, and until then the server is not ready (`/readyz`:
    /// component `nats`/`catalog` down). A gateway started before its broker serves at once
    /// instead of failing.
    pub async fn start(
        server: Server,
        client: Client,
        config: RemoteConfig,
    ) -> Result<RemoteTools, NatsError> {
        Self::start_with_watch(server, client.clone(), client, config).await
    }

    /// [`start`](Self::start), following the catalog on `watch`, a connection other than
    /// the calls' `client`. Anything allowed to write the catalog bucket can put a message
    /// there whose header block async-nats cannot parse, and async-nats ends the connection
    /// that reads it: on the calls' connection that ends every call in flight (-32010), on a
    /// connection of its own only the watch, which starts again. `toolyard serve --nats`
    /// follows the catalog on its change events' connection.
    pub async fn start_with_watch(
        server: Server,
        client: Client,
        watch: Client,
        config: RemoteConfig,
    ) -> Result<RemoteTools, NatsError> {
        config.check()?;
        let replies = Replies::start(&client)
            .await
            .map_err(|e| NatsError::Bus(format!("subscribing for the answers: {e}")))?;
        let inner = Arc::new(Inner {
            server,
            client,
            watch,
            config,
            state: Mutex::default(),
            replies,
            jobs: std::sync::OnceLock::new(),
            catalog: Mutex::default(),
            catalog_changed: tokio::sync::Notify::new(),
            ignored: crate::doubling::Doubling::default(),
            state_key_asked: std::sync::atomic::AtomicBool::new(false),
            state_key: Mutex::new(None),
        });
        // A catalog entry (or, on the same connection in `serve --nats`, a task record)
        // async-nats cannot read drops the watch's connection, and the watch, set up again,
        // is handed it again: it is removed once that connection changed.
        let scrubber = tokio::spawn(crate::unreadable::remove_on_reconnect(
            inner.watch.clone(),
            inner.client.clone(),
            &[
                crate::unreadable::CATALOG_STREAM,
                crate::unreadable::TASKS_STREAM,
            ],
        ));
        let following = inner.clone();
        let watcher = tokio::spawn(follow_catalog(following));
        inner.first_load().await;
        {
            let mut catalog = inner.catalog();
            if !catalog.loaded {
                let reason = format!(
                    "the workers' catalog is not loaded yet ({}); retrying",
                    catalog
                        .failure
                        .as_deref()
                        .unwrap_or("no answer from the NATS server or JetStream yet")
                );
                tracing::warn!(target: "toolyard::nats", %reason, "serving without the workers' tools for now");
                inner
                    .server
                    .lifecycle()
                    .publish(toolyard::LifecycleEvent::ComponentDown {
                        kind: "nats",
                        name: "catalog".to_owned(),
                        reason,
                        required: true,
                    });
                catalog.reported_down = true;
            }
        }
        let connection = tokio::spawn(crate::connection::watch_connection(
            inner.server.clone(),
            inner.client.clone(),
            Some(inner.replies.loss_signal()),
        ));
        Ok(RemoteTools {
            inner,
            watcher,
            connection,
            scrubber,
        })
    }

    /// The exposed names of the tools installed now.
    pub fn tools(&self) -> Vec<String> {
        self.inner.state().installed.tools.keys().cloned().collect()
    }

    /// The URIs of the resources installed now.
    pub fn resources(&self) -> Vec<String> {
        self.inner
            .state()
            .installed
            .resources
            .keys()
            .cloned()
            .collect()
    }

    /// The URI templates installed now.
    pub fn resource_templates(&self) -> Vec<String> {
        self.inner
            .state()
            .installed
            .templates
            .keys()
            .cloned()
            .collect()
    }

    /// The exposed names of the prompts installed now.
    pub fn prompts(&self) -> Vec<String> {
        self.inner
            .state()
            .installed
            .prompts
            .keys()
            .cloned()
            .collect()
    }

    fn stop_following_state_key(&self) {
        let following = self
            .inner
            .state_key
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take();
        if let Some(task) = following {
            task.abort();
        }
    }

    /// Stops following the catalog and removes the workers' tools, resources and prompts
    /// from the server.
    pub fn shutdown(self) {
        self.watcher.abort();
        self.connection.abort();
        self.stop_following_state_key();
        let installed = std::mem::take(&mut self.inner.state().installed);
        let server = &self.inner.server;
        let tools: Vec<String> = installed.tools.into_keys().collect();
        if !tools.is_empty() {
            server.remove_tools(tools);
        }
        let uris: Vec<String> = installed
            .resources
            .into_keys()
            .chain(installed.templates.into_keys())
            .collect();
        if !uris.is_empty() {
            server.remove_resources(uris);
        }
        let prompts: Vec<String> = installed.prompts.into_keys().collect();
        if !prompts.is_empty() {
            server.remove_prompts(prompts);
        }
    }
}

impl Drop for RemoteTools {
    fn drop(&mut self) {
        self.watcher.abort();
        self.connection.abort();
        self.scrubber.abort();
        self.stop_following_state_key();
    }
}

/// How long [`RemoteTools::start`] waits for the catalog without a connection to the NATS
/// server before it serves without the catalog.
const FIRST_LOAD: Duration = catalog::TIMEOUT;

/// The most [`RemoteTools::start`] waits for the catalog in any case (a first attempt is
/// bounded: a few seconds of lookups, then requests of `catalog::TIMEOUT`).
const FIRST_LOAD_AT_MOST: Duration = Duration::from_secs(15);

/// Opens the catalog bucket (and, with durable tasks, the job stream), loads what it holds
/// and follows its changes; when that cannot be done (no NATS server yet, JetStream without
/// quorum) or the watch ends, does it again after a pause. Entries that went away while it
/// was not watching are dropped when it loads again.
async fn follow_catalog(inner: Arc<Inner>) {
    let mut attempt = 0u32;
    loop {
        match attach(&inner).await {
            Ok(mut watch) => {
                attempt = 0;
                {
                    let mut catalog = inner.catalog();
                    if !catalog.loaded {
                        catalog.loaded = true;
                        inner.catalog_changed.notify_waiters();
                        if catalog.reported_down {
                            tracing::warn!(target: "toolyard::nats", "the workers' catalog is loaded: serving their tools");
                            inner.server.lifecycle().publish(
                                toolyard::LifecycleEvent::ComponentUp {
                                    kind: "nats",
                                    name: "catalog".to_owned(),
                                },
                            );
                        }
                    }
                }
                while let Some(entry) = watch.next().await {
                    match entry {
                        Ok(entry) => inner.apply(&entry),
                        Err(e) => tracing::warn!(error = %e, "catalog watch"),
                    }
                }
                tracing::warn!(target: "toolyard::nats", "the catalog watch ended: following it again");
            }
            Err(e) => {
                attempt += 1;
                // `start` warned once already; then about once a minute.
                if attempt.is_multiple_of(12) {
                    tracing::warn!(target: "toolyard::nats", error = %e, attempt, "the workers' catalog cannot be loaded yet; retrying");
                } else {
                    tracing::debug!(target: "toolyard::nats", error = %e, attempt, "the catalog cannot be loaded yet; retrying");
                }
                inner.catalog().failure = Some(e.to_string());
                inner.catalog_changed.notify_waiters();
            }
        }
        tokio::time::sleep(Duration::from_millis(500 * u64::from(attempt.clamp(1, 10)))).await;
    }
}

/// One attempt of `follow_catalog`: the catalog's watch, once what the bucket holds is
/// applied.
async fn attach(inner: &Arc<Inner>) -> Result<async_nats::jetstream::kv::Watch, NatsError> {
    // Bounded (`catalog::TIMEOUT`): a gateway starting while JetStream has no quorum is told
    // so in seconds, and the watch's consumer, lost in an outage, is recreated by attempts
    // of that length.
    let js = catalog::context(inner.watch.clone());
    let config = &inner.config;
    let store = catalog::bucket(&js, catalog::HEARTBEAT, config.catalog_replicas).await?;
    // A 2026-07-28 caller's retry of an input round may reach another gateway on the bus
    // (behind a load balancer), whose key must open what this one sealed.
    if !inner
        .state_key_asked
        .swap(true, std::sync::atomic::Ordering::Relaxed)
    {
        let key = crate::state_key::GATEWAYS;
        match crate::state_key::share(&js, &inner.server, key, config.catalog_replicas).await {
            Ok(Some(following)) => {
                tracing::info!(target: "toolyard::nats", "requestState sealed with the secret the gateways share on the bus ({})", crate::state_key::BUCKET);
                *inner.state_key.lock().unwrap_or_else(|p| p.into_inner()) = Some(following);
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(target: "toolyard::nats", error = %e, "requestState sealed with this process's own key: a caller's retry of an input round that reaches another gateway fails; give every gateway the same state secret")
            }
        }
    }
    let watch = store
        .watch_all()
        .await
        .map_err(|e| NatsError::Bus(format!("watching the catalog: {e}")))?;
    if config.durable_tasks && inner.jobs.get().is_none() {
        let jobs =
            crate::jobs::Submitter::open(&inner.client, &config.prefix, config.catalog_replicas)
                .await?;
        let _ = inner.jobs.set(jobs);
    }
    // What the bucket holds now, before the first listing (the watch delivers these again;
    // applying an entry twice changes nothing).
    let mut present = std::collections::HashSet::new();
    let mut keys = store
        .keys()
        .await
        .map_err(|e| NatsError::Bus(format!("listing the catalog: {e}")))?;
    while let Some(Ok(key)) = keys.next().await {
        if let Ok(Some(entry)) = store.entry(key.clone()).await {
            inner.apply(&entry);
        }
        present.insert(key);
    }
    inner.keep_only(&present);
    Ok(watch)
}

impl Inner {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn catalog(&self) -> std::sync::MutexGuard<'_, CatalogState> {
        self.catalog.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until the catalog is loaded or a first attempt to load it failed; without a
    /// connection to the NATS server, [`FIRST_LOAD`] at most (a broker that is not there yet
    /// does not hold the gateway up), with one, as long as that attempt takes (a slow broker
    /// does not make the gateway serve without its tools).
    async fn first_load(&self) {
        let began = tokio::time::Instant::now();
        loop {
            // Armed before the check: a change between the two still wakes it.
            let changed = self.catalog_changed.notified();
            tokio::pin!(changed);
            changed.as_mut().enable();
            {
                let catalog = self.catalog();
                if catalog.loaded || catalog.failure.is_some() {
                    return;
                }
            }
            let connected = matches!(
                self.watch.connection_state(),
                async_nats::connection::State::Connected
            );
            let waited = began.elapsed();
            if (!connected && waited >= FIRST_LOAD) || waited >= FIRST_LOAD_AT_MOST {
                return;
            }
            // Woken by the attempt's end; the connection's state is looked at again.
            let _ = tokio::time::timeout(Duration::from_millis(250), changed).await;
        }
    }

    /// One catalog change: the entry is recorded (or dropped), then the server's tools,
    /// resources, templates and prompts are made to match every live entry (`install`).
    ///
    /// Anything on the bus can write the bucket, so an entry is taken only as a worker writes
    /// it: its server a subject token (else its tools would be called on subjects with
    /// wildcards or extra tokens), its scope one a worker can take (`Scope::of`), and its
    /// key its own (`srv.{server}.{instance}`: else one
    /// bad entry could stand in for another server's, the newest winning). A put that is not
    /// taken still replaces what the key held.
    fn apply(self: &Arc<Self>, entry: &Entry) {
        let mut state = self.state();
        let taken = match entry.operation {
            Operation::Put => match serde_json::from_slice::<CatalogEntry>(&entry.value) {
                Ok(parsed) if !wire::token_safe(&parsed.server) => {
                    if let Some(ignored) = self.ignored.count() {
                        tracing::warn!(key = %entry.key, server = %parsed.server, ignored, "a catalog entry whose server is no subject token: ignored (logged at each doubling of the count)");
                    }
                    None
                }
                Ok(parsed) if !parsed.scope.is_valid() => {
                    if let Some(ignored) = self.ignored.count() {
                        tracing::warn!(key = %entry.key, server = %parsed.server, scope = ?parsed.scope, ignored, "a catalog entry whose scope no worker could take: ignored (logged at each doubling of the count)");
                    }
                    None
                }
                Ok(parsed) if parsed.key() != entry.key => {
                    if let Some(ignored) = self.ignored.count() {
                        tracing::warn!(key = %entry.key, server = %parsed.server, instance = %parsed.instance, ignored, "a catalog entry under another key than its own: ignored (logged at each doubling of the count)");
                    }
                    None
                }
                Ok(parsed) => Some(parsed),
                Err(e) => {
                    if let Some(ignored) = self.ignored.count() {
                        tracing::warn!(key = %entry.key, error = %e, ignored, "an unreadable catalog entry: ignored (logged at each doubling of the count)");
                    }
                    None
                }
            },
            Operation::Delete | Operation::Purge => None,
        };
        let changed = match taken {
            Some(parsed) => {
                state
                    .entries
                    .insert(entry.key.clone(), (entry.revision, parsed));
                true
            }
            None => state.entries.remove(&entry.key).is_some(),
        };
        if changed {
            self.install(state);
        }
    }

    /// After following the catalog again (its watch had ended): entries the bucket no
    /// longer holds went away meanwhile, unseen.
    fn keep_only(self: &Arc<Self>, present: &std::collections::HashSet<String>) {
        let mut state = self.state();
        let before = state.entries.len();
        state.entries.retain(|key, _| present.contains(key));
        if state.entries.len() != before {
            self.install(state);
        }
    }

    /// Makes the server's tools, resources, templates and prompts match every live entry.
    fn install(self: &Arc<Self>, mut state: std::sync::MutexGuard<'_, State>) {
        // Per worker server, its entries of the pools that take this gateway's calls, newest
        // first (pools of one server whose scopes overlap are refused, so these are one
        // pool's, or, with `user_pools`, its users' own pools).
        let mut by_server: BTreeMap<&str, Vec<&(u64, CatalogEntry)>> = BTreeMap::new();
        for e in state
            .entries
            .values()
            .filter(|e| self.config.takes(&e.1.scope))
        {
            by_server.entry(e.1.server.as_str()).or_default().push(e);
        }
        let servers: BTreeSet<String> = by_server.keys().map(|s| (*s).to_owned()).collect();
        let (mut offered_tools, mut resources, mut templates, mut prompts) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        // A task is a durable job on the job queue of the pool serving it; a deferred task's
        // first rounds run in place and its task is then a job. Without jobs, a task is made
        // at once and its call forwarded in place.
        let durable = self.jobs.get().is_some();
        for (server, mut entries) in by_server {
            entries.sort_by_key(|e| std::cmp::Reverse(e.0));
            // The newest entry says what a pool offers (replicas normally agree). A server
            // its users' own pools serve offers each user what that user's pool does, and
            // nobody else: each item is for the users whose pools offer it (`Tokens`).
            let per_user =
                self.config.user_pools && entries.iter().any(|e| e.1.scope.user.is_some());
            // Items for some callers only are offered when the worker hears who calls.
            let whom = (per_user, self.config.principal_sent_at_all());
            let offering: Vec<&CatalogEntry> = if per_user {
                entries
                    .iter()
                    .map(|e| &e.1)
                    .filter(|e| e.scope.user.is_some())
                    .collect()
            } else {
                entries.iter().map(|e| &e.1).take(1).collect()
            };
            for (tool, e, tokens) in offered(
                &offering,
                whom,
                |e| &e.tools,
                |e| &e.for_users.tools,
                |t| &t.name,
            ) {
                let queue: Arc<str> = e.scope.job_queue(server).into();
                let exposed = self.config.expose(server, &tool.name);
                let run = match (durable, e.deferred_tasks.contains(&tool.name)) {
                    (false, _) => TaskRun::InPlace,
                    (true, false) => TaskRun::Job(queue),
                    (true, true) => TaskRun::Deferred(queue),
                };
                offered_tools.push((exposed, server, (tool.clone(), run, tokens)));
            }
            for (resource, _, tokens) in offered(
                &offering,
                whom,
                |e| &e.resources,
                |e| &e.for_users.resources,
                |r| &r.uri,
            ) {
                resources.push((resource.uri.clone(), server, (resource.clone(), tokens)));
            }
            let each_template = offered(
                &offering,
                whom,
                |e| &e.resource_templates,
                |e| &e.for_users.resource_templates,
                |t| &t.uri_template,
            );
            for (template, _, tokens) in each_template {
                match UriTemplate::parse(&template.uri_template) {
                    Ok(_) => templates.push((
                        template.uri_template.clone(),
                        server,
                        (template.clone(), tokens),
                    )),
                    Err(e) => {
                        tracing::debug!(%server, template = %template.uri_template, error = %e, "a worker's resource template skipped");
                    }
                }
            }
            for (prompt, _, tokens) in offered(
                &offering,
                whom,
                |e| &e.prompts,
                |e| &e.for_users.prompts,
                |p| &p.name,
            ) {
                let exposed = self.config.expose(server, &prompt.name);
                prompts.push((exposed, server, (prompt.clone(), tokens)));
            }
        }
        let mut clashes = Vec::new();
        let tools = assign(&state.installed.tools, offered_tools, "tool", &mut clashes);
        let resources = assign(
            &state.installed.resources,
            resources,
            "resource",
            &mut clashes,
        );
        let templates = assign(
            &state.installed.templates,
            templates,
            "template",
            &mut clashes,
        );
        let prompts = assign(&state.installed.prompts, prompts, "prompt", &mut clashes);
        let clashes: BTreeSet<(&'static str, String, String)> = clashes.into_iter().collect();
        for (kind, key, left_out) in clashes.difference(&state.clashes) {
            let kept = match *kind {
                "tool" => tools.get(key).map(|v| v.0.as_str()),
                "resource" => resources.get(key).map(|v| v.0.as_str()),
                "template" => templates.get(key).map(|v| v.0.as_str()),
                _ => prompts.get(key).map(|v| v.0.as_str()),
            };
            tracing::warn!(
                %kind, name = %key, kept = kept.unwrap_or_default(), %left_out,
                "two workers offer the same {kind}: the first keeps it, the other's is not exposed"
            );
        }
        state.clashes = clashes;
        // Pools of one server whose scopes overlap both run each call both take. A pool
        // joining beside one refuses to start, so this is one the check could not see (it
        // started while the catalog could not be read, or while the other's entry had
        // expired: docs/nats.md "Scoped pools"): said when it starts, as a clash is.
        let overlaps = overlapping_pools(state.entries.values().map(|(_, e)| e));
        for (server, a, b) in overlaps.difference(&state.overlaps) {
            tracing::error!(%server, first = %a, second = %b, "two pools of {server} overlap: NATS gives each call both take to both, which run it twice; stop one of them (docs/nats.md, \"Scoped pools\")");
        }
        state.overlaps = overlaps;

        let mut audiences = Audiences::default();
        let (gone_tools, new_tools) = diff(&state.installed.tools, &tools);
        let tool_defs: Vec<ToolDef> = new_tools
            .into_iter()
            .flat_map(|(exposed, (server, each))| each.iter().map(move |v| (exposed, server, v)))
            .map(|(exposed, server, (tool, run, tokens))| {
                let mut def_tool = tool.clone();
                def_tool.name = exposed.clone();
                // A tool that says calling it again is harmless may be re-issued once when its
                // stream is lost (its worker died or stalled); no other tool ever is.
                let retry_safe = tool.annotations.as_ref().is_some_and(|a| {
                    a.read_only_hint == Some(true) || a.idempotent_hint == Some(true)
                });
                let route = Route {
                    server: server.clone(),
                    tool: tool.name.clone(),
                    retry_safe,
                    tasks: run.clone(),
                };
                // The byte-level path: the worker checks the arguments against its own
                // schema, and its result is passed on as it came.
                let mut def = ToolDef::forwarding(def_tool, forward(self.clone(), route));
                if matches!(run, TaskRun::Deferred(_)) {
                    def = def.with_deferred_task();
                }
                audiences.give(def, tokens, ToolDef::for_audience)
            })
            .collect();
        let (mut gone_uris, new_resources) = diff(&state.installed.resources, &resources);
        let resource_defs: Vec<ResourceDef> = new_resources
            .into_iter()
            .flat_map(|(_, (server, each))| each.iter().map(move |v| (server, v)))
            .map(|(server, (resource, tokens))| {
                let def = ResourceDef::new(resource.clone(), read(self.clone(), server.clone()));
                audiences.give(def, tokens, ResourceDef::for_audience)
            })
            .collect();
        let (gone_templates, new_templates) = diff(&state.installed.templates, &templates);
        gone_uris.extend(gone_templates);
        // Argument completion for what is new: each completer asks the worker that serves
        // the name when it is asked (an item that went away completes to nothing).
        let mut completers = Vec::new();
        for (uri_template, _) in &new_templates {
            if let Ok(parsed) = UriTemplate::parse(uri_template) {
                for var in parsed.variables() {
                    completers.push(CompletionTarget::Resource(
                        (*uri_template).clone(),
                        var.to_owned(),
                    ));
                }
            }
        }
        let template_defs: Vec<TemplateDef> = new_templates
            .into_iter()
            .flat_map(|(_, (server, each))| each.iter().map(move |v| (server, v)))
            .filter_map(|(server, (template, tokens))| {
                let def =
                    TemplateDef::new(template.clone(), read(self.clone(), server.clone())).ok()?;
                Some(audiences.give(def, tokens, TemplateDef::for_audience))
            })
            .collect();
        let (gone_prompts, new_prompts) = diff(&state.installed.prompts, &prompts);
        for (exposed, (_, each)) in &new_prompts {
            let args: BTreeSet<&String> = each
                .iter()
                .flat_map(|(prompt, _)| prompt.arguments.iter().flatten().map(|a| &a.name))
                .collect();
            for arg in args {
                completers.push(CompletionTarget::Prompt((*exposed).clone(), arg.clone()));
            }
        }
        let prompt_defs: Vec<PromptDef> = new_prompts
            .into_iter()
            .flat_map(|(exposed, (server, each))| each.iter().map(move |v| (exposed, server, v)))
            .map(|(exposed, server, (prompt, tokens))| {
                let mut def_prompt = prompt.clone();
                def_prompt.name = exposed.clone();
                let def = PromptDef::new(
                    def_prompt,
                    get_prompt(self.clone(), server.clone(), prompt.name.clone()),
                );
                audiences.give(def, tokens, PromptDef::for_audience)
            })
            .collect();
        state.installed = Installed {
            tools,
            resources,
            templates,
            prompts,
        };
        // Worker names that appeared or left: lifecycle events for embedders and /readyz.
        let lifecycle = self.server.lifecycle();
        for name in servers.difference(&state.servers) {
            lifecycle.publish(toolyard::LifecycleEvent::ComponentUp {
                kind: "worker",
                name: name.clone(),
            });
        }
        for name in state.servers.difference(&servers) {
            lifecycle.publish(toolyard::LifecycleEvent::ComponentDown {
                kind: "worker",
                name: name.clone(),
                reason: "no instance in the catalog".to_owned(),
                required: false,
            });
        }
        state.servers = servers;
        drop(state);
        let server = &self.server;
        if !gone_tools.is_empty() {
            server.remove_tools(gone_tools);
        }
        if !gone_uris.is_empty() {
            server.remove_resources(gone_uris);
        }
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
        for target in completers {
            let complete = complete(Arc::downgrade(self), target.clone());
            server.add_completer(target, complete);
        }
    }
}

/// Who serves each exposed name (or URI) among the workers offering it (`offers` in the
/// order of their server names): the one serving it now keeps it while it still offers it
/// (a worker that comes later cannot take a name over), else the first, with every
/// definition it offers of it (one per group of users, `offered`). The others are
/// `clashes` (kind, name, the server left out).
fn assign<T>(
    installed: &Installs<T>,
    offers: Vec<(String, &str, T)>,
    kind: &'static str,
    clashes: &mut Vec<(&'static str, String, String)>,
) -> Installs<T> {
    let mut by_key: BTreeMap<String, Vec<(&str, T)>> = BTreeMap::new();
    for (key, server, item) in offers {
        by_key.entry(key).or_default().push((server, item));
    }
    let mut chosen = Installs::new();
    for (key, offered) in by_key {
        let current = installed.get(&key).map(|(s, _)| s.as_str());
        let at = offered
            .iter()
            .position(|(s, _)| Some(*s) == current)
            .unwrap_or(0);
        let server = offered[at].0;
        let mut items = Vec::new();
        for (other, item) in offered {
            if other == server {
                items.push(item);
            } else {
                clashes.push((kind, key.clone(), other.to_owned()));
            }
        }
        chosen.insert(key, (server.to_owned(), items));
    }
    chosen
}

/// The user tokens of the pools an item is for: `None` for everyone this gateway serves;
/// a server its users' own pools serve (`user_pools`) offers each item to the users whose
/// pools offer it.
type Tokens = Option<BTreeSet<String>>;

/// Each item of `offering` (a server's entries, newest first) by its name, as the newest
/// entry offering it has it, with that entry and whom it is for: `None` everyone, or the
/// tokens of the users whose pools offer it (`per_user`), or those its entries offer it to
/// (`restricted`, an item a worker offers to some callers only, `CatalogEntry::for_users`,
/// taken only when the gateway `tells` the worker who calls, as it must check again).
///
/// A name offered to some users only is listed to each as the newest entry offering it to
/// that user has it: when users' pools offer different definitions of one name (two versions
/// of a desk's tools), each definition is a row of its own for its users, so no user is
/// listed another's (its description, its schema). A name offered to everyone is one row,
/// the newest entry's.
fn offered<'e, T: PartialEq>(
    offering: &[&'e CatalogEntry],
    (per_user, tells): (bool, bool),
    items: impl Fn(&'e CatalogEntry) -> &'e [T],
    restricted: impl Fn(&'e CatalogEntry) -> &'e [crate::ForUsers<T>],
    name: impl Fn(&'e T) -> &'e str,
) -> Vec<(&'e T, &'e CatalogEntry, Tokens)> {
    let mut out: Vec<(&'e T, &'e CatalogEntry, Tokens)> = Vec::new();
    // The rows of each name.
    let mut at: HashMap<&'e str, Vec<usize>> = HashMap::new();
    for e in offering {
        let public = items(e).iter().map(|item| (item, None));
        let limited = restricted(e).iter().filter(|_| tells);
        let limited = limited.map(|r| (&r.item, Some(&r.tokens)));
        for (item, only) in public.chain(limited) {
            // Whom this entry's pool offers it to.
            let to: Tokens = match (per_user, &e.scope.user, only) {
                (true, Some(user), None) => Some(BTreeSet::from([user.clone()])),
                (true, Some(user), Some(tokens)) if tokens.contains(user) => {
                    Some(BTreeSet::from([user.clone()]))
                }
                (true, _, _) => continue,
                (false, _, None) => None,
                (false, _, Some(tokens)) => Some(tokens.iter().cloned().collect()),
            };
            let rows = at.entry(name(item)).or_default();
            let Some(&first) = rows.first() else {
                rows.push(out.len());
                out.push((item, e, to));
                continue;
            };
            let for_some = to.is_some() && rows.iter().all(|&i| out[i].2.is_some());
            if !for_some {
                // Everyone's if any entry offers it to everyone: one row.
                out[first].2 = match (out[first].2.take(), to) {
                    (Some(mut all), Some(more)) => {
                        all.extend(more);
                        Some(all)
                    }
                    _ => None,
                };
                continue;
            }
            // Users a newer entry offers it to keep that entry's definition.
            let mut to = to.unwrap_or_default();
            for &i in rows.iter() {
                if let Some(theirs) = &out[i].2 {
                    to.retain(|t| !theirs.contains(t));
                }
            }
            if to.is_empty() {
                continue;
            }
            match rows.iter().find(|&&i| out[i].0 == item) {
                Some(&i) => out[i].2.get_or_insert_with(BTreeSet::new).extend(to),
                None => {
                    rows.push(out.len());
                    out.push((item, e, Some(to)));
                }
            }
        }
    }
    // A name's rows in the order of whom they are for, not of the entries' revisions: a
    // heartbeat makes its entry the newest, and must not reorder (and so install again)
    // what nobody changed.
    out.sort_by(|a, b| a.2.cmp(&b.2));
    out
}

/// The audiences of one catalog pass, one per set of user tokens: the items of one user's
/// pool share one, so a list change of all of them is checked once a listener (one SHA-256
/// of its principal), not once an item (`toolyard::Reach`).
#[derive(Default)]
struct Audiences(HashMap<BTreeSet<String>, toolyard::Audience>);

impl Audiences {
    /// `def` for the users of `tokens` (`Tokens`: callers whose principal's token is one of
    /// them), or for everyone.
    fn give<D>(&mut self, def: D, tokens: &Tokens, with: fn(D, toolyard::Audience) -> D) -> D {
        let Some(tokens) = tokens else {
            return def;
        };
        let audience = self.0.entry(tokens.clone()).or_insert_with(|| {
            let tokens = tokens.clone();
            toolyard::Audience::when(move |principal| {
                tokens.contains(&crate::principal_token(principal))
            })
        });
        with(def, audience.clone())
    }
}

/// Exposed names (or URIs) with what to install there.
type Changed<'w, T> = Vec<(&'w String, &'w (String, Vec<T>))>;

/// What left (`installed` keys not `wanted`) and what is new or changed.
fn diff<'w, T: PartialEq>(
    installed: &Installs<T>,
    wanted: &'w Installs<T>,
) -> (Vec<String>, Changed<'w, T>) {
    let gone = installed
        .keys()
        .filter(|k| !wanted.contains_key(*k))
        .cloned()
        .collect();
    let changed = wanted
        .iter()
        .filter(|(k, v)| installed.get(*k) != Some(v))
        .collect();
    (gone, changed)
}

/// Each pair of pools of one server whose scopes overlap (server, the lesser scope, the
/// greater), among `entries`.
fn overlapping_pools<'a>(
    entries: impl Iterator<Item = &'a CatalogEntry>,
) -> BTreeSet<(String, Scope, Scope)> {
    let mut pools: BTreeMap<&str, BTreeSet<&Scope>> = BTreeMap::new();
    for e in entries {
        pools.entry(e.server.as_str()).or_default().insert(&e.scope);
    }
    let mut overlaps = BTreeSet::new();
    for (server, scopes) in pools {
        for (i, a) in scopes.iter().enumerate() {
            for b in scopes.iter().skip(i + 1) {
                if a.overlaps(b) {
                    overlaps.insert((server.to_owned(), (*a).clone(), (*b).clone()));
                }
            }
        }
    }
    overlaps
}

/// A worker's tool: `tools/call` over the bus, on the byte-level path (the caller's
/// arguments go into the request as the text they came in, the worker's result comes back
/// as its text).
fn forward(inner: Arc<Inner>, route: Route) -> ForwardFn {
    let Route {
        server,
        tool,
        retry_safe,
        tasks,
    } = route;
    // The subject is the same for every call of the tool: written once, and shared by
    // every publish (a `String` would be copied twice per call on its way into one).
    let subject = Subject::from(wire::request_subject_for(
        &inner.config.prefix,
        &inner.config.caller,
        &server,
        "tools/call",
        Some(&tool),
    ));
    // So are its headers (`None`: a name a header cannot carry, refused per call).
    let headers: Option<HeaderMap> =
        request_headers("tools/call", &tool, inner.config.call_timeout).ok();
    // A tool that defers its task: the same, telling the worker to hand the task back.
    let handoff_headers = headers
        .clone()
        .filter(|_| matches!(tasks, TaskRun::Deferred(_)))
        .map(|mut h| {
            h.insert(wire::TASK_HANDOFF, "1");
            h
        });
    let route = Arc::new(ToolRoute {
        quoted: json_string(&tool).into(),
        inner,
        server: server.into(),
        tool: tool.into(),
        subject,
        headers,
        handoff_headers,
        retry_safe,
        job_queue: match tasks {
            TaskRun::InPlace => None,
            TaskRun::Job(queue) | TaskRun::Deferred(queue) => Some(queue),
        },
    });
    Arc::new(move |ctx: RequestContext, args: RawArgs| {
        Box::pin(call_tool(route.clone(), ctx, args))
    })
}

/// A worker's tool as the catalog offers it.
struct Route {
    server: String,
    tool: String,
    /// Annotated `readOnlyHint` or `idempotentHint`.
    retry_safe: bool,
    /// How its task-augmented calls run.
    tasks: TaskRun,
}

/// How a worker tool's task-augmented calls run.
#[derive(Debug, Clone, PartialEq, Eq)]
enum TaskRun {
    /// Forwarded as any call, the task held by this gateway: no durable tasks here.
    InPlace,
    /// A durable job from the first round (`jobs`), on this job queue (of the pool that
    /// serves this gateway: `Scope::job_queue`).
    Job(Arc<str>),
    /// First rounds in place until the tool starts its task (the catalog's
    /// `deferredTasks`), then a durable job on this queue.
    Deferred(Arc<str>),
}

/// What every call of one worker tool shares (one `Arc` cloned per call).
struct ToolRoute {
    inner: Arc<Inner>,
    server: Arc<str>,
    tool: Arc<str>,
    /// The tool's name as JSON text.
    quoted: Arc<str>,
    subject: Subject,
    headers: Option<HeaderMap>,
    /// `headers` with `Mcp-Task-Handoff: 1`, for a tool that defers its task.
    handoff_headers: Option<HeaderMap>,
    retry_safe: bool,
    /// The job queue its tasks go to as durable jobs (`None`: they run in place).
    job_queue: Option<Arc<str>>,
}

impl ToolRoute {
    /// A call's target, sent with `headers` (the tool's, or with `Mcp-Task-Handoff`).
    fn target<'a>(&'a self, headers: Option<&'a HeaderMap>) -> Target<'a> {
        Target {
            server: &self.server,
            method: "tools/call",
            name: &self.tool,
            retry_safe: self.retry_safe,
            subject: Some(&self.subject),
            headers,
            principal: None,
            answered_by: None,
        }
    }
}

/// One call of a worker's tool.
async fn call_tool(
    route: Arc<ToolRoute>,
    ctx: RequestContext,
    args: RawArgs,
) -> Result<RawResult, HandlerError> {
    let ToolRoute {
        inner,
        server,
        tool,
        ..
    } = &*route;
    // A call that runs as a task is a durable job: any worker of the server runs it,
    // whoever survives (`jobs`). Both awaits are boxed: this future is allocated whole for
    // every call, and glibc serves only allocations up to 1016 bytes from its thread
    // cache; a larger one consolidates its fast bins first (~2 000 instructions per
    // forwarded call, callgrind; see the size test below).
    if let (Some(task_id), Some(jobs), Some(queue)) =
        (ctx.task_id(), inner.jobs.get(), route.job_queue.as_deref())
    {
        let bodies = inner.reads_task_bodies(server);
        let principal = inner.config.principal_sent(&ctx);
        let queue = inner.job_queue_for(server, queue, &ctx)?;
        let job = jobs.run(&ctx, task_id, &queue, tool, &args, bodies, principal, None);
        return Box::pin(job).await;
    }
    if route.handoff_headers.is_some() && ctx.can_start_task() {
        return Box::pin(deferred_call(&route, &ctx, &args)).await;
    }
    let target = route.target(route.headers.as_ref());
    let params = [("name", &*route.quoted), ("arguments", args.get())];
    Box::pin(request::<RawResult>(inner, &target, &ctx, &params))
        .await?
        .completed(server)
}

/// A call of a tool that defers its task, by a caller that may get one: its rounds run in
/// place on the workers, the request telling them `Mcp-Task-Handoff`, until the tool starts
/// its task. The worker then stops it and hands the task back: it is made here (the caller
/// gets its handle) and its job published with the last round's answers and state, so any
/// worker runs the call on from there as the task's body. A tool that ends without
/// starting its task answers the call as usual.
async fn deferred_call(
    route: &ToolRoute,
    ctx: &RequestContext,
    args: &RawArgs,
) -> Result<RawResult, HandlerError> {
    let ToolRoute {
        inner,
        server,
        tool,
        ..
    } = route;
    let target = route.target(route.handoff_headers.as_ref());
    let params = [("name", &*route.quoted), ("arguments", args.get())];
    let handoff = match request::<RawResult>(inner, &target, ctx, &params).await? {
        Ended::Complete(result) => return Ok(result),
        Ended::HandedOff(handoff) => handoff,
    };
    ctx.start_task().await;
    // Without a task (its record could not be written), the caller has its error already
    // and this call is dropped.
    let (Some(task_id), Some(jobs), Some(queue)) =
        (ctx.task_id(), inner.jobs.get(), route.job_queue.as_deref())
    else {
        return Err(HandlerError::failed(format!(
            "`{tool}` started its task, but the task could not be made"
        )));
    };
    let bodies = inner.reads_task_bodies(server);
    let principal = inner.config.principal_sent(ctx);
    let queue = inner.job_queue_for(server, queue, ctx)?;
    let job = jobs.run(
        ctx,
        task_id,
        &queue,
        tool,
        args,
        bodies,
        principal,
        Some(handoff),
    );
    Box::pin(job).await
}

/// A string as JSON text.
fn json_string(s: &str) -> String {
    // A `&str` always serialises.
    serde_json::to_string(s).unwrap_or_default()
}

/// A worker's resource or resource template: `resources/read` of the URI asked for (the
/// worker matches it against its own templates).
fn read(inner: Arc<Inner>, server: String) -> toolyard::ResourceFn {
    Arc::new(move |ctx: RequestContext, asked: ResourceRequest| {
        let inner = inner.clone();
        let server = server.clone();
        Box::pin(async move {
            let uri = json_string(&asked.uri);
            let params = [("uri", uri.as_str())];
            let target = Target {
                server: &server,
                method: "resources/read",
                name: &asked.uri,
                // Reading changes nothing.
                retry_safe: true,
                subject: None,
                headers: None,
                principal: None,
                answered_by: None,
            };
            // Whole: the worker's `_meta`, `ttlMs` and `cacheScope` reach the caller.
            request::<ReadResourceResult>(&inner, &target, &ctx, &params)
                .await?
                .completed(&server)
        })
    })
}

/// A worker's prompt: `prompts/get` with its upstream name and the caller's arguments.
fn get_prompt(inner: Arc<Inner>, server: String, prompt: String) -> toolyard::PromptFn {
    Arc::new(
        move |ctx: RequestContext, arguments: HashMap<String, String>| {
            let inner = inner.clone();
            let server = server.clone();
            let prompt = prompt.clone();
            Box::pin(async move {
                let name = json_string(&prompt);
                let arguments = json!(arguments).to_string();
                let params = [("name", name.as_str()), ("arguments", arguments.as_str())];
                let target = Target {
                    server: &server,
                    method: "prompts/get",
                    name: &prompt,
                    retry_safe: true,
                    subject: None,
                    headers: None,
                    principal: None,
                    answered_by: None,
                };
                request::<GetPromptResult>(&inner, &target, &ctx, &params)
                    .await?
                    .completed(&server)
            })
        },
    )
}

/// How long the gateway waits for a worker's completion: a hint that comes later is no
/// help to someone typing.
const COMPLETE_WITHIN: Duration = Duration::from_secs(5);

/// A completer for one argument of a worker's prompt or one variable of its resource
/// template (`target` in exposed names): `completion/complete` over the bus to the worker
/// serving it now, with its upstream prompt name or template URI, for the caller (its
/// principal sent as any request's is, so a user pool's prompt completes on that user's
/// pool) and in its trace. Completion is a hint: a
/// worker that fails, is gone or is slow completes to nothing (logged at debug), never to an
/// error. Weak: the server holds its completers for good, and must not keep the gateway side
/// alive.
fn complete(inner: std::sync::Weak<Inner>, target: CompletionTarget) -> toolyard::CompleteFn {
    Arc::new(
        move |ctx: RequestContext, value: String, context: HashMap<String, String>| {
            let inner = inner.upgrade();
            let target = target.clone();
            Box::pin(async move {
                let Some(inner) = inner else {
                    return Completions::default();
                };
                let (server, reference, argument) = {
                    let state = inner.state();
                    match &target {
                        CompletionTarget::Prompt(exposed, argument) => {
                            // Each definition of it has the worker's name of it.
                            let found = state.installed.prompts.get(exposed);
                            match found.and_then(|(s, each)| Some((s, &each.first()?.0))) {
                                Some((server, prompt)) => (
                                    server.clone(),
                                    json!({"type": "ref/prompt", "name": prompt.name}),
                                    argument.clone(),
                                ),
                                None => return Completions::default(),
                            }
                        }
                        CompletionTarget::Resource(uri_template, variable) => {
                            let found = state.installed.templates.get(uri_template);
                            match found.and_then(|(s, each)| Some((s, &each.first()?.0))) {
                                Some((server, template)) => (
                                    server.clone(),
                                    json!({"type": "ref/resource", "uri": template.uri_template}),
                                    variable.clone(),
                                ),
                                None => return Completions::default(),
                            }
                        }
                    }
                };
                let mut params = json!({
                    "ref": reference,
                    "argument": {"name": argument, "value": value},
                    "_meta": {
                        toolyard_proto::meta::PROTOCOL_VERSION: "2026-07-28",
                        toolyard_proto::meta::CLIENT_CAPABILITIES: {},
                    },
                });
                if !context.is_empty() {
                    params["context"] = json!({"arguments": context});
                }
                let within = inner.config.inactivity.min(COMPLETE_WITHIN);
                let asked = complete_once(&inner, &ctx, &server, &params);
                match tokio::time::timeout(within, asked).await {
                    Ok(Ok(found)) => found,
                    Ok(Err(why)) => {
                        tracing::debug!(target: "toolyard::nats", %server, %why, "completion: nothing from the worker");
                        Completions::default()
                    }
                    Err(_) => {
                        tracing::debug!(target: "toolyard::nats", %server, "completion: the worker did not answer in {within:?}");
                        Completions::default()
                    }
                }
            })
        },
    )
}

/// One `completion/complete` to a worker of `server`, read to its terminal frame.
/// Completion has no progress, input rounds, claims or retries: any failure is the caller's
/// "nothing", so it is reported as a reason only.
async fn complete_once(
    inner: &Inner,
    ctx: &RequestContext,
    server: &str,
    params: &Value,
) -> Result<Completions, String> {
    // Observed like every outgoing request (a CLIENT span when telemetry is on), in the
    // caller's trace, which the worker joins.
    let observed = toolyard_client::default_observer().and_then(|o| {
        o.start(&OutgoingRequest {
            method: "completion/complete",
            target: None,
            traceparent: ctx.traceparent(),
            tracestate: ctx.tracestate(),
            server: Some(server),
        })
    });
    let trace = observed
        .as_ref()
        .and_then(|o| o.trace_context())
        .or_else(|| {
            let parent = ctx.traceparent()?;
            Some((parent.to_owned(), ctx.tracestate().map(str::to_owned)))
        });
    let principal = inner.config.principal_sent(ctx);
    let outcome = complete_traced(inner, server, params, trace.as_ref(), principal).await;
    if let Some(o) = observed {
        o.finish(match &outcome {
            Ok(_) => RequestOutcome::Ok,
            Err(_) => RequestOutcome::Failed("nats"),
        });
    }
    outcome
}

async fn complete_traced(
    inner: &Inner,
    server: &str,
    params: &Value,
    trace: Option<&Trace>,
    principal: Option<&str>,
) -> Result<Completions, String> {
    let method = "completion/complete";
    let mut headers = HeaderMap::new();
    let subject = match principal {
        None => Subject::from(wire::request_subject_for(
            &inner.config.prefix,
            &inner.config.caller,
            server,
            method,
            None,
        )),
        Some(principal) => {
            let header = principal_header(principal).ok_or(
                "the caller's principal cannot be sent: a header cannot carry it as it is",
            )?;
            headers.insert(wire::PRINCIPAL, header);
            principal_subject(inner, principal, server, method, None)
        }
    };
    let frames = inner.replies.open(&subject);
    let inbox = frames.subject().to_owned();
    headers.insert(wire::WIRE, "1");
    headers.insert(wire::METHOD, method);
    headers.insert(wire::PROTOCOL_VERSION, "2026-07-28");
    let mut params = params.clone();
    if let Some((parent, state)) = trace {
        if let Ok(value) = parent.parse::<HeaderValue>() {
            headers.insert(wire::TRACEPARENT, value);
        }
        if let Some(Value::Object(meta)) = params.get_mut("_meta") {
            meta.insert(toolyard_proto::meta::TRACEPARENT.into(), json!(parent));
            if let Some(state) = state {
                meta.insert(toolyard_proto::meta::TRACESTATE.into(), json!(state));
            }
        }
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).to_string();
    inner
        .client
        .publish_with_reply_and_headers(subject, inbox, headers, body.into())
        .await
        .map_err(|e| e.to_string())?;
    // Given up on (the caller's bound ran out): the worker is told to stop.
    let mut guard = CancelOnDrop {
        client: &inner.client,
        frames,
        armed: true,
    };
    let payload = loop {
        let Some(message) = guard.frames.next().await else {
            return Err(match guard.frames.refusal() {
                Some(message) => format!("the bus refused it: {message}"),
                None => "the answer stream closed".to_owned(),
            });
        };
        if message.status == Some(StatusCode::NO_RESPONDERS) {
            guard.armed = false;
            return Err("no worker serves it (no responders)".to_owned());
        }
        match wire::header(&message, wire::FRAME).and_then(Frame::parse) {
            Some(Frame::End | Frame::Err) => break message.payload,
            Some(Frame::Ka | Frame::Msg) => {}
            None => return Err("a reply without an Mcp-Frame header".to_owned()),
        }
    };
    guard.armed = false;
    drop(guard);
    #[derive(Deserialize)]
    struct Response {
        result: Option<CompleteResult>,
        error: Option<ErrorObject>,
    }
    match serde_json::from_slice::<Response>(&payload) {
        Ok(Response {
            result: Some(result),
            ..
        }) => Ok(result.into()),
        Ok(Response { error: Some(e), .. }) => Err(format!("{} ({})", e.message, e.code)),
        _ => Err("the answer is not a completion".to_owned()),
    }
}

/// Where a forwarded request goes: the worker server, the method, and what it names (the
/// tool or prompt by its upstream name, or the URI: the subject's last token and
/// `Mcp-Name`).
#[derive(Clone, Copy)]
struct Target<'a> {
    server: &'a str,
    method: &'static str,
    name: &'a str,
    /// A lost stream (-32010) may be re-issued once: the request is a read, or a tool
    /// annotated `readOnlyHint` / `idempotentHint`.
    retry_safe: bool,
    /// The request subject when it was written ahead (a tool's is fixed).
    subject: Option<&'a Subject>,
    /// The request headers when they were written ahead ([`request_headers`]).
    headers: Option<&'a HeaderMap>,
    /// The caller's principal, sent as `Mcp-Principal` (set per request, in [`rounds`]).
    principal: Option<&'a HeaderValue>,
    /// Where the worker that answered is noted (its `Mcp-Worker`; the last one, when a busy
    /// or gone worker's call was sent again), when the request is observed ([`request`]).
    answered_by: Option<&'a Mutex<Option<String>>>,
}

/// A result a forwarded request may end with.
trait Forwarded: Sized {
    /// Whether it is a failure the observer should count (a tool's `isError`).
    fn failed(&self) -> bool {
        false
    }
    /// The `result` member of the worker's answer: the result, or the input it needs first.
    /// `None` when it is not what the method answers.
    fn parse(raw: &RawValue) -> Option<Answer<Self>>;
    /// The outcome the `end` (or `err`) frame's JSON-RPC response names.
    fn answer(payload: &[u8]) -> Result<Answer<Self>, HandlerError> {
        answer(payload)
    }
}

/// A typed result: its kind first, then the result without the worker's `resultType` (our
/// server states its own).
trait Typed: DeserializeOwned {
    fn clear_result_type(&mut self);
}

impl<T: Typed> Forwarded for T {
    fn parse(raw: &RawValue) -> Option<Answer<T>> {
        #[derive(Deserialize)]
        struct Kind {
            #[serde(rename = "resultType")]
            result_type: Option<String>,
        }
        let kind: Kind = serde_json::from_str(raw.get()).ok()?;
        if kind.result_type.as_deref() == Some("input_required") {
            return serde_json::from_str(raw.get())
                .ok()
                .map(Answer::InputRequired);
        }
        let mut result: T = serde_json::from_str(raw.get()).ok()?;
        result.clear_result_type();
        Some(Answer::Complete(result))
    }
}

/// A tool's result on the byte-level path: scanned once for `resultType` and `isError`,
/// and passed on as it came (the worker's `resultType` dropped).
impl Forwarded for RawResult {
    fn failed(&self) -> bool {
        RawResult::failed(self)
    }
    fn parse(raw: &RawValue) -> Option<Answer<RawResult>> {
        let result = RawResult::from_upstream_value(raw, &[]).ok()?;
        match result.result_type() {
            Some("input_required") => serde_json::from_str(raw.get())
                .ok()
                .map(Answer::InputRequired),
            Some(toolyard::TASK_HANDOFF) => Some(Answer::HandedOff),
            _ => Some(Answer::Complete(result)),
        }
    }

    /// The result read as the response is parsed: its bytes are tokenised once, not first
    /// skipped as a `RawValue` and then read again (~2 000 instructions of every forwarded
    /// call, callgrind). An input round, which is rare, is read again whole.
    fn answer(payload: &[u8]) -> Result<Answer<RawResult>, HandlerError> {
        #[derive(Deserialize)]
        struct Response {
            result: Option<RawResult>,
            error: Option<ErrorObject>,
        }
        match serde_json::from_slice::<Response>(payload) {
            Ok(Response {
                result: Some(result),
                error: None,
            }) if !matches!(
                result.result_type(),
                Some("input_required" | toolyard::TASK_HANDOFF)
            ) =>
            {
                Ok(Answer::Complete(result))
            }
            Ok(Response {
                error: Some(error),
                result: None,
            }) => Err(HandlerError::Protocol(error)),
            _ => answer(payload),
        }
    }
}

impl Typed for ReadResourceResult {
    fn clear_result_type(&mut self) {
        self.result_type = None;
    }
}

impl Typed for GetPromptResult {
    fn clear_result_type(&mut self) {
        self.result_type = None;
    }
}

/// Writes the `_meta` a forwarded call carries: the modern version, the caller's
/// capabilities, and its progress token, trace context and log level when there are any.
/// Written straight as text: this runs for every forwarded call.
fn write_meta(out: &mut Vec<u8>, ctx: &RequestContext, trace: Option<&Trace>) {
    use toolyard_proto::meta;
    out.push(b'{');
    member(out, meta::PROTOCOL_VERSION, true);
    out.extend_from_slice(b"\"2026-07-28\"");
    member(out, meta::CLIENT_CAPABILITIES, false);
    if serde_json::to_writer(&mut *out, ctx.client_capabilities()).is_err() {
        out.extend_from_slice(b"{}");
    }
    if ctx.wants_progress() {
        member(out, "progressToken", false);
        out.extend_from_slice(b"\"nats\"");
    }
    if let Some((parent, state)) = trace {
        member(out, meta::TRACEPARENT, false);
        write_str(out, parent);
        if let Some(state) = state {
            member(out, meta::TRACESTATE, false);
            write_str(out, state);
        }
    }
    if let Some(baggage) = ctx.baggage() {
        member(out, meta::BAGGAGE, false);
        write_str(out, baggage);
    }
    if let Some(level) = ctx.log_level() {
        member(out, meta::LOG_LEVEL, false);
        if serde_json::to_writer(&mut *out, &level).is_err() {
            out.extend_from_slice(b"\"info\"");
        }
    }
    out.push(b'}');
}

/// Writes `"key":` (after a comma unless it is the object's first member). The keys are
/// ours, with nothing to escape: copied as they are (through serde_json, which tests and
/// escapes byte by byte, the keys and the method cost ~1 570 instructions of every
/// forwarded call; copied, ~240: callgrind).
fn member(out: &mut Vec<u8>, key: &'static str, first: bool) {
    debug_assert!(!needs_escape(key), "{key:?} needs escaping");
    if !first {
        out.push(b',');
    }
    out.push(b'"');
    out.extend_from_slice(key.as_bytes());
    out.extend_from_slice(b"\":");
}

/// The JSON-RPC request of one round: `params` are the method's own members as JSON text,
/// then our `_meta`, then the previous round's answers and state.
fn request_body(
    method: &'static str,
    params: &[(&'static str, &str)],
    ctx: &RequestContext,
    trace: Option<&Trace>,
    input_responses: Option<&InputResponses>,
    request_state: Option<&str>,
) -> bytes::Bytes {
    let size: usize = params.iter().map(|(k, v)| k.len() + v.len() + 4).sum();
    let mut out = Vec::with_capacity(size + 256);
    out.extend_from_slice(br#"{"jsonrpc":"2.0","id":1,"method":"#);
    debug_assert!(!needs_escape(method), "{method:?} needs escaping");
    out.push(b'"');
    out.extend_from_slice(method.as_bytes());
    out.push(b'"');
    out.extend_from_slice(br#","params":{"#);
    for (i, (key, value)) in params.iter().enumerate() {
        member(&mut out, key, i == 0);
        out.extend_from_slice(value.as_bytes());
    }
    member(&mut out, "_meta", params.is_empty());
    write_meta(&mut out, ctx, trace);
    if let Some(responses) = input_responses {
        member(&mut out, "inputResponses", false);
        if serde_json::to_writer(&mut out, responses).is_err() {
            out.extend_from_slice(b"{}");
        }
    }
    if let Some(state) = request_state {
        member(&mut out, "requestState", false);
        write_str(&mut out, state);
    }
    out.extend_from_slice(b"}}");
    out.into()
}

fn bus_error(code: i32, message: impl Into<String>) -> HandlerError {
    HandlerError::Protocol(ErrorObject::new(code, message.into()))
}

/// One forwarded request (`tools/call`, `resources/read`, `prompts/get`), to its terminal
/// frame. `params` are the method's own members as JSON text (without `_meta`, which the
/// forwarding writes).
/// How a forwarded request ended: with its result, or (a deferred tool's call, sent with
/// `Mcp-Task-Handoff`) with its task handed back to be made here.
enum Ended<T> {
    Complete(T),
    HandedOff(Handoff),
}

impl<T> Ended<T> {
    /// The result of a request not sent with `Mcp-Task-Handoff`, which only a broken worker
    /// answers by handing a task back. (Not a wrapping async fn: the request's future is
    /// allocated whole per call, and a layer more took it past 1 KiB.)
    fn completed(self, server: &str) -> Result<T, HandlerError> {
        match self {
            Ended::Complete(result) => Ok(result),
            Ended::HandedOff(_) => Err(HandlerError::Protocol(ErrorObject::internal(format!(
                "`{server}` handed back a task it was not asked to"
            )))),
        }
    }
}

async fn request<T: Forwarded>(
    inner: &Inner,
    target: &Target<'_>,
    ctx: &RequestContext,
    params: &[(&'static str, &str)],
) -> Result<Ended<T>, HandlerError> {
    // A server of its users' own pools has none for a caller without a principal.
    inner.reachable(target.server, inner.config.principal_sent(ctx))?;
    // Observed as a client request (a CLIENT span when telemetry is on), whose context the
    // worker then receives instead of ours.
    let observed = toolyard_client::default_observer().and_then(|o| {
        o.start(&OutgoingRequest {
            method: target.method,
            target: Some(target.name),
            traceparent: ctx.traceparent(),
            tracestate: ctx.tracestate(),
            server: Some(target.server),
        })
    });
    let trace: Option<Trace> = observed
        .as_ref()
        .and_then(|o| o.trace_context())
        .or_else(|| {
            ctx.traceparent()
                .map(|p| (p.to_owned(), ctx.tracestate().map(str::to_owned)))
        });
    let answered_by = Mutex::new(None);
    let target = Target {
        answered_by: observed.is_some().then_some(&answered_by),
        ..*target
    };
    let answer = match inner.config.principal_sent(ctx) {
        None => rounds::<T>(inner, &target, ctx, params, trace.as_ref()).await,
        // Boxed: the request's future is allocated whole for every call, most without one.
        Some(principal) => {
            let sent = rounds_of::<T>(inner, &target, ctx, params, trace.as_ref(), principal);
            Box::pin(sent).await
        }
    };
    if let Some(mut o) = observed {
        if let Some(worker) = answered_by.into_inner().unwrap_or_else(|p| p.into_inner()) {
            o.answered_by(&worker);
        }
        o.finish(match &answer {
            Ok(Ended::Complete(r)) if r.failed() => RequestOutcome::ToolError,
            Ok(_) => RequestOutcome::Ok,
            Err(HandlerError::Protocol(e)) => RequestOutcome::Rpc(e.code),
            Err(_) => RequestOutcome::Failed("nats"),
        });
    }
    answer
}

/// A W3C `traceparent` and its `tracestate`.
type Trace = (String, Option<String>);

/// [`rounds`] of a request made for `principal` (`crate::principal`): its subject's user
/// token is made from the principal and `Mcp-Principal` carries it, on every round. A
/// principal a header cannot carry as it is (a line break; white space at an end, which a
/// header's reader trims) fails the request rather than going unsent or changed.
async fn rounds_of<T: Forwarded>(
    inner: &Inner,
    target: &Target<'_>,
    ctx: &RequestContext,
    params: &[(&'static str, &str)],
    trace: Option<&Trace>,
    principal: &str,
) -> Result<Ended<T>, HandlerError> {
    let Some(header) = principal_header(principal) else {
        return Err(HandlerError::failed(format!(
            "the caller's principal cannot be sent to `{}`: a header cannot carry it as it is (a line break, or white space at an end)",
            target.server
        )));
    };
    let subject = principal_subject(
        inner,
        principal,
        target.server,
        target.method,
        Some(target.name),
    );
    let target = Target {
        subject: Some(&subject),
        principal: Some(&header),
        ..*target
    };
    rounds::<T>(inner, &target, ctx, params, trace).await
}

/// `Mcp-Principal` carrying `principal`; `None` when a header cannot carry it as it is (a
/// line break; white space at an end, which a header's reader trims).
fn principal_header(principal: &str) -> Option<HeaderValue> {
    let header = principal.parse::<HeaderValue>().ok()?;
    (principal.trim() == principal).then_some(header)
}

/// The subject of a request of `server` made for `principal`: its user token is made from
/// the principal (`crate::principal`).
fn principal_subject(
    inner: &Inner,
    principal: &str,
    server: &str,
    method: &str,
    name: Option<&str>,
) -> Subject {
    Subject::from(wire::request_subject_of(
        &inner.config.prefix,
        inner.config.caller.tenant_token(),
        &crate::principal_token(principal),
        server,
        method,
        name,
    ))
}

/// The most input rounds one forwarded request may take.
const MAX_ROUNDS: usize = 16;

/// A forwarded request, round by round: when the worker answers `input_required` (its tool
/// elicits, samples or lists roots), the gateway asks its own caller the same questions
/// ([`RequestContext::gather`]: a legacy caller is asked there and then; a 2026-07-28 caller
/// gets an `input_required` of the gateway's own and retries, which replays the rounds with
/// its answers) and retries the worker with `inputResponses` and the worker's `requestState`
/// (sealed by the workers' shared secret, so the retry may land on any of them).
async fn rounds<T: Forwarded>(
    inner: &Inner,
    target: &Target<'_>,
    ctx: &RequestContext,
    params: &[(&'static str, &str)],
    trace: Option<&Trace>,
) -> Result<Ended<T>, HandlerError> {
    let subject = match target.subject {
        Some(s) => std::borrow::Cow::Borrowed(s),
        None => std::borrow::Cow::Owned(Subject::from(wire::request_subject_for(
            &inner.config.prefix,
            &inner.config.caller,
            target.server,
            target.method,
            Some(target.name),
        ))),
    };
    let mut input_responses: Option<InputResponses> = None;
    let mut request_state: Option<String> = None;
    // The keys our caller was asked under, in the rounds so far.
    let mut used = BTreeSet::new();
    for round in 0..MAX_ROUNDS {
        let body = request_body(
            target.method,
            params,
            ctx,
            trace,
            input_responses.as_ref(),
            request_state.as_deref(),
        );
        match call_round::<T>(inner, &subject, target, ctx, trace, &body).await? {
            Answer::Complete(result) => return Ok(Ended::Complete(result)),
            // The task goes on from this round: its answers and state.
            Answer::HandedOff => {
                return Ok(Ended::HandedOff(Handoff {
                    round: u32::try_from(round).unwrap_or(u32::MAX),
                    input_responses: input_responses.unwrap_or_default(),
                    request_state,
                }))
            }
            Answer::InputRequired(needed) => {
                let asked = needed.input_requests.unwrap_or_default();
                let keys = exposed_keys(round, asked.keys(), &used);
                used.extend(keys.iter().map(|(_, exposed)| exposed.clone()));
                let asks: Vec<(String, InputRequest)> = keys
                    .iter()
                    .map(|(_, exposed)| exposed.clone())
                    .zip(asked.into_values())
                    .collect();
                // Boxed, like the claim read: input rounds are rare, the future is large.
                let mut answers = Box::pin(ctx.gather(asks)).await?;
                input_responses = Some(
                    keys.into_iter()
                        .filter_map(|(key, exposed)| answers.remove(&exposed).map(|v| (key, v)))
                        .collect(),
                );
                request_state = needed.request_state;
            }
        }
    }
    Err(HandlerError::failed(format!(
        "`{}` asked for input more than {MAX_ROUNDS} times in one {}",
        target.server, target.method
    )))
}

/// The keys our caller is asked a worker's input requests under, in the order of `asked`
/// (the worker's keys; its requests are an ordered map, so a replay of the rounds on another
/// gateway names them alike): the worker's own key, as it sent it, unless an earlier round
/// of the same request asked under it (`used`): a tool asking under one key twice asks two
/// questions, and a 2026-07-28 caller's answers are kept by key across the replay of the
/// rounds. Such a key gets the round before it (`1:name`), as often as it takes to be new.
/// Pairs of (the worker's key, the caller's key).
fn exposed_keys<'a>(
    round: usize,
    asked: impl Iterator<Item = &'a String> + Clone,
    used: &BTreeSet<String>,
) -> Vec<(String, String)> {
    // Input rounds are rare: plain clones.
    let mut taken: BTreeSet<String> = used.clone();
    taken.extend(asked.clone().cloned());
    asked
        .map(|key| {
            if !used.contains(key) {
                return (key.clone(), key.clone());
            }
            let mut exposed = format!("{round}:{key}");
            while taken.contains(&exposed) {
                exposed = format!("{round}:{exposed}");
            }
            taken.insert(exposed.clone());
            (key.clone(), exposed)
        })
        .collect()
}

/// One round of a forwarded request. No-responders (nothing was delivered) is retried once
/// after a short wait: a worker may be restarting.
async fn call_round<T: Forwarded>(
    inner: &Inner,
    subject: &Subject,
    target: &Target<'_>,
    ctx: &RequestContext,
    trace: Option<&Trace>,
    body: &bytes::Bytes,
) -> Result<Answer<T>, HandlerError> {
    let server = target.server;
    let mut retried = false;
    let mut reissued = false;
    // How often the call was sent again because its worker died holding it unstarted;
    // those sends' deadline counts from the first attempt.
    let mut unstarted = 0;
    let began = tokio::time::Instant::now();
    // Set once a worker refused the call as busy: when the retries began, and the next wait.
    let mut busy: Option<(tokio::time::Instant, Duration)> = None;
    // The claim holding the body once it did not fit the bus; deleted when the round ends
    // (every attempt sends the same one).
    let mut claim = BodyClaim {
        client: &inner.client,
        name: None,
    };
    loop {
        // A later attempt carries what is left of the deadline, counted from the earlier of
        // the first busy refusal and (once an unstarted call is sent again) the first attempt.
        let since = busy
            .map(|(since, _)| since)
            .into_iter()
            .chain((unstarted > 0).then_some(began))
            .min();
        let budget = since.map(|s| inner.config.call_timeout.saturating_sub(s.elapsed()));
        // Boxed (and the rare wait below): every forwarded call's future is allocated whole,
        // and each async layer would otherwise carry this one's state again.
        let sent = match &claim.name {
            None => Body::Inline(body.clone()),
            Some(name) => Body::Claimed(name),
        };
        match Box::pin(call_once(inner, subject, target, ctx, trace, sent, budget)).await {
            Ok(payload) => match T::answer(&payload) {
                Err(HandlerError::Protocol(e)) if e.code == wire::BUSY => {
                    let (since, wait) =
                        *busy.get_or_insert((tokio::time::Instant::now(), BUSY_FIRST_WAIT));
                    if !Box::pin(busy_backoff(inner, ctx, since, wait)).await {
                        return Err(HandlerError::Protocol(e));
                    }
                    busy = Some((since, (wait * 2).min(BUSY_MAX_WAIT)));
                }
                answer => return answer,
            },
            Err(Outcome::TooLarge(e)) if claim.name.is_none() => {
                if !inner.reads_body_claims(server) {
                    return Err(bus_error(
                        wire::PAYLOAD_TOO_LARGE,
                        format!("the request ({} bytes) does not fit the bus's max_payload, and not every worker of `{server}` reads a body from a claim ({e})", body.len()),
                    ));
                }
                match Box::pin(crate::claims::put(&inner.client, body, max_payload(inner))).await {
                    Ok(name) => claim.name = Some(name.into()),
                    Err(why) => {
                        return Err(bus_error(
                            wire::PAYLOAD_TOO_LARGE,
                            format!("the request ({} bytes) does not fit the bus's max_payload, and putting it in a claim failed: {why}", body.len()),
                        ))
                    }
                }
            }
            Err(Outcome::NoResponders) if !retried => {
                retried = true;
                Box::pin(tokio::time::sleep(Duration::from_millis(200))).await;
            }
            Err(Outcome::NoResponders) => {
                return Err(bus_error(
                    wire::NO_RESPONDERS,
                    format!("no worker serves `{server}` on the bus (no responders)"),
                ))
            }
            Err(Outcome::Failed(HandlerError::Protocol(e)))
                if target.retry_safe
                    && !reissued
                    && e.code == wire::STREAM_LOST
                    && !ctx.cancellation().is_cancelled() =>
            {
                reissued = true;
                tracing::info!(target: "toolyard::nats", %server, method = target.method, error = %e.message, "stream lost: re-issuing a retry-safe request once");
            }
            // Never run: sent again whatever the tool, a few times at most.
            Err(Outcome::NotStarted(_))
                if unstarted < NOT_STARTED_REISSUES
                    && began.elapsed() < inner.config.call_timeout
                    && !ctx.cancellation().is_cancelled() =>
            {
                unstarted += 1;
                tracing::info!(target: "toolyard::nats", %server, method = target.method, "the worker holding the call waiting for a slot is gone: re-issuing the unstarted call");
            }
            Err(Outcome::Failed(e) | Outcome::NotStarted(e) | Outcome::TooLarge(e)) => {
                return Err(e)
            }
        }
    }
}

/// A request's body as `call_once` sends it.
enum Body<'a> {
    Inline(bytes::Bytes),
    /// In the claim of this name (`Mcp-Body-Claim`), put by `call_round` because the body did
    /// not fit the bus: the request is sent with an empty body naming it.
    Claimed(&'a str),
}

/// A request body put in a claim (`call_round`): deleted when the round is over, however it
/// ends (the bucket's TTL removes it if the delete fails).
struct BodyClaim<'a> {
    client: &'a async_nats::Client,
    name: Option<Box<str>>,
}

impl Drop for BodyClaim<'_> {
    fn drop(&mut self) {
        if let Some(name) = &self.name {
            crate::claims::discard(self.client, name);
        }
    }
}

/// The bus's `max_payload` as the connection's server announced it.
fn max_payload(inner: &Inner) -> usize {
    inner.client.server_info().max_payload
}

impl Inner {
    /// Whether every instance of `server` in the catalog reads a request body from a claim:
    /// any of them may take the request.
    fn reads_body_claims(&self, server: &str) -> bool {
        self.every_instance(server, |e| e.body_claims)
    }

    /// Whether every instance of `server` reads a durable task's request from
    /// `TY_TASK_BODIES`: any of them may run the job.
    fn reads_task_bodies(&self, server: &str) -> bool {
        self.every_instance(server, |e| e.task_body_claims)
    }

    /// Whether `server` is served by its users' own pools (`user_pools`): each call goes
    /// to its caller's.
    fn users_own(&self, server: &str) -> bool {
        self.config.user_pools
            && self.state().entries.values().any(|(_, e)| {
                e.server == server && e.scope.user.is_some() && self.config.takes(&e.scope)
            })
    }

    /// Refuses a request of `server` for a caller with no principal when the server is
    /// served by its users' own pools: no pool serves that caller.
    fn reachable(&self, server: &str, principal: Option<&str>) -> Result<(), HandlerError> {
        if principal.is_none() && self.users_own(server) {
            return Err(bus_error(
                wire::NO_RESPONDERS,
                format!("`{server}` is served by its users' own pools, and this caller has no principal to reach one by"),
            ));
        }
        Ok(())
    }

    /// The job queue of a task of `server` for `ctx`: the serving pool's (`queue`), or,
    /// when the server is served by its users' own pools, the caller's own pool's.
    fn job_queue_for<'q>(
        &self,
        server: &str,
        queue: &'q str,
        ctx: &RequestContext,
    ) -> Result<std::borrow::Cow<'q, str>, HandlerError> {
        if !self.users_own(server) {
            return Ok(std::borrow::Cow::Borrowed(queue));
        }
        let principal = self.config.principal_sent(ctx);
        self.reachable(server, principal)?;
        let own = Scope {
            tenant: self.config.caller.tenant.clone(),
            user: principal.map(crate::principal_token),
        };
        Ok(std::borrow::Cow::Owned(own.job_queue(server)))
    }

    /// Whether `server` has an instance in the catalog (of the pool taking this gateway's
    /// calls), and `what` holds for every one.
    fn every_instance(&self, server: &str, what: impl Fn(&CatalogEntry) -> bool) -> bool {
        let state = self.state();
        let mut instances = state
            .entries
            .values()
            .filter(|(_, e)| e.server == server && self.config.takes(&e.scope))
            .peekable();
        instances.peek().is_some() && instances.all(|(_, e)| what(e))
    }
}

/// How many times a call whose worker died while it waited for a slot is sent again.
const NOT_STARTED_REISSUES: u32 = 3;

/// The first wait before a call a worker refused as busy (-32015) is sent again; it doubles
/// up to [`BUSY_MAX_WAIT`] while workers stay busy, within the call's deadline.
const BUSY_FIRST_WAIT: Duration = Duration::from_millis(20);
const BUSY_MAX_WAIT: Duration = Duration::from_millis(500);

/// Waits `wait` (give or take a quarter, so calls refused together do not come back
/// together) before a busy call is sent again; `false` when that would outlast the call's
/// deadline, counted from the first refusal, or the caller cancelled meanwhile.
async fn busy_backoff(
    inner: &Inner,
    ctx: &RequestContext,
    since: tokio::time::Instant,
    wait: Duration,
) -> bool {
    let jitter = since.elapsed().subsec_nanos() % 500;
    let wait = wait * (750 + jitter) / 1000;
    if since.elapsed() + wait >= inner.config.call_timeout {
        return false;
    }
    tokio::select! {
        () = tokio::time::sleep(wait) => true,
        () = ctx.cancellation().cancelled() => false,
    }
}

enum Outcome {
    NoResponders,
    /// The request does not fit the bus's `max_payload` (nothing was sent).
    TooLarge(HandlerError),
    /// The worker that held the call waiting for a slot is gone: it never ran it.
    NotStarted(HandlerError),
    Failed(HandlerError),
}

impl From<HandlerError> for Outcome {
    fn from(e: HandlerError) -> Outcome {
        Outcome::Failed(e)
    }
}

/// Publishes the request and reads its frames to the terminal one, whose payload (the
/// JSON-RPC response) it returns.
async fn call_once(
    inner: &Inner,
    subject: &Subject,
    target: &Target<'_>,
    ctx: &RequestContext,
    trace: Option<&Trace>,
    body: Body<'_>,
    budget: Option<Duration>,
) -> Result<bytes::Bytes, Outcome> {
    let server = target.server;
    // A call sent again after a busy refusal carries what is left of its deadline.
    let mut headers = match (target.headers, budget) {
        (Some(h), None) => h.clone(),
        (_, budget) => request_headers(
            target.method,
            target.name,
            budget.unwrap_or(inner.config.call_timeout),
        )?,
    };
    // Answered on the gateway's one reply subscription, routed to this call by its token
    // (`replies`: a flood on another call cannot delay this one's answer).
    let frames = inner.replies.open(subject);
    let inbox = frames.subject().to_owned();
    // The trace context rides the headers too (NATS 2.11+ traces messages that carry it);
    // a value a header cannot carry stays in `_meta` only.
    if let Some((parent, state)) = trace {
        if let Ok(parent) = parent.parse::<HeaderValue>() {
            headers.insert(wire::TRACEPARENT, parent);
        }
        if let Some(Ok(state)) = state.as_deref().map(str::parse::<HeaderValue>) {
            headers.insert(wire::TRACESTATE, state);
        }
    }
    if let Some(Ok(baggage)) = ctx.baggage().map(str::parse::<HeaderValue>) {
        headers.insert(wire::BAGGAGE, baggage);
    }
    if let Some(principal) = target.principal {
        headers.insert(wire::PRINCIPAL, principal.clone());
    }
    let body = match body {
        Body::Inline(body) => body,
        Body::Claimed(name) => {
            headers.insert(wire::BODY_CLAIM, name);
            bytes::Bytes::new()
        }
    };
    // Boxed: async-nats' publish future is large, and this call's future is allocated
    // whole for every call (see the test on its size below).
    let published = Box::pin(inner.client.publish_with_reply_and_headers(
        subject.clone(),
        inbox,
        headers,
        body,
    ))
    .await;
    if let Err(e) = published {
        let error = |code| bus_error(code, format!("publishing the call to `{server}`: {e}"));
        if e.kind() == async_nats::client::PublishErrorKind::MaxPayloadExceeded {
            return Err(Outcome::TooLarge(error(wire::PAYLOAD_TOO_LARGE)));
        }
        return Err(error(wire::STREAM_LOST).into());
    }
    let mut expected_seq = 0u64;
    // A cancelled caller's call is dropped mid-await, and the guard tells the worker then.
    // The server races every handler against its request's cancellation (and drops it
    // when cancelled), so the call does not watch it too: each wake of the call polled that
    // waiter again, ~1 600 instructions of every forwarded call (callgrind).
    let mut guard = CancelOnDrop {
        client: &inner.client,
        frames,
        armed: true,
    };
    // Once the worker has sent a frame it listens on `{reply}.ctl` until its last one; a
    // silence from then on is checked every `PROBE_EVERY` (`worker_gone`), not only at the
    // inactivity deadline. Before the first frame, from `FIRST_PROBE` on: a live worker
    // listens there once it has taken the request and run its tool's first step (or while
    // it waits for a slot; a refusal as busy is a frame), so by then no listener means the
    // worker that took it is gone.
    let mut heard = false;
    // The last frame was a keepalive saying the call waits for a slot (not started).
    let mut waiting = false;
    // Timed on the reply subscription's coarse clock, which wakes the call when its wait
    // runs out (`replies`: no timer of its own per call).
    let clock = || inner.replies.now();
    let sent = clock();
    let mut last_frame = sent;
    let since = |then: Duration| clock().saturating_sub(then);
    // Whether a silence is checked now: once a frame came, or from `FIRST_PROBE` on.
    let probing = |heard: bool| heard || since(sent) >= FIRST_PROBE;
    // The connection was lost and came back during the call, or its client dropped frames as
    // a slow consumer (`back_on_bus`): whether the worker still holds the call is checked at
    // once, and it is named if the call fails.
    let mut probe_now = false;
    let mut was_lost = false;
    let outcome = loop {
        let left = inner.config.inactivity.saturating_sub(since(last_frame));
        let wait = if probe_now {
            Duration::ZERO
        } else if probing(heard) {
            left.min(PROBE_EVERY)
        } else {
            left.min(FIRST_PROBE.saturating_sub(since(sent)))
        };
        let next = guard.frames.next_within(wait).await;
        let message = match next {
            Err(_)
                if (probe_now || probing(heard))
                    && since(last_frame) < inner.config.inactivity =>
            {
                probe_now = false;
                if !Box::pin(worker_gone(&inner.client, guard.frames.subject())).await {
                    continue;
                }
                // Its last frame may be on its way still (it unsubscribes after sending it).
                match tokio::time::timeout(GONE_GRACE, guard.frames.next()).await {
                    Ok(Some(m)) => m,
                    _ if waiting => {
                        break Err(Outcome::NotStarted(bus_error(
                            wire::STREAM_LOST,
                            format!("the worker holding the call to `{server}` for a free slot is gone before it ran it: re-issue the call"),
                        )))
                    }
                    _ if was_lost => {
                        break Err(bus_error(
                            wire::STREAM_LOST,
                            format!("the connection to the NATS server was lost (or its client fell behind) during the call to `{server}`, and no worker holds the call any more (its answer, or the request, was lost with the frames of that moment): re-issue the call"),
                        )
                        .into());
                    }
                    _ => {
                        let (whose, gone) = if heard {
                            ("serving", "is gone")
                        } else {
                            ("that took", "is gone before it answered anything")
                        };
                        break Err(bus_error(
                            wire::STREAM_LOST,
                            format!("the worker {whose} the call to `{server}` {gone} (nothing listens for the call's cancellation any more): re-issue the call"),
                        )
                        .into());
                    }
                }
            }
            Err(_) => {
                break Err(bus_error(
                    wire::STREAM_LOST,
                    format!(
                        "no frame from `{server}` for {:?}: the worker is gone or stalled; re-issue the call",
                        inner.config.inactivity
                    ),
                )
                .into())
            }
            // The route ended before an answer: the broker refused the publish (its
            // route, opened before the publish, knows), the connection was lost, or the
            // frames were.
            Ok(None) => {
                let lost = guard.frames.lost();
                if lost
                    && guard.frames.refusal().is_none()
                    && Box::pin(back_on_bus(&inner.client, &guard.frames)).await
                {
                    // Back: the call goes on. A worker that has answered before listens
                    // for the call until its last frame, so it is asked at once whether it
                    // still holds it; one that has not may not listen yet, and is asked
                    // from `FIRST_PROBE` on as usual.
                    was_lost = true;
                    probe_now = heard;
                    continue;
                }
                break Err(match guard.frames.refusal() {
                    Some(message) => bus_error(
                        wire::PERMISSION_DENIED,
                        format!("the bus refused the call to `{server}`: {message}"),
                    ),
                    None if lost => bus_error(
                        wire::STREAM_LOST,
                        format!("the connection to the NATS server was lost during the call to `{server}`: re-issue the call"),
                    ),
                    None => bus_error(wire::STREAM_LOST, "the answer stream closed"),
                }
                .into())
            }
            Ok(Some(m)) => m,
        };
        if message.status == Some(StatusCode::NO_RESPONDERS) {
            break Err(Outcome::NoResponders);
        }
        heard = true;
        last_frame = clock();
        let [seq, claim, frame, state, worker] = wire::headers(
            &message,
            [
                &wire::SEQ,
                &wire::CLAIM,
                &wire::FRAME,
                &wire::STATE,
                &wire::WORKER,
            ],
        );
        if let (Some(noted), Some(worker)) = (target.answered_by, worker) {
            // Only terminal frames carry it.
            *noted.lock().unwrap_or_else(|p| p.into_inner()) = Some(worker.to_owned());
        }
        waiting = state == Some(wire::WAITING);
        let seq = seq.and_then(|s| s.parse::<u64>().ok());
        if let Some(seq) = seq {
            if seq != expected_seq {
                break Err(bus_error(
                    wire::STREAM_LOST,
                    format!("frame {expected_seq} of the answer was lost (got {seq}): re-issue the call"),
                )
                .into());
            }
            expected_seq += 1;
        }
        match frame.and_then(Frame::parse) {
            Some(Frame::Ka) => {}
            Some(Frame::Msg) => relay(ctx, &message.payload),
            Some(Frame::End) if claim.is_some() => {
                let name = claim.unwrap_or_default();
                // Boxed: the object store's read is a large future, and a call's future is
                // allocated whole per call; claims are rare.
                break match Box::pin(crate::claims::take(&inner.client, name)).await {
                    Ok(body) => Ok(body.into()),
                    Err(e) => Err(bus_error(
                        wire::PAYLOAD_TOO_LARGE,
                        format!("the answer was too large for the bus and its claim could not be read: {e}"),
                    )
                    .into()),
                };
            }
            Some(Frame::End) if message.payload.is_empty() => {
                break Err(HandlerError::failed("the call was cancelled").into())
            }
            // An `err` frame carries the bridge's JSON-RPC error: a result in one is a
            // broken worker's, never an answer.
            Some(Frame::Err) if carries_result(&message.payload) => {
                break Err(bus_error(
                    wire::STREAM_LOST,
                    "an `err` frame whose body is a result, not a JSON-RPC error",
                )
                .into())
            }
            Some(Frame::End | Frame::Err) => break Ok(message.payload),
            None => {
                let why = match frame {
                    Some(other) => format!("a reply with an unknown Mcp-Frame `{other}`"),
                    None => "a reply without an Mcp-Frame header".to_owned(),
                };
                break Err(bus_error(wire::STREAM_LOST, why).into());
            }
        }
    };
    // We gave up on the stream (a lost frame, silence): tell the worker to stop, so it
    // neither works nor keeps sending for nobody (a cancelled call is dropped before it gets
    // here: the guard tells the worker then). Answered: nothing to cancel.
    let gave_up = matches!(
        &outcome,
        Err(Outcome::NotStarted(_))
            | Err(Outcome::Failed(HandlerError::Protocol(ErrorObject {
                code: wire::STREAM_LOST,
                ..
            })))
    );
    guard.armed = gave_up;
    drop(guard);
    outcome
}

/// The headers every request of `method` naming `name` carries (all but the trace
/// context): written once per tool, cloned per call. What a header cannot carry (a line
/// break) is refused before anything is sent: the worker requires `Mcp-Name` to equal the
/// body's name.
fn request_headers(
    method: &'static str,
    name: &str,
    timeout: Duration,
) -> Result<HeaderMap, HandlerError> {
    let Ok(name_value) = name.parse::<HeaderValue>() else {
        return Err(HandlerError::Protocol(ErrorObject::invalid_params(
            format!(
                "`{}` cannot be forwarded: it contains a line break",
                name.escape_debug()
            ),
        )));
    };
    let mut headers = HeaderMap::new();
    headers.insert(wire::WIRE, "1");
    headers.insert(wire::METHOD, method);
    headers.insert(wire::NAME, name_value);
    headers.insert(wire::PROTOCOL_VERSION, "2026-07-28");
    // An answer over max_payload comes back as a claim (`claims`), fetched below.
    headers.insert(wire::ACCEPT_CLAIM, "1");
    headers.insert(wire::TIMEOUT_MS, timeout.as_millis().to_string());
    Ok(headers)
}

/// Tells the worker to stop a call that ends without its answer (the caller cancelled, the
/// call's future was dropped, or we gave up on the stream).
struct CancelOnDrop<'a> {
    /// Borrowed: a `Client` is 152 bytes, and this guard lives in every call's future.
    client: &'a Client,
    /// The call's answer stream, read through the guard so that a cancel can take it along.
    frames: ReplyStream,
    /// Whether dropping the guard cancels the call on the worker.
    armed: bool,
}

impl Drop for CancelOnDrop<'_> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(cancel_until_ended(
                self.client.clone(),
                self.frames.detach(),
            ));
        }
    }
}

/// How often a call whose worker has answered before but is silent now checks that the
/// worker is still there (`worker_gone`).
const PROBE_EVERY: Duration = Duration::from_secs(2);
/// When a call that has had no frame at all first checks that the worker that took it is
/// still there. A live worker listens on `{reply}.ctl` within moments of reading the
/// request (after its tool's first step; a call answered in that step has its frame by
/// then); this much leaves room for one whose runtime is busy, so that only a worker that
/// is gone (killed before its first frame) is taken for one.
const FIRST_PROBE: Duration = Duration::from_secs(5);
/// How long that check waits: a listener that does not answer is a listener.
const PROBE_WAIT: Duration = Duration::from_millis(500);
/// How long a call whose worker is gone still waits for a last frame already on its way.
const GONE_GRACE: Duration = Duration::from_millis(100);

/// Whether nothing on the bus listens on the call's control subject any more. A worker
/// listens on `{reply}.ctl` from before its first frame to after its last, so a "no
/// responders" there, once a frame came, means the worker holding the call is gone (killed,
/// or its connection lost): the call ends now instead of at its inactivity deadline. A
/// stopped worker still listens (its connection is open): that one ends at the deadline.
/// The probe is an empty message, which a worker ignores.
async fn worker_gone(client: &Client, reply: &str) -> bool {
    let probe = client.request(wire::control_subject(reply), bytes::Bytes::new());
    match tokio::time::timeout(PROBE_WAIT, probe).await {
        Ok(Err(e)) => e.kind() == async_nats::client::RequestErrorKind::NoResponders,
        _ => false,
    }
}

/// How long a call whose connection was lost waits for it to come back before it fails.
/// async-nats reconnects at once when the broker closes the connection (a slow consumer) or
/// when it reads a message it cannot parse (docs/nats.md "Not yet"), and an outage that short
/// need not cost the calls in flight: frames sent while it lasted are gone, but a call that
/// lost none goes on to its answer.
const RECONNECT_GRACE: Duration = Duration::from_secs(2);

/// Whether the call's connection is back within [`RECONNECT_GRACE`] of its loss, its stream
/// waiting for frames again. The reply subscription is made again by async-nats as it
/// reconnects, before anything the call sends after.
async fn back_on_bus(client: &Client, frames: &ReplyStream) -> bool {
    frames.resume_after_loss()
        && tokio::time::timeout(RECONNECT_GRACE, crate::connection::connected(client))
            .await
            .is_ok()
}

/// How long the first cancel waits for the worker's terminal frame before it is sent
/// again; each later wait doubles (20 ms to 1.28 s: 2.5 s in all).
const CANCEL_FIRST_WAIT: Duration = Duration::from_millis(20);
/// How many times a cancel is sent at most.
const CANCEL_SENDS: u32 = 7;

/// Sends `notifications/cancelled` for request 1 to the call's control subject until the
/// worker's terminal frame shows the call ended (or the stream closed, or the sends ran
/// out). Once is not enough: the worker listens on `{reply}.ctl` only once the request has
/// reached it, and a cancel the bus delivers before that is lost (N13: a caller that
/// cancels at once).
async fn cancel_until_ended(client: Client, mut frames: ReplyStream) {
    const CANCEL: &str = r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1,"reason":"the caller cancelled"}}"#;
    let control = wire::control_subject(frames.subject());
    let mut wait = CANCEL_FIRST_WAIT;
    for _ in 0..CANCEL_SENDS {
        let cancel = bytes::Bytes::from_static(CANCEL.as_bytes());
        if client.publish(control.clone(), cancel).await.is_err() {
            return;
        }
        let ended = tokio::time::timeout(wait, async {
            while let Some(message) = frames.next().await {
                let frame = wire::header(&message, wire::FRAME).and_then(Frame::parse);
                if message.status == Some(StatusCode::NO_RESPONDERS)
                    || matches!(frame, Some(Frame::End | Frame::Err))
                {
                    return;
                }
            }
        })
        .await;
        if ended.is_ok() {
            return;
        }
        wait *= 2;
    }
}

/// A `msg` frame: the worker's progress and log messages, to our caller.
fn relay(ctx: &RequestContext, payload: &[u8]) {
    #[derive(Deserialize)]
    struct Note {
        method: String,
        #[serde(default)]
        params: Value,
    }
    let Ok(note) = serde_json::from_slice::<Note>(payload) else {
        return;
    };
    match note.method.as_str() {
        "notifications/progress" => {
            if let Some(progress) = note.params["progress"].as_f64() {
                ctx.progress(
                    progress,
                    note.params["total"].as_f64(),
                    note.params["message"].as_str(),
                );
            }
        }
        "notifications/message" => {
            let level = serde_json::from_value::<LoggingLevel>(note.params["level"].clone())
                .unwrap_or(LoggingLevel::Info);
            ctx.log(level, note.params["logger"].as_str(), &note.params["data"]);
        }
        _ => {}
    }
}

/// What a round of a forwarded request ended with.
enum Answer<T> {
    /// The result.
    Complete(T),
    /// The worker needs input from the caller first.
    InputRequired(InputRequiredResult),
    /// The tool started its task, and the worker handed it back (`Mcp-Task-Handoff`).
    HandedOff,
}

/// The `end` (or `err`) frame's JSON-RPC response as the request's outcome: the result is
/// borrowed from the frame, not copied, until `T` takes what it needs.
fn answer<T: Forwarded>(payload: &[u8]) -> Result<Answer<T>, HandlerError> {
    #[derive(Deserialize)]
    struct Response<'a> {
        #[serde(borrow)]
        result: Option<&'a RawValue>,
        error: Option<ErrorObject>,
    }
    let malformed = || {
        bus_error(
            wire::STREAM_LOST,
            "the worker's answer is not a JSON-RPC response",
        )
    };
    // Exactly one of `result` and `error`, as JSON-RPC says; both is a broken worker's.
    match serde_json::from_slice::<Response<'_>>(payload) {
        Ok(Response {
            result: Some(raw),
            error: None,
        }) => T::parse(raw).ok_or_else(malformed),
        Ok(Response {
            error: Some(error),
            result: None,
        }) => Err(HandlerError::Protocol(error)),
        _ => Err(malformed()),
    }
}

/// Whether a response has a `result` member (an `err` frame's must not).
fn carries_result(payload: &[u8]) -> bool {
    #[derive(Deserialize)]
    struct Response {
        result: Option<serde::de::IgnoredAny>,
    }
    serde_json::from_slice::<Response>(payload).is_ok_and(|r| r.result.is_some())
}

#[cfg(test)]
mod tests {
    #[test]
    fn users_pools_offering_different_definitions_of_a_name_give_each_user_their_own() {
        use crate::{CatalogEntry, Scope};
        use serde_json::json;
        let tool = |description: &str| -> toolyard::proto::Tool {
            serde_json::from_value(json!({"name": "owner", "description": description,
                "inputSchema": {"type": "object"}}))
            .unwrap()
        };
        let desk = |instance: &str, user: &str, description: &str| {
            let mut e = CatalogEntry::new("desk", instance, vec![tool(description)]);
            e.scope = Scope::of(Some("acme"), Some(user)).unwrap();
            e
        };
        let (alice_new, alice_old) = (desk("a2", "ta", "v2"), desk("a1", "ta", "v1"));
        let (bob, carol) = (desk("b", "tb", "v1"), desk("c", "tc", "v2"));
        let rows = |entries: &[&CatalogEntry]| -> Vec<(String, Vec<String>)> {
            super::offered(
                entries,
                (true, true),
                |e| &e.tools,
                |e| &e.for_users.tools,
                |t| &t.name,
            )
            .into_iter()
            .map(|(t, _, tokens)| {
                let desc = t.description.clone().unwrap_or_default();
                (desc, tokens.unwrap_or_default().into_iter().collect())
            })
            .collect()
        };
        // Newest first, as the catalog gives them: alice's newer instance speaks for her.
        let one_order = rows(&[&alice_new, &bob, &alice_old, &carol]);
        assert_eq!(
            one_order,
            [
                ("v2".to_owned(), vec!["ta".to_owned(), "tc".to_owned()]),
                ("v1".to_owned(), vec!["tb".to_owned()]),
            ]
        );
        // Another user's entry becoming the newest (a heartbeat) changes nothing.
        assert_eq!(rows(&[&bob, &alice_new, &carol, &alice_old]), one_order);
    }

    #[test]
    fn pools_of_one_server_whose_scopes_overlap_are_found_once_a_pair() {
        use crate::{CatalogEntry, Scope};
        let entry = |server: &str, instance: &str, tenant: Option<&str>, user: Option<&str>| {
            let mut e = CatalogEntry::new(server, instance, Vec::new());
            e.scope = Scope::of(tenant, user).unwrap();
            e
        };
        let entries = [
            entry("calc", "a", None, None),
            entry("calc", "b", None, None),
            entry("calc", "c", Some("acme"), None),
            entry("calc", "d", Some("beta"), Some("ops")),
            entry("docs", "e", Some("acme"), None),
            entry("docs", "f", Some("beta"), None),
        ];
        let found = super::overlapping_pools(entries.iter());
        let found: Vec<(String, String, String)> = found
            .into_iter()
            .map(|(s, a, b)| (s, a.to_string(), b.to_string()))
            .collect();
        assert_eq!(
            found,
            [
                ("calc".into(), "every caller".into(), "tenant acme".into()),
                (
                    "calc".into(),
                    "every caller".into(),
                    "user ops of tenant beta".into()
                ),
            ]
        );
    }

    #[test]
    fn a_workers_input_keys_reach_the_caller_as_they_are_unless_an_earlier_round_used_them() {
        use std::collections::BTreeSet;
        let keys = |v: &[&str]| v.iter().map(|k| (*k).to_owned()).collect::<Vec<_>>();
        let mut used = BTreeSet::new();
        let first = super::exposed_keys(0, keys(&["name", "1:name"]).iter(), &used);
        assert_eq!(
            first,
            [
                ("name".into(), "name".into()),
                ("1:name".into(), "1:name".into())
            ]
        );
        used.extend(first.into_iter().map(|(_, exposed)| exposed));
        // Asked again under `name` in round 1: `1:name` is taken already, so `1:1:name`.
        let second = super::exposed_keys(1, keys(&["age", "name"]).iter(), &used);
        assert_eq!(
            second,
            [
                ("age".into(), "age".into()),
                ("name".into(), "1:1:name".into())
            ]
        );
    }

    /// The size of the future an async fn with these seven arguments returns.
    fn future_size<A, B, C, D, E, G, H, F: std::future::Future>(
        _: impl Fn(A, B, C, D, E, G, H) -> F,
    ) -> usize {
        std::mem::size_of::<F>()
    }

    /// A forwarded call's round is allocated whole for every call (`call_round` boxes it).
    /// glibc's malloc serves requests up to 1016 bytes from its per-thread cache; a larger
    /// one first consolidates the fast bins: ~2 200 instructions of every forwarded call
    /// when this future was 1 384 bytes (callgrind). Box what a rare path needs, borrow
    /// instead of cloning what the call's owner keeps.
    #[test]
    fn a_forwarded_rounds_future_stays_under_the_size_glibc_serves_from_its_thread_cache() {
        let round = future_size(super::call_once);
        assert!(round <= 1016, "a forwarded round's future is {round} bytes");
    }

    /// The future of a tool call (`forward`'s, boxed for every call) and the request future
    /// it boxes in turn each stay under glibc's thread-cache size: unboxed, the request made
    /// the call's future over 1 KiB again (~1 950 instructions in `malloc` per forwarded
    /// call, callgrind).
    #[test]
    fn a_tool_calls_futures_stay_under_the_size_glibc_serves_from_its_thread_cache() {
        fn size3<A, B, C, F: std::future::Future>(_: impl Fn(A, B, C) -> F) -> usize {
            std::mem::size_of::<F>()
        }
        fn size4<A, B, C, D, F: std::future::Future>(_: impl Fn(A, B, C, D) -> F) -> usize {
            std::mem::size_of::<F>()
        }
        let call = size3(super::call_tool);
        assert!(call <= 1016, "a tool call's future is {call} bytes");
        let request = size4(super::request::<toolyard::RawResult>);
        assert!(
            request <= 1016,
            "a forwarded request's future is {request} bytes"
        );
    }
}
