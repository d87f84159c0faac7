//! Section 3, a faulty upstream that never answers → a per-tool timeout (`tool_timeouts`) answers
//! -32001, other tools unaffected.

use std::time::Duration;

use serde_json::json;

use super::{assert_goods, assert_text, faulty, ready, start, timed_call};
use crate::common::assert_upstream_error;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_tool_times_out_at_its_own_deadline_while_other_tools_keep_the_default() {
    let hanger = faulty(
        "hanger",
        &["--fault-tools"],
        &[("tool_timeouts", "{ hang = \"300ms\" }")],
    );
    let (daemon, client) = start(&hanger, &["hanger__hang"]).await;

    let (hang, slow, ()) = tokio::join!(
        timed_call(&client, "hanger__hang", json!({})),
        // Longer than `hang`'s 300 ms: only the default (60 s) applies to it.
        timed_call(&client, "hanger__slow", json!({"ms": 600})),
        assert_goods(&client, "during"),
    );
    let (answer, took) = hang;
    let message = assert_upstream_error(&answer, -32001, "hanger");
    eprintln!("hang timed out after {took:?}: {message}");
    assert!(message.contains("0.3s"), "{message}");
    assert!(
        took >= Duration::from_millis(250) && took < Duration::from_secs(2),
        "the timeout came after {took:?}"
    );
    let (answer, took) = slow;
    assert_text(&answer, "slept 600ms");
    assert!(took >= Duration::from_millis(600), "{took:?}");

    // A timeout is not a failure of the upstream.
    let status = daemon.upstream_status("hanger").await;
    assert!(ready(&status) && status["restarts"] == 0, "{status}");
    let (answer, _) = timed_call(&client, "hanger__slow", json!({"ms": 100})).await;
    assert_text(&answer, "slept 100ms");
    assert_goods(&client, "after").await;
}
