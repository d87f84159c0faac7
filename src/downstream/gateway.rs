//! What each host request does. Listings are pages of the router's snapshot; calls are routed
//! through the snapshot's exposed → (upstream, original) map with only the owned field rewritten,
//! and the upstream's answer goes back verbatim. One place maps internal errors to JSON-RPC errors.

use std::sync::Arc;
use std::time::Duration;

use indexmap::IndexMap;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::session::{Session, SessionStore};
use crate::config::CatalogConfig;
use crate::jsonrpc::{RpcError, codes, error_line, raw_error_line, response_line};
use crate::mcp::cursor::{CursorCodec, Position};
use crate::mcp::{ListKind, names, version};
use crate::router::{RouterHandle, Snapshot};
use crate::upstream::{Reply, State, UpstreamError, UpstreamHandle};

/// Everything a host request needs, shared by all transports.
#[derive(Debug)]
pub struct Gateway {
    pub router: RouterHandle,
    pub sessions: Arc<SessionStore>,
    catalog: CatalogConfig,
    cursors: CursorCodec,
    initialize_wait: Duration,
}

/// What a request produced: a result to wrap, an upstream's answer to pass on, or an error.
enum Outcome {
    Result(Box<RawValue>),
    Upstream(Reply),
}

impl Gateway {
    pub fn new(
        router: RouterHandle,
        sessions: Arc<SessionStore>,
        catalog: CatalogConfig,
        initialize_wait: Duration,
    ) -> Self {
        Self {
            router,
            sessions,
            catalog,
            cursors: CursorCodec::random(),
            initialize_wait,
        }
    }

    /// Handles `initialize`: negotiates a version, opens a session, answers with what the ready
    /// upstreams offer. Waits (bounded) for upstreams still starting, so the first listing is whole.
    pub async fn initialize(
        &self,
        id: &RawValue,
        params: Option<&RawValue>,
    ) -> Result<(Arc<Session>, String), String> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Params {
            protocol_version: String,
            #[serde(default)]
            capabilities: Value,
            #[serde(default)]
            client_info: Value,
        }
        let params: Params = match params.map(|p| serde_json::from_str(p.get())) {
            Some(Ok(p)) => p,
            Some(Err(e)) => {
                return Err(error_line(
                    Some(id),
                    &RpcError::invalid_params(format!("invalid initialize params: {e}")),
                ));
            }
            None => {
                return Err(error_line(
                    Some(id),
                    &RpcError::invalid_params("initialize needs params"),
                ));
            }
        };
        let version = version::negotiate(&params.protocol_version);
        let starting: Vec<UpstreamHandle> = self
            .router
            .snapshot()
            .upstreams()
            .filter(|h| h.state() == State::Starting)
            .cloned()
            .collect();
        futures_util::future::join_all(starting.iter().map(|h| h.settled(self.initialize_wait)))
            .await;
        let snapshot = self.router.snapshot();
        let session = self
            .sessions
            .open(version, params.capabilities, params.client_info);
        let result = initialize_result(&snapshot, version);
        let line = response_line(id, &to_raw(&result));
        Ok((session, line))
    }

    /// Handles one request of an initialized session; returns the response line.
    pub async fn request(
        &self,
        session: &Session,
        id: &RawValue,
        method: &str,
        params: Option<&RawValue>,
    ) -> String {
        let outcome = match method {
            "ping" => Ok(Outcome::Result(to_raw(&json!({})))),
            "tools/list" => self.list(ListKind::Tools, params),
            "prompts/list" => self.list(ListKind::Prompts, params),
            "resources/list" => self.list(ListKind::Resources, params),
            "resources/templates/list" => self.list(ListKind::ResourceTemplates, params),
            "tools/call" => self.call_named(ListKind::Tools, method, params).await,
            "prompts/get" => self.call_named(ListKind::Prompts, method, params).await,
            "resources/read" => self.read_resource(params).await,
            "initialize" => Err(RpcError::new(
                codes::INVALID_REQUEST,
                "this session is already initialized",
            )),
            other => Err(RpcError::method_not_found(other)),
        };
        let _ = session;
        match outcome {
            Ok(Outcome::Result(result)) => response_line(id, &result),
            Ok(Outcome::Upstream(Reply::Result(result))) => response_line(id, &result),
            Ok(Outcome::Upstream(Reply::Error(error))) => raw_error_line(Some(id), error.get()),
            Err(error) => error_line(Some(id), &error),
        }
    }

    /// One page of an aggregate listing.
    fn list(&self, kind: ListKind, params: Option<&RawValue>) -> Result<Outcome, RpcError> {
        #[derive(Deserialize)]
        struct Params {
            cursor: Option<String>,
        }
        let cursor = match params {
            Some(p) => {
                serde_json::from_str::<Params>(p.get())
                    .map_err(|e| RpcError::invalid_params(format!("invalid params: {e}")))?
                    .cursor
            }
            None => None,
        };
        let (snapshot, offset) = match cursor {
            None => (self.router.snapshot(), 0),
            Some(cursor) => {
                let Position { generation, offset } = self
                    .cursors
                    .decode(kind, &cursor)
                    .map_err(|e| RpcError::invalid_params(e.to_string()))?;
                let snapshot = self.router.generation(generation).ok_or_else(|| {
                    RpcError::invalid_params("invalid cursor: the catalog it belongs to has expired; list again from the start")
                })?;
                (snapshot, offset as usize)
            }
        };
        let entries = snapshot.list(kind);
        let size = self.catalog.page_size(kind);
        let end = offset.saturating_add(size).min(entries.len());
        let page = entries.get(offset..end).unwrap_or(&[]);
        let mut out =
            String::with_capacity(32 + page.iter().map(|e| e.json.get().len() + 1).sum::<usize>());
        out.push_str("{\"");
        out.push_str(kind.field());
        out.push_str("\":[");
        for (i, entry) in page.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(entry.json.get());
        }
        out.push(']');
        if end < entries.len() {
            let position = Position {
                generation: snapshot.generation,
                offset: u32::try_from(end).unwrap_or(u32::MAX),
            };
            out.push_str(",\"nextCursor\":\"");
            out.push_str(&self.cursors.encode(kind, position));
            out.push('"');
        }
        out.push('}');
        RawValue::from_string(out)
            .map(Outcome::Result)
            .map_err(|e| RpcError::new(codes::INTERNAL_ERROR, e.to_string()))
    }

    /// `tools/call` and `prompts/get`: route by exposed name, rewrite `name`, forward.
    async fn call_named(
        &self,
        kind: ListKind,
        method: &str,
        params: Option<&RawValue>,
    ) -> Result<Outcome, RpcError> {
        let params = params.ok_or_else(|| {
            RpcError::invalid_params(format!("{method} needs params with a `name`"))
        })?;
        let mut members = members(params)?;
        let name: String = members
            .get("name")
            .and_then(|n| serde_json::from_str(n.get()).ok())
            .ok_or_else(|| RpcError::invalid_params(format!("{method} needs a string `name`")))?;
        let snapshot = self.router.snapshot();
        let Some(entry) = snapshot.lookup(kind, &name) else {
            return Err(unknown(&snapshot, kind, &name));
        };
        let original = to_raw(&entry.original);
        members.insert("name".to_owned(), &original);
        let params = serde_json::to_string(&members)
            .map_err(|e| RpcError::new(codes::INTERNAL_ERROR, e.to_string()))?;
        let upstream = entry.upstream.clone();
        drop(snapshot);
        upstream
            .request(method, Some(&params))
            .await
            .map(Outcome::Upstream)
            .map_err(upstream_error)
    }

    /// `resources/read`: route by the URI's prefix, rewrite `uri` both ways.
    async fn read_resource(&self, params: Option<&RawValue>) -> Result<Outcome, RpcError> {
        let params = params
            .ok_or_else(|| RpcError::invalid_params("resources/read needs params with a `uri`"))?;
        let mut members = members(params)?;
        let uri: String = members
            .get("uri")
            .and_then(|n| serde_json::from_str(n.get()).ok())
            .ok_or_else(|| RpcError::invalid_params("resources/read needs a string `uri`"))?;
        let snapshot = self.router.snapshot();
        let Some((upstream, original)) = snapshot.route_uri(&uri) else {
            return Err(RpcError::new(
                codes::RESOURCE_NOT_FOUND,
                format!("Resource not found: {uri}"),
            )
            .with_data(json!({ "uri": uri })));
        };
        let upstream = upstream.clone();
        drop(snapshot);
        let original = to_raw(original);
        members.insert("uri".to_owned(), &original);
        let params = serde_json::to_string(&members)
            .map_err(|e| RpcError::new(codes::INTERNAL_ERROR, e.to_string()))?;
        match upstream
            .request("resources/read", Some(&params))
            .await
            .map_err(upstream_error)?
        {
            Reply::Result(result) => Ok(Outcome::Result(expose_contents(&upstream, result))),
            error => Ok(Outcome::Upstream(error)),
        }
    }
}

/// The top-level members of a params object, values left raw.
fn members(params: &RawValue) -> Result<IndexMap<String, &RawValue>, RpcError> {
    serde_json::from_str(params.get())
        .map_err(|e| RpcError::invalid_params(format!("params must be an object: {e}")))
}

/// The error for a name that is not in the catalog: the upstream's state when the name's prefix
/// names one that is not ready, else the spec's "unknown" error.
fn unknown(snapshot: &Snapshot, kind: ListKind, name: &str) -> RpcError {
    if let Some((prefix, _)) = name.split_once(names::SEPARATOR) {
        if let Some(upstream) = snapshot.upstream(prefix) {
            if upstream.state() != State::Ready {
                return upstream_error(upstream.unavailable());
            }
        }
    }
    let what = if kind == ListKind::Tools {
        "tool"
    } else {
        "prompt"
    };
    RpcError::invalid_params(format!("Unknown {what}: {name}"))
}

/// The one mapping from upstream failures to JSON-RPC errors.
fn upstream_error(e: UpstreamError) -> RpcError {
    let (code, upstream) = match &e {
        UpstreamError::Timeout { upstream, .. } => (codes::UPSTREAM_TIMEOUT, upstream),
        UpstreamError::Unavailable { upstream, .. } | UpstreamError::Failed { upstream, .. } => {
            (codes::UPSTREAM_UNAVAILABLE, upstream)
        }
    };
    RpcError::new(code, e.to_string()).with_data(json!({ "upstream": upstream }))
}

/// Rewrites `contents[].uri` of a resources/read result to the exposed form.
fn expose_contents(upstream: &UpstreamHandle, result: Box<RawValue>) -> Box<RawValue> {
    let rewrite = || -> Option<Box<RawValue>> {
        let mut top: IndexMap<String, Box<RawValue>> = serde_json::from_str(result.get()).ok()?;
        let mut contents: Vec<IndexMap<String, Box<RawValue>>> =
            serde_json::from_str(top.get("contents")?.get()).ok()?;
        for item in &mut contents {
            let uri: String = serde_json::from_str(item.get("uri")?.get()).ok()?;
            item.insert(
                "uri".to_owned(),
                to_raw(&names::expose_uri(upstream.prefix(), &uri)),
            );
        }
        top.insert(
            "contents".to_owned(),
            serde_json::value::to_raw_value(&contents).ok()?,
        );
        serde_json::value::to_raw_value(&top).ok()
    };
    rewrite().unwrap_or(result)
}

/// The initialize result: capabilities are the union of what the ready upstreams offer.
fn initialize_result(snapshot: &Snapshot, version: &'static str) -> Value {
    let mut capabilities = serde_json::Map::new();
    for kind in ListKind::ALL {
        if snapshot.ready().iter().any(|(_, info)| info.offers(kind)) {
            capabilities.insert(kind.capability().to_owned(), json!({ "listChanged": true }));
        }
    }
    let instructions: Vec<String> = snapshot
        .ready()
        .iter()
        .filter_map(|(h, info)| {
            info.instructions
                .as_ref()
                .map(|i| format!("## {} (tools prefixed `{}__`)\n{i}", h.name(), h.prefix()))
        })
        .collect();
    let mut result = json!({
        "protocolVersion": version,
        "capabilities": capabilities,
        "serverInfo": { "name": "mcpmux", "version": env!("CARGO_PKG_VERSION") },
    });
    if !instructions.is_empty() {
        result["instructions"] = Value::String(instructions.join("\n\n"));
    }
    result
}

fn to_raw<T: serde::Serialize + ?Sized>(value: &T) -> Box<RawValue> {
    serde_json::value::to_raw_value(value).unwrap_or_else(|_| RawValue::NULL.to_owned())
}
