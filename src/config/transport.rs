//! How mcpmux reaches an upstream: a child process over stdio, or a remote server over
//! Streamable HTTP or the legacy HTTP+SSE transport. Plain data; the credential is named here
//! (an environment variable or a file), never held, so a config value never carries a secret.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// The transport an upstream is reached over.
#[derive(Debug, Clone, PartialEq)]
pub enum Transport {
    Stdio(StdioConfig),
    Remote(RemoteConfig),
}

/// A child process speaking MCP over stdio.
#[derive(Debug, Clone, PartialEq)]
pub struct StdioConfig {
    pub command: String,
    pub args: Vec<String>,
    /// Variables set for the child on top of the inherited ones.
    pub env: BTreeMap<String, String>,
    /// Variables copied from the daemon's environment (default: `DEFAULT_INHERITED_ENV`).
    pub inherit_env: Vec<String>,
    pub cwd: Option<PathBuf>,
}

/// A remote MCP server.
#[derive(Debug, Clone, PartialEq)]
pub struct RemoteConfig {
    /// The server's MCP endpoint (Streamable HTTP) or SSE URL (legacy), `http` or `https`.
    pub url: url::Url,
    pub kind: RemoteKind,
    /// Extra request headers, sent to this upstream only.
    pub headers: BTreeMap<String, String>,
    /// Where the bearer token comes from, if the server wants one.
    pub bearer_token: Option<TokenSource>,
    /// Longest wait for a TCP (and TLS) connection.
    pub connect_timeout: Duration,
    /// CA certificates (PEM) trusted besides the system's.
    pub ca_file: Option<PathBuf>,
    /// A client certificate and its key (PEM), for servers that want mutual TLS.
    pub client_identity: Option<(PathBuf, PathBuf)>,
    /// How mcpmux signs in when the server asks for OAuth; `None` with a static bearer token.
    pub oauth: Option<Box<OAuthConfig>>,
}

/// `[upstreams.NAME.oauth]`: how mcpmux signs in to a remote upstream that wants OAuth. Every
/// key is optional: without a client, mcpmux uses a Client ID Metadata Document (when
/// `client_id_metadata_url` is set and the server accepts those) or registers itself.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct OAuthConfig {
    /// A client registered with the authorization server beforehand.
    pub client_id: Option<String>,
    /// That client's secret, from a variable or a file (never in the config itself).
    pub client_secret: Option<TokenSource>,
    /// Or that client's private key, to authenticate with a signed assertion (`private_key_jwt`).
    pub private_key: Option<PrivateKey>,
    /// The URL of mcpmux's Client ID Metadata Document, used as its `client_id` where accepted.
    pub client_id_metadata_url: Option<String>,
    pub grant: OAuthGrant,
    /// The loopback port the sign-in's redirect comes back to (0: any free one).
    pub redirect_port: u16,
    /// Where the tokens are kept: `<state dir>/oauth/NAME.json`.
    pub token_file: PathBuf,
    /// With `grant = "jwt_bearer"`: where the workload's JWT is read (a file a platform keeps
    /// fresh, e.g. a projected service account token, or a variable), at each token request.
    pub assertion: Option<TokenSource>,
    /// With `grant = "identity_assertion"`: where the identity provider exchanges the identity
    /// token for an ID-JAG, and mcpmux's client id there (if it has one).
    pub idp: Option<IdentityProvider>,
    /// The authorization server (issuer identifier, RFC 8414) mcpmux signs in with. Required
    /// with a client secret or private key: configured credentials go to this server only,
    /// whatever server the upstream's challenge or resource metadata names.
    pub issuer: Option<url::Url>,
    /// A principal's own sign-in (`oauth::vault`): its tokens sealed in `token_file`; `None` for
    /// the upstream's own sign-in, kept in a plain file only its owner reads.
    pub sealed: Option<SealedTokens>,
    /// Whether the config has an `[oauth]` table (else these are the defaults, used when the
    /// server asks for a sign-in).
    pub written: bool,
}

/// The key a principal's tokens are sealed with, and what they are bound to (the upstream and
/// the principal).
#[derive(Clone)]
pub struct SealedTokens {
    pub sealer: std::sync::Arc<crate::sealed::Sealer>,
    pub binding: std::sync::Arc<str>,
}

impl PartialEq for SealedTokens {
    fn eq(&self, other: &Self) -> bool {
        self.binding == other.binding && std::sync::Arc::ptr_eq(&self.sealer, &other.sealer)
    }
}

impl std::fmt::Debug for SealedTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("SealedTokens").field(&self.binding).finish()
    }
}

/// The enterprise identity provider of `grant = "identity_assertion"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdentityProvider {
    pub token_endpoint: url::Url,
    pub client_id: Option<String>,
}

/// A client's private key for `private_key_jwt` (RFC 7523): a PEM file and the JWS algorithm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrivateKey {
    pub file: PathBuf,
    /// `ES256` (the default), `ES384`, `RS256`, `RS384`, `RS512`, `PS256`, `PS384`, `PS512` or
    /// `EdDSA`.
    pub algorithm: String,
}

/// The JWS algorithms a [`PrivateKey`] may sign with.
pub const SIGNING_ALGORITHMS: [&str; 9] = [
    "ES256", "ES384", "RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "EdDSA",
];

/// Which OAuth grant gets the tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OAuthGrant {
    /// A person signs in once (`mcpmux login NAME`); refresh tokens keep it signed in.
    #[default]
    AuthorizationCode,
    /// Machine to machine: the client's own credentials, no person, no browser.
    ClientCredentials,
    /// A workload's own JWT as the grant (RFC 7523 §2.1, workload identity federation): read
    /// from `assertion_file` or `assertion_env` at each token request, no person, no secret.
    JwtBearer,
    /// Each caller's own JWT exchanged (RFC 8693) at `issuer` for a token whose audience is the
    /// upstream (RFC 8707 `resource`), per principal (`credentials = "per-principal"`).
    TokenExchange,
    /// Enterprise-managed authorization (the MCP `ext-auth` extension, ID-JAG): an identity
    /// token from the enterprise's identity provider (`assertion_file` / `assertion_env`) is
    /// exchanged there (`idp_token_endpoint`) for an Identity Assertion JWT Authorization Grant
    /// naming the upstream's authorization server, which that server takes as a JWT bearer grant
    /// from the configured client. No person, no browser.
    IdentityAssertion,
}

impl OAuthGrant {
    /// Whether it gets tokens with no person and no browser (so renewing is signing in again).
    pub fn needs_no_person(self) -> bool {
        matches!(
            self,
            Self::ClientCredentials | Self::JwtBearer | Self::IdentityAssertion
        )
    }
}

/// Which HTTP transport a remote upstream speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RemoteKind {
    /// Streamable HTTP, falling back to the legacy HTTP+SSE transport when the server refuses
    /// the first POST with a 4xx (the spec's backward-compatibility procedure).
    #[default]
    Auto,
    StreamableHttp,
    Sse,
}

impl RemoteKind {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Auto => "auto",
            Self::StreamableHttp => "streamable-http",
            Self::Sse => "sse",
        }
    }
}

/// Where a bearer token is read from (at each start, so a changed one is picked up).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenSource {
    /// An environment variable of the daemon.
    Env(String),
    /// A file whose trimmed content is the token.
    File(PathBuf),
    /// A token mcpmux obtained itself (a caller's exchanged token), held in memory only; never
    /// from a config file.
    Held(HeldToken),
}

/// A token held in memory: printed as `HeldToken(..)`, never its text.
#[derive(Clone, PartialEq, Eq)]
pub struct HeldToken(pub std::sync::Arc<str>);

impl std::fmt::Debug for HeldToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HeldToken(..)")
    }
}

/// Why a secret cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum SecretError {
    #[error("the variable `{0}` is not set in mcpmux's environment")]
    Unset(String),
    #[error("cannot read {}: {source}", path.display())]
    Unreadable {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0} is empty")]
    Empty(String),
}

impl TokenSource {
    /// The secret, read now (so a changed variable or file is picked up), trimmed.
    pub fn read(&self) -> Result<String, SecretError> {
        let text = match self {
            Self::Held(token) => return Ok(token.0.to_string()),
            Self::Env(var) => std::env::var(var).map_err(|_| SecretError::Unset(var.clone()))?,
            Self::File(path) => {
                std::fs::read_to_string(path).map_err(|source| SecretError::Unreadable {
                    path: path.clone(),
                    source,
                })?
            }
        };
        let text = text.trim().to_owned();
        if text.is_empty() {
            let place = match self {
                Self::Env(var) => format!("the variable `{var}`"),
                Self::File(path) => path.display().to_string(),
                Self::Held(_) => "the token mcpmux holds".to_owned(),
            };
            return Err(SecretError::Empty(place));
        }
        Ok(text)
    }
}

/// Default [`RemoteConfig::connect_timeout`].
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether `url` names this machine: 127.0.0.0/8, ::1, `localhost` (or a name under it).
pub fn is_loopback(url: &url::Url) -> bool {
    match url.host() {
        Some(url::Host::Domain(name)) => {
            name.eq_ignore_ascii_case("localhost")
                || name.to_ascii_lowercase().ends_with(".localhost")
        }
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}
