//! One audit record, its canonical encoding and hash, and the redaction of arguments.

use aho_corasick::AhoCorasick;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

use crate::config::{Redaction, SecretKeys};

/// Whether a record is a request that crossed the gateway or a lifecycle event.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Request,
    Event,
}

/// Which way a request went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// A host's request (answered by an upstream, or by mcpmux itself for listings and pings).
    HostToUpstream,
    /// An upstream's request to a host (sampling, elicitation, roots).
    UpstreamToHost,
}

/// How a request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    Ok,
    /// A JSON-RPC error (code in `error_code`).
    Error,
    /// A tool result with `isError: true`.
    ToolError,
    /// A lifecycle event.
    Info,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Error => "error",
            Self::ToolError => "tool_error",
            Self::Info => "info",
        }
    }
}

/// One audit record. Field order is the canonical encoding's order: do not reorder. Absent
/// fields are left out of it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    /// Position in the log, assigned by the writer; consecutive.
    pub seq: u64,
    /// When it happened (a request: when it ended), microseconds since the Unix epoch.
    pub ts_us: u64,
    pub kind: Kind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<Direction>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session: Option<String>,
    /// Who the host is, once hosts are identified (`[hosts]`); `None` until then.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// The profile the host saw the catalog through (`None`: all of it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile: Option<String>,
    /// The protocol revision of a host's request (`2026-07-28` for a stateless one, else its
    /// session's); absent in records written before mcpmux noted it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<std::borrow::Cow<'static, str>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
    /// The JSON-RPC method, or the event name (`session.opened`, `upstream.crashed`, …).
    pub method: String,
    /// The tool, prompt or URI the request named (as the host saw it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    pub outcome: Outcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error_code: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_us: Option<u64>,
    /// Size of the request's params, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_bytes: Option<u64>,
    /// Size of the whole answer the host received, in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_bytes: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace_id: Option<String>,
    /// Arguments per the redaction policy: absent, `{"digest": …}`, or the arguments themselves.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Box<RawValue>>,
    /// For events: what happened (a reason, an error); for a request mcpmux answered itself,
    /// what it answered (a tool search: the names it returned).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Hex SHA-256 of the previous record (the chain).
    pub prev_hash: String,
    /// Hex SHA-256 over `prev_hash` and this record's canonical encoding (with `hash` empty).
    pub hash: String,
    /// Arguments not redacted yet: [`super::AuditHandle::record`] applies the policy.
    #[serde(skip)]
    pub raw_args: Option<(Box<RawValue>, Redaction)>,
}

impl PartialEq for Record {
    fn eq(&self, other: &Self) -> bool {
        self.hash == other.hash
            && self.seq == other.seq
            && self.compute_hash() == other.compute_hash()
    }
}

impl Record {
    /// A record for the writer to number and chain.
    pub fn new(kind: Kind, method: impl Into<String>, outcome: Outcome) -> Self {
        Self {
            seq: 0,
            ts_us: now_us(),
            kind,
            direction: None,
            session: None,
            principal: None,
            profile: None,
            protocol: None,
            upstream: None,
            method: method.into(),
            target: None,
            outcome,
            error_code: None,
            latency_us: None,
            request_bytes: None,
            response_bytes: None,
            trace_id: None,
            args: None,
            detail: None,
            prev_hash: String::new(),
            hash: String::new(),
            raw_args: None,
        }
    }

    /// A lifecycle event.
    pub fn event(
        name: &str,
        upstream: Option<&str>,
        session: Option<&str>,
        detail: Option<String>,
    ) -> Self {
        let mut r = Self::new(Kind::Event, name, Outcome::Info);
        r.upstream = upstream.map(str::to_owned);
        r.session = session.map(str::to_owned);
        r.detail = detail;
        r
    }

    /// The hash this record must carry after `prev_hash`.
    pub fn compute_hash(&self) -> String {
        let mut canonical = serde_json::to_vec(self).unwrap_or_default();
        // `hash` is the last field and hex, so the JSON ends with `"hash":"<hex>"}`: dropping the
        // hex gives the canonical encoding (the record with `hash` empty) without a copy.
        canonical.truncate(canonical.len().saturating_sub(self.hash.len() + 2));
        canonical.extend_from_slice(b"\"}");
        chain_hash(&self.prev_hash, &canonical)
    }
}

/// The start and end of a record's JSON while it has no place in the chain yet (`seq`, `ts_us`,
/// `prev_hash` and `hash` zero or empty): what lies between is its body.
const UNCHAINED_START: &[u8] = br#"{"seq":0,"ts_us":0,"#;
/// What a request's record takes, encoded, with room to spare (tool, upstream, session, trace id
/// and an argument digest come to 350–450 bytes).
const RECORD_BYTES: usize = 640;
const UNCHAINED_END: &[u8] = br#","prev_hash":"","hash":""}"#;

/// A record encoded but for its place in the chain, by the thread that made it: sealing it then
/// only writes the chain fields around the body and hashes the line.
#[derive(Debug)]
pub struct Body {
    ts_us: u64,
    /// The record's JSON with the chain fields zeroed; the body is between the two ends.
    json: Vec<u8>,
    upstream: Option<String>,
    target: Option<String>,
    session: Option<String>,
}

impl Body {
    /// Encodes `record` (its arguments already redacted).
    pub fn of(mut record: Record) -> Self {
        let ts_us = record.ts_us;
        record.seq = 0;
        record.ts_us = 0;
        record.prev_hash.clear();
        record.hash.clear();
        // Room for a request's record at once (`to_vec` starts at 128 bytes and regrows twice).
        let mut json = Vec::with_capacity(RECORD_BYTES);
        // Strings, numbers and JSON text: serializing cannot fail.
        let _ = serde_json::to_writer(&mut json, &record);
        debug_assert!(json.starts_with(UNCHAINED_START) && json.ends_with(UNCHAINED_END));
        Self {
            ts_us,
            json,
            upstream: record.upstream,
            target: record.target,
            session: record.session,
        }
    }

    fn body(&self) -> &[u8] {
        let end = self.json.len().saturating_sub(UNCHAINED_END.len());
        self.json
            .get(UNCHAINED_START.len()..end)
            .unwrap_or_default()
    }
}

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
    /// Chains `body` after `head` and appends it: the record gets the next sequence number, a
    /// time no earlier than the last one (so time order is sequence order), and the hash of the
    /// previous hash followed by its canonical encoding (its JSON with `hash` empty), as
    /// [`Record::compute_hash`] recomputes it. `head` moves past it.
    pub fn seal(&mut self, body: &Body, head: &mut Head) {
        use std::io::Write;
        let (seq, ts_us) = (head.next_seq, body.ts_us.max(head.last_ts));
        let start = self.lines.len();
        let _ = write!(self.lines, r#"{{"seq":{seq},"ts_us":{ts_us},"#);
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
        let mut field = |value: &Option<String>| {
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

    pub fn is_empty(&self) -> bool {
        self.seals.is_empty()
    }

    /// Forgets its records, keeping the buffers' room for the next batch (up to a quiet load's).
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

fn chain_hash(prev_hash: &str, canonical: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(prev_hash.as_bytes());
    h.update(canonical);
    hex(&h.finalize())
}

/// The lowercase hex digits of `bytes` (32 of them) in `out`.
fn hex_into(out: &mut [u8; 64], bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for (pair, b) in out.chunks_exact_mut(2).zip(bytes) {
        pair[0] = DIGITS[usize::from(b >> 4)];
        pair[1] = DIGITS[usize::from(b & 0xf)];
    }
}

/// Lowercase hex digits of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(char::from(DIGITS[usize::from(b >> 4)]));
        s.push(char::from(DIGITS[usize::from(b & 0xf)]));
    }
    s
}

pub fn now_us() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// Applies the redaction policy; secret-looking keys are masked in every mode.
#[derive(Debug, Clone)]
pub struct Redactor {
    /// The secret keys, matched as substrings, ASCII case-insensitively, in one pass.
    secret_keys: AhoCorasick,
}

impl Redactor {
    pub fn new(secret_keys: &SecretKeys) -> Self {
        Self {
            secret_keys: secret_keys.matcher().clone(),
        }
    }

    /// The `args` field for arguments `raw` under `mode`: kept as JSON text, so the record's
    /// encoding is the text itself.
    pub fn apply(&self, raw: Option<&RawValue>, mode: Redaction) -> Option<Box<RawValue>> {
        let raw = raw?;
        if mode == Redaction::None {
            return None;
        }
        let bytes = raw.get();
        // A key can only match if the text holds it, unless the text escapes characters (a key
        // may be spelled with `\u` escapes): then the parsed keys decide.
        let needs_mask = self.secret_keys.is_match(bytes) || bytes.contains("\\u");
        let text = match (mode, needs_mask) {
            (Redaction::Digest, false) => digest_object(bytes.as_bytes()),
            (mode, _) => {
                let mut value: Value = serde_json::from_str(bytes).ok()?;
                self.mask(&mut value);
                let masked = value.to_string();
                match mode {
                    Redaction::Full => masked,
                    _ => digest_object(masked.as_bytes()),
                }
            }
        };
        RawValue::from_string(text).ok()
    }

    fn mask(&self, value: &mut Value) {
        match value {
            Value::Object(map) => {
                for (key, v) in map.iter_mut() {
                    if self.secret_keys.is_match(key) {
                        *v = Value::String("***".into());
                    } else {
                        self.mask(v);
                    }
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|v| self.mask(v)),
            _ => {}
        }
    }
}

/// `{"digest":"sha256:<hex>"}` for `bytes`.
fn digest_object(bytes: &[u8]) -> String {
    const START: &str = r#"{"digest":"sha256:"#;
    let mut digits = [0u8; 64];
    hex_into(&mut digits, &Sha256::digest(bytes));
    let mut out = String::with_capacity(START.len() + 64 + 2);
    out.push_str(START);
    // Hex digits are ASCII.
    out.push_str(std::str::from_utf8(&digits).unwrap_or_default());
    out.push_str(r#""}"#);
    out
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_owned()).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn an_argument_digest_is_written_exactly() {
        // SHA-256 of "abc" (FIPS 180-2's first example).
        assert_eq!(
            digest_object(b"abc"),
            r#"{"digest":"sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"}"#
        );
    }

    #[test]
    fn redaction_modes_and_secret_masking() {
        let r = Redactor::new(
            &SecretKeys::new(vec!["password".into(), "token".into()])
                .unwrap_or_else(|e| panic!("{e}")),
        );
        let args = raw(r#"{"path":"/x","apiToken":"abc","nested":{"Password":"p"}}"#);
        assert!(r.apply(Some(&args), Redaction::None).is_none());
        let value = |v: Option<Box<RawValue>>| -> Value {
            v.map_or(Value::Null, |v| {
                serde_json::from_str(v.get()).unwrap_or_default()
            })
        };
        let full = value(r.apply(Some(&args), Redaction::Full));
        assert_eq!(full["apiToken"], "***");
        assert_eq!(full["nested"]["Password"], "***");
        assert_eq!(full["path"], "/x");
        let a = value(r.apply(Some(&raw(r#"{"q":1}"#)), Redaction::Digest));
        let b = value(r.apply(Some(&raw(r#"{"q":1}"#)), Redaction::Digest));
        let c = value(r.apply(Some(&raw(r#"{"q":2}"#)), Redaction::Digest));
        assert_eq!(a, b);
        assert_ne!(a, c);
        let secret_digest = value(r.apply(Some(&args), Redaction::Digest));
        assert!(
            secret_digest["digest"]
                .as_str()
                .is_some_and(|d| d.starts_with("sha256:"))
        );
        // A key spelled with escapes is still a secret key.
        let escaped = raw(r#"{"pass\u0077ord":"p","note":"x"}"#);
        let full = value(r.apply(Some(&escaped), Redaction::Full));
        assert_eq!(full, serde_json::json!({"password": "***", "note": "x"}));
        let digest = value(r.apply(Some(&escaped), Redaction::Digest));
        let masked = value(r.apply(
            Some(&raw(r#"{"password":"other","note":"x"}"#)),
            Redaction::Digest,
        ));
        assert_eq!(digest, masked, "digests are over the masked arguments");
    }

    #[test]
    fn hash_covers_every_field() {
        let mut r = Record::event("session.opened", None, Some("s1"), None);
        r.prev_hash = "00".into();
        let h = r.compute_hash();
        r.session = Some("s2".into());
        assert_ne!(h, r.compute_hash());
    }

    #[test]
    fn a_batch_is_cut_into_blocks_of_whole_lines_with_their_fields() {
        let mut head = Head::default();
        let mut batch = Batch::default();
        for i in 0..5 {
            let mut r = Record::new(Kind::Request, "tools/call", Outcome::Ok);
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
        r.args = Some(raw(r#"{"q": "a \"quoted\" value"}"#));
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
