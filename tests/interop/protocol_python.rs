//! Protocol fidelity through mcpmux, as the official Python SDK (`pip install mcp`) sees it.
//!
//! A daemon runs `@modelcontextprotocol/server-everything` (npm, as `everything`) and our test
//! upstream (as `mine`). `tests/interop/python_protocol.py` connects one `mcp.Client` session that
//! declares sampling, elicitation and roots through its callbacks, and exercises, in that session:
//!
//! 1. progress of a long-running tool, live, in order, under the host's own token;
//! 2. a sampling request answered by the host's sampling callback;
//! 3. an elicitation answered by the host's elicitation callback;
//! 4. roots requested from the host and delivered to the upstream;
//! 5. `completion/complete` for a prompt and a resource template of server-everything;
//! 6. `notifications/resources/updated` for a subscribed, exposed `everything+…` URI;
//! 7. log messages after `logging/setLevel`, their logger prefixed by the upstream's name;
//! 8. `notifications/tools/list_changed` after `mine` adds a tool (server-everything never changes
//!    its tools after start-up), then the new tool in a fresh listing.
//!
//! The script records what the SDK saw for each item and prints one JSON summary; these tests judge
//! every item on its own and fail listing each item that went wrong, with what was seen. Both run
//! over Streamable HTTP and through `mcpmux stdio --url`, each against its own daemon (server-
//! everything's toggles, cached roots and `mine`'s added tool are per upstream process). A machine
//! without the SDK, Node.js or npm fails here, it does not skip.

use std::time::{Duration, Instant};

use crate::common::python::{require_python_sdk, run_script, shell_quote};
use crate::common::{Client, Daemon, MCPMUX, RemoteServer, npm_upstream, test_upstream};
use serde_json::{Value, json};

const PYTHON_DEADLINE: Duration = Duration::from_secs(240);

/// What `python_protocol.py` uses; kept in step with its constants.
const SAMPLED_TEXT: &str = "sampled by the python host";
const SAMPLED_MODEL: &str = "python-sdk-test-model";
const SAMPLING_PROMPT: &str = "mcpmux-sampling-marker";
const ROOTS: [&str; 2] = [
    "file:///tmp/mcpmux-protocol/alpha",
    "file:///tmp/mcpmux-protocol/beta",
];
const SUBSCRIBED_URI: &str = "everything+demo://resource/static/document/architecture.md";
const PROGRESS_STEPS: u64 = 5;
/// The first progress must reach the host at least this long before the result (the operation
/// takes 2 s and sends its first progress after 0.4 s).
const PROGRESS_LEAD: f64 = 0.5;

/// A daemon with `everything` (server-everything) and `mine` (test upstream), both listed —
/// including server-everything's tools that it registers only for clients declaring sampling,
/// elicitation and roots (mcpmux declares them upstream).
async fn start_daemon() -> Daemon {
    start_daemon_with(&npm_upstream("everything", "mcp-server-everything", &[])).await
}

/// [`start_daemon`] with `everything` as written in `table` (a remote server, say).
async fn start_daemon_with(table: &str) -> Daemon {
    let daemon = Daemon::start(&format!("{table}{}", test_upstream("mine", &[])));
    let started = Instant::now();
    let client = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&client, |names| {
            [
                "everything__trigger-long-running-operation",
                "everything__trigger-sampling-request",
                "everything__trigger-elicitation-request",
                "everything__get-roots-list",
                "mine__add_tool",
            ]
            .iter()
            .all(|want| names.iter().any(|n| n == want))
        })
        .await;
    eprintln!("upstreams listed after {:.2?}", started.elapsed());
    daemon
}

/// Runs `tests/interop/python_protocol.py ARGS`; returns its JSON summary.
/// The SDK connects in `legacy` mode: what this checks (server requests on the session,
/// `logging/setLevel`, `resources/subscribe`, list_changed on the session's stream) is the
/// handshake era's.
async fn run_python(daemon: &Daemon, args: &[&str]) -> Value {
    run_python_as(daemon, args, "legacy").await
}

/// [`run_python`] with the SDK connecting in `mode`.
async fn run_python_as(daemon: &Daemon, args: &[&str], mode: &str) -> Value {
    let args = [args, &["--mode", mode]].concat();
    let (summary, wall) = run_script(daemon, "python_protocol.py", &args, PYTHON_DEADLINE).await;
    let items = summary["items"].as_object().map_or(String::new(), |items| {
        items
            .iter()
            .map(|(name, item)| format!("{name} {}s", item["item_seconds"]))
            .collect::<Vec<_>>()
            .join(", ")
    });
    eprintln!(
        "python_protocol.py {args:?}: {:.2?} wall (Python start-up included), SDK session {}s, \
         closing {}s; items: {items}",
        wall, summary["seconds"], summary["close_seconds"],
    );
    summary
}

// ---------------------------------------------------------------------------------------------
// The eight items, each judged on its own: Ok, or what is wrong.

type Check = Result<(), String>;

fn ensure(condition: bool, message: impl FnOnce() -> String) -> Check {
    if condition { Ok(()) } else { Err(message()) }
}

/// The item's own error (an exception the SDK raised, a timeout) fails it first.
fn no_error(item: &Value) -> Check {
    match item.get("error") {
        Some(error) => Err(format!("the SDK raised: {error}")),
        None => Ok(()),
    }
}

fn result_text(item: &Value) -> String {
    item["result_text"]
        .as_array()
        .map(|parts| {
            parts
                .iter()
                .filter_map(Value::as_str)
                .collect::<Vec<_>>()
                .join("\n")
        })
        .unwrap_or_default()
}

fn tool_succeeded(item: &Value) -> Check {
    ensure(item["is_error"] == false, || {
        format!("the tool answered isError: {}", result_text(item))
    })
}

/// 1. Every progress notification reached the progress callback — which the SDK runs only for its
///    own token — in order, live, and all carried one token.
fn check_progress(item: &Value) -> Check {
    no_error(item)?;
    tool_succeeded(item)?;
    let text = result_text(item);
    ensure(
        text == "Long running operation completed. Duration: 2 seconds, Steps: 5.",
        || format!("unexpected result: {text:?}"),
    )?;
    let callbacks = item["callbacks"].as_array().cloned().unwrap_or_default();
    let progress: Vec<f64> = callbacks
        .iter()
        .filter_map(|c| c["progress"].as_f64())
        .collect();
    let expected: Vec<f64> = (1..=PROGRESS_STEPS).map(|i| i as f64).collect();
    ensure(progress == expected, || {
        format!(
            "the progress callback got {progress:?}, expected {expected:?} in order (a \
             notification under another token never reaches it)"
        )
    })?;
    ensure(
        callbacks
            .iter()
            .all(|c| c["total"].as_f64() == Some(PROGRESS_STEPS as f64)),
        || format!("every progress should carry total {PROGRESS_STEPS}: {callbacks:?}"),
    )?;
    let tokens = item["tokens"].as_array().cloned().unwrap_or_default();
    ensure(
        tokens.len() == callbacks.len() && tokens.windows(2).all(|w| w[0] == w[1]),
        || format!("the progress notifications should all carry the host's one token: {tokens:?}"),
    )?;
    let first = callbacks[0]["at"].as_f64().unwrap_or(f64::MAX);
    let done = item["seconds"].as_f64().unwrap_or(0.0);
    ensure(first + PROGRESS_LEAD <= done, || {
        format!(
            "progress was not live: the first arrived {first}s after the call started, the \
             result {done}s (arrivals: {:?})",
            callbacks.iter().map(|c| &c["at"]).collect::<Vec<_>>()
        )
    })
}

/// 2. The upstream's `sampling/createMessage` reached the host's callback, and the callback's
///    answer reached the upstream.
fn check_sampling(item: &Value) -> Check {
    no_error(item)?;
    tool_succeeded(item)?;
    let requests = item["requests"].as_array().cloned().unwrap_or_default();
    ensure(requests.len() == 1, || {
        format!(
            "the sampling callback ran {} times: {requests:?}",
            requests.len()
        )
    })?;
    let asked = requests[0]["messages"][0]["content"]["text"]
        .as_str()
        .unwrap_or_default();
    ensure(asked.ends_with(SAMPLING_PROMPT), || {
        format!("the sampling request did not carry the tool's prompt: {asked:?}")
    })?;
    ensure(requests[0]["maxTokens"] == 33, || {
        format!("maxTokens should pass through as 33: {}", requests[0])
    })?;
    let text = result_text(item);
    ensure(
        text.contains(SAMPLED_TEXT) && text.contains(SAMPLED_MODEL),
        || format!("the tool result does not hold what the callback returned: {text:?}"),
    )
}

/// 3. The upstream's `elicitation/create` reached the host's callback; its accepted content
///    reached the upstream.
fn check_elicitation(item: &Value) -> Check {
    no_error(item)?;
    tool_succeeded(item)?;
    let requests = item["requests"].as_array().cloned().unwrap_or_default();
    ensure(requests.len() == 1, || {
        format!(
            "the elicitation callback ran {} times: {requests:?}",
            requests.len()
        )
    })?;
    ensure(
        requests[0]["message"] == "Please provide inputs for the following fields:"
            && requests[0]["requestedSchema"]["required"] == json!(["name"]),
        || {
            format!(
                "the elicitation request is not server-everything's: {}",
                requests[0]
            )
        },
    )?;
    let text = result_text(item);
    ensure(
        text.contains("User provided the requested information")
            && text.contains("- Name: Ada Lovelace")
            && text.contains("- Favorite Integer: 7"),
        || format!("the tool result does not hold what the callback returned: {text:?}"),
    )
}

/// 4. The upstream's `roots/list` reached the host's callback; the tool lists the host's roots.
fn check_roots(item: &Value) -> Check {
    no_error(item)?;
    tool_succeeded(item)?;
    ensure(item["roots_requests"].as_u64() >= Some(1), || {
        format!("the list_roots callback never ran: {item}")
    })?;
    let text = result_text(item);
    ensure(
        text.contains("(2 total)") && ROOTS.iter().all(|root| text.contains(root)),
        || format!("the tool result does not list the host's roots {ROOTS:?}: {text:?}"),
    )?;
    // server-everything then logs with its own logger, which mcpmux nests under the upstream's.
    let loggers: Vec<&Value> = item["roots_logs"]
        .as_array()
        .map(|logs| logs.iter().map(|l| &l["logger"]).collect())
        .unwrap_or_default();
    ensure(loggers == [&json!("everything/everything-server")], || {
        format!(
            "the `Roots updated` log should have logger everything/everything-server: {loggers:?}"
        )
    })
}

/// 5. Completion values for a prompt argument (with and without context) and a template argument.
fn check_completion(item: &Value) -> Check {
    no_error(item)?;
    ensure(item["department_E"] == json!(["Engineering"]), || {
        format!("department `E`: {}", item["department_E"])
    })?;
    ensure(
        item["name_for_sales"] == json!(["David", "Eve", "Frank"]),
        || {
            format!(
                "name with context department=Sales (context.arguments must pass through): {}",
                item["name_for_sales"]
            )
        },
    )?;
    ensure(item["template_resource_id_7"] == json!(["7"]), || {
        format!(
            "template `resourceId` `7` (ref.uri must be the upstream's template): {}",
            item["template_resource_id_7"]
        )
    })
}

/// 6. `notifications/resources/updated` for the subscribed URI, under its exposed name only.
fn check_subscription(item: &Value) -> Check {
    no_error(item)?;
    let on = item["toggle_on"][0].as_str().unwrap_or_default();
    ensure(on.starts_with("Started simulated resource updated"), || {
        format!("toggle-subscriber-updates did not start the updates: {on:?}")
    })?;
    let off = item["toggle_off"][0].as_str().unwrap_or_default();
    ensure(
        off.starts_with("Stopped simulated resource updates"),
        || format!("toggle-subscriber-updates did not stop the updates again: {off:?}"),
    )?;
    let updates = item["updates"].as_array().cloned().unwrap_or_default();
    ensure(
        !updates.is_empty() && updates.iter().all(|u| u["uri"] == SUBSCRIBED_URI),
        || format!("expected updates for {SUBSCRIBED_URI} only: {updates:?}"),
    )
}

fn upstream_logger(logger: &Value) -> bool {
    logger
        .as_str()
        .is_some_and(|l| l == "everything" || l.starts_with("everything/"))
}

/// 7. Log messages after `logging/setLevel`, every logger the upstream's name or nested under it.
fn check_logging(item: &Value, summary: &Value) -> Check {
    no_error(item)?;
    let on = item["toggle_on"][0].as_str().unwrap_or_default();
    ensure(on.starts_with("Started simulated"), || {
        format!("toggle-simulated-logging did not start the logging: {on:?}")
    })?;
    let off = item["toggle_off"][0].as_str().unwrap_or_default();
    ensure(off.starts_with("Stopped simulated logging"), || {
        format!("toggle-simulated-logging did not stop the logging again: {off:?}")
    })?;
    let logs = item["logs"].as_array().cloned().unwrap_or_default();
    ensure(
        logs.iter().any(|l| {
            l["logger"] == "everything"
                && l["data"].as_str().is_some_and(|d| {
                    // "Debug-level message", …, "Alert level-message" (server-everything's spelling)
                    let d = d.to_lowercase();
                    d.contains("level-message") || d.contains("level message")
                })
        }),
        || format!("no simulated log message with logger `everything`: {logs:?}"),
    )?;
    let all = summary["logs"].as_array().cloned().unwrap_or_default();
    let wire = summary["wire_loggers"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    ensure(
        all.iter().all(|l| upstream_logger(&l["logger"]))
            && wire.len() == all.len()
            && wire.iter().all(upstream_logger),
        || {
            format!(
                "every logger should be `everything` or `everything/…`: {all:?} (wire: {wire:?})"
            )
        },
    )
}

/// 8. `notifications/tools/list_changed` after `mine` added a tool, then the tool itself.
fn check_list_changed(item: &Value) -> Check {
    no_error(item)?;
    ensure(item["add_tool_is_error"] == false, || {
        format!("mine__add_tool failed: {}", item["add_tool"])
    })?;
    ensure(item["has_mine__zz"] == true, || {
        "mine__zz is missing from tools/list after list_changed".to_owned()
    })?;
    let called = &item["zz_structured"];
    ensure(
        called["upstream"] == "mine" && called["params"]["name"] == "zz",
        || format!("calling mine__zz did not reach mine as `zz`: {called}"),
    )
}

/// Judges every item; panics once, naming each failed item with why and what the SDK saw.
fn assert_protocol_summary(summary: &Value, transport: &str, daemon: &Daemon) {
    assert_eq!(summary["ok"], true, "{summary}");
    assert_eq!(summary["transport"], transport);
    assert_eq!(summary["server_name"], "mcpmux");
    assert_eq!(summary["protocol_version"], "2025-11-25", "{summary}");
    assert_eq!(
        summary["stream_errors"],
        json!([]),
        "the SDK's message handler got transport errors"
    );
    let items = &summary["items"];
    let checks: [(&str, Check); 8] = [
        ("1 progress", check_progress(&items["progress"])),
        ("2 sampling", check_sampling(&items["sampling"])),
        ("3 elicitation", check_elicitation(&items["elicitation"])),
        ("4 roots", check_roots(&items["roots"])),
        ("5 completion", check_completion(&items["completion"])),
        ("6 subscription", check_subscription(&items["subscription"])),
        ("7 logging", check_logging(&items["logging"], summary)),
        ("8 list_changed", check_list_changed(&items["list_changed"])),
    ];
    let mut failures = Vec::new();
    for (name, check) in &checks {
        let key = name.split_once(' ').map_or(*name, |(_, k)| k);
        match check {
            Ok(()) => eprintln!(
                "[{transport}] item {name}: ok ({}s)",
                items[key]["item_seconds"]
            ),
            Err(why) => {
                eprintln!("[{transport}] item {name}: FAILED: {why}");
                failures.push(format!(
                    "item {name}: {why}\n    seen: {}",
                    items[key]
                        .to_string()
                        .chars()
                        .take(2000)
                        .collect::<String>()
                ));
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of 8 protocol items failed over {transport}:\n{}\nnotifications the SDK got: {}\n\
         daemon stderr:\n{}",
        failures.len(),
        failures.join("\n"),
        summary["notification_methods"],
        daemon.stderr()
    );
}

/// Runs the eight items over Streamable HTTP against `daemon`, then stops it cleanly.
async fn over_http(mut daemon: Daemon) {
    let url = daemon.url.clone();
    let summary = run_python(&daemon, &["--http", url.as_str()]).await;
    assert_protocol_summary(&summary, "http", &daemon);
    assert!(
        daemon.stop(),
        "daemon exited uncleanly:\n{}",
        daemon.stderr()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_protocol_over_streamable_http() {
    require_python_sdk();
    over_http(start_daemon().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_protocol_through_mcpmux_stdio() {
    require_python_sdk();
    let mut daemon = start_daemon().await;
    let command = format!(
        "{} stdio --url {}",
        shell_quote(MCPMUX),
        shell_quote(&daemon.url)
    );
    let summary = run_python(&daemon, &["--stdio", command.as_str()]).await;
    assert_protocol_summary(&summary, "stdio", &daemon);
    assert!(
        daemon.stop(),
        "daemon exited uncleanly:\n{}",
        daemon.stderr()
    );
}

/// The same eight items with server-everything as a remote upstream, over `transport` (the
/// URL path of that mode's endpoint).
async fn remote_protocol(mode: &str, path: &str, transport: &str) {
    require_python_sdk();
    let server = RemoteServer::everything(mode);
    let table = format!(
        "[upstreams.everything]\nurl = \"{}\"\ntransport = \"{transport}\"\n",
        server.url(path)
    );
    over_http(start_daemon_with(&table).await).await;
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_protocol_with_everything_remote_over_streamable_http() {
    remote_protocol("streamableHttp", "/mcp", "streamable-http").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_protocol_with_everything_remote_over_legacy_sse() {
    remote_protocol("sse", "/sse", "sse").await;
}

/// The same script as a 2026-07-28 host (the SDK pinned to that revision: no session, each
/// request stateless), with server-everything over stdio, a handshake-era server: progress
/// arrives live on the call's own stream, and server-everything's sampling, elicitation and
/// roots requests reach the SDK's callbacks through the multi-round bridge (`input_required`,
/// then the SDK's retry), with completion as before. What the revision dropped (`logging/setLevel`,
/// `resources/subscribe`) is "method not found"; what mcpmux does not give a stateless host yet
/// (log messages; list changes outside a `subscriptions/listen` stream) does not arrive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_sdk_protocol_as_a_2026_host() {
    require_python_sdk();
    let mut daemon = start_daemon().await;
    let url = daemon.url.clone();
    let summary = run_python_as(&daemon, &["--http", url.as_str()], "2026-07-28").await;
    assert_eq!(summary["ok"], true, "{summary}");
    assert_eq!(summary["protocol_version"], "2026-07-28", "{summary}");
    assert_eq!(summary["stream_errors"], json!([]), "{summary}");
    let items = &summary["items"];
    let judged = [
        ("1 progress", check_progress(&items["progress"])),
        ("2 sampling", check_sampling(&items["sampling"])),
        ("3 elicitation", check_elicitation(&items["elicitation"])),
        ("5 completion", check_completion(&items["completion"])),
    ];
    let failures: Vec<String> = judged
        .into_iter()
        .filter_map(|(item, result)| result.err().map(|why| format!("{item}: {why}")))
        .collect();
    assert!(failures.is_empty(), "{failures:?}\n{summary}");
    // roots/list reached the SDK's callback (server-everything confirms it only in a log message,
    // which a stateless host does not get yet).
    assert!(
        items["list_changed"]["host_callbacks"]["roots"].as_u64() >= Some(1),
        "the roots callback never ran: {summary}"
    );
    for (item, method) in [
        ("logging", "logging/setLevel"),
        ("subscription", "resources/subscribe"),
    ] {
        let error = items[item]["error"].as_str().unwrap_or_default();
        assert!(
            error.contains(&format!("Method not found: {method}")),
            "{item}: {summary}"
        );
    }
    assert!(
        daemon.stop(),
        "daemon exited uncleanly:\n{}",
        daemon.stderr()
    );
}
