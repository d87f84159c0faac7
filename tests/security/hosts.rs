//! Hosts as principals (`[hosts.NAME]` with the SHA-256 digest of a bearer token, or a token
//! file): once any host is configured, a request without a valid token is 401 with a Bearer
//! challenge, on every endpoint and both HTTP transports; a session belongs to the principal
//! that opened it (another principal presenting its id gets 404); audit records name the
//! principal; no token appears in the daemon's log; listening beyond loopback with no host
//! configured is refused at startup.

use crate::common;
use crate::common::{
    Client, Daemon, MCPMUX, initialize_as, sha256_hex, spawn_bridge_as, test_upstream,
};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

const ALICE: &str = "alice-secret-token-3f9a";
const BOB: &str = "bob-secret-token-7c21";

/// A daemon with hosts `alice` (by digest) and `bob` (by token file) and one test upstream.
fn start() -> (Daemon, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let bob_file = dir.path().join("bob.token");
    std::fs::write(&bob_file, format!("{BOB}\n")).unwrap();
    let daemon = Daemon::start(&format!(
        "[hosts.alice]\ntoken_sha256 = \"{}\"\n[hosts.bob]\ntoken_file = {}\n{}",
        sha256_hex(ALICE),
        serde_json::to_string(bob_file.to_str().unwrap()).unwrap(),
        test_upstream("up", &[])
    ));
    (daemon, dir)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_configured_hosts_get_in_and_a_session_is_its_principals_alone() {
    let (daemon, _dir) = start();

    // No token, a wrong one, a malformed header: 401 with a Bearer challenge.
    for token in [None, Some("not-a-known-token"), Some("")] {
        let refused = initialize_as(&daemon.url, token).await;
        assert_eq!(refused.status(), 401, "{token:?}");
        let challenge = refused.headers()["www-authenticate"]
            .to_str()
            .unwrap()
            .to_owned();
        assert!(challenge.starts_with("Bearer"), "{challenge}");
        if token.is_some_and(|t| !t.is_empty()) {
            assert!(challenge.contains("invalid_token"), "{challenge}");
        }
    }
    let legacy = reqwest::get(daemon.url.replace("/mcp", "/sse"))
        .await
        .unwrap();
    assert_eq!(legacy.status(), 401);

    // Alice and Bob each get in with their own token.
    let alice = Client::connect_as(&daemon.url, ALICE).await;
    let bob = Client::connect_as(&daemon.url, BOB).await;
    daemon
        .wait_for_tools(&alice, |n| n.iter().any(|t| t == "up__echo"))
        .await;
    assert!(
        alice
            .tool_text("up__echo", json!({"who": "alice"}))
            .await
            .contains("alice")
    );
    assert!(
        bob.tool_text("up__echo", json!({"who": "bob"}))
            .await
            .contains("bob")
    );

    // Alice's session id in Bob's hands (or with no token) does not exist: 404 or 401, on
    // POST, GET and DELETE.
    let stolen = alice.impersonate(Some(BOB));
    let ping = json!({"jsonrpc": "2.0", "id": 5, "method": "ping"});
    assert_eq!(stolen.post(&ping).await.status(), 404);
    assert_eq!(stolen.delete().await, 404);
    let get = reqwest::Client::new()
        .get(&daemon.url)
        .bearer_auth(BOB)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", alice.session.as_deref().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(get.status(), 404);
    assert_eq!(alice.impersonate(None).post(&ping).await.status(), 401);
    // Alice's session is untouched.
    assert!(
        alice
            .tool_text("up__echo", json!({"still": 1}))
            .await
            .contains("still")
    );

    // Audit records name the principal; `--host` filters by it.
    let admin = daemon.admin();
    let query = |principal: &'static str| {
        let admin = admin.clone();
        async move {
            let records = (admin.json(&format!(
                "/audit/query?principal={principal}&method=tools/call&limit=100"
            )))
            .await;
            records["records"].as_array().cloned().unwrap_or_default()
        }
    };
    let alices = query("alice").await;
    let bobs = query("bob").await;
    assert_eq!(alices.len(), 2, "{alices:?}");
    assert_eq!(bobs.len(), 1, "{bobs:?}");
    assert!(
        alices.iter().all(|r| r["principal"] == "alice"),
        "{alices:?}"
    );
    let printed = std::process::Command::new(MCPMUX)
        .args([
            "audit", "query", "--admin", &admin.url, "--host", "bob", "--format", "json",
        ])
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&printed.stdout).into_owned();
    assert!(
        printed.contains("\"bob\"") && !printed.contains("\"alice\""),
        "{printed}"
    );

    // No token in the log.
    let log = daemon.stderr();
    for token in [ALICE, BOB] {
        assert!(!log.contains(token), "a host token leaked into the log");
    }
}

#[test]
fn listening_beyond_loopback_without_any_host_is_refused_at_startup() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("mcpmux.toml");
    std::fs::write(&config, test_upstream("up", &[])).unwrap();
    // Refused before it binds: nothing listens beyond loopback.
    let out = std::process::Command::new(MCPMUX)
        .args([
            "serve",
            "--config",
            config.to_str().unwrap(),
            "--listen",
            "0.0.0.0:0",
        ])
        .args(["--state-dir", dir.path().join("state").to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("0.0.0.0") && stderr.contains("[hosts"),
        "{stderr}"
    );
}

/// `mcpmux stdio` presents its host's token (`MCPMUX_TOKEN`); without one the daemon refuses it
/// and the bridge says so in the error it answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stdio_bridge_presents_its_hosts_token() {
    let (daemon, _dir) = start();
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "bridge-host", "version": "1"}}});
    for (token, admitted) in [(Some(ALICE), true), (None, false)] {
        let mut bridge = spawn_bridge_as(&daemon.url, token);
        let line = format!("{initialize}\n");
        bridge.stdin.write_all(line.as_bytes()).await.unwrap();
        let answer = tokio::time::timeout(
            std::time::Duration::from_secs(10),
            bridge.stdout.next_line(),
        )
        .await
        .unwrap()
        .unwrap()
        .unwrap();
        let answer: Value = serde_json::from_str(&answer).unwrap();
        if admitted {
            assert!(answer["result"]["protocolVersion"].is_string(), "{answer}");
        } else {
            let message = answer["error"]["message"].as_str().unwrap_or_default();
            assert!(message.contains("401"), "{answer}");
        }
    }
}

/// A host's limits: requests in flight at once (-32011) and requests per second (-32012), each
/// error naming the limit and its key; other hosts are not held back; status counts per host.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_host_is_held_to_its_own_limits() {
    let daemon = Daemon::start(&format!(
        "[hosts.alice]\ntoken_sha256 = \"{}\"\nmax_in_flight = 1\n\
         [hosts.bob]\ntoken_sha256 = \"{}\"\nmax_calls_per_second = 5\n{}",
        sha256_hex(ALICE),
        sha256_hex(BOB),
        test_upstream("up", &[])
    ));
    let alice = Client::connect_as(&daemon.url, ALICE).await;
    let bob = Client::connect_as(&daemon.url, BOB).await;
    daemon
        .wait_for_tools(&alice, |n| n.iter().any(|t| t == "up__slow"))
        .await;
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;

    // Alice: one at a time.
    let slow = alice.start_tool("up__slow", json!({"ms": 3000}));
    let holding = common::poll_until(std::time::Duration::from_secs(10), || async {
        let status = daemon.status().await;
        (status["hosts"].as_array().into_iter().flatten())
            .any(|h| h["name"] == "alice" && h["in_flight"] == 1)
    })
    .await;
    assert!(holding, "alice's slow call never got its slot");
    let second = alice.request("ping", json!({})).await;
    assert_eq!(second["error"]["code"], -32011, "{second}");
    let message = second["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("alice") && message.contains("max_in_flight"),
        "{message}"
    );
    // Bob is not held back by Alice's slot.
    assert!(bob.request("ping", json!({})).await["result"].is_object());
    let (_, answer) = slow.finish().await;
    assert!(answer["result"].is_object(), "{answer}");
    assert!(alice.request("ping", json!({})).await["result"].is_object());

    // Bob: 5 per second; a burst of 20 gets 5 or so through.
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let mut refused = Vec::new();
    let burst = std::time::Instant::now();
    for _ in 0..20 {
        let answer = bob.request("ping", json!({})).await;
        if answer["error"]["code"] == -32012 {
            let message = answer["error"]["message"].as_str().unwrap_or_default();
            refused.push(message.to_owned());
        }
    }
    // The bucket's 5, plus what it refilled while the burst lasted (5 per second).
    let admitted = 20 - refused.len();
    let refilled = (burst.elapsed().as_secs_f64() * 5.0).ceil() as usize;
    assert!(
        admitted >= 5 && admitted <= 5 + refilled,
        "{admitted} admitted in {:?}: {refused:?}",
        burst.elapsed()
    );
    assert!(refused[0].contains("max_calls_per_second"), "{refused:?}");

    let status = daemon.status().await;
    let host = |name: &str| {
        status["hosts"]
            .as_array()
            .and_then(|a| a.iter().find(|h| h["name"] == name).cloned())
            .unwrap_or_default()
    };
    assert_eq!(host("alice")["refused"], 1, "{status}");
    assert_eq!(host("bob")["refused"], refused.len(), "{status}");
    assert_eq!(host("alice")["max_in_flight"], 1);
}

/// A host's bearer token is never passed to an upstream: a remote upstream sees only its own
/// configured token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hosts_token_never_reaches_an_upstream() {
    let (table, far) = common::test_upstream_via("far", common::Via::Http, &[]);
    let far = far.unwrap();
    let daemon = Daemon::start_with_env(
        &format!(
            "[hosts.alice]\ntoken_sha256 = \"{}\"\n{table}bearer_token_env = \"FAR_TOKEN\"\n",
            sha256_hex(ALICE)
        ),
        &[("FAR_TOKEN", "far-upstream-token")],
    );
    let alice = Client::connect_as(&daemon.url, ALICE).await;
    daemon
        .wait_for_tools(&alice, |n| n.iter().any(|t| t == "far__echo"))
        .await;
    assert!(
        alice
            .tool_text("far__echo", json!({"x": 1}))
            .await
            .contains('x')
    );
    let seen: Vec<String> = reqwest::get(far.url("/authorizations"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(seen, ["Bearer far-upstream-token"]);
}
