//! Section 1, every call of an integration run is recorded exactly once, with its fields (upstream,
//! target, outcome, error code, latency, sizes, the host's trace id, arguments per the redaction
//! policy of the upstream or tool, secrets masked), through the admin API and `mcpmux audit query`;
//! the lifecycle events are there too.

use super::checks::{assert_calls, assert_events, assert_whole_log};
use super::reading::{admin_all, cli_all};
use super::three_upstreams;
use super::workload::run_workload;
use crate::common::Daemon;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_is_recorded_once_with_its_fields() {
    let daemon = Daemon::start(&three_upstreams());
    let admin = daemon.admin();
    let w = run_workload(&daemon.url).await;

    let all = admin_all(&admin, &[]).await;
    let cli = cli_all(&admin, &[]).await;
    assert_eq!(cli, all, "the CLI's JSON differs from the admin API's");
    assert_whole_log(&all);
    assert_events(&all, &w);
    assert_calls(&all, &w, "admin API (and the CLI, identical)");
}
