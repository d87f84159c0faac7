//! Streamable HTTP (2025-03-26 … 2025-11-25), the client side: each message is POSTed with
//! `Accept: application/json, text/event-stream`; a JSON answer is one message (or a batch), an
//! SSE answer may carry notifications and server requests before the answer — and may end
//! before it, then it is resumed with `Last-Event-ID`. `Mcp-Session-Id` from the `initialize`
//! answer and `MCP-Protocol-Version` after it go on every later request; once the session is
//! up, the standalone GET stream carries what the server sends unasked (a 405 means it offers
//! none) and is reconnected with backoff. A server that forgets the session (404: it expired,
//! or the server restarted) gets a new one in its place ([`renew`]: the same `initialize`
//! again), the request it refused is sent again in it, and the POSTs made meanwhile wait for
//! it; only when no new session can be opened does the link end. A 401/403 ends the link; a
//! server that cannot be reached, a reset, a 5xx, an answer that is not JSON-RPC or too long,
//! or a redirect to another origin fail their request alone until the link's breaker trips
//! (see `remote.rs`); a 403 `insufficient_scope` fails its request saying how to get the
//! scopes. DELETE ends the session on shutdown.
//!
//! - `stream`: the event streams (an answer's, resumed; the standalone GET stream).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use reqwest::StatusCode;
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderValue};
use tokio::sync::watch;

mod stream;

use super::{Outgoing, Shared};
use crate::http_body::error_chain;
use crate::jsonrpc::{Members, Received, RpcError, codes};
use crate::mcp::version::Version;
use crate::oauth::Challenge;
use crate::sync::lock;
use crate::upstream::error::Closed;

use crate::mcp::method::Method;
use crate::mcp::{SESSION_HEADER, VERSION_HEADER};
/// Longest wait for the GET stream before `notifications/initialized` goes anyway.
const STREAM_WAIT: Duration = Duration::from_secs(5);
/// How much of an error body is quoted.
const BODY_EXCERPT: usize = 300;
/// How much of an error body is read to find the JSON-RPC error in it.
const ERROR_BODY: usize = 64 * 1024;

/// The HTTP session: its id, the version agreed, whether the GET stream runs, and what opens a
/// new one when the server forgets it.
#[derive(Debug, Clone, Default)]
pub(in super::super) struct Session(Arc<SessionState>);

#[derive(Debug)]
struct SessionState {
    id: std::sync::Mutex<Option<HeaderValue>>,
    version: std::sync::Mutex<Option<HeaderValue>>,
    listening: AtomicBool,
    /// Set once the GET stream is open (or refused): what the server sends unasked right after
    /// `notifications/initialized` (a tools/list_changed, say) then has a stream to go on.
    stream_ready: watch::Sender<bool>,
    /// The `initialize` request that opened the session (our id and its text, shared with the
    /// body that carried it): a session the server forgot is replaced by sending it again.
    opening: std::sync::Mutex<Option<(u64, Bytes)>>,
    /// Held by the one task replacing a forgotten session; POSTs made meanwhile wait for it
    /// (`renewing` says when to, so no POST takes the lock otherwise).
    renewal: tokio::sync::Mutex<()>,
    renewing: AtomicBool,
    /// Times the session was replaced.
    renewals: AtomicU64,
}

impl Default for SessionState {
    fn default() -> Self {
        Self {
            id: std::sync::Mutex::new(None),
            version: std::sync::Mutex::new(None),
            listening: AtomicBool::new(false),
            stream_ready: watch::channel(false).0,
            opening: std::sync::Mutex::new(None),
            renewal: tokio::sync::Mutex::new(()),
            renewing: AtomicBool::new(false),
            renewals: AtomicU64::new(0),
        }
    }
}

impl Session {
    fn id(&self) -> Option<HeaderValue> {
        lock(&self.0.id).clone()
    }

    fn version(&self) -> Option<HeaderValue> {
        lock(&self.0.version).clone()
    }

    /// Whether the server was found to speak 2026-07-28 (it answered `server/discover`): no
    /// session, no GET stream, the version and method on every POST.
    pub(in super::super) fn is_modern(&self) -> bool {
        self.version().as_ref().is_some_and(is_modern)
    }

    /// Waits while a forgotten session is being replaced, so a POST goes in the new one.
    async fn settled(&self) {
        if self.0.renewing.load(Ordering::Acquire) {
            drop(self.0.renewal.lock().await);
        }
    }
}

/// Whether a protocol version header names 2026-07-28.
fn is_modern(version: &HeaderValue) -> bool {
    version.as_bytes() == Version::MODERN.as_str().as_bytes()
}

/// What a POST's answer is read for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reading {
    /// An answer for the connection.
    Answer,
    /// The answer to `initialize` or `server/discover`: it also says which version the session
    /// speaks.
    Opening,
    /// The answer to the `initialize` that replaced a forgotten session: read for its version,
    /// and not handed on (no one waits for it).
    Renewal,
}

impl Reading {
    fn opens(self) -> bool {
        self != Self::Answer
    }
}

/// POSTs one message; `Err(status)` when `may_fall_back` and the server refused it with a 4xx
/// that says it does not speak Streamable HTTP here (the `auto` transport then falls back).
/// A request the server refuses because it forgot the session (404) is sent again, once, in
/// the new session [`renew`] opens: the server never saw it, and its caller never learns.
// Long: one POST and every form its answer takes (JSON, an event stream, 202, a refusal that means
// another transport, a forgotten session renewed), read in the order the transport defines; each
// form is a few lines that make sense only beside the others.
pub(super) async fn post(
    shared: &Arc<Shared>,
    session: &Session,
    mut message: Outgoing,
    may_fall_back: bool,
) -> Result<(), StatusCode> {
    if message.is("notifications/initialized") {
        let mut ready = session.0.stream_ready.subscribe();
        let _ = tokio::time::timeout(STREAM_WAIT, ready.wait_for(|r| *r)).await;
    }
    // The message's text goes into the body (kept, shared rather than copied, should it be sent
    // again); what the transport needs of it stays beside.
    let payload = Bytes::from(std::mem::take(&mut message.bytes));
    let initialize = message.is(Method::Initialize.as_str());
    if let (true, Some(id)) = (initialize, message.id) {
        *lock(&session.0.opening) = Some((id, payload.clone()));
    }
    let mut sent_again = false;
    let mut nonce_given = false;
    loop {
        session.settled().await;
        let sent_id = session.id();
        let request = shared
            .client
            .post(shared.url.clone())
            .headers(shared.headers())
            .header(ACCEPT, "application/json, text/event-stream")
            .header(CONTENT_TYPE, "application/json");
        let mut request = shared.authorized(request, "POST", &shared.url);
        if let Some(id) = &sent_id {
            request = request.header(SESSION_HEADER, id);
        }
        let version = session.version();
        let modern =
            version.as_ref().is_some_and(is_modern) || message.is(Method::Discover.as_str());
        if modern {
            request = modern_headers(request, &message);
        } else if let Some(version) = version {
            request = request.header(VERSION_HEADER, version);
        }
        let request = super::traced(&message, request);
        let response = tokio::select! {
            () = shared.stop.cancelled() => return Ok(()),
            response = request.body(payload.clone()).send() => response,
        };
        let response = match response {
            Ok(response) => response,
            Err(e) => {
                let why = format!(
                    "upstream `{}`: cannot reach {}: {}",
                    shared.upstream,
                    shared.url,
                    error_chain(&e)
                );
                shared.failed(&message, why).await;
                return Ok(());
            }
        };
        let status = response.status();
        // The answers that say which protocol version the session speaks.
        let reading = match initialize || message.is(Method::Discover.as_str()) {
            true => Reading::Opening,
            false => Reading::Answer,
        };
        if initialize {
            if let Some(id) = response.headers().get(SESSION_HEADER) {
                *lock(&session.0.id) = Some(id.clone());
            }
        }
        if status.is_success() {
            answered(shared, session, &message, response, reading).await;
            return Ok(());
        }
        // A DPoP nonce asked for (RFC 9449 §9): the request goes again with it, once.
        if status == StatusCode::UNAUTHORIZED
            && !nonce_given
            && shared.dpop_nonce(response.headers())
        {
            nonce_given = true;
            continue;
        }
        let challenge = challenge_of(&response);
        if matches!(status.as_u16(), 401 | 403) {
            shared.diagnostics.set_challenge(challenge.clone());
        }
        let location = location_of(&response);
        let (body, error) = error_body(response).await;
        let why = format!("HTTP {status} from upstream `{}`: {body}", shared.upstream);
        // A 2026-07-28 server answers a request it refuses with its JSON-RPC error (and a 4xx):
        // that error is the answer. A server that refuses the probe any other way (a
        // handshake-era server wants its session) is answered by a refusal that names no modern
        // error.
        let refusal = status.is_client_error() && !matches!(status.as_u16(), 401 | 403);
        let probe = message.is(Method::Discover.as_str());
        let forgotten = sent_id.is_some() && forgot_session(status, &body);
        if let (Some(id), true, false) = (message.id, refusal, forgotten) {
            let error = error.or_else(|| {
                probe.then(|| {
                    crate::jsonrpc::to_raw(&RpcError::new(codes::INVALID_REQUEST, why.clone()))
                })
            });
            if let Some(error) = error {
                if !probe {
                    shared.note(why);
                }
                let id = crate::jsonrpc::raw(id.to_string());
                shared.deliver(Received::Error { id, error }).await;
                return Ok(());
            }
        }
        // A refusal `auto` falls back on is expected, not a failure to show.
        if may_fall_back && status.is_client_error() && !matches!(status.as_u16(), 401 | 403) {
            return Err(status);
        }
        let challenge = challenge
            .as_deref()
            .map(Challenge::parse)
            .unwrap_or_default();
        match status {
            // Wider scopes for this request (a step-up): it fails alone, saying how to get them;
            // the challenge is kept for `mcpmux login`.
            StatusCode::FORBIDDEN if challenge.error.as_deref() == Some("insufficient_scope") => {
                shared.note(why.clone());
                let name = &shared.upstream;
                let wanted = challenge.scope.as_deref().unwrap_or("more");
                let why = format!(
                    "{why}; it wants wider scopes ({wanted}) than mcpmux was granted: it needs a sign-in: run `mcpmux login {name}`"
                );
                shared.fail_request(&message, why).await;
            }
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                shared.note(why.clone());
                shared.close(Closed::Unauthorized(why)).await;
            }
            // 404 is the spec's answer to a session the server no longer knows (it expired, or
            // the server restarted); servers built on the TypeScript SDK's examples answer 400
            // "No valid session ID provided". A new session takes its place, and a request the
            // server refused so — it never ran — is sent again in it.
            s if forgotten => {
                shared.note(why.clone());
                match renew(shared, session, sent_id.as_ref()).await {
                    Ok(()) if message.id.is_some() && !sent_again => {
                        sent_again = true;
                        continue;
                    }
                    Ok(()) if message.id.is_some() => {
                        let why = format!(
                            "{why}; the server forgot the new HTTP session at once as well ({s})"
                        );
                        shared.failed(&message, why).await;
                    }
                    Ok(()) => {}
                    Err(failed) => {
                        let why = format!(
                            "its HTTP session expired ({s}) and a new one could not be opened ({failed}); it is started again"
                        );
                        shared.close(Closed::SessionExpired(why)).await;
                    }
                }
            }
            // Same-origin redirects were followed; this one leads elsewhere.
            s if s.is_redirection() => {
                shared.redirected(&message, s, location.as_deref()).await;
            }
            s if s.is_server_error() => shared.failed(&message, why).await,
            _ => shared.refused(&message, why).await,
        }
        return Ok(());
    }
}

/// A POST of `message` was answered (2xx): reads what it carried, and notes what the session
/// learned. An answer that is not JSON-RPC, or too long, fails its request alone, as a failed
/// POST does (the breaker decides when failures mean the link is bad).
async fn answered(
    shared: &Arc<Shared>,
    session: &Session,
    message: &Outgoing,
    response: reqwest::Response,
    reading: Reading,
) {
    let initialize = message.is(Method::Initialize.as_str());
    let answered = match read_answer(shared, session, response, message.id, reading).await {
        Ok(answered) => answered,
        Err(bad) => {
            let why = format!("upstream `{}` {bad}", shared.upstream);
            return shared.failed(message, why).await;
        }
    };
    if message.id.is_some() && !answered {
        let why = format!(
            "upstream `{}` ended its answer's stream before answering",
            shared.upstream
        );
        shared.failed(message, why).await;
    } else {
        shared.succeeded();
    }
    if reading.opens() && answered && session.is_modern() {
        let state = "none (2026-07-28 keeps no session)".to_owned();
        shared.diagnostics.set_http_session(Some(state));
    } else if initialize && answered {
        shared
            .diagnostics
            .set_http_session(Some(described(session)));
    }
    // The session is up: open the GET stream before the client says it is initialized.
    if initialize && answered && !session.0.listening.swap(true, Ordering::Relaxed) {
        tokio::spawn(stream::listen(Arc::clone(shared), session.clone()));
    }
}

/// The session as status shows it (never its id: that is a credential).
fn described(session: &Session) -> String {
    let mut state = match (session.id().is_some(), session.version()) {
        (true, Some(v)) => format!("established, protocol {}", v.to_str().unwrap_or("?")),
        (true, None) => "established".to_owned(),
        (false, _) => "none (the server keeps no session)".to_owned(),
    };
    match session.0.renewals.load(Ordering::Relaxed) {
        0 => {}
        1 => state.push_str("; opened again once after the server forgot it"),
        n => state.push_str(&format!(
            "; opened again {n} times after the server forgot it"
        )),
    }
    state
}

/// Opens a new HTTP session in place of `stale`, which the server forgot (it answered 404):
/// the `initialize` that opened the old one is sent again, then `notifications/initialized`;
/// the connection is told ([`Shared::renewed`]) so that what the old session held is asked for
/// again. One renewal at a time: a POST that met the same 404 finds the new session open. The
/// requests in flight go on; those made meanwhile wait for it (see [`Session::settled`]).
/// `Err`: why no new session could be opened (the link then ends and is started again).
pub(super) async fn renew(
    shared: &Arc<Shared>,
    session: &Session,
    stale: Option<&HeaderValue>,
) -> Result<(), String> {
    let state = &session.0;
    let _renewal = state.renewal.lock().await;
    if session.id().as_ref() != stale {
        return Ok(());
    }
    state.renewing.store(true, Ordering::Release);
    let deadline = shared.limits.open;
    let outcome = tokio::time::timeout(deadline, reinitialize(shared, session))
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "it did not open a new session within {}s (startup_timeout)",
                deadline.as_secs()
            ))
        });
    state.renewing.store(false, Ordering::Release);
    if outcome.is_ok() {
        state.renewals.fetch_add(1, Ordering::Relaxed);
        shared
            .diagnostics
            .set_http_session(Some(described(session)));
        tracing::info!(upstream = %shared.upstream, "The server forgot mcpmux's HTTP session; a new one is open.");
        shared.renewed().await;
    }
    outcome
}

/// Sends the session's `initialize` again, and then `notifications/initialized`.
async fn reinitialize(shared: &Arc<Shared>, session: &Session) -> Result<(), String> {
    let opening = lock(&session.0.opening).clone();
    let (id, initialize) = opening.ok_or("mcpmux has no initialize to open one with")?;
    let before = session.version();
    *lock(&session.0.id) = None;
    let sent = |request: reqwest::RequestBuilder, body: Bytes| {
        shared
            .authorized(request, "POST", &shared.url)
            .headers(shared.headers())
            .header(ACCEPT, "application/json, text/event-stream")
            .header(CONTENT_TYPE, "application/json")
            .body(body)
            .send()
    };
    let unreachable =
        |e: reqwest::Error| format!("cannot reach {}: {}", shared.url, error_chain(&e));
    let response = sent(shared.client.post(shared.url.clone()), initialize)
        .await
        .map_err(unreachable)?;
    let status = response.status();
    if !status.is_success() {
        return Err(format!(
            "it answered initialize with HTTP {status}: {}",
            excerpt(response).await
        ));
    }
    *lock(&session.0.id) = response.headers().get(SESSION_HEADER).cloned();
    match read_answer(shared, session, response, Some(id), Reading::Renewal).await {
        Ok(true) => {}
        Ok(false) => return Err("it did not answer initialize".into()),
        Err(bad) => return Err(bad),
    }
    let after = session.version();
    if after != before {
        let named = |v: Option<HeaderValue>| {
            v.and_then(|v| v.to_str().ok().map(str::to_owned))
                .unwrap_or_else(|| "no version".into())
        };
        return Err(format!(
            "it now speaks {} instead of {}",
            named(after),
            named(before)
        ));
    }
    let mut request = shared.client.post(shared.url.clone());
    if let Some(id) = session.id() {
        request = request.header(SESSION_HEADER, id);
    }
    if let Some(version) = after {
        request = request.header(VERSION_HEADER, version);
    }
    let initialized =
        Bytes::from_static(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    let response = sent(request, initialized).await.map_err(unreachable)?;
    match response.status() {
        s if s.is_success() => Ok(()),
        s => Err(format!(
            "it answered notifications/initialized with HTTP {s}: {}",
            excerpt(response).await
        )),
    }
}

/// The headers of a 2026-07-28 request: its version, its method and, for a call, a read or a
/// prompt, the name or URI it is for (encoded when it is not plain ASCII).
fn modern_headers(request: reqwest::RequestBuilder, message: &Outgoing) -> reqwest::RequestBuilder {
    use crate::mcp::envelope::{METHOD_HEADER, NAME_HEADER, encode_header_value};
    let mut request = request.header(
        VERSION_HEADER,
        crate::mcp::version::Version::MODERN.as_str(),
    );
    if let Some(method) = &message.method {
        request = request.header(METHOD_HEADER, &**method);
    }
    let Some(modern) = &message.modern else {
        return request;
    };
    if let Some(name) = &modern.name {
        request = request.header(NAME_HEADER, encode_header_value(name));
    }
    for (header, value) in &modern.params {
        request = request.header(header, value);
    }
    request
}

/// The start of an error answer's body, for messages, and the JSON-RPC error it carries when
/// it is one (as a 2026-07-28 server's refusals are).
async fn error_body(
    response: reqwest::Response,
) -> (String, Option<Box<serde_json::value::RawValue>>) {
    let start = crate::http_body::read_start(response, ERROR_BODY).await;
    let text = String::from_utf8_lossy(&start);
    let error = match super::super::receive(&text) {
        Some(Ok(Received::Error { error, .. })) => Some(error),
        _ => None,
    };
    let shown: String = text.trim().chars().take(BODY_EXCERPT).collect();
    match shown.is_empty() {
        true => ("(no body)".into(), error),
        false => (shown, error),
    }
}

/// The `Location` of a redirect, if any.
pub(super) fn location_of(response: &reqwest::Response) -> Option<String> {
    let value = response.headers().get(reqwest::header::LOCATION)?;
    value.to_str().ok().map(str::to_owned)
}

/// Whether an error answer says the server no longer knows the session.
fn forgot_session(status: StatusCode, body: &str) -> bool {
    status == StatusCode::NOT_FOUND
        || (status == StatusCode::BAD_REQUEST && body.to_ascii_lowercase().contains("session"))
}

/// Reads a successful POST's answer: JSON (one message or a batch) or an event stream (resumed
/// with `Last-Event-ID` when it ends early). `Ok`: whether the answer to `id` arrived; `Err`:
/// what is wrong with the answer (not JSON-RPC, too long), said of the upstream.
async fn read_answer(
    shared: &Arc<Shared>,
    session: &Session,
    response: reqwest::Response,
    id: Option<u64>,
    reading: Reading,
) -> Result<bool, String> {
    let content_type = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_ascii_lowercase();
    if content_type.starts_with("text/event-stream") {
        return stream::read_answer(shared, session, response, id, reading).await;
    }
    if response.status() == StatusCode::ACCEPTED || id.is_none() {
        return Ok(true);
    }
    let body = match read_body(shared, response).await {
        Ok(body) => body,
        // Cut off while it was read: that request failed (the caller says so).
        Err(Closed::Io(why)) => {
            shared.note(why);
            return Ok(false);
        }
        Err(Closed::TooLong(max)) => {
            return Err(format!(
                "answered a POST with more than {max} bytes (max_message_bytes)"
            ));
        }
        Err(why) => return Err(format!("answered a POST with {why}")),
    };
    let not_json = || {
        let shown: String = body.chars().take(BODY_EXCERPT).collect();
        format!("answered a POST with something that is not JSON-RPC: {shown}")
    };
    let Some(texts) = messages_of(&body) else {
        return Err(not_json());
    };
    let mut messages = Vec::with_capacity(texts.len());
    for text in texts {
        match super::super::receive(text) {
            Some(Ok(message)) => messages.push(message),
            _ => return Err(not_json()),
        }
    }
    let mut answered = false;
    for message in messages {
        let answer = observe(session, &message, id, reading.opens());
        answered |= answer;
        if !(answer && reading == Reading::Renewal) {
            shared.deliver(message).await;
        }
    }
    Ok(answered)
}

/// The texts of the messages in a JSON answer: one (the common case, taken as it is, parsed
/// once later), a batch, or several one after another (a line each, as some servers write);
/// `None` for an empty batch.
fn messages_of(body: &str) -> Option<Vec<&str>> {
    use serde_json::value::RawValue;
    if body.trim_start().starts_with('[') {
        let items = serde_json::from_str::<Vec<&RawValue>>(body).ok()?;
        return (!items.is_empty()).then(|| items.iter().map(|item| item.get()).collect());
    }
    // Two values can only follow each other across a line break (`}` then `{`); one message,
    // however it is laid out, has none, and is not parsed here.
    let several = body.contains("}\n{") || body.contains("}\r\n{");
    if !several {
        return Some(vec![body.trim()]);
    }
    let values = serde_json::Deserializer::from_str(body).into_iter::<&RawValue>();
    match values
        .map(|v| v.map(RawValue::get))
        .collect::<Result<Vec<_>, _>>()
    {
        Ok(texts) => Some(texts),
        Err(_) => Some(vec![body.trim()]),
    }
}

/// Notes what the client must learn from a received message; true when it answers `id`.
fn observe(session: &Session, message: &Received, id: Option<u64>, initialize: bool) -> bool {
    let (Some(id), Some(answered)) = (id, message.answer_id()) else {
        return false;
    };
    if answered.get().parse::<u64>().ok() != Some(id) {
        return false;
    }
    if let (true, Received::Response { result, .. }) = (initialize, message) {
        let version = Members::of(result).and_then(|m| m.string("protocolVersion"));
        let modern = Version::MODERN.as_str();
        // A discover result names no version of its own: the session speaks 2026-07-28 when it
        // lists that.
        let version = version.or_else(|| {
            let listed = Members::of(result)?.get("supportedVersions")?;
            let listed: Vec<&str> = serde_json::from_str(listed.get()).ok()?;
            listed.contains(&modern).then(|| modern.to_owned())
        });
        if let Some(version) = version.and_then(|v| HeaderValue::from_str(&v).ok()) {
            *lock(&session.0.version) = Some(version);
        }
    }
    true
}

/// Ends the HTTP session (DELETE), when there is one.
pub(super) async fn end(shared: &Shared, session: &Session) {
    let Some(id) = session.id() else {
        return;
    };
    let request = shared
        .client
        .delete(shared.url.clone())
        .headers(shared.headers())
        .header(SESSION_HEADER, id);
    let mut request = shared.authorized(request, "DELETE", &shared.url);
    if let Some(version) = session.version() {
        request = request.header(VERSION_HEADER, version);
    }
    let _ = request.send().await;
}

/// A successful JSON body, at most `max_message_bytes`.
async fn read_body(shared: &Shared, mut response: reqwest::Response) -> Result<String, Closed> {
    let max = shared.max_message_bytes;
    if response.content_length().is_some_and(|n| n > max as u64) {
        return Err(Closed::TooLong(max));
    }
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| Closed::Io(format!("reading its answer failed: {}", error_chain(&e))))?
    {
        body.extend_from_slice(&chunk);
        if body.len() > max {
            return Err(Closed::TooLong(max));
        }
    }
    String::from_utf8(body).map_err(|_| Closed::Protocol("an answer that is not UTF-8".into()))
}

/// The start of an error answer's body, for messages (only that much is read: an error answer
/// of any size costs no more).
pub(super) async fn excerpt(response: reqwest::Response) -> String {
    // Four bytes per character at most, so BODY_EXCERPT characters fit.
    let start = crate::http_body::read_start(response, BODY_EXCERPT * 4).await;
    let text = String::from_utf8_lossy(&start);
    let text: String = text.trim().chars().take(BODY_EXCERPT).collect();
    if text.is_empty() {
        "(no body)".into()
    } else {
        text
    }
}

/// An error with its causes (reqwest's own message alone says little, e.g. "error sending request").
/// The `WWW-Authenticate` value of a refusal, if any.
pub(super) fn challenge_of(response: &reqwest::Response) -> Option<String> {
    let value = response.headers().get(reqwest::header::WWW_AUTHENTICATE)?;
    value.to_str().ok().map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_json_answer_is_one_message_a_batch_or_several_in_a_row() {
        assert_eq!(messages_of(" {\"a\":1}\n"), Some(vec!["{\"a\":1}"]));
        assert_eq!(
            messages_of("[{\"a\":1},{\"b\":2}]"),
            Some(vec!["{\"a\":1}", "{\"b\":2}"])
        );
        assert_eq!(
            messages_of("{\"a\":1}\n{\"b\":2}\n"),
            Some(vec!["{\"a\":1}", "{\"b\":2}"])
        );
        assert_eq!(messages_of("[]"), None);
        // What is not JSON stays whole: its parse says why.
        assert_eq!(messages_of("oops {"), Some(vec!["oops {"]));
    }

    #[test]
    fn a_forgotten_session_is_told_from_other_refusals() {
        assert!(forgot_session(StatusCode::NOT_FOUND, ""));
        let ts_sdk = r#"{"jsonrpc":"2.0","error":{"code":-32000,"message":"Bad Request: No valid session ID provided"}}"#;
        assert!(forgot_session(StatusCode::BAD_REQUEST, ts_sdk));
        assert!(!forgot_session(StatusCode::BAD_REQUEST, "invalid params"));
        assert!(!forgot_session(
            StatusCode::INTERNAL_SERVER_ERROR,
            "session store down"
        ));
    }
}
