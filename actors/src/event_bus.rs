//! The EventBus actor: change events (list changes, resource updates) to whoever listens.
//!
//! Listeners are legacy connections (all list changes, plus the resources they subscribed
//! to) and modern `subscriptions/listen` streams (only the kinds they asked for, each
//! notification tagged with the stream's subscription id, including the status of the tasks
//! whose ids it named). A listener whose sink is closed is dropped on the next event.
//!
//! The bus also counts, per resource URI, the listeners that want its updates, and tells
//! [`SubscriptionWatcher`]s when a URI gains its first listener or loses its last: a server
//! that only relays a resource (the gateway) subscribes upstream on demand from that.

use crate::audience::Reach;
use crate::sink::Sink;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use toolyard_proto::jsonrpc;

/// A change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The tool list changed.
    ToolsChanged,
    /// The prompt list changed.
    PromptsChanged,
    /// The resource (or template) list changed.
    ResourcesChanged,
    /// One resource's content changed.
    ResourceUpdated(String),
}

/// Told `(uri, true)` when a resource gains its first listener and `(uri, false)` when it
/// loses its last. Called inside the bus actor: it must return at once (spawn the work).
pub type SubscriptionWatcher = Arc<dyn Fn(&str, bool) + Send + Sync>;

/// Told every event published in this process (not those relayed from elsewhere with
/// `Server::publish_relayed`), with whom it concerns: how a cluster bus carries events to
/// other processes without echoing them back. Called inside the bus actor: it must return
/// at once.
pub type EventTap = Arc<dyn Fn(&Event, &Reach) + Send + Sync>;

/// Identifies a listener.
pub(crate) type ListenerId = u64;

static NEXT_LISTENER: AtomicU64 = AtomicU64::new(1);

/// A fresh listener id.
pub(crate) fn next_listener_id() -> ListenerId {
    NEXT_LISTENER.fetch_add(1, Ordering::Relaxed)
}

/// What a listener wants.
#[derive(Debug, Clone, Default)]
pub(crate) struct Filter {
    /// `notifications/tools/list_changed`.
    pub tools: bool,
    /// `notifications/prompts/list_changed`.
    pub prompts: bool,
    /// `notifications/resources/list_changed`.
    pub resources: bool,
    /// `notifications/resources/updated` for these URIs.
    pub resource_uris: HashSet<String>,
    /// `notifications/tasks` for these task ids (tasks extension).
    pub task_ids: HashSet<String>,
}

/// Decides, for one listener, whether a resource update still reaches it (a subscription
/// its provider checked is checked again at delivery: what it resolves to may have changed
/// since, e.g. a missing file replaced by a symlink leading out of the client's roots).
/// Gets the URI and the notification's bytes, and sends them itself if the check passes.
/// Called inside the bus actor: it must return at once (spawn the check).
pub(crate) type UpdateGate = Arc<dyn Fn(&str, Vec<u8>) + Send + Sync>;

/// A listener.
#[derive(Clone)]
pub(crate) struct Listener {
    /// Where notifications go.
    pub sink: Sink,
    /// What it wants.
    pub filter: Filter,
    /// Modern: the subscription id to tag notifications with.
    pub subscription_id: Option<String>,
    /// Whose tasks it hears of (modern: its principal; legacy: none, the session's tasks).
    pub owner: Option<Arc<str>>,
    /// The authenticated principal of the listener: it hears of list changes that concern
    /// it alone ([`Reach`]).
    pub principal: Option<Arc<str>>,
    /// Resource updates go through this instead of straight to `sink` (legacy connections).
    pub update_gate: Option<UpdateGate>,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("filter", &self.filter)
            .field("subscription_id", &self.subscription_id)
            .finish_non_exhaustive()
    }
}

/// A task's new state, for the listeners that named its id.
#[derive(Debug)]
pub(crate) struct TaskNotice {
    /// The task.
    pub task_id: String,
    /// Who the task belongs to (a listener of another principal does not hear of it).
    pub owner: Option<String>,
    /// The `notifications/tasks` params: the task's `DetailedTask`.
    pub params: serde_json::Map<String, serde_json::Value>,
}

/// Messages of the EventBus.
#[derive(Debug)]
pub(crate) enum BusMsg {
    /// Deliver an event raised in this process (taps hear it), to those it reaches.
    Publish(Event, Reach),
    /// Deliver an event relayed from another process (taps do not hear it).
    PublishRelayed(Event, Reach),
    /// Add a tap.
    Tap(Tap),
    /// Add a listener.
    Listen(ListenerId, Listener),
    /// Remove a listener.
    Unlisten(ListenerId),
    /// A legacy listener subscribes to one resource.
    Subscribe(ListenerId, String),
    /// A legacy listener unsubscribes from one resource.
    Unsubscribe(ListenerId, String),
    /// A task changed state (tasks extension).
    TaskStatus(Box<TaskNotice>),
    /// Add a watcher of resource interest.
    Watch(Watcher),
}

/// An [`EventTap`] in a message.
pub(crate) struct Tap(pub(crate) EventTap);

impl std::fmt::Debug for Tap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tap")
    }
}

/// A [`SubscriptionWatcher`] in a message.
pub(crate) struct Watcher(pub(crate) SubscriptionWatcher);

impl std::fmt::Debug for Watcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Watcher")
    }
}

pub(crate) struct EventBus;

#[derive(Default)]
pub(crate) struct BusState {
    listeners: HashMap<ListenerId, Listener>,
    /// Listeners per resource URI (only URIs with at least one).
    interest: HashMap<String, usize>,
    watchers: Vec<SubscriptionWatcher>,
    taps: Vec<EventTap>,
}

impl BusState {
    /// Sends `event` to every listener that wants it: a list change only to those it
    /// reaches.
    fn deliver(&mut self, event: &Event, reach: &Reach) {
        self.drop_closed();
        for l in self.listeners.values() {
            let told = || reach.admits(l.principal.as_deref());
            let (wanted, method, uri) = match event {
                Event::ToolsChanged => (
                    l.filter.tools && told(),
                    "notifications/tools/list_changed",
                    None,
                ),
                Event::PromptsChanged => (
                    l.filter.prompts && told(),
                    "notifications/prompts/list_changed",
                    None,
                ),
                Event::ResourcesChanged => (
                    l.filter.resources && told(),
                    "notifications/resources/list_changed",
                    None,
                ),
                Event::ResourceUpdated(uri) => (
                    l.filter.resource_uris.contains(uri),
                    "notifications/resources/updated",
                    Some(uri.as_str()),
                ),
            };
            if wanted {
                let bytes = notification(method, uri, l.subscription_id.as_deref());
                match (uri, &l.update_gate) {
                    (Some(uri), Some(gate)) => gate(uri, bytes),
                    _ => {
                        l.sink.send(bytes);
                    }
                }
            }
        }
    }

    fn gained(&mut self, uri: &str) {
        let count = self.interest.entry(uri.to_owned()).or_default();
        *count += 1;
        if *count == 1 {
            for w in &self.watchers {
                w(uri, true);
            }
        }
    }

    fn lost(&mut self, uri: &str) {
        let Some(count) = self.interest.get_mut(uri) else {
            return;
        };
        *count -= 1;
        if *count == 0 {
            self.interest.remove(uri);
            for w in &self.watchers {
                w(uri, false);
            }
        }
    }

    /// Drops the listeners whose sink closed, with their interest.
    fn drop_closed(&mut self) {
        // Allocates only when a listener did close.
        let mut lost = Vec::new();
        self.listeners.retain(|_, l| {
            if l.sink.is_closed() {
                lost.extend(l.filter.resource_uris.drain());
                false
            } else {
                true
            }
        });
        for uri in lost {
            self.lost(&uri);
        }
    }

    fn remove(&mut self, id: ListenerId) {
        if let Some(l) = self.listeners.remove(&id) {
            for uri in &l.filter.resource_uris {
                self.lost(uri);
            }
        }
    }
}

fn notification(method: &str, uri: Option<&str>, subscription_id: Option<&str>) -> Vec<u8> {
    let mut params = serde_json::Map::new();
    if let Some(uri) = uri {
        params.insert("uri".into(), uri.into());
    }
    if let Some(id) = subscription_id {
        params.insert(
            "_meta".into(),
            serde_json::json!({ toolyard_proto::meta::SUBSCRIPTION_ID: id }),
        );
    }
    jsonrpc::notification_bytes(method, &params).unwrap_or_default()
}

impl Actor for EventBus {
    type Msg = BusMsg;
    type State = BusState;
    type Arguments = ();

    async fn pre_start(
        &self,
        _myself: ActorRef<BusMsg>,
        _args: (),
    ) -> Result<BusState, ActorProcessingErr> {
        Ok(BusState::default())
    }

    async fn handle(
        &self,
        _myself: ActorRef<BusMsg>,
        msg: BusMsg,
        state: &mut BusState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            BusMsg::Listen(id, l) => {
                state.remove(id);
                for uri in &l.filter.resource_uris {
                    state.gained(uri);
                }
                state.listeners.insert(id, l);
            }
            BusMsg::Unlisten(id) => state.remove(id),
            BusMsg::Subscribe(id, uri) => {
                let added = state
                    .listeners
                    .get_mut(&id)
                    .is_some_and(|l| l.filter.resource_uris.insert(uri.clone()));
                if added {
                    state.gained(&uri);
                }
            }
            BusMsg::Unsubscribe(id, uri) => {
                let removed = state
                    .listeners
                    .get_mut(&id)
                    .is_some_and(|l| l.filter.resource_uris.remove(&uri));
                if removed {
                    state.lost(&uri);
                }
            }
            BusMsg::Watch(Watcher(watcher)) => {
                for uri in state.interest.keys() {
                    watcher(uri, true);
                }
                state.watchers.push(watcher);
            }
            BusMsg::TaskStatus(notice) => {
                state.drop_closed();
                for l in state.listeners.values() {
                    if !l.filter.task_ids.contains(&notice.task_id)
                        || l.owner.as_deref() != notice.owner.as_deref()
                    {
                        continue;
                    }
                    let mut params = notice.params.clone();
                    if let Some(id) = &l.subscription_id {
                        let meta = params
                            .entry("_meta")
                            .or_insert_with(|| serde_json::Value::Object(Default::default()));
                        if let serde_json::Value::Object(m) = meta {
                            m.insert(
                                toolyard_proto::meta::SUBSCRIPTION_ID.into(),
                                id.clone().into(),
                            );
                        }
                    }
                    if let Ok(b) = jsonrpc::notification_bytes(
                        toolyard_proto::method::NOTIFICATIONS_TASKS,
                        &params,
                    ) {
                        l.sink.send(b);
                    }
                }
            }
            BusMsg::Tap(Tap(tap)) => state.taps.push(tap),
            BusMsg::Publish(event, reach) => {
                for tap in &state.taps {
                    tap(&event, &reach);
                }
                state.deliver(&event, &reach);
            }
            BusMsg::PublishRelayed(event, reach) => state.deliver(&event, &reach),
        }
        Ok(())
    }
}

#[cfg(test)]
mod interest_tests {
    use super::*;
    use std::sync::Mutex;

    #[test]
    fn watchers_hear_of_a_uris_first_listener_and_its_last_only() {
        let heard = Arc::new(Mutex::new(Vec::new()));
        let mut state = BusState::default();
        let h = heard.clone();
        state.watchers.push(Arc::new(move |uri: &str, on: bool| {
            h.lock().unwrap().push((uri.to_owned(), on));
        }));
        state.gained("a");
        state.gained("a");
        state.gained("b");
        state.lost("a");
        state.lost("b");
        state.lost("a");
        // A loss nobody gained is ignored.
        state.lost("c");
        assert_eq!(
            *heard.lock().unwrap(),
            vec![
                ("a".to_owned(), true),
                ("b".to_owned(), true),
                ("b".to_owned(), false),
                ("a".to_owned(), false),
            ]
        );
        assert!(state.interest.is_empty());
    }
}
