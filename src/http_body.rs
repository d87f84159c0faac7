//! Reading the body of an HTTP response mcpmux fetched — OAuth metadata, tokens and
//! registrations, JSON Web Key Sets, an upstream's error answer — within a size limit, so a
//! server (or whoever sits on a plain-http path) cannot make the daemon buffer without bound.
//! [`read_bounded`] refuses a body over its limit; [`read_start`] keeps only its start (for
//! messages that quote it). [`error_chain`] says why a fetch failed, with the causes the HTTP
//! client nests inside its error ("error sending request" alone names none).

use bytes::{Bytes, BytesMut};

/// The limit for small JSON documents (metadata, tokens, registrations, key sets): real ones are
/// a few KiB.
pub const DOCUMENT_LIMIT: usize = 1024 * 1024;

/// Why a body was not read.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    #[error("{what} is larger than {}, mcpmux's limit for it", size(*limit))]
    TooLarge { what: String, limit: usize },
    #[error("reading {what} failed: {reason}")]
    Read { what: String, reason: String },
}

/// `limit` as people write it: whole MiB as MiB, else bytes.
fn size(limit: usize) -> String {
    const MIB: usize = 1024 * 1024;
    if limit >= MIB && limit % MIB == 0 {
        format!("{} MiB", limit / MIB)
    } else {
        format!("{limit} bytes")
    }
}

/// The whole body of `response`, at most `limit` bytes; `what` names it in the error (e.g.
/// "the token endpoint's answer"). A `Content-Length` over the limit is refused before reading.
pub async fn read_bounded(
    mut response: reqwest::Response,
    limit: usize,
    what: &str,
) -> Result<Bytes, BodyError> {
    let too_large = || BodyError::TooLarge {
        what: what.to_owned(),
        limit,
    };
    let declared = response.content_length().unwrap_or(0);
    if declared > u64::try_from(limit).unwrap_or(u64::MAX) {
        return Err(too_large());
    }
    let mut body = BytesMut::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| BodyError::Read {
        what: what.to_owned(),
        reason: e.to_string(),
    })? {
        if body.len() + chunk.len() > limit {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body.freeze())
}

/// The first `limit` bytes of `response`'s body (all of it if shorter); the rest is not read.
/// A body that breaks off gives what arrived before.
pub async fn read_start(mut response: reqwest::Response, limit: usize) -> Bytes {
    let mut body = BytesMut::new();
    while body.len() < limit {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                let room = limit - body.len();
                body.extend_from_slice(&chunk[..chunk.len().min(room)]);
            }
            Ok(None) | Err(_) => break,
        }
    }
    body.freeze()
}

/// `e` with its sources, as one line.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        source = cause.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn response(body: reqwest::Body) -> reqwest::Response {
        reqwest::Response::from(axum::http::Response::new(body))
    }

    /// A body of `chunks` chunks of `size` bytes, with no `Content-Length`.
    fn streamed(chunks: usize, size: usize) -> reqwest::Response {
        let stream = futures_util::stream::iter(
            (0..chunks).map(move |_| Ok::<_, std::io::Error>(Bytes::from(vec![b'x'; size]))),
        );
        response(reqwest::Body::wrap_stream(stream))
    }

    #[tokio::test]
    async fn a_body_within_the_limit_is_read_whole() {
        let body = read_bounded(streamed(4, 100), 400, "the answer").await;
        assert_eq!(body.map(|b| b.len()).map_err(|e| e.to_string()), Ok(400));
    }

    #[tokio::test]
    async fn a_body_over_the_limit_is_refused_naming_it() {
        let refused = read_bounded(streamed(5, 100), 400, "the token endpoint's answer").await;
        let message = refused.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            message.contains("the token endpoint's answer") && message.contains("400 bytes"),
            "{message}"
        );
        let declared = response(reqwest::Body::from(vec![b'x'; 500]));
        assert!(matches!(
            read_bounded(declared, 400, "it").await,
            Err(BodyError::TooLarge { limit: 400, .. })
        ));
    }

    #[tokio::test]
    async fn the_start_of_a_body_is_all_that_is_read() {
        assert_eq!(read_start(streamed(1000, 1000), 300).await.len(), 300);
        assert_eq!(read_start(streamed(1, 10), 300).await.len(), 10);
    }
}
