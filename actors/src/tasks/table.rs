//! The run table: [`Tasks`] (the store plus the tasks this process runs) and what only the
//! process running a handler can hold, a [`TaskRun`] (cancellation, input waiters, the
//! done signal) and the [`TaskLink`] that ties a call's context to its task. Separate from
//! the store, which holds what a task *is*, and from the code that drives a call.

use super::settings::TaskSettings;
use super::store::{TaskGeneration, TaskRecord, TaskStore, TaskStoreError, TaskUpdate};
use crate::event_bus::{BusMsg, TaskNotice};
use crate::sink::Sink;
use arc_swap::ArcSwapOption;
use ractor::ActorRef;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use tokio::sync::{oneshot, watch};
use tokio_util::sync::CancellationToken;
use toolyard_proto::{
    jsonrpc, InputRequest, InputRequests, InputResponses, TaskStatusNotificationParams,
};

/// The server's tasks: the store, and the tasks this process runs.
pub(crate) struct Tasks {
    pub(crate) store: Arc<dyn TaskStore>,
    pub(crate) settings: TaskSettings,
    pub(super) page_size: usize,
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

    pub(super) fn live(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<TaskRun>>> {
        self.live.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn run_of(&self, id: &str) -> Option<Arc<TaskRun>> {
        self.live().get(id).cloned()
    }

    /// Tells whoever listens that a task changed.
    pub(crate) fn publish(&self, record: &TaskRecord) {
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
    pub(super) async fn update(
        &self,
        id: &str,
        update: TaskUpdate,
    ) -> Result<TaskRecord, TaskStoreError> {
        let record = self.store.update(id, update).await?;
        self.publish(&record);
        Ok(record)
    }
}

/// A task this process runs: what cannot be stored.
pub(crate) struct TaskRun {
    pub(super) id: String,
    pub(super) tasks: Weak<Tasks>,
    pub(super) cancel: CancellationToken,
    /// Waiters of outstanding input requests (tasks extension), by key.
    pub(super) waiters: Mutex<HashMap<String, oneshot::Sender<serde_json::Value>>>,
    /// Legacy: requests to the client not answered yet.
    pub(super) pending_legacy: AtomicUsize,
    /// Legacy: where `notifications/tasks/status` go.
    pub(super) notify: Option<Sink>,
    /// Flips to true when the task is finished (`tasks/result` waits on it).
    pub(super) done: watch::Sender<bool>,
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
    pub(super) fn deliver(&self, accepted: InputResponses) {
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
    pub(super) run: OnceLock<Arc<TaskRun>>,
    /// Deferred tasks: the handler's request to start the task, with the signal it waits on.
    pub(super) escalate: Mutex<Option<oneshot::Sender<oneshot::Sender<()>>>>,
}

impl TaskLink {
    pub(crate) fn run(&self) -> Option<&Arc<TaskRun>> {
        self.run.get()
    }

    /// Whether `start` would start the task: it has not started, and the call defers it.
    pub(crate) fn can_start(&self) -> bool {
        self.run.get().is_none()
            && self
                .escalate
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .is_some()
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
