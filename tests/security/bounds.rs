//! Bounds on what a stranger can open: host sessions (`server.max_sessions`,
//! `hosts.NAME.max_sessions`) on every host transport, the size of what `initialize` declares
//! (`clientInfo`, `capabilities`) and what of it is logged, per-session instances of an upstream
//! (`upstreams.NAME.max_instances`), and a repeated `initialize` that replaces a session (the
//! replaced one is closed, its instances stopped, nothing leaks). `connections` holds the
//! listener's bounds: the header-read timeout, the connection limit, idle keep-alive.

mod connections;

use std::time::Duration;

use crate::common;
use crate::common::{
    Bridge, Client, Daemon, LegacyHost, Via, alive, descendants, initialize_as, poll_until,
    sha256_hex, spawn_bridge, test_upstream, test_upstream_via,
};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

const ALICE: &str = "alice-bounds-token-51c2";
const BOB: &str = "bob-bounds-token-88e0";
/// The JSON-RPC code of a refused session (a session limit is reached).
const TOO_MANY_SESSIONS: i64 = -32013;
/// Generous bound for anything the daemon does on a loaded machine.
const WAIT: Duration = Duration::from_secs(60);

/// `[server]` on port 0 with `server` lines, then `rest`.
fn start(server: &str, rest: &str) -> Daemon {
    Daemon::start_with(
        &format!("[server]\nlisten = \"127.0.0.1:0\"\n{server}\n{rest}"),
        &[],
    )
}

/// The JSON-RPC error of a refused HTTP answer, after checking its status.
async fn refused(response: reqwest::Response, status: u16) -> Value {
    assert_eq!(response.status(), status, "unexpected status");
    let body: Value = serde_json::from_str(&response.text().await.unwrap()).unwrap();
    body["error"].clone()
}

async fn pings(client: &Client) -> bool {
    client
        .request("ping", json!({}))
        .await
        .get("result")
        .is_some()
}

/// The live processes under the daemon (its upstream instances).
fn upstream_processes(daemon: &Daemon) -> Vec<u32> {
    descendants(daemon.pid())
        .into_iter()
        .filter(|p| alive(*p))
        .collect()
}

/// Waits until the daemon has exactly `n` upstream processes; returns them.
async fn wait_processes(daemon: &Daemon, n: usize) -> Vec<u32> {
    let reached = poll_until(WAIT, || async { upstream_processes(daemon).len() == n }).await;
    let now = upstream_processes(daemon);
    assert!(reached, "expected {n} upstream processes, have {now:?}");
    now
}

/// Calls the test upstream's `echo` tool; the whole answer.
async fn echo(client: &Client) -> Value {
    let call = json!({"name": "up__echo", "arguments": {}});
    client.request("tools/call", call).await
}

/// Writes one line to the bridge's stdin.
async fn send(bridge: &mut Bridge, line: &Value) {
    let line = format!("{line}\n");
    bridge.stdin.write_all(line.as_bytes()).await.unwrap();
}

/// Waits until the admin API counts exactly `n` open sessions.
async fn wait_sessions(daemon: &Daemon, n: u64) {
    let reached = poll_until(WAIT, || async { daemon.status().await["sessions"] == n }).await;
    assert!(
        reached,
        "expected {n} sessions, status says {}",
        daemon.status().await["sessions"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_beyond_a_hosts_or_the_servers_limit_are_refused_with_429() {
    let daemon = start(
        "max_sessions = 3",
        &format!(
            "[hosts.alice]\ntoken_sha256 = \"{}\"\nmax_sessions = 2\n[hosts.bob]\ntoken_sha256 = \"{}\"\n{}",
            sha256_hex(ALICE),
            sha256_hex(BOB),
            test_upstream("up", &[])
        ),
    );
    let a1 = Client::connect_as(&daemon.url, ALICE).await;
    let a2 = Client::connect_as(&daemon.url, ALICE).await;

    let error = refused(initialize_as(&daemon.url, Some(ALICE)).await, 429).await;
    assert_eq!(error["code"], TOO_MANY_SESSIONS, "{error}");
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("`alice`") && message.contains("hosts.alice.max_sessions"),
        "{message}"
    );
    assert!(
        pings(&a1).await && pings(&a2).await,
        "earlier sessions work"
    );

    // Bob has no limit of his own, but the server's (3) is reached with his first.
    let b1 = Client::connect_as(&daemon.url, BOB).await;
    let error = refused(initialize_as(&daemon.url, Some(BOB)).await, 429).await;
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("`bob`") && message.contains("server.max_sessions"),
        "{message}"
    );
    let status = daemon.status().await;
    assert_eq!(status["sessions"], 3, "{status}");
    assert_eq!(status["max_sessions"], 3, "{status}");
    let alice = status["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["name"] == "alice")
        .cloned()
        .unwrap();
    assert_eq!(alice["sessions"], 2, "{alice}");
    assert_eq!(alice["max_sessions"], 2, "{alice}");

    // A closed session frees its slot.
    assert_eq!(a1.delete().await, 200);
    assert_eq!(initialize_as(&daemon.url, Some(ALICE)).await.status(), 200);
    assert!(pings(&a2).await && pings(&b1).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_limit_holds_on_legacy_sse_and_through_the_stdio_bridge() {
    let daemon = start("max_sessions = 1", &test_upstream("up", &[]));
    let first = Client::connect(&daemon.url).await;

    let mut legacy = LegacyHost::open(&daemon.url, "2024-11-05").await;
    let id = json!(7);
    legacy.events.expect_answer(&id, "initialize");
    let status = legacy
        .post(
            &json!({"jsonrpc": "2.0", "id": id, "method": "initialize", "params": {
            "protocolVersion": "2024-11-05", "capabilities": {},
            "clientInfo": {"name": "legacy", "version": "1"}}}),
        )
        .await;
    assert_eq!(status, 429);
    let (_, answer) = legacy.events.until_answer(&id).await;
    assert_eq!(answer["error"]["code"], TOO_MANY_SESSIONS, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap()
            .contains("server.max_sessions"),
        "{answer}"
    );

    let mut bridge = spawn_bridge(&daemon.url);
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "bridged", "version": "1"}}});
    bridge
        .stdin
        .write_all(format!("{init}\n").as_bytes())
        .await
        .unwrap();
    let line = tokio::time::timeout(WAIT, bridge.stdout.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let answer: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(answer["id"], 1, "{answer}");
    assert!(
        answer["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("server.max_sessions"),
        "{answer}"
    );
    assert!(pings(&first).await);
    assert_eq!(daemon.status().await["sessions"], 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_client_info_or_capabilities_is_refused_and_only_name_and_version_are_logged() {
    let daemon = start("", &test_upstream("up", &[]));
    let http = reqwest::Client::new();
    let init = |params: Value| {
        http.post(&daemon.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(
                json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params})
                    .to_string(),
            )
            .send()
    };
    let megabyte = "x".repeat(1024 * 1024);
    for _ in 0..5 {
        let params = json!({"protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "big", "version": "1", "blob": megabyte}});
        let error = refused(init(params).await.unwrap(), 400).await;
        assert_eq!(error["code"], -32602, "{error}");
        let message = error["message"].as_str().unwrap();
        assert!(
            message.contains("clientInfo") && message.contains("16384"),
            "{message}"
        );
    }
    let params = json!({"protocolVersion": "2025-11-25",
        "capabilities": {"experimental": {"blob": megabyte}},
        "clientInfo": {"name": "big", "version": "1"}});
    let error = refused(init(params).await.unwrap(), 400).await;
    assert!(
        error["message"].as_str().unwrap().contains("capabilities"),
        "{error}"
    );

    // Within the cap, but with a long name and extra fields: only a short name and version are
    // kept and logged.
    let long_name = "n".repeat(4000);
    let extra = "secret-extra-field-value";
    let params = json!({"protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": long_name, "version": "1.2.3", "extra": extra}});
    let response = init(params).await.unwrap();
    assert_eq!(response.status(), 200);
    let log = daemon.stderr();
    assert!(
        log.len() < 256 * 1024,
        "the log grew to {} bytes",
        log.len()
    );
    assert!(!log.contains(extra), "clientInfo's other fields are logged");
    assert!(!log.contains(&long_name), "the whole name is logged");
    let opened = log
        .lines()
        .find(|l| l.contains("Host session opened."))
        .unwrap()
        .to_owned();
    assert!(
        opened.contains(&"n".repeat(128)) && opened.contains("1.2.3"),
        "{opened}"
    );
    let sessions: Value = daemon.admin().json("/sessions").await;
    let client = sessions["sessions"][0]["client"].as_str().unwrap();
    assert_eq!(client.chars().count(), 128, "{client}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_session_instances_beyond_max_instances_are_refused_naming_the_upstream() {
    let daemon = start(
        "",
        &format!(
            "{}isolation = \"per-session\"\nmax_instances = 2\n",
            test_upstream("up", &[])
        ),
    );
    let a = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&a, |n| n.iter().any(|t| t == "up__echo"))
        .await;
    let b = Client::connect(&daemon.url).await;
    let c = Client::connect(&daemon.url).await;
    assert!(echo(&a).await.get("result").is_some());
    assert!(echo(&b).await.get("result").is_some());
    let answer = echo(&c).await;
    let message = common::assert_upstream_error(&answer, -32011, "up");
    assert!(message.contains("upstreams.up.max_instances"), "{message}");
    // Its earlier instances keep serving; an ended session's instance frees the slot.
    assert!(echo(&a).await.get("result").is_some());
    assert_eq!(b.delete().await, 200);
    let served = poll_until(WAIT, || async { echo(&c).await.get("result").is_some() }).await;
    assert!(served, "the freed slot was not given to the next session");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_legacy_initialize_closes_the_session_it_replaces() {
    let daemon = start(
        "",
        &format!(
            "{}isolation = \"per-session\"\n",
            test_upstream("up", &["--protocol-tools"])
        ),
    );
    let shared = wait_processes(&daemon, 1).await;
    let mut legacy = LegacyHost::open(&daemon.url, "2024-11-05").await;
    let params = json!({"protocolVersion": "2024-11-05", "capabilities": {},
        "clientInfo": {"name": "legacy", "version": "1"}});
    let (_, answer) = legacy.request("initialize", params.clone()).await;
    assert!(answer.get("result").is_some(), "{answer}");
    let call = json!({"name": "up__echo", "arguments": {}});
    let (_, answer) = legacy.request("tools/call", call.clone()).await;
    assert!(answer.get("result").is_some(), "{answer}");
    let with_instance = wait_processes(&daemon, 2).await;
    let first_instance = *with_instance.iter().find(|p| !shared.contains(p)).unwrap();
    let subscribe = json!({"uri": "up+test://up/hello"});
    let (_, answer) = legacy.request("resources/subscribe", subscribe).await;
    assert!(answer.get("result").is_some(), "{answer}");

    // The same host initializes again on the same endpoint: one session, the old instance gone.
    let (_, answer) = legacy.request("initialize", params).await;
    assert!(answer.get("result").is_some(), "{answer}");
    wait_sessions(&daemon, 1).await;
    let gone = poll_until(WAIT, || async { !alive(first_instance) }).await;
    assert!(
        gone,
        "the replaced session's instance {first_instance} still runs"
    );
    let (_, answer) = legacy.request("tools/call", call).await;
    assert!(answer.get("result").is_some(), "{answer}");
    let (_, answer) = legacy
        .request(
            "tools/call",
            json!({"name": "up__subscriptions", "arguments": {}}),
        )
        .await;
    assert_eq!(
        answer["result"]["content"][0]["text"], "[]",
        "the new instance holds no subscription of the old session: {answer}"
    );
    wait_processes(&daemon, 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_initialize_through_the_bridge_closes_the_session_it_replaces() {
    let daemon = start(
        "",
        &format!("{}isolation = \"per-session\"\n", test_upstream("up", &[])),
    );
    let shared = wait_processes(&daemon, 1).await;
    let mut bridge = spawn_bridge(&daemon.url);
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "bridged", "version": "1"}}});
    send(&mut bridge, &init).await;
    let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    send(&mut bridge, &initialized).await;
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "up__echo", "arguments": {}}});
    send(&mut bridge, &call).await;
    let with_instance = wait_processes(&daemon, 2).await;
    let first_instance = *with_instance.iter().find(|p| !shared.contains(p)).unwrap();
    send(&mut bridge, &init).await;
    wait_sessions(&daemon, 1).await;
    let gone = poll_until(WAIT, || async { !alive(first_instance) }).await;
    assert!(
        gone,
        "the replaced session's instance {first_instance} still runs"
    );
    drop(bridge);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_applies_new_session_limits() {
    let config = |server_max: usize, alice_max: usize| {
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nmax_sessions = {server_max}\n[hosts.alice]\ntoken_sha256 = \"{}\"\nmax_sessions = {alice_max}\n{}",
            sha256_hex(ALICE),
            test_upstream("up", &[])
        )
    };
    let daemon = Daemon::start_with(&config(3, 1), &[]);
    let reload = async |text: String| {
        std::fs::write(daemon.dir.path().join("mcpmux.toml"), text).unwrap();
        let answer = daemon.admin_post("/reload", json!({})).await;
        assert!(
            answer.status().is_success(),
            "{}",
            answer.text().await.unwrap()
        );
    };
    let first = Client::connect_as(&daemon.url, ALICE).await;
    let error = refused(initialize_as(&daemon.url, Some(ALICE)).await, 429).await;
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("hosts.alice.max_sessions")
    );

    reload(config(3, 2)).await;
    assert_eq!(initialize_as(&daemon.url, Some(ALICE)).await.status(), 200);
    reload(config(2, 5)).await;
    let error = refused(initialize_as(&daemon.url, Some(ALICE)).await, 429).await;
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("server.max_sessions"),
        "{error}"
    );
    assert!(pings(&first).await);
}

#[test]
fn limits_that_would_refuse_everything_or_do_nothing_are_refused_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let up = test_upstream("up", &[]);
    let host = format!("[hosts.alice]\ntoken_sha256 = \"{}\"\n", sha256_hex(ALICE));
    for (config, culprit) in [
        (
            format!("[server]\nmax_sessions = 0\n{up}"),
            "server.max_sessions",
        ),
        (
            format!("[server]\nmax_connections = 0\n{up}"),
            "server.max_connections",
        ),
        (
            format!("[server]\nheader_timeout = \"0s\"\n{up}"),
            "server.header_timeout",
        ),
        (format!("[server]\nworkers = 0\n{up}"), "server.workers"),
        (format!("[server]\nworkers = 5000\n{up}"), "server.workers"),
        (
            format!("{host}max_sessions = 0\n{up}"),
            "hosts.alice.max_sessions",
        ),
        (
            format!("{up}max_instances = 2\n"),
            "upstreams.up.max_instances",
        ),
        (
            format!("{up}isolation = \"per-session\"\nmax_instances = 0\n"),
            "upstreams.up.max_instances",
        ),
    ] {
        common::assert_check_refuses(dir.path(), &config, culprit);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_error_answer_of_a_remote_upstream_is_read_only_as_far_as_its_excerpt() {
    for via in [Via::Http, Via::Sse] {
        let fault = ["--http-fault", "endless500", "--http-fault-tool", "slow"];
        let (table, _server) = test_upstream_via("web", via, &fault);
        let daemon = start("", &format!("{table}request_timeout = \"40s\"\n"));
        let client = Client::connect(&daemon.url).await;
        daemon
            .wait_for_tools(&client, |n| n.iter().any(|t| t == "web__slow"))
            .await;
        let call = json!({"name": "web__slow", "arguments": {"ms": 0}});
        let answer = client.request("tools/call", call).await;
        // Not a timeout: the error is known as soon as its start is read.
        let message = common::assert_upstream_error(&answer, -32010, "web");
        assert!(message.contains("500"), "{via:?}: {message}");
        assert!(
            echo_on(&client, "web").await,
            "{via:?}: the upstream stays up"
        );
    }
}

/// Whether `prefix__echo` answers.
async fn echo_on(client: &Client, prefix: &str) -> bool {
    let call = json!({"name": format!("{prefix}__echo"), "arguments": {}});
    client
        .request("tools/call", call)
        .await
        .get("result")
        .is_some()
}
