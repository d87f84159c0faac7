//! The daemon record: a runtime directory another user planted is neither read nor written, one
//! mcpmux makes is the user's alone, and a proxy in the environment does not stand between the
//! loopback clients and the daemon.

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

use super::{admin, daemon, mcpmux, text, token};
use crate::common::{Daemon, MCPMUX, test_upstream};

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
