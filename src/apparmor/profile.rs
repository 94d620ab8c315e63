//! The text of nidus's default AppArmor profile (RuntimeDefault): what a
//! container normally does is allowed (its files, the network, its
//! capabilities as the runtime gave them, signals and tracing among its own
//! processes); writes to the kernel's knobs (`/proc/sys`, sysfs but the
//! cgroup filesystem, `/proc/sysrq-trigger` and the like), reads of kernel
//! memory and firmware, mounting and tracing processes outside the profile
//! are denied, and each denial is audited (a bare `deny` rule is silent).
//! No includes: the profile holds every rule it needs.

/// The profile `name`, for `apparmor_parser` (deny rules win over the
/// broad allows, whatever their order). Every deny rule is `audit deny`:
/// AppArmor keeps quiet about what a bare `deny` refuses, and a container
/// refused a kernel knob is something the node's log should show.
pub fn default_profile(name: &str) -> String {
    let mut rules: Vec<String> = vec![
        // What a container does.
        "file,".into(),
        "network,".into(),
        "capability,".into(),
        "umount,".into(),
        format!("signal (send, receive) peer={name},"),
        // The runtime (and the node's tools) stop and signal it.
        "signal (receive) peer=unconfined,".into(),
        format!("ptrace (trace, read, tracedby, readby) peer={name},"),
        // No mounts: the container's file systems are the runtime's.
        "audit deny mount,".into(),
        "audit deny pivot_root,".into(),
        // The kernel's settings, and whatever triggers kernel actions.
        "audit deny /proc/sys/** wkl,".into(),
        "audit deny /proc/sysrq-trigger rwkl,".into(),
        "audit deny /proc/{irq,bus,acpi,scsi,driver,tty}/** wkl,".into(),
        "audit deny /proc/{kcore,kmem,mem,kmsg,kpagecount,kpageflags} rwkl,".into(),
        // sysfs: readable, and writable only under the cgroup filesystem.
        "audit deny /sys/firmware/** rwkl,".into(),
        "audit deny /sys/kernel/security/** rwkl,".into(),
    ];
    for pattern in everything_but("/sys/", "fs") {
        rules.push(format!("audit deny {pattern}/** wkl,"));
    }
    for pattern in everything_but("/sys/fs/", "cgroup") {
        rules.push(format!("audit deny {pattern}/** wkl,"));
    }
    let mut text = format!(
        "# {name}: written by nidus for the containers that ask for RuntimeDefault.\n\
         profile {name} flags=(attach_disconnected, mediate_deleted) {{\n"
    );
    for rule in rules {
        text.push_str("  ");
        text.push_str(&rule);
        text.push('\n');
    }
    text.push_str("}\n");
    text
}

/// AppArmor globs matching every entry of `dir` but the one called `name`:
/// names differing from it at some byte (`na[^m]*`), its proper prefixes
/// (`na`), and names it is a proper prefix of (`name?*`). (AppArmor has no
/// negation of a whole name; a deny rule always wins over an allow, so an
/// exception must be left out of the deny instead.)
fn everything_but(dir: &str, name: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (i, c) in name.char_indices() {
        out.push(format!("{dir}{}[^{c}]*", &name[..i]));
        if i > 0 {
            out.push(format!("{dir}{}", &name[..i]));
        }
    }
    out.push(format!("{dir}{name}?*"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether an AppArmor glob of `everything_but`'s kinds matches a name.
    fn matches(pattern: &str, name: &str) -> bool {
        if let Some(prefix) = pattern.strip_suffix("?*") {
            return name.len() > prefix.len() && name.starts_with(prefix);
        }
        if let Some((prefix, rest)) = pattern.split_once("[^") {
            let excluded = rest.chars().next().unwrap_or_default();
            let Some(after) = name.strip_prefix(prefix) else { return false };
            return after.chars().next().is_some_and(|c| c != excluded);
        }
        pattern == name
    }

    #[test]
    fn every_name_but_the_exception_is_matched() {
        let patterns = everything_but("", "cgroup");
        for name in ["c", "cg", "cgr", "cgrou", "cgroup2", "cgroups", "bpf", "fuse", "pstore", "xfs", "cgx", "d"] {
            assert!(patterns.iter().any(|p| matches(p, name)), "{name} escapes {patterns:?}");
        }
        assert!(!patterns.iter().any(|p| matches(p, "cgroup")), "cgroup itself is matched by {patterns:?}");
    }

    #[test]
    fn the_profile_names_itself_and_denies_the_kernel_knobs() {
        let text = default_profile("nidus-default");
        assert!(text.contains("profile nidus-default flags=(attach_disconnected, mediate_deleted) {"));
        for rule in ["deny /proc/sys/** wkl,", "deny mount,", "deny /sys/[^f]*/** wkl,", "deny /sys/fs/c[^g]*/** wkl,"]
        {
            assert!(text.contains(&format!("  audit {rule}\n")), "audit {rule} missing from\n{text}");
        }
        assert!(
            text.lines().filter(|l| l.contains("deny ")).all(|l| l.trim_start().starts_with("audit deny ")),
            "every denial is audited:\n{text}"
        );
        assert!(!text.contains("/sys/fs/cgroup/**"));
        assert!(text.contains("ptrace (trace, read, tracedby, readby) peer=nidus-default,"));
        assert!(text.trim_end().ends_with('}'));
    }
}
