//! Tasks: a `tools/call` that answers with a task handle and runs on in the background.
//!
//! Two generations share one machinery:
//! - the **tasks extension** of 2026-07-28 (`io.modelcontextprotocol/tasks`, SEP-2663): the
//!   server decides, per call, to answer a caller that declared the extension with a flat
//!   `CreateTaskResult` (`resultType: "task"`); the caller polls `tasks/get` (status, then the
//!   inlined `result` or `error`), answers input requests with `tasks/update`, cancels with
//!   `tasks/cancel`, and may hear `notifications/tasks` on a `subscriptions/listen` stream;
//! - the **experimental tasks** of 2025-11-25: the caller asks with `params.task`, gets
//!   `{task}`, and uses `tasks/get`, `tasks/result` (blocks until terminal), `tasks/list`,
//!   `tasks/cancel`; `notifications/tasks/status` go to the connection that created the task.
//!
//! What a task *is* (status, timestamps, outstanding input requests, its result) lives in a
//! [`TaskStore`], which could be shared by replicas; what only the process running the
//! handler can hold (its future, cancellation token, the waiters of its input requests) lives
//! in the in-process [`Tasks`] table. `docs/semantics.md` ("Tasks") is the contract.

use crate::context::RequestContext;
use crate::error::HandlerError;
use crate::event_bus::{BusMsg, TaskNotice};
use crate::exec::{self, Binding, Ran};
use crate::middleware::Outcome;
use crate::mrtr::StateSealer;
use crate::reply::Reply;
use crate::sink::Sink;
use crate::tool::ToolDef;
use arc_swap::ArcSwapOption;
use futures_util::FutureExt;
use ractor::ActorRef;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::collections::HashMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::{oneshot, watch};
use tokio_util::sync::CancellationToken;
use toolyard_proto::{
    jsonrpc, CallToolResult, ClientCapabilities, CreateTaskResult, DetailedTask, ErrorObject,
    GetTaskRequestParams, GetTaskResult, InputRequest, InputRequests, InputResponses, JsonObject,
    ListTasksResult, ProtocolVersion, ResultType, Task, TaskStatus, TaskStatusNotificationParams,
    TaskSupport, UpdateTaskRequestParams,
};

// ---------------------------------------------------------------------------------------
// The store
// ---------------------------------------------------------------------------------------

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

/// A [`TaskStore`] in this process's memory: tasks expire `ttl` after creation (checked on
/// access, and swept at most once a second when tasks are created), and at most
/// `max_tasks` live at once.
#[derive(Debug)]
pub struct InMemoryTaskStore {
    state: Mutex<MemState>,
    max_tasks: usize,
}

#[derive(Debug)]
struct MemState {
    tasks: HashMap<String, MemEntry>,
    seq: u64,
    last_sweep: Instant,
}

#[derive(Debug)]
struct MemEntry {
    record: TaskRecord,
    seq: u64,
    expires: Option<Instant>,
}

impl MemEntry {
    fn expired(&self, now: Instant) -> bool {
        self.expires.is_some_and(|e| e <= now)
    }
}

impl Default for InMemoryTaskStore {
    fn default() -> Self {
        Self::new(10_000)
    }
}

fn ready<'a, T: Send + 'a>(r: Result<T, TaskStoreError>) -> StoreFuture<'a, T> {
    Box::pin(std::future::ready(r))
}

/// A fresh, unguessable task id (128 random bits).
fn new_task_id() -> String {
    let bits: u128 = rand::random();
    format!("{bits:032x}")
}

impl InMemoryTaskStore {
    /// A store of at most `max_tasks` live tasks.
    pub fn new(max_tasks: usize) -> Self {
        InMemoryTaskStore {
            state: Mutex::new(MemState {
                tasks: HashMap::new(),
                seq: 0,
                last_sweep: Instant::now(),
            }),
            max_tasks,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, MemState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Drops every expired task now; returns how many.
    pub fn purge_expired(&self) -> usize {
        let mut st = self.state();
        let now = Instant::now();
        let before = st.tasks.len();
        st.tasks.retain(|_, e| !e.expired(now));
        st.last_sweep = now;
        before - st.tasks.len()
    }

    /// Live tasks (expired ones not yet swept included).
    pub fn len(&self) -> usize {
        self.state().tasks.len()
    }

    /// True when no task is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The entry of `id`, if it exists, has not expired and `owner` may see it.
    fn with_entry<T>(
        &self,
        id: &str,
        owner: Option<Option<&str>>,
        f: impl FnOnce(&mut MemEntry) -> Result<T, TaskStoreError>,
    ) -> Result<T, TaskStoreError> {
        let mut st = self.state();
        let now = Instant::now();
        let expired = match st.tasks.get(id) {
            None => return Err(TaskStoreError::NotFound),
            Some(e) => e.expired(now),
        };
        if expired {
            st.tasks.remove(id);
            return Err(TaskStoreError::Expired);
        }
        let entry = st.tasks.get_mut(id).ok_or(TaskStoreError::NotFound)?;
        if let Some(owner) = owner {
            if entry.record.owner.as_deref() != owner {
                return Err(TaskStoreError::NotFound);
            }
        }
        f(entry)
    }
}

impl TaskStore for InMemoryTaskStore {
    fn create(&self, new: NewTask) -> StoreFuture<'_, TaskRecord> {
        let mut st = self.state();
        let now = Instant::now();
        if now.duration_since(st.last_sweep) >= Duration::from_secs(1)
            || st.tasks.len() >= self.max_tasks
        {
            st.tasks.retain(|_, e| !e.expired(now));
            st.last_sweep = now;
        }
        if st.tasks.len() >= self.max_tasks {
            return ready(Err(TaskStoreError::Full(self.max_tasks)));
        }
        let at = SystemTime::now();
        let record = TaskRecord {
            task_id: new_task_id(),
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
        };
        st.seq += 1;
        let seq = st.seq;
        st.tasks.insert(
            record.task_id.clone(),
            MemEntry {
                record: record.clone(),
                seq,
                expires: new.ttl.and_then(|t| now.checked_add(t)),
            },
        );
        ready(Ok(record))
    }

    fn get<'a>(&'a self, id: &'a str, owner: Option<&'a str>) -> StoreFuture<'a, TaskRecord> {
        ready(self.with_entry(id, Some(owner), |e| Ok(e.record.clone())))
    }

    fn update<'a>(&'a self, id: &'a str, update: TaskUpdate) -> StoreFuture<'a, TaskRecord> {
        ready(self.with_entry(id, None, |e| {
            let r = &mut e.record;
            if r.status.is_terminal() {
                return Err(TaskStoreError::Terminal(r.status));
            }
            match update {
                TaskUpdate::Working(message) => {
                    r.status = TaskStatus::Working;
                    r.status_message = message;
                    r.input_requests.clear();
                }
                TaskUpdate::StatusMessage(message) => r.status_message = Some(message),
                TaskUpdate::InputRequired(requests) => {
                    r.status = TaskStatus::InputRequired;
                    r.input_requests.extend(requests);
                }
                TaskUpdate::Finish {
                    status,
                    outcome,
                    message,
                } => {
                    r.status = status;
                    r.outcome = outcome;
                    r.status_message = message;
                    r.input_requests.clear();
                }
            }
            r.last_updated_at = SystemTime::now();
            Ok(r.clone())
        }))
    }

    fn provide_input<'a>(
        &'a self,
        id: &'a str,
        owner: Option<&'a str>,
        responses: InputResponses,
    ) -> StoreFuture<'a, (TaskRecord, InputResponses)> {
        ready(self.with_entry(id, Some(owner), |e| {
            let r = &mut e.record;
            let mut accepted = InputResponses::new();
            if !r.status.is_terminal() {
                for (key, value) in responses {
                    if r.input_requests.remove(&key).is_some() {
                        accepted.insert(key, value);
                    }
                }
                if !accepted.is_empty() {
                    if r.input_requests.is_empty() && r.status == TaskStatus::InputRequired {
                        r.status = TaskStatus::Working;
                    }
                    r.last_updated_at = SystemTime::now();
                }
            }
            Ok((r.clone(), accepted))
        }))
    }

    fn cancel<'a>(&'a self, id: &'a str, owner: Option<&'a str>) -> StoreFuture<'a, TaskRecord> {
        ready(self.with_entry(id, Some(owner), |e| {
            let r = &mut e.record;
            if r.status.is_terminal() {
                return Err(TaskStoreError::Terminal(r.status));
            }
            r.status = TaskStatus::Cancelled;
            r.status_message = Some("The task was cancelled by request.".into());
            r.input_requests.clear();
            r.last_updated_at = SystemTime::now();
            Ok(r.clone())
        }))
    }

    fn list<'a>(
        &'a self,
        owner: Option<&'a str>,
        cursor: Option<&'a str>,
        limit: usize,
    ) -> StoreFuture<'a, TaskPage> {
        let after = match cursor.map(str::parse::<u64>) {
            None => 0,
            Some(Ok(n)) => n,
            Some(Err(_)) => return ready(Err(TaskStoreError::NotFound)),
        };
        let st = self.state();
        let now = Instant::now();
        let mut mine: Vec<&MemEntry> = st
            .tasks
            .values()
            .filter(|e| e.seq > after && !e.expired(now) && e.record.owner.as_deref() == owner)
            .collect();
        mine.sort_by_key(|e| e.seq);
        let limit = limit.max(1);
        let next_cursor = (mine.len() > limit).then(|| mine[limit - 1].seq.to_string());
        let tasks = mine
            .into_iter()
            .take(limit)
            .map(|e| e.record.clone())
            .collect();
        ready(Ok(TaskPage { tasks, next_cursor }))
    }
}

// ---------------------------------------------------------------------------------------
// Settings
// ---------------------------------------------------------------------------------------

/// How the server runs tasks.
#[derive(Debug, Clone, Copy)]
pub struct TaskSettings {
    /// Retention of a task from its creation, unless a 2025-11-25 caller asks for less;
    /// `None` for unlimited.
    pub default_ttl: Option<Duration>,
    /// The longest retention a 2025-11-25 caller may ask for.
    pub max_ttl: Duration,
    /// The polling interval suggested to callers.
    pub poll_interval: Duration,
}

impl Default for TaskSettings {
    fn default() -> Self {
        TaskSettings {
            default_ttl: Some(Duration::from_secs(3600)),
            max_ttl: Duration::from_secs(24 * 3600),
            poll_interval: Duration::from_millis(500),
        }
    }
}

// ---------------------------------------------------------------------------------------
// The running side
// ---------------------------------------------------------------------------------------

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

/// The server's tasks: the store, and the tasks this process runs.
pub(crate) struct Tasks {
    pub(crate) store: Arc<dyn TaskStore>,
    pub(crate) settings: TaskSettings,
    page_size: usize,
    live: Mutex<HashMap<String, Arc<TaskRun>>>,
    bus: ArcSwapOption<ActorRef<BusMsg>>,
}

impl Tasks {
    pub(crate) fn new(store: Arc<dyn TaskStore>, settings: TaskSettings, page_size: usize) -> Self {
        Tasks {
            store,
            settings,
            page_size,
            live: Mutex::default(),
            bus: ArcSwapOption::empty(),
        }
    }

    /// The EventBus that carries `notifications/tasks` (replaced when it restarts).
    pub(crate) fn set_bus(&self, bus: ActorRef<BusMsg>) {
        self.bus.store(Some(Arc::new(bus)));
    }

    /// Tasks whose handler runs in this process.
    pub(crate) fn running(&self) -> usize {
        self.live().len()
    }

    fn live(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<TaskRun>>> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn run_of(&self, id: &str) -> Option<Arc<TaskRun>> {
        self.live().get(id).cloned()
    }

    /// Tells whoever listens that a task changed.
    fn publish(&self, record: &TaskRecord) {
        match record.generation {
            TaskGeneration::Legacy => {
                let sink = self.run_of(&record.task_id).and_then(|r| r.notify.clone());
                if let Some(sink) = sink {
                    let params = TaskStatusNotificationParams {
                        meta: None,
                        task: record.to_task(),
                    };
                    if let Ok(b) = jsonrpc::notification_bytes(
                        toolyard_proto::method::NOTIFICATIONS_TASKS_STATUS,
                        &params,
                    ) {
                        sink.send(b);
                    }
                }
            }
            TaskGeneration::Extension => {
                let Some(bus) = self.bus.load_full() else {
                    return;
                };
                if let Ok(serde_json::Value::Object(params)) =
                    serde_json::to_value(record.to_detailed())
                {
                    let _ = bus.cast(BusMsg::TaskStatus(Box::new(TaskNotice {
                        task_id: record.task_id.clone(),
                        owner: record.owner.clone(),
                        params,
                    })));
                }
            }
        }
    }

    /// Applies a change and tells listeners.
    async fn update(&self, id: &str, update: TaskUpdate) -> Result<TaskRecord, TaskStoreError> {
        let record = self.store.update(id, update).await?;
        self.publish(&record);
        Ok(record)
    }
}

/// A task this process runs: what cannot be stored.
pub(crate) struct TaskRun {
    id: String,
    tasks: Weak<Tasks>,
    cancel: CancellationToken,
    /// Waiters of outstanding input requests (tasks extension), by key.
    waiters: Mutex<HashMap<String, oneshot::Sender<serde_json::Value>>>,
    /// Legacy: requests to the client not answered yet.
    pending_legacy: AtomicUsize,
    /// Legacy: where `notifications/tasks/status` go.
    notify: Option<Sink>,
    /// Flips to true when the task is finished (`tasks/result` waits on it).
    done: watch::Sender<bool>,
}

impl TaskRun {
    pub(crate) fn id(&self) -> &str {
        &self.id
    }

    /// Asks the client (tasks extension): the task shows `input_required` with these requests
    /// until `tasks/update` answers every one of them.
    pub(crate) async fn ask(
        &self,
        requests: Vec<(String, InputRequest)>,
        cancel: &CancellationToken,
    ) -> Result<InputResponses, crate::InputError> {
        let Some(tasks) = self.tasks.upgrade() else {
            return Err(crate::InputError::Cancelled);
        };
        let mut waiting = Vec::with_capacity(requests.len());
        {
            // Waiters first, so an answer that races the store update is not lost.
            let mut w = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
            for (key, _) in &requests {
                let (tx, rx) = oneshot::channel();
                w.insert(key.clone(), tx);
                waiting.push((key.clone(), rx));
            }
        }
        let map: InputRequests = requests.into_iter().collect();
        if tasks
            .update(&self.id, TaskUpdate::InputRequired(map))
            .await
            .is_err()
        {
            return Err(crate::InputError::Cancelled);
        }
        drop(tasks);
        let mut answers = InputResponses::new();
        for (key, rx) in waiting {
            let value = tokio::select! {
                biased;
                _ = cancel.cancelled() => return Err(crate::InputError::Cancelled),
                v = rx => v.map_err(|_| crate::InputError::Cancelled)?,
            };
            answers.insert(key, value);
        }
        Ok(answers)
    }

    /// Hands the client's accepted answers to their waiters.
    fn deliver(&self, accepted: InputResponses) {
        let mut w = self.waiters.lock().unwrap_or_else(|p| p.into_inner());
        for (key, value) in accepted {
            if let Some(tx) = w.remove(&key) {
                let _ = tx.send(value);
            }
        }
    }

    /// Legacy: marks the time a request to the client is outstanding.
    pub(crate) fn waiting(&self) -> LegacyWait<'_> {
        LegacyWait(self)
    }
}

/// Legacy: the task is `input_required` while any of its requests to the client is pending.
pub(crate) struct LegacyWait<'a>(&'a TaskRun);

impl LegacyWait<'_> {
    pub(crate) async fn begin(&self) {
        if self.0.pending_legacy.fetch_add(1, Ordering::AcqRel) == 0 {
            if let Some(tasks) = self.0.tasks.upgrade() {
                let _ = tasks
                    .update(&self.0.id, TaskUpdate::InputRequired(InputRequests::new()))
                    .await;
            }
        }
    }
    pub(crate) async fn end(&self) {
        if self.0.pending_legacy.fetch_sub(1, Ordering::AcqRel) == 1 {
            if let Some(tasks) = self.0.tasks.upgrade() {
                let _ = tasks.update(&self.0.id, TaskUpdate::Working(None)).await;
            }
        }
    }
}

/// Ties a call's context to the task it may become.
pub(crate) struct TaskLink {
    run: OnceLock<Arc<TaskRun>>,
    /// Deferred tasks: the handler's request to start the task, with the signal it waits on.
    escalate: Mutex<Option<oneshot::Sender<oneshot::Sender<()>>>>,
}

impl TaskLink {
    pub(crate) fn run(&self) -> Option<&Arc<TaskRun>> {
        self.run.get()
    }

    pub(crate) async fn start(&self) {
        if self.run.get().is_some() {
            return;
        }
        let Some(escalate) = self
            .escalate
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        else {
            return;
        };
        let (tx, rx) = oneshot::channel();
        if escalate.send(tx).is_ok() {
            let _ = rx.await;
        }
    }
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

// ---------------------------------------------------------------------------------------
// tasks/* methods
// ---------------------------------------------------------------------------------------

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
        (_, "tasks/get") => match jsonrpc::params::<GetTaskRequestParams>(params.as_deref()) {
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
        },
        (true, "tasks/update") => {
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
        (_, "tasks/cancel") => match jsonrpc::params::<GetTaskRequestParams>(params.as_deref()) {
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
        },
        (false, "tasks/result") => {
            match jsonrpc::params::<GetTaskRequestParams>(params.as_deref()) {
                Ok(p) => {
                    tokio::spawn(task_result(tasks, p.task_id, owner, ctx, reply));
                }
                Err(e) => reply.err(e),
            }
        }
        (false, "tasks/list") => match jsonrpc::params::<Paginated>(params.as_deref()) {
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

    fn new_task(owner: Option<&str>, ttl: Option<Duration>) -> NewTask {
        NewTask {
            owner: owner.map(str::to_owned),
            generation: TaskGeneration::Extension,
            ttl,
            poll_interval: Some(Duration::from_millis(100)),
        }
    }

    fn elicit(message: &str) -> InputRequest {
        InputRequest::Elicit(toolyard_proto::ElicitRequestParams::form(
            message,
            JsonObject::new(),
        ))
    }

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

    #[tokio::test]
    async fn tasks_store_create_then_get() {
        let store = InMemoryTaskStore::default();
        let t = store.create(new_task(None, None)).await.unwrap();
        assert_eq!(t.status, TaskStatus::Working);
        assert_eq!(t.task_id.len(), 32);
        let again = store.get(&t.task_id, None).await.unwrap();
        assert_eq!(again, t);
        let other = store.create(new_task(None, None)).await.unwrap();
        assert_ne!(other.task_id, t.task_id);
        assert_eq!(
            store.get("nope", None).await.unwrap_err(),
            TaskStoreError::NotFound
        );
    }

    #[tokio::test]
    async fn tasks_store_hides_other_owners_tasks() {
        let store = InMemoryTaskStore::default();
        let t = store.create(new_task(Some("alice"), None)).await.unwrap();
        assert!(store.get(&t.task_id, Some("alice")).await.is_ok());
        for who in [Some("bob"), None] {
            assert_eq!(
                store.get(&t.task_id, who).await.unwrap_err(),
                TaskStoreError::NotFound
            );
            assert_eq!(
                store.cancel(&t.task_id, who).await.unwrap_err(),
                TaskStoreError::NotFound
            );
        }
        let page = store.list(Some("bob"), None, 10).await.unwrap();
        assert!(page.tasks.is_empty());
    }

    #[tokio::test]
    async fn tasks_store_completes_and_stays_terminal() {
        let store = InMemoryTaskStore::default();
        let t = store.create(new_task(None, None)).await.unwrap();
        let mut result = JsonObject::new();
        result.insert("content".into(), serde_json::json!([]));
        let done = store
            .update(
                &t.task_id,
                TaskUpdate::Finish {
                    status: TaskStatus::Completed,
                    outcome: Some(TaskOutcome::Result(result.clone())),
                    message: None,
                },
            )
            .await
            .unwrap();
        assert_eq!(done.status, TaskStatus::Completed);
        assert_eq!(done.to_detailed().result, Some(result));
        assert_eq!(
            store
                .update(&t.task_id, TaskUpdate::Working(None))
                .await
                .unwrap_err(),
            TaskStoreError::Terminal(TaskStatus::Completed)
        );
        assert_eq!(
            store.cancel(&t.task_id, None).await.unwrap_err(),
            TaskStoreError::Terminal(TaskStatus::Completed)
        );
    }

    #[tokio::test]
    async fn tasks_store_cancel_wins_over_a_late_result() {
        let store = InMemoryTaskStore::default();
        let t = store.create(new_task(None, None)).await.unwrap();
        let c = store.cancel(&t.task_id, None).await.unwrap();
        assert_eq!(c.status, TaskStatus::Cancelled);
        let late = store
            .update(
                &t.task_id,
                TaskUpdate::Finish {
                    status: TaskStatus::Completed,
                    outcome: None,
                    message: None,
                },
            )
            .await;
        assert_eq!(
            late.unwrap_err(),
            TaskStoreError::Terminal(TaskStatus::Cancelled)
        );
        let still = store.get(&t.task_id, None).await.unwrap();
        assert_eq!(still.status, TaskStatus::Cancelled);
    }

    #[tokio::test]
    async fn tasks_store_partial_input_keeps_input_required() {
        let store = InMemoryTaskStore::default();
        let t = store.create(new_task(None, None)).await.unwrap();
        let asks: InputRequests = [("a".into(), elicit("A?")), ("b".into(), elicit("B?"))]
            .into_iter()
            .collect();
        let r = store
            .update(&t.task_id, TaskUpdate::InputRequired(asks))
            .await
            .unwrap();
        assert_eq!(r.status, TaskStatus::InputRequired);
        assert_eq!(r.to_detailed().input_requests.map(|m| m.len()), Some(2));

        let mut answers = InputResponses::new();
        answers.insert("a".into(), serde_json::json!({"action": "accept"}));
        answers.insert("zzz".into(), serde_json::json!({"ignored": true}));
        let (r, accepted) = store
            .provide_input(&t.task_id, None, answers)
            .await
            .unwrap();
        assert_eq!(accepted.keys().collect::<Vec<_>>(), ["a"]);
        assert_eq!(r.status, TaskStatus::InputRequired);
        let left: Vec<_> = r.input_requests.keys().cloned().collect();
        assert_eq!(left, ["b"]);

        // An answered key is not accepted twice.
        let mut again = InputResponses::new();
        again.insert("a".into(), serde_json::json!({"action": "decline"}));
        let (_, accepted) = store.provide_input(&t.task_id, None, again).await.unwrap();
        assert!(accepted.is_empty());

        let mut last = InputResponses::new();
        last.insert("b".into(), serde_json::json!({"action": "accept"}));
        let (r, accepted) = store.provide_input(&t.task_id, None, last).await.unwrap();
        assert_eq!(accepted.len(), 1);
        assert_eq!(r.status, TaskStatus::Working);
        assert!(r.to_detailed().input_requests.is_none());
    }

    #[tokio::test]
    async fn tasks_store_expires_after_ttl() {
        let store = InMemoryTaskStore::default();
        let short = store
            .create(new_task(None, Some(Duration::from_millis(30))))
            .await
            .unwrap();
        let long = store
            .create(new_task(None, Some(Duration::from_secs(60))))
            .await
            .unwrap();
        let forever = store.create(new_task(None, None)).await.unwrap();
        assert!(store.get(&short.task_id, None).await.is_ok());
        assert_eq!(short.to_detailed().ttl_ms, Some(30));
        assert_eq!(forever.to_detailed().ttl_ms, None);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(
            store.get(&short.task_id, None).await.unwrap_err(),
            TaskStoreError::Expired
        );
        assert!(store.get(&long.task_id, None).await.is_ok());
        assert!(store.get(&forever.task_id, None).await.is_ok());
        assert_eq!(store.purge_expired(), 0);
        assert_eq!(store.len(), 2);
    }

    #[tokio::test]
    async fn tasks_store_is_bounded_and_lists_in_pages() {
        let store = InMemoryTaskStore::new(3);
        let mut ids = Vec::new();
        for _ in 0..3 {
            ids.push(
                store
                    .create(new_task(Some("o"), None))
                    .await
                    .unwrap()
                    .task_id,
            );
        }
        assert_eq!(
            store.create(new_task(Some("o"), None)).await.unwrap_err(),
            TaskStoreError::Full(3)
        );
        let first = store.list(Some("o"), None, 2).await.unwrap();
        assert_eq!(
            first.tasks.iter().map(|t| &t.task_id).collect::<Vec<_>>(),
            ids[..2].iter().collect::<Vec<_>>()
        );
        let cursor = first.next_cursor.unwrap();
        let second = store.list(Some("o"), Some(&cursor), 2).await.unwrap();
        assert_eq!(second.tasks.len(), 1);
        assert_eq!(second.tasks[0].task_id, ids[2]);
        assert!(second.next_cursor.is_none());
        assert!(store.list(Some("o"), Some("bogus"), 2).await.is_err());
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
