//! The circuit breaker of one remote link: it tells a server that is down from one request that
//! failed. Failed requests in a row are counted with when each failed; a success clears them;
//! `breaker_failures` of them within `breaker_window` trip it, and the link ends.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::Limits;
use crate::sync::lock;

/// The circuit breaker of one link: failed requests in a row, and when each failed. A success
/// clears them; [`Limits::breaker_failures`] of them within [`Limits::breaker_window`] trip it.
pub(super) struct Breaker {
    pub failures: usize,
    pub within: Duration,
    /// Whether `recent` holds failures, so a success costs one load while none do.
    armed: AtomicBool,
    recent: Mutex<VecDeque<Instant>>,
}

impl Breaker {
    pub(super) fn new(limits: &Limits) -> Self {
        Self {
            failures: limits.breaker_failures.max(1) as usize,
            within: limits.breaker_window,
            armed: AtomicBool::new(false),
            recent: Mutex::new(VecDeque::new()),
        }
    }

    /// A request succeeded: the failures before it were not in a row with later ones.
    pub(super) fn success(&self) {
        if self.armed.load(Ordering::Relaxed) {
            self.armed.store(false, Ordering::Relaxed);
            lock(&self.recent).clear();
        }
    }

    /// A request failed; whether that trips the breaker. Failures older than the window no
    /// longer count.
    pub(super) fn failure(&self) -> bool {
        self.failure_at(Instant::now())
    }

    fn failure_at(&self, now: Instant) -> bool {
        let mut recent = lock(&self.recent);
        while recent
            .front()
            .is_some_and(|at| now.duration_since(*at) > self.within)
        {
            recent.pop_front();
        }
        recent.push_back(now);
        self.armed.store(true, Ordering::Relaxed);
        recent.len() >= self.failures
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breaker(failures: u32, window: Duration) -> Breaker {
        Breaker::new(&Limits {
            max_message_bytes: 1024,
            notification: Duration::from_secs(1),
            request: Duration::from_secs(1),
            open: Duration::from_secs(1),
            breaker_failures: failures,
            breaker_window: window,
        })
    }

    #[test]
    fn the_breaker_trips_at_its_count_of_failures_in_a_row_only() {
        let b = breaker(3, Duration::from_secs(60));
        assert!(!b.failure());
        assert!(!b.failure());
        b.success();
        assert!(!b.failure());
        assert!(!b.failure());
        assert!(b.failure(), "three in a row trip it");
        assert!(breaker(1, Duration::from_secs(60)).failure());
    }

    #[test]
    fn failures_older_than_the_window_do_not_count() {
        let b = breaker(2, Duration::from_secs(30));
        let start = Instant::now();
        assert!(!b.failure_at(start));
        let later = start + Duration::from_secs(31);
        assert!(
            !b.failure_at(later),
            "the first failure is outside the window"
        );
        assert!(b.failure_at(later + Duration::from_secs(29)));
    }
}
