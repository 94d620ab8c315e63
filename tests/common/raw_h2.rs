//! A bare HTTP/2 gRPC client over the CRI socket that sends whatever
//! `:authority` a test names, byte for byte, as stock clients do (the socket
//! path, raw or percent-encoded; nothing; an empty one). Frames and HPACK are
//! written here so nothing between the test and the socket can tidy them up.

use std::path::Path;
use std::time::Duration;

use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const SETTINGS: u8 = 0x4;
const PING: u8 = 0x6;
const GOAWAY: u8 = 0x7;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const ACK: u8 = 0x1;

/// One HTTP/2 connection; requests go one after the other on odd streams.
pub struct RawClient {
    stream: UnixStream,
    authority: Option<Vec<u8>>,
    encoder: loona_hpack::Encoder<'static>,
    decoder: loona_hpack::Decoder<'static>,
    next_stream: u32,
}

/// A gRPC answer: the message bytes, or the status code and message.
pub type Answer = Result<Vec<u8>, (u32, String)>;

impl RawClient {
    pub async fn connect(socket: &Path, authority: Option<&[u8]>) -> Self {
        let mut stream = UnixStream::connect(socket).await.expect("connect to the CRI socket");
        stream.write_all(PREFACE).await.unwrap();
        stream.write_all(&frame(SETTINGS, 0, 0, &[])).await.unwrap();
        RawClient {
            stream,
            authority: authority.map(<[u8]>::to_vec),
            encoder: loona_hpack::Encoder::new(),
            decoder: loona_hpack::Decoder::new(),
            next_stream: 1,
        }
    }

    /// Calls `path` (`/package.Service/Method`) with `request`, decoding the answer as `R`.
    pub async fn call<Q: Message, R: Message + Default>(
        &mut self,
        path: &str,
        request: &Q,
    ) -> Result<R, (u32, String)> {
        let bytes = self.call_raw(path, &request.encode_to_vec()).await?;
        Ok(R::decode(bytes.as_slice()).expect("a well-formed answer"))
    }

    pub async fn call_raw(&mut self, path: &str, message: &[u8]) -> Answer {
        self.call_raw_with(path, message, &[]).await
    }

    /// `call`, with `extra` header fields (e.g. `grpc-timeout`); this
    /// client keeps no timer of its own, so what comes back is the server's.
    pub async fn call_with<Q: Message, R: Message + Default>(
        &mut self,
        path: &str,
        request: &Q,
        extra: &[(&[u8], &[u8])],
    ) -> Result<R, (u32, String)> {
        let bytes = self.call_raw_with(path, &request.encode_to_vec(), extra).await?;
        Ok(R::decode(bytes.as_slice()).expect("a well-formed answer"))
    }

    async fn call_raw_with(&mut self, path: &str, message: &[u8], extra: &[(&[u8], &[u8])]) -> Answer {
        let stream_id = self.next_stream;
        self.next_stream += 2;
        let mut fields: Vec<(&[u8], &[u8])> =
            vec![(b":method", b"POST"), (b":scheme", b"http"), (b":path", path.as_bytes())];
        if let Some(authority) = &self.authority {
            fields.push((b":authority", authority));
        }
        fields.extend([
            (&b"content-type"[..], &b"application/grpc"[..]),
            (b"te", b"trailers"),
            (b"user-agent", b"nidus-raw-h2-test/1.0"),
        ]);
        fields.extend(extra.iter().copied());
        // Encoded with a dynamic table, as gRPC clients encode: the second
        // call names the first one's authority by index.
        let block = self.encoder.encode(fields);
        let mut body = vec![0];
        body.extend_from_slice(&(message.len() as u32).to_be_bytes());
        body.extend_from_slice(message);
        let mut out = frame(HEADERS, END_HEADERS, stream_id, &block);
        out.extend(frame(DATA, END_STREAM, stream_id, &body));
        self.stream.write_all(&out).await.unwrap();
        tokio::time::timeout(Duration::from_secs(30), self.answer(stream_id)).await.expect("an answer within 30 s")
    }

    /// Sends `block` as one request's header block on a new stream (HEADERS,
    /// then CONTINUATION frames of at most 16 KiB), then reads until the
    /// server answers that stream or ends the connection: true when it
    /// refused the request or closed, false when it answered normally.
    pub async fn send_header_block(&mut self, block: &[u8]) -> bool {
        let stream_id = self.next_stream;
        self.next_stream += 2;
        let chunks: Vec<&[u8]> = block.chunks(16_384).collect();
        let mut out = Vec::new();
        for (i, chunk) in chunks.iter().enumerate() {
            let kind = if i == 0 { HEADERS } else { CONTINUATION };
            let last = if i + 1 == chunks.len() { END_HEADERS } else { 0 };
            let end_stream = if i == 0 { END_STREAM } else { 0 };
            out.extend(frame(kind, last | end_stream, stream_id, chunk));
        }
        if self.stream.write_all(&out).await.is_err() {
            return true;
        }
        loop {
            let mut head = [0u8; 9];
            let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(30), self.stream.read_exact(&mut head)).await
            else {
                return true;
            };
            let length = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
            let mut payload = vec![0; length];
            if self.stream.read_exact(&mut payload).await.is_err() {
                return true;
            }
            let id = u32::from_be_bytes(head[5..9].try_into().unwrap()) & 0x7fff_ffff;
            match head[3] {
                SETTINGS if head[4] & ACK == 0 => {
                    let _ = self.stream.write_all(&frame(SETTINGS, ACK, 0, &[])).await;
                }
                GOAWAY => return true,
                RST_STREAM if id == stream_id => return true,
                HEADERS if id == stream_id => {
                    // A 431 (or any answer) to the request: refused unless 200.
                    let fields = self.decoder.decode(&payload).unwrap_or_default();
                    return !fields.iter().any(|(n, v)| n == b":status" && v == b"200");
                }
                _ => {}
            }
        }
    }

    async fn answer(&mut self, stream_id: u32) -> Answer {
        let mut data = Vec::new();
        let mut block = Vec::new();
        let mut headers_seen = 0;
        loop {
            let (kind, flags, id, payload) = self.read_frame().await;
            match kind {
                SETTINGS if flags & ACK == 0 => self.stream.write_all(&frame(SETTINGS, ACK, 0, &[])).await.unwrap(),
                PING if flags & ACK == 0 => self.stream.write_all(&frame(PING, ACK, 0, &payload)).await.unwrap(),
                GOAWAY => panic!("the server sent GOAWAY: {payload:?}"),
                RST_STREAM if id == stream_id => {
                    let code = u32::from_be_bytes(payload[..4].try_into().unwrap());
                    return Err((u32::MAX, format!("RST_STREAM with HTTP/2 error code {code}")));
                }
                DATA if id == stream_id => data.extend_from_slice(&payload),
                HEADERS | CONTINUATION if id == stream_id => {
                    block.extend_from_slice(&payload);
                    if flags & END_HEADERS != 0 {
                        let fields = self.decoder.decode(&block).expect("the server's header block decodes");
                        block.clear();
                        headers_seen += 1;
                        let status = fields.iter().find(|(n, _)| n == b"grpc-status");
                        if let Some((_, code)) = status {
                            let code: u32 = String::from_utf8_lossy(code).parse().expect("a numeric grpc-status");
                            if code != 0 {
                                let message = fields.iter().find(|(n, _)| n == b"grpc-message");
                                let message = message.map(|(_, m)| String::from_utf8_lossy(m).into_owned());
                                return Err((code, message.unwrap_or_default()));
                            }
                        }
                        if flags & END_STREAM != 0 {
                            assert!(
                                status.is_some(),
                                "the answer ended without grpc-status ({headers_seen} header blocks)"
                            );
                            assert!(data.len() >= 5, "the answer carries a gRPC message");
                            let length = u32::from_be_bytes(data[1..5].try_into().unwrap()) as usize;
                            return Ok(data[5..5 + length].to_vec());
                        }
                    }
                }
                _ => {}
            }
        }
    }

    async fn read_frame(&mut self) -> (u8, u8, u32, Vec<u8>) {
        let mut head = [0u8; 9];
        self.stream.read_exact(&mut head).await.expect("the server keeps the connection open");
        let length = usize::from(head[0]) << 16 | usize::from(head[1]) << 8 | usize::from(head[2]);
        let mut payload = vec![0; length];
        self.stream.read_exact(&mut payload).await.expect("a whole frame");
        let id = u32::from_be_bytes(head[5..9].try_into().unwrap()) & 0x7fff_ffff;
        (head[3], head[4], id, payload)
    }
}

fn frame(kind: u8, flags: u8, stream_id: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    out.extend([kind, flags]);
    out.extend(stream_id.to_be_bytes());
    out.extend_from_slice(payload);
    out
}
