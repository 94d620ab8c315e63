//! Paths and mounts inside a container's root, resolved so that nothing in the
//! image (a symlink planted at /dev, /etc/hosts, …) can point a mount or a
//! device node outside it: every path is opened with openat2(RESOLVE_IN_ROOT)
//! against the rootfs, and mounts go through /proc/self/fd of that handle.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

const AT_RECURSIVE: libc::c_uint = 0x8000;

/// A path's bytes as they are (a name need not be UTF-8).
fn cpath(p: &Path) -> io::Result<CString> {
    super::c_string(p.as_os_str().as_encoded_bytes())
}

/// openat2 with RESOLVE_IN_ROOT (and no magic links) below `root`.
pub(crate) fn open_in_root(root: RawFd, path: &Path, flags: i32, mode: u32) -> io::Result<OwnedFd> {
    let rel = path.strip_prefix("/").unwrap_or(path);
    let rel = if rel.as_os_str().is_empty() { Path::new(".") } else { rel };
    let c = cpath(rel)?;
    // SAFETY: open_how is plain old data; all-zero is valid.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | libc::O_CLOEXEC) as u64;
    how.mode = if flags & libc::O_CREAT != 0 { mode as u64 } else { 0 };
    how.resolve = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS;
    // SAFETY: `c` is a valid NUL-terminated string and `how` a valid open_how
    // of the size passed; the returned fd is new and owned by nobody else.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root,
            c.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fd was just returned by the kernel.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Creates `path` below `root` (and missing parents, as directories) and
/// returns an O_PATH handle on it: a directory when `dir`, else an empty file.
pub(crate) fn create_in_root(root: RawFd, path: &Path, dir: bool) -> io::Result<OwnedFd> {
    // Most mount points exist in the image already: one lookup then.
    match open_in_root(root, path, libc::O_PATH, 0) {
        Err(e) if e.raw_os_error() == Some(libc::ENOENT) => {}
        found => return found,
    }
    // "/" and paths ending in ".." have no name and always exist: the lookup above answered.
    let Some(name) = path.file_name() else {
        return open_in_root(root, path, libc::O_PATH, 0);
    };
    // The parent (made first when missing too) is the directory the new
    // entry goes in: a single name below a handle resolved in the root.
    let parent = create_in_root(root, path.parent().unwrap_or(Path::new("/")), true)?;
    let cname = cpath(Path::new(name))?;
    if dir {
        nix::sys::stat::mkdirat(&parent, cname.as_c_str(), nix::sys::stat::Mode::from_bits_truncate(0o755))
            .or_else(|e| if e == nix::errno::Errno::EEXIST { Ok(()) } else { Err(e) })
            .map_err(io::Error::from)?;
    } else {
        // SAFETY: parent is an open (O_PATH) directory fd, usable as a dirfd,
        // and cname a valid C string.
        let fd = unsafe {
            libc::openat(
                parent.as_raw_fd(),
                cname.as_ptr(),
                libc::O_CREAT | libc::O_WRONLY | libc::O_CLOEXEC | libc::O_NOFOLLOW,
                0o644,
            )
        };
        if fd < 0 {
            let err = io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EEXIST) {
                return Err(err);
            }
        } else {
            // SAFETY: fd was just returned by openat and is closed once here.
            unsafe { libc::close(fd) };
        }
    }
    open_in_root(root, path, libc::O_PATH, 0)
}

/// The path through which a handle can be named in mount calls.
pub(crate) fn fd_path(fd: &OwnedFd) -> String {
    format!("/proc/self/fd/{}", fd.as_raw_fd())
}

/// mount(2) with string arguments.
pub(crate) fn mount(
    source: Option<&str>,
    target: &str,
    fstype: Option<&str>,
    flags: libc::c_ulong,
    data: Option<&str>,
) -> io::Result<()> {
    let source = source.map(super::c_string).transpose()?;
    let target = super::c_string(target)?;
    let fstype = fstype.map(super::c_string).transpose()?;
    let data = data.filter(|d| !d.is_empty()).map(super::c_string).transpose()?;
    // SAFETY: every pointer is null or a valid NUL-terminated string that
    // outlives the call.
    let rc = unsafe {
        libc::mount(
            source.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            target.as_ptr(),
            fstype.as_ref().map_or(std::ptr::null(), |s| s.as_ptr()),
            flags,
            data.as_ref().map_or(std::ptr::null(), |s| s.as_ptr() as *const libc::c_void),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Makes `target` and everything below it read-only (mount_setattr, Linux ≥ 5.12).
pub(crate) fn make_recursively_read_only(target: &str) -> io::Result<()> {
    let target = super::c_string(target)?;
    let attr = libc::mount_attr { attr_set: libc::MOUNT_ATTR_RDONLY, attr_clr: 0, propagation: 0, userns_fd: 0 };
    // SAFETY: target is a valid C string; attr is a valid mount_attr of the size passed.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            target.as_ptr(),
            AT_RECURSIVE,
            &attr as *const libc::mount_attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Whether the kernel has mount_setattr(2) (Linux ≥ 5.12), which makes
/// recursive read-only mounts: a call that can only fail tells, by ENOSYS.
pub(crate) fn has_mount_setattr() -> bool {
    // SAFETY: an invalid fd, a null path and a null attribute of size 0: the
    // kernel reads nothing and returns an error.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            -1,
            std::ptr::null::<libc::c_char>(),
            0,
            std::ptr::null::<libc::mount_attr>(),
            0,
        )
    };
    !(rc < 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ENOSYS))
}

fn check(rc: libc::c_long) -> io::Result<libc::c_long> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// Mounts an overlay of `lower` (lowest first) with `upper`/`work` at
/// `target`. Uses the new mount API and `lowerdir+` (one layer per call, so
/// any number of layers fits); falls back to one option string on kernels
/// without it.
pub(crate) fn mount_overlay(lower: &[std::path::PathBuf], upper: &Path, work: &Path, target: &Path) -> io::Result<()> {
    overlay(lower, Some((upper, work)), target, 0)
}

/// Mounts a read-only overlay of `lower` (lowest first, at least two: the
/// kernel takes no overlay of one layer without an upper one) at `target`,
/// nosuid and nodev: an image volume.
pub(crate) fn mount_overlay_read_only(lower: &[std::path::PathBuf], target: &Path) -> io::Result<()> {
    overlay(lower, None, target, libc::MOUNT_ATTR_RDONLY | libc::MOUNT_ATTR_NOSUID | libc::MOUNT_ATTR_NODEV)
}

fn overlay(
    lower: &[std::path::PathBuf],
    upper_work: Option<(&Path, &Path)>,
    target: &Path,
    attrs: u64,
) -> io::Result<()> {
    match overlay_new_api(lower, upper_work, target, attrs) {
        Ok(()) => Ok(()),
        // Before Linux 6.8 (lowerdir+) or 6.5 (overlayfs on the new API).
        Err(e) if matches!(e.raw_os_error(), Some(libc::ENOSYS) | Some(libc::EINVAL)) => {
            let lowers: Vec<String> = lower.iter().rev().map(|p| p.display().to_string()).collect();
            let mut data = format!("lowerdir={}", lowers.join(":"));
            if let Some((upper, work)) = upper_work {
                data.push_str(&format!(",upperdir={},workdir={}", upper.display(), work.display()));
            }
            if data.len() >= 4096 {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "{} layers do not fit in one overlay mount on this kernel (needs Linux ≥ 6.8 for lowerdir+)",
                        lower.len()
                    ),
                ));
            }
            let mut flags: libc::c_ulong = 0;
            for (attr, flag) in [
                (libc::MOUNT_ATTR_RDONLY, libc::MS_RDONLY),
                (libc::MOUNT_ATTR_NOSUID, libc::MS_NOSUID),
                (libc::MOUNT_ATTR_NODEV, libc::MS_NODEV),
            ] {
                if attrs & attr != 0 {
                    flags |= flag as libc::c_ulong;
                }
            }
            mount(Some("overlay"), &target.to_string_lossy(), Some("overlay"), flags, Some(&data))
        }
        Err(e) => Err(e),
    }
}

fn overlay_new_api(
    lower: &[std::path::PathBuf],
    upper_work: Option<(&Path, &Path)>,
    target: &Path,
    attrs: u64,
) -> io::Result<()> {
    let overlay = c"overlay";
    // SAFETY: fsopen takes a C string and flags; returns a new fd or -1.
    let fs = check(unsafe { libc::syscall(libc::SYS_fsopen, overlay.as_ptr(), libc::FSOPEN_CLOEXEC) })?;
    // SAFETY: fs was just returned by fsopen.
    let fs = unsafe { OwnedFd::from_raw_fd(fs as RawFd) };
    let set = |key: &str, value: &Path| -> io::Result<()> {
        let key = super::c_string(key)?;
        let value = cpath(value)?;
        // SAFETY: fs is an fs context fd; key and value are valid C strings.
        check(unsafe {
            libc::syscall(
                libc::SYS_fsconfig,
                fs.as_raw_fd(),
                libc::FSCONFIG_SET_STRING,
                key.as_ptr(),
                value.as_ptr(),
                0,
            )
        })
        .map(drop)
    };
    // lowerdir+ appends below the layers given so far: topmost first.
    for layer in lower.iter().rev() {
        set("lowerdir+", layer)?;
    }
    if let Some((upper, work)) = upper_work {
        set("upperdir", upper)?;
        set("workdir", work)?;
    }
    // SAFETY: a create command takes no key or value.
    check(unsafe {
        libc::syscall(
            libc::SYS_fsconfig,
            fs.as_raw_fd(),
            libc::FSCONFIG_CMD_CREATE,
            std::ptr::null::<libc::c_char>(),
            std::ptr::null::<libc::c_void>(),
            0,
        )
    })?;
    // SAFETY: fs is a created fs context; returns a new mount fd or -1.
    let mnt = check(unsafe { libc::syscall(libc::SYS_fsmount, fs.as_raw_fd(), libc::FSMOUNT_CLOEXEC, attrs) })?;
    // SAFETY: mnt was just returned by fsmount.
    let mnt = unsafe { OwnedFd::from_raw_fd(mnt as RawFd) };
    let empty = c"";
    let target = cpath(target)?;
    // SAFETY: mnt is a detached mount fd; empty and target are valid C strings.
    check(unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            mnt.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_FDCWD,
            target.as_ptr(),
            // The target may be a /proc/self/fd link, followed only so.
            libc::MOVE_MOUNT_F_EMPTY_PATH | libc::MOVE_MOUNT_T_SYMLINKS,
        )
    })?;
    Ok(())
}

/// A detached copy of the mount tree at `source` (open_tree with
/// OPEN_TREE_CLONE): taken while the mount namespace still shares `source`'s
/// peer group, the copy stays in it, so mounts made below it later reach
/// the node: Bidirectional propagation.
pub(crate) fn clone_tree(source: &Path, recursive: bool) -> io::Result<OwnedFd> {
    let source = cpath(source)?;
    let mut flags = libc::OPEN_TREE_CLONE | libc::OPEN_TREE_CLOEXEC as libc::c_uint;
    if recursive {
        flags |= libc::AT_RECURSIVE as libc::c_uint;
    }
    // SAFETY: source is a valid C string; returns a new mount fd or -1.
    let fd = check(unsafe { libc::syscall(libc::SYS_open_tree, libc::AT_FDCWD, source.as_ptr(), flags) })?;
    // SAFETY: fd was just returned by open_tree and is ours alone.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Attaches the detached mount `tree` at `target` (followed when it is a
/// link, such as a `/proc/self/fd/N` naming the directory).
pub(crate) fn attach_tree(tree: &OwnedFd, target: &str) -> io::Result<()> {
    let empty = c"";
    let target = cpath(Path::new(target))?;
    // SAFETY: tree is a detached mount fd; empty and target are valid C strings.
    check(unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_FDCWD,
            target.as_ptr(),
            libc::MOVE_MOUNT_F_EMPTY_PATH | libc::MOVE_MOUNT_T_SYMLINKS,
        )
    })
    .map(drop)
}

/// pivot_root into the current directory and detach the old root.
/// Moves the calling process into a mount namespace of its own whose root is
/// an empty, read-only tmpfs: nothing of the node's filesystem stays
/// reachable through it (e.g. through `/proc/PID/root`, `/proc/PID/cwd`).
/// `mount_point` is any existing directory (covered only in the new namespace).
pub(crate) fn enter_empty_root(mount_point: &str) -> io::Result<()> {
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS).map_err(io::Error::from)?;
    mount(None, "/", None, (libc::MS_REC | libc::MS_PRIVATE) as libc::c_ulong, None)?;
    let flags = (libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC) as libc::c_ulong;
    mount(Some("tmpfs"), mount_point, Some("tmpfs"), flags, Some("size=4k,nr_inodes=1,mode=0555"))?;
    std::env::set_current_dir(mount_point)?;
    pivot_to_cwd()?;
    mount(None, "/", None, flags | (libc::MS_REMOUNT | libc::MS_RDONLY) as libc::c_ulong, None)
}

/// Binds the mount tree of the current directory anew on top of itself and
/// moves into the new mount. In the mount namespace of a user namespace, a
/// mount copied from the node's namespace is locked and may not become the
/// root (pivot_root refuses it); a new bind of it may. The directory is not
/// looked up by path: the pod's root may not search the directories above it.
pub(crate) fn rebind_cwd() -> io::Result<()> {
    let tree = clone_tree(Path::new("."), true)?;
    attach_tree(&tree, ".")?;
    nix::unistd::fchdir(&tree).map_err(io::Error::from)
}

pub(crate) fn pivot_to_cwd() -> io::Result<()> {
    nix::unistd::pivot_root(".", ".").map_err(io::Error::from)?;
    nix::mount::umount2(".", nix::mount::MntFlags::MNT_DETACH).map_err(io::Error::from)?;
    std::env::set_current_dir("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch directory holding `root` (the container's root) and `outside`.
    fn scratch() -> (tempfile::TempDir, OwnedFd) {
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path();
        std::fs::create_dir_all(dir.join("root/etc")).unwrap();
        std::fs::create_dir_all(dir.join("outside")).unwrap();
        let root = std::fs::File::open(dir.join("root")).unwrap();
        (scratch, OwnedFd::from(root))
    }

    #[test]
    fn create_in_root_makes_missing_directories_and_files_inside_the_root() {
        let (scratch, root) = scratch();
        let dir = scratch.path();
        let root_fd = root.as_raw_fd();
        create_in_root(root_fd, Path::new("/dev/pts"), true).unwrap();
        create_in_root(root_fd, Path::new("/a/b/c"), true).unwrap();
        create_in_root(root_fd, Path::new("/etc/hostname"), false).unwrap();
        create_in_root(root_fd, Path::new("/x/y/file"), false).unwrap();
        assert!(dir.join("root/dev/pts").is_dir());
        assert!(dir.join("root/a/b/c").is_dir());
        assert!(dir.join("root/x/y").is_dir());
        for file in ["root/etc/hostname", "root/x/y/file"] {
            let meta = std::fs::symlink_metadata(dir.join(file)).unwrap();
            assert!(meta.is_file() && meta.len() == 0, "{file}: {meta:?}");
        }
        // What exists is only looked up.
        create_in_root(root_fd, Path::new("/etc/hostname"), false).unwrap();
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn create_in_root_never_follows_a_symlink_out_of_the_root() {
        let (scratch, root) = scratch();
        let dir = scratch.path();
        let root_fd = root.as_raw_fd();
        // Absolute and relative links that would leave the root on the host.
        let outside = dir.join("outside");
        std::os::unix::fs::symlink(&outside, dir.join("root/abs")).unwrap();
        std::os::unix::fs::symlink("../outside", dir.join("root/rel")).unwrap();
        std::os::unix::fs::symlink("../../outside/hosts", dir.join("root/etc/hosts")).unwrap();
        for (path, is_dir) in [("/abs/made", true), ("/rel/made", true), ("/abs/file", false), ("/etc/hosts", false)] {
            // Whatever the answer, nothing may appear outside the root.
            let _ = create_in_root(root_fd, Path::new(path), is_dir);
        }
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0, "something was made outside the root");
        // A link inside the root is followed within it.
        std::fs::create_dir(dir.join("root/real")).unwrap();
        std::os::unix::fs::symlink("/real", dir.join("root/link")).unwrap();
        create_in_root(root_fd, Path::new("/link/new"), true).unwrap();
        assert!(dir.join("root/real/new").is_dir());
        std::fs::remove_dir_all(dir).unwrap();
    }
}
