//! The nidus command line: `serve` (the CRI daemon), `pause` (a pod's pause
//! process, started by the daemon), `image import`, `config default`,
//! `seccomp check`, and `checkpoint`/`restore` (CRI calls on the socket).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use nidus::config::{Config, LogFormat, Overrides};

#[derive(Parser)]
#[command(
    name = "nidus",
    version,
    about = "An embedded, minimal Kubernetes container runtime (CRI runtime.v1 and runtime.v1alpha2)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve the CRI on a Unix socket.
    Serve(ServeArgs),
    /// Run a pod's pause process (started by `nidus serve`).
    #[command(hide = true)]
    Pause(nidus::pod::pause::PauseArgs),
    /// Whether user-namespaced pods can work here (run by `nidus serve` at start).
    #[command(hide = true)]
    ProbeUserns {
        /// A directory on the file system of the image layers.
        #[arg(long)]
        scratch: std::path::PathBuf,
    },
    /// The local image store.
    #[command(subcommand)]
    Image(ImageCommand),
    /// Configuration helpers.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Seccomp profiles.
    #[command(subcommand)]
    Seccomp(SeccompCommand),
    /// Checkpoint a running container into a root-only archive (CRIU); it keeps running.
    Checkpoint(CheckpointArgs),
    /// Restore a checkpoint archive into a pod sandbox as a new container, and start it.
    Restore(RestoreArgs),
}

#[derive(clap::Args)]
struct CheckpointArgs {
    /// The container id (or a unique prefix).
    container: String,
    /// Where the archive goes (a new file; relative paths are taken from here).
    location: PathBuf,
    /// Seconds the dump may take (0: the daemon's default).
    #[arg(long, default_value_t = 0)]
    timeout: i64,
    /// The daemon's CRI socket.
    #[arg(long, default_value = "/run/nidus/nidus.sock")]
    socket: PathBuf,
}

#[derive(clap::Args)]
struct RestoreArgs {
    /// The checkpoint archive.
    archive: PathBuf,
    /// The pod sandbox id (or a unique prefix) to restore into.
    #[arg(long)]
    pod: String,
    /// The new container's name (default: the checkpointed container's).
    #[arg(long)]
    name: Option<String>,
    /// The daemon's CRI socket.
    #[arg(long, default_value = "/run/nidus/nidus.sock")]
    socket: PathBuf,
}

#[derive(Subcommand)]
enum SeccompCommand {
    /// Check an OCI seccomp profile (default: the embedded RuntimeDefault):
    /// what it compiles to for a set of capabilities, and what each step of
    /// confining a container with it costs. Prints JSON.
    Check(SeccompCheckArgs),
}

#[derive(clap::Args)]
struct SeccompCheckArgs {
    /// The profile file (OCI runtime-spec `linux.seccomp` JSON).
    profile: Option<PathBuf>,
    /// The container's capabilities (default: the default set of a container).
    #[arg(long, value_delimiter = ',')]
    capabilities: Option<Vec<String>>,
    /// How many times each step is measured.
    #[arg(long, default_value_t = 200)]
    runs: u32,
    /// Also time installing the filters (in forked children).
    #[arg(long)]
    install: bool,
}

#[derive(Subcommand)]
enum ImageCommand {
    /// Import an OCI image layout directory, or an OCI or docker-archive
    /// tarball (plain, gzip or zstd), into the store under --root; works while
    /// the daemon runs, which lists the image at once.
    Import(ImportArgs),
    /// Pull an image from its registry through the daemon (PullImage), with
    /// its progress: a bar per layer on a terminal, plain lines otherwise.
    Pull(PullArgs),
    /// List the pulls the daemon has in flight.
    Pulls(PullsArgs),
}

#[derive(clap::Args)]
struct PullArgs {
    /// The image, e.g. `busybox:1.36` or `registry.k8s.io/pause@sha256:…`.
    reference: String,
    /// Registry credentials as `username:password`.
    #[arg(long, env = "NIDUS_PULL_CREDS", hide_env_values = true)]
    creds: Option<String>,
    /// The daemon's CRI socket.
    #[arg(long, default_value = "/run/nidus/nidus.sock")]
    socket: PathBuf,
}

#[derive(clap::Args)]
struct PullsArgs {
    /// The daemon's CRI socket.
    #[arg(long, default_value = "/run/nidus/nidus.sock")]
    socket: PathBuf,
}

#[derive(clap::Args)]
struct ImportArgs {
    /// The archive to import.
    path: PathBuf,
    /// Name to give the image (e.g. `busybox:1.36`); the archive must hold one image.
    #[arg(long)]
    name: Option<String>,
    /// TOML config file (default: /etc/nidus/config.toml when present).
    #[arg(long)]
    config: Option<PathBuf>,
    /// CRI socket of the daemon, asked whether it lists the image.
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Persistent state directory holding the image store.
    #[arg(long)]
    root: Option<PathBuf>,
    /// Log filter for messages on stderr.
    #[arg(long, default_value = "warn")]
    log_level: String,
}

#[derive(clap::Args)]
struct ServeArgs {
    /// TOML config file (default: /etc/nidus/config.toml when present).
    #[arg(long)]
    config: Option<PathBuf>,
    /// CRI socket path.
    #[arg(long)]
    socket: Option<PathBuf>,
    /// Persistent state directory.
    #[arg(long)]
    root: Option<PathBuf>,
    /// Volatile state directory.
    #[arg(long)]
    state: Option<PathBuf>,
    /// Cgroup root: absolute, or relative to the daemon's own cgroup.
    #[arg(long)]
    cgroup_root: Option<String>,
    /// Log filter (error, warn, info, debug, trace, or a tracing directive).
    #[arg(long)]
    log_level: Option<String>,
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Print the embedded default configuration as TOML.
    Default,
}

fn main() -> ExitCode {
    // Every mode nidus gives a file or directory (image layers' directories,
    // containers' upper dirs, pod files) assumes this umask, whatever the
    // shell or service manager that started us had: under 077, a container
    // running as non-root could not even reach its own `/`.
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o022));
    let cli = Cli::parse();
    match cli.command {
        Command::Pause(args) => ExitCode::from(nidus::pod::pause::run(&args) as u8),
        Command::ProbeUserns { scratch } => match nidus::linux::userns::probe(&scratch) {
            Ok(()) => {
                println!("ok");
                ExitCode::SUCCESS
            }
            Err(why) => {
                println!("{why}");
                ExitCode::FAILURE
            }
        },
        Command::Config(ConfigCommand::Default) => {
            print!("{}", Config::default().to_toml());
            ExitCode::SUCCESS
        }
        Command::Serve(args) => serve(args),
        Command::Image(ImageCommand::Import(args)) => image_import(args),
        Command::Image(ImageCommand::Pull(args)) => {
            on_socket(nidus::image::pull::cli::pull(&args.socket, &args.reference, args.creds.as_deref()))
        }
        Command::Image(ImageCommand::Pulls(args)) => on_socket(nidus::image::pull::cli::list(&args.socket)),
        Command::Seccomp(SeccompCommand::Check(args)) => seccomp_check(args),
        Command::Checkpoint(args) => {
            on_socket(nidus::checkpoint::cli::checkpoint(&args.socket, &args.container, &args.location, args.timeout))
        }
        Command::Restore(args) => on_socket(async move {
            let id =
                nidus::checkpoint::cli::restore(&args.socket, &args.archive, &args.pod, args.name.as_deref()).await?;
            println!("{id}");
            Ok(())
        }),
    }
}

/// Runs a CRI client call to completion; its error on stderr.
fn on_socket(call: impl std::future::Future<Output = Result<(), String>>) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("nidus: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(call) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nidus: {e}");
            ExitCode::FAILURE
        }
    }
}

fn seccomp_check(args: SeccompCheckArgs) -> ExitCode {
    let json = match &args.profile {
        Some(path) => match std::fs::read(path) {
            Ok(json) => json,
            Err(e) => {
                eprintln!("nidus: {}: {e}", path.display());
                return ExitCode::from(2);
            }
        },
        None => nidus::seccomp::RUNTIME_DEFAULT_JSON.as_bytes().to_vec(),
    };
    let names: Vec<String> = match args.capabilities {
        Some(list) => list,
        None => nidus::capabilities::DEFAULT.iter().map(|c| c.to_string()).collect(),
    };
    let mut bounding = std::collections::BTreeSet::new();
    for name in names.iter().filter(|n| !n.is_empty()) {
        match nidus::capabilities::normalize(name) {
            Ok(cap) => bounding.insert(format!("CAP_{cap}")),
            Err(e) => {
                eprintln!("nidus: --capabilities: {e}");
                return ExitCode::from(2);
            }
        };
    }
    match nidus::seccomp::check::check(&json, &bounding, args.runs.max(1), args.install) {
        Ok(report) => {
            println!("{}", serde_json::to_string_pretty(&report).unwrap_or_default());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("nidus: {e}");
            ExitCode::FAILURE
        }
    }
}

fn image_import(args: ImportArgs) -> ExitCode {
    let overrides =
        Overrides { socket: args.socket, root: args.root, log_level: Some(args.log_level), ..Default::default() };
    let config = match Config::load(args.config.as_deref(), overrides) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("nidus: {e}");
            return ExitCode::from(2);
        }
    };
    init_logging(&config);
    match nidus::image::cli::import(&config, &args.path, args.name.as_deref()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nidus: {e}");
            ExitCode::FAILURE
        }
    }
}

fn serve(args: ServeArgs) -> ExitCode {
    let overrides = Overrides {
        socket: args.socket,
        root: args.root,
        state: args.state,
        cgroup_root: args.cgroup_root,
        log_level: args.log_level,
    };
    let config = match Config::load(args.config.as_deref(), overrides) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("nidus: {e}");
            return ExitCode::from(2);
        }
    };
    init_logging(&config);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("nidus: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(nidus::daemon::serve(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            eprintln!("nidus: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// libcgroups warns at every cgroup v2 apply of each controller the kernel
/// has and it does not know (`rdma`, `misc`): noise in an operator's
/// journal at every pod. Quieted unless `log_level` names libcgroups.
const QUIET_LIBCGROUPS: &str = "libcgroups::v2::util=error";

fn init_logging(config: &Config) {
    let level = match config.log_level.contains("libcgroups") {
        true => config.log_level.clone(),
        false => format!("{},{QUIET_LIBCGROUPS}", config.log_level),
    };
    let filter = tracing_subscriber::EnvFilter::try_new(&level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("info,{QUIET_LIBCGROUPS}")));
    use std::io::IsTerminal;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    match config.log_format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}
