//! Signing in to a remote upstream with OAuth, against our test upstream in its OAuth mode (its
//! own authorization server, with short-lived access tokens and rotating refresh tokens):
//! before a sign-in the upstream is `needs-login` and a host's call names the command;
//! `mcpmux login` works as a person runs it; a live host session across several token expiries
//! never sees an error; a revoked refresh token leaves the upstream `needs-login` with a clear
//! host error; no token appears in any log line, status, audit record or host error.
//!
//! What the client trusts: the configured client secret goes only to the configured `issuer`
//! (an upstream whose resource metadata names another authorization server is refused, and that
//! server receives nothing), the authorization server's metadata must name the URL it was
//! fetched for as its `issuer`, a redirect from the token endpoint is an error naming it and is
//! not followed, and a secret without an `issuer` is a config error.

use std::time::{Duration, Instant};

use crate::common;
use crate::common::{Client, Daemon, MCPMUX, RemoteServer, assert_upstream_error, poll_until};
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
    let (ok, stderr) = try_login(daemon).await;
    assert!(ok, "mcpmux login failed: {stderr}");
}

/// `mcpmux login web` as in [`login`]; whether it succeeded, and its stderr.
async fn try_login(daemon: &Daemon) -> (bool, String) {
    let admin = daemon.admin_url.clone().unwrap();
    common::login_in_browser(&admin, WEB, &[]).await
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

/// An authorization server a compromised upstream points mcpmux at: it answers metadata naming
/// its own endpoints and tokens to anyone, and records every request it gets (method, path,
/// `Authorization` header and body), so a test can show it was sent nothing.
struct Rogue {
    origin: String,
    seen: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Rogue {
    async fn start() -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let origin = format!("http://{}", listener.local_addr().unwrap());
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (record, me) = (std::sync::Arc::clone(&seen), origin.clone());
        let app = axum::Router::new().fallback(
            move |method: axum::http::Method,
                  uri: axum::http::Uri,
                  headers: axum::http::HeaderMap,
                  body: String| {
                let (record, me) = (std::sync::Arc::clone(&record), me.clone());
                async move {
                    let auth = headers
                        .get("authorization")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_owned();
                    record
                        .lock()
                        .unwrap()
                        .push(format!("{method} {uri} [{auth}] {body}"));
                    if uri.path().starts_with("/.well-known/") {
                        axum::Json(json!({
                            "issuer": me,
                            "authorization_endpoint": format!("{me}/authorize"),
                            "token_endpoint": format!("{me}/token"),
                            "code_challenge_methods_supported": ["S256"],
                            "token_endpoint_auth_methods_supported": ["client_secret_basic"],
                        }))
                    } else {
                        axum::Json(json!({"access_token": "rogue", "token_type": "Bearer"}))
                    }
                }
            },
        );
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self { origin, seen, task }
    }

    fn seen(&self) -> Vec<String> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Rogue {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// `[upstreams.web]` reaching `server`, signing in with the client credentials grant as
/// `mcpmux-test-client` with the secret in `secret_file`, trusting `issuer`.
fn client_credentials_config(
    server: &RemoteServer,
    secret_file: &std::path::Path,
    issuer: &str,
) -> String {
    format!(
        "[upstreams.web]\nurl = \"{}\"\nrestart_initial_backoff = \"100ms\"\n\
         [upstreams.web.oauth]\nclient_id = \"mcpmux-test-client\"\nclient_secret_file = \"{}\"\n\
         grant = \"client_credentials\"\nissuer = \"{issuer}\"\n",
        server.url("/mcp"),
        secret_file.display()
    )
}

const SECRET: &str = "mcpmux-test-client-secret";

/// Waits until web's `last_error` satisfies `wanted`; that error.
async fn wait_error(daemon: &Daemon, wanted: impl Fn(&str) -> bool) -> String {
    let wanted = &wanted;
    let found = poll_until(Duration::from_secs(30), || async move {
        let status = daemon.upstream_status(WEB).await;
        status["last_error"].as_str().is_some_and(wanted)
    })
    .await;
    assert!(
        found,
        "web's last_error never said so: {}\n{}",
        daemon.upstream_status(WEB).await,
        daemon.stderr()
    );
    daemon.upstream_status(WEB).await["last_error"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_secret_goes_to_the_configured_issuer_and_never_where_the_upstream_points() {
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("secret");
    std::fs::write(&secret, SECRET).unwrap();

    // The configured issuer is the upstream's own authorization server: signed in, no person.
    let server = RemoteServer::test_upstream(WEB, 0, &["--oauth-token-ttl", "60"]);
    let issuer = server.url("");
    let daemon = Daemon::start(&client_credentials_config(&server, &secret, &issuer));
    wait_state(&daemon, "ready").await;
    let host = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&host, |n| n.iter().any(|t| t == "web__echo"))
        .await;
    assert!(echoed(&echo(&host, 1).await, 1));
    let stats: Value = reqwest::get(server.url("/oauth-stats"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(stats["client_credentials"].as_u64() >= Some(1), "{stats}");
    drop(daemon);

    // A compromised upstream names another authorization server: refused, naming both, and
    // that server is sent nothing at all.
    let rogue = Rogue::start().await;
    let server = RemoteServer::test_upstream(
        WEB,
        0,
        &[
            "--oauth-token-ttl",
            "60",
            "--oauth-authorization-server",
            &rogue.origin,
        ],
    );
    let issuer = server.url("");
    let daemon = Daemon::start(&client_credentials_config(&server, &secret, &issuer));
    let error = wait_error(&daemon, |e| e.contains(&rogue.origin)).await;
    eprintln!("refused: {error}");
    assert!(
        error.contains(issuer.trim_end_matches('/')),
        "the error does not name the configured issuer {issuer}: {error}"
    );
    assert_ne!(state(&daemon).await, "ready");
    let seen = rogue.seen();
    assert!(
        seen.iter()
            .all(|r| !r.contains(SECRET) && !r.contains("Basic ")),
        "the rogue authorization server received the client's credentials: {seen:#?}"
    );
    assert!(
        seen.iter().all(|r| !r.contains("/token")),
        "the rogue authorization server received a token request: {seen:#?}"
    );
    assert!(
        !daemon.stderr().contains(SECRET),
        "the secret leaked into the log"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authorization_server_metadata_naming_another_issuer_is_refused() {
    let server = RemoteServer::test_upstream(
        WEB,
        0,
        &[
            "--oauth-token-ttl",
            "60",
            "--oauth-metadata-issuer",
            "http://127.0.0.1:1/someone-else",
        ],
    );
    let daemon = Daemon::start(&format!(
        "[upstreams.web]\nurl = \"{}\"\n",
        server.url("/mcp")
    ));
    wait_state(&daemon, "needs-login").await;
    // Dynamic registration, no configured client: the metadata is checked all the same.
    let (ok, stderr) = try_login(&daemon).await;
    assert!(!ok, "signed in with metadata that names another issuer");
    eprintln!("refused: {stderr}");
    assert!(
        stderr.contains("http://127.0.0.1:1/someone-else") && stderr.contains("issuer"),
        "the error does not name the claimed issuer: {stderr}"
    );
    let stats: Value = reqwest::get(server.url("/oauth-stats"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(stats["authorization_code"], 0, "{stats}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_from_the_token_endpoint_is_an_error_naming_it_and_is_not_followed() {
    let rogue = Rogue::start().await;
    let location = format!("{}/stolen", rogue.origin);
    let server = RemoteServer::test_upstream(
        WEB,
        0,
        &[
            "--oauth-token-ttl",
            "60",
            "--oauth-token-redirect",
            &location,
        ],
    );
    let daemon = Daemon::start(&format!(
        "[upstreams.web]\nurl = \"{}\"\n",
        server.url("/mcp")
    ));
    wait_state(&daemon, "needs-login").await;
    let (ok, stderr) = try_login(&daemon).await;
    assert!(!ok, "signed in through a redirected token endpoint");
    eprintln!("refused: {stderr}");
    assert!(
        stderr.contains(&location),
        "the error does not name the redirect's Location {location}: {stderr}"
    );
    let seen = rogue.seen();
    assert!(seen.is_empty(), "the redirect was followed: {seen:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_refused_for_insufficient_scope_fails_alone_and_names_the_sign_in() {
    let server = RemoteServer::test_upstream(
        WEB,
        0,
        &["--oauth-token-ttl", "60", "--oauth-scope-tool", "fancy"],
    );
    let daemon = Daemon::start(&format!(
        "[upstreams.web]\nurl = \"{}\"\n",
        server.url("/mcp")
    ));
    wait_state(&daemon, "needs-login").await;
    login(&daemon).await;
    wait_state(&daemon, "ready").await;
    let host = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&host, |n| n.iter().any(|t| t == "web__echo"))
        .await;

    // The call that wants a wider scope fails, saying how to get it…
    let refused = host
        .request("tools/call", json!({"name": "web__fancy", "arguments": {}}))
        .await;
    let message = assert_upstream_error(&refused, -32010, WEB);
    eprintln!("refused: {message}");
    assert!(
        message.contains("403") && message.contains("mcpmux login web"),
        "{message}"
    );
    // …and nothing else: the session's other calls go on, the link is not restarted.
    assert!(echoed(&echo(&host, 7).await, 7));
    let status = daemon.upstream_status(WEB).await;
    assert_eq!(status["state"], "ready", "{status}");
    assert_eq!(status["restarts"], 0, "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_secret_without_an_issuer_is_a_config_error() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("mcpmux.toml");
    std::fs::write(
        &config,
        "[upstreams.web]\nurl = \"https://mcp.example.com/mcp\"\n\
         [upstreams.web.oauth]\nclient_id = \"mcpmux\"\nclient_secret_env = \"WEB_SECRET\"\n",
    )
    .unwrap();
    let output = std::process::Command::new(MCPMUX)
        .arg("check")
        .arg("--config")
        .arg(&config)
        .env_remove("MCPMUX_CONFIG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success(),
        "mcpmux check accepted it: {stderr}"
    );
    assert!(
        stderr.contains("upstreams.web.oauth.issuer") && stderr.contains("issuer ="),
        "the error does not name the key and the fix: {stderr}"
    );
}
