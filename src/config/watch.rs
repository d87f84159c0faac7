//! Watching the config file for changes with notify — changes to the file itself or to a symlink
//! on the way to it, not to other files beside it — debounced with a ceiling. What a change
//! starts (a reload) is the daemon's business: this only says "the file changed".

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::mpsc;

/// How long the file must be quiet after a change before it is read (editors write in steps).
const DEBOUNCE: Duration = Duration::from_millis(300);
/// The longest a stream of changes to the file delays reading it.
const DEBOUNCE_CEILING: Duration = Duration::from_secs(2);

/// Watches `file` and sends on the returned channel once per debounced change. What is watched
/// is every path whose change may change what the file reads as — the file as written, where it
/// really is, and every symlink on the way — through their directories (so saves that write a
/// temporary file and rename it, and a symlinked directory pointed elsewhere, are seen); the
/// watches are set again after each change, as a symlink may now lead elsewhere. Events for
/// other files in those directories (a log, a state directory) are not changes. Events are
/// debounced, with a ceiling: a file written again and again is still reported within
/// [`DEBOUNCE_CEILING`]. Changes seen while the receiver has not taken the last one are one
/// change. The watch ends when the receiver is dropped.
pub fn watch_file(file: PathBuf) -> mpsc::Receiver<()> {
    let (changed, changes) = mpsc::channel(1);
    let (tx, mut rx) = mpsc::unbounded_channel::<()>();
    tokio::spawn(async move {
        let mut watcher = watch(&file, &tx);
        while rx.recv().await.is_some() {
            // Quiet for DEBOUNCE first: take every event of the same save (but no longer than
            // the ceiling).
            let ceiling = tokio::time::Instant::now() + DEBOUNCE_CEILING;
            loop {
                let left = ceiling.saturating_duration_since(tokio::time::Instant::now());
                match tokio::time::timeout(DEBOUNCE.min(left), rx.recv()).await {
                    Ok(Some(())) if !left.is_zero() => {}
                    _ => break,
                }
            }
            drop(watcher.take());
            watcher = watch(&file, &tx);
            match changed.try_send(()) {
                // Full: a change the receiver has not taken yet already covers this one.
                Ok(()) | Err(mpsc::error::TrySendError::Full(())) => {}
                Err(mpsc::error::TrySendError::Closed(())) => return,
            }
        }
    });
    changes
}

/// Every path whose change may change what `file` reads as: the file, and each symlink met on
/// the way to what it really is (links to links followed, a bounded number of times), with that
/// real path. Each is absolute, its directory canonical where it exists.
fn chain(file: &Path) -> Vec<PathBuf> {
    let absolute = std::path::absolute(file).unwrap_or_else(|_| file.to_path_buf());
    let mut paths: Vec<PathBuf> = Vec::new();
    let mut todo = vec![absolute];
    while let Some(path) = todo.pop() {
        if paths.len() > 64 || paths.contains(&path) {
            continue;
        }
        paths.push(path.clone());
        for link in path.ancestors() {
            let Ok(target) = std::fs::read_link(link) else {
                continue;
            };
            let rest = path.strip_prefix(link).unwrap_or(Path::new(""));
            let dir = link.parent().unwrap_or(Path::new("/"));
            todo.push(dir.join(target).join(rest));
            if !paths.iter().any(|p| p == link) {
                paths.push(link.to_path_buf());
            }
        }
    }
    if let Ok(real) = std::fs::canonicalize(file) {
        paths.push(real);
    }
    let mut seen = std::collections::HashSet::new();
    paths
        .into_iter()
        .map(|p| canonical_dir(&p))
        .filter(|p| seen.insert(p.clone()))
        .collect()
}

/// `path` with its directory canonical (the last component kept as it is, link or not).
fn canonical_dir(path: &Path) -> PathBuf {
    match (path.parent(), path.file_name()) {
        (Some(dir), Some(name)) => std::fs::canonicalize(dir)
            .unwrap_or_else(|_| dir.to_path_buf())
            .join(name),
        _ => path.to_path_buf(),
    }
}

/// Watches the directories of `file`'s [`chain`] for changes to the paths in it; `None` (with a
/// warning) when it cannot.
fn watch(file: &Path, tx: &mpsc::UnboundedSender<()>) -> Option<notify::RecommendedWatcher> {
    use notify::{RecursiveMode, Watcher};
    let paths = chain(file);
    let tx = tx.clone();
    let relevant = paths.clone();
    let handler = move |event: notify::Result<notify::Event>| {
        let Ok(event) = event else {
            return;
        };
        // notify names a path as its watched (canonical) directory joined with the name.
        if !event.kind.is_access() && event.paths.iter().any(|p| relevant.contains(p)) {
            let _ = tx.send(());
        }
    };
    let mut watcher = match notify::recommended_watcher(handler) {
        Ok(w) => w,
        Err(e) => {
            tracing::warn!(error = %e, "Cannot watch the config file; reload with SIGHUP or `mcpmux reload`.");
            return None;
        }
    };
    let mut seen = std::collections::HashSet::new();
    for dir in paths.iter().filter_map(|p| p.parent()) {
        if !seen.insert(dir) {
            continue;
        }
        if let Err(e) = watcher.watch(dir, RecursiveMode::NonRecursive) {
            tracing::warn!(dir = %dir.display(), error = %e, "Cannot watch the config's directory; reload with SIGHUP or `mcpmux reload`.");
        }
    }
    Some(watcher)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{chain, watch_file};

    #[tokio::test]
    async fn a_save_of_the_file_is_reported_as_a_change() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let file = dir.path().join("mcpmux.toml");
        std::fs::write(&file, "a").unwrap_or_else(|e| panic!("{e}"));
        let mut changes = watch_file(file.clone());
        // The watch is set by a task of its own: write until it sees one (generous, loaded CI).
        let seen = tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                std::fs::write(&file, "b").unwrap_or_else(|e| panic!("{e}"));
                if tokio::time::timeout(Duration::from_secs(3), changes.recv())
                    .await
                    .is_ok()
                {
                    return;
                }
            }
        })
        .await;
        assert!(
            seen.is_ok(),
            "no change was reported for {}",
            file.display()
        );
    }

    #[test]
    fn the_chain_holds_each_link_on_the_way_and_the_real_file() {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let root = std::fs::canonicalize(dir.path()).unwrap_or_else(|e| panic!("{e}"));
        // root/current -> v1 (a directory link); root/v1/mcpmux.toml -> ..data/mcpmux.toml;
        // root/v1/..data -> ..2026 (a ConfigMap's layout).
        std::fs::create_dir_all(root.join("v1/..2026")).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(root.join("v1/..2026/mcpmux.toml"), "").unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink("..2026", root.join("v1/..data"))
            .unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink("..data/mcpmux.toml", root.join("v1/mcpmux.toml"))
            .unwrap_or_else(|e| panic!("{e}"));
        std::os::unix::fs::symlink(root.join("v1"), root.join("current"))
            .unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(root.join("v1/daemon.stderr"), "").unwrap_or_else(|e| panic!("{e}"));
        let chain = chain(&root.join("current/mcpmux.toml"));
        for expected in [
            "current",
            "v1/mcpmux.toml",
            "v1/..data",
            "v1/..2026/mcpmux.toml",
        ] {
            assert!(
                chain.contains(&root.join(expected)),
                "{expected} is not in {chain:?}"
            );
        }
        assert!(!chain.iter().any(|p| p.ends_with("daemon.stderr")));
    }
}
