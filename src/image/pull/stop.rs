//! Why work in flight (a pull, a layer download) ends before it is done: a
//! signal set once — the first reason stays — that the work awaits beside
//! what it waits for, so it can stop at its next step and clean up.

use std::future::Future;
use std::sync::Arc;

use tokio::sync::watch;

/// A reason to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stop {
    /// Every caller left, and none came back within the grace period.
    Abandoned,
    /// The pull's overall deadline (`pull_deadline_secs`) passed.
    Deadline,
}

/// Shared by the work and whoever may stop it.
#[derive(Debug, Clone)]
pub(crate) struct StopSignal(Arc<watch::Sender<Option<Stop>>>);

impl Default for StopSignal {
    fn default() -> Self {
        Self(Arc::new(watch::channel(None).0))
    }
}

impl StopSignal {
    /// Asks the work to stop (a second reason is ignored).
    pub(crate) fn stop(&self, why: Stop) {
        self.0.send_if_modified(|current| {
            let first = current.is_none();
            if first {
                *current = Some(why);
            }
            first
        });
    }

    pub(crate) fn reason(&self) -> Option<Stop> {
        *self.0.borrow()
    }

    /// Resolves once the work is asked to stop.
    pub(crate) async fn stopped(&self) -> Stop {
        let mut receiver = self.0.subscribe();
        let reason = match receiver.wait_for(Option::is_some).await {
            Ok(reason) => *reason,
            // The sender lives in `self`: never dropped while this waits.
            Err(_) => None,
        };
        match reason {
            Some(reason) => reason,
            None => std::future::pending().await,
        }
    }

    /// `work`'s output, or the reason it was stopped first.
    pub(crate) async fn unless_stopped<F: Future>(&self, work: F) -> Result<F::Output, Stop> {
        if let Some(why) = self.reason() {
            return Err(why);
        }
        tokio::select! {
            out = work => Ok(out),
            why = self.stopped() => Err(why),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_first_reason_stays_and_wakes_the_work() {
        let signal = StopSignal::default();
        assert_eq!(signal.reason(), None);
        assert_eq!(signal.unless_stopped(async { 3 }).await, Ok(3));
        let waiting = {
            let signal = signal.clone();
            tokio::spawn(async move { signal.unless_stopped(std::future::pending::<()>()).await })
        };
        tokio::task::yield_now().await;
        signal.stop(Stop::Deadline);
        signal.stop(Stop::Abandoned);
        assert_eq!(waiting.await.unwrap(), Err(Stop::Deadline));
        assert_eq!(signal.reason(), Some(Stop::Deadline));
        assert_eq!(signal.unless_stopped(async { 3 }).await, Err(Stop::Deadline));
    }
}
