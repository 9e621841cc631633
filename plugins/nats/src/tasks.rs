//! Durable tasks on the bus, the record side: [`NatsTaskStore`] keeps every task in the
//! JetStream KV bucket `TY_TASKS` (key `task.{id}`), so any gateway answers `tasks/get`,
//! `tasks/cancel` and `tasks/list` for a task another gateway created, and a task outlives
//! the gateway that took it. Every change is a compare-and-swap on the key's revision: the
//! gateways and the worker running the task write the same record, and exactly one terminal
//! state wins (the first).
//!
//! The running side (a task's job on the `TY_TASK_JOBS` stream, claimed and run by one
//! worker) is in `jobs`.

use crate::error::NatsError;
use async_nats::jetstream::{self, kv};
use bytes::Bytes;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use toolyard::proto::{ErrorObject, InputRequests, InputResponses, JsonObject, TaskStatus};
use toolyard::{
    NewTask, StoreFuture, TaskGeneration, TaskOutcome, TaskPage, TaskRecord, TaskStore,
    TaskStoreError, TaskUpdate,
};

/// The KV bucket of task records.
pub const BUCKET: &str = "TY_TASKS";

/// How long a record is kept at most, whatever its TTL (the bucket's `max_age`); a record
/// past its own TTL reads as expired before that.
const MAX_AGE: Duration = Duration::from_secs(7 * 24 * 3600);

/// How long a gateway that sees a task's last answers recorded elsewhere waits for a worker
/// to take the job resuming it before publishing that job itself; the first of the waits
/// between its tries, each one longer by as much.
const RESUME_GRACE: Duration = Duration::from_secs(2);

/// The longest wait between a gateway's tries to publish the job resuming an answered task
/// in the background: it tries until the job is published, the task no longer waits or its
/// TTL is over, so a broker that takes no jobs for minutes (JetStream without quorum) does
/// not leave answered tasks waiting for ever.
const RESUME_EVERY_MAX: Duration = Duration::from_secs(10);

/// How many times a compare-and-swap is retried after losing a race.
const CAS_ATTEMPTS: usize = 8;

/// The key of task `id`.
pub(crate) fn key(id: &str) -> String {
    format!("task.{id}")
}

/// A task id as the store makes them (hex), the only kind a key is built from.
pub(crate) fn valid_id(id: &str) -> bool {
    !id.is_empty() && id.len() <= 64 && id.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// A record as it is stored: the task, and the worker that claimed it.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Stored {
    task_id: String,
    pub(crate) status: TaskStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) status_message: Option<String>,
    created_at_ms: u64,
    last_updated_at_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    ttl_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    poll_interval_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    owner: Option<String>,
    /// `legacy` (2025-11-25) or `extension`.
    generation: String,
    #[serde(default, skip_serializing_if = "InputRequests::is_empty")]
    pub(crate) input_requests: InputRequests,
    /// Answers a caller gave (`tasks/update`, on any gateway) that the worker running the
    /// task has not taken yet: how a durable task's input reaches the worker.
    #[serde(default, skip_serializing_if = "InputResponses::is_empty")]
    pub(crate) input_responses: InputResponses,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    result: Option<JsonObject>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    error: Option<ErrorObject>,
    /// The worker instance running (or that ran) the task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) worker: Option<String>,
    /// Set when a worker lets go of the task to wait for its caller's answers: the job that
    /// goes on with the call once every question is answered. Kept while a worker runs that
    /// round (one taking it over goes on from it), until the tool asks again or the task
    /// ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) resume: Option<Resume>,
}

/// What a worker leaves in the record of a durable task that waits for its caller's answers,
/// in place of the job it acknowledged: nothing is held while a person takes hours to
/// answer (no job in progress counting against the consumer's `max_ack_pending`, no slot,
/// no watch). Whoever records the last answer publishes the job ([`NatsTaskStore::resume`]),
/// and any worker goes on with the call from there.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Resume {
    /// Where the job goes (`{prefix}.task.{server}.{tool}`).
    pub(crate) subject: String,
    /// How many times the tool has asked: the job goes on from this round, and a job of an
    /// earlier one (delivered again) is dropped.
    pub(crate) round: u32,
    /// The job's body (the call), or `None` when it waits in `TY_TASK_BODIES`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) body: Option<Box<serde_json::value::RawValue>>,
    /// The tool's `requestState`, handed back with the answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) request_state: Option<serde_json::Value>,
    /// The job's headers carried on (its deadline, the trace context).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) headers: Vec<(String, String)>,
}

fn ms(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn at(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

fn dur_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl Stored {
    pub(crate) fn from_record(r: &TaskRecord, worker: Option<String>) -> Stored {
        let (result, error) = match &r.outcome {
            Some(TaskOutcome::Result(obj)) => (Some(obj.clone()), None),
            Some(TaskOutcome::Error(e)) => (None, Some(e.clone())),
            None => (None, None),
        };
        Stored {
            task_id: r.task_id.clone(),
            status: r.status,
            status_message: r.status_message.clone(),
            created_at_ms: ms(r.created_at),
            last_updated_at_ms: ms(r.last_updated_at),
            ttl_ms: r.ttl.map(dur_ms),
            poll_interval_ms: r.poll_interval.map(dur_ms),
            owner: r.owner.clone(),
            generation: match r.generation {
                TaskGeneration::Legacy => "legacy",
                TaskGeneration::Extension => "extension",
            }
            .to_owned(),
            input_requests: r.input_requests.clone(),
            input_responses: InputResponses::new(),
            result,
            error,
            worker,
            resume: None,
        }
    }

    /// A task of the tasks extension (2026-07-28), whose caller answers its input requests
    /// through the record; a 2025-11-25 task's questions would need its session.
    pub(crate) fn is_extension(&self) -> bool {
        self.generation != "legacy"
    }

    pub(crate) fn record(&self) -> TaskRecord {
        TaskRecord {
            task_id: self.task_id.clone(),
            status: self.status,
            status_message: self.status_message.clone(),
            created_at: at(self.created_at_ms),
            last_updated_at: at(self.last_updated_at_ms),
            ttl: self.ttl_ms.map(Duration::from_millis),
            poll_interval: self.poll_interval_ms.map(Duration::from_millis),
            owner: self.owner.clone(),
            generation: if self.generation == "legacy" {
                TaskGeneration::Legacy
            } else {
                TaskGeneration::Extension
            },
            input_requests: self.input_requests.clone(),
            outcome: match (&self.result, &self.error) {
                (Some(r), _) => Some(TaskOutcome::Result(r.clone())),
                (None, Some(e)) => Some(TaskOutcome::Error(e.clone())),
                (None, None) => None,
            },
        }
    }

    pub(crate) fn bytes(&self) -> Bytes {
        // A struct of strings, numbers and JSON values always serialises.
        serde_json::to_vec(self).unwrap_or_default().into()
    }

    pub(crate) fn parse(value: &[u8]) -> Result<Stored, TaskStoreError> {
        serde_json::from_slice(value)
            .map_err(|e| TaskStoreError::Backend(format!("an unreadable task record: {e}")))
    }

    /// Whether the task waits, every question answered, for the job resuming it to be taken
    /// ([`Resume`]).
    pub(crate) fn answered_and_waiting(&self) -> bool {
        self.resume.is_some()
            && !self.status.is_terminal()
            && self.worker.is_none()
            && self.input_requests.is_empty()
            && !self.input_responses.is_empty()
    }

    /// When the task's TTL runs out (unix ms), if it has one.
    pub(crate) fn expires_at_ms(&self) -> Option<u64> {
        self.ttl_ms.map(|t| self.created_at_ms.saturating_add(t))
    }

    /// True once the task's TTL has passed at `now`.
    fn expired(&self, now: SystemTime) -> bool {
        self.expires_at_ms().is_some_and(|at| at <= ms(now))
    }
}

/// Opens (or creates) the task bucket.
pub(crate) async fn bucket(
    js: &jetstream::Context,
    replicas: usize,
) -> Result<kv::Store, NatsError> {
    let config = kv::Config {
        bucket: BUCKET.to_owned(),
        description: "Toolyard: durable task records".to_owned(),
        history: 1,
        max_age: MAX_AGE,
        num_replicas: replicas.max(1),
        ..Default::default()
    };
    Box::pin(crate::catalog::open_bucket(js, config, "task")).await
}

/// A [`TaskStore`] in the JetStream KV bucket `TY_TASKS`, shared by every gateway and
/// worker on the bus. Give it to the gateway's server (`ServerBuilder::tasks`) and set
/// [`RemoteConfig::durable_tasks`](crate::RemoteConfig::durable_tasks): the workers' tools
/// that support tasks then run as durable jobs.
#[derive(Debug, Clone)]
pub struct NatsTaskStore {
    bucket: Arc<Records>,
    /// Digests of the records this store wrote (taken before each write), so that
    /// [`follow`](Self::follow) tells its server only of changes made elsewhere: the server
    /// told its listeners of its own already.
    own: Arc<Mutex<HashSet<u64>>>,
    /// Where the job resuming a task whose last question was answered here goes.
    js: jetstream::Context,
}

/// At most this many digests of own writes are remembered (writes whose change never showed
/// in the watch, a lost compare-and-swap, would otherwise pile up).
const OWN_WRITES: usize = 4096;

fn digest(bytes: &[u8]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

fn backend(e: impl std::fmt::Display) -> TaskStoreError {
    TaskStoreError::Backend(format!("durable task store unavailable: {e}"))
}

/// The task bucket, open or being opened: a gateway started while the NATS server is not
/// reachable yet serves at once (its local tools, `/healthz`), and its task store opens the
/// bucket in the background once the server is there ([`NatsTaskStore::opening`]).
#[derive(Debug, Default)]
struct Records {
    store: std::sync::OnceLock<kv::Store>,
    /// Woken once `store` is set.
    opened: tokio::sync::Notify,
    /// Why the last attempt to open it failed, for the calls that find it not open.
    failure: Mutex<Option<String>>,
}

/// How long a task operation waits for a bucket still being opened before it fails (as long
/// as one JetStream request may take).
const OPEN_WAIT: Duration = crate::catalog::TIMEOUT;

impl NatsTaskStore {
    /// Opens the bucket (creating it with `replicas` when it does not exist yet); fails when
    /// it cannot within a few seconds (the NATS server or JetStream is not there).
    pub async fn open(client: &async_nats::Client, replicas: usize) -> Result<Self, NatsError> {
        let js = crate::catalog::context(client.clone());
        let kv = bucket(&js, replicas).await?;
        Ok(Self::from_bucket(js, kv))
    }

    /// A store that opens its bucket in the background, retrying (with a warning now and
    /// then) until the NATS server and JetStream are there, for as long as the store lives.
    /// Until then each operation waits a few seconds for it and fails with
    /// [`TaskStoreError::Backend`] naming why the bucket is not open. Needs a Tokio runtime.
    pub fn opening(client: &async_nats::Client, replicas: usize) -> Self {
        let js = crate::catalog::context(client.clone());
        let store = NatsTaskStore {
            bucket: Arc::default(),
            own: Arc::default(),
            js: js.clone(),
        };
        let records = Arc::downgrade(&store.bucket);
        tokio::spawn(async move {
            let mut attempt = 0u32;
            loop {
                let opened = bucket(&js, replicas).await;
                // Dropped meanwhile: nobody needs the bucket any more.
                let Some(records) = records.upgrade() else {
                    return;
                };
                match opened {
                    Ok(kv) => {
                        let _ = records.store.set(kv);
                        records.opened.notify_waiters();
                        if attempt > 0 {
                            tracing::warn!(target: "toolyard::nats", "the durable task bucket is open: task calls run now");
                        }
                        return;
                    }
                    Err(e) => {
                        attempt += 1;
                        if attempt == 1 || attempt.is_multiple_of(12) {
                            tracing::warn!(target: "toolyard::nats", error = %e, attempt, "the durable task bucket cannot be opened yet: task calls fail until it is; retrying");
                        }
                        *records.failure.lock().unwrap_or_else(|p| p.into_inner()) =
                            Some(e.to_string());
                    }
                }
                drop(records);
                tokio::time::sleep(Duration::from_millis(500 * u64::from(attempt.min(10)))).await;
            }
        });
        store
    }

    pub(crate) fn from_bucket(js: jetstream::Context, kv: kv::Store) -> Self {
        let records = Records::default();
        let _ = records.store.set(kv);
        NatsTaskStore {
            bucket: Arc::new(records),
            own: Arc::default(),
            js,
        }
    }

    /// The bucket, waiting up to `wait` for it to open.
    async fn kv_within(&self, wait: Duration) -> Result<&kv::Store, TaskStoreError> {
        let records = &*self.bucket;
        if let Some(kv) = records.store.get() {
            return Ok(kv);
        }
        // Created before the check: a wake-up between the two is not lost.
        let opened = records.opened.notified();
        if records.store.get().is_none() {
            let _ = tokio::time::timeout(wait, opened).await;
        }
        records.store.get().ok_or_else(|| {
            let why = records
                .failure
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone()
                .unwrap_or_else(|| "still opening it".to_owned());
            TaskStoreError::Backend(format!(
                "durable task store unavailable: the task bucket is not open yet ({why})"
            ))
        })
    }

    /// The bucket, waiting a few seconds at most for it to open.
    async fn kv(&self) -> Result<&kv::Store, TaskStoreError> {
        self.kv_within(OPEN_WAIT).await
    }

    /// Tells `server`'s listeners (`subscriptions/listen` with task ids) of every change a
    /// task's record gets elsewhere: the worker finishing it, another gateway cancelling it.
    /// Give it the server this store serves; the watch lives as long as the returned handle
    /// (abort it to stop). The first watch is set up before this returns when it can be; when
    /// it cannot (the bucket not open yet, or JetStream slow to answer: a cluster still
    /// placing consumers), the handle's task keeps trying every second, so a gateway starts
    /// and serves all the same.
    ///
    /// The first watch starts from each record's last revision, not from now: a task whose
    /// last answers were recorded while no gateway watched (the one that recorded them gone
    /// before it could publish the job resuming the task, the broker not taking it) is seen
    /// by the next gateway to start, which publishes that job. A watch made again after it
    /// ended (the connection was lost) starts after the last revision seen, so a change made
    /// meanwhile (a worker finishing a task) still reaches the listeners.
    pub async fn follow(&self, server: toolyard::Server) -> tokio::task::JoinHandle<()> {
        // Watched at once when the bucket is open; otherwise from when it opens.
        let first = match self.bucket.store.get() {
            Some(kv) => match kv.watch_with_history(">").await {
                Ok(watch) => Some(watch),
                Err(e) => {
                    tracing::warn!(target: "toolyard::nats", error = %e, "watching the task bucket failed; trying again every second");
                    None
                }
            },
            None => None,
        };
        let store = self.clone();
        tokio::spawn(async move {
            let mut watch = first;
            // The last revision seen: the next watch starts after it.
            let mut seen = 0;
            loop {
                if let Some(w) = watch.as_mut() {
                    while let Some(Ok(entry)) = w.next().await {
                        seen = seen.max(entry.revision);
                        if entry.operation != kv::Operation::Put || store.was_own(&entry.value) {
                            continue;
                        }
                        if let Ok(stored) = Stored::parse(&entry.value) {
                            server.publish_task_status(&stored.record());
                            if stored.answered_and_waiting() {
                                store.resume_later(stored.task_id);
                            }
                        }
                    }
                }
                // The watch ended (the connection was lost), or could not be set up, or the
                // bucket is not open yet: watch again.
                tokio::time::sleep(Duration::from_secs(1)).await;
                watch = match store.kv_within(Duration::MAX).await {
                    Ok(kv) if seen > 0 => kv.watch_all_from_revision(seen + 1).await.ok(),
                    Ok(kv) => kv.watch_with_history(">").await.ok(),
                    Err(_) => None,
                };
            }
        })
    }

    /// Publishes the job resuming task `id` if it still waits, answered, for one
    /// [`RESUME_GRACE`] later (no worker took it), trying again while that fails (each wait
    /// longer by as much, up to [`RESUME_EVERY_MAX`]) until the task no longer waits or its
    /// TTL is over: the gateway that recorded the last answers may have gone away before it
    /// published the job, or the broker may not take it for a while. A job already in the
    /// stream is not put there twice (its message id, within the stream's duplicate window),
    /// and one put there twice after that is dropped by the worker as past its round.
    fn resume_later(&self, id: String) {
        let store = self.clone();
        tokio::spawn(async move {
            // Until the record says when the task ends: the longest a record is kept.
            let now = || ms(SystemTime::now());
            let mut until = now().saturating_add(MAX_AGE.as_millis() as u64);
            for tries in 1u32.. {
                tokio::time::sleep((RESUME_GRACE * tries).min(RESUME_EVERY_MAX)).await;
                if now() >= until {
                    tracing::warn!(target: "toolyard::nats", task = %id, tries, "gave up publishing the job resuming an answered task: its TTL is over");
                    return;
                }
                let stored = match store.read(&id).await {
                    Ok(Some((stored, _))) => stored,
                    Ok(None) => return,
                    Err(_) => continue,
                };
                until = stored.expires_at_ms().unwrap_or_else(|| {
                    stored
                        .created_at_ms
                        .saturating_add(MAX_AGE.as_millis() as u64)
                });
                match store.publish_resume(&id, &stored).await {
                    Ok(()) => return,
                    // Said at the first tries, then now and then.
                    Err(e) if tries <= 5 || tries.is_power_of_two() => {
                        tracing::warn!(target: "toolyard::nats", task = %id, error = %e, tries, "publishing the job resuming an answered task failed; trying again")
                    }
                    Err(_) => {}
                }
            }
        });
    }

    fn own(&self) -> std::sync::MutexGuard<'_, HashSet<u64>> {
        self.own.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records that this store is about to write `bytes`.
    fn writing(&self, bytes: &[u8]) {
        let mut own = self.own();
        if own.len() >= OWN_WRITES {
            own.clear();
        }
        own.insert(digest(bytes));
    }

    /// True (once) when this store wrote `bytes`.
    fn was_own(&self, bytes: &[u8]) -> bool {
        self.own().remove(&digest(bytes))
    }

    /// The record of `id` and its revision; `None` when there is none.
    ///
    /// async-nats reads a KV bucket with direct gets, which any replica answers, and a replica
    /// still catching up (after a restart, or a moment after any write) does not have a record
    /// just created: a task's own creator then read "not found" for it (seen in the 3-node
    /// test after quorum came back). A miss is therefore asked again of the stream's leader,
    /// which has every acknowledged write. A hit may still be one revision old; `modify`
    /// reads from the leader after a lost compare-and-swap.
    pub(crate) async fn read(&self, id: &str) -> Result<Option<(Stored, u64)>, TaskStoreError> {
        if !valid_id(id) {
            return Ok(None);
        }
        match self.kv().await?.entry(key(id)).await.map_err(backend)? {
            Some(e) if e.operation == kv::Operation::Put => {
                Ok(Some((Stored::parse(&e.value)?, e.revision)))
            }
            _ => self.read_from_leader(id).await,
        }
    }

    /// The record of `id` and its revision as the bucket's stream leader has it (a JetStream
    /// API request, not a direct get).
    pub(crate) async fn read_from_leader(
        &self,
        id: &str,
    ) -> Result<Option<(Stored, u64)>, TaskStoreError> {
        use async_nats::jetstream::stream::LastRawMessageErrorKind;
        if !valid_id(id) {
            return Ok(None);
        }
        let kv = self.kv().await?;
        let subject = format!("{}{}", kv.prefix, key(id));
        match kv.stream.get_last_raw_message_by_subject(&subject).await {
            // A delete or purge says so in `KV-Operation` (a put has none, or `PUT`); a
            // server-written marker (TTL, purge) in `Nats-Marker-Reason`.
            Ok(m)
                if m.headers.get("Nats-Marker-Reason").is_some()
                    || m.headers
                        .get("KV-Operation")
                        .is_some_and(|op| op.as_str() != "PUT") =>
            {
                Ok(None)
            }
            Ok(m) => Ok(Some((Stored::parse(&m.payload)?, m.sequence))),
            Err(e) if e.kind() == LastRawMessageErrorKind::NoMessageFound => Ok(None),
            Err(e) => Err(backend(e)),
        }
    }

    /// The record of `id` as it is now, then each change of it (`None` when the bucket
    /// cannot be watched now).
    pub(crate) async fn watch(&self, id: &str) -> Option<kv::Watch> {
        if !valid_id(id) {
            return None;
        }
        self.kv().await.ok()?.watch_with_history(key(id)).await.ok()
    }

    /// The record of `id` as `owner` may see it (`None`: the server's own access, whoever
    /// owns it), and its revision; a task past its TTL is expired.
    async fn visible(
        &self,
        id: &str,
        owner: Option<Option<&str>>,
        from_leader: bool,
    ) -> Result<(Stored, u64), TaskStoreError> {
        let read = if from_leader {
            self.read_from_leader(id).await?
        } else {
            self.read(id).await?
        };
        let Some((stored, revision)) = read else {
            return Err(TaskStoreError::NotFound);
        };
        if owner.is_some_and(|owner| stored.owner.as_deref() != owner) {
            return Err(TaskStoreError::NotFound);
        }
        if stored.expired(SystemTime::now()) {
            return Err(TaskStoreError::Expired);
        }
        Ok((stored, revision))
    }

    /// Changes the record of `id` with `change` by compare-and-swap, retrying when another
    /// writer got there first; `change` sees the current record each time (and may refuse).
    /// Returns the record written.
    pub(crate) async fn modify<T>(
        &self,
        id: &str,
        owner: Option<Option<&str>>,
        mut change: impl FnMut(&mut Stored) -> Result<T, TaskStoreError>,
    ) -> Result<(Stored, T), TaskStoreError> {
        for attempt in 0..CAS_ATTEMPTS {
            // After a lost compare-and-swap the replica read may be the stale one: ask the
            // leader.
            let (mut stored, revision) = self.visible(id, owner, attempt > 0).await?;
            let out = change(&mut stored)?;
            let bytes = stored.bytes();
            self.writing(&bytes);
            match self.kv().await?.update(key(id), bytes, revision).await {
                Ok(_) => return Ok((stored, out)),
                Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision => continue,
                Err(e) => return Err(backend(e)),
            }
        }
        Err(TaskStoreError::Backend(format!(
            "task {id}: {CAS_ATTEMPTS} concurrent writers in a row"
        )))
    }

    /// Writes answers to the worker's questions (a 2025-11-25 session's, relayed by the
    /// gateway that asked it): they wait in the record for the worker, and the task is
    /// `working` again once nothing is outstanding. All of them, not only the keys still
    /// outstanding (as `provide_input` takes): the session's own wait may have cleared the
    /// questions already when it ended.
    pub(crate) async fn answered(
        &self,
        id: &str,
        answers: InputResponses,
    ) -> Result<(), TaskStoreError> {
        let (stored, ()) = self
            .modify(id, None, |s| {
                if s.status.is_terminal() {
                    return Err(TaskStoreError::Terminal(s.status));
                }
                for (key, value) in &answers {
                    s.input_requests.remove(key);
                    s.input_responses.insert(key.clone(), value.clone());
                }
                if s.input_requests.is_empty() && s.status == TaskStatus::InputRequired {
                    s.status = TaskStatus::Working;
                }
                s.last_updated_at_ms = ms(SystemTime::now());
                Ok(())
            })
            .await?;
        self.resume(id, &stored).await
    }

    /// Publishes the job that goes on with a task a worker left waiting for input
    /// ([`Resume`]), once every question is answered; nothing while some are outstanding, or
    /// when a worker holds the task. Its message id names the round, so two gateways
    /// recording the last answers at once put one job in the stream (and a worker drops a
    /// job of a round the record is past). Called after every write of answers: a caller
    /// whose answers were recorded but whose job was not published (the broker went away
    /// between the two) gets an error saying so, while this gateway keeps trying in the
    /// background; sending them again publishes it too.
    pub(crate) async fn resume(&self, id: &str, stored: &Stored) -> Result<(), TaskStoreError> {
        let published = self.publish_resume(id, stored).await;
        if published.is_err() {
            self.resume_later(id.to_owned());
        }
        published
    }

    /// [`resume`](Self::resume)'s publish, once.
    async fn publish_resume(&self, id: &str, stored: &Stored) -> Result<(), TaskStoreError> {
        let Some(resume) = stored
            .resume
            .as_ref()
            .filter(|_| stored.answered_and_waiting())
        else {
            return Ok(());
        };
        crate::jobs::publish_resume(&self.js, id, resume)
            .await
            .map_err(|e| {
                TaskStoreError::Backend(format!(
                    "the answers are recorded, but the job going on with task {id} could not be \
                     published ({e}); this gateway keeps trying while the task waits, and sending them again \
                     publishes it too"
                ))
            })
    }

    /// Applies a change to the record as a task's worker does: through [`TaskRecord`]'s
    /// rules, keeping the claim, and the answers not yet taken until the task ends.
    pub(crate) fn apply(
        stored: &mut Stored,
        f: impl FnOnce(&mut TaskRecord) -> Result<(), TaskStoreError>,
    ) -> Result<(), TaskStoreError> {
        let mut record = stored.record();
        f(&mut record)?;
        let answers = std::mem::take(&mut stored.input_responses);
        let resume = stored.resume.take();
        *stored = Stored::from_record(&record, stored.worker.take());
        if !stored.status.is_terminal() {
            stored.input_responses = answers;
            stored.resume = resume;
        }
        Ok(())
    }
}

impl TaskStore for NatsTaskStore {
    fn create(&self, new: NewTask) -> StoreFuture<'_, TaskRecord> {
        Box::pin(async move {
            let record = TaskRecord::new(new);
            let bytes = Stored::from_record(&record, None).bytes();
            self.writing(&bytes);
            self.kv()
                .await?
                .create(key(&record.task_id), bytes)
                .await
                .map_err(backend)?;
            Ok(record)
        })
    }

    fn get<'a>(&'a self, id: &'a str, owner: Option<&'a str>) -> StoreFuture<'a, TaskRecord> {
        Box::pin(async move {
            let (stored, _) = self.visible(id, Some(owner), false).await?;
            Ok(stored.record())
        })
    }

    fn update<'a>(&'a self, id: &'a str, update: TaskUpdate) -> StoreFuture<'a, TaskRecord> {
        Box::pin(async move {
            // A task a worker finished first refuses (terminal): the gateway that waited for
            // it tells its listeners through `follow`, which sees the worker's write.
            let (stored, ()) = self
                .modify(id, None, |stored| {
                    Self::apply(stored, |r| r.apply(update.clone()))
                })
                .await?;
            Ok(stored.record())
        })
    }

    fn provide_input<'a>(
        &'a self,
        id: &'a str,
        owner: Option<&'a str>,
        responses: InputResponses,
    ) -> StoreFuture<'a, (TaskRecord, InputResponses)> {
        Box::pin(async move {
            let (stored, accepted) = self
                .modify(id, Some(owner), |stored| {
                    let mut accepted = InputResponses::new();
                    Self::apply(stored, |r| {
                        accepted = r.accept_input(responses.clone());
                        Ok(())
                    })?;
                    // For the worker going on with a durable task (the one holding it, or
                    // the one the job published below reaches); a task a gateway runs itself
                    // gets them from the caller of `provide_input`.
                    if stored.worker.is_some() || stored.resume.is_some() {
                        stored
                            .input_responses
                            .extend(accepted.iter().map(|(k, v)| (k.clone(), v.clone())));
                    }
                    Ok(accepted)
                })
                .await?;
            self.resume(id, &stored).await?;
            Ok((stored.record(), accepted))
        })
    }

    fn cancel<'a>(&'a self, id: &'a str, owner: Option<&'a str>) -> StoreFuture<'a, TaskRecord> {
        Box::pin(async move {
            // The worker running it watches the record: the cancel reaches it from here,
            // whichever gateway took the request.
            let (stored, ()) = self
                .modify(id, Some(owner), |stored| {
                    Self::apply(stored, TaskRecord::cancel)
                })
                .await?;
            Ok(stored.record())
        })
    }

    fn list<'a>(
        &'a self,
        owner: Option<&'a str>,
        cursor: Option<&'a str>,
        limit: usize,
    ) -> StoreFuture<'a, TaskPage> {
        Box::pin(async move {
            // The cursor is the last listed task's (creation ms, id): a stable order that
            // needs no counter shared between gateways.
            let after = match cursor {
                None => None,
                Some(c) => match c.split_once(':') {
                    Some((t, id)) => match t.parse::<u64>() {
                        Ok(t) => Some((t, id.to_owned())),
                        Err(_) => return Err(TaskStoreError::NotFound),
                    },
                    None => return Err(TaskStoreError::NotFound),
                },
            };
            let mut keys = self.kv().await?.keys().await.map_err(backend)?;
            let now = SystemTime::now();
            let mut mine = Vec::new();
            while let Some(k) = keys.next().await {
                let k = k.map_err(backend)?;
                let Some(id) = k.strip_prefix("task.") else {
                    continue;
                };
                if let Some((stored, _)) = self.read(id).await? {
                    if stored.owner.as_deref() == owner && !stored.expired(now) {
                        mine.push(((stored.created_at_ms, stored.task_id.clone()), stored));
                    }
                }
            }
            mine.sort_by(|a, b| a.0.cmp(&b.0));
            if let Some(after) = &after {
                mine.retain(|(k, _)| k > after);
            }
            Ok(TaskPage::first(
                mine,
                limit,
                |(t, id)| format!("{t}:{id}"),
                |stored| stored.record(),
            ))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_for_a_worker_wait_in_the_record_until_taken_and_go_when_the_task_ends() {
        let r = TaskRecord::new(NewTask {
            owner: None,
            generation: TaskGeneration::Extension,
            ttl: None,
            poll_interval: None,
        });
        let mut s = Stored::from_record(&r, Some("w1".into()));
        let ask: InputRequests =
            serde_json::from_value(serde_json::json!({"name": {"method": "roots/list"}})).unwrap();
        NatsTaskStore::apply(&mut s, |r| r.apply(TaskUpdate::InputRequired(ask))).unwrap();
        assert_eq!(s.status, TaskStatus::InputRequired);
        s.input_responses
            .insert("name".into(), serde_json::json!({"roots": []}));
        // Stored and read back, and through a change of another kind, the answer stays.
        let mut s = Stored::parse(&s.bytes()).unwrap();
        assert_eq!(s.input_responses.len(), 1);
        NatsTaskStore::apply(&mut s, |r| {
            r.apply(TaskUpdate::StatusMessage("still going".into()))
        })
        .unwrap();
        assert_eq!(s.input_responses.len(), 1, "kept across a change");
        assert_eq!(s.worker.as_deref(), Some("w1"), "the claim too");
        assert!(s.is_extension());
        // A task that ends drops what nobody took.
        NatsTaskStore::apply(&mut s, TaskRecord::cancel).unwrap();
        assert!(s.input_responses.is_empty());
        assert!(!Stored::parse(&s.bytes())
            .unwrap()
            .bytes()
            .windows(b"inputResponses".len())
            .any(|w| w == b"inputResponses"));
    }

    #[test]
    fn a_record_survives_its_stored_form() {
        let mut r = TaskRecord::new(NewTask {
            owner: Some("alice".into()),
            generation: TaskGeneration::Legacy,
            ttl: Some(Duration::from_secs(60)),
            poll_interval: Some(Duration::from_millis(250)),
        });
        r.apply(TaskUpdate::Finish {
            status: TaskStatus::Failed,
            outcome: Some(TaskOutcome::Error(ErrorObject::internal("boom"))),
            message: Some("boom".into()),
        })
        .unwrap();
        let stored = Stored::from_record(&r, Some("w1".into()));
        let back = Stored::parse(&stored.bytes()).unwrap();
        assert_eq!(back.worker.as_deref(), Some("w1"));
        let again = back.record();
        // Times keep their milliseconds.
        assert_eq!(ms(again.created_at), ms(r.created_at));
        assert_eq!(again.status, TaskStatus::Failed);
        assert_eq!(again.outcome, r.outcome);
        assert_eq!(again.owner, r.owner);
        assert_eq!(again.generation, TaskGeneration::Legacy);
        assert_eq!(again.ttl, r.ttl);
        assert_eq!(back.expires_at_ms(), Some(ms(r.created_at) + 60_000));
    }

    /// A task left waiting for input keeps what resumes it through changes (answers, a
    /// status message), reads as waiting for its job once every question is answered and no
    /// worker holds it, loses it when it ends, and keeps it in its stored form.
    #[test]
    fn what_resumes_a_waiting_task_stays_until_it_ends_and_survives_its_stored_form() {
        let r = TaskRecord::new(NewTask {
            owner: None,
            generation: TaskGeneration::Extension,
            ttl: None,
            poll_interval: None,
        });
        let mut s = Stored::from_record(&r, None);
        let question: InputRequests = serde_json::from_value(serde_json::json!({
            "name": {"method": "elicitation/create", "params": {"message": "Name?",
                "requestedSchema": {"type": "object", "properties": {"name": {"type": "string"}}}}}
        }))
        .unwrap();
        NatsTaskStore::apply(&mut s, |r| r.apply(TaskUpdate::InputRequired(question))).unwrap();
        s.resume = Some(Resume {
            subject: "mcp.v1.task.calc.ask".into(),
            round: 1,
            body: serde_json::value::RawValue::from_string(r#"{"name":"ask"}"#.into()).ok(),
            request_state: Some(serde_json::json!("sealed")),
            headers: vec![("Mcp-Deadline".into(), "123".into())],
        });
        assert!(!s.answered_and_waiting(), "a question is outstanding");
        NatsTaskStore::apply(&mut s, |r| {
            let answer = serde_json::json!({"name": {"action": "accept"}});
            r.accept_input(serde_json::from_value(answer).unwrap());
            Ok(())
        })
        .unwrap();
        s.input_responses
            .insert("name".into(), serde_json::json!({"action": "accept"}));
        assert!(s.answered_and_waiting());
        let back = Stored::parse(&s.bytes()).unwrap();
        let resume = back.resume.as_ref().unwrap();
        assert_eq!(resume.round, 1);
        assert_eq!(resume.body.as_ref().unwrap().get(), r#"{"name":"ask"}"#);
        assert_eq!(resume.request_state, Some(serde_json::json!("sealed")));
        assert_eq!(resume.headers, vec![("Mcp-Deadline".into(), "123".into())]);
        s.worker = Some("w2".into());
        assert!(!s.answered_and_waiting(), "a worker holds it");
        NatsTaskStore::apply(&mut s, |r| {
            r.apply(TaskUpdate::StatusMessage("working".into()))
        })
        .unwrap();
        assert!(s.resume.is_some(), "kept across a change");
        NatsTaskStore::apply(&mut s, TaskRecord::cancel).unwrap();
        assert!(s.resume.is_none(), "gone once the task ends");
    }

    /// The leader read (a replica's miss is asked again of it) sees what the direct read
    /// sees: the record and its revision, and nothing once the key is deleted or purged.
    #[tokio::test]
    async fn the_leader_read_agrees_with_the_replica_read_on_puts_deletes_and_purges() {
        let nats = toolyard_testkit::NatsServer::start();
        let client = async_nats::connect(nats.url()).await.unwrap();
        let store = NatsTaskStore::open(&client, 1).await.unwrap();
        let mut ids = Vec::new();
        for _ in 0..2 {
            let created = store
                .create(NewTask {
                    owner: Some("alice".into()),
                    generation: TaskGeneration::Legacy,
                    ttl: None,
                    poll_interval: None,
                })
                .await
                .unwrap();
            ids.push(created.task_id);
        }
        for id in &ids {
            let (direct, revision) = store.read(id).await.unwrap().unwrap();
            let (leader, leader_revision) = store.read_from_leader(id).await.unwrap().unwrap();
            assert_eq!(leader_revision, revision);
            assert_eq!(leader.bytes(), direct.bytes());
        }
        let kv = store.kv().await.unwrap();
        kv.delete(key(&ids[0])).await.unwrap();
        kv.purge(key(&ids[1])).await.unwrap();
        for id in &ids {
            assert!(store.read_from_leader(id).await.unwrap().is_none(), "{id}");
            assert!(store.read(id).await.unwrap().is_none(), "{id}");
        }
        assert!(store.read_from_leader("0123abcd").await.unwrap().is_none());
        assert!(store.read_from_leader("a.b").await.unwrap().is_none());
    }

    #[test]
    fn only_store_made_ids_become_keys() {
        assert!(valid_id("0123abcd"));
        assert!(!valid_id(""));
        assert!(!valid_id("a.b"));
        assert!(!valid_id("a*"));
        assert!(!valid_id(&"a".repeat(65)));
    }
}
