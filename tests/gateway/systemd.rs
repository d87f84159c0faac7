//! Running under systemd: both units in `systemd/` pass `systemd-analyze verify`, and the daemon
//! speaks the notify protocol to a real `NOTIFY_SOCKET` — `READY=1` with a `STATUS=` line once it
//! listens, a new status as upstreams become ready, `WATCHDOG=1` at half of `WATCHDOG_USEC`,
//! `RELOADING=1` then `READY=1` around a reload, and `STOPPING=1` when it is told to stop.

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::{Daemon, MCPMUX, test_upstream};

/// The unit `name` with its `ExecStart` program replaced by the binary under test.
fn unit_for_test(name: &str, dir: &Path) -> std::path::PathBuf {
    let text = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("systemd")
            .join(name),
    )
    .unwrap()
    .replace("/usr/local/bin/mcpmux", MCPMUX)
    .replace("%h/.cargo/bin/mcpmux", MCPMUX);
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn both_units_verify() {
    let dir = tempfile::tempdir().unwrap();
    let runtime = dir.path().join("runtime");
    std::fs::create_dir_all(&runtime).unwrap();
    for (unit, user) in [("mcpmux.service", false), ("mcpmux-user.service", true)] {
        let path = unit_for_test(unit, dir.path());
        let mut verify = std::process::Command::new("systemd-analyze");
        if user {
            verify.arg("--user").env("XDG_RUNTIME_DIR", &runtime);
        }
        let out = verify
            .arg("verify")
            .arg(&path)
            .output()
            .unwrap_or_else(|e| panic!("this test needs systemd-analyze (package systemd): {e}"));
        assert!(
            out.status.success() && out.stderr.is_empty(),
            "{unit}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// Every datagram that arrives within `within`.
fn receive(socket: &UnixDatagram, within: Duration) -> Vec<String> {
    let deadline = Instant::now() + within;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while let Some(left) = deadline.checked_duration_since(Instant::now()) {
        socket
            .set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .unwrap();
        match socket.recv(&mut buf) {
            Ok(n) => got.push(String::from_utf8_lossy(&buf[..n]).into_owned()),
            Err(_) => break,
        }
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_tells_systemd_it_is_ready_alive_and_stopping() {
    let dir = tempfile::tempdir().unwrap();
    let socket_path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&socket_path).unwrap();
    let mut daemon = Daemon::start_with_env(
        &test_upstream("up", &[]),
        &[
            ("NOTIFY_SOCKET", socket_path.to_str().unwrap()),
            ("WATCHDOG_USEC", "400000"),
        ],
    );
    let messages = receive(&socket, Duration::from_secs(3));
    let first = messages.first().cloned().unwrap_or_default();
    assert!(
        first.lines().any(|l| l == "READY=1"),
        "{messages:?}\n{}",
        daemon.stderr()
    );
    assert!(
        first.contains(&format!("STATUS=serving {}", daemon.url)),
        "{first}"
    );
    assert!(
        messages
            .iter()
            .any(|m| m.contains("STATUS=") && m.contains("1/1 upstreams ready")),
        "{messages:?}"
    );
    let pings = messages.iter().filter(|m| m.trim() == "WATCHDOG=1").count();
    // One per 200 ms for the 3 s listened (less the start).
    assert!(
        (5..=20).contains(&pings),
        "{pings} watchdog pings: {messages:?}"
    );

    // A reload (SIGHUP, as `ExecReload` sends it) is bracketed by RELOADING=1 and READY=1.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.pid() as i32),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
    let reload: Vec<String> = receive(&socket, Duration::from_secs(2))
        .into_iter()
        .filter(|m| m.trim() != "WATCHDOG=1")
        .collect();
    let at = |line: &str| reload.iter().position(|m| m.lines().any(|l| l == line));
    let (reloading, ready) = (at("RELOADING=1"), at("READY=1"));
    assert!(
        reloading.is_some() && ready > reloading,
        "{reload:?}\n{}",
        daemon.stderr()
    );
    assert!(
        reload[reloading.unwrap()].contains("MONOTONIC_USEC="),
        "{reload:?}"
    );

    daemon.terminate();
    let stopping = receive(&socket, Duration::from_secs(2));
    assert!(
        stopping
            .iter()
            .any(|m| m.lines().any(|l| l == "STOPPING=1")),
        "{stopping:?}"
    );
    assert!(daemon.wait_exit(Duration::from_secs(20)).await.is_some());
}
