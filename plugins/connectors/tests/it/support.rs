//! A server holding one connector and an in-process client calling it; temporary directories.

use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use toolyard::transport::{ConnectionHandle, Sink};
use toolyard::{Controller, Server, ServerBuilder};

type Pending = Arc<Mutex<HashMap<i64, oneshot::Sender<Value>>>>;

/// A JSON-RPC client over an in-process connection (only what these tests need).
struct RawClient {
    handle: ConnectionHandle,
    next: AtomicI64,
    pending: Pending,
}

impl RawClient {
    /// `elicit`: the action every elicitation request is answered with (`None`: the client
    /// does not declare the capability).
    async fn connect(server: &Server, elicit: Option<&'static str>) -> RawClient {
        let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
        let handle = server.connect(Sink::channel(tx)).await.expect("connect");
        let pending: Pending = Arc::default();
        let table = pending.clone();
        let answerer = handle.clone();
        tokio::spawn(async move {
            while let Some(bytes) = rx.recv().await {
                let Ok(message) = serde_json::from_slice::<Value>(&bytes) else {
                    continue;
                };
                let Some(id) = message["id"].as_i64() else {
                    continue;
                };
                if message.get("method").is_some() {
                    if message["method"] == "elicitation/create" {
                        let reply = json!({"jsonrpc": "2.0", "id": id,
                            "result": {"action": elicit.unwrap_or("cancel")}});
                        answerer.receive(reply.to_string().as_bytes());
                    }
                    continue;
                }
                if let Some(tx) = table.lock().unwrap().remove(&id) {
                    let _ = tx.send(message);
                }
            }
        });
        RawClient {
            handle,
            next: AtomicI64::new(1),
            pending,
        }
    }

    /// The `result`, or the `error` object as `Err`.
    async fn request(&self, method: &str, params: Value) -> Result<Value, Value> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        self.pending.lock().unwrap().insert(id, tx);
        let message = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        self.handle.receive(message.to_string().as_bytes());
        let answer = tokio::time::timeout(Duration::from_secs(60), rx)
            .await
            .expect("an answer within 60 s")
            .expect("the connection stays open");
        match answer.get("error") {
            Some(e) => Err(e.clone()),
            None => Ok(answer["result"].clone()),
        }
    }

    async fn initialize(&self, capabilities: Value) {
        self.request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": capabilities, "clientInfo": {"name": "it", "version": "0"}}),
        )
        .await
        .expect("initialize");
        let note = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        self.handle.receive(note.to_string().as_bytes());
    }
}

/// A server with a connector's tools and a client connected to it.
pub(crate) struct Tools {
    _server: Server,
    client: RawClient,
}

/// A tool call's outcome: whether it failed, and its text.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) is_error: bool,
    pub(crate) text: String,
    pub(crate) raw: Value,
}

impl Reply {
    /// The text of a successful call; panics with the error text otherwise.
    #[track_caller]
    pub(crate) fn ok(&self) -> &str {
        assert!(!self.is_error, "the call failed: {}", self.text);
        &self.text
    }
    /// The text of a failed call; panics if it succeeded.
    #[track_caller]
    pub(crate) fn err(&self) -> &str {
        assert!(self.is_error, "the call succeeded: {}", self.text);
        &self.text
    }
}

impl Tools {
    /// The server the client is connected to.
    pub(crate) fn server(&self) -> &Server {
        &self._server
    }

    pub(crate) async fn with(controller: impl Controller) -> Tools {
        Self::start(ServerBuilder::new("connectors-test", "0").controller(controller)).await
    }

    /// A client that answers every elicitation with `action` (`accept`, `decline`).
    pub(crate) async fn answering(controller: impl Controller, action: &'static str) -> Tools {
        let builder = ServerBuilder::new("connectors-test", "0").controller(controller);
        let server = builder.start().await.expect("the server starts");
        let client = RawClient::connect(&server, Some(action)).await;
        client.initialize(json!({"elicitation": {}})).await;
        Tools {
            _server: server,
            client,
        }
    }

    pub(crate) async fn start(builder: ServerBuilder) -> Tools {
        let server = builder.start().await.expect("the server starts");
        let client = RawClient::connect(&server, None).await;
        client.initialize(json!({})).await;
        Tools {
            _server: server,
            client,
        }
    }

    /// The names of the listed tools, sorted.
    pub(crate) async fn names(&self) -> Vec<String> {
        let list = self.client.request("tools/list", json!({})).await.unwrap();
        let mut names: Vec<String> = list["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect();
        names.sort();
        names
    }

    /// The listed definition of one tool.
    pub(crate) async fn definition(&self, name: &str) -> Value {
        let list = self.client.request("tools/list", json!({})).await.unwrap();
        list["tools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .cloned()
            .unwrap_or(Value::Null)
    }

    /// A raw request: the result, or the JSON-RPC error object.
    pub(crate) async fn request(&self, method: &str, params: Value) -> Result<Value, Value> {
        self.client.request(method, params).await
    }

    /// Calls a tool; a JSON-RPC error becomes a failed reply with its message.
    pub(crate) async fn call(&self, name: &str, arguments: Value) -> Reply {
        match self
            .client
            .request("tools/call", json!({"name": name, "arguments": arguments}))
            .await
        {
            Ok(raw) => {
                let text = raw["content"]
                    .as_array()
                    .map(|blocks| {
                        blocks
                            .iter()
                            .filter_map(|b| b["text"].as_str())
                            .collect::<Vec<_>>()
                            .join("\n")
                    })
                    .unwrap_or_default();
                Reply {
                    is_error: raw["isError"] == true,
                    text,
                    raw,
                }
            }
            Err(e) => Reply {
                is_error: true,
                text: format!("JSON-RPC error: {e}"),
                raw: Value::Null,
            },
        }
    }
}

/// A directory under the system's temporary directory, removed when dropped.
pub(crate) struct TempDir(PathBuf);

impl TempDir {
    pub(crate) fn new(tag: &str) -> TempDir {
        static N: AtomicU32 = AtomicU32::new(0);
        let path = std::env::temp_dir().join(format!(
            "toolyard-connectors-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        TempDir(std::fs::canonicalize(&path).unwrap())
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A request header's text as a fake API sees it, empty when absent or not text.
pub(crate) fn header_text(headers: &axum::http::HeaderMap, name: &str) -> String {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned()
}
