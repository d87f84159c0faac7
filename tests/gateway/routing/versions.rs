//! Section 5, versions, per side: batches answered only in 2025-03-26, a refused batch answered in
//! the host's version, versions negotiated separately on each side.

use std::time::Duration;

use serde_json::{Value, json};

use super::{
    QUIET, Setup, Via, all_client_capabilities, assert_progress, is_error, over_each_transport,
    text,
};
use crate::common::Client;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_are_answered_only_in_2025_03_26() {
    let setup = Setup::start(&[], "").await;
    let url = &setup.daemon.url;
    let batch = json!([
        {"jsonrpc": "2.0", "id": 1, "method": "ping"},
        {"jsonrpc": "2.0", "id": "two", "method": "tools/list"},
        {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}
    ])
    .to_string();

    let old = Client::connect_with(url, "2025-03-26", json!({})).await;
    assert_eq!(old.version, "2025-03-26");
    let response = old.post_raw(batch.clone(), &[]).await;
    assert_eq!(response.status(), 200);
    let answers: Value = response.json().await.unwrap();
    old.schemas().check("JSONRPCBatchResponse", &answers);
    let answers = answers.as_array().unwrap();
    assert_eq!(answers.len(), 2, "{answers:?}");
    let ping = answers.iter().find(|a| a["id"] == 1).unwrap();
    old.schemas().check_message(ping, Some("ping"));
    assert_eq!(ping["result"], json!({}));
    let list = answers.iter().find(|a| a["id"] == "two").unwrap();
    old.schemas().check_message(list, Some("tools/list"));
    assert!(
        list["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "up__sample")
    );

    for version in ["2025-06-18", "2025-11-25"] {
        let host = Client::connect_with(url, version, json!({})).await;
        assert_eq!(host.version, version);
        let response = host.post_raw(batch.clone(), &[]).await;
        assert_eq!(response.status(), 400, "{version}");
        let text = response.text().await.unwrap();
        if version == "2025-11-25" {
            // An id-less JSON-RPC error, as 2025-11-25 allows.
            let error: Value = serde_json::from_str(&text).unwrap();
            assert_eq!(error["error"]["code"], -32600, "{error}");
            host.schemas().check_message(&error, None);
        } else {
            // Older schemas allow no id-less error: the reason comes as plain text.
            assert!(text.contains("batches"), "{text}");
        }
    }
}

/// The refusal of a request whose id is unknown must be schema-valid for the host's version too.
/// Before 2025-11-25 the schema's error response requires a string or integer `id`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_batch_is_answered_in_the_hosts_version() {
    let setup = Setup::start(&[], "").await;
    let host = Client::connect_with(&setup.daemon.url, "2025-06-18", json!({})).await;
    let batch = json!([{"jsonrpc": "2.0", "id": 1, "method": "ping"}]).to_string();
    let response = host.post_raw(batch, &[]).await;
    assert_eq!(response.status(), 400);
    // A JSON-RPC body must be valid for the host's version (no `null` id before 2025-11-25);
    // otherwise the reason comes as plain text.
    let json = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/json");
    let text = response.text().await.unwrap();
    if json {
        let error: Value = serde_json::from_str(&text).unwrap();
        host.schemas().check_message(&error, None);
    } else {
        assert!(text.contains("batches"), "the refusal says why: {text}");
    }
}

over_each_transport!(versions_are_negotiated_per_side);
async fn versions_are_negotiated_per_side(via: Via) {
    let setup = Setup::start_over(via, &["--protocol-version", "2024-11-05"], "").await;

    // An old upstream serves a current host: calls, progress, server requests.
    let new = setup.host(all_client_capabilities()).await;
    assert_eq!(new.version, "2025-11-25");
    assert!(
        new.tool_text("up__echo", json!({"v": 1}))
            .await
            .contains(r#""v":1"#)
    );
    let (before, answer) = new
        .start(
            "tools/call",
            json!({"name": "up__progress", "arguments": {"steps": 2},
                   "_meta": {"progressToken": "p"}}),
        )
        .finish()
        .await;
    assert_progress(&before, &json!("p"), 2, "2025-11-25 host");
    assert_eq!(text(&answer), "done 2 steps");
    let mut call = new.start_tool("up__sample", json!({}));
    let request = call.next().await;
    new.respond(
        &request["id"],
        json!({"role": "assistant", "content": {"type": "text", "text": "ok"}, "model": "m"}),
    )
    .await;
    assert_eq!(text(&call.finish().await.1), "sampled: ok");

    // A 2024-11-05 host is never sent elicitation, which its version does not have, even when it
    // claims the capability.
    let old =
        Client::connect_with(&setup.daemon.url, "2024-11-05", all_client_capabilities()).await;
    assert_eq!(old.version, "2024-11-05");
    let mut old_events = old.events().await;
    let (before, answer) = tokio::time::timeout(
        Duration::from_secs(10),
        old.start_tool("up__elicit", json!({})).finish(),
    )
    .await
    .expect("a refused elicitation must not hang");
    assert!(before.is_empty(), "{before:?}");
    assert!(is_error(&answer), "{answer}");
    assert!(
        text(&answer).starts_with("elicitation failed: ") && text(&answer).contains("2024-11-05"),
        "{answer}"
    );
    old_events.assert_silent(QUIET, "the old host").await;
    // ... but sampling, which it has, works.
    let mut call = old.start_tool("up__sample", json!({}));
    let request = call.next().await;
    assert_eq!(request["method"], "sampling/createMessage");
    old.respond(
        &request["id"],
        json!({"role": "assistant", "content": {"type": "text", "text": "old ok"}, "model": "m"}),
    )
    .await;
    assert_eq!(text(&call.finish().await.1), "sampled: old ok");
}
