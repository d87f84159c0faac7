//! Start and stop behaviour with our controllable test upstream: upstreams that cannot start, no
//! process left behind on shutdown, a crash mid-call, request timeouts with cancellation, the
//! `check` command, and `mcpServers` JSON configs.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::{
    Client, Daemon, MCPMUX, TEST_UPSTREAM, assert_all_gone, assert_upstream_error, comm,
    descendants, poll_until, test_upstream, toml_str,
};
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstreams_that_cannot_start_are_reported_and_the_others_serve() {
    let config = format!(
        "[upstreams.missing]\ncommand = \"/nonexistent/mcp-server\"\n\n{}{}",
        test_upstream("quitter", &["--exit-at-start", "1"]),
        test_upstream("ok", &[])
    );
    let mut daemon = Daemon::start(&config);
    // Only the healthy upstream has tools.
    let (client, echoed) = daemon.ready_client("ok", json!({"x": 1})).await;
    assert_eq!(echoed["upstream"], "ok");

    // Calls to the failed upstreams get an error that names the upstream and says why.
    let quitter = client
        .request(
            "tools/call",
            json!({"name": "quitter__echo", "arguments": {}}),
        )
        .await;
    let message = assert_upstream_error(&quitter, -32010, "quitter");
    assert!(
        message.contains("exited with status 1"),
        "the reason is missing: {message}"
    );
    let missing = client
        .request(
            "tools/call",
            json!({"name": "missing__anything", "arguments": {}}),
        )
        .await;
    let message = assert_upstream_error(&missing, -32010, "missing");
    assert!(
        message.contains("not found") && message.contains("/nonexistent/mcp-server"),
        "the reason is missing: {message}"
    );
    let prompt = client
        .request("prompts/get", json!({"name": "quitter__greet"}))
        .await;
    assert_upstream_error(&prompt, -32010, "quitter");

    // The log names each failed upstream and why.
    let reported = poll_until(Duration::from_secs(10), || async {
        daemon.log_count(&["upstream=missing", "/nonexistent/mcp-server", "not found"]) > 0
            && daemon.log_count(&["upstream=quitter", "exited with status 1"]) > 0
    })
    .await;
    assert!(
        reported,
        "the log does not explain the failures:\n{}",
        daemon.stderr()
    );

    // Still healthy after the failed upstreams were retried at least once.
    let retried = poll_until(Duration::from_secs(10), || async {
        daemon
            .stderr()
            .lines()
            .filter(|l| l.contains("upstream=quitter") && l.contains("exited with status 1"))
            .count()
            >= 2
    })
    .await;
    assert!(retried, "quitter was not restarted:\n{}", daemon.stderr());
    let echoed = client
        .result("tools/call", json!({"name": "ok__echo", "arguments": {}}))
        .await;
    assert_eq!(echoed["structuredContent"]["upstream"], "ok");
    assert!(
        daemon.stop(),
        "the daemon did not exit cleanly:\n{}",
        daemon.stderr()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_the_daemon_leaves_no_process_behind() {
    let mut daemon = Daemon::start(&format!(
        "{}{}",
        test_upstream("parent", &["--spawn-grandchild"]),
        test_upstream("plain", &[])
    ));
    let client = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&client, |n| {
            n.iter().any(|t| t.starts_with("parent__"))
                && n.iter().any(|t| t.starts_with("plain__"))
        })
        .await;
    drop(client);

    let procs = descendants(daemon.pid());
    let named: Vec<(u32, String)> = procs.iter().map(|&p| (p, comm(p))).collect();
    assert!(
        named.iter().any(|(_, c)| c == "sleep"),
        "the grandchild `sleep` is not among the daemon's descendants: {named:?}"
    );
    assert!(
        named
            .iter()
            .filter(|(_, c)| c.starts_with("mcpmux-test"))
            .count()
            >= 2,
        "both upstreams should run: {named:?}"
    );

    let started = Instant::now();
    assert!(
        daemon.stop(),
        "the daemon did not exit cleanly:\n{}",
        daemon.stderr()
    );
    let stopped_in = started.elapsed();
    assert_all_gone(&procs, "after the daemon stopped").await;
    assert!(
        stopped_in < Duration::from_secs(10),
        "stopping took {stopped_in:?}"
    );
}

/// The daemon's requests run on `server.workers` threads, by default half the cores it may use
/// (at least one), and it says how many when it starts listening.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_run_on_the_configured_number_of_threads() {
    let workers = |pid: u32| {
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
        (tasks.flatten())
            .filter(|t| {
                let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
                comm.trim() == "tokio-rt-worker"
            })
            .count()
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    for (setting, expected) in [("", (cores / 2).max(1)), ("workers = 3\n", 3)] {
        let daemon = Daemon::start(&format!("{setting}{}", test_upstream("up", &[])));
        let (_client, echoed) = daemon.ready_client("up", json!({"x": 1})).await;
        assert_eq!(echoed["upstream"], "up");
        assert_eq!(
            daemon.log_count(&["mcpmux is listening.", &format!("workers={expected}")]),
            1,
            "{setting:?}:\n{}",
            daemon.stderr()
        );
        assert_eq!(workers(daemon.pid()), expected, "{setting:?}");
    }
}

/// A daemon killed with SIGKILL cannot stop anything; its upstreams die with it anyway (the
/// parent-death signal), even one that ignores the end of its stdin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstreams_die_with_a_daemon_killed_outright() {
    let daemon = Daemon::start(&format!(
        "{}{}",
        test_upstream("stubborn", &["--ignore-stdin-eof"]),
        test_upstream("plain", &[])
    ));
    let client = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&client, |n| {
            n.iter().any(|t| t.starts_with("stubborn__"))
                && n.iter().any(|t| t.starts_with("plain__"))
        })
        .await;
    let children = descendants(daemon.pid());
    assert_eq!(children.len(), 2, "{children:?}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(daemon.pid()).unwrap()),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    assert_all_gone(&children, "after the daemon was killed with SIGKILL").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_mid_call_fails_that_call_only_and_the_upstream_comes_back() {
    let daemon = Daemon::start(&format!(
        "{}request_timeout = \"20s\"\n\n{}",
        test_upstream("mine", &[]),
        test_upstream("other", &[])
    ));
    let client = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&client, |n| {
            n.iter().any(|t| t == "mine__crash") && n.iter().any(|t| t == "other__echo")
        })
        .await;

    let started = Instant::now();
    let crashed = client
        .request(
            "tools/call",
            json!({"name": "mine__crash", "arguments": {}}),
        )
        .await;
    let took = started.elapsed();
    assert_upstream_error(&crashed, -32010, "mine");
    assert!(
        took < Duration::from_secs(20),
        "the error came after the request timeout: {took:?}"
    );
    assert!(
        took < Duration::from_secs(5),
        "the crash was noticed only after {took:?}"
    );

    // The other upstream never noticed.
    let other = client
        .result(
            "tools/call",
            json!({"name": "other__echo", "arguments": {}}),
        )
        .await;
    assert_eq!(other["structuredContent"]["upstream"], "other");

    // The crash is logged with its exit status, and `mine` is restarted.
    let logged_crash = poll_until(Duration::from_secs(10), || async {
        daemon.log_count(&["upstream=mine", "exited with status 3"]) > 0
    })
    .await;
    assert!(
        logged_crash,
        "the crash is not in the log:\n{}",
        daemon.stderr()
    );
    let back = poll_until(Duration::from_secs(20), || async {
        let answer = client
            .request("tools/call", json!({"name": "mine__echo", "arguments": {}}))
            .await;
        answer["result"]["structuredContent"]["upstream"] == "mine"
    })
    .await;
    assert!(back, "mine__echo never worked again:\n{}", daemon.stderr());
    let other = client
        .result(
            "tools/call",
            json!({"name": "other__echo", "arguments": {}}),
        )
        .await;
    assert_eq!(other["structuredContent"]["upstream"], "other");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_timeout_answers_an_error_and_cancels_the_call_upstream() {
    let record = tempfile::NamedTempFile::new().unwrap();
    let record_path = record.path().to_str().unwrap().to_owned();
    let daemon = Daemon::start(&format!(
        "{}request_timeout = \"500ms\"\n",
        test_upstream("slowpoke", &["--record", &record_path])
    ));
    let client = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&client, |n| n.iter().any(|t| t == "slowpoke__slow"))
        .await;

    let started = Instant::now();
    let answer = client
        .request(
            "tools/call",
            json!({"name": "slowpoke__slow", "arguments": {"ms": 5000}}),
        )
        .await;
    let took = started.elapsed();
    assert_upstream_error(&answer, -32001, "slowpoke");
    assert!(
        took >= Duration::from_millis(450) && took < Duration::from_millis(2500),
        "the timeout error came after {took:?}"
    );

    // The upstream was told to stop working on exactly that request.
    let received = || -> Vec<Value> {
        std::fs::read_to_string(record.path())
            .unwrap_or_default()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    };
    let slow_call = received()
        .into_iter()
        .find(|m| m["method"] == "tools/call" && m["params"]["name"] == "slow")
        .unwrap_or_else(|| panic!("the upstream never got the call: {:?}", received()));
    let cancelled = poll_until(Duration::from_secs(5), || async {
        received().iter().any(|m| {
            m["method"] == "notifications/cancelled"
                && m.get("id").is_none()
                && m["params"]["requestId"] == slow_call["id"]
        })
    })
    .await;
    assert!(
        cancelled,
        "no notifications/cancelled for request {}: {:?}",
        slow_call["id"],
        received()
    );

    // The upstream is still usable afterwards.
    let echoed = client
        .result(
            "tools/call",
            json!({"name": "slowpoke__echo", "arguments": {}}),
        )
        .await;
    assert_eq!(echoed["structuredContent"]["upstream"], "slowpoke");
}

/// Runs `mcpmux check --config <path>`; returns (success, stdout, stderr).
async fn check(path: &Path) -> (bool, String, String) {
    let run = tokio::process::Command::new(MCPMUX)
        .arg("check")
        .arg("--config")
        .arg(path)
        .env_remove("MCPMUX_CONFIG")
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(30), run)
        .await
        .expect("mcpmux check did not finish")
        .unwrap();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_prints_the_upstreams_of_a_valid_config_and_names_file_and_key_of_an_invalid_one() {
    let dir = tempfile::tempdir().unwrap();

    let valid = dir.path().join("valid.toml");
    std::fs::write(
        &valid,
        format!(
            "[server]\nlisten = \"127.0.0.1:7399\"\n\n{}{}[upstreams.ghost]\ncommand = \"/nonexistent/mcp-server\"\n",
            test_upstream("alpha", &[]),
            test_upstream("beta", &[])
        ),
    )
    .unwrap();
    let (ok, stdout, stderr) = check(&valid).await;
    assert!(ok, "check failed on a valid config:\n{stdout}\n{stderr}");
    assert!(
        stdout.contains("valid.toml") && stdout.contains("is valid"),
        "{stdout}"
    );
    let lines: Vec<&str> = stdout.lines().collect();
    let header = lines
        .iter()
        .find(|l| l.starts_with("UPSTREAM"))
        .unwrap_or_else(|| panic!("no table header:\n{stdout}"));
    for column in [
        "PREFIX",
        "ENABLED",
        "TRANSPORT",
        "PROGRAM",
        "TIMEOUT",
        "TARGET",
    ] {
        assert!(header.contains(column), "{header}");
    }
    let row = |name: &str| -> String {
        lines
            .iter()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no row for {name}:\n{stdout}"))
            .to_string()
    };
    for name in ["alpha", "beta"] {
        let row = row(name);
        assert!(
            row.contains("found") && !row.contains("NOT FOUND") && row.contains(TEST_UPSTREAM),
            "{row}"
        );
    }
    assert!(row("ghost").contains("NOT FOUND"), "{stdout}");

    // An upstream without a command.
    let no_command = dir.path().join("no-command.toml");
    std::fs::write(&no_command, "[upstreams.nocmd]\nargs = [\"x\"]\n").unwrap();
    let (ok, stdout, stderr) = check(&no_command).await;
    assert!(!ok, "check accepted an upstream without command:\n{stdout}");
    assert!(
        stderr.contains(&no_command.display().to_string())
            && stderr.contains("upstreams.nocmd.command"),
        "stderr does not name the file and the key: {stderr}"
    );

    // An unknown key (a typo).
    let typo = dir.path().join("typo.toml");
    std::fs::write(
        &typo,
        format!("[upstreams.typo]\ncomand = {}\n", toml_str(TEST_UPSTREAM)),
    )
    .unwrap();
    let (ok, stdout, stderr) = check(&typo).await;
    assert!(!ok, "check accepted an unknown key:\n{stdout}");
    assert!(
        stderr.contains(&typo.display().to_string()) && stderr.contains("comand"),
        "stderr does not name the file and the key: {stderr}"
    );

    // A file that does not exist.
    let (ok, _, stderr) = check(&dir.path().join("absent.toml")).await;
    assert!(!ok);
    assert!(stderr.contains("absent.toml"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_an_mcp_servers_json_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("claude_desktop_config.json");
    let file = json!({
        "mcpServers": {
            "My Server": {"command": TEST_UPSTREAM, "args": ["--name", "x"]}
        },
        "globalShortcut": "Ctrl+Space"
    });
    std::fs::write(&path, serde_json::to_string_pretty(&file).unwrap()).unwrap();
    let daemon = Daemon::start_file(dir, &path, &["--listen", "127.0.0.1:0"]);
    let (_client, echoed) = daemon.ready_client("my-server", json!({"k": "v"})).await;
    assert_eq!(echoed["upstream"], "x");
    assert_eq!(echoed["params"]["name"], "echo");
}
