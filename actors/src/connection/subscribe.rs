//! Subscriptions a resource's provider checks first ([`SubscribeCheckFn`]): a legacy
//! `resources/subscribe`, the URIs of a modern `subscriptions/listen`, and a legacy
//! connection's subscriptions again once its client's roots change. The check may ask the
//! client (its roots), so it runs in a task, never in the connection actor, which must stay
//! free to take the client's answer. A subscription counts only once its check passed.
//!
//! A legacy connection's subscription changes take effect in the order they came: while a
//! checked one is in a task, the later ones are chained after it ([`Chain`]).

use crate::context::{Caller, Channel, ContextInner, RequestContext};
use crate::error::HandlerError;
use crate::event_bus::{BusMsg, ListenerId};
use crate::resource::{ResourceRequest, SubscribeCheckFn};
use futures_util::FutureExt;
use ractor::ActorRef;
use std::collections::HashSet;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;
use tokio_util::sync::CancellationToken;
use toolyard_proto::{ErrorObject, ProtocolVersion, RequestId};

/// A check to run: the provider's function and the request it gets (URI, template vars).
pub(super) type Check = (SubscribeCheckFn, ResourceRequest);

/// The URIs a legacy connection is subscribed to, as recorded on the bus: what is checked
/// again when the client's roots change.
#[derive(Default, Clone)]
pub(super) struct Subscribed(Arc<Mutex<HashSet<String>>>);

impl Subscribed {
    fn set(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a subscription change on the bus, and here.
    pub(super) fn record(
        &self,
        bus: &ActorRef<BusMsg>,
        listener: ListenerId,
        subscribe: bool,
        uri: String,
    ) {
        let mut set = self.set();
        let msg = if subscribe {
            set.insert(uri.clone());
            BusMsg::Subscribe(listener, uri)
        } else {
            set.remove(&uri);
            BusMsg::Unsubscribe(listener, uri)
        };
        let _ = bus.cast(msg);
    }

    /// What is subscribed now.
    pub(super) fn snapshot(&self) -> Vec<String> {
        self.set().iter().cloned().collect()
    }

    pub(super) fn is_empty(&self) -> bool {
        self.set().is_empty()
    }
}

/// The end of a connection's chain of subscription changes in tasks.
#[derive(Default)]
pub(super) struct Chain(Option<oneshot::Receiver<()>>);

impl Chain {
    /// Whether a change is still in a task (a later one must wait for it).
    pub(super) fn busy(&mut self) -> bool {
        match &mut self.0 {
            Some(rx) => match rx.try_recv() {
                Err(oneshot::error::TryRecvError::Empty) => true,
                // Nothing is ever sent: the task dropped its end, it is done.
                _ => {
                    self.0 = None;
                    false
                }
            },
            None => false,
        }
    }

    /// Appends a link: the returned receiver completes when the change before is done, and
    /// the sender is to be dropped when this one is.
    pub(super) fn link(&mut self) -> (Option<oneshot::Receiver<()>>, oneshot::Sender<()>) {
        let (done, tail) = oneshot::channel();
        (self.0.replace(tail), done)
    }
}

/// Waits for the link before (see [`Chain::link`]).
pub(super) async fn after(before: Option<oneshot::Receiver<()>>) {
    if let Some(before) = before {
        let _ = before.await;
    }
}

/// The context a check runs in: a legacy connection's channel lets it ask the client (its
/// roots); a modern listen's is the listen request's own.
pub(super) fn context(
    id: RequestId,
    version: ProtocolVersion,
    caller: Arc<Caller>,
    channel: Channel,
    sink: crate::sink::Sink,
    cancel: CancellationToken,
    session_id: Option<Arc<str>>,
) -> RequestContext {
    RequestContext {
        inner: Arc::new(ContextInner {
            id,
            trace: None,
            version,
            caller,
            cancel,
            progress_token: None,
            sink,
            channel,
            session_id,
            task: None,
        }),
    }
}

/// Runs `checks` in order with `ctx`: `None` when the request was cancelled or the
/// connection closed first, else the first refusal (as the error to answer with) or `Ok`.
pub(super) async fn run(
    checks: Vec<Check>,
    ctx: RequestContext,
    closing: &CancellationToken,
) -> Option<Result<(), ErrorObject>> {
    let cancel = ctx.cancellation().clone();
    for (check, request) in checks {
        let uri = request.uri.clone();
        let outcome = tokio::select! {
            biased;
            () = cancel.cancelled() => return None,
            () = closing.cancelled() => return None,
            r = AssertUnwindSafe(check(ctx.clone(), request)).catch_unwind() => r,
        };
        match outcome {
            Ok(Ok(())) => {}
            Ok(Err(HandlerError::Input(crate::InputError::Cancelled))) if cancel.is_cancelled() => {
                return None
            }
            Ok(Err(e)) => return Some(Err(refusal(e, &uri))),
            Err(panic) => {
                let why = crate::exec::panic_message(&*panic);
                tracing::error!(target: "toolyard", uri = %uri, "subscription check panicked: {why}");
                return Some(Err(ErrorObject::internal(format!(
                    "the subscription check of `{uri}` panicked: {why}"
                ))));
            }
        }
    }
    Some(Ok(()))
}

/// The error a refused subscription is answered with: the shape a failed `resources/read`
/// of the same URI gets.
fn refusal(e: HandlerError, uri: &str) -> ErrorObject {
    match e {
        // A subscription has no retry to carry a modern input round.
        HandlerError::Input(crate::InputError::InputRequired) => ErrorObject::internal(format!(
            "the subscription check of `{uri}` asked the client for input, which a subscription cannot carry"
        )),
        e => crate::exec::error_of(e, uri),
    }
}
