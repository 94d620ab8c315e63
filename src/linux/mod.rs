//! The Linux layer: every system call nidus makes below the std/nix safe surface.
//! All `unsafe` code in nidus lives in this module tree, each block with a
//! `// SAFETY:` line; callers above it see only safe functions.

pub(crate) mod beneath;
pub(crate) mod capability_sets;
pub(crate) mod clone3;
pub mod device_filter;
pub(crate) mod lock;
pub(crate) mod log_file;
pub(crate) mod mount;
pub(crate) mod namespaces;
pub(crate) mod net;
pub(crate) mod netns_connect;
pub(crate) mod placed_fds;
pub mod process;
pub(crate) mod pty;
pub(crate) mod reaper;
pub(crate) mod rootfs;
pub(crate) mod runtime_program;
pub(crate) mod seccomp;
pub(crate) mod socket;
pub(crate) mod tiny_programs;
pub mod userns;

use std::ffi::CString;
use std::io;

/// `bytes` as a C string for a system call; a NUL byte inside is invalid
/// input, named in the error.
pub(crate) fn c_string(bytes: impl Into<Vec<u8>>) -> io::Result<CString> {
    CString::new(bytes).map_err(|e| {
        let text = String::from_utf8_lossy(&e.into_vec()).into_owned();
        io::Error::new(io::ErrorKind::InvalidInput, format!("NUL byte in {text:?}"))
    })
}

#[cfg(test)]
mod tests {
    use super::c_string;

    #[test]
    fn c_string_keeps_the_bytes_and_refuses_an_inner_nul() {
        assert_eq!(c_string("/run/nidus").unwrap().as_bytes(), b"/run/nidus");
        assert_eq!(c_string(&b"caf\xe9"[..]).unwrap().as_bytes(), b"caf\xe9");
        let err = c_string("a\0b").unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
        assert_eq!(err.to_string(), "NUL byte in \"a\\0b\"");
    }
}
