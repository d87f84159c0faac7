//! Finding the config file and reading it (TOML, or an `mcpServers` JSON file) into a validated
//! [`Config`]: [`super::raw`] or [`super::mcp_servers`] reads it as written, [`super::validate`]
//! checks it.

use std::path::{Path, PathBuf};

use super::error::ConfigError;
use super::mcp_servers::from_mcp_servers_json;
use super::model::Config;
use super::raw::RawConfig;
use super::validate::validate;

/// The config used when no `--config` is given: `$MCPMUX_CONFIG`, `./config/mcpmux.toml`,
/// `$XDG_CONFIG_HOME/mcpmux/mcpmux.toml` (or `~/.config/…`), `/etc/mcpmux/mcpmux.toml`.
pub fn default_path() -> Result<PathBuf, ConfigError> {
    if let Some(p) = std::env::var_os("MCPMUX_CONFIG") {
        return Ok(PathBuf::from(p));
    }
    let mut tried = vec![PathBuf::from("config/mcpmux.toml")];
    let xdg = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")));
    if let Some(xdg) = xdg {
        tried.push(xdg.join("mcpmux/mcpmux.toml"));
    }
    tried.push(PathBuf::from("/etc/mcpmux/mcpmux.toml"));
    match tried.iter().find(|p| p.is_file()) {
        Some(found) => Ok(found.clone()),
        None => Err(ConfigError::NotFound {
            tried: tried
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        }),
    }
}

/// Loads and validates the file at `path`: TOML, or JSON with an `mcpServers` (or `servers`) object.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        file: path.into(),
        source,
    })?;
    parse(path, &text)
}

/// Validates `text`, read from the file at `path` (relative paths in it are relative to `path`).
pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
    let is_json =
        path.extension().is_some_and(|e| e == "json") || text.trim_start().starts_with('{');
    let raw = if is_json {
        from_mcp_servers_json(path, text)?
    } else {
        RawConfig::from_toml(path, text)?
    };
    validate(path, raw).map_err(|e| match e {
        ConfigError::Invalid {
            file,
            key,
            problem,
            fix,
        } if !is_json => {
            // `path:LINE`, as compilers point at a line.
            let file = match line_of(text, &key) {
                Some(line) => PathBuf::from(format!("{}:{line}", file.display())),
                None => file,
            };
            ConfigError::Invalid {
                file,
                key,
                problem,
                fix,
            }
        }
        other => other,
    })
}

/// The line of TOML `text` where `key` (`table.name.field`, as validation names it) is written:
/// the field's line within its table, else the table's header; `None` when neither is found.
fn line_of(text: &str, key: &str) -> Option<usize> {
    let key = key.split('[').next().unwrap_or(key);
    let parts: Vec<&str> = key.split('.').collect();
    let bare = |s: &str| s.trim().trim_matches('"').trim_matches('\'').to_owned();
    let header_of = |line: &str| -> Option<Vec<String>> {
        let inner = line.trim().strip_prefix('[')?.trim_start_matches('[');
        let inner = inner.split(']').next()?;
        Some(inner.split('.').map(bare).collect())
    };
    // The longest table header that `key` starts with, then the field within that table.
    let mut best: Option<(usize, usize)> = None;
    let mut in_table: Option<usize> = None;
    let mut field_line = None;
    for (n, line) in text.lines().enumerate() {
        if let Some(header) = header_of(line) {
            let matches =
                header.len() <= parts.len() && header.iter().zip(&parts).all(|(h, p)| h == p);
            in_table = None;
            if matches && best.is_none_or(|(len, _)| header.len() >= len) {
                best = Some((header.len(), n + 1));
                in_table = Some(header.len());
                field_line = None;
            }
            continue;
        }
        if let (Some(depth), None) = (in_table, field_line) {
            let field = parts.get(depth).copied();
            let name = line.split('=').next().map(bare);
            if field.is_some() && name.as_deref() == field && line.contains('=') {
                field_line = Some(n + 1);
            }
        }
    }
    field_line.or(best.map(|(_, line)| line))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::model::{DEFAULT_LISTEN, DEFAULT_PAGE_SIZE};
    use crate::config::{RemoteKind, TokenSource, Transport};
    use crate::mcp::ListKind;

    fn load_text(name: &str, text: &str) -> Result<Config, ConfigError> {
        let dir =
            std::env::temp_dir().join(format!("mcpmux-config-test-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|source| ConfigError::Read {
            file: dir.clone(),
            source,
        })?;
        let path = dir.join(name);
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
                &format!(
                    "[upstreams.u]\nurl = \"https://e.com/mcp\"\n[upstreams.u.oauth]\n{text}\n"
                ),
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
}

#[cfg(test)]
mod properties {
    use proptest::prelude::*;

    use super::parse;

    fn path() -> std::path::PathBuf {
        std::env::temp_dir().join("mcpmux-config-properties/mcpmux.toml")
    }

    /// A TOML config with upstreams named `names` (commands and args of any text), optionally a
    /// host and a profile naming the first upstream.
    fn config() -> impl Strategy<Value = (Vec<String>, String)> {
        let upstream = (
            "[a-z][a-z0-9-]{0,10}",
            "\\PC{1,20}",
            proptest::collection::vec("\\PC{0,10}", 0..3),
        );
        (proptest::collection::vec(upstream, 1..5), any::<bool>(), "[0-9a-f]{64}").prop_map(
            |(upstreams, with_host, digest)| {
                let mut names = Vec::new();
                let mut prefixes = Vec::new();
                let mut text = String::from("[server]\nlisten = \"127.0.0.1:0\"\n\n");
                for (name, command, args) in upstreams {
                    // Two names with one prefix (`r`, `r-`) are a config error, rightly refused.
                    let prefix = crate::mcp::names::Prefix::derive(&name).ok();
                    if names.contains(&name) || prefixes.contains(&prefix) {
                        continue;
                    }
                    prefixes.push(prefix);
                    let args: Vec<String> = args.iter().map(|a| toml_str(a)).collect();
                    text += &format!(
                        "[upstreams.{name}]\ncommand = {}\nargs = [{}]\n\n",
                        toml_str(&command),
                        args.join(", ")
                    );
                    names.push(name);
                }
                if with_host {
                    text += &format!(
                        "[profiles.some]\nupstreams = [{}]\n\n[hosts.h]\ntoken_sha256 = \"{digest}\"\nprofile = \"some\"\n",
                        toml_str(&names[0])
                    );
                }
                (names, text)
            },
        )
    }

    fn toml_str(s: &str) -> String {
        toml::Value::String(s.to_owned()).to_string()
    }

    proptest! {
        #[test]
        fn any_text_is_parsed_or_refused_without_a_panic(text in "\\PC{0,300}") {
            if let Err(e) = parse(&path(), &text) {
                prop_assert!(!e.to_string().is_empty());
            }
        }

        #[test]
        fn any_json_text_is_parsed_or_refused_without_a_panic(text in "\\{\\PC{0,200}") {
            let _ = parse(&path(), &text);
        }

        #[test]
        fn a_generated_config_keeps_its_upstreams((names, text) in config()) {
            match parse(&path(), &text) {
                Ok(config) => {
                    let got: Vec<&str> = config.upstreams.iter().map(|u| u.name.as_str()).collect();
                    let mut want: Vec<&str> = names.iter().map(String::as_str).collect();
                    let mut got_sorted = got.clone();
                    got_sorted.sort_unstable();
                    want.sort_unstable();
                    prop_assert_eq!(got_sorted, want);
                }
                // A command of blank text is refused; nothing else should be.
                Err(e) => prop_assert!(e.to_string().contains("command"), "{}\n{}", text, e),
            }
        }

        #[test]
        fn a_config_with_one_key_broken_names_it(
            (_, text) in config(),
            key in proptest::sample::select(vec!["command", "listen", "token_sha256", "upstreams"]),
        ) {
            // The value of the first occurrence of `key` becomes a number: the error must name a key.
            let Some(at) = text.find(&format!("{key} = ")) else { return Ok(()); };
            let start = at + key.len() + 3;
            let end = text[start..].find('\n').map_or(text.len(), |n| start + n);
            let broken = format!("{}12345{}", &text[..start], &text[end..]);
            if let Err(e) = parse(&path(), &broken) {
                prop_assert!(e.to_string().contains(key) || e.to_string().contains("invalid type"), "{}", e);
            }
        }
    }
}
