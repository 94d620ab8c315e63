//! Resolved CDI edits into a container: its device nodes beside the
//! config's (for the device cgroup and the spec's `linux.devices`, which the
//! init makes), its additional groups into the user, and, into the built OCI
//! spec, its environment (replacing a variable of the same name), its mounts
//! (replacing one of the same destination, parents before children, after
//! the runtime's own), its nodes' owners and its hooks (before any of the
//! `hooks.d` definitions, which are added later at the same place).

use std::path::Path;

use oci_spec::runtime::Spec;

use super::spec::HostDevice;
use crate::cdi::{Resolved, RUNTIME_MOUNTS};
use crate::quote::quote;

/// Adds the CDI nodes to a container's devices (a CDI node replaces a
/// device of the same container path).
pub(crate) fn merge_devices(devices: &mut Vec<HostDevice>, resolved: &Resolved) {
    for node in &resolved.nodes {
        devices.retain(|d| d.container_path != node.path);
        devices.push(HostDevice {
            container_path: node.path.clone(),
            char_device: node.char_device,
            major: node.major,
            minor: node.minor,
            file_mode: node.file_mode,
            permissions: node.permissions.clone(),
        });
    }
}

/// Adds the CDI groups to a process's additional groups.
pub(crate) fn add_groups(gids: &mut Vec<u32>, resolved: &Resolved) {
    for gid in &resolved.additional_gids {
        if !gids.contains(gid) {
            gids.push(*gid);
        }
    }
}

/// Applies the edits the spec builder does not: environment, mounts, device
/// node owners and hooks.
pub(crate) fn to_spec(spec: &mut Spec, resolved: &Resolved) -> Result<(), String> {
    let mut process = spec.process().clone().unwrap_or_default();
    let mut env = process.env().clone().unwrap_or_default();
    for entry in &resolved.env {
        let key = entry.split_once('=').map_or(entry.as_str(), |(k, _)| k);
        match env.iter_mut().find(|e| e.split_once('=').is_some_and(|(k, _)| k == key)) {
            Some(existing) => existing.clone_from(entry),
            None => env.push(entry.clone()),
        }
    }
    process.set_env(Some(env));
    // A node without an owner of its own belongs to the process's user and
    // group (unless root), as the reference implementation has it.
    let (uid, gid) = (process.user().uid(), process.user().gid());
    spec.set_process(Some(process));

    if let Some(mut linux) = spec.linux().clone() {
        let mut devices = linux.devices().clone().unwrap_or_default();
        for node in &resolved.nodes {
            if let Some(device) = devices.iter_mut().find(|d| d.path() == Path::new(&node.path)) {
                device.set_uid(node.uid.or((uid > 0).then_some(uid)).or(Some(0)));
                device.set_gid(node.gid.or((gid > 0).then_some(gid)).or(Some(0)));
            }
        }
        linux.set_devices(Some(devices));
        spec.set_linux(Some(linux));
    }

    let mut mounts = spec.mounts().clone().unwrap_or_default();
    // The mounts after the runtime's own: the pod's files and the config's.
    let tail = mounts.iter().position(|m| m.destination() == Path::new("/dev/shm")).map_or(0, |i| i + 1);
    for mount in &resolved.mounts {
        let destination = mount.destination();
        if RUNTIME_MOUNTS.iter().any(|r| Path::new(r) == destination) {
            return Err(format!(
                "a CDI mount over {} is refused: the runtime mounts it",
                quote(&destination.display().to_string())
            ));
        }
        if let Some(i) = mounts.iter().position(|m| m.destination() == destination) {
            mounts.remove(i);
        }
        // Before the first mount below it (its parents are before that one
        // already), else last.
        let below = mounts[tail..].iter().position(|m| m.destination().starts_with(destination));
        mounts.insert(below.map_or(mounts.len(), |i| tail + i), mount.clone());
    }
    spec.set_mounts(Some(mounts));

    if !resolved.hooks.is_empty() {
        let mut hooks = oci_spec::runtime::Hooks::default();
        for stage in crate::hooks::STAGES {
            let list = resolved.hooks.iter().filter(|(s, _)| *s == stage).map(|(_, h)| h.clone()).collect();
            crate::hooks::set_stage(&mut hooks, stage, list);
        }
        spec.set_hooks(crate::hooks::merged(spec.hooks().clone(), Some(hooks)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cdi::resolve::Node;
    use crate::hooks::Stage;
    use oci_spec::runtime::{
        Hook, LinuxBuilder, LinuxDeviceBuilder, LinuxDeviceType, Mount, ProcessBuilder, UserBuilder,
    };

    fn mount(destination: &str) -> Mount {
        let mut m = Mount::default();
        m.set_destination(destination.into());
        m.set_source(Some(format!("/src{destination}").into()));
        m
    }

    fn node(path: &str, permissions: &str, uid: Option<u32>) -> Node {
        Node {
            path: path.into(),
            char_device: true,
            major: 10,
            minor: 200,
            file_mode: 0o600,
            permissions: permissions.into(),
            uid,
            gid: None,
        }
    }

    fn hook(path: &str) -> Hook {
        let mut h = Hook::default();
        h.set_path(path.into());
        h
    }

    #[test]
    fn nodes_join_the_devices_and_groups_the_user() {
        let resolved = Resolved {
            nodes: vec![node("/dev/a", "rw", None), node("/dev/b", "", None)],
            additional_gids: vec![44, 45],
            ..Default::default()
        };
        let old = HostDevice {
            container_path: "/dev/a".into(),
            char_device: false,
            major: 8,
            minor: 0,
            file_mode: 0o660,
            permissions: "r".into(),
        };
        let mut devices = vec![old.clone(), HostDevice { container_path: "/dev/c".into(), ..old }];
        merge_devices(&mut devices, &resolved);
        let got: Vec<(&str, bool, i64, &str)> = devices
            .iter()
            .map(|d| (d.container_path.as_str(), d.char_device, d.major, d.permissions.as_str()))
            .collect();
        assert_eq!(got, [("/dev/c", false, 8, "r"), ("/dev/a", true, 10, "rw"), ("/dev/b", true, 10, "")]);
        let mut gids = vec![45, 7];
        add_groups(&mut gids, &resolved);
        assert_eq!(gids, [45, 7, 44]);
    }

    #[test]
    fn environment_mounts_owners_and_hooks_go_into_the_spec() {
        let process = ProcessBuilder::default()
            .env(vec!["PATH=/bin".to_string(), "MODE=image".into()])
            .user(UserBuilder::default().uid(1000u32).gid(0u32).build().unwrap())
            .build()
            .unwrap();
        let device = |path: &str| {
            LinuxDeviceBuilder::default()
                .path(path)
                .typ(LinuxDeviceType::C)
                .major(10)
                .minor(200)
                .uid(0u32)
                .gid(0u32)
                .build()
                .unwrap()
        };
        let linux = LinuxBuilder::default()
            .devices(vec![device("/dev/a"), device("/dev/b"), device("/dev/cri")])
            .build()
            .unwrap();
        let mut spec = Spec::default();
        spec.set_process(Some(process));
        spec.set_linux(Some(linux));
        let runtime = ["/proc", "/dev", "/dev/pts", "/dev/mqueue", "/sys", "/sys/fs/cgroup", "/dev/shm"];
        let mut mounts: Vec<Mount> = runtime.iter().map(|d| mount(d)).collect();
        mounts.extend(["/etc/hostname", "/etc/hosts", "/data", "/data/sub"].iter().map(|d| mount(d)));
        spec.set_mounts(Some(mounts));
        let mut existing = oci_spec::runtime::Hooks::default();
        existing.set_create_container(Some(vec![hook("/earlier")]));
        spec.set_hooks(Some(existing));

        let mut replacing = mount("/data");
        // A parent of mounts there already goes before them.
        replacing.set_source(Some("/cdi/data".into()));
        let resolved = Resolved {
            env: vec!["MODE=cdi".into(), "EXTRA=1".into()],
            nodes: vec![node("/dev/a", "rw", None), node("/dev/b", "rw", Some(5))],
            mounts: vec![
                mount("/opt"),
                mount("/etc/hosts/deeper/still"),
                replacing,
                mount("/usr/lib/x"),
                mount("/etc"),
            ],
            hooks: vec![(Stage::Poststop, hook("/stop")), (Stage::CreateContainer, hook("/cdi"))],
            ..Default::default()
        };
        to_spec(&mut spec, &resolved).unwrap();

        let process = spec.process().as_ref().unwrap();
        assert_eq!(process.env().as_ref().unwrap(), &["PATH=/bin", "MODE=cdi", "EXTRA=1"]);
        let owners: Vec<(String, Option<u32>, Option<u32>)> = spec
            .linux()
            .as_ref()
            .unwrap()
            .devices()
            .as_ref()
            .unwrap()
            .iter()
            .map(|d| (d.path().display().to_string(), d.uid(), d.gid()))
            .collect();
        assert_eq!(
            owners,
            [
                ("/dev/a".to_string(), Some(1000), Some(0)),
                ("/dev/b".into(), Some(5), Some(0)),
                ("/dev/cri".into(), Some(0), Some(0))
            ]
        );
        let order: Vec<String> =
            spec.mounts().as_ref().unwrap().iter().map(|m| m.destination().display().to_string()).collect();
        assert_eq!(
            &order[7..],
            [
                "/etc",
                "/etc/hostname",
                "/etc/hosts",
                "/data",
                "/data/sub",
                "/opt",
                "/etc/hosts/deeper/still",
                "/usr/lib/x"
            ]
        );
        assert_eq!(&order[..7], runtime);
        let data = spec.mounts().as_ref().unwrap().iter().find(|m| m.destination() == Path::new("/data")).unwrap();
        assert_eq!(data.source().as_deref(), Some(Path::new("/cdi/data")));
        let hooks = spec.hooks().as_ref().unwrap();
        let paths = |list: &Option<Vec<Hook>>| {
            list.as_ref().unwrap().iter().map(|h| h.path().display().to_string()).collect::<Vec<_>>()
        };
        assert_eq!(paths(hooks.create_container()), ["/earlier", "/cdi"]);
        assert_eq!(paths(hooks.poststop()), ["/stop"]);
        assert!(hooks.prestart().is_none());

        let mut over = Resolved::default();
        over.mounts.push(mount("/dev/shm"));
        assert!(to_spec(&mut spec, &over).unwrap_err().contains("the runtime mounts it"));
    }
}
