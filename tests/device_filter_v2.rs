//! The cgroup v2 device program (nidus::cgroups::device_program, attached by
//! nidus::linux::device_filter) against the
//! kernel. On this machine the daemon runs the v1 devices controller (its
//! cgroup2 hierarchy is empty), so CreateContainer never takes the v2 path;
//! the program is attached here directly to a cgroup made under the test
//! process's own cgroup in the cgroup2 hierarchy, and shells moved into it try
//! the devices. Fails, saying so, when the machine has no cgroup2 mount.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use nidus::cgroups::devices::{DeviceKind, DeviceRule};

/// The test process's own cgroup in the cgroup2 hierarchy.
fn own_cgroup2_dir() -> PathBuf {
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").unwrap();
    let mount_point = mountinfo
        .lines()
        .find_map(|l| {
            let (pre, post) = l.split_once(" - ")?;
            post.starts_with("cgroup2 ").then(|| pre.split(' ').nth(4).map(PathBuf::from)).flatten()
        })
        .expect("this machine has no cgroup2 mount: the v2 device program cannot be tried");
    let own = fs::read_to_string("/proc/self/cgroup").unwrap();
    let path = own.lines().find_map(|l| l.strip_prefix("0::")).expect("no cgroup2 line in /proc/self/cgroup");
    mount_point.join(path.trim_start_matches('/'))
}

/// Removes the test cgroup, also when the test fails.
struct TestCgroup(PathBuf);

impl Drop for TestCgroup {
    fn drop(&mut self) {
        for _ in 0..100 {
            if fs::remove_dir(&self.0).is_ok() || !self.0.exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

/// Runs `script` in a shell that first moves itself into `cgroup`.
fn in_cgroup(cgroup: &Path, script: &str) -> (bool, String) {
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("echo $$ > {}/cgroup.procs && {script}", cgroup.display()))
        .output()
        .expect("running sh");
    (out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn the_v2_device_program_allows_exactly_its_list() {
    common::host::require_root();
    let dir = own_cgroup2_dir().join(format!("nidus-devices-{}", std::process::id()));
    fs::create_dir(&dir).unwrap_or_else(|e| panic!("creating {}: {e}", dir.display()));
    let cgroup = TestCgroup(dir.clone());
    let char_dev = |major, minor, access: &str| DeviceRule {
        kind: DeviceKind::Char,
        major: Some(major),
        minor: Some(minor),
        access: access.into(),
    };
    // /dev/null read-write, /dev/zero read-only, nothing else.
    let program = nidus::cgroups::device_program::program(&[char_dev(1, 3, "rwm"), char_dev(1, 5, "r")]);
    nidus::linux::device_filter::attach(&cgroup.0, &program).unwrap();

    let (ok, out) = in_cgroup(&cgroup.0, "echo x > /dev/null && cat /dev/null && echo done");
    assert!(ok && out.ends_with("done\n"), "{out}");
    let (ok, out) = in_cgroup(&cgroup.0, "head -c 3 /dev/zero | wc -c");
    assert!(ok && out.trim() == "3", "{out}");
    let (ok, out) = in_cgroup(&cgroup.0, "echo x > /dev/zero");
    assert!(!ok && out.contains("Operation not permitted"), "writing a read-only device: {out}");
    let (ok, out) = in_cgroup(&cgroup.0, "head -c 1 /dev/full");
    assert!(!ok && out.contains("Operation not permitted"), "a device not in the list: {out}");
    // Outside the cgroup nothing changed.
    assert!(Command::new("head").args(["-c", "1", "/dev/full"]).output().unwrap().status.success());
}
