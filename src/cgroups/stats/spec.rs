//! A cgroup's cpu settings as cAdvisor's `container_spec_cpu_*` report them:
//! shares (v1 `cpu.shares`; v2 `cpu.weight` mapped back to shares by the
//! Kubernetes cgroup v2 rule, 2 + (weight − 1) × 262142 / 9999), the CFS
//! period and quota (v1 `cpu.cfs_period_us`, `cpu.cfs_quota_us`; v2 `cpu.max`).

use serde::Serialize;

use super::files::CgroupDir;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub(crate) struct CpuSpec {
    pub(crate) shares: Option<u64>,
    /// CFS period, in microseconds.
    pub(crate) period_us: Option<u64>,
    /// CFS quota per period, in microseconds; None: no quota.
    pub(crate) quota_us: Option<u64>,
}

fn read(dir: &CgroupDir, file: &str) -> Option<String> {
    dir.read(file).map(|s| s.trim().to_string())
}

/// cgroup v2: `cpu.weight` and `cpu.max` of `dir`; None without the cpu controller.
pub(crate) fn read_v2(dir: &CgroupDir) -> Option<CpuSpec> {
    let max = read(dir, "cpu.max");
    let weight = read(dir, "cpu.weight");
    if max.is_none() && weight.is_none() {
        return None;
    }
    let (quota_us, period_us) = max.as_deref().map(parse_cpu_max).unwrap_or_default();
    Some(CpuSpec { shares: weight.and_then(|w| w.parse().ok()).and_then(weight_to_shares), period_us, quota_us })
}

/// cgroup v1: the cpu controller's directory `dir`.
pub(crate) fn read_v1(dir: &CgroupDir) -> Option<CpuSpec> {
    let shares = read(dir, "cpu.shares").and_then(|s| s.parse().ok());
    let period_us = read(dir, "cpu.cfs_period_us").and_then(|s| s.parse().ok());
    // -1: no quota.
    let quota_us =
        read(dir, "cpu.cfs_quota_us").and_then(|s| s.parse::<i64>().ok()).and_then(|q| u64::try_from(q).ok());
    (shares.is_some() || period_us.is_some()).then_some(CpuSpec { shares, period_us, quota_us })
}

/// `cpu.max`: `QUOTA PERIOD`, QUOTA `max` for none.
fn parse_cpu_max(text: &str) -> (Option<u64>, Option<u64>) {
    let mut fields = text.split_whitespace();
    let quota = fields.next().and_then(|q| q.parse().ok());
    let period = fields.next().and_then(|p| p.parse().ok());
    (quota, period)
}

/// cpu.weight (1–10000) → cpu shares (2–262144).
fn weight_to_shares(weight: u64) -> Option<u64> {
    (1..=10_000).contains(&weight).then(|| 2 + (weight - 1) * 262_142 / 9_999)
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;

    #[test]
    fn v2_files_map_to_shares_period_and_quota() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("cpu.max"), "20000 100000\n").unwrap();
        fs::write(dir.path().join("cpu.weight"), "39\n").unwrap();
        // Kubernetes writes weight 39 for 1024 shares; back it comes as 998.
        let cgroup = CgroupDir::open(dir.path()).unwrap();
        let spec = read_v2(&cgroup).unwrap();
        assert_eq!(spec, CpuSpec { shares: Some(998), period_us: Some(100_000), quota_us: Some(20_000) });
        fs::write(dir.path().join("cpu.max"), "max 100000\n").unwrap();
        assert_eq!(read_v2(&cgroup).unwrap().quota_us, None, "max: no quota");
        assert_eq!(weight_to_shares(1), Some(2));
        assert_eq!(weight_to_shares(10_000), Some(262_144));
        assert_eq!(weight_to_shares(0), None);
        let empty = tempfile::tempdir().unwrap();
        assert_eq!(read_v2(&CgroupDir::open(empty.path()).unwrap()), None, "no cpu controller");
    }

    #[test]
    fn v1_files_and_no_quota() {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("cpu.shares"), "1024\n").unwrap();
        fs::write(dir.path().join("cpu.cfs_period_us"), "100000\n").unwrap();
        fs::write(dir.path().join("cpu.cfs_quota_us"), "-1\n").unwrap();
        assert_eq!(
            read_v1(&CgroupDir::open(dir.path()).unwrap()).unwrap(),
            CpuSpec { shares: Some(1024), period_us: Some(100_000), quota_us: None }
        );
    }
}
