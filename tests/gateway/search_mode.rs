//! A profile with `tools = "search"`: its hosts list the search tool, the call tool and the
//! `always` tools; the search tool ranks the view's tools (never a hidden one) and is audited with
//! what it returned; the call tool calls a found tool as a direct call would — progress and
//! sampling reach the host that called, a hidden or unknown name is a tool result saying how to
//! search (the same for both), the audit record is the real tool's; tools/list_changed reaches
//! the profile's hosts only when the listed set changes; the admin API and `mcpmux tools
//! --search` run the same search.

use std::time::Duration;

use crate::common::{Client, Daemon, MCPMUX, poll_until, test_upstream};
use serde_json::{Value, json};

const PROFILES: &str = r#"
[profiles.finder]
tools = "search"
always = ["b__echo", "*__extra_*"]
deny = ["tool:a__crash"]
path = true

[profiles.named]
tools = "search"
search_tool_name = "find_tools"
search_tool_description = "Look tools up by what they do."
call_tool_name = "run_tool"
path = true
"#;

fn names(tools: &[Value]) -> Vec<&str> {
    tools.iter().map(|t| t["name"].as_str().unwrap()).collect()
}

/// What the search tool returned: the tools' names, and the whole structured result.
async fn search(client: &Client, tool: &str, query: &str, limit: u64) -> (Vec<String>, Value) {
    let result = client
        .result(
            "tools/call",
            json!({"name": tool, "arguments": {"query": query, "limit": limit}}),
        )
        .await;
    assert_ne!(result["isError"], true, "{result}");
    let structured = result["structuredContent"].clone();
    let text = result["content"][0]["text"].as_str().unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(text).unwrap(),
        structured,
        "the text is the structured result, serialized"
    );
    let found = structured["tools"].as_array().unwrap();
    (
        found
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect(),
        structured,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_search_mode_profile_lists_two_tools_finds_the_rest_and_calls_them_as_a_direct_call_would()
 {
    let config = format!(
        "{}{}{PROFILES}",
        test_upstream("a", &["--protocol-tools"]),
        test_upstream("b", &["--protocol-tools"])
    );
    let daemon = Daemon::start(&config);
    let full = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&full, |n| {
            ["a__echo", "b__echo"]
                .iter()
                .all(|t| n.iter().any(|x| x == t))
        })
        .await;
    let capabilities = json!({"sampling": {}});
    let finder_url = format!("{}/finder", daemon.url);
    let finder = Client::connect_with(&finder_url, "2025-11-25", capabilities).await;

    // Listed: the two tools and what `always` names, by name.
    let listed = finder.list_all("tools/list", "tools").await;
    assert_eq!(names(&listed), ["b__echo", "call_tool", "search_tools"]);
    let search_tool = &listed[2];
    assert!(
        search_tool["description"]
            .as_str()
            .unwrap()
            .contains("call_tool"),
        "it tells the model how to call what it finds: {search_tool}"
    );
    assert_eq!(search_tool["inputSchema"]["required"], json!(["query"]));

    // A search: best first, each with what a model needs to call it at once.
    let (found, structured) = search(&finder, "search_tools", "progress notifications", 5).await;
    assert!(
        found[0].ends_with("__progress"),
        "progress first: {found:?}"
    );
    let first = &structured["tools"][0];
    assert!(first["description"].as_str().unwrap().contains("progress"));
    assert_eq!(first["inputSchema"]["type"], "object", "{first}");
    assert!(
        first["why"].as_str().unwrap().starts_with("matches "),
        "{first}"
    );
    let (exact, structured) = search(&finder, "search_tools", "a__slow", 3).await;
    assert_eq!(exact[0], "a__slow");
    assert_eq!(structured["tools"][0]["why"], "its name is the query");
    // A hidden tool is never found; the same tool of the other upstream is.
    let (crash, _) = search(&finder, "search_tools", "exits the server crash", 50).await;
    assert!(crash.contains(&"b__crash".to_owned()), "{crash:?}");
    assert!(!crash.contains(&"a__crash".to_owned()), "{crash:?}");
    // Arguments it cannot use are a tool error the model can read.
    let bad = finder
        .result(
            "tools/call",
            json!({"name": "search_tools", "arguments": {"query": "x", "limit": 500}}),
        )
        .await;
    assert_eq!(bad["isError"], true, "{bad}");
    assert!(
        bad["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("`limit` is 500"),
        "{bad}"
    );

    // The call tool: the found tool's own result.
    let echoed = finder
        .result(
            "tools/call",
            json!({"name": "call_tool", "arguments": {"name": "a__echo", "arguments": {"said": "hi"}}}),
        )
        .await;
    let direct = full
        .result(
            "tools/call",
            json!({"name": "a__echo", "arguments": {"said": "hi"}}),
        )
        .await;
    assert_eq!(echoed, direct);
    // A hidden or unknown name is a tool result the model can read, saying how to search, and
    // the same for both (a hidden tool is as invisible as one that does not exist); called
    // directly, both are the same JSON-RPC error.
    let mut said = Vec::new();
    for name in ["a__crash", "nowhere__tool"] {
        let via_call = finder
            .result(
                "tools/call",
                json!({"name": "call_tool", "arguments": {"name": name, "arguments": {}}}),
            )
            .await;
        assert_eq!(via_call["isError"], true, "{via_call}");
        let text = via_call["content"][0]["text"].as_str().unwrap_or_default();
        assert!(
            text.contains(&format!("no tool named `{name}`")) && text.contains("`search_tools`"),
            "{text}"
        );
        said.push(text.replace(name, "NAME"));
        let direct = finder
            .request("tools/call", json!({"name": name, "arguments": {}}))
            .await;
        assert_eq!(direct["error"]["code"], -32602, "{direct}");
    }
    assert_eq!(said[0], said[1], "a hidden tool is told apart from no tool");
    let nameless = finder
        .result(
            "tools/call",
            json!({"name": "call_tool", "arguments": {"arguments": {}}}),
        )
        .await;
    assert_eq!(nameless["isError"], true, "{nameless}");
    let text = nameless["content"][0]["text"].as_str().unwrap_or_default();
    assert!(
        text.contains("string `name`") && text.contains("`search_tools`"),
        "{text}"
    );

    // Progress and sampling of the called tool reach the host that called.
    let call = finder.start(
        "tools/call",
        json!({"name": "call_tool",
               "arguments": {"name": "b__progress", "arguments": {"steps": 3, "delay_ms": 5}},
               "_meta": {"progressToken": "p-search"}}),
    );
    let (before, answer) = call.finish().await;
    assert_eq!(before.len(), 3, "{before:?}");
    for progress in &before {
        assert_eq!(progress["method"], "notifications/progress");
        assert_eq!(progress["params"]["progressToken"], "p-search");
    }
    assert!(answer["result"].is_object(), "{answer}");
    let mut sample = finder.start(
        "tools/call",
        json!({"name": "call_tool",
               "arguments": {"name": "a__sample", "arguments": {"prompt": "found me"}}}),
    );
    let request = sample.next().await;
    assert_eq!(request["method"], "sampling/createMessage", "{request}");
    finder
        .respond(
            &request["id"],
            json!({"role": "assistant", "content": {"type": "text", "text": "sampled"},
                   "model": "m"}),
        )
        .await;
    let (_, answer) = sample.finish().await;
    assert_eq!(
        answer["result"]["content"][0]["text"], "sampled: sampled",
        "{answer}"
    );

    // The audit log: the search with what it returned; a call tool's call as the real tool's.
    let audit = daemon.audit_json();
    let records: Vec<Value> = audit
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let searched = records
        .iter()
        .find(|r| r["target"] == "search_tools" && r["outcome"] == "ok")
        .unwrap_or_else(|| panic!("no search record: {audit}"));
    assert!(
        searched["detail"]
            .as_str()
            .unwrap()
            .starts_with("returned b__progress, a__progress")
            || searched["detail"]
                .as_str()
                .unwrap()
                .starts_with("returned a__progress, b__progress"),
        "{searched}"
    );
    assert_eq!(searched["profile"], "finder");
    assert!(
        records.iter().any(|r| r["method"] == "tools/call"
            && r["target"] == "a__echo"
            && r["upstream"] == "a"
            && r["profile"] == "finder"),
        "the call tool's call is the real tool's record: {audit}"
    );

    // The admin API and the CLI run the same search.
    let admin = daemon.admin();
    let query = [
        ("query", "progress notifications".to_owned()),
        ("profile", "finder".to_owned()),
        ("limit", "5".to_owned()),
    ];
    let answer: Value = admin
        .get_query("/tools/search", &query)
        .await
        .json()
        .await
        .unwrap();
    let (found, _) = search(&finder, "search_tools", "progress notifications", 5).await;
    assert_eq!(
        names(answer["tools"].as_array().unwrap()),
        found.iter().map(String::as_str).collect::<Vec<_>>()
    );
    assert_eq!(answer["profile"], "finder");
    let out = std::process::Command::new(MCPMUX)
        .args([
            "tools",
            "--search",
            "progress notifications",
            "--profile",
            "finder",
        ])
        .args(["--limit", "2", "--admin", &admin.url])
        .env(
            "MCPMUX_ADMIN_TOKEN_FILE",
            daemon.state_dir.join("admin.token"),
        )
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{printed}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        printed.contains(&found[0]) && printed.contains("profile finder"),
        "{printed}"
    );
    let unknown = admin
        .get_query(
            "/tools/search",
            &[("query", "x".to_owned()), ("profile", "nope".to_owned())],
        )
        .await;
    assert_eq!(unknown.status(), 404);

    // list_changed: a new tool is found but listed only when `always` names it.
    let mut events = finder.events().await;
    full.result(
        "tools/call",
        json!({"name": "a__add_tool", "arguments": {"name": "hidden_gem"}}),
    )
    .await;
    let finds_it = poll_until(Duration::from_secs(20), || async {
        search(&finder, "search_tools", "a__hidden_gem", 1).await.0 == ["a__hidden_gem"]
    })
    .await;
    assert!(finds_it, "the new tool is searchable");
    full.result(
        "tools/call",
        json!({"name": "b__add_tool", "arguments": {"name": "extra_one"}}),
    )
    .await;
    let changed = events.next().await;
    assert_eq!(changed["method"], "notifications/tools/list_changed");
    let listed = finder.list_all("tools/list", "tools").await;
    assert_eq!(
        names(&listed),
        ["b__echo", "b__extra_one", "call_tool", "search_tools"],
        "the first list_changed is the second tool's: the first was not listed"
    );

    // Names and descriptions a profile gives its tools.
    let named = Client::connect(&format!("{}/named", daemon.url)).await;
    let listed = named.list_all("tools/list", "tools").await;
    assert_eq!(names(&listed), ["find_tools", "run_tool"]);
    assert_eq!(listed[0]["description"], "Look tools up by what they do.");
    assert!(
        listed[1]["description"]
            .as_str()
            .unwrap()
            .contains("find_tools"),
        "{}",
        listed[1]
    );
    let (found, _) = search(&named, "find_tools", "a__echo", 1).await;
    assert_eq!(found, ["a__echo"]);
    let text = named
        .result(
            "tools/call",
            json!({"name": "run_tool", "arguments": {"name": "b__echo", "arguments": {"x": 1}}}),
        )
        .await;
    assert!(text["content"].is_array(), "{text}");
}
