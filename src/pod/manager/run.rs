//! RunPodSandbox: the pause process and its namespaces, the pod's files and
//! cgroup, the pod network; each step registers its undo where it is made
//! (`crate::undo`), and a failure runs them, newest first.

use std::convert::Infallible;

use crate::undo::Undo;

use super::*;

impl Sandboxes {
    pub(crate) async fn run(&self, spec: SandboxSpec) -> Result<String, SandboxError> {
        let id = ids::new_id();
        let name_key = spec.name_key.clone();
        // Held until the sandbox is made; a failed run drops it, which frees
        // the name once everything made under it is undone.
        let reservation = self
            .index
            .reserve(&name_key, &id)
            .map_err(|taken| SandboxError::NameInUse { name: name_key, id: taken.id })?;
        let undo = Undo::new("RunPodSandbox").pod(&id);
        match self.create(&id, spec, &undo).await {
            Ok(live) => {
                undo.commit();
                let entry = reservation.commit(live);
                // The sandbox is made and its pause runs: both at once.
                self.emit(EventKind::Created, &entry);
                self.emit(EventKind::Started, &entry);
                Ok(id)
            }
            Err(e) => {
                tracing::warn!(pod_id = %id, error = %e, "RunPodSandbox failed; undoing");
                undo.rollback().await;
                drop(reservation);
                Err(e)
            }
        }
    }

    pub(super) async fn create<'s>(
        &'s self,
        id: &str,
        spec: SandboxSpec,
        undo: &Undo<'s>,
    ) -> Result<Live, SandboxError> {
        let pod_cgroup = self
            .cgroups
            .pod_cgroup(spec.cgroup_parent.as_ref(), id, &self.config.sandbox.default_cgroup_parent)
            .map_err(|e| match e {
                CgroupError::BadSlice(e) => SandboxError::Invalid(format!("config.linux.cgroup_parent: {e}")),
                other => SandboxError::Cgroup(other),
            })?;
        let mut record = SandboxRecord {
            id: id.to_string(),
            name_key: spec.name_key.clone(),
            config: spec.config.clone(),
            runtime_handler: spec.runtime_handler.clone(),
            created_at_ns: now_ns(),
            lifecycle: Lifecycle::Creating,
            namespaces: spec.namespaces,
            userns: spec.userns,
            hostname: spec.hostname.clone(),
            pause_cgroup: self.cgroups.leaf(&pod_cgroup, id)?,
            pod_cgroup,
            own_shm: spec.namespaces.ipc,
            resources: None,
        };
        let paths = self.paths(id);
        let pause = self.make(&spec, &mut record, &paths, undo).await?;
        tracing::info!(pod_id = %id, name = %spec.name_key, pause_pid = pause.identity.pid, "sandbox ready");
        // The first container's cgroup, made while the caller goes on
        // (cgroupfs: systemd's scopes start around a process).
        if let (None, Ok(path)) = (&self.cgroups.systemd, ahead::path(&record.pod_cgroup, id)) {
            self.ahead.start(path);
        }
        Ok(Live::new(record, Some(pause)))
    }

    pub(super) async fn make<'s>(
        &'s self,
        spec: &SandboxSpec,
        record: &mut SandboxRecord,
        paths: &SandboxPaths,
        undo: &Undo<'s>,
    ) -> Result<PauseProcess, SandboxError> {
        let args = PauseArgs {
            hostname: spec.namespaces.uts.then(|| spec.hostname.clone()),
            sysctls: spec.sysctls.iter().map(|s| format!("{}={}", s.proc_path, s.value)).collect(),
            new_net: spec.namespaces.net,
            new_ipc: spec.namespaces.ipc,
            new_uts: spec.namespaces.uts,
            new_pid: spec.namespaces.pid,
            cgroup_procs: self.cgroups.procs_files(&record.pause_cgroup),
            uid_map: spec.userns.map(|m| m.uids),
            gid_map: spec.userns.map(|m| m.gids),
        };
        // Its start overlaps the preparation below; it waits for `go`.
        // Dropped without `go` (a failure before it), its input closes and
        // it ends: it has made nothing yet.
        let launcher = start_launcher(&self.pause_binary, &args)?;
        store::create_dir_new(&paths.dir, 0o700).map_err(io_err(format!("cannot create {}", paths.dir.display())))?;
        let dir = paths.dir.clone();
        undo.push("pod directory", move || store::remove_tree(&dir));
        store::create_dir_new(&paths.run_dir, 0o700)
            .map_err(io_err(format!("cannot create {}", paths.run_dir.display())))?;
        let run_dir = paths.run_dir.clone();
        undo.push("pod run directory", move || store::remove_tree(&run_dir));
        // Not fsynced: lost in a power cut, the directory has no record and is
        // removed at the next start, which is just as right. The final record is durable.
        store::write_json_with(&paths.record(), record, store::Durability::Volatile)?;
        let record_path = paths.record();
        undo.push("pod record", move || remove_file_if_present(&record_path));

        let node_resolv = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
        let hosts = if spec.namespaces.net {
            files::pod_hosts()
        } else {
            std::fs::read_to_string("/etc/hosts").unwrap_or_else(|_| files::pod_hosts())
        };
        // A pod with a user namespace: its root owns the files it is given.
        // They go with the pod's directory.
        let owner = spec.userns.map(|m| m.root());
        for (path, content) in [
            (paths.hostname(), format!("{}\n", spec.hostname)),
            (paths.hosts(), hosts),
            (paths.resolv_conf(), files::resolv_conf(&spec.dns, &node_resolv)),
        ] {
            store::write_atomic_with(&path, content.as_bytes(), 0o644, store::Durability::Volatile)?;
            if let Some((uid, gid)) = owner {
                std::os::unix::fs::chown(&path, Some(uid), Some(gid))
                    .map_err(io_err(format!("cannot give {} to the pod's root", path.display())))?;
            }
        }

        if record.own_shm {
            let shm = paths.shm();
            store::create_dir_new(&shm, 0o755).map_err(io_err(format!("cannot create {}", shm.display())))?;
            let size_k = self.config.sandbox.shm_size_bytes.div_ceil(1024);
            let owned = owner.map(|(uid, gid)| format!(",uid={uid},gid={gid}")).unwrap_or_default();
            mount::mount_tmpfs(&shm, &format!("mode=1777,size={size_k}k{owned}"))
                .map_err(io_err(format!("cannot mount the pod's /dev/shm at {}", shm.display())))?;
            let mounted = paths.clone();
            undo.push("pod /dev/shm mount", move || release_mounts(&mounted));
        }

        // Registered first: parents made before a failure go too.
        let made = record.clone();
        undo.push_async("pod cgroups", move || async move {
            self.remove_cgroups(&made).await?;
            self.owned_cgroups.prune_above(&made.pause_cgroup);
            self.owned_cgroups.prune_above(&made.pod_cgroup);
            Ok::<_, SandboxError>(())
        });
        match &self.cgroups.systemd {
            // The scope starts around the launcher, which then has the
            // pause's cgroup (and the pod's slice) to join at `go`.
            Some(scopes) => {
                let description = format!("nidus pod {}", record.id);
                let resources = oci_spec::runtime::LinuxResources::default();
                scopes.start(&record.pause_cgroup, launcher.pid(), description, &resources).await?;
            }
            None => self.owned_cgroups.create(&record.pause_cgroup, spec.cgroup_parent.as_ref())?,
        }
        let own_slice = record.owns_pod_cgroup();
        self.apply_pod_resources(&record.pod_cgroup, own_slice, &record.pod_resources(), "config.linux.resources")
            .await?;

        // The durable record is written and fsynced while the pause starts,
        // and put in place once it has: a crash before that leaves the
        // CREATING record, which the next start undoes. Its undo is the
        // first record's: the same file.
        let mut created = record.clone();
        created.lifecycle = Lifecycle::Created;
        let record_path = paths.record();
        let write = tokio::task::spawn_blocking(move || {
            store::PreparedWrite::json(&record_path, &created, store::Durability::Durable)
        });
        let timeout = Duration::from_secs(self.config.sandbox.pause_start_timeout_secs);
        let (launched, written) = tokio::join!(launch_pause(launcher, &self.reaper, timeout), write);
        let identity = launched?;
        let pause = identity.clone();
        undo.push_async("pause", move || async move {
            if let Some(pidfd) = pause.open_pidfd() {
                let _ = pidfd.send_signal(libc::SIGKILL);
                let _ = tokio::time::timeout(PAUSE_EXIT_TIMEOUT, pidfd.exited()).await;
            }
            Ok::<_, Infallible>(())
        });
        let pidfd = identity
            .open_pidfd()
            .ok_or_else(|| SandboxError::Launch(LaunchError::SetUp("the pause process died at start".into())))?;
        // In the run dir: it goes with it.
        store::write_json_with(&paths.pause(), &identity, store::Durability::Volatile)?;
        if record.namespaces.net {
            // Its steps register their undos here, after the pause's: they
            // run while the pause still holds the namespace.
            self.network.attach(&pod_network_info(record, identity.pid), undo).await?;
        }

        let written = written
            .map_err(|e| SandboxError::Io { what: "writing the sandbox record".into(), source: io::Error::other(e) })?;
        written.and_then(store::PreparedWrite::commit)?;
        record.lifecycle = Lifecycle::Created;
        Ok(PauseProcess { identity, pidfd })
    }

    /// Limits the pod cgroup to the pod's resources plus its overhead;
    /// `field` names them in errors. With systemd, a slice of nidus's own
    /// (`owned`) gets them as its unit properties too, so a `daemon-reload`
    /// keeps them; a client's slice is the client's to set.
    pub(super) async fn apply_pod_resources(
        &self,
        pod_cgroup: &CgroupPath,
        owned: bool,
        pod: &PodResources,
        field: &str,
    ) -> Result<(), SandboxError> {
        let total = crate::resources::pod_total(&pod.resources, &pod.overhead);
        let oci = crate::resources::to_oci(&total, 0);
        self.cgroups.check_resources(&oci).map_err(|e| SandboxError::Invalid(format!("{field}.{e}")))?;
        if let Some(scopes) = self.cgroups.systemd.as_ref().filter(|_| owned) {
            scopes.update(pod_cgroup, &oci).await?;
        }
        self.cgroups.apply(pod_cgroup, &oci).map_err(|e| match e {
            CgroupError::Unenforceable(e) => SandboxError::Invalid(format!("{field}.{e}")),
            other => SandboxError::Cgroup(other),
        })
    }
}
