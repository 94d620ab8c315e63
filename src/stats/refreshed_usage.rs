//! A directory tree's disk usage kept at most `max_age` old, refreshed in
//! the background: what ImageFsInfo reports for the containers' filesystem.
//! Walking every container's directory at every call made that call grow
//! with the pod count; kubelet asks for it every 10 s (its eviction and
//! summary loops), so a figure that old is what it expects (containerd's
//! snapshot usage is refreshed on the same period).

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::disk::{self, DiskUsage};

/// How old a figure may be before a call starts a refresh.
pub(crate) const MAX_AGE: Duration = Duration::from_secs(10);

pub(crate) struct RefreshedUsage {
    dir: PathBuf,
    max_age: Duration,
    /// The last figure and when its walk started.
    last: Mutex<Option<(Instant, DiskUsage)>>,
    /// Held by the walk under way: at most one at a time.
    walking: Arc<tokio::sync::Mutex<()>>,
}

impl RefreshedUsage {
    pub(crate) fn new(dir: PathBuf, max_age: Duration) -> Self {
        Self { dir, max_age, last: Mutex::new(None), walking: Arc::default() }
    }

    /// The directory's usage (zero when it is missing). The first call walks
    /// the tree and waits for it; later ones answer the last figure at once,
    /// starting one walk in the background once it is older than `max_age`.
    pub(crate) async fn get(self: &Arc<Self>) -> DiskUsage {
        let last = *self.last();
        match last {
            Some((at, usage)) => {
                if at.elapsed() >= self.max_age {
                    if let Ok(walking) = self.walking.clone().try_lock_owned() {
                        let this = self.clone();
                        tokio::spawn(async move {
                            this.walk().await;
                            drop(walking);
                        });
                    }
                }
                usage
            }
            None => {
                let _walking = self.walking.lock().await;
                // A walk that ended while this call waited has the figure.
                let last = *self.last();
                match last {
                    Some((_, usage)) => usage,
                    None => self.walk().await,
                }
            }
        }
    }

    /// One walk of the tree on the blocking pool; its figure becomes the last.
    async fn walk(&self) -> DiskUsage {
        let started = Instant::now();
        let dir = self.dir.clone();
        let usage =
            tokio::task::spawn_blocking(move || disk::usage_of(&dir).unwrap_or_default()).await.unwrap_or_default();
        *self.last() = Some((started, usage));
        usage
    }

    fn last(&self) -> MutexGuard<'_, Option<(Instant, DiskUsage)>> {
        self.last.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn answers_the_last_figure_and_refreshes_it_once_stale() {
        let scratch = tempfile::tempdir().unwrap();
        let usage = Arc::new(RefreshedUsage::new(scratch.path().to_path_buf(), Duration::from_millis(200)));
        let empty = usage.get().await;
        assert_eq!(empty.inodes, 1, "the directory itself");

        std::fs::write(scratch.path().join("a"), vec![1u8; 64 * 1024]).unwrap();
        assert_eq!(usage.get().await, empty, "a fresh figure is answered as it is");

        tokio::time::sleep(Duration::from_millis(250)).await;
        assert_eq!(usage.get().await, empty, "a stale figure is answered while it is refreshed");
        let deadline = Instant::now() + Duration::from_secs(5);
        let grown = loop {
            let now = usage.get().await;
            if now != empty || Instant::now() > deadline {
                break now;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        assert_eq!(grown.inodes, 2, "the refresh counted the new file");
        assert!(grown.bytes >= empty.bytes + 64 * 1024);
    }

    #[tokio::test]
    async fn a_missing_directory_uses_nothing() {
        let scratch = tempfile::tempdir().unwrap();
        let usage = Arc::new(RefreshedUsage::new(scratch.path().join("gone"), MAX_AGE));
        assert_eq!(usage.get().await, DiskUsage::default());
    }
}
