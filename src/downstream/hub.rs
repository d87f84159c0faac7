//! The hub: the host side's shared state. It delivers session-bound upstream messages
//! ([`HostBus`]: log messages, resource updates, task status) only to the sessions they concern,
//! counts resource subscriptions across sessions, remembers which session owns which task, and
//! runs the per-session instances of `isolation = "per-session"` upstreams.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use indexmap::IndexMap;
use ractor::{Actor, ActorRef};
use serde_json::value::RawValue;
use tokio::sync::OnceCell;

use super::origin::HostOrigin;
use super::session::{Session, SessionStore, log_rank};
use crate::audit::{AuditHandle, Direction, Kind, Outcome, Record};
use crate::jsonrpc::notification_line;
use crate::mcp::names;
use crate::router::RouterHandle;
use crate::upstream::{
    HostBus, Origin, State, UpstreamActor, UpstreamError, UpstreamHandle, UpstreamMsg,
};

/// How long stopping a session's instances may take.
const INSTANCE_STOP: Duration = Duration::from_secs(5);

type Instance = Arc<OnceCell<(UpstreamHandle, ActorRef<UpstreamMsg>)>>;

#[derive(Debug)]
pub struct Hub {
    pub sessions: Arc<SessionStore>,
    /// (upstream instance key, upstream URI) → sessions subscribed.
    subscriptions: Mutex<HashMap<(String, String), usize>>,
    /// Exposed task id → the session that created it.
    task_owners: Mutex<HashMap<String, String>>,
    /// (session, upstream) → that session's own instance.
    instances: Mutex<HashMap<(String, String), Instance>>,
    /// Upstream → the log level last set there.
    log_levels: Mutex<HashMap<String, usize>>,
    pub audit: AuditHandle,
}

impl Hub {
    pub fn new(sessions: Arc<SessionStore>, audit: AuditHandle) -> Arc<Self> {
        Arc::new(Self {
            sessions,
            audit,
            subscriptions: Mutex::default(),
            task_owners: Mutex::default(),
            instances: Mutex::default(),
            log_levels: Mutex::default(),
        })
    }

    fn targets(&self, scope: Option<&str>) -> Vec<Arc<Session>> {
        match scope {
            Some(id) => self.sessions.get(id).into_iter().collect(),
            None => self.sessions.all(),
        }
    }

    /// Counts one more subscription to `uri` on `upstream`; true when it is the first.
    pub(super) fn subscribe(&self, upstream: &UpstreamHandle, uri: &str) -> bool {
        let mut subs = self.subscriptions.lock().unwrap_or_else(|p| p.into_inner());
        let count = subs.entry(instance_key(upstream, uri)).or_insert(0);
        *count += 1;
        *count == 1
    }

    /// Counts one subscription less; true when it was the last.
    pub(super) fn unsubscribe(&self, upstream: &UpstreamHandle, uri: &str) -> bool {
        let mut subs = self.subscriptions.lock().unwrap_or_else(|p| p.into_inner());
        let key = instance_key(upstream, uri);
        match subs.get_mut(&key) {
            Some(count) if *count > 1 => {
                *count -= 1;
                false
            }
            Some(_) => {
                subs.remove(&key);
                true
            }
            None => false,
        }
    }

    pub(super) fn own_task(&self, exposed_task: &str, session: &str) {
        if let Ok(mut owners) = self.task_owners.lock() {
            owners.insert(exposed_task.to_owned(), session.to_owned());
        }
    }

    pub(super) fn task_owner(&self, exposed_task: &str) -> Option<String> {
        self.task_owners.lock().ok()?.get(exposed_task).cloned()
    }

    /// The most verbose level any session asked for, and whether it differs from what
    /// `upstream` was last told.
    pub(super) fn wanted_log_level(&self, upstream: &str) -> Option<usize> {
        let wanted = self
            .sessions
            .all()
            .iter()
            .filter_map(|s| s.tables().log_level)
            .min()?;
        let mut levels = self.log_levels.lock().unwrap_or_else(|p| p.into_inner());
        (levels.insert(upstream.to_owned(), wanted) != Some(wanted)).then_some(wanted)
    }

    /// The instance of a per-session upstream for `session`, started on first use.
    pub(super) async fn instance(
        &self,
        shared: &UpstreamHandle,
        session: &str,
        router: &RouterHandle,
    ) -> Result<UpstreamHandle, UpstreamError> {
        let key = (session.to_owned(), shared.name().to_owned());
        let cell = {
            let mut instances = self.instances.lock().unwrap_or_else(|p| p.into_inner());
            Arc::clone(instances.entry(key.clone()).or_default())
        };
        let started = cell
            .get_or_try_init(|| async {
                let handle = shared.instance_for(session);
                let (actor, _) =
                    Actor::spawn(None, UpstreamActor, (handle.clone(), router.clone()))
                        .await
                        .map_err(|e| UpstreamError::Failed {
                            upstream: shared.name().to_owned(),
                            reason: format!("its instance for this session could not start: {e}"),
                        })?;
                handle.settled(shared.config().policy.startup_timeout).await;
                Ok::<_, UpstreamError>((handle, actor))
            })
            .await;
        match started {
            Ok((handle, _)) if handle.state() == State::Ready => Ok(handle.clone()),
            Ok((handle, actor)) => {
                let error = handle.unavailable();
                actor.stop(None);
                self.instances
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&key);
                Err(error)
            }
            Err(e) => {
                self.instances
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&key);
                Err(e)
            }
        }
    }

    /// The running instance of a per-session upstream for `session`, if there is one.
    pub(super) fn existing_instance(
        &self,
        upstream: &str,
        session: &str,
    ) -> Option<UpstreamHandle> {
        let instances = self.instances.lock().ok()?;
        let cell = instances.get(&(session.to_owned(), upstream.to_owned()))?;
        cell.get().map(|(handle, _)| handle.clone())
    }

    /// Stops every instance that serves `session` (and forgets its subscriptions).
    pub(super) async fn stop_instances(&self, session: &str) {
        let suffix = format!("@{session}");
        if let Ok(mut subs) = self.subscriptions.lock() {
            subs.retain(|(instance, _), _| !instance.ends_with(&suffix));
        }
        let cells: Vec<Instance> = {
            let mut instances = self.instances.lock().unwrap_or_else(|p| p.into_inner());
            let keys: Vec<_> = instances
                .keys()
                .filter(|(s, _)| s == session)
                .cloned()
                .collect();
            keys.iter().filter_map(|k| instances.remove(k)).collect()
        };
        let actors: Vec<_> = cells
            .iter()
            .filter_map(|c| c.get().map(|(_, a)| a.clone()))
            .collect();
        futures_util::future::join_all(
            actors
                .iter()
                .map(|a| a.stop_and_wait(Some("session ended".into()), Some(INSTANCE_STOP))),
        )
        .await;
    }
}

/// Subscriptions are counted per upstream instance (a per-session instance is its own).
fn instance_key(upstream: &UpstreamHandle, uri: &str) -> (String, String) {
    let instance = match upstream.scope() {
        Some(session) => format!("{}@{session}", upstream.name()),
        None => upstream.name().to_owned(),
    };
    (instance, uri.to_owned())
}

fn members(params: &RawValue) -> Option<IndexMap<String, &RawValue>> {
    serde_json::from_str(params.get()).ok()
}

fn raw_string(s: &str) -> Option<Box<RawValue>> {
    serde_json::value::to_raw_value(s).ok()
}

impl HostBus for Hub {
    fn log_message(&self, upstream: &UpstreamHandle, params: &RawValue, scope: Option<&str>) {
        let Some(mut members) = members(params) else {
            return;
        };
        let Some(rank) = members
            .get("level")
            .and_then(|l| serde_json::from_str::<String>(l.get()).ok())
            .and_then(|l| log_rank(&l))
        else {
            return;
        };
        let logger = match members
            .get("logger")
            .and_then(|l| serde_json::from_str::<String>(l.get()).ok())
        {
            Some(inner) => format!("{}/{inner}", upstream.name()),
            None => upstream.name().to_owned(),
        };
        let Some(logger) = raw_string(&logger) else {
            return;
        };
        members.insert("logger".to_owned(), &logger);
        let Ok(params) = serde_json::to_string(&members) else {
            return;
        };
        let line = notification_line("notifications/message", Some(&params));
        for session in self.targets(scope) {
            if session
                .tables()
                .log_level
                .is_some_and(|wanted| rank >= wanted)
            {
                session.deliver(line.clone());
            }
        }
    }

    fn resource_updated(&self, upstream: &UpstreamHandle, params: &RawValue, scope: Option<&str>) {
        let Some(mut members) = members(params) else {
            return;
        };
        let Some(uri) = members
            .get("uri")
            .and_then(|u| serde_json::from_str::<String>(u.get()).ok())
        else {
            return;
        };
        let exposed = names::expose_uri(upstream.prefix(), &uri);
        let Some(exposed_raw) = raw_string(&exposed) else {
            return;
        };
        members.insert("uri".to_owned(), &exposed_raw);
        let Ok(params) = serde_json::to_string(&members) else {
            return;
        };
        let line = notification_line("notifications/resources/updated", Some(&params));
        for session in self.targets(scope) {
            if session.tables().subscriptions.contains(&exposed) {
                session.deliver(line.clone());
            }
        }
    }

    fn task_status(&self, upstream: &UpstreamHandle, params: &RawValue, scope: Option<&str>) {
        let Some(mut members) = members(params) else {
            return;
        };
        let Some(task) = members
            .get("taskId")
            .and_then(|t| serde_json::from_str::<String>(t.get()).ok())
        else {
            return;
        };
        let exposed = names::expose_uri(upstream.prefix(), &task);
        let owner = scope
            .map(str::to_owned)
            .or_else(|| self.task_owner(&exposed));
        let (Some(owner), Some(exposed_raw)) = (owner, raw_string(&exposed)) else {
            return;
        };
        members.insert("taskId".to_owned(), &exposed_raw);
        let Ok(params) = serde_json::to_string(&members) else {
            return;
        };
        if let Some(session) = self.sessions.get(&owner) {
            session.deliver(notification_line(
                "notifications/tasks/status",
                Some(&params),
            ));
        }
    }

    fn resume(&self, upstream: &UpstreamHandle) -> Vec<(String, String)> {
        let mut replay = Vec::new();
        let instance = instance_key(upstream, "").0;
        if let Ok(subs) = self.subscriptions.lock() {
            for (key, uri) in subs.keys() {
                if *key == instance {
                    replay.push((
                        "resources/subscribe".to_owned(),
                        serde_json::json!({ "uri": uri }).to_string(),
                    ));
                }
            }
        }
        // A session's own instance gets that session's level; a shared one the most verbose asked.
        let level = match upstream.scope() {
            Some(session) => self
                .sessions
                .get(session)
                .and_then(|s| s.tables().log_level),
            None => self
                .log_levels
                .lock()
                .ok()
                .and_then(|l| l.get(upstream.name()).copied()),
        };
        if let Some(level) = level {
            replay.push((
                "logging/setLevel".to_owned(),
                serde_json::json!({ "level": super::session::LOG_LEVELS[level] }).to_string(),
            ));
        }
        replay
    }

    fn server_request_refused(&self, upstream: &UpstreamHandle, method: &str, reason: &str) {
        if self.audit.is_enabled() {
            let mut record = Record::new(Kind::Request, method, Outcome::Error);
            record.direction = Some(Direction::UpstreamToHost);
            record.upstream = Some(upstream.name().to_owned());
            record.session = upstream.scope().map(str::to_owned);
            record.error_code = Some(crate::jsonrpc::codes::INTERNAL_ERROR);
            record.detail = Some(reason.to_owned());
            self.audit.record(record);
        }
    }

    fn session_origin(&self, session_id: &str) -> Option<Arc<dyn Origin>> {
        let session = self.sessions.get(session_id)?;
        Some(Arc::new(HostOrigin {
            session,
            host_id: None,
            sink: None,
        }))
    }
}
