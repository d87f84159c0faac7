//! Reading a config file (TOML, or an `mcpServers` JSON file) into a validated [`Config`].
//! Every refusal names the file, the key and the fix.

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::audit::{AuditConfig, Durability, Redaction};
use super::model::{
    CatalogConfig, Config, DEFAULT_ADMIN_LISTEN, DEFAULT_INHERITED_ENV, DEFAULT_NAME_MAX_LENGTH,
    DEFAULT_PAGE_SIZE, Isolation, ServerConfig, UpstreamConfig,
};
use super::policy::{POLICY_KEYS, Policy, RawPolicy};
use crate::mcp::ListKind;
use crate::mcp::names::{DEFAULT_NAME_PATTERN, NameBudget, Prefix};

/// A config that cannot be used, and why.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {file}: {source}")]
    Read {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error("{file}: {detail}")]
    Syntax { file: PathBuf, detail: String },
    #[error("{file}: `{key}`: {problem}. Fix: {fix}")]
    Invalid {
        file: PathBuf,
        key: String,
        problem: String,
        fix: String,
    },
    #[error(
        "no config file found (looked at {tried}). Fix: pass --config PATH or set MCPMUX_CONFIG"
    )]
    NotFound { tried: String },
}

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
    let is_json =
        path.extension().is_some_and(|e| e == "json") || text.trim_start().starts_with('{');
    let raw = if is_json {
        from_mcp_servers_json(path, &text)?
    } else {
        from_toml(path, &text)?
    };
    validate(path, raw)
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    /// Where mcpmux keeps state (the audit store); see `config::state_dir`.
    state_dir: Option<PathBuf>,
    #[serde(default)]
    audit: RawAudit,
    #[serde(default)]
    server: RawServer,
    #[serde(default)]
    catalog: RawCatalog,
    #[serde(default)]
    defaults: RawDefaults,
    #[serde(default)]
    admin: RawAdmin,
    #[serde(default)]
    upstreams: BTreeMap<String, RawUpstream>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawServer {
    listen: Option<String>,
    max_body_bytes: Option<usize>,
    #[serde(default, with = "humantime_serde")]
    session_idle_timeout: Option<Duration>,
    #[serde(default)]
    allowed_origins: Vec<String>,
    #[serde(default, with = "humantime_serde")]
    initialize_wait: Option<Duration>,
    max_in_flight_per_session: Option<usize>,
    #[serde(default, with = "humantime_serde")]
    drain_timeout: Option<Duration>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAudit {
    enabled: Option<bool>,
    redaction: Option<Redaction>,
    secret_keys: Option<Vec<String>>,
    durability: Option<Durability>,
    #[serde(default, with = "humantime_serde")]
    max_age: Option<Duration>,
    max_bytes: Option<u64>,
    queue: Option<usize>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAdmin {
    /// `"off"` disables the admin listener.
    listen: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCatalog {
    page_size: Option<usize>,
    tools_page_size: Option<usize>,
    prompts_page_size: Option<usize>,
    resources_page_size: Option<usize>,
    resource_templates_page_size: Option<usize>,
    name_pattern: Option<String>,
    name_max_length: Option<usize>,
    #[serde(default, with = "humantime_serde")]
    cursor_retention: Option<Duration>,
    max_items_per_upstream: Option<usize>,
}

/// `[upstreams.NAME]`: the process, its namespace, and policy overrides. Unknown keys are caught
/// by `unknown` (serde cannot refuse them itself next to a flattened table).
#[derive(Debug, Default, Deserialize)]
struct RawUpstream {
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    inherit_env: Option<Vec<String>>,
    cwd: Option<PathBuf>,
    enabled: Option<bool>,
    prefix: Option<String>,
    #[serde(default)]
    isolation: Isolation,
    roots: Option<Vec<String>>,
    #[serde(default)]
    tool_timeouts: BTreeMap<String, HumanDuration>,
    audit_redaction: Option<Redaction>,
    #[serde(default)]
    audit_redaction_tools: BTreeMap<String, Redaction>,
    #[serde(flatten)]
    policy: RawPolicy,
    #[serde(flatten)]
    unknown: BTreeMap<String, toml::Value>,
}

/// A duration written like "30s" or "5m".
#[derive(Debug, Clone, Copy, Deserialize)]
struct HumanDuration(#[serde(with = "humantime_serde")] Duration);

const UPSTREAM_KEYS: [&str; 10] = [
    "command",
    "args",
    "env",
    "inherit_env",
    "cwd",
    "enabled",
    "prefix",
    "isolation",
    "roots",
    "tool_timeouts",
];

/// `[defaults]`: policy for every upstream.
#[derive(Debug, Default, Deserialize)]
struct RawDefaults {
    #[serde(flatten)]
    policy: RawPolicy,
    #[serde(flatten)]
    unknown: BTreeMap<String, toml::Value>,
}

fn from_toml(path: &Path, text: &str) -> Result<RawConfig, ConfigError> {
    toml::from_str(text).map_err(|e| ConfigError::Syntax {
        file: path.into(),
        detail: e.to_string().trim_end().to_owned(),
    })
}

/// The `mcpServers` format, accepted as those hosts write it (unknown keys ignored).
#[derive(Debug, Deserialize)]
struct McpServersFile {
    #[serde(rename = "mcpServers", alias = "servers")]
    servers: BTreeMap<String, McpServerEntry>,
}

#[derive(Debug, Deserialize)]
struct McpServerEntry {
    command: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    cwd: Option<PathBuf>,
    #[serde(default)]
    disabled: bool,
    url: Option<String>,
}

fn from_mcp_servers_json(path: &Path, text: &str) -> Result<RawConfig, ConfigError> {
    let file: McpServersFile = serde_json::from_str(text).map_err(|e| ConfigError::Syntax {
        file: path.into(),
        detail: format!("not an `mcpServers` JSON file: {e}"),
    })?;
    let mut upstreams = BTreeMap::new();
    for (name, entry) in file.servers {
        if entry.command.is_none() && entry.url.is_some() {
            tracing::warn!(upstream = %name, "Skipping a URL server: only stdio (`command`) upstreams are supported so far.");
            continue;
        }
        let raw = RawUpstream {
            command: entry.command,
            args: entry.args,
            env: entry.env,
            cwd: entry.cwd,
            enabled: Some(!entry.disabled),
            ..RawUpstream::default()
        };
        upstreams.insert(name, raw);
    }
    Ok(RawConfig {
        upstreams,
        ..RawConfig::default()
    })
}

fn validate(path: &Path, raw: RawConfig) -> Result<Config, ConfigError> {
    let invalid = |key: &str, problem: String, fix: &str| ConfigError::Invalid {
        file: path.into(),
        key: key.to_owned(),
        problem,
        fix: fix.to_owned(),
    };
    let base_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();

    let d = ServerConfig::default();
    let listen = match raw.server.listen.as_deref() {
        None => d.listen,
        Some(text) => text.parse().map_err(|e| {
            invalid(
                "server.listen",
                format!("`{text}` is not an address: {e}"),
                "write it as IP:PORT, e.g. \"127.0.0.1:7332\"",
            )
        })?,
    };
    let s = raw.server;
    let server = ServerConfig {
        listen,
        max_body_bytes: s.max_body_bytes.unwrap_or(d.max_body_bytes),
        session_idle_timeout: s.session_idle_timeout.unwrap_or(d.session_idle_timeout),
        allowed_origins: s.allowed_origins,
        initialize_wait: s.initialize_wait.unwrap_or(d.initialize_wait),
        max_in_flight_per_session: s
            .max_in_flight_per_session
            .unwrap_or(d.max_in_flight_per_session),
        drain_timeout: s.drain_timeout.unwrap_or(d.drain_timeout),
    };
    if server.max_in_flight_per_session == 0 {
        return Err(invalid(
            "server.max_in_flight_per_session",
            "0 would refuse every request".into(),
            "use a positive number, e.g. 32",
        ));
    }
    let admin = match raw.admin.listen.as_deref() {
        None => Some(DEFAULT_ADMIN_LISTEN),
        Some("off") => None,
        Some(text) => Some(text.parse::<SocketAddr>().map_err(|e| {
            invalid(
                "admin.listen",
                format!("`{text}` is not an address: {e}"),
                "write it as IP:PORT, e.g. \"127.0.0.1:7333\", or \"off\"",
            )
        })?),
    };

    let c = raw.catalog;
    let mut page_sizes = BTreeMap::new();
    for (kind, key, value) in [
        (
            ListKind::Tools,
            "catalog.tools_page_size",
            c.tools_page_size,
        ),
        (
            ListKind::Prompts,
            "catalog.prompts_page_size",
            c.prompts_page_size,
        ),
        (
            ListKind::Resources,
            "catalog.resources_page_size",
            c.resources_page_size,
        ),
        (
            ListKind::ResourceTemplates,
            "catalog.resource_templates_page_size",
            c.resource_templates_page_size,
        ),
    ] {
        let size = value.or(c.page_size).unwrap_or(DEFAULT_PAGE_SIZE);
        if size == 0 {
            return Err(invalid(
                key,
                "a page size of 0 would never list anything".into(),
                "use a positive number",
            ));
        }
        page_sizes.insert(kind, size);
    }
    let name_budget = NameBudget::new(
        c.name_pattern.as_deref().unwrap_or(DEFAULT_NAME_PATTERN),
        c.name_max_length.unwrap_or(DEFAULT_NAME_MAX_LENGTH),
    )
    .map_err(|e| {
        invalid(
            "catalog.name_pattern",
            e,
            "use a regular expression and a name_max_length of at least 52",
        )
    })?;
    let defaults = CatalogConfig::default();
    let catalog = CatalogConfig {
        page_sizes,
        name_budget,
        cursor_retention: c.cursor_retention.unwrap_or(defaults.cursor_retention),
        max_items_per_upstream: c
            .max_items_per_upstream
            .unwrap_or(defaults.max_items_per_upstream),
    };

    if let Some(unknown) = raw.defaults.unknown.keys().next() {
        return Err(invalid(
            &format!("defaults.{unknown}"),
            "unknown key".into(),
            &format!("use one of {}", POLICY_KEYS.join(", ")),
        ));
    }
    let defaults = raw.defaults.policy.over(&Policy::default());
    if let Some((k, problem, fix)) = defaults.problem() {
        return Err(invalid(&format!("defaults.{k}"), problem, fix));
    }
    let mut upstreams = Vec::new();
    let mut prefixes: HashMap<Prefix, String> = HashMap::new();
    for (name, u) in raw.upstreams {
        let key = |field: &str| format!("upstreams.{name}.{field}");
        if let Some(unknown) = u.unknown.keys().next() {
            return Err(invalid(
                &key(unknown),
                "unknown key".into(),
                &format!(
                    "use one of {}, {}",
                    UPSTREAM_KEYS.join(", "),
                    POLICY_KEYS.join(", ")
                ),
            ));
        }
        let command = u.command.filter(|c| !c.trim().is_empty()).ok_or_else(|| {
            invalid(
                &key("command"),
                "missing".into(),
                "set the program to start, e.g. command = \"npx\"",
            )
        })?;
        let prefix = match &u.prefix {
            Some(p) => {
                Prefix::parse(p).map_err(|e| invalid(&key("prefix"), e, "e.g. prefix = \"fs\""))?
            }
            None => Prefix::derive(&name).map_err(|e| {
                invalid(&format!("upstreams.{name}"), e, "set prefix = \"…\" for it")
            })?,
        };
        if let Some(other) = prefixes.insert(prefix.clone(), name.clone()) {
            return Err(invalid(
                &format!("upstreams.{name}"),
                format!("upstreams `{other}` and `{name}` both get the prefix `{prefix}`"),
                "give one of them its own prefix = \"…\"",
            ));
        }
        let mut policy = u.policy.over(&defaults);
        policy.tool_timeouts = u
            .tool_timeouts
            .iter()
            .map(|(t, d)| (t.clone(), d.0))
            .collect();
        if let Some((k, problem, fix)) = policy.problem() {
            return Err(invalid(&key(k), problem, fix));
        }
        if let Some(bad) = u.roots.iter().flatten().find(|r| !r.contains(':')) {
            return Err(invalid(
                &key("roots"),
                format!("`{bad}` is not a URI"),
                "write roots as URIs, e.g. \"file:///home/me/project\"",
            ));
        }
        let cwd = u
            .cwd
            .map(|d| if d.is_relative() { base_dir.join(d) } else { d });
        let command = if command.contains('/') && Path::new(&command).is_relative() {
            base_dir.join(&command).to_string_lossy().into_owned()
        } else {
            command
        };
        upstreams.push(UpstreamConfig {
            name,
            prefix,
            command,
            args: u.args,
            env: u.env,
            inherit_env: u.inherit_env.unwrap_or_else(|| {
                DEFAULT_INHERITED_ENV
                    .iter()
                    .map(|s| (*s).to_owned())
                    .collect()
            }),
            cwd,
            enabled: u.enabled.unwrap_or(true),
            policy,
            isolation: u.isolation,
            roots: u.roots,
            audit_redaction: u.audit_redaction,
            audit_redaction_tools: u.audit_redaction_tools,
        });
    }
    let state_dir = raw
        .state_dir
        .map(|d| if d.is_relative() { base_dir.join(d) } else { d });
    let mut audit =
        AuditConfig::default_for(super::audit::state_dir(state_dir.as_deref()).join("audit"));
    let a = raw.audit;
    audit.enabled = a.enabled.unwrap_or(audit.enabled);
    audit.redaction = a.redaction.unwrap_or(audit.redaction);
    audit.secret_keys = a.secret_keys.unwrap_or(audit.secret_keys);
    audit.durability = a.durability.unwrap_or(audit.durability);
    audit.max_age = match a.max_age {
        Some(age) if age.is_zero() => None,
        Some(age) => Some(age),
        None => audit.max_age,
    };
    audit.max_bytes = a.max_bytes.unwrap_or(audit.max_bytes);
    audit.queue = a.queue.unwrap_or(audit.queue);
    if audit.queue == 0 {
        return Err(invalid(
            "audit.queue",
            "0 would drop every record".into(),
            "use e.g. 65536",
        ));
    }
    Ok(Config {
        source: path.into(),
        audit,
        server,
        catalog,
        admin,
        upstreams,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn toml_with_defaults() {
        let c = load_text(
            "a.toml",
            "[upstreams.mem]\ncommand = \"npx\"\nargs = [\"-y\", \"x\"]\n",
        )
        .map_err(|e| e.to_string());
        let c = c.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(c.server.listen, super::super::model::DEFAULT_LISTEN);
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
            "remote": {"url": "https://example.com/mcp"}, "off": {"command": "x", "disabled": true}},
            "globalShortcut": "x"}"#;
        let c = load_text("claude_desktop_config.json", json).unwrap_or_else(|e| panic!("{e}"));
        let names: Vec<_> = c
            .upstreams
            .iter()
            .map(|u| (u.name.as_str(), u.prefix.as_str(), u.enabled))
            .collect();
        assert_eq!(
            names,
            [("My Server", "my-server", true), ("off", "off", false)]
        );
    }
}
