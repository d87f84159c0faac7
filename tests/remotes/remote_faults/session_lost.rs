//! Section 8, a lost HTTP session costs hosts nothing: the server forgets every session (as a
//! restarted one does) and answers a call 404. mcpmux opens a new session (the server takes
//! its time to answer the new `initialize`), sends that call again in it, and the ten calls two
//! hosts make while the new session opens wait for it: all are answered, the calls already in
//! flight too, and nothing is restarted. Over the legacy transport, whose session is its one
//! stream, the upstream is started again: what was on the old stream fails with a clear error,
//! and the ten calls made meanwhile wait for the new one and are answered.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::{WEB, assert_goods, ready, start, text, web_server, web_table};
use crate::common::{Client, RemoteServer, Via, assert_upstream_error, poll_until};

/// How long the server takes to answer an `initialize` after the first.
const REINITIALIZE_MS: u64 = 3000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streamable_http() {
    a_forgotten_session_is_replaced_and_no_call_fails(Via::Http).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_sse() {
    a_forgotten_session_is_replaced_and_no_call_fails(Via::Sse).await;
}

async fn a_forgotten_session_is_replaced_and_no_call_fails(via: Via) {
    let delay = REINITIALIZE_MS.to_string();
    let server = web_server(&[
        "--http-fault",
        "forget-sessions",
        "--http-fault-tool",
        "fancy",
        "--http-reinitialize-delay",
        &delay,
    ]);
    let web = web_table(
        &server,
        via,
        &[
            ("request_timeout", "\"20s\""),
            ("startup_timeout", "\"20s\""),
        ],
    );
    let (daemon, first) = start(&web).await;
    let hosts = [
        Arc::new(first),
        Arc::new(Client::connect(&daemon.url).await),
    ];
    let call = |host: &Arc<Client>, tool: &'static str, arguments: Value| {
        let host = Arc::clone(host);
        tokio::spawn(async move {
            let params = json!({"name": format!("{WEB}__{tool}"), "arguments": arguments});
            host.request("tools/call", params).await
        })
    };

    // Two calls in flight in the old session.
    let in_flight = [
        call(&hosts[0], "slow", json!({"ms": 1000, "n": 1})),
        call(&hosts[1], "slow", json!({"ms": 1000, "n": 2})),
    ];
    let started = poll_until(Duration::from_secs(10), || async {
        daemon.upstream_status(WEB).await["in_flight"].as_u64() >= Some(2)
    })
    .await;
    assert!(started, "the slow calls never were in flight");
    // The server forgets its sessions on this call and answers it 404.
    let forgotten = call(&hosts[0], "fancy", json!({}));
    // Once it has (its list of sessions is empty) and mcpmux met it (over the legacy transport
    // the upstream is starting again), ten calls while the new session opens.
    let forgot = poll_until(Duration::from_secs(10), || open_sessions(&server, 0)).await;
    assert!(forgot, "the server never forgot its sessions");
    if via == Via::Sse {
        let starting = poll_until(Duration::from_secs(10), || async {
            daemon.upstream_status(WEB).await["state"] == "starting"
        })
        .await;
        assert!(starting, "{}", daemon.stderr());
    }
    let during: Vec<_> = (0..10)
        .map(|n| call(&hosts[n % 2], "echo", json!({"n": n})))
        .collect();

    let answered =
        |answer: &Value| answer["result"].is_object() && answer["result"]["isError"] != true;
    let mut failed = Vec::new();
    for task in during {
        let answer = task.await.expect("a call's task");
        if !answered(&answer) {
            failed.push(answer);
        }
    }
    assert!(
        failed.is_empty(),
        "{} of the 10 calls made while the new session opened failed: {failed:#?}\n{}",
        failed.len(),
        daemon.stderr()
    );
    for task in in_flight.into_iter().chain([forgotten]) {
        let answer = task.await.expect("a call's task");
        match via {
            // The refused call was sent again; the calls in flight were answered in the old
            // session, which the server still served.
            Via::Http => assert!(answered(&answer), "{answer}\n{}", daemon.stderr()),
            // The legacy session is its stream: what was on it is lost, with a clear error.
            _ => {
                let message = assert_upstream_error(&answer, -32010, WEB);
                assert!(message.contains("404"), "{message}");
            }
        }
    }
    assert!(
        open_sessions(&server, 1).await,
        "mcpmux did not open exactly one new session"
    );
    let status = daemon.upstream_status(WEB).await;
    assert!(ready(&status), "{status}");
    if via == Via::Http {
        assert_eq!(
            status["restarts"], 0,
            "a new session is not a restart: {status}"
        );
        assert!(
            text(&status, "http_session").ends_with("opened again once after the server forgot it"),
            "{status}"
        );
    }
    assert_goods(&hosts[1], "after").await;
}

/// Whether the server holds `n` sessions now.
async fn open_sessions(server: &RemoteServer, n: usize) -> bool {
    let url = server.url("/sessions");
    let ids: Vec<String> = match reqwest::get(&url).await {
        Ok(response) => response.json().await.unwrap_or_default(),
        Err(_) => return false,
    };
    ids.len() == n
}
