//! The HTTP side of one remote upstream: one keep-alive pool (HTTP/2 where the server offers
//! it) with rustls (the platform's verifier and roots) plus configured CAs, an optional client certificate,
//! `HTTPS_PROXY`/`HTTP_PROXY`/`NO_PROXY` (never for a loopback server), bounded redirects, and the headers every request carries — the
//! configured ones and the bearer token, read afresh at each start and never logged.

use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderName, HeaderValue};

use crate::config::{RemoteConfig, TokenSource};
use crate::upstream::error::StartError;

/// Most redirects followed for one request.
const MAX_REDIRECTS: usize = 5;

/// The pool and the fixed headers of one remote upstream.
pub(super) fn build(config: &RemoteConfig) -> Result<(reqwest::Client, HeaderMap), StartError> {
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
    let client = builder
        .build()
        .map_err(|e| StartError::Open(format!("cannot set up its HTTP client: {e}")))?;
    Ok((client, headers(config)?))
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
fn headers(config: &RemoteConfig) -> Result<HeaderMap, StartError> {
    let mut headers = HeaderMap::new();
    for (name, value) in &config.headers {
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| StartError::Open(format!("header `{name}` is not a valid name")))?;
        let mut value = HeaderValue::from_str(value)
            .map_err(|_| StartError::Open(format!("header `{name}` has an invalid value")))?;
        value.set_sensitive(true);
        headers.insert(name, value);
    }
    if let Some(source) = &config.bearer_token {
        let token = token(source)?;
        let mut value = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| StartError::Open("its bearer token has invalid characters".into()))?;
        value.set_sensitive(true);
        headers.insert(AUTHORIZATION, value);
    }
    Ok(headers)
}

/// The bearer token, read now (so a changed variable or file is picked up at the next start).
fn token(source: &TokenSource) -> Result<String, StartError> {
    let token = match source {
        TokenSource::Env(var) => std::env::var(var).map_err(|_| {
            StartError::Open(format!(
                "its bearer token variable `{var}` is not set in mcpmux's environment"
            ))
        })?,
        TokenSource::File(path) => std::fs::read_to_string(path).map_err(|e| {
            StartError::Open(format!(
                "cannot read its bearer_token_file {}: {e}",
                path.display()
            ))
        })?,
    };
    let token = token.trim().to_owned();
    if token.is_empty() {
        return Err(StartError::Open("its bearer token is empty".into()));
    }
    Ok(token)
}
