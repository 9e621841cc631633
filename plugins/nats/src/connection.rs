//! The bus connection as the server's lifecycle sees it: a required component (`nats`/`bus`)
//! of a gateway or a worker, down while the NATS connection is (so `/readyz` says not ready),
//! and waiting for the first connection. Woken by async-nats' connection events when the
//! client is [`connect_with`](crate::connect_with)'s (`connection_events`), polled otherwise.

use async_nats::Client;
use std::time::Duration;
use toolyard::Server;

/// Waits until `client` is connected: a client made by
/// [`connect_with`](crate::connect_with) returns before its first connection, which it keeps
/// attempting (with a warning now and then) until the server is there.
pub async fn connected(client: &Client) {
    let events = crate::connection_events();
    loop {
        // Armed before the state is read: a connection from here on wakes it.
        let changed = events.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        if matches!(
            client.connection_state(),
            async_nats::connection::State::Connected
        ) {
            return;
        }
        // A client of the embedder's own reports no events: it is polled.
        let _ = tokio::time::timeout(Duration::from_millis(250), changed).await;
    }
}

/// How long after a connection event its client's state is read (`watch_connection`).
pub(crate) const EVENT_SETTLES: Duration = Duration::from_millis(20);

/// The bus connection as a required component of the server's lifecycle: a gateway whose
/// NATS connection is down cannot reach any worker, and a worker cannot be reached, so it
/// is not ready (`/readyz` 503) until the client reconnects. `lost` (a gateway's) is told
/// when the connection drops or was replaced, so the calls in flight learn of it at once (each
/// waits a moment for the connection to come back, then checks that its worker still holds it). async-nats reports connection events only to a callback set before
/// connecting: a client made by [`crate::connect`] has ours, which wakes this watch at once
/// (it then looks every 5 s only as a backstop, so an idle gateway does not wake four times a
/// second); a client of the embedder's own is polled every 250 ms.
///
/// An outage shorter than a tick (async-nats reconnects at once when the server closes the
/// connection, e.g. as a slow consumer) is seen in the client's count of connections; the
/// calls in flight hear of it just the same, since frames sent while it lasted are gone.
pub(crate) async fn watch_connection(
    server: Server,
    client: Client,
    lost: Option<crate::replies::LossSignal>,
) {
    use async_nats::connection::State as Conn;
    use std::sync::atomic::Ordering;
    let lifecycle = server.lifecycle();
    let statistics = client.statistics();
    let mut connects = statistics.connects.load(Ordering::Relaxed);
    // Unknown at first: the first look publishes what it sees.
    let mut up: Option<bool> = None;
    let every = if crate::events_wired(&client) {
        Duration::from_secs(5)
    } else {
        Duration::from_millis(250)
    };
    let mut tick = tokio::time::interval(every);
    let events = crate::connection_events();
    let mut changed = Box::pin(events.notified());
    let mut flaps = Flaps::default();
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            () = changed.as_mut() => {
                // async-nats sends the event a moment before its state says so.
                tokio::time::sleep(EVENT_SETTLES).await;
            }
        }
        // Armed before the state is read: a change from here on wakes the next round.
        changed.set(events.notified());
        changed.as_mut().enable();
        let now = matches!(client.connection_state(), Conn::Connected);
        let count = statistics.connects.load(Ordering::Relaxed);
        // From none, it is the first connection (async-nats connects in the background when
        // the broker is not there at start), not a loss.
        let reconnected = count != connects && connects > 0;
        let before = std::mem::replace(&mut connects, count);
        // Drops not said yet (within a second of the last line) are said at the next look.
        flaps.say(lost.is_some());
        if up == Some(now) {
            if now && reconnected {
                flaps.note(count.saturating_sub(before));
                flaps.say(lost.is_some());
                if let Some(lost) = &lost {
                    lost.lost();
                }
            }
            continue;
        }
        up = Some(now);
        if !now {
            if let Some(lost) = &lost {
                lost.lost();
            }
        }
        lifecycle.publish(if now {
            toolyard::LifecycleEvent::ComponentUp {
                kind: "nats",
                name: "bus".to_owned(),
            }
        } else {
            toolyard::LifecycleEvent::ComponentDown {
                kind: "nats",
                name: "bus".to_owned(),
                reason: "disconnected from the NATS server; reconnecting".to_owned(),
                required: true,
            }
        });
    }
}

/// Says that a connection dropped and came back between two looks (async-nats reconnects at
/// once when the server closes it, or when it reads a message it cannot parse: a subject or
/// header that is not UTF-8, see docs/nats.md "Not yet"), at most once a second with the
/// number of such drops since the last line: a connection that flaps many times a second
/// under a stream of such messages is seen in the log without flooding it.
#[derive(Default)]
struct Flaps {
    last: Option<std::time::Instant>,
    unsaid: u64,
}

impl Flaps {
    const EVERY: Duration = Duration::from_secs(1);

    fn note(&mut self, drops: u64) {
        self.unsaid += drops;
    }

    fn say(&mut self, ends_calls: bool) {
        if self.unsaid == 0 || self.last.is_some_and(|t| t.elapsed() < Self::EVERY) {
            return;
        }
        self.last = Some(std::time::Instant::now());
        let times = std::mem::take(&mut self.unsaid);
        if ends_calls {
            tracing::warn!(target: "toolyard::nats", times, "the NATS connection was lost and is back: the calls in flight end with -32010");
        } else {
            tracing::warn!(target: "toolyard::nats", times, "the NATS connection was lost and is back: requests in transit to this worker at that moment are lost");
        }
    }
}
