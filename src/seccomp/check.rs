//! `nidus seccomp check`: what a profile compiles to and what each step of
//! confining a container with it costs — parsing, resolving and hashing (the
//! cache key), compiling, a cache hit, the program file, and installing the
//! filters (measured in forked children).

use std::collections::BTreeSet;
use std::time::Instant;

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::cache::ProgramCache;
use super::profile::Profile;
use super::program::{self, ProgramSummary};

/// Microseconds: median and 99th percentile over the runs.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct Timing {
    pub(crate) p50_us: f64,
    pub(crate) p99_us: f64,
}

fn timing(mut nanos: Vec<u64>) -> Timing {
    nanos.sort_unstable();
    let at = |q: f64| nanos.get(((nanos.len() as f64 - 1.0) * q).round() as usize).copied().unwrap_or(0) as f64 / 1e3;
    Timing { p50_us: at(0.5), p99_us: at(0.99) }
}

fn measure<T>(runs: u32, mut step: impl FnMut() -> T) -> (T, Timing) {
    let mut nanos = Vec::with_capacity(runs as usize);
    let mut timed = |nanos: &mut Vec<u64>| {
        let started = Instant::now();
        let value = step();
        nanos.push(started.elapsed().as_nanos() as u64);
        value
    };
    let mut last = timed(&mut nanos);
    for _ in 1..runs {
        last = timed(&mut nanos);
    }
    (last, timing(nanos))
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckReport {
    pub(crate) program: ProgramSummary,
    pub(crate) runs: u32,
    /// Parsing the profile JSON (a Localhost file, at every CreateContainer).
    pub(crate) parse: Timing,
    /// Resolving capability conditions and hashing the result (every create).
    pub(crate) resolve_and_hash: Timing,
    /// Compiling to BPF (a cache miss).
    pub(crate) compile: Timing,
    /// Resolve, hash and find in the cache (a cache hit: the daemon's cost).
    pub(crate) cache_hit: Timing,
    /// Encoding the program file (daemon) and decoding + preparing it (init).
    pub(crate) encode: Timing,
    pub(crate) decode_and_prepare: Timing,
    /// Installing every filter with seccomp(2) (the init's cost).
    pub(crate) install: Option<Timing>,
}

/// Checks `json` for a container with `bounding` capabilities; `install`
/// also times installing the filters in forked children.
pub fn check(json: &[u8], bounding: &BTreeSet<String>, runs: u32, install: bool) -> Result<CheckReport, String> {
    let (profile, parse) = measure(runs, || Profile::parse(json));
    let profile = profile.map_err(|e| e.to_string())?;
    let (resolved, resolve_and_hash) = measure(runs, || {
        let resolved = profile.resolve(bounding);
        let _key = Sha256::digest(resolved.canonical_json());
        resolved
    });
    let (compiled, compile) = measure(runs, || super::compile(&resolved));
    let compiled = compiled.map_err(|e| e.to_string())?;
    let cache = ProgramCache::new();
    cache.get_or_compile(&resolved).map_err(|e| e.to_string())?;
    let (_, cache_hit) = measure(runs, || cache.get_or_compile(&profile.resolve(bounding)));
    let (bytes, encode) = measure(runs, || program::encode(&compiled.filters));
    let (prepared, decode_and_prepare) = measure(runs, || program::decode(&bytes).map(|f| program::prepare(&f)));
    let prepared = prepared.map_err(|e| e.to_string())?;
    let install = if install {
        let nanos = crate::linux::seccomp::time_install_in_children(&prepared, runs)
            .map_err(|e| format!("timing the install: {e}"))?;
        Some(timing(nanos))
    } else {
        None
    };
    Ok(CheckReport {
        program: compiled.summary(),
        runs,
        parse,
        resolve_and_hash,
        compile,
        cache_hit,
        encode,
        decode_and_prepare,
        install,
    })
}
