//! The container init's mounts: the spec's mounts inside the new root (binds
//! with their flags and propagation, image volumes, /sys/fs/cgroup), the
//! device nodes, and the masked and read-only paths.

use std::fs;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::{Component, Path, PathBuf};

use oci_spec::runtime::{Mount, Spec};

use super::PodUserNamespace;
use crate::linux::rootfs::{self, create_in_root, fd_path, open_in_root};
use crate::monitor::plan::{MonitorPlan, IMAGE_VOLUME_TYPE};

/// Mount options → (flags, data, propagation, read-only, recursive read-only).
struct Options {
    flags: libc::c_ulong,
    data: Vec<String>,
    propagation: libc::c_ulong,
    readonly: bool,
    recursive_readonly: bool,
    bind: bool,
}

fn parse_options(options: &[String]) -> Options {
    let mut o =
        Options { flags: 0, data: Vec::new(), propagation: 0, readonly: false, recursive_readonly: false, bind: false };
    for opt in options {
        let flag = match opt.as_str() {
            "ro" => {
                o.readonly = true;
                libc::MS_RDONLY
            }
            "rw" => 0,
            "nosuid" => libc::MS_NOSUID,
            "nodev" => libc::MS_NODEV,
            "noexec" => libc::MS_NOEXEC,
            "strictatime" => libc::MS_STRICTATIME,
            "relatime" => libc::MS_RELATIME,
            "noatime" => libc::MS_NOATIME,
            "nodiratime" => libc::MS_NODIRATIME,
            // The defaults of a new bind: nothing to set.
            "exec" | "suid" | "dev" | "atime" | "diratime" | "norelatime" | "nostrictatime" => 0,
            "bind" => {
                o.bind = true;
                libc::MS_BIND
            }
            "rbind" => {
                o.bind = true;
                libc::MS_BIND | libc::MS_REC
            }
            "rro" => {
                o.recursive_readonly = true;
                0
            }
            "private" | "rprivate" | "slave" | "rslave" | "shared" | "rshared" => {
                let rec = if opt.starts_with('r') { libc::MS_REC } else { 0 };
                o.propagation = rec
                    | match opt.trim_start_matches('r') {
                        "private" => libc::MS_PRIVATE,
                        "slave" => libc::MS_SLAVE,
                        _ => libc::MS_SHARED,
                    };
                0
            }
            other => {
                o.data.push(other.to_string());
                0
            }
        };
        o.flags |= flag as libc::c_ulong;
    }
    o
}

/// For a bind mount with shared propagation (CRI Bidirectional), a detached
/// clone of its source's mount tree; `None` for every other mount.
pub(super) fn shared_tree(m: &Mount) -> Result<Option<OwnedFd>, String> {
    let opts = parse_options(m.options().as_deref().unwrap_or_default());
    let shared = opts.propagation & libc::MS_SHARED as libc::c_ulong != 0;
    let is_bind = opts.bind || m.typ().as_deref() == Some("bind");
    if !(shared && is_bind) {
        return Ok(None);
    }
    let source = m.source().clone().unwrap_or_default();
    if !source.exists() {
        fs::create_dir_all(&source).map_err(|e| format!("cannot create {}: {e}", source.display()))?;
    }
    let recursive = opts.flags & libc::MS_REC as libc::c_ulong != 0;
    rootfs::clone_tree(&source, recursive)
        .map(Some)
        .map_err(|e| format!("mount {}: cannot clone {}: {e}", m.destination().display(), source.display()))
}

/// Mounts `m` inside the root; `tree`: its source's tree cloned ahead (see
/// [`shared_tree`]), attached instead of a fresh bind.
pub(super) fn mount_one(
    root: RawFd,
    m: &Mount,
    tree: Option<&OwnedFd>,
    plan: &MonitorPlan,
    userns: Option<&PodUserNamespace>,
) -> io::Result<()> {
    let dest = m.destination();
    let typ = m.typ().clone().unwrap_or_default();
    if typ == IMAGE_VOLUME_TYPE {
        return mount_image_volume(root, m);
    }
    let mut opts = parse_options(m.options().as_deref().unwrap_or_default());
    if let Some(userns) = userns {
        owned_by_pod_root(&typ, &mut opts.data, &userns.maps);
    }
    if typ == "cgroup" {
        return mount_cgroups(root, dest, &opts, plan);
    }
    let source = m.source().clone().unwrap_or_default();
    let is_bind = opts.bind || typ == "bind";
    let target_is_dir = if is_bind {
        if !source.exists() {
            // Like containerd: a missing bind source directory is created.
            fs::create_dir_all(&source)?;
        }
        source.is_dir()
    } else {
        true
    };
    let target = create_in_root(root, dest, target_is_dir)?;
    let fstype = if is_bind { None } else { Some(typ.as_str()) };
    let first_flags = if opts.bind { opts.flags & !(libc::MS_RDONLY as libc::c_ulong) } else { opts.flags };
    let data = opts.data.join(",");
    let idmapped = match (userns, m.uid_mappings().is_some() && is_bind) {
        (Some(userns), true) => {
            let recursive = opts.flags & libc::MS_REC as libc::c_ulong != 0;
            Some(crate::linux::userns::idmapped_tree(&source, userns.fd(), recursive)?)
        }
        _ => None,
    };
    match tree.or(idmapped.as_ref()) {
        Some(tree) => rootfs::attach_tree(tree, &fd_path(&target))?,
        None => rootfs::mount(Some(&source.to_string_lossy()), &fd_path(&target), fstype, first_flags, Some(&data))?,
    }
    // From here on, name the new mount itself, not the directory beneath it.
    let mounted = open_in_root(root, dest, libc::O_PATH, 0)?;
    let mounted_path = fd_path(&mounted);
    // A bind takes its flags (read-only, nosuid, noexec, atime…) only when remounted.
    let bind_flags = (libc::MS_NOSUID
        | libc::MS_NODEV
        | libc::MS_NOEXEC
        | libc::MS_NOATIME
        | libc::MS_RELATIME
        | libc::MS_STRICTATIME
        | libc::MS_NODIRATIME) as libc::c_ulong;
    if is_bind && (opts.readonly || opts.flags & bind_flags != 0) {
        let keep = locked_flags(&mounted_path)?;
        let read_only = if opts.readonly { libc::MS_RDONLY } else { 0 };
        let flags = libc::MS_BIND | libc::MS_REMOUNT | read_only;
        rootfs::mount(
            None,
            &mounted_path,
            None,
            flags as libc::c_ulong | keep | (opts.flags & !(libc::MS_REC | libc::MS_BIND) as libc::c_ulong),
            None,
        )?;
    }
    if opts.propagation != 0 {
        rootfs::mount(None, &mounted_path, None, opts.propagation, None)?;
    }
    if opts.recursive_readonly {
        rootfs::make_recursively_read_only(&mounted_path)?;
    }
    Ok(())
}

/// The layers of an image volume's mount, lowest first.
pub(super) fn image_volume_layers(m: &Mount) -> impl Iterator<Item = &Path> {
    m.options().as_deref().unwrap_or_default().iter().filter_map(|o| o.strip_prefix("lowerdir+=")).map(Path::new)
}

/// The value of an `x-nidus-NAME=` option of `m`.
fn nidus_option<'a>(m: &'a Mount, name: &str) -> Option<&'a str> {
    let prefix = format!("x-nidus-{name}=");
    m.options().as_deref().unwrap_or_default().iter().find_map(|o| o.strip_prefix(prefix.as_str()))
}

/// An image volume: its layers as a read-only overlay (one layer: bound
/// read-only), at the destination, or, with a sub path, first at its
/// scratch directory (outside the root), whose sub path (looked up without
/// following a symbolic link out of it) is then bound at the destination.
fn mount_image_volume(root: RawFd, m: &Mount) -> io::Result<()> {
    let layers: Vec<PathBuf> = image_volume_layers(m).map(Path::to_path_buf).collect();
    // `at` names the directory mounted on; `reopen` names the new mount
    // itself (a remount must name the mount, not the directory beneath it).
    let mount_layers = |at: &str, reopen: &dyn Fn() -> io::Result<OwnedFd>| -> io::Result<()> {
        match layers.as_slice() {
            [] => Err(io::Error::new(io::ErrorKind::InvalidInput, "an image volume without layers")),
            // overlayfs wants two lower layers when it has no upper one.
            [only] => {
                rootfs::mount(Some(&only.to_string_lossy()), at, None, libc::MS_BIND as libc::c_ulong, None)?;
                let mounted = reopen()?;
                let mounted_path = fd_path(&mounted);
                let flags = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV;
                rootfs::mount(None, &mounted_path, None, flags as libc::c_ulong | locked_flags(&mounted_path)?, None)
            }
            many => rootfs::mount_overlay_read_only(many, Path::new(at)),
        }
    };
    let dest = m.destination();
    let reopen_dest = || open_in_root(root, dest, libc::O_PATH, 0);
    let Some(sub_path) = nidus_option(m, "sub-path") else {
        let target = create_in_root(root, dest, true)?;
        return mount_layers(&fd_path(&target), &reopen_dest);
    };
    let scratch = nidus_option(m, "scratch")
        .map(PathBuf::from)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "an image volume's sub path without its scratch"))?;
    let at_scratch = |e: io::Error| io::Error::new(e.kind(), format!("{}: {e}", scratch.display()));
    fs::create_dir_all(&scratch).map_err(at_scratch)?;
    let reopen_scratch = || -> io::Result<OwnedFd> { Ok(fs::File::open(&scratch)?.into()) };
    mount_layers(&scratch.to_string_lossy(), &reopen_scratch).map_err(at_scratch)?;
    let whole = fs::File::open(&scratch).map_err(at_scratch)?;
    let inner = open_in_root(whole.as_raw_fd(), Path::new(sub_path), libc::O_PATH | libc::O_NOFOLLOW, 0)
        .map_err(|e| io::Error::new(e.kind(), format!("the image's {sub_path}: {e}")))?;
    let is_dir = nix::sys::stat::fstat(&inner).map_err(io::Error::from)?.st_mode & libc::S_IFMT == libc::S_IFDIR;
    let target = create_in_root(root, dest, is_dir)?;
    let target_path = fd_path(&target);
    rootfs::mount(Some(&fd_path(&inner)), &target_path, None, libc::MS_BIND as libc::c_ulong, None)
        .map_err(|e| io::Error::new(e.kind(), format!("binding the image's {sub_path}: {e}")))?;
    // The fd is held while its /proc path names the mount.
    let mounted = reopen_dest()?;
    let mounted_path = fd_path(&mounted);
    let flags = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV;
    rootfs::mount(None, &mounted_path, None, flags as libc::c_ulong | locked_flags(&mounted_path)?, None)
}

/// In a user namespace, file systems made for the container are its root's:
/// a tmpfs's root directory (/dev's among them) is owned by the pod's root,
/// and a devpts gives its terminals the group the container's `tty` maps to.
fn owned_by_pod_root(typ: &str, data: &mut Vec<String>, maps: &crate::linux::userns::IdMaps) {
    let (uid, gid) = maps.root();
    match typ {
        "tmpfs" => {
            if !data.iter().any(|d| d.starts_with("uid=")) {
                data.push(format!("uid={uid}"));
            }
            if !data.iter().any(|d| d.starts_with("gid=")) {
                data.push(format!("gid={gid}"));
            }
        }
        "devpts" => {
            for option in data.iter_mut() {
                if let Some(group) = option.strip_prefix("gid=").and_then(|g| g.parse::<u32>().ok()) {
                    if let Some(host) = maps.gids.to_host(group) {
                        *option = format!("gid={host}");
                    }
                }
            }
        }
        _ => {}
    }
}

/// Flags a bind remount must keep (nosuid/nodev/noexec locked on the source mount).
fn locked_flags(path: &str) -> io::Result<libc::c_ulong> {
    let st = nix::sys::statvfs::statvfs(path).map_err(io::Error::from)?;
    let f = st.flags();
    use nix::sys::statvfs::FsFlags;
    let mut out = 0;
    for (flag, ms) in [
        (FsFlags::ST_NOSUID, libc::MS_NOSUID),
        (FsFlags::ST_NODEV, libc::MS_NODEV),
        (FsFlags::ST_NOEXEC, libc::MS_NOEXEC),
    ] {
        if f.contains(flag) {
            out |= ms as libc::c_ulong;
        }
    }
    Ok(out)
}

/// /sys/fs/cgroup inside the container: the container's own cgroups (the
/// init is in a cgroup namespace rooted at them), read-only unless privileged.
fn mount_cgroups(root: RawFd, dest: &Path, opts: &Options, plan: &MonitorPlan) -> io::Result<()> {
    let base_flags = (libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC | libc::MS_RELATIME) as libc::c_ulong;
    let ro = if opts.readonly { libc::MS_RDONLY as libc::c_ulong } else { 0 };
    if let [only] = plan.cgroup_mounts.as_slice() {
        if only.dir.is_empty() {
            let target = create_in_root(root, dest, true)?;
            return rootfs::mount(
                Some("cgroup"),
                &fd_path(&target),
                Some(&only.fstype),
                base_flags | ro,
                Some(&only.data),
            );
        }
    }
    let target = create_in_root(root, dest, true)?;
    rootfs::mount(Some("tmpfs"), &fd_path(&target), Some("tmpfs"), base_flags, Some("mode=755"))?;
    // The tmpfs is ours and empty: its directories are made and named
    // relative to it, with no lookups through the image.
    let tmpfs = open_in_root(root, dest, libc::O_DIRECTORY | libc::O_RDONLY, 0)?;
    for cg in &plan.cgroup_mounts {
        let name = Path::new(&cg.dir);
        let mut parts = name.components();
        if !matches!((parts.next(), parts.next()), (Some(Component::Normal(_)), None)) {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("bad cgroup mount name {:?}", cg.dir)));
        }
        nix::sys::stat::mkdirat(&tmpfs, name, nix::sys::stat::Mode::from_bits_truncate(0o755))
            .map_err(io::Error::from)?;
        let sub = format!("{}/{}", fd_path(&tmpfs), cg.dir);
        rootfs::mount(Some("cgroup"), &sub, Some(&cg.fstype), base_flags | ro, Some(&cg.data))?;
    }
    if opts.readonly {
        let mounted = open_in_root(root, dest, libc::O_PATH, 0)?;
        let flags = libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY;
        rootfs::mount(None, &fd_path(&mounted), None, flags as libc::c_ulong | base_flags, None)?;
    }
    Ok(())
}

/// The standard device nodes, the spec's devices, and the /dev symlinks.
pub(super) fn make_devices(root: RawFd, spec: &Spec, maps: Option<&crate::linux::userns::IdMaps>) -> io::Result<()> {
    use nix::sys::stat::{makedev, mknodat, Mode, SFlag};
    let dev = open_in_root(root, Path::new("/dev"), libc::O_DIRECTORY | libc::O_RDONLY, 0)?;
    // Path, type, numbers, mode, owner in the container (the spec's; root's by default).
    type Node = (PathBuf, SFlag, u64, u64, u32, (u32, u32));
    let mut nodes: Vec<Node> =
        [("null", 1, 3), ("zero", 1, 5), ("full", 1, 7), ("random", 1, 8), ("urandom", 1, 9), ("tty", 5, 0)]
            .into_iter()
            .map(|(n, ma, mi)| (PathBuf::from(format!("/dev/{n}")), SFlag::S_IFCHR, ma, mi, 0o666, (0, 0)))
            .collect();
    for d in spec.linux().as_ref().and_then(|l| l.devices().clone()).unwrap_or_default() {
        let kind = match d.typ() {
            oci_spec::runtime::LinuxDeviceType::B => SFlag::S_IFBLK,
            _ => SFlag::S_IFCHR,
        };
        let owner = (d.uid().unwrap_or(0), d.gid().unwrap_or(0));
        nodes.push((d.path().clone(), kind, d.major() as u64, d.minor() as u64, d.file_mode().unwrap_or(0o666), owner));
    }
    // mknod's mode is masked by the umask: none while the nodes are made, so
    // each gets its mode exactly.
    let umask = nix::sys::stat::umask(Mode::empty());
    let made = nodes.into_iter().try_for_each(|(path, kind, major, minor, mode, (uid, gid))| -> io::Result<()> {
        // The node's IDs of the owner: in a user namespace, the IDs its
        // mappings give (its root's for the default nodes, as the node's are
        // the node's root's).
        let (host_uid, host_gid) = match maps {
            None => (uid, gid),
            Some(maps) => maps.uids.to_host(uid).zip(maps.gids.to_host(gid)).ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{}: owner {uid}:{gid} is not mapped in the pod's user namespace", path.display()),
                )
            })?,
        };
        let parent = path.parent().unwrap_or(Path::new("/dev"));
        // Most nodes go straight into /dev, opened above; another parent's
        // handle (O_PATH) serves as the directory of the *at calls.
        let other = if parent == Path::new("/dev") { None } else { Some(create_in_root(root, parent, true)?) };
        let dir = other.as_ref().unwrap_or(&dev);
        let name =
            path.file_name().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "device without a name"))?;
        let _ = nix::unistd::unlinkat(dir, name, nix::unistd::UnlinkatFlags::NoRemoveDir);
        mknodat(dir, name, kind, Mode::from_bits_truncate(mode & 0o7777), makedev(major, minor))
            .map_err(|e| io::Error::new(io::Error::from(e).kind(), format!("mknod {}: {e}", path.display())))?;
        // mknod made it the node's root's.
        if (host_uid, host_gid) != (0, 0) {
            nix::unistd::fchownat(
                dir,
                name,
                Some(nix::unistd::Uid::from_raw(host_uid)),
                Some(nix::unistd::Gid::from_raw(host_gid)),
                nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
            )
            .map_err(|e| io::Error::new(io::Error::from(e).kind(), format!("chown {}: {e}", path.display())))?;
        }
        Ok(())
    });
    nix::sys::stat::umask(umask);
    made?;
    for (name, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
        ("ptmx", "pts/ptmx"),
    ] {
        let _ = nix::unistd::unlinkat(&dev, name, nix::unistd::UnlinkatFlags::NoRemoveDir);
        nix::unistd::symlinkat(target, &dev, name).map_err(io::Error::from)?;
    }
    Ok(())
}

/// Hides a path: /dev/null over a file, an empty read-only tmpfs over a directory.
pub(super) fn mask(path: &str) -> io::Result<()> {
    match fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
        Ok(meta) if meta.is_dir() => {
            rootfs::mount(Some("tmpfs"), path, Some("tmpfs"), libc::MS_RDONLY as libc::c_ulong, Some("size=0"))
        }
        Ok(_) => rootfs::mount(Some("/dev/null"), path, None, libc::MS_BIND as libc::c_ulong, None),
    }
}

pub(super) fn make_read_only(path: &str) -> io::Result<()> {
    if !Path::new(path).exists() {
        return Ok(());
    }
    rootfs::mount(Some(path), path, None, (libc::MS_BIND | libc::MS_REC) as libc::c_ulong, None)?;
    let keep = locked_flags(path)?;
    rootfs::mount(None, path, None, (libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY) as libc::c_ulong | keep, None)
}
