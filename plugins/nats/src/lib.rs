//! The NATS bridge of Toolyard: tools served by any number of worker processes on a NATS
//! bus and exposed by any number of gateways, with their resources and prompts.
//!
//! - A [`Worker`] serves a Toolyard `Server`'s tools, resources and prompts on the bus, in a
//!   queue group, so one more worker is more capacity. Each request is served like a
//!   2026-07-28 HTTP request (`Server::serve_stateless`), and its messages go back as frames.
//! - [`RemoteTools`] is the gateway side: it follows the catalog bucket the workers write and
//!   exposes their tools, resources, resource templates and prompts through a server,
//!   forwarding each call, read and prompt over the bus.
//! - [`EventRelay`] is the cluster event bus: the `list_changed` and `resources/updated`
//!   events raised in one process reach the subscribers of every gateway.
//! - [`wire`] is the wire (subjects, headers, frames, codes), compatible with
//!   nats-mcp-gateway's v1 where it has one; `docs/nats.md` specifies it for other clients.

mod auth;
mod catalog;
mod claims;
mod config;
mod connection;
mod denied;
mod doubling;
mod error;
mod events;
mod jobs;
mod principal;
mod remote;
mod replies;
mod scope;
mod served;
mod state_key;
mod tasks;
mod unreadable;
pub mod wire;
mod worker;

pub use auth::NatsAuth;
pub use catalog::{CatalogEntry, ForUsers, Restricted, BUCKET as CATALOG_BUCKET, HEARTBEAT};
pub use claims::{BUCKET as CLAIMS_BUCKET, MAX_CLAIM_BYTES, TASK_BODIES as TASK_BODIES_BUCKET};
pub use config::{NatsConfig, NatsSection};
pub use connection::connected;
pub use error::NatsError;
pub use events::{
    events_subject, EventRelay, WireEvent, ORIGIN as ORIGIN_HEADER, PACE as EVENT_PACE,
};
pub use jobs::{
    DEADLINE as DEADLINE_HEADER, RESUME_ROUND as RESUME_ROUND_HEADER, STREAM as JOBS_STREAM,
    TASK_ID as TASK_ID_HEADER,
};
pub use principal::principal_token;
pub use remote::{RemoteConfig, RemoteTools};
pub use scope::Scope;
pub use state_key::BUCKET as STATE_KEYS_BUCKET;
pub use tasks::{NatsTaskStore, BUCKET as TASKS_BUCKET};
pub use worker::{Worker, WorkerConfig};

/// Connects to a NATS server the way the bridge wants it: named, retrying the first
/// connection (a worker may start before the broker), reconnecting for ever. `url` may list
/// a cluster's servers separated by commas: the connection moves to another when its server
/// goes away. Credentials in the URL are used as other NATS clients use them
/// (`nats://user:password@host` or `nats://token@host`; async-nats itself ignores them) and
/// never printed.
pub async fn connect(url: &str, name: &str) -> Result<async_nats::Client, NatsError> {
    connect_with(url, name, async_nats::ConnectOptions::new()).await
}

/// [`connect`], starting from options of your own ([`NatsAuth::options`], a subscription
/// capacity): the URL's
/// credentials, the name, the retries and the event handling the bridge relies on (N15's
/// permission refusals, slow consumers ending the calls in flight) are added to them.
pub async fn connect_with(
    url: &str,
    name: &str,
    options: async_nats::ConnectOptions,
) -> Result<async_nats::Client, NatsError> {
    let urls: Vec<&str> = url
        .split(',')
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .collect();
    let mut options = options;
    if let Some(addr) = urls.iter().find_map(|u| {
        u.parse::<async_nats::ServerAddr>()
            .ok()
            .filter(|a| a.username().is_some())
    }) {
        let decode = |s: &str| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8_lossy()
                .into_owned()
        };
        let user = decode(addr.username().unwrap_or_default());
        options = match addr.password() {
            Some(password) => options.user_and_password(user, decode(password)),
            None => options.token(user),
        };
    }
    // Where a failed connection attempt is diagnosed (`connect_failed`): async-nats says only
    // "IO error".
    let servers: std::sync::Arc<[String]> = urls
        .iter()
        .filter_map(|u| u.parse::<async_nats::ServerAddr>().ok())
        .map(|a| format!("{}:{}", a.host(), a.port()))
        .collect();
    // Which connection an event is of: a refusal or a slow consumer ends only this
    // connection's calls, not those of every client in the process.
    let connection = {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(1);
        NEXT.fetch_add(1, Ordering::Relaxed)
    };
    options
        .name(name)
        .retry_on_initial_connect()
        // Every event is handled at once, without awaiting: async-nats runs the callbacks
        // one after another.
        .event_callback(move |event| {
            on_event(event, connection, &servers);
            std::future::ready(())
        })
        .connect(urls)
        .await
        .inspect(|client| {
            let mut wired = wired();
            wired.retain(|(s, _)| s.strong_count() > 0);
            wired.push((std::sync::Arc::downgrade(&client.statistics()), connection));
        })
        .map_err(|e| NatsError::Connect {
            url: without_credentials(url),
            reason: e.to_string(),
        })
}

/// What the bridge does with a connection event of a client made by [`connect_with`]. A
/// publish the server's permissions refuse is reported only here (N15): the calls waiting on
/// that subject end at once with -32013 instead of at their deadline.
fn on_event(event: async_nats::Event, connection: u64, servers: &std::sync::Arc<[String]>) {
    match event {
        async_nats::Event::ServerError(async_nats::ServerError::Other(message)) => {
            match denied::refused_publish(&message) {
                Some(subject) => replies::refuse(connection, subject, &message),
                None => tracing::warn!(target: "toolyard::nats", %message, "NATS server error"),
            }
        }
        // Otherwise a process whose credentials the server refuses, or whose TLS
        // fails, would retry in silence.
        async_nats::Event::ServerError(async_nats::ServerError::AuthorizationViolation) => {
            tracing::warn!(target: "toolyard::nats", "the NATS server refused our credentials (authorization violation): check the URL's user or token, the credentials file or the nkey seed");
        }
        async_nats::Event::ClientError(error) => connect_failed(error.to_string(), servers.clone()),
        // The connection watchers look now, not at their next tick.
        async_nats::Event::Connected | async_nats::Event::Disconnected => {
            tracing::debug!(target: "toolyard::nats", event = %event, "NATS connection event");
            connection_events().notify_waiters();
        }
        // Frames for the calls in flight may be gone: they end now, -32010 (`replies`).
        async_nats::Event::SlowConsumer(sid) => {
            tracing::warn!(target: "toolyard::nats", sid, "the NATS connection dropped messages for a slow subscription: the calls in flight end with -32010");
            replies::slow_consumer(connection);
        }
        other => tracing::debug!(target: "toolyard::nats", event = %other, "NATS connection event"),
    }
}

/// A connection attempt failed (async-nats retries with a backoff): said at most every 5 s.
/// async-nats passes on only the kind of error ("IO error"), so for that kind each server
/// is tried once over plain TCP to say what failed: the OS's answer (refused, unreachable,
/// a name that does not resolve) or, when TCP connects, that the TLS or NATS handshake did.
/// In a task of its own: async-nats runs its event callbacks one after another, and the
/// "connected" event must not wait behind a diagnosis.
fn connect_failed(error: String, servers: std::sync::Arc<[String]>) {
    use std::sync::atomic::{AtomicU64, Ordering};
    static LAST: AtomicU64 = AtomicU64::new(0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let last = LAST.load(Ordering::Relaxed);
    if last != 0 && now < last + 5 {
        return;
    }
    LAST.store(now, Ordering::Relaxed);
    if error.contains("authorization") || error.contains("authentication") {
        tracing::warn!(target: "toolyard::nats", %error, "cannot connect to NATS: the server refused our credentials: check the URL's user or token, the credentials file or the nkey seed");
    } else if ["IO error", "DNS", "tls", "TLS"]
        .iter()
        .any(|kind| error.contains(kind))
    {
        tokio::spawn(async move {
            let why = unreachable_because(&servers).await;
            tracing::warn!(target: "toolyard::nats", %error, "cannot connect to NATS: {why}");
        });
    } else {
        tracing::warn!(target: "toolyard::nats", %error, "cannot connect to NATS: retrying");
    }
}

/// What a plain TCP connection to each server says, e.g. "127.0.0.1:4222: Connection
/// refused (os error 111)".
async fn unreachable_because(servers: &[String]) -> String {
    const WITHIN: std::time::Duration = std::time::Duration::from_secs(1);
    let mut why = Vec::with_capacity(servers.len());
    for server in servers {
        why.push(
            match tokio::time::timeout(WITHIN, tokio::net::TcpStream::connect(server.as_str()))
                .await
            {
                Ok(Ok(_)) => format!(
                    "{server} accepts TCP connections: the TLS handshake failed (the CA, the \
                     client certificate the server requires, a tls:// URL to a plain server), \
                     or the NATS one did"
                ),
                Ok(Err(e)) => format!("{server}: {e}"),
                Err(_) => format!("{server}: no TCP answer within 1 s"),
            },
        );
    }
    why.join("; ")
}

/// Woken when a connection made by [`connect_with`] goes down or comes back. Process-wide:
/// the event callback does not know which client it serves, so each watcher reads its own
/// client's state (`connection::watch_connection`).
pub(crate) fn connection_events() -> &'static tokio::sync::Notify {
    static EVENTS: tokio::sync::Notify = tokio::sync::Notify::const_new();
    &EVENTS
}

/// The connections made by [`connect_with`], by their statistics (shared by every clone of a
/// client), with the number their events are reported under.
type Wired = Vec<(std::sync::Weak<async_nats::Statistics>, u64)>;

fn wired() -> std::sync::MutexGuard<'static, Wired> {
    static WIRED: std::sync::Mutex<Wired> = std::sync::Mutex::new(Vec::new());
    WIRED.lock().unwrap_or_else(|p| p.into_inner())
}

/// The number `client`'s connection events are reported under, if it was made by
/// [`connect_with`] (a client of the embedder's own reports none, and is only polled).
pub(crate) fn connection_of(client: &async_nats::Client) -> Option<u64> {
    let statistics = client.statistics();
    wired()
        .iter()
        .find(|(s, _)| std::ptr::eq(s.as_ptr(), std::sync::Arc::as_ptr(&statistics)))
        .map(|(_, connection)| *connection)
}

/// Whether `client` was made by [`connect_with`], so its connection events wake
/// [`connection_events`].
pub(crate) fn events_wired(client: &async_nats::Client) -> bool {
    connection_of(client).is_some()
}

/// `url` with any `user:password@` / `token@` cut out of each of its servers.
pub fn without_credentials(url: &str) -> String {
    url.split(',')
        .map(|u| match (u.find("://"), u.rfind('@')) {
            (Some(scheme), Some(at)) if at > scheme => {
                format!("{}{}", &u[..scheme + 3], &u[at + 1..])
            }
            _ => u.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    /// A client made by `connect` (and its clones) wakes the connection watchers on its
    /// events; one made by async-nats directly has no callback of ours, so it is polled.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn only_a_client_made_by_connect_reports_its_connection_events() {
        let nats = toolyard_testkit::NatsServer::start();
        let ours = super::connect(&nats.url(), "test").await.unwrap();
        let theirs = async_nats::connect(nats.url()).await.unwrap();
        assert!(super::events_wired(&ours));
        assert!(super::events_wired(&ours.clone()));
        assert!(!super::events_wired(&theirs));
    }

    #[test]
    fn credentials_are_cut_out_of_printed_urls() {
        assert_eq!(
            super::without_credentials("nats://u:p%40ss@h:4222, nats://tok@h2,nats://h3"),
            "nats://h:4222, nats://h2,nats://h3"
        );
    }
}
