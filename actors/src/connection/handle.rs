//! [`ConnectionHandle`]: what a transport holds to feed a connection. It parses each message
//! once and launches ordinary requests directly (see `direct`) when nothing from the client
//! still waits in the actor's mailbox, so a request never overtakes an earlier message.

use crate::middleware::TransportTrace;
use crate::sink::Sink;
use arc_swap::ArcSwapOption;
use ractor::ActorRef;
use std::sync::Arc;
use toolyard_proto::jsonrpc::{self, Incoming, Request};

use super::direct::{launch_direct, DirectModern, SessionView};
use super::{ConnMsg, Delivery};

/// Feeds one connection.
#[derive(Clone)]
pub struct ConnectionHandle {
    actor: ActorRef<ConnMsg>,
    view: Arc<ArcSwapOption<SessionView>>,
    /// For direct launches of modern requests.
    direct: Arc<DirectModern>,
    /// The connection's own sink: where directly launched requests answer.
    sink: Sink,
    /// Client messages the actor has not handled yet; see `ConnState::queued`.
    queued: Arc<std::sync::atomic::AtomicUsize>,
}

impl std::fmt::Debug for ConnectionHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionHandle").finish()
    }
}

impl ConnectionHandle {
    pub(crate) fn new(
        actor: ActorRef<ConnMsg>,
        view: Arc<ArcSwapOption<SessionView>>,
        direct: Arc<DirectModern>,
        sink: Sink,
        queued: Arc<std::sync::atomic::AtomicUsize>,
    ) -> Self {
        ConnectionHandle {
            actor,
            view,
            direct,
            sink,
            queued,
        }
    }

    /// Parses one message from the client and hands it to the connection. An ordinary
    /// request (a modern one, or one of an initialized legacy session) is launched straight
    /// to its handler (its answer goes to the connection's sink) when nothing from the client
    /// still waits in the connection's mailbox, so it never overtakes an earlier message;
    /// everything else goes through the connection, in order.
    pub fn receive(&self, bytes: &[u8]) {
        let msg = match jsonrpc::parse(bytes) {
            Ok(Incoming::Request(req))
                if self.queued.load(std::sync::atomic::Ordering::Acquire) == 0 =>
            {
                let delivery = Delivery {
                    sink: self.sink.clone(),
                    cancel: tokio_util::sync::CancellationToken::new(),
                    track: true,
                    principal: None,
                    peer: None,
                    transport_trace: None,
                };
                let view = self.view.load();
                match launch_direct(&self.direct, view.as_deref(), req, delivery) {
                    Ok(()) => return,
                    Err((req, _)) => ConnMsg::Inbound(Incoming::Request(req), None),
                }
            }
            Ok(m) => ConnMsg::Inbound(m, None),
            Err(r) => ConnMsg::Rejected(r),
        };
        self.cast_from_client(msg);
    }

    /// Casts a client message to the connection, counted until the actor has handled it.
    fn cast_from_client(&self, msg: ConnMsg) -> bool {
        use std::sync::atomic::Ordering;
        self.queued.fetch_add(1, Ordering::AcqRel);
        let sent = self.actor.cast(msg).is_ok();
        if !sent {
            self.queued.fetch_sub(1, Ordering::AcqRel);
        }
        sent
    }

    /// [`deliver`](Self::deliver) for a transport whose requests carry trace headers of
    /// their own but answer on the connection's sink (HTTP+SSE's POSTs): a request with
    /// `transport_trace` is delivered with it.
    pub fn deliver_with_trace(
        &self,
        message: Incoming,
        transport_trace: Option<Arc<TransportTrace>>,
    ) -> bool {
        let delivery = match (&message, transport_trace) {
            (Incoming::Request(_), Some(trace)) => Some(Delivery {
                sink: self.sink.clone(),
                cancel: tokio_util::sync::CancellationToken::new(),
                track: true,
                principal: None,
                peer: None,
                transport_trace: Some(trace),
            }),
            _ => None,
        };
        self.deliver(message, delivery)
    }

    /// Hands an already parsed message to the connection; a request's answer and
    /// notifications go to `delivery` (an HTTP response stream) instead of the connection's
    /// sink. Returns false when the connection is gone.
    pub fn deliver(&self, message: Incoming, delivery: Option<Delivery>) -> bool {
        self.cast_from_client(ConnMsg::Inbound(message, delivery))
    }

    /// Hands a request to the connection, launching it directly when the connection is an
    /// initialized legacy session and the request is an ordinary one (no hop through the
    /// connection actor); otherwise like [`ConnectionHandle::deliver`]. Returns false when
    /// the connection is gone.
    pub fn deliver_request(&self, request: Request, delivery: Delivery) -> bool {
        let (request, delivery) = match self.view.load().as_ref() {
            Some(view) => match view.launch(request, delivery) {
                Ok(()) => return true,
                Err(back) => back,
            },
            None => (request, delivery),
        };
        self.deliver(Incoming::Request(request), Some(delivery))
    }

    /// True while the connection actor runs.
    pub fn is_alive(&self) -> bool {
        matches!(
            self.actor.get_status(),
            ractor::ActorStatus::Running
                | ractor::ActorStatus::Starting
                | ractor::ActorStatus::Upgrading
        )
    }

    /// Answers a message that could not even be read (e.g. over the size limit).
    pub fn reject(&self, error: toolyard_proto::ErrorObject) {
        self.cast_from_client(ConnMsg::Rejected(jsonrpc::Rejected { id: None, error }));
    }

    /// The transport closed: cancels in-flight calls and stops the connection.
    pub fn close(&self) {
        let _ = self.actor.cast(ConnMsg::Closed);
    }
}
