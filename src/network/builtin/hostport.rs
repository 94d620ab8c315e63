//! Host ports of the built-in network, forwarded by the kernel: DNAT rules
//! in an nftables table of their own (`inet nidus_hp_<bridge>`), as the CNI
//! portmap plugin does with iptables. No descriptor, memory or task of the
//! daemon is spent per client; the pod sees the client's real address; a
//! daemon restart cuts nothing (the rules stay in the kernel and a
//! restarted daemon rewrites the same table from its attachment cache).
//!
//! The table is rewritten whole, atomically, whenever the set of forwards
//! changes (a pod with host ports attached or detached), and removed when
//! none is left. Connections from the node itself reach a host port on any
//! of its addresses (the `output` hook), 127.0.0.1 included: such packets
//! are masqueraded to the bridge's address, and the bridge routes loopback
//! sources (`route_localnet`). A pod reaching its own host port through the
//! node (hairpin) is masqueraded too, so the reply comes back the same way,
//! and so is a neighbour's packet that the bridge routed (when the bridge
//! switches it at layer 2 with bridge netfilter on, conntrack answers it
//! there). IPv6 loopback cannot be routed off `lo`, so `[::1]`
//! reaches no host port.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::IpAddr;

use super::nft;
use crate::linux::reaper::Reaper;
use crate::network::HostPort;

/// One host port forwarded to a pod address and port.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Forward {
    /// `tcp`, `udp` or `sctp`.
    protocol: String,
    /// None: every address of the node.
    host_ip: Option<IpAddr>,
    host_port: u16,
    pod_ip: IpAddr,
    container_port: u16,
}

impl Forward {
    /// True when both would take the same packets.
    fn overlaps(&self, other: &Forward) -> bool {
        self.protocol == other.protocol
            && self.host_port == other.host_port
            && (self.host_ip.is_none() || other.host_ip.is_none() || self.host_ip == other.host_ip)
            && self.pod_ip.is_ipv6() == other.pod_ip.is_ipv6()
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum HostPortError {
    #[error("host port {port}: the pod has no {family} address")]
    NoAddress { port: u16, family: &'static str },
    #[error("host port {port}: protocol {protocol} is not forwarded (tcp, udp and sctp are)")]
    Protocol { port: u16, protocol: String },
    #[error("host port {port}/{protocol} is already forwarded to pod {owner}")]
    InUse { port: u16, protocol: String, owner: String },
    #[error("cannot write the host port rules: {0}")]
    Nft(#[from] nft::NftError),
}

pub(crate) struct HostPorts {
    bridge: String,
    table: String,
    reaper: Reaper,
    /// Each pod's forwards; the lock is held across a rewrite, so the table
    /// always ends up as the last state.
    by_pod: tokio::sync::Mutex<BTreeMap<String, Vec<Forward>>>,
}

/// The host-port table of `bridge` (a name the config restricts to letters,
/// digits, `_`, `-` and `.`).
pub(crate) fn table_name(bridge: &str) -> String {
    format!("nidus_hp_{}", bridge.replace(['-', '.'], "_"))
}

impl HostPorts {
    pub(crate) fn new(bridge: &str, reaper: Reaper) -> Self {
        Self { bridge: bridge.to_string(), table: table_name(bridge), reaper, by_pod: Default::default() }
    }

    /// Forwards every mapping of a pod (replacing any it had) and rewrites
    /// the table. A mapping that cannot be forwarded fails the whole, and
    /// the pod then has none.
    pub(crate) async fn open(
        &self,
        sandbox_id: &str,
        mappings: &[HostPort],
        pod_ips: &[IpAddr],
    ) -> Result<(), HostPortError> {
        let mut by_pod = self.by_pod.lock().await;
        let wanted = forwards(mappings, pod_ips)?;
        for forward in &wanted {
            let taken = by_pod
                .iter()
                .filter(|(owner, _)| owner.as_str() != sandbox_id)
                .find_map(|(owner, theirs)| theirs.iter().any(|t| t.overlaps(forward)).then(|| owner.clone()));
            if let Some(owner) = taken {
                return Err(HostPortError::InUse {
                    port: forward.host_port,
                    protocol: forward.protocol.clone(),
                    owner,
                });
            }
        }
        let before = by_pod.insert(sandbox_id.to_string(), wanted);
        if let Err(e) = self.write(&by_pod).await {
            match before {
                Some(before) => by_pod.insert(sandbox_id.to_string(), before),
                None => by_pod.remove(sandbox_id),
            };
            return Err(e);
        }
        tracing::debug!(pod_id = %sandbox_id, ports = mappings.len(), "host ports forwarded");
        Ok(())
    }

    /// Stops forwarding a pod's host ports. A failed rewrite is logged: the
    /// pod is forgotten here all the same, and the next rewrite (another
    /// pod's, or the next start's) takes its rules away.
    pub(crate) async fn close(&self, sandbox_id: &str) {
        let mut by_pod = self.by_pod.lock().await;
        if by_pod.remove(sandbox_id).is_some() {
            if let Err(e) = self.write(&by_pod).await {
                tracing::warn!(pod_id = %sandbox_id, error = %e, "cannot remove the pod's host port rules now");
            }
        }
    }

    /// After a restart: a running pod's forwards, kept for the rewrite that
    /// `sync` makes once every pod is back (one `nft` run in all).
    pub(crate) async fn restore(&self, sandbox_id: &str, mappings: &[HostPort], pod_ips: &[IpAddr]) {
        match forwards(mappings, pod_ips) {
            Ok(wanted) => {
                self.by_pod.lock().await.insert(sandbox_id.to_string(), wanted);
            }
            Err(e) => tracing::error!(pod_id = %sandbox_id, error = %e, "cannot forward the pod's host ports again"),
        }
    }

    /// Rewrites the table from the forwards known now (at start, after
    /// `restore`): rules of pods removed meanwhile go; with none left the
    /// table goes (nothing to do when `nft` is not installed: nothing can
    /// have written it).
    pub(crate) async fn sync(&self) {
        let by_pod = self.by_pod.lock().await;
        if by_pod.is_empty() && nft::program().is_none() {
            return;
        }
        if let Err(e) = self.write(&by_pod).await {
            tracing::error!(error = %e, "cannot write the host port rules");
        }
    }

    async fn write(&self, by_pod: &BTreeMap<String, Vec<Forward>>) -> Result<(), HostPortError> {
        let all: Vec<&Forward> = by_pod.values().flatten().collect();
        if !all.is_empty() && all.iter().any(|f| f.host_ip.is_none_or(|ip| ip.is_loopback()) && f.pod_ip.is_ipv4()) {
            // Packets from 127.0.0.1 may leave through the bridge (then masqueraded).
            let knob = format!("/proc/sys/net/ipv4/conf/{}/route_localnet", self.bridge);
            if let Err(e) = std::fs::write(&knob, "1") {
                tracing::warn!(knob, error = %e, "host ports will not answer on 127.0.0.1");
            }
        }
        nft::apply(&transaction(&self.table, &self.bridge, &all), &self.reaper).await?;
        Ok(())
    }
}

/// A pod's mappings as forwards to its addresses: a wildcard host address
/// forwards each family the pod has; a given one, its own family.
fn forwards(mappings: &[HostPort], pod_ips: &[IpAddr]) -> Result<Vec<Forward>, HostPortError> {
    let mut out = Vec::new();
    for mapping in mappings {
        if !matches!(mapping.protocol.as_str(), "tcp" | "udp" | "sctp") {
            return Err(HostPortError::Protocol { port: mapping.host_port, protocol: mapping.protocol.clone() });
        }
        let targets: Vec<IpAddr> = match mapping.host_ip {
            Some(host_ip) => pod_ips.iter().filter(|ip| ip.is_ipv6() == host_ip.is_ipv6()).take(1).copied().collect(),
            None => {
                let v4 = pod_ips.iter().find(|ip| ip.is_ipv4());
                let v6 = pod_ips.iter().find(|ip| ip.is_ipv6());
                v4.into_iter().chain(v6).copied().collect()
            }
        };
        if targets.is_empty() {
            let family = if mapping.host_ip.is_some_and(|ip| ip.is_ipv6()) { "IPv6" } else { "IPv4" };
            return Err(HostPortError::NoAddress { port: mapping.host_port, family });
        }
        for pod_ip in targets {
            out.push(Forward {
                protocol: mapping.protocol.clone(),
                host_ip: mapping.host_ip,
                host_port: mapping.host_port,
                pod_ip,
                container_port: mapping.container_port,
            });
        }
    }
    Ok(out)
}

/// The transaction that replaces `table` with one forwarding `all`, or
/// removes it when there is nothing to forward.
fn transaction(table: &str, bridge: &str, all: &[&Forward]) -> String {
    let mut script = nft::replace_table(table);
    if all.is_empty() {
        return script;
    }
    let mut dnat = String::new();
    let mut snat = String::new();
    for f in all {
        let (family, proto) = if f.pod_ip.is_ipv6() { ("ip6", "ipv6") } else { ("ip", "ipv4") };
        let to = match f.pod_ip {
            IpAddr::V4(ip) => format!("{ip}:{}", f.container_port),
            IpAddr::V6(ip) => format!("[{ip}]:{}", f.container_port),
        };
        let matched = match f.host_ip {
            Some(host_ip) => format!("{family} daddr {host_ip}"),
            None => format!("meta nfproto {proto}"),
        };
        let _ =
            writeln!(dnat, "\t\t{matched} meta l4proto {} th dport {} dnat {family} to {to}", f.protocol, f.host_port);
        // The pod's own packets come back to it (hairpin) only if they seem
        // to come from the node; so do those of 127.0.0.1 and, when the
        // bridge routed them, those of its other pods.
        let to_pod = format!(
            "ct status dnat {family} daddr {} meta l4proto {} th dport {}",
            f.pod_ip, f.protocol, f.container_port
        );
        let _ = writeln!(snat, "\t\t{to_pod} {family} saddr {} masquerade", f.pod_ip);
        let _ = writeln!(snat, "\t\t{to_pod} jump masquerade_to_pod");
    }
    let _ = write!(
        script,
        "table inet {table} {{\n\
         \tchain prerouting {{\n\t\ttype nat hook prerouting priority dstnat; policy accept;\n\t\tfib daddr type local jump hostports\n\t}}\n\
         \tchain output {{\n\t\ttype nat hook output priority -100; policy accept;\n\t\tfib daddr type local jump hostports\n\t}}\n\
         \tchain hostports {{\n{dnat}\t}}\n\
         \tchain postrouting {{\n\t\ttype nat hook postrouting priority srcnat; policy accept;\n{snat}\t}}\n\
         \tchain masquerade_to_pod {{\n\t\tip saddr 127.0.0.0/8 masquerade\n\t\tiifname \"{bridge}\" masquerade\n\t}}\n\
         }}\n"
    );
    script
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapping(protocol: &str, host_ip: Option<&str>, host_port: u16, container_port: u16) -> HostPort {
        HostPort {
            protocol: protocol.into(),
            host_ip: host_ip.map(|ip| ip.parse().unwrap()),
            host_port,
            container_port,
        }
    }

    #[test]
    fn mappings_become_dnat_rules_per_family_and_a_table_removal_when_none_is_left() {
        let ips: Vec<IpAddr> = vec!["10.98.0.2".parse().unwrap(), "fd00::2".parse().unwrap()];
        let all = forwards(
            &[
                mapping("tcp", None, 18080, 8080),
                mapping("udp", Some("10.0.0.1"), 53, 5353),
                mapping("sctp", Some("fd00::1"), 99, 9),
            ],
            &ips,
        )
        .unwrap();
        assert_eq!(all.len(), 4, "the wildcard forwards both families: {all:?}");
        let refs: Vec<&Forward> = all.iter().collect();
        let script = transaction("nidus_hp_br0", "br0", &refs);
        assert!(script.starts_with("table inet nidus_hp_br0 {}\ndelete table inet nidus_hp_br0\n"), "{script}");
        for rule in [
            "meta nfproto ipv4 meta l4proto tcp th dport 18080 dnat ip to 10.98.0.2:8080",
            "meta nfproto ipv6 meta l4proto tcp th dport 18080 dnat ip6 to [fd00::2]:8080",
            "ip daddr 10.0.0.1 meta l4proto udp th dport 53 dnat ip to 10.98.0.2:5353",
            "ip6 daddr fd00::1 meta l4proto sctp th dport 99 dnat ip6 to [fd00::2]:9",
            "fib daddr type local jump hostports",
            "ct status dnat ip daddr 10.98.0.2 meta l4proto tcp th dport 8080 jump masquerade_to_pod",
            "ct status dnat ip daddr 10.98.0.2 meta l4proto tcp th dport 8080 ip saddr 10.98.0.2 masquerade",
            "iifname \"br0\" masquerade",
        ] {
            assert!(script.contains(rule), "{rule:?} missing from:\n{script}");
        }
        assert_eq!(transaction("t", "br0", &[]), "table inet t {}\ndelete table inet t\n");
    }

    #[test]
    fn what_cannot_be_forwarded_is_refused() {
        let v4: Vec<IpAddr> = vec!["10.98.0.2".parse().unwrap()];
        assert!(matches!(forwards(&[mapping("icmp", None, 1, 1)], &v4), Err(HostPortError::Protocol { .. })));
        assert!(matches!(
            forwards(&[mapping("tcp", Some("fd00::1"), 80, 80)], &v4),
            Err(HostPortError::NoAddress { family: "IPv6", .. })
        ));
        let a = &forwards(&[mapping("tcp", None, 80, 8080)], &v4).unwrap()[0];
        let b = &forwards(&[mapping("tcp", Some("10.0.0.1"), 80, 9090)], &v4).unwrap()[0];
        let c = &forwards(&[mapping("udp", None, 80, 8080)], &v4).unwrap()[0];
        assert!(a.overlaps(b) && b.overlaps(a), "a wildcard takes every address's port");
        assert!(!a.overlaps(c), "another protocol");
    }
}
