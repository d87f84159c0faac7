//! Finding the authorization server of an MCP server: its Protected Resource Metadata (RFC
//! 9728: the challenge's `resource_metadata`, else the path-aware well-known URL, else the root
//! one), then the authorization server's metadata (RFC 8414 with path insertion, then OpenID
//! Connect discovery in both forms). A server with no resource metadata is a 2025-03-26 one: its
//! origin is the authorization server, and without metadata the default endpoints apply.
//!
//! What is checked on the way: the authorization server is the one the config names, when it
//! names one (configured credentials go nowhere else); its metadata names the URL it was fetched
//! for as its `issuer` (RFC 8414 §3.3); it and its endpoints are https (http only on this
//! machine); a redirect is an error, never followed.

use serde::Deserialize;
use url::Url;

use super::{Challenge, OAuthError, redirected, same_issuer, secure_url};
use crate::http_body::error_chain;

/// What sign-in needs to know about the server and its authorization server.
#[derive(Debug, Clone)]
pub struct Discovered {
    /// The `resource` parameter (RFC 8707) every authorization and token request carries.
    pub resource: String,
    /// The authorization server, as the resource metadata names it (or the server's origin).
    pub issuer: Url,
    pub metadata: AuthServerMetadata,
    /// The resource metadata's `scopes_supported`.
    pub resource_scopes: Option<Vec<String>>,
}

/// The authorization server metadata fields sign-in reads.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct AuthServerMetadata {
    pub issuer: Option<String>,
    pub authorization_endpoint: Option<String>,
    pub token_endpoint: Option<String>,
    pub registration_endpoint: Option<String>,
    #[serde(default)]
    pub code_challenge_methods_supported: Vec<String>,
    #[serde(default)]
    pub token_endpoint_auth_methods_supported: Vec<String>,
    #[serde(default)]
    pub scopes_supported: Vec<String>,
    #[serde(default)]
    pub client_id_metadata_document_supported: bool,
    /// Whether its authorization responses carry `iss` (RFC 9207): then one without it is refused.
    #[serde(default)]
    pub authorization_response_iss_parameter_supported: bool,
    /// The algorithms it takes DPoP proofs signed with (RFC 9449 §5.1): with ES256, mcpmux binds
    /// its tokens to a key of its own.
    #[serde(default)]
    pub dpop_signing_alg_values_supported: Vec<String>,
}

impl AuthServerMetadata {
    /// A key to bind this server's tokens to (DPoP), when it takes proofs mcpmux can sign.
    pub fn dpop_key(&self) -> Result<Option<super::dpop::DpopKey>, super::OAuthError> {
        let takes =
            (self.dpop_signing_alg_values_supported.iter()).any(|a| a == super::dpop::ALGORITHM);
        takes.then(super::dpop::DpopKey::generate).transpose()
    }
}

#[derive(Debug, Deserialize)]
struct ResourceMetadata {
    resource: String,
    #[serde(default)]
    authorization_servers: Vec<String>,
    scopes_supported: Option<Vec<String>>,
}

/// Discovers the authorization server of the MCP server at `server`, given its challenge;
/// `trusted` is the issuer the config names, which the server must point at.
// Long: the discovery steps in the order the MCP authorization spec gives them (resource metadata,
// its fallbacks, the authorization server's metadata, the issuer check); each step uses what the
// one before found.
pub async fn discover(
    http: &reqwest::Client,
    server: &Url,
    challenge: &Challenge,
    trusted: Option<&Url>,
) -> Result<Discovered, OAuthError> {
    let prm = resource_metadata(http, server, challenge).await?;
    // Whether the server names its authorization server (else, 2025-03-26, its origin is one).
    let named = prm.is_some();
    let (issuer, resource, resource_scopes) = match prm {
        Some(prm) => {
            let resource = Url::parse(&prm.resource).map_err(|e| {
                OAuthError::new(format!(
                    "its resource metadata names `{}` as the resource, which is not a URL: {e}",
                    prm.resource
                ))
            })?;
            if !covers(&resource, server) {
                return Err(OAuthError::new(format!(
                    "its resource metadata is for `{}`, not for {server}; mcpmux refuses to sign in to a server on behalf of another resource",
                    prm.resource
                )));
            }
            let first = prm.authorization_servers.first().ok_or_else(|| {
                OAuthError::new("its resource metadata names no authorization server")
            })?;
            let issuer = Url::parse(first).map_err(|e| {
                OAuthError::new(format!(
                    "its authorization server `{first}` is not a URL: {e}"
                ))
            })?;
            // With one configured, the configured issuer may be any of those listed.
            let issuer = match trusted {
                Some(trusted) => (prm.authorization_servers.iter())
                    .find(|s| same_issuer(s, trusted.as_str()))
                    .and_then(|s| Url::parse(s).ok())
                    .unwrap_or(issuer),
                None => issuer,
            };
            (issuer, prm.resource, prm.scopes_supported)
        }
        None => {
            let mut origin = server.clone();
            origin.set_path("/");
            origin.set_query(None);
            (origin, canonical(server), None)
        }
    };
    let refused = |trusted: &Url| {
        OAuthError::new(format!(
            "it names the authorization server {issuer}, but the configured oauth.issuer is {trusted}; mcpmux signs in only with the configured issuer (its credentials go nowhere else): if the server really moved, change oauth.issuer after checking with its operator"
        ))
    };
    if let Some(trusted) = trusted.filter(|t| named && !same_issuer(issuer.as_str(), t.as_str())) {
        return Err(refused(trusted));
    }
    secure_url("its authorization server", issuer.as_str())?;
    let found = server_metadata(http, &issuer, named).await?;
    // 2025-03-26: the configured issuer is the server's origin, or the issuer its metadata names.
    if let Some(trusted) = trusted.filter(|_| !named) {
        let claimed = found.as_ref().and_then(|m| m.issuer.as_deref());
        let same = |i: &str| same_issuer(i, trusted.as_str());
        if !same(issuer.as_str()) && !claimed.is_some_and(same) {
            return Err(refused(trusted));
        }
    }
    let metadata = match found {
        Some(metadata) => metadata,
        // 2025-03-26: no metadata means the default endpoints at the authorization server's
        // origin.
        None => AuthServerMetadata {
            authorization_endpoint: Some(at(&issuer, "/authorize").into()),
            token_endpoint: Some(at(&issuer, "/token").into()),
            registration_endpoint: Some(at(&issuer, "/register").into()),
            code_challenge_methods_supported: vec!["S256".to_owned()],
            ..AuthServerMetadata::default()
        },
    };
    for (what, endpoint) in [
        (
            "its authorization endpoint",
            &metadata.authorization_endpoint,
        ),
        ("its token endpoint", &metadata.token_endpoint),
        ("its registration endpoint", &metadata.registration_endpoint),
    ] {
        if let Some(endpoint) = endpoint {
            secure_url(what, endpoint)?;
        }
    }
    if !metadata
        .code_challenge_methods_supported
        .iter()
        .any(|m| m == "S256")
    {
        return Err(OAuthError::new(format!(
            "its authorization server {issuer} does not offer PKCE with S256 (code_challenge_methods_supported), which OAuth 2.1 requires; mcpmux does not sign in without it"
        )));
    }
    Ok(Discovered {
        resource,
        issuer,
        metadata,
        resource_scopes,
    })
}

/// `path` at `base`'s origin.
fn at(base: &Url, path: &str) -> Url {
    let mut url = base.clone();
    url.set_path(path);
    url.set_query(None);
    url
}

/// The server's resource metadata: from the challenge's URL, else the well-known URLs; `None`
/// when it publishes none.
async fn resource_metadata(
    http: &reqwest::Client,
    server: &Url,
    challenge: &Challenge,
) -> Result<Option<ResourceMetadata>, OAuthError> {
    if let Some(url) = &challenge.resource_metadata {
        let url = Url::parse(url).map_err(|e| {
            OAuthError::new(format!(
                "its challenge names resource metadata at `{url}`, which is not a URL: {e}"
            ))
        })?;
        return match get_json(http, &url).await? {
            Some(prm) => Ok(Some(prm)),
            None => Err(OAuthError::new(format!(
                "its challenge names resource metadata at {url}, which is not there"
            ))),
        };
    }
    let path = server.path().trim_end_matches('/');
    let mut candidates = Vec::new();
    if !path.is_empty() {
        candidates.push(format!("/.well-known/oauth-protected-resource{path}"));
    }
    candidates.push("/.well-known/oauth-protected-resource".to_owned());
    first_published(http, server, &candidates).await
}

/// The authorization server's metadata, from the URLs the spec lists in its order; refused
/// when it names another `issuer` than the one it was fetched for (or none). Without a `named`
/// issuer (a 2025-03-26 server, whose origin stands in for one), the issuer it names must be
/// at that origin.
pub(super) async fn server_metadata(
    http: &reqwest::Client,
    issuer: &Url,
    named: bool,
) -> Result<Option<AuthServerMetadata>, OAuthError> {
    let path = issuer.path().trim_end_matches('/');
    let candidates = if path.is_empty() {
        vec![
            "/.well-known/oauth-authorization-server".to_owned(),
            "/.well-known/openid-configuration".to_owned(),
        ]
    } else {
        vec![
            format!("/.well-known/oauth-authorization-server{path}"),
            format!("/.well-known/openid-configuration{path}"),
            format!("{path}/.well-known/openid-configuration"),
        ]
    };
    for path in &candidates {
        let url = at(issuer, path);
        let Some(metadata) = get_json::<AuthServerMetadata>(http, &url).await? else {
            continue;
        };
        let at_origin =
            |claimed: &str| Url::parse(claimed).is_ok_and(|c| c.origin() == issuer.origin());
        return match &metadata.issuer {
            Some(claimed) if same_issuer(claimed, issuer.as_str()) => Ok(Some(metadata)),
            Some(claimed) if !named && at_origin(claimed) => Ok(Some(metadata)),
            Some(claimed) => Err(OAuthError::new(format!(
                "the authorization server metadata at {url} names `{claimed}` as its issuer, not {issuer} it was fetched for (RFC 8414 §3.3); mcpmux refuses metadata that speaks for another server"
            ))),
            None => Err(OAuthError::new(format!(
                "the authorization server metadata at {url} names no issuer (RFC 8414 requires it); mcpmux cannot tell which server it speaks for"
            ))),
        };
    }
    Ok(None)
}

/// The first document published at one of `paths` (in order) of `base`'s origin.
async fn first_published<T: serde::de::DeserializeOwned>(
    http: &reqwest::Client,
    base: &Url,
    paths: &[String],
) -> Result<Option<T>, OAuthError> {
    for path in paths {
        if let Some(document) = get_json(http, &at(base, path)).await? {
            return Ok(Some(document));
        }
    }
    Ok(None)
}

/// GETs `url` as JSON: `None` for a 4xx (not published there), an error for anything else
/// that is not a JSON document.
async fn get_json<T: serde::de::DeserializeOwned>(
    http: &reqwest::Client,
    url: &Url,
) -> Result<Option<T>, OAuthError> {
    let response = http
        .get(url.clone())
        .header(reqwest::header::ACCEPT, "application/json")
        .send()
        .await
        .map_err(|e| OAuthError::new(format!("cannot reach {url}: {}", error_chain(&e))))?;
    if let Some(e) = redirected("the metadata document", url.as_str(), &response) {
        return Err(e);
    }
    let status = response.status();
    if status.is_client_error() {
        return Ok(None);
    }
    if !status.is_success() {
        return Err(OAuthError::new(format!("HTTP {status} from {url}")));
    }
    let what = format!("the metadata document {url}");
    let body = crate::http_body::read_bounded(response, crate::http_body::DOCUMENT_LIMIT, &what)
        .await
        .map_err(|e| OAuthError::new(e.to_string()))?;
    serde_json::from_slice(&body).map(Some).map_err(|e| {
        OAuthError::new(format!(
            "{url} is not the metadata document it should be: {e}"
        ))
    })
}

/// Whether resource metadata for `resource` covers the server at `server`: the same origin,
/// and the resource's path a prefix of the server's (a resource may name the whole origin).
fn covers(resource: &Url, server: &Url) -> bool {
    if resource.origin() != server.origin() {
        return false;
    }
    let prefix = resource.path().trim_end_matches('/');
    let path = server.path().trim_end_matches('/');
    path == prefix || path.starts_with(&format!("{prefix}/")) || prefix.is_empty()
}

/// `url` without its fragment, as a `resource` parameter.
fn canonical(url: &Url) -> String {
    let mut url = url.clone();
    url.set_fragment(None);
    url.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> Url {
        Url::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn resource_metadata_covers_its_own_origin_and_path_prefixes_only() {
        let server = url("http://localhost:3000/mcp");
        assert!(covers(&url("http://localhost:3000/mcp"), &server));
        assert!(covers(&url("http://localhost:3000"), &server));
        assert!(covers(&url("http://localhost:3000/"), &server));
        assert!(!covers(&url("https://evil.example.com/mcp"), &server));
        assert!(!covers(&url("http://localhost:3001/mcp"), &server));
        assert!(!covers(&url("http://localhost:3000/other"), &server));
        assert!(!covers(&url("http://localhost:3000/mc"), &server));
    }
}
