//! SPDY/3 header blocks: name/value pairs (32-bit lengths), compressed with
//! zlib and the SPDY dictionary as one stream per direction per connection,
//! each block ending in a sync flush. zlib itself is flate2's (zlib-rs
//! backend, which has preset dictionaries).

use flate2::{Compress, Decompress, FlushCompress, FlushDecompress, Status};

use super::dictionary::header_dictionary;

/// Most bytes one decompressed header block may hold.
pub(crate) const MAX_BLOCK: usize = 64 << 10;

/// Header pairs in the order they came; names are lower case on the wire.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Headers(pub Vec<(String, String)>);

impl Headers {
    /// The first value of `name` (case-insensitive).
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.0.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum HeaderError {
    #[error("header block: {0}")]
    Malformed(&'static str),
    #[error("header block larger than {MAX_BLOCK} bytes")]
    TooLarge,
    #[error("header block compression: {0}")]
    Zlib(String),
}

fn encode_block(headers: &Headers) -> Vec<u8> {
    let mut block = Vec::new();
    block.extend_from_slice(&(headers.0.len() as u32).to_be_bytes());
    for (name, value) in &headers.0 {
        for part in [name.to_ascii_lowercase().as_bytes(), value.as_bytes()] {
            block.extend_from_slice(&(part.len() as u32).to_be_bytes());
            block.extend_from_slice(part);
        }
    }
    block
}

fn decode_block(mut block: &[u8]) -> Result<Headers, HeaderError> {
    fn take<'a>(block: &mut &'a [u8], n: usize) -> Result<&'a [u8], HeaderError> {
        if block.len() < n {
            return Err(HeaderError::Malformed("truncated"));
        }
        let (head, rest) = block.split_at(n);
        *block = rest;
        Ok(head)
    }
    fn length(block: &mut &[u8]) -> Result<usize, HeaderError> {
        let bytes = take(block, 4)?;
        Ok(u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize)
    }
    let count = length(&mut block)?;
    // Each pair takes at least 8 bytes: a count beyond that is a lie.
    if count > block.len() / 8 {
        return Err(HeaderError::Malformed("more pairs than bytes"));
    }
    let mut pairs = Vec::with_capacity(count);
    for _ in 0..count {
        let n = length(&mut block)?;
        let name = String::from_utf8_lossy(take(&mut block, n)?).into_owned();
        let n = length(&mut block)?;
        let value = String::from_utf8_lossy(take(&mut block, n)?).into_owned();
        pairs.push((name, value));
    }
    Ok(Headers(pairs))
}

/// One direction's compressor.
pub struct HeaderWriter {
    zlib: Compress,
}

impl HeaderWriter {
    pub fn new() -> Result<Self, HeaderError> {
        let mut zlib = Compress::new(flate2::Compression::default(), true);
        zlib.set_dictionary(&header_dictionary()).map_err(|e| HeaderError::Zlib(e.to_string()))?;
        Ok(Self { zlib })
    }

    pub fn compress(&mut self, headers: &Headers) -> Result<Vec<u8>, HeaderError> {
        let block = encode_block(headers);
        let mut out = Vec::with_capacity(block.len() + 64);
        let start = self.zlib.total_in();
        loop {
            let consumed = (self.zlib.total_in() - start) as usize;
            if out.capacity() - out.len() < 64 {
                out.reserve(block.len() + 64);
            }
            self.zlib
                .compress_vec(&block[consumed..], &mut out, FlushCompress::Sync)
                .map_err(|e| HeaderError::Zlib(e.to_string()))?;
            // Done once all is in and the flush left room to spare.
            if (self.zlib.total_in() - start) as usize == block.len() && out.capacity() - out.len() >= 64 {
                return Ok(out);
            }
        }
    }
}

/// One direction's decompressor.
pub struct HeaderReader {
    zlib: Decompress,
    dictionary_set: bool,
}

impl HeaderReader {
    pub fn new() -> Self {
        Self { zlib: Decompress::new(true), dictionary_set: false }
    }

    pub fn decompress(&mut self, compressed: &[u8]) -> Result<Headers, HeaderError> {
        let mut out = Vec::with_capacity(1024);
        let start = self.zlib.total_in();
        loop {
            let consumed = (self.zlib.total_in() - start) as usize;
            if out.len() == out.capacity() {
                if out.len() >= MAX_BLOCK {
                    return Err(HeaderError::TooLarge);
                }
                out.reserve(out.len().max(1024));
            }
            let before = (self.zlib.total_in(), self.zlib.total_out());
            match self.zlib.decompress_vec(&compressed[consumed..], &mut out, FlushDecompress::Sync) {
                Ok(Status::StreamEnd) => return Err(HeaderError::Malformed("the zlib stream ended")),
                Ok(_) => {}
                Err(e) if e.needs_dictionary().is_some() && !self.dictionary_set => {
                    self.zlib.set_dictionary(&header_dictionary()).map_err(|e| HeaderError::Zlib(e.to_string()))?;
                    self.dictionary_set = true;
                    continue;
                }
                Err(e) => return Err(HeaderError::Zlib(e.to_string())),
            }
            let all_in = (self.zlib.total_in() - start) as usize == compressed.len();
            let progressed = (self.zlib.total_in(), self.zlib.total_out()) != before;
            if all_in && out.len() < out.capacity() {
                break;
            }
            if !progressed && out.len() < out.capacity() {
                return Err(HeaderError::Malformed("incomplete compressed block"));
            }
        }
        decode_block(&out)
    }
}

impl Default for HeaderReader {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> Headers {
        Headers(pairs.iter().map(|(n, v)| (n.to_string(), v.to_string())).collect())
    }

    #[test]
    fn blocks_round_trip_on_one_stream() {
        let (mut writer, mut reader) = (HeaderWriter::new().unwrap(), HeaderReader::new());
        for block in [
            headers(&[("streamtype", "error")]),
            headers(&[("streamType", "stdout"), ("port", "80")]),
            headers(&[]),
            headers(&[("x", &"y".repeat(5000))]),
        ] {
            let wire = writer.compress(&block).unwrap();
            let back = reader.decompress(&wire).unwrap();
            assert_eq!(back.0.len(), block.0.len());
            for ((n1, v1), (n2, v2)) in block.0.iter().zip(&back.0) {
                assert_eq!((n1.to_ascii_lowercase(), v1), (n2.clone(), v2));
            }
        }
    }

    #[test]
    fn a_lying_pair_count_is_refused() {
        assert!(decode_block(&[0, 0, 0, 9, 0, 0]).is_err());
        assert!(decode_block(&[0, 0, 0, 1, 0, 0, 0, 9, b'a', 0, 0, 0, 0]).is_err());
    }
}
