//! The cgroup v2 device program for an allow-list: BPF_PROG_TYPE_CGROUP_DEVICE
//! instructions that answer 1 (allow) when an access matches a rule, else 0.
//! Loading and attaching it is `linux::device_filter`'s.

use super::devices::{DeviceKind, DeviceRule};
use crate::linux::device_filter::BpfInsn;

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
