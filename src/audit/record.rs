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
pub enum Ended {
    Ok,
    /// A JSON-RPC error (code in `error_code`).
    Error,
    /// A tool result with `isError: true`.
    ToolError,
    /// A lifecycle event.
    Info,
}

impl Ended {
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
    pub outcome: Ended,
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
    pub fn new(kind: Kind, method: impl Into<String>, outcome: Ended) -> Self {
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
        let mut r = Self::new(Kind::Event, name, Ended::Info);
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

    #[test]
    fn hash_covers_every_field() {
        let mut r = Record::event("session.opened", None, Some("s1"), None);
        r.prev_hash = "00".into();
        let h = r.compute_hash();
        r.session = Some("s2".into());
        assert_ne!(h, r.compute_hash());
    }
}
