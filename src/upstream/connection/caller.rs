//! What a connection needs from the host side, as traits the downstream implements: the
//! [`Caller`] of one forwarded request (where its progress, server requests and cancellations go)
//! and [`HostEvents`] for messages that belong to sessions rather than to one request (log
//! messages, resource updates, task status). And what the connection hands out in return: a
//! [`Canceller`] for a request in flight, a [`ServerRequestReply`] for a request it forwarded.
//! Keeping these as traits keeps `upstream` free of HTTP and session details.

use std::sync::{Arc, Weak};

use serde_json::value::RawValue;

use super::{Connection, UpstreamId};
use crate::jsonrpc::RpcError;

/// The host side of one request forwarded to an upstream.
pub trait Caller: Send + Sync {
    /// The host session the request came from.
    fn session_id(&self) -> &str;
    /// Whether that host declared a client capability (`sampling`, `elicitation`, `roots`).
    fn supports(&self, capability: &str) -> bool;
    /// The upstream is now serving the request; `canceller` cancels it there.
    fn started(&self, canceller: Canceller);
    /// A message for the host that belongs to this request (progress, a server request, …),
    /// already rewritten to the host's ids and tokens.
    fn send(&self, line: String);
    /// Forwards a request the upstream sent (sampling, elicitation, roots, …) to the host and
    /// returns the id the host sees it under; the host's answer goes to `reply`.
    fn forward_request(
        &self,
        method: &str,
        params: Option<&RawValue>,
        reply: ServerRequestReply,
    ) -> Result<Box<RawValue>, RpcError>;
    /// The upstream cancelled a request it had sent; tell the host (which knows it as `host_id`).
    fn cancel_forwarded(&self, host_id: &RawValue, reason: Option<&RawValue>);
}

/// Where upstream messages that are not tied to one request go. `upstream.scope` limits delivery
/// to the one session a per-session instance serves.
pub trait HostEvents: Send + Sync {
    /// `notifications/message` from `upstream`.
    fn log_message(&self, upstream: &UpstreamId, params: &RawValue);
    /// `notifications/resources/updated` for an upstream URI.
    fn resource_updated(&self, upstream: &UpstreamId, params: &RawValue);
    /// `notifications/tasks/status` for an upstream task.
    fn task_status(&self, upstream: &UpstreamId, params: &RawValue);
    /// A request the upstream sent was refused (its host could not be known, or lacks the capability).
    fn server_request_refused(&self, upstream: &UpstreamId, method: &str, reason: &str);
    /// A caller for server requests of a per-session instance with no request in flight.
    fn session_caller(&self, session_id: &str) -> Option<Arc<dyn Caller>>;
    /// Requests (method, params) that give a freshly started `upstream` what sessions had asked
    /// of its previous process: resource subscriptions still wanted, the log level.
    fn resume(&self, upstream: &UpstreamId) -> Vec<(String, String)>;
}

/// Cancels one in-flight upstream request.
#[derive(Clone)]
pub struct Canceller {
    pub(super) conn: Weak<Connection>,
    pub(super) id: u64,
}

impl std::fmt::Debug for Canceller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Canceller").field("id", &self.id).finish()
    }
}

impl Canceller {
    /// Tells the upstream to stop (`notifications/cancelled` with its id) and fails the waiting
    /// call at once, freeing its in-flight slot. A request that already finished is left alone.
    pub fn cancel(&self, reason: Option<&RawValue>) {
        if let Some(conn) = self.conn.upgrade() {
            conn.cancel(self.id, reason);
        }
    }
}

/// Carries a host's answer back to the upstream request it belongs to.
pub struct ServerRequestReply {
    pub(super) conn: Weak<Connection>,
    pub(super) upstream_id: Box<RawValue>,
    pub(super) upstream: String,
}

impl std::fmt::Debug for ServerRequestReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerRequestReply")
            .field("id", &self.upstream_id.get())
            .finish()
    }
}

impl ServerRequestReply {
    /// The upstream that sent the request.
    pub fn upstream(&self) -> &str {
        &self.upstream
    }

    /// Sends the host's `result` to the upstream under the upstream's own id.
    pub fn result(self, result: &RawValue) {
        let line = crate::jsonrpc::response_line(&self.upstream_id, result);
        self.deliver(line);
    }

    /// Sends an error object (the host's, or ours) to the upstream under its own id.
    pub fn error(self, error: &str) {
        let line = crate::jsonrpc::raw_error_line(Some(&self.upstream_id), error);
        self.deliver(line);
    }

    fn deliver(self, line: String) {
        if let Some(conn) = self.conn.upgrade() {
            conn.answer_server_request(&self.upstream_id, line);
        }
    }
}
