//! Which session gets an upstream's message ([`HostEvents`]): log messages to the sessions that
//! asked for that level, resource updates to the sessions subscribed to the URI, task status to
//! the session that owns the task — only the one session a per-session instance serves — each
//! with the upstream's names rewritten to the exposed ones. Also what a restarted upstream is
//! given back (subscriptions, log level), and the audit record of a refused server request.

use std::sync::Arc;

use serde_json::value::RawValue;

use super::caller::SessionCaller;
use super::session::{Session, SessionStore};
use super::tables::{LogLevels, StatelessInstances, Subscriptions, TaskOwners, instance_key};
use crate::audit::{AuditHandle, Direction, Ended, Kind, Record};
use crate::config::Profile;
use crate::jsonrpc::{Members, notification_line, raw_string};
use crate::mcp::method::Method;
use crate::mcp::names::{self, Prefix};
use crate::mcp::{LOG_LEVELS, log_rank};
use crate::upstream::{Caller, HostEvents, UpstreamId};

/// The host side's sessions and cross-session tables, as upstream connections reach them.
#[derive(Debug)]
pub struct Delivery {
    pub sessions: Arc<SessionStore>,
    pub subscriptions: Subscriptions,
    pub tasks: TaskOwners,
    pub log_levels: LogLevels,
    pub stateless_instances: StatelessInstances,
    audit: AuditHandle,
}

impl Delivery {
    pub fn new(sessions: Arc<SessionStore>, audit: AuditHandle) -> Arc<Self> {
        Arc::new(Self {
            sessions,
            subscriptions: Subscriptions::default(),
            tasks: TaskOwners::default(),
            log_levels: LogLevels::default(),
            stateless_instances: StatelessInstances::default(),
            audit,
        })
    }

    /// The sessions a message from `upstream` may reach: its own session, or those whose
    /// profile holds it.
    fn targets(&self, upstream: &UpstreamId) -> Vec<Arc<Session>> {
        let mut sessions = match &upstream.scope {
            Some(id) => self.sessions.get(id).into_iter().collect(),
            None => self.sessions.all(),
        };
        sessions.retain(|s| s.sees(&upstream.name));
        sessions
    }

    /// The most verbose level any session that sees `upstream` asked for, when it differs from
    /// what `upstream` was last told.
    pub fn wanted_log_level(&self, upstream: &str) -> Option<usize> {
        let wanted = self
            .sessions
            .all()
            .iter()
            .filter(|s| s.sees(upstream))
            .filter_map(|s| s.tables().log_level)
            .min()?;
        self.log_levels.set(upstream, wanted).then_some(wanted)
    }
}

/// `params` with string member `key` replaced by `rewrite(old)`, and the old value; `None` when
/// `params` is not an object or has no such string.
fn rewrite_member(
    params: &RawValue,
    key: &str,
    rewrite: impl FnOnce(&str) -> String,
) -> Option<(String, String)> {
    let mut members = Members::of(params)?;
    let old = members.string(key)?;
    let new = raw_string(&rewrite(&old));
    members.insert(key, &new);
    Some((members.to_json(), old))
}

impl HostEvents for Delivery {
    fn log_message(&self, upstream: &UpstreamId, params: &RawValue, request: Option<&dyn Caller>) {
        let Some(mut members) = Members::of(params) else {
            return;
        };
        let Some(rank) = members.string("level").and_then(|l| log_rank(&l)) else {
            return;
        };
        // The logger names the upstream (and the upstream's own logger, when it names one).
        let logger = raw_string(&match members.string("logger") {
            Some(inner) => format!("{}/{inner}", upstream.name),
            None => upstream.name.clone(),
        });
        members.insert("logger", &logger);
        let params = members.to_json();
        let line = notification_line("notifications/message", Some(&params));
        for session in self.targets(upstream) {
            if session
                .tables()
                .log_level
                .is_some_and(|wanted| rank >= wanted)
            {
                session.deliver(line.clone());
            }
        }
        // A 2026-07-28 request that asked for log messages gets those that belong to it, on its
        // own stream (it is no session, so none of the above reached it).
        if let Some(request) = request {
            if request
                .request_log_level()
                .is_some_and(|wanted| rank >= wanted)
            {
                request.send(line);
            }
        }
    }

    fn resource_updated(&self, upstream: &UpstreamId, params: &RawValue) {
        // The URI as each session's view exposes it: prefixed, or bare in an unprefixed profile.
        let mut forms: Vec<(Prefix, String, String)> = Vec::new();
        for session in self.targets(upstream) {
            let prefix = Profile::prefix_for(session.profile().as_deref(), &upstream.prefix);
            if !forms.iter().any(|(p, ..)| p == prefix) {
                let expose = |uri: &str| names::expose_uri(prefix, uri);
                let Some((params, uri)) = rewrite_member(params, "uri", expose) else {
                    return;
                };
                let line = notification_line("notifications/resources/updated", Some(&params));
                forms.push((prefix.clone(), expose(&uri), line));
            }
            let Some((_, exposed, line)) = forms.iter().find(|(p, ..)| p == prefix) else {
                continue;
            };
            if session.tables().subscriptions.contains(exposed) {
                session.deliver(line.clone());
            }
        }
    }

    fn task_status(&self, upstream: &UpstreamId, params: &RawValue) {
        let expose = |task: &str| names::expose_uri(&upstream.prefix, task);
        let Some((params, task)) = rewrite_member(params, "taskId", expose) else {
            return;
        };
        let owner = upstream
            .scope
            .clone()
            .or_else(|| self.tasks.owner(&expose(&task)));
        if let Some(session) = owner.and_then(|o| self.sessions.get(&o)) {
            session.deliver(notification_line(
                "notifications/tasks/status",
                Some(&params),
            ));
        }
    }

    fn resume(&self, upstream: &UpstreamId) -> Vec<(String, String)> {
        let mut replay: Vec<(String, String)> = self
            .subscriptions
            .of(upstream)
            .into_iter()
            .map(|uri| {
                let params = serde_json::json!({ "uri": uri }).to_string();
                (Method::ResourcesSubscribe.as_str().to_owned(), params)
            })
            .collect();
        // A session's own instance gets that session's level; a shared one the most verbose asked.
        let level = match &upstream.scope {
            Some(session) => (self.sessions.get(session))
                .and_then(|s| s.tables().log_level)
                // An instance serving stateless hosts: what their requests asked of it.
                .or_else(|| {
                    self.log_levels
                        .get(&instance_key(&upstream.name, Some(session)))
                }),
            None => self.log_levels.get(&upstream.name),
        };
        if let Some(level) = level {
            replay.push((
                Method::SetLogLevel.as_str().to_owned(),
                serde_json::json!({ "level": LOG_LEVELS[level] }).to_string(),
            ));
        }
        replay
    }

    fn server_request_refused(&self, upstream: &UpstreamId, method: &str, code: i64, reason: &str) {
        if self.audit.is_enabled() {
            let mut record = Record::new(Kind::Request, method, Ended::Error);
            record.direction = Some(Direction::UpstreamToHost);
            record.upstream = Some(upstream.name.clone());
            record.session = upstream.scope.clone();
            record.error_code = Some(code);
            record.detail = Some(reason.to_owned());
            self.audit.record(record);
        }
    }

    fn session_caller(&self, session_id: &str) -> Option<Arc<dyn Caller>> {
        let session = self.sessions.get(session_id)?;
        Some(Arc::new(SessionCaller {
            session,
            host_id: None,
            sink: None,
        }))
    }
}
