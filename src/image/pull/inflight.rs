//! De-duplication of work in flight, and its end once nobody waits for it:
//! the first caller for a key starts the work as its own task; every caller
//! for the same key meanwhile waits for that one result. A caller counts
//! while it holds its `Waiter`; when the last one leaves and none comes back
//! within the grace period, the work is asked to stop (`Stop::Abandoned`)
//! and forgotten, so the next caller for the key starts it anew. The work
//! itself decides how to stop: it cleans up, and is never left half done.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use futures_util::future::{BoxFuture, FutureExt, Shared};
use tokio::sync::Notify;

use super::stop::{Stop, StopSignal};
use super::PullError;

pub(crate) type Running<T> = Shared<BoxFuture<'static, Result<T, PullError>>>;

type Entries<K, T> = Arc<Mutex<HashMap<K, Entry<T>>>>;

pub(crate) struct InFlight<K, T: Clone> {
    entries: Entries<K, T>,
    next_id: AtomicU64,
    /// How long work goes on with nobody waiting for it.
    grace: Duration,
}

struct Entry<T: Clone> {
    /// Tells this run from a later one for the same key.
    id: u64,
    result: Running<T>,
    waiters: usize,
    /// Since when nobody waits, while nobody does.
    idle_since: Option<Instant>,
    stop: StopSignal,
    /// Woken when the last waiter leaves.
    idle: Arc<Notify>,
}

/// One caller's hold on work in flight.
pub(crate) struct Ticket<K: Hash + Eq + Clone, T: Clone> {
    /// The work's result (awaiting it does not count as waiting: hold `waiter` for that).
    pub(crate) result: Running<T>,
    /// This caller joined work already running.
    pub(crate) joined: bool,
    pub(crate) waiter: Waiter<K, T>,
}

impl<K: Hash + Eq + Clone, T: Clone> Ticket<K, T> {
    /// Waits for the result, counted as a waiter until it comes (or this is dropped).
    pub(crate) async fn wait(self) -> Result<T, PullError> {
        let _waiting = self.waiter;
        self.result.await
    }
}

/// Counts its caller as waiting until it leaves or is dropped.
pub(crate) struct Waiter<K: Hash + Eq + Clone, T: Clone> {
    entries: Entries<K, T>,
    key: K,
    id: u64,
    grace: Duration,
    left: bool,
}

fn locked<K, T: Clone>(entries: &Mutex<HashMap<K, Entry<T>>>) -> MutexGuard<'_, HashMap<K, Entry<T>>> {
    entries.lock().unwrap_or_else(|p| p.into_inner())
}

impl<K: Hash + Eq + Clone, T: Clone> Waiter<K, T> {
    /// Stops waiting. True when the work was left with nobody waiting: it
    /// stops now (no grace) or after the grace period unless someone joins.
    pub(crate) fn leave(mut self) -> bool {
        self.depart()
    }

    fn depart(&mut self) -> bool {
        if std::mem::replace(&mut self.left, true) {
            return false;
        }
        let mut entries = locked(&self.entries);
        let Some(entry) = entries.get_mut(&self.key).filter(|e| e.id == self.id) else {
            return false; // Already over.
        };
        entry.waiters = entry.waiters.saturating_sub(1);
        if entry.waiters > 0 {
            return false;
        }
        if self.grace.is_zero() {
            if let Some(entry) = entries.remove(&self.key) {
                entry.stop.stop(Stop::Abandoned);
            }
        } else {
            entry.idle_since = Some(Instant::now());
            entry.idle.notify_one();
        }
        true
    }
}

impl<K: Hash + Eq + Clone, T: Clone> Drop for Waiter<K, T> {
    fn drop(&mut self) {
        self.depart();
    }
}

impl<K, T> InFlight<K, T>
where
    K: Hash + Eq + Clone + Send + 'static,
    T: Clone + Send + Sync + 'static,
{
    /// Work that stops `grace` after its last caller left (at once for zero).
    pub(crate) fn new(grace: Duration) -> Self {
        Self { entries: Arc::default(), next_id: AtomicU64::new(0), grace }
    }

    /// A hold on the work for `key`: started by `work` (given the signal
    /// that asks it to stop) unless running already.
    pub(crate) fn run<F>(&self, key: K, work: impl FnOnce(StopSignal) -> F) -> Ticket<K, T>
    where
        F: Future<Output = Result<T, PullError>> + Send + 'static,
    {
        let mut entries = locked(&self.entries);
        if let Some(entry) = entries.get_mut(&key) {
            entry.waiters += 1;
            entry.idle_since = None;
            let waiter = self.waiter(key, entry.id);
            return Ticket { result: entry.result.clone(), joined: true, waiter };
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let stop = StopSignal::default();
        let idle = Arc::new(Notify::new());
        let work = work(stop.clone());
        let watchdog = stop_when_idle(self.entries.clone(), key.clone(), id, self.grace, idle.clone(), stop.clone());
        let (map, done_key, grace) = (self.entries.clone(), key.clone(), self.grace);
        let task = tokio::spawn(async move {
            tokio::pin!(work);
            let finished = if grace.is_zero() {
                Some((&mut work).await)
            } else {
                tokio::select! {
                    result = &mut work => Some(result),
                    () = watchdog => None,
                }
            };
            // Asked to stop: the work cleans up and ends.
            let result = match finished {
                Some(result) => result,
                None => work.await,
            };
            let mut entries = locked(&map);
            if entries.get(&done_key).is_some_and(|e| e.id == id) {
                entries.remove(&done_key);
            }
            result
        });
        let result = async move { task.await.unwrap_or_else(|e| Err(PullError::Internal(format!("pull task: {e}")))) }
            .boxed()
            .shared();
        entries.insert(key.clone(), Entry { id, result: result.clone(), waiters: 1, idle_since: None, stop, idle });
        Ticket { result, joined: false, waiter: self.waiter(key, id) }
    }

    fn waiter(&self, key: K, id: u64) -> Waiter<K, T> {
        Waiter { entries: self.entries.clone(), key, id, grace: self.grace, left: false }
    }

    /// How many keys have work running.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        locked(&self.entries).len()
    }
}

/// Resolves once the run `id` of `key` has had nobody waiting for `grace`,
/// having forgotten it and asked it to stop.
async fn stop_when_idle<K: Hash + Eq, T: Clone>(
    entries: Entries<K, T>,
    key: K,
    id: u64,
    grace: Duration,
    idle: Arc<Notify>,
    stop: StopSignal,
) {
    enum Next {
        WaitForIdle,
        Sleep(Duration),
        Stopped,
        /// The run is over (or forgotten): nothing to watch.
        Gone,
    }
    loop {
        idle.notified().await;
        loop {
            let next = {
                let mut entries = locked(&entries);
                match entries.get(&key).filter(|e| e.id == id).map(|e| e.idle_since) {
                    None => Next::Gone,
                    Some(None) => Next::WaitForIdle,
                    Some(Some(since)) if since.elapsed() >= grace => {
                        entries.remove(&key);
                        Next::Stopped
                    }
                    Some(Some(since)) => Next::Sleep(grace - since.elapsed()),
                }
            };
            match next {
                Next::WaitForIdle => break,
                Next::Sleep(left) => tokio::time::sleep(left).await,
                Next::Stopped => {
                    stop.stop(Stop::Abandoned);
                    return;
                }
                Next::Gone => return std::future::pending().await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Work that runs until it is asked to stop.
    async fn until_stopped(stop: StopSignal) -> Result<usize, PullError> {
        let why = stop.stopped().await;
        Err(PullError::Internal(format!("stopped: {why:?}")))
    }

    #[tokio::test]
    async fn one_run_per_key_every_caller_answered() {
        let flights: InFlight<&str, usize> = InFlight::new(Duration::from_secs(60));
        let started = Arc::new(AtomicUsize::new(0));
        let mut waits = Vec::new();
        for _ in 0..5 {
            let started = started.clone();
            let ticket = flights.run("a", move |_| async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                Ok(started.fetch_add(1, Ordering::SeqCst) + 41)
            });
            waits.push(ticket.wait());
        }
        for wait in waits {
            assert_eq!(wait.await.unwrap(), 41);
        }
        assert_eq!(started.load(Ordering::SeqCst), 1);
        assert_eq!(flights.len(), 0);
    }

    #[tokio::test]
    async fn work_nobody_waits_for_stops_after_the_grace_period_and_a_new_caller_starts_anew() {
        let flights: InFlight<&str, usize> = InFlight::new(Duration::from_millis(200));
        let ticket = flights.run("a", until_stopped);
        let result = ticket.result.clone();
        let left_at = Instant::now();
        assert!(ticket.waiter.leave());
        let stopped = result.await.unwrap_err();
        assert!(stopped.to_string().contains("Abandoned"), "{stopped}");
        assert!(left_at.elapsed() >= Duration::from_millis(200), "{:?}", left_at.elapsed());
        assert_eq!(flights.len(), 0);
        let again = flights.run("a", |_| async { Ok(7) });
        assert!(!again.joined);
        assert_eq!(again.wait().await.unwrap(), 7);
    }

    #[tokio::test]
    async fn a_caller_back_within_the_grace_period_keeps_the_work() {
        let flights: InFlight<&str, usize> = InFlight::new(Duration::from_millis(200));
        let first = flights.run("a", |_| async {
            tokio::time::sleep(Duration::from_millis(600)).await;
            Ok(5)
        });
        drop(first); // The caller went away...
        tokio::time::sleep(Duration::from_millis(100)).await;
        let back = flights.run("a", until_stopped); // ...and another came back in time.
        assert!(back.joined);
        assert_eq!(back.wait().await.unwrap(), 5);
    }

    #[tokio::test]
    async fn without_grace_the_last_waiter_leaving_stops_the_work_at_once() {
        let flights: InFlight<&str, usize> = InFlight::new(Duration::ZERO);
        let first = flights.run("a", until_stopped);
        let second = flights.run("a", until_stopped);
        assert!(second.joined);
        let result = first.result.clone();
        assert!(!first.waiter.leave(), "another still waits");
        assert!(second.waiter.leave());
        assert_eq!(flights.len(), 0, "forgotten at once");
        assert!(result.await.is_err());
    }
}
