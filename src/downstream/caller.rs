//! The host side of a forwarded request, as the upstream connection sees it ([`Caller`]): where
//! progress and server requests for it go (the request's own event stream while it is open —
//! nowhere once it has ended — or the session's stream for a host without one), how the host cancels it, and which server requests the host may
//! receive (by the version and capabilities its request carries).

use std::sync::Arc;

use serde_json::value::RawValue;

use super::session::{ForwardedRequest, Session};
use super::stream::{Refused, Sink};
use crate::jsonrpc::{RpcError, codes, notification_line, request_line_raw};
use crate::upstream::{Caller, Canceller, ServerRequestReply};

/// One host request being served upstream (or, with no id, the session itself).
pub(super) struct SessionCaller {
    pub session: Arc<Session>,
    /// The host's request id; `None` for server requests of a per-session instance at rest.
    pub host_id: Option<Box<RawValue>>,
    /// The request's own response stream, while it is open.
    pub sink: Option<Sink>,
}

impl Caller for SessionCaller {
    fn session_id(&self) -> &str {
        &self.session.id
    }

    fn supports(&self, capability: &str) -> bool {
        self.session.host.supports(capability)
    }

    fn started(&self, canceller: Canceller) {
        if let Some(id) = &self.host_id {
            self.session
                .tables()
                .in_flight
                .insert(id.get().to_owned(), canceller);
        }
    }

    fn send(&self, line: String) {
        let line = match &self.sink {
            Some(sink) => match sink.try_send(line) {
                Ok(()) => return,
                // The request's stream has ended: the request was answered or cancelled, so
                // what still comes for it (late progress) belongs nowhere.
                Err(Refused::Closed) => {
                    tracing::debug!(session = %self.session.id, "Dropped a message for a host request that has ended.");
                    return;
                }
                Err(Refused::Full(line)) => line,
            },
            None => line,
        };
        self.session.deliver(line);
    }

    fn forward_request(
        &self,
        method: &str,
        params: Option<&RawValue>,
        reply: ServerRequestReply,
    ) -> Result<Box<RawValue>, RpcError> {
        if self.sink.as_ref().is_some_and(Sink::is_closed) {
            return Err(RpcError::new(
                codes::INTERNAL_ERROR,
                format!("mcpmux refused `{method}`: the host request it belongs to has ended"),
            ));
        }
        // A host that cannot take the request does not support it, as far as the upstream
        // can tell (`-32601`).
        if let Some(why) = self.unfit(method, params) {
            return Err(RpcError::new(
                codes::METHOD_NOT_FOUND,
                format!("mcpmux refused `{method}`: {why}"),
            ));
        }
        let host_id = self.session.next_server_request_id();
        self.session.tables().server_requests.insert(
            host_id.get().to_owned(),
            ForwardedRequest {
                reply,
                method: method.to_owned(),
                sent: std::time::Instant::now(),
            },
        );
        self.send(request_line_raw(
            host_id.get(),
            method,
            params.map(RawValue::get),
        ));
        Ok(host_id)
    }

    fn handshake_era(&self) -> bool {
        !self.session.host.version.is_modern()
    }

    fn capabilities(&self) -> Option<&serde_json::Value> {
        Some(self.session.host.capabilities.value())
    }

    fn log_level(&self) -> Option<&'static str> {
        let rank =
            (self.session.host.request_log_level).or_else(|| self.session.tables().log_level)?;
        crate::mcp::LOG_LEVELS.get(rank).copied()
    }

    fn request_log_level(&self) -> Option<usize> {
        self.session.host.request_log_level
    }

    fn cancel_forwarded(&self, host_id: &RawValue, reason: Option<&RawValue>) {
        let known = self
            .session
            .tables()
            .server_requests
            .remove(host_id.get())
            .is_some();
        if known {
            let params = crate::mcp::cancelled_params(host_id.get(), reason.map(RawValue::get));
            self.send(notification_line("notifications/cancelled", Some(&params)));
        }
    }
}

impl SessionCaller {
    /// Why this host cannot take `method` (its version or capabilities lack it), if it cannot.
    fn unfit(&self, method: &str, params: Option<&RawValue>) -> Option<String> {
        let version = self.session.host.version;
        if version.is_modern() {
            return Some(format!(
                "the host speaks MCP {version}, which takes server requests only inside an input_required result, and mcpmux does not bridge them to that yet"
            ));
        }
        if method != "elicitation/create" {
            return None;
        }
        if !version.has_elicitation() {
            return Some(format!(
                "the host speaks MCP {version}, which has no elicitation"
            ));
        }
        let url_mode = crate::mcp::is_url_elicitation(params);
        let declared = &self.session.host.capabilities.value()["elicitation"];
        if url_mode && (!version.has_url_elicitation() || declared.get("url").is_none()) {
            return Some(
                "the host did not declare URL-mode elicitation (capabilities.elicitation.url)"
                    .into(),
            );
        }
        None
    }
}

/// Removes a host request from its session's cancellable set when it ends, however it ends.
pub(super) struct InFlightGuard {
    pub session: Arc<Session>,
    pub host_id: String,
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.session.tables().in_flight.remove(&self.host_id);
    }
}
