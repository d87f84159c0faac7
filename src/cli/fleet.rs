//! `--replicas URL,…`: `mcpmux status`, `sessions` and `audit query|verify` ask every replica of
//! a cluster and merge what they answer. An entry is an admin API (`http://10.0.0.11:7333`, or
//! `HOST:PORT`); a host name that resolves to several addresses (a Kubernetes headless service)
//! stands for each of them. Every replica has the same admin token (the same secrets).

use std::path::Path;
use std::process::ExitCode;

use reqwest::Method;

use super::Command;
use super::admin::Admin;
use crate::api;
use crate::audit::{FilterArgs, Page, Record, Verification};

/// `status` and `sessions` with `--replicas`: asked of every replica (its exit status), or the
/// command back when it asks one daemon.
pub(super) fn command(
    command: Command,
    token_file: Option<&Path>,
) -> anyhow::Result<Result<ExitCode, Command>> {
    let (list, json, asks_status) = match &command {
        Command::Status {
            replicas: Some(list),
            json,
            ..
        } => (list.clone(), *json, true),
        Command::Sessions {
            replicas: Some(list),
            json,
            ..
        } => (list.clone(), *json, false),
        _ => return Ok(Err(command)),
    };
    let ok = super::threads(Some(1))?.block_on(async {
        let replicas = replicas(&list, token_file).await?;
        match asks_status {
            true => status(&replicas, json).await,
            false => sessions(&replicas, json).await,
        }
    })?;
    Ok(Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }))
}

/// One replica's admin API and what it is called in the output (its address).
pub struct Replica {
    pub at: String,
    pub admin: Admin,
}

/// The replicas `list` names, each host name resolved to every address it has.
pub async fn replicas(list: &str, token_file: Option<&Path>) -> anyhow::Result<Vec<Replica>> {
    let mut found = Vec::new();
    for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let url = if entry.contains("://") {
            url::Url::parse(entry)
        } else {
            url::Url::parse(&format!("http://{entry}"))
        }
        .map_err(|e| anyhow::anyhow!("--replicas: `{entry}` is not an address ({e}); write http://HOST:PORT of each replica's admin API"))?;
        let host = url.host_str().unwrap_or_default().to_owned();
        let port = url.port_or_known_default().unwrap_or(7333);
        let named = host.parse::<std::net::IpAddr>().is_err() && host != "localhost";
        let addresses: Vec<std::net::SocketAddr> = match named {
            true => tokio::net::lookup_host((host.as_str(), port))
                .await
                .map_err(|e| anyhow::anyhow!("--replicas: cannot resolve `{host}`: {e}"))?
                .collect(),
            false => Vec::new(),
        };
        if addresses.len() > 1 {
            for address in addresses {
                let at = format!("http://{address}");
                found.push(Replica {
                    admin: Admin::at(&at, token_file),
                    at,
                });
            }
        } else {
            let at = url.as_str().trim_end_matches('/').to_owned();
            found.push(Replica {
                admin: Admin::at(&at, token_file),
                at,
            });
        }
    }
    if found.is_empty() {
        anyhow::bail!("--replicas names no replica; write the admin APIs as URL,URL,…");
    }
    Ok(found)
}

/// `mcpmux status --replicas`: a line per replica — its name, version, config digest, sessions
/// and upstreams ready — and a warning when they run different configs.
pub async fn status(replicas: &[Replica], json: bool) -> anyhow::Result<bool> {
    let mut rows = Vec::new();
    let mut all = Vec::new();
    let mut ok = true;
    for r in replicas {
        match r
            .admin
            .request::<api::Status>(Method::GET, "/status", &[])
            .await
        {
            Ok(s) => {
                let ready = s.upstreams.iter().filter(|u| u.state == "ready").count();
                let enabled = s.upstreams.iter().filter(|u| u.state != "disabled").count();
                rows.push(format!(
                    "{:<14} {:<28} {:<8} {:<17} {:>8}   {ready}/{}",
                    s.replica.as_deref().unwrap_or("-"),
                    r.at,
                    s.version,
                    s.config.digest,
                    s.sessions,
                    enabled
                ));
                all.push(serde_json::json!({"at": r.at, "status": s}));
            }
            Err(e) => {
                ok = false;
                rows.push(format!("{:<14} {:<28} unreachable: {e}", "?", r.at));
                all.push(serde_json::json!({"at": r.at, "error": e.to_string()}));
            }
        }
    }
    if json {
        println!("{}", serde_json::Value::Array(all));
        return Ok(ok);
    }
    println!(
        "{:<14} {:<28} {:<8} {:<17} {:>8}   upstreams ready (of enabled)",
        "REPLICA", "ADMIN", "VERSION", "CONFIG", "SESSIONS"
    );
    for row in rows {
        println!("{row}");
    }
    let digests: std::collections::BTreeSet<&str> = (all.iter())
        .filter_map(|s| s["status"]["config"]["digest"].as_str())
        .collect();
    if digests.len() > 1 {
        println!(
            "warning: the replicas run {} different configs; give every replica the same file",
            digests.len()
        );
    }
    Ok(ok)
}

/// `mcpmux sessions --replicas`: every replica's sessions, each line naming its replica.
pub async fn sessions(replicas: &[Replica], json: bool) -> anyhow::Result<bool> {
    let mut merged = Vec::new();
    for r in replicas {
        let answer: api::Sessions = (r.admin.request(Method::GET, "/sessions", &[]).await)
            .map_err(|e| anyhow::anyhow!("{}: {e}", r.at))?;
        merged.push((r.at.clone(), answer.sessions));
    }
    if json {
        let all: Vec<serde_json::Value> = (merged.iter())
            .map(|(at, s)| serde_json::json!({"at": at, "sessions": s}))
            .collect();
        println!("{}", serde_json::Value::Array(all));
        return Ok(true);
    }
    for (at, sessions) in &merged {
        println!("# {at}");
        print!("{}", super::render::sessions_table(sessions));
    }
    Ok(true)
}

/// Every record of every replica's chain matching `filter`, merged by time (ties by replica,
/// then sequence); each with the replica it came from.
pub async fn query(
    replicas: &[Replica],
    filter: &FilterArgs,
) -> anyhow::Result<Vec<(String, Record)>> {
    let mut merged = Vec::new();
    for r in replicas {
        let mut args = FilterArgs {
            limit: Some(1000),
            ..filter.clone()
        };
        loop {
            let page: Page = (r.admin)
                .request(Method::GET, "/audit/query", &args.to_query())
                .await
                .map_err(|e| anyhow::anyhow!("{}: {e}", r.at))?;
            merged.extend(page.records.into_iter().map(|rec| (r.at.clone(), rec)));
            match page.next_cursor {
                Some(next) => args.cursor = Some(next),
                None => break,
            }
        }
    }
    merged.sort_by(|(a, x), (b, y)| (x.ts_us, a, x.seq).cmp(&(y.ts_us, b, y.seq)));
    Ok(merged)
}

/// Each replica's chain verified on its own: a line each; whether all of them hold.
pub async fn verify(replicas: &[Replica]) -> anyhow::Result<bool> {
    let mut ok = true;
    for r in replicas {
        match (r.admin)
            .request::<Verification>(Method::GET, "/audit/verify", &[])
            .await
        {
            Ok(v) => match &v.first_break {
                None => println!(
                    "{}: ok: {} records verified (chain from #{})",
                    r.at, v.checked, v.first_seq
                ),
                Some(b) => {
                    ok = false;
                    println!(
                        "{}: BROKEN at record #{}: {} ({} records verified before it)",
                        r.at, b.seq, b.problem, v.checked
                    );
                }
            },
            Err(e) => {
                ok = false;
                println!("{}: not verified: {e}", r.at);
            }
        }
    }
    Ok(ok)
}
