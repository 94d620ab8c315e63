//! The zlib dictionary SPDY/3 header blocks are compressed with (SPDY
//! Protocol draft 3, section 2.6.10.1): the well-known header names and
//! values, each as a 32-bit big-endian length and the bytes, then a tail of
//! status lines, dates and content types as one run of text.

const WORDS: [&str; 65] = [
    "options",
    "head",
    "post",
    "put",
    "delete",
    "trace",
    "accept",
    "accept-charset",
    "accept-encoding",
    "accept-language",
    "accept-ranges",
    "age",
    "allow",
    "authorization",
    "cache-control",
    "connection",
    "content-base",
    "content-encoding",
    "content-language",
    "content-length",
    "content-location",
    "content-md5",
    "content-range",
    "content-type",
    "date",
    "etag",
    "expect",
    "expires",
    "from",
    "host",
    "if-match",
    "if-modified-since",
    "if-none-match",
    "if-range",
    "if-unmodified-since",
    "last-modified",
    "location",
    "max-forwards",
    "pragma",
    "proxy-authenticate",
    "proxy-authorization",
    "range",
    "referer",
    "retry-after",
    "server",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "user-agent",
    "vary",
    "via",
    "warning",
    "www-authenticate",
    "method",
    "get",
    "status",
    "200 OK",
    "version",
    "HTTP/1.1",
    "url",
    "public",
    "set-cookie",
    "keep-alive",
    "origin",
];

const TAIL: &str = concat!(
    "100101201202205206300302303304305306307402405406407408409410411412413414415416417502504505",
    "203 Non-Authoritative Information204 No Content301 Moved Permanently400 Bad Request401 Unauthorized",
    "403 Forbidden404 Not Found500 Internal Server Error501 Not Implemented503 Service Unavailable",
    "Jan Feb Mar Apr May Jun Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri, Sat, Sun, GMT",
    "chunked,text/html,image/png,image/jpg,image/gif,application/xml,application/xhtml+xml,text/plain,",
    "text/javascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8charset=iso-8859-1,utf-,*,enq=0."
);

/// The dictionary's bytes.
pub(crate) fn header_dictionary() -> Vec<u8> {
    let mut dictionary = Vec::with_capacity(1423);
    for word in WORDS {
        dictionary.extend_from_slice(&(word.len() as u32).to_be_bytes());
        dictionary.extend_from_slice(word.as_bytes());
    }
    dictionary.extend_from_slice(TAIL.as_bytes());
    dictionary
}

#[cfg(test)]
mod tests {
    #[test]
    fn has_the_specified_length_and_adler32() {
        let dictionary = super::header_dictionary();
        assert_eq!(dictionary.len(), 1423);
        // The DICTID zlib writes in the stream header; peers check it.
        let (mut a, mut b) = (1u32, 0u32);
        for byte in &dictionary {
            a = (a + u32::from(*byte)) % 65521;
            b = (b + a) % 65521;
        }
        assert_eq!((b << 16) | a, 0xe3c6_a7c2);
    }
}
