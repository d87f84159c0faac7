//! Each principal's own sign-in to an upstream that signs every principal in separately
//! (`credentials = "per-principal"`, `grant = "authorization_code"`), carried by the principal's
//! own host ([`SignIns`]). A call of a principal without tokens gets a sign-in link — a page of
//! mcpmux's own, never the upstream's authorization URL (the MCP spec's URL-elicitation phishing
//! defence) — that:
//!
//! - is random (256 bits), lasts `server.sign_in_timeout`, and works once: a link opened again, or late,
//!   does nothing;
//! - is bound to the principal it was made for: the page first asks the person to prove who they
//!   are with the credential their host uses (a host's token, or a signed-in user's JWT), checked
//!   as the host endpoint checks it; another principal's credential is refused, does nothing, and
//!   after [`MAX_FAILURES`] refusals the link is void;
//! - then sends the person to the upstream's authorization server (discovery, PKCE, resource
//!   indicator, a registered client), whose redirect comes back to mcpmux (`/oauth/callback`);
//!   the tokens go into the vault, sealed for that principal and upstream, and whoever waits for
//!   the sign-in (the call that asked, `notifications/elicitation/complete` for the host) hears.
//!
//! Where replicas share a fleet store (`[cluster] store`) a sign-in under way lives there too
//! (`shared.rs`): any replica shows the link, takes the proof, receives the redirect and
//! exchanges the code, "once" holds for the fleet, and the replica whose call waits hears the end.
//!
//! Each step is in the audit log (`signin.issued`, `.refused`, `.completed`, `.failed`,
//! `.revoked`), naming the upstream and the principal — never a token or a link.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::principal::Principal;
use super::session::Session;
use crate::audit::{AuditHandle, Ended, Record};
use crate::cluster::signins::{Detail, digest};
use crate::config::UpstreamSecrets;
use crate::oauth::{Vault, WebSignIn};
use crate::sync::lock;
use crate::upstream::UpstreamHandle;
use shared::{Shared, store_down};

mod shared;

/// Credentials of another principal a link takes before it is void.
const MAX_FAILURES: u8 = 3;
/// Sign-ins pending at once, in all; past that a new one is refused (each is a principal's).
const MAX_PENDING: usize = 4096;
/// Where the upstream's authorization server sends the person back to.
pub const CALLBACK_PATH: &str = "/oauth/callback";

/// How a sign-in ended, for whoever waits on it.
pub type Outcome = Option<Result<(), String>>;

/// A sign-in link handed out.
#[derive(Debug, Clone)]
pub struct Issued {
    pub url: String,
    /// The id of the URL elicitation that carries it (`elicitationId`).
    pub elicitation_id: String,
    /// What the person is told.
    pub message: String,
    /// Resolves when the sign-in ends.
    pub done: watch::Receiver<Outcome>,
}

/// Who a sign-in is for.
#[derive(Debug, Clone)]
pub struct Whom {
    /// The principal's instance key (`Principal::instance_key`): what its tokens are bound to.
    pub key: Arc<str>,
    /// What pages and messages call it.
    pub name: Arc<str>,
}

impl Whom {
    /// The host `name` (no `issuer`), or the user `name` that `issuer` signed in.
    pub fn named(issuer: Option<&str>, name: &str) -> Self {
        Self {
            key: Arc::from(Principal::key_of(issuer, name)),
            name: Arc::from(name),
        }
    }

    pub fn of(principal: &Principal) -> Self {
        Self {
            key: Arc::from(principal.instance_key()),
            name: Arc::clone(&principal.name),
        }
    }
}

enum Stage {
    /// Handed out; nobody has proven to be its principal yet.
    Issued { failures: u8 },
    /// Its principal proved who they are and went on to the authorization server.
    Authorizing,
}

struct Pending {
    upstream: UpstreamHandle,
    whom: Whom,
    elicitation_id: String,
    url: String,
    expires: Instant,
    stage: Stage,
    done: watch::Sender<Outcome>,
    /// Handshake-era sessions told of it, to hear `notifications/elicitation/complete`.
    sessions: Vec<Weak<Session>>,
}

#[derive(Default)]
struct Table {
    /// By the digest of the link's secret id (what the fleet store keeps too).
    links: HashMap<String, Pending>,
    /// Authorization code flows under way, by their `state`: the link's digest and the flow.
    flows: HashMap<String, (String, Arc<WebSignIn>)>,
}

/// What a link's page shows.
pub enum Page {
    /// Ask for the principal's credential.
    Prove { upstream: String, principal: String },
    /// Unknown, used, or expired: nothing can be done with it.
    Gone,
    /// The fleet store, which holds it, is unreachable (why).
    Unavailable(String),
}

/// Why a proof was not taken.
#[derive(Debug)]
pub enum Refused {
    Gone,
    /// The credential names another principal (or none).
    NotYou {
        void: bool,
    },
    /// The authorization server cannot be reached or refused to start.
    Failed(String),
}

fn millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)
}

/// An upstream's name and a principal's key.
type SecretsKey = (String, Arc<str>);

/// The sign-ins under way and the vault their tokens go to.
pub struct SignIns {
    vault: Arc<Vault>,
    /// Where people reach mcpmux in a browser (`server.public_url`, else the listen address),
    /// set once the listener is bound.
    base: OnceLock<url::Url>,
    /// The replica whose name starts each link and redirect `state` (`[cluster]`), so they
    /// reach the replica holding the sign-in.
    owner: Option<Arc<str>>,
    table: Mutex<Table>,
    audit: AuditHandle,
    /// How long a link works (`server.sign_in_timeout`, in milliseconds; a reload sets it).
    ttl_ms: std::sync::atomic::AtomicU64,
    /// Each principal's secrets with its sign-in, by upstream and principal key (made once).
    secrets: Mutex<HashMap<SecretsKey, Arc<UpstreamSecrets>>>,
    /// The fleet's sign-ins, where replicas share a store (set once by the daemon).
    shared: OnceLock<Shared>,
}

impl std::fmt::Debug for SignIns {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SignIns")
            .field("base", &self.base.get())
            .finish()
    }
}

impl SignIns {
    pub fn new(
        vault: Arc<Vault>,
        (ttl, owner): (Duration, Option<Arc<str>>),
        audit: AuditHandle,
    ) -> Self {
        Self {
            owner,
            vault,
            audit,
            base: OnceLock::new(),
            table: Mutex::default(),
            ttl_ms: std::sync::atomic::AtomicU64::new(millis(ttl)),
            secrets: Mutex::default(),
            shared: OnceLock::new(),
        }
    }

    /// How long a link works.
    pub fn ttl(&self) -> Duration {
        Duration::from_millis(self.ttl_ms.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Links made from now on work for `ttl`.
    pub fn set_ttl(&self, ttl: Duration) {
        (self.ttl_ms).store(millis(ttl), std::sync::atomic::Ordering::Relaxed);
    }

    /// Where sign-in links point: `base` (set once).
    pub fn set_base(&self, base: url::Url) {
        let _ = self.base.set(base);
    }

    /// Whether a form's `Origin` (if the browser sent one) is mcpmux's own, where its page is.
    pub fn same_origin(&self, origin: Option<&axum::http::HeaderValue>) -> bool {
        let Some(origin) = origin else {
            return true;
        };
        let own = self.base.get().map(|b| b.origin().ascii_serialization());
        origin
            .to_str()
            .ok()
            .is_some_and(|o| Some(o) == own.as_deref())
    }

    pub fn vault(&self) -> &Vault {
        &self.vault
    }

    /// Whether `whom` has tokens for `upstream`.
    pub fn holds(&self, upstream: &str, whom: &Whom) -> bool {
        self.vault.holds(upstream, &whom.key)
    }

    /// `own` (the principal's table, or none) with `whom`'s sign-in to `upstream`.
    pub fn secrets(
        &self,
        upstream: &UpstreamHandle,
        whom: &Whom,
        own: &UpstreamSecrets,
    ) -> Arc<UpstreamSecrets> {
        let key = (upstream.name().to_owned(), Arc::clone(&whom.key));
        let mut cache = lock(&self.secrets);
        let made = cache.entry(key).or_insert_with(|| {
            let oauth = upstream
                .oauth()
                .map(|o| Box::new(self.vault.oauth_for(upstream.name(), o, &whom.key)));
            Arc::new(UpstreamSecrets {
                table: format!("{}'s own sign-in to {}", whom.name, upstream.name()),
                oauth,
                ..own.clone()
            })
        });
        Arc::clone(made)
    }

    /// A sign-in link for `whom` to `upstream` (the one already handed out, while it lasts — on
    /// any replica, where they share a store), its completion told to `session` too.
    pub async fn issue(
        &self,
        upstream: &UpstreamHandle,
        whom: &Whom,
        session: Option<&Arc<Session>>,
    ) -> Result<Issued, String> {
        let base = self.base.get().ok_or_else(|| {
            "mcpmux does not know where it is reached in a browser yet (set server.public_url)"
                .to_owned()
        })?;
        if let Some(issued) = self.reissue(upstream.name(), whom, session) {
            return Ok(issued);
        }
        let id = crate::cluster::owned(self.owner(), crate::oauth::random_text(32));
        let mut url = base.clone();
        url.set_path(&format!("/signin/{id}"));
        let mut pending = Pending {
            upstream: upstream.clone(),
            whom: whom.clone(),
            elicitation_id: crate::oauth::random_text(16),
            url: url.to_string(),
            expires: Instant::now() + self.ttl(),
            stage: Stage::Issued { failures: 0 },
            done: watch::channel(None).0,
            sessions: Vec::new(),
        };
        let (mut link, mut ours) = (digest(&id), true);
        if let Some(shared) = self.shared.get() {
            if let Some(why) = shared.signins.down() {
                return Err(store_down(format!(
                    "the fleet store (Postgres) is unreachable: {why}"
                )));
            }
            let offered = pending.row(&link);
            let fleet = (shared.signins.issue(&offered).await).map_err(store_down)?;
            if fleet.link != link {
                // Another replica handed one out first: that one.
                pending = self.pending_of(shared, &fleet).ok_or_else(|| {
                    format!("upstream `{}` is no longer configured", upstream.name())
                })?;
                (link, ours) = (fleet.link, false);
            }
        }
        let mut table = lock(&self.table);
        let now = Instant::now();
        table.links.retain(|_, p| p.expires > now);
        if table.links.len() >= MAX_PENDING && !table.links.contains_key(&link) {
            return Err(format!(
                "{MAX_PENDING} sign-ins are under way; try again in a few minutes"
            ));
        }
        let pending = table.links.entry(link).or_insert_with(|| {
            if ours {
                self.record("signin.issued", upstream.name(), whom, None, true);
            }
            pending
        });
        Ok(self.issued(pending, session))
    }

    /// The link already handed out here for `whom` to `upstream`, while it lasts.
    fn reissue(
        &self,
        upstream: &str,
        whom: &Whom,
        session: Option<&Arc<Session>>,
    ) -> Option<Issued> {
        let mut table = lock(&self.table);
        let now = Instant::now();
        let pending = (table.links.values_mut())
            .find(|p| p.upstream.name() == upstream && p.whom.key == whom.key && p.expires > now)?;
        Some(self.issued(pending, session))
    }

    fn issued(&self, pending: &mut Pending, session: Option<&Arc<Session>>) -> Issued {
        if let Some(session) = session {
            pending.sessions.push(Arc::downgrade(session));
        }
        let left = pending.expires.saturating_duration_since(Instant::now());
        Issued {
            url: pending.url.clone(),
            elicitation_id: pending.elicitation_id.clone(),
            message: format!(
                "Sign in to `{}` as {}: open {} (it works once, within {}).",
                pending.upstream.name(),
                pending.whom.name,
                pending.url,
                humantime::format_duration(Duration::from_secs(left.as_secs().max(1)))
            ),
            done: pending.done.subscribe(),
        }
    }

    /// What the link `id` shows.
    pub async fn page(&self, id: &str) -> Page {
        let link = digest(id);
        if let Err(why) = self.adopt(&link).await {
            return Page::Unavailable(why);
        }
        let table = lock(&self.table);
        match table.links.get(&link) {
            Some(p) if p.expires > Instant::now() && matches!(p.stage, Stage::Issued { .. }) => {
                Page::Prove {
                    upstream: p.upstream.name().to_owned(),
                    principal: p.whom.name.to_string(),
                }
            }
            _ => Page::Gone,
        }
    }

    /// The person at link `id` proved to be `proven` (the principal their credential names, if
    /// any): for the link's own principal, the authorization URL to go on to (the link is used
    /// up, on every replica); for another, a refusal that changes nothing (but counts).
    pub async fn prove(&self, id: &str, proven: Option<&Principal>) -> Result<url::Url, Refused> {
        let link = digest(id);
        self.adopt(&link).await.map_err(Refused::Failed)?;
        let (upstream, whom) = {
            let table = lock(&self.table);
            let Some(pending) = table.links.get(&link) else {
                return Err(Refused::Gone);
            };
            if !matches!(pending.stage, Stage::Issued { .. }) || pending.expires <= Instant::now() {
                return Err(Refused::Gone);
            }
            (pending.upstream.clone(), pending.whom.clone())
        };
        if proven.is_none_or(|p| p.instance_key() != &*whom.key) {
            return Err(self.refuse(&link, (&upstream, &whom), proven).await);
        }
        if let Some(shared) = self.shared.get() {
            match shared.signins.authorize(&link).await {
                Ok(true) => {}
                Ok(false) => {
                    lock(&self.table).links.remove(&link);
                    return Err(Refused::Gone);
                }
                Err(e) => return Err(Refused::Failed(store_down(e))),
            }
        }
        match lock(&self.table).links.get_mut(&link) {
            Some(pending) if matches!(pending.stage, Stage::Issued { .. }) => {
                pending.stage = Stage::Authorizing;
            }
            _ => return Err(Refused::Gone),
        }
        let started = match self.begin(&link, (&upstream, &whom)).await {
            Ok(started) => started,
            Err(why) => {
                self.end(&link, Err(why.clone())).await;
                return Err(Refused::Failed(why));
            }
        };
        let url = started.authorization_url.clone();
        let mut table = lock(&self.table);
        table.flows.insert(
            started.state().to_owned(),
            (link.clone(), Arc::new(started)),
        );
        Ok(url)
    }

    /// A proof at link `link` with another principal's credential (or none), counted (across
    /// the fleet, where replicas share a store); after [`MAX_FAILURES`] the link is void.
    async fn refuse(
        &self,
        link: &str,
        (upstream, whom): (&UpstreamHandle, &Whom),
        proven: Option<&Principal>,
    ) -> Refused {
        let here = {
            let mut table = lock(&self.table);
            match table.links.get_mut(link).map(|p| &mut p.stage) {
                Some(Stage::Issued { failures }) => {
                    *failures += 1;
                    *failures
                }
                _ => MAX_FAILURES,
            }
        };
        let fleet = match self.shared.get() {
            Some(shared) => shared.signins.refused(link).await.unwrap_or(here),
            None => here,
        };
        let void = here.max(fleet) >= MAX_FAILURES;
        let by = proven.map_or("nobody", |p| &*p.name);
        tracing::warn!(upstream = %upstream.name(), principal = %whom.name, by, "Refused a sign-in link opened with another principal's credential.");
        let detail = format!(
            "opened with the credential of {by}{}",
            if void { "; the link is void" } else { "" }
        );
        self.record("signin.refused", upstream.name(), whom, Some(detail), false);
        if void {
            let why = "its sign-in link was opened with other principals' credentials and is void";
            self.end(link, Err(why.into())).await;
        }
        Refused::NotYou { void }
    }

    /// Starts the authorization code flow of link `link`'s principal (kept in the fleet store,
    /// where replicas share one, so that the redirect may reach any of them).
    async fn begin(
        &self,
        link: &str,
        (upstream, whom): (&UpstreamHandle, &Whom),
    ) -> Result<WebSignIn, String> {
        let login = self.login(upstream, whom)?;
        let base = self.base.get().ok_or("no public URL")?;
        let mut redirect = base.clone();
        redirect.set_path(CALLBACK_PATH);
        let started = login
            .begin_at(redirect.to_string(), self.owner())
            .await
            .map_err(|e| format!("cannot sign in to `{}`: {e}", upstream.name()))?;
        if let Some(shared) = self.shared.get() {
            let detail = {
                let table = lock(&self.table);
                let pending = table.links.get(link).ok_or("the sign-in expired")?;
                Detail {
                    url: pending.url.clone(),
                    name: whom.name.to_string(),
                    elicitation_id: pending.elicitation_id.clone(),
                    flow: Some(started.to_value()),
                }
            };
            (shared.signins.flow(link, started.state(), &detail).await).map_err(store_down)?;
        }
        Ok(started)
    }

    /// How `whom` signs in to `upstream`: its own token file in the vault.
    fn login(&self, upstream: &UpstreamHandle, whom: &Whom) -> Result<crate::oauth::Login, String> {
        let oauth = upstream.oauth().ok_or("the upstream signs in no more")?;
        let own = self.vault.oauth_for(upstream.name(), oauth, &whom.key);
        match upstream.sign_in_as(own) {
            Some(Ok(login)) => Ok(login),
            Some(Err(e)) => Err(e.to_string()),
            None => Err("the upstream signs in no more".into()),
        }
    }

    /// The authorization server's redirect with `query`: its code exchanged and the tokens
    /// stored for the principal of the flow its `state` names (once, on whichever replica it
    /// reaches). The upstream and who was signed in.
    pub async fn callback(
        &self,
        query: &HashMap<String, String>,
    ) -> Result<(UpstreamHandle, Whom), String> {
        use subtle::ConstantTimeEq;
        let given = query.get("state").map_or("", String::as_str);
        let not_started = "mcpmux started no sign-in with this state (it finished already, expired, or never was)";
        // Where replicas share a store, the redirect is claimed there first: once for the fleet.
        let claimed = match self.shared.get() {
            Some(shared) => Some((shared.signins.claim(given).await).map_err(store_down)?),
            None => None,
        };
        let local = {
            let mut table = lock(&self.table);
            let found = (table.flows.keys())
                .find(|s| bool::from(s.as_bytes().ct_eq(given.as_bytes())))
                .cloned();
            found.and_then(|s| table.flows.remove(&s))
        };
        let (link, flow, upstream, whom) = match (claimed, local) {
            (None, Some((link, flow))) => {
                let table = lock(&self.table);
                let pending = table.links.get(&link).ok_or("the sign-in expired")?;
                let (upstream, whom) = (pending.upstream.clone(), pending.whom.clone());
                (link, flow, upstream, whom)
            }
            (Some(Some(row)), local) => self.resumed(row, local)?,
            (None | Some(None), _) => return Err(not_started.into()),
        };
        let outcome = flow.finish(query).await.map_err(|e| e.to_string());
        if outcome.is_ok() {
            tracing::info!(upstream = %upstream.name(), principal = %whom.name, "A principal signed in; its tokens are sealed in the vault.");
            if let Err(e) = self.vault.flush(upstream.name(), &whom.key).await {
                tracing::warn!(upstream = %upstream.name(), principal = %whom.name, error = %e, "The principal's new tokens are not in the fleet store yet; other replicas get them when it is back.");
            }
        }
        self.end(&link, outcome.clone()).await;
        match &outcome {
            Ok(()) => self.record("signin.completed", upstream.name(), &whom, None, true),
            Err(why) => self.record(
                "signin.failed",
                upstream.name(),
                &whom,
                Some(why.clone()),
                false,
            ),
        }
        outcome.map(|()| (upstream, whom))
    }

    /// Ends link `link` with `outcome`, for whoever waits here and (where replicas share a
    /// store) on every other replica.
    async fn end(&self, link: &str, outcome: Result<(), String>) {
        self.ended(link, outcome.clone());
        if let Some(shared) = self.shared.get() {
            if let Err(e) = shared.signins.end(link, &outcome).await {
                tracing::warn!(error = %e, "Other replicas did not hear that a sign-in ended (calls waiting there time out).");
            }
        }
    }

    /// Ends link `link` here with `outcome`, for whoever waits.
    fn ended(&self, link: &str, outcome: Result<(), String>) {
        let Some(pending) = lock(&self.table).links.remove(link) else {
            return;
        };
        if outcome.is_ok() {
            let params = serde_json::json!({ "elicitationId": pending.elicitation_id });
            let line = crate::jsonrpc::notification_line(
                "notifications/elicitation/complete",
                Some(&params.to_string()),
            );
            for session in pending.sessions.iter().filter_map(Weak::upgrade) {
                session.deliver(line.clone());
            }
        }
        let _ = pending.done.send(Some(outcome));
    }

    /// Forgets `whom`'s tokens for `upstream`; whether there were any.
    pub fn revoke(&self, upstream: &str, whom: &Whom) -> std::io::Result<bool> {
        let revoked = self.vault.revoke(upstream, &whom.key)?;
        if revoked {
            self.record("signin.revoked", upstream, whom, None, true);
        }
        Ok(revoked)
    }

    /// An audit record of a sign-in's step, naming its upstream and principal.
    fn record(&self, event: &str, upstream: &str, whom: &Whom, detail: Option<String>, ok: bool) {
        let mut record = Record::event(event, Some(upstream), None, detail);
        record.principal = Some(whom.name.to_string());
        if !ok {
            record.outcome = Ended::Error;
        }
        self.audit.record(record);
    }

    /// Whether a sign-in of `whom` to `upstream` is under way past its link (the person is at
    /// the authorization server — through this replica or, where they share a store, another),
    /// and its outcome when so.
    pub async fn under_way(&self, upstream: &str, whom: &Whom) -> Option<watch::Receiver<Outcome>> {
        let authorizing = |table: &Table| {
            (table.links.values())
                .find(|p| {
                    p.upstream.name() == upstream
                        && p.whom.key == whom.key
                        && matches!(p.stage, Stage::Authorizing)
                })
                .map(|p| p.done.subscribe())
        };
        if let Some(done) = authorizing(&lock(&self.table)) {
            return Some(done);
        }
        self.authorizing_elsewhere(upstream, whom).await?;
        authorizing(&lock(&self.table))
    }
}
