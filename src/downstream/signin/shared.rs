//! Sign-ins under way where replicas share a fleet store (`[cluster] store`,
//! `cluster::signins`): a link handed out here is offered to the fleet (or the one another replica
//! handed out first is taken), a link or redirect this replica never saw is taken over from the
//! store, and a sign-in another replica ended is heard by whoever waits here.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::{Pending, SignIns, Stage, Whom};
use crate::cluster::signins::{Detail, FleetSignIns, Row};
use crate::oauth::WebSignIn;
use crate::sync::lock;
use crate::upstream::UpstreamHandle;

/// Finds a configured upstream by name.
pub type FindUpstream = Box<dyn Fn(&str) -> Option<UpstreamHandle> + Send + Sync>;

/// The sign-ins of the fleet, and the upstreams by name (a sign-in another replica began names
/// its upstream).
pub(super) struct Shared {
    pub(super) signins: FleetSignIns,
    upstreams: FindUpstream,
}

/// Why a sign-in cannot go on while the fleet store is unreachable.
pub(super) fn store_down(why: impl std::fmt::Display) -> String {
    format!(
        "{why}; sign-ins are kept there so that any replica can finish them, so none starts or finishes until it is back: try again in a moment"
    )
}

/// Who a sign-in the fleet holds is for.
fn whom_of(row: &Row) -> Whom {
    Whom {
        key: Arc::from(row.principal.as_str()),
        name: Arc::from(row.detail.name.as_str()),
    }
}

impl SignIns {
    /// Keeps sign-ins under way in the fleet store from now on, so that any replica finishes
    /// them; `upstreams` finds an upstream by name.
    pub fn share(&self, signins: FleetSignIns, upstreams: FindUpstream) {
        let _ = self.shared.set(Shared { signins, upstreams });
    }

    /// The replica whose name starts links and `state`s: none where the fleet store holds the
    /// sign-ins (any replica finishes them).
    pub(super) fn owner(&self) -> Option<&str> {
        match self.shared.get() {
            Some(_) => None,
            None => self.owner.as_deref(),
        }
    }

    /// A sign-in another replica began, as this one holds it (`None`: its upstream is gone).
    pub(super) fn pending_of(&self, shared: &Shared, row: &Row) -> Option<Pending> {
        let upstream = (shared.upstreams)(&row.upstream)?;
        let left = row.expires_us.saturating_sub(crate::audit::now_us());
        Some(Pending {
            upstream,
            whom: whom_of(row),
            elicitation_id: row.detail.elicitation_id.clone(),
            url: row.detail.url.clone(),
            expires: Instant::now() + Duration::from_micros(left),
            stage: if row.authorizing {
                Stage::Authorizing
            } else {
                Stage::Issued { failures: 0 }
            },
            done: watch::channel(None).0,
            sessions: Vec::new(),
        })
    }

    /// Holds link `link` here, from the fleet store where this replica did not hand it out.
    pub(super) async fn adopt(&self, link: &str) -> Result<(), String> {
        let Some(shared) = self.shared.get() else {
            return Ok(());
        };
        if lock(&self.table).links.contains_key(link) {
            return Ok(());
        }
        let row = (shared.signins.find(link).await).map_err(store_down)?;
        if let Some(pending) = row.and_then(|row| self.pending_of(shared, &row)) {
            lock(&self.table)
                .links
                .entry(link.to_owned())
                .or_insert(pending);
        }
        Ok(())
    }

    /// The flow of a redirect claimed in the fleet store: the one held here, else the one the
    /// replica that began it kept.
    pub(super) fn resumed(
        &self,
        row: Row,
        local: Option<(String, Arc<WebSignIn>)>,
    ) -> Result<(String, Arc<WebSignIn>, UpstreamHandle, Whom), String> {
        let shared = self.shared.get().ok_or("no fleet store")?;
        let upstream = (shared.upstreams)(&row.upstream)
            .ok_or_else(|| format!("upstream `{}` is no longer configured", row.upstream))?;
        let whom = whom_of(&row);
        let flow = match (local, &row.detail.flow) {
            (Some((_, flow)), _) => flow,
            (None, Some(value)) => {
                let login = self.login(&upstream, &whom)?;
                Arc::new(WebSignIn::resume(login, value).map_err(|e| e.to_string())?)
            }
            (None, None) => {
                return Err("the sign-in had not reached its authorization server".into());
            }
        };
        Ok((row.link, flow, upstream, whom))
    }

    /// Another replica ended the sign-in of link `link`: whoever waits for it here hears (once
    /// the tokens it stored are read).
    pub async fn ended_elsewhere(&self, link: &str, outcome: Result<(), String>) {
        let waiting = (lock(&self.table).links.get(link))
            .map(|p| (p.upstream.name().to_owned(), Arc::clone(&p.whom.key)));
        let Some((upstream, key)) = waiting else {
            return;
        };
        if outcome.is_ok() {
            self.vault.fetch(&upstream, &key).await;
        }
        self.ended(link, outcome);
    }

    /// Holds `whom`'s sign-in to `upstream` here when another replica's principal went on to the
    /// authorization server with it (a retry here waits for it then).
    pub(super) async fn authorizing_elsewhere(&self, upstream: &str, whom: &Whom) -> Option<()> {
        let shared = self.shared.get()?;
        let row = (shared.signins.find_for(upstream, &whom.key).await).ok()??;
        if !row.authorizing {
            return None;
        }
        let pending = self.pending_of(shared, &row)?;
        lock(&self.table).links.entry(row.link).or_insert(pending);
        Some(())
    }
}

impl Pending {
    /// This sign-in as the fleet store keeps it, under `link`.
    pub(super) fn row(&self, link: &str) -> Row {
        let left = self.expires.saturating_duration_since(Instant::now());
        Row {
            link: link.to_owned(),
            upstream: self.upstream.name().to_owned(),
            principal: self.whom.key.to_string(),
            authorizing: false,
            expires_us: crate::audit::now_us()
                .saturating_add(u64::try_from(left.as_micros()).unwrap_or(u64::MAX)),
            detail: Detail {
                url: self.url.clone(),
                name: self.whom.name.to_string(),
                elicitation_id: self.elicitation_id.clone(),
                flow: None,
            },
        }
    }
}
