//! De-duplication of work in flight: the first caller for a key starts the
//! work as its own task; every caller for the same key meanwhile waits for
//! that one result. The task runs to its end even when every caller has gone
//! (a pull is finished or failed whole, never left half done).

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use futures_util::future::{BoxFuture, FutureExt, Shared};

use super::PullError;

type Running<T> = Shared<BoxFuture<'static, Result<T, PullError>>>;

pub struct InFlight<K, T: Clone> {
    running: Arc<Mutex<HashMap<K, Running<T>>>>,
}

impl<K, T: Clone> Default for InFlight<K, T> {
    fn default() -> Self {
        Self { running: Arc::default() }
    }
}

impl<K, T> InFlight<K, T>
where
    K: Hash + Eq + Clone + Send + 'static,
    T: Clone + Send + Sync + 'static,
{
    /// The result of the work for `key`: started by `work` unless running
    /// already. The flag says whether this caller joined work already running.
    pub fn run<F>(&self, key: K, work: impl FnOnce() -> F) -> (Running<T>, bool)
    where
        F: Future<Output = Result<T, PullError>> + Send + 'static,
    {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(existing) = running.get(&key) {
            return (existing.clone(), true);
        }
        let map = self.running.clone();
        let done_key = key.clone();
        let work = work();
        let task = tokio::spawn(async move {
            let result = work.await;
            map.lock().unwrap_or_else(|p| p.into_inner()).remove(&done_key);
            result
        });
        let shared = async move { task.await.unwrap_or_else(|e| Err(PullError::Internal(format!("pull task: {e}")))) }
            .boxed()
            .shared();
        running.insert(key, shared.clone());
        (shared, false)
    }

    /// How many keys have work running.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.running.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn one_run_per_key_every_caller_answered() {
        let flights: InFlight<&str, usize> = InFlight::default();
        let started = Arc::new(AtomicUsize::new(0));
        let mut waits = Vec::new();
        for _ in 0..5 {
            let started = started.clone();
            let (wait, _) = flights.run("a", move || async move {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                Ok(started.fetch_add(1, Ordering::SeqCst) + 41)
            });
            waits.push(wait);
        }
        for wait in waits {
            assert_eq!(wait.await.unwrap(), 41);
        }
        assert_eq!(started.load(Ordering::SeqCst), 1);
        assert_eq!(flights.len(), 0);
    }
}
