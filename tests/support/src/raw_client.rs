//! A raw JSON-RPC client in the same process as its server, for tests that need to send what
//! a typed client never would (malformed params, duplicate ids, out-of-order lifecycle) or to
//! see the exact JSON that comes back.
//!
//! [`RawClient`] speaks JSON-RPC to a [`Server`] through a connection whose sink is a channel:
//! no sockets, no serialization shortcuts (messages are real JSON bytes, parsed by the same
//! edge code as stdio), so what works here works on the wire. Embedders use the typed
//! `toolyard::client::Client` over `toolyard::MemoryTransport` instead.

use serde::Serialize;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use toolyard::proto::{jsonrpc, ErrorObject, Incoming, RequestId};
use toolyard::transport::{ConnectionHandle, Sink};
use toolyard::Server;

/// A client request failed.
#[derive(Debug, thiserror::Error)]
pub enum RawClientError {
    /// The server answered with a JSON-RPC error.
    #[error("server error: {0}")]
    Rpc(ErrorObject),
    /// No answer in time.
    #[error("timed out waiting for the server")]
    Timeout,
    /// The connection is closed.
    #[error("connection closed")]
    Closed,
    /// The request could not be serialized.
    #[error("invalid request: {0}")]
    Invalid(String),
}

type Pending = Arc<Mutex<HashMap<RequestId, oneshot::Sender<Result<Value, ErrorObject>>>>>;

/// An in-process MCP client connected to a [`Server`].
pub struct RawClient {
    handle: ConnectionHandle,
    next_id: AtomicI64,
    pending: Pending,
    timeout: Duration,
    notifications: tokio::sync::Mutex<mpsc::UnboundedReceiver<Value>>,
    requests: tokio::sync::Mutex<mpsc::UnboundedReceiver<Value>>,
}

impl std::fmt::Debug for RawClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawClient").finish()
    }
}

impl RawClient {
    /// Connects to `server`.
    pub async fn connect(server: &Server) -> Result<Self, RawClientError> {
        RawClient::connect_as(server, None).await
    }

    /// Connects to `server` as `principal`, as if a transport had authenticated it.
    pub async fn connect_as(
        server: &Server,
        principal: Option<&str>,
    ) -> Result<Self, RawClientError> {
        let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
        let handle = server
            .connect_as(Sink::channel(tx), None, principal.map(Into::into))
            .await
            .map_err(|_| RawClientError::Closed)?;
        let pending: Pending = Arc::default();
        let (ntx, nrx) = mpsc::unbounded_channel();
        let (rtx, rrx) = mpsc::unbounded_channel();
        let table = pending.clone();
        tokio::spawn(async move {
            while let Some(bytes) = rx.recv().await {
                let Ok(value) = serde_json::from_slice::<Value>(&bytes) else {
                    continue;
                };
                match jsonrpc::parse(&bytes) {
                    Ok(Incoming::Response(r)) => {
                        let result = serde_json::from_str(r.result.get()).unwrap_or(Value::Null);
                        if let Some(tx) = lock(&table).remove(&r.id) {
                            let _ = tx.send(Ok(result));
                        }
                    }
                    Ok(Incoming::Error(e)) => {
                        if let Some(tx) = e.id.and_then(|id| lock(&table).remove(&id)) {
                            let _ = tx.send(Err(e.error));
                        } else {
                            let _ = ntx.send(value);
                        }
                    }
                    Ok(Incoming::Notification(_)) => {
                        let _ = ntx.send(value);
                    }
                    Ok(Incoming::Request(_)) => {
                        let _ = rtx.send(value);
                    }
                    Err(_) => {}
                }
            }
            lock(&table).clear();
        });
        Ok(RawClient {
            handle,
            next_id: AtomicI64::new(1),
            pending,
            timeout: Duration::from_secs(30),
            notifications: tokio::sync::Mutex::new(nrx),
            requests: tokio::sync::Mutex::new(rrx),
        })
    }

    /// Sends a request and waits for its result.
    pub async fn request<P: Serialize>(
        &self,
        method: &str,
        params: P,
    ) -> Result<Value, RawClientError> {
        let id = RequestId::Number(self.next_id.fetch_add(1, Ordering::Relaxed));
        self.request_with_id(id, method, params).await
    }

    /// Sends a request with a chosen id.
    pub async fn request_with_id<P: Serialize>(
        &self,
        id: RequestId,
        method: &str,
        params: P,
    ) -> Result<Value, RawClientError> {
        let bytes = jsonrpc::request_bytes(&id, method, &params)
            .map_err(|e| RawClientError::Invalid(e.to_string()))?;
        let (tx, rx) = oneshot::channel();
        lock(&self.pending).insert(id.clone(), tx);
        self.handle.receive(&bytes);
        match tokio::time::timeout(self.timeout, rx).await {
            Ok(Ok(Ok(v))) => Ok(v),
            Ok(Ok(Err(e))) => Err(RawClientError::Rpc(e)),
            Ok(Err(_)) => Err(RawClientError::Closed),
            Err(_) => {
                lock(&self.pending).remove(&id);
                Err(RawClientError::Timeout)
            }
        }
    }

    /// Sends a notification.
    pub fn notify<P: Serialize>(&self, method: &str, params: P) -> Result<(), RawClientError> {
        let bytes = jsonrpc::notification_bytes(method, &params)
            .map_err(|e| RawClientError::Invalid(e.to_string()))?;
        self.handle.receive(&bytes);
        Ok(())
    }

    /// Sends raw bytes as one message (for tests of bad input).
    pub fn send_raw(&self, bytes: &[u8]) {
        self.handle.receive(bytes);
    }

    /// Answers a server-to-client request.
    #[allow(
        clippy::needless_pass_by_value,
        reason = "takes ownership: callers hand the value over and never use it again, so a borrow would only add noise at every call site"
    )]
    pub fn respond(&self, id: &Value, result: Value) {
        let msg = serde_json::json!({"jsonrpc": "2.0", "id": id, "result": result});
        self.handle.receive(msg.to_string().as_bytes());
    }

    /// The next notification (or unsolicited error) from the server.
    pub async fn next_notification(&self) -> Option<Value> {
        let mut rx = self.notifications.lock().await;
        tokio::time::timeout(self.timeout, rx.recv())
            .await
            .ok()
            .flatten()
    }

    /// The next notification with this method, skipping others; `None` when none comes in
    /// time.
    pub async fn next_notification_named(&self, method: &str) -> Option<Value> {
        loop {
            let n = self.next_notification().await?;
            if n["method"] == method {
                return Some(n);
            }
        }
    }

    /// The next server-to-client request.
    pub async fn next_request(&self) -> Option<Value> {
        let mut rx = self.requests.lock().await;
        tokio::time::timeout(self.timeout, rx.recv())
            .await
            .ok()
            .flatten()
    }

    /// Performs the legacy `initialize` handshake with the given capabilities.
    pub async fn initialize(&self, capabilities: Value) -> Result<Value, RawClientError> {
        let r = self
            .request(
                "initialize",
                serde_json::json!({
                    "protocolVersion": "2025-11-25",
                    "capabilities": capabilities,
                    "clientInfo": {"name": "toolyard-memory", "version": env!("CARGO_PKG_VERSION")},
                }),
            )
            .await?;
        self.notify("notifications/initialized", serde_json::json!({}))?;
        Ok(r)
    }

    /// Closes the connection (in-flight calls are cancelled).
    pub fn close(&self) {
        self.handle.close();
    }
}

impl Drop for RawClient {
    fn drop(&mut self) {
        self.handle.close();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
