//! What a 2026-07-28 (stateless) request gets that a handshake-era one does not: `server/discover`,
//! and results as the revision writes them — `resultType` on every result (an upstream of an
//! earlier revision omits it), caching hints on discover, the four listings and
//! `resources/read`, mcpmux's identity in `_meta`, and "resource not found" as `-32602`.
//!
//! Caching hints: a listing's `ttlMs` is the shortest its upstreams gave (2026-07-28 upstreams
//! say how long theirs stay fresh; a handshake-era one says nothing, which makes it 0), discover's
//! is 0, a read keeps its upstream's; `cacheScope` is `private` when the answer depends on who
//! asks (a profile's view, a resource's contents — whatever the upstream said), `public`
//! otherwise. The result's `serverInfo` is mcpmux's, never the upstream's.

use std::sync::LazyLock;

use serde_json::json;
use serde_json::value::RawValue;

use super::method::HostMethod;
use super::{Answer, RequestCx};
use crate::jsonrpc::{Members, Needle, RpcError, codes, raw, raw_string, response_line, to_raw};
use crate::mcp::envelope::SERVER_INFO;
use crate::upstream::Reply;

/// Who may cache a result (`cacheScope`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CacheScope {
    Public,
    Private,
}

impl CacheScope {
    fn as_str(self) -> &'static str {
        match self {
            Self::Public => "public",
            Self::Private => "private",
        }
    }
}

/// How a stateless request's answer is written, decided from its method before it is handled.
#[derive(Debug, Clone, Copy)]
pub(super) struct Fit {
    /// The caching hints its result carries, for a cacheable method: who may cache it, and for
    /// how long (`None`: as long as the upstream said, or 0).
    cache: Option<(CacheScope, Option<u64>)>,
}

impl Fit {
    /// `ttl_ms` is how long the host's view of a listing may be cached (the shortest of what its
    /// upstreams said).
    pub(super) fn of(
        method: &HostMethod<'_>,
        cx: &RequestCx,
        ttl_ms: impl FnOnce(crate::mcp::ListKind) -> u64,
    ) -> Self {
        let by_view = || match cx.profile() {
            Some(_) => CacheScope::Private,
            None => CacheScope::Public,
        };
        let cache = match method {
            HostMethod::List { kind, .. } => Some((by_view(), Some(ttl_ms(*kind)))),
            HostMethod::Discover => Some((by_view(), Some(0))),
            HostMethod::ReadResource { .. } | HostMethod::ReadSkill { .. } => {
                Some((CacheScope::Private, None))
            }
            _ => None,
        };
        Self { cache }
    }

    /// The answer's errors as this revision numbers them; its result is fitted as its line is
    /// written ([`Self::response_line`]).
    pub(super) fn errors(answer: Result<Answer, RpcError>) -> Result<Answer, RpcError> {
        match answer {
            Ok(Answer::Upstream(Reply::Error(error))) => {
                Ok(Answer::Upstream(Reply::Error(renumber_raw(error))))
            }
            Err(error) => Err(renumber(error)),
            answer => answer,
        }
    }

    /// The response line of `result` as a 2026-07-28 host reads it ([`complete`]); an
    /// `interim` one (`input_required`, which has its own `resultType`) carries no caching
    /// hints. The common case — none of the members mcpmux adds already there — writes them
    /// into the line in front of the result's own, without parsing it.
    pub(super) fn response_line(self, id: &RawValue, result: &RawValue, interim: bool) -> String {
        let cache = self.cache.filter(|_| !interim);
        let text = result.get();
        if let Some(rest) = spliceable(text, cache.is_some()) {
            let mut line = String::with_capacity(id.get().len() + text.len() + 200);
            line.push_str(r#"{"jsonrpc":"2.0","id":"#);
            line.push_str(id.get());
            line.push_str(r#","result":"#);
            write_added(&mut line, cache, rest);
            line.push('}');
            return line;
        }
        response_line(id, &complete(result.to_owned(), cache))
    }
}

/// What follows the `{` of a result none of whose members mcpmux adds are there already (none
/// of their keys appears anywhere in it; the caching hints' only when `cached`, as only then are
/// they added); `None` otherwise, or when it is not an object.
fn spliceable(text: &str, cached: bool) -> Option<&str> {
    // Each of these keys, quoted, as a member would be written.
    static ADDED: [Needle; 2] = [Needle::new("\"_meta\""), Needle::new("\"resultType\"")];
    static HINTS: [Needle; 2] = [Needle::new("\"ttlMs\""), Needle::new("\"cacheScope\"")];
    let hints: &[Needle] = if cached { &HINTS } else { &[] };
    if ADDED.iter().chain(hints).any(|key| key.is_in(text)) {
        return None;
    }
    // A result starts with its `{`, unless it was written with leading whitespace.
    (text.strip_prefix('{')).or_else(|| text.trim_start().strip_prefix('{'))
}

/// `{added…, "_meta":{serverInfo}, ` in front of `rest`, what follows a result object's `{`.
fn write_added(out: &mut String, cache: Option<(CacheScope, Option<u64>)>, rest: &str) {
    out.push_str(r#"{"resultType":"complete","#);
    if let Some((scope, ttl)) = cache {
        use std::fmt::Write;
        let ttl = ttl.unwrap_or(0);
        let _ = write!(out, r#""ttlMs":{ttl},"cacheScope":"{}","#, scope.as_str());
    }
    out.push_str(&META);
    if !rest.trim_start().starts_with('}') {
        out.push(',');
    }
    out.push_str(rest);
}

/// An error as this revision numbers it: resource-not-found is `-32602` (it was `-32002`).
fn renumber(mut error: RpcError) -> RpcError {
    if error.code == codes::RESOURCE_NOT_FOUND {
        error.code = codes::INVALID_PARAMS;
    }
    error
}

/// [`renumber`] for an upstream's error object, passed through otherwise untouched.
fn renumber_raw(error: Box<RawValue>) -> Box<RawValue> {
    if !error.get().contains("-32002") {
        return error;
    }
    let Some(mut members) = Members::of(&error) else {
        return error;
    };
    if members.get("code").map(RawValue::get) != Some("-32002") {
        return error;
    }
    let code = raw(codes::INVALID_PARAMS.to_string());
    members.insert("code", &code);
    members.to_raw()
}

/// The members mcpmux adds to a `complete` result: `resultType`, the caching hints of a
/// cacheable one, and its identity in `_meta`. A member the result already has is kept as the
/// upstream wrote it (an upstream of this revision sends its own `resultType`). The common case
/// — none of them present — splices them in front without parsing the result.
fn complete(result: Box<RawValue>, cache: Option<(CacheScope, Option<u64>)>) -> Box<RawValue> {
    if let Some(rest) = spliceable(result.get(), cache.is_some()) {
        let mut out = String::with_capacity(result.get().len() + 160);
        write_added(&mut out, cache, rest);
        if let Ok(spliced) = RawValue::from_string(out) {
            return spliced;
        }
    }
    let server_info: &RawValue = &SERVER_INFO_VALUE;
    let scope = cache.map(|(c, _)| raw_string(c.as_str()));
    let ttl = raw(cache.and_then(|(_, ttl)| ttl).unwrap_or(0).to_string());
    let result_type = raw_string("complete");
    let mut added: Vec<(&str, &RawValue)> = vec![("resultType", &result_type)];
    if let Some(scope) = &scope {
        added.push(("ttlMs", &ttl));
        added.push(("cacheScope", scope));
    }
    let Some(mut members) = Members::of(&result) else {
        return result;
    };
    // A view a profile or a resource's contents make private stays so, whatever the upstream said.
    let private = matches!(cache, Some((CacheScope::Private, _)));
    for (key, value) in added {
        if !members.contains(key) || (key == "cacheScope" && private) {
            members.insert(key, value);
        }
    }
    let meta = match members.get("_meta").map(Members::of) {
        None => Some(Members::default()),
        Some(Some(meta)) => Some(meta),
        // A `_meta` that is not an object is the upstream's to answer for.
        Some(None) => None,
    };
    // The host's server is mcpmux: an upstream's own identity is not passed on as its.
    let meta = meta.map(|mut meta| {
        meta.insert(SERVER_INFO, server_info);
        meta.to_raw()
    });
    if let Some(meta) = &meta {
        members.insert("_meta", meta);
    }
    members.to_raw()
}

/// The `_meta` member mcpmux adds to a result it fits, holding its identity, written once.
static META: LazyLock<String> =
    LazyLock::new(|| format!(r#""_meta":{{"{SERVER_INFO}":{}}}"#, SERVER_INFO_VALUE.get()));

/// mcpmux's `Implementation`, written once.
static SERVER_INFO_VALUE: LazyLock<Box<RawValue>> =
    LazyLock::new(|| to_raw(&json!({ "name": "mcpmux", "version": env!("CARGO_PKG_VERSION") })));

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn fitted(text: &str, cache: Option<CacheScope>) -> Value {
        let cache = cache.map(|scope| (scope, Some(0)));
        serde_json::from_str(complete(raw(text.to_owned()), cache).get()).unwrap()
    }

    #[test]
    fn results_gain_result_type_hints_and_identity_and_keep_the_rest() {
        let plain = fitted(r#"{"content":[{"type":"text","text":"hi"}]}"#, None);
        assert_eq!(plain["resultType"], "complete");
        assert_eq!(plain["_meta"][SERVER_INFO]["name"], "mcpmux");
        assert_eq!(plain["content"][0]["text"], "hi");
        assert!(plain.get("ttlMs").is_none());

        let listing = fitted(r#"{"tools":[]}"#, Some(CacheScope::Public));
        assert_eq!(
            (&listing["ttlMs"], &listing["cacheScope"]),
            (&json!(0), &json!("public"))
        );
        let empty = fitted("{}", Some(CacheScope::Private));
        assert_eq!(empty["cacheScope"], "private");

        // What the upstream wrote stays: its own resultType and _meta members.
        let modern = fitted(
            r#"{"resultType":"complete","content":[],"_meta":{"x":1}}"#,
            None,
        );
        assert_eq!(modern["_meta"]["x"], 1);
        assert_eq!(modern["_meta"][SERVER_INFO]["name"], "mcpmux");
        // An upstream of this revision: its caching hints stay unless a view makes them
        // private, and its identity is mcpmux's.
        let read = r#"{"contents":[],"resultType":"complete","ttlMs":60000,"cacheScope":"public","_meta":{"io.modelcontextprotocol/serverInfo":{"name":"up"}}}"#;
        let read: Value = serde_json::from_str(
            complete(raw(read.to_owned()), Some((CacheScope::Private, None))).get(),
        )
        .unwrap();
        assert_eq!(
            (&read["ttlMs"], &read["cacheScope"]),
            (&json!(60000), &json!("private"))
        );
        assert_eq!(read["_meta"][SERVER_INFO]["name"], "mcpmux");
        let listing = fitted(r#"{"tools":[]}"#, Some(CacheScope::Public));
        assert_eq!(listing["ttlMs"], 0);
        // A mention inside content is not a member.
        let mention = fitted(
            r#"{"content":[{"type":"text","text":"\"resultType\""}]}"#,
            None,
        );
        assert_eq!(mention["resultType"], "complete");
    }

    #[test]
    fn a_result_is_spliced_only_when_no_added_key_is_in_it() {
        assert_eq!(
            spliceable(r#" {"content":[]}"#, true),
            Some(r#""content":[]}"#)
        );
        for key in ["_meta", "resultType", "ttlMs", "cacheScope"] {
            let nested = format!(r#"{{"a":{{"{key}":1}}}}"#);
            assert_eq!(spliceable(&nested, true), None, "{key}");
        }
        // A result that gets no caching hints may hold their keys.
        assert!(spliceable(r#"{"ttlMs":5,"cacheScope":"x"}"#, false).is_some());
        assert_eq!(spliceable(r#"{"resultType":"x"}"#, false), None);
        let alike = r#"{"cacheScoped":"x","_metadata":1,"t":"c","r":"resultTyp"}"#;
        assert!(spliceable(alike, true).is_some());
        assert_eq!(spliceable("[1]", true), None);
    }

    #[test]
    fn resource_not_found_is_invalid_params() {
        let error = RpcError::new(codes::RESOURCE_NOT_FOUND, "Resource not found: x");
        assert_eq!(renumber(error).code, codes::INVALID_PARAMS);
        let upstream = renumber_raw(raw(r#"{"code":-32002,"message":"nope"}"#.to_owned()));
        assert_eq!(upstream.get(), r#"{"code":-32602,"message":"nope"}"#);
        let other = r#"{"code":-32603,"message":"-32002"}"#;
        assert_eq!(renumber_raw(raw(other.to_owned())).get(), other);
    }
}
