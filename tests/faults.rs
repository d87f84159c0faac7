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

#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{
    Client, Daemon, MCPMUX, alive, assert_all_gone, assert_upstream_error, comm, descendants,
    poll_until, proc_kib, test_upstream,
};
use serde_json::{Value, json};

const GOOD: [&str; 2] = ["good1", "good2"];
/// Daemon memory allowed after a memory-heavy fault.
const RSS_LIMIT_KIB: u64 = 100 * 1024;

/// The two healthy upstreams' tables.
fn goods() -> String {
    GOOD.iter().map(|g| test_upstream(g, &[])).collect()
}

/// Asserts both healthy upstreams answer `echo`.
async fn assert_goods(client: &Client, when: &str) {
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

/// Polls `GET /status` every 10 ms until `name`'s entry satisfies `pred`: that entry, and how
/// long it took. Panics with the last entry and the log after `timeout`.
async fn wait_status(
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

fn ready(status: &Value) -> bool {
    status["state"] == "ready"
}

/// A `tools/call` and how long its answer took.
async fn timed_call(client: &Client, tool: &str, arguments: Value) -> (Value, Duration) {
    let started = Instant::now();
    let answer = client
        .request("tools/call", json!({"name": tool, "arguments": arguments}))
        .await;
    (answer, started.elapsed())
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

// ---------------------------------------------------------------------------------------------
// 1. Exit at start → crash-loop → operator restart

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_at_start_ends_in_crash_loop_within_budget_and_mcpmux_restart_brings_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let crash_file = dir.path().join("crash-while-this-exists");
    std::fs::write(&crash_file, "").unwrap();
    let bad = faulty(
        "bad",
        &["--crash-file", crash_file.to_str().unwrap()],
        &[
            ("restart_budget", "3"),
            ("restart_window", "\"60s\""),
            ("restart_initial_backoff", "\"50ms\""),
            ("restart_max_backoff", "\"200ms\""),
        ],
    );
    let (daemon, client) = start(&bad, &[]).await;

    let (status, took) = wait_status(&daemon, "bad", Duration::from_secs(20), |s| {
        s["state"] == "crash-loop"
    })
    .await;
    eprintln!("bad reached crash-loop {took:?} after the healthy tools were listed: {status}");
    assert_eq!(status["restarts"], 3, "the budget is 3 restarts: {status}");
    let last_error = status["last_error"].as_str().unwrap_or_default();
    assert!(
        last_error.contains("exited with status 4") && last_error.contains("within 60s"),
        "last_error does not name the cause: {status}"
    );
    assert_eq!(status["tools"], 0, "{status}");
    assert_goods(&client, "during").await;

    // No more restarts: it stays in crash-loop, 1 start + 3 restarts.
    let moved = poll_until(Duration::from_millis(600), || async {
        let s = daemon.upstream_status("bad").await;
        s["state"] != "crash-loop" || s["restarts"] != 3
    })
    .await;
    assert!(
        !moved,
        "bad left crash-loop by itself: {}",
        daemon.upstream_status("bad").await
    );
    assert_eq!(
        daemon.log_count(&["upstream=bad", "Started upstream process"]),
        4,
        "bad should have been started 4 times:\n{}",
        daemon.stderr()
    );

    // Its calls fail fast, naming it and its state.
    let (answer, took) = timed_call(&client, "bad__echo", json!({})).await;
    let message = assert_upstream_error(&answer, -32010, "bad");
    assert!(message.contains("crash-loop"), "{message}");
    assert!(took < Duration::from_secs(1), "the error took {took:?}");
    assert_goods(&client, "during").await;

    // The fault clears; an operator restart brings it back.
    std::fs::remove_file(&crash_file).unwrap();
    let admin = daemon.admin_url.as_deref().unwrap();
    let started = Instant::now();
    let output = tokio::process::Command::new(MCPMUX)
        .args(["restart", "bad", "--admin"])
        .arg(admin.strip_prefix("http://").unwrap())
        .env_remove("MCPMUX_CONFIG")
        .env_remove("MCPMUX_ADMIN")
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(30), output)
        .await
        .expect("mcpmux restart did not finish")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("restarted bad"),
        "mcpmux restart failed: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let (status, _) = wait_status(&daemon, "bad", Duration::from_secs(10), ready).await;
    eprintln!(
        "bad ready {:?} after `mcpmux restart` was started",
        started.elapsed()
    );
    assert!(status["last_error"].is_null(), "{status}");
    let tools = daemon
        .wait_for_tools(&client, |n| n.iter().any(|t| t == "bad__echo"))
        .await;
    assert_eq!(
        tools.iter().filter(|t| t.starts_with("bad__")).count(),
        7,
        "{tools:?}"
    );
    let (answer, _) = timed_call(&client, "bad__echo", json!({})).await;
    assert_eq!(answer["result"]["structuredContent"]["upstream"], "bad");
    assert_goods(&client, "after").await;
}

// ---------------------------------------------------------------------------------------------
// 2. Exit mid-call

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_mid_call_fails_that_call_at_once_and_restarts_the_upstream_once() {
    let crasher = faulty(
        "crasher",
        &[],
        &[
            ("request_timeout", "\"20s\""),
            ("restart_initial_backoff", "\"100ms\""),
        ],
    );
    let (daemon, client) = start(&crasher, &["crasher__crash"]).await;

    let (answer, took) = timed_call(&client, "crasher__crash", json!({})).await;
    let crashed_at = Instant::now();
    let message = assert_upstream_error(&answer, -32010, "crasher");
    eprintln!("crash reported to the caller after {took:?}: {message}");
    assert!(took < Duration::from_secs(2), "the error took {took:?}");
    assert_goods(&client, "during").await;

    let (status, _) = wait_status(&daemon, "crasher", Duration::from_secs(10), |s| {
        ready(s) && s["restarts"] == 1
    })
    .await;
    eprintln!(
        "crasher: crash → ready in {:?}: {status}",
        crashed_at.elapsed()
    );
    let logged = daemon.log_count(&["upstream=crasher", "exited with status 3"]);
    assert!(
        logged >= 1,
        "the exit status is not logged:\n{}",
        daemon.stderr()
    );
    wait_echo(&daemon, &client, "crasher").await;
    assert_eq!(
        daemon.upstream_status("crasher").await["restarts"],
        1,
        "one crash is one restart"
    );
    assert_goods(&client, "after").await;
}

// ---------------------------------------------------------------------------------------------
// 3. A tool that never answers

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

// ---------------------------------------------------------------------------------------------
// 4. Health pings

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_stops_answering_pings_is_restarted_and_its_calls_fail_at_once() {
    let sleepy = faulty(
        "sleepy",
        &["--fault-tools"],
        &[
            ("ping_interval", "\"200ms\""),
            ("ping_timeout", "\"300ms\""),
            ("restart_initial_backoff", "\"100ms\""),
        ],
    );
    let (daemon, client) = start(&sleepy, &["sleepy__stop_pings"]).await;
    // Answered pings keep it up.
    let (status, _) = wait_status(&daemon, "sleepy", Duration::from_secs(10), ready).await;
    assert_eq!(status["restarts"], 0, "{status}");

    let (answer, _) = timed_call(&client, "sleepy__stop_pings", json!({})).await;
    assert_text(&answer, "pings stopped");
    let (slow, ()) = tokio::join!(
        timed_call(&client, "sleepy__slow", json!({"ms": 5000})),
        assert_goods(&client, "during"),
    );
    let failed_at = Instant::now();
    let (answer, took) = slow;
    let message = assert_upstream_error(&answer, -32010, "sleepy");
    eprintln!("in-flight call failed after {took:?}: {message}");
    assert!(message.contains("stopped answering"), "{message}");
    assert!(
        took < Duration::from_secs(2),
        "the call failed after {took:?}"
    );

    let (status, _) = wait_status(&daemon, "sleepy", Duration::from_secs(10), |s| {
        ready(s) && s["restarts"] == 1
    })
    .await;
    eprintln!(
        "sleepy: ping failure → ready in {:?}: {status}",
        failed_at.elapsed()
    );
    assert!(
        daemon.log_count(&["upstream=sleepy", "stopped answering"]) >= 1,
        "the reason is not logged:\n{}",
        daemon.stderr()
    );
    wait_echo(&daemon, &client, "sleepy").await;
    assert_goods(&client, "after").await;
}

// ---------------------------------------------------------------------------------------------
// 5. Non-JSON output mid-run

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn non_json_output_mid_run_marks_the_upstream_broken_and_restarts_it() {
    let noisy = faulty(
        "noisy",
        &["--fault-tools"],
        &[
            // Long enough to read `last_error` while it waits to restart.
            ("restart_initial_backoff", "\"500ms\""),
            ("restart_max_backoff", "\"1s\""),
        ],
    );
    let (daemon, client) = start(&noisy, &["noisy__garbage"]).await;

    let (answer, took) = timed_call(&client, "noisy__garbage", json!({})).await;
    let broke_at = Instant::now();
    let message = assert_upstream_error(&answer, -32010, "noisy");
    eprintln!("garbage reported to the caller after {took:?}: {message}");
    assert!(message.contains("not JSON-RPC"), "{message}");
    assert_goods(&client, "during").await;

    let (status, _) = wait_status(&daemon, "noisy", Duration::from_secs(10), |s| {
        s["state"] == "restarting" && s["restarts"] == 1
    })
    .await;
    let last_error = status["last_error"].as_str().unwrap_or_default();
    assert!(
        last_error.contains("not JSON-RPC"),
        "last_error does not say why: {status}"
    );
    let (status, _) = wait_status(&daemon, "noisy", Duration::from_secs(10), ready).await;
    eprintln!(
        "noisy: garbage → ready in {:?}: {status}",
        broke_at.elapsed()
    );
    wait_echo(&daemon, &client, "noisy").await;
    assert_goods(&client, "after").await;
}

// ---------------------------------------------------------------------------------------------
// 6. A huge line

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_over_max_message_bytes_fails_the_call_restarts_the_upstream_and_memory_stays_bounded()
 {
    let big = faulty(
        "big",
        &["--huge-line-bytes", "104857600"],
        &[
            ("max_message_bytes", "1048576"),
            // Long enough to read `last_error` while it waits to restart.
            ("restart_initial_backoff", "\"500ms\""),
            ("restart_max_backoff", "\"1s\""),
        ],
    );
    let (daemon, client) = start(&big, &["big__huge"]).await;
    let before = proc_kib(daemon.pid(), "VmRSS").unwrap();

    let (answer, took) = timed_call(&client, "big__huge", json!({})).await;
    let failed_at = Instant::now();
    let message = assert_upstream_error(&answer, -32010, "big");
    eprintln!("huge line reported to the caller after {took:?}: {message}");
    assert!(message.contains("max_message_bytes"), "{message}");
    assert_goods(&client, "during").await;

    let (status, _) = wait_status(&daemon, "big", Duration::from_secs(10), |s| {
        s["state"] == "restarting" && s["restarts"] == 1
    })
    .await;
    let last_error = status["last_error"].as_str().unwrap_or_default().to_owned();
    let (status, _) = wait_status(&daemon, "big", Duration::from_secs(20), |s| {
        ready(s) && s["restarts"] == 1
    })
    .await;
    eprintln!(
        "big: refused line → ready in {:?}: {status}",
        failed_at.elapsed()
    );
    wait_echo(&daemon, &client, "big").await;
    assert_goods(&client, "after").await;

    let (rss, peak) = (
        proc_kib(daemon.pid(), "VmRSS").unwrap(),
        proc_kib(daemon.pid(), "VmHWM").unwrap(),
    );
    eprintln!("daemon RSS: {before} KiB before, {rss} KiB after, peak {peak} KiB");
    assert!(rss < RSS_LIMIT_KIB, "daemon RSS {rss} KiB");
    assert!(peak < RSS_LIMIT_KIB, "daemon peak RSS {peak} KiB");
    assert!(
        last_error.contains("max_message_bytes"),
        "last_error does not say why: {last_error}"
    );
}

// ---------------------------------------------------------------------------------------------
// 7. A notification flood

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

// ---------------------------------------------------------------------------------------------
// 8. max_in_flight

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

// ---------------------------------------------------------------------------------------------
// 9. Idle stop and lazy start

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_upstreams_stop_and_start_on_demand_and_lazy_ones_wait_for_a_session() {
    let daemon = Daemon::start(&format!(
        "{}{}{}",
        goods(),
        faulty("idler", &[], &[("idle_stop", "\"300ms\"")]),
        faulty("lazy", &[], &[("lazy_start", "true")]),
    ));
    // No host session yet: the others start, the lazy one does not.
    for good in GOOD {
        wait_status(&daemon, good, Duration::from_secs(10), ready).await;
    }
    let status = daemon.upstream_status("lazy").await;
    assert_eq!(status["state"], "stopped", "{status}");
    assert!(status["pid"].is_null(), "{status}");

    let started = Instant::now();
    let client = Client::connect(&daemon.url).await;
    let (status, _) = wait_status(&daemon, "lazy", Duration::from_secs(10), ready).await;
    eprintln!(
        "lazy ready {:?} after the first initialize was sent: {status}",
        started.elapsed()
    );
    let tools = daemon
        .wait_for_tools(&client, |n| {
            n.iter().any(|t| t == "lazy__echo") && n.iter().any(|t| t == "idler__echo")
        })
        .await;
    assert_goods(&client, "before").await;
    let (answer, _) = timed_call(&client, "lazy__echo", json!({})).await;
    assert_eq!(answer["result"]["structuredContent"]["upstream"], "lazy");

    // Idle for 300 ms: stopped, its process gone, its tools still listed.
    let (status, took) = wait_status(&daemon, "idler", Duration::from_secs(10), |s| {
        s["state"] == "stopped"
    })
    .await;
    eprintln!("idler stopped (seen {took:?} after lazy was ready): {status}");
    let pid = u32::try_from(status["pid"].as_u64().expect("the stopped idler's pid")).unwrap();
    let gone = poll_until(Duration::from_secs(5), || async { !alive(pid) }).await;
    assert!(gone, "the idle upstream's process {pid} still runs");
    assert_eq!(
        daemon.wait_for_tools(&client, |_| true).await,
        tools,
        "the idle upstream's tools must stay listed"
    );
    assert_goods(&client, "during").await;

    // A call starts it again.
    let (answer, took) = timed_call(&client, "idler__echo", json!({"wake": true})).await;
    eprintln!("idler answered its waking call after {took:?}");
    assert_eq!(
        answer["result"]["structuredContent"]["upstream"], "idler",
        "{answer}"
    );
    let status = daemon.upstream_status("idler").await;
    assert_ne!(
        status["pid"],
        json!(pid),
        "a new process answered: {status}"
    );
    assert_goods(&client, "after").await;
}

// ---------------------------------------------------------------------------------------------
// 10. Shutdown with calls in flight

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_calls_in_flight_finish_and_leaves_no_process_behind() {
    let (mut daemon, client) = start(
        &test_upstream("parent", &["--spawn-grandchild"]),
        &["parent__slow"],
    )
    .await;
    let procs = descendants(daemon.pid());
    let named: Vec<(u32, String)> = procs.iter().map(|&p| (p, comm(p))).collect();
    assert!(
        named.iter().any(|(_, c)| c == "sleep"),
        "the grandchild `sleep` is not among the daemon's descendants: {named:?}"
    );

    let upstreams = ["parent", "good1", "good2"];
    let calls: Vec<_> = upstreams
        .iter()
        .map(|u| client.start_tool(&format!("{u}__slow"), json!({"ms": 1000})))
        .collect();
    for name in upstreams {
        wait_status(&daemon, name, Duration::from_secs(5), |s| {
            s["in_flight"] == 1
        })
        .await;
    }
    let terminated = Instant::now();
    daemon.terminate();
    for call in calls {
        let (_, answer) = call.finish().await;
        assert_text(&answer, "slept 1000ms");
    }
    eprintln!(
        "calls in flight completed {:?} after SIGTERM",
        terminated.elapsed()
    );
    let exit = daemon.wait_exit(Duration::from_secs(30)).await;
    eprintln!("daemon exited {:?} after SIGTERM", terminated.elapsed());
    assert!(
        exit.is_some_and(|s| s.success()),
        "the daemon did not exit cleanly ({exit:?}):\n{}",
        daemon.stderr()
    );
    assert_all_gone(&procs, "after SIGTERM").await;
}

// ---------------------------------------------------------------------------------------------
// 11. State restored after a restart

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
