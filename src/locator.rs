//! Where a running daemon is. Each `mcpmux serve` leaves a [`DaemonRecord`] — its pid, host
//! endpoint, admin API, config file and state directory — in `<runtime dir>/daemons/<pid>.json`
//! and in `<state dir>/daemon.json`, and removes both when it stops. The CLI finds its daemon from
//! its flags, then these records (skipping those of processes that are gone), then the default
//! config.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// What a running daemon tells the CLI about itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonRecord {
    pub pid: u32,
    /// The host endpoint, `http://ADDR/mcp`.
    pub url: String,
    /// The admin API, `http://ADDR` (`None`: turned off).
    pub admin: Option<String>,
    pub config: PathBuf,
    pub state_dir: PathBuf,
}

/// The directory for records of running daemons: `$MCPMUX_RUNTIME_DIR`, else
/// `$XDG_RUNTIME_DIR/mcpmux` (systemd's `RuntimeDirectory`), else `<tmp>/mcpmux-<uid>`.
pub fn runtime_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("MCPMUX_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("mcpmux");
    }
    std::env::temp_dir().join(format!("mcpmux-{}", nix::unistd::getuid()))
}

/// The records of a daemon, removed when dropped (the daemon stopped).
#[derive(Debug)]
pub struct Published {
    paths: Vec<PathBuf>,
}

impl Drop for Published {
    fn drop(&mut self) {
        for path in &self.paths {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// Leaves `record` where the CLI looks; a place that cannot be written is logged and skipped.
pub fn publish(record: &DaemonRecord) -> Published {
    let text = serde_json::to_vec_pretty(record).unwrap_or_default();
    let targets = [
        runtime_dir()
            .join("daemons")
            .join(format!("{}.json", record.pid)),
        record.state_dir.join("daemon.json"),
    ];
    let mut paths = Vec::new();
    for path in targets {
        match write(&path, &text) {
            Ok(()) => paths.push(path),
            Err(e) => {
                tracing::debug!(path = %path.display(), error = %e, "Could not leave the daemon's record here.");
            }
        }
    }
    Published { paths }
}

fn write(path: &Path, text: &[u8]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

/// The record in `state_dir`, if its daemon still runs.
pub fn in_state_dir(state_dir: &Path) -> Option<DaemonRecord> {
    read(&state_dir.join("daemon.json"))
}

/// Every running daemon's record, by pid.
pub fn running() -> Vec<DaemonRecord> {
    let Ok(entries) = std::fs::read_dir(runtime_dir().join("daemons")) else {
        return Vec::new();
    };
    let mut records = Vec::new();
    for path in entries.flatten().map(|e| e.path()) {
        if path.extension().is_none_or(|x| x != "json") {
            continue;
        }
        match read(&path) {
            Some(record) => records.push(record),
            // A daemon that was killed leaves its record behind: tidy it away.
            None => {
                let _ = std::fs::remove_file(&path);
            }
        }
    }
    records.sort_by_key(|r| r.pid);
    records
}

/// The record at `path`, if its process is alive.
fn read(path: &Path) -> Option<DaemonRecord> {
    let text = std::fs::read_to_string(path).ok()?;
    let record: DaemonRecord = serde_json::from_str(&text).ok()?;
    alive(record.pid).then_some(record)
}

/// Whether `pid` is a running mcpmux (not a process that inherited the pid of one that died).
fn alive(pid: u32) -> bool {
    let Ok(raw) = i32::try_from(pid) else {
        return false;
    };
    // Signal 0 checks the process exists; EPERM means it does, as another user's.
    let exists = match nix::sys::signal::kill(nix::unistd::Pid::from_raw(raw), None) {
        Ok(()) => true,
        Err(e) => e == nix::errno::Errno::EPERM,
    };
    exists
        && std::fs::read(format!("/proc/{pid}/cmdline")).map_or(true, |cmdline| {
            String::from_utf8_lossy(&cmdline).contains("mcpmux")
        })
}
