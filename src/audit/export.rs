//! The way sealed records leave the box (`[audit] export`): after the writer has written a batch
//! to its segment it offers the batch's lines to an [`Outbox`], a queue bounded in records that
//! never waits — a full queue drops the batch and counts it. What reads the queue (the OTLP
//! exporter, `telemetry::audit_logs`) takes [`Parcel`]s and says when it has shipped them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender};

/// Written records on their way out: their lines (each record's JSON and a newline, in
/// sequence order) and how many there are.
#[derive(Debug)]
pub struct Parcel {
    pub lines: Vec<u8>,
    pub records: usize,
}

impl Parcel {
    /// Each record's JSON, in order.
    pub fn records(&self) -> impl Iterator<Item = &[u8]> {
        self.lines
            .split(|b| *b == b'\n')
            .filter(|line| !line.is_empty())
    }
}

/// What the export has done so far, shared by the writer and the exporter.
#[derive(Debug, Default)]
pub struct ExportCounts {
    /// Records offered and not shipped yet (waiting, or being sent).
    queued: AtomicUsize,
    capacity: usize,
    dropped: AtomicU64,
    exported: AtomicU64,
}

impl ExportCounts {
    /// Records the queue had no room for, since start.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Records the receiver accepted, since start.
    pub fn exported(&self) -> u64 {
        self.exported.load(Ordering::Relaxed)
    }

    /// Records waiting to be shipped.
    pub fn queued(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    /// `parcel` reached the receiver.
    pub fn shipped(&self, records: usize) {
        self.queued.fetch_sub(records, Ordering::Relaxed);
        self.exported.fetch_add(records as u64, Ordering::Relaxed);
    }
}

/// The writer's end: offers written batches, never waits.
#[derive(Debug)]
pub struct Outbox {
    tx: Sender<Parcel>,
    counts: Arc<ExportCounts>,
}

/// An outbox holding at most `capacity` records, and the exporter's end of it.
pub fn outbox(capacity: usize) -> (Outbox, Receiver<Parcel>, Arc<ExportCounts>) {
    let (tx, rx) = std::sync::mpsc::channel();
    let counts = Arc::new(ExportCounts {
        capacity,
        ..ExportCounts::default()
    });
    let outbox = Outbox {
        tx,
        counts: Arc::clone(&counts),
    };
    (outbox, rx, counts)
}

impl Outbox {
    pub fn counts(&self) -> &Arc<ExportCounts> {
        &self.counts
    }

    /// Queues a copy of `lines` (`records` records), or drops and counts them when the queue
    /// is full or the exporter is gone.
    pub fn offer(&self, lines: &[u8], records: usize) {
        if records == 0 {
            return;
        }
        let counts = &self.counts;
        let before = counts.queued.fetch_add(records, Ordering::Relaxed);
        let room = before + records <= counts.capacity;
        // Copied only when there is room for it.
        if room
            && (self.tx)
                .send(Parcel {
                    lines: lines.to_vec(),
                    records,
                })
                .is_ok()
        {
            return;
        }
        counts.queued.fetch_sub(records, Ordering::Relaxed);
        let was = counts.dropped.fetch_add(records as u64, Ordering::Relaxed);
        // Logged when the count passes a power of two, not per batch.
        if (was + records as u64).ilog2() != was.checked_ilog2().unwrap_or(u32::MAX) {
            tracing::warn!(
                dropped = was + records as u64,
                "Audit export queue full: records were not exported (the OTLP receiver is slow or unreachable); they stay in the local audit log."
            );
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_full_outbox_drops_whole_batches_and_counts_their_records() {
        let (outbox, rx, counts) = outbox(5);
        outbox.offer(b"{\"seq\":1}\n{\"seq\":2}\n{\"seq\":3}\n", 3);
        outbox.offer(b"{\"seq\":4}\n{\"seq\":5}\n{\"seq\":6}\n", 3);
        assert_eq!((counts.queued(), counts.dropped()), (3, 3));
        let parcel = rx.try_recv().unwrap();
        assert_eq!(parcel.records().count(), 3);
        counts.shipped(parcel.records);
        assert_eq!((counts.queued(), counts.exported()), (0, 3));
        outbox.offer(b"{\"seq\":7}\n", 1);
        assert_eq!(
            rx.try_recv().unwrap().records().next(),
            Some(&b"{\"seq\":7}"[..])
        );
        drop(rx);
        outbox.offer(b"{\"seq\":8}\n", 1);
        assert_eq!(counts.dropped(), 4, "an exporter that is gone drops");
    }
}
