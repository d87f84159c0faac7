//! `completion/complete`: `ref.name` (a namespaced prompt) or `ref.uri` (a namespaced resource
//! template) names the upstream; the reference is rewritten to the upstream's own and forwarded.

use super::forward::Upstreams;
use super::method::Reference;
use super::outcome::Route;
use super::{Answer, RequestCx, resources, unknown};
use crate::jsonrpc::{Members, RpcError, raw_string};
use crate::mcp::ListKind;
use crate::mcp::method::Method;

/// `completion/complete`: `ref.name` (a prompt) or `ref.uri` (a resource template) names the upstream.
pub(super) async fn complete(
    cx: &RequestCx,
    (referenced, reference_members, members): (Reference, Members<'_>, Members<'_>),
    upstreams: &Upstreams,
    route: &mut Route,
) -> Result<Answer, RpcError> {
    let (mut reference, mut members) = (reference_members, members);
    let (upstream, key, original) = match referenced {
        Reference::Prompt(name) => {
            let snapshot = upstreams.router.view(cx.profile());
            let (upstream, original) = snapshot
                .route_name(ListKind::Prompts, &name)
                .ok_or_else(|| unknown(&snapshot, ListKind::Prompts, &name))?;
            route.routed(upstream, &name);
            (upstream.clone(), "name", original.to_owned())
        }
        Reference::Resource(uri) => {
            let (upstream, original) = resources::route_uri(
                &upstreams.router,
                cx.profile(),
                ListKind::ResourceTemplates,
                &uri,
            )?;
            route.routed(&upstream, &uri);
            (upstream, "uri", original)
        }
    };
    let original = raw_string(&original);
    reference.insert(key, &original);
    let reference = reference.to_raw();
    members.insert("ref", &reference);
    upstreams
        .forward(cx, &upstream, Method::Complete, members, route)
        .await
        .map(Answer::Upstream)
}
