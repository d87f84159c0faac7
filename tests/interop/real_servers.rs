//! The gateway in front of real third-party MCP servers from npm (`server-everything`,
//! `server-memory`, pinned in `tests/peers/` and installed under the target dir) next to our own
//! test upstream: merged namespaced listings, routing of calls, prompts and resources, and the
//! `mcpmux stdio` bridge.
//!
//! One test, so the servers' start-up cost is paid once.

use std::collections::HashMap;
use std::time::Duration;

use crate::common::{
    Bridge, Client, Daemon, Schemas, npm_upstream, poll_until, spawn_bridge, test_upstream,
    toml_str,
};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

fn strings(items: &[Value], key: &str) -> Vec<String> {
    items
        .iter()
        .map(|i| i[key].as_str().unwrap().to_owned())
        .collect()
}

/// The first text content of a tool result.
fn text(result: &Value) -> String {
    result["content"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|c| c["type"] == "text")
        .and_then(|c| c["text"].as_str())
        .unwrap_or_default()
        .to_owned()
}

/// Replaces every `{variable}` of an RFC 6570 template with `value`.
fn expand(template: &str, value: &str) -> String {
    let mut out = String::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let close = rest[open..].find('}').map_or(rest.len(), |c| open + c + 1);
        out.push_str(value);
        rest = &rest[close..];
    }
    out.push_str(rest);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_npm_servers_behind_one_endpoint() {
    let memory_dir = tempfile::tempdir().unwrap();
    let memory_file = memory_dir.path().join("memory.jsonl");
    let config = format!(
        "{}\n{}env = {{ MEMORY_FILE_PATH = {} }}\n\n{}",
        npm_upstream("everything", "mcp-server-everything", &[]),
        npm_upstream("memory", "mcp-server-memory", &[]),
        toml_str(memory_file.to_str().unwrap()),
        test_upstream("mine", &[])
    );
    let daemon = Daemon::start(&config);
    let client = Client::connect(&daemon.url).await;

    // ---- Listings: every upstream's items, namespaced, merged, sorted, no duplicates.
    let tools = daemon
        .wait_for_tools(&client, |n| {
            ["everything__", "memory__", "mine__"]
                .iter()
                .all(|p| n.iter().any(|t| t.starts_with(p)))
        })
        .await;
    // server-everything asks mcpmux for roots as it starts, before any host is at work: it is
    // refused as a client without roots refuses it (-32601, so it asks again during a call,
    // whose host answers), never as an internal error.
    let refusals = || {
        (daemon.audit_json().lines())
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|r| r["method"] == "roots/list" && r["outcome"] != "ok")
            .collect::<Vec<Value>>()
    };
    let recorded = poll_until(Duration::from_secs(10), || async { !refusals().is_empty() }).await;
    assert!(
        recorded,
        "server-everything's roots/list at start is not in the audit log"
    );
    let refusals = refusals();
    assert!(
        refusals.iter().all(|r| r["error_code"] == -32601),
        "roots/list was refused otherwise: {refusals:?}"
    );
    for expected in [
        "everything__echo",
        "everything__get-sum",
        "memory__create_entities",
        "memory__read_graph",
        "memory__search_nodes",
        "mine__echo",
        "mine__crash",
    ] {
        assert!(
            tools.iter().any(|t| t == expected),
            "{expected} missing from {tools:?}"
        );
    }
    assert!(
        tools.iter().all(|t| ["everything__", "memory__", "mine__"]
            .iter()
            .any(|p| t.starts_with(p))),
        "a tool without a known prefix: {tools:?}"
    );
    let mut sorted = tools.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted, tools, "tools are sorted and listed once each");

    let prompt_items = client.list_all("prompts/list", "prompts").await;
    let prompts = strings(&prompt_items, "name");
    assert!(
        prompts.iter().any(|p| p.starts_with("everything__")),
        "{prompts:?}"
    );
    assert!(prompts.iter().any(|p| p == "mine__greet"), "{prompts:?}");
    let mut sorted = prompts.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted, prompts, "prompts are sorted and listed once each");

    let resources = strings(&client.list_all("resources/list", "resources").await, "uri");
    assert!(
        resources.iter().any(|r| r.starts_with("everything+")),
        "{resources:?}"
    );
    assert!(
        resources.iter().any(|r| r == "mine+test://mine/hello"),
        "{resources:?}"
    );
    let templates = client
        .list_all("resources/templates/list", "resourceTemplates")
        .await;
    let template_uris = strings(&templates, "uriTemplate");
    assert!(
        template_uris.iter().any(|t| t.starts_with("everything+")),
        "{template_uris:?}"
    );
    assert!(
        template_uris
            .iter()
            .any(|t| t == "mine+test://mine/item/{id}"),
        "{template_uris:?}"
    );

    // ---- Calls reach the right upstream and return its answer.
    let echo = client
        .result(
            "tools/call",
            json!({"name": "everything__echo", "arguments": {"message": "hi"}}),
        )
        .await;
    assert_eq!(text(&echo), "Echo: hi", "{echo}");
    let sum = client
        .result(
            "tools/call",
            json!({"name": "everything__get-sum", "arguments": {"a": 2, "b": 3}}),
        )
        .await;
    assert!(text(&sum).contains('5'), "{sum}");

    let entity = "mcpmux-test-entity";
    let created = client
        .result(
            "tools/call",
            json!({"name": "memory__create_entities", "arguments": {"entities": [
                {"name": entity, "entityType": "test", "observations": ["made by the mcpmux tests"]}
            ]}}),
        )
        .await;
    assert_ne!(created["isError"], true, "{created}");
    let graph = client
        .result(
            "tools/call",
            json!({"name": "memory__read_graph", "arguments": {}}),
        )
        .await;
    assert!(text(&graph).contains(entity), "{graph}");
    let stored = std::fs::read_to_string(&memory_file).unwrap_or_default();
    assert!(
        stored.contains(entity),
        "MEMORY_FILE_PATH did not reach the memory server: {stored:?}"
    );

    let mine = client
        .result(
            "tools/call",
            json!({"name": "mine__echo", "arguments": {"x": true}}),
        )
        .await;
    assert_eq!(mine["structuredContent"]["upstream"], "mine");

    // ---- A prompt without required arguments.
    let simple = prompt_items
        .iter()
        .filter(|p| p["name"].as_str().unwrap().starts_with("everything__"))
        .find(|p| {
            p["arguments"]
                .as_array()
                .is_none_or(|args| args.iter().all(|a| a["required"] != true))
        })
        .unwrap_or_else(|| panic!("no everything prompt without required args: {prompts:?}"));
    let got = client
        .result("prompts/get", json!({"name": simple["name"]}))
        .await;
    assert!(
        got["messages"].as_array().is_some_and(|m| !m.is_empty()),
        "{got}"
    );

    // ---- A listed resource, and one read through a template.
    let listed = resources
        .iter()
        .find(|r| r.starts_with("everything+"))
        .unwrap();
    let read = client
        .result("resources/read", json!({"uri": listed}))
        .await;
    assert_eq!(read["contents"][0]["uri"], listed.as_str(), "{read}");
    let template = templates
        .iter()
        .filter(|t| {
            t["uriTemplate"]
                .as_str()
                .unwrap()
                .starts_with("everything+")
        })
        .max_by_key(|t| t["uriTemplate"].as_str().unwrap().contains("text"))
        .unwrap();
    let uri = expand(template["uriTemplate"].as_str().unwrap(), "1");
    let read = client.result("resources/read", json!({"uri": uri})).await;
    let contents = read["contents"].as_array().unwrap();
    assert!(!contents.is_empty(), "{read}");
    assert_eq!(contents[0]["uri"], uri.as_str(), "{read}");
    assert!(
        contents[0]["text"].is_string() || contents[0]["blob"].is_string(),
        "{read}"
    );

    // ---- Resource links in a tool result carry exposed URIs, readable through mcpmux.
    let links = client
        .result(
            "tools/call",
            json!({"name": "everything__get-resource-links", "arguments": {"count": 2}}),
        )
        .await;
    let linked: Vec<&str> = links["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["type"] == "resource_link")
        .map(|c| c["uri"].as_str().unwrap())
        .collect();
    assert_eq!(linked.len(), 2, "{links}");
    for uri in &linked {
        assert!(uri.starts_with("everything+"), "{links}");
        let read = client.result("resources/read", json!({"uri": uri})).await;
        assert_eq!(read["contents"][0]["uri"], *uri, "{read}");
    }
    // A host on 2024-11-05 (no resource_link type) gets them as text, valid for its schema.
    let old = Client::connect_with(&daemon.url, "2024-11-05", json!({})).await;
    let fitted = old
        .result(
            "tools/call",
            json!({"name": "everything__get-resource-links", "arguments": {"count": 2}}),
        )
        .await;
    assert!(
        fitted["content"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["type"] == "text"),
        "{fitted}"
    );

    // ---- The stdio bridge: a stdio-only host talking to the same daemon.
    let Bridge {
        child: mut bridge,
        mut stdin,
        mut stdout,
    } = spawn_bridge(&daemon.url);
    let version = "2025-06-18";
    let lines = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": {},
            "clientInfo": {"name": "stdio-host", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}),
        json!({"jsonrpc": "2.0", "id": "three", "method": "tools/call",
            "params": {"name": "everything__echo", "arguments": {"message": "over stdio"}}}),
    ];
    for line in &lines {
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
    }
    stdin.flush().await.unwrap();

    let methods: HashMap<Value, &str> = [
        (json!(1), "initialize"),
        (json!(2), "tools/list"),
        (json!("three"), "tools/call"),
    ]
    .into_iter()
    .collect();
    let schemas = Schemas::get(version);
    let mut answers: HashMap<Value, Value> = HashMap::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while answers.len() < methods.len() {
        let line = tokio::time::timeout_at(deadline, stdout.next_line())
            .await
            .unwrap_or_else(|_| panic!("the bridge answered only {answers:?}"))
            .unwrap()
            .unwrap_or_else(|| panic!("the bridge closed stdout; answers: {answers:?}"));
        let message: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("the bridge wrote a non-JSON line ({e}): {line}"));
        let id = message.get("id").cloned();
        let method = id.as_ref().and_then(|id| methods.get(id)).copied();
        schemas.check_message(&message, method);
        if let (Some(id), Some(_)) = (id, method) {
            assert!(
                answers.insert(id, message.clone()).is_none(),
                "two answers for one id: {message}"
            );
        }
    }
    for (id, answer) in &answers {
        assert!(
            answer.get("error").is_none(),
            "request {id} failed: {answer}"
        );
    }
    assert_eq!(answers[&json!(1)]["result"]["protocolVersion"], version);
    let listed: Vec<String> = strings(
        answers[&json!(2)]["result"]["tools"].as_array().unwrap(),
        "name",
    );
    assert!(
        listed.iter().any(|t| t == "everything__echo")
            && listed.iter().any(|t| t == "memory__read_graph")
            && listed.iter().any(|t| t == "mine__echo"),
        "{listed:?}"
    );
    assert_eq!(
        text(&answers[&json!("three")]["result"]),
        "Echo: over stdio"
    );

    // Closing stdin ends the bridge.
    drop(stdin);
    let exited = tokio::time::timeout(Duration::from_secs(10), bridge.wait()).await;
    let status = exited
        .unwrap_or_else(|_| panic!("the bridge did not exit within 10 s after its stdin closed"))
        .unwrap();
    assert!(status.success(), "the bridge exited with {status}");
}
