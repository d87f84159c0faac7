//! Section 2, server requests (sampling, elicitation, roots, ping) go to the session that caused
//! them and its answer completes the call; refused when several sessions could have caused one.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{
    QUIET, Setup, Via, all_client_capabilities, is_call_of, is_error, over_each_transport, text,
};
use crate::common;

over_each_transport!(
    server_requests_go_to_the_session_that_caused_them_and_its_answer_completes_the_call
);
async fn server_requests_go_to_the_session_that_caused_them_and_its_answer_completes_the_call(
    via: Via,
) {
    let setup = Setup::start_over(via, &[], "").await;
    let (a, b, mut a_events, mut b_events) = setup.two_hosts(all_client_capabilities()).await;

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

over_each_transport!(
    a_server_request_reaches_its_session_when_that_session_has_several_calls_in_flight
);
/// With several of one session's requests in flight, the upstream's request cannot be tied to one
/// of them, but it is that session's: it arrives on exactly one of its streams, and never at B.
async fn a_server_request_reaches_its_session_when_that_session_has_several_calls_in_flight(
    via: Via,
) {
    let setup = Setup::start_over(via, &[], "").await;
    let (a, _b, a_events, mut b_events) = setup.two_hosts(all_client_capabilities()).await;
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

over_each_transport!(a_server_request_is_refused_when_several_sessions_could_have_caused_it);
/// Over a pipe or the legacy transport's one stream, a server request that several sessions'
/// calls in flight could have caused is refused. Over Streamable HTTP it comes on the answer
/// stream of the POST that caused it, so it is that host's: B is asked, and A is not.
async fn a_server_request_is_refused_when_several_sessions_could_have_caused_it(via: Via) {
    let setup = Setup::start_over(via, &[], "").await;
    let (a, b, mut a_events, mut b_events) = setup.two_hosts(all_client_capabilities()).await;

    let slow = a.start_tool("up__slow", json!({"ms": 3000}));
    setup
        .wait_recorded("A's slow call", |l| is_call_of(l, "slow"))
        .await;
    if via == Via::Http {
        let mut call = b.start_tool("up__sample", json!({"prompt": "B's"}));
        let request = call.next().await;
        assert_eq!(request["method"], "sampling/createMessage", "{request}");
        let reply = json!({"role": "assistant", "content": {"type": "text", "text": "B's answer"},
                           "model": "m"});
        b.respond(&request["id"], reply).await;
        let (_, answer) = call.finish().await;
        assert_eq!(text(&answer), "sampled: B's answer", "{answer}");
        let (before, answer) = slow.finish().await;
        assert!(before.is_empty(), "A was asked instead: {before:?}");
        assert_eq!(text(&answer), "slept 3000ms");
        a_events.assert_silent(QUIET, "A").await;
        b_events
            .assert_silent(QUIET, "B's request came on its POST")
            .await;
        return;
    }
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
