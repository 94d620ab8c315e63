//! Compiled programs by the sha256 of the resolved profile they came from,
//! so the containers of a pod (or a node) that share a profile and a
//! capability set compile it once. Bounded: when full, it starts over.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use sha2::{Digest, Sha256};

use super::compile::{compile, CompileError};
use super::profile::Profile;
use super::program::CompiledProfile;

/// Most programs kept (a node rarely has more than a few distinct profiles).
const CAPACITY: usize = 256;

#[derive(Default)]
pub struct ProgramCache {
    programs: Mutex<HashMap<String, Arc<CompiledProfile>>>,
    compiled: AtomicU64,
    hits: AtomicU64,
}

/// How the cache has done since the daemon started.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct CacheStats {
    pub(crate) programs: usize,
    pub(crate) compiled: u64,
    pub(crate) hits: u64,
}

/// A program and whether it came from the cache.
pub struct Lookup {
    pub program: Arc<CompiledProfile>,
    pub cached: bool,
}

impl ProgramCache {
    pub fn new() -> Self {
        Self::default()
    }

    /// The compiled form of a resolved profile, compiled on first use.
    pub fn get_or_compile(&self, profile: &Profile) -> Result<Lookup, CompileError> {
        let key = hex::encode(Sha256::digest(profile.canonical_json()));
        if let Some(program) = self.lock().get(&key) {
            self.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(Lookup { program: program.clone(), cached: true });
        }
        // Compiled outside the lock: two creates racing on a new profile both
        // compile it, which is harmless.
        let program = Arc::new(compile(profile)?);
        self.compiled.fetch_add(1, Ordering::Relaxed);
        let mut programs = self.lock();
        if programs.len() >= CAPACITY {
            programs.clear();
        }
        programs.insert(key, program.clone());
        Ok(Lookup { program, cached: false })
    }

    pub(crate) fn stats(&self) -> CacheStats {
        CacheStats {
            programs: self.len(),
            compiled: self.compiled.load(Ordering::Relaxed),
            hits: self.hits.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<CompiledProfile>>> {
        self.programs.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_compile_per_distinct_profile() {
        let cache = ProgramCache::new();
        let a = Profile::parse(
            br#"{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"names":["read"],"action":"SCMP_ACT_ALLOW"}]}"#,
        )
        .unwrap();
        let b = Profile::parse(
            br#"{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"names":["write"],"action":"SCMP_ACT_ALLOW"}]}"#,
        )
        .unwrap();
        let first = cache.get_or_compile(&a).unwrap();
        assert!(!first.cached);
        for _ in 0..9 {
            let again = cache.get_or_compile(&a).unwrap();
            assert!(again.cached);
            assert!(Arc::ptr_eq(&again.program, &first.program));
        }
        assert!(!cache.get_or_compile(&b).unwrap().cached);
        assert_eq!(cache.stats(), CacheStats { programs: 2, compiled: 2, hits: 9 });
    }
}
