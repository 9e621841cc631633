//! The `Client` actor: one per connection. It owns the transport link, the pending table
//! (request id -> reply) and the server's in-flight requests to us. It never waits: callers
//! await their replies in their own tasks, and the user's handlers for the server's requests
//! run in spawned tasks that answer straight through the link.

use super::error::ClientError;
use super::handlers::{Handlers, Notice, Questions};
use super::transport::{
    OutboundKind, OutboundMessage, TransportError, TransportEvent, TransportLink,
};
use ractor::{Actor, ActorProcessingErr, ActorRef};
use serde_json::value::RawValue;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::{broadcast, mpsc, oneshot};
use toolyard_proto::error::code;
use toolyard_proto::{
    jsonrpc, ErrorObject, Incoming, LoggingMessageNotificationParams, ProgressNotificationParams,
    ProgressToken, RequestId,
};

/// The reply to one request: the raw result, or why there is none.
pub(crate) type ReplyTx = oneshot::Sender<Result<Box<RawValue>, ClientError>>;

/// What the client actor handles.
pub(crate) enum ClientMsg {
    /// Send a request and route its answer to `reply`; progress for it goes to `progress`.
    Request {
        id: RequestId,
        method: String,
        message: OutboundMessage,
        reply: ReplyTx,
        progress: Option<mpsc::UnboundedSender<ProgressNotificationParams>>,
        questions: Option<Questions>,
    },
    /// Send a notification.
    Notify(OutboundMessage),
    /// The caller gave up on a request (timeout, dropped future): forget it, tell the server.
    Cancel { id: RequestId, reason: String },
    /// Something from the transport.
    Event(TransportEvent),
    /// Close the transport, fail what is pending, stop.
    Close(oneshot::Sender<()>),
}

struct Pending {
    method: String,
    reply: ReplyTx,
    progress: Option<mpsc::UnboundedSender<ProgressNotificationParams>>,
    /// Who answers the server's questions for this request, and when it was sent (the
    /// newest of one group takes an unattributed question).
    questions: Option<(Questions, u64)>,
}

pub(crate) struct ClientState {
    link: Arc<dyn TransportLink>,
    pending: HashMap<RequestId, Pending>,
    /// The server's requests we are answering, so `notifications/cancelled` can stop them.
    serving: HashMap<RequestId, tokio::task::AbortHandle>,
    closed: Option<ClientError>,
    /// Counts requests sent with `Questions`.
    sent_with_questions: u64,
}

impl ClientState {
    /// Who answers a question that arrived on `related`'s stream (that request's own
    /// handlers), or with no link to a request (the newest request's handlers when every
    /// request with handlers is in one group; see [`Questions`]). `None` leaves it to the
    /// client's handlers.
    fn questions_for(&self, related: Option<&RequestId>) -> Option<Questions> {
        if let Some(id) = related {
            return self
                .pending
                .get(id)
                .and_then(|p| p.questions.as_ref())
                .map(|q| q.0.clone());
        }
        let mut newest: Option<&(Questions, u64)> = None;
        for q in self.pending.values().filter_map(|p| p.questions.as_ref()) {
            match newest {
                Some(n) if n.0.group != q.0.group => return None,
                Some(n) if n.1 > q.1 => {}
                _ => newest = Some(q),
            }
        }
        newest.map(|q| q.0.clone())
    }
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
    type Arguments = Arc<dyn TransportLink>;

    async fn pre_start(
        &self,
        _myself: ActorRef<ClientMsg>,
        link: Arc<dyn TransportLink>,
    ) -> Result<ClientState, ActorProcessingErr> {
        Ok(ClientState {
            link,
            pending: HashMap::new(),
            serving: HashMap::new(),
            closed: None,
            sent_with_questions: 0,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<ClientMsg>,
        msg: ClientMsg,
        state: &mut ClientState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            ClientMsg::Request {
                id,
                method,
                message,
                reply,
                progress,
                questions,
            } => {
                if let Some(error) = &state.closed {
                    let _ = reply.send(Err(error.clone()));
                    return Ok(());
                }
                let questions = questions.map(|q| {
                    state.sent_with_questions += 1;
                    (q, state.sent_with_questions)
                });
                state.pending.insert(
                    id,
                    Pending {
                        method,
                        reply,
                        progress,
                        questions,
                    },
                );
                state.link.send(message);
            }
            ClientMsg::Notify(message) => {
                if state.closed.is_none() {
                    state.link.send(message);
                }
            }
            ClientMsg::Cancel { id, reason } => {
                let Some(p) = state.pending.remove(&id) else {
                    return Ok(());
                };
                // `initialize` is never cancelled (the lifecycle forbids it); the stream of
                // an HTTP request is still dropped.
                if p.method != "initialize" && state.closed.is_none() {
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
            ClientMsg::Event(event) => self.on_event(event, state),
            ClientMsg::Close(done) => {
                for (_, task) in state.serving.drain() {
                    task.abort();
                }
                let link = state.link.clone();
                self.closed
                    .store(true, std::sync::atomic::Ordering::Release);
                fail_all(state, ClientError::Closed);
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

fn fail_all(state: &mut ClientState, error: ClientError) {
    for (_, p) in state.pending.drain() {
        let _ = p.reply.send(Err(error.clone()));
    }
    state.closed.get_or_insert(error);
}

impl ClientActor {
    fn on_event(&self, event: TransportEvent, state: &mut ClientState) {
        match event {
            TransportEvent::Message(bytes) => self.on_message(&bytes, None, state),
            TransportEvent::Related { message, request } => {
                self.on_message(&message, Some(&request), state)
            }
            TransportEvent::RequestFailed { id, error } => {
                if let Some(p) = state.pending.remove(&id) {
                    let error = match error {
                        TransportError::Auth(why) => ClientError::Auth(why),
                        other => ClientError::Transport(other),
                    };
                    let _ = p.reply.send(Err(error));
                }
            }
            TransportEvent::Closed(error) => {
                tracing::debug!(client = %self.name, %error, "transport closed");
                for (_, task) in state.serving.drain() {
                    task.abort();
                }
                self.closed
                    .store(true, std::sync::atomic::Ordering::Release);
                fail_all(state, ClientError::Transport(error));
            }
        }
    }

    fn on_message(&self, bytes: &[u8], related: Option<&RequestId>, state: &mut ClientState) {
        match jsonrpc::parse(bytes) {
            Ok(Incoming::Response(r)) => match state.pending.remove(&r.id) {
                Some(p) => {
                    let _ = p.reply.send(Ok(r.result));
                }
                None => {
                    tracing::debug!(client = %self.name, id = %r.id, "response to no pending request")
                }
            },
            Ok(Incoming::Error(e)) => match e.id.as_ref().and_then(|id| state.pending.remove(id)) {
                Some(p) => {
                    let _ = p.reply.send(Err(ClientError::from_rpc(&p.method, e.error)));
                }
                None => {
                    tracing::warn!(client = %self.name, error = %e.error.message, "error response to no pending request")
                }
            },
            Ok(Incoming::Notification(n)) => self.on_notification(n, state),
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

    fn on_notification(&self, n: jsonrpc::Notification, state: &mut ClientState) {
        let params: Value = n
            .params
            .as_deref()
            .and_then(|p| serde_json::from_str(p.get()).ok())
            .unwrap_or(Value::Null);
        match n.method.as_str() {
            "notifications/progress" => {
                if let Ok(p) = serde_json::from_value::<ProgressNotificationParams>(params.clone())
                {
                    let id = match &p.progress_token {
                        ProgressToken::Number(n) => RequestId::Number(*n),
                        ProgressToken::String(s) => RequestId::String(s.as_str().into()),
                    };
                    if let Some(tx) = state.pending.get(&id).and_then(|p| p.progress.as_ref()) {
                        let _ = tx.send(p.clone());
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
            .then(|| state.questions_for(related))
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
