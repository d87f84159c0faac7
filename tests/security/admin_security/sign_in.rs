//! The OAuth sign-in's redirect listener answers only the one redirect it waits for.

use std::time::Duration;

use serde_json::{Value, json};

use super::{admin, http, token};
use crate::common::{Daemon, RemoteServer, poll_until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sign_in_callback_answers_only_the_redirect_it_waits_for() {
    let server = RemoteServer::test_upstream("web", 0, &["--oauth-token-ttl", "600"]);
    let daemon = Daemon::start(&format!(
        "[upstreams.web]\nurl = \"{}\"\nrestart_initial_backoff = \"100ms\"\n",
        server.url("/mcp"),
    ));
    let admin = admin(&daemon);
    let token = token(&daemon);
    let started: Value = (http().post(format!("{admin}/upstreams/web/login")))
        .bearer_auth(&token)
        .json(&json!({}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let url = started["authorization_url"].as_str().unwrap().to_owned();
    let browser = reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let redirect = browser.get(&url).send().await.unwrap();
    let back = redirect.headers()["location"].to_str().unwrap().to_owned();
    let back_url = url::Url::parse(&back).unwrap();
    let base = format!("http://127.0.0.1:{}", back_url.port().unwrap());

    // Forged or stray requests are refused and do not end the wait.
    let forged = browser
        .get(format!("{base}/callback?code=attacker&state=forged"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        forged.status(),
        400,
        "a redirect with a state mcpmux never issued"
    );
    let stateless = browser
        .get(format!("{base}/callback?code=attacker"))
        .send()
        .await
        .unwrap();
    assert_eq!(stateless.status(), 400, "a redirect without state");
    let elsewhere = browser.get(format!("{base}/other")).send().await.unwrap();
    assert_eq!(elsewhere.status(), 404);
    let posted = browser.post(&back).send().await.unwrap();
    assert!(
        posted.status().is_client_error(),
        "POST: {}",
        posted.status()
    );
    let pending: Value = (http().get(format!("{admin}/upstreams/web/login")))
        .bearer_auth(&token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(pending["state"], "pending", "{pending}");

    // The real redirect finishes the sign-in; it cannot be replayed.
    let landed = browser.get(&back).send().await.unwrap();
    assert_eq!(landed.status(), 200);
    let done = poll_until(Duration::from_secs(60), || async {
        let state: Value = (http().get(format!("{admin}/upstreams/web/login")))
            .bearer_auth(&token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        state["state"] == "done"
    })
    .await;
    assert!(done, "{}", daemon.stderr());
    let replay = browser.get(&back).send().await;
    assert!(
        replay.is_err() || replay.unwrap().status().is_client_error(),
        "a replayed redirect is not accepted"
    );
}
