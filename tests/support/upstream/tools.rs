//! `tools/call`: the dispatch over the three tool families (basic, protocol-routing, fault
//! injection), the run-time added echo tools, and the helpers the families share.

mod basic;
mod fault;
mod protocol;

use serde_json::{Value, json};

use crate::server::Server;
use crate::wire::{METHOD_NOT_FOUND, Outcome, RpcError, invalid_params, ok_line};

/// What a family's runner gives: `Ok(None)` when `name` is not one of its tools.
pub(crate) type Family = Result<Option<Outcome>, RpcError>;

impl Server {
    /// `tools/call`: the basic, protocol-routing and fault injection families in turn, then the
    /// tools added by `add_tool` (which echo); any other name is invalid params.
    pub(crate) fn call_tool(&self, id: &Value, params: Value) -> Result<Outcome, RpcError> {
        let name = params
            .get("name")
            .and_then(Value::as_str)
            .ok_or_else(|| invalid_params("tools/call requires a string `name`"))?;
        if self.tasks_enabled && params.get("task").is_some() && name != "slow" {
            return Err(RpcError {
                code: METHOD_NOT_FOUND,
                message: format!("Tool {name} does not support task-augmented calls"),
                data: None,
            });
        }
        let params = &params;
        if let Some(outcome) = self.basic_tool(id, name, params)? {
            return Ok(outcome);
        }
        if let Some(outcome) = self.protocol_tool(id, name, params)? {
            return Ok(outcome);
        }
        if let Some(outcome) = self.fault_tool(id, name, params)? {
            return Ok(outcome);
        }
        let added = self
            .added_tools
            .lock()
            .is_ok_and(|a| a.iter().any(|t| t["name"] == name));
        if added {
            return Ok(Outcome::Reply(ok_line(
                id,
                &json!({
                    "content": [{"type": "text", "text": params.to_string()}],
                    "structuredContent": {"upstream": self.name, "params": params}
                }),
            )));
        }
        Err(invalid_params(format!("Unknown tool: {name}")))
    }
}

/// A tool result with one text block.
pub(crate) fn text_result(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}]})
}

/// A tool error result (`isError: true`) with one text block.
pub(crate) fn error_result(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": true})
}

/// An optional non-negative integer tool argument.
pub(crate) fn uint_arg(args: Option<&Value>, key: &str, default: u64) -> Result<u64, RpcError> {
    match args.and_then(|a| a.get(key)) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v
            .as_u64()
            .ok_or_else(|| invalid_params(format!("`{key}` must be a non-negative integer"))),
    }
}
