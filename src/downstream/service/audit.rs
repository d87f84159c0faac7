//! Turning host requests, forwarded server requests and session events into audit records.
//! What the routing learned (upstream, target, arguments) is noted on the [`HostRequest`] as it
//! happens ([`RouteFacts`]), so nothing is parsed twice; the trace id and principal come from the
//! request's context; redaction happens on the caller, sealing on the writer thread.

use std::time::Instant;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::{Answer, HostRequest, HostService};
use crate::audit::{Direction, Kind, Outcome, Record};
use crate::config::Redaction;
use crate::jsonrpc::RpcError;
use crate::upstream::Reply;

/// What routing learned about a request, for its audit record.
#[derive(Debug, Default)]
pub struct RouteFacts {
    pub upstream: Option<String>,
    /// The name or URI as the host sent it.
    pub target: Option<String>,
    pub args: Option<Box<RawValue>>,
    /// The upstream's (or tool's) redaction, when it overrides the global one.
    pub redaction: Option<Redaction>,
}

impl HostRequest {
    /// Records what routing learned.
    pub(super) fn note(&self, f: impl FnOnce(&mut RouteFacts)) {
        f(&mut crate::sync::lock(&self.facts));
    }
}

#[derive(Deserialize)]
struct ToolResultFlag {
    #[serde(rename = "isError", default)]
    is_error: bool,
}

#[derive(Deserialize)]
struct ErrorCode {
    code: i64,
}

impl HostService {
    /// One record for a finished host request.
    pub(super) fn audit_request(
        &self,
        host: &HostRequest,
        method: &str,
        request_bytes: usize,
        answer: &Result<Answer, RpcError>,
        response_bytes: usize,
        started: Instant,
    ) {
        if !self.audit.is_enabled() {
            return;
        }
        let (ended, code) = match answer {
            Ok(Answer::Result(result) | Answer::Upstream(Reply::Result(result))) => {
                // Only a result that mentions `isError` is parsed to read it.
                let tool_error = method == "tools/call"
                    && result.get().contains(r#""isError""#)
                    && serde_json::from_str::<ToolResultFlag>(result.get())
                        .is_ok_and(|r| r.is_error);
                (
                    if tool_error {
                        Outcome::ToolError
                    } else {
                        Outcome::Ok
                    },
                    None,
                )
            }
            Ok(Answer::Upstream(Reply::Error(error))) => (
                Outcome::Error,
                serde_json::from_str::<ErrorCode>(error.get())
                    .ok()
                    .map(|e| e.code),
            ),
            Err(error) => (Outcome::Error, Some(error.code)),
        };
        let facts = std::mem::take(&mut *crate::sync::lock(&host.facts));
        let mut record = Record::new(Kind::Request, method, ended);
        record.direction = Some(Direction::HostToUpstream);
        record.session = Some(host.session.id.clone());
        record.error_code = code;
        record.latency_us = Some(micros(started));
        record.request_bytes = Some(request_bytes as u64);
        record.response_bytes = Some(response_bytes as u64);
        record.trace_id = Some(host.trace_id().unwrap_or_else(new_trace_id));
        record.principal = host.ctx.principal.as_deref().map(str::to_owned);
        record.profile = host.profile().map(|p| p.name.clone());
        if let Some(args) = facts.args {
            record.raw_args = Some((args, facts.redaction.unwrap_or(self.audit_redaction)));
        }
        record.upstream = facts.upstream;
        record.target = facts.target;
        self.audit.record(record);
    }

    /// One record for a request an upstream sent to a host, once the host answered (or not).
    pub fn audit_server_request(
        &self,
        session: &str,
        upstream: &str,
        method: &str,
        started: Instant,
        ended: Outcome,
        code: Option<i64>,
    ) {
        if !self.audit.is_enabled() {
            return;
        }
        let mut record = Record::new(Kind::Request, method, ended);
        record.direction = Some(Direction::UpstreamToHost);
        record.session = Some(session.to_owned());
        record.upstream = Some(upstream.to_owned());
        record.error_code = code;
        record.latency_us = Some(micros(started));
        record.trace_id = Some(new_trace_id());
        self.audit.record(record);
    }

    /// A session lifecycle event.
    pub(super) fn audit_event(&self, name: &str, session: &str, detail: Option<String>) {
        if self.audit.is_enabled() {
            self.audit
                .record(Record::event(name, None, Some(session), detail));
        }
    }
}

fn micros(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_micros()).unwrap_or(u64::MAX)
}

/// A W3C-style trace id (32 hex digits) for a request that came without one.
fn new_trace_id() -> String {
    crate::audit::hex(&rand::random::<[u8; 16]>())
}

/// The W3C trace context in a request's `_meta`, if it carries a well-formed one.
pub(super) fn traceparent_of(params: &RawValue) -> Option<crate::telemetry::otel::TraceParent> {
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
    let trace = crate::telemetry::otel::TraceParent {
        traceparent: meta.traceparent?,
        tracestate: meta.tracestate,
        from_headers: false,
    };
    trace.trace_id().is_some().then_some(trace)
}
