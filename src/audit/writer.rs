//! The audit writer: a thread that owns appending to the store. [`AuditHandle::record`] redacts
//! and encodes a record on the calling thread, gives it its place in the hash chain (a short
//! critical section: a sequence number, one SHA-256 over the line) and passes it over a bounded
//! channel; it never blocks a call: when the channel is full the record is dropped and counted
//! (reported in status and logs), and the chain goes on without it. Sealing on the caller is
//! measured to be the cheap place for this work: the same CPU spent on a background thread delays
//! request handling on a busy small machine far more than it costs in line. The writer commits in batches —
//! with the default durability a batch is on disk before the next one starts; with `record`, each
//! record — and applies retention. File and sled calls block, so the writer is a thread of its own
//! rather than a task on the runtime.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::record::{Body, Record, Redactor, Sealed, now_us};
use super::store::{Head, Store, StoreError};
use super::{AuditConfig, Durability};

/// Records a batch holds at most.
const MAX_BATCH: usize = 4096;
/// How long the writer waits for more records before committing what it has.
const BATCH_WINDOW: Duration = Duration::from_millis(5);
/// How often retention runs.
const RETENTION_EVERY: Duration = Duration::from_secs(60);

enum Msg {
    Record(Box<Sealed>),
    /// Commit and flush everything received so far, then answer.
    Sync(SyncSender<()>),
}

struct Shared {
    tx: SyncSender<Msg>,
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
        let (tx, rx) = std::sync::mpsc::sync_channel(config.queue);
        let writer = Writer {
            store: store.clone(),
            durability: config.durability,
            max_age: config.max_age,
            max_bytes: config.max_bytes,
        };
        let thread = std::thread::Builder::new()
            .name("mcpmux-audit".into())
            .spawn(move || writer.run(rx))
            .map_err(|e| StoreError::Sled(sled::Error::Io(e)))?;
        let shared = Shared {
            tx,
            chain: Mutex::new(head),
            redactor: Redactor::new(&config.secret_keys)?,
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
        let body = Body::of(record);
        let mut head = shared.chain.lock().unwrap_or_else(PoisonError::into_inner);
        let sealed = Sealed::chain(body, head.next_seq, &head.last_hash, head.last_ts);
        let next = Head::after(&sealed);
        match shared.tx.try_send(Msg::Record(Box::new(sealed))) {
            Ok(()) => {
                *head = next;
                drop(head);
                shared.written.fetch_add(1, Ordering::Relaxed);
            }
            Err(TrySendError::Full(_)) => {
                drop(head);
                let dropped = shared.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                if dropped.is_power_of_two() {
                    tracing::warn!(
                        dropped,
                        "Audit queue full: records were dropped (the writer cannot keep up)."
                    );
                }
            }
            Err(TrySendError::Disconnected(_)) => {
                shared.dropped.fetch_add(1, Ordering::Relaxed);
            }
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
        loop {
            let first = match rx.recv_timeout(RETENTION_EVERY) {
                Ok(msg) => Some(msg),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => break,
            };
            let is_sync = matches!(first, Some(Msg::Sync(_)));
            if first.is_some() && !is_sync {
                std::thread::sleep(BATCH_WINDOW);
            }
            let mut next = first;
            while let Some(msg) = next.take() {
                match msg {
                    Msg::Record(r) => batch.push(*r),
                    Msg::Sync(tx) => waiting.push(tx),
                }
                if batch.len() >= MAX_BATCH {
                    self.commit(&mut batch);
                }
                next = rx.try_recv().ok();
            }
            self.commit(&mut batch);
            if !waiting.is_empty() {
                if let Err(e) = self.store.flush() {
                    tracing::error!(error = %e, "Could not flush the audit store.");
                }
            }
            for tx in waiting.drain(..) {
                let _ = tx.send(());
            }
            if last_retention.elapsed() >= RETENTION_EVERY {
                last_retention = Instant::now();
                self.retain();
            }
        }
        self.commit(&mut batch);
        let _ = self.store.flush();
    }

    fn commit(&mut self, batch: &mut Vec<Sealed>) {
        // Each append is on disk when it returns (see `Store::append_sealed`).
        let outcome = match self.durability {
            Durability::Batch => self.store.append_sealed(batch),
            Durability::Record => batch
                .chunks(1)
                .try_for_each(|r| self.store.append_sealed(r)),
        };
        // The batch's memory is kept for the next one.
        batch.clear();
        if let Err(e) = outcome {
            tracing::error!(error = %e, "Could not write audit records.");
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
