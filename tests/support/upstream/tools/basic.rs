//! The basic tools, always listed: `echo`, `fancy`, `slow`, `fail`, `crash`, `huge` and
//! `add_tool`.

use std::time::Duration;

use serde_json::{Value, json};

use crate::server::Server;
use crate::tools::{Family, text_result};
use crate::wire::{Out, Outcome, RpcError, invalid_params, ok_line};

/// Text size of the `huge` tool answer when `--huge-line-bytes` is not given.
pub(crate) const DEFAULT_HUGE_TEXT: usize = 1024 * 1024;

impl Server {
    /// Runs the tool `name` if it is one of this family.
    pub(crate) fn basic_tool(&self, id: &Value, name: &str, params: &Value) -> Family {
        let reply = |result: &Value| Ok(Outcome::Reply(ok_line(id, result)));
        let outcome: Result<Outcome, RpcError> = match name {
            "echo" => {
                let text = params.to_string();
                reply(&json!({
                    "content": [{"type": "text", "text": text}],
                    "structuredContent": {"upstream": self.name, "params": params}
                }))
            }
            "fancy" => reply(&json!({
                "content": [{"type": "text", "text": "fancy"}],
                "structuredContent": {"ok": true},
                "x-extra-result": {"kept": true},
                "_meta": {"example.com/r": "1"}
            })),
            "slow" => {
                let ms = match params.get("arguments").and_then(|a| a.get("ms")) {
                    None => 0,
                    Some(v) => v.as_u64().ok_or_else(|| {
                        invalid_params("slow: `ms` must be a non-negative integer")
                    })?,
                };
                if self.tasks_enabled && params.get("task").is_some() {
                    return Ok(Some(self.create_task(id, params, ms)));
                }
                let out = self.out.clone();
                let answer_id = id.clone();
                let result = text_result(&format!("slept {ms}ms"));
                self.spawn_cancellable(id, async move {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                    // Fails only when the process is already exiting.
                    let _ = out.send(Out::Line(ok_line(&answer_id, &result)));
                });
                Ok(Outcome::Silent)
            }
            "whoami" => reply(&json!({
                "content": [{"type": "text", "text": "whoami"}],
                "structuredContent": {
                    "env": std::env::var("MCPMUX_TEST_WHO").ok(),
                    "authorization": crate::http::authorization_of_this_request(),
                }
            })),
            "fail" => {
                let mut result = text_result("failed on purpose");
                result["isError"] = json!(true);
                reply(&result)
            }
            "crash" => {
                eprintln!("test upstream {} crashing on purpose", self.name);
                Ok(Outcome::Exit(3))
            }
            "huge" => Ok(Outcome::Reply(self.huge_line(id))),
            "add_tool" => {
                let new = params
                    .get("arguments")
                    .and_then(|a| a.get("name"))
                    .and_then(Value::as_str)
                    .ok_or_else(|| invalid_params("add_tool: `name` must be a string"))?
                    .to_owned();
                let description = params
                    .get("arguments")
                    .and_then(|a| a.get("description"))
                    .and_then(Value::as_str)
                    .unwrap_or("Added at run time; echoes");
                if let Ok(mut added) = self.added_tools.lock() {
                    let tool = json!({"name": new, "description": description,
                                      "inputSchema": {"type": "object"}});
                    match added.iter_mut().find(|t| t["name"] == new.as_str()) {
                        Some(existing) => *existing = tool,
                        None => added.push(tool),
                    }
                }
                let changed = r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#;
                let _ = self.out.send(Out::Line(changed.to_owned()));
                reply(&text_result(&format!("added {new}")))
            }
            _ => return Ok(None),
        };
        outcome.map(Some)
    }

    /// One line of exactly `--huge-line-bytes` bytes (newline excluded, at
    /// least the envelope), or a 1 MiB text by default.
    pub(crate) fn huge_line(&self, id: &Value) -> String {
        let envelope = ok_line(id, &json!({"content": [{"type": "text", "text": ""}]}));
        let len = match self.huge_line_bytes {
            Some(total) => total.saturating_sub(envelope.len()),
            None => DEFAULT_HUGE_TEXT,
        };
        // The text is all `x` (nothing to escape): put it between the empty text's quotes
        // rather than serializing it, which takes seconds for 100 MB in a debug build.
        let marker = r#""text":""#;
        let at = envelope.find(marker).expect("the envelope has a text") + marker.len();
        let mut line = String::with_capacity(envelope.len() + len);
        line.push_str(&envelope[..at]);
        line.push_str(&"x".repeat(len));
        line.push_str(&envelope[at..]);
        line
    }
}
