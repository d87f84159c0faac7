//! Section 5, a faulty upstream that writes a non-JSON line → treated as broken and restarted.

use std::time::{Duration, Instant};

use serde_json::json;

use super::{assert_goods, faulty, ready, start, timed_call, wait_echo, wait_status};
use crate::common::assert_upstream_error;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_json_output_mid_run_marks_the_upstream_broken_and_restarts_it() {
    let noisy = faulty(
        "noisy",
        &["--fault-tools"],
        &[
            // Long enough to read `last_error` while it waits to restart.
            ("restart_initial_backoff", "\"500ms\""),
            ("restart_max_backoff", "\"1s\""),
        ],
    );
    let (daemon, client) = start(&noisy, &["noisy__garbage"]).await;

    let (answer, took) = timed_call(&client, "noisy__garbage", json!({})).await;
    let broke_at = Instant::now();
    let message = assert_upstream_error(&answer, -32010, "noisy");
    eprintln!("garbage reported to the caller after {took:?}: {message}");
    assert!(message.contains("not JSON-RPC"), "{message}");
    assert_goods(&client, "during").await;

    let (status, _) = wait_status(&daemon, "noisy", Duration::from_secs(10), |s| {
        s["state"] == "restarting" && s["restarts"] == 1
    })
    .await;
    let last_error = status["last_error"].as_str().unwrap_or_default();
    assert!(
        last_error.contains("not JSON-RPC"),
        "last_error does not say why: {status}"
    );
    let (status, _) = wait_status(&daemon, "noisy", Duration::from_secs(10), ready).await;
    eprintln!(
        "noisy: garbage → ready in {:?}: {status}",
        broke_at.elapsed()
    );
    wait_echo(&daemon, &client, "noisy").await;
    assert_goods(&client, "after").await;
}
