//! `[hosts.NAME.upstreams.UP]` as a per-principal upstream's instance uses it: a host's own
//! identity (a remote upstream's bearer token and headers, a stdio one's environment), applied
//! on top of the upstream's config when the host's instance starts.

use std::sync::Arc;

use super::model::{UpstreamConfig, UpstreamSecrets};
use super::transport::Transport;

impl UpstreamSecrets {
    /// `config` as this principal's instance runs it: its environment or bearer token and
    /// headers on top of the upstream's own, or its own OAuth sign-in; never the upstream's
    /// sign-in (tokens are one identity's). Errors name [`Self::table`].
    pub fn apply(&self, config: &mut UpstreamConfig) -> Result<(), String> {
        let key = &self.table;
        match &mut config.transport {
            Transport::Stdio(stdio) => {
                stdio.env.extend(self.env.clone());
                for (var, source) in &self.env_secrets {
                    let value = source
                        .read()
                        .map_err(|e| format!("{key}: the value of {var}: {e}"))?;
                    stdio.env.insert(var.clone(), value);
                }
            }
            Transport::Remote(remote) => {
                remote.headers.extend(self.headers.clone());
                // The upstream's own token (its catalog's reader) is never a principal's.
                if self.bearer_token.is_some() || self.oauth.is_some() {
                    remote.bearer_token.clone_from(&self.bearer_token);
                }
                remote.oauth.clone_from(&self.oauth);
            }
        }
        Ok(())
    }
}

impl UpstreamSecrets {
    /// What a principal without a table of its own starts with: the upstream's settings alone.
    pub fn none() -> Arc<Self> {
        static NONE: std::sync::LazyLock<Arc<UpstreamSecrets>> =
            std::sync::LazyLock::new(Arc::default);
        Arc::clone(&NONE)
    }
}

impl std::fmt::Debug for UpstreamSecrets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UpstreamSecrets")
            .field("table", &self.table)
            .field("bearer_token", &self.bearer_token.is_some())
            .field("oauth", &self.oauth.as_ref().map(|o| &o.sealed))
            .field("headers", &self.headers.keys().collect::<Vec<_>>())
            .field(
                "env",
                &self
                    .env
                    .keys()
                    .chain(self.env_secrets.keys())
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}
