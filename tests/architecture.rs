//! The arrows the architecture allows (docs/architecture.md), checked on the source itself so
//! they stay true: which top-level modules may use which, no import cycles between top-level
//! modules nor between the sibling files of one module, and sled only inside `src/audit/`; and that
//! the map of concepts to files names every source file, and only files that exist.

#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

use regex::Regex;

/// `crate::a::b…` paths and `use crate::{a, b::c}` groups in a file.
static CRATE_PATH: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"crate::((?:[a-z_][a-z0-9_]*::)*[a-z_][a-z0-9_]*)").unwrap());
static CRATE_GROUP: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"crate::\{([^}]*)\}").unwrap());
/// Where a module path starts: `crate::`, `super::`, `super::super::`….
static STARTS: LazyLock<Regex> = LazyLock::new(|| Regex::new(r"(?:crate::|(?:super::)+)").unwrap());

/// Top-level modules that must not use the listed ones.
const FORBIDDEN: &[(&str, &[&str])] = &[
    ("jsonrpc", RUNTIME),
    ("mcp", RUNTIME),
    ("config", RUNTIME),
    ("pins", RUNTIME),
    (
        "upstream",
        &[
            "router",
            "downstream",
            "supervisor",
            "audit",
            "admin",
            "daemon",
            "cli",
            "bridge",
        ],
    ),
    (
        "router",
        &[
            "downstream",
            "supervisor",
            "audit",
            "admin",
            "daemon",
            "cli",
            "bridge",
        ],
    ),
    (
        "supervisor",
        &["router", "downstream", "admin", "daemon", "cli", "bridge"],
    ),
    (
        "audit",
        &[
            "upstream",
            "router",
            "downstream",
            "supervisor",
            "admin",
            "daemon",
            "cli",
            "bridge",
        ],
    ),
    ("admin", &["downstream", "daemon", "cli", "bridge"]),
    // The admin API's wire types: shared by the server side and the CLI, so they use neither.
    (
        "api",
        &[
            "upstream",
            "router",
            "downstream",
            "supervisor",
            "admin",
            "daemon",
            "cli",
            "bridge",
            "telemetry",
        ],
    ),
    ("downstream", &["admin", "daemon", "cli", "bridge"]),
];

/// Everything that runs: what protocol knowledge and config must not depend on.
const RUNTIME: &[&str] = &[
    "audit",
    "upstream",
    "router",
    "downstream",
    "supervisor",
    "daemon",
    "admin",
    "cli",
    "bridge",
    "client",
    "telemetry",
];

struct Source {
    /// Path below `src/`, e.g. `upstream/connection/inbound.rs`.
    rel: PathBuf,
    text: String,
}

fn sources() -> Vec<Source> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = Vec::new();
    let mut dirs = vec![root.clone()];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&path).unwrap();
                let rel = path.strip_prefix(&root).unwrap().to_path_buf();
                out.push(Source { rel, text });
            }
        }
    }
    out
}

/// The code of a file without comments and without its `#[cfg(test)]` module.
fn code(text: &str) -> String {
    let text = match text.find("#[cfg(test)]") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The first component of a path below `src/` without `.rs` (`upstream/handle.rs` → `upstream`).
fn component(rel: &Path, depth: usize) -> Option<String> {
    let part = rel.components().nth(depth)?.as_os_str().to_string_lossy();
    Some(part.trim_end_matches(".rs").to_owned())
}

/// Every `crate::a::b…` path a file names, as its segments.
fn crate_paths(code: &str) -> Vec<Vec<String>> {
    let mut paths: Vec<Vec<String>> = CRATE_PATH
        .captures_iter(code)
        .map(|c| c[1].split("::").map(str::to_owned).collect())
        .collect();
    // `use crate::{a, b::c}` groups.
    for c in CRATE_GROUP.captures_iter(code) {
        for item in c[1].split(',') {
            let item = item.trim();
            if !item.is_empty() {
                paths.push(item.split("::").map(|s| s.trim().to_owned()).collect());
            }
        }
    }
    paths
}

fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        stack: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = stack.iter().position(|n| n == node) {
            let mut cycle = stack[i..].to_vec();
            cycle.push(node.to_owned());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        stack.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, stack, done) {
                return Some(cycle);
            }
        }
        stack.pop();
        done.insert(node.to_owned());
        None
    }
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        if let Some(cycle) = visit(node, graph, &mut Vec::new(), &mut done) {
            return Some(cycle);
        }
    }
    None
}

#[test]
fn modules_use_only_what_the_architecture_allows_and_form_no_cycles() {
    let sources = sources();
    assert!(sources.len() > 20, "src/ not found");
    let modules: BTreeSet<String> = sources
        .iter()
        .filter_map(|s| component(&s.rel, 0))
        .filter(|m| m != "lib" && m != "main")
        .collect();
    // Every module below `src/` that is a file or a folder, as `a/b`.
    let children: BTreeSet<String> = sources
        .iter()
        .flat_map(|s| {
            let path = module_path(&s.rel);
            (1..=path.len()).map(move |n| path[..n].join("/"))
        })
        .collect();
    let mut top: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut siblings: BTreeMap<String, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    let mut broken = Vec::new();
    for source in &sources {
        let Some(module) = component(&source.rel, 0) else {
            continue;
        };
        if module == "lib" || module == "main" {
            continue;
        }
        let code = code(&source.text);
        let file = source.rel.display().to_string();
        if code.contains("sled::") && module != "audit" {
            broken.push(format!("{file} uses sled outside src/audit/"));
        }
        let own = module_path(&source.rel);
        let named = module_paths(&code, &own);
        // Within each folder, an arrow from the child this file is in (or is) to each other
        // child of that folder it names.
        for depth in 1..own.len() {
            let (folder, node) = (&own[..depth], &own[depth]);
            for path in &named {
                let Some(other) = path.strip_prefix(folder).and_then(<[String]>::first) else {
                    continue;
                };
                if other != node && children.contains(&folder_child(folder, other)) {
                    siblings
                        .entry(folder.join("/"))
                        .or_default()
                        .entry(node.clone())
                        .or_default()
                        .insert(other.clone());
                }
            }
        }
        for path in crate_paths(&code) {
            let target = &path[0];
            if !modules.contains(target) || *target == module {
                continue;
            }
            top.entry(module.clone())
                .or_default()
                .insert(target.clone());
            if let Some((_, banned)) = FORBIDDEN.iter().find(|(m, _)| *m == module) {
                if banned.contains(&target.as_str()) {
                    broken.push(format!("{file}: `{module}` must not use `{target}`"));
                }
            }
        }
    }
    if let Some(cycle) = find_cycle(&top) {
        broken.push(format!(
            "top-level modules form a cycle: {}",
            cycle.join(" → ")
        ));
    }
    for (module, graph) in &siblings {
        if let Some(cycle) = find_cycle(graph) {
            broken.push(format!(
                "files of `src/{module}/` form a cycle: {}",
                cycle.join(" → ")
            ));
        }
    }
    assert!(
        broken.is_empty(),
        "architecture rules broken:\n{}",
        broken.join("\n")
    );
}

/// `folder/child` as [`children`] spells it.
fn folder_child(folder: &[String], child: &str) -> String {
    let mut path = folder.join("/");
    path.push('/');
    path.push_str(child);
    path
}

/// The module path of a file below `src/` (`downstream/http/stateless.rs` → downstream, http,
/// modern).
fn module_path(rel: &Path) -> Vec<String> {
    rel.components()
        .map(|c| {
            c.as_os_str()
                .to_string_lossy()
                .trim_end_matches(".rs")
                .to_owned()
        })
        .collect()
}

/// Every module path a file's code names, absolute (from `src/`): `crate::a::b`, `super::x`
/// (from the file's own module path `own`), `super::super::y`, and the groups of each
/// (`super::{a, b::c}`, `crate::x::{y, z}`), nested ones too.
fn module_paths(code: &str, own: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let mut at = 0;
    while let Some(found) = STARTS.find_at(code, at) {
        at = found.end();
        // A word that only ends in `crate`/`super` (`my_super::`) is not one.
        if found.start() > 0
            && (bytes[found.start() - 1].is_ascii_alphanumeric()
                || bytes[found.start() - 1] == b'_')
        {
            continue;
        }
        let head = found.as_str().trim_end_matches("::");
        let base: Vec<String> = if head == "crate" {
            Vec::new()
        } else {
            let ups = head.split("::").count();
            own[..own.len().saturating_sub(ups)].to_vec()
        };
        let (paths, end) = expand(code, found.end(), base);
        at = at.max(end);
        out.extend(paths);
    }
    out
}

/// The paths written at `code[start..]` after a `prefix::` (a path, or a `{…}` group of them),
/// and where they end.
fn expand(code: &str, start: usize, prefix: Vec<String>) -> (Vec<Vec<String>>, usize) {
    let rest = &code[start..];
    if let Some(group) = rest.strip_prefix('{') {
        // The group's items, split at top-level commas.
        let (mut depth, mut item_start, mut out) = (0usize, 0usize, Vec::new());
        for (i, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    out.extend(item(&group[item_start..i], &prefix));
                    return (out, start + 1 + i + 1);
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    out.extend(item(&group[item_start..i], &prefix));
                    item_start = i + 1;
                }
                _ => {}
            }
        }
        return (out, code.len());
    }
    let len = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
        .unwrap_or(rest.len());
    let path = rest[..len].trim_end_matches(':');
    let mut full = prefix.clone();
    full.extend(
        path.split("::")
            .filter(|s| !s.is_empty())
            .map(str::to_owned),
    );
    if rest[len..].starts_with('{') && rest[..len].ends_with("::") {
        let (paths, end) = expand(code, start + len, full);
        return (paths, end);
    }
    (vec![full], start + len)
}

/// One item of a group (`b::c`, `self`, `x::{y, z}`, `Type as Alias`) under `prefix`.
fn item(text: &str, prefix: &[String]) -> Vec<Vec<String>> {
    let text = text.trim();
    let text = text.split(" as ").next().unwrap_or(text).trim();
    if text.is_empty() || text == "self" || text == "*" {
        return vec![prefix.to_vec()];
    }
    let (paths, _) = expand(text, 0, prefix.to_vec());
    paths
}

/// The seams of the request path (issue 19), each in one place: a transport never parses what
/// its connection hands it (`Outgoing` carries the id, method and trace context) and parses what
/// it receives once, with the seam's own `receive`; a host request's params are parsed only in
/// `service/method.rs`; admission (origin, credential, profile) only in `http/admission/`.
#[test]
fn the_request_path_parses_once_and_admits_in_one_place() {
    let sources = sources();
    let mut broken = Vec::new();
    for source in &sources {
        let file = source.rel.to_string_lossy().replace('\\', "/");
        let code = code(&source.text);
        if file.starts_with("upstream/transport")
            && (code.contains("Incoming::parse") || code.contains("Received::parse"))
            && file != "upstream/transport.rs"
        {
            broken.push(format!(
                "{file} parses a message itself; use transport::receive (incoming) or the Outgoing it was given"
            ));
        }
        // The handshake and host notifications are not requests of a session: they keep theirs.
        let own_params = [
            "downstream/service/method.rs",
            "downstream/service/initialize.rs",
            "downstream/service/answers.rs",
        ];
        if file.starts_with("downstream/service/")
            && !own_params.contains(&file.as_str())
            && code.contains("params: Option<&RawValue>")
        {
            broken.push(format!(
                "{file} takes a request's raw params; parse them in service/method.rs (HostMethod)"
            ));
        }
        let admission = file.starts_with("downstream/http/admission");
        if file.starts_with("downstream/http")
            && !admission
            && (code.contains("check_origin(") || code.contains(".resolve("))
        {
            broken.push(format!(
                "{file} admits a request itself; take the Admitted or InSession extractor"
            ));
        }
        if code.contains("RouteFacts") {
            broken.push(format!(
                "{file} names RouteFacts; a request's route is a Route its handler fills in"
            ));
        }
    }
    assert!(
        broken.is_empty(),
        "request-path seams broken:\n{}",
        broken.join("\n")
    );
}

/// The paths docs/architecture.md's table names, `{a,b}` groups spelled out (`src/x/` names a
/// whole directory).
fn mapped_paths() -> BTreeSet<String> {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/architecture.md"))
            .unwrap();
    let start = readme
        .find("| concept | file |")
        .expect("docs/architecture.md's table");
    let table = &readme[start..];
    let table = &table[..table.find("\n\n").unwrap_or(table.len())];
    let quoted = Regex::new(r"`([^`]+)`").unwrap();
    let group = Regex::new(r"^(.*)\{([^}]*)\}(.*)$").unwrap();
    let mut paths = BTreeSet::new();
    for cell in quoted.captures_iter(table).map(|c| c[1].to_owned()) {
        let file = ["src/", "tests/", "benches/"]
            .iter()
            .any(|top| cell.starts_with(top));
        if !file || cell.contains(' ') {
            continue;
        }
        match group.captures(&cell) {
            Some(g) => paths.extend(
                g[2].split(',')
                    .map(|name| format!("{}{}{}", &g[1], name.trim(), &g[3])),
            ),
            None => {
                paths.insert(cell);
            }
        }
    }
    paths
}

/// Whether `rel` is a module its parent declares under `#[cfg(test)]` (tests in a file of
/// their own, not part of the architecture).
fn test_only(sources: &[Source], rel: &Path) -> bool {
    let Some(name) = rel.file_stem().and_then(|n| n.to_str()) else {
        return false;
    };
    let parent = match rel.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(dir) => dir.with_extension("rs"),
        None => PathBuf::from("lib.rs"),
    };
    let Some(parent) = sources.iter().find(|s| s.rel == parent) else {
        return false;
    };
    let lines: Vec<&str> = parent.text.lines().map(str::trim).collect();
    lines.iter().enumerate().any(|(i, line)| {
        *line == format!("mod {name};") && i > 0 && lines[i - 1].contains("#[cfg(test)]")
    })
}

/// docs/architecture.md's map of concepts to files matches the tree: every file it names exists, and every
/// source file is named (the crate's roots, module files that only declare the files of their
/// directory, and test-only modules aside).
#[test]
fn the_architecture_doc_maps_every_source_file_and_only_files_that_exist() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mapped = mapped_paths();
    let mut wrong = Vec::new();
    for path in &mapped {
        if !root.join(path).exists() {
            wrong.push(format!(
                "docs/architecture.md names {path}, which does not exist"
            ));
        }
    }
    let sources = sources();
    for source in &sources {
        let rel = source.rel.to_string_lossy().replace('\\', "/");
        let path = format!("src/{rel}");
        let in_mapped_dir = mapped
            .iter()
            .any(|m| m.ends_with('/') && path.starts_with(m.as_str()));
        // A module file beside its directory, holding no function of its own.
        let declares_only = root
            .join("src")
            .join(&source.rel)
            .with_extension("")
            .is_dir()
            && !code(&source.text).contains("fn ");
        let exempt = ["lib.rs", "main.rs"].contains(&rel.as_str())
            || declares_only
            || test_only(&sources, &source.rel);
        if !mapped.contains(&path) && !in_mapped_dir && !exempt {
            wrong.push(format!("{path} is not in docs/architecture.md's table"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// No function of `src/` is longer than 80 lines unless a `// Long: …` comment just above it
/// says why (a validation of one section key by key, one actor's message handler…): long
/// functions are where the next change gets lost. Test-only files are left out.
#[test]
fn no_function_is_over_80_lines_without_a_reason() {
    static FN: LazyLock<Regex> = LazyLock::new(|| {
        Regex::new(r"^\s*(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:async\s+)?fn\s+(\w+)").unwrap()
    });
    let mut long = Vec::new();
    for source in sources() {
        let file = source.rel.to_string_lossy().replace('\\', "/");
        if file.ends_with("/tests.rs") || file.ends_with("/properties.rs") {
            continue;
        }
        let text = match source.text.find("#[cfg(test)]") {
            Some(i) => &source.text[..i],
            None => &source.text,
        };
        let lines: Vec<&str> = text.lines().collect();
        for (at, line) in lines.iter().enumerate() {
            let Some(name) = FN.captures(line).map(|c| c[1].to_owned()) else {
                continue;
            };
            let Some(length) = body_length(&lines[at..]) else {
                continue;
            };
            let above = lines[at.saturating_sub(4)..at].join("\n");
            if length > 80 && !above.contains("// Long:") {
                long.push(format!("{file}:{} `{name}` is {length} lines", at + 1));
            }
        }
    }
    assert!(
        long.is_empty(),
        "functions over 80 lines with no `// Long:` reason above them (split them, or say why not):\n{}",
        long.join("\n")
    );
}

/// How many lines a function starting at `lines[0]` spans, to its closing brace (`None` for a
/// declaration without a body).
fn body_length(lines: &[&str]) -> Option<usize> {
    let (mut depth, mut started) = (0usize, false);
    for (i, line) in lines.iter().enumerate() {
        let code = line.split("//").next().unwrap_or_default();
        let mut in_string = false;
        let mut previous = ' ';
        for c in code.chars() {
            match c {
                '"' if previous != '\\' => in_string = !in_string,
                '{' if !in_string => {
                    depth += 1;
                    started = true;
                }
                '}' if !in_string => depth = depth.saturating_sub(1),
                _ => {}
            }
            previous = c;
        }
        if started && depth == 0 {
            return Some(i + 1);
        }
        if !started && code.trim_end().ends_with(';') {
            return None;
        }
    }
    None
}
