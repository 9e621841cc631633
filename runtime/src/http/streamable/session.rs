//! Legacy (session-based) Streamable HTTP sessions: the session table, each session's sink,
//! and the replay buffers that let a client resume a broken stream with `Last-Event-ID`.

use crate::http::HttpState;
use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use toolyard_actors::transport::{ConnectionHandle, MessageSink};

/// A sink that drops everything: the shared sessionless connection answers every request
/// on the request's own stream, never on the connection's.
pub(crate) struct NullSink;

impl MessageSink for NullSink {
    fn send(&self, _message: Vec<u8>) -> bool {
        true
    }
    fn is_closed(&self) -> bool {
        false
    }
}

/// A legacy session's connection-level sink: the standalone GET stream, when one is open.
#[derive(Default)]
pub(crate) struct SessionSink {
    slot: Mutex<Option<mpsc::UnboundedSender<Vec<u8>>>>,
    closed: std::sync::atomic::AtomicBool,
}

impl SessionSink {
    pub(super) fn attach(&self, tx: mpsc::UnboundedSender<Vec<u8>>) {
        *self.slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(tx);
    }
}

/// The [`MessageSink`] face of a shared [`SessionSink`].
pub(crate) struct SharedSessionSink(pub(crate) Arc<SessionSink>);

impl MessageSink for SharedSessionSink {
    fn send(&self, message: Vec<u8>) -> bool {
        if let Some(tx) = &*self.0.slot.lock().unwrap_or_else(|p| p.into_inner()) {
            let _ = tx.send(message);
        }
        true
    }
    fn is_closed(&self) -> bool {
        self.0.closed.load(Ordering::Relaxed)
    }
}

/// Events kept per response stream for `Last-Event-ID` resumption.
const REPLAY_EVENTS: usize = 256;
/// Response streams remembered per session.
const REPLAY_STREAMS: usize = 32;
/// The `retry` a priming event asks clients to wait before reconnecting (SEP-1699).
pub(super) const RETRY: Duration = Duration::from_millis(1000);

/// One replayable event: its sequence number in its stream and its JSON text.
type ReplayEvent = (u64, Arc<str>);
/// What a stream attaching to a replay gets: the backlog, then live events (none if done).
pub(super) type Attached = (
    Vec<ReplayEvent>,
    Option<mpsc::UnboundedReceiver<ReplayEvent>>,
);
/// A session's response streams, by id, oldest first, with the next id.
type StreamTable = (u64, std::collections::VecDeque<(u64, Arc<Mutex<Replay>>)>);

/// The events of one response stream of a legacy session, replayable after a disconnect.
#[derive(Default)]
pub(crate) struct Replay {
    events: std::collections::VecDeque<ReplayEvent>,
    next_seq: u64,
    pub(super) live: Option<mpsc::UnboundedSender<ReplayEvent>>,
    pub(super) done: bool,
}

impl Replay {
    /// Records an event and forwards it to the attached stream, if any.
    pub(super) fn push(&mut self, data: Arc<str>) {
        self.next_seq += 1;
        let seq = self.next_seq;
        if self.events.len() == REPLAY_EVENTS {
            self.events.pop_front();
        }
        self.events.push_back((seq, data.clone()));
        if let Some(tx) = &self.live {
            if tx.send((seq, data)).is_err() {
                self.live = None;
            }
        }
    }

    /// Attaches a stream: what it missed after `after`, then live events.
    pub(super) fn attach(&mut self, after: u64) -> Attached {
        let backlog = self
            .events
            .iter()
            .filter(|(seq, _)| *seq > after)
            .cloned()
            .collect();
        if self.done {
            return (backlog, None);
        }
        let (tx, rx) = mpsc::unbounded_channel();
        self.live = Some(tx);
        (backlog, Some(rx))
    }
}

/// One legacy session.
pub(crate) struct Session {
    pub(crate) handle: ConnectionHandle,
    /// Who opened the session; requests by anyone else are answered as if it did not exist.
    pub(crate) principal: Option<Arc<str>>,
    pub(super) sink: Arc<SessionSink>,
    last_seen: Mutex<Instant>,
    streams: Mutex<StreamTable>,
}

impl Session {
    pub(crate) fn new(
        handle: ConnectionHandle,
        sink: Arc<SessionSink>,
        principal: Option<Arc<str>>,
    ) -> Self {
        Session {
            handle,
            principal,
            sink,
            last_seen: Mutex::new(Instant::now()),
            streams: Mutex::new((0, Default::default())),
        }
    }
    pub(super) fn open_stream(&self) -> (u64, Arc<Mutex<Replay>>) {
        let mut guard = self.streams.lock().unwrap_or_else(|p| p.into_inner());
        let (next, streams) = &mut *guard;
        *next += 1;
        if streams.len() == REPLAY_STREAMS {
            streams.pop_front();
        }
        let replay = Arc::new(Mutex::new(Replay::default()));
        streams.push_back((*next, replay.clone()));
        (*next, replay)
    }
    pub(super) fn stream(&self, id: u64) -> Option<Arc<Mutex<Replay>>> {
        let guard = self.streams.lock().unwrap_or_else(|p| p.into_inner());
        guard
            .1
            .iter()
            .find(|(i, _)| *i == id)
            .map(|(_, r)| r.clone())
    }
    pub(super) fn touch(&self) {
        *self.last_seen.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
    }
    pub(super) fn close(&self) {
        self.sink.closed.store(true, Ordering::Relaxed);
        self.handle.close();
    }
}

/// Live legacy sessions by id.
#[derive(Default)]
pub(crate) struct Sessions(Mutex<HashMap<String, Arc<Session>>>);

impl Sessions {
    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Session>>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
    /// The session `id`, if it exists and belongs to `principal` (a session is bound to
    /// the caller that opened it, so a stolen session id is useless to anyone else).
    pub(crate) fn get(&self, id: &str, principal: &Option<Arc<str>>) -> Option<Arc<Session>> {
        self.table()
            .get(id)
            .filter(|s| &s.principal == principal)
            .cloned()
    }
    pub(crate) fn insert(&self, id: String, s: Arc<Session>) {
        self.table().insert(id, s);
    }
    pub(crate) fn remove(&self, id: &str) -> Option<Arc<Session>> {
        self.table().remove(id)
    }

    /// Removes the session `id` if it belongs to `principal`.
    pub(crate) fn remove_for(
        &self,
        id: &str,
        principal: &Option<Arc<str>>,
    ) -> Option<Arc<Session>> {
        let mut table = self.table();
        if table.get(id).is_some_and(|s| &s.principal == principal) {
            table.remove(id)
        } else {
            None
        }
    }
    pub(crate) fn len(&self) -> usize {
        self.table().len()
    }
}

pub(crate) fn new_session_id() -> String {
    let bytes: [u8; 16] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Closes idle sessions.
pub(crate) fn spawn_reaper(state: &Arc<HttpState>) {
    let weak = Arc::downgrade(state);
    let every = (state.config.session_idle_timeout / 4).max(Duration::from_secs(1));
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            let Some(state) = weak.upgrade() else { return };
            let limit = state.config.session_idle_timeout;
            let expired: Vec<String> = state
                .sessions
                .table()
                .iter()
                .filter(|(_, s)| {
                    s.last_seen
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .elapsed()
                        > limit
                        || !s.handle.is_alive()
                })
                .map(|(k, _)| k.clone())
                .collect();
            for id in expired {
                if let Some(s) = state.sessions.remove(&id) {
                    tracing::debug!(session = %id, "idle session expired");
                    s.close();
                }
            }
        }
    });
}
