//! Section 2, a faulty upstream that exits mid-call → that caller gets a clear error at once, one
//! restart, tools work again.

use std::time::{Duration, Instant};

use serde_json::json;

use super::{assert_goods, faulty, ready, start, timed_call, wait_echo, wait_status};
use crate::common::assert_upstream_error;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_mid_call_fails_that_call_at_once_and_restarts_the_upstream_once() {
    let crasher = faulty(
        "crasher",
        &[],
        &[
            ("request_timeout", "\"20s\""),
            ("restart_initial_backoff", "\"100ms\""),
        ],
    );
    let (daemon, client) = start(&crasher, &["crasher__crash"]).await;

    let (answer, took) = timed_call(&client, "crasher__crash", json!({})).await;
    let crashed_at = Instant::now();
    let message = assert_upstream_error(&answer, -32010, "crasher");
    eprintln!("crash reported to the caller after {took:?}: {message}");
    assert!(took < Duration::from_secs(2), "the error took {took:?}");
    assert_goods(&client, "during").await;

    let (status, _) = wait_status(&daemon, "crasher", Duration::from_secs(10), |s| {
        ready(s) && s["restarts"] == 1
    })
    .await;
    eprintln!(
        "crasher: crash → ready in {:?}: {status}",
        crashed_at.elapsed()
    );
    let logged = daemon.log_count(&["upstream=crasher", "exited with status 3"]);
    assert!(
        logged >= 1,
        "the exit status is not logged:\n{}",
        daemon.stderr()
    );
    wait_echo(&daemon, &client, "crasher").await;
    assert_eq!(
        daemon.upstream_status("crasher").await["restarts"],
        1,
        "one crash is one restart"
    );
    assert_goods(&client, "after").await;
}
