//! What the server offers: the tool listings (fixed, protocol-routing, fault injection), their
//! pre-serialized pages, and the prompt, resources and completions it serves.

use serde_json::value::RawValue;
use serde_json::{Value, json};

use crate::server::{LOG_LEVELS, Server};
use crate::wire::{RESOURCE_NOT_FOUND, RpcError, invalid_params};

/// Pre-serializes a list result (`{"<key>":[...],"nextCursor":"page:N"}`) per page.
/// Page N is addressed by the cursor `page:N`; page 0 is the first one.
pub(crate) fn paginate(key: &str, items: &[Value], page_size: usize) -> Vec<Box<RawValue>> {
    let chunk = if page_size == 0 {
        items.len().max(1)
    } else {
        page_size
    };
    let pages = items.len().div_ceil(chunk).max(1);
    (0..pages)
        .map(|p| {
            let slice = &items[p * chunk..((p + 1) * chunk).min(items.len())];
            let array = serde_json::to_string(slice).expect("items serialize");
            let text = if p + 1 < pages {
                format!(r#"{{"{key}":{array},"nextCursor":"page:{}"}}"#, p + 1)
            } else {
                format!(r#"{{"{key}":{array}}}"#)
            };
            RawValue::from_string(text).expect("page is valid JSON")
        })
        .collect()
}

/// The fixed tools, always listed before the generated ones.
pub(crate) fn fixed_tools() -> Vec<Value> {
    let any_args = json!({"type": "object", "additionalProperties": true});
    let no_args = json!({"type": "object", "properties": {}});
    vec![
        json!({"name": "echo", "description": "Returns the params it received, unchanged",
               "inputSchema": any_args}),
        json!({"name": "fancy", "title": "Fancy Tool",
               "description": "A tool whose listing carries many optional fields",
               "inputSchema": no_args,
               "outputSchema": {"type": "object", "properties": {"ok": {"type": "boolean"}}},
               "annotations": {"readOnlyHint": true, "x-vendorHint": "keep-me",
                               "futureHint": {"nested": [1, 2, 3]}},
               "icons": [{"src": "https://example.com/i.png", "mimeType": "image/png"}],
               "_meta": {"example.com/tag": "v1"},
               "x-unknown-field": {"a": 1}}),
        json!({"name": "slow", "description": "Answers after `ms` milliseconds",
               "inputSchema": {"type": "object",
                               "properties": {"ms": {"type": "integer", "minimum": 0}},
                               "required": ["ms"]}}),
        json!({"name": "fail", "description": "Returns a tool error result",
               "inputSchema": no_args}),
        json!({"name": "crash", "description": "Exits the server with status 3 without answering",
               "inputSchema": no_args}),
        json!({"name": "huge", "description": "Answers with one very long line",
               "inputSchema": no_args}),
        json!({"name": "add_tool", "description": "Adds an echo tool named `name` and notifies list_changed",
               "inputSchema": {"type": "object", "properties": {"name": {"type": "string"}},
                               "required": ["name"]}}),
    ]
}

/// The protocol-routing tools, listed only with `--protocol-tools`.
pub(crate) fn protocol_tools() -> Vec<Value> {
    let no_args = json!({"type": "object", "properties": {}});
    let prompt_args = json!({"type": "object", "properties": {"prompt": {"type": "string"}}});
    let uri_args = json!({"type": "object", "properties": {"uri": {"type": "string"}},
                          "required": ["uri"]});
    vec![
        json!({"name": "progress",
               "description": "Sends `steps` progress notifications `delay_ms` apart when given a progressToken",
               "inputSchema": {"type": "object", "properties": {
                   "steps": {"type": "integer", "minimum": 0},
                   "delay_ms": {"type": "integer", "minimum": 0}}}}),
        json!({"name": "sample", "description": "Asks the client for sampling/createMessage",
               "inputSchema": prompt_args}),
        json!({"name": "elicit", "description": "Asks the client for elicitation/create",
               "inputSchema": no_args}),
        json!({"name": "roots", "description": "Asks the client for roots/list",
               "inputSchema": no_args}),
        json!({"name": "ping_client", "description": "Pings the client",
               "inputSchema": no_args}),
        json!({"name": "notify_cancel",
               "description": "Sends sampling/createMessage to the client, then cancels it",
               "inputSchema": prompt_args}),
        json!({"name": "log", "description": "Sends notifications/message if `level` passes logging/setLevel",
               "inputSchema": {"type": "object", "properties": {
                   "level": {"type": "string", "enum": LOG_LEVELS}, "text": {"type": "string"}}}}),
        json!({"name": "log_level", "description": "Tells the level set by logging/setLevel",
               "inputSchema": no_args}),
        json!({"name": "touch", "description": "Sends notifications/resources/updated if `uri` is subscribed",
               "inputSchema": uri_args}),
        json!({"name": "subscriptions", "description": "Lists the subscribed resource URIs",
               "inputSchema": no_args}),
    ]
}

/// The fault injection tools, listed only with `--fault-tools`.
pub(crate) fn fault_tools() -> Vec<Value> {
    let no_args = json!({"type": "object", "properties": {}});
    vec![
        json!({"name": "hang", "description": "Never answers",
               "inputSchema": no_args}),
        json!({"name": "garbage", "description": "Prints a non-JSON line on stdout, then answers",
               "inputSchema": no_args}),
        json!({"name": "flood",
               "description": "Sends `count` notifications/message and `count` tools/list_changed, then answers",
               "inputSchema": {"type": "object", "properties": {
                   "count": {"type": "integer", "minimum": 0}}}}),
        json!({"name": "stop_pings", "description": "Ignores pings from now on",
               "inputSchema": no_args}),
        json!({"name": "deep",
               "description": "Answers with structured content nested `depth` levels deep",
               "inputSchema": {"type": "object", "properties": {
                   "depth": {"type": "integer", "minimum": 0}}}}),
    ]
}

impl Server {
    /// The URI of a `resources/subscribe`/`unsubscribe`, which must be one we serve.
    pub(crate) fn subscribable_uri(&self, params: Option<&Value>) -> Result<String, RpcError> {
        let uri = params
            .and_then(|p| p.get("uri"))
            .and_then(Value::as_str)
            .ok_or_else(|| invalid_params("resources/subscribe requires a string `uri`"))?;
        let base = format!("test://{}/", self.name);
        if self.files && uri.starts_with(FILES) {
            return Ok(uri.to_owned());
        }
        let known = match uri.strip_prefix(&base) {
            Some("hello") => true,
            Some(rest) => rest.strip_prefix("item/").is_some_and(|i| !i.is_empty()),
            None => false,
        };
        if known {
            Ok(uri.to_owned())
        } else {
            Err(resource_not_found(uri))
        }
    }

    /// `completion/complete` for the `greet` prompt's `name` and the item
    /// template's `id`; anything else is invalid params.
    pub(crate) fn complete(&self, params: Option<&Value>) -> Result<Value, RpcError> {
        let params = params.unwrap_or(&Value::Null);
        let reference = &params["ref"];
        let argument = &params["argument"];
        let template = format!("test://{}/item/{{id}}", self.name);
        let candidates: &[&str] = match (reference["type"].as_str(), argument["name"].as_str()) {
            (Some("ref/prompt"), Some("name")) if reference["name"] == "greet" => {
                &["Ada", "Alan", "Grace"]
            }
            (Some("ref/resource"), Some("id")) if reference["uri"] == template => &["1", "2", "42"],
            _ => {
                return Err(invalid_params(format!(
                    "No completions for ref {reference} argument {argument}"
                )));
            }
        };
        let typed = argument["value"]
            .as_str()
            .ok_or_else(|| {
                invalid_params("completion/complete requires a string `argument.value`")
            })?
            .to_lowercase();
        let values: Vec<&str> = candidates
            .iter()
            .copied()
            .filter(|c| c.to_lowercase().starts_with(&typed))
            .collect();
        Ok(json!({"completion": {"values": values, "total": values.len(), "hasMore": false}}))
    }

    pub(crate) fn get_prompt(&self, params: Option<&Value>) -> Result<Value, RpcError> {
        let params = params.unwrap_or(&Value::Null);
        match params.get("name").and_then(Value::as_str) {
            Some("greet") => {
                let who = params
                    .get("arguments")
                    .and_then(|a| a.get("name"))
                    .and_then(Value::as_str)
                    .ok_or_else(|| invalid_params("Missing required argument: name"))?;
                let upstream = &self.name;
                Ok(json!({
                    "description": format!("Greeting from {upstream}"),
                    "messages": [{"role": "user", "content": {"type": "text",
                        "text": format!("Hello, {who} from {upstream}")}}]
                }))
            }
            Some(other) => Err(invalid_params(format!("Unknown prompt: {other}"))),
            None => Err(invalid_params("prompts/get requires a string `name`")),
        }
    }

    pub(crate) fn read_resource(&self, params: Option<&Value>) -> Result<Value, RpcError> {
        let uri = params
            .and_then(|p| p.get("uri"))
            .and_then(Value::as_str)
            .ok_or_else(|| invalid_params("resources/read requires a string `uri`"))?;
        let name = &self.name;
        if self.files && uri.starts_with(FILES) {
            let read = |uri: &str| json!({"uri": uri, "mimeType": "text/plain", "text": format!("read {uri}")});
            let contents = match uri.strip_suffix("/links") {
                Some(_) => vec![read(&format!("{uri}/a")), read("file:///etc/passwd")],
                None => vec![read(uri)],
            };
            return Ok(json!({ "contents": contents }));
        }
        let base = format!("test://{name}/");
        let text = match uri.strip_prefix(&base) {
            Some("hello") => format!("hello from {name}"),
            Some(rest) => match rest.strip_prefix("item/") {
                Some(item) if !item.is_empty() => format!("item {item} from {name}"),
                _ => return Err(resource_not_found(uri)),
            },
            None => return Err(resource_not_found(uri)),
        };
        Ok(json!({"contents": [{"uri": uri, "mimeType": "text/plain", "text": text}]}))
    }
}

/// The scheme and root of `--files` URIs.
const FILES: &str = "file:///";

/// The resources `--files` lists: one not in canonical form (a file server listing a path as it
/// found it).
pub(crate) fn file_resources() -> Vec<Value> {
    [
        "file:///tmp/notes.txt",
        "file:///etc/passwd",
        "file:///tmp/../etc/shadow",
    ]
    .iter()
    .map(|uri| json!({"uri": uri, "name": uri.rsplit('/').next(), "mimeType": "text/plain"}))
    .collect()
}

/// The templates `--files` lists.
pub(crate) fn file_templates() -> Vec<Value> {
    vec![
        json!({"uriTemplate": "file:///tmp/{+path}", "name": "tmp", "mimeType": "text/plain"}),
        json!({"uriTemplate": "file:///etc/{name}", "name": "etc", "mimeType": "text/plain"}),
    ]
}

pub(crate) fn resource_not_found(uri: &str) -> RpcError {
    RpcError {
        code: RESOURCE_NOT_FOUND,
        message: "Resource not found".into(),
        data: Some(json!({"uri": uri})),
    }
}
