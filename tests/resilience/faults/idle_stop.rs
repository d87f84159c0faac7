//! Section 9, a faulty upstream that `idle_stop` stops it (catalog kept, a call starts it),
//! `lazy_start` waits for a session.

use std::time::{Duration, Instant};

use serde_json::json;

use super::{GOOD, assert_goods, faulty, goods, ready, timed_call, wait_status};
use crate::common::{Client, Daemon, alive, poll_until};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_upstreams_stop_and_start_on_demand_and_lazy_ones_wait_for_a_session() {
    let daemon = Daemon::start(&format!(
        "{}{}{}",
        goods(),
        faulty("idler", &[], &[("idle_stop", "\"300ms\"")]),
        faulty("lazy", &[], &[("lazy_start", "true")]),
    ));
    // No host session yet: the others start, the lazy one does not.
    for good in GOOD {
        wait_status(&daemon, good, Duration::from_secs(10), ready).await;
    }
    let status = daemon.upstream_status("lazy").await;
    assert_eq!(status["state"], "stopped", "{status}");
    assert!(status["pid"].is_null(), "{status}");

    let started = Instant::now();
    let client = Client::connect(&daemon.url).await;
    let (status, _) = wait_status(&daemon, "lazy", Duration::from_secs(10), ready).await;
    eprintln!(
        "lazy ready {:?} after the first initialize was sent: {status}",
        started.elapsed()
    );
    let tools = daemon
        .wait_for_tools(&client, |n| {
            n.iter().any(|t| t == "lazy__echo") && n.iter().any(|t| t == "idler__echo")
        })
        .await;
    assert_goods(&client, "before").await;
    let (answer, _) = timed_call(&client, "lazy__echo", json!({})).await;
    assert_eq!(answer["result"]["structuredContent"]["upstream"], "lazy");

    // Idle for 300 ms: stopped, its process gone, its tools still listed.
    let (status, took) = wait_status(&daemon, "idler", Duration::from_secs(10), |s| {
        s["state"] == "stopped"
    })
    .await;
    eprintln!("idler stopped (seen {took:?} after lazy was ready): {status}");
    let pid = u32::try_from(status["pid"].as_u64().expect("the stopped idler's pid")).unwrap();
    let gone = poll_until(Duration::from_secs(5), || async { !alive(pid) }).await;
    assert!(gone, "the idle upstream's process {pid} still runs");
    assert_eq!(
        daemon.wait_for_tools(&client, |_| true).await,
        tools,
        "the idle upstream's tools must stay listed"
    );
    assert_goods(&client, "during").await;

    // A call starts it again.
    let (answer, took) = timed_call(&client, "idler__echo", json!({"wake": true})).await;
    eprintln!("idler answered its waking call after {took:?}");
    assert_eq!(
        answer["result"]["structuredContent"]["upstream"], "idler",
        "{answer}"
    );
    let status = daemon.upstream_status("idler").await;
    assert_ne!(
        status["pid"],
        json!(pid),
        "a new process answered: {status}"
    );
    assert_goods(&client, "after").await;
}
