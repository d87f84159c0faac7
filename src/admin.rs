//! The admin API, on its own loopback listener: `GET /status` (every upstream's state, version,
//! catalog counts, restarts, last error), `POST /upstreams/{name}/restart`, `GET /health` or
//! `/healthz` (the daemon answers), `GET /ready` or `/readyz` (no upstream is still starting),
//! `GET /metrics` (Prometheus text format, from the one catalog in `metrics`) and the audit log
//! (`GET /audit/query`, `/audit/stats`, `/audit/verify`), tool pins (`GET /pins`,
//! `POST /pins/{upstream}/{tool}/approve`) and tool search (`GET /tools/search`). `mcpmux status`,
//! `restart`, `audit`, `pins`, `approve` and `tools --search` use it.
//! It reads a small state of its own ([`AdminState`]): the router's snapshots, the supervisor,
//! the audit handle, what the metrics read — nothing of the host side's internals. Every
//! answer is a type of `crate::api`, the one the CLI reads it into.
//! Every route but health and readiness passes [`guard`] first: the admin token
//! ([`token`]), the listener's own `Origin`, a loopback `Host`, JSON POSTs.

mod console;
mod guard;
pub mod metrics;
pub mod principals;
#[cfg(test)]
mod tests;
pub mod token;

pub use console::ConsoleState;
pub use guard::AdminGuard;
pub use metrics::catalog::Readings;
pub use token::{AdminToken, TOKEN_FILE, TokenError};

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Json, Response};
use axum::routing::{get, post};
use serde::Deserialize;

use crate::api::{
    Approved, ApprovedTool, AuditStatus, ConfigStatus, FoundTool, LoggedOut, LoginStarted,
    LoginState, Pins, Refused, ReloadChanges, Reloaded, Restarted, SessionStatus, Sessions, Status,
    ToolSearch, UpstreamStatus,
};
use crate::audit::{AuditHandle, FilterArgs, ReadError, now_us};
use crate::config::Transport;
use crate::mcp::ListKind;
use crate::router::RouterHandle;
use crate::supervisor::{RestartError, SupervisorHandle};

/// What the admin API reads and acts on.
pub struct AdminState {
    pub router: RouterHandle,
    pub supervisor: SupervisorHandle,
    pub audit: AuditHandle,
    /// What `/metrics` reads (and the OTLP exporter with it): sessions, hosts, reloads…
    pub metrics: Arc<Readings>,
    /// How many host sessions may be open at once (`server.max_sessions`, as the running
    /// config says).
    pub max_sessions: Box<dyn Fn() -> usize + Send + Sync>,
    /// Every open host session: who, which profile, how old, requests in flight.
    pub sessions: Box<dyn Fn() -> Vec<SessionStatus> + Send + Sync>,
    /// Sign-ins started through `POST /upstreams/{name}/login`, by upstream.
    pub logins: std::sync::Mutex<HashMap<String, LoginState>>,
    /// The running config, and reloading it.
    pub reloader: Arc<dyn Reload>,
    /// The token and the origin every admin request is checked against.
    pub guard: AdminGuard,
    /// Who is signed in to the web console.
    pub console: ConsoleState,
    /// Each principal's own sign-ins to upstreams.
    pub principals: Arc<dyn principals::PrincipalSignIns>,
    /// Whether the daemon should be sent requests (`/readyz`).
    pub readiness: Arc<crate::readiness::Readiness>,
    /// This replica's name (`[cluster]`), for `/status`.
    pub replica: Option<String>,
    /// The fleet store approvals go through first (`[cluster] store`).
    pub fleet: Option<crate::cluster::store::FleetStore>,
}

/// Reloading the daemon's config (`POST /reload`), and how it went.
pub trait Reload: Send + Sync {
    /// Reads the config file again and applies it: what changed, or why nothing did.
    fn reload(
        &self,
    ) -> futures_util::future::BoxFuture<'_, Result<ReloadChanges, crate::config::ReloadError>>;
    /// The config file and its last reload.
    fn status(&self) -> ConfigStatus;
    /// The keys whose values are secrets (`audit.secret_keys`), for the config the console shows.
    fn secret_keys(&self) -> crate::config::SecretKeys;
}

impl std::fmt::Debug for AdminState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminState").finish_non_exhaustive()
    }
}

/// The admin application: health and readiness open to any caller (they tell nothing but that
/// the daemon answers), every other route behind [`guard`].
pub fn app(state: Arc<AdminState>) -> Router {
    let open = Router::new()
        .route("/health", get(|| async { "ok" }))
        .route("/healthz", get(|| async { "ok" }))
        .route("/ready", get(ready))
        .route("/readyz", get(ready))
        .with_state(Arc::clone(&state));
    Router::new()
        .route("/status", get(status))
        .route("/metrics", get(metrics::metrics))
        .route("/sessions", get(sessions))
        .route("/reload", post(reload))
        .route("/upstreams/{name}/restart", post(restart))
        .route("/upstreams/{name}/login", post(login).get(login_state))
        .route("/upstreams/{name}/logout", post(logout))
        .route(
            "/upstreams/{name}/principals/{principal}/login",
            post(principals::login),
        )
        .route(
            "/upstreams/{name}/principals/{principal}/logout",
            post(principals::logout),
        )
        .route("/tools/search", get(search_tools))
        .route("/pins", get(pins))
        .route("/pins/{upstream}/{tool}/approve", post(approve))
        .with_state(Arc::clone(&state))
        .merge(audit_routes(Arc::clone(&state)))
        .route_layer(axum::middleware::from_fn_with_state(
            Arc::clone(&state),
            guard::guard,
        ))
        .merge(open)
        .merge(console::routes(state))
}

/// How long an audit read waits for queued records to be committed first.
const SYNC_DEADLINE: std::time::Duration = std::time::Duration::from_secs(5);

async fn status(State(admin): State<Arc<AdminState>>) -> Json<Status> {
    Json(status_of(&admin))
}

/// The daemon's status as `GET /status` answers it (the console shows the same).
fn status_of(admin: &AdminState) -> Status {
    let snapshot = admin.router.snapshot();
    let counts = snapshot.counts();
    let mut upstreams: Vec<UpstreamStatus> = snapshot
        .upstreams()
        .map(|h| {
            let s = h.status();
            let count = |kind| counts.get(&(h.name(), kind)).copied().unwrap_or(0);
            let total = h.metrics().total();
            let ms =
                |q| (total.latency.quantile(q)).map(|d| (d.as_secs_f64() * 1e5).round() / 100.0);
            let (p50, p99) = (ms(0.5), ms(0.99));
            let (transport, url) = match &h.config().transport {
                Transport::Stdio(_) => ("stdio", None),
                Transport::Remote(r) => {
                    let kind = h.diagnostics().remembered().unwrap_or(r.kind);
                    (kind.as_str(), Some(r.url.as_str()))
                }
            };
            UpstreamStatus {
                name: h.name().to_owned(),
                prefix: h.prefix().as_str().to_owned(),
                state: s.phase.to_string(),
                transport: transport.to_owned(),
                url: url.map(str::to_owned),
                oauth: h.oauth().is_some(),
                last_http_error: h.diagnostics().last_http_error(),
                http_session: h.diagnostics().http_session(),
                last_error: s.last_error,
                restarts: s.restarts,
                pid: s.pid,
                protocol_version: (s.info.as_ref()).map(|i| i.protocol_version.as_str().to_owned()),
                server: s.info.as_ref().map(|i| i.server_info.clone()),
                tools: count(ListKind::Tools),
                prompts: count(ListKind::Prompts),
                resources: count(ListKind::Resources),
                resource_templates: count(ListKind::ResourceTemplates),
                in_flight: h.in_flight(),
                requests: total.requests(),
                errors: total.errors(),
                latency_p50_ms: p50,
                latency_p99_ms: p99,
                idle_seconds: h.idle_for().as_secs(),
                changed_tools: admin.router.changed_tools(h.name()),
                principals: (h.config().isolation == crate::config::Isolation::PerPrincipal)
                    .then(|| admin.supervisor.instances_of(h.name())),
                signed_in: (h.signs_in_each_principal())
                    .then(|| admin.principals.signed_in(h.name())),
                pin: match h.config().pin {
                    crate::config::PinMode::Record => "record",
                    crate::config::PinMode::Strict => "strict",
                }
                .to_owned(),
            }
        })
        .collect();
    upstreams.sort_by(|a, b| a.name.cmp(&b.name));
    let audit = &admin.audit;
    Status {
        version: env!("CARGO_PKG_VERSION").to_owned(),
        replica: admin.replica.clone(),
        catalog_generation: snapshot.generation,
        sessions: (admin.metrics.sessions)(),
        max_sessions: (admin.max_sessions)(),
        config: admin.reloader.status(),
        hosts: (admin.metrics.hosts)(),
        upstreams,
        audit: AuditStatus {
            enabled: audit.is_enabled(),
            queued: audit.queued(),
            dropped: audit.dropped(),
            records: audit.store().map(crate::audit::Store::len),
        },
    }
}

/// Every open host session.
async fn sessions(State(admin): State<Arc<AdminState>>) -> Json<Sessions> {
    let mut sessions = (admin.sessions)();
    sessions.sort_by_key(|s| s.age_seconds);
    Json(Sessions { sessions })
}

/// A refusal as the admin API answers one: `status` and `{"error": why}`.
fn refused(status: StatusCode, error: String) -> Response {
    (status, Json(Refused { error })).into_response()
}

/// Reloads the config: 200 with what changed, 422 with why the file was refused.
async fn reload(State(admin): State<Arc<AdminState>>) -> Response {
    match admin.reloader.reload().await {
        Ok(reloaded) => Json(Reloaded { reloaded }).into_response(),
        Err(error) => refused(StatusCode::UNPROCESSABLE_ENTITY, error.to_string()),
    }
}

#[derive(Debug, Deserialize)]
struct SearchAsked {
    query: String,
    profile: Option<String>,
    limit: Option<usize>,
}

/// The tools of a view that answer a search best: the index hosts of a search-mode profile
/// search (built at the first search of another view, off the async workers).
async fn search_tools(
    State(admin): State<Arc<AdminState>>,
    Query(asked): Query<SearchAsked>,
) -> Response {
    let views = admin.router.views();
    let Some(view) = views.named(asked.profile.as_deref()).cloned() else {
        let profile = asked.profile.unwrap_or_default();
        let error = format!("no profile `{profile}` is configured (see [profiles] in the config)");
        return refused(StatusCode::NOT_FOUND, error);
    };
    let limit = asked.limit.unwrap_or(10).clamp(1, 1000);
    let found = tokio::task::spawn_blocking(move || {
        let hits = view.tool_index().search(&asked.query, limit);
        let tools = view.list(ListKind::Tools);
        let found = (hits.into_iter())
            .filter_map(|hit| {
                let entry = tools.get(hit.tool)?;
                let definition = crate::jsonrpc::Members::of(&entry.json);
                let text = |key| {
                    let raw = definition.as_ref()?.get(key)?;
                    serde_json::from_str::<String>(raw.get()).ok()
                };
                Some(FoundTool {
                    name: hit.name,
                    upstream: entry.upstream.name().to_owned(),
                    title: text("title"),
                    description: text("description"),
                    score: Some(hit.score).filter(|s| s.is_finite()),
                    matched: hit.matched,
                })
            })
            .collect();
        ToolSearch {
            profile: asked.profile,
            generation: view.generation,
            indexed: tools.len(),
            tools: found,
        }
    })
    .await;
    match found {
        Ok(found) => Json(found).into_response(),
        Err(e) => refused(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the search failed: {e}"),
        ),
    }
}

/// Every tool pin: its digest, and the new one when the definition changed.
async fn pins(State(admin): State<Arc<AdminState>>) -> Json<Pins> {
    Json(Pins {
        pins: admin.router.pins().unwrap_or_default(),
    })
}

/// Pins a changed tool's new definition (and shows it again where `pin = "strict"` withheld it).
async fn approve(
    State(admin): State<Arc<AdminState>>,
    Path((upstream, tool)): Path<(String, String)>,
) -> Response {
    match approve_pin(&admin, &upstream, &tool).await {
        Ok(()) => Json(Approved {
            approved: ApprovedTool { upstream, tool },
        })
        .into_response(),
        Err(error @ NotApproved::Nothing { .. }) => {
            refused(StatusCode::NOT_FOUND, error.to_string())
        }
        Err(error @ NotApproved::FleetDown(_)) => {
            refused(StatusCode::SERVICE_UNAVAILABLE, error.to_string())
        }
    }
}

/// Why a tool's change was not approved.
#[derive(Debug, thiserror::Error)]
enum NotApproved {
    #[error(
        "`{tool}` of upstream `{upstream}` has no changed definition to approve (see `mcpmux pins`)"
    )]
    Nothing { upstream: String, tool: String },
    #[error(
        "not approved: {0}. Every replica must agree on an approval, so none is made until the store is back; try again then"
    )]
    FleetDown(crate::cluster::store::StoreError),
}

/// Approves `upstream`'s changed `tool` (audited) — for the whole fleet first, where replicas
/// share a store — or says why it was not.
async fn approve_pin(admin: &AdminState, upstream: &str, tool: &str) -> Result<(), NotApproved> {
    let nothing = || NotApproved::Nothing {
        upstream: upstream.to_owned(),
        tool: tool.to_owned(),
    };
    if let Some(fleet) = &admin.fleet {
        let approval = admin.router.approval(upstream, tool).ok_or_else(nothing)?;
        fleet
            .approve(&approval)
            .await
            .map_err(NotApproved::FleetDown)?;
    }
    if !admin.router.approve(upstream, tool) {
        return Err(nothing());
    }
    tracing::info!(upstream, tool, "A changed tool definition was approved.");
    let mut record = crate::audit::Record::event("tool.approved", Some(upstream), None, None);
    record.target = Some(tool.to_owned());
    admin.audit.record(record);
    Ok(())
}

async fn ready(State(admin): State<Arc<AdminState>>) -> Response {
    admin.readiness.answer()
}

async fn restart(State(admin): State<Arc<AdminState>>, Path(name): Path<String>) -> Response {
    match admin.supervisor.restart(&name).await {
        Ok(()) => Json(Restarted { restarted: name }).into_response(),
        Err(e @ RestartError::Unknown(_)) => refused(StatusCode::NOT_FOUND, e.to_string()),
        Err(e) => refused(StatusCode::SERVICE_UNAVAILABLE, e.to_string()),
    }
}

/// The upstream `name`, when it signs in with OAuth; else the status and why.
pub(crate) fn oauth_upstream(
    admin: &AdminState,
    name: &str,
) -> Result<crate::upstream::UpstreamHandle, (StatusCode, String)> {
    let snapshot = admin.router.snapshot();
    let Some(handle) = snapshot.upstreams().find(|h| h.name() == name).cloned() else {
        return Err((
            StatusCode::NOT_FOUND,
            format!("no upstream is named `{name}`"),
        ));
    };
    if handle.oauth().is_none() {
        let why = format!(
            "upstream `{name}` does not sign in with OAuth (it is a command, or has a bearer token configured)"
        );
        return Err((StatusCode::BAD_REQUEST, why));
    }
    Ok(handle)
}

/// [`refused`], from a pair.
pub(crate) fn refusal((status, why): (StatusCode, String)) -> Response {
    refused(status, why)
}

/// `POST /upstreams/{name}/login`: starts signing in. Answers the authorization URL to open
/// (or `done` when no person is needed); once the tokens are stored the upstream restarts.
async fn login(State(admin): State<Arc<AdminState>>, Path(name): Path<String>) -> Response {
    match start_login(&admin, name, None).await {
        Ok(started) => Json(started).into_response(),
        Err(refused) => refusal(refused),
    }
}

/// Starts a sign-in to upstream `name` (the console's sign-in button too, which passes the page
/// the person returns to): where the person signs in, or why not.
async fn start_login(
    admin: &Arc<AdminState>,
    name: String,
    return_to: Option<url::Url>,
) -> Result<LoginStarted, (StatusCode, String)> {
    let handle = oauth_upstream(admin, &name)?;
    let login = match handle.sign_in() {
        Some(Ok(login)) => crate::oauth::Login { return_to, ..login },
        Some(Err(why)) => return Err((StatusCode::BAD_GATEWAY, why.to_string())),
        None => {
            let why = format!("upstream `{name}` needs no sign-in");
            return Err((StatusCode::BAD_REQUEST, why));
        }
    };
    let started = login.start().await;
    let started = match started {
        Ok(started) => started,
        Err(e) => {
            let why = format!("cannot sign in to upstream `{name}`: {e}");
            tracing::warn!(upstream = %name, error = %e, "Sign-in failed.");
            let error = why.clone();
            set_login(admin, &name, LoginState::Failed { error });
            return Err((StatusCode::BAD_GATEWAY, why));
        }
    };
    let url = started.authorization_url.clone();
    let authorization_url = url.clone().unwrap_or_default();
    set_login(admin, &name, LoginState::Pending { authorization_url });
    let waiting = Arc::clone(admin);
    let upstream = name.clone();
    tokio::spawn(async move {
        let outcome = started
            .finished
            .await
            .unwrap_or_else(|_| Err(crate::oauth::OAuthError::new("the sign-in was dropped")));
        match outcome {
            Ok(()) => {
                set_login(&waiting, &upstream, LoginState::Done);
                if let Err(e) = waiting.supervisor.restart(&upstream).await {
                    tracing::warn!(upstream = %upstream, error = %e, "Signed in, but the upstream could not be restarted.");
                }
            }
            Err(e) => {
                tracing::warn!(upstream = %upstream, error = %e, "Sign-in failed.");
                let error = format!("cannot sign in to upstream `{upstream}`: {e}");
                set_login(&waiting, &upstream, LoginState::Failed { error });
            }
        }
    });
    Ok(LoginStarted {
        upstream: name,
        done: url.is_none(),
        authorization_url: url,
    })
}

fn set_login(admin: &AdminState, name: &str, state: LoginState) {
    crate::sync::lock(&admin.logins).insert(name.to_owned(), state);
}

/// `GET /upstreams/{name}/login`: `pending` (with the URL), `done`, `failed` (with why) or
/// `none`.
async fn login_state(
    State(admin): State<Arc<AdminState>>,
    Path(name): Path<String>,
) -> Json<LoginState> {
    let state = crate::sync::lock(&admin.logins).get(&name).cloned();
    Json(state.unwrap_or(LoginState::None))
}

/// `POST /upstreams/{name}/logout`: forgets the upstream's tokens and restarts it (it then
/// needs a sign-in again).
async fn logout(State(admin): State<Arc<AdminState>>, Path(name): Path<String>) -> Response {
    match forget_login(&admin, &name).await {
        Ok(()) => Json(LoggedOut { logged_out: name }).into_response(),
        Err(refused) => refusal(refused),
    }
}

/// Forgets upstream `name`'s tokens and restarts it.
async fn forget_login(admin: &AdminState, name: &str) -> Result<(), (StatusCode, String)> {
    let handle = oauth_upstream(admin, name)?;
    let Some(oauth) = handle.oauth() else {
        let why = format!("upstream `{name}` does not sign in with OAuth");
        return Err((StatusCode::BAD_REQUEST, why));
    };
    match std::fs::remove_file(&oauth.token_file) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            let why = format!("cannot remove {}: {e}", oauth.token_file.display());
            return Err((StatusCode::INTERNAL_SERVER_ERROR, why));
        }
    }
    crate::sync::lock(&admin.logins).remove(name);
    let _ = admin.supervisor.restart(name).await;
    Ok(())
}

/// The audit routes: `GET /audit/query`, `/audit/stats`, `/audit/verify` (same filters as the CLI).
pub fn audit_routes(state: Arc<AdminState>) -> Router {
    Router::new()
        .route("/audit/query", get(audit_query))
        .route("/audit/stats", get(audit_stats))
        .route("/audit/verify", get(audit_verify))
        .with_state(state)
}

/// A read of the store ([`read_store`]) as the admin API answers it: its value as JSON, or the
/// refusal.
async fn with_store<T: serde::Serialize + Send + 'static>(
    admin: &AdminState,
    read: impl FnOnce(crate::audit::Store) -> Result<T, ReadError> + Send + 'static,
) -> Response {
    match read_store(admin, read).await {
        Ok(value) => Json(value).into_response(),
        Err(refusal) => self::refusal(refusal),
    }
}

/// Reads the store off the runtime (sled calls block), after everything recorded before is
/// committed; a refusal says why not (the log is off, the filter is wrong, the read failed).
async fn read_store<T: Send + 'static>(
    admin: &AdminState,
    read: impl FnOnce(crate::audit::Store) -> Result<T, ReadError> + Send + 'static,
) -> Result<T, (StatusCode, String)> {
    let audit = admin.audit.clone();
    let Some(store) = audit.store().cloned() else {
        let why = "the audit log is turned off (audit.enabled = false)".to_owned();
        return Err((StatusCode::NOT_FOUND, why));
    };
    let read = move || {
        audit.sync(SYNC_DEADLINE);
        read(store)
    };
    match tokio::task::spawn_blocking(read).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) if e.is_asked_wrong() => Err((StatusCode::BAD_REQUEST, e.to_string())),
        Ok(Err(e)) => Err((StatusCode::INTERNAL_SERVER_ERROR, e.to_string())),
        Err(e) => Err((StatusCode::INTERNAL_SERVER_ERROR, e.to_string())),
    }
}

async fn audit_query(
    State(admin): State<Arc<AdminState>>,
    Query(args): Query<FilterArgs>,
) -> Response {
    with_store(&admin, move |store| {
        Ok(store.query(&args.to_filter(now_us())?)?)
    })
    .await
}

async fn audit_stats(
    State(admin): State<Arc<AdminState>>,
    Query(args): Query<FilterArgs>,
) -> Response {
    with_store(&admin, move |store| {
        Ok(store.stats(&args.to_filter(now_us())?)?)
    })
    .await
}

async fn audit_verify(State(admin): State<Arc<AdminState>>) -> Response {
    with_store(&admin, |store| Ok(store.verify()?)).await
}
