//! The in-memory client transport: a [`Client`](toolyard_client::Client) talking to
//! a [`Server`] in the same process, through a connection whose sink is a channel. Messages
//! are real JSON bytes parsed by the same edge code as stdio, so what works here works on
//! the wire; nothing is serialized twice or skipped.

use std::sync::Arc;
use tokio::sync::mpsc;
use toolyard_actors::transport::{ConnectionHandle, Sink};
use toolyard_actors::{BoxFuture, Server};
use toolyard_client::{
    EventSink, OutboundMessage, Transport, TransportError, TransportEvent, TransportLink,
};
use toolyard_proto::RequestId;

/// Connects a client to a [`Server`] in this process.
#[derive(Debug, Clone)]
pub struct MemoryTransport {
    server: Server,
    principal: Option<Arc<str>>,
}

impl MemoryTransport {
    /// A transport to `server`.
    pub fn new(server: &Server) -> Self {
        Self {
            server: server.clone(),
            principal: None,
        }
    }

    /// The client connects as `principal`, as if a transport had authenticated it: what its
    /// requests' handlers see in `RequestContext::principal` (an embedder's own callers, whose
    /// identity it established itself).
    pub fn as_principal(mut self, principal: impl Into<Arc<str>>) -> Self {
        self.principal = Some(principal.into());
        self
    }
}

struct MemoryLink {
    connection: ConnectionHandle,
}

impl Transport for MemoryTransport {
    fn start(
        self: Box<Self>,
        events: EventSink,
    ) -> BoxFuture<Result<Arc<dyn TransportLink>, TransportError>> {
        Box::pin(async move {
            let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
            let connection = self
                .server
                .connect_from(
                    Sink::channel(tx),
                    None,
                    self.principal,
                    Some(toolyard_actors::Peer::inproc()),
                )
                .await
                .map_err(|e| TransportError::Io(format!("could not connect in memory: {e}")))?;
            tokio::spawn(async move {
                while let Some(bytes) = rx.recv().await {
                    if events.send(TransportEvent::Message(bytes)).is_err() {
                        return;
                    }
                }
                let _ = events.send(TransportEvent::Closed(TransportError::Closed));
            });
            Ok(Arc::new(MemoryLink { connection }) as Arc<dyn TransportLink>)
        })
    }
}

impl TransportLink for MemoryLink {
    fn send(&self, message: OutboundMessage) {
        self.connection.receive(&message.body);
    }

    fn cancel(&self, _id: &RequestId) {}

    fn close(&self) -> BoxFuture<()> {
        self.connection.close();
        Box::pin(async {})
    }

    fn carries_headers(&self) -> bool {
        // The server connection receives the body alone.
        false
    }
}
