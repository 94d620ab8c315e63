//! Content digests (`sha256:<64 hex>`, the only algorithm nidus stores) and
//! readers/writers that compute one over the bytes passing through them.

use std::fmt;
use std::io::{self, Read, Write};
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest as _, Sha256};

/// A sha256 content digest.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest {
    hex: String,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} is not a digest: {why}", crate::quote::quote(.value))]
pub struct DigestError {
    pub(crate) value: String,
    pub(crate) why: &'static str,
}

impl Digest {
    /// The digest of `data`.
    pub fn of(data: &[u8]) -> Self {
        Self { hex: hex::encode(Sha256::digest(data)) }
    }

    /// The 64 lowercase hex digits.
    pub fn hex(&self) -> &str {
        &self.hex
    }

    /// A digest from its 64 hex digits (as in `blobs/sha256/<hex>`).
    pub(crate) fn from_hex(hex: &str) -> Result<Self, DigestError> {
        let err = |why| DigestError { value: hex.to_string(), why };
        if hex.len() != 64 {
            return Err(err("a sha256 digest has 64 hexadecimal digits"));
        }
        if !hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
            return Err(err("a sha256 digest has only lowercase hexadecimal digits"));
        }
        Ok(Self { hex: hex.to_string() })
    }
}

impl FromStr for Digest {
    type Err = DigestError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let Some((algorithm, hex)) = s.split_once(':') else {
            return Err(DigestError { value: s.to_string(), why: "expected <algorithm>:<hex>" });
        };
        if algorithm != "sha256" {
            return Err(DigestError { value: s.to_string(), why: "only sha256 digests are supported" });
        }
        Self::from_hex(hex).map_err(|e| DigestError { value: s.to_string(), why: e.why })
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.hex)
    }
}

impl Serialize for Digest {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Digest {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// Hashes what is read through it.
pub(crate) struct HashingReader<R> {
    inner: R,
    hasher: Sha256,
    bytes: u64,
}

impl<R: Read> HashingReader<R> {
    pub(crate) fn new(inner: R) -> Self {
        Self { inner, hasher: Sha256::new(), bytes: 0 }
    }

    /// Reads what is left, then returns the digest and length of everything read.
    pub(crate) fn finish(mut self) -> io::Result<(Digest, u64)> {
        io::copy(&mut self, &mut io::sink())?;
        Ok((Digest { hex: hex::encode(self.hasher.finalize()) }, self.bytes))
    }
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }
}

/// Hashes what is written through it.
pub(crate) struct HashingWriter<W> {
    inner: W,
    hasher: Sha256,
    bytes: u64,
}

impl<W: Write> HashingWriter<W> {
    pub(crate) fn new(inner: W) -> Self {
        Self { inner, hasher: Sha256::new(), bytes: 0 }
    }

    /// The inner writer, the digest and the length of everything written.
    pub(crate) fn finish(self) -> (W, Digest, u64) {
        (self.inner, Digest { hex: hex::encode(self.hasher.finalize()) }, self.bytes)
    }
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        self.bytes += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// The chain id of a layer stack (lowest first), as the OCI image spec defines it.
pub(crate) fn chain_id(diff_ids: &[Digest]) -> Option<Digest> {
    let mut ids = diff_ids.iter();
    let mut chain = ids.next()?.clone();
    for id in ids {
        chain = Digest::of(format!("{chain} {id}").as_bytes());
    }
    Some(chain)
}

#[cfg(test)]
mod tests {
    use super::*;

    const EMPTY: &str = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    #[test]
    fn parses_and_prints_sha256() {
        let d: Digest = EMPTY.parse().unwrap();
        assert_eq!(d.to_string(), EMPTY);
        assert_eq!(d, Digest::of(b""));
        assert!("sha512:abcd".parse::<Digest>().unwrap_err().why.contains("sha256"));
        assert!("sha256:abcd".parse::<Digest>().is_err());
        assert!(EMPTY.to_uppercase().replace("SHA256", "sha256").parse::<Digest>().is_err());
        assert!("e3b0c442".parse::<Digest>().is_err());
    }

    #[test]
    fn hashing_reader_and_writer_agree_with_one_shot() {
        let data = b"some layer bytes".repeat(1000);
        let mut reader = HashingReader::new(&data[..]);
        let mut first = [0u8; 10];
        reader.read_exact(&mut first).unwrap();
        let (digest, len) = reader.finish().unwrap();
        assert_eq!((digest.clone(), len), (Digest::of(&data), data.len() as u64));
        let mut writer = HashingWriter::new(Vec::new());
        writer.write_all(&data).unwrap();
        let (out, written, n) = writer.finish();
        assert_eq!((written, n, out), (digest, data.len() as u64, data));
    }

    #[test]
    fn chain_id_follows_the_spec() {
        let a = Digest::of(b"a");
        let b = Digest::of(b"b");
        assert_eq!(chain_id(&[]), None);
        assert_eq!(chain_id(std::slice::from_ref(&a)), Some(a.clone()));
        assert_eq!(chain_id(&[a.clone(), b.clone()]), Some(Digest::of(format!("{a} {b}").as_bytes())));
    }
}
