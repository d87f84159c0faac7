//! Sections 4 and 6, `mcpmux audit verify` on the stopped store names the edited, missing, moved or
//! truncated record, and an untouched store verifies (directly and through the admin API); with the
//! daemon stopped, `mcpmux audit query --state-dir` reads what the admin API served.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};

use super::checks::assert_whole_log;
use super::reading::{admin_all, admin_get, json_lines, mcpmux, mcpmux_ok};
use super::three_upstreams;
use super::workload::run_workload;
use crate::common::Daemon;

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// A copy of the state directory `state` at `root/name`, its records edited by `edit`. The store
/// keeps records in blocks: the `blocks` tree maps a block's key to where its bytes are (20 bytes:
/// segment id, offset, length, big-endian), the bytes being the records as JSON lines in
/// `segments/<id, 20 digits>.log`. `edit` gets every record in order and may change, remove or
/// reorder them; the blocks are written back with as many records each as before, into one new
/// segment, and re-pointed (an emptied block is removed).
fn tampered(state: &Path, root: &Path, name: &str, edit: impl FnOnce(&mut Vec<Value>)) -> PathBuf {
    let dir = root.join(name);
    let audit = dir.join("audit");
    copy_dir(&state.join("audit"), &audit);
    let segment = |id: u64| audit.join("segments").join(format!("{id:020}.log"));
    let db = sled::open(&audit).unwrap();
    let blocks = db.open_tree("blocks").unwrap();
    let mut layout = Vec::new();
    let mut all = Vec::new();
    for entry in blocks.iter() {
        let (key, at) = entry.unwrap();
        let id = u64::from_be_bytes(at[..8].try_into().unwrap());
        let offset = u64::from_be_bytes(at[8..16].try_into().unwrap()) as usize;
        let len = u32::from_be_bytes(at[16..20].try_into().unwrap()) as usize;
        let bytes = std::fs::read(segment(id)).unwrap();
        let records: Vec<Value> =
            serde_json::Deserializer::from_slice(&bytes[offset..offset + len])
                .into_iter()
                .map(Result::unwrap)
                .collect();
        layout.push((key, records.len()));
        all.extend(records);
    }
    edit(&mut all);
    std::fs::remove_dir_all(audit.join("segments")).unwrap();
    std::fs::create_dir(audit.join("segments")).unwrap();
    let mut rest = all.into_iter();
    let mut written = Vec::new();
    for (key, len) in layout {
        let records: Vec<Value> = rest.by_ref().take(len).collect();
        if records.is_empty() {
            blocks.remove(key).unwrap();
            continue;
        }
        let offset = written.len() as u64;
        for r in &records {
            serde_json::to_writer(&mut written, r).unwrap();
            written.push(b'\n');
        }
        let len = (written.len() as u64 - offset) as u32;
        let at = [
            &0u64.to_be_bytes()[..],
            &offset.to_be_bytes(),
            &len.to_be_bytes(),
        ]
        .concat();
        blocks.insert(key, at).unwrap();
    }
    std::fs::write(segment(0), written).unwrap();
    db.flush().unwrap();
    drop(blocks);
    drop(db);
    dir
}

/// The position of record `seq` in the ordered list.
fn position(records: &[Value], seq: u64) -> usize {
    records.iter().position(|r| r["seq"] == seq).unwrap()
}

/// `mcpmux audit query --state-dir STATE --format json --all EXTRA…`: records of the stopped store.
async fn query_store(state_arg: &str, extra: &[&str]) -> Vec<Value> {
    let mut args = vec![
        "audit",
        "query",
        "--state-dir",
        state_arg,
        "--format",
        "json",
        "--all",
    ];
    args.extend_from_slice(extra);
    json_lines(&mcpmux_ok(&args).await)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_store_reads_the_same_and_tampering_is_detected() {
    let mut daemon = Daemon::start(&three_upstreams());
    let admin = daemon.admin();
    let state = daemon.dir.path().join("state");
    let state_arg = state.to_str().unwrap().to_owned();
    let w = run_workload(&daemon.url).await;
    let served = admin_all(&admin, &[]).await;
    assert_whole_log(&served);

    // An untouched store verifies, through the running daemon.
    let verified = admin_get(&admin, "/audit/verify").await;
    assert_eq!(verified["ok"], true, "{verified}");
    assert!(verified["first_break"].is_null(), "{verified}");
    assert!(
        verified["checked"].as_u64().unwrap() >= served.len() as u64,
        "{verified}"
    );
    let out = mcpmux_ok(&["audit", "verify", "--admin", &admin.url]).await;
    assert!(out.starts_with("ok: "), "{out}");
    // While the daemon has the store open, naming its state directory asks the daemon.
    let run = mcpmux(&["audit", "verify", "--state-dir", &state_arg]).await;
    assert!(run.status.success(), "{run:?}");
    assert!(run.stdout.starts_with("ok: "), "{run:?}");

    daemon.terminate();
    let status = daemon.wait_exit(Duration::from_secs(20)).await;
    assert!(status.is_some_and(|s| s.success()), "{status:?}");

    // 6. The stopped store lists what the admin API served, then the shutdown's records.
    let direct = query_store(&state_arg, &[]).await;
    assert_whole_log(&direct);
    assert!(direct.len() > served.len());
    assert_eq!(direct[..served.len()], served[..], "direct ≠ admin API");
    let after: Vec<String> = direct[served.len()..]
        .iter()
        .map(|r| format!("{} {}", r["kind"], r["method"]))
        .collect();
    assert!(
        direct[served.len()..].iter().all(|r| r["kind"] == "event"),
        "only shutdown events come after: {after:?}"
    );
    assert_eq!(
        direct.last().unwrap()["method"],
        "daemon.stopped",
        "{after:?}"
    );
    assert!(
        w.sessions.iter().all(|s| direct
            .iter()
            .any(|r| r["method"] == "session.closed" && r["session"] == json!(s))),
        "every session is closed at shutdown: {after:?}"
    );
    // A filter on the store directly.
    let direct_alpha = query_store(&state_arg, &["--limit", "5", "--upstream", "alpha"]).await;
    let want: Vec<Value> = direct
        .iter()
        .filter(|r| r["upstream"] == "alpha")
        .cloned()
        .collect();
    assert_eq!(direct_alpha, want, "direct --upstream alpha");

    // 4. The untouched store verifies directly.
    let out = mcpmux_ok(&["audit", "verify", "--state-dir", &state_arg]).await;
    assert!(
        out.starts_with(&format!("ok: {} records verified", direct.len())),
        "{out}"
    );

    let copies = tempfile::tempdir().unwrap();
    let last = direct.len() as u64 - 1;
    let mid = last / 2;
    let cases: Vec<(&str, PathBuf, u64, &str)> = vec![
        (
            "edited",
            tampered(&state, copies.path(), "edited", |records| {
                let at = position(records, mid);
                let other = if records[at]["method"] == "tools/list" {
                    "ping"
                } else {
                    "tools/list"
                };
                records[at]["method"] = json!(other);
            }),
            mid,
            "edited",
        ),
        (
            "deleted",
            tampered(&state, copies.path(), "deleted", |records| {
                records.remove(position(records, mid));
            }),
            mid,
            "missing",
        ),
        (
            "swapped",
            tampered(&state, copies.path(), "swapped", |records| {
                let at = position(records, mid);
                records.swap(at, at + 1);
            }),
            mid,
            "moved",
        ),
        (
            "truncated",
            tampered(&state, copies.path(), "truncated", |records| {
                assert_eq!(records.last().unwrap()["seq"], last);
                records.pop();
            }),
            last,
            "removed from the end",
        ),
        (
            "segments removed",
            tampered(&state, copies.path(), "segments removed", |_| {}),
            0,
            "not readable",
        ),
    ];
    // The record bytes themselves gone: the store still opens, and verify names the first loss.
    std::fs::remove_dir_all(copies.path().join("segments removed/audit/segments")).unwrap();
    let untouched = copies.path().join("untouched");
    copy_dir(&state.join("audit"), &untouched.join("audit"));
    let out = mcpmux_ok(&[
        "audit",
        "verify",
        "--state-dir",
        untouched.to_str().unwrap(),
    ])
    .await;
    assert!(out.starts_with("ok: "), "untouched copy: {out}");
    for (name, dir, seq, problem) in cases {
        let run = mcpmux(&["audit", "verify", "--state-dir", dir.to_str().unwrap()]).await;
        assert!(!run.status.success(), "{name}: verify passed: {run:?}");
        let line = run.stdout.trim();
        assert!(
            line.starts_with(&format!("BROKEN at record #{seq}:")) && line.contains(problem),
            "{name}: expected record #{seq} ({problem}), got: {run:?}"
        );
        eprintln!("tampering {name}: {line}");
    }
}
