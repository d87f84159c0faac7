//! `logging/setLevel`: remembered per session (each session gets only the messages it asked
//! for); a shared upstream that logs is set to the most verbose level any session wants, and a
//! session's own instance to that session's level.

use serde_json::json;

use super::forward::{Start, Upstreams};
use super::{Answer, RequestCx};
use crate::downstream::tables::instance_key;
use crate::jsonrpc::{RpcError, to_raw};
use crate::mcp::method::Method;
use crate::mcp::{LOG_LEVELS, log_rank};
use crate::upstream::UpstreamHandle;

/// `logging/setLevel`: the session's level, and each upstream that logs told what the sessions
/// want of it now.
pub(super) async fn set_level(
    cx: &RequestCx,
    level: String,
    upstreams: &Upstreams,
) -> Result<Answer, RpcError> {
    let rank = log_rank(&level).ok_or_else(|| {
        RpcError::invalid_params(format!(
            "unknown level `{level}`; use one of {}",
            LOG_LEVELS.join(", ")
        ))
    })?;
    cx.own_session()?.tables().log_level = Some(rank);
    let loggers: Vec<UpstreamHandle> = upstreams
        .router
        .view(cx.profile())
        .offering("/logging")
        .cloned()
        .collect();
    for upstream in loggers {
        // This session's own instance of a per-session upstream (or its principal's of a
        // per-principal one) logs at this session's level; an anonymous session has none.
        let own = (upstreams.instance(cx, &upstream, Start::No).await)
            .ok()
            .flatten()
            .filter(|i| i.scope().is_some());
        if let Some(instance) = own {
            upstreams.tell_level(&instance, rank).await;
        }
        if let Some(wanted) = upstreams.delivery.wanted_log_level(upstream.name()) {
            upstreams.tell_level(&upstream, wanted).await;
        }
    }
    Ok(Answer::Result(to_raw(&json!({}))))
}

impl Upstreams {
    /// A 2026-07-28 request that asks for log messages (its envelope's `logLevel`) and goes to a
    /// handshake-era upstream that logs: that upstream is told to log at least as verbosely,
    /// once, before the request goes (what each host then gets is still decided per session and
    /// per request; a session's `logging/setLevel` sets it to what the sessions want again).
    pub(super) async fn level_for_request(&self, cx: &RequestCx, upstream: &UpstreamHandle) {
        let Some(rank) = cx.host.request_log_level else {
            return;
        };
        if upstream.is_modern() {
            return;
        }
        let logs = (self.router.view(cx.profile()).offering("/logging"))
            .any(|u| u.name() == upstream.name());
        // An instance serving stateless hosts is told apart from the shared one.
        let told = instance_key(upstream.name(), upstream.scope());
        if logs && self.delivery.log_levels.lower(&told, rank) {
            self.tell_level(upstream, rank).await;
        }
    }

    /// Sets a handshake-era upstream's level; a 2026-07-28 upstream is told with each request
    /// (its envelope's `logLevel`, from the session's level).
    pub(super) async fn tell_level(&self, upstream: &UpstreamHandle, rank: usize) {
        if upstream.is_modern() {
            return;
        }
        let params = json!({ "level": LOG_LEVELS[rank] });
        if let Err(e) = self
            .upstream_request(upstream, Method::SetLogLevel, &params)
            .await
        {
            tracing::warn!(upstream = %upstream.name(), error = %e, "Could not set the log level.");
        }
    }
}
