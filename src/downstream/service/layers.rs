//! What reports on a host request once it is answered, one concern per file, each handed the
//! request's one [`Outcome`]: nothing here reads the answer again or decides anything twice.
//! The next cross-cutting concern is one more file and one more line in [`HostService::report`].
//!
//! Around the upstream call itself (`forward`): `permit` (the session's in-flight slots),
//! `deadline` (how long the upstream may take), `trace` (the span and trace context it
//! continues).
//!
//! - `trace`: the request's OpenTelemetry span (routed, ended with the error code).
//! - `metrics`: the upstream call's latency and error counts (`/metrics` and OTLP).
//! - `audit`: the request's audit record (and those of server requests and session events).

mod audit_record;
pub(super) mod deadline;
mod metrics;
pub(super) mod permit;
pub(super) mod trace;

pub(super) use trace::traceparent_of;

use super::outcome::{Asked, Outcome};
use super::{HostService, RequestCx};

/// The sizes of a request and its answer, for the audit record.
#[derive(Debug, Clone, Copy)]
pub(super) struct Sizes {
    pub request: usize,
    pub response: usize,
}

impl HostService {
    /// Hands a finished request's outcome to every layer.
    pub(super) fn report(&self, cx: &RequestCx, asked: Asked<'_>, outcome: Outcome, sizes: Sizes) {
        trace::report(cx, asked.as_str(), &outcome);
        if let Asked::Method(method) = asked {
            metrics::report(method, &outcome);
        }
        self.audit_request(cx, asked.as_str(), outcome, sizes);
    }
}
