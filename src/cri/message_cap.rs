//! The last bound on what an error tells a client: whatever a domain error
//! quotes, the `grpc-message` of an answer is cut to [`MAX_STATUS_MESSAGE`]
//! bytes, so no request can make nidus echo back more than that (a client
//! refuses a header list beyond its own limit and sees RESOURCE_EXHAUSTED
//! instead of the error).

use http::header::HeaderValue;

/// The longest `grpc-message` (percent-encoded, as it travels) nidus sends.
pub const MAX_STATUS_MESSAGE: usize = 4096;
/// What ends a cut message: " ... (cut)", percent-encoded like the rest.
const CUT_MARK: &[u8] = b"%20...%20(cut)";

/// Cuts an answer's `grpc-message` to [`MAX_STATUS_MESSAGE`] bytes.
pub(crate) fn cap_status_message<B>(mut response: http::Response<B>) -> http::Response<B> {
    if let Some(value) = response.headers().get("grpc-message") {
        if let Some(cut) = cut(value.as_bytes()) {
            response.headers_mut().insert("grpc-message", cut);
        }
    }
    response
}

/// A percent-encoded message cut short, never inside an escape; `None` when it fits.
fn cut(encoded: &[u8]) -> Option<HeaderValue> {
    if encoded.len() <= MAX_STATUS_MESSAGE {
        return None;
    }
    let mut end = MAX_STATUS_MESSAGE - CUT_MARK.len();
    if let Some(percent) = encoded[end.saturating_sub(2)..end].iter().position(|&b| b == b'%') {
        end = end - 2 + percent;
    }
    // Nor inside a UTF-8 sequence: back off while a continuation byte follows.
    while end >= 3 && is_continuation_escape(&encoded[end..]) {
        end -= 3;
    }
    let mut short = encoded[..end].to_vec();
    short.extend_from_slice(CUT_MARK);
    HeaderValue::from_bytes(&short).ok()
}

/// Whether `rest` starts with the escape of a UTF-8 continuation byte (`%80`–`%BF`).
fn is_continuation_escape(rest: &[u8]) -> bool {
    match rest {
        [b'%', high, low, ..] => std::str::from_utf8(&[*high, *low])
            .ok()
            .and_then(|hex| u8::from_str_radix(hex, 16).ok())
            .is_some_and(|b| b & 0xc0 == 0x80),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_messages_are_cut_outside_escapes() {
        assert!(cut(b"short").is_none());
        let long = "%E2%80%A6".repeat(1000);
        let short = cut(long.as_bytes()).expect("cut");
        let short = short.to_str().unwrap();
        assert!(short.len() <= MAX_STATUS_MESSAGE);
        let body = short.strip_suffix("%20...%20(cut)").expect("the mark");
        assert!(body.len() % 9 == 0, "cut between escapes: {body}");
    }
}
