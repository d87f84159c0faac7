//! Where a running daemon is. Each `mcpmux serve` leaves a [`DaemonRecord`] — its pid, host
//! endpoint, admin API (and where its token is), config file and state directory — in
//! `<runtime dir>/daemons/<pid>.json` and in `<state dir>/daemon.json`, and removes both when it
//! stops. The CLI finds its daemon from its flags, then these records (skipping those of
//! processes that are gone), then the default config.
//!
//! A record tells the CLI where to send a host's token, so it is trusted only as far as who could
//! have written it: the runtime directory (without `XDG_RUNTIME_DIR` a predictable
//! `/tmp/mcpmux-UID` another user could make first) is created 0700 and refused when it is not
//! the user's own or is writable by others; records are written to a fresh temporary name
//! (`O_EXCL`, no symlink followed) and renamed into place; a record is read only when the file is
//! the user's and its pid is a process of the user's.

use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
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
    /// The file holding the admin API's token (never the token itself), so the CLI needs no flag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_token_file: Option<PathBuf>,
    pub config: PathBuf,
    pub state_dir: PathBuf,
}

/// Why a directory is not trusted with daemon records.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Untrusted {
    #[error(
        "{} belongs to uid {owner}, not to this user (uid {uid}), so another user may have made it to catch mcpmux's records; remove it (as its owner or root), or set XDG_RUNTIME_DIR or MCPMUX_RUNTIME_DIR to a directory of your own",
        dir.display()
    )]
    NotOwned { dir: PathBuf, owner: u32, uid: u32 },
    #[error(
        "{} is writable by others (mode {mode:04o}), so anyone could plant a record there; run `chmod 700 {}`, or set MCPMUX_RUNTIME_DIR to a directory of your own",
        dir.display(), dir.display()
    )]
    Writable { dir: PathBuf, mode: u32 },
    #[error(
        "{} is not a directory (a link?); remove it, or set MCPMUX_RUNTIME_DIR to a directory of your own",
        dir.display()
    )]
    NotDirectory { dir: PathBuf },
    #[error("{} cannot be used: {reason}", dir.display())]
    Unusable { dir: PathBuf, reason: String },
}

/// The directory for records of running daemons: `$MCPMUX_RUNTIME_DIR`, else
/// `$XDG_RUNTIME_DIR/mcpmux` (systemd's `RuntimeDirectory`), else `<tmp>/mcpmux-<uid>`.
pub fn runtime_dir() -> PathBuf {
    runtime_location().0
}

/// The runtime directory, and whether it was named (by `MCPMUX_RUNTIME_DIR` or
/// `XDG_RUNTIME_DIR`) rather than guessed in the shared temporary directory.
fn runtime_location() -> (PathBuf, bool) {
    if let Some(dir) = std::env::var_os("MCPMUX_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        return (PathBuf::from(dir), true);
    }
    if let Some(dir) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        return (PathBuf::from(dir).join("mcpmux"), true);
    }
    let uid = nix::unistd::getuid();
    (std::env::temp_dir().join(format!("mcpmux-{uid}")), false)
}

/// Whose records are believed. Everyone believes their own; root, in a directory it was told
/// about (the system unit's `/run/mcpmux`, owned by its dynamic user), believes that directory's
/// owner — never in the guessed `/tmp` one, which anybody can make first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Trust {
    me: u32,
    any_owner: bool,
}

impl Trust {
    fn here(named: bool) -> Self {
        let me = nix::unistd::getuid();
        Self {
            me: me.as_raw(),
            any_owner: me.is_root() && named,
        }
    }
}

/// Whether a directory owned by `owner` with `mode` may hold records, for `trust`.
fn judge(dir: &Path, is_dir: bool, owner: u32, mode: u32, trust: Trust) -> Result<(), Untrusted> {
    if !is_dir {
        return Err(Untrusted::NotDirectory { dir: dir.into() });
    }
    if owner != trust.me && !trust.any_owner {
        return Err(Untrusted::NotOwned {
            dir: dir.into(),
            owner,
            uid: trust.me,
        });
    }
    if mode & 0o022 != 0 {
        return Err(Untrusted::Writable {
            dir: dir.into(),
            mode: mode & 0o7777,
        });
    }
    Ok(())
}

/// `dir` (made 0700 first when `create` and missing) if it may hold records: its owner, when so.
fn trusted(dir: &Path, create: bool, trust: Trust) -> Result<u32, Untrusted> {
    if create {
        let made = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir);
        if let Err(e) = made {
            return Err(Untrusted::Unusable {
                dir: dir.into(),
                reason: e.to_string(),
            });
        }
    }
    // The directory itself, not what a link planted in its place points at.
    let meta = std::fs::symlink_metadata(dir).map_err(|e| Untrusted::Unusable {
        dir: dir.into(),
        reason: e.to_string(),
    })?;
    judge(dir, meta.is_dir(), meta.uid(), meta.mode(), trust)?;
    Ok(meta.uid())
}

/// `<runtime dir>/daemons`, when the runtime directory and it may hold records (made when
/// `create`), and whose records there are believed.
fn daemons_dir(create: bool) -> Result<(PathBuf, u32), Untrusted> {
    let (dir, named) = runtime_location();
    let trust = Trust::here(named);
    trusted(&dir, create, trust)?;
    let daemons = dir.join("daemons");
    let owner = trusted(&daemons, create, trust)?;
    Ok((daemons, owner))
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

/// Leaves `record` where the CLI looks; a place that cannot be written, or is not safe to, is
/// logged and skipped.
pub fn publish(record: &DaemonRecord) -> Published {
    let text = serde_json::to_vec_pretty(record).unwrap_or_default();
    let mut targets = vec![record.state_dir.join("daemon.json")];
    match daemons_dir(true) {
        Ok((dir, _)) => targets.insert(0, dir.join(format!("{}.json", record.pid))),
        Err(e) => {
            tracing::warn!(error = %e, "Not leaving this daemon's record in the runtime directory: the CLI finds it through --config or --state-dir only.");
        }
    }
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

/// Writes `text` to a new temporary file beside `path` (`O_EXCL`: a planted file or link there
/// fails the write instead of being followed) and renames it over `path` (which replaces a link
/// there rather than writing through it).
fn write(path: &Path, text: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
    }
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = path.with_file_name(format!(".{name}.{}.tmp", rand::random::<u64>()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(&tmp)?;
    let written = file.write_all(text).and_then(|()| file.sync_all());
    let renamed = written.and_then(|()| std::fs::rename(&tmp, path));
    if renamed.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    renamed
}

/// The record in `state_dir`, if its daemon still runs.
pub fn in_state_dir(state_dir: &Path) -> Option<DaemonRecord> {
    let trust = Trust::here(true);
    let owner = if trust.any_owner {
        std::fs::symlink_metadata(state_dir).ok()?.uid()
    } else {
        trust.me
    };
    match read(&state_dir.join("daemon.json"), owner) {
        Read::Live(record) => Some(record),
        _ => None,
    }
}

/// Every running daemon's record, by pid. A runtime directory that is not safe is not read
/// (with a warning naming it and the fix).
pub fn running() -> Vec<DaemonRecord> {
    let (dir, owner) = match daemons_dir(false) {
        Ok(found) => found,
        Err(Untrusted::Unusable { .. }) => return Vec::new(),
        Err(e) => {
            tracing::warn!("Not reading daemon records: {e}");
            return Vec::new();
        }
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut records = Vec::new();
    for path in entries.flatten().map(|e| e.path()) {
        if path.extension().is_none_or(|x| x != "json") {
            continue;
        }
        match read(&path, owner) {
            Read::Live(record) => records.push(record),
            // A daemon that was killed leaves its record behind: tidy it away.
            Read::Stale => {
                let _ = std::fs::remove_file(&path);
            }
            Read::Refused => {}
        }
    }
    records.sort_by_key(|r| r.pid);
    records
}

/// What reading one record found.
enum Read {
    Live(DaemonRecord),
    /// Unreadable, or its process is gone.
    Stale,
    /// Not written by `owner`, or its pid is another user's process: left alone, not believed.
    Refused,
}

/// The record at `path`, if `owner` wrote it and its process, one of `owner`'s, is alive.
fn read(path: &Path, owner: u32) -> Read {
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Read::Stale;
    };
    if !meta.is_file() || meta.uid() != owner {
        tracing::warn!(path = %path.display(), owner = meta.uid(), "Ignored a daemon record another user wrote.");
        return Read::Refused;
    }
    let Some(record) = std::fs::read_to_string(path)
        .ok()
        .and_then(|text| serde_json::from_str::<DaemonRecord>(&text).ok())
    else {
        return Read::Stale;
    };
    if !alive(record.pid) {
        return Read::Stale;
    }
    match process_owner(record.pid) {
        Some(uid) if uid == owner => Read::Live(record),
        _ => {
            tracing::warn!(path = %path.display(), pid = record.pid, "Ignored a daemon record whose process is another user's.");
            Read::Refused
        }
    }
}

/// The uid a process runs as (the owner of `/proc/PID`).
fn process_owner(pid: u32) -> Option<u32> {
    std::fs::metadata(format!("/proc/{pid}"))
        .ok()
        .map(|m| m.uid())
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    const ME: Trust = Trust {
        me: 1000,
        any_owner: false,
    };

    #[test]
    fn only_the_users_own_private_directory_is_trusted() {
        let dir = Path::new("/tmp/mcpmux-1000");
        assert_eq!(judge(dir, true, 1000, 0o40700, ME), Ok(()));
        assert_eq!(judge(dir, true, 1000, 0o40755, ME), Ok(()));
        assert!(matches!(
            judge(dir, true, 1001, 0o40700, ME),
            Err(Untrusted::NotOwned { owner: 1001, .. })
        ));
        assert!(matches!(
            judge(dir, true, 1000, 0o40777, ME),
            Err(Untrusted::Writable { .. })
        ));
        assert!(matches!(
            judge(dir, true, 1000, 0o40770, ME),
            Err(Untrusted::Writable { .. })
        ));
        assert!(matches!(
            judge(dir, false, 1000, 0o120777, ME),
            Err(Untrusted::NotDirectory { .. })
        ));
        // Root in a directory it was told about believes its owner, but not a writable one.
        let root = Trust {
            me: 0,
            any_owner: true,
        };
        assert_eq!(judge(dir, true, 61234, 0o40755, root), Ok(()));
        assert!(judge(dir, true, 61234, 0o40777, root).is_err());
        let message = judge(dir, true, 1001, 0o40700, ME).unwrap_err().to_string();
        assert!(
            message.contains("/tmp/mcpmux-1000") && message.contains("MCPMUX_RUNTIME_DIR"),
            "{message}"
        );
    }

    #[test]
    fn a_new_directory_is_made_private() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("mcpmux-x");
        let me = Trust::here(false);
        trusted(&dir, true, me).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(matches!(
            trusted(&dir, true, me),
            Err(Untrusted::Writable { .. })
        ));
        // A link planted where the directory should be is not followed.
        let link = tmp.path().join("mcpmux-link");
        std::os::unix::fs::symlink(tmp.path(), &link).unwrap();
        assert!(matches!(
            trusted(&link, true, me),
            Err(Untrusted::NotDirectory { .. })
        ));
    }

    #[test]
    fn a_record_is_written_without_following_a_planted_link() {
        let tmp = tempfile::tempdir().unwrap();
        let victim = tmp.path().join("victim");
        std::fs::write(&victim, "untouched").unwrap();
        let path = tmp.path().join("123.json");
        std::os::unix::fs::symlink(&victim, &path).unwrap();
        write(&path, b"{}").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "untouched");
        assert!(!std::fs::symlink_metadata(&path).unwrap().is_symlink());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "{}");
    }

    #[test]
    fn a_record_of_another_user_or_of_another_users_process_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("1.json");
        let me = nix::unistd::getuid().as_raw();
        let record = DaemonRecord {
            pid: std::process::id(),
            url: "http://127.0.0.1:1/mcp".into(),
            admin: None,
            admin_token_file: None,
            config: "c".into(),
            state_dir: "s".into(),
        };
        write(&path, &serde_json::to_vec(&record).unwrap()).unwrap();
        // The unit test binary is named mcpmux-…, so its pid reads as a live daemon's…
        assert!(matches!(read(&path, me), Read::Live(_)));
        // …but a record not written by the expected owner is not believed at all.
        assert!(matches!(read(&path, me.wrapping_add(1)), Read::Refused));
        assert_eq!(process_owner(std::process::id()), Some(me));
    }
}
