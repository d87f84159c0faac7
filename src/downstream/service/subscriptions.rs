//! `resources/subscribe` and `resources/unsubscribe`: each session keeps the exposed URIs it
//! subscribed to, and subscriptions are counted across sessions per upstream instance, so an
//! upstream is subscribed while anyone wants it and unsubscribed when the last one leaves.

use serde_json::json;

use super::forward::{Start, Upstreams};
use super::outcome::Route;
use super::{Answer, RequestCx, resources, upstream_error};
use crate::jsonrpc::{RpcError, to_raw};
use crate::mcp::method::Method;
use crate::mcp::{ListKind, names};
use crate::upstream::Reply;

/// `resources/subscribe` (`on`) and `resources/unsubscribe`.
pub(super) async fn subscribe(
    cx: &RequestCx,
    (uri, on): (String, bool),
    upstreams: &Upstreams,
    route: &mut Route,
) -> Result<Answer, RpcError> {
    let (upstream, original) =
        resources::route_uri(&upstreams.router, cx.profile(), ListKind::Resources, &uri)?;
    route.routed(&upstream, &uri);
    // Kept as the upstream's updates will name it: what it was sent (the canonical form in
    // a profile that decides on URIs), exposed.
    let uri = names::expose_uri(cx.prefix_of(&upstream), &original);
    let target = upstreams
        .instance(cx, &upstream, Start::IfNeeded)
        .await?
        .ok_or_else(|| upstream_error(upstream.unavailable()))?;
    let session = cx.own_session()?;
    let counts = &upstreams.delivery.subscriptions;
    if on {
        if !session.tables().subscriptions.insert(uri.clone()) {
            return Ok(Answer::Result(to_raw(&json!({}))));
        }
        if counts.add(target.id(), &original) {
            if target.is_modern() {
                // A 2026-07-28 upstream is asked on its listen stream.
                target.watch_resource(&original, true);
                return Ok(Answer::Result(to_raw(&json!({}))));
            }
            let outcome = upstreams
                .upstream_request(
                    &target,
                    Method::ResourcesSubscribe,
                    &json!({ "uri": original }),
                )
                .await;
            if !matches!(outcome, Ok(Reply::Result(_))) {
                session.tables().subscriptions.remove(&uri);
                counts.remove(target.id(), &original);
                return outcome.map(Answer::Upstream);
            }
        }
    } else if session.tables().subscriptions.remove(&uri) && counts.remove(target.id(), &original) {
        if target.is_modern() {
            target.watch_resource(&original, false);
        } else {
            upstreams
                .upstream_request(
                    &target,
                    Method::ResourcesUnsubscribe,
                    &json!({ "uri": original }),
                )
                .await?;
        }
    }
    Ok(Answer::Result(to_raw(&json!({}))))
}
