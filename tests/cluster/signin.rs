//! A principal's sign-in kept in the fleet store: begun on one replica, it is finished through
//! the others after that replica died — the link opened on one, the authorization server's
//! redirect on another — used once for the whole fleet, refusals counted fleet-wide, and a call
//! waiting on a third goes on when it ends. With the database down, a sign-in is refused saying
//! why.

use std::process::Command;
use std::time::Duration;

use super::postgres::Postgres;
use super::store::{ALICE, BOB, connect, per_principal_fleet, seen_as};
use super::{Fleet, TURN, ip};
use crate::common::poll_until;

/// `link` as it reaches replica `name` (a load balancer may send it to any).
fn on_replica(link: &str, fleet: &Fleet, name: &str) -> String {
    let mut url = url::Url::parse(link).unwrap();
    url.set_host(Some(&ip(name))).unwrap();
    url.set_port(Some(fleet.ports[name])).unwrap();
    url.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sign_in_begun_on_a_replica_that_died_is_finished_through_the_others() {
    let _turn = TURN.lock().await;
    let pg = Postgres::start();
    let server = crate::common::RemoteServer::whoami();
    let secrets = tempfile::tempdir().unwrap();
    let fleet = per_principal_fleet(&pg, &server, &secrets.path().join("catalog.token")).await;
    let on_a = connect(&fleet, "a", ALICE).await;
    let on_c = connect(&fleet, "c", ALICE).await;

    // Alice is asked to sign in through replica a; on c she is handed the same link.
    let link = seen_as(&on_a)
        .await
        .expect_err("signed in before signing in");
    assert_eq!(seen_as(&on_c).await, Err(link.clone()));
    assert_eq!(pg.psql("SELECT count(*) FROM mcpmux_signins"), "1");
    let kept = pg.psql("SELECT string_agg(link || ' ' || sealed, ' ') FROM mcpmux_signins");
    let id = link.rsplit('/').next().unwrap();
    assert!(!kept.contains(id), "the link is in the clear: {kept}");

    // Replica a dies before she opens it.
    let pid = fleet.replicas["a"].pid().to_string();
    assert!(
        Command::new("kill")
            .args(["-KILL", &pid])
            .status()
            .unwrap()
            .success()
    );

    // She opens it; it reaches b. Bob's credential there is refused and counted for the fleet.
    let browser = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .build()
        .unwrap();
    let at_b = on_replica(&link, &fleet, "b");
    let page = browser.get(&at_b).send().await.unwrap();
    assert_eq!(page.status(), 200);
    let prove = |url: String, token: &'static str| {
        let browser = browser.clone();
        async move {
            browser
                .post(url)
                .form(&[("token", token)])
                .send()
                .await
                .unwrap()
        }
    };
    assert_eq!(prove(at_b.clone(), BOB).await.status(), 403);
    assert_eq!(pg.psql("SELECT failures FROM mcpmux_signins"), "1");
    let onward = prove(at_b.clone(), ALICE).await;
    assert_eq!(onward.status(), 303);
    let authorize = onward.headers()["location"].to_str().unwrap().to_owned();
    // Used: opened again on c, it does nothing.
    let again = prove(on_replica(&link, &fleet, "c"), ALICE).await;
    assert_eq!(again.status(), 410);

    // While she is at the authorization server her call on c waits; the redirect reaches b,
    // and c's call goes on as her.
    let waiting = seen_as(&on_c);
    let finishing = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let redirect = browser
            .get(format!("{authorize}&user=alice"))
            .send()
            .await
            .unwrap();
        let callback = redirect.headers()["location"].to_str().unwrap().to_owned();
        assert_eq!(browser.get(&callback).send().await.unwrap().status(), 200);
        // The redirect once more, on c: nothing to finish.
        let replayed = on_replica(&callback, &fleet, "c");
        assert_eq!(browser.get(&replayed).send().await.unwrap().status(), 400);
    };
    let (seen, ()) = tokio::join!(waiting, finishing);
    assert_eq!(seen.as_deref(), Ok("alice"));
    let on_b = connect(&fleet, "b", ALICE).await;
    assert_eq!(seen_as(&on_b).await.as_deref(), Ok("alice"));
    let stats: serde_json::Value = server.report("/oauth-stats").await;
    assert_eq!(stats["authorization_code"], 1, "{stats}");
    assert_eq!(pg.psql("SELECT count(*) FROM mcpmux_signins"), "0");

    // The database down: Bob's sign-in is refused, saying why; once it is back he gets a link.
    let bob = connect(&fleet, "b", BOB).await;
    pg.stop();
    let refused = seen_as(&bob).await.expect_err("Bob signed in");
    assert!(
        refused.contains("fleet store (Postgres) is unreachable") && refused.contains("try again"),
        "{refused}"
    );
    pg.start_again();
    let linked = poll_until(Duration::from_secs(30), || async {
        seen_as(&bob).await.is_err_and(|e| e.contains("/signin/"))
    })
    .await;
    assert!(linked, "{:?}", seen_as(&bob).await);
}
