//! MCP servers reached over HTTP, on a free port of 127.0.0.1, stopped with their process group
//! when dropped: server-everything in its `streamableHttp` or `sse` mode and the published MCP App
//! servers in their HTTP mode (a preload keeps them on loopback), stdio servers published by
//! PyPI's `mcp-proxy` (Streamable HTTP at `/mcp`, SSE at `/sse`), and our own test upstream in
//! its `--http` mode (with HTTP faults to inject).

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{TEST_UPSTREAM, peers};

/// A remote MCP server process.
pub struct RemoteServer {
    child: Child,
    pub port: u16,
}

impl RemoteServer {
    /// server-everything in `mode` (`streamableHttp` or `sse`), once it accepts connections.
    pub fn everything(mode: &str) -> Self {
        Self::everything_on(mode, free_port())
    }

    /// [`Self::everything`] on `port` (a restarted server on the port of the one before).
    pub fn everything_on(mode: &str, port: u16) -> Self {
        let mut command = Command::new(peers::npm_bin("mcp-server-everything"));
        command.arg(mode);
        Self::node_on_loopback(command, port, &format!("server-everything {mode}"))
    }

    /// The npm peers' `bin` in its HTTP mode, which serves on `PORT` (the published MCP App
    /// servers: stateless Streamable HTTP at `/mcp`), kept on loopback by the preload.
    pub fn npm_http(bin: &str) -> Self {
        Self::node_on_loopback(Command::new(peers::npm_bin(bin)), free_port(), bin)
    }

    /// Starts the Node server `command` with `PORT` set to `port` and the preload that makes a
    /// `listen(PORT)` bind 127.0.0.1 only.
    fn node_on_loopback(mut command: Command, port: u16, what: &str) -> Self {
        let preload =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers/loopback.cjs");
        command
            .env("PORT", port.to_string())
            .env("NODE_OPTIONS", format!("--require {}", preload.display()));
        Self::listening(command, port, what)
    }

    /// `mcp-proxy` publishing the stdio server `program args` over HTTP.
    pub fn mcp_proxy(program: &str, args: &[&str]) -> Self {
        let port = free_port();
        let mut command = Command::new(peers::proxy_bin("mcp-proxy"));
        command
            .args(["--host", "127.0.0.1", "--port", &port.to_string(), "--"])
            .arg(program)
            .args(args);
        Self::listening(command, port, &format!("mcp-proxy for {program}"))
    }

    /// A Python script of the peers' venv (the MCP Python SDK's) serving MCP over HTTP, run
    /// as `script --http PORT`.
    pub fn python_script(script: &std::path::Path) -> Self {
        let port = free_port();
        let mut command = Command::new(peers::python());
        command.arg(script).args(["--http", &port.to_string()]);
        Self::listening(command, port, &format!("{}", script.display()))
    }

    /// Starts `command` in its own process group and waits until `port` accepts connections.
    fn listening(mut command: Command, port: u16, what: &str) -> Self {
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {what}: {e}"));
        let server = Self { child, port };
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "{what} did not listen on 127.0.0.1:{port} within 60 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        server
    }

    /// Our test upstream `--name name --http 127.0.0.1:PORT` (port 0: any free one) plus `args`,
    /// once it prints the address it listens on.
    pub fn test_upstream(name: &str, port: u16, args: &[&str]) -> Self {
        let mut child = Command::new(TEST_UPSTREAM)
            .args(["--name", name, "--http", &format!("127.0.0.1:{port}")])
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start the HTTP test upstream {name}: {e}"));
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            let mut line = String::new();
            let _ = std::io::BufReader::new(stdout).read_line(&mut line);
            let _ = tx.send(line);
        });
        let mut server = Self { child, port };
        let line = rx.recv_timeout(Duration::from_secs(30)).unwrap_or_default();
        let port = line
            .trim()
            .strip_prefix("listening on http://127.0.0.1:")
            .and_then(|rest| rest.strip_suffix("/mcp"))
            .and_then(|p| p.parse().ok());
        server.port =
            port.unwrap_or_else(|| panic!("{name} did not say where it listens: {line:?}"));
        server
    }

    /// Our test upstream `rem` protected by its own authorization server (hour-long tokens,
    /// asking who signs in), answering `whoami` with the token it got; its catalog read with the
    /// token `catalog-reader`: the per-principal upstream of the sign-in tests.
    pub fn whoami() -> Self {
        Self::test_upstream(
            "rem",
            0,
            &[
                "--whoami",
                "--oauth-token-ttl",
                "3600",
                "--oauth-static-token",
                "catalog-reader",
                "--oauth-ask-user",
            ],
        )
    }

    /// Stops the process (SIGKILL to its group) and waits for it; dropping it afterwards is a no-op.
    pub fn kill(&mut self) {
        // A process reaped already is not signalled (its pid may be someone else's now).
        if !matches!(self.child.try_wait(), Ok(None)) {
            return;
        }
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
        let _ = self.child.wait();
    }

    /// Sends `signal` to the process group (SIGSTOP freezes it, SIGCONT thaws it).
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = nix::sys::signal::killpg(nix::unistd::Pid::from_raw(pid), signal);
        }
    }

    /// `http://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    /// What the test upstream's report at `path` says (`/authorizations`, `/oauth-stats`…).
    pub async fn report<T: serde::de::DeserializeOwned>(&self, path: &str) -> T {
        let response = reqwest::get(self.url(path)).await.unwrap();
        response.json().await.unwrap()
    }
}

impl Drop for RemoteServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A port nothing listens on now (the OS picks it; the server binds it right after).
pub fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// How a test reaches our test upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// A child over stdio.
    Stdio,
    /// Its `--http` mode, as a remote upstream over Streamable HTTP.
    Http,
    /// Its `--http` mode, as a remote upstream over legacy HTTP+SSE.
    Sse,
}

/// The `[upstreams.NAME]` table of our test upstream with `args`, reached `via`, and its server
/// process when it is remote (keep it alive as long as the daemon uses it).
pub fn test_upstream_via(name: &str, via: Via, args: &[&str]) -> (String, Option<RemoteServer>) {
    if let Via::Stdio = via {
        return (super::test_upstream(name, args), None);
    }
    let server = RemoteServer::test_upstream(name, 0, args);
    (server.table(name, via), Some(server))
}

impl RemoteServer {
    /// The `[upstreams.NAME]` table reaching this test upstream over `via` (Http or Sse): its
    /// URL for that transport, and the transport named.
    pub fn table(&self, name: &str, via: Via) -> String {
        let (path, transport) = match via {
            Via::Sse => ("/sse", "sse"),
            Via::Http | Via::Stdio => ("/mcp", "streamable-http"),
        };
        format!(
            "[upstreams.{name}]\nurl = \"{}\"\ntransport = \"{transport}\"\n",
            self.url(path)
        )
    }
}

/// `mcpmux login UPSTREAM --admin ADMIN` as a person runs it (with `env` set): the URL it prints
/// opened in a "browser" that follows the authorization server's redirect back to mcpmux, then
/// the command's end. Whether it succeeded, and its stderr; a sign-in that fails before it
/// prints a URL ends the command at once.
pub async fn login_in_browser(
    admin: &str,
    upstream: &str,
    env: &[(&str, &std::path::Path)],
) -> (bool, String) {
    use std::io::BufRead;
    let mut child = Command::new(super::MCPMUX)
        .args(["login", upstream, "--admin", admin, "--no-browser"])
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Its output is read to the end, as a terminal would.
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            let line = line.trim().to_owned();
            if line.starts_with("http://") {
                if let Some(tx) = tx.take() {
                    let _ = tx.send(line);
                }
            }
        }
    });
    let printed = tokio::time::timeout(Duration::from_secs(20), rx)
        .await
        .expect("mcpmux login printed no URL and did not end");
    if let Ok(url) = printed {
        let browser = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let redirect = browser.get(&url).send().await.unwrap();
        assert_eq!(redirect.status(), 302, "{url}");
        let back = redirect.headers()["location"].to_str().unwrap().to_owned();
        assert!(back.starts_with("http://127.0.0.1:"), "{back}");
        let landed = browser.get(&back).send().await.unwrap();
        assert!(landed.status().is_success());
    }
    let status = tokio::task::spawn_blocking(move || child.wait_with_output())
        .await
        .unwrap()
        .unwrap();
    (
        status.status.success(),
        String::from_utf8_lossy(&status.stderr).into_owned(),
    )
}

/// Signs `user` in through the per-principal sign-in `link` as the host holding `token` would,
/// step by step (its page, the authorization server asking who signs in, the redirect back).
pub async fn sign_in_through(link: &str, token: &str, user: &str) {
    let browser = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .build()
        .unwrap();
    let onward = browser
        .post(link)
        .form(&[("token", token)])
        .send()
        .await
        .unwrap();
    assert_eq!(onward.status(), 303);
    let authorize = onward.headers()["location"].to_str().unwrap().to_owned();
    let redirect = browser
        .get(format!("{authorize}&user={user}"))
        .send()
        .await
        .unwrap();
    let callback = redirect.headers()["location"].to_str().unwrap().to_owned();
    assert_eq!(browser.get(&callback).send().await.unwrap().status(), 200);
}
