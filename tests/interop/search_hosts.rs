//! Real hosts on a `tools = "search"` profile: the official Python SDK (`python_search.py`, in
//! both eras) and the MCP Inspector's CLI (npm `@modelcontextprotocol/inspector`, `--cli`) see the
//! two search-mode tools, find server-everything's tools in words, and call them through the call
//! tool — one that reports progress, one that asks the host for sampling; a tool the profile
//! hides is never found and cannot be called.

use std::process::Command;
use std::time::Duration;

use crate::common::python::{require_python_sdk, run_script};
use crate::common::{Client, Daemon, npm_upstream, peers};
use serde_json::{Value, json};

const PROFILE: &str = r#"
[profiles.agent]
tools = "search"
deny = ["tool:everything__get-env"]
path = true
"#;

const SAMPLED_TEXT: &str = "sampled for the search host";

/// A daemon with server-everything, listed with the tools it offers hosts that can sample.
async fn start_daemon() -> Daemon {
    let upstream = npm_upstream("everything", "mcp-server-everything", &[]);
    let daemon = Daemon::start(&format!("{upstream}{PROFILE}"));
    let client = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&client, |names| {
            names
                .iter()
                .any(|n| n == "everything__trigger-sampling-request")
        })
        .await;
    daemon
}

fn strings(value: &Value) -> Vec<&str> {
    (value.as_array().unwrap().iter())
        .map(|v| v.as_str().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_finds_and_calls_tools_through_a_search_profile_in_both_eras() {
    require_python_sdk();
    let daemon = start_daemon().await;
    let url = format!("{}/agent", daemon.url);
    let deadline = Duration::from_secs(180);
    let legacy = ["--http", url.as_str(), "--mode", "legacy"];
    let modern = ["--http", url.as_str(), "--mode", "2026-07-28"];
    // One after the other: two hosts' calls in flight at once on the shared upstream would make
    // its sampling request ambiguous, which mcpmux refuses (`isolation = "per-session"` is for that).
    let (legacy, _) = run_script(&daemon, "python_search.py", &legacy, deadline).await;
    let (modern, _) = run_script(&daemon, "python_search.py", &modern, deadline).await;
    for summary in [&legacy, &modern] {
        let mode = &summary["mode"];
        assert_eq!(summary["ok"], true, "{summary}");
        assert_eq!(
            strings(&summary["listed"]),
            ["call_tool", "search_tools"],
            "{mode}"
        );
        assert_eq!(
            summary["progress_search"][0], "everything__trigger-long-running-operation",
            "{summary}"
        );
        assert_eq!(summary["progress_schema_has_steps"], true, "{summary}");
        let progress: Vec<f64> = (summary["progress"].as_array().unwrap().iter())
            .map(|p| p.as_f64().unwrap())
            .collect();
        assert!(
            progress.len() >= 3 && progress.windows(2).all(|w| w[0] < w[1]),
            "{mode}: progress reached the SDK's callback in order: {summary}"
        );
        assert!(
            strings(&summary["progress_result"])
                .concat()
                .contains("completed"),
            "{summary}"
        );
        assert_eq!(
            summary["sampling_search"][0], "everything__trigger-sampling-request",
            "{summary}"
        );
        assert_eq!(summary["sampling_requests"], 1, "{summary}");
        assert!(
            strings(&summary["sampling_result"])
                .concat()
                .contains(SAMPLED_TEXT),
            "{mode}: the host's sampling answer reached the tool: {summary}"
        );
        assert!(
            !strings(&summary["env_search"]).contains(&"everything__get-env"),
            "{mode}: a hidden tool is never found: {summary}"
        );
        // A hidden tool cannot be called, and the model reads why as a tool result.
        assert_eq!(
            summary["hidden_call"]["is_error"], true,
            "{mode}: a hidden tool cannot be called: {summary}"
        );
        assert!(
            strings(&summary["hidden_call"]["result"])
                .concat()
                .contains("no tool named `everything__get-env`"),
            "{mode}: the model is told what went wrong: {summary}"
        );
    }
}

/// The MCP Inspector's CLI (`mcp-inspector --cli URL --method …`): one JSON answer per run.
fn inspector(url: &str, home: &std::path::Path, args: &[&str]) -> Value {
    let out = Command::new(peers::npm_bin("node"))
        .arg(peers::npm_bin("mcp-inspector"))
        .args(["--cli", url, "--transport", "http"])
        .args(args)
        .env("HOME", home)
        .output()
        .unwrap();
    // An answer is printed on stdout, an error on stderr.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let printed = if stdout.trim().is_empty() {
        &stderr
    } else {
        &stdout
    };
    serde_json::from_str(printed.trim())
        .unwrap_or_else(|e| panic!("inspector {args:?}: {e}\nstdout: {stdout}\nstderr: {stderr}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inspector_cli_finds_and_calls_tools_through_a_search_profile() {
    let daemon = start_daemon().await;
    let url = format!("{}/agent", daemon.url);
    let home = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| inspector(&url, home.path(), args);

    let listed = run(&["--method", "tools/list"]);
    let names: Vec<&str> = (listed["tools"].as_array().unwrap().iter())
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["call_tool", "search_tools"], "{listed}");

    let search = |query: &str| {
        let answer = run(&[
            "--method",
            "tools/call",
            "--tool-name",
            "search_tools",
            "--tool-arg",
            &format!("query={query}"),
            "--tool-arg",
            "limit=5",
        ]);
        let found = answer["structuredContent"]["tools"].clone();
        assert!(found.is_array(), "{answer}");
        found
    };
    let found = search("echo back a message");
    assert_eq!(found[0]["name"], "everything__echo", "{found}");
    assert_eq!(
        found[0]["inputSchema"]["required"],
        json!(["message"]),
        "what it needs to call it: {found}"
    );
    let echoed = run(&[
        "--method",
        "tools/call",
        "--tool-name",
        "call_tool",
        "--tool-arg",
        "name=everything__echo",
        "--tool-arg",
        r#"arguments={"message":"found by search"}"#,
    ]);
    let text = echoed["content"][0]["text"].as_str().unwrap_or_default();
    assert!(text.contains("found by search"), "{echoed}");

    let env = search("print environment variables");
    assert!(
        !env.to_string().contains("everything__get-env"),
        "a hidden tool is never found: {env}"
    );
    let hidden = run(&[
        "--method",
        "tools/call",
        "--tool-name",
        "call_tool",
        "--tool-arg",
        "name=everything__get-env",
    ]);
    assert_eq!(
        hidden["isError"], true,
        "a hidden tool cannot be called: {hidden}"
    );
    assert!(
        hidden["content"][0]["text"]
            .as_str()
            .is_some_and(|m| m.contains("no tool named `everything__get-env`")),
        "a hidden tool cannot be called: {hidden}"
    );
}
