//! Shared helpers for the black-box tests: start the real `mcpmux` binary on port 0 with a config
//! of real upstream processes, talk to it over Streamable HTTP, and check every message it sends
//! against the MCP schema of the version negotiated on that side.

#![allow(dead_code, clippy::unwrap_used, clippy::missing_panics_doc)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub mod peers;
pub mod python;

pub const MCPMUX: &str = env!("CARGO_BIN_EXE_mcpmux");
pub const TEST_UPSTREAM: &str = env!("CARGO_BIN_EXE_mcpmux-test-upstream");

/// A TOML `[upstreams.NAME]` table running our controllable test upstream.
pub fn test_upstream(name: &str, extra_args: &[&str]) -> String {
    let mut args = vec!["--name".to_owned(), name.to_owned()];
    args.extend(extra_args.iter().map(|a| (*a).to_owned()));
    format!(
        "[upstreams.{name}]\ncommand = {}\nargs = {}\n",
        toml_str(TEST_UPSTREAM),
        toml_list(&args)
    )
}

/// A TOML `[upstreams.NAME]` table running `bin` of the npm servers in `tests/peers/` (installed
/// under the target dir by `peers`), with `args`.
pub fn npm_upstream(name: &str, bin: &str, args: &[&str]) -> String {
    let command = peers::npm_bin(bin);
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    format!(
        "[upstreams.{name}]\ncommand = {}\nargs = {}\nstartup_timeout = \"300s\"\n",
        toml_str(command.to_str().unwrap()),
        toml_list(&args)
    )
}

pub fn toml_str(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

pub fn toml_list(items: &[String]) -> String {
    serde_json::to_string(items).unwrap()
}

/// The daemon under test. Stopped (SIGTERM, then SIGKILL) when dropped.
pub struct Daemon {
    child: Option<Child>,
    pub url: String,
    /// The admin API's base URL, e.g. `http://127.0.0.1:40123`.
    pub admin_url: Option<String>,
    pub dir: tempfile::TempDir,
    stderr_path: PathBuf,
}

impl Daemon {
    /// Starts `mcpmux serve` on 127.0.0.1:0 with `config` appended to a `[server]` table.
    pub fn start(config: &str) -> Self {
        Self::start_with(
            &format!("[server]\nlisten = \"127.0.0.1:0\"\n\n{config}"),
            &[],
        )
    }

    /// Starts `mcpmux serve --config <file with exactly `config`>` plus `extra_args`.
    pub fn start_with(config: &str, extra_args: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config_path = dir.path().join("mcpmux.toml");
        std::fs::write(&config_path, config).unwrap();
        Self::start_file(dir, &config_path, extra_args)
    }

    pub fn start_file(dir: tempfile::TempDir, config_path: &Path, extra_args: &[&str]) -> Self {
        let stderr_path = dir.path().join("daemon.stderr");
        let stderr = std::fs::File::create(&stderr_path).unwrap();
        let mut child = Command::new(MCPMUX)
            .arg("serve")
            .arg("--config")
            .arg(config_path)
            .args(extra_args)
            // Each test daemon gets its own admin port (unless the test picks one).
            .args(if extra_args.contains(&"--admin") {
                &[][..]
            } else {
                &["--admin", "127.0.0.1:0"][..]
            })
            // Each test daemon keeps its audit log in its own temporary state directory.
            .args(if extra_args.contains(&"--state-dir") {
                Vec::new()
            } else {
                vec![
                    "--state-dir".into(),
                    dir.path().join("state").into_os_string(),
                ]
            })
            .env("MCPMUX_LOG", "info,mcpmux=debug")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            // "listening on URL", then (unless turned off) "admin on URL".
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut daemon = Self {
            child: Some(child),
            url: String::new(),
            admin_url: None,
            dir,
            stderr_path,
        };
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(line) => {
                let url = line
                    .split("listening on ")
                    .nth(1)
                    .unwrap_or_default()
                    .trim()
                    .to_owned();
                assert!(
                    url.starts_with("http://127.0.0.1:"),
                    "unexpected first line: {line}"
                );
                daemon.url = url;
            }
            Err(_) => panic!("daemon did not start; stderr:\n{}", daemon.stderr()),
        }
        if let Ok(line) = rx.recv_timeout(Duration::from_secs(5)) {
            daemon.admin_url = line.split("admin on ").nth(1).map(|u| u.trim().to_owned());
        }
        daemon
    }

    /// The daemon's `GET /status` (admin API).
    pub async fn status(&self) -> Value {
        let url = format!(
            "{}/status",
            self.admin_url.as_deref().expect("the admin API is on")
        );
        let text = reqwest::get(url).await.unwrap().text().await.unwrap();
        serde_json::from_str(&text).unwrap()
    }

    /// The status entry of one upstream.
    pub async fn upstream_status(&self, name: &str) -> Value {
        let status = self.status().await;
        status["upstreams"]
            .as_array()
            .unwrap()
            .iter()
            .find(|u| u["name"] == name)
            .cloned()
            .unwrap_or(Value::Null)
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Lines of the daemon's log that contain every one of `needles`.
    pub fn log_count(&self, needles: &[&str]) -> usize {
        self.stderr()
            .lines()
            .filter(|line| needles.iter().all(|n| line.contains(n)))
            .count()
    }

    /// Everything the daemon logged so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// SIGTERM, then wait (SIGKILL after 20 s). Returns whether it exited successfully.
    pub fn stop(&mut self) -> bool {
        let Some(mut child) = self.child.take() else {
            return true;
        };
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return status.success();
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Polls `tools/list` (all pages) until `pred` holds for the exposed tool names.
    pub async fn wait_for_tools(
        &self,
        client: &Client,
        pred: impl Fn(&[String]) -> bool,
    ) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            let names: Vec<String> = client
                .list_all("tools/list", "tools")
                .await
                .iter()
                .map(|t| t["name"].as_str().unwrap_or_default().to_owned())
                .collect();
            if pred(&names) {
                return names;
            }
            assert!(
                Instant::now() < deadline,
                "tools never matched; last: {names:?}\nstderr:\n{}",
                self.stderr()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Asserts `answer` is a JSON-RPC error with `code` that names `upstream`; returns its message.
pub fn assert_upstream_error(answer: &Value, code: i64, upstream: &str) -> String {
    let error = &answer["error"];
    assert_eq!(error["code"], code, "unexpected answer: {answer}");
    let message = error["message"].as_str().unwrap_or_default().to_owned();
    assert!(
        message.contains(&format!("`{upstream}`")),
        "the message does not name `{upstream}`: {answer}"
    );
    assert_eq!(error["data"]["upstream"], upstream, "{answer}");
    message
}

/// Polls `check` every 50 ms until it is true or `timeout` passes.
pub async fn poll_until<F, Fut>(timeout: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if check().await {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every process whose parent chain leads to `root` (read from /proc).
pub fn descendants(root: u32) -> Vec<u32> {
    let mut parent_of = HashMap::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Some(ppid) = stat_field(pid, 1).and_then(|p| p.parse::<u32>().ok()) {
            parent_of.insert(pid, ppid);
        }
    }
    let mut out = Vec::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for (&child, &parent) in &parent_of {
            if parent == p && !out.contains(&child) {
                out.push(child);
                frontier.push(child);
            }
        }
    }
    out
}

/// Whether `pid` is a live process (not gone, not a zombie).
pub fn alive(pid: u32) -> bool {
    stat_field(pid, 0).is_some_and(|state| state != "Z" && state != "X")
}

/// Field `n` after the command in /proc/PID/stat (0 = state, 1 = ppid).
fn stat_field(pid: u32, n: usize) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    after.split_whitespace().nth(n).map(str::to_owned)
}

// ---------------------------------------------------------------------------------------------
// Schema validation

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
            if let Some(def) = answered_method.and_then(result_def) {
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

// ---------------------------------------------------------------------------------------------
// A host over Streamable HTTP

/// A minimal host: one session, every answer schema-checked.
pub struct Client {
    http: reqwest::Client,
    pub url: String,
    pub session: Option<String>,
    pub version: String,
    next_id: AtomicU64,
    schemas: Arc<Schemas>,
}

impl Client {
    /// Initializes a session speaking the latest version.
    pub async fn connect(url: &str) -> Self {
        Self::connect_with(url, "2025-11-25", json!({})).await
    }

    pub async fn connect_with(url: &str, version: &str, capabilities: Value) -> Self {
        let mut client = Self {
            http: reqwest::Client::new(),
            url: url.to_owned(),
            session: None,
            version: version.to_owned(),
            next_id: AtomicU64::new(1),
            schemas: Schemas::get(version),
        };
        let params = json!({"protocolVersion": version, "capabilities": capabilities, "clientInfo": {"name": "mcpmux-tests", "version": "0"}});
        let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params});
        let response = client.post(&body).await;
        assert_eq!(response.status(), 200, "initialize failed");
        client.session = response
            .headers()
            .get("mcp-session-id")
            .map(|v| v.to_str().unwrap().to_owned());
        assert!(client.session.is_some(), "no Mcp-Session-Id issued");
        let message = read_messages(response).await.pop().unwrap();
        client.schemas.check_message(&message, Some("initialize"));
        let negotiated = message["result"]["protocolVersion"]
            .as_str()
            .unwrap()
            .to_owned();
        client.version = negotiated.clone();
        client.schemas = Schemas::get(&negotiated);
        let notified = client
            .post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        assert_eq!(notified.status(), 202);
        client
    }

    /// POSTs one message with this session's headers.
    pub async fn post(&self, body: &Value) -> reqwest::Response {
        self.post_raw(body.to_string(), &[]).await
    }

    pub async fn post_raw(
        &self,
        body: String,
        extra_headers: &[(&str, &str)],
    ) -> reqwest::Response {
        use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
        let mut headers = HeaderMap::new();
        let mut set = |k: &str, v: &str| {
            headers.insert(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        };
        set("content-type", "application/json");
        set("accept", "application/json, text/event-stream");
        set("mcp-protocol-version", &self.version);
        if let Some(s) = &self.session {
            set("mcp-session-id", s);
        }
        for (k, v) in extra_headers {
            set(k, v);
        }
        self.http
            .post(&self.url)
            .headers(headers)
            .body(body)
            .send()
            .await
            .unwrap()
    }

    /// Sends a request and returns the whole answer (`result` or `error`), schema-checked.
    pub async fn request(&self, method: &str, params: Value) -> Value {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let mut body = json!({"jsonrpc": "2.0", "id": id, "method": method});
        if !params.is_null() {
            body["params"] = params;
        }
        let response = self.post(&body).await;
        let messages = read_messages(response).await;
        let mut answer = None;
        for m in messages {
            let answers_us = m.get("id") == Some(&json!(id));
            self.schemas.check_message(&m, answers_us.then_some(method));
            if answers_us {
                answer = Some(m);
            }
        }
        answer.unwrap_or_else(|| panic!("no answer to {method}"))
    }

    /// The `result` of a request; panics on an error answer.
    pub async fn result(&self, method: &str, params: Value) -> Value {
        let answer = self.request(method, params).await;
        assert!(answer.get("error").is_none(), "{method} failed: {answer}");
        answer["result"].clone()
    }

    /// Every item of a listing, following `nextCursor` (asserting it is never empty).
    pub async fn list_all(&self, method: &str, field: &str) -> Vec<Value> {
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..100_000 {
            let params = cursor
                .as_ref()
                .map_or(json!({}), |c| json!({ "cursor": c }));
            let page = self.result(method, params).await;
            items.extend(page[field].as_array().unwrap().iter().cloned());
            match page.get("nextCursor").and_then(Value::as_str) {
                Some(next) => {
                    assert!(!next.is_empty(), "empty nextCursor");
                    cursor = Some(next.to_owned());
                }
                None => return items,
            }
        }
        panic!("listing never ended")
    }

    pub fn schemas(&self) -> &Schemas {
        &self.schemas
    }
}

/// The JSON-RPC messages of one HTTP answer (JSON body or SSE stream).
pub async fn read_messages(response: reqwest::Response) -> Vec<Value> {
    let sse = response
        .headers()
        .get("content-type")
        .is_some_and(|t| t.to_str().unwrap().starts_with("text/event-stream"));
    let text = response.text().await.unwrap();
    if sse {
        text.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .map(|d| serde_json::from_str(d.trim()).unwrap())
            .collect()
    } else if text.trim().is_empty() {
        Vec::new()
    } else {
        vec![serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))]
    }
}

// ---------------------------------------------------------------------------------------------
// Streams read as they arrive: a request's own event stream (whose server requests the test
// answers with `Client::respond`), the session's GET stream, the legacy HTTP+SSE stream.

/// The definition a request sent to a host must satisfy, besides `JSONRPCRequest`.
fn server_request_def(method: &str) -> Option<&'static str> {
    Some(match method {
        "sampling/createMessage" => "CreateMessageRequest",
        "elicitation/create" => "ElicitRequest",
        "roots/list" => "ListRootsRequest",
        "ping" => "PingRequest",
        _ => return None,
    })
}

/// One server-sent event that carried data.
#[derive(Debug, Clone)]
pub struct SseEvent {
    pub event: Option<String>,
    pub data: String,
}

type ByteStream =
    std::pin::Pin<Box<dyn futures_util::Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>;

/// Reads the events of a `text/event-stream` body one by one, as they arrive.
pub struct SseReader {
    body: ByteStream,
    buffer: Vec<u8>,
    ended: bool,
}

impl SseReader {
    pub fn new(response: reqwest::Response) -> Self {
        Self {
            body: Box::pin(response.bytes_stream()),
            buffer: Vec::new(),
            ended: false,
        }
    }

    /// The next event with data: `Ok(None)` when the stream ended, `Err(())` when `timeout`
    /// passed first. Comments (keep-alives) and events without data are skipped.
    pub async fn next_event(&mut self, timeout: Duration) -> Result<Option<SseEvent>, ()> {
        use futures_util::StreamExt;
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            while let Some(end) = self.buffer.windows(2).position(|w| w == b"\n\n") {
                let block: Vec<u8> = self.buffer.drain(..end + 2).collect();
                if let Some(event) = parse_sse_block(&String::from_utf8_lossy(&block)) {
                    return Ok(Some(event));
                }
            }
            if self.ended {
                return Ok(None);
            }
            match tokio::time::timeout_at(deadline, self.body.next()).await {
                Err(_) => return Err(()),
                Ok(Some(Ok(chunk))) => self
                    .buffer
                    .extend(chunk.iter().copied().filter(|b| *b != b'\r')),
                Ok(Some(Err(_)) | None) => self.ended = true,
            }
        }
    }
}

fn parse_sse_block(block: &str) -> Option<SseEvent> {
    let mut event = None;
    let mut data: Option<String> = None;
    for line in block.lines() {
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => event = Some(value.to_owned()),
            "data" => match &mut data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => data = Some(value.to_owned()),
            },
            _ => {}
        }
    }
    data.map(|data| SseEvent { event, data })
}

/// What waiting for the next message gave.
#[derive(Debug)]
pub enum Next {
    Message(Value),
    /// The stream (or JSON body) ended.
    End,
    Timeout,
}

enum Source {
    /// A POST whose response headers have not arrived yet.
    Pending(tokio::task::JoinHandle<reqwest::Response>),
    Sse(SseReader),
    Done,
}

/// The JSON-RPC messages a host receives on one HTTP answer or stream, each schema-checked (for
/// the version negotiated on that side) as it is taken: answers to requests registered with
/// `expect_answer` against their method's result, server requests against their request type.
pub struct Messages {
    source: Source,
    status: Option<reqwest::StatusCode>,
    schemas: Arc<Schemas>,
    answers: HashMap<String, String>,
    queue: std::collections::VecDeque<Value>,
    /// A JSON (not event-stream) body being read.
    json_body: Option<tokio::sync::oneshot::Receiver<String>>,
}

impl Messages {
    pub fn from_response(response: reqwest::Response, schemas: Arc<Schemas>) -> Self {
        let mut messages = Self::pending(None, schemas);
        messages.accept(response);
        messages
    }

    pub fn from_sse(reader: SseReader, schemas: Arc<Schemas>) -> Self {
        let mut messages = Self::pending(None, schemas);
        messages.source = Source::Sse(reader);
        messages.status = Some(reqwest::StatusCode::OK);
        messages
    }

    fn pending(
        handle: Option<tokio::task::JoinHandle<reqwest::Response>>,
        schemas: Arc<Schemas>,
    ) -> Self {
        Self {
            source: handle.map_or(Source::Done, Source::Pending),
            status: None,
            schemas,
            answers: HashMap::new(),
            queue: Default::default(),
            json_body: None,
        }
    }

    /// Takes the response: its status, and its body as a stream or as whole JSON (read later).
    fn accept(&mut self, response: reqwest::Response) {
        self.status = Some(response.status());
        let sse = response
            .headers()
            .get("content-type")
            .is_some_and(|t| t.to_str().unwrap().starts_with("text/event-stream"));
        if sse {
            self.source = Source::Sse(SseReader::new(response));
        } else {
            let (tx, rx) = tokio::sync::oneshot::channel();
            tokio::spawn(async move {
                let _ = tx.send(response.text().await.unwrap_or_default());
            });
            self.source = Source::Done;
            self.json_body = Some(rx);
        }
    }

    /// Registers a request whose answer may come on this stream, to check it as `method`'s result.
    pub fn expect_answer(&mut self, id: &Value, method: &str) {
        self.answers.insert(id.to_string(), method.to_owned());
    }

    pub fn schemas(&self) -> &Arc<Schemas> {
        &self.schemas
    }

    /// Checks one message the gateway sent to the host.
    fn check(&self, message: &Value) {
        let is_answer = message.get("method").is_none();
        let answered = message
            .get("id")
            .filter(|_| is_answer)
            .and_then(|id| self.answers.get(&id.to_string()))
            .map(String::as_str);
        self.schemas.check_message(message, answered);
        if let (Some(method), Some(_)) = (
            message.get("method").and_then(Value::as_str),
            message.get("id"),
        ) {
            if let Some(def) = server_request_def(method) {
                self.schemas.check(def, message);
            }
        }
    }

    /// The HTTP status of the answer (waits for its headers, at most `timeout`).
    pub async fn status(&mut self, timeout: Duration) -> reqwest::StatusCode {
        self.resolve(tokio::time::Instant::now() + timeout).await;
        self.status.expect("no HTTP answer in time")
    }

    async fn resolve(&mut self, deadline: tokio::time::Instant) -> bool {
        if let Source::Pending(handle) = &mut self.source {
            match tokio::time::timeout_at(deadline, handle).await {
                Ok(response) => self.accept(response.unwrap()),
                Err(_) => return false,
            }
        }
        true
    }

    /// The next message, schema-checked; `Next::Timeout` if none came within `timeout`.
    pub async fn next_within(&mut self, timeout: Duration) -> Next {
        let deadline = tokio::time::Instant::now() + timeout;
        if !self.resolve(deadline).await {
            return Next::Timeout;
        }
        if let Some(rx) = &mut self.json_body {
            let Ok(text) = tokio::time::timeout_at(deadline, rx).await else {
                return Next::Timeout;
            };
            self.json_body = None;
            let text = text.unwrap_or_default();
            if !text.trim().is_empty() {
                let value: Value = serde_json::from_str(&text)
                    .unwrap_or_else(|e| panic!("not JSON ({e}): {text}"));
                match value {
                    Value::Array(items) => self.queue.extend(items),
                    other => self.queue.push_back(other),
                }
            }
        }
        if let Some(message) = self.queue.pop_front() {
            self.check(&message);
            return Next::Message(message);
        }
        let Source::Sse(reader) = &mut self.source else {
            return Next::End;
        };
        let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
        match reader.next_event(remaining).await {
            Err(()) => Next::Timeout,
            Ok(None) => {
                self.source = Source::Done;
                Next::End
            }
            Ok(Some(event)) => {
                assert!(
                    matches!(event.event.as_deref(), None | Some("message")),
                    "unexpected event {event:?}"
                );
                let message: Value = serde_json::from_str(&event.data)
                    .unwrap_or_else(|e| panic!("event data is not JSON ({e}): {}", event.data));
                self.check(&message);
                Next::Message(message)
            }
        }
    }

    /// The next message (at most 30 s); panics when the stream ends or nothing comes.
    pub async fn next(&mut self) -> Value {
        match self.next_within(Duration::from_secs(30)).await {
            Next::Message(m) => m,
            other => panic!("expected a message, got {other:?}"),
        }
    }

    /// Asserts that no message arrives within `quiet` (the stream may end).
    pub async fn assert_silent(&mut self, quiet: Duration, what: &str) {
        if let Next::Message(m) = self.next_within(quiet).await {
            panic!("{what}: expected nothing, got {m}");
        }
    }

    /// Messages until the answer to `id` (at most 30 s): the ones before it, and the answer.
    pub async fn until_answer(&mut self, id: &Value) -> (Vec<Value>, Value) {
        let mut before = Vec::new();
        loop {
            let message = self.next().await;
            let answers = message.get("method").is_none() && message.get("id") == Some(id);
            if answers {
                return (before, message);
            }
            before.push(message);
        }
    }

    /// Every remaining message until the stream ends (at most `timeout`).
    pub async fn rest(&mut self, timeout: Duration) -> Vec<Value> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut out = Vec::new();
        loop {
            let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
            match self.next_within(remaining).await {
                Next::Message(m) => out.push(m),
                Next::End => return out,
                Next::Timeout => panic!("the stream did not end in time; got {out:?}"),
            }
        }
    }
}

/// A host request in flight, its answer read as it streams.
pub struct Call {
    pub id: Value,
    pub method: String,
    pub messages: Messages,
}

impl Call {
    /// The next message of the request's answer stream.
    pub async fn next(&mut self) -> Value {
        self.messages.next().await
    }

    /// Reads to the answer and asserts the answer stream then ends: the messages before the
    /// answer, and the answer (`result` or `error`).
    pub async fn finish(mut self) -> (Vec<Value>, Value) {
        let status = self.messages.status(Duration::from_secs(30)).await;
        assert_eq!(status, 200, "{} answered HTTP {status}", self.method);
        let (before, answer) = self.messages.until_answer(&self.id).await;
        let after = self.messages.rest(Duration::from_secs(10)).await;
        assert!(
            after.is_empty(),
            "messages after the answer to {}: {after:?}",
            self.method
        );
        (before, answer)
    }
}

impl Client {
    fn headers(&self) -> reqwest::header::HeaderMap {
        use reqwest::header::{HeaderMap, HeaderValue};
        let mut headers = HeaderMap::new();
        headers.insert("content-type", HeaderValue::from_static("application/json"));
        headers.insert(
            "accept",
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        headers.insert(
            "mcp-protocol-version",
            HeaderValue::from_str(&self.version).unwrap(),
        );
        if let Some(s) = &self.session {
            headers.insert("mcp-session-id", HeaderValue::from_str(s).unwrap());
        }
        headers
    }

    /// A fresh request id of this client.
    pub fn fresh_id(&self) -> Value {
        json!(self.next_id.fetch_add(1, Ordering::Relaxed))
    }

    /// Starts a request (POST sent in the background) whose answer is read as it streams.
    pub fn start(&self, method: &str, params: Value) -> Call {
        self.start_with_id(self.fresh_id(), method, params)
    }

    pub fn start_with_id(&self, id: Value, method: &str, params: Value) -> Call {
        let mut body = json!({"jsonrpc": "2.0", "id": id, "method": method});
        if !params.is_null() {
            body["params"] = params;
        }
        let request = self
            .http
            .post(&self.url)
            .headers(self.headers())
            .body(body.to_string());
        let handle = tokio::spawn(async move { request.send().await.unwrap() });
        let mut messages = Messages::pending(Some(handle), Arc::clone(&self.schemas));
        messages.expect_answer(&id, method);
        Call {
            id,
            method: method.to_owned(),
            messages,
        }
    }

    /// `tools/call` of `name` with `arguments`, answer read as it streams.
    pub fn start_tool(&self, name: &str, arguments: Value) -> Call {
        self.start("tools/call", json!({"name": name, "arguments": arguments}))
    }

    /// Opens this session's GET event stream.
    pub async fn events(&self) -> Messages {
        let mut headers = self.headers();
        headers.remove("content-type");
        headers.insert(
            "accept",
            reqwest::header::HeaderValue::from_static("text/event-stream"),
        );
        let response = self
            .http
            .get(&self.url)
            .headers(headers)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "GET stream refused");
        Messages::from_response(response, Arc::clone(&self.schemas))
    }

    /// POSTs a host message that gets no answer (notification, response): must be 202.
    pub async fn send_accepted(&self, body: &Value) {
        let response = self.post(body).await;
        assert_eq!(response.status(), 202, "not accepted: {body}");
    }

    pub async fn notify(&self, method: &str, params: Value) {
        self.send_accepted(&json!({"jsonrpc": "2.0", "method": method, "params": params}))
            .await;
    }

    /// Answers a server request.
    pub async fn respond(&self, id: &Value, result: Value) {
        self.send_accepted(&json!({"jsonrpc": "2.0", "id": id, "result": result}))
            .await;
    }

    /// Refuses a server request.
    pub async fn respond_error(&self, id: &Value, error: Value) {
        self.send_accepted(&json!({"jsonrpc": "2.0", "id": id, "error": error}))
            .await;
    }

    /// Ends the session (DELETE); returns the HTTP status.
    pub async fn delete(&self) -> reqwest::StatusCode {
        self.http
            .delete(&self.url)
            .headers(self.headers())
            .send()
            .await
            .unwrap()
            .status()
    }

    /// Calls a tool and returns the text of its first content block, asserting no other message
    /// came on the request's stream and the result is not an error.
    pub async fn tool_text(&self, name: &str, arguments: Value) -> String {
        let (before, answer) = self.start_tool(name, arguments).finish().await;
        assert!(before.is_empty(), "{name}: unexpected messages {before:?}");
        let result = &answer["result"];
        assert!(
            result.is_object() && result["isError"] != true,
            "{name} failed: {answer}"
        );
        result["content"][0]["text"].as_str().unwrap().to_owned()
    }
}

// ---------------------------------------------------------------------------------------------
// A host on the 2024-11-05 HTTP+SSE transport

/// A legacy host: `GET /sse`, then every message POSTed to the announced endpoint.
pub struct LegacyHost {
    http: reqwest::Client,
    /// The absolute URL of the endpoint the stream announced.
    pub endpoint: String,
    pub events: Messages,
    next_id: AtomicU64,
}

impl LegacyHost {
    /// Opens `/sse` next to `mcp_url` and reads the `endpoint` event (it must come first).
    pub async fn open(mcp_url: &str, version: &str) -> Self {
        let base = mcp_url.strip_suffix("/mcp").unwrap();
        let http = reqwest::Client::new();
        let response = http
            .get(format!("{base}/sse"))
            .header("accept", "text/event-stream")
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        let mut reader = SseReader::new(response);
        let first = reader
            .next_event(Duration::from_secs(10))
            .await
            .expect("no endpoint event")
            .expect("the stream ended");
        assert_eq!(first.event.as_deref(), Some("endpoint"), "{first:?}");
        assert!(
            first.data.starts_with("/messages?sessionId="),
            "endpoint: {}",
            first.data
        );
        Self {
            http,
            endpoint: format!("{base}{}", first.data),
            events: Messages::from_sse(reader, Schemas::get(version)),
            next_id: AtomicU64::new(1),
        }
    }

    /// POSTs one message to the endpoint; returns the status.
    pub async fn post(&self, body: &Value) -> reqwest::StatusCode {
        self.http
            .post(&self.endpoint)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap()
            .status()
    }

    /// Sends a request (202) and reads the stream to its answer: the messages before it, and it.
    pub async fn request(&mut self, method: &str, params: Value) -> (Vec<Value>, Value) {
        let id = json!(self.next_id.fetch_add(1, Ordering::Relaxed));
        let mut body = json!({"jsonrpc": "2.0", "id": id, "method": method});
        if !params.is_null() {
            body["params"] = params;
        }
        self.events.expect_answer(&id, method);
        assert_eq!(self.post(&body).await, 202, "{method} not accepted");
        self.events.until_answer(&id).await
    }
}

// ---------------------------------------------------------------------------------------------
// Fault tests: stopping the daemon without blocking the test's runtime, its memory

impl Daemon {
    /// Sends SIGTERM and returns at once (the daemon drains, then exits; see `wait_exit`).
    pub fn terminate(&self) {
        if let Some(child) = &self.child {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(child.id().to_string())
                .status();
        }
    }

    /// Waits without blocking the runtime until the daemon exits: its exit status, or `None` if
    /// it still runs after `timeout` (it is then killed when dropped).
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            let child = self.child.as_mut()?;
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A `/proc/PID/status` memory field in KiB (`VmRSS`: resident now, `VmHWM`: peak resident).
pub fn proc_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}
