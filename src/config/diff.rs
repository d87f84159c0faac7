//! What a reload changes: the difference between the running config and a newly validated one,
//! as a value. Upstreams to add, to change and to remove, by name (in the order of the file that
//! holds them); and the fixed settings — those read once at startup (listeners, the state
//! directory, the audit log, …) — that the new file changed, compared as values and named by
//! their key, so the reload can say "restart to apply `server.listen`". Whether an upstream
//! changed is decided here, once: the reload acts on this answer and compares nothing itself.
//!
//! Every change to an upstream's settings replaces it (a new process or connection); nothing of
//! one upstream is applied live. Hosts, profiles, catalog settings and session limits are not
//! diffed: a reload applies them whole, to open sessions too.

use super::{Config, UpstreamConfig};

/// The difference between the running config and the next one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConfigDiff {
    /// Upstreams only the next config has.
    pub to_add: Vec<String>,
    /// Upstreams both have, with different settings: each is replaced.
    pub to_change: Vec<Changed>,
    /// Upstreams only the running config has.
    pub to_remove: Vec<String>,
    /// Upstreams both have with the same settings: not touched (process, sessions, log levels).
    pub unchanged: Vec<String>,
    /// Fixed settings the next config changed: they keep their running value until a restart.
    pub fixed: Vec<Fixed>,
}

/// An upstream whose settings changed, and which of them did (for the log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changed {
    pub name: String,
    /// The settings that differ, by key (`transport`, `policy`, …).
    pub settings: Vec<&'static str>,
    /// The next config disables it: its catalog leaves at once, as no successor will publish one.
    pub disabled: bool,
}

impl ConfigDiff {
    /// What replacing `now` with `next` changes.
    pub fn of(now: &Config, next: &Config) -> Self {
        let mut diff = Self::default();
        for u in &next.upstreams {
            match now.upstreams.iter().find(|o| o.name == u.name) {
                None => diff.to_add.push(u.name.clone()),
                Some(old) => {
                    let settings = changed_settings(old, u);
                    if settings.is_empty() {
                        diff.unchanged.push(u.name.clone());
                    } else {
                        diff.to_change.push(Changed {
                            name: u.name.clone(),
                            settings,
                            disabled: !u.enabled,
                        });
                    }
                }
            }
        }
        for old in &now.upstreams {
            if !next.upstreams.iter().any(|u| u.name == old.name) {
                diff.to_remove.push(old.name.clone());
            }
        }
        diff.fixed = (Fixed::ALL.into_iter())
            .filter(|f| f.differs(now, next))
            .collect();
        diff
    }

    /// Whether the upstream `name` stays as it runs (neither added nor changed).
    pub fn keeps(&self, name: &str) -> bool {
        self.unchanged.iter().any(|n| n == name)
    }

    /// The names of the changed upstreams.
    pub fn changed_names(&self) -> Vec<String> {
        self.to_change.iter().map(|c| c.name.clone()).collect()
    }

    /// Puts back into `next` the running value of each fixed setting it changed, so what runs
    /// is what the daemon started with.
    pub fn keep_fixed(&self, now: &Config, next: &mut Config) {
        for fixed in &self.fixed {
            fixed.keep(now, next);
        }
    }

    /// The keys of the fixed settings the next config changed.
    pub fn restart_needed(&self) -> Vec<&'static str> {
        self.fixed.iter().map(|f| f.key()).collect()
    }

    /// Whether the next config changes nothing this diff sees.
    pub fn is_empty(&self) -> bool {
        self.to_add.is_empty()
            && self.to_change.is_empty()
            && self.to_remove.is_empty()
            && self.fixed.is_empty()
    }
}

/// The settings of one upstream that differ between `old` and `new`, by key. Destructured
/// whole, so a setting added to [`UpstreamConfig`] cannot be left out of the comparison.
fn changed_settings(old: &UpstreamConfig, new: &UpstreamConfig) -> Vec<&'static str> {
    let UpstreamConfig {
        name: _,
        prefix,
        transport,
        enabled,
        policy,
        isolation,
        credentials,
        protocol,
        pin,
        roots,
        audit_redaction,
        audit_redaction_tools,
        max_instances,
    } = old;
    let mut changed = Vec::new();
    let mut check = |differs: bool, key| {
        if differs {
            changed.push(key);
        }
    };
    check(*prefix != new.prefix, "prefix");
    check(*transport != new.transport, "transport");
    check(*enabled != new.enabled, "enabled");
    check(*policy != new.policy, "policy");
    check(*isolation != new.isolation, "isolation");
    check(*credentials != new.credentials, "credentials");
    check(*protocol != new.protocol, "protocol");
    check(*pin != new.pin, "pin");
    check(*roots != new.roots, "roots");
    check(*audit_redaction != new.audit_redaction, "audit_redaction");
    check(
        *audit_redaction_tools != new.audit_redaction_tools,
        "audit_redaction_tools",
    );
    check(*max_instances != new.max_instances, "max_instances");
    changed
}

/// A setting read once, when mcpmux starts: a reload that changes it reports that a restart is
/// needed and keeps the running value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fixed {
    Listen,
    Admin,
    AdminAccess,
    StateDir,
    Audit,
    SessionIdleTimeout,
    /// The listeners' bounds are set when they start (`src/listener.rs`).
    MaxConnections,
    HeaderTimeout,
    /// Read when the host service starts.
    CursorKeys,
    /// Sign-in links already handed out name it.
    PublicUrl,
    /// The runtime is built with them, before anything runs.
    Workers,
    Telemetry,
    /// Each upstream is handed it when it is made (`RouterHandle::link`).
    ListingBudget,
    /// `[cluster]`: the replica name and its peers.
    Cluster,
}

impl Fixed {
    /// Every fixed setting, in the order a reload names them.
    pub const ALL: [Self; 14] = [
        Self::Listen,
        Self::Admin,
        Self::AdminAccess,
        Self::StateDir,
        Self::Audit,
        Self::SessionIdleTimeout,
        Self::MaxConnections,
        Self::HeaderTimeout,
        Self::CursorKeys,
        Self::PublicUrl,
        Self::Workers,
        Self::Telemetry,
        Self::ListingBudget,
        Self::Cluster,
    ];

    /// The setting as the file writes it.
    pub fn key(self) -> &'static str {
        match self {
            Self::Listen => "server.listen",
            Self::Admin => "admin.listen",
            Self::AdminAccess => "admin.token_file / admin.allow_remote",
            Self::StateDir => "state_dir",
            Self::Audit => "audit",
            Self::SessionIdleTimeout => "server.session_idle_timeout",
            Self::MaxConnections => "server.max_connections",
            Self::HeaderTimeout => "server.header_timeout",
            Self::CursorKeys => "server.cursor_keys",
            Self::PublicUrl => "server.public_url",
            Self::Workers => "server.workers",
            Self::Telemetry => "telemetry",
            Self::ListingBudget => {
                "catalog.max_items_per_upstream / max_bytes_per_upstream / max_definition_bytes"
            }
            Self::Cluster => "cluster",
        }
    }

    fn differs(self, now: &Config, next: &Config) -> bool {
        match self {
            Self::Listen => now.server.listen != next.server.listen,
            Self::Admin => now.admin != next.admin,
            Self::AdminAccess => now.admin_access != next.admin_access,
            Self::StateDir => now.state_dir != next.state_dir,
            Self::Audit => now.audit != next.audit,
            Self::SessionIdleTimeout => {
                now.server.session_idle_timeout != next.server.session_idle_timeout
            }
            Self::MaxConnections => now.server.max_connections != next.server.max_connections,
            Self::HeaderTimeout => now.server.header_timeout != next.server.header_timeout,
            Self::CursorKeys => now.server.cursor_keys != next.server.cursor_keys,
            Self::PublicUrl => now.server.public_url != next.server.public_url,
            Self::Workers => now.server.workers != next.server.workers,
            Self::Telemetry => now.telemetry != next.telemetry,
            Self::ListingBudget => now.catalog.budget != next.catalog.budget,
            Self::Cluster => now.cluster != next.cluster,
        }
    }

    /// Copies the running value of this setting from `now` into `next`.
    fn keep(self, now: &Config, next: &mut Config) {
        match self {
            Self::Listen => next.server.listen = now.server.listen,
            Self::Admin => next.admin = now.admin,
            Self::AdminAccess => next.admin_access.clone_from(&now.admin_access),
            Self::StateDir => next.state_dir.clone_from(&now.state_dir),
            Self::Audit => next.audit.clone_from(&now.audit),
            Self::SessionIdleTimeout => {
                next.server.session_idle_timeout = now.server.session_idle_timeout;
            }
            Self::MaxConnections => next.server.max_connections = now.server.max_connections,
            Self::HeaderTimeout => next.server.header_timeout = now.server.header_timeout,
            Self::CursorKeys => next.server.cursor_keys.clone_from(&now.server.cursor_keys),
            Self::PublicUrl => next.server.public_url.clone_from(&now.server.public_url),
            Self::Workers => next.server.workers = now.server.workers,
            Self::Telemetry => next.telemetry.clone_from(&now.telemetry),
            Self::ListingBudget => next.catalog.budget = now.catalog.budget,
            Self::Cluster => next.cluster.clone_from(&now.cluster),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    const BASE: &str = "state_dir = \"/tmp/mcpmux-diff\"\n[server]\nlisten = \"127.0.0.1:7400\"\n";

    fn config(text: &str) -> Config {
        let path = Path::new("/tmp/mcpmux-diff/mcpmux.toml");
        crate::config::parse(path, &format!("{BASE}{text}")).unwrap_or_else(|e| panic!("{e}"))
    }

    fn upstream(name: &str, command: &str) -> String {
        format!("[upstreams.{name}]\ncommand = \"{command}\"\n")
    }

    #[test]
    fn the_same_file_changes_nothing() {
        let text = [upstream("a", "x"), upstream("b", "y")].concat();
        let diff = ConfigDiff::of(&config(&text), &config(&text));
        assert!(diff.is_empty(), "{diff:?}");
        assert_eq!(diff.unchanged, ["a", "b"]);
        assert!(diff.keeps("a") && diff.keeps("b"));
    }

    #[test]
    fn a_new_upstream_is_to_add() {
        let now = config(&upstream("a", "x"));
        let next = config(&[upstream("a", "x"), upstream("b", "y")].concat());
        let diff = ConfigDiff::of(&now, &next);
        assert_eq!(diff.to_add, ["b"]);
        assert_eq!(diff.unchanged, ["a"]);
        assert!(diff.to_change.is_empty() && diff.to_remove.is_empty());
        assert!(!diff.keeps("b"));
    }

    #[test]
    fn a_missing_upstream_is_to_remove() {
        let now = config(&[upstream("a", "x"), upstream("b", "y")].concat());
        let next = config(&upstream("b", "y"));
        let diff = ConfigDiff::of(&now, &next);
        assert_eq!(diff.to_remove, ["a"]);
        assert_eq!(diff.unchanged, ["b"]);
        assert!(diff.to_add.is_empty() && diff.to_change.is_empty());
    }

    #[test]
    fn a_new_command_is_a_change_of_transport() {
        let now = config(&upstream("a", "x"));
        let next = config(&upstream("a", "z"));
        let diff = ConfigDiff::of(&now, &next);
        let expected = Changed {
            name: "a".into(),
            settings: vec!["transport"],
            disabled: false,
        };
        assert_eq!(diff.to_change, [expected]);
        assert_eq!(diff.changed_names(), ["a"]);
        assert!(diff.unchanged.is_empty() && !diff.keeps("a"));
    }

    #[test]
    fn a_policy_change_is_named() {
        let now = config(&upstream("a", "x"));
        let next = config(&format!("{}request_timeout = \"7s\"\n", upstream("a", "x")));
        let diff = ConfigDiff::of(&now, &next);
        assert_eq!(diff.to_change.len(), 1);
        assert_eq!(diff.to_change[0].settings, ["policy"]);
    }

    #[test]
    fn several_changes_of_one_upstream_are_each_named() {
        let now = config(&upstream("a", "x"));
        let next = config(&format!(
            "{}prefix = \"other\"\nrequest_timeout = \"7s\"\n",
            upstream("a", "z")
        ));
        let diff = ConfigDiff::of(&now, &next);
        assert_eq!(
            diff.to_change[0].settings,
            ["prefix", "transport", "policy"]
        );
    }

    #[test]
    fn disabling_an_upstream_changes_it_and_says_so() {
        let now = config(&upstream("a", "x"));
        let next = config(&format!("{}enabled = false\n", upstream("a", "x")));
        let diff = ConfigDiff::of(&now, &next);
        assert_eq!(diff.to_change.len(), 1);
        assert!(diff.to_change[0].disabled);
        assert_eq!(diff.to_change[0].settings, ["enabled"]);
        // Enabling it again is a change too, and its successor will publish.
        let back = ConfigDiff::of(&next, &now);
        assert!(!back.to_change[0].disabled);
    }

    #[test]
    fn reordering_upstreams_changes_nothing() {
        let now = config(&[upstream("a", "x"), upstream("b", "y")].concat());
        let next = config(&[upstream("b", "y"), upstream("a", "x")].concat());
        let diff = ConfigDiff::of(&now, &next);
        assert!(diff.is_empty(), "{diff:?}");
        assert_eq!(diff.unchanged.len(), 2);
    }

    #[test]
    fn a_rename_is_a_removal_and_an_addition() {
        let now = config(&upstream("a", "x"));
        let next = config(&upstream("b", "x"));
        let diff = ConfigDiff::of(&now, &next);
        assert_eq!(diff.to_add, ["b"]);
        assert_eq!(diff.to_remove, ["a"]);
    }

    #[test]
    fn a_new_listen_address_is_a_fixed_setting_kept_at_its_running_value() {
        let now = config(&upstream("a", "x"));
        let mut next = config(&upstream("a", "x"));
        next.server.listen = "127.0.0.1:7401".parse().unwrap_or_else(|e| panic!("{e}"));
        let diff = ConfigDiff::of(&now, &next);
        assert_eq!(diff.fixed, [Fixed::Listen]);
        assert_eq!(diff.restart_needed(), ["server.listen"]);
        assert!(!diff.is_empty());
        diff.keep_fixed(&now, &mut next);
        assert_eq!(next.server.listen, now.server.listen);
        assert!(ConfigDiff::of(&now, &next).fixed.is_empty());
    }

    #[test]
    fn audit_settings_are_compared_as_values() {
        let now = config("");
        let same = config("");
        assert!(ConfigDiff::of(&now, &same).fixed.is_empty());
        let next = config("[audit]\nsecret_keys = [\"pin\"]\n");
        let diff = ConfigDiff::of(&now, &next);
        assert_eq!(diff.restart_needed(), ["audit"]);
    }

    #[test]
    fn several_fixed_settings_are_named_in_order_and_all_kept() {
        let now = config("");
        let mut next = config(
            "[admin]\nlisten = \"127.0.0.1:7999\"\n[catalog]\nmax_items_per_upstream = 5\n[telemetry]\notlp_endpoint = \"http://127.0.0.1:4318\"\n",
        );
        next.server.header_timeout = std::time::Duration::from_secs(99);
        next.server.workers = now.server.workers + 1;
        let diff = ConfigDiff::of(&now, &next);
        assert_eq!(
            diff.restart_needed(),
            [
                "admin.listen",
                "server.header_timeout",
                "server.workers",
                "telemetry",
                "catalog.max_items_per_upstream / max_bytes_per_upstream / max_definition_bytes"
            ]
        );
        diff.keep_fixed(&now, &mut next);
        assert!(ConfigDiff::of(&now, &next).is_empty());
    }

    #[test]
    fn live_settings_are_not_fixed() {
        let now = config("");
        let mut next = config("");
        next.server.max_sessions += 1;
        next.server.drain_timeout *= 2;
        next.catalog.cursor_retention *= 2;
        assert!(ConfigDiff::of(&now, &next).is_empty());
    }

    #[test]
    fn every_fixed_setting_has_its_own_key() {
        let keys: std::collections::BTreeSet<_> = Fixed::ALL.iter().map(|f| f.key()).collect();
        assert_eq!(keys.len(), Fixed::ALL.len());
    }
}
