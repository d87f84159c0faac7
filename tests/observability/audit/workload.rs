//! The workload: the calls an integration run sends through three upstreams, and what each one's
//! record must say.

use serde_json::{Value, json};

use super::SECRET;
use crate::common::Client;

/// How a call's arguments must appear in its record.
#[derive(Debug, Clone)]
pub(super) enum Args {
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
pub(super) struct Call {
    pub(super) session: String,
    pub(super) method: &'static str,
    pub(super) target: Option<String>,
    pub(super) upstream: Option<&'static str>,
    pub(super) outcome: &'static str,
    pub(super) error_code: Option<i64>,
    /// The trace id of the `traceparent` sent in `_meta`, if one was.
    pub(super) trace: Option<String>,
    pub(super) args: Args,
}

impl Call {
    pub(super) fn new(client: &Client, method: &'static str, target: Option<&str>) -> Self {
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

    pub(super) fn upstream(mut self, upstream: &'static str) -> Self {
        self.upstream = Some(upstream);
        self
    }

    pub(super) fn outcome(mut self, outcome: &'static str, code: Option<i64>) -> Self {
        self.outcome = outcome;
        self.error_code = code;
        self
    }

    pub(super) fn args(mut self, args: Args) -> Self {
        self.args = args;
        self
    }
}

/// A W3C traceparent and its trace id, distinct per `n`.
pub(super) fn traceparent(n: u32) -> (String, String) {
    let id = format!(
        "{:032x}",
        0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736_u128 + u128::from(n)
    );
    (format!("00-{id}-00f067aa0ba902b7-01"), id)
}

#[derive(Debug, Default)]
pub(super) struct Workload {
    /// Session A (stays open) and session B (closed at the end).
    pub(super) sessions: Vec<String>,
    pub(super) calls: Vec<Call>,
    pub(super) next_trace: u32,
}

impl Workload {
    /// Sends `method` with `params` (plus a traceparent in `_meta` if `traced`), checks the answer
    /// says what `call` expects, and remembers the call.
    pub(super) async fn send(
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

    pub(super) async fn tool(
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
pub(super) async fn run_workload(url: &str) -> Workload {
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
