//! No stream or parked call skips a host's limits. What a 2026-07-28 host holds open for a while
//! is counted per caller — a host, or an anonymous client's address: `subscriptions/listen`
//! streams (`server.max_listen_streams_per_caller`, and no more than a host's `max_sessions`),
//! calls parked for the host's input (`server.max_parked_per_caller`, each counting against the
//! host's `max_in_flight` while its retry may continue it), and a parked call not continued
//! within `server.park_timeout` lets go of its upstream.

use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{Client, Daemon, RemoteServer, Via, poll_until, read_messages, sha256_hex};

const MODERN: &str = "2026-07-28";
const TINY: &str = "tiny-holdings-token-3e1f";
/// `-32011`: busy.
const BUSY: i64 = -32011;

/// A stateless POST of `method` with `params` (plus the envelope, declaring sampling) as the
/// host with `token` (or anonymous); the HTTP status and the last message of the answer.
async fn stateless(url: &str, token: Option<&str>, method: &str, params: Value) -> (u16, Value) {
    let response = post(url, token, method, params).await;
    let status = response.status().as_u16();
    let messages = read_messages(response).await;
    (status, messages.last().cloned().unwrap_or(Value::Null))
}

async fn post(
    url: &str,
    token: Option<&str>,
    method: &str,
    mut params: Value,
) -> reqwest::Response {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {"sampling": {}},
        "io.modelcontextprotocol/clientInfo": {"name": "holdings", "version": "0"},
    });
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", MODERN)
        .header("mcp-method", method);
    if let Some(name) = params.get("name").and_then(Value::as_str) {
        request = request.header("mcp-name", name);
    }
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    request.body(body.to_string()).send().await.unwrap()
}

/// A call of `alpha__sample`, which asks the host for sampling: parked until the retry.
fn sample(prompt: &str) -> Value {
    json!({"name": "alpha__sample", "arguments": {"prompt": prompt}})
}

/// The retry of a parked call with the host's answer.
fn retried(call: &Value, parked: &Value, text: &str) -> Value {
    let result = &parked["result"];
    let key = result["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    let mut retry = call.clone();
    retry["inputResponses"] = json!({ key: {"role": "assistant", "model": "m",
        "content": {"type": "text", "text": text}} });
    retry["requestState"] = result["requestState"].clone();
    retry
}

/// A daemon with `server` lines in `[server]`, host `tiny` (one request in flight, one
/// session) and anonymous loopback callers who see everything (profile `all`), in front of our
/// test upstream over Streamable HTTP (each call's requests for input come on its own stream,
/// so calls of several callers may wait for input at once).
async fn daemon(server: &str) -> (Daemon, RemoteServer) {
    let upstream = RemoteServer::test_upstream("alpha", 0, &["--protocol-tools"]);
    let daemon = Daemon::start_with(
        &format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nanonymous_profile = \"all\"\n{server}\n\
             [profiles.all]\n\n\
             [hosts.tiny]\ntoken_sha256 = \"{}\"\nmax_in_flight = 1\nmax_sessions = 1\n\n{}",
            sha256_hex(TINY),
            upstream.table("alpha", Via::Http),
        ),
        &[],
    );
    let client = Client::connect_as(&daemon.url, TINY).await;
    daemon
        .wait_for_tools(&client, |n| n.iter().any(|t| t == "alpha__sample"))
        .await;
    drop(client);
    (daemon, upstream)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_streams_are_counted_per_caller() {
    let (daemon, _upstream) = daemon("max_listen_streams_per_caller = 3").await;
    let listen = |token: Option<&'static str>| {
        let url = daemon.url.clone();
        async move {
            let params = json!({"notifications": {"toolsListChanged": true}});
            post(&url, token, "subscriptions/listen", params).await
        }
    };
    // A host limited to one session holds one stream.
    let first = listen(Some(TINY)).await;
    assert_eq!(first.status(), 200);
    let second = listen(Some(TINY)).await;
    assert_eq!(second.status(), 429);
    let refused: Value = serde_json::from_str(&second.text().await.unwrap()).unwrap();
    assert_eq!(refused["error"]["code"], BUSY, "{refused}");
    assert!(
        refused["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_sessions"),
        "{refused}"
    );
    // An anonymous client holds max_listen_streams_per_caller of them.
    let mut open = Vec::new();
    for _ in 0..3 {
        let stream = listen(None).await;
        assert_eq!(stream.status(), 200);
        open.push(stream);
    }
    let over = listen(None).await;
    assert_eq!(over.status(), 429, "a fourth anonymous stream was opened");
    // Others are served meanwhile; a stream that ends gives its place back.
    let (_, listed) = stateless(&daemon.url, None, "tools/list", json!({})).await;
    assert!(listed["result"]["tools"].is_array(), "{listed}");
    drop(open.pop());
    let again = poll_until(Duration::from_secs(10), || async {
        listen(None).await.status() == 200
    })
    .await;
    assert!(again, "a closed stream's place was not given back");
    drop(first);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_call_counts_against_its_host_and_its_retry_continues_it() {
    let (daemon, _upstream) = daemon("").await;
    let url = &daemon.url;
    let call = sample("one");
    let (_, parked) = stateless(url, Some(TINY), "tools/call", call.clone()).await;
    assert_eq!(parked["result"]["resultType"], "input_required", "{parked}");
    // Its host may have one request at once, and the parked call is it.
    let (status, busy) = stateless(url, Some(TINY), "tools/call", sample("two")).await;
    assert_eq!(busy["error"]["code"], BUSY, "{status} {busy}");
    assert!(
        busy["error"]["message"]
            .as_str()
            .unwrap()
            .contains("waiting for its input"),
        "{busy}"
    );
    // The upstream is not held by calls the host may not make.
    let status = daemon.upstream_status("alpha").await;
    assert_eq!(status["in_flight"], 1, "{status}");
    // The retry continues the parked call on its slot.
    let (_, done) = stateless(
        url,
        Some(TINY),
        "tools/call",
        retried(&call, &parked, "Paris"),
    )
    .await;
    assert_eq!(
        done["result"]["content"][0]["text"], "sampled: Paris",
        "{done}"
    );
    let (_, next) = stateless(url, Some(TINY), "tools/call", sample("three")).await;
    assert_eq!(next["result"]["resultType"], "input_required", "{next}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parked_calls_are_capped_per_caller_and_let_go_of_the_upstream_soon() {
    let (daemon, _upstream) = daemon("max_parked_per_caller = 2\npark_timeout = \"2s\"").await;
    let url = &daemon.url;
    let mut parked = Vec::new();
    for n in 0..2 {
        let call = sample(&format!("anonymous {n}"));
        let (_, answer) = stateless(url, None, "tools/call", call.clone()).await;
        assert_eq!(answer["result"]["resultType"], "input_required", "{answer}");
        parked.push((call, answer));
    }
    let (_, third) = stateless(url, None, "tools/call", sample("anonymous 2")).await;
    assert_eq!(third["error"]["code"], BUSY, "{third}");
    assert!(
        third["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_parked_per_caller"),
        "{third}"
    );
    assert_eq!(daemon.upstream_status("alpha").await["in_flight"], 2);
    // Not continued within park_timeout: cancelled upstream, the slots free, the retry told why.
    let let_go = poll_until(Duration::from_secs(20), || async {
        daemon.upstream_status("alpha").await["in_flight"] == 0
    })
    .await;
    assert!(let_go, "the parked calls still hold the upstream");
    let (call, answer) = &parked[0];
    let (_, late) = stateless(url, None, "tools/call", retried(call, answer, "late")).await;
    assert_eq!(late["error"]["code"], -32602, "{late}");
    let (_, again) = stateless(url, None, "tools/call", sample("anonymous 3")).await;
    assert_eq!(again["result"]["resultType"], "input_required", "{again}");
}
