//! Newline framing for the stdio transport: one JSON-RPC message per line, bounded in size.

use tokio_util::codec::LinesCodec;

/// Largest line accepted from a stdio peer by default. A longer line is a broken peer, not a message.
pub const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// A line codec that refuses lines longer than `max_bytes` instead of buffering them without end.
pub fn line_codec(max_bytes: usize) -> LinesCodec {
    LinesCodec::new_with_max_length(max_bytes)
}
