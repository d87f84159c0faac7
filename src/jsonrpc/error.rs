//! JSON-RPC error objects and the codes mcpmux uses.

use serde::Serialize;
use serde_json::Value;

/// Error codes: the JSON-RPC 2.0 ones, MCP's, and mcpmux's own (from the implementation-defined
/// server-error range -32000..-32099).
pub mod codes {
    pub const PARSE_ERROR: i64 = -32700;
    pub const INVALID_REQUEST: i64 = -32600;
    pub const METHOD_NOT_FOUND: i64 = -32601;
    pub const INVALID_PARAMS: i64 = -32602;
    pub const INTERNAL_ERROR: i64 = -32603;
    /// MCP (handshake era): a resource URI that no server knows. 2026-07-28 uses `INVALID_PARAMS`.
    pub const RESOURCE_NOT_FOUND: i64 = -32002;
    /// URL elicitation required (2025-11-25): the request can succeed once the user has visited
    /// the URLs its `data.elicitations` name.
    pub const URL_ELICITATION_REQUIRED: i64 = -32042;
    /// MCP 2026-07-28: the HTTP headers disagree with the body, or a required one is missing.
    pub const HEADER_MISMATCH: i64 = -32020;
    /// MCP 2026-07-28: the request needs a client capability its envelope did not declare.
    pub const MISSING_CLIENT_CAPABILITY: i64 = -32021;
    /// MCP 2026-07-28: the request names a protocol version the server does not serve.
    pub const UNSUPPORTED_PROTOCOL_VERSION: i64 = -32022;
    /// mcpmux: the upstream did not answer within its request timeout.
    pub const UPSTREAM_TIMEOUT: i64 = -32001;
    /// mcpmux: the upstream serving this name is not running (starting, restarting, failed).
    pub const UPSTREAM_UNAVAILABLE: i64 = -32010;
    /// mcpmux: too many requests in flight (to one upstream, or from one host session); retry.
    pub const BUSY: i64 = -32011;
    /// mcpmux: the host is over its requests-per-second limit; retry later.
    pub const RATE_LIMITED: i64 = -32012;
    /// mcpmux: a session limit is reached (`server.max_sessions`, `hosts.NAME.max_sessions`);
    /// over HTTP it comes with 429.
    pub const TOO_MANY_SESSIONS: i64 = -32013;
}

/// A JSON-RPC error object, as sent to a peer.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RpcError {
    pub code: i64,
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl RpcError {
    pub fn new(code: i64, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            data: None,
        }
    }

    pub fn with_data(mut self, data: Value) -> Self {
        self.data = Some(data);
        self
    }

    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(codes::INVALID_PARAMS, message)
    }

    pub fn method_not_found(method: &str) -> Self {
        Self::new(
            codes::METHOD_NOT_FOUND,
            format!("Method not found: {method}"),
        )
    }
}

impl std::fmt::Display for RpcError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.message, self.code)
    }
}
