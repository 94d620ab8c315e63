//! A container's OCI `linux.resources` as the properties of its systemd
//! unit, so that systemd, which writes a unit's cgroup attributes again at
//! every `daemon-reload` from its properties, writes the container's limits
//! and not its defaults (runc's systemd driver does the same). The exact
//! values also go into the cgroup files (`cgroups::apply`): a CPU quota is
//! rounded up to systemd's 10 ms resolution here.

use oci_spec::runtime::LinuxResources;
use zbus::zvariant::OwnedValue;

/// systemd's "infinity" for the limits below.
const INFINITY: u64 = u64::MAX;

/// Whether the node runs cgroup v2 (systemd names some properties per version).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unified {
    V1,
    V2,
}

/// The unit properties for `resources`. Every limit the unit may hold is
/// named, unset ones as infinity, so an update that lifts a limit lifts it.
pub(crate) fn from_resources(resources: &LinuxResources, unified: Unified) -> Vec<(String, OwnedValue)> {
    let mut out: Vec<(String, OwnedValue)> = Vec::new();
    let mut put = |name: &str, value: OwnedValue| out.push((name.to_string(), value));
    let memory = resources.memory().as_ref();
    let limit = memory.and_then(|m| m.limit()).filter(|l| *l > 0);
    let memory_name = if unified == Unified::V2 { "MemoryMax" } else { "MemoryLimit" };
    put(memory_name, OwnedValue::from(limit.map_or(INFINITY, |l| l as u64)));
    if unified == Unified::V2 {
        // OCI's swap is memory + swap; v2's swap limit is swap alone.
        if let (Some(limit), Some(swap)) = (limit, memory.and_then(|m| m.swap()).filter(|s| *s > 0)) {
            put("MemorySwapMax", OwnedValue::from(swap.saturating_sub(limit).max(0) as u64));
        }
    }
    let pids = resources.pids().as_ref().map(|p| p.limit()).filter(|l| *l > 0);
    put("TasksMax", OwnedValue::from(pids.map_or(INFINITY, |l| l as u64)));
    let cpu = resources.cpu().as_ref();
    if let Some(shares) = cpu.and_then(|c| c.shares()).filter(|s| *s > 0) {
        match unified {
            Unified::V2 => put("CPUWeight", OwnedValue::from(cpu_weight(shares))),
            Unified::V1 => put("CPUShares", OwnedValue::from(shares.clamp(2, 262_144))),
        }
    }
    let quota = cpu.and_then(|c| c.quota()).filter(|q| *q > 0);
    let period = cpu.and_then(|c| c.period()).filter(|p| *p > 0).unwrap_or(100_000);
    if quota.is_some() {
        put("CPUQuotaPeriodUSec", OwnedValue::from(period));
    }
    put("CPUQuotaPerSecUSec", OwnedValue::from(quota.map_or(INFINITY, |q| quota_per_sec(q as u64, period))));
    if unified == Unified::V2 {
        let masks = [
            ("AllowedCPUs", cpu.and_then(|c| c.cpus().clone())),
            ("AllowedMemoryNodes", cpu.and_then(|c| c.mems().clone())),
        ];
        for (name, list) in masks {
            // A byte array holds no descriptor: it always converts.
            if let Some(mask) = list
                .as_deref()
                .and_then(list_to_mask)
                .and_then(|m| OwnedValue::try_from(zbus::zvariant::Value::from(m)).ok())
            {
                put(name, mask);
            }
        }
    }
    out
}

/// cgroup v1 shares (2–262144) as v2's weight (1–10000), the kernel's and
/// runc's formula.
fn cpu_weight(shares: u64) -> u64 {
    let shares = shares.clamp(2, 262_144);
    1 + ((shares - 2) * 9_999) / 262_142
}

/// A quota per `period` µs as µs per second, rounded up to systemd's 10 ms.
fn quota_per_sec(quota: u64, period: u64) -> u64 {
    let per_sec = quota.saturating_mul(1_000_000) / period.max(1);
    per_sec.div_ceil(10_000) * 10_000
}

/// A cpuset list (`0-3,6`) as systemd's bitmask: byte i, bit j is 8i + j.
/// None for an empty or malformed list (the cgroup file then refuses it).
fn list_to_mask(list: &str) -> Option<Vec<u8>> {
    let mut mask = Vec::new();
    for part in list.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (low, high) = match part.split_once('-') {
            Some((low, high)) => (low.parse::<usize>().ok()?, high.parse::<usize>().ok()?),
            None => (part.parse::<usize>().ok()?, part.parse::<usize>().ok()?),
        };
        if low > high || high >= 8192 {
            return None;
        }
        for n in low..=high {
            if mask.len() <= n / 8 {
                mask.resize(n / 8 + 1, 0);
            }
            mask[n / 8] |= 1 << (n % 8);
        }
    }
    (!mask.is_empty()).then_some(mask)
}

#[cfg(test)]
mod tests {
    use super::*;
    use oci_spec::runtime::{LinuxCpuBuilder, LinuxMemoryBuilder, LinuxPidsBuilder, LinuxResourcesBuilder};

    fn value(props: &[(String, OwnedValue)], name: &str) -> Option<u64> {
        props.iter().find(|(n, _)| n == name).and_then(|(_, v)| u64::try_from(v).ok())
    }

    #[test]
    fn limits_become_properties_and_unset_ones_infinity() {
        let resources = LinuxResourcesBuilder::default()
            .memory(LinuxMemoryBuilder::default().limit(64i64 << 20).swap(96i64 << 20).build().unwrap())
            .cpu(
                LinuxCpuBuilder::default()
                    .shares(512u64)
                    .quota(25_000i64)
                    .period(100_000u64)
                    .cpus("0-1,3")
                    .build()
                    .unwrap(),
            )
            .pids(LinuxPidsBuilder::default().limit(20i64).build().unwrap())
            .build()
            .unwrap();
        let props = from_resources(&resources, Unified::V2);
        assert_eq!(value(&props, "MemoryMax"), Some(64 << 20));
        assert_eq!(value(&props, "MemorySwapMax"), Some(32 << 20));
        assert_eq!(value(&props, "TasksMax"), Some(20));
        assert_eq!(value(&props, "CPUWeight"), Some(20));
        assert_eq!(value(&props, "CPUQuotaPerSecUSec"), Some(250_000));
        assert_eq!(value(&props, "CPUQuotaPeriodUSec"), Some(100_000));
        let empty = from_resources(&LinuxResources::default(), Unified::V2);
        assert_eq!(value(&empty, "MemoryMax"), Some(u64::MAX));
        assert_eq!(value(&empty, "TasksMax"), Some(u64::MAX));
        assert_eq!(value(&empty, "CPUQuotaPerSecUSec"), Some(u64::MAX));
        let v1 = from_resources(&resources, Unified::V1);
        assert_eq!(value(&v1, "MemoryLimit"), Some(64 << 20));
        assert_eq!(value(&v1, "CPUShares"), Some(512));
    }

    #[test]
    fn quotas_round_up_to_ten_milliseconds() {
        assert_eq!(quota_per_sec(25_000, 100_000), 250_000);
        assert_eq!(quota_per_sec(1_234, 100_000), 20_000);
    }

    #[test]
    fn cpu_lists_become_masks() {
        assert_eq!(list_to_mask("0-1,3"), Some(vec![0b1011]));
        assert_eq!(list_to_mask("9"), Some(vec![0, 0b10]));
        assert_eq!(list_to_mask(""), None);
        assert_eq!(list_to_mask("3-1"), None);
        assert_eq!(list_to_mask("x"), None);
    }
}
