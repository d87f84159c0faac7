//! The JSON-RPC side of the wire: error codes and objects, the serialized answer lines, and what
//! the main loop and the writer pass each other (`Outcome`, `Out`).

use serde::Serialize;
use serde_json::Value;

// JSON-RPC / MCP error codes.
pub(crate) const PARSE_ERROR: i64 = -32700;
pub(crate) const INVALID_REQUEST: i64 = -32600;
pub(crate) const METHOD_NOT_FOUND: i64 = -32601;
pub(crate) const INVALID_PARAMS: i64 = -32602;
pub(crate) const RESOURCE_NOT_FOUND: i64 = -32002;

/// Where a server's messages go: over stdio the writer task on the same thread as the server
/// (no thread wake-up per message), over HTTP a session's routing thread.
pub(crate) type Outbox = tokio::sync::mpsc::UnboundedSender<Out>;

/// A message for the writer.
pub(crate) enum Out {
    /// One JSON message, written followed by `\n`.
    Line(String),
    /// A request of the server's that the call with id `call` (its JSON text) caused: over
    /// Streamable HTTP it goes on that call's POST stream, as real servers send it.
    Caused { line: String, call: String },
    /// Flush everything queued before, then make the process exit with this code.
    Exit(i32),
}

/// What handling one input line produced.
pub(crate) enum Outcome {
    /// Send this line.
    Reply(String),
    /// Nothing to send now (notification, fault flag, or a spawned `slow` task).
    Silent,
    /// Stop: flush what was queued before and exit with this code.
    Exit(i32),
}

/// A JSON-RPC error object.
#[derive(Serialize, Debug)]
pub(crate) struct RpcError {
    pub(crate) code: i64,
    pub(crate) message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) data: Option<Value>,
}

pub(crate) fn invalid_params(message: impl Into<String>) -> RpcError {
    RpcError {
        code: INVALID_PARAMS,
        message: message.into(),
        data: None,
    }
}

#[derive(Serialize)]
pub(crate) struct Success<'a, T: Serialize + ?Sized> {
    jsonrpc: &'static str,
    id: &'a Value,
    result: &'a T,
}

#[derive(Serialize)]
pub(crate) struct Failure<'a> {
    jsonrpc: &'static str,
    id: &'a Value,
    error: &'a RpcError,
}

/// Serializes a success response (compact JSON never contains a raw newline).
pub(crate) fn ok_line<T: Serialize + ?Sized>(id: &Value, result: &T) -> String {
    let msg = Success {
        jsonrpc: "2.0",
        id,
        result,
    };
    serde_json::to_string(&msg).expect("response serializes")
}

pub(crate) fn error_line(id: &Value, error: &RpcError) -> String {
    let msg = Failure {
        jsonrpc: "2.0",
        id,
        error,
    };
    serde_json::to_string(&msg).expect("error serializes")
}
