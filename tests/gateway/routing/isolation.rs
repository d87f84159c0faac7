//! Section 3, per-session isolation: `isolation = "per-session"` instances take server requests,
//! keep their state, get their session's log level, log to it alone, stop with the session, and
//! are restarted by the supervisor for their session alone when one is killed.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{
    QUIET, RESOURCE, Setup, UPSTREAM_URI, Via, all_client_capabilities, is_call_of,
    over_each_transport, text, touch, wait_process_count,
};
use crate::common::{Client, assert_upstream_error};

over_each_transport!(
    per_session_instances_take_server_requests_keep_their_state_and_stop_with_the_session
);
async fn per_session_instances_take_server_requests_keep_their_state_and_stop_with_the_session(
    via: Via,
) {
    let setup = Setup::start_over(via, &[], "isolation = \"per-session\"\n").await;
    let shared = setup.wait_instances(1).await;
    let a = setup.host(all_client_capabilities()).await;
    let b = setup.host(all_client_capabilities()).await;

    // The scenario that is ambiguous on a shared upstream works: each session has its own.
    let slow = a.start_tool("up__slow", json!({"ms": 3000}));
    setup
        .wait_recorded("A's slow call", |l| is_call_of(l, "slow"))
        .await;
    let mut sample = b.start_tool("up__sample", json!({"prompt": "B asks"}));
    let request = sample.next().await;
    assert_eq!(request["method"], "sampling/createMessage", "{request}");
    assert_eq!(
        request["params"]["messages"][0]["content"]["text"],
        "B asks"
    );
    b.respond(
        &request["id"],
        json!({"role": "assistant", "content": {"type": "text", "text": "B's answer"},
               "model": "m"}),
    )
    .await;
    let (before, answer) = sample.finish().await;
    assert!(before.is_empty(), "{before:?}");
    assert_eq!(text(&answer), "sampled: B's answer");
    let (before, answer) = slow.finish().await;
    assert!(before.is_empty(), "A was asked B's question: {before:?}");
    assert_eq!(text(&answer), "slept 3000ms");

    // Separate instances (processes, or sessions of the remote server) with separate state.
    let three = setup.wait_instances(3).await;
    a.result("resources/subscribe", json!({"uri": RESOURCE}))
        .await;
    assert_eq!(
        a.tool_text("up__subscriptions", json!({})).await,
        format!(r#"["{UPSTREAM_URI}"]"#)
    );
    assert_eq!(b.tool_text("up__subscriptions", json!({})).await, "[]");
    // An instance's resource updates reach its own session only, even if another subscribed.
    let mut a_events = a.events().await;
    let mut b_events = b.events().await;
    b.result("resources/subscribe", json!({"uri": RESOURCE}))
        .await;
    assert_eq!(
        touch(&a).await,
        format!("touched {UPSTREAM_URI} (subscribed: true)")
    );
    assert_eq!(a_events.next().await["params"]["uri"], RESOURCE);
    b_events
        .assert_silent(QUIET, "B's subscription is on B's instance")
        .await;
    b.result("resources/unsubscribe", json!({"uri": RESOURCE}))
        .await;

    // A session's instance stops when the session ends; the shared one stays.
    assert_eq!(a.delete().await, 200);
    let two = setup.wait_instances(2).await;
    assert!(shared.iter().all(|p| two.contains(p)), "{shared:?} {two:?}");
    assert_eq!(b.tool_text("up__subscriptions", json!({})).await, "[]");
    assert_eq!(b.delete().await, 200);
    let one = setup.wait_instances(1).await;
    assert_eq!(one, shared, "only the shared instance is left: {three:?}");
}

over_each_transport!(per_session_instances_get_their_sessions_log_level_and_log_to_it_alone);
async fn per_session_instances_get_their_sessions_log_level_and_log_to_it_alone(via: Via) {
    let setup = Setup::start_over(via, &[], "isolation = \"per-session\"\n").await;
    let (a, b, mut a_events, mut b_events) = setup.two_hosts(json!({})).await;
    a.result("logging/setLevel", json!({"level": "info"})).await;
    b.result("logging/setLevel", json!({"level": "info"})).await;
    assert_eq!(
        a.tool_text("up__log_level", json!({})).await,
        "level: info",
        "the level A set must reach A's own instance"
    );
    a.tool_text("up__log", json!({"text": "A's instance"}))
        .await;
    let message = a_events.next().await;
    assert_eq!(message["method"], "notifications/message", "{message}");
    assert_eq!(message["params"]["data"], "A's instance");
    b_events
        .assert_silent(QUIET, "A's instance logs to A only")
        .await;
}

async fn echo(client: &Client, who: &str) -> Value {
    client
        .request(
            "tools/call",
            json!({"name": "up__echo", "arguments": {"who": who}}),
        )
        .await
}

fn echoed(answer: &Value) -> bool {
    answer["result"]["isError"] != true && answer["result"]["content"].is_array()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_per_session_instance_is_restarted_for_its_session_alone() {
    let table = "isolation = \"per-session\"\nrestart_initial_backoff = \"1500ms\"\n";
    let setup = Setup::start(&[], table).await;
    let daemon = &setup.daemon;
    let shared = wait_process_count(daemon, 1).await;
    let a = setup.host(json!({})).await;
    let b = setup.host(json!({})).await;
    assert!(echoed(&echo(&b, "B").await));
    let with_b = wait_process_count(daemon, 2).await;
    assert!(echoed(&echo(&a, "A").await));
    let all = wait_process_count(daemon, 3).await;
    let a_instance = *all.iter().find(|p| !with_b.contains(p)).unwrap();
    let b_instance = *with_b.iter().find(|p| !shared.contains(p)).unwrap();

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(a_instance).unwrap()),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();

    // A's calls say why they fail (never "ready" without a connection), then work again.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut errors = Vec::new();
    loop {
        let answer = echo(&a, "A after the kill").await;
        if echoed(&answer) {
            break;
        }
        let message = assert_upstream_error(&answer, -32010, "up");
        assert!(
            !message.contains("is ready"),
            "a dead instance claimed to be ready: {message}"
        );
        errors.push(message);
        assert!(
            Instant::now() < deadline,
            "A's instance never came back: {errors:#?}\n{}",
            daemon.stderr()
        );
        // B is untouched meanwhile.
        assert!(echoed(&echo(&b, "B meanwhile").await), "B was disturbed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        errors
            .iter()
            .any(|m| m.contains("restarting") && m.contains("killed by signal 9")),
        "no call said the instance is restarting and why: {errors:#?}"
    );
    let after = wait_process_count(daemon, 3).await;
    assert!(after.contains(&b_instance), "B's instance was replaced");
    assert!(
        after.contains(&shared[0]),
        "the shared instance was replaced"
    );
    assert!(!after.contains(&a_instance));
    assert!(echoed(&echo(&b, "B after").await));
}
