//! Arbitrary bytes as an OCI seccomp profile (a Localhost profile file):
//! parsed, resolved for a few bounding sets, compiled through the program
//! cache, written as the program file and read back.
//!
//! Checked besides "no panic": the resolved profile reads back from its
//! canonical JSON and as the OCI spec's type; every compiled filter passes
//! the kernel's checks (known opcodes, loads inside seccomp_data, jumps
//! forward and inside, a RET at the end); and for every syscall the profile
//! names, run on an interpreter with argument values at and around each
//! condition's, the filter answers what the profile says: the most
//! restrictive action of the rules that match (ties in profile order),
//! else the default; another architecture or an x32 call is killed.

#![no_main]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use libfuzzer_sys::fuzz_target;

use nidus::capabilities as caps;
use nidus::seccomp::compile::syscall_number;
use nidus::seccomp::profile::{Action, Arg, Op};
use nidus::seccomp::{program, Instruction, Profile, ProgramCache};

const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
const AUDIT_ARCH_I386: u32 = 0x4000_0003;
const X32_SYSCALL_BIT: u32 = 0x4000_0000;
const RET_KILL_PROCESS: u32 = 0x8000_0000;
/// Syscalls and argument vectors tried per profile, to keep a run short.
const MAX_SYSCALLS: usize = 48;
const MAX_ARG_VECTORS: usize = 24;

fuzz_target!(|data: &[u8]| {
    let Ok(profile) = Profile::parse(data) else { return };
    let sets: [BTreeSet<String>; 3] = [
        BTreeSet::new(),
        caps::container_set(false, &[], &[]).expect("the default set"),
        caps::container_set(true, &[], &[]).expect("the full set"),
    ];
    let cache = ProgramCache::new();
    for bounding in &sets {
        let resolved = profile.resolve(bounding);
        assert!(resolved.syscalls.iter().all(|r| r.if_capabilities.is_empty() && r.unless_capabilities.is_empty()));
        let reread = Profile::parse(&resolved.canonical_json()).expect("a resolved profile reads back");
        assert_eq!(reread, resolved, "a resolved profile changed through its canonical JSON");
        if let Err(e) = resolved.to_oci() {
            panic!("a profile nidus accepted cannot be put in the OCI spec: {e}");
        }
        let Ok(first) = cache.get_or_compile(&resolved) else { continue };
        let again = cache.get_or_compile(&resolved).expect("compiled once, found again");
        assert!(again.cached && Arc::ptr_eq(&again.program, &first.program));
        let compiled = first.program;
        for filter in &compiled.filters {
            if let Err(why) = kernel_check(&filter.instructions) {
                panic!("the kernel would refuse the filter: {why}");
            }
        }
        let file = program::encode(&compiled.filters);
        assert_eq!(program::decode(&file).expect("the program file reads back"), compiled.filters);
        semantics(&resolved, &compiled.filters);
    }
});

// ---- the kernel's side: what it accepts, and how it runs a filter ----

/// bpf_check_classic + seccomp_check_filter for the instructions a seccomp
/// filter may hold.
fn kernel_check(program: &[Instruction]) -> Result<(), String> {
    let len = program.len();
    if len == 0 || len > 4096 {
        return Err(format!("{len} instructions"));
    }
    for (pc, i) in program.iter().enumerate() {
        let bad = |why: &str| Err(format!("instruction {pc} {i:?}: {why}"));
        let jump_ok = |offset: usize| pc + 1 + offset < len;
        match i.code {
            // ld [k] (seccomp_data, 32-bit aligned)
            0x20 if i.k >= 64 || i.k % 4 != 0 => return bad("load outside seccomp_data"),
            // ld/ldx len, ld/ldx #k, tax, txa, ret k, ret a
            0x20 | 0x80 | 0x81 | 0x00 | 0x01 | 0x07 | 0x87 | 0x06 | 0x16 => {}
            // ld/ldx M[k], st/stx M[k]
            0x60 | 0x61 | 0x02 | 0x03 if i.k >= 16 => return bad("scratch memory index"),
            0x60 | 0x61 | 0x02 | 0x03 => {}
            // div/mod by constant zero, shifts by 32 or more
            0x34 | 0x94 if i.k == 0 => return bad("division by zero"),
            0x64 | 0x74 if i.k >= 32 => return bad("shift"),
            // ALU with k or x, neg
            0x04 | 0x0c | 0x14 | 0x1c | 0x24 | 0x2c | 0x34 | 0x3c | 0x44 | 0x4c | 0x54 | 0x5c | 0x64 | 0x6c | 0x74
            | 0x7c | 0x84 | 0x94 | 0x9c | 0xa4 | 0xac => {}
            0x05 if !jump_ok(i.k as usize) => return bad("jump past the end"),
            0x05 => {}
            0x15 | 0x1d | 0x25 | 0x2d | 0x35 | 0x3d | 0x45 | 0x4d
                if !jump_ok(i.jt as usize) || !jump_ok(i.jf as usize) =>
            {
                return bad("jump past the end")
            }
            0x15 | 0x1d | 0x25 | 0x2d | 0x35 | 0x3d | 0x45 | 0x4d => {}
            _ => return bad("opcode"),
        }
    }
    match program[len - 1].code {
        0x06 | 0x16 => Ok(()),
        _ => Err("the last instruction is not a RET".into()),
    }
}

struct Call {
    nr: u32,
    arch: u32,
    args: [u64; 6],
}

fn load(call: &Call, offset: u32) -> u32 {
    match offset {
        0 => call.nr,
        4 => call.arch,
        // instruction_pointer: never looked at by nidus's filters.
        8 | 12 => 0,
        o => {
            let arg = call.args[((o - 16) / 8) as usize];
            if (o - 16) % 8 == 0 {
                arg as u32
            } else {
                (arg >> 32) as u32
            }
        }
    }
}

/// Runs a checked filter.
fn run(program: &[Instruction], call: &Call) -> u32 {
    let (mut pc, mut a, mut x, mut mem) = (0usize, 0u32, 0u32, [0u32; 16]);
    loop {
        let i = program[pc];
        pc += 1;
        let operand = if i.code & 0x08 != 0 { x } else { i.k };
        match i.code {
            0x20 => a = load(call, i.k),
            0x80 => a = 64,
            0x81 => x = 64,
            0x00 => a = i.k,
            0x01 => x = i.k,
            0x07 => x = a,
            0x87 => a = x,
            0x60 => a = mem[i.k as usize],
            0x61 => x = mem[i.k as usize],
            0x02 => mem[i.k as usize] = a,
            0x03 => mem[i.k as usize] = x,
            0x06 => return i.k,
            0x16 => return a,
            0x05 => pc += i.k as usize,
            code if code & 0x07 == 0x05 => {
                let taken = match code & 0xf0 {
                    0x10 => a == operand,
                    0x20 => a > operand,
                    0x30 => a >= operand,
                    _ => a & operand != 0,
                };
                pc += usize::from(if taken { i.jt } else { i.jf });
            }
            code => {
                a = match code & 0xf0 {
                    0x00 => a.wrapping_add(operand),
                    0x10 => a.wrapping_sub(operand),
                    0x20 => a.wrapping_mul(operand),
                    0x30 => a.checked_div(operand).unwrap_or(0),
                    0x40 => a | operand,
                    0x50 => a & operand,
                    0x60 => a.checked_shl(operand).unwrap_or(0),
                    0x70 => a.checked_shr(operand).unwrap_or(0),
                    0x80 => a.wrapping_neg(),
                    0x90 => a.checked_rem(operand).unwrap_or(0),
                    _ => a ^ operand,
                }
            }
        }
    }
}

/// The kernel's verdict of stacked filters: newest first, a strictly more
/// restrictive action (signed compare of the action bits) replaces.
fn verdict(filters: &[nidus::seccomp::Filter], call: &Call) -> u32 {
    let mut ret = 0x7fff_0000u32;
    for f in filters.iter().rev() {
        let cur = run(&f.instructions, call);
        if ((cur & 0xffff_0000) as i32) < ((ret & 0xffff_0000) as i32) {
            ret = cur;
        }
    }
    ret
}

// ---- the profile's side: what it says a call gets ----

/// The return value (action and data) an OCI action stands for.
fn action_value(action: Action, errno_ret: Option<u32>) -> u32 {
    let data = errno_ret.unwrap_or(1) & 0xffff;
    match action {
        Action::Kill | Action::KillThread => 0,
        Action::KillProcess => RET_KILL_PROCESS,
        Action::Trap => 0x0003_0000,
        Action::Errno => 0x0005_0000 | data,
        Action::Trace => 0x7ff0_0000 | data,
        Action::Log => 0x7ffc_0000,
        Action::Allow => 0x7fff_0000,
        Action::Notify => unreachable!("refused when parsed"),
    }
}

/// Lower is more restrictive.
fn precedence(value: u32) -> u8 {
    match value & 0xffff_0000 {
        RET_KILL_PROCESS => 0,
        0 => 1,
        0x0003_0000 => 2,
        0x0005_0000 => 3,
        0x7ff0_0000 => 4,
        0x7ffc_0000 => 5,
        _ => 6,
    }
}

fn holds(arg: &Arg, args: &[u64; 6]) -> bool {
    let a = args[arg.index as usize];
    match arg.op {
        Op::Ne => a != arg.value,
        Op::Lt => a < arg.value,
        Op::Le => a <= arg.value,
        Op::Eq => a == arg.value,
        Op::Ge => a >= arg.value,
        Op::Gt => a > arg.value,
        Op::MaskedEq => a & arg.value == arg.value_two.unwrap_or(0),
    }
}

/// A rule's conditions: ANDed, unless one argument has several (then each
/// condition is an alternative, as runc does).
fn rule_matches(conditions: &[Arg], args: &[u64; 6]) -> bool {
    if conditions.is_empty() {
        return true;
    }
    let indexes: BTreeSet<u32> = conditions.iter().map(|a| a.index).collect();
    if indexes.len() < conditions.len() {
        conditions.iter().any(|c| holds(c, args))
    } else {
        conditions.iter().all(|c| holds(c, args))
    }
}

/// What the profile gives a native call.
fn expected(profile: &Profile, nr: u32, args: &[u64; 6]) -> u32 {
    // One candidate per distinct return value, in order of first appearance.
    let mut candidates: Vec<(u32, bool)> = Vec::new();
    for rule in &profile.syscalls {
        if !rule.names.iter().any(|n| syscall_number(n) == Some(nr)) {
            continue;
        }
        let value = action_value(rule.action, rule.errno_ret);
        let matched = rule_matches(&rule.args, args);
        match candidates.iter_mut().find(|(v, _)| *v == value) {
            Some((_, m)) => *m |= matched,
            None => candidates.push((value, matched)),
        }
    }
    candidates
        .iter()
        .filter(|(_, matched)| *matched)
        .min_by_key(|(v, _)| precedence(*v))
        .map(|(v, _)| *v)
        .unwrap_or_else(|| action_value(profile.default_action, profile.default_errno_ret))
}

/// Argument vectors at and around every condition on `nr`.
fn arg_vectors(profile: &Profile, nr: u32) -> Vec<[u64; 6]> {
    let mut out = vec![[0u64; 6], [u64::MAX; 6]];
    for rule in profile.syscalls.iter().filter(|r| r.names.iter().any(|n| syscall_number(n) == Some(nr))) {
        let mut together = [0u64; 6];
        for arg in &rule.args {
            let i = arg.index as usize;
            let two = arg.value_two.unwrap_or(0);
            for v in [arg.value, arg.value.wrapping_sub(1), arg.value.wrapping_add(1), two, two | !arg.value] {
                let mut args = [0u64; 6];
                args[i] = v;
                out.push(args);
            }
            together[i] = if arg.op == Op::MaskedEq { two } else { arg.value };
        }
        out.push(together);
    }
    out.truncate(MAX_ARG_VECTORS);
    out
}

fn semantics(profile: &Profile, filters: &[nidus::seccomp::Filter]) {
    let mut nrs: BTreeMap<u32, ()> = BTreeMap::new();
    for rule in &profile.syscalls {
        for name in &rule.names {
            if let Some(nr) = syscall_number(name) {
                nrs.insert(nr, ());
            }
        }
    }
    // A number no rule names, and the neighbours of those named.
    let mut tried: BTreeSet<u32> = [0, 1, 999].into();
    for nr in nrs.keys().take(MAX_SYSCALLS) {
        tried.insert(*nr);
        tried.insert(nr.saturating_sub(1));
        tried.insert(nr + 1);
    }
    for nr in tried {
        for args in arg_vectors(profile, nr) {
            let got = verdict(filters, &Call { nr, arch: AUDIT_ARCH_X86_64, args });
            let want = expected(profile, nr, &args);
            assert_eq!(
                got, want,
                "syscall {nr} with arguments {args:?}: the filter answers {got:#x}, the profile says {want:#x}"
            );
        }
        let foreign = verdict(filters, &Call { nr, arch: AUDIT_ARCH_I386, args: [0; 6] });
        assert_eq!(foreign, RET_KILL_PROCESS, "a call of another architecture is not killed");
        let x32 = verdict(filters, &Call { nr: nr | X32_SYSCALL_BIT, arch: AUDIT_ARCH_X86_64, args: [0; 6] });
        assert_eq!(x32, RET_KILL_PROCESS, "an x32 call is not killed");
    }
}
