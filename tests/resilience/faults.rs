//! Fault injection: each test runs one faulty test upstream beside two healthy ones (`good1`,
//! `good2`) that must keep answering before, during and after the fault, and shows what the
//! daemon does about it:
//!
//! 1. exits at start → restarted within its budget, then `crash-loop` (fast errors), until
//!    `mcpmux restart` brings it back once the fault clears;
//! 2. exits mid-call → that caller gets a clear error at once, one restart, tools work again;
//! 3. never answers → a per-tool timeout (`tool_timeouts`) answers -32001, other tools unaffected;
//! 4. stops answering pings → restarted; its in-flight call fails at once, saying why;
//! 5. writes a non-JSON line → treated as broken and restarted;
//! 6. writes a 100 MB line → refused at `max_message_bytes`, restarted, daemon memory bounded;
//! 7. floods notifications → the daemon survives, memory bounded, catalog re-reads coalesced;
//! 8. more calls than `max_in_flight` → "busy" at once; health pings neither count against the
//!    limit nor kill an upstream that is at it;
//! 9. `idle_stop` stops it (catalog kept, a call starts it), `lazy_start` waits for a session;
//! 10. SIGTERM with calls in flight → they complete, then no upstream process is left;
//! 11. after a restart, the sessions' subscriptions (and log level) are re-established.
//!
//! The shared helpers here, a module per numbered case (1. `crash_loop`, 2.
//! `exit_mid_call`, 3. `hanging_tool`, 4. `health_pings`, 5. `non_json_output`, 6. `huge_line`, 7.
//! `notification_flood`, 8. `max_in_flight`, 9. `idle_stop`, 10. `shutdown`, 11. `restart_state`).

mod crash_loop;
mod exit_mid_call;
mod hanging_tool;
mod health_pings;
mod huge_line;
mod idle_stop;
mod max_in_flight;
mod non_json_output;
mod notification_flood;
mod restart_state;
mod shutdown;

use std::time::{Duration, Instant};

use crate::common::healthy::{GOOD, assert_goods, goods, ready, timed_call, wait_status};
use crate::common::{Client, Daemon, poll_until, test_upstream};
use serde_json::{Value, json};

/// Daemon memory allowed after a memory-heavy fault.
const RSS_LIMIT_KIB: u64 = 100 * 1024;

/// Starts the daemon with the healthy upstreams plus `faulty`, connects a host, waits for the
/// healthy tools (and `also`, unless empty) and checks the healthy ones answer.
async fn start(faulty: &str, also: &[&str]) -> (Daemon, Client) {
    let daemon = Daemon::start(&format!("{}{faulty}", goods()));
    let client = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&client, |names| {
            GOOD.iter()
                .map(|g| format!("{g}__echo"))
                .chain(also.iter().map(|t| (*t).to_owned()))
                .all(|t| names.contains(&t))
        })
        .await;
    assert_goods(&client, "before").await;
    (daemon, client)
}

/// Asserts a successful `tools/call` answer whose first text block is `text`.
fn assert_text(answer: &Value, text: &str) {
    assert_eq!(
        answer["result"]["content"][0]["text"], text,
        "unexpected answer: {answer}"
    );
    assert_ne!(answer["result"]["isError"], true, "{answer}");
}

/// Polls `tool` (echo) until it answers from `upstream`; how long that took.
async fn wait_echo(daemon: &Daemon, client: &Client, upstream: &str) -> Duration {
    let started = Instant::now();
    let tool = format!("{upstream}__echo");
    let back = poll_until(Duration::from_secs(20), || async {
        let answer = client
            .request("tools/call", json!({"name": tool, "arguments": {}}))
            .await;
        answer["result"]["structuredContent"]["upstream"] == upstream
    })
    .await;
    assert!(back, "{tool} never worked again:\n{}", daemon.stderr());
    started.elapsed()
}

/// A faulty upstream table: the test upstream with `args`, then `policy` lines.
fn faulty(name: &str, args: &[&str], policy: &[(&str, &str)]) -> String {
    let mut table = test_upstream(name, args);
    for (key, value) in policy {
        table.push_str(&format!("{key} = {value}\n"));
    }
    table
}
