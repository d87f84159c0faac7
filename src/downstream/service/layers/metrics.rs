//! The metrics layer: a request that went upstream is counted once, under its upstream, method
//! and tool, with the upstream's latency and whether the host got an error (the per-upstream
//! series behind `/metrics`, and the OTLP histogram when telemetry is exported).

use super::super::outcome::Outcome;
use crate::mcp::method::Method;

pub(super) fn report(method: Method, outcome: &Outcome) {
    let Some(forwarded) = &outcome.route.forwarded else {
        return;
    };
    let (upstream, tool) = (&forwarded.upstream, forwarded.tool.as_deref());
    let failed = outcome.failed();
    (upstream.metrics()).record(method, tool, forwarded.elapsed, failed);
    crate::telemetry::otel::record_latency(
        upstream.name(),
        method,
        tool,
        forwarded.elapsed,
        failed,
    );
}
