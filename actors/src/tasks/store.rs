//! The task store's contract: the [`TaskStore`] trait and what it stores and returns
//! ([`TaskRecord`] and its wire shapes, [`NewTask`], [`TaskUpdate`], [`TaskPage`], errors).
//! Kept apart from any implementation and from the running side, since a store may live
//! out of process and be shared by replicas.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use toolyard_proto::{
    DetailedTask, ErrorObject, InputRequests, InputResponses, JsonObject, Task, TaskStatus,
};

/// A boxed future of a [`TaskStore`] operation.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, TaskStoreError>> + Send + 'a>>;

/// Why a task store operation failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TaskStoreError {
    /// No such task, or not one the caller may see.
    #[error("Task not found")]
    NotFound,
    /// The task outlived its TTL and was discarded.
    #[error("Task has expired")]
    Expired,
    /// The task already finished; its status no longer changes.
    #[error("task is already in terminal status '{}'", status_str(*.0))]
    Terminal(TaskStatus),
    /// The store holds as many tasks as it may.
    #[error("too many tasks (at most {0})")]
    Full(usize),
    /// The store's backend failed.
    #[error("task store: {0}")]
    Backend(String),
}

impl TaskStoreError {
    /// The JSON-RPC error a request about the task is answered with: -32602 for an unknown,
    /// expired or finished task, -32603 otherwise.
    pub fn to_error_object(&self) -> ErrorObject {
        match self {
            TaskStoreError::NotFound | TaskStoreError::Expired => {
                ErrorObject::invalid_params(format!("Failed to retrieve task: {self}"))
            }
            TaskStoreError::Terminal(s) => ErrorObject::invalid_params(format!(
                "Cannot cancel task: already in terminal status '{}'",
                status_str(*s)
            )),
            TaskStoreError::Full(_) | TaskStoreError::Backend(_) => {
                ErrorObject::internal(self.to_string())
            }
        }
    }
}

fn status_str(s: TaskStatus) -> &'static str {
    match s {
        TaskStatus::Working => "working",
        TaskStatus::InputRequired => "input_required",
        TaskStatus::Completed => "completed",
        TaskStatus::Failed => "failed",
        TaskStatus::Cancelled => "cancelled",
    }
}

/// The protocol generation a task was created in: it decides its wire shape and which
/// methods see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskGeneration {
    /// 2025-11-25 experimental tasks (`params.task`, `tasks/result`, `tasks/list`).
    Legacy,
    /// The tasks extension of 2026-07-28 (`resultType: "task"`, `tasks/update`).
    Extension,
}

/// What finishing a task left behind.
#[derive(Debug, Clone, PartialEq)]
pub enum TaskOutcome {
    /// What the original request would have returned (e.g. a `CallToolResult`).
    Result(JsonObject),
    /// The JSON-RPC error the original request would have been answered with.
    Error(ErrorObject),
}

/// A task as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskRecord {
    /// Unguessable id.
    pub task_id: String,
    /// Current status.
    pub status: TaskStatus,
    /// Human-readable description of the status.
    pub status_message: Option<String>,
    /// Creation time.
    pub created_at: SystemTime,
    /// Last change.
    pub last_updated_at: SystemTime,
    /// Retention from creation; `None` for unlimited.
    pub ttl: Option<Duration>,
    /// Suggested polling interval.
    pub poll_interval: Option<Duration>,
    /// Who may see the task (an authenticated principal, a legacy session); `None` for
    /// anyone who knows the id.
    pub owner: Option<String>,
    /// The generation it was created in.
    pub generation: TaskGeneration,
    /// Outstanding requests to the client (tasks extension), by key.
    pub input_requests: InputRequests,
    /// The result or error, once finished (none when cancelled).
    pub outcome: Option<TaskOutcome>,
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl TaskRecord {
    /// The 2025-11-25 wire shape (`ttl`, `pollInterval`).
    pub fn to_task(&self) -> Task {
        Task {
            task_id: self.task_id.clone(),
            status: self.status,
            status_message: self.status_message.clone(),
            created_at: iso8601(self.created_at),
            last_updated_at: iso8601(self.last_updated_at),
            ttl: self.ttl.map(millis),
            poll_interval: self.poll_interval.map(millis),
        }
    }

    /// A new task in `working`, with a fresh, unguessable id (128 random bits).
    pub fn new(new: NewTask) -> TaskRecord {
        let bits: u128 = rand::random();
        let at = SystemTime::now();
        TaskRecord {
            task_id: format!("{bits:032x}"),
            status: TaskStatus::Working,
            status_message: None,
            created_at: at,
            last_updated_at: at,
            ttl: new.ttl,
            poll_interval: new.poll_interval,
            owner: new.owner,
            generation: new.generation,
            input_requests: InputRequests::new(),
            outcome: None,
        }
    }

    /// True once the task's TTL (from creation) has passed.
    pub fn expired(&self, now: SystemTime) -> bool {
        self.ttl
            .and_then(|t| self.created_at.checked_add(t))
            .is_some_and(|at| at <= now)
    }

    /// Applies `update` (what [`TaskStore::update`] does to the stored record); a terminal
    /// task refuses with [`TaskStoreError::Terminal`]. Every store shares this rule.
    pub fn apply(&mut self, update: TaskUpdate) -> Result<(), TaskStoreError> {
        if self.status.is_terminal() {
            return Err(TaskStoreError::Terminal(self.status));
        }
        match update {
            TaskUpdate::Working(message) => {
                self.status = TaskStatus::Working;
                self.status_message = message;
                self.input_requests.clear();
            }
            TaskUpdate::StatusMessage(message) => self.status_message = Some(message),
            TaskUpdate::InputRequired(requests) => {
                self.status = TaskStatus::InputRequired;
                self.input_requests.extend(requests);
            }
            TaskUpdate::Finish {
                status,
                outcome,
                message,
            } => {
                self.status = status;
                self.outcome = outcome;
                self.status_message = message;
                self.input_requests.clear();
            }
        }
        self.last_updated_at = SystemTime::now();
        Ok(())
    }

    /// Takes the answers whose keys are outstanding (what [`TaskStore::provide_input`] does)
    /// and returns them; with nothing left outstanding the task is `working` again.
    pub fn accept_input(&mut self, responses: InputResponses) -> InputResponses {
        let mut accepted = InputResponses::new();
        if self.status.is_terminal() {
            return accepted;
        }
        for (key, value) in responses {
            if self.input_requests.remove(&key).is_some() {
                accepted.insert(key, value);
            }
        }
        if !accepted.is_empty() {
            if self.input_requests.is_empty() && self.status == TaskStatus::InputRequired {
                self.status = TaskStatus::Working;
            }
            self.last_updated_at = SystemTime::now();
        }
        accepted
    }

    /// Moves the task to `cancelled` (what [`TaskStore::cancel`] does); a terminal one
    /// refuses with [`TaskStoreError::Terminal`].
    pub fn cancel(&mut self) -> Result<(), TaskStoreError> {
        if self.status.is_terminal() {
            return Err(TaskStoreError::Terminal(self.status));
        }
        self.status = TaskStatus::Cancelled;
        self.status_message = Some("The task was cancelled by request.".into());
        self.input_requests.clear();
        self.last_updated_at = SystemTime::now();
        Ok(())
    }

    /// The tasks extension's wire shape: a `DetailedTask` (`ttlMs`, `pollIntervalMs`, and
    /// `inputRequests`, `result` or `error` as the status calls for).
    pub fn to_detailed(&self) -> DetailedTask {
        let mut t = self.to_created();
        match (self.status, &self.outcome) {
            (TaskStatus::InputRequired, _) => {
                t.input_requests = Some(self.input_requests.clone());
            }
            (TaskStatus::Completed | TaskStatus::Failed, Some(TaskOutcome::Result(r))) => {
                t.result = Some(r.clone());
            }
            (TaskStatus::Failed, Some(TaskOutcome::Error(e))) => t.error = Some(e.clone()),
            _ => {}
        }
        t
    }

    /// The tasks extension's `CreateTaskResult` body (no status-specific members).
    pub fn to_created(&self) -> DetailedTask {
        DetailedTask {
            task_id: self.task_id.clone(),
            status: self.status,
            status_message: self.status_message.clone(),
            created_at: iso8601(self.created_at),
            last_updated_at: iso8601(self.last_updated_at),
            ttl_ms: self.ttl.map(millis),
            poll_interval_ms: self.poll_interval.map(millis),
            input_requests: None,
            result: None,
            error: None,
            meta: None,
        }
    }
}

/// A task to create.
#[derive(Debug, Clone)]
pub struct NewTask {
    /// Who may see it.
    pub owner: Option<String>,
    /// Its generation.
    pub generation: TaskGeneration,
    /// Retention from creation; `None` for unlimited.
    pub ttl: Option<Duration>,
    /// Suggested polling interval.
    pub poll_interval: Option<Duration>,
}

/// A change to a task's status or result.
#[derive(Debug, Clone)]
pub enum TaskUpdate {
    /// (Back to) `working`, with an optional status message; clears outstanding requests.
    Working(Option<String>),
    /// Only the status message changes.
    StatusMessage(String),
    /// `input_required`: these requests join the outstanding ones.
    InputRequired(InputRequests),
    /// A terminal status with what the request produced.
    Finish {
        /// `completed`, `failed` or `cancelled`.
        status: TaskStatus,
        /// The result or error (none for `cancelled`).
        outcome: Option<TaskOutcome>,
        /// A status message.
        message: Option<String>,
    },
}

/// A page of tasks.
#[derive(Debug, Clone, Default)]
pub struct TaskPage {
    /// The tasks, oldest first.
    pub tasks: Vec<TaskRecord>,
    /// The cursor of the next page, if any.
    pub next_cursor: Option<String>,
}

impl TaskPage {
    /// The first `limit` (at least one) of `sorted` (each item with its position, oldest
    /// first, those before the caller's cursor already left out), and the cursor of the last
    /// one listed when more follow. Only the listed items become records.
    pub fn first<K, T>(
        sorted: Vec<(K, T)>,
        limit: usize,
        cursor: impl FnOnce(&K) -> String,
        record: impl FnMut(T) -> TaskRecord,
    ) -> TaskPage {
        let limit = limit.max(1);
        let next_cursor = (sorted.len() > limit).then(|| cursor(&sorted[limit - 1].0));
        let tasks = sorted
            .into_iter()
            .take(limit)
            .map(|(_, t)| t)
            .map(record)
            .collect();
        TaskPage { tasks, next_cursor }
    }
}

/// Where tasks live. Every operation is async so a store can be remote (a database, a
/// key-value service shared by replicas); a created task must be readable by `get` as soon
/// as `create` resolves (the protocol's durable-create rule).
///
/// Owner checks: `get`, `cancel`, `provide_input` and `list` take the caller's owner and
/// treat a task of another owner as not found. `update` is the server's own.
pub trait TaskStore: Send + Sync + 'static {
    /// Creates a task in `working`.
    fn create(&self, new: NewTask) -> StoreFuture<'_, TaskRecord>;
    /// A task by id.
    fn get<'a>(&'a self, id: &'a str, owner: Option<&'a str>) -> StoreFuture<'a, TaskRecord>;
    /// Changes a task's status or result; a terminal task refuses with
    /// [`TaskStoreError::Terminal`].
    fn update<'a>(&'a self, id: &'a str, update: TaskUpdate) -> StoreFuture<'a, TaskRecord>;
    /// Records the client's answers: those whose keys are outstanding are removed from the
    /// outstanding requests and returned (others are ignored); a task with nothing left
    /// outstanding goes back to `working`.
    fn provide_input<'a>(
        &'a self,
        id: &'a str,
        owner: Option<&'a str>,
        responses: InputResponses,
    ) -> StoreFuture<'a, (TaskRecord, InputResponses)>;
    /// Moves a task to `cancelled`; a terminal one refuses with
    /// [`TaskStoreError::Terminal`].
    fn cancel<'a>(&'a self, id: &'a str, owner: Option<&'a str>) -> StoreFuture<'a, TaskRecord>;
    /// The tasks of `owner`, oldest first, `limit` per page.
    fn list<'a>(
        &'a self,
        owner: Option<&'a str>,
        cursor: Option<&'a str>,
        limit: usize,
    ) -> StoreFuture<'a, TaskPage>;
}

// ---------------------------------------------------------------------------------------
// Time
// ---------------------------------------------------------------------------------------

/// `t` as an ISO 8601 / RFC 3339 UTC timestamp with milliseconds.
pub(crate) fn iso8601(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (h, m, s) = (secs % 86_400 / 3600, secs % 3600 / 60, secs % 60);
    // Days since the epoch to a proleptic Gregorian date, counting in 400-year eras that
    // start on March 1st (so the leap day ends a year).
    let days = i64::try_from(secs / 86_400).unwrap_or(0) + 719_468;
    let era = days.div_euclid(146_097);
    let doe = days.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{h:02}:{m:02}:{s:02}.{:03}Z",
        d.subsec_millis()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_iso8601_utc() {
        let at = |s: u64| iso8601(UNIX_EPOCH + Duration::from_secs(s));
        assert_eq!(at(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(at(951_782_400), "2000-02-29T00:00:00.000Z");
        assert_eq!(at(1_700_000_000), "2023-11-14T22:13:20.000Z");
        assert_eq!(at(4_107_542_399), "2100-02-28T23:59:59.000Z");
        assert_eq!(
            iso8601(UNIX_EPOCH + Duration::from_millis(1_234)),
            "1970-01-01T00:00:01.234Z"
        );
    }
    #[test]
    fn tasks_wire_shapes() {
        let at = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let r = TaskRecord {
            task_id: "t1".into(),
            status: TaskStatus::Failed,
            status_message: Some("boom".into()),
            created_at: at,
            last_updated_at: at,
            ttl: Some(Duration::from_secs(60)),
            poll_interval: Some(Duration::from_millis(500)),
            owner: None,
            generation: TaskGeneration::Extension,
            input_requests: InputRequests::new(),
            outcome: Some(TaskOutcome::Error(ErrorObject::internal("boom"))),
        };
        let modern = serde_json::to_value(r.to_detailed()).unwrap();
        assert_eq!(modern["ttlMs"], 60_000);
        assert_eq!(modern["pollIntervalMs"], 500);
        assert_eq!(modern["error"]["code"], -32603);
        assert!(modern.get("ttl").is_none() && modern.get("result").is_none());
        let created = serde_json::to_value(r.to_created()).unwrap();
        assert!(created.get("error").is_none());
        let legacy = serde_json::to_value(r.to_task()).unwrap();
        assert_eq!(legacy["ttl"], 60_000);
        assert_eq!(legacy["pollInterval"], 500);
        assert_eq!(legacy["createdAt"], "2023-11-14T22:13:20.000Z");
        assert!(legacy.get("ttlMs").is_none());
    }
}
