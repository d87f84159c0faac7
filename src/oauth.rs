//! Signing in to remote upstreams with OAuth 2.1, as the MCP authorization spec (2025-06-18,
//! 2025-11-25, with the 2025-03-26 fallbacks) describes. mcpmux is its upstreams' MCP client, so
//! it is the party that signs in — once per upstream, not once per host — and the tokens stay
//! its own: no host ever sees one, no upstream ever sees a host's.
//!
//! Files: `challenge.rs` (the `WWW-Authenticate: Bearer` parameters), `discovery.rs` (Protected
//! Resource Metadata, authorization server metadata, the resource check), `client.rs` (who
//! mcpmux is to the authorization server: pre-registered, a Client ID Metadata Document, or
//! dynamically registered), `token.rs` (PKCE, the authorization URL, token requests and their
//! client authentication), `store.rs` (token files, 0600, written atomically), `login.rs` (a
//! whole sign-in: discovery, the loopback redirect, the exchange).

mod challenge;
mod client;
mod discovery;
pub mod login;
pub mod store;
mod token;

pub use challenge::Challenge;
pub use login::{Login, LoginStarted};
pub use store::TokenFile;
pub use token::{refresh_if_due, refresh_wait};

/// What went wrong signing in: one sentence naming the party and the step, never a token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct OAuthError(pub String);

impl OAuthError {
    fn new(why: impl Into<String>) -> Self {
        Self(why.into())
    }
}

/// `e` with its sources, as one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        source = cause.source();
    }
    out
}
