//! Section 3, per-session isolation: `isolation = "per-session"` instances take server requests,
//! keep their state, get their session's log level, log to it alone and stop with the session.

use serde_json::json;

use super::{
    QUIET, RESOURCE, Setup, UPSTREAM_URI, all_client_capabilities, is_call_of, text, touch,
    wait_process_count,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_session_instances_take_server_requests_keep_their_state_and_stop_with_the_session() {
    let setup = Setup::start(&[], "isolation = \"per-session\"\n").await;
    let daemon = &setup.daemon;
    let shared = wait_process_count(daemon, 1).await;
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

    // Separate processes with separate state.
    let three = wait_process_count(daemon, 3).await;
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
    let two = wait_process_count(daemon, 2).await;
    assert!(shared.iter().all(|p| two.contains(p)), "{shared:?} {two:?}");
    assert_eq!(b.tool_text("up__subscriptions", json!({})).await, "[]");
    assert_eq!(b.delete().await, 200);
    let one = wait_process_count(daemon, 1).await;
    assert_eq!(one, shared, "only the shared instance is left: {three:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_session_instances_get_their_sessions_log_level_and_log_to_it_alone() {
    let setup = Setup::start(&[], "isolation = \"per-session\"\n").await;
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
