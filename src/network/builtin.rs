//! nidus's built-in pod network (placeholder while it is written).

use std::net::IpAddr;

use ipnet::IpNet;

use super::{Attachment, NetworkConfig, PodInfo};

#[derive(Debug, thiserror::Error)]
pub enum BuiltinError {
    #[error("{0}")]
    Unavailable(String),
}

pub struct Builtin {}

pub fn host_veth_name(sandbox_id: &str) -> String {
    format!("nv{}", &sandbox_id[..sandbox_id.len().min(12)])
}

impl Builtin {
    pub fn new(_config: &NetworkConfig, _root: &std::path::Path, _state: &std::path::Path) -> std::io::Result<Self> {
        Ok(Self {})
    }
    pub fn usable(&self) -> Result<(), BuiltinError> {
        Err(BuiltinError::Unavailable("not available in this build".into()))
    }
    pub async fn attach(&self, _pod: &PodInfo, _cidrs: &[IpNet]) -> Result<Vec<IpAddr>, BuiltinError> {
        Err(BuiltinError::Unavailable("not available in this build".into()))
    }
    pub async fn detach(&self, _a: &Attachment) -> Result<(), BuiltinError> {
        Ok(())
    }
}
