//! A record encoded for the chain by the thread that made it: its JSON with the chain fields
//! zeroed, which sealing then completes (`batch`). [`Body::of`] encodes any [`Record`];
//! [`Body::request`] encodes a host request's record from what the request path holds, with
//! nothing copied but into the encoding, to the same bytes.

use std::borrow::Cow;

use serde::Serialize;
use serde_json::value::RawValue;

use super::record::{Ended, Record, Redactor, hex_into};
use crate::config::Redaction;

/// The start and end of a record's JSON while it has no place in the chain yet (`seq`, `ts_us`,
/// `prev_hash` and `hash` zero or empty): what lies between is its body.
const UNCHAINED_START: &[u8] = br#"{"seq":0,"ts_us":0,"#;
/// What a request's record takes, encoded, with room to spare (tool, upstream, session, trace id
/// and an argument digest come to 350–450 bytes).
pub(super) const RECORD_BYTES: usize = 640;
const UNCHAINED_END: &[u8] = br#","prev_hash":"","hash":""}"#;

/// How much of each field a caller or an upstream chose is recorded and indexed: past it, a
/// prefix and a digest of the whole ([`crate::shown::cut`]), so no caller can flood the log or
/// its index with names of megabytes.
const MAX_SESSION: usize = 128;
const MAX_PRINCIPAL: usize = 256;
const MAX_METHOD: usize = 128;
const MAX_TARGET: usize = 512;
const MAX_DETAIL: usize = 2048;

/// `field` cut to `max` in place.
fn cut_owned(field: &mut String, max: usize) {
    if let Cow::Owned(cut) = crate::shown::cut(field, max) {
        *field = cut;
    }
}

/// A host request's record (direction host to upstream) as the request path knows it, borrowed: [`Body::request`] encodes
/// it exactly as [`Body::of`] encodes the [`Record`] with the same fields, with nothing copied
/// but into the encoding itself (a request's record is written on every call).
#[derive(Debug, Clone, Copy)]
pub struct RequestRecord<'a> {
    /// When it ended, microseconds since the Unix epoch.
    pub ts_us: u64,
    pub session: Option<&'a str>,
    pub principal: Option<&'a str>,
    pub profile: Option<&'a str>,
    pub protocol: &'a str,
    pub upstream: Option<&'a str>,
    pub method: &'a str,
    pub target: Option<&'a str>,
    pub outcome: Ended,
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
    /// Encodes `record` (its arguments already redacted), its callers' fields cut to their
    /// bounds.
    pub fn of(mut record: Record) -> Self {
        for (field, max) in [
            (&mut record.session, MAX_SESSION),
            (&mut record.principal, MAX_PRINCIPAL),
            (&mut record.target, MAX_TARGET),
            (&mut record.detail, MAX_DETAIL),
        ] {
            if let Some(field) = field {
                cut_owned(field, max);
            }
        }
        cut_owned(&mut record.method, MAX_METHOD);
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
    /// by `redactor`: the bytes [`Body::of`] writes for the same [`Record`], in its field order
    /// (its callers' fields cut as it cuts them: nearly always they are short, and borrowed).
    pub fn request(record: &RequestRecord<'a>, redactor: &Redactor, json: &'a mut Vec<u8>) -> Self {
        let cut = |value: Option<&'a str>, max| value.map(|v| crate::shown::cut(v, max));
        let session = cut(record.session, MAX_SESSION);
        let target = cut(record.target, MAX_TARGET);
        json.clear();
        json.extend_from_slice(UNCHAINED_START);
        json.extend_from_slice(br#""kind":"request","direction":"host_to_upstream""#);
        let text = |json: &mut Vec<u8>, name: &str, value: Option<&str>| {
            if let Some(value) = value {
                key(json, name);
                string_into(json, value);
            }
        };
        text(json, "session", session.as_deref());
        text(
            json,
            "principal",
            cut(record.principal, MAX_PRINCIPAL).as_deref(),
        );
        text(json, "profile", record.profile);
        text(json, "protocol", Some(record.protocol));
        text(json, "upstream", record.upstream);
        text(
            json,
            "method",
            cut(Some(record.method), MAX_METHOD).as_deref(),
        );
        text(json, "target", target.as_deref());
        key(json, "outcome");
        json.push(b'"');
        json.extend_from_slice(record.outcome.as_str().as_bytes());
        json.push(b'"');
        let mut digits = itoa::Buffer::new();
        if let Some(code) = record.error_code {
            key(json, "error_code");
            json.extend_from_slice(digits.format(code).as_bytes());
        }
        for (name, value) in [
            ("latency_us", record.latency_us),
            ("request_bytes", record.request_bytes),
            ("response_bytes", record.response_bytes),
        ] {
            key(json, name);
            json.extend_from_slice(digits.format(value).as_bytes());
        }
        key(json, "trace_id");
        match record.trace_id {
            Some(trace) => string_into(json, trace),
            None => {
                let mut hex = [0u8; 32];
                hex_into(&mut hex, &rand::random::<[u8; 16]>());
                json.push(b'"');
                json.extend_from_slice(&hex);
                json.push(b'"');
            }
        }
        if let Some((raw, mode)) = record.args {
            let start = json.len();
            key(json, "args");
            if !redactor.write(raw, mode, json) {
                json.truncate(start);
            }
        }
        text(json, "detail", cut(record.detail, MAX_DETAIL).as_deref());
        json.extend_from_slice(UNCHAINED_END);
        Self {
            ts_us: record.ts_us,
            json: Cow::Borrowed(json),
            upstream: record.upstream.map(Cow::Borrowed),
            target,
            session,
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

/// A member's `,"name":` at the end of `out` (every member of a request's record but the first).
fn key(out: &mut Vec<u8>, name: &str) {
    out.extend_from_slice(b",\"");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\":");
}

/// `value` as a JSON string (quoted and escaped) at the end of `out`.
fn string_into(out: &mut Vec<u8>, value: &str) {
    // Writing to a vector cannot fail.
    let _ = Serialize::serialize(value, &mut serde_json::Serializer::new(out));
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::audit::{Direction, Kind};
    use crate::config::SecretKeys;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_owned()).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The record [`Body::of`] encodes with the fields of `r` (arguments redacted by `redactor`).
    fn as_record(r: &RequestRecord<'_>, redactor: &Redactor) -> Record {
        let mut record = Record::new(Kind::Request, r.method, r.outcome);
        record.ts_us = r.ts_us;
        record.direction = Some(Direction::HostToUpstream);
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
            session: Some("s\"1\n"),
            principal: Some("ci-bot"),
            profile: Some("narrow"),
            protocol: "2025-11-25",
            upstream: Some("fs"),
            method: "tools/call",
            target: Some("fs__read_é"),
            outcome: Ended::ToolError,
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
            outcome: Ended::Ok,
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
        // Names of a megabyte are recorded (and indexed) cut, alike both ways.
        let huge = "x".repeat(1 << 20);
        cases.push(RequestRecord {
            session: Some(&huge),
            principal: Some(&huge),
            method: &huge,
            target: Some(&huge),
            detail: Some(&huge),
            ..full
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
        let mut json = Vec::new();
        let encoded = Body::request(&cases[cases.len() - 1], &redactor, &mut json);
        assert!(
            encoded.json.len() < 4 * 1024,
            "{} bytes",
            encoded.json.len()
        );
        assert!(encoded.target.as_deref().is_some_and(|t| t.len() < 600));
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
}
