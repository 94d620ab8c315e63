//! Leases of pulls in flight (`images/pulling/pull-<pid>-<random>.json`):
//! the blobs and layers a pull is storing, kept from garbage collection from
//! before its first blob is stored until its image is in the index, so
//! collections run beside pulls (also one that `nidus image import` runs in
//! its own process). A lease records the process that holds it (pid, start
//! time, boot id): one whose process is gone — a daemon killed mid-pull, a
//! reboot — protects nothing and is dropped. Written atomically, not
//! fsynced: a power loss ends its pull. The caller holds the store lock for
//! every call.

use std::path::Path;

use super::digest::Digest;
use super::lease::{Lease, Leases};
use super::ImageError;
use crate::clock::now_ns;
use crate::linux::process::ProcessIdentity;

#[derive(Debug)]
pub(crate) struct PullLeases {
    leases: Leases,
    /// This process, as its leases record it.
    me: ProcessIdentity,
}

impl PullLeases {
    pub(crate) fn open(dir: &Path) -> Result<Self, ImageError> {
        let pid = std::process::id() as i32;
        let me = ProcessIdentity::of(pid).map_err(|e| ImageError::io("reading this process's identity", e))?;
        Ok(Self { leases: Leases::open(dir)?, me })
    }

    /// Records a lease of this process on `blobs` and `layers` (diff ids);
    /// returns its holder name.
    pub(crate) fn put(&self, blobs: Vec<Digest>, layers: Vec<Digest>) -> Result<String, ImageError> {
        let holder = format!("pull-{}-{:016x}", self.me.pid, rand::random::<u64>());
        let lease = Lease {
            mounted: Vec::new(),
            holder: holder.clone(),
            images: Vec::new(),
            diff_ids: layers,
            blobs,
            process: Some(self.me.clone()),
            created_at_ns: now_ns(),
        };
        self.leases.put(&lease)?;
        Ok(holder)
    }

    pub(crate) fn remove(&self, holder: &str) -> Result<bool, ImageError> {
        self.leases.remove(holder)
    }

    /// The leases of processes still running; those of processes that are
    /// gone, and what interrupted writes left, are removed.
    pub(crate) fn live(&self) -> Result<Vec<Lease>, ImageError> {
        self.leases.remove_interrupted_writes();
        let mut live = Vec::new();
        for lease in self.leases.all()? {
            let running = lease.process.as_ref().is_some_and(|p| *p == self.me || p.is_running());
            if running {
                live.push(lease);
            } else {
                tracing::info!(holder = %lease.holder, "dropping the lease of a pull whose process is gone");
                self.leases.remove(&lease.holder)?;
            }
        }
        Ok(live)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_of_this_process_live_and_of_a_process_that_is_gone_go() {
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path().to_path_buf();
        let leases = PullLeases::open(&dir).unwrap();
        let blob = Digest::of(b"blob");
        let holder = leases.put(vec![blob.clone()], Vec::new()).unwrap();
        // This pid in an earlier boot: the same number, another process.
        let earlier = ProcessIdentity { boot_id: "an-earlier-boot".into(), ..leases.me.clone() };
        let gone = Lease {
            mounted: Vec::new(),
            holder: format!("pull-{}-0000000000000000", earlier.pid),
            images: Vec::new(),
            diff_ids: Vec::new(),
            blobs: vec![blob.clone()],
            process: Some(earlier),
            created_at_ns: 0,
        };
        Leases::open(&dir).unwrap().put(&gone).unwrap();
        let live = leases.live().unwrap();
        assert_eq!(live.len(), 1);
        assert_eq!((live[0].holder.as_str(), &live[0].blobs), (holder.as_str(), &vec![blob]));
        assert!(!dir.join(format!("{}.json", gone.holder)).exists());
        assert!(leases.remove(&holder).unwrap());
        assert!(leases.live().unwrap().is_empty());
        crate::store::remove_tree(&dir).unwrap();
    }
}
