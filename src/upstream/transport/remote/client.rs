//! The HTTP side of one remote upstream: one keep-alive pool (HTTP/2 where the server offers
//! it) with rustls (the platform's verifier and roots) plus configured CAs, an optional client certificate,
//! `HTTPS_PROXY`/`HTTP_PROXY`/`NO_PROXY` (never for a loopback server), redirects, and the headers every request carries — the
//! configured ones and the bearer token, read afresh at each start and never logged.
//!
//! Redirects: the MCP requests follow a few redirects **within the upstream's origin** and stop
//! at one to another origin (its 3xx is then the answer, an error naming the `Location`): the
//! configured `headers` and the bearer token are the upstream's, and reqwest would carry custom
//! headers anywhere. OAuth requests follow none at all ([`Redirects::None`]): a redirected
//! token request would carry the client's credentials where the config never named.

use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderName, HeaderValue};

use crate::config::{RemoteConfig, is_loopback};
use crate::upstream::error::StartError;

/// Most redirects followed for one request.
const MAX_REDIRECTS: usize = 5;

/// Which redirects a pool follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Redirects {
    /// Up to [`MAX_REDIRECTS`] within the origin of the first request; one to another origin
    /// is not followed.
    SameOrigin,
    /// None: a 3xx is the answer (OAuth).
    None,
}

impl Redirects {
    fn policy(self) -> reqwest::redirect::Policy {
        match self {
            Self::None => reqwest::redirect::Policy::none(),
            Self::SameOrigin => reqwest::redirect::Policy::custom(|attempt| {
                let first = attempt.previous().first().map(url::Url::origin);
                if first.is_some_and(|o| o != attempt.url().origin()) {
                    attempt.stop()
                } else if attempt.previous().len() > MAX_REDIRECTS {
                    attempt.error(format!("more than {MAX_REDIRECTS} redirects"))
                } else {
                    attempt.follow()
                }
            }),
        }
    }
}

/// An HTTP client with the upstream's TLS and proxy settings, following `redirects`, and no
/// credential.
pub fn pool(config: &RemoteConfig, redirects: Redirects) -> Result<reqwest::Client, StartError> {
    let mut builder = reqwest::Client::builder()
        .connect_timeout(config.connect_timeout)
        .redirect(redirects.policy())
        .user_agent(concat!("mcpmux/", env!("CARGO_PKG_VERSION")));
    // A server on this machine is never reached through a proxy (as Go's HTTP client decides):
    // `HTTP_PROXY` set for the outside world cannot reach it.
    if is_loopback(&config.url) {
        builder = builder.no_proxy();
    }
    if let Some(ca) = &config.ca_file {
        let pem = std::fs::read(ca)
            .map_err(|e| StartError::Open(format!("cannot read ca_file {}: {e}", ca.display())))?;
        let certs = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| {
            StartError::Open(format!(
                "ca_file {} is not PEM certificates: {e}",
                ca.display()
            ))
        })?;
        for cert in certs {
            builder = builder.add_root_certificate(cert);
        }
    }
    if let Some((cert, key)) = &config.client_identity {
        let read = |p: &std::path::Path| {
            std::fs::read(p)
                .map_err(|e| StartError::Open(format!("cannot read {}: {e}", p.display())))
        };
        let mut pem = read(cert)?;
        pem.push(b'\n');
        pem.extend(read(key)?);
        let identity = reqwest::Identity::from_pem(&pem).map_err(|e| {
            StartError::Open(format!(
                "client_cert_file {} with client_key_file {} is not a PEM certificate and key: {e}",
                cert.display(),
                key.display()
            ))
        })?;
        builder = builder.identity(identity);
    }
    builder
        .build()
        .map_err(|e| StartError::Open(format!("cannot set up its HTTP client: {e}")))
}

/// A DPoP-bound access token and its key (RFC 9449).
pub(in super::super) struct Bound {
    key: crate::oauth::dpop::DpopKey,
    token: String,
    /// The last nonce the server asked proofs to carry.
    nonce: std::sync::Mutex<Option<String>>,
}

impl Bound {
    /// `request` with `Authorization: DPoP <token>` and a fresh proof for `method` to `url`.
    pub fn authorize(
        &self,
        request: reqwest::RequestBuilder,
        method: &str,
        url: &url::Url,
        upstream: &str,
    ) -> reqwest::RequestBuilder {
        let nonce = crate::sync::lock(&self.nonce).clone();
        let proof = self
            .key
            .proof(method, url, Some(&self.token), nonce.as_deref());
        let values = proof.ok().and_then(|proof| {
            let mut token = HeaderValue::from_str(&format!("DPoP {}", self.token)).ok()?;
            token.set_sensitive(true);
            Some((token, HeaderValue::from_str(&proof).ok()?))
        });
        match values {
            Some((token, proof)) => request.header(AUTHORIZATION, token).header("DPoP", proof),
            None => {
                tracing::warn!(
                    upstream,
                    "Cannot make a DPoP proof; the request goes without its token."
                );
                request
            }
        }
    }

    /// Keeps the nonce a refusal asks for; whether it asked for a new one.
    pub fn asks_nonce(&self, headers: &reqwest::header::HeaderMap) -> bool {
        let Some(asked) = crate::oauth::dpop::nonce_of(headers) else {
            return false;
        };
        let mut nonce = crate::sync::lock(&self.nonce);
        let new = nonce.as_deref() != Some(asked.as_str());
        *nonce = Some(asked);
        new
    }
}

/// The configured headers plus `Authorization: Bearer …` when a token source is set — or, for a
/// DPoP-bound OAuth token, the binding each request is authorized with instead.
pub(super) fn headers(config: &RemoteConfig) -> Result<(HeaderMap, Option<Bound>), StartError> {
    let mut headers = HeaderMap::new();
    for (name, value) in &config.headers {
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| StartError::Open(format!("header `{name}` is not a valid name")))?;
        let mut value = HeaderValue::from_str(value)
            .map_err(|_| StartError::Open(format!("header `{name}` has an invalid value")))?;
        value.set_sensitive(true);
        headers.insert(name, value);
    }
    let token = match (&config.bearer_token, &config.oauth) {
        (Some(source), _) => Some(
            source
                .read()
                .map_err(|why| StartError::Open(format!("cannot read its bearer token: {why}")))?,
        ),
        // Signed in with OAuth: the stored access token (none yet: the server's 401 says how
        // to sign in), bound to a key (DPoP) or a bearer token.
        (None, Some(oauth)) => match crate::oauth::TokenFile::load(oauth) {
            Some(tokens) => match tokens.dpop() {
                Some(key) => {
                    let bound = Bound {
                        key,
                        token: tokens.access_token,
                        nonce: std::sync::Mutex::default(),
                    };
                    return Ok((headers, Some(bound)));
                }
                None => Some(tokens.access_token),
            },
            None => None,
        },
        (None, None) => None,
    };
    if let Some(token) = token {
        let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| StartError::Open("its bearer token has invalid characters".into()))?;
        value.set_sensitive(true);
        headers.insert(AUTHORIZATION, value);
    }
    Ok((headers, None))
}
