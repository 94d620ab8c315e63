//! How fast a registry's answer must come: no byte for the stall timeout
//! fails it (a silent connection), and so does a body that brings fewer
//! than `min_bytes_per_sec` × the window's seconds within any window (a
//! registry trickling a byte now and then). `Meter` applies both to one
//! body as its chunks arrive; pure bookkeeping over instants the caller gives.

use std::collections::VecDeque;
use std::future::Future;
use std::time::{Duration, Instant};

/// The rules of one pull's transfers (from `[registry]`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Pace {
    /// No byte for this long fails a transfer.
    pub(crate) stall: Duration,
    /// Fewer bytes a second than this, over `window`, fails a transfer; 0: no minimum.
    pub(crate) min_bytes_per_sec: u64,
    pub(crate) window: Duration,
}

/// Why a transfer was given up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Slow {
    #[error("no data for {secs} s")]
    Stalled { secs: u64 },
    #[error("{bytes} bytes in the last {secs} s, under the minimum of {min_bytes_per_sec} bytes/s")]
    TooSlow { bytes: u64, secs: u64, min_bytes_per_sec: u64 },
}

/// Steps a window is looked at in: the rule trips at most a step late.
const STEPS_PER_WINDOW: u32 = 8;

impl Pace {
    /// Whether the minimum rate applies.
    pub(crate) fn has_minimum(&self) -> bool {
        self.min_bytes_per_sec > 0 && !self.window.is_zero()
    }

    /// How long a registry may take to answer a request (its status and
    /// headers): the stall timeout covers silence, this a trickle of headers.
    pub(crate) fn answer_within(&self) -> Option<Duration> {
        self.has_minimum().then_some(self.window.max(self.stall))
    }

    fn step(&self) -> Duration {
        (self.window / STEPS_PER_WINDOW).max(Duration::from_millis(10))
    }

    /// Bytes a window must bring.
    fn window_bytes(&self) -> u64 {
        self.min_bytes_per_sec.saturating_mul(self.window.as_secs().max(1))
    }
}

/// One body's progress against a `Pace`.
#[derive(Debug)]
pub(crate) struct Meter {
    pace: Pace,
    started: Instant,
    last_byte: Instant,
    total: u64,
    /// `(when, total then)`, about a step apart, oldest first; the first is
    /// the last one at least a window old.
    marks: VecDeque<(Instant, u64)>,
}

impl Meter {
    pub(crate) fn new(pace: Pace, now: Instant) -> Self {
        Self { pace, started: now, last_byte: now, total: 0, marks: VecDeque::from([(now, 0)]) }
    }

    /// Bytes counted so far.
    pub(crate) fn total(&self) -> u64 {
        self.total
    }

    /// When to look again if nothing arrives: the stall timeout, or the next step.
    pub(crate) fn next_look(&self, now: Instant) -> Instant {
        let stall = self.last_byte + self.pace.stall;
        if self.pace.has_minimum() {
            stall.min(now + self.pace.step())
        } else {
            stall
        }
    }

    /// `n` bytes arrived at `now`.
    pub(crate) fn received(&mut self, n: u64, now: Instant) -> Result<(), Slow> {
        if n > 0 {
            self.total += n;
            self.last_byte = now;
        }
        self.look(now)
    }

    /// Applies the rules at `now`.
    pub(crate) fn look(&mut self, now: Instant) -> Result<(), Slow> {
        if now.saturating_duration_since(self.last_byte) >= self.pace.stall {
            return Err(Slow::Stalled { secs: self.pace.stall.as_secs() });
        }
        if !self.pace.has_minimum() {
            return Ok(());
        }
        if self.marks.back().is_none_or(|(at, _)| now.saturating_duration_since(*at) >= self.pace.step()) {
            self.marks.push_back((now, self.total));
        }
        let Some(window_start) = now.checked_sub(self.pace.window) else { return Ok(()) };
        while self.marks.len() > 1 && self.marks[1].0 <= window_start {
            self.marks.pop_front();
        }
        if window_start < self.started {
            return Ok(()); // Not a whole window yet.
        }
        let (since, then) = self.marks[0];
        let bytes = self.total - then;
        if bytes < self.pace.window_bytes() {
            return Err(Slow::TooSlow {
                bytes,
                secs: now.saturating_duration_since(since).as_secs(),
                min_bytes_per_sec: self.pace.min_bytes_per_sec,
            });
        }
        Ok(())
    }

    /// Awaits `next` (the next chunk of the body), applying the rules while it waits.
    pub(crate) async fn paced<F: Future>(&mut self, next: F) -> Result<F::Output, Slow> {
        tokio::pin!(next);
        loop {
            let look_at = self.next_look(Instant::now());
            match tokio::time::timeout_at(look_at.into(), &mut next).await {
                Ok(out) => return Ok(out),
                Err(_) => self.look(Instant::now())?,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pace(min: u64) -> Pace {
        Pace { stall: Duration::from_secs(10), min_bytes_per_sec: min, window: Duration::from_secs(8) }
    }

    fn at(start: Instant, ms: u64) -> Instant {
        start + Duration::from_millis(ms)
    }

    #[test]
    fn silence_for_the_stall_timeout_fails_whatever_came_before() {
        let t = Instant::now();
        let mut meter = Meter::new(pace(0), t);
        meter.received(1 << 20, at(t, 1000)).unwrap();
        meter.look(at(t, 10_999)).unwrap();
        assert_eq!(meter.look(at(t, 11_000)), Err(Slow::Stalled { secs: 10 }));
        assert_eq!(meter.next_look(at(t, 2000)), at(t, 11_000));
    }

    #[test]
    fn a_trickle_fails_about_a_window_after_it_starts() {
        let t = Instant::now();
        let mut meter = Meter::new(pace(100), t);
        // A fast start, then a byte a second: never silent for the stall timeout.
        meter.received(1 << 20, at(t, 100)).unwrap();
        let mut failed = None;
        for s in 1..30u64 {
            if let Err(e) = meter.received(1, at(t, s * 1000)) {
                failed = Some((s, e));
                break;
            }
        }
        let (s, e) = failed.expect("the trickle fails");
        // The window (8 s) after the fast start, at most a step (1 s) late.
        assert!((9..=10).contains(&s), "failed at {s} s: {e}");
        assert!(matches!(e, Slow::TooSlow { bytes, secs: 8..=9, min_bytes_per_sec: 100 } if bytes < 800), "{e:?}");
    }

    #[test]
    fn a_steady_rate_at_the_minimum_passes_and_the_first_window_is_whole() {
        let t = Instant::now();
        let mut meter = Meter::new(pace(100), t);
        for s in 1..=60u64 {
            meter.received(100, at(t, s * 1000)).unwrap();
        }
        // A download that has not run a whole window is not judged yet.
        let mut young = Meter::new(pace(100), t);
        young.received(1, at(t, 500)).unwrap();
        young.look(at(t, 7_900)).unwrap();
        assert!(young.look(at(t, 8_000)).is_err());
    }

    #[test]
    fn without_a_minimum_only_silence_counts() {
        let t = Instant::now();
        let mut meter = Meter::new(pace(0), t);
        for s in 1..100u64 {
            meter.received(1, at(t, s * 1000)).unwrap();
        }
        assert_eq!(pace(0).answer_within(), None);
        assert_eq!(pace(1).answer_within(), Some(Duration::from_secs(10)));
    }

    #[tokio::test]
    async fn paced_waits_judge_a_body_that_sends_nothing() {
        let quick = Pace { stall: Duration::from_secs(5), min_bytes_per_sec: 100, window: Duration::from_millis(400) };
        let started = Instant::now();
        let mut meter = Meter::new(quick, started);
        let failed = meter.paced(std::future::pending::<()>()).await.unwrap_err();
        // With no byte at all, the minimum trips after a window, long before the stall.
        assert!(matches!(failed, Slow::TooSlow { bytes: 0, .. }), "{failed:?}");
        assert!(started.elapsed() >= Duration::from_millis(400), "{:?}", started.elapsed());
        assert!(started.elapsed() < Duration::from_secs(5), "{:?}", started.elapsed());
        let mut meter = Meter::new(quick, Instant::now());
        assert_eq!(meter.paced(async { 7 }).await, Ok(7));
    }
}
