//! `mcpmux-test-upstream`: a small, controllable MCP server used by the
//! integration tests and the load generator. It is not installed for users.
//!
//! It speaks the MCP stdio transport: newline-delimited JSON-RPC 2.0 on
//! stdin/stdout, one message per line. Everything it answers is deterministic
//! and carries the instance `--name`, so tests can tell which upstream answered.
//!
//! What it offers:
//! - tools `echo` (returns the params it received, unchanged), `fancy` (a
//!   listing full of fields a gateway might drop), `slow` (answers after `ms`
//!   milliseconds without blocking other requests), `fail` (tool error result),
//!   `crash` (exits with status 3 mid-call), `huge` (one very long line),
//!   `add_tool` (adds an echo tool named `name` and sends
//!   `notifications/tools/list_changed`), plus
//!   `--tools N` generated tools `tool_00000`, `tool_00001`, ...;
//! - protocol-routing tools, always callable but listed in `tools/list` only
//!   with `--protocol-tools` (so the default listing stays the 7 tools above):
//!   - `progress` {`steps` = 3, `delay_ms` = 20}: with `_meta.progressToken`,
//!     sends `steps` `notifications/progress` `delay_ms` apart, then answers
//!     "done <steps> steps";
//!   - `sample` {`prompt` = "hello"} (`sampling/createMessage`), `elicit`
//!     (`elicitation/create`), `roots` (`roots/list`), `ping_client` (`ping`):
//!     send that request to the client with our own string id `srv-<n>`, wait
//!     for the matching response, and answer "sampled: <content.text>",
//!     "elicited: <action> <content JSON>", "roots: <roots JSON>" or "pong";
//!     a client error gives an `isError` result "<what> failed: <message>
//!     (<code>)", <what> being sampling, elicitation, roots or ping;
//!   - `notify_cancel`: sends a `sampling/createMessage`, cancels it with
//!     `notifications/cancelled` 100 ms later and answers "cancelled own
//!     request" (a late answer is ignored);
//!   - `log` {`level` = "info", `text`}: sends `notifications/message` (logger
//!     `testlog`) if `logging/setLevel` was received and `level` is at or above
//!     it, answers "logged"; `log_level` answers "level: <level or none>";
//!   - `touch` {`uri`}: sends `notifications/resources/updated` if `uri` is
//!     subscribed, answers "touched <uri> (subscribed: <bool>)";
//!     `subscriptions` answers the sorted JSON array of subscribed URIs;
//! - prompt `greet`, resource `test://<name>/hello`, template
//!   `test://<name>/item/{id}`; `resources/subscribe`/`unsubscribe` on those
//!   URIs; `completion/complete` for the `greet` argument `name` (Ada, Alan,
//!   Grace) and the template argument `id` (1, 2, 42);
//! - `notifications/cancelled` aborts an in-flight `slow` or `progress` call
//!   (no answer) and prints "cancelled <requestId>" to stderr (a string id is
//!   printed without quotes);
//! - `--tasks` (MCP 2025-11-25 tasks): declares the `tasks` capability (list, cancel,
//!   `tools/call`) and lists `slow` with `execution.taskSupport` "optional"; a `tools/call` of
//!   `slow` with a `task` param answers at once with a CreateTaskResult for task `task-<k>`
//!   (k = 1, 2, ...; status "working", `ttl` as requested or 60000) and sleeps in the
//!   background; a task-augmented call of another tool is refused with -32601. When the task
//!   ends (completed, or cancelled by `tasks/cancel`) it sends `notifications/tasks/status`
//!   with the whole task. `tasks/get` and `tasks/cancel` answer the task (cancelling a task in
//!   a terminal status is -32602); `tasks/result` answers, once the task is terminal, the
//!   CallToolResult ("slept <ms>ms", or an `isError` "task cancelled") with `_meta`
//!   `io.modelcontextprotocol/related-task`; `tasks/list` answers every task (no pagination);
//!   unknown task ids are -32602. Without `--tasks`, the `task` param is ignored;
//! - optional self-pagination of every list (`--page-size`);
//! - fault injection flags (`--exit-at-start`, `--garbage-at-start`,
//!   `--ignore-pings`, `--hang-on-initialize`, `--spawn-grandchild`,
//!   `--huge-line-bytes`, `--crash-file PATH`) and `--record FILE` to log
//!   every received line; `--crash-file PATH` makes it print a line to stderr
//!   and exit with status 4 at start while PATH exists (delete the file to let
//!   the fault clear);
//! - fault injection tools, always callable but listed in `tools/list` only
//!   with `--fault-tools` (after the protocol-routing ones, before the
//!   generated ones): `hang` (never answers, keeps serving other requests),
//!   `garbage` (prints a non-JSON line on
//!   stdout, then answers "garbage sent"), `flood` {`count` = 1000} (sends
//!   `count` `notifications/message` and `count`
//!   `notifications/tools/list_changed`, interleaved, as fast as it can, then
//!   answers "flooded <count>"), `stop_pings` (from then on ignores `ping`, as
//!   `--ignore-pings` does; answers "pings stopped").
//!
//! Design: the main task reads stdin and handles each line synchronously;
//! `slow`, `progress` and the tools that wait for the client spawn tokio
//! tasks. Responses from the client are routed by id to the task waiting for
//! them (unknown ids are ignored). Replies go through a channel to a writer
//! thread that writes into a `BufWriter` and flushes only when the channel is
//! momentarily empty, so a burst of requests costs one flush.

use std::collections::{BTreeSet, HashMap};
use std::fs::File;
use std::future::Future;
use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use clap::Parser;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::oneshot;
use tokio::task::AbortHandle;

/// Protocol versions we echo back when the client asks for them.
const SUPPORTED_VERSIONS: &[&str] = &["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];
/// Version answered when the client asks for one we do not know.
const LATEST_VERSION: &str = "2025-11-25";
/// Text size of the `huge` tool answer when `--huge-line-bytes` is not given.
const DEFAULT_HUGE_TEXT: usize = 1024 * 1024;

// JSON-RPC / MCP error codes.
const PARSE_ERROR: i64 = -32700;
const INVALID_REQUEST: i64 = -32600;
const METHOD_NOT_FOUND: i64 = -32601;
const INVALID_PARAMS: i64 = -32602;
const RESOURCE_NOT_FOUND: i64 = -32002;

/// RFC 5424 severities, lowest first, as named by MCP logging.
const LOG_LEVELS: [&str; 8] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];

#[derive(Parser, Debug)]
#[command(
    name = "mcpmux-test-upstream",
    about = "Controllable MCP stdio server for mcpmux tests and load generation"
)]
struct Args {
    /// Identifies this instance; included in answers.
    #[arg(long, default_value = "test")]
    name: String,
    /// Additionally generate N tools named tool_00000, tool_00001, ...
    #[arg(long, value_name = "N", default_value_t = 0)]
    tools: usize,
    /// Paginate every list by K items (0 = no pagination).
    #[arg(long, value_name = "K", default_value_t = 0)]
    page_size: usize,
    /// Force the protocol version answered in initialize.
    #[arg(long, value_name = "V")]
    protocol_version: Option<String>,
    /// Print a line to stderr and exit with CODE before reading anything.
    #[arg(long, value_name = "CODE", allow_negative_numbers = true)]
    exit_at_start: Option<i32>,
    /// Append every line received on stdin to FILE.
    #[arg(long, value_name = "FILE")]
    record: Option<PathBuf>,
    /// Include `instructions` in the initialize result.
    #[arg(long, value_name = "TEXT")]
    instructions: Option<String>,
    /// Print a non-JSON line on stdout before anything else.
    #[arg(long)]
    garbage_at_start: bool,
    /// Never answer `ping`.
    #[arg(long)]
    ignore_pings: bool,
    /// Never answer `initialize`.
    #[arg(long)]
    hang_on_initialize: bool,
    /// Print a line to stderr and exit with status 4 at start while PATH exists.
    #[arg(long, value_name = "PATH")]
    crash_file: Option<PathBuf>,
    /// Spawn `sleep 3600` at start (inheriting stdio) and print its pid to stderr.
    #[arg(long)]
    spawn_grandchild: bool,
    /// Size in bytes of the single line answered by the `huge` tool.
    #[arg(long, value_name = "N")]
    huge_line_bytes: Option<usize>,
    /// Also list the protocol-routing tools (progress, sample, elicit, roots,
    /// ping_client, notify_cancel, log, log_level, touch, subscriptions) in
    /// tools/list; they are callable either way.
    #[arg(long)]
    protocol_tools: bool,
    /// Also list the fault injection tools (hang, garbage, flood, stop_pings)
    /// in tools/list; they are callable either way.
    #[arg(long)]
    fault_tools: bool,
    /// Support MCP tasks: declare the `tasks` capability and run task-augmented `slow` calls
    /// as tasks (tasks/get, tasks/result, tasks/list, tasks/cancel, notifications/tasks/status).
    #[arg(long)]
    tasks: bool,
}

/// A message for the writer thread.
enum Out {
    /// One JSON message, written followed by `\n`.
    Line(String),
    /// Flush everything queued before, then make the process exit with this code.
    Exit(i32),
}

/// What handling one input line produced.
enum Outcome {
    /// Send this line.
    Reply(String),
    /// Nothing to send now (notification, fault flag, or a spawned `slow` task).
    Silent,
    /// Stop: flush what was queued before and exit with this code.
    Exit(i32),
}

/// A JSON-RPC error object.
#[derive(Serialize, Debug)]
struct RpcError {
    code: i64,
    message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<Value>,
}

fn invalid_params(message: impl Into<String>) -> RpcError {
    RpcError {
        code: INVALID_PARAMS,
        message: message.into(),
        data: None,
    }
}

#[derive(Serialize)]
struct Success<'a, T: Serialize + ?Sized> {
    jsonrpc: &'static str,
    id: &'a Value,
    result: &'a T,
}

#[derive(Serialize)]
struct Failure<'a> {
    jsonrpc: &'static str,
    id: &'a Value,
    error: &'a RpcError,
}

/// Serializes a success response (compact JSON never contains a raw newline).
fn ok_line<T: Serialize + ?Sized>(id: &Value, result: &T) -> String {
    let msg = Success {
        jsonrpc: "2.0",
        id,
        result,
    };
    serde_json::to_string(&msg).expect("response serializes")
}

fn error_line(id: &Value, error: &RpcError) -> String {
    let msg = Failure {
        jsonrpc: "2.0",
        id,
        error,
    };
    serde_json::to_string(&msg).expect("error serializes")
}

/// Pre-serializes a list result (`{"<key>":[...],"nextCursor":"page:N"}`) per page.
/// Page N is addressed by the cursor `page:N`; page 0 is the first one.
fn paginate(key: &str, items: &[Value], page_size: usize) -> Vec<Box<RawValue>> {
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
fn fixed_tools() -> Vec<Value> {
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
fn protocol_tools() -> Vec<Value> {
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
fn fault_tools() -> Vec<Value> {
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
    ]
}

/// A tool result with one text block.
fn text_result(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}]})
}

/// A tool error result (`isError: true`) with one text block.
fn error_result(text: &str) -> Value {
    json!({"content": [{"type": "text", "text": text}], "isError": true})
}

/// An optional non-negative integer tool argument.
fn uint_arg(args: Option<&Value>, key: &str, default: u64) -> Result<u64, RpcError> {
    match args.and_then(|a| a.get(key)) {
        None | Some(Value::Null) => Ok(default),
        Some(v) => v
            .as_u64()
            .ok_or_else(|| invalid_params(format!("`{key}` must be a non-negative integer"))),
    }
}

/// What the client answered to one of our requests: its `result`, or
/// `"<error.message> (<error.code>)"`.
type ClientReply = Result<Value, String>;

/// Server → client messages: requests with our own ids (`srv-1`, `srv-2`, ...)
/// whose responses are routed back by id, and notifications.
#[derive(Clone)]
struct ClientLink {
    out: mpsc::Sender<Out>,
    next_id: Arc<AtomicU64>,
    pending: Arc<Mutex<HashMap<String, oneshot::Sender<ClientReply>>>>,
}

impl ClientLink {
    fn new(out: mpsc::Sender<Out>) -> Self {
        ClientLink {
            out,
            next_id: Arc::new(AtomicU64::new(1)),
            pending: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// Queues one line; fails only when the process is already exiting.
    fn send(&self, line: String) {
        let _ = self.out.send(Out::Line(line));
    }

    fn notify(&self, method: &str, params: Value) {
        let msg = json!({"jsonrpc": "2.0", "method": method, "params": params});
        self.send(msg.to_string());
    }

    /// Sends a request to the client; the receiver gets its response.
    fn request(
        &self,
        method: &str,
        params: Option<Value>,
    ) -> (String, oneshot::Receiver<ClientReply>) {
        let id = format!("srv-{}", self.next_id.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = oneshot::channel();
        if let Ok(mut pending) = self.pending.lock() {
            pending.insert(id.clone(), tx);
        }
        let mut msg = json!({"jsonrpc": "2.0", "id": id, "method": method});
        if let Some(params) = params {
            msg["params"] = params;
        }
        self.send(msg.to_string());
        (id, rx)
    }

    /// Stops waiting for the response to `id`; a late one is then ignored.
    fn forget(&self, id: &str) {
        if let Ok(mut pending) = self.pending.lock() {
            pending.remove(id);
        }
    }

    /// Hands a client response to the task waiting for it; unknown ids are ignored.
    fn deliver(&self, id: &Value, response: &serde_json::Map<String, Value>) {
        let Some(id) = id.as_str() else { return };
        let Some(tx) = self.pending.lock().ok().and_then(|mut p| p.remove(id)) else {
            return;
        };
        let reply = match response.get("error") {
            Some(error) => Err(format!(
                "{} ({})",
                error.get("message").and_then(Value::as_str).unwrap_or(""),
                error.get("code").unwrap_or(&Value::Null)
            )),
            None => Ok(response.get("result").cloned().unwrap_or(Value::Null)),
        };
        // The waiting task may be gone (aborted); then the response is dropped.
        let _ = tx.send(reply);
    }
}

/// One task created by a task-augmented `slow` call (`--tasks`); its id is `task-<k>`,
/// stored at index k - 1.
struct TaskEntry {
    /// The `Task` object as answered by `tasks/get`.
    task: Value,
    /// The `CallToolResult` (with the related-task `_meta`) once the task is terminal.
    result: Option<Value>,
    /// Ids of `tasks/result` requests waiting for the task to end.
    waiters: Vec<Value>,
    /// The background sleep, aborted by `tasks/cancel`.
    work: Option<AbortHandle>,
}

type TaskTable = Arc<Mutex<Vec<TaskEntry>>>;

/// The current time as an RFC 3339 timestamp.
fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

fn is_terminal(task: &Value) -> bool {
    matches!(
        task["status"].as_str(),
        Some("completed" | "failed" | "cancelled")
    )
}

/// Moves task `index` to the terminal `status` with `result` (unless it already is terminal),
/// answers the waiting `tasks/result` requests and sends `notifications/tasks/status`.
fn end_task(
    tasks: &TaskTable,
    link: &ClientLink,
    index: usize,
    status: &str,
    mut result: Value,
) -> Option<Value> {
    let (task, waiters) = {
        let mut table = tasks.lock().expect("task table lock");
        let entry = table.get_mut(index)?;
        if is_terminal(&entry.task) {
            return None;
        }
        entry.task["status"] = json!(status);
        entry.task["lastUpdatedAt"] = json!(now_rfc3339());
        if status == "cancelled" {
            entry.task["statusMessage"] = json!("The task was cancelled by request.");
        }
        result["_meta"] = json!({"io.modelcontextprotocol/related-task":
                                 {"taskId": entry.task["taskId"]}});
        entry.result = Some(result.clone());
        if let Some(work) = entry.work.take() {
            work.abort();
        }
        (entry.task.clone(), std::mem::take(&mut entry.waiters))
    };
    for id in waiters {
        link.send(ok_line(&id, &result));
    }
    link.notify("notifications/tasks/status", task.clone());
    Some(task)
}

/// Tasks answering a client request later that `notifications/cancelled` can
/// abort, by the request id as compact JSON.
type InFlight = Arc<Mutex<HashMap<String, (tokio::task::Id, AbortHandle)>>>;

/// Immutable server state plus the channel to the writer thread.
struct Server {
    name: String,
    protocol_version: Option<String>,
    instructions: Option<String>,
    /// Set by `--ignore-pings` or the `stop_pings` tool.
    ignore_pings: std::sync::atomic::AtomicBool,
    hang_on_initialize: bool,
    huge_line_bytes: Option<usize>,
    tools: Vec<Box<RawValue>>,
    /// The tool listing before any `add_tool`, kept to re-paginate when tools are added.
    base_tools: Vec<Value>,
    /// Tools added at run time by `add_tool` (each behaves like `echo`).
    added_tools: std::sync::Mutex<Vec<Value>>,
    page_size: usize,
    prompts: Vec<Box<RawValue>>,
    resources: Vec<Box<RawValue>>,
    templates: Vec<Box<RawValue>>,
    out: mpsc::Sender<Out>,
    /// Requests to and notifications for the client.
    link: ClientLink,
    /// Cancellable `slow` and `progress` calls.
    inflight: InFlight,
    /// Index in `LOG_LEVELS` of the last valid `logging/setLevel`.
    log_level: Mutex<Option<usize>>,
    /// URIs from `resources/subscribe` (sorted).
    subscriptions: Mutex<BTreeSet<String>>,
    /// `--tasks`: task-augmented `slow` calls run as tasks.
    tasks_enabled: bool,
    /// The tasks created so far.
    tasks: TaskTable,
}

impl Server {
    fn new(args: &Args, out: mpsc::Sender<Out>) -> Self {
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
        tools.extend((0..args.tools).map(|i| {
            json!({"name": format!("tool_{i:05}"),
                   "description": format!("Generated tool number {i} of upstream {name}"),
                   "inputSchema": {"type": "object", "properties": {}}})
        }));
        let prompts = [json!({"name": "greet", "description": "Greets someone",
            "arguments": [{"name": "name", "description": "Who to greet", "required": true}]})];
        let resources = [
            json!({"uri": format!("test://{name}/hello"), "name": "hello",
            "mimeType": "text/plain"}),
        ];
        let templates = [json!({"uriTemplate": format!("test://{name}/item/{{id}}"),
            "name": "item", "mimeType": "text/plain"})];
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
            tasks: Arc::new(Mutex::new(Vec::new())),
        }
    }

    /// Handles one non-empty input line.
    fn handle_line(&self, line: &[u8]) -> Outcome {
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

    fn handle_request(
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

    fn initialize(&self, params: Option<&Value>) -> Value {
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

    /// `tasks/get`, `tasks/result`, `tasks/cancel` and `tasks/list` (`--tasks`).
    fn task_request(
        &self,
        id: &Value,
        method: &str,
        params: Option<&Value>,
    ) -> Result<Outcome, RpcError> {
        if method == "tasks/list" {
            if let Some(cursor) = params.and_then(|p| p.get("cursor")) {
                return Err(invalid_params(format!("Unknown cursor: {cursor}")));
            }
            let table = self.tasks.lock().expect("task table lock");
            let tasks: Vec<&Value> = table.iter().map(|e| &e.task).collect();
            return Ok(Outcome::Reply(ok_line(id, &json!({ "tasks": tasks }))));
        }
        let task_id = params
            .and_then(|p| p.get("taskId"))
            .and_then(Value::as_str)
            .ok_or_else(|| invalid_params(format!("{method} requires a string `taskId`")))?;
        let unknown = || invalid_params(format!("Unknown task: {task_id}"));
        let index = task_id
            .strip_prefix("task-")
            .and_then(|k| k.parse::<usize>().ok())
            .and_then(|k| k.checked_sub(1))
            .ok_or_else(unknown)?;
        let mut table = self.tasks.lock().expect("task table lock");
        let entry = table.get_mut(index).ok_or_else(unknown)?;
        match method {
            "tasks/get" => Ok(Outcome::Reply(ok_line(id, &entry.task))),
            "tasks/result" => match &entry.result {
                Some(result) => Ok(Outcome::Reply(ok_line(id, result))),
                None => {
                    entry.waiters.push(id.clone());
                    Ok(Outcome::Silent)
                }
            },
            _ => {
                if is_terminal(&entry.task) {
                    return Err(invalid_params(format!(
                        "Cannot cancel task: already in terminal status '{}'",
                        entry.task["status"].as_str().unwrap_or_default()
                    )));
                }
                drop(table);
                let task = end_task(
                    &self.tasks,
                    &self.link,
                    index,
                    "cancelled",
                    error_result("task cancelled"),
                )
                .ok_or_else(unknown)?;
                Ok(Outcome::Reply(ok_line(id, &task)))
            }
        }
    }

    /// A task-augmented `slow` call: creates task `task-<k>`, answers its CreateTaskResult and
    /// sleeps `ms` in the background before completing it.
    fn create_task(&self, id: &Value, params: &Value, ms: u64) -> Outcome {
        let ttl = params["task"]
            .get("ttl")
            .and_then(Value::as_u64)
            .unwrap_or(60_000);
        let now = now_rfc3339();
        let mut table = self.tasks.lock().expect("task table lock");
        let index = table.len();
        let task = json!({"taskId": format!("task-{}", index + 1), "status": "working",
                          "createdAt": now, "lastUpdatedAt": now, "ttl": ttl});
        let tasks = Arc::clone(&self.tasks);
        let link = self.link.clone();
        let work = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(ms)).await;
            let result = text_result(&format!("slept {ms}ms"));
            end_task(&tasks, &link, index, "completed", result);
        });
        table.push(TaskEntry {
            task: task.clone(),
            result: None,
            waiters: Vec::new(),
            work: Some(work.abort_handle()),
        });
        Outcome::Reply(ok_line(id, &json!({ "task": task })))
    }

    /// Answers a list request with the page selected by `params.cursor`.
    fn list(
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

    fn call_tool(&self, id: &Value, params: Value) -> Result<Outcome, RpcError> {
        let reply = |result: &Value| Ok(Outcome::Reply(ok_line(id, result)));
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
        match name {
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
                    return Ok(self.create_task(id, &params, ms));
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
                Some(sampling_params(&params)),
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
                    .request("sampling/createMessage", Some(sampling_params(&params)));
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
                    self.link.notify(
                        "notifications/message",
                        json!({"level": level, "logger": "testlog", "data": data}),
                    );
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
            "fail" => {
                let mut result = text_result("failed on purpose");
                result["isError"] = json!(true);
                reply(&result)
            }
            "crash" => {
                eprintln!("test upstream {} crashing on purpose", self.name);
                Ok(Outcome::Exit(3))
            }
            // Never answered; other requests are still served.
            "hang" => Ok(Outcome::Silent),
            "garbage" => {
                let _ = self
                    .out
                    .send(Out::Line("this is not JSON-RPC, just garbage".to_owned()));
                reply(&text_result("garbage sent"))
            }
            "flood" => {
                let count = uint_arg(params.get("arguments"), "count", 1000)?;
                let changed = r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#;
                for i in 0..count {
                    self.link.notify(
                        "notifications/message",
                        json!({"level": "info", "logger": "flood", "data": i}),
                    );
                    let _ = self.out.send(Out::Line(changed.to_owned()));
                }
                reply(&text_result(&format!("flooded {count}")))
            }
            "stop_pings" => {
                self.ignore_pings.store(true, Ordering::Relaxed);
                reply(&text_result("pings stopped"))
            }
            "huge" => Ok(Outcome::Reply(self.huge_line(id))),
            "add_tool" => {
                let new = params
                    .get("arguments")
                    .and_then(|a| a.get("name"))
                    .and_then(Value::as_str)
                    .ok_or_else(|| invalid_params("add_tool: `name` must be a string"))?
                    .to_owned();
                if let Ok(mut added) = self.added_tools.lock() {
                    added.push(
                        json!({"name": new, "description": "Added at run time; echoes",
                                      "inputSchema": {"type": "object"}}),
                    );
                }
                let changed = r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#;
                let _ = self.out.send(Out::Line(changed.to_owned()));
                reply(&text_result(&format!("added {new}")))
            }
            other
                if self
                    .added_tools
                    .lock()
                    .is_ok_and(|a| a.iter().any(|t| t["name"] == other)) =>
            {
                reply(&json!({
                    "content": [{"type": "text", "text": params.to_string()}],
                    "structuredContent": {"upstream": self.name, "params": params}
                }))
            }
            _ => Err(invalid_params(format!("Unknown tool: {name}"))),
        }
    }

    /// Spawns `work` (which answers request `id` itself) so that a
    /// `notifications/cancelled` for `id` can abort it before it answers.
    fn spawn_cancellable<F>(&self, id: &Value, work: F)
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
    fn cancel(&self, params: Option<&Value>) {
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

    /// Sends `method` to the client and answers tool call `id` once the
    /// client responds: `answer(result)` as text, or an `isError` result
    /// "<what> failed: <message> (<code>)".
    fn ask_client(
        &self,
        id: &Value,
        method: &str,
        params: Option<Value>,
        what: &'static str,
        answer: fn(&Value) -> String,
    ) -> Outcome {
        let (_, response) = self.link.request(method, params);
        let link = self.link.clone();
        let id = id.clone();
        tokio::spawn(async move {
            let result = match response.await {
                Ok(Ok(result)) => text_result(&answer(&result)),
                Ok(Err(error)) => error_result(&format!("{what} failed: {error}")),
                // The request was forgotten: nothing to answer.
                Err(_) => return,
            };
            link.send(ok_line(&id, &result));
        });
        Outcome::Silent
    }

    /// The URI of a `resources/subscribe`/`unsubscribe`, which must be one we serve.
    fn subscribable_uri(&self, params: Option<&Value>) -> Result<String, RpcError> {
        let uri = params
            .and_then(|p| p.get("uri"))
            .and_then(Value::as_str)
            .ok_or_else(|| invalid_params("resources/subscribe requires a string `uri`"))?;
        let base = format!("test://{}/", self.name);
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
    fn complete(&self, params: Option<&Value>) -> Result<Value, RpcError> {
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

    /// One line of exactly `--huge-line-bytes` bytes (newline excluded, at
    /// least the envelope), or a 1 MiB text by default.
    fn huge_line(&self, id: &Value) -> String {
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

    fn get_prompt(&self, params: Option<&Value>) -> Result<Value, RpcError> {
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

    fn read_resource(&self, params: Option<&Value>) -> Result<Value, RpcError> {
        let uri = params
            .and_then(|p| p.get("uri"))
            .and_then(Value::as_str)
            .ok_or_else(|| invalid_params("resources/read requires a string `uri`"))?;
        let name = &self.name;
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

/// The `sampling/createMessage` params of `sample` and `notify_cancel`.
fn sampling_params(call: &Value) -> Value {
    let prompt = call
        .get("arguments")
        .and_then(|a| a.get("prompt"))
        .and_then(Value::as_str)
        .unwrap_or("hello");
    json!({"messages": [{"role": "user", "content": {"type": "text", "text": prompt}}],
           "maxTokens": 50})
}

/// Index of a logging level in `LOG_LEVELS`.
fn level_rank(level: &str) -> Option<usize> {
    LOG_LEVELS.iter().position(|l| *l == level)
}

fn resource_not_found(uri: &str) -> RpcError {
    RpcError {
        code: RESOURCE_NOT_FOUND,
        message: "Resource not found".into(),
        data: Some(json!({"uri": uri})),
    }
}

/// Writer thread: writes queued lines, flushing only when the queue is empty.
/// Returns the exit code requested by `Out::Exit` (or 0 when all senders are
/// gone); exits the process with status 1 if stdout is closed.
fn writer_loop(rx: mpsc::Receiver<Out>) -> i32 {
    let mut w = BufWriter::with_capacity(64 * 1024, std::io::stdout().lock());
    let run = |w: &mut BufWriter<_>| -> std::io::Result<i32> {
        while let Ok(mut msg) = rx.recv() {
            loop {
                match msg {
                    Out::Line(line) => {
                        w.write_all(line.as_bytes())?;
                        w.write_all(b"\n")?;
                    }
                    Out::Exit(code) => {
                        w.flush()?;
                        return Ok(code);
                    }
                }
                match rx.try_recv() {
                    Ok(next) => msg = next,
                    Err(_) => break,
                }
            }
            w.flush()?;
        }
        Ok(0)
    };
    run(&mut w).unwrap_or_else(|e| {
        eprintln!("test upstream: cannot write to stdout: {e}");
        std::process::exit(1);
    })
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args = Args::parse();
    if let Some(code) = args.exit_at_start {
        eprintln!("test upstream exiting at start");
        std::process::exit(code);
    }
    if let Some(path) = args.crash_file.as_ref().filter(|p| p.exists()) {
        eprintln!("test upstream crashing at start: {} exists", path.display());
        std::process::exit(4);
    }
    if args.garbage_at_start {
        let mut stdout = std::io::stdout().lock();
        let _ =
            writeln!(stdout, "this is not JSON-RPC, just garbage").and_then(|()| stdout.flush());
    }
    if args.spawn_grandchild {
        match std::process::Command::new("sleep").arg("3600").spawn() {
            Ok(mut child) => {
                eprintln!("grandchild pid {}", child.id());
                // Reap it if it ever dies while we are alive; never kill it ourselves.
                std::thread::spawn(move || child.wait());
            }
            Err(e) => eprintln!("test upstream: cannot spawn grandchild: {e}"),
        }
    }
    let mut record = args.record.as_ref().map(|path| {
        let file = File::options().create(true).append(true).open(path);
        file.unwrap_or_else(|e| {
            eprintln!(
                "test upstream: cannot open record file {}: {e}",
                path.display()
            );
            std::process::exit(2);
        })
    });

    let (tx, rx) = mpsc::channel();
    let writer = std::thread::spawn(move || writer_loop(rx));
    let server = Server::new(&args, tx.clone());
    eprintln!("test upstream {} started", args.name);

    let mut stdin = BufReader::with_capacity(64 * 1024, tokio::io::stdin());
    let mut buf = Vec::with_capacity(4096);
    let code = loop {
        buf.clear();
        match stdin.read_until(b'\n', &mut buf).await {
            Ok(0) => break 0, // EOF: exit cleanly.
            Ok(_) => {}
            Err(e) => {
                eprintln!("test upstream: cannot read stdin: {e}");
                break 1;
            }
        }
        let line = buf.strip_suffix(b"\n").unwrap_or(&buf);
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if let Some(file) = &mut record {
            // One write per line (File is unbuffered), so it is visible at once.
            let mut entry = Vec::with_capacity(line.len() + 1);
            entry.extend_from_slice(line);
            entry.push(b'\n');
            if let Err(e) = file.write_all(&entry) {
                eprintln!("test upstream: cannot write record file: {e}");
            }
        }
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match server.handle_line(line) {
            Outcome::Reply(text) => {
                // Fails only if the writer thread already exited the process.
                let _ = tx.send(Out::Line(text));
            }
            Outcome::Silent => {}
            Outcome::Exit(code) => break code,
        }
    };
    // Everything queued before this point is written and flushed first;
    // pending `slow` answers are abandoned.
    let _ = tx.send(Out::Exit(code));
    let code = writer.join().unwrap_or(1);
    std::process::exit(code);
}
