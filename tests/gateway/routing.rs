//! Exact routing of host-bound traffic: progress, log messages, resource updates, server requests
//! and cancellations reach exactly the host session (and the stream) they belong to — never a
//! broadcast, never a guess; per-session isolation; version differences between the two sides;
//! batches; the legacy HTTP+SSE transport. Every message any host receives is schema-checked for
//! the version negotiated on that side.
//!
//! `Setup` and the helpers here, a module per section (1. `notifications`,
//! 2. `server_requests`, 3. `isolation`, 4. `cancellation`, 5. `versions`, 6. `legacy_sse`).
//! Tests marked `over_each_transport!` run three times: with the upstream a child over stdio, and
//! with it remote (the test upstream's `--http` mode) over Streamable HTTP and over legacy
//! HTTP+SSE.

mod cancellation;
mod isolation;
mod legacy_sse;
mod notifications;
mod server_requests;
mod versions;

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::{
    Client, Daemon, Messages, RemoteServer, Via, alive, descendants, poll_until, test_upstream_via,
};
use serde_json::{Value, json};

/// How long a message that must not arrive is waited for.
const QUIET: Duration = Duration::from_millis(300);
const RESOURCE: &str = "up+test://up/hello";
const UPSTREAM_URI: &str = "test://up/hello";

/// A host that can answer every server request.
fn all_client_capabilities() -> Value {
    json!({"sampling": {}, "elicitation": {}, "roots": {"listChanged": true}})
}

/// The text of a tool result's first content block.
fn text(answer: &Value) -> &str {
    answer["result"]["content"][0]["text"]
        .as_str()
        .unwrap_or_else(|| panic!("not a text tool result: {answer}"))
}

fn is_error(answer: &Value) -> bool {
    answer["result"]["isError"] == true
}

/// A daemon with the protocol tools of one test upstream `up` (plus `extra` upstream args and
/// `table` lines in its TOML table), and a recording of everything the upstream received.
struct Setup {
    daemon: Daemon,
    record: tempfile::NamedTempFile,
    /// The upstream's process when it is reached over HTTP.
    remote: Option<RemoteServer>,
}

/// Runs routing test `$name(via)` with `up` over each transport.
macro_rules! over_each_transport {
    ($name:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn stdio() {
                super::$name(crate::common::Via::Stdio).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn http() {
                super::$name(crate::common::Via::Http).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sse() {
                super::$name(crate::common::Via::Sse).await;
            }
        }
    };
}
use over_each_transport;

impl Setup {
    async fn start(extra: &[&str], table: &str) -> Self {
        Self::start_over(Via::Stdio, extra, table).await
    }

    async fn start_over(via: Via, extra: &[&str], table: &str) -> Self {
        let record = tempfile::NamedTempFile::new().unwrap();
        let path = record.path().to_str().unwrap().to_owned();
        let mut args = vec!["--protocol-tools", "--record", &path];
        args.extend_from_slice(extra);
        let (upstream, remote) = test_upstream_via("up", via, &args);
        let daemon = Daemon::start(&format!("{upstream}{table}"));
        let probe = Client::connect(&daemon.url).await;
        daemon
            .wait_for_tools(&probe, |n| n.iter().any(|t| t == "up__progress"))
            .await;
        assert_eq!(probe.delete().await, 200);
        Self {
            daemon,
            record,
            remote,
        }
    }

    async fn host(&self, capabilities: Value) -> Client {
        Client::connect_with(&self.daemon.url, "2025-11-25", capabilities).await
    }

    /// Two hosts (A, B) declaring `capabilities`, then each one's GET event stream, opened in
    /// that order.
    async fn two_hosts(&self, capabilities: Value) -> (Client, Client, Messages, Messages) {
        let a = self.host(capabilities.clone()).await;
        let b = self.host(capabilities).await;
        let a_events = a.events().await;
        let b_events = b.events().await;
        (a, b, a_events, b_events)
    }

    /// The upstream instances serving the daemon now: its child processes over stdio, the
    /// server's open MCP sessions when it is remote.
    async fn instances(&self) -> Vec<String> {
        let Some(server) = &self.remote else {
            return upstream_processes(&self.daemon)
                .iter()
                .map(u32::to_string)
                .collect();
        };
        let sessions = reqwest::get(server.url("/sessions")).await.unwrap();
        sessions.json().await.unwrap()
    }

    /// Waits (15 s at most) until `n` upstream instances serve the daemon; returns them.
    async fn wait_instances(&self, n: usize) -> Vec<String> {
        let reached = poll_until(Duration::from_secs(15), || async {
            self.instances().await.len() == n
        })
        .await;
        let now = self.instances().await;
        assert!(reached, "expected {n} upstream instances, have {now:?}");
        now
    }

    /// Every line the upstream(s) received so far.
    fn recorded(&self) -> Vec<Value> {
        recorded(self.record.path())
    }

    /// Waits (10 s at most) until the upstream received a line matching `pred`; returns it.
    async fn wait_recorded(&self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(line) = self.recorded().into_iter().find(|l| pred(l)) {
                return line;
            }
            assert!(
                Instant::now() < deadline,
                "the upstream never received {what}; it got:\n{:#?}\ndaemon stderr:\n{}",
                self.recorded(),
                self.daemon.stderr()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

fn recorded(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// A recorded `tools/call` of the upstream's tool `name`.
fn is_call_of(line: &Value, name: &str) -> bool {
    line["method"] == "tools/call" && line["params"]["name"] == name
}

/// The live processes under the daemon (its upstream instances).
fn upstream_processes(daemon: &Daemon) -> Vec<u32> {
    descendants(daemon.pid())
        .into_iter()
        .filter(|p| alive(*p))
        .collect()
}

async fn wait_process_count(daemon: &Daemon, n: usize) -> Vec<u32> {
    let reached = poll_until(Duration::from_secs(15), || async {
        upstream_processes(daemon).len() == n
    })
    .await;
    let now = upstream_processes(daemon);
    assert!(reached, "expected {n} upstream processes, have {now:?}");
    now
}

/// Asserts that `messages` are exactly `steps` progress notifications for `token`, in order.
fn assert_progress(messages: &[Value], token: &Value, steps: u64, who: &str) {
    assert_eq!(
        messages.len() as u64,
        steps,
        "{who}: expected {steps} progress notifications, got {messages:#?}"
    );
    for (i, m) in messages.iter().enumerate() {
        assert_eq!(m["method"], "notifications/progress", "{who}: {m}");
        assert_eq!(&m["params"]["progressToken"], token, "{who}: {m}");
        assert_eq!(m["params"]["progress"], json!(i as u64 + 1), "{who}: {m}");
        assert_eq!(m["params"]["total"], json!(steps), "{who}: {m}");
    }
}

async fn upstream_subscriptions(c: &Client) -> String {
    c.tool_text("up__subscriptions", json!({})).await
}

async fn touch(c: &Client) -> String {
    c.tool_text("up__touch", json!({"uri": UPSTREAM_URI})).await
}
