//! The daemon's processes as /proc shows them: its descendants, whether one lives, its command
//! name and memory, and the check that none is left behind.

use std::collections::HashMap;
use std::time::Duration;

use super::poll_until;

/// Every process whose parent chain leads to `root` (read from /proc).
pub fn descendants(root: u32) -> Vec<u32> {
    let mut parent_of = HashMap::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Some(ppid) = stat_field(pid, 1).and_then(|p| p.parse::<u32>().ok()) {
            parent_of.insert(pid, ppid);
        }
    }
    let mut out = Vec::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for (&child, &parent) in &parent_of {
            if parent == p && !out.contains(&child) {
                out.push(child);
                frontier.push(child);
            }
        }
    }
    out
}

/// Whether `pid` is a live process (not gone, not a zombie).
pub fn alive(pid: u32) -> bool {
    stat_field(pid, 0).is_some_and(|state| state != "Z" && state != "X")
}

/// Field `n` after the command in /proc/PID/stat (0 = state, 1 = ppid).
fn stat_field(pid: u32, n: usize) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after = stat.rsplit_once(')')?.1;
    after.split_whitespace().nth(n).map(str::to_owned)
}

/// The command name of a process (`/proc/PID/comm`).
pub fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm"))
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// Asserts that every one of `procs` is gone within 10 s, naming those left behind `when`.
pub async fn assert_all_gone(procs: &[u32], when: &str) {
    let all_gone = poll_until(Duration::from_secs(10), || async {
        procs.iter().all(|&p| !alive(p))
    })
    .await;
    let left: Vec<(u32, String)> = procs
        .iter()
        .filter(|&&p| alive(p))
        .map(|&p| (p, comm(p)))
        .collect();
    assert!(all_gone, "processes left behind {when}: {left:?}");
}

/// A `/proc/PID/status` memory field in KiB (`VmRSS`: resident now, `VmHWM`: peak resident).
pub fn proc_kib(pid: u32, field: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}
