//! The audit layer: turning host requests, forwarded server requests and session events into
//! audit records. What routing learned (upstream, target, arguments) comes in the request's
//! [`Outcome`]; the trace id and principal from the request's context; redaction happens on the
//! caller, sealing on the writer thread.

use std::time::Instant;

use super::super::outcome::Outcome;
use super::super::{HostService, RequestCx};
use super::Sizes;
use crate::audit::{Direction, Ended, Kind, Record, RequestRecord, now_us};
use crate::telemetry::otel::TraceParent;

impl HostService {
    /// One record for a finished host request.
    pub(super) fn audit_request(
        &self,
        cx: &RequestCx,
        method: &str,
        outcome: Outcome,
        sizes: Sizes,
    ) {
        if !self.audit.is_enabled() {
            return;
        }
        let ended = match (outcome.failed(), outcome.tool_error) {
            (true, _) => Ended::Error,
            (false, true) => Ended::ToolError,
            (false, false) => Ended::Ok,
        };
        let route = &outcome.route;
        let profile = cx.profile();
        let trace = trace_id(cx);
        let redaction = route.redaction.unwrap_or(self.audit_redaction);
        self.audit.record_request(&RequestRecord {
            ts_us: now_us(),
            // A stateless request belongs to no session: its record names none (its principal,
            // profile and protocol say whose it is). A per-request id would be a session index
            // entry of its own for every record, which grows the store's index without end.
            session: cx.session.as_ref().map(|s| s.id.as_str()),
            principal: cx.principal(),
            profile: profile.map(|p| p.name.as_str()),
            protocol: cx.host.version.as_str(),
            upstream: route.upstream.as_deref(),
            method,
            target: route.target.as_deref(),
            outcome: ended,
            error_code: outcome.code,
            latency_us: u64::try_from(outcome.latency.as_micros()).unwrap_or(u64::MAX),
            request_bytes: sizes.request as u64,
            response_bytes: sizes.response as u64,
            trace_id: trace.as_deref(),
            args: route.args.as_deref().map(|args| (args, redaction)),
            detail: route.detail.as_deref(),
        });
    }

    /// One record for a request an upstream sent to a host, once the host answered (or not).
    pub fn audit_server_request(
        &self,
        session: &str,
        upstream: &str,
        method: &str,
        started: Instant,
        ended: Ended,
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
    pub(in super::super) fn audit_event(&self, name: &str, session: &str, detail: Option<String>) {
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

/// The trace this request belongs to: its span's, or the one the host sent.
fn trace_id(cx: &RequestCx) -> Option<std::borrow::Cow<'_, str>> {
    match cx.span.get() {
        Some(span) => Some(span.trace_id().into()),
        None => (cx.trace.as_ref())
            .and_then(TraceParent::trace_id)
            .map(Into::into),
    }
}
