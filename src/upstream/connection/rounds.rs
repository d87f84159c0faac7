//! A request to a 2026-07-28 upstream: it carries mcpmux's envelope (`modern`), and a call may
//! end a round with `input_required` — requests for the host (sampling, elicitation, roots) and
//! a `requestState`. For a host that takes such results itself (a 2026-07-28 host) the result
//! goes back as it is; for a handshake-era host mcpmux drives the rounds: each request for input
//! becomes a real request to the one host session whose call it is, and the call is sent again
//! with the answers, for at most [`MAX_ROUNDS`] rounds.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::value::RawValue;
use serde_json::{Map, Value, json};
use tokio::sync::oneshot;

use super::caller::{Caller, ReplyTo, ServerRequestReply};
use super::{CallContext, Connection};
use crate::jsonrpc::{RpcError, codes, to_raw};
use crate::mcp::method::Method;
use crate::upstream::error::{Reply, UpstreamError};
use crate::upstream::modern::{self, Declared, InputRequired};
use crate::upstream::transport::Modern;

/// Rounds mcpmux drives for one call of a handshake-era host before it gives up.
pub(in crate::upstream) const MAX_ROUNDS: usize = 16;

impl Connection {
    /// [`Connection::request`] to a 2026-07-28 upstream.
    pub(super) async fn rounds(
        self: &Arc<Self>,
        method: &str,
        params: Option<&str>,
        timeout: Duration,
        call: Option<CallContext>,
    ) -> Result<Reply, UpstreamError> {
        let deadline = Instant::now() + timeout;
        let caller = call.as_ref().map(|c| Arc::clone(&c.caller));
        let declared = Declared {
            capabilities: caller.as_deref().and_then(Caller::capabilities),
            log_level: caller.as_deref().and_then(Caller::log_level),
        };
        let (mut params, name) = modern::enveloped(method, params, &declared);
        let headers = Modern {
            params: self.param_values(method, name.as_deref(), &params),
            name,
            cancels: None,
        };
        for _ in 0..MAX_ROUNDS {
            let left = deadline.saturating_duration_since(Instant::now());
            let reply = self
                .exchange(
                    method,
                    Some(&params),
                    Some(Box::new(headers.clone())),
                    left,
                    call.clone(),
                )
                .await?;
            let Reply::Result(result) = &reply else {
                return Ok(reply);
            };
            let Some(asked) = modern::input_required(result) else {
                return Ok(reply);
            };
            // mcpmux's own requests never ask for input.
            let Some(caller) = caller.as_ref() else {
                return Ok(reply);
            };
            // A 2026-07-28 host answers it with a retry.
            let Some(asked) = caller.take_input_required(asked) else {
                return Ok(reply);
            };
            let responses = match self.ask(caller, &asked, (deadline, timeout)).await? {
                Ok(responses) => responses,
                Err(error) => return Ok(Reply::Error(error)),
            };
            params = modern::retry(&params, &responses, asked.request_state.as_deref());
        }
        Ok(Reply::Error(to_raw(&RpcError::new(
            codes::INTERNAL_ERROR,
            format!(
                "upstream `{}` still asked for input after {MAX_ROUNDS} rounds of `{method}`; mcpmux gave up on the call",
                self.upstream()
            ),
        ))))
    }

    /// The `Mcp-Param-*` headers of a call of a tool with annotated parameters.
    fn param_values(
        &self,
        method: &str,
        tool: Option<&str>,
        params: &str,
    ) -> Vec<(String, String)> {
        let (Some(tool), true) = (tool, method == Method::ToolsCall.as_str()) else {
            return Vec::new();
        };
        let headers = crate::sync::lock(&self.param_headers).get(tool).cloned();
        let Some(headers) = headers else {
            return Vec::new();
        };
        let params: Value = serde_json::from_str(params).unwrap_or_default();
        crate::mcp::param_headers::values(&headers, &params["arguments"])
    }

    /// Asks `caller`'s host each request of an `input_required` result, at once, and waits for
    /// every answer: the `inputResponses` of the next round, or the error the host's call ends
    /// with (a capability it lacks, an error it answered).
    async fn ask(
        &self,
        caller: &Arc<dyn Caller>,
        asked: &InputRequired,
        (deadline, timeout): (Instant, Duration),
    ) -> Result<Result<Map<String, Value>, Box<RawValue>>, UpstreamError> {
        let mut waiting = Vec::with_capacity(asked.input_requests.len());
        for (key, request) in &asked.input_requests {
            let method = request["method"].as_str().unwrap_or_default();
            let params = request.get("params").map(to_raw);
            if method == "roots/list" {
                if let Some(roots) = &self.ctx.roots {
                    let (tx, rx) = oneshot::channel();
                    let _ = tx.send(Ok(roots.clone()));
                    waiting.push((key, None, rx));
                    continue;
                }
            }
            if let Some(capability) = crate::mcp::capability_for(method) {
                if !caller.supports(capability) {
                    return Ok(Err(to_raw(&RpcError::new(
                        codes::INTERNAL_ERROR,
                        format!(
                            "upstream `{}` needs `{method}`, and the host did not declare the `{capability}` capability",
                            self.upstream()
                        ),
                    ))));
                }
            }
            let (tx, rx) = oneshot::channel();
            let reply = ServerRequestReply {
                to: ReplyTo::Round(tx),
                upstream: self.upstream().to_owned(),
            };
            match caller.forward_request(method, params.as_deref(), reply) {
                Ok(host_id) => waiting.push((key, Some(host_id), rx)),
                Err(e) => return Ok(Err(to_raw(&e))),
            }
        }
        let mut responses = Map::new();
        let mut outcome = Ok(());
        for (key, host_id, rx) in waiting {
            if outcome.is_err() {
                // One failed: the others are withdrawn from the host.
                if let Some(host_id) = host_id {
                    caller.cancel_forwarded(&host_id, None);
                }
                continue;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, rx).await {
                Ok(Ok(Ok(result))) => {
                    let result: Value = serde_json::from_str(result.get()).unwrap_or(json!({}));
                    responses.insert(key.clone(), result);
                }
                Ok(Ok(Err(error))) => outcome = Err(Ok(error)),
                Ok(Err(_)) => {
                    outcome = Err(Err(self.failed(
                        "the host session ended before it answered what the upstream asked".into(),
                    )));
                }
                Err(_) => {
                    if let Some(host_id) = host_id {
                        caller.cancel_forwarded(&host_id, None);
                    }
                    outcome = Err(Err(UpstreamError::Timeout {
                        upstream: self.upstream().to_owned(),
                        timeout,
                    }));
                }
            }
        }
        match outcome {
            Ok(()) => Ok(Ok(responses)),
            Err(Ok(error)) => Ok(Err(error)),
            Err(Err(failed)) => Err(failed),
        }
    }
}
