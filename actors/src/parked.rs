//! The ParkedCalls actor: calls suspended until the client sends its input (modern MRTR) for
//! work that cannot simply be re-run, such as a legacy upstream's request relayed by a
//! gateway. A parked call waits under a key; the retry that carries the key resumes it; keys
//! expire so an abandoned call never leaks.

use ractor::{Actor, ActorProcessingErr, ActorRef};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;
use toolyard_proto::InputResponses;

/// Messages of ParkedCalls.
#[derive(Debug)]
pub enum ParkedMsg {
    /// Park a call under `key` until `resume` or the deadline.
    Park {
        /// The key the retry will carry.
        key: String,
        /// Receives the client's answers.
        resume: oneshot::Sender<InputResponses>,
        /// How long to wait.
        ttl: Duration,
    },
    /// Resume a parked call; `found` learns whether the key was parked.
    Resume {
        /// The key.
        key: String,
        /// The client's answers.
        responses: InputResponses,
        /// Whether a call was waiting.
        found: oneshot::Sender<bool>,
    },
    /// Drop expired calls (sent by the actor's own timer).
    Sweep,
    /// How many calls are parked.
    Count(oneshot::Sender<usize>),
}

pub(crate) struct ParkedCalls;

pub(crate) struct ParkedState {
    calls: HashMap<String, (oneshot::Sender<InputResponses>, Instant)>,
}

impl Actor for ParkedCalls {
    type Msg = ParkedMsg;
    type State = ParkedState;
    type Arguments = ();

    async fn pre_start(
        &self,
        myself: ActorRef<ParkedMsg>,
        _args: (),
    ) -> Result<ParkedState, ActorProcessingErr> {
        myself.send_interval(Duration::from_secs(5), || ParkedMsg::Sweep);
        Ok(ParkedState {
            calls: HashMap::new(),
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<ParkedMsg>,
        msg: ParkedMsg,
        state: &mut ParkedState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            ParkedMsg::Park { key, resume, ttl } => {
                state.calls.insert(key, (resume, Instant::now() + ttl));
            }
            ParkedMsg::Resume {
                key,
                responses,
                found,
            } => {
                let hit = match state.calls.remove(&key) {
                    Some((tx, deadline)) if deadline > Instant::now() => tx.send(responses).is_ok(),
                    _ => false,
                };
                let _ = found.send(hit);
            }
            ParkedMsg::Sweep => {
                let now = Instant::now();
                state
                    .calls
                    .retain(|_, (tx, deadline)| *deadline > now && !tx.is_closed());
            }
            ParkedMsg::Count(tx) => {
                let _ = tx.send(state.calls.len());
            }
        }
        Ok(())
    }
}
