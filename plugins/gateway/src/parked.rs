//! The actor that holds a source's upstream calls parked for a modern caller's retry.
//!
//! A legacy upstream asks its question in the middle of a call; a modern (2026-07-28) caller
//! can only answer by retrying with `inputResponses`. The gateway therefore keeps the
//! upstream call running, parked under a key that travels in the sealed `requestState`,
//! and the retry takes it back. Parked calls hold an upstream connection (for a `pooled`
//! source, one of its permits), so the ones nobody comes back for must end on time, not
//! whenever the next call happens to be parked: the actor sweeps them on a timer and aborts
//! them, and aborts everything still parked when it stops (the source was removed, the
//! gateway shut down).

use ractor::{Actor, ActorProcessingErr, ActorRef, MessagingErr};
use std::collections::HashMap;
use std::marker::PhantomData;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// Something parked: it can be stopped.
pub(crate) trait Parkable: Send + 'static {
    /// Stops the parked work (it expired, or nobody can take it any more).
    fn abort(&mut self);
}

pub(crate) enum ParkMsg<T> {
    Park {
        key: String,
        call: T,
    },
    Take {
        key: String,
        reply: oneshot::Sender<Option<T>>,
    },
    Sweep,
}

struct ParkedCalls<T> {
    ttl: Duration,
    _calls: PhantomData<fn() -> T>,
}

impl<T: Parkable> Actor for ParkedCalls<T> {
    type Msg = ParkMsg<T>;
    type State = HashMap<String, (T, Instant)>;
    type Arguments = Duration;

    async fn pre_start(
        &self,
        myself: ActorRef<ParkMsg<T>>,
        sweep_every: Duration,
    ) -> Result<Self::State, ActorProcessingErr> {
        myself.send_interval(sweep_every, || ParkMsg::Sweep);
        Ok(HashMap::new())
    }

    async fn handle(
        &self,
        _myself: ActorRef<ParkMsg<T>>,
        msg: ParkMsg<T>,
        calls: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            ParkMsg::Park { key, call } => {
                if let Some((mut replaced, _)) = calls.insert(key, (call, Instant::now())) {
                    replaced.abort();
                }
            }
            ParkMsg::Take { key, reply } => {
                let _ = reply.send(calls.remove(&key).map(|(call, _)| call));
            }
            ParkMsg::Sweep => calls.retain(|_, (call, since)| {
                let live = since.elapsed() < self.ttl;
                if !live {
                    call.abort();
                }
                live
            }),
        }
        Ok(())
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<ParkMsg<T>>,
        calls: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        for (_, (mut call, _)) in calls.drain() {
            call.abort();
        }
        Ok(())
    }
}

/// The handle of one [`ParkedCalls`] actor; dropping it stops the actor, which aborts what
/// is still parked.
pub(crate) struct ParkingLot<T: Parkable> {
    actor: ActorRef<ParkMsg<T>>,
}

impl<T: Parkable> ParkingLot<T> {
    /// Starts the actor: calls expire `ttl` after they were parked, checked every
    /// `sweep_every`.
    pub(crate) async fn start(
        ttl: Duration,
        sweep_every: Duration,
    ) -> Result<Self, ractor::SpawnErr> {
        let handler = ParkedCalls {
            ttl,
            _calls: PhantomData,
        };
        let (actor, _) = Actor::spawn(None, handler, sweep_every).await?;
        Ok(ParkingLot { actor })
    }

    /// Parks `call` under `key` (aborting it at once if the actor is gone).
    pub(crate) fn park(&self, key: String, call: T) {
        if let Err(MessagingErr::SendErr(ParkMsg::Park { mut call, .. })) =
            self.actor.cast(ParkMsg::Park { key, call })
        {
            call.abort();
        }
    }

    /// Takes the call parked under `key`, if it is still there.
    pub(crate) async fn take(&self, key: String) -> Option<T> {
        let (reply, taken) = oneshot::channel();
        self.actor.cast(ParkMsg::Take { key, reply }).ok()?;
        taken.await.ok().flatten()
    }
}

impl<T: Parkable> ParkingLot<T> {
    /// Stops the actor, aborting every call still parked (a parked call may hold what owns
    /// the lot, so waiting for the drop could take until it expires).
    pub(crate) fn stop(&self) {
        self.actor.stop(None);
    }
}

impl<T: Parkable> Drop for ParkingLot<T> {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parked work that says when it is aborted.
    struct Work(Option<oneshot::Sender<()>>);

    impl Parkable for Work {
        fn abort(&mut self) {
            if let Some(aborted) = self.0.take() {
                let _ = aborted.send(());
            }
        }
    }

    fn work() -> (Work, oneshot::Receiver<()>) {
        let (tx, rx) = oneshot::channel();
        (Work(Some(tx)), rx)
    }

    async fn aborted(rx: oneshot::Receiver<()>) -> bool {
        matches!(
            tokio::time::timeout(Duration::from_secs(5), rx).await,
            Ok(Ok(()))
        )
    }

    #[tokio::test]
    async fn a_parked_call_is_taken_once_and_an_unclaimed_one_is_aborted_when_it_expires() {
        let lot = ParkingLot::start(Duration::from_millis(100), Duration::from_millis(20))
            .await
            .unwrap();
        let (claimed, claimed_aborted) = work();
        let (abandoned, abandoned_aborted) = work();
        lot.park("claimed".into(), claimed);
        lot.park("abandoned".into(), abandoned);
        let taken = lot.take("claimed".into()).await;
        assert!(taken.is_some());
        assert!(lot.take("claimed".into()).await.is_none(), "taken twice");
        // Nothing else is parked after it: the sweep alone ends it.
        assert!(
            aborted(abandoned_aborted).await,
            "the abandoned call expired"
        );
        assert!(lot.take("abandoned".into()).await.is_none());
        drop(taken);
        assert!(
            !aborted(claimed_aborted).await,
            "a taken call is its taker's"
        );
    }

    #[tokio::test]
    async fn stopping_the_lot_aborts_what_is_still_parked() {
        let lot = ParkingLot::start(Duration::from_secs(600), Duration::from_secs(5))
            .await
            .unwrap();
        let (call, call_aborted) = work();
        lot.park("k".into(), call);
        // A round trip: the park has been handled.
        assert!(lot.take("other".into()).await.is_none());
        drop(lot);
        assert!(aborted(call_aborted).await);
    }
}
