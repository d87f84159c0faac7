//! Section 4, cancellation: a host's reaches the upstream under the upstream-side id and frees the
//! request, an upstream's reaches the host under the host's id, an ending session refuses its
//! pending server requests and cancels its calls, and a host that drops the HTTP request or event
//! stream carrying a call cancels it.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::{QUIET, Setup, Via, all_client_capabilities, is_call_of, over_each_transport, text};
use crate::common;

over_each_transport!(a_host_cancellation_reaches_the_upstream_under_its_id_and_frees_the_request);
async fn a_host_cancellation_reaches_the_upstream_under_its_id_and_frees_the_request(via: Via) {
    let setup = Setup::start_over(via, &[], "").await;
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

over_each_transport!(an_upstream_cancellation_of_its_request_reaches_the_host_under_the_host_id);
async fn an_upstream_cancellation_of_its_request_reaches_the_host_under_the_host_id(via: Via) {
    let setup = Setup::start_over(via, &[], "").await;
    let (a, _b, mut a_events, mut b_events) = setup.two_hosts(all_client_capabilities()).await;

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

over_each_transport!(an_ending_session_refuses_its_pending_server_requests_and_cancels_its_calls);
async fn an_ending_session_refuses_its_pending_server_requests_and_cancels_its_calls(via: Via) {
    let setup = Setup::start_over(via, &[], "").await;
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

/// A POST of `body` for `client`'s session on a raw socket, so the test can drop the connection
/// the way a host that goes away does.
async fn raw_post(client: &common::Client, body: &Value) -> tokio::net::TcpStream {
    let session = client.session.as_deref().unwrap();
    let headers = format!("Mcp-Session-Id: {session}\r\nMCP-Protocol-Version: 2025-11-25\r\n");
    raw_post_to(&client.url, body, &headers).await
}

/// A POST of `body` to `url` with `headers` (each line ending in CRLF) on a raw socket.
async fn raw_post_to(url: &str, body: &Value, headers: &str) -> tokio::net::TcpStream {
    let url = reqwest::Url::parse(url).unwrap();
    let addr = format!("{}:{}", url.host_str().unwrap(), url.port().unwrap());
    let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let body = body.to_string();
    let request = format!(
        "POST {} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\n{headers}Content-Length: {}\r\n\r\n{body}",
        url.path(),
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    stream
}

over_each_transport!(a_host_that_goes_away_cancels_its_call_upstream_and_frees_its_slot);
async fn a_host_that_goes_away_cancels_its_call_upstream_and_frees_its_slot(via: Via) {
    let setup = Setup::start_over(via, &[], "max_in_flight = 1\n").await;
    let host = setup.host(json!({})).await;
    let cancelled = |call: &Value| {
        let id = call["id"].clone();
        move |l: &Value| l["method"] == "notifications/cancelled" && l["params"]["requestId"] == id
    };
    let slot_is_free = || async {
        // With max_in_flight = 1, a call that still held its slot would make this one "busy".
        let answer = host
            .request(
                "tools/call",
                json!({"name": "up__slow", "arguments": {"ms": 10}}),
            )
            .await;
        assert_eq!(text(&answer), "slept 10ms", "{answer}");
    };

    // 1. The host drops a POST still waiting for its JSON answer.
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                      "params": {"name": "up__slow", "arguments": {"ms": 30000}}});
    let socket = raw_post(&host, &body).await;
    let call = setup
        .wait_recorded("the 30 s call", |l| {
            is_call_of(l, "slow") && l["params"]["arguments"]["ms"] == 30000
        })
        .await;
    drop(socket);
    let cancel = setup
        .wait_recorded("its cancellation", cancelled(&call))
        .await;
    assert_eq!(
        cancel["params"]["reason"], "mcpmux: the caller went away",
        "{cancel}"
    );
    slot_is_free().await;

    // 2. The host drops the event stream its call's answer was streaming on.
    let body = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call",
                      "params": {"name": "up__progress", "_meta": {"progressToken": "p1"},
                                 "arguments": {"steps": 2, "delay_ms": 30000}}});
    let mut socket = raw_post(&host, &body).await;
    let call = setup
        .wait_recorded("the progress call", |l| is_call_of(l, "progress"))
        .await;
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains("notifications/progress") {
        let n = tokio::time::timeout(Duration::from_secs(10), socket.read(&mut buf))
            .await
            .expect("the first progress event in time")
            .unwrap();
        assert!(
            n > 0,
            "the stream ended early: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buf[..n]);
    }
    let head = String::from_utf8_lossy(&seen).to_lowercase();
    assert!(head.contains("text/event-stream"), "{head}");
    drop(socket);
    let cancel = setup
        .wait_recorded("its cancellation", cancelled(&call))
        .await;
    assert_eq!(cancel["params"]["reason"], "mcpmux: the caller went away");
    slot_is_free().await;
}

over_each_transport!(a_2026_host_that_closes_its_request_stream_cancels_the_call_upstream);
/// A stateless (2026-07-28) request has no `notifications/cancelled` over HTTP: closing its
/// response stream is the cancellation, and the upstream hears it (and the slot is free again).
async fn a_2026_host_that_closes_its_request_stream_cancels_the_call_upstream(via: Via) {
    let setup = Setup::start_over(via, &[], "max_in_flight = 1\n").await;
    let envelope = json!({"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                          "io.modelcontextprotocol/clientCapabilities": {}});
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                      "params": {"name": "up__slow", "arguments": {"ms": 30000},
                                 "_meta": envelope}});
    let headers = "MCP-Protocol-Version: 2026-07-28\r\nMcp-Method: tools/call\r\n\
                   Mcp-Name: up__slow\r\n";
    let socket = raw_post_to(&setup.daemon.url, &body, headers).await;
    let call = setup
        .wait_recorded("the stateless 30 s call", |l| is_call_of(l, "slow"))
        .await;
    drop(socket);
    let id = call["id"].clone();
    let cancel = setup
        .wait_recorded("its cancellation", |l| {
            l["method"] == "notifications/cancelled" && l["params"]["requestId"] == id
        })
        .await;
    assert_eq!(cancel["params"]["reason"], "mcpmux: the caller went away");
    let host = setup.host(json!({})).await;
    let answer = host
        .request(
            "tools/call",
            json!({"name": "up__slow", "arguments": {"ms": 10}}),
        )
        .await;
    assert_eq!(text(&answer), "slept 10ms", "{answer}");
}
