//! Section 8, a faulty upstream that more calls than `max_in_flight` → "busy" at once; health pings
//! neither count against the limit nor kill an upstream that is at it.

use std::time::Duration;

use serde_json::json;

use super::{assert_goods, assert_text, faulty, ready, start, timed_call};
use crate::common::{assert_upstream_error, poll_until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_beyond_max_in_flight_are_refused_as_busy_at_once() {
    let narrow = faulty("narrow", &[], &[("max_in_flight", "2")]);
    let (daemon, client) = start(&narrow, &["narrow__slow"]).await;

    let slow = || timed_call(&client, "narrow__slow", json!({"ms": 500}));
    let (a, b, c, ()) = tokio::join!(slow(), slow(), slow(), assert_goods(&client, "during"));
    let (busy, done): (Vec<_>, Vec<_>) = [a, b, c]
        .into_iter()
        .partition(|(answer, _)| answer.get("error").is_some());
    assert_eq!(
        busy.len(),
        1,
        "exactly one call is refused: {busy:?} {done:?}"
    );
    let (answer, took) = &busy[0];
    let message = assert_upstream_error(answer, -32011, "narrow");
    eprintln!("busy after {took:?}: {message}");
    assert!(message.contains("busy"), "{message}");
    assert!(
        *took < Duration::from_millis(300),
        "busy came after {took:?}"
    );
    for (answer, took) in &done {
        assert_text(answer, "slept 500ms");
        assert!(*took >= Duration::from_millis(500), "{took:?}");
    }
    let status = daemon.upstream_status("narrow").await;
    assert!(ready(&status) && status["restarts"] == 0, "{status}");
    assert_goods(&client, "after").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_pings_of_an_upstream_at_max_in_flight_do_not_restart_it() {
    let full = faulty(
        "full",
        &[],
        &[
            ("max_in_flight", "2"),
            ("ping_interval", "\"200ms\""),
            ("ping_timeout", "\"1s\""),
        ],
    );
    let (daemon, client) = start(&full, &["full__slow"]).await;

    // Both slots busy for 1.5 s: several pings fall due meanwhile.
    let slow = || timed_call(&client, "full__slow", json!({"ms": 1500}));
    let (a, b, ()) = tokio::join!(slow(), slow(), assert_goods(&client, "during"));
    let status = daemon.upstream_status("full").await;
    for (answer, _) in [&a, &b] {
        assert_eq!(
            answer["result"]["content"][0]["text"], "slept 1500ms",
            "a call at the limit failed (the health ping, refused as busy, counted as a \
             failed health check and restarted the upstream?): {answer}\nstatus: {status}"
        );
    }
    assert!(ready(&status) && status["restarts"] == 0, "{status}");
    assert_goods(&client, "after").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_in_flight_counts_host_calls_only_not_a_pending_health_ping() {
    let record = tempfile::NamedTempFile::new().unwrap();
    let record_path = record.path().to_str().unwrap().to_owned();
    let pinged = faulty(
        "pinged",
        &["--fault-tools", "--record", &record_path],
        &[
            ("max_in_flight", "2"),
            ("ping_interval", "\"100ms\""),
            // The unanswered ping stays pending for the whole test.
            ("ping_timeout", "\"20s\""),
        ],
    );
    let (daemon, client) = start(&pinged, &["pinged__stop_pings"]).await;
    let (answer, _) = timed_call(&client, "pinged__stop_pings", json!({})).await;
    assert_text(&answer, "pings stopped");
    // A ping is now pending (and never answered); status counts host requests only.
    let pinged_after_stop = || {
        let seen = std::fs::read_to_string(record.path()).unwrap_or_default();
        let after = seen
            .split("stop_pings")
            .nth(1)
            .unwrap_or_default()
            .to_owned();
        async move { after.contains(r#""method":"ping""#) }
    };
    assert!(
        poll_until(Duration::from_secs(5), pinged_after_stop).await,
        "no ping was sent after stop_pings"
    );
    assert_eq!(daemon.upstream_status("pinged").await["in_flight"], 0);

    let slow = || timed_call(&client, "pinged__slow", json!({"ms": 300}));
    let (a, b, ()) = tokio::join!(slow(), slow(), assert_goods(&client, "during"));
    for (answer, _) in [&a, &b] {
        assert_eq!(
            answer["result"]["content"][0]["text"], "slept 300ms",
            "two host calls are within max_in_flight = 2, but one was refused (the pending \
             health ping took a slot?): {answer}"
        );
    }
    assert_goods(&client, "after").await;
}
