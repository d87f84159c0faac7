//! A principal's call to an upstream it must sign in to on its own ([`Upstreams::sign_in`]):
//! the host is asked to send its person to mcpmux's sign-in link — within the call, by an
//! `elicitation/create` in URL mode, when the host is a handshake-era one that declared URL
//! elicitation (the call goes on once the sign-in is done); else the call fails with `-32042`
//! (URL elicitation required) naming the link, which a 2026-07-28 host gets as an
//! `input_required` round (`forward.rs`) and its retry continues.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::RequestCx;
use super::forward::Upstreams;
use crate::downstream::caller::SessionCaller;
use crate::downstream::principal::Principal;
use crate::downstream::signin::{Issued, Outcome, Whom};
use crate::jsonrpc::{RpcError, codes, to_raw};
use crate::upstream::{Caller, ServerRequestReply, UpstreamHandle};

/// Longest a retry waits for a sign-in its person is finishing at the authorization server.
const RETRY_WAIT: Duration = Duration::from_secs(60);

impl Upstreams {
    /// Forgets `principal`'s tokens for `upstream` when the upstream refused them and they could
    /// not be renewed (its instance needs a sign-in): its call then asks it to sign in again.
    pub(super) async fn forget_refused(&self, upstream: &UpstreamHandle, principal: &Principal) {
        let key = principal.instance_key();
        let refused = (self.supervisor.existing_instance(upstream.name(), key))
            .is_some_and(|h| h.phase() == crate::upstream::Phase::NeedsLogin);
        if refused {
            let whom = Whom::of(principal);
            if let Err(e) = self.signins.revoke(upstream.name(), &whom) {
                tracing::warn!(upstream = %upstream.name(), principal = %whom.name, error = %e, "Cannot delete refused tokens.");
            }
            self.supervisor.stop_instance(upstream.name(), key).await;
        }
    }

    /// Makes sure `principal` has signed in to `upstream`: `Ok` once it has (now, or before);
    /// else the error the call ends with (`-32042` with the sign-in link).
    pub(super) async fn sign_in(
        &self,
        cx: &RequestCx,
        upstream: &UpstreamHandle,
        principal: &Principal,
    ) -> Result<(), RpcError> {
        let whom = Whom::of(principal);
        if self.signins.holds(upstream.name(), &whom) {
            return Ok(());
        }
        // A retry while its person is at the authorization server waits for them.
        if let Some(done) = self.signins.under_way(upstream.name(), &whom).await {
            if finished(done, RETRY_WAIT).await == Some(Ok(())) {
                return Ok(());
            }
        }
        let issued = (self
            .signins
            .issue(upstream, &whom, cx.session.as_ref())
            .await)
            .map_err(|why| RpcError::new(codes::INTERNAL_ERROR, why))?;
        let asks = cx.session.as_ref().filter(|s| {
            !s.host.version.is_modern()
                && s.host.version.has_url_elicitation()
                && s.host.capabilities.value()["elicitation"]
                    .get("url")
                    .is_some()
        });
        let Some(session) = asks else {
            return Err(url_required(&issued));
        };
        let caller = SessionCaller {
            session: Arc::clone(session),
            host_id: Some(cx.id.clone()),
            sink: cx.sink.clone(),
        };
        let params = json!({
            "mode": "url",
            "elicitationId": issued.elicitation_id,
            "url": issued.url,
            "message": issued.message,
        });
        let (reply, answer) = ServerRequestReply::waiting(upstream.name());
        caller.forward_request("elicitation/create", Some(&to_raw(&params)), reply)?;
        let ttl = self.signins.ttl();
        let action = match tokio::time::timeout(ttl, answer).await {
            Ok(Ok(Ok(result))) => serde_json::from_str::<serde_json::Value>(result.get())
                .ok()
                .and_then(|r| r["action"].as_str().map(str::to_owned)),
            // The host could not ask (an error, or it went away): it gets the link itself.
            _ => return Err(url_required(&issued)),
        };
        if action.as_deref() != Some("accept") {
            let action = action.unwrap_or_else(|| "no answer".into());
            return Err(RpcError::new(
                codes::INVALID_REQUEST,
                format!(
                    "the sign-in to upstream `{}` was not accepted ({action}); call again to be asked again",
                    upstream.name()
                ),
            ));
        }
        match finished(issued.done.clone(), ttl).await {
            Some(Ok(())) => Ok(()),
            Some(Err(why)) => Err(RpcError::new(
                codes::INVALID_REQUEST,
                format!("signing in to upstream `{}` failed: {why}", upstream.name()),
            )),
            None => Err(url_required(&issued)),
        }
    }
}

/// How the sign-in `done` tells of ended, within `wait`; `None` when it had not.
async fn finished(
    mut done: tokio::sync::watch::Receiver<Outcome>,
    wait: Duration,
) -> Option<Result<(), String>> {
    let ended = tokio::time::timeout(wait, done.wait_for(Option::is_some)).await;
    match ended {
        Ok(Ok(outcome)) => outcome.clone(),
        _ => None,
    }
}

/// `-32042`: the call can go on once the person has signed in at the link.
fn url_required(issued: &Issued) -> RpcError {
    RpcError::new(codes::URL_ELICITATION_REQUIRED, issued.message.clone()).with_data(json!({
        "elicitations": [{
            "mode": "url",
            "elicitationId": issued.elicitation_id,
            "url": issued.url,
            "message": issued.message,
        }],
    }))
}
