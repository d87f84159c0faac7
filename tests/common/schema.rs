//! Checking messages against the MCP schema (vendored in tests/schema) of the version negotiated
//! on that side: the schemas, and which definition each method's messages must satisfy.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::{Value, json};

/// Checks messages against the MCP schema of one protocol version.
pub struct Schemas {
    version: String,
    root: Value,
    defs_key: &'static str,
    cache: Mutex<HashMap<String, Arc<jsonschema::Validator>>>,
}

impl Schemas {
    /// The schema of `version` (vendored in tests/schema from the MCP specification).
    pub fn get(version: &str) -> Arc<Schemas> {
        static ALL: OnceLock<Mutex<HashMap<String, Arc<Schemas>>>> = OnceLock::new();
        let all = ALL.get_or_init(Default::default);
        let mut all = all.lock().unwrap();
        all.entry(version.to_owned())
            .or_insert_with(|| {
                let path = Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("tests/schema")
                    .join(format!("{version}.json"));
                let root: Value =
                    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
                let defs_key = if root.get("$defs").is_some() {
                    "$defs"
                } else {
                    "definitions"
                };
                Arc::new(Schemas {
                    version: version.to_owned(),
                    root,
                    defs_key,
                    cache: Mutex::default(),
                })
            })
            .clone()
    }

    fn validator(&self, def: &str) -> Arc<jsonschema::Validator> {
        let mut cache = self.cache.lock().unwrap();
        cache
            .entry(def.to_owned())
            .or_insert_with(|| {
                let mut schema = json!({ "$ref": format!("#/{}/{def}", self.defs_key) });
                schema["$schema"] = self.root["$schema"].clone();
                schema[self.defs_key] = self.root[self.defs_key].clone();
                Arc::new(
                    jsonschema::validator_for(&schema)
                        .unwrap_or_else(|e| panic!("schema {def}: {e}")),
                )
            })
            .clone()
    }

    /// Panics with the schema errors if `value` is not a valid `def`.
    pub fn check(&self, def: &str, value: &Value) {
        if self.root[self.defs_key].get(def).is_none() {
            return;
        }
        let validator = self.validator(def);
        let errors: Vec<String> = validator
            .iter_errors(value)
            .map(|e| format!("{} at {}", e, e.instance_path))
            .collect();
        assert!(
            errors.is_empty(),
            "message is not a valid {def} of MCP {}: {errors:?}\n{value}",
            self.version
        );
    }

    /// Validates one message the gateway sent to a host, given the method of the request it answers.
    pub fn check_message(&self, message: &Value, answered_method: Option<&str>) {
        let error_def = if self.defs_key == "$defs" {
            "JSONRPCErrorResponse"
        } else {
            "JSONRPCError"
        };
        if message.get("error").is_some() {
            self.check(error_def, message);
        } else if message.get("result").is_some() {
            self.check("JSONRPCResponse", message);
            if message["result"]["resultType"] == "input_required" {
                // A round of a multi-round request (2026-07-28), whatever the method.
                self.check("InputRequiredResult", &message["result"]);
            } else if let Some(def) = answered_method.and_then(result_def) {
                self.check(def, &message["result"]);
            }
        } else if let Some(method) = message.get("method").and_then(Value::as_str) {
            if message.get("id").is_some() {
                self.check("JSONRPCRequest", message);
            } else {
                self.check("JSONRPCNotification", message);
                if let Some(def) = notification_def(method) {
                    self.check(def, message);
                }
            }
        } else {
            panic!("not a JSON-RPC message: {message}");
        }
    }
}

fn result_def(method: &str) -> Option<&'static str> {
    Some(match method {
        "initialize" => "InitializeResult",
        "server/discover" => "DiscoverResult",
        "ping" => "EmptyResult",
        "tools/list" => "ListToolsResult",
        "tools/call" => "CallToolResult",
        "prompts/list" => "ListPromptsResult",
        "prompts/get" => "GetPromptResult",
        "resources/list" => "ListResourcesResult",
        "resources/templates/list" => "ListResourceTemplatesResult",
        "resources/read" => "ReadResourceResult",
        "completion/complete" => "CompleteResult",
        _ => return None,
    })
}

fn notification_def(method: &str) -> Option<&'static str> {
    Some(match method {
        "notifications/tools/list_changed" => "ToolListChangedNotification",
        "notifications/prompts/list_changed" => "PromptListChangedNotification",
        "notifications/resources/list_changed" => "ResourceListChangedNotification",
        "notifications/resources/updated" => "ResourceUpdatedNotification",
        "notifications/progress" => "ProgressNotification",
        "notifications/message" => "LoggingMessageNotification",
        "notifications/cancelled" => "CancelledNotification",
        _ => return None,
    })
}

/// The definition a request sent to a host must satisfy, besides `JSONRPCRequest`.
pub fn server_request_def(method: &str) -> Option<&'static str> {
    Some(match method {
        "sampling/createMessage" => "CreateMessageRequest",
        "elicitation/create" => "ElicitRequest",
        "roots/list" => "ListRootsRequest",
        "ping" => "PingRequest",
        _ => return None,
    })
}
