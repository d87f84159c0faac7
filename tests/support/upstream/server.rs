//! The server's state and its request handling: one input line → a reply, nothing, or an exit;
//! `initialize`, the paginated lists, the notifications it honours, cancellable work.

use std::collections::{BTreeSet, HashMap};
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::task::AbortHandle;

use crate::Args;
use crate::catalog::{
    fault_tools, file_resources, file_templates, fixed_tools, paginate, protocol_tools,
};
use crate::client_link::ClientLink;
use crate::tasks::TaskTable;
use crate::wire::{
    INVALID_REQUEST, METHOD_NOT_FOUND, Outbox, Outcome, PARSE_ERROR, RpcError, error_line,
    invalid_params, ok_line,
};

/// Protocol versions we echo back when the client asks for them.
pub(crate) const SUPPORTED_VERSIONS: &[&str] =
    &["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];
/// Version answered when the client asks for one we do not know.
pub(crate) const LATEST_VERSION: &str = "2025-11-25";

/// RFC 5424 severities, lowest first, as named by MCP logging.
pub(crate) const LOG_LEVELS: [&str; 8] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

/// Index of a logging level in `LOG_LEVELS`.
pub(crate) fn level_rank(level: &str) -> Option<usize> {
    LOG_LEVELS.iter().position(|l| *l == level)
}

/// Tasks answering a client request later that `notifications/cancelled` can
/// abort, by the request id as compact JSON.
pub(crate) type InFlight = Arc<Mutex<HashMap<String, (tokio::task::Id, AbortHandle)>>>;

/// Immutable server state plus the channel to the writer thread.
pub(crate) struct Server {
    pub(crate) name: String,
    pub(crate) protocol_version: Option<String>,
    pub(crate) instructions: Option<String>,
    /// Set by `--ignore-pings` or the `stop_pings` tool.
    pub(crate) ignore_pings: std::sync::atomic::AtomicBool,
    pub(crate) hang_on_initialize: bool,
    pub(crate) huge_line_bytes: Option<usize>,
    pub(crate) tools: Vec<Box<RawValue>>,
    /// The tool listing before any `add_tool`, kept to re-paginate when tools are added.
    pub(crate) base_tools: Vec<Value>,
    /// Tools added at run time by `add_tool` (each behaves like `echo`).
    pub(crate) added_tools: std::sync::Mutex<Vec<Value>>,
    pub(crate) page_size: usize,
    pub(crate) prompts: Vec<Box<RawValue>>,
    pub(crate) resources: Vec<Box<RawValue>>,
    pub(crate) templates: Vec<Box<RawValue>>,
    pub(crate) out: Outbox,
    /// Requests to and notifications for the client.
    pub(crate) link: ClientLink,
    /// Cancellable `slow` and `progress` calls.
    pub(crate) inflight: InFlight,
    /// Index in `LOG_LEVELS` of the last valid `logging/setLevel`.
    pub(crate) log_level: Mutex<Option<usize>>,
    /// URIs from `resources/subscribe` (sorted).
    pub(crate) subscriptions: Mutex<BTreeSet<String>>,
    /// `--tasks`: task-augmented `slow` calls run as tasks.
    pub(crate) tasks_enabled: bool,
    /// `--files`: `file:///` resources are served too.
    pub(crate) files: bool,
    /// The tasks created so far.
    pub(crate) tasks: TaskTable,
}

impl Server {
    pub(crate) fn new(args: &Args, out: Outbox) -> Self {
        let name = &args.name;
        let mut tools = fixed_tools();
        if args.tasks {
            for tool in tools.iter_mut().filter(|t| t["name"] == "slow") {
                tool["execution"] = json!({"taskSupport": "optional"});
            }
        }
        if args.protocol_tools {
            tools.extend(protocol_tools());
        }
        if args.fault_tools {
            tools.extend(fault_tools());
        }
        if args.whoami {
            tools.push(json!({"name": "whoami",
                "description": "Answers with the identity this call came with",
                "inputSchema": {"type": "object", "properties": {}}}));
        }
        for spec in &args.describe {
            let (tool, text) = spec.split_once('=').unwrap_or((spec, ""));
            for listed in tools.iter_mut().filter(|t| t["name"] == tool) {
                listed["description"] = json!(text);
            }
        }
        tools.extend((0..args.tools).map(|i| {
            let mut description = format!("Generated tool number {i} of upstream {name}");
            if let Some(bytes) = args.tool_description_bytes {
                description.push(' ');
                let pad = bytes.saturating_sub(description.len());
                description.push_str(&"x".repeat(pad));
            }
            json!({"name": format!("tool_{i:05}"),
                   "description": description,
                   "inputSchema": {"type": "object", "properties": {}}})
        }));
        let prompts = [json!({"name": "greet", "description": "Greets someone",
            "arguments": [{"name": "name", "description": "Who to greet", "required": true}]})];
        let mut resources = vec![
            json!({"uri": format!("test://{name}/hello"), "name": "hello",
            "mimeType": "text/plain"}),
        ];
        let mut templates = vec![json!({"uriTemplate": format!("test://{name}/item/{{id}}"),
            "name": "item", "mimeType": "text/plain"})];
        if args.files {
            resources.extend(file_resources());
            templates.extend(file_templates());
        }
        let k = args.page_size;
        Server {
            name: name.clone(),
            protocol_version: args.protocol_version.clone(),
            instructions: args.instructions.clone(),
            ignore_pings: std::sync::atomic::AtomicBool::new(args.ignore_pings),
            hang_on_initialize: args.hang_on_initialize,
            huge_line_bytes: args.huge_line_bytes,
            tools: paginate("tools", &tools, k),
            base_tools: tools,
            added_tools: std::sync::Mutex::new(Vec::new()),
            page_size: k,
            prompts: paginate("prompts", &prompts, k),
            resources: paginate("resources", &resources, k),
            templates: paginate("resourceTemplates", &templates, k),
            link: ClientLink::new(out.clone()),
            out,
            inflight: Arc::new(Mutex::new(HashMap::new())),
            log_level: Mutex::new(None),
            subscriptions: Mutex::new(BTreeSet::new()),
            tasks_enabled: args.tasks,
            files: args.files,
            tasks: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// Handles one non-empty input line.
    pub(crate) fn handle_line(&self, line: &[u8]) -> Outcome {
        let msg: Value = match serde_json::from_slice(line) {
            Ok(v) => v,
            Err(e) => {
                let err = RpcError {
                    code: PARSE_ERROR,
                    message: "Parse error".into(),
                    data: Some(json!({"detail": e.to_string()})),
                };
                return Outcome::Reply(error_line(&Value::Null, &err));
            }
        };
        let invalid = |id: &Value, why: &str| {
            let err = RpcError {
                code: INVALID_REQUEST,
                message: format!("Invalid Request: {why}"),
                data: None,
            };
            Outcome::Reply(error_line(id, &err))
        };
        let Value::Object(mut obj) = msg else {
            return invalid(&Value::Null, "expected a JSON object");
        };
        let id = obj.remove("id");
        let params = obj.remove("params");
        match (obj.get("method"), id) {
            (Some(Value::String(method)), Some(id)) => {
                match self.handle_request(&id, method, params) {
                    Ok(outcome) => outcome,
                    Err(err) => Outcome::Reply(error_line(&id, &err)),
                }
            }
            // Notifications (initialized, cancelled, ...) need no answer.
            (Some(Value::String(method)), None) => {
                if method == "notifications/cancelled" {
                    self.cancel(params.as_ref());
                }
                Outcome::Silent
            }
            (Some(_), id) => invalid(&id.unwrap_or(Value::Null), "method must be a string"),
            // A response from the client: route it to the task waiting for it.
            (None, Some(id)) if obj.contains_key("result") || obj.contains_key("error") => {
                self.link.deliver(&id, &obj);
                Outcome::Silent
            }
            (None, id) => invalid(&id.unwrap_or(Value::Null), "missing method"),
        }
    }

    pub(crate) fn handle_request(
        &self,
        id: &Value,
        method: &str,
        params: Option<Value>,
    ) -> Result<Outcome, RpcError> {
        let reply = |result: &Value| Ok(Outcome::Reply(ok_line(id, result)));
        match method {
            "initialize" if self.hang_on_initialize => Ok(Outcome::Silent),
            "initialize" => reply(&self.initialize(params.as_ref())),
            "ping" if self.ignore_pings.load(Ordering::Relaxed) => Ok(Outcome::Silent),
            "ping" => reply(&json!({})),
            "logging/setLevel" => {
                // Always answered `{}`; only a known level is remembered.
                let level = params.as_ref().and_then(|p| p.get("level"));
                if let Some(rank) = level.and_then(Value::as_str).and_then(level_rank) {
                    if let Ok(mut current) = self.log_level.lock() {
                        *current = Some(rank);
                    }
                }
                reply(&json!({}))
            }
            "resources/subscribe" => {
                let uri = self.subscribable_uri(params.as_ref())?;
                if let Ok(mut subs) = self.subscriptions.lock() {
                    subs.insert(uri);
                }
                reply(&json!({}))
            }
            "resources/unsubscribe" => {
                let uri = self.subscribable_uri(params.as_ref())?;
                if let Ok(mut subs) = self.subscriptions.lock() {
                    subs.remove(&uri);
                }
                reply(&json!({}))
            }
            "completion/complete" => reply(&self.complete(params.as_ref())?),
            "tools/list" => {
                let added = self
                    .added_tools
                    .lock()
                    .map(|a| a.clone())
                    .unwrap_or_default();
                if added.is_empty() {
                    self.list(id, &self.tools, params.as_ref())
                } else {
                    let all: Vec<Value> = self.base_tools.iter().cloned().chain(added).collect();
                    let pages = paginate("tools", &all, self.page_size);
                    self.list(id, &pages, params.as_ref())
                }
            }
            "prompts/list" => self.list(id, &self.prompts, params.as_ref()),
            "resources/list" => self.list(id, &self.resources, params.as_ref()),
            "resources/templates/list" => self.list(id, &self.templates, params.as_ref()),
            "tools/call" => self.call_tool(id, params.unwrap_or(Value::Null)),
            "prompts/get" => reply(&self.get_prompt(params.as_ref())?),
            "resources/read" => reply(&self.read_resource(params.as_ref())?),
            "tasks/get" | "tasks/result" | "tasks/cancel" | "tasks/list" if self.tasks_enabled => {
                self.task_request(id, method, params.as_ref())
            }
            _ => Err(RpcError {
                code: METHOD_NOT_FOUND,
                message: "Method not found".into(),
                data: None,
            }),
        }
    }

    pub(crate) fn initialize(&self, params: Option<&Value>) -> Value {
        let requested = params
            .and_then(|p| p.get("protocolVersion"))
            .and_then(Value::as_str)
            .filter(|v| SUPPORTED_VERSIONS.contains(v));
        let version = match &self.protocol_version {
            Some(forced) => forced.as_str(),
            None => requested.unwrap_or(LATEST_VERSION),
        };
        let mut result = json!({
            "protocolVersion": version,
            "capabilities": {
                "tools": {"listChanged": true},
                "prompts": {"listChanged": true},
                "resources": {"subscribe": true, "listChanged": true},
                "logging": {},
                "completions": {}
            },
            "serverInfo": {"name": format!("mcpmux-test-upstream-{}", self.name), "version": "0.1.0"}
        });
        if self.tasks_enabled {
            result["capabilities"]["tasks"] =
                json!({"list": {}, "cancel": {}, "requests": {"tools": {"call": {}}}});
        }
        if let Some(text) = &self.instructions {
            result["instructions"] = json!(text);
        }
        result
    }

    /// Answers a list request with the page selected by `params.cursor`.
    pub(crate) fn list(
        &self,
        id: &Value,
        pages: &[Box<RawValue>],
        params: Option<&Value>,
    ) -> Result<Outcome, RpcError> {
        let page = match params.and_then(|p| p.get("cursor")) {
            None | Some(Value::Null) => &pages[0],
            Some(cursor) => cursor
                .as_str()
                .and_then(|c| c.strip_prefix("page:"))
                .and_then(|n| n.parse::<usize>().ok())
                .filter(|&n| n > 0)
                .and_then(|n| pages.get(n))
                .ok_or_else(|| invalid_params(format!("Unknown cursor: {cursor}")))?,
        };
        Ok(Outcome::Reply(ok_line(id, &**page)))
    }

    /// Spawns `work` (which answers request `id` itself) so that a
    /// `notifications/cancelled` for `id` can abort it before it answers.
    pub(crate) fn spawn_cancellable<F>(&self, id: &Value, work: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let key = id.to_string();
        let inflight = Arc::clone(&self.inflight);
        let own_key = key.clone();
        let handle = tokio::spawn(async move {
            work.await;
            // Unregister, unless a later request reused the id.
            if let Ok(mut map) = inflight.lock() {
                if map
                    .get(&own_key)
                    .is_some_and(|(task, _)| *task == tokio::task::id())
                {
                    map.remove(&own_key);
                }
            }
        });
        // On this single-threaded runtime the task cannot finish before this.
        if let Ok(mut map) = self.inflight.lock() {
            map.insert(key, (handle.id(), handle.abort_handle()));
        }
    }

    /// `notifications/cancelled`: aborts the matching in-flight call, if any.
    pub(crate) fn cancel(&self, params: Option<&Value>) {
        let Some(request_id) = params.and_then(|p| p.get("requestId")) else {
            return;
        };
        let entry = self
            .inflight
            .lock()
            .ok()
            .and_then(|mut map| map.remove(&request_id.to_string()));
        if let Some((_, handle)) = entry {
            handle.abort();
            let shown = match request_id {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            };
            eprintln!("cancelled {shown}");
        }
    }
}
