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

/// A TOML `[upstreams.NAME]` table running an npm server through `npx -y`.
pub fn npx_upstream(name: &str, package_and_args: &[&str]) -> String {
    let mut args = vec!["-y".to_owned()];
    args.extend(package_and_args.iter().map(|a| (*a).to_owned()));
    format!(
        "[upstreams.{name}]\ncommand = \"npx\"\nargs = {}\nstartup_timeout = \"300s\"\n",
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
            .env("MCPMUX_LOG", "info,mcpmux=debug")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(line)) = lines.next() {
                let _ = tx.send(line);
            }
            for _ in lines {}
        });
        let mut daemon = Self {
            child: Some(child),
            url: String::new(),
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
        daemon
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
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
