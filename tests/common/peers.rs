//! Test peers the suite installs for itself, once, under the cargo target dir: a Python venv with
//! the MCP SDK (pinned by `tests/peers/requirements.txt`) and an npm prefix with the third-party
//! MCP servers (pinned by `tests/peers/package.json` + `package-lock.json`, installed with
//! `npm ci`). No manual `pip install`, no `npx -y` download while a test runs.
//!
//! Several test binaries may start at once (nextest, parallel `cargo test`), so each peer is
//! provisioned under an exclusive file lock. A stamp file written last holds a hash of the pins:
//! a changed pin re-provisions, and an install cut short (no stamp) is redone, never taken as done.
//! A failed install panics (in every test that needs the peer, without trying again in the same
//! test binary) with the command, its stderr tail and what to do; nothing is skipped. A new
//! `python3` or `node` also re-provisions.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use nix::fcntl::{Flock, FlockArg};
use sha2::{Digest, Sha256};

/// Where the peers live: `$CARGO_TARGET_TMPDIR/peers`.
pub fn dir() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("peers")
}

/// The committed pins: `tests/peers/<file>`.
fn pins(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/peers")
        .join(file)
}

/// The Python interpreter of the peers' venv (which has the MCP Python SDK), provisioning it first.
pub fn python() -> PathBuf {
    static PYTHON: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let venv = PYTHON.get_or_init(|| venv("venv", "requirements.txt", "the MCP Python SDK"));
    venv.clone()
        .unwrap_or_else(|why| panic!("{why}"))
        .join("bin/python")
}

/// An executable of the proxy venv (`mcp-proxy` 0.13 with the 1.x SDK, and `mcp-server-time`),
/// provisioning it first.
pub fn proxy_bin(bin: &str) -> PathBuf {
    static PROXY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let venv = PROXY.get_or_init(|| {
        venv(
            "proxy-venv",
            "requirements-proxy.txt",
            "mcp-proxy and mcp-server-time",
        )
    });
    venv.clone()
        .unwrap_or_else(|why| panic!("{why}"))
        .join("bin")
        .join(bin)
}

/// The Python interpreter of the venv with kubernetes-validate (the Kubernetes recipe's schema
/// check, `tests/cluster/manifests.py`), provisioning it first.
pub fn manifests_python() -> PathBuf {
    static PYTHON: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let venv =
        PYTHON.get_or_init(|| venv("k8s-venv", "requirements-k8s.txt", "kubernetes-validate"));
    venv.clone()
        .unwrap_or_else(|why| panic!("{why}"))
        .join("bin/python")
}

/// A venv `peers/<name>` with `tests/peers/<requirements>` installed.
fn venv(name: &str, requirements: &str, what: &str) -> Result<PathBuf, String> {
    let venv = dir().join(name);
    let python = venv.join("bin/python");
    let pinned = pins(requirements);
    let toolchain = version_of("python3");
    provision(name, &venv, &[&pinned], &toolchain, &python, || {
        run(
            &format!("a Python venv for {what}"),
            Command::new("python3").arg("-m").arg("venv").arg(&venv),
            "install Python 3 with its venv module (Debian: apt-get install python3-venv)",
        )?;
        run(
            &format!("{what} (tests/peers/{requirements})"),
            Command::new(&python)
                .args(["-m", "pip", "install", "--disable-pip-version-check"])
                .args(["--no-input", "--require-virtualenv", "-r"])
                .arg(&pinned),
            "check that PyPI can be reached (pip's index and proxy settings)",
        )
    })?;
    Ok(venv)
}

/// The executable `node_modules/.bin/<bin>` of the peers' npm prefix, provisioning it first.
pub fn npm_bin(bin: &str) -> PathBuf {
    npm_modules().join(".bin").join(bin)
}

/// The peers' `node_modules`, provisioning it first (for scripts that load packages from it).
pub fn npm_modules() -> PathBuf {
    npm_prefix().join("node_modules")
}

fn npm_prefix() -> PathBuf {
    static PREFIX: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let prefix = PREFIX.get_or_init(|| {
        let prefix = dir().join("npm");
        let manifest = pins("package.json");
        let lockfile = pins("package-lock.json");
        let toolchain = version_of("node");
        // Any one of the pinned servers shows that `npm ci` finished.
        let product = prefix.join("node_modules/.bin/mcp-server-everything");
        provision(
            "npm",
            &prefix,
            &[&manifest, &lockfile],
            &toolchain,
            &product,
            || {
                std::fs::create_dir_all(&prefix).unwrap();
                std::fs::copy(&manifest, prefix.join("package.json")).unwrap();
                std::fs::copy(&lockfile, prefix.join("package-lock.json")).unwrap();
                run(
                    "the npm MCP servers (tests/peers/package-lock.json)",
                    Command::new("npm")
                        .args(["ci", "--no-audit", "--no-fund"])
                        .current_dir(&prefix),
                    "install Node.js and npm, and check that the npm registry can be reached \
                 (npm's registry and proxy settings)",
                )
            },
        )?;
        Ok(prefix)
    });
    prefix.clone().unwrap_or_else(|why| panic!("{why}"))
}

/// Makes `target` hold what `install` builds, once across processes: under the lock
/// `peers/<name>.lock`, skipped when the stamp `peers/<name>.stamp` holds the hash of `inputs` and
/// `toolchain` and `product` exists; otherwise `target` is emptied, `install` runs, and the stamp
/// is written last. A failed install leaves no stamp, so the next run starts over.
fn provision(
    name: &str,
    target: &Path,
    inputs: &[&Path],
    toolchain: &str,
    product: &Path,
    install: impl FnOnce() -> Result<(), String>,
) -> Result<(), String> {
    let peers = dir();
    std::fs::create_dir_all(&peers).unwrap();
    let lock = std::fs::File::create(peers.join(format!("{name}.lock"))).unwrap();
    // Held (blocking the other test processes) until dropped at the end of this function.
    let _lock = Flock::lock(lock, FlockArg::LockExclusive)
        .map_err(|(_, e)| format!("could not lock {}/{name}.lock: {e}", peers.display()))?;
    let stamp = peers.join(format!("{name}.stamp"));
    let hash = hash_of(inputs, toolchain);
    let done = std::fs::read_to_string(&stamp).is_ok_and(|s| s.trim() == hash);
    if done && product.exists() {
        return Ok(());
    }
    eprintln!("provisioning test peer `{name}` in {}", target.display());
    let _ = std::fs::remove_file(&stamp);
    if target.exists() {
        std::fs::remove_dir_all(target).unwrap();
    }
    install()?;
    if !product.exists() {
        return Err(format!(
            "provisioning `{name}` finished but {} is missing",
            product.display()
        ));
    }
    let partial = peers.join(format!("{name}.stamp.partial"));
    std::fs::write(&partial, &hash).unwrap();
    std::fs::rename(&partial, &stamp).unwrap();
    Ok(())
}

/// What `<tool> --version` prints (empty if it cannot run: installing then says why), so that a
/// new interpreter or Node.js re-provisions what was built with the old one.
fn version_of(tool: &str) -> String {
    Command::new(tool)
        .arg("--version")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .unwrap_or_default()
}

/// SHA-256 over `toolchain` and the inputs' names and contents, in hex.
fn hash_of(inputs: &[&Path], toolchain: &str) -> String {
    let mut hasher = Sha256::new();
    hasher.update(toolchain.as_bytes());
    for path in inputs {
        let content = std::fs::read(path)
            .unwrap_or_else(|e| panic!("could not read the pins in {}: {e}", path.display()));
        hasher.update(path.file_name().unwrap().as_encoded_bytes());
        hasher.update((content.len() as u64).to_le_bytes());
        hasher.update(&content);
    }
    hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Runs one install step; on failure, says what it installed, the command, its stderr tail and
/// `fix`.
fn run(what: &str, command: &mut Command, fix: &str) -> Result<(), String> {
    let shown = format!("{command:?}");
    let output = command.output().map_err(|e| {
        format!("installing {what} for the tests: `{shown}` could not start ({e}); {fix}")
    })?;
    if output.status.success() {
        return Ok(());
    }
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    let tail = lines[lines.len().saturating_sub(30)..].join("\n");
    Err(format!(
        "installing {what} for the tests failed ({}): `{shown}`\n{tail}\n\
         What to do: {fix}, then run the tests again (an unfinished install is redone).",
        output.status
    ))
}

/// Starts the Node script `tests/interop/<script>` with `args` (and `MCP_NODE_MODULES` naming the
/// peers' `node_modules`), which serves MCP over HTTP on a loopback port and prints
/// `listening <url>` first: its process (killed when dropped) and that URL.
pub async fn node_http_server(script: &str, args: &[String]) -> (tokio::process::Child, String) {
    use tokio::io::AsyncBufReadExt;
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/interop")
        .join(script);
    let mut child = tokio::process::Command::new(npm_bin("node"))
        .arg(path)
        .args(args)
        .env("MCP_NODE_MODULES", npm_modules())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("could not start node {script}: {e}"));
    let stdout = child.stdout.take().expect("piped stdout");
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let line = tokio::time::timeout(std::time::Duration::from_secs(120), lines.next_line())
        .await
        .unwrap_or_else(|_| panic!("{script} did not listen within 120 s"))
        .unwrap_or_default()
        .unwrap_or_default();
    let url = line
        .strip_prefix("listening ")
        .unwrap_or_else(|| panic!("{script} did not say where it listens: {line:?}"))
        .to_owned();
    (child, url)
}
