//! The cluster event bus: the change events raised in one process (`tools`, `prompts` and
//! `resources` `list_changed`, a resource's `updated`) reach the subscribers of every
//! gateway, legacy `resources/subscribe` and modern `subscriptions/listen` alike.
//!
//! Each gateway and worker publishes the events its own server raises on `{prefix}.events`
//! (core NATS: an event nobody hears is worth nothing later, so no stream) with its origin in
//! `Mcp-Origin`, and re-raises the others' events in its own server with
//! [`Server::publish_relayed`], which does not tell the taps: an event crosses the bus once
//! and never echoes.
//!
//! Both ways are paced (see [`PACE`]): every event says only "this changed, look again", so
//! those that come while one was just passed on are gathered, one per kind and per resource,
//! and passed on together a pace later. A flood (a catalog that flaps, a backend publishing
//! a resource's updates thousands of times a second, anyone with publish rights on the
//! subject) then costs each subscriber a few notifications a second, never an unbounded
//! queue in front of a slow client, and the last word always gets through. Publishing never
//! blocks the server's event bus.

use crate::doubling::Doubling;
use crate::principal_token;
use crate::NatsError;
use async_nats::HeaderMap;
use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use toolyard::{Audience, Event, Reach, Server};

/// `Mcp-Origin`: the process an event was raised in.
pub const ORIGIN: &str = "Mcp-Origin";

/// The least time between two passes of a relay's gathered events, each way: an event that
/// comes after a quiet pace goes on at once, the rest wait for the pace to end.
pub const PACE: Duration = Duration::from_millis(100);

/// The bytes of resource URIs whose updates may wait at once, each way; an update for one
/// more resource is dropped and counted (kinds' list changes always fit: one flag each).
const MAX_WAITING_URI_BYTES: usize = 1 << 20;

/// The subject events travel on.
pub fn events_subject(prefix: &str) -> String {
    format!("{prefix}.events")
}

/// An event on the wire: `{"event": "tools/list_changed"}` or
/// `{"event": "resources/updated", "uri": "..."}`; a list change that concerns some users
/// alone names them by their principals' tokens, `"forUsers": ["p…", …]`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireEvent {
    /// `tools/list_changed`, `prompts/list_changed`, `resources/list_changed` or
    /// `resources/updated`.
    pub event: String,
    /// The resource, for `resources/updated`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
    /// The [`principal_token`](crate::principal_token)s of the only callers a list change
    /// concerns (its changed items are for them alone); absent: everyone.
    #[serde(default, rename = "forUsers", skip_serializing_if = "Option::is_none")]
    pub for_users: Option<Vec<String>>,
}

impl WireEvent {
    /// `event` on the wire for those `reach` reaches; `None` when they cannot be told (an
    /// audience that is a predicate: the gateways that serve such items raise their own
    /// list changes as they install them, from the catalog).
    fn of(event: &Event, reach: &Reach) -> Option<WireEvent> {
        let for_users = if reach.is_everyone() || matches!(event, Event::ResourceUpdated(_)) {
            None
        } else {
            Some(reach.listed()?.iter().map(|p| principal_token(p)).collect())
        };
        let (name, uri) = match event {
            Event::ToolsChanged => ("tools/list_changed", None),
            Event::PromptsChanged => ("prompts/list_changed", None),
            Event::ResourcesChanged => ("resources/list_changed", None),
            Event::ResourceUpdated(uri) => ("resources/updated", Some(uri.clone())),
        };
        Some(WireEvent {
            event: name.to_owned(),
            uri,
            for_users,
        })
    }

    /// The event, and whom it concerns here: the callers whose principal's token it names.
    fn to_event(&self) -> Option<(Event, Reach)> {
        let event = match (self.event.as_str(), &self.uri) {
            ("tools/list_changed", _) => Event::ToolsChanged,
            ("prompts/list_changed", _) => Event::PromptsChanged,
            ("resources/list_changed", _) => Event::ResourcesChanged,
            ("resources/updated", Some(uri)) => Event::ResourceUpdated(uri.clone()),
            _ => return None,
        };
        let reach = match &self.for_users {
            None => Reach::everyone(),
            Some(tokens) => {
                let tokens: HashSet<String> = tokens.iter().cloned().collect();
                Reach::only(Audience::when(move |principal| {
                    tokens.contains(&principal_token(principal))
                }))
            }
        };
        Some((event, reach))
    }
}

/// The events gathered since the last pass: each kind and each resource once.
#[derive(Debug, Default)]
struct Gathered {
    /// A kind's list changed, for whom (widened by each change gathered).
    tools: Option<Reach>,
    prompts: Option<Reach>,
    resources: Option<Reach>,
    /// Updated resources, first come first passed on.
    uris: Vec<String>,
    uri_set: HashSet<String>,
    uri_bytes: usize,
}

impl Gathered {
    /// Takes `event` in; false when it had to be dropped (too many resources waiting).
    fn add(&mut self, event: Event, reach: Reach) -> bool {
        let kind = match event {
            Event::ToolsChanged => &mut self.tools,
            Event::PromptsChanged => &mut self.prompts,
            Event::ResourcesChanged => &mut self.resources,
            Event::ResourceUpdated(uri) => {
                if self.uri_set.contains(&uri) {
                    return true;
                }
                if self.uri_bytes + uri.len() > MAX_WAITING_URI_BYTES {
                    return false;
                }
                self.uri_bytes += uri.len();
                self.uri_set.insert(uri.clone());
                self.uris.push(uri);
                return true;
            }
        };
        match kind {
            Some(gathered) => gathered.widen(reach),
            None => *kind = Some(reach),
        }
        true
    }

    /// Everything gathered, emptying it, each with whom it concerns.
    fn take(&mut self) -> Vec<(Event, Reach)> {
        let taken = std::mem::take(self);
        let kinds = [
            (taken.tools, Event::ToolsChanged),
            (taken.prompts, Event::PromptsChanged),
            (taken.resources, Event::ResourcesChanged),
        ];
        kinds
            .into_iter()
            .filter_map(|(reach, event)| Some((event, reach?)))
            .chain(
                taken
                    .uris
                    .into_iter()
                    .map(|uri| (Event::ResourceUpdated(uri), Reach::everyone())),
            )
            .collect()
    }
}

/// One direction of a relay: events go in from anywhere at once, and one task passes them on
/// at most once a [`PACE`].
#[derive(Debug, Default)]
struct Paced {
    gathered: Mutex<Gathered>,
    wake: Notify,
    dropped: Doubling,
}

impl Paced {
    /// Never waits (the server's event bus actor calls it).
    fn add(&self, event: Event, reach: Reach) {
        let fits = self
            .gathered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .add(event, reach);
        if fits {
            self.wake.notify_one();
        } else if let Some(dropped) = self.dropped.count() {
            tracing::warn!(
                target: "toolyard::nats",
                dropped,
                "dropped a resource update: updates for over 1 MiB of resource URIs wait to be relayed"
            );
        }
    }

    fn take(&self) -> Vec<(Event, Reach)> {
        self.gathered
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// Waits for the next events to pass on: at once when the last pass (`last`, which it
    /// updates) was a pace ago or more, else when that pace ends.
    async fn next(&self, last: &mut Option<Instant>) -> Vec<(Event, Reach)> {
        loop {
            if let Some(at) = *last {
                tokio::time::sleep_until(at + PACE).await;
            }
            let events = self.take();
            if !events.is_empty() {
                *last = Some(Instant::now());
                return events;
            }
            *last = None;
            self.wake.notified().await;
        }
    }
}

/// A running relay: stop it with [`shutdown`](Self::shutdown) (or drop it).
#[derive(Debug)]
pub struct EventRelay {
    origin: String,
    tasks: Vec<JoinHandle<()>>,
    /// Out to the bus, in from it.
    ways: [Arc<Paced>; 2],
}

impl EventRelay {
    /// Relays `server`'s events to and from every other process on `client` under `prefix`.
    ///
    /// Give it a connection of its own, not the one a worker or [`RemoteTools`](crate::RemoteTools)
    /// serves calls on: any client may publish on the event subject, and async-nats ends a
    /// connection on a message whose header block it cannot parse (a line without a colon),
    /// which on the calls' connection ends every call in flight on it.
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
        let outgoing = Arc::new(Paced::default());
        let relayed = Arc::new(Paced::default());
        let tapped = outgoing.clone();
        server.tap_events(Arc::new(move |event: &Event, reach: &Reach| {
            tapped.add(event.clone(), reach.clone());
        }));
        let publisher = {
            let outgoing = outgoing.clone();
            let origin = origin.clone();
            tokio::spawn(async move {
                let mut last = None;
                loop {
                    for (event, reach) in outgoing.next(&mut last).await {
                        let Some(wire) = WireEvent::of(&event, &reach) else {
                            tracing::debug!(target: "toolyard::nats", ?event, "a list change for an audience that is a predicate is not relayed");
                            continue;
                        };
                        let mut headers = HeaderMap::new();
                        headers.insert(ORIGIN, origin.as_str());
                        let Ok(body) = serde_json::to_vec(&wire) else {
                            continue;
                        };
                        if let Err(e) = client
                            .publish_with_headers(subject.clone(), headers, body.into())
                            .await
                        {
                            tracing::warn!(target: "toolyard::nats", error = %e, "could not publish a change event");
                        }
                    }
                }
            })
        };
        let deliverer = {
            let relayed = relayed.clone();
            tokio::spawn(async move {
                let mut last = None;
                loop {
                    for (event, reach) in relayed.next(&mut last).await {
                        server.publish_relayed(event, reach);
                    }
                }
            })
        };
        let listener = {
            let origin = origin.clone();
            let relayed = relayed.clone();
            tokio::spawn(async move {
                let junk = Doubling::default();
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
                        Some((event, reach)) => relayed.add(event, reach),
                        None => {
                            if let Some(dropped) = junk.count() {
                                tracing::warn!(
                                    target: "toolyard::nats",
                                    subject = %message.subject,
                                    dropped,
                                    "dropped a change event that is not one (expected {{\"event\": ...}})"
                                );
                            }
                        }
                    }
                }
            })
        };
        Ok(EventRelay {
            origin,
            tasks: vec![publisher, deliverer, listener],
            ways: [outgoing, relayed],
        })
    }

    /// This process's origin id (the `Mcp-Origin` of what it publishes).
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// Resource updates dropped, either way, because updates for over 1 MiB of resource URIs
    /// were already waiting for the [`PACE`] to end.
    pub fn dropped(&self) -> u64 {
        self.ways.iter().map(|way| way.dropped.get()).sum()
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
    use tokio::sync::mpsc;

    /// Runs `paced`'s passes as a relay does, sending each with its time.
    fn passed_on(
        paced: &Arc<Paced>,
    ) -> (
        JoinHandle<()>,
        mpsc::UnboundedReceiver<(Instant, Vec<Event>)>,
    ) {
        let (tx, rx) = mpsc::unbounded_channel();
        let paced = paced.clone();
        let runner = tokio::spawn(async move {
            let mut last = None;
            loop {
                let events = paced.next(&mut last).await;
                let events: Vec<Event> = events.into_iter().map(|(e, _)| e).collect();
                let _ = tx.send((Instant::now(), events));
            }
        });
        (runner, rx)
    }

    /// [`passed_on`], each event on its own with the time of its pass.
    fn passed_on_one_by_one(
        paced: &Arc<Paced>,
    ) -> (JoinHandle<()>, mpsc::UnboundedReceiver<(Instant, Event)>) {
        let (runner, mut passes) = passed_on(paced);
        let (tx, rx) = mpsc::unbounded_channel();
        let flatten = tokio::spawn(async move {
            while let Some((at, events)) = passes.recv().await {
                for event in events {
                    let _ = tx.send((at, event));
                }
            }
        });
        // Aborting the runner ends `passes`, and with it the flattening task.
        drop(flatten);
        (runner, rx)
    }

    #[test]
    fn events_round_trip_through_the_wire_form() {
        for e in [
            Event::ToolsChanged,
            Event::PromptsChanged,
            Event::ResourcesChanged,
            Event::ResourceUpdated("file:///a".into()),
        ] {
            let w = WireEvent::of(&e, &Reach::everyone()).unwrap();
            let back: WireEvent = serde_json::from_slice(&serde_json::to_vec(&w).unwrap()).unwrap();
            let (event, reach) = back.to_event().unwrap();
            assert_eq!(format!("{event:?}"), format!("{e:?}"));
            assert!(reach.is_everyone());
        }
        let bad: WireEvent = serde_json::from_str(r#"{"event":"resources/updated"}"#).unwrap();
        assert!(bad.to_event().is_none(), "updated without a uri is refused");
        assert_eq!(events_subject(crate::wire::DEFAULT_PREFIX), "mcp.v1.events");
    }

    #[test]
    fn a_list_change_for_listed_principals_crosses_as_their_tokens_and_reaches_them_alone() {
        let for_alice = Reach::only(Audience::principals(["alice"]));
        let w = WireEvent::of(&Event::ToolsChanged, &for_alice).unwrap();
        assert_eq!(w.for_users, Some(vec![principal_token("alice")]));
        let text = serde_json::to_string(&w).unwrap();
        assert!(!text.contains("alice"), "no principal on the bus: {text}");
        let (event, reach) = serde_json::from_str::<WireEvent>(&text)
            .unwrap()
            .to_event()
            .unwrap();
        assert_eq!(event, Event::ToolsChanged);
        assert!(reach.admits(Some("alice")));
        assert!(!reach.admits(Some("bob")) && !reach.admits(None));

        // A predicate cannot be told: not relayed at all (never as a change for everyone).
        let mut judged = Reach::only(Audience::when(|p| p.starts_with('a')));
        assert!(WireEvent::of(&Event::PromptsChanged, &judged).is_none());
        judged.widen(for_alice.clone());
        assert!(WireEvent::of(&Event::PromptsChanged, &judged).is_none());
        // A resource's update goes to its subscribers, whoever they are.
        let updated = WireEvent::of(&Event::ResourceUpdated("file:///a".into()), &judged).unwrap();
        assert_eq!(updated.for_users, None);

        // Gathered in one pace: for alice and bob; then for everyone once any is.
        let mut g = Gathered::default();
        g.add(Event::ToolsChanged, for_alice.clone());
        g.add(
            Event::ToolsChanged,
            Reach::only(Audience::principals(["bob"])),
        );
        let taken = g.take();
        assert_eq!(taken.len(), 1);
        let w = WireEvent::of(&taken[0].0, &taken[0].1).unwrap();
        let mut tokens = vec![principal_token("alice"), principal_token("bob")];
        tokens.sort();
        assert_eq!(w.for_users, Some(tokens));
        g.add(Event::ToolsChanged, for_alice);
        g.add(Event::ToolsChanged, Reach::everyone());
        let taken = g.take();
        assert!(taken[0].1.is_everyone());
        assert_eq!(
            WireEvent::of(&taken[0].0, &taken[0].1).unwrap().for_users,
            None
        );
    }

    #[test]
    fn gathered_events_pass_on_each_kind_and_resource_once_in_order_and_stay_bounded() {
        let mut g = Gathered::default();
        for _ in 0..3 {
            assert!(g.add(
                Event::ResourceUpdated("file:///b".into()),
                Reach::everyone()
            ));
            assert!(g.add(Event::ToolsChanged, Reach::everyone()));
            assert!(g.add(
                Event::ResourceUpdated("file:///a".into()),
                Reach::everyone()
            ));
        }
        assert_eq!(
            g.take().into_iter().map(|(e, _)| e).collect::<Vec<_>>(),
            vec![
                Event::ToolsChanged,
                Event::ResourceUpdated("file:///b".into()),
                Event::ResourceUpdated("file:///a".into()),
            ]
        );
        assert!(g.take().is_empty(), "taking empties it");

        let long = "x".repeat(MAX_WAITING_URI_BYTES / 2);
        assert!(g.add(
            Event::ResourceUpdated(format!("a{long}")),
            Reach::everyone()
        ));
        assert!(
            !g.add(
                Event::ResourceUpdated(format!("bb{long}")),
                Reach::everyone()
            ),
            "over the bound"
        );
        assert!(
            g.add(
                Event::ResourceUpdated(format!("a{long}")),
                Reach::everyone()
            ),
            "already waiting"
        );
        assert!(
            g.add(Event::PromptsChanged, Reach::everyone()),
            "a kind always fits"
        );
        assert_eq!(g.take().len(), 2);
        assert!(
            g.add(
                Event::ResourceUpdated(format!("bb{long}")),
                Reach::everyone()
            ),
            "room again"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_flood_is_passed_on_once_a_pace_and_its_last_event_gets_through() {
        let paced = Arc::new(Paced::default());
        let (runner, mut rx) = passed_on_one_by_one(&paced);
        let start = Instant::now();
        paced.add(Event::ToolsChanged, Reach::everyone());
        let (at, first) = rx.recv().await.unwrap();
        assert_eq!(
            (at, first),
            (start, Event::ToolsChanged),
            "after quiet: at once"
        );

        // 10 000 events over one second of (paused) time.
        for i in 0..10_000u32 {
            paced.add(Event::ToolsChanged, Reach::everyone());
            paced.add(
                Event::ResourceUpdated(format!("file:///{}", i % 3)),
                Reach::everyone(),
            );
            if i % 100 == 99 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        paced.add(
            Event::ResourceUpdated("file:///last".into()),
            Reach::everyone(),
        );
        let mut passed = Vec::new();
        while let Ok(Some(p)) = tokio::time::timeout(PACE * 3, rx.recv()).await {
            passed.push(p);
        }
        assert_eq!(
            passed.last().map(|(_, e)| e.clone()),
            Some(Event::ResourceUpdated("file:///last".into()))
        );
        let passes: std::collections::BTreeSet<_> = passed.iter().map(|(at, _)| *at).collect();
        assert!(
            passes.len() <= 12,
            "one pass a pace over about a second: {}",
            passes.len()
        );
        for pair in passes.iter().collect::<Vec<_>>().windows(2) {
            assert!(*pair[1] - *pair[0] >= PACE, "passes a pace apart");
        }
        assert!(
            passed.len() <= passes.len() * 5,
            "each pass has each kind and resource once: {} in {} passes",
            passed.len(),
            passes.len()
        );
        assert_eq!(paced.dropped.get(), 0);
        runner.abort();
    }

    /// Generated scripts of events and pauses (a fixed seed, so a failure replays): whatever
    /// the script, each event's last raise is followed by a pass carrying it, passes are a
    /// pace apart or more, and no pass carries one kind or resource twice.
    #[tokio::test(start_paused = true)]
    async fn any_script_of_events_ends_with_each_ones_last_raise_passed_on_and_passes_a_pace_apart()
    {
        use std::collections::{BTreeMap, BTreeSet};
        let mut rng = toolyard_testkit::Xorshift(0x5eed_0e7e_a7ed_0001);
        for script in 0..200 {
            let paced = Arc::new(Paced::default());
            let (runner, mut rx) = passed_on(&paced);
            let mut last_raised = BTreeMap::new();
            for _ in 0..=rng.below(300) {
                let event = match rng.below(5) {
                    0 => Event::ToolsChanged,
                    1 => Event::PromptsChanged,
                    2 => Event::ResourcesChanged,
                    _ => Event::ResourceUpdated(format!("file:///{}", rng.below(4))),
                };
                last_raised.insert(format!("{event:?}"), Instant::now());
                paced.add(event, Reach::everyone());
                if rng.chance(30) {
                    let ms = rng.below(250) as u64;
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                }
            }
            tokio::time::sleep(PACE * 3).await;
            let mut passes = Vec::new();
            while let Ok(pass) = rx.try_recv() {
                passes.push(pass);
            }
            for (key, raised) in &last_raised {
                assert!(
                    passes.iter().any(|(at, events)| at >= raised
                        && events.iter().any(|e| format!("{e:?}") == *key)),
                    "script {script}: {key}, last raised at {raised:?}, never passed on after"
                );
            }
            for pair in passes.windows(2) {
                assert!(
                    pair[1].0 - pair[0].0 >= PACE,
                    "script {script}: passes closer than a pace"
                );
            }
            for (_, events) in &passes {
                let distinct: BTreeSet<_> = events.iter().map(|e| format!("{e:?}")).collect();
                assert_eq!(distinct.len(), events.len(), "script {script}: {events:?}");
            }
            runner.abort();
        }
    }
}
