//! The supervisor: the root of the upstream actors. It starts every enabled upstream at once,
//! restarts one that fails after a backoff with jitter (a failure never touches the others or the
//! daemon), and stops them all, with their process groups, on shutdown.

use std::collections::HashMap;
use std::time::Duration;

use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};

use crate::router::RouterHandle;
use crate::upstream::{State, UpstreamActor, UpstreamHandle, UpstreamMsg};

const BACKOFF_INITIAL: Duration = Duration::from_secs(1);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// How long shutdown waits for each upstream actor to stop (it kills its process group within).
const STOP_DEADLINE: Duration = Duration::from_secs(5);

/// The supervisor's public face.
#[derive(Clone)]
pub struct SupervisorHandle {
    actor: ActorRef<SupervisorMsg>,
}

impl std::fmt::Debug for SupervisorHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SupervisorHandle")
    }
}

impl SupervisorHandle {
    /// Starts the supervisor and, through it, every enabled upstream.
    pub async fn start(
        upstreams: Vec<UpstreamHandle>,
        router: RouterHandle,
    ) -> Result<Self, ractor::SpawnErr> {
        let (actor, _) =
            Actor::spawn(Some("supervisor".into()), Supervisor, (upstreams, router)).await?;
        Ok(Self { actor })
    }

    /// Stops every upstream (killing their process groups) and then the supervisor.
    pub async fn shutdown(&self) {
        let deadline = STOP_DEADLINE + Duration::from_secs(1);
        let _ = ractor::call_t!(
            self.actor,
            SupervisorMsg::Shutdown,
            deadline.as_millis() as u64
        );
        self.actor.stop(None);
    }
}

struct Supervisor;

#[derive(Debug)]
enum SupervisorMsg {
    Start(String),
    Shutdown(RpcReplyPort<()>),
}

struct Slot {
    handle: UpstreamHandle,
    actor: Option<ActorRef<UpstreamMsg>>,
    /// Failures since it was last ready; drives the backoff.
    consecutive_failures: u32,
}

struct SupervisorState {
    slots: HashMap<String, Slot>,
    by_actor: HashMap<ActorId, String>,
    router: RouterHandle,
    shutting_down: bool,
}

impl Actor for Supervisor {
    type Msg = SupervisorMsg;
    type State = SupervisorState;
    type Arguments = (Vec<UpstreamHandle>, RouterHandle);

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        (upstreams, router): Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        let mut slots = HashMap::new();
        for handle in upstreams.into_iter().filter(|h| h.config().enabled) {
            let _ = myself.send_message(SupervisorMsg::Start(handle.name().to_owned()));
            slots.insert(
                handle.name().to_owned(),
                Slot {
                    handle,
                    actor: None,
                    consecutive_failures: 0,
                },
            );
        }
        Ok(SupervisorState {
            slots,
            by_actor: HashMap::new(),
            router,
            shutting_down: false,
        })
    }

    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            SupervisorMsg::Start(name) if !state.shutting_down => {
                let Some(slot) = state.slots.get_mut(&name) else {
                    return Ok(());
                };
                if slot.handle.state() != State::Restarting {
                    slot.handle.set_state(State::Starting, None);
                }
                let args = (slot.handle.clone(), state.router.clone());
                match Actor::spawn_linked(None, UpstreamActor, args, myself.get_cell()).await {
                    Ok((actor, _)) => {
                        state.by_actor.insert(actor.get_id(), name);
                        slot.actor = Some(actor);
                    }
                    Err(e) => {
                        let why = match e {
                            ractor::SpawnErr::StartupFailed(inner) => inner.to_string(),
                            other => other.to_string(),
                        };
                        schedule_restart(&myself, slot, why);
                    }
                }
            }
            SupervisorMsg::Start(_) => {}
            SupervisorMsg::Shutdown(reply) => {
                state.shutting_down = true;
                let actors: Vec<_> = state
                    .slots
                    .values_mut()
                    .filter_map(|s| s.actor.take())
                    .collect();
                futures_util::future::join_all(
                    actors
                        .iter()
                        .map(|a| a.stop_and_wait(Some("shutdown".into()), Some(STOP_DEADLINE))),
                )
                .await;
                for slot in state.slots.values() {
                    slot.handle.set_state(State::Stopped, None);
                }
                let _ = reply.send(());
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<Self::Msg>,
        event: SupervisionEvent,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        let (cell, failure) = match event {
            SupervisionEvent::ActorFailed(cell, err) => (cell, Some(err.to_string())),
            SupervisionEvent::ActorTerminated(cell, _, _) => (cell, None),
            _ => return Ok(()),
        };
        let Some(name) = state.by_actor.remove(&cell.get_id()) else {
            return Ok(());
        };
        let Some(slot) = state.slots.get_mut(&name) else {
            return Ok(());
        };
        slot.actor = None;
        if state.shutting_down {
            return Ok(());
        }
        let why = failure.unwrap_or_else(|| "its actor stopped unexpectedly".to_owned());
        schedule_restart(&myself, slot, why);
        Ok(())
    }
}

/// Records a failure and starts the upstream again after the backoff.
fn schedule_restart(myself: &ActorRef<SupervisorMsg>, slot: &mut Slot, why: String) {
    if slot.handle.state() == State::Ready {
        slot.consecutive_failures = 0;
    }
    slot.consecutive_failures += 1;
    let delay = backoff(slot.consecutive_failures);
    slot.handle.update_restarts();
    slot.handle.set_state(State::Restarting, Some(why.clone()));
    tracing::error!(upstream = %slot.handle.name(), error = %why, retry_in_ms = delay.as_millis() as u64, "Upstream failed; it will be restarted.");
    let name = slot.handle.name().to_owned();
    myself.send_after(delay, move || SupervisorMsg::Start(name));
}

/// Exponential backoff from [`BACKOFF_INITIAL`] to [`BACKOFF_MAX`], with ±20% jitter.
fn backoff(failures: u32) -> Duration {
    let exp = BACKOFF_INITIAL.saturating_mul(1 << failures.saturating_sub(1).min(16));
    let base = exp.min(BACKOFF_MAX);
    base.mul_f64(rand::random_range(0.8..1.2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        assert!(
            backoff(1) <= Duration::from_millis(1200) && backoff(1) >= Duration::from_millis(800)
        );
        assert!(backoff(3) >= Duration::from_millis(3200));
        assert!(backoff(50) <= BACKOFF_MAX.mul_f64(1.2));
    }
}
