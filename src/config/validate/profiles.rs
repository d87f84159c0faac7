//! `[profiles.NAME]`: the upstreams it holds exist, its globs compile, its renames are names a
//! host accepts and do not collide, an unprefixed profile holds exactly one upstream, and its page
//! sizes and name budget pass the catalog's own checks; a search-mode profile's `always` globs
//! compile and its search tools' names are distinct names the budget accepts.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;

use globset::{Glob, GlobSetBuilder};

use super::super::error::ConfigError;
use super::super::filter::{KIND_QUALIFIERS, NameFilter};
use super::super::model::{CALL_TOOL_NAME, SEARCH_TOOL_NAME};
use super::super::model::{CatalogConfig, MetaTool, PinMode, Profile, SearchMode, UpstreamConfig};
use super::super::raw::{RawCatalog, RawProfile};
use super::catalog;

/// Validates every profile, in name order.
pub(super) fn profiles(
    file: &Path,
    global: &RawCatalog,
    upstreams: &[UpstreamConfig],
    raw: BTreeMap<String, RawProfile>,
) -> Result<Vec<Profile>, ConfigError> {
    raw.into_iter()
        .map(|(name, p)| profile(file, global, upstreams, name, p))
        .collect()
}

/// The profile `value` names, checked to exist (`key` is where it was written).
pub(super) fn named(
    file: &Path,
    key: &str,
    value: Option<String>,
    profiles: &[Profile],
) -> Result<Option<String>, ConfigError> {
    match value {
        Some(name) if !profiles.iter().any(|p| p.name == name) => {
            let known: Vec<&str> = profiles.iter().map(|p| p.name.as_str()).collect();
            Err(ConfigError::invalid(
                file,
                key,
                format!("names the profile `{name}`, which is not configured"),
                if known.is_empty() {
                    format!("add a [profiles.{name}] table, or leave {key} out")
                } else {
                    format!("use one of {}, or add [profiles.{name}]", known.join(", "))
                },
            ))
        }
        value => Ok(value),
    }
}

// Long: one check per `[profiles.NAME]` key, in the order the file documents them, each naming its
// key in the error.
fn profile(
    file: &Path,
    global: &RawCatalog,
    upstreams: &[UpstreamConfig],
    name: String,
    p: RawProfile,
) -> Result<Profile, ConfigError> {
    let key = |field: &str| format!("profiles.{name}.{field}");
    if !is_path_segment(&name) {
        return Err(ConfigError::invalid(
            file,
            format!("profiles.{name}"),
            "is not a name that can be a URL path segment",
            "name profiles with letters, digits, `-` and `_`",
        ));
    }
    if let Some(list) = &p.upstreams {
        for upstream in list {
            if !upstreams.iter().any(|u| &u.name == upstream) {
                let known: Vec<&str> = upstreams.iter().map(|u| u.name.as_str()).collect();
                return Err(ConfigError::invalid(
                    file,
                    key("upstreams"),
                    format!("names the upstream `{upstream}`, which is not configured"),
                    format!("use the names of [upstreams] tables: {}", known.join(", ")),
                ));
            }
        }
    }
    let held = p.upstreams.as_ref().map_or(upstreams.len(), Vec::len);
    if p.unprefixed && held != 1 {
        return Err(ConfigError::invalid(
            file,
            key("unprefixed"),
            format!("is set on a profile that holds {held} upstreams"),
            "an unprefixed profile holds exactly one upstream: set upstreams = [\"NAME\"]",
        ));
    }
    if p.path_requires_credential && !p.path {
        return Err(ConfigError::invalid(
            file,
            key("path_requires_credential"),
            "is set but the profile is not served at a path",
            "set path = true as well, or leave path_requires_credential out",
        ));
    }
    if p.anonymous && !p.path {
        return Err(ConfigError::invalid(
            file,
            key("anonymous"),
            "is set but the profile is not served at a path",
            "set path = true as well (server.anonymous_profile is what /mcp gives without a credential)",
        ));
    }
    if p.anonymous && p.path_requires_credential {
        return Err(ConfigError::invalid(
            file,
            key("anonymous"),
            "is set together with path_requires_credential, which says the opposite",
            "keep one of them",
        ));
    }
    let filter = NameFilter::new(&p.allow, &p.deny).map_err(|(pattern, why)| {
        ConfigError::invalid(
            file,
            key("allow"),
            format!("`{pattern}` is not a glob: {why}"),
            format!(
                "write globs like \"fs__read_*\", optionally qualified by kind ({})",
                KIND_QUALIFIERS.map(|(q, _)| q).join(" ")
            ),
        )
    })?;
    let overrides = RawCatalog {
        page_size: p.page_size.or(global.page_size),
        tools_page_size: p.tools_page_size.or(global.tools_page_size),
        prompts_page_size: p.prompts_page_size.or(global.prompts_page_size),
        resources_page_size: p.resources_page_size.or(global.resources_page_size),
        resource_templates_page_size: p
            .resource_templates_page_size
            .or(global.resource_templates_page_size),
        skills_page_size: p.skills_page_size.or(global.skills_page_size),
        name_pattern: p
            .name_pattern
            .clone()
            .or_else(|| global.name_pattern.clone()),
        name_max_length: p.name_max_length.or(global.name_max_length),
        ..global.clone()
    };
    let catalog = catalog(file, &format!("profiles.{name}"), overrides)?;
    let mut targets = BTreeSet::new();
    for (from, to) in &p.rename {
        if !catalog.name_budget.accepts(to) {
            return Err(ConfigError::invalid(
                file,
                format!("profiles.{name}.rename.{from}"),
                format!("renames to `{to}`, which the profile's name budget does not accept"),
                "rename to a name of letters, digits, `_` and `-` within name_max_length",
            ));
        }
        if !targets.insert(to.as_str()) {
            return Err(ConfigError::invalid(
                file,
                format!("profiles.{name}.rename.{from}"),
                format!("renames to `{to}`, which another rename already uses"),
                "give every renamed item its own name",
            ));
        }
    }
    let search = search_mode(file, &name, &catalog, &p)?;
    Ok(Profile {
        search,
        upstreams: p.upstreams,
        filter,
        renames: p.rename,
        descriptions: p.describe,
        catalog,
        unprefixed: p.unprefixed,
        path: p.path,
        path_requires_credential: p.path_requires_credential,
        anonymous: p.anonymous,
        strict_pins: p.pin == Some(PinMode::Strict),
        name,
    })
}

// Long: one check per search-mode key of a profile, each naming its key in the error.
/// `tools`, `always` and the search tools' names and descriptions: `tools = "search"` gives a
/// [`SearchMode`]; the others need it.
fn search_mode(
    file: &Path,
    name: &str,
    catalog: &CatalogConfig,
    p: &RawProfile,
) -> Result<Option<Arc<SearchMode>>, ConfigError> {
    let key = |field: &str| format!("profiles.{name}.{field}");
    let search = match p.tools.as_deref() {
        None | Some("all") => false,
        Some("search") => true,
        Some(other) => {
            return Err(ConfigError::invalid(
                file,
                key("tools"),
                format!("is `{other}`, which is not a way to list tools"),
                "write tools = \"all\" (every tool listed, the default) or tools = \"search\"",
            ));
        }
    };
    if !search {
        let set = [
            ("always", !p.always.is_empty()),
            ("search_tool_name", p.search_tool_name.is_some()),
            (
                "search_tool_description",
                p.search_tool_description.is_some(),
            ),
            ("call_tool_name", p.call_tool_name.is_some()),
            ("call_tool_description", p.call_tool_description.is_some()),
        ];
        if let Some((field, _)) = set.iter().find(|(_, set)| *set) {
            return Err(ConfigError::invalid(
                file,
                key(field),
                "is set on a profile that lists all its tools",
                "set tools = \"search\" on the profile as well, or leave it out",
            ));
        }
        return Ok(None);
    }
    let mut always = GlobSetBuilder::new();
    for pattern in &p.always {
        let glob = Glob::new(pattern).map_err(|e| {
            ConfigError::invalid(
                file,
                key("always"),
                format!("`{pattern}` is not a glob: {}", e.kind()),
                "write globs on exposed tool names, like \"time__*\"",
            )
        })?;
        always.add(glob);
    }
    let always = always.build().map_err(|e| {
        ConfigError::invalid(
            file,
            key("always"),
            format!("does not compile: {e}"),
            "write globs on exposed tool names, like \"time__*\"",
        )
    })?;
    let meta = |field: &str, name: &Option<String>, default: &str, description: &Option<String>| {
        let name = name.clone().unwrap_or_else(|| default.to_owned());
        if !catalog.name_budget.accepts(&name) {
            return Err(ConfigError::invalid(
                file,
                key(field),
                format!("is `{name}`, which the profile's name budget does not accept"),
                "name it with letters, digits, `_` and `-` within name_max_length",
            ));
        }
        Ok(MetaTool {
            name,
            description: description.clone(),
        })
    };
    let search = meta(
        "search_tool_name",
        &p.search_tool_name,
        SEARCH_TOOL_NAME,
        &p.search_tool_description,
    )?;
    let call = meta(
        "call_tool_name",
        &p.call_tool_name,
        CALL_TOOL_NAME,
        &p.call_tool_description,
    )?;
    if search.name == call.name {
        return Err(ConfigError::invalid(
            file,
            key("call_tool_name"),
            format!("is `{}`, the search tool's name too", call.name),
            "give the two tools different names",
        ));
    }
    Ok(Some(Arc::new(SearchMode {
        always,
        search,
        call,
    })))
}

fn is_path_segment(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}
