//! Durable tasks on the bus, the running side. A task-augmented `tools/call` of a worker's
//! tool is not run by the gateway that took it: the gateway's task machinery creates the
//! record (`tasks`, KV `TY_TASKS`) and answers with the task handle, and the call it would
//! have made becomes a *job* on the JetStream work queue `TY_TASK_JOBS`, subject
//! `{prefix}.task.{server}.{tool}`, with `Nats-Msg-Id: {taskId}` (a publish retried after a
//! lost ack is de-duplicated by the stream). The workers of `server` pull the jobs from one
//! durable consumer `tyw-{server}`, so a job waits for a worker when none runs, and survives
//! the gateway, the worker and the broker (file storage) going away.
//!
//! A worker **claims** a job by compare-and-swap on the record (its instance id in
//! `worker`). JetStream delivers at least once; what a redelivery finds decides:
//! - the record is terminal: the task already ran (its worker died before its ack): ack,
//!   do not run it again;
//! - another worker's claim: that worker is asked over core NATS
//!   (`{prefix}.taskctl.{taskId}`, which it answers while it runs the task). An answer means
//!   it is alive but slow to acknowledge: the job is put back for later (`nak` with a
//!   delay). No answer (it died, or hangs) and this worker takes the task over with a new
//!   claim; the stalled one's late result then loses its compare-and-swap and is dropped,
//!   so the task has exactly one terminal state;
//! - no claim: claim it and run it.
//!
//! While running, the worker tells JetStream it is working (`+WPI`, a third of `ack_wait`),
//! watches the record (a `tasks/cancel` on any gateway, or another worker's take-over,
//! cancels the handler), and writes the terminal record before it acks. The gateway that
//! took the call waits on the record too, so its subscribers hear the outcome; if that
//! gateway is gone, `tasks/get` on any other one reads it.
//!
//! A tool that asks its caller for input does not keep its job while a person takes hours
//! to answer: the worker puts the questions in the record with what the call goes on with
//! (`tasks::Resume`), lets go of the task and acks the job. Whoever records the last answer
//! publishes the job resuming it (`Mcp-Task-Id`, `Mcp-Resume-Round`), which any worker takes
//! for the round the record waits in, and nothing else.

use crate::error::NatsError;
use crate::served::{serve_here, Served, NOTIFICATION_BACKLOG};
use crate::tasks::{self, NatsTaskStore, Stored};
use crate::wire;
use async_nats::jetstream::consumer::{pull, AckPolicy, PullConsumer};
use async_nats::jetstream::{self, stream, AckKind};
use async_nats::{Client, HeaderValue};
use bytes::Bytes;
use futures_util::StreamExt;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use toolyard::{
    HandlerError, RawArgs, RawResult, RequestContext, Server, TaskRecord, TaskRole, TaskUpdate,
};
use toolyard_proto::jsonrpc::{self, Incoming};
use toolyard_proto::{
    ClientCapabilities, ErrorObject, InputRequests, InputResponses, RequestMeta, TaskStatus,
};

/// The JetStream stream of task jobs (work-queue retention: a job is gone once acked).
pub const STREAM: &str = "TY_TASK_JOBS";

/// `Mcp-Deadline`: when the task's TTL runs out (unix ms); a job dequeued after it is
/// terminated, not run.
pub const DEADLINE: &str = "Mcp-Deadline";

/// `Mcp-Task-Id`: the task a job resuming it after its caller's answers belongs to (its
/// `Nats-Msg-Id` is `{taskId}.{round}`; a first job's message id is the task's id).
pub const TASK_ID: &str = "Mcp-Task-Id";

/// `Mcp-Resume-Round`: the input round a resuming job goes on from (1 after the tool's first
/// question).
pub const RESUME_ROUND: &str = "Mcp-Resume-Round";

/// A job body at most this large is kept in the record of a task waiting for input; a larger
/// one waits in `TY_TASK_BODIES` (as a request too large for its job does from the start).
const PARKED_BODY_INLINE: usize = 64 * 1024;

/// How long a job may wait in its stream; a task's request too large for its job lives as
/// long in `TY_TASK_BODIES`.
const JOB_MAX_AGE: Duration = Duration::from_secs(7 * 24 * 3600);

/// Where the requests of the jobs of a stream with `replicas` replicas go when they do not fit
/// the job itself.
pub(crate) fn bodies(replicas: usize) -> crate::claims::Bucket {
    crate::claims::Bucket::task_bodies(JOB_MAX_AGE, replicas.max(1))
}

/// How long a claim's owner has to answer "are you running it?".
const OWNER_PING: Duration = Duration::from_secs(1);

/// How long one pull waits for a job before asking again.
const PULL_EXPIRES: Duration = Duration::from_secs(5);

/// How long past its expiry a pull is given up on when the broker said nothing (async-nats
/// waits 5 s more).
const PULL_GRACE: Duration = Duration::from_millis(500);

/// The subject of a job of `tool` on job queue `queue` (a server's pool:
/// [`Scope::job_queue`](crate::Scope::job_queue)).
pub(crate) fn subject(prefix: &str, queue: &str, tool: &str) -> String {
    let tool = if wire::token_safe(tool) { tool } else { "_" };
    format!("{prefix}.task.{queue}.{tool}")
}

/// Where a task's running worker answers (and listens) while it runs it.
pub(crate) fn control_subject(prefix: &str, task_id: &str) -> String {
    format!("{prefix}.taskctl.{task_id}")
}

/// The consumer the workers of job queue `queue` share.
fn consumer_name(queue: &str) -> String {
    format!("tyw-{queue}")
}

/// The subjects of the jobs of `queue` (`subject` for each tool). No two queues' overlap (a
/// work-queue stream refuses consumers whose subjects do), a scoped pool's queue being one
/// token of its own (`calc~acme`).
fn task_subjects(prefix: &str, queue: &str) -> String {
    format!("{prefix}.task.{queue}.>")
}

/// Where the jobs of `queue` come from: its task subjects, through the shared consumer.
pub(crate) fn peer(prefix: &str, queue: &str) -> toolyard::Peer {
    toolyard::Peer::nats(
        task_subjects(prefix, queue),
        Some(consumer_name(queue).into()),
    )
}

/// Opens (or creates) the job stream for `prefix`.
pub(crate) async fn stream(
    js: &jetstream::Context,
    prefix: &str,
    replicas: usize,
) -> Result<stream::Stream, NatsError> {
    js.get_or_create_stream(stream::Config {
        name: STREAM.to_owned(),
        description: Some("Toolyard: durable task jobs, one per task".to_owned()),
        subjects: vec![format!("{prefix}.task.>")],
        retention: stream::RetentionPolicy::WorkQueue,
        max_age: JOB_MAX_AGE,
        duplicate_window: Duration::from_secs(120),
        num_replicas: replicas.max(1),
        ..Default::default()
    })
    .await
    .map_err(|e| NatsError::Bus(format!("the task job stream {STREAM}: {e}")))
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// How long a task's job is published again while the work queue does not take it. The
/// task exists already (its record was written, its caller may have its id), and a stream
/// whose cluster has just got its quorum back answers "no stream found" until it has elected
/// its leader, for a few seconds: three tries over 0.6 s failed such a task in CI.
const PUBLISH_BUDGET: Duration = Duration::from_secs(8);

fn unavailable(e: impl std::fmt::Display) -> HandlerError {
    HandlerError::Protocol(ErrorObject::internal(format!(
        "durable queue unavailable: {e}"
    )))
}

// ---------------------------------------------------------------------------------------
// The gateway's side
// ---------------------------------------------------------------------------------------

/// Where a deferred tool's task was handed back: the task, its job's subject, deadline and
/// body, and whether every worker of its job queue reads a body from `TY_TASK_BODIES`.
struct HandedOffAt<'a> {
    task_id: &'a str,
    queue: &'a str,
    subject: String,
    deadline: Option<u64>,
    body: Bytes,
    bodies_read: bool,
}

/// Where a deferred tool's call stood when its worker handed its task back
/// (`Mcp-Task-Handoff`): the round it reached, and the answers and state it was sent with.
/// The task's job goes on from there, asking nothing already answered.
#[derive(Debug)]
pub(crate) struct Handoff {
    /// How many times the tool had asked.
    pub(crate) round: u32,
    pub(crate) input_responses: InputResponses,
    pub(crate) request_state: Option<String>,
}

/// What a gateway needs to hand a task's call to the workers and wait for its end.
#[derive(Debug)]
pub(crate) struct Submitter {
    js: jetstream::Context,
    store: NatsTaskStore,
    prefix: String,
    /// Where a request too large for its job goes.
    bodies: crate::claims::Bucket,
}

impl Submitter {
    pub(crate) async fn open(
        client: &Client,
        prefix: &str,
        replicas: usize,
    ) -> Result<Submitter, NatsError> {
        let js = crate::catalog::context(client.clone());
        stream(&js, prefix, replicas).await?;
        let kv = tasks::bucket(&js, replicas).await?;
        Ok(Submitter {
            store: NatsTaskStore::from_bucket(js.clone(), kv),
            js,
            prefix: prefix.to_owned(),
            bodies: bodies(replicas),
        })
    }

    /// Publishes the job of task `task_id` (a call of `tool` with `args`, on job queue
    /// `queue`: the server's pool that serves this gateway, [`crate::Scope::job_queue`]) and
    /// waits until its record is terminal; what the call answered then. A request too large
    /// for the job goes to `TY_TASK_BODIES` when `bodies_read` (every worker of `queue`
    /// reads it there), and is -32012 otherwise. `handoff`: a deferred tool's task, handed
    /// back in a later round: its job goes on from that round ([`Handoff`]).
    #[allow(
        clippy::too_many_arguments,
        reason = "the call's parts as the forwarding path holds them; bundling them would copy them per call"
    )]
    pub(crate) async fn run(
        &self,
        ctx: &RequestContext,
        task_id: &str,
        queue: &str,
        tool: &str,
        args: &RawArgs,
        bodies_read: bool,
        principal: Option<&str>,
        handoff: Option<Handoff>,
    ) -> Result<RawResult, HandlerError> {
        let Some((stored, _)) = self.store.read(task_id).await.map_err(unavailable)? else {
            return Err(unavailable(format!("task {task_id} has no record")));
        };
        let mut body = Vec::with_capacity(64 + tool.len());
        body.extend_from_slice(b"{\"name\":");
        // A `&str` always serialises.
        body.extend_from_slice(&serde_json::to_vec(tool).unwrap_or_default());
        body.extend_from_slice(b",\"arguments\":");
        body.extend_from_slice(args.get().as_bytes());
        {
            // What the caller can answer, so that the worker's tool may ask it through the
            // record: a tasks-extension caller reads the questions with `tasks/get` and
            // answers with `tasks/update`; a 2025-11-25 session is asked by this gateway.
            let caps = ctx.client_capabilities();
            let asks = ClientCapabilities {
                roots: caps.roots.clone(),
                sampling: caps.sampling.clone(),
                elicitation: caps.elicitation.clone(),
                ..ClientCapabilities::default()
            };
            if asks != ClientCapabilities::default() {
                body.extend_from_slice(b",\"clientCapabilities\":");
                // Plain JSON values always serialise.
                body.extend_from_slice(&serde_json::to_vec(&asks).unwrap_or_default());
            }
        }
        if let Some(principal) = principal {
            // The job's own subject has no user token to bind it to (`crate::principal`): a
            // worker takes it as it takes the job, from a writer of the job queue.
            body.extend_from_slice(b",\"principal\":");
            body.extend_from_slice(&serde_json::to_vec(principal).unwrap_or_default());
        }
        body.push(b'}');
        let body = Bytes::from(body);
        let subject = subject(&self.prefix, queue, tool);
        let relay = (!stored.is_extension()).then(|| ctx.clone());
        if let Some(handoff) = handoff.filter(|h| h.round > 0 && !h.input_responses.is_empty()) {
            let at = HandedOffAt {
                task_id,
                queue,
                subject,
                deadline: stored.expires_at_ms(),
                body,
                bodies_read,
            };
            Box::pin(self.go_on_from(ctx, at, handoff)).await?;
            return self.wait(task_id, relay).await;
        }
        // Set once the request went to `TY_TASK_BODIES` (named by the task's id).
        let mut claimed = false;
        let message = |claimed: bool| {
            let mut m = jetstream::message::PublishMessage::build()
                .payload(if claimed { Bytes::new() } else { body.clone() })
                .message_id(task_id);
            if claimed {
                m = m.header(wire::BODY_CLAIM, task_id);
            }
            if let Some(at) = stored.expires_at_ms() {
                m = m.header(DEADLINE, at.to_string().as_str());
            }
            // The caller's text, which a header cannot always carry (a line break, which
            // async-nats would turn into a space): what does not parse stays out.
            let value = |text: Option<&str>| text?.parse::<HeaderValue>().ok();
            if let Some(tp) = value(ctx.traceparent()) {
                m = m.header(wire::TRACEPARENT, tp);
                if let Some(ts) = value(ctx.tracestate()) {
                    m = m.header(wire::TRACESTATE, ts);
                }
            }
            if let Some(baggage) = value(ctx.baggage()) {
                m = m.header(wire::BAGGAGE, baggage);
            }
            m
        };
        // A lost ack is retried with the same message id: the stream keeps one job.
        let mut last = String::new();
        let mut published = false;
        let mut attempt = 0u64;
        let give_up = tokio::time::Instant::now() + PUBLISH_BUDGET;
        loop {
            match self
                .js
                .send_publish(subject.clone(), message(claimed))
                .await
            {
                Ok(ack) => match ack.await {
                    Ok(_) => {
                        published = true;
                        break;
                    }
                    Err(e) => last = e.to_string(),
                },
                // Sending it again as it is cannot help: the request goes where a job's
                // request may wait as long as the job, and the job names it.
                Err(e)
                    if e.kind() == jetstream::context::PublishErrorKind::MaxPayloadExceeded
                        && !claimed =>
                {
                    if !bodies_read {
                        return Err(HandlerError::Protocol(ErrorObject::new(
                            wire::PAYLOAD_TOO_LARGE,
                            format!(
                                "the task's request ({} bytes) does not fit the bus's max_payload, \
                                 and not every worker of `{queue}` reads a task's request from \
                                 {} ({e})",
                                body.len(),
                                crate::claims::TASK_BODIES,
                            ),
                        )));
                    }
                    let client = self.js.client();
                    let max_payload = client.server_info().max_payload;
                    let put =
                        crate::claims::put_as(&client, self.bodies, task_id, &body, max_payload);
                    if let Err(e) = Box::pin(put).await {
                        return Err(HandlerError::Protocol(ErrorObject::new(
                            wire::PAYLOAD_TOO_LARGE,
                            format!("the task's request does not fit the bus, and {e}"),
                        )));
                    }
                    claimed = true;
                    continue;
                }
                Err(e) => last = e.to_string(),
            }
            if tokio::time::Instant::now() >= give_up {
                break;
            }
            tokio::time::sleep(Duration::from_millis(200 * (attempt + 1).min(5))).await;
            attempt += 1;
        }
        if !published {
            if claimed {
                crate::claims::discard_from(&self.js.client(), self.bodies, task_id);
            }
            return Err(unavailable(last));
        }
        self.wait(task_id, relay).await
    }

    /// Publishes the job of a deferred tool's task handed back after `handoff.round` rounds
    /// as a task that waited for input and has its answers: the record says where the call
    /// goes on (`resume`: its body, round and state) with the round's answers, and the job
    /// resuming it is published (by whoever can, should this gateway go: `NatsTaskStore::resume`).
    /// The resuming worker renews the state, as for any task it resumes.
    async fn go_on_from(
        &self,
        ctx: &RequestContext,
        at: HandedOffAt<'_>,
        handoff: Handoff,
    ) -> Result<(), HandlerError> {
        let HandedOffAt {
            task_id,
            queue,
            subject,
            deadline,
            body,
            bodies_read,
        } = at;
        let inline = if body.len() <= PARKED_BODY_INLINE {
            String::from_utf8(body.to_vec())
                .ok()
                .and_then(|t| serde_json::value::RawValue::from_string(t).ok())
        } else {
            None
        };
        if inline.is_none() {
            if !bodies_read {
                return Err(HandlerError::Protocol(ErrorObject::new(
                    wire::PAYLOAD_TOO_LARGE,
                    format!(
                        "the task's request ({} bytes) is too large to keep in its record, and \
                         not every worker of `{queue}` reads a task's request from {}",
                        body.len(),
                        crate::claims::TASK_BODIES,
                    ),
                )));
            }
            let client = self.js.client();
            let max_payload = client.server_info().max_payload;
            let put = crate::claims::put_as(&client, self.bodies, task_id, &body, max_payload);
            Box::pin(put).await.map_err(|e| {
                unavailable(format!(
                    "keeping the task's request in {}: {e}",
                    crate::claims::TASK_BODIES
                ))
            })?;
        }
        let mut headers = Vec::new();
        if let Some(at) = deadline {
            headers.push((DEADLINE.to_owned(), at.to_string()));
        }
        // As a job's headers: only what a header can carry.
        let mut header = |name: &str, value: Option<&str>| {
            if let Some(v) = value.filter(|v| v.parse::<HeaderValue>().is_ok()) {
                headers.push((name.to_owned(), v.to_owned()));
            }
        };
        if ctx
            .traceparent()
            .is_some_and(|p| p.parse::<HeaderValue>().is_ok())
        {
            header("traceparent", ctx.traceparent());
            header("tracestate", ctx.tracestate());
        }
        header("baggage", ctx.baggage());
        let resume = tasks::Resume {
            subject,
            round: handoff.round,
            body: inline,
            request_state: handoff.request_state.map(serde_json::Value::String),
            headers,
        };
        let answers = handoff.input_responses;
        let (stored, ()) = self
            .store
            .modify(task_id, None, |s| {
                if s.status.is_terminal() {
                    return Err(toolyard::TaskStoreError::Terminal(s.status));
                }
                s.resume = Some(resume.clone());
                s.input_responses = answers.clone();
                Ok(())
            })
            .await
            .map_err(unavailable)?;
        // Not published: the store keeps trying while the task waits (and so does every
        // gateway that sees it answered and waiting), so the task goes on once the bus
        // takes it.
        if let Err(e) = self.store.resume(task_id, &stored).await {
            tracing::warn!(target: "toolyard::nats", task = %task_id, error = %e, "a deferred task's job is not published yet");
        }
        Ok(())
    }

    /// Waits for the record of `task_id` to be terminal: a watch on its key, and a read every
    /// few seconds in case the watch was lost with the connection. With `relay` (a 2025-11-25
    /// task's context), the questions the worker puts in the record are asked of that
    /// session, and its answers written back for the worker.
    async fn wait(
        &self,
        task_id: &str,
        relay: Option<RequestContext>,
    ) -> Result<RawResult, HandlerError> {
        let mut poll = tokio::time::interval(Duration::from_secs(5));
        let mut asked = std::collections::HashSet::new();
        let mut asking = tokio::task::JoinSet::new();
        loop {
            let mut watch = self.store.watch(task_id).await;
            loop {
                let stored = tokio::select! {
                    entry = async {
                        match &mut watch {
                            Some(w) => w.next().await,
                            None => std::future::pending().await,
                        }
                    } => match entry {
                        Some(Ok(e)) => Stored::parse(&e.value).ok(),
                        // The watch ended: open another.
                        Some(Err(_)) | None => break,
                    },
                    _ = poll.tick() => self.store.read(task_id).await.ok().flatten().map(|(s, _)| s),
                };
                let Some(stored) = stored else { continue };
                if stored.status.is_terminal() {
                    return finished(&stored.record());
                }
                if let Some(ctx) = &relay {
                    // A question no longer outstanding may be asked again later (by a worker
                    // that took the task over and runs it from the start).
                    asked.retain(|key| stored.input_requests.contains_key(key));
                    let new: Vec<_> = stored
                        .input_requests
                        .iter()
                        .filter(|(key, _)| asked.insert((*key).clone()))
                        .map(|(key, request)| (key.clone(), request.clone()))
                        .collect();
                    if !new.is_empty() {
                        let (ctx, store, id) =
                            (ctx.clone(), self.store.clone(), task_id.to_owned());
                        asking.spawn(async move {
                            match ctx.gather(new).await {
                                Ok(answers) => {
                                    if let Err(e) = store.answered(&id, answers).await {
                                        tracing::warn!(task = %id, error = %e, "could not write the session's answers for the task's worker");
                                    }
                                }
                                Err(e) => tracing::info!(task = %id, error = %e, "the session did not answer the task's question"),
                            }
                        });
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
}

/// Publishes the job that goes on with task `id` where `resume` says it waits (see
/// [`NatsTaskStore::resume`]): its body (or the name of its body in `TY_TASK_BODIES`) and
/// headers, `Mcp-Task-Id`, `Mcp-Resume-Round`, and the message id `{id}.{round}`, which the
/// stream de-duplicates. A lost ack is retried, as for a task's first job.
pub(crate) async fn publish_resume(
    js: &jetstream::Context,
    id: &str,
    resume: &tasks::Resume,
) -> Result<(), String> {
    let message = || {
        let mut m = jetstream::message::PublishMessage::build()
            .message_id(format!("{id}.{}", resume.round))
            .header(TASK_ID, id)
            .header(RESUME_ROUND, resume.round.to_string().as_str());
        m = match &resume.body {
            Some(body) => m.payload(Bytes::copy_from_slice(body.get().as_bytes())),
            None => m.header(wire::BODY_CLAIM, id),
        };
        for (name, value) in &resume.headers {
            // Read from a job's headers, so they parse; a record written by hand may not.
            if let Ok(value) = value.parse::<HeaderValue>() {
                m = m.header(name.as_str(), value);
            }
        }
        m
    };
    let mut last = String::new();
    for attempt in 0..3u64 {
        match js.send_publish(resume.subject.clone(), message()).await {
            Ok(ack) => match ack.await {
                Ok(_) => return Ok(()),
                Err(e) => last = e.to_string(),
            },
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(200 * (attempt + 1))).await;
    }
    Err(last)
}

/// What a finished task's call answered.
fn finished(record: &TaskRecord) -> Result<RawResult, HandlerError> {
    match (&record.status, &record.outcome) {
        (_, Some(toolyard::TaskOutcome::Result(obj))) => {
            let text = serde_json::to_string(obj).unwrap_or_default();
            RawResult::from_upstream(&text, &[])
                .map_err(|e| HandlerError::Protocol(ErrorObject::internal(e.to_string())))
        }
        (_, Some(toolyard::TaskOutcome::Error(e))) => Err(HandlerError::Protocol(e.clone())),
        (TaskStatus::Cancelled, None) => Err(HandlerError::Protocol(ErrorObject::internal(
            "the task was cancelled",
        ))),
        _ => Err(HandlerError::Protocol(ErrorObject::internal(
            "the task ended without a result",
        ))),
    }
}

// ---------------------------------------------------------------------------------------
// The worker's side
// ---------------------------------------------------------------------------------------

/// What a worker needs to run the jobs of its server.
#[derive(Debug)]
pub(crate) struct Runner {
    pub(crate) server: Server,
    pub(crate) client: Client,
    /// A connection the jobs do not travel on (the worker's requests' one), for reading the
    /// stream when a job the client cannot read keeps dropping `client` (`unreadable`).
    pub(crate) lookup: Client,
    pub(crate) store: NatsTaskStore,
    pub(crate) instance: String,
    pub(crate) prefix: String,
    /// Where the jobs come from, as telemetry reports it (`messaging.*`).
    pub(crate) peer: Arc<toolyard::Peer>,
    pub(crate) ack_wait: Duration,
    pub(crate) draining: CancellationToken,
    pub(crate) abandon: CancellationToken,
    pub(crate) tracker: TaskTracker,
    /// The tasks this worker runs now: a redelivery of one of them (its progress signal was
    /// lost) is put back, not run a second time beside itself.
    pub(crate) running: std::sync::Mutex<std::collections::HashSet<String>>,
    /// Where a job's request is when it did not fit the job (`Mcp-Body-Claim`).
    pub(crate) bodies: crate::claims::Bucket,
    /// The largest such request read (the worker's `max_claimed_request_bytes`).
    pub(crate) max_body: usize,
}

/// A task this worker runs, held while it does.
struct Running<'a> {
    runner: &'a Runner,
    task_id: String,
}

impl<'a> Running<'a> {
    fn enter(runner: &'a Runner, task_id: &str) -> Option<Running<'a>> {
        let fresh = runner
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(task_id.to_owned());
        fresh.then(|| Running {
            runner,
            task_id: task_id.to_owned(),
        })
    }
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        self.runner
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.task_id);
    }
}

/// The durable consumer of job queue `queue` (created by the first worker of that pool).
pub(crate) async fn consumer(
    client: &Client,
    prefix: &str,
    queue: &str,
    ack_wait: Duration,
    replicas: usize,
) -> Result<(PullConsumer, NatsTaskStore), NatsError> {
    let js = crate::catalog::context(client.clone());
    let stream = stream(&js, prefix, replicas).await?;
    let kv = tasks::bucket(&js, replicas).await?;
    let name = consumer_name(queue);
    let consumer = stream
        .get_or_create_consumer::<pull::Config>(
            &name,
            pull::Config {
                durable_name: Some(name.clone()),
                description: Some(format!("Toolyard workers of {queue}")),
                filter_subject: task_subjects(prefix, queue),
                ack_policy: AckPolicy::Explicit,
                ack_wait,
                ..Default::default()
            },
        )
        .await
        .map_err(|e| NatsError::Bus(format!("the job consumer {name}: {e}")))?;
    Ok((consumer, NatsTaskStore::from_bucket(js, kv)))
}

/// Looks for jobs and task records the client cannot read (`unreadable`) beside the pulls,
/// at most once a second: a connection that flaps for another reason does not make a pass
/// each time.
fn look_for_unreadable(
    runner: &Runner,
    consumer: &PullConsumer,
    looked: &mut Option<tokio::time::Instant>,
) {
    if looked.is_some_and(|at| at.elapsed() < Duration::from_secs(1)) {
        return;
    }
    *looked = Some(tokio::time::Instant::now());
    // Read through the other connection: the jobs' one drops at each delivery of such a job
    // (every `ack_wait`), and a pass over it could be cut short each time.
    let js = crate::catalog::context(runner.lookup.clone());
    let name = consumer.cached_info().name.clone();
    let draining = runner.draining.clone();
    // Not in the tracker: a drain does not wait for it.
    tokio::spawn(async move {
        // The jobs, and the task records this worker watches on the jobs' connection.
        let pass = async {
            crate::unreadable::remove_handed_out(&js, STREAM, &name).await;
            crate::unreadable::remove_in(&js, crate::unreadable::TASKS_STREAM).await;
        };
        tokio::select! {
            () = pass => {}
            () = draining.cancelled() => {}
        }
    });
}

/// Pulls jobs one at a time while a slot is free, each run in the worker's tracker, until
/// the worker drains.
pub(crate) async fn serve(runner: Arc<Runner>, consumer: PullConsumer, concurrency: usize) {
    use futures_util::FutureExt as _;
    let permits = Arc::new(Semaphore::new(concurrency.max(1)));
    let events = crate::connection_events();
    let statistics = runner.client.statistics();
    let mut looked: Option<tokio::time::Instant> = None;
    let mut last_connects: Option<u64> = None;
    'pull: loop {
        let permit = tokio::select! {
            p = permits.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => return,
            },
            () = runner.draining.cancelled() => return,
        };
        // Pulled only while connected (see below why not otherwise).
        tokio::select! {
            () = crate::connection::connected(&runner.client) => {}
            () = runner.draining.cancelled() => return,
        }
        // The connection changed since the last pull (whichever step it dropped in): it may
        // have dropped over a job the client cannot read, which would come back every
        // `ack_wait`: such jobs are looked for and removed.
        let now = statistics
            .connects
            .load(std::sync::atomic::Ordering::Relaxed);
        if last_connects.is_some_and(|last| last != now) {
            look_for_unreadable(&runner, &consumer, &mut looked);
        }
        last_connects = Some(now);
        // Armed before the pull: a pull made on a connection that then drops is gone with it
        // (the broker restarted, say), and its batch would wait out its expiry and 5 s more
        // before this worker pulled again, while jobs waited.
        let mut bus_changed = std::pin::pin!(events.notified());
        bus_changed.as_mut().enable();
        let connects = statistics
            .connects
            .load(std::sync::atomic::Ordering::Relaxed);
        let pull = tokio::time::timeout(
            PULL_EXPIRES + PULL_GRACE,
            consumer
                .fetch()
                .max_messages(1)
                .expires(PULL_EXPIRES)
                .messages(),
        );
        let batch = tokio::select! {
            b = pull => match b {
                Ok(b) => b,
                Err(_) => {
                    tracing::debug!("a task-job pull was not made in time: pulling again");
                    continue;
                }
            },
            () = runner.draining.cancelled() => return,
        };
        // A pull the broker dropped (no job, no end of it) is given up on here.
        let given_up = tokio::time::sleep(PULL_EXPIRES + PULL_GRACE);
        tokio::pin!(given_up);
        let mut batch = match batch {
            Ok(b) => b,
            Err(e) => {
                tracing::debug!(error = %e, "pulling a task job failed; trying again");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
        };
        let next = loop {
            tokio::select! {
                m = batch.next() => break m,
                () = bus_changed.as_mut() => {
                    // The events are process-wide: most are another client's (any connection
                    // made in this process), and dropping this pull for them would lose the
                    // job on its way to it until its `ack_wait`.
                    tokio::time::sleep(crate::connection::EVENT_SETTLES).await;
                    bus_changed.set(events.notified());
                    bus_changed.as_mut().enable();
                    let same = statistics.connects.load(std::sync::atomic::Ordering::Relaxed)
                        == connects
                        && matches!(
                            runner.client.connection_state(),
                            async_nats::connection::State::Connected
                        );
                    if same {
                        continue;
                    }
                    // A job the broker handed to this pull before the change is run.
                    if let Some(m) = batch.next().now_or_never() {
                        break m;
                    }
                    // The next pull waits for the connection: one made while disconnected
                    // would be sent on reconnecting, and the broker could hand a job to it
                    // just as this worker, woken by the reconnection, drops it for a new one
                    // (the job then waits for its `ack_wait`).
                    tracing::debug!("the bus connection changed: pulling task jobs again");
                    continue 'pull;
                }
                () = given_up.as_mut() => {
                    if let Some(m) = batch.next().now_or_never() {
                        break m;
                    }
                    tracing::debug!("a task-job pull the broker did not end: pulling again");
                    continue 'pull;
                }
                () = runner.draining.cancelled() => return,
            }
        };
        match next {
            Some(Ok(message)) => {
                let r = runner.clone();
                runner.tracker.spawn(async move {
                    // The slot goes with the job.
                    let _slot = permit;
                    run_job(&r, message).await;
                });
            }
            Some(Err(e)) => tracing::debug!(error = %e, "a task job pull ended"),
            None => {}
        }
    }
}

/// How many times a job's last ack is sent in all when the broker does not confirm it.
const ACK_TRIES: u32 = 4;

/// Acknowledges a job for good (a double ack: the broker confirms it). When the
/// confirmation does not come (the connection dropped as the ack was sent, a broker
/// restarting), the ack is sent again every second a few times, in the background: else the
/// job stays pending until its `ack_wait` and is delivered again for nothing. `outcome` says
/// what a redelivery finds if every try fails.
async fn confirm_ack(message: jetstream::Message, task_id: String, outcome: &'static str) {
    if message.double_ack().await.is_ok() {
        return;
    }
    tokio::spawn(async move {
        for tries in 2..=ACK_TRIES {
            tokio::time::sleep(Duration::from_secs(1)).await;
            match message.double_ack().await {
                Ok(()) => return,
                Err(e) if tries == ACK_TRIES => {
                    tracing::warn!(task = %task_id, error = %e, tries, "a job's ack was not confirmed: {outcome}");
                }
                Err(_) => {}
            }
        }
    });
}

async fn ack(message: &jetstream::Message, kind: AckKind, task_id: &str) {
    if let Err(e) = message.ack_with(kind).await {
        tracing::warn!(task = %task_id, error = %e, "acknowledging a task job failed");
    }
}

/// Runs one delivery of a job to its end (see the module's doc for what it decides).
async fn run_job(runner: &Runner, message: jetstream::Message) {
    let Some((task_id, round)) = job_of(&message) else {
        tracing::warn!(subject = %message.subject, "a task job without a usable Nats-Msg-Id (or Mcp-Task-Id and Mcp-Resume-Round): terminated");
        return ack(&message, AckKind::Term, "?").await;
    };
    // A request too large for the job is in `TY_TASK_BODIES` under the task's id, read
    // once this worker owns the task (a redelivery of a finished task finds it deleted).
    let claimed = wire::header(&message, wire::BODY_CLAIM).is_some();
    let call = if claimed {
        None
    } else {
        match read_call(&message.payload) {
            Ok(c) => Some(c),
            Err(error) => return fail_unreadable(runner, &message, &task_id, error).await,
        }
    };
    if let Some(at) = wire::header(&message, DEADLINE).and_then(|d| d.parse::<u64>().ok()) {
        if at <= now_ms() {
            tracing::info!(task = %task_id, "a task job dequeued after its task expired: terminated");
            forget_body(runner, claimed, &task_id);
            return ack(&message, AckKind::Term, &task_id).await;
        }
    }
    let Some(_running) = Running::enter(runner, &task_id) else {
        tracing::debug!(task = %task_id, "redelivered while this worker runs it: put back");
        // A job resuming the task may come while this worker is still letting go of it
        // (its answer given at once): looked at again soon, not after `ack_wait`.
        let again = if round > 0 {
            Duration::from_millis(200)
        } else {
            runner.ack_wait
        };
        return ack(&message, AckKind::Nak(Some(again)), &task_id).await;
    };
    let resumed = match claim(runner, &task_id, round).await {
        Claim::Run(resumed) => resumed,
        Claim::Past => {
            // Delivered again after its worker left the task waiting for input (its ack was
            // lost), or a resuming job published twice: the task goes on from its record.
            tracing::debug!(task = %task_id, round, "a job of a round the task is past: dropped");
            return ack(&message, AckKind::Ack, &task_id).await;
        }
        Claim::Done => {
            forget_body(runner, claimed, &task_id);
            return ack(&message, AckKind::Ack, &task_id).await;
        }
        Claim::Later => {
            return ack(&message, AckKind::Nak(Some(runner.ack_wait)), &task_id).await;
        }
        Claim::Soon => {
            return ack(&message, AckKind::Nak(Some(CLAIM_AGAIN)), &task_id).await;
        }
        Claim::Gone => {
            forget_body(runner, claimed, &task_id);
            return ack(&message, AckKind::Term, &task_id).await;
        }
    };
    let call = match call {
        Some(call) => call,
        None => match read_body(runner, &message, &task_id).await {
            Ok(call) => call,
            Err(error) => return fail_unreadable(runner, &message, &task_id, error).await,
        },
    };
    // Its request moved to `TY_TASK_BODIES` by a wait for input that did not happen after all
    // (every answer was there, or the record refused it).
    let mut moved = false;
    let answer = execute(runner, &message, &task_id, call, round, resumed, &mut moved).await;
    match answer {
        Ran::Answered(outcome) => {
            if finish(runner, &task_id, outcome).await {
                forget_body(runner, claimed || moved, &task_id);
                confirm_ack(
                    message,
                    task_id,
                    "the task finished; a redelivery will find it finished",
                )
                .await;
            }
        }
        // Cancelled by a `tasks/cancel` (the record is terminal) or taken over by another
        // worker (whose delivery it is now, and which needs the request): nothing to write.
        Ran::Stopped => {
            if (claimed || moved) && is_finished(runner, &task_id).await {
                forget_body(runner, true, &task_id);
            }
            ack(&message, AckKind::Ack, &task_id).await;
        }
        Ran::Parked => {
            // The task waits in its record; the job going on with it is published with the
            // last answer. A lost ack: the redelivery finds the task past its round.
            confirm_ack(
                message,
                task_id,
                "the task waits for input; a redelivery will be dropped",
            )
            .await;
        }
        Ran::Abandoned => {
            // Draining: the claim is released and the job handed back at once, so another
            // worker runs it from the start.
            let me = runner.instance.clone();
            let _ = runner
                .store
                .modify(&task_id, None, |s| {
                    if s.worker.as_deref() == Some(me.as_str()) {
                        s.worker = None;
                    }
                    Ok(())
                })
                .await;
            ack(&message, AckKind::Nak(None), &task_id).await;
        }
    }
}

/// The task a job belongs to and the input round it goes on from: a task's first job is
/// named by its message id (round 0); a job resuming it says so in its headers.
fn job_of(message: &jetstream::Message) -> Option<(String, u32)> {
    let (id, round) = match wire::header(message, TASK_ID) {
        Some(id) => {
            let round = wire::header(message, RESUME_ROUND)?.parse::<u32>().ok();
            (id, round.filter(|r| *r > 0)?)
        }
        None => (wire::header(message, "Nats-Msg-Id")?, 0),
    };
    tasks::valid_id(id).then(|| (id.to_owned(), round))
}

/// The call a job carries: `{"name": ..., "arguments": ...}`.
fn read_call(payload: &[u8]) -> Result<CallParams, ErrorObject> {
    serde_json::from_slice(payload)
        .map_err(|e| ErrorObject::invalid_params(format!("an unreadable task job: {e}")))
}

/// The call of a job whose request is in `TY_TASK_BODIES` (digest checked, at most the
/// worker's `max_claimed_request_bytes`).
async fn read_body(
    runner: &Runner,
    message: &jetstream::Message,
    task_id: &str,
) -> Result<CallParams, ErrorObject> {
    if !message.payload.is_empty() {
        return Err(ErrorObject::invalid_request(
            "a task job naming a body claim (Mcp-Body-Claim) must have an empty body",
        ));
    }
    let read = crate::claims::read_from(&runner.client, runner.bodies, task_id, runner.max_body);
    match Box::pin(read).await {
        Ok(body) => read_call(&body),
        Err(e) => Err(ErrorObject::new(
            wire::PAYLOAD_TOO_LARGE,
            format!("the task's request could not be read from its body claim: {e}"),
        )),
    }
}

/// A job whose call cannot be read: the task fails saying why, and the job is terminated.
async fn fail_unreadable(
    runner: &Runner,
    message: &jetstream::Message,
    task_id: &str,
    error: ErrorObject,
) {
    tracing::warn!(task = %task_id, error = %error.message, "an unreadable task job: terminated, the task failed");
    finish(runner, task_id, Err(error)).await;
    forget_body(
        runner,
        wire::header(message, wire::BODY_CLAIM).is_some(),
        task_id,
    );
    ack(message, AckKind::Term, task_id).await;
}

/// Deletes the task's request from `TY_TASK_BODIES` (in the background; its TTL is the
/// backstop), when it was there: the task is over, or will never run.
fn forget_body(runner: &Runner, claimed: bool, task_id: &str) {
    if claimed {
        crate::claims::discard_from(&runner.client, runner.bodies, task_id);
    }
}

/// Whether the task's record is terminal (cancelled, say); not when it cannot be read.
async fn is_finished(runner: &Runner, task_id: &str) -> bool {
    matches!(
        runner.store.read(task_id).await,
        Ok(Some((stored, _))) if stored.record().status.is_terminal()
    )
}

#[derive(serde::Deserialize)]
struct CallParams {
    name: String,
    #[serde(default)]
    arguments: Option<Box<serde_json::value::RawValue>>,
    /// What the task's caller can answer: the worker's tool may ask it through the record
    /// (absent from a job of an older gateway: the tool's questions then fail -32021).
    #[serde(default, rename = "clientCapabilities")]
    client_capabilities: Option<ClientCapabilities>,
    /// Who made the task, for its tool's `RequestContext::principal` (the gateway's caller,
    /// when it sends principals: `crate::principal`).
    #[serde(default)]
    principal: Option<String>,
}

enum Claim {
    /// This worker owns the task now (with the answers and state of the round a resuming
    /// job goes on from).
    Run(Option<Resumed>),
    /// The job is not the one the task waits for: drop it.
    Past,
    /// The task is finished: ack.
    Done,
    /// A live worker runs it: put the job back for later.
    Later,
    /// The record could not be read or claimed (the bucket unavailable a moment, a broker
    /// just restarted): put the job back for [`CLAIM_AGAIN`], not its `ack_wait`.
    Soon,
    /// There is no record (expired, purged): drop the job.
    Gone,
}

/// When a job whose task could not be claimed for a passing reason is looked at again.
const CLAIM_AGAIN: Duration = Duration::from_secs(1);

/// What a job resuming a task goes on with: the caller's answers and the tool's state.
struct Resumed {
    answers: InputResponses,
    request_state: Option<serde_json::Value>,
}

/// Whether a job of input round `round` is the one the task waits for: its first job while
/// no worker left it waiting for input, else the job of the round it waits in once every
/// question is answered (kept so until the tool asks again or the task ends, so that a
/// worker taking the task over goes on from there too).
fn waits_for(s: &Stored, round: u32) -> bool {
    match &s.resume {
        None => round == 0,
        Some(r) => r.round == round && s.input_requests.is_empty() && !s.input_responses.is_empty(),
    }
}

/// Takes the task for this worker, or says why not.
async fn claim(runner: &Runner, task_id: &str, round: u32) -> Claim {
    for _ in 0..4 {
        let (mut stored, _) = match runner.store.read(task_id).await {
            Ok(Some(found)) => found,
            Ok(None) => return Claim::Gone,
            Err(e) => {
                tracing::warn!(task = %task_id, error = %e, "reading a task record failed: the job is put back");
                return Claim::Soon;
            }
        };
        if round > 0 && !waits_for(&stored, round) {
            // The job was published right after the answers were written, which a replica
            // may not have yet: the stream's leader has them.
            if let Ok(Some((latest, _))) = runner.store.read_from_leader(task_id).await {
                stored = latest;
            }
        }
        if stored.status.is_terminal() {
            return Claim::Done;
        }
        if !waits_for(&stored, round) {
            return Claim::Past;
        }
        if let Some(owner) = stored.worker.as_deref().filter(|w| *w != runner.instance) {
            let ping = runner.client.request(
                control_subject(&runner.prefix, task_id),
                Bytes::from_static(b"ping"),
            );
            if let Ok(Ok(_)) = tokio::time::timeout(OWNER_PING, ping).await {
                tracing::debug!(task = %task_id, %owner, "redelivered while its worker still runs it: put back");
                return Claim::Later;
            }
            tracing::info!(task = %task_id, %owner, "its worker does not answer: taking the task over");
        }
        let me = runner.instance.clone();
        let owner_before = stored.worker.clone();
        let mut past = false;
        let taken = runner
            .store
            .modify(task_id, None, |s| {
                if s.status.is_terminal() {
                    return Err(toolyard::TaskStoreError::Terminal(s.status));
                }
                if !waits_for(s, round) {
                    past = true;
                    return Err(toolyard::TaskStoreError::Backend("past".into()));
                }
                if s.worker != owner_before {
                    // Someone else claimed it meanwhile.
                    return Err(toolyard::TaskStoreError::Backend("claimed".into()));
                }
                s.worker = Some(me.clone());
                s.status_message = Some(format!("running on worker {me}"));
                Ok(s.resume.as_ref().map(|r| Resumed {
                    answers: s.input_responses.clone(),
                    request_state: r.request_state.clone(),
                }))
            })
            .await;
        match taken {
            Ok((_, resumed)) => return Claim::Run(resumed),
            Err(_) if past => return Claim::Past,
            Err(toolyard::TaskStoreError::Terminal(_)) => return Claim::Done,
            Err(toolyard::TaskStoreError::NotFound | toolyard::TaskStoreError::Expired) => {
                return Claim::Gone
            }
            // Another claim landed first, or the write failed: look again.
            Err(e) => {
                tracing::debug!(task = %task_id, error = %e, "claiming a task failed: looking again");
                continue;
            }
        }
    }
    tracing::warn!(task = %task_id, "a task could not be claimed: the job is put back for a moment");
    Claim::Soon
}

enum Ran {
    /// The call answered: its result, or its JSON-RPC error.
    Answered(Result<serde_json::Map<String, serde_json::Value>, ErrorObject>),
    /// Cancelled or taken over.
    Stopped,
    /// The worker is draining and gave the task back.
    Abandoned,
    /// The tool asked its caller; the task waits in its record, its job done with.
    Parked,
}

/// Input rounds a durable task's call may take (the gateway's own limit for a forwarded
/// call's rounds).
const MAX_INPUT_ROUNDS: u32 = 16;

/// Runs the call through the server as an ordinary 2026-07-28 request (its own tasks
/// machinery is not involved: the task is this job), telling JetStream it is working and
/// stopping when the record says so. A tool that asks for input (of a caller that can
/// answer) answers `input_required`: the questions go into the record, where `tasks/get` on
/// any gateway shows them (and the gateway that created a 2025-11-25 task asks its session),
/// with what the call goes on with ([`Resume`](tasks::Resume)), and the job is done with
/// (`Parked`): the job resuming it, published with the last answer, is retried with them and
/// its `requestState` (`resumed`, round `round`), on whichever worker takes it.
async fn execute(
    runner: &Runner,
    message: &jetstream::Message,
    task_id: &str,
    call: CallParams,
    round: u32,
    resumed: Option<Resumed>,
    body_moved: &mut bool,
) -> Ran {
    let principal: Option<Arc<str>> = call.principal.map(Into::into);
    let mut params = serde_json::Map::new();
    params.insert("name".into(), serde_json::Value::String(call.name));
    if let Some(a) = call.arguments {
        match serde_json::from_str(a.get()) {
            Ok(v) => {
                params.insert("arguments".into(), v);
            }
            Err(e) => {
                return Ran::Answered(Err(ErrorObject::invalid_params(e.to_string())));
            }
        }
    }
    if let Some(resumed) = resumed {
        // Sealed by the worker that asked, maybe hours ago and with another key: the record
        // it waited in is trusted, so it is signed again here, fresh.
        let state = match resumed.request_state {
            Some(serde_json::Value::String(sealed)) => {
                match runner.server.renew_request_state(&sealed) {
                    Ok(renewed) => Some(serde_json::Value::String(renewed)),
                    Err(e) => return Ran::Answered(Err(e)),
                }
            }
            other => other,
        };
        go_on(&mut params, resumed.answers, state);
    }
    let meta = RequestMeta {
        protocol_version: Some(toolyard_proto::ProtocolVersion::LATEST.as_str().to_owned()),
        // Without a caller who can answer, a tool that asks for input fails with a clear
        // missing-capability error instead of waiting.
        client_capabilities: Some(call.client_capabilities.unwrap_or_default()),
        traceparent: wire::header(message, wire::TRACEPARENT).map(str::to_owned),
        tracestate: wire::header(message, wire::TRACESTATE).map(str::to_owned),
        baggage: wire::header(message, wire::BAGGAGE).map(str::to_owned),
        ..Default::default()
    };
    let stop = CancellationToken::new();
    // Answers "are you running it?" while it runs.
    let control = match runner
        .client
        .subscribe(control_subject(&runner.prefix, task_id))
        .await
    {
        Ok(mut sub) => {
            let client = runner.client.clone();
            Some(tokio::spawn(async move {
                while let Some(m) = sub.next().await {
                    if let Some(reply) = m.reply {
                        let _ = client.publish(reply, Bytes::from_static(b"running")).await;
                    }
                }
            }))
        }
        Err(e) => {
            tracing::warn!(task = %task_id, error = %e, "cannot answer for the task while running it");
            None
        }
    };
    // A cancel on any gateway, or another worker's take-over, stops the handler.
    let watching = {
        let store = runner.store.clone();
        let me = runner.instance.clone();
        let stop = stop.clone();
        let id = task_id.to_owned();
        tokio::spawn(async move {
            loop {
                if let Some(mut watch) = store.watch(&id).await {
                    while let Some(Ok(entry)) = watch.next().await {
                        if let Ok(s) = Stored::parse(&entry.value) {
                            if s.status.is_terminal() || s.worker.as_deref() != Some(me.as_str()) {
                                stop.cancel();
                                return;
                            }
                        }
                    }
                }
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        })
    };
    let period = (runner.ack_wait / 3).max(Duration::from_millis(100));
    let mut working = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
    let mut rounds = round;
    let ran = 'rounds: loop {
        let body = serde_json::json!({
            "jsonrpc": "2.0",
            "id": format!("task-{task_id}"),
            "method": "tools/call",
            "params": params,
        });
        let bytes = serde_json::to_vec(&body).unwrap_or_default();
        let Ok(Incoming::Request(request)) = jsonrpc::parse(&bytes) else {
            break Ran::Answered(Err(ErrorObject::internal("the job's call is malformed")));
        };
        let cancel = CancellationToken::new();
        let Served {
            messages: mut rx,
            answer_prefix: prefix,
        } = serve_here(
            &runner.server,
            TaskRole::Body,
            request,
            meta.clone(),
            cancel.clone(),
            None,
            Some(runner.peer.clone()),
            principal.clone(),
            // A task's notifications have no caller to go to: they are taken and dropped.
            NOTIFICATION_BACKLOG,
        );
        let outcome = loop {
            tokio::select! {
                bytes = rx.next() => match bytes {
                    Some(b) if b.starts_with(&prefix) => break answer(&b),
                    // Progress and log messages of a task have no caller to go to.
                    Some(_) => {}
                    None => break Err(ErrorObject::internal("the call ended without an answer")),
                },
                () = stop.cancelled() => {
                    cancel.cancel();
                    break 'rounds Ran::Stopped;
                }
                () = runner.abandon.cancelled() => {
                    cancel.cancel();
                    break 'rounds Ran::Abandoned;
                }
                _ = working.tick() => in_progress(message, task_id).await,
            }
        };
        let asked = match outcome {
            Ok(result)
                if result.get("resultType").and_then(|t| t.as_str()) == Some("input_required") =>
            {
                result
            }
            other => break Ran::Answered(other),
        };
        rounds += 1;
        if rounds > MAX_INPUT_ROUNDS {
            break Ran::Answered(Err(ErrorObject::internal(format!(
                "the tool asked for input more than {MAX_INPUT_ROUNDS} times"
            ))));
        }
        let requests: InputRequests = match asked
            .get("inputRequests")
            .map(|r| serde_json::from_value(r.clone()))
        {
            Some(Ok(r)) => r,
            _ => {
                break Ran::Answered(Err(ErrorObject::internal(
                    "the tool asked for input without readable inputRequests",
                )))
            }
        };
        let state = asked.get("requestState").cloned();
        let resume = match parked_job(runner, message, task_id, rounds, state.clone()).await {
            Ok(resume) => resume,
            Err(e) => {
                break e.ran(
                    task_id,
                    "keeping the task's request while it waits for input",
                )
            }
        };
        // Its body, moved to `TY_TASK_BODIES` for the wait: deleted when the task ends here.
        *body_moved |= resume.body.is_none() && wire::header(message, wire::BODY_CLAIM).is_none();
        // The answers this round was given: a question asked again under one of their keys
        // is a new question (the answer did not do), not one answered already.
        let given: Vec<String> = params
            .get("inputResponses")
            .and_then(serde_json::Value::as_object)
            .map(|a| a.keys().cloned().collect())
            .unwrap_or_default();
        match park(runner, task_id, requests, &given, resume).await {
            Ok(None) => break Ran::Parked,
            // Every question was answered already (before this worker took the task over).
            Ok(Some(answers)) => go_on(&mut params, answers, state),
            Err(e) => break e.ran(task_id, "putting the task's questions in its record"),
        }
    };
    watching.abort();
    if let Some(c) = control {
        c.abort();
    }
    ran
}

/// Sets the call's next round up: the caller's answers and the tool's state, as a caller of
/// the modern revision retries.
fn go_on(
    params: &mut serde_json::Map<String, serde_json::Value>,
    answers: InputResponses,
    state: Option<serde_json::Value>,
) {
    params.insert("inputResponses".into(), serde_json::Value::Object(answers));
    match state {
        Some(state) => params.insert("requestState".into(), state),
        None => params.remove("requestState"),
    };
}

/// What goes on with the task after round `round`'s answers: this job's subject, its
/// deadline and trace headers, its body (moved to `TY_TASK_BODIES` when too large to keep in
/// the record; left there when it came from there), and the tool's state.
async fn parked_job(
    runner: &Runner,
    message: &jetstream::Message,
    task_id: &str,
    round: u32,
    request_state: Option<serde_json::Value>,
) -> Result<tasks::Resume, NotWritten> {
    let headers = [DEADLINE, "traceparent", "tracestate", "baggage"]
        .into_iter()
        .filter_map(|name| Some((name.to_owned(), wire::header(message, name)?.to_owned())))
        .collect();
    let inline = if wire::header(message, wire::BODY_CLAIM).is_some() {
        None
    } else if message.payload.len() <= PARKED_BODY_INLINE {
        // Read as a call already, so JSON text.
        let text = String::from_utf8(message.payload.to_vec()).ok();
        text.and_then(|t| serde_json::value::RawValue::from_string(t).ok())
    } else {
        None
    };
    if inline.is_none() && wire::header(message, wire::BODY_CLAIM).is_none() {
        let max_payload = runner.client.server_info().max_payload;
        let put = crate::claims::put_as(
            &runner.client,
            runner.bodies,
            task_id,
            &message.payload,
            max_payload,
        );
        Box::pin(put).await.map_err(|e| {
            NotWritten::Store(toolyard::TaskStoreError::Backend(format!(
                "keeping the task's request in {}: {e}",
                crate::claims::TASK_BODIES
            )))
        })?;
    }
    Ok(tasks::Resume {
        subject: message.subject.to_string(),
        round,
        body: inline,
        request_state,
        headers,
    })
}

/// Tells JetStream the task's job is being worked on (not to be redelivered yet).
async fn in_progress(message: &jetstream::Message, task_id: &str) {
    if let Err(e) = message.ack_with(AckKind::Progress).await {
        tracing::debug!(task = %task_id, error = %e, "telling JetStream the task is running failed");
    }
}

/// A write of a task's record on its behalf that did not happen.
enum NotWritten {
    /// The task ended, or another worker took it over: nothing more to do here.
    Lost,
    /// The store failed: the job goes back, to be run again when it can be.
    Store(toolyard::TaskStoreError),
}

impl NotWritten {
    /// Why the task stops running here.
    fn ran(self, task_id: &str, doing: &str) -> Ran {
        match self {
            NotWritten::Lost => Ran::Stopped,
            NotWritten::Store(e) => {
                tracing::warn!(task = %task_id, error = %e, "{doing} failed: the job is handed back");
                Ran::Abandoned
            }
        }
    }
}

/// Changes the task's record by compare-and-swap while this worker owns it.
async fn as_owner<T>(
    runner: &Runner,
    task_id: &str,
    mut change: impl FnMut(&mut Stored) -> Result<T, toolyard::TaskStoreError>,
) -> Result<T, NotWritten> {
    use toolyard::TaskStoreError as E;
    let me = runner.instance.as_str();
    let mut lost = false;
    let written = runner
        .store
        .modify(task_id, None, |s| {
            if s.worker.as_deref() != Some(me) {
                lost = true;
                return Err(E::Backend(format!("task {task_id} is another worker's")));
            }
            change(s)
        })
        .await;
    match written {
        Ok((_, out)) => Ok(out),
        Err(E::Terminal(_) | E::NotFound | E::Expired) => Err(NotWritten::Lost),
        Err(_) if lost => Err(NotWritten::Lost),
        Err(e) => Err(NotWritten::Store(e)),
    }
}

/// Puts the tool's questions in the record (`input_required`) with what goes on with the
/// task once they are answered, and lets go of it (no worker holds it while it waits), if
/// this worker still owns it. A question the record already holds an answer to, not `given`
/// to the round just run (answered before this worker took the task over and ran it again),
/// is not asked again; when none is left to ask, the answers are handed back (`Some`) and
/// nothing waits.
async fn park(
    runner: &Runner,
    task_id: &str,
    requests: InputRequests,
    given: &[String],
    resume: tasks::Resume,
) -> Result<Option<InputResponses>, NotWritten> {
    as_owner(runner, task_id, |s| {
        // The answers the round was given were used, and earlier rounds' too: only those to
        // this round's questions not given yet stay.
        s.input_responses
            .retain(|key, _| requests.contains_key(key) && !given.contains(key));
        let open: InputRequests = requests
            .iter()
            .filter(|(key, _)| !s.input_responses.contains_key(*key))
            .map(|(key, request)| (key.clone(), request.clone()))
            .collect();
        if open.is_empty() {
            return Ok(Some(s.input_responses.clone()));
        }
        NatsTaskStore::apply(s, |r| r.apply(TaskUpdate::InputRequired(open)))?;
        s.status_message = Some("waiting for the caller's answers".into());
        s.resume = Some(resume.clone());
        s.worker = None;
        Ok(None)
    })
    .await
}

/// The result or error of a JSON-RPC response.
fn answer(bytes: &[u8]) -> Result<serde_json::Map<String, serde_json::Value>, ErrorObject> {
    #[derive(serde::Deserialize)]
    struct Response {
        #[serde(default)]
        result: Option<serde_json::Map<String, serde_json::Value>>,
        #[serde(default)]
        error: Option<ErrorObject>,
    }
    match serde_json::from_slice::<Response>(bytes) {
        Ok(Response {
            result: Some(r), ..
        }) => Ok(r),
        Ok(Response { error: Some(e), .. }) => Err(e),
        _ => Err(ErrorObject::internal("the call's answer is unreadable")),
    }
}

/// Writes the task's terminal record if this worker still owns it; true when it did (or
/// the task was already finished), so the job may be acked.
async fn finish(
    runner: &Runner,
    task_id: &str,
    outcome: Result<serde_json::Map<String, serde_json::Value>, ErrorObject>,
) -> bool {
    let me = runner.instance.clone();
    let written = runner
        .store
        .modify(task_id, None, |s| {
            if s.worker.is_some() && s.worker.as_deref() != Some(me.as_str()) {
                return Err(toolyard::TaskStoreError::Backend(
                    "taken over by another worker".into(),
                ));
            }
            let mut record = s.record();
            let legacy = record.generation == toolyard::TaskGeneration::Legacy;
            let update = match &outcome {
                Ok(result) => TaskUpdate::Finish {
                    // 2025-11-25: a tool result with isError fails the task; the extension
                    // keeps `failed` for JSON-RPC errors.
                    status: if legacy
                        && result.get("isError") == Some(&serde_json::Value::Bool(true))
                    {
                        TaskStatus::Failed
                    } else {
                        TaskStatus::Completed
                    },
                    outcome: Some(toolyard::TaskOutcome::Result(result.clone())),
                    message: None,
                },
                Err(e) => TaskUpdate::Finish {
                    status: TaskStatus::Failed,
                    message: Some(e.message.to_string()),
                    outcome: Some(toolyard::TaskOutcome::Error(e.clone())),
                },
            };
            record.apply(update)?;
            *s = Stored::from_record(&record, Some(me.clone()));
            Ok(())
        })
        .await;
    match written {
        Ok(_) => true,
        Err(toolyard::TaskStoreError::Terminal(_)) => true,
        Err(e) => {
            tracing::info!(task = %task_id, error = %e, "the task's result was not recorded (another worker owns it, or it is gone)");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_subjects_name_the_server_and_a_token_safe_tool() {
        assert_eq!(subject("mcp.v1", "calc", "add"), "mcp.v1.task.calc.add");
        assert_eq!(subject("mcp.v1", "calc", "a.b"), "mcp.v1.task.calc._");
        assert_eq!(control_subject("mcp.v1", "abc"), "mcp.v1.taskctl.abc");
    }

    #[test]
    fn an_answer_is_its_result_or_its_error() {
        let ok = answer(br#"{"jsonrpc":"2.0","id":"t","result":{"content":[]}}"#).unwrap();
        assert!(ok.contains_key("content"));
        let err = answer(br#"{"jsonrpc":"2.0","id":"t","error":{"code":-32602,"message":"bad"}}"#)
            .unwrap_err();
        assert_eq!(err.code, -32602);
        assert!(answer(b"garbage").is_err());
    }
}
