//! The [`Client`] handle itself: the state every clone shares, what the handshake learned,
//! and closing. The core the other files of this module add their methods to.

use super::handshake::{ProtocolChoice, ServerSession};
use super::meta::ModernIdentity;
use crate::actor::ClientMsg;
use crate::cache::ResponseCache;
use crate::handlers::{Handlers, Notice};
use arc_swap::ArcSwap;
use ractor::ActorRef;
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{broadcast, oneshot};
use toolyard_proto::headers::HeaderParam;
use toolyard_proto::{ClientCapabilities, Implementation, LoggingLevel, ProtocolVersion};

pub(super) struct Inner {
    pub(super) actor: ActorRef<ClientMsg>,
    /// What requests and notifications are written through (callers write their own).
    pub(super) link: Arc<crate::transport::LateLink>,
    /// The requests waiting for their answers (`pending.rs`).
    pub(super) pending: Arc<crate::pending::PendingTable>,
    pub(super) closed: Arc<std::sync::atomic::AtomicBool>,
    pub(super) next_id: AtomicI64,
    /// `capabilities` and `info` as JSON, serialized once: every modern request carries both.
    pub(super) modern_identity: ModernIdentity,
    pub(super) info: Implementation,
    pub(super) capabilities: ClientCapabilities,
    pub(super) handlers: Handlers,
    pub(super) session: ArcSwap<Option<ServerSession>>,
    pub(super) protocol: ProtocolChoice,
    pub(super) request_timeout: Duration,
    pub(super) max_request_timeout: Duration,
    pub(super) handshake_timeout: Duration,
    pub(super) probe_timeout: Duration,
    pub(super) max_input_rounds: usize,
    pub(super) use_cache: bool,
    pub(super) cache: Arc<Mutex<ResponseCache>>,
    /// `x-mcp-header` arguments per tool, learned from listings.
    pub(super) tool_headers: Mutex<HashMap<String, Arc<[HeaderParam]>>>,
    pub(super) response_headers: Arc<ArcSwap<Vec<(String, String)>>>,
    /// Modern: the log level every request asks for.
    pub(super) log_level: Mutex<Option<LoggingLevel>>,
    /// One re-initialization at a time after a legacy session expired.
    pub(super) reinit: tokio::sync::Mutex<()>,
    pub(super) notices: broadcast::Sender<Notice>,
    /// Sees every request (telemetry).
    pub(super) observer: Option<Arc<dyn crate::RequestObserver>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // The last handle is gone: close the connection (stops the server process).
        let (done, _) = oneshot::channel();
        let _ = self.actor.cast(ClientMsg::Close(done));
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A connection to one MCP server. Cheap to clone; every clone shares the connection, which
/// closes when the last clone is dropped or [`close`](Client::close) is called.
#[derive(Clone)]
pub struct Client {
    pub(super) inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("client", &self.inner.info.name)
            .field("session", &self.inner.session.load())
            .finish()
    }
}

impl Client {
    /// What the handshake learned; `None` only before it completed.
    pub fn session(&self) -> Option<ServerSession> {
        self.inner.session.load().as_ref().clone()
    }

    /// The revision in use.
    pub fn protocol_version(&self) -> Option<ProtocolVersion> {
        self.inner
            .session
            .load()
            .as_ref()
            .as_ref()
            .map(|s| s.protocol_version)
    }

    /// True when speaking the stateless 2026-07-28 generation.
    pub fn is_modern(&self) -> bool {
        self.protocol_version().is_some_and(|v| !v.is_legacy())
    }

    /// True once the connection is gone (the server exited, the transport failed, or
    /// [`close`](Self::close) was called); every request then fails at once.
    pub fn is_closed(&self) -> bool {
        self.inner.closed.load(Ordering::Acquire)
    }

    /// The capabilities this client declares.
    pub fn capabilities(&self) -> &ClientCapabilities {
        &self.inner.capabilities
    }

    /// Every notification the server sends from now on (progress, logs, changes).
    pub fn notifications(&self) -> broadcast::Receiver<Notice> {
        self.inner.notices.subscribe()
    }

    /// Closes the connection: fails what is pending with
    /// [`ClientError::Closed`](crate::ClientError::Closed), then closes the transport (for a
    /// process: stdin, SIGTERM, SIGKILL).
    pub async fn close(&self) {
        let (done, wait) = oneshot::channel();
        if self.inner.actor.cast(ClientMsg::Close(done)).is_ok() {
            let _ = wait.await;
        }
    }
}
