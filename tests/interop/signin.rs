//! Each person their own identity toward an upstream, signed in through their host: the test
//! upstream over Streamable HTTP behind its own authorization server (which asks who signs in and
//! issues tokens ending in that name, and echoes the token each call came with: `whoami`), set
//! `credentials = "per-principal"` in mcpmux with an `[oauth]` of its own.
//!
//! The official Python SDK is the host — as a 2025-11-25 host declaring URL elicitation (mcpmux
//! asks it within the call) and as a 2026-07-28 host (an `input_required` round its SDK answers
//! and retries) — and answers mcpmux's URL elicitation by opening the sign-in link in Debian's
//! chromium (`signin_browser.mjs`): the person proves who they are with the host's token, signs
//! in at the authorization server, and the call that asked is answered, made with that
//! person's own token. Then both hosts call at once, each with its own token; revoking one
//! (`mcpmux logout rem --principal alice`) leaves the other working.

use std::path::PathBuf;

use futures_util::future::join_all;
use serde_json::{Value, json};

use crate::common::{Client, Daemon, RemoteServer, peers, sha256_hex};

const ALICE: &str = "alice-host-token-0123456789";
const BOB: &str = "bob-host-token-0123456789";

/// The upstream, protected, asking who signs in; its catalog read with a token of its own.
fn server() -> RemoteServer {
    RemoteServer::whoami()
}

fn daemon_for(server: &RemoteServer) -> Daemon {
    Daemon::start_with_env(
        &format!(
            "[hosts.alice]\ntoken_sha256 = \"{}\"\n[hosts.bob]\ntoken_sha256 = \"{}\"\n\
             [upstreams.rem]\nurl = \"{}\"\nbearer_token_env = \"CATALOG_TOKEN\"\n\
             credentials = \"per-principal\"\n[upstreams.rem.oauth]\n",
            sha256_hex(ALICE),
            sha256_hex(BOB),
            server.url("/mcp"),
        ),
        &[("CATALOG_TOKEN", "catalog-reader")],
    )
}

/// The Python SDK host calling `rem__whoami` as `token` in `mode`, signing `user` in through
/// the browser when asked: the tool's result.
async fn python_host(daemon: &Daemon, token: &str, mode: &str, user: &str) -> Value {
    let here = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/interop");
    let out = tokio::process::Command::new(peers::python())
        .arg(here.join("signin_host.py"))
        .args([&daemon.url, token, mode, "rem__whoami", "{}", "--"])
        .arg(peers::npm_bin("node"))
        .arg(here.join("signin_browser.mjs"))
        .args([token, user])
        .env("PEERS_NODE_MODULES", peers::npm_modules())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(std::time::Duration::from_secs(120), out)
        .await
        .expect("the host finished within two minutes")
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the {mode} host failed: {stderr}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"))
}

fn seen(result: &Value) -> String {
    let seen = &result["structuredContent"]["authorization"];
    seen.as_str()
        .unwrap_or_else(|| panic!("no authorization seen: {result}"))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_person_signs_in_through_their_host_and_calls_as_themselves() {
    assert!(
        std::path::Path::new("/usr/bin/chromium").exists(),
        "the sign-in browser test needs Debian's chromium (.ci/run installs it)"
    );
    let server = server();
    let daemon = daemon_for(&server);
    let probe = Client::connect_as(&daemon.url, ALICE).await;
    daemon
        .wait_for_tools(&probe, |n| n.iter().any(|n| n == "rem__whoami"))
        .await;

    // Alice's host speaks 2025-11-25: mcpmux asks it within the call.
    let alice = python_host(&daemon, ALICE, "legacy", "alice").await;
    assert!(seen(&alice).ends_with(".alice"), "{alice}");
    // Bob's host speaks 2026-07-28: an input_required round, then its retry.
    let bob = python_host(&daemon, BOB, "2026-07-28", "bob").await;
    assert!(seen(&bob).ends_with(".bob"), "{bob}");
    let stats: Value = server.report("/oauth-stats").await;
    assert_eq!(stats["authorization_code"], 2, "{stats}");

    // Both at once, each with its own token, over many calls.
    let hosts = [
        (Client::connect_as(&daemon.url, ALICE).await, ".alice"),
        (Client::connect_as(&daemon.url, BOB).await, ".bob"),
    ];
    let calls = (0..10).flat_map(|_| {
        hosts.iter().map(|(host, whose)| async move {
            let answer = host
                .request(
                    "tools/call",
                    json!({"name": "rem__whoami", "arguments": {}}),
                )
                .await;
            (seen(&answer["result"]), *whose)
        })
    });
    for (seen, whose) in join_all(calls).await {
        assert!(seen.ends_with(whose), "{seen} is not {whose}'s token");
    }
    let status = daemon.upstream_status("rem").await;
    assert_eq!(status["signed_in"], 2, "{status}");
    assert!(
        !status.to_string().contains("mcpmux-test-access"),
        "{status}"
    );

    // Alice's sign-in revoked: her next call is asked to sign in again; Bob goes on.
    let out = daemon.cli(&["logout", "rem", "--principal", "alice"]);
    assert!(out.contains("alice"), "{out}");
    let again = hosts[0]
        .0
        .request(
            "tools/call",
            json!({"name": "rem__whoami", "arguments": {}}),
        )
        .await;
    assert_eq!(again["error"]["code"], -32042, "{again}");
    let url = again["error"]["data"]["elicitations"][0]["url"]
        .as_str()
        .unwrap_or_default();
    assert!(
        url.starts_with(&daemon.url.replace("/mcp", "/signin/")),
        "{again}"
    );
    let bob_still = hosts[1]
        .0
        .request(
            "tools/call",
            json!({"name": "rem__whoami", "arguments": {}}),
        )
        .await;
    assert!(seen(&bob_still["result"]).ends_with(".bob"), "{bob_still}");
    assert_eq!(daemon.upstream_status("rem").await["signed_in"], 1);
}
