//! Profiles: what a profile hides does not exist for its hosts. Each method that names a tool,
//! prompt, resource or template (list, call, get, read, subscribe, complete, tasks) is tried with
//! a hidden name and answers exactly as for a name that never existed; renames and description
//! overrides show and route; a profile's path serves it; an unprefixed profile exposes its one
//! upstream's names bare; a cursor of one profile is refused in another; list_changed reaches a
//! profile's hosts only when what they see changed; hosts, paths and the anonymous profile decide
//! who sees which profile.

use std::collections::BTreeSet;
use std::time::Duration;

use crate::common;
use crate::common::{Client, Daemon, initialize_as, read_messages, sha256_hex, test_upstream};
use serde_json::{Value, json};

const ALICE: &str = "alice-profile-token-51c0";
const BOB: &str = "bob-profile-token-9e2d";

const PROFILES: &str = r#"
[profiles.reader]
upstreams = ["a", "b"]
allow = ["tool:a__echo", "tool:a__fancy", "tool:a__slow", "tool:a__crash", "tool:b__*", "prompt:b__*", "resource:a+*", "resource:b+test://b/item/*", "template:b+*"]
deny = ["tool:b__crash", "tool:b__fail", "tool:a__crash"]
page_size = 2
path = true
[profiles.reader.rename]
"a__echo" = "say"
"a__slow" = "wait"
[profiles.reader.describe]
"a__fancy" = "Fancy, as the reader profile tells it."

[profiles.solo]
upstreams = ["solo"]
unprefixed = true
path = true
anonymous = true
deny = ["tool:crash", "tool:add_tool"]
"#;

fn config() -> String {
    format!(
        "{}{}{}{PROFILES}",
        test_upstream(
            "a",
            &["--tasks", "--instructions", "Use a's tools for A-things."]
        ),
        test_upstream("b", &[]),
        test_upstream("solo", &["--instructions", "Solo knows solo things."]),
    )
}

fn names(items: &[Value], key: &str) -> BTreeSet<String> {
    items
        .iter()
        .map(|i| i[key].as_str().unwrap().to_owned())
        .collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// The error of an answer, as (code, message).
fn error(answer: &Value) -> (i64, String) {
    let error = &answer["error"];
    assert!(error.is_object(), "expected an error: {answer}");
    (
        error["code"].as_i64().unwrap(),
        error["message"].as_str().unwrap().to_owned(),
    )
}

/// A daemon with upstreams a, b, solo and the profiles above, all three upstreams listed.
async fn start() -> Daemon {
    let daemon = Daemon::start(&config());
    let full = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&full, |n| {
            ["a__echo", "b__echo", "solo__echo"]
                .iter()
                .all(|t| n.iter().any(|x| x == t))
        })
        .await;
    daemon
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_profile_hides_does_not_exist_on_any_method() {
    let daemon = start().await;
    let reader_url = format!("{}/reader", daemon.url);
    let reader = Client::connect(&reader_url).await;
    let full = Client::connect(&daemon.url).await;

    // Listings: only what the profile lets through, renamed and re-described, in pages of 2.
    let tools = reader.list_all("tools/list", "tools").await;
    assert_eq!(
        names(&tools, "name"),
        set(&[
            "say",
            "wait",
            "a__fancy",
            "b__add_tool",
            "b__echo",
            "b__fancy",
            "b__huge",
            "b__slow"
        ])
    );
    let fancy = tools.iter().find(|t| t["name"] == "a__fancy").unwrap();
    assert_eq!(
        fancy["description"],
        "Fancy, as the reader profile tells it."
    );
    assert_eq!(
        fancy["annotations"]["x-vendorHint"], "keep-me",
        "the rest of the definition passes untouched"
    );
    let first = reader.result("tools/list", json!({})).await;
    assert_eq!(first["tools"].as_array().unwrap().len(), 2, "page_size = 2");
    let prompts = reader.list_all("prompts/list", "prompts").await;
    assert_eq!(names(&prompts, "name"), set(&["b__greet"]));
    let resources = reader.list_all("resources/list", "resources").await;
    assert_eq!(names(&resources, "uri"), set(&["a+test://a/hello"]));
    let templates = reader
        .list_all("resources/templates/list", "resourceTemplates")
        .await;
    assert_eq!(
        names(&templates, "uriTemplate"),
        set(&["b+test://b/item/{id}"])
    );

    // The whole catalog is unchanged for a host without a profile.
    let all = names(&full.list_all("tools/list", "tools").await, "name");
    assert!(all.contains("a__echo") && all.contains("solo__echo") && !all.contains("say"));

    // A renamed tool answers under its new name.
    let said = reader
        .result("tools/call", json!({"name": "say", "arguments": {"x": 1}}))
        .await;
    assert_eq!(
        said["structuredContent"]["params"],
        json!({"name": "echo", "arguments": {"x": 1}}),
        "the upstream is called with its own name"
    );

    // Hidden names answer exactly as names that never existed.
    let never = error(
        &reader
            .request("tools/call", json!({"name": "a__never", "arguments": {}}))
            .await,
    );
    for hidden in ["a__echo", "a__slow", "a__crash", "b__crash", "solo__echo"] {
        let answer = reader
            .request("tools/call", json!({"name": hidden, "arguments": {}}))
            .await;
        let (code, message) = error(&answer);
        assert_eq!(code, never.0, "{hidden}: {answer}");
        assert_eq!(message, never.1.replace("a__never", hidden), "{hidden}");
    }
    let never_prompt = error(
        &reader
            .request("prompts/get", json!({"name": "b__never", "arguments": {}}))
            .await,
    );
    let hidden_prompt = error(
        &reader
            .request(
                "prompts/get",
                json!({"name": "a__greet", "arguments": {"name": "x"}}),
            )
            .await,
    );
    assert_eq!(hidden_prompt.0, never_prompt.0);
    assert_eq!(
        hidden_prompt.1,
        never_prompt.1.replace("b__never", "a__greet")
    );
    let greeting = reader
        .result(
            "prompts/get",
            json!({"name": "b__greet", "arguments": {"name": "Ada"}}),
        )
        .await;
    assert!(greeting.to_string().contains("Hello, Ada from b"));

    // Reads and subscriptions: a listed resource, or one from a template the profile shows, pass;
    // one from a hidden template (a's) does not, even where the resource globs would let it.
    let read = reader
        .result("resources/read", json!({"uri": "b+test://b/item/7"}))
        .await;
    assert_eq!(read["contents"][0]["uri"], "b+test://b/item/7");
    let read = reader
        .result("resources/read", json!({"uri": "a+test://a/hello"}))
        .await;
    assert_eq!(read["contents"][0]["text"], "hello from a");
    let unknown_uri = error(
        &reader
            .request("resources/read", json!({"uri": "zz+test://zz/hello"}))
            .await,
    );
    for (method, uri) in [
        ("resources/read", "b+test://b/hello"),
        ("resources/subscribe", "b+test://b/hello"),
        ("resources/read", "a+test://a/item/7"),
        ("resources/read", "solo+test://solo/hello"),
    ] {
        let (code, message) = error(&reader.request(method, json!({"uri": uri})).await);
        assert_eq!(code, unknown_uri.0, "{method} {uri}");
        assert_eq!(message, unknown_uri.1.replace("zz+test://zz/hello", uri));
    }
    reader
        .result("resources/subscribe", json!({"uri": "a+test://a/hello"}))
        .await;

    // Completion: a hidden prompt or template is unknown; visible ones complete.
    let complete = |reference: Value, argument: &str| json!({"ref": reference, "argument": {"name": argument, "value": "a"}});
    let done = reader
        .result(
            "completion/complete",
            complete(json!({"type": "ref/prompt", "name": "b__greet"}), "name"),
        )
        .await;
    assert_eq!(done["completion"]["values"], json!(["Ada", "Alan"]));
    reader
        .result(
            "completion/complete",
            complete(
                json!({"type": "ref/resource", "uri": "b+test://b/item/{id}"}),
                "id",
            ),
        )
        .await;
    let hidden = reader
        .request(
            "completion/complete",
            complete(json!({"type": "ref/prompt", "name": "a__greet"}), "name"),
        )
        .await;
    assert_eq!(error(&hidden).0, never_prompt.0, "{hidden}");
    let hidden = reader
        .request(
            "completion/complete",
            complete(
                json!({"type": "ref/resource", "uri": "a+test://a/item/{id}"}),
                "id",
            ),
        )
        .await;
    assert_eq!(error(&hidden).0, unknown_uri.0, "{hidden}");

    // Tasks: a task made through a renamed tool is the session's alone.
    let body = json!({"jsonrpc": "2.0", "id": reader.fresh_id(), "method": "tools/call",
                      "params": {"name": "wait", "arguments": {"ms": 3000},
                                 "task": {"ttl": 60000}}});
    let created = read_messages(reader.post(&body).await).await;
    reader
        .schemas()
        .check("CreateTaskResult", &created[0]["result"]);
    let task = created[0]["result"]["task"]["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    let got = reader.result("tasks/get", json!({"taskId": task})).await;
    assert_eq!(got["taskId"], task);
    let listed = reader.result("tasks/list", json!({})).await;
    assert!(listed.to_string().contains(&task), "{listed}");
    let elsewhere = full.request("tasks/get", json!({"taskId": task})).await;
    assert!(elsewhere["error"].is_object(), "{elsewhere}");

    // A cursor of the reader's listing means nothing in the whole catalog, and vice versa.
    let cursor = first["nextCursor"].as_str().unwrap();
    let (code, message) = error(&full.request("tools/list", json!({"cursor": cursor})).await);
    assert_eq!(code, -32602);
    assert!(message.contains("another profile"), "{message}");
    let solo = Client::connect(&format!("{}/solo", daemon.url)).await;
    let (code, _) = error(&solo.request("tools/list", json!({"cursor": cursor})).await);
    assert_eq!(code, -32602);

    // The reader's session does not exist at /mcp or at another profile's path.
    let ping = json!({"jsonrpc": "2.0", "id": 77, "method": "ping"});
    let mut moved = reader.impersonate(None);
    moved.url.clone_from(&daemon.url);
    assert_eq!(moved.post(&ping).await.status(), 404);
    moved.url = format!("{}/solo", daemon.url);
    assert_eq!(moved.post(&ping).await.status(), 404);
    let missing = reqwest::Client::new()
        .post(format!("{}/nope", daemon.url))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(ping.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unprefixed_profile_serves_its_one_upstream_bare() {
    let daemon = start().await;
    let solo_url = format!("{}/solo", daemon.url);
    // Its handshake names only its own upstream: instructions (without a prefix) and
    // capabilities (no tasks: only `a`, which it does not hold, has them).
    let init: Value = initialize_as(&solo_url, None).await.json().await.unwrap();
    let result = &init["result"];
    let instructions = result["instructions"].as_str().unwrap();
    assert!(
        instructions.contains("Solo knows solo things."),
        "{instructions}"
    );
    assert!(
        !instructions.contains("A-things") && !instructions.contains("prefixed"),
        "{instructions}"
    );
    assert!(result["capabilities"].get("tasks").is_none(), "{result}");
    let full: Value = initialize_as(&daemon.url, None).await.json().await.unwrap();
    assert!(
        full["result"]["capabilities"]["tasks"].is_object(),
        "{full}"
    );
    assert!(
        full["result"]["instructions"]
            .as_str()
            .unwrap()
            .contains("A-things")
    );
    let solo = Client::connect(&solo_url).await;
    let tools = names(&solo.list_all("tools/list", "tools").await, "name");
    assert_eq!(
        tools,
        set(&["echo", "fancy", "fail", "huge", "slow"]),
        "bare names, crash and add_tool denied"
    );
    assert!(
        solo.tool_text("echo", json!({"hi": 1}))
            .await
            .contains("hi")
    );
    // A denied name is not passed through to the upstream either.
    let (code, message) = error(
        &solo
            .request("tools/call", json!({"name": "crash", "arguments": {}}))
            .await,
    );
    assert_eq!((code, message.as_str()), (-32602, "Unknown tool: crash"));
    let resources = solo.list_all("resources/list", "resources").await;
    assert_eq!(names(&resources, "uri"), set(&["test://solo/hello"]));
    let read = solo
        .result("resources/read", json!({"uri": "test://solo/item/3"}))
        .await;
    assert_eq!(read["contents"][0]["uri"], "test://solo/item/3");
    assert_eq!(read["contents"][0]["text"], "item 3 from solo");
    let prompt = solo
        .result(
            "prompts/get",
            json!({"name": "greet", "arguments": {"name": "Grace"}}),
        )
        .await;
    assert!(prompt.to_string().contains("Hello, Grace from solo"));
    // The same upstream is still prefixed for everyone else.
    let full = Client::connect(&daemon.url).await;
    assert!(
        full.tool_text("solo__echo", json!({"x": 2}))
            .await
            .contains('x')
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_changed_reaches_a_profile_only_for_what_it_sees() {
    let daemon = start().await;
    let reader = Client::connect(&format!("{}/reader", daemon.url)).await;
    let mut reader_events = reader.events().await;
    let full = Client::connect(&daemon.url).await;
    let mut full_events = full.events().await;

    // A tool added to `a` (whose new tools the reader does not allow) changes only the whole view.
    full.result(
        "tools/call",
        json!({"name": "a__add_tool", "arguments": {"name": "extra"}}),
    )
    .await;
    let changed = full_events.next().await;
    assert_eq!(changed["method"], "notifications/tools/list_changed");
    reader_events
        .assert_silent(Duration::from_millis(700), "a change the reader cannot see")
        .await;

    // A tool added to `b` (b__* is allowed) reaches both.
    full.result(
        "tools/call",
        json!({"name": "b__add_tool", "arguments": {"name": "extra"}}),
    )
    .await;
    let changed = reader_events.next().await;
    assert_eq!(changed["method"], "notifications/tools/list_changed");
    let tools = names(&reader.list_all("tools/list", "tools").await, "name");
    assert!(
        tools.contains("b__extra") && !tools.contains("a__extra"),
        "{tools:?}"
    );
}

async fn initialize(url: &str, token: Option<&str>) -> reqwest::StatusCode {
    initialize_as(url, token).await.status()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_paths_and_the_anonymous_profile_decide_what_is_seen() {
    // The daemon's config starts with its own [server] table, which this first line continues.
    let config = format!(
        "anonymous_profile = \"solo\"\n\
         [hosts.alice]\ntoken_sha256 = \"{}\"\nprofile = \"reader\"\n\
         [hosts.bob]\ntoken_sha256 = \"{}\"\n\
         {}\n[profiles.locked]\nupstreams = [\"b\"]\npath = true\npath_requires_credential = true\n",
        sha256_hex(ALICE),
        sha256_hex(BOB),
        config(),
    );
    let daemon = Daemon::start(&config);
    let bob = Client::connect_as(&daemon.url, BOB).await;
    daemon
        .wait_for_tools(&bob, |n| {
            ["a__echo", "b__echo", "solo__echo"]
                .iter()
                .all(|t| n.iter().any(|x| x == t))
        })
        .await;

    // Alice's profile applies on /mcp; she may use its path, not another profile's.
    let alice = Client::connect_as(&daemon.url, ALICE).await;
    let seen = names(&alice.list_all("tools/list", "tools").await, "name");
    assert!(
        seen.contains("say") && !seen.contains("a__echo"),
        "{seen:?}"
    );
    assert_eq!(
        initialize(&format!("{}/reader", daemon.url), Some(ALICE)).await,
        200
    );
    assert_eq!(
        initialize(&format!("{}/solo", daemon.url), Some(ALICE)).await,
        403
    );
    // A profile segment that does not decode is refused, not served as `/mcp`.
    assert_eq!(
        initialize(&format!("{}/%FF", daemon.url), Some(BOB)).await,
        400
    );
    // Bob, with no profile of his own, may use any path and sees that profile there.
    let bob_solo = Client::connect_as(&format!("{}/solo", daemon.url), BOB).await;
    let seen = names(&bob_solo.list_all("tools/list", "tools").await, "name");
    assert!(
        seen.contains("echo") && !seen.contains("solo__echo"),
        "{seen:?}"
    );
    // Alice's session is not Bob's, even on the same profile's path.
    let alice_reader = Client::connect_as(&format!("{}/reader", daemon.url), ALICE).await;
    let ping = json!({"jsonrpc": "2.0", "id": 9, "method": "ping"});
    assert_eq!(
        alice_reader
            .impersonate(Some(BOB))
            .post(&ping)
            .await
            .status(),
        404
    );

    // No credential from loopback: the anonymous profile on /mcp, the path of a profile that
    // says `anonymous = true`, but any other path is 401 once hosts are configured; a wrong
    // credential is never anonymous.
    let anonymous = Client::connect(&daemon.url).await;
    let seen = names(&anonymous.list_all("tools/list", "tools").await, "name");
    assert!(
        seen.contains("echo") && !seen.contains("b__echo"),
        "{seen:?}"
    );
    assert_eq!(
        initialize(&format!("{}/reader", daemon.url), None).await,
        401,
        "a profile path is open without a credential"
    );
    assert_eq!(initialize(&format!("{}/solo", daemon.url), None).await, 200);
    assert_eq!(
        initialize(&format!("{}/solo", daemon.url), Some("wrong-token")).await,
        401
    );
    // `serve` said at start what is reachable without a credential.
    let log = daemon.stderr();
    let said = log
        .lines()
        .find(|l| l.contains("reachable without a credential"))
        .unwrap_or_else(|| panic!("no start line says what is open:\n{log}"));
    assert!(
        said.contains("/mcp/solo") && said.contains("solo") && !said.contains("/mcp/reader"),
        "{said}"
    );
    assert_eq!(
        initialize(&format!("{}/locked", daemon.url), None).await,
        401
    );
    assert_eq!(
        initialize(&format!("{}/locked", daemon.url), Some(BOB)).await,
        200
    );
    assert_eq!(initialize(&daemon.url, Some("wrong-token")).await, 401);

    // Audit records carry the profile; the query filters by it.
    let records = (daemon.admin())
        .json("/audit/query?profile=reader&method=tools/list&limit=100")
        .await;
    let records = records["records"].as_array().unwrap();
    assert!(!records.is_empty());
    assert!(
        records
            .iter()
            .all(|r| r["profile"] == "reader" && r["principal"] == "alice"),
        "{records:?}"
    );
    for token in [ALICE, BOB] {
        assert!(
            !daemon.stderr().contains(token),
            "a host token leaked into the log"
        );
    }
}

#[test]
fn profile_mistakes_are_named_with_their_fix() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "[profiles.p]\nupstreams = [\"nope\"]\n",
            "profiles.p.upstreams",
        ),
        ("[profiles.p]\nunprefixed = true\n", "profiles.p.unprefixed"),
        ("[profiles.p]\nallow = [\"tool:[x\"]\n", "profiles.p.allow"),
        (
            "[profiles.p]\n[profiles.p.rename]\n\"a__echo\" = \"has space\"\n",
            "profiles.p.rename.a__echo",
        ),
        (
            "[server]\nanonymous_profile = \"ghost\"\n",
            "server.anonymous_profile",
        ),
        (
            "[profiles.p]\npath = true\npath_requires_credential = true\n",
            "profiles.p.path_requires_credential",
        ),
        ("[profiles.p]\nanonymous = true\n", "profiles.p.anonymous"),
        (
            "[profiles.p]\npath = true\nanonymous = true\npath_requires_credential = true\n",
            "profiles.p.anonymous",
        ),
    ];
    let upstreams = format!("{}{}", test_upstream("a", &[]), test_upstream("b", &[]));
    for (extra, culprit) in cases {
        common::assert_check_refuses(dir.path(), &format!("{extra}{upstreams}"), culprit);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_server_authorization_a_profile_path_wants_a_credential_unless_anonymous() {
    let dir = tempfile::tempdir().unwrap();
    let jwks = dir.path().join("jwks.json");
    std::fs::write(&jwks, r#"{"keys": []}"#).unwrap();
    let daemon = Daemon::start(&format!(
        "authorization = {{ issuer = \"https://idp.example.test\", jwks_file = {} }}\n{}\n\
         [profiles.closed]\npath = true\n[profiles.open]\npath = true\nanonymous = true\n",
        common::toml_str(jwks.to_str().unwrap()),
        test_upstream("a", &[]),
    ));
    assert_eq!(initialize(&daemon.url, None).await, 401);
    assert_eq!(
        initialize(&format!("{}/closed", daemon.url), None).await,
        401,
        "a profile path is open without a credential"
    );
    assert_eq!(initialize(&format!("{}/open", daemon.url), None).await, 200);
}
