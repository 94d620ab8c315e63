//! Source NAT for what the built-in network's pods send off the node: one
//! nftables table per bridge (`inet nidus_<bridge>`) whose postrouting chain
//! masquerades packets that came in from the bridge and leave through any
//! other interface, so replies find their way back to pods whose addresses
//! the rest of the network does not route. Pod-to-pod and pod-to-node
//! traffic is untouched. The table is written with Debian's `nft` in one
//! atomic transaction that replaces whatever table of that name was there,
//! so applying it again (a restart, a new pod CIDR) is harmless; with
//! `network.masquerade = false` the table is removed instead.

use super::nft::{self, NftError};
use crate::linux::reaper::Reaper;

#[derive(Debug, thiserror::Error)]
pub(crate) enum MasqueradeError {
    #[error("{0}; or set network.masquerade = false")]
    Nft(#[from] NftError),
}

/// The nftables table of the bridge `bridge` (a name the config checked:
/// letters, digits, `_`, `-` and `.`).
pub(crate) fn table_name(bridge: &str) -> String {
    format!("nidus_{}", bridge.replace(['-', '.'], "_"))
}

/// The transaction that replaces the bridge's table with one masquerading
/// its pods' traffic off the node (`enabled`), or removes it.
fn transaction(bridge: &str, enabled: bool) -> String {
    let table = table_name(bridge);
    let mut script = nft::replace_table(&table);
    if enabled {
        script.push_str(&format!(
            "table inet {table} {{\n\tchain postrouting {{\n\t\ttype nat hook postrouting priority 100; policy accept;\n\t\tiifname \"{bridge}\" oifname != \"{bridge}\" masquerade\n\t}}\n}}\n"
        ));
    }
    script
}

/// Writes the bridge's table (`enabled`) or removes it. Without `nft`,
/// removing is a no-op (nothing can have written the table).
pub(crate) async fn apply(bridge: &str, enabled: bool, reaper: &Reaper) -> Result<(), MasqueradeError> {
    if !enabled && nft::program().is_none() {
        return Ok(());
    }
    Ok(nft::apply(&transaction(bridge, enabled), reaper).await?)
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
