//! Section 1, a faulty upstream that exits at start → restarted within its budget, then
//! `crash-loop` (fast errors), until `mcpmux restart` brings it back once the fault clears.

use std::time::{Duration, Instant};

use serde_json::json;

use super::{assert_goods, faulty, ready, start, timed_call, wait_status};
use crate::common::{MCPMUX, assert_upstream_error, poll_until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_at_start_ends_in_crash_loop_within_budget_and_mcpmux_restart_brings_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let crash_file = dir.path().join("crash-while-this-exists");
    std::fs::write(&crash_file, "").unwrap();
    let bad = faulty(
        "bad",
        &["--crash-file", crash_file.to_str().unwrap()],
        &[
            ("restart_budget", "3"),
            ("restart_window", "\"60s\""),
            ("restart_initial_backoff", "\"50ms\""),
            ("restart_max_backoff", "\"200ms\""),
        ],
    );
    let (daemon, client) = start(&bad, &[]).await;

    let (status, took) = wait_status(&daemon, "bad", Duration::from_secs(20), |s| {
        s["state"] == "crash-loop"
    })
    .await;
    eprintln!("bad reached crash-loop {took:?} after the healthy tools were listed: {status}");
    assert_eq!(status["restarts"], 3, "the budget is 3 restarts: {status}");
    let last_error = status["last_error"].as_str().unwrap_or_default();
    assert!(
        last_error.contains("exited with status 4") && last_error.contains("within 60s"),
        "last_error does not name the cause: {status}"
    );
    assert_eq!(status["tools"], 0, "{status}");
    assert_goods(&client, "during").await;

    // No more restarts: it stays in crash-loop, 1 start + 3 restarts.
    let moved = poll_until(Duration::from_millis(600), || async {
        let s = daemon.upstream_status("bad").await;
        s["state"] != "crash-loop" || s["restarts"] != 3
    })
    .await;
    assert!(
        !moved,
        "bad left crash-loop by itself: {}",
        daemon.upstream_status("bad").await
    );
    // A process that ends before it answers the `server/discover` probe is started again with the
    // handshake within the same start (some handshake-era servers exit on the probe): that
    // second process is not a restart.
    let started = daemon.log_count(&["upstream=bad", "Started upstream process"]);
    let again = daemon.log_count(&["upstream=bad", "ended on the server/discover probe"]);
    assert_eq!(
        started - again,
        4,
        "bad should have been started 4 times:\n{}",
        daemon.stderr()
    );

    // Its calls fail fast, naming it and its state.
    let (answer, took) = timed_call(&client, "bad__echo", json!({})).await;
    let message = assert_upstream_error(&answer, -32010, "bad");
    assert!(message.contains("crash-loop"), "{message}");
    assert!(took < Duration::from_secs(1), "the error took {took:?}");
    assert_goods(&client, "during").await;

    // The fault clears; an operator restart brings it back.
    std::fs::remove_file(&crash_file).unwrap();
    let admin = daemon.admin_url.as_deref().unwrap();
    let started = Instant::now();
    let output = tokio::process::Command::new(MCPMUX)
        .args(["restart", "bad", "--admin"])
        .arg(admin.strip_prefix("http://").unwrap())
        .env_remove("MCPMUX_CONFIG")
        .env_remove("MCPMUX_ADMIN")
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(30), output)
        .await
        .expect("mcpmux restart did not finish")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("restarted bad"),
        "mcpmux restart failed: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let (status, _) = wait_status(&daemon, "bad", Duration::from_secs(10), ready).await;
    eprintln!(
        "bad ready {:?} after `mcpmux restart` was started",
        started.elapsed()
    );
    assert!(status["last_error"].is_null(), "{status}");
    let tools = daemon
        .wait_for_tools(&client, |n| n.iter().any(|t| t == "bad__echo"))
        .await;
    assert_eq!(
        tools.iter().filter(|t| t.starts_with("bad__")).count(),
        7,
        "{tools:?}"
    );
    let (answer, _) = timed_call(&client, "bad__echo", json!({})).await;
    assert_eq!(answer["result"]["structuredContent"]["upstream"], "bad");
    assert_goods(&client, "after").await;
}
