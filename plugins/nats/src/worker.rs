//! A worker: a Toolyard [`Server`] serving its tools, resources and prompts to the bus.
//! Requests arrive on `{prefix}.req.*.*.{server}.>` in the queue group `tyw.{server}` (one
//! more worker is more capacity; a tenant's or a user's pool narrows both, `scope`); each is
//! served with [`Server::serve_stateless`], so it gets
//! every check a 2026-07-28 request gets over HTTP (the gate, argument validation, progress,
//! per-request logging, cancellation), and its messages go back to the caller's reply
//! subject as frames:
//! `msg` for each notification, exactly one terminal `end` (the answer; empty when the
//! request was cancelled) or `err` (an error of the bridge), `ka` keepalives in between.
//!
//! The worker advertises what it serves (tools, resources, resource templates, prompts) in
//! the catalog bucket (`catalog`), re-put on a heartbeat and when its server's lists change,
//! deleted on [`Worker::shutdown`], which leaves the queue group with a subscription drain
//! (UNSUB, then a PING) and serves what arrives until the subscription ends. One gap is
//! async-nats' (0.51 and 0.52): it forgets a draining subscription once the UNSUB is written, not at
//! the PONG, so a request the server routes here in that instant is dropped unseen (the
//! caller's deadline or the gateway's inactivity window ends it; docs/nats.md, "Draining").

use crate::catalog::{self, CatalogEntry};
use crate::error::NatsError;
use crate::scope::Scope;
use crate::served::{serve_here, Served, NOTIFICATION_BACKLOG};
use crate::wire::{self, Frame};
use async_nats::{Client, HeaderMap, Message, Subject};
use bytes::Bytes;
use futures_channel::mpsc;
use futures_util::StreamExt;
use serde::de::DeserializeOwned;
use serde::Deserialize;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use toolyard::transport::run_or_spawn;
use toolyard::{Peer, Server, TaskRole, TransportTrace};
use toolyard_proto::jsonrpc::{self, Incoming, Request};
use toolyard_proto::method::{self, NameField};
use toolyard_proto::{ErrorObject, RequestId, RequestMeta};

/// How a worker serves.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// The name requests address (a subject token: `[A-Za-z0-9_-]+`).
    pub server: String,
    /// The subject prefix (default `mcp.v1`).
    pub prefix: String,
    /// Whose requests this worker's pool takes (default: every caller's); its durable task
    /// jobs are its pool's own ([`Scope::job_queue`]).
    pub scope: Scope,
    /// Requests served at once.
    pub concurrency: usize,
    /// Requests that may wait in the worker for a slot (`None`: as many as `concurrency`,
    /// at least 64), each listening for its cancellation and having told its caller it is
    /// here (a `ka` frame). A request beyond them is refused at once with `err` -32015
    /// (busy, not started: safe to re-issue), never left unseen in the subscription, where
    /// a dead worker's requests were lost without a word and a full buffer dropped them.
    pub waiting: Option<usize>,
    /// How often the catalog entry is re-put.
    pub heartbeat: Duration,
    /// How often an idle stream gets a keepalive frame.
    pub keepalive: Duration,
    /// How long [`Worker::shutdown`] lets requests in flight finish before cancelling them.
    pub drain_timeout: Duration,
    /// Replicas of the catalog bucket when this worker is the one to create it (default 1;
    /// 3 on a cluster of three or more).
    pub catalog_replicas: usize,
    /// Runs the durable task jobs of this server (`jobs`; default on).
    pub tasks: bool,
    /// How long a task job may go without a sign of life before JetStream redelivers it
    /// (default 30 s; the worker signals every third of it while it runs one).
    pub task_ack_wait: Duration,
    /// Notifications (progress, logs) a request may have waiting to be published (default
    /// 512, as many frames as the gateway lets a call have waiting); past it, a tool that
    /// reports faster than the bus takes them has new ones dropped until it catches up, so
    /// its worker's memory stays bounded. The answer is never dropped.
    pub notification_backlog: usize,
    /// The largest request body read from a claim (`Mcp-Body-Claim`; default and most
    /// [`MAX_CLAIM_BYTES`](crate::MAX_CLAIM_BYTES), 64 MiB). A worker holds each body while
    /// its request is in flight, so this bounds its memory at (slots + waiting) times it; a
    /// larger claimed request is answered -32012 without being read whole.
    pub max_claimed_request_bytes: usize,
}

impl WorkerConfig {
    /// The defaults for serving as `server`.
    pub fn new(server: impl Into<String>) -> WorkerConfig {
        WorkerConfig {
            server: server.into(),
            prefix: wire::DEFAULT_PREFIX.to_owned(),
            scope: Scope::every(),
            concurrency: 64,
            waiting: None,
            heartbeat: catalog::HEARTBEAT,
            keepalive: Duration::from_secs(15),
            drain_timeout: Duration::from_secs(10),
            catalog_replicas: 1,
            tasks: true,
            task_ack_wait: Duration::from_secs(30),
            notification_backlog: NOTIFICATION_BACKLOG,
            max_claimed_request_bytes: crate::claims::MAX_CLAIM_BYTES,
        }
    }
}

/// A running worker; [`Worker::shutdown`] drains it.
#[derive(Debug)]
pub struct Worker {
    inner: Arc<Inner>,
    serving: tokio::task::JoinHandle<()>,
    heartbeat: tokio::task::JoinHandle<()>,
    /// The bus connection as a required component of the server's lifecycle (its
    /// readiness, e.g. `toolyard worker --health`'s `/readyz`).
    connection: tokio::task::JoinHandle<()>,
    /// Pulls the server's task jobs (with `tasks`).
    jobs: Option<tokio::task::JoinHandle<()>>,
    /// The connection the jobs travel on (the requests' one unless given its own).
    jobs_client: Client,
    /// Follows the state key this name's workers share (`state_key`), when it uses it.
    _state_key: AbortOnDrop,
}

#[derive(Debug)]
struct Inner {
    server: Server,
    client: Client,
    config: WorkerConfig,
    instance: String,
    catalog: async_nats::jetstream::kv::Store,
    /// Set when draining starts: new requests are refused.
    draining: CancellationToken,
    /// Set when the drain timeout passes: requests still running are cancelled.
    abandon: CancellationToken,
    tracker: TaskTracker,
    /// A slot per request served at once (`concurrency`).
    running: Semaphore,
    /// The entry last put (a failing listing keeps its part of it).
    last_entry: std::sync::Mutex<Option<CatalogEntry>>,
    /// The revision of the first entry put, once no earlier pool overlaps this one's scope
    /// (its later entries say so: `CatalogEntry::joined`).
    joined: std::sync::OnceLock<u64>,
    /// Where the bus's requests come from, as telemetry reports it (`messaging.*`).
    peer: Arc<Peer>,
    /// Requests dropped for a reply subject no frame may go to (logged at each doubling).
    unusable_replies: crate::doubling::Doubling,
    /// Why this pool stopped taking requests while running: an overlapping pool that joined
    /// earlier is in the catalog (`Worker::gave_way`).
    gave_way: tokio::sync::watch::Sender<Option<String>>,
    /// The catalog keys of this server's other instances whose entries the overlap check
    /// has read and found to leave this pool be: an instance's scope and when it joined
    /// never change, so they are not read again at every heartbeat (one request per
    /// instance per beat, for every worker of the server).
    cleared: std::sync::Mutex<HashSet<String>>,
}

impl Worker {
    /// [`Worker::start`] once the bus lets it: after `client`'s first connection (a client
    /// made by [`connect_with`](crate::connect_with) keeps attempting it), and again, with a
    /// warning, while the catalog cannot be written yet (JetStream not there or without
    /// quorum), so a worker started before its broker waits for it instead of failing. A
    /// setting the bus cannot fix ([`NatsError::Config`]) fails at once.
    ///
    /// `server` is not ready (its lifecycle's component `nats`/`bus` is down) from this
    /// call, before the returned future is first polled, until the worker serves. Its
    /// durable task jobs travel on `jobs`, as [`Worker::start_with_jobs_on`] says.
    pub fn start_when_reachable<'a>(
        server: &'a Server,
        client: &'a Client,
        jobs: &'a Client,
        config: &'a WorkerConfig,
    ) -> impl std::future::Future<Output = Result<Worker, NatsError>> + 'a {
        server
            .lifecycle()
            .publish(toolyard::LifecycleEvent::ComponentDown {
                kind: "nats",
                name: "bus".to_owned(),
                reason: "not serving on the NATS server yet".to_owned(),
                required: true,
            });
        async move {
            let mut attempt = 0u64;
            loop {
                crate::connected(client).await;
                let started = Worker::start_with_jobs_on(
                    server.clone(),
                    client.clone(),
                    jobs.clone(),
                    config.clone(),
                );
                match started.await {
                    Ok(worker) => return Ok(worker),
                    Err(e @ NatsError::Config(_)) => return Err(e),
                    Err(e) => {
                        attempt += 1;
                        tracing::warn!(target: "toolyard::nats", server = %config.server, error = %e, attempt, "the worker cannot join the bus yet; retrying");
                        tokio::time::sleep(Duration::from_millis(500 * attempt.min(10))).await;
                    }
                }
            }
        }
    }

    /// Starts serving `server`'s tools over `client`: puts the catalog entry, then subscribes.
    /// Fails ([`NatsError::Config`]) when a pool of the same server whose scope overlaps this
    /// one's joined the catalog earlier: both would run the calls they both take.
    /// Its durable task jobs travel on `client` too; a process open to publishers it does not
    /// trust gives them a connection of their own ([`Worker::start_with_jobs_on`]).
    pub async fn start(
        server: Server,
        client: Client,
        config: WorkerConfig,
    ) -> Result<Worker, NatsError> {
        Worker::start_with_jobs_on(server, client.clone(), client, config).await
    }

    /// [`Worker::start`], with the durable task jobs (the work queue's consumer, the task
    /// records' watches, a running task's control subject) on `jobs`. async-nats ends a
    /// connection that reads a message it cannot parse (a subject or header that is not
    /// UTF-8, a header line without a colon), and anything on the bus may publish to the work
    /// queue: such a job, never acked, came back every `ack_wait` and took the requests'
    /// connection down each time, losing the requests in transit. It is now removed after
    /// the drop it causes (`unreadable`); on a connection of its own that one drop is
    /// not the requests' connection's (docs/nats.md, "Durable tasks").
    pub async fn start_with_jobs_on(
        server: Server,
        client: Client,
        jobs: Client,
        config: WorkerConfig,
    ) -> Result<Worker, NatsError> {
        if !wire::token_safe(&config.server) {
            return Err(NatsError::Config(format!(
                "the worker's server name {:?} is not a subject token ([A-Za-z0-9_-]+)",
                config.server
            )));
        }
        config.scope.check()?;
        // An audience that is a predicate cannot be published (`restricted_offer`): those
        // items are left out of the catalog. Said, so an item does not go missing unexplained.
        let hidden = untold(&server.for_audiences());
        if !hidden.is_empty() {
            tracing::warn!(server = %config.server, items = ?hidden, "items whose audience is a predicate are not offered on the bus: a gateway cannot tell whom they are for (docs/semantics.md \"Who may see what\")");
        }
        let js = catalog::context(client.clone());
        let store = catalog::bucket(&js, config.heartbeat, config.catalog_replicas).await?;
        let concurrency = config.concurrency.max(1);
        let peer = Arc::new(Peer::nats(
            config.scope.worker_subject(&config.prefix, &config.server),
            Some(config.scope.queue_group(&config.server).into()),
        ));
        let inner = Arc::new(Inner {
            server,
            client: client.clone(),
            instance: instance_id(),
            config,
            catalog: store,
            draining: CancellationToken::new(),
            abandon: CancellationToken::new(),
            tracker: TaskTracker::new(),
            running: Semaphore::new(concurrency),
            last_entry: std::sync::Mutex::new(None),
            joined: std::sync::OnceLock::new(),
            peer,
            unusable_replies: crate::doubling::Doubling::default(),
            gave_way: tokio::sync::watch::Sender::new(None),
            cleared: std::sync::Mutex::default(),
        });
        // A JetStream cluster that has just elected its meta leader may not know the bucket's
        // stream for a moment ("no stream found"): the first put is retried for a few seconds,
        // no longer (without quorum every attempt would wait its whole timeout: N7).
        let mut attempt = 0u64;
        let give_up = tokio::time::Instant::now() + 2 * catalog::TIMEOUT;
        let first = loop {
            match inner.put_catalog().await {
                Ok(revision) => break revision,
                Err(e) if tokio::time::Instant::now() < give_up => {
                    attempt += 1;
                    tracing::debug!(server = %inner.config.server, error = %e, attempt, "the first catalog put failed; retrying");
                    tokio::time::sleep(Duration::from_millis(100 * attempt)).await;
                }
                Err(e) => return Err(e),
            }
        };
        // Before subscribing: a pool overlapping one that joined earlier would run the
        // calls both take twice (N11).
        if let Err(e) = inner.give_way_to_earlier_pools(first).await {
            let _ = inner.catalog.delete(inner.catalog_key()).await;
            return Err(e);
        }
        let _ = inner.joined.set(first);
        // Before the first request: a retry of a multi-round call may land on any worker of
        // the name, and opens only under the key that sealed it. Followed on the jobs'
        // connection (a watch reads what anyone allowed to write the bucket put there, and a
        // message async-nats cannot read ends the connection reading it: not the requests').
        let state_key = match crate::state_key::share(
            &catalog::context(jobs.clone()),
            &inner.server,
            &crate::state_key::worker(&inner.config.server),
            inner.config.catalog_replicas,
        )
        .await
        {
            Ok(Some(following)) => {
                tracing::info!(server = %inner.config.server, "requestState sealed with the secret this name's workers share on the bus ({})", crate::state_key::BUCKET);
                AbortOnDrop(Some(following))
            }
            Ok(None) => AbortOnDrop(None),
            Err(e) => {
                tracing::warn!(server = %inner.config.server, error = %e, "requestState sealed with this process's own key: a multi-round call whose retry lands on another worker of this name fails; give every worker of it the same state secret");
                AbortOnDrop(None)
            }
        };
        let subscription = client
            .queue_subscribe(
                inner
                    .config
                    .scope
                    .worker_subject(&inner.config.prefix, &inner.config.server),
                inner.config.scope.queue_group(&inner.config.server),
            )
            .await
            .map_err(|e| NatsError::Bus(e.to_string()))?;
        client
            .flush()
            .await
            .map_err(|e| NatsError::Bus(e.to_string()))?;
        // A change of what the server offers is put at once, not at the next heartbeat.
        let changed = Arc::new(Notify::new());
        let on_change = changed.clone();
        inner.server.tap_events(Arc::new(
            move |event: &toolyard::Event, _: &toolyard::Reach| {
                if !matches!(event, toolyard::Event::ResourceUpdated(_)) {
                    on_change.notify_one();
                }
            },
        ));
        // The task queue is set up beside serving, not before it: requests are core NATS and
        // need no stream, so a JetStream that is electing a leader (a node just died) delays
        // the jobs, not the worker.
        let pulling = inner
            .config
            .tasks
            .then(|| tokio::spawn(run_jobs(inner.clone(), jobs.clone())));
        let serving = tokio::spawn(serve(inner.clone(), subscription));
        let heartbeat = tokio::spawn(heartbeat(inner.clone(), changed));
        let connection = tokio::spawn(crate::connection::watch_connection(
            inner.server.clone(),
            client.clone(),
            None,
        ));
        tracing::info!(server = %inner.config.server, instance = %inner.instance, scope = %inner.config.scope, "NATS worker serving");
        Ok(Worker {
            inner,
            serving,
            heartbeat,
            connection,
            jobs: pulling,
            jobs_client: jobs,
            _state_key: state_key,
        })
    }

    /// This instance's id (in its catalog key and its frames' `Mcp-Worker`).
    pub fn instance(&self) -> &str {
        &self.inner.instance
    }

    /// Resolves ([`NatsError::Config`], saying which pool) when this worker stopped taking
    /// requests because a pool of its server whose scope overlaps its own joined the catalog
    /// before it did: the check [`Worker::start`] makes, made again at every heartbeat. A
    /// pool can start beside an overlapping one that its check could not see (the catalog
    /// unreadable, or the other's only worker cut off until its entry expired); when that
    /// one is back, NATS hands each call both take to both, and the later pool gives way
    /// within a heartbeat. It has left its queue group and deleted its catalog entry by
    /// then; the calls it had taken finish. Call [`Worker::shutdown`] after it (the
    /// `toolyard worker` binary drains and exits non-zero). Pending while it serves.
    pub async fn gave_way(&self) -> NatsError {
        let mut told = self.inner.gave_way.subscribe();
        let why = match told.wait_for(Option::is_some).await {
            Ok(why) => why.clone().unwrap_or_default(),
            // The sender lives in `inner`, which this worker holds.
            Err(_) => return std::future::pending().await,
        };
        NatsError::Config(why)
    }

    /// Drains: leaves the queue group (new requests go to the other workers; those the server
    /// had already delivered here are served), lets those in flight finish within the drain
    /// timeout and cancels the rest (their callers get -32010), deletes the catalog entry,
    /// flushes.
    pub async fn shutdown(mut self) {
        let inner = self.inner.clone();
        inner.draining.cancel();
        // Not ready from now on (an orchestrator's readiness probe sees the drain).
        self.connection.abort();
        inner
            .server
            .lifecycle()
            .publish(toolyard::LifecycleEvent::Stopping);
        self.heartbeat.abort();
        // The bus may be gone (that may be why we stop): what needs it is bounded, or a
        // SIGTERM would wait for a reconnection that never comes.
        let _ = tokio::time::timeout(BUS_GRACE, inner.catalog.delete(inner.catalog_key())).await;
        // The request loop takes in the last deliveries before the tracker closes, or one
        // spawned after `wait` returned would be dropped unanswered.
        let _ = tokio::time::timeout(2 * BUS_GRACE, &mut self.serving).await;
        inner.tracker.close();
        if tokio::time::timeout(inner.config.drain_timeout, inner.tracker.wait())
            .await
            .is_err()
        {
            inner.abandon.cancel();
            inner.tracker.wait().await;
        }
        self.serving.abort();
        if let Some(jobs) = self.jobs.take() {
            jobs.abort();
        }
        // The last frames, and the last jobs' acks.
        let _ = tokio::time::timeout(BUS_GRACE, async {
            let _ = tokio::join!(inner.client.flush(), self.jobs_client.flush());
        })
        .await;
        tracing::info!(server = %inner.config.server, instance = %inner.instance, "NATS worker drained");
    }
}

/// How long stopping waits for the bus (deleting the catalog entry, flushing the last
/// frames) after the drain.
const BUS_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

impl Inner {
    fn catalog_key(&self) -> String {
        catalog::key(&self.config.server, &self.instance)
    }

    /// Puts this instance's catalog entry; its revision.
    async fn put_catalog(&self) -> Result<u64, NatsError> {
        let previous = self
            .last_entry
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let entry = offer(
            &self.server,
            &self.config.server,
            &self.instance,
            previous.as_ref(),
        )
        .await;
        *self.last_entry.lock().unwrap_or_else(|p| p.into_inner()) = Some(entry.clone());
        let mut entry = entry;
        entry.scope = self.config.scope.clone();
        entry.joined = self.joined.get().copied();
        entry.joining = entry.joined.is_none();
        let bytes = serde_json::to_vec(&entry).map_err(|e| NatsError::Bus(e.to_string()))?;
        self.catalog
            .put(entry.key(), bytes.into())
            .await
            .map_err(|e| NatsError::Bus(format!("putting the catalog entry: {e}")))
    }

    /// Once serving: when a pool of this server whose scope overlaps this one's joined the
    /// catalog before this instance did (`give_way_to_earlier_pools`), stops taking requests
    /// (the request loop leaves the queue group and serves what it had taken), deletes the
    /// catalog entry and says why (`gave_way`); true then. A catalog it cannot read keeps it
    /// serving: at start an unreadable catalog refuses (it may let an overlap in), but a
    /// running pool stopped by every broker hiccup would be an outage of its own.
    async fn give_way_if_overlapped(&self) -> bool {
        let Some(&joined) = self.joined.get() else {
            return false;
        };
        let why = match self.give_way_to_earlier_pools(joined).await {
            Err(NatsError::Config(why)) => why,
            Err(e) => {
                tracing::debug!(server = %self.config.server, error = %e, "the overlap check could not read the catalog: still serving");
                return false;
            }
            Ok(()) => return false,
        };
        tracing::error!(server = %self.config.server, instance = %self.instance, "{why}: this pool joined later, so it stops taking requests (the calls it took finish)");
        self.draining.cancel();
        self.server
            .lifecycle()
            .publish(toolyard::LifecycleEvent::ComponentDown {
                kind: "nats",
                name: "bus".to_owned(),
                reason: "gave way to an overlapping pool that joined earlier".to_owned(),
                required: true,
            });
        let _ = tokio::time::timeout(BUS_GRACE, self.catalog.delete(self.catalog_key())).await;
        self.gave_way.send_replace(Some(why));
        true
    }

    /// Fails when a pool of this server whose scope overlaps this one's joined before this
    /// instance's first entry (at `revision`): NATS would hand each call both take to both
    /// queue groups. A pool joining later gives way itself, so of any two overlapping pools
    /// the earlier one serves, whatever order their workers read the bucket in. An older
    /// worker's entry (no `joined`) counts as the earliest: it does not give way.
    async fn give_way_to_earlier_pools(&self, revision: u64) -> Result<(), NatsError> {
        let mine = self.catalog_key();
        let ours = catalog::key(&self.config.server, "");
        // A key or an entry the bus cannot hand over fails the start (it is retried):
        // skipping it could let an overlapping pool in. (A message the NATS client cannot
        // read is skipped: no worker of ours wrote it.)
        let unreadable =
            |e: &dyn std::fmt::Display| NatsError::Bus(format!("reading the catalog: {e}"));
        // This server's keys alone, in one stream info request (paged beyond a thousand):
        // made at every heartbeat by every worker, a listing of the whole bucket would cost
        // the broker each worker's share of every other worker's entry.
        let stream_prefix = format!("$KV.{}.", self.catalog.name);
        let mut subjects = self
            .catalog
            .stream
            .info_with_subjects(format!("{stream_prefix}{ours}>"))
            .await
            .map_err(|e| unreadable(&e))?;
        let mut theirs = HashSet::new();
        while let Some(subject) = subjects.next().await {
            let (subject, _) = subject.map_err(|e| unreadable(&e))?;
            match subject.strip_prefix(&stream_prefix) {
                Some(key) if key.starts_with(&ours) && key != mine => {
                    theirs.insert(key.to_owned());
                }
                _ => {}
            }
        }
        // Taken out while the entries are read (a failure leaves it empty: the next check
        // reads them all again); the keys no longer in the catalog drop out.
        let mut cleared =
            std::mem::take(&mut *self.cleared.lock().unwrap_or_else(|p| p.into_inner()));
        cleared.retain(|key| theirs.contains(key));
        // Read through the stream's JSON get API: anyone who may write the bucket can put
        // there a message async-nats cannot read, and a KV get (a direct get, read by the
        // connection) of it ended this worker's requests connection at every heartbeat.
        let js = catalog::context(self.client.clone());
        for key in theirs {
            if cleared.contains(&key) {
                continue;
            }
            let subject = format!("{stream_prefix}{key}");
            let found = match crate::unreadable::last_message(
                &js,
                &self.catalog.stream_name,
                &subject,
            )
            .await
            {
                Ok(Some(Ok(found))) => found,
                // No worker of ours wrote it: not an entry.
                Ok(Some(Err(why))) => {
                    tracing::debug!(server = %self.config.server, key, why, "a catalog key the NATS client cannot read is no pool");
                    continue;
                }
                Ok(None) => continue,
                Err(e) => return Err(unreadable(&e)),
            };
            // A deleted or purged key (`KV-Operation`) has no entry.
            if found.headers.get("KV-Operation").is_some() {
                continue;
            }
            let Ok(other) = serde_json::from_slice::<CatalogEntry>(&found.payload) else {
                continue;
            };
            if other.server == self.config.server
                && other.scope.is_valid()
                && other.scope.overlaps(&self.config.scope)
                && other.joined_at(found.sequence) < revision
            {
                return Err(NatsError::Config(format!(
                    "the pool of {} for {} overlaps the pool for {} that instance {} serves: NATS would run every call both take twice. Give each pool of a server scopes no request shares (or stop the other pool; a worker killed without draining leaves its catalog entry for up to {} s)",
                    self.config.server,
                    self.config.scope,
                    other.scope,
                    other.instance,
                    (self.config.heartbeat * 3).as_secs()
                )));
            }
            // Settled for good once it has joined (or is an older worker's entry).
            if !other.joining {
                cleared.insert(key);
            }
        }
        *self.cleared.lock().unwrap_or_else(|p| p.into_inner()) = cleared;
        Ok(())
    }
}

/// Sets up the job consumer of this server's pool (retrying while JetStream cannot, until
/// the worker drains) and runs its durable task jobs.
async fn run_jobs(inner: Arc<Inner>, client: Client) {
    let config = &inner.config;
    let queue = config.scope.job_queue(&config.server);
    let mut attempt = 0u64;
    let (consumer, store) = loop {
        let opened = crate::jobs::consumer(
            &client,
            &config.prefix,
            &queue,
            config.task_ack_wait,
            config.catalog_replicas,
        );
        match Box::pin(opened).await {
            Ok(opened) => break opened,
            Err(e) => {
                attempt += 1;
                if attempt == 1 || attempt.is_multiple_of(20) {
                    tracing::warn!(server = %config.server, error = %e, attempt, "the durable task queue is not available yet: requests are served, task jobs wait; retrying");
                }
                let pause = Duration::from_millis((250 * attempt).min(5_000));
                tokio::select! {
                    () = tokio::time::sleep(pause) => {}
                    () = inner.draining.cancelled() => return,
                }
            }
        }
    };
    let runner = Arc::new(crate::jobs::Runner {
        server: inner.server.clone(),
        client,
        lookup: inner.client.clone(),
        store,
        instance: inner.instance.clone(),
        prefix: config.prefix.clone(),
        peer: Arc::new(crate::jobs::peer(&config.prefix, &queue)),
        ack_wait: config.task_ack_wait,
        draining: inner.draining.clone(),
        abandon: inner.abandon.clone(),
        tracker: inner.tracker.clone(),
        running: std::sync::Mutex::default(),
        bodies: crate::jobs::bodies(config.catalog_replicas),
        max_body: config.max_claimed_request_bytes,
    });
    crate::jobs::serve(runner, consumer, config.concurrency).await;
}

/// A token-safe id for this instance: the process and the moment it started.
fn instance_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!("{}-{nanos:x}", std::process::id())
}

/// The request loop: each request in a task, at most `concurrency` running and `waiting`
/// more (`WorkerConfig::waiting`) taken off the subscription to wait for a slot
/// (`handle`): a request that waits there listens for its cancellation and has sent its
/// caller a frame, so a caller can tell a busy worker from a dead one (`docs/nats.md`, "The
/// answer: frames"). Beyond that, a request is refused at once ([`refuse_busy`]).
async fn serve(inner: Arc<Inner>, mut subscription: async_nats::Subscriber) {
    let concurrency = inner.config.concurrency.max(1);
    let waiting = inner
        .config
        .waiting
        .unwrap_or_else(|| concurrency.max(WAITING));
    let permits = Arc::new(Semaphore::new(concurrency + waiting));
    let intake = Intake::of_this_runtime();
    loop {
        let message = tokio::select! {
            m = subscription.next() => m,
            () = inner.draining.cancelled() => None,
        };
        let Some(message) = message else { break };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            // In the loop, not a task: a flood is refused at the pace it is read, and what
            // is not read yet waits in the subscription, not in tasks.
            refuse_busy(&inner, &message, concurrency, waiting).await;
            continue;
        };
        start_request(&inner, intake, message, permit);
    }
    // Leave the queue group: a subscription drain sends UNSUB then PING. What the server
    // routed here before it took the UNSUB and async-nats still delivers is served like the
    // others (the drain deadline covers them): refusing them (-32010) failed calls during
    // rolling restarts, as the deploy topology test saw. async-nats (0.52) ends the stream
    // once the UNSUB is written rather than at the PONG, so a request still in transit then
    // is lost unseen: a gap of the client library, pinned by the deploy test.
    if subscription.drain().await.is_err() {
        let _ = subscription.unsubscribe().await;
    }
    while let Ok(Some(message)) = tokio::time::timeout(BUS_GRACE, subscription.next()).await {
        let Ok(permit) = permits.clone().acquire_owned().await else {
            break;
        };
        start_request(&inner, intake, message, permit);
    }
}

/// How the subscription loop starts a request it took.
#[derive(Clone, Copy)]
enum Intake {
    /// Polled once in the loop, a task only when it awaits: one runtime thread, which the
    /// request would have run on anyway.
    InPlace,
    /// A task of its own at once: with several runtime threads, the loop takes the next
    /// request while another thread runs this one's first step, so a tool that computes
    /// before it awaits occupies one thread, not the worker's intake. (A tool that blocks
    /// its thread belongs on `spawn_blocking` all the same: tokio may leave the bus unread
    /// while one of two threads is blocked, as a test of this showed.)
    Task,
}

impl Intake {
    fn of_this_runtime() -> Intake {
        if tokio::runtime::Handle::current().metrics().num_workers() == 1 {
            Intake::InPlace
        } else {
            Intake::Task
        }
    }
}

/// Starts a request taken off the subscription. In place, a tool that awaits nothing (an
/// echo, a lookup) is answered and its `end` frame queued without a task of its own (a task
/// cell's 128-byte-aligned allocation, its scheduling and a wake-up). Boxed whole either way,
/// so a spawn moves a pointer (tokio moves a task's future by value, four copies), and
/// tracked from the start, so a drain waits for it. `handle` takes the message and the
/// permit itself: an async block around it would hold a second copy of the message, and
/// push the box over 1 KiB (`handle`).
fn start_request(
    inner: &Arc<Inner>,
    intake: Intake,
    message: Message,
    permit: OwnedSemaphorePermit,
) {
    let request = Box::pin(
        inner
            .tracker
            .track_future(handle(inner.clone(), message, permit)),
    );
    match intake {
        Intake::InPlace => run_or_spawn(request),
        Intake::Task => {
            tokio::spawn(request);
        }
    }
}

/// Where a request's frames go: its reply subject, unless it has none or one no frame may
/// be sent to (a hostile one), in which case the request is dropped and logged.
fn reply_subject(inner: &Inner, message: &Message) -> Option<Subject> {
    // A `Subject` (shared bytes), not a `String`: every frame's publish takes it by value.
    let Some(reply) = message.reply.clone() else {
        tracing::debug!(subject = %message.subject, "a request without a reply subject: dropped");
        return None;
    };
    if !wire::usable_reply_subject(&reply, &inner.config.prefix) {
        if let Some(dropped) = inner.unusable_replies.count() {
            tracing::warn!(subject = %message.subject, %reply, dropped, "a request with an unusable reply subject: dropped");
        }
        return None;
    }
    Some(reply)
}

/// Answers a request this worker has no room for with `err` -32015 (busy): it was not
/// started, so any caller may re-issue it (Toolyard's gateway does, with a backoff, within
/// the call's deadline).
async fn refuse_busy(inner: &Inner, message: &Message, concurrency: usize, waiting: usize) {
    let Some(reply) = reply_subject(inner, message) else {
        return;
    };
    let id = match jsonrpc::parse(&message.payload) {
        Ok(Incoming::Request(r)) => Some(r.id),
        _ => None,
    };
    tracing::debug!(subject = %message.subject, "no slot and no room to wait: refused as busy");
    let error = not_started(&format!(
        "worker `{}` is busy ({concurrency} running, {waiting} waiting)",
        inner.config.server
    ));
    Frames::new(inner, reply).err(id.as_ref(), &error).await;
}

/// Re-puts the catalog entry every heartbeat, and when the server's tools, resources or
/// prompts change: at once, then not again for a pace ([`crate::EVENT_PACE`], like the
/// change events), so a server whose lists flap (an upstream source that keeps saying
/// `list_changed`) costs the replicated bucket, and every gateway's subscribers, at most one
/// write a pace; a change made meanwhile waits in `changed` and is put when the pace ends.
async fn heartbeat(inner: Arc<Inner>, changed: Arc<Notify>) {
    let mut tick = tokio::time::interval(inner.config.heartbeat);
    tick.tick().await;
    loop {
        let on_change = tokio::select! {
            _ = tick.tick() => false,
            () = changed.notified() => {
                tick.reset();
                true
            }
        };
        if let Err(e) = inner.put_catalog().await {
            // Requests are core NATS: they are still served; the next beat tries again.
            tracing::warn!(server = %inner.config.server, error = %e, "catalog heartbeat failed: still serving, retrying at the next heartbeat");
        } else if inner.give_way_if_overlapped().await {
            return;
        }
        if on_change {
            tokio::time::sleep(crate::EVENT_PACE).await;
        }
    }
}

/// A request's stream of frames: numbered, exactly one terminal frame, nothing after it.
struct Frames<'a> {
    inner: &'a Inner,
    reply: Subject,
    seq: u64,
    done: bool,
    /// The caller sent `Mcp-Accept-Claim: 1`.
    accept_claim: bool,
}

impl<'a> Frames<'a> {
    fn new(inner: &'a Inner, reply: Subject) -> Frames<'a> {
        Frames {
            inner,
            reply,
            seq: 0,
            done: false,
            accept_claim: false,
        }
    }

    async fn send(&mut self, frame: Frame, body: Bytes) {
        self.send_stating(frame, body, None).await;
    }

    /// A keepalive saying where the request stands ([`wire::STATE`]).
    async fn keepalive(&mut self, state: &'static str) {
        self.send_stating(Frame::Ka, Bytes::new(), Some(state))
            .await;
    }

    async fn send_stating(&mut self, frame: Frame, body: Bytes, state: Option<&'static str>) {
        if self.done {
            return;
        }
        // An answer that cannot fit goes into a claim when the caller can fetch one: the
        // `end` frame is then empty and names it. (Only then is the server's `max_payload`
        // looked up: `server_info` clones the whole INFO.)
        let mut body = body;
        let mut claim = None;
        if frame == Frame::End && self.accept_claim {
            let max_payload = self.inner.client.server_info().max_payload;
            if body.len() + 4096 > max_payload {
                // Boxed: claims are rare, and the object store's write is a large future
                // that every request's future would otherwise carry.
                match Box::pin(crate::claims::put(&self.inner.client, &body, max_payload)).await {
                    Ok(name) => {
                        claim = Some(name);
                        body = Bytes::new();
                    }
                    Err(e) => {
                        tracing::warn!(reply = %self.reply, error = %e, "putting a claim failed")
                    }
                }
            }
        }
        self.done = frame.is_terminal();
        let mut headers = HeaderMap::new();
        headers.insert(wire::FRAME, frame.as_str());
        headers.insert(wire::SEQ, itoa::Buffer::new().format(self.seq));
        if frame.is_terminal() {
            headers.insert(wire::WORKER, self.inner.instance.as_str());
        }
        if let Some(name) = &claim {
            headers.insert(wire::CLAIM, name.as_str());
        }
        if let Some(state) = state {
            headers.insert(wire::STATE, state);
        }
        self.seq += 1;
        // Boxed: async-nats' publish future is ~600 bytes, and a request's future (allocated
        // whole for every request) holds this one.
        let sent = Box::pin(self.inner.client.publish_with_headers(
            self.reply.clone(),
            headers,
            body,
        ))
        .await;
        if let Err(e) = sent {
            tracing::warn!(reply = %self.reply, error = %e, "publishing a frame failed");
            if frame == Frame::End
                && e.kind() == async_nats::client::PublishErrorKind::MaxPayloadExceeded
            {
                // The answer does not fit: say so instead of going silent. It was refused
                // before it left, so the `err` frame takes its number (no gap).
                self.done = false;
                self.seq -= 1;
                let error = ErrorObject::new(
                    wire::PAYLOAD_TOO_LARGE,
                    "the answer is larger than the bus's max_payload",
                );
                Box::pin(self.send(Frame::Err, wire::error_body(None, &error).into())).await;
            }
        }
    }

    async fn err(&mut self, id: Option<&RequestId>, error: &ErrorObject) {
        self.send(Frame::Err, wire::error_body(id, error).into())
            .await;
    }
}

/// What a request's params name, and its `_meta`.
#[derive(Deserialize, Default)]
struct Head {
    #[serde(rename = "_meta", default)]
    meta: Option<RequestMeta>,
    #[serde(default)]
    name: Option<serde_json::Value>,
    #[serde(default)]
    uri: Option<serde_json::Value>,
    #[serde(default, rename = "taskId")]
    task_id: Option<serde_json::Value>,
}

/// The request headers the worker reads, found in one pass ([`wire::headers`]).
struct RequestHeaders<'m> {
    wire: Option<&'m str>,
    method: Option<&'m str>,
    name: Option<&'m str>,
    protocol_version: Option<&'m str>,
    accept_claim: Option<&'m str>,
    traceparent: Option<&'m str>,
    tracestate: Option<&'m str>,
    baggage: Option<&'m str>,
    timeout_ms: Option<&'m str>,
    body_claim: Option<&'m str>,
    task_handoff: Option<&'m str>,
    principal: Option<&'m str>,
}

impl<'m> RequestHeaders<'m> {
    fn read(message: &'m Message) -> RequestHeaders<'m> {
        let [wire, method, name, protocol_version, accept_claim, traceparent, tracestate, baggage, timeout_ms, body_claim, task_handoff, principal] =
            wire::headers(
                message,
                [
                    &wire::WIRE,
                    &wire::METHOD,
                    &wire::NAME,
                    &wire::PROTOCOL_VERSION,
                    &wire::ACCEPT_CLAIM,
                    &wire::TRACEPARENT,
                    &wire::TRACESTATE,
                    &wire::BAGGAGE,
                    &wire::TIMEOUT_MS,
                    &wire::BODY_CLAIM,
                    &wire::TASK_HANDOFF,
                    &wire::PRINCIPAL,
                ],
            );
        RequestHeaders {
            wire,
            method,
            name,
            protocol_version,
            accept_claim,
            traceparent,
            tracestate,
            baggage,
            timeout_ms,
            body_claim,
            task_handoff,
            principal,
        }
    }
}

/// A request the worker will serve: checked, its `_meta` merged with the headers' trace
/// context, its deadline read.
struct Admitted {
    request: Request,
    meta: RequestMeta,
    transport_trace: Option<Arc<TransportTrace>>,
    deadline: Option<tokio::time::Instant>,
    /// `HandOff` when the caller makes a deferred tool's task (`Mcp-Task-Handoff: 1`).
    role: TaskRole,
    /// The caller's principal (`Mcp-Principal`, taken on its own user's subject: `principal`).
    principal: Option<Arc<str>>,
}

/// Why a request is answered with an `err` frame before it runs: the id it echoes, if read.
type Refusal = (Option<RequestId>, ErrorObject);

/// Reads and checks a request message (no await: what it reads of the message does not
/// live on in the request's future).
/// `received`: when the request arrived, if not now (its body was read from a claim since);
/// its deadline counts from then.
fn admit(
    inner: &Inner,
    message: &Message,
    headers: &RequestHeaders<'_>,
    received: Option<tokio::time::Instant>,
) -> Result<Admitted, Refusal> {
    if headers.wire != Some("1") {
        let error = ErrorObject::invalid_request("Mcp-Wire: 1 is required (wire version 1)");
        return Err((None, error));
    }
    let request = match jsonrpc::parse(&message.payload) {
        Ok(Incoming::Request(r)) => r,
        Ok(_) => {
            return Err((
                None,
                ErrorObject::invalid_request("a JSON-RPC request is expected"),
            ))
        }
        Err(rejected) => return Err((rejected.id, rejected.error)),
    };
    let head: Head = match jsonrpc::params(request.params.as_deref()) {
        Ok(h) => h,
        Err(e) => return Err((Some(request.id), e)),
    };
    let principal = match integrity(inner, message, headers, &request, &head) {
        Ok(principal) => principal,
        Err(why) => {
            let error = ErrorObject::new(wire::HEADER_MISMATCH, format!("Header mismatch: {why}"));
            return Err((Some(request.id), error));
        }
    };
    let mut meta = head.meta.unwrap_or_default();
    // The rest of the headers' context was merged into `_meta` below.
    let transport_trace = TransportTrace::of(headers.traceparent, None, None);
    // A caller that put the trace context (or baggage) only in the headers still gets it
    // to the tool.
    if meta.traceparent.is_none() {
        meta.traceparent = headers.traceparent.map(str::to_owned);
        if meta.tracestate.is_none() {
            meta.tracestate = headers.tracestate.map(str::to_owned);
        }
    }
    if meta.baggage.is_none() {
        meta.baggage = headers.baggage.map(str::to_owned);
    }
    if meta.protocol_version.is_none() {
        let error = ErrorObject::invalid_request(format!(
            "the bus carries 2026-07-28 requests: `_meta` must carry `{}`",
            toolyard_proto::meta::PROTOCOL_VERSION
        ));
        return Err((Some(request.id), error));
    }
    let deadline = deadline_of(
        headers.timeout_ms,
        received.unwrap_or_else(tokio::time::Instant::now),
    );
    let role = if headers.task_handoff == Some("1") {
        TaskRole::HandOff
    } else {
        TaskRole::Own
    };
    Ok(Admitted {
        request,
        meta,
        transport_trace,
        deadline,
        role,
        principal,
    })
}

/// Serves one request message to its end. Its future is allocated whole for every request,
/// so what only some requests reach (waiting for a slot, streaming frames) is boxed apart and
/// what is read before the first await lives in plain functions: a request its tool answers
/// at once carries admission's result and one frame. (A future over 1 KiB makes glibc
/// consolidate its fast bins on every request: ~1 700 instructions.)
async fn handle(inner: Arc<Inner>, message: Message, permit: OwnedSemaphorePermit) {
    // Holds the request's place (running or waiting) until it ends.
    let _permit = permit;
    let inner = &*inner;
    let Some(reply) = reply_subject(inner, &message) else {
        return;
    };
    let mut out = Frames::new(inner, reply);
    // The one frame of a request that ends here is written before the await, which is then
    // the only one this future holds (how the compiler lays out an await per arm, each with
    // what the arm had bound, made it over 1 KiB again).
    let started = begin(inner, &mut out, &message);
    if let Started::Claimed = started {
        return Box::pin(serve_claimed(inner, out, message)).await;
    }
    // Dropped before the await: its payload holds on to async-nats' read buffer.
    drop(message);
    let (frame, body): (Frame, Bytes) = match started {
        Started::Refused(id, error) => (Frame::Err, wire::error_body(id.as_ref(), &error).into()),
        Started::Answered(answer) => (Frame::End, answer.into()),
        Started::Unanswered(id) => (
            Frame::Err,
            wire::error_body(Some(&id), &ended_unanswered()).into(),
        ),
        Started::Running(running) => return Box::pin(follow(out, running, None)).await,
        Started::Busy(admitted) => {
            return Box::pin(run_when_free(inner, out, *admitted, None)).await
        }
        // Served above.
        Started::Claimed => return,
    };
    out.send(frame, body).await;
}

/// A request whose body a gateway put in a claim because it did not fit the bus
/// (`Mcp-Body-Claim`, `crate::claims`): read (digest checked, size capped), then served as if
/// it had come inline. The gateway deletes the object once its call has ended.
///
/// It listens on `{reply}.ctl` from before the read: a cancel sent while the body is read
/// waits in the subscription and, once the body names the request's id, ends the request
/// before its tool starts. The read ends early when the request's deadline passes or the
/// worker drains.
async fn serve_claimed<'a>(inner: &'a Inner, mut out: Frames<'a>, message: Message) {
    // Its deadline counts from now, not from when the body has been read.
    let received = tokio::time::Instant::now();
    let (name, deadline) = {
        let headers = RequestHeaders::read(&message);
        let name = headers.body_claim.unwrap_or_default().to_owned();
        (name, deadline_of(headers.timeout_ms, received))
    };
    let mut control = subscribe_control(inner, &out.reply).await;
    let limit = inner.config.max_claimed_request_bytes;
    let read = tokio::select! {
        read = crate::claims::read(&inner.client, &name, limit) => read,
        () = expiry(deadline) => return out.err(None, &deadline_passed()).await,
        () = inner.abandon.cancelled() => return out.err(None, &abandoned()).await,
    };
    let message = match read {
        Ok(body) if !body.is_empty() => Message {
            payload: body.into(),
            ..message
        },
        Ok(_) => {
            let error =
                ErrorObject::invalid_request(format!("the request's body claim {name} is empty"));
            return out.err(None, &error).await;
        }
        Err(e) => {
            tracing::warn!(claim = %name, error = %e, "a request's body claim could not be read");
            let error = ErrorObject::new(
                wire::PAYLOAD_TOO_LARGE,
                format!("the request's body claim could not be read: {e}"),
            );
            return out.err(None, &error).await;
        }
    };
    let headers = RequestHeaders::read(&message);
    out.accept_claim = headers.accept_claim == Some("1");
    let admitted = match admit(inner, &message, &headers, Some(received)) {
        Ok(admitted) => admitted,
        Err((id, error)) => return out.err(id.as_ref(), &error).await,
    };
    drop(message);
    let id = admitted.request.id.clone();
    if control
        .as_mut()
        .is_some_and(|control| cancel_waits_in(control, &id))
    {
        // Cancelled before it ran: no response exists; an empty `end` closes the stream.
        return out.send(Frame::End, Bytes::new()).await;
    }
    let cancelled_by_caller = CancellationToken::new();
    let listening = Listening {
        _control: AbortOnDrop(
            control.map(|control| listen_for_cancel(control, id, cancelled_by_caller.clone())),
        ),
        cancelled_by_caller,
    };
    match start(inner, admitted) {
        Started::Answered(answer) => out.send(Frame::End, answer.into()).await,
        Started::Unanswered(id) => out.err(Some(&id), &ended_unanswered()).await,
        Started::Running(running) => follow(out, running, Some(listening)).await,
        Started::Busy(admitted) => run_when_free(inner, out, *admitted, Some(listening)).await,
        // `start` neither refuses nor reads claims.
        Started::Refused(..) | Started::Claimed => {}
    }
}

/// Reads and checks the request and, when a slot is free, serves it (no await: nothing of
/// this lives on in the request's future). A request whose body is in a claim is
/// `Started::Claimed`: `serve_claimed` reads it and serves it.
fn begin<'a>(inner: &'a Inner, out: &mut Frames<'_>, message: &Message) -> Started<'a> {
    let headers = RequestHeaders::read(message);
    out.accept_claim = headers.accept_claim == Some("1");
    if headers.body_claim.is_some() {
        if message.payload.is_empty() {
            return Started::Claimed;
        }
        let error = ErrorObject::invalid_request(
            "a request naming a body claim (Mcp-Body-Claim) must have an empty body",
        );
        return Started::Refused(None, error);
    }
    match admit(inner, message, &headers, None) {
        Ok(admitted) => start(inner, admitted),
        Err((id, error)) => Started::Refused(id, error),
    }
}

/// How a request stands after `serve_here`'s first poll of its handler.
enum Started<'a> {
    /// Refused before it ran (an `err` frame, with the id when it was read).
    Refused(Option<RequestId>, ErrorObject),
    /// Answered there (an echo, a lookup: most tools await nothing): the answer is its only
    /// frame, and nothing ever listens on `{reply}.ctl` for it, so such a call costs no
    /// subscription, no listener task, no SUB and UNSUB (docs/nats.md).
    Answered(Vec<u8>),
    /// Ended without an answer.
    Unanswered(RequestId),
    /// Runs on: it listens on `{reply}.ctl` from before its first frame until its last.
    Running(Running<'a>),
    /// No slot was free: it waits for one (not run yet). Boxed: a request is large, and
    /// this is rare.
    Busy(Box<Admitted>),
    /// Its body is in a claim (`Mcp-Body-Claim`), read before anything else.
    Claimed,
}

/// Takes a slot and serves the request, when a slot is free (no await: nothing of this
/// lives on in the request's future).
fn start(inner: &Inner, admitted: Admitted) -> Started<'_> {
    match inner.running.try_acquire() {
        Ok(slot) => serve_in(inner, admitted, slot),
        Err(_) => Started::Busy(Box::new(admitted)),
    }
}

/// Serves the request in its slot and looks at what its handler's first poll sent.
fn serve_in<'a>(
    inner: &'a Inner,
    admitted: Admitted,
    slot: tokio::sync::SemaphorePermit<'a>,
) -> Started<'a> {
    let Admitted {
        request,
        meta,
        transport_trace,
        deadline,
        role,
        principal,
    } = admitted;
    let id = request.id.clone();
    let cancel = CancellationToken::new();
    let Served {
        mut messages,
        answer_prefix: prefix,
    } = serve_here(
        &inner.server,
        role,
        request,
        meta,
        cancel.clone(),
        transport_trace,
        Some(inner.peer.clone()),
        principal,
        inner.config.notification_backlog,
    );
    let first = match messages.try_recv() {
        Ok(b) if b.starts_with(&prefix) => return Started::Answered(b),
        Ok(b) => Some(b),
        Err(mpsc::TryRecvError::Empty) => None,
        Err(mpsc::TryRecvError::Closed) => return Started::Unanswered(id),
    };
    Started::Running(Running {
        inner,
        id,
        messages,
        prefix,
        first,
        cancel,
        deadline,
        _slot: slot,
    })
}

/// A request that found every slot taken: it waits for one, listening for its caller's
/// cancel already, then runs. `listening`: it listens on `{reply}.ctl` already.
async fn run_when_free<'a>(
    inner: &'a Inner,
    mut out: Frames<'a>,
    admitted: Admitted,
    listening: Option<Listening>,
) {
    let Listening {
        _control: control,
        cancelled_by_caller,
    } = match listening {
        Some(listening) => listening,
        None => Listening::start(inner, &out.reply, admitted.request.id.clone()).await,
    };
    let slot = {
        let expired = expiry(admitted.deadline);
        tokio::pin!(expired);
        let waited = wait_for_slot(
            inner,
            &mut out,
            &admitted.request.id,
            &cancelled_by_caller,
            expired.as_mut(),
        );
        match waited.await {
            Some(slot) => slot,
            None => return,
        }
    };
    let listening = Listening {
        _control: control,
        cancelled_by_caller,
    };
    match serve_in(inner, admitted, slot) {
        Started::Answered(answer) => out.send(Frame::End, answer.into()).await,
        Started::Unanswered(id) => out.err(Some(&id), &ended_unanswered()).await,
        Started::Running(running) => follow(out, running, Some(listening)).await,
        // `serve_in` neither waits, refuses nor reads claims.
        Started::Busy(_) | Started::Refused(..) | Started::Claimed => {}
    }
}

/// A request that waited for its slot, or whose body was claimed, listens on `{reply}.ctl`
/// from then on.
struct Listening {
    _control: AbortOnDrop,
    cancelled_by_caller: CancellationToken,
}

impl Listening {
    /// Listens on `{reply}.ctl` for the cancel of request `id` from now on.
    async fn start(inner: &Inner, reply: &str, id: RequestId) -> Listening {
        let cancelled_by_caller = CancellationToken::new();
        let control = subscribe_control(inner, reply)
            .await
            .map(|control| listen_for_cancel(control, id, cancelled_by_caller.clone()));
        Listening {
            _control: AbortOnDrop(control),
            cancelled_by_caller,
        }
    }
}

/// When a request's `Mcp-Timeout-Ms` runs out, counted from `from` (none without the header,
/// or with one that is not a number).
fn deadline_of(
    timeout_ms: Option<&str>,
    from: tokio::time::Instant,
) -> Option<tokio::time::Instant> {
    timeout_ms
        .and_then(|t| t.trim().parse::<u64>().ok())
        .map(|ms| from + Duration::from_millis(ms))
}

/// The request's deadline passing (never, without one).
async fn expiry(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// A request that runs on after `serve_here`'s first poll: what it sends, what stops it.
struct Running<'a> {
    inner: &'a Inner,
    id: RequestId,
    messages: mpsc::UnboundedReceiver<Vec<u8>>,
    prefix: Vec<u8>,
    /// A message (not the answer) it sent in that first poll.
    first: Option<Vec<u8>>,
    cancel: CancellationToken,
    deadline: Option<tokio::time::Instant>,
    _slot: tokio::sync::SemaphorePermit<'a>,
}

/// Relays a running request's messages as frames until its answer, its caller's cancel,
/// its deadline or the worker's drain ends it. `listening`: it waited for its slot, and
/// listens on `{reply}.ctl` already.
async fn follow<'a>(mut out: Frames<'a>, running: Running<'a>, listening: Option<Listening>) {
    let Running {
        inner,
        id,
        messages: mut rx,
        prefix,
        first,
        cancel,
        deadline,
        _slot,
    } = running;
    let listening = match listening {
        Some(listening) => listening,
        None => Listening::start(inner, &out.reply, id.clone()).await,
    };
    let cancelled_by_caller = &listening.cancelled_by_caller;
    let expired = expiry(deadline);
    tokio::pin!(expired);
    if let Some(b) = first {
        out.send(Frame::Msg, b.into()).await;
    }
    // The first keepalive after 100 ms (or the period, if shorter), then one every period:
    // a call that runs longer than that has had a frame, so its caller can tell from then on
    // whether the worker is still there (`{reply}.ctl`) instead of waiting out its
    // inactivity window; one frame more is nothing to what a call that long costs.
    // (`interval` + an initial `tick()` cost every request a trip through the timer wheel:
    // ~1 ms of latency per call.)
    let mut keepalive = tokio::time::interval_at(
        tokio::time::Instant::now() + inner.config.keepalive.min(FIRST_KEEPALIVE),
        inner.config.keepalive,
    );
    loop {
        tokio::select! {
            bytes = rx.next() => match bytes {
                Some(b) if b.starts_with(&prefix) => {
                    out.send(Frame::End, b.into()).await;
                    break;
                }
                Some(b) => out.send(Frame::Msg, b.into()).await,
                None => {
                    out.err(Some(&id), &ended_unanswered()).await;
                    break;
                }
            },
            () = cancelled_by_caller.cancelled() => {
                cancel.cancel();
                // Cancelled: no response exists; an empty `end` closes the stream.
                out.send(Frame::End, Bytes::new()).await;
                break;
            }
            () = &mut expired => {
                cancel.cancel();
                out.err(Some(&id), &deadline_passed()).await;
                break;
            }
            () = inner.abandon.cancelled() => {
                cancel.cancel();
                out.err(Some(&id), &abandoned()).await;
                break;
            }
            _ = keepalive.tick() => out.send(Frame::Ka, Bytes::new()).await,
        }
    }
}

/// Requests a worker takes to wait for a slot, at least, unless configured. NATS hands a queue group's
/// requests out without regard to how busy each member is, so a worker of few slots still
/// gets its share; each waiting request costs a task and a subscription.
const WAITING: usize = 64;

/// When the first keepalive of a running request goes out at the latest.
const FIRST_KEEPALIVE: Duration = Duration::from_millis(100);

/// Waits for a slot to run a request in, every slot being taken. The caller hears from
/// this worker first (a `ka` frame): from then on a silence can be checked (`{reply}.ctl`
/// has a listener), so a caller tells a busy worker from a dead one. `None` when the
/// request ended while it waited (its caller cancelled it, its deadline passed, the worker
/// is draining), its terminal frame sent.
async fn wait_for_slot<'a>(
    inner: &'a Inner,
    out: &mut Frames<'_>,
    id: &RequestId,
    cancelled_by_caller: &CancellationToken,
    expired: std::pin::Pin<&mut impl std::future::Future<Output = ()>>,
) -> Option<tokio::sync::SemaphorePermit<'a>> {
    out.keepalive(wire::WAITING).await;
    // Biased: when a drain's end, the caller's cancel or the deadline comes as a slot frees
    // (a drain's end cancels the running request, which frees its slot at that moment), the
    // request does not run.
    tokio::select! {
        biased;
        // Its drain time ran out before it got a slot: it never ran, so it is given back as
        // busy (not started), which any caller may send again whatever the tool, rather than
        // as lost (-32010), which a caller re-issues only for a read-only or idempotent tool.
        () = inner.abandon.cancelled() => {
            out.err(Some(id), &not_started("the worker is draining")).await;
        }
        // Cancelled before it ran: no response exists; an empty `end` closes the stream.
        () = cancelled_by_caller.cancelled() => out.send(Frame::End, Bytes::new()).await,
        () = expired => out.err(Some(id), &deadline_passed()).await,
        slot = inner.running.acquire() => match slot {
            Ok(slot) => {
                // The caller learns the request runs before it does: should this worker die
                // from now on, the call may have run; before, it surely did not, and the
                // caller may send it elsewhere whatever its tool.
                out.keepalive(wire::RUNNING).await;
                let confirmed = broker_has_taken_our_frames(inner, &out.reply).await;
                if cancelled_by_caller.is_cancelled() {
                    out.send(Frame::End, Bytes::new()).await;
                } else if inner.abandon.is_cancelled() {
                    out.err(Some(id), &not_started("the worker is draining")).await;
                } else if confirmed {
                    return Some(slot);
                } else {
                    // Unconfirmed, it does not run: the caller may still take it for waiting.
                    out.err(Some(id), &not_started("the worker could not confirm to the bus that the request started")).await;
                }
            }
            // The semaphore is never closed; should it be, the request is answered.
            Err(_) => out.err(Some(id), &not_started("the worker is stopping")).await,
        },
    }
    None
}

/// How long a worker waits for the broker to confirm a request's [`wire::RUNNING`]
/// keepalive before it gives the request back unstarted.
const CONFIRM_WAIT: Duration = Duration::from_secs(5);

/// Whether the broker has taken what this connection sent so far: a request to a subject
/// nobody serves is answered no-responders by the broker once it read every message sent
/// before it. (async-nats' `flush` only writes the socket: a process killed then may lose
/// what the kernel had not sent yet.) The subject is a fresh inbox of this worker's own,
/// not one under the caller's reply subject, where a caller subscribed with `>` would
/// receive it and, not answering, make every waited request look unconfirmed.
async fn broker_has_taken_our_frames(inner: &Inner, reply: &str) -> bool {
    let nobody = format!("{}.run", inner.client.new_inbox());
    let asked = inner.client.request(nobody, Bytes::new());
    match tokio::time::timeout(CONFIRM_WAIT, asked).await {
        Ok(Ok(_)) => true,
        Ok(Err(e)) if e.kind() == async_nats::client::RequestErrorKind::NoResponders => true,
        Ok(Err(e)) => {
            tracing::warn!(%reply, error = %e, "the bus did not confirm that a request started: given back unstarted");
            false
        }
        Err(_) => {
            tracing::warn!(%reply, "the bus did not confirm that a request started within {CONFIRM_WAIT:?}: given back unstarted");
            false
        }
    }
}

/// -32015 for a request given back unstarted (refused as busy, or given back from the wait
/// for a slot): `why`, then that it was not started.
fn not_started(why: &str) -> ErrorObject {
    ErrorObject::new(
        wire::BUSY,
        format!("{why}: the request was not started; re-issue it"),
    )
}

fn ended_unanswered() -> ErrorObject {
    ErrorObject::internal("the request ended without an answer")
}

fn deadline_passed() -> ErrorObject {
    ErrorObject::new(
        toolyard_proto::error::code::REQUEST_TIMEOUT,
        "the caller's deadline (Mcp-Timeout-Ms) passed: the request was cancelled",
    )
}

fn abandoned() -> ErrorObject {
    ErrorObject::new(
        wire::STREAM_LOST,
        "the worker is draining and cancelled the request: re-issue it",
    )
}

/// Stops a task when its owner goes, however it goes: a request's cancellation listener,
/// the worker's watch of its shared state key.
#[derive(Debug)]
struct AbortOnDrop(Option<tokio::task::JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(task) = &self.0 {
            task.abort();
        }
    }
}

/// The subject, the mirrored headers and the body must agree.
fn integrity(
    inner: &Inner,
    message: &Message,
    headers: &RequestHeaders<'_>,
    request: &Request,
    head: &Head,
) -> Result<Option<Arc<str>>, String> {
    match headers.method {
        Some(m) if m == request.method => {}
        Some(m) => {
            return Err(format!(
                "Mcp-Method '{m}' does not match body method '{}'",
                request.method
            ))
        }
        None => return Err("missing Mcp-Method header".to_owned()),
    }
    let named = method::client_request(&request.method)
        .and_then(|spec| spec.mcp_name)
        .and_then(|field| match field {
            NameField::Name => head.name.as_ref(),
            NameField::Uri => head.uri.as_ref(),
            NameField::TaskId => head.task_id.as_ref(),
        })
        .and_then(serde_json::Value::as_str);
    if let Some(body) = named {
        match headers.name {
            Some(h) if h == body => {}
            Some(h) => return Err(format!("Mcp-Name '{h}' does not match body value '{body}'")),
            None => return Err("missing Mcp-Name header".to_owned()),
        }
    }
    // The header is optional; when sent it must name the revision the body's `_meta` does
    // (a body without one is refused after this, with the reason).
    let body_version = head
        .meta
        .as_ref()
        .and_then(|m| m.protocol_version.as_deref());
    if let (Some(h), Some(body)) = (headers.protocol_version, body_version) {
        if h != body {
            return Err(format!(
                "MCP-Protocol-Version '{h}' does not match the body's `_meta` revision '{body}'"
            ));
        }
    }
    if !wire::subject_matches(
        &message.subject,
        &inner.config.prefix,
        &inner.config.server,
        &request.method,
        named,
    ) {
        return Err(format!(
            "subject '{}' does not name the body's method and name",
            message.subject
        ));
    }
    crate::principal::of_request(&message.subject, &inner.config.prefix, headers.principal)
}

/// Subscribes to `{reply}.ctl`, where the caller's cancel comes (`None`, logged, when the
/// bus refuses: the request runs without it).
async fn subscribe_control(inner: &Inner, reply: &str) -> Option<async_nats::Subscriber> {
    match inner.client.subscribe(wire::control_subject(reply)).await {
        Ok(control) => Some(control),
        Err(e) => {
            tracing::warn!(%reply, error = %e, "cannot listen for cancellation");
            None
        }
    }
}

/// Listens on `control` (`{reply}.ctl`) for the caller's cancel of request `id`, and cancels
/// `cancelled` when it comes; unsubscribes when it has, or when aborted (dropped).
fn listen_for_cancel(
    mut control: async_nats::Subscriber,
    id: RequestId,
    cancelled: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while let Some(m) = control.next().await {
            if cancels(&m, &id) {
                cancelled.cancel();
                break;
            }
        }
        let _ = control.unsubscribe().await;
    })
}

/// Whether the cancel of request `id` has come on `control` already (what waits there is
/// read, and what is not that cancel is dropped).
fn cancel_waits_in(control: &mut async_nats::Subscriber, id: &RequestId) -> bool {
    use futures_util::FutureExt;
    while let Some(Some(m)) = control.next().now_or_never() {
        if cancels(&m, id) {
            return true;
        }
    }
    false
}

/// Whether `m` is the caller's `notifications/cancelled` of request `id` (matched by decoded
/// id: a string and a number are different ids; anything else is not).
fn cancels(m: &Message, id: &RequestId) -> bool {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Cancelled {
        request_id: RequestId,
    }
    let Ok(Incoming::Notification(n)) = jsonrpc::parse(&m.payload) else {
        return false;
    };
    n.method == method::NOTIFICATIONS_CANCELLED
        && jsonrpc::params::<Cancelled>(n.params.as_deref()).is_ok_and(|c| &c.request_id == id)
}

/// Everything the server offers, as modern listings answer it (every page).
/// A listing that fails (a `fail`-mode gateway source is down, say) keeps what the previous
/// entry offered rather than advertising nothing.
async fn offer(
    server: &Server,
    name: &str,
    instance: &str,
    previous: Option<&CatalogEntry>,
) -> CatalogEntry {
    let tools = list_all(server, "tools/list", "tools")
        .await
        .unwrap_or_else(|| previous.map(|p| p.tools.clone()).unwrap_or_default());
    let resources = list_all(server, "resources/list", "resources")
        .await
        .unwrap_or_else(|| previous.map(|p| p.resources.clone()).unwrap_or_default());
    let templates = list_all(server, "resources/templates/list", "resourceTemplates")
        .await
        .unwrap_or_else(|| {
            previous
                .map(|p| p.resource_templates.clone())
                .unwrap_or_default()
        });
    let prompts = list_all(server, "prompts/list", "prompts")
        .await
        .unwrap_or_else(|| previous.map(|p| p.prompts.clone()).unwrap_or_default());
    let restricted = restricted_offer(server);
    let deferred = (tools.iter())
        .chain(restricted.tools.iter().map(|t| &t.item))
        .filter(|t| server.tool(&t.name).is_some_and(|d| d.defers_task()))
        .map(|t| t.name.clone())
        .collect();
    let mut entry = CatalogEntry::new(name, instance, tools)
        .with_resources(resources, templates)
        .with_prompts(prompts)
        .with_deferred_tasks(deferred)
        .with_for_users(restricted);
    // `handle` reads a body a gateway put in a claim.
    entry.body_claims = true;
    // `jobs::run_job` reads a durable task's request from `TY_TASK_BODIES`.
    entry.task_body_claims = true;
    entry
}

/// What the server offers only to some callers, as it offers it to them: the items whose
/// audience is a list of principals, each with its principals' tokens (an anonymous listing
/// leaves them out). One whose audience is a predicate cannot be told, and is not offered
/// (`Worker::start` says so).
fn restricted_offer(server: &Server) -> crate::Restricted {
    fn told<T>(items: Vec<(T, toolyard::Audience)>) -> Vec<crate::ForUsers<T>> {
        let told = items.into_iter().filter_map(|(item, audience)| {
            let listed = audience.listed()?;
            let tokens = listed.iter().map(|p| crate::principal_token(p)).collect();
            Some(crate::ForUsers { item, tokens })
        });
        told.collect()
    }
    let offered = server.for_audiences();
    crate::Restricted {
        tools: told(offered.tools),
        resources: told(offered.resources),
        resource_templates: told(offered.templates),
        prompts: told(offered.prompts),
    }
}

/// The items whose audience is a predicate, which `restricted_offer` cannot tell: each as
/// `"tool NAME"`, `"prompt NAME"`, `"resource URI"` or `"template URI"`.
fn untold(offered: &toolyard::ForAudiences) -> Vec<String> {
    fn named<T>(
        items: &[(T, toolyard::Audience)],
        kind: &str,
        name: impl Fn(&T) -> &str,
    ) -> Vec<String> {
        let untold = items.iter().filter(|(_, a)| a.listed().is_none());
        untold
            .map(|(item, _)| format!("{kind} {}", name(item)))
            .collect()
    }
    [
        named(&offered.tools, "tool", |t| &t.name),
        named(&offered.prompts, "prompt", |p| &p.name),
        named(&offered.resources, "resource", |r| &r.uri),
        named(&offered.templates, "template", |t| &t.uri_template),
    ]
    .concat()
}

/// Every page of one listing, served like any request (so the worker advertises exactly
/// what a client of it would see); `key` names the array in the result. An item that does
/// not parse is skipped; `None` when a page of the listing fails.
async fn list_all<T: DeserializeOwned>(server: &Server, method: &str, key: &str) -> Option<Vec<T>> {
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    for page in 0..1000 {
        let mut params = serde_json::json!({
            "_meta": {
                toolyard_proto::meta::PROTOCOL_VERSION: "2026-07-28",
                toolyard_proto::meta::CLIENT_CAPABILITIES: {},
            }
        });
        if let Some(c) = &cursor {
            params["cursor"] = c.clone().into();
        }
        let body =
            serde_json::json!({"jsonrpc": "2.0", "id": page, "method": method, "params": params});
        let Ok(Incoming::Request(request)) = jsonrpc::parse(body.to_string().as_bytes()) else {
            return None;
        };
        let meta = jsonrpc::params::<Head>(request.params.as_deref())
            .ok()
            .and_then(|h| h.meta)
            .unwrap_or_default();
        let Served {
            messages: mut rx,
            answer_prefix: prefix,
        } = serve_here(
            server,
            TaskRole::Own,
            request,
            meta,
            CancellationToken::new(),
            None,
            None,
            // The worker's own listing: no caller.
            None,
            NOTIFICATION_BACKLOG,
        );
        let answer = loop {
            match rx.next().await {
                Some(b) if b.starts_with(&prefix) => break Some(b),
                Some(_) => continue,
                None => break None,
            }
        };
        #[derive(Deserialize)]
        struct Answer {
            result: Option<serde_json::Map<String, serde_json::Value>>,
        }
        let Some(mut result) = answer
            .and_then(|b| serde_json::from_slice::<Answer>(&b).ok())
            .and_then(|a| a.result)
        else {
            tracing::warn!(%method, "a listing failed: the catalog keeps what it offered before");
            return None;
        };
        if let Some(serde_json::Value::Array(found)) = result.remove(key) {
            for item in found {
                match serde_json::from_value::<T>(item) {
                    Ok(item) => items.push(item),
                    Err(e) => {
                        tracing::warn!(%method, error = %e, "an item the catalog cannot carry: skipped")
                    }
                }
            }
        }
        match result.remove("nextCursor") {
            Some(serde_json::Value::String(c)) => cursor = Some(c),
            _ => break,
        }
    }
    Some(items)
}

#[cfg(test)]
mod tests {
    /// What a worker cannot publish and warns of: the items whose audience is a predicate,
    /// each named by kind, and none of those whose audience is a list.
    #[test]
    fn only_items_for_a_predicate_audience_go_untold() {
        use toolyard::Audience;
        let tool = |name: &str| -> toolyard::proto::Tool {
            serde_json::from_value(
                serde_json::json!({"name": name, "inputSchema": {"type": "object"}}),
            )
            .unwrap()
        };
        let prompt = |name: &str| -> toolyard::proto::Prompt {
            serde_json::from_value(serde_json::json!({"name": name})).unwrap()
        };
        let offered = toolyard::ForAudiences {
            tools: vec![
                (tool("listed"), Audience::principals(["alice"])),
                (tool("judged"), Audience::when(|p| p.starts_with('a'))),
            ],
            prompts: vec![(prompt("brief"), Audience::when(|_| true))],
            ..toolyard::ForAudiences::default()
        };
        assert_eq!(super::untold(&offered), ["tool judged", "prompt brief"]);
        assert!(super::untold(&toolyard::ForAudiences::default()).is_empty());
    }

    /// The one pass over a request's headers finds what a lookup per header found: the
    /// first value of each, nothing for a name spelt in another case or absent, with
    /// unrelated headers around them.
    #[test]
    fn request_headers_read_in_one_pass_agree_with_a_lookup_per_header() {
        use crate::wire;
        use async_nats::HeaderMap;
        let headers_again = || {
            let mut headers = HeaderMap::new();
            headers.insert(wire::WIRE, "1");
            headers.insert("X-Before", "x");
            headers.insert(wire::METHOD, "tools/call");
            headers.append(wire::NAME, "add");
            headers.append(wire::NAME, "sub");
            headers.insert("mcp-timeout-ms", "5");
            headers.insert(
                wire::TRACEPARENT,
                "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
            );
            headers.insert(wire::ACCEPT_CLAIM, "1");
            headers.insert("X-After", "y");
            headers
        };
        let headers = headers_again();
        let with = |headers: Option<HeaderMap>| async_nats::Message {
            subject: "mcp.v1.req._._.calc.tools.call.add".into(),
            reply: None,
            payload: bytes::Bytes::new(),
            headers,
            status: None,
            description: None,
            length: 0,
        };
        for message in [
            with(Some(headers)),
            with(Some(HeaderMap::new())),
            with(None),
        ] {
            let read = super::RequestHeaders::read(&message);
            for (found, name) in [
                (read.wire, wire::WIRE),
                (read.method, wire::METHOD),
                (read.name, wire::NAME),
                (read.accept_claim, wire::ACCEPT_CLAIM),
                (read.traceparent, wire::TRACEPARENT),
                (read.tracestate, wire::TRACESTATE),
                (read.baggage, wire::BAGGAGE),
                (read.timeout_ms, wire::TIMEOUT_MS),
            ] {
                assert_eq!(found, wire::header(&message, name.clone()), "{name:?}");
            }
        }
        let full = with(Some(headers_again()));
        let read = super::RequestHeaders::read(&full);
        assert_eq!(
            (
                read.wire,
                read.method,
                read.name,
                read.accept_claim,
                read.timeout_ms
            ),
            (Some("1"), Some("tools/call"), Some("add"), Some("1"), None)
        );
    }

    /// Every request's future is allocated whole, and moved whole when it is spawned: at
    /// 7 912 bytes (the object store's write for an oversize answer was carried inline) it
    /// cost ~8 000 instructions of copying a request, and anything over 1 000 bytes makes
    /// glibc's malloc consolidate its fast bins on every request (~1 700 instructions,
    /// callgrind `nats-worker`). The rare paths are boxed apart; keep it that way.
    #[test]
    fn a_requests_future_carries_no_rare_path_inline() {
        fn tracked<A, B, C, F: std::future::Future>(_: impl Fn(A, B, C) -> F) -> usize {
            std::mem::size_of::<tokio_util::task::task_tracker::TrackedFuture<F>>()
        }
        let size = tracked(super::handle);
        assert!(size <= 1000, "a request's future is {size} bytes");
    }
}
