//! The Kubernetes recipe (`deploy/kubernetes/`), rendered and schema-checked offline by
//! `manifests.py`, against the daemon: the probes ask paths the daemon answers on the port its
//! config listens on, and the grace period covers `unready_delay` and `drain_timeout`.

use std::time::Duration;

use serde_json::Value;

use crate::common::{Daemon, poll_until, test_upstream};

fn seconds(config: &toml::Value, path: &[&str]) -> u64 {
    let mut value = config;
    for key in path {
        value = &value[*key];
    }
    humantime::parse_duration(value.as_str().unwrap())
        .unwrap()
        .as_secs()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubernetes_recipe_probes_and_drains_as_the_daemon_does() {
    let out = std::process::Command::new(crate::common::peers::manifests_python())
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/cluster/manifests.py"
        ))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "manifests.py: {stderr}");
    let summary: Value = serde_json::from_slice(&out.stdout).unwrap();
    let config: toml::Value = toml::from_str(summary["config"].as_str().unwrap()).unwrap();

    // The ports the config listens on are the container's.
    let port_of = |listen: &toml::Value| -> u64 {
        listen
            .as_str()
            .unwrap()
            .rsplit(':')
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    assert_eq!(
        port_of(&config["server"]["listen"]),
        summary["ports"]["http"]
    );
    assert_eq!(
        port_of(&config["admin"]["listen"]),
        summary["ports"]["admin"]
    );
    assert!(
        config.get("cluster").is_some(),
        "the recipe's config has a [cluster] table"
    );

    // The grace period covers the drain: unready, then in-flight calls, then a margin.
    let unready = seconds(&config, &["cluster", "unready_delay"]);
    let drain = seconds(&config, &["server", "drain_timeout"]);
    let grace = summary["terminationGracePeriodSeconds"].as_u64().unwrap();
    assert!(
        grace >= unready + drain + 5,
        "grace {grace}s < {unready}s + {drain}s + 5s"
    );
    // Readiness notices a drain before the replica stops accepting.
    let readiness = &summary["probes"]["readiness"];
    let noticed = readiness["periodSeconds"].as_u64().unwrap()
        * readiness["failureThreshold"].as_u64().unwrap();
    assert!(
        noticed < unready,
        "readiness takes {noticed}s to notice a {unready}s drain"
    );

    // Every probe's path answers 200 on the host listener of a running replica.
    let keys = tempfile::tempdir().unwrap();
    let ring = keys.path().join("cursor.keys");
    std::fs::write(&ring, format!("1 {}\n", "ab".repeat(32))).unwrap();
    std::fs::set_permissions(&ring, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let daemon = Daemon::start(&format!(
        "cursor_keys = {:?}\n[cluster]\nreplica = \"mcpmux-0\"\npeer_url = \"http://{{replica}}.svc:7332\"\n{}",
        ring.display().to_string(),
        test_upstream("alpha", &[])
    ));
    let base = daemon.url.trim_end_matches("/mcp").to_owned();
    let http = reqwest::Client::new();
    for (kind, probe) in summary["probes"].as_object().unwrap() {
        assert_eq!(probe["port"], summary["ports"]["http"], "{kind} probe port");
        let url = format!("{base}{}", probe["path"].as_str().unwrap());
        let answered = poll_until(Duration::from_secs(30), || {
            let (http, url) = (http.clone(), url.clone());
            async move { http.get(&url).send().await.is_ok_and(|r| r.status() == 200) }
        })
        .await;
        assert!(answered, "{kind} probe {url} never answered 200");
    }
}
