//! The `Client` actor: one per connection. It owns the connection's lifecycle (closing it,
//! failing what is pending when it ends), the server's in-flight requests to us, and the
//! server's notifications. It is not on a request's path: callers register their requests
//! in the shared [`PendingTable`] and write them through the link themselves, and the
//! transport's reader hands responses straight back (`pending.rs` says why). It never waits:
//! the user's handlers for the server's requests run in spawned tasks that answer straight
//! through the link.

use super::error::ClientError;
use super::handlers::{Handlers, Notice, Questions};
use super::pending::PendingTable;
use super::transport::{OutboundKind, OutboundMessage, TransportError, TransportLink};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::{broadcast, oneshot};
use toolyard_proto::error::code;
use toolyard_proto::jsonrpc::Rejected;
use toolyard_proto::{
    jsonrpc, ErrorObject, Incoming, LoggingMessageNotificationParams, ProgressNotificationParams,
    RequestId,
};

/// What the client actor handles.
pub(crate) enum ClientMsg {
    /// The caller gave up on a request (timeout, dropped future): forget it, tell the server.
    Cancel { id: RequestId, reason: String },
    /// A message from the server that is not a response (the reader hands those over
    /// itself), parsed once by the reader; `related`: the request on whose stream it came;
    /// `progress_done`: a progress notification already reached its request.
    Message {
        message: Result<Incoming, Rejected>,
        related: Option<RequestId>,
        progress_done: bool,
    },
    /// The transport closed.
    Closed(TransportError),
    /// Close the transport, fail what is pending, stop.
    Close(oneshot::Sender<()>),
}

pub(crate) struct ClientState {
    link: Arc<dyn TransportLink>,
    table: Arc<PendingTable>,
    /// The server's requests we are answering, so `notifications/cancelled` can stop them.
    serving: HashMap<RequestId, tokio::task::AbortHandle>,
}

pub(crate) struct ClientActor {
    pub(crate) handlers: Handlers,
    pub(crate) notices: broadcast::Sender<Notice>,
    /// Headers our answers to the server's requests carry (the negotiated protocol version).
    pub(crate) response_headers: Arc<arc_swap::ArcSwap<Vec<(String, String)>>>,
    pub(crate) name: String,
    /// Set once the connection is gone (read by `Client::is_closed`).
    pub(crate) closed: Arc<std::sync::atomic::AtomicBool>,
}

impl Actor for ClientActor {
    type Msg = ClientMsg;
    type State = ClientState;
    type Arguments = (Arc<dyn TransportLink>, Arc<PendingTable>);

    async fn pre_start(
        &self,
        _myself: ActorRef<ClientMsg>,
        (link, table): (Arc<dyn TransportLink>, Arc<PendingTable>),
    ) -> Result<ClientState, ActorProcessingErr> {
        Ok(ClientState {
            link,
            table,
            serving: HashMap::new(),
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<ClientMsg>,
        msg: ClientMsg,
        state: &mut ClientState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            ClientMsg::Cancel { id, reason } => {
                let Some(p) = state.table.remove(&id) else {
                    return Ok(());
                };
                // `initialize` is never cancelled (the lifecycle forbids it); the stream of
                // an HTTP request is still dropped.
                if p.method != "initialize"
                    && !self.closed.load(std::sync::atomic::Ordering::Acquire)
                {
                    let params = serde_json::json!({ "requestId": id, "reason": reason });
                    let body = jsonrpc::notification_bytes("notifications/cancelled", &params)
                        .unwrap_or_default();
                    state.link.send(OutboundMessage {
                        body,
                        kind: OutboundKind::Notification {
                            method: "notifications/cancelled".into(),
                            headers: self.response_headers.load().as_ref().clone(),
                        },
                    });
                }
                state.link.cancel(&id);
            }
            ClientMsg::Message {
                message,
                related,
                progress_done,
            } => self.on_message(message, related.as_ref(), progress_done, state),
            ClientMsg::Closed(error) => {
                tracing::debug!(client = %self.name, %error, "transport closed");
                for (_, task) in state.serving.drain() {
                    task.abort();
                }
                self.closed
                    .store(true, std::sync::atomic::Ordering::Release);
                state.table.close(ClientError::Transport(error));
            }
            ClientMsg::Close(done) => {
                for (_, task) in state.serving.drain() {
                    task.abort();
                }
                let link = state.link.clone();
                self.closed
                    .store(true, std::sync::atomic::Ordering::Release);
                state.table.close(ClientError::Closed);
                myself.stop(None);
                tokio::spawn(async move {
                    link.close().await;
                    let _ = done.send(());
                });
            }
        }
        Ok(())
    }
}

impl ClientActor {
    fn on_message(
        &self,
        message: Result<Incoming, Rejected>,
        related: Option<&RequestId>,
        progress_done: bool,
        state: &mut ClientState,
    ) {
        match message {
            // Responses are the reader's (`PendingTable::deliver`); what comes here is an
            // error response without an id.
            Ok(Incoming::Response(_)) => {}
            Ok(Incoming::Error(e)) => {
                tracing::warn!(client = %self.name, error = %e.error.message, "error response to no request");
            }
            Ok(Incoming::Notification(n)) => self.on_notification(n, progress_done, state),
            Ok(Incoming::Request(r)) => self.on_request(r, related, state),
            Err(rejected) => {
                tracing::warn!(client = %self.name, error = %rejected.error.message, "unreadable message from the server");
                // A request whose params we cannot read (positional params, the one refusal
                // that only a request can earn) still gets its answer, the error, so the
                // server does not wait for one forever. Other unreadable messages may be
                // responses, which are never answered.
                if let (Some(id), code::INVALID_PARAMS) = (&rejected.id, rejected.error.code) {
                    state.link.send(OutboundMessage {
                        body: jsonrpc::error_bytes(Some(id), &rejected.error),
                        kind: OutboundKind::Response {
                            headers: self.response_headers.load().as_ref().clone(),
                        },
                    });
                }
            }
        }
    }

    fn on_notification(
        &self,
        n: jsonrpc::Notification,
        progress_done: bool,
        state: &mut ClientState,
    ) {
        let params: Value = n
            .params
            .as_deref()
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or(Value::Null);
        match n.method.as_str() {
            "notifications/progress" => {
                if let Ok(p) = serde_json::from_value::<ProgressNotificationParams>(params.clone())
                {
                    // The transport's reader has normally handed it to its request already.
                    if !progress_done {
                        state.table.progress(&p);
                    }
                    if let Some(f) = &self.handlers.on_progress {
                        f(&p);
                    }
                }
            }
            "notifications/message" => {
                if let (Some(f), Ok(p)) = (
                    &self.handlers.on_log,
                    serde_json::from_value::<LoggingMessageNotificationParams>(params.clone()),
                ) {
                    f(&p);
                }
            }
            "notifications/cancelled" => {
                if let Some(id) = params
                    .get("requestId")
                    .and_then(|v| serde_json::from_value::<RequestId>(v.clone()).ok())
                {
                    if let Some(task) = state.serving.remove(&id) {
                        task.abort();
                    }
                }
            }
            _ => {}
        }
        let notice = Notice {
            method: n.method,
            params,
        };
        if let Some(f) = &self.handlers.on_notification {
            f(&notice);
        }
        let _ = self.notices.send(notice);
    }

    fn on_request(
        &self,
        r: jsonrpc::Request,
        related: Option<&RequestId>,
        state: &mut ClientState,
    ) {
        let params: Value = r
            .params
            .as_deref()
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or(Value::Null);
        let answer = match Questions::answers(&r.method)
            .then(|| state.table.questions_for(related))
            .flatten()
        {
            Some(questions) => (questions.handler)(&r.method, params),
            None => self.handlers.answer(&r.method, params),
        };
        let link = state.link.clone();
        let headers = self.response_headers.clone();
        let id = r.id.clone();
        let task = tokio::spawn(async move {
            let body = match answer.await {
                Ok(result) => jsonrpc::result_bytes(&id, &result, None).unwrap_or_else(|e| {
                    jsonrpc::error_bytes(Some(&id), &ErrorObject::internal(e.to_string()))
                }),
                Err(error) => jsonrpc::error_bytes(Some(&id), &error),
            };
            link.send(OutboundMessage {
                body,
                kind: OutboundKind::Response {
                    headers: headers.load().as_ref().clone(),
                },
            });
        });
        state.serving.retain(|_, t| !t.is_finished());
        state.serving.insert(r.id, task.abort_handle());
    }
}
