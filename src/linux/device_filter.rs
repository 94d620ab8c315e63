//! cgroup v2 device access: a BPF_PROG_TYPE_CGROUP_DEVICE program built from
//! an allow-list, loaded with bpf(2) and attached to a container cgroup (it
//! goes away with the cgroup). The program answers 1 (allow) when the access
//! matches a rule, else 0.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

use crate::cgroups::devices::{DeviceKind, DeviceRule};

/// One eBPF instruction (`struct bpf_insn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct BpfInsn {
    pub code: u8,
    /// dst register in the low nibble, src in the high one.
    pub regs: u8,
    pub off: i16,
    pub imm: i32,
}

// eBPF opcodes (linux/bpf.h, linux/bpf_common.h).
const LDX_MEM_W: u8 = 0x61;
const ALU64_MOV_X: u8 = 0xbf;
const ALU64_MOV_K: u8 = 0xb7;
const ALU64_AND_K: u8 = 0x57;
const ALU64_RSH_K: u8 = 0x77;
const JMP_JNE_K: u8 = 0x55;
const JMP_EXIT: u8 = 0x95;

// struct bpf_cgroup_dev_ctx and its encodings.
const CTX_ACCESS_TYPE: i16 = 0;
const CTX_MAJOR: i16 = 4;
const CTX_MINOR: i16 = 8;
const DEV_BLOCK: i32 = 1;
const DEV_CHAR: i32 = 2;
const ACC_MKNOD: i32 = 1;
const ACC_READ: i32 = 2;
const ACC_WRITE: i32 = 4;

fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> BpfInsn {
    BpfInsn { code, regs: dst | (src << 4), off, imm }
}

fn access_mask(access: &str) -> i32 {
    access.chars().fold(0, |m, c| {
        m | match c {
            'r' => ACC_READ,
            'w' => ACC_WRITE,
            'm' => ACC_MKNOD,
            _ => 0,
        }
    })
}

/// The program for an allow-list.
pub fn program(rules: &[DeviceRule]) -> Vec<BpfInsn> {
    // r2 = device type, r3 = requested access, r4 = major, r5 = minor.
    let mut out = vec![
        insn(LDX_MEM_W, 2, 1, CTX_ACCESS_TYPE, 0),
        insn(ALU64_MOV_X, 3, 2, 0, 0),
        insn(ALU64_RSH_K, 3, 0, 0, 16),
        insn(ALU64_AND_K, 2, 0, 0, 0xffff),
        insn(LDX_MEM_W, 4, 1, CTX_MAJOR, 0),
        insn(LDX_MEM_W, 5, 1, CTX_MINOR, 0),
    ];
    for rule in rules {
        let mut checks: Vec<BpfInsn> = Vec::new();
        match rule.kind {
            DeviceKind::All => {}
            DeviceKind::Char => checks.push(insn(JMP_JNE_K, 2, 0, 0, DEV_CHAR)),
            DeviceKind::Block => checks.push(insn(JMP_JNE_K, 2, 0, 0, DEV_BLOCK)),
        }
        let denied = !access_mask(&rule.access) & (ACC_READ | ACC_WRITE | ACC_MKNOD);
        if denied != 0 {
            // Every requested bit must be allowed: (r3 & denied) == 0.
            checks.push(insn(ALU64_MOV_X, 0, 3, 0, 0));
            checks.push(insn(ALU64_AND_K, 0, 0, 0, denied));
            checks.push(insn(JMP_JNE_K, 0, 0, 0, 0));
        }
        if let Some(major) = rule.major {
            checks.push(insn(JMP_JNE_K, 4, 0, 0, major as i32));
        }
        if let Some(minor) = rule.minor {
            checks.push(insn(JMP_JNE_K, 5, 0, 0, minor as i32));
        }
        checks.push(insn(ALU64_MOV_K, 0, 0, 0, 1));
        checks.push(insn(JMP_EXIT, 0, 0, 0, 0));
        // Every failed check jumps past this rule's block.
        let len = checks.len();
        for (i, c) in checks.iter_mut().enumerate() {
            if c.code == JMP_JNE_K {
                c.off = (len - i - 1) as i16;
            }
        }
        out.extend(checks);
    }
    out.push(insn(ALU64_MOV_K, 0, 0, 0, 0));
    out.push(insn(JMP_EXIT, 0, 0, 0, 0));
    out
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

/// Loads the program for `rules` and attaches it to the cgroup directory `dir`.
pub fn attach(dir: &Path, rules: &[DeviceRule]) -> io::Result<()> {
    let insns = program(rules);
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
    use crate::cgroups::devices::default_rules;

    /// Runs the program on one access, as the kernel would.
    fn allows(program: &[BpfInsn], kind: i32, access: i32, major: u32, minor: u32) -> bool {
        let ctx = [(kind | (access << 16)) as u32, major, minor];
        let mut r = [0u64; 11];
        let mut pc = 0usize;
        loop {
            let i = program[pc];
            pc += 1;
            let (dst, src) = ((i.regs & 0xf) as usize, (i.regs >> 4) as usize);
            match i.code {
                LDX_MEM_W => r[dst] = u64::from(ctx[(i.off / 4) as usize]),
                ALU64_MOV_X => r[dst] = r[src],
                ALU64_MOV_K => r[dst] = i.imm as i64 as u64,
                ALU64_AND_K => r[dst] &= i.imm as i64 as u64,
                ALU64_RSH_K => r[dst] >>= i.imm,
                JMP_JNE_K => {
                    if r[dst] != i.imm as i64 as u64 {
                        pc += i.off as usize;
                    }
                }
                JMP_EXIT => return r[0] == 1,
                c => panic!("opcode {c:#x}"),
            }
        }
    }

    #[test]
    fn the_attributes_have_no_padding() {
        assert_eq!(std::mem::size_of::<ProgLoadAttr>(), 72);
        assert_eq!(std::mem::size_of::<ProgAttachAttr>(), 24);
    }

    #[test]
    fn the_program_allows_exactly_the_list() {
        let mut rules = default_rules();
        rules.push(DeviceRule { kind: DeviceKind::Block, major: Some(7), minor: Some(0), access: "r".into() });
        let p = program(&rules);
        let rw = ACC_READ | ACC_WRITE;
        assert!(allows(&p, DEV_CHAR, rw, 1, 3), "null");
        assert!(allows(&p, DEV_CHAR, rw, 136, 4), "a pty");
        assert!(!allows(&p, DEV_CHAR, ACC_READ, 1, 11), "kmsg");
        assert!(!allows(&p, DEV_BLOCK, ACC_READ, 254, 0), "a disk");
        assert!(allows(&p, DEV_BLOCK, ACC_MKNOD, 254, 0), "any node may be made");
        assert!(allows(&p, DEV_BLOCK, ACC_READ, 7, 0), "granted read");
        assert!(!allows(&p, DEV_BLOCK, ACC_READ | ACC_WRITE, 7, 0), "not granted write");
        assert!(!allows(&p, DEV_BLOCK, ACC_READ, 1, 3), "null is a char device");
        assert!(!allows(&program(&[]), DEV_CHAR, ACC_READ, 1, 3));
    }
}
