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
mod tests;

#[cfg(test)]
mod properties;
