//! The `mcpmux stdio` bridge as a stdio-only host sees it: spawned against a daemon's URL, written
//! to on stdin, read line by line on stdout.

use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

use super::MCPMUX;

/// A running `mcpmux stdio --url URL` (killed when dropped), its stdin and its stdout lines.
pub struct Bridge {
    pub child: Child,
    pub stdin: ChildStdin,
    pub stdout: Lines<BufReader<ChildStdout>>,
}

/// Spawns `mcpmux stdio --url url` with no `MCPMUX_CONFIG` of the test's environment and its
/// stderr discarded.
pub fn spawn_bridge(url: &str) -> Bridge {
    spawn_bridge_as(url, None)
}

/// [`spawn_bridge`] presenting a host's bearer `token` (through `MCPMUX_TOKEN`).
pub fn spawn_bridge_as(url: &str, token: Option<&str>) -> Bridge {
    let mut command = tokio::process::Command::new(MCPMUX);
    if let Some(token) = token {
        command.env("MCPMUX_TOKEN", token);
    }
    let mut child = command
        .arg("stdio")
        .arg("--url")
        .arg(url)
        .env_remove("MCPMUX_CONFIG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let stdout = BufReader::new(child.stdout.take().unwrap()).lines();
    Bridge {
        child,
        stdin,
        stdout,
    }
}
