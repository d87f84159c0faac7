//! The audit log: every request that crosses the gateway (host → upstream and upstream → host)
//! and every lifecycle event becomes one hash-chained record, written off the hot path and
//! queryable later: the records' bytes in append-only segment files, their directory and
//! indexes in sled. sled is used only inside this module.
//!
//! - `record`: the record, its canonical hash, argument redaction.
//! - `batch`: sealing records into the chain, and the batch they wait in for the writer.
//! - `store`: appending, syncing and indexing blocks; its sled layout, crash recovery, retention
//!   and `verify` in `store/`.
//! - `segment`: the append-only files holding the records' bytes.
//! - `writer`: the writer thread and [`AuditHandle`], the never-blocking way in.
//! - `export`: the bounded queue written batches leave the box through (`[audit] export`).
//! - `syncer`: the thread that puts written blocks on disk, indexes them and applies retention.
//! - `query`: filtered pages, cursors, statistics.
//! - `csv`: a cell of a CSV export, safe to open in a spreadsheet.

mod batch;
mod body;
mod csv;
mod export;
mod query;
mod record;
mod segment;
mod store;
mod syncer;
mod writer;

use std::path::Path;

pub use body::RequestRecord;
pub use csv::csv_cell;
pub use export::{ExportCounts, Outbox, Parcel, outbox};
pub use query::{
    Filter, FilterArgs, FilterError, MAX_PAGE, Page, QueryError, ReadError, StatRow, cursor_after,
    cursor_at, parse_time,
};
pub use record::{Direction, Ended, Kind, Record, Redactor, hex, now_us};
pub use store::{Break, Store, StoreError, Verification};
pub use writer::{AuditHandle, WeakAudit};

/// Opens the store in `dir` (creating the directory). sled starts its I/O threads here; they are
/// started from a background-priority thread so they inherit its priority and never compete with
/// request handling for the CPU.
pub fn open(dir: &Path) -> Result<Store, StoreError> {
    std::fs::create_dir_all(dir).map_err(|source| StoreError::Io {
        context: "cannot create its directory",
        source,
    })?;
    std::thread::scope(|s| {
        s.spawn(|| {
            syncer::background_priority();
            Store::open(dir)
        })
        .join()
        .unwrap_or(Err(StoreError::Panicked))
    })
}
