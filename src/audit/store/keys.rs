//! How the store lays records out in sled.
//!
//! Trees:
//! - `blocks`: first_ts‖first_seq (big-endian) → where the block's bytes are (a
//!   [`Location`](crate::audit::segment::Location)). Record times are kept non-decreasing by the
//!   writer, so key order is both time and sequence order: a time range is one range scan.
//! - `index`: field tag‖value‖0‖block key → (), for upstream (`u`), tool (`t`) and session (`s`),
//!   one entry per block that holds such a record.
//! - `meta`: the head (next seq, last hash, last time), the checkpoint retention prunes to, the
//!   byte count.
//!
//! A block's bytes are its records as JSON lines, each carrying its hash and its predecessor's.

use std::collections::HashSet;

use serde::Deserialize;

use crate::audit::record::Record;

/// `meta` keys.
pub(super) const HEAD: &[u8] = b"head";
pub(super) const CHECKPOINT: &[u8] = b"checkpoint";
pub(super) const BYTES: &[u8] = b"bytes";

/// The indexed fields, by their key tag.
#[derive(Debug, Clone, Copy)]
pub(in crate::audit) enum IndexField {
    Upstream = b'u' as isize,
    Tool = b't' as isize,
    Session = b's' as isize,
}

/// A block's key: its first record's time and sequence number.
pub(in crate::audit) fn block_key(ts_us: u64, seq: u64) -> [u8; 16] {
    let mut k = [0u8; 16];
    k[..8].copy_from_slice(&ts_us.to_be_bytes());
    k[8..].copy_from_slice(&seq.to_be_bytes());
    k
}

pub(in crate::audit) fn index_prefix(field: IndexField, value: &str) -> Vec<u8> {
    let mut k = Vec::with_capacity(value.len() + 18);
    k.push(field as u8);
    k.extend_from_slice(value.as_bytes());
    k.push(0);
    k
}

/// The index entries a block needs: one per distinct indexed value. `fields` gives each
/// record's upstream, tool and session.
pub(super) fn index_entries<'a>(
    fields: impl Iterator<Item = [Option<&'a str>; 3]>,
    block: &[u8; 16],
) -> Vec<Vec<u8>> {
    let mut keys = index_prefixes(fields);
    for k in &mut keys {
        k.extend_from_slice(block);
    }
    keys
}

/// The distinct indexed values of `fields`, each as its entries' prefix ([`index_prefix`]): a
/// block's entries are these with its key appended.
pub(super) fn index_prefixes<'a>(
    fields: impl Iterator<Item = [Option<&'a str>; 3]>,
) -> Vec<Vec<u8>> {
    const FIELDS: [IndexField; 3] = [IndexField::Upstream, IndexField::Tool, IndexField::Session];
    let mut seen = HashSet::new();
    let mut prefixes = Vec::new();
    // Neighbours often share a value: comparing with the previous record's skips most hashing.
    let mut previous = [None; 3];
    for values in fields {
        for (i, value) in values.into_iter().enumerate() {
            let Some(value) = value else { continue };
            if previous[i] != Some(value) && seen.insert((i, value)) {
                prefixes.push(index_prefix(FIELDS[i], value));
            }
            previous[i] = Some(value);
        }
    }
    prefixes
}

pub(super) fn record_fields(r: &Record) -> [Option<&str>; 3] {
    [
        r.upstream.as_deref(),
        r.target.as_deref(),
        r.session.as_deref(),
    ]
}

/// A record's indexed fields, read from its line without decoding the rest of it.
#[derive(Debug, Deserialize)]
pub(super) struct IndexedFields {
    #[serde(default)]
    upstream: Option<String>,
    #[serde(default)]
    target: Option<String>,
    #[serde(default)]
    session: Option<String>,
}

impl IndexedFields {
    /// Its index entries' prefixes ([`index_prefix`]).
    pub(super) fn prefixes(&self) -> impl Iterator<Item = Vec<u8>> {
        [
            (IndexField::Upstream, &self.upstream),
            (IndexField::Tool, &self.target),
            (IndexField::Session, &self.session),
        ]
        .into_iter()
        .filter_map(|(field, value)| Some(index_prefix(field, value.as_deref()?)))
    }
}
