//! nidus: an embedded, minimal Kubernetes container runtime speaking CRI
//! runtime.v1 (and runtime.v1alpha2 for older kubelets) over a Unix socket.
//! See docs/design.md for the process model.

pub mod api {
    //! The CRI runtime.v1 API, generated from `proto/api.proto`.
    #![allow(clippy::all)]
    tonic::include_proto!("runtime.v1");
}

pub(crate) mod api_v1alpha2 {
    //! The CRI runtime.v1alpha2 services, generated from `proto/v1alpha2/api.proto`
    //! with every message mapped to its runtime.v1 namesake in [`crate::api`]: the
    //! two share field numbers and wire types (tests/proto_wire.rs proves it),
    //! so the runtime.v1 code serves both.
    #![allow(clippy::all)]
    include!(concat!(env!("OUT_DIR"), "/v1alpha2-server/runtime.v1alpha2.rs"));
}

pub mod apparmor;
pub(crate) mod bounded_file;
pub mod capabilities;
pub(crate) mod cdi;
pub mod cgroups;
pub mod checkpoint;
pub mod clock;
pub mod config;
pub mod container;
pub mod cri;
pub mod daemon;
pub(crate) mod events;
#[doc(hidden)]
pub mod fuzzing;
pub(crate) mod helper;
pub(crate) mod hooks;
pub(crate) mod ids;
pub mod image;
// The one module allowed `unsafe` (see Cargo.toml [lints]).
#[allow(unsafe_code)]
pub mod linux;
pub(crate) mod metrics;
pub mod monitor;
pub(crate) mod network;
pub(crate) mod paths;
pub mod pod;
pub(crate) mod quote;
pub(crate) mod registry;
pub mod resources;
pub(crate) mod runtime;
pub mod seccomp;
pub(crate) mod service;
pub mod socket_client;
pub mod stats;
pub(crate) mod store;
pub mod streaming;
pub(crate) mod systemd;
pub(crate) mod undo;
pub mod wire;
