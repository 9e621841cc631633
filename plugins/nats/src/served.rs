//! A request served by this process's server for the bus (a worker's request, a task's
//! job, the worker's own listings), its messages collected as they come.
//!
//! A tool may report progress (or log) faster than the bus takes the frames: they wait in
//! the request's queue until published, and a tool in a tight loop would grow the worker
//! without limit. So a request has at most a bounded number of notifications waiting
//! ([`WorkerConfig::notification_backlog`](crate::WorkerConfig::notification_backlog),
//! like the gateway's queue per call); past it, new ones are dropped until the queue drains,
//! with one warning per request and the count when it ends. The answer is never dropped.
//! Progress is advisory and each report supersedes the last, so a caller loses detail, not
//! meaning; and `Mcp-Seq` is given as frames are published, so a notification dropped here
//! leaves no gap (which the caller would take for a lost frame and fail the call).

use crate::wire;
use futures_channel::mpsc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use toolyard::transport::{Delivery, MessageSink, Sink};
use toolyard::{Peer, Server, TaskRole, TransportTrace};
use toolyard_proto::jsonrpc::Request;
use toolyard_proto::RequestMeta;

/// Notifications a request may have waiting to be published, by default: as many frames
/// as the gateway lets a call have waiting (`replies::QUEUE`).
pub(crate) const NOTIFICATION_BACKLOG: usize = 512;

/// A request served by this process's server: its messages as they come, and the prefix
/// of the one that answers it.
pub(crate) struct Served {
    pub(crate) messages: mpsc::UnboundedReceiver<Vec<u8>>,
    pub(crate) answer_prefix: Vec<u8>,
}

/// Where a request served here writes its messages: futures' unbounded channel rather than
/// tokio's, whose shared state is cache-padded and so allocated through `posix_memalign`
/// (~580 instructions of every request, most of which send one message), with the
/// notifications waiting in it bounded (its count of messages is one atomic load).
struct ServedSink {
    tx: mpsc::UnboundedSender<Vec<u8>>,
    backlog: usize,
    dropped: AtomicU64,
}

impl MessageSink for ServedSink {
    fn send(&self, message: Vec<u8>) -> bool {
        if self.tx.len() >= self.backlog && !message.starts_with(wire::RESPONSE_START) {
            if self.dropped.fetch_add(1, Ordering::Relaxed) == 0 {
                tracing::warn!(
                    target: "toolyard::nats",
                    waiting = self.backlog,
                    "a request's notifications come faster than the bus takes them: dropping new ones until it catches up"
                );
            }
            return !self.tx.is_closed();
        }
        self.tx.unbounded_send(message).is_ok()
    }
    fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

impl Drop for ServedSink {
    fn drop(&mut self) {
        let dropped = *self.dropped.get_mut();
        if dropped > 0 {
            tracing::warn!(target: "toolyard::nats", dropped, "notifications of a request dropped: they came faster than the bus took them");
        }
    }
}

/// Serves `request` with `server` as a 2026-07-28 request without a connection (the bus's
/// requests, a task's job, the worker's own listings), cancelled by `cancel`; at most
/// `backlog` of its notifications wait to be taken. `role`: a request's own
/// ([`Server::serve_stateless`]), one whose caller makes a deferred tool's task
/// ([`Server::serve_handing_off_task`], `Mcp-Task-Handoff`), or a durable task's job
/// ([`Server::serve_task_body`]: its tool runs as an ordinary call whatever its task
/// support, and makes no task of this server's). `principal`: the caller's, as the bus
/// carried it (`crate::principal`), what its handler's `RequestContext::principal` says.
#[allow(
    clippy::too_many_arguments,
    reason = "one entry point for the three ways the bus's requests are served; each argument is what the server's own entry points take, unbundled"
)]
pub(crate) fn serve_here(
    server: &Server,
    role: TaskRole,
    request: Request,
    meta: RequestMeta,
    cancel: CancellationToken,
    transport_trace: Option<Arc<TransportTrace>>,
    peer: Option<Arc<Peer>>,
    principal: Option<Arc<str>>,
    backlog: usize,
) -> Served {
    let (delivery, served) = delivery(&request, cancel, transport_trace, peer, principal, backlog);
    match role {
        TaskRole::Own => server.serve_stateless(request, meta, delivery),
        TaskRole::HandOff => server.serve_handing_off_task(request, meta, delivery),
        TaskRole::Body => server.serve_task_body(request, meta, delivery),
    }
    served
}

fn delivery(
    request: &Request,
    cancel: CancellationToken,
    transport_trace: Option<Arc<TransportTrace>>,
    peer: Option<Arc<Peer>>,
    principal: Option<Arc<str>>,
    backlog: usize,
) -> (Delivery, Served) {
    let (tx, messages) = mpsc::unbounded::<Vec<u8>>();
    let delivery = Delivery {
        sink: Sink::new(ServedSink {
            tx,
            backlog,
            dropped: AtomicU64::new(0),
        }),
        cancel,
        track: false,
        principal,
        peer,
        transport_trace,
    };
    let served = Served {
        messages,
        answer_prefix: wire::answer_prefix(&request.id),
    };
    (delivery, served)
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;

    fn sink(backlog: usize) -> (ServedSink, mpsc::UnboundedReceiver<Vec<u8>>) {
        let (tx, rx) = mpsc::unbounded();
        let sink = ServedSink {
            tx,
            backlog,
            dropped: AtomicU64::new(0),
        };
        (sink, rx)
    }

    fn progress(n: u32) -> Vec<u8> {
        toolyard_proto::jsonrpc::notification_bytes(
            "notifications/progress",
            &serde_json::json!({"progressToken": "t", "progress": n}),
        )
        .unwrap()
    }

    #[tokio::test]
    async fn notifications_past_the_backlog_are_dropped_and_the_answer_never_is() {
        let (sink, mut rx) = sink(3);
        for n in 0..10 {
            assert!(sink.send(progress(n)), "the peer is there");
        }
        let answer = toolyard_proto::jsonrpc::result_bytes(
            &toolyard_proto::RequestId::Number(7),
            &serde_json::json!({"content": []}),
            None,
        )
        .unwrap();
        assert!(answer.starts_with(&wire::answer_prefix(&toolyard_proto::RequestId::Number(7))));
        assert!(sink.send(answer.clone()));
        assert_eq!(sink.dropped.load(Ordering::Relaxed), 7);
        drop(sink);
        let got: Vec<Vec<u8>> = rx.by_ref().collect().await;
        assert_eq!(got, vec![progress(0), progress(1), progress(2), answer]);
    }

    #[tokio::test]
    async fn a_drained_backlog_takes_notifications_again() {
        let (sink, mut rx) = sink(2);
        for n in 0..4 {
            sink.send(progress(n));
        }
        assert_eq!(rx.try_recv().unwrap(), progress(0));
        assert_eq!(rx.try_recv().unwrap(), progress(1));
        assert!(sink.send(progress(4)));
        assert_eq!(rx.try_recv().unwrap(), progress(4));
        assert!(rx.try_recv().is_err());
    }
}
