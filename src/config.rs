//! Configuration: the model (what mcpmux runs with, validated) and loading it from a TOML file or
//! from the `mcpServers` JSON that Claude Desktop, Cursor and VS Code already use. Config imports
//! nothing of the runtime.
//!
//! - `model`: the validated config and its defaults; `policy`: per-upstream policy;
//!   `transport`: how an upstream is reached (stdio or remote); `audit`: the audit settings;
//!   `filter`: a profile's name filter.
//! - `load`: finding and reading the file; `error`: [`ConfigError`].
//! - `raw`: the TOML as written (serde); `mcp_servers`: the `mcpServers` JSON, into the same shape.
//! - `validate`: raw → model, one function per section.
//! - `diff`: what a reload changes ([`ConfigDiff`]), a pure value; `watch`: when the file
//!   changed (notify, debounced).

mod audit_settings;
mod diff;
mod error;
mod filter;
mod load;
mod masked;
mod mcp_servers;
mod model;
mod policy;
mod raw;
mod secrets;
mod transport;
mod validate;
mod watch;

pub use audit_settings::{
    AuditConfig, AuditExport, DEFAULT_SECRET_KEYS, Durability, Redaction, SecretKeys, state_dir,
};
pub use diff::{Changed, ConfigDiff, Fixed};
pub use error::{ConfigError, ReloadError};
pub use filter::NameFilter;
pub use load::{default_path, load, parse};
pub use masked::masked;
pub use mcp_servers::{ImportedServer, imported_servers};
pub use model::{ADMIN_EXPOSED, ADMIN_EXPOSED_FIX, AdminAccess};
pub use model::{
    Authorization, CatalogConfig, ClusterConfig, Config, Credential, Credentials,
    DEFAULT_INHERITED_ENV, DEFAULT_MAX_INSTANCES, HostCredential, Isolation, JwksSource, JwtIssuer,
    ListingBudget, MetaTool, OtlpProtocol, PinMode, Profile, Protocol, SearchMode, ServerConfig,
    StoreConfig, TelemetryConfig, UpstreamConfig, UpstreamSecrets,
};
pub use model::{CALL_TOOL_NAME, SEARCH_TOOL_NAME};
pub use policy::Policy;
pub use transport::is_loopback;
pub use transport::{
    DEFAULT_CONNECT_TIMEOUT, HeldToken, IdentityProvider, OAuthConfig, OAuthGrant, PrivateKey,
    RemoteConfig, RemoteKind, SIGNING_ALGORITHMS, SealedTokens, StdioConfig, TokenSource,
    Transport,
};
pub use validate::cluster::machine_name;
pub use validate::is_replica_name;
pub use watch::watch_file;
