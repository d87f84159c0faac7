//! `mcpmux serve`: builds every part from the config, serves hosts until SIGTERM/SIGINT, then
//! shuts down in order — stop accepting, end host sessions, stop upstreams (and their process groups).

mod fleet;
pub mod reload;
mod systemd;

use std::io::Write;
use std::sync::Arc;

use tokio::net::TcpListener;

use crate::admin::AdminState;
use crate::audit::{AuditHandle, Record};
use crate::config::Config;
use crate::downstream::{Delivery, HostService, SessionStore, app};
use crate::router::RouterHandle;
use crate::supervisor::SupervisorHandle;
use crate::telemetry::audit_logs::AuditExport;
use crate::upstream::{HostEvents, UpstreamHandle};

/// How long shutdown waits for the audit writer to commit what is queued.
const AUDIT_CLOSE: std::time::Duration = std::time::Duration::from_secs(10);
/// How long a stopping daemon waits for the audit export to send what is queued.
const AUDIT_EXPORT_CLOSE: std::time::Duration = std::time::Duration::from_secs(2);

/// Why the daemon could not run.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(
        "cannot listen on {addr}: {source} (is another mcpmux running? change server.listen or pass --listen)"
    )]
    Bind {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("{0}")]
    Audit(crate::audit::StoreError),
    #[error("{0}")]
    Pins(#[from] crate::pins::PinError),
    #[error("could not start an internal actor: {0}")]
    Actor(#[from] ractor::SpawnErr),
    #[error("serving HTTP failed: {0}")]
    Serve(std::io::Error),
    #[error(
        "refusing to listen on {0}: it is reachable beyond this machine, and no [hosts] credential is configured, so anyone who reaches the port could see and call every upstream. Fix: add [hosts.NAME] with token_sha256 or token_file (or [server.authorization] for JWTs), or listen on 127.0.0.1"
    )]
    Exposed(std::net::SocketAddr),
    #[error("admin.listen (or --admin) `{0}` {exposed}; fix: {fix}", exposed = crate::config::ADMIN_EXPOSED, fix = crate::config::ADMIN_EXPOSED_FIX)]
    AdminExposed(std::net::SocketAddr),
    #[error("{0}")]
    AdminToken(#[from] crate::admin::TokenError),
    #[error(
        "the cursor keys {path}: {why} (fix the file, or delete it and a new one is made at the next start: hosts then list again from the start)"
    )]
    CursorKeys { path: String, why: String },
    #[error("{0} (principals' upstream tokens cannot be kept)")]
    Vault(#[from] crate::oauth::vault::VaultError),
    #[error(transparent)]
    AuditExport(#[from] crate::telemetry::audit_logs::AuditExportError),
    #[error(transparent)]
    Fleet(#[from] crate::cluster::store::StoreError),
}

/// The file of the keys listing cursors of stateless hosts are signed with, in the state
/// directory.
const CURSOR_KEYS: &str = "cursor.keys";

/// The cursor key ring: `server.cursor_keys`, else in the state directory (made, with one random
/// key, where it is not yet).
fn cursor_keys(config: &Config) -> Result<crate::mcp::cursor::KeyRing, DaemonError> {
    let path =
        (config.server.cursor_keys.clone()).unwrap_or_else(|| config.state_dir.join(CURSOR_KEYS));
    let failed = |why: String| DaemonError::CursorKeys {
        path: path.display().to_string(),
        why,
    };
    if config.cluster.is_some() {
        // Every replica must read the same keys: one that made its own would refuse the others'
        // cursors and states.
        let text = crate::private_file::read_provisioned(&path).map_err(|e| {
            failed(format!(
                "{e}; every replica of a cluster reads the same provisioned file (make one with `echo \"1 $(openssl rand -hex 32)\" > cursor.keys`)"
            ))
        })?;
        return crate::mcp::cursor::KeyRing::parse(&text).map_err(|e| failed(e.to_string()));
    }
    let made = crate::private_file::read_or_create(&path, || {
        crate::private_file::random_hex(32).map(|key| crate::mcp::cursor::new_ring_text(&key))
    });
    let (text, made) = made.map_err(|e| failed(e.to_string()))?;
    if made {
        tracing::info!(file = %path.display(), "Made the key listing cursors are signed with.");
    }
    crate::mcp::cursor::KeyRing::parse(&text).map_err(|e| failed(e.to_string()))
}

/// What the host endpoint answers beside MCP: readiness, and (a replica of a cluster) what
/// forwards requests bound to another replica.
fn serving(config: &Config, core: &Core) -> crate::downstream::Serving {
    let cluster = config.cluster.as_ref().map(|c| {
        tracing::info!(replica = %c.replica, "Serving as a replica of a cluster.");
        Arc::new(crate::cluster::Cluster::new(c, &core.cursor_keys))
    });
    crate::downstream::Serving {
        readiness: Arc::new(crate::readiness::Readiness::new(core.router.clone())),
        cluster,
    }
}

/// What the host service signs and seals with: the cursor key ring `cursors`, and the ring
/// multi-round states are sealed with — derived from `[cluster] state_keys` where set, else from
/// the cursor keys (so replicas sharing `server.cursor_keys` open each other's states).
fn keys(
    config: &Config,
    cursors: crate::mcp::cursor::KeyRing,
    owner: Option<Arc<str>>,
) -> Result<crate::downstream::Keys, DaemonError> {
    let separate = (config.cluster.as_ref()).and_then(|c| c.state_keys.clone());
    let states = match separate {
        None => cursors.derived(crate::cluster::STATE_PURPOSE),
        Some(path) => {
            let failed = |why: String| DaemonError::CursorKeys {
                path: path.display().to_string(),
                why,
            };
            let text = std::fs::read_to_string(&path).map_err(|e| failed(e.to_string()))?;
            let ring =
                crate::mcp::cursor::KeyRing::parse(&text).map_err(|e| failed(e.to_string()))?;
            ring.derived(crate::cluster::STATE_PURPOSE)
        }
    };
    let states = crate::sealed::SealRing::new(&states)
        .unwrap_or_else(|| unreachable!("a parsed key ring holds a key"));
    Ok(crate::downstream::Keys {
        cursors,
        states,
        owner,
    })
}

/// The config's profiles, and its `[hosts]` as principals seeing them.
fn principals(
    config: &Config,
) -> (
    Vec<Arc<crate::config::Profile>>,
    Vec<Arc<crate::downstream::Principal>>,
) {
    let profiles: Vec<_> = config.profiles.iter().cloned().map(Arc::new).collect();
    let principals = (config.hosts.iter())
        .map(|h| Arc::new(crate::downstream::Principal::new(h, &profiles)))
        .collect();
    (profiles, principals)
}

/// The shared instance of a configured upstream, publishing through `link`.
fn upstream_handle(
    config: &crate::config::UpstreamConfig,
    events: &Arc<dyn HostEvents>,
    link: &crate::upstream::CatalogLink,
) -> UpstreamHandle {
    UpstreamHandle::new(config.clone(), Some(Arc::clone(events)), Some(link.clone()))
}

/// Who may use the host endpoint, once it listens at `local`: the `[hosts]`, the JWT issuers, and
/// (with `[server.authorization]`) the protected resource at `http://LOCAL/mcp` unless configured.
fn gate(
    config: &Config,
    local: std::net::SocketAddr,
    principals: Vec<Arc<crate::downstream::Principal>>,
    profiles: Vec<Arc<crate::config::Profile>>,
) -> crate::downstream::Gate {
    let authorization = config.server.authorization.as_ref();
    let resource = authorization.map(|a| {
        a.resource
            .clone()
            .unwrap_or_else(|| format!("http://{local}/mcp"))
    });
    let jwt = crate::downstream::JwtGate::new(
        &config.hosts,
        &principals,
        authorization.zip(resource.as_deref()),
        &profiles,
    );
    let protected =
        authorization
            .zip(resource)
            .map(|(a, resource)| crate::downstream::ProtectedResource {
                resource,
                authorization_servers: vec![a.issuer.issuer.clone()],
                scopes_supported: a.scopes_supported.clone(),
            });
    crate::downstream::Gate {
        principals,
        profiles,
        jwt,
        protected,
    }
}

/// Runs the daemon until a shutdown signal; `overrides` are the flags a reload applies again.
pub async fn serve(config: Config, overrides: reload::Overrides) -> Result<(), DaemonError> {
    let admin_token = preflight(&config)?;
    let listener = TcpListener::bind(config.server.listen)
        .await
        .map_err(|source| DaemonError::Bind {
            addr: config.server.listen,
            source,
        })?;
    let local = listener.local_addr().map_err(DaemonError::Serve)?;
    let (audit, audit_export) = open_audit(&config)?;
    let core = Core::start(&config, &audit).await?;
    core.service.signins().set_base(public_url(&config, local));
    let hosts = Arc::new(arc_swap::ArcSwap::from_pointee(core.principals.clone()));
    let gate = gate(
        &config,
        local,
        core.principals.clone(),
        core.profiles.clone(),
    );
    let serving = serving(&config, &core);
    let readiness = Arc::clone(&serving.readiness);
    let (app, edge) = app(Arc::clone(&core.service), (&config.server, gate), serving);
    let reloader = reload::Reloader::new(
        config.clone(),
        core.upstreams.clone(),
        overrides,
        reload::Parts {
            router: core.router.clone(),
            supervisor: core.supervisor.clone(),
            service: Arc::clone(&core.service),
            edge,
            events: Arc::clone(&core.events),
            audit: audit.clone(),
            hosts: Arc::clone(&hosts),
            local,
        },
    );
    let readings = core.readings(&audit, hosts, &reloader);
    let telemetry = start_telemetry(&config, &readings);
    tracing::info!(config = %config.source.display(), url = %format!("http://{local}/mcp"), workers = config.server.workers, "mcpmux is listening.");
    let admin_token_file = admin_token.as_ref().map(|t| t.file.clone());
    let admin_url = match (config.admin, admin_token) {
        (Some(addr), Some(token)) => {
            let parts = (&core, &audit, &readings, &reloader, &readiness);
            start_admin(&config, (addr, token), parts).await?
        }
        _ => None,
    };
    // Where the CLI finds this daemon (removed when it stops), left before it says it listens.
    let _published = crate::locator::publish(&crate::locator::DaemonRecord {
        pid: std::process::id(),
        url: format!("http://{local}/mcp"),
        admin: admin_url.clone(),
        admin_token_file: (admin_url.as_ref().and(admin_token_file))
            .map(|f| std::fs::canonicalize(&f).unwrap_or(f)),
        config: std::fs::canonicalize(&config.source).unwrap_or_else(|_| config.source.clone()),
        state_dir: config.state_dir.clone(),
    });
    announce(local, admin_url.as_deref(), &core.router);
    reload::spawn_triggers(Arc::clone(&reloader));
    let served = run(
        listener,
        app,
        &config,
        (&core.service, &readiness),
        &reloader,
    )
    .await;
    core.stop(&audit, (telemetry, audit_export)).await;
    served
}

/// Where people reach this daemon in a browser (its sign-in pages): `server.public_url`, else
/// the address it listens on.
fn public_url(config: &Config, local: std::net::SocketAddr) -> url::Url {
    if let Some(url) = &config.server.public_url {
        return url.clone();
    }
    let text = format!("http://{local}/");
    url::Url::parse(&text).unwrap_or_else(|_| unreachable!("a socket address makes a URL"))
}

/// What must hold before anything listens: neither endpoint exposed beyond what the config
/// allows, and the admin API's token read (or made) — without it there is no admin API.
fn preflight(config: &Config) -> Result<Option<crate::admin::AdminToken>, DaemonError> {
    if config.host_exposed(config.server.listen) {
        return Err(DaemonError::Exposed(config.server.listen));
    }
    if let Some(addr) = config.admin_exposed() {
        return Err(DaemonError::AdminExposed(addr));
    }
    config
        .admin
        .map(|_| {
            crate::admin::AdminToken::load(
                config.admin_access.token_file.as_deref(),
                &config.state_dir,
            )
        })
        .transpose()
        .map_err(DaemonError::from)
}

/// The audit log, when it is on (its store opened and its writer started), with the daemon's
/// start recorded.
fn open_audit(config: &Config) -> Result<(AuditHandle, Option<AuditExport>), DaemonError> {
    let mut export = None;
    let audit = if config.audit.enabled {
        let store = crate::audit::open(&config.audit.dir).map_err(DaemonError::Audit)?;
        let handle = match config.audit.export {
            crate::config::AuditExport::None => {
                AuditHandle::start(store, &config.audit).map_err(DaemonError::Audit)?
            }
            crate::config::AuditExport::Otlp => {
                let (outbox, parcels, counts) = crate::audit::outbox(config.audit.export_queue);
                let handle = AuditHandle::start_exporting(store, &config.audit, Some(outbox))
                    .map_err(DaemonError::Audit)?;
                let otlp = crate::telemetry::otel::Export::resolve(&config.telemetry, |name| {
                    std::env::var(name).ok()
                });
                let chain = config.cluster.as_ref().map(|c| c.replica.clone());
                let shipping = crate::telemetry::audit_logs::Shipping {
                    chain: chain.clone().unwrap_or_else(crate::config::machine_name),
                    replica: chain,
                    head_interval: config.audit.export_head_interval,
                };
                let started = crate::telemetry::audit_logs::start(
                    otlp.as_ref(),
                    shipping,
                    (parcels, counts),
                    handle.downgrade(),
                )?;
                tracing::info!("Audit records are exported over OTLP.");
                export = Some(started);
                handle
            }
        };
        tracing::info!(dir = %config.audit.dir.display(), "Audit log is on.");
        handle
    } else {
        AuditHandle::disabled()
    };
    audit.record(Record::event(
        "daemon.started",
        None,
        None,
        Some(format!("config {}", config.source.display())),
    ));
    Ok((audit, export))
}

/// The pins of tools' definitions, each change audited and logged as it is seen.
fn pin_store(config: &Config, audit: &AuditHandle) -> Result<crate::pins::PinStore, DaemonError> {
    let audit = audit.clone();
    let store = crate::pins::PinStore::open(
        &config.state_dir,
        Box::new(move |upstream, tool, pinned, now| {
            tracing::warn!(
                upstream,
                tool,
                pinned,
                now,
                "A tool's definition changed since it was first seen; approve it with `mcpmux approve {upstream} {tool}` once reviewed."
            );
            let mut record = Record::event(
                "tool.changed",
                Some(upstream),
                None,
                Some(format!("definition {pinned} → {now}")),
            );
            record.target = Some(tool.to_owned());
            audit.record(record);
        }),
    )?;
    Ok(store)
}

/// What runs behind the endpoints: the host sessions, the catalog's router, the upstreams and
/// their supervisor, and the host service over them.
struct Core {
    sessions: Arc<SessionStore>,
    events: Arc<dyn HostEvents>,
    profiles: Vec<Arc<crate::config::Profile>>,
    principals: Vec<Arc<crate::downstream::Principal>>,
    router: RouterHandle,
    /// The running upstream set: the router and the supervisor read it, and only a reload
    /// replaces it.
    upstreams: tokio::sync::watch::Sender<crate::upstream::Upstreams>,
    supervisor: SupervisorHandle,
    service: Arc<HostService>,
    /// The cursor key ring, read once: the host service signs with it, a replica's forwards
    /// are keyed from it.
    cursor_keys: crate::mcp::cursor::KeyRing,
    /// The fleet store (`[cluster] store`), when replicas share one.
    fleet: Option<crate::cluster::store::FleetStore>,
}

impl Core {
    async fn start(config: &Config, audit: &AuditHandle) -> Result<Self, DaemonError> {
        let cursor_keys = cursor_keys(config)?;
        let owner = (config.cluster.as_ref()).map(|c| Arc::<str>::from(c.replica.as_str()));
        let sessions = SessionStore::new(config.server.session_idle_timeout, owner.clone());
        let delivery = Delivery::new(Arc::clone(&sessions), audit.clone());
        let events: Arc<dyn HostEvents> = delivery.clone();
        let (profiles, principals) = principals(config);
        let pins = Arc::new(pin_store(config, audit)?);
        let router = RouterHandle::new(&config.catalog, &profiles, Some(Arc::clone(&pins)));
        let fleet = fleet::start(config.cluster.as_ref(), &pins, &router).await?;
        let link = router.link();
        let handles: Vec<UpstreamHandle> = (config.upstreams.iter())
            .map(|u| upstream_handle(u, &events, &link))
            .collect();
        for u in handles.iter().filter(|u| !u.config().enabled) {
            tracing::info!(upstream = %u.name(), "Upstream is disabled in the config.");
        }
        let (upstreams, observed) =
            tokio::sync::watch::channel(crate::upstream::Upstreams::from(handles));
        router.observe(observed.clone());
        let supervisor = SupervisorHandle::start(observed.clone(), audit.clone()).await?;
        let vault = Arc::new(crate::oauth::Vault::open(&config.state_dir)?);
        let signins = Arc::new(crate::downstream::signin::SignIns::new(
            vault,
            (config.server.sign_in_timeout, owner.clone()),
            audit.clone(),
        ));
        if let Some(fleet) = &fleet {
            fleet.share(
                (&config.state_dir, &cursor_keys),
                &signins,
                (observed, supervisor.clone()),
            );
        }
        let service = Arc::new(HostService::new(
            router.clone(),
            (delivery, signins),
            supervisor.clone(),
            (audit.clone(), config.audit.redaction),
            (&config.server, keys(config, cursor_keys.clone(), owner)?),
        ));
        service.spawn_reaper();
        service.spawn_change_notices();
        Ok(Self {
            sessions,
            events,
            profiles,
            principals,
            router,
            upstreams,
            supervisor,
            service,
            cursor_keys,
            fleet: fleet.map(|f| f.store()),
        })
    }

    /// What the admin API and the metrics read of the running daemon.
    fn readings(
        &self,
        audit: &AuditHandle,
        hosts: Arc<arc_swap::ArcSwap<Vec<Arc<crate::downstream::Principal>>>>,
        reloader: &Arc<reload::Reloader>,
    ) -> Arc<crate::admin::Readings> {
        Arc::new(crate::admin::Readings {
            router: self.router.clone(),
            audit: audit.clone(),
            sessions: Box::new({
                let sessions = Arc::clone(&self.sessions);
                move || sessions.len()
            }),
            hosts: Box::new({
                let sessions = Arc::clone(&self.sessions);
                move || {
                    let status = |p: &Arc<crate::downstream::Principal>| {
                        let mut status = p.status();
                        status.sessions = sessions.count_of(&p.name);
                        status
                    };
                    hosts.load().iter().map(status).collect()
                }
            }),
            reloads: Box::new({
                let reloader = Arc::clone(reloader);
                move || reloader.counts()
            }),
        })
    }

    /// Ends the host sessions, stops the upstreams, closes the audit log and flushes the
    /// telemetry exporters.
    async fn stop(
        &self,
        audit: &AuditHandle,
        (telemetry, audit_export): (
            Option<crate::telemetry::otel::Telemetry>,
            Option<AuditExport>,
        ),
    ) {
        tracing::info!("Shutting down: ending host sessions, stopping upstreams.");
        self.service.close_all().await;
        self.supervisor.shutdown().await;
        audit.record(Record::event("daemon.stopped", None, None, None));
        audit.close(AUDIT_CLOSE);
        if let Some(export) = audit_export {
            // What the writer offered leaves before the process does (the receiver permitting).
            let _ = tokio::task::spawn_blocking(move || export.finish(AUDIT_EXPORT_CLOSE)).await;
        }
        if let Some(telemetry) = telemetry {
            // The exporters block while they flush; the runtime's other threads keep serving.
            let _ = tokio::task::spawn_blocking(move || telemetry.shutdown()).await;
        }
        tracing::info!("Stopped.");
    }
}

/// Starts the admin API at `addr` (its URL), or says why it is not available and goes on
/// without it.
async fn start_admin(
    config: &Config,
    (addr, token): (std::net::SocketAddr, crate::admin::AdminToken),
    (core, audit, readings, reloader, readiness): (
        &Core,
        &AuditHandle,
        &Arc<crate::admin::Readings>,
        &Arc<reload::Reloader>,
        &Arc<crate::readiness::Readiness>,
    ),
) -> Result<Option<String>, DaemonError> {
    let admin = match TcpListener::bind(addr).await {
        Ok(admin) => admin,
        Err(e) => {
            tracing::warn!(%addr, error = %e, "The admin API is not available (set admin.listen or --admin).");
            return Ok(None);
        }
    };
    let admin_addr = admin.local_addr().map_err(DaemonError::Serve)?;
    tracing::info!(url = %format!("http://{admin_addr}"), "Admin API is listening.");
    let sessions = Arc::clone(&core.sessions);
    let state = AdminState {
        router: core.router.clone(),
        supervisor: core.supervisor.clone(),
        audit: audit.clone(),
        metrics: Arc::clone(readings),
        max_sessions: Box::new({
            let service = Arc::clone(&core.service);
            move || service.max_sessions()
        }),
        sessions: Box::new(move || sessions.all().iter().map(|s| s.status()).collect()),
        logins: std::sync::Mutex::default(),
        reloader: Arc::clone(reloader) as Arc<dyn crate::admin::Reload>,
        guard: crate::admin::AdminGuard {
            token,
            port: admin_addr.port(),
            loopback: admin_addr.ip().is_loopback(),
        },
        console: crate::admin::ConsoleState::default(),
        principals: Arc::new(PrincipalSignIns(Arc::clone(&core.service))),
        readiness: Arc::clone(readiness),
        replica: config.cluster.as_ref().map(|c| c.replica.clone()),
        fleet: core.fleet.clone(),
    };
    let app = crate::admin::app(Arc::new(state));
    let bounds = crate::listener::Bounds::of(&config.server);
    let forever = std::future::pending::<()>();
    tokio::spawn(crate::listener::serve(admin, app, bounds, forever));
    Ok(Some(format!("http://{admin_addr}")))
}

/// One line on stdout (two with the admin API) for scripts and tests that start the daemon on
/// port 0, and readiness to systemd.
fn announce(local: std::net::SocketAddr, admin_url: Option<&str>, router: &RouterHandle) {
    let mut stdout = std::io::stdout();
    let _ = writeln!(stdout, "mcpmux: listening on http://{local}/mcp");
    if let Some(url) = admin_url {
        let _ = writeln!(stdout, "mcpmux: admin on {url}");
    }
    let _ = stdout.flush();
    systemd::ready(router, &format!("http://{local}/mcp"));
}

/// Serves hosts until the server ends or a shutdown signal comes. Then `/readyz` says 503 at
/// once, and a replica of a cluster goes on serving everything for `[cluster] unready_delay`
/// (its load balancer's health check takes it out meanwhile, so nothing sent to it is refused);
/// then it stops accepting, and in-flight requests get `server.drain_timeout` to finish (open
/// event streams would hold the drain forever: they end first).
async fn run(
    listener: TcpListener,
    app: axum::Router,
    config: &Config,
    (service, readiness): (&HostService, &crate::readiness::Readiness),
    reloader: &reload::Reloader,
) -> Result<(), DaemonError> {
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let bounds = crate::listener::Bounds::of(&config.server);
    let server = crate::listener::serve(listener, app, bounds, async {
        let _ = stop_rx.await;
    });
    let mut server = tokio::spawn(server);
    let served = tokio::select! {
        finished = &mut server => finished,
        () = shutdown_signal() => {
            systemd::stopping();
            readiness.drain();
            if let Some(cluster) = &reloader.current().cluster {
                tracing::info!(delay = ?cluster.unready_delay, "Draining: /readyz says 503; serving on until the load balancer has taken this replica out.");
                tokio::select! {
                    () = tokio::time::sleep(cluster.unready_delay) => {}
                    () = shutdown_signal() => tracing::info!("A second signal: stopping now."),
                }
            }
            let _ = stop_tx.send(());
            service.stop_streams();
            let drain = reloader.current().server.drain_timeout;
            match tokio::time::timeout(drain, &mut server).await {
                Ok(finished) => finished,
                Err(_) => {
                    server.abort();
                    Ok(())
                }
            }
        }
    };
    served.map_err(|join| DaemonError::Serve(std::io::Error::other(join)))
}

/// Starts exporting traces and metrics over OTLP, when `[telemetry]` or `OTEL_*` name a
/// collector (the metrics are the admin API's catalog, read from `readings`); a failure is logged
/// and the daemon runs without.
fn start_telemetry(
    config: &Config,
    readings: &Arc<crate::admin::Readings>,
) -> Option<crate::telemetry::otel::Telemetry> {
    use crate::telemetry::otel::{self, Export};
    let export = Export::resolve(&config.telemetry, |name| std::env::var(name).ok())?;
    let target = export
        .endpoint
        .clone()
        .unwrap_or_else(|| "the OTEL_EXPORTER_OTLP endpoint".into());
    match otel::start(&export, crate::admin::metrics::otlp_instruments(readings)) {
        Ok(telemetry) => {
            tracing::info!(endpoint = %target, protocol = ?export.protocol, traces = export.traces, metrics = export.metrics, "Exporting over OTLP.");
            Some(telemetry)
        }
        Err(e) => {
            tracing::error!(error = %e, "Not exporting traces: the OTLP exporter could not be set up (check [telemetry] and the OTEL_EXPORTER_OTLP_* variables).");
            None
        }
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("Cannot install signal handlers; stop mcpmux with SIGKILL.");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("Received SIGTERM."),
        _ = int.recv() => tracing::info!("Received SIGINT."),
    }
}

/// The admin API's view of principals' own sign-ins: the host service's.
struct PrincipalSignIns(Arc<HostService>);

impl crate::admin::principals::PrincipalSignIns for PrincipalSignIns {
    fn link<'a>(
        &'a self,
        upstream: &'a crate::upstream::UpstreamHandle,
        principal: crate::admin::principals::Named<'a>,
    ) -> futures_util::future::BoxFuture<'a, Result<(String, u64), String>> {
        Box::pin(async move {
            let whom = crate::downstream::signin::Whom::named(principal.issuer, principal.name);
            let issued = self.0.signins().issue(upstream, &whom, None).await?;
            Ok((issued.url, self.0.signins().ttl().as_secs()))
        })
    }

    fn revoke<'a>(
        &'a self,
        upstream: &'a str,
        principal: crate::admin::principals::Named<'a>,
    ) -> futures_util::future::BoxFuture<'a, Result<bool, String>> {
        Box::pin(async move {
            let whom = crate::downstream::signin::Whom::named(principal.issuer, principal.name);
            let revoked = (self.0.signins().revoke(upstream, &whom)).map_err(|e| {
                format!(
                    "cannot delete {}'s tokens for `{upstream}`: {e}",
                    principal.name
                )
            })?;
            self.0.stop_instance_of(upstream, &whom.key).await;
            Ok(revoked)
        })
    }

    fn signed_in(&self, upstream: &str) -> usize {
        self.0.signins().vault().signed_in(upstream)
    }
}
