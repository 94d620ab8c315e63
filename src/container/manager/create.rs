//! CreateContainer: the leased layers and the cgroup (started first, on the
//! blocking pool), the records and directories, the spec (from the config,
//! the image and the pod) and the seccomp program, made at once; then the
//! monitor builds the container and leaves its init blocked. Each step that
//! makes something registers its undo right there (`crate::undo`): a failed
//! create runs them, newest first, and so undoes everything it made.

use crate::container::spec::ImageVolume;
use crate::container::ImageSourceError;
use std::convert::Infallible;
use std::io::Write;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::api;
use crate::capabilities;
use crate::cgroups::{ahead, CgroupPath, CgroupVersion, Cgroups};
use crate::clock::now_ns;
use crate::container::confinement::SeccompProgram;
use crate::container::monitor_pool::PendingMonitor;
use crate::container::record::{ContainerPaths, ContainerRecord, ImageUsed, Lifecycle};
use crate::container::security::{self, HostModules, SeccompReport, SecurityReport};
use crate::container::signal;
use crate::container::spare_dirs::{self, ImageEtc};
use crate::container::spec::{self, HostDevice, PidNamespace, PodFacts, SpecInput};
use crate::container::user::{self, UserRequest};
use crate::events::EventKind;
use crate::helper::ReplyError;
use crate::ids;
use crate::linux::mount::is_overlay_opaque;
use crate::linux::process::{boot_id, ProcessIdentity};
use crate::monitor::plan::{CgroupJoin, CgroupMount, MonitorAssignment, MonitorPlan, RootfsPlan, RunFiles};
use crate::pod::{SandboxState, SandboxView};
use crate::registry::Reservation;
use crate::store;
use crate::undo::Undo;
use crate::wire::{BuildStep, CreateTimings, Created, Message};

use super::{
    apply_error, io_err, name_slot, resources_invalid, restore, ContainerCreate, ContainerError, ContainerState,
    Containers, InitProcess, Live, PidMode, CREATE_TIMEOUT,
};

/// A container whose monitor waits for `go`: everything is on disk but
/// the init and the durable record.
struct Prepared {
    monitor: PendingMonitor,
    files: RunFiles,
}

/// The layers a container leased, with the image's /etc/passwd and /etc/group.
type LeasedLayers = (Vec<PathBuf>, Option<String>, Option<String>);

/// A built container: its durable record, its init, how the init joined its cgroup.
type Built = (ContainerRecord, InitProcess, Option<CgroupJoin>);

/// What CreateContainer hands to the blocking pool as soon as the
/// container's directory is there: the layers leased (before the first
/// record, too, with the mount points fitted) and the container cgroup with its device
/// rules (for `devices`; once the record names it). The cgroup's task then
/// waits for the plan (`go_ahead`), applies the resources and says `go` to
/// the monitor itself: the last of the two to finish says it, with no trip
/// back to the async threads in between; a plan never sent ends it without
/// `go`. The undo of each task waits for its end (`Ended`), so nothing of
/// it outlives a failed create's undo.
struct EarlyWork {
    cgroup: JoinHandle<Result<(), ContainerError>>,
    go_ahead: mpsc::SyncSender<GoAhead>,
    layers: JoinHandle<Result<LeasedLayers, ContainerError>>,
    devices: Vec<HostDevice>,
    /// The CDI devices' edits (their nodes are in `devices` already).
    cdi: Option<crate::cdi::Resolved>,
}

/// Sent to the cgroup's task once plan.json is written: the resources to
/// apply, a copy of the monitor's input to say `go` on, and the monitor's
/// pid (the systemd driver starts the container's scope around it).
struct GoAhead {
    resources: oci_spec::runtime::LinuxResources,
    go: OwnedFd,
    monitor_pid: i32,
}

/// A blocking task's result, its panic as a build error.
async fn joined<T>(task: JoinHandle<Result<T, ContainerError>>) -> Result<T, ContainerError> {
    task.await.map_err(|e| ContainerError::Build(e.to_string()))?
}

/// The end of a task on the blocking pool, whoever awaits its result: what
/// an undo waits for before it takes away what the task made.
struct Ended(oneshot::Receiver<()>);

impl Ended {
    async fn wait(self) {
        // The sender goes with the task's closure: returned, panicked or never run.
        let _ = self.0.await;
    }
}

/// `work` on the blocking pool: its result, and its end for an undo.
fn spawn_watched<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> (JoinHandle<T>, Ended) {
    let (ending, ended) = oneshot::channel::<()>();
    let task = tokio::task::spawn_blocking(move || {
        let _ending = ending;
        work()
    });
    (task, Ended(ended))
}

/// The undo of a lease: `holder`'s leases released, on the blocking pool.
pub(super) async fn release_lease(
    images: Arc<dyn crate::container::ImageSource>,
    holder: String,
) -> Result<(), String> {
    match tokio::task::spawn_blocking(move || images.release(&holder)).await {
        Ok(released) => released.map_err(|e| e.to_string()),
        Err(e) => Err(e.to_string()),
    }
}

/// Removes a file; one already gone is no error.
fn remove_if_present(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// A failed CreateContainer: logged, and every step made so far undone.
async fn undone(id: &str, error: ContainerError, undo: Undo<'_>) -> ContainerError {
    tracing::warn!(container_id = %id, error = %error, "CreateContainer failed; undoing");
    undo.rollback().await;
    error
}

impl Containers {
    /// CreateContainer in a ready sandbox: returns the new container's id
    /// once its init is built and blocked, waiting for StartContainer. A
    /// failure undoes every step made so far, newest first (`Undo`).
    pub(crate) async fn create(&self, request: ContainerCreate) -> Result<String, ContainerError> {
        if request.sandbox.state != SandboxState::Ready || request.sandbox.pause.is_none() {
            return Err(ContainerError::Precondition(format!("sandbox {} is not ready", request.sandbox.record.id)));
        }
        let id = ids::new_id();
        let undo = Undo::new("CreateContainer").pod(&request.sandbox.record.id).container(&id);
        let (request, restore, reservation) = match self.admit(&id, request, &undo).await {
            Ok(admitted) => admitted,
            Err(e) => return Err(undone(&id, e, undo).await),
        };
        match self.build(&id, &request, restore.as_ref(), &undo).await {
            Ok((record, init, cgroup_join)) => {
                undo.commit();
                let entry = reservation.commit(Live::new(record, Some(init), cgroup_join));
                self.emit(EventKind::Created, &entry);
                self.watch(id.clone(), entry);
                Ok(id)
            }
            Err(e) => {
                let e = undone(&id, e, undo).await;
                // The name is freed only once everything made under it is undone.
                drop(reservation);
                Err(e)
            }
        }
    }

    /// The request as a restore turns it (a checkpoint's image leased), and
    /// the container's name slot (sandbox, name, attempt) reserved for `id`
    /// until the container is built: a failed create drops the reservation,
    /// which frees the name.
    async fn admit<'s>(
        &'s self,
        id: &str,
        request: ContainerCreate,
        undo: &Undo<'s>,
    ) -> Result<(ContainerCreate, Option<restore::RestoreSource>, Reservation<'s, Live>), ContainerError> {
        let (request, restore) = match self.restore_request(&request, id, undo).await? {
            Some((restored, source)) => (restored, Some(source)),
            None => (request, None),
        };
        let slot = name_slot(&request.sandbox.record.id, &request.name_key);
        let reservation = self.index.reserve(&slot, id).map_err(|taken| ContainerError::NameInUse {
            name: request.name_key.clone(),
            sandbox: request.sandbox.record.id.clone(),
            id: taken.id,
        })?;
        Ok((request, restore, reservation))
    }

    async fn build<'s>(
        &'s self,
        id: &str,
        request: &ContainerCreate,
        restore: Option<&restore::RestoreSource>,
        undo: &Undo<'s>,
    ) -> Result<Built, ContainerError> {
        let config = &request.config;
        let sandbox = &request.sandbox;
        let paths = self.paths(id);
        let requested = config.image.as_ref().map(|i| i.image.clone()).unwrap_or_default();
        let image = self.images.resolve(&requested)?;
        let cgroup = self.cgroups.leaf(&sandbox.record.pod_cgroup, id)?;
        let stop_signal = signal::from_cri(config.stop_signal)
            .or_else(|| (!image.stop_signal.is_empty()).then(|| signal::parse(&image.stop_signal)).flatten())
            .unwrap_or(libc::SIGTERM);
        let log_path = match (sandbox.record.config.log_directory.as_str(), config.log_path.as_str()) {
            ("", _) | (_, "") => None,
            (dir, file) => Some(Path::new(dir).join(file)),
        };
        let mut record = ContainerRecord {
            id: id.to_string(),
            sandbox_id: sandbox.record.id.clone(),
            name_key: request.name_key.clone(),
            config: config.clone(),
            image: ImageUsed {
                requested,
                id: image.id.clone(),
                name: image.name.clone(),
                reference: image.reference.clone(),
            },
            created_at_ns: now_ns(),
            lifecycle: Lifecycle::Creating,
            log_path,
            cgroup,
            uid: 0,
            gid: 0,
            additional_gids: Vec::new(),
            stop_signal,
            oom_score_adj: None,
            started_at_ns: None,
            exit: None,
            security: SecurityReport::default(),
            hooks: None,
            resources: None,
            image_volumes: Vec::new(),
        };
        let privileged = config.linux.as_ref().and_then(|l| l.security_context.as_ref()).is_some_and(|s| s.privileged);
        let mut devices = if privileged { host_devices(Path::new("/dev")) } else { config_devices(&config.devices)? };
        let cdi = self.resolve_cdi(id, config).await?;
        if let Some(cdi) = &cdi {
            crate::container::cdi_edits::merge_devices(&mut devices, cdi);
        }
        // The container's directory with its upper and work directories (a
        // spare renamed: see `spare_dirs`). Not fsynced: lost in a power cut,
        // the directory has no record and is removed at the next start, which
        // is just as right. The final record is durable. Its undo is
        // registered first: a directory half made in place goes too.
        let dir = paths.dir.clone();
        undo.push("container directory", move || store::remove_tree(&dir));
        self.dirs.take(&paths.dir).map_err(io_err(format!("cannot create {}", paths.dir.display())))?;
        // A lease whose container never got a record is released at the next start.
        let (layers, leased) = self.start_lease(id, &image.id, paths.upper(), restore.is_some(), sandbox.record.userns);
        let (images, holder) = (self.images.clone(), id.to_string());
        undo.push_async("image lease", move || async move {
            // The task may still be fitting the mount points in the directory.
            leased.wait().await;
            release_lease(images, holder).await
        });
        let first = paths.dir.join(spare_dirs::FIRST_RECORD);
        store::write_json_into_spare(&paths.record(), &first, &record, store::Durability::Volatile)?;
        let record_path = paths.record();
        undo.push("container record", move || remove_if_present(&record_path));
        // Made only once the record names it: a daemon killed from here on
        // leaves a create the next start undoes, cgroup and all.
        // The cgroup made ahead for the pod's first container serves one
        // with the default devices only (any other needs rules of its own).
        let ahead = (!privileged && devices.is_empty() && self.cgroups.systemd.is_none())
            .then(|| ahead::path(&request.sandbox.record.pod_cgroup, &request.sandbox.record.id).ok())
            .flatten();
        let (cgroup, go_ahead, made) = self.start_cgroup(id, &record.cgroup, ahead, privileged, &devices);
        let container_cgroup = record.cgroup.clone();
        undo.push_async("container cgroup", move || async move {
            // The task ends once it has made the cgroup and the plan is sent or dropped.
            made.wait().await;
            self.kill_all(&container_cgroup).await;
            self.remove_cgroup(&container_cgroup).await
        });
        let early = EarlyWork { cgroup, go_ahead, layers, devices, cdi };
        let Prepared { monitor, files } = self.make(&mut record, &image, request, &paths, restore, early, undo).await?;
        // The durable record is written while the monitor builds the init.
        // Until the monitor has recorded the init in the run dir, a crash
        // leaves a create the next start undoes (see `interrupted_create`).
        // Its undo is the first record's: the same file.
        let mut created = record.clone();
        created.lifecycle = Lifecycle::Created;
        let (record_path, final_record) = (paths.record(), created.clone());
        let spare = paths.dir.join(spare_dirs::CREATED_RECORD);
        let write = tokio::task::spawn_blocking(move || {
            let began = std::time::Instant::now();
            let durable = store::Durability::Durable;
            let written = store::write_json_into_spare(&record_path, &spare, &final_record, durable);
            tracing::debug!(record_us = began.elapsed().as_micros() as u64, "durable record written");
            written.map_err(ContainerError::from)
        });
        let (spawned, written) = tokio::join!(self.spawn_monitor(monitor, &files), joined(write));
        // Built or not, the container goes when its record is not safe.
        written?;
        let (init, cgroup_join) = spawned?;
        tracing::info!(container_id = %id, pod_id = %created.sandbox_id, pid = init.identity.pid, "container created");
        Ok((created, init, cgroup_join))
    }

    #[allow(clippy::too_many_arguments)]
    async fn make<'s>(
        &'s self,
        record: &mut ContainerRecord,
        image: &crate::container::SourceImage,
        request: &ContainerCreate,
        paths: &ContainerPaths,
        restore: Option<&restore::RestoreSource>,
        early: EarlyWork,
        undo: &Undo<'s>,
    ) -> Result<Prepared, ContainerError> {
        let id = record.id.clone();
        let sandbox = &request.sandbox;
        let started = std::time::Instant::now();
        let files = RunFiles::new(&paths.run_dir);
        // The run dir comes with the monitor (see `launch_monitor`), the
        // upper and work dirs with the container's directory (see `build`).
        // Three things at once: the monitor starts (it then waits for `go`),
        // the cgroup is made, and the spec and the plan are written once the
        // layers are leased. The monitor's init starts building as soon as
        // the monitor and the plan are there, while the cgroup is still
        // being made; the cgroup's task says `go` once both the plan and the
        // cgroup are done.
        let EarlyWork { cgroup, go_ahead, layers, devices, cdi } = early;
        // A spare monitor and a spare directory are taken: a failed create
        // has them replaced at once (no `go` is said then, which is when the
        // replacements come otherwise), once its monitor has ended. Async:
        // the replacements are made on the runtime.
        undo.push_async("spares taken", || async {
            self.refill_spares();
            Ok::<_, Infallible>(())
        });
        let planned = async {
            // Owned by this future: dropped unsent when the plan fails, which
            // ends the cgroup's task without `go`.
            let go_ahead = go_ahead;
            let (monitor, spec) = tokio::join!(
                self.launch_monitor(&files, paths, &sandbox.record.pause_cgroup, undo),
                self.container_spec(record, image, request, paths, (&devices, cdi.as_ref()), joined(layers), undo),
            );
            let planned = match (&monitor, spec) {
                (Ok(monitor), Ok(spec)) => {
                    self.write_plan(record, request, paths, &files, restore, spec).await.and_then(|resources| {
                        monitor.plan_written();
                        let go = monitor.go_copy().map_err(io_err("cannot copy the monitor's input"))?;
                        // From `go` on the init (and a restore's processes)
                        // are in the container's cgroup: they are killed
                        // before the monitor is waited for.
                        let container_cgroup = record.cgroup.clone();
                        undo.push_async("init in the container cgroup", move || async move {
                            self.kill_all(&container_cgroup).await;
                            Ok::<_, Infallible>(())
                        });
                        // The task is waiting, or ended (its error is awaited below).
                        let _ = go_ahead.send(GoAhead { resources, go, monitor_pid: monitor.pid });
                        Ok(())
                    })
                }
                // The monitor's own error comes from `monitor`.
                (Err(_), Ok(_)) => Ok(()),
                (_, Err(e)) => Err(e),
            };
            (monitor, planned)
        };
        let ((monitor, planned), cgroup_made) = tokio::join!(planned, joined(cgroup));
        // The spec's or the plan's error first, then the cgroup's, then the
        // monitor's. With both monitor and plan there, the plan was sent: a
        // cgroup task that ended well has said `go`. A monitor dropped here
        // unsent ends (its input closes); its undo waits for that.
        planned.and(cgroup_made)?;
        let monitor = monitor?;
        tracing::debug!(container_id = %id, elapsed_us = started.elapsed().as_micros() as u64, "container prepared");
        // `go` is said: the replacement spares come once this
        // container is built and, usually, started.
        self.refill_spares_later();
        Ok(Prepared { monitor, files })
    }

    /// Writes plan.json (and makes the log's directory) once the spec is
    /// built; returns the resources for the cgroup.
    async fn write_plan(
        &self,
        record: &ContainerRecord,
        request: &ContainerCreate,
        paths: &ContainerPaths,
        files: &RunFiles,
        restore: Option<&restore::RestoreSource>,
        spec: (Vec<PathBuf>, oci_spec::runtime::Spec, oci_spec::runtime::LinuxResources),
    ) -> Result<oci_spec::runtime::LinuxResources, ContainerError> {
        let (layers, oci, resources) = spec;
        let (id, config, sandbox) = (&record.id, &request.config, &request.sandbox);
        let restore = match restore {
            Some(source) => Some(self.prepare_restore(source, &oci, sandbox, paths).await?),
            None => None,
        };
        let plan = MonitorPlan {
            container_id: id.clone(),
            bundle: paths.dir.clone(),
            run_dir: paths.run_dir.clone(),
            log_path: record.log_path.clone(),
            log_directory: record.log_path.as_ref().map(|_| PathBuf::from(&sandbox.record.config.log_directory)),
            rootfs: RootfsPlan { lower: layers, upper: paths.upper(), work: paths.work() },
            cgroup_procs: self.cgroups.procs_files(&record.cgroup),
            cgroup_mounts: self.cgroup_mounts(),
            stdin: config.stdin,
            memory_cgroup: self.cgroups.controller_dir(&record.cgroup, "memory"),
            clone_into_cgroup: (self.cgroups.version == CgroupVersion::V2)
                .then(|| self.cgroups.dirs(&record.cgroup).into_iter().next())
                .flatten(),
            prepared_init_fits: restore.is_none() && prepared_init_fits(&oci),
            restore,
            hooks: record.hooks.clone(),
        };
        store::write_json_with(&files.plan(), &plan, store::Durability::Volatile)?;
        if let Some(location) = plan.log_location() {
            crate::linux::log_file::prepare(location).map_err(|e| match e.kind() {
                std::io::ErrorKind::InvalidInput => ContainerError::Invalid(format!("config.log_path: {e}")),
                _ => io_err("cannot prepare the log directory".to_string())(e),
            })?;
        } else if let Some(log) = &record.log_path {
            return Err(ContainerError::Invalid(format!(
                "config.log_path: {} is not below the pod's log directory",
                crate::quote::quote(&log.display().to_string())
            )));
        }
        Ok(resources)
    }

    /// The container's OCI spec (written to the bundle) from its config,
    /// its image and its pod, with the leased layers and the cgroup
    /// resources to apply; fills in the record's user, security and resources.
    #[allow(clippy::too_many_arguments)]
    async fn container_spec<'s>(
        &'s self,
        record: &mut ContainerRecord,
        image: &crate::container::SourceImage,
        request: &ContainerCreate,
        paths: &ContainerPaths,
        (devices, cdi): (&[HostDevice], Option<&crate::cdi::Resolved>),
        leased: impl std::future::Future<Output = Result<LeasedLayers, ContainerError>>,
        undo: &Undo<'s>,
    ) -> Result<(Vec<PathBuf>, oci_spec::runtime::Spec, oci_spec::runtime::LinuxResources), ContainerError> {
        let id = record.id.clone();
        let config = &request.config;
        let sandbox = &request.sandbox;
        let sc = config.linux.as_ref().and_then(|l| l.security_context.clone()).unwrap_or_default();
        let started = std::time::Instant::now();
        let lap = |what: &str| tracing::debug!(container_id = %id, step = what, elapsed_us = started.elapsed().as_micros() as u64, "create");
        let c = sc.capabilities.clone().unwrap_or_default();
        // The lease under way ends before its undo releases it (see `build`).
        let wanted = capabilities::container_set(sc.privileged, &c.add_capabilities, &c.drop_capabilities)
            .map_err(|e| ContainerError::Invalid(format!("config.linux.security_context.capabilities: {e}")))?;
        let apparmor = security::apparmor_profile(&sc, self.apparmor, crate::apparmor::DEFAULT_PROFILE, |name| {
            crate::apparmor::loaded_mode(name).map(|mode| mode.is_some()).map_err(|e| e.to_string())
        })
        .map_err(|e| ContainerError::Invalid(e.to_string()))?;
        let capabilities = {
            // Nobody can hand out a capability it lacks (this node's root may
            // lack CAP_SYS_RESOURCE): privileged means all the runtime has.
            let (kept, unavailable) = capabilities::available(wanted);
            if !unavailable.is_empty() {
                tracing::warn!(container_id = %id, ?unavailable, "capabilities the runtime itself lacks are left out");
            }
            kept
        };
        // The layers (with the image's /etc/passwd and /etc/group) and the
        // seccomp program need nothing of each other: both at once.
        let (leased, seccomp) = tokio::join!(leased, self.seccomp_program(&id, &sc, sandbox, &capabilities));
        let (layers, passwd, group) = leased?;
        lap("layers leased");
        let image_volumes = self.image_volumes(&id, config, paths, undo).await?;
        record.image_volumes = image_volumes.iter().map(|v| (v.container_path.clone(), v.image_id.clone())).collect();

        // Who the process runs as, from the image's /etc/passwd and /etc/group.
        let mut user = user::resolve(
            &UserRequest {
                run_as_user: sc.run_as_user.as_ref().map(|v| v.value),
                run_as_group: sc.run_as_group.as_ref().map(|v| v.value),
                run_as_username: sc.run_as_username.clone(),
                image_user: image.user.clone(),
                supplemental_groups: sc.supplemental_groups.clone(),
                strict_groups: sc.supplemental_groups_policy == api::SupplementalGroupsPolicy::Strict as i32,
            },
            &user::parse_passwd(&passwd.unwrap_or_default()),
            &user::parse_group(&group.unwrap_or_default()),
        )
        .map_err(|e| ContainerError::Invalid(format!("config.linux.security_context.{e}")))?;
        if let Some(cdi) = cdi {
            crate::container::cdi_edits::add_groups(&mut user.additional_gids, cdi);
        }
        (record.uid, record.gid, record.additional_gids) = (user.uid, user.gid, user.additional_gids.clone());
        let (seccomp_choice, seccomp_source, seccomp) = seccomp?;
        record.security = security_report(&sc, &seccomp_choice, seccomp_source, seccomp.as_ref(), apparmor.as_deref());
        let requested_adj = config.linux.as_ref().and_then(|l| l.resources.as_ref()).map(|r| r.oom_score_adj as i32);
        let oom_score_adj = requested_adj.map(|want| (want, effective_oom_score_adj(want)));
        record.oom_score_adj = oom_score_adj;

        let pause = sandbox.pause.as_ref().map(|p| p.pid).ok_or_else(|| {
            ContainerError::Precondition(format!("sandbox {} has no pause process", sandbox.record.id))
        })?;
        let pod = PodFacts::of(sandbox, pause);
        let pid = match &request.pid {
            PidMode::Own => PidNamespace::Own,
            PidMode::Node => PidNamespace::Node,
            PidMode::Pod => pod.pid_ns.clone().map(PidNamespace::Join).unwrap_or(PidNamespace::Node),
            PidMode::Target(target) => {
                let view = self.get(target)?;
                let init = view.init.filter(|_| view.state == ContainerState::Running).ok_or_else(|| {
                    ContainerError::Precondition(format!(
                        "target container {target} of the PID namespace is not running"
                    ))
                })?;
                PidNamespace::Join(PathBuf::from(format!("/proc/{}/ns/pid", init.pid)))
            }
        };
        let rootfs = RunFiles::new(&paths.run_dir).rootfs();
        let cgroups_path = record.cgroup.to_string();
        let mut oci = spec::build(&SpecInput {
            container_id: &id,
            config,
            pod: &pod,
            pid,
            image: &image.defaults,
            image_name: &image.name,
            user: &user,
            capabilities: &capabilities,
            rootfs: &rootfs,
            cgroups_path: &cgroups_path,
            oom_score_adj: oom_score_adj.map(|(_, applied)| applied),
            devices,
            rlimits: &self.config.container.rlimits,
            pids_limit: self.config.container.pids_limit,
            image_volumes: &image_volumes,
        })
        .map_err(|e| ContainerError::Invalid(e.to_string()))?;
        if let (Some(profile), Some(mut process)) = (&apparmor, oci.process().clone()) {
            // The init and every exec ask for it just before their execve.
            process.set_apparmor_profile(Some(profile.clone()));
            oci.set_process(Some(process));
        }
        if let Some(cdi) = cdi {
            crate::container::cdi_edits::to_spec(&mut oci, cdi)
                .map_err(|e| ContainerError::Invalid(format!("CDI devices: {e}")))?;
        }
        if let Some(program) = &seccomp {
            // The profile goes into the spec (as runc would get it); its
            // compiled form beside it is what the init and exec helper load.
            let profile =
                program.profile.to_oci().map_err(|e| ContainerError::Build(format!("seccomp profile: {e}")))?;
            let mut linux = oci.linux().clone().unwrap_or_default();
            linux.set_seccomp(Some(profile));
            oci.set_linux(Some(linux));
            // Not fsynced: only a running container loads it, and a reboot ends them all.
            store::write_atomic_with(
                &paths.seccomp(),
                &crate::seccomp::program::encode(&program.program.filters),
                0o600,
                store::Durability::Volatile,
            )?;
        }
        let resources = oci.linux().as_ref().and_then(|l| l.resources().clone()).unwrap_or_default();
        self.cgroups.check_resources(&resources).map_err(resources_invalid("config.linux.resources"))?;
        record.resources = config.linux.as_ref().and_then(|l| l.resources.clone()).map(|mut r| {
            r.oom_score_adj = oom_score_adj.map_or(0, |(_, applied)| applied.into());
            r
        });
        // The OCI hooks that apply (with no hooks directory: a stat each).
        record.hooks = self.apply_hooks(&mut oci, config, paths)?;
        if record.hooks.as_ref().is_some_and(|h| h.has(crate::hooks::Stage::Poststop)) {
            // Marked pending: whatever the create's hooks did gets its
            // poststop to undo it, once the container's processes are gone.
            let (pending, paths) = (record.clone(), paths.clone());
            undo.push_async("poststop hooks pending", move || async move {
                super::hooks::poststop_if_pending(&pending, &paths).await;
                Ok::<_, Infallible>(())
            });
        }
        let spec_json = serde_json::to_vec_pretty(&oci).map_err(|e| ContainerError::Build(e.to_string()))?;
        // Not fsynced: the bundle serves the container's processes, which a
        // reboot ends (containerd keeps it on tmpfs); readers after a power
        // loss cope with its absence.
        let spare = paths.dir.join(spare_dirs::SPEC);
        store::PreparedWrite::into_spare(&paths.spec(), &spare, &spec_json, 0o600, store::Durability::Volatile)?
            .commit()?;
        lap("spec written");
        Ok((layers, oci, resources))
    }

    /// Starts making the container's cgroup (and missing parents) and
    /// limiting it to the default devices and the config's (privileged
    /// containers keep every device), in one trip to the blocking pool; or
    /// renames the one made `ahead`, with the default devices already (see
    /// cgroups::ahead), when there is one to take. The task then waits for
    /// the plan: it applies the spec's resources and says
    /// `go` to the monitor, or ends when the sender drops unsent.
    fn start_cgroup(
        &self,
        id: &str,
        cgroup: &CgroupPath,
        ahead: Option<CgroupPath>,
        privileged: bool,
        devices: &[HostDevice],
    ) -> (JoinHandle<Result<(), ContainerError>>, mpsc::SyncSender<GoAhead>, Ended) {
        use crate::cgroups::devices::{self, GrantedDevice};
        // A device with no access (a CDI node's `none`) is made but gets no rule.
        let granted: Vec<GrantedDevice> = devices
            .iter()
            .filter(|d| !d.permissions.is_empty())
            .map(|d| GrantedDevice {
                char_device: d.char_device,
                major: d.major as u32,
                minor: d.minor as u32,
                permissions: d.permissions.clone(),
            })
            .collect();
        let rules = devices::rules_for(privileged, &granted);
        let (owned, cgroups, cgroup) = (self.owned_cgroups.clone(), self.cgroups.clone(), cgroup.clone());
        let aheads = self.ahead.clone();
        let (go_ahead, plan_written) = mpsc::sync_channel::<GoAhead>(1);
        let restrict = move |cgroups: &Cgroups, cgroup: &CgroupPath| match &rules {
            Some(rules) => devices::restrict(cgroups, cgroup, rules).map_err(|e| ContainerError::Build(e.to_string())),
            None => Ok(()),
        };
        let description = format!("nidus container {id}");
        let (task, ended) = spawn_watched(move || {
            let scopes = cgroups.systemd.clone();
            if scopes.is_none() && !ahead.is_some_and(|ahead| aheads.take(&ahead, &cgroup)) {
                owned.create(&cgroup, cgroup.parent().as_ref())?;
                restrict(&cgroups, &cgroup)?;
            }
            let Ok(GoAhead { resources, go, monitor_pid }) = plan_written.recv() else { return Ok(()) };
            // systemd: the scope starts around the monitor, which forks the
            // init in it (see `MonitorAssignment::join_once_built`).
            if let Some(scopes) = scopes {
                scopes.start_blocking(&cgroup, monitor_pid, description, &resources)?;
                restrict(&cgroups, &cgroup)?;
            }
            cgroups.apply(&cgroup, &resources).map_err(apply_error("config.linux.resources"))?;
            // A monitor that died fails this; its empty reply says so.
            let _ = std::fs::File::from(go).write_all(format!("{}\n", BuildStep::Go.encode()).as_bytes());
            Ok(())
        });
        (task, go_ahead, ended)
    }

    /// The CDI devices a container asks for, resolved against the spec
    /// files as they are now (on the blocking pool: files are read when they
    /// changed, host nodes looked at); None when it asks for none.
    async fn resolve_cdi(
        &self,
        id: &str,
        config: &api::ContainerConfig,
    ) -> Result<Option<crate::cdi::Resolved>, ContainerError> {
        let requests = crate::cdi::requested(config).map_err(|e| ContainerError::Invalid(e.to_string()))?;
        if requests.is_empty() {
            return Ok(None);
        }
        let registry = self.cdi.clone();
        let resolved = tokio::task::spawn_blocking(move || registry.resolve(&requests))
            .await
            .map_err(|e| ContainerError::Build(e.to_string()))?;
        match resolved {
            Ok(resolved) => {
                let names = resolved.as_ref().map(|r| r.names.clone()).unwrap_or_default();
                tracing::info!(container_id = %id, devices = ?names, "CDI devices resolved");
                Ok(resolved)
            }
            Err(e) if e.is_precondition() => Err(ContainerError::Precondition(e.to_string())),
            Err(e) => Err(ContainerError::Invalid(e.to_string())),
        }
    }

    /// Leases the image's layers for container `holder` (and reads the
    /// image's /etc/passwd and /etc/group from them), on the blocking pool.
    /// The mount points in `upper` then take the image's /etc (see
    /// `spare_dirs`), or go for a container `restoring` a checkpoint's.
    /// A container in a user namespace (`userns`) gets its upper directory
    /// owned by that namespace's IDs, its image layers idmapped (by its init).
    fn start_lease(
        &self,
        holder: &str,
        image_id: &str,
        upper: PathBuf,
        restoring: bool,
        userns: Option<crate::linux::userns::IdMaps>,
    ) -> (JoinHandle<Result<LeasedLayers, ContainerError>>, Ended) {
        let (images, holder, image_id) = (self.images.clone(), holder.to_string(), image_id.to_string());
        spawn_watched(move || {
            let layers = images.lease_layers(&holder, &image_id)?;
            let fitted = if restoring {
                spare_dirs::remove_mount_points(&upper)
            } else {
                spare_dirs::fit_to_image(&upper, &image_etc(&layers))
            };
            fitted.map_err(io_err(format!("cannot prepare the mount points in {}", upper.display())))?;
            if let Some(maps) = userns {
                spare_dirs::give_to_user_namespace(&upper, &maps)
                    .map_err(io_err(format!("cannot give {} to the pod's user namespace", upper.display())))?;
            }
            let passwd = read_from_layers(&layers, "etc/passwd");
            let group = read_from_layers(&layers, "etc/group");
            Ok((layers, passwd, group))
        })
    }

    /// The config's image volumes: each image resolved, its layers leased
    /// for the container (and so kept, and unremovable, while it lives), its
    /// sub path looked up in them; on the blocking pool.
    async fn image_volumes<'s>(
        &'s self,
        id: &str,
        config: &api::ContainerConfig,
        paths: &ContainerPaths,
        undo: &Undo<'s>,
    ) -> Result<Vec<ImageVolume>, ContainerError> {
        let wanted: Vec<(usize, api::Mount)> = config
            .mounts
            .iter()
            .enumerate()
            .filter(|(_, m)| m.image.as_ref().is_some_and(|i| !i.image.is_empty()))
            .map(|(i, m)| (i, m.clone()))
            .collect();
        if wanted.is_empty() {
            return Ok(Vec::new());
        }
        // Leased one image at a time (a later one may fail): what was leased
        // is released.
        let (images, holder) = (self.images.clone(), id.to_string());
        undo.push_async("image volume leases", move || release_lease(images, holder));
        let (images, holder, run_dir) = (self.images.clone(), id.to_string(), paths.run_dir.clone());
        tokio::task::spawn_blocking(move || {
            wanted
                .into_iter()
                .map(|(i, m)| {
                    let field = format!("config.mounts[{i}]");
                    let reference = m.image.map(|image| image.image).unwrap_or_default();
                    let image = images.resolve(&reference).map_err(|e| match e {
                        ImageSourceError::NotFound(_) => ContainerError::Image(ImageSourceError::NotFound(format!(
                            "{field}.image: image {} is not on this node (pull it first)",
                            crate::quote::quote(&reference)
                        ))),
                        other => ContainerError::Image(other),
                    })?;
                    let layers = images.lease_volume(&holder, &image.id).map_err(ContainerError::Image)?;
                    let sub_path = (!m.image_sub_path.is_empty()).then_some(m.image_sub_path);
                    if let Some(sub) = &sub_path {
                        crate::container::image_volume::find(&layers, sub)
                            .map_err(|e| ContainerError::Invalid(format!("{field}.image_sub_path: {e}")))?;
                    }
                    Ok(ImageVolume {
                        container_path: m.container_path,
                        image_id: image.id,
                        layers,
                        sub_path,
                        scratch: run_dir.join(format!("image-volume-{i}")),
                    })
                })
                .collect()
        })
        .await
        .map_err(|e| ContainerError::Build(format!("image volumes: {e}")))?
    }

    /// The container's seccomp program (None: unconfined), compiled through
    /// the cache off the async threads.
    async fn seccomp_program(
        &self,
        id: &str,
        sc: &api::LinuxContainerSecurityContext,
        sandbox: &SandboxView,
        capabilities: &std::collections::BTreeSet<String>,
    ) -> Result<(security::SeccompChoice, &'static str, Option<SeccompProgram>), ContainerError> {
        let pod_sc = sandbox.record.config.linux.as_ref().and_then(|l| l.security_context.as_ref());
        let (choice, source) = security::seccomp_choice(sc, pod_sc, &self.config.container.unset_seccomp_profile)
            .map_err(|e| ContainerError::Invalid(e.to_string()))?;
        // Unconfined needs no program: no trip to the blocking pool.
        let program = if choice == security::SeccompChoice::Unconfined {
            None
        } else {
            let (programs, task_choice, bounding) = (self.seccomp.clone(), choice.clone(), capabilities.clone());
            tokio::task::spawn_blocking(move || programs.prepare(&task_choice, &bounding, source))
                .await
                .map_err(|e| ContainerError::Build(e.to_string()))??
        };
        let Some(program) = program else {
            tracing::debug!(container_id = %id, source, "seccomp: unconfined");
            return Ok((choice, source, None));
        };
        let summary = program.program.summary();
        tracing::debug!(
            container_id = %id,
            profile = choice.kind(),
            source,
            cached = program.cached,
            prepare_us = program.prepare_us,
            filters = summary.filters,
            instructions = summary.instructions,
            "seccomp program ready"
        );
        if !summary.skipped_syscalls.is_empty() {
            tracing::warn!(
                container_id = %id,
                skipped = ?summary.skipped_syscalls,
                "seccomp: syscalls this architecture does not have are skipped"
            );
        }
        Ok((choice, source, Some(program)))
    }

    fn cgroup_mounts(&self) -> Vec<CgroupMount> {
        match self.cgroups.version {
            CgroupVersion::V2 => {
                vec![CgroupMount { dir: String::new(), fstype: "cgroup2".into(), data: String::new() }]
            }
            CgroupVersion::V1 => self
                .cgroups
                .hierarchies
                .iter()
                .map(|h| {
                    let list = h.controllers.join(",");
                    CgroupMount { dir: list.clone(), fstype: "cgroup".into(), data: list }
                })
                .collect(),
        }
    }

    /// A monitor for this container (a spare when one waits), its directory
    /// renamed to the run dir: it waits for `go` while the daemon prepares
    /// the container (it joins the pod's cgroup later, while the init
    /// builds). Dropping the result without `go` ends it.
    async fn launch_monitor<'s>(
        &'s self,
        files: &RunFiles,
        paths: &ContainerPaths,
        pod_cgroup: &CgroupPath,
        undo: &Undo<'s>,
    ) -> Result<PendingMonitor, ContainerError> {
        let assignment = MonitorAssignment {
            run_dir: files.dir.clone(),
            bundle: paths.dir.clone(),
            pod_cgroup_procs: self.cgroups.procs_files(pod_cgroup),
            join_once_built: self.cgroups.systemd.is_some(),
        };
        let monitor = self
            .monitors
            .take(&assignment)
            .await
            .map_err(io_err(format!("cannot start the monitor {}", self.monitors.binary().display())))?;
        // Its input closes when the create drops it (which ends a monitor
        // not yet told `go`, and its prepared init); its run dir goes once
        // it has ended, so nothing of it writes there any more.
        let (watch, run_dir) = (monitor.exit_watch(), files.dir.clone());
        undo.push_async("monitor and run dir", move || async move {
            if let Some(watch) = watch {
                let _ = tokio::time::timeout(MONITOR_EXIT_WAIT, watch.exited()).await;
            }
            store::remove_tree(&run_dir)
        });
        // The run dir is the monitor's directory, renamed: the mount point
        // of the root filesystem goes in it now.
        let rootfs = files.rootfs();
        store::create_dir_new(&rootfs, 0o755).map_err(io_err(format!("cannot create {}", rootfs.display())))?;
        Ok(monitor)
    }

    /// Tells a launched monitor to build the container (plan.json is
    /// written) and waits for its one-line reply.
    async fn spawn_monitor(
        &self,
        pending: PendingMonitor,
        files: &RunFiles,
    ) -> Result<(InitProcess, Option<CgroupJoin>), ContainerError> {
        let PendingMonitor { pid: monitor, go, reply, .. } = pending;
        let said = std::time::Instant::now();
        // `go` is said (by the cgroup's task); its input stays open until the reply.
        let reaper = &self.reaper;
        let created =
            crate::helper::await_reply::<Created>(monitor, go, reply, CREATE_TIMEOUT, reaper, Some(MONITOR_EXIT_WAIT));
        let Created { pid, start_time, cgroup_join, timings } = match created.await {
            Ok(created) => created,
            Err(ReplyError::Timeout(_)) => {
                return Err(ContainerError::Build(format!(
                    "the monitor did not build the container within {CREATE_TIMEOUT:?}"
                )))
            }
            Err(ReplyError::Refused(why)) => return Err(ContainerError::Build(why)),
            Err(ReplyError::NoReply { ended }) => {
                return Err(ContainerError::Build(format!(
                    "the monitor ended ({ended:?}) without a reply; see {}",
                    files.monitor_log().display()
                )))
            }
        };
        let boot_id = boot_id().map_err(io_err("reading the boot id"))?;
        if let Some(CreateTimings { build_us, settle_us, go_wait_us }) = timings {
            let reply_us = said.elapsed().as_micros() as u64;
            tracing::debug!(monitor_pid = monitor, build_us, settle_us, go_wait_us, reply_us, "monitor built the init");
        }
        let identity = ProcessIdentity { pid, start_time, boot_id };
        let pidfd =
            identity.open_pidfd().ok_or_else(|| ContainerError::Build("the container's init died at once".into()))?;
        Ok((InitProcess { identity, pidfd }, cgroup_join))
    }
}

/// How long a monitor that failed a create is waited for to end.
const MONITOR_EXIT_WAIT: Duration = Duration::from_secs(5);

/// Whether the init a monitor forks ahead (see `MonitorPlan::prepared_init_fits`)
/// fits a container of this spec: one with a PID namespace of its own and
/// no terminal.
fn prepared_init_fits(spec: &oci_spec::runtime::Spec) -> bool {
    let namespaces = spec.linux().as_ref().and_then(|l| l.namespaces().clone()).unwrap_or_default();
    let own_pid_namespace =
        namespaces.iter().any(|ns| ns.typ() == oci_spec::runtime::LinuxNamespaceType::Pid && ns.path().is_none());
    let terminal = spec.process().as_ref().and_then(|p| p.terminal()).unwrap_or(false);
    own_pid_namespace && !terminal
}

/// What a container's status reports of its confinement.
fn security_report(
    sc: &api::LinuxContainerSecurityContext,
    choice: &security::SeccompChoice,
    source: &str,
    program: Option<&SeccompProgram>,
    apparmor: Option<&str>,
) -> SecurityReport {
    let seccomp = SeccompReport {
        profile: choice.kind().into(),
        localhost_ref: match choice {
            security::SeccompChoice::Localhost(path) => Some(path.clone()),
            _ => None,
        },
        source: source.into(),
        program: program.map(|p| p.program.summary()),
    };
    let (apparmor, selinux) = security::lsm_reports(sc, HostModules::detect(), apparmor);
    SecurityReport { seccomp, apparmor, selinux }
}

/// The entry at `rel` as the image's merged layers show it (top layer
/// first, honouring whiteouts and opaque directories): its path in the
/// layer that has it, and its metadata; None when the image has none.
fn find_in_layers(layers: &[PathBuf], rel: &str) -> Option<(PathBuf, std::fs::Metadata)> {
    let parent = Path::new(rel).parent();
    for layer in layers.iter().rev() {
        let path = layer.join(rel);
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.file_type().is_char_device() && meta.rdev() == 0 => return None,
            Ok(meta) => return Some((path, meta)),
            Err(_) => {}
        }
        if parent.is_some_and(|p| is_overlay_opaque(&layer.join(p))) {
            return None;
        }
    }
    None
}

/// A file as the image's merged layers show it.
fn read_from_layers(layers: &[PathBuf], rel: &str) -> Option<String> {
    match find_in_layers(layers, rel)? {
        (path, meta) if meta.is_file() => std::fs::read_to_string(path).ok(),
        _ => None,
    }
}

/// What the image has at /etc, for the mount points made ahead.
fn image_etc(layers: &[PathBuf]) -> ImageEtc {
    match find_in_layers(layers, "etc") {
        None => ImageEtc::Missing,
        Some((path, meta)) if meta.is_dir() => ImageEtc::Directory(path, meta),
        Some(_) => ImageEtc::Other,
    }
}

/// The devices a CRI config asks for, read from the host.
fn config_devices(devices: &[api::Device]) -> Result<Vec<HostDevice>, ContainerError> {
    devices
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let field = format!("config.devices[{i}]");
            let meta = std::fs::metadata(&d.host_path)
                .map_err(|e| ContainerError::Invalid(format!("{field}: host_path {:?}: {e}", d.host_path)))?;
            let ft = meta.file_type();
            if !ft.is_char_device() && !ft.is_block_device() {
                return Err(ContainerError::Invalid(format!("{field}: host_path {:?} is not a device", d.host_path)));
            }
            let container_path =
                if d.container_path.is_empty() { d.host_path.clone() } else { d.container_path.clone() };
            Ok(HostDevice {
                container_path,
                char_device: ft.is_char_device(),
                major: nix::sys::stat::major(meta.rdev()) as i64,
                minor: nix::sys::stat::minor(meta.rdev()) as i64,
                file_mode: meta.mode() & 0o777,
                permissions: if d.permissions.is_empty() { "rwm".into() } else { d.permissions.clone() },
            })
        })
        .collect()
}

/// Every device node of the host (for privileged containers).
fn host_devices(dir: &Path) -> Vec<HostDevice> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return out };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(meta) = std::fs::symlink_metadata(&path) else { continue };
        let ft = meta.file_type();
        if ft.is_dir() {
            let name = entry.file_name();
            if !matches!(name.to_str(), Some("pts" | "shm" | "mqueue" | "fd")) {
                out.extend(host_devices(&path));
            }
        } else if ft.is_char_device() || ft.is_block_device() {
            // /dev/console and the pty master belong to the container's own /dev.
            if matches!(path.to_str(), Some("/dev/console" | "/dev/ptmx" | "/dev/tty")) {
                continue;
            }
            out.push(HostDevice {
                container_path: path.display().to_string(),
                char_device: ft.is_char_device(),
                major: nix::sys::stat::major(meta.rdev()) as i64,
                minor: nix::sys::stat::minor(meta.rdev()) as i64,
                file_mode: meta.mode() & 0o777,
                permissions: "rwm".into(),
            });
        }
    }
    out
}

/// The oom_score_adj a container actually gets. Lowering it below the
/// daemon's own needs CAP_SYS_RESOURCE; without it the request is clamped to
/// the daemon's value (containerd's `restrict_oom_score_adj`), rather than
/// failing the container.
fn effective_oom_score_adj(requested: i32) -> i32 {
    let own: i32 =
        std::fs::read_to_string("/proc/self/oom_score_adj").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(0);
    let can_lower =
        ::caps::has_cap(None, ::caps::CapSet::Effective, ::caps::Capability::CAP_SYS_RESOURCE).unwrap_or(false);
    if requested < own && !can_lower {
        own
    } else {
        requested
    }
}
