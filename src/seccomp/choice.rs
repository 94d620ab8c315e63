//! Which seccomp profile a container runs under, and the legacy string that
//! names one (CRI's `seccomp_profile_path`, `[container]
//! unset_seccomp_profile`). Which setting decides it is
//! `container::security`'s.

use std::path::{Path, PathBuf};

/// The seccomp profile a container runs under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SeccompChoice {
    Unconfined,
    RuntimeDefault,
    /// An OCI profile file on the node.
    Localhost(PathBuf),
}

impl SeccompChoice {
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            SeccompChoice::Unconfined => "Unconfined",
            SeccompChoice::RuntimeDefault => "RuntimeDefault",
            SeccompChoice::Localhost(_) => "Localhost",
        }
    }
}

/// A field the request (or the config) got wrong.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{field}: {why}")]
pub(crate) struct FieldError {
    pub(crate) field: String,
    pub(crate) why: String,
}

pub(crate) fn field_error(field: &str, why: impl Into<String>) -> FieldError {
    FieldError { field: field.to_string(), why: why.into() }
}

pub(crate) const LOCALHOST_PREFIX: &str = "localhost/";

/// An absolute path without `..`, as a Localhost profile must be.
pub(crate) fn localhost_path(field: &str, reference: &str) -> Result<PathBuf, FieldError> {
    let path = Path::new(reference.strip_prefix(LOCALHOST_PREFIX).unwrap_or(reference));
    if path.as_os_str().is_empty() {
        return Err(field_error(field, "a Localhost profile needs the path of its file"));
    }
    if !path.is_absolute() || crate::paths::has_dot_dot(path) || reference.contains('\0') {
        return Err(field_error(field, format!("{reference:?} must be an absolute path on the node without '..'")));
    }
    Ok(path.to_path_buf())
}

/// The legacy string (`runtime/default`, `docker/default`, `unconfined`,
/// `localhost/<path>`); None when empty.
pub(crate) fn from_legacy_path(field: &str, value: &str) -> Result<Option<SeccompChoice>, FieldError> {
    Ok(Some(match value {
        "" => return Ok(None),
        "runtime/default" | "docker/default" => SeccompChoice::RuntimeDefault,
        "unconfined" => SeccompChoice::Unconfined,
        other => SeccompChoice::Localhost(localhost_path(field, other)?),
    }))
}
