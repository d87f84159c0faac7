//! Section 3, a remote server that answers a call with an event stream whose data is not JSON.
//! Over Streamable HTTP the stream is that one call's: the call fails alone, naming the upstream
//! and what it sent, and the link goes on (no restart). Over the legacy HTTP+SSE transport every
//! answer shares one stream, which can no longer be trusted: the upstream is restarted, and its
//! other tools serve again after.

use std::time::{Duration, Instant};

use serde_json::json;

use super::{
    Via, WEB, assert_goods, over_both_transports, ready, start, text, timed_call, wait_echo,
    wait_status, web_server, web_table,
};
use crate::common::assert_upstream_error;

over_both_transports!(
    garbage_in_an_answers_event_stream_fails_the_call_and_restarts_only_a_shared_stream
);
async fn garbage_in_an_answers_event_stream_fails_the_call_and_restarts_only_a_shared_stream(
    via: Via,
) {
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

    if via == Via::Http {
        // The call's own stream: nothing else noticed.
        let (answer, _) = timed_call(&client, "web__echo", json!({})).await;
        assert_eq!(
            answer["result"]["structuredContent"]["upstream"], WEB,
            "{answer}"
        );
        let status = daemon.upstream_status(WEB).await;
        assert!(ready(&status), "{status}");
        assert_eq!(
            status["restarts"], 0,
            "one bad answer restarted the link: {status}"
        );
        assert!(
            text(&status, "last_http_error").contains("not JSON-RPC"),
            "status does not show the bad answer: {status}"
        );
        return;
    }
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
