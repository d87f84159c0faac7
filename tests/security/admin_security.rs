//! The admin API as an attacker meets it: another local process without the token, a web page
//! in the user's browser (a cross-site "simple" POST, a DNS-rebinding page), a remote address.
//! Every admin route wants the token `<state dir>/admin.token` (0600) names; a foreign `Origin`
//! or `Host` is refused, a POST must be JSON; health and readiness stay open; the CLI finds the
//! token with no flag (here). The OAuth callback answers only the redirect it waits for
//! (`sign_in`). The web console's cookie opens nothing from a sibling port, wrong sign-ins are
//! limited, an upstream-chosen name cannot aim a button (`console`). The daemon record: a planted
//! `/tmp/mcpmux-UID` is refused, the runtime directory is created 0700, and `HTTP_PROXY` does not
//! break the loopback clients (`records`).

mod console;
mod records;
mod sign_in;

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output, Stdio};

use crate::common::{Daemon, MCPMUX, test_upstream};
use serde_json::{Value, json};

/// A client that never goes through a proxy (the test's environment may name one).
pub(crate) fn http() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

pub(crate) fn daemon() -> Daemon {
    Daemon::start(&test_upstream("up", &[]))
}

pub(crate) fn admin(daemon: &Daemon) -> String {
    daemon.admin_url.clone().expect("the admin API is on")
}

/// The token the daemon wrote for itself, `<state dir>/admin.token`.
pub(crate) fn token(daemon: &Daemon) -> String {
    let path = daemon.dir.path().join("state/admin.token");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("no admin token at {}: {e}", path.display()))
        .trim()
        .to_owned()
}

pub(crate) fn mcpmux(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(MCPMUX)
        .args(args)
        .env_remove("MCPMUX_ADMIN_TOKEN_FILE")
        .env_remove("MCPMUX_CONFIG")
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

pub(crate) fn text(out: &Output) -> String {
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
