//! Streamable HTTP at `/mcp`. A request answered at once gets an `application/json` answer; one
//! answered later (`slow`, `progress`, the tools that ask the client) gets a `text/event-stream`
//! that carries what the server sends meanwhile (its progress, its own requests) and ends with
//! the answer. Notifications and responses get 202. `initialize` opens a session and answers
//! its `Mcp-Session-Id`; a later POST without one is 400, with an unknown one 404. GET opens the
//! session's standalone stream (notifications not tied to a request: log messages, resource
//! updates, list changes, task status); DELETE ends the session.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde_json::Value;
use tokio::sync::mpsc as tmpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;

use super::{App, HttpFault, Kind, Session, event_stream, fault_events, plain};
use crate::wire::Outcome;

const SESSION_HEADER: &str = "mcp-session-id";

pub(super) async fn on_post(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(refused) = app.refuses(&headers) {
        return refused;
    }
    if app.down() {
        return plain(StatusCode::SERVICE_UNAVAILABLE, "down (injected fault)");
    }
    let Ok(message) = serde_json::from_slice::<Value>(&body) else {
        return plain(
            StatusCode::BAD_REQUEST,
            "the body is not one JSON-RPC message",
        );
    };
    app.record(&body);
    let tool = message.pointer("/params/name").and_then(Value::as_str);
    if app.oauth.is_some() && tool.is_some() && tool == app.args.oauth_scope_tool.as_deref() {
        return super::oauth::insufficient_scope(&super::oauth::origin(&headers));
    }
    let method = message.get("method").and_then(Value::as_str);
    if method == Some("initialize") {
        if let Some(delay) = app.initialize_delay() {
            tokio::time::sleep(delay).await;
        }
    }
    if matches!(app.call_fault(&message), Some(HttpFault::ForgetSessions)) && app.forget_sessions()
    {
        return plain(StatusCode::NOT_FOUND, "unknown session (injected fault)");
    }
    let (new_id, session) = if method == Some("initialize") {
        let (id, session) = app.open_session(Kind::Streamable);
        (Some(id), session)
    } else {
        match session_of(&app, &headers) {
            Ok(session) => (None, session),
            Err((status, why)) => return plain(status, why),
        }
    };
    let Some(id) = message.get("id").filter(|_| method.is_some()).cloned() else {
        // A notification or the client's answer to one of our requests.
        let _ = session.server.handle_line(&body);
        return StatusCode::ACCEPTED.into_response();
    };
    match app.call_fault(&message) {
        Some(HttpFault::Endless500) => return super::endless_500(),
        Some(HttpFault::Reset) => super::reset(),
        Some(HttpFault::Status500) => {
            return plain(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal error (injected fault)",
            );
        }
        Some(HttpFault::Hang) => std::future::pending::<()>().await,
        Some(HttpFault::GarbageJson) => {
            return (
                [(header::CONTENT_TYPE, "application/json")],
                "<html><body>502 Bad Gateway (injected fault)</body></html>",
            )
                .into_response();
        }
        Some(fault) => {
            if let Some(events) = fault_events(fault) {
                return event_stream(events);
            }
        }
        None => {}
    }
    let key = id.to_string();
    let (tx, rx) = tmpsc::unbounded_channel();
    if let Ok(mut waiting) = session.waiting.lock() {
        let token = message
            .pointer("/params/_meta/progressToken")
            .map(Value::to_string);
        waiting.push((key.clone(), token, tx));
    }
    let guard = Unregister {
        session: Arc::clone(&session),
        key,
    };
    let mut response =
        match super::with_authorization(&headers, || session.server.handle_line(&body)) {
            Outcome::Reply(text) => {
                drop(guard);
                ([(header::CONTENT_TYPE, "application/json")], text).into_response()
            }
            Outcome::Silent => answer_stream(rx, id, guard),
            Outcome::Exit(code) => {
                eprintln!("test upstream exiting mid-call with status {code}");
                std::process::exit(code);
            }
        };
    if let Some(session) = new_id.and_then(|s| s.parse().ok()) {
        response.headers_mut().insert(SESSION_HEADER, session);
    }
    response
}

/// The standalone stream of the session named by the request, replacing an earlier one.
pub(super) async fn on_get(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    if let Some(refused) = app.refuses(&headers) {
        return refused;
    }
    if app.down() {
        return plain(StatusCode::SERVICE_UNAVAILABLE, "down (injected fault)");
    }
    let session = match session_of(&app, &headers) {
        Ok(session) => session,
        Err((status, why)) => return plain(status, why),
    };
    let (tx, rx) = tmpsc::unbounded_channel::<Bytes>();
    if let Ok(mut standalone) = session.standalone.lock() {
        *standalone = Some(tx);
    }
    let events = UnboundedReceiverStream::new(rx).map(Ok::<_, Infallible>);
    event_stream(Body::from_stream(events))
}

pub(super) async fn on_delete(State(app): State<Arc<App>>, headers: HeaderMap) -> Response {
    let id = headers.get(SESSION_HEADER).and_then(|v| v.to_str().ok());
    if id.is_some_and(|id| app.close_session(id)) {
        StatusCode::OK.into_response()
    } else {
        plain(StatusCode::NOT_FOUND, "unknown session")
    }
}

/// The session a request names in `Mcp-Session-Id`, or the refusal: 400 without one, 404 for
/// one this process does not know.
fn session_of(app: &App, headers: &HeaderMap) -> Result<Arc<Session>, (StatusCode, &'static str)> {
    let given = headers.get(SESSION_HEADER).and_then(|v| v.to_str().ok());
    match given {
        None => Err((StatusCode::BAD_REQUEST, "no Mcp-Session-Id header")),
        Some(id) => app
            .session(id)
            .ok_or((StatusCode::NOT_FOUND, "unknown session")),
    }
}

/// Takes a POST's channel out of the waiting list when its stream ends (or is dropped).
struct Unregister {
    session: Arc<Session>,
    key: String,
}

impl Drop for Unregister {
    fn drop(&mut self) {
        if let Ok(mut waiting) = self.session.waiting.lock() {
            waiting.retain(|(k, _, _)| *k != self.key);
        }
    }
}

/// The event stream of a POST answered later: each message routed to it, until the answer to
/// `id`.
fn answer_stream(rx: tmpsc::UnboundedReceiver<String>, id: Value, guard: Unregister) -> Response {
    let events =
        futures_util::stream::unfold((rx, id, Some(guard)), |(mut rx, id, guard)| async move {
            guard.as_ref()?;
            let line = rx.recv().await?;
            let parsed: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
            let last = parsed.get("method").is_none() && parsed.get("id") == Some(&id);
            let event = Ok::<_, Infallible>(super::event(&line));
            Some((event, (rx, id, (!last).then_some(guard).flatten())))
        });
    event_stream(Body::from_stream(events))
}
