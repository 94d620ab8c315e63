//! SPDY/3.1 as Kubernetes streaming uses it (written here: no maintained
//! crate implements it): frames, zlib-compressed header blocks with the
//! spec's dictionary, and the server side of a connection.

pub(crate) mod conn;
pub(crate) mod dictionary;
pub mod frame;
pub mod headers;

pub(crate) use conn::{Connection, IncomingStream, Outbound};
pub(crate) use headers::Headers;
