//! nidus: an embedded, minimal Kubernetes container runtime speaking CRI
//! runtime.v1 over a Unix socket. See DESIGN.md for the process model.

pub mod api {
    //! The CRI runtime.v1 API, generated from `proto/api.proto`.
    #![allow(clippy::all)]
    tonic::include_proto!("runtime.v1");
}

pub mod cgroups;
pub mod config;
pub mod container;
pub mod cri;
pub mod daemon;
pub mod ids;
pub mod linux;
pub mod monitor;
pub mod pod;
pub mod runtime;
pub mod store;
