//! How many processes of a cgroup the kernel's OOM killer has killed: v2's
//! `memory.events` `oom_kill` (not `oom`, which also counts OOMs the cgroup
//! survived), v1's `memory.oom_control` `oom_kill`. A container's monitor reads
//! it when the container's init ends, before anything removes the cgroup.

use std::fs;
use std::path::Path;

use super::stats::parse_flat_keyed;

/// The OOM kills recorded in the memory cgroup directory `dir`; None when
/// the kernel does not count them there (or the cgroup is gone).
pub(crate) fn oom_kills(dir: &Path) -> Option<u64> {
    ["memory.events", "memory.oom_control"]
        .iter()
        .find_map(|file| fs::read_to_string(dir.join(file)).ok())
        .and_then(|text| parse_flat_keyed(&text).get("oom_kill").copied())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_oom_kill_not_oom() {
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path().to_path_buf();
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("memory.events"), "low 0\nhigh 0\nmax 12\noom 3\noom_kill 1\noom_group_kill 0\n").unwrap();
        assert_eq!(oom_kills(&dir), Some(1));
        fs::remove_file(dir.join("memory.events")).unwrap();
        fs::write(dir.join("memory.oom_control"), "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n").unwrap();
        assert_eq!(oom_kills(&dir), Some(2));
        fs::remove_dir_all(&dir).unwrap();
        assert_eq!(oom_kills(&dir), None);
    }
}
