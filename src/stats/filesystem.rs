//! Where metrics say disk use happens: the filesystem that holds the
//! writable layers (its device as the mount table names it, its size and
//! inodes, from statvfs) and the names of block devices by number
//! (`/sys/dev/block/MAJ:MIN` links to the device's sysfs directory,
//! named as in `/dev`).

use std::collections::HashMap;
use std::fs;
use std::path::Path;

use serde::Serialize;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Filesystem {
    /// The mount's source (`/dev/vda1`, `overlay`, `tmpfs`…).
    pub(crate) device: String,
    pub(crate) capacity_bytes: u64,
    pub(crate) inodes: u64,
    pub(crate) inodes_free: u64,
}

/// The filesystem `dir` is on, named `device`; None when statvfs fails.
pub(crate) fn filesystem_of(dir: &Path, device: &str) -> Option<Filesystem> {
    let fs = nix::sys::statvfs::statvfs(dir).ok()?;
    Some(Filesystem {
        device: device.to_string(),
        capacity_bytes: fs.blocks().saturating_mul(fs.fragment_size()),
        inodes: fs.files(),
        inodes_free: fs.files_free(),
    })
}

/// The source of the mount `dir` is on, from `/proc/self/mountinfo`;
/// empty when it cannot be told.
pub(crate) fn mount_source_of(dir: &Path) -> String {
    let Ok(dir) = fs::canonicalize(dir) else { return String::new() };
    let Ok(mountinfo) = fs::read_to_string("/proc/self/mountinfo") else { return String::new() };
    mount_source(&mountinfo, &dir).unwrap_or_default()
}

/// The source of the last-mounted, deepest mount whose mount point holds `dir`.
fn mount_source(mountinfo: &str, dir: &Path) -> Option<String> {
    let mut best: Option<(usize, String)> = None;
    for line in mountinfo.lines() {
        let Some((pre, post)) = line.split_once(" - ") else { continue };
        let Some(mount_point) = pre.split(' ').nth(4) else { continue };
        let Some(source) = post.split(' ').nth(1) else { continue };
        let mount_point = unescape(mount_point);
        if dir.starts_with(&mount_point) {
            let depth = Path::new(&mount_point).components().count();
            // Later lines mount over earlier ones at the same point.
            if best.as_ref().is_none_or(|(d, _)| depth >= *d) {
                best = Some((depth, unescape(source)));
            }
        }
    }
    best.map(|(_, source)| source)
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 3 < bytes.len() && bytes[i + 1..i + 4].iter().all(|b| (b'0'..=b'7').contains(b)) {
            let octal = std::str::from_utf8(&bytes[i + 1..i + 4]).ok().and_then(|o| u8::from_str_radix(o, 8).ok());
            if let Some(b) = octal {
                out.push(b);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Block device names by number, looked up once per reading.
#[derive(Default)]
pub(crate) struct DeviceNames {
    known: HashMap<(u32, u32), String>,
}

impl DeviceNames {
    /// `/dev/<name>` of block device `major:minor`; empty when sysfs does not know it.
    pub(crate) fn name(&mut self, major: u32, minor: u32) -> String {
        self.known
            .entry((major, minor))
            .or_insert_with(|| {
                fs::read_link(format!("/sys/dev/block/{major}:{minor}"))
                    .ok()
                    .and_then(|target| target.file_name().map(|n| format!("/dev/{}", n.to_string_lossy())))
                    .unwrap_or_default()
            })
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_deepest_mount_holding_a_directory_names_its_device() {
        let mountinfo = "22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n\
                         30 22 0:26 / /var/lib/nidus rw - xfs /dev/sdb1 rw\n\
                         31 22 0:27 / /var/lib/nidus-other rw - tmpfs tmpfs rw\n\
                         32 22 0:28 / /mnt/with\\040space rw - ext4 /dev/sdc rw\n";
        assert_eq!(mount_source(mountinfo, Path::new("/var/lib/nidus/containers")).as_deref(), Some("/dev/sdb1"));
        assert_eq!(mount_source(mountinfo, Path::new("/var/lib/nidusx")).as_deref(), Some("/dev/vda"));
        assert_eq!(mount_source(mountinfo, Path::new("/mnt/with space/x")).as_deref(), Some("/dev/sdc"));
        assert_eq!(mount_source("", Path::new("/")), None);
    }

    #[test]
    fn statvfs_and_device_names() {
        let fs = filesystem_of(Path::new("/"), "/dev/root").unwrap();
        assert!(fs.capacity_bytes > 0 && fs.inodes_free <= fs.inodes);
        assert!(filesystem_of(Path::new("/no/such/dir"), "").is_none());
        let mut names = DeviceNames::default();
        assert_eq!(names.name(0, 0), "", "no block device 0:0");
    }
}
