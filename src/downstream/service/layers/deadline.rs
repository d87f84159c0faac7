//! The deadline layer: how long an upstream may take to answer a request — the tool's own
//! `timeout` when it has one, else the upstream's `request_timeout`. The connection answers the
//! caller with a timeout error at the deadline and tells the upstream to stop.

use std::time::Duration;

use crate::upstream::UpstreamHandle;

/// The deadline of a request to `upstream` (of `tool`, for a tool call).
pub(in super::super) fn of(upstream: &UpstreamHandle, tool: Option<&str>) -> Duration {
    upstream.config().policy.timeout_for(tool)
}
