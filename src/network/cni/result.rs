//! The pod's addresses in a CNI result: `ips` (0.3.0 and later; those on the
//! pod's interface, or all when none names an interface) or `ip4`/`ip6`
//! (0.1.0, 0.2.0). IPv4 first, as kubelet takes the first as the pod IP.

use std::net::IpAddr;

use serde_json::Value;

/// The addresses (without prefix length) a result gives the pod's `ifname`.
pub(crate) fn pod_ips(result: &Value, ifname: &str) -> Vec<IpAddr> {
    let mut ips: Vec<IpAddr> = Vec::new();
    if let Some(list) = result.get("ips").and_then(Value::as_array) {
        let interfaces = result.get("interfaces").and_then(Value::as_array);
        let on_pod = |ip: &Value| -> bool {
            let Some(index) = ip.get("interface").and_then(Value::as_u64) else {
                return true;
            };
            let Some(iface) = interfaces.and_then(|l| l.get(index as usize)) else {
                return true;
            };
            let named = iface.get("name").and_then(Value::as_str) == Some(ifname);
            let in_sandbox = iface.get("sandbox").and_then(Value::as_str).is_some_and(|s| !s.is_empty());
            named || in_sandbox
        };
        ips.extend(
            list.iter()
                .filter(|ip| on_pod(ip))
                .filter_map(|ip| ip.get("address").and_then(Value::as_str))
                .filter_map(address),
        );
    }
    for key in ["ip4", "ip6"] {
        if let Some(ip) = result.get(key).and_then(|v| v.get("ip")).and_then(Value::as_str).and_then(address) {
            ips.push(ip);
        }
    }
    ips.dedup();
    ips.sort_by_key(|ip| ip.is_ipv6());
    ips
}

fn address(cidr: &str) -> Option<IpAddr> {
    cidr.split('/').next()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_of_the_pod_interface_ipv4_first() {
        let result: Value = serde_json::from_str(
            r#"{"cniVersion":"1.0.0",
                "interfaces":[{"name":"cni0"},{"name":"veth1"},{"name":"eth0","sandbox":"/proc/1/ns/net"}],
                "ips":[{"address":"fd00::5/64","interface":2},{"address":"10.1.0.5/24","gateway":"10.1.0.1","interface":2},
                       {"address":"10.1.0.1/24","interface":0}]}"#,
        )
        .unwrap();
        let ips: Vec<String> = pod_ips(&result, "eth0").iter().map(|i| i.to_string()).collect();
        assert_eq!(ips, ["10.1.0.5", "fd00::5"]);
    }

    #[test]
    fn old_results_and_interfaceless_ips() {
        let old: Value = serde_json::from_str(r#"{"cniVersion":"0.2.0","ip4":{"ip":"10.2.0.7/16"}}"#).unwrap();
        assert_eq!(pod_ips(&old, "eth0"), vec!["10.2.0.7".parse::<IpAddr>().unwrap()]);
        let bare: Value = serde_json::from_str(r#"{"ips":[{"address":"10.3.0.2/24"}]}"#).unwrap();
        assert_eq!(pod_ips(&bare, "eth0"), vec!["10.3.0.2".parse::<IpAddr>().unwrap()]);
    }
}
