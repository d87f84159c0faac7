//! `initialize`: negotiates a version, opens a session, and answers with what the ready
//! upstreams offer (the union of their capabilities, limited to what the negotiated version
//! knows) and their instructions.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Value, json};

use super::HostService;
use crate::downstream::session::{ClientInfo, HostInfo, Session};
use crate::jsonrpc::{RpcError, codes, response_line, to_raw};
use crate::mcp::ListKind;
use crate::mcp::envelope::ClientCapabilities;
use crate::mcp::names::SEPARATOR;
use crate::mcp::version::Version;
use crate::router::Snapshot;
use crate::upstream::{Phase, UpstreamHandle};

impl HostService {
    /// Handles `initialize`: opens a session (with `session_id`, or a new id) and returns it with
    /// the response line. The session it `replaces` (the host initializes again) is closed
    /// first, its instances stopped and subscriptions dropped, so nothing of it leaks. Lazy
    /// upstreams start now; it waits (bounded) for upstreams still starting, so the first
    /// listing is whole. Beyond a session limit it is refused with `TOO_MANY_SESSIONS`.
    pub async fn initialize(
        &self,
        id: &RawValue,
        params: Option<&RawValue>,
        (session_id, replaces): (Option<String>, Option<&str>),
        access: crate::downstream::Access,
    ) -> Result<(Arc<Session>, String), RpcError> {
        #[derive(Deserialize)]
        #[serde(rename_all = "camelCase")]
        struct Params<'a> {
            protocol_version: String,
            #[serde(default, borrow)]
            capabilities: Option<&'a RawValue>,
            #[serde(default, borrow)]
            client_info: Option<&'a RawValue>,
        }
        let params: Params<'_> = match params.map(|p| serde_json::from_str(p.get())) {
            Some(Ok(p)) => p,
            Some(Err(e)) => {
                return Err(RpcError::invalid_params(format!(
                    "invalid initialize params: {e}"
                )));
            }
            None => return Err(RpcError::invalid_params("initialize needs params")),
        };
        // Sized before anything is built of them: what a host declares is kept for its session.
        let capabilities =
            ClientCapabilities::declared("initialize params.capabilities", params.capabilities)?;
        let client_info = ClientInfo::of(crate::mcp::envelope::within_limit(
            "initialize params.clientInfo",
            params.client_info,
        )?);
        if let Some(replaced) = replaces {
            if self.close_session(replaced).await {
                tracing::info!(session = %replaced, "Closed a host session: the host initialized again.");
            }
        }
        let version = Version::negotiate(&params.protocol_version);
        let profile = access.profile.as_deref();
        let starting: Vec<UpstreamHandle> = self
            .upstreams
            .router
            .view(profile)
            .upstreams()
            .cloned()
            .collect();
        for upstream in &starting {
            upstream.start_if_lazy();
        }
        let starting = starting
            .iter()
            .filter(|h| h.phase() == Phase::Starting || h.never_started());
        futures_util::future::join_all(
            starting.map(|h| h.settled(self.upstreams.limits.load().initialize_wait)),
        )
        .await;
        let snapshot = self.upstreams.router.view(profile);
        let host = HostInfo {
            version,
            capabilities,
            client_info,
            request_log_level: None,
        };
        let max_sessions = self.upstreams.limits.load().max_sessions;
        let session = (self.upstreams.delivery.sessions)
            .open(session_id, host, access, max_sessions)
            .map_err(|refused| {
                tracing::info!(reason = %refused, "Refused a host session.");
                RpcError::new(codes::TOO_MANY_SESSIONS, refused.to_string())
            })?;
        self.audit_event(
            "session.opened",
            &session.id,
            Some(format!("{version} {}", session.host.client_info)),
        );
        let result = initialize_result(&snapshot, version);
        Ok((session, response_line(id, &to_raw(&result))))
    }
}

/// The initialize result: capabilities are the union of what the ready upstreams offer, limited
/// to what the negotiated version knows.
fn initialize_result(snapshot: &Snapshot, version: Version) -> Value {
    let mut result = json!({
        "protocolVersion": version.as_str(),
        "capabilities": capabilities(snapshot, version),
        "serverInfo": { "name": "mcpmux", "version": env!("CARGO_PKG_VERSION") },
    });
    if let Some(instructions) = instructions(snapshot) {
        result["instructions"] = Value::String(instructions);
    }
    result
}

/// What mcpmux offers a host of `version` in `snapshot`'s view: the union of what the ready
/// upstreams offer, limited to what the version knows. A stateless (2026-07-28) host learns of
/// list changes on a `subscriptions/listen` stream; it is offered no resource subscriptions or
/// log messages yet.
pub(super) fn capabilities(snapshot: &Snapshot, version: Version) -> Value {
    let offered = |pointer: &str| snapshot.offering(pointer).next().is_some();
    let stateful = !version.is_modern();
    let mut capabilities = serde_json::Map::new();
    for kind in ListKind::ALL {
        if offered(&format!("/{}", kind.capability())) {
            let listed = json!({ "listChanged": true });
            capabilities.insert(kind.capability().to_owned(), listed);
        }
    }
    if stateful && offered("/resources/subscribe") {
        capabilities["resources"]["subscribe"] = Value::Bool(true);
    }
    if stateful && offered("/logging") {
        capabilities.insert("logging".to_owned(), json!({}));
    }
    if offered("/completions") && version.has_completions() {
        capabilities.insert("completions".to_owned(), json!({}));
    }
    // The extensions the ready upstreams declare, as values (but the tasks extension, whose
    // methods mcpmux does not route).
    let mut extensions = Value::Null;
    for (_, info) in snapshot.ready() {
        if let Some(declared) = info.capabilities.get("extensions") {
            merge(&mut extensions, declared);
        }
    }
    if let Value::Object(declared) = &mut extensions {
        declared.remove(UNROUTED_EXTENSION);
        // A directory can be read through mcpmux when every upstream that serves skills here
        // can read one (a request goes to one of them).
        if let Some(skills) = declared.get_mut(crate::mcp::skills::EXTENSION) {
            let all = (snapshot.ready().iter())
                .filter(|(_, info)| info.offers(ListKind::Skills))
                .all(|(_, info)| {
                    info.capabilities["extensions"][crate::mcp::skills::EXTENSION]["directoryRead"]
                        == true
                });
            if let Value::Object(skills) = skills {
                match all {
                    true => skills.insert("directoryRead".to_owned(), Value::Bool(true)),
                    false => skills.remove("directoryRead"),
                };
            }
        }
        if !declared.is_empty() {
            capabilities.insert("extensions".to_owned(), extensions);
        }
    }
    if version.has_tasks() {
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
    Value::Object(capabilities)
}

/// The extension whose methods mcpmux does not route: not offered to hosts.
const UNROUTED_EXTENSION: &str = "io.modelcontextprotocol/tasks";

/// The ready upstreams' instructions, each under a heading that names it (and its prefix).
pub(super) fn instructions(snapshot: &Snapshot) -> Option<String> {
    let instructions: Vec<String> = snapshot
        .ready()
        .iter()
        .filter_map(|(h, info)| {
            info.instructions.as_ref().map(|i| {
                let prefix = snapshot.prefix_of(h);
                if prefix.is_none() {
                    return format!("## {}\n{i}", h.name());
                }
                format!(
                    "## {} (tools prefixed `{prefix}{SEPARATOR}`)\n{i}",
                    h.name(),
                )
            })
        })
        .collect();
    (!instructions.is_empty()).then(|| instructions.join("\n\n"))
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
