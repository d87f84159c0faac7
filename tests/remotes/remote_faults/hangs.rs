//! Section 2, a remote server that hangs: a tool whose POST is never answered → its own deadline
//! (`tool_timeouts`) answers -32001 and the upstream stays up; a frozen server (SIGSTOP) → calls
//! time out, failed health pings restart the upstream, and it serves again once thawed.

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::json;

use super::{
    Via, WEB, assert_goods, over_both_transports, ready, start, text, timed_call, wait_echo,
    wait_status, web_server, web_table,
};
use crate::common::{assert_upstream_error, poll_until};

over_both_transports!(
    a_post_that_is_never_answered_times_out_at_its_deadline_and_the_upstream_stays_up
);
async fn a_post_that_is_never_answered_times_out_at_its_deadline_and_the_upstream_stays_up(
    via: Via,
) {
    let server = web_server(&["--http-fault", "hang", "--http-fault-tool", "slow"]);
    let web = web_table(
        &server,
        via,
        &[
            ("tool_timeouts", "{ slow = \"300ms\" }"),
            // Pings go on meanwhile and keep it up.
            ("ping_interval", "\"100ms\""),
            ("ping_timeout", "\"1s\""),
        ],
    );
    let (daemon, client) = start(&web).await;

    let (hung, echo, ()) = tokio::join!(
        timed_call(&client, "web__slow", json!({"ms": 0})),
        timed_call(&client, "web__echo", json!({})),
        assert_goods(&client, "during"),
    );
    let (answer, took) = hung;
    let message = assert_upstream_error(&answer, -32001, WEB);
    eprintln!("the hung POST timed out after {took:?}: {message}");
    assert!(message.contains("0.3s"), "{message}");
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_secs(2),
        "the timeout came after {took:?}"
    );
    assert_eq!(
        echo.0["result"]["structuredContent"]["upstream"], WEB,
        "{}",
        echo.0
    );

    // A timeout is not a failure of the upstream: several pings later it is still up.
    let moved = poll_until(Duration::from_millis(600), || async {
        let s = daemon.upstream_status(WEB).await;
        !ready(&s) || s["restarts"] != 0
    })
    .await;
    let status = daemon.upstream_status(WEB).await;
    assert!(!moved, "a timeout made it fail: {status}");
    for _ in 0..3 {
        let (answer, _) = timed_call(&client, "web__slow", json!({"ms": 0})).await;
        assert_upstream_error(&answer, -32001, WEB);
    }
    let status = daemon.upstream_status(WEB).await;
    assert!(ready(&status) && status["restarts"] == 0, "{status}");
    assert_eq!(
        status["in_flight"], 0,
        "the timed-out calls are forgotten: {status}"
    );
    wait_echo(&daemon, &client).await;
    assert_goods(&client, "after").await;
}

over_both_transports!(
    a_frozen_server_times_out_is_restarted_by_its_pings_and_serves_again_once_thawed
);
async fn a_frozen_server_times_out_is_restarted_by_its_pings_and_serves_again_once_thawed(
    via: Via,
) {
    let server = web_server(&[]);
    let web = web_table(
        &server,
        via,
        &[
            ("request_timeout", "\"500ms\""),
            ("ping_interval", "\"200ms\""),
            ("ping_timeout", "\"300ms\""),
            ("startup_timeout", "\"1s\""),
            ("restart_initial_backoff", "\"100ms\""),
            ("restart_max_backoff", "\"300ms\""),
            ("restart_budget", "1000"),
        ],
    );
    let (daemon, client) = start(&web).await;

    // The process stops; its socket still accepts connections, nothing answers.
    server.signal(Signal::SIGSTOP);
    let (answer, took) = timed_call(&client, "web__echo", json!({})).await;
    eprintln!("call to the frozen server answered after {took:?}: {answer}");
    // Its deadline, or the failed ping that ended the connection first: never a hang.
    let code = answer["error"]["code"].as_i64().unwrap_or_default();
    assert!(code == -32001 || code == -32010, "{answer}");
    assert_upstream_error(&answer, code, WEB);
    assert!(took < Duration::from_secs(2), "the error took {took:?}");
    assert_goods(&client, "during").await;

    let (status, _) = wait_status(&daemon, WEB, Duration::from_secs(20), |s| {
        s["restarts"].as_u64() >= Some(2)
    })
    .await;
    eprintln!("while the server is frozen: {status}");
    let last_error = text(&status, "last_error");
    assert!(
        last_error.contains("stopped answering") || last_error.contains("within 1s"),
        "last_error does not say why: {status}"
    );
    assert_goods(&client, "during").await;

    let thawed_at = Instant::now();
    server.signal(Signal::SIGCONT);
    let (status, _) = wait_status(&daemon, WEB, Duration::from_secs(20), ready).await;
    eprintln!(
        "web ready {:?} after the server was thawed: {status}",
        thawed_at.elapsed()
    );
    wait_echo(&daemon, &client).await;
    assert_goods(&client, "after").await;
}
