//! The validated configuration mcpmux runs with, and its defaults. Every value here has passed
//! `load`'s checks.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::audit_settings::{AuditConfig, Redaction};
use super::filter::NameFilter;
use super::policy::Policy;
use super::transport::{TokenSource, Transport};
use crate::mcp::ListKind;
use crate::mcp::names::{NameBudget, Prefix};

/// Environment variables a child inherits from the daemon unless the upstream sets `inherit_env`:
/// enough for `npx`, `uvx` and interpreters to work, nothing that carries secrets by convention.
pub const DEFAULT_INHERITED_ENV: [&str; 8] = [
    "HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "TMPDIR",
];

/// Items per listing page unless configured: large enough that hosts which ignore `nextCursor`
/// still see a normal-sized catalog whole.
pub const DEFAULT_PAGE_SIZE: usize = 1000;
/// Longest exposed tool or prompt name unless configured (what Claude and OpenAI accept).
pub const DEFAULT_NAME_MAX_LENGTH: usize = 64;
/// Where the host-facing endpoint listens unless configured.
pub const DEFAULT_LISTEN: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 7332);
/// Where the admin API listens unless configured.
pub const DEFAULT_ADMIN_LISTEN: SocketAddr = SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 7333);

#[derive(Debug, Clone)]
pub struct Config {
    /// The file this came from, for messages.
    pub source: PathBuf,
    /// Where mcpmux keeps state: the audit store (`audit/`) and sign-in tokens (`oauth/`).
    pub state_dir: PathBuf,
    pub server: ServerConfig,
    pub catalog: CatalogConfig,
    /// Where the admin API listens (status, restart, audit queries); `None` when turned off.
    pub admin: Option<SocketAddr>,
    /// Who may use the admin API: its token, and whether it may listen beyond loopback.
    pub admin_access: AdminAccess,
    /// The audit log.
    pub audit: AuditConfig,
    /// Enabled and disabled upstreams, in name order.
    pub upstreams: Vec<UpstreamConfig>,
    /// The principals that may use mcpmux; none: every host that reaches it (loopback only).
    pub hosts: Vec<HostCredential>,
    /// Views of the catalog that hosts, paths and anonymous clients are given, in name order.
    pub profiles: Vec<Profile>,
    /// OpenTelemetry export (`[telemetry]`; the `OTEL_*` variables fill in what it leaves out).
    pub telemetry: TelemetryConfig,
    /// `[cluster]`: this daemon is one of several replicas; `None`: it stands alone.
    pub cluster: Option<ClusterConfig>,
}

/// `[cluster]`: what makes a daemon one of several identical replicas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterConfig {
    /// This replica's name: what its session ids and parked calls start with (a DNS label).
    pub replica: String,
    /// How a replica reaches another's host endpoint: by name (`[cluster.peers]`), else the
    /// `peer_url` template with `{replica}` in it.
    pub peers: BTreeMap<String, url::Url>,
    pub peer_url: Option<String>,
    /// The key ring multi-round states are sealed with (`None`: derived from the cursor keys).
    pub state_keys: Option<PathBuf>,
    /// After SIGTERM, how long `/readyz` says 503 while everything is still served, so the load
    /// balancer takes the replica out before it refuses anything.
    pub unready_delay: Duration,
    /// Where the fleet keeps what it decides together (`[cluster] store`), when it does.
    pub store: Option<StoreConfig>,
}

/// `[cluster] store`: the Postgres database replicas share pins and approvals in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// The connection URL as configured (`postgres://user@host/db?sslmode=require`), without a
    /// password.
    pub url: String,
    /// The password, from a file or the environment.
    pub password: Option<super::transport::TokenSource>,
    /// The CA certificates a TLS connection is verified against, besides the system's.
    pub ca_file: Option<PathBuf>,
}

/// `[cluster] unready_delay` unless set.
pub const DEFAULT_UNREADY_DELAY: Duration = Duration::from_secs(2);

impl ClusterConfig {
    /// Where the replica named `replica` serves hosts (its base URL), if the config says.
    pub fn peer(&self, replica: &str) -> Option<url::Url> {
        if let Some(url) = self.peers.get(replica) {
            return Some(url.clone());
        }
        let template = self.peer_url.as_deref()?;
        url::Url::parse(&template.replace("{replica}", replica)).ok()
    }
}

/// `[admin]` beyond `listen`: the admin API's token and its exposure.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AdminAccess {
    /// `admin.token_file`: a token someone provisioned (never created by mcpmux); `None`: the
    /// daemon makes `<state dir>/admin.token` at first start.
    pub token_file: Option<PathBuf>,
    /// `admin.allow_remote`: the explicit acknowledgement that a non-loopback `admin.listen`
    /// serves the admin API in plain HTTP beyond this machine.
    pub allow_remote: bool,
}

impl Config {
    /// The admin address, when it is reachable beyond this machine without the acknowledgement
    /// `admin.allow_remote` (mcpmux has no TLS listener to protect the token on the wire).
    pub fn admin_exposed(&self) -> Option<SocketAddr> {
        self.admin
            .filter(|a| !a.ip().is_loopback() && !self.admin_access.allow_remote)
    }

    /// Whether the host endpoint, listening at `listen`, would let anyone beyond this machine in
    /// without a credential: `listen` is not loopback and there is no `[hosts]` credential nor
    /// `[server.authorization]`. `serve` refuses to start so, and a reload refuses such a config
    /// (the one rule for both).
    pub fn host_exposed(&self, listen: SocketAddr) -> bool {
        let credentialed = !self.hosts.is_empty() || self.server.authorization.is_some();
        !listen.ip().is_loopback() && !credentialed
    }
}

/// Why a non-loopback `admin.listen` is refused, and the fix (for `check` and `serve`).
pub const ADMIN_EXPOSED: &str = "is reachable beyond this machine, over plain HTTP: whoever reaches it, or reads the token on the way, can approve changed tool pins, restart upstreams, reload the config, sign upstreams in and out and read the audit log";
/// How to fix [`ADMIN_EXPOSED`].
pub const ADMIN_EXPOSED_FIX: &str = "listen on 127.0.0.1 (reach it through SSH or a TLS proxy), or set admin.allow_remote = true to acknowledge it";

/// `[telemetry]`: where traces and metrics go over OTLP. Unset keys are taken from the standard
/// `OTEL_*` variables when the daemon starts.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TelemetryConfig {
    /// The collector's base URL (e.g. `http://127.0.0.1:4317`).
    pub endpoint: Option<String>,
    pub protocol: Option<OtlpProtocol>,
    pub service_name: Option<String>,
    /// Whether traces go over OTLP (`None`: yes; `false` with `[audit] export`: only the audit
    /// records do).
    pub traces: Option<bool>,
    /// Whether metrics go over OTLP too (`None`: yes, unless `OTEL_METRICS_EXPORTER=none`).
    pub metrics: Option<bool>,
    pub metrics_interval: Option<Duration>,
}

/// How OTLP is carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpProtocol {
    Grpc,
    HttpProtobuf,
}

impl OtlpProtocol {
    /// The protocol an `OTEL_EXPORTER_OTLP_PROTOCOL` value (or `otlp_protocol`) names.
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "grpc" => Some(Self::Grpc),
            "http/protobuf" | "http" => Some(Self::HttpProtobuf),
            _ => None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Where the host-facing Streamable HTTP endpoint listens.
    pub listen: SocketAddr,
    /// Largest request body accepted from a host.
    pub max_body_bytes: usize,
    /// A host session unused this long is forgotten; the host gets 404 and re-initializes.
    pub session_idle_timeout: Duration,
    /// Origins allowed besides loopback ones (DNS-rebinding protection rejects the rest).
    pub allowed_origins: Vec<String>,
    /// How long a host's `initialize` waits for upstreams that are still starting, so that its
    /// capabilities and first listing include them.
    pub initialize_wait: Duration,
    /// Requests one host session may have in flight at once; more get a "busy" error.
    pub max_in_flight_per_session: usize,
    /// `subscriptions/listen` streams one caller (a principal, or an anonymous client's address)
    /// may hold open at once; a host with `max_sessions` may hold no more than that many.
    pub max_listen_streams_per_caller: usize,
    /// Calls one caller may have parked for its input at once (multi-round calls of stateless
    /// hosts).
    pub max_parked_per_caller: usize,
    /// How long a call parked for a stateless host's input keeps its upstream request waiting;
    /// then it is cancelled upstream (its slot there freed) and its retry asks to call again.
    pub park_timeout: Duration,
    /// How long a principal's sign-in link works (per-principal upstreams' sign-in through the
    /// host); it works once.
    pub sign_in_timeout: Duration,
    /// How long in-flight host requests may take to finish after a shutdown signal.
    pub drain_timeout: Duration,
    /// The profile a loopback client without a credential gets (`server.anonymous_profile`).
    pub anonymous_profile: Option<String>,
    /// mcpmux as an OAuth protected resource (`[server.authorization]`).
    pub authorization: Option<Authorization>,
    /// Host sessions open at once, of every host together; beyond, `initialize` gets 429 (a
    /// stranger cannot make the daemon hold sessions without bound).
    pub max_sessions: usize,
    /// Connections open at once on each listener (host and admin); beyond, new ones wait in the
    /// kernel's accept queue until one closes.
    pub max_connections: usize,
    /// How long a connection may take to send a request's headers, from when it opens or its
    /// previous answer ended; then it is closed (so half-sent requests and idle keep-alive
    /// connections do not hold a slot). An answer in progress (an event stream) is not cut.
    pub header_timeout: Duration,
    /// The file of the keys stateless hosts' listing cursors are signed with (`None`:
    /// `<state dir>/cursor.keys`). Daemons given the same file accept each other's cursors.
    pub cursor_keys: Option<std::path::PathBuf>,
    /// Where people reach mcpmux in a browser (its sign-in pages for per-principal upstreams);
    /// `None`: `http://` and the address it listens on.
    pub public_url: Option<url::Url>,
    /// Threads the daemon's requests run on (the runtime's workers).
    pub workers: usize,
}

/// Threads the daemon's requests run on unless `server.workers` says otherwise: half the cores
/// this process may use, at least one. The daemon shares the machine with the upstreams it
/// starts (each call is work for one of them too) and the hosts that call it; and a request
/// handed between two threads costs more than it gains while one thread keeps up — on two
/// cores one thread served more calls, at less CPU each, than two (docs/benchmarks.md, "Threads").
pub fn default_workers() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
    (cores / 2).max(1)
}

/// The most threads `server.workers` may ask for.
pub const MAX_WORKERS: usize = 1024;

/// Host sessions open at once unless `server.max_sessions` says otherwise.
pub const DEFAULT_MAX_SESSIONS: usize = 1024;
/// Connections per listener unless `server.max_connections` says otherwise.
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;
/// Per-session instances of one upstream unless `upstreams.NAME.max_instances` says otherwise.
pub const DEFAULT_MAX_INSTANCES: usize = 64;

impl Default for ServerConfig {
    fn default() -> Self {
        Self {
            listen: DEFAULT_LISTEN,
            max_body_bytes: 4 * 1024 * 1024,
            session_idle_timeout: Duration::from_secs(3600),
            allowed_origins: Vec::new(),
            initialize_wait: Duration::from_secs(10),
            max_in_flight_per_session: 32,
            max_listen_streams_per_caller: 8,
            max_parked_per_caller: 16,
            park_timeout: Duration::from_secs(60),
            sign_in_timeout: Duration::from_secs(600),
            drain_timeout: Duration::from_secs(10),
            anonymous_profile: None,
            authorization: None,
            max_sessions: DEFAULT_MAX_SESSIONS,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            header_timeout: Duration::from_secs(10),
            cursor_keys: None,
            public_url: None,
            workers: default_workers(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct CatalogConfig {
    /// Items per page, per listing.
    pub page_sizes: BTreeMap<ListKind, usize>,
    /// What exposed tool and prompt names must look like.
    pub name_budget: NameBudget,
    /// How long a replaced catalog generation stays readable through cursors.
    pub cursor_retention: Duration,
    /// What is read of one upstream's listings (guards against runaway servers).
    pub budget: ListingBudget,
}

/// How much of one upstream's listings mcpmux reads and keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListingBudget {
    /// Largest number of items read from one listing; the rest is ignored.
    pub items: usize,
    /// Largest size of one listing, in bytes of its items' JSON (`max_bytes_per_upstream`):
    /// a listing over it is not read (the upstream does not start, or keeps its catalog).
    pub bytes: usize,
    /// Largest size of one item's definition (`max_definition_bytes`): a bigger one is left out.
    pub definition_bytes: usize,
}

impl Default for ListingBudget {
    fn default() -> Self {
        Self {
            items: 100_000,
            bytes: 16 * 1024 * 1024,
            definition_bytes: 256 * 1024,
        }
    }
}

impl Default for CatalogConfig {
    fn default() -> Self {
        Self {
            page_sizes: BTreeMap::new(),
            name_budget: NameBudget::default(),
            cursor_retention: Duration::from_secs(600),
            budget: ListingBudget::default(),
        }
    }
}

impl CatalogConfig {
    pub fn page_size(&self, kind: ListKind) -> usize {
        self.page_sizes
            .get(&kind)
            .copied()
            .unwrap_or(DEFAULT_PAGE_SIZE)
    }
}

/// One upstream MCP server: a child process over stdio, or a remote server.
#[derive(Debug, Clone, PartialEq)]
pub struct UpstreamConfig {
    /// The name as configured (a TOML table key or an `mcpServers` key).
    pub name: String,
    /// The namespace its tools, prompts and URIs are exposed under.
    pub prefix: Prefix,
    /// How it is reached.
    pub transport: Transport,
    pub enabled: bool,
    /// Deadlines, restart policy, health checks, limits.
    pub policy: Policy,
    /// One shared connection, or one per host session or per principal.
    pub isolation: Isolation,
    /// One identity toward the upstream, or each principal's own.
    pub credentials: Credentials,
    /// Which era of MCP it is spoken to in.
    pub protocol: Protocol,
    /// What a tool whose definition changed since it was pinned becomes.
    pub pin: PinMode,
    /// Roots mcpmux answers `roots/list` with for this upstream (then never asks a host).
    pub roots: Option<Vec<String>>,
    /// How this upstream's call arguments are audited (`None`: the global setting).
    pub audit_redaction: Option<Redaction>,
    /// Per-tool overrides of `audit_redaction`, by the upstream's own tool name.
    pub audit_redaction_tools: BTreeMap<String, Redaction>,
    /// With `isolation = "per-session"` or `"per-principal"`: instances running at once (one per
    /// session or principal that called it); a caller that would need one more gets an error
    /// naming this key.
    pub max_instances: usize,
}

impl UpstreamConfig {
    /// An enabled upstream `name` (also its prefix) running `true`, for unit tests of what
    /// holds upstreams.
    #[cfg(test)]
    pub(crate) fn for_tests(name: &str) -> Self {
        Self {
            name: name.into(),
            prefix: crate::mcp::names::Prefix::parse(name).unwrap_or_else(|e| panic!("{e}")),
            transport: Transport::Stdio(super::transport::StdioConfig {
                command: "true".into(),
                args: vec![],
                env: Default::default(),
                inherit_env: vec![],
                cwd: None,
            }),
            enabled: true,
            policy: Default::default(),
            isolation: Default::default(),
            credentials: Default::default(),
            protocol: Default::default(),
            pin: Default::default(),
            roots: None,
            audit_redaction: None,
            audit_redaction_tools: Default::default(),
            max_instances: DEFAULT_MAX_INSTANCES,
        }
    }

    /// The redaction for a call of `tool`, if this upstream overrides the global one.
    pub fn redaction_for(&self, tool: Option<&str>) -> Option<Redaction> {
        tool.and_then(|t| self.audit_redaction_tools.get(t).copied())
            .or(self.audit_redaction)
    }
}

/// What a tool whose definition changed since it was first seen (or last approved) becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum PinMode {
    /// Audited and shown in status; hosts still see it.
    #[default]
    Record,
    /// Also withheld from hosts until `mcpmux approve UPSTREAM TOOL`.
    Strict,
}

/// Which era of MCP an upstream is spoken to in (`protocol`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
pub enum Protocol {
    /// Asked with `server/discover` at each start: 2026-07-28 when it answers as such a server
    /// does, the `initialize` handshake otherwise.
    #[default]
    #[serde(rename = "auto")]
    Auto,
    /// The `initialize` handshake (2024-11-05 … 2025-11-25), never probed.
    #[serde(rename = "legacy")]
    Legacy,
    /// 2026-07-28 only: a server that does not answer `server/discover` fails to start.
    #[serde(rename = "2026-07-28")]
    Modern,
}

impl Protocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::Legacy => "legacy",
            Self::Modern => "2026-07-28",
        }
    }
}

/// How many connections an upstream gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Isolation {
    /// One connection serves every host session (server requests are forwarded only when their
    /// origin is certain).
    #[default]
    Shared,
    /// Each host session's calls go to its own connection, started on first use and stopped when
    /// the session ends; the shared connection still serves the catalog.
    PerSession,
    /// Each principal's calls (a host's, or a signed-in user's) go to its own connection or
    /// process, reused across its sessions and stopped when idle, started with what
    /// `[hosts.NAME.upstreams.UP]` gives that principal; the shared connection still serves the
    /// catalog. Anonymous callers get none.
    PerPrincipal,
}

/// Whose identity an upstream sees (`credentials`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Credentials {
    /// mcpmux's one identity (the upstream's own token, headers, environment) for every caller.
    #[default]
    Shared,
    /// Each principal's own: its calls go to an instance of its own (`Isolation::PerPrincipal`
    /// unless the upstream is per-session), started with that principal's secrets; nothing of
    /// one principal's is used for another.
    PerPrincipal,
}

impl Config {
    /// Keeps state in `dir`: every remote upstream's sign-in tokens in `dir/oauth/NAME.json`,
    /// and (with `with_audit`, for `--state-dir`) the audit store in `dir/audit`.
    pub fn set_state_dir(&mut self, dir: PathBuf, with_audit: bool) {
        if with_audit {
            self.audit.dir = dir.join("audit");
        }
        for upstream in &mut self.upstreams {
            if let Transport::Remote(remote) = &mut upstream.transport {
                if let Some(oauth) = &mut remote.oauth {
                    oauth.token_file = dir.join("oauth").join(format!("{}.json", upstream.name));
                }
            }
        }
        self.state_dir = dir;
    }

    pub fn enabled_upstreams(&self) -> impl Iterator<Item = &UpstreamConfig> {
        self.upstreams.iter().filter(|u| u.enabled)
    }

    /// The URL hosts use, as `mcpmux stdio` reaches the daemon.
    pub fn endpoint_url(&self) -> String {
        format!("http://{}/mcp", self.server.listen)
    }
}

/// `[hosts.NAME]`: a principal that may use mcpmux, known by the SHA-256 digest of its bearer
/// token (the config never holds the token) or by a JSON Web Token naming it, and its limits.
#[derive(Clone, PartialEq)]
pub struct HostCredential {
    pub name: String,
    pub credential: Credential,
    /// Most requests of this host in flight at once (`None`: unlimited).
    pub max_in_flight: Option<usize>,
    /// Most requests per second, as a token bucket of that many (`None`: unlimited).
    pub max_calls_per_second: Option<f64>,
    /// Most sessions of this host open at once (`None`: only `server.max_sessions` applies).
    pub max_sessions: Option<usize>,
    /// The profile it sees (`None`: the whole catalog).
    pub profile: Option<String>,
    /// `[hosts.NAME.upstreams.UP]`: what its calls to a per-principal upstream carry, by
    /// upstream name.
    pub upstreams: BTreeMap<String, Arc<UpstreamSecrets>>,
}

/// `[hosts.NAME.upstreams.UP]`: a host's own identity toward one per-principal upstream — a
/// remote one's bearer token and headers, a stdio one's environment (on top of the upstream's).
/// Secrets are read when the host's instance starts, never kept in the config.
#[derive(Clone, PartialEq, Default)]
pub struct UpstreamSecrets {
    /// Where they come from, as errors name it (`hosts.NAME.upstreams.UP`).
    pub table: String,
    pub bearer_token: Option<TokenSource>,
    pub headers: BTreeMap<String, String>,
    /// Variables set as written.
    pub env: BTreeMap<String, String>,
    /// Variables whose values are read from the daemon's environment or a file.
    pub env_secrets: BTreeMap<String, TokenSource>,
    /// Its own OAuth sign-in (made at run time, never written: its tokens are in the vault).
    pub oauth: Option<Box<super::transport::OAuthConfig>>,
}

/// How a host proves who it is.
#[derive(Debug, Clone, PartialEq)]
pub enum Credential {
    /// A bearer token, by its SHA-256 digest.
    Token { sha256: [u8; 32] },
    /// A JWT whose principal claim is `subject`, signed by `issuer` (`None`: the server's
    /// `[server.authorization]` issuer).
    Jwt {
        subject: String,
        issuer: Option<JwtIssuer>,
    },
}

/// An identity provider whose JWTs mcpmux accepts: its `iss`, the audiences a token must name
/// one of, where its signing keys are, and the claim that names the principal.
#[derive(Debug, Clone, PartialEq)]
pub struct JwtIssuer {
    pub issuer: String,
    pub audience: Vec<String>,
    pub jwks: JwksSource,
    pub claim: String,
    /// How long its keys are used before they are read again (so a key the provider removed
    /// stops being trusted).
    pub jwks_refresh: Duration,
}

/// How long an issuer's keys are used before they are read again, unless configured.
pub const DEFAULT_JWKS_REFRESH: Duration = Duration::from_secs(300);

/// Where an issuer's JSON Web Key Set is.
#[derive(Debug, Clone, PartialEq)]
pub enum JwksSource {
    File(PathBuf),
    Url(String),
}

/// `[server.authorization]`: mcpmux as an OAuth protected resource (RFC 9728) for hosts that sign
/// in against the team's identity provider.
#[derive(Debug, Clone, PartialEq)]
pub struct Authorization {
    /// The provider; its audience is filled in with `resource` once the listener is up.
    pub issuer: JwtIssuer,
    /// This server's resource URL (`None`: `http://LISTEN/mcp` of the bound address).
    pub resource: Option<String>,
    pub scopes_supported: Vec<String>,
    /// Scopes every token must carry.
    pub required_scopes: Vec<String>,
    /// What a signed-in user no `[hosts]` entry names sees (`None`: the whole catalog).
    pub profile: Option<String>,
}

impl std::fmt::Debug for HostCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostCredential")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// `[profiles.NAME]`: one view of the catalog — which upstreams it holds, which exposed names it
/// lets through, what it renames or re-describes, its own page sizes and name budget, and whether
/// it is served at its own path.
#[derive(Debug, Clone)]
pub struct Profile {
    pub name: String,
    /// The upstreams it holds, by name (`None`: every upstream).
    pub upstreams: Option<Vec<String>>,
    pub filter: NameFilter,
    /// Exposed tool or prompt name (as the profile would expose it) → the name hosts see instead.
    pub renames: BTreeMap<String, String>,
    /// Exposed tool or prompt name (before any rename) → the description hosts see instead.
    pub descriptions: BTreeMap<String, String>,
    /// Its page sizes and name budget (the catalog's, unless the profile sets them).
    pub catalog: CatalogConfig,
    /// Its one upstream's names and URIs pass through without a prefix.
    pub unprefixed: bool,
    /// Served at `/mcp/NAME` too.
    pub path: bool,
    /// Whether its path needs a host credential even without `[hosts]` (which validation
    /// refuses); with credentials configured, every path needs one unless `anonymous`.
    pub path_requires_credential: bool,
    /// Loopback clients without a credential may use its path even when `[hosts]` or
    /// `[server.authorization]` are configured (`anonymous = true`).
    pub anonymous: bool,
    /// Changed tools are withheld in this view until approved (`pin = "strict"`).
    pub strict_pins: bool,
    /// `tools = "search"`: hosts see tools to search and call the view's tools instead of its
    /// tools (`None`: `tools = "all"`, every tool listed).
    pub search: Option<Arc<SearchMode>>,
}

/// A profile's search mode: its hosts list a tool that searches the view's tools, one that calls
/// any of them, and the tools `always` names; every tool of the view stays callable.
#[derive(Debug)]
pub struct SearchMode {
    /// Globs on exposed tool names: the tools listed directly beside the two.
    pub always: globset::GlobSet,
    pub search: MetaTool,
    pub call: MetaTool,
}

/// One of the tools mcpmux itself lists in search mode, as the profile names and describes it
/// (`None`: mcpmux's own description).
#[derive(Debug, Clone)]
pub struct MetaTool {
    pub name: String,
    pub description: Option<String>,
}

/// The names the search mode's tools have unless a profile names them.
pub const SEARCH_TOOL_NAME: &str = "search_tools";
pub const CALL_TOOL_NAME: &str = "call_tool";

/// The prefix every view without a prefix uses.
static NO_PREFIX: Prefix = Prefix::NONE;

impl Profile {
    /// Whether the profile holds the upstream named `upstream`.
    pub fn holds(&self, upstream: &str) -> bool {
        self.upstreams
            .as_ref()
            .is_none_or(|names| names.iter().any(|n| n == upstream))
    }

    /// The prefix an upstream's names and URIs carry in this profile (`None`: the full catalog).
    pub fn prefix_for<'a>(profile: Option<&Self>, prefix: &'a Prefix) -> &'a Prefix {
        match profile {
            Some(p) if p.unprefixed => &NO_PREFIX,
            _ => prefix,
        }
    }

    /// Whether an exposed tool or prompt name the upstream would answer for unlisted (with an
    /// unprefixed upstream) is one this profile lets through.
    pub fn passes_unlisted(&self, kind: ListKind, exposed: &str) -> bool {
        self.filter.admits(kind, exposed) && !self.renames.contains_key(exposed)
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::path::Path;

    use super::Config;

    fn config(text: &str) -> Config {
        let path = Path::new("/tmp/mcpmux-model/mcpmux.toml");
        crate::config::parse(path, text).unwrap_or_else(|e| panic!("{e}"))
    }

    fn addr(text: &str) -> SocketAddr {
        text.parse().unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn loopback_is_never_exposed() {
        assert!(!config("").host_exposed(addr("127.0.0.1:7332")));
        assert!(!config("").host_exposed(addr("[::1]:7332")));
    }

    #[test]
    fn beyond_loopback_without_a_credential_is_exposed() {
        assert!(config("").host_exposed(addr("0.0.0.0:7332")));
        assert!(config("").host_exposed(addr("192.0.2.7:7332")));
    }

    #[test]
    fn a_host_credential_covers_a_listener_beyond_loopback() {
        let digest = "0".repeat(64);
        let text = format!("[hosts.ci]\ntoken_sha256 = \"{digest}\"\n");
        assert!(!config(&text).host_exposed(addr("0.0.0.0:7332")));
    }
}
