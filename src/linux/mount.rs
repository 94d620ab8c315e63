//! Mounts made on the host side: the per-pod /dev/shm tmpfs, and their removal.

use std::io;
use std::path::Path;

use nix::errno::Errno;
use nix::mount::{mount, umount2, MntFlags, MsFlags};

/// Mounts a fresh tmpfs at `target` (nosuid, nodev, noexec) with `options`
/// such as `mode=1777,size=65536k`.
pub(crate) fn mount_tmpfs(target: &Path, options: &str) -> io::Result<()> {
    mount(
        Some("shm"),
        target,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
        Some(options),
    )
    .map_err(io::Error::from)
}

/// Detaches whatever is mounted at `target`, all of it (a mount may be stacked).
/// Succeeds when nothing is mounted there or the path is gone.
pub(crate) fn unmount_all(target: &Path) -> io::Result<()> {
    loop {
        match umount2(target, MntFlags::MNT_DETACH) {
            Ok(()) => continue,
            Err(Errno::EINVAL) | Err(Errno::ENOENT) => return Ok(()),
            Err(e) => return Err(io::Error::from(e)),
        }
    }
}

/// The mount `path` lives on (its mount point) and whether that mount is
/// shared (has a peer group); `None` when mountinfo cannot be read.
pub(crate) fn containing_mount(path: &Path) -> Option<(std::path::PathBuf, bool)> {
    let text =
        crate::bounded_file::read(Path::new("/proc/self/mountinfo"), 64 << 20, crate::bounded_file::FinalLink::Follow)
            .ok()?;
    let text = String::from_utf8_lossy(&text);
    let path = std::fs::canonicalize(path).ok()?;
    let mut best: Option<(std::path::PathBuf, bool)> = None;
    for line in text.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        let Some(mount_point) = fields.get(4).map(|mp| std::path::PathBuf::from(unescape_mountinfo(mp))) else {
            continue;
        };
        if !path.starts_with(&mount_point) {
            continue;
        }
        let optional = fields.iter().skip(6).take_while(|f| **f != "-");
        let shared = optional.clone().any(|f| f.starts_with("shared:"));
        // The last listed of equal mount points is the one on top.
        if best.as_ref().is_none_or(|(b, _)| mount_point.components().count() >= b.components().count()) {
            best = Some((mount_point, shared));
        }
    }
    best
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape_mountinfo(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).filter(|d| d.iter().all(|c| (b'0'..=b'7').contains(c)));
        match (bytes[i], octal) {
            (b'\\', Some(d)) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// True when `dir` is marked opaque for overlayfs (xattr `trusted.overlay.opaque=y`).
pub(crate) fn is_overlay_opaque(dir: &Path) -> bool {
    let Ok(path) = super::c_string(dir.as_os_str().as_encoded_bytes()) else {
        return false;
    };
    let name = c"trusted.overlay.opaque";
    let mut value = [0u8; 4];
    // SAFETY: path and name are valid C strings; value is a buffer of the length passed.
    let n =
        unsafe { libc::lgetxattr(path.as_ptr(), name.as_ptr(), value.as_mut_ptr() as *mut libc::c_void, value.len()) };
    n == 1 && value[0] == b'y'
}

#[cfg(test)]
mod tests {
    use super::unescape_mountinfo;

    #[test]
    fn unescapes_octal_sequences() {
        assert_eq!(unescape_mountinfo(r"/a\040b"), "/a b");
        assert_eq!(unescape_mountinfo(r"/plain"), "/plain");
        assert_eq!(unescape_mountinfo(r"/end\\"), r"/end\\");
    }
}
