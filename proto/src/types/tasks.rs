//! The experimental tasks of 2025-11-25: task-augmented requests, polled by `tasks/*`.

use super::common::{JsonObject, ResultType};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The state of a task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TaskStatus {
    /// Running.
    Working,
    /// Waiting for input from the requester.
    InputRequired,
    /// Finished successfully.
    Completed,
    /// Finished with an error.
    Failed,
    /// Cancelled.
    Cancelled,
}

impl TaskStatus {
    /// True for completed, failed and cancelled.
    pub fn is_terminal(self) -> bool {
        matches!(self, Self::Completed | Self::Failed | Self::Cancelled)
    }
}

/// A task's data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Task {
    /// The task's id.
    pub task_id: String,
    /// Its state.
    pub status: TaskStatus,
    /// A human-readable description of the state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status_message: Option<String>,
    /// ISO 8601 creation time.
    pub created_at: String,
    /// ISO 8601 time of the last update.
    pub last_updated_at: String,
    /// Retention from creation in milliseconds; `null` (always written) for unlimited.
    #[serde(default)]
    pub ttl: Option<u64>,
    /// Suggested polling interval in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll_interval: Option<u64>,
}

/// Asks for a request to run as a task (the `task` member of its params).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskMetadata {
    /// Requested retention in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<u64>,
}

/// Ties a message to a task (`_meta["io.modelcontextprotocol/related-task"]`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RelatedTaskMetadata {
    /// The task's id.
    pub task_id: String,
}

/// The members every task-augmentable request's params have.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskAugmentedRequestParams {
    /// Request metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// Run as a task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<TaskMetadata>,
}

/// The immediate result of a task-augmented request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreateTaskResult {
    /// The task created.
    pub task: Task,
    /// Result metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// The kind of result (modern only; never set on this legacy result).
    #[serde(
        rename = "resultType",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub result_type: Option<ResultType>,
}

/// Params of `tasks/get`, `tasks/result` and `tasks/cancel`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GetTaskRequestParams {
    /// Request metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// The task's id.
    pub task_id: String,
}

/// Params of `tasks/result`.
pub type GetTaskPayloadRequestParams = GetTaskRequestParams;
/// Params of `tasks/cancel`.
pub type CancelTaskRequestParams = GetTaskRequestParams;

/// The result of `tasks/get` (and of `tasks/cancel`): the task's data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GetTaskResult {
    /// The task.
    #[serde(flatten)]
    pub task: Task,
    /// Result metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// The kind of result (modern only; never set on this legacy result).
    #[serde(
        rename = "resultType",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub result_type: Option<ResultType>,
}

/// The result of `tasks/cancel`.
pub type CancelTaskResult = GetTaskResult;

/// The result of `tasks/result`: the original request's result, whatever its shape.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GetTaskPayloadResult {
    /// Result metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// The kind of result (modern only; never set on this legacy result).
    #[serde(
        rename = "resultType",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub result_type: Option<ResultType>,
    /// The other members of the payload (e.g. a `CallToolResult`'s).
    #[serde(flatten)]
    pub payload: JsonObject,
}

/// The result of `tasks/list`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ListTasksResult {
    /// The tasks of this page.
    pub tasks: Vec<Task>,
    /// The cursor of the next page, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
    /// Result metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// The kind of result (modern only; never set on this legacy result).
    #[serde(
        rename = "resultType",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub result_type: Option<ResultType>,
}

/// Params of `notifications/tasks/status`: the task's data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TaskStatusNotificationParams {
    /// Notification metadata.
    #[serde(rename = "_meta", default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<JsonObject>,
    /// The task.
    #[serde(flatten)]
    pub task: Task,
}
