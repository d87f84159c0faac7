//! Remote upstreams: stdio servers published by PyPI's `mcp-proxy` (the 1.x Python SDK on the
//! server side) work over Streamable HTTP and SSE; a server restarted under a live host session is
//! reconnected (a new HTTP session, no crash loop); a server that refuses the credential leaves its
//! upstream `unauthorized` — not restarted, the host's error naming the upstream and the 401, the
//! token in no log line, status or audit record; an HTTPS upstream trusts the configured CA and
//! presents the configured client certificate, and one whose certificate is not trusted is never
//! served; `HTTPS_PROXY` carries remote connections, `NO_PROXY` and loopback go around it; a
//! redirect to another origin is not followed, so the upstream's headers go nowhere else.

use std::time::Duration;

use crate::common;
use crate::common::{
    Client, Daemon, RemoteServer, TEST_UPSTREAM, assert_upstream_error, peers, poll_until,
};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn echo(client: &Client) -> Value {
    client
        .request(
            "tools/call",
            json!({"name": "everything__echo", "arguments": {"message": "hi"}}),
        )
        .await
}

fn echoed(answer: &Value) -> bool {
    answer["result"]["content"][0]["text"]
        .as_str()
        .is_some_and(|t| t.contains("hi"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_servers_published_by_mcp_proxy_work_over_both_transports() {
    let time = peers::proxy_bin("mcp-server-time");
    let time = RemoteServer::mcp_proxy(time.to_str().unwrap(), &[]);
    let ours = RemoteServer::mcp_proxy(TEST_UPSTREAM, &["--name", "proxied"]);
    let table = |name: &str, url: String, transport: &str| {
        format!("[upstreams.{name}]\nurl = \"{url}\"\ntransport = \"{transport}\"\n")
    };
    let daemon = Daemon::start(
        &[
            table("time-http", time.url("/mcp"), "streamable-http"),
            table("time-sse", time.url("/sse"), "sse"),
            table("ours-http", ours.url("/mcp"), "auto"),
            table("ours-sse", ours.url("/sse"), "auto"),
        ]
        .concat(),
    );
    let host = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&host, |n| {
            ["time-http", "time-sse", "ours-http", "ours-sse"]
                .iter()
                .all(|p| n.iter().any(|t| t.starts_with(&format!("{p}__"))))
        })
        .await;
    for prefix in ["time-http", "time-sse"] {
        let answer = host
            .request(
                "tools/call",
                json!({"name": format!("{prefix}__get_current_time"), "arguments": {"timezone": "UTC"}}),
            )
            .await;
        let text = answer["result"]["content"][0]["text"]
            .as_str()
            .unwrap_or_default();
        assert!(text.contains("UTC"), "{prefix}: {answer}");
    }
    for prefix in ["ours-http", "ours-sse"] {
        let answer = host
            .request(
                "tools/call",
                json!({"name": format!("{prefix}__echo"), "arguments": {"via": prefix}}),
            )
            .await;
        assert_eq!(
            answer["result"]["structuredContent"]["upstream"], "proxied",
            "{prefix}: {answer}"
        );
    }
    let status = daemon.status().await;
    let transports: Vec<(String, String)> = status["upstreams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| {
            (
                u["name"].as_str().unwrap().to_owned(),
                u["transport"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        transports,
        [
            ("ours-http".into(), "streamable-http".into()),
            ("ours-sse".into(), "sse".into()),
            ("time-http".into(), "streamable-http".into()),
            ("time-sse".into(), "sse".into()),
        ],
        "auto found each transport: {status}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remote_server_restarted_under_a_live_session_is_reconnected() {
    let server = RemoteServer::everything("streamableHttp");
    let port = server.port;
    let daemon = Daemon::start(&format!(
        "[upstreams.everything]\nurl = \"{}\"\n",
        server.url("/mcp")
    ));
    let host = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&host, |n| n.iter().any(|t| t == "everything__echo"))
        .await;
    assert!(echoed(&echo(&host).await));
    let before = daemon.upstream_status("everything").await;
    assert_eq!(before["transport"], "streamable-http", "{before}");
    assert_eq!(before["url"], server.url("/mcp"), "{before}");
    assert_eq!(
        before["http_session"], "established, protocol 2025-11-25",
        "{before}"
    );

    // The server goes away and comes back without the session mcpmux had.
    drop(server);
    let _server = RemoteServer::everything_on("streamableHttp", port);
    // The first call meets the forgotten session (404): a new session is opened and the call
    // sent again in it, so the host sees nothing but a slower answer.
    let answer = echo(&host).await;
    assert!(
        echoed(&answer),
        "a call after the server came back failed: {answer}\n{}",
        daemon.stderr()
    );
    let after = daemon.upstream_status("everything").await;
    assert_eq!(after["state"], "ready", "{after}");
    assert_eq!(
        after["restarts"], 0,
        "a new session is not a crash: {after}"
    );
    assert_eq!(
        after["http_session"],
        "established, protocol 2025-11-25; opened again once after the server forgot it",
        "{after}"
    );
    assert!(
        daemon.log_count(&["upstream=everything", "forgot mcpmux's HTTP session"]) >= 1,
        "the reconnection is logged:\n{}",
        daemon.stderr()
    );
}

/// A server on 127.0.0.1 that answers every request with `answer` (given its own origin) and
/// records each request's headers; its origin, what it saw, and its task.
async fn recording_server(
    answer: fn(&str) -> axum::response::Response,
) -> (
    String,
    std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    tokio::task::JoinHandle<()>,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = format!("http://{}", listener.local_addr().unwrap());
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let (record, me) = (std::sync::Arc::clone(&seen), origin.clone());
    let app = axum::Router::new().fallback(move |headers: axum::http::HeaderMap| {
        let (record, me) = (std::sync::Arc::clone(&record), me.clone());
        async move {
            record.lock().unwrap().push(format!("{headers:?}"));
            answer(&me)
        }
    });
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (origin, seen, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redirect_to_another_origin_is_not_followed_and_the_headers_go_nowhere_else() {
    use axum::response::IntoResponse;
    let secret = "mcpmux-test-header-secret-3b7d";
    let (elsewhere, seen, _elsewhere) = recording_server(|_| {
        axum::Json(json!({"jsonrpc": "2.0", "id": 1, "result": {}})).into_response()
    })
    .await;
    static TARGET: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    TARGET.set(format!("{elsewhere}/mcp")).unwrap();
    let (redirector, _, _redirector) = recording_server(|_| {
        let location = TARGET.get().cloned().unwrap_or_default();
        (
            axum::http::StatusCode::TEMPORARY_REDIRECT,
            [(axum::http::header::LOCATION, location)],
        )
            .into_response()
    })
    .await;
    let daemon = Daemon::start(&format!(
        "[upstreams.moved]\nurl = \"{redirector}/mcp\"\ntransport = \"streamable-http\"\n\
         headers = {{ \"X-Api-Key\" = \"{secret}\" }}\nrestart_initial_backoff = \"1s\"\n"
    ));
    let target = format!("{elsewhere}/mcp");
    let said = poll_until(Duration::from_secs(20), || async {
        let status = daemon.upstream_status("moved").await;
        (status["last_http_error"].as_str()).is_some_and(|e| e.contains(&target))
    })
    .await;
    let status = daemon.upstream_status("moved").await;
    assert!(
        said,
        "the redirect's Location is not named: {status}\n{}",
        daemon.stderr()
    );
    assert!(
        status["last_http_error"]
            .as_str()
            .is_some_and(|e| e.contains("another origin")),
        "{status}"
    );
    let seen = seen.lock().unwrap().clone();
    assert!(
        seen.is_empty(),
        "the redirect was followed to another origin: {seen:#?}"
    );
    assert!(!daemon.stderr().contains(secret), "the header was logged");
}

/// A server that answers every request with 401 and a `WWW-Authenticate` challenge.
async fn refusing_server() -> (u16, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        loop {
            let Ok((mut socket, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = vec![0u8; 65536];
                let _ = socket.read(&mut buf).await;
                let body = r#"{"error":"invalid_token"}"#;
                let answer = format!(
                    "HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Bearer error=\"invalid_token\"\r\n\
                     Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = socket.write_all(answer.as_bytes()).await;
            });
        }
    });
    (port, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_credential_leaves_the_upstream_unauthorized_and_the_token_nowhere() {
    let (port, _server) = refusing_server().await;
    let dir = tempfile::tempdir().unwrap();
    let secret = "mcpmux-test-secret-token-8f1c2a";
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, format!("{secret}\n")).unwrap();
    let daemon = Daemon::start(&format!(
        "[upstreams.locked]\nurl = \"http://127.0.0.1:{port}/mcp\"\nbearer_token_file = {}\n\
         restart_initial_backoff = \"50ms\"\n{}",
        serde_json::to_string(token_file.to_str().unwrap()).unwrap(),
        common::test_upstream("good", &[])
    ));
    let host = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&host, |n| n.iter().any(|t| t == "good__echo"))
        .await;
    let reached = poll_until(Duration::from_secs(10), || async {
        daemon.upstream_status("locked").await["state"] == "unauthorized"
    })
    .await;
    let status = daemon.upstream_status("locked").await;
    assert!(reached, "not unauthorized: {status}\n{}", daemon.stderr());
    // No restart storm: it stays put.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let status = daemon.upstream_status("locked").await;
    assert_eq!(status["state"], "unauthorized", "{status}");
    assert_eq!(status["restarts"], 0, "{status}");

    let answer = host
        .request(
            "tools/call",
            json!({"name": "locked__anything", "arguments": {}}),
        )
        .await;
    let message = assert_upstream_error(&answer, -32010, "locked");
    assert!(
        message.contains("401") && message.contains("unauthorized"),
        "{message}"
    );
    // The healthy upstream is untouched.
    let ok = host
        .request(
            "tools/call",
            json!({"name": "good__echo", "arguments": {"x": 1}}),
        )
        .await;
    assert!(ok["result"].is_object(), "{ok}");

    // A new token in the file starts it again (here the server refuses that one too).
    std::fs::write(&token_file, "another-token\n").unwrap();
    let retried = poll_until(Duration::from_secs(10), || async {
        daemon.log_count(&["upstream=locked", "bearer_token_file changed"]) >= 1
    })
    .await;
    assert!(
        retried,
        "a changed token file did not start it again:\n{}",
        daemon.stderr()
    );
    let again = poll_until(Duration::from_secs(10), || async {
        daemon.upstream_status("locked").await["state"] == "unauthorized"
    })
    .await;
    assert!(again, "{}", daemon.upstream_status("locked").await);

    // The token is in no log line, no status and no audit record.
    let audit = daemon
        .admin_get("/audit/query?limit=1000")
        .await
        .text()
        .await
        .unwrap();
    let full_status = daemon.status().await.to_string();
    // `mcpmux status` shows the state, the URL and the 401.
    let printed = std::process::Command::new(common::MCPMUX)
        .args(["status", "--admin", daemon.admin_url.as_deref().unwrap()])
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&printed.stdout).into_owned();
    for needle in [
        "unauthorized".to_owned(),
        format!("http://127.0.0.1:{port}/mcp"),
        "401".to_owned(),
    ] {
        assert!(
            printed.contains(&needle),
            "`mcpmux status` lacks {needle}:\n{printed}"
        );
    }
    for (what, text) in [
        ("the daemon's log", daemon.stderr()),
        ("the status", full_status),
        ("`mcpmux status`", printed),
        ("the audit log", audit),
        ("the host's error", answer.to_string()),
    ] {
        assert!(
            !text.contains(secret),
            "the token leaked into {what}:\n{text}"
        );
    }
}

/// A CA, and a server and a client certificate it signed (for 127.0.0.1 and localhost), by the
/// `openssl` command line.
fn certificates(dir: &std::path::Path) {
    let openssl = |args: &[&str]| {
        let out = std::process::Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap_or_else(|e| panic!("the TLS test needs the openssl command: {e}"));
        assert!(
            out.status.success(),
            "openssl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=mcpmux-test-ca",
        "-addext",
        "basicConstraints=critical,CA:TRUE",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    ]);
    for (who, usage) in [("server", "serverAuth"), ("client", "clientAuth")] {
        let (key, csr, pem, ext) = (
            format!("{who}.key"),
            format!("{who}.csr"),
            format!("{who}.pem"),
            format!("{who}.ext"),
        );
        openssl(&[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            &key,
            "-out",
            &csr,
            "-subj",
            "/CN=localhost",
        ]);
        std::fs::write(
            dir.join(&ext),
            format!(
                "subjectAltName=DNS:localhost,DNS:upstream.test,DNS:bypassed.test,IP:127.0.0.1\n\
                 basicConstraints=CA:FALSE\n\
                 keyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage={usage}\n"
            ),
        )
        .unwrap();
        openssl(&[
            "x509",
            "-req",
            "-in",
            &csr,
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            &pem,
            "-days",
            "2",
            "-extfile",
            &ext,
        ]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_upstreams_trust_the_configured_ca_and_present_the_client_certificate() {
    let server = RemoteServer::everything("streamableHttp");
    let dir = tempfile::tempdir().unwrap();
    certificates(dir.path());
    // TLS in front of server-everything, requiring a client certificate signed by our CA.
    let tls_args = [
        "--target-port",
        &server.port.to_string(),
        "--cert",
        "server.pem",
        "--key",
        "server.key",
        "--client-ca",
        "ca.pem",
    ];
    let (mut tls, port, _) = peer_script("tls_proxy.py", &tls_args, dir.path()).await;
    let pem = |f: &str| serde_json::to_string(dir.path().join(f).to_str().unwrap()).unwrap();
    let daemon = Daemon::start(&format!(
        "[upstreams.trusted]\nurl = \"https://localhost:{port}/mcp\"\nca_file = {}\n\
         client_cert_file = {}\nclient_key_file = {}\n\
         [upstreams.untrusted]\nurl = \"https://localhost:{port}/mcp\"\n\
         [upstreams.anonymous]\nurl = \"https://127.0.0.1:{port}/mcp\"\nca_file = {}\n",
        pem("ca.pem"),
        pem("client.pem"),
        pem("client.key"),
        pem("ca.pem"),
    ));
    let host = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&host, |n| n.iter().any(|t| t == "trusted__echo"))
        .await;
    let answer = host
        .request(
            "tools/call",
            json!({"name": "trusted__echo", "arguments": {"message": "hi"}}),
        )
        .await;
    assert!(
        echoed(&answer.clone()) || answer["result"].is_object(),
        "{answer}"
    );
    // Without the CA the server's certificate is not trusted; without a client certificate the
    // server refuses the handshake. Both say so and are retried, never served.
    let refused = poll_until(Duration::from_secs(20), || async {
        let untrusted = daemon.upstream_status("untrusted").await;
        let anonymous = daemon.upstream_status("anonymous").await;
        untrusted["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("UnknownIssuer"))
            && anonymous["last_error"]
                .as_str()
                .is_some_and(|e| !e.is_empty())
    })
    .await;
    assert!(
        refused,
        "{}\n{}",
        daemon.upstream_status("untrusted").await,
        daemon.upstream_status("anonymous").await
    );
    for name in ["untrusted", "anonymous"] {
        let status = daemon.upstream_status(name).await;
        assert_ne!(status["state"], "ready", "{status}");
    }
    let _ = tls.kill().await;
}

/// `python3 tests/peers/SCRIPT args` in `dir`, once it prints `listening PORT`; its later stdout
/// lines are collected in the returned list.
async fn peer_script(
    script: &str,
    args: &[&str],
    dir: &std::path::Path,
) -> (
    tokio::process::Child,
    u16,
    std::sync::Arc<std::sync::Mutex<Vec<String>>>,
) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/peers")
        .join(script);
    let mut child = tokio::process::Command::new("python3")
        .arg(path)
        .args(args)
        .current_dir(dir)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines =
        tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(child.stdout.take().unwrap()));
    let first = lines.next_line().await.unwrap().unwrap_or_default();
    let port: u16 = first
        .trim()
        .strip_prefix("listening ")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{script} did not say where it listens: {first:?}"));
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let collected = std::sync::Arc::clone(&seen);
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            collected.lock().unwrap().push(line);
        }
    });
    (child, port, seen)
}

/// `HTTPS_PROXY` carries a remote upstream's connections (a CONNECT tunnel, TLS end to end with
/// the server); a host in `NO_PROXY` and a loopback address are reached without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remote_upstreams_go_through_https_proxy_except_no_proxy_and_loopback() {
    let server = RemoteServer::test_upstream("web", 0, &[]);
    let dir = tempfile::tempdir().unwrap();
    certificates(dir.path());
    let target = server.port.to_string();
    let tls_args = [
        "--target-port",
        &target,
        "--cert",
        "server.pem",
        "--key",
        "server.key",
    ];
    let (mut tls, port, _) = peer_script("tls_proxy.py", &tls_args, dir.path()).await;
    // The proxy sends every tunnel to 127.0.0.1: `upstream.test` resolves only through it.
    let (mut proxy, proxy_port, seen) = peer_script("http_proxy.py", &[], dir.path()).await;
    let ca = serde_json::to_string(dir.path().join("ca.pem").to_str().unwrap()).unwrap();
    let proxy_url = format!("http://127.0.0.1:{proxy_port}");
    let daemon = Daemon::start_with_env(
        &format!(
            "[upstreams.proxied]\nurl = \"https://upstream.test:{port}/mcp\"\nca_file = {ca}\n\
             [upstreams.loopback]\nurl = \"https://127.0.0.1:{port}/mcp\"\nca_file = {ca}\n\
             [upstreams.bypassed]\nurl = \"https://bypassed.test:{port}/mcp\"\nca_file = {ca}\n"
        ),
        &[("HTTPS_PROXY", &proxy_url), ("NO_PROXY", "bypassed.test")],
    );
    let host = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&host, |n| {
            ["proxied__echo", "loopback__echo"]
                .iter()
                .all(|t| n.iter().any(|x| x == t))
        })
        .await;
    for tool in ["proxied__echo", "loopback__echo"] {
        let answer = host
            .request(
                "tools/call",
                json!({"name": tool, "arguments": {"via": tool}}),
            )
            .await;
        assert_eq!(
            answer["result"]["structuredContent"]["params"]["arguments"]["via"], tool,
            "{answer}"
        );
    }
    // `bypassed.test` is looked up by the daemon itself, where it does not exist.
    let refused = poll_until(Duration::from_secs(20), || async {
        let status = daemon.upstream_status("bypassed").await;
        status["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("bypassed.test"))
    })
    .await;
    let status = daemon.upstream_status("bypassed").await;
    assert!(refused && status["state"] != "ready", "{status}");
    let seen = seen.lock().unwrap().clone();
    assert!(
        seen.iter()
            .any(|l| *l == format!("CONNECT upstream.test:{port}")),
        "the proxy never tunnelled to upstream.test: {seen:?}"
    );
    assert!(
        seen.iter()
            .all(|l| !l.contains("bypassed.test") && !l.contains("127.0.0.1")),
        "NO_PROXY or loopback went through the proxy: {seen:?}"
    );
    let _ = tls.kill().await;
    let _ = proxy.kill().await;
}
