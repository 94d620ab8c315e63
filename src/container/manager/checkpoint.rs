//! CheckpointContainer: CRIU dumps a running container's processes (leaving
//! them running), then its CRI config, OCI spec, rootfs changes and log go
//! with the images into a root-only archive at the requested location. A
//! checkpoint a daemon crash interrupted is finished with at the next
//! start: its CRIU seen to its end (or deadline), what CRIU left ended,
//! its staging directory and the archive's temporary file removed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use oci_spec::runtime::{LinuxNamespaceType, Spec};

use crate::checkpoint::archive::{self, ConfigDump, RestoreFacts};
use crate::checkpoint::criu;
use crate::checkpoint::in_progress::{self, InProgress};
use crate::checkpoint::{location, rootfs_diff, CheckpointError, Criu, Location};
use crate::container::record::ContainerPaths;
use crate::store;

use super::{io_err, ContainerError, ContainerState, Containers, Entry};

/// Beside the staging directory: the identity of the CRIU dumping the
/// container, while it runs.
const CRIU_RUNNING: &str = "checkpoint-criu.json";
/// In the container's directory: CRIU's images and the archive's other
/// entries while a checkpoint runs.
const STAGING: &str = "checkpoint-staging";

/// What a checkpoint produced.
#[derive(Debug, Clone)]
pub(crate) struct CheckpointReport {
    pub(crate) location: PathBuf,
    pub(crate) archive_bytes: u64,
    pub(crate) dump_ms: u64,
    pub(crate) total_ms: u64,
}

/// The `--external` key CRIU files a bind mount under: its destination.
pub(crate) fn external_mounts(spec: &Spec) -> BTreeMap<String, String> {
    spec.mounts()
        .as_deref()
        .unwrap_or_default()
        .iter()
        .filter(|m| {
            m.typ().as_deref() == Some("bind")
                || m.options().as_deref().unwrap_or_default().iter().any(|o| o == "bind" || o == "rbind")
        })
        .map(|m| {
            let dest = m.destination().display().to_string();
            (dest.clone(), dest)
        })
        .collect()
}

/// Why a container cannot be checkpointed, if it cannot.
pub(crate) fn unsupported(spec: &Spec) -> Option<String> {
    let process = spec.process().as_ref()?;
    if process.terminal().unwrap_or(false) {
        return Some("containers with a terminal (tty) cannot be checkpointed".into());
    }
    let namespaces = spec.linux().as_ref().and_then(|l| l.namespaces().clone()).unwrap_or_default();
    if namespaces.iter().any(|n| n.typ() == LinuxNamespaceType::User) {
        // CRIU can dump a user namespace, but a restore would have to join the
        // pod's (made by its pause) rather than make one: not done yet.
        return Some("containers in a pod with a user namespace of its own cannot be checkpointed yet".into());
    }
    let own_pid = namespaces.iter().any(|n| n.typ() == LinuxNamespaceType::Pid && n.path().is_none());
    if !own_pid {
        return Some(
            "only containers with their own PID namespace (CRI NamespaceMode CONTAINER) can be checkpointed".into(),
        );
    }
    let pod_network = namespaces.iter().any(|n| n.typ() == LinuxNamespaceType::Network && n.path().is_some());
    if !pod_network {
        return Some("containers in the node's network namespace (hostNetwork) cannot be checkpointed".into());
    }
    None
}

fn link_of(pid: i32, what: &str) -> Result<String, ContainerError> {
    let path = format!("/proc/{pid}/{what}");
    std::fs::read_link(&path)
        .map(|p| p.display().to_string())
        .map_err(io_err(format!("the container's init is gone ({path})")))
}

/// `net:[4026532]` → `4026532`.
fn ns_inode(link: &str) -> Option<&str> {
    link.split_once(":[")?.1.strip_suffix(']')
}

impl Containers {
    /// CheckpointContainer: see the module comment. `timeout` bounds the CRIU dump.
    pub(crate) async fn checkpoint(
        &self,
        id: &str,
        location: &Path,
        timeout: Duration,
    ) -> Result<CheckpointReport, ContainerError> {
        let started = Instant::now();
        let (id, entry) = self.entry(id)?;
        let _op = entry.lock_op().await;
        let view = self.view_of(&entry).ok_or_else(|| ContainerError::NotFound(id.clone()))?;
        let init = match (view.state, view.init.clone()) {
            (ContainerState::Running, Some(init)) => init,
            (state, _) => {
                return Err(ContainerError::Precondition(format!(
                    "container {id} is {}, not running: only a running container can be checkpointed",
                    format!("{state:?}").to_lowercase()
                )))
            }
        };
        let criu_running = view.paths.dir.join(CRIU_RUNNING);
        if let Some(criu) = criu::still_running(&criu_running) {
            return Err(ContainerError::Precondition(format!(
                "container {id}: a checkpoint begun before nidus restarted is still under way \
                 (CRIU pid {}); try again once it has ended",
                criu.pid
            )));
        }
        let spec = store::read_existing_json::<Spec>(&view.paths.spec())
            .map_err(|e| ContainerError::Build(format!("reading the spec: {e}")))?;
        if let Some(why) = unsupported(&spec) {
            return Err(ContainerError::Precondition(format!("container {id}: {why}")));
        }
        let criu = Criu::find(self.config.checkpoint.criu_binary.as_deref(), &self.reaper)
            .await
            .map_err(|e| ContainerError::Precondition(e.to_string()))?;
        let target = location.to_path_buf();
        let location = tokio::task::spawn_blocking(move || Location::open(&target))
            .await
            .map_err(|e| ContainerError::Build(e.to_string()))?
            .map_err(CheckpointError::from)?;

        let staging = view.paths.dir.join(STAGING);
        let _ = store::remove_tree(&staging);
        let images = staging.join(archive::IMAGES_DIR);
        store::create_dir_all(&images, 0o700).map_err(io_err(format!("cannot create {}", images.display())))?;
        // Before CRIU runs and the archive's temporary file can exist: a
        // crash from here on leaves a record the next start cleans up after.
        let criu_deadline = std::time::SystemTime::now() + timeout.saturating_sub(started.elapsed());
        let recorded = InProgress {
            location: location.path.clone(),
            temp: location.temp_path(),
            criu_deadline_ns: crate::clock::epoch_ns(criu_deadline),
        };
        if let Err(e) = in_progress::record(&view.paths.dir, &recorded) {
            let _ = store::remove_tree(&staging);
            return Err(e.into());
        }
        let result = self
            .dump_and_archive(&id, &view, &spec, &criu, init.pid, &staging, &criu_running, &location, started, timeout)
            .await;
        let _ = store::remove_tree(&staging);
        in_progress::clear(&view.paths.dir);
        let report = result?;
        tracing::info!(
            container_id = %id,
            location = %report.location.display(),
            archive_bytes = report.archive_bytes,
            dump_ms = report.dump_ms,
            total_ms = report.total_ms,
            "container checkpointed"
        );
        Ok(report)
    }

    /// At start, for a reloaded container (indexed as `entry`): a
    /// checkpoint the previous daemon's end interrupted is finished with.
    /// Its CRIU, if it still runs, is seen to its end in the background
    /// with its deadline (meanwhile a new checkpoint of the container is
    /// refused); then what CRIU left, the archive's temporary file if the
    /// file system gave it a name (nothing was ever at the location itself)
    /// and the staging directory (CRIU's images: the container's memory)
    /// go.
    pub(super) async fn clean_up_interrupted_checkpoint(&self, id: &str, paths: &ContainerPaths, entry: &Arc<Entry>) {
        let interrupted = match in_progress::read(&paths.dir) {
            Ok(interrupted) => interrupted,
            Err(e) => {
                tracing::warn!(container_id = %id, error = %e, "unreadable record of an interrupted checkpoint");
                None
            }
        };
        let criu_running = paths.dir.join(CRIU_RUNNING);
        if interrupted.is_none() && !criu_running.exists() && !paths.dir.join(STAGING).exists() {
            return;
        }
        // A record of an older nidus may not say: the default deadline from now.
        let default_timeout = Duration::from_secs(self.config.checkpoint.default_timeout_secs);
        let deadline = interrupted
            .as_ref()
            .map_or_else(|| std::time::SystemTime::now() + default_timeout, InProgress::criu_deadline);
        let finish = finish_interrupted(id.to_string(), paths.clone(), entry.clone(), interrupted, deadline);
        match criu::recorded(&criu_running).filter(|criu| criu.is_running()) {
            Some(criu) => {
                tracing::warn!(
                    container_id = %id,
                    criu_pid = criu.pid,
                    "a CRIU dump begun before the restart still runs; it is seen to its end (or deadline)"
                );
                tokio::spawn(finish);
            }
            None => finish.await,
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn dump_and_archive(
        &self,
        id: &str,
        view: &super::ContainerView,
        spec: &Spec,
        criu: &Criu,
        pid: i32,
        staging: &Path,
        criu_running: &Path,
        location: &Location,
        started: Instant,
        timeout: Duration,
    ) -> Result<CheckpointReport, ContainerError> {
        let stdout_pipe = link_of(pid, "fd/1")?;
        let stderr_pipe = link_of(pid, "fd/2")?;
        let net = link_of(pid, "ns/net")?;
        let external_mounts = external_mounts(spec);
        let mut args: Vec<String> = vec![
            "dump".into(),
            "--tree".into(),
            pid.to_string(),
            "--images-dir".into(),
            staging.join(archive::IMAGES_DIR).display().to_string(),
            "--work-dir".into(),
            staging.display().to_string(),
            "--log-file".into(),
            archive::DUMP_LOG.into(),
            "-v4".into(),
            "--leave-running".into(),
            "--file-locks".into(),
            "--manage-cgroups=ignore".into(),
            // No TCP connections are dumped: no iptables/nftables lock needed.
            "--network-lock".into(),
            "skip".into(),
        ];
        if let Some(inode) = ns_inode(&net) {
            args.extend(["--external".into(), format!("net[{inode}]:{}", crate::checkpoint::criu::NET_KEY)]);
        }
        for (dest, key) in &external_mounts {
            args.extend(["--external".into(), format!("mnt[{dest}]:{key}")]);
        }
        // CRIU dumps the namespaces of the tree that differ from its own, and
        // a restore would recreate them; the pod's UTS and IPC namespaces are
        // not the container's to carry along, so CRIU runs in them (and the
        // restore in the new pod's).
        let enter = vec![format!("--uts=/proc/{pid}/ns/uts"), format!("--ipc=/proc/{pid}/ns/ipc")];
        let remaining = timeout.saturating_sub(started.elapsed());
        let dump_started = Instant::now();
        criu.run("dump", &enter, &args, &staging.join(archive::DUMP_LOG), criu_running, remaining, &self.reaper)
            .await
            .map_err(|e| {
                // Keep CRIU's log where the message names it.
                let kept = view.paths.dir.join("dump.log");
                let _ = std::fs::copy(staging.join(archive::DUMP_LOG), &kept);
                CheckpointError::Criu(match e {
                    crate::checkpoint::CriuError::Failed { action, status, tail, .. } => {
                        crate::checkpoint::CriuError::Failed { action, status, log: kept, tail }
                    }
                    other => other,
                })
            })?;
        let dump_ms = dump_started.elapsed().as_millis() as u64;

        let (upper, diff_path) = (view.paths.upper(), staging.join(archive::ROOTFS_DIFF));
        let deleted = tokio::task::spawn_blocking(move || rootfs_diff::write(&upper, &diff_path))
            .await
            .map_err(|e| ContainerError::Build(e.to_string()))?
            .map_err(io_err("writing the rootfs changes"))?;
        let deleted_json = serde_json::to_vec(&deleted).map_err(|e| ContainerError::Build(e.to_string()))?;
        std::fs::write(staging.join(archive::DELETED_FILES), deleted_json).map_err(io_err("writing deleted.files"))?;
        std::fs::copy(view.paths.spec(), staging.join(archive::SPEC_DUMP)).map_err(io_err("copying the spec"))?;
        if let Some(log) = &view.record.log_path {
            let _ = std::fs::copy(log, staging.join(archive::CONTAINER_LOG));
        }
        let record = &view.record;
        let dump = ConfigDump {
            id: id.to_string(),
            name: record.config.metadata.as_ref().map(|m| m.name.clone()).unwrap_or_default(),
            rootfs_image: record.image.requested.clone(),
            rootfs_image_ref: record.image.id.clone(),
            rootfs_image_name: record.image.name.clone(),
            oci_runtime: "nidus".into(),
            created_time: archive::rfc3339(record.created_at_ns / 1_000_000_000),
            checkpointed_at: archive::rfc3339(crate::clock::now_ns() / 1_000_000_000),
            nidus: RestoreFacts {
                config: record.config.clone(),
                stdout_pipe,
                stderr_pipe,
                external_mounts,
                criu_version: criu.version.to_string(),
                dump_ms,
                images_bytes: archive::size_of(&staging.join(archive::IMAGES_DIR)),
            },
        };
        let dump_json = serde_json::to_vec_pretty(&dump).map_err(|e| ContainerError::Build(e.to_string()))?;
        std::fs::write(staging.join(archive::CONFIG_DUMP), dump_json).map_err(io_err("writing config.dump"))?;

        let pending = location.create_pending().map_err(CheckpointError::from)?;
        let (staging_owned, file) = (staging.to_path_buf(), pending.file.try_clone().map_err(io_err("dup"))?);
        let written = tokio::task::spawn_blocking(move || {
            let mut file = file;
            archive::write(&staging_owned, &mut file)
        })
        .await
        .map_err(|e| ContainerError::Build(e.to_string()))?;
        if let Err(e) = written {
            location.discard(pending);
            return Err(io_err("writing the checkpoint archive")(e));
        }
        let archive_bytes = pending.file.metadata().map(|m| m.len()).unwrap_or(0);
        location.commit(pending).map_err(CheckpointError::from)?;
        Ok(CheckpointReport {
            location: location.path.clone(),
            archive_bytes,
            dump_ms,
            total_ms: started.elapsed().as_millis() as u64,
        })
    }
}

/// See `clean_up_interrupted_checkpoint`.
async fn finish_interrupted(
    id: String,
    paths: ContainerPaths,
    entry: Arc<Entry>,
    interrupted: Option<InProgress>,
    deadline: std::time::SystemTime,
) {
    if let Some(orphan) = criu::supervise_orphan(&paths.dir.join(CRIU_RUNNING), deadline).await {
        tracing::warn!(
            container_id = %id,
            criu_pid = orphan.criu.pid,
            end = ?orphan.end,
            processes_it_left = orphan.left,
            "a CRIU dump begun before the restart has ended"
        );
        if orphan.lingering > 0 {
            tracing::error!(
                container_id = %id,
                lingering = orphan.lingering,
                "processes of a CRIU dump begun before the restart do not end"
            );
        }
    }
    if let Some(interrupted) = &interrupted {
        match location::remove_abandoned(&interrupted.temp) {
            Ok(removed) => tracing::info!(
                container_id = %id,
                location = %interrupted.location.display(),
                temporary_archive_removed = removed,
                "a checkpoint interrupted by the restart is abandoned"
            ),
            Err(e) => tracing::warn!(
                container_id = %id,
                error = %e,
                "cannot remove the temporary archive of a checkpoint interrupted by the restart"
            ),
        }
    }
    // Under the lifecycle lock no checkpoint runs: whatever staging
    // directory and record there are, the interrupted one left.
    let _op = entry.lock_op().await;
    if let Err(e) = store::remove_tree(&paths.dir.join(STAGING)) {
        tracing::warn!(container_id = %id, error = %e, "cannot remove an interrupted checkpoint's staging directory");
    }
    in_progress::clear(&paths.dir);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(terminal: bool, pid_path: Option<&str>, net_path: Option<&str>) -> Spec {
        let mut namespaces = vec![serde_json::json!({"type": "mount"})];
        namespaces.push(match pid_path {
            Some(p) => serde_json::json!({"type": "pid", "path": p}),
            None => serde_json::json!({"type": "pid"}),
        });
        namespaces.push(match net_path {
            Some(p) => serde_json::json!({"type": "network", "path": p}),
            None => serde_json::json!({"type": "network"}),
        });
        serde_json::from_value(serde_json::json!({
            "ociVersion": "1.0.2",
            "process": {"terminal": terminal, "user": {"uid": 0, "gid": 0}, "cwd": "/", "args": ["sh"]},
            "root": {"path": "/rootfs"},
            "mounts": [
                {"destination": "/proc", "type": "proc", "source": "proc"},
                {"destination": "/etc/hosts", "type": "bind", "source": "/pod/hosts", "options": ["rbind"]},
                {"destination": "/data", "source": "/host/data", "options": ["rbind", "rprivate"]},
            ],
            "linux": {"namespaces": namespaces},
        }))
        .unwrap()
    }

    #[test]
    fn only_own_pid_namespace_pod_network_and_no_tty_can_be_checkpointed() {
        assert_eq!(unsupported(&spec(false, None, Some("/proc/1/ns/net"))), None);
        assert!(unsupported(&spec(true, None, Some("/proc/1/ns/net"))).unwrap().contains("tty"));
        assert!(unsupported(&spec(false, Some("/proc/1/ns/pid"), Some("/proc/1/ns/net"))).unwrap().contains("PID"));
        assert!(unsupported(&spec(false, None, None)).unwrap().contains("hostNetwork"));
    }

    #[test]
    fn bind_mounts_are_external_by_destination() {
        let external = external_mounts(&spec(false, None, None));
        assert_eq!(external.keys().collect::<Vec<_>>(), vec!["/data", "/etc/hosts"]);
    }

    #[test]
    fn namespace_links_give_their_inode() {
        assert_eq!(ns_inode("net:[4026532281]"), Some("4026532281"));
        assert_eq!(ns_inode("garbage"), None);
    }
}
