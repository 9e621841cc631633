//! Change notifications for subscribed `gdrive:///{id}` resources, by polling Drive's
//! `changes.list` (Drive's push channels need a public HTTPS endpoint; a poll needs
//! nothing).
//!
//! The poller learns which URIs are subscribed from the server's
//! [`watch_subscriptions`](toolyard::Server::watch_subscriptions) (legacy
//! `resources/subscribe` and `subscriptions/listen` alike) and polls only while at least one
//! `gdrive:///` URI is: it takes a start page token when the first subscription arrives,
//! then asks `changes.list` every interval and sends `notifications/resources/updated` for
//! each subscribed file that changed. When the last subscription goes, it forgets the token
//! and sleeps until the next one. The task stops when its [`ChangeWatch`] is dropped or the
//! server stops, whichever comes first.

use super::client::DriveError;
use super::Inner;
use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;
use tokio::sync::{broadcast, Notify};
use toolyard::{LifecycleEvent, Server};

/// The most `changes.list` pages read in one poll (1,000 changes each).
const MAX_PAGES: usize = 20;

/// The running poller; dropping it stops the poller.
#[derive(Debug)]
pub struct ChangeWatch {
    task: tokio::task::JoinHandle<()>,
}

impl ChangeWatch {
    /// Whether the poller has stopped (the server stopped).
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }
}

impl Drop for ChangeWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The subscribed file ids, and a wake-up for the poller when they change.
#[derive(Default)]
struct Watched {
    ids: Mutex<HashSet<String>>,
    wake: Notify,
}

impl Watched {
    fn ids(&self) -> MutexGuard<'_, HashSet<String>> {
        self.ids.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Starts polling for `server`'s subscribers every `interval`.
pub(crate) fn start(inner: Arc<Inner>, server: &Server, interval: Duration) -> ChangeWatch {
    let watched = Arc::new(Watched::default());
    // The bus keeps the watcher for the server's life: it holds the set only weakly, so a
    // stopped poller leaves nothing behind but a no-op.
    let weak = Arc::downgrade(&watched);
    server.watch_subscriptions(Arc::new(move |uri: &str, interested: bool| {
        let Some(watched) = weak.upgrade() else {
            return;
        };
        let Some(id) = uri.strip_prefix(super::URI_PREFIX) else {
            return;
        };
        if interested {
            watched.ids().insert(id.to_owned());
        } else {
            watched.ids().remove(id);
        }
        watched.wake.notify_one();
    }));
    let mut events = server.lifecycle().subscribe();
    let server = server.clone();
    let task = tokio::spawn(async move {
        tokio::select! {
            () = poll(inner, watched, server, interval) => {}
            () = stopping(&mut events) => {}
        }
    });
    ChangeWatch { task }
}

/// Returns when the server stops.
async fn stopping(events: &mut broadcast::Receiver<LifecycleEvent>) {
    loop {
        match events.recv().await {
            Ok(LifecycleEvent::Stopping) | Err(broadcast::error::RecvError::Closed) => return,
            _ => {}
        }
    }
}

async fn poll(inner: Arc<Inner>, watched: Arc<Watched>, server: Server, interval: Duration) {
    let mut token: Option<String> = None;
    loop {
        if watched.ids().is_empty() {
            token = None;
            watched.wake.notified().await;
            continue;
        }
        let Some(from) = token.clone() else {
            match inner.drive.start_page_token().await {
                Ok(t) => token = Some(t),
                Err(e) => {
                    tracing::warn!(error = %e, "gdrive: cannot start watching changes");
                    tokio::time::sleep(interval).await;
                }
            }
            continue;
        };
        tokio::time::sleep(interval).await;
        match changed(&inner, &from).await {
            Ok((ids, next)) => {
                token = Some(next);
                let subscribed = watched.ids().clone();
                for id in ids.iter().filter(|id| subscribed.contains(*id)) {
                    server.notify_resource_updated(super::uri(id));
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "gdrive: polling changes failed");
                // A token Drive no longer knows is replaced by a fresh one.
                if matches!(
                    &e,
                    DriveError::Refused {
                        status: 400 | 404 | 410,
                        ..
                    } | DriveError::Api(crate::http::ApiError::Status {
                        status: 400 | 404 | 410,
                        ..
                    })
                ) {
                    token = None;
                }
            }
        }
    }
}

/// The ids of the files changed since `from`, and the token to poll from next.
async fn changed(inner: &Inner, from: &str) -> Result<(HashSet<String>, String), DriveError> {
    let mut ids = HashSet::new();
    let mut page = from.to_owned();
    for _ in 0..MAX_PAGES {
        let list = inner.drive.changes(&page).await?;
        ids.extend(list.changes.into_iter().filter_map(|c| c.file_id));
        match (list.next_page_token, list.new_start_page_token) {
            (Some(next), _) => page = next,
            (None, Some(start)) => return Ok((ids, start)),
            (None, None) => {
                return Err(crate::http::ApiError::Malformed {
                    service: "Google Drive",
                    message: "changes.list gave neither nextPageToken nor newStartPageToken".into(),
                }
                .into())
            }
        }
    }
    // More pages than one poll reads: go on from here next time.
    Ok((ids, page))
}
