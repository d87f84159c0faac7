//! Three replicas of the real daemon on 127.0.0.11–13 behind HAProxy from Debian, routed as
//! `tests/cluster/haproxy.cfg.in` (the recipe in `deploy/haproxy/`) routes them: sessions stay
//! on their owner, stateless calls spread, cursors and multi-round calls cross replicas, a
//! killed replica costs only what was in flight on it, a terminated one drains without a failed
//! call, and every audit chain verifies (`mcpmux audit verify --replicas`). The Kubernetes
//! recipe is checked against the daemon too (`manifests`), and replicas sharing a fleet store in
//! Postgres agree on pins, approvals and tokens (`store`) and finish each other's sign-ins
//! (`signin`).
//!
//! The tests take turns (one fleet at a time): each measures what a failure costs, which two
//! fleets sharing two cores would blur.

#![allow(clippy::unwrap_used)]

#[path = "../common/mod.rs"]
pub mod common;

mod manifests;
mod postgres;
mod signin;
mod store;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use common::{Daemon, MCPMUX, free_port, poll_until, test_upstream};

/// One fleet at a time.
static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const NAMES: [&str; 3] = ["a", "b", "c"];
const MODERN: &str = "2026-07-28";

/// Three replicas, HAProxy in front, and what they share (config, keys, admin token).
struct Fleet {
    dir: tempfile::TempDir,
    config: PathBuf,
    ports: BTreeMap<&'static str, u16>,
    replicas: BTreeMap<&'static str, Daemon>,
    haproxy: Child,
    /// Where hosts connect: HAProxy's `/mcp`.
    front: String,
    stats: String,
}

impl Drop for Fleet {
    fn drop(&mut self) {
        let _ = self.haproxy.kill();
        let _ = self.haproxy.wait();
    }
}

fn ip(name: &str) -> String {
    match name {
        "a" => "127.0.0.11",
        "b" => "127.0.0.12",
        _ => "127.0.0.13",
    }
    .to_owned()
}

fn private(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).unwrap();
}

impl Fleet {
    async fn start() -> Self {
        Self::start_with("").await
    }

    /// Three replicas whose config holds `upstreams` besides `alpha`.
    async fn start_with(upstreams: &str) -> Self {
        Self::start_configured("", upstreams).await
    }

    /// [`Self::start_with`], `cluster` added to each replica's `[cluster]` table.
    async fn start_configured(cluster: &str, upstreams: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let key: String = (0..32)
            .map(|_| format!("{:02x}", rand::random::<u8>()))
            .collect();
        private(&dir.path().join("cursor.keys"), &format!("1 {key}\n"));
        let token: String = (0..32)
            .map(|_| format!("{:02x}", rand::random::<u8>()))
            .collect();
        private(&dir.path().join("admin.token"), &token);
        let ports: BTreeMap<&str, u16> = NAMES.iter().map(|n| (*n, free_port())).collect();
        let peers: String = (ports.iter())
            .map(|(n, p)| format!("{n} = \"http://{}:{p}\"\n", ip(n)))
            .collect();
        let config = dir.path().join("mcpmux.toml");
        std::fs::write(
            &config,
            format!(
                "[server]\nlisten = \"127.0.0.1:0\"\ncursor_keys = \"cursor.keys\"\ndrain_timeout = \"5s\"\n\
                 [admin]\ntoken_file = \"admin.token\"\n[catalog]\ntools_page_size = 2\n\
                 [cluster]\nunready_delay = \"1500ms\"\n{cluster}[cluster.peers]\n{peers}\n{}{upstreams}",
                test_upstream("alpha", &["--protocol-tools"])
            ),
        )
        .unwrap();
        let mut fleet = Self {
            front: String::new(),
            stats: String::new(),
            haproxy: Command::new("true").spawn().unwrap(),
            dir,
            config,
            ports,
            replicas: BTreeMap::new(),
        };
        for name in NAMES {
            fleet.start_replica(name);
        }
        fleet.start_haproxy();
        for name in NAMES {
            fleet.wait_up(name, true).await;
        }
        fleet
    }

    fn start_replica(&mut self, name: &'static str) {
        let listen = format!("{}:{}", ip(name), self.ports[name]);
        let state = self.dir.path().join(format!("state-{name}"));
        // Where the test helpers look for the admin token (the daemon reads the shared one).
        std::fs::create_dir_all(&state).unwrap();
        let token = std::fs::read_to_string(self.dir.path().join("admin.token")).unwrap();
        private(&state.join("admin.token"), &token);
        let args = [
            "--listen",
            listen.as_str(),
            "--replica",
            name,
            "--state-dir",
            state.to_str().unwrap(),
        ];
        let daemon = Daemon::start_file(tempfile::tempdir().unwrap(), &self.config, &args);
        self.replicas.insert(name, daemon);
    }

    fn start_haproxy(&mut self) {
        let template = include_str!("haproxy.cfg.in");
        let (front, stats) = (free_port(), free_port());
        let mut cfg = template
            .replace("{{FRONTEND}}", &format!("127.0.0.1:{front}"))
            .replace("{{STATS}}", &format!("127.0.0.1:{stats}"));
        for name in NAMES {
            let server = format!("{}:{}", ip(name), self.ports[name]);
            cfg = cfg.replace(&format!("{{{{SERVER_{name}}}}}"), &server);
        }
        let path = self.dir.path().join("haproxy.cfg");
        std::fs::write(&path, cfg).unwrap();
        let log = std::fs::File::create(self.dir.path().join("haproxy.log")).unwrap();
        // Debian installs it in /usr/sbin, which a user's PATH may not hold.
        let haproxy = ["/usr/sbin/haproxy", "/usr/local/sbin/haproxy"]
            .into_iter()
            .find(|p| Path::new(p).exists())
            .unwrap_or("haproxy");
        self.haproxy = Command::new(haproxy)
            .arg("-db")
            .arg("-f")
            .arg(&path)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("haproxy (Debian's package; .ci/run installs it)");
        self.front = format!("http://127.0.0.1:{front}/mcp");
        self.stats = format!("http://127.0.0.1:{stats}/stats;csv");
    }

    /// Waits until HAProxy's health check says replica `name` is up (or down).
    async fn wait_up(&self, name: &str, up: bool) {
        let http = reqwest::Client::new();
        let line = format!("mcpmux,{name},");
        let seen = poll_until(Duration::from_secs(30), || {
            let http = http.clone();
            let line = line.clone();
            let stats = self.stats.clone();
            async move {
                let Ok(r) = http.get(&stats).send().await else {
                    return false;
                };
                let text = r.text().await.unwrap_or_default();
                text.lines()
                    .find(|l| l.starts_with(&line))
                    .is_some_and(|l| l.contains(",UP,") == up)
            }
        })
        .await;
        assert!(
            seen,
            "HAProxy never saw replica {name} {}",
            if up { "up" } else { "down" }
        );
    }

    fn url(&self, name: &str) -> String {
        format!("http://{}:{}/mcp", ip(name), self.ports[name])
    }

    /// How many requests replica `name` forwarded to another.
    fn forwarded(&self, name: &str) -> usize {
        self.replicas[name].log_count(&["Forwarded a request to the replica that owns it."])
    }

    /// The calls replica `name` sent its upstream so far.
    async fn upstream_requests(&self, name: &str) -> u64 {
        self.replicas[name].upstream_status("alpha").await["requests"]
            .as_u64()
            .unwrap()
    }

    fn admins(&self) -> String {
        (self.replicas.values())
            .map(|d| d.admin_url.clone().unwrap())
            .collect::<Vec<_>>()
            .join(",")
    }

    /// `mcpmux ARGS` with the fleet's admin token: its exit status and output.
    fn cli(&self, args: &[&str]) -> (bool, String) {
        let out = Command::new(MCPMUX)
            .args(args)
            .env(
                "MCPMUX_ADMIN_TOKEN_FILE",
                self.dir.path().join("admin.token"),
            )
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    }
}

/// An answer's HTTP status, session id and messages; `Err` when none came (the connection
/// broke, or was refused).
async fn post(
    http: &reqwest::Client,
    url: &str,
    headers: &[(&str, String)],
    body: &Value,
) -> Result<(u16, Option<String>, Vec<Value>), String> {
    let mut request = (http.post(url))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_string());
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let response = request.send().await.map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    let session =
        (response.headers().get("mcp-session-id")).map(|v| v.to_str().unwrap().to_owned());
    let text = response.text().await.map_err(|e| e.to_string())?;
    let messages = text
        .lines()
        .filter_map(|l| l.strip_prefix("data:"))
        .filter_map(|d| serde_json::from_str(d.trim()).ok())
        .collect::<Vec<Value>>();
    let messages = match messages.is_empty() {
        true => serde_json::from_str(&text)
            .map(|v| vec![v])
            .unwrap_or_default(),
        false => messages,
    };
    Ok((status, session, messages))
}

/// A handshake-era host session: initialized, then its calls carry its id.
struct Session {
    http: reqwest::Client,
    url: String,
    id: String,
}

impl Session {
    async fn open(url: &str) -> Result<Self, String> {
        let http = reqwest::Client::new();
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "cluster-test", "version": "0"}}});
        let (status, id, _) = post(&http, url, &[], &init).await?;
        let id = id
            .filter(|_| status == 200)
            .ok_or(format!("initialize: {status}"))?;
        let session = Self {
            http,
            url: url.to_owned(),
            id,
        };
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let (status, _, _) = post(&session.http, url, &session.headers(), &initialized).await?;
        if status != 202 {
            return Err(format!("notifications/initialized: {status}"));
        }
        Ok(session)
    }

    fn headers(&self) -> Vec<(&'static str, String)> {
        vec![
            ("mcp-session-id", self.id.clone()),
            ("mcp-protocol-version", "2025-11-25".into()),
        ]
    }

    /// One echo call: `Ok` with its text, or the HTTP status (404: the session is gone) or why
    /// nothing came back.
    async fn echo(&self, text: &str) -> Result<String, Failure> {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                          "params": {"name": "alpha__echo", "arguments": {"text": text}}});
        let answer = post(&self.http, &self.url, &self.headers(), &body).await;
        echoed(answer)
    }
}

#[derive(Debug)]
#[allow(dead_code)] // Read through Debug, in failure messages.
enum Failure {
    Status(u16),
    Broken(String),
    Error(Value),
}

fn echoed(answer: Result<(u16, Option<String>, Vec<Value>), String>) -> Result<String, Failure> {
    let (status, _, messages) = answer.map_err(Failure::Broken)?;
    if status != 200 {
        return Err(Failure::Status(status));
    }
    let last = messages.last().cloned().unwrap_or(Value::Null);
    match last["result"]["content"][0]["text"].as_str() {
        Some(text) => Ok(text.to_owned()),
        None => Err(Failure::Error(last)),
    }
}

/// A stateless (2026-07-28) request of `method` with `params`, declaring `capabilities`.
async fn stateless(
    http: &reqwest::Client,
    url: &str,
    (method, params): (&str, Value),
    capabilities: Value,
) -> Result<(u16, Option<String>, Vec<Value>), String> {
    let mut params = params;
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "cluster-test", "version": "0"},
    });
    let mut headers = vec![
        ("mcp-protocol-version", MODERN.to_owned()),
        ("mcp-method", method.to_owned()),
    ];
    if let Some(name) = params["name"].as_str() {
        headers.push(("mcp-name", name.to_owned()));
    }
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
    post(http, url, &headers, &body).await
}

async fn stateless_echo(http: &reqwest::Client, url: &str, text: &str) -> Result<String, Failure> {
    let params = json!({"name": "alpha__echo", "arguments": {"text": text}});
    echoed(stateless(http, url, ("tools/call", params), json!({})).await)
}

/// The retry of `call` answering the one elicitation an `input_required` `result` asks with
/// `content`, and carrying its state.
fn retry(call: &Value, result: &Value, content: Value) -> Value {
    let (key, _) = result["inputRequests"]
        .as_object()
        .unwrap()
        .iter()
        .next()
        .unwrap();
    let mut params = call.clone();
    params["inputResponses"] = json!({key: {"action": "accept", "content": content}});
    params["requestState"] = result["requestState"].clone();
    params
}

/// Every tool name of a stateless listing, page after page, page `i` asked of `urls[i % n]`.
async fn list_across(http: &reqwest::Client, urls: &[String]) -> Vec<String> {
    let mut names = Vec::new();
    let mut cursor: Option<String> = None;
    for page in 0.. {
        let params = match &cursor {
            Some(c) => json!({"cursor": c}),
            None => json!({}),
        };
        let url = &urls[page % urls.len()];
        let (status, _, messages) = stateless(http, url, ("tools/list", params), json!({}))
            .await
            .unwrap();
        let result = &messages.last().unwrap()["result"];
        assert_eq!(status, 200, "page {page} on {url}: {messages:?}");
        for tool in result["tools"].as_array().unwrap() {
            names.push(tool["name"].as_str().unwrap().to_owned());
        }
        match result["nextCursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => return names,
        }
    }
    unreachable!()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sessions_stay_on_their_replica_while_stateless_calls_cursors_and_rounds_cross_them() {
    let _turn = TURN.lock().await;
    let fleet = Fleet::start().await;

    // 30 handshake-era sessions × 20 calls through HAProxy: each stays on its owner.
    let mut tasks = Vec::new();
    for s in 0..30 {
        let front = fleet.front.clone();
        tasks.push(tokio::spawn(async move {
            let session = Session::open(&front).await.unwrap();
            for c in 0..20 {
                let text = format!("s{s}c{c}");
                let echoed = session.echo(&text).await.unwrap();
                assert!(echoed.contains(&format!("\"{text}\"")), "{echoed}");
            }
            session.id
        }));
    }
    let mut owners: HashMap<String, usize> = HashMap::new();
    for task in tasks {
        let id = task.await.unwrap();
        let owner = id.split_once('.').unwrap().0.to_owned();
        assert!(
            NAMES.contains(&owner.as_str()),
            "session id {id} names no replica"
        );
        *owners.entry(owner).or_default() += 1;
    }
    assert!(owners.len() == 3, "sessions were not spread: {owners:?}");
    let forwarded: usize = NAMES.iter().map(|n| fleet.forwarded(n)).sum();
    if forwarded > 0 {
        for n in NAMES {
            for l in fleet.replicas[n]
                .stderr()
                .lines()
                .filter(|l| l.contains("Forwarded"))
            {
                eprintln!("{n}: {l}");
            }
        }
        eprintln!(
            "{}",
            std::fs::read_to_string(fleet.dir.path().join("haproxy.log")).unwrap()
        );
    }
    assert_eq!(
        forwarded, 0,
        "HAProxy routed a session's request to a replica that does not own it"
    );

    // 300 stateless calls spread over all three.
    let mut before = BTreeMap::new();
    for name in NAMES {
        before.insert(name, fleet.upstream_requests(name).await);
    }
    let http = reqwest::Client::new();
    // 48 at a time: each replica's upstream takes 64 requests at once (max_concurrency).
    use futures_util::StreamExt as _;
    let calls = futures_util::stream::iter((0..300).map(|i| {
        let (http, front) = (http.clone(), fleet.front.clone());
        async move { stateless_echo(&http, &front, &format!("x{i}")).await }
    }))
    .buffer_unordered(48)
    .collect::<Vec<_>>();
    let failed: Vec<Failure> = calls.await.into_iter().filter_map(Result::err).collect();
    assert!(
        failed.is_empty(),
        "{} stateless calls failed: {:?}",
        failed.len(),
        failed.first()
    );
    for name in NAMES {
        let served = fleet.upstream_requests(name).await - before[name];
        assert!(
            served >= 50,
            "replica {name} served {served} of 300 stateless calls"
        );
    }

    // A cursor minted on one replica pages on the others, without gap or duplicate.
    let one = list_across(&http, &[fleet.url("a")]).await;
    let urls: Vec<String> = NAMES.iter().map(|n| fleet.url(n)).collect();
    let across = list_across(&http, &urls).await;
    assert!(one.len() >= 6, "{one:?}");
    assert_eq!(across, one);

    // A multi-round call parked on a, its rounds sent to a, b and c: b and c forward to a.
    let asked_for = json!({"elicitation": {}});
    let call = json!({"name": "alpha__elicit", "arguments": {"rounds": 3}});
    let mut params = call.clone();
    let forwarded_before = fleet.forwarded("b") + fleet.forwarded("c");
    for (round, name) in NAMES.iter().enumerate() {
        let answer = stateless(
            &http,
            &fleet.url(name),
            ("tools/call", params.clone()),
            asked_for.clone(),
        )
        .await
        .unwrap();
        let result = answer.2.last().unwrap()["result"].clone();
        assert_eq!(
            result["resultType"], "input_required",
            "round {round} on {name}: {result}"
        );
        let state = result["requestState"].as_str().unwrap();
        assert!(
            state.starts_with("a."),
            "a parked call's state names its replica: {state}"
        );
        params = retry(&call, &result, json!({"answer": format!("r{round}")}));
    }
    // The last answer, through HAProxy: it routes the retry to a by its requestState.
    let done = stateless(&http, &fleet.front, ("tools/call", params), asked_for)
        .await
        .unwrap();
    let result = &done.2.last().unwrap()["result"];
    assert_eq!(result["resultType"], "complete", "{result}");
    assert!(
        fleet.forwarded("b") + fleet.forwarded("c") >= forwarded_before + 2,
        "the rounds sent to b and c were not forwarded to a"
    );

    // A legacy SSE session: its stream on one replica, its messages POSTed to another are
    // forwarded there (the `sessionId` names the owner), and through HAProxy too.
    let mut legacy = common::LegacyHost::open(&fleet.front, "2024-11-05").await;
    let id = legacy
        .endpoint
        .split("sessionId=")
        .nth(1)
        .unwrap()
        .to_owned();
    let owner = id.split_once('.').unwrap().0;
    let init = json!({"protocolVersion": "2024-11-05", "capabilities": {},
                      "clientInfo": {"name": "legacy", "version": "0"}});
    legacy.request("initialize", init).await;
    legacy
        .post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await;
    let other = NAMES.iter().find(|n| **n != owner).unwrap();
    let front_base = fleet.front.trim_end_matches("/mcp").to_owned();
    let other_base = fleet.url(other).trim_end_matches("/mcp").to_owned();
    let via_front = legacy.endpoint.clone();
    legacy.endpoint = via_front.replace(&front_base, &other_base);
    let before = fleet.forwarded(other);
    let (_, answer) = legacy
        .request(
            "tools/call",
            json!({"name": "alpha__echo", "arguments": {"text": "legacy"}}),
        )
        .await;
    assert!(
        answer["result"]["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("legacy"),
        "{answer}"
    );
    assert_eq!(fleet.forwarded(other), before + 1);
    legacy.endpoint = via_front;
    let (_, answer) = legacy.request("tools/list", json!({})).await;
    assert!(answer["result"]["tools"].is_array(), "{answer}");

    // A forward no replica signed is refused, and never forwarded on.
    let forged = http
        .post(fleet.url("b"))
        .header("content-type", "application/json")
        .header("mcp-session-id", "a.0123")
        .header("mcpmux-forwarded", "a 1 1 00")
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 403);

    // The fleet view: every replica, one config.
    let (ok, status) = fleet.cli(&["status", "--replicas", &fleet.admins()]);
    assert!(ok, "{status}");
    for name in NAMES {
        assert!(
            status.lines().any(|l| l.starts_with(&format!("{name} "))),
            "{status}"
        );
    }
    assert!(!status.contains("different configs"), "{status}");
}

/// A 2026-07-28 upstream's multi-round call keeps its state in the (sealed) `requestState`, not
/// on a replica: each round may land on any replica, and none is forwarded.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_modern_upstreams_rounds_continue_on_any_replica_without_a_hop() {
    let _turn = TURN.lock().await;
    let (_server, url) =
        common::peers::node_http_server("modern_server.mjs", &["http".into()]).await;
    let fleet = Fleet::start_with(&format!("[upstreams.modern]\nurl = {url:?}\n")).await;
    let http = reqwest::Client::new();
    for name in NAMES {
        let listed = poll_until(Duration::from_secs(30), || {
            let (http, url) = (http.clone(), fleet.url(name));
            async move {
                let names = list_across(&http, &[url]).await;
                names.iter().any(|n| n == "modern__survey")
            }
        })
        .await;
        assert!(listed, "replica {name} never listed modern__survey");
    }
    let asked_for = json!({"elicitation": {}});
    let call = json!({"name": "modern__survey", "arguments": {}});
    let forwarded: usize = NAMES.iter().map(|n| fleet.forwarded(n)).sum();
    let answers = [json!({"name": "Ada"}), json!({"color": "teal"})];
    let mut params = call.clone();
    for (round, name) in NAMES.iter().enumerate() {
        let answer = stateless(
            &http,
            &fleet.url(name),
            ("tools/call", params),
            asked_for.clone(),
        )
        .await
        .unwrap();
        let result = answer.2.last().unwrap()["result"].clone();
        if round == 2 {
            assert_eq!(result["content"][0]["text"], "Ada likes teal", "{result}");
            break;
        }
        assert_eq!(
            result["resultType"], "input_required",
            "round {round} on {name}: {result}"
        );
        let state = result["requestState"].as_str().unwrap();
        assert!(
            !state.contains('.'),
            "a relayed state names no replica: {state}"
        );
        params = retry(&call, &result, answers[round].clone());
    }
    let after: usize = NAMES.iter().map(|n| fleet.forwarded(n)).sum();
    assert_eq!(after, forwarded, "a relayed round was forwarded");
}

/// What a run of mixed load saw: per session (its first owner), the 404s and other failures;
/// the stateless calls' failures, each with when it happened.
#[derive(Default, Debug)]
struct Seen {
    sessions: Vec<(String, usize, Vec<String>)>,
    stateless: Vec<(Duration, String)>,
    calls: usize,
}

/// Mixed load through HAProxy for `run`: 12 handshake sessions (each re-initializing after a
/// 404, as the spec says a host does) and 4 stateless callers; `event` runs at 1.5 s.
async fn mixed_load(fleet: &Fleet, run: Duration, event: impl FnOnce()) -> Seen {
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let mut sessions = Vec::new();
    for s in 0..12 {
        let (front, stop) = (fleet.front.clone(), Arc::clone(&stop));
        sessions.push(tokio::spawn(async move {
            let mut session = Session::open(&front).await.unwrap();
            let owner = session.id.split_once('.').unwrap().0.to_owned();
            let (mut not_found, mut other, mut calls) = (0, Vec::new(), 0);
            while !stop.load(Ordering::Relaxed) {
                calls += 1;
                match session.echo(&format!("s{s}")).await {
                    Ok(_) => {}
                    Err(Failure::Status(404)) => {
                        not_found += 1;
                        session = Session::open(&front).await.unwrap();
                    }
                    Err(e) => other.push(format!("{e:?}")),
                }
            }
            (owner, not_found, other, calls)
        }));
    }
    let mut workers = Vec::new();
    for w in 0..4 {
        let (front, stop) = (fleet.front.clone(), Arc::clone(&stop));
        workers.push(tokio::spawn(async move {
            let http = reqwest::Client::new();
            let (mut failed, mut calls) = (Vec::new(), 0);
            while !stop.load(Ordering::Relaxed) {
                calls += 1;
                if let Err(e) = stateless_echo(&http, &front, &format!("w{w}")).await {
                    failed.push((started.elapsed(), format!("{e:?}")));
                }
            }
            (failed, calls)
        }));
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    event();
    tokio::time::sleep(run.saturating_sub(Duration::from_millis(1500))).await;
    stop.store(true, Ordering::Relaxed);
    let mut seen = Seen::default();
    for s in sessions {
        let (owner, not_found, other, calls) = s.await.unwrap();
        seen.calls += calls;
        seen.sessions.push((owner, not_found, other));
    }
    for w in workers {
        let (failed, calls) = w.await.unwrap();
        seen.calls += calls;
        seen.stateless.extend(failed);
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_replica_costs_only_its_in_flight_calls_then_rejoins() {
    let _turn = TURN.lock().await;
    let mut fleet = Fleet::start().await;
    let pid = fleet.replicas["b"].pid();
    let killed_at = Duration::from_millis(1500);
    let seen = mixed_load(&fleet, Duration::from_secs(6), || {
        Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .unwrap();
    })
    .await;
    eprintln!(
        "kill -9: {} calls; stateless failures {:?}",
        seen.calls, seen.stateless
    );
    // Stateless calls fail only while in flight on it (or sent on a connection HAProxy held to it
    // before it noticed: a POST is never sent twice): none two seconds after.
    let late: Vec<_> = (seen.stateless.iter())
        .filter(|(at, _)| *at > killed_at + Duration::from_secs(2))
        .collect();
    assert!(
        late.is_empty(),
        "stateless calls failed after the kill: {late:?}"
    );
    for (owner, not_found, other) in &seen.sessions {
        if owner == "b" {
            // One 404, then a new session elsewhere; at most the call in flight broke (and one
            // sent on a connection HAProxy still held to it).
            assert_eq!(*not_found, 1, "a session of the killed replica: {other:?}");
            assert!(other.len() <= 2, "{other:?}");
        } else {
            assert_eq!(
                (*not_found, other.len()),
                (0, 0),
                "a session of {owner}: {other:?}"
            );
        }
    }
    assert!(
        seen.sessions.iter().any(|(o, _, _)| o == "b"),
        "no session was on b"
    );

    // b restarts and rejoins; every chain verifies.
    fleet.replicas.remove("b");
    fleet.start_replica("b");
    fleet.wait_up("b", true).await;
    let http = reqwest::Client::new();
    for i in 0..30 {
        stateless_echo(&http, &fleet.front, &format!("after{i}"))
            .await
            .unwrap();
    }
    let (ok, verified) = fleet.cli(&["audit", "verify", "--replicas", &fleet.admins()]);
    assert!(ok, "{verified}");
    assert_eq!(verified.matches(": ok: ").count(), 3, "{verified}");
    let (ok, merged) = fleet.cli(&[
        "audit",
        "query",
        "--replicas",
        &fleet.admins(),
        "--format",
        "json",
    ]);
    assert!(ok, "{merged}");
    let records: Vec<Value> = merged
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let times: Vec<u64> = records
        .iter()
        .map(|r| r["ts_us"].as_u64().unwrap())
        .collect();
    assert!(
        times.windows(2).all(|w| w[0] <= w[1]),
        "merged records are not in time order"
    );
    let replicas: std::collections::BTreeSet<&str> = records
        .iter()
        .filter_map(|r| r["replica"].as_str())
        .collect();
    assert_eq!(
        replicas.len(),
        3,
        "the merged log holds every replica's records"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_terminated_replica_drains_without_failing_a_call() {
    let _turn = TURN.lock().await;
    let mut fleet = Fleet::start().await;
    let c = fleet.replicas.remove("c").unwrap();
    let seen = mixed_load(&fleet, Duration::from_secs(7), || c.terminate()).await;
    eprintln!("SIGTERM: {} calls; {:?}", seen.calls, seen.sessions);
    assert!(
        seen.stateless.is_empty(),
        "stateless calls failed: {:?}",
        seen.stateless
    );
    for (owner, not_found, other) in &seen.sessions {
        assert!(
            other.is_empty(),
            "a session of {owner} saw a failed call: {other:?}"
        );
        // A session of the stopped replica is gone with it: one 404, and it initializes anew.
        let most = usize::from(owner == "c");
        assert!(
            *not_found <= most,
            "a session of {owner} saw {not_found} 404s"
        );
    }
    let mut c = c;
    assert!(
        c.wait_exit(Duration::from_secs(10)).await.is_some(),
        "c did not exit"
    );
    assert!(c.stderr().contains("Draining"), "{}", c.stderr());
    fleet.wait_up("c", false).await;
}
