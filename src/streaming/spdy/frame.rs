//! SPDY/3 frames (SPDY Protocol draft 3, section 2.2): decoding what a peer
//! sends, encoding what we send. Header blocks stay compressed here; the
//! connection runs them through its one decompressor in order.

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt};

pub(crate) const VERSION: u16 = 3;
pub(crate) const FLAG_FIN: u8 = 0x01;

const SYN_STREAM: u16 = 1;
const SYN_REPLY: u16 = 2;
const RST_STREAM: u16 = 3;
const PING: u16 = 6;
const GOAWAY: u16 = 7;
const HEADERS: u16 = 8;

/// RST_STREAM status codes we send.
pub(crate) const RST_PROTOCOL_ERROR: u32 = 1;
pub(crate) const RST_REFUSED_STREAM: u32 = 3;

/// Most payload bytes of one frame we accept (the format allows 16 MiB).
pub(crate) const MAX_PAYLOAD: usize = 1 << 20;

#[derive(Debug)]
pub enum Frame {
    SynStream {
        id: u32,
        fin: bool,
        block: Bytes,
    },
    SynReply {
        id: u32,
        fin: bool,
        block: Bytes,
    },
    Headers {
        id: u32,
        fin: bool,
        block: Bytes,
    },
    RstStream {
        id: u32,
    },
    Ping {
        id: u32,
    },
    GoAway,
    Data {
        id: u32,
        fin: bool,
        data: Bytes,
    },
    /// SETTINGS, WINDOW_UPDATE, NOOP and unknown types: nothing to act on
    /// (Kubernetes peers use no flow control).
    Ignored,
}

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("connection: {0}")]
    Io(#[from] std::io::Error),
    #[error("frame of {0} bytes exceeds the limit of {MAX_PAYLOAD}")]
    TooLarge(usize),
    #[error("SPDY version {0} is not 3")]
    Version(u16),
    #[error("short {0} frame")]
    Short(&'static str),
}

fn word(bytes: &[u8]) -> u32 {
    u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]])
}

fn stream_id(bytes: &[u8]) -> u32 {
    word(bytes) & 0x7fff_ffff
}

/// Reads one frame; None at a clean end of the connection between frames.
pub async fn read<R: AsyncRead + Unpin>(reader: &mut R) -> Result<Option<Frame>, FrameError> {
    let mut head = [0u8; 8];
    match reader.read_exact(&mut head[..1]).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    reader.read_exact(&mut head[1..]).await?;
    let flags = head[4];
    let length = (word(&head[4..8]) & 0x00ff_ffff) as usize;
    if length > MAX_PAYLOAD {
        return Err(FrameError::TooLarge(length));
    }
    let mut payload = vec![0u8; length];
    reader.read_exact(&mut payload).await?;
    let payload = Bytes::from(payload);
    let fin = flags & FLAG_FIN != 0;
    if head[0] & 0x80 == 0 {
        return Ok(Some(Frame::Data { id: stream_id(&head), fin, data: payload }));
    }
    let version = u16::from_be_bytes([head[0], head[1]]) & 0x7fff;
    if version != VERSION {
        return Err(FrameError::Version(version));
    }
    let need = |n: usize, what: &'static str| if payload.len() < n { Err(FrameError::Short(what)) } else { Ok(()) };
    let frame = match u16::from_be_bytes([head[2], head[3]]) {
        SYN_STREAM => {
            need(10, "SYN_STREAM")?;
            Frame::SynStream { id: stream_id(&payload), fin, block: payload.slice(10..) }
        }
        SYN_REPLY => {
            need(4, "SYN_REPLY")?;
            Frame::SynReply { id: stream_id(&payload), fin, block: payload.slice(4..) }
        }
        HEADERS => {
            need(4, "HEADERS")?;
            Frame::Headers { id: stream_id(&payload), fin, block: payload.slice(4..) }
        }
        RST_STREAM => {
            need(8, "RST_STREAM")?;
            Frame::RstStream { id: stream_id(&payload) }
        }
        PING => {
            need(4, "PING")?;
            Frame::Ping { id: word(&payload) }
        }
        GOAWAY => Frame::GoAway,
        _ => Frame::Ignored,
    };
    Ok(Some(frame))
}

fn control(kind: u16, flags: u8, payload: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(8 + payload.len());
    frame.extend_from_slice(&(0x8000 | VERSION).to_be_bytes());
    frame.extend_from_slice(&kind.to_be_bytes());
    frame.extend_from_slice(&((u32::from(flags) << 24) | payload.len() as u32).to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

fn fin_flag(fin: bool) -> u8 {
    if fin {
        FLAG_FIN
    } else {
        0
    }
}

/// SYN_STREAM (what a client opens a stream with); priority 0, no association.
pub fn syn_stream(id: u32, fin: bool, block: &[u8]) -> Vec<u8> {
    let mut payload = Vec::with_capacity(10 + block.len());
    payload.extend_from_slice(&id.to_be_bytes());
    payload.extend_from_slice(&0u32.to_be_bytes());
    payload.extend_from_slice(&[0, 0]);
    payload.extend_from_slice(block);
    control(SYN_STREAM, fin_flag(fin), &payload)
}

pub(crate) fn syn_reply(id: u32, fin: bool, block: &[u8]) -> Vec<u8> {
    let mut payload = Vec::with_capacity(4 + block.len());
    payload.extend_from_slice(&id.to_be_bytes());
    payload.extend_from_slice(block);
    control(SYN_REPLY, fin_flag(fin), &payload)
}

pub(crate) fn rst_stream(id: u32, status: u32) -> Vec<u8> {
    let mut payload = id.to_be_bytes().to_vec();
    payload.extend_from_slice(&status.to_be_bytes());
    control(RST_STREAM, 0, &payload)
}

pub fn ping(id: u32) -> Vec<u8> {
    control(PING, 0, &id.to_be_bytes())
}

pub(crate) fn goaway(last_good: u32) -> Vec<u8> {
    let mut payload = last_good.to_be_bytes().to_vec();
    payload.extend_from_slice(&0u32.to_be_bytes());
    control(GOAWAY, 0, &payload)
}

/// The 8-byte head of a data frame carrying `length` bytes.
pub fn data_head(id: u32, fin: bool, length: usize) -> [u8; 8] {
    let mut head = [0u8; 8];
    head[..4].copy_from_slice(&(id & 0x7fff_ffff).to_be_bytes());
    head[4..].copy_from_slice(&((u32::from(fin_flag(fin)) << 24) | length as u32).to_be_bytes());
    head
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_read_back() {
        let mut wire = syn_stream(5, false, b"abc");
        wire.extend_from_slice(&data_head(5, true, 2));
        wire.extend_from_slice(b"hi");
        wire.extend_from_slice(&ping(7));
        wire.extend_from_slice(&rst_stream(9, RST_REFUSED_STREAM));
        let mut reader = wire.as_slice();
        assert!(
            matches!(read(&mut reader).await.unwrap(), Some(Frame::SynStream { id: 5, fin: false, block }) if &block[..] == b"abc")
        );
        assert!(
            matches!(read(&mut reader).await.unwrap(), Some(Frame::Data { id: 5, fin: true, data }) if &data[..] == b"hi")
        );
        assert!(matches!(read(&mut reader).await.unwrap(), Some(Frame::Ping { id: 7 })));
        assert!(matches!(read(&mut reader).await.unwrap(), Some(Frame::RstStream { id: 9 })));
        assert!(read(&mut reader).await.unwrap().is_none());
    }
}
