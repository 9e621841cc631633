//! [`Subscription`]: change notifications through `subscriptions/listen` (modern) or
//! `resources/subscribe` (legacy), and the [`Client::subscribe`] that opens one. A
//! long-lived handle with its own teardown, apart from one-shot requests.

use super::client::Client;
use super::request::{to_value, Era, RequestOptions};
use crate::error::ClientError;
use crate::handlers::Notice;
use serde_json::Map;
use std::time::Duration;
use tokio::sync::broadcast;
use toolyard_proto::SubscriptionFilter;

impl Client {
    /// Subscribes to change notifications: `subscriptions/listen` (modern, a long-lived
    /// request; dropping the [`Subscription`] ends it) or `resources/subscribe` per resource
    /// (legacy, whose list-changed notifications need no request). Notifications arrive on
    /// the returned subscription and on [`notifications`](Self::notifications).
    pub async fn subscribe(&self, filter: SubscriptionFilter) -> Result<Subscription, ClientError> {
        let receiver = self.notifications();
        if self.is_modern() {
            let mut params = Map::new();
            params.insert("notifications".into(), to_value(&filter));
            let client = self.clone();
            let mut acks = self.notifications();
            let listen = tokio::spawn(async move {
                let opts = RequestOptions::default().timeout(Duration::from_secs(365 * 24 * 3600));
                client
                    .round_trip("subscriptions/listen", &params, &opts, Era::Negotiated)
                    .await
            });
            // The server acknowledges before anything else on the stream.
            let acked = tokio::time::timeout(self.inner.request_timeout, async {
                loop {
                    match acks.recv().await {
                        Ok(n) if n.method == "notifications/subscriptions/acknowledged" => {
                            return Ok(())
                        }
                        Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(broadcast::error::RecvError::Closed) => {
                            return Err(ClientError::Closed)
                        }
                    }
                }
            });
            tokio::select! {
                r = acked => match r {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => { listen.abort(); return Err(e) }
                    Err(_) => { listen.abort(); return Err(ClientError::Timeout { method: "subscriptions/listen".into(), after: self.inner.request_timeout }) }
                },
            }
            return Ok(Subscription {
                receiver,
                listen: Some(listen.abort_handle()),
                legacy: None,
            });
        }
        let uris = filter.resource_subscriptions.unwrap_or_default();
        for uri in &uris {
            let mut params = Map::new();
            params.insert("uri".into(), uri.as_str().into());
            self.round_trip(
                "resources/subscribe",
                &params,
                &RequestOptions::default(),
                Era::Negotiated,
            )
            .await?;
        }
        Ok(Subscription {
            receiver,
            listen: None,
            legacy: Some((self.clone(), uris)),
        })
    }
}

/// A live subscription: its notifications, and the request that keeps it open.
#[derive(Debug)]
pub struct Subscription {
    receiver: broadcast::Receiver<Notice>,
    listen: Option<tokio::task::AbortHandle>,
    legacy: Option<(Client, Vec<String>)>,
}

impl Subscription {
    /// The next notification from the server; `None` once the client is closed.
    pub async fn next(&mut self) -> Option<Notice> {
        loop {
            match self.receiver.recv().await {
                Ok(n) => return Some(n),
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        if let Some(listen) = self.listen.take() {
            listen.abort();
        }
        if let Some((client, uris)) = self.legacy.take() {
            if uris.is_empty() || tokio::runtime::Handle::try_current().is_err() {
                return;
            }
            tokio::spawn(async move {
                for uri in uris {
                    let mut params = Map::new();
                    params.insert("uri".into(), uri.into());
                    let _ = client
                        .round_trip(
                            "resources/unsubscribe",
                            &params,
                            &RequestOptions::default(),
                            Era::Negotiated,
                        )
                        .await;
                }
            });
        }
    }
}
