//! The daemon under test: `mcpmux serve` started on port 0 with a config of real upstream
//! processes, stopped (SIGTERM, then SIGKILL) when dropped; plus the polling and error helpers the
//! tests use with it.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::{Client, MCPMUX};

/// The daemon under test. Stopped (SIGTERM, then SIGKILL) when dropped.
pub struct Daemon {
    child: Option<Child>,
    pub url: String,
    /// The admin API's base URL, e.g. `http://127.0.0.1:40123`.
    pub admin_url: Option<String>,
    pub dir: tempfile::TempDir,
    /// Its state directory: `--state-dir` when the test passed one, else `<dir>/state`.
    pub state_dir: PathBuf,
    stderr_path: PathBuf,
}

impl Daemon {
    /// Starts `mcpmux serve` on 127.0.0.1:0 with `config` appended to a `[server]` table.
    pub fn start(config: &str) -> Self {
        Self::start_with(
            &format!("[server]\nlisten = \"127.0.0.1:0\"\n\n{config}"),
            &[],
        )
    }

    /// Starts `mcpmux serve --config <file with exactly `config`>` plus `extra_args`.
    pub fn start_with(config: &str, extra_args: &[&str]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config_path = dir.path().join("mcpmux.toml");
        std::fs::write(&config_path, config).unwrap();
        Self::start_file(dir, &config_path, extra_args)
    }

    /// [`Self::start_with`] with `env` added to the daemon's environment.
    pub fn start_with_args_env(config: &str, extra_args: &[&str], env: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config_path = dir.path().join("mcpmux.toml");
        std::fs::write(&config_path, config).unwrap();
        Self::start_file_env(dir, &config_path, extra_args, env)
    }

    pub fn start_file(dir: tempfile::TempDir, config_path: &Path, extra_args: &[&str]) -> Self {
        Self::start_file_env(dir, config_path, extra_args, &[])
    }

    /// [`Self::start`] with `env` added to the daemon's environment.
    pub fn start_with_env(config: &str, env: &[(&str, &str)]) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config_path = dir.path().join("mcpmux.toml");
        let config = format!("[server]\nlisten = \"127.0.0.1:0\"\n\n{config}");
        std::fs::write(&config_path, config).unwrap();
        Self::start_file_env(dir, &config_path, &[], env)
    }

    fn start_file_env(
        dir: tempfile::TempDir,
        config_path: &Path,
        extra_args: &[&str],
        env: &[(&str, &str)],
    ) -> Self {
        let stderr_path = dir.path().join("daemon.stderr");
        let state_dir = (extra_args.iter().position(|a| *a == "--state-dir"))
            .and_then(|i| extra_args.get(i + 1))
            .map_or_else(|| dir.path().join("state"), PathBuf::from);
        let stderr = std::fs::File::create(&stderr_path).unwrap();
        let mut child = Command::new(MCPMUX)
            .arg("serve")
            .arg("--config")
            .arg(config_path)
            .args(extra_args)
            // Each test daemon gets its own admin port (unless the test picks one).
            .args(if extra_args.contains(&"--admin") {
                &[][..]
            } else {
                &["--admin", "127.0.0.1:0"][..]
            })
            // Each test daemon keeps its audit log in its own temporary state directory.
            .args(if extra_args.contains(&"--state-dir") {
                Vec::new()
            } else {
                vec![
                    "--state-dir".into(),
                    dir.path().join("state").into_os_string(),
                ]
            })
            .env("MCPMUX_LOG", "info,mcpmux=debug")
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            // "listening on URL", then (unless turned off) "admin on URL".
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut daemon = Self {
            child: Some(child),
            url: String::new(),
            admin_url: None,
            dir,
            state_dir,
            stderr_path,
        };
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(line) => {
                let url = line
                    .split("listening on ")
                    .nth(1)
                    .unwrap_or_default()
                    .trim()
                    .to_owned();
                assert!(
                    url.starts_with("http://127."),
                    "unexpected first line: {line}"
                );
                daemon.url = url;
            }
            Err(_) => panic!("daemon did not start; stderr:\n{}", daemon.stderr()),
        }
        if let Ok(line) = rx.recv_timeout(Duration::from_secs(5)) {
            daemon.admin_url = line.split("admin on ").nth(1).map(|u| u.trim().to_owned());
        }
        daemon
    }

    /// `mcpmux ARGS --admin URL` against this daemon, its admin token found as the CLI finds it.
    fn run_cli(&self, args: &[&str]) -> std::process::Output {
        Command::new(MCPMUX)
            .args(args)
            .arg("--admin")
            .arg(self.admin_url.as_deref().expect("the admin API"))
            .env(
                "MCPMUX_ADMIN_TOKEN_FILE",
                self.state_dir.join("admin.token"),
            )
            .output()
            .unwrap()
    }

    /// What `mcpmux ARGS --admin URL` printed, stdout and stderr.
    pub fn cli(&self, args: &[&str]) -> String {
        let out = self.run_cli(args);
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    }

    /// Every audit record, as `mcpmux audit query --format json --all` prints them (one per line).
    pub fn audit_json(&self) -> String {
        let out = self.run_cli(&["audit", "query", "--format", "json", "--all"]);
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The admin API's token, from the test daemon's state directory (`<state dir>/admin.token`).
    pub fn admin_token(&self) -> String {
        let path = self.state_dir.join("admin.token");
        std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("no admin token at {}: {e}", path.display()))
            .trim()
            .to_owned()
    }

    /// The admin API, with its token: for requests, and `url` for `--admin` flags.
    pub fn admin(&self) -> AdminApi {
        AdminApi {
            url: self.admin_url.clone().expect("the admin API is on"),
            token: self.admin_token(),
        }
    }

    /// `GET path` on the admin API, with the token (and no proxy).
    pub async fn admin_get(&self, path: &str) -> reqwest::Response {
        self.admin().get(path).await
    }

    /// `POST path` on the admin API with the JSON `body`, with the token (and no proxy).
    pub async fn admin_post(&self, path: &str, body: Value) -> reqwest::Response {
        self.admin().post(path, body).await
    }

    /// The daemon's `GET /status` (admin API).
    pub async fn status(&self) -> Value {
        self.admin().json("/status").await
    }

    /// The status entry of one upstream.
    pub async fn upstream_status(&self, name: &str) -> Value {
        let status = self.status().await;
        status["upstreams"]
            .as_array()
            .unwrap()
            .iter()
            .find(|u| u["name"] == name)
            .cloned()
            .unwrap_or(Value::Null)
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// Lines of the daemon's log that contain every one of `needles`.
    pub fn log_count(&self, needles: &[&str]) -> usize {
        self.stderr()
            .lines()
            .filter(|line| needles.iter().all(|n| line.contains(n)))
            .count()
    }

    /// Everything the daemon logged so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// SIGTERM, then wait (SIGKILL after 20 s). Returns whether it exited successfully.
    pub fn stop(&mut self) -> bool {
        let Some(mut child) = self.child.take() else {
            return true;
        };
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return status.success();
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Polls `tools/list` (all pages) until `pred` holds for the exposed tool names.
    pub async fn wait_for_tools(
        &self,
        client: &Client,
        pred: impl Fn(&[String]) -> bool,
    ) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(300);
        loop {
            let names: Vec<String> = client
                .list_all("tools/list", "tools")
                .await
                .iter()
                .map(|t| t["name"].as_str().unwrap_or_default().to_owned())
                .collect();
            if pred(&names) {
                return names;
            }
            assert!(
                Instant::now() < deadline,
                "tools never matched; last: {names:?}\nstderr:\n{}",
                self.stderr()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Connects a host, waits until `prefix__echo` is listed, asserts that every listed tool is
    /// `prefix`'s and that `prefix__echo` answers `arguments`; returns the host and the echo's
    /// `structuredContent`.
    pub async fn ready_client(&self, prefix: &str, arguments: Value) -> (Client, Value) {
        let client = Client::connect(&self.url).await;
        let echo = format!("{prefix}__echo");
        let tools = self.wait_for_tools(&client, |n| n.contains(&echo)).await;
        assert!(
            tools.iter().all(|t| t.starts_with(&format!("{prefix}__"))),
            "only `{prefix}` has tools: {tools:?}"
        );
        let echoed = client
            .result("tools/call", json!({"name": echo, "arguments": arguments}))
            .await;
        (client, echoed["structuredContent"].clone())
    }

    /// Sends SIGTERM and returns at once (the daemon drains, then exits; see `wait_exit`).
    pub fn terminate(&self) {
        if let Some(child) = &self.child {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(child.id().to_string())
                .status();
        }
    }

    /// Waits without blocking the runtime until the daemon exits: its exit status, or `None` if
    /// it still runs after `timeout` (it is then killed when dropped).
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            let child = self.child.as_mut()?;
            if let Ok(Some(status)) = child.try_wait() {
                self.child = None;
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A test daemon's admin API: its base URL and its token.
#[derive(Debug, Clone)]
pub struct AdminApi {
    /// `http://127.0.0.1:PORT`, as `--admin` takes it.
    pub url: String,
    pub token: String,
}

impl AdminApi {
    /// `GET path` (a query string may be part of it), with the token and no proxy.
    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.get_query(path, &[]).await
    }

    /// `GET path?query`, with the token and no proxy.
    pub async fn get_query(&self, path: &str, query: &[(&str, String)]) -> reqwest::Response {
        admin_http()
            .get(format!("{}{path}", self.url))
            .query(query)
            .bearer_auth(&self.token)
            .send()
            .await
            .unwrap()
    }

    /// `POST path` with the JSON `body`, with the token and no proxy.
    pub async fn post(&self, path: &str, body: Value) -> reqwest::Response {
        admin_http()
            .post(format!("{}{path}", self.url))
            .bearer_auth(&self.token)
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    /// `GET path`'s JSON answer.
    pub async fn json(&self, path: &str) -> Value {
        let text = self.get(path).await.text().await.unwrap();
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{path}: {e}: {text}"))
    }
}

/// A client for the test daemon's admin API: never through a proxy the environment names.
fn admin_http() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

/// Asserts `answer` is a JSON-RPC error with `code` that names `upstream`; returns its message.
pub fn assert_upstream_error(answer: &Value, code: i64, upstream: &str) -> String {
    let error = &answer["error"];
    assert_eq!(error["code"], code, "unexpected answer: {answer}");
    let message = error["message"].as_str().unwrap_or_default().to_owned();
    assert!(
        message.contains(&format!("`{upstream}`")),
        "the message does not name `{upstream}`: {answer}"
    );
    assert_eq!(error["data"]["upstream"], upstream, "{answer}");
    message
}

/// Polls `check` every 50 ms until it is true or `timeout` passes.
pub async fn poll_until<F, Fut>(timeout: Duration, mut check: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if check().await {
            return true;
        }
        if Instant::now() > deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What `mcpmux serve` printed on stderr when it refused to start with `config` (state in
/// `state_dir`, the `OTEL_EXPORTER_OTLP_*` endpoints unset); panics when it started instead.
pub fn serve_refused(config: &Path, state_dir: &Path) -> String {
    let mut child = Command::new(MCPMUX)
        .args(["serve", "--config"])
        .arg(config)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--admin",
            "127.0.0.1:0",
            "--state-dir",
        ])
        .arg(state_dir)
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("mcpmux started with {}", config.display());
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let stderr = String::from_utf8_lossy(&child.wait_with_output().unwrap().stderr).into_owned();
    assert!(!status.success(), "{stderr}");
    stderr
}
