//! What each caller holds open for a while, counted per caller so no one caller takes what every
//! caller shares: `subscriptions/listen` streams (each holds a connection for hours) and calls
//! parked for a stateless host's input (each holds an upstream's request slot). A caller is its
//! principal — kind, issuer and name, as sessions are told apart — or, anonymous, the address it
//! calls from.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use super::principal::{Access, Identity};
use crate::sync::lock;

/// Who holds something open.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Holder {
    Host(Arc<str>),
    SignedIn {
        issuer: Arc<str>,
        name: Arc<str>,
    },
    /// An anonymous caller, by its address (`None`: not over HTTP).
    Address(Option<IpAddr>),
}

impl Holder {
    /// The caller a request with `access` comes from.
    pub fn of(access: &Access) -> Self {
        match &access.principal {
            None => Self::Address(access.peer),
            Some(p) => match &p.identity {
                Identity::Host => Self::Host(Arc::clone(&p.name)),
                Identity::SignedIn { issuer } => Self::SignedIn {
                    issuer: Arc::clone(issuer),
                    name: Arc::clone(&p.name),
                },
            },
        }
    }
}

impl std::fmt::Display for Holder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Host(name) => write!(f, "host `{name}`"),
            Self::SignedIn { name, .. } => write!(f, "user `{name}`"),
            Self::Address(Some(ip)) => write!(f, "anonymous callers from {ip}"),
            Self::Address(None) => f.write_str("anonymous callers"),
        }
    }
}

/// How many of one kind of thing each caller holds.
#[derive(Debug, Default)]
pub struct Holdings {
    held: Mutex<HashMap<Holder, usize>>,
}

/// One thing a caller holds; counted until dropped.
#[derive(Debug)]
pub struct Held {
    holdings: Arc<Holdings>,
    holder: Holder,
}

impl Holdings {
    /// One more for `holder`, unless it holds `limit` already.
    pub fn take(self: &Arc<Self>, holder: &Holder, limit: usize) -> Option<Held> {
        let mut held = lock(&self.held);
        let count = held.entry(holder.clone()).or_insert(0);
        if *count >= limit {
            return None;
        }
        *count += 1;
        Some(Held {
            holdings: Arc::clone(self),
            holder: holder.clone(),
        })
    }

    /// How many `holder` holds now.
    #[cfg(test)]
    fn of(&self, holder: &Holder) -> usize {
        lock(&self.held).get(holder).copied().unwrap_or(0)
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut held = lock(&self.holdings.held);
        if let Some(count) = held.get_mut(&self.holder) {
            *count -= 1;
            if *count == 0 {
                held.remove(&self.holder);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_caller_holds_at_most_its_limit_and_gets_back_what_it_gives_up() {
        let holdings = Arc::new(Holdings::default());
        let (a, b) = (Holder::Host("a".into()), Holder::Address(None));
        let first = holdings.take(&a, 2);
        let second = holdings.take(&a, 2);
        assert!(first.is_some() && second.is_some());
        assert!(holdings.take(&a, 2).is_none(), "a third over the limit");
        assert!(
            holdings.take(&b, 2).is_some(),
            "another caller is counted apart"
        );
        drop(first);
        assert_eq!(holdings.of(&a), 1);
        assert!(holdings.take(&a, 2).is_some());
        drop(second);
        assert!(lock(&holdings.held).len() <= 2);
    }

    #[test]
    fn a_signed_in_user_named_like_a_host_is_another_holder() {
        let host = Holder::Host("ci".into());
        let user = Holder::SignedIn {
            issuer: "https://id.example".into(),
            name: "ci".into(),
        };
        assert_ne!(host, user);
    }
}
