//! The `discover` family: `server/discover` (2026-07-28), what the host's view offers.

use serde_json::{Value, json};

use super::forward::Upstreams;
use super::{Answer, RequestCx, initialize};
use crate::jsonrpc::{RpcError, to_raw};
use crate::mcp::version::Version;
use crate::upstream::{Phase, UpstreamHandle};

/// `server/discover`: the revisions mcpmux serves (whatever its upstreams speak), and the
/// capabilities and instructions of the host's view. Lazy upstreams start now, and it waits
/// (bounded, as `initialize` does) for those still starting, so what it offers is whole.
pub(super) async fn discover(cx: &RequestCx, upstreams: &Upstreams) -> Result<Answer, RpcError> {
    let starting: Vec<UpstreamHandle> = (upstreams.router)
        .view(cx.profile())
        .upstreams()
        .cloned()
        .collect();
    for upstream in &starting {
        upstream.start_if_lazy();
    }
    let wait = upstreams.limits.load().initialize_wait;
    let starting = starting
        .iter()
        .filter(|h| h.phase() == Phase::Starting || h.never_started());
    futures_util::future::join_all(starting.map(|h| h.settled(wait))).await;
    let snapshot = upstreams.router.view(cx.profile());
    let supported: Vec<&str> = Version::SERVED.iter().map(|v| v.as_str()).collect();
    let mut result = json!({
        "supportedVersions": supported,
        "capabilities": initialize::capabilities(&snapshot, Version::MODERN),
    });
    if let Some(instructions) = initialize::instructions(&snapshot) {
        result["instructions"] = Value::String(instructions);
    }
    Ok(Answer::Result(to_raw(&result)))
}
