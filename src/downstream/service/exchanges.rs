//! The tokens per-principal upstreams with `grant = "token_exchange"` got for each principal:
//! exchanged once (the principal's first calls wait for that one exchange), used by an instance
//! of that principal's own until they expire, then exchanged again from the JWT the principal's
//! request carries — with a new instance for the new token (the old one serves the calls it has
//! and stops once idle). Tokens live in memory only.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use crate::config::{HeldToken, TokenSource, UpstreamSecrets};
use crate::downstream::principal::Principal;
use crate::jsonrpc::{RpcError, codes};
use crate::sync::lock;
use crate::upstream::UpstreamHandle;

/// A token is exchanged again this long before it expires (half its lifetime, if shorter).
const MARGIN_SECS: u64 = 30;

/// One (upstream, principal)'s current token; its lock is held through an exchange, so the
/// principal's calls meanwhile wait for that one.
type Slot = Arc<tokio::sync::Mutex<Option<Current>>>;

/// Each (upstream, principal)'s current token.
#[derive(Debug, Default)]
pub(super) struct Exchanges {
    current: Mutex<HashMap<(String, String), Slot>>,
    /// Numbers each exchange, so that each token has an instance of its own.
    exchanged: AtomicU64,
}

/// A principal's token for one upstream (in what its instance starts with) and the instance
/// key it runs under.
#[derive(Debug)]
struct Current {
    key: String,
    secrets: Arc<UpstreamSecrets>,
    /// When it is exchanged again, in seconds since the epoch (a token the server gave no
    /// lifetime lives five minutes).
    renew_at: Option<u64>,
}

/// The instance to serve `principal` on `upstream` with: its key and what it starts with.
pub(super) struct Exchanged {
    pub key: String,
    pub secrets: Arc<UpstreamSecrets>,
}

impl Exchanges {
    /// `principal`'s instance key and secrets for `upstream`: its current token, or a new one
    /// exchanged for `subject` (the JWT its request carries). `exchange_now: false` (mcpmux's
    /// own bookkeeping) never exchanges.
    pub(super) async fn for_principal(
        &self,
        upstream: &UpstreamHandle,
        principal: &Principal,
        subject: Option<&HeldToken>,
        exchange_now: bool,
    ) -> Result<Option<Exchanged>, RpcError> {
        let base = principal.instance_key().to_owned();
        let entry = {
            let mut current = lock(&self.current);
            Arc::clone(
                current
                    .entry((upstream.name().to_owned(), base.clone()))
                    .or_default(),
            )
        };
        let mut current = entry.lock().await;
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let fresh = |c: &&Current| c.renew_at.is_none_or(|t| now < t);
        if current.as_ref().filter(fresh).is_none() {
            if !exchange_now {
                return Ok(None);
            }
            let Some(subject) = subject else {
                return Err(RpcError::new(
                    codes::INVALID_REQUEST,
                    format!(
                        "upstream `{}` exchanges each caller's own token (grant = \"token_exchange\"), and `{}` did not sign in with a JWT: sign in through [server.authorization] or a JWT issuer, or give it a token in [hosts.{}.upstreams.{}]",
                        upstream.name(),
                        principal.name,
                        principal.name,
                        upstream.name()
                    ),
                ));
            };
            let exchanged = (upstream.exchange(&subject.0).await)
                .map_err(|e| RpcError::new(codes::INVALID_REQUEST, e.to_string()))?;
            let n = self.exchanged.fetch_add(1, Ordering::Relaxed);
            *current = Some(Current {
                key: format!("{base} exchanged {n}"),
                secrets: Arc::new(UpstreamSecrets {
                    table: format!("the token exchanged for {}", principal.name),
                    bearer_token: Some(TokenSource::Held(HeldToken(Arc::from(
                        exchanged.access_token,
                    )))),
                    ..UpstreamSecrets::default()
                }),
                renew_at: exchanged
                    .expires_at
                    .map(|t| t - (t.saturating_sub(now) / 2).min(MARGIN_SECS)),
            });
        }
        Ok(current.as_ref().map(|c| Exchanged {
            key: c.key.clone(),
            secrets: Arc::clone(&c.secrets),
        }))
    }

    /// Forgets what `principal` (by its instance key) was given: its next call exchanges again.
    pub(super) fn forget(&self, principal_key: &str) {
        lock(&self.current).retain(|(_, base), _| base != principal_key);
    }
}
