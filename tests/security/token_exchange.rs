//! Token exchange (RFC 8693) for a per-principal upstream: each host signs in to mcpmux with its
//! own JWT; mcpmux exchanges it at the upstream's authorization server (the test upstream's own,
//! authenticating as its configured client) for a token whose audience is the upstream, and each
//! call goes with the token exchanged for its caller — what the upstream sees (`whoami`) names
//! the caller's subject. A token answered for another audience never reaches the upstream; a
//! host that signed in with a static token has nothing to exchange and is told so.

use futures_util::future::join_all;
use serde_json::{Value, json};

use crate::common::{Client, Daemon, RemoteServer, sha256_hex};
use crate::host_jwt::{IDP, key_pair, now, serve_jwks, sign};
use jsonwebtoken::jwk::JwkSet;

const SECRET: &str = "the-exchange-client-secret";
const STATIC_HOST: &str = "a-static-host-token";

/// The `sub` of the JWT-shaped token in `authorization` (`Bearer h.p.s`).
fn subject_of(authorization: &str) -> Value {
    use base64::Engine;
    let payload = authorization
        .strip_prefix("Bearer ")
        .and_then(|t| t.split('.').nth(1))
        .unwrap_or_else(|| panic!("not a JWT-shaped token: {authorization}"));
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .unwrap();
    let claims: Value = serde_json::from_slice(&bytes).unwrap();
    claims["sub"].clone()
}

/// A daemon whose hosts sign in with JWTs of the test IdP, fronting `server` per principal with
/// its tokens exchanged at the server's own authorization server.
async fn daemon_for(
    server: &RemoteServer,
    dir: &std::path::Path,
) -> (Daemon, jsonwebtoken::EncodingKey) {
    let (idp, jwk) = key_pair(dir, "idp-1");
    let jwks_url = serve_jwks(JwkSet { keys: vec![jwk] }).await;
    let daemon = Daemon::start_with_env(
        &format!(
            "[server.authorization]\nissuer = \"{IDP}\"\njwks_url = \"{jwks_url}\"\n\
             [hosts.static]\ntoken_sha256 = \"{}\"\n\
             [upstreams.rem]\nurl = \"{}\"\nbearer_token_env = \"CATALOG_TOKEN\"\n\
             credentials = \"per-principal\"\n\
             [upstreams.rem.oauth]\ngrant = \"token_exchange\"\nissuer = \"{}\"\n\
             client_id = \"mcpmux\"\nclient_secret_env = \"EXCHANGE_SECRET\"\n",
            sha256_hex(STATIC_HOST),
            server.url("/mcp"),
            server.url("")
        ),
        &[
            ("CATALOG_TOKEN", "catalog-reader"),
            ("EXCHANGE_SECRET", SECRET),
        ],
    );
    (daemon, idp)
}

/// The test upstream over HTTP with `whoami`, protected by its own authorization server (which
/// exchanges tokens, living `ttl` seconds), and a token that reads its catalog; plus `extra`.
fn server(ttl: &str, extra: &[&str]) -> RemoteServer {
    let mut args = vec![
        "--whoami",
        "--oauth-token-ttl",
        ttl,
        "--oauth-static-token",
        "catalog-reader",
    ];
    args.extend(extra);
    RemoteServer::test_upstream("rem", 0, &args)
}

fn jwt_for(idp: &jsonwebtoken::EncodingKey, daemon: &Daemon, subject: &str) -> String {
    sign(
        idp,
        "idp-1",
        &json!({"iss": IDP, "aud": daemon.url, "sub": subject, "exp": now() + 600}),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_callers_jwt_is_exchanged_for_a_token_of_its_own() {
    let dir = tempfile::tempdir().unwrap();
    let server = server("3600", &[]);
    let (daemon, idp) = daemon_for(&server, dir.path()).await;
    let users = ["alice@example.test", "bob@example.test"];
    let jwts: Vec<String> = users.iter().map(|u| jwt_for(&idp, &daemon, u)).collect();
    let mut hosts = Vec::new();
    for jwt in &jwts {
        hosts.push(Client::connect_as(&daemon.url, jwt).await);
    }
    daemon
        .wait_for_tools(&hosts[0], |n| n.iter().any(|n| n == "rem__whoami"))
        .await;
    let calls = (0..10).flat_map(|n| {
        hosts.iter().zip(users).map(move |(host, user)| async move {
            let answer = host
                .request(
                    "tools/call",
                    json!({"name": "rem__whoami", "arguments": {}}),
                )
                .await;
            let seen = &answer["result"]["structuredContent"]["authorization"];
            let seen = seen
                .as_str()
                .unwrap_or_else(|| panic!("call {n} of {user}: {answer}"));
            (user, subject_of(seen))
        })
    });
    for (user, subject) in join_all(calls).await {
        assert_eq!(
            subject,
            json!(user),
            "{user}'s call went with {subject}'s token"
        );
    }
    // A 2026-07-28 request (no session) of Alice's goes with her exchanged token too.
    let stateless = reqwest::Client::new()
        .post(&daemon.url)
        .bearer_auth(&jwts[0])
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2026-07-28")
        .header("mcp-method", "tools/call")
        .header("mcp-name", "rem__whoami")
        .json(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
            "name": "rem__whoami", "arguments": {},
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                      "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
                      "io.modelcontextprotocol/clientCapabilities": {}}}}),
        )
        .send()
        .await
        .unwrap();
    let answer: Value = stateless.json().await.unwrap();
    let seen = answer["result"]["structuredContent"]["authorization"]
        .as_str()
        .unwrap_or_else(|| panic!("{answer}"));
    assert_eq!(subject_of(seen), json!(users[0]), "{answer}");

    // One exchange per principal, whatever the number of calls.
    let stats: Value = server.report("/oauth-stats").await;
    assert_eq!(stats["token_exchange"], 2, "{stats}");

    // A host that signed in with a static token has no JWT to exchange: told so, by name.
    let static_host = Client::connect_as(&daemon.url, STATIC_HOST).await;
    let answer = static_host
        .request(
            "tools/call",
            json!({"name": "rem__whoami", "arguments": {}}),
        )
        .await;
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("token_exchange")
            && message.contains("`static` did not sign in with a JWT"),
        "{answer}"
    );
    // No token of anyone's in the daemon's log.
    let log = daemon.stderr();
    for secret in [SECRET, ".exchanged", "catalog-reader", &jwts[0], &jwts[1]] {
        assert!(
            !log.contains(secret),
            "the daemon's log holds {secret}: {log}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_exchanged_for_another_audience_never_reaches_the_upstream() {
    let dir = tempfile::tempdir().unwrap();
    let server = server(
        "3600",
        &[
            "--oauth-exchange-audience",
            "https://elsewhere.example.test/mcp",
        ],
    );
    let (daemon, idp) = daemon_for(&server, dir.path()).await;
    let host = Client::connect_as(&daemon.url, &jwt_for(&idp, &daemon, "alice@example.test")).await;
    daemon
        .wait_for_tools(&host, |n| n.iter().any(|n| n == "rem__whoami"))
        .await;
    let answer = host
        .request(
            "tools/call",
            json!({"name": "rem__whoami", "arguments": {}}),
        )
        .await;
    let message = answer["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("elsewhere.example.test") && message.contains("refused"),
        "{answer}"
    );
    // The upstream saw the catalog reader's token only.
    let seen: Vec<String> = server.report("/authorizations").await;
    assert_eq!(seen, vec!["Bearer catalog-reader".to_owned()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expiring_token_is_exchanged_again_from_the_callers_jwt() {
    let dir = tempfile::tempdir().unwrap();
    let server = server("4", &[]);
    let (daemon, idp) = daemon_for(&server, dir.path()).await;
    let host = Client::connect_as(&daemon.url, &jwt_for(&idp, &daemon, "alice@example.test")).await;
    daemon
        .wait_for_tools(&host, |n| n.iter().any(|n| n == "rem__whoami"))
        .await;
    let token = async || {
        let answer = host
            .request(
                "tools/call",
                json!({"name": "rem__whoami", "arguments": {}}),
            )
            .await;
        (answer["result"]["structuredContent"]["authorization"].as_str())
            .unwrap_or_else(|| panic!("{answer}"))
            .to_owned()
    };
    let first = token().await;
    assert_eq!(token().await, first, "a live token is used again");
    // Past its lifetime (4 s, renewed half of it early, counted in whole seconds): a new
    // exchange, a new token, the same caller.
    tokio::time::sleep(std::time::Duration::from_millis(4500)).await;
    let second = token().await;
    assert_ne!(second, first);
    assert_eq!(subject_of(&second), json!("alice@example.test"));
}
