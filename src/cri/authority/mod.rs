//! Accepts every HTTP/2 `:authority` a local CRI client sends. gRPC clients
//! put the Unix socket's path there (grpc-go before 1.31-era cri-tools and
//! kubelet send it percent-encoded, grpc-java raw, C-core percent-encoded),
//! which the HTTP/2 server under tonic refuses as an invalid host. A Unix
//! socket has no use for the authority, so this layer, in front of the HTTP/2
//! server, rewrites an `:authority` that is not a valid host to `localhost`
//! in the client's header blocks; every other byte, and so every other HTTP/2
//! and gRPC check, is the server's as before.

mod frames;
mod stream;

pub(crate) use frames::MAX_HEADER_LIST;
pub use frames::{AuthorityNormalizer, NormalizeError};
pub(crate) use stream::NormalizedStream;
