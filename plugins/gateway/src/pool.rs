//! Connections to one source, by its lifecycle, under supervision.
//!
//! A [`SourcePool`] hands out [`Lease`]s, each a [`Client`] connected to the source:
//!
//! - **Transient**: a new connection (a new process) per lease, closed in the background when
//!   the lease drops; it counts in [`SourceHealth::processes`] until it is closed.
//! - **Singleton** (and every remote source): one shared connection. A lease that finds it
//!   dead (closed without us closing it, or a transport error reported on it) starts a new one,
//!   after the restart backoff; concurrent leases share that restart (the slot is a tokio
//!   mutex held across the start).
//! - **Pooled**: up to `size` connections, each serving at most `max_concurrency` leases at
//!   once (a semaphore per connection). A lease takes the least busy live connection with a
//!   free permit, starts a new one when all are busy and the pool may grow, and otherwise
//!   waits, at most the call timeout. A reaper (holding only a `Weak`, so dropping the pool
//!   ends it) stops connections idle longer than `idle`, down to `min_idle`.
//!
//! Supervision is the same for all: a connection that died, a reported transport error, and a
//! failed start (spawn error, refused connection, handshake failure or timeout) each count one
//! crash. Each crash in a row doubles the wait before the next start (`backoff_initial` up to
//! `backoff_max`); a lease waits out the rest of it, unless that is longer than the startup
//! timeout ([`HostError::Backoff`]). `max_crashes` within `window` open the circuit: the source
//! is [`HealthState::Unhealthy`] and leases fail at once with [`HostError::Unhealthy`] without
//! starting anything, while a background probe (every `probe_interval`, or
//! [`SourcePool::probe`] on demand) connects and pings; its success closes the circuit, and
//! its connection serves the next leases when the lifecycle keeps connections. `max_crashes`
//! 0 disables the circuit (the backoff still applies).
//!
//! Errors and [`SourceHealth::last_error`] name the source; the values of secret environment
//! variables and of remote headers are replaced with `<secret>` wherever they would appear.
//!
//! Locks: the state and the connection lists are behind std mutexes, never held across an
//! await; the singleton's slot is a tokio mutex, and every wait is bounded.

use super::error::HostError;
use super::spec::{Launch, Lifecycle, SourceSpec};
use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::ops::Deref;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;
use tokio::sync::{Notify, OnceCell, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use toolyard_client::StdioTransport;
use toolyard_client::{Client, ClientBuilder, ClientError, Transport, TransportError};

/// Makes the builder of every connection of a source: the gateway sets the client's identity
/// and its handlers (elicitation, sampling, roots, notifications). The pool then sets the
/// protocol and the timeouts from the [`SourceSpec`].
pub type ClientFactory = Arc<dyn Fn() -> ClientBuilder + Send + Sync>;

/// How long closing one connection may take (a process that ignores EOF and SIGTERM gets
/// SIGKILL well within it).
const CLOSE_BOUND: Duration = Duration::from_secs(15);
/// Secrets shorter than this are not scrubbed from messages (they would garble them).
const MIN_SECRET_LEN: usize = 4;

/// The state of a source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum HealthState {
    /// No connection has been made yet.
    Starting,
    /// The circuit is closed: leases are served.
    Healthy,
    /// The circuit is open: leases fail fast until a probe succeeds.
    Unhealthy,
    /// Shut down.
    Stopped,
}

/// A snapshot of a source's health.
#[derive(Debug, Clone, Serialize)]
pub struct SourceHealth {
    /// The state.
    pub state: HealthState,
    /// Connections started to replace crashed ones (or after failed starts).
    pub restarts: u32,
    /// Crashes within the supervision window.
    pub crashes_in_window: u32,
    /// Open connections (processes, for a local source), including those being closed.
    pub processes: usize,
    /// Leases held.
    pub in_flight: usize,
    /// The last crash or failed start, secrets scrubbed.
    pub last_error: Option<String>,
}

/// The connections of one source. Cheap to clone: clones share the pool.
#[derive(Clone)]
pub struct SourcePool {
    inner: Arc<Inner>,
}

impl fmt::Debug for SourcePool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SourcePool")
            .field("source", &self.inner.spec.name)
            .field("health", &self.health())
            .finish()
    }
}

/// One connection and what the pool knows of it.
struct Conn {
    id: u64,
    client: Client,
    /// We close (or closed) it: its end is no crash.
    closing: AtomicBool,
    /// Known dead (a transport error was reported, or its end was noticed); its crash counted.
    dead: AtomicBool,
    /// Set once it is closed; concurrent closers wait for the first.
    closed: OnceCell<()>,
    /// Pooled: concurrent leases it may serve.
    permits: Arc<Semaphore>,
    last_used: Mutex<Instant>,
}

impl Conn {
    fn alive(&self) -> bool {
        !self.dead.load(Ordering::Acquire)
            && !self.closing.load(Ordering::Acquire)
            && !self.client.is_closed()
    }
}

enum Kind {
    Transient,
    /// Singleton and remote sources.
    Shared(tokio::sync::Mutex<Option<Arc<Conn>>>),
    Pooled(Pool),
}

struct Pool {
    size: usize,
    min_idle: usize,
    max_concurrency: usize,
    idle: Duration,
    slots: Mutex<Slots>,
    /// A permit was released, a connection started or went away.
    freed: Notify,
    reaper: AtomicBool,
}

#[derive(Default)]
struct Slots {
    conns: Vec<Arc<Conn>>,
    /// Connections being started (they count against `size`).
    starting: usize,
}

impl Slots {
    /// The connection with the most free permits, and one of them, if any is free.
    fn take_free(&self) -> Option<(Arc<Conn>, OwnedSemaphorePermit)> {
        let best = self
            .conns
            .iter()
            .max_by_key(|c| c.permits.available_permits())?;
        let permit = best.permits.clone().try_acquire_owned().ok()?;
        Some((best.clone(), permit))
    }
}

struct State {
    /// Starting or Healthy; Unhealthy and Stopped come from `open` and `stopped`.
    health: HealthState,
    open: bool,
    stopped: bool,
    crashes: VecDeque<Instant>,
    in_a_row: u32,
    retry_at: Option<Instant>,
    restarts: u32,
    restart_pending: bool,
    last_error: Option<String>,
    prober: bool,
}

struct Inner {
    spec: Arc<SourceSpec>,
    factory: ClientFactory,
    kind: Kind,
    state: Mutex<State>,
    /// Every open connection, by id (closed ones leave once their close completed).
    live: Mutex<HashMap<u64, Arc<Conn>>>,
    next_id: AtomicU64,
    in_flight: AtomicUsize,
    stop: CancellationToken,
    secrets: Vec<String>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Ends the reaper and the prober; the connections close as their clients drop.
        self.stop.cancel();
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl SourcePool {
    /// A pool for `spec`; nothing starts until the first lease (or probe). Needs no runtime.
    pub fn new(spec: Arc<SourceSpec>, factory: ClientFactory) -> Self {
        let kind = match (&spec.launch, spec.lifecycle) {
            (Launch::Remote(_), _) | (_, Lifecycle::Singleton) => {
                Kind::Shared(tokio::sync::Mutex::new(None))
            }
            (_, Lifecycle::Transient) => Kind::Transient,
            (
                _,
                Lifecycle::Pooled {
                    size,
                    min_idle,
                    max_concurrency,
                    idle,
                },
            ) => {
                let size = size.max(1);
                Kind::Pooled(Pool {
                    size,
                    min_idle: min_idle.min(size),
                    max_concurrency: max_concurrency.max(1),
                    idle,
                    slots: Mutex::new(Slots::default()),
                    freed: Notify::new(),
                    reaper: AtomicBool::new(false),
                })
            }
        };
        let secrets: Vec<String> = match &spec.launch {
            Launch::Process(p) => p
                .env
                .iter()
                .filter(|v| v.secret)
                .map(|v| v.value.clone())
                .collect(),
            Launch::Remote(r) => r.headers.iter().map(|(_, v)| v.clone()).collect(),
        };
        let secrets = secrets
            .into_iter()
            .filter(|s: &String| s.len() >= MIN_SECRET_LEN)
            .collect();
        SourcePool {
            inner: Arc::new(Inner {
                spec,
                factory,
                kind,
                state: Mutex::new(State {
                    health: HealthState::Starting,
                    open: false,
                    stopped: false,
                    crashes: VecDeque::new(),
                    in_a_row: 0,
                    retry_at: None,
                    restarts: 0,
                    restart_pending: false,
                    last_error: None,
                    prober: false,
                }),
                live: Mutex::new(HashMap::new()),
                next_id: AtomicU64::new(0),
                in_flight: AtomicUsize::new(0),
                stop: CancellationToken::new(),
                secrets,
            }),
        }
    }

    /// A connection to use for a call. Fails at once when the circuit is open
    /// ([`HostError::Unhealthy`]) or the pool is shut down ([`HostError::Stopped`]); otherwise
    /// waits for a start (bounded by the startup timeout) or, pooled, for a free connection
    /// (bounded by the call timeout).
    pub async fn lease(&self) -> Result<Lease, HostError> {
        let inner = &self.inner;
        inner.check()?;
        // The common case, a live connection free now, takes no await, no timer and no
        // allocation; waiting, starting and restarting are boxed (this future is part of
        // every forwarded call's, allocated whole per call).
        let ready = match &inner.kind {
            Kind::Transient => None,
            Kind::Shared(slot) => inner.shared_now(slot).map(|conn| (conn, None)),
            Kind::Pooled(pool) => inner
                .pooled_now(pool)
                .map(|(conn, permit)| (conn, Some(permit))),
        };
        let (conn, permit) = match ready {
            Some(ready) => ready,
            None => Box::pin(self.lease_waiting()).await?,
        };
        inner.in_flight.fetch_add(1, Ordering::AcqRel);
        Ok(Lease {
            transient: matches!(inner.kind, Kind::Transient),
            inner: inner.clone(),
            conn,
            permit,
        })
    }

    /// A connection when none is free at once: waiting for the shared one's lock or a
    /// pooled permit, or starting a process.
    async fn lease_waiting(&self) -> Result<(Arc<Conn>, Option<OwnedSemaphorePermit>), HostError> {
        let inner = &self.inner;
        Ok(match &inner.kind {
            Kind::Transient => (inner.start_connection().await?, None),
            Kind::Shared(slot) => (inner.lease_shared(slot).await?, None),
            Kind::Pooled(pool) => {
                let (conn, permit) = inner.lease_pooled(pool).await?;
                (conn, Some(permit))
            }
        })
    }

    /// A snapshot of the source's health; cheap.
    pub fn health(&self) -> SourceHealth {
        let inner = &self.inner;
        let (state, restarts, crashes_in_window, last_error) = {
            let st = lock(&inner.state);
            let now = Instant::now();
            let window = inner.spec.supervision.window;
            let state = if st.stopped {
                HealthState::Stopped
            } else if st.open {
                HealthState::Unhealthy
            } else {
                st.health
            };
            let recent = st
                .crashes
                .iter()
                .filter(|t| now.saturating_duration_since(**t) < window)
                .count();
            (
                state,
                st.restarts,
                u32::try_from(recent).unwrap_or(u32::MAX),
                st.last_error.clone(),
            )
        };
        SourceHealth {
            state,
            restarts,
            crashes_in_window,
            processes: lock(&inner.live).len(),
            in_flight: inner.in_flight.load(Ordering::Acquire),
            last_error,
        }
    }

    /// Connects and pings now, whatever the circuit's state; success closes the circuit (the
    /// new connection then serves, when the lifecycle keeps connections).
    pub async fn probe(&self) -> Result<(), HostError> {
        self.inner.probe_once().await
    }

    /// Closes every connection and waits for them to close; later leases fail with
    /// [`HostError::Stopped`].
    pub async fn shutdown(&self) {
        let inner = &self.inner;
        lock(&inner.state).stopped = true;
        inner.stop.cancel();
        match &inner.kind {
            Kind::Shared(slot) => {
                // A start in progress gives up on the stop, so the wait is short.
                let bound = inner.spec.startup_timeout + Duration::from_secs(1);
                if let Ok(mut slot) = tokio::time::timeout(bound, slot.lock()).await {
                    slot.take();
                }
            }
            Kind::Pooled(pool) => {
                lock(&pool.slots).conns.clear();
                pool.freed.notify_waiters();
            }
            Kind::Transient => {}
        }
        let all: Vec<Arc<Conn>> = lock(&inner.live).values().cloned().collect();
        futures_util::future::join_all(all.iter().map(|c| inner.close_conn(c))).await;
        tracing::info!(source = %inner.spec.name, "source stopped");
    }

    /// The source's description.
    pub fn spec(&self) -> &SourceSpec {
        &self.inner.spec
    }
}

/// A connection lent for a call (or a few). Dereferences to the [`Client`]; dropping it
/// releases the connection (a transient one is closed in the background).
pub struct Lease {
    inner: Arc<Inner>,
    conn: Arc<Conn>,
    permit: Option<OwnedSemaphorePermit>,
    transient: bool,
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("source", &self.inner.spec.name)
            .field("connection", &self.conn.id)
            .finish()
    }
}

impl Deref for Lease {
    type Target = Client;

    fn deref(&self) -> &Client {
        &self.conn.client
    }
}

impl Lease {
    /// The connection.
    pub fn client(&self) -> &Client {
        &self.conn.client
    }

    /// Tells the pool a call on this connection failed. A transport-level error
    /// ([`ClientError::Transport`], [`ClientError::Closed`]) counts as a crash of the
    /// connection, which is replaced on next use; other errors are the call's business.
    pub fn report(&self, error: &ClientError) {
        if matches!(error, ClientError::Transport(_) | ClientError::Closed) {
            self.inner.note_crash(&self.conn, &error.to_string());
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        let inner = &self.inner;
        inner.in_flight.fetch_sub(1, Ordering::AcqRel);
        let conn = &self.conn;
        if conn.client.is_closed() {
            inner.note_crash(conn, "the connection closed unexpectedly");
        } else if !conn.dead.load(Ordering::Acquire) {
            inner.healthy_release();
        }
        *lock(&conn.last_used) = Instant::now();
        drop(self.permit.take());
        if self.transient {
            inner.close_in_background(conn.clone());
        }
        if let Kind::Pooled(pool) = &inner.kind {
            pool.freed.notify_waiters();
        }
    }
}

/// Removes a reserved start from the pool's count unless disarmed.
struct Starting<'a> {
    pool: &'a Pool,
    armed: bool,
}

impl Drop for Starting<'_> {
    fn drop(&mut self) {
        if self.armed {
            lock(&self.pool.slots).starting -= 1;
            self.pool.freed.notify_waiters();
        }
    }
}

impl Inner {
    fn stopped(&self) -> HostError {
        HostError::Stopped {
            source: self.spec.name.clone(),
        }
    }

    fn timeout(&self) -> HostError {
        HostError::Timeout {
            source: self.spec.name.clone(),
        }
    }

    /// Fails when stopped or when the circuit is open (making sure a prober runs).
    fn check(self: &Arc<Self>) -> Result<(), HostError> {
        let mut st = lock(&self.state);
        if st.stopped {
            return Err(self.stopped());
        }
        if st.open {
            let reason = st
                .last_error
                .clone()
                .unwrap_or_else(|| "it crashed too often".into());
            let start = !st.prober;
            st.prober = true;
            drop(st);
            if start {
                self.start_prober();
            }
            return Err(HostError::Unhealthy {
                source: self.spec.name.clone(),
                reason,
            });
        }
        Ok(())
    }

    fn scrub(&self, text: String) -> String {
        let mut text = text;
        for secret in &self.secrets {
            if text.contains(secret.as_str()) {
                text = text.replace(secret.as_str(), "<secret>");
            }
        }
        text
    }

    fn scrub_error(&self, error: ClientError) -> ClientError {
        let text = error.to_string();
        if self.secrets.iter().any(|s| text.contains(s.as_str())) {
            ClientError::Transport(TransportError::Io(self.scrub(text)))
        } else {
            error
        }
    }

    fn backoff(&self, in_a_row: u32) -> Duration {
        let sup = &self.spec.supervision;
        let factor = 1u32
            .checked_shl(in_a_row.saturating_sub(1))
            .unwrap_or(u32::MAX);
        sup.backoff_initial
            .checked_mul(factor)
            .unwrap_or(sup.backoff_max)
            .min(sup.backoff_max)
    }

    /// Counts a crash; may open the circuit.
    fn record_crash(self: &Arc<Self>, reason: &str) {
        let reason = self.scrub(reason.to_owned());
        let sup = self.spec.supervision;
        let now = Instant::now();
        let mut st = lock(&self.state);
        if st.stopped {
            return;
        }
        st.in_a_row = st.in_a_row.saturating_add(1);
        let wait = self.backoff(st.in_a_row);
        st.retry_at = Some(now + wait);
        st.restart_pending = true;
        st.crashes.push_back(now);
        while st
            .crashes
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) >= sup.window)
        {
            st.crashes.pop_front();
        }
        let crashes = st.crashes.len();
        tracing::warn!(source = %self.spec.name, crashes, backoff = ?wait, error = %reason,
            "source crashed");
        st.last_error = Some(reason);
        if !st.open && sup.max_crashes > 0 && crashes >= sup.max_crashes as usize {
            st.open = true;
            tracing::error!(source = %self.spec.name, crashes, window = ?sup.window,
                "source is unhealthy: circuit open until a probe succeeds");
            let start = !st.prober;
            st.prober = true;
            drop(st);
            if start {
                self.start_prober();
            }
        }
    }

    /// Counts the crash of `conn`, once, unless we closed it.
    fn note_crash(self: &Arc<Self>, conn: &Conn, reason: &str) {
        if conn.closing.load(Ordering::Acquire) || conn.dead.swap(true, Ordering::AcqRel) {
            return;
        }
        self.record_crash(reason);
    }

    /// A lease ended on a live connection: the crashes in a row are over.
    fn healthy_release(&self) {
        let mut st = lock(&self.state);
        if st.in_a_row > 0 && !st.open {
            st.in_a_row = 0;
            st.retry_at = None;
        }
    }

    fn on_connected(&self) {
        let mut st = lock(&self.state);
        if st.health == HealthState::Starting {
            st.health = HealthState::Healthy;
        }
        if st.restart_pending {
            st.restart_pending = false;
            st.restarts = st.restarts.saturating_add(1);
        }
    }

    fn close_circuit(&self) {
        let mut st = lock(&self.state);
        if st.stopped {
            return;
        }
        if st.open {
            tracing::info!(source = %self.spec.name, "source recovered: circuit closed");
        }
        st.open = false;
        st.crashes.clear();
        st.in_a_row = 0;
        st.retry_at = None;
        st.health = HealthState::Healthy;
    }

    fn start_prober(self: &Arc<Self>) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            // No runtime here: the next lease (which runs in one) starts it.
            lock(&self.state).prober = false;
            return;
        };
        let weak: Weak<Inner> = Arc::downgrade(self);
        let stop = self.stop.clone();
        let interval = self
            .spec
            .supervision
            .probe_interval
            .max(Duration::from_millis(10));
        runtime.spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(interval) => {}
                    _ = stop.cancelled() => return,
                }
                let Some(inner) = weak.upgrade() else { return };
                {
                    let mut st = lock(&inner.state);
                    if !st.open || st.stopped {
                        st.prober = false;
                        return;
                    }
                }
                match inner.probe_once().await {
                    Ok(()) => {}
                    Err(e) => {
                        tracing::debug!(source = %inner.spec.name, error = %e, "probe failed")
                    }
                }
            }
        });
    }

    /// The transport of a new connection.
    // Fails only in a build without HTTP sources (a `url` source then has no transport).
    #[cfg_attr(feature = "http", allow(clippy::unnecessary_wraps))]
    fn transport(&self) -> Result<Box<dyn Transport>, HostError> {
        match &self.spec.launch {
            Launch::Process(p) => {
                let mut t = StdioTransport::new(&p.command)
                    .args(p.args.iter())
                    .inherit_env_vars(&p.inherit_env)
                    .inherit_env_defaults(p.inherit_env_defaults)
                    .name(self.spec.name.clone());
                for v in &p.env {
                    t = t.env(&v.name, &v.value);
                }
                if let Some(cwd) = &p.cwd {
                    t = t.current_dir(cwd);
                }
                Ok(Box::new(t))
            }
            #[cfg(feature = "http")]
            Launch::Remote(r) => {
                use super::spec::RemoteTransport;
                let startup = self.spec.startup_timeout;
                Ok(match r.transport {
                    RemoteTransport::Auto | RemoteTransport::StreamableHttp => {
                        let mut t = toolyard_client::StreamableHttpTransport::new(&r.url)
                            .sse_fallback(r.transport == RemoteTransport::Auto)
                            .sse_endpoint_timeout(startup)
                            .connect_timeout(startup);
                        for (k, v) in &r.headers {
                            t = t.header(k, v);
                        }
                        Box::new(t)
                    }
                    RemoteTransport::Sse => {
                        let mut t = toolyard_client::SseTransport::new(&r.url)
                            .connect_timeout(startup)
                            .endpoint_timeout(startup);
                        for (k, v) in &r.headers {
                            t = t.header(k, v);
                        }
                        Box::new(t)
                    }
                })
            }
            #[cfg(not(feature = "http"))]
            Launch::Remote(_) => Err(HostError::Unsupported {
                source: self.spec.name.clone(),
                reason: "remote sources need the `client-http` feature".into(),
            }),
        }
    }

    /// Waits out the restart backoff, then connects.
    async fn start_connection(self: &Arc<Self>) -> Result<Arc<Conn>, HostError> {
        self.check()?;
        let wait = lock(&self.state)
            .retry_at
            .map(|t| t.saturating_duration_since(Instant::now()))
            .unwrap_or_default();
        if !wait.is_zero() {
            if wait > self.spec.startup_timeout {
                return Err(HostError::Backoff {
                    source: self.spec.name.clone(),
                    retry_in: wait,
                });
            }
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.stop.cancelled() => return Err(self.stopped()),
            }
            self.check()?;
        }
        self.connect().await
    }

    /// Starts a connection now (no backoff, whatever the circuit); a failure counts a crash.
    async fn connect(self: &Arc<Self>) -> Result<Arc<Conn>, HostError> {
        let spec = &self.spec;
        let transport = self.transport()?;
        let builder = (self.factory)()
            .protocol(spec.protocol)
            .request_timeout(spec.call_timeout)
            .handshake_timeout(spec.startup_timeout);
        let attempt = tokio::time::timeout(spec.startup_timeout, builder.connect_boxed(transport));
        let result = tokio::select! {
            r = attempt => r,
            _ = self.stop.cancelled() => return Err(self.stopped()),
        };
        let client = match result {
            Ok(Ok(client)) => client,
            Ok(Err(error)) => {
                let error = self.scrub_error(error);
                self.record_crash(&format!("could not start: {error}"));
                return Err(HostError::Connect {
                    source: spec.name.clone(),
                    error,
                });
            }
            Err(_) => {
                self.record_crash(&format!("did not start within {:?}", spec.startup_timeout));
                return Err(self.timeout());
            }
        };
        let permits = match &self.kind {
            Kind::Pooled(pool) => pool.max_concurrency,
            _ => Semaphore::MAX_PERMITS,
        };
        let conn = Arc::new(Conn {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            client,
            closing: AtomicBool::new(false),
            dead: AtomicBool::new(false),
            closed: OnceCell::new(),
            permits: Arc::new(Semaphore::new(permits)),
            last_used: Mutex::new(Instant::now()),
        });
        let registered = {
            let mut live = lock(&self.live);
            // Checked under the lock shutdown takes its snapshot under: nothing escapes it.
            if self.stop.is_cancelled() {
                false
            } else {
                live.insert(conn.id, conn.clone());
                true
            }
        };
        if !registered {
            conn.closing.store(true, Ordering::Release);
            let _ = tokio::time::timeout(CLOSE_BOUND, conn.client.close()).await;
            return Err(self.stopped());
        }
        self.on_connected();
        tracing::debug!(source = %spec.name, connection = conn.id, "connected");
        Ok(conn)
    }

    /// Closes `conn` (once, whoever asks) and forgets it.
    async fn close_conn(&self, conn: &Conn) {
        conn.closing.store(true, Ordering::Release);
        conn.closed
            .get_or_init(|| async {
                let _ = tokio::time::timeout(CLOSE_BOUND, conn.client.close()).await;
            })
            .await;
        lock(&self.live).remove(&conn.id);
    }

    fn close_in_background(self: &Arc<Self>, conn: Arc<Conn>) {
        conn.closing.store(true, Ordering::Release);
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let inner = self.clone();
                runtime.spawn(async move { inner.close_conn(&conn).await });
            }
            // No runtime: dropping the last handle of the client closes it.
            Err(_) => {
                lock(&self.live).remove(&conn.id);
            }
        }
    }

    /// The shared connection, if it is alive and nobody holds its slot (starting or
    /// replacing it) this instant.
    fn shared_now(&self, slot: &tokio::sync::Mutex<Option<Arc<Conn>>>) -> Option<Arc<Conn>> {
        let slot = slot.try_lock().ok()?;
        slot.as_ref().filter(|c| c.alive()).cloned()
    }

    /// A pooled connection with a free permit, if there is one this instant and no
    /// connection died (pruning and counting the crash is [`lease_pooled`]'s).
    fn pooled_now(self: &Arc<Self>, pool: &Pool) -> Option<(Arc<Conn>, OwnedSemaphorePermit)> {
        self.ensure_reaper(pool);
        let slots = lock(&pool.slots);
        if slots.conns.iter().any(|c| !c.alive()) {
            return None;
        }
        slots.take_free()
    }

    /// The singleton's connection, started (once for all waiting leases) when missing or dead.
    async fn lease_shared(
        self: &Arc<Self>,
        slot: &tokio::sync::Mutex<Option<Arc<Conn>>>,
    ) -> Result<Arc<Conn>, HostError> {
        // The holder waits at most the startup timeout for the backoff, then as long to start.
        let bound = self.spec.startup_timeout * 2 + Duration::from_secs(1);
        let mut slot = tokio::select! {
            r = tokio::time::timeout(bound, slot.lock()) => r.map_err(|_| self.timeout())?,
            _ = self.stop.cancelled() => return Err(self.stopped()),
        };
        self.check()?;
        if let Some(conn) = slot.as_ref() {
            if conn.alive() {
                return Ok(conn.clone());
            }
            self.note_crash(conn, "the connection closed unexpectedly");
            if let Some(old) = slot.take() {
                self.close_in_background(old);
            }
        }
        let conn = self.start_connection().await?;
        *slot = Some(conn.clone());
        Ok(conn)
    }

    /// Drops dead connections from the pool (counting their crashes), to be closed.
    fn prune(slots: &mut Slots) -> Vec<Arc<Conn>> {
        let mut gone = Vec::new();
        slots.conns.retain(|c| {
            if c.alive() {
                true
            } else {
                gone.push(c.clone());
                false
            }
        });
        gone
    }

    fn discard(self: &Arc<Self>, gone: Vec<Arc<Conn>>) {
        for conn in gone {
            self.note_crash(&conn, "the connection closed unexpectedly");
            self.close_in_background(conn);
        }
    }

    async fn lease_pooled(
        self: &Arc<Self>,
        pool: &Pool,
    ) -> Result<(Arc<Conn>, OwnedSemaphorePermit), HostError> {
        self.ensure_reaper(pool);
        let deadline = Instant::now() + self.spec.call_timeout;
        loop {
            let notified = pool.freed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (taken, start, gone) = {
                let mut slots = lock(&pool.slots);
                let gone = Self::prune(&mut slots);
                let taken = slots.take_free();
                let start = taken.is_none() && slots.conns.len() + slots.starting < pool.size;
                if start {
                    slots.starting += 1;
                }
                (taken, start, gone)
            };
            if !gone.is_empty() {
                self.discard(gone);
            }
            if let Some(taken) = taken {
                return Ok(taken);
            }
            if start {
                let mut reserved = Starting { pool, armed: true };
                let conn = self.start_connection().await?;
                let Ok(permit) = conn.permits.clone().try_acquire_owned() else {
                    // Cannot happen: nobody else knows the connection yet.
                    return Err(self.timeout());
                };
                {
                    let mut slots = lock(&pool.slots);
                    slots.starting -= 1;
                    reserved.armed = false;
                    if !self.stop.is_cancelled() {
                        slots.conns.push(conn.clone());
                    }
                }
                pool.freed.notify_waiters();
                return Ok((conn, permit));
            }
            tokio::select! {
                _ = &mut notified => {}
                _ = tokio::time::sleep_until(deadline) => return Err(self.timeout()),
                _ = self.stop.cancelled() => return Err(self.stopped()),
            }
            self.check()?;
        }
    }

    fn ensure_reaper(self: &Arc<Self>, pool: &Pool) {
        if pool.reaper.swap(true, Ordering::AcqRel) {
            return;
        }
        let weak: Weak<Inner> = Arc::downgrade(self);
        let stop = self.stop.clone();
        let period = (pool.idle / 4).clamp(Duration::from_millis(10), Duration::from_secs(5));
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = tokio::time::sleep(period) => {}
                    _ = stop.cancelled() => return,
                }
                let Some(inner) = weak.upgrade() else { return };
                inner.reap();
            }
        });
    }

    /// Stops connections idle longer than `idle`, down to `min_idle`; drops dead ones.
    fn reap(self: &Arc<Self>) {
        let Kind::Pooled(pool) = &self.kind else {
            return;
        };
        let now = Instant::now();
        let (gone, idle) = {
            let mut slots = lock(&pool.slots);
            let gone = Self::prune(&mut slots);
            let mut idle = Vec::new();
            let mut keep = slots.conns.len();
            slots.conns.retain(|c| {
                let unused = c.permits.available_permits() == pool.max_concurrency
                    && now.saturating_duration_since(*lock(&c.last_used)) >= pool.idle;
                if keep > pool.min_idle && unused {
                    keep -= 1;
                    idle.push(c.clone());
                    false
                } else {
                    true
                }
            });
            (gone, idle)
        };
        if !gone.is_empty() {
            self.discard(gone);
        }
        if !idle.is_empty() {
            tracing::debug!(source = %self.spec.name, stopped = idle.len(), "stopping idle processes");
            for conn in idle {
                self.close_in_background(conn);
            }
            pool.freed.notify_waiters();
        }
    }

    /// Connects and pings; success closes the circuit and keeps the connection if the
    /// lifecycle has room for it.
    async fn probe_once(self: &Arc<Self>) -> Result<(), HostError> {
        if lock(&self.state).stopped {
            return Err(self.stopped());
        }
        let conn = self.connect().await?;
        let ping = tokio::select! {
            r = tokio::time::timeout(self.spec.call_timeout, conn.client.ping()) => r,
            _ = self.stop.cancelled() => {
                self.close_conn(&conn).await;
                return Err(self.stopped());
            }
        };
        match ping {
            // Answering at all, even without `ping`, proves the server is up.
            Ok(Ok(())) | Ok(Err(ClientError::MethodNotFound(_) | ClientError::Rpc(_))) => {
                self.close_circuit();
                self.adopt(conn);
                Ok(())
            }
            Ok(Err(error)) => {
                let error = self.scrub_error(error);
                self.note_crash(&conn, &format!("probe failed: {error}"));
                self.close_conn(&conn).await;
                Err(HostError::Connect {
                    source: self.spec.name.clone(),
                    error,
                })
            }
            Err(_) => {
                self.note_crash(&conn, "probe: no answer to ping");
                self.close_conn(&conn).await;
                Err(self.timeout())
            }
        }
    }

    /// Keeps a probe's connection where the lifecycle wants one; otherwise closes it.
    fn adopt(self: &Arc<Self>, conn: Arc<Conn>) {
        match &self.kind {
            Kind::Shared(slot) => {
                if let Ok(mut slot) = slot.try_lock() {
                    if !slot.as_ref().is_some_and(|c| c.alive()) {
                        if let Some(old) = slot.replace(conn) {
                            self.note_crash(&old, "the connection closed unexpectedly");
                            self.close_in_background(old);
                        }
                        return;
                    }
                }
            }
            Kind::Pooled(pool) => {
                let kept = {
                    let mut slots = lock(&pool.slots);
                    if slots.conns.len() + slots.starting < pool.size && !self.stop.is_cancelled() {
                        slots.conns.push(conn.clone());
                        true
                    } else {
                        false
                    }
                };
                if kept {
                    self.ensure_reaper(pool);
                    pool.freed.notify_waiters();
                    return;
                }
            }
            Kind::Transient => {}
        }
        self.close_in_background(conn);
    }
}
