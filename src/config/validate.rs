//! Turning a [`RawConfig`] into the [`Config`] mcpmux runs with: defaults filled in, relative
//! paths resolved against the file's directory, and every refusal a [`ConfigError::Invalid`] that
//! names the key and the fix. One function per section, checked in file order.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use super::audit_settings::{AuditConfig, AuditExport, SecretKeys, state_dir};
use super::error::ConfigError;
use super::model::{
    CatalogConfig, Config, DEFAULT_ADMIN_LISTEN, DEFAULT_NAME_MAX_LENGTH, DEFAULT_PAGE_SIZE,
    OtlpProtocol, ServerConfig, TelemetryConfig, UpstreamConfig,
};
use super::model::{Credentials, DEFAULT_MAX_INSTANCES, Isolation, ListingBudget, MAX_WORKERS};
use super::policy::{POLICY_KEYS, Policy};
use super::raw::{
    RawAdmin, RawAudit, RawCatalog, RawConfig, RawDefaults, RawServer, RawTelemetry, RawUpstream,
    UPSTREAM_KEYS,
};
use super::transport::OAuthGrant;
use crate::mcp::ListKind;
use crate::mcp::names::{DEFAULT_NAME_PATTERN, NameBudget, Prefix};

pub(super) mod cluster;
pub use cluster::is_label as is_replica_name;
mod host_upstreams;
mod hosts;
mod profiles;
mod transport;

/// Validates `raw`, read from the file at `path`.
pub(super) fn validate(path: &Path, mut raw: RawConfig) -> Result<Config, ConfigError> {
    let base_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
    let anonymous_profile = raw.server.anonymous_profile.take();
    let authorization = hosts::authorization(path, &base_dir, raw.server.authorization.take())?;
    let server = server(path, &base_dir, raw.server)?;
    let admin_access = admin_access(&base_dir, &mut raw.admin);
    let admin = admin(path, raw.admin)?;
    let raw_catalog = raw.catalog.clone();
    let catalog = catalog(path, "catalog", raw.catalog)?;
    let upstreams = upstreams(path, &base_dir, raw.defaults, raw.upstreams)?;
    let state_dir = raw.state_dir.map(|d| resolve(&base_dir, d));
    let audit = audit(path, raw.audit, state_dir.as_deref())?;
    let profiles = profiles::profiles(path, &raw_catalog, &upstreams, raw.profiles)?;
    let hosts = hosts::hosts(
        path,
        &base_dir,
        raw.hosts,
        (&profiles, &upstreams),
        authorization.as_ref(),
    )?;
    host_upstreams::none_anonymous(
        path,
        &upstreams,
        &profiles,
        &hosts,
        authorization.as_ref(),
        anonymous_profile.as_deref(),
    )?;
    host_upstreams::some_jwt_to_exchange(path, &upstreams, &hosts, authorization.as_ref())?;
    if let Some(p) = (profiles.iter()).find(|p| p.path_requires_credential && hosts.is_empty()) {
        return Err(ConfigError::invalid(
            path,
            format!("profiles.{}.path_requires_credential", p.name),
            "is set but no [hosts] are configured, so no credential could pass",
            "add a [hosts.NAME] table with a token, or leave path_requires_credential out",
        ));
    }
    let mut server = server;
    server.authorization = match authorization {
        Some(mut a) => {
            let profile = a.profile.take();
            a.profile = profiles::named(path, "server.authorization.profile", profile, &profiles)?;
            Some(a)
        }
        None => None,
    };
    server.anonymous_profile = profiles::named(
        path,
        "server.anonymous_profile",
        anonymous_profile,
        &profiles,
    )?;
    let mut config = Config {
        cluster: cluster::cluster(path, &base_dir, raw.cluster.take(), &server)?,
        source: path.into(),
        hosts,
        profiles,
        state_dir: PathBuf::new(),
        audit,
        server,
        catalog,
        admin,
        admin_access,
        upstreams,
        telemetry: telemetry(path, raw.telemetry)?,
    };
    whole(path, &config)?;
    config.set_state_dir(
        super::audit_settings::state_dir(state_dir.as_deref()),
        false,
    );
    Ok(config)
}

/// What only the whole config tells: an admin listener exposed beyond what it allows, and
/// sign-ins replicas could not share.
fn whole(path: &Path, config: &Config) -> Result<(), ConfigError> {
    if let Some(addr) = config.admin_exposed() {
        return Err(ConfigError::invalid(
            path,
            "admin.listen",
            format!("`{addr}` {}", super::ADMIN_EXPOSED),
            super::ADMIN_EXPOSED_FIX,
        ));
    }
    cluster::shared_sign_ins(path, config)
}

/// `path` relative to the config file's directory, unless absolute.
fn resolve(base_dir: &Path, path: PathBuf) -> PathBuf {
    if path.is_relative() {
        base_dir.join(path)
    } else {
        path
    }
}

// Long: one check per `[server]` key, in the order the file documents them, each naming its key in
// the error.
fn server(file: &Path, base_dir: &Path, s: RawServer) -> Result<ServerConfig, ConfigError> {
    let d = ServerConfig::default();
    let listen = match s.listen.as_deref() {
        None => d.listen,
        Some(text) => text.parse().map_err(|e| {
            ConfigError::invalid(
                file,
                "server.listen",
                format!("`{text}` is not an address: {e}"),
                "write it as IP:PORT, e.g. \"127.0.0.1:7332\"",
            )
        })?,
    };
    let server = ServerConfig {
        listen,
        max_body_bytes: s.max_body_bytes.unwrap_or(d.max_body_bytes),
        session_idle_timeout: s.session_idle_timeout.unwrap_or(d.session_idle_timeout),
        allowed_origins: s.allowed_origins,
        initialize_wait: s.initialize_wait.unwrap_or(d.initialize_wait),
        max_in_flight_per_session: s
            .max_in_flight_per_session
            .unwrap_or(d.max_in_flight_per_session),
        max_listen_streams_per_caller: s
            .max_listen_streams_per_caller
            .unwrap_or(d.max_listen_streams_per_caller),
        max_parked_per_caller: s.max_parked_per_caller.unwrap_or(d.max_parked_per_caller),
        park_timeout: s.park_timeout.unwrap_or(d.park_timeout),
        sign_in_timeout: s.sign_in_timeout.unwrap_or(d.sign_in_timeout),
        drain_timeout: s.drain_timeout.unwrap_or(d.drain_timeout),
        // Checked against the profiles once they are read.
        anonymous_profile: None,
        authorization: None,
        max_sessions: s.max_sessions.unwrap_or(d.max_sessions),
        max_connections: s.max_connections.unwrap_or(d.max_connections),
        header_timeout: s.header_timeout.unwrap_or(d.header_timeout),
        cursor_keys: s.cursor_keys.map(|f| resolve(base_dir, f)),
        public_url: s
            .public_url
            .as_deref()
            .map(|t| public_url(file, t))
            .transpose()?,
        workers: s.workers.unwrap_or(d.workers),
    };
    for (key, value) in [
        ("server.max_sessions", server.max_sessions),
        ("server.max_connections", server.max_connections),
    ] {
        if value == 0 {
            return Err(ConfigError::invalid(
                file,
                key,
                "0 would refuse every host",
                "use a positive number, or leave it out for the default",
            ));
        }
    }
    if !(1..=MAX_WORKERS).contains(&server.workers) {
        return Err(ConfigError::invalid(
            file,
            "server.workers",
            format!(
                "{} is not a number of threads mcpmux runs on (1 to {MAX_WORKERS})",
                server.workers
            ),
            "leave it out for half this machine's cores, or give a number in that range",
        ));
    }
    if server.header_timeout.is_zero() {
        return Err(ConfigError::invalid(
            file,
            "server.header_timeout",
            "0 would close every connection before its request",
            "use a duration such as \"10s\", or leave it out for the default",
        ));
    }
    for (key, value, example) in [
        (
            "server.max_in_flight_per_session",
            server.max_in_flight_per_session,
            32,
        ),
        (
            "server.max_listen_streams_per_caller",
            server.max_listen_streams_per_caller,
            8,
        ),
        (
            "server.max_parked_per_caller",
            server.max_parked_per_caller,
            16,
        ),
    ] {
        if value == 0 {
            return Err(ConfigError::invalid(
                file,
                key,
                "0 would refuse every request of its kind",
                format!("use a positive number, e.g. {example}"),
            ));
        }
    }
    if server.sign_in_timeout.is_zero() {
        return Err(ConfigError::invalid(
            file,
            "server.sign_in_timeout",
            "0 would void every sign-in link before anyone opens it",
            "use a duration such as \"10m\", or leave it out for the default",
        ));
    }
    if server.park_timeout.is_zero() {
        return Err(ConfigError::invalid(
            file,
            "server.park_timeout",
            "0 would cancel every call that asks for input before the host can answer",
            "use a duration such as \"60s\", or leave it out for the default",
        ));
    }
    Ok(server)
}

/// `[telemetry]`: an endpoint that is an http(s) URL, a protocol mcpmux speaks.
fn telemetry(file: &Path, t: RawTelemetry) -> Result<TelemetryConfig, ConfigError> {
    if let Some(endpoint) = &t.otlp_endpoint {
        let scheme = url::Url::parse(endpoint).map(|u| u.scheme().to_owned());
        if !matches!(scheme.as_deref(), Ok("http" | "https")) {
            return Err(ConfigError::invalid(
                file,
                "telemetry.otlp_endpoint",
                format!("`{endpoint}` is not an http(s) URL"),
                "write the collector's base URL, e.g. \"http://127.0.0.1:4317\" (gRPC) or \"http://127.0.0.1:4318\" (HTTP)",
            ));
        }
    }
    let protocol = match t.otlp_protocol.as_deref() {
        None => None,
        Some(text) => Some(OtlpProtocol::parse(text).ok_or_else(|| {
            ConfigError::invalid(
                file,
                "telemetry.otlp_protocol",
                format!("`{text}` is not an OTLP protocol mcpmux speaks"),
                "use \"grpc\" or \"http/protobuf\"",
            )
        })?),
    };
    Ok(TelemetryConfig {
        endpoint: t.otlp_endpoint,
        protocol,
        service_name: t.service_name,
        traces: t.traces,
        metrics: t.metrics,
        metrics_interval: t.metrics_interval,
    })
}

/// The admin listener's address; `None` when turned off.
fn admin(file: &Path, a: RawAdmin) -> Result<Option<SocketAddr>, ConfigError> {
    match a.listen.as_deref() {
        None => Ok(Some(DEFAULT_ADMIN_LISTEN)),
        Some("off") => Ok(None),
        Some(text) => text.parse().map(Some).map_err(|e| {
            ConfigError::invalid(
                file,
                "admin.listen",
                format!("`{text}` is not an address: {e}"),
                "write it as IP:PORT, e.g. \"127.0.0.1:7333\", or \"off\"",
            )
        }),
    }
}

/// `admin.token_file` (relative to the config's directory) and `admin.allow_remote`, taken out of
/// `a`; whether the file exists and holds a token is the daemon's to check when it starts.
fn admin_access(base_dir: &Path, a: &mut RawAdmin) -> super::AdminAccess {
    super::AdminAccess {
        token_file: a.token_file.take().map(|f| resolve(base_dir, f)),
        allow_remote: a.allow_remote.take().unwrap_or(false),
    }
}
// Long: one check per `[catalog]` key, in the order the file documents them, each naming its key
// in the error.

/// `[catalog]` (or a profile's overrides of it, under `section`).
pub(super) fn catalog(
    file: &Path,
    section: &str,
    c: RawCatalog,
) -> Result<CatalogConfig, ConfigError> {
    let mut page_sizes = BTreeMap::new();
    for (kind, key, value) in [
        (ListKind::Tools, "tools_page_size", c.tools_page_size),
        (ListKind::Prompts, "prompts_page_size", c.prompts_page_size),
        (
            ListKind::Resources,
            "resources_page_size",
            c.resources_page_size,
        ),
        (
            ListKind::ResourceTemplates,
            "resource_templates_page_size",
            c.resource_templates_page_size,
        ),
        (ListKind::Skills, "skills_page_size", c.skills_page_size),
    ] {
        let size = value.or(c.page_size).unwrap_or(DEFAULT_PAGE_SIZE);
        if size == 0 {
            return Err(ConfigError::invalid(
                file,
                format!("{section}.{key}"),
                "a page size of 0 would never list anything",
                "use a positive number",
            ));
        }
        page_sizes.insert(kind, size);
    }
    let name_budget = NameBudget::new(
        c.name_pattern.as_deref().unwrap_or(DEFAULT_NAME_PATTERN),
        c.name_max_length.unwrap_or(DEFAULT_NAME_MAX_LENGTH),
    )
    .map_err(|e| {
        ConfigError::invalid(
            file,
            format!("{section}.name_pattern"),
            e.to_string(),
            "use a regular expression and a name_max_length of at least 52",
        )
    })?;
    let d = CatalogConfig::default();
    let budget = ListingBudget {
        items: c.max_items_per_upstream.unwrap_or(d.budget.items),
        bytes: c.max_bytes_per_upstream.unwrap_or(d.budget.bytes),
        definition_bytes: c.max_definition_bytes.unwrap_or(d.budget.definition_bytes),
    };
    for (key, value) in [
        ("max_bytes_per_upstream", budget.bytes),
        ("max_definition_bytes", budget.definition_bytes),
    ] {
        if value < 1024 {
            return Err(ConfigError::invalid(
                file,
                format!("{section}.{key}"),
                format!("{value} bytes cannot hold one definition"),
                "give at least 1024",
            ));
        }
    }
    if budget.definition_bytes > budget.bytes {
        return Err(ConfigError::invalid(
            file,
            format!("{section}.max_definition_bytes"),
            format!(
                "{} is more than max_bytes_per_upstream ({})",
                budget.definition_bytes, budget.bytes
            ),
            "make it at most max_bytes_per_upstream",
        ));
    }
    Ok(CatalogConfig {
        page_sizes,
        name_budget,
        cursor_retention: c.cursor_retention.unwrap_or(d.cursor_retention),
        budget,
    })
}

/// `[defaults]` and every `[upstreams.NAME]`, in name order; no two may share a prefix.
fn upstreams(
    file: &Path,
    base_dir: &Path,
    defaults: RawDefaults,
    raw: BTreeMap<String, RawUpstream>,
) -> Result<Vec<UpstreamConfig>, ConfigError> {
    if let Some(unknown) = defaults.unknown.keys().next() {
        return Err(ConfigError::invalid(
            file,
            format!("defaults.{unknown}"),
            "unknown key",
            format!("use one of {}", POLICY_KEYS.join(", ")),
        ));
    }
    let defaults = defaults.policy.over(&Policy::default());
    if let Some((k, problem, fix)) = defaults.problem() {
        return Err(ConfigError::invalid(
            file,
            format!("defaults.{k}"),
            problem,
            fix,
        ));
    }
    let mut upstreams = Vec::new();
    let mut prefixes: HashMap<Prefix, String> = HashMap::new();
    for (name, u) in raw {
        let upstream = upstream(file, base_dir, name, u, &defaults)?;
        let (name, prefix) = (&upstream.name, &upstream.prefix);
        if let Some(other) = prefixes.insert(prefix.clone(), name.clone()) {
            return Err(ConfigError::invalid(
                file,
                format!("upstreams.{name}"),
                format!("upstreams `{other}` and `{name}` both get the prefix `{prefix}`"),
                "give one of them its own prefix = \"…\"",
            ));
        }
        upstreams.push(upstream);
    }
    let enabled = upstreams.iter().filter(|u| u.enabled).count();
    if let Some(bare) = upstreams.iter().find(|u| u.enabled && u.prefix.is_none()) {
        if enabled > 1 {
            return Err(ConfigError::invalid(
                file,
                format!("upstreams.{}.prefix", bare.name),
                format!(
                    "is empty (names and URIs unchanged), which needs it to be the only enabled upstream; {} others are enabled",
                    enabled - 1
                ),
                "give it a prefix, or disable the others (enabled = false)",
            ));
        }
    }
    Ok(upstreams)
}

/// One `[upstreams.NAME]` table, its policy over `defaults`.
fn upstream(
    file: &Path,
    base_dir: &Path,
    name: String,
    mut u: RawUpstream,
    defaults: &Policy,
) -> Result<UpstreamConfig, ConfigError> {
    let key = |field: &str| format!("upstreams.{name}.{field}");
    if let Some(unknown) = u.unknown.keys().next() {
        let keys = format!("{}, {}", UPSTREAM_KEYS.join(", "), POLICY_KEYS.join(", "));
        return Err(ConfigError::invalid(
            file,
            key(unknown),
            "unknown key",
            format!("use one of {keys}"),
        ));
    }
    let own_oauth = u.oauth.as_ref().map(|o| o.grant.unwrap_or_default());
    let transport = transport::transport(file, base_dir, &name, &mut u)?;
    let prefix = prefix(file, &name, u.prefix.as_deref())?;
    let mut policy = u.policy.over(defaults);
    policy.tool_timeouts = (u.tool_timeouts.iter())
        .map(|(t, d)| (t.clone(), d.0))
        .collect();
    if let Some((k, problem, fix)) = policy.problem() {
        return Err(ConfigError::invalid(file, key(k), problem, fix));
    }
    let roots = match u.roots {
        None => None,
        Some(roots) => Some(
            roots
                .into_iter()
                .map(|r| root_uri(base_dir, r))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|bad| {
                    ConfigError::invalid(
                        file,
                        key("roots"),
                        bad.to_string(),
                        "write roots as URIs (\"file:///home/me/project\") or paths (relative to the config file)",
                    )
                })?,
        ),
    };
    let isolation = isolation(file, &name, (u.isolation, u.credentials), own_oauth)?;
    let max_instances = match (u.max_instances, isolation) {
        (Some(0), _) => {
            return Err(ConfigError::invalid(
                file,
                key("max_instances"),
                "is 0, which would refuse every session's calls",
                "allow at least 1, or leave it out for the default (64)",
            ));
        }
        (Some(_), Isolation::Shared) => {
            return Err(ConfigError::invalid(
                file,
                key("max_instances"),
                "limits per-session or per-principal instances, but this upstream is shared (one instance)",
                "set isolation = \"per-session\" or \"per-principal\", or leave max_instances out",
            ));
        }
        (max, _) => max.unwrap_or(DEFAULT_MAX_INSTANCES),
    };
    Ok(UpstreamConfig {
        name,
        prefix,
        transport,
        enabled: u.enabled.unwrap_or(true),
        policy,
        isolation,
        credentials: u.credentials,
        protocol: u.protocol,
        pin: u.pin,
        roots,
        audit_redaction: u.audit_redaction,
        audit_redaction_tools: u.audit_redaction_tools,
        max_instances,
    })
}

/// The instances an upstream gets: as written, except that `credentials = "per-principal"`
/// makes a shared upstream per-principal (one identity's connection is never another's). A
/// per-principal upstream signs in as each principal (its own secrets, its own sign-in through
/// its host, or its exchanged token), never as mcpmux itself.
fn isolation(
    file: &Path,
    name: &str,
    (written, credentials): (Isolation, Credentials),
    own_oauth: Option<OAuthGrant>,
) -> Result<Isolation, ConfigError> {
    let per_principal = credentials == Credentials::PerPrincipal;
    let exchange = own_oauth == Some(OAuthGrant::TokenExchange);
    if exchange && !per_principal {
        return Err(ConfigError::invalid(
            file,
            format!("upstreams.{name}.oauth.grant"),
            "is token_exchange, which exchanges each caller's own token, but every caller of this upstream shares one identity",
            format!("set credentials = \"per-principal\" in [upstreams.{name}]"),
        ));
    }
    let own_identity = matches!(
        own_oauth,
        Some(OAuthGrant::ClientCredentials | OAuthGrant::JwtBearer | OAuthGrant::IdentityAssertion)
    );
    if per_principal && own_identity {
        return Err(ConfigError::invalid(
            file,
            format!("upstreams.{name}.oauth.grant"),
            "signs mcpmux in as itself (client_credentials, jwt_bearer, identity_assertion: one identity for everyone), but the upstream is \"per-principal\"",
            format!(
                "use grant = \"authorization_code\" (each principal signs in through their host) or \"token_exchange\", or give each host its token in [hosts.NAME.upstreams.{name}] and remove [upstreams.{name}.oauth]"
            ),
        ));
    }
    Ok(match (written, per_principal) {
        (Isolation::Shared, true) => Isolation::PerPrincipal,
        (isolation, _) => isolation,
    })
}

/// `server.public_url`: an http(s) URL with a host and no query or fragment.
fn public_url(file: &Path, text: &str) -> Result<url::Url, ConfigError> {
    url::Url::parse(text)
        .ok()
        .filter(|u| {
            matches!(u.scheme(), "http" | "https")
                && u.host_str().is_some()
                && u.query().is_none()
                && u.fragment().is_none()
        })
        .ok_or_else(|| {
            ConfigError::invalid(
                file,
                "server.public_url",
                format!("`{text}` is not an http(s) URL without query or fragment"),
                "write the URL people open mcpmux at in a browser, e.g. \"https://mcpmux.example.com\"",
            )
        })
}

/// A root that is neither a URI nor a path, as written.
#[derive(Debug, thiserror::Error)]
#[error("`{0}` is neither a URI nor a path")]
struct NotARoot(String);

/// A root as written: a URI as it is; a path (relative to the config file) as its `file://` URI.
fn root_uri(base_dir: &Path, root: String) -> Result<String, NotARoot> {
    if root.contains("://")
        || (root.contains(':') && !root.starts_with('.') && !root.starts_with('/'))
    {
        return Ok(root);
    }
    let path = resolve(base_dir, PathBuf::from(&root));
    let path = std::fs::canonicalize(&path).unwrap_or(path);
    let path = if path.is_absolute() {
        path
    } else {
        std::env::current_dir()
            .map_err(|_| NotARoot(root.clone()))?
            .join(path)
    };
    url::Url::from_file_path(&path)
        .map(String::from)
        .map_err(|()| NotARoot(root))
}

/// The upstream's namespace: the one `given`, else derived from its `name`.
fn prefix(file: &Path, name: &str, given: Option<&str>) -> Result<Prefix, ConfigError> {
    match given {
        Some("") => Ok(Prefix::none()),
        Some(p) => Prefix::parse(p).map_err(|e| {
            let key = format!("upstreams.{name}.prefix");
            ConfigError::invalid(file, key, e.to_string(), "e.g. prefix = \"fs\"")
        }),
        None => Prefix::derive(name).map_err(|e| {
            let fix = "set prefix = \"…\" for it";
            ConfigError::invalid(file, format!("upstreams.{name}"), e.to_string(), fix)
        }),
    }
}

/// `[audit]` over the defaults; the store lives in `<state dir>/audit`.
fn audit(file: &Path, a: RawAudit, state: Option<&Path>) -> Result<AuditConfig, ConfigError> {
    let secret_keys = match a.secret_keys {
        Some(names) => SecretKeys::new(names),
        None => SecretKeys::defaults(),
    }
    .map_err(|e| {
        let problem = format!("cannot be matched: {e}");
        ConfigError::invalid(
            file,
            "audit.secret_keys",
            problem,
            "use fewer or shorter keys",
        )
    })?;
    let d = AuditConfig::new(state_dir(state).join("audit"), secret_keys);
    let audit = AuditConfig {
        enabled: a.enabled.unwrap_or(d.enabled),
        redaction: a.redaction.unwrap_or(d.redaction),
        secret_keys: d.secret_keys,
        durability: a.durability.unwrap_or(d.durability),
        max_age: match a.max_age {
            Some(age) if age.is_zero() => None,
            Some(age) => Some(age),
            None => d.max_age,
        },
        max_bytes: a.max_bytes.unwrap_or(d.max_bytes),
        queue: a.queue.unwrap_or(d.queue),
        export: a.export.unwrap_or(d.export),
        export_queue: a.export_queue.unwrap_or(d.export_queue),
        export_head_interval: a.export_head_interval.unwrap_or(d.export_head_interval),
        dir: d.dir,
    };
    if audit.queue == 0 {
        return Err(ConfigError::invalid(
            file,
            "audit.queue",
            "0 would drop every record",
            "use e.g. 65536",
        ));
    }
    if audit.export_queue == 0 {
        return Err(ConfigError::invalid(
            file,
            "audit.export_queue",
            "0 would export no record",
            "use e.g. 65536",
        ));
    }
    if audit.export_head_interval < std::time::Duration::from_secs(1) {
        return Err(ConfigError::invalid(
            file,
            "audit.export_head_interval",
            "is shorter than a second",
            "use e.g. \"30s\"",
        ));
    }
    if audit.export == AuditExport::Otlp && !audit.enabled {
        return Err(ConfigError::invalid(
            file,
            "audit.export",
            "exports the audit log, which is off (audit.enabled = false)",
            "remove audit.export, or turn the audit log on",
        ));
    }
    Ok(audit)
}
