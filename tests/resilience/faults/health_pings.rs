//! Section 4, a faulty upstream that stops answering pings → restarted; its in-flight call fails at
//! once, saying why.

use std::time::{Duration, Instant};

use serde_json::json;

use super::{assert_goods, assert_text, faulty, ready, start, timed_call, wait_echo, wait_status};
use crate::common::assert_upstream_error;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_stops_answering_pings_is_restarted_and_its_calls_fail_at_once() {
    let sleepy = faulty(
        "sleepy",
        &["--fault-tools"],
        &[
            ("ping_interval", "\"200ms\""),
            ("ping_timeout", "\"300ms\""),
            ("restart_initial_backoff", "\"100ms\""),
        ],
    );
    let (daemon, client) = start(&sleepy, &["sleepy__stop_pings"]).await;
    // Answered pings keep it up.
    let (status, _) = wait_status(&daemon, "sleepy", Duration::from_secs(10), ready).await;
    assert_eq!(status["restarts"], 0, "{status}");

    let (answer, _) = timed_call(&client, "sleepy__stop_pings", json!({})).await;
    assert_text(&answer, "pings stopped");
    let (slow, ()) = tokio::join!(
        timed_call(&client, "sleepy__slow", json!({"ms": 5000})),
        assert_goods(&client, "during"),
    );
    let failed_at = Instant::now();
    let (answer, took) = slow;
    let message = assert_upstream_error(&answer, -32010, "sleepy");
    eprintln!("in-flight call failed after {took:?}: {message}");
    assert!(message.contains("stopped answering"), "{message}");
    assert!(
        took < Duration::from_secs(2),
        "the call failed after {took:?}"
    );

    let (status, _) = wait_status(&daemon, "sleepy", Duration::from_secs(10), |s| {
        ready(s) && s["restarts"] == 1
    })
    .await;
    eprintln!(
        "sleepy: ping failure → ready in {:?}: {status}",
        failed_at.elapsed()
    );
    assert!(
        daemon.log_count(&["upstream=sleepy", "stopped answering"]) >= 1,
        "the reason is not logged:\n{}",
        daemon.stderr()
    );
    wait_echo(&daemon, &client, "sleepy").await;
    assert_goods(&client, "after").await;
}
