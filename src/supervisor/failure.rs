//! What a failed upstream comes to: a restart after an exponential backoff with jitter, or
//! `crash-loop` (catalog withdrawn, calls fail fast) once it fails more often than its restart
//! budget allows within the window.

use std::time::{Duration, Instant};

use ractor::ActorRef;

use super::{Key, Slot, SupervisorMsg};
use crate::audit::{AuditHandle, Record};
use crate::upstream::Phase;

/// Records a failure: restart after the backoff, or enter `crash-loop` when over budget.
pub(super) fn on_failure(
    myself: &ActorRef<SupervisorMsg>,
    key: &Key,
    slot: &mut Slot,
    audit: &AuditHandle,
    why: String,
) {
    let name = &key.upstream;
    let session = key.session.as_deref();
    audit.record(Record::event(
        "upstream.crashed",
        Some(name),
        session,
        Some(why.clone()),
    ));
    let policy = &slot.handle.config().policy;
    // A failure after serving starts the backoff over; one while starting continues it.
    let times_ready = slot.handle.status().times_ready;
    if times_ready > slot.ready_seen {
        slot.consecutive_failures = 0;
    }
    slot.ready_seen = times_ready;
    slot.consecutive_failures += 1;
    let now = Instant::now();
    while slot
        .restarts
        .front()
        .is_some_and(|t| now.duration_since(*t) > policy.restart_window)
    {
        slot.restarts.pop_front();
    }
    if slot.restarts.len() >= policy.restart_budget as usize {
        let window = policy.restart_window.as_secs();
        let budget = policy.restart_budget;
        tracing::error!(upstream = %name, session, error = %why, budget, window_s = window, "Upstream is in a crash loop; not restarting it until an operator does (mcpmux restart NAME).");
        // Withdrawn first, so no one sees `crash-loop` with the catalog still listed.
        slot.handle.withdraw_catalog();
        slot.handle.set_phase(
            Phase::CrashLoop,
            Some(format!(
                "{why} (failed {} times within {window}s)",
                budget + 1
            )),
        );
        audit.record(Record::event(
            "upstream.crash_loop",
            Some(name),
            session,
            None,
        ));
        return;
    }
    slot.restarts.push_back(now);
    let delay = backoff(
        slot.consecutive_failures,
        policy.restart_initial_backoff,
        policy.restart_max_backoff,
    );
    slot.handle.count_restart();
    slot.handle.set_phase(Phase::Restarting, Some(why.clone()));
    tracing::warn!(upstream = %name, session, error = %why, retry_in_ms = delay.as_millis() as u64, "Upstream failed; it will be restarted.");
    let key = key.clone();
    myself.send_after(delay, move || SupervisorMsg::Start(key));
}

/// Exponential backoff from `initial` to `max`, with ±20% jitter.
fn backoff(failures: u32, initial: Duration, max: Duration) -> Duration {
    let exp = initial.saturating_mul(1 << failures.saturating_sub(1).min(16));
    exp.min(max).mul_f64(rand::random_range(0.8..1.2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        let (initial, max) = (Duration::from_secs(1), Duration::from_secs(30));
        let first = backoff(1, initial, max);
        assert!(first >= Duration::from_millis(800) && first <= Duration::from_millis(1200));
        assert!(backoff(3, initial, max) >= Duration::from_millis(3200));
        assert!(backoff(50, initial, max) <= max.mul_f64(1.2));
    }
}
