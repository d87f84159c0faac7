//! The admin API as an attacker meets it: another local process without the token, a web page
//! in the user's browser (a cross-site "simple" POST, a DNS-rebinding page), a remote address.
//! Every admin route wants the token `<state dir>/admin.token` (0600) names; a foreign `Origin`
//! or `Host` is refused, a POST must be JSON; health and readiness stay open; the CLI finds the
//! token with no flag. The OAuth callback answers only the redirect it waits for. The daemon
//! record: a planted `/tmp/mcpmux-UID` is refused, the runtime directory is created 0700, and
//! `HTTP_PROXY` does not break the loopback clients.

#![allow(clippy::unwrap_used)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use common::{Daemon, MCPMUX, RemoteServer, poll_until, test_upstream};
use serde_json::{Value, json};

/// A client that never goes through a proxy (the test's environment may name one).
fn http() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

fn daemon() -> Daemon {
    Daemon::start(&test_upstream("up", &[]))
}

fn admin(daemon: &Daemon) -> String {
    daemon.admin_url.clone().expect("the admin API is on")
}

/// The token the daemon wrote for itself, `<state dir>/admin.token`.
fn token(daemon: &Daemon) -> String {
    let path = daemon.dir.path().join("state/admin.token");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("no admin token at {}: {e}", path.display()))
        .trim()
        .to_owned()
}

fn mcpmux(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(MCPMUX)
        .args(args)
        .env_remove("MCPMUX_ADMIN_TOKEN_FILE")
        .env_remove("MCPMUX_CONFIG")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_admin_route_wants_the_token_and_health_stays_open() {
    let daemon = daemon();
    let admin = admin(&daemon);
    for path in [
        "/status",
        "/sessions",
        "/metrics",
        "/pins",
        "/audit/query",
        "/audit/verify",
    ] {
        let none = http().get(format!("{admin}{path}")).send().await.unwrap();
        assert_eq!(none.status(), 401, "{path} without a token");
        let body: Value = none.json().await.unwrap_or_default();
        let error = body["error"].as_str().unwrap_or_default();
        assert!(
            error.contains("admin.token") && error.contains("Authorization: Bearer"),
            "{path}: the 401 says where the token is: {body}"
        );
        let wrong = (http().get(format!("{admin}{path}")))
            .bearer_auth("0".repeat(64))
            .send()
            .await
            .unwrap();
        assert_eq!(wrong.status(), 401, "{path} with a wrong token");
    }
    for path in ["/health", "/healthz", "/ready", "/readyz"] {
        let open = http().get(format!("{admin}{path}")).send().await.unwrap();
        assert_ne!(open.status(), 401, "{path} stays open");
        assert_ne!(open.status(), 403, "{path} stays open");
    }

    // The token: at least 32 random bytes in hex, in a file only the user can read.
    let path = daemon.dir.path().join("state/admin.token");
    let mode = std::fs::metadata(&path)
        .unwrap_or_else(|e| panic!("no {}: {e}", path.display()))
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "admin.token is mode {mode:o}");
    let token = token(&daemon);
    assert!(
        token.len() >= 64 && token.chars().all(|c| c.is_ascii_hexdigit()),
        "{token:?}"
    );
    let status = (http().get(format!("{admin}/status")))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap();
    assert_eq!(status.status(), 200);
    assert!(
        !daemon.stderr().contains(&token),
        "the token is never logged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_web_page_can_neither_post_across_sites_nor_rebind_dns() {
    let daemon = daemon();
    let admin = admin(&daemon);
    let port = admin.rsplit(':').next().unwrap().to_owned();
    // A cross-site "simple" POST, as a form or fetch() in a page sends it (no token, no preflight).
    for path in ["/pins/up/echo/approve", "/reload", "/upstreams/up/restart"] {
        let forged = (http().post(format!("{admin}{path}")))
            .header("origin", "http://evil.example")
            .header("content-type", "text/plain")
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(forged.status(), 403, "cross-site POST {path}");
    }
    // Without an Origin (another tool) but with a token: still only JSON.
    let token = token(&daemon);
    for path in ["/pins/up/echo/approve", "/reload"] {
        let plain = (http().post(format!("{admin}{path}")))
            .bearer_auth(&token)
            .header("content-type", "text/plain")
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(plain.status(), 415, "text/plain POST {path}");
    }
    // A DNS-rebinding page: its Origin and Host are its own name, whatever the port.
    let evil_origin = (http().get(format!("{admin}/status")))
        .bearer_auth(&token)
        .header("origin", "http://evil.example")
        .send()
        .await
        .unwrap();
    assert_eq!(evil_origin.status(), 403, "foreign Origin");
    let other_port = (http().get(format!("{admin}/status")))
        .bearer_auth(&token)
        .header("origin", "http://127.0.0.1:1")
        .send()
        .await
        .unwrap();
    assert_eq!(other_port.status(), 403, "another local origin");
    let rebound = (http().get(format!("{admin}/audit/query")))
        .bearer_auth(&token)
        .header("host", format!("evil.example:{port}"))
        .send()
        .await
        .unwrap();
    assert_eq!(rebound.status(), 403, "foreign Host");
    // Its own origin, a JSON POST with the token: allowed.
    for origin in [
        format!("http://127.0.0.1:{port}"),
        format!("http://localhost:{port}"),
    ] {
        let own = (http().get(format!("{admin}/status")))
            .bearer_auth(&token)
            .header("origin", &origin)
            .send()
            .await
            .unwrap();
        assert_eq!(own.status(), 200, "{origin}");
    }
    let reload = (http().post(format!("{admin}/reload")))
        .bearer_auth(&token)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(reload.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_finds_the_token_with_no_flag() {
    let daemon = daemon();
    let admin = admin(&daemon);
    let status = mcpmux(&["status", "--admin", &admin], &[]);
    assert!(status.status.success(), "{}", text(&status));
    assert!(text(&status).contains("up"), "{}", text(&status));
    let config = daemon.dir.path().join("mcpmux.toml");
    let by_config = mcpmux(&["status", "--config", config.to_str().unwrap()], &[]);
    assert!(by_config.status.success(), "{}", text(&by_config));
    let reload = mcpmux(&["reload", "--admin", &admin], &[]);
    assert!(reload.status.success(), "{}", text(&reload));
    // An explicit token file wins; a wrong one is refused with where the right one is.
    let wrong = daemon.dir.path().join("wrong.token");
    std::fs::write(&wrong, "f".repeat(64)).unwrap();
    let refused = mcpmux(
        &["status", "--admin", &admin],
        &[("MCPMUX_ADMIN_TOKEN_FILE", wrong.to_str().unwrap())],
    );
    assert!(!refused.status.success(), "{}", text(&refused));
    assert!(text(&refused).contains("admin.token"), "{}", text(&refused));
    let flag = mcpmux(
        &[
            "status",
            "--admin",
            &admin,
            "--admin-token-file",
            daemon
                .dir
                .path()
                .join("state/admin.token")
                .to_str()
                .unwrap(),
        ],
        &[("MCPMUX_ADMIN_TOKEN_FILE", wrong.to_str().unwrap())],
    );
    assert!(flag.status.success(), "{}", text(&flag));
}

#[test]
fn a_remote_admin_listener_needs_an_acknowledgement() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("mcpmux.toml");
    std::fs::write(
        &config,
        "[server]\nlisten = \"127.0.0.1:0\"\n[admin]\nlisten = \"0.0.0.0:0\"\n",
    )
    .unwrap();
    let path = config.to_str().unwrap();
    let check = mcpmux(&["check", "--config", path], &[]);
    assert!(!check.status.success(), "{}", text(&check));
    assert!(
        text(&check).contains("admin.allow_remote") && text(&check).contains("approve"),
        "{}",
        text(&check)
    );
    let state = dir.path().join("state");
    let serve = mcpmux(
        &[
            "serve",
            "--config",
            path,
            "--state-dir",
            state.to_str().unwrap(),
        ],
        &[],
    );
    assert!(!serve.status.success(), "{}", text(&serve));
    assert!(
        text(&serve).contains("admin.allow_remote"),
        "{}",
        text(&serve)
    );
    // The flag is held to the same rule.
    std::fs::write(&config, "[server]\nlisten = \"127.0.0.1:0\"\n").unwrap();
    let flag = mcpmux(
        &[
            "serve",
            "--config",
            path,
            "--state-dir",
            state.to_str().unwrap(),
            "--admin",
            "0.0.0.0:0",
        ],
        &[],
    );
    assert!(!flag.status.success(), "{}", text(&flag));
    assert!(
        text(&flag).contains("admin.allow_remote"),
        "{}",
        text(&flag)
    );
    std::fs::write(
        &config,
        "[server]\nlisten = \"127.0.0.1:0\"\n[admin]\nlisten = \"0.0.0.0:0\"\nallow_remote = true\n",
    )
    .unwrap();
    let allowed = mcpmux(&["check", "--config", path], &[]);
    assert!(allowed.status.success(), "{}", text(&allowed));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provisioned_token_file_is_used_and_a_readable_one_refused() {
    let provisioned = tempfile::tempdir().unwrap();
    let file = provisioned.path().join("admin.token");
    let secret = "a".repeat(64);
    std::fs::write(&file, format!("{secret}\n")).unwrap();
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    let daemon = Daemon::start(&format!(
        "[admin]\ntoken_file = \"{}\"\n{}",
        file.display(),
        test_upstream("up", &[])
    ));
    let admin = admin(&daemon);
    let status = (http().get(format!("{admin}/status")))
        .bearer_auth(&secret)
        .send()
        .await
        .unwrap();
    assert_eq!(status.status(), 200);
    assert!(!daemon.dir.path().join("state/admin.token").exists());
    let cli = mcpmux(&["status", "--admin", &admin], &[]);
    assert!(cli.status.success(), "{}", text(&cli));

    // A configured file that is missing or empty stops the start, naming the key.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("mcpmux.toml");
    let state = dir.path().join("state");
    let serve = |config_text: String| {
        std::fs::write(&config, config_text).unwrap();
        mcpmux(
            &[
                "serve",
                "--config",
                config.to_str().unwrap(),
                "--state-dir",
                state.to_str().unwrap(),
                "--admin",
                "127.0.0.1:0",
            ],
            &[],
        )
    };
    let missing = dir.path().join("missing.token");
    let out = serve(format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[admin]\ntoken_file = \"{}\"\n",
        missing.display()
    ));
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("admin.token_file"), "{}", text(&out));
    std::fs::write(&missing, "\n").unwrap();
    let out = serve(format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[admin]\ntoken_file = \"{}\"\n",
        missing.display()
    ));
    assert!(!out.status.success(), "{}", text(&out));
    assert!(text(&out).contains("admin.token_file"), "{}", text(&out));

    // A generated token others can read is refused: it may have been read already.
    std::fs::create_dir_all(&state).unwrap();
    let readable = state.join("admin.token");
    std::fs::write(&readable, "b".repeat(64)).unwrap();
    std::fs::set_permissions(&readable, std::fs::Permissions::from_mode(0o644)).unwrap();
    let out = serve("[server]\nlisten = \"127.0.0.1:0\"\n".into());
    assert!(!out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("admin.token") && text(&out).contains("0600"),
        "{}",
        text(&out)
    );
}

/// A directory named as the predictable runtime directory but made by someone else (as root:
/// owned by `nobody`; else world-writable), with a record of a live mcpmux pointing at
/// `listener`.
fn plant(tmp: &std::path::Path, listener: &std::net::TcpListener, pid: u32) {
    let uid = nix::unistd::getuid();
    let planted = tmp.join(format!("mcpmux-{uid}"));
    std::fs::create_dir_all(planted.join("daemons")).unwrap();
    let port = listener.local_addr().unwrap().port();
    let record = json!({
        "pid": pid,
        "url": format!("http://127.0.0.1:{port}/mcp"),
        "admin": format!("http://127.0.0.1:{port}"),
        "config": "/nonexistent/mcpmux.toml",
        "state_dir": tmp.join("state"),
    });
    std::fs::write(
        planted.join("daemons").join(format!("{pid}.json")),
        record.to_string(),
    )
    .unwrap();
    if uid.is_root() {
        let nobody = Some(nix::unistd::Uid::from_raw(65534));
        for path in [
            planted.clone(),
            planted.join("daemons"),
            planted.join("daemons").join(format!("{pid}.json")),
        ] {
            nix::unistd::chown(&path, nobody, None).unwrap();
        }
    } else {
        std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o777)).unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planted_runtime_directory_is_refused() {
    // A real mcpmux, so the planted record's pid is alive and an mcpmux.
    let daemon = daemon();
    let tmp = tempfile::tempdir().unwrap();
    let trap = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    trap.set_nonblocking(true).unwrap();
    plant(tmp.path(), &trap, daemon.pid());
    let shell = |args: &[&str]| {
        let mut child = Command::new(MCPMUX)
            .args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", tmp.path())
            .env("TMPDIR", tmp.path())
            .env("MCPMUX_TOKEN", "the-host-secret")
            .current_dir(tmp.path())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        {
            use std::io::Write;
            let mut stdin = child.stdin.take().unwrap();
            let _ = writeln!(
                stdin,
                r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":"2025-06-18","capabilities":{{}},"clientInfo":{{"name":"t","version":"1"}}}}}}"#
            );
        }
        // A bridge that went to the trap waits for an answer forever: give it a deadline.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while child.try_wait().unwrap().is_none() && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = child.kill();
        child.wait_with_output().unwrap()
    };
    for args in [&["stdio"][..], &["status"][..]] {
        let out = shell(args);
        assert!(
            trap.accept().is_err(),
            "`mcpmux {args:?}` went to the planted record's address: {}",
            text(&out)
        );
        assert!(!out.status.success(), "{}", text(&out));
        let said = text(&out);
        let planted = tmp.path().join(format!("mcpmux-{}", nix::unistd::getuid()));
        assert!(
            said.contains(&format!("{} belongs to uid 65534", planted.display()))
                || said.contains(&format!("{} is writable by others", planted.display())),
            "the refusal names the directory and why: {said}"
        );
    }
    // A daemon of the same user leaves no record there either, and says so.
    let tmp_dir = tmp.path().to_str().unwrap();
    let second = Daemon::start_with_env(
        &test_upstream("up", &[]),
        &[
            ("TMPDIR", tmp_dir),
            ("XDG_RUNTIME_DIR", ""),
            ("MCPMUX_RUNTIME_DIR", ""),
        ],
    );
    let planted = tmp
        .path()
        .join(format!("mcpmux-{}", nix::unistd::getuid()))
        .join("daemons")
        .join(format!("{}.json", second.pid()));
    assert!(
        !planted.exists(),
        "the daemon wrote into the planted directory"
    );
    assert!(
        second.log_count(&["Not leaving this daemon's record"]) == 1,
        "{}",
        second.stderr()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runtime_directory_is_created_for_the_user_alone() {
    let tmp = tempfile::tempdir().unwrap();
    let tmp_dir = tmp.path().to_str().unwrap();
    let daemon = Daemon::start_with_env(
        &test_upstream("up", &[]),
        &[
            ("TMPDIR", tmp_dir),
            ("XDG_RUNTIME_DIR", ""),
            ("MCPMUX_RUNTIME_DIR", ""),
        ],
    );
    let dir = tmp.path().join(format!("mcpmux-{}", nix::unistd::getuid()));
    let record = dir.join("daemons").join(format!("{}.json", daemon.pid()));
    assert!(record.exists(), "{}", daemon.stderr());
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "{} is mode {mode:o}", dir.display());
    let record_text = std::fs::read_to_string(&record).unwrap();
    assert!(
        record_text.contains("admin.token") && !record_text.contains(&token(&daemon)),
        "the record names the token's file, not the token: {record_text}"
    );
    // The CLI of the same user, in the same TMPDIR, finds it there.
    let out = mcpmux(
        &["status"],
        &[
            ("TMPDIR", tmp_dir),
            ("XDG_RUNTIME_DIR", ""),
            ("MCPMUX_RUNTIME_DIR", ""),
            ("MCPMUX_STATE_DIR", ""),
        ],
    );
    assert!(out.status.success(), "{}", text(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_in_the_environment_does_not_stand_between_the_cli_and_the_daemon() {
    let daemon = daemon();
    let admin = admin(&daemon);
    // A proxy that is not there.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let proxy = format!("http://127.0.0.1:{}", dead.local_addr().unwrap().port());
    drop(dead);
    let env: Vec<(&str, &str)> = [
        "HTTP_PROXY",
        "http_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
    ]
    .into_iter()
    .map(|k| (k, proxy.as_str()))
    .chain([("NO_PROXY", ""), ("no_proxy", "")])
    .collect();
    let status = mcpmux(&["status", "--admin", &admin], &env);
    assert!(status.status.success(), "{}", text(&status));

    let mut bridge = tokio::process::Command::new(MCPMUX)
        .args(["stdio", "--url", &daemon.url])
        .env_remove("MCPMUX_CONFIG")
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    use tokio::io::{AsyncBufReadExt, AsyncWriteExt};
    let mut stdin = bridge.stdin.take().unwrap();
    let mut lines = tokio::io::BufReader::new(bridge.stdout.take().unwrap()).lines();
    stdin
        .write_all(br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#)
        .await
        .unwrap();
    stdin.write_all(b"\n").await.unwrap();
    let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .expect("the bridge answered")
        .unwrap()
        .unwrap_or_default();
    let answer: Value = serde_json::from_str(&line).unwrap_or_default();
    assert!(answer["result"]["serverInfo"].is_object(), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sign_in_callback_answers_only_the_redirect_it_waits_for() {
    let server = RemoteServer::test_upstream("web", 0, &["--oauth-token-ttl", "600"]);
    let daemon = Daemon::start(&format!(
        "[upstreams.web]\nurl = \"{}\"\nrestart_initial_backoff = \"100ms\"\n",
        server.url("/mcp"),
    ));
    let admin = admin(&daemon);
    let token = token(&daemon);
    let started: Value = (http().post(format!("{admin}/upstreams/web/login")))
        .bearer_auth(&token)
        .json(&json!({}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let url = started["authorization_url"].as_str().unwrap().to_owned();
    let browser = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let redirect = browser.get(&url).send().await.unwrap();
    let back = redirect.headers()["location"].to_str().unwrap().to_owned();
    let back_url = url::Url::parse(&back).unwrap();
    let base = format!("http://127.0.0.1:{}", back_url.port().unwrap());

    // Forged or stray requests are refused and do not end the wait.
    let forged = browser
        .get(format!("{base}/callback?code=attacker&state=forged"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        forged.status(),
        400,
        "a redirect with a state mcpmux never issued"
    );
    let stateless = browser
        .get(format!("{base}/callback?code=attacker"))
        .send()
        .await
        .unwrap();
    assert_eq!(stateless.status(), 400, "a redirect without state");
    let elsewhere = browser.get(format!("{base}/other")).send().await.unwrap();
    assert_eq!(elsewhere.status(), 404);
    let posted = browser.post(&back).send().await.unwrap();
    assert!(
        posted.status().is_client_error(),
        "POST: {}",
        posted.status()
    );
    let pending: Value = (http().get(format!("{admin}/upstreams/web/login")))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(pending["state"], "pending", "{pending}");

    // The real redirect finishes the sign-in; it cannot be replayed.
    let landed = browser.get(&back).send().await.unwrap();
    assert_eq!(landed.status(), 200);
    let done = poll_until(Duration::from_secs(60), || async {
        let state: Value = (http().get(format!("{admin}/upstreams/web/login")))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        state["state"] == "done"
    })
    .await;
    assert!(done, "{}", daemon.stderr());
    let replay = browser.get(&back).send().await;
    assert!(
        replay.is_err() || replay.unwrap().status().is_client_error(),
        "a replayed redirect is not accepted"
    );
}
