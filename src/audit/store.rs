//! The audit store in sled. Records are written in blocks — one sled entry per batch the writer
//! commits — so a busy gateway costs a few sled operations per batch, not per record.
//!
//! Trees:
//! - `blocks`: first_ts‖first_seq (big-endian) → the JSON array of the block's records. Record
//!   times are kept non-decreasing by the writer, so key order is both time and sequence order:
//!   a time range is one range scan.
//! - `index`: field tag‖value‖0‖block key → (), for upstream (`u`), tool (`t`) and session (`s`),
//!   one entry per block that holds such a record.
//! - `meta`: the head (next seq, last hash, last time), the checkpoint retention prunes to, the
//!   byte count.
//!
//! Only the writer thread appends and prunes; queries read concurrently.

use std::collections::BTreeSet;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::record::Record;

/// What went wrong with the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "cannot open the audit store at {path}: {source} (another mcpmux may have it open; use its admin API)"
    )]
    Open { path: String, source: sled::Error },
    #[error("audit store: {0}")]
    Sled(#[from] sled::Error),
    #[error("audit store: a block is not readable: {0}")]
    Decode(#[from] serde_json::Error),
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
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("blocks", &self.blocks.len())
            .finish()
    }
}

/// sled's page cache (its default, 1 GiB, would let the daemon grow far beyond its budget).
const CACHE_BYTES: u64 = 8 * 1024 * 1024;

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

/// The index entries a block needs: one per distinct indexed value.
fn index_entries(records: &[Record], block: &[u8; 16]) -> BTreeSet<Vec<u8>> {
    let mut keys = BTreeSet::new();
    for r in records {
        let fields = [
            (IndexField::Upstream, &r.upstream),
            (IndexField::Tool, &r.target),
            (IndexField::Session, &r.session),
        ];
        for (field, value) in fields {
            if let Some(value) = value {
                keys.insert(index_key(field, value, block));
            }
        }
    }
    keys
}

impl Store {
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        let db = sled::Config::new()
            .path(dir)
            .mode(sled::Mode::HighThroughput)
            // Recent blocks are what queries read; older ones come from disk. Keeps the daemon small.
            .cache_capacity(CACHE_BYTES)
            .open()
            .map_err(|source| StoreError::Open {
                path: dir.display().to_string(),
                source,
            })?;
        Ok(Self {
            blocks: db.open_tree("blocks")?,
            index: db.open_tree("index")?,
            meta: db.open_tree("meta")?,
            db,
        })
    }

    /// Where appending continues: after the last record (or the retention checkpoint).
    pub fn head(&self) -> Result<Head, StoreError> {
        if let Some((_, value)) = self.blocks.last()? {
            let block: Vec<Record> = serde_json::from_slice(&value)?;
            if let Some(last) = block.last() {
                return Ok(Head {
                    next_seq: last.seq + 1,
                    last_hash: last.hash.clone(),
                    last_ts: last.ts_us,
                });
            }
        }
        Ok(self.checkpoint()?.unwrap_or_default())
    }

    /// Numbers, chains and writes `batch` as one block; `head` moves past it.
    pub fn append(&self, mut batch: Vec<Record>, head: &mut Head) -> Result<(), StoreError> {
        let Some(first_seq) = (!batch.is_empty()).then_some(head.next_seq) else {
            return Ok(());
        };
        for record in &mut batch {
            record.seq = head.next_seq;
            record.ts_us = record.ts_us.max(head.last_ts);
            record.prev_hash = std::mem::take(&mut head.last_hash);
            record.hash = record.compute_hash();
            head.next_seq += 1;
            head.last_ts = record.ts_us;
            head.last_hash.clone_from(&record.hash);
        }
        let key = block_key(batch[0].ts_us, first_seq);
        let value = serde_json::to_vec(&batch)?;
        let bytes = value.len() as u64;
        let mut index = sled::Batch::default();
        for k in index_entries(&batch, &key) {
            index.insert(k, &[]);
        }
        self.blocks.insert(key, value)?;
        self.index.apply_batch(index)?;
        self.meta.insert(HEAD, serde_json::to_vec(head)?)?;
        self.meta.update_and_fetch(BYTES, |old| {
            Some((counter(old) + bytes).to_be_bytes().to_vec())
        })?;
        Ok(())
    }

    /// Makes everything written so far durable.
    pub fn flush(&self) -> Result<(), StoreError> {
        self.db.flush()?;
        Ok(())
    }

    /// The records of the block at `key`, if it exists.
    pub(super) fn block(&self, key: &[u8]) -> Result<Option<Vec<Record>>, StoreError> {
        match self.blocks.get(key)? {
            Some(v) => Ok(Some(serde_json::from_slice(&v)?)),
            None => Ok(None),
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

    /// Bytes of record JSON stored.
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
    /// the store holds more than `max_bytes`; the chain stays verifiable from the checkpoint.
    pub fn prune(&self, min_ts_us: u64, max_bytes: u64) -> Result<usize, StoreError> {
        let mut removed = 0;
        let mut bytes = self.bytes();
        let mut checkpoint = None;
        for entry in self.blocks.iter() {
            let (key, value) = entry?;
            let block: Vec<Record> = serde_json::from_slice(&value)?;
            let Some(last) = block.last() else { continue };
            if last.ts_us >= min_ts_us && bytes <= max_bytes {
                break;
            }
            let block_key: [u8; 16] = key.as_ref().try_into().unwrap_or_default();
            for k in index_entries(&block, &block_key) {
                self.index.remove(k)?;
            }
            self.blocks.remove(&key)?;
            bytes = bytes.saturating_sub(value.len() as u64);
            checkpoint = Some(Head {
                next_seq: last.seq + 1,
                last_hash: last.hash.clone(),
                last_ts: last.ts_us,
            });
            removed += block.len();
        }
        if let Some(checkpoint) = checkpoint {
            self.meta
                .insert(CHECKPOINT, serde_json::to_vec(&checkpoint)?)?;
            self.meta.insert(BYTES, &bytes.to_be_bytes())?;
        }
        Ok(removed)
    }

    /// Walks the chain: consecutive sequence numbers from the checkpoint, each record's
    /// `prev_hash` equal to the previous hash, each hash recomputed, each block under its first
    /// record's key, and the last record equal to the head. Reports the first break at the
    /// position where the chain stops being whole.
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
            let block: Vec<Record> = match serde_json::from_slice(&value) {
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
                expected = Head {
                    next_seq: at + 1,
                    last_hash: record.hash.clone(),
                    last_ts: record.ts_us,
                };
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
