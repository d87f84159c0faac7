//! Reload faults found while verifying: a config saved while files beside it change all the
//! time (the daemon's own log, a state directory) is still applied, and so is a file written
//! again and again; a reload whose drain ends with calls still in flight says so — in
//! `mcpmux reload` (exit 1), in status and in the `config.reloaded` record.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::common::{Client, Daemon, MCPMUX, poll_until, test_upstream};
use serde_json::{Value, json};

fn config(upstreams: &[String], server: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n{server}\n\n{}",
        upstreams.concat()
    )
}

/// Saves `text` as editors do: written to a temporary file beside `path`, then renamed over it.
fn save(path: &Path, text: &str) {
    let tmp = path.with_extension("toml.swp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// Writes `write` every `every` on a thread until the flag it returns is set.
fn keep_writing(every: Duration, write: impl Fn(u64) + Send + 'static) -> Arc<AtomicBool> {
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = Arc::clone(&stop);
    std::thread::spawn(move || {
        let mut n = 0;
        while !stopped.load(Ordering::Relaxed) {
            write(n);
            n += 1;
            std::thread::sleep(every);
        }
    });
    stop
}

async fn tool_names(host: &Client) -> Vec<String> {
    (host.list_all("tools/list", "tools").await.iter())
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect()
}

/// A daemon running upstream `first` from a config in its own directory, and a host of it.
async fn first_only() -> (Daemon, Client, String) {
    let first = test_upstream("first", &[]);
    let daemon = Daemon::start_with(&config(std::slice::from_ref(&first), ""), &[]);
    let host = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&host, |n| n.iter().any(|t| t == "first__echo"))
        .await;
    (daemon, host, first)
}

/// Whether upstream `second` joins the catalog while `churn` keeps writing (then stopped).
async fn second_arrives(daemon: &Daemon, host: &Client, churn: Arc<AtomicBool>) -> bool {
    let applied = poll_until(Duration::from_secs(30), || async {
        tool_names(host).await.iter().any(|t| t == "second__echo")
    })
    .await;
    churn.store(true, Ordering::Relaxed);
    if !applied {
        eprintln!("config status: {}", daemon.status().await["config"]);
    }
    applied
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_saved_while_files_beside_it_change_all_the_time_is_applied() {
    let (daemon, host, first) = first_only().await;
    let path = daemon.dir.path().join("mcpmux.toml");
    // A log beside the config, written every 50 ms (under the 300 ms debounce).
    let log = daemon.dir.path().join("beside.log");
    let churn = keep_writing(Duration::from_millis(50), move |n| {
        let _ = std::fs::write(&log, format!("line {n}\n"));
    });
    save(&path, &config(&[first, test_upstream("second", &[])], ""));
    assert!(
        second_arrives(&daemon, &host, churn).await,
        "the saved config was never applied while a file beside it changed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_written_again_and_again_is_still_applied() {
    let (daemon, host, first) = first_only().await;
    let path = daemon.dir.path().join("mcpmux.toml");
    // A generator rewrites the file every 100 ms (the same config, a changing comment), for
    // longer than the test waits.
    let text = config(&[first, test_upstream("second", &[])], "");
    let churn = keep_writing(Duration::from_millis(100), move |n| {
        let _ = std::fs::write(&path, format!("{text}\n# generation {n}\n"));
    });
    assert!(
        second_arrives(&daemon, &host, churn).await,
        "a config rewritten every 100 ms was never applied"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_that_times_out_is_reported_not_dropped() {
    let server = "drain_timeout = \"3s\"";
    let (stays, leaves) = (test_upstream("stays", &[]), test_upstream("leaves", &[]));
    let daemon = Daemon::start_with(&config(&[stays.clone(), leaves], server), &[]);
    let path = daemon.dir.path().join("mcpmux.toml");
    let host = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&host, |n| n.iter().any(|t| t == "leaves__slow"))
        .await;
    // A call that outlives the drain.
    let slow = host.start_tool("leaves__slow", json!({"ms": 60_000}));
    assert!(
        poll_until(Duration::from_secs(30), || async {
            daemon.upstream_status("leaves").await["in_flight"] == 1
        })
        .await,
        "the slow call never reached the upstream"
    );

    // Removed; `mcpmux reload` runs at once (the watcher may start the same reload first: the
    // command then answers how that one went).
    save(&path, &config(&[stays], server));
    let admin = daemon.admin_url.clone().unwrap();
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(MCPMUX)
            .args(["reload", "--admin", &admin])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "a reload whose drain timed out exited {:?}: {stdout}{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("NOT FINISHED") && stdout.contains("`leaves`"),
        "{stdout}"
    );
    assert!(stdout.contains("server.drain_timeout"), "{stdout}");

    let status: Value = daemon.status().await;
    let incomplete = &status["config"]["last_reload"]["changes"]["incomplete"];
    assert!(
        incomplete[0]
            .as_str()
            .is_some_and(|s| s.contains("`leaves`")),
        "status does not show the unfinished drain: {}",
        status["config"]
    );
    let audited = daemon.audit_json();
    let record = audited
        .lines()
        .find(|l| l.contains("config.reloaded"))
        .unwrap_or_default();
    assert!(
        record.contains("incomplete") && record.contains("leaves"),
        "the config.reloaded record does not say the drain timed out: {record}"
    );
    // The call that was cut off got an answer, not a hang.
    let (_, answer) = slow.finish().await;
    assert!(answer.get("error").is_some(), "{answer}");
}
