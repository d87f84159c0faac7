//! Shared helpers for the black-box tests: start the real `mcpmux` binary on port 0 with a config
//! of real upstream processes, talk to it over Streamable HTTP, and check every message it sends
//! against the MCP schema of the version negotiated on that side.

//!
//! `mod.rs` is the one exception to the `foo.rs` + `foo/` convention: it is what stops cargo from
//! compiling `common` as a test of its own.

#![allow(clippy::unwrap_used, clippy::missing_panics_doc)]

mod bridge;
mod client;
pub mod console;
mod daemon;
pub mod healthy;
mod legacy;
mod messages;
pub mod peers;
mod procs;
pub mod python;
mod remote;
mod schema;

pub use bridge::{Bridge, spawn_bridge, spawn_bridge_as};
pub use client::{Call, Client};
pub use console::ConsoleSession;
pub use daemon::{AdminApi, Daemon, assert_upstream_error, poll_until, serve_refused};
pub use legacy::LegacyHost;
pub use messages::{Messages, Next, SseReader, read_messages};
pub use procs::{alive, assert_all_gone, comm, descendants, proc_kib};
pub use remote::{
    RemoteServer, Via, free_port, login_in_browser, sign_in_through, test_upstream_via,
};
pub use schema::Schemas;

pub const MCPMUX: &str = env!("CARGO_BIN_EXE_mcpmux");
pub const TEST_UPSTREAM: &str = env!("CARGO_BIN_EXE_mcpmux-test-upstream");

/// A TOML `[upstreams.NAME]` table running our controllable test upstream.
pub fn test_upstream(name: &str, extra_args: &[&str]) -> String {
    let mut args = vec!["--name".to_owned(), name.to_owned()];
    args.extend(extra_args.iter().map(|a| (*a).to_owned()));
    format!(
        "[upstreams.{name}]\ncommand = {}\nargs = {}\n",
        toml_str(TEST_UPSTREAM),
        toml_list(&args)
    )
}

/// A TOML `[upstreams.NAME]` table running `bin` of the npm servers in `tests/peers/` (installed
/// under the target dir by `peers`), with `args`.
pub fn npm_upstream(name: &str, bin: &str, args: &[&str]) -> String {
    let command = peers::npm_bin(bin);
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    format!(
        "[upstreams.{name}]\ncommand = {}\nargs = {}\nstartup_timeout = \"300s\"\n",
        toml_str(command.to_str().unwrap()),
        toml_list(&args)
    )
}

/// The hex SHA-256 digest of a host token, as `[hosts.NAME] token_sha256` takes it.
pub fn sha256_hex(text: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// POSTs an `initialize` to `url`, with `token` as bearer if given; the raw response.
pub async fn initialize_as(url: &str, token: Option<&str>) -> reqwest::Response {
    let mut request = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream");
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    request
        .body(
            serde_json::json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"}}})
            .to_string(),
        )
        .send()
        .await
        .unwrap()
}

/// Asserts `mcpmux check` refuses `config` (written to `dir/mcpmux.toml`) naming `culprit`.
pub fn assert_check_refuses(dir: &std::path::Path, config: &str, culprit: &str) {
    let path = dir.join("mcpmux.toml");
    std::fs::write(&path, config).unwrap();
    let out = std::process::Command::new(MCPMUX)
        .args(["check", "--config", path.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!out.status.success(), "accepted:\n{config}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(culprit), "{config}\n{stderr}");
}

pub fn toml_str(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

pub fn toml_list(items: &[String]) -> String {
    serde_json::to_string(items).unwrap()
}
