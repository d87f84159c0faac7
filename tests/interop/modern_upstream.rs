//! 2026-07-28 upstreams: a modern-only server on the official TypeScript SDK v2
//! (`tests/interop/modern_server.mjs`, `legacy: 'reject'`), over stdio and over Streamable HTTP,
//! behind mcpmux, with a handshake-era host and a 2026-07-28 host at once. mcpmux probes each
//! with `server/discover`, speaks the new protocol to it (envelope, headers, listen stream), and
//! bridges its multi-round requests for the legacy host into real server requests.

use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{Client, Daemon, peers, read_messages, toml_list, toml_str};

const MODERN: &str = "2026-07-28";

fn script() -> String {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/modern_server.mjs");
    path.to_str().unwrap().to_owned()
}

/// Where the peers' npm packages are.
fn node_modules() -> String {
    let bin = peers::npm_bin("node");
    let modules = bin.parent().and_then(std::path::Path::parent).unwrap();
    modules.to_str().unwrap().to_owned()
}

/// Starts the modern-only server over HTTP on a free loopback port: its process (killed when
/// dropped) and its URL.
async fn http_server() -> (tokio::process::Child, String) {
    peers::node_http_server("modern_server.mjs", &["http".into()]).await
}

/// A 2026-07-28 host: each request a POST with the envelope and the mirrored headers.
pub(crate) struct ModernHost {
    http: reqwest::Client,
    url: String,
    capabilities: Value,
}

impl ModernHost {
    /// A host of `url` whose envelope declares `capabilities`.
    pub(crate) fn new(url: &str, capabilities: Value) -> Self {
        Self {
            http: reqwest::Client::new(),
            url: url.to_owned(),
            capabilities,
        }
    }

    pub(crate) async fn request(&self, method: &str, params: Value) -> Value {
        self.request_with(method, params, &[]).await
    }

    /// [`Self::request`] with `extra` headers (`Mcp-Param-*`).
    async fn request_with(&self, method: &str, mut params: Value, extra: &[(&str, &str)]) -> Value {
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": MODERN,
            "io.modelcontextprotocol/clientCapabilities": self.capabilities,
            "io.modelcontextprotocol/clientInfo": {"name": "modern-host", "version": "0"},
        });
        let mut request = self
            .http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", MODERN)
            .header("mcp-method", method);
        if let Some(name) = params
            .get("name")
            .or(params.get("uri"))
            .and_then(Value::as_str)
        {
            request = request.header("mcp-name", name);
        }
        for (header, value) in extra {
            request = request.header(*header, *value);
        }
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        let response = request.body(body.to_string()).send().await.unwrap();
        let messages = read_messages(response).await;
        messages.last().cloned().expect("an answer")
    }
}

fn text(answer: &Value) -> String {
    answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("no text in {answer}"))
        .to_owned()
}

/// A daemon with the modern-only server as `mstdio` (a child over stdio) and `mhttp` (over
/// Streamable HTTP; its process is returned, killed when dropped), both listed.
async fn modern_daemon() -> (tokio::process::Child, Daemon) {
    let (server, server_url) = http_server().await;
    let node = peers::npm_bin("node");
    let config = format!(
        "[upstreams.mstdio]\ncommand = {}\nargs = {}\nenv = {{ MCP_NODE_MODULES = {} }}\nstartup_timeout = \"300s\"\n\n\
         [upstreams.mhttp]\nurl = {}\n",
        toml_str(node.to_str().unwrap()),
        toml_list(&[script(), "stdio".into()]),
        toml_str(&node_modules()),
        toml_str(&server_url),
    );
    let daemon = Daemon::start(&config);
    let client = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&client, |names| {
            ["mstdio__echo", "mhttp__echo"]
                .iter()
                .all(|t| names.iter().any(|n| n == t))
        })
        .await;
    (server, daemon)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_modern_only_upstream_serves_a_legacy_and_a_modern_host_at_once() {
    let (_server, daemon) = modern_daemon().await;
    let capabilities = json!({"sampling": {}, "elicitation": {"form": {}}, "roots": {}});
    let legacy = Client::connect_with(&daemon.url, "2025-11-25", capabilities.clone()).await;

    // Both were found to speak 2026-07-28 (the probe), and status says so.
    for name in ["mstdio", "mhttp"] {
        let status = daemon.upstream_status(name).await;
        assert_eq!(status["protocol_version"], MODERN, "{name}: {status}");
    }

    // ---- The legacy host: calls, a prompt with completion, a resource, progress.
    for prefix in ["mstdio", "mhttp"] {
        let echoed = legacy
            .tool_text(&format!("{prefix}__echo"), json!({"text": "hi"}))
            .await;
        assert_eq!(echoed, "hi");
        let prompt = legacy
            .result(
                "prompts/get",
                json!({"name": format!("{prefix}__greet"), "arguments": {"name": "Ada"}}),
            )
            .await;
        assert_eq!(prompt["messages"][0]["content"]["text"], "Hello, Ada!");
        let completion = legacy
            .result(
                "completion/complete",
                json!({"ref": {"type": "ref/prompt", "name": format!("{prefix}__greet")},
                       "argument": {"name": "name", "value": "al"}}),
            )
            .await;
        assert_eq!(
            completion["completion"]["values"],
            json!(["alice", "albert"])
        );
        let call = legacy.start(
            "tools/call",
            json!({"name": format!("{prefix}__progress"), "arguments": {"steps": 3},
                   "_meta": {"progressToken": "p-1"}}),
        );
        let (before, answer) = call.finish().await;
        assert_eq!(text(&answer), "did 3 steps");
        let progress: Vec<&Value> = before
            .iter()
            .filter(|m| m["method"] == "notifications/progress")
            .collect();
        assert_eq!(progress.len(), 3, "{before:?}");
        assert!(
            progress
                .iter()
                .all(|p| p["params"]["progressToken"] == "p-1")
        );
    }
    let resources = legacy.list_all("resources/list", "resources").await;
    let info = resources
        .iter()
        .find(|r| r["uri"].as_str().is_some_and(|u| u.contains("mstdio")))
        .unwrap_or_else(|| panic!("no mstdio resource in {resources:?}"));
    let read = legacy
        .result("resources/read", json!({"uri": info["uri"]}))
        .await;
    assert_eq!(read["contents"][0]["text"], "modern-only server");

    // ---- A handshake session's log level goes with its requests (`logLevel`), and its
    // subscription to a resource becomes the listen filter: both reach it, on its GET stream.
    let mut events = legacy.events().await;
    legacy
        .result("logging/setLevel", json!({"level": "info"}))
        .await;
    let (before, answer) = legacy
        .start_tool("mstdio__chat", json!({"text": "hello log"}))
        .finish()
        .await;
    assert_eq!(text(&answer), "logged");
    let logged =
        |m: &Value| m["method"] == "notifications/message" && m["params"]["data"] == "hello log";
    if !before.iter().any(logged) {
        let message = events.next().await;
        assert!(logged(&message), "{message}");
    }
    legacy
        .result("resources/subscribe", json!({"uri": info["uri"]}))
        .await;
    // The listen stream is opened again with the resource in its filter: touch until it says so.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        legacy
            .tool_text("mstdio__touch", json!({"uri": "modern://info"}))
            .await;
        match events.next_within(Duration::from_secs(2)).await {
            crate::common::Next::Message(m) if m["method"] == "notifications/resources/updated" => {
                assert_eq!(m["params"]["uri"], info["uri"], "{m}");
                break;
            }
            crate::common::Next::Message(m) => panic!("unexpected {m}"),
            _ => assert!(
                tokio::time::Instant::now() < deadline,
                "no resources/updated came"
            ),
        }
    }

    // ---- Two hosts' multi-round calls interleaved: the legacy host is asked real requests,
    // the modern host gets input_required with a sealed state.
    let mut survey = legacy.start_tool("mhttp__survey", json!({}));
    let asked = survey.next().await;
    assert_eq!(asked["method"], "elicitation/create", "{asked}");
    assert_eq!(asked["params"]["message"], "Your name?");

    let modern = ModernHost::new(&daemon.url, json!({"elicitation": {}}));
    let first = modern
        .request(
            "tools/call",
            json!({"name": "mhttp__survey", "arguments": {}}),
        )
        .await;
    let result = &first["result"];
    assert_eq!(result["resultType"], "input_required", "{first}");
    let state = result["requestState"].as_str().unwrap().to_owned();
    assert_ne!(state, "asked-name", "the upstream's state goes out sealed");
    let key = result["inputRequests"]
        .as_object()
        .unwrap()
        .keys()
        .next()
        .unwrap()
        .clone();
    // A state altered by the host is refused.
    let mut altered = state.clone();
    altered.replace_range(10..11, if &state[10..11] == "A" { "B" } else { "A" });
    let refused = modern
        .request(
            "tools/call",
            json!({"name": "mhttp__survey", "arguments": {},
            "requestState": altered, "inputResponses": {}}),
        )
        .await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    let second = modern
        .request(
            "tools/call",
            json!({"name": "mhttp__survey", "arguments": {},
            "requestState": state,
            "inputResponses": {key: {"action": "accept", "content": {"name": "Bo"}}}}),
        )
        .await;
    assert_eq!(second["result"]["resultType"], "input_required", "{second}");
    let state = second["result"]["requestState"]
        .as_str()
        .unwrap()
        .to_owned();

    // The legacy host answers its first question meanwhile, and gets the second.
    legacy
        .respond(
            &asked["id"],
            json!({"action": "accept", "content": {"name": "Ada"}}),
        )
        .await;
    let asked = survey.next().await;
    assert_eq!(
        asked["params"]["message"], "Favourite colour, Ada?",
        "{asked}"
    );
    legacy
        .respond(
            &asked["id"],
            json!({"action": "accept", "content": {"color": "green"}}),
        )
        .await;
    let (_, answer) = survey.finish().await;
    assert_eq!(text(&answer), "Ada likes green");

    let done = modern
        .request(
            "tools/call",
            json!({"name": "mhttp__survey", "arguments": {},
            "requestState": state,
            "inputResponses": {"color": {"action": "accept", "content": {"color": "red"}}}}),
        )
        .await;
    assert_eq!(text(&done), "Bo likes red", "{done}");

    // ---- `x-mcp-header` parameters: mcpmux mirrors them into `Mcp-Param-*` for the upstream
    // (which checks them: a missing or wrong one is refused there), encoded where the value is
    // not plain ASCII; and it checks a 2026-07-28 host's own before anything is forwarded.
    let regional = |prefix: &str| format!("{prefix}__regional");
    let answer = legacy
        .tool_text(
            &regional("mhttp"),
            json!({"region": " Zürich ", "query": "q"}),
        )
        .await;
    assert_eq!(answer, "q in  Zürich  (header =?base64?IFrDvHJpY2gg?=)");
    let answer = legacy
        .tool_text(&regional("mstdio"), json!({"region": "eu", "query": "q"}))
        .await;
    assert_eq!(answer, "q in eu (header null)", "stdio has no headers");
    let call = json!({"name": regional("mstdio"), "arguments": {"region": "eu", "query": "q"}});
    let ok = modern
        .request_with("tools/call", call.clone(), &[("mcp-param-region", "eu")])
        .await;
    assert_eq!(text(&ok), "q in eu (header null)", "{ok}");
    for sent in [&[][..], &[("mcp-param-region", "us")][..]] {
        let refused = modern.request_with("tools/call", call.clone(), sent).await;
        assert_eq!(refused["error"]["code"], -32020, "{sent:?}: {refused}");
    }

    // ---- Sampling and roots for the legacy host, over stdio.
    let mut sample = legacy.start_tool("mstdio__sample", json!({"prompt": "2+2?"}));
    let asked = sample.next().await;
    assert_eq!(asked["method"], "sampling/createMessage", "{asked}");
    legacy
        .respond(
            &asked["id"],
            json!({"role": "assistant", "content": {"type": "text", "text": "4"}, "model": "m"}),
        )
        .await;
    let (_, answer) = sample.finish().await;
    assert_eq!(text(&answer), "model said: 4");
    let mut roots = legacy.start_tool("mstdio__roots", json!({}));
    let asked = roots.next().await;
    assert_eq!(asked["method"], "roots/list", "{asked}");
    legacy
        .respond(&asked["id"], json!({"roots": [{"uri": "file:///work"}]}))
        .await;
    let (_, answer) = roots.finish().await;
    assert_eq!(text(&answer), "file:///work");

    // A host without the capability gets an error, and is never asked.
    let bare = Client::connect_with(&daemon.url, "2025-11-25", json!({})).await;
    let refused = bare
        .request(
            "tools/call",
            json!({"name": "mstdio__sample", "arguments": {"prompt": "x"}}),
        )
        .await;
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("sampling"), "{refused}");

    // ---- Cancellation: the host's notifications/cancelled reaches the upstream as the revision
    // says (a notification over stdio, the request's stream closed over HTTP).
    for prefix in ["mstdio", "mhttp"] {
        let call = legacy.start_tool(&format!("{prefix}__slow"), json!({"seconds": 120}));
        let under_way = crate::common::poll_until(Duration::from_secs(60), || async {
            daemon.upstream_status(prefix).await["in_flight"] == 1
        })
        .await;
        assert!(under_way, "{prefix}: the call never reached the upstream");
        legacy
            .notify(
                "notifications/cancelled",
                json!({"requestId": call.id, "reason": "changed my mind"}),
            )
            .await;
        drop(call);
        let aborted = crate::common::poll_until(Duration::from_secs(60), || async {
            legacy
                .tool_text(&format!("{prefix}__aborted"), json!({}))
                .await
                == "1"
        })
        .await;
        assert!(
            aborted,
            "{prefix}: the upstream never saw the call cancelled"
        );
    }

    // ---- Changes: the listen stream mcpmux keeps with each brings list_changed.
    for prefix in ["mstdio", "mhttp"] {
        legacy
            .tool_text(&format!("{prefix}__grow"), json!({"name": "grown"}))
            .await;
        let grown = format!("{prefix}__grown");
        daemon
            .wait_for_tools(&legacy, |names| names.contains(&grown))
            .await;
    }
}

/// A dual-era server (the Python SDK 2.3's `MCPServer`) is spoken to in 2026-07-28 under
/// `protocol = "auto"`, and with the handshake under `"legacy"`; hosts of both eras use both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dual_era_server_is_spoken_to_in_2026_under_auto() {
    let python = peers::python();
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/dual_server.py");
    let upstream = |name: &str, protocol: &str| {
        format!(
            "[upstreams.{name}]\ncommand = {}\nargs = [{}]\nprotocol = {}\nstartup_timeout = \"300s\"\n\n",
            toml_str(python.to_str().unwrap()),
            toml_str(script.to_str().unwrap()),
            toml_str(protocol),
        )
    };
    let config = format!("{}{}", upstream("auto", "auto"), upstream("old", "legacy"));
    let daemon = Daemon::start(&config);
    let legacy = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&legacy, |n| {
            ["auto__shout", "old__shout"]
                .iter()
                .all(|t| n.iter().any(|n| n == t))
        })
        .await;
    assert_eq!(
        daemon.upstream_status("auto").await["protocol_version"],
        MODERN
    );
    assert_eq!(
        daemon.upstream_status("old").await["protocol_version"],
        "2025-11-25"
    );
    let modern = ModernHost::new(&daemon.url, json!({}));
    for name in ["auto__shout", "old__shout"] {
        assert_eq!(legacy.tool_text(name, json!({"text": "hi"})).await, "HI");
        let answer = modern
            .request(
                "tools/call",
                json!({"name": name, "arguments": {"text": "hey"}}),
            )
            .await;
        assert_eq!(text(&answer), "HEY", "{answer}");
        assert_eq!(answer["result"]["resultType"], "complete");
    }
}

/// A remote server that serves both eras (the Python SDK's `MCPServer` over Streamable HTTP) is
/// spoken to in 2026-07-28 for its catalog and 2026-07-28 hosts, and in the handshake era for the
/// requests of handshake-era hosts: its `ask` tool, which asks with a request of its own (what
/// the SDK can do in that era only), reaches a handshake-era host as an `elicitation/create` on
/// its call's stream, as it does direct — while a 2026-07-28 host uses the same daemon at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handshake_era_host_is_asked_by_a_dual_era_server_as_it_is_direct() {
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/dual_server.py");
    let server = crate::common::RemoteServer::python_script(&script);
    let daemon = Daemon::start(&format!(
        "[upstreams.dual]\nurl = {}\n",
        toml_str(&server.url("/mcp"))
    ));
    let legacy = Client::connect_with(
        &daemon.url,
        "2025-11-25",
        json!({"elicitation": {"form": {}}}),
    )
    .await;
    daemon
        .wait_for_tools(&legacy, |n| n.iter().any(|t| t == "dual__ask"))
        .await;
    assert_eq!(
        daemon.upstream_status("dual").await["protocol_version"],
        MODERN
    );
    let modern = ModernHost::new(&daemon.url, json!({}));
    let asking = async {
        let mut call = legacy.start_tool("dual__ask", json!({"question": "Favourite colour?"}));
        let asked = call.next().await;
        assert_eq!(asked["method"], "elicitation/create", "{asked}");
        assert_eq!(asked["params"]["message"], "Favourite colour?", "{asked}");
        legacy
            .respond(
                &asked["id"],
                json!({"action": "accept", "content": {"answer": "blue"}}),
            )
            .await;
        let (_, answer) = call.finish().await;
        answer
    };
    let beside = async {
        let mut answers = Vec::new();
        for n in 0..5 {
            let said = format!("hey {n}");
            let answer = modern
                .request(
                    "tools/call",
                    json!({"name": "dual__shout", "arguments": {"text": said}}),
                )
                .await;
            answers.push((said.to_uppercase(), answer));
        }
        answers
    };
    let (answer, answers) = tokio::join!(asking, beside);
    assert_eq!(
        text(&answer),
        "You said: blue",
        "{answer}\n{}",
        daemon.stderr()
    );
    for (expected, answer) in answers {
        assert_eq!(text(&answer), expected, "{answer}");
        assert_eq!(answer["result"]["resultType"], "complete", "{answer}");
    }
    // The catalog and the 2026-07-28 host stay on the 2026-07-28 link.
    assert_eq!(
        daemon.upstream_status("dual").await["protocol_version"],
        MODERN
    );
    assert_eq!(
        legacy.tool_text("dual__shout", json!({"text": "hi"})).await,
        "HI"
    );
}

/// The official Python SDK as a handshake-era host (`ClientSession`, 2025-11-25) and as a
/// 2026-07-28 host, both at once on one daemon in front of the modern-only server over stdio and
/// HTTP: tools, progress, a prompt and its completion, a resource, and sampling, two rounds of
/// elicitation and roots — each host answered with its own name, so any cross-talk shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_hosts_of_both_eras_use_a_modern_only_upstream_at_once() {
    crate::common::python::require_python_sdk();
    let (_server, daemon) = modern_daemon().await;
    let deadline = Duration::from_secs(240);
    let run = |mode: &'static str, name: &'static str| {
        let args = [
            "--http",
            daemon.url.as_str(),
            "--mode",
            mode,
            "--name",
            name,
        ];
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        let daemon = &daemon;
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            crate::common::python::run_script(daemon, "modern_upstream_host.py", &args, deadline)
                .await
                .0
        }
    };
    let (old, new) = tokio::join!(run("legacy", "oldhost"), run("2026-07-28", "newhost"));
    for (summary, name) in [(&old, "oldhost"), (&new, "newhost")] {
        assert_eq!(summary["ok"], true, "{summary}");
        for prefix in ["mstdio", "mhttp"] {
            let item = &summary[prefix];
            assert_eq!(item["echo"], name, "{prefix}: {item}");
            assert_eq!(item["progress"], "did 3 steps");
            assert_eq!(
                item["progress_seen"],
                json!([1.0, 2.0, 3.0]),
                "{prefix}: {item}"
            );
            assert_eq!(
                item["survey"],
                format!("{name} likes blue"),
                "{prefix}: {item}"
            );
            assert_eq!(item["sample"], format!("model said: {name}'s model"));
            assert_eq!(item["roots"], format!("file:///{name}"));
            assert_eq!(item["prompt"], format!("Hello, {name}!"));
            assert_eq!(item["completion"], json!(["alice", "albert"]));
        }
        assert_eq!(summary["resource"], "modern-only server");
        // Per upstream: two elicitations (the survey's rounds), one sampling, one roots request.
        let asked = summary["asked"].as_array().unwrap();
        let count = |method: &str| asked.iter().filter(|a| a["method"] == method).count();
        assert_eq!(
            (
                count("elicitation/create"),
                count("sampling/createMessage"),
                count("roots/list")
            ),
            (4, 2, 2),
            "{name}: {asked:?}"
        );
    }
    assert_eq!(old["mode"], "legacy");
    assert_eq!(new["mode"], MODERN);
}

/// An upstream whose era changes across a restart (a server upgraded in place) is probed again
/// and spoken to in its new era, both ways; hosts keep calling it by the same names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_changes_era_across_a_restart_is_spoken_to_in_its_new_one() {
    let dir = tempfile::tempdir().unwrap();
    let flag = dir.path().join("modern");
    let node = peers::npm_bin("node");
    let shell = format!(
        "if [ -e '{}' ]; then exec '{}' '{}' stdio; else exec '{}' --name up; fi",
        flag.display(),
        node.display(),
        script(),
        crate::common::TEST_UPSTREAM
    );
    let config = format!(
        "[upstreams.up]\ncommand = \"/bin/sh\"\nargs = [\"-c\", {}]\nenv = {{ MCP_NODE_MODULES = {} }}\nstartup_timeout = \"300s\"\n",
        toml_str(&shell),
        toml_str(&node_modules()),
    );
    let daemon = Daemon::start(&config);
    let client = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&client, |n| n.iter().any(|n| n == "up__echo"))
        .await;
    let era = || async { daemon.upstream_status("up").await["protocol_version"].clone() };
    assert_ne!(era().await, MODERN);
    for (modern, tool) in [(true, "up__survey"), (false, "up__crash")] {
        match modern {
            true => std::fs::write(&flag, b"").unwrap(),
            false => std::fs::remove_file(&flag).unwrap(),
        }
        let restarted = daemon.admin_post("/upstreams/up/restart", json!({})).await;
        assert!(restarted.status().is_success(), "{restarted:?}");
        let switched = crate::common::poll_until(Duration::from_secs(120), || async {
            (era().await == MODERN) == modern
                && daemon.upstream_status("up").await["state"] == "ready"
        })
        .await;
        assert!(switched, "still {} after the restart", era().await);
        daemon
            .wait_for_tools(&client, |n| n.iter().any(|n| n == tool))
            .await;
        let echoed = client
            .tool_text("up__echo", json!({"text": "same name"}))
            .await;
        assert!(echoed.contains("same name"), "{echoed}");
    }
}

/// `isolation = "per-session"` with a 2026-07-28 upstream still means one instance per host
/// session: each session's calls reach its own process (probed and spoken to in 2026-07-28), and
/// the rounds a call takes are asked of that session alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_per_session_modern_upstream_runs_one_instance_per_host_session() {
    let node = peers::npm_bin("node");
    let config = format!(
        "[upstreams.mstdio]\ncommand = {}\nargs = {}\nenv = {{ MCP_NODE_MODULES = {} }}\nisolation = \"per-session\"\nstartup_timeout = \"300s\"\n",
        toml_str(node.to_str().unwrap()),
        toml_list(&[script(), "stdio".into()]),
        toml_str(&node_modules()),
    );
    let daemon = Daemon::start(&config);
    let capabilities = json!({"sampling": {}});
    let a = Client::connect_with(&daemon.url, "2025-11-25", capabilities.clone()).await;
    let b = Client::connect_with(&daemon.url, "2025-11-25", capabilities).await;
    daemon
        .wait_for_tools(&a, |n| n.iter().any(|n| n == "mstdio__pid"))
        .await;
    let pid_a = a.tool_text("mstdio__pid", json!({})).await;
    let pid_b = b.tool_text("mstdio__pid", json!({})).await;
    assert_ne!(pid_a, pid_b, "two sessions, two instances");
    assert_eq!(
        a.tool_text("mstdio__pid", json!({})).await,
        pid_a,
        "a session keeps its instance"
    );
    // Each session's sampling round is asked of that session, by its own instance.
    for (client, reply) in [(&a, "from a"), (&b, "from b")] {
        let mut call = client.start_tool("mstdio__sample", json!({"prompt": "who?"}));
        let asked = call.next().await;
        assert_eq!(asked["method"], "sampling/createMessage", "{asked}");
        client
            .respond(&asked["id"], json!({"role": "assistant", "content": {"type": "text", "text": reply}, "model": "m"}))
            .await;
        let (_, answer) = call.finish().await;
        assert_eq!(text(&answer), format!("model said: {reply}"));
    }
}

/// The 2026-07-28 suite's `http-custom-header-server-validation` (0.2.0-alpha.12) against mcpmux
/// in front of the modern-only server, whose `regional` tool has an `x-mcp-header` parameter:
/// every check passes. The suite's reference server has no such tool, so this is where mcpmux's
/// own check of a host's `Mcp-Param-*` headers is scored (the host's headers never reach the
/// upstream: mcpmux writes its own).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hosts_param_headers_pass_the_suites_server_validation_scenario() {
    let (_server, server_url) = http_server().await;
    let daemon = Daemon::start(&format!(
        "[upstreams.m]\nurl = {}\nprefix = \"\"\n",
        toml_str(&server_url)
    ));
    let client = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&client, |n| n.iter().any(|n| n == "regional"))
        .await;
    let suite = std::path::Path::new(&node_modules())
        .join("@modelcontextprotocol/conformance-2026/dist/index.js");
    let results = tempfile::tempdir().unwrap();
    let output = tokio::process::Command::new(peers::npm_bin("node"))
        .arg(&suite)
        .args(["server", "--url", daemon.url.as_str()])
        .args(["--scenario", "http-custom-header-server-validation", "-o"])
        .arg(results.path())
        .output()
        .await
        .unwrap();
    let mut checks = Vec::new();
    for dir in std::fs::read_dir(results.path()).unwrap().flatten() {
        if let Ok(text) = std::fs::read_to_string(dir.path().join("checks.json")) {
            checks.extend(serde_json::from_str::<Vec<Value>>(&text).unwrap());
        }
    }
    let failed: Vec<&Value> = checks.iter().filter(|c| c["status"] == "FAILURE").collect();
    assert!(
        checks.len() >= 8 && failed.is_empty(),
        "{} checks, failed: {failed:?}\n{}",
        checks.len(),
        String::from_utf8_lossy(&output.stdout)
    );
}

/// A handshake-era server that exits on a request before `initialize` (as some do on the
/// `server/discover` probe) is started again at once and spoken to with the handshake: it comes
/// up ready, not in a crash loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_exits_on_the_probe_is_started_again_with_the_handshake() {
    // The first line decides: the probe ends the process; anything else is handed, with the rest
    // of stdin, to the test upstream.
    let shell = format!(
        "IFS= read -r line; case \"$line\" in *server/discover*) exit 3;; esac; \
         {{ printf '%s\\n' \"$line\"; cat; }} | exec '{}' --name up",
        crate::common::TEST_UPSTREAM
    );
    let config = format!(
        "[upstreams.up]\ncommand = \"/bin/sh\"\nargs = [\"-c\", {}]\n",
        toml_str(&shell)
    );
    let daemon = Daemon::start(&config);
    let client = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&client, |n| n.iter().any(|n| n == "up__echo"))
        .await;
    let status = daemon.upstream_status("up").await;
    assert_eq!(status["state"], "ready", "{status}");
    assert_ne!(status["protocol_version"], MODERN);
    assert_eq!(
        status["restarts"], 0,
        "started again within its start, not restarted: {status}"
    );
    let echoed = client
        .tool_text("up__echo", json!({"text": "after the probe"}))
        .await;
    assert!(echoed.contains("after the probe"), "{echoed}");
    assert!(
        daemon.log_count(&["ended on the server/discover probe"]) >= 1,
        "{}",
        daemon.stderr()
    );
}
