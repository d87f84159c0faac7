//! Reading the log: the admin API (pages, every page) and the `mcpmux audit` CLI.

use std::process::ExitStatus;
use std::time::{Duration, UNIX_EPOCH};

use serde_json::Value;

use crate::common::{AdminApi, MCPMUX};

/// One page of `GET /audit/query`.
pub(super) async fn admin_page(admin: &AdminApi, query: &[(&str, String)]) -> Value {
    let response = admin.get_query("/audit/query", query).await;
    let status = response.status();
    let text = response.text().await.unwrap();
    assert!(
        status.is_success(),
        "audit/query {query:?}: {status} {text}"
    );
    serde_json::from_str(&text).unwrap()
}

/// Every record matching `query`, following `next_cursor`.
pub(super) async fn admin_all(admin: &AdminApi, query: &[(&str, String)]) -> Vec<Value> {
    let mut out = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut q = query.to_vec();
        q.push(("limit", "10000".into()));
        if let Some(c) = &cursor {
            q.push(("cursor", c.clone()));
        }
        let page = admin_page(admin, &q).await;
        out.extend(page["records"].as_array().unwrap().iter().cloned());
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return out,
        }
    }
}

pub(super) async fn admin_get(admin: &AdminApi, path: &str) -> Value {
    admin.json(path).await
}

/// What one `mcpmux` command printed.
#[derive(Debug)]
pub(super) struct Run {
    pub(super) status: ExitStatus,
    pub(super) stdout: String,
    pub(super) stderr: String,
}

/// Runs `mcpmux ARGS` (no config, no MCPMUX_* variables) and waits for it (at most 30 s).
pub(super) async fn mcpmux(args: &[&str]) -> Run {
    let mut command = tokio::process::Command::new(MCPMUX);
    command
        .args(args)
        .env_remove("MCPMUX_CONFIG")
        .env_remove("MCPMUX_ADMIN")
        .env_remove("MCPMUX_STATE_DIR")
        .current_dir(std::env::temp_dir())
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(30), command.output())
        .await
        .unwrap_or_else(|_| panic!("mcpmux {args:?} did not finish in 30 s"))
        .unwrap();
    Run {
        status: output.status,
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Runs a CLI command that must succeed; its stdout.
pub(super) async fn mcpmux_ok(args: &[&str]) -> String {
    let run = mcpmux(args).await;
    assert!(run.status.success(), "mcpmux {args:?} failed: {run:?}");
    run.stdout
}

/// The records of `--format json` output (one per line).
pub(super) fn json_lines(stdout: &str) -> Vec<Value> {
    stdout
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// `mcpmux audit query --admin ADMIN --format json --all` with `filter` as flags.
pub(super) async fn cli_all(admin: &AdminApi, filter: &[(&str, String)]) -> Vec<Value> {
    let flags: Vec<String> = filter
        .iter()
        .flat_map(|(k, v)| [format!("--{}", k.replace('_', "-")), v.clone()])
        .collect();
    let mut args = vec![
        "audit", "query", "--admin", &admin.url, "--format", "json", "--all", "--limit", "1000",
    ];
    args.extend(flags.iter().map(String::as_str));
    json_lines(&mcpmux_ok(&args).await)
}

pub(super) fn seqs(records: &[Value]) -> Vec<u64> {
    records.iter().map(|r| r["seq"].as_u64().unwrap()).collect()
}

pub(super) fn rfc3339(ts_us: u64) -> String {
    humantime::format_rfc3339_micros(UNIX_EPOCH + Duration::from_micros(ts_us)).to_string()
}

pub(super) fn now_us() -> u64 {
    u64::try_from(UNIX_EPOCH.elapsed().unwrap().as_micros()).unwrap()
}

pub(super) fn ts(r: &Value) -> u64 {
    r["ts_us"].as_u64().unwrap()
}
