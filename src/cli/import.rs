//! `mcpmux import HOST [PATH]`: reads a host's MCP config where that host keeps it (or at PATH),
//! writes an mcpmux config holding its servers — stdio and remote — and prints the one entry
//! that replaces them all in the host's config. `--dry-run` prints the config instead.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use clap::ValueEnum;

use crate::config::{ImportedServer, imported_servers};

/// The hosts whose config `import` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Host {
    ClaudeDesktop,
    ClaudeCode,
    Cursor,
    Vscode,
}

impl Host {
    /// Where the host keeps its MCP servers, first existing wins.
    fn usual_paths(self) -> Vec<PathBuf> {
        let home = std::env::var_os("HOME")
            .map(PathBuf::from)
            .unwrap_or_default();
        let config = std::env::var_os("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .unwrap_or_else(|| home.join(".config"));
        match self {
            Self::ClaudeDesktop => vec![
                config.join("Claude/claude_desktop_config.json"),
                home.join("Library/Application Support/Claude/claude_desktop_config.json"),
            ],
            Self::ClaudeCode => vec![PathBuf::from(".mcp.json"), home.join(".claude.json")],
            Self::Cursor => vec![
                PathBuf::from(".cursor/mcp.json"),
                home.join(".cursor/mcp.json"),
            ],
            Self::Vscode => vec![
                PathBuf::from(".vscode/mcp.json"),
                config.join("Code/User/mcp.json"),
                home.join("Library/Application Support/Code/User/mcp.json"),
            ],
        }
    }

    /// The one entry that replaces the imported servers in this host's config.
    fn replacement(self, url: &str) -> String {
        let bin = std::env::current_exe()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| "mcpmux".into());
        match self {
            Self::ClaudeDesktop => format!(
                "in {{\"mcpServers\": …}} of claude_desktop_config.json, replace the servers with:\n  \"mcpmux\": {{ \"command\": \"{bin}\", \"args\": [\"stdio\"] }}"
            ),
            Self::ClaudeCode => format!(
                "remove the servers from Claude Code (`claude mcp remove NAME`), then run:\n  claude mcp add --transport http mcpmux {url}"
            ),
            Self::Cursor => format!(
                "in {{\"mcpServers\": …}} of mcp.json, replace the servers with:\n  \"mcpmux\": {{ \"url\": \"{url}\" }}"
            ),
            Self::Vscode => format!(
                "in {{\"servers\": …}} of mcp.json, replace the servers with:\n  \"mcpmux\": {{ \"type\": \"http\", \"url\": \"{url}\" }}"
            ),
        }
    }
}

/// Reads `host`'s servers (from `path`, else its usual place) and writes them to `output` (or,
/// with `dry_run`, prints them); returns what to tell the person.
pub fn run(
    host: Host,
    path: Option<PathBuf>,
    output: &Path,
    dry_run: bool,
    force: bool,
) -> anyhow::Result<String> {
    let path = match path {
        Some(path) => path,
        None => {
            let tried = host.usual_paths();
            tried.iter().find(|p| p.is_file()).cloned().ok_or_else(|| {
                let list: Vec<String> = tried.iter().map(|p| p.display().to_string()).collect();
                anyhow::anyhow!(
                    "no {host:?} config found (looked at {}); pass its path",
                    list.join(", ")
                )
            })?
        }
    };
    let text = std::fs::read_to_string(&path)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    let servers = imported_servers(&path, &text)?;
    if servers.is_empty() {
        anyhow::bail!("{} lists no MCP servers", path.display());
    }
    let toml = config_text(&path, &servers)?;
    let url = format!(
        "http://{}/mcp",
        crate::config::ServerConfig::default().listen
    );
    let names: Vec<&str> = servers.keys().map(String::as_str).collect();
    if dry_run {
        return Ok(format!(
            "{toml}\n# Then, {}\n",
            host.replacement(&url).replace('\n', "\n# ")
        ));
    }
    if output.exists() && !force {
        anyhow::bail!(
            "{} exists; pass --output FILE for another file, or --force to replace it",
            output.display()
        );
    }
    if let Some(dir) = output.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(output, &toml)
        .map_err(|e| anyhow::anyhow!("cannot write {}: {e}", output.display()))?;
    Ok(format!(
        "wrote {} with {} servers ({}); start it with `mcpmux serve --config {}`.\nThen, {}\n",
        output.display(),
        names.len(),
        names.join(", "),
        output.display(),
        host.replacement(&url)
    ))
}

/// The mcpmux config holding `servers`, as TOML.
fn config_text(
    source: &Path,
    servers: &BTreeMap<String, ImportedServer>,
) -> anyhow::Result<String> {
    #[derive(serde::Serialize)]
    struct File<'a> {
        upstreams: BTreeMap<&'a str, Upstream<'a>>,
    }
    #[derive(serde::Serialize)]
    struct Upstream<'a> {
        #[serde(flatten)]
        server: &'a ImportedServer,
        #[serde(skip_serializing_if = "Option::is_none")]
        enabled: Option<bool>,
    }
    let file = File {
        upstreams: servers
            .iter()
            .map(|(name, s)| {
                let upstream = Upstream {
                    server: s,
                    enabled: s.disabled.then_some(false),
                };
                (name.as_str(), upstream)
            })
            .collect(),
    };
    let body = toml::to_string(&file)?;
    Ok(format!(
        "# Imported by `mcpmux import` from {}.\n# Every key is documented in config/example.toml.\n\n{body}",
        source.display()
    ))
}
