//! The top-level members of a raw JSON object, values left raw: the one primitive behind "rewrite
//! only what mcpmux owns" (DESIGN rule 2). A member is read or replaced; every other member, and
//! the order of all of them, is written back as it came.
//!
//! It is on every forwarded request's path, so it borrows what it can: the values always, the
//! keys unless they hold escapes; and it hashes keys with a fast, randomly seeded hasher.

use std::borrow::Cow;
use std::fmt;

use indexmap::IndexMap;
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::value::RawValue;

use super::RpcError;

type Map<'a> = IndexMap<Cow<'a, str>, &'a RawValue, foldhash::fast::RandomState>;

/// An object's members, borrowed from its text.
#[derive(Debug, Default)]
pub struct Members<'a>(Map<'a>);

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
                let mut members = Map::default();
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
    /// Parses `value` as an object; anything else is an invalid-params error for the host.
    pub fn parse(value: &'a RawValue) -> Result<Self, RpcError> {
        serde_json::from_str(value.get())
            .map_err(|e| RpcError::invalid_params(format!("expected an object: {e}")))
    }

    /// [`Self::parse`] for values mcpmux only inspects (an upstream's notification): `None`
    /// when it is not an object.
    pub fn of(value: &'a RawValue) -> Option<Self> {
        serde_json::from_str(value.get()).ok()
    }

    pub fn get(&self, key: &str) -> Option<&'a RawValue> {
        self.0.get(key).copied()
    }

    pub fn contains(&self, key: &str) -> bool {
        self.0.contains_key(key)
    }

    /// A member that is a JSON string, decoded.
    pub fn string(&self, key: &str) -> Option<String> {
        self.get(key)
            .and_then(|v| serde_json::from_str(v.get()).ok())
    }

    /// Replaces (or adds, at the end) one member.
    pub fn insert(&mut self, key: impl Into<Cow<'a, str>>, value: &'a RawValue) {
        self.0.insert(key.into(), value);
    }

    /// Removes one member; whether it was there.
    pub fn remove(&mut self, key: &str) -> bool {
        self.0.shift_remove(key).is_some()
    }

    /// Removes the members whose key starts with `prefix`; whether any was there.
    pub fn remove_prefixed(&mut self, prefix: &str) -> bool {
        let before = self.0.len();
        self.0.retain(|key, _| !key.starts_with(prefix));
        self.0.len() != before
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
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
}
