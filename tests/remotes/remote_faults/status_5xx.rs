//! Section 5, a remote server that answers 5xx: a tool answered HTTP 500 → that call fails at
//! once naming the upstream and the 500, the upstream stays up (a failed request is a value, not a
//! crash, below the breaker's count: `breaker` shows it trip); every POST answered 503 (a 5xx
//! storm) → failed health pings restart it, it reaches
//! `crash-loop` within its budget, and an operator restart brings it back once the storm is over.

use std::time::Duration;

use serde_json::json;

use super::{
    Via, WEB, assert_fails_fast_in_crash_loop, assert_goods, operator_restart,
    over_both_transports, ready, start, text, timed_call, wait_echo, wait_status, web_server,
    web_table,
};
use crate::common::assert_upstream_error;

over_both_transports!(a_call_answered_http_500_fails_naming_the_upstream_and_the_upstream_stays_up);
async fn a_call_answered_http_500_fails_naming_the_upstream_and_the_upstream_stays_up(via: Via) {
    let server = web_server(&["--http-fault", "status500", "--http-fault-tool", "slow"]);
    // Five 500s in a row, fewer than the breaker's count.
    let web = web_table(
        &server,
        via,
        &[("request_timeout", "\"5s\""), ("breaker_failures", "10")],
    );
    let (daemon, client) = start(&web).await;

    for _ in 0..5 {
        let (answer, took) = timed_call(&client, "web__slow", json!({"ms": 0})).await;
        let message = assert_upstream_error(&answer, -32010, WEB);
        assert!(
            message.contains("500") && message.contains("injected fault"),
            "{message}"
        );
        assert!(took < Duration::from_secs(2), "the error took {took:?}");
    }
    assert_goods(&client, "during").await;
    let status = daemon.upstream_status(WEB).await;
    eprintln!("after five 500s: {status}");
    assert!(ready(&status) && status["restarts"] == 0, "{status}");
    assert!(
        text(&status, "last_http_error").contains("HTTP 500"),
        "status does not show the last HTTP error: {status}"
    );
    wait_echo(&daemon, &client).await;
    assert_goods(&client, "after").await;
}

over_both_transports!(
    a_5xx_storm_restarts_the_upstream_into_crash_loop_and_an_operator_restart_ends_it
);
async fn a_5xx_storm_restarts_the_upstream_into_crash_loop_and_an_operator_restart_ends_it(
    via: Via,
) {
    let dir = tempfile::tempdir().unwrap();
    let down = dir.path().join("down-while-this-exists");
    let fault = format!("down-while={}", down.display());
    let server = web_server(&["--http-fault", &fault]);
    let web = web_table(
        &server,
        via,
        &[
            ("request_timeout", "\"5s\""),
            ("ping_interval", "\"200ms\""),
            ("ping_timeout", "\"1s\""),
            ("restart_budget", "3"),
            ("restart_window", "\"60s\""),
            ("restart_initial_backoff", "\"50ms\""),
            ("restart_max_backoff", "\"200ms\""),
        ],
    );
    let (daemon, client) = start(&web).await;

    std::fs::write(&down, "").unwrap();
    let (answer, took) = timed_call(&client, "web__echo", json!({})).await;
    let message = assert_upstream_error(&answer, -32010, WEB);
    eprintln!("call during the storm failed after {took:?}: {message}");
    assert!(message.contains("503"), "{message}");
    assert!(took < Duration::from_secs(2), "the error took {took:?}");
    assert_goods(&client, "during").await;

    // The supervisor publishes `crash-loop` a moment before it withdraws the catalog.
    let (status, took) = wait_status(&daemon, WEB, Duration::from_secs(20), |s| {
        s["state"] == "crash-loop" && s["tools"] == 0
    })
    .await;
    eprintln!("web reached crash-loop {took:?} into the storm: {status}");
    assert_eq!(status["restarts"], 3, "the budget is 3 restarts: {status}");
    assert!(
        text(&status, "last_error").contains("503"),
        "last_error does not name the cause: {status}"
    );
    assert!(
        text(&status, "last_http_error").contains("HTTP 503"),
        "{status}"
    );
    assert_fails_fast_in_crash_loop(&client).await;

    std::fs::remove_file(&down).unwrap();
    operator_restart(&daemon).await;
    wait_status(&daemon, WEB, Duration::from_secs(10), ready).await;
    daemon
        .wait_for_tools(&client, |n| n.iter().any(|t| t == "web__echo"))
        .await;
    wait_echo(&daemon, &client).await;
    assert_goods(&client, "after").await;
}
