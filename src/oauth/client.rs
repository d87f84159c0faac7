//! Who mcpmux is to an authorization server, in the spec's order: the client configured for the
//! upstream (pre-registered), else its Client ID Metadata Document URL when the server accepts
//! those, else a client registered dynamically (RFC 7591) and remembered per server.

use serde::Deserialize;
use url::Url;

use super::discovery::AuthServerMetadata;
use super::identity::{Assertion, AuthMethod, ClientIdentity};
use super::{OAuthError, redirected, secure_url, store};
use crate::config::OAuthConfig;
use crate::http_body::error_chain;

/// The configured client, if any: its id and secret (authenticating as the server prefers)
/// or its private key (signed assertions addressed to `issuer`).
pub fn configured(
    oauth: &OAuthConfig,
    metadata: &AuthServerMetadata,
    issuer: &str,
) -> Result<Option<ClientIdentity>, OAuthError> {
    let Some(client_id) = &oauth.client_id else {
        return Ok(None);
    };
    // Configured credentials go to the configured issuer only (config validation requires one;
    // this holds whatever built the config).
    if (oauth.private_key.is_some() || oauth.client_secret.is_some()) && oauth.issuer.is_none() {
        return Err(OAuthError::new(
            "a client secret or private key is configured without oauth.issuer; set issuer to the authorization server that registered this client",
        ));
    }
    if let Some(key) = &oauth.private_key {
        return Ok(Some(ClientIdentity {
            client_id: client_id.clone(),
            client_secret: None,
            auth: AuthMethod::PrivateKeyJwt,
            assertion: Some(Assertion {
                key_file: key.file.clone(),
                algorithm: key.algorithm.clone(),
                audience: metadata.issuer.clone().unwrap_or_else(|| issuer.to_owned()),
            }),
        }));
    }
    let secret = oauth
        .client_secret
        .as_ref()
        .map(|source| {
            source
                .read()
                .map_err(|why| OAuthError::new(format!("cannot read the client secret: {why}")))
        })
        .transpose()?;
    let supports = |m: AuthMethod| {
        metadata
            .token_endpoint_auth_methods_supported
            .iter()
            .any(|s| s == m.name())
    };
    let auth = match &secret {
        None => AuthMethod::None,
        Some(_)
            if supports(AuthMethod::ClientSecretPost)
                && !supports(AuthMethod::ClientSecretBasic) =>
        {
            AuthMethod::ClientSecretPost
        }
        Some(_) => AuthMethod::ClientSecretBasic,
    };
    Ok(Some(ClientIdentity {
        client_id: client_id.clone(),
        client_secret: secret,
        auth,
        assertion: None,
    }))
}

/// The client mcpmux signs in as with the server `issuer` describes by `metadata`.
pub async fn identify(
    http: &reqwest::Client,
    oauth: &OAuthConfig,
    metadata: &AuthServerMetadata,
    issuer: &Url,
    redirect_uri: &str,
) -> Result<ClientIdentity, OAuthError> {
    if let Some(client) = configured(oauth, metadata, issuer.as_str())? {
        return Ok(client);
    }
    if let (true, Some(url)) = (
        metadata.client_id_metadata_document_supported,
        &oauth.client_id_metadata_url,
    ) {
        return Ok(ClientIdentity {
            client_id: url.clone(),
            client_secret: None,
            auth: AuthMethod::None,
            assertion: None,
        });
    }
    let Some(endpoint) = &metadata.registration_endpoint else {
        return Err(OAuthError::new(format!(
            "its authorization server {issuer} offers no dynamic client registration; register mcpmux there and set client_id (and client_secret_env or client_secret_file) in [upstreams.NAME.oauth]"
        )));
    };
    let remembered = store::client_file(&oauth.token_file, issuer.as_str());
    if let Some(client) = store::read_client(&remembered) {
        return Ok(client);
    }
    let client = register(http, endpoint, metadata, redirect_uri).await?;
    if let Err(e) = store::write_client(&remembered, &client) {
        tracing::warn!(path = %remembered.display(), error = %e, "Cannot remember the registered OAuth client; it will be registered again next time.");
    }
    Ok(client)
}

#[derive(Deserialize)]
struct Registered {
    client_id: String,
    client_secret: Option<String>,
    token_endpoint_auth_method: Option<String>,
}

/// Dynamic Client Registration (RFC 7591) of mcpmux as a native client with a loopback redirect.
async fn register(
    http: &reqwest::Client,
    endpoint: &str,
    metadata: &AuthServerMetadata,
    redirect_uri: &str,
) -> Result<ClientIdentity, OAuthError> {
    let supported = &metadata.token_endpoint_auth_methods_supported;
    let wanted = if supported.is_empty() || supported.iter().any(|m| m == "none") {
        AuthMethod::None
    } else if supported.iter().any(|m| m == "client_secret_basic") {
        AuthMethod::ClientSecretBasic
    } else {
        AuthMethod::ClientSecretPost
    };
    // A daemon on the person's machine with a loopback redirect: a native application
    // (OpenID Connect Registration `application_type`, which MCP asks clients to give).
    // A redirect to this machine is a native app's (RFC 8252); one to mcpmux's own sign-in
    // page, a web application's.
    let native = url::Url::parse(redirect_uri).is_ok_and(|u| crate::config::is_loopback(&u));
    let body = serde_json::json!({
        "application_type": if native { "native" } else { "web" },
        "client_name": "mcpmux",
        "redirect_uris": [redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": wanted.name(),
    });
    let url = secure_url("its registration endpoint", endpoint)?;
    let response = http.post(url).json(&body).send().await.map_err(|e| {
        OAuthError::new(format!(
            "cannot reach its registration endpoint {endpoint}: {}",
            error_chain(&e)
        ))
    })?;
    if let Some(e) = redirected("its registration endpoint", endpoint, &response) {
        return Err(e);
    }
    let status = response.status();
    let what = format!("the answer of its registration endpoint {endpoint}");
    let body = crate::http_body::read_bounded(response, crate::http_body::DOCUMENT_LIMIT, &what)
        .await
        .map_err(|e| OAuthError::new(e.to_string()))?;
    let text = String::from_utf8_lossy(&body);
    if !status.is_success() {
        return Err(OAuthError::new(format!(
            "its registration endpoint {endpoint} refused mcpmux: HTTP {status}: {}",
            text.chars().take(300).collect::<String>()
        )));
    }
    let registered: Registered = serde_json::from_str(&text).map_err(|e| {
        OAuthError::new(format!(
            "its registration endpoint {endpoint} answered something other than a client: {e}"
        ))
    })?;
    let auth = registered
        .token_endpoint_auth_method
        .as_deref()
        .and_then(AuthMethod::parse)
        .unwrap_or(if registered.client_secret.is_some() {
            AuthMethod::ClientSecretBasic
        } else {
            AuthMethod::None
        });
    Ok(ClientIdentity {
        client_id: registered.client_id,
        client_secret: registered.client_secret,
        auth,
        assertion: None,
    })
}
