//! Names of work in progress in the image store (`.tmp-<pid>-<random>`): a
//! file or directory being written by a live process, or the leftover of one
//! that died (a crash, a killed import), which anyone may remove.

use std::path::Path;

const PREFIX: &str = ".tmp-";

/// A fresh in-progress name owned by this process.
pub(crate) fn new_name() -> String {
    format!("{PREFIX}{}-{:016x}", std::process::id(), rand::random::<u64>())
}

/// True for an in-progress name whose process is gone (pids are read in this
/// process's PID namespace, which is the one nidus and its CLI share).
pub(crate) fn is_stale(name: &str) -> bool {
    let Some(rest) = name.strip_prefix(PREFIX) else { return false };
    match rest.split_once('-').and_then(|(pid, _)| pid.parse::<u32>().ok()) {
        Some(pid) => pid != std::process::id() && !Path::new(&format!("/proc/{pid}")).exists(),
        None => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_names_are_live_and_dead_pids_are_stale() {
        let mine = new_name();
        assert!(!is_stale(&mine));
        assert!(!is_stale("abc"));
        // pid_max is at most 2^22, so this pid cannot exist.
        assert!(is_stale(".tmp-99999999-0000000000000000"));
        assert!(is_stale(".tmp-garbage"));
    }
}
