//! The supervisor: the one place restart policy lives, for shared upstreams and for the
//! per-session instances of `isolation = "per-session"` ones alike. It starts every enabled
//! upstream at once (lazy ones when a host session begins or a call wants them), starts a
//! session's own instance on its first call, restarts an upstream or instance that fails after
//! an exponential backoff with jitter, puts it in `crash-loop` (catalog withdrawn, calls fail
//! fast) once it fails more often than its restart budget allows, restarts one when an operator
//! asks, stops a session's instances when the session ends, takes in and retires upstreams as a
//! reloaded config says, and stops everything, with their process groups, on shutdown. A failing
//! upstream never touches the others or the daemon.
//!
//! - `failure`: backoff and crash-loop. `retire`: draining what a reload removed or changed.
//! - `credentials`: a changed token file, renewed OAuth sign-ins.
//! - `handle`: the supervisor's public face ([`SupervisorHandle`]).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ractor::{
    Actor, ActorCell, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent,
};

mod credentials;
mod failure;
mod handle;
mod retire;

pub use handle::{RestartError, SupervisorHandle};

use credentials::{CREDENTIAL_CHECK, renew, token_file};
use failure::on_failure;

use crate::audit::{AuditHandle, Record};
use crate::config::UpstreamSecrets;
use crate::sync::lock;
use crate::upstream::{Phase, StopReason, UpstreamError, UpstreamHandle, Upstreams};

/// Longest wait for one supervisor request (restart, shutdown).
const CALL_DEADLINE: Duration = Duration::from_secs(30);
/// How long stopping a session's instances may take.
const INSTANCE_STOP: Duration = Duration::from_secs(5);

/// One supervised upstream: the shared instance (`session: None`) or a session's own.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    upstream: String,
    session: Option<String>,
}

/// Per-session instances by (upstream, session), readable without asking the actor.
type Instances = Arc<Mutex<HashMap<(String, String), UpstreamHandle>>>;

struct Supervisor;

#[derive(Debug)]
enum SupervisorMsg {
    Start(Key),
    /// A call (or a new host session) wants a stopped upstream.
    Wake(String),
    Instance(
        UpstreamHandle,
        String,
        Option<Arc<UpstreamSecrets>>,
        RpcReplyPort<Result<UpstreamHandle, UpstreamError>>,
    ),
    /// Stops the instances serving a session (or principal) key: of one upstream, or all.
    StopInstances(String, Option<String>, RpcReplyPort<()>),
    Restart(String, RpcReplyPort<bool>),
    /// The upstream set changed: drain and stop what left it, start what joined it.
    Reconcile(Duration, RpcReplyPort<retire::Drains>),
    /// Whether an unauthorized upstream's token file changed since `seen` (then it starts again).
    CheckCredential(Key, Option<Vec<u8>>),
    /// An upstream that needed a sign-in has new tokens: start it again.
    Renewed(Key),
    Shutdown(RpcReplyPort<()>),
}

struct Slot {
    handle: UpstreamHandle,
    actor: Option<ActorCell>,
    /// Its failures and restarts, which decide what the next failure comes to.
    history: failure::History,
    /// When its sign-in was renewed without a person.
    renewals: VecDeque<Instant>,
}

impl Slot {
    fn new(handle: UpstreamHandle) -> Self {
        Self {
            handle,
            actor: None,
            history: failure::History::default(),
            renewals: VecDeque::new(),
        }
    }
}

struct SupervisorState {
    /// The configured upstreams as the running config holds them (the daemon's watch).
    upstreams: tokio::sync::watch::Receiver<Upstreams>,
    slots: HashMap<Key, Slot>,
    by_actor: HashMap<ActorId, Key>,
    instances: Instances,
    audit: AuditHandle,
    shutting_down: bool,
}

impl Actor for Supervisor {
    type Msg = SupervisorMsg;
    type State = SupervisorState;
    type Arguments = (
        tokio::sync::watch::Receiver<Upstreams>,
        AuditHandle,
        Instances,
    );

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        (upstreams, audit, instances): Self::Arguments,
    ) -> Result<Self::State, ActorProcessingErr> {
        let set = Arc::clone(&upstreams.borrow());
        let mut state = SupervisorState {
            upstreams,
            slots: HashMap::new(),
            by_actor: HashMap::new(),
            instances,
            audit,
            shutting_down: false,
        };
        for handle in set.iter() {
            adopt(&myself, &mut state, handle.clone());
        }
        Ok(state)
    }

    // Long: the supervisor actor's one message handler: one arm per message, each short; ractor
    // gives an actor one entry point.
    async fn handle(
        &self,
        myself: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            SupervisorMsg::Start(key) => start(&myself, state, &key).await,
            SupervisorMsg::Wake(name) => {
                let key = Key {
                    upstream: name,
                    session: None,
                };
                if state
                    .slots
                    .get(&key)
                    .is_some_and(|s| s.actor.is_none() && s.handle.phase() == Phase::Stopped)
                {
                    start(&myself, state, &key).await;
                }
            }
            SupervisorMsg::Instance(shared, session, secrets, reply) => {
                let key = Key {
                    upstream: shared.name().to_owned(),
                    session: Some(session.clone()),
                };
                if let Some(slot) = state.slots.get(&key) {
                    let _ = reply.send(Ok(slot.handle.clone()));
                    return Ok(());
                }
                // Each session that calls it would start one more process: bounded.
                let limit = shared.config().max_instances;
                let running = (lock(&state.instances).keys())
                    .filter(|(upstream, _)| *upstream == key.upstream)
                    .count();
                if running >= limit {
                    tracing::warn!(upstream = %key.upstream, session = %session, limit, "Refused an instance: the upstream runs all it may (max_instances).");
                    let upstream = key.upstream;
                    let _ = reply.send(Err(UpstreamError::TooManyInstances { upstream, limit }));
                    return Ok(());
                }
                let mut config = shared.config().clone();
                if let Some(own) = &secrets {
                    if let Err(reason) = own.apply(&mut config) {
                        let upstream = key.upstream;
                        tracing::warn!(upstream = %upstream, instance = %session, %reason, "Could not start an instance with its principal's secrets.");
                        let _ = reply.send(Err(UpstreamError::Failed { upstream, reason }));
                        return Ok(());
                    }
                }
                let handle = shared.instance_for(&session, config);
                lock(&state.instances).insert((key.upstream.clone(), session), handle.clone());
                state.slots.insert(key.clone(), Slot::new(handle.clone()));
                start(&myself, state, &key).await;
                let _ = reply.send(Ok(handle));
            }
            SupervisorMsg::StopInstances(session, upstream, reply) => {
                stop_instances(state, &session, upstream.as_deref()).await;
                let _ = reply.send(());
            }
            SupervisorMsg::Restart(name, reply) => {
                let key = Key {
                    upstream: name.clone(),
                    session: None,
                };
                let Some(slot) = state.slots.get_mut(&key) else {
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
                slot.history.reset();
                if let Some(actor) = slot.actor.take() {
                    state.by_actor.remove(&actor.get_id());
                    let reason = StopReason::Operator.as_str().to_owned();
                    let _ = actor.stop_and_wait(Some(reason), Some(CALL_DEADLINE)).await;
                }
                start(&myself, state, &key).await;
                let _ = reply.send(true);
            }
            SupervisorMsg::Reconcile(grace, reply) => {
                let upstreams = Arc::clone(&state.upstreams.borrow());
                let (retire, add) = retire::changes(&state.slots, &upstreams);
                let mut drains = retire::Drains::new();
                for name in &retire {
                    drains.extend(retire::retire(state, name, grace));
                }
                for handle in add {
                    adopt(&myself, state, handle);
                }
                let _ = reply.send(drains);
            }
            SupervisorMsg::CheckCredential(key, seen) => {
                let Some(slot) = state.slots.get(&key) else {
                    return Ok(());
                };
                if slot.actor.is_some() || slot.handle.phase() != Phase::Unauthorized {
                    return Ok(());
                }
                let now = token_file(&slot.handle).and_then(|p| std::fs::read(p).ok());
                if now != seen {
                    tracing::info!(upstream = %key.upstream, "Its bearer_token_file changed; starting it again.");
                    start(&myself, state, &key).await;
                } else {
                    myself.send_after(CREDENTIAL_CHECK, move || {
                        SupervisorMsg::CheckCredential(key, seen)
                    });
                }
            }
            SupervisorMsg::Renewed(key) => {
                let Some(slot) = state.slots.get(&key) else {
                    return Ok(());
                };
                if slot.actor.is_none() && slot.handle.phase() == Phase::NeedsLogin {
                    tracing::info!(upstream = %key.upstream, "Its sign-in was renewed; starting it again.");
                    start(&myself, state, &key).await;
                }
            }
            SupervisorMsg::Shutdown(reply) => {
                state.shutting_down = true;
                let actors: Vec<_> = state
                    .slots
                    .values_mut()
                    .filter_map(|s| s.actor.take())
                    .collect();
                let reason = StopReason::Shutdown.as_str();
                let stops = actors
                    .iter()
                    .map(|a| a.stop_and_wait(Some(reason.to_owned()), Some(CALL_DEADLINE)));
                futures_util::future::join_all(stops).await;
                for (key, slot) in &state.slots {
                    slot.handle.set_phase(Phase::Stopped, None);
                    state.audit.record(Record::event(
                        "upstream.stopped",
                        Some(&key.upstream),
                        key.session.as_deref(),
                        Some(reason.into()),
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
        let Some(key) = state.by_actor.remove(&cell.get_id()) else {
            return Ok(());
        };
        let Some(slot) = state.slots.get_mut(&key) else {
            return Ok(());
        };
        slot.actor = None;
        if state.shutting_down {
            return Ok(());
        }
        let stopped = failure
            .is_none()
            .then(|| StopReason::parse(reason.as_deref()))
            .flatten();
        if stopped == Some(StopReason::Unauthorized) {
            state.audit.record(Record::event(
                "upstream.unauthorized",
                Some(&key.upstream),
                key.session.as_deref(),
                slot.handle.status().last_error,
            ));
            if slot.handle.phase() == Phase::NeedsLogin {
                renew(&myself, slot, key);
                return Ok(());
            }
            // A token read from a file is watched: a new token starts the upstream again.
            if let Some(path) = token_file(&slot.handle) {
                let seen = std::fs::read(path).ok();
                myself.send_after(CREDENTIAL_CHECK, move || {
                    SupervisorMsg::CheckCredential(key, seen)
                });
            }
            return Ok(());
        }
        if stopped == Some(StopReason::SessionExpired) {
            // At once, but within the budget: a server that forgets every session is a crash loop.
            if (slot.history).on_expiry(Instant::now(), &slot.handle.config().policy) {
                state.audit.record(Record::event(
                    "upstream.reconnected",
                    Some(&key.upstream),
                    key.session.as_deref(),
                    Some("http session expired".into()),
                ));
                let _ = myself.send_message(SupervisorMsg::Start(key));
                return Ok(());
            }
            let why = "its HTTP session expired again and again".to_owned();
            on_failure(&myself, &key, slot, &state.audit, why);
            return Ok(());
        }
        if stopped == Some(StopReason::Idle) {
            slot.handle.set_phase(
                Phase::Stopped,
                Some("stopped while idle; the next call starts it".into()),
            );
            state.audit.record(Record::event(
                "upstream.stopped",
                Some(&key.upstream),
                None,
                Some("idle".into()),
            ));
            return Ok(());
        }
        let why = failure.unwrap_or_else(|| "its actor stopped unexpectedly".to_owned());
        on_failure(&myself, &key, slot, &state.audit, why);
        Ok(())
    }
}

/// Takes `handle` under supervision, if it is enabled: started now, or (lazy) when first wanted.
fn adopt(myself: &ActorRef<SupervisorMsg>, state: &mut SupervisorState, handle: UpstreamHandle) {
    if !handle.config().enabled {
        return;
    }
    let name = handle.name().to_owned();
    let wake = myself.clone();
    let woken = name.clone();
    handle.set_waker(move || {
        let _ = wake.send_message(SupervisorMsg::Wake(woken.clone()));
    });
    let key = Key {
        upstream: name,
        session: None,
    };
    if handle.config().policy.lazy_start {
        handle.set_phase(
            Phase::Stopped,
            Some("not started yet: it starts with the first host session".into()),
        );
    } else {
        let _ = myself.send_message(SupervisorMsg::Start(key.clone()));
    }
    state.slots.insert(key, Slot::new(handle));
}

/// Spawns the actor of `key`'s upstream; a failure to spawn counts like a crash.
async fn start(myself: &ActorRef<SupervisorMsg>, state: &mut SupervisorState, key: &Key) {
    if state.shutting_down {
        return;
    }
    let Some(slot) = state.slots.get_mut(key) else {
        return;
    };
    if slot.actor.is_some() {
        return;
    }
    if !matches!(slot.handle.phase(), Phase::Restarting) {
        slot.handle.set_phase(Phase::Starting, None);
    }
    match crate::upstream::spawn(slot.handle.clone(), myself.get_cell()).await {
        Ok(actor) => {
            state.by_actor.insert(actor.get_id(), key.clone());
            slot.actor = Some(actor);
            let pid = slot.handle.status().pid.map(|p| format!("pid {p}"));
            state.audit.record(Record::event(
                "upstream.started",
                Some(&key.upstream),
                key.session.as_deref(),
                pid,
            ));
        }
        Err(e) => {
            let why = match e {
                ractor::SpawnErr::StartupFailed(inner) => inner.to_string(),
                other => other.to_string(),
            };
            on_failure(myself, key, slot, &state.audit, why);
        }
    }
}

/// Stops and forgets every instance serving `session`; their ends are not failures.
async fn stop_instances(state: &mut SupervisorState, session: &str, upstream: Option<&str>) {
    let keys: Vec<Key> = state
        .slots
        .keys()
        .filter(|k| k.session.as_deref() == Some(session))
        .filter(|k| upstream.is_none_or(|u| k.upstream == u))
        .cloned()
        .collect();
    let mut actors = Vec::new();
    for key in keys {
        lock(&state.instances).remove(&(key.upstream.clone(), session.to_owned()));
        if let Some(slot) = state.slots.remove(&key) {
            slot.handle.set_phase(Phase::Stopped, None);
            if let Some(actor) = slot.actor {
                state.by_actor.remove(&actor.get_id());
                actors.push(actor);
            }
        }
    }
    let reason = StopReason::SessionEnded.as_str();
    futures_util::future::join_all(
        actors
            .iter()
            .map(|a| a.stop_and_wait(Some(reason.to_owned()), Some(INSTANCE_STOP))),
    )
    .await;
}
