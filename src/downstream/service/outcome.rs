//! What a host request came to, decided once: its handler fills in a [`Route`] as it routes
//! (upstream, target, audited arguments, the upstream call), and once it has answered, one
//! [`Outcome`] — the error code, whether a tool reported an error, the route, the latency — is
//! handed to each layer that reports on it (`layers`: the trace span, the metrics, the audit
//! record). No layer reads the answer again.

use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::value::RawValue;

use super::Answer;
use crate::config::Redaction;
use crate::jsonrpc::{Needle, RpcError};
use crate::mcp::method::Method;
use crate::upstream::{Reply, UpstreamHandle};

/// What routing learned about a request, as its handler goes.
#[derive(Debug, Default)]
pub(super) struct Route {
    /// The upstream it was routed to.
    pub upstream: Option<String>,
    /// The name or URI as the host sent it.
    pub target: Option<String>,
    /// The arguments, when they will be audited.
    pub args: Option<Box<RawValue>>,
    /// The upstream's (or tool's) redaction, when it overrides the global one.
    pub redaction: Option<Redaction>,
    /// The request that went upstream, once it was answered (or failed).
    pub forwarded: Option<Forwarded>,
    /// The answer is a round of a multi-round request (`input_required`), not its end.
    pub interim: bool,
    /// What the answer was, for its audit record, when mcpmux answered it (a search: the
    /// names it returned).
    pub detail: Option<String>,
}

/// One request forwarded to an upstream: what the metrics count.
#[derive(Debug)]
pub(super) struct Forwarded {
    pub upstream: UpstreamHandle,
    /// The upstream's own tool name, for a tool call.
    pub tool: Option<String>,
    /// How long the upstream took.
    pub elapsed: Duration,
}

impl Route {
    /// Notes the upstream and target a request was routed to.
    pub fn routed(&mut self, upstream: &UpstreamHandle, target: &str) {
        tracing::Span::current().record("target", target);
        self.upstream = Some(upstream.name().to_owned());
        self.target = Some(target.to_owned());
    }
}

/// What a host asked for: a method mcpmux serves, or (refused) the name of one it does not.
#[derive(Debug, Clone, Copy)]
pub(super) enum Asked<'a> {
    Method(Method),
    Unknown(&'a str),
}

impl Asked<'_> {
    /// The method's name, as the host sent it.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Method(method) => method.as_str(),
            Self::Unknown(name) => name,
        }
    }
}

/// What a request came to.
#[derive(Debug)]
pub(super) struct Outcome {
    /// The JSON-RPC error code the host got, if it got an error.
    pub code: Option<i64>,
    /// A tool call whose result says `isError` (read only when `tool_errors` was asked for).
    pub tool_error: bool,
    pub route: Route,
    /// From the request's arrival to its answer.
    pub latency: Duration,
}

impl Outcome {
    /// Decides the outcome of `answer` to `method`; a tool result's `isError` is read only with
    /// `tool_errors` (the audit log wants it, nothing else does).
    pub fn of(
        asked: Asked<'_>,
        answer: &Result<Answer, RpcError>,
        route: Route,
        started: Instant,
        tool_errors: bool,
    ) -> Self {
        #[derive(Deserialize)]
        struct Coded {
            code: i64,
        }
        static IS_ERROR: Needle = Needle::new(r#""isError""#);
        #[derive(Deserialize)]
        struct ToolResult {
            #[serde(rename = "isError", default)]
            is_error: bool,
        }
        let (code, tool_error) = match answer {
            Ok(Answer::Result(result) | Answer::Upstream(Reply::Result(result))) => {
                // Only a result that mentions `isError` is parsed to read it.
                let tool_error = tool_errors
                    && matches!(asked, Asked::Method(Method::ToolsCall))
                    && IS_ERROR.is_in(result.get())
                    && serde_json::from_str::<ToolResult>(result.get()).is_ok_and(|r| r.is_error);
                (None, tool_error)
            }
            Ok(Answer::Upstream(Reply::Error(error))) => (
                serde_json::from_str::<Coded>(error.get())
                    .ok()
                    .map(|c| c.code),
                false,
            ),
            Err(error) => (Some(error.code), false),
        };
        Self {
            code,
            tool_error,
            route,
            latency: started.elapsed(),
        }
    }

    /// Whether the host got an error.
    pub fn failed(&self) -> bool {
        self.code.is_some()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::jsonrpc::{codes, raw};

    fn of(method: Method, answer: Result<Answer, RpcError>) -> Outcome {
        Outcome::of(
            Asked::Method(method),
            &answer,
            Route::default(),
            Instant::now(),
            true,
        )
    }

    #[test]
    fn an_error_is_its_code_whoever_answered_it() {
        let ours = of(Method::ToolsCall, Err(RpcError::invalid_params("no")));
        assert_eq!(ours.code, Some(codes::INVALID_PARAMS));
        let theirs = Answer::Upstream(Reply::Error(raw(
            r#"{"code":-32001,"message":"x"}"#.to_owned()
        )));
        let theirs = of(Method::ToolsCall, Ok(theirs));
        assert_eq!(theirs.code, Some(-32001));
        assert!(theirs.failed());
    }

    #[test]
    fn a_tool_error_is_a_result_not_a_failure() {
        let result = raw(r#"{"content":[],"isError":true}"#.to_owned());
        let outcome = of(Method::ToolsCall, Ok(Answer::Result(result)));
        assert!(outcome.tool_error && !outcome.failed());
        let prompt = raw(r#"{"messages":[],"isError":true}"#.to_owned());
        assert!(!of(Method::PromptsGet, Ok(Answer::Result(prompt))).tool_error);
        let unread = raw(r#"{"isError":true}"#.to_owned());
        let answer = Ok(Answer::Upstream(Reply::Result(unread)));
        let outcome = Outcome::of(
            Asked::Method(Method::ToolsCall),
            &answer,
            Route::default(),
            Instant::now(),
            false,
        );
        assert!(!outcome.tool_error, "read only when asked for");
    }
}
