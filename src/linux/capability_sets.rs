//! A process's capability sets as bit masks, applied with one capset(2) call
//! and the ambient raises — computed beforehand, so applying them makes no
//! allocation (it may run under a freshly installed seccomp filter).

use std::io;

use oci_spec::runtime::{Capabilities, Capability, LinuxCapabilities};

/// Effective, permitted, inheritable and ambient sets (bit n = capability n).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct CapabilitySets {
    pub(crate) effective: u64,
    pub(crate) permitted: u64,
    pub(crate) inheritable: u64,
    pub(crate) ambient: u64,
}

fn mask(set: &Option<Capabilities>) -> u64 {
    set.as_ref()
        .map(|s| {
            s.iter()
                .filter_map(|c: &Capability| crate::capabilities::number(&format!("CAP_{c}")))
                .fold(0u64, |m, n| m | (1 << n))
        })
        .unwrap_or(0)
}

// linux/capability.h
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

impl CapabilitySets {
    pub(crate) fn of(caps: &LinuxCapabilities) -> Self {
        Self {
            effective: mask(caps.effective()),
            permitted: mask(caps.permitted()),
            inheritable: mask(caps.inheritable()),
            ambient: mask(caps.ambient()),
        }
    }

    /// Sets exactly these sets on the calling thread (the bounding set is
    /// left as it is).
    pub(crate) fn apply(&self) -> io::Result<()> {
        let header = CapHeader { version: CAPABILITY_VERSION_3, pid: 0 };
        let word = |m: u64, high: bool| if high { (m >> 32) as u32 } else { m as u32 };
        let data = [false, true].map(|high| CapData {
            effective: word(self.effective, high),
            permitted: word(self.permitted, high),
            inheritable: word(self.inheritable, high),
        });
        // SAFETY: header and data are valid for the call; capset reads two
        // CapData entries for version 3, which `data` holds.
        let rc = unsafe { libc::syscall(libc::SYS_capset, &header as *const CapHeader, data.as_ptr()) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        for cap in 0..64u64 {
            if self.ambient & (1 << cap) != 0 {
                // SAFETY: prctl with integer arguments only.
                let rc = unsafe {
                    libc::prctl(libc::PR_CAP_AMBIENT, libc::PR_CAP_AMBIENT_RAISE, cap as libc::c_ulong, 0, 0)
                };
                if rc != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oci_spec::runtime::LinuxCapabilitiesBuilder;
    use std::collections::HashSet;

    #[test]
    fn masks_follow_the_kernel_numbers() {
        let caps = LinuxCapabilitiesBuilder::default()
            .effective(HashSet::from([Capability::Chown, Capability::NetRaw]))
            .permitted(HashSet::from([Capability::Chown, Capability::NetRaw, Capability::CheckpointRestore]))
            .inheritable(HashSet::new())
            .build()
            .unwrap();
        let sets = CapabilitySets::of(&caps);
        assert_eq!(sets.effective, 1 | (1 << 13));
        assert_eq!(sets.permitted, 1 | (1 << 13) | (1 << 40));
        assert_eq!(sets.inheritable, 0);
    }
}
