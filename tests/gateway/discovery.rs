//! The CLI finds its daemon without being told: `mcpmux status`, `tools` and `audit query` from
//! a fresh shell (no flags, no MCPMUX_* variables, a directory without a config) reach a daemon
//! started with `--config X --state-dir Y` and a non-default admin address, through the record
//! the daemon leaves in the user's runtime directory; with `MCPMUX_STATE_DIR=Y` set, `audit
//! query` asks that daemon instead of opening its locked store. With no daemon, the error says
//! what was tried. `serve --admin off` is accepted.

use std::path::Path;
use std::process::{Command, Output};

use crate::common::{Client, Daemon, MCPMUX, test_upstream};
use serde_json::json;

/// `mcpmux ARGS` as from a fresh shell of the same user: only PATH, HOME and the session's
/// runtime directory, run in `cwd` (where no config lives), plus `env`.
fn fresh_shell(runtime: &Path, cwd: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(MCPMUX)
        .args(args)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", cwd)
        .env("XDG_RUNTIME_DIR", runtime)
        .envs(env.iter().copied())
        .current_dir(cwd)
        .output()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_finds_a_daemon_started_with_its_own_config_state_and_admin_address() {
    let runtime = tempfile::tempdir().unwrap();
    let shell_dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let state_dir = state.path().to_str().unwrap();
    let runtime_dir = runtime.path().to_str().unwrap();
    let daemon = Daemon::start_with_args_env(
        &format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n{}",
            test_upstream("up", &[])
        ),
        &["--state-dir", state_dir, "--admin", "127.0.0.1:0"],
        &[("XDG_RUNTIME_DIR", runtime_dir)],
    );
    let host = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&host, |n| n.iter().any(|t| t == "up__echo"))
        .await;
    host.tool_text("up__echo", json!({"found": "me"})).await;

    let status = stdout(&fresh_shell(
        runtime.path(),
        shell_dir.path(),
        &["status"],
        &[],
    ));
    assert!(
        status.contains("up") && status.contains("ready"),
        "{status}"
    );
    let tools = stdout(&fresh_shell(
        runtime.path(),
        shell_dir.path(),
        &["tools"],
        &[],
    ));
    assert!(tools.contains("up__echo"), "{tools}");
    // A search ranks the tools by the words asked: the description's, then an exact name.
    let search = |words: &str| {
        let args = ["tools", "--search", words, "--limit", "3"];
        let found = stdout(&fresh_shell(runtime.path(), shell_dir.path(), &args, &[]));
        let mut rows: Vec<String> = found.lines().skip(1).map(str::to_owned).collect();
        let summary = rows.pop().unwrap_or_default();
        assert!(summary.contains("tools in the whole catalog"), "{found}");
        assert!(rows.len() <= 3, "{found}");
        rows
    };
    let by_words = search("return the params unchanged");
    assert!(by_words[0].starts_with("up__echo "), "{by_words:?}");
    assert!(
        by_words[0].contains("unchanged"),
        "the terms it matched: {by_words:?}"
    );
    let by_name = search("slow");
    assert!(
        by_name[0].starts_with("up__slow ") && by_name[0].contains("(exact name)"),
        "{by_name:?}"
    );
    let query = [
        "audit",
        "query",
        "--method",
        "tools/call",
        "--format",
        "json",
    ];
    let audit = stdout(&fresh_shell(runtime.path(), shell_dir.path(), &query, &[]));
    assert!(audit.contains("up__echo"), "{audit}");
    // With the daemon's state directory named, the daemon is asked (its store is locked).
    let audit = stdout(&fresh_shell(
        runtime.path(),
        shell_dir.path(),
        &query,
        &[("MCPMUX_STATE_DIR", state_dir)],
    ));
    assert!(audit.contains("up__echo"), "{audit}");

    // Another user session (another runtime directory) finds nothing and says what it tried.
    let elsewhere = tempfile::tempdir().unwrap();
    let out = fresh_shell(elsewhere.path(), shell_dir.path(), &["status"], &[]);
    assert!(!out.status.success());
    let error = String::from_utf8_lossy(&out.stderr);
    assert!(
        error.contains("cannot find a running mcpmux") && error.contains("daemons"),
        "{error}"
    );
    drop(daemon);
}

#[test]
fn serve_takes_admin_off() {
    let daemon = Daemon::start_with(
        &format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n{}",
            test_upstream("up", &[])
        ),
        &["--admin", "off"],
    );
    assert!(daemon.admin_url.is_none());
    let out = Command::new(MCPMUX)
        .args(["serve", "--admin", "nonsense"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let error = String::from_utf8_lossy(&out.stderr);
    assert!(error.contains("or off"), "{error}");
}
