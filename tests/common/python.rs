//! Running the official Python SDK as a test peer: the scripts in tests/interop/ print one JSON
//! summary line. The SDK is required, never skipped: `peers` installs it into a venv of its own.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{Daemon, peers};

/// Provisions the peers' venv; fails (never skips) when it lacks the MCP Python SDK.
pub fn require_python_sdk() {
    let python = peers::python();
    let probe = std::process::Command::new(&python)
        .args([
            "-c",
            "import mcp, importlib.metadata as m; print(m.version('mcp'))",
        ])
        .output();
    match probe {
        Ok(out) if out.status.success() => {
            let version = String::from_utf8_lossy(&out.stdout);
            eprintln!("MCP Python SDK {}", version.trim());
        }
        Ok(out) => panic!(
            "the MCP Python SDK does not import in the peers' venv (`{}`): delete {} to have it \
             provisioned again (these tests do not skip).\n{}",
            python.display(),
            peers::dir().display(),
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => panic!(
            "`{}` could not be run ({e}): delete {} to have the venv provisioned again \
             (these tests do not skip).",
            python.display(),
            peers::dir().display()
        ),
    }
}

/// Quotes one word for a POSIX shell.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// Runs `tests/interop/<script> ARGS` within `deadline`; returns its JSON summary (its last
/// stdout line) and the wall time, panicking with its stderr (and the daemon's) when it fails.
pub async fn run_script(
    daemon: &Daemon,
    script: &str,
    args: &[&str],
    deadline: Duration,
) -> (Value, Duration) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/interop")
        .join(script);
    let started = Instant::now();
    let python = peers::python();
    let child = tokio::process::Command::new(&python)
        .arg(&path)
        // The scripts import tests/interop/sdk_host.py: leave no __pycache__ in the source tree.
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("could not run {} {}: {e}", python.display(), path.display()));
    let Ok(output) = tokio::time::timeout(deadline, child.wait_with_output()).await else {
        panic!(
            "{script} {args:?} did not finish in {deadline:?}\ndaemon stderr:\n{}",
            daemon.stderr()
        );
    };
    let output = output.unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{script} {args:?} failed ({}):\n{stderr}\nstdout:\n{stdout}\ndaemon stderr:\n{}",
        output.status,
        daemon.stderr()
    );
    let line = stdout.lines().last().unwrap_or_default();
    let summary: Value = serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("summary is not JSON ({e}): {stdout}\nstderr:\n{stderr}"));
    (summary, started.elapsed())
}
