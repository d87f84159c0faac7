//! Records sealed in chain order, waiting for the writer: the chain's head, and the batch whose
//! buffers hold their lines back to back and what the store indexes of each.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::body::Body;
use super::record::{Record, hex_into};

/// Records sealed in chain order and waiting to be stored: their lines back to back in one
/// buffer (a block's bytes as they go to its segment) and, beside it, what the store keeps of
/// each. Sealing writes into buffers that stay allocated from one batch to the next, so a record
/// costs the writer no allocation to free (freeing what request threads allocated took a
/// quarter of the writer's time, and their arenas' locks with it).
#[derive(Debug, Default)]
pub struct Batch {
    /// Each record's JSON and a newline, in sequence order.
    lines: Vec<u8>,
    seals: Vec<Seal>,
    /// The indexed fields' text (upstream, tool, session) of every record, back to back.
    fields: String,
}

/// One record of a [`Batch`]: its place in the chain, where its line ends and where its indexed
/// fields are.
#[derive(Debug, Clone, Copy)]
struct Seal {
    link: Link,
    /// The end of its line in [`Batch::lines`] (its start is the previous one's end).
    end: usize,
    /// Its upstream, tool and session, as ranges of [`Batch::fields`].
    fields: [Option<(u32, u32)>; 3],
}

/// How much of a batch's buffers is kept once it is stored: a busy load's batch window (about
/// a hundred records of 350–600 bytes at 20 000 calls/s); what a burst grew them to is given back
/// (a kept 256 KiB buffer stayed resident, a mapping of its own, in each of the two batches).
const KEPT_RECORDS: usize = 128;
const KEPT_LINE_BYTES: usize = 64 * 1024;
const KEPT_FIELD_BYTES: usize = 4 * 1024;

impl Batch {
    /// `records` chained after `head`, in their order; `head` moves past them.
    pub fn sealed(records: impl IntoIterator<Item = Record>, head: &mut Head) -> Self {
        let mut batch = Self::default();
        for record in records {
            batch.seal(&Body::of(record), head);
        }
        batch
    }

    /// Chains `body` after `head` and appends it: the record gets the next sequence number, a
    /// time no earlier than the last one (so time order is sequence order), and the hash of the
    /// previous hash followed by its canonical encoding (its JSON with `hash` empty), as
    /// [`Record::compute_hash`] recomputes it. `head` moves past it.
    pub fn seal(&mut self, body: &Body<'_>, head: &mut Head) {
        let (seq, ts_us) = (head.next_seq, body.ts_us.max(head.last_ts));
        let start = self.lines.len();
        let mut number = itoa::Buffer::new();
        self.lines.extend_from_slice(br#"{"seq":"#);
        self.lines.extend_from_slice(number.format(seq).as_bytes());
        self.lines.extend_from_slice(br#","ts_us":"#);
        self.lines
            .extend_from_slice(number.format(ts_us).as_bytes());
        self.lines.push(b',');
        self.lines.extend_from_slice(body.body());
        self.lines.extend_from_slice(br#","prev_hash":""#);
        self.lines.extend_from_slice(head.last_hash.as_bytes());
        self.lines.extend_from_slice(br#"","hash":""#);
        let mut h = Sha256::new();
        h.update(head.last_hash.as_bytes());
        h.update(self.lines.get(start..).unwrap_or_default());
        h.update(b"\"}");
        let mut hash = [0u8; 64];
        hex_into(&mut hash, &h.finalize());
        self.lines.extend_from_slice(&hash);
        self.lines.extend_from_slice(b"\"}\n");
        let mut field = |value: &Option<std::borrow::Cow<'_, str>>| {
            let value = value.as_deref()?;
            let from = u32::try_from(self.fields.len()).ok()?;
            self.fields.push_str(value);
            Some((from, u32::try_from(self.fields.len()).ok()?))
        };
        let fields = [
            field(&body.upstream),
            field(&body.target),
            field(&body.session),
        ];
        let link = Link { seq, ts_us, hash };
        self.seals.push(Seal {
            link,
            end: self.lines.len(),
            fields,
        });
        head.follow(&link);
    }

    pub fn len(&self) -> usize {
        self.seals.len()
    }

    /// Every record's JSON and a newline, in sequence order.
    pub fn lines(&self) -> &[u8] {
        &self.lines
    }

    pub fn is_empty(&self) -> bool {
        self.seals.is_empty()
    }

    /// Forgets its records, keeping the buffers' room for the next batch (up to a busy window's).
    pub fn clear(&mut self) {
        self.lines.clear();
        self.seals.clear();
        self.fields.clear();
        self.lines.shrink_to(KEPT_LINE_BYTES);
        self.seals.shrink_to(KEPT_RECORDS);
        self.fields.shrink_to(KEPT_FIELD_BYTES);
    }

    /// Its records `from..to` (in sequence order) as one block.
    pub fn block(&self, records: std::ops::Range<usize>) -> Block<'_> {
        let records = records.start.min(self.len())..records.end.min(self.len());
        Block {
            batch: self,
            records,
        }
    }

    /// All of it as blocks of at most `max` records.
    pub fn blocks(&self, max: usize) -> impl Iterator<Item = Block<'_>> {
        let max = max.max(1);
        (0..self.len())
            .step_by(max)
            .map(move |from| self.block(from..from + max))
    }
}

/// Consecutive records of a [`Batch`]: what the store writes as one block.
#[derive(Debug, Clone)]
pub struct Block<'a> {
    batch: &'a Batch,
    records: std::ops::Range<usize>,
}

impl<'a> Block<'a> {
    fn seals(&self) -> &'a [Seal] {
        self.batch
            .seals
            .get(self.records.clone())
            .unwrap_or_default()
    }

    /// Its records' lines, back to back.
    pub fn bytes(&self) -> &'a [u8] {
        let start = match self.records.start {
            0 => 0,
            i => self.batch.seals.get(i - 1).map_or(0, |s| s.end),
        };
        let end = self.seals().last().map_or(start, |s| s.end);
        self.batch.lines.get(start..end).unwrap_or_default()
    }

    /// Its first record's place in the chain.
    pub fn first(&self) -> Option<Link> {
        self.seals().first().map(|s| s.link)
    }

    /// Its last record's place in the chain.
    pub fn last(&self) -> Option<Link> {
        self.seals().last().map(|s| s.link)
    }

    /// Each record's upstream, tool and session.
    pub fn fields(&self) -> impl Iterator<Item = [Option<&'a str>; 3]> {
        let text = self.batch.fields.as_str();
        self.seals().iter().map(move |s| {
            s.fields.map(|range| {
                let (from, to) = range?;
                text.get(usize::try_from(from).ok()?..usize::try_from(to).ok()?)
            })
        })
    }

    /// Each of its records as a block of its own.
    pub fn singles(&self) -> impl Iterator<Item = Block<'a>> {
        let batch = self.batch;
        self.records.clone().map(move |i| batch.block(i..i + 1))
    }
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

impl Head {
    /// The head once `link` is the last record.
    pub fn after(link: &Link) -> Self {
        let mut head = Self::default();
        head.follow(link);
        head
    }

    /// Moves on to the record `link` names, in place (the hash's room is reused).
    pub fn follow(&mut self, link: &Link) {
        self.next_seq = link.seq + 1;
        self.last_ts = link.ts_us;
        self.last_hash.clear();
        self.last_hash.push_str(link.hash());
    }
}

/// A sealed record's sequence number, time and hash.
#[derive(Debug, Clone, Copy)]
pub struct Link {
    pub seq: u64,
    pub ts_us: u64,
    hash: [u8; 64],
}

impl Link {
    pub fn hash(&self) -> &str {
        std::str::from_utf8(&self.hash).unwrap_or_default()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::audit::{Ended, Kind, Record, hex};
    use crate::jsonrpc::raw;

    #[test]
    fn a_batch_is_cut_into_blocks_of_whole_lines_with_their_fields() {
        let mut head = Head::default();
        let mut batch = Batch::default();
        for i in 0..5 {
            let mut r = Record::new(Kind::Request, "tools/call", Ended::Ok);
            r.upstream = Some(format!("up{i}"));
            r.session = (i % 2 == 0).then(|| "a \"quoted\" session".to_owned());
            batch.seal(&Body::of(r), &mut head);
        }
        assert_eq!((batch.len(), head.next_seq), (5, 5));
        let blocks: Vec<Block<'_>> = batch.blocks(2).collect();
        let sizes: Vec<usize> = blocks.iter().map(|b| b.fields().count()).collect();
        assert_eq!(sizes, [2, 2, 1]);
        let mut seqs = Vec::new();
        for block in &blocks {
            let lines: Vec<&[u8]> = block.bytes().split_inclusive(|b| *b == b'\n').collect();
            for (line, fields) in lines.iter().zip(block.fields()) {
                let stored: Record = serde_json::from_slice(line).unwrap();
                assert_eq!(
                    fields,
                    [stored.upstream.as_deref(), None, stored.session.as_deref()]
                );
                seqs.push(stored.seq);
            }
            assert_eq!(
                block.first().unwrap().seq,
                *seqs.get(seqs.len() - lines.len()).unwrap()
            );
            assert_eq!(block.last().unwrap().seq, *seqs.last().unwrap());
        }
        assert_eq!(seqs, [0, 1, 2, 3, 4]);
        let whole = batch.block(0..batch.len());
        let singles: Vec<u8> = whole.singles().flat_map(|b| b.bytes().to_vec()).collect();
        assert_eq!(singles, whole.bytes(), "one block or five, the same bytes");
        assert_eq!(whole.last().unwrap().hash(), head.last_hash);
        batch.clear();
        assert!(batch.is_empty() && batch.block(0..1).bytes().is_empty());
    }

    #[test]
    fn sealed_line_is_the_record_and_its_hash_is_over_the_canonical_encoding() {
        let mut r = Record::event("upstream.crashed", Some("fs"), None, Some("exit 1".into()));
        r.args = Some(raw(r#"{"q": "a \"quoted\" value"}"#.into()));
        r.ts_us = 1_000;
        let prev = "ab".repeat(32);
        let mut head = Head {
            next_seq: 7,
            last_hash: prev.clone(),
            last_ts: 2_000,
        };
        let mut batch = Batch::default();
        batch.seal(&Body::of(r.clone()), &mut head);
        let block = batch.block(0..1);
        let sealed = block.last().unwrap();
        assert_eq!(
            (sealed.seq, sealed.ts_us),
            (7, 2_000),
            "time never goes back"
        );
        assert_eq!(
            (head.next_seq, head.last_hash.as_str(), head.last_ts),
            (8, sealed.hash(), 2_000),
            "the head moves past it"
        );
        let fields: Vec<_> = block.fields().collect();
        assert_eq!(fields, [[Some("fs"), None, None]]);
        let line = block.bytes().strip_suffix(b"\n").unwrap_or_default();
        let stored: Record = serde_json::from_slice(line).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(stored.hash, sealed.hash());
        assert_eq!(stored.prev_hash, prev);
        assert_eq!(stored.compute_hash(), sealed.hash());
        // The canonical encoding, spelled out: the record with its chain fields and `hash` empty.
        r.seq = 7;
        r.ts_us = 2_000;
        r.prev_hash.clone_from(&prev);
        let mut h = Sha256::new();
        h.update(prev.as_bytes());
        h.update(serde_json::to_vec(&r).unwrap_or_default());
        assert_eq!(hex(&h.finalize()), sealed.hash());
        assert_eq!(hex(&[0x00, 0x9f, 0xff]), "009fff");
    }
}
