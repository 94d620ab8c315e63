//! What a CNI plugin learns of the pod besides its namespace: `CNI_ARGS`
//! (the `K8S_POD_*` keys kubelet-era plugins read) and the runtime config
//! capabilities `portMappings`, `dns`, `bandwidth` (from the pod's
//! `kubernetes.io/ingress-bandwidth` and `egress-bandwidth` annotations) and
//! `ipRanges` (from the pod CIDRs UpdateRuntimeConfig set).

use ipnet::IpNet;
use serde_json::{json, Map, Value};

use super::PodInfo;

/// `CNI_ARGS` for a pod; a value with `;` or `=` cannot be passed.
pub(crate) fn cni_args(pod: &PodInfo) -> Result<String, String> {
    let pairs = [
        ("K8S_POD_NAMESPACE", &pod.namespace),
        ("K8S_POD_NAME", &pod.name),
        ("K8S_POD_INFRA_CONTAINER_ID", &pod.sandbox_id),
        ("K8S_POD_UID", &pod.uid),
    ];
    let mut args = String::from("IgnoreUnknown=1");
    for (key, value) in pairs {
        if value.contains([';', '=']) {
            return Err(format!("config.metadata: {key} value {} contains ';' or '='", crate::quote::quote(value)));
        }
        args.push_str(&format!(";{key}={value}"));
    }
    Ok(args)
}

/// The runtime config offered to plugins, by capability name.
pub(crate) fn for_cni(pod: &PodInfo, pod_cidrs: &[IpNet]) -> Map<String, Value> {
    let mut config = Map::new();
    let mappings: Vec<Value> = pod
        .host_ports
        .iter()
        .map(|p| {
            let mut m = json!({"hostPort": p.host_port, "containerPort": p.container_port, "protocol": p.protocol});
            if let Some(ip) = p.host_ip {
                m["hostIP"] = Value::from(ip.to_string());
            }
            m
        })
        .collect();
    if !mappings.is_empty() {
        config.insert("portMappings".into(), Value::Array(mappings));
    }
    if let Some(dns) = &pod.dns {
        config.insert("dns".into(), json!({"servers": dns.servers, "searches": dns.searches, "options": dns.options}));
    }
    let rate = |key: &str| pod.annotations.get(key).and_then(|q| quantity(q));
    let (ingress, egress) = (rate("kubernetes.io/ingress-bandwidth"), rate("kubernetes.io/egress-bandwidth"));
    if ingress.is_some() || egress.is_some() {
        // Bursts as containerd and CRI-O give them: as large as the kernel takes.
        let mut bw = Map::new();
        if let Some(rate) = ingress {
            bw.insert("ingressRate".into(), rate.into());
            bw.insert("ingressBurst".into(), (u32::MAX as u64).into());
        }
        if let Some(rate) = egress {
            bw.insert("egressRate".into(), rate.into());
            bw.insert("egressBurst".into(), (u32::MAX as u64).into());
        }
        config.insert("bandwidth".into(), Value::Object(bw));
    }
    if !pod_cidrs.is_empty() {
        let ranges: Vec<Value> = pod_cidrs.iter().map(|c| json!([{"subnet": c.to_string()}])).collect();
        config.insert("ipRanges".into(), Value::Array(ranges));
    }
    config
}

/// A Kubernetes quantity in bits per second: `10M`, `1Gi`, `500k`, `1000`.
pub(crate) fn quantity(text: &str) -> Option<u64> {
    let text = text.trim();
    let split = text.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let factor: f64 = match suffix {
        "" => 1.0,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        _ => return None,
    };
    let value = number * factor;
    (value.is_finite() && value >= 1.0).then_some(value as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn pod() -> PodInfo {
        PodInfo {
            sandbox_id: "abc".into(),
            name: "web".into(),
            namespace: "default".into(),
            uid: "u-1".into(),
            host_ports: vec![super::super::HostPort {
                protocol: "tcp".into(),
                host_ip: None,
                host_port: 8080,
                container_port: 80,
            }],
            dns: None,
            annotations: HashMap::from([("kubernetes.io/ingress-bandwidth".to_string(), "10M".to_string())]),
            pause_pid: 1,
        }
    }

    #[test]
    fn args_and_runtime_config() {
        assert_eq!(
            cni_args(&pod()).unwrap(),
            "IgnoreUnknown=1;K8S_POD_NAMESPACE=default;K8S_POD_NAME=web;K8S_POD_INFRA_CONTAINER_ID=abc;K8S_POD_UID=u-1"
        );
        let mut bad = pod();
        bad.name = "a;b".into();
        assert!(cni_args(&bad).is_err());
        let config = for_cni(&pod(), &["10.9.0.0/24".parse().unwrap()]);
        assert_eq!(config["portMappings"][0]["hostPort"], 8080);
        assert_eq!(config["bandwidth"]["ingressRate"], 10_000_000);
        assert_eq!(config["ipRanges"][0][0]["subnet"], "10.9.0.0/24");
        assert!(config.get("dns").is_none());
    }

    #[test]
    fn quantities() {
        assert_eq!(quantity("10M"), Some(10_000_000));
        assert_eq!(quantity("1Ki"), Some(1024));
        assert_eq!(quantity("1.5k"), Some(1500));
        assert_eq!(quantity("lots"), None);
        assert_eq!(quantity("0"), None);
    }
}
