//! Running Debian's `nft` for the built-in network's tables: one script, one
//! atomic transaction, with a time limit and bounded output. The masquerade
//! and host-port tables both go through it.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use crate::linux::reaper::{ExitStatus, Reaper, RunError};

/// How long one `nft` run may take.
const NFT_TIMEOUT: Duration = Duration::from_secs(10);
/// Where Debian's nftables package installs `nft`.
const NFT_PATHS: [&str; 3] = ["/usr/sbin/nft", "/sbin/nft", "/usr/bin/nft"];
/// The most read of nft's output, and the most of it an error message carries.
const MAX_OUTPUT: u64 = 64 << 10;
const MAX_STDERR: usize = 600;

#[derive(Debug, thiserror::Error)]
pub(crate) enum NftError {
    #[error("nft is not installed (looked for {0}); install Debian's nftables")]
    NoNft(String),
    #[error("running {program}: {source}")]
    Run { program: String, source: std::io::Error },
    #[error("nft: {0}")]
    Failed(RunError),
    #[error("nft refused the rules ({status}): {stderr}")]
    Refused { status: ExitStatus, stderr: String },
}

/// The `nft` program, if installed.
pub(crate) fn program() -> Option<&'static str> {
    NFT_PATHS.iter().copied().find(|p| Path::new(p).exists())
}

/// Applies `script` (`nft -f -`) as one transaction.
pub(crate) async fn apply(script: &str, reaper: &Reaper) -> Result<(), NftError> {
    let Some(program) = program() else {
        return Err(NftError::NoNft(NFT_PATHS.join(", ")));
    };
    let mut command = Command::new(program);
    command.args(["-f", "-"]).env_clear();
    let finished = match reaper.run(&mut command, script.as_bytes(), MAX_OUTPUT, NFT_TIMEOUT).await {
        Ok(finished) => finished,
        Err(RunError::Io(source)) => return Err(NftError::Run { program: program.to_string(), source }),
        Err(other) => return Err(NftError::Failed(other)),
    };
    if !finished.status.success() {
        let stderr = String::from_utf8_lossy(&finished.stderr);
        let stderr: String = stderr.trim().chars().take(MAX_STDERR).collect();
        return Err(NftError::Refused { status: finished.status, stderr });
    }
    Ok(())
}

/// The start of a transaction that replaces table `inet <table>`: adding an
/// empty one first makes the delete succeed when none exists.
pub(crate) fn replace_table(table: &str) -> String {
    format!("table inet {table} {{}}\ndelete table inet {table}\n")
}
