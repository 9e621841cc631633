//! A raw in-process MCP client that keeps every notification, answers `roots/list` with
//! roots the test can change, and answers elicitation with a fixed action: what the
//! filesystem's change notifications, client roots and confirmation rounds need.

use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use toolyard::transport::{ConnectionHandle, Sink};
use toolyard::Server;

type Pending = Arc<Mutex<HashMap<i64, oneshot::Sender<Value>>>>;

/// The `_meta` of a 2026-07-28 request with these client capabilities.
pub(crate) fn modern_meta(capabilities: Value) -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "it", "version": "0"},
    })
}

pub(crate) struct Peer {
    handle: ConnectionHandle,
    next: AtomicI64,
    pending: Pending,
    notes: tokio::sync::Mutex<mpsc::UnboundedReceiver<Value>>,
    /// The roots `roots/list` answers with (URIs).
    pub(crate) roots: Arc<Mutex<Vec<String>>>,
    /// How many `roots/list` requests the server sent.
    pub(crate) roots_asked: Arc<AtomicUsize>,
}

impl Peer {
    /// Connects; `elicit` is the action every elicitation is answered with.
    pub(crate) async fn connect(server: &Server, elicit: &'static str) -> Peer {
        let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
        let handle = server.connect(Sink::channel(tx)).await.expect("connect");
        let pending: Pending = Arc::default();
        let roots: Arc<Mutex<Vec<String>>> = Arc::default();
        let roots_asked = Arc::new(AtomicUsize::new(0));
        let (note_tx, note_rx) = mpsc::unbounded_channel();
        let (table, answerer, listed, asked) = (
            pending.clone(),
            handle.clone(),
            roots.clone(),
            roots_asked.clone(),
        );
        tokio::spawn(async move {
            while let Some(bytes) = rx.recv().await {
                let Ok(message) = serde_json::from_slice::<Value>(&bytes) else {
                    continue;
                };
                let method = message["method"].as_str().map(str::to_owned);
                match (method, message.get("id").cloned()) {
                    (Some(method), Some(id)) => {
                        let result = match method.as_str() {
                            "roots/list" => {
                                asked.fetch_add(1, Ordering::SeqCst);
                                let roots: Vec<Value> = listed
                                    .lock()
                                    .unwrap()
                                    .iter()
                                    .map(|uri| json!({"uri": uri}))
                                    .collect();
                                json!({"roots": roots})
                            }
                            "elicitation/create" => json!({"action": elicit}),
                            _ => json!({}),
                        };
                        let reply = json!({"jsonrpc": "2.0", "id": id, "result": result});
                        answerer.receive(reply.to_string().as_bytes());
                    }
                    (Some(_), None) => {
                        let _ = note_tx.send(message);
                    }
                    (None, Some(id)) => {
                        if let Some(tx) =
                            id.as_i64().and_then(|id| table.lock().unwrap().remove(&id))
                        {
                            let _ = tx.send(message);
                        }
                    }
                    (None, None) => {}
                }
            }
        });
        Peer {
            handle,
            next: AtomicI64::new(1),
            pending,
            notes: tokio::sync::Mutex::new(note_rx),
            roots,
            roots_asked,
        }
    }

    /// A 2025-11-25 session with these capabilities.
    pub(crate) async fn initialize(&self, capabilities: Value) {
        self.request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": capabilities, "clientInfo": {"name": "it", "version": "0"}}),
        )
        .await
        .expect("initialize");
        self.notify("notifications/initialized");
    }

    pub(crate) fn notify(&self, method: &str) {
        let note = json!({"jsonrpc": "2.0", "method": method});
        self.handle.receive(note.to_string().as_bytes());
    }

    /// Sends a request without waiting for its answer (a `subscriptions/listen` stream).
    pub(crate) fn send(&self, method: &str, params: Value) -> oneshot::Receiver<Value> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.pending.lock().unwrap().insert(id, tx);
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.handle.receive(message.to_string().as_bytes());
        rx
    }

    /// The `result`, or the `error` object as `Err`.
    pub(crate) async fn request(&self, method: &str, params: Value) -> Result<Value, Value> {
        let rx = self.send(method, params);
        let answer = tokio::time::timeout(Duration::from_secs(30), rx)
            .await
            .expect("an answer within 30 s")
            .expect("the connection stays open");
        match answer.get("error") {
            Some(e) => Err(e.clone()),
            None => Ok(answer["result"].clone()),
        }
    }

    /// Calls a tool (legacy): `(isError, text)`.
    pub(crate) async fn call(&self, name: &str, arguments: Value) -> (bool, String) {
        let r = self
            .request("tools/call", json!({"name": name, "arguments": arguments}))
            .await
            .unwrap_or_else(|e| panic!("{name}: JSON-RPC error {e}"));
        (r["isError"] == true, text_of(&r))
    }

    /// The next notification that satisfies `want`, within `within`; `None` if none came.
    pub(crate) async fn next_note(
        &self,
        within: Duration,
        want: impl Fn(&Value) -> bool,
    ) -> Option<Value> {
        let mut notes = self.notes.lock().await;
        tokio::time::timeout(within, async {
            loop {
                let note = notes.recv().await?;
                if want(&note) {
                    return Some(note);
                }
            }
        })
        .await
        .ok()
        .flatten()
    }
}

/// The text blocks of a tool result, joined.
pub(crate) fn text_of(result: &Value) -> String {
    result["content"]
        .as_array()
        .map(|blocks| {
            blocks
                .iter()
                .filter_map(|b| b["text"].as_str())
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}
