//! The Skills extension's own methods (the listing is `skills/list`, served as every listing
//! is): `skills/get` and `resources/directory/read`, routed by the exposed URI's prefix, their
//! answers with the URIs of where files live exposed as the view exposes them. A skill the
//! host's profile hides — and everything inside its directory — does not exist for it.

use serde_json::value::RawValue;

use super::forward::Upstreams;
use super::outcome::Route;
use super::{Answer, RequestCx, resources};
use crate::jsonrpc::{Members, RpcError, raw_string};
use crate::mcp::ListKind;
use crate::mcp::method::Method;
use crate::mcp::names::{self, Prefix};
use crate::mcp::skills;
use crate::upstream::Reply;

/// `skills/get` (`directory` false) or `resources/directory/read` (true) of `uri`.
pub(super) async fn read(
    cx: &RequestCx,
    (uri, directory): (String, bool),
    members: Members<'_>,
    upstreams: &Upstreams,
    route: &mut Route,
) -> Result<Answer, RpcError> {
    let method = match directory {
        true => Method::ReadDirectory,
        false => Method::SkillsGet,
    };
    let mut members = members;
    let not_found = || match directory {
        true => RpcError::invalid_params(format!("{uri} is not a directory resource")),
        false => RpcError::invalid_params(format!("No skill is served at {uri}")),
    };
    let hidden = upstreams
        .router
        .with_view(cx.profile(), |view| view.hides_skill(&uri));
    let routed = match hidden {
        true => Err(not_found()),
        false => resources::route_uri(&upstreams.router, cx.profile(), ListKind::Resources, &uri)
            .map_err(|_| not_found()),
    };
    let (upstream, original) = match routed {
        Ok(routed) => routed,
        Err(error) => {
            route.target = Some(uri);
            return Err(error);
        }
    };
    route.routed(&upstream, &uri);
    let original = raw_string(&original);
    members.insert("uri", &original);
    let reply = upstreams
        .forward_or_resume(cx, (method, &upstream), members, None, route)
        .await?;
    let Reply::Result(result) = reply else {
        return Ok(Answer::Upstream(reply));
    };
    let prefix = cx.prefix_of(&upstream);
    let exposed = match directory {
        true => expose_children(prefix, &result),
        false => expose_skill(prefix, &result),
    };
    Ok(Answer::Result(exposed.unwrap_or(result)))
}

/// A `skills/get` result with its skill's URIs exposed under `prefix`.
fn expose_skill(prefix: &Prefix, result: &RawValue) -> Option<Box<RawValue>> {
    if prefix.is_none() {
        return None;
    }
    let mut members = Members::of(result)?;
    let skill = skills::rewrite_skill(members.get("skill")?, &|u| names::expose_uri(prefix, u))?;
    members.insert("skill", &skill);
    Some(members.to_raw())
}

/// A `resources/directory/read` result with its children's URIs exposed under `prefix` (its
/// cursor is the upstream's own, for a request that names the same directory).
fn expose_children(prefix: &Prefix, result: &RawValue) -> Option<Box<RawValue>> {
    if prefix.is_none() {
        return None;
    }
    let mut members = Members::of(result)?;
    let children = skills::rewrite_uris(members.get("resources")?, "uri", &|u| {
        names::expose_uri(prefix, u)
    })?;
    members.insert("resources", &children);
    Some(members.to_raw())
}
