//! The nidus command line: `serve` (the CRI daemon), `pause` (a pod's pause
//! process, started by the daemon) and `config default`.

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
    /// Configuration helpers.
    #[command(subcommand)]
    Config(ConfigCommand),
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
    let cli = Cli::parse();
    match cli.command {
        Command::Pause(args) => ExitCode::from(nidus::pod::pause::run(&args) as u8),
        Command::Config(ConfigCommand::Default) => {
            print!("{}", Config::default().to_toml());
            ExitCode::SUCCESS
        }
        Command::Serve(args) => serve(args),
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
    let images: std::sync::Arc<dyn nidus::container::ImageSource> = std::sync::Arc::new(nidus::container::NoImages);
    match runtime.block_on(nidus::daemon::serve(config, images)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            eprintln!("nidus: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(config: &Config) {
    let filter = tracing_subscriber::EnvFilter::try_new(&config.log_level)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
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
