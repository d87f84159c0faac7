//! Requests beyond calls and listings: resource subscriptions (counted across sessions, so an
//! upstream is subscribed while anyone wants it), logging levels (the most verbose any session
//! asked for is set upstream; each session gets only what it asked for), completion (routed by
//! the namespaced prompt or URI) and tasks (ids namespaced like URIs, owned by one session).

use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::{
    Gateway, HostRequest, Members, Outcome, internal, members, string_member, to_raw, unknown,
    upstream_error,
};
use crate::config::Isolation;
use crate::jsonrpc::RpcError;
use crate::mcp::{ListKind, names};
use crate::upstream::{Reply, UpstreamHandle};

use super::super::session::{LOG_LEVELS, log_rank};

impl Gateway {
    /// `resources/subscribe` (`on`) and `resources/unsubscribe`.
    pub(super) async fn subscribe(
        &self,
        host: &HostRequest,
        params: Option<&RawValue>,
        on: bool,
    ) -> Result<Outcome, RpcError> {
        let members =
            members(params.ok_or_else(|| RpcError::invalid_params("needs params with a `uri`"))?)?;
        let uri = string_member(&members, "uri")
            .ok_or_else(|| RpcError::invalid_params("needs a string `uri`"))?;
        let (upstream, original) = self.route_uri(&uri)?;
        host.routed(&upstream, &uri);
        let target = self.target(host, &upstream).await?;
        let session = &host.session;
        if on {
            if !session.tables().subscriptions.insert(uri.clone()) {
                return Ok(Outcome::Result(to_raw(&json!({}))));
            }
            if self.hub.subscribe(&target, &original) {
                let outcome = self
                    .upstream_request(&target, "resources/subscribe", &json!({ "uri": original }))
                    .await;
                if !matches!(outcome, Ok(Reply::Result(_))) {
                    session.tables().subscriptions.remove(&uri);
                    self.hub.unsubscribe(&target, &original);
                    return outcome.map(Outcome::Upstream);
                }
            }
        } else if session.tables().subscriptions.remove(&uri)
            && self.hub.unsubscribe(&target, &original)
        {
            self.upstream_request(
                &target,
                "resources/unsubscribe",
                &json!({ "uri": original }),
            )
            .await?;
        }
        Ok(Outcome::Result(to_raw(&json!({}))))
    }

    /// The connection a session's request to `upstream` goes to.
    pub(super) async fn target(
        &self,
        host: &HostRequest,
        upstream: &UpstreamHandle,
    ) -> Result<UpstreamHandle, RpcError> {
        match upstream.config().isolation {
            Isolation::Shared => Ok(upstream.clone()),
            Isolation::PerSession => self
                .hub
                .instance(upstream, &host.session.id, &self.router)
                .await
                .map_err(upstream_error),
        }
    }

    /// `logging/setLevel`: remembered per session; upstreams that log get the most verbose level
    /// any session wants.
    pub(super) async fn set_log_level(
        &self,
        host: &HostRequest,
        params: Option<&RawValue>,
    ) -> Result<Outcome, RpcError> {
        let members = members(
            params.ok_or_else(|| RpcError::invalid_params("needs params with a `level`"))?,
        )?;
        let level = string_member(&members, "level")
            .ok_or_else(|| RpcError::invalid_params("needs a string `level`"))?;
        let rank = log_rank(&level).ok_or_else(|| {
            RpcError::invalid_params(format!(
                "unknown level `{level}`; use one of {}",
                LOG_LEVELS.join(", ")
            ))
        })?;
        host.session.tables().log_level = Some(rank);
        let loggers: Vec<UpstreamHandle> = self
            .router
            .snapshot()
            .ready()
            .iter()
            .filter(|(_, info)| info.capabilities.get("logging").is_some())
            .map(|(h, _)| h.clone())
            .collect();
        for upstream in loggers {
            // This session's own instance of a per-session upstream logs at this session's level.
            if let Some(instance) = self
                .hub
                .existing_instance(upstream.name(), &host.session.id)
            {
                let params = json!({ "level": LOG_LEVELS[rank] });
                if let Err(e) = self
                    .upstream_request(&instance, "logging/setLevel", &params)
                    .await
                {
                    tracing::warn!(upstream = %upstream.name(), error = %e, "Could not set the log level.");
                }
            }
            if let Some(wanted) = self.hub.wanted_log_level(upstream.name()) {
                let params = json!({ "level": LOG_LEVELS[wanted] });
                if let Err(e) = self
                    .upstream_request(&upstream, "logging/setLevel", &params)
                    .await
                {
                    tracing::warn!(upstream = %upstream.name(), error = %e, "Could not set the log level.");
                }
            }
        }
        Ok(Outcome::Result(to_raw(&json!({}))))
    }

    /// `completion/complete`: `ref.name` (a prompt) or `ref.uri` (a resource template) names the upstream.
    pub(super) async fn complete(
        &self,
        host: &HostRequest,
        params: Option<&RawValue>,
    ) -> Result<Outcome, RpcError> {
        let mut members =
            members(params.ok_or_else(|| RpcError::invalid_params("needs params with a `ref`"))?)?;
        let reference = members
            .get("ref")
            .ok_or_else(|| RpcError::invalid_params("needs a `ref`"))?;
        let mut reference: Members<'_> = super::members_of(reference)?;
        let kind = string_member(&reference, "type").unwrap_or_default();
        let (upstream, key, original) = match kind.as_str() {
            "ref/prompt" => {
                let name = string_member(&reference, "name")
                    .ok_or_else(|| RpcError::invalid_params("ref/prompt needs a `name`"))?;
                let snapshot = self.router.snapshot();
                let entry = snapshot
                    .lookup(ListKind::Prompts, &name)
                    .ok_or_else(|| unknown(&snapshot, ListKind::Prompts, &name))?;
                host.routed(&entry.upstream, &name);
                (entry.upstream.clone(), "name", entry.original.to_string())
            }
            "ref/resource" => {
                let uri = string_member(&reference, "uri")
                    .ok_or_else(|| RpcError::invalid_params("ref/resource needs a `uri`"))?;
                let (upstream, original) = self.route_uri(&uri)?;
                host.routed(&upstream, &uri);
                (upstream, "uri", original)
            }
            other => {
                return Err(RpcError::invalid_params(format!(
                    "unknown ref type `{other}`"
                )));
            }
        };
        let original = to_raw(&original);
        reference.insert(key.to_owned(), &original);
        let reference = to_raw(&reference);
        members.insert("ref".to_owned(), &reference);
        self.forward(host, &upstream, "completion/complete", members)
            .await
            .map(Outcome::Upstream)
    }

    /// A `CreateTaskResult`: its task id is exposed as `{prefix}+{id}` and owned by this session.
    pub(super) fn expose_created_task(
        &self,
        host: &HostRequest,
        upstream: &UpstreamHandle,
        result: Box<RawValue>,
    ) -> Box<RawValue> {
        let Ok(mut value) = serde_json::from_str::<Value>(result.get()) else {
            return result;
        };
        let Some(task) = value.get_mut("task") else {
            return result;
        };
        if let Some(exposed) = expose_task_id(upstream, task) {
            self.hub.own_task(&exposed, &host.session.id);
        }
        to_raw(&value)
    }

    /// `tasks/get`, `tasks/result`, `tasks/cancel`: the task id's prefix names the upstream; only
    /// the session that created a task may use it.
    pub(super) async fn task_request(
        &self,
        host: &HostRequest,
        method: &str,
        params: Option<&RawValue>,
    ) -> Result<Outcome, RpcError> {
        let mut members = members(
            params.ok_or_else(|| RpcError::invalid_params("needs params with a `taskId`"))?,
        )?;
        let task = string_member(&members, "taskId")
            .ok_or_else(|| RpcError::invalid_params("needs a string `taskId`"))?;
        let not_found = || RpcError::invalid_params(format!("Unknown task: {task}"));
        if self.hub.task_owner(&task).as_deref() != Some(host.session.id.as_str()) {
            return Err(not_found());
        }
        let (prefix, original) = names::split_uri(&task).ok_or_else(not_found)?;
        let upstream = self
            .router
            .snapshot()
            .upstream(prefix)
            .cloned()
            .ok_or_else(not_found)?;
        host.routed(&upstream, &task);
        let original = to_raw(original);
        members.insert("taskId".to_owned(), &original);
        match self.forward(host, &upstream, method, members).await? {
            Reply::Result(result) => {
                let Ok(mut value) = serde_json::from_str::<Value>(result.get()) else {
                    return Ok(Outcome::Result(result));
                };
                expose_task_id(&upstream, &mut value);
                if let Some(related) =
                    value.pointer_mut("/_meta/io.modelcontextprotocol~1related-task")
                {
                    expose_task_id(&upstream, related);
                }
                Ok(Outcome::Result(to_raw(&value)))
            }
            error => Ok(Outcome::Upstream(error)),
        }
    }

    /// `tasks/list`: this session's tasks, from every upstream that lists tasks.
    pub(super) async fn list_tasks(&self, host: &HostRequest) -> Result<Outcome, RpcError> {
        let listers: Vec<UpstreamHandle> = self
            .router
            .snapshot()
            .ready()
            .iter()
            .filter(|(_, info)| info.capabilities.pointer("/tasks/list").is_some())
            .map(|(h, _)| h.clone())
            .collect();
        let mut tasks = Vec::new();
        for upstream in listers {
            // A per-session upstream's tasks live in this session's own instance, if it has one.
            let target = match upstream.config().isolation {
                Isolation::Shared => Some(upstream.clone()),
                Isolation::PerSession => self
                    .hub
                    .existing_instance(upstream.name(), &host.session.id),
            };
            let Some(target) = target else { continue };
            let mut cursor: Option<String> = None;
            for _ in 0..MAX_TASK_PAGES {
                let params = cursor
                    .as_ref()
                    .map_or(json!({}), |c| json!({ "cursor": c }));
                let value: Value = match self.upstream_request(&target, "tasks/list", &params).await
                {
                    Ok(Reply::Result(result)) => {
                        serde_json::from_str(result.get()).map_err(internal)?
                    }
                    Ok(Reply::Error(error)) => {
                        tracing::warn!(upstream = %upstream.name(), error = error.get(), "tasks/list failed; its tasks are left out.");
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(upstream = %upstream.name(), error = %e, "tasks/list failed; its tasks are left out.");
                        break;
                    }
                };
                for mut task in value["tasks"].as_array().cloned().unwrap_or_default() {
                    let exposed = expose_task_id(&upstream, &mut task);
                    let own = exposed.is_some_and(|id| {
                        self.hub.task_owner(&id).as_deref() == Some(host.session.id.as_str())
                    });
                    if own {
                        tasks.push(task);
                    }
                }
                match value["nextCursor"].as_str() {
                    Some(next) if !next.is_empty() && cursor.as_deref() != Some(next) => {
                        cursor = Some(next.to_owned())
                    }
                    _ => break,
                }
            }
        }
        Ok(Outcome::Result(to_raw(&json!({ "tasks": tasks }))))
    }
}

/// Most pages read from one upstream's `tasks/list`.
const MAX_TASK_PAGES: usize = 100;

/// Rewrites `taskId` in a task object to the exposed form; returns it.
fn expose_task_id(upstream: &UpstreamHandle, task: &mut Value) -> Option<String> {
    let id = task.get("taskId")?.as_str()?;
    let exposed = names::expose_uri(upstream.prefix(), id);
    task["taskId"] = Value::String(exposed.clone());
    Some(exposed)
}
