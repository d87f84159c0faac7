//! The `tools` family: `tools/call` of a tool of the host's view, routed by its exposed name —
//! and the routing by name `prompts/get` shares. (A search-mode profile's two tools are
//! answered by mcpmux itself: `search.rs`.)

use super::forward::{self, Upstreams};
use super::outcome::Route;
use super::{Answer, RequestCx, content, tasks, unknown};
use crate::jsonrpc::{Members, RpcError, raw_string};
use crate::mcp::ListKind;
use crate::mcp::method::Method;
use crate::router::AppRoute;
use crate::upstream::Reply;

/// `tools/call` of the tool the host's view names `name`.
pub(super) async fn call(
    cx: &RequestCx,
    name: String,
    members: Members<'_>,
    upstreams: &Upstreams,
    route: &mut Route,
) -> Result<Answer, RpcError> {
    let called = (Method::ToolsCall, ListKind::Tools);
    named(cx, called, name, members, upstreams, route).await
}

/// `tools/call` and `prompts/get` (`prompts.rs` asks this too): route by exposed name (or, for an
/// app's page, by its own server's name), rewrite `name`, forward.
pub(super) async fn named(
    cx: &RequestCx,
    (method, kind): (Method, ListKind),
    name: String,
    members: Members<'_>,
    upstreams: &Upstreams,
    route: &mut Route,
) -> Result<Answer, RpcError> {
    let mut members = members;
    tracing::Span::current().record("target", name.as_str());
    let snapshot = upstreams.router.view(cx.profile());
    let routed = match snapshot.route_name(kind, &name) {
        Some((upstream, original)) => Ok((upstream.clone(), original.to_owned(), None)),
        // An app's page calls its own server's tools by their own names.
        None => match snapshot.route_app(kind, &name) {
            AppRoute::One(entry) => Ok((
                entry.upstream.clone(),
                entry.original.to_string(),
                Some(entry.exposed.to_string()),
            )),
            AppRoute::Several(exposed) => Err(forward::several_apps(&name, &exposed)),
            AppRoute::Unknown => Err(unknown(&snapshot, kind, &name)),
        },
    };
    drop(snapshot);
    // Audit and metrics name what the host's view calls it.
    let (upstream, original_name, exposed) = match routed {
        Ok(routed) => routed,
        Err(error) => {
            route.target = Some(name);
            return Err(error);
        }
    };
    route.target = Some(exposed.unwrap_or(name));
    let tool = (kind == ListKind::Tools).then_some(&*original_name);
    route.upstream = Some(upstream.name().to_owned());
    route.redaction = upstream.config().redaction_for(tool);
    // The arguments are copied only when they will be audited.
    if upstreams.audits {
        route.args = members.get("arguments").map(ToOwned::to_owned);
    }
    let original = raw_string(&original_name);
    members.insert("name", &original);
    let task_augmented = kind == ListKind::Tools && members.contains("task");
    let reply = upstreams
        .forward_or_resume(cx, (method, &upstream), members, tool, route)
        .await;
    if let (Some(forwarded), ListKind::Tools) = (&mut route.forwarded, kind) {
        forwarded.tool = Some(original_name);
    }
    match reply? {
        Reply::Result(result) if task_augmented => Ok(Answer::Result(tasks::expose_created(
            cx, upstreams, &upstream, result,
        ))),
        Reply::Result(result) => Ok(Answer::Result(content::fit(
            cx.prefix_of(&upstream),
            result,
            cx.host.version,
        ))),
        reply => Ok(Answer::Upstream(reply)),
    }
}
