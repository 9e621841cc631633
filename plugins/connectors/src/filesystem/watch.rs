//! Change notifications for subscribed `file://` resources.
//!
//! The watcher learns which URIs are subscribed from the server's
//! [`watch_subscriptions`](toolyard::Server::watch_subscriptions) (legacy
//! `resources/subscribe` and modern `subscriptions/listen` alike) and looks only at those
//! files, only while someone listens. It polls their metadata (size, modification time,
//! and on Unix the inode and change time) every interval rather than using inotify and
//! its kin (the `notify` crate), because:
//!
//! - every look goes through the root's directory capability like every other operation,
//!   so a symlink swapped in cannot make it follow a path outside the roots (an OS watch
//!   is set on an ambient path, resolved outside the capability, with a check-then-watch
//!   window);
//! - the cost is bounded and known: at most [`MAX_WATCHED`] `stat` calls per interval, none
//!   when nothing is subscribed; an OS watch costs a kernel watch per directory, with a
//!   per-user limit shared with every other program, and misses changes on network
//!   filesystems;
//! - no dependency is added.
//!
//! The price is latency: a change is seen within one interval (`watch_interval_ms`,
//! default 500 ms). Bursts are debounced: a file that keeps changing is reported once it has
//! been quiet for one interval, and at least every [`MAX_QUIET_WAIT`] intervals while it
//! keeps changing, so a client is not told about every write of a long copy.

use super::Inner;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};
use tokio::sync::{broadcast, Notify};
use toolyard::{LifecycleEvent, Server};

/// The most URIs watched at once; subscriptions beyond it get no notifications (logged).
pub const MAX_WATCHED: usize = 1024;

/// A file that keeps changing is reported at least every this many intervals.
const MAX_QUIET_WAIT: u32 = 10;

/// What a look at a path saw: enough to tell a write, a delete or a rename.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Stamp {
    /// No such file (deleted, renamed away, or never there).
    Missing,
    /// The path cannot be looked at (it leads outside the roots, a permission error, ...).
    Unreadable,
    /// The file's size, modification time and identity.
    Present {
        len: u64,
        modified: Option<SystemTime>,
        dir: bool,
        /// Unix: device, inode, change time (seconds, nanoseconds). A rename over the file
        /// changes the inode; a chmod changes the change time.
        identity: (u64, u64, i64, i64),
    },
}

/// One watched URI.
struct Entry {
    /// The last stamp seen (`None` until the first look, which only records).
    seen: Option<Stamp>,
    /// Changed and not yet reported: for how many looks.
    pending: Option<u32>,
}

/// The subscribed `file://` URIs, and a wake-up for the poller when they change.
#[derive(Default)]
struct Watched {
    uris: Mutex<HashMap<String, Entry>>,
    wake: Notify,
}

impl Watched {
    fn uris(&self) -> MutexGuard<'_, HashMap<String, Entry>> {
        self.uris.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The running watcher; dropping it stops it.
#[derive(Debug)]
pub struct FileWatch {
    task: tokio::task::JoinHandle<()>,
}

impl FileWatch {
    /// Whether the watcher has stopped (the server stopped).
    pub fn is_finished(&self) -> bool {
        self.task.is_finished()
    }
}

impl Drop for FileWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts watching the files `server`'s clients subscribe to, every `interval`.
pub(crate) fn start(inner: Arc<Inner>, server: &Server, interval: Duration) -> FileWatch {
    let watched = Arc::new(Watched::default());
    // The bus keeps the callback for the server's life: it holds the set only weakly, so a
    // stopped watcher leaves nothing behind but a no-op.
    let weak = Arc::downgrade(&watched);
    server.watch_subscriptions(Arc::new(move |uri: &str, interested: bool| {
        let Some(watched) = weak.upgrade() else {
            return;
        };
        if !uri.starts_with("file://") {
            return;
        }
        let mut uris = watched.uris();
        if interested {
            if uris.len() >= MAX_WATCHED {
                tracing::warn!(
                    max = MAX_WATCHED,
                    "filesystem: too many watched files; this subscription gets no notifications"
                );
                return;
            }
            uris.entry(uri.to_owned()).or_insert(Entry {
                seen: None,
                pending: None,
            });
        } else {
            uris.remove(uri);
        }
        drop(uris);
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
    FileWatch { task }
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
    loop {
        let uris: Vec<String> = watched.uris().keys().cloned().collect();
        if uris.is_empty() {
            watched.wake.notified().await;
            continue;
        }
        let looked = {
            let inner = inner.clone();
            tokio::task::spawn_blocking(move || {
                uris.into_iter()
                    .map(|uri| {
                        let stamp = stamp(&inner, &uri);
                        (uri, stamp)
                    })
                    .collect::<Vec<_>>()
            })
            .await
        };
        let Ok(looked) = looked else {
            tracing::warn!("filesystem: a look at the watched files failed");
            tokio::time::sleep(interval).await;
            continue;
        };
        let mut changed = Vec::new();
        {
            let mut uris = watched.uris();
            for (uri, stamp) in looked {
                // Unsubscribed meanwhile: forget it.
                let Some(entry) = uris.get_mut(&uri) else {
                    continue;
                };
                let differs = entry.seen.as_ref().is_some_and(|seen| *seen != stamp);
                entry.seen = Some(stamp);
                entry.pending = match (entry.pending, differs) {
                    (None, false) => None,
                    (None, true) => Some(0),
                    // Quiet for one look since the last change: report it.
                    (Some(_), false) => {
                        changed.push(uri);
                        None
                    }
                    // Still changing: report at the latest after MAX_QUIET_WAIT looks.
                    (Some(n), true) if n + 1 >= MAX_QUIET_WAIT => {
                        changed.push(uri);
                        None
                    }
                    (Some(n), true) => Some(n + 1),
                };
            }
        }
        for uri in changed {
            server.notify_resource_updated(uri);
        }
        tokio::time::sleep(interval).await;
    }
}

/// Looks at the file behind `uri` through its root's capability. A URI outside the roots
/// is never looked at.
fn stamp(inner: &Inner, uri: &str) -> Stamp {
    let Some(path) = uri.strip_prefix("file://").map(crate::uri::percent_decode) else {
        return Stamp::Unreadable;
    };
    let Ok(target) = inner.roots.resolve(&path) else {
        return Stamp::Unreadable;
    };
    match target.root.dir.metadata(target.rel()) {
        Ok(meta) => Stamp::Present {
            len: meta.len(),
            modified: meta
                .modified()
                .ok()
                .map(cap_std::time::SystemTime::into_std),
            dir: meta.is_dir(),
            identity: identity(&meta),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Stamp::Missing,
        Err(_) => Stamp::Unreadable,
    }
}

#[cfg(unix)]
fn identity(meta: &cap_std::fs::Metadata) -> (u64, u64, i64, i64) {
    use cap_std::fs::MetadataExt;
    (meta.dev(), meta.ino(), meta.ctime(), meta.ctime_nsec())
}

#[cfg(not(unix))]
fn identity(_meta: &cap_std::fs::Metadata) -> (u64, u64, i64, i64) {
    (0, 0, 0, 0)
}
