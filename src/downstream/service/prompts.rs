//! The `prompts` family: `prompts/get`, routed by the exposed name as a tool call is.

use super::forward::Upstreams;
use super::outcome::Route;
use super::tools;
use super::{Answer, RequestCx};
use crate::jsonrpc::{Members, RpcError};
use crate::mcp::ListKind;
use crate::mcp::method::Method;

/// `prompts/get` of the prompt the host's view names `name`.
pub(super) async fn get(
    cx: &RequestCx,
    name: String,
    members: Members<'_>,
    upstreams: &Upstreams,
    route: &mut Route,
) -> Result<Answer, RpcError> {
    let asked = (Method::PromptsGet, ListKind::Prompts);
    tools::named(cx, asked, name, members, upstreams, route).await
}
