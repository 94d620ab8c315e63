//! OCI profile → one BPF filter. An OCI profile maps every rule to its own
//! action; seccompiler's filters have one match action each and find a
//! syscall by a linear scan, which makes the kernel's install step (it
//! emulates the filter for every syscall number to precompute its
//! always-allowed cache) cost about a millisecond for RuntimeDefault. So the
//! filter is assembled here, with seccompiler generating each rule's argument
//! conditions and the action codes:
//!
//! - a prologue: another architecture's call is killed; on x86_64 so is a call
//!   numbered in the x32 range (bit 30), which carries the x86_64 audit arch;
//! - a binary search over intervals of syscall numbers with the same outcome
//!   (an action, or the block of one syscall whose rules look at arguments);
//! - per such syscall a block trying its rules most restrictive action first
//!   (KILL_PROCESS > KILL_THREAD > TRAP > ERRNO > TRACE > LOG > ALLOW, ties in
//!   profile order) and answering the default action when none matches.
//!
//! So a call no rule matches gets the default action, and a call rules match
//! gets the most restrictive of their actions — what stacking one filter per
//! action would give through the kernel's precedence, in one filter. Within
//! one rule the argument conditions are ANDed, except that several conditions
//! on the same argument are ORed (as runc does). Only the native
//! architecture's syscalls are translated; other ABIs are killed.

use std::collections::{BTreeMap, BTreeSet};
use std::str::FromStr;

use seccompiler::{SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompRule};
use sha2::{Digest, Sha256};

use super::profile::{Action, Arg, Op, Profile, SUPPORTED_FLAGS};
use super::program::{CompiledProfile, Filter, Instruction, MAX_INSTRUCTIONS};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CompileError {
    #[error("seccomp filters are not supported on {0}")]
    Architecture(String),
    #[error("cannot compile the profile: {0}")]
    Backend(String),
}

/// An action with its data (errno or trace message).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Verdict {
    Allow,
    Errno(u32),
    KillThread,
    KillProcess,
    Trap,
    Trace(u32),
    Log,
}

impl Verdict {
    /// The kernel's precedence: lower is more restrictive.
    fn precedence(self) -> u8 {
        match self {
            Verdict::KillProcess => 0,
            Verdict::KillThread => 1,
            Verdict::Trap => 2,
            Verdict::Errno(_) => 3,
            Verdict::Trace(_) => 4,
            Verdict::Log => 5,
            Verdict::Allow => 6,
        }
    }

    fn code(self) -> u32 {
        u32::from(match self {
            Verdict::Allow => SeccompAction::Allow,
            Verdict::Errno(e) => SeccompAction::Errno(e),
            Verdict::KillThread => SeccompAction::KillThread,
            Verdict::KillProcess => SeccompAction::KillProcess,
            Verdict::Trap => SeccompAction::Trap,
            Verdict::Trace(m) => SeccompAction::Trace(m),
            Verdict::Log => SeccompAction::Log,
        })
    }
}

/// errno of SCMP_ACT_ERRNO (and message of SCMP_ACT_TRACE) when none is given.
const DEFAULT_ERRNO: u32 = libc::EPERM as u32;

fn verdict(action: Action, errno_ret: Option<u32>) -> Verdict {
    match action {
        Action::Allow => Verdict::Allow,
        Action::Errno => Verdict::Errno(errno_ret.unwrap_or(DEFAULT_ERRNO)),
        Action::Kill | Action::KillThread => Verdict::KillThread,
        Action::KillProcess => Verdict::KillProcess,
        Action::Trap => Verdict::Trap,
        Action::Trace => Verdict::Trace(errno_ret.unwrap_or(DEFAULT_ERRNO)),
        Action::Log => Verdict::Log,
        // Refused when the profile is parsed.
        Action::Notify => Verdict::KillProcess,
    }
}

/// Which calls of one syscall a verdict's rules match.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Calls {
    /// Whatever the arguments.
    Any,
    /// When one of these condition lists (each ANDed) holds.
    When(Vec<Vec<Arg>>),
}

impl Calls {
    fn merge(&mut self, other: Calls) {
        match (&mut *self, other) {
            (Calls::Any, _) => {}
            (_, Calls::Any) => *self = Calls::Any,
            (Calls::When(mine), Calls::When(theirs)) => mine.extend(theirs),
        }
    }
}

/// The argument conditions of one OCI rule as alternatives.
fn alternatives(args: &[Arg]) -> Calls {
    if args.is_empty() {
        return Calls::Any;
    }
    let indexes: BTreeSet<u32> = args.iter().map(|a| a.index).collect();
    if indexes.len() < args.len() {
        Calls::When(args.iter().map(|a| vec![a.clone()]).collect())
    } else {
        Calls::When(vec![args.to_vec()])
    }
}

/// The native number of a syscall name; None when this architecture lacks it.
pub fn syscall_number(name: &str) -> Option<u32> {
    syscalls::Sysno::from_str(name).ok().map(|s| s.id() as u32)
}

/// What the filter does for one syscall number.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    Return(Verdict),
    /// Rules that look at arguments, most restrictive first.
    Block(Vec<(Verdict, Calls)>),
}

/// Compiles a resolved profile.
pub(crate) fn compile(profile: &Profile) -> Result<CompiledProfile, CompileError> {
    let audit_arch = native_audit_arch().ok_or_else(|| CompileError::Architecture(std::env::consts::ARCH.into()))?;
    let default = verdict(profile.default_action, profile.default_errno_ret);
    let flags = profile
        .flags
        .iter()
        .filter_map(|f| SUPPORTED_FLAGS.iter().find(|(name, _)| name == f).map(|(_, bit)| *bit))
        .fold(0, |all, bit| all | bit);

    // Per syscall number, its (verdict, calls) in profile order, one per verdict.
    let mut rules: BTreeMap<u32, Vec<(Verdict, Calls)>> = BTreeMap::new();
    let mut skipped = BTreeSet::new();
    for rule in &profile.syscalls {
        let v = verdict(rule.action, rule.errno_ret);
        for name in &rule.names {
            let Some(nr) = syscall_number(name) else {
                skipped.insert(name.clone());
                continue;
            };
            let candidates = rules.entry(nr).or_default();
            match candidates.iter_mut().find(|(existing, _)| *existing == v) {
                Some((_, calls)) => calls.merge(alternatives(&rule.args)),
                None => candidates.push((v, alternatives(&rule.args))),
            }
        }
    }
    let outcomes: BTreeMap<u32, Outcome> = rules
        .into_iter()
        .map(|(nr, mut candidates)| {
            // Stable: ties keep profile order.
            candidates.sort_by_key(|(v, _)| v.precedence());
            let outcome = match candidates.first() {
                Some((v, Calls::Any)) => Outcome::Return(*v),
                _ => Outcome::Block(candidates),
            };
            (nr, outcome)
        })
        .collect();

    let mut program = prologue(audit_arch);
    program.extend(dispatch(&outcomes, default)?);
    if program.len() > MAX_INSTRUCTIONS {
        return Err(CompileError::Backend(format!(
            "the filter needs {} instructions, more than the kernel's {MAX_INSTRUCTIONS}",
            program.len()
        )));
    }
    let sha256 = hex::encode(Sha256::digest(profile.canonical_json()));
    Ok(CompiledProfile {
        filters: vec![Filter { flags, instructions: program }],
        sha256,
        skipped_names: skipped.into_iter().collect(),
    })
}

// Classic BPF opcodes and seccomp facts (linux/filter.h, linux/seccomp.h, linux/audit.h).
const LD_W_ABS: u16 = 0x20;
const JA: u16 = 0x05;
const JEQ_K: u16 = 0x15;
const JGE_K: u16 = 0x35;
const RET_K: u16 = 0x06;
const SECCOMP_DATA_NR: u32 = 0;
const SECCOMP_DATA_ARCH: u32 = 4;
const RET_KILL_PROCESS: u32 = 0x8000_0000;
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

fn insn(code: u16, jt: u8, jf: u8, k: u32) -> Instruction {
    Instruction { code, jt, jf, k }
}

fn native_audit_arch() -> Option<u32> {
    match std::env::consts::ARCH {
        "x86_64" => Some(0xc000_003e),
        "aarch64" => Some(0xc000_00b7),
        "riscv64" => Some(0xc000_00f3),
        _ => None,
    }
}

/// Kills other ABIs; leaves the syscall number in the accumulator.
fn prologue(audit_arch: u32) -> Vec<Instruction> {
    let mut out = vec![
        insn(LD_W_ABS, 0, 0, SECCOMP_DATA_ARCH),
        insn(JEQ_K, 1, 0, audit_arch),
        insn(RET_K, 0, 0, RET_KILL_PROCESS),
        insn(LD_W_ABS, 0, 0, SECCOMP_DATA_NR),
    ];
    if std::env::consts::ARCH == "x86_64" {
        out.push(insn(JGE_K, 0, 1, X32_SYSCALL_BIT));
        out.push(insn(RET_K, 0, 0, RET_KILL_PROCESS));
    }
    out
}

/// A run of syscall numbers from `start` with one outcome (`None`: the default).
struct Interval<'a> {
    start: u32,
    outcome: Option<&'a Outcome>,
}

/// Appends an interval unless it continues the last one.
fn push_interval<'a>(intervals: &mut Vec<Interval<'a>>, start: u32, outcome: Option<&'a Outcome>, default: Verdict) {
    let outcome = match outcome {
        Some(Outcome::Return(v)) if *v == default => None,
        other => other,
    };
    let continues = intervals.last().is_some_and(|last| match (last.outcome, outcome) {
        (None, None) => true,
        (Some(Outcome::Return(x)), Some(Outcome::Return(y))) => x == y,
        _ => false,
    });
    if !continues {
        intervals.push(Interval { start, outcome });
    }
}

/// The binary search over syscall-number intervals, then the blocks.
fn dispatch(outcomes: &BTreeMap<u32, Outcome>, default: Verdict) -> Result<Vec<Instruction>, CompileError> {
    let mut intervals: Vec<Interval> = Vec::new();
    let mut next = 0u32;
    for (nr, outcome) in outcomes {
        if *nr > next {
            push_interval(&mut intervals, next, None, default);
        }
        push_interval(&mut intervals, *nr, Some(outcome), default);
        next = nr + 1;
    }
    push_interval(&mut intervals, next, None, default);

    let mut program = Vec::new();
    let mut jumps_to_blocks: Vec<(usize, usize)> = Vec::new();
    search(&intervals, default, &mut program, &mut jumps_to_blocks);
    // The blocks, and the leaf jumps patched to reach them.
    let mut block_at = BTreeMap::new();
    for (i, interval) in intervals.iter().enumerate() {
        if let Some(Outcome::Block(candidates)) = interval.outcome {
            block_at.insert(i, program.len());
            program.extend(block(candidates, default)?);
        }
    }
    for (at, interval) in jumps_to_blocks {
        program[at].k = (block_at[&interval] - at - 1) as u32;
    }
    Ok(program)
}

/// Emits the search over `intervals` (the accumulator holds the syscall
/// number): two instructions per inner node, one per leaf.
fn search(intervals: &[Interval], default: Verdict, out: &mut Vec<Instruction>, jumps: &mut Vec<(usize, usize)>) {
    fn go(
        all: &[Interval],
        lo: usize,
        hi: usize,
        default: Verdict,
        out: &mut Vec<Instruction>,
        jumps: &mut Vec<(usize, usize)>,
    ) {
        if hi - lo == 1 {
            match all[lo].outcome {
                None => out.push(insn(RET_K, 0, 0, default.code())),
                Some(Outcome::Return(v)) => out.push(insn(RET_K, 0, 0, v.code())),
                Some(Outcome::Block(_)) => {
                    jumps.push((out.len(), lo));
                    out.push(insn(JA, 0, 0, 0));
                }
            }
            return;
        }
        let mid = (lo + hi) / 2;
        // nr >= pivot: the upper half (through the JA), else the lower half.
        out.push(insn(JGE_K, 0, 1, all[mid].start));
        let ja = out.len();
        out.push(insn(JA, 0, 0, 0));
        go(all, lo, mid, default, out, jumps);
        out[ja].k = (out.len() - ja - 1) as u32;
        go(all, mid, hi, default, out, jumps);
    }
    go(intervals, 0, intervals.len(), default, out, jumps);
}

/// One syscall's rules, most restrictive first; the default when none matches.
fn block(candidates: &[(Verdict, Calls)], default: Verdict) -> Result<Vec<Instruction>, CompileError> {
    let backend = |e: seccompiler::BackendError| CompileError::Backend(e.to_string());
    let mut out = Vec::new();
    for (v, calls) in candidates {
        match calls {
            Calls::Any => {
                out.push(insn(RET_K, 0, 0, v.code()));
                return Ok(out);
            }
            Calls::When(alternatives) => {
                for conditions in alternatives {
                    let rule =
                        SeccompRule::new(conditions.iter().map(condition).collect::<Result<_, _>>().map_err(backend)?)
                            .map_err(backend)?;
                    // A rule falls through to what follows its action when a
                    // condition fails. It opens with `JA 1` (enter) and a JA that
                    // seccompiler's own dispatch uses to skip it; entered only
                    // from the top here, that second jump is dead and is made a
                    // no-op so it never points past the program.
                    let mut rule: seccompiler::BpfProgram = rule.into();
                    match rule.get_mut(..2) {
                        Some([enter, skip]) if enter.code == JA && enter.k == 1 && skip.code == JA => skip.k = 0,
                        _ => return Err(CompileError::Backend("unexpected seccompiler rule layout".into())),
                    }
                    out.extend(rule.iter().map(|i| insn(i.code, i.jt, i.jf, i.k)));
                    out.push(insn(RET_K, 0, 0, v.code()));
                }
            }
        }
    }
    out.push(insn(RET_K, 0, 0, default.code()));
    Ok(out)
}

/// Arguments are compared as 64-bit values, as libseccomp does.
fn condition(arg: &Arg) -> Result<SeccompCondition, seccompiler::BackendError> {
    let (op, value) = match arg.op {
        Op::Ne => (SeccompCmpOp::Ne, arg.value),
        Op::Lt => (SeccompCmpOp::Lt, arg.value),
        Op::Le => (SeccompCmpOp::Le, arg.value),
        Op::Eq => (SeccompCmpOp::Eq, arg.value),
        Op::Ge => (SeccompCmpOp::Ge, arg.value),
        Op::Gt => (SeccompCmpOp::Gt, arg.value),
        Op::MaskedEq => (SeccompCmpOp::MaskedEq(arg.value), arg.value_two.unwrap_or(0)),
    };
    SeccompCondition::new(arg.index as u8, SeccompCmpArgLen::Qword, op, value)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seccomp::profile::ProfileError;

    /// A classic-BPF interpreter for the instructions our filters use, and the
    /// kernel's rule for combining the verdicts of stacked filters.
    mod kernel {
        use super::super::Instruction;

        pub(crate) const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
        pub(crate) const AUDIT_ARCH_I386: u32 = 0x4000_0003;

        pub(crate) struct Call {
            pub(crate) nr: u32,
            pub(crate) arch: u32,
            pub(crate) args: [u64; 6],
        }

        fn load(call: &Call, offset: u32) -> u32 {
            match offset {
                0 => call.nr,
                4 => call.arch,
                o if (16..64).contains(&o) && o % 4 == 0 => {
                    let arg = call.args[((o - 16) / 8) as usize];
                    if (o - 16) % 8 == 0 {
                        arg as u32
                    } else {
                        (arg >> 32) as u32
                    }
                }
                o => panic!("load at offset {o}"),
            }
        }

        /// What the kernel checks before it takes a filter (bpf_check_classic,
        /// seccomp_check_filter): known opcodes, aligned loads inside
        /// seccomp_data, jumps forward inside the program, a RET at the end.
        pub(crate) fn check(program: &[Instruction]) -> Result<(), String> {
            let len = program.len();
            if len == 0 || len > 4096 {
                return Err(format!("{len} instructions"));
            }
            for (pc, i) in program.iter().enumerate() {
                let bad = |why: &str| Err(format!("instruction {pc} {i:?}: {why}"));
                match i.code {
                    0x20 if i.k >= 64 || i.k % 4 != 0 => return bad("load outside seccomp_data"),
                    0x20 | 0x54 | 0x06 => {}
                    0x05 if i.k as usize >= len - pc - 1 => return bad("jump past the end"),
                    0x05 => {}
                    0x15 | 0x25 | 0x35 if pc + i.jt as usize + 1 >= len || pc + i.jf as usize + 1 >= len => {
                        return bad("jump past the end")
                    }
                    0x15 | 0x25 | 0x35 => {}
                    _ => return bad("opcode"),
                }
            }
            if program[len - 1].code != 0x06 {
                return Err("the last instruction is not a RET".into());
            }
            Ok(())
        }

        pub(crate) fn run(program: &[Instruction], call: &Call) -> u32 {
            let (mut pc, mut acc) = (0usize, 0u32);
            loop {
                let i = program[pc];
                pc += 1;
                match i.code {
                    0x20 => acc = load(call, i.k),
                    0x54 => acc &= i.k,
                    0x05 => pc += i.k as usize,
                    0x15 | 0x25 | 0x35 => {
                        let taken = match i.code {
                            0x15 => acc == i.k,
                            0x25 => acc > i.k,
                            _ => acc >= i.k,
                        };
                        pc += if taken { i.jt } else { i.jf } as usize;
                    }
                    0x06 => return i.k,
                    code => panic!("opcode {code:#x}"),
                }
            }
        }

        /// seccomp_run_filters: newest filter first; a strictly more
        /// restrictive action (signed compare of the action bits) replaces.
        pub(crate) fn verdict(filters: &[super::super::Filter], call: &Call) -> u32 {
            let mut ret = 0x7fff_0000u32;
            for f in filters.iter().rev() {
                let cur = run(&f.instructions, call);
                if ((cur & 0xffff_0000) as i32) < ((ret & 0xffff_0000) as i32) {
                    ret = cur;
                }
            }
            ret
        }
    }

    use kernel::Call;

    const ALLOW: u32 = 0x7fff_0000;
    const KILL_PROCESS: u32 = 0x8000_0000;
    const KILL_THREAD: u32 = 0;
    const TRAP: u32 = 0x0003_0000;
    const LOG: u32 = 0x7ffc_0000;
    fn errno(e: u32) -> u32 {
        0x0005_0000 | e
    }

    fn call(name: &str, args: &[u64]) -> Call {
        let mut all = [0u64; 6];
        all[..args.len()].copy_from_slice(args);
        Call { nr: syscall_number(name).unwrap(), arch: kernel::AUDIT_ARCH_X86_64, args: all }
    }

    fn compiled(json: &str) -> CompiledProfile {
        let p = compile(&Profile::parse(json.as_bytes()).unwrap()).unwrap();
        for f in &p.filters {
            kernel::check(&f.instructions).unwrap();
        }
        p
    }

    fn verdict(p: &CompiledProfile, name: &str, args: &[u64]) -> u32 {
        kernel::verdict(&p.filters, &call(name, args))
    }

    #[test]
    fn default_allow_with_an_errno_list() {
        let p = compiled(
            r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[
                {"names":["mkdir","mkdirat"],"action":"SCMP_ACT_ERRNO","errnoRet":13},
                {"names":["unshare"],"action":"SCMP_ACT_ERRNO"}]}"#,
        );
        assert_eq!(verdict(&p, "mkdir", &[]), errno(13));
        assert_eq!(verdict(&p, "mkdirat", &[]), errno(13));
        assert_eq!(verdict(&p, "unshare", &[]), errno(1), "ERRNO without errnoRet is EPERM");
        assert_eq!(verdict(&p, "read", &[]), ALLOW);
        assert_eq!(verdict(&p, "openat", &[]), ALLOW);
    }

    #[test]
    fn default_errno_with_an_allow_list_and_argument_rules() {
        let p = compiled(
            r#"{"defaultAction":"SCMP_ACT_ERRNO","defaultErrnoRet":1,"syscalls":[
                {"names":["read","write","exit_group"],"action":"SCMP_ACT_ALLOW"},
                {"names":["personality"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":0,"op":"SCMP_CMP_EQ"}]},
                {"names":["personality"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":8,"op":"SCMP_CMP_EQ"}]},
                {"names":["socket"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":40,"op":"SCMP_CMP_NE"}]},
                {"names":["kill"],"action":"SCMP_ACT_ALLOW","args":[{"index":1,"value":9,"op":"SCMP_CMP_LT"},
                                                                     {"index":0,"value":100,"op":"SCMP_CMP_GE"}]}]}"#,
        );
        assert_eq!(verdict(&p, "read", &[3, 0, 10]), ALLOW);
        assert_eq!(verdict(&p, "ptrace", &[]), errno(1));
        assert_eq!(verdict(&p, "personality", &[0]), ALLOW);
        assert_eq!(verdict(&p, "personality", &[8]), ALLOW);
        assert_eq!(verdict(&p, "personality", &[0x0040_0000]), errno(1));
        // 64-bit comparison: a value that only differs in the high word does not match.
        assert_eq!(verdict(&p, "personality", &[1 << 32]), errno(1));
        assert_eq!(verdict(&p, "socket", &[2]), ALLOW);
        assert_eq!(verdict(&p, "socket", &[40]), errno(1));
        // Conditions on different arguments are ANDed.
        assert_eq!(verdict(&p, "kill", &[100, 2]), ALLOW);
        assert_eq!(verdict(&p, "kill", &[100, 9]), errno(1));
        assert_eq!(verdict(&p, "kill", &[99, 2]), errno(1));
    }

    #[test]
    fn conditions_on_one_argument_are_alternatives() {
        let p = compiled(
            r#"{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[
                {"names":["personality"],"action":"SCMP_ACT_ALLOW","args":[
                    {"index":0,"value":0,"op":"SCMP_CMP_EQ"},{"index":0,"value":8,"op":"SCMP_CMP_EQ"}]}]}"#,
        );
        assert_eq!(verdict(&p, "personality", &[0]), ALLOW);
        assert_eq!(verdict(&p, "personality", &[8]), ALLOW);
        assert_eq!(verdict(&p, "personality", &[9]), errno(1));
    }

    #[test]
    fn per_rule_errno_values_and_the_first_listed_wins_a_tie() {
        let p = compiled(
            r#"{"defaultAction":"SCMP_ACT_ERRNO","defaultErrnoRet":1,"syscalls":[
                {"names":["clone3"],"action":"SCMP_ACT_ERRNO","errnoRet":38},
                {"names":["mkdir"],"action":"SCMP_ACT_ERRNO","errnoRet":13},
                {"names":["mkdir","rmdir"],"action":"SCMP_ACT_ERRNO","errnoRet":30},
                {"names":["read"],"action":"SCMP_ACT_ALLOW"}]}"#,
        );
        assert_eq!(verdict(&p, "clone3", &[]), errno(38));
        assert_eq!(verdict(&p, "mkdir", &[]), errno(13), "the first rule naming mkdir wins among ERRNOs");
        assert_eq!(verdict(&p, "rmdir", &[]), errno(30));
        assert_eq!(verdict(&p, "read", &[]), ALLOW);
        assert_eq!(verdict(&p, "write", &[]), errno(1));
    }

    #[test]
    fn masked_eq_compares_the_masked_argument_with_value_two() {
        // clone without namespace flags, as RuntimeDefault allows it.
        let p = compiled(
            r#"{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[
                {"names":["clone"],"action":"SCMP_ACT_ALLOW",
                 "args":[{"index":0,"value":2114060288,"valueTwo":0,"op":"SCMP_CMP_MASKED_EQ"}]},
                {"names":["ioctl"],"action":"SCMP_ACT_ALLOW",
                 "args":[{"index":1,"value":65280,"valueTwo":21504,"op":"SCMP_CMP_MASKED_EQ"}]}]}"#,
        );
        let sigchld = libc::SIGCHLD as u64;
        assert_eq!(verdict(&p, "clone", &[sigchld]), ALLOW);
        assert_eq!(verdict(&p, "clone", &[(libc::CLONE_VM | libc::CLONE_THREAD) as u64 | sigchld]), ALLOW);
        assert_eq!(verdict(&p, "clone", &[libc::CLONE_NEWUSER as u64 | sigchld]), errno(1));
        assert_eq!(verdict(&p, "clone", &[libc::CLONE_NEWNS as u64]), errno(1));
        // (arg & 0xff00) == 0x5400: terminal ioctls only.
        assert_eq!(verdict(&p, "ioctl", &[0, 0x5401]), ALLOW);
        assert_eq!(verdict(&p, "ioctl", &[0, 0x8901]), errno(1));
    }

    #[test]
    fn the_most_restrictive_matching_action_wins() {
        let p = compiled(
            r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[
                {"names":["mkdir"],"action":"SCMP_ACT_ERRNO"},
                {"names":["mkdir"],"action":"SCMP_ACT_TRAP","args":[{"index":1,"value":511,"op":"SCMP_CMP_EQ"}]},
                {"names":["rmdir"],"action":"SCMP_ACT_KILL_PROCESS"},
                {"names":["unlink"],"action":"SCMP_ACT_KILL"},
                {"names":["getpid"],"action":"SCMP_ACT_LOG"},
                {"names":["read"],"action":"SCMP_ACT_ALLOW"}]}"#,
        );
        assert_eq!(verdict(&p, "mkdir", &[0, 0o755]), errno(1));
        assert_eq!(verdict(&p, "mkdir", &[0, 0o777]), TRAP);
        assert_eq!(verdict(&p, "rmdir", &[]), KILL_PROCESS);
        assert_eq!(verdict(&p, "unlink", &[]), KILL_THREAD);
        assert_eq!(verdict(&p, "getpid", &[]), LOG);
        assert_eq!(verdict(&p, "read", &[]), ALLOW);
    }

    #[test]
    fn a_rule_with_the_default_action_still_overrides_an_allow() {
        // Default ERRNO; personality allowed, but personality(8) named under ERRNO too.
        let p = compiled(
            r#"{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[
                {"names":["personality","read"],"action":"SCMP_ACT_ALLOW"},
                {"names":["personality"],"action":"SCMP_ACT_ERRNO","args":[{"index":0,"value":8,"op":"SCMP_CMP_EQ"}]},
                {"names":["write"],"action":"SCMP_ACT_ERRNO"}]}"#,
        );
        assert_eq!(verdict(&p, "personality", &[0]), ALLOW);
        assert_eq!(verdict(&p, "personality", &[8]), errno(1));
        assert_eq!(verdict(&p, "write", &[]), errno(1));
        assert_eq!(verdict(&p, "read", &[]), ALLOW);
        assert_eq!(p.filters.len(), 1, "one filter per profile");
    }

    #[test]
    fn other_abis_are_killed() {
        let p = compiled(
            r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir"],"action":"SCMP_ACT_ERRNO"}]}"#,
        );
        let i386 = Call { nr: 39, arch: kernel::AUDIT_ARCH_I386, args: [0; 6] };
        assert_eq!(kernel::verdict(&p.filters, &i386), KILL_PROCESS);
        let x32_mkdir = Call { nr: 0x4000_0000 | 83, arch: kernel::AUDIT_ARCH_X86_64, args: [0; 6] };
        assert_eq!(kernel::verdict(&p.filters, &x32_mkdir), KILL_PROCESS);
    }

    #[test]
    fn unknown_names_are_skipped_and_reported() {
        let p = compiled(
            r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[
                {"names":["mkdir","arm_fadvise64_64","no_such_call"],"action":"SCMP_ACT_ERRNO"}]}"#,
        );
        assert_eq!(p.skipped_names, vec!["arm_fadvise64_64".to_string(), "no_such_call".into()]);
        assert_eq!(verdict(&p, "mkdir", &[]), errno(1));
    }

    #[test]
    fn an_allow_everything_profile_is_the_prologue_and_flags_travel() {
        let p = compiled(
            r#"{"defaultAction":"SCMP_ACT_ALLOW","flags":["SECCOMP_FILTER_FLAG_LOG","SECCOMP_FILTER_FLAG_SPEC_ALLOW"]}"#,
        );
        assert_eq!(p.filters.len(), 1);
        assert!(p.filters.iter().all(|f| f.flags == 2 | 4));
        assert_eq!(verdict(&p, "mount", &[]), ALLOW);
    }

    #[test]
    fn the_same_profile_hashes_the_same() {
        let a = compiled(
            r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["mkdir"],"action":"SCMP_ACT_ERRNO"}]}"#,
        );
        let b = compiled(
            r#"{ "syscalls":[{"action":"SCMP_ACT_ERRNO","names":["mkdir"]}], "defaultAction":"SCMP_ACT_ALLOW" }"#,
        );
        let c = compiled(
            r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[{"names":["rmdir"],"action":"SCMP_ACT_ERRNO"}]}"#,
        );
        assert_eq!(a.sha256, b.sha256);
        assert_ne!(a.sha256, c.sha256);
    }

    mod runtime_default {
        use super::*;
        use std::collections::BTreeSet;

        fn default_for(caps: &[&str]) -> CompiledProfile {
            let template = Profile::parse(crate::seccomp::RUNTIME_DEFAULT_JSON.as_bytes()).unwrap();
            let bounding: BTreeSet<String> = caps.iter().map(|c| c.to_string()).collect();
            compile(&template.resolve(&bounding)).unwrap()
        }

        fn default_caps() -> Vec<String> {
            crate::capabilities::DEFAULT.iter().map(|c| format!("CAP_{c}")).collect()
        }

        #[test]
        fn every_name_is_an_x86_64_syscall() {
            let p = default_for(&[]);
            assert_eq!(p.skipped_names, Vec::<String>::new());
            let total: usize = p.filters.iter().map(|f| f.instructions.len()).sum();
            assert!(p.filters.iter().all(|f| f.instructions.len() < 4096), "{total} instructions");
        }

        #[test]
        fn a_default_container_gets_containerds_restrictions() {
            let caps = default_caps();
            let p = default_for(&caps.iter().map(String::as_str).collect::<Vec<_>>());
            let eperm = errno(libc::EPERM as u32);
            for name in [
                "unshare",
                "setns",
                "mount",
                "umount2",
                "keyctl",
                "add_key",
                "request_key",
                "ptrace",
                "clock_settime",
                "settimeofday",
                "init_module",
                "finit_module",
                "delete_module",
                "reboot",
                "kexec_load",
                "bpf",
                "perf_event_open",
                "open_by_handle_at",
                "swapon",
                "pivot_root",
                "sethostname",
                "setdomainname",
                "userfaultfd",
                "io_uring_setup",
                "acct",
                "iopl",
                "syslog",
                "process_vm_readv",
                "fsopen",
                "move_mount",
                "lookup_dcookie",
            ] {
                assert_eq!(verdict(&p, name, &[]), eperm, "{name}");
            }
            assert_eq!(verdict(&p, "clone3", &[]), errno(libc::ENOSYS as u32));
            let sigchld = libc::SIGCHLD as u64;
            assert_eq!(verdict(&p, "clone", &[sigchld]), ALLOW);
            assert_eq!(verdict(&p, "clone", &[libc::CLONE_NEWUSER as u64 | sigchld]), eperm);
            assert_eq!(verdict(&p, "personality", &[0]), ALLOW);
            assert_eq!(verdict(&p, "personality", &[0xffff_ffff]), ALLOW);
            assert_eq!(verdict(&p, "personality", &[0x0040_0000]), eperm);
            for name in [
                "read",
                "write",
                "openat",
                "execve",
                "mmap",
                "futex",
                "rt_sigaction",
                "wait4",
                "socket",
                "connect",
                "capset",
                "prctl",
                "chroot",
                "mknod",
                "setuid",
                "getrandom",
                "statx",
                "rseq",
                "arch_prctl",
                "exit_group",
            ] {
                assert_eq!(verdict(&p, name, &[]), ALLOW, "{name}");
            }
        }

        #[test]
        fn capabilities_unlock_their_syscalls() {
            let p = default_for(&["CAP_SYS_ADMIN", "CAP_SYS_PTRACE", "CAP_SYS_TIME", "CAP_SYS_BOOT"]);
            for name in ["mount", "unshare", "setns", "clone3", "ptrace", "clock_settime", "reboot", "sethostname"] {
                assert_eq!(verdict(&p, name, &[]), ALLOW, "{name}");
            }
            assert_eq!(verdict(&p, "clone", &[libc::CLONE_NEWUSER as u64]), ALLOW);
            assert_eq!(verdict(&p, "init_module", &[]), errno(1));
            assert_eq!(verdict(&p, "keyctl", &[]), errno(1));
        }
    }

    /// OCI semantics straight from the profile: the most restrictive action
    /// of the rules that match (ties: the first listed), else the default.
    fn reference(profile: &Profile, call: &Call) -> u32 {
        let holds = |a: &Arg| {
            let x = call.args[a.index as usize];
            match a.op {
                Op::Ne => x != a.value,
                Op::Lt => x < a.value,
                Op::Le => x <= a.value,
                Op::Eq => x == a.value,
                Op::Ge => x >= a.value,
                Op::Gt => x > a.value,
                Op::MaskedEq => x & a.value == a.value_two.unwrap_or(0),
            }
        };
        let mut best: Option<Verdict> = None;
        for rule in &profile.syscalls {
            if !rule.names.iter().any(|n| syscall_number(n) == Some(call.nr)) {
                continue;
            }
            let matches = match alternatives(&rule.args) {
                Calls::Any => true,
                Calls::When(alts) => alts.iter().any(|conds| conds.iter().all(holds)),
            };
            let v = super::verdict(rule.action, rule.errno_ret);
            if matches && best.is_none_or(|b| v.precedence() < b.precedence()) {
                best = Some(v);
            }
        }
        best.unwrap_or(super::verdict(profile.default_action, profile.default_errno_ret)).code()
    }

    #[test]
    fn every_syscall_number_gets_what_the_profile_says() {
        let template = Profile::parse(crate::seccomp::RUNTIME_DEFAULT_JSON.as_bytes()).unwrap();
        let mut profiles: Vec<Profile> = [
            vec![],
            crate::capabilities::DEFAULT.iter().map(|c| format!("CAP_{c}")).collect(),
            vec!["CAP_SYS_ADMIN".to_string(), "CAP_SYS_PTRACE".into()],
        ]
        .into_iter()
        .map(|caps| template.resolve(&caps.into_iter().collect()))
        .collect();
        for json in [
            r#"{"defaultAction":"SCMP_ACT_ALLOW","syscalls":[
                {"names":["mkdir","read"],"action":"SCMP_ACT_ERRNO","errnoRet":13},
                {"names":["read"],"action":"SCMP_ACT_KILL_PROCESS","args":[{"index":0,"value":7,"op":"SCMP_CMP_GT"}]},
                {"names":["write"],"action":"SCMP_ACT_LOG"},
                {"names":["clone"],"action":"SCMP_ACT_TRAP","args":[{"index":0,"value":268435456,"valueTwo":268435456,"op":"SCMP_CMP_MASKED_EQ"}]}]}"#,
            r#"{"defaultAction":"SCMP_ACT_KILL_THREAD","syscalls":[
                {"names":["personality"],"action":"SCMP_ACT_ALLOW","args":[{"index":0,"value":8,"op":"SCMP_CMP_LE"},{"index":1,"value":3,"op":"SCMP_CMP_EQ"}]},
                {"names":["exit_group","getpid"],"action":"SCMP_ACT_ALLOW"},
                {"names":["getpid"],"action":"SCMP_ACT_TRACE","errnoRet":5}]}"#,
        ] {
            profiles.push(Profile::parse(json.as_bytes()).unwrap());
        }
        let arg_sets: [[u64; 6]; 6] = [
            [0; 6],
            [8, 3, 0, 0, 0, 0],
            [9, 3, 0, 0, 0, 0],
            [(libc::CLONE_NEWUSER | libc::SIGCHLD) as u64, 0, 0, 0, 0, 0],
            [0xffff_ffff, 0, 0, 0, 0, 0],
            [1 << 40, u64::MAX, 0, 0, 0, 0],
        ];
        for profile in &profiles {
            let compiled = compile(profile).unwrap();
            for f in &compiled.filters {
                kernel::check(&f.instructions).unwrap();
            }
            for nr in 0..520u32 {
                for args in arg_sets {
                    let call = Call { nr, arch: kernel::AUDIT_ARCH_X86_64, args };
                    assert_eq!(
                        kernel::verdict(&compiled.filters, &call),
                        reference(profile, &call),
                        "syscall {nr} with {args:x?}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_notify_profile_never_reaches_the_compiler() {
        let e = Profile::parse(br#"{"defaultAction":"SCMP_ACT_NOTIFY"}"#).unwrap_err();
        assert!(matches!(e, ProfileError::Unsupported(_)));
    }
}
