//! Section 6, a faulty upstream that writes a 100 MB line → refused at `max_message_bytes`,
//! restarted, daemon memory bounded.

use std::time::{Duration, Instant};

use serde_json::json;

use super::{
    RSS_LIMIT_KIB, assert_goods, faulty, ready, start, timed_call, wait_echo, wait_status,
};
use crate::common::{assert_upstream_error, proc_kib};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_over_max_message_bytes_fails_the_call_restarts_the_upstream_and_memory_stays_bounded()
 {
    let big = faulty(
        "big",
        &["--huge-line-bytes", "104857600"],
        &[
            ("max_message_bytes", "1048576"),
            // Long enough to read `last_error` while it waits to restart.
            ("restart_initial_backoff", "\"500ms\""),
            ("restart_max_backoff", "\"1s\""),
        ],
    );
    let (daemon, client) = start(&big, &["big__huge"]).await;
    let before = proc_kib(daemon.pid(), "VmRSS").unwrap();

    let (answer, took) = timed_call(&client, "big__huge", json!({})).await;
    let failed_at = Instant::now();
    let message = assert_upstream_error(&answer, -32010, "big");
    eprintln!("huge line reported to the caller after {took:?}: {message}");
    assert!(message.contains("max_message_bytes"), "{message}");
    assert_goods(&client, "during").await;

    let (status, _) = wait_status(&daemon, "big", Duration::from_secs(10), |s| {
        s["state"] == "restarting" && s["restarts"] == 1
    })
    .await;
    let last_error = status["last_error"].as_str().unwrap_or_default().to_owned();
    let (status, _) = wait_status(&daemon, "big", Duration::from_secs(20), |s| {
        ready(s) && s["restarts"] == 1
    })
    .await;
    eprintln!(
        "big: refused line → ready in {:?}: {status}",
        failed_at.elapsed()
    );
    wait_echo(&daemon, &client, "big").await;
    assert_goods(&client, "after").await;

    crate::common::healthy::assert_memory_bounded(&daemon, before, RSS_LIMIT_KIB);
    assert!(
        last_error.contains("max_message_bytes"),
        "last_error does not say why: {last_error}"
    );
}
