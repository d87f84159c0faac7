//! The 2026-07-28 era on the same endpoint: stateless requests (no `initialize`, no session,
//! the `_meta` envelope and mirrored headers on each) served beside a handshake-era session, on
//! the real daemon with two test upstreams; every answer checked against the 2026-07-28 schema.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{Client, Daemon, Schemas, SseReader, read_messages, sha256_hex, test_upstream};

const MODERN: &str = "2026-07-28";

/// A host of the stateless revision: raw POSTs, each with its envelope and headers.
pub(crate) struct ModernHost {
    http: reqwest::Client,
    url: String,
    schemas: Arc<Schemas>,
    /// What its envelope declares in `clientCapabilities`.
    capabilities: Value,
    /// Its bearer token, with `[hosts]`.
    token: Option<String>,
}

/// One answer: its HTTP status, content type, whether a session id came with it, its messages.
pub(crate) struct Answer {
    pub(crate) status: u16,
    content_type: String,
    session_issued: bool,
    pub(crate) messages: Vec<Value>,
}

impl Answer {
    /// The final message (the response).
    pub(crate) fn last(&self) -> &Value {
        self.messages.last().expect("an answer")
    }
}

fn envelope() -> Value {
    json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "mcpmux-tests", "version": "0"},
    })
}

impl ModernHost {
    fn new(url: &str) -> Self {
        Self {
            http: reqwest::Client::new(),
            url: url.to_owned(),
            schemas: Schemas::get(MODERN),
            capabilities: json!({}),
            token: None,
        }
    }

    /// The host whose token is `token`, declaring `capabilities`.
    pub(crate) fn as_host(url: &str, token: &str, capabilities: Value) -> Self {
        Self {
            capabilities,
            token: Some(token.to_owned()),
            ..Self::new(url)
        }
    }

    /// `method` with `params` plus the envelope, and the headers a conforming client sends.
    pub(crate) async fn request(&self, id: u64, method: &str, params: Value) -> Answer {
        let mut params = params;
        let meta = params["_meta"].as_object().cloned().unwrap_or_default();
        let mut full = envelope();
        full["io.modelcontextprotocol/clientCapabilities"] = self.capabilities.clone();
        full.as_object_mut().unwrap().extend(meta);
        params["_meta"] = full;
        let name = params
            .get("name")
            .or_else(|| params.get("uri"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let mut headers = vec![("mcp-protocol-version", MODERN.to_owned())];
        headers.push(("mcp-method", method.to_owned()));
        if let Some(name) = name.filter(|_| method != "completion/complete") {
            headers.push(("mcp-name", name));
        }
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let answer = self.post(&body, &headers).await;
        for message in &answer.messages {
            self.schemas.check_message(message, Some(method));
        }
        answer
    }

    /// A raw POST with exactly `headers` (besides content type and accept).
    async fn post(&self, body: &Value, headers: &[(&str, String)]) -> Answer {
        let mut request = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .body(body.to_string());
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.unwrap();
        let status = response.status().as_u16();
        let content_type = response
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default();
        let session_issued = response.headers().contains_key("mcp-session-id");
        Answer {
            status,
            content_type,
            session_issued,
            messages: read_messages(response).await,
        }
    }
}

async fn start() -> Daemon {
    let daemon = Daemon::start(&format!(
        "{}{}",
        test_upstream("alpha", &["--protocol-tools"]),
        test_upstream("beta", &[])
    ));
    let client = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&client, |names| {
            names.iter().any(|n| n == "alpha__echo") && names.iter().any(|n| n == "beta__echo")
        })
        .await;
    daemon
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_host_is_served_statelessly_beside_a_handshake_session() {
    let daemon = start().await;
    let host = ModernHost::new(&daemon.url);
    let legacy = Client::connect(&daemon.url).await;

    // Discovery: every revision mcpmux serves, whatever its upstreams speak.
    let discover = host.request(1, "server/discover", json!({})).await;
    assert_eq!(discover.status, 200);
    assert!(
        !discover.session_issued,
        "a stateless answer mints no session"
    );
    let result = &discover.last()["result"];
    assert_eq!(result["resultType"], "complete");
    assert_eq!(result["supportedVersions"][0], MODERN);
    assert!(
        result["supportedVersions"]
            .as_array()
            .unwrap()
            .contains(&json!("2025-11-25"))
    );
    assert_eq!(
        result["capabilities"]["tools"],
        json!({"listChanged": true}),
        "{result}"
    );
    assert!(result["capabilities"].get("tasks").is_none());
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "mcpmux"
    );
    assert_eq!(
        (&result["ttlMs"], &result["cacheScope"]),
        (&json!(0), &json!("public"))
    );

    // The merged catalog, as the revision writes a listing.
    let tools = host.request(2, "tools/list", json!({})).await;
    let result = &tools.last()["result"];
    assert_eq!(result["resultType"], "complete");
    assert_eq!(result["cacheScope"], "public");
    let names: Vec<&str> = result["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"alpha__echo") && names.contains(&"beta__echo"),
        "{names:?}"
    );

    // A call routed by name: the upstream sees its own name and no host envelope.
    let call = host
        .request(
            3,
            "tools/call",
            json!({"name": "beta__echo", "arguments": {"text": "hi"}}),
        )
        .await;
    assert_eq!(call.status, 200);
    let result = &call.last()["result"];
    assert_eq!(result["resultType"], "complete");
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"],
        "mcpmux"
    );
    let seen = &result["structuredContent"];
    assert_eq!(seen["upstream"], "beta");
    assert_eq!(seen["params"]["name"], "echo");
    assert_eq!(seen["params"]["arguments"], json!({"text": "hi"}));
    assert!(
        seen["params"].get("_meta").is_none(),
        "the host's envelope is its hop's, not the upstream's: {seen}"
    );
    // A trace context beside the envelope continues to the upstream (no collector: unchanged).
    let traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let traced = host
        .request(
            31,
            "tools/call",
            json!({"name": "beta__echo", "arguments": {}, "_meta": {"traceparent": traceparent}}),
        )
        .await;
    let seen = &traced.last()["result"]["structuredContent"]["params"]["_meta"];
    assert_eq!(seen, &json!({"traceparent": traceparent}), "{seen}");

    // Progress goes on the request's own stream, under the host's token.
    let progress = host
        .request(
            4,
            "tools/call",
            json!({"name": "alpha__progress", "arguments": {"steps": 3},
                   "_meta": {"progressToken": "p-1"}}),
        )
        .await;
    assert!(
        progress.content_type.starts_with("text/event-stream"),
        "{}",
        progress.content_type
    );
    let notes: Vec<&Value> = progress
        .messages
        .iter()
        .filter(|m| m["method"] == "notifications/progress")
        .collect();
    assert_eq!(notes.len(), 3, "{:?}", progress.messages);
    assert!(notes.iter().all(|n| n["params"]["progressToken"] == "p-1"));
    assert_eq!(progress.last()["result"]["resultType"], "complete");

    // Prompts, resources, templates: a read is private to who asked.
    let prompt = host
        .request(
            5,
            "prompts/get",
            json!({"name": "alpha__greet", "arguments": {"name": "Ada"}}),
        )
        .await;
    assert_eq!(prompt.last()["result"]["resultType"], "complete");
    let read = host
        .request(
            6,
            "resources/read",
            json!({"uri": "alpha+test://alpha/hello"}),
        )
        .await;
    let result = &read.last()["result"];
    assert_eq!(result["contents"][0]["uri"], "alpha+test://alpha/hello");
    assert_eq!(
        (&result["ttlMs"], &result["cacheScope"]),
        (&json!(0), &json!("private"))
    );
    let templates = host.request(7, "resources/templates/list", json!({})).await;
    assert_eq!(templates.last()["result"]["cacheScope"], "public");
    let missing = host
        .request(
            8,
            "resources/read",
            json!({"uri": "alpha+test://alpha/nothing-here"}),
        )
        .await;
    let missing = &missing.last()["error"];
    assert_eq!(
        missing["code"], -32602,
        "resource not found is invalid params now: {missing}"
    );

    // The handshake session beside it is untouched.
    let echoed = legacy
        .result(
            "tools/call",
            json!({"name": "alpha__echo", "arguments": {"n": 1}}),
        )
        .await;
    assert_eq!(echoed["structuredContent"]["upstream"], "alpha");
    assert!(
        echoed.get("resultType").is_none(),
        "a 2025-11-25 result is as before"
    );

    // The audit log tells the eras apart.
    let both = crate::common::poll_until(Duration::from_secs(20), || async {
        let audit = daemon.audit_json();
        audit.contains(r#""protocol":"2026-07-28""#) && audit.contains(r#""protocol":"2025-11-25""#)
    })
    .await;
    assert!(both, "{}", daemon.audit_json());
    // A stateless request belongs to no session, and its record names none; a session's does.
    let audit = daemon.audit_json();
    let records: Vec<Value> = (audit.lines())
        .filter_map(|line| serde_json::from_str(line).ok())
        .filter(|r: &Value| r["kind"] == "request")
        .collect();
    for record in &records {
        let stateless = record["protocol"] == "2026-07-28";
        assert_eq!(record.get("session").is_none(), stateless, "{record}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stateless_requests_are_checked_in_the_revisions_order() {
    let daemon = start().await;
    let host = ModernHost::new(&daemon.url);
    let modern = || ("mcp-protocol-version", MODERN.to_owned());
    let method = |m: &str| ("mcp-method", m.to_owned());
    let call = |meta: Value| {
        json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
               "params": {"name": "alpha__echo", "arguments": {}, "_meta": meta}})
    };
    let named = || ("mcp-name", "alpha__echo".to_owned());
    let error_of = |answer: &Answer| answer.last()["error"].clone();

    // The envelope's required fields first: -32602, HTTP 400.
    let no_caps = call(json!({"io.modelcontextprotocol/protocolVersion": MODERN}));
    let answer = host
        .post(&no_caps, &[modern(), method("tools/call"), named()])
        .await;
    assert_eq!(
        (answer.status, error_of(&answer)["code"].clone()),
        (400, json!(-32602))
    );
    assert_eq!(
        answer.last()["id"],
        7,
        "the refusal answers the request's id"
    );

    // Then the headers that mirror the body: -32020.
    let full = call(envelope());
    let answer = host.post(&full, &[modern(), method("tools/call")]).await;
    assert_eq!(
        (answer.status, error_of(&answer)["code"].clone()),
        (400, json!(-32020))
    );
    let wrong = ("mcp-name", "beta__echo".to_owned());
    let answer = host
        .post(&full, &[modern(), method("tools/call"), wrong])
        .await;
    assert_eq!(error_of(&answer)["code"], -32020);
    let answer = host
        .post(&full, &[modern(), method("tools/list"), named()])
        .await;
    assert_eq!(error_of(&answer)["code"], -32020);
    let mut future = envelope();
    future["io.modelcontextprotocol/protocolVersion"] = json!("v999.0.0");
    let answer = host
        .post(
            &call(future.clone()),
            &[modern(), method("tools/call"), named()],
        )
        .await;
    assert_eq!(
        error_of(&answer)["code"],
        -32020,
        "header and body disagree"
    );

    // Then the version: -32022, naming what is served.
    let v999 = ("mcp-protocol-version", "v999.0.0".to_owned());
    let answer = host
        .post(&call(future), &[v999, method("tools/call"), named()])
        .await;
    assert_eq!(answer.status, 400);
    let error = error_of(&answer);
    assert_eq!(error["code"], -32022);
    assert_eq!(error["data"]["requested"], "v999.0.0");
    assert_eq!(error["data"]["supported"][0], MODERN);

    // What the revision does not have is "method not found", HTTP 404.
    for gone in [
        "ping",
        "logging/setLevel",
        "resources/subscribe",
        "initialize",
        "no/such",
    ] {
        let body =
            json!({"jsonrpc": "2.0", "id": 9, "method": gone, "params": {"_meta": envelope()}});
        let answer = host.post(&body, &[modern(), method(gone)]).await;
        assert_eq!(answer.status, 404, "{gone}");
        assert_eq!(error_of(&answer)["code"], -32601, "{gone}");
    }

    // No session stream in this revision.
    let get = reqwest::Client::new()
        .get(&daemon.url)
        .header("accept", "text/event-stream")
        .header("mcp-protocol-version", MODERN)
        .send()
        .await
        .unwrap();
    assert_eq!(get.status(), 405);

    // An unknown version on a handshake request is refused the same way.
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                      "params": {"protocolVersion": "2025-11-25", "capabilities": {}}});
    let answer = host
        .post(&init, &[("mcp-protocol-version", "1999-01-01".to_owned())])
        .await;
    assert_eq!(answer.status, 400);
}

/// A `tools/call` round: the answer's result, which must be `input_required` with one request
/// of `method`; returns (its key, its params, the state to send back).
fn asked(answer: &Answer, method: &str) -> (String, Value, String) {
    let result = &answer.last()["result"];
    assert_eq!(result["resultType"], "input_required", "{result}");
    assert!(
        result.get("ttlMs").is_none(),
        "an interim result is not cacheable: {result}"
    );
    let requests = result["inputRequests"].as_object().unwrap();
    assert_eq!(requests.len(), 1, "{result}");
    let (key, request) = requests.iter().next().unwrap();
    assert_eq!(request["method"], method, "{result}");
    let state = result["requestState"].as_str().unwrap().to_owned();
    (key.clone(), request["params"].clone(), state)
}

fn text(answer: &Answer) -> String {
    let result = &answer.last()["result"];
    assert_eq!(result["resultType"], "complete", "{result}");
    result["content"][0]["text"].as_str().unwrap().to_owned()
}

/// A sealed `requestState` is bound to the profile it was issued in (and the principal's kind and
/// issuer, besides its name): a state minted through a profile's path does not continue the call
/// through another view of the same anonymous loopback host, though the tool's name is the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_state_continues_its_call_only_in_the_profile_it_was_issued_in() {
    let daemon = Daemon::start(&format!(
        "[profiles.reader]\nupstreams = [\"alpha\"]\npath = true\n{}",
        test_upstream("alpha", &["--protocol-tools"]),
    ));
    let listed = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&listed, |n| n.iter().any(|n| n == "alpha__sample"))
        .await;
    let all = json!({"sampling": {}});
    let reader = ModernHost {
        capabilities: all.clone(),
        ..ModernHost::new(&format!("{}/reader", daemon.url))
    };
    let everything = ModernHost {
        capabilities: all,
        ..ModernHost::new(&daemon.url)
    };
    let args = json!({"prompt": "which view?"});
    let call = json!({"name": "alpha__sample", "arguments": args});
    let first = reader.request(1, "tools/call", call.clone()).await;
    let (key, _, state) = asked(&first, "sampling/createMessage");
    let sampled = json!({"role": "assistant", "content": {"type": "text", "text": "reader"},
                         "model": "test-model"});
    let mut retry = call;
    retry["inputResponses"] = json!({ &key: sampled });
    retry["requestState"] = json!(state);
    let elsewhere = everything.request(2, "tools/call", retry.clone()).await;
    assert_eq!(
        elsewhere.last()["error"]["code"],
        -32602,
        "a state issued in profile `reader` continued the call in the whole catalog: {:?}",
        elsewhere.messages
    );
    let done = reader.request(3, "tools/call", retry).await;
    assert_eq!(text(&done), "sampled: reader");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_legacy_upstreams_requests_reach_a_2026_host_as_input_required_rounds() {
    const ALICE: &str = "alice-token-for-rounds";
    const BOB: &str = "bob-token-for-rounds";
    let daemon = Daemon::start(&format!(
        "[hosts.alice]\ntoken_sha256 = \"{}\"\n[hosts.bob]\ntoken_sha256 = \"{}\"\n{}{}",
        sha256_hex(ALICE),
        sha256_hex(BOB),
        test_upstream("alpha", &["--protocol-tools"]),
        test_upstream("beta", &["--protocol-tools"])
    ));
    let all = json!({"sampling": {}, "elicitation": {}, "roots": {}});
    let alice = ModernHost::as_host(&daemon.url, ALICE, all.clone());
    let bob = ModernHost::as_host(&daemon.url, BOB, all);
    let call = |name: &str, arguments: Value| json!({"name": name, "arguments": arguments});
    let retry = |name: &str, arguments: Value, key: &str, response: Value, state: &str| {
        json!({"name": name, "arguments": arguments,
               "inputResponses": {key: response}, "requestState": state})
    };
    let listed = Client::connect_as(&daemon.url, ALICE).await;
    daemon
        .wait_for_tools(&listed, |n| {
            n.iter().any(|n| n == "alpha__sample") && n.iter().any(|n| n == "beta__roots")
        })
        .await;

    // Sampling: asked as input, answered on the retry, the call goes on upstream.
    let args = json!({"prompt": "capital of France?"});
    let first = alice
        .request(1, "tools/call", call("alpha__sample", args.clone()))
        .await;
    let (key, params, state) = asked(&first, "sampling/createMessage");
    assert_eq!(
        params["messages"][0]["content"]["text"],
        "capital of France?"
    );
    let sampled = json!({"role": "assistant", "content": {"type": "text", "text": "Paris"},
                         "model": "test-model"});
    let done = alice
        .request(
            2,
            "tools/call",
            retry("alpha__sample", args.clone(), &key, sampled.clone(), &state),
        )
        .await;
    assert_eq!(text(&done), "sampled: Paris");
    // A state opens once.
    let replay = alice
        .request(
            3,
            "tools/call",
            retry("alpha__sample", args, &key, sampled, &state),
        )
        .await;
    assert_eq!(
        replay.last()["error"]["code"],
        -32602,
        "{:?}",
        replay.messages
    );

    // Several rounds of one call, each with a fresh state; and bob's call on another upstream
    // interleaved with them, with no cross-talk.
    let rounds = json!({"rounds": 3});
    let mut answer = alice
        .request(10, "tools/call", call("alpha__elicit", rounds.clone()))
        .await;
    let bob_first = bob
        .request(11, "tools/call", call("beta__roots", json!({})))
        .await;
    let (bob_key, _, bob_state) = asked(&bob_first, "roots/list");
    let mut states = Vec::new();
    for round in 1..=3 {
        let (key, params, state) = asked(&answer, "elicitation/create");
        assert!(
            params["message"]
                .as_str()
                .unwrap()
                .starts_with(&format!("Round {round}"))
        );
        assert!(!states.contains(&state), "a fresh state each round");
        states.push(state.clone());
        if round == 2 {
            // Bob cannot continue alice's call, even naming the same tool.
            let stolen = retry(
                "alpha__elicit",
                rounds.clone(),
                &key,
                json!({"action": "cancel"}),
                &state,
            );
            let refused = bob.request(12, "tools/call", stolen).await;
            assert_eq!(refused.last()["error"]["code"], -32602);
            // Nor steer it to another tool.
            let steered = retry(
                "alpha__sample",
                json!({}),
                &key,
                json!({"action": "cancel"}),
                &state,
            );
            let refused = alice.request(13, "tools/call", steered).await;
            assert_eq!(refused.last()["error"]["code"], -32602);
            // Bob's own call finishes meanwhile.
            let roots = json!({"roots": [{"uri": "file:///bob", "name": "bob"}]});
            let bob_done = bob
                .request(
                    14,
                    "tools/call",
                    retry("beta__roots", json!({}), &bob_key, roots, &bob_state),
                )
                .await;
            assert_eq!(
                text(&bob_done),
                r#"roots: [{"uri":"file:///bob","name":"bob"}]"#
            );
        }
        let response = json!({"action": "accept", "content": {"name": format!("n{round}")}});
        let next = retry("alpha__elicit", rounds.clone(), &key, response, &state);
        answer = alice.request(20 + round, "tools/call", next).await;
    }
    assert_eq!(
        text(&answer),
        r#"elicited: "accept" {"name":"n1"} | "accept" {"name":"n2"} | "accept" {"name":"n3"}"#
    );

    // A state that was altered does not open.
    let first = alice
        .request(30, "tools/call", call("alpha__elicit", json!({})))
        .await;
    let (key, _, state) = asked(&first, "elicitation/create");
    let tampered = format!("{state}-TAMPERED");
    let refused = alice
        .request(
            31,
            "tools/call",
            retry("alpha__elicit", json!({}), &key, json!({}), &tampered),
        )
        .await;
    assert_eq!(refused.last()["error"]["code"], -32602);
    // The call still waits for its real state (a stdio upstream's server request is only
    // routable while one host's call is in flight, so it is finished first).
    let declined = retry(
        "alpha__elicit",
        json!({}),
        &key,
        json!({"action": "decline"}),
        &state,
    );
    let declined = alice.request(32, "tools/call", declined).await;
    assert_eq!(text(&declined), "elicited: decline null");

    // What the request did not declare is -32021 (HTTP 400), naming the capability.
    let bare = ModernHost::as_host(&daemon.url, ALICE, json!({}));
    let missing = bare
        .request(40, "tools/call", call("alpha__sample", json!({})))
        .await;
    assert_eq!(
        missing.status, 400,
        "{} {:?}",
        missing.content_type, missing.messages
    );
    let error = &missing.last()["error"];
    assert_eq!(error["code"], -32021, "{error}");
    assert!(
        error["data"]["requiredCapabilities"]["sampling"].is_object(),
        "{error}"
    );
}

/// A `subscriptions/listen` stream of request `id` opting in to `notifications`.
async fn listen(host: &ModernHost, id: u64, notifications: Value) -> SseReader {
    let params = json!({"notifications": notifications, "_meta": envelope()});
    let body =
        json!({"jsonrpc": "2.0", "id": id, "method": "subscriptions/listen", "params": params});
    let response = host
        .http
        .post(&host.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", MODERN)
        .header("mcp-method", "subscriptions/listen")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-accel-buffering"], "no");
    SseReader::new(response)
}

/// The next message of a listen stream, schema-checked.
async fn next_on(stream: &mut SseReader, schemas: &Schemas) -> Value {
    let event = stream.next_event(Duration::from_secs(20)).await;
    let event = event.expect("a message in time").expect("the stream open");
    let message: Value = serde_json::from_str(&event.data).unwrap();
    schemas.check_message(&message, None);
    message
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listen_stream_carries_the_changes_a_2026_host_opted_in_to() {
    let mut daemon = start().await;
    let host = ModernHost::new(&daemon.url);
    let subscription =
        |m: &Value| m["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"].clone();
    let asked = json!({"toolsListChanged": true,
                       "resourceSubscriptions": ["alpha+test://alpha/hello", "nope+x://y"]});
    let mut stream = listen(&host, 77, asked).await;
    // The acknowledgement first: what was agreed (a resource the view does not have is not).
    let ack = next_on(&mut stream, &host.schemas).await;
    assert_eq!(ack["method"], "notifications/subscriptions/acknowledged");
    assert_eq!(subscription(&ack), 77);
    assert_eq!(
        ack["params"]["notifications"],
        json!({"toolsListChanged": true, "resourceSubscriptions": ["alpha+test://alpha/hello"]})
    );

    // The subscribed resource changes upstream: its update, under its exposed URI, tagged.
    let touch = json!({"name": "alpha__touch", "arguments": {"uri": "test://alpha/hello"}});
    let touched = host.request(2, "tools/call", touch).await;
    assert_eq!(
        text(&touched),
        "touched test://alpha/hello (subscribed: true)"
    );
    let updated = next_on(&mut stream, &host.schemas).await;
    assert_eq!(
        updated["method"], "notifications/resources/updated",
        "{updated}"
    );
    assert_eq!(updated["params"]["uri"], "alpha+test://alpha/hello");
    assert_eq!(subscription(&updated), 77);

    // A tool appears upstream: one notification, tagged, and nothing it did not ask for.
    let add = json!({"name": "beta__add_tool", "arguments": {"name": "zz"}});
    let added = host.request(3, "tools/call", add).await;
    assert_eq!(added.last()["result"]["resultType"], "complete");
    let changed = next_on(&mut stream, &host.schemas).await;
    assert_eq!(
        changed["method"], "notifications/tools/list_changed",
        "{changed}"
    );
    assert_eq!(subscription(&changed), 77);
    let tools = host.request(4, "tools/list", json!({})).await;
    let listed = tools.last()["result"]["tools"].to_string();
    assert!(listed.contains("beta__zz"), "{listed}");

    // The stream ends: the upstream is no longer subscribed.
    drop(stream);
    let subscriptions = json!({"name": "alpha__subscriptions", "arguments": {}});
    let unsubscribed = crate::common::poll_until(Duration::from_secs(20), || async {
        text(&host.request(5, "tools/call", subscriptions.clone()).await) == "[]"
    })
    .await;
    assert!(
        unsubscribed,
        "the upstream stayed subscribed after the stream ended"
    );

    // The daemon stops: a stream ends with the listen request's result, and holds nothing up.
    let mut stream = listen(&host, 78, json!({"toolsListChanged": true})).await;
    assert_eq!(
        next_on(&mut stream, &host.schemas).await["method"],
        "notifications/subscriptions/acknowledged"
    );
    daemon.terminate();
    let last = next_on(&mut stream, &host.schemas).await;
    assert_eq!(last["id"], 78, "{last}");
    assert_eq!(last["result"]["resultType"], "complete");
    assert_eq!(
        last["result"]["_meta"]["io.modelcontextprotocol/subscriptionId"],
        78
    );
    let stopped = daemon.wait_exit(Duration::from_secs(8)).await;
    assert!(stopped.is_some_and(|s| s.success()), "{stopped:?}");
}

/// Two stateless hosts' calls to one remote (Streamable HTTP) upstream at once: each upstream
/// request comes on the answer stream of the POST that caused it, so each host gets its own
/// `input_required`, and each answer completes its own call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_2026_hosts_round_through_one_remote_upstream_at_once() {
    let (table, _server) =
        crate::common::test_upstream_via("up", crate::common::Via::Http, &["--protocol-tools"]);
    let daemon = Daemon::start(&table);
    let listed = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&listed, |n| n.iter().any(|n| n == "up__sample"))
        .await;
    let all = json!({"sampling": {}});
    let (one, two) = (ModernHost::new(&daemon.url), ModernHost::new(&daemon.url));
    let (one, two) = (
        ModernHost {
            capabilities: all.clone(),
            ..one
        },
        ModernHost {
            capabilities: all,
            ..two
        },
    );
    let call = |prompt: &str| json!({"name": "up__sample", "arguments": {"prompt": prompt}});
    let (first, second) = tokio::join!(
        one.request(1, "tools/call", call("one's question")),
        two.request(1, "tools/call", call("two's question"))
    );
    let retry = |round: &Answer, prompt: &str, reply: &str| {
        let (key, params, state) = asked(round, "sampling/createMessage");
        assert_eq!(params["messages"][0]["content"]["text"], prompt);
        let response = json!({"role": "assistant", "content": {"type": "text", "text": reply},
                              "model": "m"});
        json!({"name": "up__sample", "arguments": {"prompt": prompt},
               "inputResponses": {key: response}, "requestState": state})
    };
    let (retry_one, retry_two) = (
        retry(&first, "one's question", "one's answer"),
        retry(&second, "two's question", "two's answer"),
    );
    let (done_two, done_one) = tokio::join!(
        two.request(2, "tools/call", retry_two),
        one.request(2, "tools/call", retry_one)
    );
    assert_eq!(text(&done_one), "sampled: one's answer");
    assert_eq!(text(&done_two), "sampled: two's answer");
}

/// A stateless host's listing cursor names the last item it saw: it goes on after a daemon
/// restart (the key ring is kept in the state directory, private to its owner), and what it
/// lists is each item once; a session's cursor, or an edited one, is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_hosts_cursor_outlives_a_restart() {
    use std::os::unix::fs::PermissionsExt;
    let state = tempfile::tempdir().unwrap();
    let state_arg = state.path().to_str().unwrap().to_owned();
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[catalog]\ntools_page_size = 3\n\n{}",
        test_upstream("alpha", &[])
    );
    let start = || async {
        let daemon = Daemon::start_with(&config, &["--state-dir", &state_arg]);
        let client = Client::connect(&daemon.url).await;
        daemon.wait_for_tools(&client, |n| n.len() == 7).await;
        (daemon, client)
    };
    let names = |answer: &Answer| -> Vec<String> {
        let result = &answer.last()["result"];
        (result["tools"].as_array().unwrap().iter())
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let (mut first, _) = start().await;
    let host = ModernHost::new(&first.url);
    let page = host.request(1, "tools/list", json!({})).await;
    let mut seen = names(&page);
    assert_eq!(seen.len(), 3);
    let cursor = page.last()["result"]["nextCursor"]
        .as_str()
        .unwrap()
        .to_owned();
    let keys = state.path().join("cursor.keys");
    let mode = std::fs::metadata(&keys).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the key ring is its owner's alone");
    assert!(first.stop(), "{}", first.stderr());

    let (second, session) = start().await;
    let host = ModernHost::new(&second.url);
    let mut next = Some(cursor);
    for id in 2.. {
        let Some(cursor) = next.take() else { break };
        let page = host
            .request(id, "tools/list", json!({"cursor": cursor}))
            .await;
        assert_eq!(page.status, 200, "{:?}", page.messages);
        seen.extend(names(&page));
        next = page.last()["result"]["nextCursor"]
            .as_str()
            .map(str::to_owned);
    }
    let mut sorted = seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(
        (seen.len(), &sorted),
        (7, &seen),
        "each tool once, in order: {seen:?}"
    );

    // A handshake session's cursor is not a stateless host's, and an edited one is refused.
    let listed = session.request("tools/list", json!({})).await;
    let theirs = listed["result"]["nextCursor"].as_str().unwrap().to_owned();
    let refused = host
        .request(20, "tools/list", json!({"cursor": theirs}))
        .await;
    assert_eq!(refused.last()["error"]["code"], -32602);
    let page = host.request(21, "tools/list", json!({})).await;
    let mut edited = page.last()["result"]["nextCursor"]
        .as_str()
        .unwrap()
        .to_owned();
    edited.insert(4, 'A');
    let refused = host
        .request(22, "tools/list", json!({"cursor": edited}))
        .await;
    assert_eq!(refused.last()["error"]["code"], -32602);
}

/// Two daemons given one `server.cursor_keys` file accept each other's cursors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn daemons_sharing_a_key_file_accept_each_others_cursors() {
    let shared = tempfile::tempdir().unwrap();
    let keys = shared.path().join("keys");
    let config = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\ncursor_keys = {:?}\n[catalog]\ntools_page_size = 4\n\n{}",
        keys.to_str().unwrap(),
        test_upstream("alpha", &[])
    );
    let start = || async {
        let daemon = Daemon::start_with(&config, &[]);
        let client = Client::connect(&daemon.url).await;
        daemon.wait_for_tools(&client, |n| n.len() == 7).await;
        daemon
    };
    let (one, two) = (start().await, start().await);
    let page = ModernHost::new(&one.url)
        .request(1, "tools/list", json!({}))
        .await;
    let cursor = page.last()["result"]["nextCursor"]
        .as_str()
        .unwrap()
        .to_owned();
    let rest = ModernHost::new(&two.url)
        .request(2, "tools/list", json!({"cursor": cursor}))
        .await;
    let listed = rest.last()["result"]["tools"].as_array().unwrap().len();
    assert_eq!(listed, 3, "{:?}", rest.messages);
    assert!(
        !two.state_dir.join("cursor.keys").exists(),
        "the configured file is used"
    );
}

/// A handshake-era upstream that answers `-32042` (visit a URL first) gives a stateless host
/// `input_required` with a URL-mode elicitation; its retry sends the call again. A host that
/// did not declare URL-mode elicitation gets `-32021`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_url_an_upstream_requires_reaches_a_2026_host_as_input_required() {
    let daemon = start().await;
    let listed = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&listed, |n| n.iter().any(|n| n == "alpha__elicit"))
        .await;
    let host = ModernHost {
        capabilities: json!({"elicitation": {"url": {}}}),
        ..ModernHost::new(&daemon.url)
    };
    let call = json!({"name": "alpha__elicit", "arguments": {"url": "first"}});
    let first = host.request(1, "tools/call", call.clone()).await;
    let (key, params, state) = asked(&first, "elicitation/create");
    assert_eq!(
        params,
        json!({"mode": "url", "url": "https://example.com/authorize",
               "message": "Sign in to continue"})
    );
    let mut retry = call;
    retry["inputResponses"] = json!({ key: {"action": "accept"} });
    retry["requestState"] = json!(state);
    let done = host.request(2, "tools/call", retry).await;
    assert_eq!(text(&done), "elicited: url visited");

    let form_only = ModernHost {
        capabilities: json!({"elicitation": {}}),
        ..ModernHost::new(&daemon.url)
    };
    let call = json!({"name": "alpha__elicit", "arguments": {"url": "second"}});
    let refused = form_only.request(3, "tools/call", call).await;
    assert_eq!(refused.status, 400);
    let error = &refused.last()["error"];
    assert_eq!(error["code"], -32021, "{error}");
    assert!(error["data"]["requiredCapabilities"]["elicitation"]["url"].is_object());
}

/// Log messages for a 2026-07-28 host: only for a request whose envelope asks (`logLevel`), at
/// or above its level, on that request's own stream, never on another's. Over Streamable HTTP
/// a message belongs to the request whose answer stream carried it, however many are in flight;
/// over stdio it names no request, so it belongs to the one request in flight, if only one is.
/// A handshake session still gets what meets the level it set, as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_2026_hosts_log_level_brings_its_own_requests_log_messages() {
    use crate::common::{Next, Via, test_upstream_via};
    let (web, _server) = test_upstream_via("web", Via::Http, &["--protocol-tools"]);
    let daemon = Daemon::start(&format!(
        "{}{web}",
        test_upstream("alpha", &["--protocol-tools"])
    ));
    let session = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&session, |n| {
            n.iter().any(|n| n == "alpha__log") && n.iter().any(|n| n == "web__log")
        })
        .await;
    let level = session
        .result("logging/setLevel", json!({"level": "warning"}))
        .await;
    assert_eq!(level, json!({}));
    let mut session_events = session.events().await;
    let (host, other) = (ModernHost::new(&daemon.url), ModernHost::new(&daemon.url));
    let log = |tool: &str, level: &str, text: &str, wanted: Option<&str>| {
        let mut params = json!({"name": tool, "arguments": {"level": level, "text": text}});
        if let Some(wanted) = wanted {
            params["_meta"] = json!({"io.modelcontextprotocol/logLevel": wanted});
        }
        params
    };
    let logged = |answer: &Answer| -> Vec<Value> {
        (answer.messages.iter())
            .filter(|m| m["method"] == "notifications/message")
            .map(|m| m["params"].clone())
            .collect()
    };

    for upstream in ["alpha", "web"] {
        let tool = format!("{upstream}__log");
        let mine = host
            .request(1, "tools/call", log(&tool, "info", "mine", Some("info")))
            .await;
        assert_eq!(
            logged(&mine),
            [json!({"level": "info", "logger": format!("{upstream}/testlog"), "data": "mine"})],
            "{upstream}: the request asked for info"
        );
        assert_eq!(text(&mine), "logged");
        let low = host
            .request(2, "tools/call", log(&tool, "debug", "low", Some("info")))
            .await;
        assert_eq!(logged(&low), [] as [Value; 0], "{upstream}: below info");
        let unasked = host
            .request(3, "tools/call", log(&tool, "error", "unasked", None))
            .await;
        assert_eq!(
            logged(&unasked),
            [] as [Value; 0],
            "{upstream}: no logLevel"
        );
        assert_eq!(text(&unasked), "logged");
    }
    let bad = host
        .request(
            4,
            "tools/call",
            log("alpha__log", "info", "x", Some("loud")),
        )
        .await;
    assert_eq!(bad.status, 400);
    assert_eq!(bad.last()["error"]["code"], -32602, "{}", bad.last());

    // The session heard only what met its own level: the two errors, none of the info.
    let mut heard = Vec::new();
    while let Next::Message(m) = session_events.next_within(Duration::from_secs(2)).await {
        heard.push((m["params"]["logger"].clone(), m["params"]["data"].clone()));
    }
    heard.sort_by_key(|(logger, _)| logger.to_string());
    assert_eq!(
        heard,
        [
            (json!("alpha/testlog"), json!("unasked")),
            (json!("web/testlog"), json!("unasked"))
        ]
    );

    // Another host's call in flight on the same upstream: over HTTP the message still comes on
    // the stream of the request that caused it; over stdio it cannot be told whose it is, so it
    // is delivered to no request. Never to the other host's.
    for (upstream, attributable) in [("web", true), ("alpha", false)] {
        let slow = json!({"name": format!("{upstream}__slow"), "arguments": {"ms": 1500},
                          "_meta": {"io.modelcontextprotocol/logLevel": "debug"}});
        let (waited, crowded) = tokio::join!(other.request(5, "tools/call", slow), async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let tool = format!("{upstream}__log");
            host.request(
                6,
                "tools/call",
                log(&tool, "notice", "crowded", Some("debug")),
            )
            .await
        });
        assert_eq!(
            logged(&waited),
            [] as [Value; 0],
            "{upstream}: another host's log message reached this one"
        );
        let got = logged(&crowded);
        assert!(
            got.iter().all(|m| m["data"] == "crowded"),
            "{upstream}: {got:?}"
        );
        if attributable {
            assert_eq!(got.len(), 1, "{upstream}: its own answer stream carried it");
        }
    }
}

/// A per-session upstream serves a stateless host from the instance of its principal and
/// profile: one principal's requests reach one instance (what it was told stays), another
/// principal's another, and a session of the first its own; an instance that no request has used
/// for as long as a session may idle is stopped (never under a call in flight), and started again
/// when needed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_session_upstream_serves_each_principals_stateless_requests_from_its_own_instance() {
    use crate::common::{alive, descendants, poll_until};
    const ALICE: &str = "alice-token-for-instances";
    const BOB: &str = "bob-token-for-instances";
    // (The first line belongs to the daemon's `[server]` table.)
    let daemon = Daemon::start(&format!(
        "session_idle_timeout = \"3s\"\n\
         [hosts.alice]\ntoken_sha256 = \"{}\"\n[hosts.bob]\ntoken_sha256 = \"{}\"\n\
         {}isolation = \"per-session\"\n",
        sha256_hex(ALICE),
        sha256_hex(BOB),
        test_upstream("solo", &["--protocol-tools"])
    ));
    let processes = || -> Vec<u32> {
        (descendants(daemon.pid()).into_iter())
            .filter(|p| alive(*p))
            .collect()
    };
    let count = |n: usize| {
        let processes = &processes;
        async move {
            let reached =
                poll_until(Duration::from_secs(20), || async { processes().len() == n }).await;
            assert!(
                reached,
                "expected {n} upstream processes, have {:?}",
                processes()
            );
        }
    };
    let session = Client::connect_as(&daemon.url, ALICE).await;
    daemon
        .wait_for_tools(&session, |n| n.iter().any(|n| n == "solo__log_level"))
        .await;
    count(1).await;
    let (alice, bob) = (
        ModernHost::as_host(&daemon.url, ALICE, json!({})),
        ModernHost::as_host(&daemon.url, BOB, json!({})),
    );
    let call = |name: &str, meta: Value| json!({"name": name, "arguments": {}, "_meta": meta});
    let level = |answer: &Answer| text(answer);

    // Alice's request that asks for debug logs tells her instance so; her next request finds
    // it so told, Bob's instance was told nothing.
    let logs = json!({"io.modelcontextprotocol/logLevel": "debug"});
    let told = alice
        .request(1, "tools/call", call("solo__log", logs))
        .await;
    assert_eq!(text(&told), "logged");
    count(2).await;
    let again = alice
        .request(2, "tools/call", call("solo__log_level", json!({})))
        .await;
    assert_eq!(level(&again), "level: debug");
    let other = bob
        .request(1, "tools/call", call("solo__log_level", json!({})))
        .await;
    assert_eq!(level(&other), "level: none");
    count(3).await;
    // Alice's session has an instance of its own.
    let own = session.tool_text("solo__log_level", json!({})).await;
    assert_eq!(own, "level: none");
    count(4).await;

    // Idle instances stop (the session's too, once the session idles out); a new request starts
    // one again.
    count(1).await;
    let back = alice
        .request(3, "tools/call", call("solo__log_level", json!({})))
        .await;
    assert_eq!(
        level(&back),
        "level: none",
        "a new instance was told nothing yet"
    );
    count(2).await;
    // A call longer than the idle time is not stopped under it.
    let slow = json!({"name": "solo__slow", "arguments": {"ms": 5000}});
    let slept = alice.request(4, "tools/call", slow).await;
    assert_eq!(text(&slept), "slept 5000ms");
}
