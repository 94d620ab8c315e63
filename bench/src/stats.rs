//! Latency samples and their summary: p50 and p99 (nearest rank) in ms.

use std::time::Duration;

use serde::Serialize;

/// The summary of one step's samples, as `latest.json` has it.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct StepFigures {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub n: usize,
}

/// The `p`th percentile (0–100) of `samples` by the nearest-rank method.
pub fn percentile(samples: &[Duration], p: f64) -> Option<Duration> {
    if samples.is_empty() {
        return None;
    }
    let mut sorted = samples.to_vec();
    sorted.sort_unstable();
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    Some(sorted[rank.min(sorted.len()) - 1])
}

pub fn figures(samples: &[Duration]) -> Option<StepFigures> {
    Some(StepFigures {
        p50_ms: round3(percentile(samples, 50.0)?.as_secs_f64() * 1000.0),
        p99_ms: round3(percentile(samples, 99.0)?.as_secs_f64() * 1000.0),
        n: samples.len(),
    })
}

/// Rounded to 3 decimals (µs for milliseconds).
pub fn round3(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}

/// `a / b` rounded to 4 decimals; None when `b` is zero.
pub fn ratio(a: f64, b: f64) -> Option<f64> {
    (b != 0.0).then(|| (a / b * 10_000.0).round() / 10_000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(v: &[u64]) -> Vec<Duration> {
        v.iter().map(|m| Duration::from_millis(*m)).collect()
    }

    #[test]
    fn nearest_rank() {
        let s = ms(&[5, 1, 4, 2, 3]);
        assert_eq!(percentile(&s, 50.0), Some(Duration::from_millis(3)));
        assert_eq!(percentile(&s, 99.0), Some(Duration::from_millis(5)));
        assert_eq!(percentile(&ms(&[7]), 50.0), Some(Duration::from_millis(7)));
        assert_eq!(percentile(&[], 50.0), None);
        let hundred: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&ms(&hundred), 99.0), Some(Duration::from_millis(99)));
        assert_eq!(percentile(&ms(&hundred), 50.0), Some(Duration::from_millis(50)));
    }

    #[test]
    fn figures_and_ratio() {
        let f = figures(&ms(&[10, 20])).unwrap();
        assert_eq!((f.p50_ms, f.p99_ms, f.n), (10.0, 20.0, 2));
        assert_eq!(ratio(1.0, 8.0), Some(0.125));
        assert_eq!(ratio(1.0, 0.0), None);
    }
}
