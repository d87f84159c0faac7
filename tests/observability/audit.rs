//! The audit log, end to end, on the real daemon with real test upstreams:
//!
//! 1. every call of an integration run is recorded exactly once, with its fields (upstream, target,
//!    outcome, error code, latency, sizes, the host's trace id, arguments per the redaction policy of
//!    the upstream or tool, secrets masked), through the admin API and `mcpmux audit query`; the
//!    lifecycle events are there too;
//! 2. every filter returns exactly the records that match it;
//! 3. pages (admin cursors, CLI `--limit`/`--cursor`/`--all`) cover the log once, in order; CSV and
//!    table output print every record;
//! 4. `mcpmux audit verify` on the stopped store names the edited, missing, moved or truncated
//!    record, and an untouched store verifies (directly and through the admin API);
//! 5. `kill -9` under load: after a restart on the same store the chain verifies and every call that
//!    completed 100 ms before the kill is there;
//! 6. with the daemon stopped, `mcpmux audit query --state-dir` reads what the admin API served;
//! 7. CSV exports (CLI and console) neutralize host-chosen text a spreadsheet would evaluate.
//!
//! The workload (`workload`), reading the log (`reading`) and the checks
//! (`checks`) as helper modules, then a module per test: 1. `every_call`, 2 and 3.
//! `filters_and_pages`, 4 and 6. `stopped_store`, 5. `kill_under_load`, 7. `export`.

mod checks;
mod every_call;
mod export;
mod filters_and_pages;
mod kill_under_load;
mod reading;
mod stopped_store;
mod workload;

use crate::common::test_upstream;

/// The secret the workload sends in arguments; it must never reach the store.
const SECRET: &str = "hunter2-do-not-store";

/// `alpha`: the global redaction (digest); `beta`: none; `gamma`: full, but none for its `echo`.
fn three_upstreams() -> String {
    format!(
        "{}\n{}audit_redaction = \"none\"\n\n{}audit_redaction = \"full\"\naudit_redaction_tools = {{ echo = \"none\" }}\n",
        test_upstream("alpha", &[]),
        test_upstream("beta", &[]),
        test_upstream("gamma", &[]),
    )
}
