//! Section 11, a faulty upstream that after a restart, the sessions' subscriptions (and log level)
//! are re-established.

use std::time::{Duration, Instant};

use serde_json::json;

use super::{assert_goods, faulty, ready, start, timed_call, wait_status};
use crate::common::{assert_upstream_error, poll_until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_and_log_level_are_restored_after_a_restart() {
    const RESOURCE: &str = "up+test://up/hello";
    const UPSTREAM_URI: &str = "test://up/hello";
    let up = faulty(
        "up",
        &["--protocol-tools"],
        &[("restart_initial_backoff", "\"100ms\"")],
    );
    let (daemon, client) = start(&up, &["up__subscriptions"]).await;
    let subscribed = format!(r#"["{UPSTREAM_URI}"]"#);

    client
        .result("resources/subscribe", json!({"uri": RESOURCE}))
        .await;
    client
        .result("logging/setLevel", json!({"level": "warning"}))
        .await;
    assert_eq!(
        client.tool_text("up__subscriptions", json!({})).await,
        subscribed
    );

    let (answer, _) = timed_call(&client, "up__crash", json!({})).await;
    let crashed_at = Instant::now();
    assert_upstream_error(&answer, -32010, "up");
    assert_goods(&client, "during").await;
    let (status, _) = wait_status(&daemon, "up", Duration::from_secs(10), |s| {
        ready(s) && s["restarts"] == 1
    })
    .await;
    eprintln!("up: crash → ready in {:?}: {status}", crashed_at.elapsed());

    // The replay runs just after it is ready.
    let restored = poll_until(Duration::from_secs(5), || async {
        let answer = client
            .request(
                "tools/call",
                json!({"name": "up__subscriptions", "arguments": {}}),
            )
            .await;
        answer["result"]["content"][0]["text"] == subscribed.as_str()
    })
    .await;
    assert!(
        restored,
        "the subscription was not re-established:\n{}",
        daemon.stderr()
    );
    assert_eq!(
        client.tool_text("up__log_level", json!({})).await,
        "level: warning"
    );

    // Updates reach the session again, under the exposed URI.
    let mut events = client.events().await;
    assert_eq!(
        client
            .tool_text("up__touch", json!({"uri": UPSTREAM_URI}))
            .await,
        format!("touched {UPSTREAM_URI} (subscribed: true)")
    );
    let updated = loop {
        let message = events.next().await;
        if message["method"] == "notifications/resources/updated" {
            break message;
        }
        assert!(
            message["method"]
                .as_str()
                .is_some_and(|m| m.ends_with("list_changed")),
            "unexpected message: {message}"
        );
    };
    assert_eq!(updated["params"]["uri"], RESOURCE, "{updated}");
    assert_goods(&client, "after").await;
}
