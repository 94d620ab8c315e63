//! The daemon side of a container's seccomp profile: reading the chosen
//! profile (the embedded RuntimeDefault or a Localhost file), resolving it for
//! the container's capabilities, and compiling it through the program cache.
//! The init and the exec helper load the program the daemon writes beside the
//! container's `config.json`; they never compile.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use crate::bounded_file::{self, BoundedReadError, FinalLink};
use crate::seccomp::cache::ProgramCache;
use crate::seccomp::{CompiledProfile, Profile, RUNTIME_DEFAULT_JSON};

use super::security::SeccompChoice;

/// Why a profile cannot be used.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ConfinementError {
    #[error("seccomp profile {path} not found (from {source_field})")]
    Missing { path: String, source_field: String },
    #[error("seccomp profile {path}: {why}")]
    Invalid { path: String, why: String },
}

/// A container's compiled profile and what it cost.
pub(crate) struct SeccompProgram {
    /// The resolved profile, for the spec's `linux.seccomp`.
    pub(crate) profile: Profile,
    pub(crate) program: Arc<CompiledProfile>,
    pub(crate) cached: bool,
    /// Reading, resolving and compiling (or finding in the cache), in µs.
    pub(crate) prepare_us: u64,
}

/// The RuntimeDefault template and the compiled programs of this daemon.
pub(crate) struct SeccompPrograms {
    /// Parsed once; an error here is a build defect (unit tests parse it),
    /// reported to whoever asks for RuntimeDefault.
    runtime_default: Result<Profile, String>,
    cache: ProgramCache,
    /// Largest Localhost profile read (`[limits] seccomp_profile_bytes`).
    profile_limit: u64,
}

const RUNTIME_DEFAULT_NAME: &str = "(embedded RuntimeDefault)";

impl SeccompPrograms {
    /// `profile_limit`: the largest Localhost profile read, in bytes.
    pub(crate) fn new(profile_limit: u64) -> Self {
        let runtime_default = Profile::parse(RUNTIME_DEFAULT_JSON.as_bytes()).map_err(|e| e.to_string());
        Self { runtime_default, cache: ProgramCache::new(), profile_limit }
    }

    pub(crate) fn cache_stats(&self) -> crate::seccomp::cache::CacheStats {
        self.cache.stats()
    }

    /// The program for `choice` given the container's bounding set (`CAP_…`
    /// names); None when unconfined. `source_field` names the setting that
    /// chose it, for error messages.
    pub(crate) fn prepare(
        &self,
        choice: &SeccompChoice,
        bounding: &BTreeSet<String>,
        source_field: &str,
    ) -> Result<Option<SeccompProgram>, ConfinementError> {
        let started = Instant::now();
        let (localhost, path) = match choice {
            SeccompChoice::Unconfined => return Ok(None),
            SeccompChoice::RuntimeDefault => (None, RUNTIME_DEFAULT_NAME.to_string()),
            SeccompChoice::Localhost(path) => {
                (Some(read_profile(path, source_field, self.profile_limit)?), path.display().to_string())
            }
        };
        let template = match &localhost {
            Some(profile) => profile,
            None => self
                .runtime_default
                .as_ref()
                .map_err(|why| ConfinementError::Invalid { path: path.clone(), why: why.clone() })?,
        };
        let profile = template.resolve(bounding);
        let lookup = self
            .cache
            .get_or_compile(&profile)
            .map_err(|e| ConfinementError::Invalid { path: path.clone(), why: e.to_string() })?;
        Ok(Some(SeccompProgram {
            profile,
            program: lookup.program,
            cached: lookup.cached,
            prepare_us: started.elapsed().as_micros() as u64,
        }))
    }
}

/// Reads a Localhost profile: a regular file of at most `limit` bytes,
/// opened without blocking (a FIFO or device is refused, never waited on).
fn read_profile(path: &Path, source_field: &str, limit: u64) -> Result<Profile, ConfinementError> {
    let shown = path.display().to_string();
    let bytes = bounded_file::read(path, limit, FinalLink::Follow).map_err(|e| match e {
        BoundedReadError::NotFound(_) => {
            ConfinementError::Missing { path: shown.clone(), source_field: source_field.to_string() }
        }
        BoundedReadError::TooLarge { .. } => ConfinementError::Invalid {
            path: shown.clone(),
            why: format!("{source_field}: {e} (the config's [limits] seccomp_profile_bytes)"),
        },
        _ => ConfinementError::Invalid { path: shown.clone(), why: format!("{source_field}: {e}") },
    })?;
    Profile::parse(&bytes).map_err(|e| ConfinementError::Invalid { path: shown, why: e.to_string() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn localhost_files_are_read_and_their_problems_named() {
        let programs = SeccompPrograms::new(1 << 20);
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path().to_path_buf();
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("deny-mkdir.json");
        std::fs::write(
            &good,
            br#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir"],"action":"SCMP_ACT_ERRNO"}]}"#,
        )
        .unwrap();
        let bad = dir.join("bad.json");
        std::fs::write(&bad, b"{ nope").unwrap();
        let caps = BTreeSet::new();
        let first = programs.prepare(&SeccompChoice::Localhost(good.clone()), &caps, "f").unwrap().unwrap();
        assert!(!first.cached);
        assert!(programs.prepare(&SeccompChoice::Localhost(good), &caps, "f").unwrap().unwrap().cached);
        let missing = programs.prepare(&SeccompChoice::Localhost(dir.join("nope.json")), &caps, "the field");
        assert!(matches!(&missing, Err(ConfinementError::Missing { path, .. }) if path.ends_with("nope.json")));
        assert!(missing.err().unwrap().to_string().contains("the field"));
        let malformed = programs.prepare(&SeccompChoice::Localhost(bad), &caps, "f").err().unwrap().to_string();
        assert!(malformed.contains("bad.json") && malformed.contains("malformed JSON"), "{malformed}");
        assert!(programs.prepare(&SeccompChoice::Unconfined, &caps, "f").unwrap().is_none());
        let default = programs.prepare(&SeccompChoice::RuntimeDefault, &caps, "f").unwrap().unwrap();
        assert_eq!(default.program.filters.len(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
