//! A pod's network counters, per interface, from `/proc/<pid>/net/dev` of a
//! process in the pod's network namespace (the pause): procfs shows each
//! process's own namespace there, so no thread has to enter it.

use std::fs;

use serde::Serialize;

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub(crate) struct InterfaceUsage {
    pub(crate) name: String,
    pub(crate) rx_bytes: u64,
    pub(crate) rx_packets: u64,
    pub(crate) rx_errors: u64,
    pub(crate) rx_dropped: u64,
    pub(crate) tx_bytes: u64,
    pub(crate) tx_packets: u64,
    pub(crate) tx_errors: u64,
    pub(crate) tx_dropped: u64,
}

/// The interfaces of the network namespace `pid` is in; None when it is gone.
pub(crate) fn interfaces_of(pid: i32) -> Option<Vec<InterfaceUsage>> {
    fs::read_to_string(format!("/proc/{pid}/net/dev")).ok().map(|text| parse_net_dev(&text))
}

/// Parses `/proc/net/dev`: two header lines, then `name: rx… tx…` with 8
/// receive and 8 transmit columns.
pub(crate) fn parse_net_dev(text: &str) -> Vec<InterfaceUsage> {
    text.lines()
        .skip(2)
        .filter_map(|line| {
            let (name, counters) = line.split_once(':')?;
            let n: Vec<u64> = counters.split_whitespace().map(|v| v.parse().unwrap_or(0)).collect();
            if n.len() < 16 {
                return None;
            }
            Some(InterfaceUsage {
                name: name.trim().to_string(),
                rx_bytes: n[0],
                rx_packets: n[1],
                rx_errors: n[2],
                rx_dropped: n[3],
                tx_bytes: n[8],
                tx_packets: n[9],
                tx_errors: n[10],
                tx_dropped: n[11],
            })
        })
        .collect()
}

/// The interface kubelet shows as the pod's: `eth0`, else the first that is not loopback.
pub(crate) fn default_interface(interfaces: &[InterfaceUsage]) -> Option<&InterfaceUsage> {
    interfaces.iter().find(|i| i.name == "eth0").or_else(|| interfaces.iter().find(|i| i.name != "lo"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:    1234      10    0    0    0     0          0         0     1234      10    0    0    0     0       0          0
  eth0: 9000 90 1 2 0 0 0 0 8000 80 3 4 0 0 0 0
";

    #[test]
    fn parses_proc_net_dev() {
        let interfaces = parse_net_dev(SAMPLE);
        assert_eq!(interfaces.len(), 2);
        assert_eq!(interfaces[0].name, "lo");
        assert_eq!((interfaces[0].rx_bytes, interfaces[0].tx_packets), (1234, 10));
        let eth0 = &interfaces[1];
        assert_eq!((eth0.rx_bytes, eth0.rx_errors, eth0.rx_dropped), (9000, 1, 2));
        assert_eq!((eth0.tx_bytes, eth0.tx_errors, eth0.tx_dropped), (8000, 3, 4));
        assert_eq!(default_interface(&interfaces).unwrap().name, "eth0");
        assert!(default_interface(&interfaces[..1]).is_none(), "loopback is never the default");
    }
}
