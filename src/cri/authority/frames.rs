//! The byte-level part of the authority layer: reads the client's side of an
//! HTTP/2 connection (preface, then frames) and hands on what the server
//! should read, with every invalid `:authority` replaced.
//!
//! Header blocks (HEADERS + CONTINUATION) are decoded with an HPACK decoder
//! that tracks the client's dynamic table. A block whose authorities are all
//! valid hosts goes on byte for byte, so the server's HPACK state stays the
//! client's. The first block that needs a rewrite, and every block after it
//! on that connection, is re-encoded as literals that never touch the dynamic
//! table: the server's table then simply stops changing, and no later index
//! of the client's can be misread. A client names one authority for all of a
//! connection, so once a block names a valid host before any rewrite, the
//! rest of the connection is handed on untouched, undecoded. Any other frame passes through as it
//! arrives, unbuffered. Input this layer cannot follow (a bad preface, a
//! frame out of order, an undecodable block) before any rewrite is handed on
//! untouched, and the HTTP/2 server answers it as it always did; after a
//! rewrite it ends the connection, since the server could no longer read it.

use bytes::{BufMut, BytesMut};

/// The authority a rewritten request carries.
pub(crate) const REPLACEMENT_AUTHORITY: &[u8] = b"localhost";

/// What every HTTP/2 client sends first (RFC 9113, 3.4).
const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
const FRAME_HEADER_LEN: usize = 9;
/// The largest frame payload every HTTP/2 peer must accept: re-encoded
/// blocks are cut to it, whatever the server advertised.
const MIN_MAX_FRAME_SIZE: usize = 16_384;
/// The header table size the server starts with and never raises
/// (SETTINGS_HEADER_TABLE_SIZE is left at its default): a client's size
/// update above it is an error for the server, and for this decoder too.
const HEADER_TABLE_SIZE: usize = 4_096;
/// The largest header list (RFC 9113 6.5.2: each field's name and value and
/// 32 bytes) this layer decodes, and the server behind it accepts
/// (SETTINGS_MAX_HEADER_LIST_SIZE): CRI requests carry a few hundred bytes
/// of headers. A block that decodes to more is not followed (and, after a
/// rewrite, ends the connection), so a small block that names one table
/// entry thousands of times allocates no more than this.
pub(crate) const MAX_HEADER_LIST: usize = 64 * 1024;
/// The most this layer buffers of one header block, encoded: a block is
/// never larger than the list it decodes to but for a few bytes a field.
pub(crate) const MAX_HEADER_BLOCK: usize = MAX_HEADER_LIST;

const TYPE_HEADERS: u8 = 0x1;
const TYPE_PUSH_PROMISE: u8 = 0x5;
const TYPE_CONTINUATION: u8 = 0x9;
const FLAG_END_STREAM: u8 = 0x1;
const FLAG_END_HEADERS: u8 = 0x4;
const FLAG_PADDED: u8 = 0x8;
const FLAG_PRIORITY: u8 = 0x20;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum NormalizeError {
    #[error("after a rewritten :authority the client sent {0}, which cannot be handed on")]
    Unfollowable(&'static str),
}

/// Where in the client's byte stream the layer is.
enum Phase {
    /// Matching the connection preface; the count of bytes matched so far.
    Preface(usize),
    /// Between frames.
    FrameHeader,
    /// Handing on the rest of a frame that carries no header block.
    PassThrough(usize),
    /// Buffering a HEADERS or CONTINUATION frame's payload.
    HeaderPayload(FrameHead),
    /// Not following the stream any more: everything goes on untouched.
    Transparent,
}

/// How header blocks are handed on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Byte for byte while no rewrite was needed.
    Verbatim,
    /// Every block re-encoded, from the first rewrite on.
    Reencoding,
}

#[derive(Clone, Copy)]
struct FrameHead {
    length: usize,
    kind: u8,
    flags: u8,
    stream_id: u32,
}

impl FrameHead {
    fn parse(bytes: &[u8]) -> Self {
        FrameHead {
            length: usize::from(bytes[0]) << 16 | usize::from(bytes[1]) << 8 | usize::from(bytes[2]),
            kind: bytes[3],
            flags: bytes[4],
            stream_id: u32::from_be_bytes([bytes[5], bytes[6], bytes[7], bytes[8]]) & 0x7fff_ffff,
        }
    }
}

/// A header block being gathered: its frames as they came and its fragment.
struct PendingBlock {
    stream_id: u32,
    end_stream: bool,
    priority: Option<[u8; 5]>,
    raw: BytesMut,
    fragment: Vec<u8>,
}

/// The client → server direction of one connection.
pub struct AuthorityNormalizer {
    phase: Phase,
    mode: Mode,
    /// Bytes received but not yet handed on or decided upon.
    input: BytesMut,
    block: Option<PendingBlock>,
    decoder: loona_hpack::Decoder<'static>,
}

impl Default for AuthorityNormalizer {
    fn default() -> Self {
        Self::new()
    }
}

impl AuthorityNormalizer {
    pub fn new() -> Self {
        let mut decoder = loona_hpack::Decoder::new();
        decoder.set_max_allowed_table_size(HEADER_TABLE_SIZE);
        AuthorityNormalizer {
            phase: Phase::Preface(0),
            mode: Mode::Verbatim,
            input: BytesMut::new(),
            block: None,
            decoder,
        }
    }

    /// Takes `data` as read from the client and appends to `out` what the
    /// server should read. Bytes of an unfinished frame header or header block
    /// are kept until the rest arrives.
    pub fn feed(&mut self, data: &[u8], out: &mut BytesMut) -> Result<(), NormalizeError> {
        self.input.extend_from_slice(data);
        loop {
            match self.phase {
                Phase::Transparent => {
                    out.extend_from_slice(&self.input.split());
                    return Ok(());
                }
                Phase::Preface(matched) => {
                    let take = (PREFACE.len() - matched).min(self.input.len());
                    if self.input[..take] != PREFACE[matched..matched + take] {
                        self.phase = Phase::Transparent;
                        continue;
                    }
                    out.extend_from_slice(&self.input.split_to(take));
                    if matched + take < PREFACE.len() {
                        self.phase = Phase::Preface(matched + take);
                        return Ok(());
                    }
                    self.phase = Phase::FrameHeader;
                }
                Phase::PassThrough(left) => {
                    let take = left.min(self.input.len());
                    out.extend_from_slice(&self.input.split_to(take));
                    if take < left {
                        self.phase = Phase::PassThrough(left - take);
                        return Ok(());
                    }
                    self.phase = Phase::FrameHeader;
                }
                Phase::FrameHeader => {
                    if self.input.len() < FRAME_HEADER_LEN {
                        return Ok(());
                    }
                    let head = FrameHead::parse(&self.input[..FRAME_HEADER_LEN]);
                    self.on_frame_head(head, out)?;
                }
                Phase::HeaderPayload(head) => {
                    if self.input.len() < FRAME_HEADER_LEN + head.length {
                        return Ok(());
                    }
                    let frame = self.input.split_to(FRAME_HEADER_LEN + head.length);
                    self.on_header_frame(head, frame, out)?;
                }
            }
        }
    }

    /// Decides what to do with the frame whose header starts `input`.
    fn on_frame_head(&mut self, head: FrameHead, out: &mut BytesMut) -> Result<(), NormalizeError> {
        let carries_block = head.kind == TYPE_HEADERS || head.kind == TYPE_CONTINUATION;
        if self.block.is_some() && head.kind != TYPE_CONTINUATION {
            return self.give_up("a frame inside a header block", None, out);
        }
        if head.kind == TYPE_PUSH_PROMISE {
            return self.give_up("a PUSH_PROMISE", None, out);
        }
        if !carries_block {
            out.extend_from_slice(&self.input.split_to(FRAME_HEADER_LEN));
            self.phase = Phase::PassThrough(head.length);
            return Ok(());
        }
        let buffered = self.block.as_ref().map_or(0, |b| b.raw.len());
        if buffered + FRAME_HEADER_LEN + head.length > MAX_HEADER_BLOCK {
            return self.give_up("a header block over the size this layer follows", None, out);
        }
        self.phase = Phase::HeaderPayload(head);
        Ok(())
    }

    /// Takes one whole HEADERS or CONTINUATION frame.
    fn on_header_frame(&mut self, head: FrameHead, frame: BytesMut, out: &mut BytesMut) -> Result<(), NormalizeError> {
        self.phase = Phase::FrameHeader;
        if head.kind == TYPE_HEADERS {
            let Some((priority, fragment)) = headers_payload(head, &frame[FRAME_HEADER_LEN..]) else {
                return self.give_up("a malformed HEADERS frame", Some(frame), out);
            };
            self.block = Some(PendingBlock {
                stream_id: head.stream_id,
                end_stream: head.flags & FLAG_END_STREAM != 0,
                priority,
                fragment: fragment.to_vec(),
                raw: frame,
            });
        } else {
            match self.block.as_mut() {
                Some(block) if block.stream_id == head.stream_id => {
                    block.fragment.extend_from_slice(&frame[FRAME_HEADER_LEN..]);
                    block.raw.unsplit(frame);
                }
                _ => {
                    return self.give_up("a CONTINUATION outside a header block", Some(frame), out);
                }
            }
        }
        if head.flags & FLAG_END_HEADERS != 0 {
            if let Some(block) = self.block.take() {
                return self.finish_block(block, out);
            }
        }
        Ok(())
    }

    /// Hands on a whole header block, rewritten where it must be.
    fn finish_block(&mut self, block: PendingBlock, out: &mut BytesMut) -> Result<(), NormalizeError> {
        let mut fields = Vec::new();
        let mut list_size = 0usize;
        let decoded = self.decoder.decode_with_cb(&block.fragment, |name, value| {
            // Counted before anything is copied; past the bound nothing is.
            list_size = list_size.saturating_add(name.len() + value.len() + 32);
            if list_size <= MAX_HEADER_LIST {
                fields.push((name.into_owned(), value.into_owned()));
            }
        });
        if decoded.is_err() {
            self.block = Some(block);
            return self.give_up("a header block that does not decode", None, out);
        }
        if list_size > MAX_HEADER_LIST {
            self.block = Some(block);
            return self.give_up("a header list larger than the server takes", None, out);
        }
        let mut rewrite = false;
        let mut valid_authority = false;
        for (name, value) in &mut fields {
            if name.as_slice() == b":authority" {
                if http::uri::Authority::try_from(value.as_slice()).is_ok() {
                    valid_authority = true;
                } else {
                    *value = REPLACEMENT_AUTHORITY.to_vec();
                    rewrite = true;
                }
            }
        }
        if rewrite && self.mode == Mode::Verbatim {
            tracing::debug!(stream = block.stream_id, "rewriting a client's :authority that is not a host");
            self.mode = Mode::Reencoding;
        }
        match self.mode {
            Mode::Verbatim => out.extend_from_slice(&block.raw),
            Mode::Reencoding => write_block(&block, &encode_literals(&fields), out),
        }
        // A client names one authority per connection (gRPC: per channel):
        // once its first request names a valid host, the layer steps aside.
        if self.mode == Mode::Verbatim && valid_authority {
            self.phase = Phase::Transparent;
        }
        Ok(())
    }

    /// Stops following the stream. Before any rewrite, what is held (the
    /// block being gathered, then `frame`, then the unread input) goes on
    /// untouched for the server to judge; after one, the connection ends.
    fn give_up(
        &mut self,
        what: &'static str,
        frame: Option<BytesMut>,
        out: &mut BytesMut,
    ) -> Result<(), NormalizeError> {
        if self.mode == Mode::Reencoding {
            return Err(NormalizeError::Unfollowable(what));
        }
        if let Some(block) = self.block.take() {
            out.extend_from_slice(&block.raw);
        }
        if let Some(frame) = frame {
            out.extend_from_slice(&frame);
        }
        self.phase = Phase::Transparent;
        out.extend_from_slice(&self.input.split());
        Ok(())
    }
}

/// A HEADERS payload's priority fields and block fragment, without padding;
/// `None` when the padding or priority does not fit the payload.
fn headers_payload(head: FrameHead, payload: &[u8]) -> Option<(Option<[u8; 5]>, &[u8])> {
    let mut rest = payload;
    let mut padding = 0;
    if head.flags & FLAG_PADDED != 0 {
        padding = usize::from(*rest.first()?);
        rest = &rest[1..];
    }
    let mut priority = None;
    if head.flags & FLAG_PRIORITY != 0 {
        priority = Some(rest.get(..5)?.try_into().ok()?);
        rest = &rest[5..];
    }
    let end = rest.len().checked_sub(padding)?;
    Some((priority, &rest[..end]))
}

/// The fields as HPACK literals without indexing, new names (RFC 7541,
/// 6.2.2): a representation that reads and changes no dynamic table.
fn encode_literals(fields: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    let mut block = Vec::with_capacity(fields.iter().map(|(n, v)| n.len() + v.len() + 8).sum());
    for (name, value) in fields {
        block.push(0x00);
        encode_string(name, &mut block);
        encode_string(value, &mut block);
    }
    block
}

/// A string literal without Huffman coding: a 7-bit-prefix length, then the bytes.
fn encode_string(bytes: &[u8], block: &mut Vec<u8>) {
    // Writing into a Vec cannot fail.
    let _ = loona_hpack::encoder::encode_integer_into(bytes.len(), 7, 0, block);
    block.extend_from_slice(bytes);
}

/// A re-encoded block as a HEADERS frame and as many CONTINUATIONs as it
/// needs, each within the smallest frame size a server accepts.
fn write_block(block: &PendingBlock, fragment: &[u8], out: &mut BytesMut) {
    let priority_len = if block.priority.is_some() { 5 } else { 0 };
    let first = fragment.len().min(MIN_MAX_FRAME_SIZE - priority_len);
    let (head, mut rest) = fragment.split_at(first);
    let mut flags = if block.end_stream { FLAG_END_STREAM } else { 0 };
    if block.priority.is_some() {
        flags |= FLAG_PRIORITY;
    }
    if rest.is_empty() {
        flags |= FLAG_END_HEADERS;
    }
    put_frame_head(out, priority_len + head.len(), TYPE_HEADERS, flags, block.stream_id);
    if let Some(priority) = block.priority {
        out.put_slice(&priority);
    }
    out.put_slice(head);
    while !rest.is_empty() {
        let (chunk, after) = rest.split_at(rest.len().min(MIN_MAX_FRAME_SIZE));
        let flags = if after.is_empty() { FLAG_END_HEADERS } else { 0 };
        put_frame_head(out, chunk.len(), TYPE_CONTINUATION, flags, block.stream_id);
        out.put_slice(chunk);
        rest = after;
    }
}

fn put_frame_head(out: &mut BytesMut, length: usize, kind: u8, flags: u8, stream_id: u32) {
    out.put_uint(length as u64, 3);
    out.put_u8(kind);
    out.put_u8(flags);
    out.put_u32(stream_id);
}

#[cfg(test)]
mod tests {
    use super::*;

    type Fields = Vec<(Vec<u8>, Vec<u8>)>;
    /// Each stream's decoded header lists, and every other frame as (type, payload).
    type ServerView = (Vec<(u32, Fields)>, Vec<(u8, Vec<u8>)>);

    fn request(authority: &[u8], path: &str) -> Fields {
        let mut fields: Fields = vec![
            (b":method".to_vec(), b"POST".to_vec()),
            (b":scheme".to_vec(), b"http".to_vec()),
            (b":path".to_vec(), path.as_bytes().to_vec()),
        ];
        if !authority.is_empty() {
            fields.push((b":authority".to_vec(), authority.to_vec()));
        }
        fields.push((b"content-type".to_vec(), b"application/grpc".to_vec()));
        fields.push((b"user-agent".to_vec(), b"grpc-go/1.60.0".to_vec()));
        fields
    }

    fn frame(kind: u8, flags: u8, stream_id: u32, payload: &[u8]) -> Vec<u8> {
        let mut out = BytesMut::new();
        put_frame_head(&mut out, payload.len(), kind, flags, stream_id);
        out.put_slice(payload);
        out.to_vec()
    }

    /// A client's connection: the preface, a SETTINGS frame, then for each
    /// request a HEADERS frame (encoded with a dynamic table, as clients do)
    /// and a DATA frame.
    fn client_bytes(requests: &[Fields]) -> Vec<u8> {
        let mut encoder = loona_hpack::Encoder::new();
        let mut bytes = PREFACE.to_vec();
        bytes.extend(frame(0x4, 0, 0, &[]));
        for (i, fields) in requests.iter().enumerate() {
            let stream_id = 1 + 2 * i as u32;
            let block = encoder.encode(fields.iter().map(|(n, v)| (n.as_slice(), v.as_slice())));
            bytes.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS, stream_id, &block));
            bytes.extend(frame(0x0, FLAG_END_STREAM, stream_id, b"\0\0\0\0\x02\x0a\x00"));
        }
        bytes
    }

    /// What a server reads from `bytes`: each stream's decoded header list,
    /// and every other frame as (type, payload).
    fn server_view(bytes: &[u8]) -> ServerView {
        assert!(bytes.starts_with(PREFACE));
        let mut rest = &bytes[PREFACE.len()..];
        let mut decoder = loona_hpack::Decoder::new();
        let (mut blocks, mut others) = (Vec::new(), Vec::new());
        let mut fragment = Vec::new();
        while !rest.is_empty() {
            let head = FrameHead::parse(rest);
            let payload = &rest[FRAME_HEADER_LEN..FRAME_HEADER_LEN + head.length];
            rest = &rest[FRAME_HEADER_LEN + head.length..];
            match head.kind {
                TYPE_HEADERS => {
                    let (_, f) = headers_payload(head, payload).expect("a well-formed HEADERS frame");
                    fragment = f.to_vec();
                }
                TYPE_CONTINUATION => fragment.extend_from_slice(payload),
                kind => others.push((kind, payload.to_vec())),
            }
            if (head.kind == TYPE_HEADERS || head.kind == TYPE_CONTINUATION) && head.flags & FLAG_END_HEADERS != 0 {
                blocks.push((head.stream_id, decoder.decode(&fragment).expect("the server can decode every block")));
            }
        }
        (blocks, others)
    }

    fn normalized(bytes: &[u8], chunk: usize) -> Vec<u8> {
        let mut normalizer = AuthorityNormalizer::new();
        let mut out = BytesMut::new();
        for piece in bytes.chunks(chunk) {
            normalizer.feed(piece, &mut out).expect("the layer follows a well-formed connection");
        }
        out.to_vec()
    }

    fn authority_of(fields: &Fields) -> Option<&[u8]> {
        fields.iter().find(|(n, _)| n == b":authority").map(|(_, v)| v.as_slice())
    }

    #[test]
    fn a_valid_authority_passes_byte_for_byte() {
        for authority in [&b"localhost"[..], b"", b"127.0.0.1:10010", b"runtime.sock"] {
            let bytes = client_bytes(&[request(authority, "/runtime.v1.RuntimeService/Version")]);
            assert_eq!(normalized(&bytes, bytes.len()), bytes, "authority {authority:?}");
            assert_eq!(normalized(&bytes, 1), bytes, "authority {authority:?}, one byte at a time");
        }
    }

    #[test]
    fn after_a_valid_authority_the_connection_is_handed_on_undecoded() {
        let mut bytes = client_bytes(&[request(b"localhost", "/runtime.v1.RuntimeService/Version")]);
        // Not HPACK the layer could decode: it is no longer looked at.
        bytes.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS, 3, b"\xbf"));
        assert_eq!(normalized(&bytes, 5), bytes);
    }

    #[test]
    fn a_socket_path_becomes_localhost_in_this_and_every_later_request() {
        for authority in [&b"/run/nidus/nidus.sock"[..], b"%2Frun%2Fnidus%2Fnidus.sock", b"unix:/tmp/x.sock"] {
            let paths = ["/runtime.v1.RuntimeService/Version", "/runtime.v1.RuntimeService/RunPodSandbox"];
            // Three requests: the later ones name the first one's authority,
            // path and user agent through the client's dynamic table.
            let requests: Vec<Fields> = [paths[0], paths[1], paths[0]].iter().map(|p| request(authority, p)).collect();
            let bytes = client_bytes(&requests);
            for chunk in [bytes.len(), 7, 1] {
                let (blocks, others) = server_view(&normalized(&bytes, chunk));
                assert_eq!(blocks.len(), 3);
                for ((stream_id, fields), (i, sent)) in blocks.iter().zip(requests.iter().enumerate()) {
                    assert_eq!(*stream_id, 1 + 2 * i as u32);
                    assert_eq!(authority_of(fields), Some(REPLACEMENT_AUTHORITY));
                    let others_sent: Vec<_> = sent.iter().filter(|(n, _)| n != b":authority").collect();
                    let others_read: Vec<_> = fields.iter().filter(|(n, _)| n != b":authority").collect();
                    assert_eq!(others_read, others_sent);
                }
                assert_eq!(others.len(), 4, "SETTINGS and three DATA frames pass through");
                assert!(others[1..].iter().all(|(kind, payload)| *kind == 0 && payload == b"\0\0\0\0\x02\x0a\x00"));
            }
        }
    }

    #[test]
    fn an_empty_authority_becomes_localhost() {
        let mut encoder = loona_hpack::Encoder::new();
        let mut fields = request(b"", "/runtime.v1.RuntimeService/Version");
        fields.push((b":authority".to_vec(), Vec::new()));
        let block = encoder.encode(fields.iter().map(|(n, v)| (n.as_slice(), v.as_slice())));
        let mut bytes = PREFACE.to_vec();
        bytes.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS | FLAG_END_STREAM, 1, &block));
        let (blocks, _) = server_view(&normalized(&bytes, 3));
        assert_eq!(authority_of(&blocks[0].1), Some(REPLACEMENT_AUTHORITY));
    }

    #[test]
    fn padding_priority_and_continuations_are_followed() {
        let fields = request(b"/tmp/nidus.sock", "/runtime.v1.RuntimeService/Version");
        let block = loona_hpack::Encoder::new().encode(fields.iter().map(|(n, v)| (n.as_slice(), v.as_slice())));
        let (first, second) = block.split_at(block.len() / 2);
        let mut payload = vec![3u8];
        payload.extend([0, 0, 0, 0, 16]);
        payload.extend_from_slice(first);
        payload.extend([0, 0, 0]);
        let mut bytes = PREFACE.to_vec();
        bytes.extend(frame(TYPE_HEADERS, FLAG_PADDED | FLAG_PRIORITY | FLAG_END_STREAM, 5, &payload));
        bytes.extend(frame(TYPE_CONTINUATION, FLAG_END_HEADERS, 5, second));
        let out = normalized(&bytes, 2);
        let head = FrameHead::parse(&out[PREFACE.len()..]);
        assert_eq!(head.flags, FLAG_PRIORITY | FLAG_END_STREAM | FLAG_END_HEADERS);
        assert_eq!(&out[PREFACE.len() + FRAME_HEADER_LEN..][..5], &[0, 0, 0, 0, 16]);
        let (blocks, _) = server_view(&out);
        assert_eq!(blocks[0].0, 5);
        assert_eq!(authority_of(&blocks[0].1), Some(REPLACEMENT_AUTHORITY));
    }

    #[test]
    fn a_rewritten_block_larger_than_a_frame_is_cut_into_continuations() {
        let mut fields = request(b"/tmp/nidus.sock", "/runtime.v1.RuntimeService/Version");
        fields.push((b"x-big".to_vec(), vec![b'a'; 40_000]));
        let bytes = client_bytes(&[fields.clone()]);
        let out = normalized(&bytes, 1000);
        let (blocks, _) = server_view(&out);
        assert_eq!(blocks[0].1.last(), fields.last());
        let mut rest = &out[PREFACE.len()..];
        let mut kinds = Vec::new();
        while !rest.is_empty() {
            let head = FrameHead::parse(rest);
            assert!(head.length <= MIN_MAX_FRAME_SIZE);
            kinds.push(head.kind);
            rest = &rest[FRAME_HEADER_LEN + head.length..];
        }
        assert_eq!(kinds, [0x4, TYPE_HEADERS, TYPE_CONTINUATION, TYPE_CONTINUATION, 0x0]);
    }

    #[test]
    fn input_it_cannot_follow_goes_on_untouched_before_a_rewrite() {
        let mut garbage = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec();
        assert_eq!(normalized(&garbage, 5), garbage);
        garbage = PREFACE.to_vec();
        garbage.extend(frame(TYPE_CONTINUATION, FLAG_END_HEADERS, 1, b"\x82"));
        garbage.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS, 3, b"\xff\xff\xff\xff"));
        assert_eq!(normalized(&garbage, 4), garbage);
        let mut undecodable = PREFACE.to_vec();
        undecodable.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS, 1, b"\xbf"));
        undecodable.extend(frame(0x0, 0, 1, b"data"));
        assert_eq!(normalized(&undecodable, 3), undecodable);
    }

    #[test]
    fn after_a_rewrite_unfollowable_input_ends_the_connection() {
        let mut bytes = client_bytes(&[request(b"/tmp/nidus.sock", "/runtime.v1.RuntimeService/Version")]);
        bytes.extend(frame(TYPE_HEADERS, FLAG_END_HEADERS, 3, b"\xbf"));
        let mut normalizer = AuthorityNormalizer::new();
        let err = normalizer.feed(&bytes, &mut BytesMut::new()).unwrap_err();
        assert_eq!(err, NormalizeError::Unfollowable("a header block that does not decode"));
    }

    #[test]
    fn arbitrary_bytes_never_panic() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        for round in 0..2000 {
            let mut bytes = if round % 2 == 0 { PREFACE.to_vec() } else { Vec::new() };
            for _ in 0..(round % 97) {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                bytes.push(state as u8);
            }
            let mut normalizer = AuthorityNormalizer::new();
            let _ = normalizer.feed(&bytes, &mut BytesMut::new());
        }
    }
}
