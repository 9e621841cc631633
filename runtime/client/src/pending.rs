//! The pending table: the requests a client has sent and not yet had answered, shared by the
//! callers that send them and the transport's reader that receives their answers.
//!
//! Why not the client actor's state: a request and its answer then took four hops (the
//! caller to the actor's mailbox, the actor to the transport's writer, the reader to the
//! actor's mailbox, the actor to the caller), where two are enough. A caller now registers
//! its request here and writes it through the link itself; the transport's reader
//! ([`EventSink`](crate::EventSink)) hands a response, a request's progress and a request's
//! wire failure straight to the waiting caller, in the order they arrived, and everything
//! else (the server's requests and other notifications, the connection closing) still goes
//! to the actor, which owns the connection's lifecycle. The lock is held only to insert or
//! remove an entry, never across an await or a send to the wire.

use crate::error::ClientError;
use crate::handlers::Questions;
use crate::transport::TransportError;
use serde_json::value::RawValue;
use std::sync::Mutex;
use tokio::sync::oneshot;
use toolyard_proto::jsonrpc::Rejected;
use toolyard_proto::{jsonrpc, Incoming, ProgressNotificationParams, ProgressToken, RequestId};

/// Where a request's progress goes (futures-channel's: tokio's aligned channel allocation
/// was ~700 instructions of every request, which nearly never gets progress).
pub(crate) type ProgressSender =
    futures_channel::mpsc::UnboundedSender<Box<ProgressNotificationParams>>;

/// The reply to one request: the raw result, or why there is none.
pub(crate) type ReplyTx = oneshot::Sender<Result<Box<RawValue>, ClientError>>;

/// A request waiting for its answer.
pub(crate) struct Pending {
    pub(crate) method: std::borrow::Cow<'static, str>,
    pub(crate) reply: ReplyTx,
    /// Boxed: a channel allocates its first block of 32 slots when it is made, and every
    /// request gets one while few see progress (3.3 KiB of `ProgressNotificationParams`
    /// per request, a pointer's worth boxed).
    pub(crate) progress: Option<ProgressSender>,
    /// When progress last came for this request: a caller with no progress callback gets
    /// no channel (two allocations per request), and reads this when its timeout fires
    /// to see whether progress has moved the deadline.
    pub(crate) progressed: Option<std::time::Instant>,
    /// Who answers the server's questions for this request, and when it was sent (the
    /// newest of one group takes an unattributed question).
    pub(crate) questions: Option<(Questions, u64)>,
}

#[derive(Default)]
struct Table {
    /// Keyed by the ids this client gave its requests (not a peer's choice, so the fast
    /// hash has no flooding to fear).
    pending: rustc_hash::FxHashMap<RequestId, Pending>,
    closed: Option<ClientError>,
    /// Counts requests sent with `Questions`.
    sent_with_questions: u64,
}

/// See the module documentation.
#[derive(Default)]
pub(crate) struct PendingTable(Mutex<Table>);

/// What [`PendingTable::deliver`] did with a message.
pub(crate) enum Delivered {
    /// It was a response, handed to its caller (or to nobody: a late answer).
    Answered,
    /// Anything else, parsed (the actor does not parse it again): the actor's business.
    /// `progress_done` says a progress notification already reached its request's caller.
    Other {
        message: Result<Incoming, Rejected>,
        progress_done: bool,
    },
}

impl PendingTable {
    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a request before it is written; fails once the connection is closed.
    pub(crate) fn insert(
        &self,
        id: RequestId,
        method: std::borrow::Cow<'static, str>,
        reply: ReplyTx,
        progress: Option<ProgressSender>,
        questions: Option<Questions>,
    ) -> Result<(), ClientError> {
        let mut table = self.lock();
        if let Some(error) = &table.closed {
            return Err(error.clone());
        }
        let questions = questions.map(|q| {
            table.sent_with_questions += 1;
            (q, table.sent_with_questions)
        });
        table.pending.insert(
            id,
            Pending {
                method,
                reply,
                progress,
                progressed: None,
                questions,
            },
        );
        Ok(())
    }

    /// Forgets a request (its caller gave up), returning it if it was still waiting.
    pub(crate) fn remove(&self, id: &RequestId) -> Option<Pending> {
        self.lock().pending.remove(id)
    }

    /// Fails every waiting request with `error`, and every later one.
    pub(crate) fn close(&self, error: ClientError) {
        let (drained, error): (Vec<Pending>, ClientError) = {
            let mut table = self.lock();
            let drained = table.pending.drain().map(|(_, p)| p).collect();
            (drained, table.closed.get_or_insert(error).clone())
        };
        for p in drained {
            let _ = p.reply.send(Err(error.clone()));
        }
    }

    /// A request that failed on the wire: its caller gets the error.
    pub(crate) fn fail(&self, id: &RequestId, error: TransportError) {
        if let Some(p) = self.remove(id) {
            let error = match error {
                TransportError::Auth(why) => ClientError::Auth(why),
                other => ClientError::Transport(other),
            };
            let _ = p.reply.send(Err(error));
        }
    }

    /// Who answers a question that arrived on `related`'s stream (that request's own
    /// handlers), or with no link to a request (the newest request's handlers when every
    /// request with handlers is in one group; see [`Questions`]). `None` leaves it to the
    /// client's handlers.
    pub(crate) fn questions_for(&self, related: Option<&RequestId>) -> Option<Questions> {
        let table = self.lock();
        if let Some(id) = related {
            return table
                .pending
                .get(id)
                .and_then(|p| p.questions.as_ref())
                .map(|q| q.0.clone());
        }
        let mut newest: Option<&(Questions, u64)> = None;
        for q in table.pending.values().filter_map(|p| p.questions.as_ref()) {
            match newest {
                Some(n) if n.0.group != q.0.group => return None,
                Some(n) if n.1 > q.1 => {}
                _ => newest = Some(q),
            }
        }
        newest.map(|q| q.0.clone())
    }

    /// Hands a progress notification to the request it is about (its token is the
    /// request's id): to its caller's channel if it asked for progress, and in any case
    /// noted as the request's latest progress (see [`PendingTable::progressed`]).
    pub(crate) fn progress(&self, p: &ProgressNotificationParams) {
        let id = match &p.progress_token {
            ProgressToken::Number(n) => RequestId::Number(*n),
            ProgressToken::String(s) => RequestId::String(s.as_str().into()),
        };
        let tx = {
            let mut table = self.lock();
            let Some(pending) = table.pending.get_mut(&id) else {
                return;
            };
            pending.progressed = Some(std::time::Instant::now());
            pending.progress.clone()
        };
        if let Some(tx) = tx {
            let _ = tx.unbounded_send(Box::new(p.clone()));
        }
    }

    /// When progress last came for a request still waiting (none: no progress, or no
    /// longer waiting).
    pub(crate) fn progressed(&self, id: &RequestId) -> Option<std::time::Instant> {
        self.lock().pending.get(id).and_then(|p| p.progressed)
    }

    /// Hands a message from the server to the caller it answers, if it is a response, or a
    /// progress notification to the request it is about. Progress goes through here too so
    /// that a request's progress always reaches its caller before its answer. Anything else
    /// comes back parsed, for the actor.
    pub(crate) fn deliver(&self, bytes: &[u8]) -> Delivered {
        match jsonrpc::parse(bytes) {
            Ok(Incoming::Response(r)) => {
                match self.remove(&r.id) {
                    Some(p) => {
                        let _ = p.reply.send(Ok(r.result));
                    }
                    None => tracing::debug!(id = %r.id, "response to no pending request"),
                }
                Delivered::Answered
            }
            Ok(Incoming::Error(e)) if e.id.is_some() => {
                match e.id.as_ref().and_then(|id| self.remove(id)) {
                    Some(p) => {
                        let _ = p.reply.send(Err(ClientError::from_rpc(&p.method, e.error)));
                    }
                    None => {
                        tracing::warn!(error = %e.error.message, "error response to no pending request");
                    }
                }
                Delivered::Answered
            }
            Ok(Incoming::Notification(n)) if n.method == "notifications/progress" => {
                let progress = n
                    .params
                    .as_deref()
                    .and_then(|p| serde_json::from_str::<ProgressNotificationParams>(p.get()).ok());
                if let Some(p) = progress {
                    self.progress(&p);
                }
                Delivered::Other {
                    message: Ok(Incoming::Notification(n)),
                    progress_done: true,
                }
            }
            message => Delivered::Other {
                message,
                progress_done: false,
            },
        }
    }
}
