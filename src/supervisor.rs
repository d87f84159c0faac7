//! The supervisor: the one place restart policy lives. It starts every enabled upstream at once
//! (lazy ones at the first host session), restarts one that fails after an exponential backoff
//! with jitter, puts it in `crash-loop` (catalog withdrawn, calls fail fast) once it fails more
//! often than its restart budget allows, starts idle-stopped upstreams again on demand, restarts
//! one when an operator asks, and stops them all, with their process groups, on shutdown. A
//! failing upstream never touches the others or the daemon.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};

use crate::audit::{AuditHandle, Record};
use crate::router::RouterHandle;
use crate::upstream::{IDLE_STOP, State, UpstreamActor, UpstreamHandle, UpstreamMsg};

/// Longest wait for one supervisor request (restart, shutdown).
const CALL_DEADLINE: Duration = Duration::from_secs(30);

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

/// Why an operator restart was refused.
#[derive(Debug, thiserror::Error)]
pub enum RestartError {
    #[error("no enabled upstream is named `{0}`")]
    Unknown(String),
    #[error("the supervisor did not answer: {0}")]
    Unavailable(String),
}

impl SupervisorHandle {
    /// Starts the supervisor and, through it, every enabled upstream that is not lazy.
    pub async fn start(
        upstreams: Vec<UpstreamHandle>,
        router: RouterHandle,
        audit: AuditHandle,
    ) -> Result<Self, ractor::SpawnErr> {
        let (actor, _) = Actor::spawn(
            Some("supervisor".into()),
            Supervisor,
            (upstreams, router, audit),
        )
        .await?;
        Ok(Self { actor })
    }

    /// Starts the lazy upstreams that have not started yet (a host session has begun).
    pub fn start_lazy(&self) {
        let _ = self.actor.send_message(SupervisorMsg::StartLazy);
    }

    /// Restarts one upstream now, whatever its state (also leaves `crash-loop`).
    pub async fn restart(&self, name: &str) -> Result<(), RestartError> {
        let deadline = u64::try_from(CALL_DEADLINE.as_millis()).unwrap_or(u64::MAX);
        match ractor::call_t!(
            self.actor,
            SupervisorMsg::Restart,
            deadline,
            name.to_owned()
        ) {
            Ok(true) => Ok(()),
            Ok(false) => Err(RestartError::Unknown(name.to_owned())),
            Err(e) => Err(RestartError::Unavailable(e.to_string())),
        }
    }

    /// Stops every upstream (killing their process groups) and then the supervisor.
    pub async fn shutdown(&self) {
        let deadline = u64::try_from(CALL_DEADLINE.as_millis()).unwrap_or(u64::MAX);
        let _ = ractor::call_t!(self.actor, SupervisorMsg::Shutdown, deadline);
        self.actor.stop(None);
    }
}

struct Supervisor;

#[derive(Debug)]
enum SupervisorMsg {
    Start(String),
    /// A call wants a stopped upstream.
    Wake(String),
    StartLazy,
    Restart(String, RpcReplyPort<bool>),
    Shutdown(RpcReplyPort<()>),
}

struct Slot {
    handle: UpstreamHandle,
    actor: Option<ActorRef<UpstreamMsg>>,
    /// Failures since it was last ready; drives the backoff.
    consecutive_failures: u32,
    /// When it was restarted within the budget window.
    restarts: VecDeque<Instant>,
}

struct SupervisorState {
    slots: HashMap<String, Slot>,
    by_actor: HashMap<ActorId, String>,
    router: RouterHandle,
    audit: AuditHandle,
    shutting_down: bool,
}

impl Actor for Supervisor {
    type Msg = SupervisorMsg;
    type State = SupervisorState;
    type Arguments = (Vec<UpstreamHandle>, RouterHandle, AuditHandle);

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        (upstreams, router, audit): Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        let mut slots = HashMap::new();
        for handle in upstreams.into_iter().filter(|h| h.config().enabled) {
            let name = handle.name().to_owned();
            let wake = myself.clone();
            let woken = name.clone();
            handle.set_waker(move || {
                let _ = wake.send_message(SupervisorMsg::Wake(woken.clone()));
            });
            if handle.config().policy.lazy_start {
                handle.set_state(
                    State::Stopped,
                    Some("not started yet: it starts with the first host session".into()),
                );
            } else {
                let _ = myself.send_message(SupervisorMsg::Start(name.clone()));
            }
            let slot = Slot {
                handle,
                actor: None,
                consecutive_failures: 0,
                restarts: VecDeque::new(),
            };
            slots.insert(name, slot);
        }
        Ok(SupervisorState {
            slots,
            by_actor: HashMap::new(),
            router,
            audit,
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
            SupervisorMsg::Start(name) => start(&myself, state, &name).await,
            SupervisorMsg::Wake(name) => {
                if state
                    .slots
                    .get(&name)
                    .is_some_and(|s| s.actor.is_none() && s.handle.state() == State::Stopped)
                {
                    start(&myself, state, &name).await;
                }
            }
            SupervisorMsg::StartLazy => {
                let lazy: Vec<String> = state
                    .slots
                    .iter()
                    .filter(|(_, s)| {
                        s.actor.is_none()
                            && s.handle.config().policy.lazy_start
                            && s.handle.state() == State::Stopped
                    })
                    .map(|(n, _)| n.clone())
                    .collect();
                for name in lazy {
                    start(&myself, state, &name).await;
                }
            }
            SupervisorMsg::Restart(name, reply) => {
                let Some(slot) = state.slots.get_mut(&name) else {
                    let _ = reply.send(false);
                    return Ok(());
                };
                tracing::info!(upstream = %name, "Restarting upstream on request.");
                state.audit.record(Record::event(
                    "upstream.restarted",
                    Some(&name),
                    None,
                    Some("operator request".into()),
                ));
                slot.consecutive_failures = 0;
                slot.restarts.clear();
                if let Some(actor) = slot.actor.take() {
                    state.by_actor.remove(&actor.get_id());
                    let _ = actor
                        .stop_and_wait(Some("operator restart".into()), Some(CALL_DEADLINE))
                        .await;
                }
                start(&myself, state, &name).await;
                let _ = reply.send(true);
            }
            SupervisorMsg::Shutdown(reply) => {
                state.shutting_down = true;
                let actors: Vec<_> = state
                    .slots
                    .values_mut()
                    .filter_map(|s| s.actor.take())
                    .collect();
                let stops = actors
                    .iter()
                    .map(|a| a.stop_and_wait(Some("shutdown".into()), Some(CALL_DEADLINE)));
                futures_util::future::join_all(stops).await;
                for slot in state.slots.values() {
                    slot.handle.set_state(State::Stopped, None);
                    let name = Some(slot.handle.name());
                    state.audit.record(Record::event(
                        "upstream.stopped",
                        name,
                        None,
                        Some("shutdown".into()),
                    ));
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
        let (cell, failure, reason) = match event {
            SupervisionEvent::ActorFailed(cell, err) => (cell, Some(err.to_string()), None),
            SupervisionEvent::ActorTerminated(cell, _, reason) => (cell, None, reason),
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
        if failure.is_none() && reason.as_deref() == Some(IDLE_STOP) {
            slot.handle.set_state(
                State::Stopped,
                Some("stopped while idle; the next call starts it".into()),
            );
            state.audit.record(Record::event(
                "upstream.stopped",
                Some(&name),
                None,
                Some("idle".into()),
            ));
            return Ok(());
        }
        let why = failure.unwrap_or_else(|| "its actor stopped unexpectedly".to_owned());
        on_failure(&myself, slot, &state.router, &state.audit, why);
        Ok(())
    }
}

/// Spawns the upstream's actor; a failure to spawn counts like a crash.
async fn start(myself: &ActorRef<SupervisorMsg>, state: &mut SupervisorState, name: &str) {
    if state.shutting_down {
        return;
    }
    let Some(slot) = state.slots.get_mut(name) else {
        return;
    };
    if slot.actor.is_some() {
        return;
    }
    if !matches!(slot.handle.state(), State::Restarting) {
        slot.handle.set_state(State::Starting, None);
    }
    let args = (slot.handle.clone(), state.router.clone());
    match Actor::spawn_linked(None, UpstreamActor, args, myself.get_cell()).await {
        Ok((actor, _)) => {
            state.by_actor.insert(actor.get_id(), name.to_owned());
            slot.actor = Some(actor);
            let pid = slot.handle.status().pid.map(|p| format!("pid {p}"));
            state
                .audit
                .record(Record::event("upstream.started", Some(name), None, pid));
        }
        Err(e) => {
            let why = match e {
                ractor::SpawnErr::StartupFailed(inner) => inner.to_string(),
                other => other.to_string(),
            };
            on_failure(myself, slot, &state.router, &state.audit, why);
        }
    }
}

/// Records a failure: restart after the backoff, or enter `crash-loop` when over budget.
fn on_failure(
    myself: &ActorRef<SupervisorMsg>,
    slot: &mut Slot,
    router: &RouterHandle,
    audit: &AuditHandle,
    why: String,
) {
    audit.record(Record::event(
        "upstream.crashed",
        Some(slot.handle.name()),
        None,
        Some(why.clone()),
    ));
    let policy = &slot.handle.config().policy;
    if matches!(slot.handle.state(), State::Ready | State::Degraded) {
        slot.consecutive_failures = 0;
    }
    slot.consecutive_failures += 1;
    let now = Instant::now();
    while slot
        .restarts
        .front()
        .is_some_and(|t| now.duration_since(*t) > policy.restart_window)
    {
        slot.restarts.pop_front();
    }
    if slot.restarts.len() >= policy.restart_budget as usize {
        let window = policy.restart_window.as_secs();
        let budget = policy.restart_budget;
        tracing::error!(upstream = %slot.handle.name(), error = %why, budget, window_s = window, "Upstream is in a crash loop; not restarting it until an operator does (mcpmux restart NAME).");
        slot.handle.set_state(
            State::CrashLoop,
            Some(format!(
                "{why} (failed {} times within {window}s)",
                budget + 1
            )),
        );
        router.withdraw(slot.handle.name());
        audit.record(Record::event(
            "upstream.crash_loop",
            Some(slot.handle.name()),
            None,
            None,
        ));
        return;
    }
    slot.restarts.push_back(now);
    let delay = backoff(
        slot.consecutive_failures,
        policy.restart_initial_backoff,
        policy.restart_max_backoff,
    );
    slot.handle.update_restarts();
    slot.handle.set_state(State::Restarting, Some(why.clone()));
    tracing::error!(upstream = %slot.handle.name(), error = %why, retry_in_ms = delay.as_millis() as u64, "Upstream failed; it will be restarted.");
    let name = slot.handle.name().to_owned();
    myself.send_after(delay, move || SupervisorMsg::Start(name));
}

/// Exponential backoff from `initial` to `max`, with ±20% jitter.
fn backoff(failures: u32, initial: Duration, max: Duration) -> Duration {
    let exp = initial.saturating_mul(1 << failures.saturating_sub(1).min(16));
    exp.min(max).mul_f64(rand::random_range(0.8..1.2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        let (initial, max) = (Duration::from_secs(1), Duration::from_secs(30));
        let first = backoff(1, initial, max);
        assert!(first >= Duration::from_millis(800) && first <= Duration::from_millis(1200));
        assert!(backoff(3, initial, max) >= Duration::from_millis(3200));
        assert!(backoff(50, initial, max) <= max.mul_f64(1.2));
    }
}
