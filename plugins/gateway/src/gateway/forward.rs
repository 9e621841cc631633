//! The handlers that forward calls, reads, prompts and completions to a source: a lease from its pool,
//! progress and cancellation carried through, one retry for read-only or idempotent tools,
//! and an upstream call parked while a modern caller answers its question.

use super::questions::{can_be_asked, put_to_caller, refused_for, relay_error, relay_to, Question};
use super::uri::{rename_contents, upstream_uri};
use super::Source;
use crate::error::HostError;
use crate::parked::Parkable;
use crate::pool::Lease;
use futures_channel::mpsc;
use futures_util::StreamExt;
use serde::Serialize;
use serde_json::json;
use serde_json::value::RawValue;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use toolyard::{ForwardFn, HandlerError, RawArgs, RawResult, RequestContext};
use toolyard_client::{ClientError, RequestOptions};
use toolyard_proto::{
    meta, CompleteArgument, CompleteContext, CompleteReference, CompleteRequestParams, ErrorObject,
    GetPromptResult, ReadResourceResult,
};

/// An upstream call waiting for a modern caller's retry: the retry's `requestState`
/// carries the key.
pub(super) struct Parked {
    call: tokio::task::JoinHandle<Result<Box<RawValue>, CallFailure>>,
    questions: mpsc::UnboundedReceiver<Box<Question>>,
    pending: Question,
    asked: u32,
}

impl Parkable for Parked {
    fn abort(&mut self) {
        self.call.abort();
    }
}

/// Why an upstream call produced no result: the source could not be reached (its error
/// already names it) or the call itself failed.
enum CallFailure {
    Host(HostError),
    Client(ClientError),
    /// The parked call's task was stopped (it expired, or the gateway is shutting down).
    Aborted,
}

/// How long a parked upstream call waits for the caller's retry.
pub(super) const PARK_TTL: Duration = Duration::from_secs(600);
/// How often expired parked calls are looked for.
pub(super) const PARK_SWEEP: Duration = Duration::from_secs(5);

#[derive(Serialize, serde::Deserialize)]
struct ParkKey {
    parked: String,
    asked: u32,
}

/// Whether a failed call may be sent again: only when it never reached a live server
/// connection (the process died or the connection broke), and only for tools declared
/// read-only or idempotent.
fn retryable(e: &ClientError) -> bool {
    matches!(e, ClientError::Transport(_) | ClientError::Closed)
}

#[allow(
    clippy::needless_pass_by_value,
    reason = "takes ownership: callers hand the value over and never use it again, so a borrow would only add noise at every call site"
)]
fn host_failure(e: HostError) -> HandlerError {
    HandlerError::failed(e.to_string())
}

fn client_failure(source: &str, e: ClientError) -> HandlerError {
    match e {
        ClientError::Rpc(err) => HandlerError::Protocol(err),
        ClientError::MethodNotFound(m) => HandlerError::Protocol(ErrorObject::method_not_found(&m)),
        other => HandlerError::failed(format!("source `{source}`: {other}")),
    }
}

/// The options of an upstream request made for `ctx`: its questions go to `questions`;
/// its progress goes to the downstream caller when it asked for it (otherwise no callback
/// is set up).
fn upstream_options(ctx: &RequestContext, questions: toolyard_client::Questions) -> RequestOptions {
    let mut opts = RequestOptions::default().questions(questions);
    for (key, value) in trace_meta(ctx) {
        opts = opts.meta(key, value);
    }
    if !ctx.wants_progress() {
        return opts;
    }
    let ctx = ctx.clone();
    opts.on_progress(move |p| {
        ctx.progress(p.progress, p.total, p.message.as_deref());
    })
}

/// A source's tool on the byte-level path: the caller's arguments go upstream as the text
/// they came in, and the source's result comes back as its text with our `_meta` spliced in.
pub(super) fn forward_tool(source: &Arc<Source>, upstream: String, retry: bool) -> ForwardFn {
    let source = Arc::downgrade(source);
    let upstream: Arc<str> = upstream.into();
    Arc::new(move |ctx: RequestContext, args: RawArgs| {
        let source = source.upgrade();
        let upstream = upstream.clone();
        Box::pin(async move {
            let source = source.ok_or_else(|| HandlerError::failed("the source was removed"))?;
            let started = Instant::now();
            // A modern caller's retry: resume the parked upstream call.
            if let Some(key) = ctx.state::<ParkKey>() {
                let parked = Box::pin(source.parked.take(key.parked)).await;
                let parked = parked.ok_or_else(|| {
                    HandlerError::failed(format!(
                        "source `{}`: the upstream call waiting for this answer expired",
                        source.spec.name
                    ))
                })?;
                let call: UpstreamCall = Box::pin(AbortOnDrop(parked.call));
                return drive(
                    &source,
                    &ctx,
                    call,
                    parked.questions,
                    Some(parked.pending),
                    parked.asked,
                    started,
                )
                .await;
            }
            if !can_be_asked(&ctx) {
                // Nothing to relay, so nothing to park: the call alone, with no loop
                // around it (boxed as the relayed one is, to keep this future small).
                let call = Box::pin(call_upstream(
                    source.clone(),
                    upstream,
                    args,
                    retry,
                    upstream_options(&ctx, refused_for(&ctx)),
                ));
                return finish(&source, call.await, started);
            }
            let (questions_tx, questions) = mpsc::unbounded();
            let call: UpstreamCall = Box::pin(call_upstream(
                source.clone(),
                upstream,
                args,
                retry,
                upstream_options(&ctx, relay_to(&ctx, questions_tx)),
            ));
            drive(&source, &ctx, call, questions, None, 0, started).await
        })
    })
}

/// An upstream `tools/call` under way: driven in place by the caller's handler, and moved
/// into a task of its own only when it is parked for a modern caller's retry.
type UpstreamCall =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<Box<RawValue>, CallFailure>> + Send>>;

/// The upstream call itself: a lease, the call, and one more try (on a fresh connection)
/// for read-only or idempotent tools whose call never reached a live server.
async fn call_upstream(
    source: Arc<Source>,
    upstream: Arc<str>,
    arguments: RawArgs,
    retry: bool,
    opts: RequestOptions,
) -> Result<Box<RawValue>, CallFailure> {
    let attempts = if retry { 2 } else { 1 };
    let mut last = ClientError::Closed;
    let arguments = arguments.into_raw();
    for _ in 1..=attempts {
        let lease: Lease = source.pool.lease().await.map_err(CallFailure::Host)?;
        match lease.call_tool_raw(&upstream, &arguments, &opts).await {
            Ok(result) => return Ok(result),
            Err(e) => {
                lease.report(&e);
                if !retryable(&e) {
                    return Err(CallFailure::Client(e));
                }
                last = e;
            }
        }
    }
    Err(CallFailure::Client(last))
}

/// A parked call's task, awaited again by the retry: dropping it (the retry gave up or was
/// cancelled) stops the upstream call.
struct AbortOnDrop(tokio::task::JoinHandle<Result<Box<RawValue>, CallFailure>>);

impl std::future::Future for AbortOnDrop {
    type Output = Result<Box<RawValue>, CallFailure>;
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        std::pin::Pin::new(&mut self.0)
            .poll(cx)
            .map(|joined| joined.unwrap_or(Err(CallFailure::Aborted)))
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Waits for an upstream call, putting the questions it asks to our caller. A modern
/// caller cannot answer mid-call: the call is parked (moved into a task of its own) and
/// the round ends with `InputRequired`; the caller's retry resumes it here. Dropping this
/// future (the caller cancelled) drops the call, which cancels it upstream. It does not
/// wait on the request's cancellation itself: whoever runs a forwarding handler (`exec::run`,
/// a task's `drive_call`) already does and drops it, and a second waiter on the same token
/// was ~480 instructions of every forwarded call.
async fn drive(
    source: &Arc<Source>,
    ctx: &RequestContext,
    mut call: UpstreamCall,
    mut questions: mpsc::UnboundedReceiver<Box<Question>>,
    mut pending: Option<Question>,
    mut asked: u32,
    started: Instant,
) -> Result<RawResult, HandlerError> {
    let name = &source.spec.name;
    loop {
        if let Some(question) = pending.take() {
            let key = format!("upstream-{asked}");
            // Boxed, like the other rare awaits here: the call's future is allocated whole
            // for every forwarded call, and most calls ask nothing.
            match Box::pin(put_to_caller(ctx, &key, &question)).await {
                Ok(answer) => {
                    let _ = question.answer.send(Ok(answer));
                    asked += 1;
                }
                Err(toolyard::InputError::InputRequired) => {
                    let parked_key = format!(
                        "{name}-{}",
                        source.next_park.fetch_add(1, Ordering::Relaxed)
                    );
                    ctx.set_state(&ParkKey {
                        parked: parked_key.clone(),
                        asked,
                    });
                    source.parked.park(
                        parked_key,
                        Parked {
                            call: tokio::spawn(call),
                            questions,
                            pending: question,
                            asked,
                        },
                    );
                    return Err(HandlerError::Input(toolyard::InputError::InputRequired));
                }
                Err(e) => {
                    let _ = question.answer.send(Err(relay_error(e)));
                }
            }
        }
        tokio::select! {
            done = &mut call => return finish(source, done, started),
            Some(question) = questions.next() => pending = Some(*question),
        }
    }
}

/// What an ended upstream call gives our caller.
fn finish(
    source: &Source,
    done: Result<Box<RawValue>, CallFailure>,
    started: Instant,
) -> Result<RawResult, HandlerError> {
    let name = &source.spec.name;
    match done {
        Ok(result) => annotate(&result, name, started),
        Err(CallFailure::Host(e)) => Err(host_failure(e)),
        Err(CallFailure::Client(e)) => Err(client_failure(name, e)),
        Err(CallFailure::Aborted) => Err(HandlerError::failed(format!(
            "source `{name}`: the call was aborted"
        ))),
    }
}

/// The source's result passed on, with where it came from and how long it took added to
/// its `_meta` (the upstream's `resultType` is its wire's: our server writes its own).
fn annotate(result: &RawValue, source: &str, started: Instant) -> Result<RawResult, HandlerError> {
    #[derive(Serialize)]
    struct Origin<'a> {
        name: &'a str,
        #[serde(rename = "elapsedMs")]
        elapsed_ms: f64,
    }
    let origin = serde_json::value::to_raw_value(&Origin {
        name: source,
        elapsed_ms: started.elapsed().as_secs_f64() * 1000.0,
    })
    .map_err(|e| HandlerError::failed(e.to_string()))?;
    RawResult::from_upstream_value(result, &[("io.toolyard/source", &origin)])
        .map_err(|e| HandlerError::failed(format!("source `{source}`: {e}")))
}

pub(super) fn forward_read(source: &Arc<Source>) -> toolyard::ResourceFn {
    let source = Arc::downgrade(source);
    Arc::new(move |ctx: RequestContext, request| {
        let source = source.upgrade();
        Box::pin(async move {
            let source = source.ok_or_else(|| HandlerError::failed("the source was removed"))?;
            let name = source.spec.name.clone();
            let upstream = upstream_uri(&name, &request.uri)
                .ok_or_else(|| {
                    HandlerError::failed(format!(
                        "`{}` is not a URI of source `{name}`",
                        request.uri
                    ))
                })?
                .to_owned();
            let lease = source.pool.lease().await.map_err(host_failure)?;
            let result: Result<ReadResourceResult, ClientError> = answering(&ctx, |opts| {
                let lease = &lease;
                async move { lease.read_resource_with(&upstream, &opts).await }
            })
            .await;
            match result {
                // Whole: the upstream's `_meta`, `ttlMs` and `cacheScope` reach the caller.
                Ok(read) => Ok(ReadResourceResult {
                    contents: read
                        .contents
                        .into_iter()
                        .map(|c| rename_contents(c, &name))
                        .collect(),
                    ..read
                }),
                Err(e) => {
                    lease.report(&e);
                    Err(client_failure(&name, e))
                }
            }
        })
    })
}

/// Runs an upstream request, putting the questions it asks to our caller (no parking: a
/// modern caller's questions are refused, since reads and prompts are not parked).
async fn answering<T, F>(
    ctx: &RequestContext,
    request: impl FnOnce(RequestOptions) -> F,
) -> Result<T, ClientError>
where
    F: std::future::Future<Output = Result<T, ClientError>>,
{
    if !can_be_asked(ctx) {
        return request(upstream_options(ctx, refused_for(ctx))).await;
    }
    let (tx, mut questions) = mpsc::unbounded();
    let request = request(upstream_options(ctx, relay_to(ctx, tx)));
    tokio::pin!(request);
    let mut asked = 0u32;
    loop {
        tokio::select! {
            done = &mut request => return done,
            Some(q) = questions.next() => {
                let answer = put_to_caller(ctx, &format!("upstream-{asked}"), &q).await.map_err(relay_error);
                asked += 1;
                let _ = q.answer.send(answer);
            }
        }
    }
}

pub(super) fn forward_prompt(source: &Arc<Source>, upstream: String) -> toolyard::PromptFn {
    let source = Arc::downgrade(source);
    Arc::new(move |ctx: RequestContext, args: HashMap<String, String>| {
        let source = source.upgrade();
        let upstream = upstream.clone();
        Box::pin(async move {
            let source = source.ok_or_else(|| HandlerError::failed("the source was removed"))?;
            let name = source.spec.name.clone();
            let lease = source.pool.lease().await.map_err(host_failure)?;
            let result: Result<GetPromptResult, ClientError> = answering(&ctx, |opts| {
                let lease = &lease;
                async move { lease.get_prompt_with(&upstream, json!(args), &opts).await }
            })
            .await;
            result
                .map(|mut prompt| {
                    prompt.result_type = None;
                    prompt
                })
                .map_err(|e| {
                    lease.report(&e);
                    client_failure(&name, e)
                })
        })
    })
}

/// What an upstream request made for `ctx` carries in its `_meta` so that it continues the
/// request's trace (the telemetry layer's server span, when there is one; the client's
/// observer then makes its CLIENT span a child of it) and carries its baggage on.
fn trace_meta(ctx: &RequestContext) -> impl Iterator<Item = (&'static str, &str)> {
    let parent = ctx.traceparent();
    let state = parent.and(ctx.tracestate());
    [
        (meta::TRACEPARENT, parent),
        (meta::TRACESTATE, state),
        (meta::BAGGAGE, ctx.baggage()),
    ]
    .into_iter()
    .filter_map(|(key, value)| Some((key, value?)))
}

/// A completer for one argument of a source's prompt or one variable of its resource
/// template: asks the source (`completion/complete` with the upstream names, in the
/// caller's trace) and hands back its values. Completion is a hint: a source that fails or is gone completes to nothing
/// (logged), never to an error that would break the caller's form.
pub(super) fn forward_complete(
    source: &Arc<Source>,
    reference: CompleteReference,
    argument: String,
) -> toolyard::CompleteFn {
    let source = Arc::downgrade(source);
    Arc::new(
        move |ctx: RequestContext, value: String, context: HashMap<String, String>| {
            let source = source.upgrade();
            let traced: serde_json::Map<String, serde_json::Value> = trace_meta(&ctx)
                .map(|(key, value)| (key.to_owned(), value.into()))
                .collect();
            let params = CompleteRequestParams {
                meta: (!traced.is_empty()).then_some(traced),
                r#ref: reference.clone(),
                argument: CompleteArgument {
                    name: argument.clone(),
                    value,
                },
                context: (!context.is_empty()).then(|| CompleteContext {
                    arguments: Some(context.into_iter().collect()),
                }),
            };
            Box::pin(async move {
                let Some(source) = source else {
                    return toolyard::Completions::default();
                };
                let lease = match source.pool.lease().await {
                    Ok(lease) => lease,
                    Err(e) => {
                        tracing::debug!(source = %source.spec.name, error = %e, "completion: source unavailable");
                        return toolyard::Completions::default();
                    }
                };
                match lease.complete(params).await {
                    // The source's own count and "more" flag, not just what fits in the answer.
                    Ok(result) => result.into(),
                    Err(e) => {
                        lease.report(&e);
                        tracing::debug!(source = %source.spec.name, error = %e, "completion failed upstream");
                        toolyard::Completions::default()
                    }
                }
            })
        },
    )
}
