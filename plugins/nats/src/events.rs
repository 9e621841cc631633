//! The cluster event bus: the change events raised in one process (`tools`, `prompts` and
//! `resources` `list_changed`, a resource's `updated`) reach the subscribers of every
//! gateway, legacy `resources/subscribe` and modern `subscriptions/listen` alike.
//!
//! Each gateway and worker publishes the events its own server raises on `{prefix}.events`
//! (core NATS: an event nobody hears is worth nothing later, so no stream) with its origin in
//! `Mcp-Origin`, and re-raises the others' events in its own server with
//! [`Server::publish_relayed`], which does not tell the taps: an event crosses the bus once
//! and never echoes. Publishing never blocks the server's event bus: events go through a
//! bounded channel to a publisher task, and an event that does not fit is dropped and counted
//! (a list-changed notification is advisory; a later one says the same).

use crate::NatsError;
use async_nats::HeaderMap;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use toolyard::{Event, Server};

/// `Mcp-Origin`: the process an event was raised in.
pub const ORIGIN: &str = "Mcp-Origin";

/// Events waiting to be published; more are dropped.
const QUEUE: usize = 1024;

/// The subject events travel on.
pub fn events_subject(prefix: &str) -> String {
    format!("{prefix}.events")
}

/// An event on the wire: `{"event": "tools/list_changed"}` or
/// `{"event": "resources/updated", "uri": "..."}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireEvent {
    /// `tools/list_changed`, `prompts/list_changed`, `resources/list_changed` or
    /// `resources/updated`.
    pub event: String,
    /// The resource, for `resources/updated`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
}

impl WireEvent {
    fn of(event: &Event) -> WireEvent {
        let (name, uri) = match event {
            Event::ToolsChanged => ("tools/list_changed", None),
            Event::PromptsChanged => ("prompts/list_changed", None),
            Event::ResourcesChanged => ("resources/list_changed", None),
            Event::ResourceUpdated(uri) => ("resources/updated", Some(uri.clone())),
        };
        WireEvent {
            event: name.to_owned(),
            uri,
        }
    }

    fn to_event(&self) -> Option<Event> {
        Some(match (self.event.as_str(), &self.uri) {
            ("tools/list_changed", _) => Event::ToolsChanged,
            ("prompts/list_changed", _) => Event::PromptsChanged,
            ("resources/list_changed", _) => Event::ResourcesChanged,
            ("resources/updated", Some(uri)) => Event::ResourceUpdated(uri.clone()),
            _ => return None,
        })
    }
}

/// A running relay: stop it with [`shutdown`](Self::shutdown) (or drop it).
#[derive(Debug)]
pub struct EventRelay {
    origin: String,
    tasks: Vec<JoinHandle<()>>,
    dropped: Arc<AtomicU64>,
}

impl EventRelay {
    /// Relays `server`'s events to and from every other process on `client` under `prefix`.
    pub async fn start(
        server: Server,
        client: async_nats::Client,
        prefix: &str,
    ) -> Result<EventRelay, NatsError> {
        let subject = events_subject(prefix);
        // A NUID: unique across processes without coordination.
        let origin = nuid::next().to_string();
        let mut incoming = client
            .subscribe(subject.clone())
            .await
            .map_err(|e| NatsError::Bus(format!("subscribing to {subject}: {e}")))?;
        let dropped = Arc::new(AtomicU64::new(0));
        let (tx, mut rx) = mpsc::channel::<Event>(QUEUE);
        let lost = dropped.clone();
        server.tap_events(Arc::new(move |event: &Event| {
            if tx.try_send(event.clone()).is_err() {
                lost.fetch_add(1, Ordering::Relaxed);
            }
        }));
        let publisher = {
            let client = client.clone();
            let origin = origin.clone();
            let subject = subject.clone();
            tokio::spawn(async move {
                while let Some(event) = rx.recv().await {
                    let mut headers = HeaderMap::new();
                    headers.insert(ORIGIN, origin.as_str());
                    let Ok(body) = serde_json::to_vec(&WireEvent::of(&event)) else {
                        continue;
                    };
                    if let Err(e) = client
                        .publish_with_headers(subject.clone(), headers, body.into())
                        .await
                    {
                        tracing::warn!(target: "toolyard::nats", error = %e, "could not publish a change event");
                    }
                }
            })
        };
        let listener = {
            let origin = origin.clone();
            tokio::spawn(async move {
                while let Some(message) = incoming.next().await {
                    let from = message
                        .headers
                        .as_ref()
                        .and_then(|h| h.get(ORIGIN))
                        .map(|v| v.as_str().to_owned());
                    if from.as_deref() == Some(origin.as_str()) {
                        continue;
                    }
                    match serde_json::from_slice::<WireEvent>(&message.payload)
                        .ok()
                        .and_then(|w| w.to_event())
                    {
                        Some(event) => server.publish_relayed(event),
                        None => tracing::warn!(
                            target: "toolyard::nats",
                            subject = %message.subject,
                            "dropped a change event that is not one (expected {{\"event\": ...}})"
                        ),
                    }
                }
            })
        };
        Ok(EventRelay {
            origin,
            tasks: vec![publisher, listener],
            dropped,
        })
    }

    /// This process's origin id (the `Mcp-Origin` of what it publishes).
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// Events dropped because the publisher fell more than 1024 behind.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Stops relaying.
    pub fn shutdown(mut self) {
        for t in self.tasks.drain(..) {
            t.abort();
        }
    }
}

impl Drop for EventRelay {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_round_trip_through_the_wire_form() {
        for e in [
            Event::ToolsChanged,
            Event::PromptsChanged,
            Event::ResourcesChanged,
            Event::ResourceUpdated("file:///a".into()),
        ] {
            let w = WireEvent::of(&e);
            let back: WireEvent = serde_json::from_slice(&serde_json::to_vec(&w).unwrap()).unwrap();
            assert_eq!(format!("{:?}", back.to_event().unwrap()), format!("{e:?}"));
        }
        let bad: WireEvent = serde_json::from_str(r#"{"event":"resources/updated"}"#).unwrap();
        assert!(bad.to_event().is_none(), "updated without a uri is refused");
        assert_eq!(events_subject(crate::wire::DEFAULT_PREFIX), "mcp.v1.events");
    }
}
