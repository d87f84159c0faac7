//! Checks of a log against the workload: the whole log, every call once with its fields, the
//! lifecycle events.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde_json::{Value, json};

use super::SECRET;
use super::reading::{seqs, ts};
use super::workload::{Args, Call, Workload};

/// The log starts at #0 and is consecutive, in time order, each record once.
pub(super) fn assert_whole_log(all: &[Value]) {
    let seqs = seqs(all);
    let want: Vec<u64> = (0..all.len() as u64).collect();
    assert_eq!(seqs, want, "the log is not #0.. consecutive");
    assert!(
        all.windows(2).all(|w| ts(&w[0]) <= ts(&w[1])),
        "the log is not in time order"
    );
}

/// Every call of `w` is in `records` exactly once, in order per session, with its fields.
pub(super) fn assert_calls(records: &[Value], w: &Workload, source: &str) {
    let mut digests: BTreeMap<&str, HashSet<String>> = BTreeMap::new();
    let mut random_traces = HashSet::new();
    let mut problems = Vec::new();
    for session in &w.sessions {
        let got: Vec<&Value> = records
            .iter()
            .filter(|r| r["kind"] == "request" && r["session"] == json!(session))
            .collect();
        let want: Vec<&Call> = w.calls.iter().filter(|c| &c.session == session).collect();
        let got_summary: Vec<String> = got
            .iter()
            .map(|r| format!("{} {}", r["method"], r["target"]))
            .collect();
        assert_eq!(
            got.len(),
            want.len(),
            "{source}: session {session}: {} request records for {} requests: {got_summary:#?}",
            got.len(),
            want.len()
        );
        for (r, c) in got.iter().zip(&want) {
            let ctx = format!("{} {:?}", c.method, c.target);
            let mut check = |ok: bool, what: String| {
                if !ok {
                    problems.push(format!("{ctx}: {what}\n    record {r}"));
                }
            };
            check(r["method"] == c.method, format!("method {}", r["method"]));
            for (field, want) in [
                ("target", json!(c.target)),
                ("upstream", json!(c.upstream)),
                ("direction", json!("host_to_upstream")),
                ("outcome", json!(c.outcome)),
                ("error_code", json!(c.error_code)),
                ("principal", Value::Null),
            ] {
                check(
                    r[field] == want,
                    format!("{field} is {}, expected {want}", r[field]),
                );
            }
            for field in ["latency_us", "request_bytes", "response_bytes"] {
                check(
                    r[field].as_u64().is_some_and(|v| v > 0),
                    format!("{field} is {}, expected > 0", r[field]),
                );
            }
            let trace = r["trace_id"].as_str().unwrap_or_default();
            match &c.trace {
                Some(id) => check(
                    trace == id,
                    format!("trace_id is {trace}, expected the traceparent's {id}"),
                ),
                None => {
                    let hex = trace.len() == 32
                        && trace
                            .bytes()
                            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
                    check(hex, format!("trace_id {trace} is not 32 hex digits"));
                    check(
                        random_traces.insert(trace.to_owned()),
                        format!("trace_id {trace} reused"),
                    );
                }
            }
            match &c.args {
                Args::Absent => check(
                    r["args"].is_null(),
                    format!("args {}, expected none", r["args"]),
                ),
                Args::Full(v) => {
                    check(&r["args"] == v, format!("args {}, expected {v}", r["args"]))
                }
                Args::Digest(group) => {
                    let digest = r["args"]["digest"].as_str().unwrap_or_default();
                    let only = r["args"].as_object().is_some_and(|o| o.len() == 1);
                    check(
                        only && digest.starts_with("sha256:") && digest.len() == 7 + 64,
                        format!("args {}, expected a digest", r["args"]),
                    );
                    digests.entry(group).or_default().insert(digest.to_owned());
                }
                Args::Any => {}
            }
        }
    }
    // Equal arguments, equal digests; different arguments, different digests.
    let mut seen = HashMap::new();
    for (group, set) in &digests {
        if set.len() != 1 {
            problems.push(format!(
                "calls with equal arguments ({group}) have different digests: {set:?}"
            ));
        }
        for digest in set {
            if let Some(other) = seen.insert(digest.clone(), group) {
                problems.push(format!(
                    "different arguments ({group}, {other}) have the same digest {digest}"
                ));
            }
        }
    }
    if digests.len() != 15 {
        problems.push(format!("expected 15 digest groups: {digests:?}"));
    }
    // Nothing of the secret is stored, in any mode.
    for r in records.iter().filter(|r| r.to_string().contains(SECRET)) {
        problems.push(format!("a secret reached the log: {r}"));
    }
    assert!(
        problems.is_empty(),
        "{source}: {} problems:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// The lifecycle events of the run: daemon and upstreams started, both sessions opened, B closed.
pub(super) fn assert_events(records: &[Value], w: &Workload) {
    let has = |method: &str, upstream: Option<&str>, session: Option<&str>| {
        records.iter().any(|r| {
            r["kind"] == "event"
                && r["outcome"] == "info"
                && r["method"] == method
                && r["upstream"] == json!(upstream)
                && r["session"] == json!(session)
        })
    };
    let methods: Vec<String> = records
        .iter()
        .filter(|r| r["kind"] == "event")
        .map(|r| format!("{} {} {}", r["method"], r["upstream"], r["session"]))
        .collect();
    assert!(has("daemon.started", None, None), "{methods:#?}");
    for u in ["alpha", "beta", "gamma"] {
        assert!(has("upstream.started", Some(u), None), "{u}: {methods:#?}");
    }
    for s in &w.sessions {
        assert!(has("session.opened", None, Some(s)), "{s}: {methods:#?}");
    }
    assert!(
        has("session.closed", None, Some(&w.sessions[1])),
        "B: {methods:#?}"
    );
    assert!(
        !has("session.closed", None, Some(&w.sessions[0])),
        "A is still open: {methods:#?}"
    );
}
