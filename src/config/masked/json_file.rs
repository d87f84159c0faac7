//! An `mcpServers` JSON file (Claude Desktop's, Cursor's, VS Code's) masked from serde_json's own
//! parse: each value is read as a raw value borrowed from the text, so where it is written is
//! known, and an object's members are read in order with their duplicates (a map would keep only
//! the last `"env"` and show the first). Each level is read from its own text: the walk goes
//! [`MAX_DEPTH`] levels down (an `mcpServers` file has five), and masks every string value below
//! that, which keeps the work linear in the text.

use std::fmt;

use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use super::{ArgScan, Edit, MASK, Scope, Shown, open_string};
use crate::config::SecretKeys;

/// How many levels the walk reads member by member.
const MAX_DEPTH: usize = 16;

/// Whether `text` is to be read as JSON: as the loader decides it, from its first character.
pub(super) fn looks_like_json(text: &str) -> bool {
    text.trim_start().starts_with('{')
}

/// The edits that mask `text`, a JSON document; `None` when it does not parse.
pub(super) fn edits(text: &str, keys: &SecretKeys) -> Option<Vec<Edit>> {
    let root: &RawValue = serde_json::from_str(text).ok()?;
    let mut walk = Walk {
        text,
        keys,
        edits: Vec::new(),
        stack: vec![(root, Scope::Open, 0)],
    };
    while let Some((raw, scope, depth)) = walk.stack.pop() {
        walk.node(raw, scope, depth)?;
    }
    Some(walk.edits)
}

/// An object's members in the order written, duplicates kept, their values raw.
struct Members<'a>(Vec<(String, &'a RawValue)>);

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        /// Reads the members one by one.
        struct Each;
        impl<'de> Visitor<'de> for Each {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut members = Vec::new();
                while let Some(member) = map.next_entry::<String, &'de RawValue>()? {
                    members.push(member);
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(Each)
    }
}

/// The walk over a document: what is left to look at (with its depth), and the edits so far.
struct Walk<'a> {
    text: &'a str,
    keys: &'a SecretKeys,
    edits: Vec<Edit>,
    stack: Vec<(&'a RawValue, Scope, usize)>,
}

impl<'a> Walk<'a> {
    fn node(&mut self, raw: &'a RawValue, scope: Scope, depth: usize) -> Option<()> {
        let json = raw.get();
        if depth >= MAX_DEPTH {
            let start = self.start_of(json)?;
            self.edits.extend(string_values(json).map(|span| Edit {
                span: start + span.start..start + span.end,
                with: format!("\"{MASK}\""),
            }));
            return Some(());
        }
        match json.as_bytes().first()? {
            b'{' => {
                let Members(members) = serde_json::from_str(json).ok()?;
                for (key, value) in members {
                    self.member(&key, value, scope, depth + 1)?;
                }
            }
            b'[' => {
                let items: Vec<&RawValue> = serde_json::from_str(json).ok()?;
                self.stack
                    .extend(items.into_iter().map(|item| (item, scope, depth + 1)));
            }
            b'"' => {
                let shown = match scope {
                    Scope::Secret => Shown::Masked,
                    Scope::Open => open_string(&serde_json::from_str::<String>(json).ok()?),
                };
                self.show(json, shown)?;
            }
            // A number, a boolean or null in a secret table is masked all the same.
            _ if scope == Scope::Secret => self.show(json, Shown::Masked)?,
            _ => {}
        }
        Some(())
    }

    /// An object's member `key`: an `args` array is read item after item, the rest in its scope.
    fn member(&mut self, key: &str, value: &'a RawValue, scope: Scope, depth: usize) -> Option<()> {
        let scope = scope.of(key, self.keys);
        if key != "args" || scope == Scope::Secret || !value.get().starts_with('[') {
            self.stack.push((value, scope, depth));
            return Some(());
        }
        let items: Vec<&RawValue> = serde_json::from_str(value.get()).ok()?;
        let mut scan = ArgScan::default();
        for item in items {
            match serde_json::from_str::<String>(item.get()) {
                Ok(arg) => {
                    let shown = scan.next(&arg, self.keys);
                    self.show(item.get(), shown)?;
                }
                Err(_) => self.stack.push((item, scope, depth + 1)),
            }
        }
        Some(())
    }

    /// The value written `json` (a slice of the text) shown as `shown` says.
    fn show(&mut self, json: &str, shown: Shown) -> Option<()> {
        let with = match shown {
            Shown::As => return Some(()),
            Shown::Masked => format!("\"{MASK}\""),
            Shown::Text(text) => serde_json::to_string(&text).ok()?,
        };
        let start = self.start_of(json)?;
        let span = start..start + json.len();
        self.edits.push(Edit { span, with });
        Some(())
    }

    /// Where `json`, a slice of the walk's text, starts in it.
    fn start_of(&self, json: &str) -> Option<usize> {
        let start = (json.as_ptr() as usize).checked_sub(self.text.as_ptr() as usize)?;
        (start.checked_add(json.len())? <= self.text.len()).then_some(start)
    }
}

/// A JSON-looking text that does not parse (an edited file the daemon refused): every string
/// that is not a member's name masked, its lines kept. A string ends at its closing quote or at
/// the end of its line.
pub(super) fn masked_unparsed(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for span in string_values(text) {
        out.push_str(&text[at..span.start]);
        out.push('"');
        out.push_str(MASK);
        out.push('"');
        at = span.end;
    }
    out.push_str(&text[at..]);
    out
}

/// The spans of the strings in `json` that are values, not members' names (those are followed by
/// `:`), in order. A string ends at its closing quote or at the end of its line.
fn string_values(json: &str) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
    let bytes = json.as_bytes();
    let mut at = 0;
    std::iter::from_fn(move || {
        loop {
            let start = at + memchr::memchr(b'"', bytes.get(at..)?)?;
            let end = string_end(bytes, start);
            at = end;
            let next = bytes[end..].iter().find(|b| !b.is_ascii_whitespace());
            if next != Some(&b':') {
                return Some(start..end);
            }
        }
    })
}

/// Where the string starting at `start` (a `"`) ends: after its closing quote, or at the end of
/// its line (before the line break) when it has none.
fn string_end(bytes: &[u8], start: usize) -> usize {
    let mut escaped = false;
    for (i, &b) in bytes.iter().enumerate().skip(start + 1) {
        match b {
            b'\n' | b'\r' => return i,
            b'"' if !escaped => return i + 1,
            b'\\' => escaped = !escaped,
            _ => escaped = false,
        }
    }
    bytes.len()
}
