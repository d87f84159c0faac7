//! Section 7, one bad answer is not a bad link: while 20 calls of 4 host sessions are in flight
//! on a remote upstream, one POST is answered with something that is not JSON-RPC (HTTP 200, a
//! body of HTML). That call fails alone, naming the upstream and what it sent; the 20 are
//! answered, the upstream is not restarted, and it serves at once.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::{WEB, assert_goods, ready, start, text, timed_call, web_server, web_table};
use crate::common::{Client, Via, assert_upstream_error, poll_until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_answered_with_garbage_fails_alone_while_twenty_calls_beside_it_are_answered() {
    let server = web_server(&["--http-fault", "garbage-json", "--http-fault-tool", "fancy"]);
    let web = web_table(
        &server,
        Via::Http,
        &[("request_timeout", "\"30s\""), ("breaker_failures", "3")],
    );
    let (daemon, first) = start(&web).await;
    let mut hosts = vec![Arc::new(first)];
    for _ in 1..4 {
        hosts.push(Arc::new(Client::connect(&daemon.url).await));
    }

    // Five slow calls from each of the four sessions, in flight together.
    let slow = |host: &Arc<Client>, n: u64| {
        let host = Arc::clone(host);
        async move {
            host.request(
                "tools/call",
                json!({"name": "web__slow", "arguments": {"ms": 2000, "n": n}}),
            )
            .await
        }
    };
    let calls: Vec<_> = (0..20)
        .map(|n| tokio::spawn(slow(&hosts[n / 5], n as u64)))
        .collect();
    let in_flight = poll_until(Duration::from_secs(10), || async {
        daemon.upstream_status(WEB).await["in_flight"].as_u64() >= Some(20)
    })
    .await;
    assert!(in_flight, "the 20 calls never were in flight together");

    let (failed, took) = timed_call(&hosts[0], "web__fancy", json!({})).await;
    let message = assert_upstream_error(&failed, -32010, WEB);
    eprintln!("the garbage call failed after {took:?}: {message}");
    assert!(
        message.contains("not JSON-RPC") && message.contains("502 Bad Gateway"),
        "{message}"
    );

    let mut failures = Vec::new();
    for call in calls {
        let answer = call.await.expect("a call's task");
        if answer["result"]["content"][0]["text"] != "slept 2000ms" {
            failures.push(answer);
        }
    }
    assert!(
        failures.is_empty(),
        "{} of 20 calls beside the bad answer failed: {failures:?}\n{}",
        failures.len(),
        daemon.stderr()
    );
    let status = daemon.upstream_status(WEB).await;
    assert!(ready(&status), "{status}");
    assert_eq!(
        status["restarts"], 0,
        "one bad answer restarted the link: {status}"
    );
    assert!(
        text(&status, "last_http_error").contains("not JSON-RPC"),
        "status does not show the bad answer: {status}"
    );
    let (answer, _) = timed_call(&hosts[3], "web__echo", json!({})).await;
    assert_eq!(
        answer["result"]["structuredContent"]["upstream"], WEB,
        "{answer}"
    );
    assert_goods(&hosts[1], "after").await;
}
