//! Database connections checked out from the SQL connector's state actor and given back.
//!
//! The actor only counts and hands out: it never connects or runs SQL. A caller gets
//! either an idle connection or the right to open one (up to `max` at once), or waits in
//! line for one; the connect and the statements run in the caller's task. A lease that is
//! dropped without being given back (an error that may have left the session dirty, a
//! cancelled call, a panic on the blocking thread) frees its slot and the connection is
//! closed with it.

use crate::actor::Supervised;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::oneshot;
use toolyard::HandlerError;

/// Tells pools apart across restarts: a connection leased from a failed actor's pool is not
/// counted in its successor's.
static EPOCHS: AtomicU64 = AtomicU64::new(1);

/// What a caller may use.
pub(crate) enum Grant<C> {
    /// An idle connection, clean.
    Reuse(C),
    /// A free slot: open a connection of your own.
    Open,
}

enum Checkout<C> {
    Now(Grant<C>),
    Wait(oneshot::Receiver<Grant<C>>),
}

/// At most `max` connections, the idle ones kept for reuse.
pub(crate) struct Pool<C> {
    idle: Vec<C>,
    /// Slots in use (leased connections and rights to open one).
    out: usize,
    max: usize,
    waiters: VecDeque<oneshot::Sender<Grant<C>>>,
    epoch: u64,
}

impl<C> Pool<C> {
    /// An empty pool of at most `max` connections (at least one).
    pub(crate) fn new(max: usize) -> Pool<C> {
        Pool {
            idle: Vec::new(),
            out: 0,
            max: max.max(1),
            waiters: VecDeque::new(),
            epoch: EPOCHS.fetch_add(1, Ordering::Relaxed),
        }
    }

    fn checkout(&mut self) -> (u64, Checkout<C>) {
        let now = if let Some(c) = self.idle.pop() {
            self.out += 1;
            Checkout::Now(Grant::Reuse(c))
        } else if self.out < self.max {
            self.out += 1;
            Checkout::Now(Grant::Open)
        } else {
            let (tx, rx) = oneshot::channel();
            self.waiters.push_back(tx);
            Checkout::Wait(rx)
        };
        (self.epoch, now)
    }

    /// A slot comes back, with its connection when that is clean.
    fn give_back(&mut self, epoch: u64, conn: Option<C>) {
        if epoch != self.epoch {
            return;
        }
        let mut grant = match conn {
            Some(c) => Grant::Reuse(c),
            None => Grant::Open,
        };
        // The slot passes to the first waiter still waiting.
        while let Some(w) = self.waiters.pop_front() {
            match w.send(grant) {
                Ok(()) => return,
                Err(back) => grant = back,
            }
        }
        self.out = self.out.saturating_sub(1);
        if let Grant::Reuse(c) = grant {
            self.idle.push(c);
        }
    }

    /// How many connections are idle (tests).
    #[cfg(test)]
    pub(crate) fn idle(&self) -> usize {
        self.idle.len()
    }
}

/// Where a state keeps one of its pools.
pub(crate) type Access<S, C> = fn(&mut S) -> &mut Pool<C>;

/// A slot of a pool, held by one call. Give the connection back with [`Lease::keep`];
/// dropped without that, the slot is freed and the connection closed.
pub(crate) struct Lease<S: Send + 'static, C: Send + 'static> {
    state: Supervised<S>,
    access: Access<S, C>,
    epoch: u64,
    kept: Option<C>,
}

impl<S: Send + 'static, C: Send + 'static> Lease<S, C> {
    /// The connection is clean: the next call may reuse it.
    pub(crate) fn keep(mut self, conn: C) {
        self.kept = Some(conn);
    }
}

impl<S: Send + 'static, C: Send + 'static> Lease<S, C> {
    /// This lease never held a slot (it was waiting): nothing to give back.
    fn forfeit(mut self) {
        self.epoch = 0;
    }
}

impl<S: Send + 'static, C: Send + 'static> Drop for Lease<S, C> {
    fn drop(&mut self) {
        let (access, epoch, conn) = (self.access, self.epoch, self.kept.take());
        if epoch == 0 {
            return;
        }
        self.state.cast(move |s| access(s).give_back(epoch, conn));
    }
}

/// A slot of the pool `access` points at: a connection to reuse or the right to open one,
/// waiting at most `wait` for one to come free.
pub(crate) async fn checkout<S: Send + 'static, C: Send + 'static>(
    state: &Supervised<S>,
    access: Access<S, C>,
    wait: Duration,
    busy: impl FnOnce(usize) -> HandlerError,
) -> Result<(Lease<S, C>, Grant<C>), HandlerError> {
    let (epoch, max, now) = state
        .call(move |s| {
            let pool = access(s);
            let (epoch, now) = pool.checkout();
            (epoch, pool.max, now)
        })
        .await?;
    let lease = Lease {
        state: state.clone(),
        access,
        epoch,
        kept: None,
    };
    let grant = match now {
        Checkout::Now(grant) => grant,
        Checkout::Wait(mut rx) => match tokio::time::timeout(wait, &mut rx).await {
            Ok(Ok(grant)) => grant,
            // The actor failed with this waiter in line: its successor has a fresh pool.
            Ok(Err(_)) => {
                lease.forfeit();
                return Err(crate::actor::StateError::Failed { connector: "sql" }.into());
            }
            Err(_) => {
                // A slot may have been granted just now: give it back rather than lose it.
                rx.close();
                match rx.try_recv() {
                    Ok(Grant::Reuse(c)) => lease.keep(c),
                    Ok(Grant::Open) => drop(lease),
                    Err(_) => lease.forfeit(),
                }
                return Err(busy(max));
            }
        },
    };
    Ok((lease, grant))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_pass_to_waiters_and_idle_connections_are_reused() {
        let mut pool: Pool<u32> = Pool::new(1);
        let (epoch, first) = pool.checkout();
        assert!(matches!(first, Checkout::Now(Grant::Open)));
        let (_, second) = pool.checkout();
        let Checkout::Wait(mut rx) = second else {
            panic!("the second checkout waits")
        };
        pool.give_back(epoch, Some(7));
        assert!(matches!(rx.try_recv(), Ok(Grant::Reuse(7))));
        pool.give_back(epoch, Some(7));
        assert_eq!(pool.idle(), 1);
        let (_, third) = pool.checkout();
        assert!(matches!(third, Checkout::Now(Grant::Reuse(7))));
    }

    #[test]
    fn a_lease_from_an_earlier_pool_is_not_counted() {
        let mut pool: Pool<u32> = Pool::new(1);
        let (_, _) = pool.checkout();
        pool.give_back(0, Some(1));
        assert_eq!(pool.idle(), 0);
        let (_, next) = pool.checkout();
        assert!(matches!(next, Checkout::Wait(_)), "the slot is still held");
    }
}
