//! What a failed upstream comes to: a restart after an exponential backoff with jitter, or
//! `crash-loop` (catalog withdrawn, calls fail fast) once it fails more often than its restart
//! budget allows within the window. The policy is a pure function of the upstream's failure
//! [`History`], the time and its [`Policy`] ([`History::on_failure`], [`History::on_expiry`]);
//! [`on_failure`] carries the decision out (phase, log, audit, the delayed start).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use ractor::ActorRef;

use super::{Key, Slot, SupervisorMsg};
use crate::audit::{AuditHandle, Record};
use crate::config::Policy;
use crate::upstream::Phase;

/// What the supervisor remembers of one upstream's failures.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(super) struct History {
    /// Failures since it was last ready; drives the backoff.
    consecutive_failures: u32,
    /// When it was restarted within the budget window, oldest first.
    restarts: VecDeque<Instant>,
    /// How many times it had become ready at its last failure.
    ready_seen: u64,
}

/// What a failure comes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Decision {
    /// Start it again after `backoff` (before jitter); `attempt` counts failures since it last
    /// served.
    Restart { backoff: Duration, attempt: u32 },
    /// Over its budget: `restart_budget + 1` failures within `restart_window`. Not restarted
    /// until an operator does.
    CrashLoop { budget: u32, window: Duration },
}

impl History {
    /// Decides what a failure at `now` comes to, and remembers it. `times_ready` is how many
    /// times the upstream has become ready so far: a failure after serving starts the backoff
    /// over, one while starting continues it. A restart counts against the budget.
    pub(super) fn on_failure(
        &mut self,
        times_ready: u64,
        now: Instant,
        policy: &Policy,
    ) -> Decision {
        if times_ready > self.ready_seen {
            self.consecutive_failures = 0;
        }
        self.ready_seen = times_ready;
        self.consecutive_failures = self.consecutive_failures.saturating_add(1);
        self.forget_before(now, policy.restart_window);
        if self.restarts.len() >= policy.restart_budget as usize {
            return Decision::CrashLoop {
                budget: policy.restart_budget,
                window: policy.restart_window,
            };
        }
        self.restarts.push_back(now);
        Decision::Restart {
            backoff: backoff(
                self.consecutive_failures,
                policy.restart_initial_backoff,
                policy.restart_max_backoff,
            ),
            attempt: self.consecutive_failures,
        }
    }

    /// Whether an upstream whose HTTP session expired at `now` reconnects at once: yes within
    /// its restart budget (and it counts against it), no beyond — a server that forgets every
    /// session is failing, and [`Self::on_failure`] takes over.
    pub(super) fn on_expiry(&mut self, now: Instant, policy: &Policy) -> bool {
        self.forget_before(now, policy.restart_window);
        if self.restarts.len() < policy.restart_budget as usize {
            self.restarts.push_back(now);
            return true;
        }
        false
    }

    /// An operator restart: the backoff and the budget start over (and `crash-loop` ends).
    pub(super) fn reset(&mut self) {
        self.consecutive_failures = 0;
        self.restarts.clear();
    }

    /// Forgets the restarts older than `window` at `now`.
    fn forget_before(&mut self, now: Instant, window: Duration) {
        while (self.restarts.front()).is_some_and(|t| now.saturating_duration_since(*t) > window) {
            self.restarts.pop_front();
        }
    }
}

/// Records a failure and carries out what it comes to: a restart after the backoff (with
/// jitter), or `crash-loop` when over budget.
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
    let times_ready = slot.handle.status().times_ready;
    let policy = &slot.handle.config().policy;
    match slot.history.on_failure(times_ready, Instant::now(), policy) {
        Decision::CrashLoop { budget, window } => {
            let window = window.as_secs();
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
        }
        Decision::Restart { backoff, .. } => {
            let delay = jittered(backoff);
            slot.handle.count_restart();
            slot.handle.set_phase(Phase::Restarting, Some(why.clone()));
            tracing::warn!(upstream = %name, session, error = %why, retry_in_ms = delay.as_millis() as u64, "Upstream failed; it will be restarted.");
            let key = key.clone();
            myself.send_after(delay, move || SupervisorMsg::Start(key));
        }
    }
}

/// Exponential backoff from `initial` to `max`: `initial` after the first failure, doubling
/// with each one more.
fn backoff(failures: u32, initial: Duration, max: Duration) -> Duration {
    let exp = initial.saturating_mul(1 << failures.saturating_sub(1).min(16));
    exp.min(max)
}

/// `delay` within ±20%, so upstreams that failed together do not restart together.
fn jittered(delay: Duration) -> Duration {
    delay.mul_f64(rand::random_range(0.8..1.2))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(budget: u32, window_s: u64) -> Policy {
        Policy {
            restart_initial_backoff: Duration::from_secs(1),
            restart_max_backoff: Duration::from_secs(30),
            restart_budget: budget,
            restart_window: Duration::from_secs(window_s),
            ..Policy::default()
        }
    }

    fn secs(s: u64) -> Duration {
        Duration::from_secs(s)
    }

    fn restart(backoff: u64, attempt: u32) -> Decision {
        Decision::Restart {
            backoff: secs(backoff),
            attempt,
        }
    }

    #[test]
    fn backoff_doubles_from_initial_and_is_capped() {
        let (initial, max) = (secs(1), secs(30));
        assert_eq!(backoff(1, initial, max), secs(1));
        assert_eq!(backoff(2, initial, max), secs(2));
        assert_eq!(backoff(3, initial, max), secs(4));
        assert_eq!(backoff(6, initial, max), secs(30));
        assert_eq!(backoff(u32::MAX, initial, max), secs(30));
    }

    #[test]
    fn jitter_stays_within_a_fifth() {
        for _ in 0..100 {
            let d = jittered(secs(10));
            assert!(d >= secs(8) && d <= secs(12), "{d:?}");
        }
    }

    #[test]
    fn failures_while_starting_grow_the_backoff() {
        let (mut history, policy, t0) = (History::default(), policy(10, 60), Instant::now());
        assert_eq!(history.on_failure(0, t0, &policy), restart(1, 1));
        assert_eq!(history.on_failure(0, t0 + secs(1), &policy), restart(2, 2));
        assert_eq!(history.on_failure(0, t0 + secs(3), &policy), restart(4, 3));
    }

    #[test]
    fn a_failure_after_serving_starts_the_backoff_over() {
        let (mut history, policy, t0) = (History::default(), policy(10, 60), Instant::now());
        history.on_failure(0, t0, &policy);
        history.on_failure(0, t0 + secs(1), &policy);
        // It became ready once since.
        assert_eq!(history.on_failure(1, t0 + secs(5), &policy), restart(1, 1));
        // Failing again without serving continues from there.
        assert_eq!(history.on_failure(1, t0 + secs(6), &policy), restart(2, 2));
    }

    #[test]
    fn one_failure_more_than_the_budget_within_the_window_is_a_crash_loop() {
        let (mut history, policy, t0) = (History::default(), policy(3, 60), Instant::now());
        for i in 0..3_u64 {
            let decision = history.on_failure(i + 1, t0 + secs(i), &policy);
            assert!(matches!(decision, Decision::Restart { .. }), "{decision:?}");
        }
        assert_eq!(
            history.on_failure(4, t0 + secs(10), &policy),
            Decision::CrashLoop {
                budget: 3,
                window: secs(60)
            }
        );
    }

    #[test]
    fn restarts_older_than_the_window_no_longer_count() {
        let (mut history, policy, t0) = (History::default(), policy(2, 60), Instant::now());
        history.on_failure(1, t0, &policy);
        history.on_failure(2, t0 + secs(1), &policy);
        // Both restarts are over a minute old: the budget is whole again.
        let later = t0 + secs(62);
        assert!(matches!(
            history.on_failure(3, later, &policy),
            Decision::Restart { .. }
        ));
        // One of the budget of two is used (at `later`): one more, then a crash loop.
        assert!(matches!(
            history.on_failure(4, later + secs(1), &policy),
            Decision::Restart { .. }
        ));
        assert!(matches!(
            history.on_failure(5, later + secs(2), &policy),
            Decision::CrashLoop { .. }
        ));
    }

    #[test]
    fn a_budget_of_zero_crash_loops_at_the_first_failure() {
        let (mut history, policy) = (History::default(), policy(0, 60));
        assert!(matches!(
            history.on_failure(0, Instant::now(), &policy),
            Decision::CrashLoop { budget: 0, .. }
        ));
    }

    #[test]
    fn an_operator_restart_makes_the_budget_whole() {
        let (mut history, policy, t0) = (History::default(), policy(1, 60), Instant::now());
        history.on_failure(0, t0, &policy);
        assert!(matches!(
            history.on_failure(0, t0 + secs(1), &policy),
            Decision::CrashLoop { .. }
        ));
        history.reset();
        assert_eq!(history.on_failure(0, t0 + secs(2), &policy), restart(1, 1));
    }

    #[test]
    fn expired_sessions_reconnect_within_the_budget_only() {
        let (mut history, policy, t0) = (History::default(), policy(2, 60), Instant::now());
        assert!(history.on_expiry(t0, &policy));
        assert!(history.on_expiry(t0 + secs(1), &policy));
        assert!(!history.on_expiry(t0 + secs(2), &policy));
        // The reconnections used the budget: the failure that follows is a crash loop.
        assert!(matches!(
            history.on_failure(0, t0 + secs(2), &policy),
            Decision::CrashLoop { .. }
        ));
        // A minute later they no longer count.
        assert!(history.on_expiry(t0 + secs(62), &policy));
    }
}
