//! The `tasks/*` methods: `tasks/get`, `tasks/update`, `tasks/cancel` (both generations)
//! and `tasks/result`, `tasks/list` (2025-11-25). Request handlers over the store and the
//! run table, kept apart from both.

use super::call::{declares_extension, missing_extension};
use super::store::{TaskOutcome, TaskRecord, TaskStoreError};
use super::table::Tasks;
use crate::context::RequestContext;
use crate::reply::Reply;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::sync::Arc;
use toolyard_proto::method;
use toolyard_proto::{
    jsonrpc, ErrorObject, GetTaskRequestParams, GetTaskResult, JsonObject, ListTasksResult,
    UpdateTaskRequestParams,
};

#[derive(Deserialize, Default)]
struct Paginated {
    #[serde(default)]
    cursor: Option<String>,
}

/// Who the caller's tasks belong to.
fn owner_of(ctx: &RequestContext) -> Option<String> {
    match ctx.legacy_conn() {
        Some(conn) => Some(conn.task_owner.clone()),
        None => ctx.principal().map(str::to_owned),
    }
}

fn related_task(obj: &mut JsonObject, id: &str) {
    let meta = obj
        .entry("_meta")
        .or_insert_with(|| serde_json::Value::Object(Default::default()));
    if let serde_json::Value::Object(m) = meta {
        m.insert(
            toolyard_proto::meta::RELATED_TASK.into(),
            serde_json::json!({ "taskId": id }),
        );
    }
}

/// Serves `tasks/get`, `tasks/update`, `tasks/cancel` (both generations) and `tasks/result`,
/// `tasks/list` (2025-11-25; the modern generation removed them before this is reached).
#[allow(
    clippy::needless_pass_by_value,
    reason = "takes ownership: callers hand the value over and never use it again, so a borrow would only add noise at every call site"
)]
pub(crate) fn handle(
    tasks: &Arc<Tasks>,
    method: &str,
    params: Option<Box<RawValue>>,
    ctx: RequestContext,
    reply: Reply,
) {
    let modern = ctx.is_modern();
    if modern && !declares_extension(ctx.client_capabilities()) {
        return reply.err(missing_extension().with_message(format!(
            "`{method}` needs the `{}` extension in the request's client capabilities",
            toolyard_proto::meta::TASKS_EXTENSION
        )));
    }
    let tasks = tasks.clone();
    let owner = owner_of(&ctx);
    match (modern, method) {
        (_, method::TASKS_GET) => {
            match jsonrpc::params::<GetTaskRequestParams>(params.as_deref()) {
                Ok(p) => {
                    tokio::spawn(async move {
                        match tasks.store.get(&p.task_id, owner.as_deref()).await {
                            Ok(r) if modern => reply.ok(&r.to_detailed()),
                            Ok(r) => reply.ok(&GetTaskResult {
                                task: r.to_task(),
                                meta: None,
                                result_type: None,
                            }),
                            Err(e) => reply.err(e.to_error_object()),
                        }
                    });
                }
                Err(e) => reply.err(e),
            }
        }
        (true, method::TASKS_UPDATE) => {
            match jsonrpc::params::<UpdateTaskRequestParams>(params.as_deref()) {
                Ok(p) => {
                    tokio::spawn(async move {
                        let provided = tasks
                            .store
                            .provide_input(&p.task_id, owner.as_deref(), p.input_responses)
                            .await;
                        match provided {
                            Ok((record, accepted)) => {
                                if !accepted.is_empty() {
                                    if let Some(run) = tasks.run_of(&p.task_id) {
                                        run.deliver(accepted);
                                    }
                                    tasks.publish(&record);
                                }
                                reply.ok(&serde_json::json!({}))
                            }
                            Err(e) => reply.err(e.to_error_object()),
                        }
                    });
                }
                Err(e) => reply.err(e),
            }
        }
        (_, method::TASKS_CANCEL) => {
            match jsonrpc::params::<GetTaskRequestParams>(params.as_deref()) {
                Ok(p) => {
                    tokio::spawn(async move {
                        match tasks.store.cancel(&p.task_id, owner.as_deref()).await {
                            Ok(record) => {
                                tasks.publish(&record);
                                if let Some(run) = tasks.run_of(&p.task_id) {
                                    run.cancel.cancel();
                                }
                                if modern {
                                    reply.ok(&serde_json::json!({}))
                                } else {
                                    reply.ok(&GetTaskResult {
                                        task: record.to_task(),
                                        meta: None,
                                        result_type: None,
                                    })
                                }
                            }
                            // The extension's cancel is idempotent; 2025-11-25 refuses.
                            Err(TaskStoreError::Terminal(_)) if modern => {
                                reply.ok(&serde_json::json!({}))
                            }
                            Err(e) => reply.err(e.to_error_object()),
                        }
                    });
                }
                Err(e) => reply.err(e),
            }
        }
        (false, method::TASKS_RESULT) => {
            match jsonrpc::params::<GetTaskRequestParams>(params.as_deref()) {
                Ok(p) => {
                    tokio::spawn(task_result(tasks, p.task_id, owner, ctx, reply));
                }
                Err(e) => reply.err(e),
            }
        }
        (false, method::TASKS_LIST) => match jsonrpc::params::<Paginated>(params.as_deref()) {
            Ok(p) => {
                tokio::spawn(async move {
                    let page = tasks
                        .store
                        .list(owner.as_deref(), p.cursor.as_deref(), tasks.page_size)
                        .await;
                    match page {
                        Ok(page) => reply.ok(&ListTasksResult {
                            tasks: page.tasks.iter().map(TaskRecord::to_task).collect(),
                            next_cursor: page.next_cursor,
                            meta: None,
                            result_type: None,
                        }),
                        Err(TaskStoreError::NotFound) => {
                            reply.err(ErrorObject::invalid_params("Invalid cursor"))
                        }
                        Err(e) => reply.err(e.to_error_object()),
                    }
                });
            }
            Err(e) => reply.err(e),
        },
        _ => reply.err(ErrorObject::method_not_found(method)),
    }
}

/// 2025-11-25 `tasks/result`: waits until the task is terminal, then answers with exactly
/// what the original request would have returned.
async fn task_result(
    tasks: Arc<Tasks>,
    id: String,
    owner: Option<String>,
    ctx: RequestContext,
    reply: Reply,
) {
    let mut done = tasks.run_of(&id).map(|r| r.done.subscribe());
    let record = loop {
        let record = match tasks.store.get(&id, owner.as_deref()).await {
            Ok(r) => r,
            Err(e) => return reply.err(e.to_error_object()),
        };
        if record.status.is_terminal() {
            break record;
        }
        let wait = tasks.settings.poll_interval;
        tokio::select! {
            _ = ctx.cancelled() => return reply.cancelled(),
            changed = async {
                match &mut done {
                    Some(rx) => rx.changed().await.is_ok(),
                    None => {
                        // Not run here (another replica, or the run is gone): poll.
                        tokio::time::sleep(wait).await;
                        true
                    }
                }
            } => {
                if !changed {
                    done = None;
                }
            }
        }
    };
    match record.outcome {
        Some(TaskOutcome::Result(mut obj)) => {
            related_task(&mut obj, &id);
            reply.ok(&obj)
        }
        Some(TaskOutcome::Error(e)) => reply.err(e),
        None => reply.err(ErrorObject::new(
            toolyard_proto::error::code::REQUEST_CANCELLED,
            "The task was cancelled",
        )),
    }
}
