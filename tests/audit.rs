//! The audit log, end to end, on the real daemon with real test upstreams:
//!
//! 1. every call of an integration run is recorded exactly once, with its fields (upstream, target,
//!    outcome, error code, latency, sizes, the host's trace id, arguments per the redaction policy of
//!    the upstream or tool, secrets masked), through the admin API and `mcpmux audit query`; the
//!    lifecycle events are there too;
//! 2. every filter returns exactly the records that match it;
//! 3. pages (admin cursors, CLI `--limit`/`--cursor`/`--all`) cover the log once, in order; CSV and
//!    table output print every record;
//! 4. `mcpmux audit verify` on the stopped store names the edited, missing, moved or truncated
//!    record, and an untouched store verifies (directly and through the admin API);
//! 5. `kill -9` under load: after a restart on the same store the chain verifies and every call that
//!    completed 100 ms before the kill is there;
//! 6. with the daemon stopped, `mcpmux audit query --state-dir` reads what the admin API served.

#![allow(clippy::unwrap_used)]

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, Instant, UNIX_EPOCH};

use common::{Client, Daemon, MCPMUX, alive, descendants, poll_until, test_upstream};
use serde_json::{Value, json};

/// The secret the workload sends in arguments; it must never reach the store.
const SECRET: &str = "hunter2-do-not-store";

/// `alpha`: the global redaction (digest); `beta`: none; `gamma`: full, but none for its `echo`.
fn three_upstreams() -> String {
    format!(
        "{}\n{}audit_redaction = \"none\"\n\n{}audit_redaction = \"full\"\naudit_redaction_tools = {{ echo = \"none\" }}\n",
        test_upstream("alpha", &[]),
        test_upstream("beta", &[]),
        test_upstream("gamma", &[]),
    )
}

// ---------------------------------------------------------------------------------------------
// What the workload sent, and what its record must say

/// How a call's arguments must appear in its record.
#[derive(Debug, Clone)]
enum Args {
    /// `args` is null (redaction `none`, or nothing to record).
    Absent,
    /// `{"digest": "sha256:…"}`; calls of the same group carry the same digest, other groups differ.
    Digest(&'static str),
    /// The arguments themselves, secrets masked.
    Full(Value),
    /// Not checked.
    Any,
}

#[derive(Debug, Clone)]
struct Call {
    session: String,
    method: &'static str,
    target: Option<String>,
    upstream: Option<&'static str>,
    outcome: &'static str,
    error_code: Option<i64>,
    /// The trace id of the `traceparent` sent in `_meta`, if one was.
    trace: Option<String>,
    args: Args,
}

impl Call {
    fn new(client: &Client, method: &'static str, target: Option<&str>) -> Self {
        Self {
            session: client.session.clone().unwrap(),
            method,
            target: target.map(str::to_owned),
            upstream: None,
            outcome: "ok",
            error_code: None,
            trace: None,
            args: Args::Absent,
        }
    }

    fn upstream(mut self, upstream: &'static str) -> Self {
        self.upstream = Some(upstream);
        self
    }

    fn outcome(mut self, outcome: &'static str, code: Option<i64>) -> Self {
        self.outcome = outcome;
        self.error_code = code;
        self
    }

    fn args(mut self, args: Args) -> Self {
        self.args = args;
        self
    }
}

/// A W3C traceparent and its trace id, distinct per `n`.
fn traceparent(n: u32) -> (String, String) {
    let id = format!(
        "{:032x}",
        0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736_u128 + u128::from(n)
    );
    (format!("00-{id}-00f067aa0ba902b7-01"), id)
}

#[derive(Debug, Default)]
struct Workload {
    /// Session A (stays open) and session B (closed at the end).
    sessions: Vec<String>,
    calls: Vec<Call>,
    next_trace: u32,
}

impl Workload {
    /// Sends `method` with `params` (plus a traceparent in `_meta` if `traced`), checks the answer
    /// says what `call` expects, and remembers the call.
    async fn send(
        &mut self,
        client: &Client,
        params: Value,
        traced: bool,
        mut call: Call,
    ) -> Value {
        let mut params = params;
        if traced {
            self.next_trace += 1;
            let (header, id) = traceparent(self.next_trace);
            params["_meta"] = json!({ "traceparent": header });
            call.trace = Some(id);
        }
        let answer = client.request(call.method, params).await;
        match call.outcome {
            "error" => {
                let code = answer["error"]["code"].as_i64();
                assert!(
                    code.is_some(),
                    "{}: expected an error: {answer}",
                    call.method
                );
                if call.error_code.is_none() {
                    call.error_code = code;
                }
                assert_eq!(code, call.error_code, "{answer}");
            }
            "tool_error" => assert_eq!(answer["result"]["isError"], true, "{answer}"),
            _ => assert!(
                answer["result"].is_object() && answer["result"]["isError"] != true,
                "{}: {answer}",
                call.method
            ),
        }
        self.calls.push(call);
        answer
    }

    async fn tool(
        &mut self,
        client: &Client,
        name: &str,
        arguments: Value,
        traced: bool,
        call: Call,
    ) -> Value {
        let call = Call {
            target: Some(name.to_owned()),
            ..call
        };
        self.send(
            client,
            json!({"name": name, "arguments": arguments}),
            traced,
            call,
        )
        .await
    }
}

/// Two sessions making 33 requests of every kind on three upstreams; session B is then closed.
async fn run_workload(url: &str) -> Workload {
    let a = Client::connect(url).await;
    let b = Client::connect(url).await;
    let mut w = Workload {
        sessions: vec![a.session.clone().unwrap(), b.session.clone().unwrap()],
        ..Workload::default()
    };
    let echo = |c: &Client| Call::new(c, "tools/call", None).upstream("alpha");

    // A listing, answered by mcpmux itself.
    let list = w
        .send(&a, json!({}), false, Call::new(&a, "tools/list", None))
        .await;
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["name"].as_str())
        .collect();
    for want in ["alpha__echo", "beta__fail", "gamma__echo", "gamma__slow"] {
        assert!(names.contains(&want), "{want} not listed: {names:?}");
    }

    // Distinct arguments (digest mode): ten calls, every other one traced.
    const GROUPS: [&str; 10] = ["n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7", "n8", "n9"];
    for (i, group) in GROUPS.iter().enumerate() {
        let call = echo(&a).args(Args::Digest(group));
        w.tool(&a, "alpha__echo", json!({"n": i}), i % 2 == 0, call)
            .await;
    }
    // Equal arguments again: equal digests.
    for i in [3, 5] {
        let call = echo(&a).args(Args::Digest(GROUPS[i]));
        w.tool(&a, "alpha__echo", json!({"n": i}), false, call)
            .await;
    }
    // Secrets are masked before the digest: only the secret differs, so the digests are equal.
    for secret in [SECRET, "another-secret-value"] {
        let call = echo(&a).args(Args::Digest("password"));
        w.tool(
            &a,
            "alpha__echo",
            json!({"user": "u", "password": secret}),
            false,
            call,
        )
        .await;
    }
    // Slow calls (for --min-latency-ms and the time filters), then a fast one.
    for _ in 0..2 {
        let call = echo(&a).args(Args::Digest("slow200"));
        w.tool(&a, "alpha__slow", json!({"ms": 200}), false, call)
            .await;
    }
    let call = echo(&a).args(Args::Digest("slow0"));
    w.tool(&a, "alpha__slow", json!({"ms": 0}), false, call)
        .await;

    // beta: redaction none.
    let beta = |c: &Client| Call::new(c, "tools/call", None).upstream("beta");
    let call = beta(&a).outcome("tool_error", None);
    w.tool(&a, "beta__fail", json!({}), true, call).await;
    w.tool(
        &a,
        "beta__echo",
        json!({"password": SECRET, "x": 1}),
        false,
        beta(&a),
    )
    .await;

    // An unknown tool: refused by mcpmux, never routed. Its target is what the host asked for.
    let call = Call::new(&a, "tools/call", None)
        .outcome("error", Some(-32602))
        .args(Args::Any);
    w.tool(&a, "alpha__no_such_tool", json!({"q": 1}), true, call)
        .await;

    // A prompt (digest mode), a resource, a resource the upstream does not have (its error code).
    let call = Call::new(&a, "prompts/get", Some("alpha__greet"))
        .upstream("alpha")
        .args(Args::Digest("greet-ada"));
    w.send(
        &a,
        json!({"name": "alpha__greet", "arguments": {"name": "Ada"}}),
        false,
        call,
    )
    .await;
    let uri = "alpha+test://alpha/hello";
    let call = Call::new(&a, "resources/read", Some(uri)).upstream("alpha");
    w.send(&a, json!({ "uri": uri }), true, call).await;
    let uri = "alpha+test://alpha/missing";
    let call = Call::new(&a, "resources/read", Some(uri))
        .upstream("alpha")
        .outcome("error", Some(-32002));
    w.send(&a, json!({ "uri": uri }), false, call).await;
    // A URI no upstream serves: refused by mcpmux. Its target is what the host asked for.
    let uri = "nosuch+test://nowhere/x";
    let call = Call::new(&a, "resources/read", Some(uri)).outcome("error", Some(-32002));
    w.send(&a, json!({ "uri": uri }), true, call).await;

    // gamma: full, but `none` for its tool `echo`.
    let gamma = |c: &Client| Call::new(c, "tools/call", None).upstream("gamma");
    w.tool(
        &a,
        "gamma__echo",
        json!({"password": SECRET, "k": "v"}),
        false,
        gamma(&a),
    )
    .await;
    let call = gamma(&a).args(Args::Full(
        json!({"ms": 0, "password": "***", "note": "kept", "nested": {"apiToken": "***", "n": 1}}),
    ));
    w.tool(
        &a,
        "gamma__slow",
        json!({"ms": 0, "password": SECRET, "note": "kept", "nested": {"apiToken": SECRET, "n": 1}}),
        true,
        call,
    )
    .await;
    let call = Call::new(&a, "prompts/get", Some("gamma__greet"))
        .upstream("gamma")
        .args(Args::Full(json!({"name": "Grace", "api_key": "***"})));
    w.send(
        &a,
        json!({"name": "gamma__greet", "arguments": {"name": "Grace", "api_key": SECRET}}),
        false,
        call,
    )
    .await;

    // Session B.
    let call = echo(&b).args(Args::Digest("n3"));
    w.tool(&b, "alpha__echo", json!({"n": 3}), false, call)
        .await;
    let call = beta(&b).outcome("tool_error", None);
    w.tool(&b, "beta__fail", json!({}), false, call).await;
    let call = Call::new(&b, "prompts/get", Some("beta__greet")).upstream("beta");
    w.send(
        &b,
        json!({"name": "beta__greet", "arguments": {"name": "Alan"}}),
        false,
        call,
    )
    .await;
    let uri = "beta+test://beta/hello";
    let call = Call::new(&b, "resources/read", Some(uri)).upstream("beta");
    w.send(&b, json!({ "uri": uri }), false, call).await;
    let call = echo(&b).args(Args::Digest("n100"));
    w.tool(&b, "alpha__echo", json!({"n": 100}), true, call)
        .await;
    assert_eq!(b.delete().await, 200, "DELETE of session B");
    assert_eq!(w.calls.len(), 33);
    w
}

// ---------------------------------------------------------------------------------------------
// Reading the log: admin API and CLI

/// One page of `GET /audit/query`.
async fn admin_page(admin: &str, query: &[(&str, String)]) -> Value {
    let response = reqwest::Client::new()
        .get(format!("{admin}/audit/query"))
        .query(query)
        .send()
        .await
        .unwrap();
    let status = response.status();
    let text = response.text().await.unwrap();
    assert!(
        status.is_success(),
        "audit/query {query:?}: {status} {text}"
    );
    serde_json::from_str(&text).unwrap()
}

/// Every record matching `query`, following `next_cursor`.
async fn admin_all(admin: &str, query: &[(&str, String)]) -> Vec<Value> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut q = query.to_vec();
        q.push(("limit", "10000".into()));
        if let Some(c) = &cursor {
            q.push(("cursor", c.clone()));
        }
        let page = admin_page(admin, &q).await;
        out.extend(page["records"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return out,
        }
    }
}

async fn admin_get(admin: &str, path: &str) -> Value {
    let text = reqwest::get(format!("{admin}{path}"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}: {text}"))
}

/// What one `mcpmux` command printed.
#[derive(Debug)]
struct Run {
    status: ExitStatus,
    stdout: String,
    stderr: String,
}

/// Runs `mcpmux ARGS` (no config, no MCPMUX_* variables) and waits for it (at most 30 s).
async fn mcpmux(args: &[&str]) -> Run {
    let mut command = tokio::process::Command::new(MCPMUX);
    command
        .args(args)
        .env_remove("MCPMUX_CONFIG")
        .env_remove("MCPMUX_ADMIN")
        .env_remove("MCPMUX_STATE_DIR")
        .current_dir(std::env::temp_dir())
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(30), command.output())
        .await
        .unwrap_or_else(|_| panic!("mcpmux {args:?} did not finish in 30 s"))
        .unwrap();
    Run {
        status: output.status,
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Runs a CLI command that must succeed; its stdout.
async fn mcpmux_ok(args: &[&str]) -> String {
    let run = mcpmux(args).await;
    assert!(run.status.success(), "mcpmux {args:?} failed: {run:?}");
    run.stdout
}

/// The records of `--format json` output (one per line).
fn json_lines(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// `mcpmux audit query --admin ADMIN --format json --all` with `filter` as flags.
async fn cli_all(admin: &str, filter: &[(&str, String)]) -> Vec<Value> {
    let flags: Vec<String> = filter
        .iter()
        .flat_map(|(k, v)| [format!("--{}", k.replace('_', "-")), v.clone()])
        .collect();
    let mut args = vec![
        "audit", "query", "--admin", admin, "--format", "json", "--all", "--limit", "1000",
    ];
    args.extend(flags.iter().map(String::as_str));
    json_lines(&mcpmux_ok(&args).await)
}

fn seqs(records: &[Value]) -> Vec<u64> {
    records.iter().map(|r| r["seq"].as_u64().unwrap()).collect()
}

fn rfc3339(ts_us: u64) -> String {
    humantime::format_rfc3339_micros(UNIX_EPOCH + Duration::from_micros(ts_us)).to_string()
}

fn now_us() -> u64 {
    u64::try_from(UNIX_EPOCH.elapsed().unwrap().as_micros()).unwrap()
}

fn ts(r: &Value) -> u64 {
    r["ts_us"].as_u64().unwrap()
}

// ---------------------------------------------------------------------------------------------
// Checks

/// The log starts at #0 and is consecutive, in time order, each record once.
fn assert_whole_log(all: &[Value]) {
    let seqs = seqs(all);
    let want: Vec<u64> = (0..all.len() as u64).collect();
    assert_eq!(seqs, want, "the log is not #0.. consecutive");
    assert!(
        all.windows(2).all(|w| ts(&w[0]) <= ts(&w[1])),
        "the log is not in time order"
    );
}

/// Every call of `w` is in `records` exactly once, in order per session, with its fields.
fn assert_calls(records: &[Value], w: &Workload, source: &str) {
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
fn assert_events(records: &[Value], w: &Workload) {
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

// ---------------------------------------------------------------------------------------------
// 1. Every call once, with its fields

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_is_recorded_once_with_its_fields() {
    let daemon = Daemon::start(&three_upstreams());
    let admin = daemon.admin_url.clone().expect("admin API");
    let w = run_workload(&daemon.url).await;

    let all = admin_all(&admin, &[]).await;
    let cli = cli_all(&admin, &[]).await;
    assert_eq!(cli, all, "the CLI's JSON differs from the admin API's");
    assert_whole_log(&all);
    assert_events(&all, &w);
    assert_calls(&all, &w, "admin API (and the CLI, identical)");
}

// ---------------------------------------------------------------------------------------------
// 2 and 3. Filters and pages

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn filters_and_pages_return_exactly_the_matching_records() {
    let daemon = Daemon::start(&three_upstreams());
    let admin = daemon.admin_url.clone().expect("admin API");
    let w = run_workload(&daemon.url).await;
    let all = admin_all(&admin, &[]).await;
    assert_whole_log(&all);
    let (a, b) = (w.sessions[0].clone(), w.sessions[1].clone());

    // Time bounds taken from records: a third and two thirds in.
    let (lo, hi) = (ts(&all[all.len() / 3]), ts(&all[2 * all.len() / 3]));
    type Pred = Box<dyn Fn(&Value) -> bool>;
    let s = |v: &str| v.to_owned();
    let cases: Vec<(Vec<(&str, String)>, Pred)> = vec![
        (
            vec![("upstream", s("alpha"))],
            Box::new(|r| r["upstream"] == "alpha"),
        ),
        (
            vec![("upstream", s("beta"))],
            Box::new(|r| r["upstream"] == "beta"),
        ),
        (
            vec![("tool", s("alpha__echo"))],
            Box::new(|r| r["target"] == "alpha__echo"),
        ),
        (
            vec![("tool", s("alpha+test://alpha/hello"))],
            Box::new(|r| r["target"] == "alpha+test://alpha/hello"),
        ),
        (
            vec![("method", s("prompts/get"))],
            Box::new(|r| r["method"] == "prompts/get"),
        ),
        (
            vec![("method", s("session.opened"))],
            Box::new(|r| r["method"] == "session.opened"),
        ),
        (
            vec![("session", a.clone())],
            Box::new({
                let a = a.clone();
                move |r| r["session"] == json!(a)
            }),
        ),
        (
            vec![("session", b.clone())],
            Box::new({
                let b = b.clone();
                move |r| r["session"] == json!(b)
            }),
        ),
        (
            vec![("outcome", s("ok"))],
            Box::new(|r| r["outcome"] == "ok"),
        ),
        (
            vec![("outcome", s("error"))],
            Box::new(|r| r["outcome"] == "error"),
        ),
        (
            vec![("outcome", s("tool_error"))],
            Box::new(|r| r["outcome"] == "tool_error"),
        ),
        (
            vec![("outcome", s("info"))],
            Box::new(|r| r["outcome"] == "info"),
        ),
        (
            vec![("min_latency_ms", s("200"))],
            Box::new(|r| r["latency_us"].as_u64().is_some_and(|l| l >= 200_000)),
        ),
        (vec![("since", s("1h"))], Box::new(|_| true)),
        (vec![("from", rfc3339(lo))], Box::new(move |r| ts(r) >= lo)),
        (vec![("to", rfc3339(hi))], Box::new(move |r| ts(r) < hi)),
        (
            vec![("from", rfc3339(lo)), ("to", rfc3339(hi))],
            Box::new(move |r| ts(r) >= lo && ts(r) < hi),
        ),
        (
            vec![
                ("upstream", s("alpha")),
                ("from", rfc3339(lo)),
                ("to", rfc3339(hi)),
            ],
            Box::new(move |r| r["upstream"] == "alpha" && ts(r) >= lo && ts(r) < hi),
        ),
        (
            vec![("session", a.clone()), ("outcome", s("error"))],
            Box::new({
                let a = a.clone();
                move |r| r["session"] == json!(a) && r["outcome"] == "error"
            }),
        ),
        (
            vec![
                ("tool", s("alpha__slow")),
                ("method", s("tools/call")),
                ("min_latency_ms", s("100")),
            ],
            Box::new(|r| {
                r["target"] == "alpha__slow"
                    && r["latency_us"].as_u64().is_some_and(|l| l >= 100_000)
            }),
        ),
        (
            vec![("upstream", s("beta")), ("session", b.clone())],
            Box::new({
                let b = b.clone();
                move |r| r["upstream"] == "beta" && r["session"] == json!(b)
            }),
        ),
    ];
    for (filter, pred) in &cases {
        let want: Vec<u64> = seqs(&all.iter().filter(|r| pred(r)).cloned().collect::<Vec<_>>());
        assert!(
            !want.is_empty(),
            "{filter:?} matches nothing: a useless case"
        );
        let admin_got = seqs(&admin_all(&admin, filter).await);
        assert_eq!(admin_got, want, "admin API, filter {filter:?}");
        let cli_got = seqs(&cli_all(&admin, filter).await);
        assert_eq!(cli_got, want, "CLI, filter {filter:?}");
    }
    // Exactly the two 200 ms calls are that slow.
    let slow = admin_all(&admin, &[("min_latency_ms", s("200"))]).await;
    assert_eq!(slow.len(), 2, "{slow:#?}");
    assert!(slow.iter().all(|r| r["target"] == "alpha__slow"));

    // --since with a span ending in the gap before the first 200 ms call ended: the log splits there.
    let first_slow = all.iter().position(|r| r["seq"] == slow[0]["seq"]).unwrap();
    let boundary = ts(&all[first_slow - 1]) + 10_000;
    assert!(
        ts(&all[first_slow]) >= boundary + 150_000,
        "no gap to split at"
    );
    let want = seqs(&all[first_slow..]);
    let since = || format!("{}ms", (now_us() - boundary) / 1000);
    let since_admin = vec![("since", since())];
    assert_eq!(
        seqs(&admin_all(&admin, &since_admin).await),
        want,
        "admin API, {since_admin:?}"
    );
    let since_cli = vec![("since", since())];
    assert_eq!(
        seqs(&cli_all(&admin, &since_cli).await),
        want,
        "CLI, {since_cli:?}"
    );
    // A bad filter is refused with a message.
    let run = mcpmux(&["audit", "query", "--admin", &admin, "--outcome", "nope"]).await;
    assert!(!run.status.success(), "{run:?}");
    assert!(run.stderr.contains("unknown outcome"), "{run:?}");

    // 3. Pages of 7 through the admin API: every record once, in order.
    let mut paged = Vec::new();
    let mut cursor: Option<String> = None;
    let mut pages = 0;
    loop {
        let mut q = vec![("limit", s("7"))];
        if let Some(c) = &cursor {
            q.push(("cursor", c.clone()));
        }
        let page = admin_page(&admin, &q).await;
        let records = page["records"].as_array().unwrap();
        assert!(
            records.len() <= 7 && !records.is_empty(),
            "page {pages}: {page}"
        );
        paged.extend(records.iter().cloned());
        pages += 1;
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(pages, all.len().div_ceil(7));
    assert_eq!(seqs(&paged), seqs(&all), "pages of 7");
    assert_eq!(paged, all);
    // Pages of an index-driven filter.
    let mut paged = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut q = vec![("limit", s("3")), ("upstream", s("alpha"))];
        if let Some(c) = &cursor {
            q.push(("cursor", c.clone()));
        }
        let page = admin_page(&admin, &q).await;
        paged.extend(page["records"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    let alpha: Vec<Value> = all
        .iter()
        .filter(|r| r["upstream"] == "alpha")
        .cloned()
        .collect();
    assert_eq!(seqs(&paged), seqs(&alpha), "pages of 3 of upstream alpha");
    // A forged cursor is refused.
    let response = reqwest::get(format!("{admin}/audit/query?cursor=garbage!"))
        .await
        .unwrap();
    assert_eq!(response.status(), 400);

    // The CLI: --limit 7 --all (JSON), one page, pages followed by hand (table), CSV.
    let base = ["audit", "query", "--admin", &admin, "--limit", "7"];
    let cli_paged =
        json_lines(&mcpmux_ok(&[&base[..], &["--format", "json", "--all"]].concat()).await);
    assert_eq!(cli_paged, all, "CLI --limit 7 --all");
    let one = json_lines(&mcpmux_ok(&[&base[..], &["--format", "json"]].concat()).await);
    assert_eq!(seqs(&one), seqs(&all[..7]), "CLI --limit 7");

    let mut table_seqs = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..=all.len() {
        let mut args = base.to_vec();
        if let Some(c) = &cursor {
            args.extend(["--cursor", c.as_str()]);
        }
        let out = mcpmux_ok(&args).await;
        let mut lines = out.lines();
        let header = lines.next().unwrap();
        assert!(
            header.starts_with("TIME") && header.contains("SEQ") && header.contains("OUTCOME"),
            "{out}"
        );
        cursor = None;
        for line in lines {
            if let Some(c) = line.strip_prefix("(more: --cursor ") {
                cursor = Some(c.trim_end_matches(')').to_owned());
            } else {
                let seq = line.split_whitespace().nth(1).unwrap();
                table_seqs.push(seq.parse::<u64>().unwrap_or_else(|_| panic!("{line}")));
            }
        }
        if cursor.is_none() {
            break;
        }
    }
    assert_eq!(table_seqs, seqs(&all), "table pages");

    let out = mcpmux_ok(&[&base[..], &["--format", "csv", "--all"]].concat()).await;
    let rows = parse_csv(&out);
    assert_eq!(
        rows[0],
        [
            "time",
            "seq",
            "session",
            "upstream",
            "method",
            "target",
            "outcome",
            "code",
            "latency_ms",
            "args"
        ]
    );
    assert_eq!(
        rows.len(),
        all.len() + 1,
        "CSV: header + one row per record"
    );
    for (row, r) in rows[1..].iter().zip(&all) {
        assert_eq!(row.len(), 10, "{row:?}");
        assert_eq!(row[1], r["seq"].to_string(), "{row:?}");
        assert_eq!(row[4], r["method"].as_str().unwrap(), "{row:?}");
        assert_eq!(row[6], r["outcome"].as_str().unwrap(), "{row:?}");
        assert_eq!(
            row[7],
            r["error_code"]
                .as_i64()
                .map(|c| c.to_string())
                .unwrap_or_default()
        );
        if r["args"].is_object() {
            let args: Value = serde_json::from_str(&row[9]).unwrap();
            assert_eq!(args, r["args"], "{row:?}");
        }
    }
}

/// Rows of CSV text (quoted fields with doubled quotes; no field spans lines here).
fn parse_csv(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .map(|line| {
            let mut fields = Vec::new();
            let mut field = String::new();
            let mut quoted = false;
            let mut chars = line.chars().peekable();
            while let Some(c) = chars.next() {
                match (c, quoted) {
                    ('"', true) if chars.peek() == Some(&'"') => {
                        field.push('"');
                        chars.next();
                    }
                    ('"', true) => quoted = false,
                    ('"', false) if field.is_empty() => quoted = true,
                    (',', false) => fields.push(std::mem::take(&mut field)),
                    (c, _) => field.push(c),
                }
            }
            assert!(!quoted, "unterminated quote: {line}");
            fields.push(field);
            fields
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// 4 and 6. The stopped store: read directly, verified, tampered with

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// A copy of the state directory `state` at `root/name`, its records edited by `edit`. The store
/// keeps records in blocks: the `blocks` tree maps a block's key to where its bytes are (20 bytes:
/// segment id, offset, length, big-endian), the bytes being the records as JSON lines in
/// `segments/<id, 20 digits>.log`. `edit` gets every record in order and may change, remove or
/// reorder them; the blocks are written back with as many records each as before, into one new
/// segment, and re-pointed (an emptied block is removed).
fn tampered(state: &Path, root: &Path, name: &str, edit: impl FnOnce(&mut Vec<Value>)) -> PathBuf {
    let dir = root.join(name);
    let audit = dir.join("audit");
    copy_dir(&state.join("audit"), &audit);
    let segment = |id: u64| audit.join("segments").join(format!("{id:020}.log"));
    let db = sled::open(&audit).unwrap();
    let blocks = db.open_tree("blocks").unwrap();
    let mut layout = Vec::new();
    let mut all = Vec::new();
    for entry in blocks.iter() {
        let (key, at) = entry.unwrap();
        let id = u64::from_be_bytes(at[..8].try_into().unwrap());
        let offset = u64::from_be_bytes(at[8..16].try_into().unwrap()) as usize;
        let len = u32::from_be_bytes(at[16..20].try_into().unwrap()) as usize;
        let bytes = std::fs::read(segment(id)).unwrap();
        let records: Vec<Value> =
            serde_json::Deserializer::from_slice(&bytes[offset..offset + len])
                .into_iter()
                .map(Result::unwrap)
                .collect();
        layout.push((key, records.len()));
        all.extend(records);
    }
    edit(&mut all);
    std::fs::remove_dir_all(audit.join("segments")).unwrap();
    std::fs::create_dir(audit.join("segments")).unwrap();
    let mut rest = all.into_iter();
    let mut written = Vec::new();
    for (key, len) in layout {
        let records: Vec<Value> = rest.by_ref().take(len).collect();
        if records.is_empty() {
            blocks.remove(key).unwrap();
            continue;
        }
        let offset = written.len() as u64;
        for r in &records {
            serde_json::to_writer(&mut written, r).unwrap();
            written.push(b'\n');
        }
        let len = (written.len() as u64 - offset) as u32;
        let at = [
            &0u64.to_be_bytes()[..],
            &offset.to_be_bytes(),
            &len.to_be_bytes(),
        ]
        .concat();
        blocks.insert(key, at).unwrap();
    }
    std::fs::write(segment(0), written).unwrap();
    db.flush().unwrap();
    drop(blocks);
    drop(db);
    dir
}

/// The position of record `seq` in the ordered list.
fn position(records: &[Value], seq: u64) -> usize {
    records.iter().position(|r| r["seq"] == seq).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_store_reads_the_same_and_tampering_is_detected() {
    let mut daemon = Daemon::start(&three_upstreams());
    let admin = daemon.admin_url.clone().expect("admin API");
    let state = daemon.dir.path().join("state");
    let state_arg = state.to_str().unwrap().to_owned();
    let w = run_workload(&daemon.url).await;
    let served = admin_all(&admin, &[]).await;
    assert_whole_log(&served);

    // An untouched store verifies, through the running daemon.
    let verified = admin_get(&admin, "/audit/verify").await;
    assert_eq!(verified["ok"], true, "{verified}");
    assert!(verified["first_break"].is_null(), "{verified}");
    assert!(
        verified["checked"].as_u64().unwrap() >= served.len() as u64,
        "{verified}"
    );
    let out = mcpmux_ok(&["audit", "verify", "--admin", &admin]).await;
    assert!(out.starts_with("ok: "), "{out}");
    // While the daemon has it open, the store itself cannot be opened: a clear error, not a hang.
    let run = mcpmux(&["audit", "verify", "--state-dir", &state_arg]).await;
    assert!(!run.status.success(), "{run:?}");
    assert!(
        run.stderr.contains("cannot open the audit store"),
        "{run:?}"
    );

    daemon.terminate();
    let status = daemon.wait_exit(Duration::from_secs(20)).await;
    assert!(status.is_some_and(|s| s.success()), "{status:?}");

    // 6. The stopped store lists what the admin API served, then the shutdown's records.
    let direct = json_lines(
        &mcpmux_ok(&[
            "audit",
            "query",
            "--state-dir",
            &state_arg,
            "--format",
            "json",
            "--all",
        ])
        .await,
    );
    assert_whole_log(&direct);
    assert!(direct.len() > served.len());
    assert_eq!(direct[..served.len()], served[..], "direct ≠ admin API");
    let after: Vec<String> = direct[served.len()..]
        .iter()
        .map(|r| format!("{} {}", r["kind"], r["method"]))
        .collect();
    assert!(
        direct[served.len()..].iter().all(|r| r["kind"] == "event"),
        "only shutdown events come after: {after:?}"
    );
    assert_eq!(
        direct.last().unwrap()["method"],
        "daemon.stopped",
        "{after:?}"
    );
    assert!(
        w.sessions.iter().all(|s| direct
            .iter()
            .any(|r| r["method"] == "session.closed" && r["session"] == json!(s))),
        "every session is closed at shutdown: {after:?}"
    );
    // A filter on the store directly.
    let direct_alpha = json_lines(
        &mcpmux_ok(&[
            "audit",
            "query",
            "--state-dir",
            &state_arg,
            "--format",
            "json",
            "--all",
            "--limit",
            "5",
            "--upstream",
            "alpha",
        ])
        .await,
    );
    let want: Vec<Value> = direct
        .iter()
        .filter(|r| r["upstream"] == "alpha")
        .cloned()
        .collect();
    assert_eq!(direct_alpha, want, "direct --upstream alpha");

    // 4. The untouched store verifies directly.
    let out = mcpmux_ok(&["audit", "verify", "--state-dir", &state_arg]).await;
    assert!(
        out.starts_with(&format!("ok: {} records verified", direct.len())),
        "{out}"
    );

    let copies = tempfile::tempdir().unwrap();
    let last = direct.len() as u64 - 1;
    let mid = last / 2;
    let cases: Vec<(&str, PathBuf, u64, &str)> = vec![
        (
            "edited",
            tampered(&state, copies.path(), "edited", |records| {
                let at = position(records, mid);
                let other = if records[at]["method"] == "tools/list" {
                    "ping"
                } else {
                    "tools/list"
                };
                records[at]["method"] = json!(other);
            }),
            mid,
            "edited",
        ),
        (
            "deleted",
            tampered(&state, copies.path(), "deleted", |records| {
                records.remove(position(records, mid));
            }),
            mid,
            "missing",
        ),
        (
            "swapped",
            tampered(&state, copies.path(), "swapped", |records| {
                let at = position(records, mid);
                records.swap(at, at + 1);
            }),
            mid,
            "moved",
        ),
        (
            "truncated",
            tampered(&state, copies.path(), "truncated", |records| {
                assert_eq!(records.last().unwrap()["seq"], last);
                records.pop();
            }),
            last,
            "removed from the end",
        ),
        (
            "segments removed",
            tampered(&state, copies.path(), "segments removed", |_| {}),
            0,
            "not readable",
        ),
    ];
    // The record bytes themselves gone: the store still opens, and verify names the first loss.
    std::fs::remove_dir_all(copies.path().join("segments removed/audit/segments")).unwrap();
    let untouched = copies.path().join("untouched");
    copy_dir(&state.join("audit"), &untouched.join("audit"));
    let out = mcpmux_ok(&[
        "audit",
        "verify",
        "--state-dir",
        untouched.to_str().unwrap(),
    ])
    .await;
    assert!(out.starts_with("ok: "), "untouched copy: {out}");
    for (name, dir, seq, problem) in cases {
        let run = mcpmux(&["audit", "verify", "--state-dir", dir.to_str().unwrap()]).await;
        assert!(!run.status.success(), "{name}: verify passed: {run:?}");
        let line = run.stdout.trim();
        assert!(
            line.starts_with(&format!("BROKEN at record #{seq}:")) && line.contains(problem),
            "{name}: expected record #{seq} ({problem}), got: {run:?}"
        );
        eprintln!("tampering {name}: {line}");
    }
}

// ---------------------------------------------------------------------------------------------
// 5. kill -9 under load

/// One `tools/call` over a plain HTTP client: the result, or `None` if the daemon did not answer.
async fn echo_call(http: &reqwest::Client, client: &Client, id: u64, i: u64) -> Option<Value> {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                      "params": {"name": "alpha__echo", "arguments": {"i": i}}});
    let response = http
        .post(&client.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", &client.version)
        .header("mcp-session-id", client.session.as_deref().unwrap())
        .body(body.to_string())
        .send()
        .await
        .ok()?;
    if !response.status().is_success() {
        return None;
    }
    let text = response.text().await.ok()?;
    let data = text
        .lines()
        .find_map(|l| l.strip_prefix("data:"))
        .unwrap_or(&text);
    let answer: Value = serde_json::from_str(data.trim()).ok()?;
    answer.get("result").cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_under_load_loses_only_the_last_moments() {
    let config = format!(
        "{}audit_redaction = \"full\"\n",
        test_upstream("alpha", &[])
    );
    let mut daemon = Daemon::start(&config);
    let state = daemon.dir.path().join("state");
    let client = Client::connect(&daemon.url).await;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    assert!(
        echo_call(&http, &client, 1, 0).await.is_some(),
        "first call"
    );
    let pid = daemon.pid();
    let children = descendants(pid);
    assert!(!children.is_empty(), "no upstream process");

    // Sequential calls; the kill lands 2 s in, while they go on.
    let started = Instant::now();
    let killer = tokio::spawn(async move {
        tokio::time::sleep_until((started + Duration::from_secs(2)).into()).await;
        let at = Instant::now();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap()),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        at
    });
    let mut completed: Vec<(u64, Instant)> = Vec::new();
    let mut i = 1;
    loop {
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "calls still answered 15 s in"
        );
        match echo_call(&http, &client, i + 1, i).await {
            Some(result) => {
                assert_eq!(result["structuredContent"]["params"]["arguments"]["i"], i);
                completed.push((i, Instant::now()));
                i += 1;
            }
            None => break,
        }
    }
    let killed_at = killer.await.unwrap();
    let status = daemon.wait_exit(Duration::from_secs(10)).await;
    assert!(status.is_some_and(|s| !s.success()), "{status:?}");
    // The upstreams see their stdin close and exit; any left over is ended by its pid.
    if !poll_until(Duration::from_secs(10), || async {
        children.iter().all(|p| !alive(*p))
    })
    .await
    {
        for p in children.iter().filter(|p| alive(**p)) {
            let pid = nix::unistd::Pid::from_raw(i32::try_from(*p).unwrap());
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        }
        panic!("upstream processes outlived the killed daemon by 10 s");
    }
    let calls_before_kill = completed.iter().filter(|(_, t)| *t <= killed_at).count();
    assert!(
        calls_before_kill >= 50,
        "too few calls before the kill: {calls_before_kill}"
    );

    // A new daemon on the same store.
    let state_arg = state.to_str().unwrap().to_owned();
    let restarted = Daemon::start_with(
        &format!("[server]\nlisten = \"127.0.0.1:0\"\n\n{config}"),
        &["--state-dir", &state_arg],
    );
    let admin = restarted.admin_url.clone().expect("admin API");
    let verified = admin_get(&admin, "/audit/verify").await;
    assert_eq!(verified["ok"], true, "after kill -9: {verified}");
    let out = mcpmux_ok(&["audit", "verify", "--admin", &admin]).await;
    assert!(out.starts_with("ok: "), "{out}");

    let all = admin_all(&admin, &[]).await;
    assert_whole_log(&all);
    let mut recorded: HashMap<u64, usize> = HashMap::new();
    for r in all.iter().filter(|r| r["target"] == "alpha__echo") {
        assert_eq!(r["outcome"], "ok", "{r}");
        *recorded
            .entry(r["args"]["i"].as_u64().unwrap())
            .or_default() += 1;
    }
    assert!(recorded.values().all(|n| *n == 1), "a call recorded twice");
    // Offsets from the kill, in ms (negative: completed before it).
    let offset = |t: Instant| {
        if t >= killed_at {
            t.duration_since(killed_at).as_secs_f64() * 1000.0
        } else {
            -(killed_at.duration_since(t).as_secs_f64() * 1000.0)
        }
    };
    let missing: Vec<(u64, f64)> = completed
        .iter()
        .filter(|(i, _)| !recorded.contains_key(i))
        .map(|(i, t)| (*i, offset(*t)))
        .collect();
    let last_recorded = completed
        .iter()
        .rev()
        .find(|(i, _)| recorded.contains_key(i))
        .map(|(i, t)| format!("#{i} at {:+.1} ms", offset(*t)));
    let in_flight = i;
    eprintln!(
        "kill -9: {} calls completed ({calls_before_kill} before the kill, {:.0} ms into the \
         load); after restart {} of them are missing: {:?} (call, completion in ms relative \
         to the kill); last recorded: {}; the call in flight (#{in_flight}) was {}recorded; \
         chain verified: {} records",
        completed.len(),
        killed_at.duration_since(started).as_secs_f64() * 1000.0,
        missing.len(),
        missing
            .iter()
            .map(|(i, ms)| format!("#{i} {ms:+.1}"))
            .collect::<Vec<_>>(),
        last_recorded.unwrap_or_default(),
        if recorded.contains_key(&in_flight) {
            ""
        } else {
            "not "
        },
        verified["checked"],
    );
    for (i, ms) in &missing {
        assert!(
            *ms > -100.0,
            "call #{i} completed {ms:.1} ms before the kill but is not in the log"
        );
    }
    // Every call in the log was answered or in flight: nothing is invented.
    assert!(
        recorded.keys().all(|i| *i <= in_flight),
        "records of calls never made"
    );
    // The restarted daemon continues the chain: its daemon.started comes after the old records.
    let restart = all
        .iter()
        .rposition(|r| r["method"] == "daemon.started")
        .unwrap();
    assert!(restart > 0, "the restarted daemon's record is first");
    assert!(
        all[..restart]
            .iter()
            .all(|r| r["method"] != "daemon.stopped"),
        "a killed daemon recorded daemon.stopped"
    );
    drop(restarted);
    drop(daemon);
}
