//! The event streams of a Streamable HTTP session: an answer's stream (resumed with
//! `Last-Event-ID` when it ends before the answer) and the standalone GET stream, which carries
//! what the server sends unasked and is reconnected with backoff (a 405 means it offers none).

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;

use super::super::Shared;
use super::super::events::events;
use crate::http_body::error_chain;
use reqwest::StatusCode;
use reqwest::header::ACCEPT;

use super::{
    Reading, SESSION_HEADER, Session, VERSION_HEADER, challenge_of, excerpt, forgot_session,
    observe, renew,
};
use crate::upstream::error::Closed;

/// Reconnection delays of the GET stream, and of resuming an answer's stream.
const MIN_RETRY: Duration = Duration::from_millis(500);
const MAX_RETRY: Duration = Duration::from_secs(30);
/// Times an answer's stream is resumed before its request fails.
const MAX_RESUMES: usize = 5;

/// Reads an answer's event stream, resuming it when it ends before the answer. `Ok`: whether the
/// answer to `id` arrived; `Err`: what is wrong with the stream (an event that is not JSON-RPC,
/// or too long), said of the upstream — the request fails alone.
pub(super) async fn read_answer(
    shared: &Arc<Shared>,
    session: &Session,
    mut response: reqwest::Response,
    id: Option<u64>,
    reading: Reading,
) -> Result<bool, String> {
    let mut resume = Resume::default();
    for _ in 0..=MAX_RESUMES {
        let mut stream = events(response, shared.max_message_bytes);
        loop {
            let event = tokio::select! {
                () = shared.stop.cancelled() => return Ok(true),
                event = stream.next() => event,
            };
            match event {
                Some(Ok(event)) => {
                    resume.note(&event);
                    if !is_message(&event) {
                        continue;
                    }
                    let message = match crate::upstream::transport::receive(&event.data) {
                        Some(Ok(message)) => message,
                        Some(Err(closed)) => {
                            return Err(format!("answered a POST with an event stream: {closed}"));
                        }
                        None => continue,
                    };
                    let answered = observe(session, &message, id, reading.opens());
                    if !(answered && reading == Reading::Renewal) {
                        shared.deliver_on_stream_of(message, id).await;
                    }
                    if answered {
                        return Ok(true);
                    }
                }
                Some(Err(Closed::TooLong(max))) => {
                    return Err(format!(
                        "answered a POST with an event of more than {max} bytes (max_message_bytes)"
                    ));
                }
                Some(Err(_)) | None => break,
            }
        }
        // The stream ended before the answer: resume it, if the server numbered its events.
        let Some(last) = resume.last_id.clone() else {
            return Ok(id.is_none());
        };
        tokio::time::sleep(resume.retry).await;
        match get(shared, session, Some(&last)).await {
            Ok(resumed) if resumed.status().is_success() => response = resumed,
            _ => return Ok(id.is_none()),
        }
    }
    Ok(id.is_none())
}

/// Where an event stream left off, and how long to wait before asking for the rest.
struct Resume {
    last_id: Option<String>,
    retry: Duration,
}

impl Default for Resume {
    fn default() -> Self {
        Self {
            last_id: None,
            retry: MIN_RETRY,
        }
    }
}

impl Resume {
    /// Keeps an event's id (for `Last-Event-ID`) and the server's `retry`.
    fn note(&mut self, event: &super::super::events::Event) {
        if !event.id.is_empty() {
            self.last_id = Some(event.id.clone());
        }
        if let Some(retry) = event.retry {
            self.retry = retry.clamp(MIN_RETRY, MAX_RETRY);
        }
    }

    /// Waits longer after a failed reconnection, up to the most.
    fn back_off(&mut self) {
        self.retry = (self.retry * 2).min(MAX_RETRY);
    }
}

/// A default (`message`) event with data.
fn is_message(event: &super::super::events::Event) -> bool {
    (event.event.is_empty() || event.event == "message") && !event.data.trim().is_empty()
}

/// The standalone GET stream: what the server sends unasked, reconnected with backoff.
pub(super) async fn listen(shared: Arc<Shared>, session: Session) {
    let mut resume = Resume::default();
    loop {
        let used = session.id();
        let response = tokio::select! {
            () = shared.stop.cancelled() => return,
            response = get(&shared, &session, resume.last_id.as_deref()) => response,
        };
        session.0.stream_ready.send_replace(true);
        match response {
            Ok(r) if r.status() == StatusCode::METHOD_NOT_ALLOWED => return,
            // A server without sessions that does not route GET at all: no stream either.
            Ok(r) if r.status() == StatusCode::NOT_FOUND && session.id().is_none() => return,
            Ok(r) if r.status().is_success() => {
                resume.retry = MIN_RETRY;
                let mut stream = events(r, shared.max_message_bytes);
                loop {
                    let event = tokio::select! {
                        () = shared.stop.cancelled() => return,
                        event = stream.next() => event,
                    };
                    match event {
                        Some(Ok(event)) => {
                            resume.note(&event);
                            if is_message(&event) {
                                shared.deliver_text(&event.data).await;
                            }
                        }
                        Some(Err(Closed::TooLong(max))) => {
                            return shared.close(Closed::TooLong(max)).await;
                        }
                        Some(Err(_)) | None => break,
                    }
                }
            }
            Ok(r) => {
                let status = r.status();
                if matches!(status.as_u16(), 401 | 403) {
                    shared.diagnostics.set_challenge(challenge_of(&r));
                }
                let why = format!(
                    "HTTP {status} from upstream `{}` to its GET stream: {}",
                    shared.upstream,
                    excerpt(r).await
                );
                shared.note(why.clone());
                match status {
                    StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
                        return shared.close(Closed::Unauthorized(why)).await;
                    }
                    // The server forgot the session: a new one takes its place, and this
                    // stream is opened again in it at once (its events were the old session's).
                    s if used.is_some() && forgot_session(s, &why) => {
                        match renew(&shared, &session, used.as_ref()).await {
                            Ok(()) => {
                                resume = Resume::default();
                                continue;
                            }
                            Err(failed) => {
                                let why = format!(
                                    "its HTTP session expired ({s}) and a new one could not be opened ({failed}); it is started again"
                                );
                                return shared.close(Closed::SessionExpired(why)).await;
                            }
                        }
                    }
                    _ => resume.back_off(),
                }
            }
            Err(e) => {
                shared.note(format!("its GET stream failed: {}", error_chain(&e)));
                resume.back_off();
            }
        }
        tokio::select! {
            () = shared.stop.cancelled() => return,
            () = tokio::time::sleep(resume.retry) => {}
        }
    }
}

/// A GET of the session's event stream, resuming after `last_id` when given.
async fn get(
    shared: &Shared,
    session: &Session,
    last_id: Option<&str>,
) -> Result<reqwest::Response, reqwest::Error> {
    let request = shared
        .client
        .get(shared.url.clone())
        .headers(shared.headers())
        .header(ACCEPT, "text/event-stream");
    let mut request = shared.authorized(request, "GET", &shared.url);
    if let Some(id) = session.id() {
        request = request.header(SESSION_HEADER, id);
    }
    if let Some(version) = session.version() {
        request = request.header(VERSION_HEADER, version);
    }
    if let Some(last) = last_id {
        request = request.header("last-event-id", last);
    }
    request.send().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resuming_keeps_the_last_id_and_the_servers_retry_within_bounds() {
        let mut resume = Resume::default();
        let event = |id: &str, retry: Option<Duration>| super::super::super::events::Event {
            event: String::new(),
            data: "{}".into(),
            id: id.into(),
            retry,
        };
        resume.note(&event("7", Some(Duration::from_secs(3600))));
        resume.note(&event("", None));
        assert_eq!(resume.last_id.as_deref(), Some("7"));
        assert_eq!(resume.retry, MAX_RETRY);
        resume.note(&event("8", Some(Duration::from_millis(1))));
        assert_eq!(resume.retry, MIN_RETRY);
        resume.back_off();
        assert_eq!(resume.retry, MIN_RETRY * 2);
    }
}
