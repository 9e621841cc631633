//! [`InMemoryTaskStore`]: the default [`TaskStore`], held in this process's memory. One
//! implementation of the store contract, separate from the contract itself.

use super::store::{
    NewTask, StoreFuture, TaskPage, TaskRecord, TaskStore, TaskStoreError, TaskUpdate,
};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use toolyard_proto::InputResponses;

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
        let ttl = new.ttl;
        let record = TaskRecord::new(new);
        st.seq += 1;
        let seq = st.seq;
        st.tasks.insert(
            record.task_id.clone(),
            MemEntry {
                record: record.clone(),
                seq,
                expires: ttl.and_then(|t| now.checked_add(t)),
            },
        );
        ready(Ok(record))
    }

    fn get<'a>(&'a self, id: &'a str, owner: Option<&'a str>) -> StoreFuture<'a, TaskRecord> {
        ready(self.with_entry(id, Some(owner), |e| Ok(e.record.clone())))
    }

    fn update<'a>(&'a self, id: &'a str, update: TaskUpdate) -> StoreFuture<'a, TaskRecord> {
        ready(self.with_entry(id, None, |e| {
            e.record.apply(update)?;
            Ok(e.record.clone())
        }))
    }

    fn provide_input<'a>(
        &'a self,
        id: &'a str,
        owner: Option<&'a str>,
        responses: InputResponses,
    ) -> StoreFuture<'a, (TaskRecord, InputResponses)> {
        ready(self.with_entry(id, Some(owner), |e| {
            let accepted = e.record.accept_input(responses);
            Ok((e.record.clone(), accepted))
        }))
    }

    fn cancel<'a>(&'a self, id: &'a str, owner: Option<&'a str>) -> StoreFuture<'a, TaskRecord> {
        ready(self.with_entry(id, Some(owner), |e| {
            e.record.cancel()?;
            Ok(e.record.clone())
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
        let sorted = mine.into_iter().map(|e| (e.seq, e)).collect();
        ready(Ok(TaskPage::first(sorted, limit, u64::to_string, |e| {
            e.record.clone()
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tasks::{TaskGeneration, TaskOutcome};
    use toolyard_proto::{InputRequest, InputRequests, JsonObject, TaskStatus};

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
}
