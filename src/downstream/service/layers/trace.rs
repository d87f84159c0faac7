//! The trace layer: the upstream request's span and the trace context it carries upstream; a
//! host request's span learns where it was routed and ends with the error code the host got;
//! and the W3C trace context a request brings in its `_meta`.

use serde::Deserialize;

use super::super::RequestCx;
use super::super::outcome::Outcome;
use crate::mcp::method::Method;
use crate::telemetry::otel::{TraceParent, UpstreamSpan};

/// The trace a forwarded request continues upstream.
pub(in super::super) struct UpstreamTrace {
    /// The upstream request's span, when traces are exported.
    span: Option<UpstreamSpan>,
    /// What mcpmux writes into the request's `_meta`.
    meta: Option<TraceParent>,
}

/// The trace the upstream continues: a child of this request's span when traces are exported,
/// else the host's own (already in `_meta`, unless it came in HTTP headers: then it is written).
pub(in super::super) fn upstream(
    cx: &RequestCx,
    method: Method,
    tool: Option<&str>,
    upstream: &str,
) -> UpstreamTrace {
    match (crate::telemetry::otel::tracer(), cx.span.get()) {
        (Some(tracer), Some(span)) => {
            let (child, trace) = span.child(tracer, method.as_str(), tool, upstream);
            UpstreamTrace {
                span: Some(child),
                meta: Some(trace),
            }
        }
        _ => UpstreamTrace {
            span: None,
            meta: cx.trace.as_ref().filter(|t| t.from_headers).cloned(),
        },
    }
}

impl UpstreamTrace {
    /// The trace context to write into the request's `_meta`, if any.
    pub fn meta(&self) -> Option<&TraceParent> {
        self.meta.as_ref()
    }

    /// What the request's `_meta` carries now, ours or the host's own (remote transports send it
    /// as headers too).
    pub fn carried(&mut self, cx: &RequestCx) -> Option<TraceParent> {
        self.meta.take().or_else(|| cx.trace.clone())
    }

    /// Ends the upstream span, failed unless the upstream answered with a result.
    pub fn end(self, answered: bool) {
        if let Some(span) = self.span {
            span.end(!answered);
        }
    }
}

/// Ends the request's span (when traces are exported).
pub(super) fn report(cx: &RequestCx, method: &str, outcome: &Outcome) {
    if let Some(span) = cx.span.get() {
        let route = &outcome.route;
        span.routed(method, route.target.as_deref(), route.upstream.as_deref());
        span.end(outcome.code);
    }
}

/// The W3C trace context in a request's `_meta`, if it carries a well-formed one.
pub(in super::super) fn traceparent_of(params: &str) -> Option<TraceParent> {
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
    let meta = serde_json::from_str::<Params>(params).ok()?.meta?;
    let trace = TraceParent {
        traceparent: meta.traceparent?,
        tracestate: meta.tracestate,
        from_headers: false,
    };
    trace.trace_id().is_some().then_some(trace)
}
