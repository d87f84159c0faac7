//! The `mcpServers` JSON that Claude Desktop, Cursor and VS Code write, read as those hosts write
//! it (unknown keys ignored) into the same [`RawConfig`] a TOML file gives.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::error::ConfigError;
use super::raw::{RawConfig, RawUpstream};
use super::transport::RemoteKind;

/// The file: its servers under `mcpServers` (or VS Code's `servers`).
#[derive(Debug, Deserialize)]
struct McpServersFile {
    #[serde(rename = "mcpServers", alias = "servers")]
    servers: BTreeMap<String, McpServerEntry>,
}

/// One server: a command to start, or a remote server's URL with the transport the host names
/// (`type`: `stdio`, `http` / `streamable-http`, `sse`) and its headers.
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
    #[serde(rename = "type", alias = "transport")]
    kind: Option<String>,
    #[serde(default)]
    headers: BTreeMap<String, String>,
}

/// A host's server entry, for `mcpmux import`: a command, or a remote URL with its transport.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ImportedServer {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub transport: Option<&'static str>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// The host had it turned off (written as `enabled = false`).
    #[serde(skip)]
    pub disabled: bool,
}

/// The servers of a host's `mcpServers` (or VS Code `servers`) file, by name, checked as `serve`
/// would read them.
pub fn imported_servers(
    path: &Path,
    text: &str,
) -> Result<BTreeMap<String, ImportedServer>, ConfigError> {
    let raw = from_mcp_servers_json(path, text)?;
    Ok(raw
        .upstreams
        .into_iter()
        .map(|(name, u)| {
            let server = ImportedServer {
                command: u.command,
                args: u.args,
                env: u.env,
                cwd: u.cwd,
                url: u.url,
                transport: u.transport.map(|t| match t {
                    RemoteKind::Sse => "sse",
                    _ => "streamable-http",
                }),
                headers: u.headers,
                disabled: u.enabled == Some(false),
            };
            (name, server)
        })
        .collect())
}

pub(super) fn from_mcp_servers_json(path: &Path, text: &str) -> Result<RawConfig, ConfigError> {
    let file: McpServersFile = serde_json::from_str(text).map_err(|e| ConfigError::Syntax {
        file: path.into(),
        detail: format!("not an `mcpServers` JSON file: {e}"),
    })?;
    let mut upstreams = BTreeMap::new();
    for (name, entry) in file.servers {
        let transport = match entry.kind.as_deref() {
            None | Some("stdio") => None,
            Some("http" | "streamable-http" | "streamableHttp") => Some(RemoteKind::StreamableHttp),
            Some("sse") => Some(RemoteKind::Sse),
            Some(other) => {
                return Err(ConfigError::invalid(
                    path,
                    format!("mcpServers.{name}.type"),
                    format!("unknown transport `{other}`"),
                    "use \"stdio\", \"http\" (Streamable HTTP) or \"sse\"",
                ));
            }
        };
        // A remote entry names its transport; a `type` on a stdio entry says nothing more.
        let transport = transport.filter(|_| entry.url.is_some());
        let raw = RawUpstream {
            command: entry.command,
            args: entry.args,
            env: entry.env,
            cwd: entry.cwd,
            enabled: Some(!entry.disabled),
            url: entry.url,
            transport,
            headers: entry.headers,
            ..RawUpstream::default()
        };
        upstreams.insert(name, raw);
    }
    Ok(RawConfig {
        upstreams,
        ..RawConfig::default()
    })
}
