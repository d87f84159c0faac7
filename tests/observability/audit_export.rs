//! The audit trail off the box (`[audit] export = "otlp"`), against the real OTLP receiver of the
//! telemetry tests: every record of a load run arrives once per chain position (deduplicated on
//! chain and sequence), as the local log holds it, through an outage of the receiver; the chain's
//! head arrives periodically; a queue that fills while the receiver refuses drops records without
//! failing a call, counts them in `/metrics` and in the chain.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{Client, Daemon, test_upstream};
use crate::telemetry::otlp::{Received, ReceivedLog, Receiver};

fn config(receiver: &Receiver, protocol: &str, audit: &str) -> String {
    // Only the audit records where the export is alone.
    let traces = if audit.is_empty() {
        ""
    } else {
        "traces = false\n"
    };
    format!(
        "[telemetry]\notlp_endpoint = \"{}\"\notlp_protocol = \"{protocol}\"\nmetrics = false\n{traces}\n\
         [audit]\nexport = \"otlp\"\nexport_head_interval = \"1s\"\n{audit}\n\n{}",
        receiver.endpoint(),
        test_upstream("up", &[])
    )
}

/// `n` echo calls, eight at a time; each must succeed.
async fn calls(host: &Client, n: usize) {
    for chunk in 0..n.div_ceil(8) {
        let batch = (0..8.min(n - chunk * 8)).map(|i| {
            host.request(
                "tools/call",
                json!({"name": "up__echo", "arguments": {"i": chunk * 8 + i}}),
            )
        });
        for answer in futures_util::future::join_all(batch).await {
            assert!(answer.get("result").is_some(), "{answer}");
        }
    }
}

fn records(received: &Received) -> Vec<ReceivedLog> {
    (received.logs.iter())
        .filter(|l| l.event_name == "mcpmux.audit.record")
        .cloned()
        .collect()
}

fn seq_of(log: &ReceivedLog) -> u64 {
    log.attribute("mcpmux.audit.seq").unwrap().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_audit_record_reaches_the_receiver_once_per_chain_position_through_an_outage() {
    let receiver = Receiver::grpc().await;
    let daemon = Daemon::start(&config(&receiver, "grpc", ""));
    let host = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&host, |n| n.iter().any(|t| t == "up__echo"))
        .await;
    calls(&host, 120).await;
    // The receiver goes down for a while; calls go on; then it comes back.
    receiver.received.lock().unwrap().refuse_logs = true;
    calls(&host, 120).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    receiver.received.lock().unwrap().refuse_logs = false;
    calls(&host, 120).await;

    let local: Vec<Value> = (daemon.audit_json().lines())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let last = local.iter().map(|r| r["seq"].as_u64().unwrap()).max();
    let last = last.unwrap();
    let arrived = receiver
        .wait(Duration::from_secs(30), |r| {
            records(r).iter().any(|l| seq_of(l) >= last)
        })
        .await;
    assert!(arrived, "record {last} did not arrive\n{}", daemon.stderr());
    let refused = receiver.received.lock().unwrap().refused_logs;
    assert!(
        refused > 0,
        "the receiver refused nothing: no outage tested"
    );

    let received = records(&receiver.received.lock().unwrap());
    let mut by_seq: BTreeMap<u64, &ReceivedLog> = BTreeMap::new();
    for log in &received {
        if let Some(before) = by_seq.insert(seq_of(log), log) {
            assert_eq!(before.body, log.body, "one position, two records");
        }
    }
    let chain = received[0].attribute("mcpmux.audit.chain").unwrap();
    assert!(!chain.is_empty());
    // Every record of the local log arrived, exactly as it is kept there.
    for record in &local {
        let seq = record["seq"].as_u64().unwrap();
        let Some(log) = by_seq.get(&seq) else {
            panic!("record {seq} never arrived: {record}");
        };
        let body: Value = serde_json::from_str(&log.body).unwrap();
        assert_eq!(body["hash"], record["hash"], "{seq}");
        assert_eq!(log.attribute("mcpmux.audit.hash"), record["hash"].as_str());
        assert_eq!(
            log.attribute("mcpmux.audit.prev_hash"),
            record["prev_hash"].as_str()
        );
        assert_eq!(log.attribute("mcpmux.audit.chain"), Some(chain));
    }
    // The positions received form one unbroken chain.
    let mut previous: Option<&str> = None;
    for (seq, log) in &by_seq {
        if let Some(previous) = previous {
            assert_eq!(
                log.attribute("mcpmux.audit.prev_hash"),
                Some(previous),
                "{seq}"
            );
        }
        previous = log.attribute("mcpmux.audit.hash");
    }
    assert!(
        local.len() >= 360,
        "{} local records for 360 calls",
        local.len()
    );
    // The chain's head arrives on its own, naming a position and hash of the chain.
    let heads = receiver
        .wait(Duration::from_secs(10), |r| {
            r.logs.iter().any(|l| l.event_name == "mcpmux.audit.head")
        })
        .await;
    assert!(heads, "no head record");
    let received = receiver.received.lock().unwrap();
    let head = (received.logs.iter())
        .find(|l| l.event_name == "mcpmux.audit.head")
        .unwrap();
    let at = seq_of(head);
    assert_eq!(
        by_seq
            .get(&at)
            .and_then(|l| l.attribute("mcpmux.audit.hash")),
        head.attribute("mcpmux.audit.hash"),
        "the head names a record as it was received"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusing_receiver_never_fails_a_call_and_what_it_missed_is_counted_in_metrics_and_chain()
{
    let receiver = Receiver::http().await;
    receiver.received.lock().unwrap().refuse_logs = true;
    let daemon = Daemon::start(&config(&receiver, "http/protobuf", "export_queue = 16"));
    let host = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&host, |n| n.iter().any(|t| t == "up__echo"))
        .await;
    let started = std::time::Instant::now();
    calls(&host, 200).await;
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "calls waited for the export: {:?}",
        started.elapsed()
    );
    let metrics = daemon.admin_get("/metrics").await.text().await.unwrap();
    let dropped: u64 = (metrics.lines())
        .find_map(|l| l.strip_prefix("mcpmux_audit_export_dropped_total "))
        .unwrap_or_else(|| panic!("no export drop counter:\n{metrics}"))
        .trim()
        .parse()
        .unwrap();
    assert!(dropped > 0, "a queue of 16 held 200 calls' records?");
    // The chain itself says so, and once the receiver takes records again that arrives too.
    receiver.received.lock().unwrap().refuse_logs = false;
    let noted = receiver
        .wait(Duration::from_secs(30), |r| {
            (r.logs.iter()).any(|l| l.body.contains("\"audit.export_dropped\""))
        })
        .await;
    assert!(
        noted,
        "no audit.export_dropped record arrived\n{}",
        daemon.stderr()
    );
    assert!(daemon.audit_json().contains("audit.export_dropped"));
    let spans = receiver.received.lock().unwrap().spans.len();
    assert_eq!(spans, 0, "traces = false sends no span");
}

#[test]
fn an_export_without_an_otlp_endpoint_refuses_to_start_naming_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("mcpmux.toml");
    std::fs::write(
        &path,
        format!("[audit]\nexport = \"otlp\"\n\n{}", test_upstream("up", &[])),
    )
    .unwrap();
    let stderr = crate::common::serve_refused(&path, &dir.path().join("state"));
    assert!(
        stderr.contains("[telemetry] otlp_endpoint")
            && stderr.contains("OTEL_EXPORTER_OTLP_ENDPOINT"),
        "{stderr}"
    );
}
