//! Section 6, one request that fails is not a dead server: a call whose POST's connection is
//! dropped (`reset`) fails alone, naming the upstream and the transport error, while the calls
//! in flight beside it are answered and the upstream is not restarted; `breaker_failures` such
//! failures in a row within `breaker_window` do restart it, and it serves again.

use std::time::Duration;

use serde_json::json;

use super::{
    Via, WEB, assert_goods, over_both_transports, ready, start, text, timed_call, wait_echo,
    wait_status, web_server, web_table,
};
use crate::common::{assert_upstream_error, poll_until};

/// The tool whose calls meet the fault; `slow` calls are the ones in flight beside it.
const FAULTY: &str = "web__fancy";

over_both_transports!(a_reset_request_fails_alone_and_only_consecutive_failures_restart_the_link);
async fn a_reset_request_fails_alone_and_only_consecutive_failures_restart_the_link(via: Via) {
    let server = web_server(&["--http-fault", "reset", "--http-fault-tool", "fancy"]);
    let web = web_table(
        &server,
        via,
        &[
            ("request_timeout", "\"30s\""),
            ("breaker_failures", "3"),
            ("breaker_window", "\"60s\""),
            ("restart_initial_backoff", "\"100ms\""),
        ],
    );
    let (daemon, client) = start(&web).await;

    // Three slow calls in flight; one call beside them is reset.
    let slow = |n: u64| {
        let client = &client;
        async move {
            client
                .request(
                    "tools/call",
                    json!({"name": "web__slow", "arguments": {"ms": 1500, "n": n}}),
                )
                .await
        }
    };
    let reset = async {
        // Once the slow calls are in flight.
        let in_flight = poll_until(Duration::from_secs(10), || async {
            daemon.upstream_status(WEB).await["in_flight"].as_u64() >= Some(3)
        })
        .await;
        assert!(in_flight, "the slow calls never were in flight together");
        timed_call(&client, FAULTY, json!({})).await
    };
    let (a, b, c, (failed, took)) = tokio::join!(slow(1), slow(2), slow(3), reset);
    let message = assert_upstream_error(&failed, -32010, WEB);
    eprintln!("the reset call failed after {took:?}: {message}");
    assert!(took < Duration::from_secs(5), "the error took {took:?}");
    for answer in [&a, &b, &c] {
        assert!(
            answer["result"].is_object(),
            "a call in flight beside the reset one failed: {answer}\n{}",
            daemon.stderr()
        );
    }
    let status = daemon.upstream_status(WEB).await;
    assert!(ready(&status), "{status}");
    assert_eq!(
        status["restarts"], 0,
        "one failed request restarted the link: {status}"
    );
    assert_goods(&client, "after one reset").await;

    // Three in a row (nothing answered between them) trip the breaker: the link restarts.
    for n in 1..=3 {
        let (answer, _) = timed_call(&client, FAULTY, json!({})).await;
        let message = assert_upstream_error(&answer, -32010, WEB);
        eprintln!("reset {n} of 3: {message}");
    }
    let (status, took) = wait_status(&daemon, WEB, Duration::from_secs(30), |s| {
        s["restarts"] == 1 && ready(s)
    })
    .await;
    eprintln!("restarted by the breaker and ready {took:?} later: {status}");
    assert!(
        text(&status, "last_http_error").contains(WEB),
        "status does not show the failure: {status}"
    );
    assert!(
        daemon.log_count(&["upstream=web", "3 requests in a row failed"]) >= 1,
        "the breaker's reason is not logged:\n{}",
        daemon.stderr()
    );
    wait_echo(&daemon, &client).await;
    assert_goods(&client, "after the breaker").await;
}
