//! The protocol-routing tools (listed with `--protocol-tools`): progress, server → client
//! requests (`sample`, `elicit`, `roots`, `ping_client`, `notify_cancel`), logging and resource
//! subscriptions.

use std::sync::Mutex;
use std::time::Duration;

use serde_json::{Value, json};

use crate::client_link::sampling_params;
use crate::server::{LOG_LEVELS, Server, level_rank};
use crate::tools::{Family, error_result, text_result, uint_arg};
use crate::wire::{Outcome, RpcError, invalid_params, ok_line};

impl Server {
    /// Runs the tool `name` if it is one of this family.
    pub(crate) fn protocol_tool(&self, id: &Value, name: &str, params: &Value) -> Family {
        let reply = |result: &Value| Ok(Outcome::Reply(ok_line(id, result)));
        let outcome: Result<Outcome, RpcError> = match name {
            "progress" => {
                let args = params.get("arguments");
                let steps = uint_arg(args, "steps", 3)?;
                let delay = Duration::from_millis(uint_arg(args, "delay_ms", 20)?);
                let token = params
                    .get("_meta")
                    .and_then(|m| m.get("progressToken"))
                    .filter(|t| !t.is_null())
                    .cloned();
                let link = self.link.clone();
                let answer_id = id.clone();
                self.spawn_cancellable(id, async move {
                    if let Some(token) = token {
                        for i in 1..=steps {
                            if i > 1 {
                                tokio::time::sleep(delay).await;
                            }
                            link.notify(
                                "notifications/progress",
                                json!({"progressToken": token, "progress": i, "total": steps,
                                       "message": format!("step {i}")}),
                            );
                        }
                    }
                    let result = text_result(&format!("done {steps} steps"));
                    link.send(ok_line(&answer_id, &result));
                });
                Ok(Outcome::Silent)
            }
            "sample" => Ok(self.ask_client(
                id,
                "sampling/createMessage",
                Some(sampling_params(params)),
                "sampling",
                |result| {
                    let content = &result["content"];
                    match content.get("text").and_then(Value::as_str) {
                        Some(text) => format!("sampled: {text}"),
                        // Not a single text block: show the content as JSON.
                        None => format!("sampled: {content}"),
                    }
                },
            )),
            "elicit"
                if params
                    .pointer("/arguments/url")
                    .is_some_and(Value::is_string) =>
            {
                // The first call naming a `url` key wants a URL visited first (-32042); any
                // later one with that key succeeds.
                static VISITED: Mutex<Vec<String>> = Mutex::new(Vec::new());
                let key = params["arguments"]["url"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
                let mut visited = VISITED.lock().unwrap_or_else(|e| e.into_inner());
                if visited.contains(&key) {
                    return reply(&text_result("elicited: url visited")).map(Some);
                }
                visited.push(key);
                Err(RpcError {
                    code: -32042,
                    message: "URL elicitation required".into(),
                    data: Some(json!({"elicitations": [{
                        "mode": "url",
                        "elicitationId": "e-1",
                        "url": "https://example.com/authorize",
                        "message": "Sign in to continue",
                    }]})),
                })
            }
            "elicit" if uint_arg(params.get("arguments"), "rounds", 1)? > 1 => {
                let rounds = uint_arg(params.get("arguments"), "rounds", 1)?;
                let link = self.link.clone();
                let answer_id = id.clone();
                tokio::spawn(async move {
                    let mut answers = Vec::new();
                    for round in 1..=rounds {
                        let message = format!("Round {round}: please provide a name");
                        let (_, response) = link.request_caused_by(
                            Some(&answer_id),
                            "elicitation/create",
                            Some(json!({"message": message,
                                        "requestedSchema": {"type": "object",
                                            "properties": {"name": {"type": "string"}}}})),
                        );
                        match response.await {
                            Ok(Ok(result)) => {
                                answers.push(format!("{} {}", result["action"], result["content"]))
                            }
                            Ok(Err(error)) => {
                                let failed = error_result(&format!("elicitation failed: {error}"));
                                return link.send(ok_line(&answer_id, &failed));
                            }
                            Err(_) => return,
                        }
                    }
                    let text = format!("elicited: {}", answers.join(" | "));
                    link.send(ok_line(&answer_id, &text_result(&text)));
                });
                Ok(Outcome::Silent)
            }
            "elicit" => Ok(self.ask_client(
                id,
                "elicitation/create",
                Some(json!({"message": "Please provide a name",
                            "requestedSchema": {"type": "object",
                                                "properties": {"name": {"type": "string"}},
                                                "required": ["name"]}})),
                "elicitation",
                |result| {
                    let action = match &result["action"] {
                        Value::String(action) => action.clone(),
                        other => other.to_string(),
                    };
                    format!("elicited: {action} {}", result["content"])
                },
            )),
            "roots" => Ok(self.ask_client(id, "roots/list", None, "roots", |result| {
                format!("roots: {}", result["roots"])
            })),
            "ping_client" => Ok(self.ask_client(id, "ping", None, "ping", |_| "pong".to_owned())),
            "notify_cancel" => {
                let (request_id, _response) = self
                    .link
                    .request("sampling/createMessage", Some(sampling_params(params)));
                let link = self.link.clone();
                let answer_id = id.clone();
                tokio::spawn(async move {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    link.forget(&request_id);
                    link.notify(
                        "notifications/cancelled",
                        json!({"requestId": request_id, "reason": "changed my mind"}),
                    );
                    link.send(ok_line(&answer_id, &text_result("cancelled own request")));
                });
                Ok(Outcome::Silent)
            }
            "log" => {
                let args = params.get("arguments");
                let level = match args.and_then(|a| a.get("level")) {
                    None | Some(Value::Null) => "info",
                    Some(v) => v
                        .as_str()
                        .filter(|l| level_rank(l).is_some())
                        .ok_or_else(|| invalid_params(format!("log: unknown level {v}")))?,
                };
                let data = args
                    .and_then(|a| a.get("text"))
                    .cloned()
                    .unwrap_or_else(|| json!(""));
                let threshold = self.log_level.lock().ok().and_then(|l| *l);
                if threshold.is_some_and(|min| level_rank(level).is_some_and(|r| r >= min)) {
                    // The message belongs to this call: over HTTP it and the answer go on the
                    // call's stream, in this order.
                    self.link.notify_caused_by(
                        id,
                        "notifications/message",
                        json!({"level": level, "logger": "testlog", "data": data}),
                    );
                    self.link.send(ok_line(id, &text_result("logged")));
                    return Ok(Some(Outcome::Silent));
                }
                reply(&text_result("logged"))
            }
            "log_level" => {
                let current = self.log_level.lock().ok().and_then(|l| *l);
                let shown = current.map_or("none", |i| LOG_LEVELS[i]);
                reply(&text_result(&format!("level: {shown}")))
            }
            "touch" => {
                let uri = params
                    .get("arguments")
                    .and_then(|a| a.get("uri"))
                    .and_then(Value::as_str)
                    .ok_or_else(|| invalid_params("touch: `uri` must be a string"))?;
                let subscribed = self.subscriptions.lock().is_ok_and(|s| s.contains(uri));
                if subscribed {
                    self.link
                        .notify("notifications/resources/updated", json!({"uri": uri}));
                }
                reply(&text_result(&format!(
                    "touched {uri} (subscribed: {subscribed})"
                )))
            }
            "subscriptions" => {
                let listed = self
                    .subscriptions
                    .lock()
                    .map(|s| serde_json::to_string(&*s).expect("strings serialize"))
                    .unwrap_or_else(|_| "[]".to_owned());
                reply(&text_result(&listed))
            }
            _ => return Ok(None),
        };
        outcome.map(Some)
    }
}
