//! Reading a host's request body within `max_body_bytes`. A larger body is still read to its
//! end (within a bound) before the 413 is sent: closing the connection while the host is still
//! sending resets it, and the host would see a reset instead of the refusal.

use std::time::Duration;

use axum::body::{Body, Bytes};
use futures_util::StreamExt;

/// How much of an oversized body is read (and dropped) so the refusal reaches the host.
const DRAIN_MAX: usize = 64 * 1024 * 1024;
/// How long reading an oversized body may take.
const DRAIN_TIME: Duration = Duration::from_secs(10);

/// Why a body was not read.
pub(super) enum BodyError {
    /// Larger than the limit (in bytes).
    TooLarge(usize),
    /// The host stopped sending it halfway.
    Broken,
}

/// The body, at most `limit` bytes.
pub(super) async fn read(body: Body, limit: usize) -> Result<Bytes, BodyError> {
    let mut stream = body.into_data_stream();
    let mut parts: Vec<Bytes> = Vec::new();
    let mut len = 0usize;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|_| BodyError::Broken)?;
        len += chunk.len();
        if len > limit {
            // Read on (dropping it) so the host gets to read the refusal.
            let drained = tokio::time::timeout(DRAIN_TIME, async {
                let mut extra = 0usize;
                while let Some(Ok(chunk)) = stream.next().await {
                    extra += chunk.len();
                    if extra > DRAIN_MAX {
                        return;
                    }
                }
            });
            let _ = drained.await;
            return Err(BodyError::TooLarge(limit));
        }
        parts.push(chunk);
    }
    Ok(match parts.len() {
        0 => Bytes::new(),
        1 => parts.swap_remove(0),
        _ => parts.concat().into(),
    })
}
