//! The attachment cache: one durable record per pod network attachment under
//! `root/network/attachments`, as libcni keeps its result cache. It is written
//! before the first plugin runs (so a crash at any point leaves a record that
//! a later DEL works from), completed with the result, and removed only after
//! a successful DEL. It keeps the configuration the pod was attached with, so
//! DEL works after the configuration changed, after a daemon restart and
//! after a reboot.
//!
//! CNI records are fsynced: a plugin's leases (host-local's) outlive a power
//! loss, so the record that releases them must too. Built-in records are
//! only atomic: after a power loss their veths and host ports are gone, and
//! the leases no record owns are released at start (`Builtin::sweep`).

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::store::{self, StoreError};

/// How a pod was attached.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub(crate) enum Backend {
    Cni {
        /// The configuration file it came from (for messages).
        file: PathBuf,
        /// The configuration list as it was at ADD.
        list: Value,
        /// `CNI_ARGS` and runtime config given at ADD (DEL gets the same).
        args: String,
        runtime_config: Map<String, Value>,
        /// The ADD result; None until ADD finished.
        result: Option<Value>,
    },
    Builtin {
        /// The bridge the pod's veth is enslaved to.
        bridge: String,
        /// The host end of the pod's veth.
        host_veth: String,
        /// Host ports forwarded to the pod.
        host_ports: Vec<crate::network::HostPort>,
    },
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct Attachment {
    pub(crate) sandbox_id: String,
    pub(crate) ifname: String,
    pub(crate) backend: Backend,
    /// The pod's addresses (empty until attached).
    pub(crate) ips: Vec<IpAddr>,
}

#[derive(Debug, Clone)]
pub(crate) struct AttachmentCache {
    dir: PathBuf,
}

impl AttachmentCache {
    pub(crate) fn open(root: &Path) -> std::io::Result<Self> {
        let dir = root.join("network").join("attachments");
        store::create_dir_all(&dir, 0o700)?;
        store::remove_interrupted_writes(&dir);
        Ok(Self { dir })
    }

    fn path(&self, sandbox_id: &str) -> PathBuf {
        self.dir.join(format!("{sandbox_id}.json"))
    }

    /// Writes (replaces) a pod's record atomically, durably when asked.
    pub(crate) fn write(&self, attachment: &Attachment, durability: store::Durability) -> Result<(), StoreError> {
        store::write_json_with(&self.path(&attachment.sandbox_id), attachment, durability)
    }

    pub(crate) fn read(&self, sandbox_id: &str) -> Result<Option<Attachment>, StoreError> {
        store::read_json(&self.path(sandbox_id))
    }

    /// Removes a pod's record (after a successful DEL), durably when asked.
    pub(crate) fn remove(&self, sandbox_id: &str, durability: store::Durability) -> std::io::Result<()> {
        match std::fs::remove_file(self.path(sandbox_id)) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ if durability == store::Durability::Durable => store::sync_dir(&self.dir),
            _ => Ok(()),
        }
    }

    /// The pods that have a record.
    pub(crate) fn ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = std::fs::read_dir(&self.dir)
            .map(|entries| {
                entries
                    .flatten()
                    .filter_map(|e| e.file_name().to_str().and_then(|n| n.strip_suffix(".json")).map(str::to_string))
                    .filter(|n| !n.starts_with('.'))
                    .collect()
            })
            .unwrap_or_default();
        ids.sort();
        ids
    }
}
