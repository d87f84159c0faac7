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
use crate::upstream::InputRequired;

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
    /// Whether the host speaks a handshake-era version (it takes server requests on its
    /// session): a server that serves both eras is then spoken to in that era.
    fn handshake_era(&self) -> bool {
        false
    }
    /// What the host declared (its client capabilities), for the envelope of a request to a
    /// 2026-07-28 upstream.
    fn capabilities(&self) -> Option<&serde_json::Value> {
        None
    }
    /// The level the host wants log messages at, if it asked for any (by default, its
    /// request's own: [`Self::request_log_level`]).
    fn log_level(&self) -> Option<&'static str> {
        crate::mcp::LOG_LEVELS
            .get(self.request_log_level()?)
            .copied()
    }
    /// The level (a rank of [`crate::mcp::LOG_LEVELS`]) at which the log messages that belong to
    /// this request go on its own stream: a 2026-07-28 host's, which asks per request. `None`:
    /// none do (a handshake session gets its log messages by its session's level instead).
    fn request_log_level(&self) -> Option<usize> {
        None
    }
    /// Offers the caller a 2026-07-28 upstream's `input_required` result, `asked`. A caller that
    /// takes it (a 2026-07-28 host, which answers with a retry) keeps it, and the result goes
    /// back as it is, recognised by what was kept rather than looked for again. Otherwise it
    /// is given back: mcpmux asks the host each request and retries the call itself.
    fn take_input_required(&self, asked: InputRequired) -> Option<InputRequired> {
        Some(asked)
    }
}

/// Where upstream messages that are not tied to one request go. `upstream.scope` limits delivery
/// to the one session a per-session instance serves.
pub trait HostEvents: Send + Sync {
    /// `notifications/message` from `upstream`; `request` is the host request it belongs to,
    /// when that is known (see [`Caller::request_log_level`]).
    fn log_message(&self, upstream: &UpstreamId, params: &RawValue, request: Option<&dyn Caller>);
    /// `notifications/resources/updated` for an upstream URI.
    fn resource_updated(&self, upstream: &UpstreamId, params: &RawValue);
    /// `notifications/tasks/status` for an upstream task.
    fn task_status(&self, upstream: &UpstreamId, params: &RawValue);
    /// A request the upstream sent was refused with the error `code` (its host could not be
    /// known, or lacks the capability).
    fn server_request_refused(&self, upstream: &UpstreamId, method: &str, code: i64, reason: &str);
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

/// A host's answer to a request of mcpmux's own: its result, or its error object.
pub type HostAnswer = tokio::sync::oneshot::Receiver<Result<Box<RawValue>, Box<RawValue>>>;

/// Carries a host's answer back to the upstream request it belongs to.
pub struct ServerRequestReply {
    pub(super) to: ReplyTo,
    pub(super) upstream: String,
}

/// Where a host's answer goes.
pub(super) enum ReplyTo {
    /// To the upstream, as the answer to the request it sent under `upstream_id`.
    Upstream {
        conn: Weak<Connection>,
        upstream_id: Box<RawValue>,
    },
    /// To the round of a call that asked for it in an `input_required` result (2026-07-28): the
    /// host's result, or its error object.
    Round(tokio::sync::oneshot::Sender<Result<Box<RawValue>, Box<RawValue>>>),
}

impl std::fmt::Debug for ServerRequestReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut debug = f.debug_struct("ServerRequestReply");
        if let ReplyTo::Upstream { upstream_id, .. } = &self.to {
            debug.field("id", &upstream_id.get());
        }
        debug.finish()
    }
}

impl ServerRequestReply {
    /// A reply for a request of mcpmux's own to a host (on behalf of `upstream`): the host's
    /// result, or its error object, comes through the receiver.
    pub fn waiting(upstream: &str) -> (Self, HostAnswer) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let reply = Self {
            to: ReplyTo::Round(tx),
            upstream: upstream.to_owned(),
        };
        (reply, rx)
    }

    /// The upstream that sent the request.
    pub fn upstream(&self) -> &str {
        &self.upstream
    }

    /// Sends the host's `result` to the upstream under the upstream's own id.
    pub fn result(self, result: &RawValue) {
        match self.to {
            ReplyTo::Upstream { conn, upstream_id } => {
                let line = crate::jsonrpc::response_line(&upstream_id, result);
                deliver(&conn, &upstream_id, line);
            }
            ReplyTo::Round(round) => {
                let _ = round.send(Ok(result.to_owned()));
            }
        }
    }

    /// Sends an error object (the host's, or ours) to the upstream under its own id.
    pub fn error(self, error: &str) {
        match self.to {
            ReplyTo::Upstream { conn, upstream_id } => {
                let line = crate::jsonrpc::raw_error_line(Some(&upstream_id), error);
                deliver(&conn, &upstream_id, line);
            }
            ReplyTo::Round(round) => {
                let error = serde_json::value::RawValue::from_string(error.to_owned())
                    .unwrap_or_else(|_| crate::jsonrpc::raw_string(error));
                let _ = round.send(Err(error));
            }
        }
    }
}

fn deliver(conn: &Weak<Connection>, upstream_id: &RawValue, line: String) {
    if let Some(conn) = conn.upgrade() {
        conn.answer_server_request(upstream_id, line);
    }
}
