//! One reply subscription for all of a gateway's calls, routed to each call by its token.
//!
//! Why: a subscription per call cost every forwarded call a SUB and an UNSUB through
//! async-nats' connection task, a fresh channel (its first block of slots allocated) and two
//! updates of the client's subscription map — the largest single share of the gateway's CPU
//! per call after the JSON itself (benches/README.md). Here the gateway subscribes once to
//! `_INBOX.<nuid>.*`; a call takes the next token, is answered on `_INBOX.<nuid>.<token>`,
//! and a router task hands each frame to its call's own bounded queue.
//!
//! A flood of frames on one call must never delay another call's answer (why the first
//! shared subscription was removed): the router never waits. When a call's queue is full its
//! route is dropped on the spot — that call then reads what was queued, sees its stream end
//! before an `end` frame and fails `-32010` (never a truncated answer) — and the router goes
//! on with the other calls' frames. A frame for a token no call holds any more (a call given
//! up on, a late keepalive) is dropped.
//!
//! What the router cannot prevent is async-nats dropping frames before they reach it: the
//! subscription's buffer (the connection's `subscription_capacity`, 65 536 messages by
//! default) full because the router was starved of CPU. A call missing a frame in the
//! middle sees the gap in `Mcp-Seq`; one whose only frame was dropped would wait out its
//! inactivity window. So a slow-consumer event on the connection ([`slow_consumer`], from
//! [`connect`](crate::connect)'s event callback) tells every call waiting on that
//! connection's reply subscription at once, as a lost connection does ([`LossSignal`]): each
//! asks whether its worker still holds it, goes on if so (a frame dropped later in its
//! stream shows as a gap), and fails -32010 if not (its last frame was dropped): a re-issue
//! instead of a silent wait, and none for the calls that lost nothing. The event callback is
//! the connection's own, so other connections' calls are left be.
//!
//! A publish the broker's permissions refuse ends the same way ([`refuse`]): each route
//! knows the subject its call was published to, so the refusal ends exactly the calls sent
//! there, and the stream says why ([`ReplyStream::refusal`]). It used to be a watch of its own
//! per call (a process-wide map of subjects to one-shot channels, ~1 600 instructions of
//! every forwarded call, callgrind) for an event that almost never comes.
//!
//! The calls' clocks live here too. A call waits for its next frame only so long (its
//! probe or inactivity deadline, [`ReplyStream::next_within`]); rather than a tokio timer
//! per call (registered in and removed from the timer wheel for every forwarded call, with
//! a clock read for each deadline), a sweeper ticks every [`TICK`], keeps a coarse clock
//! ([`Replies::now`]) and wakes the calls whose deadline has passed. Deadlines are seconds
//! long, so a tick's lateness does not matter. A lost connection wakes the waits of the calls
//! in flight through their routes too ([`LossSignal`]), instead of each call watching a
//! channel for it. Both per-call watchers together were ~1 600 instructions of every
//! forwarded call (callgrind). A gateway with no call open for a second parks the sweeper
//! (an idle gateway wakes for nothing); the next call to open moves the clock and wakes it,
//! at the cost of one atomic load per call while the sweeper runs.

use async_nats::{Client, Message, Subject};
use futures_util::task::AtomicWaker;
use futures_util::StreamExt;
use rustc_hash::FxHashMap;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::Poll;
use std::time::Duration;

/// Frames a call may have waiting before its route is dropped (a progress flood the
/// caller's side cannot keep up with): bounds the gateway's memory per call.
pub(crate) const QUEUE: usize = 512;

/// A call's queue: a plain deque that grows with what waits in it (a call is mostly one
/// `end` frame), rather than a channel whose first block of slots is allocated up front.
struct Slot {
    /// Where the call was published: a refusal of that subject ends it ([`refuse`]).
    published_to: Subject,
    frames: Mutex<VecDeque<Message>>,
    /// The route is gone: no frame will come after those queued.
    closed: AtomicBool,
    /// Why the broker refused the call's publish, when it did.
    refused: Mutex<Option<String>>,
    /// The connection was lost while the call was in flight.
    lost: AtomicBool,
    /// When (on the coarse clock, ms) the call wants to be woken: `NEVER`, or `FIRED` once
    /// the sweeper has woken it for that.
    due: AtomicU64,
    waker: AtomicWaker,
}

/// How often the sweeper wakes the calls whose deadline has passed and moves the clock.
pub(crate) const TICK: Duration = Duration::from_millis(100);
/// Ticks without a call open after which the sweeper parks until a call opens.
const IDLE_TICKS: u32 = 10;
const NEVER: u64 = u64::MAX;
const FIRED: u64 = u64::MAX - 1;

impl Slot {
    fn new(published_to: Subject) -> Slot {
        Slot {
            published_to,
            frames: Mutex::default(),
            closed: AtomicBool::new(false),
            refused: Mutex::default(),
            lost: AtomicBool::new(false),
            due: AtomicU64::new(NEVER),
            waker: AtomicWaker::new(),
        }
    }

    fn frames(&self) -> MutexGuard<'_, VecDeque<Message>> {
        self.frames.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.waker.wake();
    }
}

/// Token -> the call's queue.
type Table = Mutex<FxHashMap<u64, Arc<Slot>>>;
type Routes = Arc<Table>;

/// Every reply subscription's routes in the process, each with the connection its events
/// are reported under (`None`: a client of the embedder's own, which reports none), for
/// [`slow_consumer`] and [`refuse`].
fn all_routes() -> MutexGuard<'static, Vec<(Option<u64>, std::sync::Weak<Table>)>> {
    static ALL: Mutex<Vec<(Option<u64>, std::sync::Weak<Table>)>> = Mutex::new(Vec::new());
    ALL.lock().unwrap_or_else(|p| p.into_inner())
}

/// `connection` dropped messages for a slow subscription: the calls waiting for replies on
/// it may have lost theirs, so each is told now, as of a lost connection (its wait ends
/// after what was queued; [`ReplyStream::lost`]). Another connection's calls lost nothing.
pub(crate) fn slow_consumer(connection: u64) {
    let mut all = all_routes();
    all.retain(|(of, routes)| {
        let Some(routes) = routes.upgrade() else {
            return false;
        };
        if *of == Some(connection) {
            mark_lost(&routes);
        }
        true
    });
}

/// Every call of `routes` may have lost frames: each wait ends (after what was queued),
/// and its stream says so ([`ReplyStream::lost`]).
fn mark_lost(routes: &Routes) {
    for slot in lock(routes).values() {
        slot.lost.store(true, Ordering::Release);
        slot.waker.wake();
    }
}

/// The broker refused `connection`'s publish to `subject` (`message` is its error): every
/// call that connection published there ends now, and its stream says why. Another
/// connection (another user, other permissions) publishing there was not refused.
pub(crate) fn refuse(connection: u64, subject: &str, message: &str) {
    let mut all = all_routes();
    all.retain(|(of, routes)| {
        let Some(routes) = routes.upgrade() else {
            return false;
        };
        if *of != Some(connection) {
            return true;
        }
        lock(&routes).retain(|_, slot| {
            if slot.published_to.as_str() != subject {
                return true;
            }
            *slot.refused.lock().unwrap_or_else(|p| p.into_inner()) = Some(message.to_owned());
            slot.close();
            false
        });
        true
    });
}

/// Ends the calls of one reply subscription when its connection is lost (given to the
/// connection's watcher; it keeps nothing alive).
#[derive(Debug, Clone)]
pub(crate) struct LossSignal(Weak<Table>);

impl LossSignal {
    /// The connection was lost: every call in flight ends its wait now (after what it had
    /// queued), and its stream says so ([`ReplyStream::lost`]). The routes stay: a call
    /// given up on goes on reading its stream while it cancels the call on the worker.
    pub(crate) fn lost(&self) {
        if let Some(routes) = self.0.upgrade() {
            mark_lost(&routes);
        }
    }
}

fn lock(routes: &Routes) -> MutexGuard<'_, FxHashMap<u64, Arc<Slot>>> {
    routes.lock().unwrap_or_else(|p| p.into_inner())
}

/// The gateway's reply subscription and its routes.
pub(crate) struct Replies {
    /// `_INBOX.<nuid>.`: a call's reply subject is this and its token.
    prefix: String,
    next: AtomicU64,
    routes: Routes,
    /// The coarse clock, moved by the sweeper every `TICK`.
    clock: Arc<Clock>,
    router: tokio::task::JoinHandle<()>,
    sweeper: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for Replies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replies")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl Drop for Replies {
    fn drop(&mut self) {
        self.router.abort();
        self.sweeper.abort();
        for (_, slot) in lock(&self.routes).drain() {
            slot.close();
        }
    }
}

impl Replies {
    /// Subscribes to `_INBOX.<nuid>.*` and starts routing. async-nats subscribes again after
    /// a reconnect, so the routes outlive a lost connection (the calls in flight then end on
    /// the connection watcher's count, not here).
    pub(crate) async fn start(client: &Client) -> Result<Replies, async_nats::SubscribeError> {
        let prefix = format!("{}.", client.new_inbox());
        let mut subscription = client.subscribe(format!("{prefix}*")).await?;
        let routes = Routes::default();
        all_routes().push((crate::connection_of(client), Arc::downgrade(&routes)));
        let routing = routes.clone();
        let tokens = prefix.clone();
        let router = tokio::spawn(async move {
            while let Some(message) = subscription.next().await {
                route(&routing, &tokens, message);
            }
            // The client is gone: every call's stream ends (-32010 for those waiting).
            for (_, slot) in lock(&routing).drain() {
                slot.close();
            }
        });
        let clock = Arc::new(Clock {
            ms: AtomicU64::new(0),
            start: tokio::time::Instant::now(),
            parked: AtomicBool::new(false),
            unparked: tokio::sync::Notify::new(),
        });
        let sweeper = tokio::spawn(sweep(Arc::downgrade(&routes), clock.clone()));
        Ok(Replies {
            prefix,
            next: AtomicU64::new(1),
            routes,
            clock,
            router,
            sweeper,
        })
    }

    /// The coarse clock (moved every [`TICK`]): what a call measures its deadlines with.
    pub(crate) fn now(&self) -> Duration {
        Duration::from_millis(self.clock.ms.load(Ordering::Relaxed))
    }

    /// What ends these calls when the connection is lost.
    pub(crate) fn loss_signal(&self) -> LossSignal {
        LossSignal(Arc::downgrade(&self.routes))
    }

    /// A new call's reply subject and the stream its frames arrive on; the call is
    /// published to `published_to`.
    pub(crate) fn open(&self, published_to: &Subject) -> ReplyStream {
        let token = self.next.fetch_add(1, Ordering::Relaxed);
        let slot = Arc::new(Slot::new(published_to.clone()));
        lock(&self.routes).insert(token, slot.clone());
        // After the insert: a sweeper parking from now on sees this route (`sweep`).
        if self.clock.parked.load(Ordering::SeqCst) {
            self.clock.unpark();
        }
        // Written by hand: `format!` was ~900 instructions of every forwarded call.
        let mut subject = String::with_capacity(self.prefix.len() + 20);
        subject.push_str(&self.prefix);
        subject.push_str(itoa::Buffer::new().format(token));
        ReplyStream {
            subject,
            token,
            slot,
            routes: self.routes.clone(),
            clock: self.clock.clone(),
        }
    }
}

/// The calls' coarse clock, and the sweeper's parking while no call is open.
struct Clock {
    /// ms since `start`.
    ms: AtomicU64,
    start: tokio::time::Instant,
    /// The sweeper is parked (or about to be): the next call to open wakes it.
    parked: AtomicBool,
    unparked: tokio::sync::Notify,
}

impl Clock {
    /// Moves the clock to now; the time.
    fn advance(&self) -> u64 {
        let now = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(FIRED - 1);
        self.ms.store(now, Ordering::Relaxed);
        now
    }

    /// Wakes a parked sweeper, with the clock moved first: the call opening now measures
    /// its deadlines from it.
    fn unpark(&self) {
        if self.parked.swap(false, Ordering::SeqCst) {
            self.advance();
            self.unparked.notify_one();
        }
    }
}

/// Every `TICK`: moves the clock and wakes the calls whose deadline has passed; parks after
/// [`IDLE_TICKS`] ticks without a call open (`Replies::open` wakes it). Ends with the routes.
async fn sweep(routes: Weak<Table>, clock: Arc<Clock>) {
    let mut tick = tokio::time::interval(TICK);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut idle = 0;
    loop {
        tick.tick().await;
        let now = clock.advance();
        let Some(routes) = routes.upgrade() else {
            return;
        };
        if lock(&routes).is_empty() {
            idle += 1;
            if idle < IDLE_TICKS {
                continue;
            }
            // Parked before looking: a call opened after the look sees `parked` and wakes
            // the sweeper; one opened before it is seen here (the routes' lock orders the
            // two), and the sweeper goes on.
            clock.parked.store(true, Ordering::SeqCst);
            if lock(&routes).is_empty() {
                drop(routes);
                clock.unparked.notified().await;
                // The next tick a whole `TICK` from now: the clock was just moved.
                tick.reset();
            } else {
                clock.parked.store(false, Ordering::SeqCst);
            }
            idle = 0;
            continue;
        }
        idle = 0;
        for slot in lock(&routes).values() {
            let due = slot.due.load(Ordering::Acquire);
            // A call that set a new deadline meanwhile keeps it (the exchange fails).
            if due <= now
                && slot
                    .due
                    .compare_exchange(due, FIRED, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            {
                slot.waker.wake();
            }
        }
    }
}

/// A call's wait for its next frame ran out ([`ReplyStream::next_within`]).
#[derive(Debug)]
pub(crate) struct Due;

fn route(routes: &Routes, prefix: &str, message: Message) {
    let Some(token) = message
        .subject
        .as_str()
        .strip_prefix(prefix)
        .and_then(|t| t.parse::<u64>().ok())
    else {
        return;
    };
    let mut routes = lock(routes);
    let Some(slot) = routes.get(&token) else {
        return;
    };
    let mut frames = slot.frames();
    if frames.len() < QUEUE {
        frames.push_back(message);
        drop(frames);
        slot.waker.wake();
        return;
    }
    drop(frames);
    if let Some(slot) = routes.remove(&token) {
        slot.close();
    }
    tracing::warn!(
        token,
        queue = QUEUE,
        "a call's frames arrive faster than its caller takes them: the call fails -32010"
    );
}

/// The token of a stream whose route was moved out (`detach`); tokens start at 1.
const DETACHED: u64 = 0;

/// One call's frames; its route is removed when it is dropped.
pub(crate) struct ReplyStream {
    subject: String,
    token: u64,
    slot: Arc<Slot>,
    routes: Routes,
    clock: Arc<Clock>,
}

impl ReplyStream {
    /// The reply subject the call is published with.
    pub(crate) fn subject(&self) -> &str {
        &self.subject
    }

    /// Moves the route into a new stream (for a task that outlives the call's future); this
    /// one is left routing nothing.
    pub(crate) fn detach(&mut self) -> ReplyStream {
        ReplyStream {
            subject: std::mem::take(&mut self.subject),
            token: std::mem::replace(&mut self.token, DETACHED),
            slot: self.slot.clone(),
            routes: self.routes.clone(),
            clock: self.clock.clone(),
        }
    }

    /// Whether the connection was lost while the call was in flight.
    pub(crate) fn lost(&self) -> bool {
        self.slot.lost.load(Ordering::Acquire)
    }

    /// Waits for frames again after the connection was lost (the call goes on once it is
    /// back: the frames sent while it was down are gone, which the call's sequence check, or
    /// its worker no longer listening, tells). False when the route is closed, so nothing
    /// more can come.
    pub(crate) fn resume_after_loss(&self) -> bool {
        self.slot.lost.store(false, Ordering::Release);
        !self.slot.closed.load(Ordering::Acquire)
    }

    /// The next frame, waiting at most about `wait` (on the coarse clock, to a [`TICK`]):
    /// `Ok(None)` once the route was dropped or the connection lost and what was queued has
    /// been read, `Err(Due)` when the wait ran out first. A frame that is there wins.
    pub(crate) async fn next_within(&mut self, wait: Duration) -> Result<Option<Message>, Due> {
        let wait = u64::try_from(wait.as_millis()).unwrap_or(NEVER);
        let due = self
            .clock
            .ms
            .load(Ordering::Relaxed)
            .saturating_add(wait)
            .min(FIRED - 1);
        self.slot.due.store(due, Ordering::Release);
        let next = std::future::poll_fn(|cx| {
            if let Some(m) = self.slot.frames().pop_front() {
                return Poll::Ready(Ok(Some(m)));
            }
            self.slot.waker.register(cx.waker());
            if let Some(m) = self.slot.frames().pop_front() {
                return Poll::Ready(Ok(Some(m)));
            }
            if self.slot.closed.load(Ordering::Acquire) || self.slot.lost.load(Ordering::Acquire) {
                return Poll::Ready(Ok(None));
            }
            if self.slot.due.load(Ordering::Acquire) == FIRED {
                return Poll::Ready(Err(Due));
            }
            Poll::Pending
        })
        .await;
        self.slot.due.store(NEVER, Ordering::Release);
        next
    }

    /// Why the broker refused the call's publish, once its stream ended for that.
    pub(crate) fn refusal(&self) -> Option<String> {
        self.slot
            .refused
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The next frame; `None` once the route was dropped (a queue overflow, the client gone,
    /// a refusal) and what was queued has been read.
    pub(crate) async fn next(&mut self) -> Option<Message> {
        std::future::poll_fn(|cx| {
            if let Some(m) = self.slot.frames().pop_front() {
                return Poll::Ready(Some(m));
            }
            self.slot.waker.register(cx.waker());
            // Again after registering: a frame or the close may have come in between.
            if let Some(m) = self.slot.frames().pop_front() {
                return Poll::Ready(Some(m));
            }
            if self.slot.closed.load(Ordering::Acquire) {
                return Poll::Ready(None);
            }
            Poll::Pending
        })
        .await
    }
}

impl Drop for ReplyStream {
    fn drop(&mut self) {
        if self.token == DETACHED {
            return;
        }
        lock(&self.routes).remove(&self.token);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use toolyard_testkit::NatsServer;

    /// `slow_consumer` ends the calls of every reply subscription in the process, so the
    /// tests that wait for replies take turns with the one that raises it (they share a
    /// process under `cargo test`; nextest runs each alone).
    static PROCESS_WIDE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

    /// A broker of the test's own, a client of it, and that client's reply subscription.
    async fn on_a_broker() -> (NatsServer, Client, Replies) {
        let nats = NatsServer::start();
        // Made by `connect`, whose events (refusals, slow consumers) reach the routes.
        let client = crate::connect(&nats.url(), "test").await.unwrap();
        let replies = Replies::start(&client).await.unwrap();
        (nats, client, replies)
    }

    /// Publishes `payload` to `call`'s reply subject and returns once it waits in the call's
    /// queue.
    async fn queued(client: &Client, call: &ReplyStream, payload: &'static str) {
        client
            .publish(call.subject().to_owned(), payload.into())
            .await
            .unwrap();
        client.flush().await.unwrap();
        while call.slot.frames().is_empty() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// A wait no test reaches.
    const WAIT_LONG: Duration = Duration::from_secs(60);

    /// The isolation the first shared subscription lacked: a call whose frames pile up
    /// unread loses its route (its stream ends after what was queued, so it fails -32010),
    /// and a call answered on the same subscription meanwhile gets its frame.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_flooded_call_loses_its_route_and_another_calls_answer_still_arrives() {
        let _turn = PROCESS_WIDE.lock().await;
        let (_nats, client, replies) = on_a_broker().await;
        let mut flooded = replies.open(&Subject::from_static("test.call"));
        let mut answered = replies.open(&Subject::from_static("test.call"));
        for i in 0..QUEUE + 100 {
            client
                .publish(flooded.subject().to_owned(), i.to_string().into())
                .await
                .unwrap();
        }
        client
            .publish(answered.subject().to_owned(), "end".into())
            .await
            .unwrap();
        client.flush().await.unwrap();
        let got = tokio::time::timeout(Duration::from_secs(10), answered.next())
            .await
            .expect("the answer arrives")
            .expect("the route is there");
        assert_eq!(&got.payload[..], b"end");
        let mut read = 0;
        while let Ok(Some(m)) = tokio::time::timeout(Duration::from_secs(10), flooded.next()).await
        {
            assert_eq!(
                m.payload,
                read.to_string().as_bytes(),
                "in order, none skipped"
            );
            read += 1;
        }
        assert_eq!(read, QUEUE, "what was queued, then the end of the stream");
        drop(flooded);
        drop(answered);
        assert!(
            lock(&replies.routes).is_empty(),
            "a dropped stream leaves no route"
        );
    }

    /// A refusal ends the calls published to its subject, with the broker's message, and no
    /// other call (N15's -32013 comes from this).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_refusal_ends_the_calls_published_to_its_subject_only() {
        let _turn = PROCESS_WIDE.lock().await;
        let (_nats, client, replies) = on_a_broker().await;
        let mut refused = replies.open(&Subject::from_static("s.one"));
        let mut other = replies.open(&Subject::from_static("s.two"));
        let connection = crate::connection_of(&client).unwrap();
        refuse(connection, "s.one", "Permissions Violation");
        let ended = tokio::time::timeout(Duration::from_secs(10), refused.next()).await;
        assert!(matches!(ended, Ok(None)), "the refused call's stream ends");
        assert_eq!(refused.refusal().as_deref(), Some("Permissions Violation"));
        assert_eq!(other.refusal(), None);
        client
            .publish(other.subject().to_owned(), "end".into())
            .await
            .unwrap();
        let got = tokio::time::timeout(Duration::from_secs(10), other.next())
            .await
            .expect("the other call's answer arrives")
            .expect("its route is there");
        assert_eq!(&got.payload[..], b"end");
        drop(refused);
        drop(other);
        assert!(lock(&replies.routes).is_empty());
    }

    /// A call's wait ends when its deadline passes (the sweeper wakes it, no timer of its
    /// own), and a frame that is there wins over a deadline that has passed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_wait_ends_at_its_deadline_and_a_frame_that_is_there_wins() {
        let _turn = PROCESS_WIDE.lock().await;
        let (_nats, client, replies) = on_a_broker().await;
        let mut call = replies.open(&Subject::from_static("test.call"));
        let begun = std::time::Instant::now();
        let waited = tokio::time::timeout(
            Duration::from_secs(10),
            call.next_within(Duration::from_millis(300)),
        )
        .await
        .expect("the sweeper ends the wait");
        assert!(matches!(waited, Err(Due)), "{waited:?}");
        assert!(begun.elapsed() >= Duration::from_millis(300) - TICK);
        client
            .publish(call.subject().to_owned(), "end".into())
            .await
            .unwrap();
        client.flush().await.unwrap();
        let got = tokio::time::timeout(Duration::from_secs(10), call.next_within(WAIT_LONG))
            .await
            .expect("the frame arrives");
        assert_eq!(&got.unwrap().unwrap().payload[..], b"end");
        // No time left at all: what is queued still comes first.
        queued(&client, &call, "late").await;
        let got = call.next_within(Duration::ZERO).await;
        assert_eq!(&got.unwrap().unwrap().payload[..], b"late");
    }

    /// With no call open for a second the sweeper parks (an idle gateway wakes for nothing
    /// every `TICK`); a call opened then moves the clock itself, and its wait still ends at
    /// its deadline.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn an_idle_sweeper_parks_and_the_next_call_wakes_it_with_the_clock_moved() {
        let _turn = PROCESS_WIDE.lock().await;
        let (_nats, _client, replies) = on_a_broker().await;
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !replies.clock.parked.load(Ordering::SeqCst) {
            assert!(
                std::time::Instant::now() < deadline,
                "the sweeper never parked"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let parked_at = replies.now();
        tokio::time::sleep(TICK * 3).await;
        assert_eq!(replies.now(), parked_at, "a parked sweeper moves no clock");
        let mut call = replies.open(&Subject::from_static("test.call"));
        assert!(
            replies.now() >= parked_at + TICK * 3,
            "opening a call moved the clock"
        );
        assert!(!replies.clock.parked.load(Ordering::SeqCst));
        let begun = std::time::Instant::now();
        let waited = tokio::time::timeout(
            Duration::from_secs(10),
            call.next_within(Duration::from_millis(300)),
        )
        .await
        .expect("the woken sweeper ends the wait");
        assert!(matches!(waited, Err(Due)), "{waited:?}");
        assert!(begun.elapsed() >= Duration::from_millis(300) - TICK);
    }

    /// A lost connection ends a call's wait after what it had queued, says so, and keeps
    /// its route (a call given up on reads on while it cancels on the worker).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lost_connection_ends_the_wait_after_what_was_queued_and_keeps_the_route() {
        let _turn = PROCESS_WIDE.lock().await;
        let (_nats, client, replies) = on_a_broker().await;
        let mut call = replies.open(&Subject::from_static("test.call"));
        let other = replies.open(&Subject::from_static("test.other"));
        queued(&client, &call, "msg").await;
        replies.loss_signal().lost();
        let queued = call.next_within(WAIT_LONG).await;
        assert_eq!(&queued.unwrap().unwrap().payload[..], b"msg");
        let ended = tokio::time::timeout(Duration::from_secs(10), call.next_within(WAIT_LONG))
            .await
            .expect("the wait ends at once");
        assert!(matches!(ended, Ok(None)), "{ended:?}");
        assert!(call.lost() && other.lost());
        client
            .publish(call.subject().to_owned(), "end".into())
            .await
            .unwrap();
        let after = tokio::time::timeout(Duration::from_secs(10), call.next()).await;
        assert_eq!(&after.unwrap().unwrap().payload[..], b"end");
        // A call opened after the loss is not lost.
        assert!(!replies.open(&Subject::from_static("test.call")).lost());
    }

    /// A call that resumes after a loss waits for frames again (the connection is back),
    /// and one whose route closed meanwhile cannot resume.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_call_resumed_after_a_loss_waits_for_its_frames_again_unless_its_route_closed() {
        let _turn = PROCESS_WIDE.lock().await;
        let (_nats, client, replies) = on_a_broker().await;
        let mut call = replies.open(&Subject::from_static("test.call"));
        replies.loss_signal().lost();
        assert!(matches!(call.next_within(WAIT_LONG).await, Ok(None)));
        assert!(call.resume_after_loss());
        assert!(!call.lost());
        let waited = tokio::time::timeout(
            Duration::from_secs(10),
            call.next_within(Duration::from_millis(200)),
        )
        .await
        .expect("the sweeper ends the wait");
        assert!(matches!(waited, Err(Due)), "waits again: {waited:?}");
        queued(&client, &call, "end").await;
        let got = call.next_within(WAIT_LONG).await;
        assert_eq!(&got.unwrap().unwrap().payload[..], b"end");
        let closed = replies.open(&Subject::from_static("test.closed"));
        replies.loss_signal().lost();
        closed.slot.close();
        assert!(!closed.resume_after_loss(), "a closed route cannot resume");
    }

    /// A slow-consumer event ends the wait of every call on that connection at once (after
    /// what it had queued), as a lost connection does, and no call of another connection,
    /// nor one refused there.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_slow_consumer_event_wakes_the_calls_waiting_for_replies_on_its_connection() {
        let _turn = PROCESS_WIDE.lock().await;
        let (nats, client, replies) = on_a_broker().await;
        let other_client = crate::connect(&nats.url(), "test").await.unwrap();
        let other_replies = Replies::start(&other_client).await.unwrap();
        let mut waiting = replies.open(&Subject::from_static("test.call"));
        let mut elsewhere = other_replies.open(&Subject::from_static("test.call"));
        client
            .publish(waiting.subject().to_owned(), "ka".into())
            .await
            .unwrap();
        let first = tokio::time::timeout(Duration::from_secs(10), waiting.next()).await;
        assert!(matches!(first, Ok(Some(_))));
        slow_consumer(crate::connection_of(&client).unwrap());
        // A refusal of the same subject on the first connection leaves the other's call be.
        refuse(
            crate::connection_of(&client).unwrap(),
            "test.call",
            "Permissions Violation",
        );
        let next =
            tokio::time::timeout(Duration::from_secs(10), waiting.next_within(WAIT_LONG)).await;
        assert!(matches!(next, Ok(Ok(None))), "the wait ends at once");
        assert!(
            waiting.lost() && !elsewhere.lost(),
            "and says frames may be lost"
        );
        other_client
            .publish(elsewhere.subject().to_owned(), "end".into())
            .await
            .unwrap();
        let got = tokio::time::timeout(Duration::from_secs(10), elsewhere.next())
            .await
            .expect("the other connection's call goes on");
        assert_eq!(&got.unwrap().payload[..], b"end");
        assert_eq!(elsewhere.refusal(), None);
    }
}
