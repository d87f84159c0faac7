//! The config file as written: a serde mirror of the TOML with every key optional, refusing
//! unknown keys. [`super::validate`] turns it into the model; `mcpServers` JSON files are read into
//! the same shape ([`super::mcp_servers`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::audit_settings::{Durability, Redaction};
use super::error::ConfigError;
use super::model::{Credentials, Isolation, PinMode, Protocol};
use super::policy::RawPolicy;
use super::transport::{OAuthGrant, RemoteKind};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    /// Where mcpmux keeps state (the audit store); see `config::state_dir`.
    pub state_dir: Option<PathBuf>,
    #[serde(default)]
    pub audit: RawAudit,
    #[serde(default)]
    pub server: RawServer,
    #[serde(default)]
    pub catalog: RawCatalog,
    #[serde(default)]
    pub defaults: RawDefaults,
    #[serde(default)]
    pub admin: RawAdmin,
    #[serde(default)]
    pub telemetry: RawTelemetry,
    /// `[cluster]`: one of several identical replicas.
    pub cluster: Option<RawCluster>,
    #[serde(default)]
    pub upstreams: BTreeMap<String, RawUpstream>,
    #[serde(default)]
    pub hosts: BTreeMap<String, RawHost>,
    #[serde(default)]
    pub profiles: BTreeMap<String, RawProfile>,
}

impl RawConfig {
    pub fn from_toml(path: &Path, text: &str) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|e| ConfigError::Syntax {
            file: path.into(),
            detail: e.to_string().trim_end().to_owned(),
        })
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawServer {
    pub listen: Option<String>,
    pub max_body_bytes: Option<usize>,
    #[serde(default, with = "humantime_serde")]
    pub session_idle_timeout: Option<Duration>,
    #[serde(default)]
    pub allowed_origins: Vec<String>,
    #[serde(default, with = "humantime_serde")]
    pub initialize_wait: Option<Duration>,
    pub max_in_flight_per_session: Option<usize>,
    pub max_listen_streams_per_caller: Option<usize>,
    pub max_parked_per_caller: Option<usize>,
    #[serde(default, with = "humantime_serde")]
    pub park_timeout: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    pub sign_in_timeout: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    pub drain_timeout: Option<Duration>,
    /// The profile loopback clients without a credential get.
    pub anonymous_profile: Option<String>,
    pub authorization: Option<RawAuthorization>,
    pub max_sessions: Option<usize>,
    pub max_connections: Option<usize>,
    #[serde(default, with = "humantime_serde")]
    pub header_timeout: Option<Duration>,
    /// The key ring of stateless hosts' listing cursors (default: in the state directory).
    pub cursor_keys: Option<std::path::PathBuf>,
    /// Where people reach mcpmux in a browser (sign-in pages).
    pub public_url: Option<String>,
    /// Threads the daemon's requests run on (default: half the machine's cores, at least one).
    pub workers: Option<usize>,
}

/// `[server.authorization]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAuthorization {
    pub issuer: Option<String>,
    pub jwks_file: Option<PathBuf>,
    pub jwks_url: Option<String>,
    #[serde(default, with = "humantime_serde")]
    pub jwks_refresh: Option<Duration>,
    pub resource: Option<String>,
    #[serde(default)]
    pub scopes_supported: Vec<String>,
    #[serde(default)]
    pub required_scopes: Vec<String>,
    pub principal_claim: Option<String>,
    pub profile: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAudit {
    pub enabled: Option<bool>,
    pub redaction: Option<Redaction>,
    pub secret_keys: Option<Vec<String>>,
    pub durability: Option<Durability>,
    #[serde(default, with = "humantime_serde")]
    pub max_age: Option<Duration>,
    pub max_bytes: Option<u64>,
    pub queue: Option<usize>,
    pub export: Option<super::audit_settings::AuditExport>,
    pub export_queue: Option<usize>,
    #[serde(default, with = "humantime_serde")]
    pub export_head_interval: Option<Duration>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawAdmin {
    /// `"off"` disables the admin listener.
    pub listen: Option<String>,
    /// A provisioned admin token (else `<state dir>/admin.token` is made at first start).
    pub token_file: Option<PathBuf>,
    /// The acknowledgement a non-loopback `listen` needs (there is no TLS listener).
    pub allow_remote: Option<bool>,
}

/// `[cluster]`: this daemon is one of several identical replicas behind a load balancer.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCluster {
    pub replica: Option<String>,
    pub peer_url: Option<String>,
    #[serde(default)]
    pub peers: BTreeMap<String, String>,
    pub state_keys: Option<PathBuf>,
    #[serde(default, with = "humantime_serde")]
    pub unready_delay: Option<Duration>,
    pub store: Option<String>,
    pub store_password_file: Option<PathBuf>,
    pub store_password_env: Option<String>,
    pub store_ca_file: Option<PathBuf>,
}

/// `[telemetry]`: OpenTelemetry export.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTelemetry {
    pub otlp_endpoint: Option<String>,
    pub otlp_protocol: Option<String>,
    pub service_name: Option<String>,
    pub traces: Option<bool>,
    pub metrics: Option<bool>,
    #[serde(default, with = "humantime_serde")]
    pub metrics_interval: Option<Duration>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawCatalog {
    pub page_size: Option<usize>,
    pub tools_page_size: Option<usize>,
    pub prompts_page_size: Option<usize>,
    pub resources_page_size: Option<usize>,
    pub resource_templates_page_size: Option<usize>,
    pub skills_page_size: Option<usize>,
    pub name_pattern: Option<String>,
    pub name_max_length: Option<usize>,
    #[serde(default, with = "humantime_serde")]
    pub cursor_retention: Option<Duration>,
    pub max_items_per_upstream: Option<usize>,
    pub max_bytes_per_upstream: Option<usize>,
    pub max_definition_bytes: Option<usize>,
}

/// `[upstreams.NAME]`: the process, its namespace, and policy overrides. Unknown keys are caught
/// by `unknown` (serde cannot refuse them itself next to a flattened table).
#[derive(Debug, Default, Deserialize)]
pub(super) struct RawUpstream {
    pub command: Option<String>,
    /// A remote server's URL (instead of `command`).
    pub url: Option<String>,
    pub transport: Option<RemoteKind>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    pub bearer_token_env: Option<String>,
    pub bearer_token_file: Option<PathBuf>,
    #[serde(default, with = "humantime_serde")]
    pub connect_timeout: Option<Duration>,
    pub ca_file: Option<PathBuf>,
    pub client_cert_file: Option<PathBuf>,
    pub client_key_file: Option<PathBuf>,
    pub oauth: Option<RawOAuth>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub inherit_env: Option<Vec<String>>,
    pub cwd: Option<PathBuf>,
    pub enabled: Option<bool>,
    pub prefix: Option<String>,
    #[serde(default)]
    pub isolation: Isolation,
    #[serde(default)]
    pub credentials: Credentials,
    #[serde(default)]
    pub protocol: Protocol,
    #[serde(default)]
    pub pin: PinMode,
    pub roots: Option<Vec<String>>,
    #[serde(default)]
    pub tool_timeouts: BTreeMap<String, HumanDuration>,
    pub audit_redaction: Option<Redaction>,
    #[serde(default)]
    pub audit_redaction_tools: BTreeMap<String, Redaction>,
    pub max_instances: Option<usize>,
    #[serde(flatten)]
    pub policy: RawPolicy,
    #[serde(flatten)]
    pub unknown: BTreeMap<String, toml::Value>,
}

/// `[upstreams.NAME.oauth]`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOAuth {
    pub client_id: Option<String>,
    pub client_secret_env: Option<String>,
    pub client_secret_file: Option<PathBuf>,
    pub private_key_file: Option<PathBuf>,
    pub signing_algorithm: Option<String>,
    pub client_id_metadata_url: Option<String>,
    pub grant: Option<OAuthGrant>,
    pub redirect_port: Option<u16>,
    /// The authorization server the configured client belongs to (its issuer identifier).
    pub issuer: Option<String>,
    pub assertion_file: Option<PathBuf>,
    pub assertion_env: Option<String>,
    /// `grant = "identity_assertion"`: the enterprise identity provider's token endpoint, and
    /// the client id mcpmux has there.
    pub idp_token_endpoint: Option<String>,
    pub idp_client_id: Option<String>,
}

/// `[hosts.NAME]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHost {
    pub token_sha256: Option<String>,
    pub token_file: Option<PathBuf>,
    pub max_in_flight: Option<usize>,
    pub max_calls_per_second: Option<f64>,
    pub max_sessions: Option<usize>,
    pub profile: Option<String>,
    /// A JWT credential: the principal claim's value (with `jwks_*`, `issuer`, `audience` and
    /// `claim` for the host's own issuer; without, `[server.authorization]`'s).
    pub subject: Option<String>,
    pub jwks_file: Option<PathBuf>,
    pub jwks_url: Option<String>,
    #[serde(default, with = "humantime_serde")]
    pub jwks_refresh: Option<Duration>,
    pub issuer: Option<String>,
    pub audience: Option<Vec<String>>,
    pub claim: Option<String>,
    /// `[hosts.NAME.upstreams.UP]`: its own identity toward per-principal upstreams.
    #[serde(default)]
    pub upstreams: BTreeMap<String, RawHostUpstream>,
}

/// `[hosts.NAME.upstreams.UP]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHostUpstream {
    pub bearer_token_env: Option<String>,
    pub bearer_token_file: Option<PathBuf>,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default)]
    pub env_from_env: BTreeMap<String, String>,
    #[serde(default)]
    pub env_from_file: BTreeMap<String, PathBuf>,
}

/// `[profiles.NAME]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawProfile {
    pub upstreams: Option<Vec<String>>,
    #[serde(default)]
    pub allow: Vec<String>,
    #[serde(default)]
    pub deny: Vec<String>,
    #[serde(default)]
    pub rename: BTreeMap<String, String>,
    #[serde(default)]
    pub describe: BTreeMap<String, String>,
    #[serde(default)]
    pub unprefixed: bool,
    #[serde(default)]
    pub path: bool,
    #[serde(default)]
    pub path_requires_credential: bool,
    #[serde(default)]
    pub anonymous: bool,
    pub pin: Option<PinMode>,
    pub page_size: Option<usize>,
    pub tools_page_size: Option<usize>,
    pub prompts_page_size: Option<usize>,
    pub resources_page_size: Option<usize>,
    pub resource_templates_page_size: Option<usize>,
    pub skills_page_size: Option<usize>,
    pub name_pattern: Option<String>,
    pub name_max_length: Option<usize>,
    /// `"all"` (the default) or `"search"`.
    pub tools: Option<String>,
    #[serde(default)]
    pub always: Vec<String>,
    pub search_tool_name: Option<String>,
    pub search_tool_description: Option<String>,
    pub call_tool_name: Option<String>,
    pub call_tool_description: Option<String>,
}

/// A duration written like "30s" or "5m".
#[derive(Debug, Clone, Copy, Deserialize)]
pub(super) struct HumanDuration(#[serde(with = "humantime_serde")] pub Duration);

/// The keys of [`RawUpstream`] besides the policy's, for unknown-key messages.
pub(super) const UPSTREAM_KEYS: [&str; 26] = [
    "command",
    "oauth",
    "url",
    "transport",
    "headers",
    "bearer_token_env",
    "bearer_token_file",
    "connect_timeout",
    "ca_file",
    "client_cert_file",
    "client_key_file",
    "args",
    "env",
    "inherit_env",
    "cwd",
    "enabled",
    "prefix",
    "isolation",
    "credentials",
    "protocol",
    "pin",
    "roots",
    "tool_timeouts",
    "audit_redaction",
    "audit_redaction_tools",
    "max_instances",
];

/// `[defaults]`: policy for every upstream.
#[derive(Debug, Default, Deserialize)]
pub(super) struct RawDefaults {
    #[serde(flatten)]
    pub policy: RawPolicy,
    #[serde(flatten)]
    pub unknown: BTreeMap<String, toml::Value>,
}
