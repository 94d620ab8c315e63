//! cgroup v2 device access: a BPF_PROG_TYPE_CGROUP_DEVICE program (built
//! from an allow-list by `cgroups::device_program`) loaded with bpf(2) and
//! attached to a container cgroup (it goes away with the cgroup).

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

/// One eBPF instruction (`struct bpf_insn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct BpfInsn {
    pub(crate) code: u8,
    /// dst register in the low nibble, src in the high one.
    pub(crate) regs: u8,
    pub(crate) off: i16,
    pub(crate) imm: i32,
}

// bpf(2) commands, program and attach types, flags.
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_ATTACH: libc::c_long = 8;
const BPF_PROG_TYPE_CGROUP_DEVICE: u32 = 15;
const BPF_CGROUP_DEVICE: u32 = 6;
const BPF_F_ALLOW_MULTI: u32 = 2;

/// The head of `union bpf_attr` for BPF_PROG_LOAD (the rest stays zero);
/// 72 bytes, no padding.
#[repr(C, align(8))]
#[derive(Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

/// The head of `union bpf_attr` for BPF_PROG_ATTACH. Every byte is a field
/// (no padding): the kernel refuses non-zero bytes it does not expect.
#[repr(C, align(8))]
#[derive(Default)]
struct ProgAttachAttr {
    target_fd: u32,
    attach_bpf_fd: u32,
    attach_type: u32,
    attach_flags: u32,
    replace_bpf_fd: u32,
    relative_fd: u32,
}

fn bpf<T>(cmd: libc::c_long, attr: &mut T) -> io::Result<libc::c_long> {
    // SAFETY: attr is a properly laid-out, zero-padded bpf_attr prefix that
    // lives for the call; the size passed is its own.
    let rc = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr as *mut T, std::mem::size_of::<T>()) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(rc)
}

/// Loads the program `insns` and attaches it to the cgroup directory `dir`.
pub fn attach(dir: &Path, insns: &[BpfInsn]) -> io::Result<()> {
    let license = b"Apache-2.0\0";
    let mut name = [0u8; 16];
    name[..13].copy_from_slice(b"nidus_devices");
    let mut load = ProgLoadAttr {
        prog_type: BPF_PROG_TYPE_CGROUP_DEVICE,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        prog_name: name,
        ..Default::default()
    };
    let prog = match bpf(BPF_PROG_LOAD, &mut load) {
        Ok(fd) => fd,
        Err(e) => {
            // Again with the verifier's log, to say why.
            let mut log = vec![0u8; 64 * 1024];
            load.log_level = 1;
            load.log_size = log.len() as u32;
            load.log_buf = log.as_mut_ptr() as u64;
            let _ = bpf(BPF_PROG_LOAD, &mut load);
            let text = String::from_utf8_lossy(&log);
            let text = text.trim_end_matches('\0').trim();
            return Err(io::Error::new(e.kind(), format!("loading the device program: {e}; verifier: {text}")));
        }
    };
    // SAFETY: BPF_PROG_LOAD returned a new fd that nothing else owns.
    let prog = unsafe { OwnedFd::from_raw_fd(prog as i32) };
    let cgroup = std::fs::File::open(dir)?;
    let mut attach = ProgAttachAttr {
        target_fd: cgroup.as_raw_fd() as u32,
        attach_bpf_fd: prog.as_raw_fd() as u32,
        attach_type: BPF_CGROUP_DEVICE,
        attach_flags: BPF_F_ALLOW_MULTI,
        ..Default::default()
    };
    bpf(BPF_PROG_ATTACH, &mut attach)
        .map_err(|e| io::Error::new(e.kind(), format!("attaching the device program to {}: {e}", dir.display())))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_attributes_have_no_padding() {
        assert_eq!(std::mem::size_of::<ProgLoadAttr>(), 72);
        assert_eq!(std::mem::size_of::<ProgAttachAttr>(), 24);
    }
}
