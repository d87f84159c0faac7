//! A quiet first start: the default config's servers (server-everything, server-memory,
//! server-filesystem on a scratch folder, with the roots the default config gives them) start
//! without a single warning, and no log line carries actor ids.

use std::time::Duration;

use crate::common::{Daemon, npm_upstream, poll_until, toml_str};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_servers_start_without_a_warning() {
    let scratch = tempfile::tempdir().unwrap();
    let scratch_dir = scratch.path().to_str().unwrap();
    // config/mcpmux.toml, with the pinned peers instead of `npx -y` (same servers, same roots).
    let config = format!(
        "{}roots = [{dir}]\n{}{}cwd = {dir}\nroots = [{dir}]\n",
        npm_upstream("everything", "mcp-server-everything", &[]),
        npm_upstream("memory", "mcp-server-memory", &[]),
        npm_upstream("filesystem", "mcp-server-filesystem", &["."]),
        dir = toml_str(scratch_dir),
    );
    let daemon = Daemon::start_with_env(&config, &[("MCPMUX_LOG", "info")]);
    let ready = poll_until(Duration::from_secs(300), || async {
        let status = daemon.status().await;
        status["upstreams"]
            .as_array()
            .is_some_and(|u| u.len() == 3 && u.iter().all(|u| u["state"] == "ready"))
    })
    .await;
    assert!(ready, "{}", daemon.stderr());
    // The servers ask for their roots right after starting; filesystem says when it has them.
    let answered = poll_until(Duration::from_secs(30), || async {
        daemon
            .stderr()
            .contains("Updated allowed directories from MCP roots")
    })
    .await;
    assert!(answered, "{}", daemon.stderr());
    // server-everything's answer leaves no trace; a refusal would be a WARN within moments.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let log = daemon.stderr();
    let noisy: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR ") || l.contains("Actor{"))
        .collect();
    assert!(
        noisy.is_empty(),
        "a first start should be quiet:\n{}",
        noisy.join("\n")
    );
    assert!(
        log.contains("Updated allowed directories from MCP roots"),
        "{log}"
    );
}
