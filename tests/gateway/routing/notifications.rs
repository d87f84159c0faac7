//! Section 1, session-bound notifications: progress reaches only the request that asked, under its
//! own token; log messages only the sessions that asked for their level; resource updates only
//! subscribers, with the upstream subscriptions counted.

use std::time::Duration;

use serde_json::{Value, json};

use super::{
    QUIET, RESOURCE, Setup, UPSTREAM_URI, Via, assert_progress, is_call_of, over_each_transport,
    text, touch, upstream_subscriptions,
};
use crate::common::Client;

over_each_transport!(progress_reaches_only_the_request_that_asked_under_its_own_token);
async fn progress_reaches_only_the_request_that_asked_under_its_own_token(via: Via) {
    let setup = Setup::start_over(via, &[], "").await;
    let (a, b, mut a_events, mut b_events) = setup.two_hosts(json!({})).await;

    // Equal token values in both sessions, then different ones; different step counts tell the
    // streams apart. The calls overlap (100 ms between steps).
    for (a_token, b_token) in [(json!(7), json!(7)), (json!("tok-a"), json!("tok-b"))] {
        let call = |client: &Client, token: &Value, steps: u64| {
            client.start(
                "tools/call",
                json!({"name": "up__progress", "arguments": {"steps": steps, "delay_ms": 100},
                       "_meta": {"progressToken": token}}),
            )
        };
        let a_call = call(&a, &a_token, 3);
        let b_call = call(&b, &b_token, 5);
        let ((a_before, a_answer), (b_before, b_answer)) =
            tokio::join!(a_call.finish(), b_call.finish());
        assert_eq!(text(&a_answer), "done 3 steps");
        assert_eq!(text(&b_answer), "done 5 steps");
        assert_progress(&a_before, &a_token, 3, "A");
        assert_progress(&b_before, &b_token, 5, "B");
    }
    a_events
        .assert_silent(QUIET, "A's GET stream (progress belongs to the POST)")
        .await;
    b_events.assert_silent(QUIET, "B's GET stream").await;

    // The upstream saw mcpmux's own tokens, one per call, never a host's.
    let tokens: Vec<Value> = setup
        .recorded()
        .iter()
        .filter(|l| is_call_of(l, "progress"))
        .map(|l| l["params"]["_meta"]["progressToken"].clone())
        .collect();
    assert_eq!(tokens.len(), 4, "{tokens:?}");
    for (i, t) in tokens.iter().enumerate() {
        assert!(
            ![json!(7), json!("tok-a"), json!("tok-b")].contains(t),
            "a host's token reached the upstream: {tokens:?}"
        );
        assert!(!tokens[..i].contains(t), "a token was reused: {tokens:?}");
    }
}

over_each_transport!(progress_sent_just_before_the_answer_is_not_lost);
/// A progress notification the upstream sends right before its answer reaches the host too: the
/// answer must not overtake what the request produced before it.
async fn progress_sent_just_before_the_answer_is_not_lost(via: Via) {
    let setup = Setup::start_over(via, &[], "").await;
    let a = setup.host(json!({})).await;
    let mut a_events = a.events().await;
    let mut lost = Vec::new();
    for i in 0..50 {
        let (before, answer) = a
            .start(
                "tools/call",
                json!({"name": "up__progress", "arguments": {"steps": 1, "delay_ms": 0},
                       "_meta": {"progressToken": i}}),
            )
            .finish()
            .await;
        assert_eq!(text(&answer), "done 1 steps");
        if before.is_empty() {
            lost.push(i);
        } else {
            assert_progress(&before, &json!(i), 1, "A");
        }
    }
    a_events
        .assert_silent(QUIET, "progress belongs to the request's stream")
        .await;
    assert!(
        lost.is_empty(),
        "{} of 50 calls lost their only progress notification (tokens {lost:?})",
        lost.len()
    );
}

over_each_transport!(log_messages_reach_only_sessions_that_asked_for_their_level);
async fn log_messages_reach_only_sessions_that_asked_for_their_level(via: Via) {
    let setup = Setup::start_over(via, &[], "").await;
    let (a, b, mut a_events, mut b_events) = setup.two_hosts(json!({})).await;

    assert_eq!(
        a.result("logging/setLevel", json!({"level": "info"})).await,
        json!({})
    );
    assert_eq!(a.tool_text("up__log_level", json!({})).await, "level: info");

    // B's call logs; only A, which set a level, hears it, on its GET stream.
    for (caller, who) in [(&b, "B"), (&a, "A")] {
        let said = format!("from {who}");
        let logged = caller
            .tool_text("up__log", json!({"level": "info", "text": said}))
            .await;
        assert_eq!(logged, "logged");
        let message = a_events.next().await;
        assert_eq!(message["method"], "notifications/message", "{message}");
        assert_eq!(message["params"]["logger"], "up/testlog", "{message}");
        assert_eq!(message["params"]["level"], "info", "{message}");
        assert_eq!(message["params"]["data"], json!(said), "{message}");
        b_events
            .assert_silent(QUIET, "B set no level, so it gets no log messages")
            .await;
    }
    // Below A's level: nothing.
    a.tool_text("up__log", json!({"level": "debug", "text": "quiet"}))
        .await;
    a_events
        .assert_silent(QUIET, "debug is below A's info")
        .await;

    // B asks for errors only: info reaches A alone, error both.
    b.result("logging/setLevel", json!({"level": "error"}))
        .await;
    a.tool_text("up__log", json!({"level": "info", "text": "info again"}))
        .await;
    assert_eq!(a_events.next().await["params"]["data"], "info again");
    b_events
        .assert_silent(QUIET, "info is below B's error")
        .await;
    b.tool_text("up__log", json!({"level": "error", "text": "bad"}))
        .await;
    for events in [&mut a_events, &mut b_events] {
        let message = events.next().await;
        assert_eq!(message["params"]["data"], "bad", "{message}");
        assert_eq!(message["params"]["level"], "error", "{message}");
    }
    a_events.assert_silent(QUIET, "A, after").await;
    b_events.assert_silent(QUIET, "B, after").await;
}

over_each_transport!(
    resource_updates_reach_only_subscribers_and_upstream_subscriptions_are_counted
);
async fn resource_updates_reach_only_subscribers_and_upstream_subscriptions_are_counted(via: Via) {
    let setup = Setup::start_over(via, &[], "").await;
    let (a, b, mut a_events, mut b_events) = setup.two_hosts(json!({})).await;
    let subscribed = format!(r#"["{UPSTREAM_URI}"]"#);

    // A subscribes; B (not subscribed) touches: only A hears, under the exposed URI.
    a.result("resources/subscribe", json!({"uri": RESOURCE}))
        .await;
    assert_eq!(upstream_subscriptions(&b).await, subscribed);
    assert_eq!(
        touch(&b).await,
        format!("touched {UPSTREAM_URI} (subscribed: true)")
    );
    let updated = a_events.next().await;
    assert_eq!(updated["method"], "notifications/resources/updated");
    assert_eq!(updated["params"]["uri"], RESOURCE);
    b_events.assert_silent(QUIET, "B did not subscribe").await;

    // Subscribing twice is one subscription: one unsubscribe releases it upstream.
    a.result("resources/subscribe", json!({"uri": RESOURCE}))
        .await;
    a.result("resources/unsubscribe", json!({"uri": RESOURCE}))
        .await;
    assert_eq!(upstream_subscriptions(&a).await, "[]");
    touch(&a).await;
    a_events.assert_silent(QUIET, "A unsubscribed").await;

    // Both subscribed, one leaves: still subscribed upstream, and only the other hears.
    a.result("resources/subscribe", json!({"uri": RESOURCE}))
        .await;
    b.result("resources/subscribe", json!({"uri": RESOURCE}))
        .await;
    a.result("resources/unsubscribe", json!({"uri": RESOURCE}))
        .await;
    assert_eq!(upstream_subscriptions(&a).await, subscribed);
    touch(&a).await;
    assert_eq!(b_events.next().await["params"]["uri"], RESOURCE);
    a_events.assert_silent(QUIET, "A left").await;
    b.result("resources/unsubscribe", json!({"uri": RESOURCE}))
        .await;
    assert_eq!(upstream_subscriptions(&b).await, "[]");

    // A session that ends releases its subscriptions.
    a.result("resources/subscribe", json!({"uri": RESOURCE}))
        .await;
    assert_eq!(upstream_subscriptions(&b).await, subscribed);
    assert_eq!(a.delete().await, 200);
    assert_eq!(
        a_events.rest(Duration::from_secs(5)).await,
        Vec::<Value>::new()
    );
    assert_eq!(upstream_subscriptions(&b).await, "[]");
    b_events.assert_silent(QUIET, "B, after").await;
}
