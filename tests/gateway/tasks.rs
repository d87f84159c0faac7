//! MCP 2025-11-25 tasks through the gateway: task ids are namespaced like URIs (`{prefix}+{id}`)
//! and owned by the session that created them — tasks/get, tasks/result, tasks/cancel route to
//! the upstream with the original id and only for the owner, tasks/list shows only the caller's
//! tasks, notifications/tasks/status reach only the owner; the `tasks` capability is offered only
//! to hosts speaking 2025-11-25. Every message a host receives is schema-checked.

use std::time::Duration;

use crate::common::{
    Client, Daemon, Messages, RemoteServer, Schemas, Via, read_messages, test_upstream_via,
};
use serde_json::{Value, json};

/// How long a message that must not arrive is waited for.
const QUIET: Duration = Duration::from_millis(300);

/// A daemon with one test upstream `up` supporting tasks, reached `via`, ready (its tools
/// listed); the upstream's server process when it is remote.
async fn start(via: Via) -> (Daemon, Option<RemoteServer>) {
    let (table, remote) = test_upstream_via("up", via, &["--tasks"]);
    let daemon = Daemon::start(&table);
    let probe = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&probe, |n| n.iter().any(|t| t == "up__slow"))
        .await;
    assert_eq!(probe.delete().await, 200);
    (daemon, remote)
}

/// A task-augmented `up__slow` call: the answer is a schema-checked CreateTaskResult; returns
/// its task.
async fn create_task(client: &Client, ms: u64) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": client.fresh_id(), "method": "tools/call",
                      "params": {"name": "up__slow", "arguments": {"ms": ms},
                                 "task": {"ttl": 60000}}});
    let messages = read_messages(client.post(&body).await).await;
    assert_eq!(messages.len(), 1, "one answer expected: {messages:?}");
    let answer = &messages[0];
    client.schemas().check_message(answer, None);
    assert!(
        answer.get("error").is_none(),
        "task creation failed: {answer}"
    );
    client
        .schemas()
        .check("CreateTaskResult", &answer["result"]);
    let task = answer["result"]["task"].clone();
    assert_eq!(task["status"], "working", "{task}");
    task
}

/// The result of a task request, also checked against its result definition `def`.
async fn task_result(client: &Client, method: &str, params: Value, def: &str) -> Value {
    let result = client.result(method, params).await;
    client.schemas().check(def, &result);
    result
}

/// The next `notifications/tasks/status` on a GET stream (other messages are skipped).
async fn next_status(events: &mut Messages) -> Value {
    loop {
        let message = events.next().await;
        if message["method"] == "notifications/tasks/status" {
            events.schemas().check("TaskStatusNotification", &message);
            return message;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_are_namespaced_and_owned_by_their_session_with_the_upstream_over_stdio() {
    tasks_are_namespaced_and_owned_by_their_session(Via::Stdio).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_are_namespaced_and_owned_by_their_session_with_the_upstream_over_streamable_http() {
    tasks_are_namespaced_and_owned_by_their_session(Via::Http).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_are_namespaced_and_owned_by_their_session_with_the_upstream_over_legacy_sse() {
    tasks_are_namespaced_and_owned_by_their_session(Via::Sse).await;
}

async fn tasks_are_namespaced_and_owned_by_their_session(via: Via) {
    let (daemon, _remote) = start(via).await;
    let a = Client::connect(&daemon.url).await;
    let b = Client::connect(&daemon.url).await;
    let mut a_events = a.events().await;
    let mut b_events = b.events().await;

    let task = create_task(&a, 300).await;
    let id = task["taskId"].as_str().unwrap().to_owned();
    assert!(id.starts_with("up+task-"), "not an exposed task id: {id}");

    // tasks/result blocks until the task ends; read it as it streams.
    let pending_result = a.start("tasks/result", json!({ "taskId": id }));

    // B neither sees nor reaches A's task.
    let b_list = task_result(&b, "tasks/list", json!({}), "ListTasksResult").await;
    assert!(
        b_list["tasks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["taskId"] != id.as_str()),
        "B lists A's task: {b_list}"
    );
    for method in ["tasks/get", "tasks/result", "tasks/cancel"] {
        let refused = b.request(method, json!({ "taskId": id })).await;
        assert_eq!(refused["error"]["code"], -32602, "B's {method}: {refused}");
    }

    // A reaches it by its exposed id.
    let got = task_result(&a, "tasks/get", json!({ "taskId": id }), "GetTaskResult").await;
    assert_eq!(got["taskId"], id.as_str(), "{got}");
    assert!(
        matches!(got["status"].as_str(), Some("working" | "completed")),
        "{got}"
    );
    let a_list = task_result(&a, "tasks/list", json!({}), "ListTasksResult").await;
    let listed: Vec<&Value> = a_list["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| &t["taskId"])
        .collect();
    assert_eq!(listed, [&json!(id)], "A's tasks/list: {a_list}");

    // Completion is notified to A only, with the exposed id.
    let status = next_status(&mut a_events).await;
    assert_eq!(status["params"]["taskId"], id.as_str(), "{status}");
    assert_eq!(status["params"]["status"], "completed", "{status}");
    b_events
        .assert_silent(QUIET, "B's GET stream after A's task completed")
        .await;

    // The blocked tasks/result got the tool's result, tied to the exposed id.
    let (before, answer) = pending_result.finish().await;
    assert!(before.is_empty(), "unexpected messages: {before:?}");
    let result = &answer["result"];
    a.schemas().check("GetTaskPayloadResult", result);
    a.schemas().check("CallToolResult", result);
    assert_eq!(result["content"][0]["text"], "slept 300ms", "{answer}");
    assert_eq!(
        result["_meta"]["io.modelcontextprotocol/related-task"]["taskId"],
        id.as_str(),
        "{answer}"
    );
    // Asked again once complete, it answers at once, the same.
    let again = task_result(
        &a,
        "tasks/result",
        json!({ "taskId": id }),
        "CallToolResult",
    )
    .await;
    assert_eq!(&again, result);
    let got = task_result(&a, "tasks/get", json!({ "taskId": id }), "GetTaskResult").await;
    assert_eq!(got["status"], "completed", "{got}");

    // A second task, cancelled.
    let second = create_task(&a, 60_000).await;
    let second_id = second["taskId"].as_str().unwrap().to_owned();
    assert!(
        second_id.starts_with("up+task-") && second_id != id,
        "{second_id}"
    );
    let refused = b
        .request("tasks/cancel", json!({ "taskId": second_id }))
        .await;
    assert_eq!(
        refused["error"]["code"], -32602,
        "B's tasks/cancel: {refused}"
    );
    let cancelled = task_result(
        &a,
        "tasks/cancel",
        json!({ "taskId": second_id }),
        "CancelTaskResult",
    )
    .await;
    assert_eq!(cancelled["taskId"], second_id.as_str(), "{cancelled}");
    assert_eq!(cancelled["status"], "cancelled", "{cancelled}");
    let got = task_result(
        &a,
        "tasks/get",
        json!({ "taskId": second_id }),
        "GetTaskResult",
    )
    .await;
    assert_eq!(got["status"], "cancelled", "{got}");
    let status = next_status(&mut a_events).await;
    assert_eq!(status["params"]["taskId"], second_id.as_str(), "{status}");
    assert_eq!(status["params"]["status"], "cancelled", "{status}");
    b_events
        .assert_silent(QUIET, "B's GET stream after A's task was cancelled")
        .await;
    // Cancelling a terminal task is refused.
    let again = a
        .request("tasks/cancel", json!({ "taskId": second_id }))
        .await;
    assert_eq!(again["error"]["code"], -32602, "{again}");

    // Both tasks listed for A, none for B.
    let a_list = task_result(&a, "tasks/list", json!({}), "ListTasksResult").await;
    let mut listed: Vec<(String, String)> = a_list["tasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["taskId"].as_str().unwrap().to_owned(),
                t["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    listed.sort();
    let mut expected = vec![
        (id.clone(), "completed".to_owned()),
        (second_id.clone(), "cancelled".to_owned()),
    ];
    expected.sort();
    assert_eq!(listed, expected, "A's tasks/list: {a_list}");
    let b_list = task_result(&b, "tasks/list", json!({}), "ListTasksResult").await;
    assert_eq!(b_list["tasks"], json!([]), "B's tasks/list: {b_list}");

    // Unknown ids, of a known upstream or not, are invalid params.
    for unknown in ["up+task-999", "nope+task-1", "task-1"] {
        let refused = a.request("tasks/get", json!({ "taskId": unknown })).await;
        assert_eq!(refused["error"]["code"], -32602, "{unknown}: {refused}");
    }

    assert_eq!(a.delete().await, 200);
    assert_eq!(b.delete().await, 200);
}

/// The initialize result a host speaking `version` gets, schema-checked; the session is ended.
async fn initialize(url: &str, version: &str) -> Value {
    let http = reqwest::Client::new();
    let params = json!({"protocolVersion": version, "capabilities": {},
                        "clientInfo": {"name": "mcpmux-tests", "version": "0"}});
    let body = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params});
    let response = http
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(body.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let session = response
        .headers()
        .get("mcp-session-id")
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    let message = read_messages(response).await.pop().unwrap();
    assert_eq!(message["result"]["protocolVersion"], version, "{message}");
    Schemas::get(version).check_message(&message, Some("initialize"));
    let deleted = http
        .delete(url)
        .header("mcp-session-id", session)
        .header("mcp-protocol-version", version)
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 200);
    message["result"].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_capability_only_for_2025_11_25_hosts() {
    let (daemon, _) = start(Via::Stdio).await;
    let latest = initialize(&daemon.url, "2025-11-25").await;
    let tasks = &latest["capabilities"]["tasks"];
    assert!(tasks["list"].is_object(), "{latest}");
    assert!(tasks["cancel"].is_object(), "{latest}");
    assert!(tasks["requests"]["tools"]["call"].is_object(), "{latest}");
    let older = initialize(&daemon.url, "2025-06-18").await;
    assert!(older["capabilities"].is_object(), "{older}");
    assert!(older["capabilities"].get("tasks").is_none(), "{older}");
}
