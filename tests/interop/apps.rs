//! MCP Apps (the `io.modelcontextprotocol/ui` extension) through mcpmux, with the published app
//! servers of the ext-apps SDK (`server-system-monitor` as `sysmon`, `server-basic-vanillajs` as
//! `basic`) behind it.
//!
//! In a real browser (`apps_browser.mjs`: Debian's chromium, playwright-core): a web host built on
//! ext-apps' `AppBridge` and the official client SDK (`apps_host.mjs`) connects to mcpmux from its
//! page — cross-origin, allowed by `server.allowed_origins` — reads each tool's page through
//! mcpmux, renders it and hands it its tool's result. Each page shows its server's answer; the
//! system monitor's page then polls with its app-only `poll-system-stats`, by the name its server
//! gave it, and mcpmux routes every poll to `sysmon` (seen in the page, in what the browser was
//! answered, and in the audit log). As a handshake-era host and as a 2026-07-28 host, with the
//! app servers over stdio and over Streamable HTTP. Screenshots go to `tmp/apps-screens/` under
//! the target directory.
//!
//! And the one case mcpmux must not guess: two upstreams serving the same app, whose page's
//! unprefixed call or read is refused naming every candidate.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{
    Client, Daemon, RemoteServer, Via, free_port, npm_upstream, peers, poll_until, toml_str,
};

/// The UI extension, as a host that renders apps declares it.
pub fn ui_capabilities() -> Value {
    json!({"extensions": {"io.modelcontextprotocol/ui": {"mimeTypes": ["text/html;profile=mcp-app"]}}})
}

const SYSMON_PAGE: &str = "ui://sysmon+system-monitor/mcp-app.html";
const BASIC_PAGE: &str = "ui://basic+get-time/mcp-app.html";

/// Debian's chromium: required, never skipped.
fn require_chromium() {
    assert!(
        std::path::Path::new("/usr/bin/chromium").exists(),
        "the MCP Apps browser tests need Debian's chromium at /usr/bin/chromium \
         (apt-get install chromium chromium-driver; .ci/run installs it)"
    );
}

/// A daemon with the system monitor and the basic app, reached `via` stdio or Streamable HTTP
/// (their server processes returned: keep them as long as the daemon), that lets pages from
/// `origin` call it; once their tools are listed.
async fn app_daemon(via: Via, origin: &str) -> (Daemon, Vec<RemoteServer>) {
    let (tables, servers) = match via {
        Via::Stdio => (
            npm_upstream("sysmon", "mcp-system-monitor-server", &["--stdio"])
                + &npm_upstream("basic", "mcp-server-basic-vanillajs", &["--stdio"]),
            Vec::new(),
        ),
        Via::Sse => panic!("the published app servers serve Streamable HTTP, not SSE"),
        Via::Http => {
            let sysmon = RemoteServer::npm_http("mcp-system-monitor-server");
            let basic = RemoteServer::npm_http("mcp-server-basic-vanillajs");
            let tables = sysmon.table("sysmon", Via::Http) + &basic.table("basic", Via::Http);
            (tables, vec![sysmon, basic])
        }
    };
    let daemon = Daemon::start(&format!(
        "allowed_origins = [{}]\n\n{tables}",
        toml_str(origin)
    ));
    let host = Client::connect_with(&daemon.url, "2025-11-25", ui_capabilities()).await;
    let wanted = [
        "sysmon__get-system-info",
        "sysmon__poll-system-stats",
        "basic__get-time",
    ];
    daemon
        .wait_for_tools(&host, |names| {
            wanted.iter().all(|w| names.iter().any(|n| n == w))
        })
        .await;
    (daemon, servers)
}

/// The audit records of `tools/call`s of `target`.
fn audited_calls(daemon: &Daemon, target: &str) -> Vec<Value> {
    (daemon.audit_json().lines())
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|r| r["method"] == "tools/call" && r["target"] == target)
        .collect()
}

/// The browser's requests in `summary` of `method` for `name`.
fn requests<'a>(summary: &'a Value, method: &str, name: &str) -> Vec<&'a Value> {
    (summary["requests"].as_array().unwrap().iter())
        .filter(|r| r["method"] == method && r["name"] == name)
        .collect()
}

/// Runs the browser host against a daemon with both app servers reached `via`, as a host of
/// `era` (`2026-07-28`, or `2025-11-25` for the handshake), and judges what it saw; the
/// screenshot is `apps-screens/<shot>.png`.
async fn apps_render_and_poll_in_a_browser(era: &str, via: Via, shot: &str) {
    require_chromium();
    let page_port = free_port();
    let origin = format!("http://127.0.0.1:{page_port}");
    let (daemon, _servers) = app_daemon(via, &origin).await;

    let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("apps-screens");
    std::fs::create_dir_all(&shots).unwrap();
    let screenshot = shots.join(format!("{shot}.png"));
    let _ = std::fs::remove_file(&screenshot);
    let work = tempfile::tempdir().unwrap();
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/interop/apps_browser.mjs");
    let output = tokio::time::timeout(
        Duration::from_secs(120),
        tokio::process::Command::new(peers::npm_bin("node"))
            .arg(&script)
            .arg(&daemon.url)
            .arg(era)
            .arg(page_port.to_string())
            .arg(work.path())
            .arg(&screenshot)
            .env("PEERS_NODE_MODULES", peers::npm_modules())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the browser script finished within 120 s")
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let summary: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("{e}:\n{stdout}\n{stderr}\ndaemon:\n{}", daemon.stderr()));
    assert!(
        output.status.success() && summary["ok"] == true,
        "apps_browser.mjs failed:\n{summary:#}\n{stderr}\ndaemon:\n{}",
        daemon.stderr()
    );
    eprintln!("screenshot: {}", screenshot.display());
    let host = &summary["host"];

    // The page's client negotiated the era it was pinned to (or the handshake).
    assert_eq!(host["protocolVersion"], era, "{host}");

    // It was listed the exposed tools with their pages' exposed URIs, and — declaring the UI
    // extension — the monitor's app-only tool.
    let tool = |name: &str| {
        (host["tools"].as_array().unwrap().iter())
            .find(|t| t["name"] == name)
            .unwrap_or_else(|| panic!("{name} is not listed: {host}"))
            .clone()
    };
    assert_eq!(tool("sysmon__get-system-info")["resourceUri"], SYSMON_PAGE);
    assert_eq!(tool("basic__get-time")["resourceUri"], BASIC_PAGE);
    assert_eq!(
        tool("sysmon__poll-system-stats")["visibility"],
        json!(["app"])
    );

    // Each app's page was read through mcpmux under its exposed URI, rendered, initialized, and
    // given its tool's result.
    let apps = host["apps"].as_object().unwrap();
    let mut shown: Vec<&str> = apps.keys().map(String::as_str).collect();
    shown.sort_unstable();
    assert_eq!(
        shown,
        ["basic__get-time", "sysmon__get-system-info"],
        "{host}"
    );
    for (name, page) in [
        ("sysmon__get-system-info", SYSMON_PAGE),
        ("basic__get-time", BASIC_PAGE),
    ] {
        let app = &apps[name];
        assert!(app.get("error").is_none(), "{name}: {app}");
        assert_eq!(app["uri"], page, "{name}");
        assert_eq!(
            app["contentUri"], page,
            "{name}: the read names the page as exposed"
        );
        assert_eq!(app["mimeType"], "text/html;profile=mcp-app", "{name}");
        assert!(app["htmlLength"].as_u64().unwrap() > 1000, "{name}: {app}");
        for step in ["loaded", "initialized", "delivered"] {
            assert_eq!(app[step], true, "{name} {step}: {app}");
        }
        assert_eq!(app["result"]["isError"], false, "{name}: {app}");
        let read = requests(&summary, "resources/read", page);
        assert!(
            !read.is_empty() && read.iter().all(|r| r["error"].is_null()),
            "{name}: the page was read through mcpmux: {read:?}"
        );
    }

    // The system monitor shows this machine, from its tool's result…
    let sysmon = &summary["sysmon"];
    let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
    assert_eq!(sysmon["hostname"], hostname.trim(), "{sysmon}");
    assert!(
        sysmon["platform"].as_str().unwrap().starts_with("linux"),
        "{sysmon}"
    );
    // …and its own polling succeeded: the status line is the time of the last answer (an error
    // would read "Error"), the memory and uptime it polls are shown.
    let status = sysmon["status"].as_str().unwrap();
    assert!(
        status.len() == 8 && status.chars().filter(|c| *c == ':').count() == 2,
        "the monitor's status is a poll's time: {sysmon}"
    );
    let indicator = sysmon["indicator"].as_str().unwrap();
    assert!(
        indicator.contains("polling") && !indicator.contains("error"),
        "{sysmon}"
    );
    assert!(
        sysmon["memory"].as_str().unwrap().ends_with('%'),
        "{sysmon}"
    );
    assert!(!sysmon["uptime"].as_str().unwrap().is_empty(), "{sysmon}");
    assert_eq!(sysmon["button"], "Stop", "the monitor is polling: {sysmon}");

    // What the browser sent for the polls: the name the page's server gave, unprefixed, each
    // answered with the stats and no error; the prefixed name never (the page cannot know it).
    let polls = requests(&summary, "tools/call", "poll-system-stats");
    assert!(
        polls.len() >= 2,
        "the page polled twice at least: {polls:?}"
    );
    for poll in &polls {
        assert_eq!(poll["answered"], true, "{poll}");
        assert!(
            poll["error"].is_null() && poll["is_error"] == false,
            "{poll}"
        );
    }
    assert!(requests(&summary, "tools/call", "sysmon__poll-system-stats").is_empty());

    // The basic app shows the time its tool answered; its button's own `get-time` call, also
    // unprefixed, answered a later one.
    let basic = &summary["basic"];
    assert_eq!(
        basic["first"], apps["basic__get-time"]["result"]["structuredContent"]["time"],
        "{basic}"
    );
    assert!(
        basic["after_click"].as_str() > basic["first"].as_str(),
        "{basic}"
    );
    let own = requests(&summary, "tools/call", "get-time");
    assert!(
        own.len() == 1 && own[0]["error"].is_null() && own[0]["is_error"] == false,
        "{own:?}"
    );

    // Every answer to the page said its origin may read it.
    for request in summary["requests"].as_array().unwrap() {
        assert_eq!(request["allow_origin"], origin.as_str(), "{request}");
    }

    // The audit log names what the page called by its exposed name, routed to `sysmon`, once per
    // poll the browser was answered, each ok.
    let answered = polls.len();
    let audited = poll_until(Duration::from_secs(10), || async {
        audited_calls(&daemon, "sysmon__poll-system-stats").len() >= answered
    })
    .await;
    let records = audited_calls(&daemon, "sysmon__poll-system-stats");
    assert!(audited, "{answered} polls, audited: {records:?}");
    assert_eq!(records.len(), answered, "{records:?}");
    eprintln!("{shot}: {answered} polls by the page, each audited ok");
    for record in &records {
        assert_eq!(record["outcome"], "ok", "{record}");
        assert_eq!(record["upstream"], "sysmon", "{record}");
    }
    // The host's call of `basic__get-time` and the page's own.
    let times = audited_calls(&daemon, "basic__get-time");
    assert_eq!(times.len(), 2, "{times:?}");
    assert!(times.iter().all(|r| r["outcome"] == "ok"), "{times:?}");

    assert_eq!(
        summary["console_errors"],
        json!([]),
        "nothing failed in the page"
    );
    assert!(screenshot.exists(), "{}", screenshot.display());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apps_render_and_poll_through_mcpmux_in_a_browser() {
    apps_render_and_poll_in_a_browser("2025-11-25", Via::Stdio, "handshake-stdio").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apps_render_and_poll_through_mcpmux_in_a_browser_as_a_2026_host() {
    apps_render_and_poll_in_a_browser("2026-07-28", Via::Stdio, "modern-stdio").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn apps_render_and_poll_through_mcpmux_in_a_browser_from_remote_app_servers() {
    apps_render_and_poll_in_a_browser("2025-11-25", Via::Http, "handshake-http").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pages_unprefixed_call_is_refused_naming_both_app_servers_that_serve_it() {
    let daemon = Daemon::start(
        &(npm_upstream("mon1", "mcp-system-monitor-server", &["--stdio"])
            + &npm_upstream("mon2", "mcp-system-monitor-server", &["--stdio"])
            + "[profiles.first]\nupstreams = [\"mon1\"]\npath = true\n"),
    );
    let host = Client::connect_with(&daemon.url, "2025-11-25", ui_capabilities()).await;
    let both = ["mon1__poll-system-stats", "mon2__poll-system-stats"];
    daemon
        .wait_for_tools(&host, |names| {
            both.iter().all(|b| names.iter().any(|n| n == b))
        })
        .await;

    // The page's own call, by its server's name: two upstreams have it; refused, naming both.
    let refused = host
        .request(
            "tools/call",
            json!({"name": "poll-system-stats", "arguments": {}}),
        )
        .await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    for name in both {
        assert!(message.contains(name), "{name} is not named: {message}");
    }
    // So is its read of its page.
    let refused = host
        .request(
            "resources/read",
            json!({"uri": "ui://system-monitor/mcp-app.html"}),
        )
        .await;
    assert_eq!(refused["error"]["code"], -32602, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap();
    for page in [
        "ui://mon1+system-monitor/mcp-app.html",
        "ui://mon2+system-monitor/mcp-app.html",
    ] {
        assert!(message.contains(page), "{page} is not named: {message}");
    }

    // Each by its exposed name works, and answers from its own upstream.
    for (name, upstream) in both.iter().zip(["mon1", "mon2"]) {
        let stats = host
            .result("tools/call", json!({"name": name, "arguments": {}}))
            .await;
        assert!(
            stats["structuredContent"]["memory"]["usedPercent"].is_number(),
            "{stats}"
        );
        let page = format!("ui://{upstream}+system-monitor/mcp-app.html");
        let read = host.result("resources/read", json!({"uri": page})).await;
        assert_eq!(read["contents"][0]["uri"], page, "{read}");
        assert!(
            (read["contents"][0]["text"].as_str().unwrap()).contains("poll-system-stats"),
            "{page} is the monitor's page"
        );
    }

    // In a view that holds one of them, the page's own call and read are that one's.
    let first = Client::connect_with(
        &format!("{}/first", daemon.url),
        "2025-11-25",
        ui_capabilities(),
    )
    .await;
    let stats = first
        .result(
            "tools/call",
            json!({"name": "poll-system-stats", "arguments": {}}),
        )
        .await;
    assert!(stats["structuredContent"]["memory"].is_object(), "{stats}");
    let read = first
        .result(
            "resources/read",
            json!({"uri": "ui://system-monitor/mcp-app.html"}),
        )
        .await;
    assert_eq!(
        read["contents"][0]["uri"], "ui://mon1+system-monitor/mcp-app.html",
        "{read}"
    );

    // The refusal is audited under the name that was asked, not as a call of either; the calls
    // by exposed name and the one-view call under the exposed name, each from its upstream.
    let recorded = poll_until(Duration::from_secs(10), || async {
        audited_calls(&daemon, "mon1__poll-system-stats").len() == 2
    })
    .await;
    let records = audited_calls(&daemon, "poll-system-stats");
    assert!(recorded && records.len() == 1, "{records:?}");
    assert_ne!(records[0]["outcome"], "ok", "{}", records[0]);
    for (name, upstream, calls) in [(both[0], "mon1", 2), (both[1], "mon2", 1)] {
        let records = audited_calls(&daemon, name);
        assert_eq!(records.len(), calls, "{records:?}");
        for record in &records {
            assert_eq!(record["upstream"], upstream, "{record}");
            assert_eq!(record["outcome"], "ok", "{record}");
        }
    }
}
