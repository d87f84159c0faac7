//! Requests whose party goes away: a per-session instance killed mid-session is restarted by the
//! supervisor for its session alone (its next calls say it is restarting, then work again), and
//! a host that drops the HTTP request or event stream carrying a call cancels it upstream.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{
    Client, Daemon, alive, assert_upstream_error, descendants, poll_until, test_upstream,
};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn recorded(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Waits (10 s at most) until the upstream received a line matching `pred`; returns it.
async fn wait_recorded(daemon: &Daemon, path: &Path, pred: impl Fn(&Value) -> bool) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(line) = recorded(path).into_iter().find(|l| pred(l)) {
            return line;
        }
        assert!(
            Instant::now() < deadline,
            "the upstream never received it; it got:\n{:#?}\ndaemon stderr:\n{}",
            recorded(path),
            daemon.stderr()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The live processes under the daemon (its upstream instances).
fn upstream_processes(daemon: &Daemon) -> Vec<u32> {
    let mut pids: Vec<u32> = descendants(daemon.pid())
        .into_iter()
        .filter(|p| alive(*p))
        .collect();
    pids.sort_unstable();
    pids
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

async fn echo(client: &Client, who: &str) -> Value {
    client
        .request(
            "tools/call",
            json!({"name": "up__echo", "arguments": {"who": who}}),
        )
        .await
}

fn echoed(answer: &Value) -> bool {
    answer["result"]["isError"] != true && answer["result"]["content"].is_array()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_per_session_instance_is_restarted_for_its_session_alone() {
    let table = format!(
        "{}isolation = \"per-session\"\nrestart_initial_backoff = \"1500ms\"\n",
        test_upstream("up", &[])
    );
    let daemon = Daemon::start(&table);
    let a = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&a, |n| n.iter().any(|t| t == "up__echo"))
        .await;
    let shared = wait_process_count(&daemon, 1).await;
    let b = Client::connect(&daemon.url).await;
    assert!(echoed(&echo(&b, "B").await));
    let with_b = wait_process_count(&daemon, 2).await;
    assert!(echoed(&echo(&a, "A").await));
    let all = wait_process_count(&daemon, 3).await;
    let a_instance = *all.iter().find(|p| !with_b.contains(p)).unwrap();
    let b_instance = *with_b.iter().find(|p| !shared.contains(p)).unwrap();

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(a_instance as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();

    // A's calls say why they fail (never "ready" without a connection), then work again.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut errors = Vec::new();
    loop {
        let answer = echo(&a, "A after the kill").await;
        if echoed(&answer) {
            break;
        }
        let message = assert_upstream_error(&answer, -32010, "up");
        assert!(
            !message.contains("is ready"),
            "a dead instance claimed to be ready: {message}"
        );
        errors.push(message);
        assert!(
            Instant::now() < deadline,
            "A's instance never came back: {errors:#?}\n{}",
            daemon.stderr()
        );
        // B is untouched meanwhile.
        assert!(echoed(&echo(&b, "B meanwhile").await), "B was disturbed");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        errors
            .iter()
            .any(|m| m.contains("restarting") && m.contains("killed by signal 9")),
        "no call said the instance is restarting and why: {errors:#?}"
    );
    let after = wait_process_count(&daemon, 3).await;
    assert!(after.contains(&b_instance), "B's instance was replaced");
    assert!(
        after.contains(&shared[0]),
        "the shared instance was replaced"
    );
    assert!(!after.contains(&a_instance));
    assert!(echoed(&echo(&b, "B after").await));
}

/// A POST of `body` for `client`'s session on a raw socket, so the test can drop the connection
/// the way a host that goes away does.
async fn raw_post(client: &Client, body: &Value) -> tokio::net::TcpStream {
    let url = reqwest::Url::parse(&client.url).unwrap();
    let addr = format!("{}:{}", url.host_str().unwrap(), url.port().unwrap());
    let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let body = body.to_string();
    let request = format!(
        "POST {} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Accept: application/json, text/event-stream\r\nMcp-Session-Id: {}\r\n\
         MCP-Protocol-Version: 2025-11-25\r\nContent-Length: {}\r\n\r\n{body}",
        url.path(),
        client.session.as_deref().unwrap(),
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    stream
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_goes_away_cancels_its_call_upstream_and_frees_its_slot() {
    let record = tempfile::NamedTempFile::new().unwrap();
    let path = record.path().to_str().unwrap().to_owned();
    let table = format!(
        "{}max_in_flight = 1\n",
        test_upstream("up", &["--protocol-tools", "--record", &path])
    );
    let daemon = Daemon::start(&table);
    let host = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&host, |n| n.iter().any(|t| t == "up__progress"))
        .await;
    let cancelled_for = |call: &Value| {
        let id = call["id"].clone();
        move |l: &Value| l["method"] == "notifications/cancelled" && l["params"]["requestId"] == id
    };

    // 1. The host drops a POST still waiting for its JSON answer.
    let body = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                      "params": {"name": "up__slow", "arguments": {"ms": 30000}}});
    let socket = raw_post(&host, &body).await;
    let call = wait_recorded(&daemon, record.path(), |l| {
        l["method"] == "tools/call" && l["params"]["arguments"]["ms"] == 30000
    })
    .await;
    drop(socket);
    let cancel = wait_recorded(&daemon, record.path(), cancelled_for(&call)).await;
    assert_eq!(
        cancel["params"]["reason"], "mcpmux: the caller went away",
        "{cancel}"
    );
    // Its slot is free at once: with max_in_flight = 1 the next call is not "busy".
    let answer = host
        .request(
            "tools/call",
            json!({"name": "up__slow", "arguments": {"ms": 10}}),
        )
        .await;
    assert_eq!(
        answer["result"]["content"][0]["text"], "slept 10ms",
        "{answer}"
    );

    // 2. The host drops the event stream its call's answer was streaming on.
    let body = json!({"jsonrpc": "2.0", "id": 8, "method": "tools/call",
                      "params": {"name": "up__progress", "_meta": {"progressToken": "p1"},
                                 "arguments": {"steps": 2, "delay_ms": 30000}}});
    let mut socket = raw_post(&host, &body).await;
    let call = wait_recorded(&daemon, record.path(), |l| {
        l["method"] == "tools/call" && l["params"]["name"] == "progress"
    })
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
    assert!(
        String::from_utf8_lossy(&seen).contains("text/event-stream"),
        "{}",
        String::from_utf8_lossy(&seen)
    );
    drop(socket);
    let cancel = wait_recorded(&daemon, record.path(), cancelled_for(&call)).await;
    assert_eq!(cancel["params"]["reason"], "mcpmux: the caller went away");
    let answer = host
        .request(
            "tools/call",
            json!({"name": "up__slow", "arguments": {"ms": 10}}),
        )
        .await;
    assert_eq!(
        answer["result"]["content"][0]["text"], "slept 10ms",
        "{answer}"
    );
}
