//! What hosts send besides requests — notifications (cancellation) and answers to the server
//! requests mcpmux forwarded — plus the end of a session and the catalog-change notices.

use std::sync::Arc;

use indexmap::IndexMap;
use serde_json::value::RawValue;

use super::{Gateway, to_raw};
use crate::audit::Outcome as Ended;
use crate::jsonrpc::{codes, notification_line};
use crate::mcp::ListKind;
use crate::upstream::UpstreamHandle;

use super::super::session::Session;

impl Gateway {
    /// A notification from a host.
    pub fn host_notification(&self, session: &Session, method: &str, params: Option<&RawValue>) {
        match method {
            "notifications/cancelled" => {
                let Some(members) = params.and_then(|p| {
                    serde_json::from_str::<IndexMap<String, &RawValue>>(p.get()).ok()
                }) else {
                    return;
                };
                let Some(id) = members.get("requestId") else {
                    return;
                };
                let canceller = session.tables().in_flight.remove(id.get());
                match canceller {
                    Some(canceller) => canceller.cancel(members.get("reason").copied()),
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

    /// Ends a session: its in-flight requests are cancelled upstream, its pending server requests
    /// refused, its subscriptions released, its per-session instances stopped.
    pub async fn close_session(&self, id: &str) -> bool {
        let Some(session) = self.hub.sessions.remove(id) else {
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
            let Ok((upstream, original)) = self.route_uri(&uri) else {
                continue;
            };
            let target: Option<UpstreamHandle> = match upstream.config().isolation {
                crate::config::Isolation::Shared => Some(upstream),
                crate::config::Isolation::PerSession => None,
            };
            if let Some(target) = target {
                if self.hub.unsubscribe(&target, &original) {
                    let params = serde_json::json!({ "uri": original }).to_string();
                    let _ = target
                        .request("resources/unsubscribe", Some(&params), None)
                        .await;
                }
            }
        }
        self.hub.stop_instances(id).await;
        self.audit_event("session.closed", id, None);
        true
    }

    /// Ends every session (daemon shutdown).
    pub async fn close_all(&self) {
        for session in self.hub.sessions.all() {
            self.close_session(&session.id).await;
        }
    }

    /// Forgets idle sessions periodically, for as long as the gateway lives.
    pub fn spawn_reaper(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        let every = self.hub.sessions.reap_interval();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                let Some(gateway) = weak.upgrade() else {
                    return;
                };
                for id in gateway.hub.sessions.idle() {
                    tracing::info!(session = %id, "Forgetting an idle host session.");
                    gateway.close_session(&id).await;
                }
            }
        });
    }

    /// Tells sessions with an event stream when a listing they see changed: one notification per
    /// listing per burst (the watch channel keeps only the newest generation).
    pub fn spawn_change_notices(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        let mut rx = self.router.watch();
        let mut seen = self.router.snapshot();
        tokio::spawn(async move {
            while rx.changed().await.is_ok() {
                rx.borrow_and_update();
                let Some(gateway) = weak.upgrade() else {
                    return;
                };
                let current = gateway.router.snapshot();
                let mut methods: Vec<&str> = ListKind::ALL
                    .into_iter()
                    .filter(|k| seen.fingerprint(*k) != current.fingerprint(*k))
                    .map(|k| k.changed_notification())
                    .collect();
                methods.dedup();
                seen = current;
                for session in gateway
                    .hub
                    .sessions
                    .all()
                    .iter()
                    .filter(|s| s.is_streaming())
                {
                    for method in &methods {
                        session.deliver(notification_line(method, None));
                    }
                }
            }
        });
    }
}
