//! Hosts known by JSON Web Tokens, and mcpmux as an OAuth protected resource: with
//! `[server.authorization]` mcpmux publishes RFC 9728 metadata, points its 401 challenges at it,
//! and accepts ES256 JWTs of the configured issuer (keys fetched from its JWKS URL) whose `aud`
//! is mcpmux's resource URL, unexpired, with the required scope; the `sub` claim names the
//! principal (a configured host, or a signed-in user seeing the configured profile). A host may
//! also have its own issuer (JWKS file, audience, claim). Expired tokens, another audience,
//! another issuer, a forged signature and missing scopes are refused with the right status and
//! `WWW-Authenticate`; a session belongs to its JWT principal; no token reaches the log. Keys are
//! read again after `jwks_refresh`: a key the provider removed stops being trusted.

use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::common;
use crate::common::{Client, Daemon, initialize_as, test_upstream};
use jsonwebtoken::jwk::{Jwk, JwkSet};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};

pub(crate) const IDP: &str = "https://idp.example.test";
const CI: &str = "https://ci.example.test";

/// A fresh P-256 key (made with the openssl command line) and its public JWK with key id `kid`.
pub(crate) fn key_pair(dir: &Path, kid: &str) -> (EncodingKey, Jwk) {
    let raw = dir.join(format!("{kid}.ec.pem"));
    let pkcs8 = dir.join(format!("{kid}.pem"));
    let run = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("the JWT test needs the openssl command: {e}"));
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    run(&[
        "ecparam",
        "-name",
        "prime256v1",
        "-genkey",
        "-noout",
        "-out",
        raw.to_str().unwrap(),
    ]);
    run(&[
        "pkcs8",
        "-topk8",
        "-nocrypt",
        "-in",
        raw.to_str().unwrap(),
        "-out",
        pkcs8.to_str().unwrap(),
    ]);
    let key = EncodingKey::from_ec_pem(&std::fs::read(&pkcs8).unwrap()).unwrap();
    let mut jwk = Jwk::from_encoding_key(&key, Algorithm::ES256).unwrap();
    jwk.common.key_id = Some(kid.to_owned());
    (key, jwk)
}

pub(crate) fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

pub(crate) fn sign(key: &EncodingKey, kid: &str, claims: &Value) -> String {
    let mut header = Header::new(Algorithm::ES256);
    header.kid = Some(kid.to_owned());
    jsonwebtoken::encode(&header, claims, key).unwrap()
}

/// Serves `set` at `http://127.0.0.1:PORT/jwks.json` until the test ends; the URL.
pub(crate) async fn serve_jwks(set: JwkSet) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let body = serde_json::to_string(&set).unwrap();
    let app = axum::Router::new().route(
        "/jwks.json",
        axum::routing::get(move || {
            let body = body.clone();
            async move { ([("content-type", "application/json")], body) }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/jwks.json")
}

fn challenge(response: &reqwest::Response) -> String {
    response.headers()["www-authenticate"]
        .to_str()
        .unwrap()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwts_of_trusted_issuers_sign_hosts_in_and_everything_else_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (idp, idp_jwk) = key_pair(dir.path(), "idp-1");
    let (forger, _) = key_pair(dir.path(), "forger");
    let (ci, ci_jwk) = key_pair(dir.path(), "ci-1");
    let jwks_url = serve_jwks(JwkSet {
        keys: vec![idp_jwk],
    })
    .await;
    let ci_jwks = dir.path().join("ci-jwks.json");
    std::fs::write(
        &ci_jwks,
        serde_json::to_string(&JwkSet { keys: vec![ci_jwk] }).unwrap(),
    )
    .unwrap();
    // The daemon's config starts with its own [server] table, which the first line continues.
    let daemon = Daemon::start(&format!(
        "authorization = {{ issuer = \"{IDP}\", jwks_url = \"{jwks_url}\", \
         scopes_supported = [\"mcp\", \"mcp:admin\"], required_scopes = [\"mcp\"], profile = \"reader\" }}\n\
         [hosts.alice]\nsubject = \"alice@example.test\"\n\
         [hosts.robot]\nissuer = \"{CI}\"\njwks_file = {}\naudience = [\"mcpmux-ci\"]\n\
         claim = \"client_id\"\nsubject = \"deploy-bot\"\nmax_in_flight = 4\n\
         {}\n[profiles.reader]\nallow = [\"tool:up__echo\"]\n",
        serde_json::to_string(ci_jwks.to_str().unwrap()).unwrap(),
        test_upstream("up", &[]),
    ));
    let resource = daemon.url.clone();
    let metadata_url = resource.replace("/mcp", "/.well-known/oauth-protected-resource/mcp");

    // The protected resource metadata, at the RFC 9728 path and the bare one.
    for url in [
        metadata_url.clone(),
        resource.replace("/mcp", "/.well-known/oauth-protected-resource"),
    ] {
        let metadata: Value = reqwest::get(&url).await.unwrap().json().await.unwrap();
        assert_eq!(metadata["resource"], resource, "{url}");
        assert_eq!(metadata["authorization_servers"], json!([IDP]));
        assert_eq!(metadata["scopes_supported"], json!(["mcp", "mcp:admin"]));
    }

    // No token: 401 pointing at the metadata.
    let refused = initialize_as(&daemon.url, None).await;
    assert_eq!(refused.status(), 401);
    let header = challenge(&refused);
    assert!(header.starts_with("Bearer "), "{header}");
    assert!(
        header.contains(&format!("resource_metadata=\"{metadata_url}\"")),
        "{header}"
    );

    let claims = |sub: &str| {
        json!({"iss": IDP, "aud": resource, "sub": sub, "scope": "openid mcp",
               "iat": now(), "exp": now() + 600})
    };
    // A signed-in user no host names: its own principal, seeing the authorization's profile.
    let carol_token = sign(&idp, "idp-1", &claims("carol@example.test"));
    let carol = Client::connect_as(&daemon.url, &carol_token).await;
    let tools = daemon
        .wait_for_tools(&carol, |n| n.iter().any(|t| t == "up__echo"))
        .await;
    assert_eq!(tools, ["up__echo"], "carol sees the reader profile");
    assert!(
        carol
            .tool_text("up__echo", json!({"by": "carol"}))
            .await
            .contains("carol")
    );
    // A user a host names: that host, with its own (here: the whole) catalog.
    let alice_token = sign(&idp, "idp-1", &claims("alice@example.test"));
    let alice = Client::connect_as(&daemon.url, &alice_token).await;
    let all = alice.list_all("tools/list", "tools").await;
    assert!(all.len() > 1, "alice sees the whole catalog: {all:?}");
    // A host with its own issuer, JWKS file, audience and principal claim.
    let robot_token = sign(
        &ci,
        "ci-1",
        &json!({"iss": CI, "aud": "mcpmux-ci", "client_id": "deploy-bot", "exp": now() + 600}),
    );
    let robot = Client::connect_as(&daemon.url, &robot_token).await;
    assert!(
        robot
            .tool_text("up__echo", json!({"by": "robot"}))
            .await
            .contains("robot")
    );

    // Refused: expired, another audience, another issuer, forged, unknown subject of the CI
    // issuer, and a token without the required scope (403 insufficient_scope).
    let mut expired = claims("carol@example.test");
    expired["exp"] = json!(now() - 600);
    let mut elsewhere = claims("carol@example.test");
    elsewhere["aud"] = json!("https://other.example.test/mcp");
    let mut foreign = claims("carol@example.test");
    foreign["iss"] = json!("https://evil.example.test");
    let cases = [
        (sign(&idp, "idp-1", &expired), "expired"),
        (sign(&idp, "idp-1", &elsewhere), "another audience"),
        (sign(&idp, "idp-1", &foreign), "not one mcpmux trusts"),
        (
            sign(&forger, "idp-1", &claims("carol@example.test")),
            "signature",
        ),
        (
            sign(
                &ci,
                "ci-1",
                &json!({"iss": CI, "aud": "mcpmux-ci", "client_id": "intruder", "exp": now() + 600}),
            ),
            "not a configured host",
        ),
    ];
    for (token, why) in &cases {
        let refused = initialize_as(&daemon.url, Some(token)).await;
        assert_eq!(refused.status(), 401, "{why}");
        let header = challenge(&refused);
        assert!(
            header.contains("error=\"invalid_token\""),
            "{why}: {header}"
        );
        assert!(header.contains(why), "{why}: {header}");
    }
    let mut unscoped = claims("carol@example.test");
    unscoped["scope"] = json!("openid");
    let refused = initialize_as(&daemon.url, Some(&sign(&idp, "idp-1", &unscoped))).await;
    assert_eq!(refused.status(), 403);
    let header = challenge(&refused);
    assert!(
        header.contains("error=\"insufficient_scope\"") && header.contains("scope=\"mcp\""),
        "{header}"
    );
    // `scp` as a list counts too.
    let mut listed = claims("dave@example.test");
    listed.as_object_mut().unwrap().remove("scope");
    listed["scp"] = json!(["mcp"]);
    assert_eq!(
        initialize_as(&daemon.url, Some(&sign(&idp, "idp-1", &listed)))
            .await
            .status(),
        200
    );

    // Carol's session is hers: Alice's JWT with it is 404.
    let ping = json!({"jsonrpc": "2.0", "id": 3, "method": "ping"});
    assert_eq!(
        carol
            .impersonate(Some(&alice_token))
            .post(&ping)
            .await
            .status(),
        404
    );
    assert_eq!(carol.post(&ping).await.status(), 200);

    // Audit records name the JWT principals; status counts the robot host.
    let records = (daemon.admin())
        .json("/audit/query?method=tools/call&limit=100")
        .await;
    let principals: Vec<&str> = records["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["principal"].as_str())
        .collect();
    assert!(
        principals.contains(&"carol@example.test") && principals.contains(&"robot"),
        "{principals:?}"
    );
    let status = daemon.status().await;
    let robot_status = status["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["name"] == "robot")
        .cloned();
    assert_eq!(robot_status.unwrap()["max_in_flight"], 4);

    let log = daemon.stderr();
    for token in [&carol_token, &alice_token, &robot_token] {
        assert!(!log.contains(token.as_str()), "a JWT leaked into the log");
    }
}

#[test]
fn jwt_credential_mistakes_are_named_with_their_fix() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bad.json"), "{\"not\": \"a key set\"}").unwrap();
    let cases = [
        ("[hosts.a]\nsubject = \"a\"\n", "hosts.a.subject"),
        (
            "[hosts.a]\njwks_url = \"https://idp/jwks\"\nissuer = \"i\"\n",
            "hosts.a.audience",
        ),
        (
            "[hosts.a]\njwks_url = \"https://idp/jwks\"\naudience = [\"m\"]\n",
            "hosts.a.issuer",
        ),
        (
            "[hosts.a]\njwks_file = \"bad.json\"\nissuer = \"i\"\naudience = [\"m\"]\n",
            "hosts.a.jwks_file",
        ),
        (
            "[hosts.a]\njwks_url = \"ftp://x\"\nissuer = \"i\"\naudience = [\"m\"]\n",
            "hosts.a.jwks_url",
        ),
        (
            "[hosts.a]\njwks_url = \"http://idp.example/jwks\"\nissuer = \"i\"\naudience = [\"m\"]\n",
            "hosts.a.jwks_url",
        ),
        (
            "[hosts.a]\ntoken_sha256 = \"00\"\nsubject = \"a\"\n",
            "hosts.a",
        ),
        (
            "[hosts.a]\ntoken_file = \"t\"\naudience = [\"m\"]\n",
            "hosts.a.audience",
        ),
        (
            "[server.authorization]\njwks_url = \"https://idp/jwks\"\n",
            "server.authorization.issuer",
        ),
    ];
    for (extra, culprit) in cases {
        let config = format!("{extra}{}", test_upstream("up", &[]));
        common::assert_check_refuses(dir.path(), &config, culprit);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_the_provider_removes_stops_being_trusted_once_the_keys_are_read_again() {
    let dir = tempfile::tempdir().unwrap();
    let (old, old_jwk) = key_pair(dir.path(), "ci-old");
    let (new, new_jwk) = key_pair(dir.path(), "ci-new");
    let jwks = dir.path().join("ci-jwks.json");
    let write = |keys: Vec<Jwk>| {
        std::fs::write(&jwks, serde_json::to_string(&JwkSet { keys }).unwrap()).unwrap();
    };
    write(vec![old_jwk.clone()]);
    let daemon = Daemon::start(&format!(
        "[hosts.robot]\nissuer = \"{CI}\"\njwks_file = {}\naudience = [\"mcpmux-ci\"]\n\
         subject = \"deploy-bot\"\njwks_refresh = \"1s\"\n{}",
        serde_json::to_string(jwks.to_str().unwrap()).unwrap(),
        test_upstream("up", &[]),
    ));
    let claims = |extra: u64| json!({"iss": CI, "aud": "mcpmux-ci", "sub": "deploy-bot", "exp": now() + 600 + extra});
    let first = sign(&old, "ci-old", &claims(0));
    assert_eq!(initialize_as(&daemon.url, Some(&first)).await.status(), 200);

    // The provider rotates: the old key is gone from its set.
    write(vec![new_jwk]);
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let later = sign(&old, "ci-old", &claims(1));
    let refused = initialize_as(&daemon.url, Some(&later)).await;
    assert_eq!(refused.status(), 401);
    assert!(challenge(&refused).contains("invalid_token"));
    // A token verified before the rotation is checked again too.
    assert_eq!(initialize_as(&daemon.url, Some(&first)).await.status(), 401);
    let rotated = sign(&new, "ci-new", &claims(2));
    assert_eq!(
        initialize_as(&daemon.url, Some(&rotated)).await.status(),
        200
    );
}

/// Serves `set` at `http://127.0.0.1:PORT/jwks.json`, each answer `delay` late and followed by
/// `padding` spaces; the URL and how many times it was fetched.
async fn serve_counted_jwks(
    set: JwkSet,
    delay: std::time::Duration,
    padding: usize,
) -> (String, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let body = serde_json::to_string(&set).unwrap() + &" ".repeat(padding);
    let fetches = std::sync::Arc::new(AtomicUsize::new(0));
    let counted = std::sync::Arc::clone(&fetches);
    let app = axum::Router::new().route(
        "/jwks.json",
        axum::routing::get(move || {
            let body = body.clone();
            counted.fetch_add(1, Ordering::SeqCst);
            async move {
                tokio::time::sleep(delay).await;
                ([("content-type", "application/json")], body)
            }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}/jwks.json"), fetches)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_without_aud_exp_or_iss_is_refused_and_the_log_names_the_claim() {
    let dir = tempfile::tempdir().unwrap();
    let (idp, idp_jwk) = key_pair(dir.path(), "idp-1");
    let (ci, ci_jwk) = key_pair(dir.path(), "ci-1");
    let jwks_url = serve_jwks(JwkSet {
        keys: vec![idp_jwk],
    })
    .await;
    let ci_jwks = dir.path().join("ci-jwks.json");
    std::fs::write(
        &ci_jwks,
        serde_json::to_string(&JwkSet { keys: vec![ci_jwk] }).unwrap(),
    )
    .unwrap();
    let daemon = Daemon::start(&format!(
        "authorization = {{ issuer = \"{IDP}\", jwks_url = \"{jwks_url}\" }}\n\
         [hosts.robot]\nissuer = \"{CI}\"\njwks_file = {}\naudience = [\"mcpmux-ci\"]\n\
         subject = \"deploy-bot\"\n{}",
        serde_json::to_string(ci_jwks.to_str().unwrap()).unwrap(),
        test_upstream("up", &[]),
    ));
    let user = json!({"iss": IDP, "aud": daemon.url, "sub": "carol", "exp": now() + 600});
    let robot = json!({"iss": CI, "aud": "mcpmux-ci", "sub": "deploy-bot", "exp": now() + 600});
    // Whole, both are accepted.
    for (key, kid, claims) in [(&idp, "idp-1", &user), (&ci, "ci-1", &robot)] {
        let token = sign(key, kid, claims);
        assert_eq!(initialize_as(&daemon.url, Some(&token)).await.status(), 200);
    }
    for (key, kid, claims) in [(&idp, "idp-1", &user), (&ci, "ci-1", &robot)] {
        for claim in ["aud", "exp", "iss"] {
            let mut partial = claims.clone();
            partial.as_object_mut().unwrap().remove(claim);
            let token = sign(key, kid, &partial);
            let refused = initialize_as(&daemon.url, Some(&token)).await;
            assert_eq!(refused.status(), 401, "{kid} without {claim}");
            let header = challenge(&refused);
            assert!(
                header.contains("error=\"invalid_token\"") && header.contains(claim),
                "{kid} without {claim}: {header}"
            );
            let log = daemon.stderr();
            assert!(!log.contains(&token), "a JWT leaked into the log");
            assert!(
                log.lines()
                    .any(|l| l.contains("lacks a required claim") && l.contains(claim)),
                "{kid} without {claim}: no log line names the claim:\n{log}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signed_in_user_named_like_a_host_is_not_that_host_even_after_a_reload() {
    const ROBOT: &str = "robot-host-token-77a1";
    let dir = tempfile::tempdir().unwrap();
    let (idp, idp_jwk) = key_pair(dir.path(), "idp-1");
    let jwks_url = serve_jwks(JwkSet {
        keys: vec![idp_jwk],
    })
    .await;
    // Signed-in users see `reader`; the token host `robot` too, until the reload gives it the
    // whole catalog.
    let config = |robot_has_profile: bool| {
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n\
             authorization = {{ issuer = \"{IDP}\", jwks_url = \"{jwks_url}\", profile = \"reader\" }}\n\n\
             [hosts.robot]\ntoken_sha256 = \"{}\"\n{}\n{}\n[profiles.reader]\nallow = [\"tool:up__echo\"]\n",
            common::sha256_hex(ROBOT),
            if robot_has_profile {
                "profile = \"reader\"\n"
            } else {
                ""
            },
            test_upstream("up", &[]),
        )
    };
    let daemon = Daemon::start_with(&config(true), &[]);
    let robot = Client::connect_as(&daemon.url, ROBOT).await;
    daemon
        .wait_for_tools(&robot, |n| n.iter().any(|t| t == "up__echo"))
        .await;
    // Mallory signs in with `sub` = the host's name.
    let mallory_token = sign(
        &idp,
        "idp-1",
        &json!({"iss": IDP, "aud": daemon.url, "sub": "robot", "exp": now() + 600}),
    );
    let mallory = Client::connect_as(&daemon.url, &mallory_token).await;
    let tool_names = |tools: Vec<Value>| -> Vec<String> {
        tools
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(
        tool_names(mallory.list_all("tools/list", "tools").await),
        ["up__echo"]
    );
    // Neither may use the other's session.
    let ping = json!({"jsonrpc": "2.0", "id": 7, "method": "ping"});
    assert_eq!(
        robot
            .impersonate(Some(&mallory_token))
            .post(&ping)
            .await
            .status(),
        404,
        "a signed-in user used a host's session"
    );
    assert_eq!(
        mallory.impersonate(Some(ROBOT)).post(&ping).await.status(),
        404
    );

    // The host gets the whole catalog; Mallory's session stays hers, with her profile.
    let path = daemon.dir.path().join("mcpmux.toml");
    let tmp = path.with_extension("toml.swp");
    std::fs::write(&tmp, config(false)).unwrap();
    std::fs::rename(&tmp, &path).unwrap();
    assert!(
        common::poll_until(std::time::Duration::from_secs(30), || async {
            robot.list_all("tools/list", "tools").await.len() > 1
        })
        .await,
        "the reload did not give the host the whole catalog"
    );
    assert_eq!(
        tool_names(mallory.list_all("tools/list", "tools").await),
        ["up__echo"],
        "after the reload the signed-in user `robot` became the host `robot`"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_tokens_share_one_jwks_fetch() {
    let dir = tempfile::tempdir().unwrap();
    let (idp, idp_jwk) = key_pair(dir.path(), "idp-1");
    let (jwks_url, fetches) = serve_counted_jwks(
        JwkSet {
            keys: vec![idp_jwk],
        },
        std::time::Duration::from_millis(1500),
        0,
    )
    .await;
    let daemon = Daemon::start(&format!(
        "authorization = {{ issuer = \"{IDP}\", jwks_url = \"{jwks_url}\" }}\n{}",
        test_upstream("up", &[]),
    ));
    let tokens: Vec<String> = (0..8)
        .map(|i| {
            sign(
                &idp,
                "idp-1",
                &json!({"iss": IDP, "aud": daemon.url, "sub": format!("user-{i}"), "exp": now() + 600}),
            )
        })
        .collect();
    let answers = futures_util::future::join_all(
        tokens
            .iter()
            .map(|token| initialize_as(&daemon.url, Some(token))),
    )
    .await;
    for answer in &answers {
        assert_eq!(answer.status(), 200);
    }
    assert_eq!(
        fetches.load(std::sync::atomic::Ordering::SeqCst),
        1,
        "every token with a key not yet loaded fetched the JWKS itself"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_jwks_is_refused_naming_the_url_and_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    let (idp, idp_jwk) = key_pair(dir.path(), "idp-1");
    let (jwks_url, _) = serve_counted_jwks(
        JwkSet {
            keys: vec![idp_jwk],
        },
        std::time::Duration::ZERO,
        1024 * 1024 + 1,
    )
    .await;
    let daemon = Daemon::start(&format!(
        "authorization = {{ issuer = \"{IDP}\", jwks_url = \"{jwks_url}\" }}\n{}",
        test_upstream("up", &[]),
    ));
    let token = sign(
        &idp,
        "idp-1",
        &json!({"iss": IDP, "aud": daemon.url, "sub": "carol", "exp": now() + 600}),
    );
    let refused = initialize_as(&daemon.url, Some(&token)).await;
    assert_eq!(refused.status(), 401, "an oversized JWKS was read");
    let log = daemon.stderr();
    assert!(
        log.lines()
            .any(|l| l.contains(&jwks_url) && l.contains("1 MiB")),
        "no log line names the URL and the limit:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jwks_redirect_is_not_followed() {
    let dir = tempfile::tempdir().unwrap();
    let (idp, idp_jwk) = key_pair(dir.path(), "idp-1");
    // The keys are real, but only reached through a redirect from the configured URL.
    let keys = serve_jwks(JwkSet {
        keys: vec![idp_jwk],
    })
    .await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let redirecting = format!("http://{}/jwks.json", listener.local_addr().unwrap());
    let to = keys.clone();
    let app = axum::Router::new().route(
        "/jwks.json",
        axum::routing::get(move || {
            let to = to.clone();
            async move { (axum::http::StatusCode::FOUND, [("location", to)]) }
        }),
    );
    tokio::spawn(async move { axum::serve(listener, app).await });
    let daemon = Daemon::start(&format!(
        "authorization = {{ issuer = \"{IDP}\", jwks_url = \"{redirecting}\" }}\n{}",
        test_upstream("up", &[]),
    ));
    let token = sign(
        &idp,
        "idp-1",
        &json!({"iss": IDP, "aud": daemon.url, "sub": "carol", "exp": now() + 600}),
    );
    let refused = initialize_as(&daemon.url, Some(&token)).await;
    assert_eq!(refused.status(), 401, "keys were taken from a redirect");
    let log = daemon.stderr();
    assert!(
        log.lines()
            .any(|l| l.contains("redirect") && l.contains(&keys)),
        "no log line names the redirect:\n{log}"
    );
}
