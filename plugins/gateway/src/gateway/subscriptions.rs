//! Resource subscriptions relayed upstream, on demand.
//!
//! Many servers (server-everything among them) send `notifications/resources/updated` only
//! for the URIs a client subscribed to, so passing on what a source sends is not enough: the
//! gateway must subscribe upstream. It does so only while someone downstream listens: the
//! server's event bus reports a URI's first subscriber and its last
//! ([`Server::watch_subscriptions`](toolyard::Server::watch_subscriptions)), and the source
//! then holds one upstream subscription per wanted URI. A subscription held on a connection
//! that closed is made again on a fresh one (the health tick notices), so updates survive a
//! source restart. Transient sources live for one call and cannot hold a subscription; a
//! source that does not declare `resources.subscribe` is not asked.

use super::{lock, upstream_uri, Gateway, Source};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};
use toolyard_client::{Client, Subscription};
use toolyard_proto::SubscriptionFilter;

/// One source's upstream subscriptions.
#[derive(Default)]
pub(super) struct Upstream {
    /// Upstream URIs someone downstream subscribed to.
    wanted: BTreeSet<String>,
    /// The subscriptions made, by upstream URI, with the connection each lives on.
    held: HashMap<String, (Client, Subscription)>,
    /// The source said it cannot subscribe (no `resources.subscribe`): do not ask again.
    unsupported: bool,
    /// A subscribe failed: the health tick tries again after this.
    retry_after: Option<Instant>,
}

impl Upstream {
    /// Whether a sync would change anything (the health tick asks, twice a second).
    pub(super) fn out_of_date(&self) -> bool {
        let stale = self
            .held
            .iter()
            .any(|(u, (c, _))| c.is_closed() || !self.wanted.contains(u));
        let missing = !self.unsupported
            && self.retry_after.is_none_or(|t| Instant::now() >= t)
            && self.wanted.iter().any(|u| !self.held.contains_key(u));
        stale || missing
    }
}

/// How long a failed upstream subscribe waits before the next try.
const RETRY: Duration = Duration::from_secs(5);

impl Gateway {
    /// Subscribes upstream while someone downstream listens (see the module docs).
    pub(super) fn relay_subscriptions(&self) {
        let weak = Arc::downgrade(&self.inner);
        self.inner
            .server
            .watch_subscriptions(Arc::new(move |exposed: &str, interested: bool| {
                let Some(inner) = weak.upgrade() else { return };
                let owner = lock(&inner.sources).iter().find_map(|(name, source)| {
                    upstream_uri(name, exposed).map(|u| (source.clone(), u.to_owned()))
                });
                let Some((source, uri)) = owner else { return };
                {
                    let mut upstream = lock(&source.subscriptions);
                    if interested {
                        upstream.wanted.insert(uri);
                    } else {
                        upstream.wanted.remove(&uri);
                    }
                }
                sync(source);
            }));
    }
}

/// Brings `source`'s upstream subscriptions in line with what is wanted, in the background.
/// Syncs of one source run one at a time, each idempotent.
pub(super) fn sync(source: Arc<Source>) {
    if source.spec.lifecycle == crate::spec::Lifecycle::Transient {
        return;
    }
    tokio::spawn(async move {
        let _one_at_a_time = source.subscriptions_sync.lock().await;
        let (dropped, missing) = {
            let mut upstream = lock(&source.subscriptions);
            let Upstream { wanted, held, .. } = &mut *upstream;
            let stale: Vec<String> = held
                .iter()
                .filter(|(u, (c, _))| c.is_closed() || !wanted.contains(*u))
                .map(|(u, _)| u.clone())
                .collect();
            let dropped: Vec<_> = stale.iter().filter_map(|u| held.remove(u)).collect();
            let missing: Vec<String> = if upstream.unsupported {
                Vec::new()
            } else {
                upstream
                    .wanted
                    .iter()
                    .filter(|u| !upstream.held.contains_key(*u))
                    .cloned()
                    .collect()
            };
            (dropped, missing)
        };
        // Dropping a subscription unsubscribes upstream (when its connection still lives).
        drop(dropped);
        if missing.is_empty() {
            return;
        }
        let lease = match source.pool.lease().await {
            Ok(lease) => lease,
            Err(e) => {
                lock(&source.subscriptions).retry_after = Some(Instant::now() + RETRY);
                tracing::debug!(source = %source.spec.name, error = %e, "resource subscriptions wait for the source");
                return;
            }
        };
        let can = lease
            .session()
            .and_then(|s| s.capabilities.resources)
            .and_then(|r| r.subscribe)
            .unwrap_or(false);
        if !can {
            lock(&source.subscriptions).unsupported = true;
            tracing::debug!(source = %source.spec.name, "the source does not offer resources/subscribe");
            return;
        }
        for uri in missing {
            let filter = SubscriptionFilter {
                resource_subscriptions: Some(vec![uri.clone()]),
                ..SubscriptionFilter::default()
            };
            match lease.client().subscribe(filter).await {
                Ok(subscription) => {
                    let mut upstream = lock(&source.subscriptions);
                    // Still wanted? (The last listener may have left meanwhile.)
                    if upstream.wanted.contains(&uri) {
                        upstream
                            .held
                            .insert(uri, (lease.client().clone(), subscription));
                    }
                }
                Err(e) => {
                    lease.report(&e);
                    lock(&source.subscriptions).retry_after = Some(Instant::now() + RETRY);
                    tracing::warn!(source = %source.spec.name, uri = %uri, error = %e, "upstream resources/subscribe failed");
                }
            }
        }
    });
}
