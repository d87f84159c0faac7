//! One audit record, its canonical encoding and hash, and the redaction of arguments.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

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

/// One audit record. Field order is the canonical encoding's order: do not reorder.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    /// Position in the log, assigned by the writer; consecutive.
    pub seq: u64,
    /// When it happened (a request: when it ended), microseconds since the Unix epoch.
    pub ts_us: u64,
    pub kind: Kind,
    pub direction: Option<Direction>,
    pub session: Option<String>,
    /// Who the host is, once hosts are identified (tokens/profiles); `None` until then.
    pub principal: Option<String>,
    pub upstream: Option<String>,
    /// The JSON-RPC method, or the event name (`session.opened`, `upstream.crashed`, …).
    pub method: String,
    /// The tool, prompt or URI the request named (as the host saw it).
    pub target: Option<String>,
    pub outcome: Outcome,
    pub error_code: Option<i64>,
    pub latency_us: Option<u64>,
    /// Size of the request's params, in bytes.
    pub request_bytes: Option<u64>,
    /// Size of the whole answer the host received, in bytes.
    pub response_bytes: Option<u64>,
    pub trace_id: Option<String>,
    /// Arguments per the redaction policy: absent, `{"digest": …}`, or the arguments themselves.
    pub args: Option<Box<RawValue>>,
    /// For events: what happened (a reason, an error).
    pub detail: Option<String>,
    /// Hex SHA-256 of the previous record (the chain).
    pub prev_hash: String,
    /// Hex SHA-256 over `prev_hash` and this record's canonical encoding (with `hash` empty).
    pub hash: String,
    /// Arguments not redacted yet: the writer applies the policy, off the hot path.
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

    /// Chains the record after `prev_hash` (setting `prev_hash` and `hash`) and appends its
    /// stored form, one JSON line, to `out`. The record is serialized once.
    pub fn seal(&mut self, prev_hash: String, out: &mut Vec<u8>) {
        self.prev_hash = prev_hash;
        self.hash = String::new();
        let start = out.len();
        if serde_json::to_writer(&mut *out, self).is_err() {
            out.truncate(start);
            return;
        }
        self.hash = chain_hash(&self.prev_hash, &out[start..]);
        // Put the hash into the empty `"hash":""` that ends the line.
        out.truncate(out.len() - 2);
        out.extend_from_slice(self.hash.as_bytes());
        out.extend_from_slice(b"\"}\n");
    }
}

fn chain_hash(prev_hash: &str, canonical: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update(prev_hash.as_bytes());
    h.update(canonical);
    hex(&h.finalize())
}

pub(crate) fn hex(bytes: &[u8]) -> String {
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

/// How arguments are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Redaction {
    /// Not kept at all.
    None,
    /// A SHA-256 of the (secret-masked) arguments: equal arguments can be matched, none is stored.
    #[default]
    Digest,
    /// Kept, with secret-looking keys masked.
    Full,
}

/// Applies the redaction policy; secret-looking keys are masked in every mode.
#[derive(Debug, Clone)]
pub struct Redactor {
    secret_keys: Vec<String>,
}

impl Redactor {
    pub fn new(secret_keys: &[String]) -> Self {
        Self {
            secret_keys: secret_keys.iter().map(|k| k.to_ascii_lowercase()).collect(),
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
        let needs_mask = self
            .secret_keys
            .iter()
            .any(|k| contains_ignore_case(bytes, k));
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
                    let lower = key.to_ascii_lowercase();
                    if self.secret_keys.iter().any(|s| lower.contains(s.as_str())) {
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

fn contains_ignore_case(haystack: &str, needle: &str) -> bool {
    haystack.len() >= needle.len()
        && haystack
            .as_bytes()
            .windows(needle.len())
            .any(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
}

/// `{"digest":"sha256:<hex>"}` for `bytes`.
fn digest_object(bytes: &[u8]) -> String {
    format!(r#"{{"digest":"sha256:{}"}}"#, hex(&Sha256::digest(bytes)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_owned()).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn redaction_modes_and_secret_masking() {
        let r = Redactor::new(&["password".into(), "token".into()]);
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
    fn sealed_line_is_the_record_and_its_hash_is_over_the_canonical_encoding() {
        let mut r = Record::event("upstream.crashed", Some("fs"), None, Some("exit 1".into()));
        r.args = Some(raw(r#"{"q": "a \"quoted\" value"}"#));
        let mut out = b"before\n".to_vec();
        r.seal("ab".repeat(32), &mut out);
        let line = out.strip_prefix(b"before\n").unwrap_or_default();
        assert_eq!(line.last(), Some(&b'\n'));
        let stored: Record = serde_json::from_slice(line).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(stored.hash, r.hash);
        assert_eq!(stored.prev_hash, "ab".repeat(32));
        assert_eq!(stored.compute_hash(), r.hash);
        let mut canonical = r.clone();
        canonical.hash = String::new();
        let mut h = Sha256::new();
        h.update(r.prev_hash.as_bytes());
        h.update(serde_json::to_vec(&canonical).unwrap_or_default());
        assert_eq!(hex(&h.finalize()), r.hash);
        assert_eq!(hex(&[0x00, 0x9f, 0xff]), "009fff");
    }
}
