//! Healthy neighbours for the fault suites: two plain test upstreams (`good1`, `good2`) that
//! must keep answering before, during and after a fault, and the polling helpers those suites
//! share.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{Client, Daemon, test_upstream};

/// The healthy upstreams' names.
pub const GOOD: [&str; 2] = ["good1", "good2"];

/// The two healthy upstreams' tables.
pub fn goods() -> String {
    GOOD.iter().map(|g| test_upstream(g, &[])).collect()
}

/// Asserts both healthy upstreams answer `echo`.
pub async fn assert_goods(client: &Client, when: &str) {
    for name in GOOD {
        let answer = client
            .request(
                "tools/call",
                json!({"name": format!("{name}__echo"), "arguments": {"when": when}}),
            )
            .await;
        assert_eq!(
            answer["result"]["structuredContent"]["upstream"], name,
            "{name}__echo {when} the fault: {answer}"
        );
    }
}

/// Polls `GET /status` every 10 ms until `name`'s entry satisfies `pred`: that entry, and how
/// long it took. Panics with the last entry and the log after `timeout`.
pub async fn wait_status(
    daemon: &Daemon,
    name: &str,
    timeout: Duration,
    pred: impl Fn(&Value) -> bool,
) -> (Value, Duration) {
    let started = Instant::now();
    loop {
        let status = daemon.upstream_status(name).await;
        if pred(&status) {
            return (status, started.elapsed());
        }
        assert!(
            started.elapsed() < timeout,
            "{name} never reached the expected status; last: {status}\nlog:\n{}",
            daemon.stderr()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub fn ready(status: &Value) -> bool {
    status["state"] == "ready"
}

/// A `tools/call` and how long its answer took.
pub async fn timed_call(client: &Client, tool: &str, arguments: Value) -> (Value, Duration) {
    let started = Instant::now();
    let answer = client
        .request("tools/call", json!({"name": tool, "arguments": arguments}))
        .await;
    (answer, started.elapsed())
}

/// Asserts the daemon's memory stayed under `limit_kib` (now and at its peak) after a
/// memory-heavy fault; `before` is its RSS before, for the log.
pub fn assert_memory_bounded(daemon: &Daemon, before: u64, limit_kib: u64) {
    let (rss, peak) = (
        super::proc_kib(daemon.pid(), "VmRSS").unwrap(),
        super::proc_kib(daemon.pid(), "VmHWM").unwrap(),
    );
    eprintln!("daemon RSS: {before} KiB before, {rss} KiB after, peak {peak} KiB");
    assert!(rss < limit_kib, "daemon RSS {rss} KiB");
    assert!(peak < limit_kib, "daemon peak RSS {peak} KiB");
}
