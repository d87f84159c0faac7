//! The `mcpServers` JSON that Claude Desktop, Cursor and VS Code write, read as those hosts write
//! it (unknown keys ignored) into the same [`RawConfig`] a TOML file gives.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::error::ConfigError;
use super::raw::{RawConfig, RawUpstream};

/// The file: its servers under `mcpServers` (or VS Code's `servers`).
#[derive(Debug, Deserialize)]
struct McpServersFile {
    #[serde(rename = "mcpServers", alias = "servers")]
    servers: BTreeMap<String, McpServerEntry>,
}

/// One server: a command to start, or a URL (not supported yet, skipped with a warning).
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

pub(super) fn from_mcp_servers_json(path: &Path, text: &str) -> Result<RawConfig, ConfigError> {
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
