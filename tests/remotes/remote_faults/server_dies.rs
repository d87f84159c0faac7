//! Section 1, a remote server that dies: killed → calls fail at once naming the upstream and why,
//! status shows the last HTTP error, its failed health pings restart it with backoff, serves again
//! once the server is back; exits mid-call → that call fails at once; while it stays dead,
//! `crash-loop` until an operator restart once it is back. (A failed call alone restarts nothing:
//! see `breaker`.)

use std::time::{Duration, Instant};

use serde_json::json;

use super::{
    Via, WEB, assert_fails_fast_in_crash_loop, assert_goods, operator_restart,
    over_both_transports, ready, start, text, timed_call, wait_echo, wait_status, web_server,
    web_table,
};
use crate::common::{RemoteServer, assert_upstream_error};

over_both_transports!(a_killed_server_fails_calls_clearly_and_its_upstream_comes_back_with_it);
async fn a_killed_server_fails_calls_clearly_and_its_upstream_comes_back_with_it(via: Via) {
    let mut server = web_server(&[]);
    let port = server.port;
    let web = web_table(
        &server,
        via,
        &[
            ("request_timeout", "\"5s\""),
            ("ping_interval", "\"200ms\""),
            ("restart_initial_backoff", "\"100ms\""),
            ("restart_max_backoff", "\"300ms\""),
            ("restart_budget", "1000"),
        ],
    );
    let (daemon, client) = start(&web).await;

    server.kill();
    let (answer, took) = timed_call(&client, "web__echo", json!({})).await;
    let message = assert_upstream_error(&answer, -32010, WEB);
    eprintln!("call to the dead server failed after {took:?}: {message}");
    assert!(took < Duration::from_secs(2), "the error took {took:?}");
    // Over Streamable HTTP the call's POST finds no server; over legacy HTTP+SSE the stream
    // the server kept open breaks off too, before or after the call's POST finds no server.
    let why: &[&str] = match via {
        Via::Sse => &["its event stream broke off", "cannot reach"],
        _ => &["cannot reach"],
    };
    assert!(why.iter().any(|w| message.contains(w)), "{message}");
    assert_goods(&client, "during").await;

    // It is restarted again and again while the server is gone, and says why.
    let (status, _) = wait_status(&daemon, WEB, Duration::from_secs(20), |s| {
        s["restarts"].as_u64() >= Some(2)
    })
    .await;
    eprintln!("while the server is dead: {status}");
    let http_error = text(&status, "last_http_error");
    assert!(
        http_error.contains("cannot reach") && http_error.contains(&port.to_string()),
        "last_http_error does not say why: {status}"
    );
    assert_ne!(status["state"], "ready", "{status}");
    let (answer, took) = timed_call(&client, "web__echo", json!({})).await;
    let message = assert_upstream_error(&answer, -32010, WEB);
    assert!(took < Duration::from_secs(2), "the error took {took:?}");
    eprintln!("call while it restarts: {message}");
    assert_goods(&client, "during").await;

    // The server comes back on its port: the next restart finds it.
    let back_at = Instant::now();
    let _server = RemoteServer::test_upstream(WEB, port, &[]);
    let (status, _) = wait_status(&daemon, WEB, Duration::from_secs(20), ready).await;
    eprintln!(
        "web ready {:?} after the server came back: {status}",
        back_at.elapsed()
    );
    wait_echo(&daemon, &client).await;
    assert_goods(&client, "after").await;
}

over_both_transports!(
    a_server_that_exits_mid_call_fails_that_call_then_crash_loops_while_it_stays_dead
);
async fn a_server_that_exits_mid_call_fails_that_call_then_crash_loops_while_it_stays_dead(
    via: Via,
) {
    let server = web_server(&[]);
    let port = server.port;
    let web = web_table(
        &server,
        via,
        &[
            ("request_timeout", "\"20s\""),
            ("ping_interval", "\"200ms\""),
            ("restart_budget", "3"),
            ("restart_window", "\"60s\""),
            ("restart_initial_backoff", "\"50ms\""),
            ("restart_max_backoff", "\"200ms\""),
        ],
    );
    let (daemon, client) = start(&web).await;

    let (answer, took) = timed_call(&client, "web__crash", json!({})).await;
    let message = assert_upstream_error(&answer, -32010, WEB);
    eprintln!("exit mid-call reported after {took:?}: {message}");
    assert!(took < Duration::from_secs(2), "the error took {took:?}");
    assert_goods(&client, "during").await;
    drop(server);

    // The supervisor publishes `crash-loop` a moment before it withdraws the catalog.
    let (status, took) = wait_status(&daemon, WEB, Duration::from_secs(20), |s| {
        s["state"] == "crash-loop" && s["tools"] == 0
    })
    .await;
    eprintln!("web reached crash-loop {took:?} after the exit: {status}");
    assert_eq!(status["restarts"], 3, "the budget is 3 restarts: {status}");
    let last_error = text(&status, "last_error");
    assert!(
        last_error.contains("cannot reach") && last_error.contains("within 60s"),
        "last_error does not name the cause: {status}"
    );
    assert!(
        text(&status, "last_http_error").contains("cannot reach"),
        "{status}"
    );

    // Its calls fail fast, naming it and its state.
    assert_fails_fast_in_crash_loop(&client).await;

    // The server is back; an operator restart brings the upstream back.
    let _server = RemoteServer::test_upstream(WEB, port, &[]);
    operator_restart(&daemon).await;
    let (status, _) = wait_status(&daemon, WEB, Duration::from_secs(10), ready).await;
    assert!(status["last_error"].is_null(), "{status}");
    daemon
        .wait_for_tools(&client, |n| n.iter().any(|t| t == "web__echo"))
        .await;
    wait_echo(&daemon, &client).await;
    assert_goods(&client, "after").await;
}
