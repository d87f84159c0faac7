//! Section 5, `kill -9` under load: after a restart on the same store the chain verifies and every
//! call that completed 100 ms before the kill is there.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::checks::assert_whole_log;
use super::reading::{admin_all, admin_get, mcpmux_ok};
use crate::common::{Client, Daemon, alive, descendants, poll_until, test_upstream};

/// One `tools/call` over a plain HTTP client: the result, or `None` if the daemon did not answer.
async fn echo_call(http: &reqwest::Client, client: &Client, id: u64, i: u64) -> Option<Value> {
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                      "params": {"name": "alpha__echo", "arguments": {"i": i}}});
    let response = http
        .post(&client.url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", &client.version)
        .header("mcp-session-id", client.session.as_deref().unwrap())
        .body(body.to_string())
        .send()
        .await
        .ok()?;
    if !response.status().is_success() {
        return None;
    }
    let text = response.text().await.ok()?;
    let data = text
        .lines()
        .find_map(|l| l.strip_prefix("data:"))
        .unwrap_or(&text);
    let answer: Value = serde_json::from_str(data.trim()).ok()?;
    answer.get("result").cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_under_load_loses_only_the_last_moments() {
    let config = format!(
        "{}audit_redaction = \"full\"\n",
        test_upstream("alpha", &[])
    );
    let mut daemon = Daemon::start(&config);
    let state = daemon.dir.path().join("state");
    let client = Client::connect(&daemon.url).await;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    assert!(
        echo_call(&http, &client, 1, 0).await.is_some(),
        "first call"
    );
    let pid = daemon.pid();
    let children = descendants(pid);
    assert!(!children.is_empty(), "no upstream process");

    // Sequential calls; the kill lands 2 s in, while they go on.
    let started = Instant::now();
    let killer = tokio::spawn(async move {
        tokio::time::sleep_until((started + Duration::from_secs(2)).into()).await;
        let at = Instant::now();
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap()),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        at
    });
    let mut completed: Vec<(u64, Instant)> = Vec::new();
    let mut i = 1;
    loop {
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "calls still answered 15 s in"
        );
        match echo_call(&http, &client, i + 1, i).await {
            Some(result) => {
                assert_eq!(result["structuredContent"]["params"]["arguments"]["i"], i);
                completed.push((i, Instant::now()));
                i += 1;
            }
            None => break,
        }
    }
    let killed_at = killer.await.unwrap();
    let status = daemon.wait_exit(Duration::from_secs(10)).await;
    assert!(status.is_some_and(|s| !s.success()), "{status:?}");
    // The upstreams see their stdin close and exit; any left over is ended by its pid.
    if !poll_until(Duration::from_secs(10), || async {
        children.iter().all(|p| !alive(*p))
    })
    .await
    {
        for p in children.iter().filter(|p| alive(**p)) {
            let pid = nix::unistd::Pid::from_raw(i32::try_from(*p).unwrap());
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        }
        panic!("upstream processes outlived the killed daemon by 10 s");
    }
    let calls_before_kill = completed.iter().filter(|(_, t)| *t <= killed_at).count();
    assert!(
        calls_before_kill >= 50,
        "too few calls before the kill: {calls_before_kill}"
    );

    // A new daemon on the same store.
    let state_arg = state.to_str().unwrap().to_owned();
    let restarted = Daemon::start_with(
        &format!("[server]\nlisten = \"127.0.0.1:0\"\n\n{config}"),
        &["--state-dir", &state_arg],
    );
    let admin = restarted.admin();
    let verified = admin_get(&admin, "/audit/verify").await;
    assert_eq!(verified["ok"], true, "after kill -9: {verified}");
    let out = mcpmux_ok(&["audit", "verify", "--admin", &admin.url]).await;
    assert!(out.starts_with("ok: "), "{out}");

    let all = admin_all(&admin, &[]).await;
    assert_whole_log(&all);
    let mut recorded: HashMap<u64, usize> = HashMap::new();
    for r in all.iter().filter(|r| r["target"] == "alpha__echo") {
        assert_eq!(r["outcome"], "ok", "{r}");
        *recorded
            .entry(r["args"]["i"].as_u64().unwrap())
            .or_default() += 1;
    }
    assert!(recorded.values().all(|n| *n == 1), "a call recorded twice");
    // Offsets from the kill, in ms (negative: completed before it).
    let offset = |t: Instant| {
        if t >= killed_at {
            t.duration_since(killed_at).as_secs_f64() * 1000.0
        } else {
            -(killed_at.duration_since(t).as_secs_f64() * 1000.0)
        }
    };
    let missing: Vec<(u64, f64)> = completed
        .iter()
        .filter(|(i, _)| !recorded.contains_key(i))
        .map(|(i, t)| (*i, offset(*t)))
        .collect();
    let last_recorded = completed
        .iter()
        .rev()
        .find(|(i, _)| recorded.contains_key(i))
        .map(|(i, t)| format!("#{i} at {:+.1} ms", offset(*t)));
    let in_flight = i;
    eprintln!(
        "kill -9: {} calls completed ({calls_before_kill} before the kill, {:.0} ms into the \
         load); after restart {} of them are missing: {:?} (call, completion in ms relative \
         to the kill); last recorded: {}; the call in flight (#{in_flight}) was {}recorded; \
         chain verified: {} records",
        completed.len(),
        killed_at.duration_since(started).as_secs_f64() * 1000.0,
        missing.len(),
        missing
            .iter()
            .map(|(i, ms)| format!("#{i} {ms:+.1}"))
            .collect::<Vec<_>>(),
        last_recorded.unwrap_or_default(),
        if recorded.contains_key(&in_flight) {
            ""
        } else {
            "not "
        },
        verified["checked"],
    );
    for (i, ms) in &missing {
        assert!(
            *ms > -100.0,
            "call #{i} completed {ms:.1} ms before the kill but is not in the log"
        );
    }
    // Every call in the log was answered or in flight: nothing is invented.
    assert!(
        recorded.keys().all(|i| *i <= in_flight),
        "records of calls never made"
    );
    // The restarted daemon continues the chain: its daemon.started comes after the old records.
    let restart = all
        .iter()
        .rposition(|r| r["method"] == "daemon.started")
        .unwrap();
    assert!(restart > 0, "the restarted daemon's record is first");
    assert!(
        all[..restart]
            .iter()
            .all(|r| r["method"] != "daemon.stopped"),
        "a killed daemon recorded daemon.stopped"
    );
    drop(restarted);
    drop(daemon);
}
