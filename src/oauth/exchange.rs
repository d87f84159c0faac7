//! Token exchange (RFC 8693) for upstreams with `grant = "token_exchange"`: a caller's own JWT,
//! exchanged at the configured authorization server (`oauth.issuer`, its token endpoint from its
//! RFC 8414 metadata, mcpmux authenticating as its configured client) for an access token whose
//! audience is the upstream (RFC 8707 `resource`). A token the server answers for another
//! audience is refused: a JWT whose `aud` does not name the upstream never goes to it.
//!
//! And enterprise-managed authorization's first step ([`id_jag`]): an ID token exchanged at the
//! identity provider for an ID-JAG naming the upstream's authorization server.

use base64::Engine;
use url::Url;

use super::OAuthError;
use super::client;
use super::discovery::server_metadata;
use super::token::{Grant, now};
use crate::config::OAuthConfig;

const GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";
const JWT_TYPE: &str = "urn:ietf:params:oauth:token-type:jwt";
const ACCESS_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:access_token";

/// What an exchange answered: the upstream's access token and when it expires (seconds since
/// the epoch; `None`: the server did not say).
pub struct Exchanged {
    pub access_token: String,
    pub expires_at: Option<u64>,
}

impl std::fmt::Debug for Exchanged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Exchanged")
            .field("expires_at", &self.expires_at)
            .finish_non_exhaustive()
    }
}

/// Exchanges `subject_token` (a caller's JWT) for a token for `resource` (the upstream's URL).
pub async fn exchange(
    http: &reqwest::Client,
    oauth: &OAuthConfig,
    resource: &Url,
    subject_token: &str,
) -> Result<Exchanged, OAuthError> {
    let Some(issuer) = &oauth.issuer else {
        return Err(OAuthError::new(
            "token exchange needs oauth.issuer, the server that exchanges",
        ));
    };
    let metadata = server_metadata(http, issuer, true).await?.ok_or_else(|| {
        OAuthError::new(format!(
            "the authorization server {issuer} publishes no metadata (RFC 8414), so its token endpoint is unknown"
        ))
    })?;
    let token_endpoint = metadata.token_endpoint.clone().ok_or_else(|| {
        OAuthError::new(format!(
            "the authorization server {issuer} names no token endpoint"
        ))
    })?;
    let client = client::configured(oauth, &metadata, issuer.as_str().trim_end_matches('/'))?
        .ok_or_else(|| OAuthError::new("token exchange needs oauth.client_id"))?;
    let grant = Grant {
        token_endpoint: &token_endpoint,
        client: &client,
        resource: resource.as_str(),
        scope: None,
        dpop: None,
    };
    let form = vec![
        ("grant_type", GRANT_TYPE.to_owned()),
        ("subject_token", subject_token.to_owned()),
        ("subject_token_type", JWT_TYPE.to_owned()),
        ("requested_token_type", ACCESS_TOKEN_TYPE.to_owned()),
    ];
    let tokens = grant.request(http, form, None).await?;
    for_audience(&tokens.access_token, resource)?;
    Ok(Exchanged {
        access_token: tokens.access_token,
        expires_at: tokens.expires_at.or(Some(now() + 300)),
    })
}

/// Refuses a JWT whose `aud` does not name `resource` (or names nothing); an opaque token is
/// the server's to scope.
fn for_audience(token: &str, resource: &Url) -> Result<(), OAuthError> {
    let mut parts = token.split('.');
    let (Some(_), Some(payload), Some(_), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Ok(());
    };
    let Some(claims) = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()
        .and_then(|bytes| serde_json::from_slice::<serde_json::Value>(&bytes).ok())
    else {
        return Ok(());
    };
    let wanted = resource.as_str().trim_end_matches('/');
    let names = |aud: &str| aud.trim_end_matches('/') == wanted;
    let ok = match &claims["aud"] {
        serde_json::Value::String(aud) => names(aud),
        serde_json::Value::Array(list) => list.iter().filter_map(|a| a.as_str()).any(names),
        _ => false,
    };
    if ok {
        return Ok(());
    }
    Err(OAuthError::new(format!(
        "the token exchange answered a token for {}, not for {wanted}: refused, it never goes to the upstream",
        claims["aud"]
    )))
}

const ID_TOKEN_TYPE: &str = "urn:ietf:params:oauth:token-type:id_token";
const ID_JAG_TYPE: &str = "urn:ietf:params:oauth:token-type:id-jag";

/// Enterprise-managed authorization's first step (the MCP `ext-auth` extension): the identity
/// token `id_token` exchanged at the identity provider `idp` for an Identity Assertion JWT
/// Authorization Grant whose audience is the upstream's authorization server (`audience`, its
/// issuer) and whose resource is the upstream (`resource`). The ID-JAG is a credential: it goes
/// to that authorization server only, and is never logged.
pub async fn id_jag(
    http: &reqwest::Client,
    idp: Option<&crate::config::IdentityProvider>,
    (id_token, audience, resource): (&str, &str, &str),
    scope: Option<&str>,
) -> Result<String, OAuthError> {
    let Some(idp) = idp else {
        return Err(OAuthError::new(
            "identity_assertion needs oauth.idp_token_endpoint",
        ));
    };
    let endpoint = idp.token_endpoint.as_str();
    let mut form = vec![
        ("grant_type", GRANT_TYPE),
        ("subject_token", id_token),
        ("subject_token_type", ID_TOKEN_TYPE),
        ("requested_token_type", ID_JAG_TYPE),
        ("audience", audience),
        ("resource", resource),
    ];
    if let Some(client_id) = &idp.client_id {
        form.push(("client_id", client_id));
    }
    if let Some(scope) = scope {
        form.push(("scope", scope));
    }
    let response = http
        .post(idp.token_endpoint.clone())
        .header(reqwest::header::ACCEPT, "application/json")
        .form(&form)
        .send()
        .await
        .map_err(|e| {
            OAuthError::new(format!(
                "cannot reach the identity provider's token endpoint {endpoint}: {}",
                crate::http_body::error_chain(&e)
            ))
        })?;
    if let Some(e) = super::redirected(
        "the identity provider's token endpoint",
        endpoint,
        &response,
    ) {
        return Err(e);
    }
    let status = response.status();
    let what = format!("the answer of the identity provider's token endpoint {endpoint}");
    let body = crate::http_body::read_bounded(response, crate::http_body::DOCUMENT_LIMIT, &what)
        .await
        .map_err(|e| OAuthError::new(e.to_string()))?;
    jag_of(endpoint, status, &body)
}

/// The ID-JAG in an identity provider's answer, or why there is none.
fn jag_of(endpoint: &str, status: reqwest::StatusCode, body: &[u8]) -> Result<String, OAuthError> {
    #[derive(serde::Deserialize)]
    struct Answer {
        access_token: Option<String>,
        issued_token_type: Option<String>,
        error: Option<String>,
        error_description: Option<String>,
    }
    let answer: Answer = serde_json::from_slice(body).map_err(|e| {
        OAuthError::new(format!(
            "the identity provider's token endpoint {endpoint} answered HTTP {status}, not JSON: {e}"
        ))
    })?;
    match answer {
        Answer {
            access_token: Some(jag),
            issued_token_type: Some(kind),
            ..
        } if status.is_success() && kind == ID_JAG_TYPE => Ok(jag),
        Answer {
            error: Some(error),
            error_description,
            ..
        } => Err(OAuthError::new(format!(
            "the identity provider {endpoint} refused to exchange the identity token: {error} {}",
            error_description.unwrap_or_default()
        ))),
        Answer {
            issued_token_type, ..
        } => Err(OAuthError::new(format!(
            "the identity provider {endpoint} answered HTTP {status} with a token of type {}, not an ID-JAG ({ID_JAG_TYPE})",
            issued_token_type.as_deref().unwrap_or("(none)")
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jwt(claims: serde_json::Value) -> String {
        let b64 = |v: &serde_json::Value| {
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(v.to_string())
        };
        format!(
            "{}.{}.sig",
            b64(&serde_json::json!({"alg": "none"})),
            b64(&claims)
        )
    }

    #[test]
    fn only_a_token_for_the_upstream_passes() {
        let resource = Url::parse("https://mcp.example.com/mcp").unwrap_or_else(|e| panic!("{e}"));
        let ok = |claims| for_audience(&jwt(claims), &resource);
        assert!(ok(serde_json::json!({"aud": "https://mcp.example.com/mcp"})).is_ok());
        assert!(ok(serde_json::json!({"aud": ["x", "https://mcp.example.com/mcp/"]})).is_ok());
        let wrong = ok(serde_json::json!({"aud": "https://other.example.com/mcp"}));
        assert!(wrong.is_err_and(|e| e.to_string().contains("other.example.com")));
        assert!(ok(serde_json::json!({"sub": "alice"})).is_err());
        // An opaque token is the server's to scope.
        assert!(for_audience("opaque-token", &resource).is_ok());
    }
}
