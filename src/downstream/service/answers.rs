//! What hosts send besides requests — notifications (cancellation) and answers to the server
//! requests mcpmux forwarded — and the end of a session: its in-flight requests cancelled
//! upstream, its server requests refused, its subscriptions released, its instances stopped.

use serde_json::value::RawValue;

use super::HostService;
use crate::audit::Ended;
use crate::config::Isolation;
use crate::downstream::session::Session;
use crate::jsonrpc::{Members, codes, to_raw};
use crate::mcp::method::Method;

impl HostService {
    /// A notification from a host.
    pub fn host_notification(&self, session: &Session, method: &str, params: Option<&RawValue>) {
        match method {
            "notifications/cancelled" => {
                let Some(members) = params.and_then(Members::of) else {
                    return;
                };
                let Some(id) = members.get("requestId") else {
                    return;
                };
                let canceller = session.tables().in_flight.remove(id.get());
                match canceller {
                    Some(canceller) => canceller.cancel(members.get("reason")),
                    None => {
                        tracing::debug!(session = %session.id, id = id.get(), "Cancellation for no request in flight.")
                    }
                }
            }
            "notifications/initialized" | "notifications/roots/list_changed" => {}
            other => {
                tracing::debug!(session = %session.id, method = other, "Ignored a notification from a host.")
            }
        }
    }

    /// A host's answer to a server request mcpmux forwarded to it.
    pub fn host_answer(
        &self,
        session: &Session,
        id: &RawValue,
        result: Option<&RawValue>,
        error: Option<&RawValue>,
    ) {
        let Some(forwarded) = session.tables().server_requests.remove(id.get()) else {
            tracing::debug!(session = %session.id, id = id.get(), "Answer for no forwarded request.");
            return;
        };
        let upstream = forwarded.reply.upstream().to_owned();
        let (ended, code) = match (result, error) {
            (Some(result), _) => {
                forwarded.reply.result(result);
                (Ended::Ok, None)
            }
            (None, Some(error)) => {
                let code = serde_json::from_str::<serde_json::Value>(error.get())
                    .ok()
                    .and_then(|e| e["code"].as_i64());
                forwarded.reply.error(error.get());
                (Ended::Error, code)
            }
            (None, None) => return,
        };
        self.audit_server_request(
            &session.id,
            &upstream,
            &forwarded.method,
            forwarded.sent,
            ended,
            code,
        );
    }

    /// Stops `upstream`'s instance for `key` (a principal whose sign-in was revoked).
    pub async fn stop_instance_of(&self, upstream: &str, key: &str) {
        self.upstreams.supervisor.stop_instance(upstream, key).await;
    }

    /// Stops the instances that serve `key` (a principal's, [`Principal::instance_key`]): a
    /// call in flight on them ends with an error; the next call starts them again.
    ///
    /// [`Principal::instance_key`]: crate::downstream::principal::Principal::instance_key
    pub async fn stop_instances_of(&self, key: &str) {
        self.upstreams.supervisor.stop_instances(key).await;
        self.upstreams.delivery.log_levels.forget_scope(key);
        self.upstreams.exchanges.forget(key);
    }

    /// Ends a session: its in-flight requests are cancelled upstream, its pending server requests
    /// refused, its subscriptions released, its per-session instances stopped.
    pub async fn close_session(&self, id: &str) -> bool {
        let Some(session) = self.upstreams.delivery.sessions.remove(id) else {
            return false;
        };
        let (in_flight, server_requests, subscriptions) = {
            let mut t = session.tables();
            (
                std::mem::take(&mut t.in_flight),
                std::mem::take(&mut t.server_requests),
                std::mem::take(&mut t.subscriptions),
            )
        };
        let reason = to_raw("the host session ended");
        for canceller in in_flight.into_values() {
            canceller.cancel(Some(&reason));
        }
        let refusal = format!(
            r#"{{"code":{},"message":"the host session ended"}}"#,
            codes::INTERNAL_ERROR
        );
        for forwarded in server_requests.into_values() {
            let upstream = forwarded.reply.upstream().to_owned();
            forwarded.reply.error(&refusal);
            let code = Some(codes::INTERNAL_ERROR);
            self.audit_server_request(
                &session.id,
                &upstream,
                &forwarded.method,
                forwarded.sent,
                Ended::Error,
                code,
            );
        }
        for uri in subscriptions {
            let Ok((upstream, original)) = super::resources::route_uri(
                &self.upstreams.router,
                session.profile().as_deref(),
                crate::mcp::ListKind::Resources,
                &uri,
            ) else {
                continue;
            };
            // A session's own instances stop with it; a shared upstream is told when no one is left.
            if upstream.config().isolation == Isolation::Shared
                && self
                    .upstreams
                    .delivery
                    .subscriptions
                    .remove(upstream.id(), &original)
            {
                let params = serde_json::json!({ "uri": original }).to_string();
                let _ = upstream
                    .request(Method::ResourcesUnsubscribe.as_str(), Some(&params), None)
                    .await;
            }
        }
        self.upstreams.delivery.subscriptions.forget_session(id);
        self.upstreams.supervisor.stop_instances(id).await;
        self.audit_event("session.closed", id, None);
        true
    }

    /// Ends every session (daemon shutdown).
    pub async fn close_all(&self) {
        for session in self.upstreams.delivery.sessions.all() {
            self.close_session(&session.id).await;
        }
    }
}
