//! What the upstream sends: answers to our requests, its own requests (answered here, forwarded
//! to the one host session they belong to, or refused when that cannot be known), and
//! notifications (routed to the request, the sessions or the actor they concern).

use std::sync::Arc;

use serde_json::value::RawValue;

use super::caller::{Caller, ReplyTo, ServerRequestReply};
use super::{Connection, Event, Forwarded};
use crate::jsonrpc::{
    MAX_DEPTH, Members, Received, RpcError, codes, error_line, nests_deeper_than, raw,
    response_line,
};
use crate::mcp::ListKind;
use crate::mcp::method::Method;
use crate::upstream::error::Reply;
use crate::upstream::transport::Inbound;

impl Connection {
    /// Handles one message (parsed by the transport that read it).
    pub(super) fn on_message(self: &Arc<Self>, inbound: Inbound, events: &impl Fn(Event)) {
        let (message, on_stream_of) = match inbound {
            Inbound::Message {
                message,
                on_stream_of,
            } => (message, on_stream_of),
            Inbound::Renewed => return events(Event::Renewed),
        };
        // What nests deeper than mcpmux forwards (as it bounds what hosts send) goes no further:
        // an answer becomes an error naming the upstream, anything else is refused or dropped.
        if let Some(deep) = too_deep(&message) {
            return self.on_too_deep(message, deep);
        }
        match message {
            Received::Response { id, result } => self.resolve(id.get(), Reply::Result(result)),
            Received::Error { id, error } => self.resolve(id.get(), Reply::Error(error)),
            Received::Request { id, method, params } => {
                self.on_request(&id, &method, params.as_deref(), on_stream_of)
            }
            Received::Notification { method, params } => {
                self.on_notification(&method, params.as_deref(), on_stream_of, events)
            }
        }
    }

    /// A message whose `deep` part nests deeper than [`MAX_DEPTH`].
    fn on_too_deep(&self, message: Received, deep: &'static str) {
        let why = format!(
            "upstream `{}` sent {deep} nested deeper than {MAX_DEPTH} levels, mcpmux's limit; it is not passed on",
            self.upstream()
        );
        tracing::warn!(upstream = %self.upstream(), "{why}");
        match message {
            Received::Response { id, .. } | Received::Error { id, .. } => {
                let error = RpcError::new(codes::UPSTREAM_UNAVAILABLE, why)
                    .with_data(serde_json::json!({ "upstream": self.upstream() }));
                self.resolve(id.get(), Reply::Error(crate::jsonrpc::to_raw(&error)));
            }
            Received::Request { id, .. } => {
                self.send_answer(error_line(Some(&id), &RpcError::invalid_params(why)));
            }
            Received::Notification { .. } => {}
        }
    }

    fn resolve(&self, id: &str, reply: Reply) {
        let pending = id
            .parse::<u64>()
            .ok()
            .and_then(|id| self.tables().remove(id));
        match pending {
            Some(pending) => {
                let _ = pending.waiter.send(Ok(reply));
            }
            None => {
                tracing::debug!(upstream = %self.upstream(), id, "Answer for a request no one waits for (late, cancelled or unknown).")
            }
        }
    }

    /// A request from the upstream to its client.
    fn on_request(
        self: &Arc<Self>,
        id: &RawValue,
        method: &str,
        params: Option<&RawValue>,
        on_stream_of: Option<u64>,
    ) {
        if method == Method::Ping.as_str() {
            self.send_answer(response_line(id, &raw("{}".to_owned())));
            return;
        }
        if method == "roots/list" {
            if let Some(roots) = &self.ctx.roots {
                self.send_answer(response_line(id, roots));
                return;
            }
        }
        // Refused as a client that does not support the method refuses it (`-32601`, as the
        // spec says of roots): mcpmux cannot serve it here, and nothing went wrong inside it. A
        // server that asks for roots as it starts, before any host is at work, is refused so
        // rather than told there are none: it asks again during a call (server-everything does),
        // and that call's host answers.
        let refuse = |why: String| {
            tracing::warn!(upstream = %self.upstream(), method, "{why}");
            if let Some(events) = &self.ctx.events {
                events.server_request_refused(&self.ctx.id, method, codes::METHOD_NOT_FOUND, &why);
            }
            self.send_answer(error_line(
                Some(id),
                &RpcError::new(codes::METHOD_NOT_FOUND, why),
            ));
        };
        let caller = match self.caller_of_server_request(on_stream_of) {
            Ok(caller) => caller,
            Err(why) => return refuse(format!("mcpmux refused `{method}`: {why}")),
        };
        if let Some(capability) = crate::mcp::capability_for(method) {
            if !caller.supports(capability) {
                return refuse(format!(
                    "mcpmux refused `{method}`: the host session that caused it did not declare the `{capability}` capability"
                ));
            }
        }
        let reply = ServerRequestReply {
            to: ReplyTo::Upstream {
                conn: Arc::downgrade(self),
                upstream_id: id.to_owned(),
            },
            upstream: self.upstream().to_owned(),
        };
        match caller.forward_request(method, params, reply) {
            Ok(host_id) => {
                self.tables()
                    .forwarded
                    .insert(id.get().to_owned(), Forwarded { caller, host_id });
            }
            Err(e) => {
                if let Some(events) = &self.ctx.events {
                    events.server_request_refused(&self.ctx.id, method, e.code, &e.message);
                }
                self.send_answer(error_line(Some(id), &e));
            }
        }
    }

    /// The host session a server request belongs to: the one whose request's answer stream
    /// carried it, else the only session with requests in flight here (or the one a per-session
    /// instance serves). Never a guess.
    fn caller_of_server_request(
        &self,
        on_stream_of: Option<u64>,
    ) -> Result<Arc<dyn Caller>, NoCaller> {
        let scope = &self.ctx.id.scope;
        let own = on_stream_of.and_then(|id| self.tables().caller_of(id));
        if let Some(caller) = own {
            return Ok(caller);
        }
        let (first, several, sessions_differ) = {
            let tables = self.tables();
            let mut callers = tables.pending.values().filter_map(|p| p.caller.as_ref());
            let first = callers.next().cloned();
            let rest: Vec<&Arc<dyn Caller>> = callers.collect();
            let differ = first
                .as_ref()
                .is_some_and(|f| rest.iter().any(|o| o.session_id() != f.session_id()));
            (first, !rest.is_empty(), differ)
        };
        if sessions_differ && scope.is_none() {
            return Err(NoCaller::Ambiguous(self.upstream().to_owned()));
        }
        let session = first
            .as_ref()
            .map(|o| o.session_id().to_owned())
            .or_else(|| scope.clone());
        match (first, several) {
            // The one request in flight caused it: it travels on that request's stream.
            (Some(caller), false) => Ok(caller),
            // One session, several requests: which one caused it is unknown, so it goes on the
            // session's own stream rather than on an arbitrary request's.
            _ => (session.and_then(|s| self.ctx.events.as_ref()?.session_caller(&s)))
                .ok_or_else(|| NoCaller::Idle(self.upstream().to_owned())),
        }
    }

    /// The host request a message that names none belongs to: the one whose answer stream
    /// carried it, else the one request in flight here, if only one is (the rule of
    /// [`Self::caller_of_server_request`], without its session fallback: a message for a
    /// session goes by the session's own tables).
    fn caller_of_message(&self, on_stream_of: Option<u64>) -> Option<Arc<dyn Caller>> {
        let tables = self.tables();
        if let Some(id) = on_stream_of {
            return tables.caller_of(id);
        }
        let mut callers = tables.pending.values().filter_map(|p| p.caller.as_ref());
        let only = callers.next()?;
        callers.next().is_none().then(|| Arc::clone(only))
    }

    fn on_notification(
        &self,
        method: &str,
        params: Option<&RawValue>,
        on_stream_of: Option<u64>,
        events: &impl Fn(Event),
    ) {
        let host = self.ctx.events.as_ref().zip(params);
        let id = &self.ctx.id;
        match method {
            "notifications/tools/list_changed" => events(Event::ListChanged(ListKind::Tools)),
            "notifications/prompts/list_changed" => events(Event::ListChanged(ListKind::Prompts)),
            // Skills are resources too: a catalog of them that changed says so with this.
            "notifications/resources/list_changed" => {
                events(Event::ListChanged(ListKind::Resources));
                events(Event::ListChanged(ListKind::ResourceTemplates));
                events(Event::ListChanged(ListKind::Skills));
            }
            "notifications/progress" => self.on_progress(params),
            "notifications/cancelled" => self.on_cancelled(params),
            "notifications/message" => {
                if let Some((host, params)) = host {
                    let request = self.caller_of_message(on_stream_of);
                    host.log_message(id, params, request.as_deref());
                }
            }
            "notifications/resources/updated" => {
                if let Some((host, params)) = host {
                    host.resource_updated(id, params);
                }
            }
            "notifications/tasks/status" => {
                if let Some((host, params)) = host {
                    host.task_status(id, params);
                }
            }
            other => {
                tracing::debug!(upstream = %self.upstream(), method = other, "Dropped a notification from upstream.")
            }
        }
    }

    /// Progress for one of our requests goes to its host only, under the host's token.
    fn on_progress(&self, params: Option<&RawValue>) {
        let Some(mut members) = params.and_then(Members::of) else {
            return;
        };
        let Some(token) = members.get("progressToken").map(|t| t.get().to_owned()) else {
            return;
        };
        let target = {
            let tables = self.tables();
            tables
                .progress
                .get(&token)
                .and_then(|id| tables.pending.get(id))
                .and_then(|p| {
                    let caller = Arc::clone(p.caller.as_ref()?);
                    let host = p.progress.as_ref()?.host.clone();
                    Some((caller, host))
                })
        };
        let Some((caller, host_token)) = target else {
            tracing::debug!(upstream = %self.upstream(), token, "Progress for no request in flight; dropped.");
            return;
        };
        members.insert("progressToken", &host_token);
        caller.send(crate::jsonrpc::notification_line(
            "notifications/progress",
            Some(&members.to_json()),
        ));
    }

    /// The upstream gave up a request it had sent to a host: tell that host only.
    fn on_cancelled(&self, params: Option<&RawValue>) {
        let Some(members) = params.and_then(Members::of) else {
            return;
        };
        let Some(request_id) = members.get("requestId") else {
            return;
        };
        let forwarded = self.tables().forwarded.remove(request_id.get());
        if let Some(forwarded) = forwarded {
            forwarded
                .caller
                .cancel_forwarded(&forwarded.host_id, members.get("reason"));
        }
    }
}

/// Which part of `message` nests deeper than [`MAX_DEPTH`], if one does (a message too short to
/// nest that deep is not scanned).
fn too_deep(message: &Received) -> Option<&'static str> {
    let (part, what) = match message {
        Received::Response { result, .. } => (Some(result), "an answer"),
        Received::Error { error, .. } => (Some(error), "an error answer"),
        Received::Request { params, .. } => (params.as_ref(), "a request"),
        Received::Notification { params, .. } => (params.as_ref(), "a notification"),
    };
    part.filter(|p| nests_deeper_than(p.get(), MAX_DEPTH))
        .map(|_| what)
}

/// Why a server request has no host to go to (each names the upstream).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum NoCaller {
    #[error(
        "requests from several host sessions are in flight on upstream `{0}`, so it cannot tell which host to ask; set isolation = \"per-session\" for this upstream"
    )]
    Ambiguous(String),
    #[error("no host request is in flight on upstream `{0}`, so it cannot tell which host to ask")]
    Idle(String),
}
