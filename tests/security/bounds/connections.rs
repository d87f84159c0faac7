//! The listeners' bounds: a connection that does not finish its request headers within
//! `server.header_timeout` is closed (on the host and the admin listener), and so is a keep-alive
//! connection idle that long; beyond `server.max_connections` new connections wait until one
//! closes; a response in progress (an event stream) is never cut by either.

use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{WAIT, pings, start};
use crate::common::{Client, LegacyHost, test_upstream};

/// A request line and headers without the blank line that would end them.
const HALF_SENT: &[u8] =
    b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nX-Slow: yes";

/// `host:port` of an `http://host:port/...` URL.
fn authority(url: &str) -> String {
    let rest = url.strip_prefix("http://").unwrap();
    rest.split('/').next().unwrap().to_owned()
}

/// Opens a connection and sends the start of a request that never ends.
async fn half_sent(addr: &str) -> TcpStream {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(HALF_SENT).await.unwrap();
    stream
}

/// Reads until the daemon closes the connection (within `WAIT`); what it sent before.
async fn until_closed(stream: &mut TcpStream, what: &str) -> Vec<u8> {
    let mut seen = Vec::new();
    let read = tokio::time::timeout(WAIT, stream.read_to_end(&mut seen)).await;
    assert!(read.is_ok(), "{what} is still open after {WAIT:?}");
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_requests_are_closed_after_the_header_timeout_on_both_listeners() {
    let daemon = start("header_timeout = \"1s\"", &test_upstream("up", &[]));
    let host = authority(&daemon.url);
    let admin = authority(daemon.admin_url.as_deref().unwrap());
    let mut slow = Vec::new();
    for _ in 0..300 {
        slow.push(half_sent(&host).await);
    }
    let mut slow_admin = Vec::new();
    for _ in 0..20 {
        slow_admin.push(half_sent(&admin).await);
    }
    // Meanwhile a host and the admin API are served (300 is within server.max_connections).
    let client = Client::connect(&daemon.url).await;
    assert!(pings(&client).await);
    assert!(daemon.status().await["sessions"].is_number());
    for stream in &mut slow {
        until_closed(stream, "a half-sent request to the host listener").await;
    }
    for stream in &mut slow_admin {
        until_closed(stream, "a half-sent request to the admin listener").await;
    }
    // Still served afterwards, on a new connection: the first client's has been idle for the
    // header timeout by now, and the daemon closes it (see the next test); a request sent on it
    // would race that close.
    let client = Client::connect(&daemon.url).await;
    assert!(pings(&client).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_keep_alive_connection_is_closed_after_the_header_timeout() {
    let daemon = start("header_timeout = \"1s\"", &test_upstream("up", &[]));
    for addr in [
        authority(&daemon.url),
        authority(daemon.admin_url.as_deref().unwrap()),
    ] {
        let mut stream = TcpStream::connect(&addr).await.unwrap();
        let request = "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
        stream.write_all(request.as_bytes()).await.unwrap();
        let seen = until_closed(&mut stream, "an idle keep-alive connection").await;
        let text = String::from_utf8_lossy(&seen);
        assert!(text.starts_with("HTTP/1.1 "), "no answer first: {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beyond_max_connections_a_new_connection_waits_until_one_closes() {
    let daemon = start(
        "header_timeout = \"1s\"\nmax_connections = 3",
        &test_upstream("up", &[]),
    );
    // Three event streams, long-lived and legitimate, take every connection.
    let mut streams = Vec::new();
    for _ in 0..3 {
        streams.push(LegacyHost::open(&daemon.url, "2024-11-05").await);
    }
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let url = daemon
        .url
        .replace("/mcp", "/.well-known/oauth-protected-resource");
    let waiting = tokio::spawn({
        let http = http.clone();
        let url = url.clone();
        async move { http.get(url).send().await.map(|r| r.status()) }
    });
    // Not served while the streams hold every slot (the admin API still is: its own limit).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !waiting.is_finished(),
        "a connection beyond the limit was served"
    );
    assert!(daemon.status().await["sessions"].is_number());
    // One stream ends: the waiting connection is served.
    drop(streams.pop());
    let served = tokio::time::timeout(WAIT, waiting).await;
    assert!(
        matches!(served, Ok(Ok(Ok(_)))),
        "the waiting connection was not served: {served:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_stream_outlives_the_header_timeout() {
    let daemon = start("header_timeout = \"1s\"", &test_upstream("up", &[]));
    let mut legacy = LegacyHost::open(&daemon.url, "2024-11-05").await;
    // A half-sent request opened after the stream is closed once the timeout has passed.
    let mut slow = half_sent(&authority(&daemon.url)).await;
    until_closed(&mut slow, "a half-sent request").await;
    let params = json!({"protocolVersion": "2024-11-05", "capabilities": {},
        "clientInfo": {"name": "legacy", "version": "1"}});
    let (_, answer) = legacy.request("initialize", params).await;
    assert!(answer.get("result").is_some(), "{answer}");
}
