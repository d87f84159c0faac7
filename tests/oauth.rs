//! Signing in to a remote upstream with OAuth, against our test upstream in its OAuth mode (its
//! own authorization server, with short-lived access tokens and rotating refresh tokens):
//! before a sign-in the upstream is `needs-login` and a host's call names the command;
//! `mcpmux login` works as a person runs it; a live host session across several token expiries
//! never sees an error; a revoked refresh token leaves the upstream `needs-login` with a clear
//! host error; no token appears in any log line, status, audit record or host error.

#![allow(clippy::unwrap_used)]

mod common;

use std::io::BufRead;
use std::time::{Duration, Instant};

use common::{Client, Daemon, MCPMUX, RemoteServer, assert_upstream_error, poll_until};
use serde_json::{Value, json};

const WEB: &str = "web";

async fn echo(client: &Client, n: u64) -> Value {
    client
        .request(
            "tools/call",
            json!({"name": "web__echo", "arguments": {"n": n}}),
        )
        .await
}

fn echoed(answer: &Value, n: u64) -> bool {
    answer["result"]["structuredContent"]["params"]["arguments"]["n"] == n
}

async fn state(daemon: &Daemon) -> String {
    daemon.upstream_status(WEB).await["state"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

async fn wait_state(daemon: &Daemon, wanted: &str) {
    let reached = poll_until(Duration::from_secs(20), || async {
        state(daemon).await == wanted
    })
    .await;
    assert!(
        reached,
        "web never became {wanted}: {}\n{}",
        daemon.upstream_status(WEB).await,
        daemon.stderr()
    );
}

/// `mcpmux login web` as a person runs it: read the URL it prints, open it in a "browser" (that
/// follows the authorization server's redirect back to mcpmux), wait for the command to end.
async fn login(daemon: &Daemon) {
    let admin = daemon.admin_url.clone().unwrap();
    let mut child = std::process::Command::new(MCPMUX)
        .args(["login", WEB, "--admin", &admin, "--no-browser"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Its output is read to the end, as a terminal would.
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let line = line.trim().to_owned();
            if line.starts_with("http://") {
                if let Some(tx) = tx.take() {
                    let _ = tx.send(line);
                }
            }
        }
    });
    let url = tokio::time::timeout(Duration::from_secs(20), rx)
        .await
        .expect("mcpmux login printed no URL")
        .unwrap();
    let browser = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let redirect = browser.get(&url).send().await.unwrap();
    assert_eq!(redirect.status(), 302, "{url}");
    let back = redirect.headers()["location"].to_str().unwrap().to_owned();
    assert!(back.starts_with("http://127.0.0.1:"), "{back}");
    let landed = browser.get(&back).send().await.unwrap();
    assert!(landed.status().is_success());
    let status = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    assert!(
        status.status.success(),
        "mcpmux login failed: {}",
        String::from_utf8_lossy(&status.stderr)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_in_upstream_stays_signed_in_across_token_expiries_until_its_refresh_is_revoked() {
    let dir = tempfile::tempdir().unwrap();
    let revoke = dir.path().join("revoke");
    let server = RemoteServer::test_upstream(
        WEB,
        0,
        &[
            "--oauth-token-ttl",
            "6",
            "--oauth-revoke-while",
            revoke.to_str().unwrap(),
        ],
    );
    let daemon = Daemon::start(&format!(
        "[upstreams.web]\nurl = \"{}\"\nrestart_initial_backoff = \"100ms\"\n{}",
        server.url("/mcp"),
        common::test_upstream("good", &[])
    ));
    let host = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&host, |n| n.iter().any(|t| t == "good__echo"))
        .await;

    // Before a sign-in: needs-login, and the host's error names the upstream and the command.
    wait_state(&daemon, "needs-login").await;
    let refused = echo(&host, 0).await;
    let message = assert_upstream_error(&refused, -32010, WEB);
    assert!(message.contains("mcpmux login web"), "{message}");
    let status = daemon.upstream_status(WEB).await;
    assert!(
        status["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("mcpmux login web") && e.contains("401")),
        "{status}"
    );

    login(&daemon).await;
    wait_state(&daemon, "ready").await;
    let token_file = daemon_state_dir(&daemon).join("oauth/web.json");
    let mode = std::fs::metadata(&token_file)
        .map(|m| std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o777);
    assert_eq!(mode.unwrap(), 0o600, "{}", token_file.display());

    // One host session, calling for 15 s: the 6 s tokens are refreshed ahead of expiry and the
    // host never sees an error (nor a restart).
    let host = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&host, |n| n.iter().any(|t| t == "web__echo"))
        .await;
    let until = Instant::now() + Duration::from_secs(15);
    let mut n = 0;
    while Instant::now() < until {
        n += 1;
        let answer = echo(&host, n).await;
        assert!(
            echoed(&answer, n),
            "call {n} failed across a token refresh: {answer}\n{}",
            daemon.stderr()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let stats: Value = reqwest::get(server.url("/oauth-stats"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(stats["authorization_code"], 1, "{stats}");
    assert!(
        stats["refresh_token"].as_u64() >= Some(2),
        "the tokens were not refreshed: {stats}"
    );
    assert_eq!(daemon.upstream_status(WEB).await["restarts"], 0);

    // The refresh token is revoked: once the access token expires the upstream needs a sign-in
    // again, says so, and the host's error names the command.
    std::fs::write(&revoke, "").unwrap();
    wait_state(&daemon, "needs-login").await;
    let answer = echo(&host, 0).await;
    let message = assert_upstream_error(&answer, -32010, WEB);
    assert!(message.contains("mcpmux login web"), "{message}");
    let good = host
        .request("tools/call", json!({"name": "good__echo", "arguments": {}}))
        .await;
    assert!(good["result"].is_object(), "{good}");

    // No token anywhere.
    let audit = daemon
        .admin_get("/audit/query?limit=1000")
        .await
        .text()
        .await
        .unwrap();
    let status = daemon.status().await.to_string();
    for (what, text) in [
        ("the daemon's log", daemon.stderr()),
        ("the status", status),
        ("the audit log", audit),
        ("the host's errors", format!("{refused}{answer}")),
    ] {
        for secret in ["mcpmux-test-access-", "mcpmux-test-refresh-"] {
            assert!(
                !text.contains(secret),
                "a token leaked into {what}:\n{text}"
            );
        }
    }
}

/// The state directory `Daemon` gives the daemon (`--state-dir`, beside its config).
fn daemon_state_dir(daemon: &Daemon) -> std::path::PathBuf {
    daemon.dir.path().join("state")
}
