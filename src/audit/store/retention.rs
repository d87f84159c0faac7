//! Retention: blocks leave from the old end by age and by size, then the segments nothing points
//! into; the checkpoint records where the chain now starts, so it stays verifiable.

use std::collections::HashSet;
use std::io::BufRead;

use super::keys::{BYTES, CHECKPOINT, IndexedFields};
use super::{Head, Store, StoreError, head_after};
use crate::audit::record::Record;
use crate::audit::segment::Location;

/// What retention reads of a block.
struct Skimmed {
    last: Record,
    /// Its index entries' prefixes.
    prefixes: HashSet<Vec<u8>>,
    records: usize,
}

impl Store {
    /// Where the chain starts after retention (`None`: nothing was ever pruned).
    pub(super) fn checkpoint(&self) -> Result<Option<Head>, StoreError> {
        match self.meta.get(CHECKPOINT)? {
            Some(v) => Ok(Some(serde_json::from_slice(&v)?)),
            None => Ok(None),
        }
    }

    /// What retention needs of the block at `at` (`None`: it holds no record), read a line at a
    /// time.
    fn skim(&self, at: Location) -> Result<Option<Skimmed>, StoreError> {
        let mut reader = self.segments.reader(at)?;
        let (mut line, mut last) = (Vec::new(), Vec::new());
        let mut prefixes = HashSet::new();
        let mut records = 0;
        loop {
            line.clear();
            if reader.read_until(b'\n', &mut line)? == 0 {
                break;
            }
            let text = line.strip_suffix(b"\n").unwrap_or(&line);
            if text.is_empty() {
                continue;
            }
            let fields: IndexedFields = serde_json::from_slice(text)?;
            for prefix in fields.prefixes() {
                prefixes.insert(prefix);
            }
            records += 1;
            std::mem::swap(&mut line, &mut last);
        }
        if records == 0 {
            return Ok(None);
        }
        let last = serde_json::from_slice(last.strip_suffix(b"\n").unwrap_or(&last))?;
        Ok(Some(Skimmed {
            last,
            prefixes,
            records,
        }))
    }

    /// Removes blocks from the old end while their records are older than `min_ts_us` or while
    /// the store holds more than `max_bytes`, then the segments nothing points into any more;
    /// the chain stays verifiable from the checkpoint. A removed block is read a line at a time
    /// for its index entries and its last record only ([`Store::skim`]): once a busy store is
    /// full, each pass removes about a minute of records, and decoding every one of them whole
    /// took the syncer seconds and the daemon megabytes.
    pub fn prune(&self, min_ts_us: u64, max_bytes: u64) -> Result<usize, StoreError> {
        let mut removed = 0;
        let mut bytes = self.bytes();
        let mut checkpoint = None;
        for entry in self.blocks.iter() {
            let (key, value) = entry?;
            let at = Location::from_bytes(&value).ok_or(StoreError::Entry)?;
            let Some(block) = self.skim(at)? else {
                continue;
            };
            if block.last.ts_us >= min_ts_us && bytes <= max_bytes {
                break;
            }
            let mut index_bytes = 0;
            for mut k in block.prefixes {
                k.extend_from_slice(&key);
                index_bytes += k.len() as u64;
                self.index.remove(k)?;
            }
            self.blocks.remove(&key)?;
            bytes = bytes.saturating_sub(u64::from(at.len) + index_bytes);
            checkpoint = Some(head_after(&block.last));
            removed += block.records;
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
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::audit::store::test_support::{batch, ok, seqs, upstream_is};

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
        // A block's bytes: its lines and its index entries' keys (the block's key ends each).
        let sizes: Vec<u64> = (store.blocks().iter().map(ok))
            .map(|(key, v)| {
                let at = Location::from_bytes(&v).unwrap_or_else(|| panic!("a location"));
                let index: u64 = (store.index().iter().keys().map(ok))
                    .filter(|k| k.ends_with(&key))
                    .map(|k| k.len() as u64)
                    .sum();
                u64::from(at.len) + index
            })
            .collect();
        assert_eq!(sizes.iter().sum::<u64>(), store.bytes());

        // By size: keep at most the last four blocks' bytes → the first segment's two blocks go.
        let (first_key, first_entry) = ok(store.blocks().first()).unwrap_or_default();
        assert_eq!(ok(store.prune(0, sizes[2..].iter().sum())), 10);
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
