//! Questions an upstream asks during one of our calls (elicitation, sampling, roots),
//! relayed to the downstream caller of that call, and the answers (or errors) sent back.

use futures_channel::mpsc::UnboundedSender;
use serde::Serialize;
use serde_json::Value;
use std::sync::Arc;
use tokio::sync::oneshot;
use toolyard::RequestContext;
use toolyard_client::Questions;
use toolyard_proto::ErrorObject;

/// A question an upstream server asked while one of our calls to it was in flight
/// (elicitation, sampling, roots), on its way to the downstream caller of that call.
pub(super) struct Question {
    method: &'static str,
    params: Value,
    pub(super) answer: oneshot::Sender<Result<Value, ErrorObject>>,
}

/// The answer to an upstream question no single downstream call can be named for: none
/// is in flight on that connection, or calls of more than one caller are (a legacy upstream
/// over stdio does not say which call a question belongs to, and guessing could show one
/// caller another's question).
pub(super) fn unattributed() -> ErrorObject {
    ErrorObject::internal(
        "the gateway cannot tell which of its callers this request is for: no call is in \
         flight on this connection, or calls of several callers are (give the source \
         `lifecycle = \"pooled\"` with `max_concurrency = 1`, or `transient`, so that each \
         call has a connection of its own)",
    )
}

fn to_json<T: Serialize>(v: &T) -> Value {
    serde_json::to_value(v).unwrap_or(Value::Null)
}

/// The method of an upstream's question, as one of the three a caller can be asked (the
/// client hands over no other).
fn question_method(method: &str) -> &'static str {
    match method {
        "elicitation/create" => "elicitation/create",
        "sampling/createMessage" => "sampling/createMessage",
        _ => "roots/list",
    }
}

/// The handlers that take an upstream's questions for one downstream call to that call's
/// loop (`drive` or `answering`), which puts them to the caller.
pub(super) fn relay_to(
    ctx: &RequestContext,
    questions: UnboundedSender<Box<Question>>,
) -> Questions {
    Questions::new(
        ctx.peer_id(),
        Arc::new(move |method: &str, params: Value| {
            let method = question_method(method);
            let (answer, wait) = oneshot::channel();
            // Boxed: the channel's first block of slots is allocated with it, per call.
            let sent = questions.unbounded_send(Box::new(Question {
                method,
                params,
                answer,
            }));
            Box::pin(async move {
                let gone = || ErrorObject::internal("the gateway's caller is gone");
                sent.map_err(|_| gone())?;
                wait.await.map_err(|_| gone())?
            })
        }),
    )
}

/// True when the caller declared a capability an upstream's question needs (elicitation,
/// sampling or roots): only then can a question reach it.
pub(super) fn can_be_asked(ctx: &RequestContext) -> bool {
    let c = ctx.client_capabilities();
    c.elicitation.is_some() || c.sampling.is_some() || c.roots.is_some()
}

/// The handlers for a call whose caller can be asked nothing ([`can_be_asked`]): each
/// question gets at once what relaying it would have got (its params refused if malformed,
/// else the caller's missing capability), with no channel and no loop between the upstream
/// call and the caller. The relay's channel, its polling and its drop were ~900
/// instructions of every forwarded call (benches/README.md, stop 39).
pub(super) fn refused_for(ctx: &RequestContext) -> Questions {
    let ctx = ctx.clone();
    Questions::new(
        ctx.peer_id(),
        Arc::new(move |method: &str, params: Value| {
            let ctx = ctx.clone();
            let method = question_method(method);
            Box::pin(async move {
                ask(&ctx, "upstream-0", method, &params)
                    .await
                    .map_err(relay_error)
            })
        }),
    )
}

/// Puts an upstream's question to our caller: a server-to-client request for a legacy
/// caller; for a modern one, the answer from this round's `inputResponses` or
/// `InputRequired` (the round ends and the caller retries).
pub(super) async fn put_to_caller(
    ctx: &RequestContext,
    key: &str,
    question: &Question,
) -> Result<Value, toolyard::InputError> {
    ask(ctx, key, question.method, &question.params).await
}

async fn ask(
    ctx: &RequestContext,
    key: &str,
    method: &str,
    params: &Value,
) -> Result<Value, toolyard::InputError> {
    use toolyard::InputError;
    let malformed = |e: serde_json::Error| InputError::Malformed(e.to_string());
    match method {
        "elicitation/create" => {
            let params = serde_json::from_value(params.clone()).map_err(malformed)?;
            ctx.elicit(key, params).await.map(|r| to_json(&r))
        }
        "sampling/createMessage" => {
            let params = serde_json::from_value(params.clone()).map_err(malformed)?;
            ctx.sample(key, params).await.map(|r| to_json(&r))
        }
        _ => ctx.list_roots().await.map(|r| to_json(&r)),
    }
}

pub(super) fn relay_error(e: toolyard::InputError) -> ErrorObject {
    match e {
        toolyard::InputError::Client(e) => e,
        toolyard::InputError::InputRequired => ErrorObject::internal(
            "the gateway's caller speaks 2026-07-28 and cannot answer an upstream request mid-call",
        ),
        other => ErrorObject::internal(other.to_string()),
    }
}
