//! The HTTP side of one remote upstream: one keep-alive pool (HTTP/2 where the server offers
//! it) with rustls (the platform's verifier and roots) plus configured CAs, an optional client certificate,
//! `HTTPS_PROXY`/`HTTP_PROXY`/`NO_PROXY` (never for a loopback server), bounded redirects, and the headers every request carries — the
//! configured ones and the bearer token, read afresh at each start and never logged.

use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderName, HeaderValue};

use crate::config::RemoteConfig;
use crate::upstream::error::StartError;

/// Most redirects followed for one request.
const MAX_REDIRECTS: usize = 5;

/// An HTTP client with the upstream's TLS, proxy and redirect settings, and no credential.
pub fn pool(config: &RemoteConfig) -> Result<reqwest::Client, StartError> {
    let mut builder = reqwest::Client::builder()
        .connect_timeout(config.connect_timeout)
        .redirect(reqwest::redirect::Policy::limited(MAX_REDIRECTS))
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

fn is_loopback(url: &url::Url) -> bool {
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

/// The configured headers plus `Authorization: Bearer …` when a token source is set.
pub(super) fn headers(config: &RemoteConfig) -> Result<HeaderMap, StartError> {
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
        // to sign in).
        (None, Some(oauth)) => {
            crate::oauth::TokenFile::read(&oauth.token_file).map(|t| t.access_token)
        }
        (None, None) => None,
    };
    if let Some(token) = token {
        let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| StartError::Open("its bearer token has invalid characters".into()))?;
        value.set_sensitive(true);
        headers.insert(AUTHORIZATION, value);
    }
    Ok(headers)
}
