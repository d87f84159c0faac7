use super::*;
use crate::config::model::{DEFAULT_LISTEN, DEFAULT_PAGE_SIZE};
use crate::config::{RemoteKind, TokenSource, Transport};
use crate::mcp::ListKind;

/// Loads `text` from a file named `name` in a directory of its own, removed once it is loaded.
fn load_text(name: &str, text: &str) -> Result<Config, ConfigError> {
    let dir = tempfile::Builder::new()
        .prefix("mcpmux-config-test-")
        .tempdir()
        .map_err(|source| ConfigError::Read {
            file: std::env::temp_dir(),
            source,
        })?;
    let path = dir.path().join(name);
    std::fs::write(&path, text).map_err(|source| ConfigError::Read {
        file: path.clone(),
        source,
    })?;
    load(&path)
}

#[test]
fn an_invalid_value_is_pointed_at_by_line() {
    let text = "[server]\nlisten = \"127.0.0.1:0\"\n\n[upstreams.a]\ncommand = \"x\"\nrequest_timeout = \"soon\"\n";
    assert_eq!(line_of(text, "upstreams.a.request_timeout"), Some(6));
    assert_eq!(line_of(text, "upstreams.a.url"), Some(4));
    assert_eq!(line_of(text, "server.listen"), Some(2));
    assert_eq!(line_of(text, "profiles.x"), None);
}

#[test]
fn toml_with_defaults() {
    let c = load_text(
        "a.toml",
        "[upstreams.mem]\ncommand = \"npx\"\nargs = [\"-y\", \"x\"]\n",
    )
    .map_err(|e| e.to_string());
    let c = c.unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.server.listen, DEFAULT_LISTEN);
    assert_eq!(c.upstreams[0].prefix.as_str(), "mem");
    assert_eq!(c.catalog.page_size(ListKind::Tools), DEFAULT_PAGE_SIZE);
}

#[test]
fn errors_name_file_key_and_fix() {
    let e = load_text("b.toml", "[upstreams.mem]\nargs = []\n")
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        e.contains("b.toml") && e.contains("upstreams.mem.command") && e.contains("Fix:"),
        "{e}"
    );
    let e = load_text("c.toml", "[upstreams.mem]\ncomand = \"x\"\n")
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(e.contains("c.toml") && e.contains("comand"), "{e}");
    assert!(
        e.contains("audit_redaction, audit_redaction_tools"),
        "the hint names every upstream key: {e}"
    );
    let e = load_text(
        "d.toml",
        "[upstreams.my_server]\ncommand = \"x\"\n[upstreams.My-Server]\ncommand = \"y\"\n",
    )
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert!(
        e.contains("my_server") && e.contains("My-Server") && e.contains("prefix"),
        "{e}"
    );
    let e = load_text("e.toml", "[server]\nlisten = \"nope\"\n")
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(e.contains("server.listen"), "{e}");
}

#[test]
fn audit_settings_override_the_defaults() {
    let c = load_text(
        "f.toml",
        "state_dir = \"st\"\n[audit]\nsecret_keys = [\"pin\"]\nmax_age = \"0s\"\nqueue = 8\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.audit.secret_keys.names(), ["pin"]);
    assert_eq!((c.audit.max_age, c.audit.queue), (None, 8));
    assert_eq!(c.audit.dir, c.source.with_file_name("st").join("audit"));
    let e = load_text("g.toml", "[audit]\nqueue = 0\n")
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(e.contains("audit.queue") && e.contains("Fix:"), "{e}");
}

#[test]
fn shipped_configs_load() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    for name in ["mcpmux.toml", "example.toml"] {
        let c = load(&dir.join(name)).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            c.upstreams
                .iter()
                .any(|u| u.prefix.as_str() == "everything"),
            "{name}"
        );
    }
}

#[test]
fn mcp_servers_json_is_accepted_as_written() {
    let json = r#"{"mcpServers": {"My Server": {"command": "node", "args": ["s.js"], "env": {"K": "v"}},
        "remote": {"url": "https://example.com/mcp", "headers": {"X-Api-Key": "k"}},
        "legacy": {"type": "sse", "url": "http://127.0.0.1:9/sse"},
        "vscode": {"type": "http", "url": "https://example.com/v/mcp"},
        "off": {"command": "x", "disabled": true}},
        "globalShortcut": "x"}"#;
    let c = load_text("claude_desktop_config.json", json).unwrap_or_else(|e| panic!("{e}"));
    let names: Vec<_> = c
        .upstreams
        .iter()
        .map(|u| (u.name.as_str(), u.prefix.as_str(), u.enabled))
        .collect();
    assert_eq!(
        names,
        [
            ("My Server", "my-server", true),
            ("legacy", "legacy", true),
            ("off", "off", false),
            ("remote", "remote", true),
            ("vscode", "vscode", true)
        ]
    );
    let kinds: Vec<_> = c
        .upstreams
        .iter()
        .filter_map(|u| match &u.transport {
            Transport::Remote(r) => Some((u.name.as_str(), r.kind, r.url.as_str())),
            Transport::Stdio(_) => None,
        })
        .collect();
    assert_eq!(
        kinds,
        [
            ("legacy", RemoteKind::Sse, "http://127.0.0.1:9/sse"),
            ("remote", RemoteKind::Auto, "https://example.com/mcp"),
            (
                "vscode",
                RemoteKind::StreamableHttp,
                "https://example.com/v/mcp"
            )
        ]
    );
    let e = load_text(
        "h.json",
        r#"{"mcpServers": {"w": {"type": "ws", "url": "x"}}}"#,
    )
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert!(e.contains("mcpServers.w.type") && e.contains("Fix:"), "{e}");
}

#[test]
fn an_empty_prefix_is_for_the_only_enabled_upstream() {
    let one = "[upstreams.solo]\nurl = \"http://127.0.0.1:9/mcp\"\nprefix = \"\"\n";
    let c = load_text("p.toml", one).unwrap_or_else(|e| panic!("{e}"));
    assert!(c.upstreams[0].prefix.is_none());
    let off = format!("{one}[upstreams.other]\ncommand = \"x\"\nenabled = false\n");
    assert!(load_text("q.toml", &off).is_ok());
    let e = load_text(
        "r.toml",
        &format!("{one}[upstreams.other]\ncommand = \"x\"\n"),
    )
    .err()
    .map(|e| e.to_string())
    .unwrap_or_default();
    assert!(
        e.contains("upstreams.solo.prefix") && e.contains("only enabled upstream"),
        "{e}"
    );
}

#[test]
fn remote_upstreams_take_their_keys_and_refuse_the_others() {
    let c = load_text(
        "r.toml",
        "[upstreams.gh]\nurl = \"https://api.example.com/mcp\"\ntransport = \"streamable-http\"\n\
         headers = { X-Team = \"a\" }\nbearer_token_env = \"GH_TOKEN\"\nconnect_timeout = \"3s\"\n\
         request_timeout = \"20s\"\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let Transport::Remote(r) = &c.upstreams[0].transport else {
        panic!("not remote: {:?}", c.upstreams[0]);
    };
    assert_eq!(r.kind, RemoteKind::StreamableHttp);
    assert_eq!(r.bearer_token, Some(TokenSource::Env("GH_TOKEN".into())));
    assert_eq!(r.connect_timeout, std::time::Duration::from_secs(3));
    assert_eq!(r.headers.get("X-Team").map(String::as_str), Some("a"));
    assert_eq!(c.upstreams[0].policy.request_timeout.as_secs(), 20);
    for (text, key) in [
        (
            "command = \"x\"\nurl = \"https://e.com/mcp\"",
            "upstreams.u.url",
        ),
        ("url = \"ftp://e.com/mcp\"", "upstreams.u.url"),
        ("url = \"not a url\"", "upstreams.u.url"),
        (
            "url = \"https://e.com/mcp\"\nargs = [\"x\"]",
            "upstreams.u.args",
        ),
        (
            "command = \"x\"\nheaders = { A = \"b\" }",
            "upstreams.u.headers",
        ),
        (
            "url = \"https://e.com/mcp\"\nbearer_token_env = \"A\"\nbearer_token_file = \"t\"",
            "upstreams.u.bearer_token_file",
        ),
        (
            "url = \"https://e.com/mcp\"\nheaders = { \"Mcp-Session-Id\" = \"x\" }",
            "upstreams.u.headers.Mcp-Session-Id",
        ),
        (
            "url = \"https://e.com/mcp\"\nclient_cert_file = \"c.pem\"",
            "upstreams.u.client_cert_file",
        ),
        (
            "url = \"https://e.com/mcp\"\nca_file = \"missing.pem\"",
            "upstreams.u.ca_file",
        ),
        (
            "url = \"https://e.com/mcp\"\ntransport = \"ws\"",
            "transport",
        ),
    ] {
        let e = load_text("s.toml", &format!("[upstreams.u]\n{text}\n"))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains(key), "{text}: {e}");
    }
}

#[test]
fn remote_upstreams_sign_in_with_oauth_unless_a_token_is_configured() {
    let c = load_text(
        "o.toml",
        "state_dir = \"st\"\n[upstreams.gh]\nurl = \"https://api.example.com/mcp\"\n\
         [upstreams.gh.oauth]\nclient_id = \"mcpmux\"\nclient_secret_env = \"GH_SECRET\"\n\
         redirect_port = 8976\nissuer = \"https://auth.example.com\"\n[upstreams.plain]\nurl = \"https://other.example.com/mcp\"\n\
         [upstreams.tok]\nurl = \"https://t.example.com/mcp\"\nbearer_token_env = \"T\"\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let oauth = |name: &str| match &c
        .upstreams
        .iter()
        .find(|u| u.name == name)
        .map(|u| &u.transport)
    {
        Some(Transport::Remote(r)) => r.oauth.clone(),
        other => panic!("{name}: {other:?}"),
    };
    let gh = oauth("gh").unwrap_or_else(|| panic!("gh signs in"));
    assert_eq!(gh.client_id.as_deref(), Some("mcpmux"));
    assert_eq!(gh.client_secret, Some(TokenSource::Env("GH_SECRET".into())));
    assert_eq!(gh.redirect_port, 8976);
    assert_eq!(
        gh.issuer.as_ref().map(url::Url::as_str),
        Some("https://auth.example.com/")
    );
    assert!(
        gh.token_file.ends_with("st/oauth/gh.json"),
        "{}",
        gh.token_file.display()
    );
    let plain = oauth("plain").unwrap_or_else(|| panic!("plain signs in"));
    assert_eq!(plain.client_id, None);
    assert!(plain.token_file.ends_with("st/oauth/plain.json"));
    assert_eq!(oauth("tok"), None);
    for (text, key) in [
        ("client_secret_env = \"S\"", "upstreams.u.oauth.client_id"),
        (
            "grant = \"client_credentials\"\nclient_id = \"a\"",
            "upstreams.u.oauth.grant",
        ),
        (
            "client_id_metadata_url = \"http://e.com/m.json\"",
            "upstreams.u.oauth.client_id_metadata_url",
        ),
        (
            "signing_algorithm = \"ES256\"",
            "upstreams.u.oauth.signing_algorithm",
        ),
        // A secret goes to a configured issuer only, over https (http only on loopback).
        (
            "client_id = \"a\"\nclient_secret_env = \"S\"",
            "upstreams.u.oauth.issuer",
        ),
        (
            "client_id = \"a\"\nclient_secret_env = \"S\"\nissuer = \"http://auth.example.com\"",
            "upstreams.u.oauth.issuer",
        ),
        (
            "issuer = \"https://auth.example.com/?tenant=1\"",
            "upstreams.u.oauth.issuer",
        ),
    ] {
        let e = load_text(
            "oauth-refused.toml",
            &format!("[upstreams.u]\nurl = \"https://e.com/mcp\"\n[upstreams.u.oauth]\n{text}\n"),
        )
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
        assert!(e.contains(key), "{text}: {e}");
    }
}

#[test]
fn roots_are_uris_or_paths_relative_to_the_config_file() {
    let c = load_text(
        "roots.toml",
        "[upstreams.u]\ncommand = \"x\"\nroots = [\"file:///srv/data\", \"scratch\", \"/abs/dir\"]\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let roots = c.upstreams[0].roots.clone().unwrap_or_default();
    assert_eq!(roots[0], "file:///srv/data");
    assert!(
        roots[1].starts_with("file:///") && roots[1].ends_with("/scratch"),
        "{roots:?}"
    );
    assert_eq!(roots[2], "file:///abs/dir");
}

#[test]
fn hosts_need_one_valid_credential_each_and_tokens_of_their_own() {
    let digest = "ab".repeat(32);
    let c = load_text(
        "hosts-ok.toml",
        &format!("[hosts.alice]\ntoken_sha256 = \"{digest}\"\n"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(c.hosts.len(), 1);
    assert_eq!(c.hosts[0].name, "alice");
    assert_eq!(
        c.hosts[0].credential,
        crate::config::Credential::Token { sha256: [0xab; 32] }
    );
    assert!(!format!("{:?}", c.hosts[0]).contains("ab, "));
    for (text, key) in [
        ("[hosts.a]\n".to_owned(), "hosts.a"),
        (
            "[hosts.a]\ntoken_sha256 = \"xyz\"\n".to_owned(),
            "hosts.a.token_sha256",
        ),
        (
            format!("[hosts.a]\ntoken_sha256 = \"{digest}\"\ntoken_file = \"t\"\n"),
            "hosts.a.token_file",
        ),
        (
            "[hosts.a]\ntoken_file = \"missing.token\"\n".to_owned(),
            "hosts.a.token_file",
        ),
        (
            format!(
                "[hosts.a]\ntoken_sha256 = \"{digest}\"\n[hosts.b]\ntoken_sha256 = \"{digest}\"\n"
            ),
            "hosts.b.token_sha256",
        ),
    ] {
        let e = load_text("hosts-refused.toml", &text)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains(key), "{text}: {e}");
    }
}

#[test]
fn a_search_mode_profile_names_its_tools_and_refuses_what_it_cannot_use() {
    let upstream = "[upstreams.a]\ncommand = \"x\"\n";
    let load = |profile: &str| {
        load_text(
            "search.toml",
            &format!("{upstream}[profiles.p]\n{profile}\n"),
        )
        .map_err(|e| e.to_string())
    };
    let config = load("tools = \"search\"\nalways = [\"a__*\"]\ncall_tool_name = \"run\"")
        .unwrap_or_else(|e| panic!("{e}"));
    let mode = config.profiles[0].search.clone().expect("search mode");
    assert_eq!(mode.search.name, "search_tools");
    assert_eq!(mode.call.name, "run");
    assert!(mode.always.is_match("a__echo") && !mode.always.is_match("b__echo"));
    let all = load("tools = \"all\"").unwrap_or_else(|e| panic!("{e}"));
    assert!(all.profiles[0].search.is_none());
    for (profile, culprit, fix) in [
        ("tools = \"some\"", "profiles.p.tools", "tools = \"search\""),
        (
            "always = [\"a__*\"]",
            "profiles.p.always",
            "set tools = \"search\"",
        ),
        (
            "tools = \"search\"\nalways = [\"a__[\"]",
            "profiles.p.always",
            "not a glob",
        ),
        (
            "tools = \"search\"\ncall_tool_name = \"search_tools\"",
            "profiles.p.call_tool_name",
            "different names",
        ),
        (
            "tools = \"search\"\nsearch_tool_name = \"has space\"",
            "profiles.p.search_tool_name",
            "name budget",
        ),
    ] {
        let error = load(profile).expect_err(profile);
        assert!(
            error.contains(culprit) && error.contains(fix),
            "{profile}: {error}"
        );
    }
}

/// `config/example.toml` is the one reference of every key: each field of the raw config
/// structs (`raw.rs`, `policy.rs`) appears there, set or commented out, in the section it belongs
/// to. A key added to the parser and not to the example fails here.
#[test]
fn every_key_the_parser_accepts_is_in_the_example() {
    use std::collections::{BTreeMap, BTreeSet};
    let example = include_str!("../../../config/example.toml");
    // The keys written (or commented out) under each section, `[upstreams.x]` as `upstreams.*`.
    let mut written: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut section = String::new();
    for line in example.lines() {
        let line = line.trim_start_matches(['#', ' ']).trim_end();
        if let Some(header) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            let parts: Vec<&str> = header.split('.').collect();
            section = match parts.as_slice() {
                ["hosts", _, "upstreams", _] => "hosts.*.upstreams.*".to_owned(),
                [table @ ("upstreams" | "hosts" | "profiles"), _, rest @ ..] => {
                    std::iter::once(format!("{table}.*"))
                        .chain(rest.iter().map(|s| (*s).to_owned()))
                        .collect::<Vec<_>>()
                        .join(".")
                }
                _ => header.to_owned(),
            };
            continue;
        }
        if let Some((key, _)) = line.split_once('=') {
            let key = key.trim();
            if !key.is_empty()
                && key
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            {
                written
                    .entry(section.clone())
                    .or_default()
                    .insert(key.to_owned());
            }
        }
    }
    // Each raw struct's fields, and the sections they may be written in.
    let sources = [include_str!("../raw.rs"), include_str!("../policy.rs")];
    let homes: [(&str, &[&str]); 12] = [
        ("RawConfig", &[""]),
        ("RawServer", &["server"]),
        ("RawAuthorization", &["server.authorization"]),
        ("RawAudit", &["audit"]),
        ("RawAdmin", &["admin"]),
        ("RawTelemetry", &["telemetry"]),
        ("RawCatalog", &["catalog"]),
        ("RawUpstream", &["upstreams.*"]),
        ("RawOAuth", &["upstreams.*.oauth"]),
        ("RawHost", &["hosts.*"]),
        ("RawHostUpstream", &["hosts.*.upstreams.*"]),
        ("RawProfile", &["profiles.*"]),
    ];
    let policy: (&str, &[&str]) = ("RawPolicy", &["defaults", "upstreams.*"]);
    let mut missing = Vec::new();
    let mut seen = 0;
    for (name, sections) in homes.iter().chain([&policy]) {
        let source = sources
            .iter()
            .find_map(|s| s.split_once(&format!("pub(super) struct {name} {{")))
            .map(|(_, body)| body.split_once("\n}").map_or(body, |(fields, _)| fields))
            .unwrap_or_else(|| panic!("no struct {name} in raw.rs or policy.rs"));
        let mut flatten = false;
        for line in source.lines().map(str::trim) {
            if line.starts_with("#[serde(flatten") {
                flatten = true;
                continue;
            }
            let Some(field) = line.strip_prefix("pub ").and_then(|l| l.split_once(':')) else {
                continue;
            };
            let (field, ty) = (field.0.trim(), field.1.trim());
            // A flattened table's keys are its own struct's.
            if std::mem::take(&mut flatten) {
                continue;
            }
            seen += 1;
            // A table is written as its section (`[server.authorization]`, `[hosts.NAME]`).
            let ty = ty.strip_prefix("Option<").unwrap_or(ty);
            let section_of = |s: &str| match (s, ty.starts_with("BTreeMap<String, Raw")) {
                ("", true) => format!("{field}.*"),
                ("", false) => field.to_owned(),
                (s, true) => format!("{s}.{field}.*"),
                (s, false) => format!("{s}.{field}"),
            };
            let table = ty.starts_with("Raw") || ty.starts_with("BTreeMap<String, Raw");
            let present = sections.iter().any(|s| {
                written.get(*s).is_some_and(|keys| keys.contains(field))
                    || (table && written.contains_key(&section_of(s)))
            });
            if !present {
                missing.push(format!(
                    "{field} (of {name}, under [{}])",
                    sections.join("] or [")
                ));
            }
        }
    }
    assert!(
        seen > 100,
        "read only {seen} keys: the struct parsing is broken"
    );
    assert!(
        missing.is_empty(),
        "config/example.toml does not document: {}",
        missing.join(", ")
    );
}

#[test]
fn a_fleet_store_takes_its_password_from_a_file_or_the_environment_only() {
    let cluster = "[server]\ncursor_keys = \"k\"\n[cluster]\nreplica = \"a\"\npeer_url = \"http://{replica}:7332\"\n";
    let c = load_text(
        "s.toml",
        &format!("{cluster}store = \"postgres://mcpmux@db/mcpmux?sslmode=require\"\nstore_password_file = \"pw\"\n"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let store = c
        .cluster
        .and_then(|c| c.store)
        .unwrap_or_else(|| panic!("no store"));
    assert_eq!(
        store.password,
        Some(TokenSource::File(c.source.with_file_name("pw")))
    );
    let refused = |extra: &str| {
        load_text("r.toml", &format!("{cluster}{extra}"))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    let e = refused("store = \"postgres://mcpmux:hunter2@db/mcpmux\"\n");
    assert!(
        e.contains("cluster.store") && e.contains("store_password_file"),
        "{e}"
    );
    assert!(!e.contains("hunter2"), "the password is repeated: {e}");
    let e = refused("store = \"mysql://db\"\n");
    assert!(e.contains("cluster.store") && e.contains("Fix:"), "{e}");
    let e = refused("store_password_env = \"PW\"\n");
    assert!(
        e.contains("cluster.store_password_env") && e.contains("cluster.store is not"),
        "{e}"
    );
    let e = refused(
        "store = \"postgres://db/m\"\nstore_password_env = \"PW\"\nstore_password_file = \"pw\"\n",
    );
    assert!(e.contains("cluster.store_password_env"), "{e}");
}

#[test]
fn a_cluster_without_a_store_refuses_an_upstream_signed_in_with_a_browser() {
    let cluster = "[server]\ncursor_keys = \"k\"\n[cluster]\nreplica = \"a\"\npeer_url = \"http://{replica}:7332\"\n";
    let web = "[upstreams.web]\nurl = \"https://mcp.example.com/mcp\"\n[upstreams.web.oauth]\nclient_id = \"mcpmux\"\n";
    let e = load_text("c.toml", &format!("{cluster}{web}"))
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        e.contains("upstreams.web.oauth") && e.contains("cluster] store"),
        "{e}"
    );
    let with_store = format!("{cluster}store = \"postgres://m@db/m\"\n{web}");
    load_text("s.toml", &with_store).unwrap_or_else(|e| panic!("{e}"));
    load_text("alone.toml", web).unwrap_or_else(|e| panic!("{e}"));
}
