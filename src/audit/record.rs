//! One audit record, its canonical encoding and hash, and the redaction of arguments.

use std::borrow::Cow;

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

impl Direction {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::HostToUpstream => "host_to_upstream",
            Self::UpstreamToHost => "upstream_to_host",
        }
    }
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
pub(super) const RECORD_BYTES: usize = 640;
const UNCHAINED_END: &[u8] = br#","prev_hash":"","hash":""}"#;

/// A host request's record as the request path knows it, borrowed: [`Body::request`] encodes
/// it exactly as [`Body::of`] encodes the [`Record`] with the same fields, with nothing copied
/// but into the encoding itself (a request's record is written on every call).
#[derive(Debug, Clone, Copy)]
pub struct RequestRecord<'a> {
    /// When it ended, microseconds since the Unix epoch.
    pub ts_us: u64,
    pub direction: Direction,
    pub session: Option<&'a str>,
    pub principal: Option<&'a str>,
    pub profile: Option<&'a str>,
    pub protocol: &'a str,
    pub upstream: Option<&'a str>,
    pub method: &'a str,
    pub target: Option<&'a str>,
    pub outcome: Outcome,
    pub error_code: Option<i64>,
    pub latency_us: u64,
    pub request_bytes: u64,
    pub response_bytes: u64,
    /// Its trace; `None`: a new trace id is made up for it.
    pub trace_id: Option<&'a str>,
    /// Its arguments, with the redaction they get.
    pub args: Option<(&'a RawValue, Redaction)>,
    pub detail: Option<&'a str>,
}

/// A record encoded but for its place in the chain, by the thread that made it: sealing it then
/// only writes the chain fields around the body and hashes the line.
#[derive(Debug)]
pub struct Body<'a> {
    pub(super) ts_us: u64,
    /// The record's JSON with the chain fields zeroed; the body is between the two ends.
    json: Cow<'a, [u8]>,
    pub(super) upstream: Option<Cow<'a, str>>,
    pub(super) target: Option<Cow<'a, str>>,
    pub(super) session: Option<Cow<'a, str>>,
}

impl Body<'static> {
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
            json: Cow::Owned(json),
            upstream: record.upstream.map(Cow::Owned),
            target: record.target.map(Cow::Owned),
            session: record.session.map(Cow::Owned),
        }
    }
}

impl<'a> Body<'a> {
    /// Encodes a host request's `record` into `json` (cleared first), its arguments redacted
    /// by `redactor`: the bytes [`Body::of`] writes for the same [`Record`], in its field order.
    pub fn request(record: &RequestRecord<'a>, redactor: &Redactor, json: &'a mut Vec<u8>) -> Self {
        json.clear();
        json.extend_from_slice(UNCHAINED_START);
        json.extend_from_slice(br#""kind":"request","direction":""#);
        json.extend_from_slice(record.direction.as_str().as_bytes());
        json.push(b'"');
        let text = |json: &mut Vec<u8>, key: &str, value: Option<&str>| {
            if let Some(value) = value {
                json.extend_from_slice(b",\"");
                json.extend_from_slice(key.as_bytes());
                json.extend_from_slice(b"\":");
                string_into(json, value);
            }
        };
        text(json, "session", record.session);
        text(json, "principal", record.principal);
        text(json, "profile", record.profile);
        text(json, "protocol", Some(record.protocol));
        text(json, "upstream", record.upstream);
        text(json, "method", Some(record.method));
        text(json, "target", record.target);
        json.extend_from_slice(br#","outcome":""#);
        json.extend_from_slice(record.outcome.as_str().as_bytes());
        json.push(b'"');
        let mut numbers = itoa::Buffer::new();
        let number = |json: &mut Vec<u8>, key: &str, value: Option<&str>| {
            if let Some(value) = value {
                json.extend_from_slice(b",\"");
                json.extend_from_slice(key.as_bytes());
                json.extend_from_slice(b"\":");
                json.extend_from_slice(value.as_bytes());
            }
        };
        number(
            json,
            "error_code",
            record.error_code.map(|c| numbers.format(c)),
        );
        for (key, value) in [
            ("latency_us", record.latency_us),
            ("request_bytes", record.request_bytes),
            ("response_bytes", record.response_bytes),
        ] {
            number(json, key, Some(numbers.format(value)));
        }
        match record.trace_id {
            Some(trace) => text(json, "trace_id", Some(trace)),
            None => {
                let mut digits = [0u8; 32];
                hex_into(&mut digits, &rand::random::<[u8; 16]>());
                json.extend_from_slice(br#","trace_id":""#);
                json.extend_from_slice(&digits);
                json.push(b'"');
            }
        }
        if let Some((raw, mode)) = record.args {
            let start = json.len();
            json.extend_from_slice(br#","args":"#);
            if !redactor.write(raw, mode, json) {
                json.truncate(start);
            }
        }
        text(json, "detail", record.detail);
        json.extend_from_slice(UNCHAINED_END);
        Self {
            ts_us: record.ts_us,
            json: Cow::Borrowed(json),
            upstream: record.upstream.map(Cow::Borrowed),
            target: record.target.map(Cow::Borrowed),
            session: record.session.map(Cow::Borrowed),
        }
    }

    /// What lies between the chain fields: the record but for its place in the chain.
    pub(super) fn body(&self) -> &[u8] {
        let end = self.json.len().saturating_sub(UNCHAINED_END.len());
        self.json
            .get(UNCHAINED_START.len()..end)
            .unwrap_or_default()
    }
}

/// `value` as a JSON string (quoted and escaped) at the end of `out`.
fn string_into(out: &mut Vec<u8>, value: &str) {
    // Writing to a vector cannot fail.
    let _ = Serialize::serialize(value, &mut serde_json::Serializer::new(out));
}

fn chain_hash(prev_hash: &str, canonical: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(prev_hash.as_bytes());
    h.update(canonical);
    hex(&h.finalize())
}

/// The lowercase hex digits of `bytes` in `out` (two per byte, as many as `out` holds).
pub(super) fn hex_into(out: &mut [u8], bytes: &[u8]) {
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
        let mut text = Vec::new();
        if !self.write(raw?, mode, &mut text) {
            return None;
        }
        RawValue::from_string(String::from_utf8(text).ok()?).ok()
    }

    /// Writes the `args` field's value for arguments `raw` under `mode` at the end of `out`;
    /// `false` (nothing written) when the record has none: [`Redaction::None`], or arguments
    /// that are not JSON.
    pub fn write(&self, raw: &RawValue, mode: Redaction, out: &mut Vec<u8>) -> bool {
        if mode == Redaction::None {
            return false;
        }
        let text = raw.get();
        // A key can only match if the text holds it, unless the text escapes characters (a key
        // may be spelled with `\u` escapes): then the parsed keys decide.
        let needs_mask = self.secret_keys.is_match(text) || text.contains("\\u");
        if mode == Redaction::Digest && !needs_mask {
            digest_into(out, text.as_bytes());
            return true;
        }
        let Ok(mut value) = serde_json::from_str::<Value>(text) else {
            return false;
        };
        self.mask(&mut value);
        // Writing a value to a vector cannot fail.
        if mode == Redaction::Full {
            let _ = serde_json::to_writer(out, &value);
        } else {
            let masked = serde_json::to_vec(&value).unwrap_or_default();
            digest_into(out, &masked);
        }
        true
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

/// `{"digest":"sha256:<hex>"}` for `bytes`, at the end of `out`.
fn digest_into(out: &mut Vec<u8>, bytes: &[u8]) {
    let mut digits = [0u8; 64];
    hex_into(&mut digits, &Sha256::digest(bytes));
    out.extend_from_slice(br#"{"digest":"sha256:"#);
    out.extend_from_slice(&digits);
    out.extend_from_slice(br#""}"#);
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
        let mut digest = Vec::new();
        digest_into(&mut digest, b"abc");
        assert_eq!(
            String::from_utf8(digest).unwrap(),
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

    /// The record [`Body::of`] encodes with the fields of `r` (arguments redacted by `redactor`).
    fn as_record(r: &RequestRecord<'_>, redactor: &Redactor) -> Record {
        let mut record = Record::new(Kind::Request, r.method, r.outcome);
        record.ts_us = r.ts_us;
        record.direction = Some(r.direction);
        record.session = r.session.map(str::to_owned);
        record.principal = r.principal.map(str::to_owned);
        record.profile = r.profile.map(str::to_owned);
        record.protocol = Some(r.protocol.to_owned().into());
        record.upstream = r.upstream.map(str::to_owned);
        record.target = r.target.map(str::to_owned);
        record.error_code = r.error_code;
        record.latency_us = Some(r.latency_us);
        record.request_bytes = Some(r.request_bytes);
        record.response_bytes = Some(r.response_bytes);
        record.trace_id = r.trace_id.map(str::to_owned);
        record.args = r
            .args
            .and_then(|(raw, mode)| redactor.apply(Some(raw), mode));
        record.detail = r.detail.map(str::to_owned);
        record
    }

    #[test]
    fn a_request_record_is_encoded_as_its_record_would_be() {
        let redactor =
            Redactor::new(&SecretKeys::new(vec!["token".into()]).unwrap_or_else(|e| panic!("{e}")));
        let args = raw(r#"{"q": "x", "apiToken": "s3cret"}"#);
        let full = RequestRecord {
            ts_us: 1_700_000_000_000_001,
            direction: Direction::HostToUpstream,
            session: Some("s\"1\n"),
            principal: Some("ci-bot"),
            profile: Some("narrow"),
            protocol: "2025-11-25",
            upstream: Some("fs"),
            method: "tools/call",
            target: Some("fs__read_é"),
            outcome: Outcome::ToolError,
            error_code: Some(-32_602),
            latency_us: 1234,
            request_bytes: 56,
            response_bytes: 789,
            trace_id: Some("0af7651916cd43dd8448eb211c80319c"),
            args: Some((&args, Redaction::Digest)),
            detail: Some("returned a\u{1}b"),
        };
        let bare = RequestRecord {
            session: None,
            principal: None,
            profile: None,
            upstream: None,
            target: None,
            outcome: Outcome::Ok,
            error_code: None,
            args: None,
            detail: None,
            ..full
        };
        let mut cases = vec![full, bare];
        for mode in [Redaction::Full, Redaction::None] {
            cases.push(RequestRecord {
                args: Some((&args, mode)),
                ..full
            });
        }
        let not_json = raw("[1,2]");
        cases.push(RequestRecord {
            args: Some((&not_json, Redaction::Full)),
            ..bare
        });
        for (i, case) in cases.iter().enumerate() {
            let mut json = Vec::new();
            let encoded = Body::request(case, &redactor, &mut json);
            let expected = Body::of(as_record(case, &redactor));
            assert_eq!(
                String::from_utf8_lossy(&encoded.json),
                String::from_utf8_lossy(&expected.json),
                "case {i}"
            );
            assert_eq!(
                (&encoded.upstream, &encoded.target, &encoded.session),
                (&expected.upstream, &expected.target, &expected.session)
            );
        }
        // A request without a trace gets one of its own.
        let mut json = Vec::new();
        let untraced = RequestRecord {
            trace_id: None,
            ..bare
        };
        let encoded = Body::request(&untraced, &redactor, &mut json);
        let record: Record = serde_json::from_slice(&encoded.json).unwrap();
        let trace = record.trace_id.unwrap();
        assert!(trace.len() == 32 && trace.bytes().all(|b| b.is_ascii_hexdigit()));
    }

    #[test]
    fn hash_covers_every_field() {
        let mut r = Record::event("session.opened", None, Some("s1"), None);
        r.prev_hash = "00".into();
        let h = r.compute_hash();
        r.session = Some("s2".into());
        assert_ne!(h, r.compute_hash());
    }
}
