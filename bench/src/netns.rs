//! Network namespaces the harness makes (`ip netns add`), one per runtime:
//! each daemon runs inside its own, so host-network pods share that
//! namespace, never the machine's. Deleted when dropped.

use std::path::PathBuf;
use std::process::Command;

use anyhow::Result;

use crate::host;

#[derive(Debug)]
pub struct NetNs {
    pub name: String,
}

impl NetNs {
    /// Creates the namespace and brings its loopback up.
    pub fn create(name: &str) -> Result<Self> {
        host::run("ip", &["netns", "add", name])?;
        let ns = Self { name: name.to_string() };
        host::run("ip", &["-n", name, "link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// The bind mount naming it, for `nsenter --net=`.
    pub fn path(&self) -> PathBuf {
        PathBuf::from("/run/netns").join(&self.name)
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "delete", &self.name]).status();
    }
}
