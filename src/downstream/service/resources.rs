//! The `resources` family: `resources/read`, routed by the URI's prefix (or, for an app's page,
//! by its own server's URI), the request's `uri` and the answer's `contents[].uri` rewritten; and
//! the routing of an exposed URI the other URI-named requests share.

use serde_json::json;
use serde_json::value::RawValue;

use super::forward::Upstreams;
use super::outcome::Route;
use super::{Answer, RequestCx};
use crate::config::Profile;
use crate::jsonrpc::{Members, RpcError, codes, raw_string, to_raw};
use crate::mcp::ListKind;
use crate::mcp::method::Method;
use crate::mcp::names;
use crate::router::{AppRoute, RouterHandle, Snapshot};
use crate::upstream::{Reply, UpstreamHandle};

/// `resources/read`: route by the URI's prefix, rewrite `uri` both ways.
pub(super) async fn read(
    cx: &RequestCx,
    uri: String,
    members: Members<'_>,
    upstreams: &Upstreams,
    route: &mut Route,
) -> Result<Answer, RpcError> {
    let mut members = members;
    let router = &upstreams.router;
    let hidden = router.with_view(cx.profile(), |view| view.hides_skill(&uri));
    let routed = match route_uri(router, cx.profile(), ListKind::Resources, &uri) {
        // A file of a skill the view hides is as unknown as a file nothing has.
        Ok(_) if hidden => Err((unknown_resource(&uri), uri)),
        Ok((upstream, original)) => Ok((upstream, original, uri)),
        // An app's page reads its own server's resources by their own URIs.
        Err(unknown) => {
            let snapshot = router.view(cx.profile());
            match snapshot.route_app(ListKind::Resources, &uri) {
                AppRoute::One(entry) => Ok((
                    entry.upstream.clone(),
                    entry.original.to_string(),
                    entry.exposed.to_string(),
                )),
                AppRoute::Several(exposed) => {
                    Err((super::forward::several_apps(&uri, &exposed), uri))
                }
                AppRoute::Unknown => Err((unknown, uri)),
            }
        }
    };
    let (upstream, original, uri) = match routed {
        Ok(routed) => routed,
        Err((error, uri)) => {
            route.target = Some(uri);
            return Err(error);
        }
    };
    route.routed(&upstream, &uri);
    let original = raw_string(&original);
    members.insert("uri", &original);
    match upstreams
        .forward_or_resume(cx, (Method::ResourcesRead, &upstream), members, None, route)
        .await?
    {
        Reply::Result(result) => Ok(Answer::Result(expose_contents(
            cx,
            &router.view(cx.profile()),
            &upstream,
            result,
        ))),
        error => Ok(Answer::Upstream(error)),
    }
}

/// The upstream an exposed resource URI (or, for `kind` ResourceTemplates, URI template)
/// belongs to in the host's view, and the upstream's own form.
pub(super) fn route_uri(
    router: &RouterHandle,
    profile: Option<&Profile>,
    kind: ListKind,
    uri: &str,
) -> Result<(UpstreamHandle, String), RpcError> {
    let snapshot = router.view(profile);
    let (upstream, original) = snapshot
        .route_uri(kind, uri)
        .ok_or_else(|| unknown_resource(uri))?;
    Ok((upstream.clone(), original.into_owned()))
}

/// The error for a resource URI the view does not have.
pub(super) fn unknown_resource(uri: &str) -> RpcError {
    RpcError::new(
        codes::RESOURCE_NOT_FOUND,
        format!("Resource not found: {uri}"),
    )
    .with_data(json!({ "uri": uri }))
}

/// Rewrites `contents[].uri` of a resources/read result to the exposed form.
/// A `resources/read` result with each item's `uri` exposed. In a profile that decides on URIs,
/// an item whose URI the view does not show (an upstream that followed a link out of what the
/// host may read) is dropped, with a warning: the host gets what its view allows of the answer.
fn expose_contents(
    cx: &RequestCx,
    view: &Snapshot,
    upstream: &UpstreamHandle,
    result: Box<RawValue>,
) -> Box<RawValue> {
    let prefix = cx.prefix_of(upstream);
    let judge = cx.profile().filter(|p| Snapshot::filters_uris(p));
    let rewrite = || -> Option<Box<RawValue>> {
        let mut top = Members::of(&result)?;
        let contents: Vec<&RawValue> = serde_json::from_str(top.get("contents")?.get()).ok()?;
        let mut exposed = Vec::with_capacity(contents.len());
        for item in contents {
            let mut item = Members::of(item)?;
            let uri = names::expose_uri(prefix, &item.string("uri")?);
            if judge.is_some_and(|p| !view.shows_uri(p, ListKind::Resources, &uri)) {
                tracing::warn!(upstream = %upstream.name(), %uri, "Dropped a resource the host's profile does not show from a read answer.");
                continue;
            }
            let uri = raw_string(&uri);
            item.insert("uri", &uri);
            exposed.push(item.to_raw());
        }
        let contents = to_raw(&exposed);
        top.insert("contents", &contents);
        Some(top.to_raw())
    };
    rewrite().unwrap_or(result)
}
