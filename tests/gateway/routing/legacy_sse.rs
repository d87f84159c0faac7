//! Section 6, the 2024-11-05 HTTP+SSE transport: legacy hosts get every answer on their stream.

use serde_json::json;

use super::{QUIET, Setup, all_client_capabilities, assert_progress, text};
use crate::common::LegacyHost;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_http_sse_hosts_get_every_answer_on_their_stream() {
    let setup = Setup::start(&[], "").await;
    // A current host on the same upstream, which must hear none of it.
    let other = setup.host(all_client_capabilities()).await;
    other
        .result("logging/setLevel", json!({"level": "debug"}))
        .await;
    let mut other_events = other.events().await;
    let mut host = LegacyHost::open(&setup.daemon.url, "2024-11-05").await;
    let (before, init) = host
        .request(
            "initialize",
            json!({"protocolVersion": "2024-11-05", "capabilities": {"sampling": {}},
                   "clientInfo": {"name": "legacy", "version": "0"}}),
        )
        .await;
    assert!(before.is_empty(), "{before:?}");
    assert_eq!(init["result"]["protocolVersion"], "2024-11-05");
    assert_eq!(
        host.post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await,
        202
    );

    let (_, list) = host.request("tools/list", json!({})).await;
    let names: Vec<&str> = list["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"up__echo") && names.contains(&"up__sample"));

    let (before, echo) = host
        .request(
            "tools/call",
            json!({"name": "up__echo", "arguments": {"legacy": true}}),
        )
        .await;
    assert!(before.is_empty(), "{before:?}");
    assert_eq!(
        echo["result"]["structuredContent"]["params"]["arguments"],
        json!({"legacy": true})
    );

    // Progress and server requests come on the same stream.
    let (before, answer) = host
        .request(
            "tools/call",
            json!({"name": "up__progress", "arguments": {"steps": 2},
                   "_meta": {"progressToken": 5}}),
        )
        .await;
    assert_progress(&before, &json!(5), 2, "legacy host");
    assert_eq!(text(&answer), "done 2 steps");

    let id = json!(77);
    host.events.expect_answer(&id, "tools/call");
    let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                      "params": {"name": "up__sample", "arguments": {"prompt": "legacy?"}}});
    assert_eq!(host.post(&call).await, 202);
    let request = host.events.next().await;
    assert_eq!(request["method"], "sampling/createMessage", "{request}");
    let reply = json!({"jsonrpc": "2.0", "id": request["id"], "result":
        {"role": "assistant", "content": {"type": "text", "text": "legacy!"}, "model": "m"}});
    assert_eq!(host.post(&reply).await, 202);
    let (before, answer) = host.events.until_answer(&id).await;
    assert!(before.is_empty(), "{before:?}");
    assert_eq!(text(&answer), "sampled: legacy!");
    host.events.assert_silent(QUIET, "the legacy stream").await;
    other_events
        .assert_silent(QUIET, "the other host's stream")
        .await;
}
