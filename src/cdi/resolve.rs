//! The devices a container asks for, resolved against the loaded specs into
//! the edits nidus makes: each spec's own edits once (before its first
//! device's), then each device's, in the order asked. Device nodes take
//! what the spec leaves out (type, numbers, mode) from their host node,
//! read with `lstat` as the reference implementation does; bind mount
//! sources must exist. Edits nidus cannot make (Intel RDT, network devices,
//! FIFO nodes, a mount that is neither a bind mount nor typed) refuse the
//! device rather than being dropped.

use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::Path;
use std::sync::Arc;

use oci_spec::runtime::{Hook, Mount, MountBuilder};

use super::name::Requested;
use super::registry::{Devices, Entry, LoadedSpec};
use super::spec::{ContainerEdits, DeviceNode};
use crate::hooks::Stage;
use crate::quote::quote;

/// How many unreadable spec files an "unknown device" error lists.
const LISTED: usize = 3;

#[derive(Debug, thiserror::Error)]
pub(crate) enum CdiError {
    #[error("{field}: unknown CDI device {}{hint}", quote(name))]
    Unknown { field: String, name: String, hint: String },
    #[error("{field}: ambiguous CDI device {}: defined by {paths}", quote(name))]
    Ambiguous { field: String, name: String, paths: String },
    #[error("{field}: CDI device {} is in an invalid spec file, {}: {why}", quote(name), quote(path))]
    InvalidSpec { field: String, name: String, path: String, why: String },
    #[error("{field}: CDI device {}: {why}", quote(name))]
    Unsupported { field: String, name: String, why: String },
    #[error("{field}: CDI device {}: {why}", quote(name))]
    Host { field: String, name: String, why: String },
}

impl CdiError {
    /// Whether the node, not the request, lacks what is needed (a host
    /// device or mount source missing): FailedPrecondition rather than
    /// InvalidArgument.
    pub(crate) fn is_precondition(&self) -> bool {
        matches!(self, Self::Host { .. })
    }
}

/// A device node the container gets, its numbers settled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Node {
    pub(crate) path: String,
    pub(crate) char_device: bool,
    pub(crate) major: i64,
    pub(crate) minor: i64,
    pub(crate) file_mode: u32,
    /// The device cgroup access (`r`, `w`, `m`); empty: no rule (`none`).
    pub(crate) permissions: String,
    pub(crate) uid: Option<u32>,
    pub(crate) gid: Option<u32>,
}

/// Every edit of the devices asked for, merged.
#[derive(Debug, Clone, Default)]
pub(crate) struct Resolved {
    /// The qualified names, in the order asked.
    pub(crate) names: Vec<String>,
    /// `NAME=value`, a later one replacing an earlier of the same name.
    pub(crate) env: Vec<String>,
    /// A later node replaces an earlier one of the same path.
    pub(crate) nodes: Vec<Node>,
    /// A later mount replaces an earlier one of the same destination.
    pub(crate) mounts: Vec<Mount>,
    pub(crate) hooks: Vec<(Stage, Hook)>,
    /// Without 0 and repeats.
    pub(crate) additional_gids: Vec<u32>,
}

/// Resolves `requests` against the devices of one load.
pub(crate) fn resolve(devices: &Devices, requests: &[Requested]) -> Result<Resolved, CdiError> {
    let mut resolved = Resolved::default();
    let mut specs_seen: Vec<Arc<LoadedSpec>> = Vec::new();
    for request in requests {
        let (field, name) = (request.field.as_str(), request.name.to_string());
        let (spec, device) = match devices.entries.get(&request.name) {
            Some(Entry::Device { spec, name }) => (spec.clone(), name.clone()),
            Some(Entry::Ambiguous { paths, .. }) => {
                let paths = paths.iter().map(|p| quote(&p.display().to_string()).to_string()).collect::<Vec<_>>();
                return Err(CdiError::Ambiguous { field: field.into(), name, paths: paths.join(" and ") });
            }
            None => return Err(missing(devices, field, &request.name, name)),
        };
        let Some((spec_edits, own)) = spec.edits_of(&device) else {
            return Err(missing(devices, field, &request.name, name));
        };
        if !specs_seen.iter().any(|s| Arc::ptr_eq(s, &spec)) {
            apply(&mut resolved, spec_edits, field, &name)?;
            specs_seen.push(spec.clone());
        }
        apply(&mut resolved, own, field, &name)?;
        resolved.names.push(name);
    }
    Ok(resolved)
}

/// The error for a name no valid spec defines.
fn missing(devices: &Devices, field: &str, qualified: &super::name::QualifiedName, name: String) -> CdiError {
    if let Some(skipped) = devices.invalid.get(qualified) {
        return CdiError::InvalidSpec {
            field: field.into(),
            name,
            path: skipped.path.display().to_string(),
            why: skipped.why.clone(),
        };
    }
    let mut hint = String::new();
    if !devices.unreadable.is_empty() {
        let listed: Vec<String> = devices
            .unreadable
            .iter()
            .take(LISTED)
            .map(|s| format!("{} {}", quote(&s.path.display().to_string()), s.why))
            .collect();
        let more = devices.unreadable.len().saturating_sub(LISTED);
        let more = if more > 0 { format!("; {more} more") } else { String::new() };
        hint = format!(" (spec files that could not be read: {}{more})", listed.join("; "));
    }
    CdiError::Unknown { field: field.into(), name, hint }
}

/// Merges one `containerEdits` into `resolved`, for the device `name` asked for in `field`.
fn apply(resolved: &mut Resolved, edits: &ContainerEdits, field: &str, name: &str) -> Result<(), CdiError> {
    let unsupported = |why: &str| CdiError::Unsupported { field: field.into(), name: name.into(), why: why.into() };
    let host = |why: String| CdiError::Host { field: field.into(), name: name.into(), why };
    if edits.intel_rdt.is_some() {
        return Err(unsupported("its intelRdt edits (resctrl classes) are not supported by nidus"));
    }
    if !edits.net_devices.is_empty() {
        return Err(unsupported("its netDevices edits (host interfaces moved in) are not supported by nidus"));
    }
    for entry in &edits.env {
        let key = entry.split_once('=').map_or(entry.as_str(), |(k, _)| k);
        match resolved.env.iter_mut().find(|e| e.split_once('=').is_some_and(|(k, _)| k == key)) {
            Some(existing) => existing.clone_from(entry),
            None => resolved.env.push(entry.clone()),
        }
    }
    for node in &edits.device_nodes {
        let node = settle(node).map_err(|e| match e {
            Settle::Unsupported(why) => unsupported(&why),
            Settle::Host(why) => host(why),
        })?;
        resolved.nodes.retain(|n| n.path != node.path);
        resolved.nodes.push(node);
    }
    for m in &edits.mounts {
        let bind = m.kind == "bind" || m.options.iter().any(|o| o == "bind" || o == "rbind");
        if !bind && m.kind.is_empty() {
            return Err(unsupported(&format!(
                "mount {} is neither a bind mount (options bind or rbind) nor of a type",
                quote(&m.container_path)
            )));
        }
        if super::RUNTIME_MOUNTS.iter().any(|r| Path::new(r) == Path::new(&m.container_path)) {
            return Err(unsupported(&format!(
                "a mount over {} is refused: the runtime mounts it",
                quote(&m.container_path)
            )));
        }
        if bind && !Path::new(&m.host_path).exists() {
            return Err(host(format!("mount source {} does not exist", quote(&m.host_path))));
        }
        let mut mount = MountBuilder::default()
            .destination(&m.container_path)
            .source(&m.host_path)
            .options(m.options.clone())
            .build()
            .map_err(|e| unsupported(&format!("mount {}: {e}", quote(&m.container_path))))?;
        mount.set_typ(if m.kind.is_empty() { Some("bind".into()) } else { Some(m.kind.clone()) });
        resolved.mounts.retain(|other| other.destination() != mount.destination());
        resolved.mounts.push(mount);
    }
    for h in &edits.hooks {
        // Validated at load: only OCI stages get this far.
        let Some(stage) = Stage::parse(&h.hook_name) else { continue };
        let mut hook = Hook::default();
        hook.set_path(h.path.clone().into());
        hook.set_args((!h.args.is_empty()).then(|| h.args.clone()));
        hook.set_env((!h.env.is_empty()).then(|| h.env.clone()));
        hook.set_timeout(h.timeout);
        resolved.hooks.push((stage, hook));
    }
    for gid in &edits.additional_gids {
        if *gid != 0 && !resolved.additional_gids.contains(gid) {
            resolved.additional_gids.push(*gid);
        }
    }
    Ok(())
}

enum Settle {
    Unsupported(String),
    Host(String),
}

/// A node's type, numbers and mode: the spec's, with what it leaves out
/// from the host node (`hostPath`, else `path`).
fn settle(node: &DeviceNode) -> Result<Node, Settle> {
    let host_path = if node.host_path.is_empty() { &node.path } else { &node.host_path };
    // A node whose type (and, but for a FIFO, major number) the spec gives
    // needs no host node; any other must find one.
    let fifo = node.kind == "p";
    let fully_given = !node.kind.is_empty() && (node.major != 0 || fifo);
    let host = std::fs::symlink_metadata(host_path).map_err(|e| e.to_string()).and_then(|meta| {
        let t = meta.file_type();
        let kind = if t.is_char_device() {
            "c"
        } else if t.is_block_device() {
            "b"
        } else if t.is_fifo() {
            "p"
        } else {
            return Err("not a device node".to_string());
        };
        let rdev = meta.rdev();
        let numbers = (nix::sys::stat::major(rdev) as i64, nix::sys::stat::minor(rdev) as i64);
        Ok((kind, numbers, meta.mode() & 0o7777))
    });
    let (mut kind, mut major, mut minor, mut mode) = (node.kind.as_str(), node.major, node.minor, node.file_mode);
    match host {
        Err(why) if !fully_given => {
            return Err(Settle::Host(format!("host device {}: {why}", quote(host_path))));
        }
        Err(_) => {}
        Ok((host_kind, (host_major, host_minor), host_mode)) => {
            mode = mode.or(Some(host_mode));
            if !fully_given {
                let same = kind.is_empty() || kind == host_kind || (kind == "u" && host_kind == "c");
                if !same {
                    return Err(Settle::Host(format!(
                        "device node {} is of type {kind} but its host node {} is of type {host_kind}",
                        quote(&node.path),
                        quote(host_path)
                    )));
                }
                kind = host_kind;
                if major == 0 {
                    (major, minor) = (host_major, host_minor);
                }
            }
        }
    }
    if kind == "p" {
        return Err(Settle::Unsupported(format!(
            "device node {} is a FIFO, which nidus does not make",
            quote(&node.path)
        )));
    }
    let permissions = match node.permissions.as_str() {
        "" => "rwm".to_string(),
        "none" => String::new(),
        given => given.to_string(),
    };
    Ok(Node {
        path: node.path.clone(),
        char_device: kind != "b",
        major,
        minor,
        file_mode: mode.unwrap_or(0o666),
        permissions,
        uid: node.uid,
        gid: node.gid,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cdi::name::QualifiedName;
    use crate::cdi::registry::{LoadedSpec, Skipped};
    use crate::cdi::spec::{parse, Format};
    use std::path::PathBuf;

    fn devices(specs: &[(&str, &str)]) -> Devices {
        let mut devices = Devices::default();
        for (path, text) in specs {
            let spec = crate::cdi::validate::spec(parse(text.as_bytes(), Format::Yaml).unwrap()).unwrap();
            let loaded = Arc::new(LoadedSpec { path: PathBuf::from(path), priority: 0, spec });
            for name in loaded.spec.devices.keys() {
                let qualified = QualifiedName {
                    vendor: loaded.spec.vendor.clone(),
                    class: loaded.spec.class.clone(),
                    name: name.clone(),
                };
                devices.entries.insert(qualified, Entry::Device { spec: loaded.clone(), name: name.clone() });
            }
        }
        devices
    }

    fn ask(names: &[&str]) -> Vec<Requested> {
        names
            .iter()
            .enumerate()
            .map(|(i, n)| Requested {
                field: format!("config.CDI_devices[{i}]"),
                name: QualifiedName::parse(n).unwrap(),
            })
            .collect()
    }

    const GPU: &str = "cdiVersion: 0.7.0
kind: v.com/gpu
containerEdits:
  env: [SHARED=1, MODE=spec]
  additionalGids: [0, 44]
devices:
  - name: '0'
    containerEdits:
      env: [MODE=gpu0]
      additionalGids: [44, 45]
      deviceNodes:
        - {path: /dev/gpu0, hostPath: /dev/null}
        - {path: /dev/gpu-none, type: c, major: 1, minor: 5, permissions: none, uid: 7}
      hooks:
        - {hookName: createContainer, path: /bin/true, args: ['true', x], timeout: 5}
  - name: '1'
    containerEdits:
      env: [MODE=gpu1]
      deviceNodes:
        - {path: /dev/gpu0, type: b, major: 8, minor: 1, fileMode: 0o600}
      mounts:
        - {hostPath: /, containerPath: /opt/v, options: [ro, rbind]}
        - {hostPath: tmpfs, containerPath: /opt/t, type: tmpfs}
";

    #[test]
    fn spec_edits_apply_once_then_each_device_in_order() {
        let devices = devices(&[("/etc/cdi/gpu.yaml", GPU)]);
        let r = resolve(&devices, &ask(&["v.com/gpu=0", "v.com/gpu=1"])).unwrap();
        assert_eq!(r.names, ["v.com/gpu=0", "v.com/gpu=1"]);
        assert_eq!(r.env, ["SHARED=1", "MODE=gpu1"]);
        assert_eq!(r.additional_gids, [44, 45]);
        // /dev/gpu0 of device 1 replaced device 0's; its numbers are given in full.
        assert_eq!(r.nodes.len(), 2);
        let none = &r.nodes[0];
        assert_eq!((none.path.as_str(), none.char_device, none.major, none.minor), ("/dev/gpu-none", true, 1, 5));
        assert_eq!((none.permissions.as_str(), none.uid, none.file_mode), ("", Some(7), 0o666));
        let gpu0 = &r.nodes[1];
        assert_eq!((gpu0.char_device, gpu0.major, gpu0.minor, gpu0.file_mode), (false, 8, 1, 0o600));
        assert_eq!(gpu0.permissions, "rwm");
        assert_eq!(r.mounts.len(), 2);
        assert_eq!(r.mounts[0].typ().as_deref(), Some("bind"));
        assert_eq!(r.mounts[1].typ().as_deref(), Some("tmpfs"));
        assert_eq!(r.hooks.len(), 1);
        assert_eq!(r.hooks[0].0, Stage::CreateContainer);
        assert_eq!(r.hooks[0].1.timeout(), Some(5));

        // A node's missing facts come from its host node.
        let r = resolve(&devices, &ask(&["v.com/gpu=0"])).unwrap();
        let null = r.nodes.iter().find(|n| n.path == "/dev/gpu0").unwrap();
        assert_eq!((null.char_device, null.major, null.minor, null.file_mode), (true, 1, 3, 0o666));
        assert_eq!(r.env, ["SHARED=1", "MODE=gpu0"]);
    }

    #[test]
    fn what_cannot_be_resolved_says_which_device_and_why() {
        let odd = "cdiVersion: 1.1.0
kind: v.com/odd
devices:
  - {name: ok, containerEdits: {env: [A=1]}}
  - {name: block-as-null, containerEdits: {deviceNodes: [{path: /dev/x, hostPath: /dev/null, type: b}]}}
  - {name: gone, containerEdits: {deviceNodes: [{path: /dev/x, hostPath: /dev/nidus-no-such-node}]}}
  - {name: file, containerEdits: {deviceNodes: [{path: /dev/x, hostPath: /dev/fd/0}]}}
  - {name: fifo, containerEdits: {deviceNodes: [{path: /dev/x, type: p}]}}
  - {name: rdt, containerEdits: {intelRdt: {closID: c}}}
  - {name: net, containerEdits: {netDevices: [{hostInterfaceName: eth0, name: e}]}}
  - {name: untyped, containerEdits: {mounts: [{hostPath: /, containerPath: /x}]}}
  - {name: proc, containerEdits: {mounts: [{hostPath: /, containerPath: /proc/, options: [bind]}]}}
  - {name: nosource, containerEdits: {mounts: [{hostPath: /nidus-no-such-dir, containerPath: /x, options: [bind]}]}}
";
        let devices = devices(&[("/etc/cdi/odd.yaml", odd)]);
        for (name, precondition, expect) in [
            ("block-as-null", true, "is of type b but its host node"),
            ("gone", true, "host device \"/dev/nidus-no-such-node\""),
            ("file", true, "not a device node"),
            ("fifo", false, "is a FIFO"),
            ("rdt", false, "intelRdt"),
            ("net", false, "netDevices"),
            ("untyped", false, "neither a bind mount"),
            ("proc", false, "the runtime mounts it"),
            ("nosource", true, "mount source \"/nidus-no-such-dir\" does not exist"),
        ] {
            let err = resolve(&devices, &ask(&[&format!("v.com/odd={name}")])).unwrap_err();
            assert_eq!(err.is_precondition(), precondition, "{name}: {err}");
            let text = err.to_string();
            assert!(text.starts_with(&format!("config.CDI_devices[0]: CDI device \"v.com/odd={name}\": ")), "{text}");
            assert!(text.contains(expect), "{name}: {text}");
        }

        let mut devices = devices;
        devices.unreadable = (0..5)
            .map(|i| Skipped { path: PathBuf::from(format!("/etc/cdi/{i}.json")), why: "is a FIFO".into() })
            .collect();
        let err = resolve(&devices, &ask(&["v.com/odd=ok", "v.com/odd=none"])).unwrap_err().to_string();
        assert!(err.starts_with("config.CDI_devices[1]: unknown CDI device \"v.com/odd=none\""), "{err}");
        assert!(err.contains("\"/etc/cdi/2.json\" is a FIFO; 2 more)") && !err.contains("3.json"), "{err}");
        devices.entries.insert(
            QualifiedName::parse("v.com/odd=two").unwrap(),
            Entry::Ambiguous { priority: 0, paths: vec!["/a.json".into(), "/b.json".into()] },
        );
        let err = resolve(&devices, &ask(&["v.com/odd=two"])).unwrap_err().to_string();
        assert!(
            err.contains("ambiguous CDI device \"v.com/odd=two\": defined by \"/a.json\" and \"/b.json\""),
            "{err}"
        );
        assert!(resolve(&devices, &[]).unwrap().names.is_empty());
    }
}
