//! Namespaces: which ones a process gets new, unsharing them, and the UTS name.

use std::io;

use nix::sched::CloneFlags;

/// The namespaces a pod sandbox gets of its own (false: shares the node's).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct NewNamespaces {
    pub(crate) net: bool,
    pub(crate) ipc: bool,
    pub(crate) uts: bool,
    pub(crate) pid: bool,
}

impl NewNamespaces {
    /// The `CLONE_NEW*` bits of these namespaces, for clone3.
    pub(crate) fn clone_flags_bits(self) -> u64 {
        self.clone_flags().bits() as u64
    }

    fn clone_flags(self) -> CloneFlags {
        let mut flags = CloneFlags::empty();
        for (wanted, flag) in [
            (self.net, CloneFlags::CLONE_NEWNET),
            (self.ipc, CloneFlags::CLONE_NEWIPC),
            (self.uts, CloneFlags::CLONE_NEWUTS),
            (self.pid, CloneFlags::CLONE_NEWPID),
        ] {
            if wanted {
                flags |= flag;
            }
        }
        flags
    }
}

/// Moves the calling process into new namespaces. A new PID namespace applies
/// to the children forked afterwards (the first one becomes its PID 1).
pub(crate) fn unshare(new: NewNamespaces) -> io::Result<()> {
    nix::sched::unshare(new.clone_flags()).map_err(io::Error::from)
}

/// Sets the hostname of the caller's UTS namespace.
pub(crate) fn set_hostname(name: &str) -> io::Result<()> {
    nix::unistd::sethostname(name).map_err(io::Error::from)
}

/// The node's hostname.
pub(crate) fn hostname() -> io::Result<String> {
    Ok(nix::unistd::gethostname().map_err(io::Error::from)?.to_string_lossy().into_owned())
}
