//! The audit writer. [`AuditHandle::record`] redacts and encodes a record on the calling thread,
//! then, in a short critical section, gives it its place in the hash chain (a sequence number,
//! one SHA-256 over the line) and appends its line to the pending batch; it never blocks a call:
//! when the queue is full the record is dropped and counted (reported in status and logs), and
//! the chain goes on without it. The first record of a batch wakes the writer.
//!
//! The writer thread lets records collect for [`BATCH_WINDOW`], takes the batch (trading it for
//! its own empty one) and writes it to the current segment as one block (from then on a crash of
//! the process cannot lose them); `durability = "record"` writes each record as a block of its
//! own. At most [`SYNC_EVERY`] later (at once for `record`) it hands what it wrote to the syncer
//! thread (`syncer`), which syncs and indexes it and applies retention. File and sled calls block, so both are threads rather than tasks on the
//! runtime.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender, SyncSender};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::batch::{Batch, Head};
use super::body::{Body, RECORD_BYTES, RequestRecord};
use super::export::{ExportCounts, Outbox};
use super::record::{Record, Redactor};
use super::store::{MAX_BLOCK, Store, StoreError, Written};
use super::syncer::{Handoff, Syncer};
use crate::config::{AuditConfig, Durability};

/// How long the writer waits for more records before writing what it has to its segment (from
/// then on a crash of the process cannot lose them).
const BATCH_WINDOW: Duration = Duration::from_millis(5);
/// How long written records wait at most to be synced to disk and indexed (an `fdatasync` costs
/// more CPU than writing a few hundred records, so it is shared by several batches).
const SYNC_EVERY: Duration = Duration::from_millis(50);

enum Msg {
    /// Records wait in the pending batch, which was empty: the first of a window.
    Wake,
    /// Write everything sealed so far; the syncer answers once it is on disk and indexed.
    Sync(SyncSender<()>),
}

/// Where the chain goes on, and the records sealed after it that the writer has not taken yet.
#[derive(Debug)]
struct Pending {
    /// The last record sealed (the next one chains after it).
    head: Head,
    batch: Batch,
}

struct Shared {
    /// Wakes the writer (once per batch window) and asks it to sync.
    tx: Sender<Msg>,
    /// Records sealed and not yet taken by the writer; at most `capacity`.
    queued: Arc<AtomicUsize>,
    capacity: usize,
    /// Sealed records wait here, their lines in one buffer, until the writer swaps the batch
    /// for its empty one.
    pending: Arc<Mutex<Pending>>,
    redactor: Redactor,
    dropped: AtomicU64,
    written: AtomicU64,
    /// What the export has done (`[audit] export`).
    export: Option<Arc<ExportCounts>>,
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
        Self::start_exporting(store, config, None)
    }

    /// [`Self::start`], the writer also offering every batch it wrote to `outbox` (`[audit]
    /// export`).
    pub fn start_exporting(
        store: Store,
        config: &AuditConfig,
        outbox: Option<Outbox>,
    ) -> Result<Self, StoreError> {
        let head = store.head()?;
        let export = outbox.as_ref().map(|o| Arc::clone(o.counts()));
        let (tx, rx) = std::sync::mpsc::channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let pending = Arc::new(Mutex::new(Pending {
            head,
            batch: Batch::default(),
        }));
        let syncer = Syncer {
            store: store.clone(),
            max_age: config.max_age,
            max_bytes: config.max_bytes,
        };
        let (handoff, handed) = std::sync::mpsc::channel();
        spawn("mcpmux-audit-sync", move || syncer.run(handed))?;
        let writer = Writer {
            queued: Arc::clone(&queued),
            pending: Arc::clone(&pending),
            store: store.clone(),
            durability: config.durability,
            syncer: handoff,
            outbox,
        };
        let thread = spawn("mcpmux-audit", move || writer.run(rx))?;
        let shared = Shared {
            tx,
            queued,
            capacity: config.queue,
            pending,
            redactor: Redactor::new(&config.secret_keys),
            dropped: AtomicU64::new(0),
            written: AtomicU64::new(0),
            export,
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
        if shared.admit() {
            shared.seal(&Body::of(record));
        }
    }

    /// [`Self::record`] for a host request's record, encoded from what the request path holds
    /// into a buffer the calling thread keeps: the hot path's record allocates nothing.
    pub fn record_request(&self, record: &RequestRecord<'_>) {
        thread_local! {
            static ENCODED: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        let Some(shared) = &self.shared else { return };
        if !shared.admit() {
            return;
        }
        ENCODED.with_borrow_mut(|json| {
            shared.seal(&Body::request(record, &shared.redactor, json));
            // What a record with large arguments grew it to is given back.
            json.shrink_to(RECORD_BYTES);
        });
    }

    /// Records dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.shared
            .as_ref()
            .map_or(0, |s| s.dropped.load(Ordering::Relaxed))
    }

    /// What the export has done, when records are exported.
    pub fn export_counts(&self) -> Option<&ExportCounts> {
        self.shared.as_ref()?.export.as_deref()
    }

    /// Records queued since start.
    pub fn queued(&self) -> u64 {
        self.shared
            .as_ref()
            .map_or(0, |s| s.written.load(Ordering::Relaxed))
    }

    /// The last record sealed: its sequence number and hash (`None` before the first, or when
    /// the audit log is off).
    pub fn head(&self) -> Option<(u64, String)> {
        let shared = self.shared.as_ref()?;
        let pending = shared
            .pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let head = &pending.head;
        (!head.last_hash.is_empty())
            .then(|| (head.next_seq.saturating_sub(1), head.last_hash.clone()))
    }

    /// A handle that does not keep the writer alive (for the exporter, which records into the
    /// chain it exports).
    pub fn downgrade(&self) -> WeakAudit {
        WeakAudit(self.shared.as_ref().map(Arc::downgrade))
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

/// An [`AuditHandle`] that does not keep the audit log open.
#[derive(Clone, Default)]
pub struct WeakAudit(Option<std::sync::Weak<Shared>>);

impl std::fmt::Debug for WeakAudit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WeakAudit")
    }
}

impl WeakAudit {
    /// The handle, while the audit log is open.
    pub fn upgrade(&self) -> Option<AuditHandle> {
        let shared = self.0.as_ref()?.upgrade()?;
        Some(AuditHandle {
            shared: Some(shared),
        })
    }
}

impl Shared {
    /// Takes a record into the queue, or drops and counts it when the queue is full.
    fn admit(&self) -> bool {
        if self.queued.fetch_add(1, Ordering::Relaxed) < self.capacity {
            return true;
        }
        self.queued.fetch_sub(1, Ordering::Relaxed);
        let dropped = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
        if dropped.is_power_of_two() {
            tracing::warn!(
                dropped,
                "Audit queue full: records were dropped (the writer cannot keep up)."
            );
        }
        false
    }

    /// Chains an admitted record's `body` after the last one sealed, into the pending batch.
    fn seal(&self, body: &Body<'_>) {
        let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        // The first record of a window wakes the writer; a writer that is gone takes none.
        if pending.batch.is_empty() && self.tx.send(Msg::Wake).is_err() {
            drop(pending);
            self.queued.fetch_sub(1, Ordering::Relaxed);
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return;
        }
        let Pending { head, batch } = &mut *pending;
        batch.seal(body, head);
        drop(pending);
        self.written.fetch_add(1, Ordering::Relaxed);
    }
}

/// Starts one of the audit log's threads.
fn spawn(name: &str, run: impl FnOnce() + Send + 'static) -> Result<JoinHandle<()>, StoreError> {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(run)
        .map_err(|source| StoreError::Io {
            context: "cannot start the audit log's threads",
            source,
        })
}

struct Writer {
    /// [`Shared::queued`]: the writer takes off what it received.
    queued: Arc<AtomicUsize>,
    /// [`Shared::pending`]: the batch it takes.
    pending: Arc<Mutex<Pending>>,
    store: Store,
    durability: Durability,
    /// Where what it wrote goes to be synced and indexed.
    syncer: Sender<Handoff>,
    /// Where what it wrote is offered to leave the box (`[audit] export`).
    outbox: Option<Outbox>,
}

impl Writer {
    /// Waits for a record, then lets the batch window pass before taking everything queued:
    /// senders never wake the writer more than once per window, so a busy gateway pays no
    /// thread wake-up per record. A `Sync` request ends the window at once.
    fn run(self, rx: Receiver<Msg>) {
        super::syncer::background_priority();
        // The batch the writer stores while the next one fills; the two trade places.
        let mut batch = Batch::default();
        // Blocks written and not handed over yet, and when the first of them is due for a sync.
        let mut written: Vec<Written> = Vec::new();
        let mut sync_due: Option<Instant> = None;
        loop {
            let wait = sync_due.map_or(Duration::MAX, |due| {
                due.saturating_duration_since(Instant::now())
            });
            let (first, open) = match rx.recv_timeout(wait) {
                Ok(msg) => (Some(msg), true),
                Err(RecvTimeoutError::Timeout) => (None, true),
                Err(RecvTimeoutError::Disconnected) => (None, false),
            };
            if matches!(first, Some(Msg::Wake)) {
                std::thread::sleep(BATCH_WINDOW);
            }
            let mut waiting = Vec::new();
            let mut next = first;
            while let Some(msg) = next.take() {
                if let Msg::Sync(tx) = msg {
                    waiting.push(tx);
                }
                next = rx.try_recv().ok();
            }
            // Everything sealed before a sync request was sent is in the batch taken now.
            {
                let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
                std::mem::swap(&mut pending.batch, &mut batch);
            }
            self.queued.fetch_sub(batch.len(), Ordering::Relaxed);
            self.write(&batch, &mut written);
            if let Some(outbox) = &self.outbox {
                outbox.offer(batch.lines(), batch.len());
            }
            batch.clear();
            if !written.is_empty() && sync_due.is_none() {
                sync_due = Some(Instant::now() + SYNC_EVERY);
            }
            // The syncer wakes once per sync, not once per batch.
            let due = sync_due.is_some_and(|due| Instant::now() >= due)
                || self.durability == Durability::Record;
            if due || !waiting.is_empty() || !open {
                sync_due = None;
                let written = std::mem::take(&mut written);
                if (!written.is_empty() || !waiting.is_empty())
                    && self.syncer.send(Handoff { written, waiting }).is_err()
                {
                    tracing::error!("The audit syncer is gone: records are not indexed.");
                }
            }
            if !open {
                // The syncer finishes what it was handed, then stops.
                break;
            }
        }
    }

    /// Writes the batch to its segment in blocks of at most [`MAX_BLOCK`] records
    /// (`durability = "record"`: each record a block of its own, synced at once).
    fn write(&self, batch: &Batch, written: &mut Vec<Written>) {
        let outcome = batch.blocks(MAX_BLOCK).try_for_each(|block| {
            let mut write = |block: &_| self.store.write(block).map(|w| written.extend(w));
            match self.durability {
                Durability::Batch => write(&block),
                Durability::Record => block.singles().try_for_each(|record| write(&record)),
            }
        });
        if let Err(e) = outcome {
            tracing::error!(error = %e, "Could not write audit records.");
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::audit::{Ended, Filter, Kind};
    use crate::config::{AuditConfig, SecretKeys};

    fn handle(dir: &tempfile::TempDir, queue: usize) -> AuditHandle {
        let keys = SecretKeys::defaults().unwrap();
        let mut config = AuditConfig::new(dir.path().join("audit"), keys);
        config.queue = queue;
        let store = Store::open(&config.dir).unwrap();
        AuditHandle::start(store, &config).unwrap()
    }

    fn call() -> Record {
        Record::new(Kind::Request, "tools/call", Ended::Ok)
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
