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
    // A request's body nearly always arrives as one chunk: it is kept as it came, and a list
    // (and a copy into one buffer) is made only for a body in several.
    let mut first: Option<Bytes> = None;
    let mut more: Vec<Bytes> = Vec::new();
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
        match first {
            None => first = Some(chunk),
            Some(_) => more.push(chunk),
        }
    }
    Ok(match first {
        None => Bytes::new(),
        Some(only) if more.is_empty() => only,
        Some(first) => {
            let mut whole = Vec::with_capacity(len);
            whole.extend_from_slice(&first);
            more.iter().for_each(|chunk| whole.extend_from_slice(chunk));
            whole.into()
        }
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn chunked(chunks: &[&'static str]) -> Body {
        let chunks = chunks
            .iter()
            .map(|c| Ok::<_, std::io::Error>(Bytes::from(*c)));
        Body::from_stream(futures_util::stream::iter(chunks.collect::<Vec<_>>()))
    }

    #[tokio::test]
    async fn a_body_in_one_chunk_or_several_is_read_whole() {
        let one = read(chunked(&[r#"{"a":1}"#]), 64).await.ok().unwrap();
        assert_eq!(&one[..], br#"{"a":1}"#);
        let several = read(chunked(&["{\"a\"", ":", "1}"]), 64)
            .await
            .ok()
            .unwrap();
        assert_eq!(&several[..], br#"{"a":1}"#);
        let none = read(chunked(&[]), 64).await.ok().unwrap();
        assert!(none.is_empty());
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_refused_with_the_limit() {
        match read(chunked(&["12345", "67890"]), 8).await {
            Err(BodyError::TooLarge(limit)) => assert_eq!(limit, 8),
            _ => panic!("a 10-byte body passed an 8-byte limit"),
        }
    }
}
