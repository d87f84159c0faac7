//! Interop: clients built on independent MCP implementations talk to mcpmux, over Streamable HTTP
//! and through `mcpmux stdio`.
//!
//! - The official Python SDK (`pip install mcp`), driven by `tests/interop/python_client.py`, in its
//!   default `auto` mode (probes `server/discover`: mcpmux answers it, so the SDK stays on
//!   2026-07-28), pinned to `2026-07-28`, and in `legacy` mode (the `initialize` handshake).
//!   The script checks the answers and, over HTTP, every HTTP exchange the SDK made; these tests
//!   assert its JSON summary. A machine without the SDK fails here, it does not skip.
//! - The official TypeScript SDK v2 client (`@modelcontextprotocol/client`), driven by
//!   `tests/interop/ts_client.mjs`, as a 2026-07-28 host (pinned and `auto`).
//! - rmcp, the Rust SDK (`StreamableHttpClientTransport`, `TokioChildProcess`).

use std::time::{Duration, Instant};

use crate::common::python::{require_python_sdk, run_script, shell_quote};
use crate::common::{
    Bridge, Client, Daemon, MCPMUX, alive, peers, poll_until, spawn_bridge, test_upstream,
};
use rmcp::model::{
    CallToolRequestParams, ClientInfo, ClientRequest, GetPromptRequestParams, Implementation,
    PromptMessageContent, ProtocolVersion, ReadResourceRequestParams, ResourceContents,
    ServerResult,
};
use rmcp::service::{QuitReason, RunningService};
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use rmcp::{Peer, RoleClient, ServiceError, ServiceExt};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

const PYTHON_DEADLINE: Duration = Duration::from_secs(180);

/// A daemon with test upstreams `alpha` and `beta`, both listed.
async fn start_daemon() -> Daemon {
    let daemon = Daemon::start(&format!(
        "{}{}",
        test_upstream("alpha", &[]),
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

fn stdio_command(url: &str) -> String {
    format!("{} stdio --url {}", shell_quote(MCPMUX), shell_quote(url))
}

/// Live `mcpmux stdio` bridges pointed at `url` (read from /proc).
fn bridges_for(url: &str) -> Vec<u32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmdline
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        if args.iter().any(|a| a == "stdio") && args.iter().any(|a| a == url) && alive(pid) {
            pids.push(pid);
        }
    }
    pids
}

/// Both upstreams run the same test server, so each contributes the same tools, each once.
fn assert_same_tools_per_upstream(names: &[&str]) {
    let of = |prefix: &str| -> Vec<&str> {
        let mut tools: Vec<&str> = names
            .iter()
            .filter_map(|n| n.strip_prefix(prefix))
            .collect();
        tools.sort_unstable();
        tools
    };
    let (alpha, beta) = (of("alpha__"), of("beta__"));
    for expected in ["echo", "fancy", "slow", "fail"] {
        assert!(
            alpha.contains(&expected),
            "alpha__{expected} missing: {names:?}"
        );
    }
    assert_eq!(alpha, beta, "{names:?}");
    assert_eq!(alpha.len() + beta.len(), names.len(), "{names:?}");
    let mut unique = alpha.clone();
    unique.dedup();
    assert_eq!(unique, alpha, "duplicate tools: {names:?}");
}

// ---------------------------------------------------------------------------------------------
// The official Python SDK

/// Runs `tests/interop/python_client.py ARGS`; returns its JSON summary.
async fn run_python_client(daemon: &Daemon, args: &[&str]) -> Value {
    let (summary, wall) = run_script(daemon, "python_client.py", args, PYTHON_DEADLINE).await;
    let close = summary
        .get("close_seconds")
        .map_or(String::new(), |s| format!(", closing the bridge {s}s"));
    eprintln!(
        "python_client.py {args:?}: {wall:.2?} wall (Python start-up included), SDK session {}s{close}",
        summary["seconds"],
    );
    summary
}

/// What every Python run must have seen, whatever the transport or mode.
fn assert_python_summary(summary: &Value, transport: &str, mode: &str) {
    assert_eq!(summary["ok"], true, "{summary}");
    assert_eq!(summary["transport"], transport);
    assert_eq!(summary["mode"], mode);
    if mode == "2026-07-28" {
        // Pinned, the SDK asks for no discovery; each result names mcpmux instead.
        assert_eq!(summary["server_name"], Value::Null, "{summary}");
    } else {
        assert_eq!(summary["server_name"], "mcpmux");
    }
    if mode != "legacy" {
        assert_eq!(summary["result_server_name"], "mcpmux", "{summary}");
    }
    let version = if mode == "legacy" {
        "2025-11-25"
    } else {
        "2026-07-28"
    };
    assert_eq!(
        summary["protocol_version"], version,
        "legacy mode agrees on the SDK's latest handshake version; the others stay stateless"
    );
    assert_eq!(summary["tool_pages"], 1);
    let names: Vec<&str> = summary["tool_names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert_eq!(summary["tools"], names.len());
    assert_same_tools_per_upstream(&names);
    assert_eq!(summary["echo"], json!({"alpha": "alpha", "beta": "beta"}));
    assert_eq!(summary["tool_error_is_result"], true);
    assert_eq!(summary["unknown_tool_error"], -32602);
    assert_eq!(summary["prompt"], "Hello, Ada from alpha");
    assert_eq!(
        summary["resources"],
        json!(["alpha+test://alpha/hello", "beta+test://beta/hello"])
    );
    assert_eq!(summary["hello"], "hello from alpha");
    assert_eq!(summary["item"], "item 7 from beta");
    assert_eq!(
        summary["templates"],
        json!(["alpha+test://alpha/item/{id}", "beta+test://beta/item/{id}"])
    );
    let pinged = if mode == "legacy" {
        json!(true)
    } else {
        json!("not in 2026-07-28")
    };
    assert_eq!(summary["ping"], pinged);
}

/// Over Streamable HTTP: the exchanges the SDK made, as the script recorded them.
fn assert_python_http_exchanges(summary: &Value, mode: &str) {
    let exchanges = summary["http"].as_array().unwrap();
    let first = &exchanges[0];
    if mode != "legacy" {
        // Stateless: no handshake, no session, no GET stream, no DELETE (the script checked each
        // POST's headers). In auto mode the SDK's probe is answered, so it stays on 2026-07-28.
        if mode == "auto" {
            assert_eq!(first["rpc"], "server/discover", "{summary}");
        }
        assert_eq!(first["status"], 200, "{summary}");
        let rpcs: Vec<&Value> = exchanges.iter().map(|e| &e["rpc"]).collect();
        assert!(!rpcs.contains(&&json!("initialize")), "{summary}");
        assert_eq!(summary["get_stream"], json!([]));
        return;
    }
    assert_eq!(first["rpc"], "initialize", "{summary}");
    assert_eq!(
        summary["get_stream"],
        json!([[200, "text/event-stream"]]),
        "the SDK opens one GET stream after notifications/initialized: {summary}"
    );
    assert_eq!(summary["delete_status"], 200, "DELETE ends the session");
    assert_eq!(
        summary["after_close_status"], 404,
        "the deleted session is gone"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_over_streamable_http() {
    require_python_sdk();
    let mut daemon = start_daemon().await;
    let url = daemon.url.clone();
    let auto_args = ["--http", url.as_str()];
    let legacy_args = ["--http", url.as_str(), "--mode", "legacy"];
    let pinned_args = ["--http", url.as_str(), "--mode", "2026-07-28"];
    // One daemon, both eras at once.
    let (auto, legacy, pinned) = tokio::join!(
        run_python_client(&daemon, &auto_args),
        run_python_client(&daemon, &legacy_args),
        run_python_client(&daemon, &pinned_args),
    );
    for (summary, mode) in [
        (&auto, "auto"),
        (&legacy, "legacy"),
        (&pinned, "2026-07-28"),
    ] {
        assert_python_summary(summary, "http", mode);
        assert_python_http_exchanges(summary, mode);
    }
    assert!(
        daemon.stop(),
        "daemon exited uncleanly:\n{}",
        daemon.stderr()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_through_mcpmux_stdio() {
    require_python_sdk();
    let mut daemon = start_daemon().await;
    let command = stdio_command(&daemon.url);
    let auto_args = ["--stdio", command.as_str()];
    let legacy_args = ["--stdio", command.as_str(), "--mode", "legacy"];
    let pinned_args = ["--stdio", command.as_str(), "--mode", "2026-07-28"];
    let (auto, legacy, pinned) = tokio::join!(
        run_python_client(&daemon, &auto_args),
        run_python_client(&daemon, &legacy_args),
        run_python_client(&daemon, &pinned_args),
    );
    assert_python_summary(&auto, "stdio", "auto");
    assert_python_summary(&legacy, "stdio", "legacy");
    assert_python_summary(&pinned, "stdio", "2026-07-28");
    // The SDK closes the bridge's stdin and waits 2 s before killing its process group: a close
    // that took 2 s means the bridge did not exit by itself.
    for summary in [&auto, &legacy, &pinned] {
        let close = summary["close_seconds"].as_f64().unwrap();
        assert!(
            close < 2.0,
            "the bridge did not exit when the SDK closed its stdin ({close} s): {summary}"
        );
    }
    assert!(
        poll_until(Duration::from_secs(10), || async {
            bridges_for(&daemon.url).is_empty()
        })
        .await,
        "mcpmux stdio bridges outlived the Python host: {:?}",
        bridges_for(&daemon.url)
    );
    assert!(
        daemon.stop(),
        "daemon exited uncleanly:\n{}",
        daemon.stderr()
    );
}

// ---------------------------------------------------------------------------------------------
// The TypeScript SDK v2 client, a 2026-07-28 host

/// Runs `tests/interop/ts_client.mjs URL MODE` on the peers' Node; returns its JSON summary.
async fn run_ts_client(daemon: &Daemon, mode: &str) -> Value {
    let script =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/ts_client.mjs");
    let node = peers::npm_bin("node");
    let module = peers::npm_bin("node")
        .parent()
        .and_then(std::path::Path::parent)
        .unwrap()
        .join("@modelcontextprotocol/client/dist/index.mjs");
    let child = tokio::process::Command::new(&node)
        .arg(&script)
        .args([daemon.url.as_str(), mode])
        .env("MCP_CLIENT_MODULE", &module)
        .stdin(std::process::Stdio::null())
        .output();
    let output = tokio::time::timeout(PYTHON_DEADLINE, child).await;
    let output = output.expect("ts_client.mjs finished in time").unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let summary: Value = stdout
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| {
            panic!(
                "ts_client.mjs {mode}: no summary (status {}):\n{stdout}\n{}",
                output.status,
                String::from_utf8_lossy(&output.stderr)
            )
        });
    assert_eq!(
        summary["ok"],
        true,
        "ts_client.mjs {mode}: {summary}\n{}",
        daemon.stderr()
    );
    summary
}

/// The official TypeScript SDK v2 client pinned to 2026-07-28 and in its `auto` mode (which
/// probes `server/discover` and stays on 2026-07-28): the merged catalog, calls, a prompt, a
/// resource, and the upstreams' sampling, two-round elicitation and roots requests fulfilled by
/// the SDK's own handlers through `input_required` rounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn typescript_sdk_v2_as_a_2026_host() {
    let mut daemon = Daemon::start(&format!(
        "{}{}",
        test_upstream("alpha", &["--protocol-tools"]),
        test_upstream("beta", &["--protocol-tools"])
    ));
    let client = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&client, |names| {
            names.iter().any(|n| n == "alpha__sample") && names.iter().any(|n| n == "beta__elicit")
        })
        .await;
    // One after the other: a stdio upstream tells whose server request it sends only while one
    // host's call is in flight on it.
    let pinned = run_ts_client(&daemon, "2026-07-28").await;
    let auto = run_ts_client(&daemon, "auto").await;
    for summary in [&pinned, &auto] {
        assert_eq!(summary["protocol_version"], "2026-07-28", "{summary}");
        assert_eq!(summary["server"], "mcpmux", "{summary}");
        let tools = summary["tools"].as_array().unwrap();
        assert!(tools.contains(&json!("alpha__echo")) && tools.contains(&json!("beta__elicit")));
        assert_eq!(summary["echo"], "alpha");
        assert_eq!(summary["sample"], "sampled: sampled capital?");
        assert_eq!(
            summary["elicit"],
            r#"elicited: "accept" {"name":"ts-1"} | "accept" {"name":"ts-2"}"#
        );
        assert_eq!(
            summary["roots"],
            r#"roots: [{"uri":"file:///ts","name":"ts"}]"#
        );
        assert_eq!(summary["prompt"], "Hello, Ada from alpha");
        assert_eq!(summary["read"], "hello from beta");
        assert_eq!(summary["unknown_tool_error"], -32602);
    }
    assert!(
        daemon.stop(),
        "daemon exited uncleanly:\n{}",
        daemon.stderr()
    );
}

// ---------------------------------------------------------------------------------------------
// rmcp, the Rust SDK

fn rmcp_client(version: ProtocolVersion) -> ClientInfo {
    ClientInfo {
        meta: None,
        protocol_version: version,
        capabilities: Default::default(),
        client_info: Implementation {
            name: "mcpmux-interop-rmcp".into(),
            title: None,
            version: "0".into(),
            description: None,
            icons: None,
            website_url: None,
        },
    }
}

fn object(value: Value) -> Option<serde_json::Map<String, Value>> {
    value.as_object().cloned()
}

fn text_of(contents: &[ResourceContents]) -> &str {
    match contents {
        [ResourceContents::TextResourceContents { text, .. }] => text,
        other => panic!("expected one text content: {other:?}"),
    }
}

/// Lists tools, calls tools, gets the prompt, reads resources and pings through `peer`.
async fn exercise_rmcp(peer: &Peer<RoleClient>, version: &str) {
    let info = peer.peer_info().expect("initialized");
    assert_eq!(info.server_info.name, "mcpmux");
    assert_eq!(info.protocol_version.to_string(), version);
    assert!(info.capabilities.tools.is_some() && info.capabilities.prompts.is_some());

    let tools = peer.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    assert_same_tools_per_upstream(&names);

    for upstream in ["alpha", "beta"] {
        let result = peer
            .call_tool(CallToolRequestParams {
                meta: None,
                name: format!("{upstream}__echo").into(),
                arguments: object(json!({"text": "hi"})),
                task: None,
            })
            .await
            .unwrap();
        assert_ne!(result.is_error, Some(true), "{result:?}");
        let structured = result.structured_content.expect("structuredContent");
        assert_eq!(structured["upstream"], upstream);
        assert_eq!(structured["params"]["name"], "echo");
        assert_eq!(structured["params"]["arguments"], json!({"text": "hi"}));
    }
    let unknown = peer
        .call_tool(CallToolRequestParams {
            meta: None,
            name: "gamma__echo".into(),
            arguments: None,
            task: None,
        })
        .await;
    match unknown {
        Err(ServiceError::McpError(e)) => assert_eq!(e.code.0, -32602, "{e:?}"),
        other => panic!("unknown tool should be a JSON-RPC error: {other:?}"),
    }

    let prompt = peer
        .get_prompt(GetPromptRequestParams {
            meta: None,
            name: "alpha__greet".into(),
            arguments: object(json!({"name": "Ada"})),
        })
        .await
        .unwrap();
    match &prompt.messages[..] {
        [first, ..] => match &first.content {
            PromptMessageContent::Text { text } => assert_eq!(text, "Hello, Ada from alpha"),
            other => panic!("expected text: {other:?}"),
        },
        [] => panic!("prompt without messages"),
    }

    let resources = peer.list_all_resources().await.unwrap();
    let uris: Vec<&str> = resources.iter().map(|r| r.raw.uri.as_str()).collect();
    assert_eq!(uris, ["alpha+test://alpha/hello", "beta+test://beta/hello"]);
    let hello = peer
        .read_resource(ReadResourceRequestParams {
            meta: None,
            uri: "alpha+test://alpha/hello".into(),
        })
        .await
        .unwrap();
    assert_eq!(text_of(&hello.contents), "hello from alpha");
    let item = peer
        .read_resource(ReadResourceRequestParams {
            meta: None,
            uri: "beta+test://beta/item/7".into(),
        })
        .await
        .unwrap();
    assert_eq!(text_of(&item.contents), "item 7 from beta");
    let templates = peer.list_all_resource_templates().await.unwrap();
    let templates: Vec<&str> = templates
        .iter()
        .map(|t| t.raw.uri_template.as_str())
        .collect();
    assert_eq!(
        templates,
        ["alpha+test://alpha/item/{id}", "beta+test://beta/item/{id}"]
    );

    let pong = peer
        .send_request(ClientRequest::PingRequest(Default::default()))
        .await
        .unwrap();
    assert!(matches!(pong, ServerResult::EmptyResult(_)), "{pong:?}");
}

/// Cancels the service; returns how long closing took.
async fn close(service: RunningService<RoleClient, ClientInfo>) -> Duration {
    let started = Instant::now();
    let reason = tokio::time::timeout(Duration::from_secs(30), service.cancel())
        .await
        .expect("rmcp close took over 30 s")
        .unwrap();
    assert!(matches!(reason, QuitReason::Cancelled), "{reason:?}");
    started.elapsed()
}

fn sessions_closed(daemon: &Daemon) -> usize {
    daemon.stderr().matches("Host session closed.").count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmcp_over_streamable_http() {
    let mut daemon = start_daemon().await;
    for version in [ProtocolVersion::V_2025_03_26, ProtocolVersion::V_2025_06_18] {
        let expected = version.to_string();
        let closed_before = sessions_closed(&daemon);
        let started = Instant::now();
        let transport = StreamableHttpClientTransport::from_uri(daemon.url.as_str());
        let service = rmcp_client(version)
            .serve(transport)
            .await
            .unwrap_or_else(|e| panic!("rmcp could not initialize: {e}\n{}", daemon.stderr()));
        exercise_rmcp(&service, &expected).await;
        let closing = close(service).await;
        eprintln!(
            "rmcp over HTTP ({expected}): {:.2?} in all, close {closing:.2?}",
            started.elapsed()
        );
        // rmcp DELETEs its session before `cancel` returns.
        assert!(
            poll_until(Duration::from_secs(5), || async {
                sessions_closed(&daemon) > closed_before
            })
            .await,
            "the daemon never saw the session end:\n{}",
            daemon.stderr()
        );
    }
    assert!(
        daemon.stop(),
        "daemon exited uncleanly:\n{}",
        daemon.stderr()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmcp_through_mcpmux_stdio() {
    let mut daemon = start_daemon().await;
    let stderr = std::fs::File::create(daemon.dir.path().join("bridge.stderr")).unwrap();
    let mut command = tokio::process::Command::new(MCPMUX);
    command.arg("stdio").arg("--url").arg(&daemon.url);
    let started = Instant::now();
    let (transport, _) = TokioChildProcess::builder(command)
        .stderr(stderr)
        .spawn()
        .unwrap();
    let bridge = transport.id().expect("bridge pid");
    let service = rmcp_client(ProtocolVersion::V_2025_06_18)
        .serve(transport)
        .await
        .unwrap_or_else(|e| panic!("rmcp could not initialize: {e}\n{}", daemon.stderr()));
    exercise_rmcp(&service, "2025-06-18").await;
    // rmcp closes the bridge's stdin, waits up to 3 s for it to exit, then kills it.
    let closing = close(service).await;
    eprintln!(
        "rmcp through mcpmux stdio: {:.2?} in all, close {closing:.2?}",
        started.elapsed()
    );
    assert!(
        closing < Duration::from_secs(3),
        "the bridge did not exit when rmcp closed its stdin ({closing:.2?})"
    );
    assert!(
        poll_until(Duration::from_secs(10), || async { !alive(bridge) }).await,
        "the bridge {bridge} outlived its rmcp host"
    );
    let bridge_log =
        std::fs::read_to_string(daemon.dir.path().join("bridge.stderr")).unwrap_or_default();
    assert!(
        !bridge_log.contains("ERROR"),
        "bridge stderr:\n{bridge_log}"
    );
    assert!(
        daemon.stop(),
        "daemon exited uncleanly:\n{}",
        daemon.stderr()
    );
}

// ---------------------------------------------------------------------------------------------
// Found by the interop runs above

/// MCP stdio shutdown: the host closes the server's stdin and waits for it to exit. Both SDKs do
/// so and then, after their grace period (Python 2 s, rmcp 3 s), kill the bridge. The bridge once
/// outlived its stdin whenever a session had been initialized: its server-to-host event stream
/// kept the output queue open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_bridge_exits_when_its_host_closes_stdin() {
    let mut daemon = start_daemon().await;
    let Bridge {
        child: mut bridge,
        mut stdin,
        stdout: mut lines,
    } = spawn_bridge(&daemon.url);
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "interop", "version": "0"}}});
    let input = format!(
        "{init}\n{}\n{}\n",
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 1, "method": "ping"})
    );
    stdin.write_all(input.as_bytes()).await.unwrap();
    stdin.flush().await.unwrap();
    for id in [0, 1] {
        let line = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
            .await
            .expect("bridge answered")
            .unwrap()
            .expect("a line");
        let message: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(message["id"], id, "{line}");
        assert!(message.get("result").is_some(), "{line}");
    }
    drop(stdin);
    let deadline = Instant::now() + Duration::from_secs(5);
    let status = loop {
        if let Some(status) = bridge.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            break None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    if status.is_none() {
        bridge.kill().await.unwrap();
    }
    daemon.stop();
    let status = status.expect("`mcpmux stdio` still running 5 s after its stdin closed");
    assert!(status.success(), "bridge exited with {status}");
}

/// A host may hand the bridge a file or a terminal rather than pipes: it reads and writes those
/// through tokio's own stdin and stdout (pipes it reads and writes through epoll), with the same
/// answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_bridge_reads_a_file_and_writes_a_file() {
    let mut daemon = start_daemon().await;
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (dir.path().join("in.jsonl"), dir.path().join("out.jsonl"));
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "interop", "version": "0"}}});
    let lines = [
        init,
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
    ];
    let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&input, text).unwrap();
    let mut bridge = std::process::Command::new(MCPMUX)
        .args(["stdio", "--url", &daemon.url])
        .env_remove("MCPMUX_CONFIG")
        .stdin(std::fs::File::open(&input).unwrap())
        .stdout(std::fs::File::create(&output).unwrap())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = bridge.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = bridge.kill();
            break None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    daemon.stop();
    let status = status.expect("`mcpmux stdio` still running 30 s after its input file ended");
    assert!(status.success(), "bridge exited with {status}");
    let written = std::fs::read_to_string(&output).unwrap();
    let mut ids: Vec<i64> = (written.lines())
        .map(|line| {
            let message: Value = serde_json::from_str(line).unwrap();
            assert!(message.get("result").is_some(), "{line}");
            message["id"].as_i64().unwrap()
        })
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, [0, 1, 2], "{written}");
    assert!(written.contains("\"tools\""), "{written}");
}
