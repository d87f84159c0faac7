//! The audit writer. [`AuditHandle::record`] redacts and encodes a record on the calling thread
//! and gives it its place in the hash chain (a short critical section: a sequence number, one
//! SHA-256 over the line), then passes it over a bounded channel; it never blocks a call: when the
//! channel is full the record is dropped and counted (reported in status and logs), and the chain
//! goes on without it.
//!
//! The writer thread owns the store. It collects records for [`BATCH_WINDOW`] and writes them to
//! the current segment as one block (from then on a crash of the process cannot lose them), and at
//! most [`SYNC_EVERY`] later syncs the segment and indexes the blocks in sled (from then on a
//! power loss cannot lose them, and queries see them). `durability = "record"` writes, syncs and
//! indexes each record at once. It also applies retention. File and sled calls block, so the
//! writer is a thread of its own rather than a task on the runtime.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, SyncSender};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::record::{Body, Record, Redactor, Sealed, now_us};
use super::store::{Head, Store, StoreError, Written};
use crate::config::{AuditConfig, Durability};

/// Records a batch holds at most.
const MAX_BATCH: usize = 4096;
/// Room for records kept between batches.
const KEPT_BATCH: usize = 1024;
/// How long the writer waits for more records before writing what it has to its segment (from
/// then on a crash of the process cannot lose them).
const BATCH_WINDOW: Duration = Duration::from_millis(5);
/// How long written records wait at most to be synced to disk and indexed (an `fdatasync` costs
/// more CPU than writing a few hundred records, so it is shared by several batches).
const SYNC_EVERY: Duration = Duration::from_millis(50);
/// How often retention runs.
const RETENTION_EVERY: Duration = Duration::from_secs(60);

enum Msg {
    /// By value: the channel's blocks hold 31 messages each, one allocation where boxing would
    /// make one per record (freed by the writer, on another thread's arena).
    Record(Sealed),
    /// Commit and flush everything received so far, then answer.
    Sync(SyncSender<()>),
}

struct Shared {
    /// An unbounded channel bounded by `queued`: its memory follows the records actually waiting
    /// (a bounded one keeps a slot per record it could hold — 1.5 MiB at the default 65 536 —
    /// resident once the ring has gone round).
    tx: Sender<Msg>,
    /// Records sent and not yet taken by the writer; at most `capacity`.
    queued: Arc<AtomicUsize>,
    capacity: usize,
    /// Where the chain goes on: the last record handed to the writer.
    chain: Mutex<Head>,
    redactor: Redactor,
    dropped: AtomicU64,
    written: AtomicU64,
    thread: Mutex<Option<JoinHandle<()>>>,
    store: Store,
}

/// Where records are sent; cheap to clone. A disabled handle records nothing.
#[derive(Clone, Default)]
pub struct AuditHandle {
    shared: Option<Arc<Shared>>,
}

impl std::fmt::Debug for AuditHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditHandle")
            .field("enabled", &self.shared.is_some())
            .finish()
    }
}

impl AuditHandle {
    /// A handle that records nothing (audit turned off).
    pub fn disabled() -> Self {
        Self { shared: None }
    }

    /// Opens the store and starts the writer thread.
    pub fn start(store: Store, config: &AuditConfig) -> Result<Self, StoreError> {
        let head = store.head()?;
        let (tx, rx) = std::sync::mpsc::channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let writer = Writer {
            queued: Arc::clone(&queued),
            store: store.clone(),
            durability: config.durability,
            max_age: config.max_age,
            max_bytes: config.max_bytes,
        };
        let thread = std::thread::Builder::new()
            .name("mcpmux-audit".into())
            .spawn(move || writer.run(rx))
            .map_err(|source| StoreError::Io {
                context: "cannot start the writer thread",
                source,
            })?;
        let shared = Shared {
            tx,
            queued,
            capacity: config.queue,
            chain: Mutex::new(head),
            redactor: Redactor::new(&config.secret_keys),
            dropped: AtomicU64::new(0),
            written: AtomicU64::new(0),
            thread: Mutex::new(Some(thread)),
            store,
        };
        Ok(Self {
            shared: Some(Arc::new(shared)),
        })
    }

    pub fn is_enabled(&self) -> bool {
        self.shared.is_some()
    }

    /// Redacts, encodes and chains a record and queues it; never waits. A full queue drops it
    /// and counts the drop.
    pub fn record(&self, mut record: Record) {
        let Some(shared) = &self.shared else { return };
        if let Some((raw, mode)) = record.raw_args.take() {
            record.args = shared.redactor.apply(Some(&raw), mode);
        }
        if shared.queued.fetch_add(1, Ordering::Relaxed) >= shared.capacity {
            shared.queued.fetch_sub(1, Ordering::Relaxed);
            let dropped = shared.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            if dropped.is_power_of_two() {
                tracing::warn!(
                    dropped,
                    "Audit queue full: records were dropped (the writer cannot keep up)."
                );
            }
            return;
        }
        let body = Body::of(record);
        let mut head = shared.chain.lock().unwrap_or_else(PoisonError::into_inner);
        let sealed = Sealed::chain(body, head.next_seq, &head.last_hash, head.last_ts);
        // The chain moves on in place (no allocation) once the record is queued.
        let link = sealed.link();
        if shared.tx.send(Msg::Record(sealed)).is_ok() {
            head.follow(&link);
            drop(head);
            shared.written.fetch_add(1, Ordering::Relaxed);
        } else {
            drop(head);
            shared.queued.fetch_sub(1, Ordering::Relaxed);
            shared.dropped.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Records dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.shared
            .as_ref()
            .map_or(0, |s| s.dropped.load(Ordering::Relaxed))
    }

    /// Records queued since start.
    pub fn queued(&self) -> u64 {
        self.shared
            .as_ref()
            .map_or(0, |s| s.written.load(Ordering::Relaxed))
    }

    /// The store, for queries (sled reads run concurrently with the writer).
    pub fn store(&self) -> Option<&Store> {
        self.shared.as_ref().map(|s| &s.store)
    }

    /// Waits until everything queued so far is committed and flushed (at most `deadline`).
    pub fn sync(&self, deadline: Duration) -> bool {
        let Some(shared) = &self.shared else {
            return true;
        };
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        if shared.tx.send(Msg::Sync(tx)).is_err() {
            return false;
        }
        rx.recv_timeout(deadline).is_ok()
    }

    /// Commits what is queued, flushes, and stops the writer (daemon shutdown).
    pub fn close(&self, deadline: Duration) {
        let Some(shared) = &self.shared else { return };
        self.sync(deadline);
        if let Some(thread) = shared.thread.lock().ok().and_then(|mut t| t.take()) {
            drop(thread);
        }
    }
}

/// The writer yields the CPU to request handling: on a small machine its batch commits would
/// otherwise take a core from the gateway for a millisecond at a time (visible at p99). It runs at
/// the lowest normal priority (nice 19, batch scheduling); the queue absorbs bursts meanwhile.
pub(super) fn background_priority() {
    use thread_priority::unix::{
        NormalThreadSchedulePolicy, ThreadSchedulePolicy, set_thread_priority_and_policy,
        thread_native_id,
    };
    let policy = ThreadSchedulePolicy::Normal(NormalThreadSchedulePolicy::Batch);
    if let Err(e) = set_thread_priority_and_policy(
        thread_native_id(),
        thread_priority::ThreadPriority::Min,
        policy,
    ) {
        tracing::debug!(error = ?e, "Could not lower the audit writer's priority.");
    }
}

struct Writer {
    /// [`Shared::queued`]: the writer takes off what it received.
    queued: Arc<AtomicUsize>,
    store: Store,
    durability: Durability,
    max_age: Option<Duration>,
    max_bytes: u64,
}

impl Writer {
    /// Waits for a record, then lets the batch window pass before taking everything queued:
    /// senders never wake the writer more than once per window, so a busy gateway pays no
    /// thread wake-up per record. A `Sync` request ends the window at once.
    fn run(mut self, rx: Receiver<Msg>) {
        background_priority();
        let mut last_retention = Instant::now();
        let mut batch: Vec<Sealed> = Vec::new();
        let mut waiting: Vec<SyncSender<()>> = Vec::new();
        let mut written: Vec<Written> = Vec::new();
        let mut sync_due: Option<Instant> = None;
        loop {
            let wait = sync_due.map_or(RETENTION_EVERY, |due| {
                due.saturating_duration_since(Instant::now())
            });
            let (first, open) = match rx.recv_timeout(wait) {
                Ok(msg) => (Some(msg), true),
                Err(RecvTimeoutError::Timeout) => (None, true),
                Err(RecvTimeoutError::Disconnected) => (None, false),
            };
            if matches!(first, Some(Msg::Record(_))) {
                std::thread::sleep(BATCH_WINDOW);
            }
            let mut next = first;
            let mut taken = 0;
            while let Some(msg) = next.take() {
                match msg {
                    Msg::Record(r) => {
                        batch.push(r);
                        taken += 1;
                    }
                    Msg::Sync(tx) => waiting.push(tx),
                }
                if batch.len() >= MAX_BATCH {
                    self.queued
                        .fetch_sub(std::mem::take(&mut taken), Ordering::Relaxed);
                    self.write(&mut batch, &mut written);
                }
                next = rx.try_recv().ok();
            }
            self.queued.fetch_sub(taken, Ordering::Relaxed);
            self.write(&mut batch, &mut written);
            if written.is_empty() {
                sync_due = None;
            } else if sync_due.is_none() {
                sync_due = Some(Instant::now() + SYNC_EVERY);
            }
            let due = sync_due.is_some_and(|d| Instant::now() >= d);
            if due || !waiting.is_empty() || !open {
                self.sync(&mut written);
                sync_due = None;
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
            if last_retention.elapsed() >= RETENTION_EVERY {
                last_retention = Instant::now();
                // Retention sees every block written: none is left unindexed in a segment it
                // could delete.
                self.sync(&mut written);
                sync_due = None;
                self.retain();
            }
        }
    }

    /// Writes the batch to its segment (`durability = "record"`: and syncs and indexes each
    /// record at once).
    fn write(&mut self, batch: &mut Vec<Sealed>, written: &mut Vec<Written>) {
        let outcome = match self.durability {
            Durability::Batch => self.store.write(batch).map(|block| written.extend(block)),
            Durability::Record => batch
                .chunks(1)
                .try_for_each(|r| self.store.append_sealed(r)),
        };
        // The batch's memory is kept for the next one, up to a busy load's batch.
        batch.clear();
        batch.shrink_to(KEPT_BATCH);
        if let Err(e) = outcome {
            tracing::error!(error = %e, "Could not write audit records.");
        }
    }

    /// Puts the written blocks on disk and indexes them.
    fn sync(&mut self, written: &mut Vec<Written>) {
        if let Err(e) = self.store.sync_and_index(written.drain(..)) {
            tracing::error!(error = %e, "Could not sync and index audit records.");
        }
    }

    fn retain(&self) {
        let min_ts = self.max_age.map_or(0, |age| {
            now_us().saturating_sub(u64::try_from(age.as_micros()).unwrap_or(u64::MAX))
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
    use crate::audit::{Filter, Kind, Outcome};
    use crate::config::{AuditConfig, SecretKeys};

    fn handle(dir: &tempfile::TempDir, queue: usize) -> AuditHandle {
        let keys = SecretKeys::defaults().unwrap();
        let mut config = AuditConfig::new(dir.path().join("audit"), keys);
        config.queue = queue;
        let store = Store::open(&config.dir).unwrap();
        AuditHandle::start(store, &config).unwrap()
    }

    fn call() -> Record {
        Record::new(Kind::Request, "tools/call", Outcome::Ok)
    }

    #[test]
    fn a_full_queue_drops_and_counts_records_and_seals_none_of_them() {
        let dir = tempfile::tempdir().unwrap();
        let full = handle(&dir, 0);
        for _ in 0..5 {
            full.record(call());
        }
        assert_eq!((full.dropped(), full.queued()), (5, 0));
        assert!(full.sync(Duration::from_secs(10)));
        let page = full.store().unwrap().query(&Filter::default()).unwrap();
        assert!(page.records.is_empty(), "{:?}", page.records);
    }

    #[test]
    fn every_queued_record_is_written_and_the_queue_is_empty_after() {
        let dir = tempfile::tempdir().unwrap();
        let audit = handle(&dir, 1_000);
        for _ in 0..500 {
            audit.record(call());
        }
        assert!(audit.sync(Duration::from_secs(10)));
        assert_eq!((audit.dropped(), audit.queued()), (0, 500));
        let filter = Filter {
            limit: Some(1_000),
            ..Filter::default()
        };
        let page = audit.store().unwrap().query(&filter).unwrap();
        let seqs: Vec<u64> = page.records.iter().map(|r| r.seq).collect();
        assert_eq!(seqs, (seqs[0]..seqs[0] + 500).collect::<Vec<_>>());
        let waiting = audit
            .shared
            .as_ref()
            .unwrap()
            .queued
            .load(Ordering::Relaxed);
        assert_eq!(waiting, 0, "what the writer took is off the count");
    }
}
