//! Section 10, a faulty upstream that SIGTERM with calls in flight → they complete, then no
//! upstream process is left.

use std::time::{Duration, Instant};

use serde_json::json;

use super::{assert_text, start, wait_status};
use crate::common::{assert_all_gone, comm, descendants, test_upstream};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_calls_in_flight_finish_and_leaves_no_process_behind() {
    let (mut daemon, client) = start(
        &test_upstream("parent", &["--spawn-grandchild"]),
        &["parent__slow"],
    )
    .await;
    let procs = descendants(daemon.pid());
    let named: Vec<(u32, String)> = procs.iter().map(|&p| (p, comm(p))).collect();
    assert!(
        named.iter().any(|(_, c)| c == "sleep"),
        "the grandchild `sleep` is not among the daemon's descendants: {named:?}"
    );

    let upstreams = ["parent", "good1", "good2"];
    let calls: Vec<_> = upstreams
        .iter()
        .map(|u| client.start_tool(&format!("{u}__slow"), json!({"ms": 1000})))
        .collect();
    for name in upstreams {
        wait_status(&daemon, name, Duration::from_secs(5), |s| {
            s["in_flight"] == 1
        })
        .await;
    }
    let terminated = Instant::now();
    daemon.terminate();
    for call in calls {
        let (_, answer) = call.finish().await;
        assert_text(&answer, "slept 1000ms");
    }
    eprintln!(
        "calls in flight completed {:?} after SIGTERM",
        terminated.elapsed()
    );
    let exit = daemon.wait_exit(Duration::from_secs(30)).await;
    eprintln!("daemon exited {:?} after SIGTERM", terminated.elapsed());
    assert!(
        exit.is_some_and(|s| s.success()),
        "the daemon did not exit cleanly ({exit:?}):\n{}",
        daemon.stderr()
    );
    assert_all_gone(&procs, "after SIGTERM").await;
}
