//! The Connection actor: one per stdio or in-memory connection (and per legacy HTTP session).
//!
//! It owns what lives as long as the connection: the legacy lifecycle (nothing but
//! `initialize` and `ping` before `initialize`), the negotiated version, the caller's
//! capabilities, the log level, resource subscriptions, the in-flight table that cancellation
//! looks requests up in, and the pending replies of requests we sent to the client. A request
//! that reaches the actor is checked here (the gate, the lifecycle) and launched
//! (`launch`) with a [`Reply`](crate::reply::Reply) that writes to the connection's sink;
//! ordinary requests usually skip the actor (`direct`). `handle` is what transports hold,
//! `inflight` the table of running requests.

mod direct;
mod handle;
mod inflight;
mod launch;
mod subscribe;

pub(crate) use direct::{DirectModern, SessionView};
pub use handle::ConnectionHandle;
pub(crate) use inflight::Inflight;
pub use launch::Delivery;
pub(crate) use launch::{launch, serve_stateless, Launch, LaunchMeta};

use crate::context::{Caller, Channel, LegacyConn, Round};
use crate::event_bus::{next_listener_id, BusMsg, Filter, Listener, ListenerId, UpdateGate};
use crate::gate;
use crate::outbound::Outbound;
use crate::server::ServerCore;
use crate::sink::Sink;
use arc_swap::ArcSwapOption;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use serde::Deserialize;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;
use toolyard_proto::jsonrpc::{self, Incoming, Notification, Rejected, Request};
use toolyard_proto::method;
use toolyard_proto::{
    ClientCapabilities, ErrorObject, Implementation, InitializeResult, LoggingLevel,
    ProtocolVersion, RequestId, RequestMeta,
};

/// Messages of a Connection.
#[derive(Debug)]
pub(crate) enum ConnMsg {
    /// A parsed message from the client, with its own delivery for requests over HTTP.
    Inbound(Incoming, Option<Delivery>),
    /// A message that failed to parse; answer with its error.
    Rejected(Rejected),
    /// The transport closed: cancel everything and stop.
    Closed,
    /// The subscription checks of a `subscriptions/listen` finished (see `subscribe`).
    Listened(Box<PendingListen>, Option<Result<(), ErrorObject>>),
}

/// A `subscriptions/listen` that passed its own checks, waiting for its URIs' subscription
/// checks before it is acknowledged and registered.
#[derive(Debug)]
pub(crate) struct PendingListen {
    id: RequestId,
    subscription_id: String,
    filter: ListenFilter,
    task_ids: Vec<String>,
    out: Sink,
    owner: Option<Arc<str>>,
}

pub(crate) struct Connection;

/// What the connection needs to start.
pub(crate) struct ConnectionArgs {
    pub(crate) core: Arc<ServerCore>,
    pub(crate) sink: Sink,
    pub(crate) session_id: Option<Arc<str>>,
    pub(crate) principal: Option<Arc<str>>,
    pub(crate) peer: Option<Arc<crate::middleware::Peer>>,
    pub(crate) view: Arc<ArcSwapOption<SessionView>>,
    /// Messages cast to the actor and not yet handled (see [`ConnState::queued`]).
    pub(crate) queued: Arc<AtomicUsize>,
    /// Shared with the handle for direct launches.
    pub(crate) inflight: Arc<Inflight>,
    /// Cancelled when the connection stops.
    pub(crate) closing: CancellationToken,
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
    peer: Option<Arc<crate::middleware::Peer>>,
    /// When `initialize` was answered (the legacy session's start).
    initialized_at: Option<std::time::Instant>,
    session_id: Option<Arc<str>>,
    inflight: Arc<Inflight>,
    legacy: Arc<LegacyConn>,
    closing: CancellationToken,
    listener: Option<ListenerId>,
    listens: HashMap<RequestId, ListenerId>,
    /// Listens whose URIs are being checked, with the token that stops their checks.
    checking: HashMap<RequestId, CancellationToken>,
    /// The legacy listener's subscriptions, as recorded on the bus.
    subscribed: subscribe::Subscribed,
    /// Legacy subscription changes still running in tasks: later ones wait for them.
    chain: subscribe::Chain,
    /// This actor, for the tasks that check a listen's URIs to report back to.
    myself: ActorRef<ConnMsg>,
    /// The delivery of the request being handled, if it has its own.
    current: Option<Delivery>,
    /// Published at `initialize` for direct launches (see [`SessionView`]).
    view: Arc<ArcSwapOption<SessionView>>,
}

#[derive(Deserialize, Default)]
pub(super) struct MetaOnly {
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

#[derive(Deserialize, Default, Debug)]
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
        myself: ActorRef<ConnMsg>,
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
                roots_generation: crate::context::next_roots_generation().into(),
            }),
            caller: Arc::new(Caller {
                principal: args.principal.clone(),
                peer: args.peer.clone(),
                ..Caller::default()
            }),
            core: args.core,
            sink: args.sink,
            phase: Phase::Fresh,
            principal: args.principal,
            peer: args.peer,
            initialized_at: None,
            session_id: args.session_id,
            inflight: args.inflight,
            closing,
            listener: None,
            listens: HashMap::new(),
            checking: HashMap::new(),
            subscribed: Default::default(),
            chain: Default::default(),
            myself,
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
            ConnMsg::Listened(pending, verdict) => {
                // Cancelled while its URIs were checked: it was never acknowledged.
                if state.checking.remove(&pending.id).is_some() {
                    match verdict {
                        Some(Ok(())) => state.open_listen(*pending),
                        Some(Err(e)) => {
                            pending
                                .out
                                .send(jsonrpc::error_bytes(Some(&pending.id), &e));
                        }
                        None => {}
                    }
                }
            }
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
        for token in state.checking.values() {
            token.cancel();
        }
        if let (Phase::Legacy(version), Some(started)) = (&state.phase, state.initialized_at) {
            if !state.core.layers.is_empty() {
                state
                    .core
                    .layers
                    .session_ended(&crate::middleware::SessionInfo {
                        session_id: state.session_id.clone(),
                        protocol_version: *version,
                        peer: state.peer.clone(),
                        started,
                    });
            }
        }
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
        let head: MetaOnly = match jsonrpc::params(req.params.as_deref()) {
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
                    Ok(p) => self.subscription(
                        req.id,
                        method == method::RESOURCES_SUBSCRIBE,
                        p.uri,
                        version,
                    ),
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
            peer: self.peer.clone(),
            task_role: crate::context::TaskRole::Own,
        });
        self.phase = Phase::Legacy(version);
        self.initialized_at = Some(std::time::Instant::now());
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
        let update_gate = match &self.phase {
            Phase::Legacy(version) => Some(self.update_gate(id, *version)),
            Phase::Fresh => None,
        };
        let _ = self.core.routes().bus.cast(BusMsg::Listen(
            id,
            Listener {
                sink: self.sink.clone(),
                filter,
                subscription_id: None,
                owner: None,
                principal: self.principal.clone(),
                update_gate,
            },
        ));
        self.listener = Some(id);
        id
    }

    /// A resource update for this connection passes its subscription's check again first
    /// (in a task), when its provider has one: a subscription made while a file was missing
    /// must not hear of a file outside the client's roots that a symlink put there later.
    /// A refused update drops the subscription.
    fn update_gate(&self, listener: ListenerId, version: ProtocolVersion) -> UpdateGate {
        let core = self.core.clone();
        let sink = self.sink.clone();
        let caller = self.caller.clone();
        let legacy = self.legacy.clone();
        let session_id = self.session_id.clone();
        let closing = self.closing.clone();
        let subscribed = self.subscribed.clone();
        Arc::new(move |uri: &str, bytes: Vec<u8>| {
            let Some(check) = core.subscribe_check(uri) else {
                sink.send(bytes);
                return;
            };
            let ctx = subscribe::context(
                RequestId::String("resources/updated".into()),
                version,
                caller.clone(),
                Channel::Legacy {
                    conn: legacy.clone(),
                },
                sink.clone(),
                closing.child_token(),
                session_id.clone(),
            );
            let (sink, closing, subscribed) = (sink.clone(), closing.clone(), subscribed.clone());
            let bus = core.routes().bus.clone();
            let uri = uri.to_owned();
            tokio::spawn(async move {
                match subscribe::run(vec![check], ctx, &closing).await {
                    Some(Ok(())) => {
                        sink.send(bytes);
                    }
                    Some(Err(e)) => {
                        tracing::debug!(uri = %uri, error = %e.message, "update withheld and subscription dropped: its check now refuses it");
                        subscribed.record(&bus, listener, false, uri);
                    }
                    None => {}
                }
            });
        })
    }

    /// A legacy `resources/subscribe` (or `unsubscribe`). A subscription whose resource's
    /// provider checks it waits for the check in a task, and counts only if it passes; while
    /// one does, the connection's later changes wait behind it, so they take effect in the
    /// order they came.
    fn subscription(
        &mut self,
        id: RequestId,
        subscribe: bool,
        uri: String,
        version: ProtocolVersion,
    ) {
        let listener = self.ensure_listener();
        let check = if subscribe {
            self.core.subscribe_check(&uri)
        } else {
            None
        };
        let bus = self.core.routes().bus.clone();
        if check.is_none() && !self.chain.busy() {
            self.subscribed.record(&bus, listener, subscribe, uri);
            return self.ok(&id, &serde_json::json!({}), false);
        }
        let out = self.out();
        let cancel = match &self.current {
            Some(d) => d.cancel.clone(),
            None => self.closing.child_token(),
        };
        let ctx = check
            .is_some()
            .then(|| self.check_context(id.clone(), version, cancel, out.clone()));
        let (before, done) = self.chain.link();
        let (subscribed, closing) = (self.subscribed.clone(), self.closing.clone());
        tokio::spawn(async move {
            let _done = done;
            subscribe::after(before).await;
            if let (Some(check), Some(ctx)) = (check, ctx) {
                match subscribe::run(vec![check], ctx, &closing).await {
                    Some(Ok(())) => {}
                    Some(Err(e)) => {
                        out.send(jsonrpc::error_bytes(Some(&id), &e));
                        return;
                    }
                    None => return,
                }
            }
            subscribed.record(&bus, listener, subscribe, uri);
            if let Ok(b) = jsonrpc::result_bytes(&id, &serde_json::json!({}), None) {
                out.send(b);
            }
        });
    }

    /// The context a legacy subscription check runs in: the connection's, so the check can
    /// ask the client for its roots.
    fn check_context(
        &self,
        id: RequestId,
        version: ProtocolVersion,
        cancel: CancellationToken,
        sink: Sink,
    ) -> crate::context::RequestContext {
        subscribe::context(
            id,
            version,
            self.caller.clone(),
            Channel::Legacy {
                conn: self.legacy.clone(),
            },
            sink,
            cancel,
            self.session_id.clone(),
        )
    }

    /// The client's roots changed: its subscriptions are checked again (chained after the
    /// changes in flight), and those their provider now refuses are dropped, so a narrowed
    /// client stops hearing of resources it may no longer read.
    fn recheck_subscriptions(&mut self) {
        let (Phase::Legacy(version), Some(listener)) = (&self.phase, self.listener) else {
            return;
        };
        if self.subscribed.is_empty() {
            return;
        }
        let version = *version;
        // The connection's own sink: no request of the client is being answered.
        let ctx = self.check_context(
            RequestId::String("roots/list_changed".into()),
            version,
            self.closing.child_token(),
            self.sink.clone(),
        );
        let bus = self.core.routes().bus.clone();
        let (before, done) = self.chain.link();
        let (subscribed, closing, core) = (
            self.subscribed.clone(),
            self.closing.clone(),
            self.core.clone(),
        );
        tokio::spawn(async move {
            let _done = done;
            subscribe::after(before).await;
            for uri in subscribed.snapshot() {
                let Some(check) = core.subscribe_check(&uri) else {
                    continue;
                };
                match subscribe::run(vec![check], ctx.clone(), &closing).await {
                    Some(Ok(())) => {}
                    Some(Err(e)) => {
                        tracing::debug!(uri = %uri, error = %e.message, "subscription dropped: refused after the client's roots changed");
                        subscribed.record(&bus, listener, false, uri);
                    }
                    None => return,
                }
            }
        });
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
            method::SUBSCRIPTIONS_LISTEN => return self.listen(req, version, &meta),
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
            peer: self
                .current
                .as_ref()
                .and_then(|d| d.peer.clone())
                .or_else(|| self.peer.clone()),
            task_role: crate::context::TaskRole::Own,
        });
        let channel = Channel::Modern {
            log_level: meta.log_level,
            round: Mutex::new(Round::default()),
        };
        self.dispatch(req, version, caller, channel, meta, true)
    }

    fn listen(&mut self, req: Request, version: ProtocolVersion, meta: &RequestMeta) {
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
        let owner = self
            .current
            .as_ref()
            .and_then(|d| d.principal.clone())
            .or_else(|| self.principal.clone());
        let checks: Vec<subscribe::Check> = f
            .resource_subscriptions
            .iter()
            .flatten()
            .filter_map(|uri| self.core.subscribe_check(uri))
            .collect();
        let pending = PendingListen {
            id: req.id,
            subscription_id,
            filter: f,
            task_ids,
            out: self.out(),
            owner,
        };
        if checks.is_empty() {
            return self.open_listen(pending);
        }
        // Its URIs' providers check them first, in a task (a check may take its time); the
        // task reports back (`ConnMsg::Listened`), so a cancellation meanwhile is seen here.
        let cancel = match &self.current {
            Some(d) => d.cancel.clone(),
            None => self.closing.child_token(),
        };
        let caller = Arc::new(Caller {
            capabilities: meta.client_capabilities.clone().unwrap_or_default(),
            info: meta.client_info.clone(),
            principal: pending.owner.clone(),
            peer: self
                .current
                .as_ref()
                .and_then(|d| d.peer.clone())
                .or_else(|| self.peer.clone()),
            task_role: crate::context::TaskRole::Own,
        });
        let ctx = subscribe::context(
            pending.id.clone(),
            version,
            caller,
            Channel::Modern {
                log_level: meta.log_level,
                round: Mutex::new(Round::default()),
            },
            pending.out.clone(),
            cancel.clone(),
            None,
        );
        self.checking.insert(pending.id.clone(), cancel);
        let (myself, closing) = (self.myself.clone(), self.closing.clone());
        tokio::spawn(async move {
            let verdict = subscribe::run(checks, ctx, &closing).await;
            let _ = myself.cast(ConnMsg::Listened(Box::new(pending), verdict));
        });
    }

    /// Acknowledges a listen and registers its listener.
    fn open_listen(&mut self, pending: PendingListen) {
        let PendingListen {
            id: request_id,
            subscription_id,
            filter: f,
            task_ids,
            out,
            owner,
        } = pending;
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
                update_gate: None,
                subscription_id: Some(subscription_id),
                // It hears only of its caller's tasks, and of list changes that concern it.
                principal: owner.clone(),
                owner,
            },
        ));
        self.listens.insert(request_id, id);
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
                    // Or one still being checked: it is never acknowledged.
                    if let Some(token) = self.checking.remove(&p.request_id) {
                        token.cancel();
                    }
                }
            }
            "notifications/roots/list_changed" => {
                self.legacy
                    .roots_generation
                    .store(crate::context::next_roots_generation(), Ordering::Relaxed);
                self.recheck_subscriptions();
            }
            "notifications/initialized" => {}
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
                transport_trace: self
                    .current
                    .as_ref()
                    .and_then(|d| d.transport_trace.clone()),
            },
        );
    }
}
