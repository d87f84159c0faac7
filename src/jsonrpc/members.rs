//! The top-level members of a raw JSON object, values left raw: the one primitive behind "rewrite
//! only what mcpmux owns" (DESIGN rule 2). A member is read or replaced; every other member, and
//! the order of all of them, is written back as it came.
//!
//! It is on every forwarded request's path, so it borrows what it can: the values always, the
//! keys unless they hold escapes. A few members (a request's params have a handful) are kept in a
//! list and found by comparing keys; more are indexed by a fast, randomly seeded hash, so an
//! object of thousands of members costs no more per member than a small one.

use std::borrow::Cow;
use std::fmt;

use indexmap::IndexMap;
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use super::RpcError;

type Indexed<'a> = IndexMap<Cow<'a, str>, &'a RawValue, foldhash::fast::RandomState>;

/// The most members kept in a list: past it, they are indexed.
const LISTED: usize = 16;

/// An object's members, borrowed from its text.
#[derive(Debug, Default, Clone)]
pub struct Members<'a>(Map<'a>);

/// The members in their order: a list while they are few, indexed once they are many.
#[derive(Debug, Clone)]
enum Map<'a> {
    Listed(Vec<(Cow<'a, str>, &'a RawValue)>),
    Indexed(Indexed<'a>),
}

/// How many members most objects mcpmux reads have, at most.
const FEW: usize = 4;

impl Default for Map<'_> {
    fn default() -> Self {
        Self::Listed(Vec::new())
    }
}

impl<'a> Map<'a> {
    /// Replaces a member's value in its place, or adds it at the end.
    fn insert(&mut self, key: Cow<'a, str>, value: &'a RawValue) {
        match self {
            Self::Listed(list) => {
                if let Some(slot) = list.iter_mut().find(|(k, _)| *k == key) {
                    slot.1 = value;
                } else if list.len() < LISTED {
                    list.push((key, value));
                } else {
                    let mut indexed: Indexed<'a> = std::mem::take(list).into_iter().collect();
                    indexed.insert(key, value);
                    *self = Self::Indexed(indexed);
                }
            }
            Self::Indexed(map) => {
                map.insert(key, value);
            }
        }
    }

    fn get(&self, key: &str) -> Option<&'a RawValue> {
        match self {
            Self::Listed(list) => list.iter().find(|(k, _)| k == key).map(|(_, v)| *v),
            Self::Indexed(map) => map.get(key).copied(),
        }
    }

    /// Removes a member, keeping the others' order; whether it was there.
    fn remove(&mut self, key: &str) -> bool {
        match self {
            Self::Listed(list) => match list.iter().position(|(k, _)| k == key) {
                Some(at) => {
                    list.remove(at);
                    true
                }
                None => false,
            },
            Self::Indexed(map) => map.shift_remove(key).is_some(),
        }
    }

    fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        match self {
            Self::Listed(list) => list.retain(|(k, _)| keep(k)),
            Self::Indexed(map) => map.retain(|k, _| keep(k)),
        }
    }

    fn len(&self) -> usize {
        match self {
            Self::Listed(list) => list.len(),
            Self::Indexed(map) => map.len(),
        }
    }
}

impl serde::Serialize for Map<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Listed(list) => serializer.collect_map(list.iter().map(|(k, v)| (k, v))),
            Self::Indexed(map) => map.serialize(serializer),
        }
    }
}

/// A member's name: borrowed from the text unless it holds an escape.
pub struct Key<'a>(pub Cow<'a, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_borrowed_str<E>(self, key: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(key)))
            }
            fn visit_str<E>(self, key: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(key.to_owned())))
            }
            fn visit_string<E>(self, key: String) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(key)))
            }
        }
        deserializer.deserialize_str(KeyVisitor)
    }
}

impl<'de> Deserialize<'de> for Members<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MembersVisitor;
        impl<'de> Visitor<'de> for MembersVisitor {
            type Value = Members<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members<'de>, A::Error> {
                let mut members = Map::Listed(Vec::with_capacity(map.size_hint().unwrap_or(FEW)));
                // A repeated member keeps its first place and takes its last value.
                while let Some(Key(key)) = map.next_key()? {
                    let value: &'de RawValue = map.next_value()?;
                    members.insert(key, value);
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(MembersVisitor)
    }
}

impl<'a> Members<'a> {
    /// None yet, with room for as many as most params have (no growing while they are read).
    pub fn few() -> Self {
        Self(Map::Listed(Vec::with_capacity(FEW)))
    }

    /// Parses `value` as an object; anything else is an invalid-params error for the host.
    pub fn parse(value: &'a RawValue) -> Result<Self, RpcError> {
        Self::parse_text(value.get())
    }

    /// [`Self::parse`] of JSON text.
    pub fn parse_text(text: &'a str) -> Result<Self, RpcError> {
        serde_json::from_str(text)
            .map_err(|e| RpcError::invalid_params(format!("expected an object: {e}")))
    }

    /// [`Self::parse`] for values mcpmux only inspects (an upstream's notification): `None`
    /// when it is not an object.
    pub fn of(value: &'a RawValue) -> Option<Self> {
        serde_json::from_str(value.get()).ok()
    }

    pub fn get(&self, key: &str) -> Option<&'a RawValue> {
        self.0.get(key)
    }

    pub fn contains(&self, key: &str) -> bool {
        self.0.get(key).is_some()
    }

    /// A member that is a JSON string, decoded.
    pub fn string(&self, key: &str) -> Option<String> {
        self.get(key).and_then(text_of).map(Cow::into_owned)
    }

    /// Replaces (or adds, at the end) one member.
    pub fn insert(&mut self, key: impl Into<Cow<'a, str>>, value: &'a RawValue) {
        self.0.insert(key.into(), value);
    }

    /// Removes one member; whether it was there.
    pub fn remove(&mut self, key: &str) -> bool {
        self.0.remove(key)
    }

    /// Removes the members whose key starts with `prefix`; whether any was there.
    pub fn remove_prefixed(&mut self, prefix: &str) -> bool {
        let before = self.0.len();
        self.0.retain(|key| !key.starts_with(prefix));
        self.0.len() != before
    }

    pub fn is_empty(&self) -> bool {
        self.0.len() == 0
    }

    /// The object as JSON text, members in their original order.
    pub fn to_json(&self) -> String {
        super::message::serialize(&self.0)
    }

    /// The object as a raw value (written from valid members: not scanned again).
    pub fn to_raw(&self) -> Box<RawValue> {
        to_raw(&self.0)
    }
}

/// The text of a raw JSON string: borrowed unless it holds escapes; `None` for another value.
pub fn text_of(raw: &RawValue) -> Option<Cow<'_, str>> {
    // Most strings hold no escape: their text is what lies between the quotes (a raw value is
    // valid JSON, so a string that holds no backslash holds no quote either).
    let plain = (raw.get().strip_prefix('"')).and_then(|s| s.strip_suffix('"'));
    if let Some(text) = plain.filter(|t| !t.contains('\\')) {
        return Some(Cow::Borrowed(text));
    }
    serde_json::from_str::<Key<'_>>(raw.get())
        .ok()
        .map(|key| key.0)
}

/// A raw JSON string value for `s`.
pub fn raw_string(s: &str) -> Box<RawValue> {
    raw(super::message::serialize(s))
}

/// Wraps JSON text mcpmux built itself (always valid) as a raw value.
pub fn raw(json: String) -> Box<RawValue> {
    RawValue::from_string(json).unwrap_or_else(|_| RawValue::NULL.to_owned())
}

/// Serializes a value mcpmux built as a raw value.
pub fn to_raw<T: serde::Serialize + ?Sized>(value: &T) -> Box<RawValue> {
    serde_json::value::to_raw_value(value).unwrap_or_else(|_| RawValue::NULL.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rewrites_one_member_and_keeps_the_rest_verbatim() {
        let text = r#"{"name":"a__b","arguments":{"z":1,"a":[true]},"_meta":{"x":"y"}}"#;
        let value = raw(text.to_owned());
        let mut members = Members::parse(&value).expect("an object");
        assert_eq!(members.string("name").as_deref(), Some("a__b"));
        let name = raw_string("b");
        members.insert("name", &name);
        assert_eq!(
            members.to_json(),
            r#"{"name":"b","arguments":{"z":1,"a":[true]},"_meta":{"x":"y"}}"#
        );
        assert!(Members::parse(&raw("[1]".into())).is_err());
        assert!(Members::of(&raw("3".into())).is_none());
    }

    #[test]
    fn few_or_many_members_keep_their_order_and_take_a_repeat_s_last_value() {
        for count in [3, LISTED, LISTED + 1, 100] {
            let body: Vec<String> = (0..count).map(|i| format!(r#""k{i}":{i}"#)).collect();
            // `k1` again at the end: it keeps its place and takes the last value.
            let text = format!(r#"{{{},"k1":"again"}}"#, body.join(","));
            let value = raw(text);
            let mut members = Members::parse(&value).expect("an object");
            assert_eq!(members.string("k1").as_deref(), Some("again"), "{count}");
            let mut expected = body.clone();
            expected[1] = r#""k1":"again""#.to_owned();
            assert_eq!(members.to_json(), format!("{{{}}}", expected.join(",")));
            assert!(members.remove("k0") && !members.remove("k0"));
            let added = raw_string("x");
            members.insert("new", &added);
            let json = members.to_json();
            assert!(json.starts_with(r#"{"k1":"again""#) && json.ends_with(r#""new":"x"}"#));
            assert!(members.remove_prefixed("k") && !members.contains("k2"));
            assert_eq!(members.to_json(), r#"{"new":"x"}"#, "{count}");
        }
    }

    #[test]
    fn a_string_member_is_decoded_and_nothing_else_is_one() {
        let value = raw(r#"{"plain":"a b","escaped":"a\"b\u00e9","n":1,"o":{}}"#.to_owned());
        let members = Members::parse(&value).expect("an object");
        assert_eq!(members.string("plain").as_deref(), Some("a b"));
        assert_eq!(members.string("escaped").as_deref(), Some("a\"bé"));
        assert_eq!(members.string("n"), None);
        assert_eq!(members.string("o"), None);
        assert_eq!(members.string("missing"), None);
    }
}
