//! Section 3, a remote server that answers a call with an event stream whose data is not JSON →
//! the upstream is treated as broken and restarted; its other tools serve again after.

use std::time::{Duration, Instant};

use serde_json::json;

use super::{
    Via, WEB, assert_goods, over_both_transports, ready, start, text, timed_call, wait_echo,
    wait_status, web_server, web_table,
};
use crate::common::assert_upstream_error;

over_both_transports!(garbage_in_an_answers_event_stream_marks_the_upstream_broken_and_restarts_it);
async fn garbage_in_an_answers_event_stream_marks_the_upstream_broken_and_restarts_it(via: Via) {
    let server = web_server(&["--http-fault", "garbage-sse", "--http-fault-tool", "slow"]);
    let web = web_table(
        &server,
        via,
        &[
            ("request_timeout", "\"5s\""),
            // Long enough to read `last_error` while it waits to restart.
            ("restart_initial_backoff", "\"500ms\""),
            ("restart_max_backoff", "\"1s\""),
        ],
    );
    let (daemon, client) = start(&web).await;

    let (answer, took) = timed_call(&client, "web__slow", json!({"ms": 0})).await;
    let broke_at = Instant::now();
    let message = assert_upstream_error(&answer, -32010, WEB);
    eprintln!("garbage reported to the caller after {took:?}: {message}");
    assert!(message.contains("not JSON-RPC"), "{message}");
    assert!(took < Duration::from_secs(2), "the error took {took:?}");
    assert_goods(&client, "during").await;

    let (status, _) = wait_status(&daemon, WEB, Duration::from_secs(10), |s| {
        s["state"] == "restarting" && s["restarts"] == 1
    })
    .await;
    assert!(
        text(&status, "last_error").contains("not JSON-RPC"),
        "last_error does not say why: {status}"
    );
    let (status, _) = wait_status(&daemon, WEB, Duration::from_secs(10), ready).await;
    eprintln!("web: garbage → ready in {:?}: {status}", broke_at.elapsed());
    wait_echo(&daemon, &client).await;
    assert_eq!(
        daemon.upstream_status(WEB).await["restarts"],
        1,
        "one broken stream is one restart"
    );
    assert_goods(&client, "after").await;
}
