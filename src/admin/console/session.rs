//! Who is signed in to the console: a person who gave the admin token gets a session — a random
//! id in an HttpOnly, SameSite=Strict cookie, and a CSRF token of its own that every state-changing
//! request must carry. Sessions live in memory (a restart signs everyone out) and end after
//! [`LIFETIME`] or at sign-out.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, header};
use subtle::ConstantTimeEq;

use crate::sync::lock;

/// The console's cookie.
pub const COOKIE: &str = "mcpmux_console";

/// How long a sign-in lasts.
pub const LIFETIME: Duration = Duration::from_secs(12 * 60 * 60);

/// At most this many sessions at once: a new sign-in beyond it ends the oldest.
const MAX_SESSIONS: usize = 64;

/// One signed-in browser.
#[derive(Debug, Clone)]
pub struct ConsoleSession {
    pub csrf: String,
    started: Instant,
}

impl ConsoleSession {
    /// Whether `presented` is this session's CSRF token (compared in constant time).
    pub fn allows(&self, presented: &str) -> bool {
        bool::from(presented.as_bytes().ct_eq(self.csrf.as_bytes()))
    }
}

/// Every console session, by id.
#[derive(Debug, Default)]
pub struct ConsoleSessions {
    sessions: Mutex<HashMap<String, ConsoleSession>>,
}

impl ConsoleSessions {
    /// A new session: its id (for the cookie) and the session.
    pub fn open(&self) -> (String, ConsoleSession) {
        let id = crate::audit::hex(&rand::random::<[u8; 32]>());
        let session = ConsoleSession {
            csrf: crate::audit::hex(&rand::random::<[u8; 32]>()),
            started: Instant::now(),
        };
        let mut sessions = lock(&self.sessions);
        sessions.retain(|_, s| s.started.elapsed() < LIFETIME);
        if sessions.len() >= MAX_SESSIONS {
            let oldest = (sessions.iter())
                .min_by_key(|(_, s)| s.started)
                .map(|(id, _)| id.clone());
            if let Some(oldest) = oldest {
                sessions.remove(&oldest);
            }
        }
        sessions.insert(id.clone(), session.clone());
        (id, session)
    }

    /// The session whose cookie `headers` carry, if it is open.
    pub fn of(&self, headers: &HeaderMap) -> Option<(String, ConsoleSession)> {
        let id = cookie(headers)?;
        let sessions = lock(&self.sessions);
        let session = sessions.get(&id)?;
        (session.started.elapsed() < LIFETIME).then(|| (id.clone(), session.clone()))
    }

    /// Whether session `id` is still open.
    pub fn is_open(&self, id: &str) -> bool {
        lock(&self.sessions)
            .get(id)
            .is_some_and(|s| s.started.elapsed() < LIFETIME)
    }

    /// Ends the session `id`.
    pub fn close(&self, id: &str) {
        lock(&self.sessions).remove(id);
    }
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

/// The `Set-Cookie` value that keeps session `id` (or, with `None`, removes it).
pub fn set_cookie(id: Option<&str>) -> String {
    let mut cookie = cookie::Cookie::build((COOKIE, id.unwrap_or_default().to_owned()))
        .http_only(true)
        .same_site(cookie::SameSite::Strict)
        .path("/");
    cookie = match id {
        Some(_) => cookie.max_age(cookie::time::Duration::seconds(LIFETIME.as_secs() as i64)),
        None => cookie.max_age(cookie::time::Duration::ZERO),
    };
    cookie.build().to_string()
}

#[cfg(test)]
mod tests {
    use axum::http::HeaderValue;

    use super::*;

    #[test]
    fn a_session_is_found_by_its_cookie_and_ends_at_sign_out() {
        let sessions = ConsoleSessions::default();
        let (id, session) = sessions.open();
        let mut headers = HeaderMap::new();
        let cookies = format!("other=1; {COOKIE}={id}");
        headers.insert(
            header::COOKIE,
            HeaderValue::from_str(&cookies).unwrap_or_else(|e| panic!("{e}")),
        );
        let (found, _) = sessions
            .of(&headers)
            .unwrap_or_else(|| panic!("no session"));
        assert_eq!(found, id);
        assert!(session.allows(&session.csrf));
        assert!(!session.allows("forged"));
        sessions.close(&id);
        assert!(sessions.of(&headers).is_none());
        let set = set_cookie(Some("abc"));
        assert!(
            set.contains("HttpOnly") && set.contains("SameSite=Strict"),
            "{set}"
        );
        assert!(set_cookie(None).contains("Max-Age=0"));
    }
}
