//! Who is signed in to the console: a person who gave the admin token gets a session — a random
//! id in an HttpOnly, SameSite=Strict cookie, a CSRF token that every state-changing request must
//! carry, and a random key that is part of the path of every page of the session.
//!
//! Why the key: a browser binds a cookie to a host, not to a port. Any listener on another port of
//! 127.0.0.1 (another local user's) that the browser visits is sent every cookie of 127.0.0.1 whose
//! `Path` matches what is asked of it — `SameSite` does not help, the ports are the same site — and
//! could replay the cookie to the admin port. So the cookie's `Path` is the session's own
//! `/console/s/<key>/`, and the session's pages are served there only: the browser sends the cookie
//! only with a request for a path that holds the key, which a stranger does not know (it is in no
//! page another origin can read, and `Referrer-Policy: same-origin` keeps it out of `Referer`). A
//! request must bring both, the cookie and the key of the same session; neither alone opens
//! anything. Sessions live in memory (a restart signs everyone out) and end after [`IDLE`] without
//! a request, after [`LIFETIME`] in any case, or at sign-out.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, header};
use subtle::ConstantTimeEq;

use crate::sync::lock;

/// The console's cookie.
pub const COOKIE: &str = "mcpmux_console";

/// Where the sessions' pages are: `/console/s/<key>/…`.
pub const SESSIONS: &str = "/console/s/";

/// How long a session lasts without a request (an open page's live stream is not one).
pub const IDLE: Duration = Duration::from_secs(15 * 60);

/// How long a session lasts at most, however busy.
pub const LIFETIME: Duration = Duration::from_secs(4 * 60 * 60);

/// At most this many sessions at once: a new sign-in beyond it ends the oldest.
const MAX_SESSIONS: usize = 64;

/// One signed-in browser.
#[derive(Debug, Clone)]
pub struct ConsoleSession {
    pub csrf: String,
    /// The part of its pages' path that is its own.
    pub key: String,
    started: Instant,
}

impl ConsoleSession {
    /// Whether `presented` is this session's CSRF token (compared in constant time).
    pub fn allows(&self, presented: &str) -> bool {
        bool::from(presented.as_bytes().ct_eq(self.csrf.as_bytes()))
    }

    /// Where its pages are: `/console/s/<key>/`.
    pub fn base(&self) -> String {
        format!("{SESSIONS}{}/", self.key)
    }
}

/// A session and when it last saw a request.
#[derive(Debug)]
struct Entry {
    session: ConsoleSession,
    seen: Instant,
}

impl Entry {
    /// Whether it is still open at `now`.
    fn open_at(&self, now: Instant) -> bool {
        now.duration_since(self.session.started) < LIFETIME && now.duration_since(self.seen) < IDLE
    }
}

/// Every console session, by id.
#[derive(Debug, Default)]
pub struct ConsoleSessions {
    sessions: Mutex<HashMap<String, Entry>>,
}

impl ConsoleSessions {
    /// A new session: its id (for the cookie) and the session.
    pub fn open(&self) -> (String, ConsoleSession) {
        self.open_at(Instant::now())
    }

    fn open_at(&self, now: Instant) -> (String, ConsoleSession) {
        let id = random_hex();
        let session = ConsoleSession {
            csrf: random_hex(),
            key: random_hex(),
            started: now,
        };
        let mut sessions = lock(&self.sessions);
        sessions.retain(|_, entry| entry.open_at(now));
        if sessions.len() >= MAX_SESSIONS {
            let oldest = (sessions.iter())
                .min_by_key(|(_, entry)| entry.session.started)
                .map(|(id, _)| id.clone());
            if let Some(oldest) = oldest {
                sessions.remove(&oldest);
            }
        }
        let entry = Entry {
            session: session.clone(),
            seen: now,
        };
        sessions.insert(id.clone(), entry);
        (id, session)
    }

    /// The open session whose cookie `headers` carry, if `key` (from the request's path) is its
    /// key; the request keeps it from going idle.
    pub fn of(&self, headers: &HeaderMap, key: &str) -> Option<(String, ConsoleSession)> {
        self.of_at(&cookie(headers)?, key, Instant::now())
    }

    fn of_at(&self, id: &str, key: &str, now: Instant) -> Option<(String, ConsoleSession)> {
        let mut sessions = lock(&self.sessions);
        let entry = sessions.get_mut(id)?;
        let ours = bool::from(key.as_bytes().ct_eq(entry.session.key.as_bytes()));
        if !ours || !entry.open_at(now) {
            return None;
        }
        entry.seen = now;
        Some((id.to_owned(), entry.session.clone()))
    }

    /// Whether session `id` is still open (a live stream asks; it does not keep it open).
    pub fn is_open(&self, id: &str) -> bool {
        let now = Instant::now();
        lock(&self.sessions)
            .get(id)
            .is_some_and(|entry| entry.open_at(now))
    }

    /// Ends the session `id`.
    pub fn close(&self, id: &str) {
        lock(&self.sessions).remove(id);
    }
}

/// 256 random bits in hex: a session's id, key and CSRF token.
fn random_hex() -> String {
    crate::audit::hex(&rand::random::<[u8; 32]>())
}

/// The console cookie's value among the request's cookies.
fn cookie(headers: &HeaderMap) -> Option<String> {
    (headers.get_all(header::COOKIE).iter())
        .filter_map(|v| v.to_str().ok())
        .flat_map(cookie::Cookie::split_parse)
        .filter_map(Result::ok)
        .find(|c| c.name() == COOKIE)
        .map(|c| c.value().to_owned())
}

/// The `Set-Cookie` value that keeps session `id` (or, with `None`, removes it) for the pages of
/// `session` only.
pub fn set_cookie(session: &ConsoleSession, id: Option<&str>) -> String {
    let age = match id {
        Some(_) => cookie::time::Duration::seconds(LIFETIME.as_secs().try_into().unwrap_or(0)),
        None => cookie::time::Duration::ZERO,
    };
    cookie::Cookie::build((COOKIE, id.unwrap_or_default().to_owned()))
        .http_only(true)
        .same_site(cookie::SameSite::Strict)
        .path(session.base())
        .max_age(age)
        .build()
        .to_string()
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    fn headers(cookies: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        let value = HeaderValue::from_str(cookies).unwrap_or_else(|e| panic!("{e}"));
        headers.insert(header::COOKIE, value);
        headers
    }

    #[test]
    fn a_session_wants_its_cookie_and_its_key_and_ends_at_sign_out() {
        let sessions = ConsoleSessions::default();
        let (id, session) = sessions.open();
        let cookies = headers(&format!("other=1; {COOKIE}={id}"));
        let (found, _) = sessions
            .of(&cookies, &session.key)
            .unwrap_or_else(|| panic!("no session"));
        assert_eq!(found, id);
        assert!(sessions.of(&cookies, "0".repeat(64).as_str()).is_none());
        assert!(sessions.of(&headers("other=1"), &session.key).is_none());
        let (_, other) = sessions.open();
        assert!(
            sessions.of(&cookies, &other.key).is_none(),
            "another session's key"
        );
        assert!(session.allows(&session.csrf));
        assert!(!session.allows("forged"));
        sessions.close(&id);
        assert!(sessions.of(&cookies, &session.key).is_none());
    }

    #[test]
    fn a_session_ends_when_idle_and_when_old_however_busy() {
        let sessions = ConsoleSessions::default();
        let start = Instant::now();
        let (id, session) = sessions.open_at(start);
        let at = |d: Duration| start + d;
        let minute = Duration::from_secs(60);
        assert!(
            sessions
                .of_at(&id, &session.key, at(IDLE - minute))
                .is_some()
        );
        // That request kept it: idle is counted from the last one.
        assert!(
            sessions
                .of_at(&id, &session.key, at(2 * IDLE - 2 * minute))
                .is_some()
        );
        assert!(
            sessions.of_at(&id, &session.key, at(3 * IDLE)).is_none(),
            "idle"
        );

        let (id, session) = sessions.open_at(start);
        let mut now = start;
        while now < start + LIFETIME - minute {
            now += IDLE / 2;
            let busy = sessions.of_at(&id, &session.key, now.min(at(LIFETIME - minute)));
            assert!(busy.is_some(), "busy at {:?}", now - start);
        }
        assert!(
            sessions.of_at(&id, &session.key, at(LIFETIME)).is_none(),
            "old"
        );
    }

    #[test]
    fn the_cookie_is_for_the_sessions_pages_only_and_short_lived() {
        let sessions = ConsoleSessions::default();
        let (id, session) = sessions.open();
        let set = set_cookie(&session, Some(&id));
        let cookie = cookie::Cookie::parse(set.clone()).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(cookie.path(), Some(session.base().as_str()), "{set}");
        assert!(session.base().contains(&session.key));
        assert!(
            set.contains("HttpOnly") && set.contains("SameSite=Strict"),
            "{set}"
        );
        assert_eq!(
            cookie.max_age(),
            Some(cookie::time::Duration::seconds(4 * 60 * 60))
        );
        let removed = set_cookie(&session, None);
        assert!(removed.contains("Max-Age=0") && removed.contains(&session.base()));
    }
}
