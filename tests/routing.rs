//! Exact routing of host-bound traffic: progress, log messages, resource updates, server requests
//! and cancellations reach exactly the host session (and the stream) they belong to — never a
//! broadcast, never a guess; per-session isolation; version differences between the two sides;
//! batches; the legacy HTTP+SSE transport. Every message any host receives is schema-checked for
//! the version negotiated on that side.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{Client, Daemon, LegacyHost, alive, descendants, poll_until, test_upstream};
use serde_json::{Value, json};

/// How long a message that must not arrive is waited for.
const QUIET: Duration = Duration::from_millis(300);
const RESOURCE: &str = "up+test://up/hello";
const UPSTREAM_URI: &str = "test://up/hello";

/// A host that can answer every server request.
fn all_client_capabilities() -> Value {
    json!({"sampling": {}, "elicitation": {}, "roots": {"listChanged": true}})
}

/// The text of a tool result's first content block.
fn text(answer: &Value) -> &str {
    answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("not a text tool result: {answer}"))
}

fn is_error(answer: &Value) -> bool {
    answer["result"]["isError"] == true
}

/// A daemon with the protocol tools of one test upstream `up` (plus `extra` upstream args and
/// `table` lines in its TOML table), and a recording of everything the upstream received.
struct Setup {
    daemon: Daemon,
    record: tempfile::NamedTempFile,
}

impl Setup {
    async fn start(extra: &[&str], table: &str) -> Self {
        let record = tempfile::NamedTempFile::new().unwrap();
        let path = record.path().to_str().unwrap().to_owned();
        let mut args = vec!["--protocol-tools", "--record", &path];
        args.extend_from_slice(extra);
        let daemon = Daemon::start(&format!("{}{table}", test_upstream("up", &args)));
        let probe = Client::connect(&daemon.url).await;
        daemon
            .wait_for_tools(&probe, |n| n.iter().any(|t| t == "up__progress"))
            .await;
        assert_eq!(probe.delete().await, 200);
        Self { daemon, record }
    }

    async fn host(&self, capabilities: Value) -> Client {
        Client::connect_with(&self.daemon.url, "2025-11-25", capabilities).await
    }

    /// Every line the upstream(s) received so far.
    fn recorded(&self) -> Vec<Value> {
        recorded(self.record.path())
    }

    /// Waits (10 s at most) until the upstream received a line matching `pred`; returns it.
    async fn wait_recorded(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(line) = self.recorded().into_iter().find(|l| pred(l)) {
                return line;
            }
            assert!(
                Instant::now() < deadline,
                "the upstream never received {what}; it got:\n{:#?}\ndaemon stderr:\n{}",
                self.recorded(),
                self.daemon.stderr()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn recorded(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// A recorded `tools/call` of the upstream's tool `name`.
fn is_call_of(line: &Value, name: &str) -> bool {
    line["method"] == "tools/call" && line["params"]["name"] == name
}

/// The live processes under the daemon (its upstream instances).
fn upstream_processes(daemon: &Daemon) -> Vec<u32> {
    descendants(daemon.pid())
        .into_iter()
        .filter(|p| alive(*p))
        .collect()
}

async fn wait_process_count(daemon: &Daemon, n: usize) -> Vec<u32> {
    let reached = poll_until(Duration::from_secs(15), || async {
        upstream_processes(daemon).len() == n
    })
    .await;
    let now = upstream_processes(daemon);
    assert!(reached, "expected {n} upstream processes, have {now:?}");
    now
}

/// Asserts that `messages` are exactly `steps` progress notifications for `token`, in order.
fn assert_progress(messages: &[Value], token: &Value, steps: u64, who: &str) {
    assert_eq!(
        messages.len() as u64,
        steps,
        "{who}: expected {steps} progress notifications, got {messages:#?}"
    );
    for (i, m) in messages.iter().enumerate() {
        assert_eq!(m["method"], "notifications/progress", "{who}: {m}");
        assert_eq!(&m["params"]["progressToken"], token, "{who}: {m}");
        assert_eq!(m["params"]["progress"], json!(i as u64 + 1), "{who}: {m}");
        assert_eq!(m["params"]["total"], json!(steps), "{who}: {m}");
    }
}

async fn upstream_subscriptions(c: &Client) -> String {
    c.tool_text("up__subscriptions", json!({})).await
}

async fn touch(c: &Client) -> String {
    c.tool_text("up__touch", json!({"uri": UPSTREAM_URI})).await
}

// ---------------------------------------------------------------------------------------------
// 1. Session-bound notifications

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_reaches_only_the_request_that_asked_under_its_own_token() {
    let setup = Setup::start(&[], "").await;
    let a = setup.host(json!({})).await;
    let b = setup.host(json!({})).await;
    let mut a_events = a.events().await;
    let mut b_events = b.events().await;

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

/// A progress notification the upstream sends right before its answer reaches the host too: the
/// answer must not overtake what the request produced before it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_sent_just_before_the_answer_is_not_lost() {
    let setup = Setup::start(&[], "").await;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_messages_reach_only_sessions_that_asked_for_their_level() {
    let setup = Setup::start(&[], "").await;
    let a = setup.host(json!({})).await;
    let b = setup.host(json!({})).await;
    let mut a_events = a.events().await;
    let mut b_events = b.events().await;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_updates_reach_only_subscribers_and_upstream_subscriptions_are_counted() {
    let setup = Setup::start(&[], "").await;
    let a = setup.host(json!({})).await;
    let b = setup.host(json!({})).await;
    let mut a_events = a.events().await;
    let mut b_events = b.events().await;
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

// ---------------------------------------------------------------------------------------------
// 2. Server requests

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_requests_go_to_the_session_that_caused_them_and_its_answer_completes_the_call() {
    let setup = Setup::start(&[], "").await;
    let a = setup.host(all_client_capabilities()).await;
    let b = setup.host(all_client_capabilities()).await;
    let mut a_events = a.events().await;
    let mut b_events = b.events().await;

    let cases = [
        (
            "up__sample",
            json!({"prompt": "question from A"}),
            "sampling/createMessage",
            json!({"role": "assistant", "content": {"type": "text", "text": "A's answer"},
                   "model": "test-model", "stopReason": "endTurn"}),
            "sampled: A's answer",
        ),
        (
            "up__elicit",
            json!({}),
            "elicitation/create",
            json!({"action": "accept", "content": {"name": "Ada"}}),
            r#"elicited: accept {"name":"Ada"}"#,
        ),
        (
            "up__roots",
            json!({}),
            "roots/list",
            json!({"roots": [{"uri": "file:///tmp/a-root", "name": "A's root"}]}),
            "roots: ",
        ),
    ];
    for (tool, arguments, method, reply, expected) in cases {
        let mut call = a.start_tool(tool, arguments);
        let request = call.next().await;
        assert_eq!(request["method"], method, "{request}");
        // Another session cannot answer it: its answer under the same id goes nowhere.
        b.respond_error(
            &request["id"],
            json!({"code": -32000, "message": "B's forged answer"}),
        )
        .await;
        if method == "sampling/createMessage" {
            assert_eq!(
                request["params"]["messages"][0]["content"]["text"],
                "question from A"
            );
        }
        a.respond(&request["id"], reply.clone()).await;
        let (before, answer) = call.finish().await;
        assert!(before.is_empty(), "{tool}: {before:?}");
        assert!(!is_error(&answer), "{tool}: {answer}");
        if method == "roots/list" {
            let roots: Value =
                serde_json::from_str(text(&answer).strip_prefix(expected).unwrap()).unwrap();
            assert_eq!(roots, reply["roots"], "{answer}");
        } else {
            assert_eq!(text(&answer), expected);
        }
    }

    // The host's error answer reaches the upstream as an error.
    let mut call = a.start_tool("up__sample", json!({}));
    let request = call.next().await;
    a.respond_error(
        &request["id"],
        json!({"code": -1, "message": "the user declined"}),
    )
    .await;
    let (_, answer) = call.finish().await;
    assert!(is_error(&answer), "{answer}");
    assert!(
        text(&answer).starts_with("sampling failed: the user declined"),
        "{answer}"
    );

    // mcpmux answers an upstream's ping itself.
    assert_eq!(a.tool_text("up__ping_client", json!({})).await, "pong");

    a_events
        .assert_silent(QUIET, "A's server requests belong to its POST streams")
        .await;
    b_events.assert_silent(QUIET, "B caused nothing").await;

    // A host that did not declare sampling is not asked: the upstream gets a refusal at once.
    let c = setup.host(json!({"roots": {}})).await;
    let started = Instant::now();
    let (before, answer) = tokio::time::timeout(
        Duration::from_secs(10),
        c.start_tool("up__sample", json!({})).finish(),
    )
    .await
    .expect("a host without sampling must not make the call hang");
    assert!(before.is_empty(), "{before:?}");
    assert!(is_error(&answer), "{answer}");
    assert!(
        text(&answer).starts_with("sampling failed: ") && text(&answer).contains("`sampling`"),
        "{answer}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
    a_events.assert_silent(QUIET, "A, after C's call").await;
    b_events.assert_silent(QUIET, "B, after C's call").await;
}

/// With several of one session's requests in flight, the upstream's request cannot be tied to one
/// of them, but it is that session's: it arrives on exactly one of its streams, and never at B.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_request_reaches_its_session_when_that_session_has_several_calls_in_flight() {
    let setup = Setup::start(&[], "").await;
    let a = setup.host(all_client_capabilities()).await;
    let b = setup.host(all_client_capabilities()).await;
    let a_events = a.events().await;
    let mut b_events = b.events().await;
    let slow = a.start_tool("up__slow", json!({"ms": 2000}));
    setup
        .wait_recorded("A's slow call", |l| is_call_of(l, "slow"))
        .await;
    let sample = a.start_tool("up__sample", json!({"prompt": "which stream?"}));
    let (slow_id, sample_id) = (slow.id.clone(), sample.id.clone());
    let mut streams = [
        ("slow's POST", slow.messages),
        ("sample's POST", sample.messages),
        ("A's GET", a_events),
    ];
    let deadline = Instant::now() + Duration::from_secs(10);
    let (carrier, request) = 'found: loop {
        assert!(
            Instant::now() < deadline,
            "A never got the sampling request"
        );
        for (name, stream) in &mut streams {
            if let common::Next::Message(m) = stream.next_within(Duration::from_millis(20)).await {
                assert_eq!(m["method"], "sampling/createMessage", "on {name}: {m}");
                break 'found (*name, m);
            }
        }
    };
    a.respond(
        &request["id"],
        json!({"role": "assistant", "content": {"type": "text", "text": "A's"}, "model": "m"}),
    )
    .await;
    let [(_, mut slow), (_, mut sample), (_, mut a_events)] = streams;
    let (before, answer) = sample.until_answer(&sample_id).await;
    assert!(before.is_empty(), "{before:?}");
    assert_eq!(text(&answer), "sampled: A's");
    let (before, answer) = slow.until_answer(&slow_id).await;
    assert!(before.is_empty(), "{before:?}");
    assert_eq!(text(&answer), "slept 2000ms");
    a_events.assert_silent(QUIET, "A's GET").await;
    b_events.assert_silent(QUIET, "B").await;
    eprintln!("the sampling request came on {carrier}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_request_is_refused_when_several_sessions_could_have_caused_it() {
    let setup = Setup::start(&[], "").await;
    let a = setup.host(all_client_capabilities()).await;
    let b = setup.host(all_client_capabilities()).await;
    let mut a_events = a.events().await;
    let mut b_events = b.events().await;

    let slow = a.start_tool("up__slow", json!({"ms": 3000}));
    setup
        .wait_recorded("A's slow call", |l| is_call_of(l, "slow"))
        .await;
    let (before, answer) = tokio::time::timeout(
        Duration::from_secs(10),
        b.start_tool("up__sample", json!({})).finish(),
    )
    .await
    .expect("an ambiguous server request must be refused, not hang");
    assert!(before.is_empty(), "B was asked after all: {before:?}");
    assert!(is_error(&answer), "{answer}");
    let why = text(&answer);
    assert!(
        why.starts_with("sampling failed: ")
            && why.contains("several host sessions")
            && why.contains("per-session"),
        "{why}"
    );
    let (before, answer) = slow.finish().await;
    assert!(before.is_empty(), "A was asked instead: {before:?}");
    assert_eq!(text(&answer), "slept 3000ms");
    a_events.assert_silent(QUIET, "A").await;
    b_events.assert_silent(QUIET, "B").await;
}

// ---------------------------------------------------------------------------------------------
// 3. Per-session isolation

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
    let a = setup.host(json!({})).await;
    let b = setup.host(json!({})).await;
    let mut a_events = a.events().await;
    let mut b_events = b.events().await;
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

// ---------------------------------------------------------------------------------------------
// 4. Cancellation

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_cancellation_reaches_the_upstream_under_its_id_and_frees_the_request() {
    let setup = Setup::start(&[], "").await;
    let a = setup.host(json!({})).await;
    let b = setup.host(json!({})).await;
    let host_id = json!(4242);

    // Another session cannot cancel A's request by naming A's id.
    let other = a.start_with_id(
        json!(900),
        "tools/call",
        json!({"name": "up__slow", "arguments": {"ms": 1500}}),
    );
    let line = setup
        .wait_recorded("the 1500 ms call", |l| {
            is_call_of(l, "slow") && l["params"]["arguments"]["ms"] == 1500
        })
        .await;
    b.notify("notifications/cancelled", json!({"requestId": 900}))
        .await;
    let (_, answer) = other.finish().await;
    assert_eq!(text(&answer), "slept 1500ms", "B cancelled A's request");
    assert!(
        !setup.recorded().iter().any(|l| {
            l["method"] == "notifications/cancelled" && l["params"]["requestId"] == line["id"]
        }),
        "B's cancellation reached the upstream"
    );

    // A cancels its own request: the upstream hears it under the upstream's id, the POST ends.
    let slow = a.start_with_id(
        host_id.clone(),
        "tools/call",
        json!({"name": "up__slow", "arguments": {"ms": 10000}}),
    );
    let line = setup
        .wait_recorded("the 10 s call", |l| {
            is_call_of(l, "slow") && l["params"]["arguments"]["ms"] == 10000
        })
        .await;
    let upstream_id = line["id"].clone();
    let cancelled_at = Instant::now();
    a.notify(
        "notifications/cancelled",
        json!({"requestId": host_id, "reason": "changed my mind"}),
    )
    .await;
    let (before, answer) = tokio::time::timeout(Duration::from_secs(3), slow.finish())
        .await
        .expect("a cancelled request's POST must end promptly");
    let took = cancelled_at.elapsed();
    assert!(before.is_empty(), "{before:?}");
    assert!(answer.get("error").is_some(), "{answer}");
    let cancel = setup
        .wait_recorded("notifications/cancelled", |l| {
            l["method"] == "notifications/cancelled"
        })
        .await;
    assert_eq!(
        cancel["params"]["requestId"], upstream_id,
        "cancelled under the upstream's id of the call ({line})"
    );
    assert_eq!(cancel["params"]["reason"], "changed my mind");
    let cancellations = setup
        .recorded()
        .into_iter()
        .filter(|l| l["method"] == "notifications/cancelled")
        .count();
    assert_eq!(cancellations, 1);

    // The id and the slot are free again at once.
    let (before, answer) = a
        .start_with_id(
            host_id,
            "tools/call",
            json!({"name": "up__slow", "arguments": {"ms": 10}}),
        )
        .finish()
        .await;
    assert!(before.is_empty());
    assert_eq!(text(&answer), "slept 10ms");
    assert!(
        a.tool_text("up__echo", json!({"x": 1}))
            .await
            .contains(r#""x":1"#)
    );
    eprintln!("cancellation answered after {took:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_cancellation_of_its_request_reaches_the_host_under_the_host_id() {
    let setup = Setup::start(&[], "").await;
    let a = setup.host(all_client_capabilities()).await;
    let b = setup.host(all_client_capabilities()).await;
    let mut a_events = a.events().await;
    let mut b_events = b.events().await;

    let mut call = a.start_tool("up__notify_cancel", json!({"prompt": "never mind"}));
    let request = call.next().await;
    assert_eq!(request["method"], "sampling/createMessage", "{request}");
    let cancelled = call.next().await;
    assert_eq!(
        cancelled["method"], "notifications/cancelled",
        "{cancelled}"
    );
    assert_eq!(cancelled["params"]["requestId"], request["id"]);
    assert_eq!(cancelled["params"]["reason"], "changed my mind");
    // A late answer is harmless.
    a.respond(
        &request["id"],
        json!({"role": "assistant", "content": {"type": "text", "text": "late"}, "model": "m"}),
    )
    .await;
    let (before, answer) = call.finish().await;
    assert!(before.is_empty(), "{before:?}");
    assert_eq!(text(&answer), "cancelled own request");
    assert!(!a.tool_text("up__echo", json!({})).await.is_empty());
    a_events.assert_silent(QUIET, "A's GET stream").await;
    b_events.assert_silent(QUIET, "B").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ending_session_refuses_its_pending_server_requests_and_cancels_its_calls() {
    let setup = Setup::start(&[], "").await;
    let a = setup.host(all_client_capabilities()).await;
    let b = setup.host(all_client_capabilities()).await;
    let mut b_events = b.events().await;
    // (The sampling request is caused first: with two of A's requests in flight, which of A's
    // streams would carry it is not defined.)
    let mut sample = a.start_tool("up__sample", json!({}));
    let request = sample.next().await;
    assert_eq!(request["method"], "sampling/createMessage");
    let sent = setup
        .wait_recorded("the sample call", |l| is_call_of(l, "sample"))
        .await;
    let slow = a.start_tool("up__slow", json!({"ms": 10000}));
    let slow_line = setup
        .wait_recorded("the slow call", |l| is_call_of(l, "slow"))
        .await;

    assert_eq!(a.delete().await, 200);
    // The upstream hears a refusal of its request and the cancellation of A's calls.
    setup
        .wait_recorded("a refusal of the sampling request", |l| {
            l.get("method").is_none()
                && l["id"].as_str().is_some_and(|id| id.starts_with("srv-"))
                && l["error"]["message"] == "the host session ended"
        })
        .await;
    for call in [&slow_line, &sent] {
        setup
            .wait_recorded("the cancellation of A's call", |l| {
                l["method"] == "notifications/cancelled" && l["params"]["requestId"] == call["id"]
            })
            .await;
    }
    // A's answer streams end promptly, whatever they say.
    for call in [slow, sample] {
        tokio::time::timeout(Duration::from_secs(5), async move {
            let mut messages = call.messages;
            while let common::Next::Message(_) = messages.next_within(Duration::from_secs(5)).await
            {
            }
        })
        .await
        .expect("an ended session's request streams end");
    }
    b_events.assert_silent(QUIET, "B").await;
    assert_eq!(b.tool_text("up__slow", json!({"ms": 1})).await, "slept 1ms");
}

// ---------------------------------------------------------------------------------------------
// 5. Versions, per side

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_are_answered_only_in_2025_03_26() {
    let setup = Setup::start(&[], "").await;
    let url = &setup.daemon.url;
    let batch = json!([
        {"jsonrpc": "2.0", "id": 1, "method": "ping"},
        {"jsonrpc": "2.0", "id": "two", "method": "tools/list"},
        {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}
    ])
    .to_string();

    let old = Client::connect_with(url, "2025-03-26", json!({})).await;
    assert_eq!(old.version, "2025-03-26");
    let response = old.post_raw(batch.clone(), &[]).await;
    assert_eq!(response.status(), 200);
    let answers: Value = response.json().await.unwrap();
    old.schemas().check("JSONRPCBatchResponse", &answers);
    let answers = answers.as_array().unwrap();
    assert_eq!(answers.len(), 2, "{answers:?}");
    let ping = answers.iter().find(|a| a["id"] == 1).unwrap();
    old.schemas().check_message(ping, Some("ping"));
    assert_eq!(ping["result"], json!({}));
    let list = answers.iter().find(|a| a["id"] == "two").unwrap();
    old.schemas().check_message(list, Some("tools/list"));
    assert!(
        list["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "up__sample")
    );

    for version in ["2025-06-18", "2025-11-25"] {
        let host = Client::connect_with(url, version, json!({})).await;
        assert_eq!(host.version, version);
        let response = host.post_raw(batch.clone(), &[]).await;
        assert_eq!(response.status(), 400, "{version}");
        let text = response.text().await.unwrap();
        if version == "2025-11-25" {
            // An id-less JSON-RPC error, as 2025-11-25 allows.
            let error: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(error["error"]["code"], -32600, "{error}");
            host.schemas().check_message(&error, None);
        } else {
            // Older schemas allow no id-less error: the reason comes as plain text.
            assert!(text.contains("batches"), "{text}");
        }
    }
}

/// The refusal of a request whose id is unknown must be schema-valid for the host's version too.
/// Before 2025-11-25 the schema's error response requires a string or integer `id`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_batch_is_answered_in_the_hosts_version() {
    let setup = Setup::start(&[], "").await;
    let host = Client::connect_with(&setup.daemon.url, "2025-06-18", json!({})).await;
    let batch = json!([{"jsonrpc": "2.0", "id": 1, "method": "ping"}]).to_string();
    let response = host.post_raw(batch, &[]).await;
    assert_eq!(response.status(), 400);
    // A JSON-RPC body must be valid for the host's version (no `null` id before 2025-11-25);
    // otherwise the reason comes as plain text.
    let json = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/json");
    let text = response.text().await.unwrap();
    if json {
        let error: Value = serde_json::from_str(&text).unwrap();
        host.schemas().check_message(&error, None);
    } else {
        assert!(text.contains("batches"), "the refusal says why: {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versions_are_negotiated_per_side() {
    let setup = Setup::start(&["--protocol-version", "2024-11-05"], "").await;

    // An old upstream serves a current host: calls, progress, server requests.
    let new = setup.host(all_client_capabilities()).await;
    assert_eq!(new.version, "2025-11-25");
    assert!(
        new.tool_text("up__echo", json!({"v": 1}))
            .await
            .contains(r#""v":1"#)
    );
    let (before, answer) = new
        .start(
            "tools/call",
            json!({"name": "up__progress", "arguments": {"steps": 2},
                   "_meta": {"progressToken": "p"}}),
        )
        .finish()
        .await;
    assert_progress(&before, &json!("p"), 2, "2025-11-25 host");
    assert_eq!(text(&answer), "done 2 steps");
    let mut call = new.start_tool("up__sample", json!({}));
    let request = call.next().await;
    new.respond(
        &request["id"],
        json!({"role": "assistant", "content": {"type": "text", "text": "ok"}, "model": "m"}),
    )
    .await;
    assert_eq!(text(&call.finish().await.1), "sampled: ok");

    // A 2024-11-05 host is never sent elicitation, which its version does not have, even when it
    // claims the capability.
    let old =
        Client::connect_with(&setup.daemon.url, "2024-11-05", all_client_capabilities()).await;
    assert_eq!(old.version, "2024-11-05");
    let mut old_events = old.events().await;
    let (before, answer) = tokio::time::timeout(
        Duration::from_secs(10),
        old.start_tool("up__elicit", json!({})).finish(),
    )
    .await
    .expect("a refused elicitation must not hang");
    assert!(before.is_empty(), "{before:?}");
    assert!(is_error(&answer), "{answer}");
    assert!(
        text(&answer).starts_with("elicitation failed: ") && text(&answer).contains("2024-11-05"),
        "{answer}"
    );
    old_events.assert_silent(QUIET, "the old host").await;
    // ... but sampling, which it has, works.
    let mut call = old.start_tool("up__sample", json!({}));
    let request = call.next().await;
    assert_eq!(request["method"], "sampling/createMessage");
    old.respond(
        &request["id"],
        json!({"role": "assistant", "content": {"type": "text", "text": "old ok"}, "model": "m"}),
    )
    .await;
    assert_eq!(text(&call.finish().await.1), "sampled: old ok");
}

// ---------------------------------------------------------------------------------------------
// 6. The 2024-11-05 HTTP+SSE transport

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_http_sse_hosts_get_every_answer_on_their_stream() {
    let setup = Setup::start(&[], "").await;
    // A current host on the same upstream, which must hear none of it.
    let other = setup.host(all_client_capabilities()).await;
    other
        .result("logging/setLevel", json!({"level": "debug"}))
        .await;
    let mut other_events = other.events().await;
    let mut host = LegacyHost::open(&setup.daemon.url, "2024-11-05").await;
    let (before, init) = host
        .request(
            "initialize",
            json!({"protocolVersion": "2024-11-05", "capabilities": {"sampling": {}},
                   "clientInfo": {"name": "legacy", "version": "0"}}),
        )
        .await;
    assert!(before.is_empty(), "{before:?}");
    assert_eq!(init["result"]["protocolVersion"], "2024-11-05");
    assert_eq!(
        host.post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await,
        202
    );

    let (_, list) = host.request("tools/list", json!({})).await;
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"up__echo") && names.contains(&"up__sample"));

    let (before, echo) = host
        .request(
            "tools/call",
            json!({"name": "up__echo", "arguments": {"legacy": true}}),
        )
        .await;
    assert!(before.is_empty(), "{before:?}");
    assert_eq!(
        echo["result"]["structuredContent"]["params"]["arguments"],
        json!({"legacy": true})
    );

    // Progress and server requests come on the same stream.
    let (before, answer) = host
        .request(
            "tools/call",
            json!({"name": "up__progress", "arguments": {"steps": 2},
                   "_meta": {"progressToken": 5}}),
        )
        .await;
    assert_progress(&before, &json!(5), 2, "legacy host");
    assert_eq!(text(&answer), "done 2 steps");

    let id = json!(77);
    host.events.expect_answer(&id, "tools/call");
    let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                      "params": {"name": "up__sample", "arguments": {"prompt": "legacy?"}}});
    assert_eq!(host.post(&call).await, 202);
    let request = host.events.next().await;
    assert_eq!(request["method"], "sampling/createMessage", "{request}");
    let reply = json!({"jsonrpc": "2.0", "id": request["id"], "result":
        {"role": "assistant", "content": {"type": "text", "text": "legacy!"}, "model": "m"}});
    assert_eq!(host.post(&reply).await, 202);
    let (before, answer) = host.events.until_answer(&id).await;
    assert!(before.is_empty(), "{before:?}");
    assert_eq!(text(&answer), "sampled: legacy!");
    host.events.assert_silent(QUIET, "the legacy stream").await;
    other_events
        .assert_silent(QUIET, "the other host's stream")
        .await;
}
