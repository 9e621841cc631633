//! State-owning actors: a connector's mutable state (connections, credentials, rate limits)
//! lives in one actor under a supervisor of its own, instead of behind a lock in the
//! connector.
//!
//! Why an actor rather than a `Mutex`: a panic while a `Mutex` is held poisons it and every
//! later call fails (or, worse, sees half-updated state); here the supervisor throws the
//! failed state away and rebuilds it from the connector's configuration, and only the calls
//! the failed actor held are answered with an error. Access is serialised by the mailbox,
//! so no lock is ever held across an `.await`.
//!
//! The actor only holds state: every job it runs is a short synchronous closure over the
//! state. Long I/O (a token exchange, a query, a connect) stays in the calling tool's task,
//! and the actor coordinates it: [`Flight`] lets one caller refresh a value while the others
//! wait for its result, and connection pools hand a connection out and take it back.
//!
//! The actors are spawned on first use (connectors are built before any runtime exists) and
//! stopped when the last handle to the connector is dropped.

use ractor::{Actor, ActorProcessingErr, ActorRef, MessagingErr, SupervisionEvent};
use std::future::Future;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::sync::{oneshot, watch, OnceCell};
use toolyard::{HandlerError, Lifecycle, LifecycleEvent};

/// A job the state actor runs: a short synchronous closure over its state.
type Job<S> = Box<dyn FnOnce(&mut S) + Send>;

/// How long a call waits for a failed actor's successor before it gives up.
const RESTART_WAIT: Duration = Duration::from_secs(5);

/// The lifecycle component kind a connector's state actor is published under.
pub(crate) const COMPONENT_KIND: &str = "connector";

/// Why a call could not use its connector's state. The message is the tool error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum StateError {
    /// The actor failed while this call's job was queued or running; it is being rebuilt.
    #[error("the {connector} connector's state failed during this call and was rebuilt from its configuration; the call can be retried")]
    Failed {
        /// The connector.
        connector: &'static str,
    },
    /// No actor to send to.
    #[error("the {connector} connector's state is unavailable: {reason}")]
    Unavailable {
        /// The connector.
        connector: &'static str,
        /// Why, in a few words.
        reason: &'static str,
    },
}

impl From<StateError> for HandlerError {
    fn from(e: StateError) -> Self {
        HandlerError::failed(e.to_string())
    }
}

/// Builds a connector's state from its configuration: at start and after each failure.
type Build<S> = Arc<dyn Fn() -> S + Send + Sync>;

/// A connector's state actor and its supervisor, as a cheap-to-clone handle.
pub(crate) struct Supervised<S: Send + 'static> {
    shared: Arc<Shared<S>>,
}

impl<S: Send + 'static> Clone for Supervised<S> {
    fn clone(&self) -> Self {
        Supervised {
            shared: self.shared.clone(),
        }
    }
}

impl<S: Send + 'static> std::fmt::Debug for Supervised<S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Supervised")
            .field("connector", &self.shared.connector)
            .field("restarts", &self.restarts())
            .finish_non_exhaustive()
    }
}

/// What can be seen of a state actor from outside: its restarts, and where they are
/// published. Cheap to clone; kept by [`crate::Watchers`] to attach the server's lifecycle.
#[derive(Debug, Clone)]
pub(crate) struct Observer {
    connector: &'static str,
    restarts: Arc<AtomicU64>,
    lifecycle: Arc<OnceLock<Arc<Lifecycle>>>,
}

impl Observer {
    /// Publishes restarts to a server's lifecycle (`ComponentDown`, then `ComponentUp`, kind
    /// `connector`) from now on. The first lifecycle attached stays.
    pub(crate) fn attach(&self, lifecycle: Arc<Lifecycle>) {
        let _ = self.lifecycle.set(lifecycle);
    }

    /// How many times the state was rebuilt after a failure.
    pub(crate) fn restarts(&self) -> u64 {
        self.restarts.load(Ordering::Relaxed)
    }
}

struct Shared<S: Send + 'static> {
    connector: &'static str,
    build: Build<S>,
    running: OnceCell<Running<S>>,
    observer: Observer,
    #[cfg(feature = "test-hooks")]
    armed: Arc<std::sync::atomic::AtomicBool>,
}

struct Running<S: Send + 'static> {
    supervisor: ActorRef<()>,
    /// The current state actor; `None` between a failure and its successor.
    child: watch::Receiver<Option<ActorRef<Job<S>>>>,
}

impl<S: Send + 'static> Drop for Shared<S> {
    fn drop(&mut self) {
        if let Some(running) = self.running.get() {
            running.supervisor.stop(None);
        }
    }
}

impl<S: Send + 'static> Supervised<S> {
    /// A handle whose actor (spawned on first use) holds `build()`, rebuilt the same way
    /// after a failure.
    pub(crate) fn new(
        connector: &'static str,
        build: impl Fn() -> S + Send + Sync + 'static,
    ) -> Self {
        Supervised {
            shared: Arc::new(Shared {
                connector,
                build: Arc::new(build),
                running: OnceCell::new(),
                observer: Observer {
                    connector,
                    restarts: Arc::default(),
                    lifecycle: Arc::default(),
                },
                #[cfg(feature = "test-hooks")]
                armed: Arc::default(),
            }),
        }
    }

    /// How many times the state was rebuilt after a failure.
    pub(crate) fn restarts(&self) -> u64 {
        self.shared.observer.restarts()
    }

    /// Its restart counter and lifecycle seam.
    pub(crate) fn observer(&self) -> Observer {
        self.shared.observer.clone()
    }

    /// Test hook: the next job panics inside the actor, as a bug in state code would.
    #[cfg(feature = "test-hooks")]
    pub(crate) fn panic_next(&self) {
        self.shared.armed.store(true, Ordering::SeqCst);
    }

    async fn running(&self) -> Result<&Running<S>, StateError> {
        let shared = &self.shared;
        shared
            .running
            .get_or_try_init(|| async {
                let (tx, rx) = watch::channel(None);
                let args = SupArgs {
                    build: shared.build.clone(),
                    observer: shared.observer.clone(),
                    child: tx,
                };
                let (supervisor, _) = Actor::spawn(None, Supervisor(PhantomData), args)
                    .await
                    .map_err(|_| StateError::Unavailable {
                        connector: shared.connector,
                        reason: "its actor could not be started",
                    })?;
                Ok(Running {
                    supervisor,
                    child: rx,
                })
            })
            .await
    }

    /// Runs `f` on the state, in the actor, and returns what it returns. `f` must be short
    /// and must not block: it holds every other call up.
    pub(crate) async fn call<R, F>(&self, f: F) -> Result<R, StateError>
    where
        R: Send + 'static,
        F: FnOnce(&mut S) -> R + Send + 'static,
    {
        let (tx, rx) = oneshot::channel();
        #[cfg(feature = "test-hooks")]
        let armed = self.shared.armed.clone();
        let job: Job<S> = Box::new(move |state| {
            #[cfg(feature = "test-hooks")]
            if armed.swap(false, Ordering::SeqCst) {
                #[allow(clippy::panic, reason = "the test hook's whole point")]
                {
                    panic!("a panic injected by a test hook");
                }
            }
            let _ = tx.send(f(state));
        });
        self.send(job).await?;
        // The sender is dropped unanswered only when the actor failed (this job panicked,
        // or the actor died with it queued).
        rx.await.map_err(|_| StateError::Failed {
            connector: self.shared.connector,
        })
    }

    /// Sends `f` without waiting for it (from `Drop`, where nothing can be awaited). Lost
    /// when no actor is running; the state it would have touched is then a new one anyway.
    pub(crate) fn cast<F>(&self, f: F)
    where
        F: FnOnce(&mut S) + Send + 'static,
    {
        let Some(running) = self.shared.running.get() else {
            return;
        };
        let current = running.child.borrow().clone();
        if let Some(actor) = current {
            let _ = actor.send_message(Box::new(f));
        }
    }

    async fn send(&self, mut job: Job<S>) -> Result<(), StateError> {
        let connector = self.shared.connector;
        let mut child = self.running().await?.child.clone();
        let deadline = tokio::time::Instant::now() + RESTART_WAIT;
        loop {
            let current = child.borrow_and_update().clone();
            if let Some(actor) = current {
                match actor.send_message(job) {
                    Ok(()) => return Ok(()),
                    // Dead, its successor not up yet: wait for it below.
                    Err(MessagingErr::SendErr(back)) => job = back,
                    Err(_) => {
                        return Err(StateError::Unavailable {
                            connector,
                            reason: "its actor refused the message",
                        })
                    }
                }
            }
            match tokio::time::timeout_at(deadline, child.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => {
                    return Err(StateError::Unavailable {
                        connector,
                        reason: "its supervisor stopped",
                    })
                }
                Err(_) => {
                    return Err(StateError::Unavailable {
                        connector,
                        reason: "it was not rebuilt in time",
                    })
                }
            }
        }
    }

    /// The value `access` points at in the state: the held one while `usable`, otherwise
    /// one `refresh` (run in this task) obtains. One refresh at a time: concurrent callers
    /// wait for the one in flight and get its outcome. A refresh abandoned half-way (the
    /// call was cancelled, the actor failed) hands the lead to a waiter.
    pub(crate) async fn single_flight<T, E, A, U, G, Fut>(
        &self,
        access: A,
        usable: U,
        refresh: G,
    ) -> Result<Result<T, E>, StateError>
    where
        T: Clone + Send + 'static,
        E: Clone + Send + 'static,
        A: Fn(&mut S) -> &mut Flight<T, E> + Send + Sync + Copy + 'static,
        U: Fn(&T) -> bool + Send + Sync + Copy + 'static,
        G: FnOnce() -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        // Each round either ends or follows a lead that was dropped; a few rounds bound it.
        for _ in 0..4 {
            let joined = self.call(move |s| access(s).join(usable)).await?;
            match joined {
                Join::Have(value) => return Ok(Ok(value)),
                Join::Wait(rx) => match rx.await {
                    Ok(outcome) => return Ok(outcome),
                    Err(_) => continue,
                },
                Join::Lead(ticket) => {
                    let mut lead = Lead {
                        handle: self,
                        access,
                        ticket: Some(ticket),
                    };
                    let outcome = refresh().await;
                    let ticket = lead.ticket.take();
                    let landed = outcome.clone();
                    self.call(move |s| {
                        if let Some(ticket) = ticket {
                            access(s).land(ticket, &landed);
                        }
                    })
                    .await?;
                    return Ok(outcome);
                }
            }
        }
        Err(StateError::Unavailable {
            connector: self.shared.connector,
            reason: "its refresh was abandoned repeatedly",
        })
    }
}

/// The caller leading a refresh; dropped without landing it, it releases the waiters.
struct Lead<'a, S: Send + 'static, T, E, A>
where
    T: Clone + Send + 'static,
    E: Clone + Send + 'static,
    A: Fn(&mut S) -> &mut Flight<T, E> + Send + Sync + Copy + 'static,
{
    handle: &'a Supervised<S>,
    access: A,
    ticket: Option<u64>,
}

impl<S: Send + 'static, T, E, A> Drop for Lead<'_, S, T, E, A>
where
    T: Clone + Send + 'static,
    E: Clone + Send + 'static,
    A: Fn(&mut S) -> &mut Flight<T, E> + Send + Sync + Copy + 'static,
{
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            let access = self.access;
            self.handle.cast(move |s| access(s).abandon(ticket));
        }
    }
}

/// Who waits for a refresh's outcome.
type Waiters<T, E> = Vec<oneshot::Sender<Result<T, E>>>;

/// A value that one caller at a time refreshes while the others wait (a token, say).
pub(crate) struct Flight<T, E> {
    value: Option<T>,
    /// Set while a refresh is in flight: its ticket and who waits for it.
    in_flight: Option<(u64, Waiters<T, E>)>,
    next_ticket: u64,
}

impl<T, E> Default for Flight<T, E> {
    fn default() -> Self {
        Flight {
            value: None,
            in_flight: None,
            next_ticket: 0,
        }
    }
}

/// What a caller does next.
pub(crate) enum Join<T, E> {
    /// Use this value.
    Have(T),
    /// Wait for the refresh in flight.
    Wait(oneshot::Receiver<Result<T, E>>),
    /// Refresh it, then land the outcome with this ticket.
    Lead(u64),
}

impl<T: Clone, E: Clone> Flight<T, E> {
    fn join(&mut self, usable: impl Fn(&T) -> bool) -> Join<T, E> {
        if let Some(v) = self.value.as_ref().filter(|v| usable(v)) {
            return Join::Have(v.clone());
        }
        if let Some((_, waiters)) = self.in_flight.as_mut() {
            let (tx, rx) = oneshot::channel();
            waiters.push(tx);
            return Join::Wait(rx);
        }
        self.next_ticket += 1;
        self.in_flight = Some((self.next_ticket, Vec::new()));
        Join::Lead(self.next_ticket)
    }

    fn land(&mut self, ticket: u64, outcome: &Result<T, E>) {
        if self.in_flight.as_ref().map(|(t, _)| *t) != Some(ticket) {
            return;
        }
        if let Ok(v) = outcome {
            self.value = Some(v.clone());
        }
        if let Some((_, waiters)) = self.in_flight.take() {
            for w in waiters {
                let _ = w.send(outcome.clone());
            }
        }
    }

    fn abandon(&mut self, ticket: u64) {
        if self.in_flight.as_ref().map(|(t, _)| *t) == Some(ticket) {
            // The waiters see their channel closed and one of them leads the next round.
            self.in_flight = None;
        }
    }

    /// Drops the held value (the service refused it) so the next caller refreshes; only if
    /// it is still `stale`, since a newer one may have landed meanwhile.
    pub(crate) fn forget_if(&mut self, stale: impl Fn(&T) -> bool) {
        if self.value.as_ref().is_some_and(stale) {
            self.value = None;
        }
    }
}

/// The actor that owns a connector's state and runs jobs over it, one at a time.
struct Holder<S>(PhantomData<fn() -> S>);

impl<S: Send + 'static> Actor for Holder<S> {
    type Msg = Job<S>;
    type State = S;
    type Arguments = S;

    async fn pre_start(
        &self,
        _myself: ActorRef<Job<S>>,
        state: S,
    ) -> Result<S, ActorProcessingErr> {
        Ok(state)
    }

    async fn handle(
        &self,
        _myself: ActorRef<Job<S>>,
        job: Job<S>,
        state: &mut S,
    ) -> Result<(), ActorProcessingErr> {
        job(state);
        Ok(())
    }
}

/// The supervisor of one state actor: rebuilds it when it fails.
struct Supervisor<S>(PhantomData<fn() -> S>);

struct SupArgs<S: Send + 'static> {
    build: Build<S>,
    observer: Observer,
    child: watch::Sender<Option<ActorRef<Job<S>>>>,
}

impl<S: Send + 'static> SupArgs<S> {
    async fn spawn_child(&self, myself: &ActorRef<()>) -> Result<(), ActorProcessingErr> {
        let (child, _) =
            Actor::spawn_linked(None, Holder(PhantomData), (self.build)(), myself.get_cell())
                .await?;
        self.child.send_replace(Some(child));
        Ok(())
    }
}

impl<S: Send + 'static> Actor for Supervisor<S> {
    type Msg = ();
    type State = SupArgs<S>;
    type Arguments = SupArgs<S>;

    async fn pre_start(
        &self,
        myself: ActorRef<()>,
        args: SupArgs<S>,
    ) -> Result<SupArgs<S>, ActorProcessingErr> {
        args.spawn_child(&myself).await?;
        Ok(args)
    }

    async fn post_stop(
        &self,
        _myself: ActorRef<()>,
        state: &mut SupArgs<S>,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(child) = state.child.send_replace(None) {
            child.stop(None);
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<()>,
        evt: SupervisionEvent,
        state: &mut SupArgs<S>,
    ) -> Result<(), ActorProcessingErr> {
        let (cell, reason) = match &evt {
            SupervisionEvent::ActorFailed(cell, _) => (cell, "its state actor panicked"),
            SupervisionEvent::ActorTerminated(cell, ..) => (cell, "its state actor stopped"),
            _ => return Ok(()),
        };
        let current = state.child.borrow().as_ref().map(|c| c.get_id());
        if current != Some(cell.get_id()) {
            return Ok(());
        }
        state.child.send_replace(None);
        let restarts = state.observer.restarts.fetch_add(1, Ordering::Relaxed) + 1;
        tracing::warn!(
            connector = state.observer.connector,
            restarts,
            "{reason}; rebuilding its state from the configuration"
        );
        let lifecycle = state.observer.lifecycle.get().cloned();
        if let Some(l) = &lifecycle {
            l.publish(LifecycleEvent::ComponentDown {
                kind: COMPONENT_KIND,
                name: state.observer.connector.to_owned(),
                reason: reason.to_owned(),
                required: false,
            });
        }
        state.spawn_child(&myself).await?;
        if let Some(l) = &lifecycle {
            l.publish(LifecycleEvent::ComponentUp {
                kind: COMPONENT_KIND,
                name: state.observer.connector.to_owned(),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Token = Flight<u32, String>;

    fn itself(s: &mut Token) -> &mut Token {
        s
    }

    async fn until(state: &Supervised<Token>, test: fn(&Token) -> bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while !state.call(move |s| test(s)).await.unwrap() {
            assert!(tokio::time::Instant::now() < deadline, "never happened");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test]
    async fn a_cancelled_refresh_hands_the_lead_to_a_waiter() {
        let state = Supervised::new("test", Token::default);
        let leader = tokio::spawn({
            let state = state.clone();
            async move {
                state
                    .single_flight(itself, |_| true, std::future::pending)
                    .await
            }
        });
        until(&state, |s| s.in_flight.is_some()).await;
        let waiter = tokio::spawn({
            let state = state.clone();
            async move {
                state
                    .single_flight(itself, |_| true, || async { Ok(7) })
                    .await
            }
        });
        until(&state, |s| {
            s.in_flight.as_ref().is_some_and(|(_, w)| w.len() == 1)
        })
        .await;
        leader.abort();
        assert_eq!(waiter.await.unwrap(), Ok(Ok(7)));
        // Landed: the next caller has it without a refresh.
        let held = state
            .single_flight(itself, |_| true, || async { Err("refreshed".to_owned()) })
            .await;
        assert_eq!(held, Ok(Ok(7)));
    }

    #[tokio::test]
    async fn a_failed_refresh_reaches_every_waiter_and_nothing_is_held() {
        let state = Supervised::new("test", Token::default);
        let (go, gate) = oneshot::channel::<()>();
        let leader = tokio::spawn({
            let state = state.clone();
            async move {
                state
                    .single_flight(
                        itself,
                        |_| true,
                        || async {
                            let _ = gate.await;
                            Err("refused".to_owned())
                        },
                    )
                    .await
            }
        });
        until(&state, |s| s.in_flight.is_some()).await;
        let waiter = tokio::spawn({
            let state = state.clone();
            async move {
                state
                    .single_flight(itself, |_| true, || async { Ok(1) })
                    .await
            }
        });
        until(&state, |s| {
            s.in_flight.as_ref().is_some_and(|(_, w)| w.len() == 1)
        })
        .await;
        let _ = go.send(());
        assert_eq!(leader.await.unwrap(), Ok(Err("refused".to_owned())));
        assert_eq!(waiter.await.unwrap(), Ok(Err("refused".to_owned())));
        assert!(state.call(|s| s.value.is_none()).await.unwrap());
    }

    #[tokio::test]
    async fn a_job_that_panics_is_an_error_to_its_caller_and_the_state_is_rebuilt() {
        let state = Supervised::new("test", || 5_u32);
        state.call(|n| *n += 1).await.unwrap();
        let failed = state
            .call(|n| {
                if *n == 6 {
                    panic!("a bug");
                }
            })
            .await;
        assert_eq!(failed, Err(StateError::Failed { connector: "test" }));
        assert_eq!(state.call(|n| *n).await, Ok(5), "rebuilt by its builder");
        assert_eq!(state.restarts(), 1);
    }
}
