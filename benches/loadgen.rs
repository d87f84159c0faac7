//! Load generator for mcpmux: what does going through the gateway cost per call?
//!
//! It times `tools/call` of the `echo` tool of the test upstream (`mcpmux-test-upstream`), closed
//! loop, with C concurrent callers each keeping one call in flight, in two modes:
//! `direct` to one upstream child over stdio (newline-delimited JSON-RPC, answers matched by id),
//! and `mcpmux` through the daemon (tool `up1__echo`) over MCP Streamable HTTP, with one
//! keep-alive HTTP/1.1 connection pool. The daemon listens on 127.0.0.1 and runs a temporary
//! config with U copies of the test upstream, `up1..upU`, its state (the audit store) in the
//! temporary directory and its admin API on an ephemeral 127.0.0.1 port.
//!
//! `--audit` chooses the daemon's audit log: `off` (`[audit] enabled = false`), `on` (the
//! default settings: durability `batch`), or `both` (default): the `mcpmux` mode then runs twice,
//! audit off and then on, each with a fresh daemon, and the difference is printed: p50, p99 and
//! the gateway's CPU per call (`--repeat N`: N such pairs, alternating; the difference of the
//! medians, and pair by pair the CPU difference and throughput ratio with their medians). For
//! each `mcpmux` run, the audit records the daemon dropped (queue full) are read from its admin
//! API (`GET /status`, `audit.dropped`) after the measured calls.
//!
//! `--otlp` has the daemon export traces and metrics over OTLP/gRPC (`[telemetry]`) to a receiver
//! in this process (the telemetry tests' `tests/observability/telemetry/otlp.rs`) that keeps the spans it gets: what exporting costs a forwarded call. The spans
//! received are reported (`otlp_spans`; two per call, the host request's and the upstream's).
//! `--audit-export live|stopped` has it also export its audit records over OTLP (`[audit] export =
//! "otlp"`): to that receiver (`live`, the records received reported as `otlp_audit_records`), or
//! to a port where nothing listens (`stopped`): a call's cost must be the same either way. Without
//! `--otlp` only the audit records are exported (`traces = false`, `metrics = false`).
//!
//! `--rate R` makes it open loop: call i starts at i/R s (or when a caller is free), which measures
//! latency at a load the machine carries rather than at saturation. tokio's timer has 1 ms
//! granularity, so the calls due within one millisecond start together: the load comes in small
//! bursts. Each call is timed from when it starts.
//!
//! Reported per mode, for the measured calls (after a warm-up): throughput (calls/s), latency
//! (p50/p90/p99 µs); for `mcpmux` also the gateway's own CPU per call (utime+stime of the daemon
//! from `/proc/<pid>/stat`, upstreams excluded) and its RSS (`VmRSS`) after the run with U
//! upstreams; and the p50 ratio mcpmux/direct (in JSON, `p50_ratio_mcpmux_over_direct` is for the
//! default config, audit on, when it ran). Each answer must be a result (not an error nor
//! `isError`) echoing the argument; over 1% failed calls abort the run. The processes it starts
//! are always stopped (the daemon with SIGTERM), on errors and Ctrl-C too. Run it with:
//!
//! ```text
//! cargo bench --bench loadgen -- [--calls N (20000)] [--concurrency C (16)] [--warmup N (1000)]
//!     [--rate R (0: closed loop)] [--upstreams U (1)] [--mode direct|mcpmux|both]
//!     [--audit on|off|both] [--repeat N (1)] [--otlp] [--audit-export off|live|stopped] [--json]
//!     [--mcpmux PATH] [--upstream-cmd "CMD ARGS..."] [--upstream-url URL] [--arguments JSON]
//!     [--era handshake|2026-07-28|both] [--mode idle [--idle-seconds S (30)] [--consoles N (1)]]
//! ```
//!
//! `--era 2026-07-28` makes the host side of the `mcpmux` runs stateless: no `initialize`, each
//! request with its `_meta` envelope and the `MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name`
//! headers (what a 2026-07-28 call costs against a handshake session's); `--era both` runs each
//! era in turn (within each repeat, and each audit setting) and compares them as `--audit both`
//! compares the audit log's settings. Pairs at a fixed `--rate` compare the CPU a call costs
//! at the same load; closed loop, a faster run also batches more per wake-up.
//!
//! `--mode idle` makes no calls: it measures the daemon's CPU at rest (audit on, U upstreams) for
//! `--idle-seconds`, then signs `--consoles` console sessions in, opens for each the streams an
//! open console page holds (`events`, `audit/tail` below the session's `/console/s/<key>/`) and
//! measures again: what an open console costs the daemon at idle (`idle_cpu_us_per_s` without and
//! with them).
//!
//! `cargo bench` builds release binaries (this package's two are the defaults). `--json` prints
//! one JSON object on stdout instead of the table. The load generator shares the machine's cores
//! with the processes it measures.

use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};
use std::{collections::HashMap, fmt::Display, io::BufRead, io::BufReader};
use std::{path::Path, path::PathBuf, time::Duration, time::Instant};

use clap::Parser;
use futures_util::StreamExt;
use reqwest::header::{HeaderMap, HeaderValue};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
use tokio::signal::unix::{SignalKind, signal};
use tokio::{process::ChildStdin, sync::oneshot, time::timeout};

type Res<T> = Result<T, String>;

const PROTO: &str = "2025-11-25";
const CALL_TIMEOUT: Duration = Duration::from_secs(30);
const STARTUP: Duration = Duration::from_secs(60);
const INITIALIZED: &str = r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#;
/// JSON-RPC ids, unique in the process (0 is the `initialize`).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

#[derive(Parser, Debug)]
#[command(about = "mcpmux load generator: tools/call echo, direct over stdio vs. via mcpmux")]
struct Args {
    /// Measured calls per mode.
    #[arg(long, default_value_t = 20_000)]
    calls: u64,
    /// Concurrent callers, each keeping one call in flight.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Open loop: start calls at this many per second (each taken by a free caller); 0 = closed
    /// loop.
    #[arg(long, default_value_t = 0.0)]
    rate: f64,
    /// Unmeasured calls before the measured ones.
    #[arg(long, default_value_t = 1_000)]
    warmup: u64,
    /// Copies of the test upstream in the daemon (up1..upU; calls go to up1).
    #[arg(long, default_value_t = 1)]
    upstreams: usize,
    /// `idle`: no calls; the daemon's CPU at rest, without and then with open consoles.
    #[arg(long, default_value = "both", value_parser = ["direct", "mcpmux", "both", "idle"])]
    mode: String,
    /// `--mode idle`: seconds each of the two idle windows lasts.
    #[arg(long, default_value_t = 30)]
    idle_seconds: u64,
    /// `--mode idle`: console sessions open in the second window, each holding what an open
    /// page holds (the overview's live stream and the audit page's live tail).
    #[arg(long, default_value_t = 1)]
    consoles: usize,
    /// The daemon's audit log: off, on (default settings), or both (two mcpmux runs).
    #[arg(long, default_value = "both", value_parser = ["on", "off", "both"])]
    audit: String,
    /// Runs of the `mcpmux` mode (audit off and on alternating with `--audit both`); the audit
    /// difference compares the medians.
    #[arg(long, default_value_t = 1)]
    repeat: usize,
    /// Export traces and metrics over OTLP/gRPC to a span-counting sink in this process.
    #[arg(long)]
    otlp: bool,
    /// Also export the audit records over OTLP: to the receiver (`live`), or to a port nobody
    /// listens on (`stopped`).
    #[arg(long, default_value = "off", value_parser = ["off", "live", "stopped"])]
    audit_export: String,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    json: bool,
    #[arg(long, default_value = env!("CARGO_BIN_EXE_mcpmux"))]
    mcpmux: PathBuf,
    /// The upstream command and its arguments (`--name NAME` is appended).
    #[arg(long, default_value = env!("CARGO_BIN_EXE_mcpmux-test-upstream"))]
    upstream_cmd: String,
    /// A remote upstream's Streamable HTTP URL instead of `--upstream-cmd`: `direct` calls its
    /// `echo` over HTTP, `mcpmux` fronts it as `up1` (with `--upstreams` - 1 stdio copies beside).
    #[arg(long)]
    upstream_url: Option<String>,
    /// The `arguments` of each `echo` call (JSON); its answer must mention "hello".
    #[arg(long, default_value = r#"{"text":"hello"}"#)]
    arguments: String,
    /// The protocol era of the host side of `mcpmux` runs: `handshake` (an `initialize`d
    /// 2025-11-25 session), `2026-07-28` (stateless: each request with its `_meta` envelope and
    /// mirrored headers, no session), or `both` (one run of each, alternating).
    #[arg(long, default_value = "handshake", value_parser = ["handshake", "2026-07-28", "both"])]
    era: String,
    /// An mcpmux (or a load balancer in front of replicas) already running at this `/mcp` URL:
    /// measured as it is, with `--upstreams` upstreams `up1..upU` (`benches/cluster.sh`); no
    /// daemon is started, so no gateway CPU or RSS is reported.
    #[arg(long)]
    target: Option<String>,
}

/// `--arguments`, as given.
static ARGUMENTS: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// The revision a stateless host names on each request.
const MODERN: &str = "2026-07-28";
/// The `_meta` envelope of a stateless request.
const ENVELOPE: &str = r#"{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/clientInfo":{"name":"loadgen","version":"0"}}"#;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// `map_err` helper: prefixes an error with what was being done.
fn ctx<E: Display>(what: impl Display) -> impl FnOnce(E) -> String {
    move |e| format!("{what}: {e}")
}

fn request(id: u64, method: &str, params: Value) -> Vec<u8> {
    let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
    msg.to_string().into_bytes()
}

fn initialize() -> Vec<u8> {
    let client = json!({"name": "loadgen", "version": "0"});
    let params = json!({"protocolVersion": PROTO, "capabilities": {}, "clientInfo": client});
    request(0, "initialize", params)
}

/// What a `tools/call` body holds after its id, written once per target: the params of a call
/// of `tool`, with the stateless envelope when `modern`. Each call then writes only its id, so
/// building a request costs the load generator the same in either era.
fn call_rest(tool: &str, modern: bool) -> String {
    let arguments = ARGUMENTS
        .get()
        .map_or(r#"{"text":"hello"}"#, String::as_str);
    let meta = match modern {
        true => format!(r#","_meta":{ENVELOPE}"#),
        false => String::new(),
    };
    format!(
        r#","method":"tools/call","params":{{"name":"{tool}","arguments":{arguments}{meta}}}}}"#
    )
}

/// A `tools/call` body: call `id` with the rest written by [`call_rest`].
fn call_body(id: u64, rest: &str) -> Vec<u8> {
    const START: &[u8] = br#"{"jsonrpc":"2.0","id":"#;
    let mut number = itoa::Buffer::new();
    let id = number.format(id).as_bytes();
    // One byte more for the newline a stdio upstream's line ends with.
    let mut body = Vec::with_capacity(START.len() + id.len() + rest.len() + 1);
    body.extend_from_slice(START);
    body.extend_from_slice(id);
    body.extend_from_slice(rest.as_bytes());
    body
}

/// The id of a JSON-RPC response (`None` for anything else, e.g. requests from the server).
fn response_id(msg: &[u8]) -> Option<u64> {
    let m: Value = serde_json::from_slice(msg).ok()?;
    m.get("method").is_none().then_some(m.get("id")?.as_u64()?)
}

/// Ok if `answer` is a successful result (not `isError`) and, if `echo`, mentions our argument.
/// Read without building a tree of it (what a result holds besides `isError` is skipped), so a
/// larger answer costs the load generator little more.
fn check(answer: &[u8], echo: bool) -> Res<()> {
    #[derive(serde::Deserialize)]
    struct Response {
        result: Option<Outcome>,
        error: Option<serde::de::IgnoredAny>,
    }
    #[derive(serde::Deserialize)]
    struct Outcome {
        #[serde(rename = "isError")]
        is_error: Option<bool>,
    }
    let ok = match serde_json::from_slice::<Response>(answer) {
        Ok(Response {
            result: Some(outcome),
            error: None,
        }) => outcome.is_error != Some(true),
        _ => false,
    };
    if ok && (!echo || memchr::memmem::find(answer, b"hello").is_some()) {
        return Ok(());
    }
    let text = String::from_utf8_lossy(&answer[..answer.len().min(500)]);
    Err(format!("unexpected answer: {}", text.trim()))
}

// ------------------------------------------------------------------ direct (stdio) client

type Waiters = HashMap<u64, oneshot::Sender<Vec<u8>>>;

struct Direct {
    stdin: tokio::sync::Mutex<ChildStdin>,
    /// `None` once the upstream's stdout is closed.
    pending: Arc<Mutex<Option<Waiters>>>,
}

impl Direct {
    /// Spawns the upstream; the child is killed when the returned handle is dropped.
    fn spawn(cmd: &[String]) -> Res<(Direct, tokio::process::Child)> {
        let mut child = tokio::process::Command::new(&cmd[0])
            .args(&cmd[1..])
            .args(["--name", "up1"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(ctx(format!("cannot start {:?}", cmd[0])))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err("upstream pipes missing".into());
        };
        let pending = Arc::new(Mutex::new(Some(Waiters::new())));
        let p = pending.clone();
        tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(stdout).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                let id = response_id(line.as_bytes());
                let waiter = id.and_then(|id| lock(&p).as_mut()?.remove(&id));
                if let Some(w) = waiter {
                    let _ = w.send(line.into_bytes());
                }
            }
            lock(&p).take(); // fails every pending and later call
        });
        let stdin = tokio::sync::Mutex::new(stdin);
        Ok((Direct { stdin, pending }, child))
    }

    async fn send(&self, mut msg: Vec<u8>) -> Res<()> {
        msg.push(b'\n');
        let sent = self.stdin.lock().await.write_all(&msg).await;
        sent.map_err(ctx("writing to the upstream"))
    }

    async fn request(&self, id: u64, msg: Vec<u8>) -> Res<Vec<u8>> {
        let (tx, rx) = oneshot::channel();
        match lock(&self.pending).as_mut() {
            Some(waiters) => waiters.insert(id, tx),
            None => return Err("upstream closed its stdout".into()),
        };
        self.send(msg).await?;
        match timeout(CALL_TIMEOUT, rx).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(_)) => Err("upstream closed its stdout".into()),
            Err(_) => Err(format!("no answer to id {id} in {CALL_TIMEOUT:?}")),
        }
    }
}

// ------------------------------------------------------------------ Streamable HTTP client

struct Http {
    client: reqwest::Client,
    url: String,
    /// The session's id, as the header value each request carries.
    session: Option<HeaderValue>,
    /// A stateless (2026-07-28) host: no session, the method and name mirrored in headers.
    modern: bool,
}

impl Http {
    /// POSTs one message; returns the session header and, for a request (`id` given), the
    /// JSON-RPC response with that id (from a JSON body or from an SSE stream). A stateless
    /// host's request carries `mirror` (its method and name) as headers. Header names and
    /// values are constants (the session's made once), so neither era spends an allocation on
    /// them.
    async fn post(
        &self,
        body: Vec<u8>,
        id: Option<u64>,
        mirror: (&'static str, Option<&'static str>),
    ) -> Res<(Option<String>, Vec<u8>)> {
        use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderName};
        const VERSION: HeaderName = HeaderName::from_static("mcp-protocol-version");
        let mut headers = HeaderMap::with_capacity(5);
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        let accept = HeaderValue::from_static("application/json, text/event-stream");
        headers.insert(ACCEPT, accept);
        if let Some(s) = &self.session {
            headers.insert(HeaderName::from_static("mcp-session-id"), s.clone());
            headers.insert(VERSION, HeaderValue::from_static(PROTO));
        }
        if self.modern {
            headers.insert(VERSION, HeaderValue::from_static(MODERN));
            let method = HeaderValue::from_static(mirror.0);
            headers.insert(HeaderName::from_static("mcp-method"), method);
            if let Some(name) = mirror.1 {
                let name = HeaderValue::from_static(name);
                headers.insert(HeaderName::from_static("mcp-name"), name);
            }
        }
        let req = self.client.post(&self.url).headers(headers).body(body);
        let resp = req.send().await.map_err(ctx("POST"))?;
        let status = resp.status();
        let header = |name| resp.headers().get(name).and_then(|v| v.to_str().ok());
        let session = header("mcp-session-id").map(str::to_owned);
        let sse = header("content-type").is_some_and(|t| t.starts_with("text/event-stream"));
        if !status.is_success() {
            let text = resp.text().await.unwrap_or_default();
            return Err(format!("HTTP {status}: {}", text.trim()));
        }
        let Some(id) = id.filter(|_| sse) else {
            let body = resp.bytes().await.map_err(ctx("reading the body"))?;
            return Ok((session, body.to_vec()));
        };
        // SSE: an event ends with a blank line; its `data:` lines are joined (JSON whitespace).
        let (mut stream, mut buf, mut data) = (resp.bytes_stream(), Vec::new(), Vec::new());
        while let Some(chunk) = stream.next().await {
            buf.extend_from_slice(&chunk.map_err(ctx("reading SSE"))?);
            while let Some(pos) = buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = buf.drain(..=pos).collect();
                let line = line.trim_ascii_end();
                if let Some(rest) = line.strip_prefix(b"data:") {
                    data.extend_from_slice(rest);
                    data.push(b'\n');
                } else if line.is_empty() && response_id(&data) == Some(id) {
                    return Ok((session, data));
                } else if line.is_empty() {
                    data.clear();
                }
            }
        }
        Err(format!("SSE stream ended without the answer to {id}"))
    }

    /// A host of `url`: an initialized session, or (`modern`) a stateless host.
    async fn connect(url: String, conc: usize, modern: bool) -> Res<Http> {
        let builder = reqwest::Client::builder().http1_only().no_proxy();
        let client = builder.pool_max_idle_per_host(conc).timeout(CALL_TIMEOUT);
        let client = client.build().map_err(ctx("client"))?;
        let mut h = Http {
            client,
            url,
            session: None,
            modern,
        };
        if modern {
            return Ok(h);
        }
        let init = h.post(initialize(), Some(0), ("initialize", None)).await;
        let (session, answer) = init.map_err(ctx("initialize"))?;
        check(&answer, false).map_err(ctx("initialize"))?;
        h.session = session.and_then(|s| HeaderValue::from_str(&s).ok());
        let initialized = ("notifications/initialized", None);
        let sent = h.post(INITIALIZED.into(), None, initialized).await;
        sent.map_err(ctx("notifications/initialized"))?;
        Ok(h)
    }

    /// Polls `tools/list` (all pages) until the echo tool of each of the `n` upstreams is
    /// listed: every upstream has started and the daemon has merged its catalog, so none of
    /// that work falls into a measured phase. A handshake-era host's `initialize` waits for
    /// upstreams still starting; a stateless host has no such step, so waiting for the first
    /// one alone could charge a slow upstream's start to the stateless era's calls.
    async fn wait_for_upstreams(&self, n: usize) -> Res<()> {
        let deadline = Instant::now() + STARTUP;
        let mut missing: Vec<String> = (1..=n).map(|i| format!("up{i}__echo")).collect();
        let mut error = String::new();
        while Instant::now() < deadline {
            let mut listed = std::collections::HashSet::new();
            let mut cursor = None::<String>;
            for _page in 0..10_000 {
                let id = NEXT_ID.fetch_add(1, Relaxed);
                let mut params = cursor.map_or_else(|| json!({}), |c| json!({"cursor": c}));
                if self.modern {
                    params["_meta"] = serde_json::from_str(ENVELOPE).unwrap_or_default();
                }
                let body = request(id, "tools/list", params);
                let answer = self.post(body, Some(id), ("tools/list", None)).await;
                let answer =
                    answer.and_then(|(_, a)| serde_json::from_slice(&a).map_err(ctx("JSON")));
                let msg: Value = answer.unwrap_or_else(|e| json!({ "error": e }));
                if let Some(e) = msg.get("error") {
                    error = format!(" (last error: {e})");
                }
                let tools = msg["result"]["tools"].as_array().into_iter().flatten();
                listed.extend(tools.filter_map(|t| t["name"].as_str().map(str::to_owned)));
                cursor = msg["result"]["nextCursor"].as_str().map(str::to_owned);
                if cursor.is_none() {
                    break;
                }
            }
            missing.retain(|tool| !listed.contains(tool));
            if missing.is_empty() {
                return Ok(());
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Err(format!(
            "after {STARTUP:?}, tools/list lacks {missing:?}{error}"
        ))
    }
}

// ------------------------------------------------------------------ daemon process

/// The running daemon; stopped (SIGTERM, then SIGKILL after 10 s) when dropped.
struct Daemon {
    child: Child,
    /// Holds the config and the daemon's stderr.
    dir: tempfile::TempDir,
}

/// The URL after `marker` in a line of the daemon's stdout.
fn url_after(line: &str, marker: &str) -> Option<String> {
    let rest = &line[line.find(marker)?..];
    let rest = &rest[rest.find("http://")?..];
    let end = |c: char| c.is_whitespace() || "\"',\x1b".contains(c);
    rest.split(end).next().map(str::to_owned)
}

/// The URL in the daemon's `listening on http://127.0.0.1:PORT/mcp` line.
fn listening_url(line: &str) -> Option<String> {
    url_after(line, "listening on ")
}

/// The URL in the daemon's `admin on http://127.0.0.1:PORT` line (its second line).
fn admin_url(line: &str) -> Option<String> {
    url_after(line, "admin on ")
}

/// What the daemon's stdout announces.
enum Announced {
    Url(String),
    Admin(String),
}

impl Daemon {
    /// Starts `mcpmux serve` with `n` upstreams running `upstream` and the audit log on or off;
    /// returns it, its URL and its admin URL (if it announced one).
    async fn start(
        mcpmux: &Path,
        upstream: &[String],
        remote: Option<&str>,
        n: usize,
        audit: bool,
        (otlp, audit_export, otlp_traces): (Option<&str>, bool, bool),
    ) -> Res<(Daemon, String, Option<String>)> {
        let dir = tempfile::tempdir().map_err(ctx("tempdir"))?;
        // JSON strings are valid TOML basic strings.
        let q = |s: &str| serde_json::to_string(s).unwrap_or_default();
        let state = dir.path().join("state").display().to_string();
        // Top-level keys come before any table.
        let mut config = format!("state_dir = {}\n\n", q(&state));
        config += "[server]\nlisten = \"127.0.0.1:0\"\n\n[admin]\nlisten = \"127.0.0.1:0\"\n";
        if !audit {
            config += "\n[audit]\nenabled = false\n";
        } else if audit_export {
            config += "\n[audit]\nexport = \"otlp\"\n";
        }
        if let Some(endpoint) = otlp {
            config += &format!(
                "\n[telemetry]\notlp_endpoint = {}\notlp_protocol = \"grpc\"\n",
                q(endpoint)
            );
            if audit_export && !otlp_traces {
                // The audit export alone: no traces, no metrics.
                config += "traces = false\nmetrics = false\n";
            }
        }
        if let Some(url) = remote {
            config += &format!("\n[upstreams.up1]\nurl = {}\n", q(url));
        }
        for i in (1 + usize::from(remote.is_some()))..=n {
            let mut args: Vec<String> = upstream[1..].iter().map(|a| q(a)).collect();
            args.extend([q("--name"), q(&format!("up{i}"))]);
            let (cmd, args) = (q(&upstream[0]), args.join(", "));
            config += &format!("\n[upstreams.up{i}]\ncommand = {cmd}\nargs = [{args}]\n");
        }
        let config_path = dir.path().join("mcpmux.toml");
        std::fs::write(&config_path, config).map_err(ctx("writing config"))?;
        let stderr = std::fs::File::create(dir.path().join("stderr"));
        let stderr = stderr.map_err(ctx("stderr file"))?;
        let mut child = Command::new(mcpmux)
            .args(["serve", "--config"])
            .arg(&config_path)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .map_err(ctx(format!("cannot start {}", mcpmux.display())))?;
        let stdout = child.stdout.take().ok_or("no stdout");
        let mut daemon = Daemon { child, dir };
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let lines = BufReader::new(stdout?).lines().map_while(Result::ok);
        std::thread::spawn(move || {
            // Keeps draining stdout until the daemon exits.
            for line in lines {
                let announced = listening_url(&line).map(Announced::Url);
                let announced = announced.or_else(|| admin_url(&line).map(Announced::Admin));
                announced.map(|a| tx.send(a));
            }
        });
        let mut admin = None;
        let deadline = tokio::time::Instant::now() + STARTUP;
        let url = loop {
            let why = match tokio::time::timeout_at(deadline, rx.recv()).await {
                Ok(Some(Announced::Url(u))) => break u,
                Ok(Some(Announced::Admin(a))) => {
                    admin = Some(a);
                    continue;
                }
                Ok(None) => format!("mcpmux exited ({:?}) without its URL", daemon.stop()),
                Err(_) => format!("mcpmux printed no URL in {STARTUP:?}"),
            };
            return Err(format!("{why}{}", daemon.stderr_tail()));
        };
        // The admin line follows the URL line at once, if the admin API could listen.
        while admin.is_none() {
            match timeout(Duration::from_secs(5), rx.recv()).await {
                Ok(Some(Announced::Admin(a))) => admin = Some(a),
                Ok(Some(Announced::Url(_))) => {}
                Ok(None) | Err(_) => break,
            }
        }
        Ok((daemon, url, admin))
    }

    fn stderr_tail(&self) -> String {
        let text = std::fs::read_to_string(self.dir.path().join("stderr"));
        let text = text.unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(20)..].join("\n");
        format!("\n--- mcpmux stderr (tail) ---\n{tail}")
    }

    fn stop(&mut self) -> Option<ExitStatus> {
        if let Ok(Some(status)) = self.child.try_wait() {
            return Some(status);
        }
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            match self.child.try_wait() {
                Ok(None) => std::thread::sleep(Duration::from_millis(20)),
                done => return done.ok().flatten(),
            }
        }
        eprintln!("loadgen: mcpmux did not exit within 10 s of SIGTERM; killing it");
        let _ = self.child.kill();
        self.child.wait().ok()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
    }
}

/// utime+stime of a process, in µs.
fn cpu_us(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let mut fields = stat[stat.rfind(')')? + 1..].split_whitespace(); // from field 3 on
    let utime: u64 = fields.nth(11)?.parse().ok()?;
    let stime: u64 = fields.next()?.parse().ok()?;
    let tck = Command::new("getconf").arg("CLK_TCK").output().ok();
    let tck = tck.and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok());
    Some((utime + stime) as f64 * 1e6 / tck.filter(|&t: &f64| t > 0.0).unwrap_or(100.0))
}

/// The CPU time of a process's live threads, in µs, to the nanosecond (`/proc/<pid>/task/*/
/// schedstat`): what an idle window needs, where `cpu_us`'s 10 ms ticks are too coarse.
fn cpu_us_fine(pid: u32) -> Option<f64> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).ok()?;
    let ns: u64 = (tasks.filter_map(Result::ok))
        .filter_map(|task| std::fs::read_to_string(task.path().join("schedstat")).ok())
        .filter_map(|stat| stat.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    Some(ns as f64 / 1e3)
}

fn rss_mib(pid: u32) -> Option<f64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

// ------------------------------------------------------------------ load

/// Where the load goes, the tool it calls there, and what each call's body holds after its id.
struct Target {
    via: Via,
    tool: &'static str,
    rest: String,
}

enum Via {
    Direct(Direct),
    /// A remote upstream called directly over Streamable HTTP.
    DirectHttp(Http),
    Http(Http),
}

impl Target {
    fn new(via: Via) -> Self {
        let (tool, modern) = match &via {
            Via::Http(h) => ("up1__echo", h.modern),
            Via::Direct(_) | Via::DirectHttp(_) => ("echo", false),
        };
        let rest = call_rest(tool, modern);
        Self { via, tool, rest }
    }

    async fn call(&self) -> Res<()> {
        let id = NEXT_ID.fetch_add(1, Relaxed);
        let body = call_body(id, &self.rest);
        let answer = match &self.via {
            Via::Direct(d) => d.request(id, body).await?,
            Via::DirectHttp(h) | Via::Http(h) => {
                h.post(body, Some(id), ("tools/call", Some(self.tool)))
                    .await?
                    .1
            }
        };
        check(&answer, true)
    }
}

/// `total` calls by `conc` callers, closed loop or (`rate` > 0) each call started at its slot of
/// an even schedule; fails if more than 1% fail. Returns the sorted latencies (µs) of the
/// successful calls, the number of failed ones and the elapsed time.
async fn run_phase(
    t: &Arc<Target>,
    total: u64,
    conc: usize,
    rate: f64,
) -> Res<(Vec<u64>, u64, f64)> {
    let (done, errors) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let first_error: Arc<Mutex<Option<String>>> = Arc::default();
    let (limit, start) = (total / 100, Instant::now());
    let mut tasks = Vec::with_capacity(conc);
    for _ in 0..conc {
        let (t, done, errors) = (t.clone(), done.clone(), errors.clone());
        let first = first_error.clone();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            loop {
                let i = done.fetch_add(1, Relaxed);
                if i >= total || errors.load(Relaxed) > limit {
                    break;
                }
                if rate > 0.0 {
                    let due = start + Duration::from_secs_f64(i as f64 / rate);
                    tokio::time::sleep_until(due.into()).await;
                }
                let begin = Instant::now();
                if let Err(e) = t.call().await {
                    errors.fetch_add(1, Relaxed);
                    lock(&first).get_or_insert(e);
                } else {
                    lat.push(begin.elapsed().as_micros() as u64);
                }
            }
            lat
        }));
    }
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.map_err(ctx("caller task"))?);
    }
    let (elapsed, errors) = (start.elapsed().as_secs_f64(), errors.load(Relaxed));
    if errors > limit {
        let first = lock(&first_error).take().unwrap_or_default();
        let what = format!("{errors} of {total} calls failed (> 1%), first");
        return Err(format!("{what}: {first}"));
    }
    latencies.sort_unstable();
    Ok((latencies, errors, elapsed))
}

/// Warm-up, then the measured calls, between two calls of `probe`; returns the report.
async fn measure(mode: &str, t: Target, args: &Args, mut probe: impl FnMut()) -> Res<Value> {
    let (t, conc) = (Arc::new(t), args.concurrency);
    let warmup = run_phase(&t, args.warmup, conc, args.rate).await;
    warmup.map_err(ctx("warm-up"))?;
    eprintln!("loadgen: {mode}: {} calls, concurrency {conc}", args.calls);
    probe();
    let measured = run_phase(&t, args.calls, conc, args.rate).await;
    probe();
    let (lat, errors, secs) = measured.map_err(ctx("measured calls"))?;
    let n = lat.len();
    let rank = |q: f64| ((q * n as f64).ceil() as usize).saturating_sub(1);
    let pct = |q: f64| lat.get(rank(q)).copied();
    let calls_per_s = (n as f64 / secs * 10.0).round() / 10.0;
    let (p50, p90, p99) = (pct(0.50), pct(0.90), pct(0.99));
    let rate = (args.rate > 0.0).then_some(args.rate);
    let report = json!({"mode": mode, "calls": n as u64 + errors, "concurrency": conc, "rate": rate,
        "errors": errors, "elapsed_s": secs, "calls_per_s": calls_per_s,
        "p50_us": p50, "p90_us": p90, "p99_us": p99});
    Ok(report)
}

async fn run_direct(args: &Args, cmd: &[String]) -> Res<Value> {
    if let Some(url) = &args.upstream_url {
        eprintln!("loadgen: direct: {url} over Streamable HTTP");
        let http = Http::connect(url.clone(), args.concurrency, false).await;
        let http = http.map_err(ctx("direct: initialize"))?;
        let report = measure("direct", Target::new(Via::DirectHttp(http)), args, || ()).await;
        return report.map_err(ctx("direct"));
    }
    eprintln!("loadgen: direct: starting {}", cmd.join(" "));
    let (direct, mut child) = Direct::spawn(cmd)?;
    let init = async {
        check(&direct.request(0, initialize()).await?, false)?;
        direct.send(INITIALIZED.into()).await
    };
    let init = timeout(STARTUP, init).await;
    let init = init.unwrap_or(Err("timed out".into()));
    init.map_err(ctx("direct: initialize"))?;
    let report = measure("direct", Target::new(Via::Direct(direct)), args, || ()).await;
    let report = report.map_err(ctx("direct"))?;
    // `direct` is dropped, so the upstream's stdin is closed and it should exit.
    if timeout(Duration::from_secs(5), child.wait()).await.is_err() {
        let _ = child.kill().await;
    }
    Ok(report)
}

/// The daemon's audit counters (`audit` of `GET <admin>/status`, with the admin token the daemon
/// made in `state_dir`).
async fn audit_status(admin: &str, state_dir: &Path) -> Res<Value> {
    let token = std::fs::read_to_string(state_dir.join("admin.token"));
    let token = token.map_err(ctx("the admin token"))?;
    let client = reqwest::Client::builder().no_proxy().timeout(CALL_TIMEOUT);
    let client = client.build().map_err(ctx("client"))?;
    let request = client
        .get(format!("{admin}/status"))
        .bearer_auth(token.trim());
    let resp = request.send().await;
    let resp = resp.map_err(ctx("GET /status"))?;
    let status = resp.status();
    let body = resp.bytes().await.map_err(ctx("GET /status"))?;
    if !status.is_success() {
        return Err(format!("GET /status: HTTP {status}"));
    }
    let body: Value = serde_json::from_slice(&body).map_err(ctx("GET /status"))?;
    Ok(body["audit"].clone())
}

/// `--mode idle`: the daemon's CPU (µs per second) over an idle window, then over one with
/// `--consoles` console sessions holding their pages' live streams open.
async fn run_idle(args: &Args, cmd: &[String]) -> Res<Value> {
    use reqwest::header::{COOKIE, LOCATION, ORIGIN, SET_COOKIE};
    let n = args.upstreams.max(1);
    eprintln!(
        "loadgen: idle: starting {} with {n} upstream(s), audit on",
        args.mcpmux.display()
    );
    let remote = args.upstream_url.as_deref();
    let (daemon, url, admin) =
        Daemon::start(&args.mcpmux, cmd, remote, n, true, (None, false, false)).await?;
    let pid = daemon.child.id();
    let with_tail = |e: String| format!("mcpmux: {e}{}", daemon.stderr_tail());
    let admin = admin.ok_or_else(|| with_tail("no admin URL announced".into()))?;
    let http = Http::connect(url, 1, false).await.map_err(with_tail)?;
    http.wait_for_upstreams(n).await.map_err(with_tail)?;
    drop(http);
    let window = Duration::from_secs(args.idle_seconds.max(1));
    let cpu_per_s = || async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let t0 = cpu_us_fine(pid).ok_or("cannot read the daemon's CPU time")?;
        tokio::time::sleep(window).await;
        let t1 = cpu_us_fine(pid).ok_or("cannot read the daemon's CPU time")?;
        Ok::<f64, String>(((t1 - t0) / window.as_secs_f64()).round())
    };
    eprintln!("loadgen: idle: {window:?} without a console");
    let closed = cpu_per_s().await?;

    let token = std::fs::read_to_string(daemon.dir.path().join("state/admin.token"));
    let token = token.map_err(ctx("the admin token"))?;
    let client = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(ctx("client"))?;
    let received = Arc::new(AtomicU64::new(0));
    let mut streams = Vec::new();
    for _ in 0..args.consoles {
        let signed_in = (client.post(format!("{admin}/console/login")))
            .header(ORIGIN, &admin)
            .form(&[("token", token.trim())])
            .send()
            .await
            .map_err(ctx("console sign-in"))?;
        let cookie = (signed_in.headers().get(SET_COOKIE))
            .and_then(|c| c.to_str().ok()?.split(';').next().map(str::to_owned))
            .ok_or_else(|| format!("console sign-in: HTTP {}, no cookie", signed_in.status()))?;
        // The session's pages are below the path the sign-in leads to, `/console/s/<key>/`.
        let base = (signed_in.headers().get(LOCATION))
            .and_then(|l| l.to_str().ok().map(str::to_owned))
            .ok_or_else(|| format!("console sign-in: HTTP {}, no location", signed_in.status()))?;
        for page in ["events", "audit/tail"] {
            let path = format!("{base}{page}");
            let path = path.as_str();
            let opened = (client.get(format!("{admin}{path}")))
                .header(COOKIE, &cookie)
                .send()
                .await
                .map_err(ctx(path))?;
            if !opened.status().is_success() {
                return Err(format!("GET {path}: HTTP {}", opened.status()));
            }
            let received = Arc::clone(&received);
            let mut body = opened.bytes_stream();
            streams.push(tokio::spawn(async move {
                while let Some(Ok(chunk)) = body.next().await {
                    received.fetch_add(chunk.len() as u64, Relaxed);
                }
            }));
        }
    }
    eprintln!(
        "loadgen: idle: {window:?} with {} console(s) open",
        args.consoles
    );
    let before = received.load(Relaxed);
    let open = cpu_per_s().await?;
    let sent = received.load(Relaxed) - before;
    streams.iter().for_each(tokio::task::JoinHandle::abort);
    Ok(json!({
        "mode": "idle", "upstreams": n, "idle_seconds": window.as_secs(),
        "consoles": args.consoles,
        "idle_cpu_us_per_s": {"without_console": closed, "with_consoles": open},
        "console_cpu_us_per_s": open - closed,
        "console_bytes_in_window": sent,
        "gateway_rss_mib": rss_mib(pid).map(|m| (m * 10.0).round() / 10.0),
    }))
}

/// One `mcpmux` run: the `run`-th repeat, audit on or off, the host side in `era`.
async fn run_mcpmux(
    args: &Args,
    cmd: &[String],
    (run, audit, era): (usize, bool, &str),
) -> Res<Value> {
    let (exe, n) = (args.mcpmux.display(), args.upstreams.max(1));
    let on_off = if audit { "on" } else { "off" };
    eprintln!("loadgen: mcpmux: starting {exe} with {n} upstream(s), audit {on_off}, era {era}");
    let remote = args.upstream_url.as_deref();
    let exporting = audit && args.audit_export != "off";
    let sink = match args.otlp || args.audit_export == "live" {
        true => Some(otlp::Receiver::grpc().await),
        false => None,
    };
    let mut endpoint = sink.as_ref().map(otlp::Receiver::endpoint);
    if exporting && args.audit_export == "stopped" {
        // A port that was free a moment ago: connections to it are refused.
        let closed = std::net::TcpListener::bind("127.0.0.1:0").map_err(ctx("free port"))?;
        let port = closed.local_addr().map_err(ctx("free port"))?.port();
        endpoint = Some(format!("http://127.0.0.1:{port}"));
    }
    let otlp_config = (endpoint.as_deref(), exporting, args.otlp);
    let (mut daemon, url, admin) =
        Daemon::start(&args.mcpmux, cmd, remote, n, audit, otlp_config).await?;
    let pid = daemon.child.id();
    let with_tail = |e: String| format!("mcpmux: {e}{}", daemon.stderr_tail());
    eprintln!("loadgen: mcpmux: listening on {url}; waiting for the {n} upstreams' tools");
    let http = Http::connect(url, args.concurrency, era == MODERN).await;
    let http = http.map_err(with_tail)?;
    http.wait_for_upstreams(n).await.map_err(with_tail)?;
    let mut cpu = Vec::new();
    let probe = || cpu.push(cpu_us(pid));
    let result = measure("mcpmux", Target::new(Via::Http(http)), args, probe).await;
    let rss = rss_mib(pid).map(|m| (m * 10.0).round() / 10.0);
    let mut report = result.map_err(with_tail)?;
    let audit_counts = match &admin {
        Some(admin) => audit_status(admin, &daemon.dir.path().join("state")).await,
        None => Err("the daemon announced no admin URL".into()),
    };
    let audit_counts = audit_counts.unwrap_or_else(|e| {
        eprintln!("loadgen: warning: no audit counts: {e}");
        Value::Null
    });
    let status = daemon.stop();
    if !status.is_some_and(|s| s.success()) {
        eprintln!("loadgen: warning: mcpmux exit status after SIGTERM: {status:?}");
    }
    let [Some(t0), Some(t1)] = cpu[..] else {
        return Err(format!("cannot read /proc/{pid}/stat"));
    };
    let per_call = (t1 - t0) / report["calls"].as_f64().unwrap_or(1.0);
    report["gateway_cpu_us_per_call"] = json!((per_call * 10.0).round() / 10.0);
    report["gateway_rss_mib"] = json!(rss);
    report["upstreams"] = json!(n);
    report["audit"] = json!(on_off);
    report["era"] = json!(era);
    report["run"] = json!(run);
    report["audit_dropped"] = audit_counts["dropped"].clone();
    report["audit_queued"] = audit_counts["queued"].clone();
    report["audit_records"] = audit_counts["records"].clone();
    if let Some(sink) = sink {
        let received = sink.received.lock().map(|r| r.spans.len()).unwrap_or(0);
        report["otlp_spans"] = json!(received);
        let logs = sink.received.lock().map(|r| r.logs.len()).unwrap_or(0);
        report["otlp_audit_records"] = json!(logs);
    }
    report["audit_export"] = json!(if exporting {
        args.audit_export.as_str()
    } else {
        "off"
    });
    Ok(report)
}

/// `--target URL`: the calls against an endpoint already running (several replicas behind a
/// load balancer, or one of them), in the era `--era` names (one of the two).
async fn run_target(args: &Args, url: &str) -> Res<Value> {
    let modern = args.era == MODERN;
    eprintln!("loadgen: target: {url}, era {}", args.era);
    let http = Http::connect(url.to_owned(), args.concurrency, modern).await?;
    http.wait_for_upstreams(args.upstreams.max(1)).await?;
    let mut report = measure("target", Target::new(Via::Http(http)), args, || {}).await?;
    report["url"] = json!(url);
    report["era"] = json!(args.era);
    Ok(report)
}

/// The OTLP receiver the telemetry tests use (the collector's gRPC services), here a sink.
#[allow(dead_code, clippy::unwrap_used)]
#[path = "../tests/observability/telemetry/otlp.rs"]
mod otlp;

fn print_table(
    args: &Args,
    reports: &[Value],
    ratios: &[(String, f64)],
    (audit, era): (Option<&Value>, Option<&Value>),
) {
    let (calls, conc, warmup) = (args.calls, args.concurrency, args.warmup);
    let pace = if args.rate > 0.0 {
        format!(", open loop at {} calls/s", args.rate)
    } else {
        String::new()
    };
    println!(
        "\nmcpmux loadgen, tools/call echo: {calls} calls, {conc} callers{pace}, warm-up {warmup}"
    );
    let heads = "mode,calls,conc,calls/s,p50 µs,p90 µs,p99 µs,errors,gw CPU µs/call,gw RSS MiB";
    let heads = format!("{heads},audit,audit drops,era");
    let keys = "mode calls concurrency calls_per_s p50_us p90_us p99_us errors";
    let keys = format!("{keys} gateway_cpu_us_per_call gateway_rss_mib audit audit_dropped era");
    let widths = [6, 8, 5, 10, 9, 9, 9, 7, 15, 11, 6, 12, 11];
    let row = |cells: Vec<String>| -> String {
        let cells = cells.iter().zip(widths);
        cells.map(|(c, w)| format!("{c:>w$}")).collect()
    };
    println!("{}", row(heads.split(',').map(String::from).collect()));
    for r in reports {
        let cell = |k: &str| r[k].as_str().map_or(r[k].to_string(), str::to_owned);
        let cell = |k: &str| cell(k).replace("null", "-");
        let ups = r["upstreams"].as_u64();
        let ups = ups.map(|u| format!(" (with {u} upstreams)"));
        let cells = keys.split(' ').map(cell).collect();
        println!("{}{}", row(cells), ups.unwrap_or_default());
    }
    if !ratios.is_empty() {
        let each = ratios
            .iter()
            .map(|(audit, r)| format!("{r:.2} (audit {audit})"));
        println!(
            "p50 ratio mcpmux/direct: {}",
            each.collect::<Vec<_>>().join(", ")
        );
    }
    let runs = if args.repeat > 1 { " (medians)" } else { "" };
    for (title, d, (a, b)) in [
        ("audit on vs off", audit, ("off", "on")),
        ("2026-07-28 vs handshake", era, ("handshake", MODERN)),
    ] {
        let Some(d) = d else { continue };
        let num = |key: String| d[key].as_f64().unwrap_or_default();
        let line = |p: &str| {
            let (x, y) = (num(format!("{p}_us_{a}")), num(format!("{p}_us_{b}")));
            let delta = num(format!("{p}_delta_us"));
            let pct = num(format!("{p}_delta_pct"));
            format!("{p} {x:.0} → {y:.0} µs ({delta:+.0} µs, {pct:+.1}%)")
        };
        let (x, y) = (num(format!("cpu_us_{a}")), num(format!("cpu_us_{b}")));
        println!(
            "{title}{runs}: {}, {}, gateway CPU {x:.1} → {y:.1} µs/call",
            line("p50"),
            line("p99")
        );
        if let (Some(delta), Some(pct)) = (
            d["cpu_delta_us_median"].as_f64(),
            d["calls_per_s_pct_median"].as_f64(),
        ) {
            println!(
                "  pair by pair: gateway CPU {delta:+.1} µs/call, calls/s {pct:.1}% (medians; pairs {} and {})",
                d["cpu_delta_us_pairs"], d["calls_per_s_pct_pairs"]
            );
        }
    }
}

/// The median of `values` (of an even count, the mean of the middle two).
fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_unstable_by(f64::total_cmp);
    let n = values.len();
    let (low, high) = (values.get(n.checked_sub(1)? / 2)?, values.get(n / 2)?);
    Some((low + high) / 2.0)
}

/// The `mcpmux` runs whose `field` is `b` against those where it is `a` (`audit` off → on, or
/// `era` handshake → 2026-07-28): the medians of p50, p99 and the gateway's CPU per call, and
/// run by run (the same repeat, the other setting the same) the CPU difference and the
/// throughput ratio, with their medians. Alternating pairs are what tell a few µs apart on a
/// machine whose single runs vary by more.
fn difference(reports: &[Value], field: &str, (a, b): (&str, &str)) -> Option<Value> {
    let runs = |side: &str| -> Vec<&Value> {
        (reports.iter())
            .filter(|r| r["mode"] == "mcpmux" && r[field] == side)
            .collect()
    };
    let (runs_a, runs_b) = (runs(a), runs(b));
    let of = |runs: &[&Value], key: &str| -> Vec<f64> {
        runs.iter().filter_map(|r| r[key].as_f64()).collect()
    };
    let round = |x: f64| (x * 10.0).round() / 10.0;
    let mut d = json!({});
    for p in ["p50", "p99"] {
        let key = format!("{p}_us");
        let (x, y) = (median(of(&runs_a, &key))?, median(of(&runs_b, &key))?);
        d[format!("{p}_us_{a}")] = json!(x);
        d[format!("{p}_us_{b}")] = json!(y);
        d[format!("{p}_delta_us")] = json!(y - x);
        d[format!("{p}_delta_pct")] = json!(round((y - x) / x.max(1.0) * 100.0));
    }
    let cpu = "gateway_cpu_us_per_call";
    d[format!("cpu_us_{a}")] = json!(median(of(&runs_a, cpu)));
    d[format!("cpu_us_{b}")] = json!(median(of(&runs_b, cpu)));
    // The other setting that must match for two runs to be a pair.
    let other = if field == "audit" { "era" } else { "audit" };
    let pairs: Vec<(&Value, &Value)> = (runs_a.iter())
        .filter_map(|x| {
            let y = runs_b
                .iter()
                .find(|y| y["run"] == x["run"] && y[other] == x[other])?;
            Some((*x, *y))
        })
        .collect();
    let cpu_deltas: Vec<f64> = (pairs.iter())
        .filter_map(|(x, y)| Some(round(y[cpu].as_f64()? - x[cpu].as_f64()?)))
        .collect();
    let ratios: Vec<f64> = (pairs.iter())
        .filter_map(|(x, y)| {
            let rate = |r: &Value| r["calls_per_s"].as_f64().filter(|v| *v > 0.0);
            Some(round(rate(y)? / rate(x)? * 100.0))
        })
        .collect();
    d["cpu_delta_us_median"] = json!(median(cpu_deltas.clone()));
    d["calls_per_s_pct_median"] = json!(median(ratios.clone()));
    d["cpu_delta_us_pairs"] = json!(cpu_deltas);
    d["calls_per_s_pct_pairs"] = json!(ratios);
    Some(d)
}

async fn run(args: Args) -> Res<()> {
    if args.calls < 1 || args.concurrency < 1 {
        return Err("--calls and --concurrency must be at least 1".into());
    }
    serde_json::from_str::<Value>(&args.arguments).map_err(ctx("--arguments is not JSON"))?;
    let _ = ARGUMENTS.set(args.arguments.clone());
    let cmd = args.upstream_cmd.split_whitespace();
    let mut cmd: Vec<String> = cmd.map(Into::into).collect();
    let program = Path::new(cmd.first().ok_or("--upstream-cmd is empty")?);
    if program.is_relative() && program.components().count() > 1 {
        // The daemon gets an absolute path.
        let abs = std::fs::canonicalize(program).map_err(ctx(program.display()))?;
        cmd[0] = abs.display().to_string();
    }
    // An idle measurement, or calls against a running endpoint: one report, printed alone.
    let single = match (&args.target, args.mode.as_str()) {
        (Some(url), _) => Some(run_target(&args, url).await?),
        (None, "idle") => Some(run_idle(&args, &cmd).await?),
        _ => None,
    };
    if let Some(report) = single {
        match args.json {
            true => println!("{report}"),
            false => println!(
                "{}",
                serde_json::to_string_pretty(&report).unwrap_or_default()
            ),
        }
        return Ok(());
    }
    let mut reports = Vec::new();
    if args.mode != "mcpmux" {
        reports.push(run_direct(&args, &cmd).await?);
    }
    let mcpmux_runs = if args.mode == "direct" {
        0
    } else {
        args.repeat.max(1)
    };
    let audits = [(false, "off"), (true, "on")].into_iter();
    let audits: Vec<bool> = (audits
        .filter(|(_, name)| args.audit == "both" || args.audit == *name))
    .map(|(on, _)| on)
    .collect();
    let eras = ["handshake", MODERN].into_iter();
    let eras: Vec<&str> = (eras.filter(|era| args.era == "both" || args.era == *era)).collect();
    for run in 0..mcpmux_runs {
        for &audit in &audits {
            for era in &eras {
                reports.push(run_mcpmux(&args, &cmd, (run, audit, era)).await?);
            }
        }
    }
    let p50 = |r: &Value| r["p50_us"].as_f64();
    let direct = reports.iter().find(|r| r["mode"] == "direct").and_then(p50);
    let ratios: Vec<(String, f64)> = (reports.iter().filter(|r| r["mode"] == "mcpmux"))
        .filter_map(|r| Some((r["audit"].as_str()?.to_owned(), p50(r)? / direct?.max(1.0))))
        .collect();
    // The default config (audit on) when it ran.
    let ratio = |a: &str| ratios.iter().find(|(audit, _)| audit == a).map(|r| r.1);
    let audit = difference(&reports, "audit", ("off", "on"));
    let era = difference(&reports, "era", ("handshake", MODERN));
    if args.json {
        let out = json!({"calls": args.calls, "concurrency": args.concurrency,
            "warmup": args.warmup, "upstreams": args.upstreams.max(1), "audit": args.audit,
            "rate": (args.rate > 0.0).then_some(args.rate), "repeat": args.repeat,
            "results": reports, "p50_ratio_mcpmux_over_direct": ratio("on").or(ratio("off")),
            "p50_ratio_mcpmux_audit_off_over_direct": ratio("off"),
            "audit_on_vs_off": audit, "era_2026_07_28_vs_handshake": era});
        println!("{out}");
    } else {
        print_table(&args, &reports, &ratios, (audit.as_ref(), era.as_ref()));
    }
    Ok(())
}

#[tokio::main]
async fn main() -> ExitCode {
    // `cargo bench` passes `--bench`.
    let args = Args::parse_from(std::env::args().filter(|a| a != "--bench"));
    // On Ctrl-C or SIGTERM, dropping `run` drops the guards, which stop the processes.
    let mut term = signal(SignalKind::terminate());
    let result = tokio::select! {
        r = run(args) => r,
        _ = tokio::signal::ctrl_c() => Err("interrupted".into()),
        Some(()) = async { term.as_mut().ok()?.recv().await } => Err("terminated".into()),
    };
    if let Err(e) = &result {
        eprintln!("loadgen: error: {e}");
    }
    ExitCode::from(u8::from(result.is_err()))
}
