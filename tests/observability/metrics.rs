//! The admin API's `/metrics`, parsed by a Prometheus text-format parser: upstream state, in
//! flight, restarts and catalog sizes, sessions, per-host requests and refusals, the audit queue;
//! `/healthz` and `/readyz` answer as `/health` and `/ready` do.

use crate::common::{Client, Daemon, sha256_hex, test_upstream};
use prometheus_parse::{Scrape, Value};
use serde_json::json;

const TOKEN: &str = "metrics-host-token-77";

fn value(scrape: &Scrape, metric: &str, label: Option<(&str, &str)>) -> f64 {
    let sample = scrape
        .samples
        .iter()
        .find(|s| s.metric == metric && label.is_none_or(|(k, v)| s.labels.get(k) == Some(v)))
        .unwrap_or_else(|| panic!("no sample {metric} {label:?}"));
    match sample.value {
        Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => v,
        _ => panic!("{metric} is not a number"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_parse_and_say_what_the_daemon_is_doing() {
    let daemon = Daemon::start(&format!(
        "[hosts.ci]\ntoken_sha256 = \"{}\"\n{}{}",
        sha256_hex(TOKEN),
        test_upstream("up", &[]),
        test_upstream("other", &[]),
    ));
    let host = Client::connect_as(&daemon.url, TOKEN).await;
    daemon
        .wait_for_tools(&host, |n| n.iter().any(|t| t == "other__echo"))
        .await;
    for i in 0..3 {
        host.tool_text("up__echo", json!({"i": i})).await;
    }
    // The slow call's time as the host saw it bounds what the daemon may have recorded (a busy
    // machine stretches a 30 ms sleep; the daemon's measure is within the host's).
    let slow_started = std::time::Instant::now();
    host.tool_text("up__slow", json!({"ms": 30})).await;
    let slow_took = slow_started.elapsed().as_secs_f64();
    host.request("tools/call", json!({"name": "up__fail", "arguments": {}}))
        .await;
    host.request("resources/read", json!({"uri": "up+test://up/hello"}))
        .await;
    let admin = daemon.admin_url.clone().unwrap();
    let response = daemon.admin_get("/metrics").await;
    assert_eq!(response.status(), 200);
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        content_type.starts_with("text/plain; version=0.0.4"),
        "{content_type}"
    );
    let text = response.text().await.unwrap();
    let scrape = Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).unwrap();
    assert!(scrape.docs.contains_key("mcpmux_upstream_up"), "{text}");
    for upstream in ["up", "other"] {
        assert_eq!(
            value(&scrape, "mcpmux_upstream_up", Some(("upstream", upstream))),
            1.0
        );
        assert_eq!(
            value(
                &scrape,
                "mcpmux_upstream_restarts_total",
                Some(("upstream", upstream))
            ),
            0.0
        );
    }
    assert_eq!(
        value(&scrape, "mcpmux_catalog_items", Some(("upstream", "up"))),
        7.0,
        "{text}"
    );
    assert_eq!(value(&scrape, "mcpmux_sessions", None), 1.0, "{text}");
    assert!(value(&scrape, "mcpmux_host_requests_total", Some(("host", "ci"))) >= 3.0);
    assert_eq!(
        value(&scrape, "mcpmux_host_refused_total", Some(("host", "ci"))),
        0.0
    );
    assert_eq!(value(&scrape, "mcpmux_audit_dropped_total", None), 0.0);
    assert!(value(&scrape, "mcpmux_catalog_generation", None) >= 2.0);

    // Requests, errors and latency per upstream, method and tool.
    let echo = [
        ("upstream", "up"),
        ("method", "tools/call"),
        ("tool", "echo"),
    ];
    let labelled = |metric: &str, labels: &[(&str, &str)]| {
        scrape
            .samples
            .iter()
            .find(|s| s.metric == metric && labels.iter().all(|(k, v)| s.labels.get(k) == Some(v)))
            .unwrap_or_else(|| panic!("no {metric} {labels:?}:\n{text}"))
            .value
            .clone()
    };
    let number = |v: Value| match v {
        Value::Counter(v) | Value::Gauge(v) | Value::Untyped(v) => v,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        number(labelled("mcpmux_upstream_requests_total", &echo)),
        3.0
    );
    assert_eq!(
        number(labelled("mcpmux_upstream_request_errors_total", &echo)),
        0.0
    );
    let read = [("upstream", "up"), ("method", "resources/read")];
    assert_eq!(
        number(labelled("mcpmux_upstream_requests_total", &read)),
        1.0
    );
    // A tool error result is an answer, not a failed request.
    let fail = [("upstream", "up"), ("tool", "fail")];
    assert_eq!(
        number(labelled("mcpmux_upstream_request_errors_total", &fail)),
        0.0
    );
    let slow = [("upstream", "up"), ("tool", "slow")];
    match labelled("mcpmux_upstream_request_duration_seconds", &slow) {
        Value::Histogram(buckets) => {
            let below = |le: f64| buckets.iter().find(|b| b.less_than == le).unwrap().count;
            // 30 ms or more: not within 16 ms; and within the first bound (they double from
            // 4 µs) at or above what the host measured — on a quiet machine the 64 ms one.
            assert_eq!(below(0.016384), 0.0, "{buckets:?}");
            let bound = buckets
                .iter()
                .map(|b| b.less_than)
                .find(|&le| le >= slow_took)
                .unwrap_or(f64::INFINITY);
            assert_eq!(below(bound), 1.0, "host saw {slow_took} s: {buckets:?}");
            assert_eq!(buckets.last().unwrap().count, 1.0);
        }
        other => panic!("not a histogram: {other:?}"),
    }
    let status = daemon.status().await;
    let up = status["upstreams"]
        .as_array()
        .unwrap()
        .iter()
        .find(|u| u["name"] == "up")
        .unwrap();
    assert_eq!(up["requests"], 6, "{up}");
    let (p50, p99) = (
        up["latency_p50_ms"].as_f64().unwrap(),
        up["latency_p99_ms"].as_f64().unwrap(),
    );
    assert!(
        p50 > 0.0 && p50 < 30.0 && p99 >= 25.0,
        "p50 {p50} p99 {p99}"
    );

    // Health and readiness stay open: no token.
    for path in ["/healthz", "/readyz"] {
        let answer = reqwest::get(format!("{admin}{path}")).await.unwrap();
        assert_eq!(answer.status(), 200, "{path}");
    }
}
