//! The web console as another local user meets it: a listener on a sibling port of 127.0.0.1
//! that the user's browser visits (a browser binds cookies to a host, not to a port), sign-ins
//! guessed at request rate, and upstream-chosen names that a console button would put into the
//! URL it posts to.

use std::time::Duration;

use serde_json::{Value, json};

use super::{admin, daemon};
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_console_sign_ins_are_limited_and_logged_sparingly() {
    let daemon = daemon();
    let admin = admin(&daemon);
    let browser = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let sign_in = |token: String| {
        let (admin, browser) = (admin.clone(), browser.clone());
        async move {
            (browser.post(format!("{admin}/console/login")))
                .header("origin", &admin)
                .form(&[("token", token)])
                .send()
                .await
                .unwrap()
        }
    };
    let mut statuses = Vec::new();
    let mut retry_after = None;
    for i in 0..40 {
        let answer = sign_in(format!("guess-{i}")).await;
        statuses.push(answer.status().as_u16());
        if answer.status() == 429 {
            retry_after = answer.headers().get("retry-after").cloned();
            let why = answer.text().await.unwrap();
            assert!(why.contains("Too many"), "the refusal says why: {why}");
        }
    }
    assert_eq!(statuses[0], 401, "{statuses:?}");
    assert!(
        statuses.contains(&429),
        "40 wrong tokens in a row are never refused as too many: {statuses:?}"
    );
    let retry: u64 = retry_after
        .expect("a 429 says when to try again (Retry-After)")
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=60).contains(&retry), "Retry-After: {retry}");
    // While refused, even the right token is refused: a guess cannot be told apart.
    let token = super::token(&daemon);
    assert_eq!(sign_in(token.clone()).await.status(), 429);
    // The log: a line now and then for all of them, not a line each.
    let lines = daemon.log_count(&["console sign-in"]);
    assert!(
        (1..=3).contains(&lines),
        "{lines} log lines for 40 refused sign-ins:\n{}",
        daemon.stderr()
    );
    // Once the limit has eased, the right token signs in.
    let eased = poll_until(Duration::from_secs(retry + 30), || async {
        sign_in(token.clone()).await.status() == 303
    })
    .await;
    assert!(eased, "the right token signs in once the limit eases");
}
