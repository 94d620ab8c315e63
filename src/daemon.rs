//! `nidus serve`: takes the state lock, prepares directories and cgroups,
//! reloads and reconciles state, then serves the CRI on the Unix socket until
//! SIGTERM/SIGINT, telling a service manager how it goes (`service`). Pods
//! and containers never depend on this process staying up.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use tokio::net::UnixListener;

use crate::api::image_service_server::ImageServiceServer;
use crate::api::runtime_service_server::RuntimeServiceServer;
use crate::api_v1alpha2::image_service_server::ImageServiceServer as ImageServiceServerV1alpha2;
use crate::api_v1alpha2::runtime_service_server::RuntimeServiceServer as RuntimeServiceServerV1alpha2;
use crate::cgroups::ahead::AheadCgroups;
use crate::cgroups::{Cgroups, OwnedCgroups};
use crate::config::Config;
use crate::container::{Containers, ImageSource};
use crate::cri::{Daemon, ImageApi, ImageApiV1alpha2, RuntimeApi, RuntimeApiV1alpha2, Subject};
use crate::image::ImageStore;
use crate::linux::lock;
use crate::linux::process::set_child_subreaper;
use crate::linux::reaper::Reaper;
use crate::linux::runtime_program::RuntimeProgram;
use crate::pod::Sandboxes;
use crate::service::ServiceManager;
use crate::store;

/// How long in-flight calls may finish after SIGTERM/SIGINT.
const SHUTDOWN_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

pub async fn serve(mut config: Config) -> Result<()> {
    let service = ServiceManager::from_env();
    service.status("starting: locking the state directories");
    let (soft, hard) = crate::linux::process::raise_nofile_limit().context("raising RLIMIT_NOFILE")?;
    tracing::info!(was = soft, now = hard, "open file limit raised to the hard limit");
    // Containers keep what they would have inherited, unless the config sets it.
    if !config.container.rlimits.iter().any(|l| l.kind == "RLIMIT_NOFILE") {
        config.container.rlimits.push(crate::config::Rlimit { kind: "RLIMIT_NOFILE".into(), soft, hard });
    }
    let config = Arc::new(config);
    store::create_dir_all(&config.state, 0o700).with_context(|| format!("creating {}", config.state.display()))?;
    std::fs::set_permissions(&config.state, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("chmod 0700 {}", config.state.display()))?;
    store::create_dir_all(&config.root, 0o700).with_context(|| format!("creating {}", config.root.display()))?;
    // The config refuses equal paths; the same directory by another path
    // (a symbolic link) would mix the two trees just the same.
    if store::same_file(&config.state, &config.root)
        .with_context(|| format!("comparing {} and {}", config.state.display(), config.root.display()))?
    {
        bail!(
            "root {} and state {} are the same directory; they must be different directories",
            config.root.display(),
            config.state.display()
        );
    }
    let locks = vec![lock::acquire(&config.state.join("nidus.lock"))?, lock::acquire(&config.root.join("nidus.lock"))?];

    service.status("starting: cgroups, helpers and the pod network");
    set_child_subreaper().context("becoming child subreaper")?;
    let reaper = Reaper::start().context("starting the child reaper")?;
    let mut cgroups = Cgroups::detect(&config.cgroup_root).context("setting up cgroups")?;
    let wanted = match config.cgroup.driver {
        crate::config::CgroupDriverSetting::Auto => crate::cgroups::scopes::Wanted::Auto,
        crate::config::CgroupDriverSetting::Cgroupfs => crate::cgroups::scopes::Wanted::Cgroupfs,
        crate::config::CgroupDriverSetting::Systemd => crate::cgroups::scopes::Wanted::Systemd,
    };
    let driver = crate::cgroups::scopes::choose(
        wanted,
        cgroups.version,
        &config.cgroup_root,
        &config.sandbox.default_cgroup_parent,
    )
    .await?;
    if let crate::cgroups::scopes::Choice::Systemd(scopes) = driver {
        cgroups.systemd = Some(scopes);
    }
    let cgroups = Arc::new(cgroups);
    tracing::info!(version = ?cgroups.version, root = %config.cgroup_root, driver = cgroups.driver(), "cgroups detected");
    let pause_binary = match &config.sandbox.pause_binary {
        Some(path) => path.clone(),
        None => sibling_program("nidus-pause")?,
    };
    let monitor_binary = match &config.container.monitor_binary {
        Some(path) => path.clone(),
        None => sibling_program("nidus-monitor")?,
    };

    // Helpers are exec'd from read-only mounts of their files (see RuntimeProgram).
    let programs_dir = config.state.join("bin");
    let pause_program = RuntimeProgram::prepare(&pause_binary, &programs_dir);
    let monitor_program = RuntimeProgram::prepare(&monitor_binary, &programs_dir);

    let owned_cgroups =
        Arc::new(OwnedCgroups::load(cgroups.clone(), &config.state, &config.root).context("reading owned cgroups")?);
    let ahead = AheadCgroups::new(cgroups.clone(), owned_cgroups.clone());
    let metrics_address = config.metrics.listen_address().map_err(anyhow::Error::msg)?;
    let metrics =
        if metrics_address.is_some() { crate::metrics::Metrics::on() } else { crate::metrics::Metrics::off() };
    let network =
        crate::network::PodNetworks::new(config.network.clone(), &config.root, reaper.clone(), metrics.clone())
            .context("opening the pod network state")?;
    network.probe().await;
    let events = crate::events::EventHub::<Subject>::default();
    let sandboxes = Sandboxes::new(
        config.clone(),
        cgroups.clone(),
        owned_cgroups.clone(),
        ahead.clone(),
        reaper.clone(),
        pause_program.exec_path().to_path_buf(),
        network.clone(),
    )
    .reporting_to(events.emitter(Subject::sandbox));
    service.status("starting: reloading pods and containers");
    sandboxes.load().await.context("reloading sandboxes")?;
    service.status("starting: opening the image store and importing new archives");
    let images = open_images(&config).await?;
    let image_source: Arc<dyn ImageSource> = images.clone();
    let apparmor = apparmor_at_start()?;
    let containers = Containers::new(
        config.clone(),
        cgroups.clone(),
        owned_cgroups.clone(),
        ahead,
        reaper.clone(),
        monitor_program.exec_path().to_path_buf(),
        image_source,
    )
    .reporting_to(events.emitter(Subject::container))
    .observed_by(metrics.clone())
    .confined_by_apparmor(apparmor);
    containers.load().await.context("reloading containers")?;
    if let Some(scopes) = &cgroups.systemd {
        // Scopes a daemon killed mid-create (or mid-removal) left behind.
        scopes.stop_leftovers(|id| sandboxes.knows(id) || containers.knows(id)).await;
    }
    crate::cri::pod_checkpoint::remove_abandoned(&config.root, &sandboxes, &containers).await;
    containers.refill_spares();
    owned_cgroups.retry_stale();
    owned_cgroups.prune();
    spawn_stale_cgroup_retries(owned_cgroups.clone());
    let streaming = crate::streaming::StreamingServer::start(&config.streaming, metrics.clone())
        .await
        .context("starting the streaming server")?;
    let user_namespaces = probe_user_namespaces(&reaper, &config.root).await;
    match &user_namespaces {
        Ok(()) => tracing::info!("pods with a user namespace of their own are supported (idmapped image layers)"),
        Err(why) => tracing::warn!(reason = %why, "pods with a user namespace of their own are refused"),
    }
    let daemon = Arc::new(Daemon {
        config: config.clone(),
        streaming,
        stats: crate::stats::Collector::new(cgroups.clone(), config.root.join("containers")),
        cgroups,
        sandboxes,
        network,
        containers,
        pause_binary,
        monitor_binary,
        puller: crate::image::pull::Puller::new(images.clone(), config.registry.clone(), metrics.clone()),
        images,
        runtime_programs: vec![pause_program, monitor_program],
        owned_cgroups,
        user_namespaces,
        apparmor,
        events,
        _locks: locks,
    });

    if let Some(address) = metrics_address {
        let states = daemon.clone();
        crate::metrics::server::start(
            address,
            config.metrics.max_connections,
            metrics.clone(),
            Arc::new(move || states.state_counts()),
        )
        .await
        .with_context(|| format!("starting the metrics endpoint on {address}"))?;
    }
    service.status("starting: binding the CRI socket");
    let listener = bind_socket(&config.socket).await?;
    // What the start found (exits while the daemon was down) waits a while
    // for the first subscribers.
    daemon.events.serving(crate::events::STARTUP_EVENTS_KEPT);
    let apis = crate::cri::served_apis(&config.grpc);
    tracing::info!(
        socket = %config.socket.display(),
        root = %config.root.display(),
        state = %config.state.display(),
        apis = %apis.join(","),
        "serving CRI {}",
        apis.join(" and ")
    );
    if !config.grpc.serve_v1alpha2 {
        tracing::info!(
            "runtime.v1alpha2 is switched off (grpc.serve_v1alpha2 = false): \
             kubelet 1.20-1.25 and crictl up to 1.25 cannot use this socket"
        );
    }

    // One implementation per service; the runtime.v1alpha2 servers hand every
    // call to the same instance as runtime.v1.
    let runtime_api = Arc::new(RuntimeApi::new(daemon.clone()));
    let image_api = Arc::new(ImageApi::new(daemon.clone()));
    let max = config.grpc.max_message_bytes;
    let runtime = RuntimeServiceServer::from_arc(runtime_api.clone())
        .max_decoding_message_size(max)
        .max_encoding_message_size(max);
    let images =
        ImageServiceServer::from_arc(image_api.clone()).max_decoding_message_size(max).max_encoding_message_size(max);
    let serve_v1alpha2 = config.grpc.serve_v1alpha2;
    let runtime_v1alpha2 = serve_v1alpha2.then(|| {
        RuntimeServiceServerV1alpha2::new(RuntimeApiV1alpha2::new(runtime_api.clone()))
            .max_decoding_message_size(max)
            .max_encoding_message_size(max)
    });
    let images_v1alpha2 = serve_v1alpha2.then(|| {
        ImageServiceServerV1alpha2::new(ImageApiV1alpha2::new(image_api.clone()))
            .max_decoding_message_size(max)
            .max_encoding_message_size(max)
    });

    // READY=1 once the socket answers, then the watchdog's pings (`service`).
    let serving = format!("serving CRI {} on {}", apis.join(" and "), config.socket.display());
    let readiness = service.spawn_readiness(config.socket.clone(), serving);

    // Stop accepting at SIGTERM/SIGINT; give in-flight calls a grace period,
    // then stop regardless: kubelet keeps its connection open forever.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let server = tonic::transport::Server::builder()
        .http2_max_header_list_size(Some(crate::cri::MAX_HEADER_LIST as u32))
        .layer(crate::cri::InstrumentLayer { metrics })
        .layer(tower::util::MapResponseLayer::new(crate::cri::cap_status_message::<tonic::body::Body>))
        .layer(crate::cri::DeadlineLayer)
        .add_service(runtime)
        .add_service(images)
        .add_optional_service(runtime_v1alpha2)
        .add_optional_service(images_v1alpha2)
        .serve_with_incoming_shutdown(crate::cri::normalized_connections(listener), async move {
            shutdown_signal().await;
            if let Some(task) = readiness {
                task.abort();
            }
            service.stopping("stopping: finishing the calls in flight; pods keep running");
            let _ = stop_tx.send(true);
        });
    let grace = async move {
        let mut stop_rx = stop_rx;
        let _ = stop_rx.wait_for(|stop| *stop).await;
        tokio::time::sleep(SHUTDOWN_GRACE).await;
    };
    let served = tokio::select! {
        served = server => served,
        () = grace => {
            tracing::info!("grace period over; closing open connections");
            Ok(())
        }
    };
    let _ = std::fs::remove_file(&config.socket);
    served.context("gRPC server")?;
    tracing::info!("stopped serving; pods keep running");
    Ok(())
}

/// Whether containers are confined by AppArmor: when the kernel enforces
/// it, with nidus's default profile loaded (now, unless it is already). A
/// profile that cannot be loaded stops the start: nidus never runs
/// unconfined the containers it would promise to confine.
fn apparmor_at_start() -> anyhow::Result<bool> {
    if !crate::apparmor::enabled() {
        if crate::apparmor::kernel_enabled() {
            tracing::warn!("the kernel runs AppArmor but securityfs is not mounted at /sys/kernel/security: containers run unconfined by it");
        } else {
            tracing::info!("AppArmor is not enabled on this node: containers run unconfined by it");
        }
        return Ok(false);
    }
    let loaded_now = crate::apparmor::ensure_default_loaded().context("AppArmor is enabled on this node")?;
    tracing::info!(
        profile = crate::apparmor::DEFAULT_PROFILE,
        loaded_now,
        "AppArmor is enabled: containers run under their profile (RuntimeDefault: the default profile)"
    );
    Ok(true)
}

/// How often cgroups whose removal failed are tried again.
const STALE_CGROUP_RETRY: std::time::Duration = std::time::Duration::from_secs(10);

/// Retries, in the background, the removal of cgroups that could not be
/// removed with their container or pod.
fn spawn_stale_cgroup_retries(owned: Arc<OwnedCgroups>) {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(STALE_CGROUP_RETRY);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            let owned = owned.clone();
            let left = tokio::task::spawn_blocking(move || owned.retry_stale()).await.unwrap_or_default();
            if !left.is_empty() {
                tracing::warn!(cgroups = ?left.iter().map(|c| c.to_string()).collect::<Vec<_>>(), "cgroups still left to remove");
            }
        }
    });
}

/// Opens the image store under `--root` and imports what is new in the
/// import directory, off the async threads.
/// Runs `nidus probe-userns` (this binary; it forks and changes its mount
/// namespace, which the daemon itself never does) on the file system of
/// the image layers, with a time limit.
async fn probe_user_namespaces(reaper: &Reaper, root: &std::path::Path) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the nidus binary: {e}"))?;
    let scratch = root.join("images");
    let mut command = std::process::Command::new(exe);
    command.arg("probe-userns").arg("--scratch").arg(&scratch).env_clear();
    let finished = reaper
        .run(&mut command, b"", 4096, std::time::Duration::from_secs(10))
        .await
        .map_err(|e| format!("the probe could not run: {e}"))?;
    let said = String::from_utf8_lossy(&finished.stdout).trim().to_string();
    match (finished.status.success(), said.as_str()) {
        (true, "ok") => Ok(()),
        (_, "") => Err(format!("the probe ended ({})", finished.status)),
        _ => Err(said),
    }
}

async fn open_images(config: &Config) -> Result<Arc<ImageStore>> {
    let (root, import_dir) = (config.root.clone(), config.import_dir());
    let images = tokio::task::spawn_blocking(move || ImageStore::open_and_import(&root, &import_dir))
        .await
        .context("opening the image store")?
        .context("opening the image store")?;
    Ok(Arc::new(images))
}

/// A helper program installed beside this binary (`nidus-pause`, `nidus-monitor`).
fn sibling_program(name: &str) -> Result<PathBuf> {
    let me = std::env::current_exe().context("finding the nidus binary")?;
    let path = me.with_file_name(name);
    if !path.is_file() {
        bail!("{} is missing: it is installed beside nidus (make build puts both in target/release)", path.display());
    }
    Ok(path)
}

/// How long a socket that still answers may take to go quiet before it is
/// refused as another process's.
const LIVE_SOCKET_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// Binds the CRI socket: its directory is created 0700 when missing, a stale
/// socket left by a crash is replaced, a live one is refused; the socket is 0660.
/// A socket that answers gets a moment first: the listener of an instance
/// killed a moment ago lives on in a child of it that has forked but not yet
/// exec'd (and closed its copies of our descriptors).
async fn bind_socket(path: &Path) -> Result<UnixListener> {
    let dir = path.parent().context("socket path has no directory")?;
    store::create_dir_all(dir, 0o700).with_context(|| format!("creating {}", dir.display()))?;
    if path.exists() {
        let deadline = tokio::time::Instant::now() + LIVE_SOCKET_WAIT;
        while crate::linux::socket::connect(path).is_ok() {
            if tokio::time::Instant::now() >= deadline {
                bail!("socket {} is in use by another process", path.display());
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        std::fs::remove_file(path).with_context(|| format!("removing stale socket {}", path.display()))?;
    }
    let listener = crate::linux::socket::bind(path).with_context(|| format!("binding {}", path.display()))?;
    listener.set_nonblocking(true).context("socket")?;
    let listener = UnixListener::from_std(listener).context("socket")?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))
        .with_context(|| format!("chmod 0660 {}", path.display()))?;
    Ok(listener)
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received"),
        _ = int.recv() => tracing::info!("SIGINT received"),
    }
}
