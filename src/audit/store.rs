//! The audit store: sled holds the ordered directory of blocks, the indexes and the chain's head;
//! the records' bytes are in append-only segment files beside it ([`super::segment`]). Records
//! are written in blocks — one per batch the writer commits — so a busy gateway costs one write,
//! one `fdatasync` and one small sled transaction per batch, not per record.
//!
//! Trees:
//! - `blocks`: first_ts‖first_seq (big-endian) → where the block's bytes are (a [`Location`]).
//!   Record times are kept non-decreasing by the writer, so key order is both time and sequence
//!   order: a time range is one range scan.
//! - `index`: field tag‖value‖0‖block key → (), for upstream (`u`), tool (`t`) and session (`s`),
//!   one entry per block that holds such a record.
//! - `meta`: the head (next seq, last hash, last time), the checkpoint retention prunes to, the
//!   byte count.
//!
//! A block's bytes are its records as JSON lines, each carrying its hash and its predecessor's;
//! a block is durable in its segment before sled records where it is. Only the writer thread
//! appends and prunes; queries read concurrently.

use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use serde::{Deserialize, Serialize};

use super::record::{Body, Record, Sealed};
use super::segment::{Location, Segments};

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
    #[error("audit store: segment file: {0}")]
    Io(#[from] std::io::Error),
    #[error("audit store: a block is not readable: {0}")]
    Decode(#[from] serde_json::Error),
    #[error("audit store: a block entry is not a location")]
    Entry,
    #[error("audit.secret_keys cannot be matched: {0}")]
    SecretKeys(#[from] aho_corasick::BuildError),
}

/// Where the chain continues from.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Head {
    pub next_seq: u64,
    pub last_hash: String,
    /// Records are stamped no earlier than this, so time order is sequence order.
    #[serde(default)]
    pub last_ts: u64,
}

/// What `verify` found.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Verification {
    pub ok: bool,
    pub checked: u64,
    /// The first sequence number the chain starts from (after retention).
    pub first_seq: u64,
    /// The first problem: the record where the chain breaks, and how.
    pub first_break: Option<Break>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Break {
    pub seq: u64,
    pub problem: String,
}

/// A block in its segment, not yet synced and indexed.
#[derive(Debug)]
pub(super) struct Written {
    key: [u8; 16],
    at: Location,
    index: Vec<Vec<u8>>,
    head: Head,
}

/// The indexed fields, by their key tag.
#[derive(Debug, Clone, Copy)]
pub(super) enum IndexField {
    Upstream = b'u' as isize,
    Tool = b't' as isize,
    Session = b's' as isize,
}

#[derive(Clone)]
pub struct Store {
    db: sled::Db,
    blocks: sled::Tree,
    index: sled::Tree,
    meta: sled::Tree,
    segments: Arc<Segments>,
    /// The writer's encoding buffer, kept between batches.
    encoded: Arc<Mutex<Vec<u8>>>,
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
const CACHE_BYTES: u64 = 2 * 1024 * 1024;

/// Bytes of the encoding buffer kept between blocks.
const KEPT_BUFFER: usize = 256 * 1024;

const HEAD: &[u8] = b"head";
const CHECKPOINT: &[u8] = b"checkpoint";
const BYTES: &[u8] = b"bytes";

/// A block's key: its first record's time and sequence number.
pub(super) fn block_key(ts_us: u64, seq: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&ts_us.to_be_bytes());
    k[8..].copy_from_slice(&seq.to_be_bytes());
    k
}

fn index_key(field: IndexField, value: &str, block: &[u8; 16]) -> Vec<u8> {
    let mut k = index_prefix(field, value);
    k.extend_from_slice(block);
    k
}

pub(super) fn index_prefix(field: IndexField, value: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(value.len() + 18);
    k.push(field as u8);
    k.extend_from_slice(value.as_bytes());
    k.push(0);
    k
}

/// The index entries a block needs: one per distinct indexed value. `fields` gives each
/// record's upstream, tool and session.
fn index_entries<'a>(
    fields: impl Iterator<Item = [Option<&'a str>; 3]>,
    block: &[u8; 16],
) -> Vec<Vec<u8>> {
    const FIELDS: [IndexField; 3] = [IndexField::Upstream, IndexField::Tool, IndexField::Session];
    let mut seen = HashSet::new();
    let mut keys = Vec::new();
    // Neighbours often share a value: comparing with the previous record's skips most hashing.
    let mut previous = [None; 3];
    for values in fields {
        for (i, value) in values.into_iter().enumerate() {
            let Some(value) = value else { continue };
            if previous[i] != Some(value) && seen.insert((i, value)) {
                keys.push(index_key(FIELDS[i], value, block));
            }
            previous[i] = Some(value);
        }
    }
    keys
}

fn record_fields(r: &Record) -> [Option<&str>; 3] {
    [
        r.upstream.as_deref(),
        r.target.as_deref(),
        r.session.as_deref(),
    ]
}

fn sealed_fields(r: &Sealed) -> [Option<&str>; 3] {
    [
        r.upstream.as_deref(),
        r.target.as_deref(),
        r.session.as_deref(),
    ]
}

fn head_after(record: &Record) -> Head {
    Head {
        next_seq: record.seq + 1,
        last_hash: record.hash.clone(),
        last_ts: record.ts_us,
    }
}

impl Head {
    /// The head once `sealed` is the last record.
    pub fn after(sealed: &Sealed) -> Self {
        Self {
            next_seq: sealed.seq + 1,
            last_hash: sealed.hash.clone(),
            last_ts: sealed.ts_us,
        }
    }
}

impl Store {
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        let db = sled::Config::new()
            .path(dir)
            .mode(sled::Mode::HighThroughput)
            .cache_capacity(CACHE_BYTES)
            .open()
            .map_err(|source| StoreError::Open {
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
            encoded: Arc::default(),
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
        let sealed: Vec<Sealed> = records
            .into_iter()
            .map(|r| {
                let s = Sealed::chain(Body::of(r), head.next_seq, &head.last_hash, head.last_ts);
                *head = Head::after(&s);
                s
            })
            .collect();
        self.append_sealed(&sealed)
    }

    /// Writes `block`, records sealed in chain order after the last one stored, as one block,
    /// syncs it and indexes it: when this returns the records are durable and found by queries.
    pub fn append_sealed(&self, block: &[Sealed]) -> Result<(), StoreError> {
        let written = self.write(block)?;
        self.sync_and_index(written)
    }

    /// Writes `block` (records sealed in chain order after the last one written) to its segment:
    /// the records survive the process from here on, and the next [`Store::sync_and_index`] puts
    /// them on disk and in the indexes.
    pub(super) fn write(&self, block: &[Sealed]) -> Result<Option<Written>, StoreError> {
        let (Some(first), Some(last)) = (block.first(), block.last()) else {
            return Ok(None);
        };
        let mut bytes = self.encoded.lock().unwrap_or_else(PoisonError::into_inner);
        bytes.clear();
        for s in block {
            bytes.extend_from_slice(&s.line);
        }
        let at = self.segments.write(first.seq, &bytes);
        // A burst's buffer is not kept: at most a quiet load's worth.
        bytes.clear();
        bytes.shrink_to(KEPT_BUFFER);
        drop(bytes);
        let at = at?;
        let key = block_key(first.ts_us, first.seq);
        let fields = block.iter().map(sealed_fields);
        Ok(Some(Written {
            index: index_entries(fields, &key),
            key,
            at,
            head: Head::after(last),
        }))
    }

    /// Syncs the segment, then indexes the blocks `written` since the last sync, in order: sled
    /// never points at bytes that are not on disk.
    pub(super) fn sync_and_index(
        &self,
        written: impl IntoIterator<Item = Written>,
    ) -> Result<(), StoreError> {
        self.segments.sync()?;
        for w in written {
            self.index_block(&w.key, w.index, w.at, &w.head)?;
        }
        Ok(())
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
        // One insert each: a sled `Batch` would make sled write and sync its log right away.
        for k in index {
            self.index.insert(k, &[])?;
        }
        self.meta.insert(HEAD, serde_json::to_vec(head)?)?;
        self.meta.update_and_fetch(BYTES, |old| {
            Some((counter(old) + u64::from(at.len)).to_be_bytes().to_vec())
        })?;
        self.blocks.insert(key, &at.to_bytes())?;
        Ok(())
    }

    /// Indexes the records that reached a segment but not sled: sled writes its log lazily, so
    /// after a kill the last blocks' entries may be missing while their bytes are on disk. Reads
    /// on from the end of the last indexed block (or the start of newer segments) and takes every
    /// whole line that continues the chain; the first that does not ends that segment's
    /// recovery (a torn write at a crash). Returns how many records came back.
    fn recover(&self) -> Result<u64, StoreError> {
        let mut head = self.head()?;
        let resume = match self.blocks.last()? {
            Some((_, v)) => {
                let at = Location::from_bytes(&v).ok_or(StoreError::Entry)?;
                (at.segment, at.offset + u64::from(at.len))
            }
            None => (0, 0),
        };
        let mut recovered = 0;
        for id in self.segments.ids()? {
            if id < resume.0 {
                continue;
            }
            let from = if id == resume.0 { resume.1 } else { 0 };
            let bytes = self.segments.read_from(id, from)?;
            let mut records = Vec::new();
            let (mut start, mut end) = (from, from);
            let mut pos = from;
            for line in bytes.split_inclusive(|b| *b == b'\n') {
                pos += line.len() as u64;
                let Some(record) = line
                    .strip_suffix(b"\n")
                    .and_then(|l| serde_json::from_slice::<Record>(l).ok())
                else {
                    break;
                };
                if record.seq < head.next_seq && records.is_empty() {
                    // Already indexed, or pruned: recovery starts after it.
                    start = pos;
                    continue;
                }
                if record.seq != head.next_seq
                    || record.prev_hash != head.last_hash
                    || record.compute_hash() != record.hash
                {
                    break;
                }
                head = head_after(&record);
                end = pos;
                records.push(record);
            }
            if !records.is_empty() {
                let len = u32::try_from(end - start).map_err(|_| StoreError::Entry)?;
                let at = Location {
                    segment: id,
                    offset: start,
                    len,
                };
                let key = block_key(records[0].ts_us, records[0].seq);
                let index = index_entries(records.iter().map(record_fields), &key);
                self.index_block(&key, index, at, &head)?;
                recovered += records.len() as u64;
            }
        }
        if recovered > 0 {
            self.db.flush()?;
        }
        Ok(recovered)
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
        let at = Location::from_bytes(entry).ok_or(StoreError::Entry)?;
        let bytes = self.segments.read(at)?;
        bytes
            .split(|b| *b == b'\n')
            .filter(|line| !line.is_empty())
            .map(|line| serde_json::from_slice(line).map_err(StoreError::from))
            .collect()
    }

    /// The records of the block at `key`, if it exists.
    pub(super) fn block(&self, key: &[u8]) -> Result<Option<Vec<Record>>, StoreError> {
        match self.blocks.get(key)? {
            Some(v) => self.read_live(key, &v),
            None => Ok(None),
        }
    }

    /// The records of the block at `key` whose entry was `entry`; `None` if retention removed
    /// it (and its segment) since the entry was read.
    pub(super) fn read_live(
        &self,
        key: &[u8],
        entry: &[u8],
    ) -> Result<Option<Vec<Record>>, StoreError> {
        match self.read(entry) {
            Ok(records) => Ok(Some(records)),
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

    /// Bytes of records stored.
    pub fn bytes(&self) -> u64 {
        self.meta
            .get(BYTES)
            .ok()
            .flatten()
            .map_or(0, |v| counter(Some(&v)))
    }

    fn checkpoint(&self) -> Result<Option<Head>, StoreError> {
        match self.meta.get(CHECKPOINT)? {
            Some(v) => Ok(Some(serde_json::from_slice(&v)?)),
            None => Ok(None),
        }
    }

    /// Removes blocks from the old end while their records are older than `min_ts_us` or while
    /// the store holds more than `max_bytes`, then the segments nothing points into any more;
    /// the chain stays verifiable from the checkpoint.
    pub fn prune(&self, min_ts_us: u64, max_bytes: u64) -> Result<usize, StoreError> {
        let mut removed = 0;
        let mut bytes = self.bytes();
        let mut checkpoint = None;
        for entry in self.blocks.iter() {
            let (key, value) = entry?;
            let at = Location::from_bytes(&value).ok_or(StoreError::Entry)?;
            let block = self.read(&value)?;
            let Some(last) = block.last() else { continue };
            if last.ts_us >= min_ts_us && bytes <= max_bytes {
                break;
            }
            let block_key: [u8; 16] = key.as_ref().try_into().unwrap_or_default();
            for k in index_entries(block.iter().map(record_fields), &block_key) {
                self.index.remove(k)?;
            }
            self.blocks.remove(&key)?;
            bytes = bytes.saturating_sub(u64::from(at.len));
            checkpoint = Some(head_after(last));
            removed += block.len();
        }
        if let Some(checkpoint) = checkpoint {
            self.meta
                .insert(CHECKPOINT, serde_json::to_vec(&checkpoint)?)?;
            self.meta.insert(BYTES, &bytes.to_be_bytes())?;
            self.db.flush()?;
            let first_kept = match self.blocks.first()? {
                Some((_, v)) => Some(Location::from_bytes(&v).ok_or(StoreError::Entry)?.segment),
                None => None,
            };
            self.segments.remove_before(first_kept)?;
        }
        Ok(removed)
    }

    /// Walks the chain: consecutive sequence numbers from the checkpoint, each record's
    /// `prev_hash` equal to the previous hash, each hash recomputed, each block under its first
    /// record's key, and the last record equal to the head.
    /// Reports the first break at the position where the chain stops being whole.
    pub fn verify(&self) -> Result<Verification, StoreError> {
        let start = self.checkpoint()?.unwrap_or_default();
        let first_seq = start.next_seq;
        let mut expected = start;
        let mut checked = 0;
        let broke = |checked, seq, problem: String| Verification {
            ok: false,
            checked,
            first_seq,
            first_break: Some(Break { seq, problem }),
        };
        for entry in self.blocks.iter() {
            let (key, value) = entry?;
            let at = expected.next_seq;
            let block = match self.read(&value) {
                Ok(b) => b,
                Err(e) => return Ok(broke(checked, at, format!("a block is not readable: {e}"))),
            };
            for record in &block {
                let at = expected.next_seq;
                if record.seq > at {
                    let problem = format!(
                        "record #{} appears where #{at} belongs: records are missing or moved",
                        record.seq
                    );
                    return Ok(broke(checked, at, problem));
                }
                if record.seq < at {
                    let problem =
                        format!("record #{} appears after #{} (moved)", record.seq, at - 1);
                    return Ok(broke(checked, record.seq, problem));
                }
                if record.prev_hash != expected.last_hash {
                    let problem =
                        "its prev_hash does not match the previous record (reordered or replaced)";
                    return Ok(broke(checked, at, problem.into()));
                }
                if record.compute_hash() != record.hash {
                    let problem = "its content does not match its hash (edited)";
                    return Ok(broke(checked, at, problem.into()));
                }
                expected = head_after(record);
                checked += 1;
            }
            if let Some(first) = block.first() {
                if key.as_ref() != block_key(first.ts_us, first.seq) {
                    let problem = format!(
                        "the block holding #{} is not under its own key (moved)",
                        first.seq
                    );
                    return Ok(broke(checked, first.seq, problem));
                }
            }
        }
        if let Some(head) = self.meta.get(HEAD)? {
            let head: Head = serde_json::from_slice(&head)?;
            if head.next_seq != expected.next_seq || head.last_hash != expected.last_hash {
                let problem = format!(
                    "the log ends at #{} but #{} was written (records removed from the end)",
                    expected.next_seq.saturating_sub(1),
                    head.next_seq.saturating_sub(1)
                );
                return Ok(broke(checked, expected.next_seq, problem));
            }
        }
        Ok(Verification {
            ok: true,
            checked,
            first_seq,
            first_break: None,
        })
    }
}

fn counter(v: Option<&[u8]>) -> u64 {
    v.and_then(|v| v.try_into().ok())
        .map_or(0, u64::from_be_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::record::{Kind, Outcome};

    fn batch(n: usize, upstream: &str) -> Vec<Record> {
        (0..n)
            .map(|i| {
                let mut r = Record::new(Kind::Request, "tools/call", Outcome::Ok);
                r.upstream = Some(upstream.to_owned());
                r.target = Some(format!("{upstream}__tool{i}"));
                r
            })
            .collect()
    }

    fn seqs(store: &Store) -> Vec<u64> {
        let mut seqs = Vec::new();
        for entry in store.blocks().iter() {
            let (_, v) = entry.unwrap_or_else(|e| panic!("{e}"));
            let block = store.read(&v).unwrap_or_else(|e| panic!("{e}"));
            seqs.extend(block.iter().map(|r| r.seq));
        }
        seqs
    }

    fn upstream_is(upstream: &str) -> crate::audit::Filter {
        crate::audit::Filter {
            upstream: Some(upstream.to_owned()),
            ..Default::default()
        }
    }

    fn ok<T, E: std::fmt::Display>(r: Result<T, E>) -> T {
        r.unwrap_or_else(|e| panic!("{e}"))
    }

    /// sled's log lags the segments: blocks whose entries were lost (a kill before sled wrote
    /// them) are indexed again at open; a torn line after them is left out, and appending goes
    /// on from the last whole record.
    #[test]
    fn open_indexes_blocks_sled_lost_and_skips_a_torn_tail() {
        let dir = ok(tempfile::tempdir());
        let mut head = Head::default();
        {
            let store = ok(Store::open(dir.path()));
            for upstream in ["a", "b", "c"] {
                ok(store.append(batch(4, upstream), &mut head));
            }
            ok(store.flush());
            // The last two blocks' entries and index entries vanish, as if sled never wrote them.
            let keys: Vec<_> = store.blocks().iter().keys().skip(1).map(ok).collect();
            for key in keys {
                ok(store.blocks().remove(key));
            }
            let lost: Vec<_> = store.index().iter().keys().map(ok).collect();
            for key in lost.iter().filter(|k| !k.starts_with(b"ua\0")) {
                ok(store.index().remove(key));
            }
            ok(store.flush());
        }
        let segment = ok(std::fs::read_dir(dir.path().join("segments")))
            .map(|e| ok(e).path())
            .next()
            .unwrap_or_default();
        let mut torn = ok(std::fs::OpenOptions::new().append(true).open(&segment));
        ok(std::io::Write::write_all(
            &mut torn,
            br#"{"seq":12,"ts_us":"#,
        ));
        drop(torn);

        let store = ok(Store::open(dir.path()));
        assert_eq!(seqs(&store), (0..12).collect::<Vec<_>>());
        let page = ok(store.query(&upstream_is("c")));
        assert_eq!(page.records.len(), 4, "the recovered block is indexed");
        let mut head = ok(store.head());
        assert_eq!(head.next_seq, 12);
        ok(store.append(batch(2, "d"), &mut head));
        let verified = ok(store.verify());
        assert!(verified.ok, "{verified:?}");
        assert_eq!(verified.checked, 14);
        assert_eq!(seqs(&store), (0..14).collect::<Vec<_>>());
    }

    fn segment_files(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = ok(std::fs::read_dir(dir.join("segments")))
            .map(|e| ok(e).file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    /// Retention removes whole blocks from the old end — by size, then by age — and the segments
    /// no block points into; the chain verifies from the checkpoint, before and after new records.
    #[test]
    fn retention_prunes_old_blocks_and_segments_and_the_chain_still_verifies() {
        let dir = ok(tempfile::tempdir());
        let mut head = Head::default();
        // Three opens: three segments, with two blocks of 5 records each.
        for (i, upstream) in ["a", "b", "c"].into_iter().enumerate() {
            let store = ok(Store::open(dir.path()));
            for _ in 0..2 {
                let mut block = batch(5, upstream);
                for r in &mut block {
                    r.ts_us = 1_000_000 * (i as u64 + 1);
                }
                ok(store.append(block, &mut head));
            }
            ok(store.flush());
        }
        let store = ok(Store::open(dir.path()));
        assert_eq!(segment_files(dir.path()).len(), 3);
        let lens: Vec<u64> = (store.blocks().iter().values().map(ok))
            .filter_map(|v| Location::from_bytes(&v))
            .map(|at| u64::from(at.len))
            .collect();
        assert_eq!(lens.iter().sum::<u64>(), store.bytes());

        // By size: keep at most the last four blocks' bytes → the first segment's two blocks go.
        let (first_key, first_entry) = ok(store.blocks().first()).unwrap_or_default();
        assert_eq!(ok(store.prune(0, lens[2..].iter().sum())), 10);
        // A query that read the entry before retention removed the block skips it.
        assert!(ok(store.read_live(&first_key, &first_entry)).is_none());
        assert_eq!(seqs(&store), (10..30).collect::<Vec<_>>());
        assert_eq!(
            segment_files(dir.path()),
            vec![format!("{:020}.log", 10), format!("{:020}.log", 20)]
        );
        let verified = ok(store.verify());
        assert!(
            verified.ok && verified.first_seq == 10 && verified.checked == 20,
            "{verified:?}"
        );
        assert!(ok(store.query(&upstream_is("a"))).records.is_empty());
        assert!(
            !store
                .index()
                .iter()
                .keys()
                .map(ok)
                .any(|k| k.starts_with(b"ua\0"))
        );

        // By age: records before t = 3 s go.
        assert_eq!(ok(store.prune(3_000_000, u64::MAX)), 10);
        assert_eq!(seqs(&store), (20..30).collect::<Vec<_>>());
        assert_eq!(store.len(), 10);
        let mut head = ok(store.head());
        ok(store.append(batch(3, "d"), &mut head));
        let verified = ok(store.verify());
        assert!(
            verified.ok && verified.first_seq == 20 && verified.checked == 13,
            "{verified:?}"
        );

        // Reopened, the store continues from the same place.
        drop(store);
        let store = ok(Store::open(dir.path()));
        assert_eq!(ok(store.head()).next_seq, 33);
        assert!(ok(store.verify()).ok);
    }
}
