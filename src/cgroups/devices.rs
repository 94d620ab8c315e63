//! The device allow-list of a container cgroup: the nodes every container may
//! use (null, zero, full, random, urandom, tty, console, ptmx, pts) plus the
//! devices its config names; any node may be created (`m`, as runc allows) but
//! no other may be opened. cgroup v1: `devices.deny` / `devices.allow`;
//! cgroup v2: a BPF_PROG_TYPE_CGROUP_DEVICE program (`device_program`,
//! attached by `linux::device_filter`).
//! Privileged containers get no list (every device).

use std::io;
use std::path::{Path, PathBuf};

use super::{CgroupPath, CgroupVersion, Cgroups};

/// `b` (block), `c` (character) or `a` (both).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeviceKind {
    All,
    Char,
    Block,
}

/// One allowed device (or range: None = any number).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceRule {
    pub kind: DeviceKind,
    pub major: Option<u32>,
    pub minor: Option<u32>,
    /// Some of `r`, `w`, `m`.
    pub access: String,
}

impl DeviceRule {
    fn char(major: u32, minor: Option<u32>) -> Self {
        Self { kind: DeviceKind::Char, major: Some(major), minor, access: "rwm".into() }
    }

    /// The v1 `devices.allow` line, e.g. `c 1:3 rwm` or `c *:* m`.
    pub(crate) fn v1_line(&self) -> String {
        let kind = match self.kind {
            DeviceKind::All => 'a',
            DeviceKind::Char => 'c',
            DeviceKind::Block => 'b',
        };
        let number = |n: Option<u32>| n.map(|n| n.to_string()).unwrap_or_else(|| "*".into());
        format!("{kind} {}:{} {}", number(self.major), number(self.minor), self.access)
    }
}

/// The devices every non-privileged container may use.
pub(crate) fn default_rules() -> Vec<DeviceRule> {
    vec![
        DeviceRule { kind: DeviceKind::Char, major: None, minor: None, access: "m".into() },
        DeviceRule { kind: DeviceKind::Block, major: None, minor: None, access: "m".into() },
        DeviceRule::char(1, Some(3)), // null
        DeviceRule::char(1, Some(5)), // zero
        DeviceRule::char(1, Some(7)), // full
        DeviceRule::char(1, Some(8)), // random
        DeviceRule::char(1, Some(9)), // urandom
        DeviceRule::char(5, Some(0)), // tty
        DeviceRule::char(5, Some(1)), // console
        DeviceRule::char(5, Some(2)), // ptmx
        DeviceRule::char(136, None),  // pts
    ]
}

/// A device a container's config gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct GrantedDevice {
    pub(crate) char_device: bool,
    pub(crate) major: u32,
    pub(crate) minor: u32,
    pub(crate) permissions: String,
}

/// The allow-list of a container; None for a privileged one (all devices).
pub(crate) fn rules_for(privileged: bool, granted: &[GrantedDevice]) -> Option<Vec<DeviceRule>> {
    if privileged {
        return None;
    }
    let mut rules = default_rules();
    rules.extend(granted.iter().map(|d| DeviceRule {
        kind: if d.char_device { DeviceKind::Char } else { DeviceKind::Block },
        major: Some(d.major),
        minor: Some(d.minor),
        access: if d.permissions.is_empty() { "rwm".into() } else { d.permissions.clone() },
    }));
    Some(rules)
}

#[derive(Debug, thiserror::Error)]
#[error("cannot restrict devices in {path}: {source}")]
pub(crate) struct DevicesError {
    pub(crate) path: PathBuf,
    pub(crate) source: io::Error,
}

/// Applies `rules` to the container cgroup `path` (before any process joins it).
pub(crate) fn restrict(cgroups: &Cgroups, path: &CgroupPath, rules: &[DeviceRule]) -> Result<(), DevicesError> {
    match cgroups.version {
        CgroupVersion::V1 => {
            let Some(hierarchy) = cgroups.hierarchies.iter().find(|h| h.controllers.iter().any(|c| c == "devices"))
            else {
                // No devices controller mounted: nothing to write to.
                tracing::warn!("no devices cgroup hierarchy: containers are not limited to their devices");
                return Ok(());
            };
            restrict_v1(&hierarchy.root_dir.join(path.as_str()), rules)
        }
        CgroupVersion::V2 => {
            let dir = cgroups.dirs(path).into_iter().next().unwrap_or_default();
            crate::linux::device_filter::attach(&dir, &super::device_program::program(rules))
                .map_err(|source| DevicesError { path: dir.clone(), source })
        }
    }
}

fn restrict_v1(dir: &Path, rules: &[DeviceRule]) -> Result<(), DevicesError> {
    let write = |file: &str, line: &str| {
        std::fs::write(dir.join(file), line).map_err(|source| DevicesError { path: dir.join(file), source })
    };
    write("devices.deny", "a")?;
    for rule in rules {
        write("devices.allow", &rule.v1_line())?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_and_lists() {
        let lines: Vec<String> = default_rules().iter().map(DeviceRule::v1_line).collect();
        assert_eq!(lines[0], "c *:* m");
        assert_eq!(lines[1], "b *:* m");
        assert!(lines.contains(&"c 1:3 rwm".to_string()));
        assert!(lines.contains(&"c 136:* rwm".to_string()));
        assert!(rules_for(true, &[]).is_none());
        let granted = [GrantedDevice { char_device: false, major: 7, minor: 0, permissions: "r".into() }];
        let rules = rules_for(false, &granted).unwrap();
        assert_eq!(rules.last().unwrap().v1_line(), "b 7:0 r");
    }
}
