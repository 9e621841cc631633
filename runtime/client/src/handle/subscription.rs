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
use tokio::task::JoinHandle;
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
            let mut listen = tokio::spawn(async move {
                let opts = RequestOptions::default().timeout(Duration::from_secs(365 * 24 * 3600));
                client
                    .round_trip("subscriptions/listen", &params, &opts, Era::Negotiated)
                    .await
                    .map(drop)
            });
            // The server acknowledges before anything else on the stream.
            let acked = tokio::time::timeout(self.inner.request_timeout, async {
                loop {
                    match acks.recv().await {
                        Ok(n) if n.method == ACKNOWLEDGED => return Ok(()),
                        Ok(_) | Err(broadcast::error::RecvError::Lagged(_)) => continue,
                        Err(broadcast::error::RecvError::Closed) => {
                            return Err(ClientError::Closed)
                        }
                    }
                }
            });
            // The listen request may end first: a server that refuses it (an error answer,
            // -32601 from one without subscriptions) fails the subscription at once, not
            // after the request timeout. The acknowledgement wins a tie: it was broadcast
            // before the answer that follows it on the same stream.
            let outcome = tokio::select! {
                biased;
                r = acked => match r {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(e)) => Err(e),
                    Err(_) => Err(ClientError::Timeout {
                        method: "subscriptions/listen".into(),
                        after: self.inner.request_timeout,
                    }),
                },
                ended = &mut listen => Err(listen_outcome(ended).err().unwrap_or_else(|| {
                    ClientError::Protocol(
                        "the server answered `subscriptions/listen` without acknowledging it"
                            .into(),
                    )
                })),
            };
            if let Err(e) = outcome {
                listen.abort();
                return Err(e);
            }
            return Ok(Subscription {
                receiver,
                listen: Some(listen),
                ended: None,
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
            ended: None,
            legacy: Some((self.clone(), uris)),
        })
    }
}

/// The notification that acknowledges a `subscriptions/listen`.
const ACKNOWLEDGED: &str = "notifications/subscriptions/acknowledged";

/// What the ended listen task stands for: its answer, or `Closed` when it was aborted or
/// panicked (neither leaves an answer).
fn listen_outcome(
    joined: Result<Result<(), ClientError>, tokio::task::JoinError>,
) -> Result<(), ClientError> {
    joined.unwrap_or(Err(ClientError::Closed))
}

/// A live subscription: its notifications, and the request that keeps it open.
#[derive(Debug)]
pub struct Subscription {
    receiver: broadcast::Receiver<Notice>,
    /// The modern `subscriptions/listen` request, until it ends.
    listen: Option<JoinHandle<Result<(), ClientError>>>,
    /// How the listen request ended: `Some(None)` when the server answered it (ended the
    /// stream), `Some(Some(e))` when it failed.
    ended: Option<Option<ClientError>>,
    legacy: Option<(Client, Vec<String>)>,
}

impl Subscription {
    /// The next notification from the server; `None` once the client is closed or (modern)
    /// the server ended the `subscriptions/listen` stream, after the notifications it sent
    /// before the end. [`ended`](Self::ended) then says why.
    pub async fn next(&mut self) -> Option<Notice> {
        loop {
            // Notifications first: those sent before the end are broadcast before it.
            let received = match &mut self.listen {
                Some(listen) => tokio::select! {
                    biased;
                    r = self.receiver.recv() => r,
                    joined = listen => {
                        self.listen = None;
                        self.ended = Some(listen_outcome(joined).err());
                        return None;
                    }
                },
                None if self.ended.is_some() => return None,
                None => self.receiver.recv().await,
            };
            match received {
                Ok(n) => return Some(n),
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    }

    /// Whether the server ended the `subscriptions/listen` stream (seen by
    /// [`next`](Self::next)), and with what error: `Some(None)` when it answered the
    /// request, `Some(Some(e))` when the request failed (the transport broke, the client
    /// closed). Always `None` for a legacy subscription.
    pub fn ended(&self) -> Option<Option<&ClientError>> {
        self.ended.as_ref().map(Option::as_ref)
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
