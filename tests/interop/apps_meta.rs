//! What of an MCP App's tool reaches a host through mcpmux: an upstream on the official SDKs
//! (`apps_server.mjs`: `@modelcontextprotocol/server` 2.4 with ext-apps' `registerAppTool` and
//! `registerAppResource`) declares an app tool whose `_meta.ui` has every field (`resourceUri`,
//! `csp`, `permissions`, `domain`, `prefersBorder`, `visibility`, and one a later version might
//! add). The host sees the tool as the upstream declares it but for its name and its page's URI
//! (`ui://apps+…`, which reads the page), in `tools/list` of both eras and in a search-mode
//! profile's results; the page's own `_meta.ui` (on its listing and its contents) passes as it
//! is. The app-only tool is listed only to hosts that declared the UI extension, in both eras,
//! and never found by a search.

use std::process::Stdio;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt};

use super::apps::ui_capabilities;
use crate::common::{Client, Daemon, Schemas, peers, read_messages, toml_list, toml_str};

const MODERN: &str = "2026-07-28";
const PAGE: &str = "ui://dashboard/page.html";
const EXPOSED_PAGE: &str = "ui://apps+dashboard/page.html";
const APP_ONLY: &str = "apps__refresh-dashboard";

const FINDER: &str = r#"
[profiles.finder]
tools = "search"
path = true
"#;

fn script() -> String {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/apps_server.mjs");
    path.to_str().unwrap().to_owned()
}

fn node_modules() -> String {
    peers::npm_modules().to_str().unwrap().to_owned()
}

/// What the app server itself answers `method` (over stdio, to a client declaring the UI
/// extension): the reference the host's view is compared with.
async fn upstream_own(method: &str) -> Value {
    let mut child = tokio::process::Command::new(peers::npm_bin("node"))
        .arg(script())
        .env("MCP_NODE_MODULES", node_modules())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let messages = [
        json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": ui_capabilities(),
            "clientInfo": {"name": "reference", "version": "0"}}}),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        json!({"jsonrpc": "2.0", "id": 2, "method": method, "params": {}}),
    ];
    for message in messages {
        stdin
            .write_all(format!("{message}\n").as_bytes())
            .await
            .unwrap();
    }
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let answer = tokio::time::timeout(Duration::from_secs(60), async {
        while let Some(line) = lines.next_line().await.unwrap() {
            let message: Value = serde_json::from_str(&line).unwrap();
            if message["id"] == 2 {
                return message;
            }
        }
        panic!("the app server closed without answering {method}")
    })
    .await
    .expect("the app server answers in time");
    answer["result"].clone()
}

/// One request of a 2026-07-28 host declaring `capabilities`: its answer, schema-checked.
async fn modern(url: &str, method: &str, mut params: Value, capabilities: &Value) -> Value {
    params["_meta"] = json!({
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": capabilities,
        "io.modelcontextprotocol/clientInfo": {"name": "apps-modern-host", "version": "0"},
    });
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", MODERN)
        .header("mcp-method", method);
    if let Some(name) = (params.get("name").or(params.get("uri"))).and_then(Value::as_str) {
        request = request.header("mcp-name", name);
    }
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
    let response = request.body(body.to_string()).send().await.unwrap();
    let answer = read_messages(response).await.pop().expect("an answer");
    Schemas::get(MODERN).check_message(&answer, Some(method));
    assert!(answer.get("error").is_none(), "{method}: {answer}");
    answer["result"].clone()
}

/// The item of `items` whose `key` is `value`.
fn find<'a>(items: &'a Value, key: &str, value: &str) -> Option<&'a Value> {
    (items.as_array().unwrap().iter()).find(|item| item[key] == value)
}

/// `tool` as a host should see it: named `apps__…`, its page's URI exposed (in `_meta.ui` and
/// the flat key), everything else as the upstream declared it.
fn exposed(tool: &Value) -> Value {
    let mut tool = tool.clone();
    tool["name"] = json!(format!("apps__{}", tool["name"].as_str().unwrap()));
    tool["_meta"]["ui"]["resourceUri"] = json!(EXPOSED_PAGE);
    tool["_meta"]["ui/resourceUri"] = json!(EXPOSED_PAGE);
    tool
}

/// The names of `tools`.
fn names(tools: &Value) -> Vec<&str> {
    (tools.as_array().unwrap().iter())
        .map(|t| t["name"].as_str().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_ui_field_but_the_page_uri_reaches_hosts_as_the_app_server_declared_it() {
    let node = peers::npm_bin("node");
    let config = format!(
        "[upstreams.apps]\ncommand = {}\nargs = {}\nenv = {{ MCP_NODE_MODULES = {} }}\nstartup_timeout = \"300s\"\n{FINDER}",
        toml_str(node.to_str().unwrap()),
        toml_list(&[script()]),
        toml_str(&node_modules()),
    );
    let daemon = Daemon::start(&config);
    let renders = Client::connect_with(&daemon.url, "2025-11-25", ui_capabilities()).await;
    daemon
        .wait_for_tools(&renders, |n| n.iter().any(|t| t == "apps__show-dashboard"))
        .await;

    // What the upstream itself declares: the app tool with every field of `_meta.ui`.
    let own_tools = upstream_own("tools/list").await;
    let own = find(&own_tools["tools"], "name", "show-dashboard").unwrap();
    let ui = own["_meta"]["ui"].as_object().unwrap();
    for field in [
        "resourceUri",
        "csp",
        "permissions",
        "domain",
        "prefersBorder",
        "visibility",
        "x-future-field",
    ] {
        assert!(
            ui.contains_key(field),
            "the upstream declares {field}: {own}"
        );
    }
    let wanted = exposed(own);
    let own_refresh = find(&own_tools["tools"], "name", "refresh-dashboard").unwrap();
    let wanted_refresh = exposed(own_refresh);

    // ---- tools/list, handshake era: the tool as declared but for its name and page URI; the
    // app-only tool only for the host that renders apps.
    let plain = Client::connect(&daemon.url).await;
    let listed = json!(renders.list_all("tools/list", "tools").await);
    assert_eq!(find(&listed, "name", "apps__show-dashboard"), Some(&wanted));
    assert_eq!(find(&listed, "name", APP_ONLY), Some(&wanted_refresh));
    let listed = json!(plain.list_all("tools/list", "tools").await);
    assert_eq!(find(&listed, "name", "apps__show-dashboard"), Some(&wanted));
    assert_eq!(
        names(&listed),
        ["apps__plain-echo", "apps__show-dashboard"],
        "a host without the UI extension is not shown the app-only tool"
    );

    // ---- tools/list, 2026-07-28: the same, the extension declared in each request's envelope.
    let with_ui = ui_capabilities();
    let without = json!({});
    let listed = modern(&daemon.url, "tools/list", json!({}), &with_ui).await;
    assert_eq!(
        find(&listed["tools"], "name", "apps__show-dashboard"),
        Some(&wanted)
    );
    assert_eq!(
        find(&listed["tools"], "name", APP_ONLY),
        Some(&wanted_refresh)
    );
    let listed = modern(&daemon.url, "tools/list", json!({}), &without).await;
    assert_eq!(
        find(&listed["tools"], "name", "apps__show-dashboard"),
        Some(&wanted)
    );
    assert_eq!(
        names(&listed["tools"]),
        ["apps__plain-echo", "apps__show-dashboard"]
    );

    // ---- The page: listed and read under the exposed URI, its own `_meta.ui` as declared.
    let own_resources = upstream_own("resources/list").await;
    let own_page = find(&own_resources["resources"], "uri", PAGE).unwrap();
    let mut wanted_page = own_page.clone();
    wanted_page["uri"] = json!(EXPOSED_PAGE);
    let resources = json!(renders.list_all("resources/list", "resources").await);
    assert_eq!(find(&resources, "uri", EXPOSED_PAGE), Some(&wanted_page));
    let read = renders
        .result("resources/read", json!({"uri": EXPOSED_PAGE}))
        .await;
    let modern_read = modern(
        &daemon.url,
        "resources/read",
        json!({"uri": EXPOSED_PAGE}),
        &with_ui,
    )
    .await;
    for read in [&read, &modern_read] {
        let content = &read["contents"][0];
        assert_eq!(content["uri"], EXPOSED_PAGE, "{read}");
        assert_eq!(content["mimeType"], "text/html;profile=mcp-app", "{read}");
        assert!(
            content["text"]
                .as_str()
                .unwrap()
                .contains("<title>Dashboard</title>"),
            "{read}"
        );
        assert_eq!(content["_meta"]["ui"], own_page["_meta"]["ui"], "{read}");
    }

    // ---- A search-mode profile: the app tool is found with its `_meta` as listed; the app-only
    // tool is never found, for a host with the UI extension or without, in either era, even
    // by its exact name.
    let finder = format!("{}/finder", daemon.url);
    let finder_renders = Client::connect_with(&finder, "2025-11-25", ui_capabilities()).await;
    let finder_plain = Client::connect(&finder).await;
    let listed = json!(finder_renders.list_all("tools/list", "tools").await);
    assert_eq!(names(&listed), ["call_tool", "search_tools"]);
    for query in ["sales dashboard", "refresh dashboard figures", APP_ONLY] {
        let arguments = json!({"query": query, "limit": 10});
        let params = json!({"name": "search_tools", "arguments": arguments});
        let mut found = Vec::new();
        for client in [&finder_renders, &finder_plain] {
            found.push(client.result("tools/call", params.clone()).await);
        }
        for capabilities in [&with_ui, &without] {
            found.push(modern(&finder, "tools/call", params.clone(), capabilities).await);
        }
        for result in &found {
            let tools = &result["structuredContent"]["tools"];
            assert!(find(tools, "name", APP_ONLY).is_none(), "{query}: {result}");
            let dashboard = find(tools, "name", "apps__show-dashboard")
                .unwrap_or_else(|| panic!("{query}: the app tool is found: {result}"));
            assert_eq!(dashboard["_meta"], wanted["_meta"], "{query}: {result}");
        }
    }
}
