//! Arbitrary bytes as the client side of an HTTP/2 connection on the CRI
//! socket, fed to the `:authority` normalizer in pieces of the sizes the
//! input chooses, as reads from a socket arrive.
//!
//! The input is a header and a stream: its first byte is how many of the
//! next bytes are piece sizes; each piece size is one byte (0 meaning 1).
//! If the stream does not start with the HTTP/2 preface, odd first bytes put
//! the preface before it, so that the frame layer is reached.
//!
//! Checked besides "no panic": the output (and the error, if any) does not
//! depend on how the stream was cut into pieces: fed in one piece, one byte
//! at a time and in the chosen pieces, it is the same.

#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;

use nidus::cri::{AuthorityNormalizer, NormalizeError};

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

fuzz_target!(|data: &[u8]| {
    let Some((&head, rest)) = data.split_first() else { return };
    let cuts = usize::from(head >> 1).min(rest.len());
    let (sizes, body) = rest.split_at(cuts);
    let stream: Vec<u8> =
        if head & 1 == 1 && !body.starts_with(PREFACE) { [PREFACE, body].concat() } else { body.to_vec() };

    let whole = feed(&stream, &mut std::iter::once(stream.len().max(1)));
    let bytewise = feed(&stream, &mut std::iter::repeat(1));
    let mut chosen = sizes.iter().map(|s| usize::from(*s).max(1)).chain(std::iter::repeat(usize::MAX));
    let pieces = feed(&stream, &mut chosen);
    assert_eq!(whole, bytewise, "one piece and one byte at a time differ");
    assert_eq!(whole, pieces, "one piece and the chosen pieces differ");
});

/// What the server would read, and the error that ended the feeding.
fn feed(stream: &[u8], sizes: &mut dyn Iterator<Item = usize>) -> (Vec<u8>, Option<NormalizeError>) {
    let mut normalizer = AuthorityNormalizer::new();
    let mut out = BytesMut::new();
    let mut rest = stream;
    while !rest.is_empty() {
        let take = sizes.next().unwrap_or(usize::MAX).min(rest.len());
        let (piece, after) = rest.split_at(take);
        if let Err(e) = normalizer.feed(piece, &mut out) {
            return (out.to_vec(), Some(e));
        }
        rest = after;
    }
    (out.to_vec(), None)
}
