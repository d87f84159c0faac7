//! Newline framing for the stdio transport: one JSON-RPC message per line, bounded in size.

use tokio_util::codec::LinesCodec;

/// A line codec that refuses lines longer than `max_bytes` instead of buffering them without end.
pub fn line_codec(max_bytes: usize) -> LinesCodec {
    LinesCodec::new_with_max_length(max_bytes)
}
