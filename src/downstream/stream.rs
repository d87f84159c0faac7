//! A host request's own stream: what the request produces before its answer (progress, log
//! messages, server requests), from the upstream side that produces it ([`Sink`], held by the
//! request's callers) to the response that carries it ([`RequestStream`], held by the HTTP
//! handler answering the request).
//!
//! Every request over HTTP gets one, and almost none carries anything: an echo call produces no
//! progress. So it costs one small allocation and no lock until a line is sent — a tokio `mpsc`
//! channel allocates its state and a block of 32 slots up front, and creating, polling and
//! dropping it was about 3% of a forwarded call's instructions.
//!
//! What a channel would add is not needed here: the stream never ends by itself (the request's
//! answer ends it), and there is one receiver. The legacy HTTP+SSE transport has no stream per
//! request: its session's one stream (a channel) carries what every request produces.

use std::collections::VecDeque;
use std::future::poll_fn;
use std::sync::{Arc, Mutex};
use std::task::Poll;

use futures_util::task::AtomicWaker;
use tokio::sync::mpsc;

use crate::sync::lock;

/// The sending side: cloned into whatever may speak for the request.
#[derive(Clone, Debug)]
pub enum Sink {
    /// The request's own stream.
    Request(Arc<Shared>),
    /// The legacy HTTP+SSE session's stream, which carries every request's answer too.
    Session(mpsc::Sender<String>),
}

/// The receiving side; dropping it closes the stream (the request was answered or abandoned).
#[derive(Debug)]
pub struct RequestStream(Arc<Shared>);

/// Why a line was not taken.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// The stream holds as many lines as it may: the line is given back.
    Full(String),
    /// The request has ended: its stream is read no more.
    Closed,
}

#[derive(Debug)]
pub struct Shared {
    queue: Mutex<Queue>,
    /// The response waiting for the next line.
    reader: AtomicWaker,
    capacity: usize,
}

#[derive(Debug, Default)]
struct Queue {
    lines: VecDeque<String>,
    closed: bool,
}

/// A new stream holding at most `capacity` unread lines.
pub fn request_stream(capacity: usize) -> (Sink, RequestStream) {
    let shared = Arc::new(Shared {
        queue: Mutex::new(Queue::default()),
        reader: AtomicWaker::new(),
        capacity,
    });
    (Sink::Request(Arc::clone(&shared)), RequestStream(shared))
}

impl Sink {
    /// Queues `line` for the request's response, unless the stream is full or closed.
    pub fn try_send(&self, line: String) -> Result<(), Refused> {
        let shared = match self {
            Self::Request(shared) => shared,
            Self::Session(channel) => {
                return channel.try_send(line).map_err(|refused| match refused {
                    mpsc::error::TrySendError::Full(line) => Refused::Full(line),
                    mpsc::error::TrySendError::Closed(_) => Refused::Closed,
                });
            }
        };
        {
            let mut queue = lock(&shared.queue);
            if queue.closed {
                return Err(Refused::Closed);
            }
            if queue.lines.len() >= shared.capacity {
                return Err(Refused::Full(line));
            }
            queue.lines.push_back(line);
        }
        shared.reader.wake();
        Ok(())
    }

    /// Whether the request has ended (its stream is read no more).
    pub fn is_closed(&self) -> bool {
        match self {
            Self::Request(shared) => lock(&shared.queue).closed,
            Self::Session(channel) => channel.is_closed(),
        }
    }
}

impl RequestStream {
    /// The next line, if one is queued.
    pub fn try_recv(&mut self) -> Option<String> {
        lock(&self.0.queue).lines.pop_front()
    }

    /// The next line, when one comes (the stream does not end by itself).
    pub async fn recv(&mut self) -> String {
        poll_fn(|cx| {
            self.0.reader.register(cx.waker());
            match self.try_recv() {
                Some(line) => Poll::Ready(line),
                None => Poll::Pending,
            }
        })
        .await
    }
}

impl Drop for RequestStream {
    fn drop(&mut self) {
        let mut queue = lock(&self.0.queue);
        queue.closed = true;
        queue.lines.clear();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn lines_arrive_in_order_and_wake_the_reader() {
        let (sink, mut stream) = request_stream(4);
        assert_eq!(stream.try_recv(), None);
        let waiting = tokio::spawn(async move {
            let first = stream.recv().await;
            let second = stream.recv().await;
            (first, second)
        });
        tokio::task::yield_now().await;
        sink.clone().try_send("one".into()).unwrap();
        sink.try_send("two".into()).unwrap();
        assert_eq!(waiting.await.unwrap(), ("one".into(), "two".into()));
    }

    #[test]
    fn a_full_stream_gives_the_line_back_and_a_closed_one_takes_nothing() {
        let (sink, mut stream) = request_stream(1);
        sink.try_send("kept".into()).unwrap();
        assert_eq!(
            sink.try_send("over".into()),
            Err(Refused::Full("over".into()))
        );
        assert_eq!(stream.try_recv().as_deref(), Some("kept"));
        sink.try_send("next".into()).unwrap();
        assert!(!sink.is_closed());
        drop(stream);
        assert!(sink.is_closed());
        assert_eq!(sink.try_send("late".into()), Err(Refused::Closed));
    }
}
