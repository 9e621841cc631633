//! Lifecycle events for embedders: a typed stream an embedding backend subscribes to
//! (the server started or is stopping, a tool was invoked with its outcome and duration, a
//! component such as a gateway source or a NATS worker came up or went down), and the
//! readiness those events add up to (`/readyz` reports it).
//!
//! Events are broadcast: a subscriber that falls more than 1024 events behind loses
//! the oldest (its next `recv` says how many), and publishing never waits. Tool events cost
//! a layer, so they are opt-in ([`Lifecycle::tool_events`]); the others are rare.

use crate::middleware::{Layer, Observe, Outcome, RequestInfo};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::broadcast;
use toolyard_proto::ErrorObject;

/// How many events a slow subscriber may fall behind before it loses the oldest.
pub(crate) const CAPACITY: usize = 1024;

/// Something that happened to a server.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum LifecycleEvent {
    /// The server's actors are running.
    Started {
        /// `serverInfo.name`.
        name: String,
    },
    /// The server is shutting down.
    Stopping,
    /// A `tools/call` ended (with [`Lifecycle::tool_events`] installed).
    ToolInvoked {
        /// The tool's name as called.
        tool: String,
        /// How it ended.
        outcome: Outcome,
        /// From acceptance to the answer.
        duration: Duration,
    },
    /// A component the server depends on is available.
    ComponentUp {
        /// What kind: `source` (a gateway source), `worker` (NATS workers of one name), ...
        kind: &'static str,
        /// Its name.
        name: String,
    },
    /// A component the server depends on is not available.
    ComponentDown {
        /// What kind (see [`LifecycleEvent::ComponentUp`]).
        kind: &'static str,
        /// Its name.
        name: String,
        /// Why, in a few words (no secrets).
        reason: String,
        /// The server is not ready while a required component is down.
        required: bool,
    },
}

/// The readiness the events add up to.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Readiness {
    /// Started, not stopping, and no required component down.
    pub ready: bool,
    /// Components down now: `(kind, name, reason, required)`.
    pub down: Vec<(String, String, String, bool)>,
}

/// Components down now: `(kind, name)` → `(reason, required)`.
type DownTable = BTreeMap<(&'static str, String), (String, bool)>;

/// A server's lifecycle: publish, subscribe, readiness.
#[derive(Debug)]
pub struct Lifecycle {
    events: broadcast::Sender<LifecycleEvent>,
    started: AtomicBool,
    stopping: AtomicBool,
    down: Mutex<DownTable>,
}

impl Default for Lifecycle {
    fn default() -> Self {
        Lifecycle {
            events: broadcast::channel(CAPACITY).0,
            started: AtomicBool::new(false),
            stopping: AtomicBool::new(false),
            down: Mutex::default(),
        }
    }
}

impl Lifecycle {
    /// A receiver of every event published from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<LifecycleEvent> {
        self.events.subscribe()
    }

    /// Publishes an event (and updates readiness). Never waits.
    pub fn publish(&self, event: LifecycleEvent) {
        match &event {
            LifecycleEvent::Started { .. } => self.started.store(true, Ordering::Release),
            LifecycleEvent::Stopping => self.stopping.store(true, Ordering::Release),
            LifecycleEvent::ComponentUp { kind, name } => {
                self.down_table().remove(&(*kind, name.clone()));
            }
            LifecycleEvent::ComponentDown {
                kind,
                name,
                reason,
                required,
            } => {
                self.down_table()
                    .insert((*kind, name.clone()), (reason.clone(), *required));
            }
            LifecycleEvent::ToolInvoked { .. } => {}
        }
        let _ = self.events.send(event);
    }

    fn down_table(&self) -> std::sync::MutexGuard<'_, DownTable> {
        self.down.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Started, not stopping, no required component down; and what is down.
    pub fn readiness(&self) -> Readiness {
        let down: Vec<_> = self
            .down_table()
            .iter()
            .map(|((kind, name), (reason, required))| {
                ((*kind).to_owned(), name.clone(), reason.clone(), *required)
            })
            .collect();
        Readiness {
            ready: self.started.load(Ordering::Acquire)
                && !self.stopping.load(Ordering::Acquire)
                && !down.iter().any(|d| d.3),
            down,
        }
    }

    /// A layer that publishes [`LifecycleEvent::ToolInvoked`] for every `tools/call`.
    pub fn tool_events(self: &Arc<Self>) -> Arc<dyn Layer> {
        Arc::new(ToolEvents(self.clone()))
    }
}

struct ToolEvents(Arc<Lifecycle>);

impl Layer for ToolEvents {
    fn observes(&self, method: &str) -> bool {
        method == toolyard_proto::method::TOOLS_CALL
    }

    fn start(&self, _info: &RequestInfo) -> Result<Observe, ErrorObject> {
        Ok(Observe::Outcome)
    }

    fn finish(&self, info: &RequestInfo, outcome: &Outcome) {
        self.0.publish(LifecycleEvent::ToolInvoked {
            tool: info.target.as_deref().unwrap_or_default().to_owned(),
            outcome: outcome.clone(),
            duration: info.started.elapsed(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_follows_start_stop_and_required_components() {
        let l = Lifecycle::default();
        assert!(!l.readiness().ready, "not ready before it started");
        l.publish(LifecycleEvent::Started { name: "s".into() });
        assert!(l.readiness().ready);
        l.publish(LifecycleEvent::ComponentDown {
            kind: "source",
            name: "a".into(),
            reason: "exited".into(),
            required: false,
        });
        assert!(
            l.readiness().ready,
            "an optional component down keeps it ready"
        );
        assert_eq!(l.readiness().down.len(), 1);
        l.publish(LifecycleEvent::ComponentDown {
            kind: "worker",
            name: "calc".into(),
            reason: "no instance".into(),
            required: true,
        });
        assert!(!l.readiness().ready);
        l.publish(LifecycleEvent::ComponentUp {
            kind: "worker",
            name: "calc".into(),
        });
        assert!(l.readiness().ready);
        l.publish(LifecycleEvent::Stopping);
        assert!(!l.readiness().ready);
    }
}
