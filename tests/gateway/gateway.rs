//! The gateway against our controllable upstreams: namespacing, routing, pass-through of unknown
//! fields in both directions, pagination of large catalogs, cursor integrity, HTTP guards (origins,
//! versions, sessions, what a host's `Accept` lets it read).

use crate::common::{Client, Daemon, test_upstream};
use serde_json::{Value, json};

fn names(items: &[Value], key: &str) -> Vec<String> {
    items
        .iter()
        .map(|i| i[key].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_each_call_to_its_upstream_and_passes_unknown_fields_both_ways() {
    let record = tempfile::NamedTempFile::new().unwrap();
    let record_path = record.path().to_str().unwrap().to_owned();
    let daemon = Daemon::start(&format!(
        "{}{}",
        test_upstream("alpha", &["--record", &record_path]),
        test_upstream("beta", &[])
    ));
    let client = Client::connect(&daemon.url).await;
    let tools = daemon
        .wait_for_tools(&client, |n| {
            n.iter().any(|t| t.starts_with("beta__")) && n.iter().any(|t| t.starts_with("alpha__"))
        })
        .await;
    for expected in ["alpha__echo", "alpha__fancy", "beta__echo", "beta__slow"] {
        assert!(
            tools.contains(&expected.to_owned()),
            "{expected} missing from {tools:?}"
        );
    }

    // Extra params and _meta reach the upstream unchanged; the answer names the upstream.
    let params = json!({"name": "beta__echo", "arguments": {"text": "hi", "n": [1, 2.5, null]}, "_meta": {"x/trace": "t1"}, "x-extra": {"kept": true}});
    let result = client.result("tools/call", params).await;
    assert_eq!(result["structuredContent"]["upstream"], "beta");
    let received = &result["structuredContent"]["params"];
    assert_eq!(
        received["name"], "echo",
        "the upstream sees its own tool name"
    );
    assert_eq!(
        received["arguments"],
        json!({"text": "hi", "n": [1, 2.5, null]})
    );
    assert_eq!(received["_meta"], json!({"x/trace": "t1"}));
    assert_eq!(received["x-extra"], json!({"kept": true}));

    // A tool listing's unknown fields arrive at the host unchanged.
    let all = client.list_all("tools/list", "tools").await;
    let fancy = all.iter().find(|t| t["name"] == "alpha__fancy").unwrap();
    assert_eq!(
        fancy["annotations"],
        json!({"readOnlyHint": true, "x-vendorHint": "keep-me", "futureHint": {"nested": [1, 2, 3]}})
    );
    assert_eq!(fancy["_meta"], json!({"example.com/tag": "v1"}));
    assert_eq!(fancy["x-unknown-field"], json!({"a": 1}));
    assert_eq!(fancy["title"], "Fancy Tool");
    assert!(fancy["outputSchema"].is_object() && fancy["icons"].is_array());
    // ... and so do unknown result fields.
    let fancy_result = client
        .result(
            "tools/call",
            json!({"name": "alpha__fancy", "arguments": {}}),
        )
        .await;
    assert_eq!(fancy_result["x-extra-result"], json!({"kept": true}));
    assert_eq!(fancy_result["_meta"], json!({"example.com/r": "1"}));

    // Prompts and resources route the same way.
    let prompt = client
        .result(
            "prompts/get",
            json!({"name": "alpha__greet", "arguments": {"name": "Ada"}}),
        )
        .await;
    assert_eq!(
        prompt["messages"][0]["content"]["text"],
        "Hello, Ada from alpha"
    );
    let resources = client.list_all("resources/list", "resources").await;
    assert_eq!(
        names(&resources, "uri"),
        ["alpha+test://alpha/hello", "beta+test://beta/hello"]
    );
    let read = client
        .result("resources/read", json!({"uri": "beta+test://beta/hello"}))
        .await;
    assert_eq!(read["contents"][0]["text"], "hello from beta");
    assert_eq!(
        read["contents"][0]["uri"], "beta+test://beta/hello",
        "URIs in results are exposed ones"
    );
    let templates = client
        .list_all("resources/templates/list", "resourceTemplates")
        .await;
    assert_eq!(
        names(&templates, "uriTemplate"),
        ["alpha+test://alpha/item/{id}", "beta+test://beta/item/{id}"]
    );
    let item = client
        .result(
            "resources/read",
            json!({"uri": "alpha+test://alpha/item/42"}),
        )
        .await;
    assert_eq!(item["contents"][0]["text"], "item 42 from alpha");

    // Tool errors are results; unknown names are the spec's errors.
    let failed = client
        .result(
            "tools/call",
            json!({"name": "alpha__fail", "arguments": {}}),
        )
        .await;
    assert_eq!(failed["isError"], true);
    let unknown = client
        .request(
            "tools/call",
            json!({"name": "alpha__nope", "arguments": {}}),
        )
        .await;
    assert_eq!(unknown["error"]["code"], -32602);
    let unknown = client
        .request(
            "tools/call",
            json!({"name": "gamma__echo", "arguments": {}}),
        )
        .await;
    assert_eq!(unknown["error"]["code"], -32602);
    let unknown = client
        .request("prompts/get", json!({"name": "beta__nope"}))
        .await;
    assert_eq!(unknown["error"]["code"], -32602);
    let unknown = client
        .request("resources/read", json!({"uri": "gamma+test://x"}))
        .await;
    assert_eq!(unknown["error"]["code"], -32002);
    let upstream_error = client
        .request("resources/read", json!({"uri": "beta+test://beta/missing"}))
        .await;
    assert_eq!(
        upstream_error["error"]["code"], -32002,
        "the upstream's own error passes through"
    );
    let method = client.request("no/such/method", json!({})).await;
    assert_eq!(method["error"]["code"], -32601);
    assert_eq!(client.result("ping", Value::Null).await, json!({}));

    // The upstream saw exactly the rewritten name and the extra fields.
    let seen = std::fs::read_to_string(record.path()).unwrap();
    assert!(
        seen.lines().any(|l| l.contains(r#""name":"fancy""#)),
        "{seen}"
    );
    assert!(
        !seen.contains("beta"),
        "alpha never sees beta's traffic: {seen}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paginates_a_large_catalog_exactly_once_in_order_and_reads_paginating_upstreams_whole() {
    // 2 x 1100 generated tools; each upstream paginates its own listing by 97.
    let config = format!(
        "[catalog]\ntools_page_size = 50\n\n{}{}",
        test_upstream("one", &["--tools", "1100", "--page-size", "97"]),
        test_upstream("two", &["--tools", "1100", "--page-size", "97"])
    );
    let daemon = Daemon::start(&config);
    let client = Client::connect(&daemon.url).await;
    let names = daemon
        .wait_for_tools(&client, |n| n.len() >= 2 * (1100 + 7))
        .await;
    assert_eq!(
        names.len(),
        2 * (1100 + 7),
        "every tool of both upstreams, each exactly once"
    );
    let mut sorted = names.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted, names, "sorted, no duplicates");
    assert!(
        names.contains(&"one__tool_01099".to_owned())
            && names.contains(&"two__tool_00000".to_owned())
    );
    let again: Vec<String> = client
        .list_all("tools/list", "tools")
        .await
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(again, names, "deterministic order");

    let first = client.result("tools/list", json!({})).await;
    assert_eq!(first["tools"].as_array().unwrap().len(), 50);
    let cursor = first["nextCursor"].as_str().unwrap();
    for bad in [
        "",
        "garbage",
        "AAAA",
        &format!("{cursor}x"),
        &cursor.replace(&cursor[5..6], if &cursor[5..6] == "A" { "B" } else { "A" }),
    ] {
        let answer = client.request("tools/list", json!({ "cursor": bad })).await;
        assert_eq!(answer["error"]["code"], -32602, "cursor {bad:?}: {answer}");
    }
    let wrong_listing = client
        .request("prompts/list", json!({ "cursor": cursor }))
        .await;
    assert_eq!(wrong_listing["error"]["code"], -32602);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_guards_sessions_origins_and_versions() {
    let daemon = Daemon::start(&test_upstream("alpha", &["--protocol-tools"]));
    let client = Client::connect(&daemon.url).await;
    let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}).to_string();

    let evil = client
        .post_raw(ping.clone(), &[("origin", "https://evil.example")])
        .await;
    assert_eq!(evil.status(), 403);
    let local = client
        .post_raw(ping.clone(), &[("origin", "http://localhost:5173")])
        .await;
    assert_eq!(local.status(), 200);
    let version = client
        .post_raw(ping.clone(), &[("mcp-protocol-version", "1999-01-01")])
        .await;
    assert_eq!(version.status(), 400);

    let http = reqwest::Client::new();
    let no_session = http
        .post(&daemon.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(ping.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(no_session.status(), 400);
    let unknown = http
        .post(&daemon.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", "0123")
        .body(ping.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404);
    let error: Value = unknown.json().await.unwrap();
    client.schemas().check_message(&error, None);

    let garbage = client.post_raw("{not json".into(), &[]).await;
    assert_eq!(garbage.status(), 400);
    let body: Value = garbage.json().await.unwrap();
    assert_eq!(body["error"]["code"], -32700);

    // What a host cannot read it does not get. A request accepting neither JSON nor event
    // streams (or saying nothing) is 406 ...
    let html = client
        .post_raw(ping.clone(), &[("accept", "text/html")])
        .await;
    assert_eq!(html.status(), 406);
    // (reqwest and curl send `Accept: */*` by default; this request sends no Accept at all.)
    let silent = post_without_accept(&daemon.url, client.session.as_deref().unwrap(), &ping).await;
    assert!(silent.starts_with("HTTP/1.1 406"), "{silent}");
    assert!(silent.contains("Accept"), "{silent}");
    // ... and one accepting JSON alone gets JSON even when the call produces progress, which
    // goes to the session's GET stream instead.
    let mut events = client.events().await;
    let progress = json!({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
        "params": {"name": "alpha__progress", "arguments": {"steps": 2, "delay_ms": 10},
                   "_meta": {"progressToken": "p1"}}});
    let json_only = client
        .post_raw(progress.to_string(), &[("accept", "application/json")])
        .await;
    assert_eq!(json_only.status(), 200);
    let content_type = json_only.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(
        content_type.starts_with("application/json"),
        "{content_type}"
    );
    let answer: Value = json_only.json().await.unwrap();
    assert_eq!(
        answer["result"]["content"][0]["text"], "done 2 steps",
        "{answer}"
    );
    for step in [1, 2] {
        let note = events.next().await;
        assert_eq!(note["method"], "notifications/progress", "{note}");
        assert_eq!(note["params"]["progress"], step, "{note}");
    }

    // DELETE ends the session; afterwards it is 404 so hosts re-initialize.
    let deleted = http
        .delete(&daemon.url)
        .header("mcp-session-id", client.session.as_deref().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(deleted.status(), 200);
    let after = client.post_raw(ping, &[]).await;
    assert_eq!(after.status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn catalog_changes_notify_hosts_and_old_cursors_keep_their_generation() {
    use futures_util::StreamExt;
    let daemon = Daemon::start(&format!(
        "[catalog]\ntools_page_size = 3\n\n{}",
        test_upstream("alpha", &[])
    ));
    let client = Client::connect(&daemon.url).await;
    let before = daemon
        .wait_for_tools(&client, |n| n.iter().any(|t| t == "alpha__echo"))
        .await;

    // The host's server-to-client stream.
    let events = reqwest::Client::new()
        .get(&daemon.url)
        .header("accept", "text/event-stream")
        .header("mcp-session-id", client.session.as_deref().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(events.status(), 200);
    let mut events = events.bytes_stream();

    let first = client.result("tools/list", json!({})).await;
    let cursor = first["nextCursor"].as_str().unwrap().to_owned();
    client
        .result(
            "tools/call",
            json!({"name": "alpha__add_tool", "arguments": {"name": "zz_new"}}),
        )
        .await;

    // list_changed arrives on the stream, schema-valid.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut buffer = String::new();
    let notification = loop {
        let chunk = tokio::time::timeout_at(deadline, events.next())
            .await
            .expect("no list_changed within 10 s");
        buffer.push_str(&String::from_utf8_lossy(&chunk.unwrap().unwrap()));
        if let Some(line) = buffer.lines().find_map(|l| l.strip_prefix("data:")) {
            break serde_json::from_str::<Value>(line.trim()).unwrap();
        }
    };
    assert_eq!(notification["method"], "notifications/tools/list_changed");
    client.schemas().check_message(&notification, None);

    // Paging on with the old cursor stays within the old generation.
    let mut old: Vec<String> = names(first["tools"].as_array().unwrap(), "name");
    let mut next = Some(cursor);
    while let Some(c) = next {
        let page = client.result("tools/list", json!({ "cursor": c })).await;
        old.extend(names(page["tools"].as_array().unwrap(), "name"));
        next = page
            .get("nextCursor")
            .and_then(Value::as_str)
            .map(str::to_owned);
    }
    assert_eq!(
        old, before,
        "an old cursor pages the catalog it was issued for"
    );

    let after = client.list_all("tools/list", "tools").await;
    assert!(names(&after, "name").contains(&"alpha__zz_new".to_owned()));
    let called = client
        .result(
            "tools/call",
            json!({"name": "alpha__zz_new", "arguments": {"x": 1}}),
        )
        .await;
    assert_eq!(called["structuredContent"]["params"]["name"], "zz_new");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unprefixed_upstream_keeps_its_names_and_uris() {
    let daemon = Daemon::start(&format!(
        "{}prefix = \"\"\n",
        test_upstream("solo", &["--protocol-tools"])
    ));
    let client = Client::connect(&daemon.url).await;
    let tools = daemon
        .wait_for_tools(&client, |n| n.iter().any(|t| t == "echo"))
        .await;
    assert!(
        tools.iter().all(|t| !t.contains("__")),
        "names changed: {tools:?}"
    );
    let answer = client
        .request("tools/call", json!({"name": "echo", "arguments": {"x": 1}}))
        .await;
    assert_eq!(
        answer["result"]["structuredContent"]["upstream"], "solo",
        "{answer}"
    );
    let resources = client.list_all("resources/list", "resources").await;
    assert_eq!(names(&resources, "uri"), ["test://solo/hello"]);
    let read = client
        .request("resources/read", json!({"uri": "test://solo/hello"}))
        .await;
    assert_eq!(
        read["result"]["contents"][0]["uri"], "test://solo/hello",
        "{read}"
    );
    let prompt = client
        .request(
            "prompts/get",
            json!({"name": "greet", "arguments": {"name": "Ada"}}),
        )
        .await;
    assert!(prompt["result"]["messages"].is_array(), "{prompt}");
}

/// POSTs `body` in session `session` with no `Accept` header at all; the raw response.
async fn post_without_accept(url: &str, session: &str, body: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let url = reqwest::Url::parse(url).unwrap();
    let addr = format!("{}:{}", url.host_str().unwrap(), url.port().unwrap());
    let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let request = format!(
        "POST {} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Mcp-Session-Id: {session}\r\nConnection: close\r\nContent-Length: {}\r\n\r\n{body}",
        url.path(),
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    response
}

/// A body over `server.max_body_bytes` is answered 413 with a JSON-RPC error naming the limit,
/// and the connection is closed cleanly: the host reads the refusal instead of a reset (the
/// body is read to its end first), whether it sends the body at once or in chunks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_body_is_refused_with_413_not_a_reset() {
    let daemon = Daemon::start_with(
        &format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nmax_body_bytes = 65536\n\n{}",
            test_upstream("alpha", &[])
        ),
        &[],
    );
    let client = Client::connect(&daemon.url).await;
    let big = json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
        "params": {"name": "alpha__echo", "arguments": {"blob": "x".repeat(2 * 1024 * 1024)}}})
    .to_string();
    for attempt in 0..5 {
        let refused = client.post_raw(big.clone(), &[]).await;
        assert_eq!(refused.status(), 413, "attempt {attempt}");
        let body: Value = refused.json().await.unwrap();
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("max_body_bytes") && message.contains("65536"),
            "{body}"
        );
    }
    // Sent in chunks (no Content-Length): refused the same way.
    let chunks = futures_util::stream::iter(
        big.clone()
            .into_bytes()
            .chunks(16 * 1024)
            .map(|c| Ok::<_, std::io::Error>(c.to_vec()))
            .collect::<Vec<_>>(),
    );
    let streamed = reqwest::Client::new()
        .post(&daemon.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-session-id", client.session.as_deref().unwrap())
        .body(reqwest::Body::wrap_stream(chunks))
        .send()
        .await
        .unwrap();
    assert_eq!(streamed.status(), 413);
    // The session is fine.
    assert!(
        client
            .tool_text("alpha__echo", json!({"small": 1}))
            .await
            .contains("small")
    );
}

/// `params` nested deeper than 128 levels are refused at the edge with -32602 naming the limit,
/// at once and without reaching the upstream (which would drop them and leave the call hanging);
/// a burst of them leaves the upstream's slots free for everyone else. 100 levels pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn params_nested_too_deep_are_refused_at_the_edge() {
    let record = tempfile::NamedTempFile::new().unwrap();
    let daemon = Daemon::start(&test_upstream(
        "alpha",
        &["--record", record.path().to_str().unwrap()],
    ));
    let client = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&client, |n| n.iter().any(|t| t == "alpha__echo"))
        .await;
    let nested = |levels: usize| -> Value {
        serde_json::from_str(&format!("{}{}", "[".repeat(levels), "]".repeat(levels)))
            .unwrap_or_else(|_| json!(format!("{}{}", "[".repeat(levels), "]".repeat(levels))))
    };
    let deep_body = |id: u64| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"alpha__echo","arguments":{{"deep":{}{}}}}}}}"#,
            "[".repeat(100_000),
            "]".repeat(100_000)
        )
    };
    let started = std::time::Instant::now();
    let burst: Vec<_> = (0..64)
        .map(|i| client.post_raw(deep_body(1000 + i), &[]))
        .collect();
    for response in futures_util::future::join_all(burst).await {
        let answer: Value = response.json().await.unwrap();
        assert_eq!(answer["error"]["code"], -32602, "{answer}");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains("128"), "{message}");
    }
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "refusing took {:?}",
        started.elapsed()
    );
    let fine = client
        .request(
            "tools/call",
            json!({"name": "alpha__echo", "arguments": {"deep": nested(100)}}),
        )
        .await;
    assert!(fine["result"].is_object(), "{fine}");
    let recorded = std::fs::read_to_string(record.path()).unwrap();
    assert!(
        !recorded.contains(&"[".repeat(1000)),
        "an over-deep call reached the upstream"
    );
}
