//! The rules a CDI spec file must keep to be used: a known `cdiVersion` no
//! older than the fields it uses need, a valid `kind` and device names (each
//! once, at least one), devices that edit something, and edits that make
//! sense: `NAME=value` environment entries, known hook stages with absolute
//! paths, absolute mount destinations and bind sources, and device nodes
//! strictly below `/dev` (in the container and on the host) of a known type
//! with `r`/`w`/`m` permissions. Any failure makes the whole file invalid, as in the
//! reference implementation.

use std::collections::{BTreeMap, HashSet};
use std::path::{Component, Path};

use super::name::{check_device_name, parse_kind};
use super::spec::{ContainerEdits, SpecFile};
use crate::quote::quote;

/// The spec versions the CNCF spec defines, oldest first.
pub(crate) const VERSIONS: &[&str] =
    &["0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0"];

/// A spec that keeps the rules: its vendor and class, its spec-wide edits,
/// and each device's edits by name.
#[derive(Debug, Clone)]
pub(crate) struct ValidSpec {
    pub(crate) vendor: String,
    pub(crate) class: String,
    pub(crate) edits: ContainerEdits,
    pub(crate) devices: BTreeMap<String, ContainerEdits>,
}

fn version_index(version: &str) -> Option<usize> {
    let version = version.strip_prefix('v').unwrap_or(version);
    VERSIONS.iter().position(|v| *v == version)
}

fn all_edits(spec: &SpecFile) -> impl Iterator<Item = &ContainerEdits> {
    std::iter::once(&spec.container_edits).chain(spec.devices.iter().map(|d| &d.container_edits))
}

/// The oldest version whose fields `spec` uses.
pub(crate) fn minimum_version(spec: &SpecFile) -> &'static str {
    let edits: Vec<&ContainerEdits> = all_edits(spec).collect();
    let rdt_1_1 =
        edits.iter().any(|e| e.intel_rdt.as_ref().is_some_and(|r| r.schemata.is_some() || r.enable_monitoring));
    if rdt_1_1 || edits.iter().any(|e| !e.net_devices.is_empty()) {
        return "1.1.0";
    }
    if edits.iter().any(|e| e.intel_rdt.is_some() || !e.additional_gids.is_empty()) {
        return "0.7.0";
    }
    let dotted_class = spec.kind.split_once('/').is_some_and(|(_, class)| class.contains('.'));
    if !spec.annotations.is_empty() || spec.devices.iter().any(|d| !d.annotations.is_empty()) || dotted_class {
        return "0.6.0";
    }
    let digit_first = spec.devices.iter().any(|d| d.name.starts_with(|c: char| c.is_ascii_digit()));
    if digit_first || edits.iter().any(|e| e.device_nodes.iter().any(|n| !n.host_path.is_empty())) {
        return "0.5.0";
    }
    if edits.iter().any(|e| e.mounts.iter().any(|m| !m.kind.is_empty())) {
        return "0.4.0";
    }
    "0.3.0"
}

/// An absolute path without `..` and without NUL.
fn absolute(what: &str, path: &str) -> Result<(), String> {
    let p = Path::new(path);
    if !p.is_absolute() || p.components().any(|c| c == Component::ParentDir) || path.contains('\0') {
        return Err(format!("{what} {} must be an absolute path without '..'", quote(path)));
    }
    Ok(())
}

/// A device node path: absolute, without `..`, strictly below `/dev`.
fn below_dev(what: &str, path: &str) -> Result<(), String> {
    absolute(what, path)?;
    let p = Path::new(path);
    if !p.starts_with("/dev") || p == Path::new("/dev") {
        return Err(format!("{what} {} is not below /dev", quote(path)));
    }
    Ok(())
}

fn env(what: &str, entries: &[String]) -> Result<(), String> {
    for entry in entries {
        if entry.split_once('=').is_none_or(|(k, _)| k.is_empty()) || entry.contains('\0') {
            return Err(format!("{what} {} is not NAME=value", quote(entry)));
        }
    }
    Ok(())
}

/// Checks one `containerEdits`; `at` names where it is in the file.
pub(crate) fn edits(at: &str, edits: &ContainerEdits) -> Result<(), String> {
    env(&format!("{at}.env entry"), &edits.env)?;
    for (i, node) in edits.device_nodes.iter().enumerate() {
        let at = format!("{at}.deviceNodes[{i}]");
        below_dev(&format!("{at}.path"), &node.path)?;
        if !node.host_path.is_empty() {
            below_dev(&format!("{at}.hostPath"), &node.host_path)?;
        }
        if !["", "b", "c", "u", "p"].contains(&node.kind.as_str()) {
            return Err(format!("{at}.type {} is not b, c, u or p", quote(&node.kind)));
        }
        if node.major < 0 || node.minor < 0 || node.major > u32::MAX.into() || node.minor > u32::MAX.into() {
            return Err(format!("{at}: major {} and minor {} must be 0 to 2^32-1", node.major, node.minor));
        }
        if node.file_mode.is_some_and(|m| m > 0o7777) {
            return Err(format!("{at}.fileMode {:#o} has bits beyond 0o7777", node.file_mode.unwrap_or(0)));
        }
        let p = node.permissions.as_str();
        if !(p.is_empty() || p == "none" || p.chars().all(|c| "rwm".contains(c))) {
            return Err(format!("{at}.permissions {} must be made of r, w and m (or be none)", quote(p)));
        }
    }
    for (i, hook) in edits.hooks.iter().enumerate() {
        let at = format!("{at}.hooks[{i}]");
        if crate::hooks::Stage::parse(&hook.hook_name).is_none() {
            return Err(format!("{at}.hookName {} is not an OCI hook stage", quote(&hook.hook_name)));
        }
        absolute(&format!("{at}.path"), &hook.path)?;
        env(&format!("{at}.env entry"), &hook.env)?;
        if hook.args.iter().any(|a| a.contains('\0')) {
            return Err(format!("{at}.args must not hold a NUL byte"));
        }
        if hook.timeout.is_some_and(|t| t <= 0) {
            return Err(format!("{at}.timeout must be more than 0 seconds"));
        }
    }
    for (i, mount) in edits.mounts.iter().enumerate() {
        let at = format!("{at}.mounts[{i}]");
        // A bind mount's source is a host path; another type's is the file system's (`tmpfs`).
        let bind = mount.kind == "bind" || mount.options.iter().any(|o| o == "bind" || o == "rbind");
        if bind {
            absolute(&format!("{at}.hostPath"), &mount.host_path)?;
        } else if mount.host_path.is_empty() {
            return Err(format!("{at}.hostPath must not be empty"));
        }
        absolute(&format!("{at}.containerPath"), &mount.container_path)?;
        if mount.options.iter().chain(std::iter::once(&mount.kind)).any(|o| o.contains('\0')) {
            return Err(format!("{at}: type and options must not hold a NUL byte"));
        }
    }
    let (mut hosts, mut names) = (HashSet::new(), HashSet::new());
    for (i, net) in edits.net_devices.iter().enumerate() {
        if net.host_interface_name.is_empty() || net.name.is_empty() {
            return Err(format!("{at}.netDevices[{i}]: hostInterfaceName and name must not be empty"));
        }
        if !hosts.insert(&net.host_interface_name) || !names.insert(&net.name) {
            return Err(format!("{at}.netDevices[{i}]: an interface named twice"));
        }
    }
    Ok(())
}

/// Checks a parsed spec file against every rule.
pub(crate) fn spec(spec: SpecFile) -> Result<ValidSpec, String> {
    let declared = version_index(&spec.version)
        .ok_or_else(|| format!("cdiVersion {} is not one of {}", quote(&spec.version), VERSIONS.join(", ")))?;
    let minimum = minimum_version(&spec);
    if version_index(minimum).is_some_and(|needed| needed > declared) {
        return Err(format!(
            "cdiVersion {} is too old for the fields used (they need {minimum})",
            quote(&spec.version)
        ));
    }
    let (vendor, class) = parse_kind(&spec.kind)?;
    edits("containerEdits", &spec.container_edits)?;
    if spec.devices.is_empty() {
        return Err("no devices".into());
    }
    let mut devices = BTreeMap::new();
    for (i, device) in spec.devices.into_iter().enumerate() {
        let at = format!("devices[{i}]");
        check_device_name(&device.name).map_err(|e| format!("{at}: {e}"))?;
        if device.container_edits.is_empty() {
            return Err(format!("{at} ({}): no containerEdits", quote(&device.name)));
        }
        edits(&format!("{at}.containerEdits"), &device.container_edits)?;
        if devices.insert(device.name.clone(), device.container_edits).is_some() {
            return Err(format!("{at}: device {} is defined twice", quote(&device.name)));
        }
    }
    Ok(ValidSpec { vendor, class, edits: spec.container_edits, devices })
}

#[cfg(test)]
mod tests {
    use super::super::spec::{parse, Format};
    use super::*;

    fn check(text: &str) -> Result<ValidSpec, String> {
        spec(parse(text.as_bytes(), Format::Yaml).unwrap())
    }

    #[test]
    fn versions_must_be_known_and_new_enough() {
        let node = "devices: [{name: d, containerEdits: {deviceNodes: [{path: /dev/x, hostPath: /dev/null}]}}]";
        assert!(check(&format!("cdiVersion: 0.5.0\nkind: a.com/b\n{node}")).is_ok());
        assert!(check(&format!("cdiVersion: v1.1.0\nkind: a.com/b\n{node}")).is_ok());
        let err = check(&format!("cdiVersion: 0.4.0\nkind: a.com/b\n{node}")).unwrap_err();
        assert!(err.contains("too old") && err.contains("0.5.0"), "{err}");
        let err = check(&format!("cdiVersion: 1.2.0\nkind: a.com/b\n{node}")).unwrap_err();
        assert!(err.contains("is not one of"), "{err}");
        let gids = "cdiVersion: 0.6.0\nkind: a.com/b\ndevices: [{name: d, containerEdits: {additionalGids: [5]}}]";
        assert!(check(gids).unwrap_err().contains("need 0.7.0"));
        let net = "cdiVersion: 1.0.0\nkind: a.com/b\ndevices: [{name: d, containerEdits: {netDevices: [{hostInterfaceName: e, name: f}]}}]";
        assert!(check(net).unwrap_err().contains("need 1.1.0"));
        let dotted = "cdiVersion: 0.5.0\nkind: a.com/b.c\ndevices: [{name: d, containerEdits: {env: [A=1]}}]";
        assert!(check(dotted).unwrap_err().contains("need 0.6.0"));
    }

    #[test]
    fn device_nodes_stay_below_dev() {
        for (path, host) in [
            ("/etc/evil", ""),
            ("/dev", ""),
            ("/dev/../etc/evil", ""),
            ("dev/x", ""),
            ("/devices/x", ""),
            ("/dev/x", "/etc/shadow"),
            ("/dev/x", "/dev/../etc/shadow"),
        ] {
            let text = format!(
                "cdiVersion: 0.5.0\nkind: a.com/b\ndevices: [{{name: d, containerEdits: {{deviceNodes: [{{path: {path:?}, hostPath: {host:?}}}]}}}}]"
            );
            let err = check(&text).unwrap_err();
            assert!(
                err.contains("is not below /dev") || err.contains("absolute path without '..'"),
                "{path} {host}: {err}"
            );
            assert!(err.starts_with("devices[0].containerEdits.deviceNodes[0]."), "{err}");
        }
    }

    #[test]
    fn everything_else_a_spec_may_get_wrong() {
        let base =
            |edits: &str| format!("cdiVersion: 0.7.0\nkind: a.com/b\ndevices: [{{name: d, containerEdits: {edits}}}]");
        for (edits, expect) in [
            ("{env: [NOEQUALS]}", "is not NAME=value"),
            ("{env: [=x]}", "is not NAME=value"),
            ("{deviceNodes: [{path: /dev/x, type: z}]}", "is not b, c, u or p"),
            ("{deviceNodes: [{path: /dev/x, permissions: rwx}]}", "must be made of r, w and m"),
            ("{deviceNodes: [{path: /dev/x, major: -1}]}", "must be 0 to 2^32-1"),
            ("{deviceNodes: [{path: /dev/x, fileMode: 65535}]}", "beyond 0o7777"),
            ("{hooks: [{hookName: preStart, path: /bin/true}]}", "is not an OCI hook stage"),
            ("{hooks: [{hookName: poststop, path: bin/true}]}", "absolute path"),
            ("{hooks: [{hookName: poststop, path: /bin/true, timeout: 0}]}", "more than 0 seconds"),
            ("{mounts: [{hostPath: lib, containerPath: /lib, options: [rbind]}]}", "absolute path"),
            ("{mounts: [{hostPath: '', containerPath: /lib, type: tmpfs}]}", "must not be empty"),
            ("{mounts: [{hostPath: /lib, containerPath: /x/../lib}]}", "absolute path"),
            ("{}", "no containerEdits"),
        ] {
            let err = check(&base(edits)).unwrap_err();
            assert!(err.contains(expect), "{edits}: {err}");
        }
        assert!(check("cdiVersion: 0.3.0\nkind: a.com/b\ndevices: []").unwrap_err().contains("no devices"));
        assert!(check("cdiVersion: 0.3.0\nkind: ab\ndevices: [{name: d, containerEdits: {env: [A=1]}}]").is_err());
        let twice = "cdiVersion: 0.3.0\nkind: a.com/b\ndevices: [{name: d, containerEdits: {env: [A=1]}}, {name: d, containerEdits: {env: [A=2]}}]";
        assert!(check(twice).unwrap_err().contains("defined twice"));
        let ok = check("cdiVersion: 0.7.0\nkind: a.com/b\ncontainerEdits: {env: [S=1]}\ndevices: [{name: d, containerEdits: {additionalGids: [7], deviceNodes: [{path: /dev/a/b, permissions: none}]}}]").unwrap();
        assert_eq!((ok.vendor.as_str(), ok.class.as_str()), ("a.com", "b"));
        assert_eq!(ok.edits.env, ["S=1"]);
        assert_eq!(ok.devices["d"].additional_gids, [7]);
    }
}
