//! A `tools/call` that becomes a task: the extension gate, the decision to run a call as a
//! task ([`plan_call`]), and driving it ([`drive_call`]) until its outcome is stored. The
//! request path of tasks, separate from the bookkeeping in the run table.

use super::store::{NewTask, TaskGeneration, TaskOutcome, TaskUpdate};
use super::table::{TaskLink, TaskRun, Tasks};
use crate::context::RequestContext;
use crate::error::HandlerError;
use crate::exec::{self, Binding, Ran};
use crate::middleware::Outcome;
use crate::mrtr::StateSealer;
use crate::reply::Reply;
use crate::sink::Sink;
use crate::tool::ToolDef;
use futures_util::FutureExt;
use serde::Deserialize;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tokio::sync::{oneshot, watch};
use tokio_util::sync::CancellationToken;
use toolyard_proto::{
    CallToolResult, ClientCapabilities, CreateTaskResult, ErrorObject, ProtocolVersion, ResultType,
    TaskStatus, TaskSupport,
};

/// True when the capabilities declare the tasks extension.
pub(crate) fn declares_extension(caps: &ClientCapabilities) -> bool {
    caps.extensions
        .as_ref()
        .is_some_and(|e| e.contains_key(toolyard_proto::meta::TASKS_EXTENSION))
}

/// -32021 naming the tasks extension.
pub(crate) fn missing_extension() -> ErrorObject {
    ErrorObject::missing_capability(serde_json::json!({
        "extensions": { toolyard_proto::meta::TASKS_EXTENSION: {} }
    }))
}
/// `params.task` of a `tools/call` (2025-11-25), read leniently: `ttl` is any JSON number,
/// and a modern caller's stray hint must not fail its call.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct TaskHint {
    #[serde(default)]
    ttl: Option<f64>,
}

/// How a task-eligible call runs.
pub(crate) struct TaskPlan {
    tasks: Arc<Tasks>,
    link: Arc<TaskLink>,
    escalated: Option<oneshot::Receiver<oneshot::Sender<()>>>,
    /// The request's own token: before the task exists, cancelling the request cancels it.
    request_cancel: CancellationToken,
    generation: TaskGeneration,
    owner: Option<String>,
    ttl: Option<Duration>,
    notify: Option<Sink>,
}

/// The tool's task support as the hot path sees it: `None` for forbidden.
pub(crate) fn effective_support(support: Option<TaskSupport>) -> Option<TaskSupport> {
    support.filter(|s| *s != TaskSupport::Forbidden)
}

/// Decides whether a `tools/call` runs as a task, and if so prepares it: `Ok(None)` runs it
/// as an ordinary request. Only called for tools that support tasks or calls that carry
/// `params.task`.
pub(crate) fn plan_call(
    tasks: Option<&Arc<Tasks>>,
    def: &ToolDef,
    task: Option<&TaskHint>,
    ctx: &RequestContext,
) -> Result<Option<(TaskPlan, RequestContext)>, ErrorObject> {
    let Some(tasks) = tasks else {
        // No store: the server offers no tasks and ignores task metadata.
        return Ok(None);
    };
    let support = def.task_support.unwrap_or(TaskSupport::Forbidden);
    let name = &def.tool.name;
    let (generation, ttl, deferred) = if ctx.is_modern() {
        // Server-directed: a caller that declared the extension gets a task from every
        // task-capable tool; a legacy `task` hint is ignored.
        match (support, declares_extension(ctx.client_capabilities())) {
            (TaskSupport::Forbidden, _) | (TaskSupport::Optional, false) => return Ok(None),
            (TaskSupport::Required, false) => {
                return Err(missing_extension().with_message(format!(
                    "Tool `{name}` runs only as a task: declare the `{}` extension",
                    toolyard_proto::meta::TASKS_EXTENSION
                )))
            }
            (_, true) => (
                TaskGeneration::Extension,
                tasks.settings.default_ttl,
                def.deferred_task,
            ),
        }
    } else {
        if ctx.protocol_version() < ProtocolVersion::V2025_11_25 {
            return Ok(None);
        }
        match (support, task) {
            (TaskSupport::Forbidden, Some(_)) => {
                return Err(ErrorObject::new(
                    toolyard_proto::error::code::METHOD_NOT_FOUND,
                    format!("Tool `{name}` does not support task-augmented calls"),
                ))
            }
            (TaskSupport::Required, None) => {
                return Err(ErrorObject::new(
                    toolyard_proto::error::code::METHOD_NOT_FOUND,
                    format!("Tool `{name}` must be called as a task (`params.task`)"),
                ))
            }
            (_, None) => return Ok(None),
            (_, Some(meta)) => {
                let max = tasks.settings.max_ttl;
                let ttl = match meta.ttl.filter(|ms| ms.is_finite() && *ms >= 0.0) {
                    Some(ms) => Some(
                        Duration::try_from_secs_f64(ms / 1000.0)
                            .unwrap_or(max)
                            .min(max),
                    ),
                    None => tasks.settings.default_ttl,
                };
                // The client asked for a task: it starts at once.
                (TaskGeneration::Legacy, ttl, false)
            }
        }
    };
    let legacy = ctx.legacy_conn();
    let owner = match legacy {
        Some(conn) => Some(conn.task_owner.clone()),
        None => ctx.principal().map(str::to_owned),
    };
    // The task outlives its request. An unauthenticated legacy task can only be reached from
    // its connection, so it ends with it.
    let cancel = match legacy {
        Some(conn) if ctx.principal().is_none() => conn.closing.child_token(),
        _ => CancellationToken::new(),
    };
    let (escalate, escalated) = if deferred {
        let (tx, rx) = oneshot::channel();
        (Some(tx), Some(rx))
    } else {
        (None, None)
    };
    let link = Arc::new(TaskLink {
        run: OnceLock::new(),
        escalate: Mutex::new(escalate),
    });
    let forked = ctx.fork_for_task(cancel, link.clone());
    let plan = TaskPlan {
        tasks: tasks.clone(),
        link,
        escalated,
        request_cancel: ctx.cancellation().clone(),
        generation,
        owner,
        ttl,
        notify: legacy.map(|c| c.sink.clone()),
    };
    Ok(Some((plan, forked)))
}

/// How a task-eligible call runs: as a task of this server's, or (a deferred tool's call
/// for a caller that makes the task itself, [`TaskRole::HandOff`](crate::TaskRole::HandOff))
/// as an ordinary request that ends when the handler calls `start_task`.
pub(crate) enum CallPlan {
    Task(TaskPlan),
    HandOff(oneshot::Receiver<oneshot::Sender<()>>),
}

/// Prepares a deferred tool's call for a caller that makes its task (`TaskRole::HandOff`):
/// a context whose `start_task` reaches the driver ([`drive`]), cancelled with the request.
pub(crate) fn plan_handoff(ctx: &RequestContext) -> (CallPlan, RequestContext) {
    let (tx, rx) = oneshot::channel();
    let link = Arc::new(TaskLink {
        run: OnceLock::new(),
        escalate: Mutex::new(Some(tx)),
    });
    let forked = ctx.fork_for_task(ctx.cancellation().child_token(), link);
    (CallPlan::HandOff(rx), forked)
}

/// Runs a task-eligible call as `plan` says ([`drive_call`], or a hand-off), answering
/// `reply`; `on_failure` as for an ordinary request (a hand-off that ends without starting
/// its task answers as one).
pub(crate) async fn drive<T, F>(
    plan: CallPlan,
    ctx: RequestContext,
    reply: Reply,
    sealer: StateSealer,
    binding: Binding,
    fut: F,
    on_failure: impl FnOnce(&HandlerError) -> Option<T>,
) where
    T: serde::Serialize + exec::Judge + TaskResult,
    F: Future<Output = Result<T, HandlerError>> + Send,
{
    match plan {
        CallPlan::Task(plan) => {
            let typed = async move { fut.await?.into_call_tool_result() };
            drive_call(plan, ctx, reply, sealer, binding, typed).await;
        }
        CallPlan::HandOff(escalated) => {
            drive_handoff(escalated, ctx, reply, sealer, binding, fut, on_failure).await;
        }
    }
}

/// A tool's result as a task stores it.
pub(crate) trait TaskResult {
    fn into_call_tool_result(self) -> Result<CallToolResult, HandlerError>;
}

impl TaskResult for CallToolResult {
    fn into_call_tool_result(self) -> Result<CallToolResult, HandlerError> {
        Ok(self)
    }
}

impl TaskResult for crate::forward::RawResult {
    fn into_call_tool_result(self) -> Result<CallToolResult, HandlerError> {
        self.to_call_tool_result()
            .map_err(|e| HandlerError::failed(e.to_string()))
    }
}

/// A deferred tool's call whose task the caller makes: an ordinary request until the
/// handler calls `start_task`, where the handler is dropped (it waits in `start_task`, so
/// nothing after it runs here) and the request answers `task_handoff`. The caller runs the
/// call again as its task's body, with this round's answers.
async fn drive_handoff<T, F>(
    escalated: oneshot::Receiver<oneshot::Sender<()>>,
    ctx: RequestContext,
    reply: Reply,
    sealer: StateSealer,
    binding: Binding,
    fut: F,
    on_failure: impl FnOnce(&HandlerError) -> Option<T>,
) where
    T: serde::Serialize + exec::Judge,
    F: Future<Output = Result<T, HandlerError>> + Send,
{
    let cancel = ctx.cancellation().clone();
    let fut = AssertUnwindSafe(fut).catch_unwind();
    // The link holding the sender lives in `ctx`, held here: the channel cannot close
    // while the handler runs, and if it did, the call would simply run as an ordinary one.
    let started = async {
        if escalated.await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        biased;
        _ = cancel.cancelled() => return reply.cancelled(),
        r = fut => return exec::answer(ctx, reply, sealer, binding, Some(r), on_failure),
        () = started => {}
    }
    // What the handler spawned and tied to its token stops with it.
    cancel.cancel();
    reply.handed_off();
}

/// Creates the task, registers its run and answers the request with the task handle.
async fn create(plan: &TaskPlan, ctx: &RequestContext, reply: Reply) -> Option<Arc<TaskRun>> {
    let tasks = &plan.tasks;
    let new = NewTask {
        owner: plan.owner.clone(),
        generation: plan.generation,
        ttl: plan.ttl,
        poll_interval: Some(tasks.settings.poll_interval),
    };
    let record = match tasks.store.create(new).await {
        Ok(r) => r,
        Err(e) => {
            reply.err(e.to_error_object());
            return None;
        }
    };
    let (done, _) = watch::channel(false);
    let run = Arc::new(TaskRun {
        id: record.task_id.clone(),
        tasks: Arc::downgrade(tasks),
        cancel: ctx.cancellation().clone(),
        waiters: Mutex::default(),
        pending_legacy: AtomicUsize::new(0),
        notify: plan.notify.clone(),
        done,
    });
    tasks.live().insert(run.id.clone(), run.clone());
    let _ = plan.link.run.set(run.clone());
    match plan.generation {
        TaskGeneration::Extension => {
            reply.ok_as(&record.to_created(), ResultType::Task, Outcome::Ok);
        }
        TaskGeneration::Legacy => reply.ok(&CreateTaskResult {
            task: record.to_task(),
            meta: None,
            result_type: None,
        }),
    }
    Some(run)
}

/// Runs a task-eligible `tools/call`: creates the task at once, or (deferred tools) runs the
/// handler as an ordinary request until it calls `ctx.start_task()`, then lets it finish in
/// the background with its outcome stored in the task.
pub(crate) async fn drive_call<F>(
    mut plan: TaskPlan,
    ctx: RequestContext,
    reply: Reply,
    sealer: StateSealer,
    binding: Binding,
    fut: F,
) where
    F: Future<Output = Result<CallToolResult, HandlerError>> + Send,
{
    let mut fut = std::pin::pin!(AssertUnwindSafe(fut).catch_unwind());
    let on_failure = |e: &HandlerError| Some(CallToolResult::error_text(e.to_string()));
    let run = match plan.escalated.take() {
        None if plan.request_cancel.is_cancelled() => {
            ctx.cancellation().cancel();
            return reply.cancelled();
        }
        None => match create(&plan, &ctx, reply).await {
            Some(run) => run,
            None => return ctx.cancellation().cancel(),
        },
        Some(escalated) => {
            let request_cancel = plan.request_cancel.clone();
            let started = tokio::select! {
                biased;
                _ = request_cancel.cancelled() => {
                    ctx.cancellation().cancel();
                    return reply.cancelled();
                }
                r = &mut fut => {
                    // Finished (or asked for input) before becoming a task: answer as usual.
                    return exec::answer(ctx, reply, sealer, binding, Some(r), on_failure);
                }
                s = escalated => s,
            };
            let Ok(started) = started else {
                // Cannot happen while the handler runs; answer as an ordinary request.
                let r: Ran<CallToolResult> = tokio::select! {
                    biased;
                    _ = request_cancel.cancelled() => None,
                    r = &mut fut => Some(r),
                };
                return exec::answer(ctx, reply, sealer, binding, r, on_failure);
            };
            let run = create(&plan, &ctx, reply).await;
            let _ = started.send(());
            match run {
                Some(run) => run,
                None => return ctx.cancellation().cancel(),
            }
        }
    };
    let cancel = ctx.cancellation().clone();
    let ran: Ran<CallToolResult> = tokio::select! {
        biased;
        _ = cancel.cancelled() => None,
        r = &mut fut => Some(r),
    };
    let legacy = plan.generation == TaskGeneration::Legacy;
    let finish = settle(ran, legacy, &binding.target, cancel.is_cancelled());
    finish_run(&plan.tasks, &run, finish).await;
}

/// What a task's handler produced, as the task's final state.
fn settle(
    ran: Ran<CallToolResult>,
    legacy: bool,
    tool: &str,
    cancelled: bool,
) -> Option<TaskUpdate> {
    let failed = |e: ErrorObject| TaskUpdate::Finish {
        status: TaskStatus::Failed,
        message: Some(e.message.to_string()),
        outcome: Some(TaskOutcome::Error(e)),
    };
    let finish = |result: CallToolResult| {
        // 2025-11-25: a tool result with isError fails the task; the extension keeps
        // `failed` for JSON-RPC errors.
        let status = if legacy && result.failed() {
            TaskStatus::Failed
        } else {
            TaskStatus::Completed
        };
        match serde_json::to_value(&result) {
            Ok(serde_json::Value::Object(obj)) => TaskUpdate::Finish {
                status,
                outcome: Some(TaskOutcome::Result(obj)),
                message: None,
            },
            _ => failed(ErrorObject::internal(
                "the tool's result is not serializable",
            )),
        }
    };
    Some(match ran {
        None => return None,
        Some(Err(panic)) => {
            let why = exec::panic_message(&*panic);
            tracing::error!(target: "toolyard", tool, "task handler panicked: {why}");
            failed(ErrorObject::internal(format!(
                "the handler of `{tool}` panicked: {why}"
            )))
        }
        Some(Ok(Ok(result))) => finish(result),
        Some(Ok(Err(HandlerError::Protocol(e)))) => failed(e),
        Some(Ok(Err(HandlerError::Input(crate::InputError::Cancelled)))) if cancelled => {
            return None
        }
        Some(Ok(Err(HandlerError::Input(crate::InputError::MissingCapability(cap))))) => {
            let mut required = serde_json::Map::new();
            required.insert(cap.to_owned(), serde_json::json!({}));
            failed(
                ErrorObject::missing_capability(serde_json::Value::Object(required))
                    .with_message(format!("`{tool}` requires the client's `{cap}` capability")),
            )
        }
        Some(Ok(Err(HandlerError::Input(crate::InputError::InputRequired)))) => failed(
            ErrorObject::internal("input required outside a multi-round-trip request"),
        ),
        Some(Ok(Err(e))) => finish(CallToolResult::error_text(e.to_string())),
    })
}

/// Stores a run's final state (`None`: it was cancelled), wakes `tasks/result` and forgets
/// the run.
async fn finish_run(tasks: &Tasks, run: &TaskRun, finish: Option<TaskUpdate>) {
    let update = finish.unwrap_or(TaskUpdate::Finish {
        status: TaskStatus::Cancelled,
        outcome: None,
        message: Some("The task was cancelled.".into()),
    });
    // A task cancelled by `tasks/cancel` is terminal already and stays cancelled.
    let _ = tasks.update(&run.id, update).await;
    run.done.send_replace(true);
    tasks.live().remove(&run.id);
}
