//! Launching a request without a hop through the connection actor: the ordinary requests of
//! an initialized legacy session (through the [`SessionView`] the connection publishes at
//! `initialize`) and modern requests of a stdio or in-memory connection (their version and
//! capabilities travel in `_meta`). What the direct launch refuses goes to the actor, which
//! answers it.

use crate::context::{Caller, Channel, LegacyConn, Round};
use crate::gate;
use crate::handlers::tools::CallParams;
use crate::server::ServerCore;
use std::sync::{Arc, Mutex};
use tokio_util::sync::CancellationToken;
use toolyard_proto::jsonrpc::{self, Request};
use toolyard_proto::method;
use toolyard_proto::{ProtocolVersion, RequestMeta};

use super::inflight::Inflight;
use super::launch::{launch, Launch, LaunchMeta};
use super::{Delivery, MetaOnly};

/// What a request of an initialized legacy connection needs, published once `initialize`
/// is handled, so a transport can launch such requests without a hop through the
/// connection actor (HTTP sessions under concurrent load). The connection stays the owner:
/// lifecycle methods, notifications and anything unusual still go through it.
pub(crate) struct SessionView {
    pub(super) core: Arc<ServerCore>,
    pub(super) version: ProtocolVersion,
    pub(super) caller: Arc<Caller>,
    pub(super) legacy: Arc<LegacyConn>,
    pub(super) inflight: Arc<Inflight>,
    pub(super) session_id: Option<Arc<str>>,
}

/// What [`launch_direct`] and [`SessionView::launch`] hand back: the request, whole, for the
/// connection actor. Not boxed: it is moved once on the unusual path, where a box would add an
/// allocation.
type HandedBack = (Request, Delivery);

impl SessionView {
    /// Launches `req` if it is an ordinary legacy request; gives it back otherwise.
    #[allow(clippy::result_large_err, reason = "see `HandedBack`")]
    pub(crate) fn launch(&self, req: Request, d: Delivery) -> Result<(), HandedBack> {
        if !method::handled(&req.method) {
            return Err((req, d));
        }
        match Edge::read(&req) {
            Some(edge) if edge.version().is_none() => self.launch_legacy(req, edge, d),
            _ => Err((req, d)),
        }
    }

    #[allow(clippy::result_large_err, reason = "see `HandedBack`")]
    fn launch_legacy(&self, req: Request, edge: Edge, d: Delivery) -> Result<(), HandedBack> {
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
                transport_trace: d.transport_trace,
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
    pub(crate) peer: Option<Arc<crate::middleware::Peer>>,
}

/// Launches an ordinary request of either generation straight to its handler, or gives it
/// back for the connection actor (anything unusual: lifecycle methods, `_meta` problems,
/// duplicate ids, a legacy request before `initialize`), which answers it as before.
#[allow(clippy::result_large_err, reason = "see `HandedBack`")]
pub(crate) fn launch_direct(
    direct: &DirectModern,
    view: Option<&SessionView>,
    req: Request,
    d: Delivery,
) -> Result<(), HandedBack> {
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
        peer: d.peer.clone().or_else(|| direct.peer.clone()),
        task_role: crate::context::TaskRole::Own,
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
            transport_trace: d.transport_trace,
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

    /// `None` when the params do not parse or are not an object (`jsonrpc::params` refuses
    /// those): the connection actor answers with the error.
    fn read(req: &Request) -> Option<Edge> {
        if req.method == method::TOOLS_CALL {
            let mut call: CallParams = jsonrpc::params(req.params.as_deref()).ok()?;
            Some(Edge {
                meta: call.meta.take(),
                call: Some(call),
            })
        } else {
            let head: MetaOnly = jsonrpc::params(req.params.as_deref()).ok()?;
            Some(Edge {
                meta: head.meta.map(Box::new),
                call: None,
            })
        }
    }
}
