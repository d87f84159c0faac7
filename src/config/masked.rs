//! A config file's text, or an error quoting a line of it, as it may be shown or logged: every
//! secret-looking value masked. Credentials are never written inline in an mcpmux config (they
//! are `…_env` or `…_file` references), but an upstream's `env` often is where people put an API
//! key (`mcpmux import` copies hosts' `env` tables as they are), a remote upstream's `headers`
//! may carry one (`X-Api-Key`), and a value under a key that names a secret
//! (`audit.secret_keys`: token, password, api_key…) may be one, and so may an upstream's `args`
//! (`["--api-key", "sk-…"]`, `"--token=…"`, `"API_KEY=…"`) or a URL's password
//! (`postgres://me:pw@host`). Those values become [`MASK`];
//! the rest of the text, its comments and its line numbers are kept, so a refused reload's
//! `file:line` still points at the right line. It reads the text line by line, not as TOML: a
//! file the daemon refused may not parse, and it must be masked all the same.

use super::SecretKeys;

/// What a masked value shows instead.
pub const MASK: &str = "••••••";

/// Tables whose every value is masked.
const MASKED_TABLES: [&str; 2] = ["env", "headers"];

/// `text` with the values of `env` and `headers` tables and of secret-looking keys masked.
pub fn masked(text: &str, keys: &SecretKeys) -> String {
    let mut out = String::with_capacity(text.len());
    let mut env_section = false;
    let mut args = Args::default();
    for line in text.split_inclusive('\n') {
        // A TOML error quotes the line it is about behind a gutter: `19 | env = { … }`.
        let (gutter, line) = match line.split_once(" | ") {
            Some((number, rest)) if number.trim().bytes().all(|b| b.is_ascii_digit()) => {
                line.split_at(line.len() - rest.len())
            }
            _ => ("", line),
        };
        out.push_str(gutter);
        let trimmed = line.trim_start();
        if trimmed.starts_with('[') {
            let table = last_segment(trimmed.trim_matches(|c| "[] \r\n".contains(c)));
            env_section = MASKED_TABLES.contains(&table);
            out.push_str(line);
            continue;
        }
        out.push_str(&mask_line(line, (env_section, &mut args), keys));
    }
    out
}

/// The last part of a dotted key, without quotes.
fn last_segment(key: &str) -> &str {
    let key = key.trim();
    let last = key.rsplit('.').next().unwrap_or(key);
    last.trim().trim_matches(|c| c == '"' || c == '\'')
}

/// Whether the value under `key` is to be masked: every value of an `env` or `headers` table, and a key that
/// names a secret unless it names where the secret is (`…_env`, `…_file`, `…_sha256`).
fn secret(key: &str, in_env: bool, keys: &SecretKeys) -> bool {
    let reference = ["_env", "_file", "_sha256"]
        .iter()
        .any(|end| key.to_ascii_lowercase().ends_with(end));
    in_env || (!reference && keys.matcher().is_match(key))
}

/// Where the scan is in an `args = [ … ]` array (which may span lines).
#[derive(Default)]
struct Args {
    open: bool,
    /// The item before named a secret (`--token`): this one is its value.
    value_next: bool,
}

/// Whether a command-line flag or variable name (`--api-key`, `API_KEY`) names a secret, and
/// not where one is (`--token-file`).
fn names_secret(name: &str, keys: &SecretKeys) -> bool {
    let name = name.trim_start_matches('-').replace('-', "_");
    !name.is_empty() && secret(&name, false, keys)
}

/// One string item of `args` (quotes included), its secret masked: the value after a flag that
/// names a secret, the part after `=` of `--token=…` or `API_KEY=…`, a URL's password.
fn mask_arg(item: &str, args: &mut Args, keys: &SecretKeys) -> String {
    let quote = &item[..1];
    let inner = item
        .strip_prefix(quote)
        .map(|i| i.strip_suffix(quote).unwrap_or(i))
        .unwrap_or(item);
    if std::mem::take(&mut args.value_next) {
        return [quote, MASK, quote].concat();
    }
    if let Some((name, _)) = inner.split_once('=') {
        if names_secret(name, keys) {
            return [quote, name, "=", MASK, quote].concat();
        }
    } else if inner.starts_with('-') && names_secret(inner, keys) {
        args.value_next = true;
    }
    mask_url_password(item)
}

/// A string holding a URL with a password (`scheme://user:password@host`): the password masked.
fn mask_url_password(text: &str) -> String {
    let masked = (|| {
        let start = text.find("://")? + 3;
        let authority = &text[start..];
        let authority = &authority[..authority
            .find(['/', '"', '\'', ' '])
            .unwrap_or(authority.len())];
        let at = authority.rfind('@')?;
        let colon = authority[..at].find(':')?;
        let (from, to) = (start + colon + 1, start + at);
        Some([&text[..from], MASK, &text[to..]].concat())
    })();
    masked.unwrap_or_else(|| text.to_owned())
}

/// One line, its `key = "value"` pairs (bare or in an inline table) masked where [`secret`] says,
/// and the items of an `args` array where [`mask_arg`] does.
fn mask_line(line: &str, (env_section, args): (bool, &mut Args), keys: &SecretKeys) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    // Inside `env = { … }` on this line.
    let mut inline_env = false;
    while let Some(eq) = rest.find(['=', '#', '"', '\'', '}', ']']) {
        let (before, from) = rest.split_at(eq);
        out.push_str(before);
        let c = from.chars().next().unwrap_or_default();
        match c {
            '#' => {
                out.push_str(from);
                return out;
            }
            '}' => {
                inline_env = false;
                out.push('}');
                rest = &from[1..];
            }
            ']' => {
                args.open = false;
                out.push(']');
                rest = &from[1..];
            }
            // A string that is not a value (an array's item, a quoted key): copied as it is,
            // but for a secret in it.
            '"' | '\'' => {
                let end = string_end(from).unwrap_or(from.len());
                match args.open {
                    true => out.push_str(&mask_arg(&from[..end], args, keys)),
                    false => out.push_str(&mask_url_password(&from[..end])),
                }
                rest = &from[end..];
            }
            _ => {
                let path = before.rsplit([',', '{']).next().unwrap_or(before);
                let key = last_segment(path);
                // A dotted key into such a table: `env.DATABASE_URL = "…"`.
                let dotted = (path.split('.').rev().skip(1))
                    .any(|part| MASKED_TABLES.contains(&part.trim().trim_matches('"')));
                let value = &from[1..];
                let gap = value.len() - value.trim_start().len();
                out.push('=');
                out.push_str(&value[..gap]);
                let value = &value[gap..];
                if value.starts_with('{') && MASKED_TABLES.contains(&key) {
                    inline_env = true;
                    out.push('{');
                    rest = &value[1..];
                } else if value.starts_with('[') && key == "args" {
                    *args = Args {
                        open: true,
                        value_next: false,
                    };
                    out.push('[');
                    rest = &value[1..];
                } else if (value.starts_with('"') || value.starts_with('\''))
                    && !value.starts_with("\"\"\"")
                    && !value.starts_with("'''")
                    && secret(key, env_section || inline_env || dotted, keys)
                {
                    // An unclosed string (a file that does not parse) ends with its line.
                    let unclosed = value.trim_end_matches(['\n', '\r']).len();
                    let end = string_end(value).unwrap_or(unclosed);
                    let quote = &value[..1];
                    out.push_str(quote);
                    out.push_str(MASK);
                    out.push_str(quote);
                    rest = &value[end..];
                } else {
                    rest = value;
                }
            }
        }
    }
    out.push_str(rest);
    out
}

/// Where the string that `text` starts with ends (after its closing quote); `"` strings have
/// backslash escapes, `'` strings none.
fn string_end(text: &str) -> Option<usize> {
    let quote = text.chars().next()?;
    let mut escaped = false;
    for (i, c) in text.char_indices().skip(1) {
        match c {
            '\\' if quote == '"' && !escaped => escaped = true,
            c if c == quote && !escaped => return Some(i + 1),
            _ => escaped = false,
        }
    }
    None
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn mask(text: &str) -> String {
        masked(text, &SecretKeys::defaults().unwrap())
    }

    #[test]
    fn env_values_and_secret_keys_are_masked_and_the_lines_kept() {
        let text = "[upstreams.github]\n\
            command = \"npx\"\n\
            args = [\"-y\", \"server-github\"]   # token = \"in a comment\"\n\
            env = { GITHUB_PERSONAL_ACCESS_TOKEN = \"ghp_abc\", DEBUG = \"1\" }\n\
            bearer_token_env = \"GITHUB_TOKEN\"\n\
            env.DATABASE_URL = \"postgres://inline\"\n\
            \n\
            [upstreams.db.env]\n\
            DATABASE_URL = 'postgres://me:pw@host/db'\n\
            \n\
            [upstreams.remote]\n\
            headers = { X-Api-Key = \"xk-1\" }\n\
            \n\
            [hosts.cursor]\n\
            api_key = \"k\\\"ey\" # inline\n\
            profile = \"dev\"\n";
        let shown = mask(text);
        assert_eq!(shown.lines().count(), text.lines().count());
        for secret in ["ghp_abc", "postgres://", "k\\\"ey", "xk-1"] {
            assert!(!shown.contains(secret), "{secret} shown:\n{shown}");
        }
        let lines: Vec<&str> = shown.lines().collect();
        assert_eq!(
            lines[3],
            "env = { GITHUB_PERSONAL_ACCESS_TOKEN = \"••••••\", DEBUG = \"••••••\" }"
        );
        assert_eq!(lines[5], "env.DATABASE_URL = \"••••••\"");
        assert_eq!(lines[8], "DATABASE_URL = '••••••'");
        assert_eq!(lines[11], "headers = { X-Api-Key = \"••••••\" }");
        assert_eq!(lines[14], "api_key = \"••••••\" # inline");
        // Kept: what is not a secret, a reference to one, and comments.
        assert_eq!(lines[1], "command = \"npx\"");
        assert!(lines[2].ends_with("# token = \"in a comment\""));
        assert_eq!(lines[4], "bearer_token_env = \"GITHUB_TOKEN\"");
        assert_eq!(lines[15], "profile = \"dev\"");
    }

    #[test]
    fn secrets_in_args_and_url_passwords_are_masked() {
        let text = "[upstreams.a]\n\
            args = [\"-y\", \"server-x\", \"--api-key\", \"sk-live-1\", \"--token=tk-2\",\n\
            \"GITHUB_TOKEN=gh-3\", \"--token-file\", \"/run/tok\", \"--verbose\"]\n\
            [upstreams.b]\n\
            args = ['--db', 'postgres://me:pw-4@db/x']\n\
            url = \"https://user:pw-5@example.com/mcp\"\n\
            allowed = [\"--password\"]\n\
            other = \"plain\"\n";
        let shown = mask(text);
        assert_eq!(shown.lines().count(), text.lines().count());
        for secret in ["sk-live-1", "tk-2", "gh-3", "pw-4", "pw-5"] {
            assert!(!shown.contains(secret), "{secret} shown:\n{shown}");
        }
        let lines: Vec<&str> = shown.lines().collect();
        assert_eq!(
            lines[1],
            "args = [\"-y\", \"server-x\", \"--api-key\", \"••••••\", \"--token=••••••\","
        );
        // The array goes on on the next line; a reference to a secret file is kept.
        assert_eq!(
            lines[2],
            "\"GITHUB_TOKEN=••••••\", \"--token-file\", \"/run/tok\", \"--verbose\"]"
        );
        assert_eq!(lines[4], "args = ['--db', 'postgres://me:••••••@db/x']");
        assert_eq!(lines[5], "url = \"https://user:••••••@example.com/mcp\"");
        assert_eq!(
            lines[6], "allowed = [\"--password\"]",
            "only args take values"
        );
        assert_eq!(lines[7], "other = \"plain\"");
    }

    #[test]
    fn a_toml_error_quoting_a_secret_is_masked() {
        let error = "mcpmux.toml: TOML parse error at line 3, column 5\n  |\n3 | env = { KEY = \"sk-2\" \n  |     ^\n";
        let shown = mask(error);
        assert!(!shown.contains("sk-2"), "{shown}");
        assert!(shown.contains("3 | env = { KEY = \"••••••\" "), "{shown}");
    }

    #[test]
    fn a_file_that_does_not_parse_is_masked_all_the_same() {
        let shown = mask("[upstreams.x]\ncommand = 5\nenv = { KEY = \"sk-1\"\npassword = \"pw\n");
        assert!(
            !shown.contains("sk-1") && !shown.contains("\"pw"),
            "{shown}"
        );
        assert!(shown.contains("command = 5"));
    }
}
