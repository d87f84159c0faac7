//! What each host request does. Listings are pages of the router's snapshot; calls are routed
//! through the snapshot's exposed → (upstream, original) map with only the owned fields rewritten
//! (names, URIs, progress tokens, task ids), and the upstream's answer goes back verbatim. One
//! place maps internal errors to JSON-RPC errors. Subscriptions, logging, completion and tasks
//! live in `features`; session ends and host answers in `lifecycle`.

mod audit;
mod content;
mod features;
mod lifecycle;
mod listing;

use std::sync::Arc;
use std::time::Duration;

use indexmap::IndexMap;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};
use tokio::sync::mpsc;

use super::hub::Hub;
use super::origin::{HostOrigin, InFlightGuard};
use super::session::Session;
use crate::audit::{AuditHandle, Redaction};
use crate::config::{CatalogConfig, ServerConfig};
use crate::jsonrpc::{RpcError, codes, error_line, raw_error_line, response_line};
use crate::mcp::cursor::CursorCodec;
use crate::mcp::{ListKind, names, version};
use crate::router::{RouterHandle, Snapshot};
use crate::supervisor::SupervisorHandle;
use crate::upstream::{CallContext, ProgressTokens, Reply, State, UpstreamError, UpstreamHandle};

/// Everything a host request needs, shared by all transports.
#[derive(Debug)]
pub struct Gateway {
    pub router: RouterHandle,
    pub hub: Arc<Hub>,
    supervisor: SupervisorHandle,
    audit: AuditHandle,
    /// How arguments are audited unless an upstream or tool says otherwise.
    audit_redaction: Redaction,
    catalog: CatalogConfig,
    cursors: CursorCodec,
    initialize_wait: Duration,
    max_in_flight_per_session: usize,
}

/// One host request: who sent it, under which id, and its response stream (for messages that
/// belong to it before its answer).
#[derive(Debug)]
pub struct HostRequest {
    pub session: Arc<Session>,
    pub id: Box<RawValue>,
    pub sink: Option<mpsc::Sender<String>>,
    /// What routing learned, for the audit record.
    note: std::sync::Mutex<audit::Note>,
}

impl HostRequest {
    pub fn new(
        session: Arc<Session>,
        id: Box<RawValue>,
        sink: Option<mpsc::Sender<String>>,
    ) -> Self {
        Self {
            session,
            id,
            sink,
            note: std::sync::Mutex::default(),
        }
    }
}

/// What a request produced: a result to wrap or an upstream's answer to pass on.
enum Outcome {
    Result(Box<RawValue>),
    Upstream(Reply),
}

type Members<'a> = IndexMap<String, &'a RawValue>;

impl Gateway {
    pub fn new(
        router: RouterHandle,
        hub: Arc<Hub>,
        supervisor: SupervisorHandle,
        audit: (AuditHandle, Redaction),
        catalog: CatalogConfig,
        server: &ServerConfig,
    ) -> Self {
        Self {
            router,
            hub,
            supervisor,
            audit: audit.0,
            audit_redaction: audit.1,
            catalog,
            cursors: CursorCodec::random(),
            initialize_wait: server.initialize_wait,
            max_in_flight_per_session: server.max_in_flight_per_session,
        }
    }

    pub fn supervisor(&self) -> &SupervisorHandle {
        &self.supervisor
    }

    pub fn audit(&self) -> &AuditHandle {
        &self.audit
    }

    /// Handles `initialize`: negotiates a version, opens a session (with `session_id`, or a new
    /// id), answers with what the ready upstreams offer. Waits (bounded) for upstreams still
    /// starting, so the first listing is whole. `Err` is the error line to answer.
    pub async fn initialize(
        &self,
        id: &RawValue,
        params: Option<&RawValue>,
        session_id: Option<String>,
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
        // Lazy upstreams start with the first session; wait (bounded) for all that are starting.
        self.supervisor.start_lazy();
        let starting: Vec<UpstreamHandle> = self
            .router
            .snapshot()
            .upstreams()
            .filter(|h| h.state() == State::Starting || h.never_started())
            .cloned()
            .collect();
        futures_util::future::join_all(starting.iter().map(|h| h.settled(self.initialize_wait)))
            .await;
        let snapshot = self.router.snapshot();
        let session =
            self.hub
                .sessions
                .open(session_id, version, params.capabilities, params.client_info);
        self.audit_event(
            "session.opened",
            &session.id,
            Some(format!("{version} {}", session.client_info)),
        );
        let result = initialize_result(&snapshot, version);
        Ok((session, response_line(id, &to_raw(&result))))
    }

    /// Handles one request of an initialized session; returns the response line.
    pub async fn request(
        &self,
        host: &HostRequest,
        method: &str,
        params: Option<&RawValue>,
    ) -> String {
        let started = std::time::Instant::now();
        if let Some(params) = params.filter(|p| p.get().contains(r#""traceparent""#)) {
            let trace_id = audit::traceparent_of(params);
            host.note(|n| n.trace_id = trace_id);
        }
        let outcome = match method {
            "ping" => Ok(Outcome::Result(to_raw(&json!({})))),
            "tools/list" => self.list(ListKind::Tools, params),
            "prompts/list" => self.list(ListKind::Prompts, params),
            "resources/list" => self.list(ListKind::Resources, params),
            "resources/templates/list" => self.list(ListKind::ResourceTemplates, params),
            "tools/call" => self.call_named(host, ListKind::Tools, method, params).await,
            "prompts/get" => {
                self.call_named(host, ListKind::Prompts, method, params)
                    .await
            }
            "resources/read" => self.read_resource(host, params).await,
            "resources/subscribe" => self.subscribe(host, params, true).await,
            "resources/unsubscribe" => self.subscribe(host, params, false).await,
            "logging/setLevel" => self.set_log_level(host, params).await,
            "completion/complete" => self.complete(host, params).await,
            "tasks/get" | "tasks/result" | "tasks/cancel" => {
                self.task_request(host, method, params).await
            }
            "tasks/list" => self.list_tasks(host).await,
            "initialize" => Err(RpcError::new(
                codes::INVALID_REQUEST,
                "this session is already initialized",
            )),
            other => Err(RpcError::method_not_found(other)),
        };
        let id = &host.id;
        let line = match &outcome {
            Ok(Outcome::Result(result) | Outcome::Upstream(Reply::Result(result))) => {
                response_line(id, result)
            }
            Ok(Outcome::Upstream(Reply::Error(error))) => raw_error_line(Some(id), error.get()),
            Err(error) => error_line(Some(id), error),
        };
        let request_bytes = params.map_or(0, |p| p.get().len());
        self.audit_request(host, method, request_bytes, &outcome, line.len(), started);
        line
    }

    /// `tools/call` and `prompts/get`: route by exposed name, rewrite `name`, forward.
    async fn call_named(
        &self,
        host: &HostRequest,
        kind: ListKind,
        method: &str,
        params: Option<&RawValue>,
    ) -> Result<Outcome, RpcError> {
        let params = params.ok_or_else(|| {
            RpcError::invalid_params(format!("{method} needs params with a `name`"))
        })?;
        let mut members = members(params)?;
        let name: String = string_member(&members, "name")
            .ok_or_else(|| RpcError::invalid_params(format!("{method} needs a string `name`")))?;
        host.note(|n| n.target = Some(name.clone()));
        let snapshot = self.router.snapshot();
        let Some(entry) = snapshot.lookup(kind, &name) else {
            return Err(unknown(&snapshot, kind, &name));
        };
        let upstream = entry.upstream.clone();
        let original_name = entry.original.clone();
        let original = to_raw(&*original_name);
        drop(snapshot);
        host.note(|n| {
            n.upstream = Some(upstream.name().to_owned());
            n.target = Some(name.clone());
            let tool = (kind == ListKind::Tools).then_some(&*original_name);
            n.redaction = upstream.config().redaction_for(tool);
            n.args = members.get("arguments").map(|a| (*a).to_owned());
        });
        members.insert("name".to_owned(), &original);
        let task_augmented = kind == ListKind::Tools && members.contains_key("task");
        let tool = (kind == ListKind::Tools).then_some(&*original_name);
        let reply = self
            .forward_tool(host, &upstream, method, members, tool)
            .await?;
        match reply {
            Reply::Result(result) if task_augmented => Ok(Outcome::Result(
                self.expose_created_task(host, &upstream, result),
            )),
            Reply::Result(result) => Ok(Outcome::Result(content::fit(
                &upstream,
                result,
                host.session.version,
            ))),
            reply => Ok(Outcome::Upstream(reply)),
        }
    }

    /// `resources/read`: route by the URI's prefix, rewrite `uri` both ways.
    async fn read_resource(
        &self,
        host: &HostRequest,
        params: Option<&RawValue>,
    ) -> Result<Outcome, RpcError> {
        let params = params
            .ok_or_else(|| RpcError::invalid_params("resources/read needs params with a `uri`"))?;
        let mut members = members(params)?;
        let uri: String = string_member(&members, "uri")
            .ok_or_else(|| RpcError::invalid_params("resources/read needs a string `uri`"))?;
        host.note(|n| n.target = Some(uri.clone()));
        let (upstream, original) = self.route_uri(&uri)?;
        host.routed(&upstream, &uri);
        let original = to_raw(&original);
        members.insert("uri".to_owned(), &original);
        match self
            .forward(host, &upstream, "resources/read", members)
            .await?
        {
            Reply::Result(result) => Ok(Outcome::Result(expose_contents(&upstream, result))),
            error => Ok(Outcome::Upstream(error)),
        }
    }

    /// The upstream an exposed URI belongs to, and the upstream's own URI.
    fn route_uri(&self, uri: &str) -> Result<(UpstreamHandle, String), RpcError> {
        let snapshot = self.router.snapshot();
        let (upstream, original) = snapshot.route_uri(uri).ok_or_else(|| {
            RpcError::new(
                codes::RESOURCE_NOT_FOUND,
                format!("Resource not found: {uri}"),
            )
            .with_data(json!({ "uri": uri }))
        })?;
        Ok((upstream.clone(), original.to_owned()))
    }

    /// Forwards a request whose params are already rewritten: to the upstream, or to the host
    /// session's own instance of a per-session upstream. The host's progress token is replaced by
    /// ours, the request is cancellable by the host while it runs, and server requests it causes
    /// reach this host only.
    async fn forward(
        &self,
        host: &HostRequest,
        upstream: &UpstreamHandle,
        method: &str,
        members: Members<'_>,
    ) -> Result<Reply, RpcError> {
        self.forward_tool(host, upstream, method, members, None)
            .await
    }

    /// [`Self::forward`] for a tool call, whose deadline may be set per tool.
    async fn forward_tool(
        &self,
        host: &HostRequest,
        upstream: &UpstreamHandle,
        method: &str,
        mut members: Members<'_>,
        tool: Option<&str>,
    ) -> Result<Reply, RpcError> {
        let target = self.target(host, upstream).await?;
        let mut meta_holder = None;
        let progress = match members.get("_meta").map(|m| members_of(m)).transpose()? {
            Some(mut meta) => match meta.get("progressToken").map(|t| (*t).to_owned()) {
                Some(host_token) => {
                    let tokens = ProgressTokens::new(host_token);
                    let ours = RawValue::from_string(tokens.ours.clone()).map_err(internal)?;
                    meta.insert("progressToken".to_owned(), &ours);
                    meta_holder = Some(to_raw(&meta));
                    Some(tokens)
                }
                None => None,
            },
            None => None,
        };
        if let Some(meta) = &meta_holder {
            members.insert("_meta".to_owned(), meta);
        }
        let params = serde_json::to_string(&members).map_err(internal)?;
        let origin = Arc::new(HostOrigin {
            session: Arc::clone(&host.session),
            host_id: Some(host.id.clone()),
            sink: host.sink.clone(),
        });
        let _slot = host
            .session
            .claim_slot(self.max_in_flight_per_session)
            .ok_or_else(|| {
                RpcError::new(
                    codes::BUSY,
                    format!(
                        "this session already has {} requests in flight; retry shortly",
                        self.max_in_flight_per_session
                    ),
                )
            })?;
        let _in_flight = InFlightGuard {
            session: Arc::clone(&host.session),
            host_id: host.id.get().to_owned(),
        };
        let timeout = upstream.config().policy.timeout_for(tool);
        let call = Some(CallContext { origin, progress });
        target
            .request_within(method, Some(&params), call, timeout)
            .await
            .map_err(upstream_error)
    }

    /// Sends a request of mcpmux's own (not a host's) to an upstream.
    async fn upstream_request(
        &self,
        upstream: &UpstreamHandle,
        method: &str,
        params: &Value,
    ) -> Result<Reply, RpcError> {
        upstream
            .request(method, Some(&params.to_string()), None)
            .await
            .map_err(upstream_error)
    }
}

impl HostRequest {
    /// Notes the upstream and target a request was routed to.
    fn routed(&self, upstream: &UpstreamHandle, target: &str) {
        self.note(|n| {
            n.upstream = Some(upstream.name().to_owned());
            n.target = Some(target.to_owned());
        });
    }
}

/// The top-level members of a params object, values left raw.
fn members(params: &RawValue) -> Result<Members<'_>, RpcError> {
    members_of(params)
}

fn members_of(value: &RawValue) -> Result<Members<'_>, RpcError> {
    serde_json::from_str(value.get())
        .map_err(|e| RpcError::invalid_params(format!("expected an object: {e}")))
}

fn string_member(members: &Members<'_>, key: &str) -> Option<String> {
    members
        .get(key)
        .and_then(|v| serde_json::from_str(v.get()).ok())
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
        UpstreamError::Cancelled { upstream } => (codes::INTERNAL_ERROR, upstream),
        UpstreamError::Busy { upstream, .. } => (codes::BUSY, upstream),
        UpstreamError::Unavailable { upstream, .. } | UpstreamError::Failed { upstream, .. } => {
            (codes::UPSTREAM_UNAVAILABLE, upstream)
        }
    };
    RpcError::new(code, e.to_string()).with_data(json!({ "upstream": upstream }))
}

fn internal(e: impl std::fmt::Display) -> RpcError {
    RpcError::new(codes::INTERNAL_ERROR, e.to_string())
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

/// The initialize result: capabilities are the union of what the ready upstreams offer, limited
/// to what the negotiated version knows.
fn initialize_result(snapshot: &Snapshot, version: &'static str) -> Value {
    let offered = |path: &[&str]| {
        snapshot.ready().iter().any(|(_, info)| {
            let mut v = &info.capabilities;
            path.iter().all(|p| {
                v = &v[*p];
                !v.is_null() && v != &Value::Bool(false)
            })
        })
    };
    let mut capabilities = serde_json::Map::new();
    for kind in ListKind::ALL {
        if offered(&[kind.capability()]) {
            capabilities.insert(kind.capability().to_owned(), json!({ "listChanged": true }));
        }
    }
    if offered(&["resources", "subscribe"]) {
        capabilities["resources"]["subscribe"] = Value::Bool(true);
    }
    if offered(&["logging"]) {
        capabilities.insert("logging".to_owned(), json!({}));
    }
    if offered(&["completions"]) && version >= "2025-03-26" {
        capabilities.insert("completions".to_owned(), json!({}));
    }
    if version >= "2025-11-25" {
        let mut tasks = Value::Null;
        for (_, info) in snapshot.ready() {
            if let Some(t) = info.capabilities.get("tasks") {
                merge(&mut tasks, t);
            }
        }
        if !tasks.is_null() {
            capabilities.insert("tasks".to_owned(), tasks);
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

/// Deep union of two capability objects.
fn merge(into: &mut Value, from: &Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (slot, value) if slot.is_null() => *slot = value.clone(),
        _ => {}
    }
}

fn to_raw<T: serde::Serialize + ?Sized>(value: &T) -> Box<RawValue> {
    serde_json::value::to_raw_value(value).unwrap_or_else(|_| RawValue::NULL.to_owned())
}
