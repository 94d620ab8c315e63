//! Source NAT for what the built-in network's pods send off the node: one
//! nftables table per bridge (`inet nidus_<bridge>`) whose postrouting chain
//! masquerades packets that came in from the bridge and leave through any
//! other interface, so replies find their way back to pods whose addresses
//! the rest of the network does not route. Pod-to-pod and pod-to-node
//! traffic is untouched. The table is written with Debian's `nft` in one
//! atomic transaction that replaces whatever table of that name was there,
//! so applying it again (a restart, a new pod CIDR) is harmless; with
//! `network.masquerade = false` the table is removed instead.

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
pub enum MasqueradeError {
    #[error("nft is not installed (looked for {0}); install Debian's nftables, or set network.masquerade = false")]
    NoNft(String),
    #[error("running {program}: {source}")]
    Run { program: String, source: std::io::Error },
    #[error("nft took longer than {0:?}")]
    Timeout(Duration),
    #[error("nft refused the rules ({status}): {stderr}")]
    Refused { status: ExitStatus, stderr: String },
}

/// The nftables table of the bridge `bridge` (a name the config checked:
/// letters, digits, `_`, `-` and `.`).
pub fn table_name(bridge: &str) -> String {
    format!("nidus_{}", bridge.replace(['-', '.'], "_"))
}

/// The transaction that replaces the bridge's table with one masquerading
/// its pods' traffic off the node (`enabled`), or removes it.
fn transaction(bridge: &str, enabled: bool) -> String {
    let table = table_name(bridge);
    // Adding an empty table first makes the delete succeed when none exists.
    let mut script = format!("table inet {table} {{}}\ndelete table inet {table}\n");
    if enabled {
        script.push_str(&format!(
            "table inet {table} {{\n\tchain postrouting {{\n\t\ttype nat hook postrouting priority 100; policy accept;\n\t\tiifname \"{bridge}\" oifname != \"{bridge}\" masquerade\n\t}}\n}}\n"
        ));
    }
    script
}

/// Writes the bridge's table (`enabled`) or removes it. Without `nft`,
/// removing is a no-op (nothing can have written the table).
pub async fn apply(bridge: &str, enabled: bool, reaper: &Reaper) -> Result<(), MasqueradeError> {
    let Some(program) = NFT_PATHS.iter().find(|p| Path::new(p).exists()) else {
        return match enabled {
            true => Err(MasqueradeError::NoNft(NFT_PATHS.join(", "))),
            false => Ok(()),
        };
    };
    let mut command = Command::new(program);
    command.args(["-f", "-"]).env_clear();
    let script = transaction(bridge, enabled);
    let finished = match reaper.run(&mut command, script.as_bytes(), MAX_OUTPUT, NFT_TIMEOUT).await {
        Ok(finished) => finished,
        Err(RunError::Io(source)) => return Err(MasqueradeError::Run { program: program.to_string(), source }),
        Err(RunError::Timeout(limit)) => return Err(MasqueradeError::Timeout(limit)),
    };
    if !finished.status.success() {
        let stderr = String::from_utf8_lossy(&finished.stderr);
        let stderr: String = stderr.trim().chars().take(MAX_STDERR).collect();
        return Err(MasqueradeError::Refused { status: finished.status, stderr });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_masquerades_only_what_leaves_the_bridge_for_elsewhere() {
        let script = transaction("nidus-0.a", true);
        assert!(script.starts_with("table inet nidus_nidus_0_a {}\ndelete table inet nidus_nidus_0_a\n"), "{script}");
        assert!(script.contains("type nat hook postrouting priority 100;"), "{script}");
        assert!(script.contains("iifname \"nidus-0.a\" oifname != \"nidus-0.a\" masquerade"), "{script}");
        let removal = transaction("nidus0", false);
        assert_eq!(removal, "table inet nidus_nidus0 {}\ndelete table inet nidus_nidus0\n");
    }
}
