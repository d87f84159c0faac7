//! The legacy HTTP+SSE transport (2024-11-05): a GET of `/sse` opens a session and its event
//! stream, whose first event (`endpoint`) names `/messages?session_id=ID`; each message is
//! POSTed there and answered 202, and everything the server sends — answers included — comes
//! on the stream. The session ends with its stream. The `tools/call` faults send their events on
//! the stream (`hang`: the call is never answered).

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::mpsc as tmpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;

use super::{App, HttpFault, Kind, event_stream, huge_event, plain};
use crate::wire::{Out, Outcome};

pub(super) async fn on_get(State(app): State<Arc<App>>) -> Response {
    if app.down() {
        return plain(StatusCode::SERVICE_UNAVAILABLE, "down (injected fault)");
    }
    let (id, session) = app.open_session(Kind::Legacy);
    let (tx, rx) = tmpsc::unbounded_channel::<Bytes>();
    let endpoint = format!("event: endpoint\ndata: /messages?session_id={id}\n\n");
    let _ = tx.send(Bytes::from(endpoint));
    if let Ok(mut standalone) = session.standalone.lock() {
        *standalone = Some(tx);
    }
    let closer = CloseOnDrop { app, id };
    let events = UnboundedReceiverStream::new(rx).map(move |chunk| {
        let _ = &closer;
        Ok::<_, Infallible>(chunk)
    });
    event_stream(Body::from_stream(events))
}

#[derive(Deserialize)]
pub(super) struct Target {
    session_id: Option<String>,
}

pub(super) async fn on_post(
    State(app): State<Arc<App>>,
    Query(target): Query<Target>,
    body: Bytes,
) -> Response {
    if app.down() {
        return plain(StatusCode::SERVICE_UNAVAILABLE, "down (injected fault)");
    }
    let Some(session) = target.session_id.as_deref().and_then(|id| app.session(id)) else {
        return plain(StatusCode::NOT_FOUND, "unknown session");
    };
    let Ok(message) = serde_json::from_slice::<Value>(&body) else {
        return plain(
            StatusCode::BAD_REQUEST,
            "the body is not one JSON-RPC message",
        );
    };
    app.record(&body);
    if message.get("method").and_then(Value::as_str) == Some("initialize") {
        if let Some(delay) = app.initialize_delay() {
            tokio::time::sleep(delay).await;
        }
    }
    let stream = session.standalone.lock().ok().and_then(|s| s.clone());
    match app.call_fault(&message) {
        Some(HttpFault::Endless500) => return super::endless_500(),
        Some(HttpFault::Reset) => super::reset(),
        Some(HttpFault::Status500) => {
            return plain(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal error (injected fault)",
            );
        }
        Some(HttpFault::Hang) => return StatusCode::ACCEPTED.into_response(),
        Some(HttpFault::GarbageSse | HttpFault::GarbageJson) => {
            if let Some(tx) = stream {
                let garbage = "event: message\ndata: this is not JSON, just garbage\n\n";
                let _ = tx.send(Bytes::from_static(garbage.as_bytes()));
            }
            return StatusCode::ACCEPTED.into_response();
        }
        Some(HttpFault::HugeEvent(bytes)) => {
            if let Some(tx) = stream {
                let chunks = huge_event(*bytes);
                tokio::spawn(async move {
                    futures_util::pin_mut!(chunks);
                    while let Some(chunk) = chunks.next().await {
                        if tx.send(chunk).is_err() {
                            return;
                        }
                    }
                });
            }
            return StatusCode::ACCEPTED.into_response();
        }
        Some(HttpFault::ForgetSessions) if app.forget_sessions() => {
            return plain(StatusCode::NOT_FOUND, "unknown session (injected fault)");
        }
        Some(HttpFault::DownWhile(_) | HttpFault::ForgetSessions) | None => {}
    }
    match session.server.handle_line(&body) {
        // Through the server's own channel, so it follows what the server sent before it.
        Outcome::Reply(text) => {
            let _ = session.server.out.send(Out::Line(text));
        }
        Outcome::Silent => {}
        Outcome::Exit(code) => {
            eprintln!("test upstream exiting mid-call with status {code}");
            std::process::exit(code);
        }
    }
    StatusCode::ACCEPTED.into_response()
}

/// Ends a legacy session when its stream goes.
struct CloseOnDrop {
    app: Arc<App>,
    id: String,
}

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.app.close_session(&self.id);
    }
}
