//! The audit store in sled. Trees:
//! - `records`: seq (big-endian) → record JSON, the hash chain in order;
//! - `by_time`: ts‖seq → (), so a time range is one range scan;
//! - `by_upstream`, `by_tool`, `by_session`: value‖0‖ts‖seq → ();
//! - `meta`: the head (last seq and hash), the checkpoint retention prunes to, the byte count.
//!
//! Only the writer thread appends and prunes; queries read concurrently.

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
    #[error("audit store: a record is not readable: {0}")]
    Decode(#[from] serde_json::Error),
}

/// Where the chain continues from: the next sequence number and the previous hash.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Head {
    pub next_seq: u64,
    pub last_hash: String,
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

#[derive(Clone)]
pub struct Store {
    db: sled::Db,
    records: sled::Tree,
    by_time: sled::Tree,
    by_upstream: sled::Tree,
    by_tool: sled::Tree,
    by_session: sled::Tree,
    meta: sled::Tree,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("records", &self.records.len())
            .finish()
    }
}

const HEAD: &[u8] = b"head";
const CHECKPOINT: &[u8] = b"checkpoint";
const BYTES: &[u8] = b"bytes";

impl Store {
    pub fn open(dir: &Path) -> Result<Self, StoreError> {
        let db = sled::Config::new()
            .path(dir)
            .mode(sled::Mode::HighThroughput)
            .open()
            .map_err(|source| StoreError::Open {
                path: dir.display().to_string(),
                source,
            })?;
        Ok(Self {
            records: db.open_tree("records")?,
            by_time: db.open_tree("by_time")?,
            by_upstream: db.open_tree("by_upstream")?,
            by_tool: db.open_tree("by_tool")?,
            by_session: db.open_tree("by_session")?,
            meta: db.open_tree("meta")?,
            db,
        })
    }

    /// Where appending continues: after the last record (or the retention checkpoint).
    pub fn head(&self) -> Result<Head, StoreError> {
        if let Some((key, value)) = self.records.last()? {
            let last: Record = serde_json::from_slice(&value)?;
            return Ok(Head {
                next_seq: seq_of(&key) + 1,
                last_hash: last.hash,
            });
        }
        Ok(self.checkpoint()?.unwrap_or_default())
    }

    /// Numbers, chains and writes `batch`; `head` moves past it.
    pub fn append(&self, batch: Vec<Record>, head: &mut Head) -> Result<(), StoreError> {
        let mut bytes_added = 0u64;
        let (mut records, mut by_time) = (sled::Batch::default(), sled::Batch::default());
        let (mut by_upstream, mut by_tool, mut by_session) = (
            sled::Batch::default(),
            sled::Batch::default(),
            sled::Batch::default(),
        );
        for mut record in batch {
            record.seq = head.next_seq;
            record.prev_hash = std::mem::take(&mut head.last_hash);
            record.hash = record.compute_hash();
            let json = serde_json::to_vec(&record)?;
            bytes_added += json.len() as u64;
            let tail = time_key(record.ts_us, record.seq);
            records.insert(&record.seq.to_be_bytes(), json);
            by_time.insert(&tail, &[]);
            if let Some(u) = &record.upstream {
                by_upstream.insert(index_key(u, &tail), &[]);
            }
            if let Some(t) = &record.target {
                by_tool.insert(index_key(t, &tail), &[]);
            }
            if let Some(s) = &record.session {
                by_session.insert(index_key(s, &tail), &[]);
            }
            head.next_seq += 1;
            head.last_hash = record.hash;
        }
        self.records.apply_batch(records)?;
        self.by_time.apply_batch(by_time)?;
        self.by_upstream.apply_batch(by_upstream)?;
        self.by_tool.apply_batch(by_tool)?;
        self.by_session.apply_batch(by_session)?;
        self.meta.insert(HEAD, serde_json::to_vec(head)?)?;
        self.meta
            .update_and_fetch(BYTES, |old| Some(add_u64(old, bytes_added as i64).to_vec()))?;
        Ok(())
    }

    /// Makes everything written so far durable.
    pub fn flush(&self) -> Result<(), StoreError> {
        self.db.flush()?;
        Ok(())
    }

    pub fn get(&self, seq: u64) -> Result<Option<Record>, StoreError> {
        match self.records.get(seq.to_be_bytes())? {
            Some(v) => Ok(Some(serde_json::from_slice(&v)?)),
            None => Ok(None),
        }
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Bytes of record JSON stored.
    pub fn bytes(&self) -> u64 {
        self.meta
            .get(BYTES)
            .ok()
            .flatten()
            .map_or(0, |v| u64::from_be_bytes(add_u64(Some(&v), 0)))
    }

    fn checkpoint(&self) -> Result<Option<Head>, StoreError> {
        match self.meta.get(CHECKPOINT)? {
            Some(v) => Ok(Some(serde_json::from_slice(&v)?)),
            None => Ok(None),
        }
    }

    /// Removes records from the old end while older than `min_ts_us` or while the store holds
    /// more than `max_bytes`; the chain stays verifiable from the recorded checkpoint.
    pub fn prune(&self, min_ts_us: u64, max_bytes: u64) -> Result<usize, StoreError> {
        let mut removed = 0;
        let mut bytes = self.bytes();
        let mut checkpoint = None;
        for entry in self.records.iter() {
            let (key, value) = entry?;
            let record: Record = serde_json::from_slice(&value)?;
            if record.ts_us >= min_ts_us && bytes <= max_bytes {
                break;
            }
            let tail = time_key(record.ts_us, record.seq);
            self.records.remove(&key)?;
            self.by_time.remove(tail)?;
            if let Some(u) = &record.upstream {
                self.by_upstream.remove(index_key(u, &tail))?;
            }
            if let Some(t) = &record.target {
                self.by_tool.remove(index_key(t, &tail))?;
            }
            if let Some(s) = &record.session {
                self.by_session.remove(index_key(s, &tail))?;
            }
            bytes = bytes.saturating_sub(value.len() as u64);
            checkpoint = Some(Head {
                next_seq: record.seq + 1,
                last_hash: record.hash,
            });
            removed += 1;
        }
        if let Some(checkpoint) = checkpoint {
            self.meta
                .insert(CHECKPOINT, serde_json::to_vec(&checkpoint)?)?;
            self.meta.insert(BYTES, &bytes.to_be_bytes())?;
        }
        Ok(removed)
    }

    /// Walks the chain: consecutive sequence numbers from the checkpoint, each record's
    /// `prev_hash` equal to the previous hash, each hash recomputed, the last equal to the head.
    pub fn verify(&self) -> Result<Verification, StoreError> {
        let start = self.checkpoint()?.unwrap_or_default();
        let mut expected = start.clone();
        let mut checked = 0;
        let first_seq = start.next_seq;
        let broke = |checked, seq, problem: String| Verification {
            ok: false,
            checked,
            first_seq,
            first_break: Some(Break { seq, problem }),
        };
        for entry in self.records.iter() {
            let (key, value) = entry?;
            let key_seq = seq_of(&key);
            let record: Record = match serde_json::from_slice(&value) {
                Ok(r) => r,
                Err(e) => {
                    return Ok(broke(
                        checked,
                        key_seq,
                        format!("record is not readable: {e}"),
                    ));
                }
            };
            if key_seq != expected.next_seq {
                let problem = format!(
                    "records {}..{} are missing",
                    expected.next_seq,
                    key_seq.saturating_sub(1)
                );
                return Ok(broke(checked, expected.next_seq, problem));
            }
            if record.seq != key_seq {
                return Ok(broke(
                    checked,
                    key_seq,
                    format!("record says it is #{} (moved)", record.seq),
                ));
            }
            if record.prev_hash != expected.last_hash {
                return Ok(broke(
                    checked,
                    key_seq,
                    "its prev_hash does not match the previous record (reordered or replaced)"
                        .into(),
                ));
            }
            if record.compute_hash() != record.hash {
                return Ok(broke(
                    checked,
                    key_seq,
                    "its content does not match its hash (edited)".into(),
                ));
            }
            expected = Head {
                next_seq: key_seq + 1,
                last_hash: record.hash,
            };
            checked += 1;
        }
        if let Some(head) = self.meta.get(HEAD)? {
            let head: Head = serde_json::from_slice(&head)?;
            if head != expected {
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
            first_seq: start.next_seq,
            first_break: None,
        })
    }

    pub(super) fn by_time(&self) -> &sled::Tree {
        &self.by_time
    }

    /// The index for one field, and the key prefix for `value`.
    pub(super) fn index(&self, field: IndexField, value: &str) -> (&sled::Tree, Vec<u8>) {
        let tree = match field {
            IndexField::Upstream => &self.by_upstream,
            IndexField::Tool => &self.by_tool,
            IndexField::Session => &self.by_session,
        };
        let mut prefix = value.as_bytes().to_vec();
        prefix.push(0);
        (tree, prefix)
    }
}

/// The indexed fields.
#[derive(Debug, Clone, Copy)]
pub(super) enum IndexField {
    Upstream,
    Tool,
    Session,
}

pub(super) fn time_key(ts_us: u64, seq: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&ts_us.to_be_bytes());
    k[8..].copy_from_slice(&seq.to_be_bytes());
    k
}

fn index_key(value: &str, tail: &[u8; 16]) -> Vec<u8> {
    let mut k = Vec::with_capacity(value.len() + 17);
    k.extend_from_slice(value.as_bytes());
    k.push(0);
    k.extend_from_slice(tail);
    k
}

fn seq_of(key: &[u8]) -> u64 {
    key.try_into().map(u64::from_be_bytes).unwrap_or(0)
}

fn add_u64(old: Option<&[u8]>, delta: i64) -> [u8; 8] {
    let old = old
        .and_then(|v| v.try_into().ok())
        .map(u64::from_be_bytes)
        .unwrap_or(0);
    old.saturating_add_signed(delta).to_be_bytes()
}
