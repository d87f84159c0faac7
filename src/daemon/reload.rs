//! Reloading the config of a running daemon: when the file changes (watched with notify), on
//! SIGHUP, and on `POST /reload` (`mcpmux reload`). The new file is validated first: an invalid
//! one changes nothing, is logged and audited with the file, key or line and the fix, and shows in
//! status until a valid one arrives. A valid one is applied as a diff: added upstreams start,
//! removed ones leave the catalog at once and stop once what they have in flight is answered
//! (within `server.drain_timeout`), changed ones are replaced the same way, and unchanged ones —
//! their process, sessions, subscriptions and log levels — are not touched. Hosts, profiles,
//! catalog settings and session limits apply to open sessions too. Settings that cannot change
//! while running (listen addresses, the state directory, the audit log) are reported as needing a
//! restart, and keep their running value.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use arc_swap::ArcSwap;

use crate::api::{ConfigStatus, LastReload, ReloadChanges};
use crate::audit::{AuditHandle, Record};
use crate::config::{self, Config, ConfigDiff, ReloadError};
use crate::downstream::{EdgeControl, HostService, Principal};
use crate::router::RouterHandle;
use crate::supervisor::SupervisorHandle;
use crate::sync::lock;
use crate::upstream::{HostEvents, Upstreams};

/// What `serve`'s flags set over the file; a reload applies them again.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub listen: Option<SocketAddr>,
    /// `Some(None)`: `--admin off`.
    pub admin: Option<Option<SocketAddr>>,
    pub state_dir: Option<PathBuf>,
    /// `--replica`: this replica's name, when `[cluster]` is set.
    pub replica: Option<String>,
}

impl Overrides {
    pub fn apply(&self, config: &mut Config) {
        if let Some(listen) = self.listen {
            config.server.listen = listen;
        }
        if let Some(admin) = self.admin {
            config.admin = admin;
        }
        if let Some(dir) = &self.state_dir {
            config.set_state_dir(dir.clone(), true);
        }
        if let (Some(name), Some(cluster)) = (&self.replica, &mut config.cluster) {
            cluster.replica.clone_from(name);
        }
    }
}

/// What asked for a reload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trigger {
    File,
    Signal,
    Admin,
}

impl Trigger {
    fn as_str(self) -> &'static str {
        match self {
            Self::File => "the config file changed",
            Self::Signal => "SIGHUP",
            Self::Admin => "the admin API",
        }
    }
}

/// The parts of the running daemon a reload changes.
pub struct Parts {
    pub router: RouterHandle,
    pub supervisor: SupervisorHandle,
    pub service: Arc<HostService>,
    pub edge: EdgeControl,
    pub events: Arc<dyn HostEvents>,
    pub audit: AuditHandle,
    /// The `[hosts]` principals, as status lists them.
    pub hosts: Arc<ArcSwap<Vec<Arc<Principal>>>>,
    /// Where the host endpoint listens (the default resource of `[server.authorization]`).
    pub local: SocketAddr,
}

impl Parts {
    /// The URL hosts reach the daemon at.
    fn url(&self) -> String {
        format!("http://{}/mcp", self.local)
    }
}

/// The running config and how to replace it.
pub struct Reloader {
    overrides: Overrides,
    parts: Parts,
    /// The file text as last read; held for a whole reload, so reloads never interleave.
    running: tokio::sync::Mutex<Running>,
    /// The running upstream set: the one place it lives. The router and the supervisor read it
    /// (and catch up with it when a reload tells them); only a reload replaces it.
    upstreams: tokio::sync::watch::Sender<Upstreams>,
    /// The running config (replaced only under `running`).
    current: ArcSwap<Config>,
    outcome: Mutex<Latest>,
    /// Reloads finished (applied or refused), so one that waited for another knows it did.
    finished: AtomicU64,
    reloads: AtomicU64,
    rejected: AtomicU64,
    /// The digest of the config text running ([`digest`]).
    digest: Mutex<String>,
}

/// The first 16 hex digits of the SHA-256 of a config's text.
fn digest(text: Option<&str>) -> String {
    use sha2::Digest;
    let hash = sha2::Sha256::digest(text.unwrap_or_default().as_bytes());
    hash.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

struct Running {
    /// The file's text as last read (a change event that leaves it alone is no change).
    text: Option<String>,
}

/// What the last reload did, for status.
#[derive(Debug, Clone, Default)]
struct Latest {
    at: Option<SystemTime>,
    trigger: Option<Trigger>,
    /// Why the file on disk is not running (`None`: the last reload applied).
    error: Option<ReloadError>,
    summary: Option<ReloadChanges>,
}

impl std::fmt::Debug for Reloader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reloader").finish_non_exhaustive()
    }
}

impl Reloader {
    pub fn new(
        config: Config,
        upstreams: tokio::sync::watch::Sender<Upstreams>,
        overrides: Overrides,
        parts: Parts,
    ) -> Arc<Self> {
        let text = std::fs::read_to_string(&config.source).ok();
        let digest = Mutex::new(self::digest(text.as_deref()));
        Arc::new(Self {
            digest,
            overrides,
            parts,
            current: ArcSwap::from_pointee(config),
            running: tokio::sync::Mutex::new(Running { text }),
            upstreams,
            outcome: Mutex::default(),
            finished: AtomicU64::new(0),
            reloads: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
        })
    }

    /// The running config.
    pub fn current(&self) -> Arc<Config> {
        self.current.load_full()
    }

    /// How many reloads applied, and how many were refused.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.reloads.load(Ordering::Relaxed),
            self.rejected.load(Ordering::Relaxed),
        )
    }

    /// The config's file and how its last reload went, for status.
    pub fn status(&self) -> ConfigStatus {
        let outcome = lock(&self.outcome).clone();
        let (reloads, rejected) = self.counts();
        ConfigStatus {
            file: self.current.load().source.display().to_string(),
            digest: lock(&self.digest).clone(),
            reloads,
            rejected,
            last_reload: outcome.at.map(|at| LastReload {
                at: humantime::format_rfc3339_seconds(at).to_string(),
                trigger: outcome.trigger.map(|t| t.as_str().to_owned()),
                applied: outcome.error.is_none(),
                error: outcome.error.map(|e| e.to_string()),
                changes: outcome.summary,
            }),
        }
    }

    /// Reads the config file again and applies it; the error says why nothing changed.
    pub async fn reload(&self, trigger: Trigger) -> Result<ReloadChanges, ReloadError> {
        let asked = self.finished.load(Ordering::Acquire);
        let mut running = self.running.lock().await;
        let path = self.current.load().source.clone();
        let text = std::fs::read_to_string(&path);
        let same = text.as_ref().ok() == running.text.as_ref();
        // Saved unchanged, or a step of an editor's save that removed the file for now.
        if trigger == Trigger::File && (same || text.is_err()) {
            // Nothing was done, and nothing reads a file event's answer.
            return Ok(ReloadChanges::default());
        }
        // Another reload applied this very file while this one waited for it (the watcher saw
        // the save first): how that went is this one's answer.
        if same && self.finished.load(Ordering::Acquire) != asked {
            let outcome = lock(&self.outcome).clone();
            return match outcome.error {
                Some(error) => Err(error),
                None => Ok(outcome.summary.unwrap_or_default()),
            };
        }
        super::systemd::reloading();
        let result = self.apply(&mut running, &path, text, trigger).await;
        super::systemd::reloaded(&self.parts.router, &self.parts.url());
        let mut outcome = lock(&self.outcome);
        outcome.at = Some(SystemTime::now());
        outcome.trigger = Some(trigger);
        match &result {
            Ok(summary) => {
                self.reloads.fetch_add(1, Ordering::Relaxed);
                outcome.error = None;
                outcome.summary = Some(summary.clone());
            }
            Err(error) => {
                self.rejected.fetch_add(1, Ordering::Relaxed);
                outcome.error = Some(error.clone());
                outcome.summary = None;
            }
        }
        self.finished.fetch_add(1, Ordering::Release);
        result
    }

    // Long: a reload's steps in the order they must happen (read, parse, diff, refuse what cannot
    // change, apply, report): splitting would pass the half-applied state between functions.
    async fn apply(
        &self,
        running: &mut Running,
        path: &Path,
        text: std::io::Result<String>,
        trigger: Trigger,
    ) -> Result<ReloadChanges, ReloadError> {
        let parsed = match &text {
            Ok(text) => config::parse(path, text),
            Err(e) => Err(config::ConfigError::Read {
                file: path.into(),
                source: std::io::Error::new(e.kind(), e.to_string()),
            }),
        };
        let text = text.ok();
        let mut next = match parsed {
            Ok(next) => next,
            Err(e) => {
                running.text = text;
                let why = config::masked(&e.to_string(), &self.current().audit.secret_keys);
                return Err(self.refuse(trigger, ReloadError::Invalid(why)));
            }
        };
        self.overrides.apply(&mut next);
        let now = self.current.load_full();
        let diff = ConfigDiff::of(&now, &next);
        // Fixed settings keep their running values, so the checks below see what will run.
        diff.keep_fixed(&now, &mut next);
        let restart_needed = diff.restart_needed();
        if next.host_exposed(self.parts.local) {
            running.text = text;
            let exposed = ReloadError::Exposed {
                file: path.to_owned(),
                listen: self.parts.local,
            };
            return Err(self.refuse(trigger, exposed));
        }

        let link = self.parts.router.link();
        let running_set = Arc::clone(&self.upstreams.borrow());
        // Unchanged upstreams keep their handle; added and changed ones get a new one.
        let upstreams: Upstreams = (next.upstreams.iter())
            .map(|u| {
                let kept = (running_set.iter()).find(|h| diff.keeps(&u.name) && h.name() == u.name);
                let made = || super::upstream_handle(u, &self.parts.events, &link);
                kept.cloned().unwrap_or_else(made)
            })
            .collect();
        // A replaced upstream's catalog stays listed until its successor publishes, unless the
        // successor never will (disabled).
        let disabled: Vec<String> = (diff.to_change.iter())
            .filter(|c| c.disabled)
            .map(|c| c.name.clone())
            .collect();
        let changed = diff.changed_names();

        let (profiles, principals) = super::principals(&next);
        // The new set first: the router's next catalog and the supervisor read it there.
        self.upstreams.send_replace(upstreams);
        (self.parts.router).reconfigure(&next.catalog, &profiles, &disabled);
        let draining = (self.parts.supervisor)
            .reconcile(next.server.drain_timeout)
            .await;
        self.parts.hosts.store(Arc::new(principals.clone()));
        let gate = super::gate(&next, self.parts.local, principals, profiles);
        let ended = self.parts.edge.reload(&next.server, gate).await;
        self.parts.service.set_limits(&next.server);
        // What did not finish: requests a retired upstream still had when its grace ended, or a
        // supervisor that did not take the new upstream set.
        let incomplete: Vec<String> = match draining {
            Ok(draining) => (draining.finished().await.iter())
                .map(ToString::to_string)
                .collect(),
            Err(e) => vec![format!("the new upstreams were not applied: {e}")],
        };
        for problem in &incomplete {
            tracing::warn!(file = %path.display(), problem = %problem, "The reload did not finish cleanly.");
        }

        let summary = ReloadChanges {
            added: diff.to_add.clone(),
            removed: diff.to_remove.clone(),
            changed,
            unchanged: diff.unchanged.clone(),
            sessions_ended: ended,
            restart_needed: restart_needed.iter().map(|s| (*s).to_owned()).collect(),
            incomplete,
        };
        tracing::info!(
            file = %path.display(),
            trigger = trigger.as_str(),
            added = ?summary.added,
            removed = ?summary.removed,
            changed = ?summary.changed,
            unchanged = summary.unchanged.len(),
            "Reloaded the config."
        );
        for change in &diff.to_change {
            tracing::info!(upstream = %change.name, settings = ?change.settings, "The upstream's settings changed; it was replaced.");
        }
        for setting in &restart_needed {
            tracing::warn!(file = %path.display(), setting, "This setting changed in the file but cannot change while mcpmux runs; it keeps its running value until a restart.");
        }
        self.parts.audit.record(Record::event(
            "config.reloaded",
            None,
            None,
            serde_json::to_string(&summary).ok(),
        ));
        *lock(&self.digest) = digest(text.as_deref());
        running.text = text;
        self.current.store(Arc::new(next));
        Ok(summary)
    }

    /// Records a config that cannot be used: logged, audited; the running config stays.
    fn refuse(&self, trigger: Trigger, error: ReloadError) -> ReloadError {
        tracing::error!(trigger = trigger.as_str(), error = %error, "The changed config is not valid; mcpmux keeps running the previous one.");
        self.parts.audit.record(Record::event(
            "config.rejected",
            None,
            None,
            Some(error.to_string()),
        ));
        error
    }
}

impl crate::admin::Reload for Reloader {
    fn reload(&self) -> futures_util::future::BoxFuture<'_, Result<ReloadChanges, ReloadError>> {
        Box::pin(Self::reload(self, Trigger::Admin))
    }

    fn status(&self) -> ConfigStatus {
        Self::status(self)
    }

    fn secret_keys(&self) -> config::SecretKeys {
        self.current().audit.secret_keys.clone()
    }
}

/// Reloads on SIGHUP, and when the config file changes ([`config::watch_file`]).
pub fn spawn_triggers(reloader: Arc<Reloader>) {
    let mut changes = config::watch_file(reloader.current().source.clone());
    let files = Arc::clone(&reloader);
    tokio::spawn(async move {
        while changes.recv().await.is_some() {
            let _ = files.reload(Trigger::File).await;
        }
    });
    tokio::spawn(async move {
        use tokio::signal::unix::{SignalKind, signal};
        let Ok(mut hup) = signal(SignalKind::hangup()) else {
            tracing::warn!("Cannot listen for SIGHUP; reload with `mcpmux reload` instead.");
            return;
        };
        while hup.recv().await.is_some() {
            tracing::info!("Received SIGHUP.");
            let _ = reloader.reload(Trigger::Signal).await;
        }
    });
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn config(text: &str) -> Config {
        let path = Path::new("/tmp/mcpmux-reload/mcpmux.toml");
        config::parse(path, text).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn no_flags_leave_the_file_as_it_is() {
        let mut applied = config("[upstreams.a]\ncommand = \"x\"\n");
        Overrides::default().apply(&mut applied);
        let file = config("[upstreams.a]\ncommand = \"x\"\n");
        assert!(ConfigDiff::of(&file, &applied).is_empty());
        assert_eq!(applied.admin, file.admin);
    }

    #[test]
    fn the_flags_set_listen_admin_and_the_state_dir_over_the_file() {
        let mut applied = config("[upstreams.a]\ncommand = \"x\"\n");
        let overrides = Overrides {
            listen: Some("127.0.0.1:9100".parse().unwrap_or_else(|e| panic!("{e}"))),
            admin: Some(None),
            state_dir: Some("/var/lib/mcpmux-test".into()),
            replica: None,
        };
        overrides.apply(&mut applied);
        assert_eq!(applied.server.listen.port(), 9100);
        assert_eq!(applied.admin, None);
        assert_eq!(applied.state_dir, Path::new("/var/lib/mcpmux-test"));
        // `--state-dir` moves the audit store too.
        assert_eq!(applied.audit.dir, Path::new("/var/lib/mcpmux-test/audit"));
    }

    #[test]
    fn a_reload_applying_the_same_flags_again_sees_no_fixed_change() {
        let overrides = Overrides {
            listen: Some("127.0.0.1:9100".parse().unwrap_or_else(|e| panic!("{e}"))),
            admin: None,
            state_dir: Some("/var/lib/mcpmux-test".into()),
            replica: Some("b".into()),
        };
        let mut running = config("");
        overrides.apply(&mut running);
        // The file now says another address; the flag still wins.
        let mut next = config("[server]\nlisten = \"127.0.0.1:9200\"\n");
        overrides.apply(&mut next);
        assert!(ConfigDiff::of(&running, &next).fixed.is_empty());
    }

    #[test]
    fn each_trigger_is_named_for_the_log() {
        assert_eq!(Trigger::File.as_str(), "the config file changed");
        assert_eq!(Trigger::Signal.as_str(), "SIGHUP");
        assert_eq!(Trigger::Admin.as_str(), "the admin API");
    }
}
