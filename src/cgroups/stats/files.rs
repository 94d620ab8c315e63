//! A cgroup directory opened once per reading, its files opened relative to
//! it (openat): the kernel walks a cgroup's long path (a dozen components
//! on a kubelet node) once per directory instead of once per file, which is
//! most of what a reading costs. Readers for the files' formats: a single
//! value, `key value` lines, and the pids of `cgroup.procs`.

use std::collections::HashMap;
use std::fs::File;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::Path;

use nix::fcntl::{open, openat, OFlag};
use nix::sys::stat::Mode;

pub(crate) struct CgroupDir {
    fd: OwnedFd,
}

impl CgroupDir {
    /// Opens `path`; None when it is not a directory (a cgroup gone, or a
    /// controller not mounted).
    pub(crate) fn open(path: &Path) -> Option<Self> {
        let fd = open(path, OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC, Mode::empty()).ok()?;
        Some(Self { fd })
    }

    /// The whole of file `name`; None when it is missing or unreadable.
    pub(crate) fn read(&self, name: &str) -> Option<String> {
        let fd = openat(&self.fd, name, OFlag::O_RDONLY | OFlag::O_CLOEXEC, Mode::empty()).ok()?;
        let mut text = String::new();
        File::from(fd).read_to_string(&mut text).ok()?;
        Some(text)
    }

    /// A file holding one number; `max` reads as u64::MAX.
    pub(crate) fn single(&self, name: &str) -> Option<u64> {
        let text = self.read(name)?;
        match text.trim() {
            "max" => Some(u64::MAX),
            value => value.parse().ok(),
        }
    }

    /// A flat-keyed file (`key value` lines).
    pub(crate) fn flat_keyed(&self, name: &str) -> Option<HashMap<String, u64>> {
        self.read(name).map(|text| parse_flat_keyed(&text))
    }

    /// The pids in `cgroup.procs`.
    pub(crate) fn procs(&self) -> Option<Vec<i32>> {
        let text = self.read("cgroup.procs")?;
        Some(text.lines().filter_map(|l| l.trim().parse().ok()).collect())
    }
}

pub(crate) fn parse_flat_keyed(text: &str) -> HashMap<String, u64> {
    text.lines()
        .filter_map(|line| {
            let (key, value) = line.split_once(' ')?;
            Some((key.to_string(), value.trim().parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_files_relative_to_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("one"), "42\n").unwrap();
        std::fs::write(dir.path().join("limit"), "max\n").unwrap();
        std::fs::write(dir.path().join("keyed"), "usage_usec 1500\nbad line here\nnr_periods 4\n").unwrap();
        std::fs::write(dir.path().join("cgroup.procs"), "12\n345\n").unwrap();
        let cgroup = CgroupDir::open(dir.path()).unwrap();
        assert_eq!(cgroup.single("one"), Some(42));
        assert_eq!(cgroup.single("limit"), Some(u64::MAX));
        assert_eq!(cgroup.single("missing"), None);
        let keyed = cgroup.flat_keyed("keyed").unwrap();
        assert_eq!((keyed["usage_usec"], keyed["nr_periods"]), (1500, 4));
        assert!(!keyed.contains_key("bad"));
        assert_eq!(cgroup.procs(), Some(vec![12, 345]));
        assert!(CgroupDir::open(&dir.path().join("one")).is_none(), "a file is no cgroup");
        assert!(CgroupDir::open(&dir.path().join("gone")).is_none());
    }
}
