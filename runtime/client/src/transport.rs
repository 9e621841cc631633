//! The seam between a [`Client`](super::Client) and the bytes: a transport moves whole
//! JSON-RPC messages and knows nothing of MCP beyond what its wire needs (HTTP headers,
//! sessions, stream resumption).
//!
//! A transport is started once with an [`EventSink`] for what it receives, and hands back a
//! [`TransportLink`] the client writes through (callers write their requests themselves).
//! Everything a transport learns after that (a message, a request that failed on the wire,
//! the end of the connection) arrives as a [`TransportEvent`], in order, through that sink,
//! which hands a response straight to its waiting caller (the pending table, `pending.rs`)
//! and the rest to the client actor's mailbox (no forwarding task). A transport never
//! answers a request itself, it only reports what happened to it.

use super::actor::ClientMsg;
use super::pending::{Delivered, PendingTable};
use ractor::ActorRef;
use std::sync::{Arc, OnceLock};
use tokio::sync::mpsc;
use toolyard_proto::BoxFuture;
use toolyard_proto::RequestId;

/// One outgoing JSON-RPC message, serialized, with what a transport may need to route it.
#[derive(Debug, Clone)]
pub struct OutboundMessage {
    /// The message, serialized (no trailing newline).
    pub body: Vec<u8>,
    /// What the message is.
    pub kind: OutboundKind,
}

/// The kind of an [`OutboundMessage`].
#[derive(Debug, Clone)]
pub enum OutboundKind {
    /// A request: exactly one response (or a [`TransportEvent::RequestFailed`]) follows.
    Request {
        /// The request id.
        id: RequestId,
        /// The method name (borrowed for the protocol's own methods: no copy per request).
        method: std::borrow::Cow<'static, str>,
        /// HTTP headers the request must carry (`Mcp-Method`, `Mcp-Name`, `Mcp-Param-*`,
        /// `MCP-Protocol-Version`); stream transports ignore them.
        headers: Vec<(String, String)>,
    },
    /// A notification.
    Notification {
        /// The method name.
        method: String,
        /// As for requests.
        headers: Vec<(String, String)>,
    },
    /// Our answer to a request the server sent us.
    Response {
        /// As for requests.
        headers: Vec<(String, String)>,
    },
}

/// What a transport reports to its client.
#[derive(Debug)]
pub enum TransportEvent {
    /// One whole JSON-RPC message (a response, a notification or a server request).
    Message(Vec<u8>),
    /// A message that arrived on the response stream of one of our requests (Streamable
    /// HTTP): a server request in it belongs to that request.
    Related {
        /// The message.
        message: Vec<u8>,
        /// Our request whose stream carried it.
        request: RequestId,
    },
    /// The transport gave up on one request (an HTTP error status, a broken stream that
    /// cannot be resumed): the client fails that request with this error.
    RequestFailed {
        /// The request.
        id: RequestId,
        /// Why.
        error: TransportError,
    },
    /// The connection is gone for good (process exited, stdout closed, server unreachable):
    /// every pending request fails with this error at once.
    Closed(TransportError),
}

/// A transport-level failure.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TransportError {
    /// I/O failed (spawn, read, write, connect).
    #[error("transport I/O failed: {0}")]
    Io(String),
    /// The peer sent something that is not a JSON-RPC message.
    #[error("malformed message from the server: {0}")]
    Malformed(String),
    /// The server process exited.
    #[error("server process exited ({0})")]
    Exited(String),
    /// The server answered with an HTTP status we cannot use.
    #[error("HTTP {status}{}", colon_then(.body))]
    Http {
        /// The status code.
        status: u16,
        /// The start of the response body.
        body: String,
    },
    /// The legacy session is unknown to the server (HTTP 404 with a session id): the client
    /// initializes again.
    #[error("the server no longer knows this session")]
    SessionExpired,
    /// The server wants credentials (HTTP 401/403) that we could not provide.
    #[error("authorization failed: {0}")]
    Auth(String),
    /// The connection was closed by us.
    #[error("transport closed")]
    Closed,
    /// An automatic HTTP transport (`StreamableHttpTransport::auto`) found neither HTTP
    /// transport at its URL: the POST of Streamable HTTP was refused (400, 404 or 405), and
    /// the GET of the 2024-11-05 HTTP+SSE transport did not open an SSE stream starting with
    /// an `endpoint` event.
    #[error(
        "neither MCP HTTP transport answered at {url}: Streamable HTTP (POST) failed with {streamable}; HTTP+SSE (GET) failed with {sse}"
    )]
    NoHttpTransport {
        /// The URL both were tried at.
        url: String,
        /// Why the POST failed.
        streamable: Box<TransportError>,
        /// Why the GET failed.
        sse: Box<TransportError>,
    },
}

/// `": body"`, or nothing for an empty body.
fn colon_then(body: &str) -> String {
    if body.is_empty() {
        String::new()
    } else {
        format!(": {body}")
    }
}

/// The client's side of a started transport.
pub trait TransportLink: Send + Sync + 'static {
    /// Queues a message. Failures are reported as events, never returned here, so the
    /// client actor never waits on I/O.
    fn send(&self, message: OutboundMessage);
    /// The client no longer wants the answer to `id` (timeout, cancellation, caller gone):
    /// a transport with a stream per request (HTTP) closes it; others do nothing.
    fn cancel(&self, id: &RequestId);
    /// Closes the connection (stdio: close stdin, SIGTERM, SIGKILL after a grace period, for
    /// the whole process group); resolves when it is closed.
    fn close(&self) -> BoxFuture<()>;
    /// Whether a message's headers reach the peer (HTTP). A transport that writes only the
    /// body (stdio, in-memory) says no, and the client builds no headers for its requests
    /// (half a dozen strings per request on a modern connection).
    fn carries_headers(&self) -> bool {
        true
    }
}

/// A parsed message to where it goes: nowhere more if it was a response (already with its
/// caller), else the client actor.
fn hand_on(
    actor: &ActorRef<ClientMsg>,
    delivered: Delivered,
    related: Option<RequestId>,
) -> Result<(), ClientGone> {
    match delivered {
        Delivered::Answered => Ok(()),
        Delivered::Other {
            message,
            progress_done,
        } => actor
            .cast(ClientMsg::Message {
                message,
                related,
                progress_done,
            })
            .map_err(|_| ClientGone),
    }
}

/// Something a [`Client`](super::Client) can be connected over.
pub trait Transport: Send + 'static {
    /// Starts the transport (spawns the process, prepares the HTTP client); what arrives
    /// from now on goes to `events`.
    fn start(
        self: Box<Self>,
        events: EventSink,
    ) -> BoxFuture<Result<Arc<dyn TransportLink>, TransportError>>;
}

/// Where a transport reports what it receives: responses (and a request's progress) straight
/// to the caller waiting for them, the rest into its client actor's mailbox, in order (no
/// forwarding task between them); or into a channel for code that drives a transport
/// without a client (tests, bridges).
#[derive(Clone)]
pub struct EventSink(Target);

#[derive(Clone)]
enum Target {
    Client {
        actor: ActorRef<ClientMsg>,
        table: Arc<PendingTable>,
    },
    Channel(mpsc::UnboundedSender<TransportEvent>),
}

/// The client behind an [`EventSink`] has stopped: nobody reads events any more.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("the client is gone")]
pub struct ClientGone;

/// Why [`EventSink::send_message`] did not hand a message on.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Undelivered {
    /// The client has stopped: nobody reads events any more.
    #[error("the client is gone")]
    ClientGone,
    /// The message is not JSON (`detail` says where; `message` is what was sent back): a
    /// transport that frames messages itself ends its connection over it.
    #[error("invalid JSON: {detail}")]
    NotJson {
        /// serde_json's complaint.
        detail: String,
        /// The message.
        message: Vec<u8>,
    },
}

impl From<ClientGone> for Undelivered {
    fn from(_: ClientGone) -> Undelivered {
        Undelivered::ClientGone
    }
}

impl EventSink {
    pub(crate) fn client(actor: ActorRef<ClientMsg>, table: Arc<PendingTable>) -> Self {
        EventSink(Target::Client { actor, table })
    }

    /// Hands one event to the client.
    pub fn send(&self, event: TransportEvent) -> Result<(), ClientGone> {
        match &self.0 {
            Target::Client { actor, table } => {
                if self.is_closed() {
                    return Err(ClientGone);
                }
                let (bytes, related) = match event {
                    TransportEvent::Message(bytes) => (bytes, None),
                    TransportEvent::Related { message, request } => (message, Some(request)),
                    TransportEvent::RequestFailed { id, error } => {
                        table.fail(&id, error);
                        return Ok(());
                    }
                    TransportEvent::Closed(error) => {
                        return actor.cast(ClientMsg::Closed(error)).map_err(|_| ClientGone)
                    }
                };
                // Parsed once, here: a response goes to its caller, the rest to the actor.
                hand_on(actor, table.deliver(&bytes), related)
            }
            Target::Channel(c) => c.send(event).map_err(|_| ClientGone),
        }
    }

    /// Hands one message the peer wrote to the client, unless it is not JSON. A transport
    /// that must end its connection over such a message learns it here without scanning the
    /// message first: the client's one parse of it finds out (a channel sink checks it).
    pub fn send_message(&self, bytes: Vec<u8>) -> Result<(), Undelivered> {
        match &self.0 {
            Target::Client { actor, table } => {
                if self.is_closed() {
                    return Err(Undelivered::ClientGone);
                }
                let delivered = table.deliver(&bytes);
                if let Delivered::Other {
                    message: Err(rejected),
                    ..
                } = &delivered
                {
                    if rejected.error.code == toolyard_proto::error::code::PARSE_ERROR {
                        // The parser's detail, without the JSON-RPC error's own "Parse error".
                        let detail = &rejected.error.message;
                        let detail = detail.strip_prefix("Parse error: ").unwrap_or(detail);
                        return Err(Undelivered::NotJson {
                            detail: detail.to_owned(),
                            message: bytes,
                        });
                    }
                }
                Ok(hand_on(actor, delivered, None)?)
            }
            Target::Channel(c) => {
                if let Err(e) = serde_json::from_slice::<serde::de::IgnoredAny>(&bytes) {
                    return Err(Undelivered::NotJson {
                        detail: e.to_string(),
                        message: bytes,
                    });
                }
                c.send(TransportEvent::Message(bytes))
                    .map_err(|_| ClientGone.into())
            }
        }
    }

    /// True once the client has stopped.
    pub fn is_closed(&self) -> bool {
        match &self.0 {
            Target::Client { actor, .. } => matches!(
                actor.get_status(),
                ractor::ActorStatus::Stopping | ractor::ActorStatus::Stopped
            ),
            Target::Channel(c) => c.is_closed(),
        }
    }
}

impl From<mpsc::UnboundedSender<TransportEvent>> for EventSink {
    fn from(channel: mpsc::UnboundedSender<TransportEvent>) -> Self {
        EventSink(Target::Channel(channel))
    }
}

impl std::fmt::Debug for EventSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EventSink")
    }
}

/// The client actor starts before its transport (the transport reports into the actor's
/// mailbox), so its link is filled in once the transport is up. Nothing is sent before
/// then: the client is not handed out until the transport has started.
#[derive(Default)]
pub(crate) struct LateLink(OnceLock<Arc<dyn TransportLink>>);

impl LateLink {
    pub(crate) fn set(&self, link: Arc<dyn TransportLink>) {
        let _ = self.0.set(link);
    }
}

impl TransportLink for LateLink {
    fn send(&self, message: OutboundMessage) {
        if let Some(link) = self.0.get() {
            link.send(message);
        }
    }
    fn cancel(&self, id: &RequestId) {
        if let Some(link) = self.0.get() {
            link.cancel(id);
        }
    }
    fn close(&self) -> BoxFuture<()> {
        match self.0.get() {
            Some(link) => link.close(),
            None => Box::pin(async {}),
        }
    }
    fn carries_headers(&self) -> bool {
        self.0.get().is_none_or(|link| link.carries_headers())
    }
}
