//! Tasks: a task id is exposed like a URI (`{prefix}+{id}`) and owned by the session that
//! created it; `tasks/get`, `tasks/result` and `tasks/cancel` route by its prefix and only for
//! its owner; `tasks/list` gathers the session's own tasks from every upstream that lists them.

use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::forward::{Start, Upstreams};
use super::outcome::Route;
use super::{Answer, RequestCx, internal};
use crate::jsonrpc::{Members, RpcError, raw_string, to_raw};
use crate::mcp::method::Method;
use crate::mcp::names;
use crate::upstream::{Reply, UpstreamHandle};

/// A `CreateTaskResult`: its task id is exposed as `{prefix}+{id}` and owned by this session.
pub(super) fn expose_created(
    cx: &RequestCx,
    upstreams: &Upstreams,
    upstream: &UpstreamHandle,
    result: Box<RawValue>,
) -> Box<RawValue> {
    let Ok(mut value) = serde_json::from_str::<Value>(result.get()) else {
        return result;
    };
    let Some(task) = value.get_mut("task") else {
        return result;
    };
    // A stateless request's task belongs to no session (its revision has no tasks methods).
    if let (Some(exposed), Some(session)) = (expose_task_id(upstream, task), &cx.session) {
        upstreams.delivery.tasks.own(&exposed, &session.id);
    }
    to_raw(&value)
}

/// `tasks/get`, `tasks/result`, `tasks/cancel`: the task id's prefix names the upstream; only
/// the session that created a task may use it.
pub(super) async fn request(
    cx: &RequestCx,
    (method, task, members): (Method, String, Members<'_>),
    upstreams: &Upstreams,
    route: &mut Route,
) -> Result<Answer, RpcError> {
    let mut members = members;
    let not_found = || RpcError::invalid_params(format!("Unknown task: {task}"));
    let session = cx.own_session()?;
    if upstreams.delivery.tasks.owner(&task).as_deref() != Some(session.id.as_str()) {
        return Err(not_found());
    }
    let snapshot = upstreams.router.view(cx.profile());
    let (upstream, original) = snapshot.route_task(&task).ok_or_else(not_found)?;
    let (upstream, original) = (upstream.clone(), original.into_owned());
    drop(snapshot);
    route.routed(&upstream, &task);
    let original = raw_string(&original);
    members.insert("taskId", &original);
    match upstreams
        .forward(cx, &upstream, method, members, route)
        .await?
    {
        Reply::Result(result) => {
            let Ok(mut value) = serde_json::from_str::<Value>(result.get()) else {
                return Ok(Answer::Result(result));
            };
            expose_task_id(&upstream, &mut value);
            if let Some(related) = value.pointer_mut("/_meta/io.modelcontextprotocol~1related-task")
            {
                expose_task_id(&upstream, related);
            }
            Ok(Answer::Result(to_raw(&value)))
        }
        error => Ok(Answer::Upstream(error)),
    }
}

/// `tasks/list`: this session's tasks, from every upstream that lists tasks.
pub(super) async fn list(cx: &RequestCx, upstreams: &Upstreams) -> Result<Answer, RpcError> {
    let listers: Vec<UpstreamHandle> = upstreams
        .router
        .view(cx.profile())
        .offering("/tasks/list")
        .cloned()
        .collect();
    let mut tasks = Vec::new();
    for upstream in listers {
        // A per-session upstream's tasks live in this session's own instance, if it has one.
        let target = upstreams.instance(cx, &upstream, Start::No).await?;
        let Some(target) = target else { continue };
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_TASK_PAGES {
            let params = cursor
                .as_ref()
                .map_or(json!({}), |c| json!({ "cursor": c }));
            let value: Value = match upstreams
                .upstream_request(&target, Method::TasksList, &params)
                .await
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
                    let session = cx.session.as_ref().map(|s| s.id.as_str());
                    session.is_some() && upstreams.delivery.tasks.owner(&id).as_deref() == session
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
    Ok(Answer::Result(to_raw(&json!({ "tasks": tasks }))))
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
