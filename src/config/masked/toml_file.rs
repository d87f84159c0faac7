//! A TOML file masked from its parse: `toml_edit` (the parser `toml` itself uses) says where each
//! value is written, whatever the way its key was written (`headers."X-Api-Key"`, a dotted key, a
//! `[… .env]` table, an inline table) or its string (basic, literal, multi-line, escaped). The
//! walk keeps its own stack rather than recursing: dotted table headers nest without a bound.

use toml_edit::{ImDocument, Item, Value};

use super::{ArgScan, Edit, MASK, Scope, Shown, masked_literal, open_string};
use crate::config::SecretKeys;

/// A value of the document still to look at.
#[derive(Debug, Clone, Copy)]
enum Node<'a> {
    Item(&'a Item),
    Value(&'a Value),
}

/// The edits that mask `text`, a TOML document; `None` when it does not parse, or a value to
/// mask has no place in it.
pub(super) fn edits(text: &str, keys: &SecretKeys) -> Option<Vec<Edit>> {
    let document = ImDocument::parse(text).ok()?;
    let mut walk = Walk {
        text,
        keys,
        edits: Vec::new(),
        stack: vec![(Node::Item(document.as_item()), Scope::Open)],
    };
    while let Some((node, scope)) = walk.stack.pop() {
        walk.node(node, scope)?;
    }
    Some(walk.edits)
}

/// The walk over a document: what is left to look at, and the edits so far.
struct Walk<'a> {
    text: &'a str,
    keys: &'a SecretKeys,
    edits: Vec<Edit>,
    stack: Vec<(Node<'a>, Scope)>,
}

impl<'a> Walk<'a> {
    /// Looks at one value: a scalar is masked (or not) now, a table's or array's members later.
    fn node(&mut self, node: Node<'a>, scope: Scope) -> Option<()> {
        match node {
            Node::Item(Item::None) => {}
            Node::Item(Item::Value(value)) | Node::Value(value) => self.value(value, scope)?,
            Node::Item(Item::Table(table)) => {
                for (key, item) in table.iter() {
                    self.member(key, Node::Item(item), scope)?;
                }
            }
            Node::Item(Item::ArrayOfTables(tables)) => {
                for table in tables.iter() {
                    for (key, item) in table.iter() {
                        self.member(key, Node::Item(item), scope)?;
                    }
                }
            }
        }
        Some(())
    }

    /// A table's member `key`: an `args` array is read item after item, the rest in its scope.
    fn member(&mut self, key: &str, node: Node<'a>, scope: Scope) -> Option<()> {
        let scope = scope.of(key, self.keys);
        let array = match node {
            Node::Item(Item::Value(Value::Array(array))) | Node::Value(Value::Array(array)) => {
                Some(array)
            }
            _ => None,
        };
        match array {
            Some(args) if key == "args" && scope == Scope::Open => {
                let mut scan = ArgScan::default();
                for item in args.iter() {
                    match item {
                        Value::String(arg) => {
                            let shown = scan.next(arg.value(), self.keys);
                            self.string(item.span(), shown)?;
                        }
                        other => self.stack.push((Node::Value(other), scope)),
                    }
                }
            }
            _ => self.stack.push((node, scope)),
        }
        Some(())
    }

    fn value(&mut self, value: &'a Value, scope: Scope) -> Option<()> {
        match value {
            Value::String(string) => {
                let shown = match scope {
                    Scope::Secret => Shown::Masked,
                    Scope::Open => open_string(string.value()),
                };
                self.string(value.span(), shown)?;
            }
            Value::Array(array) => {
                let items = array.iter().map(|v| (Node::Value(v), scope));
                self.stack.extend(items);
            }
            Value::InlineTable(table) => {
                for (key, value) in table.iter() {
                    self.member(key, Node::Value(value), scope)?;
                }
            }
            // A number, a boolean or a date in a secret table is masked all the same.
            Value::Integer(_) | Value::Float(_) | Value::Boolean(_) | Value::Datetime(_) => {
                if scope == Scope::Secret {
                    let span = value.span()?;
                    let with = format!("\"{MASK}\"");
                    self.edits.push(Edit { span, with });
                }
            }
        }
        Some(())
    }

    /// The string literal at `span` shown as `shown` says: masked whole, or as a basic string of
    /// the masked text when it is written on one line (else masked whole, its lines kept).
    fn string(&mut self, span: Option<std::ops::Range<usize>>, shown: Shown) -> Option<()> {
        let text = match shown {
            Shown::As => return Some(()),
            Shown::Masked => None,
            Shown::Text(text) => Some(text),
        };
        let span = span?;
        let raw = self.text.get(span.clone())?;
        let with = match text {
            Some(text) if !raw.contains(['\n', '\r']) => one_line_string(raw, &text),
            _ => masked_literal(raw),
        };
        self.edits.push(Edit { span, with });
        Some(())
    }
}

/// `text` as a TOML string on one line, in the quotes of `raw` (the literal it replaces) when
/// those can hold it.
fn one_line_string(raw: &str, text: &str) -> String {
    let literal = raw.starts_with('\'') && !raw.starts_with("'''");
    match literal && !text.contains(|c: char| c == '\'' || c.is_control()) {
        true => format!("'{text}'"),
        false => basic_string(text),
    }
}

/// `text` as a TOML basic string, on one line.
fn basic_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}
