//! The pod CIDRs in force and where they came from: the node's CIDRs that
//! kubelet sent with UpdateRuntimeConfig, else the config's
//! `network.pod_cidr`. kubelet sends them only when they change, so the last
//! ones received are kept durably under `root` (`network/pod-cidr.json`,
//! written atomically and fsynced) and a restarted daemon goes on using them.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use super::lock;
use crate::config::cidr;
use crate::store::{self, Durability, StoreError};

const FILE: &str = "pod-cidr.json";

/// The CIDRs kubelet sent last, as kept on disk.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
struct Received {
    /// As sent: comma-separated, one per IP family.
    pod_cidr: String,
    /// When it was received (ns since the epoch).
    received_at_ns: i64,
}

pub(crate) struct PodCidrs {
    file: PathBuf,
    configured: String,
    /// The last CIDRs received and their parsed form.
    received: Mutex<Option<(Received, Vec<IpNet>)>>,
}

impl PodCidrs {
    /// The CIDRs kept in `dir` (a file that cannot be read or parsed is
    /// logged and left aside: the config's are in force until kubelet sends
    /// new ones), with `configured` (`network.pod_cidr`) as the fallback.
    pub(crate) fn load(dir: &Path, configured: &str) -> Self {
        let file = dir.join(FILE);
        let received = match store::read_json::<Received>(&file) {
            Ok(Some(r)) => match cidr::parse_list(&r.pod_cidr) {
                Ok(nets) => {
                    tracing::info!(pod_cidr = %r.pod_cidr, "pod CIDR from kubelet, kept from before the restart");
                    Some((r, nets))
                }
                Err(e) => {
                    tracing::warn!(file = %file.display(), error = %e, "the kept pod CIDR is invalid; using network.pod_cidr");
                    None
                }
            },
            Ok(None) => None,
            Err(e) => {
                tracing::warn!(file = %file.display(), error = %e, "cannot read the kept pod CIDR; using network.pod_cidr");
                None
            }
        };
        Self { file, configured: configured.to_string(), received: Mutex::new(received) }
    }

    /// The CIDRs in force.
    pub(crate) fn in_force(&self) -> Vec<IpNet> {
        match &*lock(&self.received) {
            Some((_, nets)) => nets.clone(),
            None => cidr::parse_list(&self.configured).unwrap_or_default(),
        }
    }

    /// Only those kubelet sent (CNI's `ipRanges` come from kubelet alone, as containerd's).
    pub(crate) fn received(&self) -> Vec<IpNet> {
        lock(&self.received).as_ref().map(|(_, nets)| nets.clone()).unwrap_or_default()
    }

    /// UpdateRuntimeConfig: new CIDRs (comma-separated); empty keeps those in
    /// force. They are on disk before they are used, so a failure leaves the
    /// old ones in force and kubelet sends them again.
    pub(crate) fn set(&self, text: &str, now_ns: i64) -> Result<(), PodCidrError> {
        if text.trim().is_empty() {
            return Ok(());
        }
        let nets = cidr::parse_list(text).map_err(PodCidrError::Invalid)?;
        let mut received = lock(&self.received);
        if received.as_ref().is_some_and(|(r, _)| r.pod_cidr == text) {
            return Ok(());
        }
        let record = Received { pod_cidr: text.to_string(), received_at_ns: now_ns };
        if let Some(dir) = self.file.parent() {
            store::create_dir_all(dir, 0o700)
                .map_err(|source| StoreError::Write { path: dir.to_path_buf(), source })?;
        }
        store::write_json_with(&self.file, &record, Durability::Durable).map_err(PodCidrError::Store)?;
        tracing::info!(pod_cidr = %text, "pod CIDR updated");
        *received = Some((record, nets));
        Ok(())
    }

    /// Status verbose: the CIDRs in force and their source.
    pub(crate) fn describe(&self) -> serde_json::Value {
        let cidrs: Vec<String> = self.in_force().iter().map(|c| c.to_string()).collect();
        match &*lock(&self.received) {
            Some((r, _)) => serde_json::json!({"podCidrs": cidrs, "source": "UpdateRuntimeConfig",
                "receivedAtNs": r.received_at_ns}),
            None => serde_json::json!({"podCidrs": cidrs, "source": "config network.pod_cidr"}),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum PodCidrError {
    #[error("{0}")]
    Invalid(String),
    #[error("cannot keep the pod CIDR: {0}")]
    Store(#[from] StoreError),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn received_cidrs_are_kept_across_a_reload_and_bad_ones_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("network");
        let cidrs = PodCidrs::load(&dir, "10.87.0.0/16");
        assert_eq!(cidrs.in_force(), vec!["10.87.0.0/16".parse::<IpNet>().unwrap()]);
        assert!(cidrs.received().is_empty());
        assert!(matches!(cidrs.set("not a cidr", 1), Err(PodCidrError::Invalid(_))));
        cidrs.set("10.244.1.0/24,fd00:1::/64", 5).unwrap();
        cidrs.set("", 6).unwrap();
        let again = PodCidrs::load(&dir, "10.87.0.0/16");
        let sent: Vec<IpNet> = vec!["10.244.1.0/24".parse().unwrap(), "fd00:1::/64".parse().unwrap()];
        assert_eq!(again.in_force(), sent);
        assert_eq!(again.received(), sent);
        assert_eq!(again.describe()["source"], "UpdateRuntimeConfig");
        assert_eq!(again.describe()["receivedAtNs"], 5);
        std::fs::write(dir.join(FILE), "{").unwrap();
        let broken = PodCidrs::load(&dir, "10.87.0.0/16");
        assert_eq!(broken.describe()["source"], "config network.pod_cidr");
    }
}
