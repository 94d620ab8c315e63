//! `usage_nano_cores`: cpu time used per second of wall time, between the
//! previous reading of a container (or pod) and this one. The previous
//! reading is kept in memory; the first reading of anything has no rate
//! (kubelet then computes one from its own cache, as it does for runtimes
//! that report none).

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

/// Readings closer together than this keep the last rate: two clients
/// polling at once would otherwise turn timer noise into rates.
const MIN_INTERVAL_NS: i64 = 100_000_000;
/// Readings older than this are forgotten (their container is likely gone).
const FORGET_AFTER_NS: i64 = 10 * 60 * 1_000_000_000;

#[derive(Debug, Clone, Copy)]
struct Reading {
    at_ns: i64,
    usage_ns: u64,
    /// The rate computed when this reading was taken.
    rate: Option<u64>,
}

#[derive(Default)]
pub(crate) struct UsageSampler {
    last: Mutex<HashMap<String, Reading>>,
}

impl UsageSampler {
    /// Records `usage_ns` (cumulative cpu time) of `key` at `at_ns`; returns
    /// nano cores since the previous reading, None for the first one.
    pub(crate) fn nano_cores(&self, key: &str, at_ns: i64, usage_ns: u64) -> Option<u64> {
        let mut last = self.last.lock().unwrap_or_else(|p| p.into_inner());
        let rate = match last.get(key) {
            Some(prev) if at_ns - prev.at_ns < MIN_INTERVAL_NS && usage_ns >= prev.usage_ns => return prev.rate,
            Some(prev) if at_ns > prev.at_ns && usage_ns >= prev.usage_ns => {
                let used = (usage_ns - prev.usage_ns) as u128;
                Some((used * 1_000_000_000 / (at_ns - prev.at_ns) as u128) as u64)
            }
            // A reset counter (a new cgroup under the same key) starts over.
            _ => None,
        };
        last.insert(key.to_string(), Reading { at_ns, usage_ns, rate });
        last.retain(|_, r| at_ns - r.at_ns < FORGET_AFTER_NS);
        rate
    }

    /// Forgets every key not in `alive` (after a full listing).
    pub(crate) fn keep_only(&self, alive: &HashSet<String>) {
        self.last.lock().unwrap_or_else(|p| p.into_inner()).retain(|k, _| alive.contains(k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEC: i64 = 1_000_000_000;

    #[test]
    fn rate_between_readings() {
        let s = UsageSampler::default();
        assert_eq!(s.nano_cores("c", 10 * SEC, 0), None, "first reading has no rate");
        // One full core for 2 s.
        assert_eq!(s.nano_cores("c", 12 * SEC, 2 * SEC as u64), Some(1_000_000_000));
        // Half a core for the next second.
        assert_eq!(s.nano_cores("c", 13 * SEC, 2 * SEC as u64 + 500_000_000), Some(500_000_000));
        // Too close to the last one: the last rate.
        assert_eq!(s.nano_cores("c", 13 * SEC + 1_000, 2 * SEC as u64 + 500_000_001), Some(500_000_000));
        // A counter that went backwards starts over.
        assert_eq!(s.nano_cores("c", 20 * SEC, 5), None);
        s.keep_only(&HashSet::new());
        assert_eq!(s.nano_cores("c", 21 * SEC, 10), None);
    }
}
