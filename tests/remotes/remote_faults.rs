//! Fault injection for remote upstreams, as `tests/resilience/faults` does for stdio ones: each
//! test runs one faulty remote upstream (`web`, our test upstream in its `--http` mode, reached
//! over Streamable HTTP) beside two healthy stdio ones (`good1`, `good2`) that must keep answering
//! before, during and after the fault, and shows what the daemon does about it:
//!
//! 1. the server is killed → calls fail at once naming `web` and why, status shows the last
//!    HTTP error, the upstream is restarted with backoff and serves again once the server is back;
//!    the server exits mid-call → that call fails at once; while it stays dead, `crash-loop`
//!    (fast errors) until an operator restart once it is back;
//! 2. a tool whose POST never answers → its deadline (`tool_timeouts`) answers -32001, the
//!    upstream stays up; a frozen server (SIGSTOP) → calls time out, failed pings restart it,
//!    it serves again once thawed;
//! 3. an answer's event stream whose data is not JSON → that call fails alone over Streamable
//!    HTTP; over the legacy transport's one stream the upstream is broken and restarted;
//! 4. an event of 100 MB → refused at `max_message_bytes`, daemon memory bounded; that call
//!    fails alone over Streamable HTTP, the legacy transport's upstream is restarted;
//! 5. a tool answered HTTP 500 → that call fails naming `web` and the 500, the upstream stays up;
//!    every POST answered 503 (a 5xx storm) → failed pings restart it, `crash-loop` within its
//!    budget, an operator restart brings it back once the storm is over;
//! 6. a call whose connection is dropped → that call fails alone, the calls beside it are
//!    answered, no restart; `breaker_failures` in a row restart it;
//! 7. a call answered with something that is not JSON-RPC while 20 calls of 4 sessions are in
//!    flight → that call fails alone, the 20 are answered, no restart;
//! 8. the server forgets the HTTP session (404) → a new one is opened, the refused call sent
//!    again, the calls made meanwhile wait for it: none fails.
//!
//! The shared helpers here, a module per numbered case (1. `server_dies`, 2.
//! `hangs`, 3. `garbage_sse`, 4. `huge_event`, 5. `status_5xx`, 6. `breaker`, 7. `bad_answer`,
//! 8. `session_lost`).

mod bad_answer;
mod breaker;
mod garbage_sse;
mod hangs;
mod huge_event;
mod server_dies;
mod session_lost;
mod status_5xx;

use std::time::{Duration, Instant};

use crate::common;
use crate::common::healthy::{GOOD, assert_goods, goods, ready, timed_call, wait_status};
use crate::common::{Client, Daemon, RemoteServer, Via, poll_until};
use serde_json::{Value, json};

/// The faulty remote upstream's name.
const WEB: &str = "web";
/// Daemon memory allowed after a memory-heavy fault.
const RSS_LIMIT_KIB: u64 = 100 * 1024;

/// Our test upstream over HTTP as `web`, with `args` (its `--http-fault` flags).
fn web_server(args: &[&str]) -> RemoteServer {
    RemoteServer::test_upstream(WEB, 0, args)
}

/// The `[upstreams.web]` table reaching `server` the way `via` says (Http or Sse), then
/// `policy` lines.
fn web_table(server: &RemoteServer, via: Via, policy: &[(&str, &str)]) -> String {
    let mut table = server.table(WEB, via);
    for (key, value) in policy {
        table.push_str(&format!("{key} = {value}\n"));
    }
    table
}

/// Runs fault test `$name(via)` twice: with `web` over Streamable HTTP and over legacy HTTP+SSE.
macro_rules! over_both_transports {
    ($name:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn streamable_http() {
                super::$name(crate::common::Via::Http).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn legacy_sse() {
                super::$name(crate::common::Via::Sse).await;
            }
        }
    };
}
use over_both_transports;

/// Starts the daemon with the healthy upstreams plus `faulty`, connects a host, waits for the
/// healthy tools and `web__echo`, and checks they all answer.
async fn start(faulty: &str) -> (Daemon, Client) {
    let daemon = Daemon::start(&format!("{}{faulty}", goods()));
    let client = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&client, |names| {
            GOOD.iter()
                .chain(&[WEB])
                .all(|u| names.contains(&format!("{u}__echo")))
        })
        .await;
    assert_goods(&client, "before").await;
    let (answer, _) = timed_call(&client, "web__echo", json!({})).await;
    assert_eq!(
        answer["result"]["structuredContent"]["upstream"], WEB,
        "{answer}"
    );
    (daemon, client)
}

/// `status[key]` as text (empty when absent).
fn text(status: &Value, key: &str) -> String {
    status[key].as_str().unwrap_or_default().to_owned()
}

/// Polls `web__echo` until it answers from `web`; how long that took.
async fn wait_echo(daemon: &Daemon, client: &Client) -> Duration {
    let started = Instant::now();
    let back = poll_until(Duration::from_secs(20), || async {
        let answer = client
            .request("tools/call", json!({"name": "web__echo", "arguments": {}}))
            .await;
        answer["result"]["structuredContent"]["upstream"] == WEB
    })
    .await;
    assert!(back, "web__echo never worked again:\n{}", daemon.stderr());
    started.elapsed()
}

/// `POST /upstreams/web/restart` on the admin API (what `mcpmux restart web` does).
async fn operator_restart(daemon: &Daemon) {
    let response = daemon
        .admin_post(&format!("/upstreams/{WEB}/restart"), serde_json::json!({}))
        .await;
    assert!(
        response.status().is_success(),
        "the restart was refused: {}",
        response.text().await.unwrap_or_default()
    );
}

/// `web`'s calls fail fast, naming it and its crash loop, while the healthy ones keep answering.
async fn assert_fails_fast_in_crash_loop(client: &Client) {
    let (answer, took) = timed_call(client, "web__echo", json!({})).await;
    let message = common::assert_upstream_error(&answer, -32010, WEB);
    assert!(message.contains("crash-loop"), "{message}");
    assert!(took < Duration::from_secs(1), "the error took {took:?}");
    assert_goods(client, "during").await;
}
