//! A config file's text, or an error quoting a line of it, as it may be shown or logged: every
//! secret-looking value masked. Credentials are never written inline in an mcpmux config (they
//! are `…_env` or `…_file` references), but an upstream's `env` often is where people put an API
//! key (`mcpmux import` copies hosts' `env` tables as they are, and an `mcpServers` JSON file is
//! served as it is), a remote upstream's `headers` may carry one (`X-Api-Key`), and so may a value
//! under a key that names a secret (`audit.secret_keys`: token, password, api_key…), an upstream's
//! `args` (`["--api-key", "sk-…"]`, `"--token=…"`, `"API_KEY=…"`, `["--header",
//! "Authorization: Bearer …"]`, `"X-Api-Key: …"`) and a URL (`https://user:pw@host`,
//! `?api_key=…`). Those values become [`MASK`] where they are written; the rest of the text, its
//! comments and its line breaks are kept, so a refused reload's `file:line` still points at the
//! right line.
//!
//! A file that parses is masked from its parse, so no way of writing a key or a string (a quoted
//! or dotted key, a multi-line string, an escape) hides a value: `toml_file` reads TOML with
//! `toml_edit` (which `toml` parses with) for where each value is written, `json_file` reads an
//! `mcpServers` JSON file with serde_json's raw values for the same. Text that does not parse — a
//! file the daemon refused, an error quoting a line of one — is masked line by line (`lines`),
//! more bluntly. What is a secret is decided here, once, for all three.

mod json_file;
mod lines;
mod toml_file;

#[cfg(test)]
mod properties;
#[cfg(test)]
mod tests;

use std::ops::Range;

use super::SecretKeys;

/// What a masked value shows instead.
pub const MASK: &str = "••••••";

/// Tables whose every value is masked, however deep.
const MASKED_TABLES: [&str; 2] = ["env", "headers"];

/// The flags whose next argument is an HTTP header (`mcp-remote --header`, `curl -H`).
const HEADER_FLAGS: [&str; 2] = ["--header", "-H"];

/// `text` with the values of `env` and `headers` tables, of secret-looking keys, of header and
/// secret arguments and of URLs' userinfo and query masked; its line breaks where they were.
pub fn masked(text: &str, keys: &SecretKeys) -> String {
    if json_file::looks_like_json(text) {
        json_file::edits(text, keys)
            .and_then(|edits| apply(text, edits))
            .unwrap_or_else(|| json_file::masked_unparsed(text))
    } else {
        toml_file::edits(text, keys)
            .and_then(|edits| apply(text, edits))
            .unwrap_or_else(|| lines::masked(text, keys))
    }
}

/// One value to replace: where it is written, and what is shown instead (with the same line
/// breaks).
#[derive(Debug)]
struct Edit {
    span: Range<usize>,
    with: String,
}

/// `text` with `edits` made; `None` when one of them is not a span of it (then the caller masks
/// the text without its parse rather than show what an edit missed).
fn apply(text: &str, mut edits: Vec<Edit>) -> Option<String> {
    edits.sort_by_key(|e| e.span.start);
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for edit in edits {
        let before = text.get(at..edit.span.start)?;
        text.get(edit.span.clone())?;
        out.push_str(before);
        out.push_str(&edit.with);
        at = edit.span.end;
    }
    out.push_str(text.get(at..)?);
    Some(out)
}

/// Where a value is: among values that are all masked (under `env`, `headers` or a secret key),
/// or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scope {
    Open,
    Secret,
}

impl Scope {
    /// The scope of the value under `key` in a table of this scope.
    fn of(self, key: &str, keys: &SecretKeys) -> Self {
        match self == Self::Secret || MASKED_TABLES.contains(&key) || secret_key(key, keys) {
            true => Self::Secret,
            false => Self::Open,
        }
    }
}

/// Whether `key` names a secret (`audit.secret_keys`), and not where one is (`…_env`, `…_file`,
/// `…_sha256`).
fn secret_key(key: &str, keys: &SecretKeys) -> bool {
    let key = key.to_ascii_lowercase();
    let reference = ["_env", "_file", "_sha256"]
        .iter()
        .any(|end| key.ends_with(end));
    !reference && keys.matcher().is_match(&key)
}

/// Whether a command-line flag or variable name (`--api-key`, `API_KEY`) names a secret, and
/// not where one is (`--token-file`).
fn names_secret(name: &str, keys: &SecretKeys) -> bool {
    let name = name.trim_start_matches('-').replace('-', "_");
    !name.is_empty() && secret_key(&name, keys)
}

/// How a string value is shown.
#[derive(Debug, PartialEq, Eq)]
enum Shown {
    /// As it is.
    As,
    /// All of it masked.
    Masked,
    /// This text instead (its secret parts masked).
    Text(String),
}

/// A string outside secret tables: with a URL's userinfo and query values masked.
fn open_string(value: &str) -> Shown {
    mask_url(value).map_or(Shown::As, Shown::Text)
}

/// What the items of an `args` array so far ask of the next one.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Pending {
    #[default]
    Nothing,
    /// The item before named a secret (`--token`): this one is its value.
    Secret,
    /// The item before was `--header` or `-H`: this one is a header.
    Header,
}

/// The items of an `args` array, one after the other.
#[derive(Debug, Default)]
struct ArgScan {
    pending: Pending,
}

impl ArgScan {
    /// How the next item, `arg`, is shown: the value after a flag that names a secret, the part
    /// after `=` of `--token=…` or `API_KEY=…`, a header's value (after `--header`/`-H`, or in an
    /// item shaped `Name: value`), a URL's userinfo and query values are masked.
    fn next(&mut self, arg: &str, keys: &SecretKeys) -> Shown {
        match std::mem::take(&mut self.pending) {
            Pending::Secret => return Shown::Masked,
            Pending::Header => return Shown::Text(header_masked(arg)),
            Pending::Nothing => {}
        }
        if HEADER_FLAGS.contains(&arg) {
            self.pending = Pending::Header;
            return Shown::As;
        }
        if header_value_at(arg).is_some() {
            return Shown::Text(header_masked(arg));
        }
        match arg.split_once('=') {
            Some((flag, header)) if HEADER_FLAGS.contains(&flag) => {
                Shown::Text(format!("{flag}={}", header_masked(header)))
            }
            // `postgres://me@db/x?password=…`: the `=` of a URL's query, which masks its own.
            Some((name, _)) if name.contains("://") => open_string(arg),
            Some((name, _)) if names_secret(name, keys) => Shown::Text(format!("{name}={MASK}")),
            None if arg.starts_with('-') && names_secret(arg, keys) => {
                self.pending = Pending::Secret;
                Shown::As
            }
            _ => open_string(arg),
        }
    }
}

/// Where the value of a header written `Name: value` starts (a token, a colon, a space or tab,
/// then something): `None` for anything else, such as `host:8080` or `https://…`.
fn header_value_at(arg: &str) -> Option<usize> {
    let colon = arg.find(':')?;
    let name_ok = colon > 0
        && arg[..colon]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+.^_`|~-".contains(&b));
    let after = &arg[colon + 1..];
    let value = after.trim_start_matches([' ', '\t']);
    (name_ok && value.len() < after.len() && !value.is_empty()).then(|| arg.len() - value.len())
}

/// A header argument with its value masked: `Authorization: ••••••`; all of it when it has no
/// `Name:` part.
fn header_masked(header: &str) -> String {
    match header.find(':') {
        Some(colon) => {
            let after = &header[colon + 1..];
            let gap = after.len() - after.trim_start_matches([' ', '\t']).len();
            format!("{}{MASK}", &header[..colon + 1 + gap])
        }
        None => MASK.to_owned(),
    }
}

/// `text` with the userinfo (`user:password@`) and the query values (`?api_key=…`) of every URL
/// in it masked; `None` when it holds none. One pass: each URL is read from where the one before
/// ended.
fn mask_url(text: &str) -> Option<String> {
    let mut out = String::new();
    let (mut copied, mut from) = (0, 0);
    let ends_url = |c: char| c.is_whitespace() || c == '"' || c == '\'';
    while let Some(found) = text[from..].find("://") {
        let authority = from + found + 3;
        let rest = &text[authority..];
        let authority_end = authority
            + rest
                .find(|c| "/?#".contains(c) || ends_url(c))
                .unwrap_or(rest.len());
        if let Some(at) = text[authority..authority_end].rfind('@') {
            out.push_str(&text[copied..authority]);
            out.push_str(MASK);
            copied = authority + at;
        } else if authority_end == text.len() && authority < authority_end {
            // Cut short inside its authority (a file being written, an error quoting part of
            // it): what is there may be the start of a userinfo.
            out.push_str(&text[copied..authority]);
            out.push_str(MASK);
            copied = authority_end;
        }
        let rest = &text[authority_end..];
        let url_end = authority_end + rest.find(ends_url).unwrap_or(rest.len());
        if let Some(question) = text[authority_end..url_end].find('?') {
            let query = authority_end + question + 1;
            let query_end = query + text[query..url_end].find('#').unwrap_or(url_end - query);
            out.push_str(&text[copied..query]);
            mask_query(&text[query..query_end], &mut out);
            copied = query_end;
        }
        from = url_end;
    }
    (copied > 0).then(|| out + &text[copied..])
}

/// A URL's query with each value masked (`api_key=••••••&region=••••••`); a part without `=`
/// may be a value too, and is masked whole.
fn mask_query(query: &str, out: &mut String) {
    for (i, part) in query.split('&').enumerate() {
        if i > 0 {
            out.push('&');
        }
        match part.split_once('=') {
            Some((name, _)) => {
                out.push_str(name);
                out.push('=');
                out.push_str(MASK);
            }
            None if part.is_empty() => {}
            None => out.push_str(MASK),
        }
    }
}

/// A masked string literal written `raw` (its quotes included): its opening delimiter, [`MASK`],
/// its line breaks, its closing delimiter — the lines after it keep their numbers.
fn masked_literal(raw: &str) -> String {
    let delimiter = ["\"\"\"", "'''", "\"", "'"]
        .into_iter()
        .find(|d| raw.starts_with(d))
        .unwrap_or("\"");
    let breaks: String = raw.chars().filter(|c| matches!(c, '\n' | '\r')).collect();
    format!("{delimiter}{MASK}{breaks}{delimiter}")
}
