//! The audit store: sled holds the ordered directory of blocks, the indexes and the chain's head;
//! the records' bytes are in append-only segment files beside it ([`super::segment`]). Records
//! are written in blocks — one per batch the writer commits — so a busy gateway costs one write
//! per batch, and one `fdatasync` and a few small sled entries per sync (the blocks written
//! between two syncs are indexed as one), not per record. A block is durable in
//! its segment before sled records where it is. Only the writer thread appends and prunes;
//! queries read concurrently.
//!
//! - `keys`: the trees and their keys (the layout).
//! - `recover`: indexing at open what reached a segment but not sled.
//! - `retention`: pruning by age and size, the checkpoint the chain then starts from.
//! - `verify`: walking the chain.

mod keys;
mod recover;
mod retention;
mod verify;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::batch::{Batch, Block, Head};
use super::record::Record;
use super::segment::{Location, Segments};
use keys::{BYTES, HEAD, index_prefixes};
pub(super) use keys::{IndexField, block_key, index_prefix};
pub use verify::{Break, Verification};

/// What went wrong with the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "cannot open the audit store at {path}: {source} (another mcpmux may have it open; use its admin API)"
    )]
    Open { path: String, source: sled::Error },
    #[error(
        "the audit store at {0} was written by an older mcpmux in another layout: move it aside (or delete it) and start again"
    )]
    OldLayout(String),
    #[error("audit store: {0}")]
    Sled(#[from] sled::Error),
    /// A file operation outside sled failed (segment files mostly: `context` says which).
    #[error("audit store: {context}: {source}")]
    Io {
        context: &'static str,
        source: std::io::Error,
    },
    #[error("audit store: a block is not readable: {0}")]
    Decode(#[from] serde_json::Error),
    #[error("audit store: a block entry is not a location")]
    Entry,
    #[error("audit store: it could not be opened (the thread opening it panicked)")]
    Panicked,
}

impl From<std::io::Error> for StoreError {
    fn from(source: std::io::Error) -> Self {
        Self::Io {
            context: "segment file",
            source,
        }
    }
}

/// Records a block holds at most: the writer's batches are cut to it, and the blocks written
/// between two syncs are indexed as one while they stay within it.
pub(super) const MAX_BLOCK: usize = 4096;

/// A block in its segment, not yet synced and indexed.
#[derive(Debug)]
pub(super) struct Written {
    key: [u8; 16],
    at: Location,
    /// Its index entries' prefixes ([`keys::index_prefixes`]).
    prefixes: Vec<Vec<u8>>,
    records: usize,
    head: Head,
}

impl Written {
    /// Takes in `next`, written right after it in the same segment, if the two stay within
    /// [`MAX_BLOCK`]: one block then, under this one's key.
    fn absorb(&mut self, next: Self) -> Result<(), Self> {
        let contiguous = next.at.segment == self.at.segment
            && next.at.offset == self.at.offset + u64::from(self.at.len);
        let len = self.at.len.checked_add(next.at.len);
        match len {
            Some(len) if contiguous && self.records + next.records <= MAX_BLOCK => {
                self.at.len = len;
                self.records += next.records;
                self.prefixes.extend(next.prefixes);
                self.head = next.head;
                Ok(())
            }
            _ => Err(next),
        }
    }
}

#[derive(Clone)]
pub struct Store {
    db: sled::Db,
    blocks: sled::Tree,
    index: sled::Tree,
    meta: sled::Tree,
    segments: Arc<Segments>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("blocks", &self.blocks.len())
            .finish()
    }
}

/// sled's page cache (its default, 1 GiB, would let the daemon grow far beyond its budget). sled
/// holds only small entries, so this is plenty.
const CACHE_BYTES: u64 = 512 * 1024;

/// The head once `record` is the last record (as read back from a segment).
fn head_after(record: &Record) -> Head {
    Head {
        next_seq: record.seq + 1,
        last_hash: record.hash.clone(),
        last_ts: record.ts_us,
    }
}

/// How long opening waits for the store's lock. Dropping a store releases the lock only once
/// sled's background threads let go of it, a moment later; a reopen in the same process (a
/// restart of the audit writer, a test) must not mistake that moment for another mcpmux.
const LOCK_WAIT: Duration = Duration::from_secs(2);

fn open_db(dir: &Path) -> Result<sled::Db, sled::Error> {
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        let opened = sled::Config::new()
            .path(dir)
            .mode(sled::Mode::HighThroughput)
            .cache_capacity(CACHE_BYTES)
            .open();
        match opened {
            // sled reports a held lock as an `Other` I/O error; its message is all that tells it.
            Err(sled::Error::Io(e))
                if e.to_string().starts_with("could not acquire lock")
                    && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(20));
            }
            other => return other,
        }
    }
}

impl Store {
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        let db = open_db(dir).map_err(|source| StoreError::Open {
            path: dir.display().to_string(),
            source,
        })?;
        let blocks = db.open_tree("blocks")?;
        if let Some((_, v)) = blocks.first()? {
            if Location::from_bytes(&v).is_none() {
                return Err(StoreError::OldLayout(dir.display().to_string()));
            }
        }
        let store = Self {
            blocks,
            index: db.open_tree("index")?,
            meta: db.open_tree("meta")?,
            segments: Arc::new(Segments::open(dir)?),
            db,
        };
        let recovered = store.recover()?;
        if recovered > 0 {
            tracing::warn!(
                recovered,
                "Audit: indexed records written just before an unclean stop."
            );
        }
        Ok(store)
    }

    /// Where appending continues: after the last record (or the retention checkpoint). If the
    /// last block cannot be read (its segment damaged or removed), the chain continues from the
    /// head recorded with it, and `verify` reports the break.
    pub fn head(&self) -> Result<Head, StoreError> {
        if let Some((_, value)) = self.blocks.last()? {
            match self.read(&value) {
                Ok(block) => {
                    if let Some(last) = block.last() {
                        return Ok(head_after(last));
                    }
                }
                Err(e) => {
                    tracing::warn!(
                        error = %e,
                        "The last audit block cannot be read; the log continues from its recorded head. `mcpmux audit verify` shows the damage."
                    );
                    if let Some(head) = self.meta.get(HEAD)? {
                        return Ok(serde_json::from_slice(&head)?);
                    }
                }
            }
        }
        Ok(self.checkpoint()?.unwrap_or_default())
    }

    /// Chains `records` after `head` and writes them as one block; `head` moves past them.
    pub fn append(&self, records: Vec<Record>, head: &mut Head) -> Result<(), StoreError> {
        let batch = Batch::sealed(records, head);
        self.append_block(&batch.block(0..batch.len()))
    }

    /// Writes `block`, records sealed in chain order after the last one stored, syncs it and
    /// indexes it: when this returns the records are durable and found by queries.
    pub fn append_block(&self, block: &Block<'_>) -> Result<(), StoreError> {
        let written = self.write(block)?;
        self.sync_and_index(written)
    }

    /// Writes `block` (records sealed in chain order after the last one written) to its segment:
    /// the records survive the process from here on, and the next [`Store::sync_and_index`] puts
    /// them on disk and in the indexes.
    pub(super) fn write(&self, block: &Block<'_>) -> Result<Option<Written>, StoreError> {
        let (Some(first), Some(last)) = (block.first(), block.last()) else {
            return Ok(None);
        };
        let at = self.segments.write(first.seq, block.bytes())?;
        let key = block_key(first.ts_us, first.seq);
        Ok(Some(Written {
            prefixes: index_prefixes(block.fields()),
            records: usize::try_from(last.seq - first.seq + 1).unwrap_or(usize::MAX),
            key,
            at,
            head: Head::after(&last),
        }))
    }

    /// Syncs the segment, then indexes the blocks `written` since the last sync, in order: sled
    /// never points at bytes that are not on disk. Blocks that follow each other in a segment
    /// are indexed as one (up to [`MAX_BLOCK`] records): a busy gateway's batch window is 5 ms,
    /// its sync interval 50 ms, and every directory entry and index entry sled holds costs
    /// memory for as long as the record is kept.
    pub(super) fn sync_and_index(
        &self,
        written: impl IntoIterator<Item = Written>,
    ) -> Result<(), StoreError> {
        self.segments.sync()?;
        let mut last = None;
        let mut joined: Option<Written> = None;
        for w in written {
            let w = match &mut joined {
                Some(j) => match j.absorb(w) {
                    Ok(()) => continue,
                    Err(w) => w,
                },
                None => w,
            };
            last = Some(w.at.segment);
            if let Some(done) = joined.replace(w) {
                self.index_written(done)?;
            }
        }
        if let Some(done) = joined {
            self.index_written(done)?;
        }
        if let Some(segment) = last {
            self.segments.release_before(segment);
        }
        Ok(())
    }

    fn index_written(&self, w: Written) -> Result<(), StoreError> {
        let mut index = w.prefixes;
        index.sort_unstable();
        index.dedup();
        for k in &mut index {
            k.extend_from_slice(&w.key);
        }
        self.index_block(&w.key, index, w.at, &w.head)
    }

    /// Records in sled where the block under `key` is, its index entries, and that the chain
    /// now ends at `head`. The block's entry goes in last: sled recovers a prefix of its log, so
    /// a block whose entry survived a crash has its index entries and head too, and one whose
    /// entry was lost is indexed again by [`Store::recover`].
    fn index_block(
        &self,
        key: &[u8; 16],
        index: Vec<Vec<u8>>,
        at: Location,
        head: &Head,
    ) -> Result<(), StoreError> {
        // What the store holds counts its index too (`audit.max_bytes`): the entries' keys.
        let index_bytes: u64 = index.iter().map(|k| k.len() as u64).sum();
        // One insert each: a sled `Batch` would make sled write and sync its log right away.
        for k in index {
            self.index.insert(k, &[])?;
        }
        self.meta.insert(HEAD, serde_json::to_vec(head)?)?;
        self.meta.update_and_fetch(BYTES, |old| {
            Some(
                (counter(old) + u64::from(at.len) + index_bytes)
                    .to_be_bytes()
                    .to_vec(),
            )
        })?;
        self.blocks.insert(key, &at.to_bytes())?;
        Ok(())
    }

    /// Writes sled's log (block entries, indexes, head) to disk. Records are durable without it:
    /// each block is synced to its segment before sled hears of it, and [`Store::open`] indexes
    /// any block whose entry was lost.
    pub fn flush(&self) -> Result<(), StoreError> {
        self.db.flush()?;
        Ok(())
    }

    /// The records of the block whose directory entry is `entry`.
    pub(super) fn read(&self, entry: &[u8]) -> Result<Vec<Record>, StoreError> {
        lines(&self.bytes_of(entry)?)
            .map(|line| serde_json::from_slice(line).map_err(StoreError::from))
            .collect()
    }

    /// The bytes (its records' lines, [`lines`]) of the block whose directory entry is `entry`.
    pub(super) fn bytes_of(&self, entry: &[u8]) -> Result<Vec<u8>, StoreError> {
        let at = Location::from_bytes(entry).ok_or(StoreError::Entry)?;
        Ok(self.segments.read(at)?)
    }

    /// The bytes of the block at `key`, if it exists.
    pub(super) fn block(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        match self.blocks.get(key)? {
            Some(v) => self.read_live(key, &v),
            None => Ok(None),
        }
    }

    /// The bytes of the block at `key` whose entry was `entry`; `None` if retention removed it
    /// (and its segment) since the entry was read.
    pub(super) fn read_live(
        &self,
        key: &[u8],
        entry: &[u8],
    ) -> Result<Option<Vec<u8>>, StoreError> {
        match self.bytes_of(entry) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(_) if self.blocks.get(key)?.is_none() => Ok(None),
            Err(e) => Err(e),
        }
    }

    pub(super) fn blocks(&self) -> &sled::Tree {
        &self.blocks
    }

    pub(super) fn index(&self) -> &sled::Tree {
        &self.index
    }

    /// How many records the store holds.
    pub fn len(&self) -> u64 {
        self.head()
            .ok()
            .map_or(0, |h| h.next_seq)
            .saturating_sub(self.checkpoint().ok().flatten().map_or(0, |c| c.next_seq))
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes the store holds: its records' lines and its index entries' keys (what
    /// `audit.max_bytes` bounds).
    pub fn bytes(&self) -> u64 {
        self.meta
            .get(BYTES)
            .ok()
            .flatten()
            .map_or(0, |v| counter(Some(&v)))
    }
}

/// A block's records' lines, oldest first (reversible: a query reads newest first from the end).
pub(super) fn lines(bytes: &[u8]) -> impl DoubleEndedIterator<Item = &[u8]> {
    bytes.split(|b| *b == b'\n').filter(|line| !line.is_empty())
}

fn counter(v: Option<&[u8]>) -> u64 {
    v.and_then(|v| v.try_into().ok())
        .map_or(0, u64::from_be_bytes)
}

#[cfg(test)]
mod test_support {
    use super::*;
    use crate::audit::record::{Ended, Kind};

    pub(super) fn batch(n: usize, upstream: &str) -> Vec<Record> {
        (0..n)
            .map(|i| {
                let mut r = Record::new(Kind::Request, "tools/call", Ended::Ok);
                r.upstream = Some(upstream.to_owned());
                r.target = Some(format!("{upstream}__tool{i}"));
                r
            })
            .collect()
    }

    pub(super) fn seqs(store: &Store) -> Vec<u64> {
        let mut seqs = Vec::new();
        for entry in store.blocks().iter() {
            let (_, v) = entry.unwrap_or_else(|e| panic!("{e}"));
            let block = store.read(&v).unwrap_or_else(|e| panic!("{e}"));
            seqs.extend(block.iter().map(|r| r.seq));
        }
        seqs
    }

    pub(super) fn upstream_is(upstream: &str) -> crate::audit::Filter {
        crate::audit::Filter {
            upstream: Some(upstream.to_owned()),
            ..Default::default()
        }
    }

    pub(super) fn ok<T, E: std::fmt::Display>(r: Result<T, E>) -> T {
        r.unwrap_or_else(|e| panic!("{e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::test_support::{batch, ok, seqs, upstream_is};
    use super::*;

    /// The blocks written between two syncs get one directory entry and one set of index
    /// entries; every record is found by its index, the chain verifies, and a reopen finds
    /// nothing to recover.
    #[test]
    fn blocks_written_between_two_syncs_are_indexed_as_one() {
        let dir = ok(tempfile::tempdir());
        let store = ok(Store::open(dir.path()));
        let records = ["a", "b", "a", "c"].into_iter().flat_map(|u| batch(3, u));
        let sealed = Batch::sealed(records, &mut Head::default());
        let written: Vec<Written> = (0..4)
            .filter_map(|i| ok(store.write(&sealed.block(i * 3..i * 3 + 3))))
            .collect();
        assert_eq!(written.len(), 4);
        ok(store.sync_and_index(written));

        assert_eq!(store.blocks().len(), 1);
        assert_eq!(seqs(&store), (0..12).collect::<Vec<_>>());
        let found = |u: &str| -> Vec<u64> {
            let page = ok(store.query(&upstream_is(u)));
            page.records.iter().map(|r| r.seq).collect()
        };
        assert_eq!(found("a"), vec![0, 1, 2, 6, 7, 8]);
        assert_eq!(found("c"), vec![9, 10, 11]);
        // Newest first, a page at a time: the joined block is read from its end.
        let newest = crate::audit::Filter {
            newest_first: true,
            limit: Some(4),
            ..upstream_is("a")
        };
        let page = ok(store.query(&newest));
        let seqs_of = |page: &crate::audit::Page| -> Vec<u64> {
            page.records.iter().map(|r| r.seq).collect()
        };
        assert_eq!(seqs_of(&page), vec![8, 7, 6, 2]);
        let rest = crate::audit::Filter {
            cursor: page.next_cursor.clone(),
            ..newest
        };
        let page = ok(store.query(&rest));
        assert_eq!(seqs_of(&page), vec![1, 0]);
        assert!(page.next_cursor.is_none());
        let upstream_keys = store
            .index()
            .iter()
            .keys()
            .map(ok)
            .filter(|k| k.starts_with(b"u"))
            .count();
        assert_eq!(upstream_keys, 3, "one entry per upstream, not per block");
        assert!(ok(store.verify()).ok);
        let index_bytes: u64 = (store.index().iter().keys().map(ok))
            .map(|k| k.len() as u64)
            .sum();
        assert_eq!(
            store.bytes(),
            sealed.block(0..12).bytes().len() as u64 + index_bytes,
            "the block's lines and its index entries' keys"
        );

        ok(store.flush());
        drop(store);
        let store = ok(Store::open(dir.path()));
        assert_eq!(ok(store.head()).next_seq, 12);
        assert_eq!(store.blocks().len(), 1, "nothing was left to recover");
    }

    /// Joining stops at [`MAX_BLOCK`] records: a busier sync interval gets more entries.
    #[test]
    fn a_joined_block_stays_within_the_record_limit() {
        let dir = ok(tempfile::tempdir());
        let store = ok(Store::open(dir.path()));
        let half = MAX_BLOCK / 2 + 1;
        let sealed = Batch::sealed(batch(3 * half, "a"), &mut Head::default());
        let written: Vec<Written> = sealed
            .blocks(half)
            .filter_map(|block| ok(store.write(&block)))
            .collect();
        ok(store.sync_and_index(written));
        assert_eq!(store.blocks().len(), 3);
        assert_eq!(store.len(), 3 * half as u64);
        assert!(ok(store.verify()).ok);
    }
}
