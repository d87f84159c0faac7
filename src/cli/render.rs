//! What the CLI prints for people: plain left-aligned tables of the config's upstreams, hosts and
//! profiles, of the daemon's status, of its tools and of its tool pins.

use crate::api::{Pins, ReloadChanges, SessionStatus, Status};
use crate::config::{Config, Credential, Transport};

/// A plain left-aligned text table.
fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        padded.join("  ").trim_end().to_owned() + "\n"
    };
    let mut out = line(headers.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

/// A tool as `tools/list` lists it: what `mcpmux tools` prints of it (the rest is ignored).
#[derive(Debug, Clone, serde::Deserialize)]
pub(super) struct ListedTool {
    pub name: String,
    /// The rest of its definition (title, description, input schema), as listed.
    #[serde(flatten)]
    pub definition: serde_json::Value,
}

impl ListedTool {
    fn description(&self) -> &str {
        self.definition["description"].as_str().unwrap_or_default()
    }
}

/// `mcpmux tools`: each tool's name and the first line of its description.
pub(super) fn tools_table(tools: &[ListedTool]) -> String {
    let rows: Vec<Vec<String>> = tools
        .iter()
        .map(|tool| vec![tool.name.clone(), first_line(tool.description(), 80)])
        .collect();
    table(&["TOOL", "DESCRIPTION"], &rows)
}

/// `mcpmux tools --search`: the tools found, best first, with the terms each matched.
pub(super) fn search_table(found: &crate::api::ToolSearch) -> String {
    let rows: Vec<Vec<String>> = (found.tools.iter())
        .map(|tool| {
            vec![
                tool.name.clone(),
                tool.score.map_or("exact".to_owned(), |s| format!("{s:.2}")),
                tool.matched.join(" "),
                first_line(tool.description.as_deref().unwrap_or_default(), 60),
            ]
        })
        .collect();
    let mut out = table(&["TOOL", "SCORE", "MATCHED", "DESCRIPTION"], &rows);
    let view = found
        .profile
        .as_deref()
        .map_or("the whole catalog".to_owned(), |p| format!("profile {p}"));
    out.push_str(&format!(
        "{} of {} tools in {view} (generation {})\n",
        found.tools.len(),
        found.indexed,
        found.generation
    ));
    out
}

/// The first line of `text`, cut to `chars` characters.
fn first_line(text: &str, chars: usize) -> String {
    text.lines()
        .next()
        .unwrap_or_default()
        .chars()
        .take(chars)
        .collect()
}

/// Names as a list, or `-` for none.
fn names(list: &[String]) -> String {
    if list.is_empty() {
        "-".into()
    } else {
        list.join(", ")
    }
}

/// `mcpmux reload`: what the reload changed.
pub(super) fn reload_summary(changes: &ReloadChanges) -> String {
    let mut out = format!(
        "reloaded: added {}; removed {}; changed {}; {} unchanged\n",
        names(&changes.added),
        names(&changes.removed),
        names(&changes.changed),
        changes.unchanged.len(),
    );
    if changes.sessions_ended > 0 {
        out.push_str(&format!(
            "{} host sessions ended: the new config no longer admits them\n",
            changes.sessions_ended
        ));
    }
    if !changes.restart_needed.is_empty() {
        out.push_str(&format!(
            "needs a restart to take effect (running with the old value): {}\n",
            names(&changes.restart_needed)
        ));
    }
    for problem in &changes.incomplete {
        out.push_str(&format!("NOT FINISHED: {problem}\n"));
    }
    out
}

/// `mcpmux sessions`: one row per open host session.
pub(super) fn sessions_table(sessions: &[SessionStatus]) -> String {
    let rows: Vec<Vec<String>> = (sessions.iter())
        .map(|s| {
            let or_dash = |v: &Option<String>| v.as_deref().unwrap_or("-").to_owned();
            vec![
                s.id.clone(),
                or_dash(&s.principal),
                or_dash(&s.profile),
                or_dash(&s.client),
                s.protocol_version.clone(),
                humantime::format_duration(std::time::Duration::from_secs(s.age_seconds))
                    .to_string(),
                s.in_flight.to_string(),
            ]
        })
        .collect();
    table(
        &[
            "SESSION",
            "PRINCIPAL",
            "PROFILE",
            "CLIENT",
            "VERSION",
            "AGE",
            "IN-FLIGHT",
        ],
        &rows,
    )
}

/// The first 90 characters of `text`.
fn first_90(text: &str) -> String {
    text.chars().take(90).collect()
}

/// `mcpmux status`: the daemon, then one row per upstream.
// Long: one column per field of an upstream's status, in the order the table shows them.
pub(super) fn status_table(status: &Status) -> String {
    let rows: Vec<Vec<String>> = (status.upstreams.iter())
        .map(|u| {
            vec![
                u.name.clone(),
                u.state.clone(),
                u.transport.clone(),
                u.protocol_version.as_deref().unwrap_or("-").to_owned(),
                u.tools.to_string(),
                u.restarts.to_string(),
                u.in_flight.to_string(),
                match (u.latency_p50_ms, u.latency_p99_ms) {
                    (Some(p50), Some(p99)) => format!("{p50}/{p99}"),
                    _ => "-".into(),
                },
                // A ready upstream's last HTTP error is history (the remote table keeps it).
                first_90(
                    (u.last_error.as_deref())
                        .or((u.last_http_error.as_deref()).filter(|_| u.state != "ready"))
                        .unwrap_or(""),
                ),
            ]
        })
        .collect();
    let mut out = format!(
        "mcpmux {} — {} of {} host sessions, catalog generation {}\n",
        status.version, status.sessions, status.max_sessions, status.catalog_generation
    );
    let config = &status.config;
    out.push_str(&format!(
        "config {} — {} reloads, {} refused\n",
        config.file, config.reloads, config.rejected
    ));
    let last = config.last_reload.as_ref();
    if let Some(error) = last.and_then(|r| r.error.as_deref()) {
        out.push_str(&format!(
            "THE CONFIG FILE IS NOT RUNNING (the previous one is): {error}\n"
        ));
    }
    let changes = last.and_then(|r| r.changes.as_ref());
    for problem in changes.into_iter().flat_map(|c| &c.incomplete) {
        out.push_str(&format!(
            "THE LAST RELOAD DID NOT FINISH CLEANLY: {problem}\n"
        ));
    }
    out.push_str(&table(
        &[
            "UPSTREAM",
            "STATE",
            "TRANSPORT",
            "VERSION",
            "TOOLS",
            "RESTARTS",
            "IN-FLIGHT",
            "P50/P99 MS",
            "LAST ERROR",
        ],
        &rows,
    ));
    let or_dash = |v: &Option<String>| first_90(v.as_deref().unwrap_or("-"));
    let remote: Vec<Vec<String>> = (status.upstreams.iter())
        .filter_map(|u| {
            Some(vec![
                first_90(&u.name),
                u.url.clone()?,
                or_dash(&u.http_session),
                or_dash(&u.last_http_error),
            ])
        })
        .collect();
    let hosts: Vec<Vec<String>> = (status.hosts.iter())
        .map(|h| {
            let limit = |v: Option<f64>| v.map_or("-".to_owned(), |v| v.to_string());
            let count = |v: Option<usize>| limit(v.map(|v| v as f64));
            vec![
                h.name.clone(),
                h.in_flight.to_string(),
                h.requests.to_string(),
                h.refused.to_string(),
                count(h.max_in_flight),
                limit(h.max_calls_per_second),
                h.sessions.to_string(),
                count(h.max_sessions),
            ]
        })
        .collect();
    if !hosts.is_empty() {
        out.push('\n');
        out.push_str(&table(
            &[
                "HOST",
                "IN-FLIGHT",
                "REQUESTS",
                "REFUSED",
                "MAX IN-FLIGHT",
                "MAX PER SECOND",
                "SESSIONS",
                "MAX SESSIONS",
            ],
            &hosts,
        ));
    }
    if !remote.is_empty() {
        out.push('\n');
        out.push_str(&table(
            &["REMOTE", "URL", "HTTP SESSION", "LAST HTTP ERROR"],
            &remote,
        ));
    }
    for u in &status.upstreams {
        if let Some(principals) = u.principals {
            out.push_str(&format!(
                "\n{} acts as each caller's own identity: {principals} principal(s) with an instance running\n",
                u.name
            ));
        }
        if let Some(signed_in) = u.signed_in {
            out.push_str(&format!(
                "{} signs each principal in on their own: {signed_in} signed in (mcpmux login {} --principal P makes a link, logout revokes)\n",
                u.name, u.name
            ));
        }
        if !u.changed_tools.is_empty() {
            let fate = if u.pin == "strict" {
                "withheld until approved"
            } else {
                "still shown"
            };
            out.push_str(&format!(
                "\nchanged tool definitions of {} ({fate}; review, then `mcpmux approve {} TOOL`): {}\n",
                u.name,
                u.name,
                u.changed_tools.join(", ")
            ));
        }
    }
    out
}

/// `mcpmux pins`: one row per pinned tool; a changed one shows its new digest.
pub(super) fn pins(pins: &Pins) -> String {
    let short =
        |digest: Option<&str>| digest.map_or("-".to_owned(), |d| d.chars().take(12).collect());
    let rows: Vec<Vec<String>> = (pins.pins.iter())
        .map(|p| {
            vec![
                p.upstream.clone(),
                p.tool.clone(),
                short(Some(&p.digest)),
                if p.changed_to.is_some() {
                    "CHANGED".to_owned()
                } else {
                    "pinned".to_owned()
                },
                short(p.changed_to.as_deref()),
            ]
        })
        .collect();
    table(&["UPSTREAM", "TOOL", "PINNED", "STATE", "NOW"], &rows)
}

/// Words in a stdio upstream's command line that say it keeps state of its own on the machine
/// it runs on (the reference servers `memory` and `filesystem`, databases in a file, a git
/// checkout).
const STATEFUL: [&str; 5] = ["memory", "filesystem", "sqlite", "git", "duckdb"];

/// What would diverge across the replicas of a `[cluster]`: each replica runs its own copy of
/// every stdio upstream, so one that keeps state (a knowledge graph in a file, a directory, a
/// database file) keeps one per replica.
pub(super) fn cluster_warnings(config: &Config) -> Vec<String> {
    let Some(cluster) = &config.cluster else {
        return Vec::new();
    };
    let mut warnings = Vec::new();
    for u in config.upstreams.iter().filter(|u| u.enabled) {
        let Transport::Stdio(stdio) = &u.transport else {
            continue;
        };
        let line = std::iter::once(&stdio.command)
            .chain(&stdio.args)
            .map(|a| a.to_ascii_lowercase())
            .collect::<Vec<_>>()
            .join(" ");
        if let Some(word) = STATEFUL.iter().find(|w| line.contains(*w)) {
            warnings.push(format!(
                "upstream `{}` is a stdio server that looks stateful ({word}): replica `{}` and every other runs a copy of its own, and their state diverges; give it storage all replicas share, or run it once as a remote upstream they all call",
                u.name, cluster.replica
            ));
        }
    }
    warnings
}

// Long: one column per field of the upstream table, in the order it shows them.
/// `mcpmux check`: the config is valid, then one row per upstream.
pub(super) fn upstream_table(config: &Config) -> String {
    let rows: Vec<Vec<String>> = config
        .upstreams
        .iter()
        .map(|u| {
            let (transport, program, target) = match &u.transport {
                Transport::Stdio(stdio) => {
                    let command = std::iter::once(stdio.command.as_str())
                        .chain(stdio.args.iter().map(String::as_str))
                        .collect::<Vec<_>>()
                        .join(" ");
                    let found = if program_exists(&stdio.command) {
                        "found"
                    } else {
                        "NOT FOUND"
                    };
                    ("stdio", found, command)
                }
                Transport::Remote(remote) => (remote.kind.as_str(), "-", remote.url.to_string()),
            };
            vec![
                u.name.clone(),
                if u.prefix.is_none() {
                    "(none)".into()
                } else {
                    u.prefix.to_string()
                },
                if u.enabled { "yes".into() } else { "no".into() },
                transport.to_owned(),
                program.to_owned(),
                format!("{}s", u.policy.request_timeout.as_secs()),
                target,
            ]
        })
        .collect();
    let mut out = format!(
        "config {} is valid; listening on {}\n",
        config.source.display(),
        config.server.listen
    );
    out.push_str(&table(
        &[
            "UPSTREAM",
            "PREFIX",
            "ENABLED",
            "TRANSPORT",
            "PROGRAM",
            "TIMEOUT",
            "TARGET",
        ],
        &rows,
    ));
    for warning in cluster_warnings(config) {
        out.push_str(&format!("warning: {warning}\n"));
    }
    let hosts: Vec<Vec<String>> = (config.hosts.iter())
        .map(|h| {
            let credential = match &h.credential {
                Credential::Token { .. } => "token".to_owned(),
                Credential::Jwt { subject, issuer } => format!(
                    "JWT sub={subject} from {}",
                    issuer
                        .as_ref()
                        .map_or("[server.authorization]", |i| i.issuer.as_str())
                ),
            };
            vec![
                h.name.clone(),
                credential,
                h.profile.clone().unwrap_or_else(|| "(everything)".into()),
            ]
        })
        .collect();
    if !hosts.is_empty() {
        out.push('\n');
        out.push_str(&table(&["HOST", "CREDENTIAL", "PROFILE"], &hosts));
    }
    let profiles: Vec<Vec<String>> = (config.profiles.iter())
        .map(|p| {
            vec![
                p.name.clone(),
                p.upstreams
                    .as_ref()
                    .map_or("(all)".into(), |u| u.join(", ")),
                if p.path {
                    format!("/mcp/{}", p.name)
                } else {
                    "-".into()
                },
                if p.unprefixed { "no" } else { "yes" }.into(),
            ]
        })
        .collect();
    if !profiles.is_empty() {
        out.push('\n');
        out.push_str(&table(
            &["PROFILE", "UPSTREAMS", "PATH", "PREFIXED"],
            &profiles,
        ));
    }
    out
}

/// Whether `command` names an existing file, directly or on PATH.
fn program_exists(command: &str) -> bool {
    if command.contains('/') {
        return std::path::Path::new(command).is_file();
    }
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(command).is_file()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{AuditStatus, ConfigStatus, HostStatus, LastReload};

    #[test]
    fn check_warns_of_stateful_stdio_upstreams_in_a_cluster_only() {
        let upstreams = "[upstreams.memory]\ncommand = \"npx\"\nargs = [\"-y\", \"@modelcontextprotocol/server-memory\"]\n\
                         [upstreams.time]\ncommand = \"uvx\"\nargs = [\"mcp-server-time\"]\n";
        let alone = crate::config::parse(std::path::Path::new("m.toml"), upstreams)
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(cluster_warnings(&alone).is_empty());
        let text = format!(
            "[server]\ncursor_keys = \"k\"\n[cluster]\nreplica = \"a\"\npeer_url = \"http://{{replica}}:7332\"\n{upstreams}"
        );
        let fleet = crate::config::parse(std::path::Path::new("m.toml"), &text)
            .unwrap_or_else(|e| panic!("{e}"));
        let warnings = cluster_warnings(&fleet);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains("`memory`") && warnings[0].contains("diverges"));
    }

    fn changes(incomplete: &[&str]) -> ReloadChanges {
        ReloadChanges {
            added: vec!["new".into()],
            unchanged: vec!["a".into(), "b".into()],
            sessions_ended: 2,
            incomplete: incomplete.iter().map(|s| (*s).to_owned()).collect(),
            ..ReloadChanges::default()
        }
    }

    #[test]
    fn a_reload_summary_says_what_changed_and_what_did_not_finish() {
        let text = reload_summary(&changes(&["`far` still had 1 request"]));
        assert_eq!(
            text,
            "reloaded: added new; removed -; changed -; 2 unchanged\n\
             2 host sessions ended: the new config no longer admits them\n\
             NOT FINISHED: `far` still had 1 request\n"
        );
    }

    #[test]
    fn status_shows_the_daemon_its_config_hosts_and_remote_upstreams() {
        let status = Status {
            replica: None,
            version: "0.1.0".into(),
            catalog_generation: 3,
            sessions: 1,
            max_sessions: 64,
            config: ConfigStatus {
                digest: String::new(),
                file: "/etc/mcpmux.toml".into(),
                reloads: 1,
                rejected: 1,
                last_reload: Some(LastReload {
                    at: "2026-12-02T00:00:00Z".into(),
                    trigger: Some("file".into()),
                    applied: false,
                    error: Some("line 3: bad".into()),
                    changes: None,
                }),
            },
            hosts: vec![HostStatus {
                name: "ci".into(),
                profile: None,
                in_flight: 0,
                requests: 9,
                refused: 1,
                max_in_flight: Some(4),
                max_calls_per_second: Some(2.5),
                max_sessions: None,
                sessions: 1,
            }],
            upstreams: Vec::new(),
            audit: AuditStatus {
                enabled: false,
                queued: 0,
                dropped: 0,
                records: None,
            },
        };
        let text = status_table(&status);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[..3],
            [
                "mcpmux 0.1.0 — 1 of 64 host sessions, catalog generation 3",
                "config /etc/mcpmux.toml — 1 reloads, 1 refused",
                "THE CONFIG FILE IS NOT RUNNING (the previous one is): line 3: bad",
            ]
        );
        let host = lines.iter().find(|l| l.starts_with("ci ")).unwrap_or(&"");
        let cells: Vec<&str> = host.split_whitespace().collect();
        assert_eq!(cells, ["ci", "0", "9", "1", "4", "2.5", "1", "-"]);
        assert!(
            !text.contains("REMOTE"),
            "no remote upstream, no remote table"
        );
    }
}
