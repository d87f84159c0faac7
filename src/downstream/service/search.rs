//! A search-mode profile's two tools, answered by mcpmux: the search tool ranks the view's tools
//! against the host's words (an audit record of its own: the query and the names returned); the
//! call tool names a tool of the view and its arguments, and becomes that tool's `tools/call` —
//! routed, limited, audited and traced as if the host had called the tool itself.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use std::sync::Arc;

use super::forward::Upstreams;
use super::outcome::Route;
use super::tools;
use super::{Answer, RequestCx, internal, layers};
use crate::config::{Profile, SearchMode};
use crate::jsonrpc::{Members, RpcError, to_raw};
use crate::mcp::ListKind;
use crate::mcp::method::Method;
use crate::router::search::MAX_QUERY_BYTES;
use crate::router::search_mode::{DEFAULT_LIMIT, MAX_LIMIT};

/// Which of a search-mode profile's tools a `tools/call` names.
pub(super) enum MetaTool {
    Search,
    Call,
}

impl MetaTool {
    /// The search-mode tool a call of `kind` named `name` is for, in `profile`'s view.
    pub(super) fn named(profile: Option<&Profile>, kind: ListKind, name: &str) -> Option<Self> {
        let mode: &SearchMode = profile?.search.as_deref()?;
        match kind {
            ListKind::Tools if name == mode.search.name => Some(Self::Search),
            ListKind::Tools if name == mode.call.name => Some(Self::Call),
            _ => None,
        }
    }
}

/// The search tool: the view's tools that answer `query` best, each with what a model needs
/// to call it at once. Arguments it cannot use are a tool error, so a model can correct them.
/// A search holds one of the session's request slots, as a call does, and runs off the async
/// workers (the view's index may be built first).
pub(super) async fn search_tools(
    cx: &RequestCx,
    target: String,
    members: &Members<'_>,
    upstreams: &Upstreams,
    route: &mut Route,
) -> Result<Answer, RpcError> {
    let arguments = members.get("arguments");
    if upstreams.audits {
        route.args = arguments.map(ToOwned::to_owned);
    }
    route.target = Some(target);
    let (query, limit) = match asked(arguments) {
        Ok(asked) => asked,
        Err(bad) => return Ok(Answer::Result(tool_error(&bad.to_string()))),
    };
    let _permit = layers::permit::claim(cx, upstreams.limits.load().max_in_flight_per_session)?;
    let snapshot = upstreams.router.view(cx.profile());
    let Some(view) = snapshot.search_mode() else {
        return Err(internal(
            "a search-mode profile's view has no search listing",
        ));
    };
    let is_meta = |name: &str| name == view.mode.search.name || name == view.mode.call.name;
    let tools = snapshot.list(ListKind::Tools);
    let searched = Arc::clone(&snapshot);
    // Room for the hits left out below: the two search-mode tools, the app-only ones.
    let wanted = limit + 2 + snapshot.app_only_tools();
    let hits = tokio::task::spawn_blocking(move || searched.tool_index().search(&query, wanted))
        .await
        .map_err(internal)?;
    let found: Vec<Found<'_>> = (hits.iter())
        .filter(|hit| !is_meta(&hit.name))
        .filter_map(|hit| Some((hit, tools.get(hit.tool)?)))
        // What only an app's page may call is never offered to a model.
        .filter(|(_, entry)| !entry.app.as_ref().is_some_and(|app| app.app_only))
        .take(limit)
        .map(|(hit, entry)| {
            let definition = Members::of(&entry.json);
            let field = |key| definition.as_ref().and_then(|d| d.get(key));
            Found {
                name: &entry.exposed,
                title: field("title"),
                description: field("description"),
                input_schema: field("inputSchema"),
                meta: field("_meta"),
                why: match hit.matched.as_slice() {
                    [exact] if exact == "(exact name)" => "its name is the query".to_owned(),
                    matched => format!("matches {}", matched.join(", ")),
                },
            }
        })
        .collect();
    let names: Vec<&str> = found.iter().map(|f| f.name).collect();
    route.detail = Some(format!("returned {}", names.join(", ")));
    let structured = serde_json::to_string(&Results { tools: found }).map_err(internal)?;
    let text = serde_json::to_string(&structured).map_err(internal)?;
    RawValue::from_string(format!(
        r#"{{"content":[{{"type":"text","text":{text}}}],"structuredContent":{structured}}}"#
    ))
    .map(Answer::Result)
    .map_err(internal)
}

/// The call tool: the call of the tool it names, routed as if the host had called that tool.
/// What a model got wrong — no tool name, a name that is no tool of its view — is a tool
/// result that says so and how to find the name (a model reads tool results, not JSON-RPC
/// errors). A hidden tool's name gets exactly what a name nothing has gets.
pub(super) async fn call_found(
    cx: &RequestCx,
    (method, kind): (Method, ListKind),
    call_tool: String,
    members: Members<'_>,
    upstreams: &Upstreams,
    route: &mut Route,
) -> Result<Answer, RpcError> {
    let (name, members) = match unwrap_call(&call_tool, members) {
        Ok(unwrapped) => unwrapped,
        Err(bad) => {
            route.target = Some(call_tool);
            return Ok(Answer::Result(tool_error(&format!(
                "{} {}",
                bad.message,
                how_to_find(cx)
            ))));
        }
    };
    let snapshot = upstreams.router.view(cx.profile());
    if snapshot.route_name(kind, &name).is_none() {
        let error = super::unknown(&snapshot, kind, &name);
        drop(snapshot);
        // An upstream that is down is not the model's mistake: the direct call's error.
        if error.code != crate::jsonrpc::codes::INVALID_PARAMS {
            route.target = Some(name);
            return Err(error);
        }
        let message = format!("There is no tool named `{name}`. {}", how_to_find(cx));
        route.target = Some(name);
        return Ok(Answer::Result(tool_error(&message)));
    }
    drop(snapshot);
    tools::named(cx, (method, kind), name, members, upstreams, route).await
}

/// What a model should do to find a tool's name, in the host's search-mode profile.
fn how_to_find(cx: &RequestCx) -> String {
    let mode = cx.profile().and_then(|p| p.search.as_deref());
    let (search, call) = mode.map_or(("search_tools", "call_tool"), |m| {
        (m.search.name.as_str(), m.call.name.as_str())
    });
    format!(
        "Call `{search}` with what you want to do, in a few words, to find the exact name of a tool that does it; then call `{call}` with that `name` and the tool's `arguments`."
    )
}

/// The call tool's call as the call of the tool it names: that tool's name, and the params with
/// the call tool's `arguments` replaced by the named tool's (the rest — `_meta`, a task, a retry's
/// `inputResponses` — stays as the host sent it).
pub(super) fn unwrap_call<'a>(
    call_tool: &str,
    members: Members<'a>,
) -> Result<(String, Members<'a>), RpcError> {
    let needs = || {
        RpcError::invalid_params(format!(
            "{call_tool} needs arguments with a string `name` (a tool's name) and `arguments`"
        ))
    };
    let inner = members.get("arguments").ok_or_else(needs)?;
    let inner = Members::of(inner).ok_or_else(needs)?;
    let name = inner.string("name").ok_or_else(needs)?;
    let mut members = members;
    match inner.get("arguments") {
        Some(arguments) => members.insert("arguments", arguments),
        None => {
            members.remove("arguments");
        }
    }
    Ok((name, members))
}

/// One tool a search found.
#[derive(Serialize)]
struct Found<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    title: Option<&'a RawValue>,
    #[serde(skip_serializing_if = "Option::is_none")]
    description: Option<&'a RawValue>,
    #[serde(rename = "inputSchema", skip_serializing_if = "Option::is_none")]
    input_schema: Option<&'a RawValue>,
    /// The tool's `_meta` as the view lists it (its app's page named as exposed): what a host
    /// that renders MCP Apps reads to show the tool's page.
    #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
    meta: Option<&'a RawValue>,
    /// The query's words it matched.
    why: String,
}

#[derive(Serialize)]
struct Results<'a> {
    tools: Vec<Found<'a>>,
}

/// What is wrong with a search's arguments; each says how to ask, for the model to read.
#[derive(Debug, thiserror::Error)]
enum BadSearch {
    #[error("No arguments: {}.", usage())]
    NoArguments,
    #[error("{}: {}.", .0, usage())]
    Invalid(#[source] serde_json::Error),
    #[error("`limit` is {}: {}.", .0, usage())]
    Limit(f64),
    #[error("`query` is empty: {}.", usage())]
    EmptyQuery,
    #[error("`query` is {} bytes long: {}.", .0, usage())]
    LongQuery(usize),
}

/// How to call the search tool.
fn usage() -> String {
    format!(
        "give `query` (what you want to do, in a few words: at most {MAX_QUERY_BYTES} bytes) and optionally `limit` (1 to {MAX_LIMIT})"
    )
}

/// The search tool's `query` and `limit`, or what is wrong with them.
fn asked(arguments: Option<&RawValue>) -> Result<(String, usize), BadSearch> {
    #[derive(Deserialize)]
    struct Asked {
        query: String,
        limit: Option<f64>,
    }
    let arguments = arguments.ok_or(BadSearch::NoArguments)?;
    let asked: Asked = serde_json::from_str(arguments.get()).map_err(BadSearch::Invalid)?;
    let limit = asked.limit.unwrap_or(DEFAULT_LIMIT as f64);
    if limit.fract() != 0.0 || !(1.0..=MAX_LIMIT as f64).contains(&limit) {
        return Err(BadSearch::Limit(limit));
    }
    if asked.query.trim().is_empty() {
        return Err(BadSearch::EmptyQuery);
    }
    if asked.query.len() > MAX_QUERY_BYTES {
        return Err(BadSearch::LongQuery(asked.query.len()));
    }
    Ok((asked.query, limit as usize))
}

/// A tool result that says what went wrong, for the model to read.
fn tool_error(message: &str) -> Box<RawValue> {
    to_raw(&serde_json::json!({
        "content": [{ "type": "text", "text": message }],
        "isError": true,
    }))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::jsonrpc::raw;

    #[test]
    fn the_call_tool_becomes_the_call_of_the_tool_it_names() {
        let params = raw(
            r#"{"name":"call_tool","arguments":{"name":"a__echo","arguments":{"text":"hi"}},"_meta":{"progressToken":7}}"#
                .to_owned(),
        );
        let (name, members) = unwrap_call("call_tool", Members::parse(&params).unwrap()).unwrap();
        assert_eq!(name, "a__echo");
        assert_eq!(members.get("arguments").unwrap().get(), r#"{"text":"hi"}"#);
        assert_eq!(
            members.get("_meta").unwrap().get(),
            r#"{"progressToken":7}"#
        );
        let bare = raw(r#"{"name":"call_tool","arguments":{"name":"a__now"}}"#.to_owned());
        let (_, members) = unwrap_call("call_tool", Members::parse(&bare).unwrap()).unwrap();
        assert!(!members.contains("arguments"));
        let nameless = raw(r#"{"name":"call_tool","arguments":{"arguments":{}}}"#.to_owned());
        let error = unwrap_call("call_tool", Members::parse(&nameless).unwrap()).unwrap_err();
        assert!(error.message.contains("string `name`"), "{}", error.message);
    }

    #[test]
    fn a_search_asks_for_words_and_a_sensible_number() {
        let ok = raw(r#"{"query":"read a file","limit":3}"#.to_owned());
        assert_eq!(asked(Some(&ok)).unwrap(), ("read a file".to_owned(), 3));
        let default = raw(r#"{"query":"x"}"#.to_owned());
        assert_eq!(asked(Some(&default)).unwrap().1, 5);
        for bad in [
            r#"{"query":"x","limit":0}"#,
            r#"{"query":"x","limit":51}"#,
            r#"{"query":"x","limit":2.5}"#,
            r#"{"query":"  "}"#,
            r#"{"limit":3}"#,
        ] {
            let error = asked(Some(&raw(bad.to_owned()))).unwrap_err().to_string();
            assert!(error.contains("give `query`"), "{bad}: {error}");
        }
        assert!(asked(None).is_err());
    }
}
