//! What the CLI prints for people: plain left-aligned tables of the config's upstreams, hosts and
//! profiles, of the daemon's status, of its tools and of its tool pins.

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

/// `mcpmux tools`: each tool's name and the first line of its description.
pub(super) fn tools_table(tools: &[serde_json::Value]) -> String {
    let rows: Vec<Vec<String>> = tools
        .iter()
        .map(|tool| {
            let description = tool["description"]
                .as_str()
                .unwrap_or_default()
                .lines()
                .next()
                .unwrap_or_default();
            vec![
                tool["name"].as_str().unwrap_or_default().to_owned(),
                description.chars().take(80).collect(),
            ]
        })
        .collect();
    table(&["TOOL", "DESCRIPTION"], &rows)
}

/// `mcpmux reload`: what the reload changed.
pub(super) fn reload_summary(changes: &serde_json::Value) -> String {
    let names = |k: &str| -> String {
        let list: Vec<&str> = (changes[k].as_array().into_iter().flatten())
            .filter_map(|v| v.as_str())
            .collect();
        if list.is_empty() {
            "-".into()
        } else {
            list.join(", ")
        }
    };
    let mut out = format!(
        "reloaded: added {}; removed {}; changed {}; {} unchanged\n",
        names("added"),
        names("removed"),
        names("changed"),
        changes["unchanged"].as_array().map_or(0, Vec::len),
    );
    if changes["sessions_ended"].as_u64().unwrap_or(0) > 0 {
        out.push_str(&format!(
            "{} host sessions ended: the new config no longer admits them\n",
            changes["sessions_ended"]
        ));
    }
    if changes["restart_needed"]
        .as_array()
        .is_some_and(|a| !a.is_empty())
    {
        out.push_str(&format!(
            "needs a restart to take effect (running with the old value): {}\n",
            names("restart_needed")
        ));
    }
    for problem in incomplete(changes) {
        out.push_str(&format!("NOT FINISHED: {problem}\n"));
    }
    out
}

/// What a reload did not finish (requests a retired upstream still had when its drain ended).
pub(super) fn incomplete(changes: &serde_json::Value) -> Vec<&str> {
    (changes["incomplete"].as_array().into_iter().flatten())
        .filter_map(|v| v.as_str())
        .collect()
}

/// `mcpmux sessions`: one row per open host session.
pub(super) fn sessions_table(sessions: &serde_json::Value) -> String {
    let rows: Vec<Vec<String>> = (sessions.as_array().into_iter().flatten())
        .map(|s| {
            let text = |k: &str| {
                s[k].as_str()
                    .map_or_else(|| s[k].to_string(), str::to_owned)
            };
            let or_dash = |k: &str| s[k].as_str().unwrap_or("-").to_owned();
            vec![
                text("id"),
                or_dash("principal"),
                or_dash("profile"),
                or_dash("client"),
                text("protocol_version"),
                humantime::format_duration(std::time::Duration::from_secs(
                    s["age_seconds"].as_u64().unwrap_or(0),
                ))
                .to_string(),
                text("in_flight"),
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

/// `mcpmux status`: the daemon, then one row per upstream.
pub(super) fn status_table(status: &serde_json::Value) -> String {
    let rows: Vec<Vec<String>> = status["upstreams"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|u| {
            let text = |k: &str| {
                u[k].as_str()
                    .map(str::to_owned)
                    .unwrap_or_else(|| u[k].to_string())
            };
            vec![
                text("name"),
                text("state"),
                text("transport"),
                u["protocol_version"].as_str().unwrap_or("-").to_owned(),
                text("tools"),
                text("restarts"),
                text("in_flight"),
                match (u["latency_p50_ms"].as_f64(), u["latency_p99_ms"].as_f64()) {
                    (Some(p50), Some(p99)) => format!("{p50}/{p99}"),
                    _ => "-".into(),
                },
                // A ready upstream's last HTTP error is history (the remote table keeps it).
                u["last_error"]
                    .as_str()
                    .or(u["last_http_error"]
                        .as_str()
                        .filter(|_| u["state"] != "ready"))
                    .unwrap_or("")
                    .chars()
                    .take(90)
                    .collect(),
            ]
        })
        .collect();
    let sessions = match status["max_sessions"].as_u64() {
        Some(max) => format!("{} of {max}", status["sessions"]),
        None => status["sessions"].to_string(),
    };
    let mut out = format!(
        "mcpmux {} — {sessions} host sessions, catalog generation {}\n",
        status["version"].as_str().unwrap_or("?"),
        status["catalog_generation"]
    );
    let config = &status["config"];
    if let Some(file) = config["file"].as_str() {
        out.push_str(&format!(
            "config {file} — {} reloads, {} refused\n",
            config["reloads"], config["rejected"]
        ));
    }
    if let Some(error) = config["last_reload"]["error"].as_str() {
        out.push_str(&format!(
            "THE CONFIG FILE IS NOT RUNNING (the previous one is): {error}\n"
        ));
    }
    for problem in incomplete(&config["last_reload"]["changes"]) {
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
    let remote: Vec<Vec<String>> = status["upstreams"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|u| {
            let field = |k: &str| u[k].as_str().unwrap_or("-").chars().take(90).collect();
            let url = u["url"].as_str()?;
            Some(vec![
                field("name"),
                url.to_owned(),
                field("http_session"),
                field("last_http_error"),
            ])
        })
        .collect();
    let hosts: Vec<Vec<String>> = status["hosts"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|h| {
            let limit = |k: &str| h[k].as_f64().map_or("-".to_owned(), |v| v.to_string());
            vec![
                h["name"].as_str().unwrap_or_default().to_owned(),
                h["in_flight"].to_string(),
                h["requests"].to_string(),
                h["refused"].to_string(),
                limit("max_in_flight"),
                limit("max_calls_per_second"),
                h["sessions"].to_string(),
                limit("max_sessions"),
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
    for u in status["upstreams"].as_array().into_iter().flatten() {
        let changed: Vec<&str> = (u["changed_tools"].as_array().into_iter().flatten())
            .filter_map(|t| t.as_str())
            .collect();
        if !changed.is_empty() {
            let fate = if u["pin"] == "strict" {
                "withheld until approved"
            } else {
                "still shown"
            };
            out.push_str(&format!(
                "\nchanged tool definitions of {} ({fate}; review, then `mcpmux approve {} TOOL`): {}\n",
                u["name"].as_str().unwrap_or_default(),
                u["name"].as_str().unwrap_or_default(),
                changed.join(", ")
            ));
        }
    }
    out
}

/// `mcpmux pins`: one row per pinned tool; a changed one shows its new digest.
pub(super) fn pins(pins: &serde_json::Value) -> String {
    let rows: Vec<Vec<String>> = (pins["pins"].as_array().into_iter().flatten())
        .map(|p| {
            let short = |k: &str| {
                p[k].as_str()
                    .map_or("-".to_owned(), |d| d.chars().take(12).collect())
            };
            vec![
                p["upstream"].as_str().unwrap_or_default().to_owned(),
                p["tool"].as_str().unwrap_or_default().to_owned(),
                short("digest"),
                if p["changed_to"].is_string() {
                    "CHANGED".to_owned()
                } else {
                    "pinned".to_owned()
                },
                short("changed_to"),
            ]
        })
        .collect();
    table(&["UPSTREAM", "TOOL", "PINNED", "STATE", "NOW"], &rows)
}

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
