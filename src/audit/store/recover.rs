//! Crash recovery at open: sled writes its log lazily, so after a kill the last blocks' entries may
//! be missing while their bytes are safe in a segment. They are indexed again from the segments.

use super::keys::{block_key, index_entries, record_fields};
use super::{Store, StoreError, head_after};
use crate::audit::record::Record;
use crate::audit::segment::Location;

impl Store {
    /// Indexes the records that reached a segment but not sled: sled writes its log lazily, so
    /// after a kill the last blocks' entries may be missing while their bytes are on disk. Reads
    /// on from the end of the last indexed block (or the start of newer segments) and takes every
    /// whole line that continues the chain; the first that does not ends that segment's
    /// recovery (a torn write at a crash). Returns how many records came back.
    pub(super) fn recover(&self) -> Result<u64, StoreError> {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::batch::Head;
    use crate::audit::store::test_support::{batch, ok, seqs, upstream_is};

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
}
