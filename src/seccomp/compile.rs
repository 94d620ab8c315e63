//! OCI profile → stacked BPF filters. seccompiler builds filters with one
//! match action and one default each, while an OCI profile maps every rule to
//! its own action. The kernel runs every installed filter on every syscall and
//! keeps the most restrictive verdict (KILL_PROCESS > KILL_THREAD > TRAP >
//! ERRNO > TRACE > LOG > ALLOW; among equal kinds, the most recently installed
//! filter's). So a profile becomes:
//!
//! - a *default* filter: every syscall some rule names (with its argument
//!   conditions) → ALLOW, anything else → the profile's default action;
//! - one filter per other action: that action's rules → the action, anything
//!   else → ALLOW — installed in reverse order of first appearance, so that
//!   between two ERRNO rules with different errnos the first listed wins;
//! - on x86_64, a guard killing calls numbered in the x32 range (the
//!   architecture check of seccompiler's filters lets those through).
//!
//! A call no rule matches gets the default; a call rules match gets the most
//! restrictive of their actions. Within one rule the argument conditions are
//! ANDed, except that several conditions on the same argument are ORed (as
//! runc does). Only the native architecture's syscalls are translated; calls
//! of any other ABI are killed by every filter's architecture check.

use std::collections::{BTreeMap, BTreeSet};
use std::str::FromStr;

use seccompiler::{SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter, SeccompRule};
use sha2::{Digest, Sha256};

use super::profile::{Action, Arg, Op, Profile, SUPPORTED_FLAGS};
use super::program::{CompiledProfile, Filter, Instruction};

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

fn backend_action(v: Verdict) -> SeccompAction {
    match v {
        Verdict::Allow => SeccompAction::Allow,
        Verdict::Errno(e) => SeccompAction::Errno(e),
        Verdict::KillThread => SeccompAction::KillThread,
        Verdict::KillProcess => SeccompAction::KillProcess,
        Verdict::Trap => SeccompAction::Trap,
        Verdict::Trace(m) => SeccompAction::Trace(m),
        Verdict::Log => SeccompAction::Log,
    }
}

/// Which calls of one syscall a group of rules matches.
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
pub fn syscall_number(name: &str) -> Option<i64> {
    syscalls::Sysno::from_str(name).ok().map(|s| i64::from(s.id()))
}

type Matches = BTreeMap<i64, Calls>;

fn add(matches: &mut Matches, nr: i64, calls: Calls) {
    match matches.get_mut(&nr) {
        Some(existing) => existing.merge(calls),
        None => {
            matches.insert(nr, calls);
        }
    }
}

/// Compiles a resolved profile.
pub fn compile(profile: &Profile) -> Result<CompiledProfile, CompileError> {
    let arch: seccompiler::TargetArch = std::env::consts::ARCH
        .try_into()
        .map_err(|_| CompileError::Architecture(std::env::consts::ARCH.to_string()))?;
    let default = verdict(profile.default_action, profile.default_errno_ret);
    let flags = profile
        .flags
        .iter()
        .filter_map(|f| SUPPORTED_FLAGS.iter().find(|(name, _)| name == f).map(|(_, bit)| *bit))
        .fold(0, |all, bit| all | bit);

    // Rules grouped by verdict, in order of first appearance.
    let mut groups: Vec<(Verdict, Matches)> = Vec::new();
    let mut skipped = BTreeSet::new();
    for rule in &profile.syscalls {
        let v = verdict(rule.action, rule.errno_ret);
        let position = match groups.iter().position(|(g, _)| *g == v) {
            Some(p) => p,
            None => {
                groups.push((v, Matches::new()));
                groups.len() - 1
            }
        };
        for name in &rule.names {
            match syscall_number(name) {
                Some(nr) => add(&mut groups[position].1, nr, alternatives(&rule.args)),
                None => {
                    skipped.insert(name.clone());
                }
            }
        }
    }

    // Syscalls that appear under more than one verdict.
    let mut seen: BTreeMap<i64, usize> = BTreeMap::new();
    for (_, matches) in &groups {
        for nr in matches.keys() {
            *seen.entry(*nr).or_default() += 1;
        }
    }
    let shared = |nr: &i64| seen.get(nr).copied().unwrap_or(0) > 1;

    let mut filters = Vec::new();
    if let Some(guard) = abi_guard() {
        filters.push(Filter { flags, instructions: guard });
    }
    if default != Verdict::Allow {
        // A rule with the default's own verdict changes nothing unless another
        // rule also names its syscall (then the most restrictive must win).
        let mut union = Matches::new();
        for (v, matches) in &groups {
            for (nr, calls) in matches {
                if *v != default || shared(nr) {
                    add(&mut union, *nr, calls.clone());
                }
            }
        }
        filters.push(build(union, default, Verdict::Allow, arch, flags)?);
    }
    for (v, matches) in groups.into_iter().rev() {
        if v == Verdict::Allow {
            continue;
        }
        let matches: Matches =
            if v == default { matches.into_iter().filter(|(nr, _)| shared(nr)).collect() } else { matches };
        if matches.is_empty() {
            continue;
        }
        filters.push(build(matches, Verdict::Allow, v, arch, flags)?);
    }
    let sha256 = hex::encode(Sha256::digest(profile.canonical_json()));
    Ok(CompiledProfile { filters, sha256, skipped_names: skipped.into_iter().collect() })
}

fn build(
    matches: Matches,
    mismatch: Verdict,
    on_match: Verdict,
    arch: seccompiler::TargetArch,
    flags: u32,
) -> Result<Filter, CompileError> {
    let backend = |e: seccompiler::BackendError| CompileError::Backend(e.to_string());
    let mut rules: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for (nr, calls) in matches {
        let chain = match calls {
            Calls::Any => Vec::new(),
            Calls::When(alternatives) => alternatives
                .iter()
                .map(|conditions| SeccompRule::new(conditions.iter().map(condition).collect::<Result<_, _>>()?))
                .collect::<Result<Vec<_>, _>>()
                .map_err(backend)?,
        };
        rules.insert(nr, chain);
    }
    let filter =
        SeccompFilter::new(rules, backend_action(mismatch), backend_action(on_match), arch).map_err(backend)?;
    let program: seccompiler::BpfProgram = filter.try_into().map_err(backend)?;
    let instructions = program.iter().map(|i| Instruction { code: i.code, jt: i.jt, jf: i.jf, k: i.k }).collect();
    Ok(Filter { flags, instructions })
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

// Classic BPF opcodes and seccomp facts (linux/filter.h, linux/seccomp.h, linux/audit.h).
const LD_W_ABS: u16 = 0x20;
const JEQ_K: u16 = 0x15;
const JGE_K: u16 = 0x35;
const RET_K: u16 = 0x06;
const SECCOMP_DATA_NR: u32 = 0;
const SECCOMP_DATA_ARCH: u32 = 4;
const RET_ALLOW: u32 = 0x7fff_0000;
const RET_KILL_PROCESS: u32 = 0x8000_0000;

/// x86_64 only: kills calls of the x32 ABI (numbers with bit 30 set), which
/// carry the x86_64 audit architecture and would otherwise fall through to
/// the default action of every filter.
fn abi_guard() -> Option<Vec<Instruction>> {
    const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
    const X32_SYSCALL_BIT: u32 = 0x4000_0000;
    if std::env::consts::ARCH != "x86_64" {
        return None;
    }
    let i = |code, jt, jf, k| Instruction { code, jt, jf, k };
    Some(vec![
        i(LD_W_ABS, 0, 0, SECCOMP_DATA_ARCH),
        i(JEQ_K, 0, 3, AUDIT_ARCH_X86_64),
        i(LD_W_ABS, 0, 0, SECCOMP_DATA_NR),
        i(JGE_K, 1, 0, X32_SYSCALL_BIT),
        i(RET_K, 0, 0, RET_ALLOW),
        i(RET_K, 0, 0, RET_KILL_PROCESS),
    ])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seccomp::profile::ProfileError;

    /// A classic-BPF interpreter for the instructions our filters use, and the
    /// kernel's rule for combining the verdicts of stacked filters.
    mod kernel {
        use super::super::Instruction;

        pub const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
        pub const AUDIT_ARCH_I386: u32 = 0x4000_0003;

        pub struct Call {
            pub nr: u32,
            pub arch: u32,
            pub args: [u64; 6],
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

        pub fn run(program: &[Instruction], call: &Call) -> u32 {
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
        pub fn verdict(filters: &[super::super::Filter], call: &Call) -> u32 {
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
        Call { nr: syscall_number(name).unwrap() as u32, arch: kernel::AUDIT_ARCH_X86_64, args: all }
    }

    fn compiled(json: &str) -> CompiledProfile {
        compile(&Profile::parse(json.as_bytes()).unwrap()).unwrap()
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
        // write's rule needs no filter of its own: only the default filter and the guard
        // plus the one for the shared personality rule.
        assert_eq!(p.filters.len(), 3);
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
    fn an_allow_everything_profile_needs_only_the_guard_and_flags_travel() {
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
            crate::container::caps::DEFAULT.iter().map(|c| format!("CAP_{c}")).collect()
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

    #[test]
    fn a_notify_profile_never_reaches_the_compiler() {
        let e = Profile::parse(br#"{"defaultAction":"SCMP_ACT_NOTIFY"}"#).unwrap_err();
        assert!(matches!(e, ProfileError::Unsupported(_)));
    }
}
