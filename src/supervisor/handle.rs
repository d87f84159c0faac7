//! The supervisor's public face: start it over the running upstream set, ask it for a
//! session's instance, restart, reconcile after a reload, shut down.

use std::sync::Arc;
use std::time::Duration;

use ractor::{Actor, ActorRef};

use super::retire::{self, Undrained};
use super::{CALL_DEADLINE, Instances, Supervisor, SupervisorMsg};
use crate::audit::AuditHandle;
use crate::config::UpstreamSecrets;
use crate::sync::lock;
use crate::upstream::{Phase, UpstreamError, UpstreamHandle, Upstreams};

/// The supervisor's public face.
#[derive(Clone)]
pub struct SupervisorHandle {
    actor: ActorRef<SupervisorMsg>,
    instances: Instances,
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

/// The instances a reload retired, draining.
#[derive(Debug)]
pub struct Draining(retire::Drains);

impl Draining {
    /// Waits until every retired instance has stopped; answers those that still had requests
    /// in flight when their grace ended.
    pub async fn finished(self) -> Vec<Undrained> {
        let mut undrained = Vec::new();
        for drain in self.0 {
            if let Ok(Some(u)) = drain.await {
                undrained.push(u);
            }
        }
        undrained
    }
}

impl SupervisorHandle {
    /// Starts the supervisor and, through it, every enabled upstream of the set `upstreams`
    /// holds that is not lazy. [`Self::reconcile`] catches up with the set when it changes.
    pub async fn start(
        upstreams: tokio::sync::watch::Receiver<Upstreams>,
        audit: AuditHandle,
    ) -> Result<Self, ractor::SpawnErr> {
        let instances = Instances::default();
        let args = (upstreams, audit, Arc::clone(&instances));
        let (actor, _) = Actor::spawn(Some("supervisor".into()), Supervisor, args).await?;
        Ok(Self { actor, instances })
    }

    /// `session`'s own instance of the per-session upstream `shared`, started on first use
    /// (waiting, at most its startup timeout, until it serves). An instance that is restarting
    /// is returned as it is: calls to it fail with why until it is back.
    ///
    /// A per-principal upstream's instance starts with that principal's `secrets` on top of the
    /// upstream's config.
    pub async fn instance(
        &self,
        shared: &UpstreamHandle,
        session: &str,
        secrets: Option<Arc<UpstreamSecrets>>,
    ) -> Result<UpstreamHandle, UpstreamError> {
        if let Some(handle) = self.existing_instance(shared.name(), session) {
            if handle.phase() == Phase::Starting {
                handle.settled(shared.config().policy.startup_timeout).await;
            }
            return Ok(handle);
        }
        let deadline = u64::try_from(CALL_DEADLINE.as_millis()).unwrap_or(u64::MAX);
        let handle = ractor::call_t!(
            self.actor,
            SupervisorMsg::Instance,
            deadline,
            shared.clone(),
            session.to_owned(),
            secrets
        )
        .map_err(|e| UpstreamError::Failed {
            upstream: shared.name().to_owned(),
            reason: format!("its instance for this session could not be started: {e}"),
        })??;
        handle.settled(shared.config().policy.startup_timeout).await;
        Ok(handle)
    }

    /// `session`'s running instance of `upstream`, if it has one.
    pub fn existing_instance(&self, upstream: &str, session: &str) -> Option<UpstreamHandle> {
        lock(&self.instances)
            .get(&(upstream.to_owned(), session.to_owned()))
            .cloned()
    }

    /// How many instances of its own `upstream` runs (one per session or principal).
    pub fn instances_of(&self, upstream: &str) -> usize {
        (lock(&self.instances).keys())
            .filter(|(name, _)| name == upstream)
            .count()
    }

    /// Whether an instance that serves `session` has requests in flight.
    pub fn serving(&self, session: &str) -> bool {
        (lock(&self.instances).iter())
            .any(|((_, s), handle)| s == session && handle.in_flight() > 0)
    }

    /// Stops every instance that serves `session` (the session ended).
    pub async fn stop_instances(&self, session: &str) {
        self.stop(session, None).await;
    }

    /// Stops `upstream`'s instance that serves `session` (a principal's, whose sign-in is gone).
    pub async fn stop_instance(&self, upstream: &str, session: &str) {
        self.stop(session, Some(upstream)).await;
    }

    async fn stop(&self, session: &str, upstream: Option<&str>) {
        let any = (lock(&self.instances).keys())
            .any(|(u, s)| s == session && upstream.is_none_or(|up| up == u));
        if any {
            let deadline = u64::try_from(CALL_DEADLINE.as_millis()).unwrap_or(u64::MAX);
            let _ = ractor::call_t!(
                self.actor,
                SupervisorMsg::StopInstances,
                deadline,
                session.to_owned(),
                upstream.map(str::to_owned)
            );
        }
    }

    /// Restarts one upstream now, whatever its phase (also leaves `crash-loop`).
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

    /// Catches up with the upstream set as it now is (a reloaded config): upstreams no longer
    /// in it, or in it as another handle (changed), leave at once — their shared instance and
    /// every session's own instance finish what they have in flight, at most `grace`, and then
    /// stop — and handles new to it start as at startup. Upstreams whose handle stayed are not
    /// touched. The retired instances drain in the background; [`Draining::finished`] waits for
    /// them.
    pub async fn reconcile(&self, grace: Duration) -> Result<Draining, RestartError> {
        let deadline = u64::try_from(CALL_DEADLINE.as_millis()).unwrap_or(u64::MAX);
        let drains = ractor::call_t!(self.actor, SupervisorMsg::Reconcile, deadline, grace)
            .map_err(|e| RestartError::Unavailable(e.to_string()))?;
        Ok(Draining(drains))
    }

    /// Stops every upstream and instance (killing their process groups) and then the supervisor.
    pub async fn shutdown(&self) {
        let deadline = u64::try_from(CALL_DEADLINE.as_millis()).unwrap_or(u64::MAX);
        let _ = ractor::call_t!(self.actor, SupervisorMsg::Shutdown, deadline);
        self.actor.stop(None);
    }
}
