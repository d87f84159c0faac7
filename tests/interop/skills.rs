//! Skills (the `io.modelcontextprotocol/skills` extension, SEP-2640) through mcpmux, with the
//! official TypeScript SDK 2.4 on both sides: two upstreams built on
//! `@modelcontextprotocol/server`'s Skills extension (`skills_server.mjs`: `docs` over stdio, a
//! `SkillCatalog` that reads directories; `kb` over Streamable HTTP, a source of its own that
//! does not), both publishing a skill named `shared` and more skills than a page, read by
//! `@modelcontextprotocol/client`'s `SkillsClient` (`skills_client.mjs`) in both eras. Every
//! skill is listed once across mcpmux's pages, got, and each of its files read and verified
//! against the digest and size the listing gives; a profile's denied skill is invisible and
//! unreadable; a skill one upstream publishes later reaches the next listing; a forged, foreign
//! or expired cursor is `-32602`.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};

use super::modern_upstream::ModernHost;
use crate::common::{Client, Daemon, Next, peers, poll_until, toml_list, toml_str};

const MODERN: &str = "2026-07-28";
/// The skills each upstream publishes at first (`shared` by both).
const DOCS: [&str; 4] = ["shared", "alpha", "beta", "gamma"];
const KB: [&str; 3] = ["shared", "kb-one", "kb-two"];
/// The skill the `noalpha` profile denies, as hosts see its URI.
const DENIED: &str = "skill://docs/alpha/SKILL.md";

fn script(name: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/interop")
        .join(name);
    path.to_str().unwrap().to_owned()
}

fn node_modules() -> String {
    peers::npm_modules().to_str().unwrap().to_owned()
}

/// The `SKILL.md` URI a host sees for `skill` of `upstream`: the scheme and the skill's name as
/// its last segment kept, the upstream's prefix a directory in front.
fn exposed(upstream: &str, skill: &str) -> String {
    format!("skill://{upstream}/{skill}/SKILL.md")
}

/// Starts `kb` over Streamable HTTP on a free loopback port: its process (killed when dropped)
/// and its URL.
async fn kb_server() -> (tokio::process::Child, String) {
    let args = ["http".into(), "kb".into(), KB.join(","), "2".into()];
    peers::node_http_server("skills_server.mjs", &args).await
}

/// What the SDK's skills client read through `url` as a host of `mode` (`legacy` or
/// 2026-07-28), asked also about `hidden` when given.
async fn skills_client(url: &str, mode: &str, hidden: Option<&str>) -> Value {
    let mut args = vec![script("skills_client.mjs"), url.to_owned(), mode.to_owned()];
    args.extend(hidden.map(str::to_owned));
    let output = tokio::process::Command::new(peers::npm_bin("node"))
        .args(args)
        .env("MCP_NODE_MODULES", node_modules())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(180), output)
        .await
        .expect("the skills client finishes in time")
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "skills client ({mode}) failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or_default())
        .unwrap_or_else(|e| panic!("no summary ({e}): {stdout}"))
}

/// Checks what the skills client read: exactly `expected` skills (by URI), each listed once, got
/// as listed, its three files read and verified (size and digest; the `SKILL.md` frontmatter
/// too), no errors.
fn assert_read_all(summary: &Value, expected: &BTreeSet<String>, what: &str) {
    assert_eq!(summary["supported"], true, "{what}: {summary}");
    assert_eq!(summary["invalid"], 0, "{what}: {summary}");
    assert_eq!(summary["errors"], json!([]), "{what}: {summary}");
    let skills = summary["skills"].as_array().unwrap();
    let uris: Vec<&str> = skills.iter().map(|s| s["uri"].as_str().unwrap()).collect();
    let unique: BTreeSet<String> = uris.iter().map(|u| (*u).to_owned()).collect();
    assert_eq!(
        unique.len(),
        uris.len(),
        "{what}: a skill listed twice: {uris:?}"
    );
    assert_eq!(&unique, expected, "{what}");
    for skill in skills {
        let uri = skill["uri"].as_str().unwrap();
        assert_eq!(skill["got"], true, "{what}: {skill}");
        let root = uri.strip_suffix("/SKILL.md").unwrap();
        assert_eq!(
            skill["name"].as_str(),
            root.rsplit('/').next(),
            "{what}: {skill}"
        );
        let files = skill["files"].as_array().unwrap();
        let names: BTreeSet<String> = files
            .iter()
            .map(|f| {
                f["uri"]
                    .as_str()
                    .unwrap()
                    .strip_prefix(root)
                    .unwrap()
                    .to_owned()
            })
            .collect();
        let want: BTreeSet<String> = ["/SKILL.md", "/references/GUIDE.md", "/assets/logo.bin"]
            .map(str::to_owned)
            .into();
        assert_eq!(names, want, "{what}: {skill}");
        assert!(
            files
                .iter()
                .all(|f| f["verified"] == true && f["size"].as_u64() > Some(0)),
            "{what}: {skill}"
        );
    }
}

/// The daemon: `docs` (stdio) and `kb` (HTTP, its process returned), skills listed three to a
/// page, cursors of an older catalog kept 2 s; profile `noalpha` denies one skill of `docs`,
/// profile `manuals` holds `docs` only. Both upstreams' skills are listed when it returns.
async fn skills_daemon() -> (tokio::process::Child, Daemon) {
    let (kb, kb_url) = kb_server().await;
    let node = peers::npm_bin("node");
    let config = format!(
        "[catalog]\nskills_page_size = 3\ncursor_retention = \"2s\"\n\n\
         [upstreams.docs]\ncommand = {}\nargs = {}\nenv = {{ MCP_NODE_MODULES = {} }}\nstartup_timeout = \"300s\"\n\n\
         [upstreams.kb]\nurl = {}\n\n\
         [profiles.noalpha]\npath = true\ndeny = [{}]\n\n\
         [profiles.manuals]\npath = true\nupstreams = [\"docs\"]\n",
        toml_str(node.to_str().unwrap()),
        toml_list(&[
            script("skills_server.mjs"),
            "stdio".into(),
            "docs".into(),
            DOCS.join(","),
            "2".into()
        ]),
        toml_str(&node_modules()),
        toml_str(&kb_url),
        toml_str(&format!("skill:{DENIED}")),
    );
    let daemon = Daemon::start(&config);
    let client = Client::connect(&daemon.url).await;
    daemon
        .wait_for_tools(&client, |names| {
            ["docs__add_skill", "kb__add_skill"]
                .iter()
                .all(|t| names.iter().any(|n| n == t))
        })
        .await;
    (kb, daemon)
}

fn all_skills() -> BTreeSet<String> {
    let docs = DOCS.iter().map(|s| exposed("docs", s));
    docs.chain(KB.iter().map(|s| exposed("kb", s))).collect()
}

fn uris(skills: &[Value]) -> Vec<String> {
    skills
        .iter()
        .map(|s| s["uri"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_upstreams_skills_reach_the_sdks_skills_client_verified_in_both_eras() {
    let (_kb, daemon) = skills_daemon().await;
    let profile_url = |name: &str| format!("{}/{name}", daemon.url);

    // ---- The SDK's skills client, both eras: every skill of both upstreams (the two `shared`
    // told apart by URI), each file's bytes matching the digest and size listed. `kb` reads no
    // directories, so the whole view does not say `directoryRead`.
    for mode in ["legacy", MODERN] {
        let summary = skills_client(&daemon.url, mode, None).await;
        assert_read_all(&summary, &all_skills(), mode);
        assert_eq!(summary["directoryRead"], false, "{mode}: {summary}");
        if mode == MODERN {
            assert_eq!(summary["version"], MODERN, "{summary}");
            assert!(summary["cache"]["ttlMs"].is_u64(), "{summary}");
            assert_eq!(summary["cache"]["cacheScope"], "public", "{summary}");
        }
    }

    // ---- A profile that denies a skill: not listed, not got, none of its files readable (in
    // both eras); the other `docs` skills are all there.
    let noalpha = profile_url("noalpha");
    let mut rest = all_skills();
    rest.remove(DENIED);
    for mode in ["legacy", MODERN] {
        let summary = skills_client(&noalpha, mode, Some(DENIED)).await;
        assert_read_all(&summary, &rest, &format!("noalpha {mode}"));
        let hidden = &summary["hidden"];
        for refused in [&hidden["get"], &hidden["read"]] {
            assert_ne!(refused, "answered", "noalpha {mode}: {summary}");
        }
        if mode == MODERN {
            assert_eq!(
                summary["cache"]["cacheScope"], "private",
                "a profile shapes it: {summary}"
            );
        }
    }
    let host = Client::connect(&noalpha).await;
    for file in ["SKILL.md", "references/GUIDE.md", "assets/logo.bin"] {
        let uri = format!("skill://docs/alpha/{file}");
        let refused = host.request("resources/read", json!({"uri": uri})).await;
        assert!(
            refused["error"].is_object(),
            "{uri} read in noalpha: {refused}"
        );
    }
    let refused = host
        .request(
            "resources/directory/read",
            json!({"uri": "skill://docs/alpha"}),
        )
        .await;
    assert!(refused["error"].is_object(), "{refused}");
    let resources = host.list_all("resources/list", "resources").await;
    assert!(
        uris(&resources)
            .iter()
            .all(|u| !u.starts_with("skill://docs/alpha/")),
        "a denied skill's files are listed: {resources:?}"
    );
    // The whole view reads what the profile hides.
    let whole = Client::connect(&daemon.url).await;
    let read = whole
        .result(
            "resources/read",
            json!({"uri": "skill://docs/alpha/references/GUIDE.md"}),
        )
        .await;
    assert_eq!(
        read["contents"][0]["text"],
        "How docs does alpha: step one, step two.\n"
    );

    // ---- A view of `docs` only reads directories: the SDK reads each skill's children (pages
    // of the upstream's own, their cursors passed back) at the URIs the view exposes.
    for mode in ["legacy", MODERN] {
        let summary = skills_client(&profile_url("manuals"), mode, None).await;
        let docs: BTreeSet<String> = DOCS.iter().map(|s| exposed("docs", s)).collect();
        assert_read_all(&summary, &docs, &format!("manuals {mode}"));
        assert_eq!(summary["directoryRead"], true, "{mode}: {summary}");
        for skill in summary["skills"].as_array().unwrap() {
            let root = skill["uri"]
                .as_str()
                .unwrap()
                .strip_suffix("/SKILL.md")
                .unwrap();
            let children: BTreeSet<&str> = skill["children"]
                .as_array()
                .unwrap_or_else(|| panic!("no children: {skill}"))
                .iter()
                .map(|c| c.as_str().unwrap())
                .collect();
            assert!(
                children.contains(format!("{root}/SKILL.md").as_str()),
                "{skill}"
            );
            assert!(children.len() >= 3, "{skill}");
            assert!(
                children.iter().all(|c| c.starts_with(&format!("{root}/"))),
                "{skill}"
            );
        }
    }

    // ---- mcpmux's own pages: three skills each, every skill once, the same order every time.
    let first = whole.result("skills/list", json!({})).await;
    assert_eq!(first["skills"].as_array().unwrap().len(), 3, "{first}");
    let cursor = first["nextCursor"].as_str().unwrap().to_owned();
    let listed = uris(&whole.list_all("skills/list", "skills").await);
    assert_eq!(
        listed,
        uris(&whole.list_all("skills/list", "skills").await),
        "deterministic"
    );
    assert_eq!(
        listed.iter().cloned().collect::<BTreeSet<_>>(),
        all_skills()
    );
    // The two `shared` skills are two skills: each upstream's own.
    for upstream in ["docs", "kb"] {
        let got = whole
            .result("skills/get", json!({"uri": exposed(upstream, "shared")}))
            .await;
        let description = &got["skill"]["frontmatter"]["description"];
        assert_eq!(
            description,
            &json!(format!("The shared skill of {upstream}.")),
            "{got}"
        );
    }

    // A forged cursor, one of another listing, one of another view: -32602.
    let other_view = {
        let page = Client::connect(&profile_url("manuals")).await;
        let first = page.result("skills/list", json!({})).await;
        first["nextCursor"].as_str().unwrap().to_owned()
    };
    let altered = {
        let mut c = cursor.clone();
        let at = c.len() / 2;
        let swap = if &c[at..=at] == "A" { "B" } else { "A" };
        c.replace_range(at..=at, swap);
        c
    };
    for bad in [
        "garbage",
        altered.as_str(),
        &format!("{cursor}x"),
        &other_view,
    ] {
        let refused = whole.request("skills/list", json!({"cursor": bad})).await;
        assert_eq!(
            refused["error"]["code"], -32602,
            "cursor {bad:?}: {refused}"
        );
    }
    let wrong_listing = whole
        .request("resources/list", json!({"cursor": cursor}))
        .await;
    assert_eq!(wrong_listing["error"]["code"], -32602, "{wrong_listing}");
    // A 2026-07-28 host pages by a keyset cursor: it too is bound to its listing and view.
    let modern = ModernHost::new(&daemon.url, json!({}));
    let page = modern.request("skills/list", json!({})).await;
    assert_eq!(
        page["result"]["skills"].as_array().unwrap().len(),
        3,
        "{page}"
    );
    assert!(page["result"]["ttlMs"].is_u64(), "{page}");
    let keyset = page["result"]["nextCursor"].as_str().unwrap().to_owned();
    let next = modern
        .request("skills/list", json!({"cursor": keyset}))
        .await;
    assert_eq!(
        next["result"]["skills"].as_array().unwrap().len(),
        3,
        "{next}"
    );
    let elsewhere = ModernHost::new(&noalpha, json!({}));
    let refused = elsewhere
        .request("skills/list", json!({"cursor": keyset}))
        .await;
    assert_eq!(
        refused["error"]["code"], -32602,
        "another view's cursor: {refused}"
    );
    let refused = modern
        .request("prompts/list", json!({"cursor": keyset}))
        .await;
    assert_eq!(
        refused["error"]["code"], -32602,
        "another listing's cursor: {refused}"
    );

    // ---- One upstream publishes another skill: the host hears resources changed, and its next
    // listing has it. Then an older page's cursor outlives its catalog (2 s here) and is refused.
    let mut events = whole.events().await;
    for (upstream, skill) in [("docs", "delta"), ("kb", "kb-three")] {
        let said = whole
            .tool_text(&format!("{upstream}__add_skill"), json!({"name": skill}))
            .await;
        assert_eq!(said, format!("published {skill}"));
        let changed = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            match events.next_within(Duration::from_secs(2)).await {
                Next::Message(m) if m["method"] == "notifications/resources/list_changed" => break,
                Next::Message(_) => {}
                _ => assert!(
                    tokio::time::Instant::now() < changed,
                    "{upstream}: no resources/list_changed reached the host"
                ),
            }
        }
        let want = exposed(upstream, skill);
        let reached = poll_until(Duration::from_secs(60), || async {
            uris(&whole.list_all("skills/list", "skills").await).contains(&want)
        })
        .await;
        assert!(reached, "{want} never reached the listing");
        let got = whole.result("skills/get", json!({"uri": want})).await;
        assert_eq!(got["skill"]["uri"], want, "{got}");
    }
    let expired = poll_until(Duration::from_secs(30), || async {
        whole
            .request("skills/list", json!({"cursor": cursor}))
            .await["error"]["code"]
            == -32602
    })
    .await;
    assert!(expired, "a cursor of a catalog long replaced still pages");
    let summary = skills_client(&daemon.url, "legacy", None).await;
    let mut now = all_skills();
    now.extend([exposed("docs", "delta"), exposed("kb", "kb-three")]);
    assert_read_all(&summary, &now, "after the change");
}
