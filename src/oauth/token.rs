//! The authorization code flow's pieces (PKCE with S256, `state`, the authorization URL with
//! `resource`) and the token endpoint: exchanging a code, refreshing (rotation honoured), and the
//! client credentials grant, each authenticated as the client's method says.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rand::RngCore;
use serde::Deserialize;
use sha2::Digest;
use url::Url;

use super::identity::{AuthMethod, ClientIdentity};
use super::{OAuthError, TokenFile, redirected, secure_url};
use crate::config::OAuthConfig;
use crate::http_body::error_chain;

/// How long before its expiry an access token is refreshed: a minute, or a third of its
/// lifetime when it lives less than three minutes.
const REFRESH_AHEAD: Duration = Duration::from_secs(60);

fn margin(tokens: &TokenFile) -> u64 {
    let lifetime = tokens
        .expires_at
        .map_or(0, |at| at.saturating_sub(tokens.obtained_at));
    (lifetime / 3).clamp(1, REFRESH_AHEAD.as_secs())
}

/// A PKCE verifier and its S256 challenge (RFC 7636).
pub struct Pkce {
    pub verifier: String,
    pub challenge: String,
}

impl Pkce {
    pub fn new() -> Self {
        Self::of(random_text(32))
    }

    /// The pair of a verifier made before (a flow another replica began).
    pub fn of(verifier: String) -> Self {
        let challenge = URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(verifier.as_bytes()));
        Self {
            verifier,
            challenge,
        }
    }
}

/// `bytes` random bytes as URL-safe text (for PKCE verifiers and `state`).
pub fn random_text(bytes: usize) -> String {
    let mut buf = vec![0u8; bytes];
    rand::rng().fill_bytes(&mut buf);
    URL_SAFE_NO_PAD.encode(buf)
}

/// What the authorization URL carries.
pub struct Authorize<'a> {
    pub endpoint: &'a str,
    pub client: &'a ClientIdentity,
    pub redirect_uri: &'a str,
    pub challenge: &'a str,
    pub state: &'a str,
    pub scope: Option<&'a str>,
    pub resource: &'a str,
}

impl Authorize<'_> {
    pub fn url(&self) -> Result<Url, OAuthError> {
        let mut url = Url::parse(self.endpoint).map_err(|e| {
            OAuthError::new(format!(
                "its authorization endpoint `{}` is not a URL: {e}",
                self.endpoint
            ))
        })?;
        {
            let mut query = url.query_pairs_mut();
            query
                .append_pair("response_type", "code")
                .append_pair("client_id", &self.client.client_id)
                .append_pair("redirect_uri", self.redirect_uri)
                .append_pair("code_challenge", self.challenge)
                .append_pair("code_challenge_method", "S256")
                .append_pair("state", self.state)
                .append_pair("resource", self.resource);
            if let Some(scope) = self.scope {
                query.append_pair("scope", scope);
            }
        }
        Ok(url)
    }
}

#[derive(Deserialize)]
struct TokenResponse {
    access_token: String,
    token_type: Option<String>,
    expires_in: Option<u64>,
    refresh_token: Option<String>,
    scope: Option<String>,
}

#[derive(Deserialize)]
struct TokenRefusal {
    error: String,
    error_description: Option<String>,
}

/// Why the token endpoint refused, or `None` when it answered tokens.
pub struct Grant<'a> {
    pub token_endpoint: &'a str,
    pub client: &'a ClientIdentity,
    pub resource: &'a str,
    /// The scopes asked for, to remember when the server does not say which it granted.
    pub scope: Option<&'a str>,
    /// The key its tokens are bound to (DPoP), when the server takes proofs.
    pub dpop: Option<&'a super::dpop::DpopKey>,
}

impl Grant<'_> {
    /// A client assertion (RFC 7523 §2.2) for this request, signed with the client's key.
    fn assertion(&self) -> Result<String, OAuthError> {
        let Some(assertion) = &self.client.assertion else {
            return Err(OAuthError::new("private_key_jwt without a key"));
        };
        let pem = std::fs::read(&assertion.key_file).map_err(|e| {
            OAuthError::new(format!(
                "cannot read the private key {}: {e}",
                assertion.key_file.display()
            ))
        })?;
        let algorithm: jsonwebtoken::Algorithm = assertion.algorithm.parse().map_err(|_| {
            OAuthError::new(format!(
                "`{}` is not a signing algorithm",
                assertion.algorithm
            ))
        })?;
        let key = match algorithm {
            jsonwebtoken::Algorithm::ES256 | jsonwebtoken::Algorithm::ES384 => {
                jsonwebtoken::EncodingKey::from_ec_pem(&pem)
            }
            jsonwebtoken::Algorithm::EdDSA => jsonwebtoken::EncodingKey::from_ed_pem(&pem),
            _ => jsonwebtoken::EncodingKey::from_rsa_pem(&pem),
        }
        .map_err(|e| {
            OAuthError::new(format!(
                "the private key {} is not a PEM {} key: {e}",
                assertion.key_file.display(),
                assertion.algorithm
            ))
        })?;
        let now = now();
        let claims = serde_json::json!({
            "iss": self.client.client_id,
            "sub": self.client.client_id,
            "aud": assertion.audience,
            "iat": now,
            "exp": now + 300,
            "jti": random_text(16),
        });
        jsonwebtoken::encode(&jsonwebtoken::Header::new(algorithm), &claims, &key)
            .map_err(|e| OAuthError::new(format!("cannot sign the client assertion: {e}")))
    }

    /// POSTs the grant `form` (with a DPoP proof, and once more with the server's nonce when it
    /// asks for one) and returns the tokens it answered.
    pub async fn request(
        &self,
        http: &reqwest::Client,
        mut form: Vec<(&'static str, String)>,
        previous_refresh: Option<String>,
    ) -> Result<TokenFile, OAuthError> {
        form.push(("resource", self.resource.to_owned()));
        let url = secure_url("its token endpoint", self.token_endpoint)?;
        self.authenticate(&mut form)?;
        let mut nonce = None;
        let response = loop {
            let mut request = http.post(url.clone());
            if let AuthMethod::ClientSecretBasic = self.client.auth {
                request = request.basic_auth(
                    &self.client.client_id,
                    Some(self.client.client_secret.clone().unwrap_or_default()),
                );
            }
            if let Some(key) = self.dpop {
                request = request.header("DPoP", key.proof("POST", &url, None, nonce.as_deref())?);
            }
            let response = self.send(request, &form).await?;
            // RFC 9449 §8: a server that wants a nonce says so once; the request goes again.
            let asked = (response.status() == reqwest::StatusCode::BAD_REQUEST && nonce.is_none())
                .then(|| super::dpop::nonce_of(response.headers()))
                .flatten()
                .filter(|_| self.dpop.is_some());
            match asked {
                Some(asked) => nonce = Some(asked),
                None => break response,
            }
        };
        self.tokens(response, previous_refresh).await
    }

    /// The client's authentication that goes in the form (all but Basic, which is a header).
    fn authenticate(&self, form: &mut Vec<(&'static str, String)>) -> Result<(), OAuthError> {
        match self.client.auth {
            AuthMethod::ClientSecretBasic => {}
            AuthMethod::ClientSecretPost => {
                form.push(("client_id", self.client.client_id.clone()));
                form.push((
                    "client_secret",
                    self.client.client_secret.clone().unwrap_or_default(),
                ));
            }
            AuthMethod::None => form.push(("client_id", self.client.client_id.clone())),
            AuthMethod::PrivateKeyJwt => {
                form.push(("client_id", self.client.client_id.clone()));
                form.push((
                    "client_assertion_type",
                    "urn:ietf:params:oauth:client-assertion-type:jwt-bearer".to_owned(),
                ));
                form.push(("client_assertion", self.assertion()?));
            }
        }
        Ok(())
    }

    /// Sends one token request.
    async fn send(
        &self,
        request: reqwest::RequestBuilder,
        form: &[(&'static str, String)],
    ) -> Result<reqwest::Response, OAuthError> {
        let endpoint = self.token_endpoint;
        let response = request
            .header(reqwest::header::ACCEPT, "application/json")
            .form(form)
            .send()
            .await
            .map_err(|e| {
                OAuthError::new(format!(
                    "cannot reach its token endpoint {endpoint}: {}",
                    error_chain(&e)
                ))
            })?;
        match redirected("its token endpoint", endpoint, &response) {
            Some(e) => Err(e),
            None => Ok(response),
        }
    }

    /// The tokens a token endpoint answered, or why it refused.
    async fn tokens(
        &self,
        response: reqwest::Response,
        previous_refresh: Option<String>,
    ) -> Result<TokenFile, OAuthError> {
        let endpoint = self.token_endpoint;
        let status = response.status();
        let what = format!("the answer of its token endpoint {endpoint}");
        let body =
            crate::http_body::read_bounded(response, crate::http_body::DOCUMENT_LIMIT, &what)
                .await
                .map_err(|e| OAuthError::new(e.to_string()))?;
        if !status.is_success() {
            let why = match serde_json::from_slice::<TokenRefusal>(&body) {
                Ok(refusal) => match refusal.error_description {
                    Some(d) => format!("{} ({d})", refusal.error),
                    None => refusal.error,
                },
                Err(_) => format!("HTTP {status}"),
            };
            let refusal = format!("its token endpoint {endpoint} refused: {why}");
            return Err(if status.is_client_error() {
                OAuthError::refused(refusal)
            } else {
                OAuthError::new(refusal)
            });
        }
        let tokens: TokenResponse = serde_json::from_slice(&body).map_err(|e| {
            OAuthError::new(format!(
                "its token endpoint {endpoint} answered something other than tokens: {e}"
            ))
        })?;
        Ok(TokenFile {
            access_token: tokens.access_token,
            // A server that rotates refresh tokens sends a new one; one that does not keeps
            // the old one valid.
            refresh_token: tokens.refresh_token.or(previous_refresh),
            expires_at: tokens.expires_in.map(|s| now() + s),
            obtained_at: now(),
            scope: tokens.scope.or(self.scope.map(str::to_owned)),
            token_endpoint: endpoint.to_owned(),
            resource: self.resource.to_owned(),
            client: self.client.clone(),
            // A token the server bound to mcpmux's key goes with the key.
            dpop_key: (self.dpop)
                .filter(|_| {
                    tokens
                        .token_type
                        .as_deref()
                        .is_some_and(|t| t.eq_ignore_ascii_case("dpop"))
                })
                .map(super::dpop::DpopKey::to_text),
            token_type: tokens.token_type,
            refresh_refused: None,
        })
    }
}

/// Seconds since the Unix epoch.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// How long until the tokens of `oauth` are due for a refresh; `None` when they never will be
/// (no expiry, no refresh token, no file).
pub fn refresh_wait(oauth: &OAuthConfig) -> Option<Duration> {
    let tokens = TokenFile::load(oauth)?;
    tokens.refresh_token.as_ref()?;
    let due = tokens.expires_at?.saturating_sub(margin(&tokens));
    Some(Duration::from_secs(due.saturating_sub(now())))
}

/// The tokens of `oauth` and their refresh token, when they are due for a refresh (or `force`);
/// an error when another replica found that refresh token refused (none tries it again).
fn refreshable(
    oauth: &OAuthConfig,
    force: bool,
) -> Result<Option<(TokenFile, String)>, OAuthError> {
    let Some(tokens) = TokenFile::load(oauth) else {
        return Ok(None);
    };
    let due = tokens
        .expires_at
        .is_some_and(|at| at <= now() + margin(&tokens));
    let Some(refresh) = tokens.refresh_token.clone().filter(|_| due || force) else {
        return Ok(None);
    };
    match &tokens.refresh_refused {
        Some(why) => Err(OAuthError::refused(format!(
            "{why} (found by the replica that tried it; signing in again replaces these tokens)"
        ))),
        None => Ok(Some((tokens, refresh))),
    }
}

/// Refreshes the tokens of `oauth` when the access token expires within a minute (or
/// `force`, after the server refused it) and a refresh token is there. `Ok(true)`: refreshed;
/// `Ok(false)`: nothing to do; an error: the refresh was refused (sign in again).
pub async fn refresh_if_due(
    http: &reqwest::Client,
    oauth: &OAuthConfig,
    force: bool,
) -> Result<bool, OAuthError> {
    let Some(found) = refreshable(oauth, force)? else {
        return Ok(false);
    };
    // Replicas sharing the tokens refresh them once: under the fleet's lock, read again (another
    // replica may have refreshed them meanwhile). Without the lock (the store is unreachable)
    // none is refreshed: replicas refreshing one rotating refresh token each would have the
    // server revoke them all; the next try is a second later.
    let (guard, (tokens, refresh)) = match super::shelf::shelf() {
        None => (None, found),
        Some(shelf) => {
            let Some(guard) = shelf.lock(&oauth.token_file).await else {
                tokio::time::sleep(Duration::from_secs(1)).await;
                return Ok(false);
            };
            match refreshable(oauth, force)? {
                Some(again) => (Some(guard), again),
                None => return Ok(false),
            }
        }
    };
    let dpop = tokens.dpop();
    let grant = Grant {
        token_endpoint: &tokens.token_endpoint,
        client: &tokens.client,
        resource: &tokens.resource,
        scope: tokens.scope.as_deref(),
        dpop: dpop.as_ref(),
    };
    let form = vec![
        ("grant_type", "refresh_token".to_owned()),
        ("refresh_token", refresh.clone()),
    ];
    let fresh = match grant.request(http, form, Some(refresh)).await {
        Ok(fresh) => fresh,
        Err(e) => {
            // Replicas sharing the tokens learn the refusal with them: none tries again.
            if let Some(guard) = guard.filter(|_| e.is_refusal()) {
                let refused = TokenFile {
                    refresh_refused: Some(e.to_string()),
                    ..tokens
                };
                if let Ok(text) = refused.write_copy(oauth) {
                    let _ = guard.store(&text).await;
                }
            }
            return Err(e);
        }
    };
    let stored = match guard {
        Some(guard) => match fresh.write_copy(oauth) {
            Ok(text) => guard.store(&text).await,
            Err(e) => Err(e),
        },
        None => fresh.save(oauth),
    };
    stored.map_err(|e| {
        OAuthError::new(format!(
            "cannot store the refreshed tokens in {}: {e}",
            oauth.token_file.display()
        ))
    })?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pkce_challenge_is_the_verifiers_s256() {
        let pkce = Pkce::new();
        assert_eq!(pkce.verifier.len(), 43);
        let expected = URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(pkce.verifier.as_bytes()));
        assert_eq!(pkce.challenge, expected);
        assert_ne!(Pkce::new().verifier, pkce.verifier);
    }
}
