//! The web console as another local user meets it: a listener on a sibling port of 127.0.0.1
//! that the user's browser visits (a browser binds cookies to a host, not to a port), and
//! upstream-chosen names that a console button would put into the URL it posts to.

use std::time::Duration;

use serde_json::{Value, json};

use super::daemon;
use crate::common::console::forms;
use crate::common::{Client, ConsoleSession, Daemon, poll_until, test_upstream};

/// Console paths anyone can name without a secret: a browser sends a cookie scoped to `/` (or to
/// `/console/`) with a request for any of them, to any port of the host.
const GUESSABLE: [&str; 7] = [
    "/",
    "/console",
    "/console/",
    "/console/config",
    "/console/pins",
    "/console/audit",
    "/console/audit/export?format=csv",
];

/// Whether a browser sends a cookie whose `Path` is `cookie_path` with a request for `request`
/// (RFC 6265 §5.1.4).
fn path_matches(request: &str, cookie_path: &str) -> bool {
    let request = request.split('?').next().unwrap_or_default();
    request == cookie_path
        || (request.starts_with(cookie_path)
            && (cookie_path.ends_with('/') || request[cookie_path.len()..].starts_with('/')))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_console_cookie_a_sibling_port_receives_opens_nothing() {
    let daemon = daemon();
    let console = ConsoleSession::sign_in(&daemon.admin()).await;
    let cookie = cookie::Cookie::parse(console.set_cookie.clone()).unwrap();

    // A listener on another port of 127.0.0.1 receives the cookie with any request the browser
    // makes to it for a path under the cookie's `Path`: that path must hold a secret only the
    // session's own pages know, different for each session.
    let path = cookie.path().unwrap_or("/").to_owned();
    for guess in GUESSABLE {
        assert!(
            !path_matches(guess, &path),
            "a browser sends the console cookie with a request for {guess} to any port: {}",
            console.set_cookie
        );
    }
    let secret = path.split('/').map(str::len).max().unwrap_or_default();
    assert!(
        secret >= 22,
        "no unguessable segment in the cookie's path {path}"
    );
    assert!(
        path_matches(&console.base, &path),
        "the session's pages ({}) get the cookie ({path})",
        console.base
    );
    let again = ConsoleSession::sign_in(&daemon.admin()).await;
    assert_ne!(
        again.base, console.base,
        "each session has a path of its own"
    );

    // The session is short-lived: the cookie outlives no sign-in of more than 4 hours.
    let max_age = cookie.max_age().expect("the cookie says how long it lasts");
    assert!(
        max_age <= cookie::time::Duration::hours(4),
        "the console cookie lasts {max_age}: {}",
        console.set_cookie
    );

    // What the sibling listener could do with the cookie: replay it to the admin port, for the
    // paths it can name. None of them is a session's page (none shows a CSRF token).
    for guess in GUESSABLE {
        let answer = console.get_path(guess).await;
        let status = answer.status();
        let text = answer.text().await.unwrap();
        assert!(
            status != 200 && !text.contains("name=\"csrf\""),
            "{guess} with the cookie alone answered a session's page ({status}): {text}"
        );
    }
    // With its own path, the cookie opens its session's pages.
    assert!(console.csrf().await.len() >= 32);
    let config = console.get("config").await;
    assert_eq!(config.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_chosen_tool_name_cannot_aim_a_console_button() {
    /// A tool name that, put raw into the approve button's URL, makes it restart `ev` instead.
    const AIMED: &str = "x/../../../upstreams/ev/restart?";
    let daemon = Daemon::start(&format!(
        "{}{}",
        test_upstream("up", &[]),
        test_upstream("ev", &[])
    ));
    let host = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&host, |n| {
            ["up__echo", "ev__echo"]
                .iter()
                .all(|e| n.iter().any(|t| t == e))
        })
        .await;
    // `up` lists the tool, it is pinned; then its description changes: a pin to approve.
    let add = |arguments: Value| {
        host.result(
            "tools/call",
            json!({"name": "up__add_tool", "arguments": arguments}),
        )
    };
    add(json!({"name": AIMED})).await;
    let admin = daemon.admin();
    let pinned = poll_until(Duration::from_secs(20), || async {
        let pins = admin.json("/pins").await;
        pins["pins"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["tool"] == AIMED)
    })
    .await;
    assert!(pinned, "the tool is pinned: {}", admin.json("/pins").await);
    add(json!({"name": AIMED, "description": "changed"})).await;
    let changed = poll_until(Duration::from_secs(20), || async {
        let pins = admin.json("/pins").await;
        (pins["pins"].as_array().unwrap().iter())
            .any(|p| p["tool"] == AIMED && p["changed_to"].is_string())
    })
    .await;
    assert!(
        changed,
        "the tool's pin changed: {}",
        admin.json("/pins").await
    );
    let restarts = daemon.upstream_status("ev").await["restarts"].clone();

    // The person presses "Approve": the browser posts the form where its action leads, resolved
    // against the page's address (dot segments removed, as every browser does).
    let console = ConsoleSession::sign_in(&admin).await;
    let page = console.page("pins").await;
    let form = forms(&page)
        .into_iter()
        .find(|f| f.button.starts_with("Approve") && f.button.contains(AIMED))
        .unwrap_or_else(|| panic!("no approve button for {AIMED}: {page}"));
    let page_url = url::Url::parse(&format!("{}{}pins", console.admin, console.base)).unwrap();
    let target = page_url.join(&form.action).unwrap();
    let fields: Vec<(&str, &str)> = (form.fields.iter())
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let path = &target[url::Position::BeforePath..];
    let answer = console.post_path(path, &fields).await;
    let notice = answer.headers()["location"].to_str().unwrap().to_owned();
    assert!(
        notice.contains("Approved"),
        "the button ({} → {path}) approved the pin: {notice}",
        form.action
    );
    assert_eq!(
        daemon.upstream_status("ev").await["restarts"],
        restarts,
        "the approve button restarted `ev`"
    );
    let pins = admin.json("/pins").await;
    let row = (pins["pins"].as_array().unwrap().iter())
        .find(|p| p["tool"] == AIMED)
        .unwrap();
    assert!(row["changed_to"].is_null(), "approved: {row}");
}
