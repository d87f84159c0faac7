//! Signing in to remote upstreams with OAuth 2.1, as the MCP authorization spec (2025-06-18,
//! 2025-11-25, with the 2025-03-26 fallbacks) describes. mcpmux is its upstreams' MCP client, so
//! it is the party that signs in — once per upstream, not once per host — and the tokens stay
//! its own: no host ever sees one, no upstream ever sees a host's.
//!
//! Files: `challenge.rs` (the `WWW-Authenticate: Bearer` parameters), `discovery.rs` (Protected
//! Resource Metadata, authorization server metadata, the resource check), `client.rs` (who
//! mcpmux is to the authorization server: pre-registered, a Client ID Metadata Document, or
//! dynamically registered), `identity.rs` (that client's identity, as a token file keeps it), `token.rs` (PKCE, the authorization URL, token requests and their
//! client authentication), `store.rs` (token files, 0600, written atomically), `login.rs` (a
//! whole sign-in: discovery, the loopback redirect, the exchange), `exchange.rs` (a caller's JWT
//! exchanged for an upstream's token, RFC 8693), `vault.rs` (each principal's own tokens, sealed
//! at rest).
//!
//! What it trusts: configured client credentials (a secret, a private key) go only to the
//! authorization server the config names (`oauth.issuer`), never to one an upstream's challenge
//! or resource metadata points at; an authorization server's metadata must name the URL it was
//! fetched for as its `issuer` (RFC 8414 §3.3); the authorization server and its endpoints are
//! https (http only on this machine); no OAuth request follows a redirect.

mod challenge;
mod client;
mod discovery;
pub mod dpop;
mod exchange;
mod identity;
pub mod login;
pub mod shelf;
pub mod store;
mod token;
pub mod vault;

pub use challenge::Challenge;
pub use exchange::{Exchanged, exchange};
pub use login::{Login, WebSignIn};
pub use store::TokenFile;
pub use token::{random_text, refresh_if_due, refresh_wait};
pub use vault::Vault;

use crate::config::is_loopback;

/// What went wrong signing in: one sentence naming the party and the step, never a token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{why}")]
pub struct OAuthError {
    why: String,
    /// The token endpoint answered with a refusal (a 4xx: the grant or the client is not good),
    /// which the same request will meet again — not a failure to reach it.
    refused: bool,
}

impl OAuthError {
    pub fn new(why: impl Into<String>) -> Self {
        Self {
            why: why.into(),
            refused: false,
        }
    }

    /// The token endpoint refused, `why`.
    fn refused(why: String) -> Self {
        Self { why, refused: true }
    }

    /// Whether the token endpoint refused (so trying the same again is no use).
    pub fn is_refusal(&self) -> bool {
        self.refused
    }
}

/// `text` as a URL mcpmux may talk OAuth to: https, or http on this machine (where nobody on
/// the path can read or change it). `what` names it in the error.
fn secure_url(what: &str, text: &str) -> Result<url::Url, OAuthError> {
    let url = url::Url::parse(text)
        .map_err(|e| OAuthError::new(format!("{what} `{text}` is not a URL: {e}")))?;
    match url.scheme() {
        "https" => Ok(url),
        "http" if is_loopback(&url) => Ok(url),
        _ => Err(OAuthError::new(format!(
            "{what} {text} is not https; mcpmux speaks OAuth over https only (http only to a server on this machine)"
        ))),
    }
}

/// Whether two issuer identifiers are the same server: equal once parsed (scheme and host
/// case, default port), a trailing `/` aside (`https://as` and `https://as/` are one URL).
fn same_issuer(a: &str, b: &str) -> bool {
    let normal = |s: &str| {
        url::Url::parse(s).map_or_else(
            |_| s.trim_end_matches('/').to_owned(),
            |u| u.as_str().trim_end_matches('/').to_owned(),
        )
    };
    normal(a) == normal(b)
}

/// The error for an OAuth request answered with a redirect (none is followed: it could carry
/// the request's credentials elsewhere), or `None` when it was not one.
fn redirected(what: &str, url: &str, response: &reqwest::Response) -> Option<OAuthError> {
    if !response.status().is_redirection() {
        return None;
    }
    let location = response
        .headers()
        .get(reqwest::header::LOCATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("(no Location)");
    Some(OAuthError::new(format!(
        "{what} {url} answered HTTP {} redirecting to {location}; mcpmux follows no redirect on OAuth requests (one could carry credentials elsewhere): configure the server's own URL",
        response.status()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> url::Url {
        url::Url::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn loopback_is_this_machine_only() {
        for yes in [
            "http://127.0.0.1:1/",
            "http://127.9.9.9/",
            "http://[::1]:8/",
            "http://localhost/",
            "http://LOCALHOST:3/",
            "http://a.localhost/",
        ] {
            assert!(is_loopback(&url(yes)), "{yes}");
        }
        for no in [
            "http://10.0.0.1/",
            "http://localhost.example.com/",
            "http://[::2]/",
            "http://example.com/",
        ] {
            assert!(!is_loopback(&url(no)), "{no}");
        }
    }

    #[test]
    fn oauth_urls_are_https_except_on_this_machine() {
        assert!(secure_url("x", "https://as.example.com/token").is_ok());
        assert!(secure_url("x", "http://127.0.0.1:9/token").is_ok());
        assert!(secure_url("x", "http://localhost/token").is_ok());
        let refused = secure_url("its token endpoint", "http://as.example.com/token");
        assert!(
            refused.is_err_and(|e| e.to_string().contains("http://as.example.com/token")
                && e.to_string().contains("https")),
        );
        assert!(secure_url("x", "ftp://127.0.0.1/").is_err());
        assert!(secure_url("x", "not a url").is_err());
    }

    #[test]
    fn issuers_compare_as_urls_up_to_a_trailing_slash() {
        assert!(same_issuer(
            "https://as.example.com",
            "https://as.example.com/"
        ));
        assert!(same_issuer(
            "https://AS.example.com:443/",
            "https://as.example.com"
        ));
        assert!(same_issuer("https://as/tenant", "https://as/tenant/"));
        assert!(!same_issuer("https://as/tenant", "https://as/other"));
        assert!(!same_issuer("https://as", "http://as"));
        assert!(!same_issuer("http://127.0.0.1:1", "http://127.0.0.1:2"));
    }
}
