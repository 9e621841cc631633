//! The Connection actor: one per stdio or in-memory connection (and per legacy HTTP session).
//!
//! It owns what lives as long as the connection: the legacy lifecycle (nothing but
//! `initialize` and `ping` before `initialize`), the negotiated version, the caller's
//! capabilities, the log level, resource subscriptions, the in-flight table that cancellation
//! looks requests up in, and the pending replies of requests we sent to the client. Each
//! request is checked here (era, `_meta`, lifecycle) and cast straight to its handler actor
//! with a [`Reply`] that writes to the connection's sink.

use crate::context::{Caller, Channel, ContextInner, LegacyConn, RequestContext, Round};
use crate::event_bus::{next_listener_id, BusMsg, Filter, Listener, ListenerId};
use crate::gate;
use crate::handlers::tools::CallParams;
use crate::middleware::{RequestInfo, Watch};
use crate::outbound::Outbound;
use crate::reply::{InflightRelease, Reply};
use crate::route::route;
use crate::server::ServerCore;
use crate::sink::Sink;
use arc_swap::ArcSwapOption;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use serde::Deserialize;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio_util::sync::CancellationToken;
use toolyard_proto::jsonrpc::{self, Incoming, Notification, Rejected, Request};
use toolyard_proto::method;
use toolyard_proto::{
    ClientCapabilities, ErrorObject, Implementation, InitializeResult, LoggingLevel, ProgressToken,
    ProtocolVersion, RequestId, RequestMeta,
};

/// Where one request's answer and notifications go, when not to the connection's own sink
/// (an HTTP POST's response stream), and the token that stream's closing cancels.
#[derive(Debug, Clone)]
pub struct Delivery {
    /// The request's own sink.
    pub sink: Sink,
    /// Cancelled when the response stream closes.
    pub cancel: CancellationToken,
    /// Whether the request enters the connection's in-flight table (so
    /// `notifications/cancelled` can find it). Sessionless requests share one connection and
    /// may reuse ids, so they are not tracked.
    pub track: bool,
    /// The authenticated caller of this request, when the transport established one per
    /// request (sessionless HTTP); otherwise the connection's principal applies.
    pub principal: Option<Arc<str>>,
}

/// Messages of a Connection.
#[derive(Debug)]
pub(crate) enum ConnMsg {
    /// A parsed message from the client, with its own delivery for requests over HTTP.
    Inbound(Incoming, Option<Delivery>),
    /// A message that failed to parse; answer with its error.
    Rejected(Rejected),
    /// The transport closed: cancel everything and stop.
    Closed,
}

pub(crate) struct Connection;

/// What the connection needs to start.
pub(crate) struct ConnectionArgs {
    pub(crate) core: Arc<ServerCore>,
    pub(crate) sink: Sink,
    pub(crate) session_id: Option<Arc<str>>,
    pub(crate) principal: Option<Arc<str>>,
    pub(crate) view: Arc<ArcSwapOption<SessionView>>,
    /// Messages cast to the actor and not yet handled (see [`ConnState::queued`]).
    pub(crate) queued: Arc<AtomicUsize>,
    /// Shared with the handle for direct launches.
    pub(crate) inflight: Arc<Inflight>,
    /// Cancelled when the connection stops.
    pub(crate) closing: CancellationToken,
}

/// What a request of an initialized legacy connection needs, published once `initialize`
/// is handled, so a transport can launch such requests without a hop through the
/// connection actor (HTTP sessions under concurrent load). The connection stays the owner:
/// lifecycle methods, notifications and anything unusual still go through it.
pub(crate) struct SessionView {
    core: Arc<ServerCore>,
    version: ProtocolVersion,
    caller: Arc<Caller>,
    legacy: Arc<LegacyConn>,
    inflight: Arc<Inflight>,
    session_id: Option<Arc<str>>,
}

impl SessionView {
    /// Launches `req` if it is an ordinary legacy request; gives it back otherwise.
    pub(crate) fn launch(&self, req: Request, d: Delivery) -> Result<(), (Request, Delivery)> {
        if !method::handled(&req.method) {
            return Err((req, d));
        }
        match Edge::read(&req) {
            Some(edge) if edge.version().is_none() => self.launch_legacy(req, edge, d),
            _ => Err((req, d)),
        }
    }

    fn launch_legacy(
        &self,
        req: Request,
        edge: Edge,
        d: Delivery,
    ) -> Result<(), (Request, Delivery)> {
        if !self
            .inflight
            .enter(&req.id, &d.cancel, self.core.limits.max_in_flight)
        {
            // The connection answers these with the right error.
            return Err((req, d));
        }
        if self.legacy.closing.is_cancelled() {
            // Entered after the connection cancelled its table on stopping.
            d.cancel.cancel();
        }
        launch(
            &self.core,
            Launch {
                req,
                call: edge.call,
                version: self.version,
                caller: self.caller.clone(),
                channel: Channel::Legacy {
                    conn: self.legacy.clone(),
                },
                meta: LaunchMeta::of(edge.meta),
                modern: false,
                out: d.sink,
                cancel: d.cancel,
                session_id: self.session_id.clone(),
                release: Some(self.inflight.clone()),
            },
        );
        Ok(())
    }
}

/// What a transport needs to launch a modern (2026-07-28) request of a stdio or in-memory
/// connection without a hop through the connection actor: modern requests carry their
/// version and capabilities in `_meta`, so nothing of the connection's lifecycle is needed,
/// only its in-flight table (for `notifications/cancelled` and closing).
pub(crate) struct DirectModern {
    pub(crate) core: Arc<ServerCore>,
    pub(crate) inflight: Arc<Inflight>,
    /// Cancelled when the connection stops; no direct launch after that.
    pub(crate) closing: CancellationToken,
    pub(crate) principal: Option<Arc<str>>,
}

/// Launches an ordinary request of either generation straight to its handler, or gives it
/// back for the connection actor (anything unusual: lifecycle methods, `_meta` problems,
/// duplicate ids, a legacy request before `initialize`), which answers it as before.
pub(crate) fn launch_direct(
    direct: &DirectModern,
    view: Option<&SessionView>,
    req: Request,
    d: Delivery,
) -> Result<(), (Request, Delivery)> {
    if !method::handled(&req.method) || direct.closing.is_cancelled() {
        return Err((req, d));
    }
    let Some(edge) = Edge::read(&req) else {
        return Err((req, d));
    };
    let Some(requested) = edge.version() else {
        return match view {
            Some(view) => view.launch_legacy(req, edge, d),
            None => Err((req, d)),
        };
    };
    let Some(meta) = edge.meta.as_deref() else {
        return Err((req, d));
    };
    // Refused requests go back to the actor, which answers with the gate's error.
    let Ok(version) = gate::modern(&req.method, requested, meta) else {
        return Err((req, d));
    };
    let capabilities = meta.client_capabilities.clone().unwrap_or_default();
    if !direct
        .inflight
        .enter(&req.id, &d.cancel, direct.core.limits.max_in_flight)
    {
        return Err((req, d));
    }
    if direct.closing.is_cancelled() {
        // Entered after the connection cancelled its table on stopping.
        d.cancel.cancel();
    }
    let caller = Arc::new(Caller {
        capabilities,
        info: meta.client_info.clone(),
        principal: d.principal.clone().or_else(|| direct.principal.clone()),
    });
    let channel = Channel::Modern {
        log_level: meta.log_level,
        round: Mutex::new(Round::default()),
    };
    launch(
        &direct.core,
        Launch {
            req,
            call: edge.call,
            version,
            caller,
            channel,
            meta: LaunchMeta::of(edge.meta),
            modern: true,
            out: d.sink,
            cancel: d.cancel,
            session_id: None,
            release: Some(direct.inflight.clone()),
        },
    );
    Ok(())
}

/// A request's `_meta` and, for `tools/call`, its params, read in one pass over the params
/// (a direct launch would otherwise read them once for `_meta` and again in the handler).
struct Edge {
    /// Boxed: most legacy requests have none, and it is large to move.
    meta: Option<Box<RequestMeta>>,
    call: Option<CallParams>,
}

impl Edge {
    /// The modern protocol version the request asks for, if any.
    fn version(&self) -> Option<&str> {
        self.meta.as_ref()?.protocol_version.as_deref()
    }

    /// `None` when the params do not parse: the connection actor answers with the error.
    fn read(req: &Request) -> Option<Edge> {
        if req.method == method::TOOLS_CALL {
            let mut call: CallParams = jsonrpc::params(req.params.as_deref()).ok()?;
            Some(Edge {
                meta: call.meta.take(),
                call: Some(call),
            })
        } else {
            let head: Head = jsonrpc::params(req.params.as_deref()).ok()?;
            Some(Edge {
                meta: head.meta.map(Box::new),
                call: None,
            })
        }
    }
}

/// The in-flight requests of a connection, by id.
#[derive(Default)]
///
/// Hashed with FxHash: ids are the client's own, and the table is bounded by
/// `max_in_flight`, so a client choosing colliding ids can only slow its own connection.
pub(crate) struct Inflight(Mutex<rustc_hash::FxHashMap<RequestId, CancellationToken>>);

impl Inflight {
    /// Enters a request unless its id is already in flight or the table is full (the
    /// connection actor then answers with the matching error).
    fn enter(&self, id: &RequestId, cancel: &CancellationToken, max: usize) -> bool {
        let mut table = self.table();
        if table.contains_key(id) || table.len() >= max {
            return false;
        }
        table.insert(id.clone(), cancel.clone());
        true
    }

    fn table(
        &self,
    ) -> std::sync::MutexGuard<'_, rustc_hash::FxHashMap<RequestId, CancellationToken>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl InflightRelease for Inflight {
    fn release(&self, id: &RequestId) {
        self.table().remove(id);
    }
}

enum Phase {
    /// No `initialize` yet.
    Fresh,
    /// Legacy session negotiated.
    Legacy(ProtocolVersion),
}

pub(crate) struct ConnState {
    /// How many client messages wait in (or are being handled from) this actor's mailbox. A
    /// transport launches a request directly only when it is zero, so a request never
    /// overtakes an earlier message (a pipelined `logging/setLevel`, `notifications/cancelled`)
    /// that the actor has not handled yet.
    queued: Arc<AtomicUsize>,
    core: Arc<ServerCore>,
    sink: Sink,
    phase: Phase,
    caller: Arc<Caller>,
    principal: Option<Arc<str>>,
    session_id: Option<Arc<str>>,
    inflight: Arc<Inflight>,
    legacy: Arc<LegacyConn>,
    closing: CancellationToken,
    listener: Option<ListenerId>,
    listens: HashMap<RequestId, ListenerId>,
    /// The delivery of the request being handled, if it has its own.
    current: Option<Delivery>,
    /// Published at `initialize` for direct launches (see [`SessionView`]).
    view: Arc<ArcSwapOption<SessionView>>,
}

#[derive(Deserialize, Default)]
struct Head {
    #[serde(rename = "_meta", default)]
    meta: Option<RequestMeta>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct InitializeParams {
    protocol_version: String,
    #[serde(default)]
    capabilities: ClientCapabilities,
    #[serde(default)]
    client_info: Option<Implementation>,
}

#[derive(Deserialize)]
struct SetLevelParams {
    level: LoggingLevel,
}

#[derive(Deserialize)]
struct UriParams {
    uri: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct CancelledParams {
    request_id: RequestId,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct ListenFilter {
    #[serde(default)]
    tools_list_changed: Option<bool>,
    #[serde(default)]
    prompts_list_changed: Option<bool>,
    #[serde(default)]
    resources_list_changed: Option<bool>,
    #[serde(default)]
    resource_subscriptions: Option<Vec<String>>,
    /// Tasks extension: `notifications/tasks` for these ids (`tasksStatus` in an early
    /// draft of its schema).
    #[serde(default, alias = "tasksStatus")]
    task_ids: Option<Vec<String>>,
}

#[derive(Deserialize)]
struct ListenParams {
    #[serde(default)]
    notifications: ListenFilter,
}

/// Numbers connections, to scope the 2025-11-25 tasks of unauthenticated stdio connections.
static NEXT_CONNECTION: AtomicU64 = AtomicU64::new(1);

impl Actor for Connection {
    type Msg = ConnMsg;
    type State = ConnState;
    type Arguments = ConnectionArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<ConnMsg>,
        args: ConnectionArgs,
    ) -> Result<ConnState, ActorProcessingErr> {
        let closing = args.closing.clone();
        // 2025-11-25 tasks belong to the authenticated principal, else to the session (or
        // the stdio connection) that created them.
        let task_owner = match (&args.principal, &args.session_id) {
            (Some(p), _) => format!("legacy:{p}"),
            (None, Some(s)) => format!("legacy-session:{s}"),
            (None, None) => format!(
                "legacy-connection:{}",
                NEXT_CONNECTION.fetch_add(1, Ordering::Relaxed)
            ),
        };
        Ok(ConnState {
            legacy: Arc::new(LegacyConn {
                outbound: Outbound::new(args.core.limits.client_request_timeout),
                log_level: Default::default(),
                sink: args.sink.clone(),
                closing: closing.clone(),
                task_owner,
            }),
            caller: Arc::new(Caller {
                principal: args.principal.clone(),
                ..Caller::default()
            }),
            core: args.core,
            sink: args.sink,
            phase: Phase::Fresh,
            principal: args.principal,
            session_id: args.session_id,
            inflight: args.inflight,
            closing,
            listener: None,
            listens: HashMap::new(),
            current: None,
            view: args.view,
            queued: args.queued,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<ConnMsg>,
        msg: ConnMsg,
        state: &mut ConnState,
    ) -> Result<(), ActorProcessingErr> {
        let from_client = matches!(msg, ConnMsg::Inbound(..) | ConnMsg::Rejected(_));
        match msg {
            ConnMsg::Inbound(Incoming::Request(req), delivery) => {
                state.current = delivery;
                state.request(req);
                state.current = None;
            }
            ConnMsg::Inbound(Incoming::Notification(n), _) => state.notification(n),
            ConnMsg::Inbound(Incoming::Response(r), _) => {
                if !state.legacy.outbound.resolve(&r.id, Ok(r.result)) {
                    tracing::debug!(id = %r.id, "response to an unknown request ignored");
                }
            }
            ConnMsg::Inbound(Incoming::Error(e), _) => match e.id {
                Some(id) => {
                    state.legacy.outbound.resolve(&id, Err(e.error));
                }
                None => tracing::warn!(error = %e.error, "client reported an error"),
            },
            ConnMsg::Rejected(r) => {
                state
                    .sink
                    .send(jsonrpc::error_bytes(r.id.as_ref(), &r.error));
            }
            ConnMsg::Closed => myself.stop(Some("transport closed".into())),
        }
        if from_client {
            // Handled (synchronously, above): its effects (a log level, a cancellation, an
            // in-flight entry) are in place before a later request may skip the mailbox.
            state.queued.fetch_sub(1, Ordering::AcqRel);
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<ConnMsg>,
        state: &mut ConnState,
    ) -> Result<(), ActorProcessingErr> {
        state.closing.cancel();
        state.view.store(None);
        for token in state.inflight.table().values() {
            token.cancel();
        }
        state.legacy.outbound.fail_all();
        let bus = &state.core.routes().bus;
        for id in state.listener.iter().chain(state.listens.values()) {
            let _ = bus.cast(BusMsg::Unlisten(*id));
        }
        Ok(())
    }
}

impl ConnState {
    /// The sink of the request being handled.
    fn out(&self) -> Sink {
        match &self.current {
            Some(d) => d.sink.clone(),
            None => self.sink.clone(),
        }
    }

    #[allow(
        clippy::needless_pass_by_value,
        reason = "takes ownership: callers hand the value over and never use it again, so a borrow would only add noise at every call site"
    )]
    fn error(&self, id: &RequestId, e: ErrorObject) {
        self.out().send(jsonrpc::error_bytes(Some(id), &e));
    }

    fn ok<T: serde::Serialize>(&self, id: &RequestId, result: &T, modern: bool) {
        if let Ok(b) = jsonrpc::result_bytes(id, result, modern.then_some("complete")) {
            self.out().send(b);
        }
    }

    fn request(&mut self, req: Request) {
        let head: Head = match jsonrpc::params(req.params.as_deref()) {
            Ok(h) => h,
            Err(e) => return self.error(&req.id, e),
        };
        let meta = head.meta.unwrap_or_default();
        match meta.protocol_version.as_deref() {
            Some(v) => self.modern(req, v.to_owned(), meta),
            None => self.legacy(req, meta),
        }
    }

    fn legacy(&mut self, req: Request, meta: RequestMeta) {
        let method = req.method.as_str();
        match (&self.phase, method) {
            (_, "ping") => return self.ok(&req.id, &serde_json::json!({}), false),
            (_, method::INITIALIZE) => return self.initialize(req),
            (Phase::Fresh, m) if method::modern_only(m) => {
                return self.error(
                    &req.id,
                    ErrorObject::invalid_params(format!(
                        "`{m}` needs `_meta` with `{}` (protocol 2026-07-28)",
                        toolyard_proto::meta::PROTOCOL_VERSION
                    )),
                )
            }
            (Phase::Fresh, _) => {
                return self.error(
                    &req.id,
                    ErrorObject::invalid_params(format!(
                        "`{method}` before `initialize`: send `initialize` first (legacy), or \
                         put `{}` in `_meta` (protocol 2026-07-28)",
                        toolyard_proto::meta::PROTOCOL_VERSION
                    )),
                )
            }
            (Phase::Legacy(_), m) if method::modern_only(m) => {
                return self.error(&req.id, ErrorObject::method_not_found(m))
            }
            _ => {}
        }
        let Phase::Legacy(version) = self.phase else {
            return;
        };
        match method {
            method::LOGGING_SET_LEVEL => {
                match jsonrpc::params::<SetLevelParams>(req.params.as_deref()) {
                    Ok(p) => {
                        self.legacy.log_level.set(p.level);
                        self.ok(&req.id, &serde_json::json!({}), false)
                    }
                    Err(e) => self.error(&req.id, e),
                }
            }
            method::RESOURCES_SUBSCRIBE | method::RESOURCES_UNSUBSCRIBE => {
                match jsonrpc::params::<UriParams>(req.params.as_deref()) {
                    Ok(p) => {
                        let id = self.ensure_listener();
                        let msg = if method == method::RESOURCES_SUBSCRIBE {
                            BusMsg::Subscribe(id, p.uri)
                        } else {
                            BusMsg::Unsubscribe(id, p.uri)
                        };
                        let _ = self.core.routes().bus.cast(msg);
                        self.ok(&req.id, &serde_json::json!({}), false)
                    }
                    Err(e) => self.error(&req.id, e),
                }
            }
            _ => {
                let channel = Channel::Legacy {
                    conn: self.legacy.clone(),
                };
                self.dispatch(req, version, self.caller.clone(), channel, meta, false)
            }
        }
    }

    #[allow(
        clippy::needless_pass_by_value,
        reason = "takes ownership: callers hand the value over and never use it again, so a borrow would only add noise at every call site"
    )]
    fn initialize(&mut self, req: Request) {
        let p: InitializeParams = match jsonrpc::params(req.params.as_deref()) {
            Ok(p) => p,
            Err(e) => return self.error(&req.id, e),
        };
        let version = ProtocolVersion::negotiate_legacy(&p.protocol_version);
        self.caller = Arc::new(Caller {
            capabilities: p.capabilities,
            info: p.client_info,
            principal: self.principal.clone(),
        });
        self.phase = Phase::Legacy(version);
        self.ensure_listener();
        self.view.store(Some(Arc::new(SessionView {
            core: self.core.clone(),
            version,
            caller: self.caller.clone(),
            legacy: self.legacy.clone(),
            inflight: self.inflight.clone(),
            session_id: self.session_id.clone(),
        })));
        let mut capabilities = self.core.capabilities.clone();
        if version < ProtocolVersion::V2025_11_25 {
            // Tasks arrived in 2025-11-25.
            capabilities.tasks = None;
        }
        let result = InitializeResult {
            protocol_version: version.as_str().to_owned(),
            capabilities,
            server_info: self.core.info.clone(),
            instructions: self.core.instructions.clone(),
            result_type: None,
            meta: None,
        };
        self.ok(&req.id, &result, false)
    }

    /// A legacy connection listens for every list change it was promised in capabilities.
    fn ensure_listener(&mut self) -> ListenerId {
        if let Some(id) = self.listener {
            return id;
        }
        let id = next_listener_id();
        let caps = &self.core.capabilities;
        let filter = Filter {
            tools: caps.tools.as_ref().and_then(|c| c.list_changed) == Some(true),
            prompts: caps.prompts.as_ref().and_then(|c| c.list_changed) == Some(true),
            resources: caps.resources.as_ref().and_then(|c| c.list_changed) == Some(true),
            resource_uris: Default::default(),
            task_ids: Default::default(),
        };
        let _ = self.core.routes().bus.cast(BusMsg::Listen(
            id,
            Listener {
                sink: self.sink.clone(),
                filter,
                subscription_id: None,
                owner: None,
            },
        ));
        self.listener = Some(id);
        id
    }

    #[allow(
        clippy::needless_pass_by_value,
        reason = "takes ownership: callers hand the value over and never use it again, so a borrow would only add noise at every call site"
    )]
    fn modern(&mut self, req: Request, requested: String, meta: RequestMeta) {
        let version = match gate::modern(&req.method, &requested, &meta) {
            Ok(v) => v,
            Err(e) => return self.error(&req.id, e.to_error()),
        };
        match req.method.as_str() {
            method::SERVER_DISCOVER => {
                return self.ok(&req.id, &crate::route::discover(&self.core), true);
            }
            method::SUBSCRIPTIONS_LISTEN => return self.listen(req, &meta),
            _ => {}
        }
        let caller = Arc::new(Caller {
            capabilities: meta.client_capabilities.clone().unwrap_or_default(),
            info: meta.client_info.clone(),
            principal: self
                .current
                .as_ref()
                .and_then(|d| d.principal.clone())
                .or_else(|| self.principal.clone()),
        });
        let channel = Channel::Modern {
            log_level: meta.log_level,
            round: Mutex::new(Round::default()),
        };
        self.dispatch(req, version, caller, channel, meta, true)
    }

    fn listen(&mut self, req: Request, meta: &RequestMeta) {
        let p: ListenParams = match jsonrpc::params(req.params.as_deref()) {
            Ok(p) => p,
            Err(e) => return self.error(&req.id, e),
        };
        let f = p.notifications;
        let asked_tasks = f.task_ids.as_ref().is_some_and(|ids| !ids.is_empty());
        if asked_tasks
            && self.core.tasks.is_some()
            && !meta
                .client_capabilities
                .as_ref()
                .is_some_and(crate::tasks::declares_extension)
        {
            return self.error(&req.id, crate::tasks::missing_extension());
        }
        // Task status notifications are agreed to when the server has tasks at all; a task
        // id that is unknown (or not the caller's) simply never produces one.
        let task_ids: Vec<String> = match (&self.core.tasks, f.task_ids.as_ref()) {
            (Some(_), Some(ids)) => ids.clone(),
            _ => Vec::new(),
        };
        let subscription_id = match &req.id {
            RequestId::String(s) => s.to_string(),
            RequestId::Number(n) => n.to_string(),
        };
        let mut ack = serde_json::json!({
            "_meta": { toolyard_proto::meta::SUBSCRIPTION_ID: subscription_id },
            "notifications": {
                "toolsListChanged": f.tools_list_changed.unwrap_or(false),
                "promptsListChanged": f.prompts_list_changed.unwrap_or(false),
                "resourcesListChanged": f.resources_list_changed.unwrap_or(false),
                "resourceSubscriptions": f.resource_subscriptions.clone().unwrap_or_default(),
            }
        });
        if f.task_ids.is_some() {
            ack["notifications"]["taskIds"] = serde_json::json!(task_ids);
        }
        // Acknowledge first, then register: nothing is delivered before the ack.
        let out = self.out();
        if let Ok(b) = jsonrpc::notification_bytes("notifications/subscriptions/acknowledged", &ack)
        {
            out.send(b);
        }
        let id = next_listener_id();
        let _ = self.core.routes().bus.cast(BusMsg::Listen(
            id,
            Listener {
                sink: out,
                filter: Filter {
                    tools: f.tools_list_changed.unwrap_or(false),
                    prompts: f.prompts_list_changed.unwrap_or(false),
                    resources: f.resources_list_changed.unwrap_or(false),
                    resource_uris: f
                        .resource_subscriptions
                        .unwrap_or_default()
                        .into_iter()
                        .collect(),
                    task_ids: task_ids.into_iter().collect(),
                },
                subscription_id: Some(subscription_id),
                // It hears only of its caller's tasks.
                owner: self
                    .current
                    .as_ref()
                    .and_then(|d| d.principal.clone())
                    .or_else(|| self.principal.clone()),
            },
        ));
        self.listens.insert(req.id, id);
    }

    #[allow(
        clippy::needless_pass_by_value,
        reason = "takes ownership: callers hand the value over and never use it again, so a borrow would only add noise at every call site"
    )]
    fn notification(&mut self, n: Notification) {
        match n.method.as_str() {
            "notifications/cancelled" => {
                if let Ok(p) = jsonrpc::params::<CancelledParams>(n.params.as_deref()) {
                    if let Some(token) = self.inflight.table().get(&p.request_id) {
                        token.cancel();
                    }
                    // Ending a listen stream: forget the listener; it gets no response.
                    if let Some(l) = self.listens.remove(&p.request_id) {
                        let _ = self.core.routes().bus.cast(BusMsg::Unlisten(l));
                    }
                }
            }
            "notifications/initialized" | "notifications/roots/list_changed" => {}
            other => tracing::debug!(method = other, "notification ignored"),
        }
    }

    fn dispatch(
        &mut self,
        req: Request,
        version: ProtocolVersion,
        caller: Arc<Caller>,
        channel: Channel,
        meta: RequestMeta,
        modern: bool,
    ) {
        let limits = &self.core.limits;
        let track = self.current.as_ref().is_none_or(|d| d.track);
        let cancel = if !track {
            // Sessionless: the response stream's token is the only way to cancel.
            self.current
                .as_ref()
                .map(|d| d.cancel.clone())
                .unwrap_or_default()
        } else {
            let mut table = self.inflight.table();
            if table.contains_key(&req.id) {
                drop(table);
                return self.error(
                    &req.id,
                    ErrorObject::invalid_request(format!(
                        "request id {} is already in flight on this connection",
                        req.id
                    )),
                );
            }
            if table.len() >= limits.max_in_flight {
                drop(table);
                return self.error(
                    &req.id,
                    ErrorObject::new(
                        toolyard_proto::error::code::INTERNAL_ERROR,
                        format!(
                            "server busy: {} requests already in flight on this connection",
                            limits.max_in_flight
                        ),
                    ),
                );
            }
            // Over HTTP the response stream's token is the request's token, so closing the
            // stream cancels the request; the connection closing cancels every token in the
            // table (post_stop).
            let token = match &self.current {
                Some(d) => d.cancel.clone(),
                None => self.closing.child_token(),
            };
            table.insert(req.id.clone(), token.clone());
            token
        };
        let release = track.then(|| self.inflight.clone());
        launch(
            &self.core,
            Launch {
                req,
                call: None,
                version,
                caller,
                channel,
                meta: LaunchMeta::from_meta(meta),
                modern,
                out: self.out(),
                cancel,
                session_id: self.session_id.clone(),
                release,
            },
        );
    }
}

/// The parts of a request's `_meta` a running request still needs.
pub(crate) struct LaunchMeta {
    pub(crate) progress_token: Option<ProgressToken>,
    pub(crate) traceparent: Option<String>,
}

impl LaunchMeta {
    /// What an edge read of `_meta` leaves for the context.
    fn of(meta: Option<Box<RequestMeta>>) -> Option<Box<LaunchMeta>> {
        meta.and_then(|m| Self::from_meta(*m))
    }

    /// `None` when the request has neither (the usual case: no allocation).
    fn from_meta(meta: RequestMeta) -> Option<Box<LaunchMeta>> {
        if meta.progress_token.is_none() && meta.traceparent.is_none() {
            return None;
        }
        Some(Box::new(LaunchMeta {
            progress_token: meta.progress_token,
            traceparent: meta.traceparent,
        }))
    }
}

/// A request that passed its connection's (or the HTTP edge's) checks, ready to run.
pub(crate) struct Launch {
    pub(crate) req: Request,
    /// `tools/call` params already read at the edge (then `req.params` is not read again).
    pub(crate) call: Option<CallParams>,
    pub(crate) version: ProtocolVersion,
    pub(crate) caller: Arc<Caller>,
    pub(crate) channel: Channel,
    /// What the request's context keeps of its `_meta` (the rest was read at the edge):
    /// boxed, so the launch stays small to move.
    pub(crate) meta: Option<Box<LaunchMeta>>,
    pub(crate) modern: bool,
    pub(crate) out: Sink,
    pub(crate) cancel: CancellationToken,
    pub(crate) session_id: Option<Arc<str>>,
    pub(crate) release: Option<Arc<Inflight>>,
}

/// Runs the layers' start hooks, builds the request's context and answer channel, and casts
/// the request to its handler.
pub(crate) fn launch(core: &ServerCore, l: Launch) {
    let Launch {
        req,
        call,
        version,
        caller,
        channel,
        meta,
        modern,
        out,
        cancel,
        session_id,
        release,
    } = l;
    let watch = if core.layers.is_empty() {
        None
    } else {
        let info = RequestInfo {
            method: req.method.as_str().into(),
            target: None,
            id: req.id.clone(),
            protocol_version: Some(version),
            session_id: session_id.clone(),
            principal: caller.principal.clone(),
            traceparent: meta
                .as_ref()
                .and_then(|m| m.traceparent.as_deref())
                .map(Into::into),
            started: Instant::now(),
        };
        match core.layers.start(&info) {
            Ok(completions) => Some(Watch { info, completions }),
            Err(e) => {
                if let Some(r) = &release {
                    r.release(&req.id);
                }
                out.send(jsonrpc::error_bytes(Some(&req.id), &e));
                return;
            }
        }
    };
    let mut reply = Reply::new(req.id.clone(), out.clone(), modern).with_watch(watch);
    if let Some(r) = release {
        reply = reply.with_release(r);
    }
    let ctx = RequestContext {
        inner: Arc::new(ContextInner {
            id: req.id,
            version,
            caller,
            cancel,
            progress_token: meta.and_then(|m| m.progress_token),
            sink: out,
            channel,
            session_id,
            task: None,
        }),
    };
    match call {
        Some(params) => crate::handlers::tools::call(core.call_site(), params, ctx, reply),
        None => route(core, &core.routes(), &req.method, req.params, ctx, reply),
    }
}

/// Serves a modern request without a connection actor (sessionless HTTP): the edge already
/// checked `_meta`; `server/discover` is answered here; `subscriptions/listen` needs a
/// connection (its listener table) and is refused with -32603 if it arrives here.
pub(crate) fn serve_stateless(core: &ServerCore, req: Request, meta: RequestMeta, d: Delivery) {
    let fail = |e: ErrorObject| {
        d.sink.send(jsonrpc::error_bytes(Some(&req.id), &e));
    };
    let requested = meta.protocol_version.as_deref().unwrap_or_default();
    let version = match gate::modern(&req.method, requested, &meta) {
        Ok(v) => v,
        Err(e) => return fail(e.to_error()),
    };
    match req.method.as_str() {
        method::SERVER_DISCOVER => {
            if let Ok(b) =
                jsonrpc::result_bytes(&req.id, &crate::route::discover(core), Some("complete"))
            {
                d.sink.send(b);
            }
            return;
        }
        method::SUBSCRIPTIONS_LISTEN => {
            return fail(ErrorObject::internal(
                "subscriptions/listen needs a connection",
            ))
        }
        _ => {}
    }
    let caller = Arc::new(Caller {
        capabilities: meta.client_capabilities.clone().unwrap_or_default(),
        info: meta.client_info.clone(),
        principal: d.principal.clone(),
    });
    let channel = Channel::Modern {
        log_level: meta.log_level,
        round: Mutex::new(Round::default()),
    };
    launch(
        core,
        Launch {
            req,
            call: None,
            version,
            caller,
            channel,
            meta: LaunchMeta::from_meta(meta),
            modern: true,
            out: d.sink,
            cancel: d.cancel,
            session_id: None,
            release: None,
        },
    );
}
