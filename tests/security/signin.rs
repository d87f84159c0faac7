//! A principal's sign-in link (per-principal upstreams' sign-in through the host) attacked: the
//! pages driven as a browser would, without one. The test upstream's authorization server asks
//! who signs in and issues tokens ending in that name; `whoami` shows which token a call came
//! with.
//!
//! - A link opened with another principal's credential (or none) does nothing — nothing is
//!   stored, the other principal is not signed in — and after three such tries it is void.
//! - A link works once: proved again, or its authorization server's redirect replayed, nothing
//!   happens (one code redeemed in all).
//! - A link that has expired does nothing; a redirect with a `state` mcpmux never issued is
//!   refused.
//! - Principal A's session used with B's credential is refused: B never gets A's sign-in.

use std::time::Duration;

use serde_json::{Value, json};

use crate::common::{Client, Daemon, RemoteServer, sha256_hex};

const ALICE: &str = "alice-host-token-0123456789";
const BOB: &str = "bob-host-token-0123456789";

/// The upstream, protected, asking who signs in; its catalog read with a token of its own.
fn server() -> RemoteServer {
    RemoteServer::whoami()
}

fn daemon_for(server: &RemoteServer, server_keys: &str) -> Daemon {
    Daemon::start_with_env(
        &format!(
            "{server_keys}\n[hosts.alice]\ntoken_sha256 = \"{}\"\n[hosts.bob]\ntoken_sha256 = \"{}\"\n\
             [upstreams.rem]\nurl = \"{}\"\nbearer_token_env = \"CATALOG_TOKEN\"\n\
             credentials = \"per-principal\"\n[upstreams.rem.oauth]\n",
            sha256_hex(ALICE),
            sha256_hex(BOB),
            server.url("/mcp"),
        ),
        &[("CATALOG_TOKEN", "catalog-reader")],
    )
}

/// A browser that follows no redirect (each step is looked at).
fn browser() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .build()
        .unwrap()
}

async fn whoami(host: &Client) -> Value {
    host.request(
        "tools/call",
        json!({"name": "rem__whoami", "arguments": {}}),
    )
    .await
}

/// The sign-in link a call that needs one was answered with (`-32042`).
async fn link_for(host: &Client) -> String {
    let answer = whoami(host).await;
    assert_eq!(answer["error"]["code"], -32042, "{answer}");
    let url = &answer["error"]["data"]["elicitations"][0]["url"];
    url.as_str()
        .unwrap_or_else(|| panic!("{answer}"))
        .to_owned()
}

/// Posts `token` as the proof at `link`.
async fn prove(link: &str, token: &str) -> reqwest::Response {
    browser()
        .post(link)
        .form(&[("token", token)])
        .send()
        .await
        .unwrap()
}

async fn ready(daemon: &Daemon) -> (Client, Client) {
    let alice = Client::connect_as(&daemon.url, ALICE).await;
    let bob = Client::connect_as(&daemon.url, BOB).await;
    daemon
        .wait_for_tools(&alice, |n| n.iter().any(|n| n == "rem__whoami"))
        .await;
    (alice, bob)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_works_once_and_for_its_own_principal_only() {
    let server = server();
    let daemon = daemon_for(&server, "");
    let (alice, bob) = ready(&daemon).await;
    let link = link_for(&alice).await;
    assert!(
        link.starts_with(&daemon.url.replace("/mcp", "/signin/")),
        "{link}"
    );
    let page = browser().get(&link).send().await.unwrap();
    assert_eq!(page.status(), 200);
    assert_eq!(page.headers()["x-frame-options"], "DENY");

    // Bob (or nobody) opens Alice's link: nothing happens.
    for token in [BOB, "not-a-token"] {
        let refused = prove(&link, token).await;
        assert_eq!(refused.status(), 403);
        assert!(refused.text().await.unwrap().contains("Nothing was done"));
    }
    // A form sent from another site's page is refused before anything is looked at.
    let forged = browser()
        .post(&link)
        .header("Origin", "http://evil.example")
        .form(&[("token", ALICE)])
        .send()
        .await
        .unwrap();
    assert_eq!(forged.status(), 403);

    // Alice proves who she is and goes on to the authorization server.
    let onward = prove(&link, ALICE).await;
    assert_eq!(onward.status(), 303);
    let authorize = onward.headers()["location"].to_str().unwrap().to_owned();
    assert!(
        authorize.starts_with(&server.url("/authorize")),
        "{authorize}"
    );
    assert!(
        authorize.contains("code_challenge_method=S256"),
        "{authorize}"
    );
    // The link is used up: proving again, or opening it, does nothing.
    assert_eq!(prove(&link, ALICE).await.status(), 410);
    assert_eq!(browser().get(&link).send().await.unwrap().status(), 410);

    let redirect = browser()
        .get(format!("{authorize}&user=alice"))
        .send()
        .await
        .unwrap();
    let callback = redirect.headers()["location"].to_str().unwrap().to_owned();
    let done = browser().get(&callback).send().await.unwrap();
    assert_eq!(done.status(), 200);
    assert!(done.text().await.unwrap().contains("Signed in"));
    // The redirect replayed: refused, no second code redeemed.
    assert_eq!(browser().get(&callback).send().await.unwrap().status(), 400);
    let stats: Value = server.report("/oauth-stats").await;
    assert_eq!(stats["authorization_code"], 1, "{stats}");

    // Alice calls as herself; Bob is still asked to sign in as himself.
    let answer = whoami(&alice).await;
    let seen = answer["result"]["structuredContent"]["authorization"].as_str();
    assert!(seen.is_some_and(|s| s.ends_with(".alice")), "{answer}");
    let bobs = link_for(&bob).await;
    assert_ne!(bobs, link);
    // Alice's session with Bob's credential is refused: Bob never rides on Alice's sign-in.
    let hijack = alice.impersonate(Some(BOB));
    let refused = hijack
        .post(&json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                       "params": {"name": "rem__whoami", "arguments": {}}}))
        .await;
    assert!(refused.status().is_client_error(), "{}", refused.status());
    let status = daemon.upstream_status("rem").await;
    assert_eq!(status["signed_in"], 1, "{status}");
    // The audit log names each step's principal, never a token or a link.
    let audit = daemon.audit_json();
    for event in ["signin.issued", "signin.refused", "signin.completed"] {
        assert!(
            audit
                .lines()
                .any(|l| l.contains(event) && l.contains("\"principal\":\"alice\"")),
            "no {event} record for alice:\n{audit}"
        );
    }
    assert!(
        !audit.contains("mcpmux-test-access") && !audit.contains("/signin/"),
        "{audit}"
    );
    // Nothing of a token in the log.
    assert!(
        !daemon.stderr().contains("mcpmux-test-access"),
        "a token was logged"
    );
    assert!(!daemon.stderr().contains(ALICE), "a host token was logged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_tried_with_other_credentials_three_times_is_void() {
    let server = server();
    let daemon = daemon_for(&server, "");
    let (alice, _bob) = ready(&daemon).await;
    let link = link_for(&alice).await;
    for _ in 0..3 {
        assert_eq!(prove(&link, BOB).await.status(), 403);
    }
    assert_eq!(prove(&link, ALICE).await.status(), 410);
    // Alice's next call gets a new link, which works.
    let fresh = link_for(&alice).await;
    assert_ne!(fresh, link);
    assert_eq!(prove(&fresh, ALICE).await.status(), 303);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_link_or_a_forged_redirect_does_nothing() {
    let server = server();
    let daemon = daemon_for(&server, "sign_in_timeout = \"1s\"");
    let (alice, _bob) = ready(&daemon).await;
    let link = link_for(&alice).await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(browser().get(&link).send().await.unwrap().status(), 410);
    assert_eq!(prove(&link, ALICE).await.status(), 410);
    let forged = daemon
        .url
        .replace("/mcp", "/oauth/callback?state=forged&code=code-1");
    let refused = browser().get(&forged).send().await.unwrap();
    assert_eq!(refused.status(), 400);
    let stats: Value = server.report("/oauth-stats").await;
    assert_eq!(stats["authorization_code"], 0, "{stats}");
    assert_eq!(daemon.upstream_status("rem").await["signed_in"], 0);
}

/// Signs `user` in through `link` as the host with `token` would, step by step.
async fn sign_in(link: &str, token: &str, user: &str) {
    crate::common::sign_in_through(link, token, user).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_tokens_that_cannot_be_renewed_are_forgotten_and_the_principal_asked_again() {
    let dir = tempfile::tempdir().unwrap();
    let revoked = dir.path().join("revoked");
    let server = RemoteServer::test_upstream(
        "rem",
        0,
        &[
            "--whoami",
            "--oauth-token-ttl",
            "2",
            "--oauth-static-token",
            "catalog-reader",
            "--oauth-ask-user",
            "--oauth-revoke-while",
            revoked.to_str().unwrap(),
        ],
    );
    let daemon = daemon_for(&server, "");
    let (alice, _bob) = ready(&daemon).await;
    sign_in(&link_for(&alice).await, ALICE, "alice").await;
    let answer = whoami(&alice).await;
    assert!(
        answer["result"]["structuredContent"]["authorization"].is_string(),
        "{answer}"
    );
    // The authorization server now refuses every refresh: once her token expires, Alice's calls
    // fail, and within a few calls she is asked to sign in again — never told to run `mcpmux login`.
    std::fs::write(&revoked, "").unwrap();
    let mut asked = None;
    for _ in 0..40 {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let answer = whoami(&alice).await;
        let text = answer.to_string();
        assert!(!text.contains("mcpmux login"), "{text}");
        if answer["error"]["code"] == -32042 {
            asked = Some(answer);
            break;
        }
    }
    let asked = asked.expect("asked to sign in again within ten seconds");
    assert!(
        asked["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("as alice"),
        "{asked}"
    );
    assert_eq!(daemon.upstream_status("rem").await["signed_in"], 0);
    // Signed in again (refreshes allowed again), she calls as herself.
    std::fs::remove_file(&revoked).unwrap();
    let link = asked["error"]["data"]["elicitations"][0]["url"]
        .as_str()
        .unwrap()
        .to_owned();
    sign_in(&link, ALICE, "alice").await;
    let answer = whoami(&alice).await;
    let seen = answer["result"]["structuredContent"]["authorization"].as_str();
    assert!(seen.is_some_and(|s| s.ends_with(".alice")), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_counts_sign_ins_makes_a_link_and_revokes_one() {
    let server = server();
    let daemon = daemon_for(&server, "");
    let (alice, _bob) = ready(&daemon).await;
    sign_in(&link_for(&alice).await, ALICE, "alice").await;
    let console = crate::common::ConsoleSession::sign_in(&daemon.admin()).await;
    let overview = console.page("").await;
    assert!(
        overview.contains("Each principal's own sign-in"),
        "{overview}"
    );
    assert!(
        overview.contains(r#"<span data-field="signed_in">1</span>"#),
        "{overview}"
    );
    assert!(
        !overview.contains("mcpmux-test-access"),
        "a token on the page"
    );
    let csrf = console.csrf().await;
    let path = format!("{}principals", console.base);
    // A link for Bob, to hand over: it is mcpmux's sign-in page, which works for Bob alone.
    let made = console
        .post_path(
            &path,
            &[
                ("csrf", &csrf),
                ("name", "rem"),
                ("principal", "bob"),
                ("act", "link"),
            ],
        )
        .await;
    let notice = made.headers()["location"].to_str().unwrap().to_owned();
    let notice: String = url::form_urlencoded::parse(notice.split_once('?').unwrap().1.as_bytes())
        .find(|(k, _)| k == "notice")
        .map(|(_, v)| v.into_owned())
        .unwrap();
    let link = notice.rsplit(' ').next().unwrap().to_owned();
    assert!(link.contains("/signin/"), "{notice}");
    assert_eq!(prove(&link, ALICE).await.status(), 403);
    sign_in(&link, BOB, "bob").await;
    assert_eq!(daemon.upstream_status("rem").await["signed_in"], 2);
    // Alice's sign-in revoked from the console: she is asked again; nobody else is affected.
    let revoked = console
        .post_path(
            &path,
            &[
                ("csrf", &csrf),
                ("name", "rem"),
                ("principal", "alice"),
                ("act", "revoke"),
            ],
        )
        .await;
    assert!(
        revoked.headers()["location"]
            .to_str()
            .unwrap()
            .contains("Revoked")
    );
    assert_eq!(whoami(&alice).await["error"]["code"], -32042);
    assert_eq!(daemon.upstream_status("rem").await["signed_in"], 1);
    // An unknown host is named as such.
    let unknown = console
        .post_path(
            &path,
            &[
                ("csrf", &csrf),
                ("name", "rem"),
                ("principal", "mallory"),
                ("act", "link"),
            ],
        )
        .await;
    assert!(
        unknown.headers()["location"]
            .to_str()
            .unwrap()
            .contains("mallory")
    );
}
