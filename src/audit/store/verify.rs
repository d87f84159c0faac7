//! `mcpmux audit verify`: walking the hash chain from the checkpoint to the head and naming the
//! first record where it stops being whole.

use serde::{Deserialize, Serialize};

use super::keys::{HEAD, block_key};
use super::{Head, Store, StoreError, head_after};

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

impl Store {
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
