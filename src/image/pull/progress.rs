//! Progress of the pulls in flight: per layer, bytes received of its size;
//! what the daemon logs at an interval, lists (`nidus image pulls`, Status
//! verbose) and what `nidus image pull` draws.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::{Deserialize, Serialize};

/// Where a layer of a pull is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum LayerState {
    Waiting,
    Downloading,
    /// Being fetched by another pull of the same layer.
    Shared,
    /// Already in the store: not fetched.
    Present,
    Done,
}

impl LayerState {
    fn from_u8(v: u8) -> Self {
        match v {
            1 => Self::Downloading,
            2 => Self::Shared,
            3 => Self::Present,
            4 => Self::Done,
            _ => Self::Waiting,
        }
    }

    fn to_u8(self) -> u8 {
        match self {
            Self::Waiting => 0,
            Self::Downloading => 1,
            Self::Shared => 2,
            Self::Present => 3,
            Self::Done => 4,
        }
    }

    pub(crate) fn finished(self) -> bool {
        matches!(self, Self::Present | Self::Done)
    }
}

/// One layer's counters, shared with its download.
#[derive(Debug)]
pub(crate) struct LayerProgress {
    pub(crate) digest: String,
    pub(crate) size: u64,
    bytes: AtomicU64,
    state: AtomicU8,
}

impl LayerProgress {
    pub(crate) fn received(&self, n: u64) {
        self.bytes.fetch_add(n, Ordering::Relaxed);
    }

    /// A download starting again from its first byte.
    pub(crate) fn restart(&self) {
        self.bytes.store(0, Ordering::Relaxed);
    }

    pub(crate) fn set(&self, state: LayerState) {
        self.state.store(state.to_u8(), Ordering::Relaxed);
        if state.finished() {
            self.bytes.store(self.size, Ordering::Relaxed);
        }
    }
}

/// One pull in flight.
#[derive(Debug)]
pub(crate) struct PullProgress {
    pub(crate) image: String,
    started: Instant,
    layers: Mutex<Vec<Arc<LayerProgress>>>,
}

impl PullProgress {
    /// Sets the layers once the manifest is known.
    pub(crate) fn set_layers(&self, layers: &[(String, u64)]) -> Vec<Arc<LayerProgress>> {
        let made: Vec<Arc<LayerProgress>> = layers
            .iter()
            .map(|(digest, size)| {
                Arc::new(LayerProgress {
                    digest: digest.clone(),
                    size: *size,
                    bytes: AtomicU64::new(0),
                    state: AtomicU8::new(0),
                })
            })
            .collect();
        *self.layers.lock().unwrap_or_else(|p| p.into_inner()) = made.clone();
        made
    }

    pub(crate) fn snapshot(&self) -> PullSnapshot {
        let layers: Vec<LayerSnapshot> = self
            .layers
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|l| LayerSnapshot {
                digest: l.digest.clone(),
                size: l.size,
                bytes: l.bytes.load(Ordering::Relaxed).min(l.size),
                state: LayerState::from_u8(l.state.load(Ordering::Relaxed)),
            })
            .collect();
        PullSnapshot {
            image: self.image.clone(),
            elapsed_ms: self.started.elapsed().as_millis() as u64,
            layers_done: layers.iter().filter(|l| l.state.finished()).count(),
            bytes: layers.iter().map(|l| l.bytes).sum(),
            total_bytes: layers.iter().map(|l| l.size).sum(),
            layers,
        }
    }
}

/// What a pull in flight has done, as listed and logged.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct PullSnapshot {
    pub(crate) image: String,
    pub(crate) elapsed_ms: u64,
    pub(crate) layers_done: usize,
    pub(crate) bytes: u64,
    pub(crate) total_bytes: u64,
    pub(crate) layers: Vec<LayerSnapshot>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct LayerSnapshot {
    pub(crate) digest: String,
    pub(crate) size: u64,
    pub(crate) bytes: u64,
    pub(crate) state: LayerState,
}

impl PullSnapshot {
    /// Bytes per second since the pull began.
    pub(crate) fn rate(&self) -> u64 {
        (self.bytes as u128 * 1000 / u128::from(self.elapsed_ms.max(1))) as u64
    }
}

/// Every pull in flight.
#[derive(Debug, Default)]
pub(crate) struct Pulls {
    next: AtomicU64,
    running: Mutex<BTreeMap<u64, Arc<PullProgress>>>,
}

/// Keeps a pull listed until dropped.
pub(crate) struct Listed<'a> {
    pulls: &'a Pulls,
    id: u64,
    pub(crate) progress: Arc<PullProgress>,
}

impl Drop for Listed<'_> {
    fn drop(&mut self) {
        self.pulls.running.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.id);
    }
}

impl Pulls {
    pub(crate) fn start(&self, image: &str) -> Listed<'_> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let progress =
            Arc::new(PullProgress { image: image.to_string(), started: Instant::now(), layers: Mutex::default() });
        self.running.lock().unwrap_or_else(|p| p.into_inner()).insert(id, progress.clone());
        Listed { pulls: self, id, progress }
    }

    pub(crate) fn snapshots(&self) -> Vec<PullSnapshot> {
        self.running.lock().unwrap_or_else(|p| p.into_inner()).values().map(|p| p.snapshot()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listed_while_running_with_counts() {
        let pulls = Pulls::default();
        {
            let listed = pulls.start("docker.io/library/busybox:latest");
            let layers = listed.progress.set_layers(&[("sha256:a".into(), 100), ("sha256:b".into(), 50)]);
            layers[0].set(LayerState::Downloading);
            layers[0].received(40);
            layers[1].set(LayerState::Present);
            let all = pulls.snapshots();
            assert_eq!(all.len(), 1);
            assert_eq!((all[0].layers_done, all[0].bytes, all[0].total_bytes), (1, 90, 150));
        }
        assert!(pulls.snapshots().is_empty());
    }
}
