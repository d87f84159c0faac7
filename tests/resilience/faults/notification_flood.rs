//! Section 7, a faulty upstream that floods notifications → the daemon survives, memory bounded,
//! catalog re-reads coalesced.

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use super::{RSS_LIMIT_KIB, assert_goods, assert_text, faulty, ready, start, timed_call};
use crate::common::{poll_until, proc_kib};

/// Requests with `method` the upstream received, from its `--record` file.
fn received(record: &Path, method: &str) -> usize {
    std::fs::read_to_string(record)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|m| m["method"] == method && m.get("id").is_some())
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_notification_flood_is_absorbed_with_coalesced_catalog_reads_and_bounded_memory() {
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join("flooder.jsonl");
    let flooder = faulty(
        "flooder",
        &["--fault-tools", "--record", record.to_str().unwrap()],
        &[],
    );
    let (daemon, client) = start(&flooder, &["flooder__flood"]).await;
    let tools_before = daemon.wait_for_tools(&client, |_| true).await;
    let reads_before = received(&record, "tools/list");
    let mut events = client.events().await;

    let (flood, ()) = tokio::join!(
        timed_call(&client, "flooder__flood", json!({"count": 20000})),
        assert_goods(&client, "during"),
    );
    let (answer, took) = flood;
    assert_text(&answer, "flooded 20000");
    eprintln!("flood of 2 × 20000 notifications answered after {took:?}");

    // Settled: no catalog re-read in flight any more.
    let settled = poll_until(Duration::from_secs(20), || async {
        daemon.upstream_status("flooder").await["in_flight"] == 0
    })
    .await;
    assert!(settled, "{}", daemon.upstream_status("flooder").await);
    let rereads = received(&record, "tools/list") - reads_before;
    eprintln!("20000 tools/list_changed caused {rereads} tools/list re-reads");
    assert!(
        (1..=20).contains(&rereads),
        "20000 list_changed notifications caused {rereads} re-reads"
    );
    let status = daemon.upstream_status("flooder").await;
    assert!(ready(&status) && status["restarts"] == 0, "{status}");
    // The listing did not change, so hosts hear nothing (and no log level was set).
    events
        .assert_silent(Duration::from_millis(300), "the flood changed nothing")
        .await;
    let tools_after = daemon.wait_for_tools(&client, |_| true).await;
    assert_eq!(tools_before, tools_after);
    assert_goods(&client, "after").await;

    let (rss, peak) = (
        proc_kib(daemon.pid(), "VmRSS").unwrap(),
        proc_kib(daemon.pid(), "VmHWM").unwrap(),
    );
    eprintln!("daemon RSS after the flood: {rss} KiB, peak {peak} KiB");
    assert!(rss < RSS_LIMIT_KIB, "daemon RSS {rss} KiB");
    assert!(peak < RSS_LIMIT_KIB, "daemon peak RSS {peak} KiB");
}
