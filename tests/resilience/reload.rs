//! Hot reload of a running daemon: while hosts call an upstream the config does not change, the
//! file is rewritten again and again (another upstream added, one removed while a call to it is
//! still running, one changed; a profile changed under an open session; an invalid file; saves
//! made the way editors make them, by renaming a temporary file; SIGHUP and `mcpmux reload`).
//! No call fails, the unchanged upstream keeps its process and session state, the changed one
//! restarts, the removed one finishes its call first, and the invalid file changes nothing and
//! shows in status with its line and fix. A config reached through a symlinked directory is
//! reloaded when the link is pointed elsewhere. Hosts and profiles change for open sessions: a
//! host's new profile applies to its open session (which answers every request while reloads
//! change it), a removed host's session ends.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crate::common;
use crate::common::{Client, Daemon, MCPMUX, poll_until, test_upstream};
use serde_json::{Value, json};

/// Saves `text` as editors do: written to a temporary file beside `path`, then renamed over it.
fn save(path: &Path, text: &str) {
    let tmp = path.with_extension("toml.swp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn config(upstreams: &[String], profile_upstreams: &[&str]) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n\n{}\n[profiles.narrow]\nupstreams = {}\npath = true\n",
        upstreams.concat(),
        common::toml_list(
            &profile_upstreams
                .iter()
                .map(|s| (*s).to_owned())
                .collect::<Vec<_>>()
        ),
    )
}

async fn names(client: &Client) -> Vec<String> {
    let tools = client.list_all("tools/list", "tools").await;
    tools
        .iter()
        .map(|t| t["name"].as_str().unwrap().to_owned())
        .collect()
}

async fn upstream_names(daemon: &Daemon) -> Vec<String> {
    let status = daemon.status().await;
    status["upstreams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|u| u["name"].as_str().unwrap().to_owned())
        .collect()
}

/// The admin API's `GET /sessions`.
async fn open_sessions(daemon: &Daemon) -> Value {
    daemon.admin().json("/sessions").await
}

async fn reloads(daemon: &Daemon) -> (u64, u64) {
    let status = daemon.status().await;
    let config = &status["config"];
    (
        config["reloads"].as_u64().unwrap(),
        config["rejected"].as_u64().unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reload_under_load_fails_no_call_and_touches_only_what_changed() {
    let steady = test_upstream("steady", &["--protocol-tools"]);
    let changing = test_upstream("changing", &[]);
    let leaving = test_upstream("leaving", &[]);
    let newcomer = test_upstream("newcomer", &[]);
    // A remote upstream changes too: a new HTTP session replaces the old one.
    let (far, far_server) = common::test_upstream_via("far", common::Via::Http, &[]);
    let far_server = far_server.unwrap();
    let far_changed = format!("{far}headers = {{ x-reloaded = \"yes\" }}\n");
    let first = config(
        &[steady.clone(), changing.clone(), leaving, far.clone()],
        &["steady"],
    );
    let mut daemon = Daemon::start_with(&first, &[]);
    let path = daemon.dir.path().join("mcpmux.toml");
    let host = Arc::new(Client::connect(&daemon.url).await);
    daemon
        .wait_for_tools(&host, |n| {
            [
                "steady__echo",
                "changing__echo",
                "leaving__echo",
                "far__echo",
            ]
            .iter()
            .all(|t| n.iter().any(|x| x == t))
        })
        .await;
    let far_sessions = || async {
        reqwest::get(far_server.url("/sessions"))
            .await
            .unwrap()
            .json::<Vec<String>>()
            .await
            .unwrap()
    };
    let far_before = far_sessions().await;
    assert_eq!(far_before.len(), 1, "{far_before:?}");
    let narrow = Client::connect(&format!("{}/narrow", daemon.url)).await;
    assert!(
        names(&narrow)
            .await
            .iter()
            .all(|n| n.starts_with("steady__"))
    );
    host.result("logging/setLevel", json!({"level": "warning"}))
        .await;
    let steady_pid = daemon.upstream_status("steady").await["pid"].clone();
    let changing_pid = daemon.upstream_status("changing").await["pid"].clone();
    assert!(steady_pid.is_u64() && changing_pid.is_u64());

    // The load: four callers of the unchanged upstream, until told to stop.
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let mut callers = Vec::new();
    for caller in 0..4 {
        let (host, stop, ok, failed) = (host.clone(), stop.clone(), ok.clone(), failed.clone());
        callers.push(tokio::spawn(async move {
            let mut i = 0u64;
            let mut failures = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                i += 1;
                let answer = host
                    .request(
                        "tools/call",
                        json!({"name": "steady__echo", "arguments": {"caller": caller, "i": i}}),
                    )
                    .await;
                let text = answer["result"]["content"][0]["text"]
                    .as_str()
                    .unwrap_or_default();
                if text.contains(&format!("\"i\":{i}")) {
                    ok.fetch_add(1, Ordering::Relaxed);
                } else {
                    failed.fetch_add(1, Ordering::Relaxed);
                    failures.push(answer);
                }
            }
            failures
        }));
    }

    // A call to the upstream about to be removed is still running when it is removed.
    let slow = host.start_tool("leaving__slow", json!({"ms": 1500}));
    tokio::time::sleep(Duration::from_millis(200)).await;

    // 1. Add one, remove one, change one — saved by renaming a temporary file.
    let changed = test_upstream("changing", &["--describe", "echo=changed by a reload"]);
    let second = config(
        &[
            steady.clone(),
            changed.clone(),
            newcomer.clone(),
            far_changed.clone(),
        ],
        &["steady"],
    );
    save(&path, &second);
    assert!(
        poll_until(Duration::from_secs(30), || async {
            let names = names(&host).await;
            names.iter().any(|n| n == "newcomer__echo")
                && !names.iter().any(|n| n.starts_with("leaving__"))
        })
        .await,
        "the reload did not add newcomer and remove leaving: {:?}\n{}",
        names(&host).await,
        daemon.stderr()
    );
    let (_, answer) = slow.finish().await;
    assert_eq!(
        answer["result"]["content"][0]["text"], "slept 1500ms",
        "the removed upstream's call in flight did not finish: {answer}"
    );
    assert!(
        poll_until(Duration::from_secs(30), || async {
            let s = daemon.upstream_status("changing").await;
            s["state"] == "ready" && s["pid"] != changing_pid
        })
        .await,
        "the changed upstream was not restarted: {}",
        daemon.upstream_status("changing").await
    );
    let tools = host.list_all("tools/list", "tools").await;
    let echo = tools
        .iter()
        .find(|t| t["name"] == "changing__echo")
        .unwrap();
    assert_eq!(echo["description"], "changed by a reload");
    assert_eq!(
        upstream_names(&daemon).await,
        ["changing", "far", "newcomer", "steady"]
    );

    // 2. A profile changes under a session that is open at its path.
    assert!(
        poll_until(Duration::from_secs(30), || async {
            let now = far_sessions().await;
            now.len() == 1 && now != far_before
        })
        .await,
        "the changed remote upstream kept its HTTP session: {:?}",
        far_sessions().await
    );
    let echoed = host
        .tool_text("far__echo", json!({"after": "reload"}))
        .await;
    assert!(echoed.contains("reload"), "{echoed}");
    let third = config(
        &[
            steady.clone(),
            changed.clone(),
            newcomer.clone(),
            far_changed,
        ],
        &["steady", "newcomer"],
    );
    save(&path, &third);
    assert!(
        poll_until(Duration::from_secs(30), || async {
            names(&narrow).await.iter().any(|n| n == "newcomer__echo")
        })
        .await,
        "the open session does not see its profile's new upstream: {:?}",
        names(&narrow).await
    );

    // 3. An invalid file changes nothing and is reported with its line and fix.
    let (applied, _) = reloads(&daemon).await;
    let invalid = format!("{third}\n[upstreams.broken]\nenabled = true\n");
    save(&path, &invalid);
    assert!(
        poll_until(Duration::from_secs(30), || async {
            reloads(&daemon).await.1 == 1
        })
        .await,
        "the invalid file was not refused: {}",
        daemon.status().await["config"]
    );
    let status = daemon.status().await;
    let error = status["config"]["last_reload"]["error"]
        .as_str()
        .unwrap()
        .to_owned();
    let line = invalid
        .lines()
        .position(|l| l == "[upstreams.broken]")
        .unwrap()
        + 1;
    assert!(
        error.contains(&format!("mcpmux.toml:{line}:")) && error.contains("Fix:"),
        "{error}"
    );
    assert_eq!(reloads(&daemon).await.0, applied);
    assert_eq!(
        upstream_names(&daemon).await,
        ["changing", "far", "newcomer", "steady"]
    );
    let cli_status = std::process::Command::new(MCPMUX)
        .args(["status", "--admin", daemon.admin_url.as_deref().unwrap()])
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&cli_status.stdout);
    assert!(
        printed.contains("NOT RUNNING") && printed.contains("broken"),
        "{printed}"
    );

    // 3b. A refused file whose quoted line holds a secret: masked in status and in the log.
    let leaky = format!(
        "{third}\n[upstreams.leaky]\ncommand = \"x\"\nenv = {{ API_TOKEN = \"sk-reload-secret\"\n"
    );
    save(&path, &leaky);
    assert!(
        poll_until(Duration::from_secs(30), || async {
            reloads(&daemon).await.1 == 2
        })
        .await,
        "the leaky file was not refused: {}",
        daemon.status().await["config"]
    );
    let status = daemon.status().await;
    let error = status["config"]["last_reload"]["error"].as_str().unwrap();
    assert!(
        error.contains("API_TOKEN = \"••••••\"") && !error.contains("sk-reload-secret"),
        "{error}"
    );
    assert!(
        !daemon.stderr().contains("sk-reload-secret"),
        "a log line holds the secret"
    );

    // 4. The valid file again: the error clears, and nothing restarts for a file that changes
    //    nothing that runs. `mcpmux reload` and SIGHUP reload too.
    save(&path, &third);
    assert!(
        poll_until(Duration::from_secs(30), || async {
            daemon.status().await["config"]["last_reload"]["applied"] == true
        })
        .await
    );
    let output = std::process::Command::new(MCPMUX)
        .args(["reload", "--admin", daemon.admin_url.as_deref().unwrap()])
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{printed}");
    assert!(
        printed.contains("added -; removed -; changed -; 4 unchanged"),
        "{printed}"
    );
    let before = reloads(&daemon).await.0;
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(daemon.pid() as i32),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
    assert!(
        poll_until(Duration::from_secs(30), || async {
            reloads(&daemon).await.0 == before + 1
        })
        .await,
        "SIGHUP did not reload"
    );

    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    let mut failures = Vec::new();
    for caller in callers {
        failures.extend(caller.await.unwrap());
    }
    let (ok, failed) = (ok.load(Ordering::Relaxed), failed.load(Ordering::Relaxed));
    assert_eq!(failed, 0, "calls failed during reloads: {failures:?}");
    assert!(ok > 100, "the load made only {ok} calls");

    let steady_now = daemon.upstream_status("steady").await;
    assert_eq!(
        steady_now["pid"], steady_pid,
        "the unchanged upstream was restarted"
    );
    assert_eq!(steady_now["restarts"], 0);
    // Its session state is the same process's: the log level the host set is still there.
    assert_eq!(
        host.tool_text("steady__log_level", json!({})).await,
        "level: warning"
    );
    let audited = daemon.audit_json();
    assert!(
        audited.contains("config.reloaded") && audited.contains("config.rejected"),
        "{audited}"
    );
    assert!(daemon.stop());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_in_a_symlinked_directory_reloads_when_the_link_moves() {
    let dir = tempfile::tempdir().unwrap();
    let (v1, v2) = (dir.path().join("v1"), dir.path().join("v2"));
    std::fs::create_dir_all(&v1).unwrap();
    std::fs::create_dir_all(&v2).unwrap();
    let one = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n\n{}",
        test_upstream("first", &[])
    );
    let two = format!("{one}{}", test_upstream("second", &[]));
    std::fs::write(v1.join("mcpmux.toml"), &one).unwrap();
    std::fs::write(v2.join("mcpmux.toml"), &two).unwrap();
    let current = dir.path().join("current");
    std::os::unix::fs::symlink(&v1, &current).unwrap();
    let daemon = Daemon::start_file(dir, &current.join("mcpmux.toml"), &[]);
    let host = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&host, |n| n.iter().any(|t| t == "first__echo"))
        .await;

    // The link is swapped atomically, as deployment tools do: a new link renamed over it.
    let next = daemon.dir.path().join("current.next");
    std::os::unix::fs::symlink(&v2, &next).unwrap();
    std::fs::rename(&next, daemon.dir.path().join("current")).unwrap();
    daemon
        .wait_for_tools(&host, |n| n.iter().any(|t| t == "second__echo"))
        .await;

    // And an edit in the directory the link now leads to is seen too.
    let three = format!("{one}{}", test_upstream("third", &[]));
    save(&v2.join("mcpmux.toml"), &three);
    daemon
        .wait_for_tools(&host, |n| {
            n.iter().any(|t| t == "third__echo") && !n.iter().any(|t| t == "second__echo")
        })
        .await;
    let status: Value = daemon.status().await;
    assert_eq!(status["config"]["reloads"], 2, "{}", status["config"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hosts_and_profiles_change_for_open_sessions() {
    let (a, b) = ("reload-host-a-token", "reload-host-b-token");
    let upstreams = format!("{}{}", test_upstream("one", &[]), test_upstream("two", &[]));
    let hosts = |a_profile: Option<&str>, with_a: bool, with_b: bool| {
        let mut text = String::from("[profiles.narrow]\nupstreams = [\"one\"]\n\n");
        if with_a {
            text += &format!("[hosts.a]\ntoken_sha256 = \"{}\"\n", common::sha256_hex(a));
            if let Some(p) = a_profile {
                text += &format!("profile = \"{p}\"\n");
            }
        }
        if with_b {
            text += &format!("[hosts.b]\ntoken_sha256 = \"{}\"\n", common::sha256_hex(b));
        }
        format!("[server]\nlisten = \"127.0.0.1:0\"\n\n{text}\n{upstreams}")
    };
    let daemon = Daemon::start_with(&hosts(None, true, false), &[]);
    let path = daemon.dir.path().join("mcpmux.toml");
    let host_a = Client::connect_as(&daemon.url, a).await;
    daemon
        .wait_for_tools(&host_a, |n| {
            n.iter().any(|t| t == "one__echo") && n.iter().any(|t| t == "two__echo")
        })
        .await;
    // b is not a host yet.
    let refused = common::initialize_as(&daemon.url, Some(b)).await;
    assert_eq!(refused.status(), 401);

    // a gets a profile, b is added: a's open session sees the profile at once.
    save(&path, &hosts(Some("narrow"), true, true));
    assert!(
        poll_until(Duration::from_secs(30), || async {
            let names = names(&host_a).await;
            names.iter().any(|n| n == "one__echo") && !names.iter().any(|n| n.starts_with("two__"))
        })
        .await,
        "a's session does not see its new profile: {:?}",
        names(&host_a).await
    );
    let sessions = open_sessions(&daemon).await;
    let listed = &sessions["sessions"][0];
    assert_eq!(listed["principal"], "a", "{sessions}");
    assert_eq!(listed["profile"], "narrow", "{sessions}");
    let host_b = Client::connect_as(&daemon.url, b).await;
    assert!(names(&host_b).await.iter().any(|n| n == "two__echo"));

    // a is removed: its session ends, and its token no longer gets in.
    save(&path, &hosts(None, false, true));
    assert!(
        poll_until(Duration::from_secs(30), || async {
            let answer = host_a
                .post(&json!({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
                .await;
            answer.status() == 401
        })
        .await,
        "the removed host still gets in"
    );
    let sessions = open_sessions(&daemon).await;
    let principals: Vec<&str> = (sessions["sessions"].as_array().unwrap().iter())
        .filter_map(|s| s["principal"].as_str())
        .collect();
    assert_eq!(principals, ["b"], "{sessions}");
    assert!(names(&host_b).await.iter().any(|n| n == "two__echo"));
}

/// A reload moves a host's open sessions to its new profile one by one, after the new settings
/// are in place: a request admitted under them before its session's turn still finds its
/// session (it once got 404 "Session not found").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hosts_session_answers_every_request_while_reloads_change_its_profile() {
    const TOKEN: &str = "reload-profile-host-token";
    let config = |narrow: bool| {
        format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n\n[profiles.narrow]\nupstreams = [\"one\"]\n\n\
             [hosts.a]\ntoken_sha256 = \"{}\"\n{}\n{}",
            common::sha256_hex(TOKEN),
            if narrow { "profile = \"narrow\"\n" } else { "" },
            test_upstream("one", &[]),
        )
    };
    let daemon = Daemon::start_with(&config(false), &[]);
    let path = daemon.dir.path().join("mcpmux.toml");
    let host = Arc::new(Client::connect_as(&daemon.url, TOKEN).await);
    daemon
        .wait_for_tools(&host, |n| n.iter().any(|t| t == "one__echo"))
        .await;
    let stop = Arc::new(AtomicBool::new(false));
    let pingers: Vec<_> = (0..6)
        .map(|_| {
            let (host, stop) = (Arc::clone(&host), Arc::clone(&stop));
            tokio::spawn(async move {
                let ping = json!({"jsonrpc": "2.0", "id": 1, "method": "ping"});
                let (mut answered, mut refused) = (0u64, Vec::new());
                while !stop.load(Ordering::Relaxed) {
                    let answer = host.post(&ping).await;
                    match answer.status().as_u16() {
                        200 => answered += 1,
                        status => {
                            refused.push(format!("{status}: {}", answer.text().await.unwrap()))
                        }
                    }
                }
                (answered, refused)
            })
        })
        .collect();
    for round in 0..20 {
        let before = reloads(&daemon).await.0;
        save(&path, &config(round % 2 == 0));
        assert!(
            poll_until(Duration::from_secs(30), || async {
                reloads(&daemon).await.0 > before
            })
            .await,
            "reload {round} was not applied"
        );
    }
    stop.store(true, Ordering::Relaxed);
    let (mut answered, mut refused) = (0, Vec::new());
    for pinger in pingers {
        let (a, r) = pinger.await.unwrap();
        answered += a;
        refused.extend(r);
    }
    assert!(
        refused.is_empty(),
        "{} refused: {:?}",
        refused.len(),
        &refused[..refused.len().min(3)]
    );
    assert!(answered > 0, "no request was answered");
    let sessions = open_sessions(&daemon).await;
    assert_eq!(
        sessions["sessions"][0]["profile"],
        Value::Null,
        "{sessions}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_disabled_by_a_reload_leaves_the_catalog_and_comes_back_enabled() {
    let one = test_upstream("one", &[]);
    let two = test_upstream("two", &[]);
    let text = |two_enabled: bool| {
        format!("[server]\nlisten = \"127.0.0.1:0\"\n\n{one}{two}enabled = {two_enabled}\n")
    };
    let daemon = Daemon::start_with(&text(true), &[]);
    let path = daemon.dir.path().join("mcpmux.toml");
    let host = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&host, |n| n.iter().any(|t| t == "two__echo"))
        .await;
    let pid = daemon.upstream_status("two").await["pid"].clone();
    save(&path, &text(false));
    daemon
        .wait_for_tools(&host, |n| {
            n.iter().any(|t| t == "one__echo") && !n.iter().any(|t| t.starts_with("two__"))
        })
        .await;
    let status = daemon.upstream_status("two").await;
    assert_eq!(status["state"], "disabled", "{status}");
    assert_eq!(status["tools"], 0, "{status}");
    assert!(
        poll_until(Duration::from_secs(10), || async {
            !common::alive(pid.as_u64().unwrap() as u32)
        })
        .await,
        "the disabled upstream's process is still running"
    );
    save(&path, &text(true));
    daemon
        .wait_for_tools(&host, |n| n.iter().any(|t| t == "two__echo"))
        .await;
    let echoed = host.tool_text("two__echo", json!({"back": 1})).await;
    assert!(echoed.contains("back"), "{echoed}");
}
