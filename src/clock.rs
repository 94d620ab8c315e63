//! Wall-clock time as the CRI and nidus's records count it: nanoseconds
//! since the Unix epoch, in an `i64` (good until 2262).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Now, in nanoseconds since the epoch (0 for a clock set before 1970).
pub fn now_ns() -> i64 {
    epoch_ns(SystemTime::now())
}

/// `at` in nanoseconds since the epoch: 0 before it, `i64::MAX` past 2262.
pub(crate) fn epoch_ns(at: SystemTime) -> i64 {
    at.duration_since(UNIX_EPOCH).map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// The time `ns` nanoseconds after the epoch (the epoch for a negative value).
pub(crate) fn at_ns(ns: i64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(ns.max(0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nanoseconds_round_trip_and_clamp() {
        let now = now_ns();
        assert!(now > 1_600_000_000_000_000_000, "a clock after 2020: {now}");
        assert_eq!(epoch_ns(at_ns(now)), now);
        assert_eq!(epoch_ns(UNIX_EPOCH - Duration::from_secs(1)), 0);
        assert_eq!(at_ns(-5), UNIX_EPOCH);
    }
}
