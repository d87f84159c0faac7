//! The syncer thread: puts the blocks the writer wrote on disk (`fdatasync`), then indexes them
//! in sled, flushes sled for a `Sync` request, and applies retention.
//!
//! It is a thread of its own so that a slow disk never holds records in memory: an `fdatasync`
//! on a busy machine can take hundreds of milliseconds, and while the writer waited for one, the
//! records sealed meanwhile stayed in the process and a `kill -9` lost them. Now the writer only
//! writes (into the operating system's cache, where a crash of the process cannot reach them)
//! and hands what it wrote over.

use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender};
use std::time::{Duration, Instant};

use super::store::{Store, Written};

/// How often retention runs.
const RETENTION_EVERY: Duration = Duration::from_secs(60);

/// What the writer hands over when a sync is due: synced and indexed at once.
pub(super) struct Handoff {
    /// The blocks it wrote, in chain order.
    pub written: Vec<Written>,
    /// `Sync` requests answered once everything written before them is on disk and indexed.
    pub waiting: Vec<SyncSender<()>>,
}

/// The audit log's threads yield the CPU to request handling: on a small machine their work would
/// otherwise take a core from the gateway for a millisecond at a time (visible at p99). They run
/// at batch scheduling (a wake-up never preempts a request thread) and nice 10: a ninth of a
/// request thread's share of a contended CPU, ample for the microsecond a record costs. At nice
/// 19 (a seventieth) two CPU-bound neighbours kept the writer off the CPU for tens of
/// milliseconds, and a `kill -9` lost what it had not written by then. A daemon started at nice
/// 10 or lower is left as it is: this never raises a priority.
pub(super) fn background_priority() {
    use thread_priority::unix::{
        NormalThreadSchedulePolicy, ThreadSchedulePolicy, set_thread_priority_and_policy,
        thread_native_id,
    };
    use thread_priority::{ThreadPriority, ThreadPriorityValue};
    // A daemon started at nice 10 or lower keeps its priority: never raise it.
    if scheduling().is_some_and(|(nice, _)| nice >= 10) {
        return;
    }
    let policy = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Batch);
    let priority = ThreadPriorityValue::try_from(BACKGROUND)
        .map_or(ThreadPriority::Min, ThreadPriority::Crossplatform);
    if let Err(e) = set_thread_priority_and_policy(thread_native_id(), priority, policy) {
        tracing::debug!(error = ?e, "Could not lower the audit log's thread priority.");
    }
}

/// The calling thread's nice value and scheduling policy (`proc(5)`: fields 19 and 41 of its
/// `stat`, counted from 3 after the command's closing parenthesis).
fn scheduling() -> Option<(i32, u32)> {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    let fields: Vec<&str> = stat.get(stat.rfind(')')? + 2..)?.split(' ').collect();
    let nice = fields.get(19 - 3)?.parse().ok()?;
    let policy = fields.get(41 - 3)?.parse().ok()?;
    Some((nice, policy))
}

/// Nice 10 on the crate's 0–99 scale, which it maps onto nice 19 … -20 (checked by a test).
const BACKGROUND: u8 = 22;

pub(super) struct Syncer {
    pub store: Store,
    pub max_age: Option<Duration>,
    pub max_bytes: u64,
}

impl Syncer {
    /// Runs until the writer is gone, then syncs, indexes and flushes what it handed over last.
    pub fn run(self, rx: Receiver<Handoff>) {
        background_priority();
        let mut last_retention = Instant::now();
        let mut written: Vec<Written> = Vec::new();
        let mut waiting: Vec<SyncSender<()>> = Vec::new();
        loop {
            let wait = RETENTION_EVERY.saturating_sub(last_retention.elapsed());
            let (first, open) = match rx.recv_timeout(wait) {
                Ok(handoff) => (Some(handoff), true),
                Err(RecvTimeoutError::Timeout) => (None, true),
                Err(RecvTimeoutError::Disconnected) => (None, false),
            };
            let mut next = first;
            while let Some(handoff) = next.take() {
                written.extend(handoff.written);
                waiting.extend(handoff.waiting);
                next = rx.try_recv().ok();
            }
            if !written.is_empty() || !waiting.is_empty() || !open {
                self.sync(&mut written);
            }
            if !waiting.is_empty() || !open {
                if let Err(e) = self.store.flush() {
                    tracing::error!(error = %e, "Could not flush the audit store.");
                }
            }
            for tx in waiting.drain(..) {
                let _ = tx.send(());
            }
            if !open {
                break;
            }
            // Retention runs once a minute, and as soon as the store is over its size.
            let over = self.store.bytes() > self.max_bytes;
            if over || last_retention.elapsed() >= RETENTION_EVERY {
                last_retention = Instant::now();
                // Every block handed over is indexed by now; the segments the writer writes to
                // meanwhile are not retention's to delete (`Segments::remove_before`).
                self.retain();
            }
        }
    }

    /// Puts the written blocks on disk and indexes them.
    fn sync(&self, written: &mut Vec<Written>) {
        if let Err(e) = self.store.sync_and_index(written.drain(..)) {
            tracing::error!(error = %e, "Could not sync and index audit records.");
        }
    }

    fn retain(&self) {
        let min_ts = self.max_age.map_or(0, |age| {
            super::record::now_us()
                .saturating_sub(u64::try_from(age.as_micros()).unwrap_or(u64::MAX))
        });
        match self.store.prune(min_ts, self.max_bytes) {
            Ok(0) => {}
            Ok(n) => tracing::info!(removed = n, "Audit retention removed old records."),
            Err(e) => tracing::error!(error = %e, "Audit retention failed."),
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn the_audit_threads_run_at_nice_10_with_batch_scheduling_and_never_higher() {
        let (before, after) = std::thread::spawn(|| {
            let before = scheduling().unwrap();
            background_priority();
            (before, scheduling().unwrap())
        })
        .join()
        .unwrap();
        if before.0 < 10 {
            assert_eq!(after, (10, 3), "nice 10, SCHED_BATCH (3)");
        } else {
            assert_eq!(after, before, "started at a lower priority: left as it was");
        }
    }
}
