//! Section 4, a remote server that answers a call with one 100 MB event → refused at
//! `max_message_bytes`, the daemon's memory bounded; over Streamable HTTP that call fails alone
//! (the event was on its own stream), over the legacy transport's shared stream the upstream is
//! restarted.

use std::time::{Duration, Instant};

use serde_json::json;

use super::{
    RSS_LIMIT_KIB, Via, WEB, assert_goods, over_both_transports, ready, start, text, timed_call,
    wait_echo, wait_status, web_server, web_table,
};
use crate::common::{assert_upstream_error, proc_kib};

over_both_transports!(an_event_over_max_message_bytes_fails_the_call_and_memory_stays_bounded);
async fn an_event_over_max_message_bytes_fails_the_call_and_memory_stays_bounded(via: Via) {
    let server = web_server(&[
        "--http-fault",
        "huge-event=104857600",
        "--http-fault-tool",
        "slow",
    ]);
    let web = web_table(
        &server,
        via,
        &[
            ("max_message_bytes", "1048576"),
            ("request_timeout", "\"10s\""),
            // Long enough to read `last_error` while it waits to restart.
            ("restart_initial_backoff", "\"500ms\""),
            ("restart_max_backoff", "\"1s\""),
        ],
    );
    let (daemon, client) = start(&web).await;
    let before = proc_kib(daemon.pid(), "VmRSS").unwrap();

    let (answer, took) = timed_call(&client, "web__slow", json!({"ms": 0})).await;
    let failed_at = Instant::now();
    let message = assert_upstream_error(&answer, -32010, WEB);
    eprintln!("huge event reported to the caller after {took:?}: {message}");
    assert!(message.contains("max_message_bytes"), "{message}");
    assert_goods(&client, "during").await;

    if via == Via::Http {
        let status = daemon.upstream_status(WEB).await;
        assert!(ready(&status), "{status}");
        assert_eq!(
            status["restarts"], 0,
            "one long answer restarted the link: {status}"
        );
        wait_echo(&daemon, &client).await;
        crate::common::healthy::assert_memory_bounded(&daemon, before, RSS_LIMIT_KIB);
        return;
    }
    let (status, _) = wait_status(&daemon, WEB, Duration::from_secs(10), |s| {
        s["state"] == "restarting" && s["restarts"] == 1
    })
    .await;
    let last_error = text(&status, "last_error");
    let (status, _) = wait_status(&daemon, WEB, Duration::from_secs(20), |s| {
        ready(s) && s["restarts"] == 1
    })
    .await;
    eprintln!(
        "web: refused event → ready in {:?}: {status}",
        failed_at.elapsed()
    );
    wait_echo(&daemon, &client).await;
    assert_goods(&client, "after").await;

    crate::common::healthy::assert_memory_bounded(&daemon, before, RSS_LIMIT_KIB);
    assert!(
        last_error.contains("max_message_bytes"),
        "last_error does not say why: {last_error}"
    );
}
