//! What a client sends on its streams, queued for the session with a bound
//! in bytes: all the streams of one connection share a budget, and a chunk
//! takes its bytes from it until the session has taken the chunk. A stream
//! whose session does not read it is closed, and what comes on it is
//! dropped, never queued. When the budget is spent, the transport stops
//! reading the connection, which slows the client down through TCP.

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

/// The most one piece takes of the budget: larger chunks are split.
pub(crate) const PIECE: usize = 64 << 10;
/// The budget of one connection: what its streams may hold queued in all.
pub(crate) const CONNECTION_BUDGET: usize = 1 << 20;

/// The bytes one connection's streams may hold queued.
#[derive(Clone)]
pub(crate) struct Budget(Arc<Semaphore>);

impl Budget {
    pub(crate) fn new(bytes: usize) -> Self {
        Self(Arc::new(Semaphore::new(bytes.max(PIECE))))
    }

    /// A new stream's queue.
    pub(crate) fn stream(&self) -> (ChunkSender, ChunkReceiver) {
        let (tx, rx) = mpsc::unbounded_channel();
        (ChunkSender { tx, budget: self.0.clone() }, ChunkReceiver { rx })
    }
}

/// The session is not reading this stream (any more).
#[derive(Debug)]
pub(crate) struct Closed;

/// The transport's end of a stream's queue.
pub(crate) struct ChunkSender {
    tx: mpsc::UnboundedSender<(Bytes, OwnedSemaphorePermit)>,
    budget: Arc<Semaphore>,
}

impl ChunkSender {
    /// Queues `data`, waiting while the connection's budget is spent.
    pub(crate) async fn send(&self, mut data: Bytes) -> Result<(), Closed> {
        while !data.is_empty() {
            if self.tx.is_closed() {
                return Err(Closed);
            }
            let piece = data.split_to(data.len().min(PIECE));
            let permit = self.budget.clone().acquire_many_owned(piece.len() as u32).await.map_err(|_| Closed)?;
            self.tx.send((piece, permit)).map_err(|_| Closed)?;
        }
        Ok(())
    }

    /// True once the session stopped reading the stream.
    #[cfg(test)]
    pub(crate) fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

/// The session's end of a stream's queue.
pub(crate) struct ChunkReceiver {
    rx: mpsc::UnboundedReceiver<(Bytes, OwnedSemaphorePermit)>,
}

impl ChunkReceiver {
    /// The next chunk (its bytes go back to the budget); None at the
    /// client's end of the stream.
    pub(crate) async fn recv(&mut self) -> Option<Bytes> {
        self.rx.recv().await.map(|(data, _permit)| data)
    }

    /// Stops reading: what is queued goes back to the budget, and what the
    /// client sends from now on is dropped.
    pub(crate) fn close(&mut self) {
        self.rx.close();
        while self.rx.try_recv().is_ok() {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_connection_holds_at_most_its_budget_and_an_unread_stream_nothing() {
        let budget = Budget::new(2 * PIECE);
        let (tx, mut rx) = budget.stream();
        tx.send(Bytes::from(vec![1u8; PIECE + 10])).await.unwrap();
        // The budget is spent: the next piece waits until the session reads.
        let blocked =
            tokio::time::timeout(std::time::Duration::from_millis(50), tx.send(Bytes::from(vec![2u8; PIECE])));
        assert!(blocked.await.is_err(), "the budget is not overdrawn");
        assert_eq!(rx.recv().await.unwrap().len(), PIECE);
        assert_eq!(rx.recv().await.unwrap().len(), 10);
        tx.send(Bytes::from(vec![3u8; PIECE])).await.unwrap();
        // Another stream of the same connection shares what is left.
        let (other, mut unread) = budget.stream();
        unread.close();
        assert!(other.send(Bytes::from_static(b"dropped")).await.is_err());
        assert!(other.is_closed());
        rx.close();
        assert!(tx.send(Bytes::from_static(b"late")).await.is_err());
        // Everything went back.
        assert_eq!(budget.0.available_permits(), 2 * PIECE);
    }
}
