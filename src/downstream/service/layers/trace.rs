//! The trace layer: a host request's span learns where it was routed and ends with the error
//! code the host got; and the W3C trace context a request brings in its `_meta`.

use serde::Deserialize;
use serde_json::value::RawValue;

use super::super::HostRequest;
use super::super::outcome::Outcome;
use crate::telemetry::otel::TraceParent;

/// Ends the request's span (when traces are exported).
pub(super) fn report(host: &HostRequest, method: &str, outcome: &Outcome) {
    if let Some(span) = host.span.get() {
        let route = &outcome.route;
        span.routed(method, route.target.as_deref(), route.upstream.as_deref());
        span.end(outcome.code);
    }
}

/// The W3C trace context in a request's `_meta`, if it carries a well-formed one.
pub(in super::super) fn traceparent_of(params: &RawValue) -> Option<TraceParent> {
    #[derive(Deserialize)]
    struct Params {
        #[serde(rename = "_meta")]
        meta: Option<Meta>,
    }
    #[derive(Deserialize)]
    struct Meta {
        traceparent: Option<String>,
        tracestate: Option<String>,
    }
    let meta = serde_json::from_str::<Params>(params.get()).ok()?.meta?;
    let trace = TraceParent {
        traceparent: meta.traceparent?,
        tracestate: meta.tracestate,
        from_headers: false,
    };
    trace.trace_id().is_some().then_some(trace)
}
