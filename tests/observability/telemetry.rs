//! OpenTelemetry through a real OTLP receiver (the collector's gRPC services and its HTTP/protobuf
//! endpoints, in `otlp`): each host request is a server span continuing the trace the host sent
//! (in `params._meta` or its HTTP headers), each upstream request a client span under it whose
//! `traceparent` the upstream receives in `_meta` (and a remote one in its HTTP headers too); the
//! audit records carry the trace ids; metrics arrive over OTLP. Without a collector, the host's own
//! trace context still reaches the upstream, unchanged.

pub(crate) mod otlp;

use std::time::Duration;

use crate::common::{Client, Daemon, Via, read_messages, test_upstream, test_upstream_via};
use otlp::Receiver;
use serde_json::{Value, json};

const HOST_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const HOST_SPAN: &str = "00f067aa0ba902b7";
const HEADER_TRACE: &str = "0af7651916cd43dd8448eb211c80319c";
const HEADER_SPAN: &str = "b7ad6b7169203331";

/// The `_meta` the upstream received with an echo call.
fn upstream_meta(answer: &Value) -> Value {
    answer["result"]["structuredContent"]["params"]["_meta"].clone()
}

/// Waits until the receiver has at least two spans of each of `traces`; then every span.
async fn spans_of(
    receiver: &Receiver,
    daemon: &Daemon,
    traces: &[&str],
) -> Vec<otlp::ReceivedSpan> {
    let enough = |r: &otlp::Received| {
        (traces.iter()).all(|t| r.spans.iter().filter(|s| s.trace_id == *t).count() >= 2)
    };
    assert!(
        receiver.wait(Duration::from_secs(20), enough).await,
        "spans: {:?}\n{}",
        receiver.received.lock().unwrap().spans,
        daemon.stderr()
    );
    receiver.received.lock().unwrap().spans.clone()
}

/// `tools/call` of `name` with the trace context in HTTP headers only.
async fn call_with_header(host: &Client, name: &str, traceparent: &str) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 9001, "method": "tools/call",
                      "params": {"name": name, "arguments": {"via": "header"}}});
    let response = host
        .post_raw(
            body.to_string(),
            &[("traceparent", traceparent), ("tracestate", "vendor=abc")],
        )
        .await;
    let messages = read_messages(response).await;
    messages
        .into_iter()
        .find(|m| m["id"] == 9001)
        .expect("no answer")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_grpc_the_hosts_trace_continues_through_mcpmux_into_the_upstream() {
    let receiver = Receiver::grpc().await;
    let (far, far_server) = test_upstream_via("far", Via::Http, &[]);
    let far_server = far_server.unwrap();
    let endpoint = receiver.endpoint();
    let daemon = Daemon::start_with_env(
        &format!("{}{far}", test_upstream("up", &[])),
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_SERVICE_NAME", "mcpmux-under-test"),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "300"),
        ],
    );
    let host = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&host, |n| {
            n.iter().any(|t| t == "up__echo") && n.iter().any(|t| t == "far__echo")
        })
        .await;

    // The trace in `params._meta`.
    let traceparent = format!("00-{HOST_TRACE}-{HOST_SPAN}-01");
    let answer = host
        .request(
            "tools/call",
            json!({"name": "up__echo", "arguments": {}, "_meta": {"traceparent": traceparent}}),
        )
        .await;
    let sent = upstream_meta(&answer)["traceparent"]
        .as_str()
        .unwrap()
        .to_owned();
    let parts: Vec<&str> = sent.split('-').collect();
    assert_eq!(parts[1], HOST_TRACE, "{sent}");
    assert_ne!(
        parts[2], HOST_SPAN,
        "the upstream's parent must be mcpmux's span: {sent}"
    );
    let upstream_parent = parts[2].to_owned();

    // The trace in HTTP headers only, to a remote upstream: `_meta` and its headers carry it.
    let answer = call_with_header(
        &host,
        "far__echo",
        &format!("00-{HEADER_TRACE}-{HEADER_SPAN}-01"),
    )
    .await;
    let meta = upstream_meta(&answer);
    let sent_far = meta["traceparent"].as_str().unwrap().to_owned();
    assert!(
        sent_far.starts_with(&format!("00-{HEADER_TRACE}-")),
        "{answer}"
    );
    assert_eq!(meta["tracestate"], "vendor=abc", "{meta}");
    let headers: Vec<String> = reqwest::get(far_server.url("/traceparents"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(headers.contains(&sent_far), "{headers:?} lacks {sent_far}");

    // The receiver has the server span under the host's, and the client span under it.
    let spans = spans_of(&receiver, &daemon, &[HOST_TRACE, HEADER_TRACE]).await;
    let server = spans
        .iter()
        .find(|s| s.trace_id == HOST_TRACE && s.kind == 2)
        .unwrap();
    assert_eq!(server.parent_span_id, HOST_SPAN);
    assert_eq!(server.name, "tools/call up__echo");
    assert_eq!(server.attribute("mcp.method.name"), Some("tools/call"));
    assert_eq!(server.attribute("mcp.protocol.version"), Some("2025-11-25"));
    assert_eq!(server.attribute("gen_ai.tool.name"), Some("up__echo"));
    assert_eq!(server.attribute("mcpmux.upstream"), Some("up"));
    assert_eq!(server.service_name.as_deref(), Some("mcpmux-under-test"));
    let client = spans
        .iter()
        .find(|s| s.trace_id == HOST_TRACE && s.kind == 3)
        .unwrap();
    assert_eq!(client.parent_span_id, server.span_id);
    assert_eq!(client.span_id, upstream_parent);
    assert_eq!(client.name, "tools/call echo");
    assert_eq!(client.attribute("mcpmux.upstream"), Some("up"));
    let far_server_span = spans
        .iter()
        .find(|s| s.trace_id == HEADER_TRACE && s.kind == 2)
        .unwrap();
    assert_eq!(far_server_span.parent_span_id, HEADER_SPAN);

    // Metrics over OTLP: the observed counts and the latency histogram.
    assert!(
        receiver
            .wait(Duration::from_secs(20), |r| {
                [
                    "mcpmux.upstream.requests",
                    "mcpmux.upstream.request.duration",
                    "mcpmux.sessions",
                ]
                .iter()
                .all(|m| r.metrics.iter().any(|n| n == m))
            })
            .await,
        "metrics: {:?}",
        receiver.received.lock().unwrap().metrics
    );

    // The audit records carry the trace ids.
    let records = daemon.audit_json();
    assert!(
        records.contains(HOST_TRACE) && records.contains(HEADER_TRACE),
        "{records}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_protobuf_from_the_config_a_request_without_a_trace_starts_one() {
    let receiver = Receiver::http().await;
    let config = format!(
        "[telemetry]\notlp_endpoint = \"{}\"\notlp_protocol = \"http/protobuf\"\nmetrics = false\n\n{}",
        receiver.endpoint(),
        test_upstream("up", &[])
    );
    let daemon = Daemon::start_with_env(&config, &[("OTEL_BSP_SCHEDULE_DELAY", "100")]);
    let host = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&host, |n| n.iter().any(|t| t == "up__echo"))
        .await;
    let answer = host
        .request("tools/call", json!({"name": "up__echo", "arguments": {}}))
        .await;
    let sent = upstream_meta(&answer)["traceparent"]
        .as_str()
        .unwrap()
        .to_owned();
    let trace = sent.split('-').nth(1).unwrap().to_owned();
    let spans = spans_of(&receiver, &daemon, &[&trace]).await;
    let server = spans
        .iter()
        .find(|s| s.trace_id == trace && s.kind == 2)
        .unwrap();
    assert_eq!(server.parent_span_id, "", "a new trace has a root span");
    assert_eq!(server.service_name.as_deref(), Some("mcpmux"));
    assert!(daemon.audit_json().contains(&trace));
    assert!(
        receiver.received.lock().unwrap().metrics.is_empty(),
        "metrics = false exports none"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_collector_the_hosts_trace_reaches_the_upstream_unchanged() {
    let daemon = Daemon::start(&test_upstream("up", &[]));
    let host = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&host, |n| n.iter().any(|t| t == "up__echo"))
        .await;
    let in_headers = format!("00-{HEADER_TRACE}-{HEADER_SPAN}-01");
    let answer = call_with_header(&host, "up__echo", &in_headers).await;
    let meta = upstream_meta(&answer);
    assert_eq!(meta["traceparent"], in_headers.as_str(), "{answer}");
    assert_eq!(meta["tracestate"], "vendor=abc");

    let in_meta = format!("00-{HOST_TRACE}-{HOST_SPAN}-01");
    let answer = host
        .request(
            "tools/call",
            json!({"name": "up__echo", "arguments": {}, "_meta": {"traceparent": in_meta, "example.com/k": 1}}),
        )
        .await;
    let meta = upstream_meta(&answer);
    assert_eq!(meta, json!({"traceparent": in_meta, "example.com/k": 1}));
    let records = daemon.audit_json();
    assert!(
        records.contains(HOST_TRACE) && records.contains(HEADER_TRACE),
        "{records}"
    );
}
