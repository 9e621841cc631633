//! The ServerSupervisor and the [`Server`] handle users hold.
//!
//! The supervisor spawns the handler actors (tool, resource and prompt catalogs, completion,
//! custom methods) and the EventBus linked
//! to itself. When one fails it is restarted with the same registry (registries live outside
//! the actors, see [`crate::registry`]) and the shared routing table is updated; requests that
//! were in the dead actor's mailbox are answered with an error by their [`Reply`]'s drop.

use crate::audience::{Audienced, Reach};
use crate::connection::{
    Connection, ConnectionArgs, ConnectionHandle, Delivery, DirectModern, Inflight, SessionView,
};
use crate::context::{RequestContext, TaskRole};
use crate::error::HandlerError;
use crate::event_bus::{BusMsg, Event, EventBus};
use crate::handlers::completion::{CompletionHandler, CompletionMsg, CompletionState};
use crate::handlers::custom::{CustomMethods, CustomMsg, CustomState, MethodFn};
use crate::handlers::prompts::{PromptHandler, PromptMsg, PromptState};
use crate::handlers::resources::{ResourceHandler, ResourceMsg, ResourceState};
use crate::handlers::tools::{ToolCatalog, ToolMsg, ToolState};
use crate::middleware::{Layers, Peer};
use crate::mrtr::StateSealer;
use crate::registry::Registry;
use crate::resource::{
    CompleteFn, CompletionTarget, PromptDef, ResourceDef, ResourceRequest, SubscribeCheckFn,
    TemplateDef,
};
use crate::route::Routes;
use crate::sink::Sink;
use crate::tasks::{TaskSettings, TaskStore, Tasks};
use crate::tool::ToolDef;
use arc_swap::ArcSwapOption;
use ractor::{Actor, ActorCell, ActorProcessingErr, ActorRef, SupervisionEvent};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use toolyard_proto::jsonrpc::Request;
use toolyard_proto::ErrorObject;
use toolyard_proto::RequestMeta;
use toolyard_proto::{
    CacheScope, Implementation, ListChangedCapability, ResourcesCapability, ServerCapabilities,
};

/// Pagination and caching of list results.
#[derive(Debug, Clone, Copy)]
pub struct ListSettings {
    /// Items per page of every list.
    pub page_size: usize,
    /// `ttlMs` of modern list results.
    pub ttl_ms: u64,
    /// `cacheScope` of modern list results.
    pub cache_scope: CacheScope,
    /// `ttlMs` of modern `resources/read` results.
    pub resource_ttl_ms: u64,
}

impl Default for ListSettings {
    fn default() -> Self {
        ListSettings {
            page_size: 100,
            ttl_ms: 60_000,
            cache_scope: CacheScope::Public,
            resource_ttl_ms: 0,
        }
    }
}

/// Bounds on what one connection may hold.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Requests in flight per connection; more are refused with an error.
    pub max_in_flight: usize,
    /// How long a server-to-client request (elicitation, sampling, roots) may take.
    pub client_request_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_in_flight: 1024,
            client_request_timeout: Duration::from_secs(300),
        }
    }
}

/// Everything a server is made of, before it starts.
pub struct ServerConfig {
    /// `serverInfo`.
    pub info: Implementation,
    /// `instructions` for the model.
    pub instructions: Option<String>,
    /// `capabilities.experimental` of both generations' answers: what the server wants a
    /// client to know that no standard capability says.
    pub experimental: Option<serde_json::Map<String, serde_json::Value>>,
    /// Lists.
    pub list: ListSettings,
    /// Limits.
    pub limits: Limits,
    /// Signs modern `requestState`.
    pub sealer: StateSealer,
    /// Middleware.
    pub layers: Layers,
    /// Tools.
    pub tools: Vec<ToolDef>,
    /// Static resources.
    pub resources: Vec<ResourceDef>,
    /// Resource templates.
    pub templates: Vec<TemplateDef>,
    /// Prompts.
    pub prompts: Vec<PromptDef>,
    /// Completers.
    pub completers: Vec<(CompletionTarget, CompleteFn)>,
    /// Custom methods.
    pub methods: Vec<(String, MethodFn)>,
    /// Where tasks live. With a store the server offers tasks: the tasks extension
    /// (`io.modelcontextprotocol/tasks`) in `server/discover` and the `tasks` capability of
    /// 2025-11-25; without one it offers none.
    pub tasks: Option<Arc<dyn TaskStore>>,
    /// How tasks run.
    pub task_settings: TaskSettings,
    /// Lifecycle events and readiness ([`Server::lifecycle`]); made here so layers built
    /// before the server starts ([`Lifecycle::tool_events`](crate::Lifecycle::tool_events)) can publish to it.
    pub lifecycle: Arc<crate::lifecycle::Lifecycle>,
}

impl ServerConfig {
    /// An empty server named `name`.
    pub fn new(info: Implementation) -> Self {
        ServerConfig {
            info,
            instructions: None,
            experimental: None,
            list: ListSettings::default(),
            limits: Limits::default(),
            sealer: StateSealer::random(Duration::from_secs(600)),
            layers: Layers::default(),
            lifecycle: Arc::default(),
            tools: Vec::new(),
            resources: Vec::new(),
            templates: Vec::new(),
            prompts: Vec::new(),
            completers: Vec::new(),
            methods: Vec::new(),
            tasks: None,
            task_settings: TaskSettings::default(),
        }
    }
}

/// What every actor of one server shares.
pub(crate) struct ServerCore {
    pub(crate) info: Implementation,
    pub(crate) instructions: Option<String>,
    /// What `initialize` announces (legacy).
    pub(crate) capabilities: ServerCapabilities,
    /// What `server/discover` announces (2026-07-28: extensions, no `tasks` slot).
    pub(crate) modern_capabilities: ServerCapabilities,
    pub(crate) list: ListSettings,
    pub(crate) limits: Limits,
    pub(crate) sealer: StateSealer,
    pub(crate) layers: Layers,
    routes: ArcSwapOption<Routes>,
    tools: Arc<Registry<ToolDef>>,
    resources: Arc<Registry<ResourceDef>>,
    templates: Arc<Registry<TemplateDef>>,
    prompts: Arc<Registry<PromptDef>>,
    connections: AtomicU64,
    pub(crate) tasks: Option<Arc<Tasks>>,
    /// Explains calls to tools that are not registered (see [`Server::explain_unknown_tools`]).
    unknown_tools: ArcSwapOption<UnknownToolFn>,
    lifecycle: Arc<crate::lifecycle::Lifecycle>,
}

/// Turns the name of a tool that is not registered into the error its caller gets, or
/// `None` for the generic "Unknown tool".
pub type UnknownToolFn = Box<dyn Fn(&str) -> Option<ErrorObject> + Send + Sync>;

impl ServerCore {
    /// What a `tools/call` needs to start without the ToolCatalog actor.
    pub(crate) fn call_site(&self) -> crate::handlers::tools::CallSite<'_> {
        crate::handlers::tools::CallSite {
            registry: &self.tools,
            sealer: &self.sealer,
            tasks: self.tasks.as_ref(),
            unknown: &self.unknown_tools,
        }
    }

    /// The subscription check of the resource `uri` names, found as `resources/read` finds
    /// its reader (the static resource of that URI, else the first template that matches),
    /// with the request the check gets; `None` when that resource has no check.
    ///
    /// Where what serves the URI depends on who asks (an [`Audience`](crate::Audience)), the
    /// check is one that finds it for the caller it runs for, as a read would, and refuses
    /// as a read of an unknown URI when nothing the caller may see serves it.
    pub(crate) fn subscribe_check(&self, uri: &str) -> Option<(SubscribeCheckFn, ResourceRequest)> {
        let request = |vars| ResourceRequest {
            uri: uri.to_owned(),
            vars,
        };
        let resources = self.resources.load();
        let resource = resources.get(uri);
        let templates = self.templates.load();
        let mut matching = templates
            .values()
            .map(|t| t.first())
            .filter_map(|t| t.matcher.matches(uri).map(|vars| (t, vars)));
        let restricted =
            resource.is_some_and(|d| d.restricted()) || templates.values().any(|t| t.restricted());
        if restricted {
            return Some((self.check_for_caller(), request(HashMap::new())));
        }
        if let Some(def) = resource {
            return def
                .first()
                .check
                .clone()
                .map(|c| (c, request(HashMap::new())));
        }
        let (t, vars) = matching.next()?;
        t.check.clone().map(|c| (c, request(vars)))
    }

    /// A subscription check that finds what serves the URI for the caller it runs for (the
    /// static resource, else the first template that matches, of those it may see) and
    /// runs that one's check; nothing it may see: refused as a read would be.
    fn check_for_caller(&self) -> SubscribeCheckFn {
        let (resources, templates) = (self.resources.load(), self.templates.load());
        Arc::new(move |ctx: RequestContext, request: ResourceRequest| {
            let principal = ctx.principal();
            let found = match resources
                .get(&request.uri)
                .and_then(|d| d.for_caller(principal))
            {
                Some(def) => Some((def.check.clone(), HashMap::new())),
                None => templates
                    .values()
                    .filter_map(|t| t.for_caller(principal))
                    .find_map(|t| {
                        t.matcher
                            .matches(&request.uri)
                            .map(|v| (t.check.clone(), v))
                    }),
            };
            match found {
                None => {
                    let refused =
                        crate::handlers::resources::not_found(&request.uri, ctx.is_modern());
                    Box::pin(std::future::ready(Err(HandlerError::Protocol(refused))))
                }
                Some((None, _)) => Box::pin(std::future::ready(Ok(()))),
                Some((Some(check), vars)) => check(ctx, ResourceRequest { vars, ..request }),
            }
        })
    }

    /// The current routing table. Set before any connection exists.
    pub(crate) fn routes(&self) -> Arc<Routes> {
        match self.routes.load_full() {
            Some(r) => r,
            None => unreachable!("routes are installed before the server is handed out"),
        }
    }
}

struct Supervisor;

enum SupMsg {
    Stop,
}

struct SupState {
    core: Arc<ServerCore>,
    completers: HashMap<CompletionTarget, CompleteFn>,
    methods: HashMap<String, MethodFn>,
}

async fn spawn_custom_methods(
    methods: HashMap<String, MethodFn>,
    sup: ActorCell,
) -> Result<ActorRef<CustomMsg>, ActorProcessingErr> {
    let (r, _) = Actor::spawn_linked(None, CustomMethods, CustomState { methods }, sup).await?;
    Ok(r)
}

impl SupState {
    async fn spawn_tools(&self, sup: ActorCell) -> Result<ActorRef<ToolMsg>, ActorProcessingErr> {
        let (r, _) = Actor::spawn_linked(
            None,
            ToolCatalog,
            ToolState {
                registry: self.core.tools.clone(),
                list: self.core.list,
            },
            sup,
        )
        .await?;
        Ok(r)
    }
    async fn spawn_resources(
        &self,
        sup: ActorCell,
    ) -> Result<ActorRef<ResourceMsg>, ActorProcessingErr> {
        let (r, _) = Actor::spawn_linked(
            None,
            ResourceHandler,
            ResourceState {
                resources: self.core.resources.clone(),
                templates: self.core.templates.clone(),
                sealer: self.core.sealer.clone(),
                list: self.core.list,
            },
            sup,
        )
        .await?;
        Ok(r)
    }
    async fn spawn_prompts(
        &self,
        sup: ActorCell,
    ) -> Result<ActorRef<PromptMsg>, ActorProcessingErr> {
        let (r, _) = Actor::spawn_linked(
            None,
            PromptHandler,
            PromptState {
                registry: self.core.prompts.clone(),
                sealer: self.core.sealer.clone(),
                list: self.core.list,
            },
            sup,
        )
        .await?;
        Ok(r)
    }
    async fn spawn_completion(
        &self,
        sup: ActorCell,
    ) -> Result<ActorRef<CompletionMsg>, ActorProcessingErr> {
        let (r, _) = Actor::spawn_linked(
            None,
            CompletionHandler,
            CompletionState {
                completers: self.completers.clone(),
                prompts: self.core.prompts.clone(),
                templates: self.core.templates.clone(),
            },
            sup,
        )
        .await?;
        Ok(r)
    }
}

impl Actor for Supervisor {
    type Msg = SupMsg;
    type State = SupState;
    type Arguments = SupState;

    async fn pre_start(
        &self,
        myself: ActorRef<SupMsg>,
        state: SupState,
    ) -> Result<SupState, ActorProcessingErr> {
        let sup = myself.get_cell();
        let (bus, _) = Actor::spawn_linked(None, EventBus, (), sup.clone()).await?;
        if let Some(tasks) = &state.core.tasks {
            tasks.set_bus(bus.clone());
        }
        let routes = Routes {
            custom: spawn_custom_methods(state.methods.clone(), sup.clone()).await?,
            tools: state.spawn_tools(sup.clone()).await?,
            resources: state.spawn_resources(sup.clone()).await?,
            prompts: state.spawn_prompts(sup.clone()).await?,
            completion: state.spawn_completion(sup.clone()).await?,
            bus,
            tasks: state.core.tasks.clone(),
        };
        state.core.routes.store(Some(Arc::new(routes)));
        Ok(state)
    }

    async fn handle(
        &self,
        myself: ActorRef<SupMsg>,
        msg: SupMsg,
        _state: &mut SupState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            SupMsg::Stop => myself.stop(None),
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<SupMsg>,
        evt: SupervisionEvent,
        state: &mut SupState,
    ) -> Result<(), ActorProcessingErr> {
        let dead = match &evt {
            SupervisionEvent::ActorFailed(cell, err) => {
                tracing::error!(actor = ?cell.get_id(), "handler actor failed: {err}; restarting");
                cell.get_id()
            }
            SupervisionEvent::ActorTerminated(cell, _, reason) => {
                tracing::warn!(actor = ?cell.get_id(), ?reason, "handler actor stopped; restarting");
                cell.get_id()
            }
            _ => return Ok(()),
        };
        let sup = myself.get_cell();
        let mut routes = state.core.routes().as_ref().clone();
        if routes.tools.get_id() == dead {
            routes.tools = state.spawn_tools(sup).await?;
        } else if routes.resources.get_id() == dead {
            routes.resources = state.spawn_resources(sup).await?;
        } else if routes.prompts.get_id() == dead {
            routes.prompts = state.spawn_prompts(sup).await?;
        } else if routes.completion.get_id() == dead {
            routes.completion = state.spawn_completion(sup).await?;
        } else if routes.custom.get_id() == dead {
            routes.custom = spawn_custom_methods(state.methods.clone(), sup).await?;
        } else if routes.bus.get_id() == dead {
            // Listeners are lost with the bus; connections re-register on their next
            // subscription. Handlers get the new bus on their next restart.
            let (bus, _) = Actor::spawn_linked(None, EventBus, (), sup).await?;
            if let Some(tasks) = &state.core.tasks {
                tasks.set_bus(bus.clone());
            }
            routes.bus = bus;
        } else {
            return Ok(());
        }
        state.core.routes.store(Some(Arc::new(routes)));
        Ok(())
    }
}

/// Failure to start a server.
#[derive(Debug, thiserror::Error)]
#[error("could not start the server's actors: {0}")]
pub struct StartError(String);

/// A running server. Cheap to clone.
#[derive(Clone)]
pub struct Server {
    core: Arc<ServerCore>,
    supervisor: ActorRef<SupMsg>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("name", &self.core.info.name)
            .finish()
    }
}

fn capabilities(config: &ServerConfig) -> ServerCapabilities {
    let listed = Some(ListChangedCapability {
        list_changed: Some(true),
    });
    ServerCapabilities {
        tools: Some(ListChangedCapability {
            list_changed: Some(true),
        }),
        resources: Some(ResourcesCapability {
            subscribe: Some(true),
            list_changed: Some(true),
        }),
        prompts: listed,
        logging: Some(Default::default()),
        completions: Some(Default::default()),
        experimental: config.experimental.clone(),
        // 2025-11-25 tasks: list, cancel, and task-augmented tools/call.
        tasks: config.tasks.as_ref().map(|_| {
            let mut tasks = serde_json::Map::new();
            tasks.insert("list".into(), serde_json::json!({}));
            tasks.insert("cancel".into(), serde_json::json!({}));
            tasks.insert(
                "requests".into(),
                serde_json::json!({ "tools": { "call": {} } }),
            );
            tasks
        }),
        extensions: None,
    }
}

/// 2026-07-28 moved tasks into an extension: no `tasks` slot, `extensions` instead.
fn modern_capabilities(config: &ServerConfig, legacy: &ServerCapabilities) -> ServerCapabilities {
    let mut caps = legacy.clone();
    caps.tasks = None;
    if config.tasks.is_some() {
        let mut ext = serde_json::Map::new();
        ext.insert(
            toolyard_proto::meta::TASKS_EXTENSION.into(),
            serde_json::json!({}),
        );
        caps.extensions = Some(ext);
    }
    caps
}

impl Server {
    /// Starts the server's actors.
    pub async fn start(config: ServerConfig) -> Result<Server, StartError> {
        let legacy_caps = capabilities(&config);
        let tasks = config.tasks.clone().map(|store| {
            Arc::new(Tasks::new(
                store,
                config.task_settings,
                config.list.page_size,
            ))
        });
        let core = Arc::new(ServerCore {
            modern_capabilities: modern_capabilities(&config, &legacy_caps),
            capabilities: legacy_caps,
            tasks,
            info: config.info,
            instructions: config.instructions,
            list: config.list,
            limits: config.limits,
            sealer: config.sealer,
            layers: config.layers,
            routes: ArcSwapOption::empty(),
            tools: Arc::default(),
            resources: Arc::default(),
            templates: Arc::default(),
            prompts: Arc::default(),
            connections: AtomicU64::new(0),
            unknown_tools: ArcSwapOption::empty(),
            lifecycle: config.lifecycle,
        });
        core.tools.insert(
            config
                .tools
                .into_iter()
                .map(|d| (d.tool.name.clone(), Arc::new(d))),
        );
        core.resources.insert(
            config
                .resources
                .into_iter()
                .map(|d| (d.resource.uri.clone(), Arc::new(d))),
        );
        core.templates.insert(
            config
                .templates
                .into_iter()
                .map(|d| (d.template.uri_template.clone(), Arc::new(d))),
        );
        core.prompts.insert(
            config
                .prompts
                .into_iter()
                .map(|d| (d.prompt.name.clone(), Arc::new(d))),
        );
        let state = SupState {
            core: core.clone(),
            completers: config.completers.into_iter().collect(),
            methods: config.methods.into_iter().collect(),
        };
        let (supervisor, _) = Actor::spawn(None, Supervisor, state)
            .await
            .map_err(|e| StartError(e.to_string()))?;
        core.lifecycle
            .publish(crate::lifecycle::LifecycleEvent::Started {
                name: core.info.name.clone(),
            });
        Ok(Server { core, supervisor })
    }

    /// Opens a connection whose outgoing messages go to `sink`. Feed it what the client
    /// sends with [`ConnectionHandle::receive`].
    pub async fn connect(&self, sink: Sink) -> Result<ConnectionHandle, StartError> {
        self.connect_as(sink, None, None).await
    }

    /// Like [`Server::connect`], for a legacy HTTP session or an authenticated principal.
    pub async fn connect_as(
        &self,
        sink: Sink,
        session_id: Option<Arc<str>>,
        principal: Option<Arc<str>>,
    ) -> Result<ConnectionHandle, StartError> {
        self.connect_from(sink, session_id, principal, None).await
    }

    /// Like [`Server::connect_as`], naming where the client is ([`Peer`]): what layers see
    /// in [`RequestInfo::peer`](crate::RequestInfo::peer) for its requests.
    pub async fn connect_from(
        &self,
        sink: Sink,
        session_id: Option<Arc<str>>,
        principal: Option<Arc<str>>,
        peer: Option<Peer>,
    ) -> Result<ConnectionHandle, StartError> {
        let peer = peer.map(Arc::new);
        let view: Arc<ArcSwapOption<SessionView>> = Arc::default();
        let queued: Arc<std::sync::atomic::AtomicUsize> = Arc::default();
        let inflight: Arc<Inflight> = Arc::default();
        let closing = tokio_util::sync::CancellationToken::new();
        let direct = Arc::new(DirectModern {
            core: self.core.clone(),
            inflight: inflight.clone(),
            closing: closing.clone(),
            principal: principal.clone(),
            peer: peer.clone(),
        });
        let args = ConnectionArgs {
            queued: queued.clone(),
            inflight,
            closing,
            core: self.core.clone(),
            sink: sink.clone(),
            session_id,
            principal,
            peer,
            view: view.clone(),
        };
        let (actor, _) = Actor::spawn(None, Connection, args)
            .await
            .map_err(|e| StartError(e.to_string()))?;
        self.core.connections.fetch_add(1, Ordering::Relaxed);
        Ok(ConnectionHandle::new(actor, view, direct, sink, queued))
    }

    /// Serves a modern (2026-07-28) request that needs no connection: its answer and
    /// notifications go to `delivery`, closing it cancels the request. `subscriptions/listen`
    /// needs a connection; hand it to [`ConnectionHandle::deliver`] instead.
    pub fn serve_stateless(&self, request: Request, meta: RequestMeta, delivery: Delivery) {
        crate::connection::serve_stateless(&self.core, request, meta, delivery, TaskRole::Own)
    }

    /// [`serve_stateless`](Self::serve_stateless) for a request that runs the body of a task
    /// held elsewhere: a durable NATS job, whose worker keeps its record and its questions.
    /// It runs as an ordinary request, whatever its tool's task support (a tool that runs
    /// only as a task runs; none gets a task of this server's), and its input rounds come
    /// back as `input_required` results for the task's holder to ask.
    pub fn serve_task_body(&self, request: Request, meta: RequestMeta, delivery: Delivery) {
        crate::connection::serve_stateless(&self.core, request, meta, delivery, TaskRole::Body)
    }

    /// [`serve_stateless`](Self::serve_stateless) for a caller that makes the task of a tool
    /// that defers its task ([`ToolDef::with_deferred_task`](crate::ToolDef::with_deferred_task))
    /// itself: a NATS gateway, whose durable tasks run as jobs on any worker. The tool runs
    /// as an ordinary call, its input rounds answered `input_required` as usual; when it
    /// calls `start_task`, its handler is stopped and the request answers
    /// `{"resultType": "task_handoff"}` ([`TASK_HANDOFF`](crate::TASK_HANDOFF)), for the
    /// caller to create the task and run the call again as its body
    /// ([`serve_task_body`](Self::serve_task_body)) with the same `inputResponses` and
    /// `requestState`. What the handler did before `start_task` is done again then, as on
    /// every retry of a multi-round-trip request.
    pub fn serve_handing_off_task(&self, request: Request, meta: RequestMeta, delivery: Delivery) {
        crate::connection::serve_stateless(&self.core, request, meta, delivery, TaskRole::HandOff)
    }

    /// Tells this server's listeners of a task's status as changed elsewhere (another
    /// replica or a worker sharing the task store): `subscriptions/listen` with its id hears
    /// it as if the change were made here. Does nothing without a task store.
    pub fn publish_task_status(&self, record: &crate::tasks::TaskRecord) {
        if let Some(tasks) = &self.core.tasks {
            tasks.publish(record);
        }
    }

    /// How many tasks run in this process (0 without a task store).
    pub fn running_tasks(&self) -> usize {
        self.core.tasks.as_ref().map_or(0, |t| t.running())
    }

    /// A registered tool's definition (the first, when it has alternatives for different
    /// callers: [`Server::tool_for`] picks the one a caller gets).
    pub fn tool(&self, name: &str) -> Option<Arc<ToolDef>> {
        self.core.tools.get(name)
    }

    /// The definition of a tool a caller with `principal` gets: of the definitions
    /// registered under `name` together, each with an [`Audience`](crate::Audience), the
    /// first that admits it; `None` when none does (to that caller there is no such tool).
    pub fn tool_for(&self, name: &str, principal: Option<&str>) -> Option<Arc<ToolDef>> {
        self.core.tools.get_for(name, principal)
    }

    /// What only some callers may see, as listings show it, each item with its
    /// [`Audience`](crate::Audience): a NATS worker publishes the listed ones for its
    /// gateways, which cannot list the server as each caller.
    pub fn for_audiences(&self) -> crate::ForAudiences {
        fn of<D: Audienced, T>(
            registry: &Registry<D>,
            item: impl Fn(&D) -> T,
        ) -> Vec<(T, crate::Audience)> {
            let snapshot = registry.load();
            let restricted = snapshot
                .values()
                .flat_map(|d| d.iter())
                .filter_map(|d| Some((item(d), d.audience()?.clone())));
            restricted.collect()
        }
        crate::ForAudiences {
            tools: of(&self.core.tools, |d| d.tool.clone()),
            prompts: of(&self.core.prompts, |d| d.prompt.clone()),
            resources: of(&self.core.resources, |d| d.resource.clone()),
            templates: of(&self.core.templates, |d| d.template.clone()),
        }
    }

    /// A modern `requestState` signed again with this server's key and a fresh expiry, for a
    /// state kept where only trusted writers reach: a durable task's record, where a call
    /// waits (hours, maybe) for its caller's answers and then goes on in another process,
    /// whose key may differ. Its signature and expiry are not checked; what it is bound to
    /// (method, target, arguments, principal) stays, and is checked when it is used.
    pub fn renew_request_state(&self, sealed: &str) -> Result<String, ErrorObject> {
        self.core.sealer.renew(sealed)
    }

    /// Whether modern `requestState` is sealed with a key this process made up (no state
    /// secret was given): a retry that lands on another replica fails its integrity check.
    pub fn state_key_is_random(&self) -> bool {
        self.core.sealer.is_random()
    }

    /// Seals modern `requestState` with the key derived from `secret` from now on (as the
    /// builder's `state_secret` derives it from the same secret), for a key the replicas
    /// agree on only after the server started: a NATS worker or gateway reads the one its
    /// peers share from the bus, or a new one it is told later. State sealed with the key
    /// it replaces still opens here (the one before that no longer does). Returns whether
    /// the key changed.
    pub fn use_state_secret(&self, secret: &[u8]) -> bool {
        self.core.sealer.use_secret(secret)
    }

    /// The server's identity.
    pub fn info(&self) -> &Implementation {
        &self.core.info
    }

    /// Adds or replaces tools at runtime; listeners get `tools/list_changed`. Applied
    /// before it returns: a call made next finds them. A name given more than once here,
    /// each time with an [`Audience`](crate::Audience), gets those definitions as
    /// alternatives: each caller is listed and calls the first that admits it (a version
    /// of a tool per group of users); otherwise the last given of a name replaces the rest.
    /// The same holds for prompts, resources and templates.
    pub fn add_tools(&self, tools: Vec<ToolDef>) {
        let items = tools
            .into_iter()
            .map(|d| (d.tool.name.clone(), Arc::new(d)));
        if let Some(reach) = self.core.tools.insert(items) {
            self.publish_for(Event::ToolsChanged, reach);
        }
    }

    /// Answers calls to tools that are not registered with the error `explain` returns for
    /// their name, instead of the generic "Unknown tool" (when it returns one). A gateway
    /// uses it to say why a source's tools are gone (the source is unhealthy) rather than
    /// pretending they never existed. Replaces an earlier one.
    pub fn explain_unknown_tools(&self, explain: UnknownToolFn) {
        self.core.unknown_tools.store(Some(Arc::new(explain)));
    }

    /// Removes tools by name (at once, as [`add_tools`](Self::add_tools) adds them).
    #[allow(
        clippy::needless_pass_by_value,
        reason = "the public signature predates the registry's direct writes; callers hand the list over"
    )]
    pub fn remove_tools(&self, names: Vec<String>) {
        if let Some(reach) = self.core.tools.remove(&names) {
            self.publish_for(Event::ToolsChanged, reach);
        }
    }

    /// Adds or replaces static resources.
    pub fn add_resources(&self, resources: Vec<ResourceDef>) {
        let items = resources
            .into_iter()
            .map(|d| (d.resource.uri.clone(), Arc::new(d)));
        if let Some(reach) = self.core.resources.insert(items) {
            self.publish_for(Event::ResourcesChanged, reach);
        }
    }

    /// Adds or replaces prompts.
    pub fn add_prompts(&self, prompts: Vec<PromptDef>) {
        let items = prompts
            .into_iter()
            .map(|d| (d.prompt.name.clone(), Arc::new(d)));
        if let Some(reach) = self.core.prompts.insert(items) {
            self.publish_for(Event::PromptsChanged, reach);
        }
    }

    /// Adds or replaces resource templates.
    pub fn add_templates(&self, templates: Vec<TemplateDef>) {
        let items = templates
            .into_iter()
            .map(|d| (d.template.uri_template.clone(), Arc::new(d)));
        if let Some(reach) = self.core.templates.insert(items) {
            self.publish_for(Event::ResourcesChanged, reach);
        }
    }

    /// Removes resources or templates by URI / URI template.
    #[allow(
        clippy::needless_pass_by_value,
        reason = "the public signature predates the registry's direct writes; callers hand the list over"
    )]
    pub fn remove_resources(&self, uris: Vec<String>) {
        let resources = self.core.resources.remove(&uris);
        let templates = self.core.templates.remove(&uris);
        let reach = match (resources, templates) {
            (Some(mut a), Some(b)) => {
                a.widen(b);
                Some(a)
            }
            (a, b) => a.or(b),
        };
        if let Some(reach) = reach {
            self.publish_for(Event::ResourcesChanged, reach);
        }
    }

    /// Removes prompts by name.
    #[allow(
        clippy::needless_pass_by_value,
        reason = "the public signature predates the registry's direct writes; callers hand the list over"
    )]
    pub fn remove_prompts(&self, names: Vec<String>) {
        if let Some(reach) = self.core.prompts.remove(&names) {
            self.publish_for(Event::PromptsChanged, reach);
        }
    }

    /// Adds or replaces an argument completer.
    pub fn add_completer(&self, target: CompletionTarget, complete: CompleteFn) {
        let _ = self
            .core
            .routes()
            .completion
            .cast(CompletionMsg::Register(target, complete));
    }

    /// Adds a custom JSON-RPC method.
    pub fn add_method(&self, name: impl Into<String>, handler: MethodFn) {
        let _ = self
            .core
            .routes()
            .custom
            .cast(CustomMsg::AddMethod(name.into(), handler));
    }

    /// Publishes a change event to every listener.
    pub fn publish(&self, event: Event) {
        self.publish_for(event, Reach::everyone());
    }

    /// Publishes a list change to the listeners it concerns only (see [`Reach`]); a
    /// resource update goes to its subscribers whatever the reach. The server does this
    /// itself for what changes in its registries.
    pub fn publish_for(&self, event: Event, reach: Reach) {
        let _ = self.core.routes().bus.cast(BusMsg::Publish(event, reach));
    }

    /// Publishes an event that was raised in another process (a cluster bus relays it):
    /// delivered to this server's listeners like [`publish_for`](Self::publish_for), but not
    /// told to the taps, so it is never sent back out.
    pub fn publish_relayed(&self, event: Event, reach: Reach) {
        let _ = self
            .core
            .routes()
            .bus
            .cast(BusMsg::PublishRelayed(event, reach));
    }

    /// Calls `tap` with every event raised in this process (not the relayed ones), with
    /// whom it concerns. It runs inside the event bus actor: hand the event on (a channel)
    /// and return.
    pub fn tap_events(&self, tap: crate::event_bus::EventTap) {
        let _ = self
            .core
            .routes()
            .bus
            .cast(BusMsg::Tap(crate::event_bus::Tap(tap)));
    }

    /// Tells subscribers that a resource changed.
    pub fn notify_resource_updated(&self, uri: impl Into<String>) {
        self.publish(Event::ResourceUpdated(uri.into()));
    }

    /// Calls `watcher` when a resource URI gains its first subscriber or loses its last
    /// (legacy `resources/subscribe` and modern `subscriptions/listen` alike), and at once for
    /// every URI subscribed to now: how a server that relays resources subscribes upstream
    /// only while someone listens.
    pub fn watch_subscriptions(&self, watcher: crate::event_bus::SubscriptionWatcher) {
        let _ = self
            .core
            .routes()
            .bus
            .cast(BusMsg::Watch(crate::event_bus::Watcher(watcher)));
    }

    /// Fault injection: makes a handler actor fail, to exercise supervision.
    #[doc(hidden)]
    pub fn crash_handler(&self, which: &str) {
        let routes = self.core.routes();
        match which {
            "tools" => {
                let _ = routes.tools.cast(ToolMsg::Crash);
            }
            "resources" => {
                let _ = routes.resources.cast(ResourceMsg::Crash);
            }
            _ => {}
        }
    }

    /// Stops every actor of the server.
    pub fn shutdown(&self) {
        self.core
            .lifecycle
            .publish(crate::lifecycle::LifecycleEvent::Stopping);
        let _ = self.supervisor.cast(SupMsg::Stop);
    }

    /// Lifecycle events (subscribe) and readiness; plugins publish their components' state
    /// here (a gateway source, NATS workers).
    pub fn lifecycle(&self) -> &Arc<crate::lifecycle::Lifecycle> {
        &self.core.lifecycle
    }
}
