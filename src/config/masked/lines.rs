//! TOML that does not parse — a file the daemon refused, or an error quoting a line of one behind
//! a `19 | ` gutter — masked line by line as TOML is written, more bluntly than from a parse: a
//! string under a masked key or table (`env`, `headers`, a secret key; however its key is quoted
//! or dotted, in an inline table or an array) is masked, a multi-line string that goes on past its
//! line is masked whole, `args` items and URLs as everywhere. An unclosed string ends with its
//! line. What it reads of a line is kept between lines (a table, an open array or string).

use super::{ArgScan, MASK, MASKED_TABLES, Shown, mask_url, masked_literal, secret_key};
use crate::config::SecretKeys;

/// `text` (TOML, or an error quoting lines of it) with its secrets masked, line by line.
pub(super) fn masked(text: &str, keys: &SecretKeys) -> String {
    let mut out = String::with_capacity(text.len());
    let mut scan = Scan {
        keys,
        section: false,
        nest: 0,
        masked_from: None,
        args: None,
        open: None,
    };
    for line in text.split_inclusive('\n') {
        let (gutter, line) = split_gutter(line);
        out.push_str(gutter);
        scan.line(line, &mut out);
    }
    out
}

/// A line as an error quotes it (`19 | env = { … }`): its gutter, then the line.
fn split_gutter(line: &str) -> (&str, &str) {
    match line.split_once(" | ") {
        Some((number, rest)) if number.trim().bytes().all(|b| b.is_ascii_digit()) => {
            line.split_at(line.len() - rest.len())
        }
        _ => ("", line),
    }
}

/// What the scan knows of where it is.
struct Scan<'k> {
    keys: &'k SecretKeys,
    /// Under a table header that names a masked table or a secret (`[upstreams.a.env]`).
    section: bool,
    /// How many arrays and inline tables are open.
    nest: usize,
    /// The nesting at which a masked inline table or array was opened (`env = {`), while open.
    masked_from: Option<usize>,
    /// In an `args = [ … ]` array (which may span lines): its nesting, and its items so far.
    args: Option<(usize, ArgScan)>,
    /// In a multi-line string begun on a line before: its closing delimiter.
    open: Option<&'static str>,
}

impl Scan<'_> {
    /// Whether a string here is masked whole.
    fn masking(&self) -> bool {
        self.section || self.masked_from.is_some()
    }

    fn line(&mut self, line: &str, out: &mut String) {
        let mut rest = line;
        if let Some(delimiter) = self.open {
            match closing(line, delimiter) {
                Some(end) => {
                    self.open = None;
                    out.push_str(delimiter);
                    rest = &line[end..];
                }
                // A line inside it: masked, and still a line (the last one of the text too).
                None => {
                    let content = line.trim_end_matches(['\n', '\r']);
                    if !content.is_empty() {
                        out.push_str(MASK);
                    }
                    return out.push_str(&line[content.len()..]);
                }
            }
        } else if is_header(line) {
            return self.header(line, out);
        }
        self.rest_of_line(rest, out);
    }

    /// A table header: whether its values are masked.
    fn header(&mut self, line: &str, out: &mut String) {
        let path = key_path(line.trim_start().trim_start_matches('['));
        self.section = path
            .iter()
            .any(|part| MASKED_TABLES.contains(&part.as_str()))
            || path.last().is_some_and(|last| secret_key(last, self.keys));
        // A header ends whatever a broken line before left open.
        (self.nest, self.masked_from, self.args) = (0, None, None);
        out.push_str(line);
    }

    /// What is left of a line: its keys, values, strings and brackets, up to a comment.
    fn rest_of_line(&mut self, mut rest: &str, out: &mut String) {
        // Where in `out` the key being written began (after a line start, `{` or `,`).
        let mut key_start = out.len();
        while let Some(at) = rest.find(['=', '#', '"', '\'', '{', '}', '[', ']', ',']) {
            out.push_str(&rest[..at]);
            let from = &rest[at..];
            rest = match from.as_bytes()[0] {
                b'#' => return out.push_str(from),
                b'"' | b'\'' => match self.string(from, out) {
                    Some(after) => after,
                    None => return,
                },
                b'=' => {
                    let key = out[key_start..].to_owned();
                    let after = self.value(&key, &from[1..], out);
                    // What follows a `=` is a value: no key until a `,` or `{`.
                    key_start = out.len();
                    after
                }
                c => {
                    self.bracket(c);
                    out.push(char::from(c));
                    key_start = out.len();
                    &from[1..]
                }
            };
        }
        out.push_str(rest);
    }

    /// An opening or closing bracket or brace (or a comma, which changes nothing here).
    fn bracket(&mut self, c: u8) {
        match c {
            b'{' | b'[' => self.nest += 1,
            b'}' | b']' => {
                self.nest = self.nest.saturating_sub(1);
                if self.masked_from.is_some_and(|from| from >= self.nest) {
                    self.masked_from = None;
                }
                if self
                    .args
                    .as_ref()
                    .is_some_and(|(from, _)| *from >= self.nest)
                {
                    self.args = None;
                }
            }
            _ => {}
        }
    }

    /// After the `=` of `key`: masks the value when the key says so, opens a masked table or
    /// array or `args`. Returns what is left of the line.
    fn value<'l>(&mut self, key: &str, value: &'l str, out: &mut String) -> &'l str {
        let path = key_path(key);
        let last = path.last().map_or("", String::as_str);
        let masked = self.masking()
            || path
                .iter()
                .any(|part| MASKED_TABLES.contains(&part.as_str()))
            || secret_key(last, self.keys);
        let gap = value.len() - value.trim_start().len();
        out.push('=');
        out.push_str(&value[..gap]);
        let value = &value[gap..];
        match value.as_bytes().first() {
            Some(b'{' | b'[') if masked => {
                self.masked_from.get_or_insert(self.nest);
            }
            Some(b'[') if last == "args" => self.args = Some((self.nest, ArgScan::default())),
            Some(b'"' | b'\'') if masked => {
                let end = literal_end(value);
                let raw = &value[..end.unwrap_or(value.len())];
                if end.is_none() && delimiter(raw.get(..3).unwrap_or_default()).is_some() {
                    self.open = delimiter(&raw[..3]);
                    out.push_str(&raw[..3]);
                    out.push_str(MASK);
                    return line_break(value);
                }
                let unclosed = value.trim_end_matches(['\n', '\r']).len();
                let raw = &value[..end.unwrap_or(unclosed)];
                out.push_str(&masked_literal(raw));
                return &value[raw.len()..];
            }
            _ => {}
        }
        value
    }

    /// A string starting `from`: a key (followed by `.` or `=`) kept, an `args` item or a value
    /// in a masked table masked, any other with its URL masked. `None` when it goes on past the
    /// line (then it is masked whole and the line is done); else what is left of the line.
    fn string<'l>(&mut self, from: &'l str, out: &mut String) -> Option<&'l str> {
        let Some(end) = literal_end(from) else {
            if delimiter(from.get(..3).unwrap_or_default()).is_some() {
                self.open = delimiter(&from[..3]);
                out.push_str(&from[..3]);
                out.push_str(MASK);
                out.push_str(line_break(from));
                return None;
            }
            let unclosed = from.trim_end_matches(['\n', '\r']).len();
            self.item(&from[..unclosed], out);
            return Some(&from[unclosed..]);
        };
        let raw = &from[..end];
        let is_key = from[end..].trim_start().starts_with(['.', '=']);
        match is_key {
            true => out.push_str(raw),
            false => self.item(raw, out),
        }
        Some(&from[end..])
    }

    /// A string value written `raw` (quotes included), shown as its place says.
    fn item(&mut self, raw: &str, out: &mut String) {
        let quote = if raw.starts_with("\"\"\"") || raw.starts_with("'''") {
            &raw[..3]
        } else {
            &raw[..1]
        };
        let inner = raw.strip_prefix(quote).unwrap_or(raw);
        let inner = inner.strip_suffix(quote).unwrap_or(inner);
        let masking = self.masking();
        let shown = match (&mut self.args, masking) {
            (_, true) => Shown::Masked,
            (Some((_, scan)), false) => scan.next(inner, self.keys),
            (None, false) => mask_url(inner).map_or(Shown::As, Shown::Text),
        };
        match shown {
            Shown::As => out.push_str(raw),
            Shown::Masked => out.push_str(&masked_literal(raw)),
            Shown::Text(text) => {
                out.push_str(quote);
                out.push_str(&text);
                out.push_str(quote);
            }
        }
    }
}

/// Whether `line` is a table header (`[a.b]`, `[[a]]`, a comment after it): a bracketed key
/// alone on its line. An array's item (`[1, 2],`) is not one; a header is taken for one even in
/// an array a broken line left open.
fn is_header(line: &str) -> bool {
    let line = line.trim();
    let Some(inner) = line.strip_prefix('[') else {
        return false;
    };
    let Some(close) = inner.find(']') else {
        return false;
    };
    let after = inner[close..].trim_start_matches(']').trim_start();
    let key = inner[..close].trim_start_matches('[');
    !key.trim().is_empty()
        && !key.contains([',', '='])
        && (after.is_empty() || after.starts_with('#'))
}

/// The `static` form of a multi-line string's delimiter.
fn delimiter(text: &str) -> Option<&'static str> {
    ["\"\"\"", "'''"].into_iter().find(|d| *d == text)
}

/// The line break that ends `text` (`\n`, `\r\n` or nothing).
fn line_break(text: &str) -> &str {
    &text[text.trim_end_matches(['\n', '\r']).len()..]
}

/// Where the string literal `text` starts with ends (after its closing delimiter) on this line;
/// `"` strings have backslash escapes, `'` strings none.
fn literal_end(text: &str) -> Option<usize> {
    if let Some(delimiter) = ["\"\"\"", "'''"].into_iter().find(|d| text.starts_with(d)) {
        return closing(&text[3..], delimiter).map(|end| end + 3);
    }
    let quote = text.chars().next()?;
    let mut escaped = false;
    for (i, c) in text.char_indices().skip(1) {
        match c {
            '\n' | '\r' => return None,
            '\\' if quote == '"' && !escaped => escaped = true,
            c if c == quote && !escaped => return Some(i + 1),
            _ => escaped = false,
        }
    }
    None
}

/// Where the closing `delimiter` of a multi-line string ends in `text` (after it); backslash
/// escapes in a `"""` string.
fn closing(text: &str, delimiter: &str) -> Option<usize> {
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        match c {
            '\\' if delimiter == "\"\"\"" && !escaped => escaped = true,
            _ if !escaped && text[i..].starts_with(delimiter) => return Some(i + 3),
            _ => escaped = false,
        }
    }
    None
}

/// The parts of a dotted key as written before its `=` (`headers."X-Api-Key"`, `env . A`),
/// unquoted; a table header's up to its `]`.
fn key_path(key: &str) -> Vec<String> {
    let mut parts = Vec::new();
    let mut part = String::new();
    let mut chars = key.chars();
    while let Some(c) = chars.next() {
        match c {
            '"' | '\'' => {
                for inner in chars.by_ref() {
                    if inner == c {
                        break;
                    }
                    part.push(inner);
                }
            }
            '.' => parts.push(std::mem::take(&mut part)),
            ']' | '=' => break,
            c if c.is_whitespace() => {}
            c => part.push(c),
        }
    }
    parts.push(part);
    parts
}

#[cfg(test)]
mod tests {
    use super::key_path;

    #[test]
    fn a_key_path_is_read_however_its_parts_are_quoted() {
        assert_eq!(key_path("headers.\"X.Api\" "), ["headers", "X.Api"]);
        assert_eq!(key_path(" 'env' . A "), ["env", "A"]);
        assert_eq!(
            key_path("upstreams.\"a b\".headers]  # x"),
            ["upstreams", "a b", "headers"]
        );
    }
}
