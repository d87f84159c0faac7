//! `[upstreams.NAME]`'s transport: `command` (a child over stdio) or `url` (a remote server),
//! never both, each with only the keys that belong to it; a URL that is `http` or `https` with a
//! host; headers that HTTP can carry; one bearer-token source at most; a client certificate only
//! with its key.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::super::error::ConfigError;
use super::super::model::DEFAULT_INHERITED_ENV;
use super::super::raw::{RawOAuth, RawUpstream};
use super::super::transport::{
    DEFAULT_CONNECT_TIMEOUT, OAuthConfig, OAuthGrant, PrivateKey, RemoteConfig, SIGNING_ALGORITHMS,
    StdioConfig, TokenSource, Transport,
};
use super::resolve;

/// Takes the transport keys out of `u`.
pub(super) fn transport(
    file: &Path,
    base_dir: &Path,
    name: &str,
    u: &mut RawUpstream,
) -> Result<Transport, ConfigError> {
    let key = |field: &str| format!("upstreams.{name}.{field}");
    let command = u.command.take().filter(|c| !c.trim().is_empty());
    let url = u.url.take().filter(|c| !c.trim().is_empty());
    match (command, url) {
        (Some(_), Some(_)) => Err(ConfigError::invalid(
            file,
            key("url"),
            "set together with `command`",
            "an upstream is either a program to start (command = …) or a remote server (url = …); keep one",
        )),
        (None, None) => Err(ConfigError::invalid(
            file,
            key("command"),
            "missing",
            "set the program to start, e.g. command = \"npx\", or a remote server's url = \"https://…/mcp\"",
        )),
        (Some(command), None) => {
            let remote_only = [
                ("transport", u.transport.is_some()),
                ("headers", !u.headers.is_empty()),
                ("bearer_token_env", u.bearer_token_env.is_some()),
                ("bearer_token_file", u.bearer_token_file.is_some()),
                ("connect_timeout", u.connect_timeout.is_some()),
                ("ca_file", u.ca_file.is_some()),
                ("client_cert_file", u.client_cert_file.is_some()),
                ("client_key_file", u.client_key_file.is_some()),
            ];
            if let Some((k, _)) = remote_only.iter().find(|(_, set)| *set) {
                return Err(ConfigError::invalid(
                    file,
                    key(k),
                    "is for remote upstreams (url = …), and this one runs a command",
                    format!("remove `{k}`, or replace `command` with the server's url"),
                ));
            }
            let inherit_env = u.inherit_env.take().unwrap_or_else(|| {
                (DEFAULT_INHERITED_ENV.iter())
                    .map(|s| (*s).to_owned())
                    .collect()
            });
            Ok(Transport::Stdio(StdioConfig {
                command: program(base_dir, command),
                args: std::mem::take(&mut u.args),
                env: std::mem::take(&mut u.env),
                inherit_env,
                cwd: u.cwd.take().map(|d| resolve(base_dir, d)),
            }))
        }
        (None, Some(url)) => remote(file, base_dir, name, url, u).map(Transport::Remote),
    }
}

// Long: one check per key of a remote upstream (URL, transport, headers, credentials, TLS files),
// each naming its key in the error.
fn remote(
    file: &Path,
    base_dir: &Path,
    name: &str,
    text: String,
    u: &mut RawUpstream,
) -> Result<RemoteConfig, ConfigError> {
    let key = |field: &str| format!("upstreams.{name}.{field}");
    let stdio_only = [
        ("args", !u.args.is_empty()),
        ("env", !u.env.is_empty()),
        ("inherit_env", u.inherit_env.is_some()),
        ("cwd", u.cwd.is_some()),
    ];
    if let Some((k, _)) = stdio_only.iter().find(|(_, set)| *set) {
        return Err(ConfigError::invalid(
            file,
            key(k),
            "is for upstreams that run a command, and this one is a remote server (url = …)",
            format!("remove `{k}`; a remote server's requests can carry headers = {{ … }} instead"),
        ));
    }
    let url = url::Url::parse(&text)
        .ok()
        .filter(|u| matches!(u.scheme(), "http" | "https") && u.host_str().is_some())
        .ok_or_else(|| {
            ConfigError::invalid(
                file,
                key("url"),
                format!("`{text}` is not an http:// or https:// URL"),
                "write the server's MCP endpoint, e.g. url = \"https://example.com/mcp\"",
            )
        })?;
    headers(file, &key, &u.headers)?;
    let bearer_token = bearer_token(
        (file, base_dir),
        &key,
        u.bearer_token_env.take(),
        u.bearer_token_file.take(),
    )?;
    let ca_file = u.ca_file.take().map(|p| resolve(base_dir, p));
    if let Some(ca) = &ca_file {
        readable(file, key("ca_file"), ca)?;
    }
    let client_identity = match (u.client_cert_file.take(), u.client_key_file.take()) {
        (Some(cert), Some(key_file)) => {
            let (cert, key_file) = (resolve(base_dir, cert), resolve(base_dir, key_file));
            readable(file, key("client_cert_file"), &cert)?;
            readable(file, key("client_key_file"), &key_file)?;
            Some((cert, key_file))
        }
        (None, None) => None,
        (Some(_), None) | (None, Some(_)) => {
            return Err(ConfigError::invalid(
                file,
                key("client_cert_file"),
                "a client certificate needs its key, and a key its certificate",
                "set both client_cert_file and client_key_file, or neither",
            ));
        }
    };
    let per_principal = u.credentials == crate::config::Credentials::PerPrincipal;
    let oauth = match (u.oauth.take(), &bearer_token) {
        // Each caller signs in (or has its token exchanged); the upstream's own bearer token
        // reads the catalog.
        (Some(raw), Some(_))
            if raw.grant == Some(OAuthGrant::TokenExchange)
                || (per_principal
                    && raw.grant.is_none_or(|g| g == OAuthGrant::AuthorizationCode)) =>
        {
            Some(Box::new(oauth(file, base_dir, name, raw)?))
        }
        (Some(_), Some(_)) => {
            return Err(ConfigError::invalid(
                file,
                key("oauth"),
                "set together with a bearer token",
                "sign in one way: keep the [oauth] table or bearer_token_env / bearer_token_file",
            ));
        }
        (raw, None) => {
            let written = raw.is_some();
            let mut config = oauth(file, base_dir, name, raw.unwrap_or_default())?;
            config.written = written;
            Some(Box::new(config))
        }
        (None, Some(_)) => None,
    };
    Ok(RemoteConfig {
        url,
        kind: u.transport.take().unwrap_or_default(),
        headers: std::mem::take(&mut u.headers),
        bearer_token,
        oauth,
        connect_timeout: u.connect_timeout.take().unwrap_or(DEFAULT_CONNECT_TIMEOUT),
        ca_file,
        client_identity,
    })
}
/// Refuses a header (of `[upstreams.NAME]` or a host's `[hosts.NAME.upstreams.UP]`, whose keys
/// `key` names) that no request could carry.
pub(super) fn headers(
    file: &Path,
    key: &impl Fn(&str) -> String,
    headers: &BTreeMap<String, String>,
) -> Result<(), ConfigError> {
    for (header, value) in headers {
        if let Some(problem) = header_problem(header, value) {
            return Err(ConfigError::invalid(
                file,
                key(&format!("headers.{header}")),
                problem,
                "use a header name of letters, digits and -, and a value without line breaks",
            ));
        }
    }
    Ok(())
}

/// Where a bearer token comes from: `bearer_token_env` or `bearer_token_file` (relative to the
/// config), one of them at most; `key` names the table's keys in errors.
pub(super) fn bearer_token(
    at: (&Path, &Path),
    key: &impl Fn(&str) -> String,
    env: Option<String>,
    path: Option<PathBuf>,
) -> Result<Option<TokenSource>, ConfigError> {
    secret(
        at,
        key,
        ("bearer_token_env", "bearer_token_file"),
        env,
        path,
    )
}

/// Where a secret comes from: the variable named by the key `names.0` or the file named by
/// `names.1` (relative to the config), one of them at most.
fn secret(
    (file, base_dir): (&Path, &Path),
    key: &impl Fn(&str) -> String,
    (env_key, file_key): (&str, &str),
    env: Option<String>,
    path: Option<PathBuf>,
) -> Result<Option<TokenSource>, ConfigError> {
    match (env, path) {
        (Some(_), Some(_)) => Err(ConfigError::invalid(
            file,
            key(file_key),
            format!("set together with `{env_key}`"),
            format!("read it from one place: keep {env_key} or {file_key}"),
        )),
        (Some(var), None) if var.trim().is_empty() => Err(ConfigError::invalid(
            file,
            key(env_key),
            "is empty",
            "name the environment variable that holds it, e.g. \"GITHUB_TOKEN\"",
        )),
        (Some(var), None) => Ok(Some(TokenSource::Env(var))),
        (None, Some(path)) => Ok(Some(TokenSource::File(resolve(base_dir, path)))),
        (None, None) => Ok(None),
    }
}

// Long: one check per `[upstreams.NAME.oauth]` key, each naming its key in the error.

/// `[upstreams.NAME.oauth]`; its token file is set once the state directory is known.
fn oauth(
    file: &Path,
    base_dir: &Path,
    name: &str,
    raw: RawOAuth,
) -> Result<OAuthConfig, ConfigError> {
    let key = |field: &str| format!("upstreams.{name}.oauth.{field}");
    let client_secret = secret(
        (file, base_dir),
        &key,
        ("client_secret_env", "client_secret_file"),
        raw.client_secret_env,
        raw.client_secret_file,
    )?;
    let private_key = match (raw.private_key_file, raw.signing_algorithm) {
        (None, None) => None,
        (None, Some(_)) => {
            return Err(ConfigError::invalid(
                file,
                key("signing_algorithm"),
                "set without private_key_file",
                "name the PEM private key to sign with: private_key_file = \"…\"",
            ));
        }
        (Some(path), algorithm) => {
            let algorithm = algorithm.unwrap_or_else(|| "ES256".to_owned());
            if !SIGNING_ALGORITHMS.contains(&algorithm.as_str()) {
                return Err(ConfigError::invalid(
                    file,
                    key("signing_algorithm"),
                    format!("`{algorithm}` is not a signing algorithm mcpmux knows"),
                    format!("use one of {}", SIGNING_ALGORITHMS.join(", ")),
                ));
            }
            let path = resolve(base_dir, path);
            readable(file, key("private_key_file"), &path)?;
            Some(PrivateKey {
                file: path,
                algorithm,
            })
        }
    };
    if client_secret.is_some() && private_key.is_some() {
        return Err(ConfigError::invalid(
            file,
            key("private_key_file"),
            "set together with a client secret",
            "authenticate one way: keep the client secret or the private key",
        ));
    }
    if (client_secret.is_some() || private_key.is_some()) && raw.client_id.is_none() {
        return Err(ConfigError::invalid(
            file,
            key("client_id"),
            "missing, though a client secret or private key is set",
            "set the client_id the authorization server registered mcpmux under",
        ));
    }
    if let Some(url) = &raw.client_id_metadata_url {
        if url::Url::parse(url).map_or(true, |u| u.scheme() != "https") {
            return Err(ConfigError::invalid(
                file,
                key("client_id_metadata_url"),
                format!("`{url}` is not an https URL"),
                "name the https URL where mcpmux's client metadata document is published",
            ));
        }
    }
    let issuer = match raw.issuer {
        Some(text) => Some(issuer(file, &key("issuer"), &text)?),
        None if client_secret.is_some() || private_key.is_some() => {
            return Err(ConfigError::invalid(
                file,
                key("issuer"),
                "missing, though a client secret or private key is set",
                "set issuer = \"https://…\" to the authorization server that registered this client: mcpmux sends its credentials to that server only, never to one an upstream points at",
            ));
        }
        None => None,
    };
    let grant = raw.grant.unwrap_or_default();
    if grant == OAuthGrant::ClientCredentials && client_secret.is_none() && private_key.is_none() {
        return Err(ConfigError::invalid(
            file,
            key("grant"),
            "client_credentials without a client secret or private key",
            "set client_id and client_secret_env (or client_secret_file, or private_key_file) for the client credentials grant",
        ));
    }
    let assertion = secret(
        (file, base_dir),
        &key,
        ("assertion_env", "assertion_file"),
        raw.assertion_env,
        raw.assertion_file,
    )?;
    let jwt_bearer = grant == OAuthGrant::JwtBearer;
    if jwt_bearer && (issuer.is_none() || raw.client_id.is_none() || assertion.is_none()) {
        return Err(ConfigError::invalid(
            file,
            key("grant"),
            "jwt_bearer without client_id, issuer and an assertion",
            "set client_id, issuer (the authorization server that trusts the workload's tokens) and assertion_file (or assertion_env) to where the workload's JWT is",
        ));
    }
    let id_jag = grant == OAuthGrant::IdentityAssertion;
    let idp = identity_provider(
        file,
        &key,
        id_jag,
        (raw.idp_token_endpoint, raw.idp_client_id),
    )?;
    if id_jag && (issuer.is_none() || raw.client_id.is_none() || assertion.is_none()) {
        return Err(ConfigError::invalid(
            file,
            key("grant"),
            "identity_assertion without client_id, issuer and an identity token",
            "set client_id (with its secret or key) and issuer for the upstream's authorization server, and assertion_file (or assertion_env) to where the identity provider's ID token is",
        ));
    }
    if !(jwt_bearer || id_jag) && assertion.is_some() {
        return Err(ConfigError::invalid(
            file,
            key("assertion_file"),
            "is set, but the grant is neither jwt_bearer nor identity_assertion",
            "set grant = \"jwt_bearer\" (a workload's JWT) or \"identity_assertion\" (an ID token), or leave assertion_file and assertion_env out",
        ));
    }
    if grant == OAuthGrant::TokenExchange && (raw.client_id.is_none() || issuer.is_none()) {
        return Err(ConfigError::invalid(
            file,
            key("grant"),
            "token_exchange without client_id and issuer",
            "set issuer to the authorization server that exchanges your hosts' tokens, and the client_id (with client_secret_env, client_secret_file or private_key_file) it registered mcpmux under",
        ));
    }
    Ok(OAuthConfig {
        client_id: raw.client_id,
        client_secret,
        private_key,
        client_id_metadata_url: raw.client_id_metadata_url,
        grant,
        redirect_port: raw.redirect_port.unwrap_or(0),
        token_file: std::path::PathBuf::new(),
        issuer,
        assertion,
        idp,
        sealed: None,
        written: true,
    })
}

/// `idp_token_endpoint` and `idp_client_id`: only with `grant = "identity_assertion"`, which needs
/// the endpoint (https, or http on this machine).
fn identity_provider(
    file: &Path,
    key: &dyn Fn(&str) -> String,
    wanted: bool,
    (endpoint, client_id): (Option<String>, Option<String>),
) -> Result<Option<crate::config::IdentityProvider>, ConfigError> {
    match (wanted, endpoint) {
        (false, None) if client_id.is_none() => Ok(None),
        (false, _) => Err(ConfigError::invalid(
            file,
            key("idp_token_endpoint"),
            "is set, but the grant is not identity_assertion",
            "set grant = \"identity_assertion\", or leave idp_token_endpoint and idp_client_id out",
        )),
        (true, None) => Err(ConfigError::invalid(
            file,
            key("idp_token_endpoint"),
            "missing: grant = \"identity_assertion\" exchanges the ID token at the identity provider's token endpoint",
            "set idp_token_endpoint = \"https://idp.example.com/oauth2/token\"",
        )),
        (true, Some(text)) => {
            let url = url::Url::parse(&text).ok().filter(|u| {
                u.scheme() == "https" || (u.scheme() == "http" && crate::config::is_loopback(u))
            });
            let Some(token_endpoint) = url else {
                return Err(ConfigError::invalid(
                    file,
                    key("idp_token_endpoint"),
                    format!("`{text}` is not an https URL (http only on this machine)"),
                    "name the identity provider's token endpoint, e.g. \"https://idp.example.com/oauth2/token\"",
                ));
            };
            Ok(Some(crate::config::IdentityProvider {
                token_endpoint,
                client_id,
            }))
        }
    }
}

/// `oauth.issuer`: an https URL (http only for a server on this machine) without query or
/// fragment, as RFC 8414 §2 defines an issuer identifier.
fn issuer(file: &Path, key: &str, text: &str) -> Result<url::Url, ConfigError> {
    let url = url::Url::parse(text).ok().filter(|u| {
        u.host_str().is_some()
            && u.query().is_none()
            && u.fragment().is_none()
            && (u.scheme() == "https"
                || (u.scheme() == "http" && super::super::transport::is_loopback(u)))
    });
    url.ok_or_else(|| {
        ConfigError::invalid(
            file,
            key,
            format!("`{text}` is not an https URL without query or fragment (http only on loopback)"),
            "write the authorization server's issuer identifier as its metadata names it, e.g. issuer = \"https://auth.example.com\"",
        )
    })
}

/// Why `name: value` cannot be an HTTP header, if it cannot.
fn header_problem(name: &str, value: &str) -> Option<String> {
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if name.is_empty() || !name.chars().all(token) {
        return Some(format!("`{name}` is not a valid header name"));
    }
    if value.chars().any(|c| c == '\r' || c == '\n' || c == '\0') {
        return Some("its value has a line break".into());
    }
    let owned = ["mcp-session-id", "mcp-protocol-version", "last-event-id"];
    if owned.contains(&name.to_ascii_lowercase().as_str()) {
        return Some(format!("`{name}` is set by mcpmux itself"));
    }
    None
}

fn readable(file: &Path, key: String, path: &Path) -> Result<(), ConfigError> {
    std::fs::metadata(path).map(|_| ()).map_err(|e| {
        ConfigError::invalid(
            file,
            key,
            format!("cannot read {}: {e}", path.display()),
            "point it at an existing PEM file (relative paths start at the config file's directory)",
        )
    })
}

/// A command with a `/` in it is a path, relative to the config file's directory; a bare name
/// is looked up on PATH when started.
fn program(base_dir: &Path, command: String) -> String {
    if command.contains('/') && Path::new(&command).is_relative() {
        base_dir.join(&command).to_string_lossy().into_owned()
    } else {
        command
    }
}
