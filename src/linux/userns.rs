//! User namespaces: the ID mappings of a pod's user namespace, writing them
//! for a child that made one, joining one (then becoming its root), and
//! idmapped mounts — a mount's files shown through a user namespace's
//! mapping, so an image layer or a volume owned by the node's root appears
//! owned by the pod's root without a single chown.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::Path;

use serde::{Deserialize, Serialize};

/// One range of IDs: `length` IDs from `container_id` inside the namespace
/// are `host_id`… outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct IdMap {
    pub(crate) container_id: u32,
    pub(crate) host_id: u32,
    pub(crate) length: u32,
}

impl IdMap {
    /// The host ID of container ID `id`, when mapped.
    pub(crate) fn to_host(self, id: u32) -> Option<u32> {
        let offset = id.checked_sub(self.container_id).filter(|o| *o < self.length)?;
        self.host_id.checked_add(offset)
    }

    /// The line `/proc/PID/uid_map` takes.
    fn line(&self) -> String {
        format!("{} {} {}\n", self.container_id, self.host_id, self.length)
    }
}

/// The mappings of a pod's user namespace: one range of user IDs and one of
/// group IDs (what kubelet sends).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct IdMaps {
    pub(crate) uids: IdMap,
    pub(crate) gids: IdMap,
}

impl IdMaps {
    /// The node's IDs of the namespace's root (uid, gid).
    pub(crate) fn root(&self) -> (u32, u32) {
        // Validated: container ID 0 is mapped in both.
        (self.uids.to_host(0).unwrap_or(self.uids.host_id), self.gids.to_host(0).unwrap_or(self.gids.host_id))
    }
}

/// Whether the IDs `start`.. `start + length` are all mapped by `own_map`
/// (the `/proc/self/uid_map` or `gid_map` of the caller): an ID a user
/// namespace's map names must exist in the namespace of its writer.
pub(crate) fn covered(own_map: &str, start: u32, length: u32) -> bool {
    let mut ranges: Vec<(u64, u64)> = own_map
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace().map(|f| f.parse::<u64>().ok());
            let (inside, _, len) = (fields.next()??, fields.next()??, fields.next()??);
            Some((inside, inside + len))
        })
        .collect();
    ranges.sort_unstable();
    let (mut next, end) = (u64::from(start), u64::from(start) + u64::from(length));
    for (from, to) in ranges {
        if from <= next && next < to {
            next = to;
        }
    }
    next >= end
}

/// Writes the maps of the user namespace `pid` made (by its parent, which
/// is privileged in the namespace above: `setgroups` stays allowed).
pub(crate) fn write_maps(pid: i32, maps: &IdMaps) -> io::Result<()> {
    std::fs::write(format!("/proc/{pid}/uid_map"), maps.uids.line())?;
    std::fs::write(format!("/proc/{pid}/gid_map"), maps.gids.line())
}

/// Joins the user namespace `ns` (a single-threaded process privileged over
/// it) and becomes its root, with no supplementary groups; every capability
/// in it.
pub(crate) fn join_as_root(ns: BorrowedFd<'_>) -> io::Result<()> {
    nix::sched::setns(ns, nix::sched::CloneFlags::CLONE_NEWUSER).map_err(io::Error::from)?;
    become_root()
}

/// In a user namespace just made or joined: uid and gid 0 there (mapped),
/// no supplementary groups.
pub(crate) fn become_root() -> io::Result<()> {
    let (uid, gid) = (nix::unistd::Uid::from_raw(0), nix::unistd::Gid::from_raw(0));
    nix::unistd::setgroups(&[]).map_err(io::Error::from)?;
    nix::unistd::setresgid(gid, gid, gid).map_err(io::Error::from)?;
    nix::unistd::setresuid(uid, uid, uid).map_err(io::Error::from)
}

/// A detached copy of the mount at `source` (of its whole tree when
/// `recursive`) whose files show through the mapping of the user namespace
/// `ns`: on-disk ID n appears as the host ID container ID n maps to.
pub(crate) fn idmapped_tree(source: &Path, ns: BorrowedFd<'_>, recursive: bool) -> io::Result<OwnedFd> {
    let tree = super::rootfs::clone_tree(source, recursive)?;
    set_idmap(tree.as_raw_fd(), ns, recursive)?;
    Ok(tree)
}

fn set_idmap(tree: RawFd, ns: BorrowedFd<'_>, recursive: bool) -> io::Result<()> {
    let attr = libc::mount_attr {
        attr_set: libc::MOUNT_ATTR_IDMAP,
        attr_clr: 0,
        propagation: 0,
        userns_fd: ns.as_raw_fd() as u64,
    };
    let empty = CString::default();
    let flags = libc::AT_EMPTY_PATH | if recursive { libc::AT_RECURSIVE } else { 0 };
    // SAFETY: tree is a detached mount fd; empty is a valid C string; attr
    // is a valid mount_attr of the size passed.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree,
            empty.as_ptr(),
            flags as libc::c_uint,
            &attr as *const libc::mount_attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Mounts the idmapped copy of `source` over `source` itself, in the
/// caller's (private) mount namespace: what is reached through that path
/// there is then idmapped (an overlay's lower layer, say).
pub(crate) fn idmap_in_place(source: &Path, ns: BorrowedFd<'_>) -> io::Result<()> {
    let tree = idmapped_tree(source, ns, false)?;
    super::rootfs::attach_tree(&tree, &source.to_string_lossy())
}

/// Whether user-namespaced containers can work here, as they are built: a
/// child in a new user namespace is made, a directory of `scratch`'s file
/// system (where the image layers are) is idmapped through it, and an
/// overlay is mounted over that idmapped lower layer, in a private mount
/// namespace; a file owned by the node's root must show as the mapped ID.
/// Runs in a process of its own (`nidus probe-userns`), which may fork and
/// change its mount namespace, never in the daemon. `scratch` is left as it was.
pub fn probe(scratch: &Path) -> Result<(), String> {
    let dir = scratch.join(format!(".probe-userns-{}", std::process::id()));
    let made = (|| -> std::io::Result<()> {
        for sub in ["lower", "upper", "work", "merged"] {
            std::fs::create_dir_all(dir.join(sub))?;
        }
        std::fs::write(dir.join("lower").join("file"), b"")
    })();
    let outcome = made.map_err(|e| format!("cannot make {}: {e}", dir.display())).and_then(|()| probe_in(&dir));
    let _ = nix::mount::umount2(&dir.join("merged"), nix::mount::MntFlags::MNT_DETACH);
    let _ = nix::mount::umount2(&dir.join("lower"), nix::mount::MntFlags::MNT_DETACH);
    let _ = std::fs::remove_dir_all(&dir);
    outcome
}

fn probe_in(dir: &Path) -> Result<(), String> {
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS)
        .map_err(|e| format!("cannot make a mount namespace: {e}"))?;
    super::rootfs::mount(None, "/", None, (libc::MS_REC | libc::MS_PRIVATE) as libc::c_ulong, None)
        .map_err(|e| format!("cannot make / private: {e}"))?;
    let (ready_r, ready_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|e| format!("pipe: {e}"))?;
    let child = match super::clone3::fork_with_flags(libc::CLONE_NEWUSER as u64) {
        Err(e) => return Err(format!("cannot make a user namespace: {e}")),
        Ok(super::process::Forked::Child) => {
            drop(ready_w);
            // Wait until the parent is done with us (its end closes).
            let _ = nix::unistd::read(&ready_r, &mut [0u8; 1]);
            std::process::exit(0)
        }
        Ok(super::process::Forked::Parent { child }) => child,
    };
    drop(ready_r);
    let outcome = (|| {
        let one = IdMap { container_id: 0, host_id: 1, length: 1 };
        write_maps(child, &IdMaps { uids: one, gids: one })
            .map_err(|e| format!("cannot write the ID maps of a user namespace: {e}"))?;
        let ns = std::fs::File::open(format!("/proc/{child}/ns/user")).map_err(|e| format!("user namespace: {e}"))?;
        let lower = dir.join("lower");
        idmap_in_place(&lower, std::os::fd::AsFd::as_fd(&ns))
            .map_err(|e| format!("idmapped mounts of {} do not work: {e}", dir.display()))?;
        super::rootfs::mount_overlay(&[lower], &dir.join("upper"), &dir.join("work"), &dir.join("merged"))
            .map_err(|e| format!("an overlay over an idmapped layer does not mount: {e}"))?;
        use std::os::unix::fs::MetadataExt;
        let owner = std::fs::metadata(dir.join("merged").join("file")).map_err(|e| format!("overlay: {e}"))?.uid();
        if owner != 1 {
            return Err(format!("an overlay over an idmapped layer shows owner {owner} where 1 was mapped"));
        }
        Ok(())
    })();
    drop(ready_w);
    let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(child), None);
    outcome
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_map_within_their_range_only() {
        let map = IdMap { container_id: 0, host_id: 65536, length: 65536 };
        assert_eq!(map.to_host(0), Some(65536));
        assert_eq!(map.to_host(65535), Some(131071));
        assert_eq!(map.to_host(65536), None);
        let shifted = IdMap { container_id: 1, host_id: 1000, length: 10 };
        assert_eq!(shifted.to_host(0), None);
        assert_eq!(shifted.line(), "1 1000 10\n");
        let maps = IdMaps { uids: map, gids: IdMap { container_id: 0, host_id: 200000, length: 65536 } };
        assert_eq!(maps.root(), (65536, 200000));
    }

    #[test]
    fn a_range_must_lie_within_the_callers_own_map() {
        let initial = "         0          0 4294967295\n";
        assert!(covered(initial, 65536, 65536));
        let nested = "0 100000 65536\n65536 300000 10\n";
        assert!(covered(nested, 1000, 100));
        assert!(covered(nested, 65530, 16), "across two adjacent lines");
        assert!(!covered(nested, 65530, 17));
        assert!(!covered(nested, 70000, 1));
        assert!(!covered("", 1, 1));
    }
}
