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
//!
//! The table also keeps every request's deadline. One sweeper task per client wakes at the
//! earliest of them and fails what is overdue with [`ClientError::Timeout`]; a caller does
//! not arm a timer of its own. A tokio timer per request (made, registered in the wheel,
//! polled, deregistered) was ~700 instructions of every request, a tenth of what a gateway
//! spends forwarding a call; the sweeper wakes about once per timeout under any load.

use crate::error::ClientError;
use crate::handlers::Questions;
use crate::transport::TransportError;
use serde_json::value::RawValue;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;
use toolyard_proto::jsonrpc::Rejected;
use toolyard_proto::{jsonrpc, Incoming, ProgressNotificationParams, ProgressToken, RequestId};

/// Where a request's progress goes (futures-channel's: tokio's aligned channel allocation
/// was ~700 instructions of every request, which nearly never gets progress).
pub(crate) type ProgressSender =
    futures_channel::mpsc::UnboundedSender<Box<ProgressNotificationParams>>;

/// The reply to one request: the raw result, or why there is none.
pub(crate) type ReplyTx = oneshot::Sender<Result<Box<RawValue>, ClientError>>;

/// When a request times out: `timeout` after it was sent or after its latest progress,
/// never later than `hard`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Deadline {
    pub(crate) sent: Instant,
    pub(crate) timeout: Duration,
    pub(crate) hard: Instant,
}

impl Deadline {
    /// A request sent now with `timeout`, which progress may extend up to `max` in all.
    pub(crate) fn from_now(timeout: Duration, max: Duration) -> Self {
        let sent = Instant::now();
        Self {
            sent,
            timeout,
            hard: sent + max.max(timeout),
        }
    }

    fn first(&self) -> Instant {
        (self.sent + self.timeout).min(self.hard)
    }
}

/// A request waiting for its answer.
pub(crate) struct Pending {
    pub(crate) method: std::borrow::Cow<'static, str>,
    /// Taken by the sweeper when the request times out: the entry stays until its caller
    /// cancels it (so the server hears of it), and a late answer finds nobody to give to.
    pub(crate) reply: Option<ReplyTx>,
    /// Boxed: a channel allocates its first block of 32 slots when it is made, and every
    /// request gets one while few see progress (3.3 KiB of `ProgressNotificationParams`
    /// per request, a pointer's worth boxed).
    pub(crate) progress: Option<ProgressSender>,
    /// When progress last came for this request: the sweeper reads it when the request's
    /// deadline passes, to see whether progress has moved it.
    pub(crate) progressed: Option<Instant>,
    pub(crate) deadline: Deadline,
    /// When the sweeper next looks at this request.
    due: Instant,
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
    /// When the sweeper wakes next (none: it waits for a request).
    next_sweep: Option<Instant>,
    /// The sweeper's task: it ends with the runtime it was started on, which a client may
    /// outlive (made in a `block_on` that has returned).
    sweeper_task: Option<tokio::task::AbortHandle>,
}

/// See the module documentation.
pub(crate) struct PendingTable {
    table: Mutex<Table>,
    /// Wakes the sweeper: a request due before its next sweep, or the table closed or gone.
    sweeper: Arc<Notify>,
    /// Itself, for a sweeper started again (see [`PendingTable::insert`]).
    this: Weak<PendingTable>,
}

impl Drop for PendingTable {
    fn drop(&mut self) {
        self.sweeper.notify_one();
    }
}

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
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A table with its sweeper running on the current tokio runtime; the sweeper stops
    /// when the table is closed or dropped.
    pub(crate) fn start() -> Arc<Self> {
        let table = Arc::new_cyclic(|this| PendingTable {
            table: Mutex::default(),
            sweeper: Arc::default(),
            this: this.clone(),
        });
        table.lock().sweeper_task = table.spawn_sweeper();
        table
    }

    /// Starts the sweeper on the current runtime (none outside one).
    fn spawn_sweeper(&self) -> Option<tokio::task::AbortHandle> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let task = runtime.spawn(sweep(self.this.clone(), self.sweeper.clone()));
        Some(task.abort_handle())
    }

    /// Registers a request before it is written; fails once the connection is closed.
    pub(crate) fn insert(
        &self,
        id: RequestId,
        method: std::borrow::Cow<'static, str>,
        reply: ReplyTx,
        progress: Option<ProgressSender>,
        questions: Option<Questions>,
        deadline: Deadline,
    ) -> Result<(), ClientError> {
        let due = deadline.first();
        let wake = {
            let mut table = self.lock();
            if let Some(error) = &table.closed {
                return Err(error.clone());
            }
            let questions = questions.map(|q| {
                table.sent_with_questions += 1;
                (q, table.sent_with_questions)
            });
            // The sweeper's runtime has gone: one on the caller's takes over.
            if table.sweeper_task.as_ref().is_none_or(|t| t.is_finished()) {
                table.sweeper_task = self.spawn_sweeper();
                table.next_sweep = None;
            }
            table.pending.insert(
                id,
                Pending {
                    method,
                    reply: Some(reply),
                    progress,
                    progressed: None,
                    deadline,
                    due,
                    questions,
                },
            );
            // Requests with one timeout come due in the order they were sent: only the
            // first after an idle spell, or one with a shorter timeout, wakes the sweeper.
            let earlier = table.next_sweep.is_none_or(|next| due < next);
            if earlier {
                table.next_sweep = Some(due);
            }
            earlier
        };
        if wake {
            self.sweeper.notify_one();
        }
        Ok(())
    }

    /// Fails every request whose deadline has passed by `now` (progress since moves it),
    /// and says when to look again: `None` when nothing is waiting, `Err` once closed.
    fn sweep_at(&self, now: Instant) -> Result<Option<Instant>, ()> {
        let mut expired = Vec::new();
        let next = {
            let mut table = self.lock();
            if table.closed.is_some() {
                return Err(());
            }
            let mut next: Option<Instant> = None;
            for p in table.pending.values_mut() {
                if p.reply.is_none() {
                    continue;
                }
                if p.due <= now {
                    let d = p.deadline;
                    if let Some(at) = p.progressed {
                        p.due = (at + d.timeout).min(d.hard);
                    }
                }
                if p.due <= now {
                    if let Some(reply) = p.reply.take() {
                        let method = p.method.clone().into_owned();
                        expired.push((reply, method, now - p.deadline.sent));
                    }
                    continue;
                }
                next = Some(next.map_or(p.due, |n| n.min(p.due)));
            }
            table.next_sweep = next;
            next
        };
        for (reply, method, after) in expired {
            let _ = reply.send(Err(ClientError::Timeout { method, after }));
        }
        Ok(next)
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
        for reply in drained.into_iter().filter_map(|p| p.reply) {
            let _ = reply.send(Err(error.clone()));
        }
        self.sweeper.notify_one();
    }

    /// A request that failed on the wire: its caller gets the error.
    pub(crate) fn fail(&self, id: &RequestId, error: TransportError) {
        if let Some(reply) = self.remove(id).and_then(|p| p.reply) {
            let error = match error {
                TransportError::Auth(why) => ClientError::Auth(why),
                other => ClientError::Transport(other),
            };
            let _ = reply.send(Err(error));
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
            pending.progressed = Some(Instant::now());
            pending.progress.clone()
        };
        if let Some(tx) = tx {
            let _ = tx.unbounded_send(Box::new(p.clone()));
        }
    }

    /// Hands a message from the server to the caller it answers, if it is a response, or a
    /// progress notification to the request it is about. Progress goes through here too so
    /// that a request's progress always reaches its caller before its answer. Anything else
    /// comes back parsed, for the actor.
    pub(crate) fn deliver(&self, bytes: &[u8]) -> Delivered {
        match jsonrpc::parse(bytes) {
            Ok(Incoming::Response(r)) => {
                match self.remove(&r.id).map(|p| p.reply) {
                    Some(Some(reply)) => {
                        let _ = reply.send(Ok(r.result));
                    }
                    Some(None) => tracing::debug!(id = %r.id, "response after its timeout"),
                    None => tracing::debug!(id = %r.id, "response to no pending request"),
                }
                Delivered::Answered
            }
            Ok(Incoming::Error(e)) if e.id.is_some() => {
                match e.id.as_ref().and_then(|id| self.remove(id)) {
                    Some(Pending {
                        reply: Some(reply),
                        method,
                        ..
                    }) => {
                        let _ = reply.send(Err(ClientError::from_rpc(&method, e.error)));
                    }
                    Some(_) => tracing::debug!("error response after its timeout"),
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

/// The sweeper: sleeps until the earliest deadline (or until a request comes due sooner),
/// fails what is overdue, and stops when its table is closed or dropped.
async fn sweep(table: Weak<PendingTable>, wake: Arc<Notify>) {
    loop {
        // Gone or closed: nothing left to time out.
        let Some(Ok(next)) = table.upgrade().map(|t| t.sweep_at(Instant::now())) else {
            return;
        };
        match next {
            Some(at) => {
                tokio::select! {
                    () = tokio::time::sleep_until(at) => {}
                    () = wake.notified() => {}
                }
            }
            None => wake.notified().await,
        }
    }
}
