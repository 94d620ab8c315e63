//! The bytes of a download, handed from the async task that receives them
//! to the blocking thread that hashes, stores and unpacks them, with a
//! bounded queue between (a slow disk slows the download, not memory).

use std::io::{self, Read};

use bytes::Bytes;
use tokio::sync::mpsc;

/// Chunks queued between download and unpack.
pub(crate) const QUEUED_CHUNKS: usize = 32;

/// Reads what the sender sends; an `Err` sent is the reader's error; the
/// sender dropped is the end of the stream.
pub(crate) struct ChannelReader {
    receiver: mpsc::Receiver<io::Result<Bytes>>,
    current: Bytes,
}

impl ChannelReader {
    pub(crate) fn new(receiver: mpsc::Receiver<io::Result<Bytes>>) -> Self {
        Self { receiver, current: Bytes::new() }
    }
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.current.is_empty() {
            match self.receiver.blocking_recv() {
                Some(Ok(chunk)) => self.current = chunk,
                Some(Err(e)) => return Err(e),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        buf[..n].copy_from_slice(&self.current.split_to(n));
        Ok(n)
    }
}
