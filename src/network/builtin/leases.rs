//! Address leases of the built-in network: one file per leased address
//! (`root/network/builtin/leases/<address>`, holding the sandbox id),
//! created exclusively before the address is used, removed at DEL. A daemon
//! crash leaves either no file or a file a later DEL of that sandbox
//! removes. They are not fsynced: after a power loss no pod runs, and leases
//! whose owner has no attachment record (or whose owner was not written)
//! are released at start.

use std::collections::HashMap;
use std::io::Write;
use std::net::IpAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use ipnet::IpNet;

use crate::network::lock;
use crate::store;

#[derive(Debug, thiserror::Error)]
pub(crate) enum LeaseError {
    #[error("no free address left in the pod CIDR {0}")]
    Exhausted(IpNet),
    #[error(transparent)]
    Io(#[from] std::io::Error),
}

pub(crate) struct Leases {
    dir: PathBuf,
    /// Address → sandbox id, and the next offset to try per network.
    state: Mutex<(HashMap<IpAddr, String>, HashMap<IpNet, u128>)>,
}

/// The `n`th address of `net` (0 is the network's own address).
pub(crate) fn nth(net: &IpNet, n: u128) -> Option<IpAddr> {
    let size = 1u128 << (net.max_prefix_len() - net.prefix_len());
    if n >= size {
        return None;
    }
    Some(match net.network() {
        IpAddr::V4(base) => IpAddr::V4((u32::from(base) + n as u32).into()),
        IpAddr::V6(base) => IpAddr::V6((u128::from(base) + n).into()),
    })
}

/// How many addresses of `net` pods can get: all but the network address,
/// the gateway (the first) and, for IPv4, the broadcast address.
fn pod_offsets(net: &IpNet) -> (u128, u128) {
    let bits = (net.max_prefix_len() - net.prefix_len()).min(64);
    let size = 1u128 << bits;
    let last = if net.max_prefix_len() == 32 { size - 2 } else { size - 1 };
    (2, last)
}

impl Leases {
    pub(crate) fn open(dir: &Path) -> std::io::Result<Self> {
        store::create_dir_all(dir, 0o700)?;
        store::remove_interrupted_writes(dir);
        let mut held = HashMap::new();
        for entry in std::fs::read_dir(dir)?.flatten() {
            let Some(ip) = entry.file_name().to_str().and_then(|n| n.parse::<IpAddr>().ok()) else {
                continue;
            };
            let owner = std::fs::read_to_string(entry.path()).unwrap_or_default().trim().to_string();
            held.insert(ip, owner);
        }
        Ok(Self { dir: dir.to_path_buf(), state: Mutex::new((held, HashMap::new())) })
    }

    /// Leases one address of each network to `owner` (an owner that holds one
    /// already keeps it: an ADD repeated after a crash).
    pub(crate) fn lease(&self, owner: &str, nets: &[IpNet]) -> Result<Vec<IpAddr>, LeaseError> {
        let mut state = lock(&self.state);
        let (held, next) = &mut *state;
        let mut leased = Vec::new();
        for net in nets {
            if let Some(ip) = held.iter().find(|(ip, o)| o.as_str() == owner && net.contains(*ip)).map(|(ip, _)| *ip) {
                leased.push(ip);
                continue;
            }
            let (first, last) = pod_offsets(net);
            let start = next.get(net).copied().filter(|n| (first..=last).contains(n)).unwrap_or(first);
            let mut offset = start;
            let ip = loop {
                let candidate = nth(net, offset).ok_or_else(|| std::io::Error::other("address out of range"))?;
                if !held.contains_key(&candidate) && self.create(&candidate, owner)? {
                    break candidate;
                }
                offset = if offset >= last { first } else { offset + 1 };
                if offset == start {
                    return Err(LeaseError::Exhausted(*net));
                }
            };
            next.insert(*net, if offset >= last { first } else { offset + 1 });
            held.insert(ip, owner.to_string());
            leased.push(ip);
        }
        Ok(leased)
    }

    /// Creates a lease file; false when it exists (another process's).
    fn create(&self, ip: &IpAddr, owner: &str) -> std::io::Result<bool> {
        let path = self.dir.join(ip.to_string());
        let mut file = match std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => return Ok(false),
            Err(e) => return Err(e),
        };
        file.write_all(owner.as_bytes())?;
        Ok(true)
    }

    /// Releases every address `owner` holds.
    pub(crate) fn release(&self, owner: &str) -> std::io::Result<()> {
        let mut state = lock(&self.state);
        let mine: Vec<IpAddr> = state.0.iter().filter(|(_, o)| o.as_str() == owner).map(|(ip, _)| *ip).collect();
        for ip in &mine {
            match std::fs::remove_file(self.dir.join(ip.to_string())) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {
                    state.0.remove(ip);
                }
            }
        }
        Ok(())
    }

    /// Every owner holding an address.
    pub(crate) fn owners(&self) -> Vec<String> {
        let state = lock(&self.state);
        let mut owners: Vec<String> = state.0.values().cloned().collect();
        owners.sort();
        owners.dedup();
        owners
    }

    /// Addresses held, for tests and Status.
    pub(crate) fn count(&self) -> usize {
        lock(&self.state).0.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leases_are_unique_persistent_and_released() {
        let scratch = tempfile::tempdir().unwrap();
        let dir = scratch.path().to_path_buf();
        let _ = std::fs::remove_dir_all(&dir);
        let net: IpNet = "10.5.0.0/29".parse().unwrap();
        let leases = Leases::open(&dir).unwrap();
        let a = leases.lease("a", &[net]).unwrap();
        assert_eq!(a, vec!["10.5.0.2".parse::<IpAddr>().unwrap()]);
        assert_eq!(leases.lease("a", &[net]).unwrap(), a, "an owner keeps its address");
        let b = leases.lease("b", &[net]).unwrap();
        assert_ne!(a, b);
        // Reopened (a restart): the leases are still held.
        let leases = Leases::open(&dir).unwrap();
        assert_eq!(leases.count(), 2);
        for owner in ["c", "d", "e"] {
            leases.lease(owner, &[net]).unwrap();
        }
        assert!(leases.lease("g", &[net]).is_err(), "a /29 has five pod addresses");
        leases.release("a").unwrap();
        assert_eq!(leases.lease("g", &[net]).unwrap(), a);
        assert_eq!(leases.owners(), ["b", "c", "d", "e", "g"]);
        // A lease file whose owner was never written (a power cut) has the empty owner.
        std::fs::write(dir.join("10.5.1.9"), "").unwrap();
        assert!(Leases::open(&dir).unwrap().owners().contains(&String::new()));
        assert_eq!(nth(&net, 1), Some("10.5.0.1".parse().unwrap()));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
