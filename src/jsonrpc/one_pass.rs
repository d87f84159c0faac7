//! A request read in one pass with its params: the params are read where they lie by a type of
//! the caller's (a stateless request's envelope and members), and their text is told from where
//! the members around them begin and end — not scanned a second time, as a `RawValue` read first
//! and parsed after would be.
//!
//! It reads only what it can read exactly: a request whose member names hold no escapes, each
//! named once. Anything else (another message, a malformed one, an escaped name) is `None`, and
//! [`Incoming::parse`](super::Incoming::parse) reads it and names what is wrong with it.

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{DeserializeSeed, Error as _, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use super::Key;
use super::message::valid_id;

/// A request and its params, as one pass read them.
#[derive(Debug)]
pub struct OnePass<'a, P> {
    pub id: &'a RawValue,
    pub method: Cow<'a, str>,
    /// The params as `P` read them, with their text.
    pub params: Option<(P, &'a str)>,
}

impl<'a, P: Deserialize<'a>> OnePass<'a, P> {
    /// `text` as a JSON-RPC request whose params `P` reads in the same pass; `None` when it is
    /// not one, or not one this pass can read exactly (see the module's note).
    pub fn request(text: &'a str) -> Option<Self> {
        let mut deserializer = serde_json::Deserializer::from_str(text);
        let read = Seed(text, PhantomData)
            .deserialize(&mut deserializer)
            .ok()?;
        deserializer.end().ok()?;
        let request = read?;
        match request.params {
            Some((_, text)) if !(text.starts_with('{') && text.ends_with('}')) => None,
            _ => Some(request),
        }
    }
}

/// The text the pass reads, which the params' text is cut from.
struct Seed<'a, P>(&'a str, PhantomData<P>);

impl<'a, P: Deserialize<'a>> DeserializeSeed<'a> for Seed<'a, P> {
    type Value = Option<OnePass<'a, P>>;

    fn deserialize<D: Deserializer<'a>>(self, deserializer: D) -> Result<Self::Value, D::Error> {
        deserializer.deserialize_map(self)
    }
}

impl<'a, P: Deserialize<'a>> Visitor<'a> for Seed<'a, P> {
    type Value = Option<OnePass<'a, P>>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON-RPC request")
    }

    fn visit_map<A: MapAccess<'a>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let text = self.0;
        let not_read = || A::Error::custom("not read in one pass");
        let (mut jsonrpc, mut id, mut method) = (None::<Cow<'a, str>>, None, None);
        let mut params: Option<(P, usize)> = None;
        // Where the params end, once what follows them is read.
        let mut params_end = None;
        while let Some(Key(key)) = map.next_key()? {
            if let (Some((_, start)), None) = (&params, params_end) {
                // The member after the params: they end before its name.
                let Cow::Borrowed(name) = &key else {
                    return Err(not_read());
                };
                params_end = Some(end_before_name(text, name, *start).ok_or_else(not_read)?);
            }
            match &*key {
                "jsonrpc" if jsonrpc.is_none() => jsonrpc = Some(map.next_value::<Key<'a>>()?.0),
                "id" if id.is_none() => id = Some(map.next_value::<&'a RawValue>()?),
                "method" if method.is_none() => method = Some(map.next_value::<Key<'a>>()?.0),
                "params" if params.is_none() => {
                    let Cow::Borrowed(name) = &key else {
                        return Err(not_read());
                    };
                    let start = start_after_name(text, name).ok_or_else(not_read)?;
                    params = Some((map.next_value()?, start));
                }
                // An answer, a repeated member: for the full parse to read, or refuse.
                "jsonrpc" | "id" | "method" | "params" | "result" | "error" => {
                    return Err(not_read());
                }
                _ => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let (Some(id), Some(method)) = (id, method) else {
            return Ok(None);
        };
        if jsonrpc.as_deref() != Some("2.0") || !valid_id(id) {
            return Ok(None);
        }
        let params = match params {
            Some((read, start)) => {
                // The params were the last member: they end before the object's `}`.
                let end = match params_end {
                    Some(end) => end,
                    None => last_end(text).ok_or_else(not_read)?,
                };
                let span = text.get(start..end).ok_or_else(not_read)?;
                Some((read, span))
            }
            None => None,
        };
        Ok(Some(OnePass { id, method, params }))
    }
}

/// JSON's whitespace between tokens.
const SPACE: [char; 4] = [' ', '\t', '\n', '\r'];

/// Where `name` — a member name borrowed from `text` — lies in it.
fn offset_in(text: &str, name: &str) -> Option<usize> {
    let at = (name.as_ptr() as usize).checked_sub(text.as_ptr() as usize)?;
    (at + name.len() <= text.len()).then_some(at)
}

/// Where the value of the member named `name` begins: past its closing quote and the colon.
fn start_after_name(text: &str, name: &str) -> Option<usize> {
    let after = offset_in(text, name)? + name.len();
    let rest = text.get(after..)?.strip_prefix('"')?;
    let rest = rest.trim_start_matches(SPACE).strip_prefix(':')?;
    let rest = rest.trim_start_matches(SPACE);
    Some(text.len() - rest.len())
}

/// Where the value before the member named `name` ends: before its opening quote and the comma
/// (and not before `start`, where that value began).
fn end_before_name(text: &str, name: &str, start: usize) -> Option<usize> {
    let quote = offset_in(text, name)?.checked_sub(1)?;
    let before = text.get(..quote)?;
    let before = before.trim_end_matches(SPACE).strip_suffix(',')?;
    let end = before.trim_end_matches(SPACE).len();
    (end > start).then_some(end)
}

/// Where the last member's value ends: before the closing `}` of the object that is `text`.
fn last_end(text: &str) -> Option<usize> {
    let inside = text.trim_end_matches(SPACE).strip_suffix('}')?;
    Some(inside.trim_end_matches(SPACE).len())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::jsonrpc::{Incoming, Members, Message};

    type Read<'a> = OnePass<'a, Members<'a>>;

    /// What the full parse finds: id, method and the params' text.
    fn full(text: &str) -> Option<(String, String, Option<String>)> {
        match Incoming::parse(text).ok()? {
            Message::Request { id, method, params } => Some((
                id.get().to_owned(),
                method.into_owned(),
                params.map(|p| p.get().to_owned()),
            )),
            _ => None,
        }
    }

    fn one(text: &str) -> Option<(String, String, Option<String>)> {
        let read = Read::request(text)?;
        Some((
            read.id.get().to_owned(),
            read.method.into_owned(),
            read.params.map(|(_, text)| text.to_owned()),
        ))
    }

    #[test]
    fn the_params_text_is_what_the_full_parse_finds() {
        let bodies = [
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a","arguments":{"x":[1,{"y":"}"}]}}}"#,
            r#"{"params":{"name":"a"},"jsonrpc":"2.0","id":"x","method":"tools/list"}"#,
            r#" { "jsonrpc" : "2.0" , "params" :	{ "a" : 1 }
               , "id" : 2 , "method" : "m" }  "#,
            r#"{"jsonrpc":"2.0","id":3,"method":"m","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"m","params":{ } , "x":1}"#,
            r#"{"jsonrpc":"2.0","id":4,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":5,"method":"m","params":{"k":"\"},"},"extra":[]}"#,
        ];
        for body in bodies {
            assert_eq!(one(body), full(body), "{body}");
            assert!(one(body).is_some(), "read in one pass: {body}");
        }
    }

    #[test]
    fn members_in_any_order_and_spacing_are_read_as_the_full_parse_reads_them() {
        let members = [
            r#""jsonrpc":"2.0""#,
            r#""id":"a""#,
            r#""method":"tools/call""#,
            r#""params":{"name":"x","_meta":{"k":[{},"]"]}}"#,
            r#""other":{"params":1}"#,
        ];
        for space in ["", " ", "\n\t ", "\r\n"] {
            for first in 0..members.len() {
                for second in 0..members.len() {
                    if first == second {
                        continue;
                    }
                    // Every member once: `first` and `second` in front, the rest in order.
                    let mut order = vec![first, second];
                    order.extend((0..members.len()).filter(|i| *i != first && *i != second));
                    let listed: Vec<String> = (order.iter())
                        .map(|&i| members[i].replacen(':', &format!("{space}:{space}"), 1))
                        .collect();
                    let body = format!(
                        "{space}{{{space}{}{space}}}{space}",
                        listed.join(&format!("{space},{space}"))
                    );
                    assert_eq!(one(&body), full(&body), "{body:?}");
                    assert!(one(&body).is_some(), "{body:?}");
                }
            }
        }
    }

    #[test]
    fn what_one_pass_cannot_read_exactly_is_left_to_the_full_parse() {
        let bodies = [
            // Not requests.
            r#"{"jsonrpc":"2.0","method":"notifications/x","params":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"result":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"m","error":null}"#,
            r#"{"jsonrpc":"1.0","id":1,"method":"m"}"#,
            r#"{"jsonrpc":"2.0","id":null,"method":"m"}"#,
            r#"[{"jsonrpc":"2.0","id":1,"method":"m"}]"#,
            // Malformed, repeated, escaped names, params not an object.
            r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{}} x"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{},"params":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"m","par\u0061ms":{}}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"m","params":{},"\u0078":1}"#,
            r#"{"jsonrpc":"2.0","id":1,"method":"m","params":[1]}"#,
        ];
        for body in bodies {
            assert!(one(body).is_none(), "{body}");
        }
        // Escaped names before the params do not matter: only the params' own and the next.
        let body = r#"{"\u006aapi":0,"jsonrpc":"2.0","id":1,"method":"m","params":{"a":1}}"#;
        assert_eq!(one(body), full(body));
    }

    #[test]
    fn the_params_are_read_in_the_same_pass() {
        let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"a__echo","arguments":{"x":1}}}"#;
        let read = Read::request(body).unwrap();
        let (members, text) = read.params.unwrap();
        assert_eq!(members.string("name").as_deref(), Some("a__echo"));
        assert_eq!(members.get("arguments").unwrap().get(), r#"{"x":1}"#);
        assert_eq!(text, r#"{"name":"a__echo","arguments":{"x":1}}"#);
    }
}
