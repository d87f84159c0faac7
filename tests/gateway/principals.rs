//! Each principal its own identity toward an upstream (`credentials = "per-principal"`): the
//! upstream proves which identity every call came with (the test upstream's `whoami`: its
//! process's `MCPMUX_TEST_WHO`, the `Authorization` header the call's POST carried), for three
//! principals calling at once, from handshake-era sessions and 2026-07-28 requests alike, over
//! stdio (one process per principal, started with its environment) and over Streamable HTTP (one
//! connection per principal, with its bearer token).

use std::time::Duration;

use futures_util::future::join_all;
use serde_json::{Value, json};

use crate::common::{
    Client, Daemon, RemoteServer, alive, descendants, poll_until, sha256_hex, test_upstream,
};
use crate::modern::ModernHost;

const ALICE: &str = "alice-host-token";
const BOB: &str = "bob-host-token";
const CAROL: &str = "carol-host-token";
/// Calls each principal makes at once, per era.
const CALLS: usize = 12;

fn hosts() -> String {
    format!(
        "[hosts.alice]\ntoken_sha256 = \"{}\"\n[hosts.bob]\ntoken_sha256 = \"{}\"\n[hosts.carol]\ntoken_sha256 = \"{}\"\n",
        sha256_hex(ALICE),
        sha256_hex(BOB),
        sha256_hex(CAROL)
    )
}

/// `whoami`'s answer in a handshake-era tools/call response.
fn identity(response: &Value) -> Value {
    let result = &response["result"];
    assert!(result["isError"] != json!(true), "{response}");
    result["structuredContent"].clone()
}

/// Every principal calls `tool` `CALLS` times from one session and `CALLS` times as a stateless
/// host, all at once; each answer must carry `expected(principal)`.
async fn everyone_calls(
    daemon: &Daemon,
    tool: &str,
    field: &str,
    expected: impl Fn(&str) -> Value,
) {
    let principals = [("alice", ALICE), ("bob", BOB), ("carol", CAROL)];
    let mut sessions = Vec::new();
    for (_, token) in principals {
        sessions.push(Client::connect_as(&daemon.url, token).await);
    }
    let modern: Vec<ModernHost> = (principals.iter())
        .map(|(_, token)| ModernHost::as_host(&daemon.url, token, json!({})))
        .collect();
    let mut calls = Vec::new();
    for (i, (name, _)) in principals.iter().enumerate() {
        for n in 0..CALLS {
            let session = &sessions[i];
            let host = &modern[i];
            calls.push(Box::pin(async move {
                let params = json!({"name": tool, "arguments": {}});
                let got = identity(&session.request("tools/call", params).await);
                (name.to_string(), format!("session call {n}"), got)
            })
                as std::pin::Pin<Box<dyn std::future::Future<Output = _> + Send>>);
            calls.push(Box::pin(async move {
                let params = json!({"name": tool, "arguments": {}});
                let answer = host.request(n as u64 + 1, "tools/call", params).await;
                let got = answer.last()["result"]["structuredContent"].clone();
                (name.to_string(), format!("stateless call {n}"), got)
            }));
        }
    }
    let answers = join_all(calls).await;
    assert_eq!(answers.len(), principals.len() * CALLS * 2);
    for (name, which, got) in answers {
        assert_eq!(
            got[field],
            expected(&name),
            "{name}'s {which} came with {got}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_principal_process_runs_with_each_principals_own_environment() {
    let dir = tempfile::tempdir().unwrap();
    let bob_file = dir.path().join("bob-secret");
    std::fs::write(&bob_file, "bob-from-a-file\n").unwrap();
    let config = |bob: bool, carol: bool| {
        let mut hosts = hosts();
        if !carol {
            hosts = hosts.replace("[hosts.carol]", "[retired.carol]");
            hosts.truncate(hosts.find("[retired.carol]").unwrap());
        }
        let bob = match bob {
            true => format!(
                "[hosts.bob.upstreams.solo]\nenv_from_file = {{ MCPMUX_TEST_WHO = {:?} }}\n",
                bob_file.to_str().unwrap()
            ),
            false => String::new(),
        };
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n{hosts}[hosts.alice.upstreams.solo]\nenv = {{ MCPMUX_TEST_WHO = \"alice-as-written\" }}\n\
             {bob}{}credentials = \"per-principal\"\n",
            test_upstream("solo", &["--whoami"])
        )
    };
    let daemon = Daemon::start_with(&config(true, true), &[]);
    let first = Client::connect_as(&daemon.url, ALICE).await;
    daemon
        .wait_for_tools(&first, |n| n.iter().any(|n| n == "solo__whoami"))
        .await;
    everyone_calls(&daemon, "solo__whoami", "env", |name| match name {
        "alice" => json!("alice-as-written"),
        "bob" => json!("bob-from-a-file"),
        // No table of its own: its own process, with nothing the others have.
        _ => Value::Null,
    })
    .await;
    // The shared process (the catalog's) and one per principal, whichever era it used.
    let processes = || -> usize {
        (descendants(daemon.pid()).into_iter())
            .filter(|p| alive(*p))
            .count()
    };
    let count = |n: usize| {
        let processes = &processes;
        async move {
            let reached = poll_until(Duration::from_secs(20), || async { processes() == n }).await;
            assert!(
                reached,
                "expected {n} upstream processes, have {}",
                processes()
            );
        }
    };
    count(4).await;
    assert_eq!(daemon.upstream_status("solo").await["principals"], 3);

    // Bob's own identity is revoked and Carol is gone: their instances stop; Alice's goes on.
    std::fs::write(daemon.dir.path().join("mcpmux.toml"), config(false, false)).unwrap();
    let answer = daemon.admin_post("/reload", json!({})).await;
    assert!(
        answer.status().is_success(),
        "{}",
        answer.text().await.unwrap()
    );
    count(2).await;
    let call = json!({"name": "solo__whoami", "arguments": {}});
    let alice = identity(&first.request("tools/call", call.clone()).await);
    assert_eq!(alice["env"], json!("alice-as-written"));
    let bob = Client::connect_as(&daemon.url, BOB).await;
    let bob = identity(&bob.request("tools/call", call).await);
    assert_eq!(
        bob["env"],
        Value::Null,
        "bob's instance runs without what was revoked"
    );
    count(3).await;
    assert_eq!(daemon.upstream_status("solo").await["principals"], 2);
    let carol = crate::common::initialize_as(&daemon.url, Some(CAROL)).await;
    assert_eq!(carol.status(), 401);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_principal_remote_upstream_gets_each_principals_own_token() {
    let dir = tempfile::tempdir().unwrap();
    let alice_file = dir.path().join("alice-upstream-token");
    std::fs::write(&alice_file, "alice-upstream-token\n").unwrap();
    let server = RemoteServer::test_upstream("rem", 0, &["--whoami"]);
    let daemon = Daemon::start_with_env(
        &format!(
            "{}[hosts.alice.upstreams.rem]\nbearer_token_file = {:?}\n\
             [hosts.bob.upstreams.rem]\nbearer_token_env = \"BOB_UPSTREAM_TOKEN\"\n\
             headers = {{ \"X-Team\" = \"bob's\" }}\n\
             [hosts.carol.upstreams.rem]\nbearer_token_env = \"CAROL_UPSTREAM_TOKEN\"\n\
             [upstreams.rem]\nurl = \"{}\"\nbearer_token_env = \"CATALOG_TOKEN\"\n\
             credentials = \"per-principal\"\n",
            hosts(),
            alice_file.to_str().unwrap(),
            server.url("/mcp")
        ),
        &[
            ("BOB_UPSTREAM_TOKEN", "bob-upstream-token"),
            ("CAROL_UPSTREAM_TOKEN", "carol-upstream-token"),
            ("CATALOG_TOKEN", "the-catalog-reader"),
        ],
    );
    let first = Client::connect_as(&daemon.url, ALICE).await;
    daemon
        .wait_for_tools(&first, |n| n.iter().any(|n| n == "rem__whoami"))
        .await;
    everyone_calls(&daemon, "rem__whoami", "authorization", |name| {
        json!(format!("Bearer {name}-upstream-token"))
    })
    .await;
    // Alice's session id in Bob's hands reaches nothing of hers: not her session, so not her
    // connection or token.
    let stolen = first.impersonate(Some(BOB));
    let call = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                      "params": {"name": "rem__whoami", "arguments": {}}});
    assert_eq!(stolen.post(&call).await.status(), 404);

    // The audit log names who made each call, never the tokens it went with.
    let whoami_calls = |audit: &str| -> Vec<Value> {
        (audit.lines())
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|r| r["target"] == "rem__whoami" && r["outcome"] == "ok")
            .collect()
    };
    let all = CALLS * 2 * 3;
    poll_until(Duration::from_secs(20), || async {
        whoami_calls(&daemon.audit_json()).len() >= all
    })
    .await;
    let audit = daemon.audit_json();
    let calls = whoami_calls(&audit);
    for name in ["alice", "bob", "carol"] {
        let theirs = (calls.iter()).filter(|r| r["principal"] == name).count();
        assert_eq!(
            theirs,
            CALLS * 2,
            "{name}'s calls in the audit log: {audit}"
        );
    }
    for token in ["upstream-token", "the-catalog-reader", ALICE, BOB, CAROL] {
        assert!(!audit.contains(token), "the audit log holds {token}");
        assert!(
            !daemon.stderr().contains(token),
            "the daemon's log holds {token}"
        );
    }
    // Calls never went out as the catalog's identity; every identity the server saw is one of
    // the four.
    let seen: Vec<String> = server.report("/authorizations").await;
    let allowed = [
        "Bearer alice-upstream-token",
        "Bearer bob-upstream-token",
        "Bearer carol-upstream-token",
        "Bearer the-catalog-reader",
    ];
    assert!(
        seen.iter().all(|s| allowed.contains(&s.as_str())),
        "the upstream saw {seen:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_principal_instances_are_bounded_and_stop_when_idle() {
    let daemon = Daemon::start(&format!(
        "session_idle_timeout = \"4s\"\n{}{}credentials = \"per-principal\"\nmax_instances = 1\n",
        hosts(),
        test_upstream("solo", &["--whoami"])
    ));
    let call = json!({"name": "solo__whoami", "arguments": {}});
    let alice = Client::connect_as(&daemon.url, ALICE).await;
    daemon
        .wait_for_tools(&alice, |n| n.iter().any(|n| n == "solo__whoami"))
        .await;
    identity(&alice.request("tools/call", call.clone()).await);
    // Alice's instance is the one the upstream may run: Bob is refused, naming the limit.
    let bob = ModernHost::as_host(&daemon.url, BOB, json!({}));
    let refused = bob.request(1, "tools/call", call.clone()).await;
    let message = refused.last()["error"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.contains("upstreams.solo.max_instances"),
        "{}",
        refused.last()
    );
    // Once Alice's instance has idled out (and her session with it), Bob gets one.
    let served = poll_until(Duration::from_secs(30), || async {
        let answer = bob.request(2, "tools/call", call.clone()).await;
        answer.last()["result"]["structuredContent"].is_object()
    })
    .await;
    assert!(served, "bob never got an instance: {}", daemon.stderr());
    assert_eq!(daemon.upstream_status("solo").await["principals"], 1);
}
