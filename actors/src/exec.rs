//! Running a handler's future for one request: cancellation, panics, and the modern
//! generation's rounds (`InputRequiredResult` out, `inputResponses` + `requestState` in).

use crate::context::{Channel, InputError, RequestContext};
use crate::error::HandlerError;
use crate::middleware::Outcome;
use crate::mrtr::{RoundState, StateSealer};
use crate::reply::Reply;
use crate::request_trace::with_request_trace;
use futures_util::FutureExt;
use serde::Serialize;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use toolyard_proto::{ErrorObject, InputRequiredResult, InputResponses, ResultType};

/// Runs a request's future: polled once right here, and spawned as a task only when it is
/// not finished by then. Most tools answer without awaiting anything; for them this saves
/// a task and a wake-up per call (docs/architecture.md, hot-path rules). The first poll uses a
/// no-op waker: a future that is not ready registers it and is polled again at once by its
/// new task, which registers the real waker, so no wake-up is lost. A panic never unwinds
/// into the caller: a panic in the first poll is caught here and logged (the future is
/// dropped, which answers a request's `Reply` with an internal error), and a later one is
/// the task's. A transport that takes requests off a queue of its own may start each with
/// it too (the NATS worker does on a one-thread runtime: on more threads a task at once
/// lets another thread run a request that computes before it awaits, while the queue is
/// read on). Must be called inside a tokio runtime.
pub fn run_or_spawn(mut fut: std::pin::Pin<Box<dyn Future<Output = ()> + Send + 'static>>) {
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    match std::panic::catch_unwind(AssertUnwindSafe(|| fut.as_mut().poll(&mut cx))) {
        Ok(std::task::Poll::Ready(())) => {}
        Ok(std::task::Poll::Pending) => {
            tokio::spawn(fut);
        }
        Err(panic) => {
            tracing::error!(target: "toolyard", "a request panicked before it first awaited: {}", panic_message(&*panic));
        }
    }
}

/// What a round's `requestState` is bound to.
pub(crate) struct Binding {
    pub(crate) method: &'static str,
    pub(crate) target: String,
    pub(crate) digest: Digest,
}

/// The digest of a request's salient parameters in a round's state, computed only when a
/// round is sealed (the handler asked for input) or a sealed one is opened (a retry): most
/// requests are neither, and the digest of a tool call is a SHA-256 over its arguments
/// written out in canonical form, ~10 000 instructions of every modern `tools/call` when it
/// was computed up front (callgrind, a NATS worker serving `echo`).
pub(crate) enum Digest {
    /// Legacy requests have no rounds.
    None,
    /// Computed up front (a prompt's arguments, which its handler takes).
    Ready(String),
    /// Of the target alone (a resource's URI).
    Target,
    /// Of the target and a tool call's arguments, as the caller sent them; digested in
    /// canonical form (parsed and written back), so a retry whose client re-serialised them
    /// differently still matches.
    ToolArgs(Option<Box<serde_json::value::RawValue>>),
}

impl Binding {
    /// The digest the round's state carries.
    pub(crate) fn digest(&self) -> String {
        match &self.digest {
            Digest::None => String::new(),
            Digest::Ready(d) => d.clone(),
            Digest::Target => crate::mrtr::digest(&[self.target.as_bytes()]),
            Digest::ToolArgs(raw) => {
                let canonical = match raw {
                    None => "{}".to_owned(),
                    // The server parsed these arguments already: they are JSON.
                    Some(raw) => serde_json::from_str::<serde_json::Value>(raw.get())
                        .map_or_else(|_| raw.get().to_owned(), |v| v.to_string()),
                };
                crate::mrtr::digest(&[self.target.as_bytes(), canonical.as_bytes()])
            }
        }
    }
}

/// A modern retry's input: what the client sent back.
#[derive(Default)]
pub(crate) struct RetryInput {
    pub(crate) input_responses: Option<InputResponses>,
    pub(crate) request_state: Option<String>,
}

/// Restores a modern request's earlier rounds into its context. Errors are -32602.
pub(crate) fn restore_round(
    ctx: &RequestContext,
    sealer: &StateSealer,
    binding: &Binding,
    input: RetryInput,
) -> Result<(), ErrorObject> {
    let Channel::Modern { round, .. } = &ctx.inner.channel else {
        return Ok(());
    };
    let mut round = round.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(sealed) = input.request_state.as_deref() {
        let state = sealer.open(
            sealed,
            binding.method,
            &binding.target,
            &binding.digest(),
            ctx.principal(),
        )?;
        round.responses = state.r;
        round.state_in = state.s;
    }
    if let Some(new) = input.input_responses {
        round.responses.extend(new);
    }
    Ok(())
}

/// The message of a panic's payload.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".into())
}

/// How a successful value is judged for layers (e.g. a tool result with `isError`).
pub(crate) trait Judge {
    fn outcome(&self) -> Outcome {
        Outcome::Ok
    }

    /// The value's JSON text when it already is JSON (a forwarded result): written into the
    /// response as it is instead of through `Serialize`.
    fn raw_json(&self) -> Option<&str> {
        None
    }
}

/// Runs `fut` for the request and answers `reply` with its value, an `InputRequiredResult`, a
/// JSON-RPC error, or nothing when the request is cancelled. `on_failure` turns a handler's
/// failure into the value to answer with (tools: an `isError` result) or `None` to answer
/// with a JSON-RPC error.
pub(crate) async fn run<T, F>(
    ctx: RequestContext,
    reply: Reply,
    sealer: StateSealer,
    binding: Binding,
    fut: F,
    on_failure: impl FnOnce(&HandlerError) -> Option<T>,
) where
    T: Serialize + Judge,
    F: Future<Output = Result<T, HandlerError>> + Send,
{
    let cancel = ctx.inner.cancel.clone();
    let handler = with_request_trace(
        ctx.inner.trace.clone(),
        AssertUnwindSafe(fut).catch_unwind(),
    );
    let outcome = tokio::select! {
        biased;
        _ = cancel.cancelled() => None,
        r = handler => Some(r),
    };
    answer(ctx, reply, sealer, binding, outcome, on_failure)
}

/// What running a handler's future produced: `None` when it was cancelled, `Some(Err)` when
/// it panicked.
pub(crate) type Ran<T> = Option<std::thread::Result<Result<T, HandlerError>>>;

/// Answers `reply` with what the handler's future produced (see [`run`]).
#[allow(
    clippy::needless_pass_by_value,
    reason = "takes ownership: callers hand the value over and never use it again, so a borrow would only add noise at every call site"
)]
pub(crate) fn answer<T>(
    ctx: RequestContext,
    reply: Reply,
    sealer: StateSealer,
    binding: Binding,
    outcome: Ran<T>,
    on_failure: impl FnOnce(&HandlerError) -> Option<T>,
) where
    T: Serialize + Judge,
{
    let cancel = &ctx.inner.cancel;
    let result = match outcome {
        None => return reply.cancelled(),
        Some(Err(panic)) => {
            let why = panic_message(&*panic);
            tracing::error!(target: "toolyard", method = binding.method, target = %binding.target, "handler panicked: {why}");
            return reply.err(ErrorObject::internal(format!(
                "the handler of `{}` panicked: {why}",
                binding.target
            )));
        }
        Some(Ok(r)) => r,
    };
    match result {
        Ok(value) => complete(reply, &value),
        Err(HandlerError::Input(InputError::InputRequired)) => {
            let Some((requests, responses, state)) = ctx.take_round() else {
                return reply.err(ErrorObject::internal(
                    "input required outside a modern request",
                ));
            };
            let d = binding.digest();
            let sealed = sealer.seal(RoundState {
                m: binding.method.to_owned(),
                t: binding.target,
                d,
                p: ctx.principal().map(str::to_owned),
                e: 0,
                r: responses,
                s: state,
            });
            let result = InputRequiredResult {
                input_requests: (!requests.is_empty()).then_some(requests),
                request_state: Some(sealed),
                result_type: None,
                meta: None,
            };
            reply.ok_as(&result, ResultType::InputRequired, Outcome::InputRequired)
        }
        Err(e @ HandlerError::Input(InputError::MissingCapability(_))) => {
            reply.err(error_of(e, &binding.target))
        }
        Err(HandlerError::Input(InputError::Cancelled)) if cancel.is_cancelled() => {
            reply.cancelled()
        }
        Err(HandlerError::Protocol(e)) => reply.err(e),
        Err(e) => match on_failure(&e) {
            Some(value) => complete(reply, &value),
            None => reply.err(error_of(e, &binding.target)),
        },
    }
}

/// Answers with a complete result: written as it is when it already is JSON text (a
/// forwarded result, or the error result a forwarding tool's failure becomes), else
/// serialised.
fn complete<T: Serialize + Judge>(reply: Reply, value: &T) {
    let outcome = value.outcome();
    match value.raw_json() {
        Some(json) => reply.ok_raw(json, ResultType::Complete, outcome),
        None => reply.ok_as(value, ResultType::Complete, outcome),
    }
}

/// The JSON-RPC error a handler's failure about `target` is answered with when no result
/// can carry it: the one shape `resources/read` and subscription checks share.
pub(crate) fn error_of(e: HandlerError, target: &str) -> ErrorObject {
    match e {
        HandlerError::Protocol(e) => e,
        HandlerError::Input(InputError::MissingCapability(cap)) => {
            let mut required = serde_json::Map::new();
            required.insert(cap.to_owned(), serde_json::json!({}));
            ErrorObject::missing_capability(serde_json::Value::Object(required)).with_message(
                format!("`{target}` requires the client's `{cap}` capability"),
            )
        }
        e => ErrorObject::internal(e.to_string()),
    }
}
